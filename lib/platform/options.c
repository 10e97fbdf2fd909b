#include "platform/options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "egress/policy.h"
#include "eventing/queue.h"
#include "funcd/sys/error.h"
#include "util/hostpath.h"
#include "util/misc.h"

/* Returned when an option cannot be allocated, so the option list keeps
 * its shape and funcd_platform_new reports FUNCD_ENOMEM. */
static funcd_option oom_option = {OPT_OOM};

#define FUNCD_WF_DEFAULT_RETENTION_MS (7ull * 24 * 3600 * 1000) /* finished workflow runs */
#define FUNCD_QUEUE_DEFAULT_MAX_PENDING 10000  /* items not final, per namespace */
#define FUNCD_QUEUE_DEFAULT_MAX_BYTES (1ull << 30) /* bytes held, per namespace */
#define FUNCD_ASYNC_DEFAULT_MAX_BODY (1ull << 20) /* /async/ bodies (OpenFaaS's NATS: 1 MB) */

static funcd_option *opt_new(option_kind kind)
{
    funcd_option *o = calloc(1, sizeof(*o));
    if (!o)
        return &oom_option;
    o->kind = kind;
    return o;
}

/* Frees a backend through its own slot; one without `free` (refused by
 * funcd_platform_new) cannot be freed by us and is left to its owner. */
static void free_backend(option_kind kind, void *b)
{
    if (!b)
        return;
#define FREE_VIA(type)                                                                             \
    do {                                                                                           \
        type *x = b;                                                                               \
        if (x->free)                                                                               \
            x->free(x);                                                                            \
    } while (0)
    switch (kind) {
    case OPT_STORE: FREE_VIA(funcd_store); break;
    case OPT_BLOB: FREE_VIA(funcd_blob); break;
    case OPT_BUS: FREE_VIA(funcd_bus); break;
    case OPT_RUNTIME: FREE_VIA(funcd_runtime); break;
    case OPT_GATEWAY: FREE_VIA(funcd_gateway); break;
    default: break;
    }
#undef FREE_VIA
}

static void option_free(funcd_option *o)
{
    if (!o || o == &oom_option)
        return;
    free_backend(o->kind, o->backend);
    free(o->str);
    funcd_strv_free(o->namespaces);
    free(o);
}

funcd_option *funcd_in_memory(void) { return opt_new(OPT_IN_MEMORY); }
funcd_option *funcd_production(void) { return opt_new(OPT_PRODUCTION); }
funcd_option *funcd_without_auth_tokens(void) { return opt_new(OPT_NO_TOKENS); }

static funcd_option *backend_option(option_kind kind, void *backend)
{
    funcd_option *o = opt_new(kind);
    if (o == &oom_option)
        free_backend(kind, backend); /* ownership was passed to us */
    else
        o->backend = backend;
    return o;
}

funcd_option *funcd_with_store(funcd_store *b) { return backend_option(OPT_STORE, b); }
funcd_option *funcd_with_blob(funcd_blob *b) { return backend_option(OPT_BLOB, b); }
funcd_option *funcd_with_bus(funcd_bus *b) { return backend_option(OPT_BUS, b); }
funcd_option *funcd_with_runtime(funcd_runtime *b) { return backend_option(OPT_RUNTIME, b); }
funcd_option *funcd_with_gateway(funcd_gateway *b) { return backend_option(OPT_GATEWAY, b); }

static funcd_option *string_option(option_kind kind, const char *s)
{
    funcd_option *o = opt_new(kind);
    if (o != &oom_option && s && !(o->str = strdup(s))) {
        free(o);
        return &oom_option;
    }
    return o;
}

funcd_option *funcd_with_listen_addr(const char *addr) { return string_option(OPT_LISTEN, addr); }
funcd_option *funcd_with_data_plane_addr(const char *addr)
{
    return string_option(OPT_DATA_PLANE, addr);
}
funcd_option *funcd_with_token_file(const char *path) { return string_option(OPT_TOKEN_FILE, path); }
funcd_option *funcd_with_shim_dir(const char *dir) { return string_option(OPT_SHIM_DIR, dir); }
funcd_option *funcd_with_fn_runner_addr(const char *addr) { return string_option(OPT_FN_RUNNER, addr); }
funcd_option *funcd_with_fn_runner_max_message(size_t bytes)
{
    funcd_option *o = opt_new(OPT_FN_MAX_MESSAGE);
    if (o != &oom_option)
        o->size = bytes;
    return o;
}

funcd_option *funcd_with_functions_dir(const char *dir)
{
    return string_option(OPT_FUNCTIONS_DIR, dir);
}

funcd_option *funcd_with_builtin(const char *image, funcd_builtin_fn fn, void *payload)
{
    funcd_option *o = string_option(OPT_BUILTIN, image);
    if (o != &oom_option) {
        o->builtin = fn;
        o->payload = payload;
    }
    return o;
}

