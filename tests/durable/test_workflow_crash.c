/*
 * Crash test of workflow runs (issue 17, docs/adr/0046-workflow-runs.md):
 * the real daemon on a data directory, 50 runs of a 5-step workflow in
 * flight, SIGKILL at a random moment 5 times (restarted on the same
 * directory each time), then every run must end Succeeded and:
 *   - each step's side effect happened at least once: the step function
 *     (python3, unsandboxed so that it can write the test's directory)
 *     appends "KEY START_MS" to a file before it answers;
 *   - no step ran again after its completion was recorded: no call of a key
 *     started after the completionTime the run record gives its item.
 *
 * FUNCD_WF_CRASH_SEED sets the random seed (printed, to replay a failure).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../e2e/client.h"
#include "../e2e/env.h"
#include "../harness.h"
#include "daemon.h"
#include "util/misc.h"

#define RUNS 50
#define STEPS 5
#define KILLS 5

static const char handler_py[] =
    "import os, random, time\n"
    "def step(req):\n"
    "    key = req.headers.get('x-funcd-idempotency-key', '')\n"
    "    start = int(time.time() * 1000)\n"
    "    time.sleep(random.uniform(0.1, 0.3))\n"
    "    fd = os.open(os.path.join(os.environ['RECORD_DIR'], 'calls'),\n"
    "                 os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)\n"
    "    os.write(fd, ('%s %d\\n' % (key, start)).encode())\n"
    "    os.close(fd)\n"
    "    return {'n': (req.json() or {}).get('n', 0) + 1}\n";

typedef struct call_rec {
    char key[160];
    int64_t start;
} call_rec;

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

/* "2026-12-02T03:32:00.123Z" in ms; -1. */
static int64_t parse_ms(const char *s)
{
    struct tm tm = {0};
    int frac = 0;
    if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                     &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &frac) != 7)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm) * 1000 + frac;
}

static int start_daemon(dd_daemon *d, const char *data, const char *log)
{
    static const char *const extra[] = {"--no-sandbox", NULL};
    const char *args[40];
    dd_default_args(args, 40, "--data-dir", data, extra);
    return dd_start(d, log, args);
}

static int count_finished(e2e_http *h, e2e_resp *r, int *succeeded)
{
    *succeeded = 0;
    if (e2e_http_do(h, "GET", DD_NS "/workflowruns", DD_TOKEN, NULL, r) != 200)
        return -1;
    cJSON *list = cJSON_Parse(r->body);
    int done = 0;
    const cJSON *run;
    cJSON_ArrayForEach(run, cJSON_GetObjectItemCaseSensitive(list, "items"))
    {
        const char *phase = jstr(run, "status.phase");
        if (phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed") ||
                      !strcmp(phase, "Cancelled")))
            done++;
        *succeeded += phase && !strcmp(phase, "Succeeded");
    }
    cJSON_Delete(list);
    return done;
}

