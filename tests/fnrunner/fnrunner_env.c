#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* posix_spawn_file_actions_addchdir_np, pipe2 */
#endif
#include "fnrunner_env.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api/api.h"
#include "funcd/sys/error.h"
#include "objects/objects.h"
#include "util/buf.h"
#include "util/misc.h"

#ifndef FNRUNNER_SRC
#error "FNRUNNER_SRC (tests/fnrunner in the source tree) must be defined by the build"
#endif
#ifndef FNRUNNER_ADD_ANNOTATION
#error "FNRUNNER_ADD_ANNOTATION (the built C test function) must be defined by the build"
#endif
#ifndef FNRUNNER_SHIM_DIR
#error "FNRUNNER_SHIM_DIR (the build's shims) must be defined by the build"
#endif

#define CLIENT_JS FNRUNNER_SRC "/client.js"
#define CLIENT_TIMEOUT_MS 60000
#define PROBE_TIMEOUT_MS 30000
/* Within the meson timeout of a case (120 s), with room for the case. */
#define NPM_TIMEOUT_MS 90000

extern char **environ;

static char node_path[PATH_MAX];
static atomic_uint upper_calls;

/* ---- child processes ---------------------------------------------------- */

/*
 * Runs `argv` in `cwd` (NULL: ours) with stdin from /dev/null, stdout into
 * `out` (NULL: onto our stderr, where meson's log keeps it) and stderr
 * onto ours. Kills it after `timeout_ms`. Returns its exit status, 128 +
 * signal when killed by one, -1 when it could not start, -2 on timeout.
 */
static int run(const char *const *argv, const char *cwd, funcd_buf *out, int timeout_ms)
{
    int pfd[2] = {-1, -1};
    if (out && pipe2(pfd, O_CLOEXEC) != 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (out)
        posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    else
        posix_spawn_file_actions_adddup2(&fa, 2, 1);
    if (cwd)
        posix_spawn_file_actions_addchdir_np(&fa, cwd);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (out)
        close(pfd[1]);
    if (rc != 0) {
        fprintf(stderr, "  cannot start %s: %s\n", argv[0], strerror(rc));
        if (out)
            close(pfd[0]);
        return -1;
    }
    int64_t deadline = e2e_now_ms() + timeout_ms;
    int timed_out = 0;
    while (out && !timed_out) {
        struct pollfd p = {pfd[0], POLLIN, 0};
        int left = (int)(deadline - e2e_now_ms());
        if (left <= 0 || poll(&p, 1, left) == 0) {
            timed_out = 1;
            break;
        }
        char chunk[65536];
        ssize_t n = read(pfd[0], chunk, sizeof(chunk));
        if (n > 0)
            funcd_buf_append(out, chunk, (size_t)n);
        else if (n == 0 || errno != EINTR)
            break;
    }
    if (out)
        close(pfd[0]);
    if (timed_out)
        kill(pid, SIGKILL);
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR)
            return -1;
        if (!timed_out && e2e_now_ms() >= deadline) {
            timed_out = 1;
            kill(pid, SIGKILL);
        }
        env_sleep_ms(5);
    }
    if (timed_out)
        return -2;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int find_program(const char *name, char *out, size_t out_len)
{
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t n = strcspn(path, ":");
        snprintf(out, out_len, "%.*s/%s", (int)n, path, name);
        if (n && access(out, X_OK) == 0)
            return 0;
        path += n + (path[n] == ':');
    }
    return -1;
}

static int probe_client(void)
{
    const char *argv[] = {node_path, CLIENT_JS, "-", "probe", NULL};
    funcd_buf out = FUNCD_BUF_INIT;
    int rc = run(argv, NULL, &out, PROBE_TIMEOUT_MS);
    funcd_buf_free(&out);
    return rc;
}

