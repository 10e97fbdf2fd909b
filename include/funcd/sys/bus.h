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
 * Durable streams (version 2, optional): plain subscriptions are at most
 * once (a subscriber that is away misses what was published meanwhile). A
 * stream keeps the messages of its subjects for durable consumers, which get
 * each one at least once, including what was published while no subscription
 * was attached to them. NATS maps this onto JetStream (an interest-retention
 * stream, one durable push consumer with a deliver group per consumer name).
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

#define FUNCD_BUS_VERSION 2

typedef struct funcd_bus funcd_bus;
typedef struct funcd_bus_sub funcd_bus_sub; /* driver-defined */

typedef void (*funcd_bus_msg_cb)(const char *subject, const void *data, size_t len, void *payload);

/** A durable consumer's callback: 0 acknowledges the message; anything else
 *  has it delivered again later (NATS: after a second; the memory bus: at
 *  the stream's next publish or the consumer's next attach). */
typedef int (*funcd_bus_durable_cb)(const char *subject, const void *data, size_t len,
                                    void *payload);

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

    /* ---- version 2: optional (durable streams; FUNCD_ENOTSUP without them) ---- */

    /** Makes the stream `name` keep what is published to subjects matching
     *  `subjects` (a pattern) until every durable consumer of the stream has
     *  acknowledged it, or for `max_age_ms` at most (0: 24 hours). Names are
     *  [A-Za-z0-9_-]. The same name and pattern again is 0; FUNCD_EEXISTS when
     *  the name has another pattern or another stream's pattern overlaps. */
    int (*stream_ensure)(funcd_bus *b, const char *name, const char *subjects,
                         int64_t max_age_ms);

    /** Publishes to a literal subject and returns once a stream has stored
     *  the message: FUNCD_ENOTFOUND when no stream takes the subject,
     *  FUNCD_ETIMEOUT when the server did not confirm in time (the message may
     *  or may not be stored). `publish` to such a subject stores it too, without
     *  the confirmation. */
    int (*publish_durable)(funcd_bus *b, const char *subject, const void *data, size_t len);

    /** Attaches a subscription to the durable consumer `durable` of `stream`
     *  (FUNCD_ENOTFOUND without the stream), creating the consumer on first
     *  use. A consumer gets every message the stream stores after its creation,
     *  at least once, whether or not a subscription is attached at the time;
     *  the subscriptions attached to one consumer share its messages (each to
     *  one of them). `unsubscribe` detaches and the consumer keeps its place;
     *  a message refused or unacknowledged at detach is delivered again. */
    int (*consume)(funcd_bus *b, const char *stream, const char *durable,
                   funcd_bus_durable_cb cb, void *payload, funcd_bus_sub **out);

    /** Deletes a durable consumer and what it had not yet acknowledged
     *  (FUNCD_ENOTFOUND when absent). Detach its subscriptions first. */
    int (*consumer_delete)(funcd_bus *b, const char *stream, const char *durable);
};

#define FUNCD_BUS_INIT {FUNCD_BUS_VERSION}

/** A new in-process bus. */
FUNCD_EXTERN int funcd_bus_memory_new(funcd_bus **out);

#define FUNCD_BUS_NATS_OPTIONS_VERSION 1

/** Options of the NATS bus. Start from FUNCD_BUS_NATS_OPTIONS_INIT (or
 *  funcd_bus_nats_options_init): `version` says which fields the caller's
 *  header had. Fields are only appended; zero fields pick the defaults. */
typedef struct funcd_bus_nats_options {
    unsigned version;          /**< FUNCD_BUS_NATS_OPTIONS_VERSION */
    int64_t reconnect_wait_ms; /**< between reconnect attempts; 0: 2000 */
    int max_reconnect;         /**< attempts before the bus gives up for good; 0: never gives up */
    int reconnect_buffer;      /**< bytes of publishes held while disconnected; 0: 8 MiB */
    int64_t timeout_ms;        /**< connecting, flushing and JetStream requests; 0: 2000 */
    funcd_log_fn log;          /**< disconnects, reconnects, slow consumers; NULL: stderr */
    funcd_log_level log_level; /**< lines below it are dropped */
    void *log_payload;
    /* Fields of later versions are appended here. */
} funcd_bus_nats_options;

#define FUNCD_BUS_NATS_OPTIONS_INIT {FUNCD_BUS_NATS_OPTIONS_VERSION}

/** Fills `opts` with the defaults of `version` (FUNCD_BUS_NATS_OPTIONS_VERSION);
 *  FUNCD_EVERSION if this library does not know that version. */
FUNCD_EXTERN int funcd_bus_nats_options_init(funcd_bus_nats_options *opts, unsigned version);

/**
 * A bus on a NATS server at `url` ("nats://host:port"; several servers
 * separated by commas; credentials as "nats://user:pass@host:port"), with
 * libnats (`"nats"`). Subjects and queue groups are NATS's own. It connects
 * before returning (FUNCD_EIO naming the URL when it cannot); afterwards
 * libnats reconnects by itself, publishes made while disconnected are held up
 * to `reconnect_buffer` bytes, and subscriptions resume on the new connection.
 * Messages published while a subscriber is disconnected are not delivered to
 * it (at most once). `opts` may be NULL (the defaults).
 */
FUNCD_EXTERN int funcd_bus_nats_new(funcd_bus **out, const char *url,
                                    const funcd_bus_nats_options *opts);

#ifdef __cplusplus
}
#endif
#endif
