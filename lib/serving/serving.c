#include "serving/serving.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/openat2.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api/api.h"
#include "artifact/bundle.h"
#include "funcd/sys/error.h"
#include "gateway/edge.h"
#include "port/gateway.h"
#include "port/runtime.h"
#include "source/resolver.h"
#include "util/hostpath.h"
#include "util/misc.h"
#include "worker/launch.h"
#include "localapi/localapi.h"

#define STOP_GRACE_MS 10000 /* SIGTERM, then SIGKILL (docs/worker-contract.md) */
#define LOG_GRACE_MS 200 /* lines read this soon after a request ended are its */

/* What every worker of one version of a function is started with. */
typedef struct launch {
    atomic_int refs;
    funcd_serving *s;
    char *ns, *name;
    char **argv; /* NULL-terminated */
    char **env;  /* NULL-terminated; FUNCD_LISTEN and FUNCD_REPLICA are added per worker */
    char *cwd;
    char *rootfs;      /* an image function's root: argv, env and cwd are paths inside it */
    int code_owned;    /* cwd is funcd's own copy (bundle, git), not a host path (source.path) */
    char *fingerprint; /* argv, env, cwd, limits, network: a change means new workers */
    funcd_worker_limits limits;  /* spec.resources */
    funcd_worker_network network; /* spec.network */
    funcd_log_ring *logs;
    int generic;       /* a GENERIC_* runtime whose warm generic worker may become ours, or -1 */
    /* The python3 and node shims load the handler before they listen: such
     * a version is Ready once a worker did (docs/serving.md). */
    int load_check;
    atomic_int load_state;  /* LOAD_* */
    char load_error[512];   /* HandlerLoadFailed: the first line of the error */
    char **invoke;          /* spec.bindings.invoke (NULL-terminated), or NULL */
    char **kv;              /* spec.bindings.kv, or NULL; with `invoke`: a local API */
    struct {                /* the services its workers find in their namespace (netsvc.h) */
        funcd_netsvc *svc;
        funcd_netsvc_plan plan;
    } svc[FUNCD_NETSVC_MAX];
    size_t n_svc;
} launch;

/* PENDING -> STOPPING (its worker loaded the handler, and is stopped again
 * so that nothing runs before the first request) -> OK; or -> FAILED. */
enum { LOAD_PENDING, LOAD_STOPPING, LOAD_OK, LOAD_FAILED, LOAD_ABORTED };
/* A shim's exit status when it cannot load the handler (docs/worker-contract.md). */
#define EXIT_HANDLER_LOAD 3

/* Interpreted runtimes whose shims can start generic and be told later
 * which function to become (FUNCD_GENERIC=1). */
enum { GENERIC_NODE, GENERIC_PYTHON, GENERIC_KINDS };
static const char *const generic_runtime[GENERIC_KINDS] = {"node", "python3"};
static const char *const generic_shim[GENERIC_KINDS] = {"funcd-node.js", "funcd-python.py"};

typedef struct fn_entry {
    char *ns, *name;
    double generation; /* metadata.generation last applied */
    launch *ln;
    funcd_launch *workers; /* ln's workers (lib/worker), what `pool` starts */
    funcd_pool *pool;
    uint64_t timeout_ms;
    funcd_edge *edge; /* the effective spec.edge, or NULL (all off) */
    funcd_log_ring *logs;
    char last_oom[160]; /* the last replica the kernel killed at its memory limit, or "" */
    funcd_metrics_fn *metrics; /* held while the function exists (cold starts count into it) */
    funcd_pool *gauge_pool; /* a reference to `pool` for readers on other threads, under s->lock */
    funcd_pool_budget *budget; /* its namespace's places for workers, shared by its entries */
    struct fn_entry *next;
} fn_entry;

/* A worker: the owner's data lib/worker keeps per worker, which the pool
 * hands out. `pub` first: the gateway sees only it. */
typedef struct worker_ctx {
    funcd_serving_worker pub;
    char load_msg[512];      /* before it is ready: the msg of its last ERROR log line */
    atomic_int load_checked; /* the handler load check's worker, evicted once ready */
    uint64_t started_ns;     /* when it was prepared: its cold start runs from here */
    int claimed_spare;       /* it is a claimed spare, not ready yet */
    struct funcd_localapi_socket *api; /* its local API socket, or NULL */
    void *svc[FUNCD_NETSVC_MAX];       /* its launch's services' handles, or NULLs */
    launch *svc_ln;                    /* set while on s->svc_workers */
    struct worker_ctx *svc_prev, *svc_next;
} worker_ctx;

/* A generic interpreter worker started ahead of need (node takes ~30 ms to
 * start here, python ~15): a function's next worker of that runtime is this
 * process, told what to become. */
typedef struct spare {
    funcd_serving *s;
    int kind;
    funcd_worker *proc;
    funcd_worker_ctx *w; /* once claimed: output and exit go to it */
    char dir[128];
    char ctl[108];
} spare;

/* A namespace's places for workers (the loop's). Kept for the life of the
 * serving, not only while the namespace has functions: workers of a deleted
 * function drain holding their places, and a namespace that deleted and made
 * its functions again must find them taken (review18 M-6). */
typedef struct ns_budget {
    char *ns;
    funcd_pool_budget *budget;
    struct ns_budget *next;
} ns_budget;

struct funcd_serving {
    funcd_serving_config cfg;
    ns_budget *budgets; /* the loop's */
    char *shim_dir;
    char *run_dir;   /* worker runtime directories */
    char *cache_dir; /* extracted bundles */
    pthread_mutex_t lock; /* guards `entries` for readers on other threads */
    fn_entry *entries;
    funcd_workers *workers; /* every function's (lib/worker) */
    unsigned next_dir;      /* for generic workers' directories */
    unsigned live_spares;   /* generic workers started, not yet claimed or exited */
    spare *spares[GENERIC_KINDS];    /* unclaimed, or NULL */
    int want_spare[GENERIC_KINDS];   /* a function of that runtime exists */
    unsigned claimed[GENERIC_KINDS]; /* claimed spares not ready yet: no new one starts */
    struct refill {                  /* starts the next spare on the loop's next turn */
        funcd_serving *s;
        int kind;
        struct event *ev;
    } refill[GENERIC_KINDS];
    int closing;
    int respec; /* the function being applied got a new spec: re-resolve tags and refs */
    pthread_mutex_t svc_lock;      /* svc_workers, for funcd_serving_invocation_of */
    worker_ctx *svc_workers;       /* workers with netsvc services */
};

/* ---- small helpers ---------------------------------------------------- */

typedef struct strv {
    char **v;
    size_t n, cap;
    int oom;
} strv;

static void strv_add(strv *sv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void strv_add(strv *sv, const char *fmt, ...)
{
    if (sv->oom)
        return;
    if (sv->n + 2 > sv->cap) {
        size_t cap = sv->cap ? sv->cap * 2 : 16;
        char **v = realloc(sv->v, cap * sizeof(char *));
        if (!v) {
            sv->oom = 1;
            return;
        }
        sv->v = v;
        sv->cap = cap;
    }
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    if (!s) {
        sv->oom = 1;
        return;
    }
    sv->v[sv->n++] = s;
    sv->v[sv->n] = NULL;
}

static void unplan_services(launch *ln)
{
    for (size_t i = 0; i < ln->n_svc; i++)
        ln->svc[i].svc->unplan(ln->svc[i].svc, ln->svc[i].plan.state);
    ln->n_svc = 0;
}

static void launch_unref(launch *ln)
{
    if (!ln || atomic_fetch_sub(&ln->refs, 1) != 1)
        return;
    funcd_strv_free(ln->argv);
    funcd_strv_free(ln->env);
    funcd_strv_free(ln->invoke);
    funcd_strv_free(ln->kv);
    unplan_services(ln);
    free(ln->cwd);
    free(ln->rootfs);
    free(ln->fingerprint);
    free(ln->ns);
    free(ln->name);
    funcd_log_ring_unref(ln->logs);
    free(ln);
}

static int remove_tree_dir(const char *dir)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/worker.sock", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/ctl.sock", dir); /* a generic worker's, if it left it */
    unlink(path);
    return rmdir(dir);
}

/* A sandboxed worker sees only these host paths (docs/security.md): its
 * code and the shims read-only, its runtime directory (the socket) writable.
 * Only funcd's own copies are shown as the worker's own (`owned`): its run
 * directory, and code funcd extracted or checked out; a spec.source.path
 * directory and the shims keep their host owners. */
