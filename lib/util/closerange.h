/*
 * close_range(2) for a child between fork (or vfork) and exec, where only
 * system calls may run: every descriptor in [from, to] is closed, or marked
 * close-on-exec with CLOSE_RANGE_CLOEXEC. Where the kernel refuses the call
 * (before 5.9, or 5.11 for the close-on-exec form, or a seccomp profile of
 * the host's that does not know it), each descriptor up to the descriptor
 * limit is handled by a call of its own: slower, but no descriptor of the
 * parent's ever reaches the program because a call failed unseen.
 */
#ifndef FUNCD_UTIL_CLOSERANGE_H
#define FUNCD_UTIL_CLOSERANGE_H

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The kernel's default ceiling on descriptor numbers (fs.nr_open). */
#define FUNCD_FD_CEILING (1u << 20)

static inline void funcd_close_range(unsigned from, unsigned to, unsigned flags)
{
    if (from > to || syscall(SYS_close_range, from, to, flags) == 0)
        return;
    /* A descriptor may sit above a limit lowered after it was opened: go
     * to the larger of the two limits, within the kernel's ceiling. */
    struct rlimit rl = {FUNCD_FD_CEILING, FUNCD_FD_CEILING};
    getrlimit(RLIMIT_NOFILE, &rl);
    rlim_t limit = rl.rlim_cur > rl.rlim_max ? rl.rlim_cur : rl.rlim_max;
    if (limit == 0)
        return; /* no descriptor can be open */
    unsigned last = limit == RLIM_INFINITY || limit > FUNCD_FD_CEILING ? FUNCD_FD_CEILING - 1
                                                                       : (unsigned)limit - 1;
    if (last > to)
        last = to;
    for (unsigned fd = from; fd <= last; fd++) {
        if (flags & CLOSE_RANGE_CLOEXEC)
            fcntl((int)fd, F_SETFD, FD_CLOEXEC);
        else
            close((int)fd);
    }
}

#endif
