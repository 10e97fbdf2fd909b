/*
 * A gateway outside libfuncd serves functions end to end: the blocking
 * driver (blocking_gateway.c, public headers only) is given to
 * funcd_in_memory() with funcd_with_gateway, a Function of the native
 * fixture worker is created through the control plane, and requests go
 * through the driver's listener: a cold start from zero (a queued waiter),
 * warm slots, log lines attributed to the driver's invocation ids, a worker
 * that dies mid-request (the caller is told its exit status; the slot is
 * released FAILED), a FAILED release of a live worker (it is replaced), a
 * full queue and a waiter cancelled at its timeout.
 *
 * Like the driver, this file sees only include/funcd/ (and the harness).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../harness.h"
#include "blocking_gateway.h"
#include "funcd/funcd.h"

#ifndef GW_WORKER
#error "GW_WORKER (the built fixture worker) must be defined by the build"
#endif
#ifndef GW_SHIM_DIR
#error "GW_SHIM_DIR (the build's shims) must be defined by the build"
#endif

#define ADMIN "gw-test-admin"
#define FN_API "/apis/funcd.dev/v1/namespaces/default/functions"

static funcd_platform *platform;
static funcd_gateway *gateway; /* the platform's; valid until funcd_platform_free */
static char api_addr[64], dp_addr[64];
static char fixture_dir[256];

static int64_t now_ms(void)
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

/* ---- a tiny blocking HTTP/1.0 client ------------------------------------- */

typedef struct resp {
    int status;
    char *text; /* head and body, NUL-terminated */
    const char *body;
} resp;

static void resp_free(resp *r)
{
    free(r->text);
    memset(r, 0, sizeof(*r));
}

/* One request on its own connection, read to EOF. The status, or -1. */
static int http_do(const char *addr, const char *method, const char *path, const char *headers,
                   const char *body, resp *r)
{
    resp_free(r);
    r->status = -1;
    char host[64];
    const char *colon = strrchr(addr, ':');
    if (!colon)
        return -1;
    snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &sin.sin_addr) != 1)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        close(fd);
        return -1;
    }
    char *req = NULL;
    int n = asprintf(&req, "%s %s HTTP/1.0\r\nHost: %s\r\n%sContent-Length: %zu\r\n\r\n%s",
                     method, path, addr, headers ? headers : "", body ? strlen(body) : 0,
                     body ? body : "");
    int ok = n > 0;
    for (size_t off = 0; ok && off < (size_t)n;) {
        ssize_t w = send(fd, req + off, (size_t)n - off, MSG_NOSIGNAL);
        if (w <= 0 && errno != EINTR)
            ok = 0;
        else if (w > 0)
            off += (size_t)w;
    }
    free(req);
    size_t len = 0, cap = 0;
    while (ok) {
        if (len + 4097 > cap) {
            cap = cap ? cap * 2 : 16384;
            char *p = realloc(r->text, cap);
            if (!p)
                break;
            r->text = p;
        }
        ssize_t got = recv(fd, r->text + len, cap - len - 1, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    close(fd);
    if (!r->text)
        return -1;
    r->text[len] = '\0';
    char *end = strstr(r->text, "\r\n\r\n");
    r->body = end ? end + 4 : "";
    if (sscanf(r->text, "HTTP/1.%*d %d", &r->status) != 1)
        r->status = -1;
    return r->status;
}

/* The string value of "key" in a flat JSON text, or "". */
static const char *json_str(const char *json, const char *key, char *out, size_t len)
{
    char pat[80];
    snprintf(pat, sizeof(pat), "\"%s\":\"", key);
    const char *p = json ? strstr(json, pat) : NULL;
    out[0] = '\0';
    if (!p)
        return out;
    p += strlen(pat);
    size_t i = 0;
    for (; p[i] && p[i] != '"' && i + 1 < len; i++)
        out[i] = p[i];
    out[i] = '\0';
    return out;
}

/* The value of a response header, or "". */
static const char *header(const resp *r, const char *name, char *out, size_t len)
{
    out[0] = '\0';
    size_t n = strlen(name);
    for (const char *l = r->text ? strstr(r->text, "\r\n") : NULL; l && l[2] != '\r';
         l = strstr(l + 2, "\r\n"))
        if (strncasecmp(l + 2, name, n) == 0 && l[2 + n] == ':') {
            const char *v = l + 3 + n;
            while (*v == ' ')
                v++;
            snprintf(out, len, "%.*s", (int)strcspn(v, "\r"), v);
            break;
        }
    return out;
}

static int dp(const char *path, const char *headers, resp *r)
{
    char p[512];
    snprintf(p, sizeof(p), "/fn/default/%s", path);
    return http_do(dp_addr, "GET", p, headers, NULL, r);
}

/* ---- function log lines, as the platform reports them -------------------- */

#define MAX_LINES 256
static pthread_mutex_t lines_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char line[128];
    char id[48]; /* "" outside an invocation */
} lines[MAX_LINES];
static size_t n_lines;

