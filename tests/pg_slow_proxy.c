/* A slow link to the test's PostgreSQL (pg_slow_proxy.h). */
#include "pg_slow_proxy.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define SOCKET_NAME ".s.PGSQL.5432"
#define SLICE_MS 50

static int unix_addr(struct sockaddr_un *a, const char *dir)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path, sizeof(a->sun_path), "%s/" SOCKET_NAME, dir);
    return n > 0 && (size_t)n < sizeof(a->sun_path) ? 0 : -1;
}

static int write_all(int fd, const char *b, size_t n)
{
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

typedef struct link_arg {
    pg_slow_proxy *p;
    int i;
} link_arg;

/* Client to server at once; server to client per_slice bytes a slice. */
static void *link_main(void *arg)
{
    link_arg a = *(link_arg *)arg;
    free(arg);
    pg_slow_proxy *p = a.p;
    int client = p->fds[a.i][0], server = p->fds[a.i][1];
    char *buf = malloc(p->per_slice > 65536 ? p->per_slice : 65536);
    int sent = 0; /* client writes: the first is its startup packet */
    while (buf && !atomic_load(&p->stop)) {
        struct pollfd f[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
        if (poll(f, 2, SLICE_MS) < 0 && errno != EINTR)
            break;
        if (f[0].revents) {
            ssize_t n = read(client, buf, 65536);
            if (n <= 0 || write_all(server, buf, (size_t)n) < 0)
                break;
            sent++;
        }
        if (f[1].revents) {
            ssize_t n = read(server, buf, p->per_slice);
            if (n <= 0)
                break;
            if (sent > 1 && atomic_load(&p->mute))
                continue; /* swallowed */
            if (write_all(client, buf, (size_t)n) < 0)
                break;
            usleep(SLICE_MS * 1000); /* the link's rate */
        }
    }
    free(buf);
    shutdown(client, SHUT_RDWR);
    shutdown(server, SHUT_RDWR);
    return NULL;
}

static void *accept_main(void *arg)
{
    pg_slow_proxy *p = arg;
    while (!atomic_load(&p->stop)) {
        struct pollfd f = {p->listen_fd, POLLIN, 0};
        if (poll(&f, 1, SLICE_MS) <= 0)
            continue;
        int client = accept4(p->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (client < 0)
            continue;
        struct sockaddr_un a;
        int server = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int i = atomic_load(&p->n_conns);
        link_arg *la = malloc(sizeof(*la));
        if (i >= PG_SLOW_PROXY_CONNS || !la || server < 0 || unix_addr(&a, p->server) < 0 ||
            connect(server, (struct sockaddr *)&a, sizeof(a)) != 0) {
            fprintf(stderr, "  slow proxy: cannot forward a connection\n");
            free(la);
            close(client);
            if (server >= 0)
                close(server);
            continue;
        }
        p->fds[i][0] = client;
        p->fds[i][1] = server;
        la->p = p;
        la->i = i;
        if (pthread_create(&p->conns[i], NULL, link_main, la) != 0) {
            free(la);
            close(client);
            close(server);
            continue;
        }
        atomic_store(&p->n_conns, i + 1);
    }
    return NULL;
}

int pg_slow_proxy_start(pg_slow_proxy *p, const char *server_dir, size_t bytes_per_second)
{
    memset(p, 0, sizeof(*p));
    p->listen_fd = -1;
    const char *tmp = getenv("TMPDIR");
    snprintf(p->dir, sizeof(p->dir), "%s/funcd-pgslow-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    snprintf(p->server, sizeof(p->server), "%s", server_dir);
    p->per_slice = bytes_per_second * SLICE_MS / 1000;
    if (p->per_slice == 0)
        p->per_slice = 1;
    struct sockaddr_un a;
    if (!mkdtemp(p->dir) || unix_addr(&a, p->dir) < 0) {
        fprintf(stderr, "  slow proxy: cannot make its directory: %s\n", strerror(errno));
        return -1;
    }
    p->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (p->listen_fd < 0 || bind(p->listen_fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(p->listen_fd, 16) != 0 || pthread_create(&p->acceptor, NULL, accept_main, p) != 0) {
        fprintf(stderr, "  slow proxy: cannot listen at %s: %s\n", a.sun_path, strerror(errno));
        pg_slow_proxy_stop(p);
        return -1;
    }
    p->started = 1;
    return 0;
}

void pg_slow_proxy_stop(pg_slow_proxy *p)
{
    atomic_store(&p->stop, 1);
    if (p->started)
        pthread_join(p->acceptor, NULL);
    p->started = 0;
    int n = atomic_load(&p->n_conns);
    for (int i = 0; i < n; i++) {
        pthread_join(p->conns[i], NULL);
        close(p->fds[i][0]);
        close(p->fds[i][1]);
    }
    atomic_store(&p->n_conns, 0);
    if (p->listen_fd >= 0)
        close(p->listen_fd);
    p->listen_fd = -1;
    char path[320];
    snprintf(path, sizeof(path), "%s/" SOCKET_NAME, p->dir);
    unlink(path);
    rmdir(p->dir);
}