static size_t worker_binds(const funcd_serving *s, const char *code, int code_owned,
                           const char *run_dir, funcd_worker_bind out[3])
{
    size_t n = 0;
    if (code)
        out[n++] = (funcd_worker_bind){code, NULL, 0, code_owned};
    if (s->shim_dir[0])
        out[n++] = (funcd_worker_bind){s->shim_dir, NULL, 0, 0};
    if (run_dir) /* NULL: lib/worker adds it */
        out[n++] = (funcd_worker_bind){run_dir, NULL, 1, 1};
    return n;
}

/* ---- spec -> launch --------------------------------------------------- */

static const char *str_at(const cJSON *obj, const char *key)
{
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(obj, key));
}

static uint64_t duration_at(const cJSON *obj, const char *key, uint64_t dflt)
{
    const char *s = str_at(obj, key);
    uint64_t ms;
    return s && funcd_parse_duration_ms(s, &ms) == 0 ? ms : dflt;
}

static unsigned uint_at(const cJSON *obj, const char *key, unsigned dflt)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(n) && n->valuedouble >= 0 ? (unsigned)n->valuedouble : dflt;
}

static void fail(funcd_serving_status *st, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fail(funcd_serving_status *st, const char *reason, const char *fmt, ...)
{
    st->ready = 0;
    snprintf(st->reason, sizeof(st->reason), "%s", reason);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->message, sizeof(st->message), fmt, ap);
    va_end(ap);
}

/* An image or git source through the resolver: the code directory (git) or
 * the image's rootfs (with `img` filled), or NULL with `st` filled (pending
 * or failed). */
static char *resolve_source(funcd_serving *s, const char *ns, const char *name,
                            const cJSON *spec, funcd_source_result *img, funcd_serving_status *st)
{
    if (!s->cfg.sources) {
        fail(st, "SourceNotSupported", "this platform has no source resolver for image and git "
             "sources; use spec.source.path or spec.source.bundle");
        return NULL;
    }
    funcd_source_result res;
    char reason[64], msg[512];
    int rc = funcd_sources_resolve(s->cfg.sources, ns, name, spec, s->respec, &res, reason,
                                   sizeof(reason), msg, sizeof(msg));
    if (rc != FUNCD_SOURCE_READY) {
        fail(st, reason, "%s", msg);
        return NULL;
    }
    snprintf(st->resolved, sizeof(st->resolved), "%s", res.resolved);
    char *dir = strdup(res.dir);
    if (!dir)
        fail(st, "InternalError", "out of memory");
    if (dir && res.is_image) {
        *img = res; /* the caller's now */
        return dir;
    }
    funcd_source_result_clear(&res);
    return dir;
}

/* The code directory of the function (an image's: its rootfs, and `img`
 * filled), or NULL with `st` filled. */
static char *materialize(funcd_serving *s, const char *ns, const char *name, const cJSON *spec,
                         funcd_source_result *img, funcd_serving_status *st)
{
    const cJSON *source = cJSON_GetObjectItemCaseSensitive(spec, "source");
    const char *path = str_at(source, "path");
    const char *bundle = str_at(source, "bundle");
    struct stat sb;
    if (path) {
        /* What the worker is shown is what the path resolves to now (a
         * symlink or /proc/<pid>/root is followed here, never in the
         * sandbox); admission checked the same resolution (docs/security.md). */
        char real[FUNCD_HOSTPATH_MAX];
        const char *why;
        if (funcd_hostpath_resolve(path, real, sizeof(real), &why) < 0) {
            fail(st, "ArtifactFailed", "spec.source.path %s %s", path, why);
            return NULL;
        }
        if (stat(real, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            fail(st, "ArtifactFailed", "spec.source.path %s is not a directory on the funcd host",
                 path);
            return NULL;
        }
        return strdup(real);
    }
    if (bundle) {
        char dir[512], err[512];
        if (!s->cfg.blob) {
            fail(st, "ArtifactFailed", "this platform has no blob store for bundles");
            return NULL;
        }
        if (!funcd_bundle_visible(s->cfg.blob, ns, bundle)) {
            fail(st, "ArtifactFailed", "bundle %s was not uploaded to namespace \"%s\": upload "
                 "it there (funcdctl deploy -n %s, or POST .../namespaces/%s/bundles)", bundle, ns,
                 ns, ns);
            return NULL;
        }
        if (funcd_bundle_materialize(s->cfg.blob, bundle, s->cache_dir, dir, sizeof(dir), err,
                                     sizeof(err)) < 0) {
            fail(st, "ArtifactFailed", "bundle %s: %s", bundle, err);
            return NULL;
        }
        return strdup(dir);
    }
    if (cJSON_GetObjectItemCaseSensitive(source, "image") ||
        cJSON_GetObjectItemCaseSensitive(source, "git"))
        return resolve_source(s, ns, name, spec, img, st);
    fail(st, "BadSpec", "spec.source names no artifact");
    return NULL;
}

static int executable(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && access(path, X_OK) == 0;
}

/* The program a runtime runs its code with, or NULL when it is missing. */
static const char *interpreter(const char *runtime)
{
    if (strcmp(runtime, "python3") == 0)
        return executable("/usr/bin/python3") ? "/usr/bin/python3" : NULL;
    if (strcmp(runtime, "node") == 0) {
        static const char *const nodes[] = {"/usr/bin/node", "/usr/local/bin/node",
                                            "/usr/bin/nodejs", NULL};
        for (const char *const *n = nodes; *n; n++)
            if (executable(*n))
                return *n;
    }
    return NULL;
}

/* 1 when `rel` (spec.handler) leads out of `dir`: through a symlink, or a
 * ".." (refused by the API already). Resolved by the kernel beneath `dir`
 * (openat2 RESOLVE_BENEATH); a missing file is not this check's business. */
static int leads_outside(const char *dir, const char *rel)
{
    int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return 0;
    struct open_how how = {.flags = O_PATH | O_CLOEXEC,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
    int fd = (int)syscall(SYS_openat2, dfd, rel, &how, sizeof(how));
    int err = errno;
    close(dfd);
    if (fd >= 0) {
        close(fd);
        return 0;
    }
    if (err == ENOSYS) { /* before Linux 5.6: compare the resolved paths */
        char full[FUNCD_HOSTPATH_MAX], real[FUNCD_HOSTPATH_MAX], root[FUNCD_HOSTPATH_MAX];
        const char *why;
        snprintf(full, sizeof(full), "%s/%s", dir, rel);
        return funcd_hostpath_resolve(dir, root, sizeof(root), &why) == 0 &&
               funcd_hostpath_resolve(full, real, sizeof(real), &why) == 0 &&
               !funcd_hostpath_under(real, root);
    }
    return err == EXDEV || err == ELOOP;
}

static void add_args(strv *argv, const cJSON *spec)
{
    const cJSON *a;
    cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(spec, "args"))
        if (cJSON_IsString(a))
            strv_add(argv, "%s", a->valuestring);
}

/* Builds argv for the runtime and mode (docs/worker-contract.md). */
static int build_argv(funcd_serving *s, const cJSON *spec, const char *code, strv *argv,
                      funcd_serving_status *st)
{
    const char *runtime = str_at(spec, "runtime");
    const char *handler = str_at(spec, "handler");
    const char *mode = str_at(spec, "mode");
    int exec_mode = mode && strcmp(mode, "exec") == 0;
    const char *interp = NULL;
    if (strcmp(runtime, "native") != 0 && !(interp = interpreter(runtime))) {
        fail(st, "RuntimeUnavailable", "the %s runtime needs %s, which is not installed on the "
             "funcd host", runtime, strcmp(runtime, "node") == 0 ? "node" : "/usr/bin/python3");
        return -1;
    }
    if ((exec_mode || strcmp(runtime, "native") == 0) && (!handler || !*handler)) {
        fail(st, "BadSpec", "spec.handler must name the program to run, relative to the code "
             "directory");
        return -1;
    }
    if ((exec_mode || strcmp(runtime, "native") == 0) && leads_outside(code, handler)) {
        fail(st, "BadSpec", "spec.handler %s leads outside the code directory (a symlink out of "
             "it, or '..'); the program must be a file inside it", handler);
        return -1;
    }
    if (exec_mode) {
        char shim[600];
        snprintf(shim, sizeof(shim), "%s/funcd-exec", s->shim_dir);
        if (!executable(shim)) {
            fail(st, "RuntimeUnavailable", "the exec shim %s is missing; check funcd's shim "
                 "directory", shim);
            return -1;
        }
        strv_add(argv, "%s", shim);
        strv_add(argv, "--");
        if (interp)
            strv_add(argv, "%s", interp);
        strv_add(argv, "%s/%s", code, handler);
        add_args(argv, spec);
        return 0;
    }
    if (strcmp(runtime, "native") == 0) {
        char prog[1024];
        snprintf(prog, sizeof(prog), "%s/%s", code, handler);
        if (!executable(prog)) {
            fail(st, "BadSpec", "spec.handler %s is not an executable file in the code directory",
                 handler);
            return -1;
        }
        strv_add(argv, "%s", prog);
        add_args(argv, spec);
        return 0;
    }
    const char *shim_name = strcmp(runtime, "python3") == 0 ? "funcd-python.py" : "funcd-node.js";
    char shim[600];
    snprintf(shim, sizeof(shim), "%s/%s", s->shim_dir, shim_name);
    if (access(shim, R_OK) != 0) {
        fail(st, "RuntimeUnavailable", "the %s shim %s is missing; check funcd's shim directory",
             runtime, shim);
        return -1;
    }
    strv_add(argv, "%s", interp);
    strv_add(argv, "%s", shim);
    return 0;
}

static void build_env(const cJSON *spec, const char *ns, const char *name, const char *code,
                      strv *env)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(spec, "env"))
        if (cJSON_IsString(e))
            strv_add(env, "%s=%s", e->string, e->valuestring);
    const char *handler = str_at(spec, "handler");
    strv_add(env, "PATH=/usr/local/bin:/usr/bin:/bin");
    strv_add(env, "LANG=C.UTF-8");
    strv_add(env, "PYTHONUNBUFFERED=1");
    strv_add(env, "PYTHONDONTWRITEBYTECODE=1");
    strv_add(env, "FUNCD_NAMESPACE=%s", ns);
    strv_add(env, "FUNCD_FUNCTION=%s", name);
    strv_add(env, "FUNCD_HANDLER=%s", handler ? handler : "");
    strv_add(env, "FUNCD_CODE_DIR=%s", code);
}

