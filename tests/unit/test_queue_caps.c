/*
 * The delivery queue's caps per namespace (lib/eventing/queue.h) against a
 * memory store, with no dispatcher (the loop never runs): what replaying
 * and purging dead letters does to the figures the caps are checked
 * against (review18 L-4). A replayed dead letter is Pending again, so it
 * takes a place (an anonymous one within the anonymous share) or is
 * refused; a purged one gives its bytes back.
 */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eventing/queue.h"
#include "funcd/funcd.h"
#include "funcd/sys/error.h"
#include "harness.h"
#include "port/blob.h"
#include "port/store.h"
#include "util/misc.h"

typedef struct bench {
    struct event_base *loop;
    funcd_store *store;
    funcd_blob *blob;
    funcd_queue *q;
} bench;

static int bench_up(bench *b, uint64_t max_pending, uint64_t max_bytes)
{
    memset(b, 0, sizeof(*b));
    b->loop = event_base_new();
    if (!b->loop || funcd_store_memory_new(&b->store, 0) < 0 || funcd_blob_memory_new(&b->blob) < 0)
        return -1;
    funcd_queue_config cfg = {.loop = b->loop, .store = b->store, .blob = b->blob,
                              .max_pending = max_pending, .max_bytes = max_bytes};
    return funcd_queue_new(&b->q, &cfg);
}

static void bench_down(bench *b)
{
    funcd_queue_free(b->q);
    if (b->blob)
        b->blob->free(b->blob);
    if (b->store)
        b->store->free(b->store);
    if (b->loop)
        event_base_free(b->loop);
}

/* A dead letter of namespace default as the dispatcher leaves it: the
 * invocation's record (DeadLettered, its last answer `response_len`
 * bytes), the dead letter, and its body. */
static int dead_letter_answered(bench *b, const char *id, int anonymous, size_t body_len,
                                size_t response_len)
{
    char rec[1024], key[256];
    snprintf(rec, sizeof(rec),
             "{\"id\":\"%s\",\"namespace\":\"default\",\"function\":\"f\",\"method\":\"POST\","
             "\"path\":\"\",\"headers\":[],\"delivery\":{\"attempts\":3,\"backoffInitialMs\":1000,"
             "\"backoffMaxMs\":60000,\"timeoutMs\":30000},\"bodyLen\":%zu,\"state\":"
             "\"DeadLettered\",\"attempts\":3,\"createdMs\":1,\"updatedMs\":2,\"finishedMs\":2,"
             "\"deadLetteredMs\":%lld,\"status\":500,\"responseLen\":%zu%s}",
             id, body_len, (long long)funcd_now_ms(), response_len,
             anonymous ? ",\"anonymous\":true" : "");
    snprintf(key, sizeof(key), "/invocations/default/%s", id);
    int rc = funcd_port_store_put(b->store, key, rec, strlen(rec), FUNCD_STORE_ANY, NULL);
    snprintf(key, sizeof(key), "/deadletters/default/%s", id);
    if (rc == 0)
        rc = funcd_port_store_put(b->store, key, rec, strlen(rec), FUNCD_STORE_ANY, NULL);
    if (rc == 0 && body_len) {
        char *body = malloc(body_len);
        memset(body, 'x', body_len);
        snprintf(key, sizeof(key), "invocations/default/%s/request", id);
        rc = body ? funcd_port_blob_put(b->blob, key, body, body_len) : FUNCD_ENOMEM;
        free(body);
    }
    return rc;
}

static int dead_letter(bench *b, const char *id, int anonymous, size_t body_len)
{
    return dead_letter_answered(b, id, anonymous, body_len, 0);
}

static int submit(bench *b, const char *id, int anonymous, size_t body_len)
{
    static char body[8192];
    funcd_queue_item item = {.ns = "default", .function = "f", .body = body,
                             .body_len = body_len, .id = id, .anonymous = anonymous};
    char out[128];
    return funcd_queue_submit(b->q, &item, out, sizeof(out));
}

static int on_anonymous_pending(const funcd_store_kv *kv, void *arg)
{
    char text[2048];
    snprintf(text, sizeof(text), "%.*s", (int)kv->len, (const char *)kv->value);
    *(int *)arg += strstr(text, "\"anonymous\":true") && strstr(text, "\"Pending\"");
    return 0;
}

/* Anonymous items Pending in the store (what the share bounds). */
static int anonymous_pending(bench *b)
{
    int n = 0;
    funcd_port_store_list(b->store, "/invocations/default/", on_anonymous_pending, &n, NULL);
    return n;
}

