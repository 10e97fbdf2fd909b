/*
 * The embedded data-plane gateway on h2o: /fn/{ns}/{name}/{rest}.
 *
 * A driver of the gateway port like any other: it knows a function's
 * workers only as the route's funcd_fn_target and the slot functions of
 * funcd/sys/gateway.h. The route table maps a function to its target;
 * each gateway thread reads it under a lock of its own (a change of the
 * table takes them all: no lock line is shared between requests) and
 * keeps a target reference for the request. The
 * request itself never leaves the gateway thread when a worker is ready
 * (proxy.c). The route's edge (edge.h) is checked here, on the gateway
 * thread and before a slot is asked for: a request it refuses never wakes
 * a worker (docs/adr/0035-edge-before-the-activator.md).
 */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>

#include "funcd/sys/error.h"
#include "funcd/sys/gateway.h"
#include "gateway/edge.h"
#include "gateway/embedded.h"
#include "gateway/gateway.h"
#include "gateway/prefix.h"
#include "gateway/shape.h"
#include "http/httpd.h"
#include "trace/edge.h"
#include "util/misc.h"

#define MAX_BODY (64 * 1024 * 1024)
#define BUCKETS 4096

typedef struct route_entry {
    char *ns;
    char *name;
    uint64_t timeout_ms;
    funcd_fn_target *target; /* a reference, or NULL: known but cannot run */
    funcd_shape *shape;      /* a reference, or NULL: nothing to shape */
    funcd_edge *edge;        /* the route's, copied */
    int edge_active;         /* funcd_edge_active(edge): anything to check per request */
    funcd_edge_limiter *lim; /* shared with the function's earlier entries */
    funcd_metrics_fn *metrics; /* held, or NULL: not counted */
    struct route_entry *next;
} route_entry;

/* One gateway thread's lock of the route table, on a cache line of its
 * own: a request takes its thread's, a change of the table takes all. */
typedef struct route_lock {
    _Alignas(64) pthread_mutex_t m;
} route_lock;

typedef struct embedded {
    funcd_gateway base;
    unsigned threads;
    int sched_batch; /* the threads run under SCHED_BATCH */
    unsigned max_connections; /* 0: the httpd default */
    SSL_CTX *tls;             /* borrowed until listen; NULL: plain */
    funcd_httpd *httpd;
    route_lock *locks; /* threads + 1: the last for any other thread */
    route_entry *buckets[BUCKETS];
    funcd_logger logger;
    unsigned capped; /* routes with a body cap: while any, heads are checked before bodies */
    funcd_edge_recorder *recorder; /* access log, spans; NULL: off */
    funcd_metrics *metrics; /* borrowed, or NULL */
    int serve_metrics;      /* GET /metrics on the data plane */
    atomic_uint next_slot;  /* metrics slots handed to threads */
    funcd_gw_prefixes prefixes; /* paths outside /fn/ answered from the loop (prefix.h) */
    funcd_gw_files_fn files;    /* /site/ and sites' hosts, on this thread (embedded.h) */
    void *files_payload;
    const atomic_uint *file_hosts;
} embedded;

static _Thread_local gw_thread *this_thread;

/* The route table for reading on this thread (any thread), and back. */
static pthread_mutex_t *routes_read(embedded *g)
{
    pthread_mutex_t *m = &g->locks[this_thread ? this_thread->metrics_slot % g->threads
                                               : g->threads].m;
    pthread_mutex_lock(m);
    return m;
}

static void routes_write(embedded *g)
{
    for (unsigned i = 0; i <= g->threads; i++)
        pthread_mutex_lock(&g->locks[i].m);
}

static void routes_written(embedded *g)
{
    for (unsigned i = g->threads + 1; i-- > 0;)
        pthread_mutex_unlock(&g->locks[i].m);
}

gw_thread *funcd_gw_thread(void)
{
    return this_thread;
}

