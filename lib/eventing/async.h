/*
 * Async invocation on the data plane: POST /async/fn/{ns}/{name}/{rest} is
 * persisted in the delivery queue and answered 202 at once, with
 * X-Funcd-Invocation-Id and Location (the invocation in the API). The
 * gateway hands such calls over (gateway/prefix.h), so /fn/ requests never
 * look at this path; the rest happens on the platform loop.
 *
 * The function's edge authentication applies as on /fn/: an
 * `authenticated` function needs a token that may invoke in its namespace
 * (the token itself is never stored: the worker gets X-Funcd-Subject).
 */
#ifndef FUNCD_EVENTING_ASYNC_H
#define FUNCD_EVENTING_ASYNC_H

#include "eventing/queue.h"
#include "funcd/sys/gateway.h"

struct funcd_gw_call;
struct funcd_serving;
struct event_base;

typedef struct funcd_async funcd_async;

typedef struct funcd_async_config {
    struct event_base *loop;
    funcd_queue *queue;
    struct funcd_serving *serving;
    funcd_edge_authorize_fn authorize; /* tokens of `authenticated` functions; NULL: refuse them */
    void *authorize_payload;
    const funcd_logger *logger;
    uint64_t max_body; /* bodies of functions whose edge sets no cap (funcd --async-max-body);
                          0: none but the gateway's */
} funcd_async_config;

int funcd_async_new(funcd_async **out, const funcd_async_config *cfg);
/* The prefix handler (any gateway thread). `a` may be NULL: 503. */
void funcd_async_call(struct funcd_gw_call *call, funcd_async *a);
/* Answers every call not yet handled (503) and stops taking new ones. */
void funcd_async_close(funcd_async *a);
void funcd_async_free(funcd_async *a);

#endif
