/*
 * Serving, end to end: scale from zero (one request and a burst), scale out
 * under load and back to the minimum, and scale to zero after the idle
 * timeout with the worker processes really gone.
 *
 * Workers are sandboxed: each is pid 2 in its own pid namespace, so a worker
 * is told apart by its replica (FUNCD_REPLICA, which the fixture reports),
 * and its host process is found from it (test_serving_common.h).
 */
#include "../harness.h"
#include "test_serving_common.h"

#define COLD_ROUNDS 200
#define BURST 50

/* The replica that served `r` ("" when none): the worker's identity. */
static const char *replica_of(const e2e_resp *r, char *out, size_t len)
{
    const char *replica = jstr(r->json, "replica");
    snprintf(out, len, "%s", replica ? replica : "");
    return out;
}

/* Adds `worker` and its sandbox init (if it has one) to `procs`. */
static void note_proc(sv_proc *procs, size_t *n, const sv_proc *worker)
{
    procs[(*n)++] = *worker;
    if (sv_proc_init(worker, &procs[*n]))
        (*n)++;
}

/*
 * COLD_ROUNDS cold starts in a row, each answering its very first request.
 * Each round is a new Function (cold-N): it is Ready with no replica, the
 * first request starts the worker, and the Function is deleted after it.
 * New names, because a delete and a re-create of one name may fold into
 * one reconcile that keeps the warm pool.
 */
SV_TEST(cold_starts)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    static sv_proc procs[2 * COLD_ROUNDS]; /* each round's worker and its sandbox init */
    size_t n_procs = 0;
    sv_proc prev = {0};
    int64_t start = e2e_now_ms();
    double slowest = 0;
    for (int i = 0; i < COLD_ROUNDS; i++) {
        char name[32], path[96], replica[48], fn[160];
        snprintf(name, sizeof(name), "cold-%d", i);
        if (sv_create(e, name,
                      "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"},"
                      "\"scaling\":{\"maxReplicas\":1}}",
                      dir) != 201)
            FAILF("round %d: create: HTTP %ld: %.300s", i, e->r.status, e->r.body);
        if (!sv_wait_ready(e, name, 5000))
            FAILF("round %d: not Ready: %.500s", i, e->r.body);
        if (jnum(e->r.json, "status.replicas.total") != 0)
            FAILF("round %d: not at zero before the request: %.500s", i, e->r.body);
        snprintf(path, sizeof(path), "/fn/default/%s/round/%d", name, i);
        int64_t t0 = e2e_now_ms();
        if (sv_invoke(e, "GET", path, NULL) != 200)
            FAILF("round %d: the first request got HTTP %ld: %.500s", i, e->r.status, e->r.body);
        double took = (double)(e2e_now_ms() - t0);
        slowest = took > slowest ? took : slowest;
        snprintf(replica, sizeof(replica), "%s-1", name);
        CHECK_STR(jstr(e->r.json, "replica"), replica); /* the new pool's first worker */
        sv_proc worker;
        if (!sv_replica_proc(replica, &worker))
            FAILF("round %d: no process on the host is worker %s", i, replica);
        size_t workers = sv_function_procs(name, NULL, 0);
        if (workers != 1)
            FAILF("round %d: %zu worker processes, not one", i, workers);
        CHECK(worker.pid != prev.pid || worker.start != prev.start); /* a new process */
        prev = worker;
        note_proc(procs, &n_procs, &worker);
        snprintf(fn, sizeof(fn), NS("default") "/functions/%s", name);
        if (REQ("DELETE", fn, DEV_TOKEN, NULL) != 200)
            FAILF("round %d: delete: HTTP %ld: %.300s", i, e->r.status, e->r.body);
    }
    fprintf(stderr, "  %d cold starts in %lld ms (slowest first request %.0f ms)\n", COLD_ROUNDS,
            (long long)(e2e_now_ms() - start), slowest);
    /* Deleted functions leave no process: no worker, no sandbox init. */
    CHECK(sv_wait_procs_gone(procs, n_procs, 5000));
    CHECK_INT(sv_workers(NULL, 0), 0);
}

/* BURST concurrent requests at zero are held until workers are ready, and
 * every one succeeds. */