funcd_option *funcd_with_tls_cert_files(const char *cert_file, const char *key_file)
{
    funcd_option *o = string_option(OPT_TLS_FILES, cert_file);
    if (o == &oom_option || !key_file)
        return o;
    if (!(o->namespaces = calloc(2, sizeof(char *))) || !(o->namespaces[0] = strdup(key_file))) {
        option_free(o);
        return &oom_option;
    }
    return o;
}

funcd_option *funcd_with_s3(const char *listen_addr, const char *master_secret_file,
                           uint64_t max_upload)
{
    funcd_option *o = string_option(OPT_S3, listen_addr);
    if (o == &oom_option)
        return o;
    o->n[0] = max_upload;
    if (master_secret_file && (!(o->namespaces = calloc(2, sizeof(char *))) ||
                               !(o->namespaces[0] = strdup(master_secret_file)))) {
        option_free(o);
        return &oom_option;
    }
    return o;
}

funcd_option *funcd_with_tls_self_signed(const char *dir)
{
    return string_option(OPT_TLS_SELF_SIGNED, dir);
}

static int add_builtin(funcd_config *cfg, funcd_option *o)
{
    if (!o->str || !*o->str || !o->builtin)
        return funcd_error_set(FUNCD_EINVAL, "funcd_with_builtin needs an image name and a function");
    funcd_builtin_reg *b = realloc(cfg->builtins, (cfg->n_builtins + 1) * sizeof(*b));
    if (!b)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory adding a builtin");
    cfg->builtins = b;
    b[cfg->n_builtins++] = (funcd_builtin_reg){o->str, o->builtin, o->payload};
    o->str = NULL;
    return 0;
}
funcd_option *funcd_with_access_log(const char *path)
{
    return string_option(OPT_ACCESS_LOG, path);
}

funcd_option *funcd_with_otlp_endpoint(const char *url)
{
    return string_option(OPT_OTLP_ENDPOINT, url);
}

funcd_option *funcd_with_node_name(const char *name)
{
    return string_option(OPT_NODE_NAME, name);
}

funcd_option *funcd_with_node_address(const char *addr)
{
    return string_option(OPT_NODE_ADDRESS, addr);
}

funcd_option *funcd_with_egress_dns_upstream(const char *addr)
{
    return string_option(OPT_EGRESS_DNS_UPSTREAM, addr);
}

funcd_option *funcd_with_state_dir(const char *dir) { return string_option(OPT_STATE_DIR, dir); }

static funcd_option *number_option(option_kind kind, uint64_t a, uint64_t b, uint64_t c)
{
    funcd_option *o = opt_new(kind);
    if (o != &oom_option) {
        o->n[0] = a;
        o->n[1] = b;
        o->n[2] = c;
    }
    return o;
}

funcd_option *funcd_with_sandbox(int enabled)
{
    return number_option(OPT_SANDBOX, enabled != 0, 0, 0);
}

funcd_option *funcd_with_cgroup_favordynmods(int enabled)
{
    return number_option(OPT_CGROUP_FAVORDYNMODS, enabled != 0, 0, 0);
}

funcd_option *funcd_with_data_plane_metrics(int enabled)
{
    return number_option(OPT_DATA_PLANE_METRICS, enabled != 0, 0, 0);
}

funcd_option *funcd_with_metrics_open(int open)
{
    return number_option(OPT_METRICS_OPEN, open != 0, 0, 0);
}

funcd_option *funcd_with_kv_store_quota(long quota)
{
    return number_option(OPT_KV_STORE_QUOTA, (uint64_t)(int64_t)quota, 0, 0);
}

funcd_option *funcd_with_namespace_object_quota(long quota)
{
    return number_option(OPT_NAMESPACE_OBJECT_QUOTA, (uint64_t)(int64_t)quota, 0, 0);
}

funcd_option *funcd_with_namespace_max_workers(unsigned n)
{
    return number_option(OPT_NAMESPACE_MAX_WORKERS, n, 0, 0);
}

funcd_option *funcd_with_max_workers(unsigned n)
{
    return number_option(OPT_MAX_WORKERS, n, 0, 0);
}

funcd_option *funcd_with_site_default_index(const char *path)
{
    return string_option(OPT_SITE_DEFAULT_INDEX, path);
}

funcd_option *funcd_with_site_cache_bytes(uint64_t bytes)
{
    return number_option(OPT_SITE_CACHE_BYTES, bytes, 0, 0);
}

funcd_option *funcd_with_site_send_timeout(uint64_t ms)
{
    return number_option(OPT_SITE_SEND_TIMEOUT, ms, 0, 0);
}

funcd_option *funcd_with_host_network_allowed(int allowed)
{
    return number_option(OPT_HOST_NETWORK, allowed != 0, 0, 0);
}

