/* A short-lived child with pipes on all three standard streams, driven by
 * libevent (see child.h). */
#include "fnrunner/child.h"
#include "util/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "funcd/sys/error.h"
#include "util/misc.h"


typedef struct stream {
    int fd;
    struct event *ev;
} stream;

struct funcd_child {
    pid_t pid;
    int pidfd;
    stream in, out, err;
    struct event *exit_ev, *timer;
    const char *input;
    size_t input_len, input_off;
    size_t max_out, max_err;
    funcd_buf out_buf, err_buf;
    funcd_child_end end;
    funcd_child_done_fn done;
    void *payload;
};

static void close_stream(stream *s)
{
    if (s->ev)
        event_free(s->ev);
    if (s->fd >= 0)
        close(s->fd);
    s->ev = NULL;
    s->fd = -1;
}

static void kill_group(funcd_child *c)
{
    if (c->pid <= 0)
        return; /* reaped: the id may belong to someone else now (and -1 means everyone) */
    kill(-c->pid, SIGKILL);
    kill(c->pid, SIGKILL); /* in case it left its group */
}

static void stop_with(funcd_child *c, funcd_child_end end)
{
    if (c->end == FUNCD_CHILD_EXITED)
        c->end = end;
    kill_group(c);
}

/* Reads what is there now; 0 at EOF or on error. */
static int drain(funcd_child *c, stream *s, funcd_buf *b, size_t max)
{
    char chunk[65536];
    for (;;) {
        ssize_t n = read(s->fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 1;
        if (n <= 0)
            return 0;
        size_t room = b->len < max ? max - b->len : 0;
        if ((size_t)n > room && s == &c->out) {
            stop_with(c, FUNCD_CHILD_TOO_BIG);
            return 0;
        }
        if (funcd_buf_append(b, chunk, (size_t)n < room ? (size_t)n : room) < 0)
            return 0;
    }
}

static void on_output(evutil_socket_t fd, short what, void *arg)
{
    funcd_child *c = arg;
    stream *s = fd == c->out.fd ? &c->out : &c->err;
    if (!drain(c, s, s == &c->out ? &c->out_buf : &c->err_buf,
               s == &c->out ? c->max_out : c->max_err))
        close_stream(s);
}

static void on_input(evutil_socket_t fd, short what, void *arg)
{
    funcd_child *c = arg;
    while (c->input_off < c->input_len) {
        ssize_t n = write(fd, c->input + c->input_off, c->input_len - c->input_off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n < 0)
            break; /* EPIPE: the child does not want the rest */
        c->input_off += (size_t)n;
    }
    close_stream(&c->in); /* EOF tells the function its input is complete */
}

static void on_exit_ready(evutil_socket_t fd, short what, void *arg)
{
    funcd_child *c = arg;
    int status = 0;
    pid_t r;
    /* The child is dead but not reaped, so its group id is still ours:
     * end whatever it left behind. */
    kill(-c->pid, SIGKILL);
    do
        r = waitpid(c->pid, &status, WNOHANG);
    while (r < 0 && errno == EINTR);
    if (r == 0)
        return; /* a pidfd can be readable a moment before the child is waitable */
    if (r < 0)
        status = -1; /* someone else reaped it */
    c->pid = -1;
    if (c->out.fd >= 0)
        drain(c, &c->out, &c->out_buf, c->max_out);
    if (c->err.fd >= 0)
        drain(c, &c->err, &c->err_buf, c->max_err);
    close_stream(&c->in);
    close_stream(&c->out);
    close_stream(&c->err);
    event_del(c->exit_ev);
    evtimer_del(c->timer);
    c->done(c, c->end, status, &c->out_buf, &c->err_buf, c->payload);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    stop_with(arg, FUNCD_CHILD_TIMEOUT);
}

/* Between fork and exec: async-signal-safe calls only. */
static void close_pipes(int pipes[3][2])
{
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++)
            if (pipes[i][j] >= 0)
                close(pipes[i][j]);
}

