/*
 * funcd — the embeddable functions platform.
 *
 *     funcd_platform *p;
 *     if (funcd_platform_new(&p, funcd_in_memory(),
 *                            funcd_with_listen_addr("127.0.0.1:0")) < 0) {
 *         fprintf(stderr, "%s\n", funcd_error_last()->message);
 *         return 1;
 *     }
 *     printf("API on http://%s\n", funcd_platform_addr(p));
 *     funcd_platform_run(p);      // until funcd_platform_stop(p)
 *     funcd_platform_free(p);     // shuts down, then releases memory
 *
 * Options are built by the funcd_* functions below and consumed by
 * funcd_platform_new whether it succeeds or fails. Presets
 * (funcd_in_memory, funcd_production) are applied first, in order; every other
 * option is applied after them, in order, so a later option overrides.
 *
 * Threads: funcd_platform_stop is async-signal-safe and callable from any
 * thread; funcd_platform_shutdown and funcd_platform_free are thread-safe and
 * idempotent with respect to each other; the rest is called from one thread.
 */
#ifndef FUNCD_FUNCD_H
#define FUNCD_FUNCD_H

#include "funcd/common.h"
#include "funcd/sys/blob.h"
#include "funcd/sys/bus.h"
#include "funcd/sys/gateway.h"
#include "funcd/sys/runtime.h"
#include "funcd/sys/store.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FUNCD_VERSION_STRING "0.1.0"

typedef struct funcd_platform funcd_platform;
typedef struct funcd_option funcd_option;

/* funcd_log_level and funcd_log_fn are in common.h (drivers log too). */

/** One line a function's worker wrote, with where it came from. */
typedef struct funcd_log_record {
    const char *namespace_;
    const char *function;
    const char *replica;
    const char *invocation_id; /**< NULL outside an invocation */
    int stream;                /**< 1 stdout, 2 stderr */
    int64_t time_ms;
    const char *line;
    size_t len;
} funcd_log_record;

/** Observes function log lines; runs on the platform loop. */
typedef void (*funcd_log_observer_fn)(const funcd_log_record *rec, void *payload);

/* ---- presets ------------------------------------------------------------ */

/** Memory store/blob/bus, the process runtime, the embedded gateway,
 *  ephemeral loopback listeners, and the developer token "funcd-dev-token"
 *  for "default". */
FUNCD_EXTERN funcd_option *funcd_in_memory(void);

/** Loopback listeners on the default ports, the process runtime, the
 *  embedded gateway and no credential at all: store, blob and bus must be
 *  injected with the options below. */
FUNCD_EXTERN funcd_option *funcd_production(void);

/* ---- backends (ownership passes to the option, then the platform) -------
 *
 * A later option of the same port replaces (and frees) an earlier one. One
 * backend object given twice (in any two options) is FUNCD_EINVAL from
 * funcd_platform_new, and is freed once. Each is checked against its port's
 * rules (include/funcd/sys/, docs/backends.md). */

FUNCD_EXTERN funcd_option *funcd_with_store(funcd_store *backend);
FUNCD_EXTERN funcd_option *funcd_with_blob(funcd_blob *backend);
FUNCD_EXTERN funcd_option *funcd_with_bus(funcd_bus *backend);
FUNCD_EXTERN funcd_option *funcd_with_runtime(funcd_runtime *backend);
FUNCD_EXTERN funcd_option *funcd_with_gateway(funcd_gateway *backend);

/* ---- listeners ("host:port"; port 0 picks an ephemeral port) ------------ */

FUNCD_EXTERN funcd_option *funcd_with_listen_addr(const char *addr);
FUNCD_EXTERN funcd_option *funcd_with_data_plane_addr(const char *addr);

/* ---- serving ------------------------------------------------------------ */

/** Where the runtime shims are (funcd-exec, funcd-python.py, funcd-node.js).
 *  Default: $FUNCD_SHIM_DIR, else the installed libexec/funcd. */
