/*
 * The gRPC server: nghttp2 server sessions over bufferevents.
 *
 * Data path: the read callback feeds every input byte to
 * nghttp2_session_mem_recv, whose callbacks build calls; then conn_flush
 * pulls frames with nghttp2_session_mem_send into the bufferevent's output
 * until that holds OUT_HIGH bytes. While the output is that full, reading
 * pauses: a client that does not read gets no new work accepted. The write
 * callback (output down to OUT_LOW) pulls more frames and resumes reading.
 * How much nghttp2 produces is bounded by the client's flow-control windows,
 * so the output always drains and reading always resumes.
 *
 * Flow control is manual (no automatic WINDOW_UPDATE), so a window reopens
 * only for bytes we have taken: copied into a call, or dropped because the
 * call was already answered (nghttp2 itself counts DATA for closed streams
 * as consumed). Today that is always at once; memory is bounded by
 * max_message per call and MAX_STREAMS per connection.
 *
 * nghttp2 forbids mem_send inside its callbacks, so a reply made during
 * mem_recv (a handler answering at once) only submits; the read callback
 * flushes after mem_recv returns. Replies from elsewhere flush at once.
 */
#include "fnrunner/grpc.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "controlplane/auth.h"
#include "funcd/sys/error.h"
#include "util/misc.h"

#define MAX_STREAMS 128
#define STREAM_WINDOW (1 << 20)
#define CONN_WINDOW (16 << 20)
#define MAX_HEADER_LIST (64 << 10)
#define OUT_HIGH (256 << 10)
#define OUT_LOW (64 << 10)
/* Encoded grpc-message bytes: peers cap header lists (16 KiB is common). */
#define MESSAGE_LIMIT (8 << 10)
/* Seconds a TLS client has to finish its handshake, as on the HTTP
 * listeners (h2o's handshake timeout): one that connects and sends
 * nothing must not hold a descriptor for ever. */
#define TLS_HANDSHAKE_S 10

typedef struct conn conn;

struct funcd_grpc_server {
    funcd_grpc_config cfg;
    struct evconnlistener *listener;
    struct event *accept_retry; /* re-enables the listener after an accept error */
    nghttp2_session_callbacks *callbacks;
    nghttp2_option *option;
    conn *conns;
    unsigned n_conns;
    int full; /* the listener is paused: n_conns reached cfg.max_conns */
    char *unix_path; /* the Unix socket we made, removed at free */
};

struct conn {
    funcd_grpc_server *srv;
    conn *prev, *next;
    struct bufferevent *bev;
    nghttp2_session *h2;
    funcd_grpc_call *calls; /* calls whose stream is open */
    int in_recv;            /* inside mem_recv: submit, but flush later */
    int read_paused;
    int tls;                /* bev is an OpenSSL bufferevent */
    int handshaking;        /* TLS: its handshake is not done (its timeout is the handshake's) */
};

struct funcd_grpc_call {
    conn *conn; /* NULL once the stream is gone */
    funcd_grpc_call *prev, *next;
    int32_t stream_id;
    unsigned stream_open : 1;  /* HTTP/2 still owns the call */
    unsigned handler_owns : 1; /* handler invoked, reply not yet made */
    unsigned answered : 1;     /* a response was submitted */
    unsigned cancelled : 1;
    unsigned remote_done : 1; /* the client's END_STREAM arrived */
    unsigned is_post : 1;
    unsigned grpc_type : 1; /* content-type application/grpc[+...;...] */
    unsigned bad_timeout : 1;
    unsigned authorized : 1; /* a valid bearer token came (or none is needed) */
    char *path;
    int64_t timeout_ms; /* -1: none */
    int64_t deadline_ms;
    struct event *timer;
    funcd_grpc_frame frame;
    funcd_buf body; /* the framed response message */
    size_t body_sent;
    char status[12];
    funcd_buf message; /* grpc-message, encoded */
};

static void conn_flush(conn *c);

