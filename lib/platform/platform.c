/*
 * The composition root: builds the backends and components from the
 * configuration, runs the platform loop, and tears everything down.
 *
 * Threads: the platform loop (libevent) runs on the thread that calls
 * funcd_platform_run (or a background thread from funcd_platform_start);
 * the control plane and the gateway run on their own h2o threads.
 */
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <ctype.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster/nodes.h"
#include "controller/controller.h"
#include "controlplane/api.h"
#include "controlplane/server.h"
#include "controlplane/quota.h"
#include "egress/netsvc.h"
#include "eventing/sources.h"
#include "funcd/funcd.h"
#include "funcd/sys/error.h"
#include "gateway/embedded.h"
#include "eventing/async.h"
#include "eventing/queue.h"
#include "invoke/invoke.h"
#include "gateway/prefix.h"
#include "localapi/localapi.h"
#include "metrics/egress.h"
#include "platform/options.h"
#include "port/gateway.h"
#include "port/runtime.h"
#include "runtime/cgroup.h"
#include "fnrunner/service.h"
#include "gateway/embedded.h"
#include "objects/encryption.h"
#include "store/sqlite_private.h"
#include "serving/serving.h"
#include "sites/sites.h"
#include "source/resolver.h"
#include "otlp/otlp.h"
#include "s3/s3.h"
#include "trace/edge.h"
#include "tls/tls.h"
#include "util/misc.h"
#include "workflow/workflow.h"

#ifndef FUNCD_DEFAULT_SHIM_DIR
#define FUNCD_DEFAULT_SHIM_DIR "/usr/local/libexec/funcd"
#endif

struct funcd_platform {
    funcd_config cfg;
    struct event_base *base;
    int stop_fd; /* eventfd: written by funcd_platform_stop, read by the loop */
    struct event *stop_ev;
    funcd_cp cp;
    funcd_cp_server *cp_server;
    funcd_controller *controller;
    funcd_cluster *cluster;  /* this node's heartbeat and the cluster lease */
    funcd_serving *serving;
    funcd_invoker *invoker;  /* internal invocations (lib/invoke) */
    funcd_queue *queue;      /* the delivery queue (lib/eventing/queue.h) */
    funcd_localapi *localapi; /* workers' FUNCD_API sockets (lib/localapi) */
    funcd_s3 *s3;            /* the S3 gateway (lib/s3), or NULL */
    funcd_netsvc *s3_netsvc; /* its listeners in workers' namespaces */
    char s3_addr[128];
    funcd_async *async;      /* /async/ on the data plane */
    funcd_workflows *workflows; /* runs, on the lease holder (lib/workflow) */
    funcd_sources *sources;
    funcd_evsources *evsources; /* EventSources (docs/eventing.md) */
    funcd_sites *sites;         /* Sites, served by the gateway itself (docs/sites.md) */
    funcd_fnrunner *fnrunner;
    funcd_pool_budget *node_budget; /* places for workers, parent of each namespace's */
    funcd_edge_recorder *edge; /* access log and spans, or NULL */
    funcd_metrics *metrics;
    funcd_netsvc *egress;      /* the egress gateway's plug-in (docs/egress.md) */
    funcd_metrics_egress *egress_metrics;
    funcd_otlp *otlp;          /* OTLP export, or NULL */
    funcd_logstore *logstore; /* persistent function logs, on the blob */
    struct event *log_tick;
    char fn_runner_addr[128];
    char *state_dir;     /* ours to remove when we made it */
    int own_state_dir;
    funcd_cgroup2_saved cgroup2; /* favordynmods, when we set it */
    char addr[128];
    char data_plane_addr[128];
    funcd_tls tls;                          /* the certificate served, when TLS is on */
    SSL_CTX *tls_cp, *tls_dp, *tls_fn;      /* one per listener: each its own ALPN */

    pthread_mutex_t lock; /* guards the lifecycle fields below */
    pthread_cond_t cond;
    int running;          /* a thread is inside the loop */
    int shut;             /* shutdown has begun */
    int torn_down;        /* shutdown has finished */
    int background;       /* started with funcd_platform_start */
    int components_started;
    pthread_t thread;
};

const char *funcd_version(void)
{
    return FUNCD_VERSION_STRING;
}

/* Every backend, injected or made here, passes its port's registration
 * check (lib/port/check.c): a version from 1 to the current one and the
 * required slots of that version. */
static int check_backends(const funcd_config *c)
{
    int rc = 0;
    if ((c->store && (rc = funcd_port_check_store(c->store)) < 0) ||
        (c->blob && (rc = funcd_port_check_blob(c->blob)) < 0) ||
        (c->bus && (rc = funcd_port_check_bus(c->bus)) < 0) ||
        (c->runtime && (rc = funcd_port_check_runtime(c->runtime)) < 0) ||
        (c->gateway && (rc = funcd_port_check_gateway(c->gateway)) < 0))
        return rc;
    return 0;
}

/* The instance id kept in `state_dir`/instance-id, made at the first start
 * (docs/adr/0019-instance-id.md): the runtime's cgroups carry it, so a
 * restart cleans up after this instance and never after another funcd. */
static int state_instance_id(const char *state_dir, char *out, size_t len)
{
    char path[4200], tmp[4300];
    snprintf(path, sizeof(path), "%s/instance-id", state_dir);
    for (int attempt = 0; attempt < 2; attempt++) {
        FILE *f = fopen(path, "re");
        if (f) {
            char line[64] = "";
            int ok = fgets(line, sizeof(line), f) != NULL;
            fclose(f);
            line[strcspn(line, "\n")] = '\0';
            if (!ok || !funcd_cgroup_instance_id_ok(line))
                return funcd_error_set(FUNCD_EINVAL, "%s does not hold an instance id (1 to 32 "
                                       "lowercase letters and digits, a letter first); remove it "
                                       "while funcd is stopped to make a new one", path);
            snprintf(out, len, "%s", line);
            return 0;
        }
        if (errno != ENOENT)
            return funcd_error_set(FUNCD_EIO, "cannot read %s: %s", path, strerror(errno));
        /* First start: written aside, then linked, so a reader never sees
         * half an id and a concurrent first start keeps the winner's. */
        int rc = funcd_cgroup_random_instance_id(out, len);
        if (rc < 0)
            return rc;
        snprintf(tmp, sizeof(tmp), "%s.%ld", path, (long)getpid());
        f = fopen(tmp, "we");
        int ok = f && fprintf(f, "%s\n", out) > 0;
        if (f && fclose(f) != 0)
            ok = 0;
        int linked = ok && link(tmp, path) == 0;
        int err = errno;
        unlink(tmp);
        if (linked)
            return 0;
        if (!ok || err != EEXIST)
            return funcd_error_set(FUNCD_EIO, "cannot write %s: %s", path, strerror(err));
    }
    return funcd_error_set(FUNCD_EIO, "cannot read %s", path);
}