funcd_option *funcd_with_node_platform(const char *os, const char *arch)
{
    char both[256];
    if (!os || !arch || snprintf(both, sizeof(both), "%s/%s", os, arch) >= (int)sizeof(both))
        both[0] = 0; /* reported by funcd_platform_new */
    return string_option(OPT_NODE_PLATFORM, both);
}

funcd_option *funcd_with_registry_auth_file(const char *path)
{
    return string_option(OPT_REGISTRY_AUTH_FILE, path);
}
funcd_option *funcd_with_encryption_key_file(const char *path)
{
    return string_option(OPT_ENCRYPTION_KEY_FILE, path);
}
funcd_option *funcd_with_fn_runner_token_file(const char *path)
{
    return string_option(OPT_FN_RUNNER_TOKEN_FILE, path);
}
funcd_option *funcd_with_registry_certs_dir(const char *dir)
{
    return string_option(OPT_REGISTRY_CERTS_DIR, dir);
}
funcd_option *funcd_with_insecure_registry(const char *host_port)
{
    return string_option(OPT_INSECURE_REGISTRY, host_port);
}
funcd_option *funcd_with_allowed_registry(const char *host_port)
{
    return string_option(OPT_ALLOWED_REGISTRY, host_port);
}
funcd_option *funcd_with_image_cache_size(uint64_t bytes)
{
    return number_option(OPT_IMAGE_CACHE_SIZE, bytes, 0, 0);
}

funcd_option *funcd_with_image_blob_cache_bytes(uint64_t bytes)
{
    return number_option(OPT_IMAGE_BLOB_CACHE_BYTES, bytes, 0, 0);
}
funcd_option *funcd_with_source_refresh(uint64_t tag_ms, uint64_t git_ms)
{
    return number_option(OPT_SOURCE_REFRESH, tag_ms, git_ms, 0);
}
funcd_option *funcd_with_log_persistence(uint64_t seal_ms, uint64_t seal_bytes,
                                         uint64_t retention_ms)
{
    return number_option(OPT_LOG_PERSISTENCE, seal_ms, seal_bytes, retention_ms);
}
funcd_option *funcd_with_lease_ttl(uint64_t ms)
{
    return number_option(OPT_LEASE_TTL, ms, 0, 0);
}
funcd_option *funcd_with_delivery_retention(uint64_t invocation_ms, uint64_t dlq_ms,
                                            uint64_t dlq_max_entries)
{
    return number_option(OPT_DELIVERY_RETENTION, invocation_ms, dlq_ms, dlq_max_entries);
}

funcd_option *funcd_with_queue_limits(uint64_t max_pending, uint64_t max_bytes,
                                      uint64_t async_max_body)
{
    return number_option(OPT_QUEUE_LIMITS, max_pending, max_bytes, async_max_body);
}
funcd_option *funcd_with_queue_anonymous_share(unsigned percent)
{
    return number_option(OPT_QUEUE_ANONYMOUS_SHARE, percent, 0, 0);
}
funcd_option *funcd_with_callback_allow(const char *cidrs)
{
    return string_option(OPT_CALLBACK_ALLOW, cidrs);
}

funcd_option *funcd_with_blob_poll_interval(uint64_t ms)
{
    return number_option(OPT_BLOB_POLL_INTERVAL, ms, 0, 0);
}
funcd_option *funcd_with_workflow(uint64_t step_timeout_ms, unsigned retry_attempts,
                                  uint64_t retention_ms, uint64_t payload_limit)
{
    funcd_option *o = number_option(OPT_WORKFLOW, step_timeout_ms, retry_attempts, retention_ms);
    if (o != &oom_option)
        o->size = (size_t)payload_limit;
    return o;
}
funcd_option *funcd_with_shutdown_grace(uint64_t ms)
{
    return number_option(OPT_SHUTDOWN_GRACE, ms, 0, 0);
}

/* Appends the option's string (moved) to a NULL-terminated list. */
static int add_to_list(char ***list, funcd_option *o, const char *what)
{
    if (!o->str || !*o->str)
        return funcd_error_set(FUNCD_EINVAL, "%s needs a value", what);
    size_t n = 0;
    while (*list && (*list)[n])
        n++;
    char **v = realloc(*list, (n + 2) * sizeof(*v));
    if (!v)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory in %s", what);
    v[n] = o->str;
    v[n + 1] = NULL;
    o->str = NULL;
    *list = v;
    return 0;
}

/* funcd_with_callback_allow: every entry of the list must be a CIDR or an
 * address. */
static int add_callback_allow(funcd_config *cfg, funcd_option *o)
{
    for (const char *s = o->str; s && *s;) {
        size_t n = strcspn(s, ",");
        char one[64];
        funcd_egress_cidr c;
        snprintf(one, sizeof(one), "%.*s", (int)n, s);
        if (n == 0 || n >= sizeof(one) || funcd_egress_parse_cidr(one, &c) < 0)
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_callback_allow: \"%.*s\" is not "
                                   "a CIDR or an address", (int)(n < 64 ? n : 64), s);
        s += n + (s[n] == ',');
    }
    return add_to_list(&cfg->callback_allow, o, "funcd_with_callback_allow");
}

