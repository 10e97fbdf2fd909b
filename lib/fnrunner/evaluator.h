/*
 * The function runner's evaluator chain: builtin -> exec -> worker.
 *
 * An evaluator either knows the requested image (and then its answer is
 * final) or says NOT_FOUND, which makes the chain ask the next one. When
 * every evaluator says NOT_FOUND the chain answers NOT_FOUND with what each
 * of them tried.
 *
 * Threads: everything here runs on the platform loop.
 */
#ifndef FUNCD_FNRUNNER_EVALUATOR_H
#define FUNCD_FNRUNNER_EVALUATOR_H

#include <cjson/cJSON.h>
#include <event2/event.h>
#include <stdint.h>

#include "funcd/funcd.h"
#include "funcd/sys/runtime.h"
#include "fnrunner/grpc.h"
#include "funcd/sys/store.h"
#include "util/buf.h"
#include "util/log.h"

/* The evaluators' result codes are gRPC's (fnrunner/grpc.h), under the
 * names the evaluators use. */
enum {
    FUNCD_EVAL_OK = FUNCD_GRPC_OK,
    FUNCD_EVAL_INVALID_ARGUMENT = FUNCD_GRPC_INVALID_ARGUMENT,
    FUNCD_EVAL_DEADLINE_EXCEEDED = FUNCD_GRPC_DEADLINE_EXCEEDED,
    FUNCD_EVAL_NOT_FOUND = FUNCD_GRPC_NOT_FOUND,
    FUNCD_EVAL_RESOURCE_EXHAUSTED = FUNCD_GRPC_RESOURCE_EXHAUSTED,
    FUNCD_EVAL_UNIMPLEMENTED = FUNCD_GRPC_UNIMPLEMENTED,
    FUNCD_EVAL_INTERNAL = FUNCD_GRPC_INTERNAL,
    FUNCD_EVAL_UNAVAILABLE = FUNCD_GRPC_UNAVAILABLE,
};

#define FUNCD_EVAL_DEFAULT_TIMEOUT_MS 30000
#define FUNCD_EVAL_DEFAULT_MAX_MESSAGE FUNCD_GRPC_DEFAULT_MAX_MESSAGE
/* How much of a failed function's stderr goes into the status message. */
#define FUNCD_EVAL_STDERR_TAIL 4096

/* The environment an exec function or a functions-dir worker starts with
 * (a worker's overrides add to it): never funcd's own, which may hold its
 * credentials. */
extern const char *const funcd_eval_default_env[];

typedef struct funcd_eval_request {
    const uint8_t *rl; /* the ResourceList, passed through untouched */
    size_t rl_len;
    const char *image;     /* "" or NULL: none */
    const char *exec_path; /* "" or NULL: none */
    int64_t deadline_ms;   /* monotonic (funcd_mono_ms); 0: the default timeout */
} funcd_eval_request;

typedef struct funcd_eval_result {
    int status; /* FUNCD_EVAL_* (a gRPC code) */
    char message[8192];
    funcd_buf output; /* the ResourceList out (also on failure: it may carry results) */
    funcd_buf log;    /* the function's stderr */
} funcd_eval_result;

/* A builtin registered through funcd_with_builtin; defined with the
 * platform options (lib/platform/options.h). */
typedef struct funcd_builtin_reg funcd_builtin_reg;

/* What every evaluator may need; strings are borrowed for its lifetime. */
typedef struct funcd_eval_config {
    struct event_base *loop;
    funcd_store *store;            /* FunctionConfigs; NULL: none */
    funcd_runtime *runtime;        /* warm workers */
    const char *functions_dir;     /* NULL: exec and worker find nothing */
    const char *shim_dir;          /* funcd-exec lives here */
    const char *state_dir;         /* worker sockets under <state_dir>/fnrun */
    const char *config_namespace;  /* NULL: "default" */
    size_t max_message;            /* 0: FUNCD_EVAL_DEFAULT_MAX_MESSAGE */
    const funcd_builtin_reg *builtins; /* host builtins, tried before the shipped ones */
    size_t n_builtins;
    const funcd_logger *logger;
    struct funcd_sources *sources; /* pulls images the functions dir does not hold; may be NULL */
    struct funcd_pool_budget *budget; /* places for warm workers (the node's); NULL: none */
} funcd_eval_config;

typedef struct funcd_eval_job funcd_eval_job;
typedef struct funcd_eval_chain funcd_eval_chain;
typedef void (*funcd_eval_done_fn)(funcd_eval_job *job, void *payload);

/* One evaluation. The caller owns it and keeps it (and the request's
 * buffers) alive until `done` has run or the job was cancelled. */
struct funcd_eval_job {
    funcd_eval_request req;
    funcd_eval_result res;
    /* Set by an evaluator that finishes later: stops its work and frees its
     * state without finishing the job. Cleared when the job finishes. */
    void (*cancel)(funcd_eval_job *job);
    void *state;
    /* private to the chain */
    funcd_eval_chain *chain;
    size_t next;
    funcd_buf tried;
    funcd_eval_done_fn done;
    void *payload;
};

