/*
 * funcd — the daemon: parses flags, builds a platform, runs it until
 * SIGTERM or SIGINT.
 */
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config_file.h"
#include "funcd/funcd.h"

static funcd_platform *running;
static volatile sig_atomic_t signals_seen;

/* The first signal starts a graceful shutdown; a second one means now.
 * Workers die with us (PR_SET_PDEATHSIG, and the sandbox's pid namespace). */
static void on_signal(int sig)
{
    if (signals_seen++) {
        static const char msg[] = "funcd: second signal: exiting at once\n";
        ssize_t n = write(2, msg, sizeof(msg) - 1);
        (void)n;
        _exit(128 + sig);
    }
    funcd_platform_stop(running); /* async-signal-safe */
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: funcd (--data-dir DIR | --memory) [options]\n"
            "\n"
            "  --data-dir DIR             durable substrate: sqlite store DIR/store.db, blobs in\n"
            "                             DIR/blobs, worker state in DIR/state\n"
            "  --memory                   keep everything in memory (lost on exit)\n"
            "  --store postgres://...     the store in a PostgreSQL database (shared by nodes;\n"
            "                             also postgresql:///DB?host=/socket/dir)\n"
            "  --blob postgres://...|file:DIR  blobs in PostgreSQL, or in DIR (a shared mount)\n"
            "                             (both replace what --data-dir or --memory would use)\n"
            "  --bus nats://HOST:PORT     the bus on a NATS server (several: comma-separated;\n"
            "                             default: in-process, one node only)\n"
            "  --config FILE              flags from a YAML file (flag-name: value; lists for\n"
            "                             repeatable flags); command-line flags win\n"
            "  --listen ADDR              control-plane API (default 127.0.0.1:8080)\n"
            "  --data-plane-listen ADDR   function traffic (default 127.0.0.1:8081)\n"
            "  --fn-runner-listen ADDR    function runner gRPC (default 127.0.0.1:9445;\n"
            "                             unix:/PATH for a Unix socket)\n"
            "  --fn-runner-token-file FILE  function runner calls need a bearer token of FILE\n"
            "                             (the --token-file format)\n"
            "  --functions-dir DIR        where binaryExecutor paths and worker images resolve\n"
            "  --fn-runner-max-message N  largest gRPC message in bytes (default 6291456)\n"
            "  --token-file FILE          lines `token role namespace[,namespace...]`\n"
            "                             (mode 0600: refused if group or others can read it)\n"
            "  --encryption-key-file FILE key of the Secrets at rest (default with --data-dir:\n"
            "                             DIR/encryption.key, created at first start)\n"
            "  --dev                      accept funcd-dev-token as developer of \"default\",\n"
            "                             and the working directory as a source root\n"
            "  --source-root DIR          developers may name host paths under DIR in\n"
            "                             spec.source (repeatable; else admin only)\n"
            "  --no-sandbox               run workers as plain processes (development only)\n"
            "  --allow-host-network       Functions may ask for spec.network: host\n"
            "                             (an admin writes them; a developer may not)\n"
            "  --seccomp-allow SYSCALL    take a system call off the sandbox's deny list\n"
            "                             (repeatable; docs/security.md)\n"
            "  --cgroup-favordynmods      set favordynmods on the host's cgroup2 mount while\n"
            "                             running (faster sandboxed cold starts; host-wide,\n"
            "                             logged, cleared at exit; docs/operating.md)\n"
            "  --registry-auth-file FILE  registry credentials (Docker config JSON)\n"
            "  --registry-certs-dir DIR   custom CAs: DIR/<host[:port]>/ca.crt\n"
            "  --insecure-registry H:P    plain-HTTP loopback registry (repeatable)\n"
            "  --allowed-registry H[:P]   pull only from these registries (repeatable;\n"
            "                             default: any at a non-loopback, non-link-local address)\n"
            "  --node-platform OS/ARCH    the platform images are picked for (default: this host)\n"
            "  --image-cache-size BYTES   cap of extracted images (default 4294967296)\n"
            "  --image-blob-cache-bytes BYTES  cap of pulled image blobs (configs, layers;\n"
            "                             default 10737418240 = 10 GiB; 0: no cap)\n"
            "  --tag-refresh DURATION     re-resolve image tags (default 5m)\n"
            "  --git-poll DURATION        re-resolve git refs (default 1m)\n"
            "  --log-seal-age DURATION    seal a function-log segment after (default 10s)\n"
            "  --log-seal-size BYTES      ... or at this size (default 8388608)\n"
            "  --log-retention DURATION   keep function logs (default 168h)\n"
            "  --shutdown-grace DURATION  wait for requests in flight at SIGTERM (default 10s)\n"
            "  --node-name NAME           this node's name in a cluster sharing one store\n"
            "                             (default: the host name; docs/cluster.md)\n"
            "  --node-address HOST:PORT   where this node's data plane is reached, shown in\n"
            "                             `funcdctl get nodes` (default: its listen address)\n"
            "  --egress-dns-upstream ADDR the resolver of the egress gateway (default: the\n"
            "                             first nameserver of /etc/resolv.conf; docs/egress.md)\n"
            "  --lease-ttl DURATION       node heartbeats and the cluster lease (default 10s)\n"
            "  --invocation-retention DURATION  how long finished async invocations stay\n"
            "                             readable (default 1h)\n"
            "  --dlq-retention DURATION   how long dead letters are kept (default 168h)\n"
            "  --dlq-max-entries N        dead letters kept per namespace; the oldest go\n"
            "                             first (default 10000)\n"
            "  --queue-max-pending N      async invocations and events not yet final, per\n"
            "                             namespace; more: 429 (default 10000; 0: off)\n"
            "  --queue-max-bytes BYTES    bytes the delivery queue holds per namespace\n"
            "                             (records, bodies; default 1073741824; 0: off)\n"
            "  --queue-anonymous-share PERCENT  of each of those caps, what anonymous\n"
            "                             callers (open /async/, unsigned webhooks) may hold\n"
            "                             (default 50; 0: none; the rest is the tenant's)\n"
            "  --async-max-body BYTES     /async/ body cap of functions whose edge sets none\n"
            "                             (default 1048576; 0: the gateway's 64 MiB)\n"
            "  --callback-allow CIDR[,CIDR...]  internal addresses X-Callback-Url may reach\n"
            "                             (default: none; loopback, link-local... refused)\n"
            "  --blob-poll-interval DURATION  how often blob EventSources list their prefix\n"
            "                             unless spec.blob.pollInterval says (default 15s)\n"
            "  --workflow-step-timeout DURATION  default timeout of a workflow step's call\n"
            "                             (default: none beyond the function's spec.timeout)\n"
            "  --workflow-retry N         default attempts of a workflow step (default 1)\n"
            "  --workflow-retention DURATION  keep finished workflow runs (default 168h; 0: forever)\n"
            "  --workflow-payload-limit BYTES  a run's input and each step's output (default\n"
            "                             1048576)\n"
            "  --stream-buffer-limit BYTES  what a watch or log stream may hold for a slow\n"
            "                             client (default 2097152); beyond it the stream ends\n"
            "  --max-connections N        connections each listener holds open (default 1024);\n"
            "                             more wait in the kernel's backlog\n"
            "  --access-log FILE|-        one JSON line per data-plane request (- : stdout)\n"
            "  --edge-auth-default STANCE open (default) or authenticated: functions without\n"
            "                             spec.edge.auth (docs/edge.md)\n"
            "  --edge-rps N               requests per second per function (default 0: off)\n"
            "  --edge-burst N             bursts above --edge-rps (default 0: the rps)\n"
            "  --edge-max-body BYTES      request body cap per function (default 0: off;\n"
            "                             at most 67108864, the gateway's own cap)\n"
            "  --edge-max-in-flight N     requests of a function at once (default 0: off)\n"
            "  --edge-limit-per-client    --edge-rps and spec.edge.limits.rps count per client\n"
            "                             address (default: per function)\n"
            "  --data-plane-metrics       serve GET /metrics on the data plane too (no token)\n"
            "  --metrics-open             GET /metrics on the control plane without a token\n"
            "                             (default: any valid token; docs/observability.md)\n"
            "  --kv-store-quota N         KVStores per namespace (default 100; negative: no\n"
            "                             limit; docs/services.md)\n"
            "  --namespace-object-quota N objects per namespace, every kind together\n"
            "                             (default 10000; negative: no limit; docs/security.md)\n"
            "  --namespace-max-workers N  worker processes of one namespace's Functions at once\n"
            "                             (default 100; 0: no limit; docs/serving.md)\n"
            "  --max-workers N            worker processes of the node at once, every namespace\n"
            "                             and the function runner (default 1000; 0: no limit)\n"
            "  --site-default-index FILE  a Site's index when its spec.index is not set\n"
            "                             (default index.html; docs/sites.md)\n"
            "  --site-cache-bytes BYTES   Sites' files kept in memory, all Sites together\n"
            "                             (default 268435456 = 256 MiB; 0: none)\n"
            "  --site-send-timeout DUR    a Site answer whose client takes nothing of it\n"
            "                             for this long (HTTP/1 or HTTP/2) is cut off\n"
            "                             (default 60s; docs/sites.md)\n"
            "  --s3-listen ADDR           the S3 gateway's host listener (node-private, e.g.\n"
            "                             127.0.0.1:9000; docs/s3.md)\n"
            "  --s3-master-secret-file F  the secret the S3 access keys derive from (default:\n"
            "                             generated 0600 as s3-master-secret in the state dir)\n"
            "  --s3-max-upload BYTES      the largest S3 object or part (default 1 GiB)\n"
            "  --otlp-endpoint URL        export spans and function logs over OTLP/HTTP to\n"
            "                             URL/v1/traces and URL/v1/logs (e.g. http://127.0.0.1:4318)\n"
            "  --tls-cert FILE --tls-key FILE  TLS on the control plane, data plane and\n"
            "                             function runner with this PEM certificate and key\n"
            "  --tls self-signed          TLS with a self-signed certificate made at the first\n"
            "                             start and kept (DATA-DIR/tls.crt and tls.key, or in\n"
            "                             the state directory with --memory); its SHA-256\n"
            "                             fingerprint is printed\n"
            "  --shims DIR                where the runtime shims are (default: next to\n"
            "                             this binary in a build tree, else the installed ones)\n"
            "  --state-dir DIR            worker sockets and extracted artifacts (default:\n"
            "                             DIR/state with --data-dir, else a private directory\n"
            "                             under $TMPDIR, removed on exit)\n"
            "  --log-level LEVEL          debug, info, warn or error (default info)\n"
            "  --version                  print the version\n"
            "\n"
            "Port 0 picks a free port; the bound addresses are printed on start.\n"
            "SIGTERM or SIGINT: graceful shutdown; a second one exits at once.\n");
}

