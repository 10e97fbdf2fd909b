/*
 * Async invocation end to end (docs/eventing.md): POST /async/fn/... -> 202
 * with an id and a Location -> the invocation Succeeded with the function's
 * answer; a failing function dead-lettered after its attempts, replayed
 * once fixed, purged; the result POSTed to X-Callback-Url (a loopback
 * server in the test); the function's edge authentication on /async/; the
 * queue's caps, and the share of them anonymous callers get, apart from the
 * tenant's own callers and sources (a bus message waits for room).
 */
#include "../harness.h"
#include "test_serving_common.h"
#include "util/misc.h"

#include <arpa/inet.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define NATIVE_SPEC(extra)                                                                         \
    "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"}" extra "}"

/* POSTs `body` to /async/fn/default/{fn}{rest} with `headers`; e->r has the answer. */
static long post_async(env *e, const char *fn_rest, const char *token, const char *const *headers,
                       const char *body)
{
    char path[512];
    snprintf(path, sizeof(path), "/async/fn/default/%s", fn_rest);
    return e2e_http_send(e->dp, "POST", path, token, headers, body, body ? strlen(body) : 0,
                         &e->r);
}

/* The native fixture as Function "echo", Ready; -1 when it is not. */
static int ready_echo(env *e)
{
    char dir[256];
    return sv_fixture("native", dir, sizeof(dir)) == 0 &&
                   sv_create(e, "echo", NATIVE_SPEC(""), dir) == 201 &&
                   sv_wait_ready(e, "echo", 10000)
               ? 0
               : -1;
}

/* Polls the invocation at `location` until its state is `state` (30 s at
 * most); 1 when it is, e->r holds the last GET. */
static int wait_state(env *e, const char *location, const char *state)
{
    int64_t end = e2e_now_ms() + 30000;
    while (e2e_now_ms() < end) {
        if (REQ("GET", location, DEV_TOKEN, NULL) == 200 &&
            jstr(e->r.json, "status.state") && strcmp(jstr(e->r.json, "status.state"), state) == 0)
            return 1;
        env_sleep_ms(100);
    }
    return 0;
}

SV_TEST(async_succeeds)
{
    if (ready_echo(e) < 0)
        FAILF("echo is not Ready: %.500s", e->r.body);
    static const char *const h[] = {"Content-Type: text/plain", NULL};
    CHECK_INT(post_async(e, "echo/hello?x=1", NULL, h, "the body"), 202);
    char id[128], location[512];
    snprintf(id, sizeof(id), "%s", sv_header(&e->r, "X-Funcd-Invocation-Id"));
    snprintf(location, sizeof(location), "%s", sv_header(&e->r, "Location"));
    CHECK_INT((int)strlen(id), 36);
    char want[512];
    snprintf(want, sizeof(want), NS("default") "/invocations/%s", id);
    CHECK_STR(location, want);
    CHECK_STR(jstr(e->r.json, "status.state"), "Pending");
    if (!wait_state(e, location, "Succeeded"))
        FAILF("not Succeeded: %.500s", e->r.body);
    CHECK_INT((int)jnum(e->r.json, "status.attempts"), 1);
    CHECK_INT((int)jnum(e->r.json, "status.statusCode"), 200);
    CHECK_STR(jstr(e->r.json, "spec.function"), "echo");
    CHECK_STR(jstr(e->r.json, "status.response.contentType"), "application/json");
    cJSON *answer = env_keep(e, cJSON_Parse(jstr(e->r.json, "status.response.body")));
    CHECK(answer != NULL);
    CHECK_STR(jstr(answer, "invocationId"), id);
    CHECK_STR(jstr(answer, "path"), "/hello?x=1");
    CHECK_STR(jstr(answer, "method"), "POST");
    CHECK_STR(jstr(answer, "body"), "the body");
    /* The list shows it; another namespace's token sees nothing of it. */
    CHECK_INT(REQ("GET", NS("default") "/invocations", VIEWER_TOKEN, NULL), 200);
    CHECK_STR(jstr(e->r.json, "kind"), "InvocationList");
    CHECK_INT(cJSON_GetArraySize(jget(e->r.json, "items")), 1);
    CHECK_INT(REQ("GET", location, TEAM_B_TOKEN, NULL), 403);
    CHECK_INT(REQ("GET", NS("default") "/invocations/no-such-id", DEV_TOKEN, NULL), 404);
    /* Nothing to run: 404, and nothing queued. */
    CHECK_INT(post_async(e, "nobody/x", NULL, NULL, "x"), 404);
    CHECK_INT(post_async(e, "", NULL, NULL, "x"), 404);
}

/* Default delivery: three attempts, then the dead-letter queue; fixed and
 * replayed it succeeds; a dead letter can be purged. */