SV_TEST(burst_from_zero)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(
        sv_create(e, "burst",
                  "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"},"
                  "\"scaling\":{\"minReplicas\":0,\"maxReplicas\":4,\"concurrency\":10,"
                  "\"queueLength\":100}}",
                  dir),
        201);
    if (!sv_wait_ready(e, "burst", 5000))
        FAILF("not Ready: %.500s", e->r.body);
    CHECK_INT(jnum(e->r.json, "status.replicas.total"), 0);

    static sv_call calls[BURST];
    for (int i = 0; i < BURST; i++) {
        calls[i].method = "GET";
        snprintf(calls[i].path, sizeof(calls[i].path), DP_PATH("burst") "/sleep?ms=20&i=%d", i);
    }
    sv_batch *b = sv_batch_start(e->dp_base, calls, BURST);
    CHECK(b != NULL);
    sv_batch_join(b);
    int ok = 0;
    char replicas[BURST][64], replica[64];
    int distinct = 0;
    for (int i = 0; i < BURST; i++) {
        e2e_resp *r = &calls[i].r;
        char want[64];
        snprintf(want, sizeof(want), "/sleep?ms=20&i=%d", i);
        if (r->status == 200 && jstr(r->json, "path") && strcmp(jstr(r->json, "path"), want) == 0 &&
            jstr(r->json, "invocationId") &&
            strcmp(jstr(r->json, "invocationId"), sv_header(r, "X-Funcd-Invocation-Id")) == 0) {
            ok++;
            replica_of(r, replica, sizeof(replica));
            int seen = 0;
            for (int k = 0; k < distinct; k++)
                seen |= strcmp(replicas[k], replica) == 0;
            if (!seen && replica[0])
                snprintf(replicas[distinct++], sizeof(replicas[0]), "%s", replica);
        } else if (ok == i) {
            fprintf(stderr, "  request %d: HTTP %ld: %.300s\n", i, r->status, r->body);
        }
    }
    for (int i = 0; i < BURST; i++)
        e2e_resp_free(&calls[i].r);
    CHECK_INT(ok, BURST);
    fprintf(stderr, "  %d requests from zero served by %d workers\n", BURST, distinct);
    CHECK(distinct >= 1 && distinct <= 4); /* maxReplicas holds */
    int ready, total;
    CHECK(sv_replicas(e, "burst", &ready, &total) == 0);
    CHECK(total >= 1 && total <= 4);
}

/*
 * With concurrency 1, three slow requests need three workers: the pool
 * grows while they are held, then shrinks back to minReplicas once the
 * workers have been idle for idleTimeout.
 */
SV_TEST(scale_out_and_back)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(
        sv_create(e, "scaler",
                  "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"},"
                  "\"scaling\":{\"minReplicas\":1,\"maxReplicas\":3,\"concurrency\":1,"
                  "\"queueLength\":10,\"idleTimeout\":\"300ms\"}}",
                  dir),
        201);
    if (!sv_wait_ready(e, "scaler", 5000))
        FAILF("not Ready: %.500s", e->r.body);
    if (!sv_wait_replicas(e, "scaler", 1, 1, 5000))
        FAILF("minReplicas 1 not running: %.500s", e->r.body);

    sv_call calls[3];
    memset(calls, 0, sizeof(calls));
    for (int i = 0; i < 3; i++) {
        calls[i].method = "GET";
        snprintf(calls[i].path, sizeof(calls[i].path), DP_PATH("scaler") "/sleep?ms=1500");
    }
    sv_batch *b = sv_batch_start(e->dp_base, calls, 3);
    CHECK(b != NULL);
    int seen = 0;
    int grew = sv_wait_total(e, "scaler", 2, 100, 1400, &seen);
    size_t done_then = sv_batch_done(b);
    int grew_to_3 = grew && sv_wait_total(e, "scaler", 3, 3, 1000, &seen);
    sv_batch_join(b);
    int64_t last_done = 0;
    int ok = 0;
    char replicas[3][64];
    for (int i = 0; i < 3; i++) {
        ok += calls[i].r.status == 200;
        replica_of(&calls[i].r, replicas[i], sizeof(replicas[i]));
        if (calls[i].done_ms > last_done)
            last_done = calls[i].done_ms;
        e2e_resp_free(&calls[i].r);
    }
    CHECK(grew);
    CHECK_INT(done_then, 0); /* it grew while every request was still held */
    CHECK(grew_to_3);
    CHECK_INT(ok, 3);
    CHECK(replicas[0][0] && replicas[1][0] && replicas[2][0]);
    CHECK(strcmp(replicas[0], replicas[1]) != 0 && strcmp(replicas[1], replicas[2]) != 0 &&
          strcmp(replicas[0], replicas[2]) != 0); /* one worker each */
    CHECK_INT(seen, 3);                   /* never above maxReplicas */

    if (!sv_wait_total(e, "scaler", 1, 1, 5000, NULL))
        FAILF("did not scale back to minReplicas: %.500s", e->r.body);
    int64_t after = e2e_now_ms() - last_done;
    fprintf(stderr, "  back to 1 replica %lld ms after the last answer\n", (long long)after);
    CHECK(after >= 250); /* not before idleTimeout (300ms, less the answer's trip) */
    CHECK(sv_wait_replicas(e, "scaler", 1, 1, 2000));
    env_sleep_ms(400); /* a further idle period must not go below the minimum */
    int ready = -1, total = -1;
    CHECK(sv_replicas(e, "scaler", &ready, &total) == 0);
    CHECK_INT(total, 1);
    CHECK_INT(ready, 1);
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("scaler") "/again", NULL), 200);
}

