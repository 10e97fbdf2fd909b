/*
 * End-to-end tests of the function runner: a real gRPC client (@grpc/grpc-js
 * in client.js) against an embedded platform, through every evaluator of
 * the chain (builtin, exec, warm worker), with the KRM fixtures of
 * fixtures/ and the test functions of functions/ (shell, python3, C).
 *
 *   test_fnrunner [CASE]     (no CASE: every case, each in its own child)
 *
 * Exits 77 (meson's skip) when node or the client's npm packages cannot
 * be had, saying why.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

#include "fnrunner_env.h"

enum { OK = 0, INVALID_ARGUMENT = 3, DEADLINE_EXCEEDED = 4, NOT_FOUND = 5,
       RESOURCE_EXHAUSTED = 8, UNIMPLEMENTED = 12, INTERNAL = 13, UNAVAILABLE = 14 };

/* FunctionConfigs made over HTTP reach the runner through its watch: the
 * first call of a case retries NOT_FOUND this long. */
#define SETTLE "3000"

/* A number of a client answer; -1 when absent (never NaN into an int). */
static long num(const cJSON *a, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(a, name);
    return cJSON_IsNumber(v) ? (long)v->valuedouble : -1;
}

static int wait_workers(const char *function, size_t want, int timeout_ms, pid_t *pids,
                        size_t max)
{
    int64_t deadline = e2e_now_ms() + timeout_ms;
    for (;;) {
        if (fr_workers(function, pids, max) == want)
            return 1;
        if (e2e_now_ms() >= deadline)
            return 0;
        env_sleep_ms(10);
    }
}

/* No process of `function` (worker or function run) is left. */
static int wait_no_function_processes(const char *function, int timeout_ms)
{
    int64_t deadline = e2e_now_ms() + timeout_ms;
    char left[1024];
    while (fr_function_processes(function, left, sizeof(left))) {
        if (e2e_now_ms() >= deadline) {
            fprintf(stderr, "  processes of %s left: %s\n", function, left);
            return 0;
        }
        env_sleep_ms(10);
    }
    return 1;
}

/* ---- the three paths, with the KRM fixtures ----------------------------- */

FR_TEST(exec_path_fixtures, FR_EXEC_CONFIGS)
{
    static const struct { const char *fixture, *image, *log; } cases[] = {
        {"set-label", "example.com/fns/set-label:v1", "set-label: labelled 2 items"},
        {"add-annotation", "example.com/fns/add-annotation:v1", "add-annotation: annotated 2"},
        {"passthrough", "example.com/fns/passthrough:v1", "passthrough: pid="},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cJSON *a = fr_call(f, "eval", "--image", cases[i].image, "--in",
                           fr_fixture_input(cases[i].fixture), "--retry-not-found", SETTLE, NULL);
        CHECK_FIXTURE(a, cases[i].fixture);
        CHECK_CONTAINS(fr_log(a), cases[i].log);
    }
    /* The passthrough answer is the very bytes it was given. */
    cJSON *a = fr_call(f, "eval", "--image", "example.com/fns/passthrough:v1", "--in",
                       fr_fixture_input("passthrough"), NULL);
    CHECK_GRPC(a, OK);
    FILE *in = fopen(fr_fixture_input("passthrough"), "re");
    char raw[4096];
    size_t n = in ? fread(raw, 1, sizeof(raw) - 1, in) : 0;
    if (in)
        fclose(in);
    raw[n] = '\0';
    CHECK_STR(fr_output(a), raw);
}

