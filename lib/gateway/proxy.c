/*
 * One invocation: take a slot in the function's pool (warm: on this thread,
 * at once; cold: wait for a grant, which arrives as a message to this
 * thread), then proxy the request to the worker's Unix socket over a
 * keep-alive connection from the worker's socket pool, and stream the
 * answer back. Every failure is a JSON Status: 502 when the worker failed,
 * 503 when there is no capacity, 504 when the function took too long.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "funcd/sys/error.h"
#include "gateway/gateway.h"
#include "http/httpd.h"
#include "serving/serving.h"
#include "util/buf.h"
#include "util/misc.h"

#define MAX_CONNECT_ATTEMPTS 3

struct gw_timeouts {
    uint64_t ms;
    h2o_timeout_t timeout;
    h2o_http1client_ctx_t client;
    gw_timeouts *next;
};

typedef struct invocation invocation;

/* A cold request's place in the pool's queue. It outlives the request when
 * the client goes away while a grant is already on its way. */
typedef struct ticket {
    funcd_pool_waiter waiter; /* first */
    h2o_multithread_message_t msg;
    gw_thread *t;
    invocation *inv; /* NULL once the request is gone */
    funcd_pool *pool; /* a reference */
    funcd_pool_worker *worker;
    char error[640];
} ticket;

struct invocation {
    h2o_generator_t gen; /* first */
    h2o_req_t *req;
    gw_thread *t;
    funcd_pool *pool; /* a reference */
    gw_timeouts *tmo;
    funcd_pool_worker *worker; /* the slot held, or NULL */
    ticket *ticket;
    h2o_timeout_entry_t wait_entry;
    h2o_timeout_entry_t release_entry; /* gives the slot back after h2o pooled the connection */
    h2o_http1client_t *client;
    funcd_buf head;
    h2o_iovec_t reqbufs[2];
    funcd_buf pending, sending;
    int attempts;
    int started;   /* response head sent */
    int sending_now;
    int upstream_done;
    int upstream_error;
    int finished;
    char id[40];
    char name[140]; /* ns/name, for messages */
};

/* ---- helpers ---------------------------------------------------------- */

void funcd_gw_send_status(h2o_req_t *req, int code, const char *reason, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    cJSON *st = cJSON_CreateObject();
    cJSON_AddStringToObject(st, "kind", "Status");
    cJSON_AddStringToObject(st, "apiVersion", "v1");
    cJSON_AddStringToObject(st, "status", "Failure");
    cJSON_AddNumberToObject(st, "code", code);
    cJSON_AddStringToObject(st, "reason", reason);
    cJSON_AddStringToObject(st, "message", msg);
    char *body = cJSON_PrintUnformatted(st);
    cJSON_Delete(st);
    req->res.status = code;
    req->res.reason = funcd_httpd_reason(code);
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                   H2O_STRLIT("application/json"));
    h2o_send_inline(req, body ? body : "{}", body ? strlen(body) : 2);
    free(body);
}

static uint64_t next_random(gw_thread *t)
{
    /* xorshift128+: ids need to be unique, not secret */
    uint64_t s1 = t->rng[0];
    const uint64_t s0 = t->rng[1];
    t->rng[0] = s0;
    s1 ^= s1 << 23;
    t->rng[1] = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
    return t->rng[1] + s0;
}

void funcd_gw_new_id(gw_thread *t, char out[40])
{
    uint64_t a = next_random(t), b = next_random(t);
    snprintf(out, 40, "%08x-%04x-4%03x-%04x-%012llx", (unsigned)(a >> 32), (unsigned)(a >> 16) & 0xffff,
             (unsigned)a & 0xfff, (unsigned)((b >> 48) & 0x3fff) | 0x8000,
             (unsigned long long)(b & 0xffffffffffffULL));
}

