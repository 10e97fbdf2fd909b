#include "test_serving_common.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/buf.h"

#ifndef SERVING_FIXTURES
#error "SERVING_FIXTURES (tests/e2e/fixtures) must be defined by the build"
#endif
#ifndef SERVING_WORKER
#error "SERVING_WORKER (the built fixture worker) must be defined by the build"
#endif
#ifndef SERVING_SHIM_DIR
#error "SERVING_SHIM_DIR (the build's shims) must be defined by the build"
#endif

#define POLL_MS 2
#define MAX_DIRS 16

static char *made_dirs[MAX_DIRS];
static size_t n_made_dirs;

void sv_init(void)
{
    const char *shims = getenv("FUNCD_SHIM_DIR");
    if (!shims || !*shims)
        setenv("FUNCD_SHIM_DIR", SERVING_SHIM_DIR, 1);
    signal(SIGPIPE, SIG_IGN);
    e2e_client_global_init();
}

/* ---- fixtures and processes ------------------------------------------- */

static int copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -1;
    struct stat st;
    if (fstat(in, &st) != 0) {
        close(in);
        return -1;
    }
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, st.st_mode & 0777);
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

int sv_tempdir(char *out, size_t out_len)
{
    const char *tmp = getenv("TMPDIR");
    if (n_made_dirs == MAX_DIRS)
        return -1;
    snprintf(out, out_len, "%s/funcd-serving-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    /* 0755, as an operator's function directory would be: a sandboxed
     * worker sees it with its host owners (docs/security.md). */
    if (!mkdtemp(out) || chmod(out, 0755) != 0)
        return -1;
    made_dirs[n_made_dirs++] = strdup(out);
    return 0;
}

int sv_have_interpreters(void)
{
    static const char *const nodes[] = {"/usr/bin/node", "/usr/local/bin/node", "/usr/bin/nodejs"};
    int node = 0;
    for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++)
        node |= access(nodes[i], X_OK) == 0;
    if (node && access("/usr/bin/python3", X_OK) == 0)
        return 1;
    fprintf(stderr, "SKIP: python3 or node is not installed on this host\n");
    return 0;
}

int sv_code_dir(char *dir, size_t n, const char *name, const char *content)
{
    char path[512];
    if (sv_tempdir(dir, n) != 0)
        return -1;
    if (!name)
        return 0;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(content, f);
    return fclose(f) == 0 ? 0 : -1;
}

int sv_fixture(const char *name, char *out, size_t out_len)
{
    if (sv_tempdir(out, out_len) < 0)
        return -1;
    char src[512], from[1024], to[1024];
    snprintf(src, sizeof(src), "%s/%s", SERVING_FIXTURES, name);
    if (strcmp(name, "native") == 0) {
        snprintf(to, sizeof(to), "%s/worker", out);
        return copy_file(SERVING_WORKER, to);
    }
    DIR *d = opendir(src);
    if (!d)
        return -1;
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(from, sizeof(from), "%s/%s", src, de->d_name);
        snprintf(to, sizeof(to), "%s/%s", out, de->d_name);
        rc = copy_file(from, to);
    }
    closedir(d);
    return rc;
}

/* Fixture directories are flat, but a test may leave a subdirectory. */
static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        char path[1024];
        while ((de = readdir(d))) {
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                continue;
            snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
            struct stat st;
            if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
                remove_tree(path);
            else
                unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

void sv_cleanup(void)
{
    while (n_made_dirs) {
        char *dir = made_dirs[--n_made_dirs];
        remove_tree(dir);
        free(dir);
    }
}

/* What the tests need of /proc/<pid>/stat. */
typedef struct proc_info {
    pid_t pid, ppid;
    char state;
    unsigned long long start;
    char comm[16];
} proc_info;

/* "pid (comm) S ppid ... starttime(22) ...": 0, or -1 with errno (ENOENT:
 * no such process). */
static int proc_stat(pid_t pid, proc_info *out)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* comm may hold spaces and parentheses: it ends at the last ')'. */
    char *open = strchr(buf, '('), *close = strrchr(buf, ')');
    if (!open || !close || close < open) {
        errno = EINVAL;
        return -1;
    }
    snprintf(out->comm, sizeof(out->comm), "%.*s", (int)(close - open - 1), open + 1);
    out->pid = pid;
    char *save = NULL, *tok = strtok_r(close + 1, " ", &save);
    for (int field = 3; tok; field++, tok = strtok_r(NULL, " ", &save)) {
        if (field == 3)
            out->state = tok[0];
        else if (field == 4)
            out->ppid = (pid_t)strtol(tok, NULL, 10);
        else if (field == 22) {
            out->start = strtoull(tok, NULL, 10);
            return 0;
        }
    }
    errno = EINVAL;
    return -1;
}

