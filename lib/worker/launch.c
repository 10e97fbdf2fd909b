#include "worker/launch.h"

#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "funcd/sys/error.h"
#include "port/runtime.h"
#include "util/misc.h"

#define PROBE_FIRST_US 100
#define PROBE_FAST_ATTEMPTS 100 /* 10 ms at PROBE_FIRST_US */
#define PROBE_MAX_US 2000
#define PROBE_MAX_BODY (64 * 1024) /* a longer answer to /_/ready is not read to its end */

struct funcd_workers {
    struct event_base *loop;
    funcd_runtime *rt;
    char *run_dir;
    unsigned next_dir;
    funcd_worker_ctx *live; /* workers whose process runs */
    unsigned n_live;
};

struct funcd_launch {
    atomic_int refs;
    funcd_workers *ws;
    char *name;
    char **argv, **env;
    char *cwd, *rootfs, *exec_shim, *memory_field;
    funcd_worker_limits limits;
    funcd_worker_network network;
    funcd_worker_bind *binds; /* room for one more: the worker's own directory */
    size_t n_binds;
    unsigned stop_grace_ms;
    int keep_probe_connection;
    int local_api;
    funcd_worker_listen listen[FUNCD_LAUNCH_MAX_LISTEN];
    size_t n_listen;
    funcd_launch_hooks hooks;
};


/* ---- the owner's workers ---------------------------------------------- */

int funcd_workers_new(funcd_workers **out, struct event_base *loop, funcd_runtime *rt,
                      const char *run_dir)
{
    *out = NULL;
    funcd_workers *ws = calloc(1, sizeof(*ws));
    if (!ws || !(ws->run_dir = strdup(run_dir))) {
        free(ws);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory preparing workers");
    }
    ws->loop = loop;
    ws->rt = rt;
    if (mkdir(run_dir, 0700) != 0 && errno != EEXIST) {
        int err = errno;
        free(ws->run_dir);
        free(ws);
        return funcd_error_set(FUNCD_EIO, "cannot create %s for workers: %s", run_dir,
                               strerror(err));
    }
    *out = ws;
    return 0;
}

unsigned funcd_workers_live(const funcd_workers *ws)
{
    return ws ? ws->n_live : 0;
}

size_t funcd_workers_pids(const funcd_workers *ws, int *pids, size_t max)
{
    size_t n = 0;
    for (const funcd_worker_ctx *w = ws->live; w; w = w->next, n++)
        if (n < max)
            pids[n] = funcd_port_runtime_pid(ws->rt, w->proc);
    return n;
}

static void worker_gone(funcd_worker_ctx *w, const char *why);

void funcd_workers_free(funcd_workers *ws)
{
    if (!ws)
        return;
    while (ws->live) /* released: the runtime kills it, without callbacks */
        worker_gone(ws->live, "its owner shut down");
    rmdir(ws->run_dir);
    free(ws->run_dir);
    free(ws);
}

static void live_link(funcd_worker_ctx *w)
{
    funcd_workers *ws = w->ln->ws;
    w->next = ws->live;
    if (ws->live)
        ws->live->prev = w;
    ws->live = w;
    ws->n_live++;
}

static void live_unlink(funcd_worker_ctx *w)
{
    funcd_workers *ws = w->ln->ws;
    if (w->prev)
        w->prev->next = w->next;
    else if (ws->live == w)
        ws->live = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->prev = w->next = NULL;
    ws->n_live--;
}

/* ---- launches --------------------------------------------------------- */

void funcd_launch_ref(funcd_launch *ln)
{
    atomic_fetch_add(&ln->refs, 1);
}

void funcd_launch_unref(funcd_launch *ln)
{
    if (!ln || atomic_fetch_sub(&ln->refs, 1) != 1)
        return;
    for (size_t i = 0; i < ln->n_binds; i++) {
        free((char *)ln->binds[i].source);
        free((char *)ln->binds[i].target);
    }
    free(ln->binds);
    funcd_strv_free(ln->argv);
    funcd_strv_free(ln->env);
    free(ln->name);
    free(ln->cwd);
    free(ln->rootfs);
    free(ln->exec_shim);
    free(ln->memory_field);
    if (ln->hooks.release)
        ln->hooks.release(ln->hooks.payload);
    free(ln);
}

