#include "http/client.h"

#include <errno.h>
#include <pthread.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

typedef struct conn {
    struct bufferevent *bev;
    funcd_http_peer *peer;
    struct conn *next; /* the peer's idle list */
} conn;

struct funcd_http_peer {
    unsigned refs; /* the owner's, and one per call in flight */
    struct event_base *loop;
    struct sockaddr_un addr;
    conn *idle;
    unsigned n_idle;
    int closed;
};

struct funcd_http_call {
    funcd_http_peer *peer;
    conn *conn;
    funcd_http_response resp;
    size_t max_body;
    int in_body; /* the head is in */
    int answering; /* a byte of the answer came */
    int reused;    /* on a connection kept from an earlier call */
    funcd_http_done_fn done;
    void *arg;
};

static void peer_unref(funcd_http_peer *p)
{
    if (--p->refs == 0)
        free(p);
}

static void conn_free(conn *c)
{
    if (c->bev)
        bufferevent_free(c->bev); /* safe inside its own callbacks */
    free(c);
}

/* ---- idle connections ------------------------------------------------- */

static void idle_remove(conn *c)
{
    funcd_http_peer *p = c->peer;
    for (conn **pp = &p->idle; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            p->n_idle--;
            return;
        }
}

/* Anything on an idle connection (the server went away, or talks out of
 * turn) ends it. */
static void on_idle_read(struct bufferevent *bev, void *arg)
{
    conn *c = arg;
    idle_remove(c);
    conn_free(c);
}

static void on_idle_event(struct bufferevent *bev, short what, void *arg)
{
    on_idle_read(bev, arg);
}

static void idle_put(conn *c)
{
    funcd_http_peer *p = c->peer;
    c->next = p->idle;
    p->idle = c;
    p->n_idle++;
    bufferevent_setcb(c->bev, on_idle_read, NULL, on_idle_event, c);
    bufferevent_enable(c->bev, EV_READ);
}

/* A close the loop has not delivered yet (the server just died): the
 * socket reads EOF, an error, or bytes nobody asked for. */
static int conn_stale(const conn *c)
{
    char b;
    ssize_t n = recv(bufferevent_getfd(c->bev), &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) ||
           evbuffer_get_length(bufferevent_get_input(c->bev)) > 0;
}

static conn *idle_take(funcd_http_peer *p)
{
    conn *c;
    while ((c = p->idle)) {
        p->idle = c->next;
        p->n_idle--;
        if (!conn_stale(c))
            return c;
        conn_free(c);
    }
    return NULL;
}

static void idle_free_all(funcd_http_peer *p)
{
    conn *c;
    while ((c = p->idle)) {
        p->idle = c->next;
        conn_free(c);
    }
    p->n_idle = 0;
}

/* ---- peers ------------------------------------------------------------ */

funcd_http_peer *funcd_http_peer_new(struct event_base *loop, const char *socket_path)
{
    funcd_http_peer *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->refs = 1;
    p->loop = loop;
    p->addr.sun_family = AF_UNIX;
    snprintf(p->addr.sun_path, sizeof(p->addr.sun_path), "%s", socket_path);
    return p;
}

void funcd_http_peer_close(funcd_http_peer *p)
{
    p->closed = 1;
    idle_free_all(p);
}

void funcd_http_peer_free(funcd_http_peer *p)
{
    if (!p)
        return;
    funcd_http_peer_close(p);
    peer_unref(p);
}

unsigned funcd_http_peer_idle(const funcd_http_peer *p)
{
    return p->n_idle;
}

/* A new connection to the server. A Unix socket connects at once or not
 * at all, so this never blocks. NULL with errno set. */
static conn *conn_open(funcd_http_peer *p)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    if (connect(fd, (struct sockaddr *)&p->addr, sizeof(p->addr)) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return NULL;
    }
    conn *c = calloc(1, sizeof(*c));
    if (c)
        c->bev = bufferevent_socket_new(p->loop, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!c || !c->bev) {
        free(c);
        close(fd);
        errno = ENOMEM;
        return NULL;
    }
    c->peer = p;
    return c;
}

/* ---- answers ---------------------------------------------------------- */

/* libhttp-parser's own bound on a head is process-wide (80 KiB unless
 * set): raised once to the client's, which each call enforces itself. */
static pthread_once_t head_limit_once = PTHREAD_ONCE_INIT;

static void set_head_limit(void)
{
    http_parser_set_max_header_size(FUNCD_HTTP_CLIENT_MAX_HEAD);
}

const char *funcd_http_response_header(funcd_http_response *r, const char *lower)
{
    for (size_t i = 0; i < r->msg.nfields; i++) {
        funcd_http1_field *f = &r->fields[i];
        if (!funcd_http1_name_is(f, lower, strlen(lower)))
            continue;
        if (f->value_len == 0)
            return "";
        ((char *)f->value)[f->value_len] = '\0'; /* its CR, in the head's copy */
        return f->value;
    }
    return NULL;
}

/* Reads what arrived into the answer: 1 complete, 0 more, -1 bad (with
 * `*why`). What is taken leaves `in`. */
