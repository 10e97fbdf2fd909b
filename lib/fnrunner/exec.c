/*
 * The exec evaluator: a local executable per evaluation, named by a
 * FunctionConfig's binaryExecutor or by the request's exec_path, both under
 * the functions directory. The ResourceList goes to stdin; stdout is the
 * output, stderr the log.
 */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fnrunner/child.h"
#include "fnrunner/evaluator.h"
#include "funcd/sys/error.h"
#include "util/misc.h"

typedef struct exec_eval {
    funcd_evaluator base;
    struct event_base *loop;
    funcd_store *store;
    char *dir;      /* the functions directory as configured; NULL: exec is off */
    char *dir_real; /* and with symlinks resolved, for absolute exec_paths */
    char *ns;
    size_t max_message;
} exec_eval;

typedef struct exec_run {
    exec_eval *e;
    funcd_eval_job *job;
    funcd_child *child;
    int64_t timeout_ms;
} exec_run;

const char *const funcd_eval_default_env[] = {"PATH=/usr/local/bin:/usr/bin:/bin",
                                              "LANG=C.UTF-8", NULL};

static int has_dotdot(const char *path)
{
    for (const char *p = path; (p = strstr(p, "..")); p += 2)
        if ((p == path || p[-1] == '/') && (p[2] == '\0' || p[2] == '/'))
            return 1;
    return 0;
}

/* `abs` inside `dir`: the part after "dir/", else NULL. */
static const char *inside(const char *abs, const char *dir)
{
    size_t n = dir ? strlen(dir) : 0;
    while (n > 1 && dir[n - 1] == '/')
        n--;
    if (!n || strncmp(abs, dir, n) != 0 || abs[n] != '/')
        return NULL;
    return abs + n + 1;
}

/* FUNCD_EVAL_OK with `full` set, or a status with job->res.message set. */
static int resolve(exec_eval *e, funcd_eval_job *job, const char *path, char *full, size_t len)
{
    funcd_eval_result *res = &job->res;
    if (!e->dir) {
        snprintf(res->message, sizeof(res->message), "no functions directory is configured");
        return FUNCD_EVAL_NOT_FOUND;
    }
    const char *rel = path;
    if (path[0] == '/' && !(rel = inside(path, e->dir)) && !(rel = inside(path, e->dir_real))) {
        snprintf(res->message, sizeof(res->message),
                 "%s is outside the functions directory %s", path, e->dir);
        return FUNCD_EVAL_INVALID_ARGUMENT;
    }
    if (has_dotdot(rel) || !*rel) {
        snprintf(res->message, sizeof(res->message),
                 "%s must name a file inside the functions directory (no \"..\")", path);
        return FUNCD_EVAL_INVALID_ARGUMENT;
    }
    struct stat st;
    if ((size_t)snprintf(full, len, "%s/%s", e->dir, rel) >= len || stat(full, &st) != 0 ||
        !S_ISREG(st.st_mode) || access(full, X_OK) != 0) {
        snprintf(res->message, sizeof(res->message),
                 "%s is not an executable file under the functions directory %s", rel, e->dir);
        return FUNCD_EVAL_NOT_FOUND;
    }
    return FUNCD_EVAL_OK;
}

/* The binaryExecutor path of the FunctionConfig that serves the image. */
static int configured_path(exec_eval *e, funcd_eval_job *job, char *full, size_t len)
{
    cJSON *fc = NULL;
    if (funcd_eval_find_config(e->store, e->ns, job->req.image, "binaryExecutor", &fc) < 0) {
        snprintf(job->res.message, sizeof(job->res.message), "%s", funcd_error_last()->message);
        return FUNCD_EVAL_NOT_FOUND;
    }
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(fc, "spec");
    const cJSON *path = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(spec, "binaryExecutor"), "path");
    int status = FUNCD_EVAL_NOT_FOUND;
    if (cJSON_IsString(path))
        status = resolve(e, job, path->valuestring, full, len);
    else
        snprintf(job->res.message, sizeof(job->res.message), "the FunctionConfig for %s has no "
                 "binaryExecutor.path", job->req.image);
    cJSON_Delete(fc);
    return status;
}

static void finish_exited(exec_run *r, int wait_status)
{
    funcd_eval_job *job = r->job;
    const char *name = funcd_eval_job_name(job);
    char what[1024];
    if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0) {
        job->res.status = FUNCD_EVAL_OK;
        funcd_eval_finish(job);
        return;
    }
    if (WIFSIGNALED(wait_status))
        snprintf(what, sizeof(what), "function %s was killed by signal %d", name,
                 WTERMSIG(wait_status));
    else
        snprintf(what, sizeof(what), "function %s exited with status %d", name,
                 wait_status < 0 ? -1 : WEXITSTATUS(wait_status));
    funcd_eval_set_failure(&job->res, what);
    funcd_eval_finish(job);
}

