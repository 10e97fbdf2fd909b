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

/* What a route asks for, as plain strings (copied by funcd_shape_new). */
typedef struct funcd_shape_spec {
    /* CORS: on when allow_origins is not empty; "*" allows any origin. */
    const char *const *allow_origins;
    size_t n_allow_origins;
    /* Methods a preflight may ask for ("*": any); GET, HEAD and POST
     * always may (browsers do not preflight them for their method). */
    const char *const *allow_methods;
    size_t n_allow_methods;
    /* Request headers a preflight may ask for (any case; "*": any). */
    const char *const *allow_headers;
    size_t n_allow_headers;
    unsigned max_age; /* seconds a browser may cache a preflight; 0: no Access-Control-Max-Age */
    /* Response headers set (replacing any of that name) and removed. */
    const char *const *set_names;
    const char *const *set_values;
    size_t n_set;
    const char *const *remove;
    size_t n_remove;
    int compress; /* gzip what is worth it (funcd_shape_compressible_type) */
} funcd_shape_spec;

typedef struct funcd_shape funcd_shape;

/* Compiles `spec`; *out = NULL when it asks for nothing. Fails only when
 * out of memory. Framing headers (Content-Length, Transfer-Encoding,
 * Connection, ...) and Content-Encoding are left alone by set and remove:
 * the gateway owns them. */
int funcd_shape_new(funcd_shape **out, const funcd_shape_spec *spec);
void funcd_shape_ref(funcd_shape *s);
void funcd_shape_unref(funcd_shape *s); /* NULL is fine */

/*
 * Called by the gateway for each request of a function with shaping, once
 * its route is known and before anything is answered. Every answer to the
 * request (the worker's, and funcd's own JSON Status) then passes through
 * the shaping; the request holds a reference to `s` until it ends. Returns
 * 1 when it answered the request itself (a CORS preflight: 204, or 403 for
 * one the configuration does not allow), else 0: go on.
 */
int funcd_shape_request(h2o_req_t *req, funcd_shape *s);

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
