/*
 * Starting a child process the way funcd starts every worker and function:
 * in its own process group, killed if the starting thread dies
 * (PR_SET_PDEATHSIG), with exactly the given stdin/stdout/stderr and no other
 * descriptor, default signal handling, an optional working directory.
 *
 * It uses vfork: the child borrows the caller's memory until it execs, so a
 * start costs no page-table copy. Between vfork and exec the child makes
 * system calls only, with every signal but SIGCHLD blocked, so no handler of the
 * parent's runs on the borrowed stack.
 */
#ifndef FUNCD_UTIL_SPAWN_H
#define FUNCD_UTIL_SPAWN_H

#include <signal.h>
#include <sys/types.h>

typedef struct funcd_spawn_spec {
    const char *path;        /* absolute program path */
    char *const *argv;       /* NULL-terminated */
    char *const *env;        /* NULL-terminated */
    const char *cwd;         /* or NULL */
    int fds[3];              /* the child's 0, 1, 2; -1: /dev/null */
} funcd_spawn_spec;

/*
 * Blocks every signal in the calling thread but SIGCHLD, saving the mask
 * in `saved`: for a thread of funcd's own, or around a vfork-like child,
 * so no handler of the host's runs there. SIGCHLD stays open because the
 * end of a child is told to the thread that made it: a thread that
 * blocks it keeps the signal pending for the whole process, where it
 * wakes a host thread's socket call or epoll_wait with EINTR; a thread
 * that does not lets an ignored SIGCHLD be dropped as it is sent.
 */
void funcd_block_signals(sigset_t *saved);

/* The child's pid (also its process group), or -1 with errno set. A
 * program that cannot be executed exits 127 (126: cannot enter cwd) after
 * saying so on its stderr. */
pid_t funcd_spawn(const funcd_spawn_spec *spec);

#endif
