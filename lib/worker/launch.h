/*
 * Workers from a launch description: the one mechanism behind both front
 * doors' worker pools (the serving layer's Functions, the function
 * runner's FunctionConfig images). A launch says what every worker of one
 * version runs -- argv, env, working directory, root, host paths it sees,
 * limits, network -- and becomes lib/pool's hooks (funcd_launch_pool_ops):
 * each worker gets its own runtime directory (<run_dir>/wN, its socket
 * worker.sock, removed when it ends), FUNCD_LISTEN and FUNCD_REPLICA, one
 * readiness probe (GET /_/ready, the whole answer read; 200 or 404 is
 * ready: docs/worker-contract.md), one mapping of its exit to the pool, and
 * one termination reason for the callers of requests it took
 * (funcd_worker_end).
 *
 * The owner (serving, fnrunner) keeps what is its own through hooks: the
 * worker's output, its readiness and exit, per-worker data the pool hands
 * out (funcd_pool_worker_data points at `data_size` zeroed bytes, e.g. the
 * gateway's funcd_serving_worker), and a process to adopt instead of
 * starting one (a warm interpreter).
 *
 * Threads: the platform loop, except funcd_worker_ctx_end (any thread).
 */
#ifndef FUNCD_WORKER_LAUNCH_H
#define FUNCD_WORKER_LAUNCH_H

#include <event2/event.h>
#include <stdatomic.h>
#include <stddef.h>

#include "funcd/sys/runtime.h"
#include "http/client.h"
#include "pool/pool.h"

typedef struct funcd_workers funcd_workers; /* every worker of one owner */
typedef struct funcd_launch funcd_launch;
typedef struct funcd_worker_ctx funcd_worker_ctx;

/* Where an image's worker sees its runtime directory. */
#define FUNCD_IMAGE_RUN_DIR "/run/funcd"
/* The exec shim an image's worker runs, copied into that directory. */
#define FUNCD_IMAGE_EXEC_SHIM FUNCD_IMAGE_RUN_DIR "/funcd-exec"

/* How a worker's process ended: what the callers of requests it took are
 * told. Never its output, never a host path. */
typedef struct funcd_worker_end {
    char reason[32];   /* "OOMKilled", or "" */
    char message[160]; /* "replica f-3 exited with status 3", "... was killed by signal 9 (SIGKILL)" */
} funcd_worker_end;

#define FUNCD_LAUNCH_MAX_LISTEN 8

typedef struct funcd_launch_spec {
    const char *name; /* replicas are NAME-N */
    const char *const *argv; /* as the worker sees paths */
    const char *const *env;  /* FUNCD_LISTEN and FUNCD_REPLICA are added per worker */
    const char *cwd;
    const char *rootfs; /* an image's root, or NULL */
    funcd_worker_limits limits;
    funcd_worker_network network;
    /* Host paths the worker sees besides its runtime directory (shown
     * writable and as its own: at FUNCD_IMAGE_RUN_DIR with a rootfs, at
     * its host path without). */
    const funcd_worker_bind *binds;
    size_t n_binds;
    /* A host file copied (or hard-linked) into the runtime directory as
     * funcd-exec before the worker starts, or NULL. */
    const char *exec_shim;
    const char *memory_field; /* named when the worker is OOMKilled, or NULL */
    unsigned stop_grace_ms;   /* SIGTERM, then SIGKILL after this */
    /* The probe's connection stays open for the owner's first request
     * (funcd_worker_ctx_peer); without it the probe closes it, so that a
     * worker serving one connection at a time is free for the next. */
    int keep_probe_connection;
    /* Each worker is told where its local API socket is (FUNCD_API=unix:
     * its runtime directory's api.sock, as the worker sees it); the owner
     * listens there (lib/localapi), from its prepare hook. */
    int local_api;
    /* Sockets each worker finds in its network namespace before its
     * program runs (the runtime port's listen); the owner gets them from
     * the `listening` hook. A worker the owner hands over (adopt) has none. */
    const funcd_worker_listen *listen;
    size_t n_listen;
} funcd_launch_spec;