/* spec.bindings.<what> (a list of names), NULL-terminated; NULL when empty. */
static char **bound_names(const cJSON *spec, const char *what)
{
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(spec, "bindings"), what);
    size_t n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, list) n += cJSON_IsString(e);
    if (!n)
        return NULL;
    strv v = {0};
    cJSON_ArrayForEach(e, list) if (cJSON_IsString(e)) strv_add(&v, "%s", e->valuestring);
    if (v.oom) {
        funcd_strv_free(v.v);
        return NULL;
    }
    return v.v;
}

static char *fingerprint(const launch *ln)
{
    funcd_buf b = FUNCD_BUF_INIT;
    for (char **p = ln->argv; *p; p++)
        funcd_buf_printf(&b, "a:%s\n", *p);
    for (char **p = ln->env; *p; p++)
        funcd_buf_printf(&b, "e:%s\n", *p);
    funcd_buf_printf(&b, "r:%s\n", ln->rootfs ? ln->rootfs : "");
    funcd_buf_printf(&b, "c:%s\nm:%llu p:%u c:%u n:%d\n", ln->cwd,
                     (unsigned long long)ln->limits.memory_bytes, ln->limits.pids,
                     ln->limits.cpu_millis, (int)ln->network);
    for (char **p = ln->invoke; p && *p; p++)
        funcd_buf_printf(&b, "i:%s\n", *p);
    for (char **p = ln->kv; p && *p; p++)
        funcd_buf_printf(&b, "k:%s\n", *p);
    return funcd_buf_detach(&b, NULL);
}

/* spec.resources (validated by the API) as the runtime's limits. */
static funcd_worker_limits limits_of(const cJSON *spec)
{
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(spec, "resources");
    funcd_worker_limits lim = {0, 0, 0};
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(res, "memory");
    const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(res, "cpu");
    uint64_t v;
    if (cJSON_IsString(mem) && funcd_parse_quantity(mem->valuestring, &v) == 0)
        lim.memory_bytes = v;
    else if (cJSON_IsNumber(mem) && mem->valuedouble >= 1)
        lim.memory_bytes = (uint64_t)mem->valuedouble;
    lim.pids = uint_at(res, "pids", 0);
    if (cJSON_IsString(cpu) && funcd_parse_cpu_millis(cpu->valuestring, &v) == 0)
        lim.cpu_millis = (uint32_t)v;
    else if (cJSON_IsNumber(cpu) && cpu->valuedouble > 0)
        lim.cpu_millis = (uint32_t)(cpu->valuedouble * 1000 + 0.5);
    return lim;
}

static int has_env(char *const *env, const char *name)
{
    size_t n = strlen(name);
    for (char *const *e = env; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return 1;
    return 0;
}

/* An image function runs its entrypoint and cmd (spec.handler replaces the
 * entrypoint, spec.args the cmd, as Kubernetes' command and args do); in
 * exec mode the static exec shim, copied into its runtime directory, runs
 * them once per request. */
static int build_image_argv(const cJSON *spec, const funcd_source_result *img, strv *argv,
                            funcd_serving_status *st)
{
    const char *handler = str_at(spec, "handler");
    const char *mode = str_at(spec, "mode");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(spec, "args");
    if (mode && strcmp(mode, "exec") == 0) {
        strv_add(argv, FUNCD_IMAGE_EXEC_SHIM);
        strv_add(argv, "--");
    }
    size_t before = argv->n;
    if (handler && *handler)
        strv_add(argv, "%s", handler);
    else
        for (char **p = img->entrypoint; p && *p; p++)
            strv_add(argv, "%s", *p);
    if (args)
        add_args(argv, spec);
    else
        for (char **p = img->cmd; p && *p; p++)
            strv_add(argv, "%s", *p);
    if (argv->n == before) {
        fail(st, "BadSpec", "the image names no entrypoint or cmd; set spec.handler to the "
             "program to run inside it");
        return -1;
    }
    if (argv->v[before][0] != '/') {
        fail(st, "BadSpec", "the program %s must be an absolute path inside the image",
             argv->v[before]);
        return -1;
    }
    return 0;
}

static void build_image_env(const cJSON *spec, const funcd_source_result *img, const char *ns,
                            const char *name, strv *env)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(spec, "env"))
        if (cJSON_IsString(e))
            strv_add(env, "%s=%s", e->string, e->valuestring);
    for (char **p = img->env; p && *p; p++) {
        char key[256];
        snprintf(key, sizeof(key), "%.*s", (int)strcspn(*p, "="), *p);
        if (!has_env(env->v, key)) /* spec.env wins over the image's */
            strv_add(env, "%s", *p);
    }
    if (!has_env(env->v, "PATH"))
        strv_add(env, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    strv_add(env, "FUNCD_NAMESPACE=%s", ns);
    strv_add(env, "FUNCD_FUNCTION=%s", name);
}

/* Asks each service whether this version uses it (netsvc.h): their
 * variables go into `env`. 0, or -1 with `st` failed and none planned. */
static int plan_services(funcd_serving *s, const char *ns, const char *name, const cJSON *fn,
                         launch *ln, strv *env, funcd_serving_status *st)
{
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(fn, "spec");
    size_t n_listen = 0;
    /* A worker on the host network has no namespace of its own to hold sockets. */
    const char *network = str_at(spec, "network");
    int own_ns = s->cfg.sandboxed && !(network && strcmp(network, "host") == 0);
    for (size_t i = 0; i < s->cfg.n_netsvc; i++) {
        funcd_netsvc *svc = s->cfg.netsvc[i];
        funcd_netsvc_plan *pl = &ln->svc[ln->n_svc].plan;
        memset(pl, 0, sizeof(*pl));
        char reason[64] = "";
        int rc = svc->plan(svc, ns, name, fn, spec, own_ns, pl, reason);
        if (rc < 0) {
            fail(st, reason[0] ? reason : "ServiceUnavailable", "%s", funcd_error_last()->message);
            unplan_services(ln);
            return -1;
        }
        if (rc == 0)
            continue;
        ln->svc[ln->n_svc++].svc = svc;
        n_listen += pl->n_listen;
        for (char **e = pl->env; e && *e; e++)
            strv_add(env, "%s", *e);
    }
    if (n_listen > FUNCD_LAUNCH_MAX_LISTEN || env->oom) {
        fail(st, "InternalError", env->oom ? "out of memory preparing the function"
                                           : "its services need too many sockets");
        unplan_services(ln);
        return -1;
    }
    return 0;
}

