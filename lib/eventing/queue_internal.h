/*
 * What the delivery queue shares with the async front (the data plane's
 * /async/ and the invocations API): record keys, states, and the result
 * callback. Not for other components: they use queue.h.
 */
#ifndef FUNCD_EVENTING_QUEUE_INTERNAL_H
#define FUNCD_EVENTING_QUEUE_INTERNAL_H

#include <stddef.h>

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

/* Result callbacks on their way (async_callback.c): the queue owns them. */
struct event_base;
typedef struct funcd_callbacks {
    struct event_base *loop;
    struct cb_ctx *head;
} funcd_callbacks;
/* Drops the callbacks still out (at shutdown). */
void funcd_callbacks_free(funcd_callbacks *o);

/* POSTs the result of a final invocation to `url` (http:// only), once,
 * without waiting; failures are logged. On the loop. */
void funcd_queue_callback(funcd_callbacks *owner, const funcd_logger *logger, const char *url,
                          const char *ns, const char *id, const char *function, const char *state,
                          const funcd_invoke_res *res);
/* 0 when `url` is an http:// URL a callback can go to, else -1 with a
 * sentence in `why`. */
int funcd_queue_callback_url_ok(const char *url, char *why, size_t why_len);

#endif
