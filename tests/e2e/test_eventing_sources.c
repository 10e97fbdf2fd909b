/*
 * EventSources end to end (docs/eventing.md): each source type feeds a real
 * python3 function through the delivery queue, on an embedded platform
 * spoken to over HTTP. The function ("sink", fixtures/eventing) logs one
 * "EVENT {json}" line per delivery; the platform's log observer hands the
 * lines to the test, which checks what arrived and how often.
 *
 *   cron     `@every 1s` fires >= 3 times in 3.5 s, never twice for a tick
 *   blob     100 objects written in a burst, each delivered exactly once,
 *            also across a restart of the platform between writes
 *   bus      two sources in one queue group: each message delivered once
 *   webhook  a wrong or missing signature is 401 and delivers nothing; a
 *            right one is 202 and arrives with its ce-* headers
 */
#include <openssl/hmac.h>
#include <pthread.h>
#include <string.h>

#include "../harness.h"
#include "test_serving_common.h"

/* ---- what the sink received ------------------------------------------------ */

#define MAX_EVENTS 1024

static pthread_mutex_t rec_lock = PTHREAD_MUTEX_INITIALIZER;
static cJSON *received[MAX_EVENTS];
static size_t n_received;

static void on_log(const funcd_log_record *r, void *payload)
{
    if (r->len < 6 || memcmp(r->line, "EVENT ", 6) != 0)
        return;
    cJSON *j = cJSON_ParseWithLength(r->line + 6, r->len - 6);
    if (!j)
        return;
    pthread_mutex_lock(&rec_lock);
    if (n_received < MAX_EVENTS)
        received[n_received++] = j;
    else
        cJSON_Delete(j);
    pthread_mutex_unlock(&rec_lock);
}

static size_t events(void)
{
    pthread_mutex_lock(&rec_lock);
    size_t n = n_received;
    pthread_mutex_unlock(&rec_lock);
    return n;
}

static void forget_events(void)
{
    pthread_mutex_lock(&rec_lock);
    for (size_t i = 0; i < n_received; i++)
        cJSON_Delete(received[i]);
    n_received = 0;
    pthread_mutex_unlock(&rec_lock);
}

/* Event i's header or body ("body"); valid until forget_events. */
static const char *ev_get(size_t i, const char *header)
{
    pthread_mutex_lock(&rec_lock);
    const cJSON *j = i < n_received ? received[i] : NULL;
    pthread_mutex_unlock(&rec_lock);
    if (strcmp(header, "body") == 0)
        return jstr(j, "body");
    return cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "headers"), header));
}

/* How many events have `value` for `header` (or "body"). */
static size_t count_with(const char *header, const char *value)
{
    size_t n = 0;
    for (size_t i = 0; i < events(); i++) {
        const char *v = ev_get(i, header);
        if (v && strcmp(v, value) == 0)
            n++;
    }
    return n;
}

static int wait_events(size_t n, int timeout_ms)
{
    int64_t end = e2e_now_ms() + timeout_ms;
    while (events() < n && e2e_now_ms() < end)
        env_sleep_ms(50);
    return events() >= n;
}

/* ---- set-up ------------------------------------------------------------------- */

/* The sink Function, Ready and warm (one request served), so events are not
 * held up by a cold start. 0 when it is. */
static int make_sink(env *e)
{
    char dir[256];
    if (sv_fixture("eventing", dir, sizeof(dir)) != 0)
        return -1;
    long st = sv_create(e, "sink", "{\"runtime\":\"python3\",\"handler\":\"main.handler\","
                        "\"source\":{\"path\":\"%s\"}}", dir);
    if (st != 201 && st != 409)
        return -1;
    if (!sv_wait_ready(e, "sink", 20000))
        return -1;
    long warm = sv_invoke(e, "POST", DP_PATH("sink") "/warm", "warm");
    forget_events();
    return warm == 200 ? 0 : -1;
}