static launch *build_launch(funcd_serving *s, const char *ns, const char *name, const cJSON *fn,
                            funcd_log_ring *logs, funcd_serving_status *st)
{
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(fn, "spec");
    funcd_source_result img = {0};
    char *code = materialize(s, ns, name, spec, &img, st);
    if (!code)
        return NULL;
    strv argv = {0}, env = {0};
    launch *ln = NULL;
    char *rootfs = NULL;
    if (img.is_image) {
        rootfs = code;
        code = funcd_strdup(img.working_dir && *img.working_dir ? img.working_dir : "/");
        if (code && build_image_argv(spec, &img, &argv, st) == 0) {
            build_image_env(spec, &img, ns, name, &env);
            ln = calloc(1, sizeof(*ln));
        }
    } else if (build_argv(s, spec, code, &argv, st) == 0) {
        build_env(spec, ns, name, code, &env);
        ln = calloc(1, sizeof(*ln));
    }
    funcd_source_result_clear(&img);
    if (ln && !argv.oom && !env.oom && plan_services(s, ns, name, fn, ln, &env, st) == 0) {
        atomic_init(&ln->refs, 1);
        ln->s = s;
        ln->ns = strdup(ns);
        ln->name = strdup(name);
        ln->argv = argv.v;
        ln->env = env.v;
        ln->cwd = code;
        ln->rootfs = rootfs;
        ln->code_owned = !str_at(cJSON_GetObjectItemCaseSensitive(spec, "source"), "path");
        ln->limits = limits_of(spec);
        const char *network = str_at(spec, "network");
        ln->network = network && strcmp(network, "host") == 0 ? FUNCD_WORKER_NETWORK_HOST
                                                               : FUNCD_WORKER_NETWORK_NONE;
        ln->invoke = bound_names(spec, "invoke");
        ln->kv = bound_names(spec, "kv");
        ln->fingerprint = fingerprint(ln);
        funcd_log_ring_ref(logs);
        ln->logs = logs;
        const char *mode = str_at(spec, "mode");
        ln->load_check = !rootfs && !(mode && strcmp(mode, "exec") == 0) &&
                         (strcmp(str_at(spec, "runtime"), "python3") == 0 ||
                          strcmp(str_at(spec, "runtime"), "node") == 0);
        ln->generic = -1;
        for (int k = 0; k < GENERIC_KINDS && !rootfs && !(mode && strcmp(mode, "exec") == 0); k++)
            if (strcmp(str_at(spec, "runtime"), generic_runtime[k]) == 0)
                ln->generic = k;
        /* Variables an interpreter reads as it starts (PYTHONPATH, NODE_OPTIONS, ...)
         * would come too late for a generic worker: start such functions afresh. */
        const cJSON *ev;
        cJSON_ArrayForEach(ev, cJSON_GetObjectItemCaseSensitive(spec, "env"))
            if (ev->string && (funcd_has_prefix(ev->string, "PYTHON") ||
                               funcd_has_prefix(ev->string, "NODE")))
                ln->generic = -1;
        return ln;
    }
    if (!st->reason[0])
        fail(st, "InternalError", "out of memory preparing the function");
    free(ln);
    free(code);
    free(rootfs);
    funcd_strv_free(argv.v);
    funcd_strv_free(env.v);
    return NULL;
}

static funcd_pool_config pool_config(const cJSON *spec, funcd_pool_budget *budget)
{
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(spec, "scaling");
    funcd_pool_config c = {
        .min_workers = uint_at(sc, "minReplicas", 0),
        .max_workers = uint_at(sc, "maxReplicas", 10),
        .concurrency = uint_at(sc, "concurrency", 10),
        .queue_length = uint_at(sc, "queueLength", 100),
        .idle_ms = duration_at(sc, "idleTimeout", 5 * 60 * 1000),
        .start_timeout_ms = duration_at(spec, "timeout", 30000),
        .budget = budget,
    };
    if (c.start_timeout_ms < 10000)
        c.start_timeout_ms = 10000; /* interpreters on a loaded host need a moment */
    return c;
}

/* ---- workers (lib/worker does the rest) -------------------------------- */

/* Pulls an "invocationId" out of a structured (JSON) log line. */
static int invocation_of(const char *line, size_t len, char *out, size_t out_len)
{
    if (len < 2 || line[0] != '{' || !memmem(line, len, "\"invocationId\"", 14))
        return 0;
    cJSON *j = cJSON_ParseWithLength(line, len);
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "invocationId"));
    int found = id != NULL;
    if (found)
        snprintf(out, out_len, "%s", id);
    cJSON_Delete(j);
    return found;
}

/* ---- the handler load check ------------------------------------------ */

/* Before it is ready, a shim's structured ERROR line says why it could not
 * load the handler: keep the first line of its msg. */
static void note_load_line(worker_ctx *wc, const char *line, size_t len)
{
    if (len < 2 || line[0] != '{')
        return;
    cJSON *j = cJSON_ParseWithLength(line, len);
    const char *sev = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "severity"));
    const char *msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "msg"));
    if (sev && msg && strcmp(sev, "ERROR") == 0)
        snprintf(wc->load_msg, sizeof(wc->load_msg), "%.*s", (int)strcspn(msg, "\r\n"), msg);
    cJSON_Delete(j);
}

/* A worker that exits with EXIT_HANDLER_LOAD before it was ready could not
 * load the handler: that version is HandlerLoadFailed. */
static void note_load_exit(launch *ln, funcd_worker_ctx *w, int status)
{
    worker_ctx *wc = (worker_ctx *)w->data;
    const char *last_stderr = w->last_stderr;
    int stopping = LOAD_STOPPING;
    if (atomic_load(&wc->load_checked)) /* it loaded the handler and was stopped */
        atomic_compare_exchange_strong(&ln->load_state, &stopping, LOAD_OK);
    if (!ln->load_check || w->ready || !WIFEXITED(status) ||
        WEXITSTATUS(status) != EXIT_HANDLER_LOAD)
        return;
    snprintf(ln->load_error, sizeof(ln->load_error), "%s",
             wc->load_msg[0] ? wc->load_msg : last_stderr[0] ? last_stderr
                                                             : "the handler could not be loaded");
    atomic_store(&ln->load_state, LOAD_FAILED);
}

typedef struct load_check {
    funcd_pool_waiter wt; /* first: the pool hands it back */
    launch *ln;           /* a reference */
} load_check;

/* The check's worker is ready (it loaded the handler), or none could start.
 * Any thread. */
static void on_load_granted(funcd_pool_waiter *wt, funcd_pool_worker *w, const char *error)
{
    load_check *lc = (load_check *)wt;
    launch *ln = lc->ln;
    int pending = LOAD_PENDING;
    if (w) {
        funcd_pool *pool = funcd_pool_worker_pool(w);
        funcd_pool_stats st;
        funcd_pool_stats_get(pool, &st);
        /* Nothing runs before the first request: unless requests came
         * meanwhile, the worker is stopped, and the version is Ready once
         * it is gone (on_worker_exited). */
        int evict = st.in_flight <= 1 && st.waiting == 0;
        if (evict) {
            atomic_store(&((worker_ctx *)funcd_pool_worker_data(w))->load_checked, 1);
            atomic_store(&ln->load_state, LOAD_STOPPING);
        } else {
            atomic_store(&ln->load_state, LOAD_OK);
        }
        funcd_pool_release(pool, w, evict);
    } else { /* the status says why: HandlerLoadFailed, WorkerFailed, or it was replaced */
        atomic_compare_exchange_strong(&ln->load_state, &pending, LOAD_ABORTED);
    }
    if (ln->s->cfg.changed && !ln->s->closing)
        ln->s->cfg.changed(ln->ns, ln->name, ln->s->cfg.changed_payload);
    launch_unref(ln);
    free(lc);
}

/* Starts one worker of a new version of a function whose shim loads its
 * handler; until it is ready the function is not. */
static void start_load_check(launch *ln, funcd_pool *pool)
{
    load_check *lc = calloc(1, sizeof(*lc));
    funcd_pool_worker *w = NULL;
    atomic_store(&ln->load_state, LOAD_PENDING);
    if (!lc) {
        atomic_store(&ln->load_state, LOAD_ABORTED);
        return;
    }
    atomic_fetch_add(&ln->refs, 1);
    lc->ln = ln;
    lc->wt.granted = on_load_granted;
    /* With the worker limit reached it waits for a place, however long: a
     * check failed for want of one would leave the version unchecked (and
     * Ready) for good (review18 M-3). */
    lc->wt.patient = 1;
    funcd_pool_outcome rc = funcd_pool_acquire(pool, &lc->wt, &w);
    if (rc == FUNCD_POOL_GRANTED)
        on_load_granted(&lc->wt, w, NULL);
    else if (rc != FUNCD_POOL_QUEUED)
        on_load_granted(&lc->wt, NULL, "the pool refused");
}

