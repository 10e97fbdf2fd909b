/*
 * Serving, end to end: the worker processes a namespace may have at once
 * (funcd_with_namespace_max_workers, funcd --namespace-max-workers).
 * Functions whose minReplicas sum past the limit start only up to it; a
 * request to a Function with no worker and no place left is 503 naming the
 * limit; another namespace is not held back; and a place given back (a
 * Function deleted, its workers gone) is taken by the Function left short,
 * without a request. The node's limit (funcd_with_max_workers) holds across
 * namespaces. The 503 names the limit but gives no count (anyone may call an
 * open Function); the status, which the tenant reads, has the counts. An
 * update of a Function at the limit waits for its old workers' places, and
 * so does a new version's handler load check.
 */
#include <math.h>
#include <stdarg.h>

#include "../harness.h"
#include "funcd/funcd.h"
#include "test_serving_common.h"

#define POLL_MS 50
#define LIMIT_TEXT "namespace default has 3 workers, its limit (funcd --namespace-max-workers 3)"
#define LIMIT_NAME "the worker limit of namespace default (funcd --namespace-max-workers)"

/* status.replicas.total of Function `name` in `ns` (-1: none yet). */
static int total_in(env *e, const char *ns, const char *name)
{
    char path[256];
    snprintf(path, sizeof(path), API "/namespaces/%s/functions/%s", ns, name);
    if (env_req(e, "GET", path, ADMIN_TOKEN, NULL) != 200)
        return -1;
    double t = jnum(e->r.json, "status.replicas.total");
    return isnan(t) ? -1 : (int)t;
}

/* Waits until a's and b's totals add up to `sum` (and each is known). */
static int wait_sum(env *e, int sum, int timeout_ms, int *ta, int *tb)
{
    int64_t deadline = e2e_now_ms() + timeout_ms;
    for (;;) {
        *ta = total_in(e, "default", "a");
        *tb = total_in(e, "default", "b");
        if (*ta >= 0 && *tb >= 0 && *ta + *tb == sum)
            return 1;
        if (e2e_now_ms() >= deadline)
            return 0;
        env_sleep_ms(POLL_MS);
    }
}

/* The Ready condition's message of Function `name` in "default" ("" when none). */
static const char *ready_message(env *e, const char *name, char *out, size_t len)
{
    char path[256];
    snprintf(path, sizeof(path), NS("default") "/functions/%s", name);
    out[0] = '\0';
    if (env_req(e, "GET", path, ADMIN_TOKEN, NULL) == 200) {
        const char *m = jstr(sv_ready_condition(e->r.json), "message");
        snprintf(out, len, "%s", m ? m : "");
    }
    return out;
}