static long make_source_as(env *e, const char *token, const char *name, const char *spec)
{
    char body[2048];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"EventSource\",\"metadata\":"
             "{\"name\":\"%s\"},\"spec\":%s}",
             name, spec);
    return REQ("POST", NS("default") "/eventsources", token, body);
}

static long make_source(env *e, const char *name, const char *spec)
{
    return make_source_as(e, DEV_TOKEN, name, spec);
}

/* ---- what the API refuses --------------------------------------------------------- */

SV_TEST_WITH(refused, NULL, NULL)
{
    CHECK_INT(make_source(e, "wf", "{\"type\":\"webhook\",\"target\":{\"workflow\":\"ingest\","
                          "\"function\":\"f\"}}"),
              400);
    CHECK_STATUS(400, "BadRequest", "spec.target");
    CHECK_CONTAINS(e->r.body, "one function or one workflow");
    CHECK_INT(make_source(e, "tz", "{\"type\":\"cron\",\"cron\":{\"schedule\":\"0 9 * * *\","
                          "\"timezone\":\"Europe/Paris\"},\"target\":{\"function\":\"f\"}}"),
              400);
    CHECK_STATUS(400, "BadRequest", "spec.cron.timezone");
    CHECK_INT(make_source(e, "never", "{\"type\":\"cron\",\"cron\":{\"schedule\":\"0 0 30 2 *\"},"
                          "\"target\":{\"function\":\"f\"}}"),
              400);
    CHECK_STATUS(400, "BadRequest", "spec.cron.schedule");
    /* A developer's blob and bus sources stay inside the namespace: not
     * another namespace's invocations (their keys), not the whole bus, not
     * another namespace's queue group (it would take half its messages). */
    CHECK_INT(make_source(e, "spy", "{\"type\":\"blob\",\"blob\":{\"prefix\":"
                          "\"invocations/other/\"},\"target\":{\"function\":\"f\"}}"),
              403);
    CHECK_STATUS(403, "Forbidden", "spec.blob.prefix");
    CHECK_CONTAINS(e->r.body, "s3/default/");
    CHECK_INT(make_source(e, "spy", "{\"type\":\"blob\",\"blob\":{\"prefix\":"
                          "\"s3/defaultx/\"},\"target\":{\"function\":\"f\"}}"),
              403);
    CHECK_INT(make_source(e, "spy", "{\"type\":\"blob\",\"target\":{\"function\":\"f\"}}"),
              403);
    CHECK_INT(make_source(e, "all", "{\"type\":\"bus\",\"bus\":{\"subject\":\">\"},"
                          "\"target\":{\"function\":\"f\"}}"),
              403);
    CHECK_STATUS(403, "Forbidden", "spec.bus.subject");
    CHECK_INT(make_source(e, "steal", "{\"type\":\"bus\",\"bus\":{\"subject\":"
                          "\"default.orders\",\"queueGroup\":\"funcd.eventsource.other.orders\"},"
                          "\"target\":{\"function\":\"f\"}}"),
              403);
    CHECK_STATUS(403, "Forbidden", "spec.bus.queueGroup");
    /* Nothing was made of them. */
    CHECK_INT(REQ("GET", NS("default") "/eventsources", DEV_TOKEN, NULL), 200);
    CHECK_INT(cJSON_GetArraySize(jget(e->r.json, "items")), 0);
    /* No webhook source: 404 on the data plane. */
    CHECK_INT(e2e_http_send(e->dp, "POST", "/events/default/wf", NULL, NULL, "x", 1, &e->r), 404);
    CHECK_DP_STATUS(404, "NotFound");
}

/* ---- webhook -------------------------------------------------------------------- */

static void sign(const char *key, const char *body, char out[128])
{
    unsigned char md[32];
    unsigned len = 0;
    HMAC(EVP_sha256(), key, (int)strlen(key), (const unsigned char *)body, strlen(body), md, &len);
    strcpy(out, "X-Funcd-Signature: sha256=");
    for (unsigned i = 0; i < 32; i++)
        sprintf(out + 26 + 2 * i, "%02x", md[i]);
}

