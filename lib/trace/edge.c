/*
 * The gateway thread's side of edge tracing (edge.h): the trace context of
 * a request and its records. Everything here runs for every request, so it
 * uses the thread's own random numbers and the request's pool only; the
 * records go to a ring without a lock (recorder.c reads it).
 */
#include "trace/edge.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "gateway/gateway.h"
#include "trace/recorder_ring.h"
#include "trace/traceparent.h"

int64_t funcd_edge_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* `n` random bytes, a multiple of 8 (ids are 8 or 16 bytes). */
static void random_bytes(gw_thread *t, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = funcd_gw_random(t);
        memcpy(out + i, &w, 8);
    }
}

static void new_span_id(gw_thread *t, uint8_t id[8])
{
    do
        random_bytes(t, id, 8);
    while (!memcmp(id, "\0\0\0\0\0\0\0\0", 8)); /* all zeros is invalid */
}

void funcd_edge_trace_start(funcd_edge_trace *tr, gw_thread *t, const h2o_req_t *req)
{
    const h2o_iovec_t *parent = NULL;
    int parents = 0;
    tr->nstate = 0;
    tr->wait_start_ns = tr->wait_end_ns = 0;
    for (size_t i = 0; i < req->headers.size; i++) {
        const h2o_header_t *h = &req->headers.entries[i];
        if (h->name->len == 11 && h2o_lcstris(h->name->base, 11, H2O_STRLIT("traceparent"))) {
            parent = &h->value;
            parents++;
        } else if (h->name->len == 10 && h2o_lcstris(h->name->base, 10, H2O_STRLIT("tracestate")) &&
                   tr->nstate < sizeof(tr->state) / sizeof(tr->state[0])) {
            tr->state[tr->nstate++] = h->value; /* several headers are one list, in order */
        }
    }
    funcd_traceparent tp;
    /* Two traceparent headers are no single parent: start anew. */
    tr->continued = parents == 1 && funcd_traceparent_parse(parent->base, parent->len, &tp) == 0;
    if (tr->continued) {
        memcpy(tr->trace_id, tp.trace_id, 16);
        memcpy(tr->parent_id, tp.parent_id, 8);
        tr->flags = tp.flags & 1; /* version 00 knows only "sampled" */
    } else {
        tr->nstate = 0; /* tracestate belongs to the traceparent it came with */
        do
            random_bytes(t, tr->trace_id, 16);
        while (!memcmp(tr->trace_id, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16));
        memset(tr->parent_id, 0, 8);
        tr->flags = 1; /* every edge span is recorded when recording is on */
    }
    new_span_id(t, tr->span_id);
}

void funcd_edge_put_headers(const funcd_edge_trace *tr, funcd_buf *b)
{
    /* Formatted in place: the line is 70 bytes, and b grows once. */
    size_t line = 13 + FUNCD_TRACEPARENT_LEN + 2;
    if (funcd_buf_grow(b, line) < 0)
        return;
    char *p = b->data + b->len;
    memcpy(p, "traceparent: ", 13);
    funcd_traceparent_format(tr->trace_id, tr->span_id, tr->flags, p + 13);
    memcpy(p + 13 + FUNCD_TRACEPARENT_LEN, "\r\n", 3); /* and the buffer's NUL */
    b->len += line;
    for (unsigned i = 0; i < tr->nstate; i++) {
        funcd_buf_append(b, "tracestate: ", 12);
        funcd_buf_append(b, tr->state[i].base, tr->state[i].len);
        funcd_buf_append(b, "\r\n", 2);
    }
}

/* ---- records ------------------------------------------------------------ */

