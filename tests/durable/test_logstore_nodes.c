/*
 * Logs across nodes (issue 15): two logstores with node names on one
 * memory blob stand for two funcd nodes sharing the cluster's blob. Each
 * writes under its own prefix and stamps its records; a query on either
 * merges both by time; compaction by one (the leader) keeps every line of
 * both; a logstore without a name keeps the single-node layout.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "funcd/sys/blob.h"
#include "funcd/sys/error.h"
#include "harness.h"
#include "logstore/logstore.h"
#include "logstore_test.h"
#include "util/misc.h"

/* "<node>:<body>" of each record, joined by commas, into `out`. */
static const char *seen(const got *g, char *out, size_t cap)
{
    out[0] = '\0';
    for (size_t i = 0; i < g->n; i++) {
        cJSON *j = cJSON_Parse(g->lines[i]);
        const char *b = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "body"));
        const char *n = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "node"));
        size_t at = strlen(out);
        snprintf(out + at, cap - at, "%s%s:%s", i ? "," : "", n ? n : "-", b ? b : "?");
        cJSON_Delete(j);
    }
    return out;
}

static void put_line(funcd_logstore *ls, int64_t t, const char *text)
{
    funcd_logstore_record r = {t, "default", "f", "f-1", NULL, 1, text, strlen(text)};
    funcd_logstore_append(ls, &r);
}

static int count_cb(const char *key, const funcd_blob_stat *st, void *payload)
{
    (void)key;
    (void)st;
    ++*(int *)payload;
    return 0;
}

static int count(funcd_blob *b, const char *prefix)
{
    int n = 0;
    b->list(b, prefix, count_cb, &n);
    return n;
}

static funcd_logstore *node(funcd_blob *b, const char *name)
{
    funcd_logstore_options o = {10000, 0, 0, name};
    funcd_logstore *ls = NULL;
    funcd_logstore_new(&ls, b, &o);
    return ls;
}

/* n1 and n2 log alternately, each sealing three segments; n2's lines fall
 * between n1's, so the answer is right only if it is merged. */
static void interleave(funcd_logstore *n1, funcd_logstore *n2)
{
    int64_t t = H0 + 60000;
    for (int s = 0; s < 3; s++) {
        char text[32];
        for (int i = 0; i < 2; i++) {
            snprintf(text, sizeof(text), "a%d", s * 2 + i);
            put_line(n1, t + s * 100 + i * 20, text);
            snprintf(text, sizeof(text), "b%d", s * 2 + i);
            put_line(n2, t + s * 100 + i * 20 + 10, text);
        }
        funcd_logstore_tick(n1, t + s * 100 + 20000); /* seal_ms 10 s: sealed */
        funcd_logstore_tick(n2, t + s * 100 + 20000);
    }
}

#define MERGED                                                                                     \
    "n1:a0,n2:b0,n1:a1,n2:b1,n1:a2,n2:b2,n1:a3,n2:b3,n1:a4,n2:b4,n1:a5,n2:b5"

TEST(either_node_reads_both_in_time_order)
{
    funcd_blob *b;
    funcd_blob_memory_new(&b);
    funcd_logstore *n1 = node(b, "n1"), *n2 = node(b, "n2");
    CHECK(n1 && n2);
    if (!n1 || !n2)
        return;
    CHECK_STR(funcd_logstore_node(n1), "n1");
    interleave(n1, n2);
    int own1 = count(b, "logs/default/f/seg/n1/"), own2 = count(b, "logs/default/f/seg/n2/");
    put_line(n2, H0 + 60000 + 250, "open"); /* still in n2's memory: n2 sees it, n1 not yet */
    got g1 = {0}, g2 = {0}, tail = {0};
    CHECK_INT(funcd_logstore_query(n1, "default", "f", 0, NULL, 0, collect, &g1), 0);
    CHECK_INT(funcd_logstore_query(n2, "default", "f", 0, NULL, 0, collect, &g2), 0);
    CHECK_INT(funcd_logstore_query(n1, "default", "f", 0, NULL, 3, collect, &tail), 0);
    char s1[1024], s2[1024], st[256];
    CHECK_INT(own1, 3);
    CHECK_INT(own2, 3);
    CHECK_STR(seen(&g1, s1, sizeof(s1)), MERGED);
    CHECK_STR(seen(&g2, s2, sizeof(s2)), MERGED ",n2:open");
    CHECK_STR(seen(&tail, st, sizeof(st)), "n2:b4,n1:a5,n2:b5"); /* the last 3 of both */
    got_free(&g1);
    got_free(&g2);
    got_free(&tail);
    funcd_logstore_free(n1);
    funcd_logstore_free(n2);
    b->free(b);
}

