/*
 * KV on the local API (docs/services.md): the operations a function bound
 * to a KVStore (spec.bindings.kv) makes on it, kept in the store port under
 * FUNCD_KV_PREFIX<ns>/<store>/<key> (sqlite with --data-dir, PostgreSQL in
 * a cluster). A value is stored as 8 bytes of expiry (milliseconds since the
 * epoch, little-endian, 0: never) and the bytes given; the store's revision
 * of the key is its revision.
 */
#ifndef FUNCD_LOCALAPI_KV_H
#define FUNCD_LOCALAPI_KV_H

#include <event2/http.h>

#include "funcd/sys/store.h"

#define FUNCD_KV_PREFIX "/funcd/kv/"

/* Answers one request under /kv/ for a function of namespace `ns` bound to
 * the KVStores `bound` (NULL-terminated). */
void funcd_kv_request(funcd_store *store, const char *ns, char *const *bound,
                      struct evhttp_request *req, const char *target);

#endif
