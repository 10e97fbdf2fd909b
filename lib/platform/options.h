/* Options: what funcd_with_* builds and funcd_platform_new consumes. */
#ifndef FUNCD_PLATFORM_OPTIONS_H
#define FUNCD_PLATFORM_OPTIONS_H

#include "controlplane/auth.h"
#include "funcd/funcd.h"
#include "funcd/sys/gateway.h"
#include "util/log.h"

typedef enum option_kind {
    OPT_OOM = 0, /* an option that could not be allocated */
    OPT_IN_MEMORY,
    OPT_PRODUCTION,
    OPT_STORE,
    OPT_BLOB,
    OPT_BUS,
    OPT_RUNTIME,
    OPT_GATEWAY,
    OPT_LISTEN,
    OPT_DATA_PLANE,
    OPT_TOKEN,
    OPT_TOKEN_FILE,
    OPT_NO_TOKENS,
    OPT_LOGGER,
    OPT_LOG_OBSERVER,
    OPT_SHIM_DIR,
    OPT_STATE_DIR,
    OPT_FN_RUNNER,
    OPT_FUNCTIONS_DIR,
    OPT_BUILTIN,
    OPT_FN_MAX_MESSAGE,
    OPT_SANDBOX,
    OPT_NODE_PLATFORM,
    OPT_REGISTRY_AUTH_FILE,
    OPT_REGISTRY_CERTS_DIR,
    OPT_INSECURE_REGISTRY,
    OPT_ALLOWED_REGISTRY,
    OPT_IMAGE_CACHE_SIZE,
    OPT_IMAGE_BLOB_CACHE_BYTES,
    OPT_SOURCE_REFRESH,
    OPT_LOG_PERSISTENCE,
    OPT_SHUTDOWN_GRACE,
    OPT_HOST_NETWORK,
    OPT_SECCOMP_ALLOW,
    OPT_CGROUP_FAVORDYNMODS,
    OPT_STREAM_BUFFER,
    OPT_MAX_CONNECTIONS,
    OPT_SOURCE_ROOT,
    OPT_ENCRYPTION_KEY_FILE,
    OPT_FN_RUNNER_TOKEN_FILE,
    OPT_ACCESS_LOG,
    OPT_EDGE_AUTH,
    OPT_EDGE_LIMITS,
    OPT_EDGE_PER_CLIENT,
    OPT_DATA_PLANE_METRICS,
    OPT_METRICS_OPEN,
    OPT_OTLP_ENDPOINT,
    OPT_TLS_FILES,       /* str: the certificate, namespaces[0]: the key */
    OPT_TLS_SELF_SIGNED, /* str: the directory, NULL: the state directory */
    OPT_NODE_NAME,
    OPT_NODE_ADDRESS,
    OPT_LEASE_TTL,
    OPT_BLOB_POLL_INTERVAL,
    OPT_KV_STORE_QUOTA,
    OPT_NAMESPACE_OBJECT_QUOTA,
    OPT_NAMESPACE_MAX_WORKERS,
    OPT_MAX_WORKERS,
    OPT_WORKFLOW, /* n: step timeout, attempts, retention; size: payload limit */
    OPT_DELIVERY_RETENTION,
    OPT_SITE_DEFAULT_INDEX,
    OPT_SITE_CACHE_BYTES,
    OPT_SITE_SEND_TIMEOUT,
    OPT_S3, /* str: the host listener, namespaces[0]: the secret file; n[0]: max upload */
    OPT_EGRESS_DNS_UPSTREAM,
    OPT_QUEUE_LIMITS,
    OPT_QUEUE_ANONYMOUS_SHARE,
    OPT_CALLBACK_ALLOW,
} option_kind;

struct funcd_option {
    option_kind kind;
    void *backend; /* OPT_STORE..OPT_GATEWAY */
    char *str;     /* addresses, token, token file */
    funcd_role role;
    char **namespaces;
    funcd_log_fn log_fn;
    funcd_log_level log_min;
    funcd_log_observer_fn observer;
    funcd_builtin_fn builtin;
    size_t size;
    uint64_t n[3];
    void *payload;
};

/* A builtin KRM function registered through funcd_with_builtin. */
typedef struct funcd_builtin_reg {
    char *image;
    funcd_builtin_fn fn;
    void *payload;
} funcd_builtin_reg;