typedef struct proc_table {
    proc_info *v;
    size_t n;
} proc_table;

static int by_pid(const void *a, const void *b)
{
    pid_t x = ((const proc_info *)a)->pid, y = ((const proc_info *)b)->pid;
    return (x > y) - (x < y);
}

/* Every process on the host, sorted by pid. 0, or -1. */
static int proc_table_load(proc_table *t)
{
    size_t cap = 0;
    t->v = NULL;
    t->n = 0;
    DIR *d = opendir("/proc");
    if (!d)
        return -1;
    struct dirent *de;
    while ((de = readdir(d))) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (de->d_name[0] < '0' || de->d_name[0] > '9' || *end)
            continue;
        if (t->n == cap) {
            cap = cap ? cap * 2 : 256;
            proc_info *v = realloc(t->v, cap * sizeof(*v));
            if (!v)
                abort();
            t->v = v;
        }
        if (proc_stat((pid_t)pid, &t->v[t->n]) == 0) /* it may have ended meanwhile */
            t->n++;
    }
    closedir(d);
    qsort(t->v, t->n, sizeof(*t->v), by_pid);
    return 0;
}

static const proc_info *proc_table_find(const proc_table *t, pid_t pid)
{
    proc_info key = {.pid = pid};
    return bsearch(&key, t->v, t->n, sizeof(*t->v), by_pid);
}

static int descends_from(const proc_table *t, const proc_info *p, pid_t ancestor)
{
    for (int depth = 0; p && depth < 64; depth++) {
        if (p->ppid == ancestor)
            return 1;
        if (p->ppid <= 1)
            return 0;
        p = proc_table_find(t, p->ppid);
    }
    return 0;
}

/* The value of `key` in the environment `pid` started with (not what it
 * set later): 1 when it is there. */
static int environ_get(pid_t pid, const char *key, char *out, size_t out_len)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/environ", (long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    funcd_buf env = FUNCD_BUF_INIT;
    char chunk[8192];
    ssize_t n;
    while ((n = read(fd, chunk, sizeof(chunk))) > 0)
        if (funcd_buf_append(&env, chunk, (size_t)n) < 0)
            break;
    close(fd);
    int found = 0;
    size_t key_len = strlen(key);
    for (size_t at = 0; !found && at < env.len;) {
        const char *var = env.data + at;
        size_t len = strnlen(var, env.len - at);
        if (len > key_len && var[key_len] == '=' && memcmp(var, key, key_len) == 0) {
            snprintf(out, out_len, "%.*s", (int)(len - key_len - 1), var + key_len + 1);
            found = 1;
        }
        at += len + 1;
    }
    funcd_buf_free(&env);
    return found;
}

/* The interpreted fixtures name their process after their replica (when it
 * fits comm's 15 bytes). */
static int comm_is_replica_of(const char *comm, const char *function)
{
    size_t n = strlen(function);
    if (strncmp(comm, function, n) != 0 || comm[n] != '-' || !comm[n + 1])
        return 0;
    return strspn(comm + n + 1, "0123456789") == strlen(comm + n + 1);
}

/* The replica `p` is a worker of, in `out`: from its environment, or from
 * the name a fixture that started generic gave it. 1 when it is one. */
static int worker_replica(const proc_info *p, char *out, size_t out_len)
{
    char fn[128];
    if (environ_get(p->pid, "FUNCD_FUNCTION", fn, sizeof(fn)) &&
        environ_get(p->pid, "FUNCD_REPLICA", out, out_len))
        return 1;
    /* The comm of a fresh interpreter (python3, node) or of a sandbox init
     * never looks like "name-N"; a fixture's does. */
    const char *dash = strrchr(p->comm, '-');
    if (dash && dash > p->comm && dash[1] && strspn(dash + 1, "0123456789") == strlen(dash + 1)) {
        snprintf(out, out_len, "%s", p->comm);
        return 1;
    }
    return 0;
}