static void on_worker_output(funcd_worker_ctx *w, funcd_worker_stream stream, const char *line,
                             size_t len, void *payload)
{
    launch *ln = payload;
    funcd_serving *s = ln->s;
    worker_ctx *wc = (worker_ctx *)w->data;
    char inv[40] = "";
    if (stream == FUNCD_WORKER_STDERR && !w->ready && ln->load_check)
        note_load_line(wc, line, len);
    if (!invocation_of(line, len, inv, sizeof(inv))) {
        /* One request in flight: the line is its. None: a line read just
         * after the request ended (the pipe lags the socket) is still its. */
        pthread_mutex_lock(&wc->pub.invocation_lock);
        if (wc->pub.in_flight == 1 ||
            (wc->pub.in_flight == 0 && wc->pub.invocation[0] &&
             funcd_mono_ms() - wc->pub.ended_ms < LOG_GRACE_MS))
            snprintf(inv, sizeof(inv), "%s", wc->pub.invocation);
        pthread_mutex_unlock(&wc->pub.invocation_lock);
    }
    funcd_log_line rec = {funcd_now_ms(), wc->pub.replica, (int)stream, inv[0] ? inv : NULL,
                          line, len};
    funcd_log_ring_append(ln->logs, &rec);
    if (s->cfg.observer) {
        funcd_log_record r = {ln->ns, ln->name, wc->pub.replica, rec.invocation_id,
                              (int)stream, rec.time_ms, line, len};
        s->cfg.observer(&r, s->cfg.observer_payload);
    }
}

static fn_entry **find_entry(funcd_serving *s, const char *ns, const char *name);

/* Remembers an out-of-memory kill for the function's status. */
static void note_oom(launch *ln, worker_ctx *wc)
{
    funcd_serving *s = ln->s;
    fn_entry **pp = find_entry(s, ln->ns, ln->name);
    if (!pp || (*pp)->ln != ln)
        return;
    char ts[32];
    funcd_rfc3339(funcd_now_ms(), ts, sizeof(ts));
    snprintf((*pp)->last_oom, sizeof((*pp)->last_oom), "replica %s at %s (memory limit %llu bytes)",
             wc->pub.replica, ts, (unsigned long long)ln->limits.memory_bytes);
    if (s->cfg.changed)
        s->cfg.changed(ln->ns, ln->name, s->cfg.changed_payload);
}

/* A claimed spare is ready (or gone): the next one may start, once the
 * loop has sent the grant (a sandboxed start holds the loop for a few
 * milliseconds). Started at the claim, it delayed the probe that finds the
 * claimed worker ready, and the grant, by that much, and competed for the
 * CPUs with the handler being loaded for a request that waits. */
static void spare_settled(launch *ln, worker_ctx *wc)
{
    if (!wc->claimed_spare)
        return;
    wc->claimed_spare = 0;
    ln->s->claimed[ln->generic]--;
    event_active(ln->s->refill[ln->generic].ev, EV_TIMEOUT, 0);
}

/* The process is gone: the callers of requests it took learn how it ended
 * (lib/worker's words: no output, no host path). */
static void on_worker_exited(funcd_worker_ctx *w, int status, const funcd_worker_end *end,
                             void *payload)
{
    launch *ln = payload;
    worker_ctx *wc = (worker_ctx *)w->data;
    snprintf(wc->pub.end_reason, sizeof(wc->pub.end_reason), "%s", end->reason);
    snprintf(wc->pub.end_message, sizeof(wc->pub.end_message), "%s", end->message);
    atomic_store(&wc->pub.ended, 1);
    /* Its local API goes with the process, here on the loop (the only
     * thread it may be touched on): the worker's last reference, and with
     * it dispose, may be dropped by a gateway thread's request. */
    funcd_localapi_close(wc->api);
    wc->api = NULL;
    if (strcmp(end->reason, "OOMKilled") == 0)
        note_oom(ln, wc);
    note_load_exit(ln, w, status);
    spare_settled(ln, wc); /* a claimed spare that never became ready */
}

/* Any worker that loads the handler proves it loads. */
static void on_worker_ready(funcd_worker_ctx *w, void *payload)
{
    launch *ln = payload;
    worker_ctx *wc = (worker_ctx *)w->data;
    funcd_metrics_cold_start(ln->s->cfg.metrics, ln->ns, ln->name,
                             funcd_metrics_now_ns() - wc->started_ns);
    int failed = LOAD_FAILED;
    if (ln->load_check)
        atomic_compare_exchange_strong(&ln->load_state, &failed, LOAD_OK);
    spare_settled(ln, wc);
}

/* What the gateway needs of the worker, before it starts. */
static void on_worker_prepare(funcd_worker_ctx *w, void *data, void *payload)
{
    worker_ctx *wc = data;
    static atomic_uint_fast64_t next_worker_id;
    wc->started_ns = funcd_metrics_now_ns();
    wc->pub.id = atomic_fetch_add(&next_worker_id, 1) + 1;
    wc->pub.addr.sun_family = AF_UNIX;
    snprintf(wc->pub.addr.sun_path, sizeof(wc->pub.addr.sun_path), "%s",
             w->sock);
    snprintf(wc->pub.endpoint, sizeof(wc->pub.endpoint), "unix:%s", w->sock);
    snprintf(wc->pub.replica, sizeof(wc->pub.replica), "%s", w->replica);
    pthread_mutex_init(&wc->pub.invocation_lock, NULL);
    launch *ln = payload;
    if ((ln->invoke || ln->kv) && ln->s->cfg.localapi) { /* its FUNCD_API (docs/services.md) */
        char path[200];
        snprintf(path, sizeof(path), "%s/" FUNCD_LOCALAPI_SOCKET, w->dir);
        funcd_localapi_caller caller = {ln->ns, ln->name, w->replica,
                                        (const char *const *)ln->invoke,
                                        (const char *const *)ln->kv, wc->pub.id};
        if (!(wc->api = funcd_localapi_open(ln->s->cfg.localapi, path, &caller)))
            funcd_log(ln->s->cfg.logger, FUNCD_LOG_WARN, "replica %s has no local API: %s",
                      w->replica, funcd_error_last()->message);
    }
}

/* The worker's sockets, in the order of its launch's services' plans. */
static void on_worker_listening(funcd_worker_ctx *w, void *data, const int *fds, size_t n,
                                void *payload)
{
    worker_ctx *wc = data;
    launch *ln = payload;
    size_t off = 0;
    for (size_t i = 0; i < ln->n_svc && off <= n; i++) {
        size_t k = ln->svc[i].plan.n_listen;
        funcd_netsvc *svc = ln->svc[i].svc;
        wc->svc[i] = svc->attach(svc, ln->svc[i].plan.state, w->replica, fds + off, k);
        off += k;
    }
    if (ln->n_svc && !wc->svc_ln) {
        funcd_serving *s = ln->s;
        pthread_mutex_lock(&s->svc_lock);
        wc->svc_ln = ln;
        wc->svc_prev = NULL;
        wc->svc_next = s->svc_workers;
        if (s->svc_workers)
            s->svc_workers->svc_prev = wc;
        s->svc_workers = wc;
        pthread_mutex_unlock(&s->svc_lock);
    }
}

static void on_worker_dispose(funcd_worker_ctx *w, void *data, void *payload)
{
    worker_ctx *wc = data;
    launch *ln = payload;
    if (wc->svc_ln) {
        funcd_serving *s = wc->svc_ln->s;
        pthread_mutex_lock(&s->svc_lock);
        if (wc->svc_prev)
            wc->svc_prev->svc_next = wc->svc_next;
        else
            s->svc_workers = wc->svc_next;
        if (wc->svc_next)
            wc->svc_next->svc_prev = wc->svc_prev;
        wc->svc_ln = NULL;
        pthread_mutex_unlock(&s->svc_lock);
    }
    for (size_t i = 0; i < ln->n_svc; i++)
        if (wc->svc[i]) {
            ln->svc[i].svc->detach(ln->svc[i].svc, wc->svc[i]);
            wc->svc[i] = NULL;
        }
    funcd_localapi_close(wc->api); /* a worker whose end was never told (it never ran) */
    wc->api = NULL;
    pthread_mutex_destroy(&wc->pub.invocation_lock);
}

static void on_workers_changed(funcd_pool *p, void *payload)
{
    launch *ln = payload;
    if (ln->s->cfg.changed)
        ln->s->cfg.changed(ln->ns, ln->name, ln->s->cfg.changed_payload);
}

static void on_launch_released(void *payload)
{
    launch_unref(payload);
}

/* ---- a warm generic node worker ---------------------------------------- */

static void spare_free(spare *sp)
{
    remove_tree_dir(sp->dir);
    free(sp);
}

