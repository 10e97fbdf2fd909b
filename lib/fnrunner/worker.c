/*
 * The worker evaluator (Porch's pod executor): the images that FunctionConfig
 * podExecutors name run as warm workers from lib/pool, the same pools the
 * serving side uses.
 *
 * An image, until OCI pulls exist, is a materialized directory:
 * FUNCTIONS_DIR/<spec.image's last path component, without tag or digest>/
 * holding an executable named `function` ("example.com/fns/set-labels:v1"
 * -> FUNCTIONS_DIR/set-labels/function). A worker is the exec shim serving
 * that program (funcd-exec -- DIR/function) on a Unix socket under
 * <state_dir>/fnrun/wN/. An evaluation is one HTTP/1.1 POST of the
 * ResourceList with "X-Funcd-Krm: 1"; the shim runs the program once and
 * answers its stdout, exit code and stderr (see shims/funcd-exec.c).
 *
 * Porch's knobs, and what they mean here:
 *  - timeToLive (default 30m): the pool's idle TTL, which every evaluation
 *    extends. The pool's timer reaps (Porch scans each minute; we scan often).
 *  - maxParallelExecutions (default 1, as Porch's
 *    --max-parallel-pods-per-function): the most workers of the image, as
 *    Porch caps pods per function.
 *  - preferredMaxQueueLength (default 2, as Porch's --max-waitlist-length):
 *    how many evaluations one worker runs at once before the pool starts
 *    another. Porch counts a pod's running and waiting calls as its
 *    "waitlist" and scales up when the shortest one reaches this length; it
 *    never refuses a call, so calls beyond max x this wait in the pool's
 *    queue (QUEUE_LENGTH deep) under their deadline instead of failing.
 *  - one warm worker per podExecutor at start, and when one is added.
 *  - a worker whose connection fails is evicted and the call retried once on
 *    another worker; every wait is bounded by the call's deadline.
 *
 * Threads: everything runs on the platform loop (the store watch only pokes
 * it).
 */
#include "fnrunner/worker.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api/api.h"
#include "funcd/sys/error.h"
#include "pool/pool.h"
#include "objects/objects.h"
#include "source/resolver.h"
#include "util/misc.h"

#define DEFAULT_TTL_MS (30ull * 60 * 1000)
#define DEFAULT_MAX_WORKERS 1
#define DEFAULT_PER_WORKER 2
#define QUEUE_LENGTH 1024
#define START_TIMEOUT_MS 10000
#define STOP_GRACE_MS 2000
#define PROBE_FIRST_US 100
#define PROBE_MAX_US 2000
#define MAX_RESPONSE_HEAD (256 * 1024) /* X-Funcd-Stderr: 64 KiB in base64 */
#define ATTEMPTS 2                     /* a failed worker costs one retry */

#define CONTAINER_OF(ptr, type, member) ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

typedef struct worker_eval worker_eval;
typedef struct worker_ctx worker_ctx;

/* What every worker of one image is started with. Workers keep a reference:
 * they may outlive the pool that started them. */
typedef struct launch {
    atomic_int refs;
    worker_eval *we;
    char *image;   /* the FunctionConfig's spec.image */
    char *dir;     /* FUNCTIONS_DIR/<name>, or a pulled image's rootfs */
    char *program; /* dir/function, or the image's program (a path inside it) */
    /* A pulled image: its entrypoint and cmd run inside `rootfs`. */
    char *rootfs;
    char **argv, **env; /* NULL-terminated */
    char *cwd;
    /* From podExecutor.templateOverrides: the function container's limits
     * and env (NULL-terminated, never NULL). */
    funcd_worker_limits limits;
    char **ov_env;
} launch;

/* An evaluation waiting for its image to be pulled. */
typedef struct parked {
    worker_eval *we;
    funcd_eval_job *job;
    struct event *timer; /* its deadline */
    struct parked *prev, *next;
} parked;

/* The workers of one podExecutor FunctionConfig running one image: a
 * FunctionConfig has a pool per image digest its requests named. */
typedef struct image_pool {
    char *config; /* metadata.name */
    char *key;    /* what runs: a pulled image's digest, or "dir:<name>" */
    char *ref;    /* the image a request named that made it */
    char *sig;    /* the spec it was made from (launch_sig) */
    launch *ln;
    funcd_pool *pool;
    funcd_pool_config pc;
    funcd_pool_waiter warm; /* the warm-up's slot request */
    int warming, dropping, seen;
    struct image_pool *next;
} image_pool;

struct worker_eval {
    funcd_evaluator base;
    struct event_base *loop;
    funcd_store *store;
    funcd_runtime *runtime;
    const funcd_logger *logger;
    char *functions_dir, *shim, *run_dir, *ns, *prefix;
    const char *off; /* why the evaluator finds nothing, or NULL */
    size_t max_message;
    image_pool *pools;
    worker_ctx *live; /* workers whose process runs */
    unsigned n_live;
    unsigned next_dir;
    funcd_store_watch *watch;
    struct event *reconcile_ev; /* the watch pokes it from writers' threads */
    int closed;
    funcd_sources *sources; /* images pulled from registries; may be NULL */
    parked *parked;
    int reconcile_waits;    /* a reconcile waits on a pull (its callback is registered) */
};

/* ---- a small HTTP/1.1 client over a Unix socket ------------------------ */

typedef enum rstate {
    R_STATUS,
    R_HEADERS,
    R_BODY,
    R_CHUNK_SIZE,
    R_CHUNK_DATA,
    R_CHUNK_END,
    R_TRAILERS,
    R_UNTIL_EOF,
    R_DONE,
} rstate;

typedef struct hconn hconn;
/* `error` NULL: the response is complete in the connection's fields. */
typedef void (*hconn_done_fn)(hconn *hc, const char *error, void *arg);

struct hconn {
    struct bufferevent *bev;
    worker_ctx *wc;
    hconn *next; /* the worker's idle list */
    rstate st;
    size_t head_bytes, left, max_body;
    int status, keep_alive, chunked, has_length, too_large;
    int exit_code, has_exit_code;
    funcd_buf body, stderr_b64, error_hdr;
    hconn_done_fn done;
    void *arg;
};

struct worker_ctx {
    worker_eval *we;
    launch *ln;
    funcd_pool_worker *pw;
    funcd_worker *proc;
    char dir[128];
    char sock[108];
    char replica[96];
    hconn *idle;
    hconn *probe;
    struct event *probe_timer;
    unsigned probe_delay_us;
    char last_stderr[400];
    worker_ctx *prev, *next; /* we->live while the process runs */
};

static void hconn_free(hconn *hc)
{
    if (!hc)
        return;
    if (hc->bev)
        bufferevent_free(hc->bev); /* safe inside its own callbacks */
    funcd_buf_free(&hc->body);
    funcd_buf_free(&hc->stderr_b64);
    funcd_buf_free(&hc->error_hdr);
    free(hc);
}

/* Runs the completion once; it may free `hc`. */
static void hconn_finish(hconn *hc, const char *error)
{
    hconn_done_fn done = hc->done;
    hc->done = NULL;
    bufferevent_disable(hc->bev, EV_READ);
    if (done)
        done(hc, error, hc->arg);
}

static int header_is(const char *line, size_t name_len, const char *name)
{
    return name_len == strlen(name) && strncasecmp(line, name, name_len) == 0;
}

