/*
 * The worker evaluator (Porch's pod executor): the images that FunctionConfig
 * podExecutors name run as warm workers from lib/pool, the same pools the
 * serving side uses.
 *
 * An image, until OCI pulls exist, is a materialized directory:
 * FUNCTIONS_DIR/<spec.image's last path component, without tag or digest>/
 * holding an executable named `function` ("example.com/fns/set-labels:v1"
 * -> FUNCTIONS_DIR/set-labels/function). A worker is the exec shim serving
 * that program (funcd-exec -- DIR/function) on a Unix socket under
 * <state_dir>/fnrun/wN/. An evaluation is one HTTP/1.1 POST of the
 * ResourceList with "X-Funcd-Krm: 1"; the shim runs the program once and
 * answers its stdout, exit code and stderr (see shims/funcd-exec.c).
 *
 * Porch's knobs, and what they mean here:
 *  - timeToLive (default 30m): the pool's idle TTL, which every evaluation
 *    extends. The pool's timer reaps (Porch scans each minute; we scan often).
 *  - maxParallelExecutions (default 1, as Porch's
 *    --max-parallel-pods-per-function): the most workers of the image, as
 *    Porch caps pods per function.
 *  - preferredMaxQueueLength (default 2, as Porch's --max-waitlist-length):
 *    how many evaluations one worker runs at once before the pool starts
 *    another. Porch counts a pod's running and waiting calls as its
 *    "waitlist" and scales up when the shortest one reaches this length; it
 *    never refuses a call, so calls beyond max x this wait in the pool's
 *    queue (QUEUE_LENGTH deep) under their deadline instead of failing.
 *  - one warm worker per podExecutor at start, and when one is added.
 *  - a worker whose connection fails is evicted and the call retried once on
 *    another worker; every wait is bounded by the call's deadline.
 *
 * Threads: everything runs on the platform loop (the store watch only pokes
 * it).
 */
#include "fnrunner/worker.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "api/api.h"
#include "api/internal.h"
#include "funcd/sys/error.h"
#include "http/client.h"
#include "pool/pool.h"
#include "objects/objects.h"
#include "port/store.h"
#include "source/resolver.h"
#include "util/misc.h"
#include "worker/launch.h"

#define DEFAULT_TTL_MS (30ull * 60 * 1000)
#define DEFAULT_MAX_WORKERS 1
#define DEFAULT_PER_WORKER 2
#define QUEUE_LENGTH 1024
#define START_TIMEOUT_MS 10000
#define STOP_GRACE_MS 2000
#define ATTEMPTS 2                     /* a failed worker costs one retry */

#define CONTAINER_OF(ptr, type, member) ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

typedef struct worker_eval worker_eval;

/* What every worker of one image is started with (lib/worker's launch). */
typedef struct launch {
    char *image;   /* the FunctionConfig's spec.image */
    char *program; /* FUNCTIONS_DIR/<name>/function, or the image's program (a path inside it) */
    int pulled;    /* a pulled image (its program is checked when its worker starts) */
    funcd_launch *workers;
} launch;

/* An evaluation waiting for its image to be pulled. */
typedef struct parked {
    worker_eval *we;
    funcd_eval_job *job;
    struct event *timer; /* its deadline */
    struct parked *prev, *next;
} parked;

/* The workers of one podExecutor FunctionConfig running one image: a
 * FunctionConfig has a pool per image digest its requests named. */
typedef struct image_pool {
    worker_eval *we;
    char *config; /* metadata.name */
    char *key;    /* what runs: a pulled image's digest, or "dir:<name>" */
    char *ref;    /* the image a request named that made it */
    char *sig;    /* the spec it was made from (launch_sig) */
    launch *ln;
    funcd_pool *pool;
    funcd_pool_config pc;
    funcd_pool_waiter warm; /* the warm-up's slot request */
    int warming, dropping, seen;
    struct image_pool *next;
} image_pool;

struct worker_eval {
    funcd_evaluator base;
    struct event_base *loop;
    funcd_store *store;
    funcd_workers *workers;
    const funcd_logger *logger;
    char *functions_dir, *shim, *run_dir, *ns, *prefix;
    const char *off; /* why the evaluator finds nothing, or NULL */
    size_t max_message;
    image_pool *pools;
    funcd_store_watch *watch;
    struct event *reconcile_ev; /* the watch pokes it from writers' threads */
    int closed;
    funcd_sources *sources; /* images pulled from registries; may be NULL */
    funcd_pool_budget *budget; /* the node's places for workers (borrowed; pools ref it); NULL: none */
    parked *parked;
    int reconcile_waits;    /* a reconcile waits on a pull (its callback is registered) */
};

/* ---- workers (lib/worker does the rest) ------------------------------- */

static void on_worker_output(funcd_worker_ctx *w, funcd_worker_stream stream, const char *line,
                             size_t len, void *payload)
{
    worker_eval *we = payload;
    funcd_log(we->logger, FUNCD_LOG_DEBUG, "worker %s: %.*s", w->replica,
              (int)len, line);
}

static void on_worker_exited(funcd_worker_ctx *w, int status, const funcd_worker_end *end,
                             void *payload)
{
    worker_eval *we = payload;
    funcd_log(we->logger, FUNCD_LOG_DEBUG, "%s", end->message);
}

static void launch_free(launch *ln)
{
    if (!ln)
        return;
    funcd_launch_unref(ln->workers);
    free(ln->image);
    free(ln->program);
    free(ln);
}

/* Appends the entries of `from` to `env` (holding `n`) whose names are not
 * in it yet; returns the new count. */
static size_t add_env(const char **env, size_t n, const char *const *from)
{
    for (const char *const *p = from; p && *p; p++) {
        size_t len = strcspn(*p, "=");
        int dup = 0;
        for (size_t i = 0; i < n && !dup; i++)
            dup = strncmp(env[i], *p, len) == 0 && env[i][len] == '=';
        if (!dup)
            env[n++] = *p;
    }
    return n;
}

static size_t strv_len(const char *const *v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    return n;
}

