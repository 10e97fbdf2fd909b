/*
 * Crash-only restart (issue 6): a deployed native Function serves; funcd is
 * killed with -9; a new funcd on the same data directory serves the
 * Function again without it being applied again, and no worker of the first
 * run is left (the runtime's pid files, DIR/state/pids, name them with
 * their start times, so a recycled pid is not mistaken for a survivor).
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../e2e/client.h"
#include "../e2e/env.h"
#include "../harness.h"
#include "daemon.h"
#include "util/misc.h"

#define MAX_WORKERS 64

typedef dd_proc worker_rec;

typedef struct restart_test {
    char dir[256], data[300], fn[300], log[300], pids[320];
    dd_daemon d;
    e2e_http *h, *dp;
    e2e_resp r;
} restart_test;

/* The workers the runtime's pid files name. */
static size_t read_workers(const char *dir, worker_rec *out, size_t max)
{
    DIR *d = opendir(dir);
    size_t n = 0;
    struct dirent *de;
    while (d && n < max && (de = readdir(d))) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end || pid <= 0)
            continue;
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        FILE *f = fopen(path, "re");
        unsigned long long start = 0;
        char line[256];
        while (f && fgets(line, sizeof(line), f))
            sscanf(line, "start %llu", &start);
        if (f)
            fclose(f);
        out[n++] = (worker_rec){(pid_t)pid, start};
    }
    if (d)
        closedir(d);
    return n;
}

static int start(restart_test *t)
{
    const char *args[32];
    dd_default_args(args, 32, "--data-dir", t->data, NULL);
    if (dd_start(&t->d, t->log, args) < 0)
        return -1;
    e2e_http_free(t->h);
    e2e_http_free(t->dp);
    t->h = e2e_http_new(t->d.cp);
    t->dp = e2e_http_new(t->d.dp);
    return t->h && t->dp ? 0 : -1;
}

/* Polls the function until it answers 200; the milliseconds it took, or -1. */
static long serve_within(restart_test *t, int timeout_ms)
{
    int64_t t0 = e2e_now_ms();
    while (e2e_now_ms() - t0 < timeout_ms) {
        if (e2e_http_do(t->dp, "GET", "/fn/default/native-fn/hello", NULL, NULL, &t->r) == 200)
            return (long)(e2e_now_ms() - t0);
        dd_sleep_ms(20);
    }
    fprintf(stderr, "  the function did not serve: HTTP %ld %.300s\n", t->r.status, t->r.body);
    return -1;
}

static void restart_body(restart_test *t)
{
    CHECK(start(t) == 0);
    char body[1024];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"native-fn\"},\"spec\":{\"runtime\":\"native\",\"handler\":\"worker\","
             "\"source\":{\"path\":\"%s\"}}}",
             t->fn);
    CHECK_INT(e2e_http_do(t->h, "PUT", DD_NS "/functions/native-fn", DD_TOKEN, body, &t->r), 201);
    CHECK(serve_within(t, 15000) >= 0);
    worker_rec before[MAX_WORKERS], files[MAX_WORKERS];
    size_t nbefore = dd_descendants(t->d.pid, before, MAX_WORKERS);
    size_t nfiles = read_workers(t->pids, files, MAX_WORKERS);
    CHECK(nbefore > 0);
    if (nfiles == 0)
        fprintf(stderr, "  note: no pid files in %s: a restart cannot end workers that "
                        "outlived funcd\n", t->pids);

    dd_kill9(&t->d);
    CHECK(start(t) == 0);
    long ms = serve_within(t, 10000);
    CHECK(ms >= 0);
    fprintf(stderr, "  serving again %ld ms after the restart printed its addresses; "
                    "%zu processes of the first run checked gone\n", ms, nbefore);
    /* Serving again means the start is over: ending leftovers is part of it. */
    for (size_t i = 0; i < nbefore; i++)
        if (!dd_pid_gone(before[i].pid, before[i].start))
            FAILF("process %ld of the crashed run is still alive after the restart serves",
                  (long)before[i].pid);
    worker_rec after[MAX_WORKERS];
    size_t nafter = read_workers(t->pids, after, MAX_WORKERS);
    for (size_t i = 0; i < nafter; i++)
        for (size_t j = 0; j < nfiles; j++)
            if (after[i].pid == files[j].pid && after[i].start == files[j].start)
                FAILF("pid file of the old worker %ld survived the restart", (long)after[i].pid);
    /* The Function was served from the store: still generation 1. */
    CHECK_INT(e2e_http_do(t->h, "GET", DD_NS "/functions/native-fn", DD_TOKEN, NULL, &t->r), 200);
    CHECK_INT((long)jnum(t->r.json, "metadata.generation"), 1);
}

TEST(restart_serves_again_and_leaves_no_orphan)
{
    restart_test t = {.r = E2E_RESP_INIT};
    if (dd_tempdir(t.dir, sizeof(t.dir), "restart") < 0)
        FAILF("mkdtemp: %s", strerror(errno));
    /* Sandboxed workers run as nobody and must reach their code. */
    chmod(t.dir, 0755);
    snprintf(t.data, sizeof(t.data), "%s/data", t.dir);
    snprintf(t.fn, sizeof(t.fn), "%s/fn", t.dir);
    snprintf(t.log, sizeof(t.log), "%s/funcd.log", t.dir);
    snprintf(t.pids, sizeof(t.pids), "%s/state/pids", t.data);
    char exe[400];
    snprintf(exe, sizeof(exe), "%s/worker", t.fn);
    if (mkdir(t.fn, 0755) == 0 && funcd_link_or_copy(SERVING_WORKER, exe, 0755) == 0)
        restart_body(&t);
    else
        harness_failed_now = 1;
    if (harness_failed_now)
        dd_dump_log(&t.d);
    worker_rec last[MAX_WORKERS];
    size_t nlast = t.d.pid > 0 ? dd_descendants(t.d.pid, last, MAX_WORKERS) : 0;
    dd_kill9(&t.d);
    /* Workers die with funcd; any that did not is a finding, and ours to end. */
    if (!dd_all_gone(last, nlast, 5000)) {
        for (size_t i = 0; i < nlast; i++)
            if (!dd_pid_gone(last[i].pid, last[i].start))
                kill(last[i].pid, SIGKILL);
        fprintf(stderr, "  processes of funcd outlived its kill -9 by 5 s\n");
        harness_failed_now = 1;
    }
    e2e_http_free(t.h);
    e2e_http_free(t.dp);
    e2e_resp_free(&t.r);
    funcd_remove_tree(t.dir);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    e2e_client_global_init();
    RUN(restart_serves_again_and_leaves_no_orphan);
    e2e_client_global_cleanup();
    return HARNESS_END();
}
