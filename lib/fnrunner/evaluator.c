/* The evaluator chain and what every evaluator shares: finishing a job and
 * turning a failed function's stderr and results into a status message. */
#include "fnrunner/evaluator.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "funcd/sys/error.h"

struct funcd_eval_chain {
    funcd_evaluator **evs;
    size_t n;
};

static void free_evaluators(funcd_evaluator **evs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (evs[i] && evs[i]->free)
            evs[i]->free(evs[i]);
}

int funcd_eval_chain_new(funcd_eval_chain **out, funcd_evaluator **evs, size_t n)
{
    *out = NULL;
    funcd_eval_chain *ch = calloc(1, sizeof(*ch));
    funcd_evaluator **copy = n ? calloc(n, sizeof(*copy)) : NULL;
    if (!ch || (n && !copy)) {
        free(ch);
        free(copy);
        free_evaluators(evs, n);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the evaluator chain");
    }
    if (n)
        memcpy(copy, evs, n * sizeof(*copy));
    ch->evs = copy;
    ch->n = n;
    *out = ch;
    return 0;
}

int funcd_eval_chain_new_default(funcd_eval_chain **out, const funcd_eval_config *cfg)
{
    funcd_evaluator *evs[3] = {NULL, NULL, NULL};
    size_t n = 0;
    int rc = funcd_eval_builtin_new(&evs[n], cfg);
    if (rc == 0)
        rc = funcd_eval_exec_new(&evs[++n], cfg);
#ifdef FUNCD_HAVE_WORKER_EVALUATOR
    if (rc == 0)
        rc = funcd_eval_worker_new(&evs[++n], cfg);
#endif
    if (rc < 0) {
        free_evaluators(evs, n);
        *out = NULL;
        return rc;
    }
    return funcd_eval_chain_new(out, evs, n + 1);
}

int funcd_eval_chain_start(funcd_eval_chain *ch)
{
    for (size_t i = 0; i < ch->n; i++) {
        int rc = ch->evs[i]->start ? ch->evs[i]->start(ch->evs[i]) : 0;
        if (rc < 0)
            return rc;
    }
    return 0;
}

void funcd_eval_chain_close(funcd_eval_chain *ch)
{
    for (size_t i = 0; ch && i < ch->n; i++)
        if (ch->evs[i]->close)
            ch->evs[i]->close(ch->evs[i]);
}

unsigned funcd_eval_chain_live_workers(const funcd_eval_chain *ch)
{
    unsigned n = 0;
    for (size_t i = 0; ch && i < ch->n; i++)
        if (ch->evs[i]->live_workers)
            n += ch->evs[i]->live_workers(ch->evs[i]);
    return n;
}

void funcd_eval_chain_free(funcd_eval_chain *ch)
{
    if (!ch)
        return;
    free_evaluators(ch->evs, ch->n);
    free(ch->evs);
    free(ch);
}

void funcd_eval_job_init(funcd_eval_job *job)
{
    memset(job, 0, sizeof(*job));
}

void funcd_eval_job_clear(funcd_eval_job *job)
{
    funcd_buf_free(&job->res.output);
    funcd_buf_free(&job->res.log);
    funcd_buf_free(&job->tried);
}

const char *funcd_eval_job_name(const funcd_eval_job *job)
{
    if (job->req.image && *job->req.image)
        return job->req.image;
    return job->req.exec_path ? job->req.exec_path : "";
}

static void reset_result(funcd_eval_result *res)
{
    res->status = FUNCD_EVAL_OK;
    res->message[0] = '\0';
    funcd_buf_reset(&res->output);
    funcd_buf_reset(&res->log);
}

static void ask_next(funcd_eval_job *job)
{
    funcd_evaluator *ev = job->chain->evs[job->next++];
    reset_result(&job->res);
    ev->evaluate(ev, job);
}

void funcd_eval_chain_run(funcd_eval_chain *ch, funcd_eval_job *job, funcd_eval_done_fn done,
                          void *payload)
{
    job->chain = ch;
    job->next = 0;
    job->done = done;
    job->payload = payload;
    job->cancel = NULL;
    funcd_buf_reset(&job->tried);
    if (ch->n == 0) {
        funcd_eval_finishf(job, FUNCD_EVAL_NOT_FOUND, "no evaluator is configured");
        return;
    }
    ask_next(job);
}

