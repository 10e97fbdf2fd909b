/*
 * Internal invocation: a function called from inside the platform (the
 * delivery queue, event sources, workflows) through the same path as a
 * request on the data plane — the function's current workers, a slot taken
 * with the gateway SPI's slot functions (a cold start when none runs), one
 * HTTP/1.1 exchange on the worker's socket, the slot released OK or FAILED
 * as the gateway decides (lib/gateway/proxy.c, docs/adr/0021-first-request.md).
 *
 * What it skips is the gateway's edge: no token check, no rate, body or
 * in-flight limits, no CORS or header shaping (docs/eventing.md). Whoever
 * submitted the work was authorized when it was submitted.
 *
 * Threads: the platform loop only (funcd_invoke, and `done` runs there).
 */
#ifndef FUNCD_INVOKE_INVOKE_H
#define FUNCD_INVOKE_INVOKE_H

#include <stddef.h>
#include <stdint.h>

#include "funcd/funcd.h"
#include "util/log.h"

typedef struct funcd_invoker funcd_invoker; /* one per platform (platform.c creates it) */

typedef struct funcd_invoke_req {
    const char *ns, *name;             /* the function */
    const char *method;                /* NULL: "POST" */
    const char *path;                  /* what follows /fn/{ns}/{name}: "" or "/x?y=1" */
    const char *const *headers;        /* NULL, or NULL-terminated name,value,name,value,... */
    const void *body;
    size_t body_len;                   /* borrowed until `done` runs */
    uint64_t timeout_ms;               /* 0: the function's spec.timeout */
    size_t max_response;               /* bytes of answer body kept; 0: 1 MiB */
    const char *invocation_id;         /* sent as X-Funcd-Invocation-Id; NULL: a new one */
    const char *traceparent;           /* NULL: a new trace */
    unsigned hops;                     /* calls on the chain up to this one (fn-to-fn); 0: none */
} funcd_invoke_req;

typedef struct funcd_invoke_res {
    int status;        /* the worker's HTTP status; when it did not answer: 404 no such function,
                          503 queue full / not runnable, 504 timeout, 502 the worker broke */
    const char *error; /* NULL when the worker answered, else a sentence (never a host path) */
    const void *body;
    size_t body_len;          /* borrowed for the callback */
    const char *content_type; /* may be NULL */
    /* ---- added after the first version ---- */
    const char *invocation_id; /* the id the worker was sent (the request's, or the new one) */
    int truncated;             /* the answer's body was longer than max_response: a prefix */
} funcd_invoke_res;

typedef void (*funcd_invoke_done_fn)(const funcd_invoke_res *res, void *arg);

/* On the platform loop. `done` runs exactly once, on the loop, never inside this call.
   0, or FUNCD_ENOMEM / FUNCD_EINVAL (then `done` never runs). */
int funcd_invoke(funcd_invoker *inv, const funcd_invoke_req *req, funcd_invoke_done_fn done,
                 void *arg);

/* On the loop: the most hops among the calls this invoker has on worker
 * `worker_id` now (funcd_slot_worker_id); 0 when it serves none of them. */
unsigned funcd_invoke_hops_on(funcd_invoker *inv, uint64_t worker_id);

/* ---- the platform's side ---------------------------------------------- */

struct event_base;
struct funcd_serving;

int funcd_invoker_new(funcd_invoker **out, struct event_base *loop, struct funcd_serving *serving,
                      const funcd_logger *logger);
/* Ends every invocation still running: its `done` runs now with 503 ("funcd is
 * shutting down"), so free the invoker before what those callbacks touch. Call
 * once no other thread releases slots (after the gateway stopped). NULL is fine. */
void funcd_invoker_free(funcd_invoker *inv);
/* Invocations started and not yet done. */
unsigned funcd_invoker_busy(const funcd_invoker *inv);

/* The platform's invoker and loop (platform.c): for the platform's own
 * components and for tests, which schedule work on the loop with
 * event_base_once. */
funcd_invoker *funcd_platform_invoker(funcd_platform *p);
struct event_base *funcd_platform_loop(funcd_platform *p);

#endif
