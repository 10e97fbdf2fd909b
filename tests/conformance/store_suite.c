/* The store conformance suite: see store_suite.h. */
#include "store_suite.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "conformance.h"

#define ANY FUNCD_STORE_ANY
#define ABSENT FUNCD_STORE_ABSENT

static int put_str(funcd_store *s, const char *key, const char *value, uint64_t expected,
                   uint64_t *rev)
{
    return s->put(s, key, value, strlen(value), expected, rev);
}

/* ---- a watch callback that records every event ---------------------------------------- */

typedef struct rec_event {
    int type;
    char *key;
    char *value;
    size_t len;
    uint64_t revision, create_revision;
} rec_event;

typedef struct recorder {
    pthread_mutex_t mu;
    rec_event *evs;
    size_t n, cap;
    int oom;
    atomic_int inflight, overlapped; /* the callback must never run concurrently with itself */
    /* For the unwatch-from-inside case: end the watch on the Nth event. */
    funcd_store *store;
    _Atomic(funcd_store_watch *) self;
    size_t unwatch_at;
    atomic_int unwatched;
} recorder;

static void recorder_init(recorder *r, funcd_store *s)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    r->store = s;
}

static void recorder_free(recorder *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->evs[i].key);
        free(r->evs[i].value);
    }
    free(r->evs);
    pthread_mutex_destroy(&r->mu);
}

static size_t record(recorder *r, const funcd_store_event *ev)
{
    pthread_mutex_lock(&r->mu);
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 64;
        rec_event *p = realloc(r->evs, cap * sizeof(*p));
        if (!p) {
            r->oom = 1;
            pthread_mutex_unlock(&r->mu);
            return 0;
        }
        r->evs = p;
        r->cap = cap;
    }
    rec_event *e = &r->evs[r->n];
    e->type = (int)ev->type;
    e->key = strdup(ev->key);
    e->value = malloc(ev->len + 1);
    if (e->value) {
        memcpy(e->value, ev->value, ev->len);
        e->value[ev->len] = '\0';
    }
    e->len = ev->len;
    e->revision = ev->revision;
    e->create_revision = ev->create_revision;
    size_t n = ++r->n;
    pthread_mutex_unlock(&r->mu);
    return n;
}

static void record_cb(const funcd_store_event *ev, void *payload)
{
    recorder *r = payload;
    if (atomic_fetch_add(&r->inflight, 1) != 0)
        atomic_store(&r->overlapped, 1);
    size_t n = record(r, ev);
    if (r->unwatch_at && n == r->unwatch_at) {
        funcd_store_watch *w = atomic_load(&r->self);
        if (w) {
            r->store->unwatch(r->store, w);
            atomic_store(&r->unwatched, 1);
        }
    }
    atomic_fetch_sub(&r->inflight, 1);
}

static size_t rec_count(recorder *r)
{
    pthread_mutex_lock(&r->mu);
    size_t n = r->n;
    pthread_mutex_unlock(&r->mu);
    return n;
}

static uint64_t rec_last_revision(recorder *r)
{
    pthread_mutex_lock(&r->mu);
    uint64_t rev = r->n ? r->evs[r->n - 1].revision : 0;
    pthread_mutex_unlock(&r->mu);
    return rev;
}

typedef struct rec_target {
    recorder *r;
    size_t count;
    uint64_t revision;
} rec_target;

static int reached_count(void *arg)
{
    rec_target *t = arg;
    return rec_count(t->r) >= t->count;
}

static int reached_revision(void *arg)
{
    rec_target *t = arg;
    return rec_last_revision(t->r) >= t->revision;
}

/* Waits for `count` events, then a little longer to catch extra ones. */
static size_t wait_events(recorder *r, size_t count)
{
    rec_target t = {r, count, 0};
    if (conf_wait(reached_count, &t, CONF_WAIT_MS))
        conf_sleep_ms(CONF_SETTLE_MS);
    return rec_count(r);
}

/* Compares a recorded event; returns a reason or NULL. */
static const char *event_differs(const rec_event *e, int type, const char *key, const char *value,
                                 uint64_t revision, uint64_t create_revision)
{
    if (e->type != type)
        return "type";
    if (!e->key || strcmp(e->key, key) != 0)
        return "key";
    if (!e->value || e->len != strlen(value) || memcmp(e->value, value, e->len) != 0)
        return "value";
    if (e->revision != revision)
        return "revision";
    if (e->create_revision != create_revision)
        return "create_revision";
    return NULL;
}