typedef int (*proc_match)(const proc_info *p, const char *replica, const void *arg);

/* The descendants of this process that `match` (all when NULL): how many;
 * the first `max` go to `out`. */
static size_t find_descendants(proc_match match, const void *arg, sv_proc *out, size_t max)
{
    proc_table t;
    if (proc_table_load(&t) < 0)
        return 0;
    size_t n = 0;
    pid_t me = getpid();
    for (size_t i = 0; i < t.n; i++) {
        const proc_info *p = &t.v[i];
        char replica[64] = "";
        if (!descends_from(&t, p, me))
            continue;
        if (!worker_replica(p, replica, sizeof(replica)))
            replica[0] = '\0';
        if (match && !match(p, replica, arg))
            continue;
        if (n < max) {
            out[n].pid = p->pid;
            out[n].start = p->start;
            snprintf(out[n].comm, sizeof(out[n].comm), "%s", p->comm);
            snprintf(out[n].replica, sizeof(out[n].replica), "%s", replica);
        }
        n++;
    }
    free(t.v);
    return n;
}

static int match_replica(const proc_info *p, const char *replica, const void *arg)
{
    (void)p;
    return strcmp(replica, arg) == 0;
}

static int match_function(const proc_info *p, const char *replica, const void *arg)
{
    char fn[128], ns[128];
    if (environ_get(p->pid, "FUNCD_FUNCTION", fn, sizeof(fn)))
        return strcmp(fn, arg) == 0 && environ_get(p->pid, "FUNCD_NAMESPACE", ns, sizeof(ns)) &&
               strcmp(ns, "default") == 0;
    return replica[0] && comm_is_replica_of(p->comm, arg);
}

static int match_worker(const proc_info *p, const char *replica, const void *arg)
{
    (void)p;
    (void)arg;
    return replica[0] != '\0';
}

static int match_sandbox_init(const proc_info *p, const char *replica, const void *arg)
{
    (void)replica;
    (void)arg;
    return strcmp(p->comm, "funcd-sandbox") == 0;
}

int sv_replica_proc(const char *replica, sv_proc *out)
{
    return find_descendants(match_replica, replica, out, 1) == 1;
}

int sv_proc_init(const sv_proc *worker, sv_proc *out)
{
    proc_info self, parent;
    memset(out, 0, sizeof(*out));
    if (proc_stat(worker->pid, &self) < 0 || self.start != worker->start ||
        proc_stat(self.ppid, &parent) < 0 || !match_sandbox_init(&parent, "", NULL))
        return 0;
    out->pid = parent.pid;
    out->start = parent.start;
    snprintf(out->comm, sizeof(out->comm), "%s", parent.comm);
    return 1;
}

size_t sv_function_procs(const char *name, sv_proc *out, size_t max)
{
    return find_descendants(match_function, name, out, max);
}

size_t sv_workers(sv_proc *out, size_t max)
{
    return find_descendants(match_worker, NULL, out, max);
}

size_t sv_descendants(sv_proc *out, size_t max)
{
    return find_descendants(NULL, NULL, out, max);
}

size_t sv_sandbox_inits(sv_proc *out, size_t max)
{
    return find_descendants(match_sandbox_init, NULL, out, max);
}

int sv_proc_gone(const sv_proc *p)
{
    proc_info now;
    if (proc_stat(p->pid, &now) < 0)
        return errno == ENOENT || errno == ESRCH;
    return now.start != p->start;
}

int sv_wait_procs_gone(const sv_proc *p, size_t n, int timeout_ms)
{
    int64_t deadline = e2e_now_ms() + timeout_ms;
    for (;;) {
        size_t left = 0;
        for (size_t i = 0; i < n; i++)
            left += !sv_proc_gone(&p[i]);
        if (left == 0)
            return 1;
        if (e2e_now_ms() >= deadline)
            return 0;
        env_sleep_ms(POLL_MS);
    }
}