static int take(funcd_http_call *call, struct evbuffer *in, const char **why)
{
    funcd_http_response *r = &call->resp;
    while (!call->in_body) {
        size_t len = evbuffer_get_length(in);
        const char *data = len ? (const char *)evbuffer_pullup(in, -1) : NULL;
        if (!len)
            return 0;
        funcd_http1_init_response(&r->msg, 0, r->fields, FUNCD_HTTP_CLIENT_MAX_FIELDS);
        ssize_t n = data ? funcd_http1_head(&r->msg, data, len) : -1;
        if (n < 0) {
            *why = r->msg.error ? r->msg.error : "out of memory";
            return -1;
        }
        if (n == 0) {
            if (len > FUNCD_HTTP_CLIENT_MAX_HEAD) {
                *why = "the head is too long";
                return -1;
            }
            return 0;
        }
        if (r->msg.status < 200) { /* an interim answer: the real one follows */
            evbuffer_drain(in, (size_t)n);
            continue;
        }
        /* The fields must outlive the input: parse again over a copy. */
        funcd_buf_reset(&r->head);
        if (funcd_buf_append(&r->head, data, (size_t)n) < 0 ||
            funcd_http1_head(&r->msg, r->head.data, r->head.len) != n) {
            *why = "out of memory";
            return -1;
        }
        evbuffer_drain(in, (size_t)n);
        r->status = r->msg.status;
        call->in_body = 1;
    }
    size_t len = evbuffer_get_length(in);
    while (len && !r->msg.done) {
        char *data = (char *)evbuffer_pullup(in, -1);
        size_t out = 0;
        ssize_t n = data ? funcd_http1_body(&r->msg, data, len, &out) : -1;
        if (n < 0) {
            *why = r->msg.error ? r->msg.error : "out of memory";
            return -1;
        }
        if (out > call->max_body - r->body.len) {
            *why = NULL; /* too large */
            return -1;
        }
        if (funcd_buf_append(&r->body, data, out) < 0) {
            *why = "out of memory";
            return -1;
        }
        evbuffer_drain(in, (size_t)n);
        len = evbuffer_get_length(in);
        if (n == 0)
            break;
    }
    if (!r->msg.done)
        return 0;
    r->keep_alive = r->msg.keep_alive;
    return 1;
}

/* ---- calls ------------------------------------------------------------ */

static void call_free(funcd_http_call *call)
{
    if (call->conn)
        conn_free(call->conn);
    funcd_buf_free(&call->resp.head);
    funcd_buf_free(&call->resp.body);
    peer_unref(call->peer);
    free(call);
}

/* Runs the completion once, then keeps the connection for the next call
 * when the answer allows it. */
static void finish(funcd_http_call *call, funcd_http_outcome outcome, const char *error)
{
    conn *c = call->conn;
    bufferevent_disable(c->bev, EV_READ | EV_WRITE);
    call->done(call, outcome, &call->resp, error, call->arg);
    int keep = outcome == FUNCD_HTTP_ANSWERED && call->resp.keep_alive && !call->peer->closed &&
               evbuffer_get_length(bufferevent_get_input(c->bev)) == 0 &&
               evbuffer_get_length(bufferevent_get_output(c->bev)) == 0;
    if (keep) {
        call->conn = NULL;
        idle_put(c);
    }
    call_free(call);
}

static void on_read(struct bufferevent *bev, void *arg)
{
    funcd_http_call *call = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    if (!evbuffer_get_length(in))
        return;
    call->answering = 1;
    const char *why = NULL;
    int rc = take(call, in, &why);
    if (rc < 0 && !why)
        finish(call, FUNCD_HTTP_TOO_LARGE, "the answer's body is over its limit");
    else if (rc < 0) {
        char msg[160];
        snprintf(msg, sizeof(msg), "the worker sent a malformed HTTP response: %s", why);
        finish(call, FUNCD_HTTP_MALFORMED, msg);
    } else if (rc > 0) {
        finish(call, FUNCD_HTTP_ANSWERED, NULL); /* bytes left over: not kept */
    }
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    funcd_http_call *call = arg;
    if (what & BEV_EVENT_EOF) {
        if (call->in_body && funcd_http1_eof(&call->resp.msg))
            finish(call, FUNCD_HTTP_ANSWERED, NULL); /* a body that ends with the connection */
        else
            finish(call, FUNCD_HTTP_BROKEN, call->answering
                                                ? "the worker closed the connection mid-answer"
                                                : "the worker closed the connection before it "
                                                  "answered");
        return;
    }
    if (!(what & BEV_EVENT_ERROR))
        return;
    int err = EVUTIL_SOCKET_ERROR();
    char why[160];
    snprintf(why, sizeof(why), "the connection to the worker failed: %s", strerror(err));
    /* On a Unix socket a reset means the server closed with the request
     * unread: it cannot have acted on it. */
    int unread = !call->answering && (err == ECONNRESET || err == EPIPE);
    finish(call, unread ? FUNCD_HTTP_NOT_TAKEN : FUNCD_HTTP_BROKEN, why);
}

funcd_http_call *funcd_http_send(funcd_http_peer *p, const char *head, size_t head_len,
                                 const void *body, size_t body_len, size_t max_body,
                                 funcd_http_done_fn done, void *arg)
{
    conn *c = p->closed ? NULL : idle_take(p);
    int reused = c != NULL;
    if (!c && !(c = conn_open(p)))
        return NULL;
    funcd_http_call *call = calloc(1, sizeof(*call));
    if (!call) {
        conn_free(c);
        errno = ENOMEM;
        return NULL;
    }
    call->peer = p;
    p->refs++;
    call->conn = c;
    call->done = done;
    call->arg = arg;
    call->max_body = max_body;
    call->reused = reused;
    pthread_once(&head_limit_once, set_head_limit);
    struct evbuffer *out = bufferevent_get_output(c->bev);
    if (evbuffer_add(out, head, head_len) < 0 ||
        (body_len && evbuffer_add_reference(out, body, body_len, NULL, NULL) < 0)) {
        call_free(call);
        errno = ENOMEM;
        return NULL;
    }
    bufferevent_setcb(c->bev, on_read, NULL, on_event, call);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    return call;
}

int funcd_http_call_reused(const funcd_http_call *call)
{
    return call->reused;
}

void funcd_http_cancel(funcd_http_call *call)
{
    if (call)
        call_free(call);
}