#define EXPECT_EVENT(r, i, type_, key_, value_, rev_, crev_)                                       \
    do {                                                                                           \
        const char *why_ = event_differs(&(r)->evs[i], type_, key_, value_, rev_, crev_);          \
        if (why_) {                                                                                \
            conf_fail(cc, __FILE__, __LINE__, "event %zu (%s rev %" PRIu64 ") differs in %s",      \
                      (size_t)(i), (r)->evs[i].key, (r)->evs[i].revision, why_);                   \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

/* `revision` is optional (version 1): without it, the revision a list's
 * snapshot reports, which every store must give. */
static int stop_listing(const funcd_store_kv *kv, void *payload)
{
    (void)kv;
    (void)payload;
    return 1;
}

static uint64_t store_rev(funcd_store *s)
{
    uint64_t rev = 0;
    if (s->revision)
        return s->revision(s);
    return s->list(s, "", stop_listing, NULL, &rev) < 0 ? 0 : rev;
}

/* ---- basic reads and writes ----------------------------------------------------------- */

static void case_put_get(conf_case *cc, funcd_store *s)
{
    static const char bin[] = {'a', '\0', 'b', (char)0xff};
    funcd_store_value v = {0};
    uint64_t rev = 0;
    EXPECT_INT(store_rev(s), 0);
    EXPECT_OK(put_str(s, "/kv/a", "hello", ANY, &rev));
    EXPECT_INT(rev, 1);
    EXPECT_INT(store_rev(s), rev);
    EXPECT_OK(s->get(s, "/kv/a", &v));
    EXPECT_MEM(v.value, v.len, "hello", 5);
    EXPECT(((char *)v.value)[5] == '\0');
    EXPECT_INT(v.revision, rev);
    EXPECT_INT(v.create_revision, rev);
    free(v.value);
    v.value = NULL;

    EXPECT_OK(s->put(s, "/kv/bin", bin, sizeof(bin), ANY, &rev));
    EXPECT_OK(s->get(s, "/kv/bin", &v));
    EXPECT_MEM(v.value, v.len, bin, sizeof(bin));
    EXPECT(((char *)v.value)[sizeof(bin)] == '\0');
    free(v.value);
    v.value = NULL;

    EXPECT_OK(s->put(s, "/kv/empty", "", 0, ANY, &rev));
    EXPECT_OK(s->get(s, "/kv/empty", &v));
    EXPECT(v.value != NULL);
    EXPECT_INT(v.len, 0);
    EXPECT(((char *)v.value)[0] == '\0');
done:
    free(v.value);
}

static void case_revisions_monotonic(conf_case *cc, funcd_store *s)
{
    static const struct {
        int del;
        const char *key;
    } steps[] = {{0, "/r/a"}, {0, "/r/b"}, {0, "/r/a"}, {1, "/r/b"}, {0, "/r/c"},
                 {1, "/r/a"}, {0, "/r/b"}, {0, "/r/a"}, {1, "/r/c"}, {0, "/r/c"}};
    uint64_t last = store_rev(s), rev = 0;
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        rev = 0;
        if (steps[i].del)
            EXPECT_OK(s->del(s, steps[i].key, ANY, &rev));
        else
            EXPECT_OK(put_str(s, steps[i].key, "x", ANY, &rev));
        EXPECT_INT(rev, last + 1);
        EXPECT_INT(store_rev(s), rev);
        last = rev;
    }
    /* Failed writes do not move the revision. */
    EXPECT_RC(put_str(s, "/r/a", "y", ABSENT, NULL), FUNCD_EEXISTS);
    EXPECT_RC(s->del(s, "/r/missing", ANY, NULL), FUNCD_ENOTFOUND);
    EXPECT_RC(put_str(s, "/r/a", "y", last + 50, NULL), FUNCD_ECONFLICT);
    EXPECT_INT(store_rev(s), last);
    /* A NULL revision pointer is allowed. */
    EXPECT_OK(put_str(s, "/r/a", "z", ANY, NULL));
    EXPECT_INT(store_rev(s), last + 1);
done:
    return;
}

static void case_create_absent(conf_case *cc, funcd_store *s)
{
    funcd_store_value v = {0};
    uint64_t rev = 0;
    EXPECT_OK(put_str(s, "/c/x", "one", ABSENT, &rev));
    EXPECT_RC(put_str(s, "/c/x", "two", ABSENT, NULL), FUNCD_EEXISTS);
    EXPECT_INT(funcd_error_last()->code, FUNCD_EEXISTS);
    EXPECT(strstr(funcd_error_last()->message, "/c/x") != NULL);
    EXPECT_INT(store_rev(s), rev);
    EXPECT_OK(s->get(s, "/c/x", &v));
    EXPECT_MEM(v.value, v.len, "one", 3);
    EXPECT_INT(v.revision, rev);
done:
    free(v.value);
}

static void case_cas_stale(conf_case *cc, funcd_store *s)
{
    funcd_store_value v = {0};
    uint64_t r1 = 0, r2 = 0;
    EXPECT_OK(put_str(s, "/cas/k", "v1", ANY, &r1));
    EXPECT_OK(put_str(s, "/cas/k", "v2", r1, &r2));
    EXPECT_INT(r2, r1 + 1);
    EXPECT_RC(put_str(s, "/cas/k", "v3", r1, NULL), FUNCD_ECONFLICT);
    EXPECT(strstr(funcd_error_last()->message, "/cas/k") != NULL);
    EXPECT_RC(put_str(s, "/cas/k", "v3", r2 + 100, NULL), FUNCD_ECONFLICT);
    EXPECT_RC(s->del(s, "/cas/k", r1, NULL), FUNCD_ECONFLICT);
    EXPECT_INT(store_rev(s), r2);
    EXPECT_OK(s->get(s, "/cas/k", &v));
    EXPECT_MEM(v.value, v.len, "v2", 2);
    EXPECT_INT(v.revision, r2);
    EXPECT_INT(v.create_revision, r1);
done:
    free(v.value);
}

static void case_cas_missing(conf_case *cc, funcd_store *s)
{
    uint64_t r1 = 0;
    EXPECT_OK(put_str(s, "/m/other", "x", ANY, &r1));
    EXPECT_RC(put_str(s, "/m/none", "x", r1, NULL), FUNCD_ENOTFOUND);
    EXPECT(strstr(funcd_error_last()->message, "/m/none") != NULL);
    EXPECT_RC(s->del(s, "/m/none", r1, NULL), FUNCD_ENOTFOUND);
    EXPECT_RC(s->del(s, "/m/none", ANY, NULL), FUNCD_ENOTFOUND);
    EXPECT_INT(store_rev(s), r1);
done:
    return;
}

static void case_unconditional_put(conf_case *cc, funcd_store *s)
{
    funcd_store_value v = {0};
    uint64_t r1 = 0, r2 = 0;
    EXPECT_OK(put_str(s, "/u/k", "first", ANY, &r1));
    EXPECT_OK(put_str(s, "/u/k", "second!", ANY, &r2));
    EXPECT_INT(r2, r1 + 1);
    EXPECT_OK(s->get(s, "/u/k", &v));
    EXPECT_MEM(v.value, v.len, "second!", 7);
    EXPECT_INT(v.revision, r2);
    EXPECT_INT(v.create_revision, r1);
done:
    free(v.value);
}

static void case_delete(conf_case *cc, funcd_store *s)
{
    funcd_store_value v = {0};
    uint64_t r1 = 0, rd = 0, r2 = 0, r3 = 0;
    EXPECT_OK(put_str(s, "/d/k", "x", ANY, &r1));
    EXPECT_OK(s->del(s, "/d/k", ANY, &rd));
    EXPECT_INT(rd, r1 + 1);
    EXPECT_RC(s->get(s, "/d/k", &v), FUNCD_ENOTFOUND);
    EXPECT_RC(s->del(s, "/d/k", ANY, NULL), FUNCD_ENOTFOUND);

    EXPECT_OK(put_str(s, "/d/k2", "a", ANY, &r2));
    EXPECT_OK(put_str(s, "/d/k2", "b", ANY, &r3));
    EXPECT_RC(s->del(s, "/d/k2", r2, NULL), FUNCD_ECONFLICT);
    EXPECT_OK(s->get(s, "/d/k2", &v));
    free(v.value);
    v.value = NULL;
    EXPECT_OK(s->del(s, "/d/k2", r3, &rd));
    EXPECT_INT(rd, r3 + 1);
    EXPECT_RC(s->get(s, "/d/k2", &v), FUNCD_ENOTFOUND);

    /* "must be absent" makes no sense for a delete. */
    EXPECT_OK(put_str(s, "/d/k3", "c", ANY, NULL));
    EXPECT_RC(s->del(s, "/d/k3", ABSENT, NULL), FUNCD_EINVAL);
    EXPECT_OK(s->get(s, "/d/k3", &v));
done:
    free(v.value);
}

static void case_get_missing(conf_case *cc, funcd_store *s)
{
    funcd_store_value v = {0};
    EXPECT_RC(s->get(s, "/nope/x", &v), FUNCD_ENOTFOUND);
    EXPECT_INT(funcd_error_last()->code, FUNCD_ENOTFOUND);
    EXPECT(strstr(funcd_error_last()->message, "/nope/x") != NULL);
    EXPECT_OK(put_str(s, "/nope/y", "1", ANY, NULL));
    EXPECT_OK(s->del(s, "/nope/y", ANY, NULL));
    EXPECT_RC(s->get(s, "/nope/y", &v), FUNCD_ENOTFOUND);
    /* A prefix of an existing key is not a key. */
    EXPECT_OK(put_str(s, "/nope/zz", "1", ANY, NULL));
    EXPECT_RC(s->get(s, "/nope/z", &v), FUNCD_ENOTFOUND);
done:
    return;
}

/* ---- listing --------------------------------------------------------------------------- */

#define MAX_LISTED 32

typedef struct listing {
    char *keys[MAX_LISTED];
    uint64_t revs[MAX_LISTED], crevs[MAX_LISTED];
    size_t n;
    size_t stop_after; /* 0: never stop */
    int bad_value;     /* the value was not "v:" + key */
} listing;

static int listing_cb(const funcd_store_kv *kv, void *payload)
{
    listing *l = payload;
    char want[128];
    snprintf(want, sizeof(want), "v:%s", kv->key);
    if (kv->len != strlen(want) || memcmp(kv->value, want, kv->len) != 0)
        l->bad_value = 1;
    if (l->n < MAX_LISTED) {
        l->revs[l->n] = kv->revision;
        l->crevs[l->n] = kv->create_revision;
        l->keys[l->n++] = strdup(kv->key);
    }
    return l->stop_after && l->n >= l->stop_after;
}

static void listing_reset(listing *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->keys[i]);
    memset(l, 0, sizeof(*l));
}