funcd_option *funcd_with_stream_buffer_limit(size_t bytes)
{
    funcd_option *o = opt_new(OPT_STREAM_BUFFER);
    if (o != &oom_option)
        o->size = bytes;
    return o;
}

funcd_option *funcd_with_max_connections(unsigned n)
{
    funcd_option *o = opt_new(OPT_MAX_CONNECTIONS);
    if (o != &oom_option)
        o->n[0] = n;
    return o;
}

funcd_option *funcd_with_edge_auth_default(const char *stance)
{
    return string_option(OPT_EDGE_AUTH, stance);
}

funcd_option *funcd_with_edge_limits(uint32_t rps, uint32_t burst, uint64_t max_body,
                                     uint32_t max_in_flight)
{
    funcd_option *o = number_option(OPT_EDGE_LIMITS, rps, burst, max_in_flight);
    if (o != &oom_option)
        o->size = (size_t)max_body;
    return o;
}

funcd_option *funcd_with_edge_limit_per_client(int enabled)
{
    return number_option(OPT_EDGE_PER_CLIENT, enabled != 0, 0, 0);
}

funcd_option *funcd_with_seccomp_allow(const char *syscall_name)
{
    return string_option(OPT_SECCOMP_ALLOW, syscall_name);
}

funcd_option *funcd_with_source_root(const char *dir)
{
    return string_option(OPT_SOURCE_ROOT, dir);
}

/* A source root is kept resolved: paths are compared with it once resolved. */
static int add_source_root(funcd_config *cfg, funcd_option *o)
{
    char real[FUNCD_HOSTPATH_MAX];
    const char *why;
    if (!o->str || !*o->str)
        return funcd_error_set(FUNCD_EINVAL, "funcd_with_source_root needs a directory");
    if (funcd_hostpath_resolve(o->str, real, sizeof(real), &why) < 0)
        return funcd_error_set(FUNCD_EINVAL, "source root %s %s", o->str, why);
    struct stat st;
    if (stat(real, &st) != 0 || !S_ISDIR(st.st_mode))
        return funcd_error_set(FUNCD_EINVAL, "source root %s is not a directory", o->str);
    char *copy = strdup(real);
    if (!copy)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory in funcd_with_source_root");
    free(o->str);
    o->str = copy;
    return add_to_list(&cfg->source_roots, o, "funcd_with_source_root");
}

static int set_node_platform(funcd_config *cfg, funcd_option *o)
{
    char *slash = o->str ? strchr(o->str, '/') : NULL;
    if (!slash || slash == o->str || !slash[1])
        return funcd_error_set(FUNCD_EINVAL, "funcd_with_node_platform needs an OS and an "
                               "architecture, e.g. (\"linux\", \"amd64\")");
    *slash = 0;
    free(cfg->node_os);
    free(cfg->node_arch);
    cfg->node_os = strdup(o->str);
    cfg->node_arch = strdup(slash + 1);
    if (!cfg->node_os || !cfg->node_arch)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory setting the node platform");
    return 0;
}

static void keep_nonzero(uint64_t *slot, uint64_t v)
{
    if (v)
        *slot = v;
}

static funcd_option *token_option(const char *token, funcd_role role, const char *const *ns)
{
    funcd_option *o = string_option(OPT_TOKEN, token);
    if (o == &oom_option)
        return o;
    o->role = role;
    if (!(o->namespaces = funcd_strv_dup(ns))) {
        option_free(o);
        return &oom_option;
    }
    return o;
}

funcd_option *funcd_with_token(const char *token, const char *role, const char *const *namespaces)
{
    funcd_role r;
    if (!role || funcd_role_parse(role, &r) < 0)
        r = 0; /* reported by funcd_platform_new */
    return token_option(token, r, namespaces);
}

funcd_option *funcd_with_dev_auth_v(const char *token, const char *const *namespaces)
{
    return token_option(token, FUNCD_ROLE_DEVELOPER, namespaces);
}

funcd_option *funcd_with_logger(funcd_log_fn fn, funcd_log_level min_level, void *payload)
{
    funcd_option *o = opt_new(OPT_LOGGER);
    if (o != &oom_option) {
        o->log_fn = fn;
        o->log_min = min_level;
        o->payload = payload;
    }
    return o;
}

funcd_option *funcd_with_log_observer(funcd_log_observer_fn fn, void *payload)
{
    funcd_option *o = opt_new(OPT_LOG_OBSERVER);
    if (o != &oom_option) {
        o->observer = fn;
        o->payload = payload;
    }
    return o;
}

static void replace_str(char **slot, char **with)
{
    free(*slot);
    *slot = *with;
    *with = NULL;
}

