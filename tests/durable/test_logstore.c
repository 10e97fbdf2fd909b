/*
 * The logstore on the memory blob: appending, sealing by size and by age,
 * compaction into hour objects, retention, query filters, and what a
 * crash or a refusing blob leaves behind. Time is driven by hand.
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

/* The "body" of each record, joined by commas, into `out`. */
static const char *bodies(const got *g, char *out, size_t cap)
{
    out[0] = '\0';
    for (size_t i = 0; i < g->n; i++) {
        cJSON *j = cJSON_Parse(g->lines[i]);
        const char *b = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "body"));
        size_t at = strlen(out);
        snprintf(out + at, cap - at, "%s%s", i ? "," : "", b ? b : "?");
        cJSON_Delete(j);
    }
    return out;
}

static void put_line(funcd_logstore *ls, const char *fn, int64_t t, const char *inv,
                     const char *text)
{
    funcd_logstore_record r = {t, "default", fn, "fn-1", inv, 1, text, strlen(text)};
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

static funcd_logstore *store(funcd_blob **b, uint64_t seal_ms, uint64_t seal_bytes)
{
    funcd_blob_memory_new(b);
    funcd_logstore_options o = {seal_ms, seal_bytes, 0};
    funcd_logstore *ls = NULL;
    funcd_logstore_new(&ls, *b, &o);
    return ls;
}

TEST(record_format)
{
    funcd_blob *b;
    funcd_logstore *ls = store(&b, 0, 0);
    put_line(ls, "f", T0, "inv-1", "plain text");
    funcd_logstore_record err = {T0 + 1, "default", "f", "fn-2", NULL, 2, "oops", 4};
    funcd_logstore_append(ls, &err);
    const char *js = "{\"level\":\"warning\",\"msg\":\"disk low\",\"free\":3}";
    put_line(ls, "f", T0 + 2, NULL, js);
    got g = {0};
    CHECK_INT(funcd_logstore_query(ls, "default", "f", 0, NULL, 0, collect, &g), 0);
    CHECK_INT(g.n, 3);
    cJSON *a = cJSON_Parse(g.lines[0]), *e = cJSON_Parse(g.lines[1]), *s = cJSON_Parse(g.lines[2]);
    int ok = a && e && s;
    if (ok) {
        ok = !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(a, "time")), "2023-11-14T22:13:20.000Z") &&
             !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(a, "severity")), "INFO") &&
             !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(a, "invocationId")), "inv-1") &&
             !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(a, "namespace")), "default") &&
             !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(a, "function")), "f") &&
             !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "severity")), "ERROR") &&
             !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "replica")), "fn-2") &&
             !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(s, "severity")), "WARN") &&
             !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(s, "body")), "disk low") &&
             cJSON_GetObjectItem(cJSON_GetObjectItem(s, "attributes"), "free") &&
             !cJSON_GetObjectItem(cJSON_GetObjectItem(s, "attributes"), "level");
    }
    cJSON_Delete(a);
    cJSON_Delete(e);
    cJSON_Delete(s);
    got_free(&g);
    funcd_logstore_free(ls);
    b->free(b);
    CHECK(ok);
}

TEST(control_bytes_and_quotes_survive)
{
    funcd_blob *b;
    funcd_logstore *ls = store(&b, 0, 0);
    const char text[] = "a\"b\\c\td\x01" "e\0f";
    funcd_logstore_record r = {T0, "default", "f", "r", NULL, 1, text, sizeof(text) - 1};
    funcd_logstore_append(ls, &r);
    got g = {0};
    funcd_logstore_query(ls, "default", "f", 0, NULL, 0, collect, &g);
    cJSON *j = g.n == 1 ? cJSON_Parse(g.lines[0]) : NULL;
    const cJSON *body = cJSON_GetObjectItem(j, "body");
    int ok = cJSON_IsString(body) && !strcmp(body->valuestring, "a\"b\\c\td\x01" "e");
    cJSON_Delete(j);
    got_free(&g);
    funcd_logstore_free(ls);
    b->free(b);
    CHECK(ok);
}

TEST(seals_by_size)
{
    funcd_blob *b;
    funcd_logstore *ls = store(&b, 0, 1000);
    for (int i = 0; i < 30; i++) {
        char t[32];
        snprintf(t, sizeof(t), "line %d", i);
        put_line(ls, "f", T0 + i, NULL, t);
    }
    int segs = count(b, "logs/default/f/seg/");
    got g = {0};
    funcd_logstore_query(ls, "default", "f", 0, NULL, 0, collect, &g);
    size_t n = g.n;
    char all[4096];
    bodies(&g, all, sizeof(all));
    got_free(&g);
    funcd_logstore_free(ls);
    b->free(b);
    CHECK(segs >= 3);
    CHECK_INT(n, 30);
    CHECK(!strncmp(all, "line 0,line 1,line 2,", 21));
    CHECK(strstr(all, "line 28,line 29") != NULL);
}

