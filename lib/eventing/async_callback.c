/*
 * X-Callback-Url: the result of a finished async invocation is POSTed to
 * the URL its caller gave, as OpenFaaS does: the function's answer as the
 * body, its status in X-Funcd-Status (and X-Function-Status), the id in
 * X-Funcd-Invocation-Id (and X-Call-Id), the final state in X-Funcd-State.
 *
 * One try, no retry: the result stays readable at the invocation's
 * Location for the retention, which is where a caller that missed the
 * callback looks. libevent's HTTP client, on the platform loop.
 */
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eventing/queue_internal.h"
#include "util/log.h"

#define CALLBACK_TIMEOUT_S 10

typedef struct cb_ctx {
    funcd_callbacks *owner;
    struct evhttp_connection *conn;
    struct event *reap; /* frees the connection once its request is done */
    const funcd_logger *logger;
    char what[400]; /* "invocation ns/id to URL", for the log */
    struct cb_ctx *prev, *next;
} cb_ctx;

static void ctx_free(cb_ctx *c)
{
    funcd_callbacks *o = c->owner;
    if (c->prev)
        c->prev->next = c->next;
    else
        o->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->conn)
        evhttp_connection_free(c->conn); /* a request still out goes with it, unanswered */
    if (c->reap)
        event_free(c->reap);
    free(c);
}

static void on_reap(evutil_socket_t fd, short what, void *arg)
{
    ctx_free(arg);
}

void funcd_callbacks_free(funcd_callbacks *o)
{
    while (o->head)
        ctx_free(o->head);
}

int funcd_queue_callback_url_ok(const char *url, char *why, size_t why_len)
{
    struct evhttp_uri *u = url ? evhttp_uri_parse(url) : NULL;
    const char *scheme = u ? evhttp_uri_get_scheme(u) : NULL;
    int ok = u && scheme && strcmp(scheme, "http") == 0 && evhttp_uri_get_host(u) &&
             *evhttp_uri_get_host(u) && strlen(url) <= 2048;
    if (!ok)
        snprintf(why, why_len, "X-Callback-Url must be an http:// URL with a host (at most "
                 "2048 bytes)");
    if (u)
        evhttp_uri_free(u);
    return ok ? 0 : -1;
}

static void on_done(struct evhttp_request *req, void *arg)
{
    cb_ctx *c = arg;
    int code = req ? evhttp_request_get_response_code(req) : 0;
    if (code < 200 || code >= 300)
        funcd_log(c->logger, FUNCD_LOG_WARN, "callback of %s: %s %d", c->what,
                  code ? "answered" : "failed", code);
    /* libevent frees the request after this returns; the connection (ours)
     * goes on the loop's next turn. */
    event_active(c->reap, EV_TIMEOUT, 0);
}

void funcd_queue_callback(funcd_callbacks *owner, const funcd_logger *logger, const char *url,
                          const char *ns, const char *id, const char *function, const char *state,
                          const funcd_invoke_res *res)
{
    struct event_base *loop = owner->loop;
    struct evhttp_uri *u = evhttp_uri_parse(url);
    if (!u)
        return;
    const char *host = evhttp_uri_get_host(u);
    int port = evhttp_uri_get_port(u);
    const char *path = evhttp_uri_get_path(u);
    const char *query = evhttp_uri_get_query(u);
    char target[2200];
    snprintf(target, sizeof(target), "%s%s%s", path && *path ? path : "/", query ? "?" : "",
             query ? query : "");
    cb_ctx *c = calloc(1, sizeof(*c));
    if (!c) {
        evhttp_uri_free(u);
        return;
    }
    c->owner = owner;
    c->next = owner->head;
    if (owner->head)
        owner->head->prev = c;
    owner->head = c;
    struct evhttp_request *req = evhttp_request_new(on_done, c);
    c->conn = host ? evhttp_connection_base_new(loop, NULL, host, port < 0 ? 80 : port) : NULL;
    c->reap = event_new(loop, -1, 0, on_reap, c);
    if (!req || !c->conn || !c->reap) {
        if (req)
            evhttp_request_free(req);
        ctx_free(c);
        evhttp_uri_free(u);
        return;
    }
    c->logger = logger;
    snprintf(c->what, sizeof(c->what), "invocation %s/%s to %.200s", ns, id, url);
    evhttp_connection_set_timeout(c->conn, CALLBACK_TIMEOUT_S);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    char status[16];
    snprintf(status, sizeof(status), "%d", res->status);
    evhttp_add_header(h, "Host", host);
    evhttp_add_header(h, "Connection", "close");
    evhttp_add_header(h, "X-Funcd-Invocation-Id", id);
    evhttp_add_header(h, "X-Call-Id", id);
    evhttp_add_header(h, "X-Funcd-Function", function ? function : "");
    evhttp_add_header(h, "X-Funcd-State", state ? state : "");
    evhttp_add_header(h, "X-Funcd-Status", status);
    evhttp_add_header(h, "X-Function-Status", status);
    if (res->error)
        evhttp_add_header(h, "X-Funcd-Error", res->error);
    evhttp_add_header(h, "Content-Type",
                      res->content_type ? res->content_type : "application/octet-stream");
    if (res->body_len)
        evbuffer_add(evhttp_request_get_output_buffer(req), res->body, res->body_len);
    if (evhttp_make_request(c->conn, req, EVHTTP_REQ_POST, target) != 0) {
        /* libevent freed the request */
        funcd_log(logger, FUNCD_LOG_WARN, "callback of %s: cannot send it", c->what);
        ctx_free(c);
    }
    evhttp_uri_free(u);
}
