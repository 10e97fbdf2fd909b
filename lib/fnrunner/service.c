/* EvaluateFunction: protobuf in, the evaluator chain, protobuf out. The
 * ResourceList bytes pass through untouched, so config.kubernetes.io/v1
 * and v1alpha1 (YAML or JSON) work alike. */
#include "fnrunner/service.h"

#include <stdlib.h>
#include <string.h>

#include "evaluator.pb-c.h"
#include "fnrunner/grpc.h"
#include "funcd/sys/error.h"
#include "util/misc.h"

typedef struct pending_call pending_call;

struct funcd_fnrunner {
    funcd_eval_config eval;
    char *strings[4]; /* our copies of the config's strings */
    funcd_eval_chain *chain;
    funcd_grpc_server *grpc;
    pending_call *pending; /* calls in the chain */
    size_t max_message;
    int closed;
};

struct pending_call {
    funcd_fnrunner *fr;
    funcd_grpc_call *call;
    Evaluator__EvaluateFunctionRequest *req;
    funcd_eval_job job;
    int64_t started_ms;
    pending_call *prev, *next;
};

static void unlink_call(pending_call *p)
{
    if (p->prev)
        p->prev->next = p->next;
    else
        p->fr->pending = p->next;
    if (p->next)
        p->next->prev = p->prev;
}

static void free_call(pending_call *p)
{
    unlink_call(p);
    funcd_eval_job_clear(&p->job);
    evaluator__evaluate_function_request__free_unpacked(p->req, NULL);
    free(p);
}

static void reply_ok(funcd_fnrunner *fr, funcd_grpc_call *call, funcd_eval_result *res)
{
    Evaluator__EvaluateFunctionResponse resp = EVALUATOR__EVALUATE_FUNCTION_RESPONSE__INIT;
    resp.resource_list.data = (uint8_t *)res->output.data;
    resp.resource_list.len = res->output.len;
    resp.log.data = (uint8_t *)res->log.data;
    resp.log.len = res->log.len;
    size_t size = evaluator__evaluate_function_response__get_packed_size(&resp);
    uint8_t *buf = size <= fr->max_message ? malloc(size ? size : 1) : NULL;
    if (!buf) {
        char msg[256];
        snprintf(msg, sizeof(msg), "the response (%zu bytes with the log) is over the %zu-byte "
                 "message limit", size, fr->max_message);
        funcd_grpc_reply(call, size > fr->max_message ? FUNCD_GRPC_RESOURCE_EXHAUSTED
                                                      : FUNCD_GRPC_INTERNAL,
                         size > fr->max_message ? msg : "out of memory", NULL, 0);
        return;
    }
    evaluator__evaluate_function_response__pack(&resp, buf);
    funcd_grpc_reply(call, FUNCD_GRPC_OK, NULL, buf, size);
    free(buf);
}

static void on_evaluated(funcd_eval_job *job, void *payload)
{
    pending_call *p = payload;
    funcd_fnrunner *fr = p->fr;
    funcd_eval_result *res = &job->res;
    funcd_log(fr->eval.logger, res->status ? FUNCD_LOG_INFO : FUNCD_LOG_DEBUG,
              "fn-runner: %s: status %d in %lld ms%s%s", funcd_eval_job_name(job), res->status,
              (long long)(funcd_mono_ms() - p->started_ms), res->status ? ": " : "",
              res->status ? res->message : "");
    if (res->status == FUNCD_EVAL_OK)
        reply_ok(fr, p->call, res);
    else
        funcd_grpc_reply(p->call, res->status, res->message[0] ? res->message : NULL, NULL, 0);
    free_call(p);
}

static void evaluate(funcd_fnrunner *fr, funcd_grpc_call *call, const uint8_t *msg, size_t len)
{
    Evaluator__EvaluateFunctionRequest *req =
        evaluator__evaluate_function_request__unpack(NULL, len, msg);
    if (!req) {
        funcd_grpc_reply(call, FUNCD_GRPC_INVALID_ARGUMENT,
                         "the request is not an EvaluateFunctionRequest", NULL, 0);
        return;
    }
    if (!*req->image && !*req->exec_path) {
        evaluator__evaluate_function_request__free_unpacked(req, NULL);
        funcd_grpc_reply(call, FUNCD_GRPC_INVALID_ARGUMENT,
                         "EvaluateFunctionRequest needs an image or an exec_path", NULL, 0);
        return;
    }
    pending_call *p = calloc(1, sizeof(*p));
    if (!p) {
        evaluator__evaluate_function_request__free_unpacked(req, NULL);
        funcd_grpc_reply(call, FUNCD_GRPC_INTERNAL, "out of memory", NULL, 0);
        return;
    }
    *p = (pending_call){.fr = fr, .call = call, .req = req, .started_ms = funcd_mono_ms(),
                        .next = fr->pending};
    if (p->next)
        p->next->prev = p;
    fr->pending = p;
    funcd_eval_job_init(&p->job);
    p->job.req = (funcd_eval_request){req->resource_list.data, req->resource_list.len,
                                      req->image, req->exec_path,
                                      funcd_grpc_call_deadline_ms(call)};
    funcd_eval_chain_run(fr->chain, &p->job, on_evaluated, p);
}

