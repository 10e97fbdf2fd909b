/*
 * Proves the conformance suites can fail: each wrapper forwards to a memory
 * driver but breaks one promise, and the matching suite must report it. A
 * wrapper that breaks nothing must pass, so the failures come from the break.
 */
#include <pthread.h>

#include "../harness.h"
#include "blob_suite.h"
#include "bus_suite.h"
#include "funcd/sys/blob.h"
#include "funcd/sys/bus.h"
#include "funcd/sys/store.h"
#include "store_suite.h"

enum breakage {
    BREAK_NOTHING,
    BREAK_STORE_CAS,        /* put ignores the expected revision */
    BREAK_STORE_WATCH_DROP, /* watch drops every 100th event */
    BREAK_STORE_WATCH_DUP,  /* watch delivers every 100th event twice */
    BREAK_STORE_LIST,       /* list ignores the prefix */
    BREAK_BLOB_RANGE,       /* get ignores the range */
    BREAK_BUS_QUEUE,        /* a queue group delivers to every member */
};

/* ---- store ------------------------------------------------------------------------------ */

typedef struct wrapped_watch {
    struct wrapped_watch *next;
    funcd_store_watch *inner;
    funcd_store_watch_cb cb;
    void *payload;
    enum breakage brk;
    unsigned long seen; /* callbacks of one watch never overlap */
} wrapped_watch;

typedef struct broken_store {
    funcd_store base;
    funcd_store *inner;
    enum breakage brk;
    pthread_mutex_t mu;
    wrapped_watch *watches; /* freed with the store: a callback may unwatch itself */
} broken_store;

static broken_store *bs(funcd_store *s)
{
    return (broken_store *)s;
}

static int bs_get(funcd_store *s, const char *key, funcd_store_value *out)
{
    return bs(s)->inner->get(bs(s)->inner, key, out);
}

static int bs_put(funcd_store *s, const char *key, const void *value, size_t len, uint64_t expected,
                  uint64_t *revision)
{
    if (bs(s)->brk == BREAK_STORE_CAS)
        expected = FUNCD_STORE_ANY;
    return bs(s)->inner->put(bs(s)->inner, key, value, len, expected, revision);
}

static int bs_del(funcd_store *s, const char *key, uint64_t expected, uint64_t *revision)
{
    return bs(s)->inner->del(bs(s)->inner, key, expected, revision);
}

static int bs_list(funcd_store *s, const char *prefix, funcd_store_list_cb cb, void *payload,
                   uint64_t *revision)
{
    if (bs(s)->brk == BREAK_STORE_LIST)
        prefix = "";
    return bs(s)->inner->list(bs(s)->inner, prefix, cb, payload, revision);
}

static void trampoline(const funcd_store_event *ev, void *payload)
{
    wrapped_watch *ww = payload;
    int hundredth = ++ww->seen % 100 == 0;
    if (hundredth && ww->brk == BREAK_STORE_WATCH_DROP)
        return;
    ww->cb(ev, ww->payload);
    if (hundredth && ww->brk == BREAK_STORE_WATCH_DUP)
        ww->cb(ev, ww->payload);
}

static int bs_watch(funcd_store *s, const char *prefix, uint64_t after, funcd_store_watch_cb cb,
                    void *payload, funcd_store_watch **out)
{
    broken_store *b = bs(s);
    wrapped_watch *ww = calloc(1, sizeof(*ww));
    if (!ww)
        return FUNCD_ENOMEM;
    ww->cb = cb;
    ww->payload = payload;
    ww->brk = b->brk;
    pthread_mutex_lock(&b->mu);
    ww->next = b->watches;
    b->watches = ww;
    pthread_mutex_unlock(&b->mu);
    int rc = b->inner->watch(b->inner, prefix, after, trampoline, ww, &ww->inner);
    if (rc == 0)
        *out = (funcd_store_watch *)ww;
    return rc;
}

static void bs_unwatch(funcd_store *s, funcd_store_watch *w)
{
    wrapped_watch *ww = (wrapped_watch *)w;
    bs(s)->inner->unwatch(bs(s)->inner, ww->inner);
}

static uint64_t bs_revision(funcd_store *s)
{
    return bs(s)->inner->revision(bs(s)->inner);
}

static void bs_free(funcd_store *s)
{
    broken_store *b = bs(s);
    b->inner->free(b->inner);
    while (b->watches) {
        wrapped_watch *ww = b->watches;
        b->watches = ww->next;
        free(ww);
    }
    pthread_mutex_destroy(&b->mu);
    free(b);
}

static funcd_store *make_broken_store(void *payload)
{
    broken_store *b = calloc(1, sizeof(*b));
    if (!b || funcd_store_memory_new(&b->inner, 0) < 0) {
        free(b);
        return NULL;
    }
    b->brk = *(enum breakage *)payload;
    pthread_mutex_init(&b->mu, NULL);
    b->base = (funcd_store){.version = FUNCD_STORE_VERSION,
                            .name = "broken",
                            .get = bs_get,
                            .put = bs_put,
                            .del = bs_del,
                            .list = bs_list,
                            .watch = bs_watch,
                            .unwatch = bs_unwatch,
                            .revision = bs_revision,
                            .free = bs_free};
    return &b->base;
}

/* ---- blob ------------------------------------------------------------------------------- */

typedef struct broken_blob {
    funcd_blob base;
    funcd_blob *inner;
    enum breakage brk;
} broken_blob;

static funcd_blob *inner_blob(funcd_blob *b)
{
    return ((broken_blob *)b)->inner;
}

static int bb_put(funcd_blob *b, const char *key, const void *data, size_t len)
{
    return inner_blob(b)->put(inner_blob(b), key, data, len);
}

