#include "runtime/netns.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "funcd/sys/error.h"

typedef struct listen_job {
    pid_t pid;
    const funcd_worker_listen *listen;
    size_t n;
    int *fds;
    int err;
    char step[80];
} listen_job;

static int make_socket(const funcd_worker_listen *l)
{
    int s = socket(AF_INET, l->type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    int one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(l->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(s, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        (l->type == SOCK_STREAM && listen(s, 128) != 0)) {
        int err = errno;
        close(s);
        errno = err;
        return -1;
    }
    return s;
}

/* The thread joins the namespace (only it: a thread's network namespace
 * is its own) and ends with it. */
static void *listen_main(void *arg)
{
    listen_job *j = arg;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)j->pid);
    int ns = open(path, O_RDONLY | O_CLOEXEC);
    const char *step = "";
    if (ns < 0 || setns(ns, CLONE_NEWNET) != 0) {
        j->err = errno;
        snprintf(j->step, sizeof(j->step), "joining the network namespace");
    } else if (funcd_netns_loopback_up(&step) != 0) {
        j->err = errno;
        snprintf(j->step, sizeof(j->step), "%s", step);
    }
    if (ns >= 0)
        close(ns);
    for (size_t i = 0; i < j->n && !j->err; i++)
        if ((j->fds[i] = make_socket(&j->listen[i])) < 0) {
            j->err = errno;
            snprintf(j->step, sizeof(j->step), "127.0.0.1:%u/%s", j->listen[i].port,
                     j->listen[i].type == SOCK_DGRAM ? "udp" : "tcp");
        }
    return NULL;
}

int funcd_netns_listen(pid_t pid, const funcd_worker_listen *listen, size_t n, int *fds)
{
    for (size_t i = 0; i < n; i++)
        fds[i] = -1;
    if (!n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (listen[i].type != SOCK_STREAM && listen[i].type != SOCK_DGRAM)
            return funcd_error_set(FUNCD_EINVAL, "a worker's socket must be a stream or a "
                                   "datagram socket");
    listen_job j = {pid, listen, n, fds, 0, ""};
    pthread_t t;
    int rc = pthread_create(&t, NULL, listen_main, &j);
    if (rc != 0)
        return funcd_error_set(FUNCD_EIO, "cannot start a thread to make a worker's sockets: %s",
                               strerror(rc));
    pthread_join(t, NULL);
    if (!j.err)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (fds[i] >= 0) {
            close(fds[i]);
            fds[i] = -1;
        }
    return funcd_error_set(FUNCD_EIO, "sandbox: cannot make the worker's socket (%s): %s", j.step,
                           strerror(j.err));
}
