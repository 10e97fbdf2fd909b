/*
 * The delivery queue (lib/eventing/queue.h) against real workers: an item
 * delivered once however often it is submitted; a failing function tried
 * exactly `attempts` times with growing gaps, then dead-lettered; the dead
 * letter replayed once the function is fixed; a 4xx answer final at once.
 *
 * Submissions and the outcome callback run on the platform loop (the test
 * schedules them there); outcomes are collected under a lock.
 */
#include "../harness.h"
#include "eventing/queue.h"
#include "invoke/invoke.h"
#include "test_serving_common.h"
#include "util/misc.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NATIVE_SPEC(extra)                                                                         \
    "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"}" extra "}"

#define MAX_SEEN 64

typedef struct seen {
    funcd_queue_outcome outcome;
    int status;
    char id[128];
    int64_t at_ms;
} seen;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static seen outcomes[MAX_SEEN];
static int n_outcomes;

static void on_outcome(const char *ns, const char *origin, const char *id,
                       funcd_queue_outcome outcome, int status, const char *error, void *arg)
{
    pthread_mutex_lock(&lock);
    if (n_outcomes < MAX_SEEN) {
        seen *s = &outcomes[n_outcomes++];
        s->outcome = outcome;
        s->status = status;
        snprintf(s->id, sizeof(s->id), "%s", id);
        s->at_ms = funcd_mono_ms();
    }
    pthread_mutex_unlock(&lock);
}

static int count(funcd_queue_outcome outcome)
{
    pthread_mutex_lock(&lock);
    int n = 0;
    for (int i = 0; i < n_outcomes; i++)
        n += outcomes[i].outcome == outcome;
    pthread_mutex_unlock(&lock);
    return n;
}

static int total(void)
{
    pthread_mutex_lock(&lock);
    int n = n_outcomes;
    pthread_mutex_unlock(&lock);
    return n;
}

/* Waits until `n` outcomes came (up to `ms`); 1 when they did. */
static int wait_outcomes(int n, int ms)
{
    int64_t end = funcd_mono_ms() + ms;
    while (total() < n && funcd_mono_ms() < end)
        env_sleep_ms(20);
    return total() >= n;
}

/* Work the test runs on the loop. */
typedef struct loop_job {
    funcd_platform *p;
    int kind; /* 0 subscribe, 1 submit, 2 replay */
    funcd_queue_item item;
    const char *replay_ns, *replay_id;
    int rc;
    char id[128];
    char error[512]; /* funcd_error_last() on the loop, when rc < 0 */
    int over;
} loop_job;

static void on_loop(evutil_socket_t fd, short what, void *arg)
{
    loop_job *j = arg;
    funcd_queue *q = funcd_platform_queue(j->p);
    if (j->kind == 0)
        j->rc = funcd_queue_on_outcome(q, "test/", on_outcome, NULL);
    else if (j->kind == 1)
        j->rc = funcd_queue_submit(q, &j->item, j->id, sizeof(j->id));
    else
        j->rc = funcd_queue_replay(q, j->replay_ns, j->replay_id);
    if (j->rc < 0)
        snprintf(j->error, sizeof(j->error), "%s", funcd_error_last()->message);
    pthread_mutex_lock(&lock);
    j->over = 1;
    pthread_mutex_unlock(&lock);
}

static int run_on_loop(env *e, loop_job *j)
{
    j->p = e->p;
    struct timeval now = {0, 0};
    if (event_base_once(funcd_platform_loop(e->p), -1, EV_TIMEOUT, on_loop, j, &now) < 0)
        return -1;
    for (int i = 0; i < 3000; i++) {
        pthread_mutex_lock(&lock);
        int over = j->over;
        pthread_mutex_unlock(&lock);
        if (over)
            return j->rc;
        env_sleep_ms(5);
    }
    return -1;
}

static int subscribe(env *e)
{
    loop_job j = {.kind = 0};
    return run_on_loop(e, &j);
}

