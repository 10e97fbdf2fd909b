/* The PostgreSQL blob store against the blob conformance suite on a real
 * server this test starts (tests/pg_env.c), plus what only it promises:
 * objects larger than a chunk read back by ranges across chunk edges, two
 * handles on one database see each other's objects, a put_open writer's staged
 * chunks (none left after abort or commit; a day-old leftover swept at
 * open), and a server that goes
 * away and comes back under a running blob store. Skipped (77) when
 * PostgreSQL is not installed. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "../harness.h"
#include "../pg_env.h"
#include "../pg_slow_proxy.h"
#include "blob_suite.h"
#include "funcd/sys/blob.h"

#define CHUNK (1u << 20)

static pg_env pg;

static funcd_blob *open_in(const char *schema)
{
    char sql[128], extra[128], conninfo[800];
    snprintf(sql, sizeof(sql), "CREATE SCHEMA IF NOT EXISTS %s", schema);
    if (pg_env_exec(&pg, sql) < 0)
        return NULL;
    snprintf(extra, sizeof(extra), "options=-csearch_path=%s", schema);
    pg_env_conninfo(&pg, extra, conninfo, sizeof(conninfo));
    funcd_blob *b = NULL;
    if (funcd_blob_postgres_new(&b, conninfo) < 0)
        fprintf(stderr, "  open %s: %s\n", schema, funcd_error_last()->message);
    return b;
}

static funcd_blob *make_pg(void *payload)
{
    int *n = payload;
    char schema[32];
    snprintf(schema, sizeof(schema), "blob_conformance_%d", (*n)++);
    return open_in(schema);
}

TEST(conformance)
{
    int n = 0;
    CHECK_INT(funcd_blob_conformance_run(make_pg, &n, 1), 0);
}

/* Byte i of the big object: not periodic in the chunk size. */
static unsigned char pattern(size_t i)
{
    return (unsigned char)((i * 7 + i / 251) & 0xff);
}

static int range_ok(funcd_blob *b, uint64_t off, uint64_t len, size_t size)
{
    void *data = NULL;
    size_t got = 0;
    if (b->get(b, "big", off, len, &data, &got) != 0) {
        fprintf(stderr, "  get %llu+%llu: %s\n", (unsigned long long)off,
                (unsigned long long)len, funcd_error_last()->message);
        return 0;
    }
    size_t want = len == FUNCD_BLOB_TO_END || off + len > size ? size - off : (size_t)len;
    int ok = got == want;
    for (size_t i = 0; ok && i < got; i++)
        ok = ((unsigned char *)data)[i] == pattern(off + i);
    if (!ok)
        fprintf(stderr, "  range %llu+%llu: %zu bytes (want %zu) or wrong content\n",
                (unsigned long long)off, (unsigned long long)len, got, want);
    free(data);
    return ok;
}

TEST(large_objects_span_chunks)
{
    funcd_blob *b = open_in("big");
    size_t size = 3 * CHUNK + CHUNK / 2 + 17;
    unsigned char *data = malloc(size);
    CHECK(b && data);
    for (size_t i = 0; i < size; i++)
        data[i] = pattern(i);
    int put = b->put(b, "big", data, size);
    free(data);
    funcd_blob_stat st = {0};
    int stat = b->stat(b, "big", &st);
    int whole = range_ok(b, 0, FUNCD_BLOB_TO_END, size);
    int edge = range_ok(b, CHUNK - 5, 10, size);            /* across one edge */
    int two = range_ok(b, CHUNK - 1, CHUNK + 2, size);       /* across two */
    int tail = range_ok(b, 3 * CHUNK + 3, FUNCD_BLOB_TO_END, size);
    int past = range_ok(b, size - 4, 100, size);             /* cut at the end */
    int at_end = range_ok(b, size, 5, size);                 /* empty, not ERANGE */
    void *none = NULL;
    size_t n = 0;
    int beyond = b->get(b, "big", size + 1, 1, &none, &n);
    /* A smaller object replaces it whole: no chunk of the old one stays. */
    int small = b->put(b, "big", "tiny", 4);
    void *back = NULL;
    int get_small = b->get(b, "big", 0, FUNCD_BLOB_TO_END, &back, &n);
    size_t small_len = n;
    int same = get_small == 0 && n == 4 && memcmp(back, "tiny", 4) == 0;
    free(back);
    b->free(b);
    CHECK_INT(put, 0);
    CHECK_INT(stat, 0);
    CHECK_INT(st.size, size);
    CHECK(st.mtime_ms > 1700000000000LL);
    CHECK(whole && edge && two && tail && past && at_end);
    CHECK_INT(beyond, FUNCD_ERANGE);
    CHECK_INT(small, 0);
    CHECK_INT(small_len, 4);
    CHECK(same);
    CHECK_INT(pg_env_exec(&pg, "DO $$ BEGIN IF (SELECT count(*) FROM big.funcd_blob_chunks) <> 1 "
                               "THEN RAISE EXCEPTION 'old chunks left'; END IF; END $$"),
              0);
}

