/*
 * The keep-alive HTTP/1.1 client over Unix sockets (lib/http/client.c)
 * against a scripted server thread: one connection carries many requests,
 * a connection the server closed while idle is never used again (even
 * before the loop saw the close), a reset before any answer is "not
 * taken" while a close after reading is "broken", and bodies framed by
 * length, chunks or the connection's end come out whole.
 */
#include <errno.h>
#include <event2/event.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"
#include "http/client.h"

enum mode { KEEP, CLOSE_AFTER_ONE, RESET, EOF_AFTER_READ, CHUNKED, UNTIL_EOF, BIG };

static struct {
    char dir[64], path[108];
    int lfd;
    enum mode mode;
    atomic_int accepts, stop;
    pthread_t thread;
    struct event_base *base;
} S;

/* Reads one request head (the tests send no bodies); 0 at EOF. */
static int read_request(int fd)
{
    char buf[4096];
    size_t len = 0;
    while (len < sizeof(buf) - 1) {
        ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
        if (n <= 0)
            return 0;
        len += (size_t)n;
        buf[len] = '\0';
        if (strstr(buf, "\r\n\r\n"))
            return 1;
    }
    return 0;
}

static void say(int fd, const char *s)
{
    size_t n = strlen(s);
    if (write(fd, s, n) != (ssize_t)n)
        perror("server write");
}

static void serve(int fd)
{
    static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    switch (S.mode) {
    case KEEP:
        while (read_request(fd))
            say(fd, ok);
        break;
    case CLOSE_AFTER_ONE:
        if (read_request(fd))
            say(fd, ok);
        break;
    case RESET:
        usleep(100000); /* the request arrives, unread */
        break;
    case EOF_AFTER_READ:
        read_request(fd);
        break;
    case CHUNKED:
        if (read_request(fd))
            say(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Funcd-Exit-Code: 7\r\n\r\n"
                    "3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n");
        break;
    case UNTIL_EOF:
        if (read_request(fd))
            say(fd, "HTTP/1.0 404 Not Found\r\n\r\nto the end");
        break;
    case BIG:
        if (read_request(fd))
            say(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
                    "0123456789012345678901234567890123456789012345678901234567890123456789"
                    "012345678901234567890123456789");
        break;
    }
    close(fd);
}

static void *server(void *arg)
{
    while (!atomic_load(&S.stop)) {
        struct pollfd p = {S.lfd, POLLIN, 0};
        if (poll(&p, 1, 20) <= 0)
            continue;
        int fd = accept(S.lfd, NULL, NULL);
        if (fd < 0)
            continue;
        atomic_fetch_add(&S.accepts, 1);
        serve(fd);
    }
    return NULL;
}

static int start(enum mode mode)
{
    snprintf(S.dir, sizeof(S.dir), "/tmp/funcd-hc-XXXXXX");
    if (!mkdtemp(S.dir))
        return -1;
    snprintf(S.path, sizeof(S.path), "%s/s.sock", S.dir);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", S.path);
    S.lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (S.lfd < 0 || bind(S.lfd, (struct sockaddr *)&sun, sizeof(sun)) != 0 ||
        listen(S.lfd, 8) != 0)
        return -1;
    S.mode = mode;
    atomic_store(&S.accepts, 0);
    atomic_store(&S.stop, 0);
    S.base = event_base_new();
    return S.base && pthread_create(&S.thread, NULL, server, NULL) == 0 ? 0 : -1;
}

static void finish(void)
{
    /* Connections freed are closed as the loop runs. */
    event_base_loop(S.base, EVLOOP_NONBLOCK);
    atomic_store(&S.stop, 1);
    pthread_join(S.thread, NULL);
    close(S.lfd);
    unlink(S.path);
    rmdir(S.dir);
    event_base_free(S.base);
}

typedef struct result {
    int done;
    funcd_http_outcome outcome;
    int status;
    char body[128];
    char exit_code[16];
} result;

static void on_done(funcd_http_call *c, funcd_http_outcome outcome, funcd_http_response *resp,
                    const char *error, void *arg)
{
    result *r = arg;
    r->done = 1;
    event_base_loopbreak(S.base); /* nothing else runs: a close after this stays unseen */
    r->outcome = outcome;
    r->status = resp->status;
    snprintf(r->body, sizeof(r->body), "%s", resp->body.data ? resp->body.data : "");
    const char *code = funcd_http_response_header(resp, "x-funcd-exit-code");
    snprintf(r->exit_code, sizeof(r->exit_code), "%s", code ? code : "");
}

