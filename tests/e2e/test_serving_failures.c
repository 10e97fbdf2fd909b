/*
 * Serving, end to end, when things go wrong: a worker killed mid-traffic,
 * a function that hangs, a full queue, bad bundles, a bundle that does not
 * exist, and a platform shut down with workers running.
 *
 * Workers are sandboxed (pid 2 in their own pid namespace): a worker is
 * named by its replica, and its host process found from it
 * (test_serving_common.h).
 */
#include "../harness.h"
#include "test_serving_common.h"
#include "util/misc.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>

#define NATIVE_SPEC(extra)                                                                         \
    "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"}" extra "}"

/* The answer is a data-plane error: a JSON Status of `code` with an
 * invocation id. NULL when it is, else what is wrong. */
static const char *dp_error_problem(const e2e_resp *r, long code, const char *reason)
{
    const char *p = status_problem(r, code, reason, NULL);
    if (p)
        return p;
    if (!sv_header(r, "X-Funcd-Invocation-Id")[0])
        return "no X-Funcd-Invocation-Id header";
    return NULL;
}

/* Waits until the worker reports `want` requests in flight besides the
 * /inflight one. */
static int wait_inflight(env *e, const char *name, int want, int timeout_ms)
{
    char path[128];
    snprintf(path, sizeof(path), "/fn/default/%s/inflight", name);
    int64_t deadline = e2e_now_ms() + timeout_ms;
    for (;;) {
        if (sv_invoke(e, "GET", path, NULL) == 200 && jnum(e->r.json, "inflight") == want)
            return 1;
        if (e2e_now_ms() >= deadline)
            return 0;
        env_sleep_ms(2);
    }
}

/*
 * A worker killed with SIGKILL while it serves three requests: those three
 * fail with 502 at once (not after their sleep), and the requests after
 * them are served by a replacement.
 */
SV_TEST(worker_killed)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(sv_create(e, "victim",
                        NATIVE_SPEC(",\"scaling\":{\"minReplicas\":0,\"maxReplicas\":1,"
                                    "\"concurrency\":8,\"queueLength\":50}"),
                        dir),
              201);
    if (!sv_wait_ready(e, "victim", 5000))
        FAILF("not Ready: %.500s", e->r.body);
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("victim") "/warm", NULL), 200);
    const char *warm = jstr(e->r.json, "replica");
    char replica[64];
    snprintf(replica, sizeof(replica), "%s", warm ? warm : "");
    sv_proc victim, init;
    if (!sv_replica_proc(replica, &victim))
        FAILF("no process on the host is worker \"%s\"", replica);
    int sandboxed = sv_proc_init(&victim, &init);

    sv_call calls[3];
    memset(calls, 0, sizeof(calls));
    for (int i = 0; i < 3; i++) {
        calls[i].method = "GET";
        snprintf(calls[i].path, sizeof(calls[i].path), DP_PATH("victim") "/sleep?ms=8000");
    }
    sv_batch *b = sv_batch_start(e->dp_base, calls, 3);
    CHECK(b != NULL);
    int held = wait_inflight(e, "victim", 3, 5000);
    int64_t killed_at = e2e_now_ms();
    /* The worker itself, not its sandbox init: a crash of the user's code. */
    int killed = held && sv_proc_kill(&victim, SIGKILL) == 0;
    sv_batch_join(b);
    const char *problems[3];
    int64_t slowest = 0;
    for (int i = 0; i < 3; i++) {
        problems[i] = dp_error_problem(&calls[i].r, 502, "BadGateway");
        /* The caller is told how the worker ended (and no host path). */
        const char *msg = problems[i] ? NULL : jstr(calls[i].r.json, "message");
        if (!problems[i] && (!msg || !strstr(msg, "was killed by signal 9") || strstr(msg, dir)))
            problems[i] = "the message does not say the worker was killed by signal 9";
        if (problems[i])
            fprintf(stderr, "  in-flight request %d: %s: HTTP %ld %.300s\n", i, problems[i],
                    calls[i].r.status, calls[i].r.body);
        if (calls[i].done_ms - killed_at > slowest)
            slowest = calls[i].done_ms - killed_at;
        e2e_resp_free(&calls[i].r);
    }
    CHECK(held);
    CHECK(killed);
    CHECK(!problems[0] && !problems[1] && !problems[2]);
    CHECK(slowest < 4000); /* failed at once, not after the handler's 8 s */

    /* Later requests succeed, on a new worker. */
    for (int i = 0; i < 5; i++) {
        if (sv_invoke(e, "GET", DP_PATH("victim") "/after", NULL) != 200)
            FAILF("request %d after the kill: HTTP %ld: %.300s", i, e->r.status, e->r.body);
        const char *now = jstr(e->r.json, "replica");
        CHECK(now && *now && strcmp(now, replica) != 0);
    }
    /* Reaped, with its init: neither is left, not even as a zombie. */
    CHECK(sv_wait_procs_gone(&victim, 1, 2000));
    CHECK(!sandboxed || sv_wait_procs_gone(&init, 1, 2000));
    CHECK(sv_wait_total(e, "victim", 1, 1, 3000, NULL));
}