/* npm ci under a lock on the directory, so parallel cases install once. */
static int install_client(void)
{
    char npm[PATH_MAX];
    if (find_program("npm", npm, sizeof(npm)) < 0) {
        printf("SKIP: the gRPC client's packages are missing and npm is not on PATH "
               "(install nodejs and npm)\n");
        return -1;
    }
    int dir = open(FNRUNNER_SRC, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0 || flock(dir, LOCK_EX) != 0) {
        printf("SKIP: cannot lock %s: %s\n", FNRUNNER_SRC, strerror(errno));
        if (dir >= 0)
            close(dir);
        return -1;
    }
    int rc = 0;
    if (probe_client() != 0) {
        fprintf(stderr, "  installing the gRPC client: npm ci in %s\n", FNRUNNER_SRC);
        const char *argv[] = {npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts",
                              "--fetch-retries=1", "--fetch-timeout=30000", NULL};
        int st = run(argv, FNRUNNER_SRC, NULL, NPM_TIMEOUT_MS);
        if (st != 0) {
            printf("SKIP: npm ci %s (is the npm registry reachable?)\n",
                   st == -2 ? "timed out" : "failed");
            rc = -1;
        } else if (probe_client() != 0) {
            printf("SKIP: @grpc/grpc-js does not load even after npm ci\n");
            rc = -1;
        }
    }
    flock(dir, LOCK_UN);
    close(dir);
    return rc;
}

int fr_client_setup(void)
{
    const char *node = getenv("FUNCD_NODE");
    if (node && *node)
        snprintf(node_path, sizeof(node_path), "%s", node);
    else if (find_program("node", node_path, sizeof(node_path)) < 0) {
        printf("SKIP: node is not installed (install nodejs and npm)\n");
        return -1;
    }
    int rc = probe_client();
    if (rc == 0)
        return 0;
    if (rc != 3) {
        printf("SKIP: %s does not run client.js (status %d)\n", node_path, rc);
        return -1;
    }
    return install_client();
}

/* ---- the functions directory -------------------------------------------- */

static int copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -1;
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
    int rc = out < 0 ? -1 : 0;
    char buf[65536];
    ssize_t n;
    while (rc == 0 && (n = read(in, buf, sizeof(buf))) > 0)
        if (write(out, buf, (size_t)n) != n)
            rc = -1;
    close(in);
    if (out >= 0 && close(out) != 0)
        rc = -1;
    return rc;
}

/* Binaries for binaryExecutor under bin/, and an image directory holding
 * `function` per podExecutor image (the worker evaluator's layout). */
static const struct {
    const char *source; /* under tests/fnrunner/functions, or the built one */
    const char *exec_as;
    const char *pod_as;
} function_files[] = {
    {"passthrough.sh", "bin/passthrough.sh", "passthrough"},
    {"fail.sh", "bin/fail.sh", "fail"},
    {"sleep.sh", "bin/sleep.sh", "sleep"},
    {"set-label.py", "bin/set-label.py", "set-label"},
    {NULL, "bin/add-annotation", "add-annotation"},
    {"passthrough.sh", NULL, "ttl"},
    {"passthrough.sh", NULL, "warm-a"},
    {"passthrough.sh", NULL, "warm-b"},
    {"passthrough.sh", NULL, "late"},
    {"overrides.sh", NULL, "overrides"},
};

static int populate(const char *fns)
{
    char from[PATH_MAX], to[PATH_MAX];
    snprintf(to, sizeof(to), "%s/bin", fns);
    if (mkdir(to, 0755) != 0)
        return -1;
    for (size_t i = 0; i < sizeof(function_files) / sizeof(function_files[0]); i++) {
        if (function_files[i].source)
            snprintf(from, sizeof(from), "%s/functions/%s", FNRUNNER_SRC,
                     function_files[i].source);
        else
            snprintf(from, sizeof(from), "%s", FNRUNNER_ADD_ANNOTATION);
        if (function_files[i].exec_as) {
            snprintf(to, sizeof(to), "%s/%s", fns, function_files[i].exec_as);
            if (copy_file(from, to) < 0)
                return -1;
        }
        snprintf(to, sizeof(to), "%s/%s", fns, function_files[i].pod_as);
        if (mkdir(to, 0755) != 0)
            return -1;
        snprintf(to, sizeof(to), "%s/%s/function", fns, function_files[i].pod_as);
        if (copy_file(from, to) < 0)
            return -1;
    }
    return 0;
}

/* ---- builtins registered by the test host ------------------------------- */

static char *copy_text(const char *s, size_t *len)
{
    *len = strlen(s);
    return strdup(s);
}