static unsigned bucket_of(const char *ns, size_t nsl, const char *name, size_t nl)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < nsl; i++)
        h = (h ^ (unsigned char)ns[i]) * 16777619u;
    h = (h ^ '/') * 16777619u;
    for (size_t i = 0; i < nl; i++)
        h = (h ^ (unsigned char)name[i]) * 16777619u;
    return h % BUCKETS;
}

static route_entry **find(embedded *g, const char *ns, size_t nsl, const char *name, size_t nl)
{
    for (route_entry **pp = &g->buckets[bucket_of(ns, nsl, name, nl)]; *pp; pp = &(*pp)->next)
        if (strlen((*pp)->ns) == nsl && memcmp((*pp)->ns, ns, nsl) == 0 &&
            strlen((*pp)->name) == nl && memcmp((*pp)->name, name, nl) == 0)
            return pp;
    return NULL;
}

/* Answers that never reach a worker still carry an invocation id (and are
 * recorded, for function "ns/name" when one was named). */
static void add_invocation_id_of(h2o_req_t *req, const char *ns, size_t nsl, const char *name,
                                 size_t nl)
{
    char id[40];
    funcd_gw_new_id(this_thread, id);
    size_t n = strlen(id);
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-funcd-invocation-id"), 0,
                          NULL, h2o_strdup(&req->pool, id, n).base, n);
    funcd_edge_note_answer(this_thread->edge, this_thread, req, id, ns, nsl, name, nl);
}

static void add_invocation_id(h2o_req_t *req)
{
    add_invocation_id_of(req, NULL, 0, NULL, 0);
}

/* ---- the edge: decided under the route table's read lock, answered after */

typedef struct edge_verdict {
    int status; /* 0: admitted */
    const char *reason;
    uint32_t retry_after; /* seconds, 0: no Retry-After */
    char message[400];
    char subject[128];           /* the token's name, when authenticated */
    int authenticated;
    funcd_edge_limiter *in_flight; /* entered, and a reference: leave when the request ends */
    funcd_metrics_reason why;      /* of a rejection, for funcd_edge_rejections_total */
} edge_verdict;