FUNCD_EXTERN funcd_option *funcd_with_shim_dir(const char *dir);

/** Where worker sockets and extracted bundles go. Default: a new private
 *  directory under $TMPDIR (or /tmp), removed at shutdown. */
FUNCD_EXTERN funcd_option *funcd_with_state_dir(const char *dir);

/* ---- function runner ---------------------------------------------------- */

/** The function runner's gRPC listener ("host:port"; port 0: ephemeral).
 *  Presets: funcd_in_memory() 127.0.0.1:0, funcd_production() 127.0.0.1:9445. */
FUNCD_EXTERN funcd_option *funcd_with_fn_runner_addr(const char *addr);

/** The largest gRPC message the function runner takes or sends (default
 *  6 MiB, like Porch); larger ones get RESOURCE_EXHAUSTED. */
FUNCD_EXTERN funcd_option *funcd_with_fn_runner_max_message(size_t bytes);

/** Requires a bearer token on every function-runner call (gRPC metadata
 *  `authorization: Bearer TOKEN`; UNAUTHENTICATED otherwise): the tokens of a
 *  file in the token-file format (funcd_with_token_file), mode 0600. The
 *  health check stays open. Default: no authentication. */
FUNCD_EXTERN funcd_option *funcd_with_fn_runner_token_file(const char *path);

/** Where binaryExecutor paths (and exec_path) resolve; unset: exec is off. */
FUNCD_EXTERN funcd_option *funcd_with_functions_dir(const char *dir);

/**
 * An in-process KRM function: reads the ResourceList `in`, writes its
 * output to `*out` and its log to `*log` (both malloc()ed by the function,
 * either may be left NULL). Return 0 on success; non-zero makes the call
 * fail with INTERNAL, carrying `*log`. Runs on the platform loop: be quick.
 */
typedef int (*funcd_builtin_fn)(const char *in, size_t in_len, char **out, size_t *out_len,
                                char **log, size_t *log_len, void *payload);

/** Registers a builtin for `image` (an exact image name, or a prefix ending
 *  in ':' or '*', e.g. "example.com/fns/set-labels:*"). Builtins come first
 *  in the evaluator chain. */
FUNCD_EXTERN funcd_option *funcd_with_builtin(const char *image, funcd_builtin_fn fn,
                                              void *payload);

/* ---- workers, images and sources ----------------------------------------- */

/** 1 (default): every worker runs sandboxed (docs/security.md); 0: plain
 *  processes, for development only. This and funcd_with_host_network_allowed
 *  and funcd_with_seccomp_allow set up the process runtime funcd makes: next
 *  to funcd_with_runtime they are FUNCD_EINVAL (configure the runtime you
 *  pass instead, e.g. with funcd_process_options). */
FUNCD_EXTERN funcd_option *funcd_with_sandbox(int enabled);

/** Lets Functions ask for `spec.network: host` (the daemon's network instead
 *  of a namespace of their own with only loopback). Off by default. */
FUNCD_EXTERN funcd_option *funcd_with_host_network_allowed(int allowed);

/** Takes one system call (by name, e.g. "io_uring_setup") off the sandbox's
 *  seccomp deny list, for every worker; repeatable. An operator's decision:
 *  docs/security.md lists what each denied call guards against. */
FUNCD_EXTERN funcd_option *funcd_with_seccomp_allow(const char *syscall_name);

/** 1: sets "favordynmods" on the host's cgroup2 mount while the platform
 *  runs (sandboxed cold starts move workers between cgroups ~200 times
 *  faster), logged, and cleared again at shutdown if it was off. A
 *  host-wide setting, so off by default: funcd then remounts nothing. */
FUNCD_EXTERN funcd_option *funcd_with_cgroup_favordynmods(int enabled);

/** A host directory under which a Function's `spec.source.path`, or the path
 *  of a host-local git URL (`/dir`, `file:///dir`), may be named by roles other
 *  than admin; repeatable. It must exist (it is resolved, symlinks and all, at
 *  creation). Without one, only admin may name host paths (docs/security.md,
 *  "Host paths"). */