/* The leader (n1) compacts the hour: n2's segments go into the hour object
 * too, and both read every line once, in order. */
TEST(one_compaction_keeps_both_nodes_lines)
{
    funcd_blob *b;
    funcd_blob_memory_new(&b);
    funcd_logstore *n1 = node(b, "n1"), *n2 = node(b, "n2");
    CHECK(n1 && n2);
    if (!n1 || !n2)
        return;
    interleave(n1, n2);
    funcd_logstore_tick(n1, H0 + HOUR + 5 * 60000); /* the hour is over: n1 compacts it */
    int hours = count(b, "logs/default/f/hour/"), segs = count(b, "logs/default/f/seg/");
    got g1 = {0}, g2 = {0};
    CHECK_INT(funcd_logstore_query(n1, "default", "f", 0, NULL, 0, collect, &g1), 0);
    CHECK_INT(funcd_logstore_query(n2, "default", "f", 0, NULL, 0, collect, &g2), 0);
    char s1[1024], s2[1024];
    CHECK_INT(hours, 1);
    CHECK_INT(segs, 0);
    CHECK_STR(seen(&g1, s1, sizeof(s1)), MERGED);
    CHECK_STR(seen(&g2, s2, sizeof(s2)), MERGED);
    got_free(&g1);
    got_free(&g2);
    funcd_logstore_free(n1);
    funcd_logstore_free(n2);
    b->free(b);
}

/* A blob on which the leader compacts the hour between a reader's listing
 * and its first read of a segment: the reader finds the segment gone. */
typedef struct racing {
    funcd_blob base;
    funcd_blob *inner;
    funcd_logstore *leader;
    int64_t leader_now;
    int armed;
} racing;

#define INNER(b) (((racing *)(b))->inner)

static int r_put(funcd_blob *b, const char *k, const void *d, size_t n)
{
    return INNER(b)->put(INNER(b), k, d, n);
}
static int r_get(funcd_blob *b, const char *k, uint64_t off, uint64_t len, void **out,
                 size_t *out_len)
{
    racing *r = (racing *)b;
    if (r->armed && strstr(k, "/seg/")) {
        r->armed = 0;
        funcd_logstore_tick(r->leader, r->leader_now); /* merges and deletes the segments */
    }
    return INNER(b)->get(INNER(b), k, off, len, out, out_len);
}
static int r_stat(funcd_blob *b, const char *k, funcd_blob_stat *out)
{
    return INNER(b)->stat(INNER(b), k, out);
}
static int r_list(funcd_blob *b, const char *p, funcd_blob_list_cb cb, void *pl)
{
    return INNER(b)->list(INNER(b), p, cb, pl);
}
static int r_del(funcd_blob *b, const char *k)
{
    return INNER(b)->del(INNER(b), k);
}
static void r_free(funcd_blob *b)
{
    (void)b; /* the test frees the inner blob */
}

/* n2 lists the segments, then the leader (n1) compacts the hour before n2
 * reads them: n2 reads again and still answers every line, once. */