static char last_error[512]; /* of the last submit that failed */

static int submit(env *e, const funcd_queue_item *item, char *id_out)
{
    loop_job j = {.kind = 1, .item = *item};
    int rc = run_on_loop(e, &j);
    snprintf(id_out, 128, "%s", j.id);
    snprintf(last_error, sizeof(last_error), "%s", j.error);
    return rc;
}

/* Submitted three times with one id: delivered once, with that id. */
SV_TEST(delivered_once)
{
    CHECK(subscribe(e) == 0);
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(sv_create(e, "echo", NATIVE_SPEC(""), dir), 201);
    if (!sv_wait_ready(e, "echo", 10000))
        FAILF("not Ready: %.500s", e->r.body);
    static const char *const headers[] = {"ce-id", "event-1", NULL};
    funcd_queue_item item = {.ns = "default", .function = "echo", .path = "/q", .headers = headers,
                             .body = "hello", .body_len = 5, .id = "event-1",
                             .origin = "test/once"};
    char id[128];
    for (int i = 0; i < 3; i++) {
        CHECK_INT(submit(e, &item, id), 0);
        CHECK_STR(id, "event-1");
    }
    CHECK(wait_outcomes(1, 20000));
    env_sleep_ms(1500); /* a second delivery would show by now (the dispatcher ticks each second) */
    CHECK_INT(total(), 1);
    CHECK_INT(outcomes[0].outcome, FUNCD_QUEUE_DELIVERED);
    CHECK_INT(outcomes[0].status, 200);
    CHECK_STR(outcomes[0].id, "event-1");
    /* An id unfit for keys is kept by its hash: the same id, the same item. */
    funcd_queue_item odd = item;
    odd.id = "uploads/a b.png#1";
    char id1[128], id2[128];
    CHECK_INT(submit(e, &odd, id1), 0);
    CHECK_INT(submit(e, &odd, id2), 0);
    CHECK_STR(id1, id2);
    CHECK(strncmp(id1, "h-", 2) == 0);
    CHECK(wait_outcomes(2, 20000));
    env_sleep_ms(1500);
    CHECK_INT(total(), 2);
    /* Bad items are refused. */
    funcd_queue_item bad = {.ns = "default", .function = "Not A Name"};
    CHECK_INT(submit(e, &bad, id), FUNCD_EINVAL);
}

/* 500 every time: exactly `attempts` attempts, each gap longer than the
 * last, then a dead letter; nothing after. Fixed, the replay succeeds. */
