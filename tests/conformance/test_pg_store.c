/* The PostgreSQL store against the store conformance suite on a real
 * server this test starts (tests/pg_env.c), plus what only it promises:
 * several stores on one database see each other's writes, compaction with
 * FUNCD_EGONE, byte-order keys, and a server that goes away and comes back
 * under a running store. Skipped (77) when PostgreSQL is not installed. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "../harness.h"
#include "../pg_env.h"
#include "../pg_slow_proxy.h"
#include "funcd/sys/store.h"
#include "store_suite.h"

#define ANY FUNCD_STORE_ANY

static pg_env pg;

/* A store in schema `schema` (created if absent) of the test server. */
static funcd_store *open_in(const char *schema, uint64_t history)
{
    char sql[128], extra[128], conninfo[800];
    snprintf(sql, sizeof(sql), "CREATE SCHEMA IF NOT EXISTS %s", schema);
    if (pg_env_exec(&pg, sql) < 0)
        return NULL;
    snprintf(extra, sizeof(extra), "options=-csearch_path=%s", schema);
    pg_env_conninfo(&pg, extra, conninfo, sizeof(conninfo));
    funcd_store_postgres_options opts = FUNCD_STORE_POSTGRES_OPTIONS_INIT;
    opts.history = history;
    funcd_store *s = NULL;
    if (funcd_store_postgres_new(&s, conninfo, &opts) < 0)
        fprintf(stderr, "  open %s: %s\n", schema, funcd_error_last()->message);
    return s;
}

/* A fresh schema per conformance case: an empty store each time. */
static funcd_store *make_pg(void *payload)
{
    int *n = payload;
    char schema[32];
    snprintf(schema, sizeof(schema), "conformance_%d", (*n)++);
    return open_in(schema, 0);
}

TEST(conformance)
{
    int n = 0;
    CHECK_INT(funcd_store_conformance_run(make_pg, &n, 1), 0);
}

/* Events seen by a watch, recorded under a lock: the listener thread
 * delivers other processes' writes. */
typedef struct seen {
    pthread_mutex_t lock;
    int n, out_of_order;
    uint64_t first, last;
    char last_key[64];
} seen;

#define SEEN_INIT {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, ""}

static void seen_cb(const funcd_store_event *ev, void *payload)
{
    seen *s = payload;
    pthread_mutex_lock(&s->lock);
    if (s->n && ev->revision != s->last + 1)
        s->out_of_order++;
    if (!s->n++)
        s->first = ev->revision;
    s->last = ev->revision;
    snprintf(s->last_key, sizeof(s->last_key), "%s", ev->key);
    pthread_mutex_unlock(&s->lock);
}

