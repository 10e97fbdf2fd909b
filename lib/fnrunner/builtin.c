/* The builtin evaluator: in-process KRM functions, the host's first (so a
 * host can replace a shipped one), then the shipped ones. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fnrunner/evaluator.h"
#include "funcd/sys/error.h"
#include "platform/options.h"
#include "util/misc.h"

static const char *const set_namespace_images[] = {
    "set-namespace",
    "set-namespace:*",
    "gcr.io/kpt-fn/set-namespace:*",
    "ghcr.io/kptdev/krm-functions-catalog/set-namespace:*",
};

typedef struct builtin_eval {
    funcd_evaluator base;
    funcd_builtin_reg *regs;
    size_t n;
    size_t max_message;
} builtin_eval;

/* An exact name, or a prefix ending in ':' or '*' ("x:*" matches "x:v1"). */
static int image_matches(const char *pattern, const char *image)
{
    size_t n = strlen(pattern);
    if (n && pattern[n - 1] == '*')
        return strncmp(pattern, image, n - 1) == 0;
    if (n && pattern[n - 1] == ':')
        return strncmp(pattern, image, n) == 0;
    return strcmp(pattern, image) == 0;
}

static const funcd_builtin_reg *find(const builtin_eval *b, const char *image)
{
    for (size_t i = 0; i < b->n; i++)
        if (image_matches(b->regs[i].image, image))
            return &b->regs[i];
    return NULL;
}

static void run(builtin_eval *b, const funcd_builtin_reg *reg, funcd_eval_job *job)
{
    funcd_eval_result *res = &job->res;
    char *out = NULL, *log = NULL;
    size_t out_len = 0, log_len = 0;
    int rc = reg->fn((const char *)job->req.rl, job->req.rl_len, &out, &out_len, &log, &log_len,
                     reg->payload);
    int oom = (out && funcd_buf_append(&res->output, out, out_len) < 0) ||
              (log && funcd_buf_append(&res->log, log, log_len) < 0);
    free(out);
    free(log);
    if (oom) {
        funcd_eval_finishf(job, FUNCD_EVAL_INTERNAL, "out of memory running builtin %s",
                           job->req.image);
    } else if (res->output.len > b->max_message) {
        funcd_eval_finishf(job, FUNCD_EVAL_RESOURCE_EXHAUSTED,
                           "builtin %s wrote %zu bytes, over the %zu-byte message limit",
                           job->req.image, res->output.len, b->max_message);
    } else if (rc != 0) {
        char what[1024];
        snprintf(what, sizeof(what), "builtin function %s failed", job->req.image);
        funcd_eval_set_failure(res, what);
        funcd_eval_finish(job);
    } else {
        funcd_eval_finish(job);
    }
}

static void builtin_evaluate(funcd_evaluator *ev, funcd_eval_job *job)
{
    builtin_eval *b = (builtin_eval *)ev;
    const char *image = job->req.image;
    if (job->req.exec_path && *job->req.exec_path) {
        /* the caller named the binary to run: no builtin stands in for it */
        funcd_eval_finishf(job, FUNCD_EVAL_NOT_FOUND, "exec_path is given");
        return;
    }
    const funcd_builtin_reg *reg = image && *image ? find(b, image) : NULL;
    if (!reg) {
        funcd_eval_finishf(job, FUNCD_EVAL_NOT_FOUND, "no builtin named \"%s\"", image ? image : "");
        return;
    }
    if (job->req.deadline_ms && funcd_mono_ms() >= job->req.deadline_ms) {
        funcd_eval_finishf(job, FUNCD_EVAL_DEADLINE_EXCEEDED, "the deadline passed before %s ran",
                           image);
        return;
    }
    run(b, reg, job);
}

static void builtin_free(funcd_evaluator *ev)
{
    builtin_eval *b = (builtin_eval *)ev;
    for (size_t i = 0; i < b->n; i++)
        free(b->regs[i].image);
    free(b->regs);
    free(b);
}

static int add(builtin_eval *b, const char *image, funcd_builtin_fn fn, void *payload)
{
    char *copy = funcd_strdup(image);
    if (!copy)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory registering builtin %s", image);
    b->regs[b->n++] = (funcd_builtin_reg){copy, fn, payload};
    return 0;
}

int funcd_eval_builtin_new(funcd_evaluator **out, const funcd_eval_config *cfg)
{
    *out = NULL;
    size_t shipped = sizeof(set_namespace_images) / sizeof(set_namespace_images[0]);
    builtin_eval *b = calloc(1, sizeof(*b));
    if (b)
        b->regs = calloc(cfg->n_builtins + shipped, sizeof(*b->regs));
    if (!b || !b->regs) {
        free(b);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the builtin evaluator");
    }
    b->base = (funcd_evaluator){.name = "builtin", .evaluate = builtin_evaluate,
                                .free = builtin_free};
    b->max_message = cfg->max_message ? cfg->max_message : FUNCD_EVAL_DEFAULT_MAX_MESSAGE;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < cfg->n_builtins; i++)
        rc = add(b, cfg->builtins[i].image, cfg->builtins[i].fn, cfg->builtins[i].payload);
    for (size_t i = 0; rc == 0 && i < shipped; i++)
        rc = add(b, set_namespace_images[i], funcd_builtin_set_namespace, NULL);
    if (rc < 0) {
        builtin_free(&b->base);
        return rc;
    }
    *out = &b->base;
    return 0;
}
