/*
 * The egress gateway's throughput (bench/egress.sh): one client on the
 * host fetches from an origin on 127.0.0.2 directly, and the same through
 * the gateway (its proxy listener opened here, as a worker's would be in
 * its namespace; names resolved through a DNS server on 127.0.0.4), rounds
 * alternating: a large download (MB/s, median of the rounds) and small
 * requests, each on a new connection like a function's urllib (requests/s).
 *
 *   egress-bench [BYTES] [ROUNDS] [SMALL_REQUESTS]
 */
#include <event2/thread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../tests/egress_fake.h"
#include "egress/egress.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int dial(uint16_t port, const char *ip)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, ip, &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* One request; the bytes of the whole answer, or -1. */
static long long fetch(const char *ip, uint16_t port, const char *req)
{
    int fd = dial(port, ip);
    if (fd < 0)
        return -1;
    fake_send_all(fd, req, strlen(req));
    static char buf[1 << 18];
    long long total = 0;
    ssize_t n;
    while ((n = recv(fd, buf, sizeof(buf), 0)) > 0)
        total += n;
    close(fd);
    return total;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    long long bytes = argc > 1 ? atoll(argv[1]) : 100LL << 20;
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    int small = argc > 3 ? atoi(argv[3]) : 1000;
    if (rounds < 1 || rounds > 100 || bytes < 1 || small < 1)
        return 2;
    evthread_use_pthreads();
    fake_dns dns = {0};
    fake_origin origin = {0};
    fake_dns_add(&dns, "origin.bench", "127.0.0.2");
    if (fake_dns_start(&dns, "127.0.0.4") < 0 || fake_origin_start(&origin, "127.0.0.2") < 0) {
        fprintf(stderr, "cannot bind 127.0.0.2 / 127.0.0.4\n");
        return 1;
    }
    char upstream[64];
    snprintf(upstream, sizeof(upstream), "127.0.0.4:%u", dns.port);
    funcd_logger quiet = {NULL, FUNCD_LOG_WARN, NULL};
    funcd_egress_config cfg = {.dns_upstream = upstream, .logger = &quiet};
    funcd_egress *eg;
    if (funcd_egress_new(&eg, &cfg) < 0)
        return 1;
    char spec[256];
    snprintf(spec, sizeof(spec),
             "{\"allow\":[{\"host\":\"origin.bench\",\"ports\":[%u]},"
             "{\"cidr\":\"127.0.0.2/32\",\"ports\":[%u]}]}",
             origin.port, origin.port);
    cJSON *j = cJSON_Parse(spec);
    funcd_egress_policies_put(funcd_egress_policies_of(eg), "bench", "p", j);
    cJSON_Delete(j);
    uint16_t proxy_port;
    int proxy = fake_bind("127.0.0.1", SOCK_STREAM, &proxy_port);
    funcd_egress_attach(eg, "bench", "fn", "fn-1", proxy, -1, -1);
    usleep(100000);

    char direct_big[256], proxied_big[256], direct_small[128], proxied_small[256];
    snprintf(direct_big, sizeof(direct_big), "GET /bytes/%lld HTTP/1.1\r\nHost: x\r\n\r\n", bytes);
    snprintf(proxied_big, sizeof(proxied_big),
             "GET http://origin.bench:%u/bytes/%lld HTTP/1.1\r\nHost: origin.bench\r\n\r\n",
             origin.port, bytes);
    snprintf(direct_small, sizeof(direct_small), "GET /small HTTP/1.1\r\nHost: x\r\n\r\n");
    snprintf(proxied_small, sizeof(proxied_small),
             "GET http://origin.bench:%u/small HTTP/1.1\r\nHost: origin.bench\r\n\r\n",
             origin.port);
    double d_mb[100], p_mb[100], d_rps[100], p_rps[100];
    for (int r = 0; r < rounds; r++) {
        double t = now_s();
        long long n = fetch("127.0.0.2", origin.port, direct_big);
        d_mb[r] = (double)n / (now_s() - t) / 1e6;
        t = now_s();
        long long m = fetch("127.0.0.1", proxy_port, proxied_big);
        p_mb[r] = (double)m / (now_s() - t) / 1e6;
        if (n < bytes || m < bytes) {
            fprintf(stderr, "short download: direct %lld, through the gateway %lld\n", n, m);
            return 1;
        }
        t = now_s();
        for (int i = 0; i < small; i++)
            if (fetch("127.0.0.2", origin.port, direct_small) <= 0)
                return 1;
        d_rps[r] = small / (now_s() - t);
        t = now_s();
        for (int i = 0; i < small; i++)
            if (fetch("127.0.0.1", proxy_port, proxied_small) <= 0)
                return 1;
        p_rps[r] = small / (now_s() - t);
    }
    qsort(d_mb, (size_t)rounds, sizeof(double), cmp);
    qsort(p_mb, (size_t)rounds, sizeof(double), cmp);
    qsort(d_rps, (size_t)rounds, sizeof(double), cmp);
    qsort(p_rps, (size_t)rounds, sizeof(double), cmp);
    int mid = rounds / 2;
    printf("download %lld bytes: direct %.0f MB/s, through the egress gateway %.0f MB/s (%.2fx)\n",
           bytes, d_mb[mid], p_mb[mid], p_mb[mid] / d_mb[mid]);
    printf("small requests (a connection each, %d per round): direct %.0f/s, through the egress "
           "gateway %.0f/s (%.2fx)\n",
           small, d_rps[mid], p_rps[mid], p_rps[mid] / d_rps[mid]);
    funcd_egress_free(eg);
    fake_origin_stop(&origin);
    fake_dns_stop(&dns);
    return 0;
}
