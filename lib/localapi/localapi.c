#include "localapi/localapi.h"

#include <errno.h>
#include <stdarg.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "funcd/sys/error.h"
#include "localapi/kv.h"
#include "localapi/reply.h"
#include "util/misc.h"

#define MAX_BODY (16u << 20)   /* a request body to pass on (docs/services.md) */
#define MAX_HEADERS (64u << 10)
#define IDLE_TIMEOUT_S 300     /* a connection that sends nothing for this long is closed */

typedef struct call call;

struct funcd_localapi_socket {
    funcd_localapi *api;
    struct evhttp *http;
    char path[108];
    char *ns, *name, *replica;
    char **invoke; /* NULL-terminated */
    char **kv;     /* NULL-terminated */
    call *calls;   /* in flight */
    uint64_t worker_id;
    /* The connections open now, at most FUNCD_LOCALAPI_MAX_CONNS: evhttp's
     * listener pauses there. A new connection's bufferevent waits in
     * `fresh` (a reference held) until `settle` runs, right after evhttp set
     * the connection up, and gives it a close callback that counts it out. */
    struct evconnlistener *lev;
    struct event *settle;
    struct bufferevent *fresh[FUNCD_LOCALAPI_MAX_CONNS];
    unsigned n_fresh, conns;
    int closing;
    funcd_localapi_socket *prev, *next;
};

/* Calls along one chain of fn-to-fn calls (A calls B calls C ...): a cycle
 * in the bindings ends here, not when every slot of the pools is taken. */
#define MAX_HOPS 8

struct funcd_localapi {
    struct event_base *loop;
    const funcd_logger *logger;
    funcd_store *store;
    funcd_invoker *invoker;
    funcd_localapi_socket *sockets;
    funcd_kv_sweeper *sweeper;
};

struct call {
    funcd_localapi_socket *sock; /* NULL once the socket closed: no one to answer */
    struct evhttp_request *req;
    struct evbuffer *body; /* the call's own: the request and its socket may go first */
    call *prev, *next;
};

int funcd_localapi_new(funcd_localapi **out, struct event_base *loop, funcd_store *store,
                       const funcd_logger *logger)
{
    funcd_localapi *api = calloc(1, sizeof(*api));
    if (!api)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the local API");
    api->loop = loop;
    api->store = store;
    api->logger = logger;
    if (funcd_kv_sweeper_new(&api->sweeper, loop, store) < 0) {
        free(api);
        return -1;
    }
    *out = api;
    return 0;
}

funcd_kv_sweeper *funcd_localapi_kv_sweeper(funcd_localapi *api)
{
    return api->sweeper;
}

void funcd_localapi_set_invoker(funcd_localapi *api, funcd_invoker *inv)
{
    if (api)
        api->invoker = inv;
}

void funcd_localapi_free(funcd_localapi *api)
{
    if (!api)
        return;
    while (api->sockets)
        funcd_localapi_close(api->sockets);
    funcd_kv_sweeper_free(api->sweeper);
    free(api);
}

/* ---- answers ------------------------------------------------------------ */

static const char *reason_of(int code)
{
    switch (code) {
    case 404: return "NotFound";
    case 503: return "ServiceUnavailable";
    case 504: return "Timeout";
    default: return "BadGateway";
    }
}

static void unlink_call(call *c)
{
    if (c->sock) {
        if (c->prev)
            c->prev->next = c->next;
        else
            c->sock->calls = c->next;
        if (c->next)
            c->next->prev = c->prev;
    }
}

static void on_invoked(const funcd_invoke_res *res, void *arg)
{
    call *c = arg;
    unlink_call(c);
    if (c->sock && c->req) {
        struct evkeyvalq *h = evhttp_request_get_output_headers(c->req);
        if (res->invocation_id)
            evhttp_add_header(h, "X-Funcd-Invocation-Id", res->invocation_id);
        if (res->error) {
            funcd_localapi_status(c->req, res->status, reason_of(res->status), "%s", res->error);
        } else {
            funcd_localapi_send(c->req, res->status, res->content_type, res->body,
                                res->body_len);
        }
    }
    evbuffer_free(c->body);
    free(c);
}

/* ---- requests ----------------------------------------------------------- */

static const char *method_name(enum evhttp_cmd_type cmd)
{
    switch (cmd) {
    case EVHTTP_REQ_GET: return "GET";
    case EVHTTP_REQ_POST: return "POST";
    case EVHTTP_REQ_HEAD: return "HEAD";
    case EVHTTP_REQ_PUT: return "PUT";
    case EVHTTP_REQ_DELETE: return "DELETE";
    case EVHTTP_REQ_OPTIONS: return "OPTIONS";
    case EVHTTP_REQ_PATCH: return "PATCH";
    default: return NULL;
    }
}

static int may_invoke(const funcd_localapi_socket *s, const char *name, size_t len)
{
    for (char **p = s->invoke; *p; p++)
        if (strlen(*p) == len && memcmp(*p, name, len) == 0)
            return 1;
    return 0;
}