/* The workers of `ln->image`: the exec shim running `argv` once per
 * evaluation, with the overrides' env first (the first of two equal names
 * counts), then `env`, then what the function runner tells every worker. */
static int launch_workers(worker_eval *we, launch *ln, funcd_launch_spec *spec,
                          const char *const *argv, const char *const *env,
                          funcd_eval_overrides *ov)
{
    size_t n_args = strv_len(argv), n_env = strv_len(env), n_ov = strv_len((const char *const *)ov->env);
    const char **args = calloc(n_args + 3, sizeof(char *));
    const char **all = calloc(n_ov + n_env + 3, sizeof(char *));
    char function[160], ns[160];
    snprintf(function, sizeof(function), "FUNCD_FUNCTION=%s", ln->image);
    snprintf(ns, sizeof(ns), "FUNCD_NAMESPACE=%s", we->ns);
    int rc = FUNCD_ENOMEM;
    if (args && all) {
        args[0] = spec->rootfs ? FUNCD_IMAGE_EXEC_SHIM : we->shim;
        args[1] = "--";
        memcpy(args + 2, argv, n_args * sizeof(char *));
        size_t k = add_env(all, 0, (const char *const *)ov->env);
        k = add_env(all, k, env);
        all[k] = function;
        all[k + 1] = ns;
        spec->name = ln->image;
        spec->argv = args;
        spec->env = all;
        spec->limits = ov->limits;
        spec->network = FUNCD_WORKER_NETWORK_NONE;
        spec->memory_field = "podExecutor.templateOverrides resources.limits.memory";
        spec->stop_grace_ms = STOP_GRACE_MS;
        spec->keep_probe_connection = 1; /* the first evaluation needs no connect */
        funcd_launch_hooks hooks = {.output = on_worker_output, .exited = on_worker_exited,
                                    .payload = we};
        rc = funcd_launch_new(&ln->workers, we->workers, spec, &hooks);
    }
    free(args);
    free(all);
    return rc;
}

/* ---- image pools (one per podExecutor FunctionConfig) ------------------- */

static unsigned uint_at(const cJSON *obj, const char *key, unsigned dflt)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(n) && n->valuedouble >= 1 ? (unsigned)n->valuedouble : dflt;
}

static funcd_pool_config pool_config(const cJSON *pod, funcd_pool_budget *budget)
{
    funcd_pool_config c = {
        .budget = budget,
        .min_workers = 0, /* the warm-up is one use, then the TTL decides */
        .max_workers = uint_at(pod, "maxParallelExecutions", DEFAULT_MAX_WORKERS),
        .concurrency = uint_at(pod, "preferredMaxQueueLength", DEFAULT_PER_WORKER),
        .queue_length = QUEUE_LENGTH,
        .idle_ms = DEFAULT_TTL_MS,
        .start_timeout_ms = START_TIMEOUT_MS,
    };
    const char *ttl = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pod, "timeToLive"));
    uint64_t ms;
    if (ttl && funcd_parse_duration_ms(ttl, &ms) == 0 && ms > 0)
        c.idle_ms = ms;
    return c;
}

static int same_config(const funcd_pool_config *a, const funcd_pool_config *b)
{
    return a->min_workers == b->min_workers && a->max_workers == b->max_workers &&
           a->concurrency == b->concurrency && a->queue_length == b->queue_length &&
           a->idle_ms == b->idle_ms && a->start_timeout_ms == b->start_timeout_ms &&
           a->budget == b->budget;
}

/* The directory name of an image: its last path component without a tag or
 * digest. 0, or -1 when that is no usable name. */
static int image_dir_name(const char *image, char *out, size_t len)
{
    const char *slash = strrchr(image, '/');
    const char *name = slash ? slash + 1 : image;
    size_t n = strcspn(name, ":@");
    if (n == 0 || n >= len || strncmp(name, ".", n) == 0 || strncmp(name, "..", n) == 0)
        return -1; /* "." and ".." would leave the functions directory */
    memcpy(out, name, n);
    out[n] = '\0';
    return 0;
}

static launch *launch_alloc(const char *image)
{
    launch *ln = calloc(1, sizeof(*ln));
    if (ln && !(ln->image = funcd_strdup(image))) {
        free(ln);
        return NULL;
    }
    return ln;
}

/* The launch of FUNCTIONS_DIR/<name>/function. What a sandboxed worker
 * sees: the function and the shim with their host owners (the operator's
 * --functions-dir). */
static launch *launch_new(worker_eval *we, const char *image, const char *name,
                          funcd_eval_overrides *ov)
{
    launch *ln = launch_alloc(image);
    char *dir = NULL;
    if (!ln || asprintf(&dir, "%s/%s", we->functions_dir, name) < 0 ||
        asprintf(&ln->program, "%s/function", dir) < 0) {
        free(dir);
        launch_free(ln);
        return NULL;
    }
    const char *const argv[] = {ln->program, NULL};
    const funcd_worker_bind binds[] = {{dir, NULL, 0, 0}, {we->shim, NULL, 0, 0}};
    funcd_launch_spec spec = {.cwd = dir, .binds = binds, .n_binds = 2};
    int rc = launch_workers(we, ln, &spec, argv, funcd_eval_default_env, ov);
    free(dir);
    if (rc < 0) {
        launch_free(ln);
        return NULL;
    }
    return ln;
}

/* The launch of a pulled image: the static exec shim, copied into the
 * worker's runtime directory, runs its entrypoint and cmd in its root. */