SV_TEST(deadletter_replay_purge)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(sv_create(e, "broken", NATIVE_SPEC(",\"env\":{\"FIXTURE_FAIL\":\"503\"}"), dir),
              201);
    if (!sv_wait_ready(e, "broken", 10000))
        FAILF("not Ready: %.500s", e->r.body);
    char id[2][128], location[2][512];
    for (int i = 0; i < 2; i++) {
        CHECK_INT(post_async(e, "broken/", NULL, NULL, "payload"), 202);
        snprintf(id[i], sizeof(id[i]), "%s", sv_header(&e->r, "X-Funcd-Invocation-Id"));
        snprintf(location[i], sizeof(location[i]), "%s", sv_header(&e->r, "Location"));
    }
    for (int i = 0; i < 2; i++) {
        if (!wait_state(e, location[i], "DeadLettered"))
            FAILF("not DeadLettered: %.500s", e->r.body);
        CHECK_INT((int)jnum(e->r.json, "status.attempts"), 3);
        CHECK_INT((int)jnum(e->r.json, "status.statusCode"), 503);
    }
    CHECK_INT(REQ("GET", NS("default") "/deadletters", VIEWER_TOKEN, NULL), 200);
    CHECK_STR(jstr(e->r.json, "kind"), "DeadLetterList");
    CHECK_INT(cJSON_GetArraySize(jget(e->r.json, "items")), 2);
    CHECK_INT((int)jnum(e->r.json, "metadata.dropped"), 0);
    /* A viewer may not replay or purge. */
    char path[600];
    snprintf(path, sizeof(path), NS("default") "/deadletters/%s/replay", id[0]);
    CHECK_INT(REQ("POST", path, VIEWER_TOKEN, ""), 403);
    /* Fixed, then replayed. */
    CHECK(env_settle(e, FN_PATH("broken")));
    char spec[1024];
    snprintf(spec, sizeof(spec),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"broken\"},\"spec\":" NATIVE_SPEC("") "}",
             dir);
    CHECK_INT(REQ("PUT", FN_PATH("broken"), ADMIN_TOKEN, spec), 200);
    if (!sv_wait_ready(e, "broken", 10000))
        FAILF("not Ready after the fix: %.500s", e->r.body);
    CHECK_INT(REQ("POST", path, DEV_TOKEN, ""), 202);
    if (!wait_state(e, location[0], "Succeeded"))
        FAILF("not Succeeded after the replay: %.500s", e->r.body);
    CHECK_INT((int)jnum(e->r.json, "status.attempts"), 1);
    CHECK(jstr(e->r.json, "status.replayTime") != NULL);
    CHECK_INT(REQ("POST", path, DEV_TOKEN, ""), 404); /* it left the queue */
    /* The other one is purged. */
    snprintf(path, sizeof(path), NS("default") "/deadletters/%s", id[1]);
    CHECK_INT(REQ("DELETE", path, DEV_TOKEN, NULL), 200);
    CHECK_INT(REQ("DELETE", path, DEV_TOKEN, NULL), 404);
    CHECK_INT(REQ("GET", NS("default") "/deadletters", DEV_TOKEN, NULL), 200);
    CHECK_INT(cJSON_GetArraySize(jget(e->r.json, "items")), 0);
}

/* A broken function's invocation, dead-lettered after its three attempts;
 * its id in `id`. 1 when it is. */
static int dead_letter_one(env *e, char id[128])
{
    char location[512];
    if (post_async(e, "broken/", NULL, NULL, "payload") != 202)
        return 0;
    snprintf(id, 128, "%s", sv_header(&e->r, "X-Funcd-Invocation-Id"));
    snprintf(location, sizeof(location), "%s", sv_header(&e->r, "Location"));
    return wait_state(e, location, "DeadLettered");
}

static int make_broken(env *e)
{
    char dir[256];
    if (sv_fixture("native", dir, sizeof(dir)) != 0 ||
        sv_create(e, "broken", NATIVE_SPEC(",\"env\":{\"FIXTURE_FAIL\":\"503\"}"), dir) != 201)
        return -1;
    return sv_wait_ready(e, "broken", 10000) ? 0 : -1;
}

/* Whether the dead letters listed are exactly `ids` (n of them). */
static int dlq_is(env *e, char ids[][128], int n)
{
    if (REQ("GET", NS("default") "/deadletters", DEV_TOKEN, NULL) != 200 ||
        cJSON_GetArraySize(jget(e->r.json, "items")) != n)
        return 0;
    for (int i = 0; i < n; i++) {
        int found = 0;
        const cJSON *item;
        cJSON_ArrayForEach(item, jget(e->r.json, "items"))
        {
            const char *name = jstr(item, "metadata.name");
            found |= name && strcmp(name, ids[i]) == 0;
        }
        if (!found)
            return 0;
    }
    return 1;
}

/* --dlq-max-entries 2: a namespace keeps its two newest dead letters; the
 * older ones are dropped and counted in the list's metadata.dropped. */
SV_TEST_WITH(dlq_cap_drops_the_oldest, funcd_with_delivery_retention(0, 0, 2), NULL)
{
    CHECK(make_broken(e) == 0);
    char id[4][128];
    for (int i = 0; i < 4; i++) {
        if (!dead_letter_one(e, id[i]))
            FAILF("invocation %d not DeadLettered: %.500s", i, e->r.body);
        if (i < 2)
            CHECK(dlq_is(e, id, i + 1)); /* under the cap: all kept */
    }
    if (!dlq_is(e, id + 2, 2))
        FAILF("want the two newest dead letters %s and %s: %.800s", id[2], id[3], e->r.body);
    CHECK_INT((int)jnum(e->r.json, "metadata.dropped"), 2);
    /* The dropped ones are gone for replay and purge too. */
    char path[600];
    snprintf(path, sizeof(path), NS("default") "/deadletters/%s/replay", id[0]);
    CHECK_INT(REQ("POST", path, DEV_TOKEN, ""), 404);
    snprintf(path, sizeof(path), NS("default") "/deadletters/%s", id[1]);
    CHECK_INT(REQ("DELETE", path, DEV_TOKEN, NULL), 404);
}

static int dlq_empty(env *e, void *arg)
{
    (void)arg;
    return REQ("GET", NS("default") "/deadletters", DEV_TOKEN, NULL) == 200 &&
           cJSON_IsArray(jget(e->r.json, "items")) &&
           cJSON_GetArraySize(jget(e->r.json, "items")) == 0;
}

/* --dlq-retention 5s: a dead letter is listed, then swept once older than
 * that (the sweep runs at least every half retention). */
SV_TEST_WITH(dlq_retention_sweeps, funcd_with_delivery_retention(0, 5000, 0), NULL)
{
    CHECK(make_broken(e) == 0);
    char id[1][128];
    if (!dead_letter_one(e, id[0]))
        FAILF("not DeadLettered: %.500s", e->r.body);
    int64_t at = e2e_now_ms();
    CHECK(dlq_is(e, id, 1));
    if (!env_poll(e, 30000, dlq_empty, NULL))
        FAILF("the dead letter was not swept: %.800s", e->r.body);
    /* Not before its time (its retention counts from when it was dead-lettered). */
    CHECK(e2e_now_ms() - at >= 4000);
}

/* review17-controlplane H-1: the queue holds at most --queue-max-pending
 * invocations not yet final per namespace: beyond, /async/ answers 429 with
 * Retry-After and a Status naming the cap, before the body is stored; the
 * places come back once the items are final. (Anonymous callers have half
 * of it: 2 of 4.) */