/* POST /fn/{name}/{rest}: the function `name` of the caller's namespace. */
static void invoke(funcd_localapi_socket *s, struct evhttp_request *req, const char *target)
{
    const char *name = target + 4;
    size_t len = strcspn(name, "/?");
    const char *rest = name + len;
    const char *method = method_name(evhttp_request_get_command(req));
    if (len == 0 || len > 63)
        return funcd_localapi_status(req, 404, "NotFound", "a local API call is /fn/{name}/{path}");
    if (!may_invoke(s, name, len))
        return funcd_localapi_status(req, 403, "Forbidden",
                           "function %s/%s may not invoke \"%.*s\": it is not in "
                           "spec.bindings.invoke", s->ns, s->name, (int)len, name);
    if (!method)
        return funcd_localapi_status(req, 405, "MethodNotAllowed", "this method is not passed on");
    if (!s->api->invoker)
        return funcd_localapi_status(req, 503, "ServiceUnavailable", "funcd is shutting down");
    /* The caller's depth: the deepest call its worker is serving now. */
    unsigned hops = funcd_invoke_hops_on(s->api->invoker, s->worker_id);
    if (hops >= MAX_HOPS)
        return funcd_localapi_status(req, 508, "LoopDetected",
                                     "function %s/%s is the %uth call of a chain of "
                                     "function-to-function calls, the most there may be; "
                                     "is there a cycle in spec.bindings.invoke?",
                                     s->ns, s->name, hops);
    char callee[64], path[2048];
    snprintf(callee, sizeof(callee), "%.*s", (int)len, name);
    if (snprintf(path, sizeof(path), "%s%s", *rest == '?' ? "/" : "", rest) >=
        (int)sizeof(path))
        return funcd_localapi_status(req, 414, "RequestURITooLong", "the path is longer than %zu bytes",
                           sizeof(path) - 1);
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    const char *type = evhttp_find_header(in, "Content-Type");
    char caller[200];
    snprintf(caller, sizeof(caller), "%s", s->name);
    const char *headers[] = {"X-Funcd-Caller", caller, type ? "Content-Type" : NULL, type, NULL};
    /* The body moves (no copy) into the call: the invoker sends it when a
     * slot is granted, maybe after the caller's connection, or its worker,
     * is gone and evhttp freed the request. */
    call *c = calloc(1, sizeof(*c));
    if (!c || !(c->body = evbuffer_new()) ||
        evbuffer_add_buffer(c->body, evhttp_request_get_input_buffer(req)) < 0) {
        if (c)
            evbuffer_free(c->body);
        free(c);
        return funcd_localapi_status(req, 503, "ServiceUnavailable", "out of memory");
    }
    size_t body_len = evbuffer_get_length(c->body);
    c->sock = s;
    c->req = req;
    funcd_invoke_req ir = {
        .ns = s->ns,
        .name = callee,
        .method = method,
        .path = path,
        .headers = headers,
        .body = body_len ? evbuffer_pullup(c->body, -1) : NULL,
        .body_len = body_len,
        .traceparent = evhttp_find_header(in, "traceparent"),
        .hops = hops + 1,
    };
    int rc = funcd_invoke(s->api->invoker, &ir, on_invoked, c);
    if (rc < 0) {
        evbuffer_free(c->body);
        free(c);
        if (rc == FUNCD_EINVAL) /* the call's own fault: its path, a header, its traceparent */
            return funcd_localapi_status(req, 400, "BadRequest", "%s",
                                         funcd_error_last()->message);
        return funcd_localapi_status(req, 503, "ServiceUnavailable", "%s", funcd_error_last()->message);
    }
    c->next = s->calls;
    if (s->calls)
        s->calls->prev = c;
    s->calls = c;
}

static void on_request(struct evhttp_request *req, void *arg)
{
    funcd_localapi_socket *s = arg;
    const char *target = evhttp_request_get_uri(req);
    if (target && strncmp(target, "/fn/", 4) == 0)
        return invoke(s, req, target);
    if (target && strncmp(target, "/kv/", 4) == 0)
        return funcd_kv_request(s->api->store, s->api->sweeper, s->ns, s->kv, req, target);
    funcd_localapi_status(req, 404, "NotFound", "the local API has no %s (docs/services.md)",
                target ? target : "such path");
}

/* ---- connections -------------------------------------------------------- */

/* libevent 2.1's evhttp has no connection limit, and a worker could open
 * connections until funcd ran out of descriptors. It hands each accepted
 * connection a bufferevent from on_new_conn, before the connection exists;
 * settle then finds the connection (the bufferevent's callback argument)
 * and sets its close callback, which evhttp calls once when it frees it. */
static void on_conn_closed(struct evhttp_connection *evcon, void *arg)
{
    funcd_localapi_socket *s = arg;
    if (s->conns > 0 && s->conns-- == FUNCD_LOCALAPI_MAX_CONNS && !s->closing)
        evconnlistener_enable(s->lev);
}