FR_TEST(exec_path_request_field, FR_EXEC_CONFIGS)
{
    /* exec_path names the binary without any FunctionConfig. */
    cJSON *a = fr_call(f, "eval", "--exec", "bin/set-label.py", "--in",
                       fr_fixture_input("set-label"), NULL);
    CHECK_FIXTURE(a, "set-label");
    char abs[PATH_MAX + 32];
    snprintf(abs, sizeof(abs), "%s/bin/add-annotation", f->fns);
    a = fr_call(f, "eval", "--exec", abs, "--in", fr_fixture_input("add-annotation"), NULL);
    CHECK_FIXTURE(a, "add-annotation");
    /* ... but only inside the functions directory. */
    a = fr_call(f, "eval", "--exec", "../../bin/sh", "--in", fr_fixture_input("set-label"), NULL);
    CHECK_GRPC(a, INVALID_ARGUMENT);
    a = fr_call(f, "eval", "--exec", "/bin/sh", "--in", fr_fixture_input("set-label"), NULL);
    CHECK_GRPC(a, INVALID_ARGUMENT);
    a = fr_call(f, "eval", "--exec", "bin/no-such-function", NULL);
    CHECK_GRPC(a, NOT_FOUND);
}

FR_TEST(worker_path_fixtures, FR_POD_CONFIGS)
{
    static const struct { const char *fixture, *image, *log; } cases[] = {
        {"set-label", "example.com/pods/set-label:v1", "set-label: labelled 2 items"},
        {"add-annotation", "example.com/pods/add-annotation:v1", "add-annotation: annotated 2"},
        {"passthrough", "example.com/pods/passthrough:v1", "passthrough: pid="},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cJSON *a = fr_call(f, "eval", "--image", cases[i].image, "--in",
                           fr_fixture_input(cases[i].fixture), "--retry-not-found", SETTLE, NULL);
        CHECK_FIXTURE(a, cases[i].fixture);
        CHECK_CONTAINS(fr_log(a), cases[i].log);
    }
    /* Warm: the same worker serves one call after another (told by its
     * replica: in its sandbox every worker is pid 2). */
    cJSON *calls = fr_client(f, "eval", "--image", "example.com/pods/passthrough:v1", "--in",
                             fr_fixture_input("passthrough"), "--repeat", "3", NULL);
    CHECK_INT(cJSON_GetArraySize(calls), 3);
    char worker[128];
    snprintf(worker, sizeof(worker), "%s", fr_logged_replica(cJSON_GetArrayItem(calls, 0)));
    CHECK(worker[0]);
    for (int i = 0; i < 3; i++) {
        CHECK_FIXTURE(cJSON_GetArrayItem(calls, i), "passthrough");
        CHECK_STR(fr_logged_replica(cJSON_GetArrayItem(calls, i)), worker);
    }
    /* ... and it is the only worker of the image. */
    pid_t pids[4];
    CHECK_INT(fr_workers("passthrough", pids, 4), 1);
    CHECK_INT(pids[0], fr_replica_pid(worker));
}

FR_TEST(builtin_path_fixtures, 0)
{
    static const struct { const char *fixture, *image; } cases[] = {
        {"set-namespace-v1", "gcr.io/kpt-fn/set-namespace:v0.4.1"},
        {"set-namespace-v1", "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5"},
        {"set-namespace-v1", "set-namespace"},
        {"set-namespace-v1alpha1", "gcr.io/kpt-fn/set-namespace:v0.2"},
        {"upper", IMG_UPPER},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cJSON *a = fr_call(f, "eval", "--image", cases[i].image, "--in",
                           fr_fixture_input(cases[i].fixture), NULL);
        CHECK_FIXTURE(a, cases[i].fixture);
    }
    CHECK_INT(fr_upper_calls(), 1);
    /* A failing builtin is INTERNAL with its log. */
    cJSON *a = fr_call(f, "eval", "--image", IMG_UPPER, "--in", fr_fixture_input("passthrough"),
                       NULL);
    CHECK_GRPC(a, INTERNAL);
    CHECK_CONTAINS(fr_details(a), "upper: the input is not a JSON ResourceList");
    /* set-namespace without a namespace says so. */
    a = fr_call(f, "eval", "--image", "set-namespace", "--in", fr_fixture_input("upper"), NULL);
    CHECK_GRPC(a, INTERNAL);
    CHECK_CONTAINS(fr_details(a), "namespace");
}

