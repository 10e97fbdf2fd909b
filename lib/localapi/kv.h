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

#include <event2/event.h>
#include <event2/http.h>
#include <stdint.h>

#include "funcd/sys/store.h"

#define FUNCD_KV_PREFIX "/funcd/kv/"

typedef struct funcd_kv_sweeper funcd_kv_sweeper;

/* Answers one request under /kv/ for a function of namespace `ns` bound to
 * the KVStores `bound` (NULL-terminated); expiries of keys written are
 * noted with `sw` (may be NULL). */
void funcd_kv_request(funcd_store *store, funcd_kv_sweeper *sw, const char *ns,
                      char *const *bound, struct evhttp_request *req, const char *target);

/* A stored value's expiry (ms since the epoch), 0: never. */
uint64_t funcd_kv_expiry(const void *value, size_t len);

/* The sweeper (kv_sweep.c) removes expired keys, and the keys of deleted
 * KVStores, from the store: a minute after its last sweep, or soon after a
 * noted expiry, never twice within five seconds. Platform loop only. */
int funcd_kv_sweeper_new(funcd_kv_sweeper **out, struct event_base *loop, funcd_store *store);
/* Sweeps run only while `may_sweep` says 1 (the lease holder). */
void funcd_kv_sweeper_set_gate(funcd_kv_sweeper *sw, int (*may_sweep)(void *), void *payload);
void funcd_kv_sweeper_note(funcd_kv_sweeper *sw, uint64_t expiry_ms);
uint64_t funcd_kv_sweeper_removed(const funcd_kv_sweeper *sw);
void funcd_kv_sweeper_free(funcd_kv_sweeper *sw);

#endif