static gw_timeouts *timeouts_for(gw_thread *t, uint64_t ms)
{
    for (gw_timeouts *g = t->timeouts; g; g = g->next)
        if (g->ms == ms)
            return g;
    gw_timeouts *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    g->ms = ms;
    h2o_timeout_init(t->ctx->loop, &g->timeout, ms);
    g->client.loop = t->ctx->loop;
    g->client.getaddr_receiver = &t->ctx->receivers.hostinfo_getaddr;
    g->client.io_timeout = &g->timeout;
    g->next = t->timeouts;
    t->timeouts = g;
    return g;
}

static int is_hop_by_hop(const h2o_iovec_t *name)
{
    static const char *const hop[] = {"connection", "keep-alive", "proxy-connection", "te",
                                      "trailer", "transfer-encoding", "upgrade", "content-length",
                                      "host", "x-funcd-invocation-id", NULL};
    for (const char *const *h = hop; *h; h++)
        if (h2o_lcstris(name->base, name->len, *h, strlen(*h)))
            return 1;
    return 0;
}

/* ---- releasing the slot ----------------------------------------------- */

static void release_slot(invocation *inv, int failed)
{
    if (!inv->worker)
        return;
    funcd_serving_worker_end(funcd_pool_worker_data(inv->worker));
    funcd_pool_release(inv->pool, inv->worker, failed);
    inv->worker = NULL;
}