int funcd_launch_new(funcd_launch **out, funcd_workers *ws, const funcd_launch_spec *spec,
                     const funcd_launch_hooks *hooks)
{
    *out = NULL;
    funcd_launch *ln = calloc(1, sizeof(*ln));
    if (!ln) {
        if (hooks->release)
            hooks->release(hooks->payload);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory preparing workers");
    }
    atomic_init(&ln->refs, 1);
    ln->ws = ws;
    ln->hooks = *hooks;
    ln->limits = spec->limits;
    ln->network = spec->network;
    ln->stop_grace_ms = spec->stop_grace_ms;
    ln->keep_probe_connection = spec->keep_probe_connection;
    ln->local_api = spec->local_api;
    if (spec->n_listen > FUNCD_LAUNCH_MAX_LISTEN) {
        funcd_launch_unref(ln);
        return funcd_error_set(FUNCD_EINVAL, "a worker can have at most %d sockets in its "
                               "network namespace", FUNCD_LAUNCH_MAX_LISTEN);
    }
    if (spec->n_listen)
        memcpy(ln->listen, spec->listen, spec->n_listen * sizeof(*ln->listen));
    ln->n_listen = spec->n_listen;
    ln->name = funcd_strdup(spec->name);
    ln->argv = funcd_strv_dup(spec->argv);
    ln->env = funcd_strv_dup(spec->env);
    ln->cwd = funcd_strdup(spec->cwd);
    ln->rootfs = funcd_strdup(spec->rootfs);
    ln->exec_shim = funcd_strdup(spec->exec_shim);
    ln->memory_field = funcd_strdup(spec->memory_field);
    ln->binds = calloc(spec->n_binds + 1, sizeof(*ln->binds));
    int ok = ln->name && ln->argv && ln->env && ln->binds && (!spec->cwd || ln->cwd) &&
             (!spec->rootfs || ln->rootfs) && (!spec->exec_shim || ln->exec_shim) &&
             (!spec->memory_field || ln->memory_field);
    for (size_t i = 0; ok && i < spec->n_binds; i++) {
        funcd_worker_bind *b = &ln->binds[ln->n_binds++];
        *b = spec->binds[i];
        b->source = funcd_strdup(spec->binds[i].source);
        b->target = funcd_strdup(spec->binds[i].target);
        ok = b->source && (!spec->binds[i].target || b->target);
    }
    if (!ok) {
        funcd_launch_unref(ln);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory preparing workers");
    }
    *out = ln;
    return 0;
}

/* ---- one worker ------------------------------------------------------- */

funcd_worker_ctx *funcd_worker_ctx_of(const funcd_pool_worker *pw)
{
    char *data = funcd_pool_worker_data(pw);
    return data ? (funcd_worker_ctx *)(void *)(data - offsetof(funcd_worker_ctx, data)) : NULL;
}

funcd_http_peer *funcd_worker_ctx_peer(const funcd_worker_ctx *w)
{
    return w->proc ? w->peer : NULL;
}

const funcd_worker_end *funcd_worker_ctx_end(const funcd_worker_ctx *w)
{
    return atomic_load(&w->ended) ? &w->end : NULL;
}

static void remove_dir(funcd_worker_ctx *w)
{
    static const char *const files[] = {"worker.sock", "ctl.sock", "funcd-exec", "api.sock"};
    if (!w->dir[0])
        return;
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char path[160];
        snprintf(path, sizeof(path), "%s/%s", w->dir, files[i]);
        unlink(path);
    }
    rmdir(w->dir);
    w->dir[0] = '\0';
}

/* ---- the readiness probe ---------------------------------------------- */