SV_TEST_WITH(namespace_max_workers, funcd_with_namespace_max_workers(3), NULL)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    const char *spec = "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"},"
                       "\"scaling\":{\"minReplicas\":%d,\"maxReplicas\":%d}}";
    CHECK_INT(sv_create(e, "a", spec, dir, 2, 4), 201);
    CHECK_INT(sv_create(e, "b", spec, dir, 2, 4), 201);
    int ta = 0, tb = 0;
    if (!wait_sum(e, 3, 20000, &ta, &tb))
        FAILF("a and b have %d and %d workers, not 3 together", ta, tb);
    env_sleep_ms(1500); /* and no more come */
    CHECK(wait_sum(e, 3, 0, &ta, &tb));
    CHECK_INT(sv_workers(NULL, 0), 3);
    const char *short_one = ta < 2 ? "a" : "b";
    char msg[1024];
    int64_t deadline = e2e_now_ms() + 10000;
    while (!strstr(ready_message(e, short_one, msg, sizeof(msg)), LIMIT_TEXT) &&
           e2e_now_ms() < deadline)
        env_sleep_ms(POLL_MS);
    CHECK_CONTAINS(msg, LIMIT_TEXT);
    CHECK_CONTAINS(msg, "minReplicas 2");

    /* c has no worker, and none may start: 503 naming the limit, at once. */
    CHECK_INT(sv_create(e, "c", spec, dir, 0, 1), 201);
    CHECK(sv_wait_ready(e, "c", 10000));
    int64_t t0 = e2e_now_ms();
    sv_invoke(e, "GET", DP_PATH("c") "/x", NULL);
    CHECK_DP_STATUS(503, "ServiceUnavailable");
    CHECK_CONTAINS(e->r.body, LIMIT_NAME);
    CHECK(!strstr(e->r.body, "3 workers")); /* no count to the caller (review18 L-3) */
    CHECK(sv_header(&e->r, "Retry-After")[0]);
    CHECK(e2e_now_ms() - t0 < 5000); /* not the function's timeout */
    CHECK_INT(sv_workers(NULL, 0), 3);

    /* Another namespace has places of its own. */
    char body[768];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":\"o\"},"
             "\"spec\":{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"},"
             "\"scaling\":{\"minReplicas\":1,\"maxReplicas\":1}}}",
             dir);
    CHECK_INT(REQ("POST", NS("other") "/functions", ADMIN_TOKEN, body), 201);
    deadline = e2e_now_ms() + 20000;
    while (total_in(e, "other", "o") != 1 && e2e_now_ms() < deadline)
        env_sleep_ms(POLL_MS);
    CHECK_INT(total_in(e, "other", "o"), 1);
    CHECK_INT(sv_invoke(e, "GET", "/fn/other/o/x", NULL), 200);

    /* a goes: once its workers exited, b takes their places up to its 2. */
    CHECK_INT(REQ("DELETE", FN_PATH("a"), ADMIN_TOKEN, NULL), 200);
    deadline = e2e_now_ms() + 20000;
    while ((tb = total_in(e, "default", "b")) != 2 && e2e_now_ms() < deadline)
        env_sleep_ms(POLL_MS);
    CHECK_INT(tb, 2);
    /* and c, asked again, gets the last place. */
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("c") "/x", NULL), 200);
    CHECK_INT(sv_workers(NULL, 0), 4); /* b's 2, c's 1, o's 1 */
}

/* The node's limit holds across namespaces: with 2 places, default's
 * Function of minReplicas 2 and another namespace's leave a request to the
 * third with none: 503 naming the node's limit. */
SV_TEST_WITH(node_max_workers, funcd_with_max_workers(2), NULL)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(sv_create(e, "a", "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":"
                                "{\"path\":\"%s\"},\"scaling\":{\"minReplicas\":2,\"maxReplicas\":2}}",
                        dir),
              201);
    int64_t deadline = e2e_now_ms() + 20000;
    while (total_in(e, "default", "a") != 2 && e2e_now_ms() < deadline)
        env_sleep_ms(POLL_MS);
    CHECK_INT(total_in(e, "default", "a"), 2);
    char body[768];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":\"o\"},"
             "\"spec\":{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"},"
             "\"scaling\":{\"maxReplicas\":1}}}",
             dir);
    CHECK_INT(REQ("POST", NS("other") "/functions", ADMIN_TOKEN, body), 201);
    deadline = e2e_now_ms() + 10000;
    while (total_in(e, "other", "o") != 0 && e2e_now_ms() < deadline)
        env_sleep_ms(POLL_MS);
    sv_invoke(e, "GET", "/fn/other/o/x", NULL);
    CHECK_DP_STATUS(503, "ServiceUnavailable");
    CHECK_CONTAINS(e->r.body, "the worker limit of this node (funcd --max-workers)");
    CHECK(!strstr(e->r.body, "2 workers")); /* other tenants' load: not the caller's business */
    CHECK_INT(sv_workers(NULL, 0), 2);
    /* a goes: once its workers exited, o may start one. */
    CHECK_INT(REQ("DELETE", FN_PATH("a"), ADMIN_TOKEN, NULL), 200);
    deadline = e2e_now_ms() + 20000;
    while (sv_invoke(e, "GET", "/fn/other/o/x", NULL) != 200 && e2e_now_ms() < deadline)
        env_sleep_ms(100);
    CHECK_INT(e->r.status, 200);
}

