/*
 * The process runtime: workers are plain processes in their own process
 * group, supervised on the platform loop through pidfds (so funcd never
 * reaps children it did not start, which matters inside a host program).
 *
 * Stop: SIGTERM to the group, SIGKILL to the group after the grace period.
 * When the main process exits, whatever is left of its group is killed, so
 * a crashed worker leaves nothing behind. Workers are started by
 * funcd_spawn (lib/util/spawn.h): vfork, their own group, PR_SET_PDEATHSIG.
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
#include <unistd.h>

#include "funcd/sys/error.h"
#include "funcd/sys/runtime.h"
#include "util/spawn.h"

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
    struct funcd_worker *prev, *next; /* live workers */
};

typedef struct proc_runtime {
    funcd_runtime base;
    struct event_base *loop;
    funcd_worker live; /* list anchor */
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

static int rt_start(funcd_runtime *base, const funcd_worker_spec *spec,
                    const funcd_worker_events *events, funcd_worker **out)
{
    proc_runtime *rt = (proc_runtime *)base;
    *out = NULL;
    if (!rt->loop)
        return funcd_error_set(FUNCD_ESTATE, "the process runtime is not attached to a loop");
    if (!spec->argv || !spec->argv[0])
        return funcd_error_set(FUNCD_EINVAL, "a worker needs a program (argv[0])");
    char *prog = resolve_program(spec->argv[0]);
    if (!prog)
        return funcd_error_set(FUNCD_ENOTFOUND, "program \"%s\" not found on PATH", spec->argv[0]);
    if (access(prog, X_OK) != 0) {
        int err = errno;
        free(prog);
        return funcd_error_set(FUNCD_ENOTFOUND, "cannot execute %s: %s", spec->argv[0],
                               strerror(err));
    }
    int outp[2] = {-1, -1}, errp[2] = {-1, -1};
    if (pipe2(outp, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0) {
        int err = errno;
        for (int i = 0; i < 2; i++) {
            if (outp[i] >= 0)
                close(outp[i]);
            if (errp[i] >= 0)
                close(errp[i]);
        }
        free(prog);
        return funcd_error_set(FUNCD_EIO, "cannot create pipes for a worker: %s", strerror(err));
    }
    static char *const empty_env[] = {NULL};
    funcd_spawn_spec sp = {prog, (char *const *)spec->argv,
                           spec->env ? (char *const *)spec->env : empty_env, spec->cwd,
                           {-1, outp[1], errp[1]}};
    pid_t pid = funcd_spawn(&sp);
    int fork_err = errno;
    free(prog);
    close(outp[1]);
    close(errp[1]);
    if (pid < 0) {
        close(outp[0]);
        close(errp[0]);
        return funcd_error_set(FUNCD_EIO, "cannot start a worker: %s", strerror(fork_err));
    }

    funcd_worker *w = calloc(1, sizeof(*w));
    int pidfd = pidfd_open_compat(pid);
    if (!w || pidfd < 0) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(outp[0]);
        close(errp[0]);
        if (pidfd >= 0)
            close(pidfd);
        free(w);
        return funcd_error_set(FUNCD_EIO, "cannot supervise a worker (pidfd_open: %s)",
                               strerror(errno));
    }
    w->rt = rt;
    w->pid = pid;
    w->pidfd = pidfd;
    w->events = *events;
    w->out[0].fd = outp[0];
    w->out[1].fd = errp[0];
    for (int i = 0; i < 2; i++) {
        fcntl(w->out[i].fd, F_SETFL, O_NONBLOCK);
        w->out[i].ev = event_new(rt->loop, w->out[i].fd, EV_READ | EV_PERSIST, on_output, w);
        event_add(w->out[i].ev, NULL);
    }
    w->exit_ev = event_new(rt->loop, pidfd, EV_READ | EV_PERSIST, on_exit_ready, w);
    w->kill_timer = evtimer_new(rt->loop, on_kill_timer, w);
    event_add(w->exit_ev, NULL);
    link_worker(rt, w);
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
    free(w);
}

static void rt_release(funcd_runtime *base, funcd_worker *w)
{
    if (!w)
        return;
    if (!w->exited) { /* released while running: kill it, reap it, forget it */
        kill(-w->pid, SIGKILL);
        waitpid(w->pid, NULL, 0);
        unlink_worker(w);
    }
    free_worker(w);
}

static int rt_attach(funcd_runtime *base, struct event_base *loop)
{
    ((proc_runtime *)base)->loop = loop;
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
        waitpid(w->pid, NULL, 0);
        unlink_worker(w);
        free_worker(w);
    }
    free(rt);
}

int funcd_runtime_process_new(funcd_runtime **out)
{
    return funcd_runtime_process_new_with(out, NULL);
}

int funcd_runtime_process_new_with(funcd_runtime **out, const funcd_process_options *opts)
{
    (void)opts;
    *out = NULL;
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
    rt->live.next = rt->live.prev = &rt->live;
    *out = &rt->base;
    return 0;
}