static void probe_stop(funcd_worker_ctx *w)
{
    if (w->probe_timer)
        event_free(w->probe_timer);
    w->probe_timer = NULL;
    funcd_http_cancel(w->probe);
    w->probe = NULL;
}

static void probe_again(funcd_worker_ctx *w)
{
    /* Every PROBE_FIRST_US while a fast worker would be getting ready (a
     * failed connect costs a few microseconds), then back off. */
    struct timeval tv = {0, w->probe_delay_us};
    if (++w->probe_attempts > PROBE_FAST_ATTEMPTS && w->probe_delay_us < PROBE_MAX_US)
        w->probe_delay_us *= 2;
    if (w->probe_delay_us > PROBE_MAX_US)
        w->probe_delay_us = PROBE_MAX_US;
    evtimer_add(w->probe_timer, &tv);
}

/*
 * The probe reads the whole answer before its connection closes: a worker
 * still writing its body to a connection closed under it gets EPIPE, and
 * one that leaves SIGPIPE at its default (most hand-written servers) dies
 * of it -- with the first real request already on its way to it
 * (docs/adr/0021-first-request.md).
 */
static void on_probe_done(funcd_http_call *c, funcd_http_outcome outcome,
                          funcd_http_response *resp, const char *error, void *arg)
{
    funcd_worker_ctx *w = arg;
    w->probe = NULL;
    int answered = outcome == FUNCD_HTTP_ANSWERED || outcome == FUNCD_HTTP_TOO_LARGE;
    if (!answered || (resp->status != 200 && resp->status != 404)) {
        probe_again(w); /* up but not ready yet */
        return;
    }
    event_free(w->probe_timer);
    w->probe_timer = NULL;
    w->ready = 1;
    if (!w->ln->keep_probe_connection)
        funcd_http_peer_close(w->peer); /* nothing else of ours talks to it */
    if (w->ln->hooks.ready)
        w->ln->hooks.ready(w, w->ln->hooks.payload);
    funcd_pool_worker_ready(w->pw);
}

static void on_probe_timer(evutil_socket_t fd, short what, void *arg)
{
    static const char keep[] = "GET /_/ready HTTP/1.1\r\nHost: worker\r\nContent-Length: 0\r\n\r\n";
    static const char closing[] = "GET /_/ready HTTP/1.1\r\nHost: worker\r\nConnection: close\r\n"
                                "Content-Length: 0\r\n\r\n";
    funcd_worker_ctx *w = arg;
    int k = w->ln->keep_probe_connection;
    w->probe = funcd_http_send(w->peer, k ? keep : closing, k ? sizeof(keep) - 1 : sizeof(closing) - 1,
                               NULL, 0, PROBE_MAX_BODY, on_probe_done, w);
    if (!w->probe)
        probe_again(w); /* not listening yet */
}

/* ---- the process ------------------------------------------------------ */

static void on_proc_output(funcd_worker *proc, funcd_worker_stream stream, const char *line,
                      size_t len, void *payload)
{
    funcd_worker_ctx *w = payload;
    if (stream == FUNCD_WORKER_STDERR)
        snprintf(w->last_stderr, sizeof(w->last_stderr), "%.*s", (int)len, line);
    if (w->ln->hooks.output)
        w->ln->hooks.output(w, stream, line, len, w->ln->hooks.payload);
}

/* The process is gone (or, with `proc` NULL, never started): forget it and
 * tell the pool. */
static void worker_gone(funcd_worker_ctx *w, const char *why)
{
    funcd_workers *ws = w->ln->ws;
    probe_stop(w);
    funcd_http_peer_close(w->peer); /* its idle connections lead nowhere now */
    if (w->proc) {
        funcd_port_runtime_release(ws->rt, w->proc);
        w->proc = NULL;
        live_unlink(w);
    }
    remove_dir(w);
    funcd_pool_worker_exited(w->pw, why);
}