static int parse_header(hconn *hc, const char *line)
{
    const char *colon = strchr(line, ':');
    if (!colon || colon == line)
        return -1;
    size_t n = (size_t)(colon - line);
    const char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    size_t vlen = strlen(v);
    while (vlen && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
        vlen--;
    if (header_is(line, n, "Content-Length")) {
        char *end;
        errno = 0;
        unsigned long long len = strtoull(v, &end, 10);
        if (end == v || (size_t)(end - v) != vlen || errno || *v == '-')
            return -1;
        hc->has_length = 1;
        hc->left = (size_t)len;
    } else if (header_is(line, n, "Transfer-Encoding")) {
        hc->chunked = vlen >= 7 && strncasecmp(v + vlen - 7, "chunked", 7) == 0;
    } else if (header_is(line, n, "Connection")) {
        if (strncasecmp(v, "close", 5) == 0)
            hc->keep_alive = 0;
        else if (strncasecmp(v, "keep-alive", 10) == 0)
            hc->keep_alive = 1;
    } else if (header_is(line, n, "X-Funcd-Exit-Code")) {
        char *end;
        long code = strtol(v, &end, 10);
        hc->has_exit_code = end != v;
        hc->exit_code = (int)code;
    } else if (header_is(line, n, "X-Funcd-Stderr")) {
        return funcd_buf_append(&hc->stderr_b64, v, vlen);
    } else if (header_is(line, n, "X-Funcd-Error")) {
        return funcd_buf_append(&hc->error_hdr, v, vlen);
    }
    return 0;
}

/* The head is over: how is the body framed? */
static void head_done(hconn *hc)
{
    if (hc->status >= 100 && hc->status < 200)
        hc->st = R_STATUS; /* an interim response: the real one follows */
    else if (hc->chunked)
        hc->st = R_CHUNK_SIZE;
    else if (hc->has_length)
        hc->st = hc->left ? R_BODY : R_DONE;
    else {
        hc->keep_alive = 0; /* the body ends with the connection */
        hc->st = R_UNTIL_EOF;
    }
}

static int parse_status(hconn *hc, const char *line)
{
    int minor, status;
    if (sscanf(line, "HTTP/1.%d %3d", &minor, &status) != 2 || status < 100 || status > 599)
        return -1;
    hc->status = status;
    hc->keep_alive = minor >= 1;
    hc->chunked = hc->has_length = 0;
    hc->left = 0;
    hc->st = R_HEADERS;
    return 0;
}

static int parse_chunk_size(hconn *hc, const char *line)
{
    char *end;
    errno = 0;
    unsigned long long n = strtoull(line, &end, 16);
    if (end == line || errno || (*end && *end != ';' && *end != ' ' && *end != '\t'))
        return -1;
    hc->left = (size_t)n;
    hc->st = n ? R_CHUNK_DATA : R_TRAILERS;
    return 0;
}

/* One CRLF-terminated line in the current state. */
static int parse_line(hconn *hc, const char *line)
{
    switch (hc->st) {
    case R_STATUS:
        return parse_status(hc, line);
    case R_HEADERS:
        if (!*line) {
            head_done(hc);
            return 0;
        }
        return parse_header(hc, line);
    case R_CHUNK_SIZE:
        return parse_chunk_size(hc, line);
    case R_CHUNK_END:
        hc->st = R_CHUNK_SIZE;
        return *line ? -1 : 0;
    case R_TRAILERS:
        if (!*line)
            hc->st = R_DONE;
        return 0;
    default:
        return -1;
    }
}

/* Moves up to `want` body bytes out of `in`: how many, or -1. */
static ssize_t take_body(hconn *hc, struct evbuffer *in, size_t want)
{
    size_t avail = evbuffer_get_length(in);
    size_t n = want < avail ? want : avail;
    if (n > hc->max_body - hc->body.len) {
        hc->too_large = 1;
        return -1;
    }
    if (n == 0)
        return 0;
    if (funcd_buf_grow(&hc->body, n) < 0)
        return -1;
    evbuffer_remove(in, hc->body.data + hc->body.len, n);
    hc->body.len += n;
    hc->body.data[hc->body.len] = '\0';
    return (ssize_t)n;
}

/* Advances over what arrived. 1: complete, 0: wants more, -1: bad. */
static int parse_response(hconn *hc, struct evbuffer *in)
{
    for (;;) {
        if (hc->st == R_DONE)
            return 1;
        if (hc->st == R_UNTIL_EOF)
            return take_body(hc, in, evbuffer_get_length(in)) < 0 ? -1 : 0;
        if (hc->st == R_BODY || hc->st == R_CHUNK_DATA) {
            ssize_t n = take_body(hc, in, hc->left);
            if (n < 0)
                return -1;
            hc->left -= (size_t)n;
            if (hc->left)
                return 0;
            hc->st = hc->st == R_BODY ? R_DONE : R_CHUNK_END;
            continue;
        }
        size_t n;
        char *line = evbuffer_readln(in, &n, EVBUFFER_EOL_CRLF);
        if (!line)
            return evbuffer_get_length(in) > MAX_RESPONSE_HEAD ? -1 : 0;
        if (hc->st == R_STATUS || hc->st == R_HEADERS || hc->st == R_TRAILERS)
            hc->head_bytes += n + 2;
        int rc = hc->head_bytes > MAX_RESPONSE_HEAD ? -1 : parse_line(hc, line);
        free(line);
        if (rc < 0)
            return -1;
    }
}

static void on_conn_read(struct bufferevent *bev, void *arg)
{
    hconn *hc = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    int rc = parse_response(hc, in);
    if (rc < 0)
        hconn_finish(hc, hc->too_large ? "the answer is over the message limit"
                                       : "the worker sent a malformed HTTP response");
    else if (rc > 0) {
        if (evbuffer_get_length(in))
            hc->keep_alive = 0; /* bytes nobody asked for: do not trust this connection */
        hconn_finish(hc, NULL);
    }
}

static void on_conn_event(struct bufferevent *bev, short what, void *arg)
{
    hconn *hc = arg;
    if ((what & BEV_EVENT_EOF) && hc->st == R_UNTIL_EOF) {
        hc->st = R_DONE;
        hconn_finish(hc, NULL);
    } else if (what & BEV_EVENT_EOF) {
        hconn_finish(hc, "the worker closed the connection before it answered");
    } else if (what & BEV_EVENT_ERROR) {
        char why[160];
        snprintf(why, sizeof(why), "the connection to the worker failed: %s",
                 strerror(EVUTIL_SOCKET_ERROR()));
        hconn_finish(hc, why);
    }
}

/* A connected socket to the worker, or -1 with errno set. A Unix socket
 * connects at once or not at all, so this never blocks. */
static int unix_connect(const char *path)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

static hconn *hconn_open(worker_ctx *wc)
{
    int fd = unix_connect(wc->sock);
    if (fd < 0)
        return NULL;
    hconn *hc = calloc(1, sizeof(*hc));
    if (hc)
        hc->bev = bufferevent_socket_new(wc->we->loop, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!hc || !hc->bev) {
        free(hc);
        close(fd);
        errno = ENOMEM;
        return NULL;
    }
    hc->wc = wc;
    return hc;
}

/* Sends one request; `body` is referenced, not copied: it must outlive the
 * exchange (or the connection). */
static void hconn_send(hconn *hc, const char *head, size_t head_len, const void *body,
                       size_t body_len, size_t max_body, hconn_done_fn done, void *arg)
{
    funcd_buf_reset(&hc->body);
    funcd_buf_reset(&hc->stderr_b64);
    funcd_buf_reset(&hc->error_hdr);
    hc->st = R_STATUS;
    hc->head_bytes = hc->left = 0;
    hc->status = hc->too_large = hc->exit_code = hc->has_exit_code = 0;
    hc->max_body = max_body;
    hc->done = done;
    hc->arg = arg;
    struct evbuffer *out = bufferevent_get_output(hc->bev);
    bufferevent_setcb(hc->bev, on_conn_read, NULL, on_conn_event, hc);
    if (evbuffer_add(out, head, head_len) < 0 ||
        (body_len && evbuffer_add_reference(out, body, body_len, NULL, NULL) < 0)) {
        hconn_finish(hc, "out of memory sending to the worker");
        return;
    }
    bufferevent_enable(hc->bev, EV_READ | EV_WRITE);
}

/* ---- idle keep-alive connections of a worker --------------------------- */

static void idle_remove(worker_ctx *wc, hconn *hc)
{
    for (hconn **pp = &wc->idle; *pp; pp = &(*pp)->next)
        if (*pp == hc) {
            *pp = hc->next;
            return;
        }
}

/* Anything on an idle connection (the worker went away, or talks out of
 * turn) ends it. */
static void on_idle_read(struct bufferevent *bev, void *arg)
{
    hconn *hc = arg;
    idle_remove(hc->wc, hc);
    hconn_free(hc);
}

static void on_idle_event(struct bufferevent *bev, short what, void *arg)
{
    on_idle_read(bev, arg);
}

static void idle_put(worker_ctx *wc, hconn *hc)
{
    hc->next = wc->idle;
    wc->idle = hc;
    bufferevent_setcb(hc->bev, on_idle_read, NULL, on_idle_event, hc);
    bufferevent_enable(hc->bev, EV_READ);
}

static hconn *idle_take(worker_ctx *wc)
{
    hconn *hc = wc->idle;
    if (hc)
        wc->idle = hc->next;
    return hc;
}

static void idle_free_all(worker_ctx *wc)
{
    hconn *hc;
    while ((hc = idle_take(wc)))
        hconn_free(hc);
}

/* ---- workers (the pool's front door) ----------------------------------- */

static void launch_unref(launch *ln)
{
    if (!ln || atomic_fetch_sub(&ln->refs, 1) != 1)
        return;
    free(ln->image);
    free(ln->dir);
    free(ln->program);
    free(ln->rootfs);
    for (char **p = ln->argv; p && *p; p++)
        free(*p);
    free(ln->argv);
    for (char **p = ln->env; p && *p; p++)
        free(*p);
    free(ln->env);
    for (char **p = ln->ov_env; p && *p; p++)
        free(*p);
    free(ln->ov_env);
    free(ln->cwd);
    free(ln);
}

static void remove_worker_dir(worker_ctx *wc)
{
    if (!wc->dir[0])
        return;
    unlink(wc->sock);
    rmdir(wc->dir);
    wc->dir[0] = '\0';
}

static void probe_stop(worker_ctx *wc)
{
    if (wc->probe_timer)
        event_free(wc->probe_timer);
    wc->probe_timer = NULL;
    hconn_free(wc->probe);
    wc->probe = NULL;
}

static void probe_again(worker_ctx *wc)
{
    hconn_free(wc->probe);
    wc->probe = NULL;
    struct timeval tv = {0, wc->probe_delay_us};
    if (wc->probe_delay_us < PROBE_MAX_US)
        wc->probe_delay_us *= 2;
    evtimer_add(wc->probe_timer, &tv);
}

static void on_probe_done(hconn *hc, const char *error, void *arg)
{
    worker_ctx *wc = arg;
    if (error || (hc->status != 200 && hc->status != 404)) {
        probe_again(wc); /* up but not ready yet */
        return;
    }
    wc->probe = NULL;
    if (hc->keep_alive)
        idle_put(wc, hc); /* the first evaluation needs no connect */
    else
        hconn_free(hc);
    event_free(wc->probe_timer);
    wc->probe_timer = NULL;
    funcd_pool_worker_ready(wc->pw);
}

static void on_probe_timer(evutil_socket_t fd, short what, void *arg)
{
    static const char req[] = "GET /_/ready HTTP/1.1\r\nHost: worker\r\nContent-Length: 0\r\n\r\n";
    worker_ctx *wc = arg;
    wc->probe = hconn_open(wc);
    if (!wc->probe) {
        probe_again(wc); /* not listening yet */
        return;
    }
    hconn_send(wc->probe, req, sizeof(req) - 1, NULL, 0, 4096, on_probe_done, wc);
}

static void on_worker_output(funcd_worker *proc, funcd_worker_stream stream, const char *line,
                             size_t len, void *payload)
{
    worker_ctx *wc = payload;
    if (stream == FUNCD_WORKER_STDERR)
        snprintf(wc->last_stderr, sizeof(wc->last_stderr), "%.*s", (int)len, line);
    funcd_log(wc->we->logger, FUNCD_LOG_DEBUG, "worker %s: %.*s", wc->replica, (int)len, line);
}

static void live_unlink(worker_ctx *wc)
{
    worker_eval *we = wc->we;
    if (wc->prev)
        wc->prev->next = wc->next;
    else if (we->live == wc)
        we->live = wc->next;
    if (wc->next)
        wc->next->prev = wc->prev;
    wc->prev = wc->next = NULL;
    we->n_live--;
}

/* The process is gone (or, with `proc` NULL, was never started): forget it
 * and tell the pool. */
static void worker_gone(worker_ctx *wc, const char *why)
{
    probe_stop(wc);
    idle_free_all(wc);
    if (wc->proc) {
        wc->we->runtime->release(wc->we->runtime, wc->proc);
        wc->proc = NULL;
        live_unlink(wc);
    }
    remove_worker_dir(wc);
    funcd_pool_worker_exited(wc->pw, why);
}

static void on_worker_exit(funcd_worker *proc, int status, void *payload)
{
    worker_ctx *wc = payload;
    char why[600];
    if (WIFEXITED(status))
        snprintf(why, sizeof(why), "worker %s exited with status %d%s%s", wc->replica,
                 WEXITSTATUS(status), wc->last_stderr[0] ? ": " : "", wc->last_stderr);
    else
        snprintf(why, sizeof(why), "worker %s was killed by signal %d%s%s", wc->replica,
                 WTERMSIG(status), wc->last_stderr[0] ? ": " : "", wc->last_stderr);
    funcd_log(wc->we->logger, FUNCD_LOG_DEBUG, "%s", why);
    worker_gone(wc, why);
}

static int prepare_dir(worker_eval *we, worker_ctx *wc)
{
    snprintf(wc->dir, sizeof(wc->dir), "%s/w%u", we->run_dir, ++we->next_dir);
    if (strlen(wc->dir) + sizeof("/worker.sock") > sizeof(wc->sock)) {
        wc->dir[0] = '\0';
        return funcd_error_set(FUNCD_EINVAL, "the state directory %s is too long for Unix "
                               "socket paths; choose a shorter one", we->run_dir);
    }
    snprintf(wc->sock, sizeof(wc->sock), "%.*s/worker.sock", (int)(sizeof(wc->sock) - 13),
             wc->dir);
    if (mkdir(wc->dir, 0700) != 0 && errno != EEXIST) {
        int err = errno;
        wc->dir[0] = '\0';
        return funcd_error_set(FUNCD_EIO, "cannot create %s/w%u: %s", we->run_dir,
                               we->next_dir, strerror(err));
    }
    return 0;
}

#define IMAGE_RUN_DIR "/run/funcd"

static void live_link(worker_eval *we, worker_ctx *wc)
{
    wc->next = we->live;
    if (we->live)
        we->live->prev = wc;
    we->live = wc;
    we->n_live++;
    wc->probe_delay_us = PROBE_FIRST_US;
    struct timeval tv = {0, PROBE_FIRST_US};
    evtimer_add(wc->probe_timer, &tv);
}

/* Appends the entries of `from` to `env` (holding `n`) whose names are not
 * in it yet; returns the new count. */
static size_t add_env(const char **env, size_t n, const char *const *from)
{
    for (const char *const *p = from; p && *p; p++) {
        size_t len = strcspn(*p, "=");
        int dup = 0;
        for (size_t i = 0; i < n && !dup; i++)
            dup = strncmp(env[i], *p, len) == 0 && env[i][len] == '=';
        if (!dup)
            env[n++] = *p;
    }
    return n;
}

/* A pulled image's worker: the static exec shim, copied into its runtime
 * directory (seen at IMAGE_RUN_DIR), runs the image's program inside the
 * image's root once per evaluation. */
static int start_image_worker(worker_eval *we, worker_ctx *wc)
{
    launch *ln = wc->ln;
    char from[600], to[300];
    snprintf(from, sizeof(from), "%s-static", we->shim);
    snprintf(to, sizeof(to), "%s/funcd-exec", wc->dir);
    int rc = funcd_link_or_copy(from, to, 0755);
    size_t n_args = 0, n_env = 0, n_ov = 0;
    while (ln->argv[n_args])
        n_args++;
    while (ln->env && ln->env[n_env])
        n_env++;
    while (ln->ov_env[n_ov])
        n_ov++;
    const char **argv = calloc(n_args + 3, sizeof(char *));
    const char **env = calloc(n_ov + n_env + 5, sizeof(char *));
    char replica[128], function[160], ns[160];
    snprintf(replica, sizeof(replica), "FUNCD_REPLICA=%s", wc->replica);
    snprintf(function, sizeof(function), "FUNCD_FUNCTION=%s", ln->image);
    snprintf(ns, sizeof(ns), "FUNCD_NAMESPACE=%s", we->ns);
    if (rc == 0 && (!argv || !env))
        rc = funcd_error_set(FUNCD_ENOMEM, "out of memory starting a worker for %s", ln->image);
    if (rc == 0) {
        argv[0] = IMAGE_RUN_DIR "/funcd-exec";
        argv[1] = "--";
        memcpy(argv + 2, ln->argv, n_args * sizeof(char *));
        /* The overrides first: the first of two equal names counts. */
        size_t k = add_env(env, 0, (const char *const *)ln->ov_env);
        k = add_env(env, k, (const char *const *)ln->env);
        env[k] = "FUNCD_LISTEN=" IMAGE_RUN_DIR "/worker.sock";
        env[k + 1] = replica;
        env[k + 2] = function;
        env[k + 3] = ns;
        const funcd_worker_bind binds[] = {{wc->dir, IMAGE_RUN_DIR, 1, 1}};
        funcd_worker_spec spec = {argv, env, ln->cwd, ln->rootfs, ln->limits, binds, 1,
                                  FUNCD_WORKER_NETWORK_NONE};
        funcd_worker_events ev = {on_worker_output, on_worker_exit, wc};
        wc->probe_timer = evtimer_new(we->loop, on_probe_timer, wc);
        rc = wc->probe_timer ? we->runtime->start(we->runtime, &spec, &ev, &wc->proc)
                             : funcd_error_set(FUNCD_ENOMEM, "out of memory");
    }
    free(argv);
    free(env);
    if (rc < 0) {
        probe_stop(wc);
        remove_worker_dir(wc);
        return rc;
    }
    live_link(we, wc);
    return 0;
}

static int op_start(funcd_pool *p, funcd_pool_worker *pw, void *payload)
{
    launch *ln = payload;
    worker_eval *we = ln->we;
    worker_ctx *wc = calloc(1, sizeof(*wc));
    if (!wc)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory starting a worker for %s", ln->image);
    wc->we = we;
    atomic_fetch_add(&ln->refs, 1);
    wc->ln = ln;
    wc->pw = pw;
    funcd_pool_worker_set_data(pw, wc); /* from here on, dispose frees it */
    snprintf(wc->replica, sizeof(wc->replica), "%s-%u", ln->image, funcd_pool_worker_replica(pw));
    int rc = prepare_dir(we, wc);
    if (rc < 0)
        return rc;
    if (ln->rootfs)
        return start_image_worker(we, wc);
    char listen[160], replica[128], function[160], ns[160];
    snprintf(listen, sizeof(listen), "FUNCD_LISTEN=%s", wc->sock);
    snprintf(replica, sizeof(replica), "FUNCD_REPLICA=%s", wc->replica);
    snprintf(function, sizeof(function), "FUNCD_FUNCTION=%s", ln->image);
    snprintf(ns, sizeof(ns), "FUNCD_NAMESPACE=%s", we->ns);
    const char *const argv[] = {we->shim, "--", ln->program, NULL};
    static const char *const defaults[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8",
                                           NULL};
    size_t n_ov = 0;
    while (ln->ov_env[n_ov])
        n_ov++;
    const char **env = calloc(n_ov + 7, sizeof(char *));
    if (env) {
        size_t k = add_env(env, 0, (const char *const *)ln->ov_env);
        k = add_env(env, k, defaults);
        env[k] = listen;
        env[k + 1] = replica;
        env[k + 2] = function;
        env[k + 3] = ns;
    }
    /* What a sandboxed worker sees: the function and the shim with their host
     * owners (the operator's --functions-dir), its socket's directory as its own. */
    const funcd_worker_bind binds[] = {
        {ln->dir, NULL, 0, 0}, {we->shim, NULL, 0, 0}, {wc->dir, NULL, 1, 1}};
    funcd_worker_spec spec = {argv, env, ln->dir, NULL, ln->limits, binds, 3,
                              FUNCD_WORKER_NETWORK_NONE};
    funcd_worker_events ev = {on_worker_output, on_worker_exit, wc};
    wc->probe_timer = evtimer_new(we->loop, on_probe_timer, wc);
    if (!wc->probe_timer || !env)
        rc = funcd_error_set(FUNCD_ENOMEM, "out of memory starting a worker for %s", ln->image);
    else
        rc = we->runtime->start(we->runtime, &spec, &ev, &wc->proc);
    free(env);
    if (rc < 0) {
        probe_stop(wc);
        remove_worker_dir(wc);
        return rc;
    }
    live_link(we, wc);
    return 0;
}

static void op_stop(funcd_pool *p, funcd_pool_worker *pw, void *payload)
{
    worker_ctx *wc = funcd_pool_worker_data(pw);
    probe_stop(wc);
    idle_free_all(wc); /* the shim drains: idle connections would only delay it */
    if (wc->proc)
        wc->we->runtime->stop(wc->we->runtime, wc->proc, STOP_GRACE_MS);
}

static void op_dispose(funcd_pool_worker *pw, void *payload)
{
    worker_ctx *wc = funcd_pool_worker_data(pw);
    if (!wc)
        return;
    probe_stop(wc);
    idle_free_all(wc);
    launch_unref(wc->ln);
    free(wc);
}

static void op_changed(funcd_pool *p, void *payload)
{
    /* The function runner has no status to refresh. */
}

/* ---- image pools (one per podExecutor FunctionConfig) ------------------- */

static unsigned uint_at(const cJSON *obj, const char *key, unsigned dflt)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(n) && n->valuedouble >= 1 ? (unsigned)n->valuedouble : dflt;
}