TEST(seals_by_age)
{
    funcd_blob *b;
    funcd_logstore *ls = store(&b, 10000, 0);
    put_line(ls, "f", T0, NULL, "one");
    funcd_logstore_tick(ls, T0 + 9999);
    int before = count(b, "logs/default/f/seg/");
    funcd_logstore_tick(ls, T0 + 10000);
    int after = count(b, "logs/default/f/seg/");
    funcd_logstore_free(ls);
    b->free(b);
    CHECK_INT(before, 0);
    CHECK_INT(after, 1);
}

TEST(free_seals_and_a_new_store_reads_it)
{
    funcd_blob *b;
    funcd_logstore *ls = store(&b, 0, 0);
    put_line(ls, "f", T0, NULL, "before restart");
    funcd_logstore_free(ls);
    int segs = count(b, "logs/default/f/seg/");
    CHECK_INT(funcd_logstore_new(&ls, b, NULL), 0);
    put_line(ls, "f", T0 + 5, NULL, "after restart");
    got g = {0};
    funcd_logstore_query(ls, "default", "f", 0, NULL, 0, collect, &g);
    char all[512];
    bodies(&g, all, sizeof(all));
    got_free(&g);
    funcd_logstore_free(ls);
    b->free(b);
    CHECK_INT(segs, 1);
    CHECK_STR(all, "before restart,after restart");
}

/* Writes 3 segments in hour H0 (by age) and one line in the next hour. */
static void fill_hour(funcd_logstore *ls)
{
    int64_t t = H0 + 60000;
    for (int s = 0; s < 3; s++) {
        for (int i = 0; i < 4; i++) {
            char text[32];
            snprintf(text, sizeof(text), "s%d-%d", s, i);
            put_line(ls, "f", t + i, s == 1 ? "inv-b" : "inv-a", text);
        }
        funcd_logstore_tick(ls, t + 20000); /* seal_ms 10 s: sealed */
        t += 600000;
    }
}

TEST(compaction_keeps_every_line_in_order)
{
    funcd_blob *b;
    funcd_logstore *ls = store(&b, 10000, 0);
    fill_hour(ls);
    got g = {0};
    funcd_logstore_query(ls, "default", "f", 0, NULL, 0, collect, &g);
    char before[1024];
    bodies(&g, before, sizeof(before));
    got_free(&g);
    int segs_before = count(b, "logs/default/f/seg/");
    put_line(ls, "f", H0 + HOUR + 5, NULL, "next hour");
    funcd_logstore_tick(ls, H0 + HOUR + 60000 * 5); /* seals "next hour", compacts H0 */
    int hours = count(b, "logs/default/f/hour/"), segs = count(b, "logs/default/f/seg/");
    funcd_logstore_query(ls, "default", "f", 0, NULL, 0, collect, &g);
    char after[1024];
    bodies(&g, after, sizeof(after));
    got_free(&g);
    funcd_logstore_stats st;
    funcd_logstore_stats_get(ls, &st);
    funcd_logstore_free(ls);
    b->free(b);
    CHECK_INT(segs_before, 3);
    CHECK_INT(hours, 1);
    CHECK_INT(segs, 1); /* the next hour's, not yet finished */
    CHECK_INT(st.hours_compacted, 1);
    CHECK_STR(before, "s0-0,s0-1,s0-2,s0-3,s1-0,s1-1,s1-2,s1-3,s2-0,s2-1,s2-2,s2-3");
    CHECK_STR(after, "s0-0,s0-1,s0-2,s0-3,s1-0,s1-1,s1-2,s1-3,s2-0,s2-1,s2-2,s2-3,next hour");
}

typedef struct saved {
    char key[256];
    void *data;
    size_t len;
} saved;

static int save_first(const char *key, const funcd_blob_stat *st, void *payload)
{
    (void)st;
    saved *s = payload;
    snprintf(s->key, sizeof(s->key), "%s", key);
    return 1;
}

/* A crash after the hour object was written but before its segments were
 * deleted: the reader must not show them twice; the next pass cleans up. */