static int spawn(funcd_child *c, const funcd_child_spec *spec)
{
    int pipes[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};
    for (int i = 0; i < 3; i++) {
        if (pipe2(pipes[i], O_CLOEXEC) < 0) {
            int err = errno;
            close_pipes(pipes);
            return funcd_error_set(FUNCD_EIO, "cannot create pipes for %s: %s", spec->path,
                                   strerror(err));
        }
    }
    const char *const default_argv[] = {spec->path, NULL};
    const char *const no_env[] = {NULL};
    funcd_spawn_spec sp = {spec->path,
                           (char *const *)(spec->argv ? spec->argv : default_argv),
                           (char *const *)(spec->env ? spec->env : no_env), NULL,
                           {pipes[0][0], pipes[1][1], pipes[2][1]}};
    pid_t pid = funcd_spawn(&sp);
    int fork_err = errno;
    if (pid < 0) {
        close_pipes(pipes);
        return funcd_error_set(FUNCD_EIO, "cannot start %s: %s", spec->path, strerror(fork_err));
    }
    c->pid = pid;
    c->in.fd = pipes[0][1];
    c->out.fd = pipes[1][0];
    c->err.fd = pipes[2][0];
    pipes[0][1] = pipes[1][0] = pipes[2][0] = -1;
    close_pipes(pipes);
    c->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (c->pidfd < 0)
        return funcd_error_set(FUNCD_EIO, "cannot supervise %s (pidfd_open: %s)", spec->path,
                               strerror(errno));
    return 0;
}

static int watch(funcd_child *c, struct event_base *loop, int64_t deadline_ms)
{
    stream *streams[3] = {&c->in, &c->out, &c->err};
    for (int i = 0; i < 3; i++) {
        fcntl(streams[i]->fd, F_SETFL, O_NONBLOCK);
        short what = i == 0 ? EV_WRITE | EV_PERSIST : EV_READ | EV_PERSIST;
        streams[i]->ev = event_new(loop, streams[i]->fd, what, i ? on_output : on_input, c);
        if (!streams[i]->ev)
            return funcd_error_set(FUNCD_ENOMEM, "out of memory watching a child");
    }
    c->exit_ev = event_new(loop, c->pidfd, EV_READ | EV_PERSIST, on_exit_ready, c);
    c->timer = evtimer_new(loop, on_deadline, c);
    if (!c->exit_ev || !c->timer)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory watching a child");
    int64_t left = deadline_ms - funcd_mono_ms();
    if (left < 0)
        left = 0;
    struct timeval tv = {left / 1000, (left % 1000) * 1000};
    if (c->input_len)
        event_add(c->in.ev, NULL);
    else
        close_stream(&c->in);
    event_add(c->out.ev, NULL);
    event_add(c->err.ev, NULL);
    event_add(c->exit_ev, NULL);
    evtimer_add(c->timer, &tv);
    return 0;
}

int funcd_child_run(funcd_child **out, struct event_base *loop, const funcd_child_spec *spec,
                    funcd_child_done_fn done, void *payload)
{
    *out = NULL;
    funcd_child *c = calloc(1, sizeof(*c));
    if (!c)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory starting %s", spec->path);
    c->pid = -1;
    c->pidfd = c->in.fd = c->out.fd = c->err.fd = -1;
    c->input = spec->input;
    c->input_len = spec->input_len;
    c->max_out = spec->max_stdout;
    c->max_err = spec->max_stderr;
    c->done = done;
    c->payload = payload;
    int rc = spawn(c, spec);
    if (rc == 0)
        rc = watch(c, loop, spec->deadline_ms);
    if (rc < 0) {
        funcd_child_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void funcd_child_free(funcd_child *c)
{
    if (!c)
        return;
    if (c->pid > 0) {
        kill_group(c);
        while (waitpid(c->pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    close_stream(&c->in);
    close_stream(&c->out);
    close_stream(&c->err);
    if (c->exit_ev)
        event_free(c->exit_ev);
    if (c->timer)
        event_free(c->timer);
    if (c->pidfd >= 0)
        close(c->pidfd);
    funcd_buf_free(&c->out_buf);
    funcd_buf_free(&c->err_buf);
    free(c);
}