typedef struct flags {
    int memory;
    const char *data_dir;
    const char *bus;
    const char *store_url, *blob_url;
    const char *listen;
    const char *data_plane;
    const char *token_file;
    const char *key_file, *fn_token_file;
    const char *shims;
    const char *state_dir;
    const char *fn_runner;
    const char *functions_dir;
    size_t fn_max;
    int dev;
    int no_sandbox;
    int host_network;
    int favordynmods;
    int dp_metrics, metrics_open;
    const char *kv_quota;
    const char *object_quota;
    const char *ns_max_workers, *max_workers;
    const char *site_index;
    int site_cache_set;
    uint64_t site_cache;
    uint64_t site_send_timeout;
    const char *s3_listen, *s3_secret;
    uint64_t s3_max_upload;
    const char *auth_file;
    const char *certs_dir;
    const char *insecure[16];
    size_t n_insecure;
    const char *allowed[16];
    size_t n_allowed;
    const char *seccomp_allow[16];
    size_t n_seccomp;
    const char *source_roots[16];
    size_t n_roots;
    const char *node_platform;
    uint64_t image_cache, tag_refresh, git_poll, seal_age, seal_size, retention, grace;
    int blob_cache_set; /* --image-blob-cache-bytes was given (0: no cap) */
    uint64_t blob_cache;
    uint64_t stream_buffer, max_conns;
    const char *access_log;
    const char *edge_auth;
    uint64_t edge_rps, edge_burst, edge_max_body, edge_in_flight;
    int edge_set, edge_per_client;
    const char *otlp_endpoint;
    const char *node_name, *node_address;
    const char *egress_dns; /* --egress-dns-upstream */
    uint64_t lease_ttl;
    uint64_t blob_poll;
    uint64_t wf_step_timeout, wf_retry, wf_retention, wf_payload;
    int wf_set;
    uint64_t invocation_retention, dlq_retention, dlq_max;
    uint64_t queue_limits[3]; /* --queue-max-pending, --queue-max-bytes, --async-max-body */
    int queue_set[3];
    uint64_t queue_anonymous_share;
    int queue_anonymous_set;
    const char *callback_allow;
    const char *tls_cert, *tls_key;
    int tls_self_signed;
    funcd_log_level level;
} flags;

static int parse_level(const char *s, funcd_log_level *out)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (funcd_log_level)i;
            return 0;
        }
    return -1;
}

static int parse_bytes(const char *name, const char *s, uint64_t min, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long n = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-' || n < min) {
        fprintf(stderr, "funcd: --%s takes a byte count of at least %llu, not \"%s\"\n", name,
                (unsigned long long)min, s);
        return -1;
    }
    *out = n;
    return 0;
}

/* A count from 0 to `max`. */
static int parse_count(const char *name, const char *s, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long n = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-' || n > max) {
        fprintf(stderr, "funcd: --%s takes a count from 0 (off) to %llu, not \"%s\"\n", name,
                (unsigned long long)max, s);
        return -1;
    }
    *out = n;
    return 0;
}

