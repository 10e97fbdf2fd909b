/*
 * A third-party gateway driver (blocking_gateway.h): what a driver outside
 * libfuncd needs of the gateway port, and nothing else.
 *
 * Per request: parse /fn/{ns}/{name}/{rest}, find the route, take a slot
 * (at once, or wait for the grant of a queued waiter, bounded by the
 * route's timeout, cancelling on timeout), connect to the slot's Unix
 * socket, send the request with an invocation id, read the answer to EOF,
 * and release the slot: OK when the worker answered, FAILED when it could
 * not be reached or ended without answering (then the caller is told how
 * the worker ended). A request header "X-Gw-Test-Release: failed" makes the
 * driver release a slot FAILED after a good answer (the test's way to show
 * that a FAILED release takes a worker out of service).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem, accept4 */
#endif
#include "blocking_gateway.h"

/* The point of this driver: the public headers are all it has. */
#if defined(__has_include)
#if __has_include("pool/pool.h") || __has_include("serving/serving.h") || \
    __has_include("gateway/gateway.h")
#error "the third-party gateway driver must be built with include/ only on the include path"
#endif
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "funcd/sys/error.h"

#define MAX_HEAD 16384
#define MAX_BODY (1024 * 1024)
#define DEFAULT_TIMEOUT_MS 30000
#define WORKER_END_WAIT_MS 5000 /* how long a failed exchange waits to learn the worker's end */

typedef struct route {
    char *ns, *name;
    uint64_t timeout_ms;
    funcd_fn_target *target; /* a reference, or NULL */
    struct route *next;
} route;

typedef struct conn {
    int fd;
    pthread_t thread;
    struct blocking_gateway *gw;
    struct conn *next;
} conn;

typedef struct blocking_gateway {
    funcd_gateway base; /* first */
    int listen_fd;
    pthread_t acceptor;
    int started;
    pthread_mutex_t lock; /* routes, conns, stopping */
    route *routes;
    conn *conns;
    int stopping;
    atomic_uint next_id;
    atomic_uint granted, queued, refused, released_ok, released_failed, routes_set;
} blocking_gateway;

