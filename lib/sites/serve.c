/*
 * Sites on the gateway threads (sites.h): a request for a site's file is
 * answered on the thread that read it, never through the platform loop.
 *
 * A path is looked up below the site's root with openat2(RESOLVE_BENEATH):
 * the kernel refuses "..", absolute symbolic links and any link that leads
 * out of the root (docs/sites.md). Files of an immutable source are kept
 * in memory once read (the contents go out with no copy and no system call
 * but the socket's); a path source's files are opened per request.
 */
#include "sites/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <h2o.h>
#include <pthread.h>
#include <linux/openat2.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "gateway/gateway.h"

/* ---- opening below the root ------------------------------------------------ */

/* Without openat2 (Linux < 5.6): component by component, refusing every
 * symbolic link. */
static int open_walk(int root_fd, const char *rel)
{
    char part[256];
    int dir = dup(root_fd);
    const char *p = rel;
    while (dir >= 0) {
        while (*p == '/')
            p++;
        size_t n = strcspn(p, "/");
        if (n == 0 || n >= sizeof(part) || (n == 2 && p[0] == '.' && p[1] == '.')) {
            close(dir);
            errno = n >= sizeof(part) ? ENAMETOOLONG : EXDEV;
            return -1;
        }
        memcpy(part, p, n);
        part[n] = '\0';
        p += n;
        while (*p == '/')
            p++;
        int last = *p == '\0';
        int fd = openat(dir, part,
                        (last ? O_RDONLY | O_NONBLOCK : O_PATH | O_DIRECTORY) | O_NOFOLLOW |
                            O_CLOEXEC | O_NOCTTY);
        int saved = errno;
        close(dir);
        if (fd < 0) {
            errno = saved == ELOOP ? EXDEV : saved;
            return -1;
        }
        if (last)
            return fd;
        dir = fd;
    }
    return -1;
}

/* 1 when any user of the host may read what `fd` is (st: its stat): the
 * file readable (a directory searchable) by others, and every directory
 * above it searchable by others. */
static int readable_by_anyone(int fd, const struct stat *st)
{
    if (!(st->st_mode & (S_ISDIR(st->st_mode) ? S_IXOTH : S_IROTH)))
        return 0;
    char link[64], real[4096];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, real, sizeof(real) - 1);
    if (n <= 0 || real[0] != '/')
        return 0;
    real[n] = '\0';
    for (char *slash = strrchr(real, '/'); slash; slash = strrchr(real, '/')) {
        *slash = '\0';
        struct stat up;
        if (stat(real[0] ? real : "/", &up) != 0 || !(up.st_mode & S_IXOTH))
            return 0;
    }
    return 1;
}