static int parse_duration(const char *name, const char *s, uint64_t *out)
{
    if (funcd_parse_duration_ms(s, out) < 0 || *out == 0) {
        fprintf(stderr, "funcd: --%s takes a duration like 500ms, 10s, 5m or 2h, not \"%s\"\n",
                name, s);
        return -1;
    }
    return 0;
}

enum { O_MEMORY = 256, O_DATA_DIR, O_LISTEN, O_DP, O_TOKENS, O_DEV, O_LEVEL, O_VERSION, O_SHIMS,
       O_STATE, O_FNRUN, O_FNDIR, O_FNMAX, O_CONFIG, O_NO_SANDBOX, O_AUTH, O_CERTS, O_INSECURE,
       O_PLATFORM, O_CACHE, O_BLOB_CACHE, O_TAG, O_GIT, O_SEAL_AGE, O_SEAL_SIZE, O_RETENTION, O_GRACE,
       O_HOST_NET, O_SECCOMP, O_FAVOR, O_STREAM_BUF, O_MAX_CONNS, O_ALLOWED,
       O_SRCROOT, O_KEY_FILE, O_FN_TOKENS, O_ACCESS_LOG, O_EDGE_AUTH, O_EDGE_RPS, O_EDGE_BURST,
       O_EDGE_BODY, O_EDGE_IN_FLIGHT, O_EDGE_PER_CLIENT,
       O_BUS, O_STORE, O_BLOB, O_DP_METRICS, O_METRICS_OPEN, O_OTLP, O_TLS, O_TLS_CERT,
       O_TLS_KEY, O_NODE_NAME, O_NODE_ADDR, O_LEASE_TTL, O_BLOB_POLL, O_KV_QUOTA, O_OBJECT_QUOTA, O_NS_MAX_WORKERS, O_MAX_WORKERS, O_SITE_INDEX, O_SITE_CACHE, O_SITE_SEND_TIMEOUT, O_WF_TIMEOUT,
       O_WF_RETRY, O_WF_RETENTION, O_WF_PAYLOAD, O_INV_RETENTION, O_DLQ_RETENTION,
       O_DLQ_MAX, O_S3_LISTEN, O_S3_SECRET, O_S3_MAX_UPLOAD, O_EGRESS_DNS,
       O_QUEUE_PENDING, O_QUEUE_BYTES, O_ASYNC_BODY, O_CALLBACK_ALLOW, O_QUEUE_ANON };