/* A worker that exits while it handles a request: the caller gets 502
 * naming the exit status (not its output, not a host path), the request
 * is not tried again on another worker, and the next one is served. */
SV_TEST(worker_exit_status)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(sv_create(e, "quitter",
                        NATIVE_SPEC(",\"scaling\":{\"minReplicas\":0,\"maxReplicas\":2}"), dir),
              201);
    if (!sv_wait_ready(e, "quitter", 5000))
        FAILF("not Ready: %.500s", e->r.body);
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("quitter") "/exit?code=3", NULL), 502);
    const char *p = dp_error_problem(&e->r, 502, "BadGateway");
    if (p)
        FAILF("%s: HTTP %ld %.300s", p, e->r.status, e->r.body);
    const char *msg = jstr(e->r.json, "message");
    CHECK_CONTAINS(msg, "replica quitter-1 exited with status 3");
    CHECK(!strstr(msg, dir));
    CHECK(!strstr(msg, "listening")); /* the worker's stderr is for the logs, not the caller */
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("quitter") "/after", NULL), 200);
    CHECK_STR(jstr(e->r.json, "replica"), "quitter-2"); /* one worker took the exit, not two */
}

/* A handler that takes longer than spec.timeout gets 504; the function
 * keeps serving. */
SV_TEST(timeout)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(sv_create(e, "hang", NATIVE_SPEC(",\"timeout\":\"500ms\""), dir), 201);
    if (!sv_wait_ready(e, "hang", 5000))
        FAILF("not Ready: %.500s", e->r.body);
    int64_t t0 = e2e_now_ms();
    sv_invoke(e, "GET", DP_PATH("hang") "/sleep?ms=5000", NULL);
    int64_t took = e2e_now_ms() - t0;
    const char *p = dp_error_problem(&e->r, 504, "GatewayTimeout");
    if (p)
        FAILF("%s: HTTP %ld %.300s", p, e->r.status, e->r.body);
    CHECK_CONTAINS(jstr(e->r.json, "message"), "hang");
    fprintf(stderr, "  504 after %lld ms\n", (long long)took);
    CHECK(took >= 450 && took < 3000);
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("hang") "/quick", NULL), 200);
}

/*
 * One worker, one request at a time, one waiting: of four concurrent slow
 * requests two are served and two are refused at once with 503 and
 * Retry-After.
 */
