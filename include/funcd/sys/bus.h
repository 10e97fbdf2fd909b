/*
 * funcd backend SPI — the bus port.
 *
 * A message bus with NATS semantics: subjects are dot-separated tokens;
 * a subscription's subject may use `*` (exactly one token) and `>` (one or
 * more trailing tokens, last only). Every matching plain subscription gets a
 * copy of a message (fan-out); among subscriptions that share a queue group
 * on the same subject, exactly one gets it.
 *
 * Writing a driver: embed `funcd_bus` first, fill `version` with
 * FUNCD_BUS_VERSION (FUNCD_BUS_INIT), `name` and the methods.
 * Versions: funcd_platform_new takes a driver of any version from 1 to
 * FUNCD_BUS_VERSION (else FUNCD_EVERSION) and refuses one that lacks a
 * slot marked required for its version (FUNCD_EINVAL). Slots are only
 * appended, under a "version N" line; an optional slot, or one appended
 * after the driver's version, is called only when the driver's version has it
 * and it is set (docs/backends.md).
 *
 * Ownership: funcd_with_bus transfers the backend to the platform, which
 * calls `free` once. Message data is borrowed for the duration of a call
 * or a callback.
 *
 * Threads: every method may be called from any thread. Callbacks may run on
 * any thread (the memory driver runs them on the publisher's); one
 * subscription's callback is never run concurrently with itself. A callback
 * may publish, subscribe and unsubscribe.
 */
#ifndef FUNCD_SYS_BUS_H
#define FUNCD_SYS_BUS_H

#include "funcd/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FUNCD_BUS_VERSION 1

typedef struct funcd_bus funcd_bus;
typedef struct funcd_bus_sub funcd_bus_sub; /* driver-defined */

typedef void (*funcd_bus_msg_cb)(const char *subject, const void *data, size_t len, void *payload);

struct funcd_bus {
    unsigned version;
    const char *name;

    /* ---- version 1: every slot required ---- */

    /** Publishes to a literal subject (no wildcards: FUNCD_EINVAL). */
    int (*publish)(funcd_bus *b, const char *subject, const void *data, size_t len);

    /** Subscribes; `queue_group` NULL for fan-out. */
    int (*subscribe)(funcd_bus *b, const char *subject, const char *queue_group,
                     funcd_bus_msg_cb cb, void *payload, funcd_bus_sub **out);

    /** When it returns (outside the subscription's own callback), `cb` is
     *  not running and is never called again for `sub`. */
    void (*unsubscribe)(funcd_bus *b, funcd_bus_sub *sub);

    /** Releases the bus. Subscriptions must be ended. */
    void (*free)(funcd_bus *b);
};

#define FUNCD_BUS_INIT {FUNCD_BUS_VERSION}

/** A new in-process bus. */
FUNCD_EXTERN int funcd_bus_memory_new(funcd_bus **out);

#ifdef __cplusplus
}
#endif
#endif
