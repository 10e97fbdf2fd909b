/*
 * Graceful shutdown of the daemon: at SIGTERM a request in flight still
 * gets its answer, new connections are refused, and funcd exits 0 within
 * --shutdown-grace; a second SIGTERM during the drain ends it at once.
 * Workers go with it either way.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../e2e/client.h"
#include "../e2e/env.h"
#include "../harness.h"
#include "daemon.h"
#include "util/misc.h"

#define MAX_PROCS 64

typedef struct slow_call {
    const char *base, *path;
    long status;
    int64_t done_ms;
} slow_call;

typedef struct graceful_test {
    char dir[256], data[300], fn[300], log[300];
    dd_daemon d;
    e2e_resp r;
    dd_proc procs[MAX_PROCS];
    size_t nprocs;
} graceful_test;

static void *slow_main(void *arg)
{
    slow_call *c = arg;
    e2e_http *h = e2e_http_new(c->base);
    e2e_resp r = E2E_RESP_INIT;
    c->status = h ? e2e_http_do(h, "GET", c->path, NULL, NULL, &r) : 0;
    c->done_ms = e2e_now_ms();
    e2e_resp_free(&r);
    e2e_http_free(h);
    return NULL;
}

/* 1 when a TCP connect to "http://host:port" is refused. */
static int refused(const char *url)
{
    char host[64];
    int port;
    if (sscanf(url, "http://%63[^:]:%d", host, &port) != 2)
        return 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, host, &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    int e = errno;
    close(fd);
    return rc < 0 && e == ECONNREFUSED;
}

static int wait_refused(const char *url, int timeout_ms)
{
    for (int waited = 0; waited <= timeout_ms; waited += 10) {
        if (refused(url))
            return 1;
        dd_sleep_ms(10);
    }
    return 0;
}

static int setup(graceful_test *t, const char *tag)
{
    if (dd_tempdir(t->dir, sizeof(t->dir), tag) < 0)
        return -1;
    chmod(t->dir, 0755); /* sandboxed workers (nobody) reach their code */
    snprintf(t->data, sizeof(t->data), "%s/data", t->dir);
    snprintf(t->fn, sizeof(t->fn), "%s/fn", t->dir);
    snprintf(t->log, sizeof(t->log), "%s/funcd.log", t->dir);
    char exe[400];
    snprintf(exe, sizeof(exe), "%s/worker", t->fn);
    return mkdir(t->fn, 0755) == 0 ? funcd_link_or_copy(SERVING_WORKER, exe, 0755) : -1;
}

/* Starts funcd with --shutdown-grace `grace`, deploys the fixture worker
 * and waits until it serves. */
static int start_serving(graceful_test *t, const char *grace)
{
    const char *extra[] = {"--shutdown-grace", grace, NULL};
    const char *args[32];
    dd_default_args(args, 32, "--data-dir", t->data, extra);
    if (dd_start(&t->d, t->log, args) < 0)
        return -1;
    e2e_http *h = e2e_http_new(t->d.cp), *dp = e2e_http_new(t->d.dp);
    char body[1024];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"slow\"},\"spec\":{\"runtime\":\"native\",\"handler\":\"worker\","
             "\"source\":{\"path\":\"%s\"}}}",
             t->fn);
    long st = h ? e2e_http_do(h, "PUT", DD_NS "/functions/slow", DD_TOKEN, body, &t->r) : 0;
    int ok = st == 201;
    for (int64_t t0 = e2e_now_ms(); ok && dp && e2e_now_ms() - t0 < 15000; dd_sleep_ms(20))
        if (e2e_http_do(dp, "GET", "/fn/default/slow/hello", NULL, NULL, &t->r) == 200)
            break;
    ok = ok && t->r.status == 200;
    if (!ok)
        fprintf(stderr, "  the function does not serve: HTTP %ld %.300s\n", t->r.status,
                t->r.body);
    e2e_http_free(h);
    e2e_http_free(dp);
    t->nprocs = dd_descendants(t->d.pid, t->procs, MAX_PROCS);
    return ok ? 0 : -1;
}

static void teardown(graceful_test *t)
{
    if (harness_failed_now)
        dd_dump_log(&t->d);
    dd_kill9(&t->d);
    if (!dd_all_gone(t->procs, t->nprocs, 5000)) {
        for (size_t i = 0; i < t->nprocs; i++)
            if (!dd_pid_gone(t->procs[i].pid, t->procs[i].start))
                kill(t->procs[i].pid, SIGKILL);
        fprintf(stderr, "  processes of funcd outlived its exit by 5 s\n");
        harness_failed_now = 1;
    }
    e2e_resp_free(&t->r);
    if (t->dir[0])
        funcd_remove_tree(t->dir);
}

static void drain_body(graceful_test *t)
{
    CHECK(setup(t, "graceful") == 0);
    CHECK(start_serving(t, "5s") == 0);
    slow_call c = {t->d.dp, "/fn/default/slow/sleep?ms=1500", 0, 0};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, slow_main, &c) == 0);
    dd_sleep_ms(300); /* the request is in the worker now */
    int64_t term = e2e_now_ms();
    kill(t->d.pid, SIGTERM);
    int dp_refused = wait_refused(t->d.dp, 1000), cp_refused = wait_refused(t->d.cp, 1000);
    pthread_join(th, NULL);
    int exited = dd_wait_exit(&t->d, 5000 + 2000);
    int64_t took = e2e_now_ms() - term;
    CHECK_INT(c.status, 200);
    CHECK(dp_refused);
    CHECK(cp_refused);
    CHECK(exited);
    fprintf(stderr, "  in-flight request answered %lld ms after SIGTERM; exit after %lld ms\n",
            (long long)(c.done_ms - term), (long long)took);
    CHECK(WIFEXITED(t->d.exit_status) && WEXITSTATUS(t->d.exit_status) == 0);
    CHECK(took < 5000 + 1000);
}

TEST(sigterm_drains_in_flight_and_exits_0)
{
    graceful_test t = {.r = E2E_RESP_INIT};
    drain_body(&t);
    teardown(&t);
}

static void second_signal_body(graceful_test *t)
{
    CHECK(setup(t, "graceful2") == 0);
    CHECK(start_serving(t, "20s") == 0);
    slow_call c = {t->d.dp, "/fn/default/slow/sleep?ms=10000", 0, 0};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, slow_main, &c) == 0);
    dd_sleep_ms(300);
    kill(t->d.pid, SIGTERM);
    dd_sleep_ms(300);
    int still_draining = !dd_wait_exit(&t->d, 0);
    int64_t second = e2e_now_ms();
    kill(t->d.pid, SIGTERM);
    int exited = dd_wait_exit(&t->d, 2000);
    int64_t took = e2e_now_ms() - second;
    if (!exited)
        dd_kill9(&t->d); /* unblocks the slow request */
    pthread_join(th, NULL);
    CHECK(still_draining);
    CHECK(exited);
    fprintf(stderr, "  exit %lld ms after the second SIGTERM\n", (long long)took);
    CHECK(WIFEXITED(t->d.exit_status) && WEXITSTATUS(t->d.exit_status) == 128 + SIGTERM);
    CHECK(c.status != 200);
}

TEST(second_sigterm_exits_at_once)
{
    graceful_test t = {.r = E2E_RESP_INIT};
    second_signal_body(&t);
    teardown(&t);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    e2e_client_global_init();
    RUN(sigterm_drains_in_flight_and_exits_0);
    RUN(second_sigterm_exits_at_once);
    e2e_client_global_cleanup();
    return HARNESS_END();
}
