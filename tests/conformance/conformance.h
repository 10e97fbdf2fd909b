/*
 * Shared machinery of the port conformance suites: one case = one function
 * run against a fresh backend; a failed EXPECT records where and why and
 * jumps to the case's `done:` label, which must release everything (the
 * suites also run against deliberately broken drivers under LeakSanitizer).
 */
#ifndef FUNCD_TESTS_CONFORMANCE_H
#define FUNCD_TESTS_CONFORMANCE_H

#include <inttypes.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "funcd/common.h"

typedef struct conf_case {
    const char *suite;
    const char *name;
    int verbose;
    int failed;
} conf_case;

void conf_fail(conf_case *cc, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Milliseconds of a monotonic clock and of the wall clock, and a sleep. */
int64_t conf_now_ms(void);
int64_t conf_wall_ms(void);
void conf_sleep_ms(int ms);

/* Polls pred(arg) every millisecond until it holds or timeout_ms passes;
 * returns its last value. Deliveries may be asynchronous in some drivers. */
int conf_wait(int (*pred)(void *arg), void *arg, int timeout_ms);

/* Waits (wait_ms at most) until the counters counts[0..n) add up to
 * `want`, then settle_ms more to catch extra deliveries; returns their sum. */
int conf_wait_sum(atomic_int *const *counts, size_t n, int want, int wait_ms, int settle_ms);

/* How long the suites wait for an asynchronous delivery, and how long they
 * watch for an unwanted extra one after the expected count is reached. */
#define CONF_WAIT_MS 2000
#define CONF_SETTLE_MS 30

/* Prints the suite's summary line and returns the number of failures. */
typedef struct conf_tally {
    int passed, failed;
} conf_tally;
void conf_report(conf_case *cc, conf_tally *t);

#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            conf_fail(cc, __FILE__, __LINE__, "EXPECT(%s) failed", #cond);                         \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

#define EXPECT_INT(a, b)                                                                           \
    do {                                                                                           \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                      \
        if (va_ != vb_) {                                                                          \
            conf_fail(cc, __FILE__, __LINE__, "%s == %lld, expected %s == %lld", #a, va_, #b,      \
                      vb_);                                                                        \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

/* A call's return code, with the driver's error message when it differs. */
#define EXPECT_RC(call, code)                                                                      \
    do {                                                                                           \
        int rc_ = (call), want_ = (code);                                                          \
        if (rc_ != want_) {                                                                        \
            conf_fail(cc, __FILE__, __LINE__, "%s returned %s (%s), expected %s", #call,           \
                      funcd_error_name(rc_), rc_ < 0 ? funcd_error_last()->message : "no error",   \
                      funcd_error_name(want_));                                                    \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

#define EXPECT_OK(call) EXPECT_RC(call, 0)

#define EXPECT_MEM(p, plen, want, wlen)                                                            \
    do {                                                                                           \
        size_t pl_ = (plen), wl_ = (wlen);                                                         \
        if (pl_ != wl_ || (wl_ && memcmp((p), (want), wl_) != 0)) {                                \
            conf_fail(cc, __FILE__, __LINE__, "%s (%zu bytes) differs from %s (%zu bytes)", #p,    \
                      pl_, #want, wl_);                                                            \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

#endif