static void on_proc_exit(funcd_worker *proc, int status, void *payload)
{
    funcd_worker_ctx *w = payload;
    funcd_launch *ln = w->ln;
    probe_stop(w);
    const char *reason = funcd_port_runtime_exit_reason(ln->ws->rt, proc);
    int oom = reason && strcmp(reason, "OOMKilled") == 0;
    funcd_worker_end *end = &w->end;
    snprintf(end->reason, sizeof(end->reason), "%s", oom ? "OOMKilled" : "");
    if (oom)
        snprintf(end->message, sizeof(end->message), "replica %s was OOMKilled: it reached its "
                 "memory limit%s%s%s", w->replica, ln->memory_field ? " (" : "",
                 ln->memory_field ? ln->memory_field : "", ln->memory_field ? ")" : "");
    else if (WIFEXITED(status))
        snprintf(end->message, sizeof(end->message), "replica %s exited with status %d",
                 w->replica, WEXITSTATUS(status));
    else
        snprintf(end->message, sizeof(end->message), "replica %s was killed by signal %d (SIG%s)",
                 w->replica, WTERMSIG(status),
                 sigabbrev_np(WTERMSIG(status)) ? sigabbrev_np(WTERMSIG(status)) : "?");
    atomic_store(&w->ended, 1);
    /* The pool's status names its last words too; callers get only `end`. */
    char why[600];
    snprintf(why, sizeof(why), "%s%s%s", end->message, !oom && w->last_stderr[0] ? ": " : "",
             oom ? "" : w->last_stderr);
    if (ln->hooks.exited)
        ln->hooks.exited(w, status, end, ln->hooks.payload);
    worker_gone(w, why);
}

funcd_worker_events funcd_worker_ctx_events(funcd_worker_ctx *w)
{
    return (funcd_worker_events){on_proc_output, on_proc_exit, w};
}

/* Starts the process, unless the owner hands one over. */
static int spawn(funcd_worker_ctx *w, const char *const *env)
{
    funcd_launch *ln = w->ln;
    funcd_runtime *rt = ln->ws->rt;
    if (ln->hooks.adopt && ln->hooks.adopt(w, env, &w->proc, ln->hooks.payload) == 0)
        return 0;
    w->proc = NULL;
    if (ln->exec_shim) {
        char to[160];
        snprintf(to, sizeof(to), "%s/funcd-exec", w->dir);
        if (funcd_link_or_copy(ln->exec_shim, to, 0755) < 0)
            return -1;
    }
    ln->binds[ln->n_binds] = (funcd_worker_bind){w->dir, ln->rootfs ? FUNCD_IMAGE_RUN_DIR : NULL,
                                                 1, 1};
    int fds[FUNCD_LAUNCH_MAX_LISTEN];
    funcd_worker_spec spec = {(const char *const *)ln->argv, env, ln->cwd, ln->rootfs,
                              ln->limits, ln->binds, ln->n_binds + 1, ln->network,
                              ln->listen, ln->n_listen, fds};
    funcd_worker_events ev = funcd_worker_ctx_events(w);
    if (funcd_port_runtime_start(rt, &spec, &ev, &w->proc) < 0)
        return -1;
    if (ln->n_listen && ln->hooks.listening)
        ln->hooks.listening(w, w->data, fds, ln->n_listen, ln->hooks.payload);
    else
        for (size_t i = 0; i < ln->n_listen; i++)
            close(fds[i]);
    return 0;
}

