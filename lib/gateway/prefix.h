/*
 * Data-plane paths outside /fn/ whose answers come from the platform loop
 * (the eventing routes: /events/{ns}/{name} for webhooks). The embedded
 * gateway hands such a request, copied, to the prefix's handler on the
 * gateway thread; the handler passes the call on (to the loop) and answers
 * it later from any thread with funcd_gw_call_answer. A /fn/ request never
 * looks at this table: the warm path pays nothing for it.
 */
#ifndef FUNCD_GATEWAY_PREFIX_H
#define FUNCD_GATEWAY_PREFIX_H

#include <stddef.h>

#include "funcd/sys/gateway.h"

#define FUNCD_GW_MAX_PREFIXES 4

typedef struct funcd_gw_call funcd_gw_call;

/* On a gateway thread: a request under the prefix, with its body read.
 * The call must be answered exactly once (funcd_gw_call_answer). */
typedef void (*funcd_gw_prefix_fn)(funcd_gw_call *call, void *payload);

/* Registers `fn` for request paths starting with `prefix` ("/events/";
 * copied), before the gateway listens. 0; -1 when `gw` is not the embedded
 * gateway or the table is full. */
int funcd_gw_add_prefix(funcd_gateway *gw, const char *prefix, funcd_gw_prefix_fn fn,
                        void *payload);

/* The request as it came (valid until answered; any thread). */
const char *funcd_gw_call_method(const funcd_gw_call *c);
/* The raw path with its query, e.g. "/events/default/hook?x=1". */
const char *funcd_gw_call_path(const funcd_gw_call *c);
/* The first value of header `name` (any case), or NULL. */
const char *funcd_gw_call_header(const funcd_gw_call *c, const char *name);
/* Every header: name (lowercase), value, name, value, ..., NULL. */
const char *const *funcd_gw_call_headers(const funcd_gw_call *c);
const void *funcd_gw_call_body(const funcd_gw_call *c, size_t *len);

/* Answers the call (any thread, once): `status`, a body of `len` bytes
 * (copied) of `content_type` (NULL: application/json), and `headers`
 * (NULL, or name, value, ..., NULL; copied). The call is gone afterwards.
 * When the client went away meanwhile, nothing is sent. */
void funcd_gw_call_answer(funcd_gw_call *c, int status, const char *content_type,
                          const char *const *headers, const void *body, size_t len);
/* The same with a JSON Status body (as the gateway's own errors). */
void funcd_gw_call_answer_status(funcd_gw_call *c, int status, const char *reason,
                                 const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* ---- for embedded.c ------------------------------------------------------ */

typedef struct funcd_gw_prefixes {
    unsigned n;
    struct {
        char *prefix;
        size_t len;
        funcd_gw_prefix_fn fn;
        void *payload;
    } e[FUNCD_GW_MAX_PREFIXES];
} funcd_gw_prefixes;

struct st_h2o_req_t;
struct st_h2o_context_t;
int funcd_gw_prefixes_add(funcd_gw_prefixes *t, const char *prefix, funcd_gw_prefix_fn fn,
                          void *payload);
/* 1 when a prefix took the request (it is answered, now or later). */
int funcd_gw_prefixes_dispatch(const funcd_gw_prefixes *t, struct st_h2o_req_t *req);
void funcd_gw_prefixes_clear(funcd_gw_prefixes *t);
/* Per gateway thread: the mailbox answers arrive in. */
void funcd_gw_prefix_thread_init(struct st_h2o_context_t *ctx);
void funcd_gw_prefix_thread_exit(void);

#endif
