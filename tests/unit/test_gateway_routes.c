/*
 * The embedded gateway's route table changed while its threads serve
 * requests (lib/gateway/embedded.c: each gateway thread reads the table
 * under its own lock, a change takes them all). Two client threads keep
 * keep-alive connections busy (the kernel spreads them over the two gateway
 * threads) with requests for a route that is always there and one that comes
 * and goes, while the test replaces the first, sets and removes the second
 * and churns a hundred others, each with an edge (limits, CORS, headers,
 * gzip) so that the limiter handed over and the shaping referenced by
 * requests in flight are exercised too. Every answer must be the one the
 * table allowed at some moment: "a" always 503 (known, no workers), "b" 503
 * or 404; anything else, a crash or (under ASan) a use after free fails.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../harness.h"
#include "funcd/sys/gateway.h"

#define CLIENTS 2
#define CHANGES 3000

static atomic_int done;

typedef struct client {
    int port;
    long a_ok, b_ok, b_gone, bad;
    char bad_line[160];
} client;

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
        return fd;
    if (fd >= 0)
        close(fd);
    return -1;
}

/* One request on `fd`; its status, or -1 when the connection failed. */
static int get(int fd, const char *path, char *line, size_t line_len)
{
    char req[256], buf[8192];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\nOrigin: https://o.example\r\n"
                                       "Accept-Encoding: gzip\r\n\r\n", path);
    if (write(fd, req, (size_t)n) != n)
        return -1;
    size_t have = 0;
    char *end = NULL;
    while (!end) {
        ssize_t r = read(fd, buf + have, sizeof(buf) - 1 - have);
        if (r <= 0)
            return -1;
        have += (size_t)r;
        buf[have] = '\0';
        end = strstr(buf, "\r\n\r\n");
        if (!end && have == sizeof(buf) - 1)
            return -1;
    }
    const char *cl = strcasestr(buf, "\r\ncontent-length:");
    if (!cl || cl > end) {
        if (getenv("DBG")) fprintf(stderr, "no length: %s\n", buf);
        return -1;
    }
    size_t body = strtoul(cl + 17, NULL, 10), head = (size_t)(end + 4 - buf);
    for (size_t got = have - head; got < body;) {
        ssize_t r = read(fd, buf, sizeof(buf) < body - got ? sizeof(buf) : body - got);
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    snprintf(line, line_len, "%.*s", (int)strcspn(buf, "\r"), buf);
    return atoi(buf + 9);
}

static void *run_client(void *p)
{
    client *c = p;
    int fd = dial(c->port);
    char line[160];
    for (long i = 0; fd >= 0 && !atomic_load(&done); i++) {
        int st = get(fd, i % 2 ? "/fn/default/b/x" : "/fn/default/a/", line, sizeof(line));
        if (i % 2 == 0 && st == 503)
            c->a_ok++;
        else if (i % 2 && st == 503)
            c->b_ok++;
        else if (i % 2 && st == 404)
            c->b_gone++;
        else if (!c->bad++)
            snprintf(c->bad_line, sizeof(c->bad_line), "%s: %s (status %d)",
                     i % 2 ? "b" : "a", st < 0 ? "connection failed" : line, st);
        if (st < 0) { /* a new connection, so the test goes on */
            close(fd);
            fd = dial(c->port);
        }
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

static int set(funcd_gateway *g, const char *name, const funcd_edge *edge, unsigned k)
{
    funcd_route r = {.namespace_ = "default", .name = name, .timeout_ms = 1000 + k,
                     .target = NULL, .edge = edge};
    return g->set_route(g, &r);
}

TEST(routes_change_under_requests)
{
    static const char *const origins[] = {"https://o.example"};
    static const char *const methods[] = {"GET", "POST"};
    static const funcd_edge_header set_hdr[] = {{"X-Frame-Options", "DENY"}};
    static const char *const remove_hdr[] = {"Server"};
    funcd_edge edge = {.auth = FUNCD_EDGE_AUTH_OPEN,
                       .rps = 1000000,
                       .burst = 1000000,
                       .max_in_flight = 100000,
                       .has_cors = 1,
                       .cors_allow_origins = origins,
                       .n_cors_allow_origins = 1,
                       .cors_allow_methods = methods,
                       .n_cors_allow_methods = 2,
                       .headers_set = set_hdr,
                       .n_headers_set = 1,
                       .headers_remove = remove_hdr,
                       .n_headers_remove = 1,
                       .compress = 1};
    funcd_gateway *g = NULL;
    char bound[64];
    CHECK(funcd_gateway_embedded_new(&g, 2) == 0);
    CHECK(g->listen(g, "127.0.0.1:0", bound, sizeof(bound)) == 0);
    CHECK(g->start(g) == 0);
    CHECK(set(g, "a", &edge, 0) == 0);
    client c[CLIENTS];
    pthread_t t[CLIENTS];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < CLIENTS; i++) {
        c[i].port = atoi(strrchr(bound, ':') + 1);
        CHECK(pthread_create(&t[i], NULL, run_client, &c[i]) == 0);
    }
    char name[32];
    for (unsigned k = 0; k < CHANGES; k++) {
        CHECK(set(g, "a", &edge, k) == 0); /* replaced: its limiter goes on */
        if (k % 2)
            CHECK(g->remove_route(g, "default", "b") == 0);
        else
            CHECK(set(g, "b", k % 4 ? &edge : NULL, k) == 0);
        snprintf(name, sizeof(name), "other-%u", k % 100);
        if (k / 100 % 2)
            g->remove_route(g, "default", name);
        else
            CHECK(set(g, name, &edge, k) == 0);
    }
    atomic_store(&done, 1);
    long a = 0, b = 0, gone = 0;
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(t[i], NULL);
        if (c[i].bad)
            FAILF("client %d: %ld unexpected answers, the first %s", i, c[i].bad, c[i].bad_line);
        a += c[i].a_ok;
        b += c[i].b_ok;
        gone += c[i].b_gone;
    }
    fprintf(stderr, "  %u changes; answers: a 503 %ld, b 503 %ld, b 404 %ld\n", CHANGES, a, b, gone);
    CHECK(a > 0);
    CHECK(b + gone > 0);
    g->stop(g);
    g->free(g);
}

int main(void)
{
    unsetenv("FUNCD_GATEWAY_THREADS");
    RUN(routes_change_under_requests);
    return HARNESS_END();
}