int funcd__site_open(int root_fd, const char *rel, int public_only, struct stat *st)
{
    static atomic_int no_openat2;
    int fd;
    if (!atomic_load_explicit(&no_openat2, memory_order_relaxed)) {
        struct open_how how = {
            .flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY,
            .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
        };
        fd = (int)syscall(SYS_openat2, root_fd, rel, &how, sizeof(how));
        if (fd < 0 && errno == ENOSYS) {
            atomic_store(&no_openat2, 1);
            fd = open_walk(root_fd, rel);
        }
    } else {
        fd = open_walk(root_fd, rel);
    }
    if (fd < 0)
        return -1;
    if (fstat(fd, st) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    if (public_only && !readable_by_anyone(fd, st)) {
        close(fd);
        errno = EACCES;
        return -1;
    }
    return fd;
}

/* ---- what a file is ----------------------------------------------------------- */

static const struct {
    const char *ext, *type;
} types[] = {
    {"html", "text/html; charset=utf-8"}, {"htm", "text/html; charset=utf-8"},
    {"css", "text/css; charset=utf-8"},   {"js", "text/javascript; charset=utf-8"},
    {"mjs", "text/javascript; charset=utf-8"}, {"json", "application/json"},
    {"map", "application/json"},          {"txt", "text/plain; charset=utf-8"},
    {"md", "text/markdown; charset=utf-8"}, {"xml", "application/xml"},
    {"svg", "image/svg+xml"},             {"png", "image/png"},
    {"jpg", "image/jpeg"},                {"jpeg", "image/jpeg"},
    {"gif", "image/gif"},                 {"webp", "image/webp"},
    {"avif", "image/avif"},               {"ico", "image/x-icon"},
    {"wasm", "application/wasm"},         {"woff", "font/woff"},
    {"woff2", "font/woff2"},              {"ttf", "font/ttf"},
    {"otf", "font/otf"},                  {"pdf", "application/pdf"},
    {"mp4", "video/mp4"},                 {"webm", "video/webm"},
    {"mp3", "audio/mpeg"},                {"ogg", "audio/ogg"},
    {"csv", "text/csv; charset=utf-8"},   {"webmanifest", "application/manifest+json"},
    {"zip", "application/zip"},           {"gz", "application/gzip"},
};

static const char *type_of(const char *rel)
{
    const char *slash = strrchr(rel, '/');
    const char *dot = strrchr(slash ? slash : rel, '.');
    if (dot)
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
            if (strcasecmp(dot + 1, types[i].ext) == 0)
                return types[i].type;
    return "application/octet-stream";
}

static void describe(site_file *f, const struct stat *st)
{
    f->size = (uint64_t)st->st_size;
    f->mtime = (int64_t)st->st_mtim.tv_sec;
    snprintf(f->etag, sizeof(f->etag), "\"%llx-%llx\"", (unsigned long long)f->mtime,
             (unsigned long long)f->size);
    struct tm gmt;
    time_t t = (time_t)f->mtime;
    gmtime_r(&t, &gmt);
    h2o_time2str_rfc1123(f->last_modified, &gmt);
}

/* Descriptors kept open for sendfile, process-wide (beyond: opened per
 * request). */
static atomic_uint kept_fds;

void funcd__site_file_free(site_file *f)
{
    if (!f)
        return;
    funcd__site_file_free(f->gz);
    funcd__site_blob_unref(f->blob);
    if (f->fd >= 0) {
        close(f->fd);
        atomic_fetch_sub(&kept_fds, 1);
    }
    free(f->rel);
    free(f);
}

#define file_free funcd__site_file_free

/* Keeps `fd` (of a file of an immutable source, big enough to go out with
 * sendfile) with the file; 1 when kept (the caller must not close it). */
static int maybe_keep_fd(site_ver *v, site_file *f, int fd)
{
    if (!v->immutable || f->size < SITES_SENDFILE_MIN)
        return 0;
    if (atomic_fetch_add(&kept_fds, 1) >= SITES_KEPT_FDS) {
        atomic_fetch_sub(&kept_fds, 1);
        return 0;
    }
    f->fd = fd;
    return 1;
}

static uint64_t fnv(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* ---- contents in memory (sites_cache) ------------------------------------------- */

void funcd__site_blob_unref(site_blob *b)
{
    if (b && atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1)
        free(b);
}

/* The contents of `f` kept in memory (a reference), or NULL. */
static site_blob *take_blob(site_ver *v, site_file *f)
{
    pthread_rwlock_rdlock(&v->lock);
    site_blob *b = f->blob;
    if (b)
        atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
    pthread_rwlock_unlock(&v->lock);
    if (b && !atomic_load_explicit(&f->used, memory_order_relaxed))
        atomic_store_explicit(&f->used, 1, memory_order_relaxed);
    return b;
}

/* Under c->lock: `f` goes right behind `*head`, the last to be looked at. */
static void ring_insert(site_file **head, site_file *f)
{
    if (!*head) {
        f->ring_next = f->ring_prev = f;
        *head = f;
        return;
    }
    f->ring_next = *head;
    f->ring_prev = (*head)->ring_prev;
    (*head)->ring_prev->ring_next = f;
    (*head)->ring_prev = f;
}

/* Under c->lock. */
static void ring_remove(site_file **head, site_file *f)
{
    if (f->ring_next == f) {
        *head = NULL;
    } else {
        f->ring_prev->ring_next = f->ring_next;
        f->ring_next->ring_prev = f->ring_prev;
        if (*head == f)
            *head = f->ring_next;
    }
    f->ring_next = f->ring_prev = NULL;
}

/* Under c->lock: off whichever ring `f` is on. */
static void ring_unlink(sites_cache *c, site_file *f)
{
    if (atomic_load(&f->parked)) {
        ring_remove(&c->parked, f);
        atomic_store(&f->parked, 0);
    } else {
        ring_remove(&c->hand, f);
    }
}

/* Under c->lock, no version's lock held: f's contents leave the cache,
 * unless a request is sending them (-1: then they stay, counted, and are
 * parked off the clock's ring until the last such request lets go). */
static int evict(sites_cache *c, site_file *f)
{
    pthread_rwlock_wrlock(&f->ver->lock);
    site_blob *b = f->blob;
    /* take_blob adds references under the reader lock: none comes now. The
     * mark goes up before the references are read, and let_go drops its
     * reference before it reads the mark (both sequentially consistent):
     * a request letting go now either is seen here or sees the mark. */
    atomic_store(&f->parked, 1);
    if (atomic_load(&b->refs) > 1) {
        pthread_rwlock_unlock(&f->ver->lock);
        ring_remove(&c->hand, f);
        ring_insert(&c->parked, f);
        return -1;
    }
    atomic_store(&f->parked, 0);
    f->blob = NULL;
    pthread_rwlock_unlock(&f->ver->lock);
    ring_remove(&c->hand, f);
    atomic_fetch_sub(&c->bytes, b->size);
    atomic_fetch_sub(&c->files, 1);
    funcd__site_blob_unref(b);
    return 0;
}

/* Under c->lock: lets contents go, least recently used first, until `need`
 * more bytes fit in the budget. 0 when they fit. Contents in use leave the
 * ring as they are met, so the hand passes only contents it may let go. */
static int make_room(sites_cache *c, uint64_t need)
{
    /* Each file is passed at most twice: once to clear its mark, once to go
     * (or to be parked, while a request sends it). */
    uint64_t turns = 2 * atomic_load(&c->files) + 2;
    while (atomic_load(&c->bytes) + need > c->limit && c->hand && turns--) {
        site_file *f = c->hand;
        c->hand = f->ring_next;
        if (atomic_exchange_explicit(&f->used, 0, memory_order_relaxed))
            continue; /* a second chance */
        evict(c, f);
    }
    return atomic_load(&c->bytes) + need <= c->limit ? 0 : -1;
}

/* A request lets go of its reference to `b`, the contents of `f`: when
 * the clock's hand parked them because they were in use and this was the
 * last request sending them, they go back on the ring (behind the hand),
 * to be let go in turn. The cache's lock is taken only then. */
static void let_go(site_file *f, site_blob *b)
{
    if (atomic_fetch_sub(&b->refs, 1) == 1) { /* the file let it go already */
        free(b);
        return;
    }
    if (!atomic_load(&f->parked))
        return;
    sites_cache *c = f->ver->cache;
    pthread_mutex_lock(&c->lock);
    if (atomic_load(&f->parked) && f->blob == b && atomic_load(&b->refs) == 1) {
        ring_remove(&c->parked, f);
        atomic_store(&f->parked, 0);
        ring_insert(&c->hand, f);
    }
    pthread_mutex_unlock(&c->lock);
}

/* Reads `f` (of an immutable source) into memory and keeps it in the cache
 * when the budget has room for it, letting older contents go: a reference
 * for the request, or NULL: read it per request in bounded steps (no room,
 * or another request is reading it in now). Room is taken before the file
 * is read, so what is in memory never passes the budget, and concurrent
 * misses on one file read it once. */
static site_blob *fill_blob(site_ver *v, site_file *f)
{
    sites_cache *c = v->cache;
    if (!v->immutable || !f->ver || !c || f->size > SITES_CACHE_FILE_MAX || f->size > c->limit)
        return NULL;
    pthread_mutex_lock(&c->lock);
    site_blob *had = take_blob(v, f);
    if (had || f->filling || make_room(c, f->size) != 0) {
        pthread_mutex_unlock(&c->lock);
        return had;
    }
    f->filling = 1;
    atomic_fetch_add(&c->bytes, f->size); /* taken now, so others see it gone */
    pthread_mutex_unlock(&c->lock);

    site_blob *b = malloc(sizeof(*b) + (f->size ? (size_t)f->size : 1));
    struct stat st;
    int fd = !b ? -1 : f->fd >= 0 ? f->fd : funcd__site_open(v->root_fd, f->rel, 0, &st);
    uint64_t got = 0;
    while (fd >= 0 && got < f->size) {
        ssize_t n = pread(fd, b->bytes + got, f->size - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (uint64_t)n;
    }
    if (fd >= 0 && fd != f->fd)
        close(fd);
    pthread_mutex_lock(&c->lock);
    f->filling = 0;
    if (fd < 0 || got != f->size) { /* out of memory, or changed under us: per request */
        atomic_fetch_sub(&c->bytes, f->size);
        pthread_mutex_unlock(&c->lock);
        free(b);
        return NULL;
    }
    atomic_init(&b->refs, 2); /* the request's and the file's */
    b->size = (size_t)f->size;
    pthread_rwlock_wrlock(&v->lock);
    f->blob = b;
    pthread_rwlock_unlock(&v->lock);
    atomic_store_explicit(&f->used, 0, memory_order_relaxed);
    ring_insert(&c->hand, f); /* the newest: the last to be looked at */
    atomic_fetch_add(&c->files, 1);
    pthread_mutex_unlock(&c->lock);
    return b;
}

static void forget_file(sites_cache *c, site_file *f)
{
    if (!f || !f->blob)
        return;
    ring_unlink(c, f);
    atomic_fetch_sub(&c->bytes, f->blob->size);
    atomic_fetch_sub(&c->files, 1);
    funcd__site_blob_unref(f->blob);
    f->blob = NULL;
}

void funcd__sites_cache_forget(sites_cache *c, site_ver *v)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    for (unsigned i = 0; i < SITES_FILE_BUCKETS; i++)
        for (site_file *f = v->files[i]; f; f = f->next) {
            forget_file(c, f);
            forget_file(c, f->gz);
        }
    pthread_mutex_unlock(&c->lock);
}

/* 301 to the same path with a '/' added (and the query kept). The path is
 * the normalized one, never the raw bytes, with one leading '/': a raw
 * "/\\host/.." or "//host/.." would send the browser to another site. */
static const char *reason_of(int code);

static void redirect_to_dir(h2o_req_t *req)
{
    const char *p = req->path_normalized.base;
    size_t pl = req->path_normalized.len;
    while (pl > 1 && (p[1] == '/' || p[1] == '\\'))
        p++, pl--;
    const char *q = memchr(req->path.base, '?', req->path.len);
    size_t ql = q ? req->path.len - (size_t)(q - req->path.base) : 0;
    char *to = h2o_mem_alloc_pool(&req->pool, pl + ql + 2);
    memcpy(to, p, pl);
    to[pl] = '/';
    if (ql)
        memcpy(to + pl + 1, q, ql);
    for (size_t i = 0; i < pl; i++)
        if (to[i] == '\\' || to[i] == '\r' || to[i] == '\n')
            to[i] = '_'; /* never a header split or a scheme-relative hop */
    h2o_send_redirect(req, 301, reason_of(301), to, pl + ql + 1);
}

enum { LOOK_FILE = 0, LOOK_MISSING = 1, LOOK_DIR = 2, LOOK_REFUSED = 3 };

/* A new description of `rel` (with its .gz sibling), or NULL with *how. */
static site_file *load(site_ver *v, const char *rel, int *how)
{
    struct stat st;
    int fd = funcd__site_open(v->root_fd, rel, !v->immutable, &st);
    if (fd < 0) {
        *how = errno == EXDEV || errno == ELOOP || errno == EACCES ? LOOK_REFUSED : LOOK_MISSING;
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        *how = S_ISDIR(st.st_mode) ? LOOK_DIR : LOOK_MISSING;
        return NULL;
    }
    site_file *f = calloc(1, sizeof(*f));
    if (f)
        f->fd = -1;
    if (!f || !(f->rel = strdup(rel))) {
        close(fd);
        free(f);
        *how = LOOK_MISSING;
        return NULL;
    }
    f->type = type_of(rel);
    describe(f, &st);
    if (!maybe_keep_fd(v, f, fd))
        close(fd);
    size_t n = strlen(rel);
    char *gz = malloc(n + 4);
    if (gz && !(n > 3 && strcmp(rel + n - 3, ".gz") == 0)) {
        memcpy(gz, rel, n);
        memcpy(gz + n, ".gz", 4);
        int gfd = funcd__site_open(v->root_fd, gz, !v->immutable, &st);
        if (gfd >= 0 && S_ISREG(st.st_mode) && (f->gz = calloc(1, sizeof(*f->gz)))) {
            f->gz->fd = -1;
            f->gz->rel = gz;
            gz = NULL;
            f->gz->type = f->type;
            describe(f->gz, &st);
            if (maybe_keep_fd(v, f->gz, gfd))
                gfd = -1;
        }
        if (gfd >= 0)
            close(gfd);
    }
    free(gz);
    *how = LOOK_FILE;
    return f;
}

static void drop_file(void *p)
{
    file_free(*(site_file **)p);
}

/* The file `rel` of the site: kept in the table (immutable sources), or
 * freed with the request. */
static site_file *lookup(site_ver *v, h2o_req_t *req, const char *rel, int *how)
{
    unsigned b = (unsigned)(fnv(rel) % SITES_FILE_BUCKETS);
    if (v->immutable) {
        pthread_rwlock_rdlock(&v->lock);
        site_file *f = v->files[b];
        while (f && strcmp(f->rel, rel) != 0)
            f = f->next;
        pthread_rwlock_unlock(&v->lock);
        if (f) {
            *how = LOOK_FILE;
            return f;
        }
    }
    site_file *f = load(v, rel, how);
    if (!f)
        return NULL;
    if (v->immutable) {
        pthread_rwlock_wrlock(&v->lock);
        site_file *had = v->files[b];
        while (had && strcmp(had->rel, rel) != 0)
            had = had->next;
        int kept = 0;
        if (!had && v->n_files < SITES_CACHE_FILES) {
            f->ver = v; /* its contents may be kept now */
            if (f->gz)
                f->gz->ver = v;
            f->next = v->files[b];
            v->files[b] = f;
            v->n_files++;
            kept = 1;
        }
        pthread_rwlock_unlock(&v->lock);
        if (had) { /* another thread was first */
            file_free(f);
            return had;
        }
        if (kept)
            return f;
        /* the table is full: this one goes with the request */
    }
    *(site_file **)h2o_mem_alloc_shared(&req->pool, sizeof(site_file *), drop_file) = f;
    return f;
}

/* ---- answering ---------------------------------------------------------------- */

static const char *reason_of(int status)
{
    switch (status) {
    case 200: return "OK";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 416: return "Range Not Satisfiable";
    default: return "Status";
    }
}

/* What a request to a Site holds while it is answered, let go when h2o
 * disposes of the request: the version, the contents it sends from memory,
 * and the send timeout's watch. h2o 2.2.5 has no write timeout: over
 * HTTP/1 a response's bytes wait in the socket's write queue for as long
 * as the connection lives, and over HTTP/2 the connection's idle timeout
 * is off while any stream is open, so a stream whose window the client
 * keeps shut (or a connection it never reads) holds its answer forever.
 * The watch is one timer entry (no system call, no lock): every
 * send_timeout_ms it looks at the body bytes h2o has taken for the
 * client (req->bytes_sent: over HTTP/1 as each step is handed to the
 * socket, over HTTP/2 as DATA frames go into the connection's buffer,
 * within the client's windows), and a request that took nothing since the
 * last look is cut off as a stalled sendfile'd one is (sf_on_timeout). */
typedef struct site_req {
    site_ver *v;
    h2o_req_t *req;
    site_file *f;     /* whose contents `blob` are */
    site_blob *blob;  /* a reference, or NULL */
    size_t seen;      /* req->bytes_sent at the watch's last look */
    h2o_timeout_entry_t watch;
} site_req;

static void cut_off(h2o_req_t *req);

static void on_watch(h2o_timeout_entry_t *entry)
{
    site_req *sr = H2O_STRUCT_FROM_MEMBER(site_req, watch, entry);
    if (sr->req->bytes_sent != sr->seen) { /* it moved: another look later */
        sr->seen = sr->req->bytes_sent;
        h2o_timeout_t *t = funcd_gw_timeout(funcd_gw_thread(), sr->v->send_timeout_ms);
        if (t) {
            h2o_timeout_link(sr->req->conn->ctx->loop, t, &sr->watch);
            return;
        }
    }
    cut_off(sr->req);
}

static void drop_req(void *p)
{
    site_req *sr = p;
    if (h2o_timeout_is_linked(&sr->watch))
        h2o_timeout_unlink(&sr->watch);
    if (sr->blob)
        let_go(sr->f, sr->blob);
    funcd__site_ver_unref(sr->v);
}

/* The state of `req` for version `v` (whose reference it takes over), its
 * watch started. */
static site_req *site_req_new(site_ver *v, h2o_req_t *req)
{
    site_req *sr = h2o_mem_alloc_shared(&req->pool, sizeof(*sr), drop_req);
    memset(sr, 0, sizeof(*sr));
    sr->v = v;
    sr->req = req;
    sr->watch.cb = on_watch;
    h2o_timeout_t *t = funcd_gw_timeout(funcd_gw_thread(), v->send_timeout_ms);
    if (t)
        h2o_timeout_link(req->conn->ctx->loop, t, &sr->watch);
    return sr;
}

/* A body from memory over HTTP/1 in READ_CHUNK steps, so the watch sees a
 * slow reader that keeps taking it move (HTTP/2 frames it by itself). */
typedef struct mem_gen {
    h2o_generator_t super;
    const char *p;
    uint64_t left;
} mem_gen;

typedef struct file_gen {
    h2o_generator_t super;
    int fd;
    uint64_t off, left;
    char *buf;
} file_gen;

#define READ_CHUNK (64 * 1024)

static void gen_read(file_gen *g, h2o_req_t *req)
{
    size_t want = g->left < READ_CHUNK ? (size_t)g->left : READ_CHUNK;
    ssize_t n;
    do
        n = pread(g->fd, g->buf, want, (off_t)g->off);
    while (n < 0 && errno == EINTR);
    if (n <= 0) { /* shrunk or failed under us: the response cannot be completed */
        h2o_send(req, NULL, 0, H2O_SEND_STATE_ERROR);
        return;
    }
    g->off += (uint64_t)n;
    g->left -= (uint64_t)n;
    h2o_iovec_t iov = h2o_iovec_init(g->buf, (size_t)n);
    h2o_send(req, &iov, 1, g->left ? H2O_SEND_STATE_IN_PROGRESS : H2O_SEND_STATE_FINAL);
}

static void gen_proceed(h2o_generator_t *self, h2o_req_t *req)
{
    gen_read((file_gen *)self, req);
}

static void gen_stop(h2o_generator_t *self, h2o_req_t *req)
{
}

static void gen_dispose(void *p)
{
    file_gen *g = p;
    if (g->fd >= 0)
        close(g->fd);
}

static h2o_generator_t no_generator = {NULL, NULL};

static void mem_proceed(h2o_generator_t *self, h2o_req_t *req)
{
    mem_gen *g = (mem_gen *)self;
    size_t n = g->left < READ_CHUNK ? (size_t)g->left : READ_CHUNK;
    h2o_iovec_t iov = h2o_iovec_init(g->p, n);
    g->p += n;
    g->left -= n;
    h2o_send(req, &iov, 1, g->left ? H2O_SEND_STATE_IN_PROGRESS : H2O_SEND_STATE_FINAL);
}

/* Plain HTTP/1 bodies of SITES_SENDFILE_MIN bytes or more go out with
 * sendfile(2) straight from the page cache to the connection's socket (no
 * copy through user space), as nginx sends them. h2o writes the headers;
 * once that write completed (the generator's proceed, so h2o has nothing
 * pending on the socket), the body is sent here; when the socket takes no
 * more, h2o_socket_notify_write says when it does. TLS and HTTP/2 keep
 * h2o's own path (their bytes must go through h2o's framing). */
typedef struct sf_gen {
    h2o_generator_t super;
    h2o_req_t *req;
    h2o_socket_t *sock;
    int sfd;                /* the socket's descriptor */
    int fd, own_fd;
    int corked;             /* TCP_CORK set on the socket until the body is out */
    int waiting;            /* in sf_by_fd[sfd], its timer linked */
    int timed_out;          /* the client took nothing for send_timeout_ms */
    uint64_t off, left;
    uint64_t timeout_ms;
    h2o_timeout_entry_t timer;
} sf_gen;

/* The generator waiting for each socket to take more, by the socket's
 * descriptor: O(1) to find when the socket is writable and to leave. A
 * descriptor is one socket at a time, served by one thread, and a
 * generator leaves the table before its socket is closed, so each slot is
 * only touched by the thread serving that socket. Sized once by
 * RLIMIT_NOFILE; a socket past it keeps h2o's own path (sendfile_socket). */
static _Atomic(sf_gen *) *sf_by_fd;
static size_t sf_by_fd_cap;
static pthread_once_t sf_by_fd_once = PTHREAD_ONCE_INIT;

static void sf_by_fd_init(void)
{
    struct rlimit rl;
    size_t n = 65536;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur > n)
        n = rl.rlim_cur < (1u << 20) ? (size_t)rl.rlim_cur : (size_t)1 << 20;
    if ((sf_by_fd = calloc(n, sizeof(*sf_by_fd))))
        sf_by_fd_cap = n;
}

static void sf_unwait(sf_gen *g)
{
    if (!g->waiting)
        return;
    sf_gen *was = g; /* never another socket's, should this descriptor be one already */
    atomic_compare_exchange_strong_explicit(&sf_by_fd[g->sfd], &was, NULL, memory_order_relaxed,
                                            memory_order_relaxed);
    if (h2o_timeout_is_linked(&g->timer))
        h2o_timeout_unlink(&g->timer);
    g->waiting = 0;
}

static void sf_pump(sf_gen *g);

static void sf_on_writable(h2o_socket_t *sock, const char *err)
{
    int fd = h2o_socket_get_fd(sock);
    sf_gen *g = fd >= 0 && (size_t)fd < sf_by_fd_cap
                    ? atomic_load_explicit(&sf_by_fd[fd], memory_order_relaxed)
                    : NULL;
    if (!g || g->sock != sock)
        return; /* the request went meanwhile */
    sf_unwait(g);
    if (err || g->timed_out) {
        h2o_send(g->req, NULL, 0, H2O_SEND_STATE_ERROR);
        return;
    }
    sf_pump(g);
}

/* The client took nothing for timeout_ms: the connection is reset (no
 * lingering with its unsent bytes). Shutting the socket down makes it
 * writable, so h2o's pending notification runs sf_on_writable, which ends
 * the answer with an error; h2o then closes the connection. */
static void reset_socket(int fd)
{
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    shutdown(fd, SHUT_RDWR);
}

static void sf_on_timeout(h2o_timeout_entry_t *entry)
{
    sf_gen *g = H2O_STRUCT_FROM_MEMBER(sf_gen, timer, entry);
    g->timed_out = 1;
    reset_socket(g->sfd);
}

/* The watch's cut: the connection is reset as a stalled sendfile'd one is.
 * h2o then finds its socket shut: a pending write fails (HTTP/1, or an
 * HTTP/2 connection whose socket is full), or its read ends (an HTTP/2
 * connection waiting for a window), and it closes the connection, every
 * stream of it with it, disposing of the request. */
static void cut_off(h2o_req_t *req)
{
    h2o_socket_t *sock =
        req->conn->callbacks->get_socket ? req->conn->callbacks->get_socket(req->conn) : NULL;
    int fd = sock ? h2o_socket_get_fd(sock) : -1;
    if (fd >= 0)
        reset_socket(fd);
}

/* The socket is full: wait until it takes more, at most timeout_ms. */
static void sf_wait(sf_gen *g)
{
    h2o_timeout_t *t = funcd_gw_timeout(funcd_gw_thread(), g->timeout_ms);
    if (!t) {
        h2o_send(g->req, NULL, 0, H2O_SEND_STATE_ERROR);
        return;
    }
    g->waiting = 1;
    atomic_store_explicit(&sf_by_fd[g->sfd], g, memory_order_relaxed);
    g->timer.cb = sf_on_timeout;
    h2o_timeout_link(g->req->conn->ctx->loop, t, &g->timer);
    h2o_socket_notify_write(g->sock, sf_on_writable);
}

/* At most this much per turn, so one fast reader of a big file does not
 * hold the thread: then it waits for its turn like a full socket. */
#define SF_TURN (8u << 20)

static void sf_pump(sf_gen *g)
{
    int sfd = g->sfd;
    uint64_t turn = 0;
    while (g->left) {
        off_t off = (off_t)g->off;
        size_t want = g->left < SF_TURN - turn ? (size_t)g->left : (size_t)(SF_TURN - turn);
        ssize_t n = want ? sendfile(sfd, g->fd, &off, want) : -1;
        if (n > 0) {
            g->off += (uint64_t)n;
            g->left -= (uint64_t)n;
            turn += (uint64_t)n;
            g->req->bytes_sent += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (!want || (n < 0 && errno == EAGAIN)) {
            sf_wait(g);
            return;
        }
        /* 0: the file shrank under us; an error: the peer went. Either way
         * the answer cannot be completed: the connection is closed. */
        h2o_send(g->req, NULL, 0, H2O_SEND_STATE_ERROR);
        return;
    }
    if (g->corked) { /* the last partial segment goes now */
        int off = 0;
        setsockopt(sfd, IPPROTO_TCP, TCP_CORK, &off, sizeof(off));
        g->corked = 0;
    }
    h2o_send(g->req, NULL, 0, H2O_SEND_STATE_FINAL);
}

static void sf_proceed(h2o_generator_t *self, h2o_req_t *req)
{
    sf_pump((sf_gen *)self);
}

static void sf_stop(h2o_generator_t *self, h2o_req_t *req)
{
    sf_unwait((sf_gen *)self);
}

static void sf_dispose(void *p)
{
    sf_gen *g = p;
    sf_unwait(g);
    if (g->own_fd && g->fd >= 0)
        close(g->fd);
}

/* Holds the headers h2o is about to write back until the body follows them
 * (TCP_CORK, as nginx's tcp_nopush): they leave in the body's first segment
 * instead of a small packet of their own, which cost the client a wakeup
 * and a read per answer. sf_pump lets go once the body is out. */
static void sf_cork(sf_gen *g)
{
    int on = 1;
    g->corked = setsockopt(g->sfd, IPPROTO_TCP, TCP_CORK, &on, sizeof(on)) == 0;
}

/* The socket a body of `len` bytes may be sendfile'd to, or NULL: plain
 * HTTP/1 only, with nothing (a filter, TLS) between the answer and it. */
static h2o_socket_t *sendfile_socket(h2o_req_t *req, uint64_t len)
{
    if (len < SITES_SENDFILE_MIN || req->version >= 0x200 || req->prefilters ||
        !req->conn->callbacks->get_socket)
        return NULL;
    h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
    if (!sock || sock->ssl)
        return NULL;
    pthread_once(&sf_by_fd_once, sf_by_fd_init);
    int fd = h2o_socket_get_fd(sock);
    if (fd < 0 || (size_t)fd >= sf_by_fd_cap)
        return NULL;
    return sock;
}

/* Sends `len` bytes of `f` from `off` (HEAD: none). */
static void send_body(site_req *sr, h2o_req_t *req, site_file *f, uint64_t off, uint64_t len)
{
    site_ver *v = sr->v;
    req->res.content_length = (size_t)len;
    int head = h2o_memis(req->method.base, req->method.len, H2O_STRLIT("HEAD"));
    if (head || len == 0) {
        h2o_start_response(req, &no_generator);
        h2o_send(req, NULL, 0, H2O_SEND_STATE_FINAL);
        return;
    }
    h2o_socket_t *sock = sendfile_socket(req, len);
    if (sock && f->fd >= 0) { /* the version, and so f->fd, lives until the request is gone */
        sf_gen *g = h2o_mem_alloc_shared(&req->pool, sizeof(*g), sf_dispose);
        memset(g, 0, sizeof(*g));
        g->super.proceed = sf_proceed;
        g->super.stop = sf_stop;
        g->req = req;
        g->sock = sock;
        g->fd = f->fd;
        g->off = off;
        g->sfd = h2o_socket_get_fd(sock);
        g->timeout_ms = v->send_timeout_ms;
        g->left = len;
        sf_cork(g);
        h2o_start_response(req, &g->super);
        h2o_send(req, NULL, 0, H2O_SEND_STATE_IN_PROGRESS); /* the headers; then sf_proceed */
        return;
    }
    site_blob *b = NULL;
    if (!sock && v->immutable && !(b = take_blob(v, f)))
        b = fill_blob(v, f);
    if (b) { /* held until the request is gone, whatever the cache does */
        sr->f = f;
        sr->blob = b;
        if (req->version < 0x200 && len > READ_CHUNK) {
            mem_gen *g = h2o_mem_alloc_pool(&req->pool, sizeof(*g));
            g->super.proceed = mem_proceed;
            g->super.stop = gen_stop;
            g->p = b->bytes + off;
            g->left = len;
            h2o_start_response(req, &g->super);
            mem_proceed(&g->super, req);
            return;
        }
        h2o_start_response(req, &no_generator);
        h2o_iovec_t iov = h2o_iovec_init(b->bytes + off, (size_t)len);
        h2o_send(req, &iov, 1, H2O_SEND_STATE_FINAL);
        return;
    }
    struct stat st;
    int fd = funcd__site_open(v->root_fd, f->rel, !v->immutable, &st);
    if (fd < 0 || (uint64_t)st.st_size < off + len) {
        if (fd >= 0)
            close(fd);
        req->res.content_length = SIZE_MAX;
        funcd_gw_send_status(req, 503, "ServiceUnavailable", "file %s changed while it was "
                             "being served; try again", f->rel);
        return;
    }
    if (sock) {
        sf_gen *g = h2o_mem_alloc_shared(&req->pool, sizeof(*g), sf_dispose);
        memset(g, 0, sizeof(*g));
        g->super.proceed = sf_proceed;
        g->super.stop = sf_stop;
        g->req = req;
        g->sock = sock;
        g->fd = fd;
        g->own_fd = 1;
        g->sfd = h2o_socket_get_fd(sock);
        g->timeout_ms = v->send_timeout_ms;
        g->off = off;
        g->left = len;
        sf_cork(g);
        h2o_start_response(req, &g->super);
        h2o_send(req, NULL, 0, H2O_SEND_STATE_IN_PROGRESS);
        return;
    }
    file_gen *g = h2o_mem_alloc_shared(&req->pool, sizeof(*g), gen_dispose);
    g->super.proceed = gen_proceed;
    g->super.stop = gen_stop;
    g->fd = fd;
    g->off = off;
    g->left = len;
    g->buf = h2o_mem_alloc_pool(&req->pool, len < READ_CHUNK ? (size_t)len : READ_CHUNK);
    h2o_start_response(req, &g->super);
    gen_read(g, req);
}

int funcd__site_etag_listed(h2o_iovec_t header, const char *etag)
{
    size_t el = strlen(etag);
    const char *p = header.base, *end = p + header.len;
    while (p < end) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == ','))
            p++;
        const char *start = p;
        while (p < end && *p != ',')
            p++;
        const char *e = p;
        while (e > start && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (e - start == 1 && *start == '*')
            return 1;
        if (e - start > 2 && start[0] == 'W' && start[1] == '/')
            start += 2;
        if ((size_t)(e - start) == el && memcmp(start, etag, el) == 0)
            return 1;
    }
    return 0;
}

