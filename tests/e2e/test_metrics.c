/*
 * Metrics, end to end: a platform serves a real function, and GET /metrics
 * (Prometheus text) counts what happened exactly: requests by status code,
 * a duration histogram whose buckets are cumulative and agree with _count
 * and _sum, one cold start per worker started, the replicas the pool has;
 * who may read it; a deleted function's series go; the data plane serves it
 * only when asked to. `prometheus` has a real Prometheus (Debian's package)
 * scrape funcd and answer a query about the function that was called.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "../harness.h"
#include "test_serving_common.h"
#include "../net_test.h"

/* The native fixture worker, one replica at most; requests time out after
 * 300 ms; `idle` is its idleTimeout. */
#define NATIVE_FN(idle)                                                                            \
    "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"},"                 \
    "\"timeout\":\"300ms\",\"scaling\":{\"maxReplicas\":1,\"idleTimeout\":\"" idle "\"}}"


/* GET /metrics on the control plane with `token` (NULL: none); e->r. */
static long scrape(env *e, const char *token)
{
    return REQ("GET", "/metrics", token, NULL);
}

/*
 * The value of the sample whose name and labels are exactly `series`
 * (printf-formatted), NAN when the text has no such line. Every line is
 * checked to be a comment or `series value`.
 */
static double sample(const char *text, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static double sample(const char *text, const char *fmt, ...)
{
    char series[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(series, sizeof(series), fmt, ap);
    va_end(ap);
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return NAN;
}

#define FN_LABELS(fn) "namespace=\"default\",function=\"" fn "\""

/*
 * Scrapes until `series` has the value `want` (3 s at most); e->r holds
 * the last scrape. A request is counted when it ends on the gateway's
 * side, a moment after its client has the answer, so a scrape right after
 * a request may not show it yet.
 */
static void settle(env *e, const char *token, const char *series, double want)
{
    int64_t deadline = e2e_now_ms() + 3000;
    while (scrape(e, token) == 200 && sample(e->r.body, "%s", series) != want &&
           e2e_now_ms() < deadline)
        env_sleep_ms(10);
}

/* The duration histogram of `fn` is well formed: buckets ascending in le,
 * cumulative (never decreasing), the last le="+Inf" equal to _count. */
static const char *histogram_problem(const char *text, const char *family, const char *fn,
                                     double *count, double *sum)
{
    static char why[256];
    char prefix[256];
    int n = snprintf(prefix, sizeof(prefix), "%s_bucket{namespace=\"default\",function=\"%s\",le=\"",
                     family, fn);
    double prev_le = -1, prev = 0, inf = NAN;
    int buckets = 0;
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, prefix, (size_t)n) != 0)
            continue;
        const char *le = p + n;
        double v = strtod(strchr(le, ' ') + 1, NULL);
        buckets++;
        if (strncmp(le, "+Inf\"", 5) == 0) {
            inf = v;
            if (v < prev)
                return "the +Inf bucket is below the one before";
            continue;
        }
        double bound = strtod(le, NULL);
        if (bound <= prev_le || v < prev) {
            snprintf(why, sizeof(why), "bucket le=%g (%g) after le=%g (%g): not cumulative", bound,
                     v, prev_le, prev);
            return why;
        }
        prev_le = bound;
        prev = v;
    }
    *count = sample(text, "%s_count{namespace=\"default\",function=\"%s\"}", family, fn);
    *sum = sample(text, "%s_sum{namespace=\"default\",function=\"%s\"}", family, fn);
    if (buckets < 2 || isnan(inf))
        return "no buckets, or no +Inf bucket";
    if (inf != *count) {
        snprintf(why, sizeof(why), "+Inf bucket %g != _count %g", inf, *count);
        return why;
    }
    return isnan(*sum) ? "no _sum" : NULL;
}