FUNCD_EXTERN funcd_option *funcd_with_source_root(const char *dir);

/** The OS and architecture images are picked for (default: this host's,
 *  e.g. "linux", "amd64"). */
FUNCD_EXTERN funcd_option *funcd_with_node_platform(const char *os, const char *arch);

/** Registry credentials for every pull: a Docker config JSON file. */
FUNCD_EXTERN funcd_option *funcd_with_registry_auth_file(const char *path);

/** Custom CAs: DIR/<host[:port]>/ca.crt, Docker's certs.d layout. */
FUNCD_EXTERN funcd_option *funcd_with_registry_certs_dir(const char *dir);

/** A loopback registry spoken to over plain HTTP ("127.0.0.1:5000"); repeatable. */
FUNCD_EXTERN funcd_option *funcd_with_insecure_registry(const char *host_port);

/** A registry pulls may go to ("registry.example.com", "10.0.0.5:5000"; no port: 443);
 *  repeatable. Once one is named, pulls go only to these (and insecure registries), at
 *  whatever address they resolve to. Without any, pulls go to any registry whose
 *  address is not loopback or link-local. */
FUNCD_EXTERN funcd_option *funcd_with_allowed_registry(const char *host_port);

/** The size cap of extracted images (default 4 GiB); least recently used go first. */
FUNCD_EXTERN funcd_option *funcd_with_image_cache_size(uint64_t bytes);

/** The size cap of pulled image blobs (configs and layers, verified, under
 *  <state>/images/blobs; default FUNCD_IMAGE_BLOB_CACHE_DEFAULT, 10 GiB; 0: no cap).
 *  The least recently used that no pull or extraction holds go first; an image
 *  whose blobs went is fetched again when it is next needed (docs/images.md). */
#define FUNCD_IMAGE_BLOB_CACHE_DEFAULT ((uint64_t)10 << 30)
FUNCD_EXTERN funcd_option *funcd_with_image_blob_cache_bytes(uint64_t bytes);

/** How often a tag is resolved to a digest again (default 5 min) and a git
 *  ref to a commit (default 1 min); 0 keeps the default. */
FUNCD_EXTERN funcd_option *funcd_with_source_refresh(uint64_t tag_ms, uint64_t git_ms);

/* ---- durability ----------------------------------------------------------- */

/** Function logs kept in the blob store: a segment is sealed after `seal_ms`
 *  (default 10 s) or `seal_bytes` (default 8 MiB), and removed after
 *  `retention_ms` (default 7 days). 0 keeps a default. */
FUNCD_EXTERN funcd_option *funcd_with_log_persistence(uint64_t seal_ms, uint64_t seal_bytes,
                                                      uint64_t retention_ms);

/** Secrets are encrypted at rest (AES-256-GCM) with the key in `path`: 32
 *  bytes or their base64, mode 0600; created with 32 random bytes when
 *  missing. Without it, funcd_in_memory()'s memory store uses a random key
 *  of the process, and any other store keeps Secrets unencrypted (with a
 *  warning). docs/security.md. */
FUNCD_EXTERN funcd_option *funcd_with_encryption_key_file(const char *path);

/** How long shutdown waits for requests in flight (default 10 s). */
FUNCD_EXTERN funcd_option *funcd_with_shutdown_grace(uint64_t ms);

/* ---- cluster (docs/cluster.md, docs/adr/0044-nodes-and-leases.md) -------- */

/** This node's name, unique among the funcd processes sharing one store
 *  (default: the host name, lowercased): a DNS-1123 subdomain. */
FUNCD_EXTERN funcd_option *funcd_with_node_name(const char *name);

/** Where this node's data plane is reached, shown in the node list
 *  (default: the data plane's listen address). */
FUNCD_EXTERN funcd_option *funcd_with_node_address(const char *addr);