static void on_log(const funcd_log_record *rec, void *payload)
{
    pthread_mutex_lock(&lines_lock);
    if (n_lines < MAX_LINES) {
        snprintf(lines[n_lines].line, sizeof(lines[n_lines].line), "%.*s",
                 (int)(rec->len < 127 ? rec->len : 127), rec->line);
        snprintf(lines[n_lines].id, sizeof(lines[n_lines].id), "%s",
                 rec->invocation_id ? rec->invocation_id : "");
        n_lines++;
    }
    pthread_mutex_unlock(&lines_lock);
}

/* Waits for the line `text` (exactly); its invocation id into `id`. */
static int wait_line(const char *text, char *id, size_t id_len, int timeout_ms)
{
    for (int64_t until = now_ms() + timeout_ms; now_ms() < until; sleep_ms(10)) {
        pthread_mutex_lock(&lines_lock);
        for (size_t i = 0; i < n_lines; i++)
            if (strcmp(lines[i].line, text) == 0) {
                snprintf(id, id_len, "%s", lines[i].id);
                pthread_mutex_unlock(&lines_lock);
                return 1;
            }
        pthread_mutex_unlock(&lines_lock);
    }
    return 0;
}

static void on_platform_log(funcd_log_level level, const char *message, void *payload)
{
    fprintf(stderr, "    [funcd] %s\n", message);
}

/* ---- set-up ------------------------------------------------------------- */

static int copy_worker(const char *dir)
{
    char to[512];
    snprintf(to, sizeof(to), "%s/worker", dir);
    int in = open(GW_WORKER, O_RDONLY | O_CLOEXEC);
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
    int rc = in >= 0 && out >= 0 ? 0 : -1;
    char buf[65536];
    ssize_t n;
    while (rc == 0 && (n = read(in, buf, sizeof(buf))) > 0)
        if (write(out, buf, (size_t)n) != n)
            rc = -1;
    if (in >= 0)
        close(in);
    if (out >= 0 && close(out) != 0)
        rc = -1;
    return rc;
}

static int create_function(const char *name, const char *extra)
{
    char body[2048];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":\"%s\"},"
             "\"spec\":{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"}%s}}",
             name, fixture_dir, extra);
    resp r = {0};
    int st = http_do(api_addr, "POST", FN_API, "Authorization: Bearer " ADMIN "\r\n"
                     "Content-Type: application/json\r\n", body, &r);
    if (st != 201)
        fprintf(stderr, "  creating %s: HTTP %d %.500s\n", name, st, r.body ? r.body : "");
    resp_free(&r);
    return st;
}

/* The platform routes a Function once its controller applied it. */
static int wait_routed(const char *name, int timeout_ms)
{
    for (int64_t until = now_ms() + timeout_ms; now_ms() < until; sleep_ms(10))
        if (blocking_gateway_has_target(gateway, "default", name))
            return 1;
    return 0;
}

static blocking_gateway_counts counts(void)
{
    blocking_gateway_counts c;
    blocking_gateway_counts_get(gateway, &c);
    return c;
}

/* ---- the cases ------------------------------------------------------------ */

static char first_replica[64];

TEST(cold_start_from_zero)
{
    CHECK_INT(create_function("hello", ",\"scaling\":{\"minReplicas\":0,\"maxReplicas\":1}"),
              201);
    CHECK(wait_routed("hello", 20000));
    blocking_gateway_counts before = counts();
    resp r = {0};
    int st = dp("hello/greet?x=1", NULL, &r);
    blocking_gateway_counts after = counts();
    if (st != 200)
        FAILF("HTTP %d: %.500s", st, r.text ? r.text : "(no answer)");
    char v[128], id[64];
    CHECK_STR(json_str(r.body, "path", v, sizeof(v)), "/greet?x=1");
    /* The worker saw the driver's invocation id, and the caller gets it. */
    header(&r, "X-Funcd-Invocation-Id", id, sizeof(id));
    CHECK(id[0] != '\0');
    CHECK_STR(json_str(r.body, "invocationId", v, sizeof(v)), id);
    json_str(r.body, "replica", first_replica, sizeof(first_replica));
    CHECK_STR(first_replica, "hello-1");
    resp_free(&r);
    /* No worker ran before the request: its slot came by a grant. */
    CHECK_INT(after.queued - before.queued, 1);
    CHECK_INT(after.granted - before.granted, 0);
    CHECK_INT(after.released_ok - before.released_ok, 1);
}