/* Fills in what the preset promises and checks nothing required is missing. */
static int complete_config(funcd_config *c)
{
    int rc = 0;
    if (!c->preset)
        return funcd_error_set(FUNCD_EINVAL, "funcd_platform_new needs a preset first: "
                               "funcd_in_memory() or funcd_production()");
    if (c->memory_backends) {
        if (!c->store && (rc = funcd_store_memory_new(&c->store, 0)) < 0)
            return rc;
        if (!c->blob && (rc = funcd_blob_memory_new(&c->blob)) < 0)
            return rc;
        if (!c->bus && (rc = funcd_bus_memory_new(&c->bus)) < 0)
            return rc;
    }
    if (c->runtime && c->runtime_option)
        return funcd_error_set(FUNCD_EINVAL, "%s configures the process runtime funcd makes, "
                               "but funcd_with_runtime gives another one: set it up in the "
                               "runtime you pass (funcd_process_options for the process "
                               "runtime) and drop %s", c->runtime_option, c->runtime_option);
    if (!c->gateway && (rc = funcd_gateway_embedded_new(&c->gateway, 0)) < 0)
        return rc;
    if (!c->runtime) {
        /* A state directory that outlives the process gets pid files, so a
         * restart after a crash ends the workers the crashed run left. */
        char *pid_dir = NULL;
        if (c->state_dir && asprintf(&pid_dir, "%s/pids", c->state_dir) < 0)
            return funcd_error_set(FUNCD_ENOMEM, "out of memory");
        if (pid_dir && ((mkdir(c->state_dir, 0700) != 0 && errno != EEXIST) ||
                        (mkdir(pid_dir, 0700) != 0 && errno != EEXIST))) {
            free(pid_dir);
            return funcd_error_set(FUNCD_EIO, "cannot create the state directory %s: %s",
                                   c->state_dir, strerror(errno));
        }
        funcd_process_options po = FUNCD_PROCESS_OPTIONS_INIT;
        po.sandbox = c->sandbox ? 1 : -1;
        po.pid_dir = pid_dir;
        po.allow_host_network = c->allow_host_network;
        po.seccomp_allow = (const char *const *)c->seccomp_allow;
        char instance[FUNCD_CGROUP_MAX_INSTANCE_ID + 1];
        if (c->state_dir &&
            (rc = state_instance_id(c->state_dir, instance, sizeof(instance))) < 0) {
            free(pid_dir);
            return rc;
        }
        po.instance_id = c->state_dir ? instance : NULL; /* NULL: a random one */
        rc = funcd_runtime_process_new_with(&c->runtime, &po);
        free(pid_dir);
        if (rc < 0)
            return rc;
        c->sandboxed_runtime = c->sandbox != 0;
        char note[600]; /* the cgroup layout chosen, or why limits are off */
        int level = funcd_cgroup_note(note, sizeof(note));
        if (level >= 0)
            funcd_log(&c->logger, (funcd_log_level)level, "%s", note);
    }
    const char *missing = !c->store ? "store" : !c->blob ? "blob" : !c->bus ? "bus" : NULL;
    if (missing)
        return funcd_error_set(FUNCD_EMISSING, "no %s backend: funcd_production() needs "
                               "funcd_with_%s(...) (or use funcd_in_memory())", missing, missing);
    return check_backends(c);
}

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
    funcd_platform *p = arg;
    uint64_t v;
    if (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        return;
    event_base_loopbreak(p->base);
}

static void version_json(funcd_platform *p, char *out, size_t len)
{
    const funcd_config *c = &p->cfg;
    snprintf(out, len,
             "{\"version\":\"%s\",\"apiVersion\":\"funcd.dev/v1\",\"dataPlane\":\"%s\","
             "\"fnRunner\":\"%s\","
             "\"backends\":{\"store\":\"%s\",\"blob\":\"%s\",\"bus\":\"%s\",\"runtime\":\"%s\","
             "\"gateway\":\"%s\"}}",
             FUNCD_VERSION_STRING, p->data_plane_addr, p->fn_runner_addr, c->store->name ? c->store->name : "?",
             c->blob->name ? c->blob->name : "?", c->bus->name ? c->bus->name : "?",
             c->runtime && c->runtime->name ? c->runtime->name : "none",
             c->gateway->name ? c->gateway->name : "?");
}

static void on_serving_changed(const char *ns, const char *name, void *payload)
{
    funcd_platform *p = payload;
    size_t sl = strlen(FUNCD_SITES_SOURCE_PREFIX);
    if (strncmp(name, FUNCD_SITES_SOURCE_PREFIX, sl) == 0) { /* a Site's source (sites.h) */
        funcd_sites_source_changed(p->sites, ns, name + sl);
        return;
    }
    funcd_controller_requeue(p->controller, "functions", ns, name);
    funcd_cluster_poke(p->cluster); /* the others (the leader) see our counts soon */
}

/* The state directory: given, or a private one we remove at shutdown. */
static int make_state_dir(funcd_platform *p)
{
    if (p->cfg.state_dir) {
        if (mkdir(p->cfg.state_dir, 0700) != 0 && errno != EEXIST)
            return funcd_error_set(FUNCD_EIO, "cannot create the state directory %s: %s",
                                   p->cfg.state_dir, strerror(errno));
        p->state_dir = strdup(p->cfg.state_dir);
        /* Sockets of a previous run (its workers were ended when the runtime
         * was created); extracted artifacts stay and are reused. */
        static const char *const stale[] = {"run", "fnrun"};
        for (size_t i = 0; p->state_dir && i < 2; i++) {
            char path[4200];
            snprintf(path, sizeof(path), "%s/%s", p->state_dir, stale[i]);
            funcd_remove_tree(path);
        }
    } else {
        const char *tmp = getenv("TMPDIR");
        if (asprintf(&p->state_dir, "%s/funcd-XXXXXX", tmp && *tmp ? tmp : "/tmp") < 0)
            p->state_dir = NULL;
        if (p->state_dir && !mkdtemp(p->state_dir))
            return funcd_error_set(FUNCD_EIO, "cannot create a state directory under %s: %s",
                                   tmp && *tmp ? tmp : "/tmp", strerror(errno));
        p->own_state_dir = 1;
    }
    return p->state_dir ? 0 : funcd_error_set(FUNCD_ENOMEM, "out of memory");
}

static const char *shim_dir(const funcd_config *c)
{
    const char *env = getenv("FUNCD_SHIM_DIR");
    return c->shim_dir ? c->shim_dir : env && *env ? env : FUNCD_DEFAULT_SHIM_DIR;
}

/* Workers run in their own directories: every path handed to them (the
 * shims, their sockets under the state directory) must be absolute. */