/* ---- statuses ------------------------------------------------------------- */

FR_TEST(not_found_falls_through, FR_EXEC_CONFIGS | FR_POD_CONFIGS)
{
    /* Known to nobody: every evaluator says NOT_FOUND, so does the chain. */
    cJSON *a = fr_call(f, "eval", "--image", "example.com/nothing/here:v1", NULL);
    CHECK_GRPC(a, NOT_FOUND);
    CHECK_CONTAINS(fr_details(a), "example.com/nothing/here:v1");
    /* A configured image with a tag no FunctionConfig lists. */
    a = fr_call(f, "eval", "--image", "example.com/fns/passthrough:v2", NULL);
    CHECK_GRPC(a, NOT_FOUND);
    a = fr_call(f, "eval", "--image", "example.com/pods/passthrough:v2", NULL);
    CHECK_GRPC(a, NOT_FOUND);
    /* Past builtin (NOT_FOUND) to exec; past builtin and exec to worker. */
    a = fr_call(f, "eval", "--image", "example.com/fns/passthrough:v1", "--in",
                fr_fixture_input("passthrough"), "--retry-not-found", SETTLE, NULL);
    CHECK_FIXTURE(a, "passthrough");
    a = fr_call(f, "eval", "--image", "example.com/pods/passthrough:v1", "--in",
                fr_fixture_input("passthrough"), "--retry-not-found", SETTLE, NULL);
    CHECK_FIXTURE(a, "passthrough");
}

FR_TEST(nonzero_exit_is_internal, FR_EXEC_CONFIGS | FR_POD_CONFIGS)
{
    const char *images[] = {"example.com/fns/fail:v1", "example.com/pods/fail:v1"};
    for (size_t i = 0; i < 2; i++) {
        cJSON *a = fr_call(f, "eval", "--image", images[i], "--in", fr_fixture_input("fail"),
                           "--retry-not-found", SETTLE, NULL);
        CHECK_GRPC(a, INTERNAL);
        CHECK_CONTAINS(fr_details(a), "fail: the ResourceList is refused on purpose");
        CHECK_CONTAINS(fr_details(a), "refused on purpose");
    }
    /* The python function refuses YAML with an error result. */
    cJSON *a = fr_call(f, "eval", "--image", "example.com/fns/set-label:v1", "--in",
                       fr_fixture_input("passthrough"), NULL);
    CHECK_GRPC(a, INTERNAL);
    CHECK_CONTAINS(fr_details(a), "not a JSON ResourceList");
}

FR_TEST(deadline_exceeded, FR_EXEC_CONFIGS | FR_POD_CONFIGS)
{
    /* Settle first, so the 200 ms are the function's. */
    cJSON *a = fr_call(f, "eval", "--image", "example.com/fns/passthrough:v1",
                       "--retry-not-found", SETTLE, NULL);
    CHECK_GRPC(a, OK);
    a = fr_call(f, "eval", "--image", "example.com/fns/sleep:v1", "--deadline-ms", "200", NULL);
    CHECK_GRPC(a, DEADLINE_EXCEEDED);
    CHECK(fr_ms(a) < 1500);
    /* The runner killed the function's process group: its sleep is gone. */
    int64_t until = e2e_now_ms() + 3000;
    while (fr_process_with_cmdline("sleep", "17.25") && e2e_now_ms() < until)
        env_sleep_ms(20);
    CHECK(!fr_process_with_cmdline("sleep", "17.25"));
    /* The same through a warm worker; the worker serves on afterwards. */
    a = fr_call(f, "eval", "--image", "example.com/pods/passthrough:v1",
                "--retry-not-found", SETTLE, NULL);
    CHECK_GRPC(a, OK);
    a = fr_call(f, "eval", "--image", "example.com/pods/sleep:v1", "--deadline-ms", "200",
                "--retry-not-found", SETTLE, NULL);
    CHECK_GRPC(a, DEADLINE_EXCEEDED);
    CHECK(fr_ms(a) < 1500);
    a = fr_call(f, "eval", "--image", "example.com/pods/passthrough:v1", "--in",
                fr_fixture_input("passthrough"), "--deadline-ms", "5000", NULL);
    CHECK_FIXTURE(a, "passthrough");
}

