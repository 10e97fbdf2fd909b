/*
 * The egress gateway's throughput (bench/egress.sh): one client on the
 * host fetches from an origin on 127.0.0.2 directly, and the same through
 * the gateway (its proxy listener opened here, as a worker's would be in
 * its namespace; names resolved through a DNS server on 127.0.0.4), rounds
 * alternating: a large download (MB/s, median of the rounds) and small
 * requests, each on a new connection like a function's urllib (requests/s).
 * With the download, figures that hold on a loaded machine too: CPU time and
 * timeslices (about: wakeups) per MiB of every thread, of the gateway's
 * thread and of the client's, from /proc/self/task/<tid>/schedstat (medians),
 * and minor page faults per MiB (fresh memory touched, from .../stat): the
 * first round's too, as a process that has not relayed before pays them.
 *
 *   egress-bench [BYTES] [ROUNDS] [SMALL_REQUESTS]
 */
#include <dirent.h>
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

/* CPU time (ns) and timeslices (times put on a CPU: about its wakeups) of
 * this process's threads, all of them or those named `comm`, from
 * /proc/self/task/<tid>/schedstat: figures of work done, not of waiting,
 * so they hold also on a loaded machine. */
typedef struct cpu_use {
    double ns, slices, faults;
} cpu_use;

/* Minor page faults of /proc/<path>/stat (fresh memory touched: each a trap). */
static double faults_of(const char *path)
{
    char line[1024];
    double minflt = 0;
    FILE *f = fopen(path, "re");
    if (f && fgets(line, sizeof(line), f)) {
        const char *p = strrchr(line, ')'); /* comm may hold spaces */
        unsigned long long v = 0;
        if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %llu", &v) == 1)
            minflt = (double)v;
    }
    if (f)
        fclose(f);
    return minflt;
}

static cpu_use cpu_of(const char *comm)
{
    cpu_use u = {0, 0, 0};
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], name[64] = "";
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "re");
        if (f) {
            if (fgets(name, sizeof(name), f))
                name[strcspn(name, "\n")] = '\0';
            fclose(f);
        }
        if (comm && strcmp(name, comm) != 0)
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/schedstat", e->d_name);
        unsigned long long run = 0, wait = 0, slices = 0;
        if ((f = fopen(path, "re"))) {
            if (fscanf(f, "%llu %llu %llu", &run, &wait, &slices) == 3) {
                u.ns += (double)run;
                u.slices += (double)slices;
            }
            fclose(f);
        }
        snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
        u.faults += faults_of(path);
    }
    if (d)
        closedir(d);
    return u;
}

