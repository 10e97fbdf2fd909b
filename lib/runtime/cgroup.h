/*
 * Per-worker cgroups on the cgroup v1 controllers these machines have
 * (memory, pids, cpu): each runtime makes a directory "funcd-<pid>-<n>" under
 * the process's own cgroup of each controller, and each worker a
 * "w<id>" below it, removed when the worker is reaped.
 */
#ifndef FUNCD_RUNTIME_CGROUP_H
#define FUNCD_RUNTIME_CGROUP_H

#include <stdint.h>
#include <sys/types.h>

#include "funcd/sys/runtime.h"

enum { FUNCD_CG_MEMORY, FUNCD_CG_PIDS, FUNCD_CG_CPU, FUNCD_CG_COUNT };

typedef struct funcd_cgroups {
    char base[FUNCD_CG_COUNT][400]; /* "" where the controller is unavailable */
} funcd_cgroups;

/* Finds the controllers and makes this runtime's directories, removing
 * those of runs whose process is gone. Never fails: a controller that is
 * not writable is left out (funcd_cgroup_make then refuses limits on it). */
void funcd_cgroups_init(funcd_cgroups *cg);
/* Removes this runtime's directories (workers' first). */
void funcd_cgroups_fini(funcd_cgroups *cg);

/* Makes worker `id`'s cgroups with the limits (a zero limit: none, except
 * `default_pids`). 0, or FUNCD_EIO/FUNCD_ENOTSUP with the message set. */
int funcd_cgroup_make(const funcd_cgroups *cg, unsigned id, const funcd_worker_limits *lim,
                      uint32_t default_pids);
/* Sets worker `id`'s limits (those not zero) on cgroups made before. */
int funcd_cgroup_set_limits(const funcd_cgroups *cg, unsigned id, const funcd_worker_limits *lim);
/* Moves `pid` (and so everything it starts) into worker `id`'s cgroups. */
int funcd_cgroup_attach(const funcd_cgroups *cg, unsigned id, pid_t pid);
/* 1 when the kernel's OOM killer killed a task of worker `id`. */
int funcd_cgroup_oom_killed(const funcd_cgroups *cg, unsigned id);
/* Kills what is left in worker `id`'s cgroups and removes them. */
void funcd_cgroup_remove(const funcd_cgroups *cg, unsigned id);
/* Worker `id`'s directory of controller `ctl` into `out` ("" if none). */
void funcd_cgroup_path(const funcd_cgroups *cg, int ctl, unsigned id, char *out, size_t len);

/* SIGKILLs every task listed in `dir`/cgroup.procs and removes `dir`
 * (used for a crashed run's leftovers too). */
void funcd_cgroup_kill_dir(const char *dir);

#endif