static funcd_pool_config pool_config(const cJSON *pod)
{
    funcd_pool_config c = {
        .min_workers = 0, /* the warm-up is one use, then the TTL decides */
        .max_workers = uint_at(pod, "maxParallelExecutions", DEFAULT_MAX_WORKERS),
        .concurrency = uint_at(pod, "preferredMaxQueueLength", DEFAULT_PER_WORKER),
        .queue_length = QUEUE_LENGTH,
        .idle_ms = DEFAULT_TTL_MS,
        .start_timeout_ms = START_TIMEOUT_MS,
    };
    const char *ttl = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pod, "timeToLive"));
    uint64_t ms;
    if (ttl && funcd_parse_duration_ms(ttl, &ms) == 0 && ms > 0)
        c.idle_ms = ms;
    return c;
}

static int same_config(const funcd_pool_config *a, const funcd_pool_config *b)
{
    return a->min_workers == b->min_workers && a->max_workers == b->max_workers &&
           a->concurrency == b->concurrency && a->queue_length == b->queue_length &&
           a->idle_ms == b->idle_ms && a->start_timeout_ms == b->start_timeout_ms;
}

/* The directory name of an image: its last path component without a tag or
 * digest. 0, or -1 when that is no usable name. */
static int image_dir_name(const char *image, char *out, size_t len)
{
    const char *slash = strrchr(image, '/');
    const char *name = slash ? slash + 1 : image;
    size_t n = strcspn(name, ":@");
    if (n == 0 || n >= len || strncmp(name, ".", n) == 0 || strncmp(name, "..", n) == 0)
        return -1; /* "." and ".." would leave the functions directory */
    memcpy(out, name, n);
    out[n] = '\0';
    return 0;
}

