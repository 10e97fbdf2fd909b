/*
 * The process runtime: workers are plain processes in their own process
 * group, supervised on the platform loop through pidfds (so funcd never
 * reaps children it did not start, which matters inside a host program).
 *
 * Stop: SIGTERM to the group, SIGKILL to the group after the grace period.
 * When the main process exits, whatever is left of its group is killed, so
 * a crashed worker leaves nothing behind. Plain workers are started by
 * funcd_spawn (lib/util/spawn.h): vfork, their own group, PR_SET_PDEATHSIG.
 * Sandboxed ones (the default) by funcd_sandbox_spawn (sandbox.h): the pid
 * we supervise is then the sandbox's init, and SIGKILL to it ends the
 * whole pid namespace. Each sandboxed worker has its own cgroups
 * (cgroup.h), removed when it is reaped. After a sandboxed start the loop
 * refills the sandbox's blank inits (ADR 0013, point 9), so the next start
 * finds its namespaces made.
 */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "funcd/sys/error.h"
#include "funcd/sys/runtime.h"
#include "runtime/cgroup.h"
#include "runtime/pidfile.h"
#include "runtime/sandbox.h"
#include "util/spawn.h"

/* A sandboxed worker without spec.resources.pids still cannot fork-bomb
 * the host. */
#define DEFAULT_SANDBOX_PIDS 1024
/* After a sandboxed start blanks are made again, REFILL_START_FACTOR times
 * as long after it as it took, within these bounds (ADR 0030). */
#define REFILL_DELAY_US 3000
#define REFILL_DELAY_MAX_US 100000
#define REFILL_START_FACTOR 4

#define MAX_LINE 16384

typedef struct out_stream {
    int fd;
    struct event *ev;
    char buf[MAX_LINE];
    size_t len;
} out_stream;

struct funcd_worker {
    struct proc_runtime *rt;
    pid_t pid;
    int pidfd;
    struct event *exit_ev;
    struct event *kill_timer;
    out_stream out[2]; /* stdout, stderr */
    funcd_worker_events events;
    int exited;
    int status_fd; /* sandboxed: init reports the worker's wait status here */
    unsigned cg_id;  /* sandboxed: its cgroups' id, 0: none */
    const char *exit_reason;
    struct funcd_worker *prev, *next; /* live workers */
};

/* A worker's cgroups, waiting for the reaper to remove them, and then
 * its pidfile (the record a crashed run's successor ends it by). */
typedef struct gone_cgroup {
    unsigned id;
    pid_t pid;
    struct gone_cgroup *next;
} gone_cgroup;

typedef struct proc_runtime {
    funcd_runtime base;
    struct event_base *loop;
    funcd_worker live; /* list anchor */
    funcd_sandbox *sandbox; /* NULL: plain processes */
    struct event *refill_ev; /* tops up the sandbox's blank inits after a start */
    funcd_cgroups cgroups;
    int allow_host_network;
    char *pid_dir;
    /* The reaper: a thread that removes ended workers' cgroups, off the
     * loop (see remove_cgroups_later). Started with the first. */
    pthread_mutex_t reap_lock;
    pthread_cond_t reap_cond;
    pthread_t reaper;
    int reaper_started, reaper_stop;
    gone_cgroup *gone, **gone_tail;
} proc_runtime;

static void link_worker(proc_runtime *rt, funcd_worker *w)
{
    w->next = rt->live.next;
    w->prev = &rt->live;
    w->next->prev = w;
    rt->live.next = w;
}

static void unlink_worker(funcd_worker *w)
{
    if (!w->next)
        return;
    w->prev->next = w->next;
    w->next->prev = w->prev;
    w->next = w->prev = NULL;
}

static void emit_line(funcd_worker *w, int which, const char *line, size_t len)
{
    if (len && line[len - 1] == '\r')
        len--;
    if (w->events.on_output)
        w->events.on_output(w, which == 0 ? FUNCD_WORKER_STDOUT : FUNCD_WORKER_STDERR, line, len,
                            w->events.payload);
}