/*
 * An evaluator. `evaluate` fills job->res and calls funcd_eval_finish(job),
 * before returning or later on the loop (then it sets job->cancel first).
 * Optional slots may be NULL.
 */
typedef struct funcd_evaluator funcd_evaluator;
struct funcd_evaluator {
    const char *name; /* "builtin", "exec", "worker": shown in NOT_FOUND messages */
    void (*evaluate)(funcd_evaluator *ev, funcd_eval_job *job);
    int (*start)(funcd_evaluator *ev);                   /* optional: warm up, watch */
    void (*close)(funcd_evaluator *ev);                  /* optional: stop background work */
    unsigned (*live_workers)(const funcd_evaluator *ev); /* optional */
    void (*free)(funcd_evaluator *ev);                   /* no job may be running */
};

int funcd_eval_builtin_new(funcd_evaluator **out, const funcd_eval_config *cfg);
int funcd_eval_exec_new(funcd_evaluator **out, const funcd_eval_config *cfg);
/* lib/fnrunner/worker.c: FunctionConfig podExecutor images as warm workers. */
int funcd_eval_worker_new(funcd_evaluator **out, const funcd_eval_config *cfg);

/* The shipped set-namespace builtin (a funcd_builtin_fn). */
int funcd_builtin_set_namespace(const char *in, size_t in_len, char **out, size_t *out_len,
                                char **log, size_t *log_len, void *payload);

/* A chain over `evs` (ownership moves to the chain, also on failure). */
int funcd_eval_chain_new(funcd_eval_chain **out, funcd_evaluator **evs, size_t n);
/* The standard chain builtin -> exec -> worker over `cfg`. */
int funcd_eval_chain_new_default(funcd_eval_chain **out, const funcd_eval_config *cfg);
int funcd_eval_chain_start(funcd_eval_chain *ch);
void funcd_eval_chain_close(funcd_eval_chain *ch);
unsigned funcd_eval_chain_live_workers(const funcd_eval_chain *ch);
void funcd_eval_chain_free(funcd_eval_chain *ch);

void funcd_eval_job_init(funcd_eval_job *job);
void funcd_eval_job_clear(funcd_eval_job *job); /* frees the result's buffers */
/* Runs `job` through the chain; `done` runs once, possibly before this
 * returns. */
void funcd_eval_chain_run(funcd_eval_chain *ch, funcd_eval_job *job, funcd_eval_done_fn done,
                          void *payload);
/* Stops a running job; `done` never runs. */
void funcd_eval_job_cancel(funcd_eval_job *job);

/* For evaluators: the result in job->res is final (for this evaluator). */
void funcd_eval_finish(funcd_eval_job *job);
/* For evaluators: finishes the job with `status` and a printf message. */
void funcd_eval_finishf(funcd_eval_job *job, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The image name to show for a request: image, else exec_path. */
const char *funcd_eval_job_name(const funcd_eval_job *job);
/* Appends "; results: <error results' messages>" to res->message when
 * res->output is a ResourceList with error results. */
void funcd_eval_append_results(funcd_eval_result *res);
/* res->message = "<what>: <last FUNCD_EVAL_STDERR_TAIL bytes of log>" plus
 * the error results; status INTERNAL. */
void funcd_eval_set_failure(funcd_eval_result *res, const char *what);

/*
 * Finds the FunctionConfig in `ns` of `store` whose `executor`
 * ("binaryExecutor" or "podExecutor") serves `image`, i.e. `image` is
 * prefix + "/" + spec.image + ":" + tag for one of spec.prefixes ("" or
 * absent: spec.image alone) and one of the executor's tags (no tags: any
 * tag, or none). `*out` is the whole object (cJSON_Delete it).
 * FUNCD_ENOTFOUND when none does.
 */
int funcd_eval_find_config(funcd_store *store, const char *ns, const char *image,
                           const char *executor, cJSON **out);
/* Whether `cfg_spec` (a FunctionConfig spec) serves `image` with `executor`. */
int funcd_eval_config_matches(const cJSON *spec, const char *executor, const char *image);

/* The image a FunctionConfig's worker is warmed with: the first prefix
 * (none when there are no prefixes, or it is "") + "/" + spec.image, with
 * the podExecutor's first tag when it lists tags. NULL on a bad spec or
 * out of memory; free() it. */
char *funcd_eval_warm_image(const cJSON *spec);

/* What of podExecutor.templateOverrides (a pod template: {metadata, spec:
 * {containers: [...], ...}}) a sandboxed worker honours: the container named
 * "function"'s resources.limits.memory and .cpu, and its env entries with a
 * name and a string value. Everything else is listed in `ignored` (paths
 * relative to templateOverrides, e.g. "spec.nodeSelector"). */
typedef struct funcd_eval_overrides {
    funcd_worker_limits limits;
    char **env;     /* "NAME=value", NULL-terminated (never NULL after a success) */
    cJSON *ignored; /* an array of strings */
} funcd_eval_overrides;

/* 0, or FUNCD_ENOMEM. `tmpl` may be NULL (nothing to honour). */
int funcd_eval_overrides_parse(const cJSON *tmpl, funcd_eval_overrides *out);
void funcd_eval_overrides_clear(funcd_eval_overrides *o);

#endif