__attribute__((format(printf, 3, 4))) static void log_at(const funcd_grpc_server *s,
                                                         funcd_log_level lv, const char *fmt, ...)
{
    /* funcd_log without a logger prints every level; keep debug quiet then. */
    if (!s->cfg.logger && lv < FUNCD_LOG_WARN)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    funcd_log(s->cfg.logger, lv, "%s", line);
}

/* ---- calls ---------------------------------------------------------------- */

static void call_free(funcd_grpc_call *call)
{
    if (call->timer)
        event_free(call->timer);
    funcd_grpc_frame_free(&call->frame);
    funcd_buf_free(&call->body);
    funcd_buf_free(&call->message);
    free(call->path);
    free(call);
}

static void call_stop_timer(funcd_grpc_call *call)
{
    if (call->timer) {
        event_free(call->timer);
        call->timer = NULL;
    }
}

/* A connection with no call in flight may be silent for cfg.idle_ms, then
 * it is closed (conn_event); one with calls waits for them. Either way a
 * client that takes none of what is written to it for that long is cut. */
static void conn_idle_watch(conn *c)
{
    if (c->handshaking)
        return; /* the handshake's own timeout runs */
    struct timeval idle = {(time_t)(c->srv->cfg.idle_ms / 1000),
                           (suseconds_t)(c->srv->cfg.idle_ms % 1000) * 1000};
    bufferevent_set_timeouts(c->bev, c->calls ? NULL : &idle, &idle);
}

/* The stream is gone: the call leaves its connection, cancelled unless it
 * was answered; freed unless the handler still holds it. */
static void call_detach(funcd_grpc_call *call)
{
    conn *c = call->conn;
    if (c) {
        if (call->prev)
            call->prev->next = call->next;
        else
            c->calls = call->next;
        if (call->next)
            call->next->prev = call->prev;
        nghttp2_session_set_stream_user_data(c->h2, call->stream_id, NULL);
        if (!c->calls)
            conn_idle_watch(c);
    }
    call->conn = NULL;
    call->prev = call->next = NULL;
    call->stream_open = 0;
    call_stop_timer(call);
    if (!call->answered || call->handler_owns)
        call->cancelled = 1;
    if (!call->handler_owns)
        call_free(call);
}

static nghttp2_nv make_nv(const char *name, const char *value)
{
    return (nghttp2_nv){(uint8_t *)name, (uint8_t *)value, strlen(name), strlen(value),
                        NGHTTP2_NV_FLAG_NONE};
}

static void set_status(funcd_grpc_call *call, int status, const char *message)
{
    snprintf(call->status, sizeof(call->status), "%d", status);
    call->message.len = 0;
    if (message && *message && funcd_grpc_percent_encode(&call->message, message, MESSAGE_LIMIT) < 0)
        call->message.len = 0;
}

/* The status nv pairs into nv[0..); returns how many. */
static size_t status_nv(const funcd_grpc_call *call, nghttp2_nv *nv)
{
    nv[0] = make_nv("grpc-status", call->status);
    if (!call->message.len)
        return 1;
    nv[1] = make_nv("grpc-message", call->message.data);
    return 2;
}

static void call_reset(funcd_grpc_call *call)
{
    nghttp2_submit_rst_stream(call->conn->h2, NGHTTP2_FLAG_NONE, call->stream_id,
                              NGHTTP2_INTERNAL_ERROR);
}

/* HEADERS with END_STREAM and no DATA: gRPC's "trailers-only" response. */
static void respond_headers_only(funcd_grpc_call *call, const char *http_status, int status,
                                 const char *message)
{
    call->answered = 1;
    call_stop_timer(call);
    set_status(call, status, message);
    nghttp2_nv nv[4] = {make_nv(":status", http_status),
                        make_nv("content-type", "application/grpc")};
    size_t n = 2 + status_nv(call, nv + 2);
    if (nghttp2_submit_response(call->conn->h2, call->stream_id, nv, n, NULL) != 0)
        call_reset(call);
}