static launch *launch_new_image(worker_eval *we, const char *image, const funcd_source_result *r,
                                funcd_eval_overrides *ov)
{
    launch *ln = launch_alloc(image);
    size_t n = strv_len((const char *const *)r->entrypoint) +
               strv_len((const char *const *)r->cmd);
    const char **argv = calloc(n + 1, sizeof(char *));
    char *shim = NULL;
    if (!ln || !argv || !n || asprintf(&shim, "%s-static", we->shim) < 0) {
        free(argv);
        launch_free(ln);
        return NULL;
    }
    n = 0;
    for (char **p = r->entrypoint; p && *p; p++)
        argv[n++] = *p;
    for (char **p = r->cmd; p && *p; p++)
        argv[n++] = *p;
    ln->pulled = 1;
    ln->program = funcd_strdup(argv[0]);
    funcd_launch_spec spec = {
        .cwd = r->working_dir && *r->working_dir ? r->working_dir : "/",
        .rootfs = r->dir,
        .exec_shim = shim,
    };
    int rc = ln->program ? launch_workers(we, ln, &spec, argv, (const char *const *)r->env, ov)
                         : FUNCD_ENOMEM;
    free(argv);
    free(shim);
    if (rc < 0) {
        launch_free(ln);
        return NULL;
    }
    return ln;
}

static int executable_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

static int program_ok(const launch *ln)
{
    /* A pulled image names its program; a bad one fails its worker's start. */
    return ln->pulled || executable_file(ln->program);
}

static void on_warm_granted(funcd_pool_waiter *wt, funcd_pool_worker *w, const char *error)
{
    image_pool *ip = CONTAINER_OF(wt, image_pool, warm);
    ip->warming = 0;
    if (w) { /* ready: give it back at once, which starts its TTL */
        funcd_pool_release(funcd_pool_worker_pool(w), w, 0);
        return;
    }
    if (!ip->dropping)
        funcd_log(ip->we->logger, FUNCD_LOG_WARN, "warming a worker for %s failed: %s",
                  ip->ref, error ? error : "unknown error");
}

static void warm(worker_eval *we, image_pool *ip)
{
    if (ip->warming)
        return;
    if (!program_ok(ip->ln)) {
        funcd_log(we->logger, FUNCD_LOG_WARN, "FunctionConfig %s: %s is not an executable file; "
                  "no worker is warmed for %s", ip->config, ip->ln->program, ip->ref);
        return;
    }
    funcd_pool_worker *w = NULL;
    ip->warm.granted = on_warm_granted;
    funcd_pool_outcome rc = funcd_pool_acquire(ip->pool, &ip->warm, &w);
    if (rc == FUNCD_POOL_GRANTED)
        funcd_pool_release(ip->pool, w, 0);
    else if (rc == FUNCD_POOL_QUEUED)
        ip->warming = 1;
}

/* Closes the pool (its workers drain and exit on their own). */
static void drop_pool(image_pool *ip, const char *why)
{
    ip->dropping = 1;
    if (ip->pool)
        funcd_pool_close(ip->pool, why);
    ip->pool = NULL;
    ip->dropping = 0;
    launch_free(ip->ln);
    ip->ln = NULL;
}

static void image_pool_free(image_pool *ip, const char *why)
{
    drop_pool(ip, why);
    free(ip->config);
    free(ip->key);
    free(ip->ref);
    free(ip->sig);
    free(ip);
}

static image_pool *find_pool(worker_eval *we, const char *config, const char *key)
{
    for (image_pool *ip = we->pools; ip; ip = ip->next)
        if (strcmp(ip->config, config) == 0 && strcmp(ip->key, key) == 0)
            return ip;
    return NULL;
}

/* A fresh pool for `ln` (whose reference moves to `ip`). */
static int replace_pool(worker_eval *we, image_pool *ip, launch *ln, const funcd_pool_config *pc)
{
    funcd_pool_ops ops = funcd_launch_pool_ops(ln->workers);
    funcd_pool *pool;
    if (funcd_pool_new(&pool, we->loop, pc, &ops) < 0) {
        launch_free(ln);
        return FUNCD_ENOMEM;
    }
    drop_pool(ip, "the FunctionConfig changed");
    ip->pool = pool;
    ip->ln = ln;
    ip->pc = *pc;
    return 0;
}

/* "registry.example.com/fns/x:1" or "127.0.0.1:5000/x": worth a pull; a
 * bare "set-labels:v1" only ever means the functions directory. */
static int names_registry(const char *image)
{
    const char *slash = strchr(image, '/');
    if (!slash)
        return 0;
    size_t n = (size_t)(slash - image);
    return memchr(image, '.', n) || memchr(image, ':', n) ||
           (n == 9 && strncmp(image, "localhost", 9) == 0);
}

/* What the workers of one requested image run. */
typedef struct resolved {
    char key[96];           /* a pulled image's digest, or "dir:<name>" */
    int pulled;             /* `img` is filled */
    funcd_source_result img;
} resolved;

/*
 * What `ref` (the image a request names, PREFIX/IMAGE:TAG) runs: the
 * directory FUNCTIONS_DIR/<name> when it holds a program (or `ref` could not
 * come from a registry anyway), else the image `ref` pulled from its
 * registry, tag resolved to digest. 0; or -1 with `why` filled and
 * `*pending` set while the pull is under way (`cb(payload)` runs when it
 * ends).
 */
static int resolve_ref(worker_eval *we, const char *ref, const char *name, resolved *out,
                       int *pending, funcd_sources_cb cb, void *payload, char *why,
                       size_t why_len)
{
    memset(out, 0, sizeof(*out));
    *pending = 0;
    if (we->functions_dir) {
        char program[1024];
        snprintf(program, sizeof(program), "%s/%s/function", we->functions_dir, name);
        if (executable_file(program) || !we->sources || !names_registry(ref)) {
            snprintf(out->key, sizeof(out->key), "dir:%s", name);
            return 0;
        }
    }
    char msg[512];
    int rc = funcd_sources_image(we->sources, we->ns, ref, &out->img, msg, sizeof(msg), cb,
                                 payload);
    if (rc == FUNCD_SOURCE_PENDING) {
        *pending = 1;
        snprintf(why, why_len, "%s", msg);
        return -1;
    }
    if (rc < 0) {
        snprintf(why, why_len, "%s: %s", ref, msg);
        return -1;
    }
    out->pulled = 1;
    snprintf(out->key, sizeof(out->key), "%s", out->img.resolved);
    return 0;
}

/* What of a FunctionConfig's spec its workers are made from: when it
 * changes, they are replaced (the pool knobs only reconfigure them). */
