/* A funcd cluster on loopback (cluster.h). */
#include "cluster.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../e2e/client.h"
#include "../e2e/env.h"
#include "util/misc.h"
#include "../net_test.h"

#define NGINX "/usr/sbin/nginx"

int cl_tools_present(void)
{
    const char *missing = !pg_env_present()      ? "postgresql"
                          : !nats_env_server()   ? "nats-server"
                          : access(NGINX, X_OK) ? "nginx"
                                                 : NULL;
    if (missing)
        fprintf(stderr, "  %s is not installed (scripts/install-deps.sh test): skipped\n", missing);
    return missing == NULL;
}

int cl_init(cl_cluster *c, const char *tag, const char *worker_exe)
{
    memset(c, 0, sizeof(*c));
    if (dd_tempdir(c->dir, sizeof(c->dir), tag) < 0) {
        fprintf(stderr, "  mkdtemp: %s\n", strerror(errno));
        c->dir[0] = '\0';
        return -1;
    }
    /* Sandboxed workers run as nobody and must reach their code. */
    chmod(c->dir, 0755);
    snprintf(c->fn, sizeof(c->fn), "%s/fn", c->dir);
    snprintf(c->key, sizeof(c->key), "%s/encryption.key", c->dir);
    char exe[400];
    snprintf(exe, sizeof(exe), "%s/worker", c->fn);
    if (mkdir(c->fn, 0755) != 0 || funcd_link_or_copy(worker_exe, exe, 0755) != 0) {
        fprintf(stderr, "  cannot copy the worker to %s: %s\n", exe, strerror(errno));
        return -1;
    }
    if (pg_env_start(&c->pg) < 0)
        return -1;
    c->pg_started = 1;
    if (nats_env_start(&c->nats) < 0)
        return -1;
    c->nats_started = 1;
    return 0;
}

int cl_node_start(cl_cluster *c, int i, const char *const *extra)
{
    cl_node *n = &c->node[i];
    snprintf(n->name, sizeof(n->name), "n%d", i + 1);
    char root[sizeof(c->dir)];
    memcpy(root, c->dir, sizeof(root));
    snprintf(n->dir, sizeof(n->dir), "%s/n%d", root, i + 1);
    snprintf(n->log, sizeof(n->log), "%s/n%d.log", root, i + 1);
    mkdir(n->dir, 0755);
    /* Every node shares the store, the blobs, the bus and the Secrets' key;
     * the state directory (worker sockets, extracted code) is its own. */
    const char *mine[32] = {"--store", c->pg.url, "--blob", c->pg.url, "--bus", c->nats.url,
                            "--state-dir", n->dir, "--encryption-key-file", c->key,
                            "--data-plane-metrics", "--node-name", n->name};
    size_t k = 0;
    while (mine[k])
        k++;
    if (c->lease_ttl) {
        mine[k++] = "--lease-ttl";
        mine[k++] = c->lease_ttl;
    }
    for (size_t j = 0; extra && extra[j] && k + 1 < sizeof(mine) / sizeof(mine[0]); j++)
        mine[k++] = extra[j];
    mine[k] = NULL;
    const char *args[64];
    dd_default_args(args, 64, "--memory", NULL, mine);
    return dd_start(&n->d, n->log, args);
}

/* What node `n` runs below it now, kept for cl_down. */
static void note_procs(cl_node *n)
{
    if (n->d.pid > 0)
        n->nprocs = dd_descendants(n->d.pid, n->procs, CL_MAX_PROCS);
}

int64_t cl_node_kill(cl_cluster *c, int i)
{
    cl_node *n = &c->node[i];
    note_procs(n);
    dd_kill9(&n->d);
    return e2e_now_ms();
}

/* nginx's configuration: one upstream server per running node. As root
 * nginx would run its worker as nobody; `user` keeps it the current user. */