int sv_proc_kill(const sv_proc *p, int sig)
{
    /* A pidfd holds on to the process: once it is checked to be `p`, the
     * signal cannot reach another process that took over the pid. */
    int fd = (int)syscall(SYS_pidfd_open, p->pid, 0);
    if (fd < 0)
        return -1;
    int rc = -1;
    if (sv_proc_gone(p))
        errno = ESRCH;
    else
        rc = (int)syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

size_t sv_children(char *out, size_t out_len)
{
    size_t n = 0, used = 0;
    out[0] = '\0';
    proc_table t;
    if (proc_table_load(&t) < 0)
        return 0;
    pid_t me = getpid();
    for (size_t i = 0; i < t.n; i++) {
        const proc_info *p = &t.v[i];
        if (p->ppid != me)
            continue;
        n++;
        if (used < out_len) {
            int w = snprintf(out + used, out_len - used, "%s%ld (%s, state %c)", used ? ", " : "",
                             (long)p->pid, p->comm, p->state);
            used += w > 0 ? (size_t)w : 0;
        }
    }
    free(t.v);
    return n;
}

/* ---- functions through the control plane ------------------------------ */

long sv_create(env *e, const char *name, const char *spec_fmt, ...)
{
    funcd_buf body = FUNCD_BUF_INIT;
    funcd_buf_printf(&body,
                     "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":"
                     "{\"name\":\"%s\"},\"spec\":",
                     name);
    va_list ap;
    va_start(ap, spec_fmt);
    char *spec = NULL;
    if (vasprintf(&spec, spec_fmt, ap) < 0)
        spec = NULL;
    va_end(ap);
    funcd_buf_puts(&body, spec ? spec : "{}");
    funcd_buf_puts(&body, "}");
    free(spec);
    /* As admin: host paths (spec.source.path, a local git repository) are
     * the operator's feature (docs/security.md, "Host paths"). */
    long status = env_req(e, "POST", NS("default") "/functions", ADMIN_TOKEN, body.data);
    funcd_buf_free(&body);
    return status;
}

const cJSON *sv_ready_condition(const cJSON *fn)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, jget(fn, "status.conditions"))
    {
        const char *type = jstr(c, "type");
        if (type && strcmp(type, "Ready") == 0)
            return c;
    }
    return NULL;
}

static void fn_path(char *out, size_t len, const char *name)
{
    snprintf(out, len, NS("default") "/functions/%s", name);
}

int sv_wait_condition(env *e, const char *name, const char *status, int timeout_ms)
{
    char path[256];
    fn_path(path, sizeof(path), name);
    int64_t deadline = e2e_now_ms() + timeout_ms;
    for (;;) {
        if (env_req(e, "GET", path, DEV_TOKEN, NULL) == 200 &&
            jnum(e->r.json, "status.observedGeneration") ==
                jnum(e->r.json, "metadata.generation")) {
            const char *s = jstr(sv_ready_condition(e->r.json), "status");
            if (s && strcmp(s, status) == 0)
                return 1;
        }
        if (e2e_now_ms() >= deadline)
            return 0;
        env_sleep_ms(POLL_MS);
    }
}