static char *launch_sig(const cJSON *spec)
{
    const cJSON *pod = cJSON_GetObjectItemCaseSensitive(spec, "podExecutor");
    static const char *const from_spec[] = {"image", "prefixes"};
    static const char *const from_pod[] = {"tags", "templateOverrides"};
    cJSON *sig = cJSON_CreateObject();
    for (size_t i = 0; sig && i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(spec, from_spec[i]);
        if (v)
            cJSON_AddItemReferenceToObject(sig, from_spec[i], (cJSON *)v);
        v = cJSON_GetObjectItemCaseSensitive(pod, from_pod[i]);
        if (v)
            cJSON_AddItemReferenceToObject(sig, from_pod[i], (cJSON *)v);
    }
    char *text = sig ? cJSON_PrintUnformatted(sig) : NULL;
    cJSON_Delete(sig);
    return text;
}

/* Drops the pools of `config` that the image `ref` resolving to `key`
 * supersedes: the one of `key` (made from another spec), and the one `ref`
 * made before it moved to another digest. Their workers drain. */
static void drop_superseded(worker_eval *we, const char *config, const char *key,
                            const char *ref)
{
    for (image_pool **pp = &we->pools; *pp;) {
        image_pool *ip = *pp;
        if (strcmp(ip->config, config) != 0 ||
            (strcmp(ip->key, key) != 0 && strcmp(ip->ref, ref) != 0)) {
            pp = &ip->next;
            continue;
        }
        *pp = ip->next;
        image_pool_free(ip, "the FunctionConfig or its image changed");
    }
}

static image_pool *new_image_pool(worker_eval *we, const char *config, const char *key,
                                  const char *ref, const char *sig, launch *ln,
                                  const funcd_pool_config *pc)
{
    image_pool *ip = calloc(1, sizeof(*ip));
    if (ip)
        ip->we = we;
    if (!ip || !(ip->config = funcd_strdup(config)) || !(ip->key = funcd_strdup(key)) ||
        !(ip->ref = funcd_strdup(ref)) || !(ip->sig = funcd_strdup(sig))) {
        launch_free(ln);
        if (ip)
            image_pool_free(ip, "out of memory");
        return NULL;
    }
    if (replace_pool(we, ip, ln, pc) < 0) { /* it let go of `ln` */
        image_pool_free(ip, "out of memory");
        return NULL;
    }
    ip->next = we->pools;
    we->pools = ip;
    return ip;
}

/*
 * The pool of the podExecutor FunctionConfig `fc` for the image `ref` (the
 * one a request names, PREFIX/IMAGE:TAG, or the config's warm image),
 * brought to its spec: found by the digest `ref` resolves to, or created
 * (and warmed, with `warm_new`), or given new limits. NULL with `why` filled
 * when it cannot serve, and `*pending` set while its image is being pulled
 * (then `cb(payload)` runs once it is done).
 */
static image_pool *pool_for(worker_eval *we, const cJSON *fc, const char *ref, int warm_new,
                            int *pending, funcd_sources_cb cb, void *payload, char *why,
                            size_t why_len)
{
    *pending = 0;
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(fc, "metadata");
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(fc, "spec");
    const char *config = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, "name"));
    const char *image = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "image"));
    const cJSON *pod = cJSON_GetObjectItemCaseSensitive(spec, "podExecutor");
    char name[256];
    if (!config || !image || !ref || !cJSON_IsObject(pod) ||
        image_dir_name(ref, name, sizeof(name)) < 0) {
        snprintf(why, why_len, "FunctionConfig %s: image %s names no function directory",
                 config ? config : "?", ref ? ref : image ? image : "(none)");
        return NULL;
    }
    resolved rs;
    if (resolve_ref(we, ref, name, &rs, pending, cb, payload, why, why_len) < 0)
        return NULL;
    char *sig = launch_sig(spec);
    funcd_eval_overrides ov = {0};
    image_pool *ip = sig ? find_pool(we, config, rs.key) : NULL;
    funcd_pool_config pc = pool_config(pod, we->budget);
    if (ip && strcmp(ip->sig, sig) == 0) {
        if (!same_config(&ip->pc, &pc)) {
            ip->pc = pc;
            funcd_pool_configure(ip->pool, &pc);
        }
        goto out;
    }
    ip = NULL;
    launch *ln = NULL;
    if (sig && funcd_eval_overrides_parse(
                   cJSON_GetObjectItemCaseSensitive(pod, "templateOverrides"), &ov) == 0)
        ln = rs.pulled ? launch_new_image(we, image, &rs.img, &ov)
                       : launch_new(we, image, name, &ov);
    if (!ln)
        goto oom;
    drop_superseded(we, config, rs.key, ref);
    if (!(ip = new_image_pool(we, config, rs.key, ref, sig, ln, &pc)))
        goto oom;
    if (warm_new)
        warm(we, ip);
    goto out;
oom:
    snprintf(why, why_len, "out of memory preparing the workers of %s", ref);
out:
    funcd_eval_overrides_clear(&ov);
    funcd_source_result_clear(&rs.img);
    free(sig);
    return ip;
}

typedef struct config_list {
    cJSON **v;
    uint64_t *rev; /* each one's revision in the store */
    size_t n, cap;
} config_list;

static int collect_config(const funcd_store_kv *kv, void *payload)
{
    config_list *l = payload;
    cJSON *obj = cJSON_ParseWithLength(kv->value, kv->len);
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(obj, "spec");
    if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(spec, "podExecutor"))) {
        cJSON_Delete(obj);
        return 0;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        cJSON **v = realloc(l->v, cap * sizeof(*v));
        if (v)
            l->v = v;
        uint64_t *rev = v ? realloc(l->rev, cap * sizeof(*rev)) : NULL;
        if (!rev) {
            cJSON_Delete(obj);
            return 1;
        }
        l->rev = rev;
        l->cap = cap;
    }
    l->rev[l->n] = kv->revision;
    l->v[l->n++] = obj;
    return 0;
}

