#include "http/httpd.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <h2o/http1.h>
#include <h2o/http2.h>

#include "funcd/sys/error.h"
#include "http/http1.h"
#include "util/misc.h"

#define FLUSH_MS 100  /* responses in flight may finish */
#define DRAIN_MS 1000 /* connections close after the hang-up */
/* Accepting pauses this long when descriptors run out or the connection
 * cap is reached (sooner when one of this thread's connections closes). */
#define PAUSE_MS 100

struct worker;

#define MAX_HEAD_FIELDS 100
/* Bytes of a refused request's body read (and dropped) before the
 * connection closes: enough for the answer to get out ahead of a reset. */
#define REFUSED_DRAIN (1024 * 1024)

/* An accepted connection, tracked so shutdown can close idle ones. */
typedef struct conn_ref {
    h2o_socket_t *sock;
    struct worker *w;
    struct conn_ref *prev, *next;
    h2o_socket_cb h2o_read; /* h2o's read callback, while on_head checks */
    int refused;            /* answered before its body; draining */
    size_t drained;
    int each;                   /* on_each_head: every request's head is looked at */
    h2o_socket_cb h2o_reqread;  /* h2o's HTTP/1 read callback, to wrap again */
    h2o_timeout_entry_t rearm;  /* after a request: wrap the next one's head */
    /* TLS: the handshake's timeout; a refusal being written. */
    h2o_timeout_entry_t tls_timeout;
    struct timeval connected_at;
    funcd_buf tls_answer;
    /* A chunked body being read under on_each_head's cap (body_cap != 0):
     * h2o decodes it in place after the head, at body_at of the input;
     * the head's method and target stay there too. */
    uint64_t body_cap;
    size_t body_at, method_at, method_len, target_at, target_len;
    h2o_timeout_entry_t body_rewrap; /* h2o stopped reading (100 Continue) */
} conn_ref;

typedef struct worker {
    funcd_httpd *srv;
    conn_ref conns; /* list anchor; only the worker's thread touches it */
    int stop_seen;
    int fd;
    pthread_t tid;
    int started;
    atomic_int ready;
    h2o_context_t ctx;
    h2o_accept_ctx_t accept;
    h2o_socket_t *listener;
    int paused;                     /* the listener's reads are stopped */
    h2o_timeout_t pause_timeout;    /* PAUSE_MS */
    h2o_timeout_entry_t resume;     /* linked while paused */
    h2o_timeout_t rearm_timeout;    /* 0 ms: after the loop's pending callbacks */
    int said_out_of_fds;            /* logged once per thread */
    h2o_multithread_receiver_t stop_receiver;
    h2o_multithread_message_t stop_msg;
    h2o_multithread_receiver_t quiesce_receiver;
    h2o_multithread_message_t quiesce_msg;
    int shutdown_requested; /* h2o_context_request_shutdown was called */
    /* Connections this thread serves, and those handed to it not yet
     * taken (accept_or_hand_off); read by every thread. */
    atomic_uint load;
    atomic_uint handoffs; /* handed to this thread, not yet taken */
    h2o_multithread_receiver_t handoff_receiver;
} worker;

/* A connection accepted by one thread for another, less loaded one. */
typedef struct handoff {
    h2o_multithread_message_t super;
    h2o_socket_export_t info;
} handoff;

typedef struct handler {
    h2o_handler_t super;
    funcd_httpd *srv;
} handler;

struct funcd_httpd {
    h2o_globalconf_t config;
    funcd_httpd_hooks hooks;
    unsigned nthreads;
    worker *workers;
    atomic_int stopping;
    atomic_int all_ready; /* every thread started: connections may be handed between them */
    int stopped;
    int quiesced;
    unsigned max_connections;
    atomic_uint connections; /* open on every thread */
    atomic_int check_heads;  /* on_each_head on */
    SSL_CTX *tls;            /* NULL: plain TCP */
    char thread_name[12];    /* "" : the threads keep the process's name */
    int sched_batch;         /* the threads run under SCHED_BATCH */
};

/* Bytes that arrive on a connection while its request is being answered (a
 * pipelined request, or the client's EOF) stay in the socket's input for
 * h2o, which looks there first when it reads the next request. */
static void on_read_parked(h2o_socket_t *sock, const char *err)
{
    (void)err;
    h2o_socket_read_stop(sock);
}

/*
 * h2o stops reading an HTTP/1 connection while it answers a request and
 * starts again once the answer is out. Its epoll loop turns each of those
 * into a syscall (EPOLL_CTL_DEL, then ADD): two per request, a third of
 * what a proxied request costs in syscalls. Reading is started again here,
 * in the same loop iteration as h2o stopped it, so the descriptor stays
 * registered; when h2o starts reading after the answer it only replaces
 * the callback. Not for an upgrade, whose new owner reads the socket.
 */
static void keep_reading(h2o_req_t *req)
{
    if (req->version >= 0x200 || req->upgrade.base || !req->conn->callbacks->get_socket)
        return;
    h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
    if (sock && !h2o_socket_is_reading(sock))
        h2o_socket_read_start(sock, on_read_parked);
}

static void on_read_head(h2o_socket_t *sock, const char *err);

/* A request of a connection whose heads are checked ended (h2o disposes
 * it just before it reads the next one): wrap the next head once h2o has
 * set its read callback again, from a 0 ms timer, which runs after the
 * loop's pending callbacks and before it polls again. */
static void on_checked_req_disposed(void *p)
{
    conn_ref *ref = *(conn_ref **)p;
    if (ref && !h2o_timeout_is_linked(&ref->rearm))
        h2o_timeout_link(ref->w->ctx.loop, &ref->w->rearm_timeout, &ref->rearm);
}