int sv_curl(funcd_buf *out, funcd_buf *err, int in, ...)
{
    const char *argv[32] = {"curl", "-sS", "--max-time", "30"};
    int argc = 4;
    va_list ap;
    va_start(ap, in);
    for (const char *a; argc < 31 && (a = va_arg(ap, const char *)) != NULL;)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    int o[2], e[2];
    if (pipe2(o, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(e, O_CLOEXEC) != 0) {
        close(o[0]);
        close(o[1]);
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        if (in >= 0)
            dup2(in, 0);
        else
            close(0);
        dup2(o[1], 1);
        dup2(e[1], 2);
        execvp("curl", (char *const *)argv);
        _exit(127);
    }
    close(o[1]);
    close(e[1]);
    if (pid < 0) {
        close(o[0]);
        close(e[0]);
        return -1;
    }
    /* curl's output here is small: stdout, then stderr, each to its end
     * (curl's exit, or the kill below when the deadline passes). */
    int fds[2] = {o[0], e[0]};
    funcd_buf *bufs[2] = {out, err};
    int64_t deadline = e2e_now_ms() + 60000;
    int status = 0;
    for (int i = 0; i < 2; i++) {
        for (;;) {
            struct pollfd p = {fds[i], POLLIN, 0};
            int64_t left = deadline - e2e_now_ms();
            if (left <= 0 || poll(&p, 1, (int)(left > 1000 ? 1000 : left)) < 0)
                break;
            if (!p.revents)
                continue;
            char chunk[4096];
            ssize_t n = read(fds[i], chunk, sizeof(chunk));
            if (n <= 0)
                break;
            funcd_buf_append(bufs[i], chunk, (size_t)n);
        }
        close(fds[i]);
    }
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            break;
        if (r < 0)
            return -1;
        if (e2e_now_ms() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        usleep(10000);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int sv_native(env *e, const char *name, const char *more)
{
    char dir[256];
    if (sv_fixture("native", dir, sizeof(dir)) != 0)
        return -1;
    if (sv_create(e, name,
                  "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"}%s%s}",
                  dir, more && *more ? "," : "", more ? more : "") != 201)
        return -1;
    return sv_wait_ready(e, name, 10000) ? 0 : -1;
}

int sv_worker_count(env *e, const char *name)
{
    sv_proc procs[8];
    size_t n = sv_function_procs(name, procs, 8);
    int ready = 0, total = 0;
    e2e_resp saved = e->r;
    e->r = (e2e_resp)E2E_RESP_INIT;
    int rc = sv_replicas(e, name, &ready, &total);
    e2e_resp_free(&e->r);
    e->r = saved;
    if (rc < 0)
        total = 0; /* no status.replicas yet: none */
    return (size_t)total == n ? total : -1;
}

int sv_replicas(env *e, const char *name, int *ready, int *total)
{
    char path[256];
    fn_path(path, sizeof(path), name);
    if (env_req(e, "GET", path, DEV_TOKEN, NULL) != 200)
        return -1;
    double r = jnum(e->r.json, "status.replicas.ready"),
           t = jnum(e->r.json, "status.replicas.total");
    if (isnan(r) || isnan(t))
        return -1;
    *ready = (int)r;
    *total = (int)t;
    return 0;
}

int sv_wait_total(env *e, const char *name, int min, int max, int timeout_ms, int *seen)
{
    int64_t deadline = e2e_now_ms() + timeout_ms;
    for (;;) {
        int ready, total;
        if (sv_replicas(e, name, &ready, &total) == 0) {
            if (seen && total > *seen)
                *seen = total;
            if (total >= min && total <= max)
                return 1;
        }
        if (e2e_now_ms() >= deadline)
            return 0;
        env_sleep_ms(POLL_MS);
    }
}

int sv_wait_replicas(env *e, const char *name, int want_ready, int want_total, int timeout_ms)
{
    int64_t deadline = e2e_now_ms() + timeout_ms;
    for (;;) {
        int ready, total;
        if (sv_replicas(e, name, &ready, &total) == 0 && ready == want_ready && total == want_total)
            return 1;
        if (e2e_now_ms() >= deadline)
            return 0;
        env_sleep_ms(POLL_MS);
    }
}

/* ---- the data plane ----------------------------------------------------- */

long sv_invoke(env *e, const char *method, const char *path, const char *body)
{
    static const char *const text[] = {"Content-Type: text/plain", NULL};
    return e2e_http_send(e->dp, method, path, NULL, body ? text : NULL, body,
                         body ? strlen(body) : 0, &e->r);
}

const char *sv_header(const e2e_resp *r, const char *name)
{
    static _Thread_local char value[512];
    if (!e2e_resp_header(r, name, value, sizeof(value)))
        value[0] = '\0';
    return value;
}

struct sv_batch {
    pthread_t *threads;
    size_t n, started;
    pthread_barrier_t go;
    pthread_mutex_t lock;
    size_t done;
    const char *base;
    sv_call *calls;
};

typedef struct batch_arg {
    sv_batch *b;
    size_t i;
} batch_arg;

static void *batch_main(void *arg)
{
    batch_arg *a = arg;
    sv_batch *b = a->b;
    sv_call *c = &b->calls[a->i];
    free(a);
    e2e_http *h = e2e_http_new(b->base);
    pthread_barrier_wait(&b->go);
    static const char *const text[] = {"Content-Type: text/plain", NULL};
    if (h)
        e2e_http_send(h, c->method ? c->method : "GET", c->path, NULL, c->body ? text : NULL,
                      c->body, c->body ? strlen(c->body) : 0, &c->r);
    c->done_ms = e2e_now_ms();
    e2e_http_free(h);
    pthread_mutex_lock(&b->lock);
    b->done++;
    pthread_mutex_unlock(&b->lock);
    return NULL;
}

sv_batch *sv_batch_start(const char *base, sv_call *calls, size_t n)
{
    sv_batch *b = calloc(1, sizeof(*b));
    if (!b || !(b->threads = calloc(n, sizeof(pthread_t)))) {
        free(b);
        return NULL;
    }
    b->n = n;
    b->base = base;
    b->calls = calls;
    pthread_mutex_init(&b->lock, NULL);
    /* The starter joins the barrier too, so no call begins before all exist. */
    pthread_barrier_init(&b->go, NULL, (unsigned)n + 1);
    for (size_t i = 0; i < n; i++) {
        batch_arg *a = malloc(sizeof(*a));
        if (!a)
            abort();
        a->b = b;
        a->i = i;
        if (pthread_create(&b->threads[i], NULL, batch_main, a) != 0)
            abort(); /* a half-started barrier cannot be unwound */
        b->started++;
    }
    pthread_barrier_wait(&b->go);
    return b;
}

size_t sv_batch_done(sv_batch *b)
{
    pthread_mutex_lock(&b->lock);
    size_t done = b->done;
    pthread_mutex_unlock(&b->lock);
    return done;
}

void sv_batch_join(sv_batch *b)
{
    if (!b)
        return;
    for (size_t i = 0; i < b->started; i++)
        pthread_join(b->threads[i], NULL);
    pthread_barrier_destroy(&b->go);
    pthread_mutex_destroy(&b->lock);
    free(b->threads);
    free(b);
}

/* ---- bundles ------------------------------------------------------------ */

static la_ssize_t on_archive_write(struct archive *a, void *payload, const void *buf, size_t len)
{
    return funcd_buf_append(payload, buf, len) < 0 ? -1 : (la_ssize_t)len;
}

int sv_targz(const sv_entry *entries, size_t n, void **out, size_t *out_len)
{
    funcd_buf b = FUNCD_BUF_INIT;
    struct archive *a = archive_write_new();
    int ok = a && archive_write_set_format_pax_restricted(a) == ARCHIVE_OK &&
             archive_write_add_filter_gzip(a) == ARCHIVE_OK &&
             archive_write_set_bytes_in_last_block(a, 1) == ARCHIVE_OK &&
             archive_write_open(a, &b, NULL, on_archive_write, NULL) == ARCHIVE_OK;
    for (size_t i = 0; ok && i < n; i++) {
        struct archive_entry *en = archive_entry_new();
        size_t len = entries[i].content ? strlen(entries[i].content) : 0;
        archive_entry_set_pathname(en, entries[i].path);
        archive_entry_set_filetype(en, entries[i].content ? AE_IFREG : AE_IFDIR);
        archive_entry_set_perm(en, (mode_t)entries[i].mode);
        archive_entry_set_size(en, (la_int64_t)len);
        archive_entry_set_mtime(en, 1700000000, 0);
        ok = archive_write_header(a, en) == ARCHIVE_OK &&
             (len == 0 || archive_write_data(a, entries[i].content, len) == (la_ssize_t)len);
        archive_entry_free(en);
    }
    if (a) {
        if (archive_write_close(a) != ARCHIVE_OK)
            ok = 0;
        archive_write_free(a);
    }
    if (!ok) {
        funcd_buf_free(&b);
        return -1;
    }
    *out = funcd_buf_detach(&b, out_len);
    return 0;
}

long sv_upload(env *e, const void *data, size_t len)
{
    static const char *const gzip[] = {"Content-Type: application/gzip", NULL};
    return e2e_http_send(e->h, "POST", NS("default") "/bundles", DEV_TOKEN, gzip, data, len, &e->r);
}