static const struct option long_opts[] = {
    {"memory", no_argument, 0, O_MEMORY},
    {"data-dir", required_argument, 0, O_DATA_DIR},
    {"config", required_argument, 0, O_CONFIG},
    {"bus", required_argument, 0, O_BUS},
    {"store", required_argument, 0, O_STORE},
    {"blob", required_argument, 0, O_BLOB},
    {"listen", required_argument, 0, O_LISTEN},
    {"data-plane-listen", required_argument, 0, O_DP},
    {"token-file", required_argument, 0, O_TOKENS},
    {"encryption-key-file", required_argument, 0, O_KEY_FILE},
    {"fn-runner-token-file", required_argument, 0, O_FN_TOKENS},
    {"dev", no_argument, 0, O_DEV},
    {"no-sandbox", no_argument, 0, O_NO_SANDBOX},
    {"allow-host-network", no_argument, 0, O_HOST_NET},
    {"seccomp-allow", required_argument, 0, O_SECCOMP},
    {"cgroup-favordynmods", no_argument, 0, O_FAVOR},
    {"source-root", required_argument, 0, O_SRCROOT},
    {"shims", required_argument, 0, O_SHIMS},
    {"state-dir", required_argument, 0, O_STATE},
    {"log-level", required_argument, 0, O_LEVEL},
    {"version", no_argument, 0, O_VERSION},
    {"fn-runner-listen", required_argument, 0, O_FNRUN},
    {"functions-dir", required_argument, 0, O_FNDIR},
    {"fn-runner-max-message", required_argument, 0, O_FNMAX},
    {"registry-auth-file", required_argument, 0, O_AUTH},
    {"registry-certs-dir", required_argument, 0, O_CERTS},
    {"insecure-registry", required_argument, 0, O_INSECURE},
    {"allowed-registry", required_argument, 0, O_ALLOWED},
    {"node-platform", required_argument, 0, O_PLATFORM},
    {"image-cache-size", required_argument, 0, O_CACHE},
    {"image-blob-cache-bytes", required_argument, 0, O_BLOB_CACHE},
    {"tag-refresh", required_argument, 0, O_TAG},
    {"git-poll", required_argument, 0, O_GIT},
    {"log-seal-age", required_argument, 0, O_SEAL_AGE},
    {"log-seal-size", required_argument, 0, O_SEAL_SIZE},
    {"log-retention", required_argument, 0, O_RETENTION},
    {"shutdown-grace", required_argument, 0, O_GRACE},
    {"stream-buffer-limit", required_argument, 0, O_STREAM_BUF},
    {"max-connections", required_argument, 0, O_MAX_CONNS},
    {"access-log", required_argument, 0, O_ACCESS_LOG},
    {"edge-auth-default", required_argument, 0, O_EDGE_AUTH},
    {"edge-rps", required_argument, 0, O_EDGE_RPS},
    {"edge-burst", required_argument, 0, O_EDGE_BURST},
    {"edge-max-body", required_argument, 0, O_EDGE_BODY},
    {"edge-max-in-flight", required_argument, 0, O_EDGE_IN_FLIGHT},
    {"edge-limit-per-client", no_argument, 0, O_EDGE_PER_CLIENT},
    {"data-plane-metrics", no_argument, 0, O_DP_METRICS},
    {"metrics-open", no_argument, 0, O_METRICS_OPEN},
    {"kv-store-quota", required_argument, 0, O_KV_QUOTA},
    {"namespace-object-quota", required_argument, 0, O_OBJECT_QUOTA},
    {"namespace-max-workers", required_argument, 0, O_NS_MAX_WORKERS},
    {"max-workers", required_argument, 0, O_MAX_WORKERS},
    {"site-default-index", required_argument, 0, O_SITE_INDEX},
    {"site-cache-bytes", required_argument, 0, O_SITE_CACHE},
    {"site-send-timeout", required_argument, 0, O_SITE_SEND_TIMEOUT},
    {"s3-listen", required_argument, 0, O_S3_LISTEN},
    {"s3-master-secret-file", required_argument, 0, O_S3_SECRET},
    {"s3-max-upload", required_argument, 0, O_S3_MAX_UPLOAD},
    {"otlp-endpoint", required_argument, 0, O_OTLP},
    {"tls", required_argument, 0, O_TLS},
    {"tls-cert", required_argument, 0, O_TLS_CERT},
    {"tls-key", required_argument, 0, O_TLS_KEY},
    {"node-name", required_argument, 0, O_NODE_NAME},
    {"node-address", required_argument, 0, O_NODE_ADDR},
    {"egress-dns-upstream", required_argument, 0, O_EGRESS_DNS},
    {"lease-ttl", required_argument, 0, O_LEASE_TTL},
    {"blob-poll-interval", required_argument, 0, O_BLOB_POLL},
    {"workflow-step-timeout", required_argument, 0, O_WF_TIMEOUT},
    {"workflow-retry", required_argument, 0, O_WF_RETRY},
    {"workflow-retention", required_argument, 0, O_WF_RETENTION},
    {"workflow-payload-limit", required_argument, 0, O_WF_PAYLOAD},
    {"invocation-retention", required_argument, 0, O_INV_RETENTION},
    {"dlq-retention", required_argument, 0, O_DLQ_RETENTION},
    {"dlq-max-entries", required_argument, 0, O_DLQ_MAX},
    {"queue-max-pending", required_argument, 0, O_QUEUE_PENDING},
    {"queue-max-bytes", required_argument, 0, O_QUEUE_BYTES},
    {"queue-anonymous-share", required_argument, 0, O_QUEUE_ANON},
    {"async-max-body", required_argument, 0, O_ASYNC_BODY},
    {"callback-allow", required_argument, 0, O_CALLBACK_ALLOW},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

/* Returns -1 to go on, or the exit code. */
static int parse_one(int c, const char *arg, flags *f)
{
    switch (c) {
    case O_MEMORY: f->memory = 1; break;
    case O_DATA_DIR: f->data_dir = arg; break;
    case O_CONFIG: break; /* read before parsing */
    case O_STORE: f->store_url = arg; break; /* checked by open_substrate */
    case O_BLOB: f->blob_url = arg; break;
    case O_BUS:
        if (strncmp(arg, "nats://", 7) != 0) {
            fprintf(stderr, "funcd: --bus takes a NATS URL like nats://127.0.0.1:4222, not "
                            "\"%s\"\n", arg);
            return 2;
        }
        f->bus = arg;
        break;
    case O_LISTEN: f->listen = arg; break;
    case O_DP: f->data_plane = arg; break;
    case O_TOKENS: f->token_file = arg; break;
    case O_KEY_FILE: f->key_file = arg; break;
    case O_FN_TOKENS: f->fn_token_file = arg; break;
    case O_DEV: f->dev = 1; break;
    case O_NO_SANDBOX: f->no_sandbox = 1; break;
    case O_HOST_NET: f->host_network = 1; break;
    case O_DP_METRICS: f->dp_metrics = 1; break;
    case O_METRICS_OPEN: f->metrics_open = 1; break;
    case O_KV_QUOTA: {
        char *end;
        errno = 0;
        long q = strtol(arg, &end, 10);
        if (errno || !*arg || *end || q > 1000000) {
            fprintf(stderr, "funcd: --kv-store-quota takes a number of KVStores (negative: no "
                            "limit), not \"%s\"\n", arg);
            return 2;
        }
        (void)q;
        f->kv_quota = arg;
        break;
    }
    case O_OBJECT_QUOTA: {
        char *end;
        errno = 0;
        long q = strtol(arg, &end, 10);
        if (errno || !*arg || *end || q > 100000000) {
            fprintf(stderr, "funcd: --namespace-object-quota takes a number of objects (at most "
                            "100000000; negative: no limit), not \"%s\"\n", arg);
            return 2;
        }
        f->object_quota = arg;
        break;
    }
    case O_NS_MAX_WORKERS:
    case O_MAX_WORKERS: {
        char *end;
        errno = 0;
        long n = strtol(arg, &end, 10);
        if (errno || !*arg || *end || n < 0 || n > 1000000) {
            fprintf(stderr, "funcd: --%s takes a number of workers (0 to 1000000; 0: no "
                            "limit), not \"%s\"\n",
                    c == O_MAX_WORKERS ? "max-workers" : "namespace-max-workers", arg);
            return 2;
        }
        *(c == O_MAX_WORKERS ? &f->max_workers : &f->ns_max_workers) = arg;
        break;
    }
    case O_SITE_INDEX: f->site_index = arg; break;
    case O_SITE_CACHE:
        f->site_cache_set = 1;
        return parse_bytes("site-cache-bytes", arg, 0, &f->site_cache) ? 2 : -1;
    case O_SITE_SEND_TIMEOUT:
        return parse_duration("site-send-timeout", arg, &f->site_send_timeout) ? 2 : -1;
    case O_FAVOR: f->favordynmods = 1; break;
    case O_S3_LISTEN: f->s3_listen = arg; break;
    case O_S3_SECRET: f->s3_secret = arg; break;
    case O_S3_MAX_UPLOAD:
        return parse_bytes("s3-max-upload", arg, 1, &f->s3_max_upload) ? 2 : -1;
    case O_SECCOMP:
        if (f->n_seccomp == sizeof(f->seccomp_allow) / sizeof(f->seccomp_allow[0])) {
            fprintf(stderr, "funcd: too many --seccomp-allow flags\n");
            return 2;
        }
        f->seccomp_allow[f->n_seccomp++] = arg;
        break;
    case O_SRCROOT:
        if (f->n_roots == sizeof(f->source_roots) / sizeof(f->source_roots[0])) {
            fprintf(stderr, "funcd: too many --source-root flags\n");
            return 2;
        }
        f->source_roots[f->n_roots++] = arg;
        break;
    case O_SHIMS: f->shims = arg; break;
    case O_FNRUN: f->fn_runner = arg; break;
    case O_FNDIR: f->functions_dir = arg; break;
    case O_FNMAX: {
        uint64_t n;
        if (parse_bytes("fn-runner-max-message", arg, 1024, &n) < 0 || n > (1ULL << 31))
            return 2;
        f->fn_max = (size_t)n;
        break;
    }
    case O_STATE: f->state_dir = arg; break;
    case O_LEVEL:
        if (parse_level(arg, &f->level) < 0) {
            fprintf(stderr, "funcd: --log-level must be debug, info, warn or error\n");
            return 2;
        }
        break;
    case O_AUTH: f->auth_file = arg; break;
    case O_CERTS: f->certs_dir = arg; break;
    case O_INSECURE:
        if (f->n_insecure == sizeof(f->insecure) / sizeof(f->insecure[0])) {
            fprintf(stderr, "funcd: too many --insecure-registry flags\n");
            return 2;
        }
        f->insecure[f->n_insecure++] = arg;
        break;
    case O_ALLOWED:
        if (f->n_allowed == sizeof(f->allowed) / sizeof(f->allowed[0])) {
            fprintf(stderr, "funcd: too many --allowed-registry flags\n");
            return 2;
        }
        f->allowed[f->n_allowed++] = arg;
        break;
    case O_PLATFORM: f->node_platform = arg; break;
    case O_CACHE: return parse_bytes("image-cache-size", arg, 1 << 20, &f->image_cache) ? 2 : -1;
    case O_BLOB_CACHE:
        f->blob_cache_set = 1;
        return parse_bytes("image-blob-cache-bytes", arg, 0, &f->blob_cache) ? 2 : -1;
    case O_TAG: return parse_duration("tag-refresh", arg, &f->tag_refresh) ? 2 : -1;
    case O_GIT: return parse_duration("git-poll", arg, &f->git_poll) ? 2 : -1;
    case O_SEAL_AGE: return parse_duration("log-seal-age", arg, &f->seal_age) ? 2 : -1;
    case O_SEAL_SIZE: return parse_bytes("log-seal-size", arg, 1024, &f->seal_size) ? 2 : -1;
    case O_RETENTION: return parse_duration("log-retention", arg, &f->retention) ? 2 : -1;
    case O_GRACE: return parse_duration("shutdown-grace", arg, &f->grace) ? 2 : -1;
    case O_STREAM_BUF:
        return parse_bytes("stream-buffer-limit", arg, 65536, &f->stream_buffer) ? 2 : -1;
    case O_MAX_CONNS: {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(arg, &end, 10);
        if (errno || end == arg || *end || *arg == '-' || n < 1 || n > 1000000) {
            fprintf(stderr, "funcd: --max-connections takes a count from 1 to 1000000, not "
                            "\"%s\"\n", arg);
            return 2;
        }
        f->max_conns = n;
        return -1;
    }
    case O_ACCESS_LOG: f->access_log = arg; break;
    case O_EDGE_AUTH:
        if (strcmp(arg, "open") != 0 && strcmp(arg, "authenticated") != 0) {
            fprintf(stderr, "funcd: --edge-auth-default must be open or authenticated, not "
                            "\"%s\"\n", arg);
            return 2;
        }
        f->edge_auth = arg;
        return -1;
    case O_EDGE_RPS:
        f->edge_set = 1;
        return parse_count("edge-rps", arg, 1000000, &f->edge_rps) ? 2 : -1;
    case O_EDGE_BURST:
        f->edge_set = 1;
        return parse_count("edge-burst", arg, 10000000, &f->edge_burst) ? 2 : -1;
    case O_EDGE_BODY:
        f->edge_set = 1;
        return parse_count("edge-max-body", arg, 64ull << 20, &f->edge_max_body) ? 2 : -1;
    case O_EDGE_IN_FLIGHT:
        f->edge_set = 1;
        return parse_count("edge-max-in-flight", arg, 1000000, &f->edge_in_flight) ? 2 : -1;
    case O_EDGE_PER_CLIENT: f->edge_per_client = 1; return -1;
    case O_OTLP: f->otlp_endpoint = arg; break;
    case O_NODE_NAME: f->node_name = arg; break;
    case O_NODE_ADDR: f->node_address = arg; break;
    case O_EGRESS_DNS: f->egress_dns = arg; break;
    case O_LEASE_TTL: return parse_duration("lease-ttl", arg, &f->lease_ttl) ? 2 : -1;
    case O_BLOB_POLL: return parse_duration("blob-poll-interval", arg, &f->blob_poll) ? 2 : -1;
    case O_WF_TIMEOUT:
        f->wf_set = 1;
        return parse_duration("workflow-step-timeout", arg, &f->wf_step_timeout) ? 2 : -1;
    case O_WF_RETRY:
        f->wf_set = 1;
        if (parse_count("workflow-retry", arg, 100, &f->wf_retry) < 0 || f->wf_retry == 0) {
            fprintf(stderr, "funcd: --workflow-retry takes 1 to 100 attempts\n");
            return 2;
        }
        return -1;
    case O_WF_RETENTION:
        f->wf_set = 1;
        if (strcmp(arg, "0") == 0) { /* keep forever */
            f->wf_retention = 0;
            return -1;
        }
        return parse_duration("workflow-retention", arg, &f->wf_retention) ? 2 : -1;
    case O_WF_PAYLOAD:
        f->wf_set = 1;
        return parse_bytes("workflow-payload-limit", arg, 1, &f->wf_payload) ? 2 : -1;
    case O_INV_RETENTION:
        return parse_duration("invocation-retention", arg, &f->invocation_retention) ? 2 : -1;
    case O_DLQ_RETENTION:
        return parse_duration("dlq-retention", arg, &f->dlq_retention) ? 2 : -1;
    case O_DLQ_MAX:
        return parse_count("dlq-max-entries", arg, 10000000, &f->dlq_max) ? 2 : -1;
    case O_QUEUE_PENDING:
        f->queue_set[0] = 1;
        return parse_count("queue-max-pending", arg, 10000000, &f->queue_limits[0]) ? 2 : -1;
    case O_QUEUE_BYTES:
        f->queue_set[1] = 1;
        return parse_count("queue-max-bytes", arg, 1ull << 50, &f->queue_limits[1]) ? 2 : -1;
    case O_QUEUE_ANON:
        f->queue_anonymous_set = 1;
        return parse_count("queue-anonymous-share", arg, 100, &f->queue_anonymous_share) ? 2 : -1;
    case O_ASYNC_BODY:
        f->queue_set[2] = 1;
        return parse_count("async-max-body", arg, 64ull << 20, &f->queue_limits[2]) ? 2 : -1;
    case O_CALLBACK_ALLOW:
        if (f->callback_allow) {
            fprintf(stderr, "funcd: give one --callback-allow with a comma-separated list\n");
            return 2;
        }
        f->callback_allow = arg;
        return -1;
    case O_TLS:
        if (strcmp(arg, "self-signed") != 0) {
            fprintf(stderr, "funcd: --tls takes \"self-signed\", not \"%s\" (for a certificate of "
                            "your own: --tls-cert FILE --tls-key FILE)\n", arg);
            return 2;
        }
        f->tls_self_signed = 1;
        break;
    case O_TLS_CERT: f->tls_cert = arg; break;
    case O_TLS_KEY: f->tls_key = arg; break;
    case O_VERSION: printf("funcd %s\n", funcd_version()); return 0;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
    return -1;
}

static int parse_flags(int argc, char **argv, flags *f)
{
    int c, idx = 0, rc;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", long_opts, &idx)) != -1)
        if ((rc = parse_one(c, optarg, f)) >= 0)
            return rc;
    if (optind < argc) {
        fprintf(stderr, "funcd: unexpected argument '%s' (see funcd --help)\n", argv[optind]);
        return 2;
    }
    if (f->data_dir && f->memory) {
        fprintf(stderr, "funcd: --data-dir and --memory exclude each other\n");
        return 2;
    }
    if (!f->tls_cert != !f->tls_key) {
        fprintf(stderr, "funcd: --tls-cert and --tls-key go together: give both files\n");
        return 2;
    }
    if (f->tls_cert && f->tls_self_signed) {
        fprintf(stderr, "funcd: --tls self-signed and --tls-cert/--tls-key exclude each other\n");
        return 2;
    }
    if (!f->memory && !f->data_dir) {
        fprintf(stderr, "funcd: choose a substrate: --data-dir DIR (durable) or --memory "
                        "(nothing survives a restart)\n");
        usage(stderr);
        return 2;
    }
    return -1;
}

/* The value of --config in argv, or NULL. */
static const char *config_path(int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            break;
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            path = argv[++i];
        else if (strncmp(argv[i], "--config=", 9) == 0)
            path = argv[i] + 9;
    }
    return path;
}

static char *read_whole(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0, r;
    do {
        if (n + 4096 > cap) {
            char *nb = realloc(buf, cap = cap * 2 + 4096);
            if (!nb) {
                free(buf);
                fclose(fp);
                return NULL;
            }
            buf = nb;
        }
        r = fread(buf + n, 1, cap - n, fp);
        n += r;
    } while (r > 0 && n < (1u << 20));
    int bad = ferror(fp) || n >= (1u << 20);
    fclose(fp);
    if (bad) {
        free(buf);
        errno = EFBIG;
        return NULL;
    }
    *len = n;
    return buf;
}

/* argv with the config file's flags first, so the command line wins. */
static int merge_config(int argc, char **argv, char ***config_args, char ***merged, int *mergedc)
{
    const char *path = config_path(argc, argv);
    *config_args = NULL;
    *merged = NULL;
    if (!path)
        return 0;
    size_t len;
    char *text = read_whole(path, &len);
    if (!text) {
        fprintf(stderr, "funcd: --config %s: %s\n", path, strerror(errno));
        return -1;
    }
    char err[512];
    int rc = funcd_config_file_parse(text, len, config_args, err, sizeof(err));
    free(text);
    if (rc < 0) {
        fprintf(stderr, "funcd: --config %s: %s\n", path, err);
        return -1;
    }
    int n = 0;
    while ((*config_args)[n])
        n++;
    for (int i = 0; i < n; i++)
        if (strncmp((*config_args)[i], "--config", 8) == 0) {
            fprintf(stderr, "funcd: --config %s: a config file cannot name another\n", path);
            return -1;
        }
    *merged = calloc((size_t)(argc + n + 1), sizeof(char *));
    if (!*merged)
        return -1;
    (*merged)[0] = argv[0];
    memcpy(*merged + 1, *config_args, (size_t)n * sizeof(char *));
    memcpy(*merged + 1 + n, argv + 1, (size_t)(argc - 1) * sizeof(char *));
    *mergedc = argc + n;
    return 0;
}

/* In a build tree the shims sit in <build>/shims, two levels above this
 * binary (<build>/bin/funcd/funcd); use them when they are there. */
static const char *build_tree_shims(char *buf, size_t len)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return NULL;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return NULL;
    *slash = '\0';
    snprintf(buf, len, "%.4000s/../../shims", exe);
    char probe[4300];
    snprintf(probe, sizeof(probe), "%.4096s/funcd-exec", buf);
    return access(probe, X_OK) == 0 ? buf : NULL;
}