/* One GET on `p`, the loop run until it is answered (at most 5 s). */
static int get(funcd_http_peer *p, result *r)
{
    static const char req[] = "GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n";
    memset(r, 0, sizeof(*r));
    if (!funcd_http_send(p, req, sizeof(req) - 1, NULL, 0, 64, on_done, r))
        return -1;
    for (int i = 0; i < 500 && !r->done; i++) {
        struct timeval tv = {0, 10000};
        event_base_loopexit(S.base, &tv);
        event_base_dispatch(S.base);
    }
    return r->done ? 0 : -1;
}

TEST(one_connection_carries_many_requests)
{
    CHECK(start(KEEP) == 0);
    funcd_http_peer *p = funcd_http_peer_new(S.base, S.path);
    result r;
    for (int i = 0; i < 3; i++) {
        CHECK(get(p, &r) == 0);
        CHECK_INT(r.outcome, FUNCD_HTTP_ANSWERED);
        CHECK_INT(r.status, 200);
        CHECK_STR(r.body, "ok");
    }
    CHECK_INT(atomic_load(&S.accepts), 1);
    CHECK_INT(funcd_http_peer_idle(p), 1);
    funcd_http_peer_free(p);
    finish();
}

TEST(a_connection_closed_while_idle_is_never_used)
{
    CHECK(start(CLOSE_AFTER_ONE) == 0);
    funcd_http_peer *p = funcd_http_peer_new(S.base, S.path);
    result r;
    CHECK(get(p, &r) == 0);
    CHECK_INT(r.outcome, FUNCD_HTTP_ANSWERED);
    /* The server closed it; the loop has not run since. */
    usleep(100000);
    CHECK(get(p, &r) == 0);
    CHECK_INT(r.outcome, FUNCD_HTTP_ANSWERED);
    CHECK_STR(r.body, "ok");
    CHECK_INT(atomic_load(&S.accepts), 2);
    /* Closed while idle with the loop running: dropped from the list. */
    for (int i = 0; i < 100 && funcd_http_peer_idle(p); i++) {
        struct timeval tv = {0, 10000};
        event_base_loopexit(S.base, &tv);
        event_base_dispatch(S.base);
    }
    CHECK_INT(funcd_http_peer_idle(p), 0);
    funcd_http_peer_free(p);
    finish();
}

/* One GET to a fresh server in `mode`; 0, or -1 when there was no answer
 * at all. `idle`: the peer's idle connections after it. */
static int get_once(enum mode mode, result *r, unsigned *idle)
{
    if (start(mode) != 0)
        return -1;
    funcd_http_peer *p = funcd_http_peer_new(S.base, S.path);
    int rc = p ? get(p, r) : -1;
    *idle = p ? funcd_http_peer_idle(p) : 0;
    funcd_http_peer_free(p);
    finish();
    return rc;
}

TEST(a_reset_before_any_answer_is_not_taken_a_close_after_reading_is_broken)
{
    result r;
    unsigned idle;
    CHECK(get_once(RESET, &r, &idle) == 0);
    CHECK_INT(r.outcome, FUNCD_HTTP_NOT_TAKEN);
    CHECK(get_once(EOF_AFTER_READ, &r, &idle) == 0);
    CHECK_INT(r.outcome, FUNCD_HTTP_BROKEN);
}

TEST(no_server_no_call)
{
    funcd_http_peer *p = funcd_http_peer_new(NULL, "/nonexistent/funcd-test.sock");
    CHECK(funcd_http_send(p, "x", 1, NULL, 0, 64, on_done, NULL) == NULL);
    CHECK_INT(errno, ENOENT);
    funcd_http_peer_free(p);
}

TEST(bodies_by_chunks_by_close_and_over_the_limit)
{
    result r;
    unsigned idle;
    CHECK(get_once(CHUNKED, &r, &idle) == 0);
    CHECK_INT(r.outcome, FUNCD_HTTP_ANSWERED);
    CHECK_STR(r.body, "abcdefg");
    CHECK_STR(r.exit_code, "7");
    CHECK(get_once(UNTIL_EOF, &r, &idle) == 0);
    CHECK_INT(r.outcome, FUNCD_HTTP_ANSWERED);
    CHECK_INT(r.status, 404);
    CHECK_STR(r.body, "to the end");
    CHECK_INT(idle, 0); /* a body that ends with the connection ends it */
    CHECK(get_once(BIG, &r, &idle) == 0);
    CHECK_INT(r.outcome, FUNCD_HTTP_TOO_LARGE); /* 100 bytes where 64 may come */
    CHECK_INT(r.status, 200);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as the platform does */
    RUN(one_connection_carries_many_requests);
    RUN(a_connection_closed_while_idle_is_never_used);
    RUN(a_reset_before_any_answer_is_not_taken_a_close_after_reading_is_broken);
    RUN(no_server_no_call);
    RUN(bodies_by_chunks_by_close_and_over_the_limit);
    return HARNESS_END();
}
