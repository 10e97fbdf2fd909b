/*
 * What the platform does with stored objects: the controller's status
 * (observedGeneration, the Ready condition) and the data plane's answers
 * for known and unknown functions, observed over real HTTP.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "env.h"

#define FNS NS("default") "/functions"
#define POLL_MS 3000

static const cJSON *condition(const cJSON *obj, const char *type)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, jget(obj, "status.conditions"))
    {
        const char *t = jstr(c, "type");
        if (t && strcmp(t, type) == 0)
            return c;
    }
    return NULL;
}

typedef struct observed {
    const char *path;
    double generation;
} observed;

/* The object at `path` has status.observedGeneration == generation and a
 * Ready condition; e->r holds it afterwards. */
static int has_observed(env *e, void *arg)
{
    const observed *o = arg;
    return REQ("GET", o->path, DEV_TOKEN, NULL) == 200 &&
           jnum(e->r.json, "status.observedGeneration") == o->generation &&
           condition(e->r.json, "Ready") != NULL;
}

typedef struct dp_want {
    const char *path;
    long status;
} dp_want;

static int dp_is(env *e, void *arg)
{
    const dp_want *w = arg;
    return env_dp(e, "GET", w->path) == w->status;
}

E2E_TEST(controller_writes_status_and_follows_generations)
{
    CHECK_INT(REQ("POST", FNS, DEV_TOKEN, FUNCTION_JSON("hello", "main.handler")), 201);
    observed want = {FNS "/hello", 1};
    if (!env_poll(e, POLL_MS, has_observed, &want))
        FAILF("no status with observedGeneration 1 within %d ms: %.400s", POLL_MS, e->r.body);
    CHECK(jnum(e->r.json, "metadata.generation") == 1);
    const cJSON *ready = condition(e->r.json, "Ready");
    CHECK_STR(jstr(ready, "status"), "False");
    CHECK_STR(jstr(ready, "reason"), "ArtifactFailed"); /* its bundle was never uploaded */
    CHECK(jstr(ready, "message") && *jstr(ready, "message"));
    const char *since = jstr(ready, "lastTransitionTime");
    CHECK(since && strlen(since) >= 20 && since[strlen(since) - 1] == 'Z');
    char first_since[64];
    snprintf(first_since, sizeof(first_since), "%s", since);

    /* A spec change: generation 2, and the controller catches up. */
    CHECK_INT(REQ("PUT", FNS "/hello", DEV_TOKEN, FUNCTION_JSON("hello", "main.other")), 200);
    CHECK(jnum(e->r.json, "metadata.generation") == 2);
    want.generation = 2;
    if (!env_poll(e, POLL_MS, has_observed, &want))
        FAILF("observedGeneration did not follow to 2: %.400s", e->r.body);
    ready = condition(e->r.json, "Ready");
    CHECK_STR(jstr(ready, "reason"), "ArtifactFailed"); /* its bundle was never uploaded */
    /* Still False: no transition, so the time it last changed is kept. */
    CHECK_STR(jstr(ready, "lastTransitionTime"), first_since);

    /* A user's PUT keeps the status the controller wrote. */
    CHECK_INT(REQ("PUT", FNS "/hello", DEV_TOKEN,
                  "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
                  "\"hello\",\"labels\":{\"a\":\"b\"}},\"spec\":{\"runtime\":\"python3\","
                  "\"handler\":\"main.other\",\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"}},"
                  "\"status\":{\"observedGeneration\":99}}"),
              200);
    CHECK(jnum(e->r.json, "metadata.generation") == 2);
    CHECK(jnum(e->r.json, "status.observedGeneration") == 2);
}

E2E_TEST(controller_handles_each_function)
{
    char body[512], path[256];
    for (int i = 0; i < 10; i++) {
        snprintf(body, sizeof(body),
                 "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
                 "\"fn%d\"},\"spec\":{\"runtime\":\"native\",\"handler\":\"bin/fn\",\"source\":"
                 "{\"bundle\":\"" NO_SUCH_BUNDLE "\"}}}",
                 i);
        CHECK_INT(REQ("POST", FNS, DEV_TOKEN, body), 201);
    }
    for (int i = 0; i < 10; i++) {
        snprintf(path, sizeof(path), FNS "/fn%d", i);
        observed want = {path, 1};
        if (!env_poll(e, POLL_MS, has_observed, &want))
            FAILF("fn%d has no status: %.300s", i, e->r.body);
    }
    /* Other kinds are not the Function controller's business. */
    CHECK_INT(REQ("POST", NS("default") "/functionconfigs", DEV_TOKEN,
                  FUNCTIONCONFIG_JSON("fc", "img")),
              201);
    CHECK_INT(REQ("GET", NS("default") "/functionconfigs/fc", DEV_TOKEN, NULL), 200);
    CHECK(jget(e->r.json, "status") == NULL);
}

/* A store that already holds a Function when the platform starts. */
static funcd_store *store_with_a_function(void)
{
    static const char key[] = "/registry/functions/default/early";
    static const char value[] =
        "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":\"early\","
        "\"namespace\":\"default\",\"uid\":\"5b0f7e4c-3a1d-4d7e-9a43-0c1f2e3d4b5a\","
        "\"generation\":1,\"creationTimestamp\":\"2026-01-01T00:00:00Z\"},\"spec\":{\"runtime\":"
        "\"python3\",\"handler\":\"main.handler\",\"source\":{\"path\":\"/srv/early\"}}}";
    funcd_store *s = tiny_history_store(0);
    if (s && s->put(s, key, value, strlen(value), FUNCD_STORE_ABSENT, NULL) < 0) {
        s->free(s);
        return NULL;
    }
    return s;
}