SV_TEST(queue_overflow)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(sv_create(e, "narrow",
                        NATIVE_SPEC(",\"scaling\":{\"minReplicas\":1,\"maxReplicas\":1,"
                                    "\"concurrency\":1,\"queueLength\":1}"),
                        dir),
              201);
    if (!sv_wait_ready(e, "narrow", 5000))
        FAILF("not Ready: %.500s", e->r.body);
    /* Warm, so the queue holds exactly one request. */
    if (!sv_wait_replicas(e, "narrow", 1, 1, 5000))
        FAILF("minReplicas 1 not ready: %.500s", e->r.body);

    sv_call calls[4];
    memset(calls, 0, sizeof(calls));
    for (int i = 0; i < 4; i++) {
        calls[i].method = "GET";
        snprintf(calls[i].path, sizeof(calls[i].path), DP_PATH("narrow") "/sleep?ms=1000");
    }
    int64_t t0 = e2e_now_ms();
    sv_batch *b = sv_batch_start(e->dp_base, calls, 4);
    CHECK(b != NULL);
    sv_batch_join(b);
    int served = 0, refused = 0;
    const char *problem = NULL;
    for (int i = 0; i < 4; i++) {
        e2e_resp *r = &calls[i].r;
        if (r->status == 200) {
            served++;
        } else if (r->status == 503) {
            refused++;
            const char *p = dp_error_problem(r, 503, "ServiceUnavailable");
            if (!p && !sv_header(r, "Retry-After")[0])
                p = "no Retry-After header";
            if (!p && calls[i].done_ms - t0 > 900)
                p = "the refusal waited for the queue";
            if (p && !problem) {
                problem = p;
                fprintf(stderr, "  refused request %d: %s: %.300s\n", i, p, r->body);
            }
        } else {
            fprintf(stderr, "  request %d: HTTP %ld %.300s\n", i, r->status, r->body);
        }
        e2e_resp_free(r);
    }
    CHECK_INT(served, 2);
    CHECK_INT(refused, 2);
    CHECK(problem == NULL);
}

/* Bundles that are unsafe, not a tar.gz, or too large are refused with a
 * JSON Status that names the problem. */
SV_TEST(bad_bundles)
{
    static const sv_entry traversal[] = {{"main.py", "x = 1\n", 0644},
                                         {"../evil.py", "import os\n", 0644}};
    static const sv_entry absolute[] = {{"/tmp/funcd-evil.py", "x = 1\n", 0644}};
    void *tgz = NULL;
    size_t len = 0;

    CHECK(sv_targz(traversal, 2, &tgz, &len) == 0);
    sv_upload(e, tgz, len);
    free(tgz);
    CHECK_STATUS(400, "BadRequest", NULL);
    CHECK_CONTAINS(jstr(e->r.json, "message"), "../evil.py");

    CHECK(sv_targz(absolute, 1, &tgz, &len) == 0);
    sv_upload(e, tgz, len);
    free(tgz);
    CHECK_STATUS(400, "BadRequest", NULL);
    CHECK_CONTAINS(jstr(e->r.json, "message"), "funcd-evil.py");

    static const char not_gzip[] = "#!/bin/sh\necho this is not a tar.gz\n";
    sv_upload(e, not_gzip, sizeof(not_gzip) - 1);
    CHECK_STATUS(400, "BadRequest", NULL);
    CHECK_CONTAINS(jstr(e->r.json, "message"), "gzip");

    /* 64 MiB is the limit (serving.md); one byte more is refused. */
    size_t big = ((size_t)64 << 20) + 1;
    char *huge = calloc(1, big);
    CHECK(huge != NULL);
    huge[0] = 0x1f; /* a gzip magic, so only the size is wrong */
    huge[1] = (char)0x8b;
    sv_upload(e, huge, big);
    free(huge);
    CHECK_STATUS(413, "RequestEntityTooLarge", NULL);
    CHECK_CONTAINS(jstr(e->r.json, "message"), "limit");
}

typedef struct upload_job {
    env *e;
    const void *data;
    size_t len;
    long code;
    int64_t answered_ms;
} upload_job;

static void *upload_main(void *arg)
{
    upload_job *u = arg;
    static const char *const gzip[] = {"Content-Type: application/gzip", NULL};
    e2e_http *h = e2e_http_new(u->e->base);
    e2e_resp r = {0};
    u->code = h ? e2e_http_send(h, "POST", NS("default") "/bundles", DEV_TOKEN, gzip, u->data,
                                u->len, &r)
                : -1;
    u->answered_ms = funcd_mono_ms();
    e2e_resp_free(&r);
    e2e_http_free(h);
    return NULL;
}

/* An upload's check decompresses the whole bundle (a 250 MiB one takes
 * about half a second, seconds under the sanitizers): it runs beside the
 * control plane's thread, so a request sent meanwhile is answered before
 * it ends (review17: the check ran on that thread and held every other
 * request of every tenant). */