/* Reads what is available; returns 0 at EOF or error (stream closed). */
static int drain_stream(funcd_worker *w, int which)
{
    out_stream *s = &w->out[which];
    for (;;) {
        ssize_t n = read(s->fd, s->buf + s->len, sizeof(s->buf) - s->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 1;
        if (n <= 0) {
            if (s->len)
                emit_line(w, which, s->buf, s->len);
            s->len = 0;
            return 0;
        }
        s->len += (size_t)n;
        char *start = s->buf, *nl;
        while ((nl = memchr(start, '\n', s->len - (size_t)(start - s->buf)))) {
            emit_line(w, which, start, (size_t)(nl - start));
            start = nl + 1;
        }
        size_t rest = s->len - (size_t)(start - s->buf);
        if (rest == sizeof(s->buf)) { /* an over-long line: pass it on in pieces */
            emit_line(w, which, s->buf, rest);
            rest = 0;
        }
        memmove(s->buf, start, rest);
        s->len = rest;
    }
}

static void close_stream(out_stream *s)
{
    if (s->ev)
        event_free(s->ev);
    s->ev = NULL;
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
}

static void on_output(evutil_socket_t fd, short what, void *arg)
{
    funcd_worker *w = arg;
    int which = fd == w->out[0].fd ? 0 : 1;
    if (!drain_stream(w, which))
        close_stream(&w->out[which]);
}

static void *reaper_main(void *arg)
{
    proc_runtime *rt = arg;
    pthread_mutex_lock(&rt->reap_lock);
    for (;;) {
        while (!rt->gone && !rt->reaper_stop)
            pthread_cond_wait(&rt->reap_cond, &rt->reap_lock);
        gone_cgroup *g = rt->gone;
        if (!g)
            break; /* told to stop, and nothing is left */
        if (!(rt->gone = g->next))
            rt->gone_tail = &rt->gone;
        pthread_mutex_unlock(&rt->reap_lock);
        funcd_cgroup_remove(&rt->cgroups, g->id);
        if (rt->pid_dir && g->pid > 0)
            funcd_pidfile_remove(rt->pid_dir, g->pid);
        free(g);
        pthread_mutex_lock(&rt->reap_lock);
    }
    pthread_mutex_unlock(&rt->reap_lock);
    return NULL;
}

/* Removes worker `id`'s cgroups on the reaper thread. Removing one is
 * killing what is left in it and an rmdir that waits for the tasks to
 * leave: tens to hundreds of milliseconds on a loaded machine, retried for
 * up to a second (funcd_cgroup_kill_dir), which on the loop stalled every
 * request and start. Ids are never reused, so a new worker cannot meet a
 * directory still going. The pidfile goes after them: a run that crashes
 * meanwhile leaves its successor the record of what to end. Done here, at
 * once, when the reaper cannot be had. */
static void remove_cgroups_later(proc_runtime *rt, unsigned id, pid_t pid)
{
    gone_cgroup *g = malloc(sizeof(*g));
    pthread_mutex_lock(&rt->reap_lock);
    if (g && !rt->reaper_started && !rt->reaper_stop &&
        pthread_create(&rt->reaper, NULL, reaper_main, rt) == 0)
        rt->reaper_started = 1;
    if (g && rt->reaper_started && !rt->reaper_stop) {
        g->id = id;
        g->pid = pid;
        g->next = NULL;
        *rt->gone_tail = g;
        rt->gone_tail = &g->next;
        g = NULL;
        pthread_cond_signal(&rt->reap_cond);
        id = 0;
    }
    pthread_mutex_unlock(&rt->reap_lock);
    free(g);
    if (id) {
        funcd_cgroup_remove(&rt->cgroups, id);
        if (rt->pid_dir && pid > 0)
            funcd_pidfile_remove(rt->pid_dir, pid);
    }
}

/* Waits for the reaper to remove every cgroup given to it, and ends it. */
static void stop_reaper(proc_runtime *rt)
{
    pthread_mutex_lock(&rt->reap_lock);
    rt->reaper_stop = 1;
    pthread_cond_signal(&rt->reap_cond);
    int started = rt->reaper_started;
    pthread_mutex_unlock(&rt->reap_lock);
    if (started)
        pthread_join(rt->reaper, NULL);
}

/* After the main process was reaped: the worker's own status (init
 * passes it on), why it ended, and nothing left behind (its cgroups go on
 * the reaper thread, soon after). */
static void finish_worker(funcd_worker *w, int *status)
{
    proc_runtime *rt = w->rt;
    if (w->status_fd >= 0) {
        int st;
        if (read(w->status_fd, &st, sizeof(st)) == (ssize_t)sizeof(st))
            *status = st;
        close(w->status_fd);
        w->status_fd = -1;
    }
    if (w->cg_id) {
        if (funcd_cgroup_oom_killed(&rt->cgroups, w->cg_id))
            w->exit_reason = "OOMKilled";
        remove_cgroups_later(rt, w->cg_id, w->pid);
        w->cg_id = 0;
    } else if (rt->pid_dir && w->pid > 0) {
        funcd_pidfile_remove(rt->pid_dir, w->pid);
    }
}

static void on_exit_ready(evutil_socket_t fd, short what, void *arg)
{
    funcd_worker *w = arg;
    int status = 0;
    pid_t r;
    do
        r = waitpid(w->pid, &status, WNOHANG);
    while (r < 0 && errno == EINTR);
    if (r == 0)
        return; /* not yet: pidfd readiness can precede waitability briefly */
    kill(-w->pid, SIGKILL); /* whatever the worker left in its group */
    finish_worker(w, &status);
    for (int i = 0; i < 2; i++) {
        if (w->out[i].fd >= 0)
            drain_stream(w, i);
        close_stream(&w->out[i]);
    }
    event_free(w->exit_ev);
    w->exit_ev = NULL;
    close(w->pidfd);
    w->pidfd = -1;
    if (w->kill_timer)
        evtimer_del(w->kill_timer);
    w->exited = 1;
    unlink_worker(w);
    if (w->events.on_exit)
        w->events.on_exit(w, status, w->events.payload);
}

static void on_kill_timer(evutil_socket_t fd, short what, void *arg)
{
    funcd_worker *w = arg;
    if (!w->exited)
        kill(-w->pid, SIGKILL);
}

/* Resolves argv[0] against PATH in the parent (the child may only make
 * async-signal-safe calls between fork and exec). */
static char *resolve_program(const char *prog)
{
    if (strchr(prog, '/'))
        return strdup(prog);
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/local/bin:/usr/bin:/bin";
    char buf[4096];
    for (const char *p = path; *p;) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, p, prog);
        if (access(buf, X_OK) == 0)
            return strdup(buf);
        p += n + (colon ? 1 : 0);
    }
    return NULL;
}