static int make_absolute(char **path)
{
    if (!*path || (*path)[0] == '/')
        return 0;
    char *abs = realpath(*path, NULL);
    if (!abs)
        return funcd_error_set(FUNCD_EINVAL, "cannot resolve %s: %s", *path, strerror(errno));
    free(*path);
    *path = abs;
    return 0;
}

/* Secrets at rest (docs/adr/0025-secret-encryption.md): the store is wrapped
 * so Secrets are sealed before any driver sees them, with the key file's
 * key, or a random key of the process for the memory store; a sqlite store
 * also drops a deleted Secret's history. A key that does not open the
 * stored Secrets stops the start. */
static int setup_secrets(funcd_platform *p)
{
    funcd_config *c = &p->cfg;
    uint8_t key[FUNCD_ENC_KEY_LEN];
    int created = 0, rc = 0;
    if (funcd__store_sqlite_db(c->store) &&
        (rc = funcd__store_sqlite_purge_prefix(c->store, FUNCD_SECRETS_PREFIX)) < 0)
        return rc;
    if (c->encryption_key_file) {
        rc = funcd_enc_key_file(c->encryption_key_file, 1, key, &created);
    } else if (c->store->name && strcmp(c->store->name, "memory") == 0) {
        rc = funcd_enc_random_key(key);
    } else {
        funcd_log(&c->logger, FUNCD_LOG_WARN,
                  "Secrets are stored unencrypted in the %s store: give an encryption key file "
                  "(funcd_with_encryption_key_file, funcd --encryption-key-file)",
                  c->store->name ? c->store->name : "injected");
        return 0;
    }
    if (rc < 0)
        return rc;
    if (created)
        funcd_log(&c->logger, FUNCD_LOG_INFO,
                  "created encryption key file %s: back it up; without it the Secrets in the "
                  "store cannot be read", c->encryption_key_file);
    funcd_store *inner = c->store;
    c->store = NULL;
    rc = funcd_store_encrypting_new(&c->store, inner, key, FUNCD_SECRETS_PREFIX);
    memset(key, 0, sizeof(key));
    size_t sealed = 0;
    if (rc == 0 && (rc = funcd_store_encrypting_check(c->store, &sealed)) < 0) {
        char msg[1100];
        snprintf(msg, sizeof(msg), "%s", funcd_error_last()->message);
        return funcd_error_set(rc, "%s (encryption key: %s)", msg,
                               c->encryption_key_file ? c->encryption_key_file
                                                      : "a random key of this process");
    }
    if (sealed)
        funcd_log(&c->logger, FUNCD_LOG_INFO, "encrypted %zu Secrets stored before encryption "
                  "was on", sealed);
    return rc;
}

static void on_log_tick(evutil_socket_t fd, short what, void *arg)
{
    funcd_platform *p = arg;
    /* Compaction and retention work on the shared blob: once, by the leader. */
    if (funcd_cluster_is_leader(p->cluster))
        funcd_logstore_tick(p->logstore, funcd_now_ms());
    else
        funcd_logstore_flush(p->logstore, funcd_now_ms());
}

/* A host-wide setting, only on the operator's request, and said so. */
static void favor_dynmods(funcd_platform *p)
{
    int rc = funcd_cgroup2_favor_dynmods(&p->cgroup2);
    if (rc > 0)
        funcd_log(&p->cfg.logger, FUNCD_LOG_INFO, "cgroup: set favordynmods on the host's cgroup2 "
                  "mount %s (--cgroup-favordynmods); it is cleared again at shutdown",
                  p->cgroup2.mnt);
    else if (rc == 0)
        funcd_log(&p->cfg.logger, FUNCD_LOG_INFO, "cgroup: favordynmods is already set on the "
                  "host's cgroup2 mount %s; left as it is", p->cgroup2.mnt);
    else
        funcd_log(&p->cfg.logger, FUNCD_LOG_WARN, "%s; sandboxed cold starts stay slower",
                  funcd_error_last()->message);
}

static void restore_favor_dynmods(funcd_platform *p)
{
    if (!p->cgroup2.changed)
        return;
    if (funcd_cgroup2_restore(&p->cgroup2) < 0)
        funcd_log(&p->cfg.logger, FUNCD_LOG_WARN, "%s: favordynmods stays set",
                  funcd_error_last()->message);
    else
        funcd_log(&p->cfg.logger, FUNCD_LOG_INFO, "cgroup: cleared favordynmods on the host's "
                  "cgroup2 mount %s again", p->cgroup2.mnt);
}

/* Request records for the access log (and the OTLP exporter): only when
 * asked for; the gateway's threads record nothing otherwise. */
static int start_edge_recorder(funcd_platform *p)
{
    int rc;
    if (p->cfg.otlp_endpoint) {
        funcd_otlp_config oc = {.endpoint = p->cfg.otlp_endpoint, .logger = &p->cfg.logger};
        if ((rc = funcd_otlp_new(&p->otlp, &oc)) < 0)
            return rc;
        /* Function log lines reach the exporter, then the embedder's observer. */
        funcd_otlp_set_next_observer(p->otlp, p->cfg.observer, p->cfg.observer_payload);
        p->cfg.observer = funcd_otlp_observe;
        p->cfg.observer_payload = p->otlp;
    }
    if (!p->cfg.access_log && !p->otlp)
        return 0;
    rc = funcd_edge_recorder_new(&p->edge, p->cfg.access_log, p->otlp ? funcd_otlp_on_edge : NULL,
                                 p->otlp, 1, &p->cfg.logger);
    if (rc < 0)
        return rc;
    funcd_gw_set_edge_recorder(p->cfg.gateway, p->edge);
    return 0;
}

/* TLS on every listener (docs/adr/0041-tls.md): the operator's pair, or
 * the self-signed one kept in its directory (the state directory unless
 * named). */
static int setup_tls(funcd_platform *p)
{
    funcd_config *c = &p->cfg;
    if (!c->tls_cert && !c->tls_self_signed)
        return 0;
    int rc = c->tls_self_signed
                 ? funcd_tls_self_signed(&p->tls, c->tls_dir ? c->tls_dir : p->state_dir)
                 : funcd_tls_load(&p->tls, c->tls_cert, c->tls_key);
    if (rc < 0)
        return rc;
    if (!(p->tls_cp = funcd_tls_server_ctx(&p->tls, FUNCD_TLS_ALPN_HTTP1)) ||
        !(p->tls_dp = funcd_tls_server_ctx(&p->tls, FUNCD_TLS_ALPN_H2_HTTP1)) ||
        !(p->tls_fn = funcd_tls_server_ctx(&p->tls, FUNCD_TLS_ALPN_H2)))
        return funcd_error_last()->code;
    funcd_log(&c->logger, FUNCD_LOG_INFO, "TLS: %s certificate %s%s, SHA-256 fingerprint %s",
              p->tls.self_signed ? "self-signed" : "the", p->tls.cert_file,
              p->tls.created ? " (made now)" : p->tls.self_signed ? " (kept from before)" : "",
              p->tls.fingerprint);
    if (funcd_gateway_embedded_set_tls(c->gateway, p->tls_dp) < 0)
        funcd_log(&c->logger, FUNCD_LOG_WARN, "TLS: the data plane's gateway (%s) is not the "
                  "embedded one: it serves as it is configured, without funcd's certificate",
                  c->gateway->name ? c->gateway->name : "injected");
    return 0;
}