#define CHECK_SAMPLE(text, want, ...)                                                              \
    do {                                                                                           \
        double got_ = sample((text), __VA_ARGS__);                                                 \
        if (got_ != (double)(want))                                                                \
            FAILF("%s: %g, expected %g\n%.3000s", #__VA_ARGS__, got_, (double)(want), (text));     \
    } while (0)

#define CHECK_HISTOGRAM(text, family, fn, count, sum)                                              \
    do {                                                                                           \
        const char *p_ = histogram_problem((text), (family), (fn), (count), (sum));                \
        if (p_)                                                                                    \
            FAILF("%s of %s: %s\n%.3000s", (family), (fn), p_, (text));                            \
    } while (0)

/*
 * Three requests answered 200 and one the function takes too long for
 * (504), one cold start: the counters say exactly that.
 */
SV_TEST(requests)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(sv_create(e, "m", NATIVE_FN("10m"), dir), 201);
    if (!sv_wait_ready(e, "m", 5000))
        FAILF("not Ready: %.500s", e->r.body);

    /* Known, never called: no request series, and no cold start yet. */
    CHECK_INT(scrape(e, DEV_TOKEN), 200);
    CHECK_SAMPLE(e->r.body, 0, "funcd_cold_starts_total{" FN_LABELS("m") "}");
    CHECK(isnan(sample(e->r.body, "funcd_requests_total{" FN_LABELS("m") ",code=\"200\"}")));
    CHECK_SAMPLE(e->r.body, 0, "funcd_request_duration_seconds_count{" FN_LABELS("m") "}");
    CHECK_SAMPLE(e->r.body, 0, "funcd_replicas{" FN_LABELS("m") ",state=\"ready\"}");

    for (int i = 0; i < 3; i++)
        CHECK_INT(sv_invoke(e, "GET", DP_PATH("m") "/hello", NULL), 200);
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("m") "/sleep?ms=1500", NULL), 504);
    CHECK_INT(sv_invoke(e, "GET", "/fn/default/nobody/", NULL), 404); /* no function: no series */

    settle(e, DEV_TOKEN, "funcd_request_duration_seconds_count{" FN_LABELS("m") "}", 4);
    CHECK_INT(e->r.status, 200);
    const char *text = e->r.body;
    char ct[128];
    CHECK(e2e_resp_header(&e->r, "content-type", ct, sizeof(ct)));
    CHECK_STR(ct, "text/plain; version=0.0.4; charset=utf-8");
    CHECK(strstr(text, "# TYPE funcd_requests_total counter\n") != NULL);
    CHECK(strstr(text, "# TYPE funcd_request_duration_seconds histogram\n") != NULL);
    CHECK(strstr(text, "# HELP funcd_cold_start_seconds ") != NULL);
    CHECK_SAMPLE(text, 3, "funcd_requests_total{" FN_LABELS("m") ",code=\"200\"}");
    CHECK_SAMPLE(text, 1, "funcd_requests_total{" FN_LABELS("m") ",code=\"504\"}");
    CHECK(strstr(text, "function=\"nobody\"") == NULL);
    double count, sum;
    CHECK_HISTOGRAM(text, "funcd_request_duration_seconds", "m", &count, &sum);
    CHECK_INT(count, 4);
    /* The 504 waited the function's 300 ms: in the sum, and above le=0.25. */
    if (!(sum >= 0.3 && sum < 60))
        FAILF("duration sum %g: the 504 alone took 300 ms", sum);
    double upto = sample(text, "funcd_request_duration_seconds_bucket{" FN_LABELS("m")
                               ",le=\"0.25\"}");
    CHECK(upto <= 3);
    CHECK_SAMPLE(text, 4, "funcd_request_duration_seconds_bucket{" FN_LABELS("m") ",le=\"60\"}");
    /* One worker started for the first request, and none since. */
    CHECK_SAMPLE(text, 1, "funcd_cold_starts_total{" FN_LABELS("m") "}");
    CHECK_HISTOGRAM(text, "funcd_cold_start_seconds", "m", &count, &sum);
    CHECK_INT(count, 1);
    CHECK(sum > 0 && sum < 30);
    CHECK_SAMPLE(text, 1, "funcd_replicas{" FN_LABELS("m") ",state=\"ready\"}");
    CHECK_SAMPLE(text, 0, "funcd_replicas{" FN_LABELS("m") ",state=\"starting\"}");
    CHECK_SAMPLE(text, 0, "funcd_queue_depth{" FN_LABELS("m") "}");
    /* The process series. */
    CHECK(sample(text, "process_open_fds") > 3);
    CHECK(sample(text, "process_resident_memory_bytes") > 1e6);
    CHECK(sample(text, "process_cpu_seconds_total") > 0);
    double started = sample(text, "process_start_time_seconds");
    double now = (double)time(NULL);
    if (!(started > now - 3600 && started <= now + 1))
        FAILF("process_start_time_seconds %f, now %f", started, now);
}

/* Each worker start is one cold start: warm requests add none, a start
 * after the function went back to zero adds one. */