static int seen_count(seen *s)
{
    pthread_mutex_lock(&s->lock);
    int n = s->n;
    pthread_mutex_unlock(&s->lock);
    return n;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits (up to 20 s: a loaded machine) until `s` has seen `n` events. */
static int wait_seen(seen *s, int n)
{
    int64_t deadline = now_ms() + 20000;
    while (seen_count(s) < n && now_ms() < deadline)
        usleep(5000);
    return seen_count(s);
}

static int put_str(funcd_store *s, const char *key, const char *value, uint64_t expected,
                   uint64_t *rev)
{
    return s->put(s, key, value, strlen(value), expected, rev);
}

TEST(two_stores_share_one_database)
{
    funcd_store *a = open_in("shared", 0), *b = open_in("shared", 0);
    funcd_store_watch *w = NULL;
    seen s = SEEN_INIT;
    uint64_t ra = 0, rb = 0, rb2 = 0;
    CHECK(a && b);
    CHECK_INT(put_str(a, "/sh/a", "from a", FUNCD_STORE_ABSENT, &ra), 0);
    CHECK_INT(a->watch(a, "/sh/", 0, seen_cb, &s, &w), 0);
    CHECK_INT(seen_count(&s), 1); /* replayed before watch returned */
    /* b's writes reach a's watch through the log, woken by NOTIFY. */
    CHECK_INT(put_str(b, "/sh/b", "from b", FUNCD_STORE_ABSENT, &rb), 0);
    CHECK_INT(put_str(b, "/sh/a", "b again", ra, &rb2), 0);
    int n = wait_seen(&s, 3);
    /* One revision counter for both; a's stale CAS now fails. */
    int stale = put_str(a, "/sh/a", "late", ra, NULL);
    funcd_store_value v = {0};
    int got = a->get(a, "/sh/a", &v);
    uint64_t rev_a = a->revision(a);
    a->unwatch(a, w);
    a->free(a);
    b->free(b);
    CHECK_INT(n, 3);
    CHECK_INT(s.out_of_order, 0);
    CHECK_INT(s.last, rb2);
    CHECK_INT(rb, ra + 1);
    CHECK_INT(rb2, rb + 1);
    CHECK_INT(stale, FUNCD_ECONFLICT);
    CHECK_INT(got, 0);
    CHECK_STR(v.value, "b again");
    free(v.value);
    CHECK_INT(rev_a, rb2);
}

TEST(compacted_history_is_gone)
{
    funcd_store *s = open_in("compact", 8);
    funcd_store_watch *w = NULL;
    seen c = SEEN_INIT;
    CHECK(s != NULL);
    for (int i = 0; i < 20; i++)
        put_str(s, "/h/k", "v", ANY, NULL);
    /* At least 8 changes are kept; the log is trimmed in batches, so here
     * revisions 9..20 remain and 8 is the newest one dropped. */
    int gone = s->watch(s, "/h/", 7, seen_cb, &c, &w);
    char message[512];
    snprintf(message, sizeof(message), "%s", funcd_error_last()->message);
    int rc = s->watch(s, "/h/", 8, seen_cb, &c, &w);
    if (rc == 0)
        s->unwatch(s, w);
    s->free(s);
    CHECK_INT(gone, FUNCD_EGONE);
    CHECK_CONTAINS(message, "compacted");
    CHECK_CONTAINS(message, "list the prefix again");
    CHECK_INT(rc, 0);
    CHECK_INT(c.first, 9);
    CHECK_INT(c.last, 20);
    CHECK_INT(c.n, 12);
}

typedef struct keys_seen {
    int n;
    char keys[8][16];
} keys_seen;

static int collect_kv(const funcd_store_kv *kv, void *payload)
{
    keys_seen *k = payload;
    if (k->n < 8)
        snprintf(k->keys[k->n], sizeof(k->keys[0]), "%s", kv->key);
    k->n++;
    return 0;
}

TEST(prefixes_are_byte_ranges)
{
    funcd_store *s = open_in("prefix", 0);
    keys_seen pct = {0}, under = {0}, high = {0};
    CHECK(s != NULL);
    /* 0xff is not UTF-8: keys are bytea, whatever the database's encoding. */
    static const char *const keys[] = {"/a%/x", "/ab/x", "/a_/y", "/aX/y", "/\xff\xff/1", "/\xff"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        CHECK_INT(put_str(s, keys[i], "v", ANY, NULL), 0);
    s->list(s, "/a%", collect_kv, &pct, NULL);
    s->list(s, "/a_", collect_kv, &under, NULL);
    s->list(s, "/\xff", collect_kv, &high, NULL);
    seen c = SEEN_INIT;
    funcd_store_watch *w = NULL;
    int rc = s->watch(s, "/\xff\xff", 0, seen_cb, &c, &w);
    if (rc == 0)
        s->unwatch(s, w);
    s->free(s);
    CHECK_INT(pct.n, 1);
    CHECK_STR(pct.keys[0], "/a%/x");
    CHECK_INT(under.n, 1);
    CHECK_STR(under.keys[0], "/a_/y");
    CHECK_INT(high.n, 2);
    CHECK_STR(high.keys[0], "/\xff");
    CHECK_INT(rc, 0);
    CHECK_INT(c.n, 1);
}

static int count_kv(const funcd_store_kv *kv, void *payload)
{
    (void)kv;
    ++*(int *)payload;
    return 0;
}

/* The server stops under a running store: calls answer FUNCD_EUNAVAILABLE
 * at once (no crash, no hang); after the restart the same store works
 * again, and its watch continues without a gap or a duplicate, including
 * writes another store made. */
TEST(the_server_goes_away_and_comes_back)
{
    funcd_store *a = open_in("outage", 0), *b = open_in("outage", 0);
    funcd_store_watch *w = NULL;
    seen s = SEEN_INIT;
    uint64_t rev = 0;
    CHECK(a && b);
    CHECK_INT(put_str(a, "/o/before", "1", ANY, &rev), 0);
    CHECK_INT(a->watch(a, "/o/", 0, seen_cb, &s, &w), 0);

    pg_env_stop_server(&pg);
    int64_t t0 = now_ms();
    int put = put_str(a, "/o/during", "x", ANY, NULL);
    char message[512];
    snprintf(message, sizeof(message), "%s", funcd_error_last()->message);
    funcd_store_value v = {0};
    int get = a->get(a, "/o/before", &v);
    int listed = 0;
    int list = a->list(a, "/o/", count_kv, &listed, NULL);
    seen s2 = SEEN_INIT;
    funcd_store_watch *w2 = NULL;
    int watch = a->watch(a, "/o/", 0, seen_cb, &s2, &w2);
    uint64_t rev_away = a->revision(a); /* the last one known */
    int64_t took = now_ms() - t0;

    CHECK(pg_env_restart_server(&pg) == 0);
    /* Back within a backoff (at most 2 s): bounded generously. */
    int64_t deadline = now_ms() + 30000;
    int again;
    while ((again = put_str(a, "/o/after", "2", ANY, NULL)) == FUNCD_EUNAVAILABLE &&
           now_ms() < deadline)
        usleep(50000);
    int other;
    deadline = now_ms() + 30000;
    while ((other = put_str(b, "/o/from-b", "3", ANY, NULL)) == FUNCD_EUNAVAILABLE &&
           now_ms() < deadline)
        usleep(50000);
    int n = wait_seen(&s, 3);
    a->unwatch(a, w);
    if (watch == 0)
        a->unwatch(a, w2);
    a->free(a);
    b->free(b);

    CHECK_INT(put, FUNCD_EUNAVAILABLE);
    CHECK_CONTAINS(message, "reconnects by itself");
    CHECK_INT(get, FUNCD_EUNAVAILABLE);
    CHECK_INT(list, FUNCD_EUNAVAILABLE);
    CHECK_INT(watch, FUNCD_EUNAVAILABLE);
    CHECK_INT(rev_away, rev);
    fprintf(stderr, "  four calls against a stopped server took %lld ms\n", (long long)took);
    CHECK(took < 10000);
    CHECK_INT(again, 0);
    CHECK_INT(other, 0);
    CHECK_INT(n, 3); /* before, after, from-b: "during" was never applied */
    CHECK_INT(s.out_of_order, 0);
    CHECK_STR(s.last_key, "/o/from-b");
}

TEST(bad_connection_strings_and_newer_schemas)
{
    funcd_store *s = NULL;
    CHECK_INT(funcd_store_postgres_new(&s, "postgresql://[::1", NULL), FUNCD_EINVAL);
    CHECK_CONTAINS(funcd_error_last()->message, "connection string");
    CHECK(s == NULL);
    char conninfo[400];
    snprintf(conninfo, sizeof(conninfo), "host=%s/nowhere user=postgres password=hunter2",
             pg.root);
    CHECK_INT(funcd_store_postgres_new(&s, conninfo, NULL), FUNCD_EUNAVAILABLE);
    CHECK(strstr(funcd_error_last()->message, "hunter2") == NULL);
    funcd_store_postgres_options bad = {0, 0};
    CHECK_INT(funcd_store_postgres_new(&s, pg.conninfo, &bad), FUNCD_EVERSION);

    funcd_store *ok = open_in("newer", 0);
    CHECK(ok != NULL);
    ok->free(ok);
    CHECK(pg_env_exec(&pg, "UPDATE newer.funcd_meta SET schema = 99") == 0);
    CHECK(open_in("newer", 0) == NULL);
    CHECK_INT(funcd_error_last()->code, FUNCD_EVERSION);
}

/* Opening on a thread, so that a test outlives an open that never ends. */
typedef struct opener {
    char conninfo[800];
    int rc;
    char message[600];
    atomic_int done;
} opener;

static void *open_main(void *arg)
{
    opener *o = arg;
    funcd_store *x = NULL;
    o->rc = funcd_store_postgres_new(&x, o->conninfo, NULL);
    snprintf(o->message, sizeof(o->message), "%s", o->rc < 0 ? funcd_error_last()->message : "");
    if (x)
        x->free(x);
    atomic_store(&o->done, 1);
    return NULL;
}

/* A server that accepts the connection and then answers nothing (its
 * answers dropped by the link): opening gives up with FUNCD_EUNAVAILABLE
 * once the setup's query has had no answer for 5 s, instead of waiting
 * forever in a blocking call. */
TEST(a_server_silent_during_setup_is_given_up)
{
    CHECK(pg_env_exec(&pg, "CREATE SCHEMA IF NOT EXISTS silent_store") == 0);
    pg_slow_proxy px;
    CHECK(pg_slow_proxy_start(&px, pg.root, 1u << 20) == 0);
    atomic_store(&px.mute, 1);
    opener *o = calloc(1, sizeof(*o));
    CHECK(o != NULL);
    snprintf(o->conninfo, sizeof(o->conninfo),
             "host=%s user=postgres dbname=postgres options=-csearch_path=silent_store", px.dir);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, open_main, o) == 0);
    int64_t t0 = now_ms();
    while (!atomic_load(&o->done) && now_ms() - t0 < 20000)
        usleep(20000);
    int64_t took = now_ms() - t0;
    int in_time = atomic_load(&o->done);
    pg_slow_proxy_stop(&px); /* ends an open still waiting */
    pthread_join(t, NULL);
    fprintf(stderr, "  open gave up after %lld ms: %s\n", (long long)took, o->message);
    int rc = o->rc;
    char message[600];
    snprintf(message, sizeof(message), "%s", o->message);
    free(o);
    CHECK(in_time);
    CHECK_INT(rc, FUNCD_EUNAVAILABLE);
    CHECK_CONTAINS(message, "no answer within");
}

int main(void)
{
    if (!pg_env_present()) {
        fprintf(stderr, "SKIP: PostgreSQL is not installed (Debian: postgresql)\n");
        return 77;
    }
    if (pg_env_start(&pg) < 0) {
        pg_env_free(&pg);
        return 1;
    }
    RUN(conformance);
    RUN(two_stores_share_one_database);
    RUN(compacted_history_is_gone);
    RUN(prefixes_are_byte_ranges);
    RUN(the_server_goes_away_and_comes_back);
    RUN(bad_connection_strings_and_newer_schemas);
    RUN(a_server_silent_during_setup_is_given_up);
    pg_env_free(&pg);
    return HARNESS_END();
}