static unsigned live_workers(funcd_platform *p)
{
    return funcd_serving_live_workers(p->serving) + funcd_fnrunner_live_workers(p->fnrunner);
}

static unsigned cluster_workers(void *payload)
{
    return live_workers(payload);
}

/* A new leader rewrites every status (the old one may have left them
 * stale); the others' replica counts reach the statuses they sum into. */
static void on_leading(int leader, void *payload)
{
    funcd_platform *p = payload;
    if (leader)
        funcd_controller_resync(p->controller);
    funcd_evsources_leading(p->evsources, leader); /* cron and blob run on the leader */
}

static void on_replicas_changed(const char *ns, const char *name, void *payload)
{
    funcd_platform *p = payload;
    funcd_controller_requeue(p->controller, "functions", ns, name);
}

/* This node (docs/adr/0044-nodes-and-leases.md): named after the host
 * unless told, reached where its data plane listens unless told. */
static const char *node_name(funcd_platform *p, char host[256])
{
    const char *name = p->cfg.node_name;
    if (!name) {
        /* A host name as a node name: lowercased, anything else a '-'. */
        if (gethostname(host, 255) != 0)
            host[0] = '\0';
        host[255] = '\0';
        for (char *h = host; *h; h++) {
            *h = (char)tolower((unsigned char)*h);
            if (!isalnum((unsigned char)*h) && *h != '.')
                *h = '-';
        }
        name = funcd_node_name_ok(host) ? host : "funcd";
    }
    return name;
}

/* The data plane's /async/fn/{ns}/{name}/: async invocations. */
static void on_async_call(funcd_gw_call *call, void *payload)
{
    funcd_async_call(call, ((funcd_platform *)payload)->async);
}

/* The data plane's /events/{ns}/{name}: webhook EventSources. */
static void on_events_call(funcd_gw_call *call, void *payload)
{
    funcd_evsources_webhook(call, ((funcd_platform *)payload)->evsources);
}

static int make_evsources(funcd_platform *p)
{
    funcd_evsources_config ec = {
        .loop = p->base,
        .store = p->cfg.store,
        .blob = p->cfg.blob,
        .bus = p->cfg.bus,
        .cluster = p->cluster,
        .logger = &p->cfg.logger,
        .blob_poll_ms = p->cfg.blob_poll_ms,
        .submit = funcd_evsources_queue_submit, /* their events into the delivery queue */
        .submit_payload = p->queue,
        .workflow_payload_limit = (size_t)p->cfg.wf_payload_limit,
        .metrics = p->metrics,
        .anonymous_share = p->cfg.queue_anonymous_share ? p->cfg.queue_anonymous_share
                                                        : FUNCD_QUEUE_ANONYMOUS_NONE,
    };
    int rc = funcd_evsources_new(&p->evsources, &ec);
    if (rc == 0)
        rc = funcd_evsources_queue_outcomes(p->queue, p->evsources); /* their status counts */
    return rc;
}

/* Whether this node holds the lease (before the cluster exists, and with
 * one node: yes). Tag and git polling is the leader's (the others take its
 * resolutions from the store), and so is the KV sweep. */
static int leads(void *payload)
{
    funcd_platform *p = payload;
    return funcd_cluster_is_leader(p->cluster);
}

static int make_sites(funcd_platform *p)
{
    char cache[4200];
    snprintf(cache, sizeof(cache), "%s/bundles", p->state_dir); /* serving's bundle cache */
    funcd_sites_config sc = {
        .loop = p->base,
        .store = p->cfg.store,
        .blob = p->cfg.blob,
        .sources = p->sources,
        .cluster = p->cluster,
        .bundle_cache = cache,
        .default_index = p->cfg.site_default_index,
        .cache_bytes = p->cfg.site_cache_set ? (int64_t)p->cfg.site_cache_bytes : -1,
        .send_timeout_ms = p->cfg.site_send_timeout_ms,
        .logger = &p->cfg.logger,
    };
    int rc = funcd_sites_new(&p->sites, &sc);
    if (rc == 0) /* the embedded gateway answers them on its threads */
        funcd_gw_set_files(p->cfg.gateway, funcd_sites_serve, p->sites,
                           funcd_sites_host_count(p->sites));
    if (rc == 0 && p->metrics)
        funcd_metrics_set_sites_source(p->metrics, funcd_sites_cache_stats, p->sites);
    return rc;
}

static int make_cluster(funcd_platform *p)
{
    char host[256] = "";
    const char *name = node_name(p, host);
    funcd_cluster_config cc = {
        .loop = p->base,
        .store = p->cfg.store,
        .name = name,
        .address = p->cfg.node_address ? p->cfg.node_address : p->data_plane_addr,
        .ttl_ms = p->cfg.lease_ttl_ms,
        .logger = &p->cfg.logger,
        .serving = p->serving,
        .workers = cluster_workers,
        .leading = on_leading,
        .replicas_changed = on_replicas_changed,
        .payload = p,
    };
    return funcd_cluster_new(&p->cluster, &cc);
}

/* A Function's log ring, for the egress gateway's denials (any thread). */
static funcd_log_ring *egress_logs_of(void *payload, const char *ns, const char *fn)
{
    funcd_platform *p = payload;
    return funcd_serving_logs(p->serving, ns, fn);
}

/* The one invocation a replica runs, for the egress gateway's audit lines
 * (any thread). */
static int egress_invocation_of(void *payload, const char *ns, const char *fn,
                                const char *replica, char *out, size_t len)
{
    funcd_platform *p = payload;
    return funcd_serving_invocation_of(p->serving, ns, fn, replica, out, len);
}