static void on_rearm(h2o_timeout_entry_t *entry)
{
    conn_ref *ref = H2O_STRUCT_FROM_MEMBER(conn_ref, rearm, entry);
    h2o_socket_t *sock = ref->sock;
    if (ref->h2o_read || ref->refused || sock->_cb.read != ref->h2o_reqread ||
        !h2o_socket_is_reading(sock) || sock->input->size != 0)
        return; /* closing, or h2o took the next head already (pipelined) */
    ref->h2o_read = sock->_cb.read;
    sock->_cb.read = on_read_head;
}

static void end_body_watch(conn_ref *ref);

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    funcd_httpd *srv = ((handler *)self)->srv;
    keep_reading(req);
    if (srv->hooks.on_each_head && req->version < 0x200 && atomic_load(&srv->check_heads)) {
        h2o_socket_t *sock = req->conn->callbacks->get_socket
                                 ? req->conn->callbacks->get_socket(req->conn)
                                 : NULL;
        conn_ref *ref = sock ? sock->on_close.data : NULL;
        if (ref && ref->body_cap) /* h2o read the whole body: under the cap */
            end_body_watch(ref);
        if (ref && ref->each)
            *(conn_ref **)h2o_mem_alloc_shared(&req->pool, sizeof(conn_ref *),
                                               on_checked_req_disposed) = ref;
    }
    return srv->hooks.on_req(srv->hooks.payload, req);
}

static void on_accept(h2o_socket_t *listener, const char *err);

/* Stops taking connections for PAUSE_MS: the listener stays readable while
 * connections wait in its backlog, so accepting again at once would spin. */
static void pause_accepting(worker *w)
{
    if (w->paused || !w->listener)
        return;
    w->paused = 1;
    h2o_socket_read_stop(w->listener);
    h2o_timeout_link(w->ctx.loop, &w->pause_timeout, &w->resume);
}

static void resume_accepting(worker *w)
{
    if (!w->paused)
        return;
    w->paused = 0;
    if (h2o_timeout_is_linked(&w->resume))
        h2o_timeout_unlink(&w->resume);
    if (w->listener)
        h2o_socket_read_start(w->listener, on_accept);
}

static void on_resume(h2o_timeout_entry_t *entry)
{
    resume_accepting(H2O_STRUCT_FROM_MEMBER(worker, resume, entry));
}

static void on_conn_close(void *data)
{
    conn_ref *ref = data;
    worker *w = ref->w;
    if (h2o_timeout_is_linked(&ref->rearm))
        h2o_timeout_unlink(&ref->rearm);
    if (h2o_timeout_is_linked(&ref->tls_timeout))
        h2o_timeout_unlink(&ref->tls_timeout);
    if (h2o_timeout_is_linked(&ref->body_rewrap))
        h2o_timeout_unlink(&ref->body_rewrap);
    funcd_buf_free(&ref->tls_answer);
    ref->prev->next = ref->next;
    ref->next->prev = ref->prev;
    free(ref);
    atomic_fetch_sub(&w->srv->connections, 1);
    atomic_fetch_sub(&w->load, 1);
    resume_accepting(w); /* a descriptor and a slot are free again */
}

/* Hands the connection back to h2o's own reading. */
static void unwrap_read(conn_ref *ref, h2o_socket_t *sock)
{
    sock->_cb.read = ref->h2o_read;
    ref->h2o_read = NULL;
}

/* A refused request's connection: its answer is out and its write side
 * shut; what the client still sends is dropped, up to REFUSED_DRAIN, then
 * h2o closes it (as it does on EOF, or at its request timeout). */
static void on_read_refused(h2o_socket_t *sock, const char *err)
{
    conn_ref *ref = sock->on_close.data;
    ref->drained += sock->input->size;
    h2o_buffer_consume(&sock->input, sock->input->size);
    if (err || ref->drained >= REFUSED_DRAIN) {
        h2o_socket_cb h2o_read = ref->h2o_read;
        unwrap_read(ref, sock);
        h2o_read(sock, err ? err : "refused before its body");
    }
}

static void tls_answer(conn_ref *ref, h2o_socket_t *sock, const struct iovec *iov, int n);

/* Writes `iov` straight to the socket (h2o has not seen the connection's
 * first bytes, so nothing else is queued: a fresh socket takes a few
 * hundred bytes; if not, the client sees a close), shuts its write side
 * and drops what the client still sends, up to REFUSED_DRAIN. Under TLS
 * the answer goes through the socket's encryption instead. */
static void answer_and_close(conn_ref *ref, h2o_socket_t *sock, const struct iovec *iov, int n)
{
    if (sock->ssl) {
        tls_answer(ref, sock, iov, n);
        return;
    }
    int fd = h2o_socket_get_fd(sock);
    ssize_t w = writev(fd, iov, n);
    (void)w;
    shutdown(fd, SHUT_WR);
    ref->refused = 1;
    sock->_cb.read = on_read_refused;
    on_read_refused(sock, NULL);
}

/* Answers `status` with `body` (JSON) and closes, without reading the
 * request's body. h2o has not seen the request: the answer goes straight
 * to the socket, which has nothing else to write. */
static void refuse(conn_ref *ref, h2o_socket_t *sock, int status, const funcd_buf *body)
{
    char head[256];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\nServer: funcd\r\n\r\n",
                     status, funcd_httpd_reason(status), body->len);
    struct iovec iov[2] = {{head, (size_t)n}, {body->data, body->len}};
    answer_and_close(ref, sock, iov, body->len ? 2 : 1);
}

