/* The parts of the EventSources component shared by its files. */
#ifndef FUNCD_EVENTING_SOURCES_INTERNAL_H
#define FUNCD_EVENTING_SOURCES_INTERNAL_H

#include <cjson/cJSON.h>
#include <pthread.h>

#include "eventing/cron.h"
#include "eventing/sources.h"

typedef enum { SRC_CRON, SRC_BLOB, SRC_BUS, SRC_WEBHOOK } src_type;

/* What a bus source holds while the delivery queue does not take its
 * messages (its namespace at a cap, the store away): core NATS does not
 * send a message again, so it waits here, retried with backoff, in
 * arrival order. Beyond either bound a message is dropped (counted). */
#define FUNCD_EVSOURCES_BUS_HELD_MAX 1000
#define FUNCD_EVSOURCES_BUS_HELD_BYTES (8u << 20)
/* and all bus sources of the node together (review18 M-1: a source
 * without a queue group gets its own copy of every message) */
#define FUNCD_EVSOURCES_NODE_HELD_MAX 65536
#define FUNCD_EVSOURCES_NODE_HELD_BYTES (64u << 20)
#define FUNCD_EVSOURCES_BUS_RETRY_MIN_MS 250
#define FUNCD_EVSOURCES_BUS_RETRY_MAX_MS 5000
/* A firing of the retry timer submits at most this many (each writes the
 * store on the loop); more left: it fires again at once (review18 L-9). */
#define FUNCD_EVSOURCES_BUS_RETRY_BATCH 64

typedef struct held_msg {
    struct held_msg *next;
    char id[64];      /* kept across tries: the queue takes it once */
    int64_t time_ms;  /* when it came (ce-time) */
    char *subject;
    void *data;
    size_t len;
} held_msg;

typedef struct src {
    funcd_evsources *owner;
    struct src *next;
    char ns[64], name[64], uid[64];
    char origin[80];      /* "eventsource/{name}" */
    char ce_source[200];  /* "/apis/funcd.dev/v1/namespaces/{ns}/eventsources/{name}" */
    double generation;
    src_type type;
    char function[64];
    char workflow[64];    /* target.workflow: each event starts a run (sources_workflow.c) */
    unsigned attempts;
    uint64_t backoff_initial_ms, backoff_max_ms, timeout_ms;
    /* cron */
    funcd_cron cron;
    int64_t cron_last;     /* the last tick fired (checkpointed); -1: not loaded */
    uint64_t ckpt_rev;     /* the checkpoint's store revision (0: none) */
    /* blob */
    char *prefix;
    uint64_t poll_ms;
    cJSON *seen;           /* key -> revision token of objects emitted; NULL: not loaded */
    /* bus */
    char *subject, *group;
    funcd_bus_sub *sub;
    held_msg *held, **held_tail; /* waiting for room in the queue, oldest first */
    size_t held_n, held_bytes;
    struct event *retry;         /* the next try of `held` */
    int64_t retry_ms;            /* its backoff */
    uint64_t held_dropped;       /* dropped by this incarnation (for lastError) */
    int64_t drop_logged_ms;      /* the last WARN line about drops (at most one each 10 s) */
    uint64_t drops_unlogged;
    char drop_why[240];          /* why the last was dropped */
    /* webhook */
    char secret_name[64], secret_key[256];
    struct event *timer;   /* cron ticks, blob polls */
    /* status: this node's counts not yet added to the object */
    uint64_t events, delivered, retried, deadlettered, dropped; /* not yet written */
    int64_t last_event_ms;
    char last_error[300];
    int dirty;
} src;

struct funcd_evsources {
    funcd_evsources_config cfg;
    funcd_store_watch *watch;
    struct event *wake, *status_tick, *resync;
    pthread_mutex_t lock;  /* guards the inbox */
    struct inbox_item *inbox, **inbox_tail;
    src *sources;
    size_t held_n, held_bytes; /* bus messages all sources hold (the loop's) */
    int leader;
    int closed;
};

/* Any thread: hands an item to the loop. */
struct inbox_item {
    struct inbox_item *next;
    enum { IN_KEY, IN_BUS, IN_WEBHOOK } kind;
    char *key;             /* IN_KEY: a store key to look at again */
    char ns[64], name[64]; /* IN_BUS: the source */
    char *subject;
    void *data;
    size_t len;
    struct funcd_gw_call *call; /* IN_WEBHOOK */
};
void funcd__evs_post(funcd_evsources *s, struct inbox_item *it);

src *funcd__evs_find(funcd_evsources *s, const char *ns, const char *name);
/* Builds the CloudEvent and submits it; records the event in the status.
 * `id` NULL: a new random one. `id_out` gets the id used (>= 64 bytes). */
int funcd__evs_emit(src *x, const char *id, const char *type, const char *subject,
                    int64_t time_ms, const char *content_type, const void *body, size_t len,
                    char *id_out);
/* A deterministic event id: "es-" and 32 hex digits of SHA-256 over the
 * source's uid and the parts. */
void funcd__evs_id(const src *x, const char *a, const char *b, char out[64]);
void funcd__evs_error(src *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* sources_workflow.c: the event (its ce-* `headers`, name, value, ...,
 * NULL) starts a run of x->workflow, once per event id; an `anonymous`
 * one (an unsigned webhook's) within the anonymous share of the run caps.
 * 0 (also when that run exists already); FUNCD_EINVAL when the event does
 * not fit the Workflow (its input schema, the payload limit),
 * FUNCD_ENOTFOUND when there is no such Workflow, FUNCD_ENOSPC at a cap,
 * or a store error; funcd_error_last() says which. */
int funcd__evs_start_run(src *x, const char *id, const char *const *headers, const void *body,
                         size_t len, int anonymous);
/* On the loop: a webhook call for this component. */
void funcd__evs_webhook_run(funcd_evsources *s, struct funcd_gw_call *call);

#endif
