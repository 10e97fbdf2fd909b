/*
 * One invocation: take a slot on one of the function's workers through the
 * gateway SPI's slot functions (funcd/sys/gateway.h), the same ones a
 * gateway outside libfuncd uses (warm: on this thread, at once; cold: wait
 * for a grant, which arrives as a message to this thread), then proxy the request to the worker's Unix socket over a
 * keep-alive connection this thread keeps for that worker, and stream the
 * answer back. Every failure is a JSON Status: 502 when the worker failed,
 * 503 when there is no capacity, 504 when the function took too long.
 *
 * A request is tried again (once, on a ready worker) only when the worker
 * cannot have taken it: the connection failed, or was refused or reset
 * before any byte of an answer with the request unread. A worker that read
 * it and then closed or died is not given it twice; the caller is told why
 * it ended (OOMKilled, its exit status, its signal) once the worker's end is
 * known (docs/serving.md, docs/adr/0021-first-request.md).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/un.h>

#include "funcd/sys/error.h"
#include "gateway/gateway.h"
#include "http/httpd.h"
#include "http/http1.h"
#include "trace/edge.h"
#include "util/status.h"
#include "util/buf.h"
#include "util/misc.h"

#define MAX_CONNECT_ATTEMPTS 3
#define EXIT_POLL_MS 10   /* how often a failed request looks whether its worker ended */
#define EXIT_POLLS 100    /* and for how long (1 s), before it answers without knowing why */

struct gw_timeouts {
    uint64_t ms;
    h2o_timeout_t timeout;
    gw_timeouts *next;
};

typedef struct invocation invocation;
typedef struct upconn upconn;

/* A cold request's place in the pool's queue. It outlives the request when
 * the client goes away while a grant is already on its way. */
struct ticket {
    funcd_slot_waiter waiter; /* payload: the ticket */
    h2o_multithread_message_t msg;
    gw_thread *t;
    invocation *inv; /* NULL once the request is gone */
    funcd_fn_target *target; /* a reference */
    funcd_slot *slot;
    char error[640];
};
typedef struct ticket ticket;

struct invocation {
    h2o_generator_t gen; /* first */
    h2o_req_t *req;
    gw_thread *t;
    funcd_fn_target *target; /* a reference */
    gw_timeouts *tmo;
    funcd_slot *slot; /* the slot held, or NULL */
    ticket *ticket;
    h2o_timeout_entry_t wait_entry;
    h2o_timeout_entry_t io_entry; /* the function's timeout, restarted by every read */
    upconn *up;                   /* the worker connection in use */
    funcd_http1 resp;             /* the worker's answer */
    size_t content_left;          /* body bytes still to come, SIZE_MAX: unknown */
    int chunked, keepalive, is_head, paused, reused, retried, began;
    h2o_timeout_entry_t exit_entry; /* waiting to learn how a failed worker ended */
    gw_timeouts *exit_tmo;
    unsigned exit_polls;
    char why[160]; /* the connection error of a failed exchange */
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
    funcd_edge_trace tr; /* traceparent to the worker, the edge span */
    gw_track track; /* ended when the request is disposed of, whatever answered it */
};

/* ---- helpers ---------------------------------------------------------- */

void funcd_gw_send_status(h2o_req_t *req, int code, const char *reason, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *body = funcd_status_json_v(code, reason, fmt, ap);
    va_end(ap);
    req->res.status = code;
    req->res.reason = funcd_httpd_reason(code);
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                   H2O_STRLIT("application/json"));
    /* With its length: h2o_send_inline sets none, and over HTTP/1.1 h2o
     * 2.2.5 chunks only 200s, so any other status would go close-delimited
     * and end a keep-alive connection at every refusal. */
    size_t len = body ? strlen(body) : 2;
    req->res.content_length = len;
    h2o_send_inline(req, body ? body : "{}", len);
    free(body);
}

uint64_t funcd_gw_random(gw_thread *t)
{
    /* xorshift128+: ids need to be unique, not secret */
    uint64_t s1 = t->rng[0];
    const uint64_t s0 = t->rng[1];
    t->rng[0] = s0;
    s1 ^= s1 << 23;
    t->rng[1] = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
    return t->rng[1] + s0;
}