TEST(a_read_racing_the_leaders_compaction_loses_nothing)
{
    funcd_blob *b;
    funcd_blob_memory_new(&b);
    racing r = {{FUNCD_BLOB_VERSION, "racing", r_put, r_get, r_stat, r_list, r_del, r_free},
                b, NULL, H0 + HOUR + 5 * 60000, 0};
    funcd_logstore *n1 = node(b, "n1"), *n2 = node(&r.base, "n2");
    CHECK(n1 && n2);
    if (!n1 || !n2)
        return;
    r.leader = n1;
    interleave(n1, n2);
    r.armed = 1;
    got g = {0};
    CHECK_INT(funcd_logstore_query(n2, "default", "f", 0, NULL, 0, collect, &g), 0);
    int hours = count(b, "logs/default/f/hour/");
    char s2[1024];
    CHECK(!r.armed); /* the race did happen */
    CHECK_INT(hours, 1);
    CHECK_STR(seen(&g, s2, sizeof(s2)), MERGED);
    got_free(&g);
    funcd_logstore_free(n1);
    funcd_logstore_free(n2);
    b->free(b);
}

/* No name: the layout and the records of a single node, unchanged. */
TEST(without_a_name_nothing_changes)
{
    funcd_blob *b;
    funcd_blob_memory_new(&b);
    funcd_logstore *ls = node(b, NULL);
    put_line(ls, T0, "alone");
    funcd_logstore_tick(ls, T0 + 20000);
    int direct = 0;
    got g = {0};
    funcd_logstore_query(ls, "default", "f", 0, NULL, 0, collect, &g);
    char s[256];
    /* "logs/default/f/seg/1…": the segment sits right under seg/ */
    direct = count(b, "logs/default/f/seg/1");
    CHECK_INT(direct, 1);
    CHECK_STR(seen(&g, s, sizeof(s)), "-:alone");
    CHECK(funcd_logstore_node(ls) == NULL);
    got_free(&g);
    funcd_logstore_free(ls);
    b->free(b);
}

/* A node name as long as DNS allows still fits a file blob's file name:
 * the key holds its head and a hash, the records the whole name. */
TEST(a_long_name_is_hashed_in_keys_only)
{
    char dir[] = "/tmp/funcd-logstore-nodes-XXXXXX", name[254];
    CHECK(mkdtemp(dir) != NULL);
    memset(name, 'a', 253);
    name[253] = '\0';
    memcpy(name, "node-", 5);
    funcd_blob *b = NULL;
    CHECK_INT(funcd_blob_file_new(&b, dir), 0);
    if (!b)
        return;
    funcd_logstore *ls = node(b, name);
    put_line(ls, T0, "long");
    funcd_logstore_stats st;
    funcd_logstore_free(ls); /* seals */
    ls = node(b, name);
    got g = {0};
    CHECK_INT(funcd_logstore_query(ls, "default", "f", 0, NULL, 0, collect, &g), 0);
    funcd_logstore_stats_get(ls, &st);
    cJSON *j = g.n == 1 ? cJSON_Parse(g.lines[0]) : NULL;
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "node")), name);
    CHECK_INT(count(b, "logs/default/f/seg/node-aaaaaaaaaa~"), 1);
    cJSON_Delete(j);
    got_free(&g);
    funcd_logstore_free(ls);
    b->free(b);
    funcd_remove_tree(dir);
}

TEST(a_name_that_cannot_be_a_key_is_refused)
{
    funcd_blob *b;
    funcd_blob_memory_new(&b);
    char too_long[300];
    memset(too_long, 'a', 254);
    too_long[254] = '\0';
    const char *bad[] = {"", "a/b", "..", "sp ace", "new\nline", too_long};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        funcd_logstore_options o = {0, 0, 0, bad[i]};
        funcd_logstore *ls = NULL;
        CHECK_INT(funcd_logstore_new(&ls, b, &o), FUNCD_EINVAL);
        CHECK(ls == NULL);
        CHECK_CONTAINS(funcd_error_last()->message, "node name");
    }
    b->free(b);
}

/* A memory blob that counts the reads of segments. */
typedef struct counting {
    funcd_blob base;
    funcd_blob *inner;
    int seg_gets;
} counting;

