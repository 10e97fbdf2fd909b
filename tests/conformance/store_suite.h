/*
 * The store port's conformance suite: what every funcd_store driver promises
 * (include/funcd/sys/store.h), checked through the vtable only.
 *
 * `make(payload)` returns a fresh, empty store for each case (NULL fails the
 * case); the suite frees it with its own `free` slot. With `verbose` each case
 * prints an ok/FAIL line (and the reason), then a summary line.
 *
 * Compacted history: a driver may answer FUNCD_EGONE for a watch from a
 * revision older than what it retains. The suite cannot know a driver's
 * retention, so it only checks that a replay is either complete or refused
 * with FUNCD_EGONE (never partial), and that watching from the current
 * revision still works afterwards. Drivers test their own retention limits
 * (see test_memory_store.c).
 *
 * Returns the number of failed cases (0: the driver conforms).
 */
#ifndef FUNCD_TESTS_STORE_SUITE_H
#define FUNCD_TESTS_STORE_SUITE_H

#include "funcd/sys/store.h"

int funcd_store_conformance_run(funcd_store *(*make)(void *payload), void *payload, int verbose);

#endif