SV_TEST(bundle_check_runs_beside_other_requests)
{
    size_t size = (size_t)250 << 20;
    char *zeros = malloc(size + 1);
    CHECK(zeros != NULL);
    memset(zeros, 'a', size);
    zeros[size] = '\0';
    sv_entry big[] = {{"main.py", "x = 1\n", 0644}, {"big.txt", zeros, 0644}};
    void *tgz = NULL;
    size_t len = 0;
    int made = sv_targz(big, 2, &tgz, &len) == 0;
    free(zeros);
    CHECK(made);
    upload_job u = {e, tgz, len, 0, 0};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, upload_main, &u) == 0);
    env_sleep_ms(150); /* the body (a few hundred KB) is in; the check runs */
    long listed = REQ("GET", NS("default") "/functions", DEV_TOKEN, NULL);
    int64_t listed_ms = funcd_mono_ms();
    pthread_join(t, NULL);
    free(tgz);
    CHECK_INT(listed, 200);
    CHECK_INT(u.code, 201);
    fprintf(stderr, "  the listing was answered %" PRId64 " ms before the upload\n",
            u.answered_ms - listed_ms);
    CHECK(listed_ms < u.answered_ms);
}

/* A Function whose bundle is not stored is not Ready, says which bundle,
 * and its requests get 503 instead of hanging. */
SV_TEST(missing_bundle)
{
    static const char digest[] =
        "sha256:00000000000000000000000000000000000000000000000000000000000000aa";
    CHECK_INT(sv_create(e, "lost",
                        "{\"runtime\":\"python3\",\"handler\":\"main.handler\",\"source\":"
                        "{\"bundle\":\"%s\"}}",
                        digest),
              201);
    if (!sv_wait_condition(e, "lost", "False", 5000))
        FAILF("Ready did not become False: %.500s", e->r.body);
    const cJSON *ready = sv_ready_condition(e->r.json);
    CHECK_STR(jstr(ready, "reason"), "ArtifactFailed");
    CHECK_CONTAINS(jstr(ready, "message"), digest);
    sv_invoke(e, "GET", DP_PATH("lost") "/", NULL);
    const char *p = dp_error_problem(&e->r, 503, "ServiceUnavailable");
    if (p)
        FAILF("%s: HTTP %ld %.300s", p, e->r.status, e->r.body);
    CHECK(sv_header(&e->r, "Retry-After")[0] != '\0');
}

/* Bundles belong to the namespace that uploaded them (issue 11, finding 10):
 * team-b uploading bytes default already has gets 201 like any fresh
 * upload, and a Function in team-b naming a bundle only default uploaded is
 * not Ready, while the same spec in default is. */
SV_TEST(foreign_bundle)
{
    static const char *const gzip[] = {"Content-Type: application/gzip", NULL};
    static const char main_py[] = "def handler(req):\n    return 'ok'\n";
    sv_entry shared[] = {{"main.py", main_py, 0644}};
    sv_entry only_a[] = {{"main.py", main_py, 0644}, {"a.txt", "default only\n", 0644}};
    void *s = NULL, *a = NULL;
    size_t sl = 0, al = 0;
    CHECK(sv_targz(shared, 1, &s, &sl) == 0);
    if (sv_targz(only_a, 2, &a, &al) < 0) {
        free(s);
        FAILF("cannot build the bundle");
    }
    long first = sv_upload(e, s, sl);
    long again = sv_upload(e, s, sl);
    long other = e2e_http_send(e->h, "POST", NS("team-b") "/bundles", TEAM_B_TOKEN, gzip, s, sl,
                               &e->r);
    long other_again = e2e_http_send(e->h, "POST", NS("team-b") "/bundles", TEAM_B_TOKEN, gzip,
                                     s, sl, &e->r);
    long a_up = sv_upload(e, a, al);
    char digest[100];
    snprintf(digest, sizeof(digest), "%s", jstr(e->r.json, "digest") ? jstr(e->r.json, "digest")
                                                                      : "");
    free(s);
    free(a);
    CHECK_INT(first, 201);
    CHECK_INT(again, 200);
    CHECK_INT(other, 201); /* nothing tells team-b that default has these bytes */
    CHECK_INT(other_again, 200);
    CHECK_INT(a_up, 201);
    CHECK(digest[0]);

    char body[512];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"borrow\"},\"spec\":{\"runtime\":\"python3\",\"handler\":\"main.handler\","
             "\"source\":{\"bundle\":\"%s\"}}}",
             digest);
    CHECK_INT(env_req(e, "POST", NS("team-b") "/functions", TEAM_B_TOKEN, body), 201);
    int64_t deadline = e2e_now_ms() + 5000;
    const char *status = NULL;
    for (;;) {
        if (env_req(e, "GET", NS("team-b") "/functions/borrow", TEAM_B_TOKEN, NULL) == 200 &&
            jnum(e->r.json, "status.observedGeneration") == jnum(e->r.json, "metadata.generation"))
            status = jstr(sv_ready_condition(e->r.json), "status");
        if (status || e2e_now_ms() >= deadline)
            break;
        env_sleep_ms(20);
    }
    CHECK_STR(status, "False");
    const cJSON *ready = sv_ready_condition(e->r.json);
    CHECK_STR(jstr(ready, "reason"), "ArtifactFailed");
    CHECK_CONTAINS(jstr(ready, "message"), "team-b");
    /* the owner's Function with the same spec is Ready */
    CHECK_INT(sv_create(e, "own",
                        "{\"runtime\":\"python3\",\"handler\":\"main.handler\",\"source\":"
                        "{\"bundle\":\"%s\"}}",
                        digest),
              201);
    if (!sv_wait_ready(e, "own", 5000))
        FAILF("the uploader's Function is not Ready: %.500s", e->r.body);
}