TEST(crash_between_merge_and_delete_neither_loses_nor_duplicates)
{
    funcd_blob *b;
    funcd_logstore *ls = store(&b, 10000, 0);
    fill_hour(ls);
    saved s = {0};
    b->list(b, "logs/default/f/seg/", save_first, &s);
    b->get(b, s.key, 0, FUNCD_BLOB_TO_END, &s.data, &s.len);
    funcd_logstore_tick(ls, H0 + HOUR + 60000 * 5);
    b->put(b, s.key, s.data, s.len); /* the segment "survived" the crash */
    free(s.data);
    got g = {0};
    funcd_logstore_query(ls, "default", "f", 0, NULL, 0, collect, &g);
    size_t n = g.n;
    got_free(&g);
    funcd_logstore_tick(ls, H0 + HOUR + 60000 * 7);
    int leftovers = count(b, "logs/default/f/seg/");
    funcd_logstore_query(ls, "default", "f", 0, NULL, 0, collect, &g);
    size_t n2 = g.n;
    got_free(&g);
    funcd_logstore_free(ls);
    b->free(b);
    CHECK_INT(n, 12);
    CHECK_INT(leftovers, 0);
    CHECK_INT(n2, 12);
}

/* A line stamped in an hour already compacted is merged in, not lost. */
TEST(late_segment_joins_its_hour)
{
    funcd_blob *b;
    funcd_logstore *ls = store(&b, 10000, 0);
    fill_hour(ls);
    funcd_logstore_tick(ls, H0 + HOUR + 60000 * 5);
    put_line(ls, "f", H0 + HOUR - 1, NULL, "late");
    funcd_logstore_tick(ls, H0 + HOUR + 60000 * 7);
    int segs = count(b, "logs/default/f/seg/");
    got g = {0};
    funcd_logstore_query(ls, "default", "f", 0, NULL, 0, collect, &g);
    char all[1024];
    bodies(&g, all, sizeof(all));
    got_free(&g);
    funcd_logstore_free(ls);
    b->free(b);
    CHECK_INT(segs, 0);
    CHECK(strstr(all, "s2-3,late") != NULL);
}

TEST(retention_drops_old_hours)
{
    funcd_blob *b;
    funcd_blob_memory_new(&b);
    funcd_logstore_options o = {10000, 0, 2 * HOUR};
    funcd_logstore *ls = NULL;
    CHECK_INT(funcd_logstore_new(&ls, b, &o), 0);
    fill_hour(ls);
    funcd_logstore_tick(ls, H0 + HOUR + 60000 * 5);
    int kept = count(b, "logs/default/f/hour/");
    funcd_logstore_tick(ls, H0 + 3 * HOUR - 1); /* the hour ended 2 h - 1 ms ago */
    int still = count(b, "logs/default/f/hour/");
    funcd_logstore_tick(ls, H0 + 3 * HOUR + 60000);
    int gone = count(b, "logs/default/f/hour/");
    funcd_logstore_stats st;
    funcd_logstore_stats_get(ls, &st);
    funcd_logstore_free(ls);
    b->free(b);
    CHECK_INT(kept, 1);
    CHECK_INT(still, 1);
    CHECK_INT(gone, 0);
    CHECK_INT(st.hours_expired, 1);
}

TEST(query_filters_since_invocation_and_tail)
{
    funcd_blob *b;
    funcd_logstore *ls = store(&b, 10000, 0);
    fill_hour(ls); /* segments at H0+1m, +11m, +21m */
    funcd_logstore_tick(ls, H0 + HOUR + 60000 * 5);
    put_line(ls, "f", H0 + HOUR + 1, "inv-b", "open b"); /* still in memory */
    got g = {0};
    char all[1024];
    funcd_logstore_query(ls, "default", "f", H0 + 600000, NULL, 0, collect, &g);
    bodies(&g, all, sizeof(all));
    got_free(&g);
    CHECK_STR(all, "s1-0,s1-1,s1-2,s1-3,s2-0,s2-1,s2-2,s2-3,open b");
    funcd_logstore_query(ls, "default", "f", 0, "inv-b", 0, collect, &g);
    bodies(&g, all, sizeof(all));
    got_free(&g);
    CHECK_STR(all, "s1-0,s1-1,s1-2,s1-3,open b");
    funcd_logstore_query(ls, "default", "f", 0, "inv-a", 3, collect, &g);
    bodies(&g, all, sizeof(all));
    got_free(&g);
    CHECK_STR(all, "s2-1,s2-2,s2-3");
    funcd_logstore_query(ls, "default", "other", 0, NULL, 0, collect, &g);
    CHECK_INT(g.n, 0);
    funcd_logstore_free(ls);
    b->free(b);
}

