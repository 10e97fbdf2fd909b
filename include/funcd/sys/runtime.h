/*
 * funcd backend SPI — the runtime port.
 *
 * A runtime starts workers (processes, or sandboxed processes) from a spec,
 * supervises them, and stops them: SIGTERM to the whole process group, a
 * grace period, then SIGKILL. It reports exits and output lines through
 * callbacks that run on the platform loop.
 *
 * Writing a driver: embed `funcd_runtime` first, fill `version` with
 * FUNCD_RUNTIME_VERSION (FUNCD_RUNTIME_INIT), `name` and the methods.
 * Versions: funcd_platform_new takes a driver of any version from 1 to
 * FUNCD_RUNTIME_VERSION (else FUNCD_EVERSION) and refuses one that lacks a
 * slot marked required for its version (FUNCD_EINVAL). Slots are only
 * appended, under a "version N" line; an optional slot, or one appended
 * after the driver's version, is called only when the driver's version has it
 * and it is set (docs/backends.md).
 *
 * Ownership: funcd_with_runtime transfers the backend to the platform, which
 * calls `attach` once before any `start`, and `free` once at shutdown (after
 * stopping every worker). A spec is borrowed for the duration of `start`.
 * A worker handle belongs to the runtime; the caller gives it back with
 * `release` after the exit callback has run (or earlier, which kills the
 * worker without a callback). `free` kills every worker still running
 * without calling their callbacks.
 *
 * Threads: all methods and callbacks run on the platform loop's thread.
 */
#ifndef FUNCD_SYS_RUNTIME_H
#define FUNCD_SYS_RUNTIME_H

#include "funcd/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FUNCD_RUNTIME_VERSION 3

struct event_base; /* libevent: the platform loop */

typedef struct funcd_runtime funcd_runtime;
typedef struct funcd_worker funcd_worker; /* driver-defined */

typedef struct funcd_worker_limits {
    uint64_t memory_bytes; /**< 0: unlimited */
    uint32_t pids;         /**< 0: unlimited */
    uint32_t cpu_millis;   /**< 1000 = one core; 0: unlimited */
} funcd_worker_limits;

/** A host path a sandboxed worker sees (docs/security.md). */
typedef struct funcd_worker_bind {
    const char *source; /**< absolute host path (a directory or a file) */
    const char *target; /**< absolute path inside the worker's view; NULL: same as source */
    int writable;       /**< 0: read-only */
    /** Appended (in what was padding: the struct's size is unchanged).
     *  1: a copy the platform made for workers (an extracted bundle, a git
     *  checkout, an image's root, a worker's run directory): shown idmapped,
     *  what host root owns there appears as the worker's own. 0 (a path the
     *  host's users or operator named): shown with its host owners, so the
     *  worker reads only what any unprivileged user may. */
    int owned;
} funcd_worker_bind;

typedef enum funcd_worker_network {
    FUNCD_WORKER_NETWORK_NONE = 0, /**< its own network namespace: loopback only */
    FUNCD_WORKER_NETWORK_HOST = 1, /**< the daemon's network (an operator must allow it) */
} funcd_worker_network;

/** A socket a sandboxed worker finds at 127.0.0.1:`port` in its own network
 *  namespace, made before its program runs; the platform serves it from
 *  the host side (a service such as the S3 gateway or the egress proxy). */
typedef struct funcd_worker_listen {
    int type;      /**< SOCK_STREAM (listening) or SOCK_DGRAM (bound) */
    uint16_t port; /**< on 127.0.0.1 inside the worker's network namespace */
} funcd_worker_listen;

typedef struct funcd_worker_spec {
    const char *const *argv; /**< NULL-terminated; argv[0] is the program */
    const char *const *env;  /**< NULL-terminated "KEY=value" list */
    const char *cwd;         /**< working directory, or NULL */
    const char *rootfs;      /**< root filesystem for sandboxing runtimes, or NULL */
    funcd_worker_limits limits;
    /* Appended in version 2. A sandboxing runtime shows the worker only
     * these paths (plus what its program needs to run: the host's /usr and
     * libraries unless it is a static binary, or `rootfs`); argv, cwd and
     * env name paths as the worker sees them. */
    const funcd_worker_bind *binds;
    size_t n_binds;
    funcd_worker_network network;
    /* Appended in version 3. Sockets made in the worker's own network
     * namespace (network none) once it exists and before the program runs;
     * on success `listen_fds` holds `n_listen` descriptors (non-blocking,
     * close-on-exec), which belong to the caller. A runtime without network
     * namespaces fails the start with FUNCD_ENOTSUP when n_listen > 0. */
    const funcd_worker_listen *listen;
    size_t n_listen;
    int *listen_fds;
} funcd_worker_spec;

typedef enum funcd_worker_stream {
    FUNCD_WORKER_STDOUT = 1,
    FUNCD_WORKER_STDERR = 2,
} funcd_worker_stream;

