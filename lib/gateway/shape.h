/*
 * Shaping at the edge (docs/edge.md, "Shaping"): what the gateway does to
 * a function's answers on its own authority, from the function's
 * spec.edge — CORS (preflights answered here, Access-Control-Allow-Origin
 * on the rest), response headers set and removed, and gzip.
 *
 * A route's shaping is compiled once, when the route is set, into an
 * immutable, reference-counted funcd_shape; a function with nothing to
 * shape has none (NULL), and the request path then costs one branch.
 * With one, a request costs a prefilter from its pool, and when it is
 * compressed, a deflate stream from a per-thread cache (no allocation and
 * no system call once the thread is warm).
 *
 * Threads: funcd_shape_new/ref/unref anywhere; the rest on a gateway
 * thread, for requests of that thread.
 */
#ifndef FUNCD_GATEWAY_SHAPE_H
#define FUNCD_GATEWAY_SHAPE_H

#include <h2o.h>
#include <stddef.h>

#include "funcd/sys/gateway.h"

typedef struct funcd_shape funcd_shape;

/* Compiles the shaping part of `edge` (cors_*, headers_*, compress; see
 * funcd/sys/gateway.h and docs/edge.md): CORS is on with has_cors, "*" in
 * a list allows any; GET, HEAD and POST are always allowed methods (a
 * browser does not preflight them for their method); an empty
 * allowMethods is answered as "GET, HEAD, POST". *out = NULL when `edge`
 * (which may be NULL) asks for nothing. -1 only when out of memory.
 * Framing headers (Content-Length, Transfer-Encoding, Connection, ...) and
 * Content-Encoding are left alone by set and remove: the gateway owns
 * them (validation refuses them first). */
int funcd_shape_new(funcd_shape **out, const funcd_edge *edge);
/* `fresh` (not yet shared) takes `old`'s learned gzip tables: a route set
 * again for the same function (each reconcile sets it) keeps what its
 * gateway threads learned of its answers. Either may be NULL. */
void funcd_shape_inherit(funcd_shape *fresh, const funcd_shape *old);
void funcd_shape_ref(funcd_shape *s);
void funcd_shape_unref(funcd_shape *s); /* NULL is fine */

/*
 * Called by the gateway for each request of a function with shaping, once
 * its route is known and before anything is answered. Every answer to the
 * request (the worker's, and funcd's own JSON Status) then passes through
 * the shaping; the request holds a reference to `s` until it ends. Returns
 * 1 when it answered the request itself (a CORS preflight: 204, or 403 for
 * one the configuration does not allow), else 0: go on. `preflight` is
 * funcd_shape_is_preflight(s, req), which the gateway has already asked.
 */
int funcd_shape_request(h2o_req_t *req, funcd_shape *s, int preflight);

/* 1 when `req` is a CORS preflight that `s` answers (funcd_shape_request
 * will): the gateway lets it pass its authentication and limits, which a
 * preflight (no credentials, no worker) has nothing to do with. */
int funcd_shape_is_preflight(const funcd_shape *s, h2o_req_t *req);

/* Frees this thread's cached deflate streams (at gateway thread exit). */
void funcd_shape_thread_dispose(void);

/* ---- the parsers, for tests and fuzzing -------------------------------- */

/* 1 when the Accept-Encoding value `v` accepts gzip (gzip, x-gzip or "*"
 * with a non-zero q). */
int funcd_shape_accepts_gzip(const char *v, size_t len);

/* 1 when a Content-Type value is worth compressing: any text/ type (but
 * text/event-stream), JSON, JavaScript, XML (+xml, so SVG), WebAssembly. */
int funcd_shape_compressible_type(const char *v, size_t len);

/* 1 when a preflight from `origin`, for `method` with the comma list of
 * request headers `req_headers`, is allowed by `s`. */
int funcd_shape_preflight_allowed(const funcd_shape *s, h2o_iovec_t origin, h2o_iovec_t method,
                                  h2o_iovec_t req_headers);

/* 1 when `origin` is one `s` allows. */
int funcd_shape_origin_allowed(const funcd_shape *s, h2o_iovec_t origin);

#endif