static uint64_t client_of(h2o_req_t *req)
{
    struct sockaddr_storage ss;
    socklen_t n = req->conn->callbacks->get_peername(req->conn, (struct sockaddr *)&ss);
    if (n && ss.ss_family == AF_INET)
        return funcd_edge_client_hash(&((struct sockaddr_in *)&ss)->sin_addr, 4);
    if (n && ss.ss_family == AF_INET6)
        return funcd_edge_client_hash(&((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
    return funcd_edge_client_hash(&ss, n);
}

static uint64_t mono_ns(void)
{
    struct timespec ts; /* the vDSO: no system call */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Rate first (the cheapest check, and what keeps a flood from costing
 * anything more, token checks included), then the body cap, the stance,
 * and last the in-flight count, which only a request that goes on enters. */
static void edge_check(const route_entry *r, h2o_req_t *req, edge_verdict *v)
{
    const funcd_edge *e = r->edge;
    if (e->rps) {
        uint32_t wait = funcd_edge_rate_take(r->lim, e, e->limit_per_client ? client_of(req) : 0,
                                             mono_ns());
        if (wait) {
            v->status = 429;
            v->reason = "TooManyRequests";
            v->why = FUNCD_METRICS_RATE_LIMITED;
            v->retry_after = wait;
            snprintf(v->message, sizeof(v->message), "function %s/%s takes at most %u requests "
                     "per second%s (bursts of %u); retry after %u s", r->ns, r->name, e->rps,
                     e->limit_per_client ? " from one client" : "", e->burst ? e->burst : e->rps,
                     wait);
            return;
        }
    }
    if (e->max_body_bytes && req->entity.base && req->entity.len > e->max_body_bytes) {
        v->status = 413;
        v->reason = "RequestEntityTooLarge";
        v->why = FUNCD_METRICS_BODY_TOO_LARGE;
        snprintf(v->message, sizeof(v->message), "the request body is larger than function "
                 "%s/%s takes (spec.edge.limits.maxBodyBytes: %llu bytes)", r->ns, r->name,
                 (unsigned long long)e->max_body_bytes);
        return;
    }
    if (e->auth != FUNCD_EDGE_AUTH_OPEN) {
        if (!e->authorize) { /* fail closed */
            v->status = 503;
            v->reason = "ServiceUnavailable";
            v->why = FUNCD_METRICS_AUTH_UNAVAILABLE;
            v->retry_after = 5;
            snprintf(v->message, sizeof(v->message), "function %s/%s needs authentication and "
                     "this gateway has no way to check tokens", r->ns, r->name);
            return;
        }
        h2o_iovec_t auth = funcd_httpd_header(req, H2O_TOKEN_AUTHORIZATION);
        int code = e->authorize(e->authorize_payload, r->ns, auth.base, auth.len, v->subject,
                                sizeof(v->subject), v->message, sizeof(v->message));
        if (code) {
            v->status = code == 403 ? 403 : 401;
            v->reason = code == 403 ? "Forbidden" : "Unauthorized";
            v->why = code == 403 ? FUNCD_METRICS_FORBIDDEN : FUNCD_METRICS_UNAUTHENTICATED;
            return;
        }
        v->authenticated = 1;
    }
    if (e->max_in_flight) {
        if (!funcd_edge_in_flight_enter(r->lim, e->max_in_flight)) {
            v->status = 503;
            v->reason = "ServiceUnavailable";
            v->why = FUNCD_METRICS_IN_FLIGHT_LIMIT;
            v->retry_after = 1;
            snprintf(v->message, sizeof(v->message), "function %s/%s has %u requests in flight, "
                     "its limit (spec.edge.limits.maxInFlight); retry later", r->ns, r->name,
                     e->max_in_flight);
            return;
        }
        funcd_edge_limiter_ref(r->lim);
        v->in_flight = r->lim;
    }
}

static void leave_in_flight(void *p)
{
    funcd_edge_limiter *l = *(funcd_edge_limiter **)p;
    funcd_edge_in_flight_leave(l);
    funcd_edge_limiter_unref(l);
}

static int on_req(void *payload, h2o_req_t *req)
{
    embedded *g = payload;
    const char *p = req->path_normalized.base;
    size_t n = req->path_normalized.len;
    if (n == 8 && memcmp(p, "/healthz", 8) == 0) {
        funcd_httpd_send(req, 200, "application/json", "{\"status\":\"ok\"}", 15);
        return 0;
    }
    if (g->serve_metrics && n == 8 && memcmp(p, "/metrics", 8) == 0) {
        funcd_gw_send_metrics(req, g->metrics);
        return 0;
    }
    if (n < 4 || memcmp(p, "/fn/", 4) != 0) {
        if (g->files && n >= 6 && memcmp(p, "/site/", 6) == 0 &&
            g->files(g->files_payload, req, 0))
            return 0;
        if (g->prefixes.n && funcd_gw_prefixes_dispatch(&g->prefixes, req))
            return 0;
        /* Any other path on a site's host is the site's: the platform's own
         * paths above stay the platform's, whatever the Host header says. */
        if (g->file_hosts && atomic_load_explicit(g->file_hosts, memory_order_relaxed) &&
            g->files(g->files_payload, req, 1))
            return 0;
        add_invocation_id(req);
        funcd_gw_send_status(req, 404, "NotFound",
                             "no such path: functions are served under /fn/{namespace}/{name}/");
        return 0;
    }
    /* Split the raw path, so the worker sees exactly what the client sent. */
    const char *raw = req->path.base, *end = raw + req->path.len;
    const char *q = memchr(raw, '?', req->path.len);
    const char *path_end = q ? q : end;
    const char *ns = raw + 4;
    const char *slash = memchr(ns, '/', (size_t)(path_end - ns));
    const char *name = slash ? slash + 1 : path_end;
    const char *rest = memchr(name, '/', (size_t)(path_end - name));
    size_t nsl = slash ? (size_t)(slash - ns) : (size_t)(path_end - ns);
    size_t nl = slash ? (size_t)((rest ? rest : path_end) - name) : 0;
    if (req->path.len < 4 || memcmp(raw, "/fn/", 4) != 0 || nsl == 0 || nl == 0) {
        add_invocation_id(req);
        funcd_gw_send_status(req, 404, "NotFound",
                             "no function in path %.*s: use /fn/{namespace}/{name}/",
                             (int)(n > 200 ? 200 : n), p);
        return 0;
    }
    pthread_mutex_t *routes = routes_read(g);
    route_entry **r = find(g, ns, nsl, name, nl);
    funcd_fn_target *target = r ? (*r)->target : NULL;
    uint64_t timeout_ms = r ? (*r)->timeout_ms : 0;
    funcd_shape *shape = r ? (*r)->shape : NULL;
    /* A CORS preflight carries no credentials and reaches no worker: it is
     * answered below, before the stance and the limits (shape.h). */
    int preflight = shape && funcd_shape_is_preflight(shape, req);
    edge_verdict v;
    v.status = 0;
    v.authenticated = 0;
    v.in_flight = NULL;
    if (r && (*r)->edge_active && target && !preflight)
        edge_check(*r, req, &v);
    if (target && !v.status)
        funcd_fn_target_ref(target);
    if (shape)
        funcd_shape_ref(shape);
    gw_track track = {r ? (*r)->metrics : NULL, this_thread->metrics_slot, 0};
    if (track.fn) /* under the lock: the block outlives the request (metrics.h) */
        funcd_metrics_fn_enter(track.fn, track.slot);
    pthread_mutex_unlock(routes);
    if (track.fn)
        track.start_ns = funcd_metrics_now_ns();
    if (!r) {
        add_invocation_id(req);
        funcd_gw_send_status(req, 404, "NotFound",
                             "function \"%.*s\" not found in namespace \"%.*s\"", (int)nl, name,
                             (int)nsl, ns);
        return 0;
    }
    if (shape) {
        if (preflight)
            add_invocation_id(req);
        if (funcd_shape_request(req, shape, preflight)) { /* (takes the reference) */
            funcd_fn_target_unref(target); /* a CORS preflight, answered here */
            funcd_gw_track_end(&track, req->res.status);
            return 0;
        }
    }
    if (!target) {
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL, H2O_STRLIT("5"));
        add_invocation_id_of(req, ns, nsl, name, nl);
        funcd_gw_send_status(req, 503, "ServiceUnavailable",
                             "function %.*s/%.*s cannot run; see its Ready condition (funcdctl "
                             "describe function %.*s)",
                             (int)nsl, ns, (int)nl, name, (int)nl, name);
        funcd_gw_track_end(&track, req->res.status);
        return 0;
    }
    if (v.status) {
        if (v.retry_after) {
            char *ra = h2o_mem_alloc_pool(&req->pool, 12);
            int len = snprintf(ra, 12, "%u", v.retry_after);
            h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL, ra,
                           (size_t)len);
        }
        if (v.status == 401)
            h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_WWW_AUTHENTICATE, NULL,
                           H2O_STRLIT("Bearer"));
        add_invocation_id_of(req, ns, nsl, name, nl);
        funcd_gw_send_status(req, v.status, v.reason, "%s", v.message);
        funcd_gw_track_rejected(&track, req, v.why);
        return 0;
    }
    if (v.in_flight) /* left when the request is disposed, however it ends */
        *(funcd_edge_limiter **)h2o_mem_alloc_shared(&req->pool, sizeof(void *),
                                                     leave_in_flight) = v.in_flight;
    h2o_iovec_t rest_iov = rest ? h2o_iovec_init(rest, (size_t)(end - rest))
                                : h2o_iovec_init(path_end, (size_t)(end - path_end));
    funcd_gw_invoke(this_thread, req, target, timeout_ms, ns, nsl, name, nl, rest_iov,
                    v.authenticated ? v.subject : NULL, &track);
    return 0;
}

/* The head of a request with a body, before h2o reads the body (httpd.c):
 * a Content-Length over the function's cap is 413 at once, with nothing
 * read. A chunked body gets the cap to be read under; httpd.c calls again
 * with the bytes so far once they pass it. (A request whose head httpd.c
 * could not show is checked once read, in edge_check.) */
static int on_each_head(void *payload, const funcd_httpd_head *head, funcd_buf *body)
{
    embedded *g = payload;
    const char *t = head->target, *end = t + head->target_len;
    if ((head->content_length == UINT64_MAX && !head->body_cap) || head->target_len < 5 ||
        memcmp(t, "/fn/", 4) != 0)
        return 0;
    const char *q = memchr(t, '?', head->target_len);
    const char *path_end = q ? q : end;
    const char *ns = t + 4;
    const char *slash = memchr(ns, '/', (size_t)(path_end - ns));
    if (!slash)
        return 0;
    const char *name = slash + 1;
    const char *rest = memchr(name, '/', (size_t)(path_end - name));
    size_t nsl = (size_t)(slash - ns), nl = (size_t)((rest ? rest : path_end) - name);
    uint64_t cap = 0;
    char fn[140];
    gw_track track = {NULL, 0, 0}; /* a refusal is counted as any answer of the function */
    pthread_mutex_t *routes = routes_read(g);
    route_entry **r = nsl && nl ? find(g, ns, nsl, name, nl) : NULL;
    if (r && (*r)->target) {
        cap = (*r)->edge->max_body_bytes;
        snprintf(fn, sizeof(fn), "%s/%s", (*r)->ns, (*r)->name);
        if (cap && head->content_length != UINT64_MAX && head->content_length > cap &&
            (*r)->metrics && this_thread) {
            track.fn = (*r)->metrics;
            track.slot = this_thread->metrics_slot;
            funcd_metrics_fn_enter(track.fn, track.slot);
        }
    }
    pthread_mutex_unlock(routes);
    if (head->content_length == UINT64_MAX) { /* chunked */
        *head->body_cap = cap;
        return 0;
    }
    if (!cap || head->content_length <= cap)
        return 0;
    if (track.fn) { /* nothing was read: no duration to speak of */
        funcd_metrics_fn_reject(track.fn, track.slot, FUNCD_METRICS_BODY_TOO_LARGE);
        funcd_metrics_fn_done(track.fn, track.slot, 413, 0);
    }
    cJSON *st = cJSON_CreateObject();
    char msg[300];
    snprintf(msg, sizeof(msg), "the request body is larger than function %s takes "
             "(spec.edge.limits.maxBodyBytes: %llu bytes)", fn, (unsigned long long)cap);
    cJSON_AddStringToObject(st, "kind", "Status");
    cJSON_AddStringToObject(st, "apiVersion", "v1");
    cJSON_AddStringToObject(st, "status", "Failure");
    cJSON_AddNumberToObject(st, "code", 413);
    cJSON_AddStringToObject(st, "reason", "RequestEntityTooLarge");
    cJSON_AddStringToObject(st, "message", msg);
    char *text = cJSON_PrintUnformatted(st);
    cJSON_Delete(st);
    if (text)
        funcd_buf_append(body, text, strlen(text));
    free(text);
    return 413;
}

static void on_thread_init(void *payload, h2o_context_t *ctx)
{
    embedded *g = payload;
    this_thread = calloc(1, sizeof(*this_thread));
    if (this_thread) {
        funcd_gw_thread_init(this_thread, ctx);
        this_thread->logger = &g->logger;
        this_thread->edge = funcd_edge_recorder_attach(g->recorder);
        this_thread->metrics_slot = atomic_fetch_add(&g->next_slot, 1);
    }
    if (g->prefixes.n)
        funcd_gw_prefix_thread_init(ctx);
}

static void on_thread_exit(void *payload, h2o_context_t *ctx)
{
    funcd_gw_prefix_thread_exit();
    if (!this_thread)
        return;
    funcd_gw_thread_dispose(this_thread);
    funcd_shape_thread_dispose();
    free(this_thread);
    this_thread = NULL;
}

static int gw_listen(funcd_gateway *base, const char *addr, char *bound, size_t bound_len)
{
    embedded *g = (embedded *)base;
    funcd_httpd_hooks hooks = {on_req, on_thread_init, NULL, on_thread_exit, g, NULL, on_each_head};
    int rc = funcd_httpd_new(&g->httpd, addr, g->threads, MAX_BODY, &hooks, bound, bound_len);
    if (rc == 0) {
        funcd_httpd_set_max_connections(g->httpd, g->max_connections);
        /* A function's answer carries its own Server header, if any, as a
         * proxy's should, and spec.edge.headers can set or remove it (with
         * h2o's own, it went out twice and could not be removed). */
        funcd_httpd_set_server_name(g->httpd, NULL);
        funcd_httpd_set_threads(g->httpd, "funcd-gw", g->sched_batch);
        pthread_mutex_t *routes = routes_read(g);
        funcd_httpd_check_heads(g->httpd, g->capped != 0);
        pthread_mutex_unlock(routes);
        funcd_httpd_set_tls(g->httpd, g->tls);
    }
    return rc;
}

int funcd_gateway_embedded_set_tls(funcd_gateway *gw, SSL_CTX *tls)
{
    if (!gw || gw->listen != gw_listen)
        return -1;
    ((embedded *)gw)->tls = tls;
    return 0;
}

int funcd_gateway_embedded_set_max_connections(funcd_gateway *gw, unsigned n)
{
    if (!gw || gw->listen != gw_listen)
        return -1;
    ((embedded *)gw)->max_connections = n;
    return 0;
}

static int gw_start(funcd_gateway *base)
{
    embedded *g = (embedded *)base;
    if (!g->httpd)
        return funcd_error_set(FUNCD_ESTATE, "the gateway must listen before it starts");
    return funcd_httpd_start(g->httpd);
}

static void free_entry(route_entry *e)
{
    funcd_metrics_fn_drop(e->metrics);
    funcd_fn_target_unref(e->target);
    funcd_shape_unref(e->shape);
    funcd_edge_free(e->edge);
    funcd_edge_limiter_unref(e->lim);
    free(e->ns);
    free(e->name);
    free(e);
}

static int gw_set_route(funcd_gateway *base, const funcd_route *route)
{
    embedded *g = (embedded *)base;
    route_entry *e = calloc(1, sizeof(*e));
    if (!e || !(e->ns = strdup(route->namespace_)) || !(e->name = strdup(route->name))) {
        if (e)
            free(e->ns);
        free(e);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory adding a route");
    }
    static const funcd_edge all_off = {0};
    e->timeout_ms = route->timeout_ms;
    /* A driver of this version is always given an edge; be safe anyway. */
    e->edge = funcd_edge_dup(route->edge ? route->edge : &all_off);
    e->lim = funcd_edge_limiter_new();
    if (!e->edge || !e->lim || funcd_edge_limiter_prepare(e->lim, e->edge) < 0 ||
        funcd_shape_new(&e->shape, e->edge) < 0) {
        funcd_edge_free(e->edge);
        funcd_edge_limiter_unref(e->lim);
        free(e->ns);
        free(e->name);
        free(e);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory adding a route");
    }
    e->edge_active = funcd_edge_active(e->edge);
    e->metrics = funcd_metrics_fn_hold(g->metrics, e->ns, e->name);
    e->target = route->target;
    funcd_fn_target_ref(e->target);
    size_t nsl = strlen(e->ns), nl = strlen(e->name);
    routes_write(g);
    route_entry **pp = find(g, e->ns, nsl, e->name, nl);
    route_entry *old = pp ? *pp : NULL;
    if (old) { /* the function's buckets, in-flight count and gzip tables go on */
        funcd_shape_inherit(e->shape, old->shape); /* (e is not yet seen by any thread) */
        funcd_edge_limiter *fresh = e->lim;
        e->lim = old->lim;
        old->lim = fresh;
        funcd_edge_limiter_prepare(e->lim, e->edge); /* (its table stays if this fails) */
        e->next = old->next;
        *pp = e;
    } else {
        route_entry **head = &g->buckets[bucket_of(e->ns, nsl, e->name, nl)];
        e->next = *head;
        *head = e;
    }
    g->capped += (e->edge->max_body_bytes != 0) - (old && old->edge->max_body_bytes != 0);
    funcd_httpd_check_heads(g->httpd, g->capped != 0);
    routes_written(g);
    if (old)
        free_entry(old);
    return 0;
}

static int gw_remove_route(funcd_gateway *base, const char *ns, const char *name)
{
    embedded *g = (embedded *)base;
    routes_write(g);
    route_entry **pp = find(g, ns, strlen(ns), name, strlen(name));
    route_entry *e = pp ? *pp : NULL;
    if (e) {
        *pp = e->next;
        g->capped -= e->edge->max_body_bytes != 0;
        funcd_httpd_check_heads(g->httpd, g->capped != 0);
    }
    routes_written(g);
    if (!e)
        return funcd_error_set(FUNCD_ENOTFOUND, "no route for function %s/%s", ns, name);
    free_entry(e);
    return 0;
}

static int gw_quiesce(funcd_gateway *base)
{
    funcd_httpd_quiesce(((embedded *)base)->httpd);
    return 0;
}

static int gw_stop(funcd_gateway *base)
{
    embedded *g = (embedded *)base;
    funcd_httpd_stop(g->httpd);
    return 0;
}

static void gw_free(funcd_gateway *base)
{
    embedded *g = (embedded *)base;
    funcd_httpd_free(g->httpd);
    for (unsigned i = 0; i < BUCKETS; i++)
        while (g->buckets[i]) {
            route_entry *e = g->buckets[i];
            g->buckets[i] = e->next;
            free_entry(e);
        }
    funcd_gw_prefixes_clear(&g->prefixes);
    for (unsigned i = 0; i <= g->threads; i++)
        pthread_mutex_destroy(&g->locks[i].m);
    free(g->locks);
    free(g);
}

unsigned funcd_gateway_embedded_threads(const funcd_gateway *gw)
{
    return gw && gw->free == gw_free ? ((const embedded *)gw)->threads : 0;
}

int funcd_gw_set_metrics(funcd_gateway *gw, funcd_metrics *m, int serve)
{
    if (!gw || gw->free != gw_free || !m || funcd_metrics_slots(m) < ((embedded *)gw)->threads)
        return -1;
    ((embedded *)gw)->metrics = m;
    ((embedded *)gw)->serve_metrics = serve;
    return 0;
}

int funcd_gw_add_prefix(funcd_gateway *gw, const char *prefix, funcd_gw_prefix_fn fn,
                        void *payload)
{
    if (!gw || gw->free != gw_free)
        return -1;
    return funcd_gw_prefixes_add(&((embedded *)gw)->prefixes, prefix, fn, payload);
}

int funcd_gw_set_files(funcd_gateway *gw, funcd_gw_files_fn fn, void *payload,
                       const atomic_uint *hosts)
{
    if (!gw || gw->free != gw_free || !fn)
        return -1;
    embedded *g = (embedded *)gw;
    g->files = fn;
    g->files_payload = payload;
    g->file_hosts = hosts;
    return 0;
}

void funcd_gw_set_logger(funcd_gateway *gw, const funcd_logger *lg)
{
    if (gw && gw->free == gw_free && lg)
        ((embedded *)gw)->logger = *lg;
}

void funcd_gw_set_edge_recorder(funcd_gateway *gw, funcd_edge_recorder *rec)
{
    if (gw && gw->free == gw_free)
        ((embedded *)gw)->recorder = rec;
}

/* The CPUs this process may run on: its affinity mask (taskset, a
 * container's cpuset), not every CPU of the host, and no more than a
 * cgroup v2 CPU quota (cpu.max) gives it. At least 1. */
static unsigned usable_cpus(void)
{
    cpu_set_t set;
    long cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set)
                                                             : sysconf(_SC_NPROCESSORS_ONLN);
    char path[4200] = "/sys/fs/cgroup", line[256];
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (f) { /* "0::/the/group" on a cgroup v2 host */
        while (fgets(line, sizeof(line), f))
            if (strncmp(line, "0::", 3) == 0) {
                line[strcspn(line, "\n")] = '\0';
                snprintf(path + 14, sizeof(path) - 14, "%s/cpu.max", line + 3);
                break;
            }
        fclose(f);
    }
    long long quota = 0, period = 0;
    if (strcmp(path, "/sys/fs/cgroup") != 0 && (f = fopen(path, "re"))) {
        /* "max 100000" (no quota) or "200000 100000" (two CPUs' worth) */
        if (fscanf(f, "%lld %lld", &quota, &period) == 2 && quota > 0 && period > 0 &&
            (quota + period - 1) / period < cpus)
            cpus = (long)((quota + period - 1) / period);
        fclose(f);
    }
    return cpus < 1 ? 1 : (unsigned)cpus;
}