SV_TEST(retried_then_deadlettered_then_replayed)
{
    CHECK(subscribe(e) == 0);
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(sv_create(e, "broken", NATIVE_SPEC(",\"env\":{\"FIXTURE_FAIL\":\"500\"}"), dir), 201);
    if (!sv_wait_ready(e, "broken", 10000))
        FAILF("not Ready: %.500s", e->r.body);
    funcd_queue_item item = {.ns = "default", .function = "broken", .body = "b", .body_len = 1,
                             .origin = "test/broken",
                             .delivery = {.attempts = 4, .backoff_initial_ms = 300,
                                          .backoff_max_ms = 10000}};
    char id[128];
    CHECK_INT(submit(e, &item, id), 0);
    CHECK_INT((int)strlen(id), 36);
    CHECK(wait_outcomes(4, 30000));
    env_sleep_ms(3000); /* no fifth attempt */
    CHECK_INT(total(), 4);
    CHECK_INT(count(FUNCD_QUEUE_RETRIED), 3);
    CHECK_INT(outcomes[3].outcome, FUNCD_QUEUE_DEADLETTERED);
    int64_t last_gap = 0;
    for (int i = 0; i < 4; i++) {
        CHECK_INT(outcomes[i].status, 500);
        CHECK_STR(outcomes[i].id, id); /* the same id on every attempt */
        if (i > 0) {
            int64_t gap = outcomes[i].at_ms - outcomes[i - 1].at_ms;
            fprintf(stderr, "  gap %d: %lld ms\n", i, (long long)gap);
            CHECK(gap >= 200);    /* at least 0.8 of 300 ms, less a little for the exchange */
            CHECK(gap > last_gap); /* growing */
            last_gap = gap;
        }
    }
    /* Fixed: a new spec without FIXTURE_FAIL, then the replay. */
    CHECK(env_settle(e, FN_PATH("broken")));
    char spec[1024];
    snprintf(spec, sizeof(spec),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"broken\"},\"spec\":" NATIVE_SPEC("") "}",
             dir);
    CHECK_INT(REQ("PUT", FN_PATH("broken"), ADMIN_TOKEN, spec), 200);
    if (!sv_wait_ready(e, "broken", 10000))
        FAILF("not Ready after the fix: %.500s", e->r.body);
    loop_job j = {.kind = 2, .replay_ns = "default", .replay_id = id};
    CHECK_INT(run_on_loop(e, &j), 0);
    CHECK(wait_outcomes(5, 20000));
    CHECK_INT(outcomes[4].outcome, FUNCD_QUEUE_DELIVERED);
    CHECK_INT(outcomes[4].status, 200);
    CHECK_STR(outcomes[4].id, id);
    loop_job again = {.kind = 2, .replay_ns = "default", .replay_id = id};
    CHECK_INT(run_on_loop(e, &again), FUNCD_ENOTFOUND); /* it left the dead-letter queue */
}

/* A 4xx answer is the function's last word: one attempt, no dead letter. */
SV_TEST(client_error_is_final)
{
    CHECK(subscribe(e) == 0);
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(sv_create(e, "picky", NATIVE_SPEC(""), dir), 201);
    if (!sv_wait_ready(e, "picky", 10000))
        FAILF("not Ready: %.500s", e->r.body);
    funcd_queue_item item = {.ns = "default", .function = "picky", .path = "/status?code=422",
                             .origin = "test/picky",
                             .delivery = {.attempts = 3, .backoff_initial_ms = 100}};
    char id[128];
    CHECK_INT(submit(e, &item, id), 0);
    CHECK(wait_outcomes(1, 20000));
    env_sleep_ms(1500);
    CHECK_INT(total(), 1);
    CHECK_INT(outcomes[0].outcome, FUNCD_QUEUE_DELIVERED);
    CHECK_INT(outcomes[0].status, 422);
}

/* review17-controlplane H-1: the queue holds at most max_pending items not
 * final and max_bytes bytes per namespace; past a cap a submission is
 * FUNCD_ENOSPC naming it, and nothing of it is stored. Another namespace
 * has places of its own. */
SV_TEST_WITH(caps_per_namespace, funcd_with_queue_limits(2, 8192, UINT64_MAX), NULL)
{
    /* No such function: each item waits 10 s after its first attempt. */
    funcd_queue_item item = {.ns = "default", .function = "nobody", .body = "b", .body_len = 1,
                             .origin = "test/caps",
                             .delivery = {.attempts = 3, .backoff_initial_ms = 10000}};
    char id[128];
    CHECK_INT(submit(e, &item, id), 0);
    CHECK_INT(submit(e, &item, id), 0);
    item.id = "refused-1";
    CHECK_INT(submit(e, &item, id), FUNCD_ENOSPC);
    CHECK_CONTAINS(last_error, "--queue-max-pending 2");
    CHECK_INT(REQ("GET", NS("default") "/invocations/refused-1", DEV_TOKEN, NULL), 404);
    CHECK_INT(REQ("GET", NS("default") "/invocations", DEV_TOKEN, NULL), 200);
    CHECK_INT(cJSON_GetArraySize(jget(e->r.json, "items")), 2);
    /* Bytes: 7000 fit in another namespace, 2000 more do not. */
    static char big[7000];
    memset(big, 'x', sizeof(big));
    funcd_queue_item other = item;
    other.ns = "other";
    other.id = NULL;
    other.body = big;
    other.body_len = sizeof(big);
    CHECK_INT(submit(e, &other, id), 0);
    other.body_len = 2000;
    other.id = "refused-2";
    CHECK_INT(submit(e, &other, id), FUNCD_ENOSPC);
    CHECK_CONTAINS(last_error, "--queue-max-bytes 8192");
    CHECK_INT(REQ("GET", NS("other") "/invocations/refused-2", ADMIN_TOKEN, NULL), 404);
    /* A small one still fits there, and an id already queued adds nothing. */
    other.body_len = 10;
    other.id = "small";
    CHECK_INT(submit(e, &other, id), 0);
    CHECK_INT(submit(e, &other, id), 0);
}

