/*
 * The function runner service: evaluator.FunctionEvaluator/EvaluateFunction
 * over gRPC (grpc.h), answered by the evaluator chain (evaluator.h).
 *
 * Threads: funcd_fnrunner_new and _free may run while the loop is not
 * running; everything else on the loop's thread.
 */
#ifndef FUNCD_FNRUNNER_SERVICE_H
#define FUNCD_FNRUNNER_SERVICE_H

#include "fnrunner/evaluator.h"

#define FUNCD_FNRUNNER_EVALUATE_PATH "/evaluator.FunctionEvaluator/EvaluateFunction"

typedef struct funcd_fnrunner funcd_fnrunner;

typedef struct funcd_fnrunner_config {
    struct event_base *loop;
    funcd_store *store;           /* FunctionConfigs: /registry/functionconfigs/<ns>/ */
    funcd_runtime *runtime;       /* warm workers */
    const char *functions_dir;    /* NULL: exec evaluator and worker evaluator find nothing */
    const char *shim_dir;         /* funcd-exec lives here */
    const char *state_dir;        /* worker sockets under <state_dir>/fnrun */
    const char *config_namespace; /* NULL: "default" */
    size_t max_message;           /* 0: 6 MiB */
    const funcd_builtin_reg *builtins; /* copied */
    size_t n_builtins;
    const funcd_logger *logger;   /* borrowed for the runner's lifetime */
    struct funcd_sources *sources; /* image pulls for podExecutor images; may be NULL */
    const struct funcd_auth *auth; /* bearer tokens calls need; borrowed; NULL: none */
    struct ssl_ctx_st *tls;        /* TLS on a TCP listener (ALPN h2); borrowed; NULL: none */
    struct funcd_pool_budget *budget; /* the node's places for workers; borrowed; NULL: none */
} funcd_fnrunner_config;

/* Builds the chain and binds the gRPC listener on `addr` (bound address
 * into `bound`). Strings in `cfg` are copied. */
int funcd_fnrunner_new(funcd_fnrunner **out, const funcd_fnrunner_config *cfg, const char *addr,
                       char *bound, size_t bound_len);
/* Loop thread: warms podExecutor images, watches FunctionConfigs. */
int funcd_fnrunner_start(funcd_fnrunner *fr);
/* Loop thread: answers pending calls UNAVAILABLE, stops accepting, stops
 * workers. Idempotent. */
void funcd_fnrunner_close(funcd_fnrunner *fr);
unsigned funcd_fnrunner_live_workers(const funcd_fnrunner *fr);
/* Closes (if not yet) and frees. NULL is fine. */
void funcd_fnrunner_free(funcd_fnrunner *fr);

#endif