FR_TEST(message_limits, FR_EXEC_CONFIGS)
{
    /* 7 MiB in: over the 6 MiB limit. */
    cJSON *a = fr_call(f, "eval", "--image", IMG_ECHO, "--size", "7340032", "--no-body", NULL);
    CHECK_GRPC(a, RESOURCE_EXHAUSTED);
    /* 7 MiB out. */
    a = fr_call(f, "eval", "--image", IMG_BIG, "--no-body", NULL);
    CHECK_GRPC(a, RESOURCE_EXHAUSTED);
    /* 5 MiB is fine, through a builtin and through a process. */
    a = fr_call(f, "eval", "--image", IMG_ECHO, "--size", "5242880", "--no-body", NULL);
    CHECK_GRPC(a, OK);
    CHECK_INT(num(a, "rl_bytes"), 5242880);
    a = fr_call(f, "eval", "--image", "example.com/fns/passthrough:v1", "--size", "5242880",
                "--no-body", "--retry-not-found", SETTLE, NULL);
    CHECK_GRPC(a, OK);
    CHECK_INT(num(a, "rl_bytes"), 5242880);
    /* The connection survives a refused message: the next call works. */
    cJSON *calls = fr_client(f, "eval", "--image", IMG_ECHO, "--size", "7340032", "--no-body",
                             "--repeat", "2", NULL);
    CHECK_INT(cJSON_GetArraySize(calls), 2);
    CHECK_GRPC(cJSON_GetArrayItem(calls, 1), RESOURCE_EXHAUSTED);
    a = fr_call(f, "eval", "--image", IMG_UPPER, "--in", fr_fixture_input("upper"), NULL);
    CHECK_FIXTURE(a, "upper");
}

FR_TEST(health_and_unknown_methods, 0)
{
    cJSON *a = fr_call(f, "health", NULL);
    CHECK_GRPC(a, OK);
    CHECK_STR(jstr(a, "status"), "SERVING");
    a = fr_call(f, "health", "--service", "evaluator.FunctionEvaluator", NULL);
    CHECK_GRPC(a, OK);
    CHECK_STR(jstr(a, "status"), "SERVING");
    a = fr_call(f, "health", "--service", "no.such.Service", NULL);
    CHECK_GRPC(a, NOT_FOUND);
    a = fr_call(f, "raw", "--method", "/evaluator.FunctionEvaluator/NoSuchMethod", NULL);
    CHECK_GRPC(a, UNIMPLEMENTED);
}

/* TLS (docs/edge.md, "TLS"): grpc-js trusting the runner's self-signed
 * certificate evaluates a function and asks for health over it. */
FR_TEST(tls_eval, FR_TLS)
{
    CHECK(f->cacert != NULL);
    cJSON *a = fr_call(f, "eval", "--image", IMG_UPPER, "--in", fr_fixture_input("upper"), NULL);
    CHECK_FIXTURE(a, "upper");
    CHECK_INT(fr_upper_calls(), 1);
    a = fr_call(f, "health", "--service", "evaluator.FunctionEvaluator", NULL);
    CHECK_GRPC(a, OK);
    CHECK_STR(jstr(a, "status"), "SERVING");
}

/* A TLS client that connects and sends nothing (no ClientHello) is
 * dropped once the handshake's time (10 s) is up; not kept for ever. */