static int bb_get(funcd_blob *b, const char *key, uint64_t offset, uint64_t length, void **out,
                  size_t *out_len)
{
    if (((broken_blob *)b)->brk == BREAK_BLOB_RANGE) {
        offset = 0;
        length = FUNCD_BLOB_TO_END;
    }
    return inner_blob(b)->get(inner_blob(b), key, offset, length, out, out_len);
}

static int bb_stat(funcd_blob *b, const char *key, funcd_blob_stat *out)
{
    return inner_blob(b)->stat(inner_blob(b), key, out);
}

static int bb_list(funcd_blob *b, const char *prefix, funcd_blob_list_cb cb, void *payload)
{
    return inner_blob(b)->list(inner_blob(b), prefix, cb, payload);
}

static int bb_del(funcd_blob *b, const char *key)
{
    return inner_blob(b)->del(inner_blob(b), key);
}

static void bb_free(funcd_blob *b)
{
    inner_blob(b)->free(inner_blob(b));
    free(b);
}

static funcd_blob *make_broken_blob(void *payload)
{
    broken_blob *b = calloc(1, sizeof(*b));
    if (!b || funcd_blob_memory_new(&b->inner) < 0) {
        free(b);
        return NULL;
    }
    b->brk = *(enum breakage *)payload;
    b->base = (funcd_blob){.version = 1, /* the buffering put_open fallback */
                           .name = "broken",
                           .put = bb_put,
                           .get = bb_get,
                           .stat = bb_stat,
                           .list = bb_list,
                           .del = bb_del,
                           .free = bb_free};
    return &b->base;
}

/* ---- bus -------------------------------------------------------------------------------- */

typedef struct broken_bus {
    funcd_bus base;
    funcd_bus *inner;
    enum breakage brk;
} broken_bus;

static funcd_bus *inner_bus(funcd_bus *b)
{
    return ((broken_bus *)b)->inner;
}

static int bu_publish(funcd_bus *b, const char *subject, const void *data, size_t len)
{
    return inner_bus(b)->publish(inner_bus(b), subject, data, len);
}

static int bu_subscribe(funcd_bus *b, const char *subject, const char *queue_group,
                        funcd_bus_msg_cb cb, void *payload, funcd_bus_sub **out)
{
    if (((broken_bus *)b)->brk == BREAK_BUS_QUEUE && queue_group && queue_group[0])
        queue_group = NULL;
    return inner_bus(b)->subscribe(inner_bus(b), subject, queue_group, cb, payload, out);
}

static void bu_unsubscribe(funcd_bus *b, funcd_bus_sub *sub)
{
    inner_bus(b)->unsubscribe(inner_bus(b), sub);
}

static void bu_free(funcd_bus *b)
{
    inner_bus(b)->free(inner_bus(b));
    free(b);
}

static funcd_bus *make_broken_bus(void *payload)
{
    broken_bus *b = calloc(1, sizeof(*b));
    if (!b || funcd_bus_memory_new(&b->inner) < 0) {
        free(b);
        return NULL;
    }
    b->brk = *(enum breakage *)payload;
    b->base = (funcd_bus){.version = FUNCD_BUS_VERSION,
                          .name = "broken",
                          .publish = bu_publish,
                          .subscribe = bu_subscribe,
                          .unsubscribe = bu_unsubscribe,
                          .free = bu_free};
    return &b->base;
}

/* ---- the checks ------------------------------------------------------------------------- */

static int store_failures(enum breakage brk)
{
    int failed = funcd_store_conformance_run(make_broken_store, &brk, 0);
    fprintf(stderr, "  store suite: %d failed cases\n", failed);
    return failed;
}

TEST(faithful_wrappers_pass)
{
    enum breakage none = BREAK_NOTHING;
    CHECK_INT(funcd_store_conformance_run(make_broken_store, &none, 1), 0);
    CHECK_INT(funcd_blob_conformance_run(make_broken_blob, &none, 1), 0);
    CHECK_INT(funcd_bus_conformance_run(make_broken_bus, &none, 1), 0);
}

TEST(store_put_ignoring_expected_is_caught)
{
    CHECK(store_failures(BREAK_STORE_CAS) > 0);
}

TEST(store_watch_dropping_events_is_caught)
{
    CHECK(store_failures(BREAK_STORE_WATCH_DROP) > 0);
}

TEST(store_watch_duplicating_events_is_caught)
{
    CHECK(store_failures(BREAK_STORE_WATCH_DUP) > 0);
}

TEST(store_list_ignoring_prefix_is_caught)
{
    CHECK(store_failures(BREAK_STORE_LIST) > 0);
}

TEST(blob_get_ignoring_range_is_caught)
{
    enum breakage brk = BREAK_BLOB_RANGE;
    int failed = funcd_blob_conformance_run(make_broken_blob, &brk, 0);
    fprintf(stderr, "  blob suite: %d failed cases\n", failed);
    CHECK(failed > 0);
}

TEST(bus_queue_group_fanning_out_is_caught)
{
    enum breakage brk = BREAK_BUS_QUEUE;
    int failed = funcd_bus_conformance_run(make_broken_bus, &brk, 0);
    fprintf(stderr, "  bus suite: %d failed cases\n", failed);
    CHECK(failed > 0);
}

int main(void)
{
    RUN(faithful_wrappers_pass);
    RUN(store_put_ignoring_expected_is_caught);
    RUN(store_watch_dropping_events_is_caught);
    RUN(store_watch_duplicating_events_is_caught);
    RUN(store_list_ignoring_prefix_is_caught);
    RUN(blob_get_ignoring_range_is_caught);
    RUN(bus_queue_group_fanning_out_is_caught);
    return HARNESS_END();
}
