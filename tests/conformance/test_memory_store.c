/* The memory store against the store conformance suite, plus what only it promises. */
#include <stdint.h>
#include <time.h>

#include "../harness.h"
#include "funcd/sys/store.h"
#include "store_suite.h"

static funcd_store *make_memory(void *payload)
{
    funcd_store *s = NULL;
    funcd_store_memory_new(&s, 0);
    return s;
}

static funcd_store *new_store(size_t history)
{
    funcd_store *s = NULL;
    return funcd_store_memory_new(&s, history) == 0 ? s : NULL;
}

static double seconds_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

TEST(conformance)
{
    CHECK_INT(funcd_store_conformance_run(make_memory, NULL, 1), 0);
}

typedef struct counting {
    int n;
    uint64_t first, last;
} counting;

static void count_cb(const funcd_store_event *ev, void *payload)
{
    counting *c = payload;
    if (!c->n++)
        c->first = ev->revision;
    c->last = ev->revision;
}

TEST(compacted_history_is_gone)
{
    funcd_store *s = new_store(8);
    funcd_store_watch *w = NULL;
    counting c = {0, 0, 0};
    CHECK(s != NULL);
    for (int i = 0; i < 20; i++)
        s->put(s, "/h/k", "v", 1, FUNCD_STORE_ANY, NULL);
    int gone = s->watch(s, "/h/", 11, count_cb, &c, &w);
    int gone_zero = s->watch(s, "", 0, count_cb, &c, &w);
    int rc = s->watch(s, "/h/", 12, count_cb, &c, &w);
    if (rc == 0)
        s->unwatch(s, w);
    s->free(s);
    CHECK_INT(gone, FUNCD_EGONE);
    CHECK_INT(gone_zero, FUNCD_EGONE);
    CHECK_CONTAINS(funcd_error_last()->message, "compacted");
    CHECK_INT(rc, 0);
    CHECK_INT(c.n, 8);
    CHECK_INT(c.first, 13);
    CHECK_INT(c.last, 20);
}

TEST(default_history_keeps_65536_events)
{
    funcd_store *s = new_store(0);
    funcd_store_watch *w = NULL;
    counting c = {0, 0, 0};
    CHECK(s != NULL);
    for (int i = 0; i < 65536 + 10; i++)
        s->put(s, "/d/k", "v", 1, FUNCD_STORE_ANY, NULL);
    int gone = s->watch(s, "/d/", 9, count_cb, &c, &w);
    int rc = s->watch(s, "/d/", 10, count_cb, &c, &w);
    if (rc == 0)
        s->unwatch(s, w);
    s->free(s);
    CHECK_INT(gone, FUNCD_EGONE);
    CHECK_INT(rc, 0);
    CHECK_INT(c.n, 65536);
}

typedef struct reentrant {
    funcd_store *s;
    int put_rc, get_rc;
    funcd_store_watch *nested;
    counting nested_count;
} reentrant;

/* Reads and watching are allowed from a callback; writes are refused. */
static void reentrant_cb(const funcd_store_event *ev, void *payload)
{
    reentrant *r = payload;
    funcd_store_value v = {0};
    r->put_rc = r->s->put(r->s, "/re/other", "x", 1, FUNCD_STORE_ANY, NULL);
    r->get_rc = r->s->get(r->s, ev->key, &v);
    free(v.value);
    if (!r->nested) /* replays this very event; must not see it again */
        r->s->watch(r->s, "/re/", ev->revision - 1, count_cb, &r->nested_count, &r->nested);
}

TEST(callbacks_may_read_and_watch_but_not_write)
{
    funcd_store *s = new_store(0);
    funcd_store_watch *w = NULL;
    reentrant r = {s, 0, 0, NULL, {0, 0, 0}};
    CHECK(s != NULL);
    int rc = s->watch(s, "/re/", 0, reentrant_cb, &r, &w);
    uint64_t rev = 0;
    int put = s->put(s, "/re/k", "v", 1, FUNCD_STORE_ANY, &rev);
    int revision_after = (int)s->revision(s);
    if (rc == 0)
        s->unwatch(s, w);
    if (r.nested)
        s->unwatch(s, r.nested);
    s->free(s);
    CHECK_INT(rc, 0);
    CHECK_INT(put, 0);
    CHECK_INT(r.put_rc, FUNCD_ESTATE);
    CHECK_INT(r.get_rc, 0);
    CHECK_INT(revision_after, 1);
    CHECK(r.nested != NULL);
    CHECK_INT(r.nested_count.n, 1);
    CHECK_INT(r.nested_count.first, rev);
}

TEST(invalid_arguments)
{
    funcd_store *s = new_store(0);
    funcd_store_value v = {0};
    CHECK(s != NULL);
    int null_key = s->put(s, NULL, "x", 1, FUNCD_STORE_ANY, NULL);
    int empty_key = s->get(s, "", &v);
    s->put(s, "/k", "x", 1, FUNCD_STORE_ANY, NULL);
    int del_absent = s->del(s, "/k", FUNCD_STORE_ABSENT, NULL);
    s->free(s);
    CHECK_INT(null_key, FUNCD_EINVAL);
    CHECK_INT(empty_key, FUNCD_EINVAL);
    CHECK_INT(del_absent, FUNCD_EINVAL);
    CHECK_INT(funcd_store_memory_new(NULL, 0), FUNCD_EINVAL);
}

static int count_kv(const funcd_store_kv *kv, void *payload)
{
    ++*(int *)payload;
    return 0;
}

TEST(fast_with_thousands_of_keys)
{
    funcd_store *s = new_store(0);
    CHECK(s != NULL);
    char key[64];
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 5000; i++) {
        int j = (i * 7919) % 5000; /* a permutation: insertions land all over the array */
        snprintf(key, sizeof(key), "/functions/ns%d/fn%05d", j % 7, j);
        s->put(s, key, "{\"spec\":{}}", 11, FUNCD_STORE_ANY, NULL);
    }
    double put_s = seconds_since(&t0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int found = 0;
    for (int i = 0; i < 100000; i++) {
        funcd_store_value v = {0};
        snprintf(key, sizeof(key), "/functions/ns%d/fn%05d", i % 5000 % 7, i % 5000);
        if (s->get(s, key, &v) == 0)
            found++;
        free(v.value);
    }
    double get_s = seconds_since(&t0);
    int listed = 0;
    s->list(s, "/functions/ns3/", count_kv, &listed, NULL);
    s->free(s);
    fprintf(stderr, "  5000 puts in %.3f s, 100000 gets in %.3f s (%.0f gets/s)\n", put_s, get_s,
            100000 / get_s);
    CHECK_INT(found, 100000);
    CHECK(listed > 0);
    CHECK(100000 / get_s > 20000);
}

int main(void)
{
    RUN(conformance);
    RUN(compacted_history_is_gone);
    RUN(default_history_keeps_65536_events);
    RUN(callbacks_may_read_and_watch_but_not_write);
    RUN(invalid_arguments);
    RUN(fast_with_thousands_of_keys);
    return HARNESS_END();
}