static void on_spare_output(funcd_worker *proc, funcd_worker_stream stream, const char *line,
                            size_t len, void *payload)
{
    spare *sp = payload;
    if (sp->w) {
        funcd_worker_events ev = funcd_worker_ctx_events(sp->w);
        ev.on_output(proc, stream, line, len, ev.payload);
    } else {
        funcd_log(sp->s->cfg.logger, FUNCD_LOG_DEBUG, "generic %s worker: %.*s",
                  generic_runtime[sp->kind], (int)len, line);
    }
}

static void on_spare_exit(funcd_worker *proc, int status, void *payload)
{
    spare *sp = payload;
    funcd_serving *s = sp->s;
    if (sp->w) { /* it became a function's worker: that worker exited */
        funcd_worker_events ev = funcd_worker_ctx_events(sp->w);
        ev.on_exit(proc, status, ev.payload);
        spare_free(sp);
        return;
    }
    if (s->spares[sp->kind] == sp)
        s->spares[sp->kind] = NULL;
    funcd_port_runtime_release(s->cfg.runtime, proc);
    s->live_spares--;
    spare_free(sp);
}

/* Starts a generic worker of runtime `kind` if a function of it exists
 * and none waits. */
static void ensure_spare(funcd_serving *s, int kind)
{
    const char *interp = interpreter(generic_runtime[kind]);
    if (s->spares[kind] || s->claimed[kind] || !s->want_spare[kind] || s->closing ||
        !s->cfg.runtime || !interp)
        return;
    spare *sp = calloc(1, sizeof(*sp));
    if (!sp)
        return;
    sp->s = s;
    sp->kind = kind;
    snprintf(sp->dir, sizeof(sp->dir), "%s/g%u", s->run_dir, ++s->next_dir);
    snprintf(sp->ctl, sizeof(sp->ctl), "%.*s/ctl.sock", (int)(sizeof(sp->ctl) - 10), sp->dir);
    char shim[600], listen_env[160];
    snprintf(shim, sizeof(shim), "%s/%s", s->shim_dir, generic_shim[kind]);
    snprintf(listen_env, sizeof(listen_env), "FUNCD_LISTEN=%s", sp->ctl);
    const char *const argv[] = {interp, shim, NULL};
    /* What the interpreter reads at start must be set now, not later. */
    const char *const env[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8",
                               "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1",
                               "FUNCD_GENERIC=1", listen_env, NULL};
    funcd_worker_bind binds[3];
    size_t n_binds = worker_binds(s, NULL, 0, sp->dir, binds);
    funcd_worker_spec spec = {argv, env, sp->dir, NULL, {0, 0, 0}, binds, n_binds,
                              FUNCD_WORKER_NETWORK_NONE};
    funcd_worker_events ev = {on_spare_output, on_spare_exit, sp};
    if (mkdir(sp->dir, 0700) != 0 || access(shim, R_OK) != 0 ||
        funcd_port_runtime_start(s->cfg.runtime, &spec, &ev, &sp->proc) < 0) {
        spare_free(sp);
        return;
    }
    s->live_spares++;
    s->spares[kind] = sp;
}

static void on_refill(evutil_socket_t fd, short what, void *arg)
{
    struct refill *r = arg;
    ensure_spare(r->s, r->kind);
}

/* Turns the waiting generic worker of `ln`'s runtime into `w`'s process
 * (`*proc`): 0, or -1 when there is none ready (the caller starts a fresh
 * one). */
static int claim_spare(funcd_serving *s, launch *ln, funcd_worker_ctx *w,
                       const char *const *env, funcd_worker **proc)
{
    int kind = ln->generic;
    spare *sp = s->spares[kind];
    if (!sp || ln->network != FUNCD_WORKER_NETWORK_NONE || ln->n_svc)
        return -1; /* a spare has no sockets in its namespace */
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", sp->ctl);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0) {
        if (fd >= 0)
            close(fd); /* still starting: not ready to be claimed */
        return -1;
    }
    /* A sandboxed generic worker sees neither the code nor this worker's
     * directory yet. */
    funcd_runtime *rt = s->cfg.runtime;
    funcd_worker_bind binds[3];
    size_t n_binds = worker_binds(s, ln->cwd, ln->code_owned, w->dir, binds);
    if (funcd_port_runtime_has_specialize(rt) &&
        funcd_port_runtime_specialize(rt, sp->proc, binds, n_binds, &ln->limits) < 0) {
        funcd_log(s->cfg.logger, FUNCD_LOG_DEBUG, "generic %s worker not used: %s",
                  generic_runtime[kind], funcd_error_last()->message);
        close(fd);
        return -1;
    }
    cJSON *msg = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(msg, "env");
    for (const char *const *p = env; *p; p++) {
        const char *eq = strchr(*p, '=');
        if (eq) {
            char key[256];
            snprintf(key, sizeof(key), "%.*s", (int)(eq - *p), *p);
            cJSON_AddStringToObject(e, key, eq + 1);
        }
    }
    cJSON_AddStringToObject(msg, "cwd", ln->cwd);
    char *text = cJSON_PrintUnformatted(msg);
    cJSON_Delete(msg);
    size_t n = text ? strlen(text) : 0;
    int ok = text && write(fd, text, n) == (ssize_t)n && write(fd, "\n", 1) == 1;
    free(text);
    close(fd);
    if (!ok) { /* it may have been shown this function's code: use it for nothing else */
        funcd_port_runtime_stop(rt, sp->proc, 0);
        return -1;
    }
    s->spares[kind] = NULL;
    s->live_spares--; /* lib/worker counts it from here on */
    sp->w = w;
    *proc = sp->proc;
    return 0;
}

/* A fresh worker of `ln`: the waiting generic worker of its runtime, when
 * there is one, else a new process (started by lib/worker). */
static int adopt_spare(funcd_worker_ctx *w, const char *const *env, funcd_worker **proc,
                       void *payload)
{
    launch *ln = payload;
    if (ln->generic < 0 || claim_spare(ln->s, ln, w, env, proc) < 0)
        return -1;
    worker_ctx *wc = (worker_ctx *)w->data;
    wc->claimed_spare = 1; /* the next spare starts in spare_settled */
    ln->s->claimed[ln->generic]++;
    return 0;
}

/* The workers of `ln` (lib/worker): what the runtime starts, the binds a
 * sandboxed worker sees, and the hooks that keep this layer's part. */
static funcd_launch *launch_workers(funcd_serving *s, launch *ln)
{
    funcd_worker_bind binds[3 + FUNCD_NETSVC_MAX * FUNCD_NETSVC_MAX_BINDS];
    funcd_worker_listen listen[FUNCD_LAUNCH_MAX_LISTEN];
    size_t n_binds = 0, n_listen = 0;
    char shim[600] = "";
    if (ln->rootfs) {
        /* In exec mode the image's program runs under the exec shim, which
         * must come without the host's libraries: the static build. */
        if (strcmp(ln->argv[0], FUNCD_IMAGE_EXEC_SHIM) == 0)
            snprintf(shim, sizeof(shim), "%s/funcd-exec-static", s->shim_dir);
    } else {
        n_binds = worker_binds(s, ln->cwd, ln->code_owned, NULL, binds);
    }
    for (size_t i = 0; i < ln->n_svc; i++) { /* plan_services kept n_listen in bounds */
        const funcd_netsvc_plan *pl = &ln->svc[i].plan;
        for (size_t j = 0; j < pl->n_binds && j < FUNCD_NETSVC_MAX_BINDS; j++)
            binds[n_binds++] = pl->binds[j];
        for (size_t j = 0; j < pl->n_listen; j++)
            listen[n_listen++] = pl->listen[j];
    }
    funcd_launch_spec spec = {
        .name = ln->name,
        .argv = (const char *const *)ln->argv,
        .env = (const char *const *)ln->env,
        .cwd = ln->cwd,
        .rootfs = ln->rootfs,
        .limits = ln->limits,
        .network = ln->network,
        .binds = binds,
        .n_binds = n_binds,
        .exec_shim = shim[0] ? shim : NULL,
        .memory_field = "spec.resources.memory",
        .stop_grace_ms = STOP_GRACE_MS,
        .local_api = (ln->invoke || ln->kv) && s->cfg.localapi,
        .listen = listen,
        .n_listen = n_listen,
    };
    funcd_launch_hooks hooks = {
        .data_size = sizeof(worker_ctx),
        .prepare = on_worker_prepare,
        .listening = on_worker_listening,
        .adopt = adopt_spare,
        .output = on_worker_output,
        .ready = on_worker_ready,
        .exited = on_worker_exited,
        .changed = on_workers_changed,
        .dispose = on_worker_dispose,
        .release = on_launch_released,
        .payload = ln,
    };
    atomic_fetch_add(&ln->refs, 1); /* the launch's, released with it */
    funcd_launch *workers;
    return funcd_launch_new(&workers, s->workers, &spec, &hooks) == 0 ? workers : NULL;
}

