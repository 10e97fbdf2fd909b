#include "test_serving_common.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
    if (!mkdtemp(out))
        return -1;
    made_dirs[n_made_dirs++] = strdup(out);
    return 0;
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

size_t sv_recorded_pids(const char *dir, pid_t *out, size_t max)
{
    size_t n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < max) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (de->d_name[0] != '.' && *end == '\0' && pid > 0)
            out[n++] = (pid_t)pid;
    }
    closedir(d);
    return n;
}

int sv_pid_gone(pid_t pid)
{
    return kill(pid, 0) != 0 && errno == ESRCH;
}

int sv_wait_pids_gone(const pid_t *pids, size_t n, int timeout_ms)
{
    int64_t deadline = e2e_now_ms() + timeout_ms;
    for (;;) {
        size_t left = 0;
        for (size_t i = 0; i < n; i++)
            left += !sv_pid_gone(pids[i]);
        if (left == 0)
            return 1;
        if (e2e_now_ms() >= deadline)
            return 0;
        env_sleep_ms(POLL_MS);
    }
}

/* The parent pid and the state letter of /proc/<pid>/stat. */
static int proc_stat(const char *pid, pid_t *ppid, char *state, char *comm, size_t comm_len)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%s/stat", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* "pid (comm) S ppid ...": comm may hold spaces and parentheses. */
    char *open = strchr(buf, '('), *close = strrchr(buf, ')');
    long pp;
    if (!open || !close || sscanf(close + 1, " %c %ld", state, &pp) != 2)
        return -1;
    snprintf(comm, comm_len, "%.*s", (int)(close - open - 1), open + 1);
    *ppid = (pid_t)pp;
    return 0;
}

size_t sv_children(char *out, size_t out_len)
{
    size_t n = 0, used = 0;
    out[0] = '\0';
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    struct dirent *de;
    pid_t me = getpid();
    while ((de = readdir(d))) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        pid_t ppid;
        char state, comm[64];
        if (proc_stat(de->d_name, &ppid, &state, comm, sizeof(comm)) < 0 || ppid != me)
            continue;
        n++;
        if (used < out_len) {
            int w = snprintf(out + used, out_len - used, "%s%s (%s, state %c)", used ? ", " : "",
                             de->d_name, comm, state);
            used += w > 0 ? (size_t)w : 0;
        }
    }
    closedir(d);
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
    long status = env_req(e, "POST", NS("default") "/functions", DEV_TOKEN, body.data);
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
