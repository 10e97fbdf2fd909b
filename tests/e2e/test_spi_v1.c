/*
 * The backend SPI's promise to drivers built against an older header: a set
 * of out-of-tree-style backends, one per port, all at version 1, runs a
 * Function end to end on today's library.
 *
 * This file is compiled against the public headers only (its build sees
 * include/ and nothing of lib/), like a driver outside the tree. Each
 * backend is the struct its port's header declared at version 1, allocated
 * at exactly that size: a slot appended later (the runtime's exit_reason
 * and specialize, the gateway's quiesce) lies outside the object, so a
 * platform that read it would be stopped by AddressSanitizer
 * (heap-buffer-overflow). The store leaves its optional `revision` slot
 * NULL. The backends forward to the library's own drivers and count calls,
 * so the test also shows each port was really used.
 */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../harness.h"
#include "funcd/funcd.h"
#include "funcd/sys/error.h"

#ifndef SERVING_WORKER
#error "SERVING_WORKER (the built fixture worker) must be defined by the build"
#endif

#define ADMIN "spi-v1-admin"

/* What the platform did with the backends. */
static struct {
    funcd_store *store;
    funcd_blob *blob;
    funcd_bus *bus;
    funcd_runtime *runtime;
    funcd_gateway *gateway;
    atomic_int store_puts, store_watches, store_frees;
    atomic_int blob_frees, bus_frees;
    atomic_int rt_starts, rt_releases, rt_frees;
    atomic_int gw_routes, gw_starts, gw_stops, gw_frees;
} inner;

/* ---- the version 1 structs, as their headers declared them ------------------------------ */

typedef struct v1_store {
    unsigned version;
    const char *name;
    int (*get)(funcd_store *s, const char *key, funcd_store_value *out);
    int (*put)(funcd_store *s, const char *key, const void *value, size_t len, uint64_t expected,
               uint64_t *revision);
    int (*del)(funcd_store *s, const char *key, uint64_t expected, uint64_t *revision);
    int (*list)(funcd_store *s, const char *prefix, funcd_store_list_cb cb, void *payload,
                uint64_t *revision);
    int (*watch)(funcd_store *s, const char *prefix, uint64_t after, funcd_store_watch_cb cb,
                 void *payload, funcd_store_watch **out);
    void (*unwatch)(funcd_store *s, funcd_store_watch *w);
    uint64_t (*revision)(funcd_store *s);
    void (*free)(funcd_store *s);
} v1_store;

typedef struct v1_blob {
    unsigned version;
    const char *name;
    int (*put)(funcd_blob *b, const char *key, const void *data, size_t len);
    int (*get)(funcd_blob *b, const char *key, uint64_t offset, uint64_t length, void **out,
               size_t *out_len);
    int (*stat)(funcd_blob *b, const char *key, funcd_blob_stat *out);
    int (*list)(funcd_blob *b, const char *prefix, funcd_blob_list_cb cb, void *payload);
    int (*del)(funcd_blob *b, const char *key);
    void (*free)(funcd_blob *b);
} v1_blob;

typedef struct v1_bus {
    unsigned version;
    const char *name;
    int (*publish)(funcd_bus *b, const char *subject, const void *data, size_t len);
    int (*subscribe)(funcd_bus *b, const char *subject, const char *queue_group,
                     funcd_bus_msg_cb cb, void *payload, funcd_bus_sub **out);
    void (*unsubscribe)(funcd_bus *b, funcd_bus_sub *sub);
    void (*free)(funcd_bus *b);
} v1_bus;

typedef struct v1_runtime {
    unsigned version;
    const char *name;
    int (*attach)(funcd_runtime *rt, struct event_base *base);
    int (*start)(funcd_runtime *rt, const funcd_worker_spec *spec,
                 const funcd_worker_events *events, funcd_worker **out);
    int (*stop)(funcd_runtime *rt, funcd_worker *w, unsigned grace_ms);
    int (*pid)(funcd_runtime *rt, funcd_worker *w);
    void (*release)(funcd_runtime *rt, funcd_worker *w);
    void (*free)(funcd_runtime *rt);
} v1_runtime;