TEST(crash)
{
    char dir[256], data[300], rec[300], fn[300], log[300], body[2048], path[256];
    unsigned seed = getenv("FUNCD_WF_CRASH_SEED") ? (unsigned)atoi(getenv("FUNCD_WF_CRASH_SEED"))
                                                  : (unsigned)time(NULL);
    fprintf(stderr, "# FUNCD_WF_CRASH_SEED=%u\n", seed);
    srand(seed);
    CHECK(dd_tempdir(dir, sizeof(dir), "wfcrash") == 0);
    snprintf(data, sizeof(data), "%s/data", dir);
    snprintf(rec, sizeof(rec), "%s/rec", dir);
    snprintf(fn, sizeof(fn), "%s/fn", dir);
    snprintf(log, sizeof(log), "%s/funcd.log", dir);
    CHECK(mkdir(rec, 0755) == 0 && mkdir(fn, 0755) == 0);
    snprintf(path, sizeof(path), "%s/main.py", fn);
    CHECK(write_file(path, handler_py) == 0);

    dd_daemon d = {0};
    e2e_http *h = NULL;
    e2e_resp r = {0};
    call_rec *calls = NULL;
    cJSON *runs = NULL;
    int ok = start_daemon(&d, data, log) == 0;
    if (!ok)
        goto out;
    h = e2e_http_new(d.cp);
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"step\"},\"spec\":{\"runtime\":\"python3\",\"handler\":\"main.step\",\"source\":"
             "{\"path\":\"%s\"},\"env\":{\"RECORD_DIR\":\"%s\"},\"scaling\":{\"maxReplicas\":2}}}",
             fn, rec);
    ok = e2e_http_do(h, "POST", DD_NS "/functions", DD_TOKEN, body, &r) == 201;
    if (ok) {
        size_t n = (size_t)snprintf(body, sizeof(body),
                                    "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Workflow\","
                                    "\"metadata\":{\"name\":\"five\"},\"spec\":{\"steps\":[");
        for (int s = 0; s < STEPS; s++) {
            char dep[64] = "";
            if (s)
                snprintf(dep, sizeof(dep), ",\"dependsOn\":[\"s%d\"],\"input\":"
                         "\"$.steps.s%d.output\"", s - 1, s - 1);
            n += (size_t)snprintf(body + n, sizeof(body) - n,
                                  "%s{\"name\":\"s%d\",\"function\":\"step\"%s}", s ? "," : "", s,
                                  dep);
        }
        snprintf(body + n, sizeof(body) - n, "]}}");
        ok = e2e_http_do(h, "POST", DD_NS "/workflows", DD_TOKEN, body, &r) == 201;
    }
    for (int i = 0; ok && i < RUNS; i++)
        ok = e2e_http_do(h, "POST", DD_NS "/workflows/five/runs", DD_TOKEN, "{\"n\":0}", &r) ==
             201;
    if (!ok) {
        fprintf(stderr, "  setup: %ld %s\n", r.status, r.body ? r.body : "");
        goto out;
    }
    for (int k = 0; k < KILLS; k++) {
        int wait_ms = 300 + rand() % 1700;
        dd_sleep_ms(wait_ms);
        int succeeded = 0;
        int done = count_finished(h, &r, &succeeded);
        fprintf(stderr, "# kill %d after %d ms: %d of %d runs finished\n", k + 1, wait_ms, done,
                RUNS);
        dd_kill9(&d);
        e2e_http_free(h);
        h = NULL;
        if (start_daemon(&d, data, log) != 0) {
            ok = 0;
            goto out;
        }
        h = e2e_http_new(d.cp);
    }
    /* every run ends, and succeeds */
    int64_t deadline = funcd_mono_ms() + 120000;
    int succeeded = 0, done = 0;
    while ((done = count_finished(h, &r, &succeeded)) < RUNS && funcd_mono_ms() < deadline)
        dd_sleep_ms(200);
    if (done != RUNS || succeeded != RUNS) {
        fprintf(stderr, "  %d runs finished, %d succeeded, of %d\n", done, succeeded, RUNS);
        dd_dump_log(&d);
        ok = 0;
        goto out;
    }
    runs = cJSON_Parse(r.body);

    /* the calls the function recorded */
    snprintf(path, sizeof(path), "%s/calls", rec);
    FILE *f = fopen(path, "r");
    size_t ncalls = 0, cap = 4096;
    calls = calloc(cap, sizeof(*calls));
    char line[256];
    while (f && calls && fgets(line, sizeof(line), f) && ncalls < cap) {
        long long ms;
        if (sscanf(line, "%159s %lld", calls[ncalls].key, &ms) == 2) {
            calls[ncalls].start = ms;
            ncalls++;
        }
    }
    if (f)
        fclose(f);
    size_t twice = 0;
    const cJSON *run;
    cJSON_ArrayForEach(run, cJSON_GetObjectItemCaseSensitive(runs, "items"))
    {
        const char *id = jstr(run, "metadata.name");
        if (jnum(run, "status.output.n") != STEPS) {
            fprintf(stderr, "  run %s: output %s\n", id, cJSON_PrintUnformatted(jget(run, "status")));
            ok = 0;
        }
        for (int s = 0; ok && s < STEPS; s++) {
            char key[160], name[8];
            snprintf(name, sizeof(name), "s%d", s);
            snprintf(key, sizeof(key), "%s/s%d/0", id, s);
            const cJSON *items = jget(jget(jget(run, "status.steps"), name), "items");
            int64_t done_at = parse_ms(jstr(cJSON_GetArrayItem(items, 0), "completionTime"));
            size_t seen = 0;
            for (size_t c = 0; c < ncalls; c++) {
                if (strcmp(calls[c].key, key) != 0)
                    continue;
                seen++;
                if (done_at < 0 || calls[c].start > done_at) {
                    fprintf(stderr, "  %s ran at %lld, after its completion was recorded at "
                            "%lld\n", key, (long long)calls[c].start, (long long)done_at);
                    ok = 0;
                }
            }
            if (seen == 0) {
                fprintf(stderr, "  %s: no call recorded\n", key);
                ok = 0;
            }
            twice += seen > 1;
        }
    }
    fprintf(stderr, "# %zu calls recorded for %d steps; %zu steps called more than once "
            "(a crash between the call and the record of its result)\n",
            ncalls, RUNS * STEPS, twice);
out:
    cJSON_Delete(runs);
    free(calls);
    e2e_resp_free(&r);
    e2e_http_free(h);
    dd_stop(&d);
    if (!ok) {
        dd_dump_log(&d);
        FAILF("see above (seed %u)", seed);
    }
    funcd_remove_tree(dir);
}

int main(void)
{
    RUN(crash);
    e2e_client_global_cleanup();
    return HARNESS_END();
}