int64_t funcd__site_parse_date(h2o_iovec_t v)
{
    struct tm tm;
    if (!v.base || h2o_time_parse_rfc1123(v.base, v.len, &tm) != 0)
        return -1;
    return (int64_t)timegm(&tm);
}

static int parse_u64(const char **p, const char *end, uint64_t *out)
{
    const char *s = *p;
    uint64_t n = 0;
    while (s < end && *s >= '0' && *s <= '9') {
        if (n > (UINT64_MAX - 9) / 10)
            return -1;
        n = n * 10 + (uint64_t)(*s - '0');
        s++;
    }
    if (s == *p)
        return -1;
    *p = s;
    *out = n;
    return 0;
}

int funcd__site_parse_range(h2o_iovec_t v, uint64_t size, uint64_t *off, uint64_t *len)
{
    const char *p = v.base, *end = v.base + v.len;
    if (v.len < 7 || strncasecmp(p, "bytes=", 6) != 0 || memchr(p, ',', v.len))
        return -1;
    p += 6;
    while (p < end && *p == ' ')
        p++;
    uint64_t a, b;
    if (p < end && *p == '-') { /* a suffix */
        p++;
        if (parse_u64(&p, end, &b) < 0 || p != end)
            return -1;
        if (b == 0 || size == 0)
            return 0;
        *len = b < size ? b : size;
        *off = size - *len;
        return 1;
    }
    if (parse_u64(&p, end, &a) < 0 || p == end || *p != '-')
        return -1;
    p++;
    b = UINT64_MAX;
    if (p != end && (parse_u64(&p, end, &b) < 0 || p != end || b < a))
        return -1;
    if (a >= size)
        return 0;
    if (b >= size)
        b = size - 1;
    *off = a;
    *len = b - a + 1;
    return 1;
}