static int write_nginx_conf(const cl_cluster *c, const char *path, int port)
{
    FILE *f = fopen(path, "we");
    if (!f)
        return -1;
    const struct passwd *pw = getpwuid(geteuid());
    if (geteuid() == 0 && pw)
        fprintf(f, "user %s;\n", pw->pw_name);
    const char *d = c->nginx_dir;
    fprintf(f,
            "worker_processes 1;\ndaemon off;\npid %s/nginx.pid;\nerror_log %s/error.log;\n"
            "events { worker_connections 1024; }\n"
            "http {\n"
            "  log_format cl '$http_x_req $status $upstream_addr $upstream_status';\n"
            "  access_log %s cl;\n"
            "  client_body_temp_path %s; proxy_temp_path %s; fastcgi_temp_path %s;\n"
            "  uwsgi_temp_path %s; scgi_temp_path %s;\n"
            "  upstream funcd {\n",
            d, d, c->access_log, d, d, d, d, d);
    for (int i = 0; i < CL_NODES; i++)
        if (c->node[i].d.pid > 0)
            fprintf(f, "    server %s;\n", c->node[i].d.dp + strlen("http://"));
    fprintf(f,
            "    keepalive 32;\n"
            "  }\n"
            "  server {\n"
            "    listen 127.0.0.1:%d;\n"
            "    location / {\n"
            "      proxy_pass http://funcd;\n"
            "      proxy_http_version 1.1;\n"
            "      proxy_set_header Connection \"\";\n"
            /* A node that refuses or drops the connection: the next one
             * (nginx never resends a POST it already sent). */
            "      proxy_next_upstream error;\n"
            "      proxy_connect_timeout 2s;\n"
            "    }\n"
            "  }\n"
            "}\n",
            port);
    return fclose(f) == 0 ? 0 : -1;
}

static pid_t spawn_nginx(const cl_cluster *c, const char *conf)
{
    char err[400];
    snprintf(err, sizeof(err), "%s/error.log", c->nginx_dir);
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    /* Should the test die first, nginx goes with it. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
        _exit(0);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
    }
    execl(NGINX, "nginx", "-p", c->nginx_dir, "-c", conf, "-e", err, (char *)NULL);
    _exit(127);
}

static void stop_nginx(cl_cluster *c)
{
    if (c->nginx <= 0)
        return;
    kill(c->nginx, SIGTERM); /* fast shutdown: the master ends its worker */
    for (int waited = 0; waitpid(c->nginx, NULL, WNOHANG) == 0; waited += 10) {
        if (waited > 10000) {
            kill(c->nginx, SIGKILL);
            waitpid(c->nginx, NULL, 0);
            break;
        }
        dd_sleep_ms(10);
    }
    c->nginx = 0;
}

static void dump_file(const char *path)
{
    FILE *f = fopen(path, "re");
    char line[512];
    if (!f)
        return;
    fprintf(stderr, "  --- %s ---\n", path);
    while (fgets(line, sizeof(line), f))
        fprintf(stderr, "  | %s", line);
    fclose(f);
}

int cl_nginx_start(cl_cluster *c)
{
    snprintf(c->nginx_dir, sizeof(c->nginx_dir), "%s/nginx", c->dir);
    snprintf(c->access_log, sizeof(c->access_log), "%s/access.log", c->nginx_dir);
    mkdir(c->nginx_dir, 0755);
    char conf[400], err[400];
    snprintf(conf, sizeof(conf), "%s/nginx.conf", c->nginx_dir);
    snprintf(err, sizeof(err), "%s/error.log", c->nginx_dir);
    /* nginx cannot print a port the kernel picked: a free one is taken, and
     * should another process grab it in between, nginx exits and another
     * is tried. */
    for (int attempt = 0; attempt < 5; attempt++) {
        int port = test_free_port();
        if (port < 0 || write_nginx_conf(c, conf, port) < 0)
            return -1;
        c->nginx = spawn_nginx(c, conf);
        if (c->nginx < 0) {
            c->nginx = 0;
            return -1;
        }
        for (int waited = 0; waited < 10000; waited += 10) {
            if (waitpid(c->nginx, NULL, WNOHANG) == c->nginx) {
                c->nginx = 0;
                break;
            }
            if (test_port_accepts(port)) {
                snprintf(c->lb, sizeof(c->lb), "http://127.0.0.1:%d", port);
                return 0;
            }
            dd_sleep_ms(10);
        }
        stop_nginx(c);
    }
    fprintf(stderr, "  nginx did not start\n");
    dump_file(err);
    return -1;
}

/* Ends what outlived its node; 1 when something had to be ended. */
static int end_leftovers(cl_node *n)
{
    if (dd_all_gone(n->procs, n->nprocs, 5000))
        return 0;
    for (size_t i = 0; i < n->nprocs; i++)
        if (!dd_pid_gone(n->procs[i].pid, n->procs[i].start)) {
            fprintf(stderr, "  process %ld of %s outlived it by 5 s: ended\n",
                    (long)n->procs[i].pid, n->name);
            kill(n->procs[i].pid, SIGKILL);
        }
    return 1;
}

int cl_down(cl_cluster *c)
{
    stop_nginx(c);
    int leftovers = 0;
    for (int i = 0; i < CL_NODES; i++) {
        note_procs(&c->node[i]);
        dd_kill9(&c->node[i].d);
    }
    for (int i = 0; i < CL_NODES; i++)
        leftovers += end_leftovers(&c->node[i]);
    if (c->nats_started)
        nats_env_stop(&c->nats);
    if (c->pg_started)
        pg_env_free(&c->pg);
    c->nats_started = c->pg_started = 0;
    if (c->dir[0])
        funcd_remove_tree(c->dir);
    c->dir[0] = '\0';
    return leftovers > 0;
}