SV_TEST(cold_start_per_start)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(sv_create(e, "c", NATIVE_FN("200ms"), dir), 201);
    if (!sv_wait_ready(e, "c", 5000))
        FAILF("not Ready: %.500s", e->r.body);
    for (int i = 0; i < 5; i++)
        CHECK_INT(sv_invoke(e, "GET", DP_PATH("c") "/x", NULL), 200);
    settle(e, ADMIN_TOKEN, "funcd_requests_total{" FN_LABELS("c") ",code=\"200\"}", 5);
    CHECK_SAMPLE(e->r.body, 1, "funcd_cold_starts_total{" FN_LABELS("c") "}");
    CHECK_SAMPLE(e->r.body, 5, "funcd_requests_total{" FN_LABELS("c") ",code=\"200\"}");
    /* Idle for idleTimeout (200 ms): back to zero. */
    if (!sv_wait_total(e, "c", 0, 0, 5000, NULL))
        FAILF("did not go back to zero: %.500s", e->r.body);
    CHECK_INT(scrape(e, ADMIN_TOKEN), 200);
    CHECK_SAMPLE(e->r.body, 0, "funcd_replicas{" FN_LABELS("c") ",state=\"ready\"}");
    CHECK_SAMPLE(e->r.body, 1, "funcd_cold_starts_total{" FN_LABELS("c") "}");
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("c") "/x", NULL), 200);
    settle(e, ADMIN_TOKEN, "funcd_requests_total{" FN_LABELS("c") ",code=\"200\"}", 6);
    CHECK_SAMPLE(e->r.body, 2, "funcd_cold_starts_total{" FN_LABELS("c") "}");
    CHECK_SAMPLE(e->r.body, 2, "funcd_cold_start_seconds_count{" FN_LABELS("c") "}");
    CHECK_SAMPLE(e->r.body, 6, "funcd_requests_total{" FN_LABELS("c") ",code=\"200\"}");
}

/* Who may read /metrics: no token 401; any valid token 200, with the
 * series of the namespaces it may read; the data plane has none (404). */
SV_TEST(who_may_read)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(sv_create(e, "a", NATIVE_FN("10m"), dir), 201);
    if (!sv_wait_ready(e, "a", 5000))
        FAILF("not Ready: %.500s", e->r.body);
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("a") "/x", NULL), 200);
    settle(e, ADMIN_TOKEN, "funcd_requests_total{" FN_LABELS("a") ",code=\"200\"}", 1);
    CHECK_INT(scrape(e, NULL), 401);
    CHECK_INT(scrape(e, "not-a-token"), 401);
    CHECK_INT(scrape(e, VIEWER_TOKEN), 200);
    CHECK_SAMPLE(e->r.body, 1, "funcd_requests_total{" FN_LABELS("a") ",code=\"200\"}");
    CHECK_INT(scrape(e, TEAM_B_TOKEN), 200); /* another namespace's developer */
    CHECK(strstr(e->r.body, "namespace=\"default\"") == NULL);
    CHECK(sample(e->r.body, "process_open_fds") > 0);
    CHECK(strstr(e->r.body, "# TYPE funcd_requests_total counter") != NULL);
    CHECK_INT(REQ("POST", "/metrics", ADMIN_TOKEN, ""), 405);
    CHECK_INT(env_dp(e, "GET", "/metrics"), 404);
}

/* --metrics-open and --data-plane-metrics: both without a token. */
SV_TEST_WITH(open_and_data_plane, funcd_with_metrics_open(1), funcd_with_data_plane_metrics(1))
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(sv_create(e, "d", NATIVE_FN("10m"), dir), 201);
    if (!sv_wait_ready(e, "d", 5000))
        FAILF("not Ready: %.500s", e->r.body);
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("d") "/x", NULL), 200);
    settle(e, NULL, "funcd_requests_total{" FN_LABELS("d") ",code=\"200\"}", 1);
    CHECK_SAMPLE(e->r.body, 1, "funcd_requests_total{" FN_LABELS("d") ",code=\"200\"}");
    CHECK_INT(env_dp(e, "GET", "/metrics"), 200);
    CHECK_SAMPLE(e->r.body, 1, "funcd_requests_total{" FN_LABELS("d") ",code=\"200\"}");
    CHECK_SAMPLE(e->r.body, 1, "funcd_cold_starts_total{" FN_LABELS("d") "}");
}

