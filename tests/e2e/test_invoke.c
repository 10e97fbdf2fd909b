/*
 * Internal invocations (lib/invoke) against real workers: a function called
 * from inside the platform, cold (from zero) and warm, a function that does
 * not exist (404), one that takes too long (504), a worker that dies with
 * the request (502), and a request that is not valid (refused at once).
 *
 * funcd_invoke runs on the platform loop: the test schedules it there with
 * event_base_once and waits for `done` on a condition variable.
 */
#include "../harness.h"
#include "invoke/invoke.h"
#include "test_serving_common.h"
#include "util/misc.h"

#include <event2/event.h>
#include <pthread.h>
#include <string.h>

#define NATIVE_SPEC(extra)                                                                         \
    "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"}" extra "}"

/* One invocation, from the test's thread to the loop and back. */
typedef struct job {
    funcd_platform *p;
    funcd_invoke_req req;
    int rc;         /* what funcd_invoke returned */
    int done_calls; /* how often `done` ran (must be once) */
    int inside;     /* `done` ran inside funcd_invoke (it must not) */
    int status;
    char *error;
    char *body;
    char *content_type;
    char id[160];
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int over;
} job;

static void on_done(const funcd_invoke_res *res, void *arg)
{
    job *j = arg;
    pthread_mutex_lock(&j->lock);
    j->done_calls++;
    j->status = res->status;
    j->error = res->error ? strdup(res->error) : NULL;
    j->body = strndup(res->body, res->body_len);
    j->content_type = res->content_type ? strdup(res->content_type) : NULL;
    snprintf(j->id, sizeof(j->id), "%s", res->invocation_id ? res->invocation_id : "");
    j->over = 1;
    pthread_cond_broadcast(&j->cond);
    pthread_mutex_unlock(&j->lock);
}

static void on_loop(evutil_socket_t fd, short what, void *arg)
{
    job *j = arg;
    j->inside = 1;
    j->rc = funcd_invoke(funcd_platform_invoker(j->p), &j->req, on_done, j);
    pthread_mutex_lock(&j->lock);
    j->inside = j->done_calls > 0; /* `done` never inside the call */
    if (j->rc < 0) {
        j->over = 1;
        pthread_cond_broadcast(&j->cond);
    }
    pthread_mutex_unlock(&j->lock);
}

/* Runs `j->req` and waits (60 s at most) for its end. 0 when it ended. */
static int run(env *e, job *j)
{
    j->p = e->p;
    pthread_mutex_init(&j->lock, NULL);
    pthread_cond_init(&j->cond, NULL);
    struct timeval now = {0, 0};
    if (event_base_once(funcd_platform_loop(e->p), -1, EV_TIMEOUT, on_loop, j, &now) < 0)
        return -1;
    int64_t deadline = funcd_mono_ms() + 60000;
    pthread_mutex_lock(&j->lock);
    while (!j->over && funcd_mono_ms() < deadline) {
        pthread_mutex_unlock(&j->lock);
        env_sleep_ms(5);
        pthread_mutex_lock(&j->lock);
    }
    int over = j->over;
    pthread_mutex_unlock(&j->lock);
    env_sleep_ms(50); /* a second `done` would show here */
    return over ? 0 : -1;
}

static void job_free(job *j)
{
    free(j->error);
    free(j->body);
    free(j->content_type);
    pthread_mutex_destroy(&j->lock);
    pthread_cond_destroy(&j->cond);
}

/* From zero, then warm on the same worker: the id, path, headers and body
 * reach the worker as sent, and the answer comes back whole. */
SV_TEST(cold_then_warm)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(sv_create(e, "echo", NATIVE_SPEC(",\"scaling\":{\"minReplicas\":0,\"maxReplicas\":1}"),
                        dir),
              201);
    if (!sv_wait_ready(e, "echo", 10000))
        FAILF("not Ready: %.500s", e->r.body);
    CHECK_INT(sv_worker_count(e, "echo"), 0); /* cold: nothing runs yet */
    static const char *const headers[] = {"Authorization", "Bearer abc", "Content-Type", "text/plain",
                                          NULL};
    job j = {.req = {.ns = "default", .name = "echo", .path = "/first?x=1", .headers = headers,
                     .body = "payload", .body_len = 7, .invocation_id = "inv-cold-1"}};
    CHECK(run(e, &j) == 0);
    CHECK_INT(j.rc, 0);
    CHECK_INT(j.done_calls, 1);
    CHECK(!j.inside);
    if (j.status != 200)
        FAILF("cold: %d %s", j.status, j.error ? j.error : j.body);
    CHECK(j.error == NULL);
    CHECK_STR(j.id, "inv-cold-1");
    cJSON *a = env_keep(e, cJSON_Parse(j.body));
    CHECK(a != NULL);
    CHECK_STR(jstr(a, "method"), "POST");
    CHECK_STR(jstr(a, "path"), "/first?x=1");
    CHECK_STR(jstr(a, "body"), "payload");
    CHECK_STR(jstr(a, "invocationId"), "inv-cold-1");
    CHECK_STR(jstr(a, "authorization"), "Bearer abc"); /* no edge: headers pass as sent */
    CHECK(jstr(a, "traceparent") && strlen(jstr(a, "traceparent")) == 55);
    CHECK(j.content_type != NULL);
    const char *replica = jstr(a, "replica");
    CHECK(replica != NULL);
    job_free(&j);

    job w = {.req = {.ns = "default", .name = "echo", .method = "PUT", .path = ""}};
    CHECK(run(e, &w) == 0);
    CHECK_INT(w.done_calls, 1);
    CHECK_INT(w.status, 200);
    cJSON *b = env_keep(e, cJSON_Parse(w.body));
    CHECK_STR(jstr(b, "method"), "PUT");
    CHECK_STR(jstr(b, "path"), "/");
    CHECK_STR(jstr(b, "replica"), replica); /* warm: the same worker */
    CHECK_INT((int)strlen(w.id), 36);       /* a new id, a UUID */
    CHECK_STR(jstr(b, "invocationId"), w.id);
    job_free(&w);
    CHECK_INT(sv_worker_count(e, "echo"), 1);
}

