/*
 * Inside lib/metrics: a collection is a snapshot taken under the registry's
 * lock (metrics.c), then walked without it (collect.c).
 */
#ifndef FUNCD_METRICS_INTERNAL_H
#define FUNCD_METRICS_INTERNAL_H

#include <stdint.h>

#include "metrics/metrics.h"

#define FUNCD_METRICS_REQ_BUCKETS 17  /* 0.5 ms .. 60 s, +Inf */
#define FUNCD_METRICS_COLD_BUCKETS 15 /* 1 ms .. 30 s, +Inf */
#define FUNCD_METRICS_SNAPSHOT_CODES 64

extern const double funcd_metrics_req_bounds[FUNCD_METRICS_REQ_BUCKETS];
extern const double funcd_metrics_cold_bounds[FUNCD_METRICS_COLD_BUCKETS];

typedef struct funcd_metrics_code_count {
    uint32_t code;
    uint64_t count;
} funcd_metrics_code_count;

typedef struct funcd_metrics_fn_snapshot {
    char *ns, *name;
    funcd_metrics_code_count codes[FUNCD_METRICS_SNAPSHOT_CODES]; /* ascending */
    size_t n_codes;
    uint64_t other; /* codes beyond those a slot or the snapshot keeps */
    uint64_t req_bucket[FUNCD_METRICS_REQ_BUCKETS]; /* not cumulative */
    uint64_t req_sum_ns;
    uint64_t rejected[FUNCD_METRICS_REASONS];
    uint64_t cold_bucket[FUNCD_METRICS_COLD_BUCKETS]; /* not cumulative */
    uint64_t cold_sum_ns;
} funcd_metrics_fn_snapshot;

typedef struct funcd_metrics_gauge_snapshot {
    char *ns, *name;
    funcd_metrics_gauges g; /* its ns and name are the source's: not used */
} funcd_metrics_gauge_snapshot;

/* This process, from /proc (-1 where unknown). */
typedef struct funcd_metrics_process {
    double cpu_seconds;
    double resident_bytes;
    double virtual_bytes;
    double open_fds;
    double max_fds;
    double start_time_seconds;
} funcd_metrics_process;

typedef struct funcd_metrics_snapshot {
    funcd_metrics_fn_snapshot *fns; /* by namespace, name */
    size_t n_fns;
    funcd_metrics_gauge_snapshot *gauges; /* by namespace, name */
    size_t n_gauges;
    funcd_metrics_process process;
} funcd_metrics_snapshot;

int funcd_metrics_take_snapshot(funcd_metrics *m, funcd_metrics_ns_filter allow, void *allow_payload,
                           funcd_metrics_snapshot *out);
void funcd_metrics_snapshot_free(funcd_metrics_snapshot *s);

/* The egress gateway's counters set with funcd_metrics_set_egress, or NULL. */
typedef struct funcd_metrics_egress funcd_metrics_egress;
funcd_metrics_egress *funcd_metrics_egress_of(funcd_metrics *m);
/* The Sites' cache gauges: 1 with them, 0 when no source is set. */
int funcd_metrics__sites_read(funcd_metrics *m, uint64_t *bytes, uint64_t *limit,
                              uint64_t *files);

/* events.c: eventing's series, kept apart from the functions' (their own
 * locks); the registry holds one. */
typedef struct funcd_metrics_events funcd_metrics_events;
funcd_metrics_events *funcd_metrics__events_new(void);
void funcd_metrics__events_free(funcd_metrics_events *ev);
funcd_metrics_events *funcd_metrics__events(funcd_metrics *m);
void funcd_metrics__events_walk(funcd_metrics *m, funcd_metrics_ns_filter allow,
                                void *allow_payload, const funcd_metrics_visitor *v);

/* process.c */
void funcd_metrics_process_read(funcd_metrics_process *out);

#endif
