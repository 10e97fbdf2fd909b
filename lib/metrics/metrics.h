/*
 * Metrics: what funcd counts about the functions it serves, walked at scrape
 * time into the Prometheus text format (0.0.4, text.c) or by any other
 * consumer through funcd_metrics_collect (docs/observability.md).
 *
 * Request counters are kept per gateway thread: each function has one block
 * of counters per thread ("slot"), written only by that thread with plain
 * (relaxed atomic) stores, and summed when someone collects. So the warm
 * request path takes no lock, allocates nothing and makes no syscall for
 * them. Cold starts (rare, on the platform loop) are counted under the
 * registry's lock. Gauges (replicas, queue depth) are not kept here at all:
 * a gauge source reads them from the pools at collection time.
 *
 * A function's block lives while something holds it (its route in the
 * gateway, its entry in serving). Once the last holder lets go it is no
 * longer collected, and it is freed at a later collection when no gateway
 * thread is inside a request that counts into it. A function of the same
 * name created again before that continues the same counters (a counter
 * only ever grows; Prometheus takes a reset as well).
 *
 * Threads: everything may be called from any thread, except that the
 * per-slot calls (enter / done / reject) for one slot must all come from
 * one thread at a time (the gateway thread that owns the slot).
 */
#ifndef FUNCD_METRICS_METRICS_H
#define FUNCD_METRICS_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

typedef struct funcd_metrics funcd_metrics;
typedef struct funcd_metrics_fn funcd_metrics_fn;

/* A registry with `slots` per-thread counter blocks per function (the
 * gateway's thread count; at least 1). 0, or FUNCD_ENOMEM. */
int funcd_metrics_new(funcd_metrics **out, unsigned slots);
/* Frees the registry and every block (after the gateway is freed). */
void funcd_metrics_free(funcd_metrics *m);
unsigned funcd_metrics_slots(const funcd_metrics *m);

/* ---- functions ----------------------------------------------------------- */

/* The block of function ns/name, created when new, with one more holder.
 * NULL only when out of memory (then nothing is counted for it). */
funcd_metrics_fn *funcd_metrics_fn_hold(funcd_metrics *m, const char *ns, const char *name);
/* One holder less (NULL-safe); see the top of this file. */
void funcd_metrics_fn_drop(funcd_metrics_fn *fn);

/* Why the edge answered instead of the function (edge rejections). */
typedef enum funcd_metrics_reason {
    FUNCD_METRICS_RATE_LIMITED = 0,  /* 429: the function's (or a client's) token bucket */
    FUNCD_METRICS_BODY_TOO_LARGE,    /* 413: spec.edge.limits.maxBodyBytes */
    FUNCD_METRICS_IN_FLIGHT_LIMIT,   /* 503: spec.edge.limits.maxInFlight */
    FUNCD_METRICS_UNAUTHENTICATED,   /* 401: edge auth "authenticated", no valid token */
    FUNCD_METRICS_FORBIDDEN,         /* 403: a token whose role may not invoke there */
    FUNCD_METRICS_AUTH_UNAVAILABLE,  /* 503: "authenticated" where no token can be checked */
    FUNCD_METRICS_REASONS
} funcd_metrics_reason;

/* The label value of a reason ("rate_limited", ...). */
const char *funcd_metrics_reason_name(funcd_metrics_reason r);

/* Gateway thread owning `slot`: a request begins to count into `fn`. Call
 * while the route that handed out `fn` is still held (under the route
 * table's read lock), so that the block cannot go away before. */
void funcd_metrics_fn_enter(funcd_metrics_fn *fn, unsigned slot);
/* The same thread: the request entered above ended with HTTP `code` (0: the
 * client left before any answer, counted as 499) after `duration_ns`. The
 * last touch of `fn` for that request. */
void funcd_metrics_fn_done(funcd_metrics_fn *fn, unsigned slot, int code, uint64_t duration_ns);
/* The same thread, between enter and done: the edge rejected the request. */
void funcd_metrics_fn_reject(funcd_metrics_fn *fn, unsigned slot, funcd_metrics_reason reason);