static ssize_t read_body(nghttp2_session *h2, int32_t stream_id, uint8_t *buf, size_t length,
                         uint32_t *flags, nghttp2_data_source *source, void *user)
{
    funcd_grpc_call *call = source->ptr;
    size_t n = call->body.len - call->body_sent;
    if (n > length)
        n = length;
    memcpy(buf, call->body.data + call->body_sent, n);
    call->body_sent += n;
    if (call->body_sent < call->body.len)
        return (ssize_t)n;
    /* The status travels in trailers, which nghttp2 sends after this DATA. */
    *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    nghttp2_nv nv[2];
    size_t nn = status_nv(call, nv);
    if (nghttp2_submit_trailer(h2, stream_id, nv, nn) != 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    return (ssize_t)n;
}

static void respond(funcd_grpc_call *call, int status, const char *message, const uint8_t *msg,
                    size_t len)
{
    char why[160];
    size_t max = call->conn->srv->cfg.max_message;
    if (status == FUNCD_GRPC_OK && len > max) {
        snprintf(why, sizeof(why), "response message of %zu bytes exceeds the %zu-byte limit", len,
                 max);
        status = FUNCD_GRPC_RESOURCE_EXHAUSTED;
        message = why;
    }
    if (status != FUNCD_GRPC_OK) {
        respond_headers_only(call, "200", status, message);
        return;
    }
    call->answered = 1;
    call_stop_timer(call);
    set_status(call, status, message);
    if (funcd_grpc_frame_encode(&call->body, msg, len) < 0) {
        call_reset(call);
        return;
    }
    nghttp2_nv nv[] = {make_nv(":status", "200"), make_nv("content-type", "application/grpc"),
                       make_nv("grpc-accept-encoding", "identity")};
    nghttp2_data_provider dp = {.source.ptr = call, .read_callback = read_body};
    if (nghttp2_submit_response(call->conn->h2, call->stream_id, nv, 3, &dp) != 0)
        call_reset(call);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    funcd_grpc_call *call = arg;
    conn *c = call->conn;
    call->cancelled = 1;
    if (!c || call->answered)
        return;
    respond_headers_only(call, "200", FUNCD_GRPC_DEADLINE_EXCEEDED, "deadline exceeded");
    conn_flush(c);
}

static int start_deadline(funcd_grpc_call *call)
{
    if (call->timeout_ms < 0)
        return 0;
    call->deadline_ms = funcd_mono_ms() + call->timeout_ms;
    if (call->deadline_ms == 0)
        call->deadline_ms = 1; /* 0 means "no deadline" to callers */
    call->timer = evtimer_new(call->conn->srv->cfg.loop, on_deadline, call);
    struct timeval tv = {(time_t)(call->timeout_ms / 1000),
                         (suseconds_t)(call->timeout_ms % 1000 * 1000)};
    return call->timer && evtimer_add(call->timer, &tv) == 0 ? 0 : -1;
}

/* A well-formed gRPC method path is "/service/method". */
static int path_ok(const char *p)
{
    const char *slash = p && p[0] == '/' ? strchr(p + 1, '/') : NULL;
    return slash && slash > p + 1 && slash[1] && !strchr(slash + 1, '/');
}

/* The request headers are complete: refuse what is not a gRPC call. */
static void call_begin(funcd_grpc_call *call)
{
    if (!call->grpc_type)
        respond_headers_only(call, "415", FUNCD_GRPC_INTERNAL,
                             "content-type must be application/grpc");
    else if (!call->is_post)
        respond_headers_only(call, "405", FUNCD_GRPC_INTERNAL, "method must be POST");
    else if (!path_ok(call->path))
        respond_headers_only(call, "200", FUNCD_GRPC_UNIMPLEMENTED, "malformed method name");
    else if (!call->authorized && strcmp(call->path, FUNCD_GRPC_HEALTH_CHECK_PATH) != 0)
        respond_headers_only(call, "200", FUNCD_GRPC_UNAUTHENTICATED,
                             "missing or invalid bearer token: send the metadata "
                             "`authorization: Bearer <token>` with a token of funcd's "
                             "--fn-runner-token-file (funcdctl: --token or FUNCD_TOKEN)");
    else if (call->bad_timeout)
        respond_headers_only(call, "200", FUNCD_GRPC_INTERNAL, "malformed grpc-timeout");
    else if (start_deadline(call) < 0)
        respond_headers_only(call, "200", FUNCD_GRPC_INTERNAL, "cannot arm the deadline timer");
    else if (call->timeout_ms == 0)
        respond_headers_only(call, "200", FUNCD_GRPC_DEADLINE_EXCEEDED, "deadline exceeded");
}

static void health_check(funcd_grpc_call *call, const uint8_t *msg, size_t len)
{
    const uint8_t *svc;
    size_t svc_len;
    uint8_t out[2];
    if (funcd_grpc_health_request_service(msg, len, &svc, &svc_len) < 0) {
        respond(call, FUNCD_GRPC_INTERNAL, "cannot parse HealthCheckRequest", NULL, 0);
        return;
    }
    static const char evaluator[] = "evaluator.FunctionEvaluator";
    if (svc_len != 0 &&
        !(svc_len == sizeof(evaluator) - 1 && memcmp(svc, evaluator, svc_len) == 0)) {
        respond(call, FUNCD_GRPC_NOT_FOUND, "unknown service", NULL, 0);
        return;
    }
    size_t n = funcd_grpc_health_response(out, 1 /* SERVING */);
    respond(call, FUNCD_GRPC_OK, NULL, out, n);
}

/* The client finished sending: check the one message and dispatch. */
static void call_request_done(funcd_grpc_call *call)
{
    call->remote_done = 1;
    if (call->answered)
        return;
    if (funcd_grpc_frame_partial(&call->frame) && call->frame.count == 0) {
        respond(call, FUNCD_GRPC_INTERNAL, "request ended inside a message", NULL, 0);
        return;
    }
    if (call->frame.count == 0) {
        respond(call, FUNCD_GRPC_INTERNAL, "no request message in a unary call", NULL, 0);
        return;
    }
    const uint8_t *msg = call->frame.msg.data ? (const uint8_t *)call->frame.msg.data
                                              : (const uint8_t *)"";
    size_t len = call->frame.msg.len;
    if (strcmp(call->path, FUNCD_GRPC_HEALTH_CHECK_PATH) == 0) {
        health_check(call, msg, len);
        return;
    }
    const funcd_grpc_config *cfg = &call->conn->srv->cfg;
    if (funcd_has_prefix(call->path, "/grpc.health.v1.Health/") || !cfg->handler) {
        respond(call, FUNCD_GRPC_UNIMPLEMENTED, "unknown method", NULL, 0);
        return;
    }
    call->handler_owns = 1;
    cfg->handler(call, call->path, msg, len, cfg->payload);
}

static void frame_failed(funcd_grpc_call *call, int rc)
{
    if (rc == FUNCD_GRPC_FRAME_COMPRESSED)
        respond(call, FUNCD_GRPC_UNIMPLEMENTED, "compression is not supported", NULL, 0);
    else if (rc == FUNCD_GRPC_FRAME_TOO_LARGE) {
        char why[128];
        snprintf(why, sizeof(why), "request message larger than the %zu-byte limit",
                 call->frame.max);
        respond(call, FUNCD_GRPC_RESOURCE_EXHAUSTED, why, NULL, 0);
    } else if (rc == FUNCD_GRPC_FRAME_BAD_FLAG)
        respond(call, FUNCD_GRPC_INTERNAL, "invalid message flags", NULL, 0);
    else
        respond(call, FUNCD_GRPC_RESOURCE_EXHAUSTED, "out of memory", NULL, 0);
}

static void call_data(funcd_grpc_call *call, const uint8_t *data, size_t len)
{
    size_t pos = 0, used;
    while (pos < len && !call->answered) {
        int rc = funcd_grpc_frame_decode(&call->frame, data + pos, len - pos, &used);
        pos += used;
        if (rc < 0)
            frame_failed(call, rc);
        else if (rc == FUNCD_GRPC_FRAME_MESSAGE && pos < len)
            respond(call, FUNCD_GRPC_INTERNAL, "more than one request message in a unary call",
                    NULL, 0);
    }
}

/* ---- nghttp2 callbacks ------------------------------------------------------ */

static funcd_grpc_call *stream_call(nghttp2_session *h2, int32_t stream_id)
{
    return stream_id > 0 ? nghttp2_session_get_stream_user_data(h2, stream_id) : NULL;
}

static int on_begin_headers(nghttp2_session *h2, const nghttp2_frame *frame, void *user)
{
    conn *c = user;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    funcd_grpc_call *call = calloc(1, sizeof(*call));
    if (!call)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    call->conn = c;
    call->stream_id = frame->hd.stream_id;
    call->stream_open = 1;
    call->timeout_ms = -1;
    call->authorized = c->srv->cfg.auth == NULL;
    funcd_grpc_frame_init(&call->frame, c->srv->cfg.max_message);
    if (nghttp2_session_set_stream_user_data(h2, call->stream_id, call) != 0) {
        call_free(call);
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    call->next = c->calls;
    if (c->calls)
        c->calls->prev = call;
    c->calls = call;
    if (!call->next)
        conn_idle_watch(c); /* busy: not idle */
    return 0;
}

static int is_grpc_type(const uint8_t *v, size_t n)
{
    static const char t[] = "application/grpc";
    size_t tl = sizeof(t) - 1;
    return n >= tl && strncasecmp((const char *)v, t, tl) == 0 &&
           (n == tl || v[tl] == '+' || v[tl] == ';');
}

#define NAME_IS(lit) (namelen == sizeof(lit) - 1 && memcmp(name, lit, namelen) == 0)

static int on_header(nghttp2_session *h2, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user)
{
    funcd_grpc_call *call = stream_call(h2, frame->hd.stream_id);
    if (!call || frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* trailers from the client carry nothing we use */
    if (NAME_IS(":path")) {
        free(call->path);
        if (!(call->path = funcd_strndup((const char *)value, valuelen)))
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    } else if (NAME_IS(":method")) {
        call->is_post = valuelen == 4 && memcmp(value, "POST", 4) == 0;
    } else if (NAME_IS("content-type")) {
        call->grpc_type = is_grpc_type(value, valuelen);
    } else if (NAME_IS("grpc-timeout")) {
        call->timeout_ms = funcd_grpc_parse_timeout((const char *)value, valuelen);
        call->bad_timeout = call->timeout_ms < 0;
    } else if (NAME_IS("authorization") && call->conn->srv->cfg.auth) {
        static const char bearer[] = "Bearer ";
        const size_t bl = sizeof(bearer) - 1;
        call->authorized = valuelen > bl && strncasecmp((const char *)value, bearer, bl) == 0 &&
                           funcd_auth_find(call->conn->srv->cfg.auth, (const char *)value + bl,
                                           valuelen - bl) != NULL;
    }
    return 0;
}

static int on_frame_recv(nghttp2_session *h2, const nghttp2_frame *frame, void *user)
{
    funcd_grpc_call *call = stream_call(h2, frame->hd.stream_id);
    if (!call || (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA))
        return 0;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST)
        call_begin(call);
    if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
        call_request_done(call);
    return 0;
}

static int on_data_chunk(nghttp2_session *h2, uint8_t flags, int32_t stream_id,
                         const uint8_t *data, size_t len, void *user)
{
    /* Copied (or dropped) right away: the window reopens as data arrives. */
    if (nghttp2_session_consume(h2, stream_id, len) != 0)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    funcd_grpc_call *call = stream_call(h2, stream_id);
    if (call && !call->answered)
        call_data(call, data, len);
    return 0;
}

static int on_frame_send(nghttp2_session *h2, const nghttp2_frame *frame, void *user)
{
    if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
        !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    funcd_grpc_call *call = stream_call(h2, frame->hd.stream_id);
    /* Answered before the request ended (an error, a deadline): tell the
     * client to stop sending, as HTTP/2 section 8.1 allows. */
    if (call && !call->remote_done)
        nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_NO_ERROR);
    return 0;
}

static int on_stream_close(nghttp2_session *h2, int32_t stream_id, uint32_t error_code,
                           void *user)
{
    funcd_grpc_call *call = stream_call(h2, stream_id);
    if (call)
        call_detach(call);
    return 0;
}

static int make_callbacks(funcd_grpc_server *s)
{
    if (nghttp2_session_callbacks_new(&s->callbacks) != 0 || nghttp2_option_new(&s->option) != 0)
        return -1;
    nghttp2_session_callbacks *cb = s->callbacks;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    nghttp2_option_set_no_auto_window_update(s->option, 1);
    return 0;
}

/* ---- connections -------------------------------------------------------- */

static void conn_free(conn *c)
{
    while (c->calls)
        call_detach(c->calls);
    nghttp2_session_del(c->h2);
    bufferevent_free(c->bev);
    if (c->prev)
        c->prev->next = c->next;
    else
        c->srv->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    funcd_grpc_server *s = c->srv;
    s->n_conns--;
    free(c);
    if (s->full && s->n_conns < s->cfg.max_conns && s->listener) {
        s->full = 0;
        evconnlistener_enable(s->listener);
    }
}

static void conn_fail(conn *c, const char *why)
{
    log_at(c->srv, FUNCD_LOG_DEBUG, "grpc: closing a connection: %s", why);
    conn_free(c);
}

/* Moves frames to the output and decides whether to read or to close.
 * May free `c`: callers touch nothing of it afterwards. */
static void conn_flush(conn *c)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);
    while (evbuffer_get_length(out) < OUT_HIGH) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->h2, &data);
        if (n < 0) {
            conn_fail(c, nghttp2_strerror((int)n));
            return;
        }
        if (n == 0)
            break;
        if (evbuffer_add(out, data, (size_t)n) != 0) {
            conn_fail(c, "out of memory");
            return;
        }
    }
    int full = evbuffer_get_length(out) >= OUT_HIGH;
    if (full != c->read_paused) {
        c->read_paused = full;
        if (full)
            bufferevent_disable(c->bev, EV_READ);
        else
            bufferevent_enable(c->bev, EV_READ);
    }
    if (!nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2) &&
        evbuffer_get_length(out) == 0)
        conn_free(c); /* done both ways (GOAWAY exchanged or a fatal error) */
}