FR_TEST(tls_handshake_timeout, FR_TLS)
{
    const char *colon = strrchr(f->addr, ':');
    CHECK(colon != NULL);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        FAILF("cannot connect to the runner at %s", f->addr);
    }
    /* Wait (40 s at most) for the server to close: EOF or a reset. */
    struct timeval tv = {40, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    int64_t start = e2e_now_ms();
    char byte;
    ssize_t n = recv(fd, &byte, 1, 0);
    int err = errno;
    int64_t waited = e2e_now_ms() - start;
    close(fd);
    if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK))
        FAILF("the connection was still open after %lld ms", (long long)waited);
    CHECK(n <= 0);
    CHECK(waited >= 5000); /* not dropped at once: it had its time */
    /* The runner still serves. */
    cJSON *a = fr_call(f, "eval", "--image", IMG_UPPER, "--in", fr_fixture_input("upper"), NULL);
    CHECK_FIXTURE(a, "upper");
}

/* 64 calls at once on one channel (one HTTP/2 connection), per path. */
FR_TEST(concurrent_calls, FR_EXEC_CONFIGS | FR_POD_CONFIGS)
{
    const char *images[] = {IMG_ECHO, "example.com/fns/passthrough:v1",
                            "example.com/pods/passthrough:v1"};
    for (size_t i = 0; i < 3; i++) {
        cJSON *a = fr_call(f, "eval", "--image", images[i], "--retry-not-found", SETTLE, NULL);
        CHECK_GRPC(a, OK);
        a = fr_call(f, "concurrent", "--image", images[i], "--in",
                    fr_fixture_input("passthrough"), "--n", "64", NULL);
        if (!a || num(a, "ok") != 64) {
            char *text = a ? cJSON_PrintUnformatted(a) : NULL;
            fprintf(stderr, "  %s: %s\n", images[i], text ? text : "no answer");
            free(text);
        }
        CHECK(a);
        CHECK_INT(num(a, "ok"), 64);
        CHECK_INT(num(a, "same"), 64);
        CHECK_INT(num(a, "connections"), 1);
        fprintf(stderr, "  64 concurrent calls to %s: %.0f ms\n", images[i], (double)num(a, "ms"));
    }
}

/* ---- warm workers ---------------------------------------------------------- */

FR_TEST(worker_killed_is_replaced, FR_POD_CONFIGS)
{
    const char *image = "example.com/pods/passthrough:v1";
    cJSON *a = fr_call(f, "eval", "--image", image, "--retry-not-found", SETTLE, NULL);
    CHECK_GRPC(a, OK);
    char victim[128];
    snprintf(victim, sizeof(victim), "%s", fr_logged_replica(a));
    CHECK(victim[0]);
    pid_t pids[4];
    CHECK_INT(fr_workers("passthrough", pids, 4), 1);
    pid_t victim_pid = fr_replica_pid(victim);
    CHECK_INT(pids[0], victim_pid);
    pid_t victim_init = fr_sandbox_of(victim_pid);
    /* Killed between calls (the worker itself, by its host pid: a crash,
     * not a stop through its sandbox's init), and called again at once,
     * before anything noticed: no hang, and the call after is served by a
     * new worker. */
    CHECK_INT(kill(victim_pid, SIGKILL), 0);
    cJSON *calls = fr_client(f, "eval", "--image", image, "--in", fr_fixture_input("passthrough"),
                             "--deadline-ms", "10000", "--repeat", "2", NULL);
    CHECK_INT(cJSON_GetArraySize(calls), 2);
    cJSON *first = cJSON_GetArrayItem(calls, 0), *second = cJSON_GetArrayItem(calls, 1);
    fprintf(stderr, "  first call after SIGKILL: code %d in %.1f ms (%s)\n", fr_code(first),
            fr_ms(first), fr_details(first));
    CHECK(fr_code(first) == OK || fr_code(first) == UNAVAILABLE);
    CHECK(fr_ms(first) < 5000);
    CHECK_FIXTURE(second, "passthrough");
    char replacement[128];
    snprintf(replacement, sizeof(replacement), "%s", fr_logged_replica(second));
    CHECK(replacement[0] && strcmp(replacement, victim) != 0);
    CHECK(fr_wait_gone(victim_pid, 3000));
    CHECK_INT(fr_replica_pid(victim), 0);
    CHECK(!victim_init || fr_wait_gone(victim_init, 3000));
    /* Killed while idle, noticed by the runtime before the next call. */
    pid_t replacement_pid = fr_replica_pid(replacement);
    CHECK(replacement_pid > 0);
    CHECK_INT(kill(replacement_pid, SIGKILL), 0);
    CHECK(fr_wait_gone(replacement_pid, 3000));
    env_sleep_ms(100);
    a = fr_call(f, "eval", "--image", image, "--in", fr_fixture_input("passthrough"),
                "--deadline-ms", "10000", NULL);
    CHECK_FIXTURE(a, "passthrough");
    CHECK(fr_logged_replica(a)[0] && strcmp(fr_logged_replica(a), replacement) != 0);
    CHECK(fr_ms(a) < 5000);
}