/* Takes the overrides' limits and env into `ln` (the env moves). */
static void launch_take_overrides(launch *ln, funcd_eval_overrides *ov)
{
    ln->limits = ov->limits;
    ln->ov_env = ov->env;
    ov->env = NULL;
}

static launch *launch_new(worker_eval *we, const char *image, const char *name,
                          funcd_eval_overrides *ov)
{
    launch *ln = calloc(1, sizeof(*ln));
    if (!ln)
        return NULL;
    atomic_init(&ln->refs, 1);
    ln->we = we;
    launch_take_overrides(ln, ov);
    ln->image = funcd_strdup(image);
    if (asprintf(&ln->dir, "%s/%s", we->functions_dir, name) < 0)
        ln->dir = NULL;
    if (asprintf(&ln->program, "%s/%s/function", we->functions_dir, name) < 0)
        ln->program = NULL;
    if (!ln->image || !ln->dir || !ln->program || !ln->ov_env) {
        launch_unref(ln);
        return NULL;
    }
    return ln;
}

/* The launch of a pulled image: its entrypoint and cmd, run in its root. */
static launch *launch_new_image(worker_eval *we, const char *image, const funcd_source_result *r,
                                funcd_eval_overrides *ov)
{
    launch *ln = calloc(1, sizeof(*ln));
    if (!ln)
        return NULL;
    atomic_init(&ln->refs, 1);
    ln->we = we;
    launch_take_overrides(ln, ov);
    ln->image = funcd_strdup(image);
    ln->rootfs = funcd_strdup(r->dir);
    ln->dir = funcd_strdup(r->dir);
    size_t n = 0;
    for (char **p = r->entrypoint; p && *p; p++)
        n++;
    for (char **p = r->cmd; p && *p; p++)
        n++;
    ln->argv = calloc(n + 1, sizeof(char *));
    n = 0;
    for (char **p = r->entrypoint; ln->argv && p && *p; p++)
        ln->argv[n++] = strdup(*p);
    for (char **p = r->cmd; ln->argv && p && *p; p++)
        ln->argv[n++] = strdup(*p);
    ln->env = funcd_strv_dup((const char *const *)r->env);
    ln->cwd = funcd_strdup(r->working_dir && *r->working_dir ? r->working_dir : "/");
    ln->program = ln->argv && n ? funcd_strdup(ln->argv[0]) : NULL;
    int ok = ln->image && ln->rootfs && ln->dir && ln->argv && ln->env && ln->cwd &&
             ln->program && ln->ov_env;
    for (size_t i = 0; ok && i < n; i++)
        ok = ln->argv[i] != NULL;
    if (!ok) {
        launch_unref(ln);
        return NULL;
    }
    return ln;
}

static int executable_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

static int program_ok(const launch *ln)
{
    /* A pulled image names its program; a bad one fails its worker's start. */
    return ln->rootfs || executable_file(ln->program);
}