/* 0 if `cond` (SQL over the schema's tables) holds. */
static int sql_true(const char *cond)
{
    char sql[1024];
    snprintf(sql, sizeof(sql),
             "DO $$ BEGIN IF NOT (%s) THEN RAISE EXCEPTION 'false: %%', $q$%s$q$; END IF; END $$",
             cond, cond);
    return pg_env_exec(&pg, sql);
}

#define STAGED(schema) "(SELECT count(*) FROM " schema ".funcd_blob_chunks WHERE key < '\\x01'::bytea)"
#define STAGE_KEY(ts) "('\\x00'::bytea || convert_to('funcd-staging/" ts "/0123456789abcdef', 'UTF8'))"

/* A put_open writer's chunks wait under a staging key: an abort or a commit
 * leaves none, and a store opening removes those a crash left a day ago. */
TEST(writer_staging_rows)
{
    funcd_blob *b = open_in("blob_staging");
    CHECK(b != NULL);
    size_t size = 2 * CHUNK + CHUNK / 2;
    unsigned char *data = malloc(size);
    CHECK(data != NULL);
    for (size_t i = 0; i < size; i++)
        data[i] = pattern(i);
    funcd_blob_writer *w = NULL;
    int rc = b->put_open(b, "big", &w);
    if (rc == 0)
        rc = w->write(w, data, size);
    int during = rc == 0 ? sql_true(STAGED("blob_staging") " = 2") : -1;
    if (w)
        w->abort(w);
    int after_abort = sql_true(STAGED("blob_staging") " = 0");
    w = NULL;
    int committed = b->put_open(b, "big", &w);
    if (committed == 0 && (committed = w->write(w, data, size)) == 0) {
        funcd_blob_writer *x = w;
        w = NULL;
        committed = x->commit(x);
    }
    if (w)
        w->abort(w);
    int after_commit = sql_true(STAGED("blob_staging") " = 0");
    int ranges = committed == 0 && range_ok(b, CHUNK - 3, 7, size) &&
                 range_ok(b, 0, size, size);
    b->free(b);
    free(data);
    CHECK_INT(rc, 0);
    CHECK_INT(during, 0);
    CHECK_INT(after_abort, 0);
    CHECK_INT(committed, 0);
    CHECK_INT(after_commit, 0);
    CHECK(ranges);
    /* leftovers: one from 1970, one from the far future */
    CHECK_INT(pg_env_exec(&pg, "INSERT INTO blob_staging.funcd_blob_chunks(key, n, data) VALUES ("
                               STAGE_KEY("0000000000000001") ", 0, 'x'), ("
                               STAGE_KEY("7fffffffffffffff") ", 0, 'y')"),
              0);
    b = open_in("blob_staging");
    CHECK(b != NULL);
    b->free(b);
    CHECK_INT(sql_true(STAGED("blob_staging") " = 1"), 0);
    CHECK_INT(sql_true("EXISTS (SELECT 1 FROM blob_staging.funcd_blob_chunks WHERE key = "
                       STAGE_KEY("7fffffffffffffff") ")"),
              0);
}

static int count_cb(const char *key, const funcd_blob_stat *st, void *payload)
{
    (void)key;
    (void)st;
    ++*(int *)payload;
    return 0;
}

