/*
 * A very small test harness: each test file is one program; every TEST runs
 * in order; a failed CHECK records the failure and returns from the test.
 * main() ends with "N passed, N failed" and exits non-zero on any failure.
 */
#ifndef FUNCD_TESTS_HARNESS_H
#define FUNCD_TESTS_HARNESS_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int harness_failed_now;
static int harness_passed, harness_failed;

#define TEST(name) static void name(void)

#define FAILF(...)                                                                                 \
    do {                                                                                           \
        fprintf(stderr, "  %s:%d: ", __FILE__, __LINE__);                                          \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        harness_failed_now = 1;                                                                    \
        return;                                                                                    \
    } while (0)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            FAILF("CHECK(%s) failed", #cond);                                                      \
    } while (0)

#define CHECK_INT(a, b)                                                                            \
    do {                                                                                           \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                      \
        if (va_ != vb_)                                                                            \
            FAILF("%s == %lld, expected %s == %lld", #a, va_, #b, vb_);                            \
    } while (0)

#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *sa_ = (a), *sb_ = (b);                                                         \
        if (!sa_ || !sb_ || strcmp(sa_, sb_) != 0)                                                 \
            FAILF("%s == \"%s\", expected \"%s\"", #a, sa_ ? sa_ : "(null)", sb_ ? sb_ : "(null)"); \
    } while (0)

#define CHECK_CONTAINS(hay, needle)                                                                \
    do {                                                                                           \
        const char *h_ = (hay), *n_ = (needle);                                                    \
        if (!h_ || !strstr(h_, n_))                                                                \
            FAILF("%s does not contain \"%s\": %s", #hay, n_, h_ ? h_ : "(null)");                 \
    } while (0)

#define RUN(name)                                                                                  \
    do {                                                                                           \
        harness_failed_now = 0;                                                                    \
        name();                                                                                    \
        if (harness_failed_now) {                                                                  \
            harness_failed++;                                                                      \
            fprintf(stderr, "FAIL %s\n", #name);                                                   \
        } else {                                                                                   \
            harness_passed++;                                                                      \
            fprintf(stderr, "ok   %s\n", #name);                                                   \
        }                                                                                          \
    } while (0)

#define HARNESS_END()                                                                              \
    (fprintf(stderr, "%d passed, %d failed\n", harness_passed, harness_failed),                    \
     harness_failed ? 1 : 0)

#endif
