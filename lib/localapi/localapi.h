/*
 * The local API (docs/services.md): a Unix socket in each worker's runtime
 * directory, api.sock, that the worker sees as FUNCD_API=unix:<path> and
 * speaks HTTP/1.1 to. Nothing on it carries a token: the caller is the
 * function whose worker the socket was made for, since only that worker's
 * sandbox shows the directory. Every call is checked against that
 * Function's spec.bindings.
 *
 *   /kv/{store}[/{key}]      KV operations on a KVStore bound in
 *                            spec.bindings.kv (lib/localapi/kv.h)
 *   POST /fn/{name}/{rest}   invoke Function {name} of the same namespace,
 *                            bound in spec.bindings.invoke, through the
 *                            same path as any invocation (lib/invoke): a
 *                            cold start when none runs, its queue and
 *                            timeout. Any method; the answer is the
 *                            callee's (status, content-type, body).
 *
 * Threads: the platform loop only.
 */
#ifndef FUNCD_LOCALAPI_LOCALAPI_H
#define FUNCD_LOCALAPI_LOCALAPI_H

#include <event2/event.h>

#include "invoke/invoke.h"
#include "localapi/kv.h"
#include "funcd/sys/store.h"
#include "util/log.h"

/* Connections one worker's socket holds open at once; beyond them, new
 * ones wait in the socket's listen backlog until one closes. */
#define FUNCD_LOCALAPI_MAX_CONNS 128u

/* The socket's name in a worker's runtime directory. */
#define FUNCD_LOCALAPI_SOCKET "api.sock"

typedef struct funcd_localapi funcd_localapi;
typedef struct funcd_localapi_socket funcd_localapi_socket;

/* `store` holds the KV data (lib/localapi/kv.h). */
int funcd_localapi_new(funcd_localapi **out, struct event_base *loop, funcd_store *store,
                       const funcd_logger *logger);
/* Where invocations go; NULL (shutting down): calls are answered 503. */
void funcd_localapi_set_invoker(funcd_localapi *api, funcd_invoker *inv);
/* Its KV sweeper (kv.h), to gate on the lease. */
funcd_kv_sweeper *funcd_localapi_kv_sweeper(funcd_localapi *api);
/* Closes the sockets still open (calls in flight are dropped) and frees. */
void funcd_localapi_free(funcd_localapi *api);

/* What one worker's socket allows: the calling Function and the names of
 * spec.bindings.invoke (NULL-terminated; copied). */
typedef struct funcd_localapi_caller {
    const char *ns, *name;
    const char *replica;
    const char *const *invoke;
    const char *const *kv; /* spec.bindings.kv */
    uint64_t worker_id;    /* the worker's funcd_slot_worker_id: where its calls come from */
} funcd_localapi_caller;

/* Listens at `path` (created 0600; the worker sees it as its own). NULL
 * with funcd_error set. */
funcd_localapi_socket *funcd_localapi_open(funcd_localapi *api, const char *path,
                                           const funcd_localapi_caller *caller);
/* Stops listening and removes the socket; calls in flight get no answer
 * (their worker is gone). NULL is fine. */
void funcd_localapi_close(funcd_localapi_socket *s);

#endif