static int build(funcd_platform *p)
{
    int rc = complete_config(&p->cfg);
    if (rc < 0 || (rc = setup_secrets(p)) < 0)
        return rc;
    if (p->cfg.cgroup_favordynmods)
        favor_dynmods(p);
    /* Precise timers: worker readiness is probed at sub-millisecond steps. */
    struct event_config *ec = event_config_new();
    if (ec)
        event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER);
    p->base = ec ? event_base_new_with_config(ec) : NULL;
    if (ec)
        event_config_free(ec);
    p->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!p->base || p->stop_fd < 0)
        return funcd_error_set(FUNCD_EIO, "cannot create the platform loop: %s", strerror(errno));
    p->stop_ev = event_new(p->base, p->stop_fd, EV_READ | EV_PERSIST, on_stop, p);
    if (!p->stop_ev || event_add(p->stop_ev, NULL) < 0)
        return funcd_error_set(FUNCD_ENOMEM, "cannot register the stop event");
    if ((rc = funcd_port_runtime_attach(p->cfg.runtime, p->base)) < 0)
        return rc;
    if ((rc = make_state_dir(p)) < 0 || (rc = make_absolute(&p->state_dir)) < 0)
        return rc;
    if (!p->cfg.shim_dir && (p->cfg.shim_dir = strdup(shim_dir(&p->cfg))) == NULL)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory");
    if (access(p->cfg.shim_dir, F_OK) == 0 && (rc = make_absolute(&p->cfg.shim_dir)) < 0)
        return rc;
    if (p->cfg.functions_dir && (rc = make_absolute(&p->cfg.functions_dir)) < 0)
        return rc;

    if ((rc = setup_tls(p)) < 0)
        return rc;
    /* A gateway of the embedder's own takes no limit from us. */
    funcd_gateway_embedded_set_max_connections(p->cfg.gateway, p->cfg.max_connections);
    funcd_gw_set_logger(p->cfg.gateway, &p->cfg.logger);
    if ((rc = start_edge_recorder(p)) < 0)
        return rc;
    /* One counter slot per gateway thread (docs/observability.md). */
    unsigned gw_threads = funcd_gateway_embedded_threads(p->cfg.gateway);
    if ((rc = funcd_metrics_new(&p->metrics, gw_threads ? gw_threads : 1)) < 0)
        return rc;
    funcd_gw_set_metrics(p->cfg.gateway, p->metrics, p->cfg.data_plane_metrics);
    funcd_gw_add_prefix(p->cfg.gateway, "/events/", on_events_call, p); /* embedded only */
    funcd_gw_add_prefix(p->cfg.gateway, "/async/", on_async_call, p);
    if (p->otlp)
        funcd_otlp_set_metrics(p->otlp, p->metrics);
    rc = funcd_port_gateway_listen(p->cfg.gateway, p->cfg.data_plane_addr, p->data_plane_addr,
                                   sizeof(p->data_plane_addr));
    if (rc < 0)
        return rc;
    char host[256] = "";
    funcd_sources_config srcc = {
        .loop = p->base,
        .store = p->cfg.store,
        .cache_dir = p->state_dir,
        .auth_file = p->cfg.registry_auth_file,
        .certs_dir = p->cfg.registry_certs_dir,
        .insecure = (const char *const *)p->cfg.insecure_registries,
        .allowed = (const char *const *)p->cfg.allowed_registries,
        .os = p->cfg.node_os,
        .arch = p->cfg.node_arch,
        .image_cache_bytes = p->cfg.image_cache_bytes,
        .image_blob_cache_bytes = p->cfg.image_blob_cache_bytes,
        .tag_refresh_ms = p->cfg.tag_refresh_ms,
        .git_poll_ms = p->cfg.git_poll_ms,
        .logger = &p->cfg.logger,
        .changed = on_serving_changed,
        .changed_payload = p,
        .polls = leads,
        .polls_payload = p,
        .node = node_name(p, host),
    };
    if ((rc = funcd_sources_new(&p->sources, &srcc)) < 0)
        return rc;
    /* The node's places for workers: every namespace's (serving) and the
     * function runner's take from it. */
    p->node_budget = funcd_pool_budget_new(p->cfg.max_workers_set ? p->cfg.max_workers : 1000,
                                           NULL, "this node", "funcd --max-workers");
    if (!p->node_budget)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the node's worker budget");
    funcd_fnrunner_config fc = {
        .loop = p->base,
        .store = p->cfg.store,
        .runtime = p->cfg.runtime,
        .functions_dir = p->cfg.functions_dir,
        .shim_dir = shim_dir(&p->cfg),
        .state_dir = p->state_dir,
        .config_namespace = "default",
        .max_message = p->cfg.fn_runner_max_message, /* 0: 6 MiB */
        .builtins = p->cfg.builtins,
        .n_builtins = p->cfg.n_builtins,
        .logger = &p->cfg.logger,
        .sources = p->sources,
        .auth = p->cfg.fn_runner_auth_on ? &p->cfg.fn_runner_auth : NULL,
        .tls = p->tls_fn,
        .budget = p->node_budget,
    };
    rc = funcd_fnrunner_new(&p->fnrunner, &fc, p->cfg.fn_runner_addr, p->fn_runner_addr,
                            sizeof(p->fn_runner_addr));
    if (rc < 0)
        return rc;
    char vj[768];
    version_json(p, vj, sizeof(vj));
    funcd_cp_init(&p->cp, p->cfg.store, &p->cfg.auth, vj);
    p->cp.source_roots = (const char *const *)p->cfg.source_roots;
    p->cp.metrics = p->metrics;
    p->cp.metrics_open = p->cfg.metrics_open;
    p->cp.kv_store_quota = p->cfg.kv_quota_set ? p->cfg.kv_store_quota : FUNCD_KV_STORE_QUOTA_DEFAULT;
    p->cp.object_quota = p->cfg.object_quota_set ? p->cfg.object_quota
                                                 : FUNCD_OBJECT_QUOTA_DEFAULT;
    funcd_cp_server_limits cl = {p->cfg.stream_buffer, p->cfg.max_connections, p->tls_cp};
    rc = funcd_cp_server_new(&p->cp_server, &p->cp, p->cfg.listen_addr, &cl, p->addr,
                             sizeof(p->addr));
    if (rc < 0)
        return rc;
    /* Nodes share the blob: each writes under its own name, reads merge
     * (docs/adr/0043-logs-and-images-across-nodes.md). */
    funcd_logstore_options lo = {p->cfg.log_seal_ms, p->cfg.log_seal_bytes,
                                 p->cfg.log_retention_ms, node_name(p, host)};
    struct timeval every_second = {1, 0};
    if ((rc = funcd_logstore_new(&p->logstore, p->cfg.blob, &lo)) < 0)
        return rc;
    if (!(p->log_tick = event_new(p->base, -1, EV_PERSIST, on_log_tick, p)) ||
        event_add(p->log_tick, &every_second) < 0)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory starting the log store's timer");
    /* The edge checks tokens with the control plane's own (docs/edge.md). */
    p->cfg.edge.authorize = funcd_auth_authorize_invoke;
    p->cfg.edge.authorize_payload = &p->cfg.auth;
    if ((rc = funcd_localapi_new(&p->localapi, p->base, p->cfg.store, &p->cfg.logger)) < 0)
        return rc;
    if (p->cfg.s3) {
        /* funcd_in_memory() without a state directory of the embedder's: the
         * master secret lives as long as the process (docs/s3.md) */
        int volatile_secret = p->cfg.preset == OPT_IN_MEMORY && p->own_state_dir;
        funcd_s3_config s3c = {.store = p->cfg.store, .blob = p->cfg.blob,
                               .logger = &p->cfg.logger, .listen_addr = p->cfg.s3_listen,
                               .master_secret_file = p->cfg.s3_secret_file,
                               .state_dir = volatile_secret ? NULL : p->state_dir,
                               .max_upload = p->cfg.s3_max_upload};
        if ((rc = funcd_s3_new(&p->s3, &s3c, p->s3_addr, sizeof(p->s3_addr))) < 0)
            return rc;
        p->cp.s3 = p->s3;
        if (!(p->s3_netsvc = funcd_s3_netsvc_new(p->s3)))
            return funcd_error_set(FUNCD_ENOMEM, "out of memory");
    }
    funcd_egress_netsvc_config egc = {
        .dns_upstream = p->cfg.egress_dns_upstream,
        .state_dir = p->state_dir,
        .store = p->cfg.store,
        .logger = &p->cfg.logger,
        .metrics = p->egress_metrics = funcd_metrics_egress_new(),
        .platform_addrs = {p->addr, p->data_plane_addr, p->fn_runner_addr, p->s3_addr},
    };
    if (!p->egress_metrics || !(p->egress = funcd_egress_netsvc_new(&egc)))
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the egress gateway");
    funcd_metrics_set_egress(p->metrics, p->egress_metrics);
    funcd_serving_config sc = {
        .localapi = p->localapi,
        .edge_defaults = &p->cfg.edge,
        .loop = p->base,
        .runtime = p->cfg.runtime,
        .blob = p->cfg.blob,
        .gateway = p->cfg.gateway,
        .shim_dir = shim_dir(&p->cfg),
        .state_dir = p->state_dir,
        .logger = &p->cfg.logger,
        .observer = p->cfg.observer,
        .observer_payload = p->cfg.observer_payload,
        .changed = on_serving_changed,
        .changed_payload = p,
        .logstore = p->logstore,
        .sources = p->sources,
        .metrics = p->metrics,
        .sandboxed = p->cfg.sandboxed_runtime,
        .namespace_max_workers = p->cfg.ns_max_workers_set ? p->cfg.ns_max_workers : 100,
        .node_budget = p->node_budget,
    };
    if (p->s3_netsvc)
        sc.netsvc[sc.n_netsvc++] = p->s3_netsvc;
    sc.netsvc[sc.n_netsvc++] = p->egress;
    if ((rc = funcd_serving_new(&p->serving, &sc)) < 0)
        return rc;
    funcd_egress_netsvc_set_logs(p->egress, egress_logs_of, p);
    funcd_egress_netsvc_set_invocations(p->egress, egress_invocation_of, p);
    funcd_metrics_set_gauge_source(p->metrics, funcd_serving_gauges, p->serving);
    if ((rc = funcd_invoker_new(&p->invoker, p->base, p->serving, &p->cfg.logger)) < 0)
        return rc;
    funcd_localapi_set_invoker(p->localapi, p->invoker);
    p->cp.serving = p->serving;
    p->cp.sources = p->sources;
    p->cp.blob = p->cfg.blob;
    if ((rc = make_cluster(p)) < 0 || (rc = make_sites(p)) < 0)
        return rc;
    /* Expired KV keys are swept by the lease holder (one node is its own). */
    funcd_kv_sweeper_set_gate(funcd_localapi_kv_sweeper(p->localapi), leads, p);
    funcd_queue_config qc = {.loop = p->base, .store = p->cfg.store, .blob = p->cfg.blob,
                             .invoker = p->invoker, .cluster = p->cluster,
                             .logger = &p->cfg.logger,
                             .invocation_retention_ms = p->cfg.invocation_retention_ms,
                             .dlq_retention_ms = p->cfg.dlq_retention_ms,
                             .dlq_max_entries = (unsigned)p->cfg.dlq_max_entries,
                             .max_pending = p->cfg.queue_max_pending,
                             .max_bytes = p->cfg.queue_max_bytes,
                             .anonymous_share = p->cfg.queue_anonymous_share
                                                    ? p->cfg.queue_anonymous_share
                                                    : FUNCD_QUEUE_ANONYMOUS_NONE,
                             .callback_allow = (const char *const *)p->cfg.callback_allow,
                             .platform_addrs = {p->addr, p->data_plane_addr, p->fn_runner_addr,
                                                p->s3_addr}};
    if ((rc = funcd_queue_new(&p->queue, &qc)) < 0 || (rc = make_evsources(p)) < 0 ||
        (rc = funcd_queue_metrics_start(p->queue, p->metrics)) < 0)
        return rc; /* (the event sources submit to the queue) */
    funcd_async_config ac = {.loop = p->base, .queue = p->queue, .serving = p->serving,
                             .authorize = p->cfg.edge.authorize,
                             .authorize_payload = p->cfg.edge.authorize_payload,
                             .logger = &p->cfg.logger, .max_body = p->cfg.async_max_body};
    if ((rc = funcd_async_new(&p->async, &ac)) < 0)
        return rc;
    p->cp.queue = p->queue;
    funcd_workflows_config wc = {
        .loop = p->base, .store = p->cfg.store, .invoker = p->invoker, .cluster = p->cluster,
        .logger = &p->cfg.logger, .step_timeout_ms = p->cfg.wf_step_timeout_ms,
        .retry_attempts = p->cfg.wf_retry_attempts, .retention_ms = p->cfg.wf_retention_ms,
        .payload_limit = (size_t)p->cfg.wf_payload_limit};
    if ((rc = funcd_workflows_new(&p->workflows, &wc)) < 0)
        return rc;
    p->cp.workflow_payload_limit = wc.payload_limit;
    funcd_controller_config cc = {p->base, p->cfg.store, p->serving, &p->cfg.logger, 0,
                                  p->cluster};
    return funcd_controller_new(&p->controller, &cc);
}