TEST(warm_requests_take_a_slot_at_once)
{
    blocking_gateway_counts before = counts();
    resp r = {0};
    for (int i = 0; i < 3; i++) {
        int st = dp("hello/again", NULL, &r);
        if (st != 200)
            FAILF("request %d: HTTP %d: %.500s", i, st, r.text ? r.text : "(no answer)");
        char v[64];
        CHECK_STR(json_str(r.body, "replica", v, sizeof(v)), first_replica);
    }
    resp_free(&r);
    blocking_gateway_counts after = counts();
    CHECK_INT(after.granted - before.granted, 3);
    CHECK_INT(after.queued - before.queued, 0);
}

/* funcd_slot_begin/end: what the worker prints while serving the driver's
 * request is logged with the driver's invocation id. */
TEST(log_lines_carry_the_drivers_invocation_id)
{
    int attributed = 0;
    for (int i = 0; i < 5 && !attributed; i++) {
        char path[64], text[32], sent[64], seen[64];
        snprintf(text, sizeof(text), "gw-line-%d", i);
        snprintf(path, sizeof(path), "hello/log?msg=%s", text);
        resp r = {0};
        int st = dp(path, NULL, &r);
        header(&r, "X-Funcd-Invocation-Id", sent, sizeof(sent));
        resp_free(&r);
        CHECK_INT(st, 200);
        if (!wait_line(text, seen, sizeof(seen), 10000))
            FAILF("the line %s never reached the log observer", text);
        /* A line read long after its request may carry no id (a loaded
         * machine); never another request's. */
        if (seen[0] && strcmp(seen, sent) != 0)
            FAILF("line %s carries invocation %s, the request was %s", text, seen, sent);
        attributed = strcmp(seen, sent) == 0;
    }
    CHECK(attributed);
}

/* The worker exits with the request unanswered: the driver learns how it
 * ended through the slot, releases it FAILED, and the function goes on
 * with a new worker. */
TEST(failed_worker_is_released_failed)
{
    resp r = {0};
    char quitter[64], expected[128], v[64];
    CHECK_INT(dp("hello/who", NULL, &r), 200);
    json_str(r.body, "replica", quitter, sizeof(quitter));
    CHECK(quitter[0] != '\0');
    blocking_gateway_counts before = counts();
    int st = dp("hello/exit?code=3", NULL, &r);
    blocking_gateway_counts after = counts();
    char msg[256], reason[64];
    json_str(r.body, "message", msg, sizeof(msg));
    json_str(r.body, "reason", reason, sizeof(reason));
    resp_free(&r);
    CHECK_INT(st, 502);
    CHECK_STR(reason, "BadGateway");
    snprintf(expected, sizeof(expected), "replica %s exited with status 3", quitter);
    CHECK_CONTAINS(msg, expected);
    CHECK(!strstr(msg, fixture_dir)); /* no host path for the caller */
    CHECK_INT(after.released_failed - before.released_failed, 1);

    CHECK_INT(dp("hello/after", NULL, &r), 200);
    json_str(r.body, "replica", v, sizeof(v));
    resp_free(&r);
    CHECK(v[0] != '\0');
    CHECK(strcmp(v, quitter) != 0);
}

/* A FAILED release takes a live worker out of service: the next request
 * goes to a new one. */
TEST(failed_release_replaces_a_live_worker)
{
    resp r = {0};
    char was[64], now[64];
    CHECK_INT(dp("hello/evict", "X-Gw-Test-Release: failed\r\n", &r), 200);
    json_str(r.body, "replica", was, sizeof(was));
    CHECK(was[0] != '\0');
    CHECK_INT(dp("hello/next", NULL, &r), 200);
    json_str(r.body, "replica", now, sizeof(now));
    resp_free(&r);
    CHECK(now[0] != '\0');
    CHECK(strcmp(was, now) != 0);
}

TEST(unknown_function_is_404)
{
    resp r = {0};
    int st = dp("nope/x", NULL, &r);
    char reason[64];
    json_str(r.body, "reason", reason, sizeof(reason));
    resp_free(&r);
    CHECK_INT(st, 404);
    CHECK_STR(reason, "NotFound");
}

typedef struct call {
    const char *path;
    resp r;
    int status;
    pthread_t thread;
} call;

static void *run_call(void *arg)
{
    call *c = arg;
    c->status = dp(c->path, NULL, &c->r);
    return NULL;
}

static int wait_counts(unsigned granted, unsigned queued, int timeout_ms)
{
    for (int64_t until = now_ms() + timeout_ms; now_ms() < until; sleep_ms(5)) {
        blocking_gateway_counts c = counts();
        if (c.granted >= granted && c.queued >= queued)
            return 1;
    }
    return 0;
}

