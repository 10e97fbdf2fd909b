/* What tests may reach inside the sqlite store; not for the rest of the library. */
#ifndef FUNCD_STORE_SQLITE_PRIVATE_H
#define FUNCD_STORE_SQLITE_PRIVATE_H

#include <sqlite3.h>

#include "funcd/sys/store.h"

/* The store's own connection (NULL if `s` is not a sqlite store), so a test
 * can set per-connection limits such as PRAGMA max_page_count. Use it only
 * while no other thread uses the store. */
sqlite3 *funcd__store_sqlite_db(funcd_store *s);

#endif