/* The HTTP/2 client connection preface (RFC 9113, 3.4). */
static const char H2_PREFACE[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
#define H2_PREFACE_LEN (sizeof(H2_PREFACE) - 1)

/* 1: `in` starts with the HTTP/2 preface; -1: it may (too short to tell);
 * 0: it does not. */
static int h2_preface(const char *in, size_t len)
{
    size_t n = len < H2_PREFACE_LEN ? len : H2_PREFACE_LEN;
    if (memcmp(in, H2_PREFACE, n) != 0)
        return 0;
    return n == H2_PREFACE_LEN ? 1 : -1;
}

/* Refuses an HTTP/2 connection the way RFC 9113 (9.2.1) has a server ask
 * for HTTP/1.1: its own preface (an empty SETTINGS frame), then GOAWAY
 * with HTTP_1_1_REQUIRED and a reason as debug data. A client that
 * retries over HTTP/1.1 gets each head seen by on_head before its body. */
static void refuse_h2(conn_ref *ref, h2o_socket_t *sock)
{
    static const char why[] = "this port speaks HTTP/1.1 only";
    unsigned char frames[9 + 9 + 8 + sizeof(why) - 1] = {
        0, 0, 0, 0x4, 0, 0, 0, 0, 0,                      /* SETTINGS, empty */
        0, 0, 8 + sizeof(why) - 1, 0x7, 0, 0, 0, 0, 0,    /* GOAWAY on stream 0 */
        0, 0, 0, 0,                                       /* last stream: none */
        0, 0, 0, 0xd,                                     /* HTTP_1_1_REQUIRED */
    };
    memcpy(frames + 26, why, sizeof(why) - 1);
    struct iovec iov = {frames, sizeof(frames)};
    answer_and_close(ref, sock, &iov, 1);
}

/* The JSON Status of a request head that is not HTTP/1.x. */
static void bad_head_status(funcd_buf *body, const char *why)
{
    cJSON *st = cJSON_CreateObject();
    cJSON_AddStringToObject(st, "kind", "Status");
    cJSON_AddStringToObject(st, "apiVersion", "v1");
    cJSON_AddStringToObject(st, "status", "Failure");
    cJSON_AddNumberToObject(st, "code", 400);
    cJSON_AddStringToObject(st, "reason", "BadRequest");
    char msg[200];
    snprintf(msg, sizeof(msg), "the request is not valid HTTP/1.1: %s", why ? why : "bad head");
    cJSON_AddStringToObject(st, "message", msg);
    char *text = cJSON_PrintUnformatted(st);
    cJSON_Delete(st);
    if (text)
        funcd_buf_append(body, text, strlen(text));
    free(text);
}

/* ---- a chunked body under a cap ------------------------------------------
 * h2o 2.2.5 reads a whole body before any handler runs, up to the server's
 * own cap; a chunked body has no length to check in its head. While one is
 * read for a request on_each_head capped, h2o's reader is wrapped: h2o
 * decodes the chunks in place after the head, so the input past body_at is
 * the body so far, and once that passes the cap the hook answers (413)
 * before the rest is read and before any handler (so any worker) ran. */

static void end_body_watch(conn_ref *ref)
{
    ref->body_cap = 0;
    ref->h2o_read = NULL;
    if (h2o_timeout_is_linked(&ref->body_rewrap))
        h2o_timeout_unlink(&ref->body_rewrap);
}

static void on_read_body(h2o_socket_t *sock, const char *err);

/* The body so far against the cap; over it, the hook's answer. */
static void check_body(conn_ref *ref, h2o_socket_t *sock)
{
    size_t so_far = sock->input->size - ref->body_at;
    if (so_far <= ref->body_cap || h2o_socket_is_writing(sock))
        return;
    funcd_httpd *srv = ref->w->srv;
    const char *in = sock->input->bytes;
    funcd_httpd_head head = {in + ref->method_at, ref->method_len, in + ref->target_at,
                             ref->target_len, NULL, 0, 1, so_far, 0, NULL};
    funcd_buf body = FUNCD_BUF_INIT;
    int status = srv->hooks.on_each_head(srv->hooks.payload, &head, &body);
    if (status) {
        ref->body_cap = 0; /* ref->h2o_read stays: on_read_refused hands it the close */
        refuse(ref, sock, status, &body);
    } else { /* the function's cap went: h2o reads on alone */
        h2o_socket_cb h2o_read = ref->h2o_read;
        end_body_watch(ref);
        sock->_cb.read = h2o_read;
    }
    funcd_buf_free(&body);
}

/* Wraps h2o's reader again once it reads: after a 100 Continue h2o starts
 * reading with its own callback. */
static void rewrap_body(conn_ref *ref, h2o_socket_t *sock)
{
    if (!sock->_cb.read) { /* not yet: on the next loop turn */
        if (!h2o_timeout_is_linked(&ref->body_rewrap))
            h2o_timeout_link(ref->w->ctx.loop, &ref->w->rearm_timeout, &ref->body_rewrap);
        return;
    }
    ref->h2o_read = sock->_cb.read;
    sock->_cb.read = on_read_body;
    check_body(ref, sock); /* h2o decoded what had come with the head */
}

static void on_body_rewrap(h2o_timeout_entry_t *entry)
{
    conn_ref *ref = H2O_STRUCT_FROM_MEMBER(conn_ref, body_rewrap, entry);
    if (ref->body_cap && !ref->refused)
        rewrap_body(ref, ref->sock);
}

static void on_read_body(h2o_socket_t *sock, const char *err)
{
    conn_ref *ref = sock->on_close.data;
    h2o_socket_cb h2o_read = ref->h2o_read;
    if (err) {
        end_body_watch(ref);
        sock->_cb.read = h2o_read;
        h2o_read(sock, err);
        return;
    }
    h2o_read(sock, NULL);
    /* h2o may have closed the connection (the input goes first, then ref),
     * or taken the whole body (on_req ended the watch). */
    if (!sock->input || !ref->body_cap)
        return;
    if (sock->_cb.read != on_read_body)
        rewrap_body(ref, sock);
    else
        check_body(ref, sock);
}

/* on_each_head capped a chunked body: h2o reads it wrapped. */
static void watch_body(conn_ref *ref, h2o_socket_t *sock, const funcd_http1 *m, size_t head_len,
                       uint64_t cap)
{
    const char *in = sock->input->bytes;
    ref->body_cap = cap;
    ref->body_at = head_len;
    ref->method_at = (size_t)(m->method - in);
    ref->method_len = m->method_len;
    ref->target_at = (size_t)(m->target - in);
    ref->target_len = m->target_len;
    sock->_cb.read = on_read_body; /* ref->h2o_read is h2o's reader */
    on_read_body(sock, NULL);
}

/* Reads the head of a connection's first request before h2o does: a
 * request with a body goes on only if on_head lets it (h2o 2.2.5 would read
 * the whole body before any handler runs). */
static void on_read_head(h2o_socket_t *sock, const char *err)
{
    conn_ref *ref = sock->on_close.data;
    funcd_httpd *srv = ref->w->srv;
    h2o_socket_cb h2o_read = ref->h2o_read;
    if (err) {
        unwrap_read(ref, sock);
        h2o_read(sock, err);
        return;
    }
    int h2 = h2_preface(sock->input->bytes, sock->input->size);
    if (h2 < 0)
        return; /* more of the preface (or of a head) to come */
    if (h2 > 0 && ref->each) { /* HTTP/2 is h2o's: its bodies are checked by on_req */
        ref->each = 0;
        unwrap_read(ref, sock);
        h2o_read(sock, NULL);
        return;
    }
    if (h2 > 0) {
        refuse_h2(ref, sock);
        return;
    }
    funcd_http1_field fields[MAX_HEAD_FIELDS];
    funcd_http1 m;
    funcd_http1_init_request(&m, fields, MAX_HEAD_FIELDS);
    ssize_t len = funcd_http1_head(&m, sock->input->bytes, sock->input->size);
    if (len == 0 && sock->input->size < H2O_MAX_REQLEN)
        return; /* more of the head to come */
    if (len <= 0 && ref->each) { /* h2o answers a bad head its own way */
        unwrap_read(ref, sock);
        h2o_read(sock, NULL);
        return;
    }
    if (len <= 0) {
        /* Not a head h2o may read the body of unchecked: refused. */
        funcd_buf body = FUNCD_BUF_INIT;
        bad_head_status(&body, len == 0 ? "the request head is too long" : m.error);
        refuse(ref, sock, 400, &body);
        funcd_buf_free(&body);
        return;
    }
    funcd_httpd_head head = {m.method,   m.method_len, m.target, m.target_len, NULL, 0, m.has_body,
                             m.chunked || m.content_length == FUNCD_HTTP1_NO_LENGTH
                                 ? UINT64_MAX
                                 : m.content_length,
                             m.chunked, NULL};
    uint64_t body_cap = 0;
    if (ref->each && m.chunked)
        head.body_cap = &body_cap;
    for (size_t i = 0; i < m.nfields; i++) {
        const funcd_http1_field *f = &fields[i];
        if (FUNCD_HTTP1_NAME_IS(f, "authorization")) {
            head.authorization = f->value;
            head.authorization_len = f->value_len;
        }
    }
    funcd_buf body = FUNCD_BUF_INIT;
    int status = !head.has_body ? 0
                 : ref->each    ? srv->hooks.on_each_head(srv->hooks.payload, &head, &body)
                                : srv->hooks.on_head(srv->hooks.payload, &head, &body);
    if (status) {
        refuse(ref, sock, status, &body);
    } else if (body_cap) {
        watch_body(ref, sock, &m, (size_t)len, body_cap);
    } else {
        unwrap_read(ref, sock);
        h2o_read(sock, NULL);
    }
    funcd_buf_free(&body);
}

/* h2o now waits for the connection's first request: look at its head
 * first (the control plane's on_head, the data plane's on_each_head). */
static void watch_first_head(funcd_httpd *srv, conn_ref *ref, h2o_socket_t *sock)
{
    if (srv->hooks.on_head && h2o_socket_is_reading(sock)) {
        ref->h2o_read = sock->_cb.read;
        sock->_cb.read = on_read_head;
    } else if (srv->hooks.on_each_head && atomic_load(&srv->check_heads) &&
               h2o_socket_is_reading(sock)) {
        ref->each = 1;
        ref->h2o_reqread = ref->h2o_read = sock->_cb.read;
        sock->_cb.read = on_read_head;
    }
}

/* ---- TLS (docs/adr/0041-tls.md) ------------------------------------------
 * funcd runs the handshake itself rather than through h2o_accept: h2o's
 * own TLS accept hands the connection to its HTTP/1 reader, which reads
 * what came decrypted with the handshake's last flight at once, before the
 * head checks could wrap it. Here h2o's HTTP/1 takes the connection with
 * that input held back for a moment, the checks wrap its reader as over
 * TCP (watch_first_head), and then the input is handed on: the checks run
 * on the decrypted stream, HTTP/2 preface refusal included. */

static void tls_stop_timeout(conn_ref *ref)
{
    if (h2o_timeout_is_linked(&ref->tls_timeout))
        h2o_timeout_unlink(&ref->tls_timeout);
}

static void on_tls_timeout(h2o_timeout_entry_t *entry)
{
    conn_ref *ref = H2O_STRUCT_FROM_MEMBER(conn_ref, tls_timeout, entry);
    h2o_socket_close(ref->sock);
}

static void on_tls_handshake(h2o_socket_t *sock, const char *err)
{
    conn_ref *ref = sock->on_close.data;
    worker *w = ref->w;
    tls_stop_timeout(ref);
    if (err) {
        h2o_socket_close(sock);
        return;
    }
    h2o_iovec_t proto = h2o_socket_ssl_get_selected_protocol(sock);
    if (proto.len == 2 && memcmp(proto.base, "h2", 2) == 0) {
        /* Offered only where h2o's HTTP/2 serves (never with on_head). */
        h2o_http2_accept(&w->accept, sock, ref->connected_at);
        return;
    }
    h2o_buffer_t *input = sock->input;
    h2o_buffer_init(&sock->input, &h2o_socket_buffer_prototype);
    h2o_http1_accept(&w->accept, sock, ref->connected_at);
    sock->input = input;
    watch_first_head(w->srv, ref, sock);
    if (sock->input->size && h2o_socket_is_reading(sock))
        sock->_cb.read(sock, NULL);
}

static void tls_accept(conn_ref *ref, h2o_socket_t *sock)
{
    worker *w = ref->w;
    ref->connected_at = *h2o_get_timestamp(&w->ctx, NULL, NULL);
    ref->tls_timeout.cb = on_tls_timeout;
    h2o_timeout_link(w->ctx.loop, &w->ctx.handshake_timeout, &ref->tls_timeout);
    h2o_socket_ssl_handshake(sock, w->srv->tls, NULL, on_tls_handshake);
}

static void on_tls_answer_written(h2o_socket_t *sock, const char *err)
{
    if (!err)
        shutdown(h2o_socket_get_fd(sock), SHUT_WR);
}

/* answer_and_close over TLS: the answer is encrypted and written by h2o
 * (kept with the connection until it closes), then the write side shut. */
static void tls_answer(conn_ref *ref, h2o_socket_t *sock, const struct iovec *iov, int n)
{
    for (int i = 0; i < n; i++)
        funcd_buf_append(&ref->tls_answer, iov[i].iov_base, iov[i].iov_len);
    h2o_iovec_t buf = h2o_iovec_init(ref->tls_answer.data, ref->tls_answer.len);
    if (buf.len)
        h2o_socket_write(sock, &buf, 1, on_tls_answer_written);
    ref->refused = 1;
    sock->_cb.read = on_read_refused;
    on_read_refused(sock, NULL);
}

static void adopt(worker *w, h2o_socket_t *sock);

/* The thread serving the fewest connections. */
static worker *least_loaded(funcd_httpd *srv)
{
    worker *best = &srv->workers[0];
    for (unsigned i = 1; i < srv->nthreads; i++)
        if (atomic_load(&srv->workers[i].load) < atomic_load(&best->load))
            best = &srv->workers[i];
    return best;
}

/* The kernel spreads new connections over the threads' listeners by a hash
 * of their addresses, blind to load: 50 kept connections on two threads
 * were split 18/26 or 27/16, so that once the threads are the limit the
 * busiest one bounds the server (on the 2-core development machine the
 * clients are the limit, and no figure changed). A thread serving two or more connections more
 * than the least loaded one hands the new connection to it (its socket
 * exported, taken up by that thread's loop), so kept connections stay
 * spread within one of each other. */
static void accept_or_hand_off(worker *w, h2o_socket_t *sock)
{
    funcd_httpd *srv = w->srv;
    /* (not before every thread has its receiver: connections that waited in
     * the backlogs are accepted by the first thread up, alone for a while) */
    worker *to = srv->nthreads > 1 && atomic_load(&srv->all_ready) ? least_loaded(srv) : w;
    if (to != w && atomic_load(&w->load) >= atomic_load(&to->load) + 2) {
        handoff *h = malloc(sizeof(*h));
        /* Counted before `stopping` is looked at: a thread that stops waits
         * for what it was counted (worker_main: while (!handoffs_taken(w))). */
        atomic_fetch_add(&to->load, 1);
        atomic_fetch_add(&to->handoffs, 1);
        /* (h2o's export of an event-loop socket cannot fail; should it, the
         * socket is as it was and stays here) */
        if (h && !atomic_load(&srv->stopping) && h2o_socket_export(sock, &h->info) == 0) {
            memset(&h->super, 0, sizeof(h->super));
            h2o_multithread_send_message(&to->handoff_receiver, &h->super);
            return;
        }
        atomic_fetch_sub(&to->handoffs, 1);
        atomic_fetch_sub(&to->load, 1);
        free(h);
    }
    atomic_fetch_add(&w->load, 1);
    adopt(w, sock);
}

static void on_handoff_message(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    worker *w = H2O_STRUCT_FROM_MEMBER(worker, handoff_receiver, receiver);
    while (!h2o_linklist_is_empty(messages)) {
        handoff *h = H2O_STRUCT_FROM_MEMBER(handoff, super.link, messages->next);
        h2o_linklist_unlink(&h->super.link);
        h2o_socket_t *sock = h2o_socket_import(w->ctx.loop, &h->info);
        free(h);
        atomic_fetch_sub(&w->handoffs, 1);
        if (sock) {
            adopt(w, sock);
        } else {
            atomic_fetch_sub(&w->load, 1);
            atomic_fetch_sub(&w->srv->connections, 1);
        }
    }
}

static int handoffs_taken(worker *w)
{
    return atomic_load(&w->handoffs) == 0;
}

static void on_accept(h2o_socket_t *listener, const char *err)
{
    worker *w = listener->data;
    funcd_httpd *srv = w->srv;
    if (err)
        return;
    /* At the cap, new connections wait in the kernel's backlog. */
    if (atomic_load(&srv->connections) >= srv->max_connections) {
        pause_accepting(w);
        return;
    }
    h2o_socket_t *sock = h2o_evloop_socket_accept(listener);
    if (!sock) {
        int e = errno;
        /* h2o leaves the listener readable: without a pause the loop would
         * call us again at once, for as long as descriptors are short. */
        if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
            if (!w->said_out_of_fds) {
                w->said_out_of_fds = 1;
                fprintf(stderr, "funcd: cannot accept a connection: %s; accepting pauses for "
                                "%d ms at a time until descriptors are free (raise the limit: "
                                "ulimit -n, LimitNOFILE=)\n",
                        strerror(e), PAUSE_MS);
            }
            pause_accepting(w);
        }
        return;
    }
    /* Counted here, wherever it is served: a connection on its way to another
     * thread is within the cap too. */
    atomic_fetch_add(&srv->connections, 1);
    accept_or_hand_off(w, sock);
}