static long post_hook(env *e, const char *sig_header, const char *body, const char *ce_id)
{
    char ce[128];
    snprintf(ce, sizeof(ce), "ce-id: %s", ce_id ? ce_id : "");
    const char *headers[] = {"Content-Type: text/plain", sig_header ? sig_header : ce_id ? ce : NULL,
                             sig_header && ce_id ? ce : NULL, NULL};
    return e2e_http_send(e->dp, "POST", "/events/default/hook", NULL, headers, body, strlen(body),
                         &e->r);
}

SV_TEST_WITH(webhook, funcd_with_log_observer(on_log, NULL), NULL)
{
    CHECK(make_sink(e) == 0);
    CHECK_INT(REQ("POST", NS("default") "/secrets", DEV_TOKEN,
                  "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":"
                  "\"hook\"},\"stringData\":{\"token\":\"s3cret\"}}"),
              201);
    CHECK_INT(make_source(e, "hook", "{\"type\":\"webhook\",\"webhook\":{\"secretRef\":"
                          "{\"name\":\"hook\",\"key\":\"token\"}},\"target\":{\"function\":"
                          "\"sink\"}}"),
              201);
    /* The source runs once its watch event is in: until then 404. */
    int64_t end = e2e_now_ms() + 5000;
    while (post_hook(e, NULL, "x", NULL) == 404 && e2e_now_ms() < end)
        env_sleep_ms(20);
    CHECK_DP_STATUS(401, "Unauthorized");
    char wrong[128], right[128];
    sign("not the secret", "{\"n\":1}", wrong);
    CHECK_INT(post_hook(e, wrong, "{\"n\":1}", NULL), 401);
    CHECK_DP_STATUS(401, "Unauthorized");
    sign("s3cret", "{\"n\":1}", right);
    CHECK_INT(post_hook(e, right, "{\"n\":2}", NULL), 401); /* signed another body */
    CHECK_INT(post_hook(e, "X-Funcd-Signature: sha256=zz", "{\"n\":1}", NULL), 401);
    CHECK_INT(e2e_http_send(e->dp, "GET", "/events/default/hook", NULL, NULL, NULL, 0, &e->r), 405);
    CHECK_DP_STATUS(405, "MethodNotAllowed");
    CHECK_STR(sv_header(&e->r, "Allow"), "POST");
    CHECK_INT(e2e_http_send(e->dp, "POST", "/events/default/nosuch", NULL, NULL, "x", 1, &e->r),
              404);

    CHECK_INT(post_hook(e, right, "{\"n\":1}", NULL), 202);
    const char *id = jstr(e->r.json, "id");
    CHECK(id && *id);
    char event_id[80];
    snprintf(event_id, sizeof(event_id), "%s", id);
    CHECK_STR(sv_header(&e->r, "X-Funcd-Event-Id"), event_id);
    CHECK(wait_events(1, 30000));
    env_sleep_ms(1000); /* anything the refused calls had queued would be here by now */
    CHECK_INT(events(), 1);
    CHECK_STR(ev_get(0, "body"), "{\"n\":1}");
    CHECK_STR(ev_get(0, "ce-specversion"), "1.0");
    CHECK_STR(ev_get(0, "ce-id"), event_id);
    CHECK_STR(ev_get(0, "ce-type"), "dev.funcd.webhook");
    CHECK_STR(ev_get(0, "ce-source"), "/apis/funcd.dev/v1/namespaces/default/eventsources/hook");
    CHECK(ev_get(0, "ce-time") && strlen(ev_get(0, "ce-time")) >= 20);
    CHECK_STR(ev_get(0, "content-type"), "text/plain");

    /* A sender's retry of one CloudEvent (same ce-id) is delivered once. */
    CHECK_INT(post_hook(e, right, "{\"n\":1}", "order-7"), 202);
    snprintf(event_id, sizeof(event_id), "%s", jstr(e->r.json, "id"));
    CHECK_INT(post_hook(e, right, "{\"n\":1}", "order-7"), 202);
    CHECK_STR(jstr(e->r.json, "id"), event_id);
    CHECK(wait_events(2, 30000));
    env_sleep_ms(1500);
    CHECK_INT(count_with("ce-id", event_id), 1);

    /* The status counts what was delivered (written by the leader). */
    end = e2e_now_ms() + 10000;
    double delivered = 0;
    while (e2e_now_ms() < end) {
        REQ("GET", NS("default") "/eventsources/hook", DEV_TOKEN, NULL);
        delivered = jnum(e->r.json, "status.counts.delivered");
        if (delivered >= 2)
            break;
        env_sleep_ms(100);
    }
    CHECK(delivered >= 2);
    CHECK(jstr(e->r.json, "status.lastEventTime"));
    forget_events();
}

