/*
 * Pid files of live workers (crash-only restarts, docs/security.md): one
 * file "<dir>/<pid>" per worker, holding its pid, start time (field 22 of
 * /proc/<pid>/stat), process group and cgroup directories. A runtime
 * created over the same directory ends what a crashed run left behind.
 */
#ifndef FUNCD_RUNTIME_PIDFILE_H
#define FUNCD_RUNTIME_PIDFILE_H

#include <stddef.h>
#include <sys/types.h>

/* Writes the file (atomically: a temporary file renamed); `cgroups` is a
 * list of `n` directories (empty strings are skipped). 0 or -1. */
int funcd_pidfile_write(const char *dir, pid_t pid, const char *const *cgroups, size_t n);
void funcd_pidfile_remove(const char *dir, pid_t pid);
/* For every file whose process still exists with the recorded start
 * time: SIGKILL its process group and its cgroups' tasks. Then removes
 * the file (and the cgroup directories). Returns how many it ended. */
unsigned funcd_pidfile_end_stale(const char *dir);
/* The start time of `pid` in clock ticks since boot, or 0. */
unsigned long long funcd_pid_start_time(pid_t pid);

#endif
