/*
 * Serving, end to end: the worker processes a namespace may have at once
 * (funcd_with_namespace_max_workers, funcd --namespace-max-workers).
 * Functions whose minReplicas sum past the limit start only up to it; a
 * request to a Function with no worker and no place left is 503 naming the
 * limit; another namespace is not held back; and a place given back (a
 * Function deleted, its workers gone) is taken by the Function left short,
 * without a request. The node's limit (funcd_with_max_workers) holds across
 * namespaces.
 */
#include <math.h>

#include "../harness.h"
#include "funcd/funcd.h"
#include "test_serving_common.h"

#define POLL_MS 50
#define LIMIT_TEXT "namespace default has 3 workers, its limit (funcd --namespace-max-workers 3)"

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
    CHECK_CONTAINS(e->r.body, LIMIT_TEXT);
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
    CHECK_CONTAINS(e->r.body, "this node has 2 workers, its limit (funcd --max-workers 2)");
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

int main(int argc, char **argv)
{
    sv_init();
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    SV_RUN(only, ran, namespace_max_workers);
    SV_RUN(only, ran, node_max_workers);
    SV_RUN(only, ran, idle_worker_gives_its_place);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no test case named %s\n", only);
        return 1;
    }
    return HARNESS_END();
}
