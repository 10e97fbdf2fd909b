/* Measures a worker's start: the time from spawn to the first 200 answer to
 * GET /_/ready on FUNCD_LISTEN, the way the platform sees a cold start.
 *
 *   FUNCD_LISTEN=/tmp/w.sock ready_time RUNS COMMAND [ARGS...]
 *
 * Prints "min median max" in milliseconds; each run's worker gets SIGTERM
 * and is waited for before the next. */
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

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* One attempt: true when the worker answered 200. */
static int ready_once(const struct sockaddr_un *sa) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    int ok = 0;
    if (fd >= 0 && connect(fd, (const struct sockaddr *)sa, sizeof *sa) == 0) {
        static const char req[] = "GET /_/ready HTTP/1.1\r\nHost: worker\r\nContent-Length: 0\r\n\r\n";
        char resp[256];
        if (send(fd, req, sizeof req - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof req - 1)) {
            ssize_t n = recv(fd, resp, sizeof resp - 1, 0);
            ok = n >= 12 && !strncmp(resp + 9, "200", 3);
        }
    }
    if (fd >= 0) close(fd);
    return ok;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const char *path = getenv("FUNCD_LISTEN");
    int runs = argc > 2 ? atoi(argv[1]) : 0;
    if (!path || runs <= 0 || runs > 1000) {
        fputs("usage: FUNCD_LISTEN=PATH ready_time RUNS COMMAND [ARGS...]\n", stderr);
        return 2;
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    double *times = calloc((size_t)runs, sizeof *times);
    for (int i = 0; i < runs; i++) {
        unlink(path);
        pid_t pid;
        double start = now_ms();
        if (posix_spawnp(&pid, argv[2], NULL, NULL, argv + 2, environ)) {
            perror("ready_time: spawn");
            return 1;
        }
        int status;
        while (!ready_once(&sa)) {
            if (waitpid(pid, &status, WNOHANG) == pid) {
                fprintf(stderr, "ready_time: %s exited before it was ready\n", argv[2]);
                return 1;
            }
            if (now_ms() - start > 10000) {
                fprintf(stderr, "ready_time: %s not ready after 10 s\n", argv[2]);
                kill(pid, SIGKILL);
                return 1;
            }
            usleep(100);
        }
        times[i] = now_ms() - start;
        kill(pid, SIGTERM);
        waitpid(pid, &status, 0);
    }
    qsort(times, (size_t)runs, sizeof *times, cmp_double);
    printf("%.1f %.1f %.1f\n", times[0], times[runs / 2], times[runs - 1]);
    free(times);
    return 0;
}
