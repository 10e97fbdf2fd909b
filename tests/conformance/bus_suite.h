/*
 * The bus port's conformance suite: what every funcd_bus driver promises
 * (include/funcd/sys/bus.h), checked through the vtable only.
 *
 * Deliveries may be asynchronous in some drivers (NATS), so the suite waits
 * for expected counts with a bounded poll, then briefly watches for unwanted
 * extra deliveries, instead of assuming delivery before publish returns.
 *
 * `make(payload)` returns a fresh bus for each case (NULL fails the case);
 * the suite frees it with its own `free` slot. With `verbose` each case
 * prints an ok/FAIL line (and the reason), then a summary line.
 *
 * Returns the number of failed cases (0: the driver conforms).
 */
#ifndef FUNCD_TESTS_BUS_SUITE_H
#define FUNCD_TESTS_BUS_SUITE_H

#include "funcd/sys/bus.h"

int funcd_bus_conformance_run(funcd_bus *(*make)(void *payload), void *payload, int verbose);

#endif