static void conn_read(struct bufferevent *bev, void *arg)
{
    conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    while (evbuffer_get_length(in) > 0) {
        struct evbuffer_iovec v;
        if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
            break;
        c->in_recv = 1;
        ssize_t rv = nghttp2_session_mem_recv(c->h2, v.iov_base, v.iov_len);
        c->in_recv = 0;
        if (rv < 0) {
            conn_fail(c, nghttp2_strerror((int)rv));
            return;
        }
        evbuffer_drain(in, v.iov_len);
    }
    conn_flush(c);
}

static void conn_write(struct bufferevent *bev, void *arg)
{
    conn_flush(arg);
}

static void conn_event(struct bufferevent *bev, short what, void *arg)
{
    conn *c = arg;
    if (what & BEV_EVENT_CONNECTED) { /* the TLS handshake is done: idle time from now */
        c->handshaking = 0;
        conn_idle_watch(c);
        return;
    }
    if (what & BEV_EVENT_TIMEOUT)
        conn_fail(c, c->handshaking            ? "the TLS handshake did not complete in time"
                     : what & BEV_EVENT_WRITING ? "the client took nothing for the idle timeout"
                                                : "idle: no call for the idle timeout");
    else if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        conn_fail(arg, what & BEV_EVENT_EOF ? "closed by the client"
                                            : evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
}

int funcd_grpc_server_adopt(funcd_grpc_server *s, struct bufferevent *bev)
{
    conn *c = calloc(1, sizeof(*c));
    if (!c || nghttp2_session_server_new2(&c->h2, s->callbacks, c, s->option) != 0) {
        free(c);
        bufferevent_free(bev);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory for a gRPC connection");
    }
    c->srv = s;
    c->bev = bev;
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, MAX_STREAMS},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST},
    };
    if (nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0])) != 0 ||
        nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, CONN_WINDOW) != 0) {
        conn_free(c);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory for a gRPC connection");
    }
    bufferevent_setcb(bev, conn_read, conn_write, conn_event, c);
    bufferevent_setwatermark(bev, EV_WRITE, OUT_LOW, 0);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    conn_idle_watch(c);
    conn_flush(c);
    return 0;
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
                      void *arg)
{
    funcd_grpc_server *s = arg;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    /* TLS (docs/adr/0041-tls.md): libevent's OpenSSL bufferevent runs the
     * handshake, then the session reads and writes plaintext through it as
     * through a socket's. A Unix socket stays plain. */
    int tls = s->cfg.tls && sa->sa_family != AF_UNIX;
    SSL *ssl = tls ? SSL_new(s->cfg.tls) : NULL;
    struct bufferevent *bev = NULL;
    if (ssl) /* frees `ssl` itself when it fails (BEV_OPT_CLOSE_ON_FREE) */
        bev = bufferevent_openssl_socket_new(s->cfg.loop, fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                             BEV_OPT_CLOSE_ON_FREE);
    else if (!tls)
        bev = bufferevent_socket_new(s->cfg.loop, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        close(fd);
        return;
    }
    if (ssl) /* a client that hangs up without close_notify is just gone */
        bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    if (funcd_grpc_server_adopt(s, bev) < 0) {
        log_at(s, FUNCD_LOG_WARN, "grpc: %s", funcd_error_last()->message);
    } else if (ssl) {
        s->conns->tls = s->conns->handshaking = 1; /* adopt put it first */
        struct timeval handshake = {TLS_HANDSHAKE_S, 0};
        bufferevent_set_timeouts(bev, &handshake, &handshake);
    }
    if (s->n_conns >= s->cfg.max_conns && !s->full) { /* the rest wait in the backlog */
        s->full = 1;
        evconnlistener_disable(l);
    }
}