/* A worker of ns/name started and became ready in `duration_ns` (a cold
 * start). Counted only while the function's block is held. */
void funcd_metrics_cold_start(funcd_metrics *m, const char *ns, const char *name,
                              uint64_t duration_ns);

/* The monotonic clock in nanoseconds (clock_gettime: the vDSO, no syscall). */
uint64_t funcd_metrics_now_ns(void);

/* ---- gauges, read at collection time ----------------------------------- */

typedef struct funcd_metrics_gauges {
    const char *ns, *name;
    unsigned ready, starting, stopping; /* replicas by the pool's state */
    unsigned waiting;                   /* requests queued for a slot */
    unsigned in_flight;                 /* requests holding a slot */
} funcd_metrics_gauges;

typedef void (*funcd_metrics_gauge_put)(void *ctx, const funcd_metrics_gauges *g);
/* Calls `put(ctx, ...)` once per function it knows, from the calling thread. */
typedef void (*funcd_metrics_gauge_source)(void *payload, funcd_metrics_gauge_put put,
                                           void *ctx);

/* Sets where gauges come from (NULL: none). Call before collections start. */
void funcd_metrics_set_gauge_source(funcd_metrics *m, funcd_metrics_gauge_source src,
                                    void *payload);

/* ---- Sites (lib/sites) ---------------------------------------------------- */

/* The Sites' files kept in memory now and their budget (docs/sites.md):
 * funcd_site_cache_bytes, funcd_site_cache_files, funcd_site_cache_limit_bytes.
 * Called under the registry's lock: it must only read (atomics). */
typedef void (*funcd_metrics_sites_source)(void *payload, uint64_t *bytes, uint64_t *limit,
                                           uint64_t *files);
/* Sets (NULL: clears) where those come from; clear before the source goes. */
void funcd_metrics_set_sites_source(funcd_metrics *m, funcd_metrics_sites_source src,
                                    void *payload);

/* ---- eventing (events.c) ------------------------------------------------ */

typedef enum funcd_metrics_event_outcome {
    FUNCD_METRICS_EVENT_DELIVERED = 0,
    FUNCD_METRICS_EVENT_RETRIED,
    FUNCD_METRICS_EVENT_DEADLETTERED,
    FUNCD_METRICS_EVENT_OUTCOMES
} funcd_metrics_event_outcome;

/* One delivery attempt of an event of EventSource ns/eventsource ended so
 * (funcd_events_total). Any thread; takes a lock of its own. A source's
 * series stays after the source is deleted (a counter only grows). */
void funcd_metrics_event(funcd_metrics *m, const char *ns, const char *eventsource,
                         funcd_metrics_event_outcome outcome);

/* Why an event of an EventSource was dropped before it was queued
 * (funcd_event_source_dropped_total{namespace,eventsource,reason}):
 * backlog_full (a bus source held as many messages as it may), rejected
 * (the target refused it for good: it does not fit the workflow),
 * source_removed (held by a source that was deleted or is no longer a bus
 * source). */
typedef enum funcd_metrics_drop_reason {
    FUNCD_METRICS_DROP_BACKLOG_FULL = 0,
    FUNCD_METRICS_DROP_REJECTED,
    FUNCD_METRICS_DROP_SOURCE_REMOVED,
    FUNCD_METRICS_DROP_REASONS
} funcd_metrics_drop_reason;

/* One event of EventSource ns/eventsource dropped so. Any thread. */
void funcd_metrics_event_dropped(funcd_metrics *m, const char *ns, const char *eventsource,
                                 funcd_metrics_drop_reason reason);

/* Where the delivery queue's gauges come from, read at collection time
 * from the collecting thread: `depth` this node's items waiting for their
 * time and running (funcd_async_queue_depth{state}); `deadletters` calls
 * put(ctx, ns, n) once per namespace holding n > 0 dead letters
 * (funcd_deadletters{namespace}; it may read the store). */