static void *take_backend(funcd_option *o, void *current)
{
    free_backend(o->kind, current); /* a later option overrides an earlier one */
    void *b = o->backend;
    o->backend = NULL;
    return b;
}

static int apply_preset(funcd_config *cfg, option_kind kind)
{
    static const char *const default_ns[] = {"default", NULL};
    cfg->preset = kind;
    free(cfg->listen_addr);
    free(cfg->data_plane_addr);
    free(cfg->fn_runner_addr);
    funcd_auth_clear(&cfg->auth);
    if (kind == OPT_IN_MEMORY) {
        cfg->memory_backends = 1;
        cfg->listen_addr = strdup("127.0.0.1:0");
        cfg->data_plane_addr = strdup("127.0.0.1:0");
        cfg->fn_runner_addr = strdup("127.0.0.1:0");
        if (funcd_auth_add(&cfg->auth, "funcd-dev-token", FUNCD_ROLE_DEVELOPER, default_ns) < 0)
            return FUNCD_ENOMEM;
    } else {
        cfg->memory_backends = 0;
        cfg->listen_addr = strdup("127.0.0.1:8080");
        cfg->data_plane_addr = strdup("127.0.0.1:8081");
        cfg->fn_runner_addr = strdup("127.0.0.1:9445");
    }
    if (!cfg->listen_addr || !cfg->data_plane_addr || !cfg->fn_runner_addr)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory applying a preset");
    return 0;
}

/* Options that set up the process runtime funcd makes: next to an injected
 * runtime they could only be ignored, so complete_config refuses them. */
static void note_runtime_option(funcd_config *cfg, const char *name)
{
    if (!cfg->runtime_option)
        cfg->runtime_option = name;
}

static const char *backend_option_name(option_kind kind)
{
    switch (kind) {
    case OPT_STORE: return "funcd_with_store";
    case OPT_BLOB: return "funcd_with_blob";
    case OPT_BUS: return "funcd_with_bus";
    case OPT_RUNTIME: return "funcd_with_runtime";
    case OPT_GATEWAY: return "funcd_with_gateway";
    default: return NULL;
    }
}

/*
 * One backend object in two options would be freed when the second
 * replaces the first and then used: refused, and each object is kept by
 * one option only, so consuming the options frees it once.
 */
static int refuse_shared_backends(funcd_option *const *options, size_t count)
{
    int rc = 0;
    for (size_t i = 0; i < count; i++) {
        if (!options[i] || options[i] == &oom_option || !options[i]->backend)
            continue;
        for (size_t j = i + 1; j < count; j++) {
            if (!options[j] || options[j] == &oom_option ||
                options[j]->backend != options[i]->backend)
                continue;
            options[j]->backend = NULL; /* freed with options[i] */
            if (rc == 0)
                rc = funcd_error_set(FUNCD_EINVAL, "the same backend is given twice (%s, then "
                                     "%s): a backend object is handed over once",
                                     backend_option_name(options[i]->kind),
                                     backend_option_name(options[j]->kind));
        }
    }
    return rc;
}