/** The DNS server the egress gateway resolves with and forwards workers'
 *  questions to: "ip", "ip:port" or "[ipv6]:port" (default: the first
 *  nameserver of the host's /etc/resolv.conf). See docs/egress.md. */
FUNCD_EXTERN funcd_option *funcd_with_egress_dns_upstream(const char *addr);

/** The TTL of the node heartbeats and of the cluster lease (default 10 s,
 *  at least 300 ms): renewed every third of it; a leader that cannot renew
 *  stops leading before it is over, and another node takes over after. */
FUNCD_EXTERN funcd_option *funcd_with_lease_ttl(uint64_t ms);

/* ---- eventing (docs/eventing.md) ------------------------------------------ */

/** How often blob EventSources without spec.blob.pollInterval list their
 *  prefix (default 15 s, at least 100 ms). */
FUNCD_EXTERN funcd_option *funcd_with_blob_poll_interval(uint64_t ms);

/** How long the records of finished async invocations are kept
 *  (`invocation_ms`, default 1 h), and the dead-letter queue of each
 *  namespace: entries kept `dlq_ms` (default 7 days), at most
 *  `dlq_max_entries` (default 10000; the oldest are dropped and counted).
 *  0 keeps a default. */
FUNCD_EXTERN funcd_option *funcd_with_delivery_retention(uint64_t invocation_ms, uint64_t dlq_ms,
                                                         uint64_t dlq_max_entries);

/** Caps of the delivery queue, per namespace: items not yet final
 *  (`max_pending`, default 10000) and bytes held (`max_bytes`, default
 *  1 GiB: the records and bodies of its pending and kept invocations and
 *  of its dead letters). A submission past either is refused before its
 *  body is stored (429 on the data plane). `async_max_body`: the body cap
 *  of /async/ for a function whose edge sets none (default 1 MiB). 0 turns
 *  a cap off (async_max_body: the gateway's 64 MiB); UINT64_MAX keeps the
 *  default. docs/eventing.md. */
FUNCD_EXTERN funcd_option *funcd_with_queue_limits(uint64_t max_pending, uint64_t max_bytes,
                                                   uint64_t async_max_body);

/** The share of each of those caps, in percent (default 50), that a
 *  namespace's anonymous submissions may hold together: /async/ calls of
 *  its open functions and events of its webhooks without a secret. The
 *  rest is kept for its own callers and sources (authenticated /async/,
 *  signed webhooks, bus, cron and blob sources). 0 refuses anonymous
 *  submissions while a cap is on; 100 lets them take it all. More than 100
 *  is FUNCD_EINVAL. docs/eventing.md. */
FUNCD_EXTERN funcd_option *funcd_with_queue_anonymous_share(unsigned percent);

/** Internal addresses X-Callback-Url callbacks may reach: a comma-separated
 *  list of CIDRs or addresses ("127.0.0.1", "fd00::/8"); repeatable.
 *  Without it a callback to a loopback, link-local, unspecified or
 *  multicast address, or to one of this node's own, is refused (funcd's
 *  own listeners always are). docs/eventing.md. */
FUNCD_EXTERN funcd_option *funcd_with_callback_allow(const char *cidrs);

/* ---- workflows (docs/workflows.md) ---------------------------------------- */

/** Workflows (docs/workflows.md): the default timeout of a step's
 *  invocation (0: none beyond the function's spec.timeout), the default
 *  attempts of a step (0: 1), how long finished runs are kept (0: forever;
 *  UINT64_MAX: the default, 7 days), and the payload limit of a run's
 *  input and of each step's input and output (0: 1 MiB). */
FUNCD_EXTERN funcd_option *funcd_with_workflow(uint64_t step_timeout_ms, unsigned retry_attempts,
                                               uint64_t retention_ms, uint64_t payload_limit);

/* ---- limits --------------------------------------------------------------- */

