/*
 * The blob port's conformance suite: what every funcd_blob driver promises
 * (include/funcd/sys/blob.h), checked through the vtable only.
 *
 * `make(payload)` returns a fresh, empty blob store for each case (NULL fails
 * the case); the suite frees it with its own `free` slot. With `verbose` each
 * case prints an ok/FAIL line (and the reason), then a summary line.
 *
 * Returns the number of failed cases (0: the driver conforms).
 */
#ifndef FUNCD_TESTS_BLOB_SUITE_H
#define FUNCD_TESTS_BLOB_SUITE_H

#include "funcd/sys/blob.h"

int funcd_blob_conformance_run(funcd_blob *(*make)(void *payload), void *payload, int verbose);

#endif