typedef struct v1_gateway {
    unsigned version;
    const char *name;
    int (*listen)(funcd_gateway *gw, const char *addr, char *bound, size_t bound_len);
    int (*start)(funcd_gateway *gw);
    int (*set_route)(funcd_gateway *gw, const funcd_route *route);
    int (*remove_route)(funcd_gateway *gw, const char *namespace_, const char *name);
    int (*stop)(funcd_gateway *gw);
    void (*free)(funcd_gateway *gw);
} v1_gateway;

/* ---- store: forwards to the memory store; no `revision` (optional) ---------------------- */

static int st_get(funcd_store *s, const char *key, funcd_store_value *out)
{
    (void)s;
    return inner.store->get(inner.store, key, out);
}
static int st_put(funcd_store *s, const char *key, const void *value, size_t len,
                  uint64_t expected, uint64_t *revision)
{
    (void)s;
    atomic_fetch_add(&inner.store_puts, 1);
    return inner.store->put(inner.store, key, value, len, expected, revision);
}
static int st_del(funcd_store *s, const char *key, uint64_t expected, uint64_t *revision)
{
    (void)s;
    return inner.store->del(inner.store, key, expected, revision);
}
static int st_list(funcd_store *s, const char *prefix, funcd_store_list_cb cb, void *payload,
                   uint64_t *revision)
{
    (void)s;
    return inner.store->list(inner.store, prefix, cb, payload, revision);
}
static int st_watch(funcd_store *s, const char *prefix, uint64_t after, funcd_store_watch_cb cb,
                    void *payload, funcd_store_watch **out)
{
    (void)s;
    atomic_fetch_add(&inner.store_watches, 1);
    return inner.store->watch(inner.store, prefix, after, cb, payload, out);
}
static void st_unwatch(funcd_store *s, funcd_store_watch *w)
{
    (void)s;
    inner.store->unwatch(inner.store, w);
}
static void st_free(funcd_store *s)
{
    inner.store->free(inner.store);
    inner.store = NULL;
    atomic_fetch_add(&inner.store_frees, 1);
    free(s);
}

/* ---- blob and bus: forward to the memory drivers ---------------------------------------- */

static int bl_put(funcd_blob *b, const char *key, const void *data, size_t len)
{
    (void)b;
    return inner.blob->put(inner.blob, key, data, len);
}
static int bl_get(funcd_blob *b, const char *key, uint64_t offset, uint64_t length, void **out,
                  size_t *out_len)
{
    (void)b;
    return inner.blob->get(inner.blob, key, offset, length, out, out_len);
}
static int bl_stat(funcd_blob *b, const char *key, funcd_blob_stat *out)
{
    (void)b;
    return inner.blob->stat(inner.blob, key, out);
}
static int bl_list(funcd_blob *b, const char *prefix, funcd_blob_list_cb cb, void *payload)
{
    (void)b;
    return inner.blob->list(inner.blob, prefix, cb, payload);
}
static int bl_del(funcd_blob *b, const char *key)
{
    (void)b;
    return inner.blob->del(inner.blob, key);
}
static void bl_free(funcd_blob *b)
{
    inner.blob->free(inner.blob);
    inner.blob = NULL;
    atomic_fetch_add(&inner.blob_frees, 1);
    free(b);
}

static int bu_publish(funcd_bus *b, const char *subject, const void *data, size_t len)
{
    (void)b;
    return inner.bus->publish(inner.bus, subject, data, len);
}
static int bu_subscribe(funcd_bus *b, const char *subject, const char *queue_group,
                        funcd_bus_msg_cb cb, void *payload, funcd_bus_sub **out)
{
    (void)b;
    return inner.bus->subscribe(inner.bus, subject, queue_group, cb, payload, out);
}
static void bu_unsubscribe(funcd_bus *b, funcd_bus_sub *sub)
{
    (void)b;
    inner.bus->unsubscribe(inner.bus, sub);
}
static void bu_free(funcd_bus *b)
{
    inner.bus->free(inner.bus);
    inner.bus = NULL;
    atomic_fetch_add(&inner.bus_frees, 1);
    free(b);
}