/* A blob that refuses puts while `refuse` is set. */
typedef struct flaky {
    funcd_blob base;
    funcd_blob *inner;
    int refuse;
} flaky;

static int flaky_put(funcd_blob *b, const char *key, const void *data, size_t len)
{
    flaky *f = (flaky *)b;
    if (f->refuse)
        return funcd_error_set(FUNCD_ENOSPC, "test: disk full");
    return f->inner->put(f->inner, key, data, len);
}
static int flaky_get(funcd_blob *b, const char *k, uint64_t o, uint64_t l, void **out, size_t *n)
{
    return ((flaky *)b)->inner->get(((flaky *)b)->inner, k, o, l, out, n);
}
static int flaky_list(funcd_blob *b, const char *p, funcd_blob_list_cb cb, void *pl)
{
    return ((flaky *)b)->inner->list(((flaky *)b)->inner, p, cb, pl);
}
static int flaky_del(funcd_blob *b, const char *k)
{
    return ((flaky *)b)->inner->del(((flaky *)b)->inner, k);
}

TEST(a_refusing_blob_loses_nothing_until_it_recovers)
{
    funcd_blob *inner;
    funcd_blob_memory_new(&inner);
    flaky f = {.inner = inner, .refuse = 1};
    f.base.version = FUNCD_BLOB_VERSION;
    f.base.put = flaky_put;
    f.base.get = flaky_get;
    f.base.list = flaky_list;
    f.base.del = flaky_del;
    funcd_logstore_options o = {10000, 200, 0};
    funcd_logstore *ls = NULL;
    CHECK_INT(funcd_logstore_new(&ls, &f.base, &o), 0);
    for (int i = 0; i < 10; i++)
        put_line(ls, "f", T0 + i, NULL, "some line that is long enough");
    funcd_logstore_tick(ls, T0 + 20000);
    got g = {0};
    funcd_logstore_query(ls, "default", "f", 0, NULL, 0, collect, &g);
    size_t while_refused = g.n;
    got_free(&g);
    int stored_then = count(inner, "logs/");
    f.refuse = 0;
    funcd_logstore_tick(ls, T0 + 21000);
    int stored_now = count(inner, "logs/");
    funcd_logstore_query(ls, "default", "f", 0, NULL, 0, collect, &g);
    size_t after = g.n;
    got_free(&g);
    funcd_logstore_stats st;
    funcd_logstore_stats_get(ls, &st);
    funcd_logstore_free(ls);
    inner->free(inner);
    CHECK_INT(while_refused, 10);
    CHECK_INT(stored_then, 0);
    CHECK(stored_now > 0);
    CHECK_INT(after, 10);
    CHECK(st.put_failures > 0);
    CHECK_INT(st.dropped, 0);
}

TEST(since_parses_durations)
{
    int64_t s;
    CHECK_INT(funcd_logstore_parse_since("90s", T0, &s), 0);
    CHECK_INT(s, T0 - 90000);
    CHECK_INT(funcd_logstore_parse_since("2h", T0, &s), 0);
    CHECK_INT(s, T0 - 2 * HOUR);
    CHECK_INT(funcd_logstore_parse_since("1h30m", T0, &s), 0);
    CHECK_INT(s, T0 - 90 * 60000);
    CHECK_INT(funcd_logstore_parse_since("3d", T0, &s), 0);
    CHECK_INT(s, T0 - 72 * HOUR);
    CHECK_INT(funcd_logstore_parse_since("soon", T0, &s), FUNCD_EINVAL);
    CHECK_INT(funcd_logstore_parse_since("", T0, &s), FUNCD_EINVAL);
    CHECK_INT(funcd_logstore_parse_since("-5m", T0, &s), FUNCD_EINVAL);
}

int main(void)
{
    RUN(record_format);
    RUN(control_bytes_and_quotes_survive);
    RUN(seals_by_size);
    RUN(seals_by_age);
    RUN(free_seals_and_a_new_store_reads_it);
    RUN(compaction_keeps_every_line_in_order);
    RUN(crash_between_merge_and_delete_neither_loses_nor_duplicates);
    RUN(late_segment_joins_its_hour);
    RUN(retention_drops_old_hours);
    RUN(query_filters_since_invocation_and_tail);
    RUN(a_refusing_blob_loses_nothing_until_it_recovers);
    RUN(since_parses_durations);
    return HARNESS_END();
}