/* A deleted function stops being exported; created again, it is back. */
SV_TEST(deleted)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(sv_create(e, "gone", NATIVE_FN("10m"), dir), 201);
    CHECK_INT(sv_create(e, "kept", NATIVE_FN("10m"), dir), 201);
    if (!sv_wait_ready(e, "gone", 5000) || !sv_wait_ready(e, "kept", 5000))
        FAILF("not Ready: %.500s", e->r.body);
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("gone") "/x", NULL), 200);
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("kept") "/x", NULL), 200);
    CHECK_INT(REQ("DELETE", FN_PATH("gone"), DEV_TOKEN, NULL), 200);
    int64_t deadline = e2e_now_ms() + 5000;
    while (e2e_now_ms() < deadline) {
        CHECK_INT(scrape(e, DEV_TOKEN), 200);
        if (!strstr(e->r.body, "function=\"gone\""))
            break;
        env_sleep_ms(20);
    }
    if (strstr(e->r.body, "function=\"gone\""))
        FAILF("the deleted function is still exported:\n%.3000s", e->r.body);
    CHECK_SAMPLE(e->r.body, 1, "funcd_requests_total{" FN_LABELS("kept") ",code=\"200\"}");
    CHECK_INT(sv_create(e, "gone", NATIVE_FN("10m"), dir), 201);
    if (!sv_wait_ready(e, "gone", 5000))
        FAILF("not Ready again: %.500s", e->r.body);
    CHECK_INT(scrape(e, DEV_TOKEN), 200);
    CHECK(!isnan(sample(e->r.body, "funcd_cold_starts_total{" FN_LABELS("gone") "}")));
}

/* The edge's own answers (spec.edge.limits) are counted by reason, and
 * by their status with the function's other answers. */
SV_TEST(edge_rejections)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(sv_create(e, "lim",
                        "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":"
                        "\"%s\"},\"edge\":{\"limits\":{\"maxBodyBytes\":8,\"rps\":1,\"burst\":1}}}",
                        dir),
              201);
    if (!sv_wait_ready(e, "lim", 5000))
        FAILF("not Ready: %.500s", e->r.body);
    CHECK_INT(sv_invoke(e, "POST", DP_PATH("lim") "/x", "a body longer than 8 bytes"), 413);
    /* One token a second: requests 100 ms apart are refused until the
     * next one is there. */
    int ok = 0, limited = 0;
    for (int i = 0; i < 50 && !(ok && limited); i++) {
        long code = sv_invoke(e, "GET", DP_PATH("lim") "/x", NULL);
        ok += code == 200;
        limited += code == 429;
        if (code != 200 && code != 429)
            FAILF("HTTP %ld: %.300s", code, e->r.body);
        env_sleep_ms(100);
    }
    CHECK(ok >= 1 && limited >= 1);
    settle(e, DEV_TOKEN, "funcd_request_duration_seconds_count{" FN_LABELS("lim") "}",
           1 + ok + limited);
    const char *text = e->r.body;
    CHECK_SAMPLE(text, 1, "funcd_edge_rejections_total{" FN_LABELS("lim")
                          ",reason=\"body_too_large\"}");
    CHECK_SAMPLE(text, limited, "funcd_edge_rejections_total{" FN_LABELS("lim")
                                ",reason=\"rate_limited\"}");
    CHECK_SAMPLE(text, 1, "funcd_requests_total{" FN_LABELS("lim") ",code=\"413\"}");
    CHECK_SAMPLE(text, limited, "funcd_requests_total{" FN_LABELS("lim") ",code=\"429\"}");
    CHECK_SAMPLE(text, ok, "funcd_requests_total{" FN_LABELS("lim") ",code=\"200\"}");
    CHECK(isnan(sample(text, "funcd_edge_rejections_total{" FN_LABELS("lim")
                             ",reason=\"forbidden\"}")));
}

/* ---- a real Prometheus ----------------------------------------------------- */

#define PROMETHEUS "/usr/bin/prometheus" /* Debian's package */

static int write_file(const char *path, int mode, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* Starts Prometheus on 127.0.0.1:`port` with its config and data in `dir`,
 * its output in dir/prometheus.log; its pid, or -1. */
static pid_t start_prometheus(const char *dir, int port)
{
    char config[300], data[300], logf[300], web[64];
    snprintf(config, sizeof(config), "--config.file=%s/prometheus.yml", dir);
    snprintf(data, sizeof(data), "--storage.tsdb.path=%s/data", dir);
    snprintf(logf, sizeof(logf), "%s/prometheus.log", dir);
    snprintf(web, sizeof(web), "--web.listen-address=127.0.0.1:%d", port);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(logf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execl(PROMETHEUS, PROMETHEUS, config, data, web, "--log.level=warn",
              "--web.enable-lifecycle", (char *)NULL);
        _exit(127);
    }
    return pid;
}

static void stop_prometheus(pid_t pid, const char *dir, int show_log)
{
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    int64_t deadline = e2e_now_ms() + 10000;
    int st;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (e2e_now_ms() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            break;
        }
        env_sleep_ms(20);
    }
    if (show_log) {
        char cmd[400];
        snprintf(cmd, sizeof(cmd), "tail -20 %s/prometheus.log >&2", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "  (no Prometheus log)\n");
    }
}