/* `sock` becomes one of this thread's connections; w->load and
 * srv->connections count it already. */
static void adopt(worker *w, h2o_socket_t *sock)
{
    funcd_httpd *srv = w->srv;
    conn_ref *ref = malloc(sizeof(*ref));
    if (!ref) {
        atomic_fetch_sub(&w->load, 1);
        atomic_fetch_sub(&srv->connections, 1);
        h2o_socket_close(sock);
        return;
    }
    ref->w = w;
    ref->sock = sock;
    ref->next = w->conns.next;
    ref->prev = &w->conns;
    ref->next->prev = ref;
    w->conns.next = ref;
    sock->on_close.cb = on_conn_close;
    sock->on_close.data = ref;
    ref->h2o_read = NULL;
    ref->refused = 0;
    ref->drained = 0;
    ref->each = 0;
    ref->h2o_reqread = NULL;
    memset(&ref->rearm, 0, sizeof(ref->rearm));
    ref->rearm.cb = on_rearm;
    ref->tls_timeout = (h2o_timeout_entry_t){0};
    ref->tls_answer = (funcd_buf)FUNCD_BUF_INIT;
    ref->body_cap = 0;
    ref->body_rewrap = (h2o_timeout_entry_t){0};
    ref->body_rewrap.cb = on_body_rewrap;
    if (srv->tls) {
        tls_accept(ref, sock);
        return;
    }
    h2o_accept(&w->accept, sock);
    watch_first_head(srv, ref, sock);
}