static int upper(const char *in, size_t in_len, char **out, size_t *out_len, char **log,
                 size_t *log_len, void *payload)
{
    atomic_fetch_add(&upper_calls, 1);
    cJSON *rl = cJSON_ParseWithLength(in, in_len);
    if (!cJSON_IsObject(rl)) {
        cJSON_Delete(rl);
        *log = copy_text("upper: the input is not a JSON ResourceList\n", log_len);
        return 1;
    }
    cJSON *item;
    cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(rl, "items"))
    {
        cJSON *v;
        cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(item, "data"))
        {
            for (char *c = cJSON_IsString(v) ? v->valuestring : ""; *c; c++)
                *c = (char)toupper((unsigned char)*c);
        }
    }
    *out = cJSON_PrintUnformatted(rl);
    *out_len = *out ? strlen(*out) : 0;
    cJSON_Delete(rl);
    *log = copy_text("upper: done\n", log_len);
    return *out ? 0 : 1;
}

static int echo(const char *in, size_t in_len, char **out, size_t *out_len, char **log,
                size_t *log_len, void *payload)
{
    *out = malloc(in_len ? in_len : 1);
    if (!*out)
        return 1;
    memcpy(*out, in, in_len);
    *out_len = in_len;
    return 0;
}

static int big(const char *in, size_t in_len, char **out, size_t *out_len, char **log,
               size_t *log_len, void *payload)
{
    *out = malloc(BIG_OUTPUT);
    if (!*out)
        return 1;
    memset(*out, ' ', BIG_OUTPUT);
    *out_len = BIG_OUTPUT;
    return 0;
}

unsigned fr_upper_calls(void)
{
    return atomic_load(&upper_calls);
}

/* ---- the platform -------------------------------------------------------- */

static void log_to_stderr(funcd_log_level level, const char *message, void *payload)
{
    fprintf(stderr, "    [funcd %s] %s\n", level >= FUNCD_LOG_ERROR ? "error" : "warn", message);
}

static const char *const exec_configs[][2] = {
    {"passthrough", "bin/passthrough.sh"}, {"fail", "bin/fail.sh"},
    {"sleep", "bin/sleep.sh"},             {"set-label", "bin/set-label.py"},
    {"add-annotation", "bin/add-annotation"},
};
static const char *const pod_configs[] = {"passthrough", "fail", "sleep", "set-label",
                                          "add-annotation"};

static int prewarm(funcd_store *store, const char *name)
{
    char json[512];
    snprintf(json, sizeof(json),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"FunctionConfig\",\"metadata\":{"
             "\"name\":\"%s\"},\"spec\":{\"image\":\"%s\",\"prefixes\":[\"example.com/pods\"],"
             "\"podExecutor\":{\"tags\":[\"v1\"]}}}",
             name, name);
    cJSON *obj = cJSON_Parse(json), *stored = NULL;
    int rc = obj ? funcd_objects_create(store, funcd_kind_by_kind("FunctionConfig"), "default",
                                         obj, &stored)
                 : FUNCD_ENOMEM;
    cJSON_Delete(obj);
    cJSON_Delete(stored);
    return rc;
}

static int make_configs(fr *f, unsigned what)
{
    char spec[512];
    for (size_t i = 0; (what & FR_EXEC_CONFIGS) && i < sizeof(exec_configs) / sizeof(*exec_configs);
         i++) {
        char name[64];
        snprintf(name, sizeof(name), "exec-%s", exec_configs[i][0]);
        snprintf(spec, sizeof(spec),
                 "{\"image\":\"%s\",\"prefixes\":[\"example.com/fns\"],"
                 "\"binaryExecutor\":{\"tags\":[\"v1\"],\"path\":\"%s\"}}",
                 exec_configs[i][0], exec_configs[i][1]);
        if (fr_config(f, name, spec) < 0)
            return -1;
    }
    for (size_t i = 0; (what & FR_POD_CONFIGS) && i < sizeof(pod_configs) / sizeof(*pod_configs);
         i++) {
        char name[64];
        snprintf(name, sizeof(name), "pod-%s", pod_configs[i]);
        snprintf(spec, sizeof(spec),
                 "{\"image\":\"%s\",\"prefixes\":[\"example.com/pods\"],"
                 "\"podExecutor\":{\"tags\":[\"v1\"]}}",
                 pod_configs[i]);
        if (fr_config(f, name, spec) < 0)
            return -1;
    }
    return 0;
}