SV_TEST_WITH(queue_full_is_429, funcd_with_queue_limits(4, 0, UINT64_MAX), NULL)
{
    CHECK(make_broken(e) == 0);
    char location[2][512];
    for (int i = 0; i < 2; i++) {
        CHECK_INT(post_async(e, "broken/", NULL, NULL, "payload"), 202);
        snprintf(location[i], sizeof(location[i]), "%s", sv_header(&e->r, "Location"));
    }
    CHECK_INT(post_async(e, "broken/", NULL, NULL, "payload"), 429);
    CHECK_DP_STATUS(429, "TooManyRequests");
    CHECK_CONTAINS(jstr(e->r.json, "message"), "--queue-max-pending 4");
    CHECK(sv_header(&e->r, "Retry-After") && atoi(sv_header(&e->r, "Retry-After")) >= 1);
    CHECK_INT(REQ("GET", NS("default") "/invocations", DEV_TOKEN, NULL), 200);
    CHECK_INT(cJSON_GetArraySize(jget(e->r.json, "items")), 2);
    for (int i = 0; i < 2; i++)
        if (!wait_state(e, location[i], "DeadLettered"))
            FAILF("not DeadLettered: %.500s", e->r.body);
    CHECK_INT(post_async(e, "broken/", NULL, NULL, "payload"), 202);
    /* review18 L-4: a replayed dead letter is Pending again, so it takes a
     * place too (these are anonymous: with the one just queued the share is
     * full at the first replay); the second replay is 429 and stays a dead
     * letter. Before, replays took no place. */
    char path[2][600];
    for (int i = 0; i < 2; i++)
        snprintf(path[i], sizeof(path[i]), NS("default") "/deadletters/%s/replay",
                 strrchr(location[i], '/') + 1);
    CHECK_INT(REQ("POST", path[0], DEV_TOKEN, ""), 202);
    CHECK_INT(REQ("POST", path[1], DEV_TOKEN, ""), 429);
    CHECK_STR(jstr(e->r.json, "reason"), "TooManyRequests");
    CHECK_CONTAINS(jstr(e->r.json, "message"), "--queue-anonymous-share 50 percent");
    CHECK_INT(REQ("GET", NS("default") "/deadletters", DEV_TOKEN, NULL), 200);
    CHECK_INT(cJSON_GetArraySize(jget(e->r.json, "items")), 1);
}

/* An unsigned webhook's events count against the same caps: at the cap the
 * sender is refused (429) and nothing is queued. */
SV_TEST_WITH(webhook_queue_full_is_429, funcd_with_queue_limits(1, 0, UINT64_MAX), NULL)
{
    CHECK(make_broken(e) == 0);
    CHECK_INT(REQ("POST", NS("default") "/eventsources", DEV_TOKEN,
                  "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"EventSource\",\"metadata\":"
                  "{\"name\":\"hook\"},\"spec\":{\"type\":\"webhook\",\"target\":{\"function\":"
                  "\"broken\"},\"delivery\":{\"attempts\":3,\"backoff\":{\"initial\":\"10s\"}}}}"),
              201);
    int64_t end = e2e_now_ms() + 5000;
    while (e2e_http_send(e->dp, "POST", "/events/default/hook", NULL, NULL, "{}", 2, &e->r) == 404 &&
           e2e_now_ms() < end)
        env_sleep_ms(20);
    CHECK_INT(e->r.status, 202);
    CHECK_INT(e2e_http_send(e->dp, "POST", "/events/default/hook", NULL, NULL, "{}", 2, &e->r),
              429);
    CHECK_DP_STATUS(429, "TooManyRequests");
    CHECK_CONTAINS(jstr(e->r.json, "message"), "--queue-max-pending 1");
    CHECK_INT(REQ("GET", NS("default") "/invocations", DEV_TOKEN, NULL), 200);
    CHECK_INT(cJSON_GetArraySize(jget(e->r.json, "items")), 1);
}

/* --queue-max-bytes counts what a namespace keeps: a finished invocation's
 * request and answer stay (the retention), and the next one that would
 * pass the cap (here the anonymous half of it, 48 KiB) is 429 naming it. */
SV_TEST_WITH(queue_bytes_cap_is_429, funcd_with_queue_limits(0, 96 * 1024, UINT64_MAX), NULL)
{
    if (ready_echo(e) < 0)
        FAILF("echo is not Ready: %.500s", e->r.body);
    static char body[20 * 1024 + 1];
    memset(body, 'a', sizeof(body) - 1);
    CHECK_INT(post_async(e, "echo/", NULL, NULL, body), 202);
    char location[512];
    snprintf(location, sizeof(location), "%s", sv_header(&e->r, "Location"));
    if (!wait_state(e, location, "Succeeded"))
        FAILF("not Succeeded: %.500s", e->r.body);
    CHECK_INT(post_async(e, "echo/", NULL, NULL, body), 429);
    CHECK_DP_STATUS(429, "TooManyRequests");
    CHECK_CONTAINS(jstr(e->r.json, "message"), "--queue-max-bytes 98304");
    CHECK_INT(post_async(e, "echo/", NULL, NULL, "small"), 202);
}

/* /async/ takes at most --async-max-body (1 MiB) unless the function's
 * spec.edge.limits.maxBodyBytes says how much it takes. */
SV_TEST(async_body_cap)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(sv_create(e, "echo", NATIVE_SPEC(""), dir), 201);
    CHECK(sv_native(e, "roomy", "\"edge\":{\"limits\":{\"maxBodyBytes\":\"2Mi\"}}") == 0);
    if (!sv_wait_ready(e, "echo", 10000))
        FAILF("not Ready: %.500s", e->r.body);
    static char body[(1u << 20) + 2];
    size_t big = sizeof(body) - 1;
    memset(body, 'a', big);
    CHECK_INT(post_async(e, "echo/", NULL, NULL, body), 413);
    CHECK_DP_STATUS(413, "RequestEntityTooLarge");
    CHECK_CONTAINS(jstr(e->r.json, "message"), "--async-max-body");
    CHECK_INT(post_async(e, "roomy/", NULL, NULL, body), 202);
    body[big - 1] = '\0'; /* 1 MiB: taken */
    CHECK_INT(post_async(e, "echo/", NULL, NULL, body), 202);
}