/* NULL if the listed keys are exactly `want`, in order; else a reason. */
static const char *listing_differs(const listing *l, const char *const *want, size_t n)
{
    if (l->bad_value)
        return "a listed value does not belong to its key";
    if (l->n != n)
        return "wrong number of keys";
    for (size_t i = 0; i < n; i++)
        if (!l->keys[i] || strcmp(l->keys[i], want[i]) != 0)
            return "wrong key or order";
    return NULL;
}

#define EXPECT_LISTING(l, ...)                                                                     \
    do {                                                                                           \
        static const char *const want_[] = {__VA_ARGS__};                                          \
        const char *why_ = listing_differs(l, want_, sizeof(want_) / sizeof(want_[0]));            \
        if (why_) {                                                                                \
            conf_fail(cc, __FILE__, __LINE__, "listing %s: %s (got %zu keys, first \"%s\")", #l,   \
                      why_, (l)->n, (l)->n ? (l)->keys[0] : "");                                   \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

static int put_self_named(funcd_store *s, const char *key, uint64_t *rev)
{
    char value[128];
    snprintf(value, sizeof(value), "v:%s", key);
    return put_str(s, key, value, ANY, rev);
}

static void case_list_prefix(conf_case *cc, funcd_store *s)
{
    static const char *const keys[] = {"/a/2", "/ab/1", "/a/10",       "/b/1",
                                       "/a",   "/a/1",  "/a/\xc3\xa9", "/a/z"};
    listing l = {0};
    uint64_t rev = 0, list_rev = 0, rev_a1 = 0;
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        EXPECT_OK(put_self_named(s, keys[i], &rev));
        if (strcmp(keys[i], "/a/1") == 0)
            rev_a1 = rev;
    }
    EXPECT_OK(s->list(s, "/a/", listing_cb, &l, &list_rev));
    EXPECT_LISTING(&l, "/a/1", "/a/10", "/a/2", "/a/z", "/a/\xc3\xa9");
    EXPECT_INT(list_rev, rev);
    EXPECT_INT(l.revs[0], rev_a1);
    EXPECT_INT(l.crevs[0], rev_a1);
    listing_reset(&l);

    EXPECT_OK(s->list(s, "/ab/", listing_cb, &l, NULL));
    EXPECT_LISTING(&l, "/ab/1");
    listing_reset(&l);

    EXPECT_OK(s->list(s, "/a", listing_cb, &l, NULL));
    EXPECT_LISTING(&l, "/a", "/a/1", "/a/10", "/a/2", "/a/z", "/a/\xc3\xa9", "/ab/1");
    listing_reset(&l);

    EXPECT_OK(s->list(s, "", listing_cb, &l, NULL));
    EXPECT_LISTING(&l, "/a", "/a/1", "/a/10", "/a/2", "/a/z", "/a/\xc3\xa9", "/ab/1", "/b/1");
    listing_reset(&l);

    list_rev = 0;
    EXPECT_OK(s->list(s, "/zzz/", listing_cb, &l, &list_rev));
    EXPECT_INT(l.n, 0);
    EXPECT_INT(list_rev, rev);

    l.stop_after = 2;
    EXPECT_OK(s->list(s, "/a/", listing_cb, &l, NULL));
    EXPECT_LISTING(&l, "/a/1", "/a/10");
done:
    listing_reset(&l);
}

static void case_list_snapshot_revision(conf_case *cc, funcd_store *s)
{
    listing l = {0};
    uint64_t list_rev = 99, rev = 0;
    EXPECT_OK(s->list(s, "/", listing_cb, &l, &list_rev));
    EXPECT_INT(list_rev, 0);
    EXPECT_OK(put_self_named(s, "/s/1", &rev));
    EXPECT_OK(put_self_named(s, "/other", &rev));
    EXPECT_OK(s->list(s, "/s/", listing_cb, &l, &list_rev));
    EXPECT_INT(list_rev, rev); /* the store's revision, not the newest listed key's */
    EXPECT_INT(l.n, 1);
    listing_reset(&l);
    EXPECT_OK(s->del(s, "/s/1", ANY, &rev));
    EXPECT_OK(s->list(s, "/s/", listing_cb, &l, &list_rev));
    EXPECT_INT(list_rev, rev);
    EXPECT_INT(l.n, 0);
done:
    listing_reset(&l);
}

/* ---- watching -------------------------------------------------------------------------- */

/* Five writes under /w/: r[0..4]. */
static int five_writes(funcd_store *s, uint64_t r[5])
{
    int rc;
    if ((rc = put_str(s, "/w/a", "1", ANY, &r[0])) < 0 ||
        (rc = put_str(s, "/w/b", "2", ANY, &r[1])) < 0 ||
        (rc = put_str(s, "/w/a", "3", ANY, &r[2])) < 0 ||
        (rc = s->del(s, "/w/b", ANY, &r[3])) < 0 || (rc = put_str(s, "/w/c", "5", ANY, &r[4])) < 0)
        return rc;
    return 0;
}

static void case_watch_from_zero(conf_case *cc, funcd_store *s)
{
    recorder r;
    recorder_init(&r, s);
    funcd_store_watch *w = NULL;
    uint64_t rv[5], r6 = 0;
    EXPECT_OK(five_writes(s, rv));
    EXPECT_OK(s->watch(s, "", 0, record_cb, &r, &w));
    EXPECT_INT(rec_count(&r), 5); /* replayed before watch returns */
    EXPECT_EVENT(&r, 0, FUNCD_STORE_EVENT_PUT, "/w/a", "1", rv[0], rv[0]);
    EXPECT_EVENT(&r, 1, FUNCD_STORE_EVENT_PUT, "/w/b", "2", rv[1], rv[1]);
    EXPECT_EVENT(&r, 2, FUNCD_STORE_EVENT_PUT, "/w/a", "3", rv[2], rv[0]);
    EXPECT_EVENT(&r, 3, FUNCD_STORE_EVENT_DELETE, "/w/b", "2", rv[3], rv[1]);
    EXPECT_EVENT(&r, 4, FUNCD_STORE_EVENT_PUT, "/w/c", "5", rv[4], rv[4]);
    EXPECT_OK(put_str(s, "/w/d", "6", ANY, &r6));
    EXPECT_INT(wait_events(&r, 6), 6);
    EXPECT_EVENT(&r, 5, FUNCD_STORE_EVENT_PUT, "/w/d", "6", r6, r6);
    EXPECT_INT(atomic_load(&r.overlapped), 0);
done:
    if (w)
        s->unwatch(s, w);
    recorder_free(&r);
}

static void case_watch_from_middle(conf_case *cc, funcd_store *s)
{
    recorder r, now;
    recorder_init(&r, s);
    recorder_init(&now, s);
    funcd_store_watch *w = NULL, *wnow = NULL;
    uint64_t rv[5], r6 = 0;
    EXPECT_OK(five_writes(s, rv));
    EXPECT_OK(s->watch(s, "/w/", rv[1], record_cb, &r, &w));
    EXPECT_INT(rec_count(&r), 3);
    EXPECT_EVENT(&r, 0, FUNCD_STORE_EVENT_PUT, "/w/a", "3", rv[2], rv[0]);
    EXPECT_EVENT(&r, 1, FUNCD_STORE_EVENT_DELETE, "/w/b", "2", rv[3], rv[1]);
    EXPECT_EVENT(&r, 2, FUNCD_STORE_EVENT_PUT, "/w/c", "5", rv[4], rv[4]);
    /* From the current revision: nothing replayed, then live events. */
    EXPECT_OK(s->watch(s, "/w/", store_rev(s), record_cb, &now, &wnow));
    EXPECT_INT(rec_count(&now), 0);
    EXPECT_OK(put_str(s, "/w/e", "7", ANY, &r6));
    EXPECT_INT(wait_events(&now, 1), 1);
    EXPECT_EVENT(&now, 0, FUNCD_STORE_EVENT_PUT, "/w/e", "7", r6, r6);
    EXPECT_INT(wait_events(&r, 4), 4);
done:
    if (w)
        s->unwatch(s, w);
    if (wnow)
        s->unwatch(s, wnow);
    recorder_free(&r);
    recorder_free(&now);
}

static void case_watch_prefix(conf_case *cc, funcd_store *s)
{
    recorder r;
    recorder_init(&r, s);
    funcd_store_watch *w = NULL;
    uint64_t r1 = 0, r2 = 0, r3 = 0;
    EXPECT_OK(put_str(s, "/p/a/1", "x", ANY, &r1));
    EXPECT_OK(put_str(s, "/p/ab/1", "x", ANY, NULL));
    EXPECT_OK(put_str(s, "/p/b", "x", ANY, NULL));
    EXPECT_OK(put_str(s, "/p/a", "x", ANY, NULL));
    EXPECT_OK(put_str(s, "/p/a/2", "y", ANY, &r2));
    EXPECT_OK(s->watch(s, "/p/a/", 0, record_cb, &r, &w));
    EXPECT_INT(rec_count(&r), 2);
    EXPECT_EVENT(&r, 0, FUNCD_STORE_EVENT_PUT, "/p/a/1", "x", r1, r1);
    EXPECT_EVENT(&r, 1, FUNCD_STORE_EVENT_PUT, "/p/a/2", "y", r2, r2);
    EXPECT_OK(put_str(s, "/p/ab/2", "x", ANY, NULL));
    EXPECT_OK(s->del(s, "/p/b", ANY, NULL));
    EXPECT_OK(put_str(s, "/p/a/3", "z", ANY, &r3));
    EXPECT_INT(wait_events(&r, 3), 3);
    EXPECT_EVENT(&r, 2, FUNCD_STORE_EVENT_PUT, "/p/a/3", "z", r3, r3);
done:
    if (w)
        s->unwatch(s, w);
    recorder_free(&r);
}

static void case_delete_event_prev_value(conf_case *cc, funcd_store *s)
{
    recorder r, live;
    recorder_init(&r, s);
    recorder_init(&live, s);
    funcd_store_watch *w = NULL, *wlive = NULL;
    uint64_t c = 0, r2 = 0, d = 0, c2 = 0, d2 = 0;
    EXPECT_OK(put_str(s, "/dv/k", "v1", ANY, &c));
    EXPECT_OK(put_str(s, "/dv/k", "v2", ANY, &r2));
    EXPECT_OK(s->del(s, "/dv/k", ANY, &d));
    EXPECT_OK(s->watch(s, "/dv/", r2, record_cb, &r, &w));
    EXPECT_INT(rec_count(&r), 1);
    EXPECT_EVENT(&r, 0, FUNCD_STORE_EVENT_DELETE, "/dv/k", "v2", d, c);

    EXPECT_OK(put_str(s, "/dv/k2", "last words", ANY, &c2));
    EXPECT_OK(s->watch(s, "/dv/k2", store_rev(s), record_cb, &live, &wlive));
    EXPECT_OK(s->del(s, "/dv/k2", c2, &d2));
    EXPECT_INT(wait_events(&live, 1), 1);
    EXPECT_EVENT(&live, 0, FUNCD_STORE_EVENT_DELETE, "/dv/k2", "last words", d2, c2);
done:
    if (w)
        s->unwatch(s, w);
    if (wlive)
        s->unwatch(s, wlive);
    recorder_free(&r);
    recorder_free(&live);
}

static void case_create_revision(conf_case *cc, funcd_store *s)
{
    recorder r;
    recorder_init(&r, s);
    funcd_store_watch *w = NULL;
    funcd_store_value v = {0};
    listing l = {0};
    uint64_t r1 = 0, r2 = 0, r3 = 0, r4 = 0;
    EXPECT_OK(put_str(s, "/cr/k", "a", ABSENT, &r1));
    EXPECT_OK(put_str(s, "/cr/k", "b", r1, &r2));
    EXPECT_OK(s->get(s, "/cr/k", &v));
    EXPECT_INT(v.create_revision, r1);
    EXPECT_INT(v.revision, r2);
    free(v.value);
    v.value = NULL;
    EXPECT_OK(s->del(s, "/cr/k", r2, &r3));
    EXPECT_OK(put_self_named(s, "/cr/k", &r4)); /* a new life: a new create revision */
    EXPECT_OK(s->get(s, "/cr/k", &v));
    EXPECT_INT(v.create_revision, r4);
    EXPECT_INT(v.revision, r4);
    EXPECT_OK(s->list(s, "/cr/", listing_cb, &l, NULL));
    EXPECT_INT(l.n, 1);
    EXPECT_INT(l.crevs[0], r4);
    EXPECT_OK(s->watch(s, "/cr/", r1 - 1, record_cb, &r, &w));
    EXPECT_INT(rec_count(&r), 4);
    EXPECT_EVENT(&r, 0, FUNCD_STORE_EVENT_PUT, "/cr/k", "a", r1, r1);
    EXPECT_EVENT(&r, 1, FUNCD_STORE_EVENT_PUT, "/cr/k", "b", r2, r1);
    EXPECT_EVENT(&r, 2, FUNCD_STORE_EVENT_DELETE, "/cr/k", "b", r3, r1);
    EXPECT_EVENT(&r, 3, FUNCD_STORE_EVENT_PUT, "/cr/k", "v:/cr/k", r4, r4);
done:
    if (w)
        s->unwatch(s, w);
    free(v.value);
    listing_reset(&l);
    recorder_free(&r);
}

static void case_unwatch_stops(conf_case *cc, funcd_store *s)
{
    recorder r;
    recorder_init(&r, s);
    funcd_store_watch *w = NULL;
    EXPECT_OK(s->watch(s, "/us/", store_rev(s), record_cb, &r, &w));
    EXPECT_OK(put_str(s, "/us/k", "1", ANY, NULL));
    EXPECT_INT(wait_events(&r, 1), 1);
    s->unwatch(s, w);
    w = NULL;
    for (int i = 0; i < 3; i++)
        EXPECT_OK(put_str(s, "/us/k", "2", ANY, NULL));
    EXPECT_INT(rec_count(&r), 1); /* the contract: never again once unwatch returned */
    conf_sleep_ms(CONF_SETTLE_MS);
    EXPECT_INT(rec_count(&r), 1);
done:
    if (w)
        s->unwatch(s, w);
    recorder_free(&r);
}

static void case_unwatch_in_callback(conf_case *cc, funcd_store *s)
{
    recorder self, other;
    recorder_init(&self, s);
    recorder_init(&other, s);
    funcd_store_watch *w = NULL, *wother = NULL;
    self.unwatch_at = 1;
    EXPECT_OK(s->watch(s, "/uc/", store_rev(s), record_cb, &self, &w));
    atomic_store(&self.self, w);
    EXPECT_OK(s->watch(s, "/uc/", store_rev(s), record_cb, &other, &wother));
    for (int i = 0; i < 3; i++)
        EXPECT_OK(put_str(s, "/uc/k", "v", ANY, NULL));
    EXPECT_INT(wait_events(&other, 3), 3);
    EXPECT_INT(atomic_load(&self.unwatched), 1);
    EXPECT_INT(rec_count(&self), 1);
done:
    if (w && !atomic_load(&self.unwatched))
        s->unwatch(s, w);
    if (wother)
        s->unwatch(s, wother);
    recorder_free(&self);
    recorder_free(&other);
}

/* Replay is complete or refused with EGONE; never partial. See store_suite.h. */
static void case_history_or_gone(conf_case *cc, funcd_store *s)
{
    recorder r, now;
    recorder_init(&r, s);
    recorder_init(&now, s);
    funcd_store_watch *w = NULL, *wnow = NULL;
    uint64_t rev = 0;
    for (int i = 0; i < 300; i++)
        EXPECT_OK(put_str(s, "/hg/k", "v", ANY, &rev));
    int rc = s->watch(s, "/hg/", 1, record_cb, &r, &w);
    if (rc == FUNCD_EGONE) {
        EXPECT_INT(funcd_error_last()->code, FUNCD_EGONE);
        EXPECT(funcd_error_last()->message[0] != '\0');
        w = NULL;
    } else {
        EXPECT_OK(rc);
        EXPECT_INT(rec_count(&r), 299);
        for (size_t i = 0; i < 299; i++)
            EXPECT_INT(r.evs[i].revision, i + 2);
    }
    EXPECT_OK(s->watch(s, "/hg/", rev, record_cb, &now, &wnow));
    EXPECT_OK(put_str(s, "/hg/k", "v", ANY, &rev));
    EXPECT_INT(wait_events(&now, 1), 1);
    EXPECT_INT(now.evs[0].revision, rev);
done:
    if (w)
        s->unwatch(s, w);
    if (wnow)
        s->unwatch(s, wnow);
    recorder_free(&r);
    recorder_free(&now);
}

/* ---- concurrency ----------------------------------------------------------------------- */

#define WRITERS 4
#define WRITES 2000

typedef struct writer {
    pthread_t th;
    funcd_store *s;
    int id;
    int mixed;           /* also deletes, and writes outside the watched prefix */
    atomic_int *written; /* shared count of writes done */
    atomic_int *gate;    /* writers pause half-way until it opens */
    int errors, not_monotonic;
    char first_error[160];
} writer;

static void writer_wait_gate(writer *wr)
{
    int64_t deadline = conf_now_ms() + 10000; /* never hang the suite */
    while (!atomic_load(wr->gate) && conf_now_ms() < deadline)
        conf_sleep_ms(1);
}

static int writer_step(writer *wr, int i, uint64_t *rev)
{
    char key[64], value[64];
    const char *area = wr->mixed && i % 5 == 1 ? "/h" : wr->mixed ? "/g" : "/cw";
    snprintf(key, sizeof(key), "%s/t%d/k%d", area, wr->id, i % 40);
    snprintf(value, sizeof(value), "t%d-%d", wr->id, i);
    if (wr->mixed && i % 7 == 3) {
        int rc = wr->s->del(wr->s, key, ANY, rev);
        return rc == FUNCD_ENOTFOUND ? 1 : rc;
    }
    return put_str(wr->s, key, value, ANY, rev);
}

static void *writer_main(void *arg)
{
    writer *wr = arg;
    uint64_t last = 0;
    for (int i = 0; i < WRITES; i++) {
        if (i == WRITES / 2)
            writer_wait_gate(wr);
        uint64_t rev = 0;
        int rc = writer_step(wr, i, &rev);
        if (rc < 0 && wr->errors++ == 0)
            snprintf(wr->first_error, sizeof(wr->first_error), "%s: %s", funcd_error_name(rc),
                     funcd_error_last()->message);
        if (rc == 0) {
            if (rev <= last)
                wr->not_monotonic++;
            last = rev;
        }
        atomic_fetch_add(wr->written, 1); /* attempts: a delete may find nothing */
    }
    return NULL;
}

typedef struct crowd {
    writer w[WRITERS];
    int started;
    atomic_int written, gate;
} crowd;

static int crowd_start(crowd *c, funcd_store *s, int mixed)
{
    memset(c, 0, sizeof(*c));
    for (int i = 0; i < WRITERS; i++) {
        c->w[i].s = s;
        c->w[i].id = i;
        c->w[i].mixed = mixed;
        c->w[i].written = &c->written;
        c->w[i].gate = &c->gate;
        if (pthread_create(&c->w[i].th, NULL, writer_main, &c->w[i]) != 0)
            return -1;
        c->started++;
    }
    return 0;
}

static int crowd_joined(crowd *c, char *why, size_t why_len)
{
    atomic_store(&c->gate, 1);
    int bad = 0;
    for (int i = 0; i < c->started; i++) {
        pthread_join(c->w[i].th, NULL);
        if ((c->w[i].errors || c->w[i].not_monotonic) && !bad++)
            snprintf(why, why_len, "writer %d: %d errors (%s), %d non-increasing revisions", i,
                     c->w[i].errors, c->w[i].first_error, c->w[i].not_monotonic);
    }
    c->started = 0;
    return bad ? -1 : 0;
}

typedef struct written_at_least {
    atomic_int *written;
    int n;
} written_at_least;

static int enough_written(void *arg)
{
    written_at_least *t = arg;
    return atomic_load(t->written) >= t->n;
}

/* Lets the writers run into their half-way gate. */
static int crowd_wait_half(crowd *c)
{
    written_at_least t = {&c->written, WRITERS * WRITES / 2};
    return conf_wait(enough_written, &t, 10000);
}

/* Opens the gate and waits until `extra` more writes happened. */
static void crowd_release(crowd *c, int extra)
{
    written_at_least t = {&c->written, atomic_load(&c->written) + extra};
    atomic_store(&c->gate, 1);
    conf_wait(enough_written, &t, 10000);
}

/*
 * The key property: a watch started from a revision taken before it, while
 * other threads write, sees every later revision exactly once and in order.
 */
static void case_watch_concurrent_writers(conf_case *cc, funcd_store *s)
{
    recorder r;
    recorder_init(&r, s);
    funcd_store_watch *w = NULL;
    crowd c;
    char why[256] = "";
    uint64_t base = store_rev(s);
    memset(&c, 0, sizeof(c));
    EXPECT_INT(crowd_start(&c, s, 0), 0);
    EXPECT(crowd_wait_half(&c));
    uint64_t start = store_rev(s);
    crowd_release(&c, 100); /* writes between the revision and the watch: replayed */
    EXPECT_OK(s->watch(s, "/cw/", start, record_cb, &r, &w));
    int joined = crowd_joined(&c, why, sizeof(why));
    if (joined < 0)
        conf_fail(cc, __FILE__, __LINE__, "%s", why);
    EXPECT_INT(joined, 0);
    uint64_t final = store_rev(s);
    EXPECT_INT(final - base, WRITERS * WRITES);
    rec_target t = {&r, 0, final};
    conf_wait(reached_revision, &t, CONF_WAIT_MS);
    conf_sleep_ms(CONF_SETTLE_MS);
    s->unwatch(s, w);
    w = NULL;
    EXPECT(!r.oom);
    for (size_t i = 0; i < r.n; i++) {
        if (r.evs[i].revision != start + 1 + i) {
            conf_fail(cc, __FILE__, __LINE__,
                      "event %zu has revision %" PRIu64 ", expected %" PRIu64
                      " (duplicate, missing or out of order)",
                      i, r.evs[i].revision, start + 1 + i);
            goto done;
        }
    }
    EXPECT_INT(r.n, final - start);
    EXPECT_INT(atomic_load(&r.overlapped), 0);
done:
    crowd_joined(&c, why, sizeof(why));
    if (w)
        s->unwatch(s, w);
    recorder_free(&r);
}

/* A key -> value view of a prefix, built by list and kept up to date by events. */
#define VIEW_MAX 512

typedef struct view_item {
    char *key;
    char *value;
    size_t len;
    uint64_t revision, create_revision;
} view_item;

typedef struct view {
    view_item items[VIEW_MAX];
    size_t n;
    int overflow;
} view;

static view_item *view_slot(view *v, const char *key)
{
    for (size_t i = 0; i < v->n; i++)
        if (strcmp(v->items[i].key, key) == 0)
            return &v->items[i];
    if (v->n == VIEW_MAX) {
        v->overflow = 1;
        return NULL;
    }
    view_item *it = &v->items[v->n++];
    memset(it, 0, sizeof(*it));
    it->key = strdup(key);
    return it;
}

static void view_set(view *v, const char *key, const void *value, size_t len, uint64_t rev,
                     uint64_t crev)
{
    view_item *it = view_slot(v, key);
    if (!it)
        return;
    free(it->value);
    it->value = malloc(len + 1);
    if (it->value)
        memcpy(it->value, value, len);
    it->len = len;
    it->revision = rev;
    it->create_revision = crev;
}

static void view_remove(view *v, const char *key)
{
    for (size_t i = 0; i < v->n; i++) {
        if (strcmp(v->items[i].key, key) == 0) {
            free(v->items[i].key);
            free(v->items[i].value);
            v->items[i] = v->items[--v->n];
            return;
        }
    }
}

static void view_free(view *v)
{
    for (size_t i = 0; i < v->n; i++) {
        free(v->items[i].key);
        free(v->items[i].value);
    }
    v->n = 0;
}

static int view_list_cb(const funcd_store_kv *kv, void *payload)
{
    view_set(payload, kv->key, kv->value, kv->len, kv->revision, kv->create_revision);
    return 0;
}

/* NULL if both views hold the same keys, values and revisions. */
static const char *views_differ(const view *a, const view *b)
{
    if (a->overflow || b->overflow)
        return "too many keys";
    if (a->n != b->n)
        return "different key counts";
    for (size_t i = 0; i < a->n; i++) {
        const view_item *x = &a->items[i], *y = NULL;
        for (size_t j = 0; j < b->n && !y; j++)
            if (strcmp(b->items[j].key, x->key) == 0)
                y = &b->items[j];
        if (!y)
            return "a key is missing";
        if (x->len != y->len || memcmp(x->value, y->value, x->len) != 0)
            return "a value differs";
        if (x->revision != y->revision || x->create_revision != y->create_revision)
            return "a revision differs";
    }
    return NULL;
}

static const char *apply_events(view *v, const recorder *r, uint64_t after)
{
    uint64_t last = after;
    for (size_t i = 0; i < r->n; i++) {
        const rec_event *e = &r->evs[i];
        if (e->revision <= last)
            return "events out of order, duplicated, or not after the list revision";
        last = e->revision;
        if (strncmp(e->key, "/g/", 3) != 0)
            return "an event outside the watched prefix";
        if (e->type == FUNCD_STORE_EVENT_DELETE)
            view_remove(v, e->key);
        else
            view_set(v, e->key, e->value, e->len, e->revision, e->create_revision);
    }
    return NULL;
}

/* list, then watch from the list's revision: together a gap-free view. */
static void case_list_then_watch(conf_case *cc, funcd_store *s)
{
    view *seen = calloc(1, sizeof(*seen)), *truth = calloc(1, sizeof(*truth));
    recorder r;
    recorder_init(&r, s);
    funcd_store_watch *w = NULL;
    crowd c;
    char why[256] = "";
    const char *diff;
    uint64_t list_rev = 0, sentinel = 0;
    memset(&c, 0, sizeof(c));
    EXPECT(seen && truth);
    EXPECT_INT(crowd_start(&c, s, 1), 0);
    EXPECT(crowd_wait_half(&c));
    crowd_release(&c, 50);
    EXPECT_OK(s->list(s, "/g/", view_list_cb, seen, &list_rev));
    EXPECT_OK(s->watch(s, "/g/", list_rev, record_cb, &r, &w));
    int joined = crowd_joined(&c, why, sizeof(why));
    if (joined < 0)
        conf_fail(cc, __FILE__, __LINE__, "%s", why);
    EXPECT_INT(joined, 0);
    /* A last write under the prefix tells when the watch has caught up. */
    EXPECT_OK(put_str(s, "/g/~sentinel", "end", ANY, &sentinel));
    rec_target t = {&r, 0, sentinel};
    EXPECT(conf_wait(reached_revision, &t, CONF_WAIT_MS));
    s->unwatch(s, w);
    w = NULL;
    EXPECT(!r.oom);
    diff = apply_events(seen, &r, list_rev);
    if (diff)
        conf_fail(cc, __FILE__, __LINE__, "%s", diff);
    EXPECT(diff == NULL);
    EXPECT_OK(s->list(s, "/g/", view_list_cb, truth, NULL));
    diff = views_differ(seen, truth);
    if (diff)
        conf_fail(cc, __FILE__, __LINE__, "list + watch view vs a fresh list: %s", diff);
    EXPECT(diff == NULL);
done:
    crowd_joined(&c, why, sizeof(why));
    if (w)
        s->unwatch(s, w);
    recorder_free(&r);
    if (seen)
        view_free(seen);
    if (truth)
        view_free(truth);
    free(seen);
    free(truth);
}

/* ---- the runner ------------------------------------------------------------------------ */

typedef void (*store_case_fn)(conf_case *cc, funcd_store *s);

static const struct {
    const char *name;
    store_case_fn fn;
} cases[] = {
    {"put_get_roundtrip", case_put_get},
    {"revisions_monotonic_global", case_revisions_monotonic},
    {"create_absent_then_exists", case_create_absent},
    {"cas_stale_revision_conflicts", case_cas_stale},
    {"cas_missing_key_not_found", case_cas_missing},
    {"unconditional_put", case_unconditional_put},
    {"delete_with_and_without_cas", case_delete},
    {"get_missing_not_found", case_get_missing},
    {"list_prefix_order_boundaries", case_list_prefix},
    {"list_snapshot_revision", case_list_snapshot_revision},
    {"watch_from_zero_replays", case_watch_from_zero},
    {"watch_from_middle_revision", case_watch_from_middle},
    {"watch_prefix_filter", case_watch_prefix},
    {"delete_event_carries_previous_value", case_delete_event_prev_value},
    {"create_revision_semantics", case_create_revision},
    {"unwatch_stops_delivery", case_unwatch_stops},
    {"unwatch_inside_callback", case_unwatch_in_callback},
    {"history_replayed_or_gone", case_history_or_gone},
    {"watch_concurrent_writers_exactly_once", case_watch_concurrent_writers},
    {"list_then_watch_gap_free", case_list_then_watch},
};

static int vtable_complete(const funcd_store *s)
{
    return s->version == FUNCD_STORE_VERSION && s->name && s->get && s->put && s->del && s->list &&
           s->watch && s->unwatch && s->revision && s->free;
}

int funcd_store_conformance_run(funcd_store *(*make)(void *payload), void *payload, int verbose)
{
    conf_tally tally = {0, 0};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        conf_case cc = {"store", cases[i].name, verbose, 0};
        funcd_store *s = make(payload);
        if (!s)
            conf_fail(&cc, __FILE__, __LINE__, "the factory returned no store: %s",
                      funcd_error_last()->message);
        else if (!vtable_complete(s))
            conf_fail(&cc, __FILE__, __LINE__,
                      "the driver's vtable is not version %d or has NULL slots",
                      FUNCD_STORE_VERSION);
        else
            cases[i].fn(&cc, s);
        if (s && s->free)
            s->free(s);
        conf_report(&cc, &tally);
    }
    if (verbose)
        fprintf(stderr, "store conformance: %d passed, %d failed\n", tally.passed, tally.failed);
    return tally.failed;
}