int fr_up(fr *f, unsigned what)
{
    memset(f, 0, sizeof(*f));
    f->keep = cJSON_CreateArray();
    const char *tmp = getenv("TMPDIR");
    snprintf(f->fns, sizeof(f->fns), "%s/funcd-fnrun-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    /* 0755: a sandboxed worker sees --functions-dir with its host owners. */
    if (!f->keep || !mkdtemp(f->fns) || chmod(f->fns, 0755) != 0) {
        f->fns[0] = '\0';
        return funcd_error_set(FUNCD_EIO, "cannot make a functions directory: %s",
                               strerror(errno));
    }
    if (populate(f->fns) < 0)
        return funcd_error_set(FUNCD_EIO, "cannot fill %s: %s", f->fns, strerror(errno));
    if (what & FR_TLS) {
        snprintf(f->tls, sizeof(f->tls), "%s/funcd-fnrun-tls-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(f->tls)) {
            f->tls[0] = '\0';
            return funcd_error_set(FUNCD_EIO, "cannot make a TLS directory: %s", strerror(errno));
        }
    }
    funcd_store *store = NULL;
    int rc = funcd_store_memory_new(&store, 0);
    if (rc == 0 && (what & FR_PREWARM))
        rc = prewarm(store, "warm-a");
    if (rc == 0 && (what & FR_PREWARM))
        rc = prewarm(store, "warm-b");
    if (rc < 0) {
        if (store)
            store->free(store);
        return rc;
    }
    rc = funcd_platform_new(&f->p, funcd_in_memory(), funcd_with_store(store),
                            funcd_with_functions_dir(f->fns),
                            funcd_with_shim_dir(FNRUNNER_SHIM_DIR),
                            funcd_with_builtin(IMG_UPPER, upper, NULL),
                            funcd_with_builtin(IMG_ECHO, echo, NULL),
                            funcd_with_builtin(IMG_BIG, big, NULL),
                            funcd_with_logger(log_to_stderr, FUNCD_LOG_WARN, NULL),
                            f->tls[0] ? funcd_with_tls_self_signed(f->tls) : NULL);
    if (rc < 0 || (rc = funcd_platform_start(f->p)) < 0)
        return rc;
    f->cacert = f->tls[0] ? funcd_platform_tls_cert_file(f->p) : NULL;
    snprintf(f->addr, sizeof(f->addr), "%s", funcd_platform_fn_runner_addr(f->p));
    char base[160];
    snprintf(base, sizeof(base), "http://%s", funcd_platform_addr(f->p));
    if (!(f->h = e2e_http_new(base)))
        return FUNCD_ENOMEM;
    if (make_configs(f, what) < 0)
        return funcd_error_set(FUNCD_EIO, "cannot create the FunctionConfigs");
    return 0;
}

void fr_down(fr *f)
{
    e2e_http_free(f->h);
    f->h = NULL;
    funcd_platform_free(f->p);
    f->p = NULL;
    if (f->fns[0])
        funcd_remove_tree(f->fns);
    f->fns[0] = '\0';
    if (f->tls[0])
        funcd_remove_tree(f->tls);
    f->tls[0] = '\0';
    f->cacert = NULL;
    cJSON_Delete(f->keep);
    f->keep = NULL;
}

int fr_config(fr *f, const char *name, const char *spec_json)
{
    funcd_buf body = FUNCD_BUF_INIT;
    funcd_buf_printf(&body,
                     "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"FunctionConfig\","
                     "\"metadata\":{\"name\":\"%s\"},\"spec\":%s}",
                     name, spec_json);
    e2e_resp r = E2E_RESP_INIT;
    long status = e2e_http_do(f->h, "POST", NS("default") "/functionconfigs", DEV_TOKEN,
                              body.data ? body.data : "", &r);
    if (status != 201)
        fprintf(stderr, "  FunctionConfig %s: HTTP %ld: %.500s\n", name, status, r.body);
    e2e_resp_free(&r);
    funcd_buf_free(&body);
    return status == 201 ? 0 : -1;
}

/* ---- the gRPC client ------------------------------------------------------ */

static cJSON *client_v(fr *f, const char *op, va_list ap)
{
    const char *argv[32] = {node_path, CLIENT_JS, f->addr, op};
    size_t n = 4;
    const char *a;
    while ((a = va_arg(ap, const char *)) && n < sizeof(argv) / sizeof(argv[0]) - 3)
        argv[n++] = a;
    if (f->cacert) {
        argv[n++] = "--cacert";
        argv[n++] = f->cacert;
    }
    argv[n] = NULL;
    funcd_buf out = FUNCD_BUF_INIT;
    int rc = run(argv, NULL, &out, CLIENT_TIMEOUT_MS);
    cJSON *lines = NULL;
    if (rc != 0) {
        fprintf(stderr, "  client.js %s: %s %d; stdout: %.300s\n", op,
                rc == -2 ? "timed out after" : "exit status", rc == -2 ? CLIENT_TIMEOUT_MS : rc,
                out.data ? out.data : "");
    } else if ((lines = cJSON_CreateArray())) {
        cJSON_AddItemToArray(f->keep, lines);
        for (char *line = out.data, *end; line && *line; line = end + (*end != '\0')) {
            end = line + strcspn(line, "\n");
            cJSON *j = cJSON_ParseWithLength(line, (size_t)(end - line));
            if (j)
                cJSON_AddItemToArray(lines, j);
        }
    }
    funcd_buf_free(&out);
    return lines;
}

cJSON *fr_client(fr *f, const char *op, ...)
{
    va_list ap;
    va_start(ap, op);
    cJSON *lines = client_v(f, op, ap);
    va_end(ap);
    return lines;
}

cJSON *fr_call(fr *f, const char *op, ...)
{
    va_list ap;
    va_start(ap, op);
    cJSON *lines = client_v(f, op, ap);
    va_end(ap);
    return cJSON_GetArrayItem(lines, 0);
}

int fr_code(const cJSON *a)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(a, "code");
    return cJSON_IsNumber(c) ? c->valueint : -1;
}

