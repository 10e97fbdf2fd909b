/*
 * Objects in the store: key layout, server-set metadata, optimistic
 * concurrency. The control-plane API and the controllers both go through
 * here, so there is one definition of what create/replace/delete mean.
 *
 * Keys: /registry/{plural}/{namespace}/{name}. Values: the object's JSON
 * without metadata.resourceVersion, which is the store revision of the key
 * and is put back on every read.
 */
#ifndef FUNCD_OBJECTS_OBJECTS_H
#define FUNCD_OBJECTS_OBJECTS_H

#include <cjson/cJSON.h>

#include "api/api.h"
#include "funcd/sys/store.h"
#include "util/buf.h"

#define FUNCD_OBJECTS_KEY_ROOT "/registry/"

int funcd_objects_key(funcd_buf *out, const funcd_kind *kind, const char *ns, const char *name);
/* "/registry/{plural}/{ns}/" or, with ns NULL, "/registry/{plural}/". */
int funcd_objects_prefix(funcd_buf *out, const funcd_kind *kind, const char *ns);
/* Splits a key into its kind, namespace and name (pointers into `key` for
 * ns/name are copied into the buffers). 0 or FUNCD_EINVAL. */
int funcd_objects_parse_key(const char *key, const funcd_kind **kind, char *ns, size_t ns_len,
                             char *name, size_t name_len);

/* Parses a stored value and sets metadata.resourceVersion to `revision`. */
cJSON *funcd_objects_decode(const void *value, size_t len, uint64_t revision);

/* Reads one object. FUNCD_ENOTFOUND (message names kind/ns/name). */
int funcd_objects_get(funcd_store *s, const funcd_kind *kind, const char *ns, const char *name,
                       cJSON **out, uint64_t *revision);

/*
 * Creates `obj` (validated and normalized by the caller) in `ns`: sets
 * metadata.namespace, uid, generation 1, creationTimestamp, drops status.
 * FUNCD_EEXISTS if it exists. `*out` is the stored object with resourceVersion.
 */
int funcd_objects_create(funcd_store *s, const funcd_kind *kind, const char *ns, const cJSON *obj,
                          cJSON **out);

/*
 * Replaces (or creates, `*created` = 1) the object. A metadata.resourceVersion
 * in `obj` must match the stored one (FUNCD_ECONFLICT otherwise); uid,
 * creationTimestamp and status are kept; generation grows when the spec
 * (Secret: type and data) changes.
 */
int funcd_objects_replace(funcd_store *s, const funcd_kind *kind, const char *ns, const char *name,
                           const cJSON *obj, int *created, cJSON **out);

/* Deletes and returns the last state of the object. FUNCD_ENOTFOUND. */
int funcd_objects_delete(funcd_store *s, const funcd_kind *kind, const char *ns, const char *name,
                          cJSON **out);

/* Writes `status` (copied) if the object is still at `revision`. */
int funcd_objects_put_status(funcd_store *s, const funcd_kind *kind, const char *ns,
                              const char *name, uint64_t revision, const cJSON *status);

#endif