/* Two places of four for anonymous items: one submitted, one replayed,
 * and the next replay is refused (FUNCD_ENOSPC naming the share), and so
 * is the next anonymous submission; the tenant's own items still have
 * room. Before, replay took no place: both replays and the submission
 * after them passed, four anonymous items were Pending, over the share of
 * two, and the figures said two (nothing recounts an undercount). */
TEST(replay_takes_a_place)
{
    bench b;
    int rc = bench_up(&b, 4, 0);
    if (rc == 0)
        rc = dead_letter(&b, "dl-a", 1, 10);
    if (rc == 0)
        rc = dead_letter(&b, "dl-b", 1, 10);
    int first = rc == 0 ? submit(&b, "anon-1", 1, 10) : rc;
    int replay_a = rc == 0 ? funcd_queue_replay(b.q, "default", "dl-a") : rc;
    int replay_b = rc == 0 ? funcd_queue_replay(b.q, "default", "dl-b") : rc;
    char why[512];
    snprintf(why, sizeof(why), "%s", funcd_error_last()->message);
    int second = rc == 0 ? submit(&b, "anon-2", 1, 10) : rc;
    int own = rc == 0 ? submit(&b, "own-1", 0, 10) : rc;
    int pending = anonymous_pending(&b);
    funcd_store_value v = {0};
    int still_dead = funcd_port_store_get(b.store, "/deadletters/default/dl-b", &v) == 0;
    free(v.value);
    bench_down(&b);
    CHECK_INT(rc, 0);
    CHECK_INT(first, 0);
    CHECK_INT(replay_a, 0);
    CHECK_INT(replay_b, FUNCD_ENOSPC);
    CHECK_CONTAINS(why, "--queue-anonymous-share 50 percent of --queue-max-pending 4");
    CHECK(still_dead); /* refused: it stays a dead letter */
    CHECK_INT(second, FUNCD_ENOSPC);
    CHECK_INT(own, 0);
    CHECK_INT(pending, 2);
}

/* A purged dead letter gives its bytes back at once: a submission that
 * fits only without them is taken. Before, the figures kept them until a
 * recount (at most every FUNCD_QUEUE_RETRY_AFTER_S, and only when full),
 * and the submission was refused. */
TEST(purge_gives_bytes_back)
{
    bench b;
    int rc = bench_up(&b, 0, 10000);
    if (rc == 0)
        rc = dead_letter(&b, "dl-big", 0, 6000);
    int first = rc == 0 ? submit(&b, "s-1", 0, 3000) : rc; /* counts the store: the dead letter */
    int purged = rc == 0 ? funcd_queue_purge(b.q, "default", "dl-big") : rc;
    int second = rc == 0 ? submit(&b, "s-2", 0, 3000) : rc;
    char why[512];
    snprintf(why, sizeof(why), "%s", second ? funcd_error_last()->message : "");
    int third = rc == 0 ? submit(&b, "s-3", 0, 4000) : rc; /* and the cap still holds */
    bench_down(&b);
    CHECK_INT(rc, 0);
    CHECK_INT(first, 0);
    CHECK_INT(purged, 0);
    if (second != 0)
        FAILF("the submission after the purge: %d: %s", second, why);
    CHECK_INT(third, FUNCD_ENOSPC);
}

/* A replayed dead letter's figures are the new Pending record's and its
 * body's (review19 L-3): the old DeadLettered record and its last answer
 * (6,000 bytes) leave them, and a submission that fits only without them
 * is taken. Before, replay subtracted nothing: the figures kept about
 * 6,500 bytes the store no longer held, and the submission was refused
 * until a recount. */
TEST(replay_gives_old_bytes_back)
{
    bench b;
    int rc = bench_up(&b, 0, 10000);
    if (rc == 0)
        rc = dead_letter_answered(&b, "dl-answered", 0, 100, 6000);
    int first = rc == 0 ? submit(&b, "s-1", 0, 10) : rc; /* counts the store */
    int replayed = rc == 0 ? funcd_queue_replay(b.q, "default", "dl-answered") : rc;
    int second = rc == 0 ? submit(&b, "s-2", 0, 3500) : rc;
    char why[512];
    snprintf(why, sizeof(why), "%s", second ? funcd_error_last()->message : "");
    int third = rc == 0 ? submit(&b, "s-3", 0, 6000) : rc; /* and the cap still holds */
    bench_down(&b);
    CHECK_INT(rc, 0);
    CHECK_INT(first, 0);
    CHECK_INT(replayed, 0);
    if (second != 0)
        FAILF("the submission after the replay: %d: %s", second, why);
    CHECK_INT(third, FUNCD_ENOSPC);
}

int main(void)
{
    RUN(replay_takes_a_place);
    RUN(purge_gives_bytes_back);
    RUN(replay_gives_old_bytes_back);
    return HARNESS_END();
}