/* An image a FunctionConfig names was pulled (or failed): look again. */
static void on_config_image(void *payload)
{
    worker_eval *we = payload;
    event_active(we->reconcile_ev, 0, 0);
}

/* status.ignoredOverrides of a podExecutor FunctionConfig: what of its
 * templateOverrides its workers do not honour. Written only when it
 * changes, so the write's own store event changes nothing more. */
static void put_status(worker_eval *we, const cJSON *fc, uint64_t revision)
{
    const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(fc, "spec"),
                                         "podExecutor"),
        "templateOverrides");
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(fc, "status");
    const cJSON *had = cJSON_GetObjectItemCaseSensitive(status, "ignoredOverrides");
    const char *name = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(fc, "metadata"), "name"));
    const funcd_kind *kind = funcd_kind_by_plural("functionconfigs");
    funcd_eval_overrides ov;
    if (!name || !kind || (!tmpl && !had) || funcd_eval_overrides_parse(tmpl, &ov) < 0)
        return;
    if (tmpl ? !had || !cJSON_Compare(had, ov.ignored, 1) : had != NULL) {
        cJSON *next = cJSON_IsObject(status) ? cJSON_Duplicate(status, 1) : cJSON_CreateObject();
        cJSON_DeleteItemFromObjectCaseSensitive(next, "ignoredOverrides");
        if (tmpl && next) {
            cJSON_AddItemToObject(next, "ignoredOverrides", ov.ignored);
            ov.ignored = NULL;
        }
        if (next && funcd_objects_put_status(we->store, kind, we->ns, name, revision, next) < 0 &&
            funcd_error_last()->code != FUNCD_ECONFLICT) /* a newer version comes our way */
            funcd_log(we->logger, FUNCD_LOG_WARN, "FunctionConfig %s: cannot write its status: %s",
                      name, funcd_error_last()->message);
        cJSON_Delete(next);
    }
    funcd_eval_overrides_clear(&ov);
}

/* Brings the pools to the podExecutor FunctionConfigs in the store: new ones
 * start warm (with their first prefix and tag), changed ones are
 * reconfigured or replaced, deleted ones drained. */
static void reconcile(worker_eval *we)
{
    if (we->closed || we->off || !we->store)
        return;
    funcd_sources_cancel(we->sources, we); /* registered again below if still pulling */
    config_list l = {0};
    if (funcd_port_store_list(we->store, we->prefix, collect_config, &l, NULL) < 0) {
        funcd_log(we->logger, FUNCD_LOG_WARN, "cannot list FunctionConfigs for warm workers: %s",
                  funcd_error_last()->message);
        for (size_t i = 0; i < l.n; i++)
            cJSON_Delete(l.v[i]);
        free(l.v);
        free(l.rev);
        return;
    }
    for (image_pool *ip = we->pools; ip; ip = ip->next)
        ip->seen = 0;
    for (size_t i = 0; i < l.n; i++) {
        char why[512];
        int pending;
        const cJSON *spec = cJSON_GetObjectItemCaseSensitive(l.v[i], "spec");
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(l.v[i], "metadata"), "name"));
        char *ref = funcd_eval_warm_image(spec);
        image_pool *warmed = pool_for(we, l.v[i], ref, 1, &pending, on_config_image, we, why,
                                      sizeof(why));
        if (!warmed && !pending)
            funcd_log(we->logger, FUNCD_LOG_WARN, "%s", why);
        char *sig = launch_sig(spec);
        funcd_pool_config pc =
            pool_config(cJSON_GetObjectItemCaseSensitive(spec, "podExecutor"), we->budget);
        for (image_pool *ip = we->pools; ip && name; ip = ip->next) {
            if (strcmp(ip->config, name) != 0)
                continue;
            /* Pools of other tags live on while the spec is the same; while a
             * new image is pulled the old pools serve. */
            if (ip == warmed || pending || (sig && strcmp(ip->sig, sig) == 0))
                ip->seen = 1;
            if (ip->seen && sig && strcmp(ip->sig, sig) == 0 && !same_config(&ip->pc, &pc)) {
                ip->pc = pc;
                funcd_pool_configure(ip->pool, &pc);
            }
        }
        put_status(we, l.v[i], l.rev[i]);
        free(sig);
        free(ref);
        cJSON_Delete(l.v[i]);
    }
    free(l.v);
    free(l.rev);
    for (image_pool **pp = &we->pools; *pp;) {
        image_pool *ip = *pp;
        if (ip->seen) {
            pp = &ip->next;
            continue;
        }
        *pp = ip->next;
        image_pool_free(ip, "the FunctionConfig was deleted");
    }
}

static void on_reconcile(evutil_socket_t fd, short what, void *arg)
{
    reconcile(arg);
}

/* Any thread, under the store's locks: only poke the loop. */
static void on_config_event(const funcd_store_event *ev, void *payload)
{
    worker_eval *we = payload;
    event_active(we->reconcile_ev, 0, 0);
}

/* ---- evaluations ------------------------------------------------------ */

typedef struct wcall {
    worker_eval *we;
    funcd_eval_job *job;
    funcd_pool *pool; /* a reference */
    funcd_pool_waiter waiter;
    funcd_pool_worker *slot;
    funcd_http_call *conn;
    struct event *timer;
    int64_t timeout_ms;
    int attempts;
    size_t head_len;
    char head[256];
} wcall;

static void call_free(wcall *c)
{
    if (c->timer)
        event_free(c->timer);
    funcd_pool_unref(c->pool);
    free(c);
}

/* Lets go of the queue position, the connection and the slot. */
static void call_detach(wcall *c, int evict)
{
    /* On the loop a grant is delivered at once, so a call without a slot
     * is at most queued, never about to be granted. */
    if (!c->slot)
        funcd_pool_cancel(c->pool, &c->waiter);
    funcd_http_cancel(c->conn);
    c->conn = NULL;
    funcd_pool_worker *w = c->slot;
    c->slot = NULL;
    if (w)
        funcd_pool_release(c->pool, w, evict);
}

static void call_finish(wcall *c)
{
    funcd_eval_job *job = c->job;
    call_detach(c, 0);
    call_free(c);
    funcd_eval_finish(job);
}