static void on_drain_tick(evutil_socket_t fd, short what, void *arg)
{
    funcd_platform *p = arg;
    if (live_workers(p) == 0)
        event_base_loopbreak(p->base);
}

static void on_busy_tick(evutil_socket_t fd, short what, void *arg)
{
    funcd_platform *p = arg;
    if (funcd_serving_busy(p->serving) == 0)
        event_base_loopbreak(p->base);
}

/* Graceful part of a shutdown: the data plane stops accepting, and the
 * requests it holds (in flight or waiting for a cold start) may finish
 * until the grace period ends. The loop runs meanwhile: cold starts and
 * worker events still need it. */
static void drain_requests(funcd_platform *p)
{
    funcd_gateway *gw = p->cfg.gateway;
    if (gw)
        funcd_port_gateway_quiesce(gw); /* FUNCD_ENOTSUP without it: stop does it all */
    if (funcd_serving_busy(p->serving) == 0)
        return;
    uint64_t grace = p->cfg.shutdown_grace_ms ? p->cfg.shutdown_grace_ms : 10000;
    struct event *tick = event_new(p->base, -1, EV_PERSIST, on_busy_tick, p);
    struct timeval every = {0, 2000};
    struct timeval limit = {(time_t)(grace / 1000), (suseconds_t)(grace % 1000) * 1000};
    if (!tick)
        return;
    funcd_log(&p->cfg.logger, FUNCD_LOG_INFO, "shutdown: waiting up to %llu ms for %u requests",
              (unsigned long long)grace, funcd_serving_busy(p->serving));
    event_add(tick, &every);
    event_base_loopexit(p->base, &limit);
    if (p->stop_ev) /* shutdown wrote to it too: it would end this loop at once */
        event_del(p->stop_ev);
    event_base_dispatch(p->base);
    event_free(tick);
}