static int apply_one(funcd_config *cfg, funcd_option *o)
{
    switch (o->kind) {
    case OPT_OOM: return funcd_error_set(FUNCD_ENOMEM, "out of memory building an option");
    case OPT_IN_MEMORY:
    case OPT_PRODUCTION: return apply_preset(cfg, o->kind);
    case OPT_STORE: cfg->store = take_backend(o, cfg->store); break;
    case OPT_BLOB: cfg->blob = take_backend(o, cfg->blob); break;
    case OPT_BUS: cfg->bus = take_backend(o, cfg->bus); break;
    case OPT_RUNTIME: cfg->runtime = take_backend(o, cfg->runtime); break;
    case OPT_GATEWAY: cfg->gateway = take_backend(o, cfg->gateway); break;
    case OPT_LISTEN: replace_str(&cfg->listen_addr, &o->str); break;
    case OPT_DATA_PLANE: replace_str(&cfg->data_plane_addr, &o->str); break;
    case OPT_SHIM_DIR: replace_str(&cfg->shim_dir, &o->str); break;
    case OPT_STATE_DIR: replace_str(&cfg->state_dir, &o->str); break;
    case OPT_FN_RUNNER: replace_str(&cfg->fn_runner_addr, &o->str); break;
    case OPT_FUNCTIONS_DIR: replace_str(&cfg->functions_dir, &o->str); break;
    case OPT_BUILTIN: return add_builtin(cfg, o);
    case OPT_FN_MAX_MESSAGE:
        if (o->size < 1024)
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_fn_runner_max_message: %zu bytes is "
                                   "too small (at least 1024)", o->size);
        cfg->fn_runner_max_message = o->size;
        break;
    case OPT_NO_TOKENS: funcd_auth_clear(&cfg->auth); break;
    case OPT_SANDBOX:
        cfg->sandbox = (int)o->n[0];
        note_runtime_option(cfg, "funcd_with_sandbox");
        break;
    case OPT_HOST_NETWORK:
        cfg->allow_host_network = (int)o->n[0];
        note_runtime_option(cfg, "funcd_with_host_network_allowed");
        break;
    case OPT_CGROUP_FAVORDYNMODS: cfg->cgroup_favordynmods = (int)o->n[0]; break;
    case OPT_DATA_PLANE_METRICS: cfg->data_plane_metrics = (int)o->n[0]; break;
    case OPT_METRICS_OPEN: cfg->metrics_open = (int)o->n[0]; break;
    case OPT_KV_STORE_QUOTA:
        cfg->kv_quota_set = 1;
        cfg->kv_store_quota = (int64_t)o->n[0];
        break;
    case OPT_NAMESPACE_OBJECT_QUOTA:
        cfg->object_quota_set = 1;
        cfg->object_quota = (int64_t)o->n[0];
        break;
    case OPT_NAMESPACE_MAX_WORKERS:
        cfg->ns_max_workers_set = 1;
        cfg->ns_max_workers = (unsigned)o->n[0];
        break;
    case OPT_MAX_WORKERS:
        cfg->max_workers_set = 1;
        cfg->max_workers = (unsigned)o->n[0];
        break;
    case OPT_SITE_CACHE_BYTES:
        if (o->n[0] > (uint64_t)INT64_MAX)
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_site_cache_bytes: %llu bytes is too "
                                   "many", (unsigned long long)o->n[0]);
        cfg->site_cache_set = 1;
        cfg->site_cache_bytes = o->n[0];
        break;
    case OPT_SITE_SEND_TIMEOUT:
        if (o->n[0] == 0 || o->n[0] > 24ull * 3600 * 1000)
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_site_send_timeout: %llu ms; from 1 ms "
                                   "to 24 h", (unsigned long long)o->n[0]);
        cfg->site_send_timeout_ms = o->n[0];
        break;
    case OPT_SITE_DEFAULT_INDEX: {
        const char *s = o->str;
        int clean = s && *s && *s != '/' && s[strlen(s) - 1] != '/';
        for (const char *q = s; clean && *q;) { /* no ".." component */
            size_t n = strcspn(q, "/");
            clean = !(n == 2 && q[0] == '.' && q[1] == '.') && n > 0;
            q += n + (q[n] == '/');
        }
        if (!clean)
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_site_default_index: \"%s\" is not a "
                                   "relative file path without '..' components", s ? s : "");
        replace_str(&cfg->site_default_index, &o->str);
        break;
    }
    case OPT_NODE_PLATFORM: return set_node_platform(cfg, o);
    case OPT_REGISTRY_AUTH_FILE: replace_str(&cfg->registry_auth_file, &o->str); break;
    case OPT_REGISTRY_CERTS_DIR: replace_str(&cfg->registry_certs_dir, &o->str); break;
    case OPT_INSECURE_REGISTRY:
        return add_to_list(&cfg->insecure_registries, o, "funcd_with_insecure_registry");
    case OPT_ALLOWED_REGISTRY:
        return add_to_list(&cfg->allowed_registries, o, "funcd_with_allowed_registry");
    case OPT_SECCOMP_ALLOW:
        note_runtime_option(cfg, "funcd_with_seccomp_allow");
        return add_to_list(&cfg->seccomp_allow, o, "funcd_with_seccomp_allow");
    case OPT_SOURCE_ROOT: return add_source_root(cfg, o);
    case OPT_IMAGE_CACHE_SIZE: keep_nonzero(&cfg->image_cache_bytes, o->n[0]); break;
    case OPT_IMAGE_BLOB_CACHE_BYTES: cfg->image_blob_cache_bytes = o->n[0]; break;
    case OPT_SOURCE_REFRESH:
        keep_nonzero(&cfg->tag_refresh_ms, o->n[0]);
        keep_nonzero(&cfg->git_poll_ms, o->n[1]);
        break;
    case OPT_LOG_PERSISTENCE:
        keep_nonzero(&cfg->log_seal_ms, o->n[0]);
        keep_nonzero(&cfg->log_seal_bytes, o->n[1]);
        keep_nonzero(&cfg->log_retention_ms, o->n[2]);
        break;
    case OPT_SHUTDOWN_GRACE: keep_nonzero(&cfg->shutdown_grace_ms, o->n[0]); break;
    case OPT_STREAM_BUFFER:
        if (o->size < 65536)
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_stream_buffer_limit: %zu bytes is "
                                   "too small (at least 65536)", o->size);
        cfg->stream_buffer = o->size;
        break;
    case OPT_MAX_CONNECTIONS:
        if (o->n[0] == 0)
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_max_connections: 0 connections; "
                                   "give at least 1");
        cfg->max_connections = (unsigned)o->n[0];
        break;
    case OPT_TOKEN:
        if (!o->role)
            return funcd_error_set(FUNCD_EINVAL,
                                   "funcd_with_token: role must be admin, developer or viewer");
        return funcd_auth_add(&cfg->auth, o->str, o->role, (const char *const *)o->namespaces);
    case OPT_TOKEN_FILE:
        if (!o->str)
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_token_file: path is NULL");
        return funcd_auth_load_file(&cfg->auth, o->str);
    case OPT_ENCRYPTION_KEY_FILE:
        if (!o->str || !*o->str)
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_encryption_key_file: no path");
        replace_str(&cfg->encryption_key_file, &o->str);
        break;
    case OPT_FN_RUNNER_TOKEN_FILE:
        if (!o->str)
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_fn_runner_token_file: path is NULL");
        cfg->fn_runner_auth_on = 1;
        return funcd_auth_load_file(&cfg->fn_runner_auth, o->str);
    case OPT_EDGE_AUTH:
        if (!o->str || (strcmp(o->str, "open") != 0 && strcmp(o->str, "authenticated") != 0))
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_edge_auth_default: \"%s\" is not "
                                   "a stance; use open or authenticated",
                                   o->str ? o->str : "(null)");
        cfg->edge.auth = strcmp(o->str, "open") == 0 ? FUNCD_EDGE_AUTH_OPEN
                                                      : FUNCD_EDGE_AUTH_AUTHENTICATED;
        break;
    case OPT_EDGE_LIMITS:
        if (o->size > 64u * 1024 * 1024)
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_edge_limits: a body limit of %zu "
                                   "bytes is over the gateway's ceiling of 64 MiB (67108864)",
                                   o->size);
        cfg->edge.rps = (uint32_t)o->n[0];
        cfg->edge.burst = (uint32_t)o->n[1];
        cfg->edge.max_in_flight = (uint32_t)o->n[2];
        cfg->edge.max_body_bytes = o->size;
        break;
    case OPT_EDGE_PER_CLIENT: cfg->edge.limit_per_client = (int)o->n[0]; break;
    case OPT_S3:
        if (o->str && !*o->str)
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_s3: an empty listen address (NULL: "
                                   "no host listener)");
        cfg->s3 = 1;
        replace_str(&cfg->s3_listen, &o->str);
        if (o->namespaces && o->namespaces[0])
            replace_str(&cfg->s3_secret_file, &o->namespaces[0]);
        cfg->s3_max_upload = o->n[0];
        break;
    case OPT_TLS_FILES:
        if (!o->str || !*o->str || !o->namespaces || !*o->namespaces[0])
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_tls_cert_files: give both a "
                                   "certificate file and a key file");
        replace_str(&cfg->tls_cert, &o->str);
        replace_str(&cfg->tls_key, &o->namespaces[0]);
        cfg->tls_self_signed = 0;
        break;
    case OPT_TLS_SELF_SIGNED:
        replace_str(&cfg->tls_dir, &o->str);
        cfg->tls_self_signed = 1;
        free(cfg->tls_cert);
        free(cfg->tls_key);
        cfg->tls_cert = cfg->tls_key = NULL;
        break;
    case OPT_LOGGER:
        cfg->logger.fn = o->log_fn;
        cfg->logger.min = o->log_min;
        cfg->logger.payload = o->payload;
        break;
    case OPT_LOG_OBSERVER:
        cfg->observer = o->observer;
        cfg->observer_payload = o->payload;
        break;
    case OPT_ACCESS_LOG:
        if (!o->str || !*o->str)
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_access_log: no path (\"-\" is stdout)");
        replace_str(&cfg->access_log, &o->str);
        break;
    case OPT_NODE_NAME:
        if (!o->str || !*o->str)
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_node_name: no name");
        replace_str(&cfg->node_name, &o->str);
        break;
    case OPT_EGRESS_DNS_UPSTREAM:
        if (!o->str || !*o->str)
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_egress_dns_upstream: no address");
        replace_str(&cfg->egress_dns_upstream, &o->str);
        break;
    case OPT_NODE_ADDRESS:
        if (!o->str || !*o->str)
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_node_address: no address");
        replace_str(&cfg->node_address, &o->str);
        break;
    case OPT_LEASE_TTL:
        if (o->n[0] < 300)
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_lease_ttl: %llu ms is too short "
                                   "(at least 300 ms)", (unsigned long long)o->n[0]);
        cfg->lease_ttl_ms = o->n[0];
        break;
    case OPT_DELIVERY_RETENTION:
        if (o->n[2] > 10000000)
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_delivery_retention: at most "
                                   "10000000 dead letters per namespace");
        keep_nonzero(&cfg->invocation_retention_ms, o->n[0]);
        keep_nonzero(&cfg->dlq_retention_ms, o->n[1]);
        keep_nonzero(&cfg->dlq_max_entries, o->n[2]);
        break;
    case OPT_QUEUE_LIMITS:
        if (o->n[0] != UINT64_MAX)
            cfg->queue_max_pending = o->n[0];
        if (o->n[1] != UINT64_MAX)
            cfg->queue_max_bytes = o->n[1];
        if (o->n[2] != UINT64_MAX)
            cfg->async_max_body = o->n[2];
        break;
    case OPT_QUEUE_ANONYMOUS_SHARE:
        if (o->n[0] > 100)
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_queue_anonymous_share: %llu percent; "
                                   "at most 100", (unsigned long long)o->n[0]);
        cfg->queue_anonymous_share = (unsigned)o->n[0];
        break;
    case OPT_CALLBACK_ALLOW: return add_callback_allow(cfg, o);
    case OPT_BLOB_POLL_INTERVAL:
        if (o->n[0] < 100)
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_blob_poll_interval: %llu ms is too "
                                   "short (at least 100 ms)", (unsigned long long)o->n[0]);
        cfg->blob_poll_ms = o->n[0];
        break;
    case OPT_WORKFLOW:
        if (o->n[1] > 100)
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_workflow: %llu attempts; at most 100",
                                   (unsigned long long)o->n[1]);
        cfg->wf_step_timeout_ms = o->n[0];
        cfg->wf_retry_attempts = (unsigned)o->n[1];
        cfg->wf_retention_ms = o->n[2] == UINT64_MAX ? FUNCD_WF_DEFAULT_RETENTION_MS : o->n[2];
        cfg->wf_payload_limit = o->size;
        break;
    case OPT_OTLP_ENDPOINT:
        if (!o->str || (strncmp(o->str, "http://", 7) != 0 && strncmp(o->str, "https://", 8) != 0))
            return funcd_error_set(FUNCD_EINVAL, "funcd_with_otlp_endpoint: \"%s\" is not an "
                                   "http:// or https:// URL", o->str ? o->str : "(null)");
        replace_str(&cfg->otlp_endpoint, &o->str);
        break;
    }
    return 0;
}