/* ---- eventing's metrics ------------------------------------------------- */

/* The value of the sample `series` (exactly its name and labels) in the
 * Prometheus text of the last scrape; NAN when absent. */
static double sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return NAN;
}

typedef struct want_sample {
    const char *series;
    double min;
} want_sample;

static int scraped(env *e, void *arg)
{
    const want_sample *w = arg;
    if (REQ("GET", "/metrics", ADMIN_TOKEN, NULL) != 200 || !e->r.body)
        return 0;
    double v = sample(e->r.body, w->series);
    return !isnan(v) && v >= w->min;
}

#define EV_SERIES(src, outcome)                                                                    \
    "funcd_events_total{namespace=\"default\",eventsource=\"" src "\",outcome=\"" outcome "\"}"

/* funcd_events_total by source and outcome, funcd_deadletters per
 * namespace and funcd_async_queue_depth, scraped from GET /metrics. */
SV_TEST(eventing_metrics)
{
    CHECK(make_broken(e) == 0);
    if (ready_echo(e) < 0)
        FAILF("echo is not Ready: %.500s", e->r.body);
    const char *sources[][2] = {
        {"ok-hook", "{\"type\":\"webhook\",\"target\":{\"function\":\"echo\"}}"},
        {"bad-hook", "{\"type\":\"webhook\",\"target\":{\"function\":\"broken\"},\"delivery\":"
                     "{\"attempts\":2,\"backoff\":{\"initial\":\"100ms\",\"max\":\"100ms\"}}}"}};
    for (int i = 0; i < 2; i++) {
        char body[1024], path[128];
        snprintf(body, sizeof(body),
                 "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"EventSource\",\"metadata\":"
                 "{\"name\":\"%s\"},\"spec\":%s}",
                 sources[i][0], sources[i][1]);
        CHECK_INT(REQ("POST", NS("default") "/eventsources", DEV_TOKEN, body), 201);
        snprintf(path, sizeof(path), "/events/default/%s", sources[i][0]);
        int64_t end = e2e_now_ms() + 5000;
        while (e2e_http_send(e->dp, "POST", path, NULL, NULL, "{}", 2, &e->r) == 404 &&
               e2e_now_ms() < end)
            env_sleep_ms(20);
        CHECK_INT(e->r.status, 202);
    }
    want_sample w = {EV_SERIES("ok-hook", "delivered"), 1};
    if (!env_poll(e, 20000, scraped, &w))
        FAILF("no %s: %.3000s", w.series, e->r.body);
    w.series = EV_SERIES("bad-hook", "deadlettered");
    if (!env_poll(e, 20000, scraped, &w))
        FAILF("no %s: %.3000s", w.series, e->r.body);
    CHECK(sample(e->r.body, EV_SERIES("ok-hook", "delivered")) == 1);
    CHECK(sample(e->r.body, EV_SERIES("ok-hook", "retried")) == 0);
    CHECK(sample(e->r.body, EV_SERIES("ok-hook", "deadlettered")) == 0);
    CHECK(sample(e->r.body, EV_SERIES("bad-hook", "delivered")) == 0);
    CHECK(sample(e->r.body, EV_SERIES("bad-hook", "retried")) == 1);
    CHECK(sample(e->r.body, EV_SERIES("bad-hook", "deadlettered")) == 1);
    CHECK(sample(e->r.body, "funcd_deadletters{namespace=\"default\"}") == 1);
    CHECK_CONTAINS(e->r.body, "# TYPE funcd_events_total counter");
    CHECK_CONTAINS(e->r.body, "# TYPE funcd_deadletters gauge");
    CHECK_CONTAINS(e->r.body, "# TYPE funcd_async_queue_depth gauge");
    CHECK(sample(e->r.body, "funcd_async_queue_depth{state=\"waiting\"}") == 0);
    CHECK(sample(e->r.body, "funcd_async_queue_depth{state=\"running\"}") == 0);

    /* An async invocation of the broken function waits between its attempts. */
    CHECK_INT(post_async(e, "broken/", NULL, NULL, "payload"), 202);
    char location[512];
    snprintf(location, sizeof(location), "%s", sv_header(&e->r, "Location"));
    w.series = "funcd_async_queue_depth{state=\"waiting\"}";
    if (!env_poll(e, 10000, scraped, &w))
        FAILF("the async queue never had one waiting: %.3000s", e->r.body);
    if (!wait_state(e, location, "DeadLettered"))
        FAILF("not DeadLettered: %.500s", e->r.body);
    w.series = "funcd_deadletters{namespace=\"default\"}";
    w.min = 2;
    if (!env_poll(e, 10000, scraped, &w))
        FAILF("want two dead letters: %.3000s", e->r.body);
    CHECK(sample(e->r.body, "funcd_async_queue_depth{state=\"waiting\"}") == 0);
    /* A namespace-scoped reader sees no other namespace's series. */
    CHECK_INT(REQ("GET", "/metrics", TEAM_B_TOKEN, NULL), 200);
    CHECK(strstr(e->r.body, "namespace=\"default\"") == NULL);
}

/* ---- anonymous callers and the tenant's own sources (review17-mends M-1) -- */

static void sign(const char *key, const char *body, char out[128])
{
    unsigned char md[32];
    unsigned len = 0;
    HMAC(EVP_sha256(), key, (int)strlen(key), (const unsigned char *)body, strlen(body), md, &len);
    strcpy(out, "X-Funcd-Signature: sha256=");
    for (unsigned i = 0; i < 32; i++)
        sprintf(out + 26 + 2 * i, "%02x", md[i]);
}

/* EventSource `name` with `spec` (JSON) in default, running: for a webhook,
 * until its path answers something but 404; for others, a second. */