/* review17-mends M-1: anonymous items (/async/ of an open function, an
 * unsigned webhook) hold at most their share of each cap (half: 2 of 4),
 * counted apart from the tenant's, and so again after a restart: the queue
 * counts a namespace from its records, which say which items are
 * anonymous. */
static void anonymous_share_body(env *e, const char *dir)
{
    char path[300];
    snprintf(path, sizeof(path), "%s/store.db", dir);
    funcd_store *s = NULL;
    if (funcd_store_sqlite_new(&s, path, NULL) < 0 ||
        env_up_with(e, s, funcd_with_queue_limits(4, 0, UINT64_MAX), NULL, NULL) < 0)
        FAILF("cannot start a platform: %s", funcd_error_last()->message);
    /* No such function: each item waits 10 s after its first attempt. */
    funcd_queue_item anon = {.ns = "default", .function = "nobody", .body = "b", .body_len = 1,
                             .origin = "test/anon", .anonymous = 1,
                             .delivery = {.attempts = 3, .backoff_initial_ms = 10000}};
    funcd_queue_item own = anon;
    own.anonymous = 0;
    char id[128];
    CHECK_INT(submit(e, &anon, id), 0);
    CHECK_INT(submit(e, &anon, id), 0);
    CHECK_INT(submit(e, &anon, id), FUNCD_ENOSPC);
    CHECK_CONTAINS(last_error, "--queue-anonymous-share 50 percent of --queue-max-pending 4");
    CHECK_INT(submit(e, &own, id), 0);
    env_down(e);
    s = NULL;
    if (funcd_store_sqlite_new(&s, path, NULL) < 0 ||
        env_up_with(e, s, funcd_with_queue_limits(4, 0, UINT64_MAX), NULL, NULL) < 0)
        FAILF("cannot start the platform again: %s", funcd_error_last()->message);
    CHECK_INT(submit(e, &anon, id), FUNCD_ENOSPC);
    CHECK_CONTAINS(last_error, "--queue-anonymous-share");
    CHECK_INT(submit(e, &own, id), 0);
    CHECK_INT(submit(e, &own, id), FUNCD_ENOSPC);
    CHECK_CONTAINS(last_error, "--queue-max-pending 4");
}

TEST(anonymous_share_after_a_restart)
{
    char dir[] = "/tmp/funcd-queue-XXXXXX";
    if (!mkdtemp(dir))
        FAILF("mkdtemp failed");
    env e;
    memset(&e, 0, sizeof(e));
    anonymous_share_body(&e, dir);
    env_down(&e);
    sv_cleanup();
    funcd_remove_tree(dir);
}

int main(int argc, char **argv)
{
    sv_init();
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    SV_RUN(only, ran, delivered_once);
    SV_RUN(only, ran, retried_then_deadlettered_then_replayed);
    SV_RUN(only, ran, client_error_is_final);
    SV_RUN(only, ran, caps_per_namespace);
    SV_RUN(only, ran, anonymous_share_after_a_restart);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no test case named %s\n", only);
        return 1;
    }
    return HARNESS_END();
}