/* The configuration options produce, before the platform is built. */
typedef struct funcd_config {
    int preset;          /* 0 none, OPT_IN_MEMORY or OPT_PRODUCTION */
    int memory_backends; /* create memory store/blob/bus where none was given */
    funcd_store *store;
    funcd_blob *blob;
    funcd_bus *bus;
    funcd_runtime *runtime;
    funcd_gateway *gateway;
    char *listen_addr;
    char *data_plane_addr;
    char *shim_dir;
    char *state_dir;
    char *fn_runner_addr;
    size_t fn_runner_max_message; /* 0: the default */
    char *functions_dir;
    funcd_builtin_reg *builtins;
    size_t n_builtins;
    funcd_auth auth;
    funcd_logger logger;
    funcd_log_observer_fn observer;
    void *observer_payload;
    int sandbox;                  /* 1 on (the default), 0 off */
    int allow_host_network;       /* spec.network: host may be asked for */
    int sandboxed_runtime;        /* the runtime is funcd's own, sandboxing (set by new) */
    int cgroup_favordynmods;      /* set favordynmods on cgroup2 while running */
    char *node_os, *node_arch;    /* NULL: this host's */
    char *registry_auth_file;
    char *registry_certs_dir;
    char **insecure_registries;   /* NULL-terminated, or NULL */
    char **allowed_registries;    /* the pull allow-list: NULL-terminated, or NULL */
    char **seccomp_allow;         /* NULL-terminated, or NULL */
    const char *runtime_option;   /* the first option that configures funcd's own process
                                     runtime (funcd_with_sandbox...), or NULL */
    char **source_roots;          /* resolved host directories; NULL-terminated, or NULL */
    uint64_t image_cache_bytes;   /* 0: the default */
    uint64_t image_blob_cache_bytes; /* pulled blobs kept (default 10 GiB); 0: no cap */
    uint64_t tag_refresh_ms;      /* 0: the default */
    uint64_t git_poll_ms;         /* 0: the default */
    uint64_t log_seal_ms;         /* 0: the default */
    uint64_t log_seal_bytes;      /* 0: the default */
    uint64_t log_retention_ms;    /* 0: the default */
    uint64_t shutdown_grace_ms;   /* 0: the default */
    size_t stream_buffer;         /* 0: the default */
    unsigned max_connections;     /* 0: the default */
    char *encryption_key_file;    /* Secrets at rest; NULL: see platform.c */
    funcd_auth fn_runner_auth;    /* tokens the function runner takes */
    int fn_runner_auth_on;        /* 1: calls without one of them are refused */
    char *access_log;             /* a path, "-": stdout; NULL: none */
    funcd_edge edge;              /* the daemon's edge defaults (auth, limits, per client) */
    int data_plane_metrics;       /* GET /metrics on the data plane */
    int metrics_open;             /* GET /metrics on the control plane without a token */
    int kv_quota_set;             /* kv_store_quota was given; else the default (100) */
    int64_t kv_store_quota;       /* KVStores per namespace; negative: no limit */
    int object_quota_set;         /* object_quota was given; else the default (10,000) */
    int64_t object_quota;         /* objects per namespace, all kinds; negative: no limit */
    int ns_max_workers_set, max_workers_set; /* given; else the defaults (100, 1000) */
    unsigned ns_max_workers, max_workers;    /* worker processes per namespace, node; 0: none */
    char *site_default_index;     /* a Site's index without spec.index; NULL: index.html */
    int site_cache_set;           /* site_cache_bytes was given; else the default */
    uint64_t site_cache_bytes;    /* Sites' files in memory, all together */
    uint64_t site_send_timeout_ms; /* funcd_with_site_send_timeout; 0: the default */
    char *otlp_endpoint;          /* a base URL; NULL: no export */
    char *tls_cert, *tls_key;     /* TLS from these files, or */
    int tls_self_signed;          /* 1: a self-signed pair in tls_dir */
    char *tls_dir;                /* NULL: the state directory */
    char *node_name;              /* NULL: the host name */
    char *node_address;           /* NULL: the data plane's address */
    uint64_t lease_ttl_ms;        /* 0: the default (cluster/lease.h) */
    uint64_t blob_poll_ms;        /* blob EventSources' default poll; 0: 15 s */
    uint64_t wf_step_timeout_ms;  /* funcd_with_workflow; 0: none */
    unsigned wf_retry_attempts;   /* 0: 1 */
    uint64_t wf_retention_ms;     /* 0: forever (the default is set by the preset) */
    uint64_t wf_payload_limit;    /* 0: 1 MiB */
    uint64_t invocation_retention_ms, dlq_retention_ms, dlq_max_entries; /* 0: the queue's */
    uint64_t queue_max_pending, queue_max_bytes; /* per namespace; 0: off */
    unsigned queue_anonymous_share; /* percent of those anonymous callers may hold (default 50) */
    uint64_t async_max_body;      /* /async/ bodies of functions whose edge sets no cap; 0: off */
    char **callback_allow;        /* funcd_with_callback_allow's lists, or NULL */
    int s3;                       /* funcd_with_s3 was given: the S3 gateway runs */
    char *s3_listen;              /* its host listener, or NULL */
    char *s3_secret_file;         /* NULL: generated in the state directory (or in memory) */
    uint64_t s3_max_upload;       /* 0: 1 GiB */
    char *egress_dns_upstream;    /* NULL: the host's resolv.conf (docs/egress.md) */
} funcd_config;

/* Applies presets first, then the rest in order; frees every option. */
int funcd_config_apply(funcd_config *cfg, funcd_option *const *options, size_t count);
/* Releases whatever the configuration still owns. */
void funcd_config_clear(funcd_config *cfg);

#endif