/* ---- runtime: forwards to the process runtime (plain processes) ------------------------- */

static int rt_attach(funcd_runtime *rt, struct event_base *base)
{
    (void)rt;
    return inner.runtime->attach(inner.runtime, base);
}
static int rt_start(funcd_runtime *rt, const funcd_worker_spec *spec,
                    const funcd_worker_events *events, funcd_worker **out)
{
    (void)rt;
    atomic_fetch_add(&inner.rt_starts, 1);
    return inner.runtime->start(inner.runtime, spec, events, out);
}
static int rt_stop(funcd_runtime *rt, funcd_worker *w, unsigned grace_ms)
{
    (void)rt;
    return inner.runtime->stop(inner.runtime, w, grace_ms);
}
static int rt_pid(funcd_runtime *rt, funcd_worker *w)
{
    (void)rt;
    return inner.runtime->pid(inner.runtime, w);
}
static void rt_release(funcd_runtime *rt, funcd_worker *w)
{
    (void)rt;
    atomic_fetch_add(&inner.rt_releases, 1);
    inner.runtime->release(inner.runtime, w);
}
static void rt_free(funcd_runtime *rt)
{
    inner.runtime->free(inner.runtime);
    inner.runtime = NULL;
    atomic_fetch_add(&inner.rt_frees, 1);
    free(rt);
}

/* ---- gateway: forwards to the embedded gateway ------------------------------------------ */

static int gw_listen(funcd_gateway *gw, const char *addr, char *bound, size_t bound_len)
{
    (void)gw;
    return inner.gateway->listen(inner.gateway, addr, bound, bound_len);
}
static int gw_start(funcd_gateway *gw)
{
    (void)gw;
    atomic_fetch_add(&inner.gw_starts, 1);
    return inner.gateway->start(inner.gateway);
}
static int gw_set_route(funcd_gateway *gw, const funcd_route *route)
{
    (void)gw;
    atomic_fetch_add(&inner.gw_routes, 1);
    return inner.gateway->set_route(inner.gateway, route);
}
static int gw_remove_route(funcd_gateway *gw, const char *ns, const char *name)
{
    (void)gw;
    return inner.gateway->remove_route(inner.gateway, ns, name);
}
static int gw_stop(funcd_gateway *gw)
{
    (void)gw;
    atomic_fetch_add(&inner.gw_stops, 1);
    return inner.gateway->stop(inner.gateway);
}
static void gw_free(funcd_gateway *gw)
{
    inner.gateway->free(inner.gateway);
    inner.gateway = NULL;
    atomic_fetch_add(&inner.gw_frees, 1);
    free(gw);
}

/* Each backend alone in an allocation of its version 1 size. */
static int make_backends(funcd_store **s, funcd_blob **b, funcd_bus **bu, funcd_runtime **rt,
                         funcd_gateway **gw)
{
    funcd_process_options po = FUNCD_PROCESS_OPTIONS_INIT;
    po.sandbox = -1;
    if (funcd_store_memory_new(&inner.store, 0) < 0 || funcd_blob_memory_new(&inner.blob) < 0 ||
        funcd_bus_memory_new(&inner.bus) < 0 ||
        funcd_runtime_process_new_with(&inner.runtime, &po) < 0 ||
        funcd_gateway_embedded_new(&inner.gateway, 1) < 0)
        return -1;
    v1_store *vs = malloc(sizeof(*vs));
    v1_blob *vb = malloc(sizeof(*vb));
    v1_bus *vu = malloc(sizeof(*vu));
    v1_runtime *vr = malloc(sizeof(*vr));
    v1_gateway *vg = malloc(sizeof(*vg));
    if (!vs || !vb || !vu || !vr || !vg)
        return -1;
    *vs = (v1_store){1, "v1-store", st_get, st_put, st_del, st_list, st_watch, st_unwatch,
                     NULL, st_free};
    *vb = (v1_blob){1, "v1-blob", bl_put, bl_get, bl_stat, bl_list, bl_del, bl_free};
    *vu = (v1_bus){1, "v1-bus", bu_publish, bu_subscribe, bu_unsubscribe, bu_free};
    *vr = (v1_runtime){1, "v1-runtime", rt_attach, rt_start, rt_stop, rt_pid, rt_release,
                       rt_free};
    *vg = (v1_gateway){1, "v1-gateway", gw_listen, gw_start, gw_set_route, gw_remove_route,
                       gw_stop, gw_free};
    *s = (funcd_store *)vs;
    *b = (funcd_blob *)vb;
    *bu = (funcd_bus *)vu;
    *rt = (funcd_runtime *)vr;
    *gw = (funcd_gateway *)vg;
    return 0;
}