static int op_start(funcd_pool *p, funcd_pool_worker *pw, void *payload)
{
    funcd_launch *ln = payload;
    funcd_workers *ws = ln->ws;
    funcd_worker_ctx *w = calloc(1, sizeof(*w) + ln->hooks.data_size);
    if (!w)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory starting a worker of %s", ln->name);
    funcd_launch_ref(ln);
    w->ln = ln;
    w->pw = pw;
    funcd_pool_worker_set_data(pw, w->data); /* from here on, dispose frees it */
    snprintf(w->replica, sizeof(w->replica), "%s-%u", ln->name, funcd_pool_worker_replica(pw));
    snprintf(w->dir, sizeof(w->dir), "%s/w%u", ws->run_dir, ++ws->next_dir);
    if (strlen(w->dir) + sizeof("/worker.sock") > sizeof(w->sock)) {
        w->dir[0] = '\0';
        return funcd_error_set(FUNCD_EINVAL, "the state directory %s is too long for Unix "
                               "socket paths; choose a shorter one", ws->run_dir);
    }
    snprintf(w->sock, sizeof(w->sock), "%.*s/worker.sock", (int)(sizeof(w->sock) - 13), w->dir);
    if (mkdir(w->dir, 0700) != 0 && errno != EEXIST) {
        int err = errno;
        w->dir[0] = '\0';
        return funcd_error_set(FUNCD_EIO, "cannot create %s/w%u: %s", ws->run_dir,
                               ws->next_dir, strerror(err));
    }
    w->peer = funcd_http_peer_new(ws->loop, w->sock);
    w->probe_timer = evtimer_new(ws->loop, on_probe_timer, w);
    size_t n_env = 0;
    while (ln->env[n_env])
        n_env++;
    const char **env = calloc(n_env + 4, sizeof(char *));
    char listen[160], replica[128], api[180];
    if (!w->peer || !w->probe_timer || !env) {
        free(env);
        remove_dir(w);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory starting a worker of %s", ln->name);
    }
    snprintf(listen, sizeof(listen), "FUNCD_LISTEN=%s",
             ln->rootfs ? FUNCD_IMAGE_RUN_DIR "/worker.sock" : w->sock);
    snprintf(replica, sizeof(replica), "FUNCD_REPLICA=%s", w->replica);
    memcpy(env, ln->env, n_env * sizeof(char *));
    env[n_env] = listen;
    env[n_env + 1] = replica;
    if (ln->local_api) {
        snprintf(api, sizeof(api), "FUNCD_API=unix:%s/api.sock",
                 ln->rootfs ? FUNCD_IMAGE_RUN_DIR : w->dir);
        env[n_env + 2] = api;
    }
    if (ln->hooks.prepare)
        ln->hooks.prepare(w, w->data, ln->hooks.payload);
    w->prepared = 1;
    int rc = spawn(w, env);
    free(env);
    if (rc < 0) {
        remove_dir(w);
        return rc;
    }
    live_link(w);
    w->probe_delay_us = PROBE_FIRST_US;
    struct timeval tv = {0, PROBE_FIRST_US};
    evtimer_add(w->probe_timer, &tv);
    return 0;
}

static void op_stop(funcd_pool *p, funcd_pool_worker *pw, void *payload)
{
    funcd_worker_ctx *w = funcd_worker_ctx_of(pw);
    funcd_runtime *rt = w->ln->ws->rt;
    probe_stop(w);
    funcd_http_peer_close(w->peer); /* it drains: idle connections would only delay it */
    if (w->proc)
        funcd_port_runtime_stop(rt, w->proc, w->ln->stop_grace_ms);
}

static void op_dispose(funcd_pool_worker *pw, void *payload)
{
    funcd_worker_ctx *w = funcd_worker_ctx_of(pw);
    if (!w)
        return;
    funcd_launch *ln = w->ln;
    if (w->prepared && ln->hooks.dispose)
        ln->hooks.dispose(w, w->data, ln->hooks.payload);
    probe_stop(w);
    funcd_http_peer_free(w->peer);
    free(w);
    funcd_launch_unref(ln);
}

static void op_changed(funcd_pool *p, void *payload)
{
    funcd_launch *ln = payload;
    if (ln->hooks.changed)
        ln->hooks.changed(p, ln->hooks.payload);
}

funcd_pool_ops funcd_launch_pool_ops(funcd_launch *ln)
{
    return (funcd_pool_ops){op_start, op_stop, op_dispose, op_changed, ln, NULL};
}