/* A version-4 UUID from two random words, written by hand: this runs for
 * every request and snprintf was a visible part of it. */
void funcd_gw_new_id(gw_thread *t, char out[40])
{
    static const char hex[] = "0123456789abcdef";
    uint64_t w[2] = {funcd_gw_random(t), funcd_gw_random(t)};
    unsigned char b[16];
    for (int i = 0; i < 16; i++)
        b[i] = (unsigned char)(w[i / 8] >> ((i % 8) * 8));
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    char *p = out;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *p++ = '-';
        *p++ = hex[b[i] >> 4];
        *p++ = hex[b[i] & 15];
    }
    *p = '\0';
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
    g->next = t->timeouts;
    t->timeouts = g;
    return g;
}

h2o_timeout_t *funcd_gw_timeout(gw_thread *t, uint64_t ms)
{
    gw_timeouts *g = timeouts_for(t, ms);
    return g ? &g->timeout : NULL;
}

static int is_hop_by_hop(const h2o_iovec_t *name)
{
    static const char *const hop[] = {"connection", "keep-alive", "proxy-connection", "te",
                                      "trailer", "transfer-encoding", "upgrade", "content-length",
                                      "host", "x-funcd-invocation-id", "x-funcd-subject", NULL};
    for (const char *const *h = hop; *h; h++)
        if (h2o_lcstris(name->base, name->len, *h, strlen(*h)))
            return 1;
    return 0;
}

/* ---- releasing the slot ----------------------------------------------- */

