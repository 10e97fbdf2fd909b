#include "nats_env.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "net_test.h"

static void sleep_ms(int ms)
{
    nanosleep(&(struct timespec){ms / 1000, (long)(ms % 1000) * 1000000L}, NULL);
}

const char *nats_env_server(void)
{
    static const char *const paths[] = {"/usr/sbin/nats-server", "/usr/bin/nats-server",
                                        "/usr/local/bin/nats-server"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        if (access(paths[i], X_OK) == 0)
            return paths[i];
    return NULL;
}

/* Port 0 asks the server for a random port ("-p -1"): the kernel picks it
 * when the server binds, so no other test can take it in between. */
static int spawn_server(nats_env *e)
{
    const char *bin = nats_env_server();
    char store[320], log[320], port[16];
    if (!bin) {
        fprintf(stderr, "  nats_env: nats-server is not installed (apt-get install nats-server)\n");
        return -1;
    }
    snprintf(store, sizeof(store), "%s/js", e->root);
    snprintf(log, sizeof(log), "%s/nats.log", e->root);
    snprintf(port, sizeof(port), "%d", e->port ? e->port : -1);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        /* Should the test abort (a sanitizer), the server goes with it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open("/dev/null", O_RDWR);
        if (fd >= 0) {
            dup2(fd, 0);
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execl(bin, "nats-server", "-js", "-a", "127.0.0.1", "-p", port, "-sd", store, "-l", log,
              (char *)NULL);
        _exit(127);
    }
    e->pid = pid;
    return 0;
}

/* The port from the server's "Listening for client connections on
 * 127.0.0.1:PORT" log line; 0 while it is not there yet. */
static int port_from_log(const nats_env *e)
{
    char path[320], line[512];
    snprintf(path, sizeof(path), "%s/nats.log", e->root);
    FILE *f = fopen(path, "r");
    int port = 0;
    if (!f)
        return 0;
    while (!port && fgets(line, sizeof(line), f)) {
        const char *p = strstr(line, "Listening for client connections on ");
        const char *colon = p ? strrchr(p, ':') : NULL;
        if (colon)
            port = atoi(colon + 1);
    }
    fclose(f);
    return port;
}

static void dump_log(const nats_env *e)
{
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "tail -n 20 '%s/nats.log' >&2", e->root);
    if (system(cmd) != 0)
        fprintf(stderr, "  nats_env: no log in %s\n", e->root);
}

/* Waits (up to 20 s: a loaded machine, and JetStream recovering its store)
 * until the server has logged its port and accepts connections. */
static int wait_ready(nats_env *e)
{
    for (int i = 0; i < 400; i++) {
        int st;
        if (waitpid(e->pid, &st, WNOHANG) == e->pid) {
            e->pid = 0;
            fprintf(stderr, "  nats_env: nats-server exited (status %d)\n", st);
            dump_log(e);
            return -1;
        }
        int port = e->port ? e->port : port_from_log(e);
        if (port && test_port_accepts(port)) {
            e->port = port;
            snprintf(e->url, sizeof(e->url), "nats://127.0.0.1:%d", port);
            return 0;
        }
        sleep_ms(50);
    }
    fprintf(stderr, "  nats_env: nats-server did not accept clients within 20 s\n");
    dump_log(e);
    return -1;
}

int nats_env_start(nats_env *e)
{
    memset(e, 0, sizeof(*e));
    snprintf(e->root, sizeof(e->root), "/tmp/funcd-nats-XXXXXX");
    if (!mkdtemp(e->root)) {
        perror("  nats_env: mkdtemp");
        e->root[0] = 0;
        return -1;
    }
    if (spawn_server(e) < 0 || wait_ready(e) < 0) {
        nats_env_stop(e);
        return -1;
    }
    return 0;
}

static void end_server(nats_env *e, int sig, int grace_ms)
{
    if (e->pid <= 0)
        return;
    kill(e->pid, sig);
    for (int waited = 0;; waited += 10) {
        if (waitpid(e->pid, NULL, WNOHANG) == e->pid)
            break;
        if (waited >= grace_ms && sig != SIGKILL) {
            kill(e->pid, SIGKILL);
            waitpid(e->pid, NULL, 0);
            break;
        }
        sleep_ms(10);
    }
    e->pid = 0;
}

void nats_env_halt(nats_env *e)
{
    end_server(e, SIGKILL, 0);
}

int nats_env_resume(nats_env *e)
{
    if (e->pid > 0 || !e->port)
        return -1;
    return spawn_server(e) < 0 || wait_ready(e) < 0 ? -1 : 0;
}

void nats_env_stop(nats_env *e)
{
    end_server(e, SIGTERM, 5000);
    if (e->root[0]) {
        char cmd[400];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e->root);
        if (system(cmd) != 0)
            fprintf(stderr, "  nats_env: cannot remove %s\n", e->root);
        e->root[0] = 0;
    }
}
