/*
 * "Outside" servers for the egress tests: a DNS server answering A records
 * from a small table, and HTTP origins, each on a loopback address of its
 * own (127.0.0.2, 127.0.0.3, ...), each on a thread of the test, stopped
 * and joined by the test.
 */
#ifndef FUNCD_TESTS_EGRESS_FAKE_H
#define FUNCD_TESTS_EGRESS_FAKE_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

/* Binds a socket of `type` on ip:0 (listening for streams); *port gets the
 * port. -1 on failure. */
static inline int fake_bind(const char *ip, int type, uint16_t *port)
{
    int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, ip, &a.sin_addr);
    socklen_t len = sizeof(a);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        (type == SOCK_STREAM && listen(fd, 64) < 0) ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* ---- DNS ------------------------------------------------------------------ */

#define FAKE_DNS_MAX 16

typedef struct fake_dns {
    int fd;
    uint16_t port;
    pthread_t thread;
    atomic_int stop;
    atomic_int queries; /* questions answered */
    const char *drop;   /* names ending so are never answered (NULL: none) */
    atomic_int dropped; /* questions not answered */
    const char *watch;  /* a name whose question sets `watched` (NULL: none) */
    atomic_int watched;
    atomic_int watched_head; /* that question's id << 16 | flags (bytes 0-3) */
    atomic_int watched_len;  /* and its length */
    char names[FAKE_DNS_MAX][64];
    char addrs[FAKE_DNS_MAX][16];
    int n;
} fake_dns;

static void *fake_dns_main(void *arg)
{
    fake_dns *d = arg;
    while (!atomic_load(&d->stop)) {
        struct pollfd p = {d->fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0)
            continue;
        uint8_t q[512], a[600];
        struct sockaddr_storage peer;
        socklen_t plen = sizeof(peer);
        ssize_t n = recvfrom(d->fd, q, sizeof(q), 0, (struct sockaddr *)&peer, &plen);
        if (n < 17)
            continue;
        char name[256];
        size_t off = 12, nl = 0;
        while (off < (size_t)n && q[off] && nl < 200) {
            size_t ll = q[off++];
            if (nl)
                name[nl++] = '.';
            for (size_t i = 0; i < ll && off < (size_t)n; i++)
                name[nl++] = (char)q[off++];
        }
        name[nl] = '\0';
        off += 1;
        if (off + 4 > (size_t)n)
            continue;
        uint16_t qtype = (uint16_t)(q[off] << 8 | q[off + 1]);
        off += 4;
        if (d->watch && strcasecmp(name, d->watch) == 0) {
            atomic_store(&d->watched_head, (int)((uint32_t)q[0] << 24 | (uint32_t)q[1] << 16 |
                                                 (uint32_t)q[2] << 8 | q[3]));
            atomic_store(&d->watched_len, (int)n);
            atomic_store(&d->watched, 1);
        }
        size_t dl = d->drop ? strlen(d->drop) : 0;
        if (dl && nl >= dl && strcasecmp(name + nl - dl, d->drop) == 0) {
            atomic_fetch_add(&d->dropped, 1);
            continue;
        }
        memcpy(a, q, off);
        a[2] = 0x84 | (q[2] & 1); /* QR, AA, RD */
        a[3] = 0x80;
        a[6] = a[7] = a[8] = a[9] = a[10] = a[11] = 0;
        const char *addr = NULL;
        for (int i = 0; i < d->n; i++)
            if (strcasecmp(d->names[i], name) == 0)
                addr = d->addrs[i];
        size_t len = off;
        /* No such name, or no record of that type: an SOA says how long
         * the answer holds (RFC 2308: min(its TTL, its MINIMUM) = 30 s). */
        static const uint8_t soa[] = {0xc0, 12, 0, 6, 0, 1, 0, 0, 0, 60, 0, 22, 0, 0,
                                      0,    0,  0, 1, 0, 0, 0, 60, 0, 0, 0, 60, 0, 0,
                                      0x0e, 0x10, 0, 0, 0, 30};
        if (!addr || qtype != 1) {
            if (!addr)
                a[3] |= 3; /* NXDOMAIN */
            memcpy(a + len, soa, sizeof(soa));
            len += sizeof(soa);
            a[9] = 1;
        } else {
            static const uint8_t rr[] = {0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4};
            memcpy(a + len, rr, sizeof(rr));
            len += sizeof(rr);
            inet_pton(AF_INET, addr, a + len);
            len += 4;
            a[7] = 1;
        }
        sendto(d->fd, a, len, 0, (struct sockaddr *)&peer, plen);
        atomic_fetch_add(&d->queries, 1);
    }
    return NULL;
}