static void release_slot(invocation *inv, int failed)
{
    if (h2o_timeout_is_linked(&inv->exit_entry))
        h2o_timeout_unlink(&inv->exit_entry);
    if (!inv->slot)
        return;
    if (inv->began)
        funcd_slot_end(inv->slot);
    inv->began = 0;
    funcd_slot_release(inv->slot, failed ? FUNCD_SLOT_FAILED : FUNCD_SLOT_OK);
    inv->slot = NULL;
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

#define MAX_RESPONSE_HEADERS 100
#define PAUSE_BYTES (1024 * 1024) /* stop reading the worker while this much waits for the client */
#define IDLE_PER_THREAD 4096      /* idle worker connections one gateway thread keeps */

/*
 * Connections to workers. Each gateway thread keeps its own idle ones, keyed
 * by worker, so a warm request takes one without locks or moving the socket
 * between event loops; an idle connection that the worker closes is noticed
 * by its read callback and dropped.
 */
struct upconn {
    h2o_socket_t *sock;
    uint64_t worker_id;
    gw_thread *t;
    invocation *inv; /* while in use */
    upconn *next;    /* in the thread's idle list */
    int reading;     /* read callback installed */
};

static void up_close(upconn *c)
{
    h2o_socket_close(c->sock);
    free(c);
}

static void up_unlink_idle(upconn *c)
{
    for (upconn **pp = &c->t->idle; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            c->t->n_idle--;
            return;
        }
}

static void on_up_read(h2o_socket_t *sock, const char *err);

/* The one read callback of a worker connection: reading stays on while it
 * sits idle (so a close is noticed) and while it serves, which spares two
 * epoll_ctl calls per request. */
static void on_conn_read(h2o_socket_t *sock, const char *err)
{
    upconn *c = sock->data;
    if (c->inv) {
        on_up_read(sock, err);
        return;
    }
    up_unlink_idle(c); /* idle: closed by the worker, or it spoke out of turn */
    up_close(c);
}

static upconn *up_take(gw_thread *t, uint64_t worker_id)
{
    for (upconn **pp = &t->idle; *pp; pp = &(*pp)->next)
        if ((*pp)->worker_id == worker_id) {
            upconn *c = *pp;
            *pp = c->next;
            t->n_idle--;
            return c;
        }
    return NULL;
}

static void up_put(upconn *c)
{
    gw_thread *t = c->t;
    c->inv = NULL;
    if (t->n_idle >= IDLE_PER_THREAD || c->sock->input->size) {
        up_close(c);
        return;
    }
    c->next = t->idle;
    t->idle = c;
    t->n_idle++;
}

void funcd_gw_thread_close_idle(gw_thread *t)
{
    while (t->idle) {
        upconn *c = t->idle;
        t->idle = c->next;
        t->n_idle--;
        up_close(c);
    }
}

/* ---- the exchange with the worker ------------------------------------- */

static void start_proxy(invocation *inv);
static void acquire(invocation *inv);
static void connect_failed(invocation *inv, const char *err);

static void io_timer_touch(invocation *inv)
{
    if (h2o_timeout_is_linked(&inv->io_entry))
        h2o_timeout_unlink(&inv->io_entry);
    h2o_timeout_link(inv->t->ctx->loop, &inv->tmo->timeout, &inv->io_entry);
}

static void io_timer_stop(invocation *inv)
{
    if (h2o_timeout_is_linked(&inv->io_entry))
        h2o_timeout_unlink(&inv->io_entry);
}

/* Drops the worker connection (it cannot be reused mid-exchange). */
static void drop_upstream(invocation *inv)
{
    io_timer_stop(inv);
    if (inv->up) {
        up_close(inv->up);
        inv->up = NULL;
    }
}

static void on_proceed(h2o_generator_t *gen, h2o_req_t *req)
{
    invocation *inv = (invocation *)gen;
    inv->sending_now = 0;
    funcd_buf_reset(&inv->sending);
    if (inv->paused && inv->up) { /* the client caught up: read the worker again */
        inv->paused = 0;
        h2o_socket_read_start(inv->up->sock, on_conn_read);
    }
    flush(inv);
}

static void on_stop(h2o_generator_t *gen, h2o_req_t *req)
{
    invocation *inv = (invocation *)gen;
    inv->finished = 1; /* (release_slot ends a wait for the worker's end, too) */
    drop_upstream(inv); /* the client left: drop the worker's side too */
    release_slot(inv, 0);
}

/* The exchange ended well: the connection may serve the next request. */
static void upstream_complete(invocation *inv)
{
    io_timer_stop(inv);
    upconn *c = inv->up;
    inv->up = NULL;
    if (inv->paused) /* reading was stopped for a slow client; an idle one must notice a close */
        h2o_socket_read_start(c->sock, on_conn_read);
    if (inv->keepalive)
        up_put(c);
    else
        up_close(c);
    inv->upstream_done = 1;
    release_slot(inv, 0);
    flush(inv);
}

/* Answers a request whose worker failed before its answer began: why, in
 * the words of the worker's end when it is known. */
static void fail_with_worker_end(invocation *inv)
{
    char end[160];
    funcd_slot_worker_state ended = funcd_slot_worker_end(inv->slot, end, sizeof(end));
    int oom = ended == FUNCD_SLOT_WORKER_OOM_KILLED;
    if (ended == FUNCD_SLOT_WORKER_RUNNING)
        snprintf(end, sizeof(end), "%s", inv->why);
    release_slot(inv, 1);
    if (oom)
        fail(inv, 502, "OOMKilled", "function %s ran out of memory while handling the request: "
             "%s", inv->name, end);
    else
        fail(inv, 502, "BadGateway", "function %s failed while handling the request: %s",
             inv->name, end);
}

static void on_exit_poll(h2o_timeout_entry_t *entry)
{
    invocation *inv = H2O_STRUCT_FROM_MEMBER(invocation, exit_entry, entry);
    if (funcd_slot_worker_end(inv->slot, NULL, 0) == FUNCD_SLOT_WORKER_RUNNING &&
        ++inv->exit_polls < EXIT_POLLS) {
        h2o_timeout_link(inv->t->ctx->loop, &inv->exit_tmo->timeout, &inv->exit_entry);
        return;
    }
    fail_with_worker_end(inv);
}

static void upstream_failed(invocation *inv, const char *why)
{
    drop_upstream(inv);
    if (inv->started) {
        release_slot(inv, 1);
        inv->upstream_error = 1;
        flush(inv);
        return;
    }
    /* The worker closed or died with the request taken: the slot (and so
     * the worker's data) is held until its end is known, for a little while. */
    snprintf(inv->why, sizeof(inv->why), "%s", why);
    inv->exit_tmo = funcd_slot_worker_end(inv->slot, NULL, 0) != FUNCD_SLOT_WORKER_RUNNING
                        ? NULL
                        : timeouts_for(inv->t, EXIT_POLL_MS);
    if (!inv->exit_tmo) {
        fail_with_worker_end(inv);
        return;
    }
    inv->exit_polls = 0;
    inv->exit_entry.cb = on_exit_poll;
    h2o_timeout_link(inv->t->ctx->loop, &inv->exit_tmo->timeout, &inv->exit_entry);
}

/* The worker did not take the request (refused or reset with it unread):
 * try once more, on a ready worker. A kept-alive connection it had closed
 * says nothing against the worker; a fresh one does: it is going. */
static void retry_elsewhere(invocation *inv)
{
    inv->retried = 1;
    drop_upstream(inv);
    release_slot(inv, !inv->reused);
    acquire(inv);
}

static void on_io_timeout(h2o_timeout_entry_t *entry)
{
    invocation *inv = H2O_STRUCT_FROM_MEMBER(invocation, io_entry, entry);
    drop_upstream(inv);
    release_slot(inv, 0); /* busy, not broken: keep the worker */
    if (!inv->started)
        fail(inv, 504, "GatewayTimeout", "function %s did not answer within %llu ms", inv->name,
             (unsigned long long)inv->tmo->ms);
    else {
        inv->upstream_error = 1;
        flush(inv);
    }
}

/* Parses the status line and headers; 1 when done, 0 for more, -1 bad. */
static int parse_head(invocation *inv, h2o_socket_t *sock)
{
    h2o_req_t *req = inv->req;
    funcd_http1_field headers[MAX_RESPONSE_HEADERS];
    funcd_http1 *m = &inv->resp;
    funcd_http1_init_response(m, inv->is_head, headers, MAX_RESPONSE_HEADERS);
    ssize_t n = funcd_http1_head(m, sock->input->bytes, sock->input->size);
    if (n == 0)
        return sock->input->size > 65536 ? -1 : 0;
    if (n < 0)
        return -1;
    req->res.status = m->status;
    req->res.reason = h2o_strdup(&req->pool, m->reason, m->reason_len).base;
    inv->keepalive = m->keep_alive;
    inv->chunked = m->has_body && m->chunked;
    inv->content_left = !m->has_body ? 0 : m->content_length == FUNCD_HTTP1_NO_LENGTH
                                               ? SIZE_MAX
                                               : (size_t)m->content_length;
    req->res.content_length = m->chunked || m->content_length == FUNCD_HTTP1_NO_LENGTH
                                  ? SIZE_MAX
                                  : (size_t)m->content_length;
    for (size_t i = 0; i < m->nfields; i++) {
        const funcd_http1_field *h = &m->fields[i];
        h2o_iovec_t name = h2o_iovec_init(h->name, h->name_len);
        if (is_hop_by_hop(&name))
            continue;
        char *lname = h2o_strdup(&req->pool, h->name, h->name_len).base;
        /* HTTP/2 names are lowercase (RFC 9113, 8.2.1): h2o 2.2.5 sends a
         * name that is not one of its tokens as given, and clients reset
         * the stream over "Content-Type" or "X-Foo". */
        if (req->version >= 0x200)
            h2o_strtolower(lname, h->name_len);
        h2o_add_header_by_str(&req->pool, &req->res.headers, lname, h->name_len, 1, NULL,
                              h2o_strdup(&req->pool, h->value, h->value_len).base, h->value_len);
    }
    m->fields = NULL; /* `headers` ends here; the body needs none */
    m->nfields = m->max_fields = 0;
    h2o_buffer_consume(&sock->input, (size_t)n);
    inv->started = 1;
    h2o_start_response(req, &inv->gen);
    return 1;
}

/* Moves body bytes to `pending`; 1 when the body is complete. */
static int take_body(invocation *inv, h2o_socket_t *sock)
{
    h2o_buffer_t *in = sock->input;
    size_t out;
    ssize_t took = funcd_http1_body(&inv->resp, in->bytes, in->size, &out);
    if (took < 0)
        return -1;
    funcd_buf_append(&inv->pending, in->bytes, out);
    if ((size_t)took < in->size)
        inv->keepalive = 0; /* bytes after the body: do not trust the connection */
    h2o_buffer_consume(&sock->input, in->size);
    return inv->resp.done;
}

static void on_up_read(h2o_socket_t *sock, const char *err)
{
    upconn *c = sock->data;
    invocation *inv = c->inv;
    if (err) {
        if (!inv->started && !inv->retried && sock->input->size == 0 &&
            err == h2o_socket_error_io) {
            /* Reset or broken pipe before any byte of an answer: on a Unix
             * socket that means the worker closed (or died) with the
             * request unread. A close after reading it is an EOF instead,
             * and is not retried, whatever the method: the worker may have
             * acted on it, and its caller is told how it ended. */
            retry_elsewhere(inv);
            return;
        }
        if (inv->started && !inv->chunked && inv->content_left == SIZE_MAX) {
            take_body(inv, sock); /* a body that ends with the connection */
            inv->keepalive = 0;
            upstream_complete(inv);
            return;
        }
        upstream_failed(inv, err);
        return;
    }
    io_timer_touch(inv);
    if (!inv->started) {
        int rc = parse_head(inv, sock);
        if (rc == 0)
            return;
        if (rc < 0) {
            upstream_failed(inv, "its answer is not valid HTTP/1.1");
            return;
        }
    }
    int done = take_body(inv, sock);
    if (done < 0) {
        upstream_failed(inv, "its chunked body is malformed");
        return;
    }
    if (done) {
        upstream_complete(inv);
        return;
    }
    if (inv->pending.len > PAUSE_BYTES) {
        inv->paused = 1;
        h2o_socket_read_stop(sock);
    }
    flush(inv);
}

static void on_up_written(h2o_socket_t *sock, const char *err)
{
    upconn *c = sock->data;
    if (err) {
        on_up_read(sock, err);
        return;
    }
    if (!c->reading) { /* a new connection starts reading once, for good */
        c->reading = 1;
        h2o_socket_read_start(sock, on_conn_read);
    }
}

static void send_request(invocation *inv)
{
    upconn *c = inv->up;
    c->sock->data = c;
    io_timer_touch(inv);
    h2o_socket_write(c->sock, inv->reqbufs, inv->reqbufs[1].len ? 2 : 1, on_up_written);
}

/* Connecting failed: nothing was sent, the worker is gone (or going).
 * Evict it and try another. */
static void connect_failed(invocation *inv, const char *err)
{
    drop_upstream(inv);
    release_slot(inv, 1);
    if (inv->attempts < MAX_CONNECT_ATTEMPTS)
        acquire(inv);
    else
        fail(inv, 502, "BadGateway", "cannot reach a worker of function %s: %s", inv->name, err);
}

static void on_up_connected(h2o_socket_t *sock, const char *err)
{
    upconn *c = sock->data;
    invocation *inv = c->inv;
    if (err) {
        connect_failed(inv, err);
        return;
    }
    send_request(inv);
}

static void start_proxy(invocation *inv)
{
    if (!inv->began) {
        funcd_slot_begin(inv->slot, inv->id);
        inv->began = 1;
    }
    inv->attempts++;
    inv->reqbufs[0] = h2o_iovec_init(inv->head.data, inv->head.len);
    inv->reqbufs[1] = inv->req->entity.base ? inv->req->entity : h2o_iovec_init(NULL, 0);
    inv->is_head = h2o_memis(inv->req->method.base, inv->req->method.len, H2O_STRLIT("HEAD"));
    char end[160];
    if (funcd_slot_worker_end(inv->slot, end, sizeof(end)) != FUNCD_SLOT_WORKER_RUNNING) {
        connect_failed(inv, end); /* gone, and the pool not told yet: never use its connections */
        return;
    }
    uint64_t worker_id = funcd_slot_worker_id(inv->slot);
    upconn *c = inv->retried ? NULL : up_take(inv->t, worker_id);
    inv->reused = c != NULL;
    if (c) {
        c->inv = inv;
        inv->up = c;
        send_request(inv);
        return;
    }
    c = calloc(1, sizeof(*c));
    if (!c) {
        release_slot(inv, 0);
        fail(inv, 503, "ServiceUnavailable", "out of memory");
        return;
    }
    /* On a Unix socket connect() fails at once (refused, no such socket):
     * the same case as a failure reported later. */
    h2o_socket_t *sock =
        h2o_socket_connect(inv->t->ctx->loop, (struct sockaddr *)funcd_slot_sockaddr(inv->slot),
                           sizeof(struct sockaddr_un), on_up_connected);
    if (!sock) {
        free(c);
        connect_failed(inv, strerror(errno));
        return;
    }
    c->sock = sock;
    c->worker_id = worker_id;
    c->t = inv->t;
    c->inv = inv;
    sock->data = c;
    inv->up = c;
}

/* ---- waiting for a slot ----------------------------------------------- */

/* A warm request takes a ticket and gives it back at once: the thread
 * keeps one for the next, rather than a calloc and a free per request. */
static ticket *new_ticket(gw_thread *t)
{
    ticket *tk = t->free_ticket;
    if (!tk)
        return calloc(1, sizeof(*tk));
    t->free_ticket = NULL;
    memset(tk, 0, offsetof(ticket, error));
    tk->error[0] = '\0';
    return tk;
}

static void free_ticket(ticket *tk)
{
    gw_thread *t = tk->t;
    t->tickets--;
    funcd_fn_target_unref(tk->target);
    if (!t->free_ticket)
        t->free_ticket = tk;
    else
        free(tk);
}

/* Any thread: the pool granted a slot (or gave up). */
static void on_granted(funcd_slot_waiter *wt, funcd_slot *slot, const char *error)
{
    ticket *tk = wt->payload;
    tk->slot = slot;
    if (!slot)
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
            if (tk->slot)
                funcd_slot_release(tk->slot, FUNCD_SLOT_OK);
            free_ticket(tk);
            continue;
        }
        inv->ticket = NULL;
        if (h2o_timeout_is_linked(&inv->wait_entry))
            h2o_timeout_unlink(&inv->wait_entry);
        if (inv->tr.wait_start_ns)
            inv->tr.wait_end_ns = funcd_edge_now_ns();
        inv->slot = tk->slot;
        if (inv->slot) {
            start_proxy(inv);
        } else if (funcd_has_prefix(tk->error, FUNCD_SLOT_ERROR_WORKER_LIMIT)) {
            /* The tenant's (or the node's) limit, not a fault: say which. */
            fail(inv, 503, "ServiceUnavailable", "function %s has no worker and none may start: %s",
                 inv->name, tk->error + strlen(FUNCD_SLOT_ERROR_WORKER_LIMIT));
        } else {
            /* Why is the operator's (host paths, cgroups, pids): funcd's log. */
            funcd_log(inv->t->logger, FUNCD_LOG_WARN, "invocation %s of function %s: %s",
                      inv->id, inv->name, tk->error);
            fail(inv, 502, "BadGateway", "function %s: worker failed to start (see the "
                 "function's logs and status, invocation %s)", inv->name, inv->id);
        }
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
    if (funcd_slot_cancel(inv->target, &tk->waiter))
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
    ticket *tk = new_ticket(inv->t);
    if (!tk) {
        fail(inv, 503, "ServiceUnavailable", "out of memory");
        return;
    }
    tk->waiter.granted = on_granted;
    tk->waiter.payload = tk;
    tk->t = inv->t;
    tk->inv = inv;
    funcd_fn_target_ref(inv->target);
    tk->target = inv->target;
    inv->t->tickets++;
    funcd_slot *slot = NULL;
    int rc = funcd_slot_acquire(inv->target, &tk->waiter, &slot);
    if (rc == FUNCD_SLOT_QUEUED) { /* cold: wait for a grant, at most the function's timeout */
        if (inv->t->edge && !inv->tr.wait_start_ns)
            inv->tr.wait_start_ns = funcd_edge_now_ns();
        inv->ticket = tk;
        inv->wait_entry.cb = on_wait_timeout;
        h2o_timeout_link(inv->t->ctx->loop, &inv->tmo->timeout, &inv->wait_entry);
        return;
    }
    free_ticket(tk);
    if (rc == FUNCD_SLOT_GRANTED) {
        inv->slot = slot;
        start_proxy(inv);
    } else if (rc == FUNCD_SLOT_QUEUE_FULL) {
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
    funcd_edge_note_end(inv->t->edge, inv->t, &inv->tr, inv->req, inv->name, inv->id);
    funcd_gw_track_end(&inv->track, inv->req->res.status);
    abandon_ticket(inv);
    drop_upstream(inv);
    release_slot(inv, 0);
    funcd_fn_target_unref(inv->target);
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
static int build_head(invocation *inv, h2o_iovec_t rest, const char *subject)
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
        if (is_hop_by_hop(h->name) || funcd_edge_is_trace_header(h->name))
            continue;
        if (subject && h->name == &H2O_TOKEN_AUTHORIZATION->buf)
            continue; /* the edge took the token; the worker gets who it was */
        put(b, h->name->base, h->name->len);
        PUT_LIT(b, ": ");
        put(b, h->value.base, h->value.len);
        PUT_LIT(b, "\r\n");
    }
    funcd_edge_put_headers(&inv->tr, b);
    if (subject) {
        PUT_LIT(b, "X-Funcd-Subject: ");
        put(b, subject, strlen(subject));
        PUT_LIT(b, "\r\n");
    }
    PUT_LIT(b, "X-Funcd-Invocation-Id: ");
    put(b, inv->id, 36);
    PUT_LIT(b, "\r\nContent-Length: ");
    char digits[24], *d = digits + sizeof(digits);
    size_t len = req->entity.base ? req->entity.len : 0;
    do
        *--d = (char)('0' + len % 10);
    while (len /= 10);
    put(b, d, (size_t)(digits + sizeof(digits) - d));
    PUT_LIT(b, "\r\n\r\n");
    return b->data ? 0 : -1;
}