typedef struct funcd_launch_hooks {
    size_t data_size; /* the owner's per-worker data */
    /* Before the process starts (its directory and replica are known). */
    void (*prepare)(funcd_worker_ctx *w, void *data, void *payload);
    /* 0 when the owner hands over a running process for `w` (its events
     * must be forwarded to funcd_worker_ctx_events), -1 to start one. */
    int (*adopt)(funcd_worker_ctx *w, const char *const *env, funcd_worker **proc,
                 void *payload);
    void (*output)(funcd_worker_ctx *w, funcd_worker_stream stream, const char *line, size_t len,
                   void *payload);
    void (*ready)(funcd_worker_ctx *w, void *payload);
    /* The process started with the spec's `listen` sockets, in that order:
     * the owner's from now on (without the hook they are closed). */
    void (*listening)(funcd_worker_ctx *w, void *data, const int *fds, size_t n, void *payload);
    /* The process ended (`status` as from waitpid); the pool is told next. */
    void (*exited)(funcd_worker_ctx *w, int status, const funcd_worker_end *end, void *payload);
    void (*changed)(funcd_pool *p, void *payload);
    void (*dispose)(funcd_worker_ctx *w, void *data, void *payload);
    /* The launch is freed: let go of `payload`. */
    void (*release)(void *payload);
    void *payload;
} funcd_launch_hooks;

/* ---- the owner's workers ---------------------------------------------- */

/* Workers started by the runtime `rt` on `loop`, each in a new directory
 * below `run_dir` (created). */
int funcd_workers_new(funcd_workers **out, struct event_base *loop, funcd_runtime *rt,
                      const char *run_dir);
/* Processes started and not yet exited. */
unsigned funcd_workers_live(const funcd_workers *ws);
/* The process ids of up to `max` of them; returns how many there are. */
size_t funcd_workers_pids(const funcd_workers *ws, int *pids, size_t max);
/* Kills every process still running (no exit callbacks; their pools are
 * told) and frees `ws`. */
void funcd_workers_free(funcd_workers *ws);

/* ---- launches --------------------------------------------------------- */

/* Copies `spec`; takes `hooks` (its payload is released with the launch,
 * also when this fails). */
int funcd_launch_new(funcd_launch **out, funcd_workers *ws, const funcd_launch_spec *spec,
                     const funcd_launch_hooks *hooks);
void funcd_launch_ref(funcd_launch *ln);
void funcd_launch_unref(funcd_launch *ln);
/* The pool hooks that start, stop and dispose of this launch's workers. */
funcd_pool_ops funcd_launch_pool_ops(funcd_launch *ln);

/* ---- one worker ------------------------------------------------------- */

/* One worker. Its owner reads the fields; lib/worker writes them. */
struct funcd_worker_ctx {
    funcd_launch *ln;
    funcd_pool_worker *pw;
    funcd_worker *proc; /* NULL once it ended */
    char dir[128];      /* its runtime directory (host path) */
    char sock[108];     /* its socket (host path) */
    char replica[96];   /* NAME-N */
    funcd_http_peer *peer;
    funcd_http_call *probe;
    struct event *probe_timer;
    unsigned probe_delay_us, probe_attempts;
    int ready;    /* it answered the readiness probe */
    int prepared; /* the owner's data was prepared (and is disposed of) */
    char last_stderr[400];
    atomic_int ended;
    funcd_worker_end end;
    funcd_worker_ctx *prev, *next; /* the live list while the process runs */
    max_align_t data[];            /* the owner's: what the pool hands out */
};

funcd_worker_ctx *funcd_worker_ctx_of(const funcd_pool_worker *pw);
/* Talks to the worker (keep-alive connections); NULL once it ended. */
funcd_http_peer *funcd_worker_ctx_peer(const funcd_worker_ctx *w);
/* How the process ended, or NULL while it runs. Any thread. */
const funcd_worker_end *funcd_worker_ctx_end(const funcd_worker_ctx *w);
/* Where an adopted process's events go. */
funcd_worker_events funcd_worker_ctx_events(funcd_worker_ctx *w);

#endif