static void fail(invocation *inv, int code, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Ends the invocation with an error: a JSON Status if nothing was sent
 * yet, else the stream is cut. */
static void fail(invocation *inv, int code, const char *reason, const char *fmt, ...)
{
    if (inv->finished)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (!inv->started) {
        inv->finished = 1;
        if (code == 503)
            h2o_add_header(&inv->req->pool, &inv->req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL,
                           H2O_STRLIT("1"));
        funcd_gw_send_status(inv->req, code, reason, "%s", msg);
        return;
    }
    inv->upstream_error = 1;
}

/* ---- streaming the answer --------------------------------------------- */

static void flush(invocation *inv)
{
    if (inv->sending_now || inv->finished || !inv->started)
        return;
    funcd_buf_swap_in(&inv->sending, &inv->pending);
    h2o_send_state_t state = inv->upstream_error  ? H2O_SEND_STATE_ERROR
                             : inv->upstream_done ? H2O_SEND_STATE_FINAL
                                                  : H2O_SEND_STATE_IN_PROGRESS;
    if (inv->sending.len == 0 && state == H2O_SEND_STATE_IN_PROGRESS)
        return;
    h2o_iovec_t buf = h2o_iovec_init(inv->sending.data, inv->sending.len);
    inv->sending_now = 1;
    if (state != H2O_SEND_STATE_IN_PROGRESS)
        inv->finished = 1;
    h2o_send(inv->req, &buf, inv->sending.len ? 1 : 0, state);
}

static void on_proceed(h2o_generator_t *gen, h2o_req_t *req)
{
    invocation *inv = (invocation *)gen;
    inv->sending_now = 0;
    funcd_buf_reset(&inv->sending);
    flush(inv);
}

static void on_stop(h2o_generator_t *gen, h2o_req_t *req)
{
    invocation *inv = (invocation *)gen;
    inv->finished = 1;
    if (inv->client) {
        h2o_http1client_cancel(inv->client); /* the client left: drop the upstream too */
        inv->client = NULL;
    }
    release_slot(inv, 0);
}

static void on_release_later(h2o_timeout_entry_t *entry)
{
    release_slot(H2O_STRUCT_FROM_MEMBER(invocation, release_entry, entry), 0);
}

static int on_body(h2o_http1client_t *client, const char *errstr)
{
    invocation *inv = client->data;
    /* Take what arrived first: the last bytes come with the end-of-stream. */
    h2o_buffer_t *in = client->sock->input;
    if (in->size) {
        funcd_buf_append(&inv->pending, in->bytes, in->size);
        h2o_buffer_consume(&client->sock->input, in->size);
    }
    if (errstr) {
        inv->client = NULL; /* h2o frees it after this returns */
        if (errstr == h2o_http1client_error_is_eos) {
            /* h2o hands the connection back to the worker's socket pool only
             * after this returns; releasing the slot now could let the pool
             * (and the worker) go first. Release on the next loop turn. */
            inv->upstream_done = 1;
            inv->release_entry.cb = on_release_later;
            h2o_timeout_link(inv->t->ctx->loop, &inv->t->ctx->zero_timeout, &inv->release_entry);
        } else {
            inv->upstream_error = 1;
            release_slot(inv, 1);
        }
    }
    flush(inv);
    return errstr ? -1 : 0;
}

static h2o_http1client_body_cb on_head(h2o_http1client_t *client, const char *errstr,
                                       int minor_version, int status, h2o_iovec_t msg,
                                       h2o_header_t *headers, size_t num_headers, int rlen)
{
    invocation *inv = client->data;
    h2o_req_t *req = inv->req;
    if (errstr) {
        inv->client = NULL;
        int timeout = strstr(errstr, "timeout") != NULL;
        release_slot(inv, !timeout);
        if (timeout)
            fail(inv, 504, "GatewayTimeout", "function %s did not answer within %llu ms",
                 inv->name, (unsigned long long)inv->tmo->ms);
        else
            fail(inv, 502, "BadGateway", "function %s failed while handling the request: %s",
                 inv->name, errstr);
        return NULL;
    }
    req->res.status = status;
    req->res.reason = h2o_strdup(&req->pool, msg.base, msg.len).base;
    for (size_t i = 0; i < num_headers; i++) {
        h2o_header_t *h = &headers[i];
        if (h->name == &H2O_TOKEN_CONTENT_LENGTH->buf) {
            size_t len = h2o_strtosize(h->value.base, h->value.len);
            if (len != SIZE_MAX)
                req->res.content_length = len;
            continue;
        }
        if (is_hop_by_hop(h->name))
            continue;
        /* Both name and value point into the connection's read buffer,
         * which the body overwrites: copy them. */
        h2o_add_header_by_str(&req->pool, &req->res.headers,
                              h2o_strdup(&req->pool, h->name->base, h->name->len).base,
                              h->name->len, 1, NULL,
                              h2o_strdup(&req->pool, h->value.base, h->value.len).base,
                              h->value.len);
    }
    inv->started = 1;
    h2o_start_response(req, &inv->gen);
    return on_body;
}

static void start_proxy(invocation *inv);
static void acquire(invocation *inv);

static h2o_http1client_head_cb on_connect(h2o_http1client_t *client, const char *errstr,
                                          h2o_iovec_t **reqbufs, size_t *reqbufcnt,
                                          int *method_is_head)
{
    invocation *inv = client->data;
    if (errstr) {
        /* Nothing was sent: the worker is gone. Evict it, try another. */
        inv->client = NULL;
        release_slot(inv, 1);
        if (inv->attempts < MAX_CONNECT_ATTEMPTS) {
            acquire(inv);
        } else {
            fail(inv, 502, "BadGateway", "cannot reach a worker of function %s: %s", inv->name,
                 errstr);
        }
        return NULL;
    }
    *reqbufs = inv->reqbufs;
    *reqbufcnt = inv->reqbufs[1].len ? 2 : 1;
    *method_is_head = h2o_memis(inv->req->method.base, inv->req->method.len, H2O_STRLIT("HEAD"));
    return on_head;
}

static void start_proxy(invocation *inv)
{
    funcd_serving_worker *ws = funcd_pool_worker_data(inv->worker);
    funcd_serving_worker_begin(ws, inv->id);
    inv->attempts++;
    inv->reqbufs[0] = h2o_iovec_init(inv->head.data, inv->head.len);
    inv->reqbufs[1] = inv->req->entity.base ? inv->req->entity : h2o_iovec_init(NULL, 0);
    h2o_http1client_connect_with_pool(&inv->client, inv, &inv->tmo->client, &ws->sockpool,
                                      on_connect);
}

/* ---- waiting for a slot ----------------------------------------------- */

static void free_ticket(ticket *tk)
{
    tk->t->tickets--;
    funcd_pool_unref(tk->pool);
    free(tk);
}

/* Any thread: the pool granted a slot (or gave up). */
static void on_granted(funcd_pool_waiter *wt, funcd_pool_worker *w, const char *error)
{
    ticket *tk = (ticket *)wt;
    tk->worker = w;
    if (!w)
        snprintf(tk->error, sizeof(tk->error), "%s", error ? error : "no worker could be started");
    h2o_multithread_send_message(&tk->t->receiver, &tk->msg);
}

/* This thread: deliver grants to their invocations. */
static void on_grant_messages(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    while (!h2o_linklist_is_empty(messages)) {
        ticket *tk = H2O_STRUCT_FROM_MEMBER(ticket, msg.link, messages->next);
        h2o_linklist_unlink(&tk->msg.link);
        invocation *inv = tk->inv;
        if (!inv) { /* the request went away meanwhile: give the slot back */
            if (tk->worker)
                funcd_pool_release(tk->pool, tk->worker, 0);
            free_ticket(tk);
            continue;
        }
        inv->ticket = NULL;
        if (h2o_timeout_is_linked(&inv->wait_entry))
            h2o_timeout_unlink(&inv->wait_entry);
        inv->worker = tk->worker;
        if (inv->worker)
            start_proxy(inv);
        else
            fail(inv, 502, "BadGateway", "function %s: %s", inv->name, tk->error);
        free_ticket(tk);
    }
}

/* Drops the request's claim on its ticket: removed from the queue, or left
 * for on_grant_messages to clean up when a grant is already on its way. */
static void abandon_ticket(invocation *inv)
{
    ticket *tk = inv->ticket;
    if (!tk)
        return;
    inv->ticket = NULL;
    if (h2o_timeout_is_linked(&inv->wait_entry))
        h2o_timeout_unlink(&inv->wait_entry);
    if (funcd_pool_cancel(inv->pool, &tk->waiter))
        free_ticket(tk);
    else
        tk->inv = NULL;
}

static void on_wait_timeout(h2o_timeout_entry_t *entry)
{
    invocation *inv = H2O_STRUCT_FROM_MEMBER(invocation, wait_entry, entry);
    abandon_ticket(inv);
    fail(inv, 504, "GatewayTimeout", "function %s had no worker ready within %llu ms", inv->name,
         (unsigned long long)inv->tmo->ms);
}

static void acquire(invocation *inv)
{
    ticket *tk = calloc(1, sizeof(*tk));
    if (!tk) {
        fail(inv, 503, "ServiceUnavailable", "out of memory");
        return;
    }
    tk->waiter.granted = on_granted;
    tk->t = inv->t;
    tk->inv = inv;
    funcd_pool_ref(inv->pool);
    tk->pool = inv->pool;
    inv->t->tickets++;
    funcd_pool_worker *w = NULL;
    int rc = funcd_pool_acquire(inv->pool, &tk->waiter, &w);
    if (rc == 1) { /* cold: wait for a grant, at most the function's timeout */
        inv->ticket = tk;
        inv->wait_entry.cb = on_wait_timeout;
        h2o_timeout_link(inv->t->ctx->loop, &inv->tmo->timeout, &inv->wait_entry);
        return;
    }
    free_ticket(tk);
    if (rc == 0) {
        inv->worker = w;
        start_proxy(inv);
    } else if (rc == -1) {
        fail(inv, 503, "ServiceUnavailable",
             "function %s is at capacity (every worker busy and the wait queue full); retry later",
             inv->name);
    } else {
        fail(inv, 503, "ServiceUnavailable", "function %s is being updated or deleted; retry",
             inv->name);
    }
}

/* ---- the request ------------------------------------------------------ */

static void dispose_invocation(void *p)
{
    invocation *inv = p;
    abandon_ticket(inv);
    if (h2o_timeout_is_linked(&inv->release_entry))
        h2o_timeout_unlink(&inv->release_entry);
    if (inv->client) {
        h2o_http1client_cancel(inv->client);
        inv->client = NULL;
    }
    release_slot(inv, 0);
    funcd_pool_unref(inv->pool);
    funcd_buf_free(&inv->head);
    funcd_buf_free(&inv->pending);
    funcd_buf_free(&inv->sending);
}

static void put(funcd_buf *b, const char *p, size_t n)
{
    funcd_buf_append(b, p, n);
}

#define PUT_LIT(b, lit) put((b), (lit), sizeof(lit) - 1)

/* The request line and headers for the worker (plain appends: this runs
 * for every request). */
static int build_head(invocation *inv, h2o_iovec_t rest)
{
    h2o_req_t *req = inv->req;
    funcd_buf *b = &inv->head;
    if (funcd_buf_grow(b, 256 + rest.len + req->headers.size * 64) < 0)
        return -1;
    put(b, req->method.base, req->method.len);
    PUT_LIT(b, " ");
    if (!rest.len || rest.base[0] != '/')
        PUT_LIT(b, "/");
    put(b, rest.base, rest.len);
    PUT_LIT(b, " HTTP/1.1\r\nHost: function\r\n");
    for (size_t i = 0; i < req->headers.size; i++) {
        const h2o_header_t *h = &req->headers.entries[i];
        if (is_hop_by_hop(h->name))
            continue;
        put(b, h->name->base, h->name->len);
        PUT_LIT(b, ": ");
        put(b, h->value.base, h->value.len);
        PUT_LIT(b, "\r\n");
    }
    char tail[128];
    int n = snprintf(tail, sizeof(tail), "X-Funcd-Invocation-Id: %s\r\nContent-Length: %zu\r\n\r\n",
                     inv->id, req->entity.base ? req->entity.len : 0);
    put(b, tail, (size_t)n);
    return b->data ? 0 : -1;
}

void funcd_gw_invoke(gw_thread *t, h2o_req_t *req, funcd_pool *pool, uint64_t timeout_ms,
                     const char *ns, size_t nsl, const char *name, size_t nl, h2o_iovec_t rest)
{
    invocation *inv = h2o_mem_alloc_shared(&req->pool, sizeof(*inv), dispose_invocation);
    memset(inv, 0, sizeof(*inv));
    inv->gen.proceed = on_proceed;
    inv->gen.stop = on_stop;
    inv->req = req;
    inv->t = t;
    inv->pool = pool; /* the caller's reference passes to us */
    snprintf(inv->name, sizeof(inv->name), "%.*s/%.*s", (int)nsl, ns, (int)nl, name);
    funcd_gw_new_id(t, inv->id);
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-funcd-invocation-id"), 0,
                          NULL, h2o_strdup(&req->pool, inv->id, strlen(inv->id)).base,
                          strlen(inv->id));
    inv->tmo = timeouts_for(t, timeout_ms ? timeout_ms : 30000);
    if (!inv->tmo || build_head(inv, rest) < 0) {
        fail(inv, 503, "ServiceUnavailable", "out of memory");
        return;
    }
    acquire(inv);
}

/* ---- per thread ------------------------------------------------------- */

void funcd_gw_thread_init(gw_thread *t, h2o_context_t *ctx)
{
    t->ctx = ctx;
    if (getrandom(t->rng, sizeof(t->rng), 0) != (ssize_t)sizeof(t->rng))
        t->rng[0] = (uint64_t)funcd_now_ms();
    t->rng[0] |= 1; /* xorshift needs a non-zero state */
    h2o_multithread_register_receiver(ctx->queue, &t->receiver, on_grant_messages);
}

void funcd_gw_thread_dispose(gw_thread *t)
{
    int64_t deadline = funcd_mono_ms() + 1000;
    while (t->tickets && funcd_mono_ms() < deadline)
        h2o_evloop_run(t->ctx->loop, 10);
    h2o_multithread_unregister_receiver(t->ctx->queue, &t->receiver);
    while (t->timeouts) {
        gw_timeouts *g = t->timeouts;
        t->timeouts = g->next;
        h2o_timeout_dispose(t->ctx->loop, &g->timeout);
        free(g);
    }
}
