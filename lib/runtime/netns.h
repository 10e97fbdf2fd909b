/*
 * Sockets placed in a sandboxed worker's network namespace (the runtime
 * port's `listen`, version 3): made by a short-lived thread that joins the
 * namespace, so that they exist before the worker's program runs, while
 * funcd serves them from the host side.
 */
#ifndef FUNCD_RUNTIME_NETNS_H
#define FUNCD_RUNTIME_NETNS_H

#include <sys/types.h>

#include "funcd/sys/runtime.h"

/* Brings the loopback interface of the calling thread's network namespace
 * up. System calls only (in sandbox-child.c: the sandbox init calls it
 * too). 0, or -1 with errno set and `step` naming what failed. */
int funcd_netns_loopback_up(const char **step);

/* Makes `n` sockets at 127.0.0.1 in the network namespace of process
 * `pid` (its loopback brought up first): streams listening, datagrams
 * bound. `fds` gets them (non-blocking, close-on-exec). 0, or -1 with the
 * error set and no socket left open. */
int funcd_netns_listen(pid_t pid, const funcd_worker_listen *listen, size_t n, int *fds);

#endif
