#include "conformance.h"

#include <stdarg.h>
#include <time.h>

void conf_fail(conf_case *cc, const char *file, int line, const char *fmt, ...)
{
    cc->failed = 1;
    if (!cc->verbose)
        return;
    const char *base = strrchr(file, '/');
    fprintf(stderr, "  %s:%d: %s/%s: ", base ? base + 1 : file, line, cc->suite, cc->name);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int64_t conf_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t conf_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void conf_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

int conf_wait(int (*pred)(void *arg), void *arg, int timeout_ms)
{
    int64_t deadline = conf_now_ms() + timeout_ms;
    for (;;) {
        int ok = pred(arg);
        if (ok || conf_now_ms() >= deadline)
            return ok;
        conf_sleep_ms(1);
    }
}

typedef struct sum_target {
    atomic_int *const *counts;
    size_t n;
    int want;
} sum_target;

static int sum_of(const sum_target *t)
{
    int sum = 0;
    for (size_t i = 0; i < t->n; i++)
        sum += atomic_load(t->counts[i]);
    return sum;
}

static int reached_sum(void *arg)
{
    sum_target *t = arg;
    return sum_of(t) >= t->want;
}

int conf_wait_sum(atomic_int *const *counts, size_t n, int want, int wait_ms, int settle_ms)
{
    sum_target t = {counts, n, want};
    if (conf_wait(reached_sum, &t, wait_ms))
        conf_sleep_ms(settle_ms);
    return sum_of(&t);
}

void conf_report(conf_case *cc, conf_tally *t)
{
    if (cc->failed)
        t->failed++;
    else
        t->passed++;
    if (cc->verbose)
        fprintf(stderr, "%s %s/%s\n", cc->failed ? "FAIL" : "ok  ", cc->suite, cc->name);
}