double fr_ms(const cJSON *a)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(a, "ms");
    return cJSON_IsNumber(c) ? c->valuedouble : -1;
}

static const char *string_of(const cJSON *a, const char *name)
{
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(a, name));
    return s ? s : "";
}

const char *fr_details(const cJSON *a) { return string_of(a, "details"); }
const char *fr_output(const cJSON *a) { return string_of(a, "resource_list"); }
const char *fr_log(const cJSON *a) { return string_of(a, "log"); }

/* ---- fixtures ---------------------------------------------------------------- */

const char *fr_fixture_input(const char *name)
{
    static _Thread_local char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/fixtures/%s/input.json", FNRUNNER_SRC, name);
    if (access(path, R_OK) != 0)
        snprintf(path, sizeof(path), "%s/fixtures/%s/input.yaml", FNRUNNER_SRC, name);
    return path;
}

static cJSON *decode_file(const char *path, char *why, size_t why_len)
{
    FILE *fp = fopen(path, "re");
    if (!fp) {
        snprintf(why, why_len, "cannot open %s", path);
        return NULL;
    }
    funcd_buf b = FUNCD_BUF_INIT;
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), fp)) > 0)
        funcd_buf_append(&b, chunk, n);
    fclose(fp);
    cJSON *obj = NULL;
    funcd_api_error err;
    if (funcd_api_decode(b.data ? b.data : "", b.len, &obj, &err) < 0)
        snprintf(why, why_len, "%s does not parse: %s", path, err.message);
    funcd_buf_free(&b);
    return obj;
}

const char *fr_fixture_mismatch(const char *name, const char *output)
{
    static _Thread_local char why[8192];
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/fixtures/%s/expected.json", FNRUNNER_SRC, name);
    if (access(path, R_OK) != 0)
        snprintf(path, sizeof(path), "%s/fixtures/%s/expected.yaml", FNRUNNER_SRC, name);
    cJSON *want = decode_file(path, why, sizeof(why)), *got = NULL;
    if (!want)
        return why;
    funcd_api_error err;
    if (funcd_api_decode(output, strlen(output), &got, &err) < 0) {
        snprintf(why, sizeof(why), "the output does not parse (%s): %.1500s", err.message, output);
    } else if (!cJSON_Compare(want, got, 1)) {
        char *w = cJSON_PrintUnformatted(want), *g = cJSON_PrintUnformatted(got);
        snprintf(why, sizeof(why), "output differs from %.500s\n    want %.1800s\n    got  %.1800s",
                 path, w ? w : "?", g ? g : "?");
        free(w);
        free(g);
    } else {
        why[0] = '\0';
    }
    cJSON_Delete(want);
    cJSON_Delete(got);
    return why[0] ? why : NULL;
}

