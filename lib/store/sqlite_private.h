/* What tests and the platform may reach inside the sqlite store. */
#ifndef FUNCD_STORE_SQLITE_PRIVATE_H
#define FUNCD_STORE_SQLITE_PRIVATE_H

#include <sqlite3.h>

#include "funcd/sys/store.h"

/* The store's own connection (NULL if `s` is not a sqlite store), so a test
 * can set per-connection limits such as PRAGMA max_page_count. Use it only
 * while no other thread uses the store. */
sqlite3 *funcd__store_sqlite_db(funcd_store *s);

/* From now on, deleting a key that starts with `prefix` (NULL: none) also
 * removes the key's rows from the change log, up to the delete itself, and
 * empties the write-ahead log; a watch from before such a delete whose
 * prefix covers the key gets FUNCD_EGONE. The platform sets it to the
 * Secrets' prefix (docs/adr/0025-secret-encryption.md). FUNCD_EINVAL if `s`
 * is not a sqlite store. */
int funcd__store_sqlite_purge_prefix(funcd_store *s, const char *prefix);

#endif