FR_TEST(worker_gone_after_ttl, 0)
{
    CHECK_INT(fr_config(f, "pod-ttl",
                        "{\"image\":\"ttl\",\"prefixes\":[\"example.com/pods\"],"
                        "\"podExecutor\":{\"tags\":[\"v1\"],\"timeToLive\":\"300ms\"}}"),
              0);
    cJSON *a = fr_call(f, "eval", "--image", "example.com/pods/ttl:v1", "--retry-not-found",
                       SETTLE, NULL);
    CHECK_GRPC(a, OK);
    /* Every use extends the TTL: calls 150 ms apart over 750 ms all find
     * one worker. */
    cJSON *calls = fr_client(f, "eval", "--image", "example.com/pods/ttl:v1", "--repeat", "6",
                             "--interval-ms", "150", NULL);
    int64_t used = e2e_now_ms();
    /* Looked up at once: the last use was just now, 300 ms is ample. */
    char worker[128];
    snprintf(worker, sizeof(worker), "%s", fr_logged_replica(cJSON_GetArrayItem(calls, 0)));
    pid_t worker_pid = fr_replica_pid(worker);
    CHECK_INT(cJSON_GetArraySize(calls), 6);
    CHECK(worker[0]);
    CHECK(worker_pid > 0);
    for (int i = 0; i < 6; i++) {
        CHECK_GRPC(cJSON_GetArrayItem(calls, i), OK);
        CHECK_STR(fr_logged_replica(cJSON_GetArrayItem(calls, i)), worker);
    }
    pid_t init = fr_sandbox_of(worker_pid);
    CHECK(fr_wait_gone(worker_pid, 10000));
    fprintf(stderr, "  worker gone %lld ms after its last use (TTL 300 ms)\n",
            (long long)(e2e_now_ms() - used));
    /* Nothing of it is left: no worker or function process of the image,
     * and not its sandbox's init (none when unsandboxed). */
    pid_t pids[4];
    CHECK_INT(fr_workers("ttl", pids, 4), 0);
    CHECK(wait_no_function_processes("ttl", 3000));
    CHECK(!init || fr_wait_gone(init, 3000));
    /* The image still works: a new worker starts. */
    a = fr_call(f, "eval", "--image", "example.com/pods/ttl:v1", "--in",
                fr_fixture_input("passthrough"), NULL);
    CHECK_FIXTURE(a, "passthrough");
    CHECK(fr_logged_replica(a)[0] && strcmp(fr_logged_replica(a), worker) != 0);
    CHECK_INT(fr_workers("ttl", pids, 4), 1);
}

