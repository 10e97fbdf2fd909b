/* The egress gateway as a serving plug-in (netsvc.h). */
#include <errno.h>
#include <event2/util.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "egress/netsvc.h"
#include "funcd/sys/error.h"

typedef struct egress_svc {
    funcd_netsvc base; /* first: the hooks get &base */
    funcd_egress_netsvc_config cfg;
    char *dns_upstream, *state_dir;
    char *platform[4];
    char *resolv; /* the workers' /etc/resolv.conf on the host */
    funcd_egress *eg;
    pthread_mutex_t lock; /* logs, logs_payload, invocations, inv_payload */
    funcd_egress_logs_of logs;
    void *logs_payload;
    funcd_egress_invocation_of invocations;
    void *inv_payload;
} egress_svc;

typedef struct plan_state {
    char *ns, *name;
    char *env[7];
} plan_state;

static void fn_log(void *payload, const char *ns, const char *fn, const char *replica,
                   const char *invocation, const char *line)
{
    egress_svc *s = payload;
    pthread_mutex_lock(&s->lock);
    funcd_log_ring *r = s->logs ? s->logs(s->logs_payload, ns, fn) : NULL;
    if (r) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        funcd_log_line l = {.time_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000,
                            .replica = replica,
                            .stream = 2,
                            .invocation_id = invocation,
                            .line = line,
                            .len = strlen(line)};
        funcd_log_ring_append(r, &l);
        funcd_log_ring_unref(r);
    }
    pthread_mutex_unlock(&s->lock);
}

static int invocation_of(void *payload, const char *ns, const char *fn, const char *replica,
                         char *out, size_t len)
{
    egress_svc *s = payload;
    pthread_mutex_lock(&s->lock);
    int found = s->invocations && s->invocations(s->inv_payload, ns, fn, replica, out, len);
    pthread_mutex_unlock(&s->lock);
    return found;
}

void funcd_egress_netsvc_set_invocations(funcd_netsvc *svc, funcd_egress_invocation_of fn,
                                         void *payload)
{
    egress_svc *s = (egress_svc *)svc;
    pthread_mutex_lock(&s->lock);
    s->invocations = fn;
    s->inv_payload = payload;
    pthread_mutex_unlock(&s->lock);
}

void funcd_egress_netsvc_set_logs(funcd_netsvc *svc, funcd_egress_logs_of logs, void *payload)
{
    egress_svc *s = (egress_svc *)svc;
    pthread_mutex_lock(&s->lock);
    s->logs = logs;
    s->logs_payload = payload;
    pthread_mutex_unlock(&s->lock);
}