int funcd__site_accepts_gzip(h2o_iovec_t v)
{
    const char *p = v.base, *end = v.base + v.len;
    while (p < end) {
        while (p < end && (*p == ' ' || *p == ','))
            p++;
        const char *tok = p;
        while (p < end && *p != ',' && *p != ';' && *p != ' ')
            p++;
        size_t tl = (size_t)(p - tok);
        int gzip = (tl == 4 && strncasecmp(tok, "gzip", 4) == 0) || (tl == 1 && *tok == '*');
        const char *next = memchr(p, ',', (size_t)(end - p));
        const char *param_end = next ? next : end;
        int q0 = 0;
        const char *q = p;
        while (q < param_end && (q = memchr(q, 'q', (size_t)(param_end - q)))) {
            const char *s = q + 1;
            while (s < param_end && *s == ' ')
                s++;
            if (s < param_end && *s == '=') {
                s++;
                while (s < param_end && *s == ' ')
                    s++;
                q0 = s < param_end && *s == '0';
                for (s++; q0 && s < param_end && *s != ' '; s++)
                    q0 = *s == '.' || *s == '0';
            }
            q++;
        }
        if (gzip)
            return !q0;
        p = param_end;
    }
    return 0;
}

/* 1 when the client takes gzip (a q of 0 refuses it). */
static int accepts_gzip(h2o_req_t *req)
{
    ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_ACCEPT_ENCODING, -1);
    return i >= 0 && funcd__site_accepts_gzip(req->headers.entries[i].value);
}