static void on_settle(evutil_socket_t fd, short what, void *arg)
{
    funcd_localapi_socket *s = arg;
    for (unsigned i = 0; i < s->n_fresh; i++) {
        struct bufferevent *bev = s->fresh[i];
        void *evcon = NULL;
        bufferevent_getcb(bev, NULL, NULL, NULL, &evcon);
        if (evcon && !s->closing)
            evhttp_connection_set_closecb(evcon, on_conn_closed, s);
        else /* evhttp could not set it up (out of memory) and freed it */
            on_conn_closed(NULL, s);
        bufferevent_decref(bev);
    }
    s->n_fresh = 0;
}

static struct bufferevent *on_new_conn(struct event_base *base, void *arg)
{
    funcd_localapi_socket *s = arg;
    if (s->n_fresh == FUNCD_LOCALAPI_MAX_CONNS)
        return NULL; /* cannot happen: the listener pauses first */
    struct bufferevent *bev = bufferevent_socket_new(base, -1, 0);
    if (!bev)
        return NULL; /* evhttp tries its own, uncounted */
    bufferevent_incref(bev);
    s->fresh[s->n_fresh++] = bev;
    if (++s->conns == FUNCD_LOCALAPI_MAX_CONNS)
        evconnlistener_disable(s->lev);
    event_active(s->settle, EV_TIMEOUT, 0);
    return bev;
}

/* ---- sockets ------------------------------------------------------------ */

static char **copy_names(const char *const *names)
{
    size_t n = 0;
    while (names && names[n])
        n++;
    char **out = calloc(n + 1, sizeof(*out));
    for (size_t i = 0; out && i < n; i++)
        if (!(out[i] = strdup(names[i]))) {
            funcd_strv_free(out);
            return NULL;
        }
    return out;
}

static int listen_unix(const char *path)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sun.sun_path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(sun.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    unlink(path);
    mode_t old = umask(077); /* 0600 before anyone can connect */
    int rc = bind(fd, (struct sockaddr *)&sun, sizeof(sun));
    umask(old);
    if (rc != 0 || listen(fd, 64) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

funcd_localapi_socket *funcd_localapi_open(funcd_localapi *api, const char *path,
                                           const funcd_localapi_caller *caller)
{
    funcd_localapi_socket *s = calloc(1, sizeof(*s));
    if (!s || !(s->ns = strdup(caller->ns)) || !(s->name = strdup(caller->name)) ||
        !(s->replica = strdup(caller->replica ? caller->replica : "")) ||
        !(s->invoke = copy_names(caller->invoke)) || !(s->kv = copy_names(caller->kv)) ||
        !(s->http = evhttp_new(api->loop))) {
        funcd_error_set(FUNCD_ENOMEM, "out of memory opening the local API");
        goto fail;
    }
    s->api = api;
    s->worker_id = caller->worker_id;
    snprintf(s->path, sizeof(s->path), "%s", path);
    int fd = listen_unix(path);
    if (fd < 0) {
        funcd_error_set(FUNCD_EIO, "local API: cannot listen on the worker's socket: %s",
                        strerror(errno));
        goto fail;
    }
    struct evhttp_bound_socket *bound = NULL;
    if (!(s->settle = event_new(api->loop, -1, 0, on_settle, s)) ||
        !(bound = evhttp_accept_socket_with_handle(s->http, fd))) {
        close(fd);
        unlink(path);
        funcd_error_set(FUNCD_ENOMEM, "out of memory listening for the local API");
        goto fail;
    }
    s->lev = evhttp_bound_socket_get_listener(bound);
    evhttp_set_bevcb(s->http, on_new_conn, s);
    evhttp_set_max_body_size(s->http, MAX_BODY);
    evhttp_set_max_headers_size(s->http, MAX_HEADERS);
    evhttp_set_timeout(s->http, IDLE_TIMEOUT_S);
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
    evhttp_set_gencb(s->http, on_request, s);
    s->next = api->sockets;
    if (api->sockets)
        api->sockets->prev = s;
    api->sockets = s;
    return s;
fail:
    if (s) {
        if (s->http)
            evhttp_free(s->http);
        if (s->settle)
            event_free(s->settle);
        funcd_strv_free(s->invoke);
        funcd_strv_free(s->kv);
        free(s->replica);
        free(s->name);
        free(s->ns);
        free(s);
    }
    return NULL;
}

void funcd_localapi_close(funcd_localapi_socket *s)
{
    if (!s)
        return;
    funcd_localapi *api = s->api;
    if (s->prev)
        s->prev->next = s->next;
    else
        api->sockets = s->next;
    if (s->next)
        s->next->prev = s->prev;
    /* evhttp_free frees the requests still waiting for an answer: their
     * calls must not answer them. */
    for (call *c = s->calls; c; c = c->next) {
        c->sock = NULL;
        c->req = NULL;
    }
    s->closing = 1;
    on_settle(-1, 0, s); /* lets go of new connections' bufferevents */
    event_free(s->settle);
    evhttp_free(s->http);
    unlink(s->path);
    funcd_strv_free(s->invoke);
    funcd_strv_free(s->kv);
    free(s->replica);
    free(s->name);
    free(s->ns);
    free(s);
}
