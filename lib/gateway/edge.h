/*
 * The edge: what runs in front of the activator for every request of a
 * function (docs/edge.md, docs/adr/0035-edge-before-the-activator.md).
 *
 * The configuration is the public `funcd_edge` of funcd/sys/gateway.h:
 *
 *   auth              FUNCD_EDGE_AUTH_OPEN | _AUTHENTICATED (+ authorize, its payload)
 *   rps, burst        token bucket, per function or per client address
 *   max_body_bytes    413 above it
 *   max_in_flight     503 above it
 *   cors_*            spec.edge.cors (has_cors: configured at all)
 *   headers_set       {name, value} pairs set on every answer
 *   headers_remove    names removed from every answer
 *   compress          gzip answers
 *
 * Every limit is 0 for "off". The platform builds one per function from
 * the daemon's defaults (funcd_with_edge_*) and the function's validated
 * spec.edge (funcd_edge_build) and hands it to the gateway with the route;
 * the embedded gateway keeps a copy (funcd_edge_dup: one allocation) in its
 * route entry, and the limiter below, whose state outlives route updates.
 *
 * Threads: a funcd_edge is immutable once built. The limiter is shared by
 * every gateway thread without locks (atomics only).
 */
#ifndef FUNCD_GATEWAY_EDGE_H
#define FUNCD_GATEWAY_EDGE_H

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdint.h>

#include "funcd/sys/gateway.h"

/* The gateway's own ceiling on request bodies (it buffers them): a larger
 * spec.edge.limits.maxBodyBytes is refused by validation. */
#define FUNCD_EDGE_MAX_BODY_CEILING (64ull * 1024 * 1024)

/* The effective edge of a function: `defaults` (auth, limits,
 * limit_per_client; authorize and its payload) with `spec_edge` (a
 * validated spec.edge, or NULL) over them. 0, or FUNCD_ENOMEM. */
int funcd_edge_build(const cJSON *spec_edge, const funcd_edge *defaults, funcd_edge **out);

/* Whether anything in `e` must be looked at per request. */
static inline int funcd_edge_active(const funcd_edge *e)
{
    return e && (e->auth != FUNCD_EDGE_AUTH_OPEN || e->rps || e->max_body_bytes ||
                 e->max_in_flight);
}

/* ---- the limiter: one per function, shared by the gateway threads ------- */

typedef struct funcd_edge_limiter funcd_edge_limiter;

funcd_edge_limiter *funcd_edge_limiter_new(void);
void funcd_edge_limiter_ref(funcd_edge_limiter *l);
void funcd_edge_limiter_unref(funcd_edge_limiter *l);
/* Readies the per-client table when `e` counts per client (allocates: call
 * where a route is set, not per request). 0, or FUNCD_ENOMEM. */
int funcd_edge_limiter_prepare(funcd_edge_limiter *l, const funcd_edge *e);

/* Takes a token of e->rps/e->burst (for `client`, a hash of the client's
 * address, when e->limit_per_client). 0: admitted; else the whole seconds
 * until a token is there (for Retry-After, at least 1). `now_ns` is
 * monotonic. */
uint32_t funcd_edge_rate_take(funcd_edge_limiter *l, const funcd_edge *e, uint64_t client,
                              uint64_t now_ns);

/* Enters the function's in-flight count: 1 when under `max`, 0 when full
 * (nothing taken). Pair each 1 with one funcd_edge_in_flight_leave. */
int funcd_edge_in_flight_enter(funcd_edge_limiter *l, uint32_t max);
void funcd_edge_in_flight_leave(funcd_edge_limiter *l);

/* A hash of a client address's bytes for funcd_edge_rate_take (never 0). */
uint64_t funcd_edge_client_hash(const void *addr, size_t len);

#endif
