/*
 * Cold-start benchmark, zero to first response byte.
 *
 *   coldstart floor N SOCKDIR [-e KEY=VALUE]... -- ARGV...
 *       spawns ARGV with FUNCD_LISTEN=SOCKDIR/s.sock (plus the -e variables),
 *       polls the socket until it accepts, sends one GET and times the first
 *       byte of the answer; N times, killing the worker after each run.
 *   coldstart gateway N API_URL DP_URL NAME TOKEN
 *       waits until function NAME has no replica (status.replicas.total 0),
 *       then times GET DP_URL/fn/default/NAME/ to its first byte; N times.
 *
 * Prints p50 and p99 in milliseconds.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, double *t, int n)
{
    qsort(t, (size_t)n, sizeof(double), cmp);
    printf("%s: n=%d p50=%.2f ms p99=%.2f ms\n", what, n, t[n / 2], t[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1]);
}

/* Sends a GET on a connected socket and waits for the first byte; `*t` is
 * the time it came. Then checks the answer was a 200 (an error answer is
 * fast and would flatter the figures). */
static int first_byte(int fd, const char *path, double *t)
{
    char req[512], head[16] = "";
    int len = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n", path);
    if (write(fd, req, (size_t)len) != len)
        return -1;
    if (read(fd, head, 1) != 1)
        return -1;
    *t = now_ms();
    size_t got = 1;
    ssize_t r;
    while (got < 12 && (r = read(fd, head + got, 12 - got)) > 0)
        got += (size_t)r;
    if (strncmp(head + 8, " 200", 4) != 0) {
        fprintf(stderr, "the answer was not 200: %.12s\n", head);
        return -1;
    }
    return 0;
}

static int floor_bench(int argc, char **argv)
{
    int n = atoi(argv[2]);
    const char *dir = argv[3];
    char sock[100], listen_env[160];
    snprintf(sock, sizeof(sock), "%.90s/s.sock", dir);
    snprintf(listen_env, sizeof(listen_env), "FUNCD_LISTEN=%s", sock);
    char *env[64];
    int ne = 0, i = 4;
    env[ne++] = listen_env;
    env[ne++] = "PATH=/usr/local/bin:/usr/bin:/bin";
    for (; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "-e") == 0 && i + 1 < argc && ne < 62)
            env[ne++] = argv[++i];
    env[ne] = NULL;
    char **child = argv + i + 1;
    double *t = calloc((size_t)n, sizeof(double));
    for (int r = 0; r < n; r++) {
        unlink(sock);
        double t0 = now_ms();
        pid_t pid;
        if (posix_spawn(&pid, child[0], NULL, NULL, child, env) != 0) {
            perror("spawn");
            return 1;
        }
        struct sockaddr_un sun = {.sun_family = AF_UNIX};
        snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", sock);
        int fd = -1;
        for (;;) {
            fd = socket(AF_UNIX, SOCK_STREAM, 0);
            if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0)
                break;
            close(fd);
            if (now_ms() - t0 > 10000) {
                fprintf(stderr, "worker did not listen within 10 s\n");
                return 1;
            }
            usleep(50);
        }
        double t1;
        if (first_byte(fd, "/", &t1) < 0) {
            fprintf(stderr, "no answer from the worker\n");
            return 1;
        }
        t[r] = t1 - t0;
        close(fd);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    report("floor (spawn + socket, direct)", t, n);
    return 0;
}

static int tcp_connect(const char *url)
{
    char host[128];
    int port;
    if (sscanf(url, "http://%127[^:]:%d", host, &port) != 2)
        return -1;
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, host, &sin.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* 1 when the function reports no replica at all. */
static int at_zero(const char *api, const char *name, const char *token)
{
    int fd = tcp_connect(api);
    if (fd < 0)
        return 0;
    char req[512], buf[16384];
    int len = snprintf(req, sizeof(req),
                       "GET /apis/funcd.dev/v1/namespaces/default/functions/%s HTTP/1.1\r\n"
                       "Host: bench\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n",
                       name, token);
    size_t got = 0;
    if (write(fd, req, (size_t)len) == len) {
        ssize_t r;
        while (got < sizeof(buf) - 1 && (r = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
            got += (size_t)r;
    }
    close(fd);
    buf[got] = '\0';
    return strstr(buf, "\"total\":0") != NULL;
}

static int gateway_bench(char **argv)
{
    int n = atoi(argv[2]);
    const char *api = argv[3], *dp = argv[4], *name = argv[5], *token = argv[6];
    char path[256];
    snprintf(path, sizeof(path), "/fn/default/%s/", name);
    double *t = calloc((size_t)n, sizeof(double));
    for (int r = 0; r < n; r++) {
        double wait0 = now_ms();
        while (!at_zero(api, name, token)) {
            if (now_ms() - wait0 > 30000) {
                fprintf(stderr, "function %s never went back to zero replicas\n", name);
                return 1;
            }
            usleep(2000);
        }
        double t0 = now_ms();
        int fd = tcp_connect(dp);
        double t1;
        if (fd < 0 || first_byte(fd, path, &t1) < 0) {
            fprintf(stderr, "no answer through the gateway\n");
            return 1;
        }
        t[r] = t1 - t0;
        close(fd);
    }
    report("through funcd (zero -> first byte)", t, n);
    return 0;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc >= 5 && strcmp(argv[1], "floor") == 0)
        return floor_bench(argc, argv);
    if (argc == 7 && strcmp(argv[1], "gateway") == 0)
        return gateway_bench(argv);
    fprintf(stderr, "usage: coldstart floor N SOCKDIR [-e K=V]... -- ARGV... | "
                    "coldstart gateway N API DP NAME TOKEN\n");
    return 2;
}
