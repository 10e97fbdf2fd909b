/* What the log store tests share: a fixed clock origin and a collector of
 * the records a query answers. */
#ifndef FUNCD_TESTS_LOGSTORE_TEST_H
#define FUNCD_TESTS_LOGSTORE_TEST_H

#include <stdlib.h>
#include <string.h>

#define T0 1700000000000LL /* 2023-11-14T22:13:20Z */
#define HOUR 3600000LL
#define H0 (T0 - T0 % HOUR) /* 22:00 */

typedef struct got {
    char *lines[512];
    size_t n;
} got;

static inline int collect(const char *rec, size_t len, void *payload)
{
    got *g = payload;
    if (g->n < 512)
        g->lines[g->n++] = strndup(rec, len);
    return 0;
}

static inline void got_free(got *g)
{
    for (size_t i = 0; i < g->n; i++)
        free(g->lines[i]);
    g->n = 0;
}

#endif