/* accept() failing (EMFILE, ENOBUFS) would fire again at once, forever:
 * pause the listener for a moment instead. */
static void on_accept_error(struct evconnlistener *l, void *arg)
{
    funcd_grpc_server *s = arg;
    log_at(s, FUNCD_LOG_WARN, "grpc: cannot accept a connection: %s",
           evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
    struct timeval tv = {0, 100 * 1000};
    if (evconnlistener_disable(l) == 0 && evtimer_add(s->accept_retry, &tv) != 0)
        evconnlistener_enable(l);
}

static void on_accept_retry(evutil_socket_t fd, short what, void *arg)
{
    funcd_grpc_server *s = arg;
    if (!s->full)
        evconnlistener_enable(s->listener);
}

/* ---- the server --------------------------------------------------------- */

/* A listening Unix socket at `path`, mode 0600 from the start (fchmod
 * before bind sets the mode bind gives the file). */
static int listen_unix(funcd_grpc_server *s, const char *path, char *bound, size_t bound_len)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    struct stat st;
    if (!*path || strlen(path) >= sizeof(sun.sun_path))
        return funcd_error_set(FUNCD_EINVAL, "unix socket path \"%s\" is empty or longer than "
                               "%zu bytes", path, sizeof(sun.sun_path) - 1);
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            return funcd_error_set(FUNCD_EBIND, "cannot listen on unix:%s: a file that is not a "
                                   "socket is there", path);
        unlink(path); /* a socket left by an earlier run */
    }
    memcpy(sun.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || fchmod(fd, 0600) != 0 ||
        bind(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0 || chmod(path, 0600) != 0 ||
        listen(fd, SOMAXCONN) != 0) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        return funcd_error_set(FUNCD_EBIND, "cannot listen on unix:%s: %s", path, strerror(err));
    }
    if (!(s->unix_path = strdup(path))) {
        close(fd);
        unlink(path);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory");
    }
    snprintf(bound, bound_len, "unix:%s", path);
    return fd;
}