TEST(two_handles_share_one_database)
{
    funcd_blob *a = open_in("shared_blob"), *b = open_in("shared_blob");
    CHECK(a && b);
    int put = a->put(a, "logs/n1/seg-1", "line\n", 5);
    void *data = NULL;
    size_t n = 0;
    int get = b->get(b, "logs/n1/seg-1", 0, FUNCD_BLOB_TO_END, &data, &n);
    int listed = 0;
    int list = b->list(b, "logs/", count_cb, &listed);
    int del = b->del(b, "logs/n1/seg-1");
    int gone = a->stat(a, "logs/n1/seg-1", NULL);
    a->free(a);
    b->free(b);
    CHECK_INT(put, 0);
    CHECK_INT(get, 0);
    CHECK_INT(n, 5);
    free(data);
    CHECK_INT(list, 0);
    CHECK_INT(listed, 1);
    CHECK_INT(del, 0);
    CHECK_INT(gone, FUNCD_ENOTFOUND);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

TEST(the_server_goes_away_and_comes_back)
{
    funcd_blob *b = open_in("outage_blob");
    CHECK(b != NULL);
    CHECK_INT(b->put(b, "kept", "before", 6), 0);
    pg_env_stop_server(&pg);
    int put = b->put(b, "lost", "during", 6);
    char message[512];
    snprintf(message, sizeof(message), "%s", funcd_error_last()->message);
    void *data = NULL;
    size_t n = 0;
    int get_away = b->get(b, "kept", 0, FUNCD_BLOB_TO_END, &data, &n);
    int listed = 0;
    int list = b->list(b, "", count_cb, &listed);
    int stat = b->stat(b, "kept", NULL);
    int del = b->del(b, "kept");
    CHECK(pg_env_restart_server(&pg) == 0);
    int64_t deadline = now_ms() + 30000;
    int get;
    while ((get = b->get(b, "kept", 0, FUNCD_BLOB_TO_END, &data, &n)) == FUNCD_EUNAVAILABLE &&
           now_ms() < deadline)
        usleep(50000);
    int same = get == 0 && n == 6 && memcmp(data, "before", 6) == 0;
    free(data);
    int absent = b->stat(b, "lost", NULL);
    b->free(b);
    CHECK_INT(put, FUNCD_EUNAVAILABLE);
    CHECK_CONTAINS(message, "reconnects by itself");
    CHECK_INT(get_away, FUNCD_EUNAVAILABLE);
    CHECK_INT(list, FUNCD_EUNAVAILABLE);
    CHECK_INT(stat, FUNCD_EUNAVAILABLE);
    CHECK_INT(del, FUNCD_EUNAVAILABLE);
    CHECK(same);
    CHECK_INT(absent, FUNCD_ENOTFOUND);
}

/* A large answer that arrives steadily over a slow link is read whole:
 * the driver's 5 s answer deadline counts silence, not the whole answer
 * (1.25 MiB at 160 KiB/s takes about 8 s). */
TEST(a_slow_large_answer_is_not_cut)
{
    funcd_blob *direct = open_in("slow_blob");
    CHECK(direct != NULL);
    size_t size = CHUNK + CHUNK / 4;
    unsigned char *big = malloc(size);
    CHECK(big != NULL);
    for (size_t i = 0; i < size; i++)
        big[i] = pattern(i);
    int put = direct->put(direct, "slow", big, size);
    direct->free(direct);
    pg_slow_proxy px;
    CHECK(pg_slow_proxy_start(&px, pg.root, 160 * 1024) == 0);
    char conninfo[800];
    snprintf(conninfo, sizeof(conninfo),
             "host=%s user=postgres dbname=postgres options=-csearch_path=slow_blob", px.dir);
    funcd_blob *slow = NULL;
    int opened = funcd_blob_postgres_new(&slow, conninfo);
    if (opened < 0)
        fprintf(stderr, "  open through the slow link: %s\n", funcd_error_last()->message);
    void *data = NULL;
    size_t n = 0;
    int64_t t0 = now_ms();
    int get = opened < 0 ? opened : slow->get(slow, "slow", 0, FUNCD_BLOB_TO_END, &data, &n);
    int64_t took = now_ms() - t0;
    if (get < 0)
        fprintf(stderr, "  get through the slow link: %s\n", funcd_error_last()->message);
    fprintf(stderr, "  %zu bytes read through the slow link in %lld ms\n", n, (long long)took);
    int same = get == 0 && n == size && memcmp(data, big, size) == 0;
    free(data);
    free(big);
    if (slow)
        slow->free(slow);
    pg_slow_proxy_stop(&px);
    CHECK_INT(put, 0);
    CHECK_INT(opened, 0);
    CHECK_INT(get, 0);
    CHECK(same);
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
    funcd_blob *x = NULL;
    o->rc = funcd_blob_postgres_new(&x, o->conninfo);
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
    CHECK(pg_env_exec(&pg, "CREATE SCHEMA IF NOT EXISTS silent_blob") == 0);
    pg_slow_proxy px;
    CHECK(pg_slow_proxy_start(&px, pg.root, 1u << 20) == 0);
    atomic_store(&px.mute, 1);
    opener *o = calloc(1, sizeof(*o));
    CHECK(o != NULL);
    snprintf(o->conninfo, sizeof(o->conninfo),
             "host=%s user=postgres dbname=postgres options=-csearch_path=silent_blob", px.dir);
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
    RUN(large_objects_span_chunks);
    RUN(two_handles_share_one_database);
    RUN(writer_staging_rows);
    RUN(the_server_goes_away_and_comes_back);
    RUN(a_slow_large_answer_is_not_cut);
    RUN(a_server_silent_during_setup_is_given_up);
    pg_env_free(&pg);
    return HARNESS_END();
}