/* ---- processes -------------------------------------------------------------- */

static pid_t parent_of(const char *pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%s/stat", pid);
    FILE *fp = fopen(path, "re");
    if (!fp)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    /* "pid (comm) S ppid ...": comm may hold spaces and parentheses. */
    char *close_paren = strrchr(buf, ')');
    char state;
    long ppid;
    if (!close_paren || sscanf(close_paren + 1, " %c %ld", &state, &ppid) != 2)
        return -1;
    return state == 'Z' ? -1 : (pid_t)ppid;
}

/* The command line with its NULs as spaces; "" for kernel threads. */
static void cmdline_of(const char *pid, char *out, size_t out_len)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%.32s/cmdline", pid);
    out[0] = '\0';
    FILE *fp = fopen(path, "re");
    if (!fp)
        return;
    size_t n = fread(out, 1, out_len - 1, fp);
    fclose(fp);
    out[n] = '\0';
    for (size_t i = 0; n && i < n - 1; i++)
        if (out[i] == '\0')
            out[i] = ' ';
}

static int is_pid(const char *name)
{
    return *name >= '0' && *name <= '9';
}

/* Whether `pid` descends from this process (through any number of
 * generations). A zombie has no parent here: it is not counted. */
static int is_descendant(const char *pid)
{
    pid_t me = getpid();
    char at[24];
    snprintf(at, sizeof(at), "%s", pid);
    for (int depth = 0; depth < 64; depth++) {
        pid_t parent = parent_of(at);
        if (parent == me)
            return 1;
        if (parent <= 1)
            return 0;
        snprintf(at, sizeof(at), "%d", (int)parent);
    }
    return 0;
}

/* The value of `name` in the environment of `pid` into `out`; 0 when set. */
static int environ_value(const char *pid, const char *name, char *out, size_t out_len)
{
    char path[64];
    static _Thread_local char env[65536];
    snprintf(path, sizeof(path), "/proc/%.32s/environ", pid);
    FILE *fp = fopen(path, "re");
    if (!fp)
        return -1;
    size_t n = fread(env, 1, sizeof(env) - 1, fp);
    fclose(fp);
    env[n] = '\0';
    size_t name_len = strlen(name);
    for (size_t at = 0; at < n; at += strlen(env + at) + 1) {
        if (strncmp(env + at, name, name_len) == 0 && env[at + name_len] == '=') {
            snprintf(out, out_len, "%s", env + at + name_len + 1);
            return 0;
        }
    }
    return -1;
}

static int environ_has(const char *pid, const char *name, const char *value)
{
    char got[512];
    return environ_value(pid, name, got, sizeof(got)) == 0 && strcmp(got, value) == 0;
}

static void comm_of(const char *pid, char *out, size_t out_len)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%.32s/comm", pid);
    out[0] = '\0';
    FILE *fp = fopen(path, "re");
    if (!fp)
        return;
    if (fgets(out, (int)out_len, fp))
        out[strcspn(out, "\n")] = '\0';
    fclose(fp);
}

/* The shim itself, not a function process it started (those inherit its
 * environment): argv[0] is funcd-exec. */
static int is_shim(const char *pid)
{
    char cmd[4096];
    cmdline_of(pid, cmd, sizeof(cmd));
    size_t argv0 = strcspn(cmd, " ");
    const char *base = cmd;
    for (size_t i = 0; i < argv0; i++)
        if (cmd[i] == '/')
            base = cmd + i + 1;
    return (size_t)(cmd + argv0 - base) == strlen("funcd-exec") &&
           strncmp(base, "funcd-exec", strlen("funcd-exec")) == 0;
}

/* Calls `fn` for each descendant process whose environment has name=value
 * (value NULL: any descendant); stops when it returns non-zero. */
