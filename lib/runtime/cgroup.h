/*
 * Per-worker cgroups for the controllers funcd limits (memory, pids, cpu):
 * each runtime makes a directory "funcd-<instance>-<n>" under the process's
 * own cgroup, and each worker a "w<id>" below it, removed when the worker
 * is reaped. <instance> is the funcd instance's id (kept in its state
 * directory, docs/adr/0019): only directories of that id are ever cleaned
 * up as a crashed run's leftovers.
 *
 * Two layouts, chosen at init (docs/adr/0042-cgroup-v2.md): cgroup v2, one
 * hierarchy (a stock Debian 12 host), where workers are cloned straight
 * into their cgroup (CLONE_INTO_CGROUP) and killed with cgroup.kill; or
 * the cgroup v1 controllers mounted one by one (these machines), with one
 * directory per controller and a task moved into each.
 */
#ifndef FUNCD_RUNTIME_CGROUP_H
#define FUNCD_RUNTIME_CGROUP_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "funcd/sys/runtime.h"

enum { FUNCD_CG_MEMORY, FUNCD_CG_PIDS, FUNCD_CG_CPU, FUNCD_CG_COUNT };

#define FUNCD_CGROUP_MAX_INSTANCE_ID 32

/* Used by tests only: a cgroup2 mount point that funcd then uses (cgroup v2
 * layout) even where the cgroup v1 controllers are there, so that placement
 * and cgroup.kill can be tested on a host whose cgroup2 mount has no
 * controllers. Never set it in production. */
#define FUNCD_CGROUP2_TEST_ROOT_ENV "FUNCD_TEST_CGROUP2_ROOT"

typedef struct funcd_cgroups {
    int v2; /* 1: the cgroup v2 layout (`dir`); 0: v1 (or none) */
    char dir[400]; /* v2: the runtime's directory, even with no controller in it */
    /* The runtime's directory of each controller, "" where it is
     * unavailable (on v2 `dir` where the controller is enabled). */
    char base[FUNCD_CG_COUNT][400];
    char instance[FUNCD_CGROUP_MAX_INSTANCE_ID + 1];
    atomic_uint next_id; /* the last worker id handed out (funcd_cgroup_next_id) */
} funcd_cgroups;

/* 1 when `id` is 1 to 32 lowercase letters and digits, a letter first. */
int funcd_cgroup_instance_id_ok(const char *id);
/* "i" and 16 random hex digits into `out` (at least 18 bytes). 0 or
 * FUNCD_EIO. */
int funcd_cgroup_random_instance_id(char *out, size_t len);

/* Finds the controllers and makes this runtime's directories, first
 * removing (tasks killed) the "funcd-<instance_id>-*" a previous run of the
 * same instance left. `instance_id` NULL (or not valid): a random one, so
 * nothing is removed. Never fails: a controller that is not writable is
 * left out (funcd_cgroup_make then refuses limits on it). */
void funcd_cgroups_init(funcd_cgroups *cg, const char *instance_id);
/* Removes this runtime's directories (workers' first). */
void funcd_cgroups_fini(funcd_cgroups *cg);

/* 0 when every limit that is set has its controller; FUNCD_ENOTSUP with
 * the message naming the spec field otherwise. */
int funcd_cgroup_check(const funcd_cgroups *cg, const funcd_worker_limits *lim);
/* Makes worker `id`'s cgroups with the limits (a zero limit: none, except
 * `default_pids`). 0, or FUNCD_EIO/FUNCD_ENOTSUP with the message set. */
int funcd_cgroup_make(const funcd_cgroups *cg, unsigned id, const funcd_worker_limits *lim,
                      uint32_t default_pids);
/* A fresh worker id (any thread): the name of its cgroups, "w<id>". */
unsigned funcd_cgroup_next_id(funcd_cgroups *cg);
/* Makes blank `id`'s cgroups ahead of any job: every available controller
 * (memory too, so that a limit can be written when a job claims it), no
 * limit but `default_pids`. 0, or FUNCD_EIO with the message set. */
int funcd_cgroup_make_blank(const funcd_cgroups *cg, unsigned id, uint32_t default_pids);
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
/* Worker `id`'s distinct directories (v2: one; v1: one per controller),
 * at most FUNCD_CG_COUNT. Returns how many. */
size_t funcd_cgroup_dirs(const funcd_cgroups *cg, unsigned id, char out[][512]);
/* v2: a descriptor of worker `id`'s cgroup for clone3(CLONE_INTO_CGROUP),
 * made before (the caller closes it); -1 on v1 or when there is none. */
int funcd_cgroup_open(const funcd_cgroups *cg, unsigned id);
/* How many times this process moved a worker into a cgroup (a write to
 * cgroup.procs): none on the v2 cold path. */
unsigned long funcd_cgroup_moves(void);
/* What the last funcd_cgroups_init has to tell the operator (the layout
 * chosen, or why limits are off): FUNCD_LOG_* level, or -1 when nothing. */
int funcd_cgroup_note(char *out, size_t len);

/* ---- layout detection (pure: text in, for tests too) ---- */
/* Funcd's own cgroup2 directory from /proc/self/cgroup's "0::" line and
 * /proc/self/mountinfo's cgroup2 mount (its mount point `mnt_override`
 * when not NULL). 1, or 0 when either is missing. */
int funcd_cgroup2_own_dir(const char *proc_cgroup, const char *mountinfo,
                          const char *mnt_override, char *out, size_t len);
/* The FUNCD_CG_* bits (1 << ctl) of a space-separated controller list
 * (cgroup.controllers, cgroup.subtree_control). */
unsigned funcd_cgroup_mask(const char *list);
/* 1 when the v2 layout is used: it offers every controller funcd limits
 * with, or v1 offers none (v2 then at least places and kills), or a test
 * forces it. */
int funcd_cgroup_choose_v2(unsigned v2_mask, unsigned v1_mask, int v2_usable, int forced);

/* SIGKILLs every task listed in `dir`/cgroup.procs and removes `dir`
 * (used for a crashed run's leftovers too). */
void funcd_cgroup_kill_dir(const char *dir);

/* The cgroup2 mount point and its options from /proc/self/mountinfo: 1,
 * or 0 when there is none. */
int funcd_cgroup2_options(char *mnt, size_t mnt_len, char *opts, size_t opts_len);

typedef struct funcd_cgroup2_saved {
    char mnt[512];
    int changed; /* funcd set favordynmods: restore clears it */
} funcd_cgroup2_saved;

/* Sets "favordynmods" on the host's cgroup2 mount (host-wide). 1 when
 * set now, 0 when it already was (then restore leaves it), or
 * FUNCD_ENOTSUP / FUNCD_EIO with the message set. */
int funcd_cgroup2_favor_dynmods(funcd_cgroup2_saved *saved);
/* Clears the flag again if funcd_cgroup2_favor_dynmods set it. 0 or
 * FUNCD_EIO. */
int funcd_cgroup2_restore(funcd_cgroup2_saved *saved);

#endif