SV_TEST(missing_function)
{
    job j = {.req = {.ns = "default", .name = "nobody"}};
    CHECK(run(e, &j) == 0);
    CHECK_INT(j.rc, 0);
    CHECK_INT(j.done_calls, 1);
    CHECK(!j.inside);
    CHECK_INT(j.status, 404);
    CHECK(j.error != NULL);
    CHECK_CONTAINS(j.error, "default/nobody");
    job_free(&j);
}

SV_TEST(timeout)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(sv_create(e, "hang", NATIVE_SPEC(",\"timeout\":\"500ms\""), dir), 201);
    if (!sv_wait_ready(e, "hang", 10000))
        FAILF("not Ready: %.500s", e->r.body);
    int64_t t0 = funcd_mono_ms();
    job j = {.req = {.ns = "default", .name = "hang", .path = "/sleep?ms=5000"}};
    CHECK(run(e, &j) == 0);
    int64_t took = funcd_mono_ms() - t0;
    CHECK_INT(j.done_calls, 1);
    CHECK_INT(j.status, 504);
    CHECK(j.error != NULL);
    CHECK_CONTAINS(j.error, "hang");
    CHECK(took < 4500); /* the spec's timeout ended it, not the handler */
    job_free(&j);
    /* The request's own timeout wins over the spec's. */
    job k = {.req = {.ns = "default", .name = "hang", .path = "/sleep?ms=300", .timeout_ms = 5000}};
    CHECK(run(e, &k) == 0);
    CHECK_INT(k.status, 200);
    job_free(&k);
}

SV_TEST(worker_dies)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(sv_create(e, "quitter",
                        NATIVE_SPEC(",\"scaling\":{\"minReplicas\":0,\"maxReplicas\":2}"), dir),
              201);
    if (!sv_wait_ready(e, "quitter", 10000))
        FAILF("not Ready: %.500s", e->r.body);
    job j = {.req = {.ns = "default", .name = "quitter", .path = "/exit?code=3"}};
    CHECK(run(e, &j) == 0);
    CHECK_INT(j.done_calls, 1);
    CHECK_INT(j.status, 502);
    CHECK(j.error != NULL);
    CHECK_CONTAINS(j.error, "replica quitter-1 exited with status 3");
    CHECK(!strstr(j.error, dir));
    job_free(&j);
    job k = {.req = {.ns = "default", .name = "quitter", .path = "/after"}};
    CHECK(run(e, &k) == 0);
    CHECK_INT(k.status, 200);
    cJSON *b = env_keep(e, cJSON_Parse(k.body));
    CHECK_STR(jstr(b, "replica"), "quitter-2"); /* one worker took the exit, not two */
    job_free(&k);
}

/* Bad requests are refused by the call itself: `done` never runs. */
SV_TEST(bad_requests)
{
    static const char *const crlf[] = {"X-Evil", "a\r\nX-Injected: 1", NULL};
    static const char *const odd[] = {"X-No-Value", NULL};
    const funcd_invoke_req bad[] = {
        {.ns = "default"},
        {.ns = "default", .name = "echo", .method = "GE T"},
        {.ns = "default", .name = "echo", .path = "no-slash"},
        {.ns = "default", .name = "echo", .path = "/a b"},
        {.ns = "default", .name = "echo", .headers = crlf},
        {.ns = "default", .name = "echo", .headers = odd},
        {.ns = "default", .name = "echo", .invocation_id = "id\nwith newline"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        job j = {.req = bad[i]};
        CHECK(run(e, &j) == 0);
        if (j.rc != FUNCD_EINVAL)
            FAILF("request %zu: rc %d, expected FUNCD_EINVAL", i, j.rc);
        CHECK_INT(j.done_calls, 0);
        job_free(&j);
    }
}

int main(int argc, char **argv)
{
    sv_init();
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    SV_RUN(only, ran, cold_then_warm);
    SV_RUN(only, ran, missing_function);
    SV_RUN(only, ran, timeout);
    SV_RUN(only, ran, worker_dies);
    SV_RUN(only, ran, bad_requests);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no test case named %s\n", only);
        return 1;
    }
    return HARNESS_END();
}