#define CINNER(b) (((counting *)(b))->inner)

static int c_put(funcd_blob *b, const char *k, const void *d, size_t n)
{
    return CINNER(b)->put(CINNER(b), k, d, n);
}
static int c_get(funcd_blob *b, const char *k, uint64_t off, uint64_t len, void **out, size_t *n)
{
    if (strstr(k, "/seg/"))
        ((counting *)b)->seg_gets++;
    return CINNER(b)->get(CINNER(b), k, off, len, out, n);
}
static int c_stat(funcd_blob *b, const char *k, funcd_blob_stat *out)
{
    return CINNER(b)->stat(CINNER(b), k, out);
}
static int c_list(funcd_blob *b, const char *p, funcd_blob_list_cb cb, void *pl)
{
    return CINNER(b)->list(CINNER(b), p, cb, pl);
}
static int c_del(funcd_blob *b, const char *k)
{
    return CINNER(b)->del(CINNER(b), k);
}
static void c_free(funcd_blob *b)
{
    CINNER(b)->free(CINNER(b));
}

typedef struct first_only {
    counting *blob;
    int calls, gets_then;
    char line[512];
} first_only;

/* Keeps the first record and how many segments had been read by then. */
static int stop_at_first(const char *rec, size_t len, void *payload)
{
    first_only *f = payload;
    if (f->calls++ == 0) {
        f->gets_then = f->blob->seg_gets;
        snprintf(f->line, sizeof(f->line), "%.*s", (int)len, rec);
    }
    return 1;
}

/* A node alone in the blob streams its answer as before there were
 * nodes: the first record reaches the caller after one segment was read,
 * and a caller that stops there reads no more; the lines stay in order. */
TEST(a_node_alone_streams)
{
    counting cb = {.base = FUNCD_BLOB_INIT};
    cb.base.name = "counting";
    cb.base.put = c_put;
    cb.base.get = c_get;
    cb.base.stat = c_stat;
    cb.base.list = c_list;
    cb.base.del = c_del;
    cb.base.free = c_free;
    funcd_blob_memory_new(&cb.inner);
    funcd_logstore *n1 = node(&cb.base, "n1");
    CHECK(n1 != NULL);
    if (!n1)
        return;
    int64_t t = H0 + 60000;
    for (int s = 0; s < 3; s++) {
        char text[32];
        for (int i = 0; i < 2; i++) {
            snprintf(text, sizeof(text), "a%d", s * 2 + i);
            put_line(n1, t + s * 100 + i * 20, text);
        }
        funcd_logstore_tick(n1, t + s * 100 + 20000);
    }
    first_only f = {.blob = &cb};
    cb.seg_gets = 0;
    CHECK_INT(funcd_logstore_query(n1, "default", "f", 0, NULL, 0, stop_at_first, &f), 0);
    int read_after_stop = cb.seg_gets;
    got g = {0};
    CHECK_INT(funcd_logstore_query(n1, "default", "f", 0, NULL, 0, collect, &g), 0);
    char all[512];
    CHECK_STR(seen(&g, all, sizeof(all)), "n1:a0,n1:a1,n1:a2,n1:a3,n1:a4,n1:a5");
    CHECK_INT(f.calls, 1);
    CHECK_INT(f.gets_then, 1);
    CHECK_INT(read_after_stop, 1);
    got_free(&g);
    funcd_logstore_free(n1);
    cb.base.free(&cb.base);
}

int main(void)
{
    RUN(either_node_reads_both_in_time_order);
    RUN(one_compaction_keeps_both_nodes_lines);
    RUN(a_read_racing_the_leaders_compaction_loses_nothing);
    RUN(without_a_name_nothing_changes);
    RUN(a_long_name_is_hashed_in_keys_only);
    RUN(a_name_that_cannot_be_a_key_is_refused);
    RUN(a_node_alone_streams);
    return HARNESS_END();
}