/*
 * One worker, one request at a time, one waiter: a slow request holds the
 * slot, the next one waits (and is cancelled at the function's timeout:
 * 504), and one more while it waits is refused at once (QUEUE_FULL: 503).
 */
TEST(full_queue_and_cancelled_waiter)
{
    CHECK_INT(create_function("narrow", ",\"timeout\":\"3s\",\"scaling\":{\"minReplicas\":1,"
                                        "\"maxReplicas\":1,\"concurrency\":1,\"queueLength\":1}"),
              201);
    CHECK(wait_routed("narrow", 20000));
    resp r = {0};
    int warm = 0;
    for (int i = 0; i < 3 && warm != 200; i++) /* the first may be a cold start */
        warm = dp("narrow/warm", NULL, &r);
    resp_free(&r);
    CHECK_INT(warm, 200);

    blocking_gateway_counts c0 = counts();
    call slow = {.path = "narrow/sleep?ms=8000"}, waiting = {.path = "narrow/sleep?ms=10"};
    CHECK(pthread_create(&slow.thread, NULL, run_call, &slow) == 0);
    int slow_in = wait_counts(c0.granted + 1, 0, 10000);
    int waiting_in = 0, refused_status = 0;
    char refused_reason[64] = "";
    int64_t waited_from = 0;
    if (slow_in && pthread_create(&waiting.thread, NULL, run_call, &waiting) == 0) {
        waited_from = now_ms();
        waiting_in = wait_counts(0, c0.queued + 1, 10000);
        if (waiting_in) {
            refused_status = dp("narrow/more", NULL, &r);
            json_str(r.body, "reason", refused_reason, sizeof(refused_reason));
            resp_free(&r);
        }
        pthread_join(waiting.thread, NULL);
    }
    int64_t waited = now_ms() - waited_from;
    pthread_join(slow.thread, NULL);
    blocking_gateway_counts c1 = counts();
    int waiting_status = waiting.status, slow_status = slow.status;
    resp_free(&waiting.r);
    resp_free(&slow.r);
    CHECK(slow_in);
    CHECK(waiting_in);
    CHECK_INT(refused_status, 503);
    CHECK_STR(refused_reason, "ServiceUnavailable");
    CHECK_INT(c1.refused - c0.refused, 1);
    CHECK_INT(waiting_status, 504); /* cancelled at 3 s, before the slow one ended */
    CHECK(waited >= 2900);
    CHECK_INT(slow_status, 200);
    /* Every slot obtained was released (the cancelled waiter got none). */
    CHECK_INT((c1.released_ok + c1.released_failed) - (c0.released_ok + c0.released_failed), 1);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const char *tmp = getenv("TMPDIR");
    snprintf(fixture_dir, sizeof(fixture_dir), "%s/funcd-gw-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(fixture_dir) || chmod(fixture_dir, 0755) != 0 || copy_worker(fixture_dir) != 0) {
        fprintf(stderr, "cannot prepare %s: %s\n", fixture_dir, strerror(errno));
        return 1;
    }
    if (blocking_gateway_new(&gateway) < 0) {
        fprintf(stderr, "%s\n", funcd_error_last()->message);
        return 1;
    }
    int rc = funcd_platform_new(&platform, funcd_in_memory(), funcd_with_gateway(gateway),
                                funcd_with_token(ADMIN, "admin", NULL),
                                funcd_with_shim_dir(GW_SHIM_DIR),
                                funcd_with_logger(on_platform_log, FUNCD_LOG_WARN, NULL),
                                funcd_with_log_observer(on_log, NULL));
    if (rc < 0 || funcd_platform_start(platform) < 0) {
        fprintf(stderr, "the platform did not start: %s\n", funcd_error_last()->message);
        funcd_platform_free(platform);
        return 1;
    }
    snprintf(api_addr, sizeof(api_addr), "%s", funcd_platform_addr(platform));
    snprintf(dp_addr, sizeof(dp_addr), "%s", funcd_platform_data_plane_addr(platform));

    RUN(cold_start_from_zero);
    RUN(warm_requests_take_a_slot_at_once);
    RUN(log_lines_carry_the_drivers_invocation_id);
    RUN(failed_worker_is_released_failed);
    RUN(failed_release_replaces_a_live_worker);
    RUN(unknown_function_is_404);
    RUN(full_queue_and_cancelled_waiter);

    funcd_platform_free(platform); /* stops the workers, then the driver */
    char path[512];
    snprintf(path, sizeof(path), "%s/worker", fixture_dir);
    unlink(path);
    rmdir(fixture_dir);
    return HARNESS_END();
}