static void on_stop_message(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    worker *w = H2O_STRUCT_FROM_MEMBER(worker, stop_receiver, receiver);
    while (!h2o_linklist_is_empty(messages))
        h2o_linklist_unlink(messages->next);
    w->stop_seen = 1;
}

/* Once: a second request arms h2o 2.2.5's HTTP/2 graceful-shutdown timer
 * again, which it then leaves linked at dispose. */
static void request_shutdown(worker *w)
{
    if (w->shutdown_requested)
        return;
    w->shutdown_requested = 1;
    h2o_context_request_shutdown(&w->ctx);
}

static void close_listener(worker *w)
{
    if (!w->listener)
        return;
    resume_accepting(w); /* unlinks the timer */
    h2o_socket_read_stop(w->listener);
    h2o_socket_close(w->listener); /* closes w->fd, this thread's socket */
    w->listener = NULL;
    w->fd = -1;
}

/* Stop accepting; connections finish what they carry (HTTP/2 gets GOAWAY,
 * HTTP/1 responses close their connection) until the full stop. */
static void on_quiesce_message(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    worker *w = H2O_STRUCT_FROM_MEMBER(worker, quiesce_receiver, receiver);
    while (!h2o_linklist_is_empty(messages))
        h2o_linklist_unlink(messages->next);
    close_listener(w);
    request_shutdown(w);
}

