/*
 * Interpreted functions from zero with the sandbox on and off, through a
 * platform: a warm generic python3/node worker is specialized into each
 * function's sandbox (its code appears in the running worker's view), and
 * the first request of each round is timed. Prints p50 of both; asserts
 * that every round is served, and for python3 and node that every round
 * after the first is served by a process that was running before its
 * request was sent: the warm generic worker, not a fresh start.
 *
 *   test_sandbox_coldstart python3|node|native
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "test_serving_common.h"

#define ROUNDS 15

static const char *runtime_name, *fixture, *handler;
static int generic; /* python3, node: a warm generic worker serves each round */

/* Now, in clock ticks since boot (the clock of /proc/<pid>/stat's start). */
static long long boot_ticks(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    long hz = sysconf(_SC_CLK_TCK);
    return (long long)ts.tv_sec * hz + (long long)ts.tv_nsec / (1000000000LL / hz);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ROUNDS new functions, each started from zero by its first request; the
 * median of those requests in ms, or -1. */
static double rounds(int sandboxed, int *fresh)
{
    env e;
    double t[ROUNDS], p50 = -1;
    *fresh = 0;
    char dir[256];
    int ok = env_up_with(&e, NULL, sandboxed ? NULL : funcd_with_sandbox(0), NULL, NULL) == 0 &&
             sv_fixture(fixture, dir, sizeof(dir)) == 0;
    for (int i = 0; ok && i < ROUNDS + 1; i++) {
        char name[32], path[96];
        snprintf(name, sizeof(name), "cold-%d", i);
        ok = sv_create(&e, name, "{\"runtime\":\"%s\",\"handler\":\"%s\",\"source\":{\"path\":"
                       "\"%s\"}}", runtime_name, handler, dir) == 201 &&
             sv_wait_ready(&e, name, 10000);
        env_sleep_ms(300); /* the next generic worker is warm */
        snprintf(path, sizeof(path), "/fn/default/%s/round", name);
        long long sent = boot_ticks();
        int64_t t0 = e2e_now_ms();
        ok = ok && sv_invoke(&e, "GET", path, NULL) == 200;
        if (i > 0) /* the first round warms the page cache */
            t[i - 1] = (double)(e2e_now_ms() - t0);
        const cJSON *st = ok ? cJSON_GetObjectItemCaseSensitive(e.r.json, "started") : NULL;
        if (i > 0 && generic && (!cJSON_IsNumber(st) || st->valuedouble >= (double)sent)) {
            (*fresh)++;
            fprintf(stderr, "  round %d: a fresh worker (started %.0f, request at %lld ticks)\n",
                    i, cJSON_IsNumber(st) ? st->valuedouble : -1.0, sent);
        }
        if (!ok)
            fprintf(stderr, "  round %d: HTTP %ld %.300s\n", i, e.r.status, e.r.body);
    }
    if (ok) {
        qsort(t, ROUNDS, sizeof(double), cmp);
        p50 = t[ROUNDS / 2];
    }
    env_down(&e);
    sv_cleanup();
    return p50;
}

TEST(cold_start)
{
    int fresh_on, fresh_off;
    double on = rounds(1, &fresh_on), off = rounds(0, &fresh_off);
    fprintf(stderr, "  %s cold start p50: sandbox on %.1f ms, off %.1f ms\n", runtime_name, on,
            off);
    CHECK(on > 0 && off > 0);
    CHECK_INT(fresh_on, 0);
    CHECK_INT(fresh_off, 0);
    /* Showing a warm worker its code changes credentials in a helper that
     * shares our memory: we stay dumpable (core dumps, /proc ownership). */
    CHECK_INT(prctl(PR_GET_DUMPABLE), 1);
}

int main(int argc, char **argv)
{
    sv_init();
    runtime_name = argc > 1 ? argv[1] : "python3";
    if (geteuid() != 0)
        return 77;
    if (strcmp(runtime_name, "node") == 0) {
        if (access("/usr/bin/node", X_OK) != 0 && access("/usr/local/bin/node", X_OK) != 0)
            return 77;
        fixture = "node";
        handler = "index.js#handler";
        generic = 1;
    } else if (strcmp(runtime_name, "native") == 0) {
        fixture = "native";
        handler = "worker";
    } else {
        fixture = "python";
        handler = "main.handler";
        generic = 1;
    }
    RUN_ISOLATED(cold_start);
    e2e_client_global_cleanup();
    return HARNESS_END();
}