void funcd_eval_job_cancel(funcd_eval_job *job)
{
    void (*cancel)(funcd_eval_job *) = job->cancel;
    job->cancel = NULL;
    if (cancel)
        cancel(job);
}

/* Every evaluator said NOT_FOUND: say which image and what each tried. */
static void not_found_everywhere(funcd_eval_job *job)
{
    snprintf(job->res.message, sizeof(job->res.message), "no evaluator has function \"%s\" (%s)",
             funcd_eval_job_name(job), job->tried.data ? job->tried.data : "");
}

void funcd_eval_finish(funcd_eval_job *job)
{
    job->cancel = NULL;
    job->state = NULL;
    if (job->chain && job->res.status == FUNCD_EVAL_NOT_FOUND) {
        const char *name = job->chain->n ? job->chain->evs[job->next - 1]->name : "chain";
        funcd_buf_printf(&job->tried, "%s%s: %s", job->tried.len ? "; " : "", name,
                         job->res.message);
        if (job->next < job->chain->n) {
            ask_next(job);
            return;
        }
        not_found_everywhere(job);
    }
    if (job->done)
        job->done(job, job->payload);
}

void funcd_eval_finishf(funcd_eval_job *job, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(job->res.message, sizeof(job->res.message), fmt, ap);
    va_end(ap);
    job->res.status = status;
    funcd_eval_finish(job);
}

/* Appends `s` (at most `n` bytes) to `dst`, a NUL-terminated string in a
 * buffer of `cap` bytes, truncating at the end of the buffer. */
static void append_bounded(char *dst, size_t cap, const char *s, size_t n)
{
    size_t len = strlen(dst);
    if (len + 1 >= cap)
        return;
    if (n > cap - len - 1)
        n = cap - len - 1;
    memcpy(dst + len, s, n);
    dst[len + n] = '\0';
}

static int is_error_result(const cJSON *r)
{
    const cJSON *sev = cJSON_GetObjectItemCaseSensitive(r, "severity");
    /* kyaml (and funcdctl): only "error" fails; no severity reads as info */
    return cJSON_IsString(sev) && strcmp(sev->valuestring, "error") == 0;
}

void funcd_eval_append_results(funcd_eval_result *res)
{
    if (!res->output.len)
        return;
    cJSON *rl = NULL;
    funcd_api_error err;
    if (funcd_api_decode_max(res->output.data, res->output.len, FUNCD_EVAL_DEFAULT_MAX_MESSAGE, &rl, &err) < 0)
        return;
    const cJSON *results = cJSON_GetObjectItemCaseSensitive(rl, "results"), *r;
    const char *sep = "; results: ";
    cJSON_ArrayForEach(r, results)
    {
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(r, "message");
        if (!is_error_result(r) || !cJSON_IsString(msg))
            continue;
        append_bounded(res->message, sizeof(res->message), sep, strlen(sep));
        append_bounded(res->message, sizeof(res->message), msg->valuestring,
                       strlen(msg->valuestring));
        sep = "; ";
    }
    cJSON_Delete(rl);
}

/* Keeps room for the results after the stderr tail. */
#define RESULTS_ROOM 2048

void funcd_eval_set_failure(funcd_eval_result *res, const char *what)
{
    res->status = FUNCD_EVAL_INTERNAL;
    snprintf(res->message, sizeof(res->message) - RESULTS_ROOM, "%s", what);
    size_t len = res->log.len, skip = len > FUNCD_EVAL_STDERR_TAIL ? len - FUNCD_EVAL_STDERR_TAIL : 0;
    while (len && (res->log.data[len - 1] == '\n' || res->log.data[len - 1] == '\r'))
        len--; /* a trailing newline reads badly inside a status message */
    if (len > skip) {
        append_bounded(res->message, sizeof(res->message) - RESULTS_ROOM, ": ", 2);
        append_bounded(res->message, sizeof(res->message) - RESULTS_ROOM, res->log.data + skip,
                       len - skip);
    }
    funcd_eval_append_results(res);
}