static void each_descendant(const char *name, const char *value,
                            int (*fn)(const char *pid, void *payload), void *payload)
{
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (!is_pid(de->d_name) || (name && !environ_has(de->d_name, name, value)) ||
            !is_descendant(de->d_name))
            continue;
        if (fn(de->d_name, payload))
            break;
    }
    if (d)
        closedir(d);
}

typedef struct pid_list {
    pid_t *out;
    size_t n, max;
} pid_list;

static int add_shim(const char *pid, void *payload)
{
    pid_list *l = payload;
    if (is_shim(pid) && l->n < l->max)
        l->out[l->n++] = (pid_t)atol(pid);
    return 0;
}

size_t fr_workers(const char *function, pid_t *out, size_t max)
{
    pid_list l = {out, 0, max};
    each_descendant("FUNCD_FUNCTION", function, add_shim, &l);
    return l.n;
}

pid_t fr_replica_pid(const char *replica)
{
    pid_t pid = 0;
    pid_list l = {&pid, 0, 1};
    each_descendant("FUNCD_REPLICA", replica, add_shim, &l);
    return pid;
}

const char *fr_replica_of(pid_t pid, char *out, size_t out_len)
{
    char name[24];
    snprintf(name, sizeof(name), "%d", (int)pid);
    if (environ_value(name, "FUNCD_REPLICA", out, out_len) < 0)
        out[0] = '\0';
    return out;
}

typedef struct description {
    char *out;
    size_t len, used, n;
} description;

static int describe(const char *pid, void *payload)
{
    description *d = payload;
    char comm[64], cmd[256];
    comm_of(pid, comm, sizeof(comm));
    cmdline_of(pid, cmd, sizeof(cmd));
    d->n++;
    if (d->out && d->used < d->len) {
        int w = snprintf(d->out + d->used, d->len - d->used, "%s%s [%s] (%s)",
                         d->used ? ", " : "", pid, comm, cmd);
        d->used += w > 0 ? (size_t)w : 0;
    }
    return 0;
}

size_t fr_function_processes(const char *function, char *out, size_t out_len)
{
    description d = {out, out_len, 0, 0};
    if (out_len)
        out[0] = '\0';
    each_descendant("FUNCD_FUNCTION", function, describe, &d);
    return d.n;
}

pid_t fr_sandbox_of(pid_t pid)
{
    char name[24], comm[64];
    snprintf(name, sizeof(name), "%d", (int)pid);
    pid_t parent = parent_of(name);
    if (parent <= 1)
        return 0;
    snprintf(name, sizeof(name), "%d", (int)parent);
    comm_of(name, comm, sizeof(comm));
    return strcmp(comm, "funcd-sandbox") == 0 ? parent : 0;
}

size_t fr_describe_descendants(char *out, size_t out_len)
{
    description d = {out, out_len, 0, 0};
    if (out_len)
        out[0] = '\0';
    each_descendant(NULL, NULL, describe, &d);
    return d.n;
}

int fr_process_with_cmdline(const char *argv0, const char *arg)
{
    char want[256];
    snprintf(want, sizeof(want), "%s %s", argv0, arg);
    int found = 0;
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && !found && (de = readdir(d))) {
        char cmd[256];
        if (!is_pid(de->d_name))
            continue;
        cmdline_of(de->d_name, cmd, sizeof(cmd));
        found = strcmp(cmd, want) == 0;
    }
    if (d)
        closedir(d);
    return found;
}

int fr_pid_gone(pid_t pid)
{
    return kill(pid, 0) != 0 && errno == ESRCH;
}

int fr_wait_gone(pid_t pid, int timeout_ms)
{
    int64_t deadline = e2e_now_ms() + timeout_ms;
    while (!fr_pid_gone(pid)) {
        if (e2e_now_ms() >= deadline)
            return 0;
        env_sleep_ms(5);
    }
    return 1;
}

const char *fr_logged_replica(const cJSON *answer)
{
    static _Thread_local char replica[128];
    const char *p = strstr(fr_log(answer), "replica=");
    size_t n = p ? strcspn(p + 8, " \t\r\n") : 0;
    snprintf(replica, sizeof(replica), "%.*s", (int)n, p ? p + 8 : "");
    return replica;
}