static void call_fail(wcall *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void call_fail(wcall *c, int status, const char *fmt, ...)
{
    funcd_eval_result *res = &c->job->res;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->message, sizeof(res->message), fmt, ap);
    va_end(ap);
    res->status = status;
    call_finish(c);
}

/* The shim's X-Funcd-Stderr (padded standard base64) into `out`; nothing
 * when it is not base64. */
static void b64_decode(funcd_buf *out, const char *s)
{
    size_t n;
    if (!s || funcd__api_base64_decoded_len(s, strlen(s), &n) < 0 || funcd_buf_grow(out, n) < 0)
        return;
    funcd__api_base64_decode(s, strlen(s), (unsigned char *)out->data + out->len);
    out->len += n;
    out->data[out->len] = '\0';
}

/* The shim's answer becomes the KRM result. */
static void take_answer(wcall *c, funcd_http_response *resp)
{
    funcd_eval_result *res = &c->job->res;
    const char *name = funcd_eval_job_name(c->job);
    const char *exit_code = funcd_http_response_header(resp, "x-funcd-exit-code");
    const char *stderr_b64 = funcd_http_response_header(resp, "x-funcd-stderr");
    const char *error = funcd_http_response_header(resp, "x-funcd-error");
    char what[1024];
    if (resp->status != 200 || !exit_code) {
        res->status = FUNCD_EVAL_INTERNAL;
        snprintf(res->message, sizeof(res->message), "the worker for %s answered HTTP %d%s: "
                 "%.300s", name, resp->status, exit_code ? "" : " without "
                 "X-Funcd-Exit-Code (is its funcd-exec older than the KRM mode?)",
                 resp->body.data ? resp->body.data : "");
        return;
    }
    funcd_buf_swap_in(&res->output, &resp->body);
    funcd_buf_reset(&res->log);
    b64_decode(&res->log, stderr_b64);
    res->status = FUNCD_EVAL_OK;
    int code = atoi(exit_code);
    if (error && *error) {
        snprintf(what, sizeof(what), "function %s could not run: %s", name, error);
        funcd_eval_set_failure(res, what);
    } else if (code != 0) {
        snprintf(what, sizeof(what), "function %s exited with status %d", name, code);
        funcd_eval_set_failure(res, what);
    }
}

static void acquire(wcall *c);

/* The worker could not be reached or broke off: evict it, and try once more
 * on another (a KRM function's output depends on its input alone). The
 * caller is told how the worker ended when its end is known. */
static void attempt_failed(wcall *c, const char *why)
{
    char reason[600];
    const funcd_worker_end *end = c->slot ? funcd_worker_ctx_end(funcd_worker_ctx_of(c->slot))
                                          : NULL;
    snprintf(reason, sizeof(reason), "%s%s%s", why, end ? "; " : "", end ? end->message : "");
    call_detach(c, 1);
    if (++c->attempts < ATTEMPTS) {
        funcd_log(c->we->logger, FUNCD_LOG_WARN, "a worker of %s failed (%s); retrying on "
                  "another", funcd_eval_job_name(c->job), reason);
        acquire(c);
        return;
    }
    call_fail(c, FUNCD_EVAL_UNAVAILABLE, "the workers of %s failed %d times; last: %s",
              funcd_eval_job_name(c->job), c->attempts, reason);
}

static void on_answer(funcd_http_call *hc, funcd_http_outcome outcome, funcd_http_response *resp,
                      const char *error, void *arg)
{
    wcall *c = arg;
    c->conn = NULL; /* the client keeps or closes it once this returns */
    if (outcome == FUNCD_HTTP_ANSWERED) {
        take_answer(c, resp);
        call_finish(c);
        return;
    }
    if (outcome == FUNCD_HTTP_TOO_LARGE) {
        call_fail(c, FUNCD_EVAL_RESOURCE_EXHAUSTED, "function %s wrote more than %zu bytes (the "
                  "message limit)", funcd_eval_job_name(c->job), c->we->max_message);
        return;
    }
    attempt_failed(c, error);
}

static void send_to(wcall *c, funcd_pool_worker *w)
{
    c->slot = w;
    funcd_worker_ctx *wc = funcd_worker_ctx_of(w);
    funcd_http_peer *peer = funcd_worker_ctx_peer(wc);
    c->conn = peer ? funcd_http_send(peer, c->head, c->head_len, c->job->req.rl,
                                     c->job->req.rl_len, c->we->max_message, on_answer, c)
                   : NULL;
    if (!c->conn) {
        char why[300];
        snprintf(why, sizeof(why), "cannot connect to worker %s: %s",
                 wc->replica, peer ? strerror(errno) : "it exited");
        attempt_failed(c, why);
    }
}

static void on_granted(funcd_pool_waiter *wt, funcd_pool_worker *w, const char *error)
{
    wcall *c = CONTAINER_OF(wt, wcall, waiter);
    if (w)
        send_to(c, w);
    else
        call_fail(c, FUNCD_EVAL_UNAVAILABLE, "no worker for %s could serve: %s",
                  funcd_eval_job_name(c->job), error ? error : "unknown error");
}

static void acquire(wcall *c)
{
    funcd_pool_worker *w = NULL;
    c->waiter.granted = on_granted;
    funcd_pool_outcome rc = funcd_pool_acquire(c->pool, &c->waiter, &w);
    if (rc == FUNCD_POOL_GRANTED)
        send_to(c, w);
    else if (rc == FUNCD_POOL_FULL)
        call_fail(c, FUNCD_EVAL_RESOURCE_EXHAUSTED, "every worker of %s is busy and %d "
                  "evaluations already wait", funcd_eval_job_name(c->job), QUEUE_LENGTH);
    else if (rc == FUNCD_POOL_CLOSED)
        call_fail(c, FUNCD_EVAL_UNAVAILABLE, "the workers of %s were shut down",
                  funcd_eval_job_name(c->job));
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    wcall *c = arg;
    const char *name = funcd_eval_job_name(c->job);
    if (c->slot) /* dropping the connection makes the shim kill the function */
        call_fail(c, FUNCD_EVAL_DEADLINE_EXCEEDED, "function %s did not finish within %lld ms "
                  "and was killed", name, (long long)c->timeout_ms);
    else
        call_fail(c, FUNCD_EVAL_DEADLINE_EXCEEDED, "no worker of %s was free within %lld ms",
                  name, (long long)c->timeout_ms);
}