static int pidfd_open_compat(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* The program as the worker will see it, checked on the host. */
static char *find_program(const funcd_worker_spec *spec)
{
    if (!spec->rootfs)
        return resolve_program(spec->argv[0]);
    if (spec->argv[0][0] != '/')
        return NULL; /* an image's PATH is the image's business: name it fully */
    char host[4096];
    snprintf(host, sizeof(host), "%s%s", spec->rootfs, spec->argv[0]);
    for (size_t i = 0; i < spec->n_binds; i++) { /* a program under a bind (the exec shim) */
        const char *t = spec->binds[i].target ? spec->binds[i].target : spec->binds[i].source;
        size_t n = strlen(t);
        if (strncmp(spec->argv[0], t, n) == 0 && spec->argv[0][n] == '/')
            snprintf(host, sizeof(host), "%s%s", spec->binds[i].source, spec->argv[0] + n);
    }
    return access(host, X_OK) == 0 ? strdup(spec->argv[0]) : NULL;
}

static pid_t start_plain(const funcd_worker_spec *spec, const char *prog, int out_w, int err_w)
{
    static char *const empty_env[] = {NULL};
    funcd_spawn_spec sp = {prog, (char *const *)spec->argv,
                           spec->env ? (char *const *)spec->env : empty_env, spec->cwd,
                           {-1, out_w, err_w}};
    pid_t pid = funcd_spawn(&sp);
    if (pid < 0)
        funcd_error_set(FUNCD_EIO, "cannot start a worker: %s", strerror(errno));
    return pid;
}

static pid_t start_sandboxed(proc_runtime *rt, const funcd_worker_spec *spec, const char *prog,
                             int out_w, int err_w, funcd_worker *w)
{
    if (spec->network == FUNCD_WORKER_NETWORK_HOST && !rt->allow_host_network) {
        funcd_error_set(FUNCD_EINVAL, "spec.network: host needs the operator's permission "
                        "(funcd_process_options.allow_host_network); use network: none");
        return -1;
    }
    if (funcd_cgroup_check(&rt->cgroups, &spec->limits) < 0)
        return -1;
    static char *const empty_env[] = {NULL};
    funcd_sandbox_job job = {prog, (char *const *)spec->argv,
                             spec->env ? (char *const *)spec->env : empty_env, spec->cwd,
                             spec->rootfs, spec->binds, spec->n_binds,
                             spec->network == FUNCD_WORKER_NETWORK_HOST, {-1, out_w, err_w},
                             &spec->limits, spec->listen, spec->n_listen, spec->listen_fds};
    /* Its cgroups come with it: a blank init's, where it waited (limits
     * written now), or made for it (docs/adr/0030). */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid = funcd_sandbox_spawn(rt->sandbox, &job, &w->status_fd, &w->cg_id);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rt->refill_ev && !evtimer_pending(rt->refill_ev, NULL)) {
        /* The filler thread makes blanks off the loop, but a blank's making
         * (its namespaces and mounts, in the kernel) still takes CPU the
         * worker just started needs to get ready: let it go first. That
         * takes longer the longer its start took (a loaded machine): wait a
         * multiple of it. */
        long took_us = (long)(t1.tv_sec - t0.tv_sec) * 1000000L +
                       (long)(t1.tv_nsec - t0.tv_nsec) / 1000;
        long delay = REFILL_START_FACTOR * took_us;
        struct timeval later = {0, delay < REFILL_DELAY_US       ? REFILL_DELAY_US
                                   : delay > REFILL_DELAY_MAX_US ? REFILL_DELAY_MAX_US
                                                                 : delay};
        evtimer_add(rt->refill_ev, &later);
    }
    return pid;
}