/* Runs the loop until `done(w)` or `ms` have passed. */
static void run_until(worker *w, h2o_evloop_t *loop, int (*done)(worker *), int64_t ms)
{
    int64_t deadline = funcd_mono_ms() + ms;
    while (!done(w) && funcd_mono_ms() < deadline)
        h2o_evloop_run(loop, 10);
}

static int no_connections(worker *w)
{
    return w->conns.next == &w->conns;
}

static int stop_message_seen(worker *w)
{
    return w->stop_seen;
}

/* Makes every remaining connection see EOF (and fail its writes), so h2o
 * closes it on the next loop turn: idle keep-alive clients and stragglers. */
static void hang_up_all(worker *w)
{
    for (conn_ref *r = w->conns.next; r != &w->conns; r = r->next)
        shutdown(h2o_socket_get_fd(r->sock), SHUT_RDWR);
}

/* h2o keeps freed socket buffers in a per-thread recycle list that nothing
 * frees when the thread ends; hand them back before it does. (h2o 2.2.5
 * links the chunks through their first word, see lib/common/memory.c.) */
static void drain_recycled_buffers(void)
{
    h2o_mem_recycle_t *r = &h2o_socket_buffer_prototype.allocator;
    while (r->_link) {
        void **chunk = (void **)r->_link;
        r->_link = *chunk;
        r->cnt--;
        free(chunk);
    }
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    funcd_httpd *srv = w->srv;
    w->conns.next = w->conns.prev = &w->conns;
    h2o_evloop_t *loop = h2o_evloop_create();
    h2o_context_init(&w->ctx, loop, &srv->config);
    w->accept.ctx = &w->ctx;
    w->accept.hosts = srv->config.hosts;
    h2o_multithread_register_receiver(w->ctx.queue, &w->stop_receiver, on_stop_message);
    h2o_multithread_register_receiver(w->ctx.queue, &w->quiesce_receiver, on_quiesce_message);
    h2o_multithread_register_receiver(w->ctx.queue, &w->handoff_receiver, on_handoff_message);
    if (srv->thread_name[0]) {
        char name[16];
        snprintf(name, sizeof(name), "%s/%u", srv->thread_name, (unsigned)(w - srv->workers));
        (void)pthread_setname_np(pthread_self(), name);
    }
    if (srv->sched_batch) {
        /* Best effort: the policy is the thread's own (pid 0: the calling
         * thread), and a kernel or a seccomp filter that refuses it leaves
         * the thread as it was. RESET_ON_FORK: a process or thread this one
         * starts gets the default policy, not this one. */
        struct sched_param none = {0};
        (void)sched_setscheduler(0, SCHED_BATCH | SCHED_RESET_ON_FORK, &none);
    }
    if (srv->hooks.on_thread_init)
        srv->hooks.on_thread_init(srv->hooks.payload, &w->ctx);
    atomic_store(&w->ready, 1);

    h2o_timeout_init(loop, &w->pause_timeout, PAUSE_MS);
    h2o_timeout_init(loop, &w->rearm_timeout, 0);
    w->resume.cb = on_resume;
    w->listener = h2o_evloop_socket_create(loop, w->fd, H2O_SOCKET_FLAG_DONT_READ);
    w->listener->data = w;
    h2o_socket_read_start(w->listener, on_accept);

    while (!atomic_load(&srv->stopping))
        h2o_evloop_run(loop, INT32_MAX);

    /* Stop accepting and end streams; give responses in flight a moment to
     * go out, then hang up on every connection still open (idle keep-alive
     * ones included) and wait for h2o to close them. */
    close_listener(w);
    /* Connections another thread handed over before it saw `stopping` are
     * taken up first, to be ended with the rest. Without a deadline: each is
     * on its way (counted before the sender looked at `stopping`, sent right
     * after), and the queue must be empty before it is unregistered. */
    while (!handoffs_taken(w))
        h2o_evloop_run(loop, 10);
    if (srv->hooks.on_thread_stopping)
        srv->hooks.on_thread_stopping(srv->hooks.payload, &w->ctx);
    request_shutdown(w);
    run_until(w, loop, no_connections, FLUSH_MS);
    hang_up_all(w);
    run_until(w, loop, no_connections, DRAIN_MS);
    /* The stop message may still be queued if the loop left early. */
    run_until(w, loop, stop_message_seen, DRAIN_MS);

    /* h2o's HTTP/2 graceful shutdown arms a timer even with no connection;
     * the context cannot be disposed while it is linked. */
    if (h2o_timeout_is_linked(&w->ctx.http2._graceful_shutdown_timeout))
        h2o_timeout_unlink(&w->ctx.http2._graceful_shutdown_timeout);
    if (srv->hooks.on_thread_exit)
        srv->hooks.on_thread_exit(srv->hooks.payload, &w->ctx);
    h2o_multithread_unregister_receiver(w->ctx.queue, &w->stop_receiver);
    h2o_multithread_unregister_receiver(w->ctx.queue, &w->quiesce_receiver);
    h2o_multithread_unregister_receiver(w->ctx.queue, &w->handoff_receiver);
    h2o_context_dispose(&w->ctx);
    h2o_evloop_run(loop, 0); /* frees the sockets whose close was deferred */
    h2o_timeout_dispose(loop, &w->pause_timeout);
    while (!h2o_linklist_is_empty(&w->rearm_timeout._entries))
        h2o_timeout_unlink(H2O_STRUCT_FROM_MEMBER(h2o_timeout_entry_t, _link,
                                                  w->rearm_timeout._entries.next));
    h2o_timeout_dispose(loop, &w->rearm_timeout);
    h2o_evloop_destroy(loop);
    drain_recycled_buffers();
    return NULL;
}