/* ---- functions -------------------------------------------------------- */

static fn_entry **find_entry(funcd_serving *s, const char *ns, const char *name)
{
    for (fn_entry **pp = &s->entries; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->ns, ns) == 0 && strcmp((*pp)->name, name) == 0)
            return pp;
    return NULL;
}

/* `pool` changes on the loop only; the metrics read the replicas of the
 * one published here (under the lock, with a reference of its own). */
static void publish_pool(funcd_serving *s, fn_entry *e)
{
    pthread_mutex_lock(&s->lock);
    funcd_pool *old = e->gauge_pool;
    e->gauge_pool = e->pool;
    if (e->gauge_pool)
        funcd_pool_ref(e->gauge_pool);
    pthread_mutex_unlock(&s->lock);
    if (old)
        funcd_pool_unref(old);
}

static void route(funcd_serving *s, fn_entry *e)
{
    publish_pool(s, e);
    if (!s->cfg.gateway)
        return;
    /* No edge (it could not be built): closed, as authenticated without
     * an authenticator is (503), never open. */
    static const funcd_edge closed = {.auth = FUNCD_EDGE_AUTH_AUTHENTICATED};
    const funcd_edge *edge = e->edge ? e->edge : &closed;
    funcd_route r = {.namespace_ = e->ns, .name = e->name, .timeout_ms = e->timeout_ms,
                     .target = e->pool ? funcd_serving_target(e->pool) : NULL, .edge = edge};
    /* A gateway older than the route's edge cannot check tokens: it gets no
     * way to the workers of a function that needs them (503), never an
     * open one. */
    if (s->cfg.gateway->version < 4 && edge->auth != FUNCD_EDGE_AUTH_OPEN)
        r.target = NULL;
    funcd_port_gateway_set_route(s->cfg.gateway, &r);
}

static void drop_pool(fn_entry *e, const char *why)
{
    if (e->pool)
        funcd_pool_close(e->pool, why);
    e->pool = NULL;
    funcd_launch_unref(e->workers);
    e->workers = NULL;
    launch_unref(e->ln);
    e->ln = NULL;
}

/* The entry of a function, made on first sight with its edge rebuilt from
 * `spec`; NULL (and `st` says why) when out of memory. */
static fn_entry *entry_for(funcd_serving *s, const char *ns, const char *name,
                           const cJSON *spec, funcd_serving_status *st)
{
    fn_entry **pp = find_entry(s, ns, name);
    fn_entry *e = pp ? *pp : NULL;
    if (!e) {
        e = calloc(1, sizeof(*e));
        if (!e || !(e->ns = strdup(ns)) || !(e->name = strdup(name)) ||
            !(e->logs = funcd_log_ring_new_stored(s->cfg.logstore, ns, name))) {
            if (e) {
                free(e->ns);
                free(e->name);
                free(e);
            }
            fail(st, "InternalError", "out of memory");
            return NULL;
        }
        e->metrics = funcd_metrics_fn_hold(s->cfg.metrics, ns, name);
        /* One budget per namespace, made with its first function. */
        ns_budget *nb = s->budgets;
        while (nb && strcmp(nb->ns, ns) != 0)
            nb = nb->next;
        if (!nb && (nb = calloc(1, sizeof(*nb))) && (nb->ns = strdup(ns))) {
            char what[300];
            snprintf(what, sizeof(what), "namespace %s", ns);
            nb->budget = funcd_pool_budget_new(s->cfg.namespace_max_workers, s->cfg.node_budget,
                                               what, "funcd --namespace-max-workers");
            nb->next = s->budgets;
            s->budgets = nb;
        } else if (nb && !nb->ns) {
            free(nb);
            nb = NULL;
        }
        if (nb && nb->budget)
            funcd_pool_budget_ref(e->budget = nb->budget);
        pthread_mutex_lock(&s->lock);
        e->next = s->entries;
        s->entries = e;
        pthread_mutex_unlock(&s->lock);
    }
    funcd_edge *edge = NULL;
    if (funcd_edge_build(cJSON_GetObjectItemCaseSensitive(spec, "edge"), s->cfg.edge_defaults,
                         &edge) == 0) {
        funcd_edge_free(e->edge);
        e->edge = edge;
    }
    return e;
}

void funcd_serving_refuse(funcd_serving *s, const char *ns, const char *name, const cJSON *fn,
                          const char *reason, const char *message, funcd_serving_status *st)
{
    memset(st, 0, sizeof(*st));
    fn_entry *e = entry_for(s, ns, name, cJSON_GetObjectItemCaseSensitive(fn, "spec"), st);
    if (!e)
        return;
    fail(st, reason, "%s", message);
    drop_pool(e, st->message);
    route(s, e); /* known but not runnable: 503 with the reason */
}

void funcd_serving_apply(funcd_serving *s, const char *ns, const char *name, const cJSON *fn,
                         funcd_serving_status *st)
{
    memset(st, 0, sizeof(*st));
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(fn, "spec");
    fn_entry *e = entry_for(s, ns, name, spec, st);
    if (!e)
        return;
    if (!s->cfg.runtime) {
        fail(st, "RuntimeUnavailable", "this platform has no runtime configured, so the function "
             "cannot run; configure a runtime backend");
        drop_pool(e, "the function has no runtime");
        route(s, e);
        return;
    }
    double gen = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(fn, "metadata"), "generation"));
    s->respec = e->generation > 0 && gen != e->generation;
    e->generation = gen;
    launch *ln = build_launch(s, ns, name, fn, e->logs, st);
    s->respec = 0;
    if (!ln) {
        drop_pool(e, st->message);
        route(s, e); /* known but not runnable: 503 with the reason */
        return;
    }
    funcd_pool_config pc = pool_config(spec, e->budget);
    e->timeout_ms = duration_at(spec, "timeout", 30000);
    if (ln->generic >= 0) {
        s->want_spare[ln->generic] = 1;
        ensure_spare(s, ln->generic);
    }
    if (e->pool && strcmp(e->ln->fingerprint, ln->fingerprint) == 0) {
        launch_unref(ln); /* same workers: only the limits may have changed */
        funcd_pool_configure(e->pool, &pc);
    } else {
        funcd_pool *old = e->pool;
        launch *old_ln = e->ln;
        funcd_launch *old_workers = e->workers;
        funcd_launch *workers = launch_workers(s, ln);
        funcd_pool_ops ops = workers ? funcd_launch_pool_ops(workers) : (funcd_pool_ops){0};
        if (!workers || funcd_pool_new(&e->pool, s->cfg.loop, &pc, &ops) < 0) {
            e->pool = old;
            funcd_launch_unref(workers);
            launch_unref(ln);
            fail(st, "InternalError", "%s", funcd_error_last()->message);
            return;
        }
        e->ln = ln;
        e->workers = workers;
        e->last_oom[0] = '\0'; /* a new version: its own history */
        route(s, e); /* new requests go to the new version at once */
        if (old) /* its workers' places go to the new version first as they exit */
            funcd_pool_close_for(old, e->pool, "the function was updated");
        launch_unref(old_ln);
        funcd_launch_unref(old_workers);
        if (ln->load_check)
            start_load_check(ln, e->pool);
    }
    route(s, e);
    st->has_pool = 1;
    funcd_pool_stats_get(e->pool, &st->stats);
    int load = e->ln->load_check ? atomic_load(&e->ln->load_state) : LOAD_OK;
    if (load == LOAD_FAILED) {
        fail(st, "HandlerLoadFailed", "%s", e->ln->load_error);
        return;
    }
    if (load == LOAD_PENDING && st->stats.budget_short && !st->stats.ready &&
        !st->stats.starting) {
        /* The check waits for a place (start_load_check). */
        fail(st, "WorkerLimit", "no worker may start to load the handler: %s",
             st->stats.budget_error);
        return;
    }
    if (load == LOAD_PENDING || load == LOAD_STOPPING) {
        fail(st, "Starting", "starting a worker to load the handler");
        return;
    }
    if (st->stats.failures && !st->stats.ready) {
        /* It is routed (requests still try, with backoff), but say why it fails. */
        fail(st, "WorkerFailed", "the last %u start(s) failed: %s", st->stats.failures,
             st->stats.last_error);
        return;
    }
    if (st->stats.budget_short && !st->stats.ready && !st->stats.starting) {
        /* It is routed (a place may come back), but nothing runs. */
        fail(st, "WorkerLimit", "no replica of minReplicas %u could start: %s",
             pc.min_workers, st->stats.budget_error);
        return;
    }
    snprintf(st->last_oom, sizeof(st->last_oom), "%s", e->last_oom);
    st->ready = 1;
    snprintf(st->reason, sizeof(st->reason), "Ready");
    char short_of[400] = "";
    if (st->stats.budget_short)
        snprintf(short_of, sizeof(short_of), "; %u replica(s) of minReplicas %u not started: %s",
                 st->stats.budget_short, pc.min_workers, st->stats.budget_error);
    snprintf(st->message, sizeof(st->message), "the function is served at /fn/%s/%s/%s%s%s", ns,
             name, e->last_oom[0] ? "; last OOMKilled: " : "", e->last_oom, short_of);
}