static int make_event_source(env *e, const char *name, const char *spec)
{
    char body[2048], path[128];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"EventSource\",\"metadata\":"
             "{\"name\":\"%s\"},\"spec\":%s}",
             name, spec);
    if (REQ("POST", NS("default") "/eventsources", DEV_TOKEN, body) != 201)
        return -1;
    if (!strstr(spec, "\"webhook\"")) {
        env_sleep_ms(1000);
        return 0;
    }
    snprintf(path, sizeof(path), "/events/default/%s", name);
    int64_t end = e2e_now_ms() + 5000;
    while (e2e_http_send(e->dp, "GET", path, NULL, NULL, NULL, 0, &e->r) == 404 &&
           e2e_now_ms() < end)
        env_sleep_ms(20);
    return e->r.status == 405 ? 0 : -1;
}

/* Anonymous submissions (/async/ of an open function, an unsigned webhook)
 * take at most half of each of a namespace's caps: once they hold it, the
 * tenant's own callers (a signed webhook, /async/ with a token) still have
 * the other half; the total stays within the caps. Before, an anonymous
 * flood took every place and the signed webhook was 429. */
SV_TEST_WITH(anonymous_share_leaves_the_tenant_room, funcd_with_queue_limits(4, 0, UINT64_MAX),
             NULL)
{
    if (ready_echo(e) < 0)
        FAILF("echo is not Ready: %.500s", e->r.body);
    CHECK(make_broken(e) == 0);
    CHECK(sv_native(e, "guarded", "\"edge\":{\"auth\":\"authenticated\"}") == 0);
    CHECK_INT(REQ("POST", NS("default") "/secrets", DEV_TOKEN,
                  "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":"
                  "\"hook\"},\"stringData\":{\"token\":\"s3cret\"}}"),
              201);
    CHECK(make_event_source(e, "signed", "{\"type\":\"webhook\",\"webhook\":{\"secretRef\":"
                            "{\"name\":\"hook\",\"key\":\"token\"}},\"target\":{\"function\":"
                            "\"broken\"},\"delivery\":{\"backoff\":{\"initial\":\"20s\"}}}") == 0);
    CHECK(make_event_source(e, "open", "{\"type\":\"webhook\",\"target\":{\"function\":"
                            "\"echo\"}}") == 0);
    /* The flood: slow invocations, each holding its place for 20 s (the tenant's
     * signed event too: its target fails, and waits 20 s to be tried again). */
    int accepted = 0;
    for (int i = 0; i < 10; i++)
        if (post_async(e, "echo/sleep?ms=20000", NULL, NULL, "x") == 202)
            accepted++;
    /* The tenant's signed webhook is taken. */
    char sig[128];
    sign("s3cret", "{\"n\":1}", sig);
    const char *h[] = {sig, NULL};
    CHECK_INT(e2e_http_send(e->dp, "POST", "/events/default/signed", NULL, h, "{\"n\":1}", 7,
                            &e->r),
              202);
    CHECK_INT(accepted, 2);
    CHECK_INT(post_async(e, "echo/sleep?ms=20000", NULL, NULL, "x"), 429);
    CHECK_DP_STATUS(429, "TooManyRequests");
    CHECK_CONTAINS(jstr(e->r.json, "message"), "unauthenticated");
    CHECK_CONTAINS(jstr(e->r.json, "message"), "--queue-max-pending 4");
    CHECK_CONTAINS(jstr(e->r.json, "message"), "--queue-anonymous-share 50");
    CHECK(strstr(jstr(e->r.json, "message"), " 2 ") == NULL); /* not the namespace's figures */
    /* An unsigned webhook is anonymous too. */
    CHECK_INT(e2e_http_send(e->dp, "POST", "/events/default/open", NULL, NULL, "{}", 2, &e->r),
              429);
    CHECK_DP_STATUS(429, "TooManyRequests");
    /* The tenant's authenticated /async/ is taken too. */
    CHECK_INT(post_async(e, "guarded/sleep?ms=20000", DEV_TOKEN, NULL, "x"), 202);
    /* And the namespace is at its cap: four. */
    CHECK_INT(post_async(e, "guarded/sleep?ms=20000", DEV_TOKEN, NULL, "x"), 429);
    CHECK_CONTAINS(jstr(e->r.json, "message"), "--queue-max-pending 4");
    CHECK_INT(REQ("GET", NS("default") "/invocations", DEV_TOKEN, NULL), 200);
    CHECK_INT(cJSON_GetArraySize(jget(e->r.json, "items")), 4);
}

/* funcd_with_queue_anonymous_share (--queue-anonymous-share): 100 lets
 * anonymous callers take a whole cap, 0 none of it; more than 100 is
 * refused when the platform starts. */
SV_TEST_WITH(anonymous_share_option, funcd_with_queue_limits(2, 0, UINT64_MAX),
             funcd_with_queue_anonymous_share(100))
{
    if (ready_echo(e) < 0)
        FAILF("echo is not Ready: %.500s", e->r.body);
    CHECK_INT(post_async(e, "echo/sleep?ms=3000", NULL, NULL, "x"), 202);
    CHECK_INT(post_async(e, "echo/sleep?ms=3000", NULL, NULL, "x"), 202);
    CHECK_INT(post_async(e, "echo/sleep?ms=3000", NULL, NULL, "x"), 429);
    CHECK_CONTAINS(jstr(e->r.json, "message"), "--queue-max-pending 2");
    env bad;
    memset(&bad, 0, sizeof(bad));
    int rc = env_up_with(&bad, NULL, funcd_with_queue_anonymous_share(101), NULL, NULL);
    env_down(&bad);
    CHECK(rc < 0);
    CHECK_CONTAINS(funcd_error_last()->message, "at most 100");
}

SV_TEST_WITH(anonymous_share_none, funcd_with_queue_limits(2, 0, UINT64_MAX),
             funcd_with_queue_anonymous_share(0))
{
    if (ready_echo(e) < 0)
        FAILF("echo is not Ready: %.500s", e->r.body);
    CHECK(sv_native(e, "guarded", "\"edge\":{\"auth\":\"authenticated\"}") == 0);
    CHECK_INT(post_async(e, "echo/x", NULL, NULL, "x"), 429);
    CHECK_CONTAINS(jstr(e->r.json, "message"), "--queue-anonymous-share 0 percent");
    CHECK_INT(post_async(e, "guarded/x", DEV_TOKEN, NULL, "x"), 202);
}