static void on_warm_granted(funcd_pool_waiter *wt, funcd_pool_worker *w, const char *error)
{
    image_pool *ip = CONTAINER_OF(wt, image_pool, warm);
    ip->warming = 0;
    if (w) { /* ready: give it back at once, which starts its TTL */
        funcd_pool_release(funcd_pool_worker_pool(w), w, 0);
        return;
    }
    if (!ip->dropping)
        funcd_log(ip->ln->we->logger, FUNCD_LOG_WARN, "warming a worker for %s failed: %s",
                  ip->ref, error ? error : "unknown error");
}

static void warm(worker_eval *we, image_pool *ip)
{
    if (ip->warming)
        return;
    if (!program_ok(ip->ln)) {
        funcd_log(we->logger, FUNCD_LOG_WARN, "FunctionConfig %s: %s is not an executable file; "
                  "no worker is warmed for %s", ip->config, ip->ln->program, ip->ref);
        return;
    }
    funcd_pool_worker *w = NULL;
    ip->warm.granted = on_warm_granted;
    int rc = funcd_pool_acquire(ip->pool, &ip->warm, &w);
    if (rc == 0)
        funcd_pool_release(ip->pool, w, 0);
    else if (rc == 1)
        ip->warming = 1;
}

/* Closes the pool (its workers drain and exit on their own). */
static void drop_pool(image_pool *ip, const char *why)
{
    ip->dropping = 1;
    if (ip->pool)
        funcd_pool_close(ip->pool, why);
    ip->pool = NULL;
    ip->dropping = 0;
    launch_unref(ip->ln);
    ip->ln = NULL;
}

static void image_pool_free(image_pool *ip, const char *why)
{
    drop_pool(ip, why);
    free(ip->config);
    free(ip->key);
    free(ip->ref);
    free(ip->sig);
    free(ip);
}

static image_pool *find_pool(worker_eval *we, const char *config, const char *key)
{
    for (image_pool *ip = we->pools; ip; ip = ip->next)
        if (strcmp(ip->config, config) == 0 && strcmp(ip->key, key) == 0)
            return ip;
    return NULL;
}

/* A fresh pool for `ln` (whose reference moves to `ip`). */
static int replace_pool(worker_eval *we, image_pool *ip, launch *ln, const funcd_pool_config *pc)
{
    funcd_pool_ops ops = {op_start, op_stop, op_dispose, op_changed, ln};
    funcd_pool *pool;
    if (funcd_pool_new(&pool, we->loop, pc, &ops) < 0) {
        launch_unref(ln);
        return FUNCD_ENOMEM;
    }
    drop_pool(ip, "the FunctionConfig changed");
    ip->pool = pool;
    ip->ln = ln;
    ip->pc = *pc;
    return 0;
}

/* "registry.example.com/fns/x:1" or "127.0.0.1:5000/x": worth a pull; a
 * bare "set-labels:v1" only ever means the functions directory. */
static int names_registry(const char *image)
{
    const char *slash = strchr(image, '/');
    if (!slash)
        return 0;
    size_t n = (size_t)(slash - image);
    return memchr(image, '.', n) || memchr(image, ':', n) ||
           (n == 9 && strncmp(image, "localhost", 9) == 0);
}

/* What the workers of one requested image run. */
typedef struct resolved {
    char key[96];           /* a pulled image's digest, or "dir:<name>" */
    int pulled;             /* `img` is filled */
    funcd_source_result img;
} resolved;

/*
 * What `ref` (the image a request names, PREFIX/IMAGE:TAG) runs: the
 * directory FUNCTIONS_DIR/<name> when it holds a program (or `ref` could not
 * come from a registry anyway), else the image `ref` pulled from its
 * registry, tag resolved to digest. 0; or -1 with `why` filled and
 * `*pending` set while the pull is under way (`cb(payload)` runs when it
 * ends).
 */
static int resolve_ref(worker_eval *we, const char *ref, const char *name, resolved *out,
                       int *pending, funcd_sources_cb cb, void *payload, char *why,
                       size_t why_len)
{
    memset(out, 0, sizeof(*out));
    *pending = 0;
    if (we->functions_dir) {
        char program[1024];
        snprintf(program, sizeof(program), "%s/%s/function", we->functions_dir, name);
        if (executable_file(program) || !we->sources || !names_registry(ref)) {
            snprintf(out->key, sizeof(out->key), "dir:%s", name);
            return 0;
        }
    }
    char msg[512];
    int rc = funcd_sources_image(we->sources, we->ns, ref, &out->img, msg, sizeof(msg), cb,
                                 payload);
    if (rc == FUNCD_SOURCE_PENDING) {
        *pending = 1;
        snprintf(why, why_len, "%s", msg);
        return -1;
    }
    if (rc < 0) {
        snprintf(why, why_len, "%s: %s", ref, msg);
        return -1;
    }
    out->pulled = 1;
    snprintf(out->key, sizeof(out->key), "%s", out->img.resolved);
    return 0;
}

/* What of a FunctionConfig's spec its workers are made from: when it
 * changes, they are replaced (the pool knobs only reconfigure them). */
static char *launch_sig(const cJSON *spec)
{
    const cJSON *pod = cJSON_GetObjectItemCaseSensitive(spec, "podExecutor");
    static const char *const from_spec[] = {"image", "prefixes"};
    static const char *const from_pod[] = {"tags", "templateOverrides"};
    cJSON *sig = cJSON_CreateObject();
    for (size_t i = 0; sig && i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(spec, from_spec[i]);
        if (v)
            cJSON_AddItemReferenceToObject(sig, from_spec[i], (cJSON *)v);
        v = cJSON_GetObjectItemCaseSensitive(pod, from_pod[i]);
        if (v)
            cJSON_AddItemReferenceToObject(sig, from_pod[i], (cJSON *)v);
    }
    char *text = sig ? cJSON_PrintUnformatted(sig) : NULL;
    cJSON_Delete(sig);
    return text;
}

/* Drops the pools of `config` that the image `ref` resolving to `key`
 * supersedes: the one of `key` (made from another spec), and the one `ref`
 * made before it moved to another digest. Their workers drain. */
static void drop_superseded(worker_eval *we, const char *config, const char *key,
                            const char *ref)
{
    for (image_pool **pp = &we->pools; *pp;) {
        image_pool *ip = *pp;
        if (strcmp(ip->config, config) != 0 ||
            (strcmp(ip->key, key) != 0 && strcmp(ip->ref, ref) != 0)) {
            pp = &ip->next;
            continue;
        }
        *pp = ip->next;
        image_pool_free(ip, "the FunctionConfig or its image changed");
    }
}

static image_pool *new_image_pool(worker_eval *we, const char *config, const char *key,
                                  const char *ref, const char *sig, launch *ln,
                                  const funcd_pool_config *pc)
{
    image_pool *ip = calloc(1, sizeof(*ip));
    if (!ip || !(ip->config = funcd_strdup(config)) || !(ip->key = funcd_strdup(key)) ||
        !(ip->ref = funcd_strdup(ref)) || !(ip->sig = funcd_strdup(sig))) {
        launch_unref(ln);
        if (ip)
            image_pool_free(ip, "out of memory");
        return NULL;
    }
    if (replace_pool(we, ip, ln, pc) < 0) { /* it let go of `ln` */
        image_pool_free(ip, "out of memory");
        return NULL;
    }
    ip->next = we->pools;
    we->pools = ip;
    return ip;
}

/*
 * The pool of the podExecutor FunctionConfig `fc` for the image `ref` (the
 * one a request names, PREFIX/IMAGE:TAG, or the config's warm image),
 * brought to its spec: found by the digest `ref` resolves to, or created
 * (and warmed, with `warm_new`), or given new limits. NULL with `why` filled
 * when it cannot serve, and `*pending` set while its image is being pulled
 * (then `cb(payload)` runs once it is done).
 */
static image_pool *pool_for(worker_eval *we, const cJSON *fc, const char *ref, int warm_new,
                            int *pending, funcd_sources_cb cb, void *payload, char *why,
                            size_t why_len)
{
    *pending = 0;
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(fc, "metadata");
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(fc, "spec");
    const char *config = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, "name"));
    const char *image = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "image"));
    const cJSON *pod = cJSON_GetObjectItemCaseSensitive(spec, "podExecutor");
    char name[256];
    if (!config || !image || !ref || !cJSON_IsObject(pod) ||
        image_dir_name(ref, name, sizeof(name)) < 0) {
        snprintf(why, why_len, "FunctionConfig %s: image %s names no function directory",
                 config ? config : "?", ref ? ref : image ? image : "(none)");
        return NULL;
    }
    resolved rs;
    if (resolve_ref(we, ref, name, &rs, pending, cb, payload, why, why_len) < 0)
        return NULL;
    char *sig = launch_sig(spec);
    funcd_eval_overrides ov = {0};
    image_pool *ip = sig ? find_pool(we, config, rs.key) : NULL;
    funcd_pool_config pc = pool_config(pod);
    if (ip && strcmp(ip->sig, sig) == 0) {
        if (!same_config(&ip->pc, &pc)) {
            ip->pc = pc;
            funcd_pool_configure(ip->pool, &pc);
        }
        goto out;
    }
    ip = NULL;
    launch *ln = NULL;
    if (sig && funcd_eval_overrides_parse(
                   cJSON_GetObjectItemCaseSensitive(pod, "templateOverrides"), &ov) == 0)
        ln = rs.pulled ? launch_new_image(we, image, &rs.img, &ov)
                       : launch_new(we, image, name, &ov);
    if (!ln)
        goto oom;
    drop_superseded(we, config, rs.key, ref);
    if (!(ip = new_image_pool(we, config, rs.key, ref, sig, ln, &pc)))
        goto oom;
    if (warm_new)
        warm(we, ip);
    goto out;