/* How many of `procs` still exist, each reported. */
static size_t count_alive(const sv_proc *procs, size_t n, const char *when)
{
    size_t alive = 0;
    for (size_t i = 0; i < n; i++)
        if (!sv_proc_gone(&procs[i])) {
            fprintf(stderr, "  %d (%s%s%s) still exists %s\n", (int)procs[i].pid, procs[i].comm,
                    procs[i].replica[0] ? ", replica " : "", procs[i].replica, when);
            alive++;
        }
    return alive;
}

/*
 * Freeing the platform leaves no worker process: not the idle ones, not
 * one serving a request, not one that ignores SIGTERM, nor their sandbox
 * inits.
 */
SV_TEST(shutdown)
{
    char native[256], python[256];
    CHECK(sv_fixture("native", native, sizeof(native)) == 0);
    CHECK(sv_fixture("python", python, sizeof(python)) == 0);
    CHECK_INT(sv_create(e, "pair", NATIVE_SPEC(",\"scaling\":{\"minReplicas\":2}"), native), 201);
    CHECK_INT(sv_create(e, "stubborn",
                        NATIVE_SPEC(",\"env\":{\"FIXTURE_IGNORE_TERM\":\"1\"},"
                                    "\"scaling\":{\"minReplicas\":1}"),
                        native),
              201);
    CHECK_INT(
        sv_create(e, "snake",
                  "{\"runtime\":\"python3\",\"handler\":\"main.handler\",\"source\":{\"path\":"
                  "\"%s\"},\"scaling\":{\"minReplicas\":1}}",
                  python),
        201);
    CHECK(sv_wait_replicas(e, "pair", 2, 2, 5000));
    CHECK(sv_wait_replicas(e, "stubborn", 1, 1, 5000));
    CHECK(sv_wait_replicas(e, "snake", 1, 1, 5000));
    /* One request in flight when the platform goes away. */
    sv_call call = {.method = "GET"};
    snprintf(call.path, sizeof(call.path), DP_PATH("stubborn") "/sleep?ms=20000");
    sv_batch *b = sv_batch_start(e->dp_base, &call, 1);
    CHECK(b != NULL);
    int held = wait_inflight(e, "stubborn", 1, 5000);
    /* The workers the platform must end, found on the host; and with them
     * everything else it started (sandbox inits, a warm generic python). */
    size_t workers = sv_function_procs("pair", NULL, 0) + sv_function_procs("stubborn", NULL, 0) +
                     sv_function_procs("snake", NULL, 0);
    sv_proc procs[64];
    size_t n = sv_descendants(procs, 64);
    size_t inits = sv_sandbox_inits(NULL, 0);
    for (size_t i = 0; i < n && i < 64; i++)
        if (procs[i].replica[0])
            fprintf(stderr, "  worker %s is %d (%s) on the host\n", procs[i].replica,
                    (int)procs[i].pid, procs[i].comm);

    e2e_http_free(e->h);
    e2e_http_free(e->dp);
    e->h = e->dp = NULL;
    int64_t t0 = e2e_now_ms();
    funcd_platform_free(e->p);
    e->p = NULL;
    int64_t took = e2e_now_ms() - t0;
    size_t alive = count_alive(procs, n < 64 ? n : 64, "after funcd_platform_free");
    size_t left = sv_descendants(NULL, 0); /* including any started during shutdown */
    sv_batch_join(b);
    fprintf(stderr,
            "  shutdown of %zu processes (%zu sandbox inits) took %lld ms; the request in "
            "flight ended with HTTP %ld\n",
            n, inits, (long long)took, call.r.status);
    e2e_resp_free(&call.r);
    CHECK(held);
    CHECK_INT(workers, 4);
    CHECK(n >= workers && n <= 64);
    CHECK_INT(alive, 0);
    CHECK_INT(left, 0);
}

