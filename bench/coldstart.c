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
 *   coldstart compare N SOCKDIR NAME TOKEN LABEL=API_URL,DP_URL... -- ARGV...
 *       the floor (as above) and each funcd's cold start of NAME, in turns
 *       within each of the N rounds, so that all see the same machine; then
 *       each one's p50 against the first funcd's. The funcds take turns in
 *       a rotating order (round r starts with funcd r mod count), so that none
 *       always follows another's cold start.
 *
 * Before each timed run the machine is left alone for BENCH_COLD_SETTLE_MS
 * (default 250 ms): the previous run's work (a funcd starting its next warm
 * interpreter, ~100 ms of CPU for python3) must not land in the next run's
 * measurement, whichever funcd it belongs to.
 *
 * Every request to funcd goes on a new TCP connection (as curl's would),
 * opened after the clock starts. Prints p50 and p99 in milliseconds.
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

typedef struct floor_spec {
    char sock[100];
    char listen_env[160];
    char *env[64];
    char **child;
} floor_spec;

/* Reads `[-e KEY=VALUE]... -- ARGV...` from argv[i]; the socket in `dir`. */
static int floor_parse(floor_spec *f, const char *dir, int argc, char **argv, int i)
{
    snprintf(f->sock, sizeof(f->sock), "%.90s/s.sock", dir);
    snprintf(f->listen_env, sizeof(f->listen_env), "FUNCD_LISTEN=%s", f->sock);
    int ne = 0;
    f->env[ne++] = f->listen_env;
    f->env[ne++] = "PATH=/usr/local/bin:/usr/bin:/bin";
    for (; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "-e") == 0 && i + 1 < argc && ne < 62)
            f->env[ne++] = argv[++i];
    f->env[ne] = NULL;
    if (i + 1 >= argc)
        return -1;
    f->child = argv + i + 1;
    return 0;
}

/* One floor round: spawn, poll the socket, first byte. -1 on failure. */
static void settle(void)
{
    const char *env = getenv("BENCH_COLD_SETTLE_MS");
    long ms = env ? atol(env) : 250;
    if (ms > 0)
        usleep((useconds_t)ms * 1000);
}

static double floor_round(const floor_spec *f)
{
    unlink(f->sock);
    settle();
    double t0 = now_ms();
    pid_t pid;
    if (posix_spawn(&pid, f->child[0], NULL, NULL, f->child, f->env) != 0) {
        perror("spawn");
        return -1;
    }
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", f->sock);
    int fd = -1;
    double t1 = -1;
    for (;;) {
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0)
            break;
        close(fd);
        fd = -1;
        if (now_ms() - t0 > 10000) {
            fprintf(stderr, "worker did not listen within 10 s\n");
            break;
        }
        usleep(50);
    }
    if (fd >= 0 && first_byte(fd, "/", &t1) < 0) {
        fprintf(stderr, "no answer from the worker\n");
        t1 = -1;
    }
    if (fd >= 0)
        close(fd);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return t1 < 0 ? -1 : t1 - t0;
}

static int floor_bench(int argc, char **argv)
{
    int n = atoi(argv[2]);
    floor_spec f;
    if (floor_parse(&f, argv[3], argc, argv, 4) < 0)
        return 2;
    double *t = calloc((size_t)n, sizeof(double));
    for (int r = 0; r < n; r++)
        if ((t[r] = floor_round(&f)) < 0)
            return 1;
    report("floor (spawn + socket, direct)", t, n);
    free(t);
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

/* One cold start through a funcd: waits for zero replicas, then times a
 * request on a new connection to its first byte. -1 on failure. */
static double gateway_round(const char *api, const char *dp, const char *name, const char *token)
{
    char path[256];
    snprintf(path, sizeof(path), "/fn/default/%s/", name);
    double wait0 = now_ms();
    while (!at_zero(api, name, token)) {
        if (now_ms() - wait0 > 30000) {
            fprintf(stderr, "function %s never went back to zero replicas\n", name);
            return -1;
        }
        usleep(2000);
    }
    settle();
    double t0 = now_ms();
    int fd = tcp_connect(dp);
    double t1;
    int ok = fd >= 0 && first_byte(fd, path, &t1) == 0;
    if (fd >= 0)
        close(fd);
    if (!ok) {
        fprintf(stderr, "no answer through the gateway %s\n", dp);
        return -1;
    }
    return t1 - t0;
}

static int gateway_bench(char **argv)
{
    int n = atoi(argv[2]);
    double *t = calloc((size_t)n, sizeof(double));
    for (int r = 0; r < n; r++)
        if ((t[r] = gateway_round(argv[3], argv[4], argv[5], argv[6])) < 0)
            return 1;
    report("through funcd (zero -> first byte)", t, n);
    free(t);
    return 0;
}

#define MAX_TARGETS 4

/* coldstart compare N SOCKDIR NAME TOKEN LABEL=API,DP... -- ARGV... */
static int compare_bench(int argc, char **argv)
{
    int n = atoi(argv[2]);
    const char *name = argv[4], *token = argv[5];
    char label[MAX_TARGETS][32], api[MAX_TARGETS][128], dp[MAX_TARGETS][128];
    int nt = 0, i = 6;
    for (; i < argc && strcmp(argv[i], "--") != 0 && strcmp(argv[i], "-e") != 0; i++)
        if (nt == MAX_TARGETS || sscanf(argv[i], "%31[^=]=%127[^,],%127s", label[nt], api[nt],
                                        dp[nt]) != 3) {
            fprintf(stderr, "coldstart compare: LABEL=API_URL,DP_URL, at most %d: %s\n",
                    MAX_TARGETS, argv[i]);
            return 2;
        } else {
            nt++;
        }
    floor_spec f;
    if (n <= 0 || nt == 0 || floor_parse(&f, argv[3], argc, argv, i) < 0)
        return 2;
    double *t[MAX_TARGETS + 1];
    for (int k = 0; k <= nt; k++)
        t[k] = calloc((size_t)n, sizeof(double));
    for (int r = 0; r < n; r++) {
        if ((t[nt][r] = floor_round(&f)) < 0)
            return 1;
        for (int j = 0; j < nt; j++) {
            int k = (r + j) % nt;
            if ((t[k][r] = gateway_round(api[k], dp[k], name, token)) < 0)
                return 1;
        }
    }
    report("floor (spawn + socket, direct)", t[nt], n);
    double base = 0;
    for (int k = 0; k < nt; k++) {
        char what[96];
        snprintf(what, sizeof(what), "funcd, %s (zero -> first byte, new TCP connection)",
                 label[k]);
        report(what, t[k], n);
        if (k == 0)
            base = t[k][n / 2];
        else
            printf("p50 %s / p50 %s: %.2f\n", label[k], label[0], t[k][n / 2] / base);
    }
    for (int k = 0; k <= nt; k++)
        free(t[k]);
    return 0;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc >= 5 && strcmp(argv[1], "floor") == 0)
        return floor_bench(argc, argv);
    if (argc == 7 && strcmp(argv[1], "gateway") == 0)
        return gateway_bench(argv);
    if (argc >= 9 && strcmp(argv[1], "compare") == 0)
        return compare_bench(argc, argv);
    fprintf(stderr, "usage: coldstart floor N SOCKDIR [-e K=V]... -- ARGV... | "
                    "coldstart gateway N API DP NAME TOKEN | "
                    "coldstart compare N SOCKDIR NAME TOKEN LABEL=API,DP... [-e K=V]... -- "
                    "ARGV...\n");
    return 2;
}