static funcd_bus *the_bus;

static funcd_option *with_kept_bus(void)
{
    if (funcd_bus_memory_new(&the_bus) < 0)
        return NULL;
    return funcd_with_bus(the_bus);
}

/* EventSource `name`'s status.counts.<what> (GET), or -1. */
static double source_count(env *e, const char *name, const char *what)
{
    char path[256], field[64];
    snprintf(path, sizeof(path), NS("default") "/eventsources/%s", name);
    snprintf(field, sizeof(field), "status.counts.%s", what);
    if (REQ("GET", path, DEV_TOKEN, NULL) != 200 || !jget(e->r.json, field))
        return -1;
    return jnum(e->r.json, field);
}

/* A namespace whose queue is full (anonymous and authenticated slow
 * invocations): a bus message is held and retried, and delivered once the
 * slow ones are done. Before, it was lost (core NATS does not redeliver):
 * only lastError said so. */
SV_TEST_WITH(bus_message_waits_for_room, funcd_with_queue_limits(2, 0, UINT64_MAX),
             with_kept_bus())
{
    CHECK(the_bus);
    if (ready_echo(e) < 0)
        FAILF("echo is not Ready: %.500s", e->r.body);
    CHECK(sv_native(e, "guarded", "\"edge\":{\"auth\":\"authenticated\"}") == 0);
    CHECK(make_event_source(e, "orders", "{\"type\":\"bus\",\"bus\":{\"subject\":"
                            "\"default.orders\"},\"target\":{\"function\":\"echo\"}}") == 0);
    CHECK_INT(post_async(e, "echo/sleep?ms=3000", NULL, NULL, "x"), 202);
    CHECK_INT(post_async(e, "guarded/sleep?ms=3000", DEV_TOKEN, NULL, "x"), 202);
    CHECK_INT(post_async(e, "guarded/sleep?ms=3000", DEV_TOKEN, NULL, "x"), 429);
    CHECK_INT(the_bus->publish(the_bus, "default.orders", "order 1", 7), 0);
    int64_t end = e2e_now_ms() + 30000;
    while (source_count(e, "orders", "delivered") < 1 && e2e_now_ms() < end)
        env_sleep_ms(200);
    if (source_count(e, "orders", "delivered") != 1)
        FAILF("the bus message was not delivered: %.1000s", e->r.body);
    CHECK(jnum(e->r.json, "status.counts.events") == 1);
    CHECK(jnum(e->r.json, "status.counts.dropped") == 0);
}

static pthread_mutex_t warn_lock = PTHREAD_MUTEX_INITIALIZER;
static char warned[512];

/* funcd's own WARN lines (the test's logger): the last about dropped
 * messages of "orders" is kept. */
static void on_warn(funcd_log_level level, const char *message, void *payload)
{
    (void)payload;
    fprintf(stderr, "funcd: %s\n", message);
    if (level >= FUNCD_LOG_WARN && strstr(message, "dropped") && strstr(message, "orders")) {
        pthread_mutex_lock(&warn_lock);
        snprintf(warned, sizeof(warned), "%s", message);
        pthread_mutex_unlock(&warn_lock);
    }
}

/* Beyond what a bus source holds (1000 messages), a message is dropped:
 * a WARN line, status.counts.dropped and
 * funcd_event_source_dropped_total{...,reason="backlog_full"}. */
static void bus_backlog_is_bounded_body(env *e)
{
    CHECK(the_bus);
    if (ready_echo(e) < 0)
        FAILF("echo is not Ready: %.500s", e->r.body);
    CHECK(make_event_source(e, "orders", "{\"type\":\"bus\",\"bus\":{\"subject\":"
                            "\"default.orders\"},\"target\":{\"function\":\"echo\"}}") == 0);
    CHECK_INT(post_async(e, "echo/sleep?ms=20000", NULL, NULL, "x"), 202);
    CHECK_INT(post_async(e, "echo/x", NULL, NULL, "x"), 429);
    for (int i = 0; i < 1005; i++) {
        char msg[32];
        snprintf(msg, sizeof(msg), "order %d", i);
        CHECK_INT(the_bus->publish(the_bus, "default.orders", msg, strlen(msg)), 0);
    }
    int64_t end = e2e_now_ms() + 10000;
    while (source_count(e, "orders", "dropped") < 5 && e2e_now_ms() < end)
        env_sleep_ms(200);
    CHECK(source_count(e, "orders", "dropped") == 5);
    CHECK(jnum(e->r.json, "status.counts.events") == 0);
    CHECK_CONTAINS(jstr(e->r.json, "status.lastError"), "dropped");
    want_sample w = {"funcd_event_source_dropped_total{namespace=\"default\",eventsource=\"orders\","
                     "reason=\"backlog_full\"}",
                     5};
    if (!env_poll(e, 5000, scraped, &w))
        FAILF("no %s: %.3000s", w.series, e->r.body);
    CHECK(sample(e->r.body, w.series) == 5);
    CHECK_CONTAINS(e->r.body, "# TYPE funcd_event_source_dropped_total counter");
    pthread_mutex_lock(&warn_lock);
    char line[512];
    snprintf(line, sizeof(line), "%s", warned);
    pthread_mutex_unlock(&warn_lock);
    CHECK_CONTAINS(line, "1000");
}

TEST(bus_backlog_is_bounded)
{
    env e;
    if (env_up_with(&e, NULL, funcd_with_queue_limits(1, 0, UINT64_MAX), with_kept_bus(),
                    funcd_with_logger(on_warn, FUNCD_LOG_WARN, NULL)) < 0) {
        env_down(&e);
        sv_cleanup();
        FAILF("cannot start a platform: %s", funcd_error_last()->message);
    }
    bus_backlog_is_bounded_body(&e);
    env_down(&e);
    sv_cleanup();
}

