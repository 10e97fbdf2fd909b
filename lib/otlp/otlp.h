/*
 * OTLP/HTTP export (protobuf) of the edge's spans and the functions' log
 * lines to an OpenTelemetry collector: queued by whoever produces them
 * (the edge recorder's writer thread, the platform loop), batched and sent
 * by a thread of its own with libcurl, retried with exponential backoff,
 * bounded, with a count of what was dropped (docs/observability.md,
 * docs/adr/0037-otlp-export.md). Nothing here runs on a gateway thread.
 */
#ifndef FUNCD_OTLP_OTLP_H
#define FUNCD_OTLP_OTLP_H

#include <stddef.h>
#include <stdint.h>

#include "funcd/funcd.h"
#include "trace/edge.h"
#include "util/log.h"

typedef struct funcd_otlp funcd_otlp;
typedef struct funcd_metrics funcd_metrics;

typedef struct funcd_otlp_config {
    const char *endpoint;      /* base URL: <endpoint>/v1/traces, <endpoint>/v1/logs */
    uint64_t flush_ms;         /* a batch leaves at least this often (0: 1000) */
    size_t max_batch;          /* ... or when this many items wait (0: 512) */
    size_t max_queue;          /* items of each signal held at most (0: 8192) */
    uint64_t retry_base_ms;    /* first backoff, doubled each time (0: 200) */
    unsigned max_attempts;     /* tries of one batch (0: 6) */
    uint64_t metrics_ms;       /* how often metrics are sent (0: 10000) */
    const funcd_logger *logger;
} funcd_otlp_config;

/* Checks the endpoint (http:// or https://) and starts the sender thread;
 * libcurl is loaded on its first batch. 0, or a funcd error. */
int funcd_otlp_new(funcd_otlp **out, const funcd_otlp_config *cfg);

/* A funcd_edge_sink_fn: an edge record (START ties an invocation to its
 * trace for the log lines; END is the edge span and its wait span). */
void funcd_otlp_on_edge(const funcd_edge_rec *rec, void *otlp);

/* A funcd_log_observer_fn: queues the line, then calls the observer set
 * below (the embedder's own). */
void funcd_otlp_observe(const funcd_log_record *rec, void *otlp);
void funcd_otlp_set_next_observer(funcd_otlp *o, funcd_log_observer_fn fn, void *payload);

/* Sends the series of `m` (funcd_metrics_collect) every metrics_ms to
 * <endpoint>/v1/metrics, cumulative from now, with the exporter's own
 * dropped-items counter. Call before anything is queued. */
void funcd_otlp_set_metrics(funcd_otlp *o, funcd_metrics *m);
/* No collection after this returns (one in progress is waited for): call
 * before what the metrics' gauges read goes away. */
void funcd_otlp_stop_metrics(funcd_otlp *o);

/* Items (spans and log records) dropped so far: queue full, or a batch
 * the endpoint refused or never took after every retry. */
uint64_t funcd_otlp_dropped(funcd_otlp *o);

/* Sends what is queued (one round of tries, bounded to a few seconds) and
 * stops. */
void funcd_otlp_free(funcd_otlp *o);

/* ---- encoding (encode.c) ------------------------------------------------- */

/* A span as queued: what the edge span and its wait span need. */
typedef struct funcd_otlp_span {
    uint8_t trace_id[16], span_id[8], parent_id[8], wait_span_id[8];
    uint8_t flags, has_parent, waited;
    int status;
    int64_t start_ns, end_ns, wait_start_ns, wait_end_ns;
    char method[16];
    char path[512];
    char ns[64], fn[64];
    char invocation_id[40];
} funcd_otlp_span;

/* A log line as queued. */
typedef struct funcd_otlp_log {
    int64_t time_ns;
    int stream;
    uint8_t trace_id[16], span_id[8];
    uint8_t flags, has_trace;
    char ns[64], fn[64], replica[80];
    char invocation_id[40];
    char *line; /* malloc()ed */
    size_t len;
    int64_t queued_ms; /* monotonic */
} funcd_otlp_log;

/* An ExportTraceServiceRequest / ExportLogsServiceRequest, packed into a
 * malloc()ed buffer; NULL when out of memory. */
uint8_t *funcd_otlp_encode_spans(const funcd_otlp_span *spans, size_t n, size_t *len);
uint8_t *funcd_otlp_encode_logs(const funcd_otlp_log *logs, size_t n, size_t *len);
/* An ExportMetricsServiceRequest of every series of `m` (cumulative since
 * `start_ns`, read at `now_ns`) and funcd_otlp_dropped_items_total. */
uint8_t *funcd_otlp_encode_metrics(funcd_metrics *m, uint64_t start_ns, uint64_t now_ns,
                                   uint64_t dropped, size_t *len);

#endif
