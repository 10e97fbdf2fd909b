/*
 * funcd_metrics_collect: a snapshot walked family by family. The family
 * table is the one list of what funcd exports; docs/observability.md
 * describes the same series.
 */
#include <stdio.h>

#include "metrics/egress.h"
#include "metrics/internal.h"

enum {
    F_REQUESTS,
    F_DURATION,
    F_REJECTIONS,
    F_COLD_STARTS,
    F_COLD_SECONDS,
    F_REPLICAS,
    F_QUEUE,
    F_IN_FLIGHT,
    F_SITE_CACHE_BYTES,
    F_SITE_CACHE_FILES,
    F_SITE_CACHE_LIMIT,
    F_CPU,
    F_RSS,
    F_VSIZE,
    F_FDS,
    F_MAX_FDS,
    F_START,
    F_COUNT
};

static const funcd_metric_family families[F_COUNT] = {
    [F_REQUESTS] = {"funcd_requests_total",
                    "Requests to a function answered by the data plane, by HTTP status code "
                    "(499: the client left before an answer).",
                    FUNCD_METRIC_COUNTER, ""},
    [F_DURATION] = {"funcd_request_duration_seconds",
                    "Time from routing a request to a function to the end of its answer.",
                    FUNCD_METRIC_HISTOGRAM, "seconds"},
    [F_REJECTIONS] = {"funcd_edge_rejections_total",
                      "Requests the edge answered itself (limits, authentication) before a "
                      "worker was asked for, by reason.",
                      FUNCD_METRIC_COUNTER, ""},
    [F_COLD_STARTS] = {"funcd_cold_starts_total",
                       "Workers started that became ready (answered the readiness probe).",
                       FUNCD_METRIC_COUNTER, ""},
    [F_COLD_SECONDS] = {"funcd_cold_start_seconds",
                        "Time from starting a worker to it being ready.",
                        FUNCD_METRIC_HISTOGRAM, "seconds"},
    [F_REPLICAS] = {"funcd_replicas", "Workers of a function by state (ready, starting, stopping).",
                    FUNCD_METRIC_GAUGE, ""},
    [F_QUEUE] = {"funcd_queue_depth", "Requests waiting for a worker slot.", FUNCD_METRIC_GAUGE,
                 ""},
    [F_IN_FLIGHT] = {"funcd_requests_in_flight", "Requests holding a worker slot.",
                     FUNCD_METRIC_GAUGE, ""},
    [F_SITE_CACHE_BYTES] = {"funcd_site_cache_bytes",
                            "Bytes of Sites' files kept in memory, all Sites together.",
                            FUNCD_METRIC_GAUGE, "bytes"},
    [F_SITE_CACHE_FILES] = {"funcd_site_cache_files", "Sites' files kept in memory.",
                            FUNCD_METRIC_GAUGE, ""},
    [F_SITE_CACHE_LIMIT] = {"funcd_site_cache_limit_bytes",
                            "The budget of funcd_site_cache_bytes (funcd --site-cache-bytes).",
                            FUNCD_METRIC_GAUGE, "bytes"},
    [F_CPU] = {"process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
               FUNCD_METRIC_COUNTER, "seconds"},
    [F_RSS] = {"process_resident_memory_bytes", "Resident memory size in bytes.",
               FUNCD_METRIC_GAUGE, "bytes"},
    [F_VSIZE] = {"process_virtual_memory_bytes", "Virtual memory size in bytes.",
                 FUNCD_METRIC_GAUGE, "bytes"},
    [F_FDS] = {"process_open_fds", "Number of open file descriptors.", FUNCD_METRIC_GAUGE, ""},
    [F_MAX_FDS] = {"process_max_fds", "Maximum number of open file descriptors.",
                   FUNCD_METRIC_GAUGE, ""},
    [F_START] = {"process_start_time_seconds",
                 "Start time of the process since unix epoch in seconds.", FUNCD_METRIC_GAUGE,
                 "seconds"},
};

static void value(const funcd_metrics_visitor *v, int f, const funcd_metric_label *labels,
                  size_t n, double x)
{
    funcd_metric_sample s = {.labels = labels, .n_labels = n, .value = x};
    v->sample(v->payload, &families[f], &s);
}

static void histogram(const funcd_metrics_visitor *v, int f, const funcd_metric_label *labels,
                      size_t n, const double *bounds, const uint64_t *raw, size_t nb,
                      uint64_t sum_ns)
{
    uint64_t cum[FUNCD_METRICS_REQ_BUCKETS > FUNCD_METRICS_COLD_BUCKETS
                     ? FUNCD_METRICS_REQ_BUCKETS
                     : FUNCD_METRICS_COLD_BUCKETS];
    uint64_t total = 0;
    for (size_t i = 0; i < nb; i++)
        cum[i] = total += raw[i];
    funcd_metric_sample s = {.labels = labels,
                             .n_labels = n,
                             .bounds = bounds,
                             .buckets = cum,
                             .n_buckets = nb,
                             .count = total,
                             .sum = (double)sum_ns / 1e9};
    v->sample(v->payload, &families[f], &s);
}