/* Stops the workers and runs the loop until they have exited (bounded:
 * the runtime kills what is left when it is freed). */
static void drain_workers(funcd_platform *p)
{
    if (!p->serving || !p->base)
        return;
    drain_requests(p);
    funcd_serving_close(p->serving);
    if (p->fnrunner)
        funcd_fnrunner_close(p->fnrunner);
    if (live_workers(p) == 0)
        return;
    struct event *tick = event_new(p->base, -1, EV_PERSIST, on_drain_tick, p);
    struct timeval every = {0, 5000}, limit = {3, 0};
    if (!tick)
        return;
    event_add(tick, &every);
    event_base_loopexit(p->base, &limit);
    if (p->stop_ev) /* shutdown wrote to it too: it would end this loop at once */
        event_del(p->stop_ev);
    event_base_dispatch(p->base);
    event_free(tick);
}

static void teardown(funcd_platform *p)
{
    funcd_cp_server_free(p->cp_server); /* no API calls from here on */
    p->cp_server = NULL;
    funcd_cp_counts_free(p->cp.counts);
    p->cp.counts = NULL;
    funcd_queue_close(p->queue); /* no new attempt; those running may finish while draining */
    funcd_workflows_stop(p->workflows); /* runs resume at the next start, not fail in the drain */
    drain_workers(p); /* also fails waiting requests while the gateway still runs */
    funcd_cluster_stop(p->cluster); /* the others see this node leave, and lead */
    funcd_evsources_close(p->evsources); /* answers the webhook calls still waiting */
    funcd_sites_close(p->sites);
    funcd_async_close(p->async);         /* and the async calls */
    if (p->cfg.gateway)
        funcd_port_gateway_stop(p->cfg.gateway);
    funcd_queue_abandon(p->queue); /* attempts still running stay Running: redone at restart */
    funcd_localapi_set_invoker(p->localapi, NULL); /* workers' calls from here on: 503 */
    funcd_invoker_free(p->invoker); /* no thread releases slots any more; serving still there */
    p->invoker = NULL;
    funcd_async_free(p->async);
    p->async = NULL;
    funcd_queue_metrics_stop(p->metrics); /* before the queue goes */
    funcd_queue_free(p->queue);
    p->queue = NULL;
    funcd_workflows_free(p->workflows); /* after the invoker ran the `done` of its calls */
    p->workflows = NULL;
    funcd_controller_free(p->controller);
    p->controller = NULL;
    funcd_evsources_free(p->evsources);
    p->evsources = NULL;
    if (p->metrics) /* before the sites go: the control plane is gone, nothing collects */
        funcd_metrics_set_sites_source(p->metrics, NULL, NULL);
    funcd_sites_free(p->sites); /* the gateway has stopped: no thread reads the table */
    p->sites = NULL;
    funcd_cluster_free(p->cluster);
    p->cluster = NULL;
    funcd_otlp_stop_metrics(p->otlp); /* its collections read serving's gauges too */
    if (p->metrics) /* the gateway has stopped: nothing collects any more */
        funcd_metrics_set_gauge_source(p->metrics, NULL, NULL);
    if (p->egress) { /* its denials stop going into the functions' logs */
        funcd_egress_netsvc_set_logs(p->egress, NULL, NULL);
        funcd_egress_netsvc_set_invocations(p->egress, NULL, NULL);
    }
    funcd_serving_free(p->serving);
    funcd_egress_netsvc_free(p->egress); /* after serving let go of every worker */
    p->egress = NULL;
    if (p->metrics)
        funcd_metrics_set_egress(p->metrics, NULL);
    funcd_metrics_egress_free(p->egress_metrics);
    p->egress_metrics = NULL;
    funcd_localapi_free(p->localapi); /* after the workers whose sockets it served */
    funcd_s3_netsvc_free(p->s3_netsvc); /* serving, its user, is gone */
    p->s3_netsvc = NULL;
    funcd_s3_free(p->s3); /* after the workers, whose listeners serving detached */
    p->s3 = NULL;
    p->localapi = NULL;
    if (p->log_tick)
        event_free(p->log_tick);
    p->log_tick = NULL;
    funcd_logstore_free(p->logstore); /* seals what is open, while the blob is there */
    p->logstore = NULL;
    p->serving = NULL;
    funcd_fnrunner_free(p->fnrunner);
    p->fnrunner = NULL;
    funcd_pool_budget_unref(p->node_budget); /* pools and workers hold it while they live */
    p->node_budget = NULL;
    funcd_sources_free(p->sources); /* after its users: serving forgets, the runner cancels */
    p->sources = NULL;
    if (p->stop_ev)
        event_free(p->stop_ev);
    p->stop_ev = NULL;
    restore_favor_dynmods(p); /* while the logger is there */
    funcd_config_clear(&p->cfg); /* runtime, gateway, bus, blob, store */
    funcd_edge_recorder_free(p->edge); /* after the gateway's threads */
    p->edge = NULL;
    funcd_otlp_free(p->otlp); /* after its producers */
    p->otlp = NULL;
    funcd_metrics_free(p->metrics); /* after the gateway, whose routes held its blocks */
    p->metrics = NULL;
    SSL_CTX_free(p->tls_cp); /* every listener is gone */
    SSL_CTX_free(p->tls_dp);
    SSL_CTX_free(p->tls_fn);
    p->tls_cp = p->tls_dp = p->tls_fn = NULL;
    if (p->base)
        event_base_free(p->base);
    p->base = NULL;
    if (p->stop_fd >= 0)
        close(p->stop_fd);
    p->stop_fd = -1;
    if (p->state_dir && p->own_state_dir)
        funcd_remove_tree(p->state_dir);
    free(p->state_dir);
    p->state_dir = NULL;
}

funcd_invoker *funcd_platform_invoker(funcd_platform *p)
{
    return p->invoker;
}

funcd_queue *funcd_platform_queue(funcd_platform *p)
{
    return p->queue;
}

struct event_base *funcd_platform_loop(funcd_platform *p)
{
    return p->base;
}

static pthread_once_t evthread_once = PTHREAD_ONCE_INIT;