E2E_TEST_WITH(controller_reconciles_objects_that_predate_it, store_with_a_function())
{
    CHECK_INT(REQ("GET", FNS "/early", DEV_TOKEN, NULL), 200);
    observed want = {FNS "/early", 1};
    if (!env_poll(e, POLL_MS, has_observed, &want))
        FAILF("the existing function got no status: %.300s", e->r.body);
    /* ... and the data plane knows it. */
    dp_want known = {"/fn/default/early/", 503};
    if (!env_poll(e, POLL_MS, dp_is, &known))
        FAILF("the existing function is not routed: HTTP %ld", e->r.status);
}

/* ---- data plane ------------------------------------------------------------ */

#define CHECK_INVOCATION_ID(out)                                                                   \
    do {                                                                                           \
        if (!e2e_resp_header(&e->r, "X-Funcd-Invocation-Id", (out), sizeof(out)))                  \
            FAILF("no X-Funcd-Invocation-Id header: %.300s", e->r.headers);                        \
        CHECK_INT(strlen(out), 36);                                                                \
    } while (0)

E2E_TEST(data_plane_answers_404_503_and_healthz)
{
    char id1[64], id2[64], retry[32];
    CHECK_INT(env_dp(e, "GET", "/healthz"), 200);

    CHECK_INT(env_dp(e, "GET", "/fn/default/nope/x"), 404);
    CHECK_STATUS(404, "NotFound", NULL);
    CHECK_INVOCATION_ID(id1);

    CHECK_INT(REQ("POST", FNS, DEV_TOKEN, FUNCTION_JSON("hello", "main.handler")), 201);
    dp_want known = {"/fn/default/hello/x", 503};
    if (!env_poll(e, POLL_MS, dp_is, &known))
        FAILF("the data plane never learned the function: HTTP %ld %.300s", e->r.status,
              e->r.body);
    CHECK_STATUS(503, "ServiceUnavailable", NULL);
    CHECK(e2e_resp_header(&e->r, "Retry-After", retry, sizeof(retry)) != NULL);
    CHECK(atoi(retry) > 0);
    CHECK_INVOCATION_ID(id1);
    CHECK_INT(env_dp(e, "GET", "/fn/default/hello/x"), 503);
    CHECK_INVOCATION_ID(id2);
    CHECK(strcmp(id1, id2) != 0);

    /* Any method, any rest of the path, with or without a trailing slash. */
    CHECK_INT(e2e_http_do(e->dp, "POST", "/fn/default/hello/deep/path?q=1", NULL, "{\"x\":1}",
                          &e->r),
              503);
    CHECK_STATUS(503, "ServiceUnavailable", NULL);
    CHECK_INT(env_dp(e, "GET", "/fn/default/hello"), 503);

    /* Not a function path at all. */
    CHECK_INT(env_dp(e, "GET", "/other"), 404);
    CHECK_STATUS(404, "NotFound", NULL);
    CHECK_INT(env_dp(e, "GET", "/fn/default"), 404);
    CHECK_STATUS(404, "NotFound", NULL);
    CHECK_INT(env_dp(e, "GET", "/fn/"), 404);
    CHECK_STATUS(404, "NotFound", NULL);

    /* Deleting the function takes it off the data plane. */
    CHECK(env_settle(e, FNS "/hello"));
    CHECK_INT(REQ("DELETE", FNS "/hello", DEV_TOKEN, NULL), 200);
    dp_want gone = {"/fn/default/hello/x", 404};
    if (!env_poll(e, POLL_MS, dp_is, &gone))
        FAILF("the deleted function is still routed: HTTP %ld", e->r.status);
    CHECK_STATUS(404, "NotFound", NULL);
}

E2E_TEST(data_plane_routes_by_namespace_and_name)
{
    CHECK_INT(REQ("POST", NS("team-b") "/functions", TEAM_B_TOKEN, FUNCTION_JSON("hello", "m.h")),
              201);
    dp_want known = {"/fn/team-b/hello/", 503};
    if (!env_poll(e, POLL_MS, dp_is, &known))
        FAILF("team-b/hello never routed: HTTP %ld", e->r.status);
    CHECK_INT(env_dp(e, "GET", "/fn/default/hello/"), 404);
    CHECK_INT(env_dp(e, "GET", "/fn/team-b/hell/"), 404);
    CHECK_INT(env_dp(e, "GET", "/fn/team-b/hello2/"), 404);
    CHECK_INT(env_dp(e, "GET", "/fn/team/hello/"), 404);
}

int main(void)
{
    e2e_client_global_init();
    RUN_ISOLATED(controller_writes_status_and_follows_generations);
    RUN_ISOLATED(controller_handles_each_function);
    RUN_ISOLATED(controller_reconciles_objects_that_predate_it);
    RUN_ISOLATED(data_plane_answers_404_503_and_healthz);
    RUN_ISOLATED(data_plane_routes_by_namespace_and_name);
    e2e_client_global_cleanup();
    return HARNESS_END();
}