/* ---- small helpers ------------------------------------------------------- */

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* A JSON Status answer (the messages here hold no quotes or backslashes
 * but those of the worker's end, which are escaped). */
static void send_status(int fd, int code, const char *reason, const char *id, const char *fmt,
                        ...) __attribute__((format(printf, 5, 6)));

static void send_status(int fd, int code, const char *reason, const char *id, const char *fmt,
                        ...)
{
    char msg[1024], esc[2100], body[2400], head[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    size_t j = 0;
    for (size_t i = 0; msg[i] && j + 2 < sizeof(esc); i++) {
        if (msg[i] == '"' || msg[i] == '\\')
            esc[j++] = '\\';
        esc[j++] = msg[i];
    }
    esc[j] = '\0';
    int bl = snprintf(body, sizeof(body),
                      "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
                      "\"code\":%d,\"reason\":\"%s\",\"message\":\"%s\"}",
                      code, reason, esc);
    int hl = snprintf(head, sizeof(head),
                      "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                      "X-Funcd-Invocation-Id: %s\r\nConnection: close\r\n\r\n",
                      code, reason, bl, id);
    if (send_all(fd, head, (size_t)hl) == 0)
        send_all(fd, body, (size_t)bl);
}

/* The value of header `name` in a NUL-terminated head, or "". */
static void header_value(const char *head, const char *name, char *out, size_t size)
{
    size_t n = strlen(name);
    out[0] = '\0';
    for (const char *line = strstr(head, "\r\n"); line && line[2] != '\r';
         line = strstr(line + 2, "\r\n")) {
        const char *h = line + 2;
        if (strncasecmp(h, name, n) != 0 || h[n] != ':')
            continue;
        const char *v = h + n + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        snprintf(out, size, "%.*s", (int)strcspn(v, "\r"), v);
        return;
    }
}

/* ---- waiting for a slot --------------------------------------------------- */

typedef struct slot_wait {
    funcd_slot_waiter waiter; /* payload: this */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done;
    funcd_slot *slot;
    char error[512];
} slot_wait;

/* Any thread (a platform thread, another request's release): the grant. */
static void on_granted(funcd_slot_waiter *w, funcd_slot *slot, const char *error)
{
    slot_wait *sw = w->payload;
    pthread_mutex_lock(&sw->lock);
    sw->slot = slot;
    snprintf(sw->error, sizeof(sw->error), "%s", slot ? "" : error ? error : "no worker");
    sw->done = 1;
    pthread_cond_signal(&sw->cond);
    pthread_mutex_unlock(&sw->lock);
}

/* Waits for the grant until `deadline_ms` (monotonic; 0: for good). 1 when
 * it came. */
static int wait_grant(slot_wait *sw, int64_t deadline_ms)
{
    pthread_mutex_lock(&sw->lock);
    while (!sw->done) {
        if (!deadline_ms) {
            pthread_cond_wait(&sw->cond, &sw->lock);
            continue;
        }
        int64_t left = deadline_ms - mono_ms();
        if (left <= 0)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += left / 1000;
        ts.tv_nsec += (left % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&sw->cond, &sw->lock, &ts);
    }
    int done = sw->done;
    pthread_mutex_unlock(&sw->lock);
    return done;
}

/* ---- one request ----------------------------------------------------------- */

typedef struct request {
    char head[MAX_HEAD + 1];
    size_t head_len;
    char *body;
    size_t body_len;
    char method[16], target[4096];
} request;

/* Reads one request; 0, or -1 (bad or gone). */
static int read_request(int fd, request *rq)
{
    size_t len = 0;
    char *end = NULL;
    while (!(end = memmem(rq->head, len, "\r\n\r\n", 4))) {
        if (len >= MAX_HEAD)
            return -1;
        ssize_t n = recv(fd, rq->head + len, MAX_HEAD - len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        len += (size_t)n;
    }
    rq->head_len = (size_t)(end - rq->head) + 4;
    char cl[32];
    rq->head[len] = '\0';
    char saved = rq->head[rq->head_len];
    rq->head[rq->head_len] = '\0';
    header_value(rq->head, "Content-Length", cl, sizeof(cl));
    rq->head[rq->head_len] = saved;
    rq->body_len = strtoul(cl, NULL, 10);
    if (rq->body_len > MAX_BODY || sscanf(rq->head, "%15s %4095s", rq->method, rq->target) != 2)
        return -1;
    rq->body = malloc(rq->body_len + 1);
    if (!rq->body)
        return -1;
    size_t have = len - rq->head_len < rq->body_len ? len - rq->head_len : rq->body_len;
    memcpy(rq->body, rq->head + rq->head_len, have);
    while (have < rq->body_len) {
        ssize_t n = recv(fd, rq->body + have, rq->body_len - have, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        have += (size_t)n;
    }
    rq->head[rq->head_len] = '\0';
    return 0;
}

/* The worker's answer, read to EOF ("Connection: close" was sent). */
typedef struct answer {
    char *p;
    size_t len, cap;
} answer;

static int read_answer(int fd, answer *a)
{
    for (;;) {
        if (a->len + 4096 > a->cap) {
            size_t cap = a->cap ? a->cap * 2 : 16384;
            char *p = realloc(a->p, cap);
            if (!p)
                return -1;
            a->p = p;
            a->cap = cap;
        }
        ssize_t n = recv(fd, a->p + a->len, a->cap - a->len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            return 0;
        a->len += (size_t)n;
    }
}

/* Sends the request to the slot's worker and reads its answer into `a`.
 * 0 when the worker answered; -1 with `why` when it could not be reached
 * or gave no answer. */
static int exchange(funcd_slot *slot, const request *rq, const char *rest, const char *id,
                    answer *a, char *why, size_t why_len)
{
    const struct sockaddr_un *sa = funcd_slot_sockaddr(slot);
    char endpoint[sizeof(sa->sun_path) + 8];
    snprintf(endpoint, sizeof(endpoint), "unix:%s", sa->sun_path);
    if (sa->sun_family != AF_UNIX || strcmp(funcd_slot_endpoint(slot), endpoint) != 0) {
        snprintf(why, why_len, "the slot's endpoint %s is not its socket %s",
                 funcd_slot_endpoint(slot), endpoint);
        return -1;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) != 0) {
        snprintf(why, why_len, "cannot connect to the worker: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char head[MAX_HEAD + 512];
    int hl = snprintf(head, sizeof(head),
                      "%s %s HTTP/1.1\r\nHost: function\r\nX-Funcd-Invocation-Id: %s\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                      rq->method, rest, id, rq->body_len);
    funcd_slot_begin(slot, id);
    int rc = hl > 0 && (size_t)hl < sizeof(head) && send_all(fd, head, (size_t)hl) == 0 &&
                     send_all(fd, rq->body, rq->body_len) == 0
                 ? read_answer(fd, a)
                 : -1;
    funcd_slot_end(slot);
    close(fd);
    if (rc == 0 && a->len)
        return 0;
    snprintf(why, why_len, "the worker closed the connection without an answer");
    return -1;
}

static void count_release(blocking_gateway *g, funcd_slot *slot, funcd_slot_outcome outcome)
{
    funcd_slot_release(slot, outcome);
    atomic_fetch_add(outcome == FUNCD_SLOT_FAILED ? &g->released_failed : &g->released_ok, 1);
}

static void serve(blocking_gateway *g, int fd, request *rq)
{
    char id[40];
    unsigned n = atomic_fetch_add(&g->next_id, 1) + 1;
    snprintf(id, sizeof(id), "0000%04x-0000-4000-8000-%012x", (unsigned)getpid() & 0xffff, n);

    /* /fn/{ns}/{name}/{rest} */
    char ns[64], name[64];
    const char *rest = "/";
    int nsl = 0, nl = 0;
    if (strncmp(rq->target, "/fn/", 4) == 0) {
        const char *p = rq->target + 4;
        nsl = (int)strcspn(p, "/?");
        if (p[nsl] == '/') {
            nl = (int)strcspn(p + nsl + 1, "/?");
            rest = p + nsl + 1 + nl;
        }
    }
    if (nsl == 0 || nl == 0 || nsl >= (int)sizeof(ns) || nl >= (int)sizeof(name)) {
        send_status(fd, 404, "NotFound", id, "no function in path %.200s: use /fn/{ns}/{name}/",
                    rq->target);
        return;
    }
    snprintf(ns, sizeof(ns), "%.*s", nsl, rq->target + 4);
    snprintf(name, sizeof(name), "%.*s", nl, rq->target + 4 + nsl + 1);
    char rest_buf[4096];
    snprintf(rest_buf, sizeof(rest_buf), "%s%s", rest[0] == '/' ? "" : "/", rest);

    pthread_mutex_lock(&g->lock);
    route *r = g->routes;
    while (r && (strcmp(r->ns, ns) != 0 || strcmp(r->name, name) != 0))
        r = r->next;
    int known = r != NULL;
    funcd_fn_target *target = r ? r->target : NULL;
    uint64_t timeout_ms = r && r->timeout_ms ? r->timeout_ms : DEFAULT_TIMEOUT_MS;
    funcd_fn_target_ref(target);
    pthread_mutex_unlock(&g->lock);
    if (!known) {
        send_status(fd, 404, "NotFound", id, "function %s/%s not found", ns, name);
        return;
    }
    if (!target) {
        send_status(fd, 503, "ServiceUnavailable", id, "function %s/%s cannot run", ns, name);
        return;
    }

    slot_wait sw = {.waiter = {.granted = on_granted}};
    sw.waiter.payload = &sw;
    pthread_mutex_init(&sw.lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&sw.cond, &ca);
    pthread_condattr_destroy(&ca);

    funcd_slot *slot = NULL;
    int rc = funcd_slot_acquire(target, &sw.waiter, &slot);
    if (rc == FUNCD_SLOT_GRANTED) {
        atomic_fetch_add(&g->granted, 1);
    } else if (rc == FUNCD_SLOT_QUEUED) {
        atomic_fetch_add(&g->queued, 1);
        if (!wait_grant(&sw, mono_ms() + (int64_t)timeout_ms)) {
            if (funcd_slot_cancel(target, &sw.waiter) == 0) {
                wait_grant(&sw, 0); /* a grant was on its way: take it, give it back */
                if (sw.slot)
                    count_release(g, sw.slot, FUNCD_SLOT_OK);
            }
            send_status(fd, 504, "GatewayTimeout", id, "function %s/%s had no worker within %llu ms",
                        ns, name, (unsigned long long)timeout_ms);
            goto out;
        }
        slot = sw.slot;
        if (!slot) {
            send_status(fd, 502, "BadGateway", id, "function %s/%s: %s", ns, name, sw.error);
            goto out;
        }
    } else {
        atomic_fetch_add(&g->refused, 1);
        send_status(fd, 503, "ServiceUnavailable", id, "function %s/%s: %s", ns, name,
                    rc == FUNCD_SLOT_QUEUE_FULL ? "at capacity" : "being updated or deleted");
        goto out;
    }

    answer a = {0};
    char why[256];
    if (exchange(slot, rq, rest_buf, id, &a, why, sizeof(why)) == 0) {
        char how[32];
        header_value(rq->head, "X-Gw-Test-Release", how, sizeof(how));
        count_release(g, slot, strcmp(how, "failed") == 0 ? FUNCD_SLOT_FAILED : FUNCD_SLOT_OK);
        /* The worker's answer as it is, with our invocation id after the status line. */
        char *eol = memmem(a.p, a.len, "\r\n", 2);
        char idh[80];
        int il = snprintf(idh, sizeof(idh), "\r\nX-Funcd-Invocation-Id: %s", id);
        size_t first = eol ? (size_t)(eol - a.p) : a.len;
        if (send_all(fd, a.p, first) == 0 && send_all(fd, idh, (size_t)il) == 0)
            send_all(fd, a.p + first, a.len - first);
    } else {
        /* The worker broke the exchange: learn how it ended while the slot
         * still holds it, then take it out of service. */
        char end[256] = "";
        funcd_slot_worker_state st = FUNCD_SLOT_WORKER_RUNNING;
        for (int64_t until = mono_ms() + WORKER_END_WAIT_MS;
             (st = funcd_slot_worker_end(slot, end, sizeof(end))) == FUNCD_SLOT_WORKER_RUNNING &&
             mono_ms() < until;)
            sleep_ms(10);
        count_release(g, slot, FUNCD_SLOT_FAILED);
        send_status(fd, 502, st == FUNCD_SLOT_WORKER_OOM_KILLED ? "OOMKilled" : "BadGateway", id,
                    "function %s/%s failed: %s", ns, name,
                    st == FUNCD_SLOT_WORKER_RUNNING ? why : end);
    }
    free(a.p);
out:
    pthread_cond_destroy(&sw.cond);
    pthread_mutex_destroy(&sw.lock);
    funcd_fn_target_unref(target);
}

static void *serve_conn(void *arg)
{
    conn *c = arg;
    request *rq = calloc(1, sizeof(*rq));
    if (rq && read_request(c->fd, rq) == 0)
        serve(c->gw, c->fd, rq);
    if (rq)
        free(rq->body);
    free(rq);
    shutdown(c->fd, SHUT_WR);
    return NULL;
}

static void *accept_loop(void *arg)
{
    blocking_gateway *g = arg;
    for (;;) {
        int fd = accept4(g->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return NULL; /* shut down by stop */
        }
        conn *c = calloc(1, sizeof(*c));
        pthread_mutex_lock(&g->lock);
        if (!c || g->stopping) {
            pthread_mutex_unlock(&g->lock);
            free(c);
            close(fd);
            continue;
        }
        c->fd = fd;
        c->gw = g;
        if (pthread_create(&c->thread, NULL, serve_conn, c) != 0) {
            pthread_mutex_unlock(&g->lock);
            close(fd);
            free(c);
            continue;
        }
        c->next = g->conns;
        g->conns = c;
        pthread_mutex_unlock(&g->lock);
    }
}

/* ---- the port --------------------------------------------------------------- */

static int bg_listen(funcd_gateway *base, const char *addr, char *bound, size_t bound_len)
{
    blocking_gateway *g = (blocking_gateway *)base;
    char host[64];
    const char *colon = strrchr(addr, ':');
    if (!colon || colon - addr >= (long)sizeof(host))
        return funcd_error_set(FUNCD_EINVAL, "data-plane address %s is not host:port", addr);
    snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &sin.sin_addr) != 1)
        return funcd_error_set(FUNCD_EINVAL, "data-plane address %s: not an IPv4 address", addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    socklen_t sl = sizeof(sin);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 || listen(fd, 128) != 0 ||
        getsockname(fd, (struct sockaddr *)&sin, &sl) != 0) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        return funcd_error_set(FUNCD_EBIND, "cannot listen on %s: %s", addr, strerror(err));
    }
    g->listen_fd = fd;
    snprintf(bound, bound_len, "%s:%u", host, (unsigned)ntohs(sin.sin_port));
    return 0;
}

static int bg_start(funcd_gateway *base)
{
    blocking_gateway *g = (blocking_gateway *)base;
    if (g->listen_fd < 0)
        return funcd_error_set(FUNCD_ESTATE, "the gateway must listen before it starts");
    if (pthread_create(&g->acceptor, NULL, accept_loop, g) != 0)
        return funcd_error_set(FUNCD_EIO, "cannot start the gateway's thread");
    g->started = 1;
    return 0;
}

static void route_free(route *r)
{
    funcd_fn_target_unref(r->target);
    free(r->ns);
    free(r->name);
    free(r);
}

static int bg_set_route(funcd_gateway *base, const funcd_route *fr)
{
    blocking_gateway *g = (blocking_gateway *)base;
    route *r = calloc(1, sizeof(*r));
    if (!r || !(r->ns = strdup(fr->namespace_)) || !(r->name = strdup(fr->name))) {
        if (r) {
            free(r->ns);
            free(r);
        }
        return funcd_error_set(FUNCD_ENOMEM, "out of memory adding a route");
    }
    r->timeout_ms = fr->timeout_ms;
    r->target = fr->target;
    funcd_fn_target_ref(r->target); /* borrowed for the call: keep our own */
    atomic_fetch_add(&g->routes_set, 1);
    pthread_mutex_lock(&g->lock);
    route **pp = &g->routes, *old = NULL;
    for (; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->ns, r->ns) == 0 && strcmp((*pp)->name, r->name) == 0) {
            old = *pp;
            r->next = old->next;
            break;
        }
    *pp = r;
    pthread_mutex_unlock(&g->lock);
    if (old)
        route_free(old);
    return 0;
}

static int bg_remove_route(funcd_gateway *base, const char *ns, const char *name)
{
    blocking_gateway *g = (blocking_gateway *)base;
    pthread_mutex_lock(&g->lock);
    route *found = NULL;
    for (route **pp = &g->routes; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->ns, ns) == 0 && strcmp((*pp)->name, name) == 0) {
            found = *pp;
            *pp = found->next;
            break;
        }
    pthread_mutex_unlock(&g->lock);
    if (!found)
        return funcd_error_set(FUNCD_ENOTFOUND, "no route for function %s/%s", ns, name);
    route_free(found);
    return 0;
}

static int bg_stop(funcd_gateway *base)
{
    blocking_gateway *g = (blocking_gateway *)base;
    pthread_mutex_lock(&g->lock);
    g->stopping = 1;
    if (g->listen_fd >= 0)
        shutdown(g->listen_fd, SHUT_RDWR); /* wakes accept() */
    for (conn *c = g->conns; c; c = c->next)
        shutdown(c->fd, SHUT_RDWR);
    pthread_mutex_unlock(&g->lock);
    if (g->started) {
        pthread_join(g->acceptor, NULL);
        g->started = 0;
    }
    pthread_mutex_lock(&g->lock);
    conn *all = g->conns;
    g->conns = NULL;
    pthread_mutex_unlock(&g->lock);
    while (all) {
        conn *c = all;
        all = c->next;
        pthread_join(c->thread, NULL);
        close(c->fd);
        free(c);
    }
    return 0;
}

static void bg_free(funcd_gateway *base)
{
    blocking_gateway *g = (blocking_gateway *)base;
    bg_stop(base);
    if (g->listen_fd >= 0)
        close(g->listen_fd);
    while (g->routes) {
        route *r = g->routes;
        g->routes = r->next;
        route_free(r);
    }
    pthread_mutex_destroy(&g->lock);
    free(g);
}

int blocking_gateway_new(funcd_gateway **out)
{
    *out = NULL;
    blocking_gateway *g = calloc(1, sizeof(*g));
    if (!g)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the gateway");
    g->base = (funcd_gateway)FUNCD_GATEWAY_INIT;
    g->base.name = "blocking-test";
    g->base.listen = bg_listen;
    g->base.start = bg_start;
    g->base.set_route = bg_set_route;
    g->base.remove_route = bg_remove_route;
    g->base.stop = bg_stop;
    g->base.free = bg_free;
    g->listen_fd = -1;
    pthread_mutex_init(&g->lock, NULL);
    *out = &g->base;
    return 0;
}

void blocking_gateway_counts_get(funcd_gateway *gw, blocking_gateway_counts *out)
{
    blocking_gateway *g = (blocking_gateway *)gw;
    out->granted = atomic_load(&g->granted);
    out->queued = atomic_load(&g->queued);
    out->refused = atomic_load(&g->refused);
    out->released_ok = atomic_load(&g->released_ok);
    out->released_failed = atomic_load(&g->released_failed);
    out->routes = atomic_load(&g->routes_set);
}

int blocking_gateway_has_target(funcd_gateway *gw, const char *ns, const char *name)
{
    blocking_gateway *g = (blocking_gateway *)gw;
    pthread_mutex_lock(&g->lock);
    route *r = g->routes;
    while (r && (strcmp(r->ns, ns) != 0 || strcmp(r->name, name) != 0))
        r = r->next;
    int has = r && r->target;
    pthread_mutex_unlock(&g->lock);
    return has;
}
