/*
 * The sandbox a worker runs in (docs/security.md, ADR 0013): new user,
 * mount, pid, ipc, uts and (by default) network namespaces; a fresh root
 * holding only what the worker needs; a minimal init as pid 1; no
 * capabilities, no_new_privs and a seccomp deny list for the worker.
 *
 * funcd_sandbox_spawn runs on the platform loop's thread and returns once
 * the worker has exec'd (or failed to: then the message names the step).
 */
#ifndef FUNCD_RUNTIME_SANDBOX_H
#define FUNCD_RUNTIME_SANDBOX_H

#include <sys/types.h>

#include "funcd/sys/runtime.h"
#include "runtime/cgroup.h"

typedef struct funcd_sandbox funcd_sandbox;

/* Compiles the seccomp filter and prepares what every start shares. */
int funcd_sandbox_new(funcd_sandbox **out, const funcd_process_options *opts);
void funcd_sandbox_free(funcd_sandbox *sb);

typedef struct funcd_sandbox_job {
    const char *prog;       /* absolute, as the worker sees it */
    char *const *argv;
    char *const *env;
    const char *cwd;        /* as the worker sees it, or NULL */
    const char *rootfs;     /* host directory that becomes "/", or NULL */
    const funcd_worker_bind *binds;
    size_t n_binds;
    int host_network;
    int fds[3];             /* the worker's stdin, stdout, stderr; -1: /dev/null */
    const funcd_worker_limits *limits; /* written into its cgroups, or NULL: none */
    /* Sockets made in its network namespace before the worker runs
     * (netns.h): `listen_fds` gets them, or -1s when the start fails. */
    const funcd_worker_listen *listen;
    size_t n_listen;
    int *listen_fds;
} funcd_sandbox_job;

/* Gives the sandbox the runtime's cgroups (which outlive it): every worker
 * then gets cgroups of its own, "w<id>" (cgroup.h), with at most
 * `default_pids` tasks unless its limits say otherwise. Blank inits made
 * from then on wait inside theirs: they were moved there (or cloned there)
 * as they were made, off the request's path, and a job that claims one
 * only writes its limits (docs/adr/0030). Call before the first refill. */
void funcd_sandbox_use_cgroups(funcd_sandbox *sb, funcd_cgroups *cg, uint32_t default_pids);

/* Tops up the blank inits (ADR 0013): sandbox inits cloned ahead of time
 * with every namespace made, ids mapped and loopback up, which a start
 * with network none takes instead of cloning. Call it on the platform
 * loop's thread (their parent-death signal follows that thread), after a
 * start rather than inside one; funcd_sandbox_free ends them. */
void funcd_sandbox_refill(funcd_sandbox *sb);

/* Starts the job's init and worker. Returns init's pid (also its process
 * group; SIGTERM to it is passed on to the worker, SIGKILL ends everything
 * in the sandbox), in `status_fd` a pipe on which init writes the
 * worker's wait status (an int) as it exits, and in `cg_id` the id of the
 * worker's cgroups (0: none; the caller removes them after the worker).
 * -1 with the error set (and no cgroup left). */
pid_t funcd_sandbox_spawn(funcd_sandbox *sb, const funcd_sandbox_job *job, int *status_fd,
                          unsigned *cg_id);

/* Attaches `binds` to the running sandbox whose init is `init_pid` (a
 * warm generic worker about to become a function's). 0, or -1 with the
 * error set. */
int funcd_sandbox_expose(funcd_sandbox *sb, pid_t init_pid, const funcd_worker_bind *binds,
                         size_t n_binds);

/* 1 when `path` needs the host's shared libraries or an interpreter (a
 * script, or an ELF file with a PT_INTERP header); 0 for a static binary. */
int funcd_sandbox_needs_system(const char *path);

#endif