/*
 * A worker that cannot start for a reason of the host (here: its runtime
 * directory cannot be made, because the state directory's run/ became a
 * file) fails the request with 502, and the body tells the caller what to
 * do — not the host's paths, /sys, /proc, cgroups or funcd's pid (issue 11):
 * the data plane answers anyone.
 */
TEST(host_failure)
{
    char state[64], run[96], dir[256], pid[32];
    snprintf(state, sizeof(state), "/tmp/funcd-hostfail-XXXXXX");
    CHECK(mkdtemp(state) != NULL);
    env e_, *e = &e_;
    if (env_up_with(e, NULL, funcd_with_state_dir(state), NULL, NULL) < 0) {
        env_down(e);
        funcd_remove_tree(state);
        FAILF("cannot start a platform: %s", funcd_error_last()->message);
    }
    int ok = sv_fixture("native", dir, sizeof(dir)) == 0 &&
             sv_create(e, "doomed", NATIVE_SPEC(",\"scaling\":{\"minReplicas\":0}"), dir) == 201 &&
             sv_wait_ready(e, "doomed", 5000);
    snprintf(run, sizeof(run), "%s/run", state);
    ok = ok && funcd_remove_tree(run) == 0;
    FILE *f = ok ? fopen(run, "w") : NULL;
    if (f)
        fclose(f);
    long code = f ? sv_invoke(e, "GET", DP_PATH("doomed") "/", NULL) : 0;
    const char *problem = dp_error_problem(&e->r, 502, "BadGateway");
    char body[2048];
    snprintf(body, sizeof(body), "%s", e->r.body ? e->r.body : "");
    const char *id = sv_header(&e->r, "X-Funcd-Invocation-Id");
    int names_id = id[0] && strstr(body, id) != NULL;
    env_down(e);
    unlink(run);
    funcd_remove_tree(state);
    sv_cleanup();
    CHECK(ok && f);
    if (problem)
        FAILF("%s: HTTP %ld %s", problem, code, body);
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    static const char *const leaks[] = {"/sys/", "/proc", "/tmp", "cgroup", "run/w"};
    for (size_t i = 0; i < sizeof(leaks) / sizeof(leaks[0]); i++)
        if (strstr(body, leaks[i]))
            FAILF("the body names \"%s\": %s", leaks[i], body);
    if (strstr(body, state) || strstr(body, pid))
        FAILF("the body names the state directory or funcd's pid: %s", body);
    CHECK_CONTAINS(body, "failed to start");
    CHECK(names_id);
}

int main(int argc, char **argv)
{
    sv_init();
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    SV_RUN(only, ran, worker_killed);
    SV_RUN(only, ran, worker_exit_status);
    SV_RUN(only, ran, timeout);
    SV_RUN(only, ran, queue_overflow);
    SV_RUN(only, ran, bad_bundles);
    SV_RUN(only, ran, bundle_check_runs_beside_other_requests);
    SV_RUN(only, ran, missing_bundle);
    SV_RUN(only, ran, foreign_bundle);
    SV_RUN(only, ran, shutdown);
    SV_RUN(only, ran, host_failure);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no test case named %s\n", only);
        return 1;
    }
    return HARNESS_END();
}