/** Bytes a watch or log-follow stream may hold for a client that reads
 *  slower than events come (default 2 MiB, at least 64 KiB); beyond it the
 *  stream ends with an ERROR event (code 429). docs/operating.md. */
FUNCD_EXTERN funcd_option *funcd_with_stream_buffer_limit(size_t bytes);

/** Connections each listener (control plane, and data plane when the
 *  gateway is the embedded one) holds open at once (default 1024); more
 *  wait in the kernel's listen backlog until one closes. */
FUNCD_EXTERN funcd_option *funcd_with_max_connections(unsigned n);

/* ---- the edge (docs/edge.md) --------------------------------------------- */

/** The authentication stance of functions whose spec.edge.auth is not set:
 *  "open" (the default: no token needed) or "authenticated" (a bearer token
 *  of funcd_with_token/_token_file whose role may invoke in the function's
 *  namespace). Anything else makes funcd_platform_new fail (FUNCD_EINVAL). */
FUNCD_EXTERN funcd_option *funcd_with_edge_auth_default(const char *stance);

/** Limits of functions whose spec.edge.limits does not set them; every one
 *  0 = off, and off is the default: `rps` requests per second with bursts
 *  of `burst` (0: rps) -> 429; request bodies over `max_body` bytes -> 413
 *  (at most 64 MiB, the gateway's own ceiling); more than `max_in_flight`
 *  requests of a function at once -> 503. */
FUNCD_EXTERN funcd_option *funcd_with_edge_limits(uint32_t rps, uint32_t burst, uint64_t max_body,
                                                  uint32_t max_in_flight);

/** rps/burst count per client address (and function) rather than per
 *  function; the table is bounded (the longest-waiting client is forgotten
 *  first). Off by default. */
FUNCD_EXTERN funcd_option *funcd_with_edge_limit_per_client(int enabled);
/* ---- metrics (docs/observability.md) ------------------------------------ */

/** GET /metrics (Prometheus text) on the data plane too, without a token:
 *  every namespace's series. Off by default; the control plane always
 *  serves it. */
FUNCD_EXTERN funcd_option *funcd_with_data_plane_metrics(int enabled);

/** GET /metrics on the control plane without a token (every namespace's
 *  series). Off by default: any valid token may read it, and sees the
 *  series of the namespaces it may read. */
FUNCD_EXTERN funcd_option *funcd_with_metrics_open(int open);

/* ---- services for functions (docs/services.md) ---------------------------- */

/** How many KVStores a namespace may have (default 100): creating one more
 *  is refused with 403. Negative: no limit. */
FUNCD_EXTERN funcd_option *funcd_with_kv_store_quota(long quota);

/** How many objects a namespace may have, every kind together: Functions,
 *  FunctionConfigs, Secrets, Workflows, EventSources, KVStores,
 *  EgressPolicies and Sites (default 10,000; WorkflowRuns have their own
 *  caps). Creating one more is refused with 403; replacing one never is.
 *  Negative: no limit (docs/security.md, "Quotas"). */
FUNCD_EXTERN funcd_option *funcd_with_namespace_object_quota(long quota);

/** How many worker processes the Functions of one namespace may have at once,
 *  their minReplicas and their demand together (default 100). A worker past
 *  it is not started: a Function with no worker answers 503 naming the
 *  limit, and its status says how many of its minReplicas are missing.
 *  0: no limit (docs/serving.md, "Worker limits"). */
FUNCD_EXTERN funcd_option *funcd_with_namespace_max_workers(unsigned n);

/** How many worker processes the node may have at once, every namespace's
 *  and the function runner's together (default 1000; 0: no limit). */
FUNCD_EXTERN funcd_option *funcd_with_max_workers(unsigned n);

/** The file a Site serves for a directory when its spec.index is not set
 *  (default "index.html"; a relative path without ".."; docs/sites.md). */