static void serve_file(site_req *sr, h2o_req_t *req, site_file *f, int status)
{
    site_ver *v = sr->v;
    req->res.status = status;
    req->res.reason = reason_of(status);
    h2o_iovec_t range = {NULL, 0};
    if (status == 200) {
        ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_RANGE, -1);
        if (i >= 0)
            range = req->headers.entries[i].value;
        ssize_t ir = h2o_find_header(&req->headers, H2O_TOKEN_IF_RANGE, -1);
        if (range.base && ir >= 0) { /* a range of another version: the whole file */
            h2o_iovec_t vr = req->headers.entries[ir].value;
            int64_t when = funcd__site_parse_date(vr);
            if (!(vr.len == strlen(f->etag) && memcmp(vr.base, f->etag, vr.len) == 0) &&
                !(when >= 0 && when == f->mtime))
                range = h2o_iovec_init(NULL, 0);
        }
    }
    site_file *body = f;
    if (f->gz && !range.base && accepts_gzip(req))
        body = f->gz;
    if (body->type)
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, body->type,
                       strlen(body->type));
    if (body != f)
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_ENCODING, NULL,
                       H2O_STRLIT("gzip"));
    if (f->gz)
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_VARY, NULL,
                       H2O_STRLIT("Accept-Encoding"));
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ETAG, NULL, body->etag,
                   strlen(body->etag));
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_LAST_MODIFIED, NULL,
                   body->last_modified, strlen(body->last_modified));
    if (v->cache_control)
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL,
                       v->cache_control, strlen(v->cache_control));
    if (status != 200) {
        send_body(sr, req, body, 0, body->size);
        return;
    }
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ACCEPT_RANGES, NULL,
                   H2O_STRLIT("bytes"));
    /* Conditions (RFC 9110 13.2.2): If-None-Match decides alone when sent. */
    ssize_t inm = h2o_find_header(&req->headers, H2O_TOKEN_IF_NONE_MATCH, -1);
    int not_modified = 0;
    if (inm >= 0) {
        not_modified = funcd__site_etag_listed(req->headers.entries[inm].value, body->etag);
    } else {
        ssize_t ims = h2o_find_header(&req->headers, H2O_TOKEN_IF_MODIFIED_SINCE, -1);
        int64_t when = ims >= 0 ? funcd__site_parse_date(req->headers.entries[ims].value) : -1;
        not_modified = when >= 0 && body->mtime <= when;
    }
    if (not_modified) {
        req->res.status = 304;
        req->res.reason = reason_of(304);
        h2o_start_response(req, &no_generator);
        h2o_send(req, NULL, 0, H2O_SEND_STATE_FINAL);
        return;
    }
    if (range.base) {
        uint64_t off = 0, len = 0;
        int r = funcd__site_parse_range(range, f->size, &off, &len);
        if (r == 0) {
            char *cr = h2o_mem_alloc_pool(&req->pool, 40);
            int n = snprintf(cr, 40, "bytes */%llu", (unsigned long long)f->size);
            h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_RANGE, NULL, cr,
                           (size_t)n);
            req->res.status = 416;
            req->res.reason = reason_of(416);
            h2o_start_response(req, &no_generator);
            h2o_send(req, NULL, 0, H2O_SEND_STATE_FINAL);
            return;
        }
        if (r == 1) {
            char *cr = h2o_mem_alloc_pool(&req->pool, 80);
            int n = snprintf(cr, 80, "bytes %llu-%llu/%llu", (unsigned long long)off,
                             (unsigned long long)(off + len - 1), (unsigned long long)f->size);
            h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_RANGE, NULL, cr,
                           (size_t)n);
            req->res.status = 206;
            req->res.reason = reason_of(206);
            send_body(sr, req, f, off, len);
            return;
        }
    }
    send_body(sr, req, body, 0, body->size);
}

