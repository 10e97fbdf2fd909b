/*
 * A gateway driver written the way a third party would: only the public
 * headers (include/funcd/), blocking sockets, one thread per client
 * connection, one request per connection (HTTP/1.1, "Connection: close"),
 * and the worker reached through the slot functions of funcd/sys/gateway.h.
 * tests/gateway/meson.build builds it with no other include path.
 */
#ifndef FUNCD_TESTS_GATEWAY_BLOCKING_GATEWAY_H
#define FUNCD_TESTS_GATEWAY_BLOCKING_GATEWAY_H

#include "funcd/sys/gateway.h"

/* What the driver did, for the test to check (any thread). */
typedef struct blocking_gateway_counts {
    unsigned granted;    /* acquires that took a ready worker's slot at once */
    unsigned queued;     /* acquires that waited for a grant (cold starts, busy workers) */
    unsigned refused;    /* QUEUE_FULL or CLOSED */
    unsigned released_ok, released_failed;
    unsigned routes;     /* set_route calls */
} blocking_gateway_counts;

/* A new driver (hand it to funcd_with_gateway). */
int blocking_gateway_new(funcd_gateway **out);

void blocking_gateway_counts_get(funcd_gateway *gw, blocking_gateway_counts *out);

/* 1 when the route of ns/name has a target (the function can run). */
int blocking_gateway_has_target(funcd_gateway *gw, const char *ns, const char *name);

#endif