/* The durable substrate under DIR; NULL options (and a message) on failure. */
static int open_data_dir(const char *dir, funcd_store **store, funcd_blob **blob, char *state,
                         size_t state_len, char *key, size_t key_len)
{
    char path[4200];
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "funcd: cannot create the data directory %s: %s\n", dir, strerror(errno));
        return -1;
    }
    snprintf(path, sizeof(path), "%s/store.db", dir);
    if (funcd_store_sqlite_new(store, path, NULL) < 0) {
        fprintf(stderr, "funcd: %s\n", funcd_error_last()->message);
        return -1;
    }
    snprintf(path, sizeof(path), "%s/blobs", dir);
    if (funcd_blob_file_new(blob, path) < 0) {
        fprintf(stderr, "funcd: %s\n", funcd_error_last()->message);
        (*store)->free(*store);
        return -1;
    }
    snprintf(state, state_len, "%s/state", dir);
    snprintf(key, key_len, "%s/encryption.key", dir);
    return 0;
}

static funcd_option *node_platform_option(const char *os_arch)
{
    char os[64];
    const char *slash = strchr(os_arch, '/');
    if (!slash || (size_t)(slash - os_arch) >= sizeof(os))
        return funcd_with_node_platform(NULL, NULL); /* refused with a message */
    snprintf(os, sizeof(os), "%.*s", (int)(slash - os_arch), os_arch);
    return funcd_with_node_platform(os, slash + 1);
}