/* ---- cron ------------------------------------------------------------------------ */

SV_TEST_WITH(cron, funcd_with_log_observer(on_log, NULL), NULL)
{
    CHECK(make_sink(e) == 0);
    int64_t start = e2e_now_ms();
    CHECK_INT(make_source(e, "tick", "{\"type\":\"cron\",\"cron\":{\"schedule\":\"@every 1s\"},"
                          "\"target\":{\"function\":\"sink\"}}"),
              201);
    env_sleep_ms((int)(3500 - (e2e_now_ms() - start)));
    CHECK_INT(REQ("DELETE", NS("default") "/eventsources/tick", DEV_TOKEN, NULL), 200);
    env_sleep_ms(3000); /* deliveries of what was queued */
    size_t n = events();
    if (n < 3 || n > 5)
        FAILF("%zu events in 3.5 s of \"@every 1s\"", n);
    for (size_t i = 0; i < n; i++) {
        CHECK_STR(ev_get(i, "ce-type"), "dev.funcd.cron.tick");
        CHECK_INT(count_with("ce-id", ev_get(i, "ce-id")), 1);
        CHECK_INT(count_with("ce-time", ev_get(i, "ce-time")), 1); /* one event per tick */
    }
    forget_events();
}

/* ---- bus ------------------------------------------------------------------------- */

static funcd_bus *the_bus;

static funcd_option *with_kept_bus(void)
{
    if (funcd_bus_memory_new(&the_bus) < 0)
        return NULL;
    return funcd_with_bus(the_bus);
}

SV_TEST_WITH(bus, funcd_with_log_observer(on_log, NULL), with_kept_bus())
{
    CHECK(the_bus);
    CHECK(make_sink(e) == 0);
    /* Two sources in one queue group stand for two nodes: each message goes
     * to one of them. */
    const char *spec = "{\"type\":\"bus\",\"bus\":{\"subject\":\"default.orders.created\","
                       "\"queueGroup\":\"default.workers\"},\"target\":{\"function\":\"sink\"}}";
    CHECK_INT(make_source(e, "orders-a", spec), 201);
    CHECK_INT(make_source(e, "orders-b", spec), 201);
    env_sleep_ms(1000); /* both subscribed */
    for (int i = 0; i < 20; i++) {
        char msg[32];
        snprintf(msg, sizeof(msg), "order %d", i);
        CHECK_INT(the_bus->publish(the_bus, "default.orders.created", msg, strlen(msg)), 0);
    }
    if (!wait_events(20, 30000)) {
        REQ("GET", NS("default") "/eventsources/orders-a", DEV_TOKEN, NULL);
        FAILF("%zu events of 20; %s", events(), e->r.body);
    }
    env_sleep_ms(1500);
    CHECK_INT(events(), 20);
    for (int i = 0; i < 20; i++) {
        char msg[32];
        snprintf(msg, sizeof(msg), "order %d", i);
        CHECK_INT(count_with("body", msg), 1);
    }
    CHECK_STR(ev_get(0, "ce-type"), "dev.funcd.bus.message");
    CHECK_STR(ev_get(0, "ce-subject"), "default.orders.created");
    forget_events();
}

/* ---- blob ------------------------------------------------------------------------ */

static char blob_dir[256];
static funcd_blob *the_blob;