static void write_pidfile(proc_runtime *rt, funcd_worker *w)
{
    char cg[FUNCD_CG_COUNT][512];
    const char *list[FUNCD_CG_COUNT];
    size_t n = w->cg_id ? funcd_cgroup_dirs(&rt->cgroups, w->cg_id, cg) : 0;
    for (size_t i = 0; i < n; i++)
        list[i] = cg[i];
    funcd_pidfile_write(rt->pid_dir, w->pid, list, n);
}

static void watch_worker(proc_runtime *rt, funcd_worker *w, int out_r, int err_r)
{
    w->out[0].fd = out_r;
    w->out[1].fd = err_r;
    for (int i = 0; i < 2; i++) {
        fcntl(w->out[i].fd, F_SETFL, O_NONBLOCK);
        w->out[i].ev = event_new(rt->loop, w->out[i].fd, EV_READ | EV_PERSIST, on_output, w);
        event_add(w->out[i].ev, NULL);
    }
    w->exit_ev = event_new(rt->loop, w->pidfd, EV_READ | EV_PERSIST, on_exit_ready, w);
    w->kill_timer = evtimer_new(rt->loop, on_kill_timer, w);
    event_add(w->exit_ev, NULL);
    link_worker(rt, w);
    if (rt->pid_dir)
        write_pidfile(rt, w);
}

static int rt_start(funcd_runtime *base, const funcd_worker_spec *spec,
                    const funcd_worker_events *events, funcd_worker **out)
{
    proc_runtime *rt = (proc_runtime *)base;
    *out = NULL;
    if (!rt->loop)
        return funcd_error_set(FUNCD_ESTATE, "the process runtime is not attached to a loop");
    if (!spec->argv || !spec->argv[0])
        return funcd_error_set(FUNCD_EINVAL, "a worker needs a program (argv[0])");
    if (spec->n_listen && !rt->sandbox)
        return funcd_error_set(FUNCD_ENOTSUP, "sockets in a worker's network namespace need the "
                               "sandbox; start funcd without --no-sandbox");
    if (spec->rootfs && !rt->sandbox) /* chroot alone would contain nothing: no half measure */
        return funcd_error_set(FUNCD_ENOTSUP, "image functions run in their own root file system, "
                               "which needs the sandbox; start funcd without --no-sandbox");
    char *prog = rt->sandbox ? find_program(spec) : resolve_program(spec->argv[0]);
    if (!prog)
        return funcd_error_set(FUNCD_ENOTFOUND, "program \"%s\" not found%s", spec->argv[0],
                               spec->rootfs ? " in the root filesystem" : " on PATH");
    if (!spec->rootfs && access(prog, X_OK) != 0) {
        int err = errno;
        free(prog);
        return funcd_error_set(FUNCD_ENOTFOUND, "cannot execute %s: %s", spec->argv[0],
                               strerror(err));
    }
    funcd_worker *w = calloc(1, sizeof(*w));
    int outp[2] = {-1, -1}, errp[2] = {-1, -1};
    if (!w || pipe2(outp, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0) {
        int err = w ? errno : ENOMEM;
        for (int i = 0; i < 2; i++) {
            if (outp[i] >= 0)
                close(outp[i]);
            if (errp[i] >= 0)
                close(errp[i]);
        }
        free(prog);
        free(w);
        return funcd_error_set(FUNCD_EIO, "cannot create pipes for a worker: %s", strerror(err));
    }
    w->rt = rt;
    w->status_fd = -1;
    w->pidfd = -1;
    w->events = *events;
    pid_t pid = rt->sandbox ? start_sandboxed(rt, spec, prog, outp[1], errp[1], w)
                            : start_plain(spec, prog, outp[1], errp[1]);
    free(prog);
    close(outp[1]);
    close(errp[1]);
    int pidfd = pid < 0 ? -1 : pidfd_open_compat(pid);
    if (pid < 0 || pidfd < 0) {
        int rc = pid < 0 ? -1 : funcd_error_set(FUNCD_EIO, "cannot supervise a worker "
                                                "(pidfd_open: %s)", strerror(errno));
        if (pid > 0) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            for (size_t i = 0; i < spec->n_listen; i++)
                close(spec->listen_fds[i]);
        }
        int st = 0;
        w->pid = pid;
        finish_worker(w, &st);
        close(outp[0]);
        close(errp[0]);
        free(w);
        return rc < 0 && funcd_error_last()->code ? funcd_error_last()->code : FUNCD_EIO;
    }
    w->pid = pid;
    w->pidfd = pidfd;
    watch_worker(rt, w, outp[0], errp[0]);
    *out = w;
    return 0;
}