/* --store and --blob: the driver a substrate URL names. The one place that
 * maps such URLs to drivers; a new driver adds a branch. 0 or -1 (with a
 * message). */
static int open_substrate(const char *flag, const char *url, funcd_store **store,
                          funcd_blob **blob)
{
    int is_pg = strncmp(url, "postgres://", 11) == 0 || strncmp(url, "postgresql://", 13) == 0;
    int rc = -1;
    if (store && is_pg)
        rc = funcd_store_postgres_new(store, url, NULL);
    else if (blob && is_pg)
        rc = funcd_blob_postgres_new(blob, url);
    else if (blob && strncmp(url, "file:", 5) == 0 && url[5])
        rc = funcd_blob_file_new(blob, url + 5);
    else {
        fprintf(stderr, "funcd: --%s takes %s, not \"%s\"\n", flag,
                store ? "a PostgreSQL URL (postgres://user@host:5432/db)"
                      : "a PostgreSQL URL (postgres://...) or file:DIR",
                url);
        return -1;
    }
    if (rc < 0) {
        fprintf(stderr, "funcd: --%s: %s\n", flag, funcd_error_last()->message);
        return -1;
    }
    return 0;
}

/* Replaces the store and blob of --data-dir or --memory with those of
 * --store and --blob; frees everything on failure. */
static int open_urls(const flags *f, funcd_store **store, funcd_blob **blob)
{
    funcd_store *s = NULL;
    funcd_blob *b = NULL;
    if ((f->store_url && open_substrate("store", f->store_url, &s, NULL) < 0) ||
        (f->blob_url && open_substrate("blob", f->blob_url, NULL, &b) < 0)) {
        if (s)
            s->free(s);
        if (*store)
            (*store)->free(*store);
        if (*blob)
            (*blob)->free(*blob);
        *store = NULL;
        *blob = NULL;
        return -1;
    }
    if (s) {
        if (*store)
            (*store)->free(*store);
        *store = s;
    }
    if (b) {
        if (*blob)
            (*blob)->free(*blob);
        *blob = b;
    }
    return 0;
}

