/*
 * The delivery queue: work for functions that must not be lost — async
 * invocations (/async/fn/...) and the events of EventSources — persisted
 * before it is acknowledged and delivered through lib/invoke with bounded
 * retry, exponential backoff with jitter, and a dead-letter queue per
 * namespace (docs/eventing.md, docs/adr/0045-delivery-queue.md).
 *
 * Records (the store port, JSON):
 *   /invocations/<ns>/<id>   every item: request, state, attempts, result;
 *                            final ones kept for the invocation retention
 *   /queue/<ns>/<id>         present while the item is not final: what the
 *                            dispatcher lists to find its work
 *   /deadletters/<ns>/<id>   items whose last attempt failed
 *   /deadletterdrops/<ns>    how many dead letters the caps dropped
 * Bodies (the blob port): invocations/<ns>/<id>/request and .../response.
 *
 * One node dispatches: the cluster's lease holder (funcd_cluster_is_leader),
 * every namespace's queue; any node accepts submissions.
 *
 * Threads: the platform loop, but for funcd_queue_submit, funcd_queue_replay
 * and funcd_queue_purge (any thread: they only write the store and wake the
 * loop).
 */
#ifndef FUNCD_EVENTING_QUEUE_H
#define FUNCD_EVENTING_QUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "funcd/funcd.h"
#include "util/log.h"

typedef struct funcd_queue funcd_queue; /* one per platform */

typedef struct funcd_delivery {            /* spec.delivery; 0 fields take the defaults */
    unsigned attempts;                     /* default 3 */
    uint64_t backoff_initial_ms, backoff_max_ms; /* default 1 s, 1 min; exponential with jitter */
    uint64_t timeout_ms;                   /* per attempt; default 30 s */
} funcd_delivery;

typedef struct funcd_queue_item {
    const char *ns, *function;        /* the target */
    const char *method, *path;        /* NULL: POST, "" */
    const char *const *headers;       /* as in funcd_invoke_req (ce-* headers go here) */
    const void *body;
    size_t body_len;                  /* copied */
    funcd_delivery delivery;
    const char *id;     /* idempotency: submitting an id already queued or done adds nothing (the
                           sources use the CloudEvent id); NULL: a new id */
    const char *origin; /* "eventsource/<name>", or NULL for an async invocation */
    /* ---- added after the first version ---- */
    const char *callback_url; /* NULL, or an http:// URL that receives the result (POST) */
    /* Submitted by someone the namespace did not authenticate (/async/ of an open function, an
       unsigned webhook): held within the namespace's anonymous share of each cap. */
    int anonymous;
} funcd_queue_item;

/* Persisted (store record + blob body) before it returns 0; `id_out` (>= 64 bytes) gets the id
   (the item's id when it is made of [A-Za-z0-9._:-] and at most 100 bytes, else "h-" and a hash
   of it). FUNCD_EUNAVAILABLE when the store is away, FUNCD_EINVAL for a bad item,
   FUNCD_ENOSPC when its namespace is at a cap of the queue (max_pending, max_bytes, or for an
   anonymous item its share of them; the message names it, never the namespace's figures;
   nothing was stored: try again in FUNCD_QUEUE_RETRY_AFTER_S). Any thread (it blocks on the
   store's writes). */
int funcd_queue_submit(funcd_queue *q, const funcd_queue_item *item, char *id_out, size_t id_len);

/* The anonymous share's default (funcd --queue-anonymous-share). */
#define FUNCD_QUEUE_DEFAULT_ANONYMOUS_SHARE 50
#define FUNCD_QUEUE_ANONYMOUS_NONE 0xffffffffu

/* A namespace at a cap is counted again from the store at most this often. */
#define FUNCD_QUEUE_RETRY_AFTER_S 5

typedef enum { FUNCD_QUEUE_DELIVERED, FUNCD_QUEUE_RETRIED, FUNCD_QUEUE_DEADLETTERED } funcd_queue_outcome;

/* Called on the loop after each attempt of an item whose origin starts with `origin_prefix`
   (sources uses "eventsource/" to keep EventSource status counts). */