/* Starts a DNS server on `ip`; add names with fake_dns_add first. */
static inline int fake_dns_start(fake_dns *d, const char *ip)
{
    d->fd = fake_bind(ip, SOCK_DGRAM, &d->port);
    if (d->fd < 0)
        return -1;
    atomic_store(&d->stop, 0);
    return pthread_create(&d->thread, NULL, fake_dns_main, d) == 0 ? 0 : -1;
}

static inline void fake_dns_add(fake_dns *d, const char *name, const char *addr)
{
    snprintf(d->names[d->n], sizeof(d->names[0]), "%s", name);
    snprintf(d->addrs[d->n], sizeof(d->addrs[0]), "%s", addr);
    d->n++;
}

static inline void fake_dns_stop(fake_dns *d)
{
    atomic_store(&d->stop, 1);
    pthread_join(d->thread, NULL);
    close(d->fd);
}

/* ---- HTTP origins ----------------------------------------------------------- */

typedef struct fake_origin {
    char ip[16];
    int fd;
    uint16_t port;
    pthread_t thread;
    atomic_int stop;
    atomic_int requests;
} fake_origin;

static int fake_send_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Byte `i` of a /bytes/N body (a pattern with a period of 64 KiB, so that
 * a byte lost, doubled or moved shows). */
static inline char fake_body_byte(size_t i)
{
    i %= 65536;
    return (char)(i * 131 + (i >> 8));
}

/* Answers one request: GET /bytes/N sends N bytes (fake_body_byte), anything else a line
 * naming the origin and the request line. */
static void fake_origin_serve(fake_origin *o, int fd)
{
    char head[8192];
    size_t len = 0;
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    while (len < sizeof(head) - 1) {
        ssize_t n = recv(fd, head + len, sizeof(head) - 1 - len, 0);
        if (n <= 0)
            return;
        len += (size_t)n;
        head[len] = '\0';
        if (strstr(head, "\r\n\r\n"))
            break;
    }
    char *eol = strstr(head, "\r\n");
    if (!eol)
        return;
    *eol = '\0';
    unsigned long long bytes = 0;
    char out[1024];
    if (sscanf(head, "GET /bytes/%llu", &bytes) == 1) {
        int n = snprintf(out, sizeof(out),
                         "HTTP/1.1 200 OK\r\nContent-Length: %llu\r\nConnection: close\r\n\r\n",
                         bytes);
        if (fake_send_all(fd, out, (size_t)n) < 0)
            return;
        static char chunk[65536];
        for (size_t i = 0; i < sizeof(chunk); i++)
            chunk[i] = fake_body_byte(i);
        while (bytes) {
            size_t k = bytes < sizeof(chunk) ? (size_t)bytes : sizeof(chunk);
            if (fake_send_all(fd, chunk, k) < 0)
                return;
            bytes -= k;
        }
    } else {
        char body[512];
        int bl = snprintf(body, sizeof(body), "hello from %s:%u (%s)\n", o->ip, o->port, head);
        int n = snprintf(out, sizeof(out),
                         "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                         "Connection: close\r\n\r\n%s",
                         bl, body);
        fake_send_all(fd, out, (size_t)n);
    }
    atomic_fetch_add(&o->requests, 1);
}

static void *fake_origin_main(void *arg)
{
    fake_origin *o = arg;
    while (!atomic_load(&o->stop)) {
        struct pollfd p = {o->fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int c = accept4(o->fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        fake_origin_serve(o, c);
        shutdown(c, SHUT_WR);
        close(c);
    }
    return NULL;
}

static inline int fake_origin_start(fake_origin *o, const char *ip)
{
    snprintf(o->ip, sizeof(o->ip), "%s", ip);
    o->fd = fake_bind(ip, SOCK_STREAM, &o->port);
    if (o->fd < 0)
        return -1;
    atomic_store(&o->stop, 0);
    return pthread_create(&o->thread, NULL, fake_origin_main, o) == 0 ? 0 : -1;
}

static inline void fake_origin_stop(fake_origin *o)
{
    atomic_store(&o->stop, 1);
    pthread_join(o->thread, NULL);
    close(o->fd);
}

#endif