static void worker_cancel(funcd_eval_job *job)
{
    wcall *c = job->state;
    call_detach(c, 0);
    call_free(c);
}

static void worker_evaluate(funcd_evaluator *ev, funcd_eval_job *job);

static void unpark(parked *pk)
{
    worker_eval *we = pk->we;
    if (pk->prev)
        pk->prev->next = pk->next;
    else
        we->parked = pk->next;
    if (pk->next)
        pk->next->prev = pk->prev;
    if (pk->timer)
        event_free(pk->timer);
    funcd_sources_cancel(we->sources, pk);
    free(pk);
}

/* The pull ended: evaluate again (the pool exists now, or the error shows). */
static void on_image_pulled(void *payload)
{
    parked *pk = payload;
    worker_eval *we = pk->we;
    funcd_eval_job *job = pk->job;
    unpark(pk);
    worker_evaluate(&we->base, job);
}

static void on_park_deadline(evutil_socket_t fd, short what, void *arg)
{
    parked *pk = arg;
    funcd_eval_job *job = pk->job;
    unpark(pk);
    funcd_eval_finishf(job, FUNCD_EVAL_DEADLINE_EXCEEDED, "the deadline passed while pulling %s",
                       job->req.image);
}

static void park(worker_eval *we, parked *pk, funcd_eval_job *job)
{
    pk->we = we;
    pk->job = job;
    pk->next = we->parked;
    if (we->parked)
        we->parked->prev = pk;
    we->parked = pk;
    int64_t now = funcd_mono_ms();
    int64_t deadline = job->req.deadline_ms ? job->req.deadline_ms
                                            : now + FUNCD_EVAL_DEFAULT_TIMEOUT_MS;
    int64_t wait = deadline > now ? deadline - now : 0;
    struct timeval tv = {(time_t)(wait / 1000), (suseconds_t)(wait % 1000) * 1000};
    if ((pk->timer = evtimer_new(we->loop, on_park_deadline, pk)))
        evtimer_add(pk->timer, &tv);
}

/* find_pool_for: the image is being pulled; the job waits for it. */
#define EVAL_PULLING (-1000)

/* The pool that serves the job's image, or a status with the message set.
 * EVAL_PULLING: `pk` is registered to hear when the pull ends. */
static int find_pool_for(worker_eval *we, funcd_eval_job *job, parked *pk, image_pool **out)
{
    funcd_eval_result *res = &job->res;
    *out = NULL;
    if (we->off) {
        snprintf(res->message, sizeof(res->message), "%s", we->off);
        return FUNCD_EVAL_NOT_FOUND;
    }
    if (we->closed) {
        snprintf(res->message, sizeof(res->message), "the warm workers were shut down");
        return FUNCD_EVAL_UNAVAILABLE;
    }
    if (!job->req.image || !*job->req.image) {
        snprintf(res->message, sizeof(res->message), "no image given");
        return FUNCD_EVAL_NOT_FOUND;
    }
    cJSON *fc = NULL;
    if (funcd_eval_find_config(we->store, we->ns, job->req.image, "podExecutor", &fc) < 0) {
        snprintf(res->message, sizeof(res->message), "%s", funcd_error_last()->message);
        return FUNCD_EVAL_NOT_FOUND;
    }
    int pending;
    *out = pool_for(we, fc, job->req.image, 0, &pending, on_image_pulled, pk, res->message,
                    sizeof(res->message));
    cJSON_Delete(fc);
    if (!*out && pending)
        return EVAL_PULLING;
    if (!*out)
        return FUNCD_EVAL_NOT_FOUND;
    if (!program_ok((*out)->ln)) {
        snprintf(res->message, sizeof(res->message), "%s runs as a warm worker but %s is not an "
                 "executable file; materialize the image there", job->req.image,
                 (*out)->ln->program);
        return FUNCD_EVAL_NOT_FOUND;
    }
    return FUNCD_EVAL_OK;
}

static void worker_evaluate(funcd_evaluator *ev, funcd_eval_job *job)
{
    worker_eval *we = (worker_eval *)ev;
    image_pool *ip;
    parked *pk = calloc(1, sizeof(*pk));
    if (!pk) {
        funcd_eval_finishf(job, FUNCD_EVAL_INTERNAL, "out of memory evaluating %s",
                           funcd_eval_job_name(job));
        return;
    }
    int status = find_pool_for(we, job, pk, &ip);
    if (status == EVAL_PULLING) {
        park(we, pk, job);
        return;
    }
    free(pk);
    if (status != FUNCD_EVAL_OK) {
        job->res.status = status;
        funcd_eval_finish(job);
        return;
    }
    int64_t now = funcd_mono_ms();
    int64_t deadline = job->req.deadline_ms ? job->req.deadline_ms
                                            : now + FUNCD_EVAL_DEFAULT_TIMEOUT_MS;
    if (deadline <= now) {
        funcd_eval_finishf(job, FUNCD_EVAL_DEADLINE_EXCEEDED, "the deadline passed before %s ran",
                           funcd_eval_job_name(job));
        return;
    }
    wcall *c = calloc(1, sizeof(*c));
    if (c)
        c->timer = evtimer_new(we->loop, on_deadline, c);
    if (!c || !c->timer) {
        free(c);
        funcd_eval_finishf(job, FUNCD_EVAL_INTERNAL, "out of memory evaluating %s",
                           funcd_eval_job_name(job));
        return;
    }
    c->we = we;
    c->job = job;
    c->pool = ip->pool;
    funcd_pool_ref(c->pool);
    c->timeout_ms = deadline - now;
    char id[37];
    funcd_uuid4(id);
    c->head_len = (size_t)snprintf(c->head, sizeof(c->head),
                                   "POST / HTTP/1.1\r\nHost: worker\r\nContent-Type: "
                                   "application/octet-stream\r\nContent-Length: %zu\r\n"
                                   "X-Funcd-Krm: 1\r\nX-Funcd-Invocation-Id: %s\r\n\r\n",
                                   job->req.rl_len, id);
    struct timeval tv = {c->timeout_ms / 1000, (c->timeout_ms % 1000) * 1000};
    evtimer_add(c->timer, &tv);
    job->state = c;
    job->cancel = worker_cancel;
    acquire(c);
}