/* ---- a loopback server for X-Callback-Url ------------------------------ */

typedef struct catcher {
    int fd;
    int port;
    pthread_t thread;
    char got[8192];
    size_t len;
} catcher;

static void *catch_one(void *arg)
{
    catcher *c = arg;
    int fd = accept(c->fd, NULL, NULL);
    if (fd < 0)
        return NULL;
    struct timeval tv = {20, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    for (;;) { /* until the body promised has come (Content-Length) */
        ssize_t n = recv(fd, c->got + c->len, sizeof(c->got) - 1 - c->len, 0);
        if (n <= 0)
            break;
        c->len += (size_t)n;
        c->got[c->len] = '\0';
        const char *end = strstr(c->got, "\r\n\r\n");
        const char *cl = strcasestr(c->got, "content-length:");
        if (end && cl && c->len >= (size_t)(end + 4 - c->got) + strtoul(cl + 15, NULL, 10))
            break;
    }
    static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    if (send(fd, ok, sizeof(ok) - 1, MSG_NOSIGNAL) < 0)
        perror("send");
    close(fd);
    return NULL;
}

/* Listens on 127.0.0.1 (a port of its own) for the callback. 0, or -1. */
static int catcher_listen(catcher *c)
{
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (c->fd < 0 || bind(c->fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(c->fd, 4) != 0 ||
        getsockname(c->fd, (struct sockaddr *)&a, &al) != 0)
        return -1;
    c->port = ntohs(a.sin_port);
    return 0;
}

/* The tests run on loopback: the operator allows callbacks there. */
SV_TEST_WITH(callback_url, funcd_with_callback_allow("127.0.0.1"), NULL)
{
    if (ready_echo(e) < 0)
        FAILF("echo is not Ready: %.500s", e->r.body);
    catcher c = {0};
    CHECK(catcher_listen(&c) == 0);
    CHECK(pthread_create(&c.thread, NULL, catch_one, &c) == 0);
    char cb[128];
    snprintf(cb, sizeof(cb), "X-Callback-Url: http://127.0.0.1:%d/done?k=v", c.port);
    const char *h[] = {cb, NULL};
    long code = post_async(e, "echo/cb", NULL, h, "called back");
    char id[128];
    snprintf(id, sizeof(id), "%s", sv_header(&e->r, "X-Funcd-Invocation-Id"));
    if (code != 202) {
        shutdown(c.fd, SHUT_RDWR);
        pthread_join(c.thread, NULL);
        close(c.fd);
        FAILF("HTTP %ld: %.300s", code, e->r.body);
    }
    pthread_join(c.thread, NULL);
    close(c.fd);
    CHECK(strncmp(c.got, "POST /done?k=v HTTP/1.1\r\n", 25) == 0);
    char want[200];
    snprintf(want, sizeof(want), "X-Funcd-Invocation-Id: %s", id);
    CHECK_CONTAINS(c.got, want);
    CHECK_CONTAINS(c.got, "X-Funcd-Status: 200");
    CHECK_CONTAINS(c.got, "X-Funcd-State: Succeeded");
    CHECK_CONTAINS(c.got, "\"body\":\"called back\"");
    /* How it went is on the invocation. */
    char location[512];
    snprintf(location, sizeof(location), NS("default") "/invocations/%s", id);
    int64_t end = e2e_now_ms() + 10000;
    while (REQ("GET", location, DEV_TOKEN, NULL) == 200 && !jstr(e->r.json, "status.callback.state") &&
           e2e_now_ms() < end)
        env_sleep_ms(50);
    CHECK_STR(jstr(e->r.json, "status.callback.state"), "Delivered");
    CHECK_INT((int)jnum(e->r.json, "status.callback.statusCode"), 200);
    /* Not an http:// URL: refused before anything is queued. */
    static const char *const bad[] = {"X-Callback-Url: ftp://127.0.0.1/x", NULL};
    CHECK_INT(post_async(e, "echo/cb", NULL, bad, "x"), 400);
    /* funcd's own listeners stay out of reach, allowed or not. */
    snprintf(cb, sizeof(cb), "X-Callback-Url: %s/fn/default/echo/", e->dp_base);
    CHECK_INT(post_async(e, "echo/cb", NULL, h, "x"), 400);
    CHECK_DP_STATUS(400, "BadRequest");
    CHECK_CONTAINS(jstr(e->r.json, "message"), "funcd's own listener");
}

/* review17-controlplane M-1: an anonymous caller's X-Callback-Url made funcd
 * POST to loopback and link-local addresses (SSRF). Without the operator's
 * allowance an address such as these is 400 at submission, naming the
 * header; a name that resolves to one is refused when the callback would
 * connect, which the log and the invocation's status.callback say, and
 * nothing reaches the listener. */
SV_TEST(callback_refuses_internal_addresses)
{
    if (ready_echo(e) < 0)
        FAILF("echo is not Ready: %.500s", e->r.body);
    catcher c = {0};
    CHECK(catcher_listen(&c) == 0);
    char cb[160];
    const char *h[] = {cb, NULL};
    const char *literal[][2] = {{"http://127.0.0.1:%d/admin?all=1", "loopback"},
                                {"http://169.254.169.254/latest/meta-data/%d", "link-local"},
                                {"http://[::1]:%d/", "loopback"},
                                {"http://0.0.0.0:%d/", "unspecified"},
                                {"http://224.0.0.1:%d/", "multicast"}};
    for (size_t i = 0; i < sizeof(literal) / sizeof(literal[0]); i++) {
        char url[128];
        snprintf(url, sizeof(url), literal[i][0], c.port);
        snprintf(cb, sizeof(cb), "X-Callback-Url: %s", url);
        if (post_async(e, "echo/", NULL, h, "x") != 400) {
            close(c.fd);
            FAILF("%s: HTTP %ld, want 400: %.300s", url, e->r.status, e->r.body);
        }
        CHECK_DP_STATUS(400, "BadRequest");
        CHECK_CONTAINS(jstr(e->r.json, "message"), "X-Callback-Url");
        CHECK_CONTAINS(jstr(e->r.json, "message"), literal[i][1]);
    }
    /* A name: checked on the address it resolves to. */
    snprintf(cb, sizeof(cb), "X-Callback-Url: http://localhost:%d/admin?all=1", c.port);
    long code = post_async(e, "echo/", NULL, h, "x");
    char location[512];
    snprintf(location, sizeof(location), "%s", sv_header(&e->r, "Location"));
    if (code != 202) {
        close(c.fd);
        FAILF("HTTP %ld: %.300s", code, e->r.body);
    }
    int64_t end = e2e_now_ms() + 15000;
    while (REQ("GET", location, DEV_TOKEN, NULL) == 200 && !jstr(e->r.json, "status.callback.state") &&
           e2e_now_ms() < end)
        env_sleep_ms(50);
    const char *state = jstr(e->r.json, "status.callback.state");
    char error[300];
    const char *err = jstr(e->r.json, "status.callback.error");
    snprintf(error, sizeof(error), "%s", err ? err : "");
    /* Nothing came to the listener. */
    int flags = fcntl(c.fd, F_GETFL);
    fcntl(c.fd, F_SETFL, flags | O_NONBLOCK);
    int got = accept(c.fd, NULL, NULL);
    if (got >= 0)
        close(got);
    close(c.fd);
    CHECK(got < 0);
    CHECK_STR(state, "Refused");
    CHECK_CONTAINS(error, "is loopback");
}

/* An authenticated function needs the token on /async/ as on /fn/; the
 * token is not kept: the worker gets who called. */
SV_TEST(edge_auth_applies)
{
    CHECK(sv_native(e, "guarded", "\"edge\":{\"auth\":\"authenticated\"}") == 0);
    CHECK_INT(post_async(e, "guarded/x", NULL, NULL, "x"), 401);
    CHECK_INT(post_async(e, "guarded/x", TEAM_B_TOKEN, NULL, "x"), 403);
    CHECK_INT(post_async(e, "guarded/x", DEV_TOKEN, NULL, "x"), 202);
    char location[512];
    snprintf(location, sizeof(location), "%s", sv_header(&e->r, "Location"));
    if (!wait_state(e, location, "Succeeded"))
        FAILF("not Succeeded: %.500s", e->r.body);
    cJSON *answer = env_keep(e, cJSON_Parse(jstr(e->r.json, "status.response.body")));
    CHECK(answer != NULL);
    CHECK_STR(jstr(answer, "authorization"), "");
    CHECK(jstr(answer, "subject") && *jstr(answer, "subject"));
}

/* One namespace's callbacks to a URL that never answers hold at most 64
 * of the node's places: its 65th and later are skipped, and what they held
 * is its own (review17-mends L-1: the 256 places were the node's, so one
 * tenant's tarpit made every tenant's callbacks Skipped). */
SV_TEST_WITH(callbacks_per_namespace, funcd_with_callback_allow("127.0.0.1"), NULL)
{
    if (ready_echo(e) < 0)
        FAILF("echo is not Ready: %.500s", e->r.body);
    catcher pit = {0}; /* listens, never accepts: each callback waits its 10 s */
    CHECK(catcher_listen(&pit) == 0);
    listen(pit.fd, 512);
    char cb[128];
    snprintf(cb, sizeof(cb), "X-Callback-Url: http://127.0.0.1:%d/slow", pit.port);
    const char *h[] = {cb, NULL};
    enum { N = 70 };
    static char ids[N][128];
    int accepted = 0;
    for (int i = 0; i < N; i++)
        if (post_async(e, "echo/x", NULL, h, "x") == 202)
            snprintf(ids[accepted++], sizeof(ids[0]), "%s", sv_header(&e->r, "X-Funcd-Invocation-Id"));
    /* All final (each callback due), then, well within the 10 s a callback
     * may take: every one is either on its way (no state yet) or skipped. */
    char location[N][512];
    int64_t end = e2e_now_ms() + 6000;
    for (int i = 0; i < accepted; i++) {
        snprintf(location[i], sizeof(location[i]), NS("default") "/invocations/%s", ids[i]);
        while (REQ("GET", location[i], DEV_TOKEN, NULL) == 200 &&
               strcmp(jstr(e->r.json, "status.state") ?: "", "Succeeded") != 0 &&
               e2e_now_ms() < end)
            env_sleep_ms(20);
    }
    env_sleep_ms(1000);
    int skipped = 0, waiting = 0;
    for (int i = 0; i < accepted; i++) {
        REQ("GET", location[i], DEV_TOKEN, NULL);
        const char *state = jstr(e->r.json, "status.callback.state");
        skipped += state && strcmp(state, "Skipped") == 0;
        waiting += !state;
    }
    close(pit.fd);
    CHECK_INT(accepted, N);
    CHECK_INT(skipped, N - 64);
    CHECK_INT(waiting, 64);
}

int main(int argc, char **argv)
{
    sv_init();
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    SV_RUN(only, ran, async_succeeds);
    SV_RUN(only, ran, deadletter_replay_purge);
    SV_RUN(only, ran, dlq_cap_drops_the_oldest);
    SV_RUN(only, ran, dlq_retention_sweeps);
    SV_RUN(only, ran, eventing_metrics);
    SV_RUN(only, ran, callback_url);
    SV_RUN(only, ran, callback_refuses_internal_addresses);
    SV_RUN(only, ran, callbacks_per_namespace);
    SV_RUN(only, ran, edge_auth_applies);
    SV_RUN(only, ran, queue_full_is_429);
    SV_RUN(only, ran, queue_bytes_cap_is_429);
    SV_RUN(only, ran, webhook_queue_full_is_429);
    SV_RUN(only, ran, async_body_cap);
    SV_RUN(only, ran, anonymous_share_leaves_the_tenant_room);
    SV_RUN(only, ran, anonymous_share_option);
    SV_RUN(only, ran, anonymous_share_none);
    SV_RUN(only, ran, bus_message_waits_for_room);
    SV_RUN(only, ran, bus_backlog_is_bounded);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no test case named %s\n", only);
        return 1;
    }
    return HARNESS_END();
}
