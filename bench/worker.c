/*
 * A minimal native worker for benchmarks: one thread, epoll, HTTP/1.1
 * keep-alive, answers every request with "hello\n" (or, with $BENCH_BODY_BYTES=N,
 * N bytes of JSON: something worth compressing). It serves the worker
 * contract on $FUNCD_LISTEN (a Unix socket) and, when $BENCH_TCP_PORT is
 * set, also on 127.0.0.1:$BENCH_TCP_PORT so a TCP load generator can reach
 * it directly. Requests are expected without bodies (GET).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_CONNS 4096

static const char hello[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                            "Content-Length: 6\r\n\r\nhello\n";
static const char *response = hello;
static size_t response_len = sizeof(hello) - 1;

/* A JSON answer of `n` bytes: a list of similar records, as an API sends. */
static void json_response(size_t n)
{
    char *r = malloc(n + 128);
    if (!r || n < 16)
        exit(1);
    int h = snprintf(r, 128, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             "Content-Length: %zu\r\n\r\n", n);
    char *b = r + h;
    size_t at = 0;
    b[at++] = '[';
    for (int i = 0; at < n - 1; i++) {
        char rec[96];
        int l = snprintf(rec, sizeof(rec), "%s{\"id\":%d,\"name\":\"item-%d\",\"ok\":true}",
                         i ? "," : "", i, i * 7);
        size_t take = (size_t)l < n - 1 - at ? (size_t)l : n - 1 - at;
        memcpy(b + at, rec, take);
        at += take;
    }
    b[at++] = ']';
    response = r;
    response_len = (size_t)h + at;
}

typedef struct conn {
    int fd;
    char buf[8192];
    size_t len;
} conn;

static int listen_unix(const char *path)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%.100s", path);
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0 || listen(fd, 1024) < 0) {
        perror("worker: listen unix");
        exit(1);
    }
    return fd;
}

static int listen_tcp(int port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (fd < 0 || bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(fd, 1024) < 0) {
        perror("worker: listen tcp");
        exit(1);
    }
    return fd;
}

/* Answers every complete request head in the buffer. */
static int serve(conn *c)
{
    for (;;) {
        char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
        if (!end)
            return c->len < sizeof(c->buf) ? 0 : -1;
        size_t used = (size_t)(end + 4 - c->buf);
        if (write(c->fd, response, response_len) != (ssize_t)response_len)
            return -1;
        memmove(c->buf, c->buf + used, c->len - used);
        c->len -= used;
    }
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const char *path = getenv("FUNCD_LISTEN");
    const char *tcp = getenv("BENCH_TCP_PORT");
    const char *body = getenv("BENCH_BODY_BYTES");
    if (body && atoi(body) > 0)
        json_response((size_t)atoi(body));
    if (!path) {
        fprintf(stderr, "worker: FUNCD_LISTEN is not set\n");
        return 1;
    }
    int ep = epoll_create1(EPOLL_CLOEXEC);
    int listeners[2] = {listen_unix(path), tcp ? listen_tcp(atoi(tcp)) : -1};
    for (int i = 0; i < 2; i++) {
        if (listeners[i] < 0)
            continue;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
        ev.data.u64 = (uint64_t)i;
        epoll_ctl(ep, EPOLL_CTL_ADD, listeners[i], &ev);
    }
    struct epoll_event events[256];
    for (;;) {
        int n = epoll_wait(ep, events, 256, -1);
        for (int i = 0; i < n; i++) {
            if (events[i].data.u64 < 2) {
                int l = listeners[events[i].data.u64];
                int fd;
                while ((fd = accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    conn *c = calloc(1, sizeof(*c));
                    c->fd = fd;
                    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
                }
                continue;
            }
            conn *c = events[i].data.ptr;
            ssize_t r = read(c->fd, c->buf + c->len, sizeof(c->buf) - c->len);
            if (r > 0) {
                c->len += (size_t)r;
                if (serve(c) == 0)
                    continue;
            } else if (r < 0 && errno == EAGAIN) {
                continue;
            }
            close(c->fd);
            free(c);
        }
    }
}