/* 1 when the last component of `rel` has no '.' (a route of a single-page
 * app, not a missing asset). */
static int looks_like_route(const char *rel)
{
    const char *slash = strrchr(rel, '/');
    return strchr(slash ? slash + 1 : rel, '.') == NULL;
}

int funcd__site_rel(const char *path, size_t len, const char *index, char *out)
{
    while (len && *path == '/')
        path++, len--;
    if (memchr(path, '\0', len))
        return -1;
    int dir = len == 0 || path[len - 1] == '/';
    memcpy(out, path, len);
    if (dir)
        memcpy(out + len, index, strlen(index) + 1);
    else
        out[len] = '\0';
    /* No ".." component reaches the lookup (the kernel would refuse it too). */
    for (const char *p = out; *p;) {
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return -2;
        p += n;
        while (*p == '/')
            p++;
    }
    return dir;
}

/* `path`: below the site's root, decoded and normalized, starting with '/'
 * (or empty). */
static void serve_path(site_req *sr, h2o_req_t *req, const char *path, size_t len)
{
    site_ver *v = sr->v;
    if (!h2o_memis(req->method.base, req->method.len, H2O_STRLIT("GET")) &&
        !h2o_memis(req->method.base, req->method.len, H2O_STRLIT("HEAD"))) {
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ALLOW, NULL,
                       H2O_STRLIT("GET, HEAD"));
        funcd_gw_send_status(req, 405, "MethodNotAllowed", "site %s/%s serves files: GET and "
                             "HEAD only", v->ns, v->name);
        return;
    }
    char *rel = h2o_mem_alloc_pool(&req->pool, len + strlen(v->index) + 1);
    int dir = funcd__site_rel(path, len, v->index, rel);
    if (dir == -1) {
        funcd_gw_send_status(req, 400, "BadRequest", "the path has a NUL byte");
        return;
    }
    if (dir == -2) {
        funcd_gw_send_status(req, 404, "NotFound", "no such file in site %s/%s", v->ns, v->name);
        return;
    }
    int how;
    site_file *f = lookup(v, req, rel, &how);
    if (f) {
        serve_file(sr, req, f, 200);
        return;
    }
    if (how == LOOK_DIR) { /* a directory named without its '/': where its index is */
        redirect_to_dir(req);
        return;
    }
    if (how == LOOK_MISSING && v->spa && !dir && looks_like_route(rel) &&
        (f = lookup(v, req, v->index, &how))) {
        serve_file(sr, req, f, 200);
        return;
    }
    if (v->not_found && (f = lookup(v, req, v->not_found, &how))) {
        serve_file(sr, req, f, 404);
        return;
    }
    funcd_gw_send_status(req, 404, "NotFound", "no such file in site %s/%s", v->ns, v->name);
}

