/*
 * The embedded gateway's parts: the route table (embedded.c) and the
 * proxy of one invocation to a worker (proxy.c).
 */
#ifndef FUNCD_GATEWAY_GATEWAY_H
#define FUNCD_GATEWAY_GATEWAY_H

#include <h2o.h>

#include "funcd/sys/gateway.h"
#include "gateway/embedded.h"
#include "metrics/metrics.h"
#include "util/log.h"

/* Per gateway thread (one h2o context each). */
typedef struct gw_timeouts gw_timeouts;
typedef struct gw_thread {
    h2o_context_t *ctx;
    h2o_multithread_receiver_t receiver; /* grants of cold requests */
    gw_timeouts *timeouts;               /* one h2o timeout + client ctx per duration */
    unsigned tickets;                    /* grants still expected on this thread */
    struct ticket *free_ticket;          /* one kept for the next request (proxy.c) */
    struct upconn *idle;                 /* idle worker connections (proxy.c) */
    unsigned n_idle;
    uint64_t rng[2];                     /* invocation ids */
    const funcd_logger *logger;          /* funcd's log: what a caller is not told */
    struct funcd_edge_ring *edge;        /* request records (lib/trace), or NULL: off */
    unsigned metrics_slot;               /* this thread's counters in each function's block */
} gw_thread;

/* A request routed to a function, as the metrics count it (metrics.c):
 * begun when the route is found, ended exactly once by whatever answers. */
typedef struct gw_track {
    funcd_metrics_fn *fn; /* NULL: not counted (no registry, or ended) */
    unsigned slot;
    uint64_t start_ns;
} gw_track;

/* Counts the request's answer (`status`, 0: none was sent) and duration. */
void funcd_gw_track_end(gw_track *track, int status);
/* The edge answered the request itself (a limit, its authentication
 * stance) instead of invoking the function: counts it in
 * funcd_edge_rejections_total by `reason`, and ends the track with the
 * answer's status. Call right after sending the answer. */
void funcd_gw_track_rejected(gw_track *track, h2o_req_t *req, funcd_metrics_reason reason);

/* The thread's state (set by on_thread_init). */
gw_thread *funcd_gw_thread(void);

/* Proxies `req` to one of the function's workers (a reference to `target`
 * passes to the invocation, and `track` is ended by it); rest = "/..." with
 * the query. `subject`: the authenticated caller's name (the edge checked
 * its token: Authorization is not passed on, X-Funcd-Subject is), or NULL. */
void funcd_gw_invoke(gw_thread *t, h2o_req_t *req, funcd_fn_target *target, uint64_t timeout_ms,
                     const char *ns, size_t nsl, const char *name, size_t nl, h2o_iovec_t rest,
                     const char *subject, const gw_track *track);

/* The thread's h2o timeout of `ms` (made on first use, released by
 * funcd_gw_thread_dispose), or NULL when out of memory. */
h2o_timeout_t *funcd_gw_timeout(gw_thread *t, uint64_t ms);

/* A random word of the thread's generator (ids: unique, not secret). */
uint64_t funcd_gw_random(gw_thread *t);

/* A new invocation id (a random UUID) into `out`. */
void funcd_gw_new_id(gw_thread *t, char out[40]);

/* A JSON Status answer. */
void funcd_gw_send_status(h2o_req_t *req, int code, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* GET /metrics on the data plane: every series, as Prometheus text. */
void funcd_gw_send_metrics(h2o_req_t *req, funcd_metrics *m);

void funcd_gw_thread_init(gw_thread *t, h2o_context_t *ctx);

/* Closes the thread's idle worker connections. */
void funcd_gw_thread_close_idle(gw_thread *t);
/* Runs the loop until no grant is outstanding, then releases the thread's
 * timeouts and receiver. */
void funcd_gw_thread_dispose(gw_thread *t);

#endif
