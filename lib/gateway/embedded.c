/*
 * The embedded data-plane gateway on h2o: /fn/{ns}/{name}/{rest}.
 *
 * The route table is read on every request by the gateway threads and
 * written rarely by the platform, so it sits behind a reader-writer lock.
 * Until a function has ready workers (the process runtime and worker pools
 * arrive with "Serving functions"), a known function answers 503 with
 * Retry-After and an unknown one 404, both as JSON Status.
 */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "funcd/sys/error.h"
#include "funcd/sys/gateway.h"
#include "http/httpd.h"
#include "util/buf.h"
#include "util/misc.h"

#define MAX_BODY (64 * 1024 * 1024)

typedef struct route_entry {
    char *ns;
    char *name;
    size_t endpoint_count;
    struct route_entry *next;
} route_entry;

typedef struct embedded {
    funcd_gateway base;
    unsigned threads;
    funcd_httpd *httpd;
    pthread_rwlock_t lock;
    route_entry *routes;
} embedded;

static route_entry **find(embedded *g, const char *ns, size_t nsl, const char *name, size_t nl)
{
    for (route_entry **pp = &g->routes; *pp; pp = &(*pp)->next)
        if (strlen((*pp)->ns) == nsl && memcmp((*pp)->ns, ns, nsl) == 0 &&
            strlen((*pp)->name) == nl && memcmp((*pp)->name, name, nl) == 0)
            return pp;
    return NULL;
}

static void send_status(h2o_req_t *req, int code, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void send_status(h2o_req_t *req, int code, const char *reason, const char *fmt, ...)
{
    char msg[512];
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
    funcd_httpd_send(req, code, "application/json", body ? body : "{}", body ? strlen(body) : 2);
    free(body);
}

static int on_req(void *payload, h2o_req_t *req)
{
    embedded *g = payload;
    char invocation[37];
    funcd_uuid4(invocation);
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-funcd-invocation-id"), 0,
                          NULL, invocation, 36);
    const char *p = req->path_normalized.base;
    size_t n = req->path_normalized.len;
    if (n == 8 && memcmp(p, "/healthz", 8) == 0) {
        funcd_httpd_send(req, 200, "application/json", "{\"status\":\"ok\"}", 15);
        return 0;
    }
    if (n < 4 || memcmp(p, "/fn/", 4) != 0) {
        send_status(req, 404, "NotFound", "no such path: functions are served under /fn/{namespace}/{name}/");
        return 0;
    }
    const char *ns = p + 4, *end = p + n;
    const char *slash = memchr(ns, '/', (size_t)(end - ns));
    const char *name = slash ? slash + 1 : end;
    const char *rest = memchr(name, '/', (size_t)(end - name));
    size_t nsl = slash ? (size_t)(slash - ns) : (size_t)(end - ns);
    size_t nl = slash ? (size_t)((rest ? rest : end) - name) : 0;
    if (nsl == 0 || nl == 0) {
        send_status(req, 404, "NotFound", "no function in path %.*s: use /fn/{namespace}/{name}/",
                    (int)(n > 200 ? 200 : n), p);
        return 0;
    }
    pthread_rwlock_rdlock(&g->lock);
    route_entry **r = find(g, ns, nsl, name, nl);
    size_t endpoints = r ? (*r)->endpoint_count : 0;
    pthread_rwlock_unlock(&g->lock);
    if (!r) {
        send_status(req, 404, "NotFound", "function \"%.*s\" not found in namespace \"%.*s\"",
                    (int)nl, name, (int)nsl, ns);
        return 0;
    }
    (void)endpoints;
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL, H2O_STRLIT("1"));
    send_status(req, 503, "ServiceUnavailable",
                "function %.*s/%.*s has no ready worker; see its Ready condition "
                "(funcdctl describe function %.*s)",
                (int)nsl, ns, (int)nl, name, (int)nl, name);
    return 0;
}

static int gw_listen(funcd_gateway *base, const char *addr, char *bound, size_t bound_len)
{
    embedded *g = (embedded *)base;
    funcd_httpd_hooks hooks = {on_req, NULL, NULL, NULL, g};
    return funcd_httpd_new(&g->httpd, addr, g->threads, MAX_BODY, &hooks, bound, bound_len);
}

static int gw_start(funcd_gateway *base)
{
    embedded *g = (embedded *)base;
    if (!g->httpd)
        return funcd_error_set(FUNCD_ESTATE, "the gateway must listen before it starts");
    return funcd_httpd_start(g->httpd);
}

static int gw_set_route(funcd_gateway *base, const funcd_route *route)
{
    embedded *g = (embedded *)base;
    size_t count = 0;
    while (route->endpoints && route->endpoints[count])
        count++;
    pthread_rwlock_wrlock(&g->lock);
    route_entry **pp = find(g, route->namespace_, strlen(route->namespace_), route->name,
                            strlen(route->name));
    route_entry *e = pp ? *pp : calloc(1, sizeof(*e));
    int rc = 0;
    if (!e) {
        rc = funcd_error_set(FUNCD_ENOMEM, "out of memory adding a route");
    } else if (!pp) {
        e->ns = strdup(route->namespace_);
        e->name = strdup(route->name);
        if (!e->ns || !e->name) {
            free(e->ns);
            free(e->name);
            free(e);
            rc = funcd_error_set(FUNCD_ENOMEM, "out of memory adding a route");
        } else {
            e->next = g->routes;
            g->routes = e;
        }
    }
    if (rc == 0)
        e->endpoint_count = count;
    pthread_rwlock_unlock(&g->lock);
    return rc;
}

static int gw_remove_route(funcd_gateway *base, const char *ns, const char *name)
{
    embedded *g = (embedded *)base;
    pthread_rwlock_wrlock(&g->lock);
    route_entry **pp = find(g, ns, strlen(ns), name, strlen(name));
    route_entry *e = pp ? *pp : NULL;
    if (e)
        *pp = e->next;
    pthread_rwlock_unlock(&g->lock);
    if (!e)
        return funcd_error_set(FUNCD_ENOTFOUND, "no route for function %s/%s", ns, name);
    free(e->ns);
    free(e->name);
    free(e);
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
    for (route_entry *e = g->routes, *next; e; e = next) {
        next = e->next;
        free(e->ns);
        free(e->name);
        free(e);
    }
    pthread_rwlock_destroy(&g->lock);
    free(g);
}

int funcd_gateway_embedded_new(funcd_gateway **out, unsigned threads)
{
    *out = NULL;
    embedded *g = calloc(1, sizeof(*g));
    if (!g)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the gateway");
    if (threads == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cpus < 1 ? 1 : cpus > 4 ? 4 : (unsigned)cpus;
    }
    g->base = (funcd_gateway)FUNCD_GATEWAY_INIT;
    g->base.name = "embedded";
    g->base.listen = gw_listen;
    g->base.start = gw_start;
    g->base.set_route = gw_set_route;
    g->base.remove_route = gw_remove_route;
    g->base.stop = gw_stop;
    g->base.free = gw_free;
    g->threads = threads;
    pthread_rwlock_init(&g->lock, NULL);
    *out = &g->base;
    return 0;
}