static int is_preset(const funcd_option *o)
{
    return o->kind == OPT_IN_MEMORY || o->kind == OPT_PRODUCTION;
}

int funcd_config_apply(funcd_config *cfg, funcd_option *const *options, size_t count)
{
    int rc = refuse_shared_backends(options, count);
    cfg->logger.min = FUNCD_LOG_INFO;
    cfg->sandbox = 1;
    cfg->wf_retention_ms = FUNCD_WF_DEFAULT_RETENTION_MS;
    cfg->queue_max_pending = FUNCD_QUEUE_DEFAULT_MAX_PENDING;
    cfg->queue_max_bytes = FUNCD_QUEUE_DEFAULT_MAX_BYTES;
    cfg->queue_anonymous_share = FUNCD_QUEUE_DEFAULT_ANONYMOUS_SHARE;
    cfg->async_max_body = FUNCD_ASYNC_DEFAULT_MAX_BODY;
    cfg->image_blob_cache_bytes = FUNCD_IMAGE_BLOB_CACHE_DEFAULT;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < count; i++)
            if (rc == 0 && options[i] && is_preset(options[i]) == (pass == 0))
                rc = apply_one(cfg, options[i]);
    for (size_t i = 0; i < count; i++)
        option_free(options[i]);
    return rc;
}