oom:
    snprintf(why, why_len, "out of memory preparing the workers of %s", ref);
out:
    funcd_eval_overrides_clear(&ov);
    funcd_source_result_clear(&rs.img);
    free(sig);
    return ip;
}

typedef struct config_list {
    cJSON **v;
    uint64_t *rev; /* each one's revision in the store */
    size_t n, cap;
} config_list;

static int collect_config(const funcd_store_kv *kv, void *payload)
{
    config_list *l = payload;
    cJSON *obj = cJSON_ParseWithLength(kv->value, kv->len);
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(obj, "spec");
    if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(spec, "podExecutor"))) {
        cJSON_Delete(obj);
        return 0;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        cJSON **v = realloc(l->v, cap * sizeof(*v));
        if (v)
            l->v = v;
        uint64_t *rev = v ? realloc(l->rev, cap * sizeof(*rev)) : NULL;
        if (!rev) {
            cJSON_Delete(obj);
            return 1;
        }
        l->rev = rev;
        l->cap = cap;
    }
    l->rev[l->n] = kv->revision;
    l->v[l->n++] = obj;
    return 0;
}

/* An image a FunctionConfig names was pulled (or failed): look again. */
static void on_config_image(void *payload)
{
    worker_eval *we = payload;
    event_active(we->reconcile_ev, 0, 0);
}

/* status.ignoredOverrides of a podExecutor FunctionConfig: what of its
 * templateOverrides its workers do not honour. Written only when it
 * changes, so the write's own store event changes nothing more. */
static void put_status(worker_eval *we, const cJSON *fc, uint64_t revision)
{
    const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(fc, "spec"),
                                         "podExecutor"),
        "templateOverrides");
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(fc, "status");
    const cJSON *had = cJSON_GetObjectItemCaseSensitive(status, "ignoredOverrides");
    const char *name = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(fc, "metadata"), "name"));
    const funcd_kind *kind = funcd_kind_by_plural("functionconfigs");
    funcd_eval_overrides ov;
    if (!name || !kind || (!tmpl && !had) || funcd_eval_overrides_parse(tmpl, &ov) < 0)
        return;
    if (tmpl ? !had || !cJSON_Compare(had, ov.ignored, 1) : had != NULL) {
        cJSON *next = cJSON_IsObject(status) ? cJSON_Duplicate(status, 1) : cJSON_CreateObject();
        cJSON_DeleteItemFromObjectCaseSensitive(next, "ignoredOverrides");
        if (tmpl && next) {
            cJSON_AddItemToObject(next, "ignoredOverrides", ov.ignored);
            ov.ignored = NULL;
        }
        if (next && funcd_objects_put_status(we->store, kind, we->ns, name, revision, next) < 0 &&
            funcd_error_last()->code != FUNCD_ECONFLICT) /* a newer version comes our way */
            funcd_log(we->logger, FUNCD_LOG_WARN, "FunctionConfig %s: cannot write its status: %s",
                      name, funcd_error_last()->message);
        cJSON_Delete(next);
    }
    funcd_eval_overrides_clear(&ov);
}

/* Brings the pools to the podExecutor FunctionConfigs in the store: new ones
 * start warm (with their first prefix and tag), changed ones are
 * reconfigured or replaced, deleted ones drained. */
static void reconcile(worker_eval *we)
{
    if (we->closed || we->off || !we->store)
        return;
    funcd_sources_cancel(we->sources, we); /* registered again below if still pulling */
    config_list l = {0};
    if (we->store->list(we->store, we->prefix, collect_config, &l, NULL) < 0) {
        funcd_log(we->logger, FUNCD_LOG_WARN, "cannot list FunctionConfigs for warm workers: %s",
                  funcd_error_last()->message);
        for (size_t i = 0; i < l.n; i++)
            cJSON_Delete(l.v[i]);
        free(l.v);
        free(l.rev);
        return;
    }
    for (image_pool *ip = we->pools; ip; ip = ip->next)
        ip->seen = 0;
    for (size_t i = 0; i < l.n; i++) {
        char why[512];
        int pending;
        const cJSON *spec = cJSON_GetObjectItemCaseSensitive(l.v[i], "spec");
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(l.v[i], "metadata"), "name"));
        char *ref = funcd_eval_warm_image(spec);
        image_pool *warmed = pool_for(we, l.v[i], ref, 1, &pending, on_config_image, we, why,
                                      sizeof(why));
        if (!warmed && !pending)
            funcd_log(we->logger, FUNCD_LOG_WARN, "%s", why);
        char *sig = launch_sig(spec);
        funcd_pool_config pc =
            pool_config(cJSON_GetObjectItemCaseSensitive(spec, "podExecutor"));
        for (image_pool *ip = we->pools; ip && name; ip = ip->next) {
            if (strcmp(ip->config, name) != 0)
                continue;
            /* Pools of other tags live on while the spec is the same; while a
             * new image is pulled the old pools serve. */
            if (ip == warmed || pending || (sig && strcmp(ip->sig, sig) == 0))
                ip->seen = 1;
            if (ip->seen && sig && strcmp(ip->sig, sig) == 0 && !same_config(&ip->pc, &pc)) {
                ip->pc = pc;
                funcd_pool_configure(ip->pool, &pc);
            }
        }
        put_status(we, l.v[i], l.rev[i]);
        free(sig);
        free(ref);
        cJSON_Delete(l.v[i]);
    }
    free(l.v);
    free(l.rev);
    for (image_pool **pp = &we->pools; *pp;) {
        image_pool *ip = *pp;
        if (ip->seen) {
            pp = &ip->next;
            continue;
        }
        *pp = ip->next;
        image_pool_free(ip, "the FunctionConfig was deleted");
    }
}

static void on_reconcile(evutil_socket_t fd, short what, void *arg)
{
    reconcile(arg);
}

/* Any thread, under the store's locks: only poke the loop. */
static void on_config_event(const funcd_store_event *ev, void *payload)
{
    worker_eval *we = payload;
    event_active(we->reconcile_ev, 0, 0);
}

/* ---- evaluations ------------------------------------------------------ */

typedef struct wcall {
    worker_eval *we;
    funcd_eval_job *job;
    funcd_pool *pool; /* a reference */
    launch *ln;       /* a reference */
    funcd_pool_waiter waiter;
    funcd_pool_worker *slot;
    hconn *conn;
    struct event *timer;
    int64_t timeout_ms;
    int attempts;
    size_t head_len;
    char head[256];
} wcall;

static void call_free(wcall *c)
{
    if (c->timer)
        event_free(c->timer);
    funcd_pool_unref(c->pool);
    launch_unref(c->ln);
    free(c);
}

/* Lets go of the queue position, the connection and the slot. */
static void call_detach(wcall *c, int evict)
{
    /* On the loop a grant is delivered at once, so a call without a slot
     * is at most queued, never about to be granted. */
    if (!c->slot)
        funcd_pool_cancel(c->pool, &c->waiter);
    hconn_free(c->conn);
    c->conn = NULL;
    funcd_pool_worker *w = c->slot;
    c->slot = NULL;
    if (w)
        funcd_pool_release(c->pool, w, evict);
}

static void call_finish(wcall *c)
{
    funcd_eval_job *job = c->job;
    call_detach(c, 0);
    call_free(c);
    funcd_eval_finish(job);
}

static void call_fail(wcall *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void call_fail(wcall *c, int status, const char *fmt, ...)
{
    funcd_eval_result *res = &c->job->res;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->message, sizeof(res->message), fmt, ap);
    va_end(ap);
    res->status = status;
    call_finish(c);
}

static int b64_value(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    return ch == '+' ? 62 : ch == '/' ? 63 : -1;
}