static void family(const funcd_metrics_visitor *v, int f)
{
    v->family(v->payload, &families[f]);
}

/* Counters and histograms of each function, one family at a time. */
static void walk_functions(const funcd_metrics_snapshot *s, const funcd_metrics_visitor *v)
{
    funcd_metric_label l[3] = {{"namespace", NULL}, {"function", NULL}, {NULL, NULL}};
    char code[16];
    for (int f = F_REQUESTS; f <= F_COLD_SECONDS; f++) {
        family(v, f);
        for (size_t i = 0; i < s->n_fns; i++) {
            const funcd_metrics_fn_snapshot *fs = &s->fns[i];
            l[0].value = fs->ns;
            l[1].value = fs->name;
            uint64_t cold = 0;
            switch (f) {
            case F_REQUESTS:
                l[2].name = "code";
                for (size_t c = 0; c < fs->n_codes; c++) {
                    snprintf(code, sizeof(code), "%u", (unsigned)fs->codes[c].code);
                    l[2].value = code;
                    value(v, f, l, 3, (double)fs->codes[c].count);
                }
                l[2].value = "other";
                if (fs->other)
                    value(v, f, l, 3, (double)fs->other);
                break;
            case F_DURATION:
                histogram(v, f, l, 2, funcd_metrics_req_bounds, fs->req_bucket,
                          FUNCD_METRICS_REQ_BUCKETS, fs->req_sum_ns);
                break;
            case F_REJECTIONS:
                l[2].name = "reason";
                for (int r = 0; r < FUNCD_METRICS_REASONS; r++) {
                    l[2].value = funcd_metrics_reason_name((funcd_metrics_reason)r);
                    if (fs->rejected[r])
                        value(v, f, l, 3, (double)fs->rejected[r]);
                }
                break;
            case F_COLD_STARTS:
                for (size_t b = 0; b < FUNCD_METRICS_COLD_BUCKETS; b++)
                    cold += fs->cold_bucket[b];
                value(v, f, l, 2, (double)cold);
                break;
            case F_COLD_SECONDS:
                histogram(v, f, l, 2, funcd_metrics_cold_bounds, fs->cold_bucket,
                          FUNCD_METRICS_COLD_BUCKETS, fs->cold_sum_ns);
                break;
            }
        }
    }
}

/* Gauges read from the pools. */
static void walk_gauges(const funcd_metrics_snapshot *s, const funcd_metrics_visitor *v)
{
    funcd_metric_label l[3] = {{"namespace", NULL}, {"function", NULL}, {"state", NULL}};
    for (int f = F_REPLICAS; f <= F_IN_FLIGHT; f++) {
        family(v, f);
        for (size_t i = 0; i < s->n_gauges; i++) {
            const funcd_metrics_gauge_snapshot *gs = &s->gauges[i];
            l[0].value = gs->ns;
            l[1].value = gs->name;
            if (f == F_REPLICAS) {
                l[2].value = "ready";
                value(v, f, l, 3, gs->g.ready);
                l[2].value = "starting";
                value(v, f, l, 3, gs->g.starting);
                l[2].value = "stopping";
                value(v, f, l, 3, gs->g.stopping);
            } else {
                value(v, f, l, 2, f == F_QUEUE ? gs->g.waiting : gs->g.in_flight);
            }
        }
    }
}

static void walk_process(const funcd_metrics_process *p, const funcd_metrics_visitor *v)
{
    const struct {
        int f;
        double x;
    } proc[] = {{F_CPU, p->cpu_seconds},   {F_RSS, p->resident_bytes},
                {F_VSIZE, p->virtual_bytes}, {F_FDS, p->open_fds},
                {F_MAX_FDS, p->max_fds},   {F_START, p->start_time_seconds}};
    for (size_t i = 0; i < sizeof(proc) / sizeof(proc[0]); i++) {
        family(v, proc[i].f);
        if (proc[i].x >= 0) /* unknown (no /proc): the family without a sample */
            value(v, proc[i].f, NULL, 0, proc[i].x);
    }
}

int funcd_metrics_collect(funcd_metrics *m, funcd_metrics_ns_filter allow, void *allow_payload,
                          const funcd_metrics_visitor *v)
{
    funcd_metrics_snapshot s;
    int rc = funcd_metrics_take_snapshot(m, allow, allow_payload, &s);
    if (rc < 0)
        return rc;
    walk_functions(&s, v);
    walk_gauges(&s, v);
    funcd_metrics_egress_walk(funcd_metrics_egress_of(m), allow, allow_payload, v);
    funcd_metrics__events_walk(m, allow, allow_payload, v);
    uint64_t site[3];
    if (funcd_metrics__sites_read(m, &site[0], &site[2], &site[1]))
        for (int f = F_SITE_CACHE_BYTES; f <= F_SITE_CACHE_LIMIT; f++) {
            family(v, f);
            value(v, f, NULL, 0, (double)site[f - F_SITE_CACHE_BYTES]);
        }
    walk_process(&s.process, v);
    funcd_metrics_snapshot_free(&s);
    return 0;
}