int funcd_gateway_embedded_new(funcd_gateway **out, unsigned threads)
{
    *out = NULL;
    embedded *g = calloc(1, sizeof(*g));
    if (!g)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the gateway");
    const char *env = getenv("FUNCD_GATEWAY_THREADS");
    if (threads == 0 && env && atoi(env) > 0)
        threads = (unsigned)atoi(env);
    if (threads == 0) {
        unsigned cpus = usable_cpus();
        threads = cpus > 4 ? 4 : cpus;
    }
    g->base = (funcd_gateway)FUNCD_GATEWAY_INIT;
    g->base.name = "embedded";
    g->base.listen = gw_listen;
    g->base.start = gw_start;
    g->base.set_route = gw_set_route;
    g->base.remove_route = gw_remove_route;
    g->base.stop = gw_stop;
    g->base.quiesce = gw_quiesce;
    g->base.free = gw_free;
    g->threads = threads;
    /* SCHED_BATCH unless FUNCD_GATEWAY_SCHED=normal (docs/adr/0061). */
    const char *sched = getenv("FUNCD_GATEWAY_SCHED");
    if (sched && *sched && strcmp(sched, "batch") != 0 && strcmp(sched, "normal") != 0) {
        free(g);
        return funcd_error_set(FUNCD_EINVAL,
                               "FUNCD_GATEWAY_SCHED is \"%.40s\": it takes batch (the default) "
                               "or normal",
                               sched);
    }
    g->sched_batch = !(sched && strcmp(sched, "normal") == 0);
    g->logger.min = FUNCD_LOG_WARN;
    g->locks = aligned_alloc(_Alignof(route_lock), sizeof(route_lock) * ((size_t)threads + 1));
    if (!g->locks) {
        free(g);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the gateway");
    }
    for (unsigned i = 0; i <= threads; i++)
        pthread_mutex_init(&g->locks[i].m, NULL);
    *out = &g->base;
    return 0;
}
