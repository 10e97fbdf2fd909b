/*
 * bench/edge-cost.sh runs funcd under valgrind 3.19, which knows no
 * pidfd_open (ENOSYS), without which funcd cannot supervise a worker. This
 * preload answers pidfd_open with an eventfd that never becomes readable:
 * funcd then never learns that a worker ended, which a measurement of warm
 * requests to workers that run throughout does not need. Every other
 * system call goes through. For measuring only: never in production.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdarg.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>

__attribute__((visibility("default"))) long syscall(long number, ...)
{
    va_list ap;
    va_start(ap, number);
    long a[6];
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (number == SYS_pidfd_open)
        return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    static long (*real)(long, ...);
    if (!real)
        real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    return real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