size_t funcd__site_host(h2o_iovec_t host, char name[254])
{
    size_t hl = host.len;
    if (hl && host.base[0] == '[')
        return 0; /* an IPv6 literal is no site's name */
    const char *colon = memchr(host.base, ':', hl);
    if (colon)
        hl = (size_t)(colon - host.base);
    if (hl && host.base[hl - 1] == '.')
        hl--;
    if (hl == 0 || hl > 253)
        return 0;
    for (size_t i = 0; i < hl; i++)
        name[i] = (char)(host.base[i] >= 'A' && host.base[i] <= 'Z' ? host.base[i] + 32
                                                                   : host.base[i]);
    name[hl] = '\0';
    return hl;
}

int funcd_sites_serve(void *payload, h2o_req_t *req, int by_host)
{
    funcd_sites *s = payload;
    const char *p = req->path_normalized.base;
    size_t n = req->path_normalized.len;
    site_ver *v;
    if (by_host) {
        char name[254];
        size_t hl = funcd__site_host(req->authority, name);
        if (!hl || !(v = funcd__sites_find_host(s, name, hl)))
            return 0;
        serve_path(site_req_new(v, req), req, p, n);
        return 1;
    }
    /* /site/{ns}/{name}[/rest] */
    const char *ns = p + 6, *end = p + n;
    const char *slash = ns < end ? memchr(ns, '/', (size_t)(end - ns)) : NULL;
    const char *name = slash ? slash + 1 : end;
    const char *rest = name < end ? memchr(name, '/', (size_t)(end - name)) : NULL;
    size_t nsl = slash ? (size_t)(slash - ns) : 0;
    size_t nl = slash ? (size_t)((rest ? rest : end) - name) : 0;
    if (nsl == 0 || nl == 0 || nsl > 63 || nl > 63) {
        funcd_gw_send_status(req, 404, "NotFound",
                             "no site in path %.*s: sites are served under /site/{namespace}/{name}/",
                             (int)(n > 200 ? 200 : n), p);
        return 1;
    }
    int known = 0;
    v = funcd__sites_find(s, ns, nsl, name, nl, &known);
    if (!v) {
        if (known) {
            h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL,
                           H2O_STRLIT("5"));
            funcd_gw_send_status(req, 503, "ServiceUnavailable",
                                 "site %.*s/%.*s cannot be served; see its Ready condition "
                                 "(funcdctl describe site %.*s)",
                                 (int)nsl, ns, (int)nl, name, (int)nl, name);
        } else {
            funcd_gw_send_status(req, 404, "NotFound",
                                 "site \"%.*s\" not found in namespace \"%.*s\"", (int)nl, name,
                                 (int)nsl, ns);
        }
        return 1;
    }
    site_req *sr = site_req_new(v, req);
    if (!rest) { /* the site's root is its directory: /site/ns/name/ */
        redirect_to_dir(req);
        return 1;
    }
    serve_path(sr, req, rest, (size_t)(end - rest));
    return 1;
}
