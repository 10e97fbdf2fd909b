/*
 * Tracing at the data-plane edge: each request's trace context (continued
 * from a valid `traceparent`, else new), the child `traceparent` the worker
 * gets, and, when an access log or an OTLP endpoint is configured, a record
 * of the request (its edge span) handed to a writer thread through a
 * per-gateway-thread ring: no lock, no allocation and no system call on the
 * gateway thread (docs/observability.md).
 */
#ifndef FUNCD_TRACE_EDGE_H
#define FUNCD_TRACE_EDGE_H

#include <h2o.h>
#include <stdatomic.h>
#include <stdint.h>

#include "util/buf.h"
#include "util/log.h"

typedef struct gw_thread gw_thread;

/* One request's trace context, kept in its invocation. */
typedef struct funcd_edge_trace {
    uint8_t trace_id[16];
    uint8_t parent_id[8]; /* the caller's span, when continued */
    uint8_t span_id[8];   /* the edge span, the worker's parent */
    uint8_t flags;
    uint8_t continued;    /* a valid traceparent came in */
    uint8_t nstate;
    h2o_iovec_t state[4]; /* tracestate values as received (continued only) */
    int64_t wait_start_ns, wait_end_ns; /* the wait for a slot, when it queued */
} funcd_edge_trace;

/* 1 when the header is traceparent or tracestate: the edge writes its own. */
static inline int funcd_edge_is_trace_header(const h2o_iovec_t *name)
{
    return (name->len == 11 && h2o_lcstris(name->base, 11, H2O_STRLIT("traceparent"))) ||
           (name->len == 10 && h2o_lcstris(name->base, 10, H2O_STRLIT("tracestate")));
}

/* Continues the request's trace (one valid traceparent) or starts one, and
 * gives the edge span an id. */
void funcd_edge_trace_start(funcd_edge_trace *tr, gw_thread *t, const h2o_req_t *req);

/* Appends "traceparent: ...\r\n" (the edge span as parent) and, for a
 * continued trace, the tracestate received. */
void funcd_edge_put_headers(const funcd_edge_trace *tr, funcd_buf *b);

/* CLOCK_REALTIME in nanoseconds (the vDSO: no system call). */
int64_t funcd_edge_now_ns(void);

/* ---- records ------------------------------------------------------------ */

typedef enum { FUNCD_EDGE_START = 1, FUNCD_EDGE_END = 2 } funcd_edge_kind;

/* What the writer gets: a request's start (only when a sink asked for
 * them: it ties the invocation to its trace early) or its end. */
typedef struct funcd_edge_rec {
    uint8_t kind;
    uint8_t flags, continued, waited;
    uint8_t trace_id[16], parent_id[8], span_id[8], wait_span_id[8];
    int status;
    uint64_t bytes;
    int64_t start_ns, end_ns, wait_start_ns, wait_end_ns;
    char method[16];
    char ns[64];
    char fn[64];
    char invocation_id[40];
    char path[512]; /* truncated */
} funcd_edge_rec;

/* A gateway thread's ring (single producer: that thread; single consumer:
 * the writer). */
typedef struct funcd_edge_ring funcd_edge_ring;

/* The request `req`, proxied as invocation `id` of function "ns/name"
 * (`fn_name`, NULL for an answer the edge gave itself), starts. */
void funcd_edge_note_start(funcd_edge_ring *ring, const funcd_edge_trace *tr, const h2o_req_t *req,
                           const char *fn_name, const char *id);
/* It ended (called when the request is disposed of: status and bytes are
 * final). */
void funcd_edge_note_end(funcd_edge_ring *ring, gw_thread *t, const funcd_edge_trace *tr,
                         const h2o_req_t *req, const char *fn_name, const char *id);
/* An answer the edge gives without a worker (404, a function that cannot
 * run, a limit or the authentication stance refusing), for function
 * ns/name when known (`ns` NULL: none): recorded when the request ends. */
void funcd_edge_note_answer(funcd_edge_ring *ring, gw_thread *t, h2o_req_t *req, const char *id,
                            const char *ns, size_t nsl, const char *name, size_t nl);

/* ---- the writer --------------------------------------------------------- */

typedef struct funcd_edge_recorder funcd_edge_recorder;

/* Receives every record on the writer thread (the OTLP exporter). */
typedef void (*funcd_edge_sink_fn)(const funcd_edge_rec *rec, void *payload);

/*
 * A writer thread for `access_log` (a path, "-" for stdout, or NULL: none)
 * and `sink` (NULL: none; `want_starts` asks for start records too). 0, or
 * a funcd error (the log cannot be opened).
 */
int funcd_edge_recorder_new(funcd_edge_recorder **out, const char *access_log,
                            funcd_edge_sink_fn sink, void *sink_payload, int want_starts,
                            const funcd_logger *lg);
/* A new ring for the calling gateway thread (NULL when out of memory: that
 * thread records nothing). Rings live until the recorder is freed. */
funcd_edge_ring *funcd_edge_recorder_attach(funcd_edge_recorder *rec);
/* Records dropped because a ring was full. */
uint64_t funcd_edge_recorder_dropped(funcd_edge_recorder *rec);
/* Writes what is left and stops; after the gateway's threads have ended. */
void funcd_edge_recorder_free(funcd_edge_recorder *rec);

/* The access log line of an end record (JSON and '\n'), appended to `b`. */
void funcd_edge_access_line(const funcd_edge_rec *r, funcd_buf *b);

#endif
