/*
 * Cold start with the sandbox against without it, in the same run: the
 * process runtime starts a worker, we time from start() to the first byte
 * of its answer on FUNCD_LISTEN, then kill it and wait for its exit. Rounds
 * alternate between the two runtimes so that both see the same machine.
 *
 *   sandbox-bench N RUNDIR [-b DIR]... [-e KEY=VALUE]... -- PROGRAM [ARGS...]
 *
 * -b shows DIR read-only to the sandboxed worker (PROGRAM's own directory
 * is shown anyway); RUNDIR holds the socket. Prints p50/p99 of each and the
 * difference of the medians. The loop runs between rounds, as a platform's
 * does, so the sandboxed runtime refills its blank inits there (ADR 0013,
 * point 9) and only its first round clones at start.
 *
 * With -2 MNT both runtimes are sandboxed, the second with its workers'
 * cgroups on the cgroup v2 layout at the cgroup2 mount MNT (forced through
 * FUNCD_TEST_CGROUP2_ROOT, docs/adr/0042-cgroup-v2.md): cloned into their
 * cgroups against the first's layout (v1 on a hybrid host: moved into them).
 */
#include <errno.h>
#include <event2/event.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "funcd/funcd.h"
#include "funcd/sys/runtime.h"

#define MAX_BINDS 8
#define MAX_ENV 16

typedef struct bench {
    struct event_base *loop;
    char sock[108];
    funcd_worker_bind binds[MAX_BINDS + 2];
    size_t n_binds;
    const char *env[MAX_ENV + 2];
    char **argv;
    int exited;
    double start_ms; /* time spent in start() (until the worker exec'd) */
    const char *cgroup2; /* -2 MNT, or NULL */
} bench;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *t, int n, int p)
{
    int i = n * p / 100;
    return t[i < n ? i : n - 1];
}

static void on_exit_cb(funcd_worker *w, int status, void *payload)
{
    ((bench *)payload)->exited = 1;
}

/* Connects until the worker listens, then times one GET's first byte. */
static int first_byte(const char *sock, double deadline)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", sock);
    static const char req[] = "GET / HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n";
    while (now_ms() < deadline) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0) {
            close(fd);
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
            continue;
        }
        char c;
        int ok = write(fd, req, sizeof(req) - 1) == (ssize_t)(sizeof(req) - 1) &&
                 read(fd, &c, 1) == 1;
        close(fd);
        return ok ? 0 : -1;
    }
    return -1;
}

/* One cold start; its duration in ms, or a negative number. */
static double one_round(bench *b, funcd_runtime *rt)
{
    unlink(b->sock);
    funcd_worker_spec spec = {(const char *const *)b->argv, b->env, NULL, NULL, {0, 0, 0},
                              b->binds, b->n_binds, FUNCD_WORKER_NETWORK_NONE};
    funcd_worker_events ev = {NULL, on_exit_cb, b};
    funcd_worker *w;
    double t0 = now_ms();
    if (rt->start(rt, &spec, &ev, &w) < 0) {
        fprintf(stderr, "start: %s\n", funcd_error_last()->message);
        return -1;
    }
    b->start_ms += now_ms() - t0;
    double took = first_byte(b->sock, t0 + 10000) == 0 ? now_ms() - t0 : -1;
    b->exited = 0;
    rt->stop(rt, w, 0);
    while (!b->exited)
        event_base_loop(b->loop, EVLOOP_ONCE);
    rt->release(rt, w);
    return took;
}

static int parse(bench *b, int argc, char **argv)
{
    size_t n_env = 0;
    int i = 3;
    static char listen[140];
    snprintf(b->sock, sizeof(b->sock), "%s/s.sock", argv[2]);
    snprintf(listen, sizeof(listen), "FUNCD_LISTEN=%s", b->sock);
    b->env[n_env++] = listen;
    b->env[n_env++] = "PATH=/usr/bin:/bin";
    /* The run directory and the program's are what serving makes its own
     * copies of (idmapped, as a bundle's code is); -b binds are host paths. */
    b->binds[b->n_binds++] = (funcd_worker_bind){argv[2], NULL, 1, 1};
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "-b") == 0 && i + 1 < argc && b->n_binds < MAX_BINDS)
            b->binds[b->n_binds++] = (funcd_worker_bind){argv[++i], NULL, 0};
        else if (strcmp(argv[i], "-e") == 0 && i + 1 < argc && n_env < MAX_ENV)
            b->env[n_env++] = argv[++i];
        else if (strcmp(argv[i], "-2") == 0 && i + 1 < argc)
            b->cgroup2 = argv[++i];
        else
            return -1;
    }
    if (i + 1 >= argc)
        return -1;
    b->argv = argv + i + 1;
    static char prog_dir[4096];
    snprintf(prog_dir, sizeof(prog_dir), "%s", b->argv[0]);
    b->binds[b->n_binds++] = (funcd_worker_bind){dirname(prog_dir), NULL, 0, 1};
    return 0;
}

int main(int argc, char **argv)
{
    bench b = {0};
    int n = argc > 1 ? atoi(argv[1]) : 0;
    if (argc < 5 || n <= 0 || parse(&b, argc, argv) < 0) {
        fprintf(stderr, "usage: sandbox-bench N RUNDIR [-b DIR]... [-e K=V]... [-2 CGROUP2_MNT] "
                        "-- PROGRAM [ARGS...]\n");
        return 2;
    }
    b.loop = event_base_new();
    funcd_runtime *rt[2];
    static const char *const names[2][2] = {{"sandbox off", "sandbox on"},
                                            {"sandbox, default cgroups", "sandbox, cgroup v2"}};
    const char *const *name = names[b.cgroup2 != NULL];
    for (int m = 0; m < 2; m++) {
        if (m && b.cgroup2) /* read when the runtime is made */
            setenv("FUNCD_TEST_CGROUP2_ROOT", b.cgroup2, 1);
        int made = funcd_runtime_process_new_with(
            &rt[m], &(funcd_process_options){FUNCD_PROCESS_OPTIONS_VERSION,
                                             m || b.cgroup2 ? 1 : -1});
        unsetenv("FUNCD_TEST_CGROUP2_ROOT");
        if (made < 0 || rt[m]->attach(rt[m], b.loop) < 0) {
            fprintf(stderr, "runtime: %s\n", funcd_error_last()->message);
            return 1;
        }
    }
    double *t[2] = {calloc((size_t)n, sizeof(double)), calloc((size_t)n, sizeof(double))};
    int rc = 0;
    double in_start[2] = {0, 0};
    for (int i = 0; i < n && rc == 0; i++)
        for (int m = 0; m < 2 && rc == 0; m++) {
            b.start_ms = 0;
            if ((t[m][i] = one_round(&b, rt[m])) < 0)
                rc = 1;
            in_start[m] += b.start_ms;
        }
    for (int m = 0; m < 2 && rc == 0; m++) {
        qsort(t[m], (size_t)n, sizeof(double), cmp);
        printf("%s: n=%d p50=%.2f ms p99=%.2f ms (start() took %.2f ms on average)\n", name[m],
               n, pct(t[m], n, 50), pct(t[m], n, 99), in_start[m] / n);
    }
    if (rc == 0)
        printf("%s %.2f ms at p50\n", b.cgroup2 ? "cgroup v2 placement differs by" :
               "sandbox adds", pct(t[1], n, 50) - pct(t[0], n, 50));
    for (int m = 0; m < 2; m++) {
        rt[m]->free(rt[m]);
        free(t[m]);
    }
    unlink(b.sock);
    event_base_free(b.loop);
    return rc;
}