/* A worker idle above its Function's minimum gives its place to another
 * Function of the namespace that has none (review18 M-4: b answered 503 for
 * as long as a's worker stayed, its idle time being 5 minutes). */
SV_TEST_WITH(idle_worker_gives_its_place, funcd_with_namespace_max_workers(1), NULL)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    const char *spec = "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"},"
                       "\"scaling\":{\"maxReplicas\":1,\"idleTimeout\":\"5m\"}}";
    CHECK_INT(sv_create(e, "a", spec, dir), 201);
    CHECK_INT(sv_create(e, "b", spec, dir), 201);
    CHECK(sv_wait_ready(e, "a", 10000));
    CHECK(sv_wait_ready(e, "b", 10000));
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("a") "/x", NULL), 200);
    CHECK_INT(sv_workers(NULL, 0), 1);
    /* b has no worker and the namespace's one place is a's: a's worker,
     * idle now, goes, and b's request is answered. */
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("b") "/x", NULL), 200);
    /* and back: a asks, b's worker goes */
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("a") "/x", NULL), 200);
    CHECK(sv_workers(NULL, 0) <= 1);
}

/* PUTs Function `name` of "default" with the spec `spec_fmt` formats to. */
static long replace_fn(env *e, const char *name, const char *spec_fmt, ...)
    __attribute__((format(printf, 3, 4)));
static long replace_fn(env *e, const char *name, const char *spec_fmt, ...)
{
    char spec[1024], body[1400], path[256];
    va_list ap;
    va_start(ap, spec_fmt);
    vsnprintf(spec, sizeof(spec), spec_fmt, ap);
    va_end(ap);
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":"
             "{\"name\":\"%s\"},\"spec\":%s}",
             name, spec);
    snprintf(path, sizeof(path), FN_PATH("%s"), name);
    return env_req(e, "PUT", path, ADMIN_TOKEN, body);
}

/* An update of a Function in a namespace at its limit: the new version's
 * worker may start only once the old one has exited (here it ignores
 * SIGTERM, so after its 10 s of grace), and meanwhile its requests wait for
 * that place instead of 503 after 3 s; the place is the new version's, and
 * the namespace never has more than its 2 workers (review18 M-3). */
SV_TEST_WITH(update_at_the_limit, funcd_with_namespace_max_workers(2), NULL)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    const char *spec = "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":"
                       "\"%s\"},\"env\":{\"FIXTURE_IGNORE_TERM\":\"1\",\"GREETING\":\"%s\"},"
                       "\"scaling\":{\"minReplicas\":1,\"maxReplicas\":1}}";
    CHECK_INT(sv_create(e, "a", spec, dir, "one"), 201);
    CHECK_INT(sv_create(e, "b", spec, dir, "b"), 201);
    CHECK(sv_wait_replicas(e, "a", 1, 1, 20000));
    CHECK(sv_wait_replicas(e, "b", 1, 1, 20000));
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("a") "/x", NULL), 200);
    CHECK_INT(replace_fn(e, "a", spec, dir, "two"), 200);
    int64_t t0 = e2e_now_ms();
    unsigned ok = 0, limited = 0, other = 0;
    size_t most = 0;
    int updated = 0;
    char last[512] = "";
    while (e2e_now_ms() - t0 < 12000 || (!updated && e2e_now_ms() - t0 < 25000)) {
        long st = sv_invoke(e, "GET", DP_PATH("a") "/x", NULL);
        if (st == 200) {
            ok++;
            updated |= strstr(e->r.body, "\"greeting\":\"two\"") != NULL;
        } else {
            snprintf(last, sizeof(last), "%ld %.400s", st, e->r.body);
            if (st == 503)
                limited++;
            else
                other++;
        }
        size_t n = sv_workers(NULL, 0);
        if (n > most)
            most = n;
        env_sleep_ms(POLL_MS);
    }
    if (limited || other)
        FAILF("%u answers 503 and %u other failures (%u fine) during the update; last: %s",
              limited, other, ok, last);
    CHECK(updated);
    CHECK(most <= 2);
}