/* Idle workers are stopped after idleTimeout: replicas reach zero and the
 * processes are gone (reaped, not zombies). */
SV_TEST(idle_to_zero)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(
        sv_create(e, "idler",
                  "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"},"
                  "\"scaling\":{\"minReplicas\":0,\"maxReplicas\":2,\"concurrency\":1,"
                  "\"idleTimeout\":\"200ms\"}}",
                  dir),
        201);
    if (!sv_wait_ready(e, "idler", 5000))
        FAILF("not Ready: %.500s", e->r.body);
    sv_call calls[2];
    memset(calls, 0, sizeof(calls));
    for (int i = 0; i < 2; i++) {
        calls[i].method = "GET";
        snprintf(calls[i].path, sizeof(calls[i].path), DP_PATH("idler") "/sleep?ms=500");
    }
    sv_batch *b = sv_batch_start(e->dp_base, calls, 2);
    CHECK(b != NULL);
    /* The host processes of both workers, found while they serve (once idle
     * they have only idleTimeout to live). */
    sv_proc workers[4];
    size_t n_workers = 0;
    int64_t deadline = e2e_now_ms() + 5000;
    while ((n_workers = sv_function_procs("idler", workers, 4)) < 2 && sv_batch_done(b) < 2 &&
           e2e_now_ms() < deadline)
        env_sleep_ms(2);
    sv_batch_join(b);
    char served[2][64];
    for (int i = 0; i < 2; i++) {
        replica_of(&calls[i].r, served[i], sizeof(served[i]));
        CHECK_INT(calls[i].r.status, 200);
    }
    for (int i = 0; i < 2; i++)
        e2e_resp_free(&calls[i].r);
    CHECK(served[0][0] && served[1][0]);
    CHECK(strcmp(served[0], served[1]) != 0); /* two workers */
    CHECK_INT(n_workers, 2);
    CHECK((strcmp(workers[0].replica, served[0]) == 0 &&
           strcmp(workers[1].replica, served[1]) == 0) ||
          (strcmp(workers[0].replica, served[1]) == 0 &&
           strcmp(workers[1].replica, served[0]) == 0));
    sv_proc procs[4];
    size_t n_procs = 0;
    for (size_t i = 0; i < n_workers; i++)
        note_proc(procs, &n_procs, &workers[i]);

    int64_t t0 = e2e_now_ms();
    if (!sv_wait_total(e, "idler", 0, 0, 5000, NULL))
        FAILF("replicas did not reach zero: %.500s", e->r.body);
    fprintf(stderr, "  zero replicas %lld ms after the last answer\n",
            (long long)(e2e_now_ms() - t0));
    CHECK_INT(jnum(e->r.json, "status.replicas.ready"), 0);
    CHECK(sv_wait_procs_gone(procs, n_procs, 2000)); /* workers and their inits */
    CHECK_INT(sv_function_procs("idler", NULL, 0), 0);
    /* And from zero again, on a new worker. */
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("idler") "/again", NULL), 200);
    char again[64];
    replica_of(&e->r, again, sizeof(again));
    CHECK(again[0] && strcmp(again, served[0]) != 0 && strcmp(again, served[1]) != 0);
}

int main(int argc, char **argv)
{
    sv_init();
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    SV_RUN(only, ran, cold_starts);
    SV_RUN(only, ran, burst_from_zero);
    SV_RUN(only, ran, scale_out_and_back);
    SV_RUN(only, ran, idle_to_zero);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no test case named %s\n", only);
        return 1;
    }
    return HARNESS_END();
}
