/*
 * The bus port's durable streams (version 2: stream_ensure, publish_durable,
 * consume, consumer_delete), checked through the vtable only, like
 * bus_suite.h. Drivers whose slots are NULL fail every case: run it only for
 * drivers that offer durable streams.
 *
 * Every case uses its own stream and subject names, so one server may serve
 * all cases of one run (NATS keeps streams between buses).
 *
 * Returns the number of failed cases (0: the driver conforms).
 */
#ifndef FUNCD_TESTS_BUS_DURABLE_SUITE_H
#define FUNCD_TESTS_BUS_DURABLE_SUITE_H

#include "funcd/sys/bus.h"

int funcd_bus_durable_conformance_run(funcd_bus *(*make)(void *payload), void *payload,
                                      int verbose);

#endif