/* A new python3 version, whose handler load check needs a worker, in a
 * namespace at its limit: the check waits for a place (Ready=False, reason
 * WorkerLimit), and runs once one comes back. It was failed after 3 s, and
 * the version, never checked, was Ready for good (review18 M-3). */
SV_TEST_WITH(load_check_waits_for_a_place, funcd_with_namespace_max_workers(1), NULL)
{
    char native[256], bad[256];
    CHECK(sv_fixture("native", native, sizeof(native)) == 0);
    CHECK(sv_code_dir(bad, sizeof(bad), "main.py",
                      "import funcd_no_such_module_here\n\ndef handler(req):\n    return 'x'\n") ==
          0);
    CHECK_INT(sv_create(e, "x", "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":"
                                "{\"path\":\"%s\"},\"scaling\":{\"minReplicas\":1}}",
                        native),
              201);
    CHECK(sv_wait_replicas(e, "x", 1, 1, 20000));
    CHECK_INT(sv_create(e, "bad", "{\"runtime\":\"python3\",\"handler\":\"main.handler\","
                                  "\"source\":{\"path\":\"%s\"}}",
                        bad),
              201);
    /* Well past FUNCD_POOL_BUDGET_WAIT_MS, it is never Ready. */
    int64_t t0 = e2e_now_ms();
    const char *reason = NULL;
    char msg[1024] = "";
    while (e2e_now_ms() - t0 < 6000) {
        CHECK_INT(env_req(e, "GET", FN_PATH("bad"), ADMIN_TOKEN, NULL), 200);
        const cJSON *c = sv_ready_condition(e->r.json);
        if (c && strcmp(jstr(c, "status") ? jstr(c, "status") : "", "True") == 0)
            FAILF("Ready, never checked: %.1500s", e->r.body);
        reason = c ? jstr(c, "reason") : NULL;
        snprintf(msg, sizeof(msg), "%s", c && jstr(c, "message") ? jstr(c, "message") : "");
        env_sleep_ms(POLL_MS);
    }
    CHECK_STR(reason ? reason : "", "WorkerLimit");
    CHECK_CONTAINS(msg, "namespace default has 1 workers, its limit");
    /* x goes: the check gets its place, and finds the handler broken. */
    CHECK_INT(REQ("DELETE", FN_PATH("x"), ADMIN_TOKEN, NULL), 200);
    t0 = e2e_now_ms();
    for (;;) {
        CHECK_INT(env_req(e, "GET", FN_PATH("bad"), ADMIN_TOKEN, NULL), 200);
        const cJSON *c = sv_ready_condition(e->r.json);
        reason = c ? jstr(c, "reason") : NULL;
        if ((reason && strcmp(reason, "HandlerLoadFailed") == 0) || e2e_now_ms() - t0 > 20000)
            break;
        env_sleep_ms(POLL_MS);
    }
    if (!reason || strcmp(reason, "HandlerLoadFailed") != 0)
        FAILF("not HandlerLoadFailed: %.1500s", e->r.body);
}

int main(int argc, char **argv)
{
    sv_init();
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    SV_RUN(only, ran, namespace_max_workers);
    SV_RUN(only, ran, node_max_workers);
    SV_RUN(only, ran, idle_worker_gives_its_place);
    SV_RUN(only, ran, update_at_the_limit);
    if (!only || strcmp(only, "load_check_waits_for_a_place") == 0) {
        if (sv_have_interpreters()) {
            SV_RUN(only, ran, load_check_waits_for_a_place);
        } else if (only) {
            e2e_client_global_cleanup();
            return 77; /* meson: skipped */
        }
    }
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no test case named %s\n", only);
        return 1;
    }
    return HARNESS_END();
}