/* The bus of --bus, or the in-process one with --data-dir; 0 or -1 (with a message). */
static int open_bus(const flags *f, funcd_bus **bus)
{
    if (f->bus) {
        funcd_bus_nats_options o = FUNCD_BUS_NATS_OPTIONS_INIT;
        o.log_level = f->level; /* disconnects and reconnects go to stderr like ours */
        if (funcd_bus_nats_new(bus, f->bus, &o) < 0) {
            fprintf(stderr, "funcd: --bus: %s\n", funcd_error_last()->message);
            return -1;
        }
    } else if (f->data_dir && funcd_bus_memory_new(bus) < 0) {
        fprintf(stderr, "funcd: %s\n", funcd_error_last()->message);
        return -1;
    }
    return 0;
}

/* Options of repeatable flags: 16 each, and --dev's source root. */
#define LIST_SLOTS 65

static int build_platform(const flags *f, const char *shims)
{
    funcd_store *store = NULL;
    funcd_blob *blob = NULL;
    char state[4200] = "", key[4200] = "";
    funcd_bus *bus = NULL; /* without --bus, one process: the memory bus is the whole bus */
    if (f->data_dir &&
        open_data_dir(f->data_dir, &store, &blob, state, sizeof(state), key, sizeof(key)) < 0)
        return -1;
    if (open_urls(f, &store, &blob) < 0)
        return -1;
    const char *key_file = f->key_file ? f->key_file : key[0] ? key : NULL;
    if (open_bus(f, &bus) < 0) {
        if (store)
            store->free(store);
        if (blob)
            blob->free(blob);
        return -1;
    }
    funcd_option *lists[LIST_SLOTS] = {0}; /* repeatable flags */
    for (size_t i = 0; i < f->n_insecure; i++)
        lists[i] = funcd_with_insecure_registry(f->insecure[i]);
    for (size_t i = 0; i < f->n_seccomp; i++)
        lists[16 + i] = funcd_with_seccomp_allow(f->seccomp_allow[i]);
    for (size_t i = 0; i < f->n_allowed; i++)
        lists[32 + i] = funcd_with_allowed_registry(f->allowed[i]);
    for (size_t i = 0; i < f->n_roots; i++)
        lists[48 + i] = funcd_with_source_root(f->source_roots[i]);
    /* --dev: what a developer has checked out here may be run in place. */
    char cwd[4096];
    if (f->dev && getcwd(cwd, sizeof(cwd)))
        lists[64] = funcd_with_source_root(cwd);
    const char *state_dir = f->state_dir ? f->state_dir : state[0] ? state : NULL;
    funcd_option *opts[] = {
        f->data_dir ? funcd_production() : funcd_in_memory(),
        store ? funcd_with_store(store) : NULL,
        blob ? funcd_with_blob(blob) : NULL,
        bus ? funcd_with_bus(bus) : NULL,
        funcd_without_auth_tokens(),
        shims ? funcd_with_shim_dir(shims) : NULL,
        state_dir ? funcd_with_state_dir(state_dir) : NULL,
        funcd_with_fn_runner_addr(f->fn_runner ? f->fn_runner : "127.0.0.1:9445"),
        f->functions_dir ? funcd_with_functions_dir(f->functions_dir) : NULL,
        f->fn_max ? funcd_with_fn_runner_max_message(f->fn_max) : NULL,
        funcd_with_listen_addr(f->listen ? f->listen : "127.0.0.1:8080"),
        funcd_with_data_plane_addr(f->data_plane ? f->data_plane : "127.0.0.1:8081"),
        f->dev ? funcd_with_dev_auth("funcd-dev-token", "default") : NULL,
        f->token_file ? funcd_with_token_file(f->token_file) : NULL,
        key_file ? funcd_with_encryption_key_file(key_file) : NULL,
        f->fn_token_file ? funcd_with_fn_runner_token_file(f->fn_token_file) : NULL,
        f->no_sandbox ? funcd_with_sandbox(0) : NULL,
        f->host_network ? funcd_with_host_network_allowed(1) : NULL,
        f->dp_metrics ? funcd_with_data_plane_metrics(1) : NULL,
        f->metrics_open ? funcd_with_metrics_open(1) : NULL,
        f->kv_quota ? funcd_with_kv_store_quota(strtol(f->kv_quota, NULL, 10)) : NULL,
        f->object_quota ? funcd_with_namespace_object_quota(strtol(f->object_quota, NULL, 10))
                        : NULL,
        f->ns_max_workers
            ? funcd_with_namespace_max_workers((unsigned)strtoul(f->ns_max_workers, NULL, 10))
            : NULL,
        f->max_workers ? funcd_with_max_workers((unsigned)strtoul(f->max_workers, NULL, 10))
                       : NULL,
        f->site_index ? funcd_with_site_default_index(f->site_index) : NULL,
        f->site_cache_set ? funcd_with_site_cache_bytes(f->site_cache) : NULL,
        f->site_send_timeout ? funcd_with_site_send_timeout(f->site_send_timeout) : NULL,
        f->favordynmods ? funcd_with_cgroup_favordynmods(1) : NULL,
        f->s3_listen || f->s3_secret || f->s3_max_upload
            ? funcd_with_s3(f->s3_listen, f->s3_secret, f->s3_max_upload)
            : NULL,
        f->auth_file ? funcd_with_registry_auth_file(f->auth_file) : NULL,
        f->certs_dir ? funcd_with_registry_certs_dir(f->certs_dir) : NULL,
        f->node_platform ? node_platform_option(f->node_platform) : NULL,
        f->image_cache ? funcd_with_image_cache_size(f->image_cache) : NULL,
        f->blob_cache_set ? funcd_with_image_blob_cache_bytes(f->blob_cache) : NULL,
        f->tag_refresh || f->git_poll ? funcd_with_source_refresh(f->tag_refresh, f->git_poll)
                                      : NULL,
        f->seal_age || f->seal_size || f->retention
            ? funcd_with_log_persistence(f->seal_age, f->seal_size, f->retention)
            : NULL,
        f->grace ? funcd_with_shutdown_grace(f->grace) : NULL,
        f->stream_buffer ? funcd_with_stream_buffer_limit((size_t)f->stream_buffer) : NULL,
        f->max_conns ? funcd_with_max_connections((unsigned)f->max_conns) : NULL,
        f->access_log ? funcd_with_access_log(f->access_log) : NULL,
        f->edge_auth ? funcd_with_edge_auth_default(f->edge_auth) : NULL,
        f->edge_set ? funcd_with_edge_limits((uint32_t)f->edge_rps, (uint32_t)f->edge_burst,
                                             f->edge_max_body, (uint32_t)f->edge_in_flight)
                    : NULL,
        f->edge_per_client ? funcd_with_edge_limit_per_client(1) : NULL,
        f->otlp_endpoint ? funcd_with_otlp_endpoint(f->otlp_endpoint) : NULL,
        f->node_name ? funcd_with_node_name(f->node_name) : NULL,
        f->node_address ? funcd_with_node_address(f->node_address) : NULL,
        f->egress_dns ? funcd_with_egress_dns_upstream(f->egress_dns) : NULL,
        f->lease_ttl ? funcd_with_lease_ttl(f->lease_ttl) : NULL,
        f->blob_poll ? funcd_with_blob_poll_interval(f->blob_poll) : NULL,
        f->wf_set ? funcd_with_workflow(f->wf_step_timeout, (unsigned)f->wf_retry, f->wf_retention,
                                        f->wf_payload)
                  : NULL,
        f->invocation_retention || f->dlq_retention || f->dlq_max
            ? funcd_with_delivery_retention(f->invocation_retention, f->dlq_retention, f->dlq_max)
            : NULL,
        f->queue_set[0] || f->queue_set[1] || f->queue_set[2]
            ? funcd_with_queue_limits(f->queue_set[0] ? f->queue_limits[0] : UINT64_MAX,
                                      f->queue_set[1] ? f->queue_limits[1] : UINT64_MAX,
                                      f->queue_set[2] ? f->queue_limits[2] : UINT64_MAX)
            : NULL,
        f->queue_anonymous_set ? funcd_with_queue_anonymous_share((unsigned)f->queue_anonymous_share)
                               : NULL,
        f->callback_allow ? funcd_with_callback_allow(f->callback_allow) : NULL,
        f->tls_cert ? funcd_with_tls_cert_files(f->tls_cert, f->tls_key) : NULL,
        /* Kept with the data (a restart serves the same certificate), or in
         * the state directory. */
        f->tls_self_signed ? funcd_with_tls_self_signed(f->data_dir) : NULL,
        funcd_with_logger(NULL, f->level, NULL),
    };
    size_t n = sizeof(opts) / sizeof(opts[0]);
    funcd_option *all[sizeof(opts) / sizeof(opts[0]) + sizeof(lists) / sizeof(lists[0])];
    memcpy(all, opts, sizeof(opts));
    memcpy(all + n, lists, sizeof(lists));
    if (funcd_platform_new_n(&running, all, n + sizeof(lists) / sizeof(lists[0])) < 0) {
        fprintf(stderr, "funcd: %s\n", funcd_error_last()->message);
        return -1;
    }
    return 0;
}