static void init_evthread(void)
{
    evthread_use_pthreads(); /* event_active from writers' threads */
}

int funcd_platform_new_v(funcd_platform **out, funcd_option *const *options)
{
    size_t n = 0;
    while (options && options[n])
        n++;
    return funcd_platform_new_n(out, options, n);
}

int funcd_platform_new_n(funcd_platform **out, funcd_option *const *options, size_t count)
{
    funcd_error_clear();
    if (!out) {
        funcd_config scratch = {0};
        funcd_config_apply(&scratch, options, count);
        funcd_config_clear(&scratch);
        return funcd_error_set(FUNCD_EINVAL, "funcd_platform_new: out is NULL");
    }
    *out = NULL;
    pthread_once(&evthread_once, init_evthread);
    funcd_platform *p = calloc(1, sizeof(*p));
    if (!p) {
        funcd_config scratch = {0};
        funcd_config_apply(&scratch, options, count);
        funcd_config_clear(&scratch);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the platform");
    }
    p->stop_fd = -1;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    int rc = funcd_config_apply(&p->cfg, options, count);
    if (rc == 0)
        rc = build(p);
    if (rc < 0) {
        int code = rc;
        char msg[1024];
        snprintf(msg, sizeof(msg), "%s", funcd_error_last()->message);
        teardown(p);
        pthread_cond_destroy(&p->cond);
        pthread_mutex_destroy(&p->lock);
        free(p);
        return funcd_error_set(code, "%s", msg);
    }
    *out = p;
    return 0;
}

static int begin_running(funcd_platform *p)
{
    pthread_mutex_lock(&p->lock);
    int ok = !p->shut && !p->running;
    if (ok)
        p->running = 1;
    pthread_mutex_unlock(&p->lock);
    if (!ok)
        return funcd_error_set(FUNCD_ESTATE, "the platform is already running or shut down");
    return 0;
}

static void end_running(funcd_platform *p)
{
    pthread_mutex_lock(&p->lock);
    p->running = 0;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

/* Starts the controller and the HTTP threads, once per platform. */
static int start_components(funcd_platform *p)
{
    if (p->components_started)
        return 0;
    /* The lease first: a single node leads before its first reconcile. */
    int rc = funcd_cluster_start(p->cluster);
    if (rc == 0)
        rc = funcd_controller_start(p->controller);
    if (rc == 0)
        rc = funcd_evsources_start(p->evsources);
    if (rc == 0)
        rc = funcd_sites_start(p->sites);
    if (rc == 0)
        rc = funcd_workflows_start(p->workflows);
    if (rc == 0)
        rc = funcd_fnrunner_start(p->fnrunner);
    if (rc == 0 && p->cp.object_quota >= 0) /* listed at the first create */
        rc = funcd_cp_counts_new(&p->cp.counts, p->cfg.store);
    if (rc == 0)
        rc = funcd_cp_server_start(p->cp_server);
    if (rc == 0)
        rc = funcd_port_gateway_start(p->cfg.gateway);
    if (rc == 0)
        p->components_started = 1;
    return rc;
}

static int dispatch(funcd_platform *p)
{
    if (event_base_dispatch(p->base) < 0)
        return funcd_error_set(FUNCD_EIO, "the platform loop failed");
    return 0;
}

int funcd_platform_run(funcd_platform *p)
{
    if (!p)
        return funcd_error_set(FUNCD_EINVAL, "funcd_platform_run: platform is NULL");
    int rc = begin_running(p);
    if (rc < 0)
        return rc;
    rc = start_components(p);
    if (rc == 0)
        rc = dispatch(p);
    end_running(p);
    return rc;
}

static void *background_main(void *arg)
{
    funcd_platform *p = arg;
    int rc = dispatch(p);
    /* Workers die with the thread that started them (PR_SET_PDEATHSIG):
     * let them drain while this thread still exists. */
    pthread_mutex_lock(&p->lock);
    int shutting_down = p->shut;
    pthread_mutex_unlock(&p->lock);
    if (shutting_down)
        drain_workers(p);
    if (rc < 0)
        funcd_log(&p->cfg.logger, FUNCD_LOG_ERROR, "platform stopped: %s",
                  funcd_error_last()->message);
    end_running(p);
    return NULL;
}

int funcd_platform_start(funcd_platform *p)
{
    if (!p)
        return funcd_error_set(FUNCD_EINVAL, "funcd_platform_start: platform is NULL");
    int rc = begin_running(p);
    if (rc < 0)
        return rc;
    /* Components start here, so requests are served when this returns. */
    rc = start_components(p);
    if (rc == 0 && pthread_create(&p->thread, NULL, background_main, p) != 0)
        rc = funcd_error_set(FUNCD_EIO, "cannot start the platform thread");
    if (rc < 0) {
        end_running(p);
        return rc;
    }
    pthread_mutex_lock(&p->lock);
    p->background = 1;
    pthread_mutex_unlock(&p->lock);
    return 0;
}

void funcd_platform_stop(funcd_platform *p)
{
    if (!p)
        return;
    uint64_t one = 1;
    ssize_t n = write(p->stop_fd, &one, sizeof(one)); /* async-signal-safe */
    (void)n;
}

int funcd_platform_shutdown(funcd_platform *p)
{
    if (!p)
        return 0;
    pthread_mutex_lock(&p->lock);
    if (p->shut) {
        /* Another caller is tearing down: return only once it is done. */
        while (!p->torn_down)
            pthread_cond_wait(&p->cond, &p->lock);
        pthread_mutex_unlock(&p->lock);
        return 0;
    }
    p->shut = 1;
    funcd_platform_stop(p);
    while (p->running)
        pthread_cond_wait(&p->cond, &p->lock);
    int joined = p->background;
    p->background = 0;
    pthread_mutex_unlock(&p->lock);
    if (joined)
        pthread_join(p->thread, NULL);
    teardown(p);
    pthread_mutex_lock(&p->lock);
    p->torn_down = 1;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

void funcd_platform_free(funcd_platform *p)
{
    if (!p)
        return;
    funcd_platform_shutdown(p);
    funcd_tls_clear(&p->tls);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

const char *funcd_platform_addr(const funcd_platform *p)
{
    return p ? p->addr : "";
}

const char *funcd_platform_data_plane_addr(const funcd_platform *p)
{
    return p ? p->data_plane_addr : "";
}

const char *funcd_platform_tls_fingerprint(const funcd_platform *p)
{
    return p ? p->tls.fingerprint : "";
}

const char *funcd_platform_tls_cert_file(const funcd_platform *p)
{
    return p ? p->tls.cert_file : NULL;
}

const char *funcd_platform_fn_runner_addr(const funcd_platform *p)
{
    return p ? p->fn_runner_addr : "";
}

const char *funcd_platform_s3_addr(const funcd_platform *p)
{
    return p ? p->s3_addr : "";
}
