/*
 * What the delivery queue shares with the async front (the data plane's
 * /async/ and the invocations API): record keys, states, and the result
 * callback. Not for other components: they use queue.h.
 */
#ifndef FUNCD_EVENTING_QUEUE_INTERNAL_H
#define FUNCD_EVENTING_QUEUE_INTERNAL_H

#include <stddef.h>
#include <sys/socket.h>

#include "eventing/queue.h"
#include "invoke/invoke.h"

#define FUNCD_QUEUE_RECORDS "/invocations/"
#define FUNCD_QUEUE_INDEX "/queue/"
#define FUNCD_QUEUE_DEADLETTERS "/deadletters/"
#define FUNCD_QUEUE_DLQ_DROPS "/deadletterdrops/"

#define FUNCD_QUEUE_SAFE_ID_MAX 100 /* longer ids (or other characters) are kept by their hash */
#define FUNCD_QUEUE_ID_MAX 128

typedef enum funcd_queue_state {
    FUNCD_QSTATE_PENDING,
    FUNCD_QSTATE_RUNNING,
    FUNCD_QSTATE_SUCCEEDED,
    FUNCD_QSTATE_FAILED,
    FUNCD_QSTATE_DEADLETTERED,
} funcd_queue_state;

const char *funcd_queue_state_name(funcd_queue_state s);
/* Succeeded, Failed or DeadLettered. */
int funcd_queue_state_final(const char *state);
/* 1 when `id` is kept as it is: [A-Za-z0-9._:-], 1 to FUNCD_QUEUE_SAFE_ID_MAX bytes. */
int funcd_queue_id_ok(const char *id);
/* `prefix` + ns + "/" + id. */
void funcd_queue_key(char *out, size_t len, const char *prefix, const char *ns, const char *id);

/* Result callbacks (async_callback.c): the queue owns them. A callback
 * connects only to an address that is not internal (loopback, link-local,
 * unspecified, multicast, this node's own; funcd_egress_special) unless the
 * operator's allow-list holds it, and never to one of funcd's own listeners. */
struct event_base;
typedef struct funcd_callbacks {
    struct event_base *loop;
    funcd_store *store; /* each callback's outcome goes on its invocation's record */
    const funcd_logger *logger;
    struct cb_ctx *head; /* on their way */
    unsigned in_flight;
    struct funcd_egress_cidr *allow; /* funcd_queue_config.callback_allow, parsed */
    size_t n_allow;
    struct sockaddr_storage listeners[4]; /* funcd's own */
    size_t n_listeners;
    struct evdns_base *dns; /* resolves callback hosts without holding the loop */
} funcd_callbacks;

/* The queue's (queue.c). */
funcd_callbacks *funcd_queue_callbacks(funcd_queue *q);
/* `allow`: comma-separated CIDR lists (or NULL); `listeners`: "host:port"
 * (NULL entries skipped). 0, or FUNCD_ENOMEM. */
int funcd_callbacks_init(funcd_callbacks *o, struct event_base *loop, funcd_store *store,
                         const funcd_logger *logger, const char *const *allow,
                         const char *const listeners[4]);
/* Drops the callbacks still out (at shutdown). */
void funcd_callbacks_free(funcd_callbacks *o);

/* POSTs the result of a final invocation to `url` (http:// only), once,
 * without waiting; how it went is logged when it failed and written to the
 * invocation's record (`callback`). On the loop. */
void funcd_queue_callback(funcd_callbacks *o, const char *url, const char *ns, const char *id,
                          const char *function, const char *state, const funcd_invoke_res *res);
/* 0 when `url` is an http:// URL a callback can go to, else -1 with a
 * sentence naming X-Callback-Url in `why`: a host that is an address the
 * callback would be refused is refused here. Any thread. */
int funcd_queue_callback_url_ok(funcd_queue *q, const char *url, char *why, size_t why_len);

#endif