static int rt_stop(funcd_runtime *base, funcd_worker *w, unsigned grace_ms)
{
    if (w->exited)
        return 0;
    kill(-w->pid, SIGTERM);
    if (grace_ms == 0) {
        kill(-w->pid, SIGKILL);
        return 0;
    }
    struct timeval tv = {grace_ms / 1000, (grace_ms % 1000) * 1000};
    evtimer_add(w->kill_timer, &tv);
    return 0;
}

static int rt_pid(funcd_runtime *base, funcd_worker *w)
{
    return (int)w->pid;
}

static void free_worker(funcd_worker *w)
{
    for (int i = 0; i < 2; i++)
        close_stream(&w->out[i]);
    if (w->exit_ev)
        event_free(w->exit_ev);
    if (w->kill_timer)
        event_free(w->kill_timer);
    if (w->pidfd >= 0)
        close(w->pidfd);
    if (w->status_fd >= 0)
        close(w->status_fd);
    free(w);
}

/* Kills a worker that still runs, reaps it and cleans up after it. */
static void kill_and_reap(funcd_worker *w)
{
    kill(-w->pid, SIGKILL);
    kill(w->pid, SIGKILL);
    int status = 0;
    while (waitpid(w->pid, &status, 0) < 0 && errno == EINTR)
        ;
    finish_worker(w, &status);
    unlink_worker(w);
}

static void rt_release(funcd_runtime *base, funcd_worker *w)
{
    if (!w)
        return;
    if (!w->exited) /* released while running: kill it, reap it, forget it */
        kill_and_reap(w);
    free_worker(w);
}

static const char *rt_exit_reason(funcd_runtime *base, funcd_worker *w)
{
    return w->exit_reason;
}

static int rt_specialize(funcd_runtime *base, funcd_worker *w, const funcd_worker_bind *binds,
                         size_t n_binds, const funcd_worker_limits *limits)
{
    proc_runtime *rt = (proc_runtime *)base;
    if (w->exited)
        return funcd_error_set(FUNCD_ESTATE, "the worker has exited");
    if (!rt->sandbox) { /* it sees the host already; limits need the sandbox's cgroups */
        for (size_t i = 0; i < n_binds; i++)
            if (binds[i].target && strcmp(binds[i].target, binds[i].source) != 0)
                return funcd_error_set(FUNCD_ENOTSUP, "a plain process sees host paths as they "
                                       "are");
        return 0;
    }
    if (w->cg_id && funcd_cgroup_set_limits(&rt->cgroups, w->cg_id, limits) < 0)
        return -1;
    return funcd_sandbox_expose(rt->sandbox, w->pid, binds, n_binds) < 0 ? -1 : 0;
}

static void on_refill(evutil_socket_t fd, short what, void *arg)
{
    funcd_sandbox_refill(((proc_runtime *)arg)->sandbox);
}

static int rt_attach(funcd_runtime *base, struct event_base *loop)
{
    proc_runtime *rt = (proc_runtime *)base;
    rt->loop = loop;
    if (rt->refill_ev)
        event_free(rt->refill_ev);
    rt->refill_ev = NULL;
    if (rt->sandbox && !(rt->refill_ev = evtimer_new(loop, on_refill, rt)))
        return funcd_error_set(FUNCD_ENOMEM, "out of memory attaching the process runtime");
    if (rt->refill_ev) { /* the first start finds blanks ready too */
        struct timeval now = {0, 0};
        evtimer_add(rt->refill_ev, &now);
    }
    return 0;
}