FR_TEST(warming_at_start, FR_PREWARM)
{
    /* Before any call: one worker per podExecutor image, and only one. */
    pid_t a_pids[4], b_pids[4];
    CHECK(wait_workers("warm-a", 1, 5000, a_pids, 4));
    CHECK(wait_workers("warm-b", 1, 5000, b_pids, 4));
    env_sleep_ms(300);
    CHECK_INT(fr_workers("warm-a", a_pids, 4), 1);
    CHECK_INT(fr_workers("warm-b", b_pids, 4), 1);
    char warm[128];
    CHECK(fr_replica_of(a_pids[0], warm, sizeof(warm))[0]);
    /* The first call is served by the warm worker. */
    cJSON *a = fr_call(f, "eval", "--image", "example.com/pods/warm-a:v1", "--in",
                       fr_fixture_input("passthrough"), NULL);
    CHECK_FIXTURE(a, "passthrough");
    CHECK_STR(fr_logged_replica(a), warm);
    CHECK_INT(fr_workers("warm-a", a_pids, 4), 1);
    /* A podExecutor FunctionConfig created later is warmed as well. */
    pid_t late[4];
    CHECK_INT(fr_workers("late", late, 4), 0);
    CHECK_INT(fr_config(f, "pod-late",
                        "{\"image\":\"late\",\"prefixes\":[\"example.com/pods\"],"
                        "\"podExecutor\":{\"tags\":[\"v1\"]}}"),
              0);
    CHECK(wait_workers("late", 1, 5000, late, 4));
}

/* status.ignoredOverrides of FunctionConfig `name` once the runner wrote it
 * (printed unformatted into `out`); 1 when it did within the deadline. */
static int ignored_overrides(fr *f, const char *name, char *out, size_t n)
{
    char path[256];
    snprintf(path, sizeof(path), NS("default") "/functionconfigs/%s", name);
    int64_t end = e2e_now_ms() + 10000;
    out[0] = '\0';
    do {
        e2e_resp r = E2E_RESP_INIT;
        long status = e2e_http_do(f->h, "GET", path, DEV_TOKEN, NULL, &r);
        const cJSON *ign = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(r.json, "status"), "ignoredOverrides");
        char *text = ign ? cJSON_PrintUnformatted(ign) : NULL;
        if (text)
            snprintf(out, n, "%s", text);
        free(text);
        if (status != 200 || !ign)
            snprintf(out, n, "HTTP %ld: %.800s", status, r.body ? r.body : "");
        e2e_resp_free(&r);
        if (status == 200 && ign)
            return 1;
        env_sleep_ms(50);
    } while (e2e_now_ms() < end);
    return 0;
}

/* A ResourceList that makes the overrides function fill `mib` MiB. */
static const char *alloc_input(fr *f, int mib)
{
    static char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/alloc-%d.yaml", f->fns, mib);
    FILE *out = fopen(path, "w");
    if (!out)
        return NULL;
    fprintf(out, "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n"
                 "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: hog\n"
                 "  data:\n    allocate-mib: \"%d\"\n", mib);
    return fclose(out) == 0 ? path : NULL;
}

/*
 * podExecutor.templateOverrides (issue 12): the "function" container's env
 * reaches the function and its memory limit is the worker's (a function
 * filling more is killed, the same one under a config without the limit
 * succeeds); what is not honoured is listed in status.ignoredOverrides.
 */