static void log_warnings(funcd_log_level level, const char *message, void *payload)
{
    (void)payload;
    if (level >= FUNCD_LOG_WARN)
        fprintf(stderr, "    [funcd] %s\n", message);
}

/* A directory holding the fixture worker as "worker" (runtime: native). */
static int worker_dir(char *dir, size_t len)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, len, "%s/funcd-spi-v1-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir) || chmod(dir, 0755) != 0)
        return -1;
    char to[512];
    snprintf(to, sizeof(to), "%s/worker", dir);
    FILE *in = fopen(SERVING_WORKER, "rb"), *out = fopen(to, "wb");
    int rc = in && out ? 0 : -1;
    char buf[65536];
    size_t n;
    while (rc == 0 && (n = fread(buf, 1, sizeof(buf), in)) > 0)
        if (fwrite(buf, 1, n, out) != n)
            rc = -1;
    if (in)
        fclose(in);
    if (out && fclose(out) != 0)
        rc = -1;
    return rc == 0 ? chmod(to, 0755) : -1;
}


static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * One HTTP/1.0 request to `addr` ("127.0.0.1:PORT"): the status (0: no
 * answer), the body parsed as JSON in *json (NULL if it is not JSON). Plain
 * sockets, so this file needs nothing but the public headers and cJSON.
 */
static long http(const char *addr, const char *method, const char *path, const char *token,
                 const char *body, cJSON **json)
{
    *json = NULL;
    const char *colon = strrchr(addr, ':');
    struct sockaddr_in sa = {.sin_family = AF_INET};
    char host[64];
    if (!colon || (size_t)(colon - addr) >= sizeof(host))
        return 0;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = 0;
    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return 0;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct timeval tv = {30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return 0;
    }
    char auth[128] = "";
    if (token)
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s\r\n", token);
    char *req = NULL;
    int n = asprintf(&req, "%s %s HTTP/1.0\r\nHost: %s\r\n%sContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s", method, path, addr, auth,
                     body ? strlen(body) : 0, body ? body : "");
    size_t sent = 0;
    while (n > 0 && sent < (size_t)n) {
        ssize_t w = send(fd, req + sent, (size_t)n - sent, MSG_NOSIGNAL);
        if (w <= 0)
            break;
        sent += (size_t)w;
    }
    free(req);
    size_t cap = 65536, len = 0;
    char *resp = malloc(cap + 1);
    ssize_t r;
    while (resp && (r = recv(fd, resp + len, cap - len, 0)) > 0) {
        len += (size_t)r;
        if (len == cap) {
            char *bigger = realloc(resp, 2 * cap + 1);
            if (!bigger)
                break;
            resp = bigger;
            cap *= 2;
        }
    }
    close(fd);
    long status = 0;
    if (resp) {
        resp[len] = 0;
        if (sscanf(resp, "HTTP/1.%*d %ld", &status) != 1)
            status = 0;
        const char *start = strstr(resp, "\r\n\r\n");
        if (start)
            *json = cJSON_Parse(start + 4);
    }
    free(resp);
    return status;
}

static const char *jstr(const cJSON *o, const char *a, const char *b)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
    return cJSON_GetStringValue(b ? cJSON_GetObjectItemCaseSensitive(x, b) : x);
}