/* Standard base64; stops at '=' or anything outside the alphabet. */
static void b64_decode(funcd_buf *out, const char *s, size_t len)
{
    unsigned acc = 0, bits = 0;
    if (funcd_buf_grow(out, len / 4 * 3 + 3) < 0)
        return;
    for (size_t i = 0; i < len; i++) {
        int v = b64_value((unsigned char)s[i]);
        if (v < 0)
            break;
        acc = acc << 6 | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out->data[out->len++] = (char)(acc >> bits & 0xff);
        }
    }
    out->data[out->len] = '\0';
}

/* The shim's answer becomes the KRM result. */
static void take_answer(wcall *c, hconn *hc)
{
    funcd_eval_result *res = &c->job->res;
    const char *name = funcd_eval_job_name(c->job);
    char what[1024];
    if (hc->status != 200 || !hc->has_exit_code) {
        res->status = FUNCD_EVAL_INTERNAL;
        snprintf(res->message, sizeof(res->message), "the worker for %s answered HTTP %d%s: "
                 "%.300s", name, hc->status, hc->has_exit_code ? "" : " without "
                 "X-Funcd-Exit-Code (is its funcd-exec older than the KRM mode?)",
                 hc->body.data ? hc->body.data : "");
        return;
    }
    funcd_buf_swap_in(&res->output, &hc->body);
    funcd_buf_reset(&res->log);
    b64_decode(&res->log, hc->stderr_b64.data ? hc->stderr_b64.data : "", hc->stderr_b64.len);
    res->status = FUNCD_EVAL_OK;
    if (hc->error_hdr.len) {
        snprintf(what, sizeof(what), "function %s could not run: %s", name, hc->error_hdr.data);
        funcd_eval_set_failure(res, what);
    } else if (hc->exit_code != 0) {
        snprintf(what, sizeof(what), "function %s exited with status %d", name, hc->exit_code);
        funcd_eval_set_failure(res, what);
    }
}

static void acquire(wcall *c);

/* The worker could not be reached or broke off: evict it, and try once more
 * on another. */
static void attempt_failed(wcall *c, const char *why)
{
    char reason[600];
    snprintf(reason, sizeof(reason), "%s", why);
    call_detach(c, 1);
    if (++c->attempts < ATTEMPTS) {
        funcd_log(c->we->logger, FUNCD_LOG_WARN, "a worker of %s failed (%s); retrying on "
                  "another", c->ln->image, reason);
        acquire(c);
        return;
    }
    call_fail(c, FUNCD_EVAL_UNAVAILABLE, "the workers of %s failed %d times; last: %s",
              funcd_eval_job_name(c->job), c->attempts, reason);
}

static void on_answer(hconn *hc, const char *error, void *arg)
{
    wcall *c = arg;
    if (!error) {
        take_answer(c, hc);
        /* Back to the idle list before the slot is released: a call the
         * release grants may reuse it at once. */
        c->conn = NULL;
        if (hc->keep_alive && hc->wc->proc)
            idle_put(hc->wc, hc);
        else
            hconn_free(hc);
        call_finish(c);
        return;
    }
    if (hc->too_large) {
        call_fail(c, FUNCD_EVAL_RESOURCE_EXHAUSTED, "function %s wrote more than %zu bytes (the "
                  "message limit)", funcd_eval_job_name(c->job), c->we->max_message);
        return;
    }
    attempt_failed(c, error);
}

static void send_to(wcall *c, funcd_pool_worker *w)
{
    c->slot = w;
    worker_ctx *wc = funcd_pool_worker_data(w);
    c->conn = idle_take(wc);
    if (!c->conn && !(c->conn = hconn_open(wc))) {
        char why[300];
        snprintf(why, sizeof(why), "cannot connect to worker %s: %s", wc->replica,
                 strerror(errno));
        attempt_failed(c, why);
        return;
    }
    hconn_send(c->conn, c->head, c->head_len, c->job->req.rl, c->job->req.rl_len,
               c->we->max_message, on_answer, c);
}

static void on_granted(funcd_pool_waiter *wt, funcd_pool_worker *w, const char *error)
{
    wcall *c = CONTAINER_OF(wt, wcall, waiter);
    if (w)
        send_to(c, w);
    else
        call_fail(c, FUNCD_EVAL_UNAVAILABLE, "no worker for %s could serve: %s",
                  funcd_eval_job_name(c->job), error ? error : "unknown error");
}

static void acquire(wcall *c)
{
    funcd_pool_worker *w = NULL;
    c->waiter.granted = on_granted;
    int rc = funcd_pool_acquire(c->pool, &c->waiter, &w);
    if (rc == 0)
        send_to(c, w);
    else if (rc == -1)
        call_fail(c, FUNCD_EVAL_RESOURCE_EXHAUSTED, "every worker of %s is busy and %d "
                  "evaluations already wait", funcd_eval_job_name(c->job), QUEUE_LENGTH);
    else if (rc == -2)
        call_fail(c, FUNCD_EVAL_UNAVAILABLE, "the workers of %s were shut down",
                  funcd_eval_job_name(c->job));
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    wcall *c = arg;
    const char *name = funcd_eval_job_name(c->job);
    if (c->slot) /* dropping the connection makes the shim kill the function */
        call_fail(c, FUNCD_EVAL_DEADLINE_EXCEEDED, "function %s did not finish within %lld ms "
                  "and was killed", name, (long long)c->timeout_ms);
    else
        call_fail(c, FUNCD_EVAL_DEADLINE_EXCEEDED, "no worker of %s was free within %lld ms",
                  name, (long long)c->timeout_ms);
}

static void worker_cancel(funcd_eval_job *job)
{
    wcall *c = job->state;
    call_detach(c, 0);
    call_free(c);
}

static void worker_evaluate(funcd_evaluator *ev, funcd_eval_job *job);

static void unpark(parked *pk)
{
    worker_eval *we = pk->we;
    if (pk->prev)
        pk->prev->next = pk->next;
    else
        we->parked = pk->next;
    if (pk->next)
        pk->next->prev = pk->prev;
    if (pk->timer)
        event_free(pk->timer);
    funcd_sources_cancel(we->sources, pk);
    free(pk);
}

/* The pull ended: evaluate again (the pool exists now, or the error shows). */
static void on_image_pulled(void *payload)
{
    parked *pk = payload;
    worker_eval *we = pk->we;
    funcd_eval_job *job = pk->job;
    unpark(pk);
    worker_evaluate(&we->base, job);
}

static void on_park_deadline(evutil_socket_t fd, short what, void *arg)
{
    parked *pk = arg;
    funcd_eval_job *job = pk->job;
    unpark(pk);
    funcd_eval_finishf(job, FUNCD_EVAL_DEADLINE_EXCEEDED, "the deadline passed while pulling %s",
                       job->req.image);
}

static void park(worker_eval *we, parked *pk, funcd_eval_job *job)
{
    pk->we = we;
    pk->job = job;
    pk->next = we->parked;
    if (we->parked)
        we->parked->prev = pk;
    we->parked = pk;
    int64_t now = funcd_mono_ms();
    int64_t deadline = job->req.deadline_ms ? job->req.deadline_ms
                                            : now + FUNCD_EVAL_DEFAULT_TIMEOUT_MS;
    int64_t wait = deadline > now ? deadline - now : 0;
    struct timeval tv = {(time_t)(wait / 1000), (suseconds_t)(wait % 1000) * 1000};
    if ((pk->timer = evtimer_new(we->loop, on_park_deadline, pk)))
        evtimer_add(pk->timer, &tv);
}

/* find_pool_for: the image is being pulled; the job waits for it. */
#define EVAL_PULLING (-1000)

/* The pool that serves the job's image, or a status with the message set.
 * EVAL_PULLING: `pk` is registered to hear when the pull ends. */
static int find_pool_for(worker_eval *we, funcd_eval_job *job, parked *pk, image_pool **out)
{
    funcd_eval_result *res = &job->res;
    *out = NULL;
    if (we->off) {
        snprintf(res->message, sizeof(res->message), "%s", we->off);
        return FUNCD_EVAL_NOT_FOUND;
    }
    if (we->closed) {
        snprintf(res->message, sizeof(res->message), "the warm workers were shut down");
        return FUNCD_EVAL_UNAVAILABLE;
    }
    if (!job->req.image || !*job->req.image) {
        snprintf(res->message, sizeof(res->message), "no image given");
        return FUNCD_EVAL_NOT_FOUND;
    }
    cJSON *fc = NULL;
    if (funcd_eval_find_config(we->store, we->ns, job->req.image, "podExecutor", &fc) < 0) {
        snprintf(res->message, sizeof(res->message), "%s", funcd_error_last()->message);
        return FUNCD_EVAL_NOT_FOUND;
    }
    int pending;
    *out = pool_for(we, fc, job->req.image, 0, &pending, on_image_pulled, pk, res->message,
                    sizeof(res->message));
    cJSON_Delete(fc);
    if (!*out && pending)
        return EVAL_PULLING;
    if (!*out)
        return FUNCD_EVAL_NOT_FOUND;
    if (!program_ok((*out)->ln)) {
        snprintf(res->message, sizeof(res->message), "%s runs as a warm worker but %s is not an "
                 "executable file; materialize the image there", job->req.image,
                 (*out)->ln->program);
        return FUNCD_EVAL_NOT_FOUND;
    }
    return FUNCD_EVAL_OK;
}