static void copy_str(char *dst, size_t cap, const char *src, size_t n)
{
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static void fill_common(funcd_edge_rec *r, const funcd_edge_trace *tr, const h2o_req_t *req,
                        const char *fn_name, const char *id)
{
    r->flags = tr->flags;
    r->continued = tr->continued;
    memcpy(r->trace_id, tr->trace_id, 16);
    memcpy(r->parent_id, tr->parent_id, 8);
    memcpy(r->span_id, tr->span_id, 8);
    const char *slash = fn_name ? strchr(fn_name, '/') : NULL;
    if (slash) {
        copy_str(r->ns, sizeof(r->ns), fn_name, (size_t)(slash - fn_name));
        copy_str(r->fn, sizeof(r->fn), slash + 1, strlen(slash + 1));
    } else {
        r->ns[0] = r->fn[0] = '\0';
    }
    copy_str(r->invocation_id, sizeof(r->invocation_id), id, strlen(id));
    copy_str(r->method, sizeof(r->method), req->method.base, req->method.len);
    copy_str(r->path, sizeof(r->path), req->path.base, req->path.len);
    const struct timeval *tv = &req->timestamps.request_begin_at;
    if (!tv->tv_sec)
        tv = &req->processed_at.at;
    r->start_ns = tv->tv_sec ? (int64_t)tv->tv_sec * 1000000000 + (int64_t)tv->tv_usec * 1000
                             : funcd_edge_now_ns();
}

void funcd_edge_note_start(funcd_edge_ring *ring, const funcd_edge_trace *tr, const h2o_req_t *req,
                           const char *fn_name, const char *id)
{
    if (!ring || !ring->want_starts)
        return;
    funcd_edge_rec *r = funcd_edge_ring_claim(ring);
    if (!r)
        return;
    r->kind = FUNCD_EDGE_START;
    fill_common(r, tr, req, fn_name, id);
    funcd_edge_ring_commit(ring);
}

void funcd_edge_note_end(funcd_edge_ring *ring, gw_thread *t, const funcd_edge_trace *tr,
                         const h2o_req_t *req, const char *fn_name, const char *id)
{
    if (!ring)
        return;
    funcd_edge_rec *r = funcd_edge_ring_claim(ring);
    if (!r)
        return;
    r->kind = FUNCD_EDGE_END;
    fill_common(r, tr, req, fn_name, id);
    r->end_ns = funcd_edge_now_ns();
    if (r->end_ns < r->start_ns)
        r->end_ns = r->start_ns;
    r->status = req->res.status;
    r->bytes = req->bytes_sent;
    r->waited = tr->wait_start_ns != 0;
    r->wait_start_ns = tr->wait_start_ns;
    r->wait_end_ns = tr->wait_end_ns ? tr->wait_end_ns : r->end_ns; /* gave up waiting */
    if (r->waited)
        new_span_id(t, r->wait_span_id);
    funcd_edge_ring_commit(ring);
}

typedef struct edge_answer {
    funcd_edge_ring *ring;
    gw_thread *t;
    h2o_req_t *req;
    funcd_edge_trace tr;
    char id[40];
    char fn_name[130]; /* "ns/name", or "" */
} edge_answer;

static void on_answer_disposed(void *p)
{
    edge_answer *a = p;
    funcd_edge_note_end(a->ring, a->t, &a->tr, a->req, a->fn_name[0] ? a->fn_name : NULL, a->id);
}

void funcd_edge_note_answer(funcd_edge_ring *ring, gw_thread *t, h2o_req_t *req, const char *id,
                            const char *ns, size_t nsl, const char *name, size_t nl)
{
    if (!ring)
        return;
    edge_answer *a = h2o_mem_alloc_shared(&req->pool, sizeof(*a), on_answer_disposed);
    a->ring = ring;
    a->t = t;
    a->req = req;
    funcd_edge_trace_start(&a->tr, t, req);
    copy_str(a->id, sizeof(a->id), id, strlen(id));
    a->fn_name[0] = '\0';
    if (ns)
        snprintf(a->fn_name, sizeof(a->fn_name), "%.*s/%.*s", (int)(nsl > 63 ? 63 : nsl), ns,
                 (int)(nl > 63 ? 63 : nl), name);
}