/* Kills and reaps every live worker; their handles are freed, and their
 * owners are told nothing more (the platform is going away). */
static void rt_free(funcd_runtime *base)
{
    proc_runtime *rt = (proc_runtime *)base;
    for (funcd_worker *w = rt->live.next; w != &rt->live; w = w->next)
        kill(-w->pid, SIGKILL);
    while (rt->live.next != &rt->live) {
        funcd_worker *w = rt->live.next;
        kill_and_reap(w);
        free_worker(w);
    }
    stop_reaper(rt); /* every worker's cgroups are gone once it returns */
    pthread_cond_destroy(&rt->reap_cond);
    pthread_mutex_destroy(&rt->reap_lock);
    if (rt->refill_ev)
        event_free(rt->refill_ev);
    funcd_sandbox_free(rt->sandbox); /* its blanks' cgroups go with them */
    funcd_cgroups_fini(&rt->cgroups);
    free(rt->pid_dir);
    free(rt);
}

int funcd_runtime_process_new(funcd_runtime **out)
{
    return funcd_runtime_process_new_with(out, NULL);
}

int funcd_process_options_init(funcd_process_options *opts, unsigned version)
{
    if (!opts)
        return funcd_error_set(FUNCD_EINVAL, "funcd_process_options_init: opts is NULL");
    if (version < 1 || version > FUNCD_PROCESS_OPTIONS_VERSION)
        return funcd_error_set(FUNCD_EVERSION, "funcd_process_options version %u: this funcd "
                               "knows versions 1 to %d", version, FUNCD_PROCESS_OPTIONS_VERSION);
    *opts = (funcd_process_options)FUNCD_PROCESS_OPTIONS_INIT;
    opts->version = version;
    return 0;
}

int funcd_runtime_process_new_with(funcd_runtime **out, const funcd_process_options *opts)
{
    *out = NULL;
    /* Fields appended after version 1 are read only when opts->version has them. */
    if (opts && (opts->version < 1 || opts->version > FUNCD_PROCESS_OPTIONS_VERSION))
        return funcd_error_set(FUNCD_EVERSION, "funcd_process_options has version %u; this "
                               "funcd knows versions 1 to %d (start from "
                               "FUNCD_PROCESS_OPTIONS_INIT)", opts->version,
                               FUNCD_PROCESS_OPTIONS_VERSION);
    if (opts && opts->instance_id && !funcd_cgroup_instance_id_ok(opts->instance_id))
        return funcd_error_set(FUNCD_EINVAL, "funcd_process_options.instance_id \"%.40s\" must "
                               "be 1 to 32 lowercase letters and digits, a letter first",
                               opts->instance_id);
    proc_runtime *rt = calloc(1, sizeof(*rt));
    if (!rt)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the process runtime");
    rt->base = (funcd_runtime)FUNCD_RUNTIME_INIT;
    rt->base.name = "process";
    rt->base.attach = rt_attach;
    rt->base.start = rt_start;
    rt->base.stop = rt_stop;
    rt->base.pid = rt_pid;
    rt->base.release = rt_release;
    rt->base.free = rt_free;
    rt->base.exit_reason = rt_exit_reason;
    rt->base.specialize = rt_specialize;
    rt->live.next = rt->live.prev = &rt->live;
    if (opts && opts->pid_dir) {
        /* What a crashed run left behind goes before anything new starts. */
        funcd_pidfile_end_stale(opts->pid_dir);
        if (!(rt->pid_dir = strdup(opts->pid_dir))) {
            free(rt);
            return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the process runtime");
        }
    }
    int sandboxed = !opts || opts->sandbox >= 0;
    if (sandboxed) {
        int rc = funcd_sandbox_new(&rt->sandbox, opts);
        if (rc < 0) {
            free(rt->pid_dir);
            free(rt);
            return rc;
        }
        rt->allow_host_network = opts && opts->allow_host_network;
        funcd_cgroups_init(&rt->cgroups, opts ? opts->instance_id : NULL);
        funcd_sandbox_use_cgroups(rt->sandbox, &rt->cgroups, DEFAULT_SANDBOX_PIDS);
    }
    pthread_mutex_init(&rt->reap_lock, NULL);
    pthread_cond_init(&rt->reap_cond, NULL);
    rt->gone_tail = &rt->gone;
    *out = &rt->base;
    return 0;
}