void funcd_serving_remove(funcd_serving *s, const char *ns, const char *name)
{
    if (s->cfg.sources)
        funcd_sources_forget(s->cfg.sources, ns, name);
    pthread_mutex_lock(&s->lock);
    fn_entry **pp = find_entry(s, ns, name);
    fn_entry *e = pp ? *pp : NULL;
    if (e)
        *pp = e->next;
    pthread_mutex_unlock(&s->lock);
    if (!e)
        return;
    if (s->cfg.gateway)
        funcd_port_gateway_remove_route(s->cfg.gateway, ns, name);
    drop_pool(e, "the function was deleted");
    funcd_pool_budget_unref(e->budget);
    funcd_edge_free(e->edge);
    if (e->gauge_pool) /* unlinked above: no reader can see it */
        funcd_pool_unref(e->gauge_pool);
    funcd_metrics_fn_drop(e->metrics);
    funcd_log_ring_unref(e->logs);
    free(e->ns);
    free(e->name);
    free(e);
}

funcd_log_ring *funcd_serving_logs(funcd_serving *s, const char *ns, const char *name)
{
    pthread_mutex_lock(&s->lock);
    fn_entry **pp = find_entry(s, ns, name);
    funcd_log_ring *r = pp ? (*pp)->logs : NULL;
    if (r)
        funcd_log_ring_ref(r);
    pthread_mutex_unlock(&s->lock);
    return r;
}

int funcd_serving_invocation_of(funcd_serving *s, const char *ns, const char *name,
                                const char *replica, char *out, size_t len)
{
    int found = 0;
    pthread_mutex_lock(&s->svc_lock);
    for (worker_ctx *wc = s->svc_workers; wc; wc = wc->svc_next) {
        if (strcmp(wc->pub.replica, replica) != 0 || strcmp(wc->svc_ln->name, name) != 0 ||
            strcmp(wc->svc_ln->ns, ns) != 0)
            continue;
        pthread_mutex_lock(&wc->pub.invocation_lock);
        if (wc->pub.in_flight == 1 && wc->pub.invocation_solo && wc->pub.invocation[0]) {
            snprintf(out, len, "%s", wc->pub.invocation);
            found = 1;
        }
        pthread_mutex_unlock(&wc->pub.invocation_lock);
        break;
    }
    pthread_mutex_unlock(&s->svc_lock);
    return found;
}

funcd_fn_target *funcd_serving_route(funcd_serving *s, const char *ns, const char *name,
                                     uint64_t *timeout_ms, int *known)
{
    pthread_mutex_lock(&s->lock);
    fn_entry **pp = find_entry(s, ns, name);
    fn_entry *e = pp ? *pp : NULL;
    funcd_pool *pool = e ? e->gauge_pool : NULL; /* the routed pool, published under the lock */
    if (pool)
        funcd_pool_ref(pool);
    *known = e != NULL;
    *timeout_ms = e ? e->timeout_ms : 0;
    pthread_mutex_unlock(&s->lock);
    return pool ? funcd_serving_target(pool) : NULL;
}

int funcd_serving_edge_of(funcd_serving *s, const char *ns, const char *name,
                          funcd_edge_auth *auth, uint64_t *max_body_bytes)
{
    pthread_mutex_lock(&s->lock);
    fn_entry **pp = find_entry(s, ns, name);
    fn_entry *e = pp ? *pp : NULL;
    /* No edge (it could not be built): closed, as route() makes it. */
    *auth = e && e->edge ? e->edge->auth : FUNCD_EDGE_AUTH_AUTHENTICATED;
    *max_body_bytes = e && e->edge ? e->edge->max_body_bytes : 0;
    pthread_mutex_unlock(&s->lock);
    return e ? 0 : -1;
}

/* ---- lifecycle -------------------------------------------------------- */

int funcd_serving_new(funcd_serving **out, const funcd_serving_config *cfg)
{
    *out = NULL;
    funcd_serving *s = calloc(1, sizeof(*s));
    if (!s)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the serving layer");
    s->cfg = *cfg;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->svc_lock, NULL);
    s->shim_dir = strdup(cfg->shim_dir ? cfg->shim_dir : "");
    if (asprintf(&s->run_dir, "%s/run", cfg->state_dir) < 0)
        s->run_dir = NULL;
    if (asprintf(&s->cache_dir, "%s/bundles", cfg->state_dir) < 0)
        s->cache_dir = NULL;
    if (!s->shim_dir || !s->run_dir || !s->cache_dir) {
        funcd_serving_free(s);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the serving layer");
    }
    if ((mkdir(s->run_dir, 0700) != 0 && errno != EEXIST) ||
        (mkdir(s->cache_dir, 0700) != 0 && errno != EEXIST)) {
        int err = errno;
        funcd_serving_free(s);
        return funcd_error_set(FUNCD_EIO, "cannot create the state directories under %s: %s",
                               cfg->state_dir, strerror(err));
    }
    if (funcd_workers_new(&s->workers, cfg->loop, cfg->runtime, s->run_dir) < 0) {
        funcd_serving_free(s);
        return -1;
    }
    for (int k = 0; k < GENERIC_KINDS; k++) {
        s->refill[k] = (struct refill){s, k, event_new(cfg->loop, -1, 0, on_refill, &s->refill[k])};
        if (!s->refill[k].ev) {
            funcd_serving_free(s);
            return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the serving layer");
        }
    }
    *out = s;
    return 0;
}

void funcd_serving_close(funcd_serving *s)
{
    if (!s)
        return;
    s->closing = 1;
    while (s->entries)
        funcd_serving_remove(s, s->entries->ns, s->entries->name);
    for (int k = 0; k < GENERIC_KINDS; k++)
        if (s->spares[k] && s->spares[k]->proc)
            funcd_port_runtime_stop(s->cfg.runtime, s->spares[k]->proc, 0);
}

unsigned funcd_serving_live_workers(const funcd_serving *s)
{
    return s ? funcd_workers_live(s->workers) + s->live_spares : 0;
}

unsigned funcd_serving_busy(funcd_serving *s)
{
    unsigned busy = 0;
    if (!s)
        return 0;
    pthread_mutex_lock(&s->lock);
    for (fn_entry *e = s->entries; e; e = e->next) {
        funcd_pool_stats st;
        if (!e->pool)
            continue;
        funcd_pool_stats_get(e->pool, &st);
        busy += st.in_flight + st.waiting;
    }
    pthread_mutex_unlock(&s->lock);
    return busy;
}

void funcd_serving_gauges(void *payload, funcd_metrics_gauge_put put, void *ctx)
{
    funcd_serving *s = payload;
    pthread_mutex_lock(&s->lock);
    for (fn_entry *e = s->entries; e; e = e->next) {
        funcd_pool_stats st = {0};
        if (e->gauge_pool)
            funcd_pool_stats_get(e->gauge_pool, &st);
        funcd_metrics_gauges g = {e->ns, e->name, st.ready, st.starting, st.stopping, st.waiting,
                                  st.in_flight};
        put(ctx, &g);
    }
    pthread_mutex_unlock(&s->lock);
}

void funcd_serving_free(funcd_serving *s)
{
    if (!s)
        return;
    funcd_serving_close(s);
    funcd_workers_free(s->workers); /* kills what still runs */
    while (s->budgets) {
        ns_budget *nb = s->budgets;
        s->budgets = nb->next;
        funcd_pool_budget_unref(nb->budget);
        free(nb->ns);
        free(nb);
    }
    for (int k = 0; k < GENERIC_KINDS; k++)
        if (s->refill[k].ev)
            event_free(s->refill[k].ev);
    if (s->run_dir)
        rmdir(s->run_dir);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->svc_lock);
    free(s->shim_dir);
    free(s->run_dir);
    free(s->cache_dir);
    free(s);
}
