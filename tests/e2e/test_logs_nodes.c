/*
 * Logs across nodes, end to end (docs/adr/0043-logs-and-images-across-nodes.md):
 * two in-memory platforms, "n1" and "n2", share one store on a real
 * PostgreSQL (tests/pg_env.c) and one file blob directory, as two funcd
 * processes of a cluster do. One function is served by both data planes;
 * its logs read through either node's API hold the lines of both nodes,
 * each with its node, in time order; tailLines counts both nodes' lines;
 * follow replays both nodes' history, then streams the answering node's.
 *
 * Skips (77) when PostgreSQL is not installed.
 */
#include <string.h>
#include <unistd.h>

#include "../harness.h"
#include "../pg_env.h"
#include "funcd/sys/blob.h"
#include "funcd/sys/error.h"
#include "funcd/sys/store.h"
#include "test_serving_common.h"
#include "util/misc.h"

#define ROUNDS 3
#define REQ_ON(n, method, path) env_req((n), (method), (path), VIEWER_TOKEN, NULL)

static pg_env pg;
static char blob_dir[256];

static funcd_option *node_blob(void)
{
    funcd_blob *b = NULL;
    return funcd_blob_file_new(&b, blob_dir) == 0 ? funcd_with_blob(b) : NULL;
}

/* Node `name` on the shared PostgreSQL store and blob directory; segments
 * sealed after 200 ms so other nodes see them soon. */
static int node_up(env *e, const char *name)
{
    funcd_store *s = NULL;
    if (funcd_store_postgres_new(&s, pg.conninfo, NULL) < 0)
        return -1;
    funcd_option *blob = node_blob();
    if (!blob) {
        s->free(s);
        return -1;
    }
    return env_up_with(e, s, funcd_with_node_name(name), blob,
                       funcd_with_log_persistence(200, 0, 0));
}

/* What the worker printed as JSON for /log?msg=round-…, as "node:body"
 * joined by commas; whether no record's time goes back from the one
 * before it, and how often the node changes from one of them to the next. */
static void rounds_seen(const char *body, char *out, size_t cap, int *ordered, int *switches)
{
    out[0] = '\0';
    *ordered = 1;
    *switches = 0;
    char last[40] = "", last_node[64] = "";
    for (const char *p = body; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        cJSON *rec = cJSON_ParseWithLength(p, len);
        const char *b = jstr(rec, "body"), *n = jstr(rec, "node"), *t = jstr(rec, "time");
        const char *line = jstr(rec, "line");
        if (t && strcmp(t, last) < 0)
            *ordered = 0; /* RFC 3339 UTC with milliseconds sorts as text */
        if (t)
            snprintf(last, sizeof(last), "%s", t);
        if (b && !strncmp(b, "round-", 6) && line && line[0] == '{') {
            size_t at = strlen(out);
            snprintf(out + at, cap - at, "%s%s:%s", at ? "," : "", n ? n : "-", b);
            *switches += last_node[0] && n && strcmp(n, last_node) != 0;
            snprintf(last_node, sizeof(last_node), "%s", n ? n : "-");
        }
        cJSON_Delete(rec);
        p = nl ? nl + 1 : NULL;
    }
}

typedef struct want {
    const char *path;
    size_t n; /* lines expected */
    char got[1024];
    int ordered, switches;
} want;

static size_t count_of(const char *list)
{
    size_t n = list[0] != '\0';
    for (const char *c = list; *c; c++)
        n += *c == ',';
    return n;
}

/* Every expected line is there (each once: round-a* from n1, round-b*
 * from n2). */
static int complete(const want *w)
{
    if (count_of(w->got) != w->n)
        return 0;
    for (int i = 0; i < ROUNDS; i++) {
        char a[32], b[32];
        snprintf(a, sizeof(a), "n1:round-a%d", i);
        snprintf(b, sizeof(b), "n2:round-b%d", i);
        if (!strstr(w->got, a) || !strstr(w->got, b))
            return 0;
    }
    return 1;
}

static int logs_are(env *e, void *arg)
{
    want *w = arg;
    if (REQ("GET", w->path, VIEWER_TOKEN, NULL) != 200)
        return 0;
    rounds_seen(e->r.body, w->got, sizeof(w->got), &w->ordered, &w->switches);
    return complete(w);
}

static int serves(env *e, void *arg)
{
    (void)arg;
    return sv_invoke(e, "GET", DP_PATH("talker") "/log?msg=warm", NULL) == 200;
}

/* Both nodes serve; n1 and n2 take turns with 200 ms between lines, so
 * the merged answer must alternate (unmerged, it came node by node). */