/* ---- the evaluator ---------------------------------------------------- */

static int worker_start(funcd_evaluator *ev)
{
    worker_eval *we = (worker_eval *)ev;
    if (we->off || !we->store || we->watch)
        return 0;
    /* Watch first: a change after it re-lists, one before it is listed. */
    if (funcd_port_store_watch(we->store, we->prefix, funcd_port_store_revision(we->store),
                               on_config_event, we, &we->watch) < 0) {
        funcd_log(we->logger, FUNCD_LOG_WARN, "cannot watch FunctionConfigs (%s); warm workers "
                  "follow them only when evaluated", funcd_error_last()->message);
        we->watch = NULL;
    }
    reconcile(we);
    return 0;
}

static void worker_close(funcd_evaluator *ev)
{
    worker_eval *we = (worker_eval *)ev;
    if (we->closed)
        return;
    we->closed = 1;
    if (we->watch)
        funcd_port_store_unwatch(we->store, we->watch);
    we->watch = NULL;
    if (we->reconcile_ev)
        event_del(we->reconcile_ev);
    funcd_sources_cancel(we->sources, we);
    while (we->parked) {
        funcd_eval_job *job = we->parked->job;
        unpark(we->parked);
        funcd_eval_finishf(job, FUNCD_EVAL_UNAVAILABLE, "the function runner is shutting down");
    }
    while (we->pools) {
        image_pool *ip = we->pools;
        we->pools = ip->next;
        image_pool_free(ip, "the function runner is shutting down");
    }
}

static unsigned worker_live(const funcd_evaluator *ev)
{
    return funcd_workers_live(((const worker_eval *)ev)->workers);
}

static void worker_free(funcd_evaluator *ev)
{
    worker_eval *we = (worker_eval *)ev;
    worker_close(ev);
    /* Workers still draining are killed now, so nothing outlives us. */
    funcd_workers_free(we->workers);
    if (we->reconcile_ev)
        event_free(we->reconcile_ev);
    free(we->functions_dir);
    free(we->shim);
    free(we->run_dir);
    free(we->ns);
    free(we->prefix);
    free(we);
}

size_t funcd_eval_worker_pids(const funcd_evaluator *ev, int *pids, size_t max)
{
    const worker_eval *we = (const worker_eval *)ev;
    return we->workers ? funcd_workers_pids(we->workers, pids, max) : 0;
}

unsigned funcd_eval_worker_pools(const funcd_evaluator *ev)
{
    unsigned n = 0;
    for (const image_pool *ip = ((const worker_eval *)ev)->pools; ip; ip = ip->next)
        n++;
    return n;
}

/* Why this evaluator cannot run anything with `cfg`, or NULL. */
static const char *missing_piece(const funcd_eval_config *cfg)
{
    if (!cfg->functions_dir && !cfg->sources)
        return "no functions directory is configured and images cannot be pulled";
    if (!cfg->runtime || !cfg->runtime->start || !cfg->runtime->stop || !cfg->runtime->release)
        return "no runtime is configured for warm workers";
    if (!cfg->state_dir)
        return "no state directory is configured for warm workers' sockets";
    if (!cfg->store)
        return "no store holds FunctionConfigs";
    return NULL;
}

static int setup(worker_eval *we, const funcd_eval_config *cfg)
{
    we->budget = cfg->budget;
    we->ns = funcd_strdup(cfg->config_namespace ? cfg->config_namespace : "default");
    if (!we->ns || asprintf(&we->prefix, "/registry/functionconfigs/%s/", we->ns) < 0)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the worker evaluator");
    if ((we->off = missing_piece(cfg)))
        return 0;
    we->functions_dir = funcd_strdup(cfg->functions_dir);
    we->sources = cfg->sources;
    if (asprintf(&we->shim, "%s/funcd-exec", cfg->shim_dir ? cfg->shim_dir : ".") < 0)
        we->shim = NULL;
    if (asprintf(&we->run_dir, "%s/fnrun", cfg->state_dir) < 0)
        we->run_dir = NULL;
    we->reconcile_ev = event_new(cfg->loop, -1, 0, on_reconcile, we);
    if ((cfg->functions_dir && !we->functions_dir) || !we->shim || !we->run_dir ||
        !we->reconcile_ev)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the worker evaluator");
    if (funcd_workers_new(&we->workers, cfg->loop, cfg->runtime, we->run_dir) < 0)
        return -1;
    if (access(we->shim, X_OK) != 0)
        funcd_log(we->logger, FUNCD_LOG_WARN, "the exec shim %s is missing; warm workers will "
                  "not start (check funcd's shim directory)", we->shim);
    return 0;
}

int funcd_eval_worker_new(funcd_evaluator **out, const funcd_eval_config *cfg)
{
    *out = NULL;
    worker_eval *we = calloc(1, sizeof(*we));
    if (!we)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the worker evaluator");
    we->base = (funcd_evaluator){.name = "worker", .evaluate = worker_evaluate,
                                 .start = worker_start, .close = worker_close,
                                 .live_workers = worker_live, .free = worker_free};
    we->loop = cfg->loop;
    we->store = cfg->store;
    we->logger = cfg->logger;
    we->max_message = cfg->max_message ? cfg->max_message : FUNCD_EVAL_DEFAULT_MAX_MESSAGE;
    int rc = setup(we, cfg);
    if (rc < 0) {
        worker_free(&we->base);
        return rc;
    }
    *out = &we->base;
    return 0;
}
