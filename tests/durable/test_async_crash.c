/*
 * Async invocations survive a crash (issue 16; docs/eventing.md), through
 * the real daemon on a data directory: 500 async invocations are accepted
 * (202) while a native function works through them; funcd is killed with
 * SIGKILL mid-way and started again on the same directory. Afterwards every
 * accepted invocation reaches Succeeded, none is lost, and the worker (which
 * records each invocation id it is sent) saw each at least once; an id seen
 * twice is one that was being delivered at the kill, at most as many as the
 * queue delivers at once, and it came back with the same id.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../e2e/client.h"
#include "../e2e/env.h"
#include "../harness.h"
#include "daemon.h"
#include "util/misc.h"

#define N 500
#define IN_FLIGHT_MAX 64 /* the queue's deliveries at once (lib/eventing/queue.c) */

typedef struct crash_test {
    char dir[256], data[300], log[300], fn[300], record[300];
    dd_daemon d;
    e2e_http *h, *dp;
    e2e_resp r;
    char ids[N][40];
} crash_test;

static int start(crash_test *t)
{
    static const char *const extra[] = {"--no-sandbox", NULL}; /* the worker writes its record */
    const char *args[40];
    dd_default_args(args, 40, "--data-dir", t->data, extra);
    if (dd_start(&t->d, t->log, args) < 0)
        return -1;
    e2e_http_free(t->h);
    e2e_http_free(t->dp);
    t->h = e2e_http_new(t->d.cp);
    t->dp = e2e_http_new(t->d.dp);
    return t->h && t->dp ? 0 : -1;
}

static size_t record_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    size_t n = 0;
    int c;
    while (f && (c = fgetc(f)) != EOF)
        n += c == '\n';
    if (f)
        fclose(f);
    return n;
}

/* How many of the accepted ids are Succeeded (one list of the namespace). */
static int succeeded(crash_test *t)
{
    if (e2e_http_do(t->h, "GET", DD_NS "/invocations", DD_TOKEN, NULL, &t->r) != 200)
        return -1;
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, jget(t->r.json, "items"))
    {
        const char *state = jstr(it, "status.state");
        n += state && strcmp(state, "Succeeded") == 0;
    }
    return n;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(a, b);
}

static void crash_body(crash_test *t)
{
    char exe[400], body[1024];
    snprintf(exe, sizeof(exe), "%s/worker", t->fn);
    CHECK(mkdir(t->fn, 0755) == 0 && funcd_link_or_copy(SERVING_WORKER, exe, 0755) == 0);
    CHECK(start(t) == 0);
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"rec\"},\"spec\":{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":"
             "{\"path\":\"%s\"},\"env\":{\"FIXTURE_RECORD\":\"%s\"},\"scaling\":{\"maxReplicas\":"
             "2,\"concurrency\":4,\"queueLength\":1000}}}",
             t->fn, t->record);
    CHECK_INT(e2e_http_do(t->h, "POST", DD_NS "/functions", DD_TOKEN, body, &t->r), 201);
    /* Deliveries take 600 ms each, 8 at once (2 replicas x 4): about 13 a
     * second, so the 500 posts may take up to ~18 s (a loaded machine took
     * 14) before half are done and the kill below is no longer mid-way. */
    for (int i = 0; i < N; i++) {
        if (e2e_http_do(t->dp, "POST", "/async/fn/default/rec/sleep?ms=600", NULL, "x", &t->r) !=
            202)
            FAILF("async %d: %ld %.300s", i, t->r.status, t->r.body);
        const char *id = e2e_resp_header(&t->r, "X-Funcd-Invocation-Id", t->ids[i],
                                         sizeof(t->ids[i]));
        CHECK(id && strlen(id) == 36);
    }
    /* Kill it in the middle: some delivered, most still queued. */
    for (int i = 0; i < 600 && record_lines(t->record) < 60; i++)
        dd_sleep_ms(50);
    size_t before = record_lines(t->record);
    CHECK(before >= 60 && before < N / 2); /* most still queued or running */
    dd_kill9(&t->d);
    CHECK(start(t) == 0);
    int done = 0;
    for (int i = 0; i < 1200 && (done = succeeded(t)) < N; i++)
        dd_sleep_ms(100);
    if (done != N)
        FAILF("%d of %d invocations Succeeded after the restart", done, N);
    /* The worker's record: every id at least once, no other id, and few twice. */
    FILE *f = fopen(t->record, "r");
    CHECK(f);
    static char seen[4 * N][40];
    size_t n = 0;
    while (n < 4 * N && fgets(seen[n], sizeof(seen[n]), f)) {
        seen[n][strcspn(seen[n], "\n")] = 0;
        n++;
    }
    fclose(f);
    qsort(seen, n, sizeof(seen[0]), cmp_str);
    int twice = 0;
    for (size_t i = 1; i < n; i++)
        twice += strcmp(seen[i], seen[i - 1]) == 0;
    for (int i = 0; i < N; i++)
        if (!bsearch(t->ids[i], seen, n, sizeof(seen[0]), cmp_str))
            FAILF("invocation %s Succeeded but the worker never saw it", t->ids[i]);
    qsort(t->ids, N, sizeof(t->ids[0]), cmp_str);
    for (size_t i = 0; i < n; i++)
        if (!bsearch(seen[i], t->ids, N, sizeof(t->ids[0]), cmp_str))
            FAILF("the worker saw an id nobody was given: %s", seen[i]);
    fprintf(stderr, "  %zu deliveries before the kill, %zu in all, %d ids delivered twice\n",
            before, n, twice);
    CHECK(twice <= IN_FLIGHT_MAX);
}

TEST(async_invocations_survive_kill9)
{
    crash_test *t = calloc(1, sizeof(*t));
    CHECK(t);
    t->r = (e2e_resp)E2E_RESP_INIT;
    if (dd_tempdir(t->dir, sizeof(t->dir), "async-crash") < 0) {
        free(t);
        FAILF("mkdtemp: %s", strerror(errno));
    }
    chmod(t->dir, 0755);
    snprintf(t->data, sizeof(t->data), "%s/data", t->dir);
    snprintf(t->log, sizeof(t->log), "%s/funcd.log", t->dir);
    snprintf(t->fn, sizeof(t->fn), "%s/fn", t->dir);
    snprintf(t->record, sizeof(t->record), "%s/record", t->dir);
    crash_body(t);
    if (harness_failed_now)
        dd_dump_log(&t->d);
    dd_kill9(&t->d);
    e2e_http_free(t->h);
    e2e_http_free(t->dp);
    e2e_resp_free(&t->r);
    funcd_remove_tree(t->dir);
    free(t);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    e2e_client_global_init();
    RUN(async_invocations_survive_kill9);
    e2e_client_global_cleanup();
    return HARNESS_END();
}