TEST(version_1_backends_serve_a_function)
{
    funcd_store *s = NULL;
    funcd_blob *b = NULL;
    funcd_bus *bu = NULL;
    funcd_runtime *rt = NULL;
    funcd_gateway *gw = NULL;
    char dir[256];
    CHECK_INT(make_backends(&s, &b, &bu, &rt, &gw), 0);
    CHECK_INT(worker_dir(dir, sizeof(dir)), 0);
    funcd_platform *p = NULL;
    int rc = funcd_platform_new(&p, funcd_in_memory(), funcd_with_store(s), funcd_with_blob(b),
                                funcd_with_bus(bu), funcd_with_runtime(rt),
                                funcd_with_gateway(gw), funcd_with_token(ADMIN, "admin", NULL),
                                funcd_with_logger(log_warnings, FUNCD_LOG_WARN, NULL));
    if (rc < 0)
        FAILF("funcd_platform_new with version 1 backends: %s", funcd_error_last()->message);
    CHECK_INT(funcd_platform_start(p), 0);

    char cp[160], dp[160], spec[1024];
    snprintf(cp, sizeof(cp), "%s", funcd_platform_addr(p));
    snprintf(dp, sizeof(dp), "%s", funcd_platform_data_plane_addr(p));

    cJSON *j = NULL;
    long version = http(cp, "GET", "/version", ADMIN, NULL, &j);
    char names[5][32];
    static const char *const ports[] = {"store", "blob", "bus", "runtime", "gateway"};
    for (int i = 0; i < 5; i++) {
        const char *n = j ? jstr(j, "backends", ports[i]) : NULL;
        snprintf(names[i], sizeof(names[i]), "%s", n ? n : "");
    }
    cJSON_Delete(j);

    snprintf(spec, sizeof(spec),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"v1-echo\"},\"spec\":{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":"
             "{\"path\":\"%s\"}}}",
             dir);
    long created = http(cp, "POST", "/apis/funcd.dev/v1/namespaces/default/functions", ADMIN,
                        spec, &j);
    cJSON_Delete(j);

    /* Until the controller has routed it (404 before), then a cold start. */
    long served = 0;
    char path[64] = "";
    for (int64_t deadline = now_ms() + 90000; now_ms() < deadline;) {
        served = http(dp, "GET", "/fn/default/v1-echo/hello", NULL, NULL, &j);
        const char *echoed = j ? jstr(j, "path", NULL) : NULL;
        snprintf(path, sizeof(path), "%s", echoed ? echoed : "");
        cJSON_Delete(j);
        if (served == 200)
            break;
        usleep(50 * 1000);
    }
    long deleted = http(cp, "DELETE", "/apis/funcd.dev/v1/namespaces/default/functions/v1-echo",
                        ADMIN, NULL, &j);
    cJSON_Delete(j);
    funcd_platform_free(p);

    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "    cannot remove %s\n", dir);

    CHECK_INT(version, 200);
    for (int i = 0; i < 5; i++) {
        char want[32];
        snprintf(want, sizeof(want), "v1-%s", ports[i]);
        CHECK_STR(names[i], want);
    }
    CHECK_INT(created, 201);
    CHECK_INT(served, 200);
    CHECK_STR(path, "/hello");
    CHECK_INT(deleted, 200);
    CHECK(atomic_load(&inner.store_puts) >= 1);
    CHECK(atomic_load(&inner.store_watches) >= 1);
    CHECK(atomic_load(&inner.rt_starts) >= 1);
    CHECK_INT(atomic_load(&inner.rt_releases), atomic_load(&inner.rt_starts));
    CHECK(atomic_load(&inner.gw_routes) >= 1);
    CHECK_INT(atomic_load(&inner.gw_starts), 1);
    CHECK(atomic_load(&inner.gw_stops) >= 1);
    CHECK_INT(atomic_load(&inner.store_frees), 1);
    CHECK_INT(atomic_load(&inner.blob_frees), 1);
    CHECK_INT(atomic_load(&inner.bus_frees), 1);
    CHECK_INT(atomic_load(&inner.rt_frees), 1);
    CHECK_INT(atomic_load(&inner.gw_frees), 1);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    RUN(version_1_backends_serve_a_function);
    return HARNESS_END();
}