FR_TEST(template_overrides, 0)
{
    CHECK_INT(fr_config(f, "pod-limited",
                        "{\"image\":\"overrides\",\"prefixes\":[\"example.com/limited\"],"
                        "\"podExecutor\":{\"tags\":[\"v1\"],\"templateOverrides\":{"
                        "\"metadata\":{\"labels\":{\"team\":\"a\"}},"
                        "\"spec\":{\"nodeSelector\":{\"disk\":\"ssd\"},\"containers\":["
                        "{\"name\":\"function\",\"env\":[{\"name\":\"OVERRIDE_GREETING\","
                        "\"value\":\"hello-from-override\"}],\"resources\":{\"limits\":"
                        "{\"memory\":\"64Mi\",\"cpu\":\"500m\"},\"requests\":{\"cpu\":\"100m\"}},"
                        "\"securityContext\":{\"runAsUser\":1000}},"
                        "{\"name\":\"sidecar\",\"image\":\"busybox\"}]}}}}"),
              0);
    CHECK_INT(fr_config(f, "pod-free",
                        "{\"image\":\"overrides\",\"prefixes\":[\"example.com/free\"],"
                        "\"podExecutor\":{\"tags\":[\"v1\"],\"templateOverrides\":{"
                        "\"spec\":{\"containers\":[{\"name\":\"function\",\"env\":["
                        "{\"name\":\"OVERRIDE_GREETING\",\"value\":\"unlimited\"}]}]}}}}"),
              0);
    /* The override's env is the function's. */
    cJSON *a = fr_call(f, "eval", "--image", "example.com/limited/overrides:v1", "--in",
                       fr_fixture_input("passthrough"), "--retry-not-found", SETTLE, NULL);
    CHECK_FIXTURE(a, "passthrough");
    CHECK_CONTAINS(fr_log(a), "greeting=hello-from-override");
    /* 160 MiB: past the 64 MiB limit the kernel kills it; without the
     * limit the same function fills them. */
    const char *hog = alloc_input(f, 160);
    CHECK(hog != NULL);
    a = fr_call(f, "eval", "--image", "example.com/free/overrides:v1", "--in", hog,
                "--retry-not-found", SETTLE, NULL);
    CHECK_GRPC(a, OK);
    CHECK_CONTAINS(fr_log(a), "greeting=unlimited");
    CHECK_CONTAINS(fr_log(a), "filled 160 MiB");
    a = fr_call(f, "eval", "--image", "example.com/limited/overrides:v1", "--in", hog, NULL);
    CHECK_GRPC(a, 13); /* INTERNAL */
    /* SIGKILLed: python by the OOM killer, so its shell exits 128 + 9 */
    if (!strstr(fr_details(a), "status 137") && !strstr(fr_details(a), "signal 9"))
        FAILF("not killed at the memory limit: %s", fr_details(a));
    /* What was not honoured is listed. */
    char ignored[1024];
    if (!ignored_overrides(f, "pod-limited", ignored, sizeof(ignored)))
        FAILF("pod-limited has no status.ignoredOverrides: %s", ignored);
    CHECK_STR(ignored, "[\"metadata\",\"spec.nodeSelector\","
                       "\"spec.containers[function].resources.requests\","
                       "\"spec.containers[function].securityContext.runAsUser\","
                       "\"spec.containers[sidecar]\"]");
    if (!ignored_overrides(f, "pod-free", ignored, sizeof(ignored)))
        FAILF("pod-free has no status.ignoredOverrides: %s", ignored);
    CHECK_STR(ignored, "[]");
}

/* ---- main ------------------------------------------------------------------ */

#define CASES(X)                                                                                   \
    X(exec_path_fixtures)                                                                          \
    X(exec_path_request_field)                                                                     \
    X(worker_path_fixtures)                                                                        \
    X(builtin_path_fixtures)                                                                       \
    X(not_found_falls_through)                                                                     \
    X(nonzero_exit_is_internal)                                                                    \
    X(deadline_exceeded)                                                                           \
    X(message_limits)                                                                              \
    X(health_and_unknown_methods)                                                                  \
    X(tls_eval)                                                                                    \
    X(tls_handshake_timeout)                                                                       \
    X(concurrent_calls)                                                                            \
    X(worker_killed_is_replaced)                                                                   \
    X(worker_gone_after_ttl)                                                                       \
    X(warming_at_start)                                                                            \
    X(template_overrides)

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    setvbuf(stdout, NULL, _IONBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if (fr_client_setup() < 0)
        return 77;
    e2e_client_global_init();
    int ran = 0;
#define RUN_CASE(name)                                                                             \
    if (!only || strcmp(only, #name) == 0) {                                                       \
        RUN_ISOLATED(name);                                                                        \
        ran++;                                                                                     \
    }
    CASES(RUN_CASE)
#undef RUN_CASE
    e2e_client_global_cleanup();
    if (!ran) {
        fprintf(stderr, "no case named %s\n", only);
        return 2;
    }
    return HARNESS_END();
}
