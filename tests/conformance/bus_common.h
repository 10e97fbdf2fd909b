/*
 * What the bus suites (bus_suite.c, bus_durable_suite.c) share: their case
 * table and the runner that gives each case a fresh bus.
 */
#ifndef FUNCD_TESTS_BUS_COMMON_H
#define FUNCD_TESTS_BUS_COMMON_H

#include <stddef.h>

#include "conformance.h"
#include "funcd/sys/bus.h"

typedef struct conf_bus_case {
    const char *name;
    void (*fn)(conf_case *cc, funcd_bus *b);
} conf_bus_case;

/*
 * Runs each case against a fresh bus from `make`, freed after it; a bus
 * that `fit` refuses (it writes why) fails the case unrun. With `verbose`
 * a line per case and "<title>: N passed, M failed". Returns the failures.
 */
int conf_bus_run(const char *suite, const char *title, const conf_bus_case *cases, size_t n,
                 funcd_bus *(*make)(void *payload), void *payload, int verbose,
                 int (*fit)(const funcd_bus *b, char *why, size_t len));

#endif