static void serve_and_read(env *n1, env *n2)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(sv_create(n1, "talker",
                        "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"}}",
                        dir),
              201);
    /* applied through n1, served by both */
    if (!env_poll(n1, 20000, serves, NULL) || !env_poll(n2, 20000, serves, NULL))
        FAILF("the function is not served by both nodes");
    for (int i = 0; i < ROUNDS; i++) {
        char path[128];
        snprintf(path, sizeof(path), DP_PATH("talker") "/log?msg=round-a%d", i);
        CHECK_INT(sv_invoke(n1, "GET", path, NULL), 200);
        usleep(200000);
        snprintf(path, sizeof(path), DP_PATH("talker") "/log?msg=round-b%d", i);
        CHECK_INT(sv_invoke(n2, "GET", path, NULL), 200);
        usleep(200000);
    }
    want w1 = {FN_PATH("talker") "/logs", 2 * ROUNDS, "", 0, 0};
    want w2 = w1;
    if (!env_poll(n1, 20000, logs_are, &w1))
        FAILF("n1 does not answer every line of both nodes: %s", w1.got);
    if (!env_poll(n2, 20000, logs_are, &w2))
        FAILF("n2 does not answer every line of both nodes: %s", w2.got);
    if (!w1.ordered || !w2.ordered || w1.switches < 2 * ROUNDS - 2 || w2.switches < 2 * ROUNDS - 2)
        FAILF("not merged by time: n1 answered %s (ordered %d), n2 %s (ordered %d)", w1.got,
              w1.ordered, w2.got, w2.ordered);
    /* tailLines counts the lines of both nodes: the last ones are n2's and
     * n1's last rounds, and nothing of the first */
    CHECK_INT(REQ_ON(n1, "GET", FN_PATH("talker") "/logs?tailLines=3"), 200);
    CHECK(!strstr(n1->r.body, "round-a0") && !strstr(n1->r.body, "round-b0"));
    CHECK_CONTAINS(n1->r.body, "round-b2");

    /* follow through n2: the merged history first (n1's lines too), then
     * n2's new line, stamped with its node */
    e2e_watch *f = env_watch(n2, FN_PATH("talker") "/logs?follow=true", VIEWER_TOKEN);
    CHECK(f != NULL);
    CHECK_INT(e2e_watch_status(f, 3000), 200);
    CHECK_INT(sv_invoke(n2, "GET", DP_PATH("talker") "/log?msg=live-b", NULL), 200);
    int history_of_n1 = 0, live = 0;
    int64_t deadline = e2e_now_ms() + 10000;
    while (!live && e2e_now_ms() < deadline) {
        cJSON *rec = e2e_watch_next_json(f, 500);
        const char *b = jstr(rec, "body"), *n = jstr(rec, "node");
        history_of_n1 |= b && !strcmp(b, "round-a2") && n && !strcmp(n, "n1");
        live |= b && !strcmp(b, "live-b") && n && !strcmp(n, "n2");
        cJSON_Delete(rec);
    }
    CHECK(history_of_n1);
    CHECK(live);
}

static void both_nodes_read_every_nodes_lines_in_time_order(void)
{
    env n1, n2;
    memset(&n1, 0, sizeof(n1));
    memset(&n2, 0, sizeof(n2));
    if (node_up(&n1, "n1") < 0 || node_up(&n2, "n2") < 0)
        FAILF("cannot start two nodes: %s", funcd_error_last()->message);
    else
        serve_and_read(&n1, &n2);
    env_down(&n2);
    env_down(&n1);
}

int main(void)
{
    if (!pg_env_present()) {
        fprintf(stderr, "skip: PostgreSQL is not installed (scripts/install-deps.sh test)\n");
        return 77;
    }
    sv_init();
    snprintf(blob_dir, sizeof(blob_dir), "/tmp/funcd-logs-nodes-XXXXXX");
    if (!mkdtemp(blob_dir) || pg_env_start(&pg) < 0) {
        fprintf(stderr, "FAIL cannot start PostgreSQL or make %s\n", blob_dir);
        pg_env_free(&pg);
        return 1;
    }
    RUN(both_nodes_read_every_nodes_lines_in_time_order);
    sv_cleanup();
    pg_env_free(&pg);
    funcd_remove_tree(blob_dir);
    char left[512];
    if (sv_children(left, sizeof(left))) {
        fprintf(stderr, "FAIL processes left behind: %s\n", left);
        harness_failed++;
    }
    e2e_client_global_cleanup();
    return HARNESS_END();
}
