/*
 * EventSources (docs/eventing.md): a component on the platform loop that
 * watches the EventSource objects and runs each one, turning what happens
 * (a cron tick, a new blob object, a bus message, a webhook call) into a
 * CloudEvent 1.0 in binary mode submitted for delivery to the target.
 *
 * Who does what in a cluster: cron ticks and blob polls only on the leader
 * (funcd_cluster_is_leader), each checkpointed in the store before the next
 * one so a restart or a new leader neither repeats nor loses one; bus
 * subscriptions on every node, in one queue group, so each message reaches
 * one node; webhooks wherever the data plane is called. Event ids are
 * deterministic where an event can be seen twice (cron: the tick; blob: the
 * object's key and revision; webhook: the sender's ce-id), so the delivery
 * queue's idempotency drops a re-submit after a crash.
 *
 * Delivery is not done here: `submit` hands an event to the delivery queue
 * (lib/eventing/queue.h, wired by the platform) and outcomes come back
 * through funcd_evsources_outcome, for the status counts that every node
 * adds to the object (compare-and-swap).
 */
#ifndef FUNCD_EVENTING_SOURCES_H
#define FUNCD_EVENTING_SOURCES_H

#include <event2/event.h>
#include <stddef.h>
#include <stdint.h>

#include "funcd/sys/blob.h"
#include "funcd/sys/bus.h"
#include "funcd/sys/store.h"
#include "util/log.h"

struct funcd_cluster;
typedef struct funcd_evsources funcd_evsources;

/* Where a source's checkpoints live: PREFIX{ns}/{name}. */
#define FUNCD_EVSOURCES_CHECKPOINTS "/eventing/checkpoints/"
/* The origin of a source's deliveries: "eventsource/{name}". */
#define FUNCD_EVSOURCES_ORIGIN "eventsource/"
/* The largest webhook body taken (bigger: 413). */
#define FUNCD_EVSOURCES_MAX_WEBHOOK_BODY (1024 * 1024)

/* One event, ready for the queue. Borrowed for the call. */
typedef struct funcd_evsources_event {
    const char *ns, *function;      /* the target */
    const char *id;                 /* ce-id, also the queue's idempotency id */
    const char *origin;             /* "eventsource/{name}" */
    const char *const *headers;     /* ce-* (and Content-Type): name, value, ..., NULL */
    const void *body;
    size_t body_len;
    unsigned attempts;              /* spec.delivery; 0: the queue's defaults */
    uint64_t backoff_initial_ms, backoff_max_ms, timeout_ms;
    int anonymous;                  /* an unsigned webhook's: the queue's anonymous share */
} funcd_evsources_event;

/* On the loop: persists the event for delivery (0), or fails (a negative
 * FUNCD_E*, funcd_error_last() saying why: the event is tried again at the
 * next poll or tick, or the webhook caller is told 503). */
typedef int (*funcd_evsources_submit_fn)(const funcd_evsources_event *ev, void *payload);

typedef struct funcd_evsources_config {
    struct event_base *loop;
    funcd_store *store;
    funcd_blob *blob;
    funcd_bus *bus;
    struct funcd_cluster *cluster; /* NULL: one node, always the leader */
    const funcd_logger *logger;
    uint64_t blob_poll_ms;         /* spec.blob.pollInterval's default; 0: 15 s */
    uint64_t status_ms;            /* how often status is written; 0: 1 s */
    funcd_evsources_submit_fn submit;
    void *submit_payload;
    /* ---- added after the first version ---- */
    size_t workflow_payload_limit; /* the largest run input an event makes; 0: 1 MiB */
    struct funcd_metrics *metrics; /* events that start workflow runs are counted here; NULL */
    /* The share (percent, at most 100) of a namespace's workflow-run caps that the runs of
       unsigned webhooks hold at most, together: the queue's (funcd --queue-anonymous-share,
       queue.h). 0: the default (50); FUNCD_QUEUE_ANONYMOUS_NONE: none. */
    unsigned anonymous_share;
} funcd_evsources_config;

int funcd_evsources_new(funcd_evsources **out, const funcd_evsources_config *cfg);
/* Lists the EventSources and watches for changes (on the loop). */
int funcd_evsources_start(funcd_evsources *s);
/* The data plane's POST /events/{ns}/{name} (a funcd_gw_prefix_fn, for
 * "/events/"): verified and submitted on the loop, answered from there. */
struct funcd_gw_call;
void funcd_evsources_webhook(struct funcd_gw_call *call, void *payload);
/* After each delivery attempt of an event (the queue's outcome callback,
 * for the origin prefix FUNCD_EVSOURCES_ORIGIN); `outcome` is
 * 0 delivered, 1 retried, 2 dead-lettered, as funcd_queue_outcome. */
void funcd_evsources_outcome(const char *ns, const char *origin, const char *id, int outcome,
                             int status, const char *error, void *payload);
/* Leadership changed (the platform's cluster callback): cron and blob
 * start or stop here. */
void funcd_evsources_leading(funcd_evsources *s, int leader);
/* Stops every source and answers the webhook calls still waiting (503);
 * call before the gateway stops. */
void funcd_evsources_close(funcd_evsources *s);
/* The wiring to the delivery queue (sources_queue.c): `submit` with the
 * queue as its payload, and the outcomes of "eventsource/" items. */
struct funcd_queue;
int funcd_evsources_queue_submit(const funcd_evsources_event *ev, void *payload);
int funcd_evsources_queue_outcomes(struct funcd_queue *q, funcd_evsources *s);
void funcd_evsources_free(funcd_evsources *s);

#endif