int funcd_grpc_server_new(funcd_grpc_server **out, const funcd_grpc_config *cfg, const char *addr,
                          char *bound, size_t bound_len)
{
    *out = NULL;
    if (!cfg || !cfg->loop)
        return funcd_error_set(FUNCD_EINVAL, "gRPC server needs an event loop");
    funcd_grpc_server *s = calloc(1, sizeof(*s));
    if (!s)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory for the gRPC server");
    s->cfg = *cfg;
    if (!s->cfg.max_message)
        s->cfg.max_message = FUNCD_GRPC_DEFAULT_MAX_MESSAGE;
    if (s->cfg.max_message > UINT32_MAX)
        s->cfg.max_message = UINT32_MAX;
    if (!s->cfg.max_conns)
        s->cfg.max_conns = FUNCD_GRPC_DEFAULT_MAX_CONNS;
    if (!s->cfg.idle_ms)
        s->cfg.idle_ms = FUNCD_GRPC_DEFAULT_IDLE_MS;
    if (make_callbacks(s) < 0) {
        funcd_grpc_server_free(s);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory for the gRPC server");
    }
    if (addr) {
        int fd = strncmp(addr, "unix:", 5) == 0 ? listen_unix(s, addr + 5, bound, bound_len)
                                               : funcd_listen_tcp(addr, 0, bound, bound_len);
        if (fd < 0) {
            funcd_grpc_server_free(s);
            return fd;
        }
        /* workers are forked from this process: no inherited connections */
        unsigned flags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC;
        s->listener = evconnlistener_new(s->cfg.loop, on_accept, s, flags, -1, fd);
        s->accept_retry = evtimer_new(s->cfg.loop, on_accept_retry, s);
        if (!s->listener || !s->accept_retry) {
            if (!s->listener)
                close(fd);
            funcd_grpc_server_free(s);
            return funcd_error_set(FUNCD_EIO, "cannot watch the gRPC listener on %s", bound);
        }
        evconnlistener_set_error_cb(s->listener, on_accept_error);
    }
    *out = s;
    return 0;
}