void cl_fn_url(char *out, size_t n, const char *base, const char *name, const char *rest)
{
    snprintf(out, n, "%s/fn/default/%s%s", base, name, rest ? rest : "");
}

long cl_put_function(const cl_cluster *c, const char *api, const char *name, const char *scaling)
{
    char body[1024], path[256];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"%s\"},\"spec\":{\"runtime\":\"native\",\"handler\":\"worker\","
             "\"source\":{\"path\":\"%s\"}%s%s}}",
             name, c->fn, scaling ? ",\"scaling\":" : "", scaling ? scaling : "");
    snprintf(path, sizeof(path), DD_NS "/functions/%s", name);
    e2e_http *h = e2e_http_new(api);
    e2e_resp r = E2E_RESP_INIT;
    long st = h ? e2e_http_do(h, "PUT", path, DD_TOKEN, body, &r) : 0;
    if (st != 200 && st != 201)
        fprintf(stderr, "  PUT %s: HTTP %ld %.300s\n", path, st, r.body ? r.body : "");
    e2e_resp_free(&r);
    e2e_http_free(h);
    return st;
}

long cl_wait_200(const char *url, int timeout_ms)
{
    /* e2e_http appends paths to a base: the whole URL is the base here. */
    e2e_http *h = e2e_http_new(url);
    e2e_resp r = E2E_RESP_INIT;
    int64_t t0 = e2e_now_ms();
    long took = -1;
    while (h && e2e_now_ms() - t0 < timeout_ms) {
        if (e2e_http_do(h, "GET", "", NULL, NULL, &r) == 200) {
            took = (long)(e2e_now_ms() - t0);
            break;
        }
        dd_sleep_ms(10);
    }
    if (took < 0)
        fprintf(stderr, "  %s: no 200 within %d ms, last HTTP %ld %.300s\n", url, timeout_ms,
                r.status, r.body ? r.body : "");
    e2e_resp_free(&r);
    e2e_http_free(h);
    return took;
}

static int ready_true(const cJSON *fn)
{
    const cJSON *cond;
    cJSON_ArrayForEach(cond, jget(fn, "status.conditions"))
    {
        const char *type = jstr(cond, "type"), *status = jstr(cond, "status");
        if (type && status && strcmp(type, "Ready") == 0)
            return strcmp(status, "True") == 0;
    }
    return 0;
}

long cl_wait_ready(const char *api, const char *name, int timeout_ms)
{
    char path[256];
    snprintf(path, sizeof(path), DD_NS "/functions/%s", name);
    e2e_http *h = e2e_http_new(api);
    e2e_resp r = E2E_RESP_INIT;
    int64_t t0 = e2e_now_ms();
    long took = -1;
    while (h && e2e_now_ms() - t0 < timeout_ms) {
        if (e2e_http_do(h, "GET", path, DD_TOKEN, NULL, &r) == 200 && ready_true(r.json)) {
            took = (long)(e2e_now_ms() - t0);
            break;
        }
        dd_sleep_ms(20);
    }
    if (took < 0)
        fprintf(stderr, "  %s not Ready within %d ms: HTTP %ld %.500s\n", name, timeout_ms,
                r.status, r.body ? r.body : "");
    e2e_resp_free(&r);
    e2e_http_free(h);
    return took;
}

int cl_nodes_view(const cl_cluster *c, int via, char *leader, size_t n, const char *name,
                  int *ready, int *nready)
{
    e2e_http *h = e2e_http_new(c->node[via].d.cp);
    e2e_resp r = E2E_RESP_INIT;
    int rc = -1;
    leader[0] = '\0';
    if (ready)
        *ready = 0;
    *nready = 0;
    if (h && e2e_http_do(h, "GET", "/apis/funcd.dev/v1/nodes", DD_TOKEN, NULL, &r) == 200) {
        const cJSON *item;
        cJSON_ArrayForEach(item, jget(r.json, "items"))
        {
            const char *node = jstr(item, "metadata.name");
            int is_ready = cJSON_IsTrue(jget(item, "status.ready"));
            if (node && cJSON_IsTrue(jget(item, "status.leader")))
                snprintf(leader, n, "%s", node);
            if (node && name && ready && strcmp(node, name) == 0)
                *ready = is_ready;
            *nready += is_ready;
        }
        rc = 0;
    }
    e2e_resp_free(&r);
    e2e_http_free(h);
    return rc;
}