static funcd_option *with_file_store(void)
{
    char path[300];
    snprintf(path, sizeof(path), "%s/funcd.db", blob_dir);
    funcd_store *s = NULL;
    return funcd_store_sqlite_new(&s, path, NULL) == 0 ? funcd_with_store(s) : NULL;
}

static funcd_option *with_file_blob(void)
{
    char path[300];
    snprintf(path, sizeof(path), "%s/blob", blob_dir);
    the_blob = NULL;
    return funcd_blob_file_new(&the_blob, path) == 0 ? funcd_with_blob(the_blob) : NULL;
}

static int write_objects(int from, int to)
{
    for (int i = from; i < to; i++) {
        char key[64], data[32];
        snprintf(key, sizeof(key), "uploads/object-%03d", i);
        snprintf(data, sizeof(data), "data %d", i);
        if (the_blob->put(the_blob, key, data, strlen(data)) != 0)
            return -1;
    }
    return 0;
}

static int up(env *e)
{
    return env_up_with(e, NULL, funcd_with_log_observer(on_log, NULL), with_file_store(),
                       with_file_blob());
}

/* Every object's event exactly once: its key in ce-subject. */
static const char *each_once(int n)
{
    static char why[128];
    for (int i = 0; i < n; i++) {
        char key[64];
        snprintf(key, sizeof(key), "uploads/object-%03d", i);
        size_t c = count_with("ce-subject", key);
        if (c != 1) {
            snprintf(why, sizeof(why), "%s delivered %zu times", key, c);
            return why;
        }
    }
    return NULL;
}

TEST(blob)
{
    CHECK(sv_tempdir(blob_dir, sizeof(blob_dir)) == 0);
    env e_, *e = &e_;
    if (up(e) < 0) {
        env_down(e);
        sv_cleanup();
        FAILF("cannot start a platform: %s", funcd_error_last()->message);
    }
    int ok = make_sink(e) == 0 &&
             make_source_as(e, ADMIN_TOKEN, "uploads", "{\"type\":\"blob\",\"blob\":{\"prefix\":"
                            "\"uploads/\",\"pollInterval\":\"200ms\"},\"target\":{\"function\":"
                            "\"sink\"}}") == 201;
    ok = ok && write_objects(0, 50) == 0 && wait_events(50, 60000);
    if (!ok) {
        const char *why = each_once(50);
        REQ("GET", NS("default") "/eventsources/uploads", DEV_TOKEN, NULL);
        fprintf(stderr, "%s; eventsource: %s\n", why ? why : "", e->r.body);
    }
    env_down(e);
    if (!ok) {
        sv_cleanup();
        FAILF("before the restart: %zu events of 50", events());
    }
    /* Objects written while funcd is down, then after it is back. */
    char path[300];
    snprintf(path, sizeof(path), "%s/blob", blob_dir);
    CHECK(funcd_blob_file_new(&the_blob, path) == 0);
    ok = write_objects(50, 75) == 0;
    the_blob->free(the_blob);
    if (!ok || up(e) < 0) {
        env_down(e);
        sv_cleanup();
        FAILF("cannot start the platform again: %s", funcd_error_last()->message);
    }
    ok = write_objects(75, 100) == 0 && wait_events(100, 60000);
    if (ok)
        env_sleep_ms(2000); /* time for a repeat to show */
    size_t n = events();
    const char *why = each_once(100);
    if (!ok || n != 100 || why) { /* what the source says about it */
        REQ("GET", NS("default") "/eventsources/uploads", DEV_TOKEN, NULL);
        fprintf(stderr, "eventsource: %s\n", e->r.body);
    }
    env_down(e);
    sv_cleanup();
    if (!ok || n != 100 || why)
        FAILF("%zu events for 100 objects: %s", n, why ? why : "");
    forget_events();
}

int main(int argc, char **argv)
{
    sv_init();
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    SV_RUN(only, ran, refused);
    SV_RUN(only, ran, webhook);
    SV_RUN(only, ran, cron);
    SV_RUN(only, ran, bus);
    SV_RUN(only, ran, blob);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no test case named %s\n", only);
        return 1;
    }
    return HARNESS_END();
}
