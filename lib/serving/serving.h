/*
 * Serving: turns Function objects into worker pools. It materializes the
 * artifact, builds each runtime's command line, starts workers through the
 * runtime port, probes them until ready, captures their output into the
 * function's log ring, and publishes each function's pool to the gateway.
 *
 * Threads: everything here runs on the platform loop, except
 * funcd_serving_logs (any thread).
 */
#ifndef FUNCD_SERVING_SERVING_H
#define FUNCD_SERVING_SERVING_H

#include <cjson/cJSON.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/un.h>

#include "funcd/funcd.h"
#include "metrics/metrics.h"
#include "pool/pool.h"
#include "serving/logs.h"
#include "serving/netsvc.h"
#include "util/log.h"

typedef struct funcd_serving funcd_serving;

typedef struct funcd_serving_config {
    struct event_base *loop;
    funcd_runtime *runtime; /* NULL: functions cannot run */
    funcd_blob *blob;
    funcd_gateway *gateway;
    const char *shim_dir;  /* funcd-exec, funcd-python.py, funcd-node.js */
    const char *state_dir; /* runtime sockets and the bundle cache go below it */
    const funcd_logger *logger;
    funcd_log_observer_fn observer;
    void *observer_payload;
    /* A function's replicas or last cold start changed (status is stale). */
    void (*changed)(const char *ns, const char *name, void *payload);
    void *changed_payload;
    struct funcd_logstore *logstore; /* borrowed; NULL: logs live in memory only */
    struct funcd_sources *sources;   /* borrowed; NULL: no image or git sources */
    const funcd_edge *edge_defaults; /* borrowed; NULL: every edge feature off, auth open */
    funcd_metrics *metrics;          /* borrowed; NULL: cold starts are not counted */
    struct funcd_localapi *localapi; /* borrowed; NULL: spec.bindings have no effect */
    /* Services workers find in their network namespace (netsvc.h); borrowed. */
    struct funcd_netsvc *netsvc[FUNCD_NETSVC_MAX];
    size_t n_netsvc;
    int sandboxed; /* workers have namespaces of their own (the runtime sandboxes) */
    /* Places for workers: each namespace gets a budget of this many (0: no
     * limit) whose parent is `node_budget` (borrowed; NULL: none). */
    unsigned namespace_max_workers;
    funcd_pool_budget *node_budget;
} funcd_serving_config;

typedef struct funcd_serving_status {
    int ready;           /* the function can take requests (maybe from zero) */
    char reason[64];     /* CamelCase, for the Ready condition */
    char message[512];
    int has_pool;
    funcd_pool_stats stats;
    char resolved[80]; /* image digest or git commit the function runs, or "" */
    char last_oom[160]; /* the last replica killed at its memory limit, or "" */
} funcd_serving_status;

/* What a gateway learns of a worker through the slot functions of
 * funcd/sys/gateway.h (slot.c): the pool worker's data. */
typedef struct funcd_serving_worker {
    uint64_t id;               /* unique for the life of the process */
    struct sockaddr_un addr;   /* the worker's socket */
    char endpoint[5 + sizeof(((struct sockaddr_un *)0)->sun_path)]; /* "unix:" + the path */
    char replica[80];
    pthread_mutex_t invocation_lock;
    char invocation[40]; /* the request in flight (or the last one), for log lines without an id */
    unsigned in_flight;
    int invocation_solo; /* `invocation` is the only request in flight since it began */
    int64_t ended_ms;    /* when the last request ended (monotonic) */
    /* Set once the process is gone (any thread may look; the two strings are
     * final once it is): what the callers of requests it took are told. */
    atomic_int ended;
    char end_reason[32];   /* "OOMKilled", or "" */
    char end_message[160]; /* "replica f-3 exited with status 3"; never its output */
} funcd_serving_worker;

int funcd_serving_new(funcd_serving **out, const funcd_serving_config *cfg);
/* Unroutes every function and stops its workers (SIGTERM, then SIGKILL
 * after a grace period); the loop must run for them to exit. */
void funcd_serving_close(funcd_serving *s);
/* Worker processes started and not yet exited. */
unsigned funcd_serving_live_workers(const funcd_serving *s);
/* Requests in flight or waiting for a worker, over every function. */
unsigned funcd_serving_busy(funcd_serving *s);
/* Closes (if not done) and releases; workers still running are left to
 * the runtime, which kills them when it is freed. */
void funcd_serving_free(funcd_serving *s);

/* The replicas and queue of every function, for the metrics (a
 * funcd_metrics_gauge_source; `payload` is the serving). Any thread. */
void funcd_serving_gauges(void *payload, funcd_metrics_gauge_put put, void *ctx);

/* Brings the function to its spec; fills `st` either way. */
void funcd_serving_apply(funcd_serving *s, const char *ns, const char *name, const cJSON *fn,
                         funcd_serving_status *st);
/* The function cannot run for a reason found before serving saw its spec
 * (a Secret it reads is missing): its workers drain, its requests get 503
 * with `message`, and `st` says Ready=False with `reason`. */
void funcd_serving_refuse(funcd_serving *s, const char *ns, const char *name, const cJSON *fn,
                          const char *reason, const char *message, funcd_serving_status *st);
/* The function is gone: unroute it and drain its workers. */
void funcd_serving_remove(funcd_serving *s, const char *ns, const char *name);
/* The function's log ring (a reference: unref it), or NULL. Any thread. */
funcd_log_ring *funcd_serving_logs(funcd_serving *s, const char *ns, const char *name);

/* The invocation replica `replica` of Function ns/name runs now, when it
 * runs exactly one and has run no other since that one began (its id into
 * `out`): 1; else 0. Read-only, for the egress gateway's audit lines (only
 * replicas with netsvc services are looked at). Any thread. */
int funcd_serving_invocation_of(funcd_serving *s, const char *ns, const char *name,
                                const char *replica, char *out, size_t len);

/* Where an internal invocation of `ns`/`name` goes (lib/invoke): the
 * function's current target, a reference (unref it), or NULL with `*known`
 * 1 when the function exists but cannot run now (503) and 0 when there is
 * no such function (404); `*timeout_ms` gets its spec.timeout. Any thread. */
funcd_fn_target *funcd_serving_route(funcd_serving *s, const char *ns, const char *name,
                                     uint64_t *timeout_ms, int *known);

/* What the function's effective edge asks of a caller (for the data plane's
 * /async/, which the gateway's edge does not see): its authentication
 * stance and body cap (0: none). 0, or -1 when there is no such function.
 * On the loop (the edge is replaced there). */
int funcd_serving_edge_of(funcd_serving *s, const char *ns, const char *name,
                          funcd_edge_auth *auth, uint64_t *max_body_bytes);

/* A function's pool as the gateway SPI names it (funcd_route.target); the
 * slot functions (slot.c) take it back. */
static inline funcd_fn_target *funcd_serving_target(funcd_pool *pool)
{
    return (funcd_fn_target *)pool;
}

#endif