static void worker_evaluate(funcd_evaluator *ev, funcd_eval_job *job)
{
    worker_eval *we = (worker_eval *)ev;
    image_pool *ip;
    parked *pk = calloc(1, sizeof(*pk));
    if (!pk) {
        funcd_eval_finishf(job, FUNCD_EVAL_INTERNAL, "out of memory evaluating %s",
                           funcd_eval_job_name(job));
        return;
    }
    int status = find_pool_for(we, job, pk, &ip);
    if (status == EVAL_PULLING) {
        park(we, pk, job);
        return;
    }
    free(pk);
    if (status != FUNCD_EVAL_OK) {
        job->res.status = status;
        funcd_eval_finish(job);
        return;
    }
    int64_t now = funcd_mono_ms();
    int64_t deadline = job->req.deadline_ms ? job->req.deadline_ms
                                            : now + FUNCD_EVAL_DEFAULT_TIMEOUT_MS;
    if (deadline <= now) {
        funcd_eval_finishf(job, FUNCD_EVAL_DEADLINE_EXCEEDED, "the deadline passed before %s ran",
                           funcd_eval_job_name(job));
        return;
    }
    wcall *c = calloc(1, sizeof(*c));
    if (c)
        c->timer = evtimer_new(we->loop, on_deadline, c);
    if (!c || !c->timer) {
        free(c);
        funcd_eval_finishf(job, FUNCD_EVAL_INTERNAL, "out of memory evaluating %s",
                           funcd_eval_job_name(job));
        return;
    }
    c->we = we;
    c->job = job;
    c->pool = ip->pool;
    funcd_pool_ref(c->pool);
    c->ln = ip->ln;
    atomic_fetch_add(&c->ln->refs, 1);
    c->timeout_ms = deadline - now;
    char id[37];
    funcd_uuid4(id);
    c->head_len = (size_t)snprintf(c->head, sizeof(c->head),
                                   "POST / HTTP/1.1\r\nHost: worker\r\nContent-Type: "
                                   "application/octet-stream\r\nContent-Length: %zu\r\n"
                                   "X-Funcd-Krm: 1\r\nX-Funcd-Invocation-Id: %s\r\n\r\n",
                                   job->req.rl_len, id);
    struct timeval tv = {c->timeout_ms / 1000, (c->timeout_ms % 1000) * 1000};
    evtimer_add(c->timer, &tv);
    job->state = c;
    job->cancel = worker_cancel;
    acquire(c);
}

/* ---- the evaluator ---------------------------------------------------- */

static int worker_start(funcd_evaluator *ev)
{
    worker_eval *we = (worker_eval *)ev;
    if (we->off || !we->store || we->watch)
        return 0;
    /* Watch first: a change after it re-lists, one before it is listed. */
    if (we->store->watch(we->store, we->prefix, we->store->revision(we->store), on_config_event,
                         we, &we->watch) < 0) {
        funcd_log(we->logger, FUNCD_LOG_WARN, "cannot watch FunctionConfigs (%s); warm workers "
                  "follow them only when evaluated", funcd_error_last()->message);
        we->watch = NULL;
    }
    reconcile(we);
    return 0;
}

static void worker_close(funcd_evaluator *ev)
{
    worker_eval *we = (worker_eval *)ev;
    if (we->closed)
        return;
    we->closed = 1;
    if (we->watch)
        we->store->unwatch(we->store, we->watch);
    we->watch = NULL;
    if (we->reconcile_ev)
        event_del(we->reconcile_ev);
    funcd_sources_cancel(we->sources, we);
    while (we->parked) {
        funcd_eval_job *job = we->parked->job;
        unpark(we->parked);
        funcd_eval_finishf(job, FUNCD_EVAL_UNAVAILABLE, "the function runner is shutting down");
    }
    while (we->pools) {
        image_pool *ip = we->pools;
        we->pools = ip->next;
        image_pool_free(ip, "the function runner is shutting down");
    }
}

static unsigned worker_live(const funcd_evaluator *ev)
{
    return ((const worker_eval *)ev)->n_live;
}

static void worker_free(funcd_evaluator *ev)
{
    worker_eval *we = (worker_eval *)ev;
    worker_close(ev);
    /* Workers still draining are killed now, so nothing outlives us. */
    while (we->live)
        worker_gone(we->live, "the function runner was freed");
    if (we->reconcile_ev)
        event_free(we->reconcile_ev);
    if (we->run_dir)
        rmdir(we->run_dir);
    free(we->functions_dir);
    free(we->shim);
    free(we->run_dir);
    free(we->ns);
    free(we->prefix);
    free(we);
}

size_t funcd_eval_worker_pids(const funcd_evaluator *ev, int *pids, size_t max)
{
    const worker_eval *we = (const worker_eval *)ev;
    size_t n = 0;
    for (const worker_ctx *wc = we->live; wc; wc = wc->next, n++)
        if (n < max)
            pids[n] = we->runtime->pid ? we->runtime->pid(we->runtime, wc->proc) : 0;
    return n;
}

unsigned funcd_eval_worker_pools(const funcd_evaluator *ev)
{
    unsigned n = 0;
    for (const image_pool *ip = ((const worker_eval *)ev)->pools; ip; ip = ip->next)
        n++;
    return n;
}

/* Why this evaluator cannot run anything with `cfg`, or NULL. */
static const char *missing_piece(const funcd_eval_config *cfg)
{
    if (!cfg->functions_dir && !cfg->sources)
        return "no functions directory is configured and images cannot be pulled";
    if (!cfg->runtime || !cfg->runtime->start || !cfg->runtime->stop || !cfg->runtime->release)
        return "no runtime is configured for warm workers";
    if (!cfg->state_dir)
        return "no state directory is configured for warm workers' sockets";
    if (!cfg->store)
        return "no store holds FunctionConfigs";
    return NULL;
}

static int setup(worker_eval *we, const funcd_eval_config *cfg)
{
    we->ns = funcd_strdup(cfg->config_namespace ? cfg->config_namespace : "default");
    if (!we->ns || asprintf(&we->prefix, "/registry/functionconfigs/%s/", we->ns) < 0)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the worker evaluator");
    if ((we->off = missing_piece(cfg)))
        return 0;
    we->functions_dir = funcd_strdup(cfg->functions_dir);
    we->sources = cfg->sources;
    if (asprintf(&we->shim, "%s/funcd-exec", cfg->shim_dir ? cfg->shim_dir : ".") < 0)
        we->shim = NULL;
    if (asprintf(&we->run_dir, "%s/fnrun", cfg->state_dir) < 0)
        we->run_dir = NULL;
    we->reconcile_ev = event_new(cfg->loop, -1, 0, on_reconcile, we);
    if ((cfg->functions_dir && !we->functions_dir) || !we->shim || !we->run_dir ||
        !we->reconcile_ev)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the worker evaluator");
    if (mkdir(we->run_dir, 0700) != 0 && errno != EEXIST)
        return funcd_error_set(FUNCD_EIO, "cannot create %s for warm workers: %s", we->run_dir,
                               strerror(errno));
    if (access(we->shim, X_OK) != 0)
        funcd_log(we->logger, FUNCD_LOG_WARN, "the exec shim %s is missing; warm workers will "
                  "not start (check funcd's shim directory)", we->shim);
    return 0;
}

int funcd_eval_worker_new(funcd_evaluator **out, const funcd_eval_config *cfg)
{
    *out = NULL;
    worker_eval *we = calloc(1, sizeof(*we));
    if (!we)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the worker evaluator");
    we->base = (funcd_evaluator){.name = "worker", .evaluate = worker_evaluate,
                                 .start = worker_start, .close = worker_close,
                                 .live_workers = worker_live, .free = worker_free};
    we->loop = cfg->loop;
    we->store = cfg->store;
    we->runtime = cfg->runtime;
    we->logger = cfg->logger;
    we->max_message = cfg->max_message ? cfg->max_message : FUNCD_EVAL_DEFAULT_MAX_MESSAGE;
    int rc = setup(we, cfg);
    if (rc < 0) {
        worker_free(&we->base);
        return rc;
    }
    *out = &we->base;
    return 0;
}