/* GOAWAY and whatever else is queued, written once without waiting. */
static void conn_goaway(conn *c)
{
    nghttp2_session_terminate_session(c->h2, NGHTTP2_NO_ERROR);
    struct evbuffer *out = bufferevent_get_output(c->bev);
    const uint8_t *data;
    ssize_t n;
    while (evbuffer_get_length(out) < OUT_HIGH && (n = nghttp2_session_mem_send(c->h2, &data)) > 0)
        evbuffer_add(out, data, (size_t)n);
    if (c->tls) /* best effort ends here: bytes written past OpenSSL would be garbage */
        return;
    evutil_socket_t fd = bufferevent_getfd(c->bev);
    if (fd >= 0) {
        /* A socket bufferevent freezes its output's start between its own
         * writes; the bufferevent is freed right after this one. */
        evbuffer_unfreeze(out, 1);
        evbuffer_write(out, fd);
    } else
        bufferevent_flush(c->bev, EV_WRITE, BEV_FINISHED);
}

void funcd_grpc_server_free(funcd_grpc_server *s)
{
    if (!s)
        return;
    if (s->listener)
        evconnlistener_free(s->listener);
    s->listener = NULL;
    if (s->accept_retry)
        event_free(s->accept_retry);
    while (s->conns) {
        conn_goaway(s->conns);
        conn_free(s->conns);
    }
    nghttp2_session_callbacks_del(s->callbacks);
    nghttp2_option_del(s->option);
    if (s->unix_path)
        unlink(s->unix_path);
    free(s->unix_path);
    free(s);
}

unsigned funcd_grpc_server_connections(const funcd_grpc_server *s)
{
    return s ? s->n_conns : 0;
}

/* ---- the handler's side ------------------------------------------------- */

void funcd_grpc_reply(funcd_grpc_call *call, int status, const char *message, const uint8_t *msg,
                      size_t len)
{
    if (!call)
        return;
    call->handler_owns = 0;
    conn *c = call->conn;
    if (!c || !call->stream_open) {
        call_free(call);
        return;
    }
    if (call->answered) /* the deadline answered; the stream closes on its own */
        return;
    respond(call, status, message, msg, len);
    /* `call` may be freed from here on (its stream closes during the flush). */
    if (!c->in_recv)
        conn_flush(c);
}

int funcd_grpc_call_cancelled(const funcd_grpc_call *call)
{
    return call->cancelled;
}

int64_t funcd_grpc_call_deadline_ms(const funcd_grpc_call *call)
{
    return call->deadline_ms;
}