int funcd_httpd_new(funcd_httpd **out, const char *addr, unsigned nthreads, size_t max_body,
                    const funcd_httpd_hooks *hooks, char *bound, size_t bound_len)
{
    *out = NULL;
    if (nthreads == 0)
        nthreads = 1;
    funcd_httpd *srv = calloc(1, sizeof(*srv));
    worker *workers = calloc(nthreads, sizeof(*workers));
    if (!srv || !workers) {
        free(srv);
        free(workers);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating an HTTP server");
    }
    srv->workers = workers;
    srv->nthreads = nthreads;
    srv->hooks = *hooks;
    srv->max_connections = FUNCD_HTTPD_MAX_CONNECTIONS_DEFAULT;
    for (unsigned i = 0; i < nthreads; i++)
        workers[i].fd = -1;

    /* A listening socket per thread, in one SO_REUSEPORT group, so that the
     * kernel spreads new connections over the threads. With one socket
     * shared by all, a burst of connections went to whichever thread woke
     * first (all of them, often), and the other cores idled. The first
     * socket binds without SO_REUSEPORT, so a port somebody holds fails as
     * before; only then is the flag set on it for its siblings to join
     * (a second funcd on the same port still fails: its first bind does). */
    char first[128];
    int rc = funcd_listen_tcp(addr, 0, first, sizeof(first));
    if (rc < 0)
        goto fail;
    workers[0].fd = rc;
    int one = 1;
    if (nthreads > 1 &&
        setsockopt(workers[0].fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) {
        rc = funcd_error_set(FUNCD_EIO, "cannot share the listener on %s: %s", first,
                             strerror(errno));
        goto fail;
    }
    for (unsigned i = 1; i < nthreads; i++) {
        rc = funcd_listen_sibling(workers[0].fd); /* its address, scope and all */
        if (rc < 0)
            goto fail;
        workers[i].fd = rc;
    }
    snprintf(bound, bound_len, "%s", first);

    signal(SIGPIPE, SIG_IGN);
    h2o_config_init(&srv->config);
    srv->config.max_request_entity_size = max_body;
    /* A server that checks heads before bodies speaks HTTP/1.1 only: h2o
     * reads an HTTP/2 request's whole body before any hook could look. */
    if (hooks->on_head)
        srv->config.http1.upgrade_to_http2 = 0;
    srv->config.server_name = h2o_iovec_init(H2O_STRLIT("funcd"));
    h2o_hostconf_t *host =
        h2o_config_register_host(&srv->config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
    handler *h = (handler *)h2o_create_handler(path, sizeof(*h));
    h->super.on_req = on_req;
    h->srv = srv;
    for (unsigned i = 0; i < nthreads; i++)
        workers[i].srv = srv;
    *out = srv;
    return 0;

fail:
    for (unsigned i = 0; i < nthreads; i++)
        if (workers[i].fd >= 0)
            close(workers[i].fd);
    free(workers);
    free(srv);
    return rc;
}

void funcd_httpd_check_heads(funcd_httpd *srv, int on)
{
    if (srv)
        atomic_store(&srv->check_heads, on != 0);
}

void funcd_httpd_set_tls(funcd_httpd *srv, SSL_CTX *tls)
{
    if (srv->tls)
        SSL_CTX_free(srv->tls);
    srv->tls = tls;
    if (tls)
        SSL_CTX_up_ref(tls);
}

void funcd_httpd_set_max_connections(funcd_httpd *srv, unsigned n)
{
    srv->max_connections = n ? n : FUNCD_HTTPD_MAX_CONNECTIONS_DEFAULT;
}

void funcd_httpd_set_server_name(funcd_httpd *srv, const char *name)
{
    /* h2o writes it with a sprintf of its own per answer, and outside
     * req->res.headers, where nothing could remove or replace it. */
    srv->config.server_name = name ? h2o_iovec_init(name, strlen(name)) : h2o_iovec_init(NULL, 0);
}

void funcd_httpd_set_threads(funcd_httpd *srv, const char *name, int batch)
{
    snprintf(srv->thread_name, sizeof(srv->thread_name), "%s", name ? name : "");
    srv->sched_batch = batch != 0;
}

int funcd_httpd_start(funcd_httpd *srv)
{
    for (unsigned i = 0; i < srv->nthreads; i++) {
        worker *w = &srv->workers[i];
        int err = pthread_create(&w->tid, NULL, worker_main, w);
        if (err != 0) {
            funcd_httpd_stop(srv);
            return funcd_error_set(FUNCD_EIO, "cannot start an HTTP thread: %s", strerror(err));
        }
        w->started = 1;
        /* Ready means its receivers exist, so stop() can always wake it. */
        while (!atomic_load(&w->ready))
            usleep(100);
    }
    atomic_store(&srv->all_ready, 1); /* hand-offs may go to any of them now */
    return 0;
}

void funcd_httpd_quiesce(funcd_httpd *srv)
{
    if (!srv || srv->stopped || srv->quiesced)
        return;
    srv->quiesced = 1;
    for (unsigned i = 0; i < srv->nthreads; i++) {
        worker *w = &srv->workers[i];
        if (w->started)
            h2o_multithread_send_message(&w->quiesce_receiver, &w->quiesce_msg);
    }
}

void funcd_httpd_stop(funcd_httpd *srv)
{
    if (!srv || srv->stopped)
        return;
    srv->stopped = 1;
    atomic_store(&srv->stopping, 1);
    for (unsigned i = 0; i < srv->nthreads; i++) {
        worker *w = &srv->workers[i];
        if (w->started)
            h2o_multithread_send_message(&w->stop_receiver, &w->stop_msg);
    }
    for (unsigned i = 0; i < srv->nthreads; i++) {
        worker *w = &srv->workers[i];
        if (w->started)
            pthread_join(w->tid, NULL);
        w->started = 0;
    }
}

void funcd_httpd_free(funcd_httpd *srv)
{
    if (!srv)
        return;
    funcd_httpd_stop(srv);
    for (unsigned i = 0; i < srv->nthreads; i++)
        if (srv->workers[i].fd >= 0)
            close(srv->workers[i].fd);
    if (srv->config.hosts)
        h2o_config_dispose(&srv->config);
    if (srv->tls)
        SSL_CTX_free(srv->tls);
    free(srv->workers);
    free(srv);
}

void funcd_httpd_send(h2o_req_t *req, int status, const char *content_type, const char *body,
                      size_t len)
{
    req->res.status = status;
    req->res.reason = funcd_httpd_reason(status);
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, content_type,
                   strlen(content_type));
    /* With its length (h2o_send_inline sets none): over HTTP/1.1 h2o 2.2.5
     * chunks only 200s, and any other status would end the connection. */
    if (status >= 200 && status != 204 && status != 304)
        req->res.content_length = len;
    h2o_send_inline(req, body, len);
}

const char *funcd_httpd_reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 507: return "Insufficient Storage";
    default: return "Status";
    }
}

h2o_iovec_t funcd_httpd_header(h2o_req_t *req, const h2o_token_t *token)
{
    ssize_t i = h2o_find_header(&req->headers, token, -1);
    if (i < 0)
        return h2o_iovec_init(NULL, 0);
    return req->headers.entries[i].value;
}