FUNCD_EXTERN funcd_option *funcd_with_site_default_index(const char *path);
/** How many bytes of Sites' files are kept in memory, all Sites together
 *  (default 256 MiB; 0: none, every request reads its file). When a file
 *  would pass it, the least recently used ones go first (docs/sites.md). */
FUNCD_EXTERN funcd_option *funcd_with_site_cache_bytes(uint64_t bytes);
/** How long a Site answer (HTTP/1 or HTTP/2, sendfile'd or from memory) may
 *  wait for its client to take more before the connection is reset
 *  (default 60000 ms; docs/sites.md). */
FUNCD_EXTERN funcd_option *funcd_with_site_send_timeout(uint64_t ms);
/** The S3 gateway (docs/s3.md): S3's protocol over the blob backend for
 *  Functions with spec.bindings.blob, each signing with its own access key.
 *  `listen_addr` ("host:port", port 0: ephemeral; NULL: none) is a host
 *  listener for clients on the node (and workers under --no-sandbox);
 *  sandboxed workers reach the gateway at 127.0.0.1:9000 in their own
 *  network namespace. Keys derive from the master secret in
 *  `master_secret_file` (NULL: generated 0600 as s3-master-secret in the
 *  state directory, or random in memory with funcd_in_memory()).
 *  `max_upload`: the largest object or part in bytes (0: 1 GiB). */
FUNCD_EXTERN funcd_option *funcd_with_s3(const char *listen_addr, const char *master_secret_file,
                                         uint64_t max_upload);

/* ---- TLS ---------------------------------------------------------------- */

/** TLS on the control plane, the data plane (when the gateway is the
 *  embedded one) and the function runner's TCP listener, with the PEM
 *  certificate (chain) in `cert_file` and its unencrypted PEM key in
 *  `key_file`. Both are read by funcd_platform_new: a missing, unreadable
 *  or mismatched file is FUNCD_EINVAL naming it. docs/edge.md. */
FUNCD_EXTERN funcd_option *funcd_with_tls_cert_files(const char *cert_file, const char *key_file);

/** TLS as above with a self-signed certificate kept in DIR/tls.crt and
 *  DIR/tls.key (ECDSA P-256, mode 0600; for localhost, 127.0.0.1, ::1 and
 *  the host's name): made at the first start, reused after, made again once
 *  it has expired. `dir` NULL: the state directory. Its SHA-256 fingerprint
 *  is logged; funcd_platform_tls_fingerprint returns it. */
FUNCD_EXTERN funcd_option *funcd_with_tls_self_signed(const char *dir);

/* ---- authentication ----------------------------------------------------- */

/** Roles: "admin" (everything), "developer" (read/write in its namespaces),
 *  "viewer" (read in its namespaces). */
FUNCD_EXTERN funcd_option *funcd_with_token(const char *token, const char *role,
                                            const char *const *namespaces);

/** Tokens from a file of lines `token role namespace[,namespace...]`; the
 *  file must not be accessible by group or others (chmod 600). */
FUNCD_EXTERN funcd_option *funcd_with_token_file(const char *path);

/** A developer token for the given namespaces:
 *  funcd_with_dev_auth("t0k3n", "default", "team-a"). */
#define funcd_with_dev_auth(token, ...) \
    funcd_with_dev_auth_v((token), (const char *const[]){__VA_ARGS__, NULL})
FUNCD_EXTERN funcd_option *funcd_with_dev_auth_v(const char *token,
                                                 const char *const *namespaces);

/** Removes every credential configured so far (by a preset, for instance). */
FUNCD_EXTERN funcd_option *funcd_without_auth_tokens(void);

/* ---- logging ------------------------------------------------------------ */

FUNCD_EXTERN funcd_option *funcd_with_logger(funcd_log_fn fn, funcd_log_level min_level,
                                             void *payload);
FUNCD_EXTERN funcd_option *funcd_with_log_observer(funcd_log_observer_fn fn, void *payload);