static void announce(const flags *f)
{
    if (f->data_dir)
        fprintf(stderr, "funcd: %s, data directory %s\n", funcd_version(), f->data_dir);
    else
        fprintf(stderr, "funcd: %s, memory substrate (nothing survives a restart)\n",
                funcd_version());
    if (f->no_sandbox)
        fprintf(stderr, "funcd: --no-sandbox: workers run as plain processes; never use it in "
                        "production\n");
    if (f->dev) {
        char cwd[4096];
        fprintf(stderr, "funcd: --dev: token funcd-dev-token is a developer of namespace "
                        "\"default\"; never use --dev in production\n");
        if (getcwd(cwd, sizeof(cwd)))
            fprintf(stderr, "funcd: --dev: spec.source.path may name directories under %s "
                            "(the working directory)\n", cwd);
    } else if (!f->token_file)
        fprintf(stderr, "funcd: no credentials configured: every API call will get 401; "
                        "pass --token-file FILE or --dev\n");
    for (size_t i = 0; i < f->n_roots; i++)
        fprintf(stderr, "funcd: source root %s: spec.source.path may name directories under it\n",
                f->source_roots[i]);
    const char *fp = funcd_platform_tls_fingerprint(running);
    const char *scheme = *fp ? "https://" : "";
    fprintf(stderr, "funcd: control plane listening on %s%s\n", scheme, funcd_platform_addr(running));
    fprintf(stderr, "funcd: data plane listening on %s%s\n", scheme,
            funcd_platform_data_plane_addr(running));
    fprintf(stderr, "funcd: function runner listening on %s%s\n", *fp ? "TLS " : "",
            funcd_platform_fn_runner_addr(running));
    if (*funcd_platform_s3_addr(running))
        fprintf(stderr, "funcd: S3 gateway listening on http://%s\n",
                funcd_platform_s3_addr(running));
    if (*fp)
        fprintf(stderr, "funcd: TLS certificate %s, SHA-256 fingerprint %s\n",
                funcd_platform_tls_cert_file(running), fp);
}

/* glibc gives the free memory at the top of a malloc arena back to the
 * kernel once it passes 128 KiB. Under concurrent requests a gateway thread's
 * arena rises and falls by more than that many times a second, and each page
 * given back is faulted in again on the next rise (the edge's gzip'd answers:
 * ~1 fault per 30 requests, a page fault costing 20 us on paravirtualised
 * machines). The daemon keeps up to 4 MiB free per arena and serves
 * allocations below 2 MiB from the arenas (docs/adr/0065-daemon-malloc-trim.md).
 * Each setting the operator made (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_
 * or its glibc.malloc tunable) wins; other tunables (MALLOC_ARENA_MAX, a test
 * harness's MALLOC_PERTURB_, glibc.cpu.*) leave these two on. */
static int malloc_set_by_operator(const char *env, const char *tunable)
{
    const char *t = getenv("GLIBC_TUNABLES");
    return getenv(env) || (t && strstr(t, tunable));
}

static void tune_malloc(void)
{
    if (!malloc_set_by_operator("MALLOC_MMAP_THRESHOLD_", "glibc.malloc.mmap_threshold="))
        mallopt(M_MMAP_THRESHOLD, 2 << 20);
    if (!malloc_set_by_operator("MALLOC_TRIM_THRESHOLD_", "glibc.malloc.trim_threshold="))
        mallopt(M_TRIM_THRESHOLD, 4 << 20);
}

int main(int argc, char **argv)
{
    tune_malloc();
    flags f = {.level = FUNCD_LOG_INFO, .wf_retention = UINT64_MAX}; /* UINT64_MAX: the default */
    char **config_args, **merged;
    int mergedc;
    if (merge_config(argc, argv, &config_args, &merged, &mergedc) < 0) {
        funcd_config_file_free(config_args);
        return 2;
    }
    int rc = merged ? parse_flags(mergedc, merged, &f) : parse_flags(argc, argv, &f);
    if (rc < 0) {
        char shims_buf[4200];
        const char *shims = f.shims ? f.shims : getenv("FUNCD_SHIM_DIR");
        if (!shims)
            shims = build_tree_shims(shims_buf, sizeof(shims_buf));
        rc = build_platform(&f, shims) < 0 ? 1 : -1;
    }
    if (rc >= 0) {
        free(merged);
        funcd_config_file_free(config_args);
        return rc;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    announce(&f);
    rc = funcd_platform_run(running);
    if (rc < 0)
        fprintf(stderr, "funcd: %s\n", funcd_error_last()->message);
    funcd_platform_free(running);
    free(merged);
    funcd_config_file_free(config_args);
    fprintf(stderr, "funcd: stopped\n");
    return rc < 0 ? 1 : 0;
}