static void on_call(funcd_grpc_call *call, const char *path, const uint8_t *msg, size_t len,
                    void *payload)
{
    funcd_fnrunner *fr = payload;
    if (strcmp(path, FUNCD_FNRUNNER_EVALUATE_PATH) != 0)
        funcd_grpc_reply(call, FUNCD_GRPC_UNIMPLEMENTED, "unknown method", NULL, 0);
    else if (fr->closed)
        funcd_grpc_reply(call, FUNCD_GRPC_UNAVAILABLE, "the function runner is shutting down",
                         NULL, 0);
    else
        evaluate(fr, call, msg, len);
}

static int copy_strings(funcd_fnrunner *fr, const funcd_fnrunner_config *cfg)
{
    const char *from[4] = {cfg->functions_dir, cfg->shim_dir, cfg->state_dir,
                           cfg->config_namespace ? cfg->config_namespace : "default"};
    for (int i = 0; i < 4; i++)
        if (from[i] && !(fr->strings[i] = funcd_strdup(from[i])))
            return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the function runner");
    fr->eval = (funcd_eval_config){
        .loop = cfg->loop, .store = cfg->store, .runtime = cfg->runtime,
        .functions_dir = fr->strings[0], .shim_dir = fr->strings[1],
        .state_dir = fr->strings[2], .config_namespace = fr->strings[3],
        .max_message = fr->max_message, .builtins = cfg->builtins,
        .n_builtins = cfg->n_builtins, .logger = cfg->logger, .sources = cfg->sources,
        .budget = cfg->budget};
    return 0;
}

int funcd_fnrunner_new(funcd_fnrunner **out, const funcd_fnrunner_config *cfg, const char *addr,
                       char *bound, size_t bound_len)
{
    *out = NULL;
    funcd_fnrunner *fr = calloc(1, sizeof(*fr));
    if (!fr)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the function runner");
    fr->max_message = cfg->max_message ? cfg->max_message : FUNCD_EVAL_DEFAULT_MAX_MESSAGE;
    int rc = copy_strings(fr, cfg);
    if (rc == 0)
        rc = funcd_eval_chain_new_default(&fr->chain, &fr->eval);
    if (rc == 0) {
        funcd_grpc_config g = {cfg->loop, fr->max_message, on_call, fr, cfg->logger, cfg->auth,
                               cfg->tls};
        rc = funcd_grpc_server_new(&fr->grpc, &g, addr, bound, bound_len);
    }
    if (rc < 0) {
        funcd_fnrunner_free(fr);
        return rc;
    }
    *out = fr;
    return 0;
}

int funcd_fnrunner_start(funcd_fnrunner *fr)
{
    return funcd_eval_chain_start(fr->chain);
}

void funcd_fnrunner_close(funcd_fnrunner *fr)
{
    if (!fr || fr->closed)
        return;
    fr->closed = 1;
    while (fr->pending) {
        pending_call *p = fr->pending;
        funcd_eval_job_cancel(&p->job);
        funcd_grpc_reply(p->call, FUNCD_GRPC_UNAVAILABLE, "the function runner is shutting down",
                         NULL, 0);
        free_call(p);
    }
    funcd_eval_chain_close(fr->chain);
    funcd_grpc_server_free(fr->grpc);
    fr->grpc = NULL;
}

unsigned funcd_fnrunner_live_workers(const funcd_fnrunner *fr)
{
    return fr ? funcd_eval_chain_live_workers(fr->chain) : 0;
}

void funcd_fnrunner_free(funcd_fnrunner *fr)
{
    if (!fr)
        return;
    funcd_fnrunner_close(fr);
    funcd_eval_chain_free(fr->chain);
    for (size_t i = 0; i < sizeof(fr->strings) / sizeof(fr->strings[0]); i++)
        free(fr->strings[i]);
    free(fr);
}