/* The value of funcd_requests_total for function "p" and code 200 as
 * Prometheus answers /api/v1/query, or -1 while it has none. */
static double queried(e2e_http *prom, e2e_resp *r)
{
    long code = e2e_http_do(prom, "GET",
                            "/api/v1/query?query=funcd_requests_total%7Bfunction%3D%22p%22%2C"
                            "code%3D%22200%22%7D",
                            NULL, NULL, r);
    const cJSON *result = code == 200 ? jget(r->json, "data.result") : NULL;
    const cJSON *first = cJSON_IsArray(result) ? cJSON_GetArrayItem(result, 0) : NULL;
    const cJSON *value = first ? cJSON_GetArrayItem(jget(first, "value"), 1) : NULL;
    if (!cJSON_IsString(value) || !jstr(first, "metric.namespace") ||
        strcmp(jstr(first, "metric.namespace"), "default") != 0)
        return -1;
    return strtod(value->valuestring, NULL);
}

/*
 * Prometheus scrapes the control plane every 500 ms with a viewer's token
 * (a credentials file, as an operator would set it up) and its query API
 * then has funcd_requests_total of the function that was called, with the
 * number of calls.
 */
SV_TEST(prometheus)
{
    if (access(PROMETHEUS, X_OK) != 0) {
        fprintf(stderr, "  %s is not installed (scripts/install-deps.sh test)\n", PROMETHEUS);
        harness_failed_now = 1;
        return;
    }
    char dir[256], fixture[256], path[320], config[1024];
    CHECK(sv_tempdir(dir, sizeof(dir)) == 0);
    CHECK(sv_fixture("native", fixture, sizeof(fixture)) == 0);
    CHECK_INT(sv_create(e, "p", NATIVE_FN("10m"), fixture), 201);
    if (!sv_wait_ready(e, "p", 5000))
        FAILF("not Ready: %.500s", e->r.body);
    for (int i = 0; i < 3; i++)
        CHECK_INT(sv_invoke(e, "GET", DP_PATH("p") "/x", NULL), 200);
    settle(e, VIEWER_TOKEN, "funcd_requests_total{" FN_LABELS("p") ",code=\"200\"}", 3);
    snprintf(path, sizeof(path), "%s/token", dir);
    CHECK(write_file(path, 0600, VIEWER_TOKEN "\n") == 0);
    snprintf(config, sizeof(config),
             "global:\n"
             "  scrape_interval: 500ms\n"
             "  evaluation_interval: 500ms\n"
             "scrape_configs:\n"
             "  - job_name: funcd\n"
             "    metrics_path: /metrics\n"
             "    authorization:\n"
             "      credentials_file: %s/token\n"
             "    static_configs:\n"
             "      - targets: ['%s']\n",
             dir, funcd_platform_addr(e->p));
    snprintf(path, sizeof(path), "%s/prometheus.yml", dir);
    CHECK(write_file(path, 0600, config) == 0);
    int port = test_free_port();
    CHECK(port > 0);
    pid_t pid = start_prometheus(dir, port);
    CHECK(pid > 0);
    char base[64];
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", port);
    e2e_http *prom = e2e_http_new(base);
    e2e_resp r = E2E_RESP_INIT;
    double value = -1;
    int64_t deadline = e2e_now_ms() + 25000;
    while (prom && (value = queried(prom, &r)) < 0 && e2e_now_ms() < deadline &&
           waitpid(pid, NULL, WNOHANG) == 0)
        env_sleep_ms(200);
    e2e_http_free(prom);
    stop_prometheus(pid, dir, value != 3);
    char last[600];
    snprintf(last, sizeof(last), "HTTP %ld %.500s", r.status, r.body ? r.body : "");
    e2e_resp_free(&r);
    if (value != 3)
        FAILF("Prometheus has funcd_requests_total{function=\"p\",code=\"200\"} = %g, not 3; "
              "its last answer: %s", value, last);
}

int main(int argc, char **argv)
{
    sv_init();
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    SV_RUN(only, ran, requests);
    SV_RUN(only, ran, cold_start_per_start);
    SV_RUN(only, ran, who_may_read);
    SV_RUN(only, ran, open_and_data_plane);
    SV_RUN(only, ran, deleted);
    SV_RUN(only, ran, edge_rejections);
    SV_RUN(only, ran, prometheus);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no test case named %s\n", only);
        return 1;
    }
    return HARNESS_END();
}