static void on_child_done(funcd_child *c, funcd_child_end end, int wait_status, funcd_buf *out,
                          funcd_buf *err, void *payload)
{
    exec_run *r = payload;
    funcd_eval_job *job = r->job;
    funcd_buf_swap_in(&job->res.output, out);
    funcd_buf_swap_in(&job->res.log, err);
    funcd_child_free(c);
    exec_run copy = *r;
    free(r);
    if (end == FUNCD_CHILD_TIMEOUT)
        funcd_eval_finishf(job, FUNCD_EVAL_DEADLINE_EXCEEDED,
                           "function %s did not finish within %lld ms and was killed",
                           funcd_eval_job_name(job), (long long)copy.timeout_ms);
    else if (end == FUNCD_CHILD_TOO_BIG)
        funcd_eval_finishf(job, FUNCD_EVAL_RESOURCE_EXHAUSTED,
                           "function %s wrote more than %zu bytes (the message limit) and was "
                           "killed", funcd_eval_job_name(job), copy.e->max_message);
    else
        finish_exited(&copy, wait_status);
}

static void exec_cancel(funcd_eval_job *job)
{
    exec_run *r = job->state;
    funcd_child_free(r->child);
    free(r);
}

static void start(exec_eval *e, funcd_eval_job *job, const char *path)
{
    int64_t now = funcd_mono_ms();
    int64_t deadline = job->req.deadline_ms ? job->req.deadline_ms
                                            : now + FUNCD_EVAL_DEFAULT_TIMEOUT_MS;
    if (deadline <= now) {
        funcd_eval_finishf(job, FUNCD_EVAL_DEADLINE_EXCEEDED, "the deadline passed before %s ran",
                           funcd_eval_job_name(job));
        return;
    }
    exec_run *r = calloc(1, sizeof(*r));
    if (!r) {
        funcd_eval_finishf(job, FUNCD_EVAL_INTERNAL, "out of memory running %s", path);
        return;
    }
    *r = (exec_run){e, job, NULL, deadline - now};
    funcd_child_spec spec = {.path = path, .env = funcd_eval_default_env,
                             .input = job->req.rl, .input_len = job->req.rl_len,
                             .max_stdout = e->max_message, .max_stderr = e->max_message,
                             .deadline_ms = deadline};
    if (funcd_child_run(&r->child, e->loop, &spec, on_child_done, r) < 0) {
        free(r);
        funcd_eval_finishf(job, FUNCD_EVAL_INTERNAL, "%s", funcd_error_last()->message);
        return;
    }
    job->state = r;
    job->cancel = exec_cancel;
}

static void exec_evaluate(funcd_evaluator *ev, funcd_eval_job *job)
{
    exec_eval *e = (exec_eval *)ev;
    char full[PATH_MAX];
    int status;
    if (job->req.exec_path && *job->req.exec_path)
        status = resolve(e, job, job->req.exec_path, full, sizeof(full));
    else if (job->req.image && *job->req.image)
        status = configured_path(e, job, full, sizeof(full));
    else
        status = (snprintf(job->res.message, sizeof(job->res.message), "no image given"),
                  FUNCD_EVAL_NOT_FOUND);
    if (status != FUNCD_EVAL_OK) {
        job->res.status = status;
        funcd_eval_finish(job);
        return;
    }
    start(e, job, full);
}

static void exec_free(funcd_evaluator *ev)
{
    exec_eval *e = (exec_eval *)ev;
    free(e->dir);
    free(e->dir_real);
    free(e->ns);
    free(e);
}

int funcd_eval_exec_new(funcd_evaluator **out, const funcd_eval_config *cfg)
{
    *out = NULL;
    exec_eval *e = calloc(1, sizeof(*e));
    if (!e)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the exec evaluator");
    e->base = (funcd_evaluator){.name = "exec", .evaluate = exec_evaluate, .free = exec_free};
    e->loop = cfg->loop;
    e->store = cfg->store;
    e->max_message = cfg->max_message ? cfg->max_message : FUNCD_EVAL_DEFAULT_MAX_MESSAGE;
    e->ns = funcd_strdup(cfg->config_namespace ? cfg->config_namespace : "default");
    if (cfg->functions_dir) {
        e->dir = funcd_strdup(cfg->functions_dir);
        e->dir_real = realpath(cfg->functions_dir, NULL);
    }
    if (!e->ns || (cfg->functions_dir && !e->dir)) {
        exec_free(&e->base);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the exec evaluator");
    }
    /* A function that exits before reading all its input must not kill us. */
    signal(SIGPIPE, SIG_IGN);
    *out = &e->base;
    return 0;
}