void funcd_gw_invoke(gw_thread *t, h2o_req_t *req, funcd_fn_target *target, uint64_t timeout_ms,
                     const char *ns, size_t nsl, const char *name, size_t nl, h2o_iovec_t rest,
                     const char *subject, const gw_track *track)
{
    invocation *inv = h2o_mem_alloc_shared(&req->pool, sizeof(*inv), dispose_invocation);
    memset(inv, 0, sizeof(*inv));
    inv->track = *track;
    inv->gen.proceed = on_proceed;
    inv->gen.stop = on_stop;
    inv->io_entry.cb = on_io_timeout;
    inv->req = req;
    inv->t = t;
    inv->target = target; /* the caller's reference passes to us */
    /* "ns/name", by hand: this runs for every request */
    const size_t half = (sizeof(inv->name) - 2) / 2;
    nsl = nsl < half ? nsl : half;
    nl = nl < half ? nl : half;
    memcpy(inv->name, ns, nsl);
    inv->name[nsl] = '/';
    memcpy(inv->name + nsl + 1, name, nl);
    inv->name[nsl + 1 + nl] = '\0';
    funcd_gw_new_id(t, inv->id);
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-funcd-invocation-id"), 0,
                          NULL, h2o_strdup(&req->pool, inv->id, strlen(inv->id)).base,
                          strlen(inv->id));
    funcd_edge_trace_start(&inv->tr, t, req);
    funcd_edge_note_start(t->edge, &inv->tr, req, inv->name, inv->id);
    inv->tmo = timeouts_for(t, timeout_ms ? timeout_ms : 30000);
    if (!inv->tmo || build_head(inv, rest, subject) < 0) {
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
    funcd_gw_thread_close_idle(t);
    free(t->free_ticket);
    t->free_ticket = NULL;
    while (t->timeouts) {
        gw_timeouts *g = t->timeouts;
        t->timeouts = g->next;
        /* A request still held when the thread ends (its client outlived the
         * drain) keeps its timer linked; the context goes away anyway. */
        while (!h2o_linklist_is_empty(&g->timeout._entries))
            h2o_timeout_unlink(H2O_STRUCT_FROM_MEMBER(h2o_timeout_entry_t, _link,
                                                      g->timeout._entries.next));
        h2o_timeout_dispose(t->ctx->loop, &g->timeout);
        free(g);
    }
}
