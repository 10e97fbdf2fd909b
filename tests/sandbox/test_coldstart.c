/*
 * Interpreted functions from zero with the sandbox on and off, through a
 * platform: a warm generic python3/node worker is specialized into each
 * function's sandbox (its code appears in the running worker's view), and
 * the first request of each round is timed. Prints p50 of both; asserts
 * only that every round is served by a new replica of the right function.
 *
 *   test_sandbox_coldstart python3|node|native
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "test_serving_common.h"

#define ROUNDS 15

static const char *runtime_name, *fixture, *handler;

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ROUNDS new functions, each started from zero by its first request; the
 * median of those requests in ms, or -1. */
static double rounds(int sandboxed)
{
    env e;
    double t[ROUNDS], p50 = -1;
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
        int64_t t0 = e2e_now_ms();
        ok = ok && sv_invoke(&e, "GET", path, NULL) == 200;
        if (i > 0) /* the first round warms the page cache */
            t[i - 1] = (double)(e2e_now_ms() - t0);
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
    double on = rounds(1), off = rounds(0);
    fprintf(stderr, "  %s cold start p50: sandbox on %.1f ms, off %.1f ms\n", runtime_name, on,
            off);
    CHECK(on > 0 && off > 0);
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
    } else if (strcmp(runtime_name, "native") == 0) {
        fixture = "native";
        handler = "worker";
    } else {
        fixture = "python";
        handler = "main.handler";
    }
    RUN_ISOLATED(cold_start);
    e2e_client_global_cleanup();
    return HARNESS_END();
}