void funcd_config_clear(funcd_config *cfg)
{
    free_backend(OPT_STORE, cfg->store);
    free_backend(OPT_BLOB, cfg->blob);
    free_backend(OPT_BUS, cfg->bus);
    free_backend(OPT_RUNTIME, cfg->runtime);
    free_backend(OPT_GATEWAY, cfg->gateway);
    free(cfg->listen_addr);
    free(cfg->data_plane_addr);
    free(cfg->shim_dir);
    free(cfg->state_dir);
    free(cfg->fn_runner_addr);
    free(cfg->functions_dir);
    for (size_t i = 0; i < cfg->n_builtins; i++)
        free(cfg->builtins[i].image);
    free(cfg->builtins);
    funcd_auth_clear(&cfg->auth);
    free(cfg->node_os);
    free(cfg->node_arch);
    free(cfg->registry_auth_file);
    free(cfg->site_default_index);
    free(cfg->registry_certs_dir);
    funcd_strv_free(cfg->insecure_registries);
    funcd_strv_free(cfg->allowed_registries);
    funcd_strv_free(cfg->callback_allow);
    funcd_strv_free(cfg->seccomp_allow);
    funcd_strv_free(cfg->source_roots);
    free(cfg->encryption_key_file);
    free(cfg->access_log);
    free(cfg->otlp_endpoint);
    funcd_auth_clear(&cfg->fn_runner_auth);
    free(cfg->tls_cert);
    free(cfg->tls_key);
    free(cfg->tls_dir);
    free(cfg->node_name);
    free(cfg->node_address);
    free(cfg->s3_listen);
    free(cfg->s3_secret_file);
    free(cfg->egress_dns_upstream);
    memset(cfg, 0, sizeof(*cfg));
}