typedef struct funcd_worker_events {
    /** One line of output, without its newline. */
    void (*on_output)(funcd_worker *w, funcd_worker_stream stream, const char *line, size_t len,
                      void *payload);
    /** The worker's main process exited (`status` as from waitpid). */
    void (*on_exit)(funcd_worker *w, int status, void *payload);
    void *payload;
} funcd_worker_events;

struct funcd_runtime {
    unsigned version;
    const char *name;

    /* ---- version 1: every slot required unless marked optional ---- */

    /** Binds the runtime to the platform loop; called once before start. */
    int (*attach)(funcd_runtime *rt, struct event_base *base);

    /** Starts a worker; `events` is copied. */
    int (*start)(funcd_runtime *rt, const funcd_worker_spec *spec,
                 const funcd_worker_events *events, funcd_worker **out);

    /** SIGTERM to the worker's process group, SIGKILL after `grace_ms`. */
    int (*stop)(funcd_runtime *rt, funcd_worker *w, unsigned grace_ms);

    /** The worker's main process id (for logs and tests). Optional (NULL:
     *  0, no pid shown). */
    int (*pid)(funcd_runtime *rt, funcd_worker *w);

    /** Gives the handle back once its exit has been reported. */
    void (*release)(funcd_runtime *rt, funcd_worker *w);

    /** Kills whatever still runs, then releases the runtime. */
    void (*free)(funcd_runtime *rt);

    /* ---- version 2: both optional ---- */

    /** Why an exited worker ended, when the runtime knows more than its
     *  wait status: "OOMKilled" (its memory limit), or NULL. Valid until
     *  `release`. Optional (NULL: the wait status is all there is). */
    const char *(*exit_reason)(funcd_runtime *rt, funcd_worker *w);

    /** Turns a running worker (a warm generic interpreter) into one of a
     *  particular function: `binds` appear in its view and `limits` become
     *  its own. FUNCD_ENOTSUP when the runtime cannot; the caller then
     *  starts a fresh worker instead. Optional (NULL: FUNCD_ENOTSUP). */
    int (*specialize)(funcd_runtime *rt, funcd_worker *w, const funcd_worker_bind *binds,
                      size_t n_binds, const funcd_worker_limits *limits);
};

#define FUNCD_RUNTIME_INIT {FUNCD_RUNTIME_VERSION}

/** The process runtime: each worker a process in its own process group,
 *  supervised through a pidfd (Linux 5.3 or later). */
FUNCD_EXTERN int funcd_runtime_process_new(funcd_runtime **out);

#define FUNCD_PROCESS_OPTIONS_VERSION 1

/** Settings of the process runtime that belong to the operator, never to a
 *  function. Start from FUNCD_PROCESS_OPTIONS_INIT (or
 *  funcd_process_options_init): `version` says which fields the caller's
 *  header had, so the library never reads past the caller's struct. Fields
 *  are only appended, each with the version that added it; zeroed fields
 *  take the defaults. */
typedef struct funcd_process_options {
    /** FUNCD_PROCESS_OPTIONS_VERSION (1 to the library's: else FUNCD_EVERSION). */
    unsigned version;
    /** 1 (default): workers run sandboxed (docs/security.md); -1: plain
     *  processes, for development only. */
    int sandbox;
    /** A pid file per live worker is kept here; at creation the runtime ends
     *  the workers a previous (crashed) run left behind. NULL: none. */
    const char *pid_dir;
    /** 1: a worker may ask for the host network (spec.network: host). */
    int allow_host_network;
    /** NULL-terminated syscall names taken off the sandbox's deny list. */
    const char *const *seccomp_allow;
    /** Size of a sandboxed worker's /tmp in bytes; 0: 64 MiB. */
    uint64_t tmp_bytes;
    /** Host uid and gid a sandboxed worker runs as; 0: 65534 (nobody).
     *  Never 0 (root). */
    unsigned host_uid;
    /** The funcd instance these workers belong to: 1 to 32 lowercase
     *  letters and digits, a letter first. Its cgroups are named after it, and at creation
     *  the runtime removes (tasks killed) those a previous run of the same
     *  id left; another instance's are never touched. NULL: a random id, so
     *  nothing of an earlier run is removed. funcd keeps the id in its state
     *  directory (docs/operating.md). */
    const char *instance_id;
    /* Fields of later versions are appended here. */
} funcd_process_options;

#define FUNCD_PROCESS_OPTIONS_INIT {FUNCD_PROCESS_OPTIONS_VERSION}

/** Fills `opts` with the defaults of `version` (FUNCD_PROCESS_OPTIONS_VERSION);
 *  FUNCD_EVERSION if this library does not know that version. */
FUNCD_EXTERN int funcd_process_options_init(funcd_process_options *opts, unsigned version);

/** The process runtime with operator settings (`opts` may be NULL: the
 *  defaults). FUNCD_EVERSION when `opts->version` is 0 or newer than this
 *  library's. */
FUNCD_EXTERN int funcd_runtime_process_new_with(funcd_runtime **out,
                                                const funcd_process_options *opts);

#ifdef __cplusplus
}
#endif
#endif