/* The calling thread's (the client's). */
static cpu_use cpu_self(void)
{
    cpu_use u = {0, 0, 0};
    unsigned long long run = 0, wait = 0, slices = 0;
    FILE *f = fopen("/proc/thread-self/schedstat", "re");
    if (f) {
        if (fscanf(f, "%llu %llu %llu", &run, &wait, &slices) == 3) {
            u.ns = (double)run;
            u.slices = (double)slices;
        }
        fclose(f);
    }
    u.faults = faults_of("/proc/thread-self/stat");
    return u;
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
    /* Per round and MiB: CPU time and timeslices of every thread (origin,
     * client, gateway) going direct, the same through the gateway, and the
     * gateway's thread alone. */
    double d_us[100], p_us[100], g_us[100], d_sl[100], p_sl[100], g_sl[100], dc_us[100],
        pc_us[100], d_pf[100], p_pf[100], g_pf[100], first_g_us = 0, first_g_pf = 0;
    double per_mib = (double)(1 << 20) / (double)bytes;
    /* and per small request: CPU time, and questions the gateway sent the upstream */
    double ds_us[100], ps_us[100], gs_us[100], dns_per[100];
    for (int r = 0; r < rounds; r++) {
        cpu_use a = cpu_of(NULL), ca = cpu_self();
        double t = now_s();
        long long n = fetch("127.0.0.2", origin.port, direct_big);
        d_mb[r] = (double)n / (now_s() - t) / 1e6;
        cpu_use b = cpu_of(NULL), gb = cpu_of("funcd-egress"), cb = cpu_self();
        t = now_s();
        long long m = fetch("127.0.0.1", proxy_port, proxied_big);
        p_mb[r] = (double)m / (now_s() - t) / 1e6;
        cpu_use c = cpu_of(NULL), gc = cpu_of("funcd-egress"), cc = cpu_self();
        dc_us[r] = (cb.ns - ca.ns) * per_mib / 1e3;
        pc_us[r] = (cc.ns - cb.ns) * per_mib / 1e3;
        d_us[r] = (b.ns - a.ns) * per_mib / 1e3;
        d_sl[r] = (b.slices - a.slices) * per_mib;
        p_us[r] = (c.ns - b.ns) * per_mib / 1e3;
        p_sl[r] = (c.slices - b.slices) * per_mib;
        g_us[r] = (gc.ns - gb.ns) * per_mib / 1e3;
        g_sl[r] = (gc.slices - gb.slices) * per_mib;
        d_pf[r] = (b.faults - a.faults) * per_mib;
        p_pf[r] = (c.faults - b.faults) * per_mib;
        g_pf[r] = (gc.faults - gb.faults) * per_mib;
        if (r == 0) {
            first_g_us = g_us[0];
            first_g_pf = g_pf[0];
        }
        if (n < bytes || m < bytes) {
            fprintf(stderr, "short download: direct %lld, through the gateway %lld\n", n, m);
            return 1;
        }
        cpu_use sa = cpu_of(NULL);
        t = now_s();
        for (int i = 0; i < small; i++)
            if (fetch("127.0.0.2", origin.port, direct_small) <= 0)
                return 1;
        d_rps[r] = small / (now_s() - t);
        cpu_use sb = cpu_of(NULL), gsb = cpu_of("funcd-egress");
        int asked = atomic_load(&dns.queries);
        t = now_s();
        for (int i = 0; i < small; i++)
            if (fetch("127.0.0.1", proxy_port, proxied_small) <= 0)
                return 1;
        p_rps[r] = small / (now_s() - t);
        cpu_use sc = cpu_of(NULL), gsc = cpu_of("funcd-egress");
        ds_us[r] = (sb.ns - sa.ns) / small / 1e3;
        ps_us[r] = (sc.ns - sb.ns) / small / 1e3;
        gs_us[r] = (gsc.ns - gsb.ns) / small / 1e3;
        dns_per[r] = (double)(atomic_load(&dns.queries) - asked) / small;
    }
    qsort(d_mb, (size_t)rounds, sizeof(double), cmp);
    qsort(p_mb, (size_t)rounds, sizeof(double), cmp);
    qsort(d_rps, (size_t)rounds, sizeof(double), cmp);
    qsort(p_rps, (size_t)rounds, sizeof(double), cmp);
    int mid = rounds / 2;
    printf("download %lld bytes: direct %.0f MB/s, through the egress gateway %.0f MB/s (%.2fx)\n",
           bytes, d_mb[mid], p_mb[mid], p_mb[mid] / d_mb[mid]);
    double *sorted[] = {d_us, p_us, g_us, d_sl, p_sl, g_sl, dc_us, pc_us, ds_us, ps_us, gs_us,
                        dns_per, d_pf, p_pf, g_pf};
    for (size_t i = 0; i < sizeof(sorted) / sizeof(sorted[0]); i++)
        qsort(sorted[i], (size_t)rounds, sizeof(double), cmp);
    printf("  per MiB, CPU time of all threads: direct %.0f us, through the egress gateway %.0f us "
           "(the gateway's thread %.0f us, the client's %.0f us vs %.0f us direct); timeslices: "
           "direct %.1f, through the gateway %.1f (the gateway's thread %.1f)\n",
           d_us[mid], p_us[mid], g_us[mid], pc_us[mid], dc_us[mid], d_sl[mid], p_sl[mid],
           g_sl[mid]);
    printf("  per MiB, minor page faults (fresh memory touched) of all threads: direct %.1f, "
           "through the egress gateway %.1f (the gateway's thread %.1f; in the first round, "
           "%.1f faults and %.0f us CPU per MiB)\n",
           d_pf[mid], p_pf[mid], g_pf[mid], first_g_pf, first_g_us);
    printf("small requests (a connection each, %d per round): direct %.0f/s, through the egress "
           "gateway %.0f/s (%.2fx)\n",
           small, d_rps[mid], p_rps[mid], p_rps[mid] / d_rps[mid]);
    printf("  per request, CPU time of all threads: direct %.0f us, through the egress gateway "
           "%.0f us (the gateway's thread %.0f us); DNS questions to the upstream: %.2f\n",
           ds_us[mid], ps_us[mid], gs_us[mid], dns_per[mid]);
    funcd_egress_free(eg);
    fake_origin_stop(&origin);
    fake_dns_stop(&dns);
    return 0;
}