/** One JSON line per data-plane request (time, method, path, status, bytes,
 *  duration, function, namespace, invocation and trace id) appended to
 *  `path`, or to stdout for "-"; written by a thread of its own, never by
 *  the gateway's. Off by default. docs/observability.md. */
FUNCD_EXTERN funcd_option *funcd_with_access_log(const char *path);

/** Exports the edge's spans and the functions' log lines over OTLP/HTTP
 *  (protobuf) to `url` (a collector's base URL, e.g.
 *  "http://127.0.0.1:4318": funcd POSTs to url/v1/traces and url/v1/logs),
 *  batched and retried by a thread of its own. Off by default.
 *  docs/observability.md. */
FUNCD_EXTERN funcd_option *funcd_with_otlp_endpoint(const char *url);

/* ---- the platform ------------------------------------------------------- */

/**
 * Creates a platform and binds its listeners. Consumes every option, also on
 * failure. On failure returns a negative FUNCD_E* code (FUNCD_EMISSING when a
 * backend is missing, FUNCD_EBIND when a listener cannot bind, FUNCD_EINVAL on
 * a bad option) and stores NULL in `*out`. A preset must come first in
 * effect (it is applied first wherever it is); NULL options are skipped, so
 * `cond ? funcd_with_x(...) : NULL` works.
 */
#define funcd_platform_new(out, ...)                                                 \
    funcd_platform_new_n((out), (funcd_option *const[]){__VA_ARGS__},                \
                         sizeof((funcd_option *const[]){__VA_ARGS__}) / sizeof(funcd_option *))
FUNCD_EXTERN int funcd_platform_new_n(funcd_platform **out, funcd_option *const *options,
                                      size_t count);
/** The same over a NULL-terminated array (NULL entries cannot be skipped). */
FUNCD_EXTERN int funcd_platform_new_v(funcd_platform **out, funcd_option *const *options);

/** Serves on the calling thread until funcd_platform_stop. */
FUNCD_EXTERN int funcd_platform_run(funcd_platform *p);

/** Serves on a background thread and returns at once (for tests and hosts
 *  with their own main loop). Stop it with funcd_platform_shutdown. */
FUNCD_EXTERN int funcd_platform_start(funcd_platform *p);

/** Asks a running platform to return from funcd_platform_run.
 *  Async-signal-safe; callable from any thread, any number of times. */
FUNCD_EXTERN void funcd_platform_stop(funcd_platform *p);

/** Stops serving and closes every listener, connection and backend, even if
 *  one of them fails to close. Idempotent and thread-safe. */
FUNCD_EXTERN int funcd_platform_shutdown(funcd_platform *p);

/** Shuts down (if not yet done) and releases the platform. NULL is ignored. */
FUNCD_EXTERN void funcd_platform_free(funcd_platform *p);

/** The bound control-plane address, "127.0.0.1:PORT". */
FUNCD_EXTERN const char *funcd_platform_addr(const funcd_platform *p);

/** The bound data-plane address, "127.0.0.1:PORT". */
FUNCD_EXTERN const char *funcd_platform_data_plane_addr(const funcd_platform *p);

/** The bound function-runner (gRPC) address, "127.0.0.1:PORT". */
FUNCD_EXTERN const char *funcd_platform_fn_runner_addr(const funcd_platform *p);
/** The S3 gateway's host listener ("" without one). */
FUNCD_EXTERN const char *funcd_platform_s3_addr(const funcd_platform *p);

/** The served certificate's SHA-256 fingerprint ("AB:CD:...", 95
 *  characters); "" without TLS. */
FUNCD_EXTERN const char *funcd_platform_tls_fingerprint(const funcd_platform *p);

/** The served certificate's file (the self-signed one's path too); NULL
 *  without TLS. */
FUNCD_EXTERN const char *funcd_platform_tls_cert_file(const funcd_platform *p);

/** The library version, FUNCD_VERSION_STRING when headers and library match. */
FUNCD_EXTERN const char *funcd_version(void);

#ifdef __cplusplus
}
#endif
#endif