/* funcd's own listeners, as the policies keep them closed. */
static void set_platform(egress_svc *s)
{
    funcd_egress_addr addrs[4];
    uint16_t ports[4];
    size_t n = 0;
    for (size_t i = 0; i < 4; i++) {
        if (!s->platform[i] || !*s->platform[i])
            continue;
        struct sockaddr_storage ss;
        int len = (int)sizeof(ss);
        if (evutil_parse_sockaddr_port(s->platform[i], (struct sockaddr *)&ss, &len) < 0 ||
            funcd_egress_addr_from_sockaddr((struct sockaddr *)&ss, &addrs[n]) < 0)
            continue;
        ports[n++] = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                                   : ((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    funcd_egress_policies_set_platform(funcd_egress_policies_of(s->eg), addrs, ports, n);
}

/* The gateway, started with the first Function that needs it. */
static int start(egress_svc *s)
{
    if (s->eg)
        return 0;
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/egress", s->state_dir);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return funcd_error_set(FUNCD_EIO, "egress: cannot create %s: %s", dir, strerror(errno));
    char path[4200];
    snprintf(path, sizeof(path), "%s/resolv.conf", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    static const char text[] = "# funcd egress: the gateway's DNS server in this worker's "
                               "namespace\nnameserver 127.0.0.1\n";
    if (fd < 0 || write(fd, text, sizeof(text) - 1) != (ssize_t)(sizeof(text) - 1)) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return funcd_error_set(FUNCD_EIO, "egress: cannot write %s: %s", path, strerror(e));
    }
    close(fd);
    if (!s->resolv && !(s->resolv = strdup(path)))
        return funcd_error_set(FUNCD_ENOMEM, "out of memory");
    funcd_egress_config ec = {
        .dns_upstream = s->dns_upstream,
        .logger = s->cfg.logger,
        .fn_log = fn_log,
        .invocation_of = invocation_of,
        .fn_log_payload = s,
        .metrics = s->cfg.metrics,
    };
    funcd_egress *eg;
    int rc = funcd_egress_new(&eg, &ec);
    if (rc < 0)
        return rc;
    s->eg = eg;
    set_platform(s);
    if (s->cfg.store && (rc = funcd_egress_watch(eg, s->cfg.store)) < 0) {
        funcd_egress_free(eg);
        s->eg = NULL;
        return rc;
    }
    return 0;
}

static void state_free(plan_state *st)
{
    if (!st)
        return;
    for (size_t i = 0; st->env[i]; i++)
        free(st->env[i]);
    free(st->ns);
    free(st->name);
    free(st);
}

static int plan(funcd_netsvc *svc, const char *ns, const char *name, const cJSON *fn,
                const cJSON *spec, int sandboxed, funcd_netsvc_plan *out, char reason[64])
{
    (void)fn;
    egress_svc *s = (egress_svc *)svc;
    const char *network = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "network"));
    if (!network || strcmp(network, "egress") != 0)
        return 0;
    if (!sandboxed) {
        snprintf(reason, 64, "EgressNeedsSandbox");
        funcd_error_set(FUNCD_ENOTSUP,
                        "spec.network: egress needs funcd's sandbox (a network namespace per "
                        "worker); this funcd runs with --no-sandbox, where its workers share the "
                        "host's network and no EgressPolicy could be enforced");
        return -1;
    }
    if (start(s) < 0) {
        snprintf(reason, 64, "EgressUnavailable");
        return -1;
    }
    plan_state *st = calloc(1, sizeof(*st));
    static const char *const vars[] = {
        "HTTP_PROXY=http://127.0.0.1:3128",  "HTTPS_PROXY=http://127.0.0.1:3128",
        "http_proxy=http://127.0.0.1:3128",  "https_proxy=http://127.0.0.1:3128",
        "NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1"};
    int oom = !st || !(st->ns = strdup(ns)) || !(st->name = strdup(name));
    for (size_t i = 0; !oom && i < sizeof(vars) / sizeof(vars[0]); i++)
        oom = !(st->env[i] = strdup(vars[i]));
    if (oom) {
        state_free(st);
        snprintf(reason, 64, "InternalError");
        funcd_error_set(FUNCD_ENOMEM, "out of memory planning the egress proxy");
        return -1;
    }
    out->listen[0] = (funcd_worker_listen){SOCK_STREAM, FUNCD_EGRESS_PROXY_PORT};
    out->listen[1] = (funcd_worker_listen){SOCK_DGRAM, FUNCD_EGRESS_DNS_PORT};
    out->listen[2] = (funcd_worker_listen){SOCK_STREAM, FUNCD_EGRESS_DNS_PORT};
    out->n_listen = 3;
    out->env = st->env;
    out->binds[0] = (funcd_worker_bind){s->resolv, "/etc/resolv.conf", 0, 1};
    out->n_binds = 1;
    out->state = st;
    return 1;
}

static void *attach(funcd_netsvc *svc, void *state, const char *replica, const int *fds, size_t n)
{
    egress_svc *s = (egress_svc *)svc;
    plan_state *st = state;
    if (n != 3 || !s->eg) {
        for (size_t i = 0; i < n; i++)
            close(fds[i]);
        return NULL;
    }
    return funcd_egress_attach(s->eg, st->ns, st->name, replica, fds[0], fds[1], fds[2]);
}

static void detach(funcd_netsvc *svc, void *handle)
{
    egress_svc *s = (egress_svc *)svc;
    funcd_egress_detach(s->eg, handle);
}

static void unplan(funcd_netsvc *svc, void *state)
{
    state_free(state);
}

funcd_netsvc *funcd_egress_netsvc_new(const funcd_egress_netsvc_config *cfg)
{
    egress_svc *s = calloc(1, sizeof(*s));
    if (!s) {
        funcd_error_set(FUNCD_ENOMEM, "out of memory");
        return NULL;
    }
    s->base = (funcd_netsvc){"egress", plan, attach, detach, unplan};
    s->cfg = *cfg;
    pthread_mutex_init(&s->lock, NULL);
    int oom = (cfg->dns_upstream && !(s->dns_upstream = strdup(cfg->dns_upstream))) ||
              !(s->state_dir = strdup(cfg->state_dir ? cfg->state_dir : "/tmp"));
    for (size_t i = 0; i < 4; i++)
        if (cfg->platform_addrs[i] && !(s->platform[i] = strdup(cfg->platform_addrs[i])))
            oom = 1;
    if (oom) {
        funcd_egress_netsvc_free(&s->base);
        funcd_error_set(FUNCD_ENOMEM, "out of memory");
        return NULL;
    }
    return &s->base;
}

void funcd_egress_netsvc_free(funcd_netsvc *svc)
{
    egress_svc *s = (egress_svc *)svc;
    if (!s)
        return;
    funcd_egress_free(s->eg);
    free(s->dns_upstream);
    free(s->state_dir);
    for (size_t i = 0; i < 4; i++)
        free(s->platform[i]);
    free(s->resolv);
    pthread_mutex_destroy(&s->lock);
    free(s);
}