typedef void (*funcd_queue_outcome_fn)(const char *ns, const char *origin, const char *id,
                                       funcd_queue_outcome outcome, int status, const char *error,
                                       void *arg);
int funcd_queue_on_outcome(funcd_queue *q, const char *origin_prefix, funcd_queue_outcome_fn fn,
                           void *arg);

/* ---- the platform's side ---------------------------------------------- */

struct event_base;
struct funcd_invoker;
struct funcd_cluster;

typedef struct funcd_queue_config {
    struct event_base *loop;
    funcd_store *store;
    funcd_blob *blob;
    struct funcd_invoker *invoker;
    struct funcd_cluster *cluster; /* NULL: this node dispatches */
    const funcd_logger *logger;
    unsigned max_in_flight;            /* 0: 64 */
    uint64_t invocation_retention_ms;  /* final records kept; 0: 1 h */
    uint64_t dlq_retention_ms;         /* 0: 7 days */
    unsigned dlq_max_entries;          /* per namespace; 0: 10000 */
    uint64_t tick_ms;                  /* how often the leader looks for work others queued; 0: 1 s */
    /* Caps per namespace (0: off): items not final, and bytes held (the records and bodies of
       its pending and kept items and of its dead letters). */
    uint64_t max_pending, max_bytes;
    /* The share of each cap (percent, at most 100) that anonymous items of a namespace may hold
       together; the rest is its own callers' and sources'. 0: the default (50);
       FUNCD_QUEUE_ANONYMOUS_NONE: none (anonymous items are refused while a cap is on). A share
       of max_pending, when not none, is at least one item. */
    unsigned anonymous_share;
    /* X-Callback-Url (async_callback.c): comma-separated CIDR lists of internal addresses
       callbacks may reach (NULL: none), and funcd's own listeners ("host:port"), never reached. */
    const char *const *callback_allow;
    const char *platform_addrs[4];
} funcd_queue_config;

int funcd_queue_new(funcd_queue **out, const funcd_queue_config *cfg);
/* Starts no attempt from now on (those running finish and are recorded). */
void funcd_queue_close(funcd_queue *q);
/* Attempts that end from now on are not recorded: they stay Running in the
 * store and are made again by the next dispatcher (call before the invoker is
 * freed, which ends them). */
void funcd_queue_abandon(funcd_queue *q);
void funcd_queue_free(funcd_queue *q);
/* Items this node holds now: waiting for their time, and running. */
void funcd_queue_depth(const funcd_queue *q, unsigned *waiting, unsigned *running);

/* Any thread: put(ctx, ns, n) for each namespace holding n > 0 dead letters
 * (it lists the store). 0, or the store's error. */
int funcd_queue_deadletter_counts(funcd_queue *q, void (*put)(void *ctx, const char *ns,
                                                              uint64_t n),
                                  void *ctx);

/* Eventing's metrics (queue_metrics.c): outcomes of EventSource events
 * counted into `m` (funcd_events_total), and the queue as `m`'s delivery
 * source (the dead letters, the depth). Stop before the queue is freed. */
struct funcd_metrics;
int funcd_queue_metrics_start(funcd_queue *q, struct funcd_metrics *m);
void funcd_queue_metrics_stop(struct funcd_metrics *m);

/* The platform's queue (platform.c). */
funcd_queue *funcd_platform_queue(funcd_platform *p);

/* Replays dead letter `id` of `ns`: it becomes a Pending invocation again
 * (attempts from zero) and leaves the dead-letter queue. It takes a place
 * as a submission does (an anonymous one within the anonymous share):
 * FUNCD_ENOSPC when its namespace is at a cap (it stays a dead letter).
 * FUNCD_ENOTFOUND. */
int funcd_queue_replay(funcd_queue *q, const char *ns, const char *id);
/* Deletes dead letter `id` of `ns` (and its body); its bytes leave the
 * namespace's figures. FUNCD_ENOTFOUND. */
int funcd_queue_purge(funcd_queue *q, const char *ns, const char *id);

#endif