typedef void (*funcd_metrics_dlq_put)(void *ctx, const char *ns, uint64_t entries);
typedef struct funcd_metrics_delivery_source {
    void (*depth)(void *payload, unsigned *waiting, unsigned *running);
    int (*deadletters)(void *payload, funcd_metrics_dlq_put put, void *ctx);
    void *payload;
} funcd_metrics_delivery_source;

/* Sets (copied) or, with NULL, clears the source; clearing waits for a
 * collection that is reading it. */
void funcd_metrics_set_delivery_source(funcd_metrics *m, const funcd_metrics_delivery_source *src);

/* ---- walking every series ---------------------------------------------- */

typedef enum funcd_metric_type {
    FUNCD_METRIC_COUNTER,
    FUNCD_METRIC_GAUGE,
    FUNCD_METRIC_HISTOGRAM,
} funcd_metric_type;

typedef struct funcd_metric_family {
    const char *name; /* "funcd_requests_total" */
    const char *help;
    funcd_metric_type type;
    const char *unit; /* "seconds", "bytes" or "" */
} funcd_metric_family;

typedef struct funcd_metric_label {
    const char *name, *value;
} funcd_metric_label;

/* One series. For a counter or a gauge `value`; for a histogram the
 * cumulative bucket counts (`buckets[i]` observations <= `bounds[i]`,
 * bounds ascending, the last +Inf and equal to `count`) and `sum`. */
typedef struct funcd_metric_sample {
    const funcd_metric_label *labels;
    size_t n_labels;
    double value;
    const double *bounds;
    const uint64_t *buckets;
    size_t n_buckets; /* 0 unless a histogram; includes +Inf */
    uint64_t count;
    double sum;
} funcd_metric_sample;

/* What funcd_metrics_collect calls: `family` once per family, in a fixed
 * order, and right after it `sample` for each of its series (none when
 * there are none). A family's series are never split. */
typedef struct funcd_metrics_visitor {
    void (*family)(void *payload, const funcd_metric_family *f);
    void (*sample)(void *payload, const funcd_metric_family *f, const funcd_metric_sample *s);
    void *payload;
} funcd_metrics_visitor;

/* Series of functions are given only for namespaces `allow` accepts (NULL:
 * all). */
typedef int (*funcd_metrics_ns_filter)(void *payload, const char *ns);

/*
 * Walks every series once, from the calling thread: per function
 * funcd_requests_total{namespace,function,code},
 * funcd_request_duration_seconds, funcd_edge_rejections_total{...,reason},
 * funcd_cold_starts_total, funcd_cold_start_seconds, funcd_replicas{...,state},
 * funcd_queue_depth, funcd_requests_in_flight; eventing's
 * funcd_events_total{namespace,eventsource,outcome},
 * funcd_event_source_dropped_total{namespace,eventsource,reason}, funcd_deadletters{namespace}
 * and funcd_async_queue_depth{state}; then the process_* series of this
 * process. Counter values are sums over the gateway threads read at one
 * moment each (a request that ends meanwhile may be in one sum and not yet
 * in another). Takes the registry's lock, then the gauge source's own locks
 * (never both at once). 0, or FUNCD_ENOMEM (nothing was visited).
 */
int funcd_metrics_collect(funcd_metrics *m, funcd_metrics_ns_filter allow, void *allow_payload,
                          const funcd_metrics_visitor *v);

/* ---- the Prometheus text format (text.c) ------------------------------- */

#define FUNCD_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Appends everything funcd_metrics_collect walks, as Prometheus text. */
int funcd_metrics_text(funcd_metrics *m, funcd_metrics_ns_filter allow, void *allow_payload,
                       funcd_buf *out);
/* A label value as the text format quotes it (\\, \" and \n escaped). */
void funcd_metrics_escape_label(funcd_buf *out, const char *value);
/* A sample value: integers exactly, NaN and +Inf as the format spells them. */
void funcd_metrics_put_value(funcd_buf *out, double v);

#endif
