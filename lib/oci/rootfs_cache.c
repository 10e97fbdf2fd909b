/*
 * The per-digest rootfs cache. Layout of the cache directory:
 *   <alg>-<hex>/                        a complete rootfs (only ever renamed into place)
 *   <alg>-<hex>.tmp-XXXXXX/             an extraction in progress (or a crash's leftover)
 *   <alg>-<hex>.tmp-evicted-N/          an evicted rootfs being removed
 * The index lives in memory and is rebuilt from the directory on start; a
 * rootfs directory's mtime is its last use, so LRU order survives restarts.
 * Trees are removed outside the lock (they can be large); eviction first
 * renames them out of the way under it, so a new get of the same digest
 * never meets a half-removed tree.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "artifact/extract_common.h"
#include "funcd/sys/error.h"
#include "oci/unpack.h"
#include "util/buf.h"
#include "util/misc.h"

#define MAX_ALG 32
#define MIN_HEX 32
#define MAX_HEX 128
#define NAME_LEN (MAX_ALG + 1 + MAX_HEX + 1)
/* Rootfs trees are at most FUNCD_UNPACK_MAX_DEPTH deep plus the mount points. */
#define USAGE_MAX_DEPTH (FUNCD_UNPACK_MAX_DEPTH + 8)

enum entry_state { ENTRY_EXTRACTING, ENTRY_READY };

typedef struct entry {
    struct entry *next;
    char name[NAME_LEN];
    uint64_t bytes;
    uint64_t last_use; /* Unix ns */
    unsigned refs;
    int state;
} entry;

struct funcd_rootfs_cache {
    char *dir;
    uint64_t max_bytes;
    pthread_mutex_t mu;
    pthread_cond_t changed; /* an extraction finished */
    entry *entries;
    uint64_t clock; /* the latest last_use handed out */
    uint64_t evict_seq;
    funcd_rootfs_cache_stats stats; /* in_use is computed on demand */
};

static int cache_fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int cache_fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (err && errlen)
        snprintf(err, errlen, "%s", msg);
    return funcd_error_set(code, "%s", msg);
}

/* ---- names ---------------------------------------------------------------------------- */

static bool is_alg_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
}

static bool is_hex_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '=' || ch == '_' || ch == '-';
}

/*
 * Checks "<alg><sep><encoded>" and writes "<alg>-<encoded>" into `name`.
 * The algorithm is letters and digits only, so the mapping is one to one.
 */
static bool digest_name(const char *s, char sep, char name[NAME_LEN])
{
    size_t alg = 0, hex = 0;
    while (is_alg_char(s[alg]))
        alg++;
    if (alg == 0 || alg > MAX_ALG || s[alg] != sep)
        return false;
    const char *h = s + alg + 1;
    while (is_hex_char(h[hex]))
        hex++;
    if (h[hex] != '\0' || hex < MIN_HEX || hex > MAX_HEX)
        return false;
    snprintf(name, NAME_LEN, "%.*s-%s", (int)alg, s, h);
    return true;
}

/* ---- disk usage ----------------------------------------------------------------------- */

/* A file with several links counts its share per link, so a tree's links add up to one copy. */
static uint64_t usage_of(const struct stat *st)
{
    uint64_t b = (uint64_t)st->st_blocks * 512;
    return !S_ISDIR(st->st_mode) && st->st_nlink > 1 ? b / st->st_nlink : b;
}

static uint64_t disk_usage_at(int dfd, const char *name, int depth)
{
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return 0;
    uint64_t total = usage_of(&st);
    if (!S_ISDIR(st.st_mode) || depth > USAGE_MAX_DEPTH)
        return total;
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return total;
    }
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            total += disk_usage_at(dirfd(d), de->d_name, depth + 1);
    closedir(d);
    return total;
}

/* ---- the index (callers hold mu) ----------------------------------------------------------- */

static entry *find(funcd_rootfs_cache *c, const char *name)
{
    for (entry *e = c->entries; e; e = e->next)
        if (strcmp(e->name, name) == 0)
            return e;
    return NULL;
}

static void unlink_entry(funcd_rootfs_cache *c, entry *gone)
{
    for (entry **p = &c->entries; *p; p = &(*p)->next)
        if (*p == gone) {
            *p = gone->next;
            return;
        }
}

static entry *least_recently_used_idle(funcd_rootfs_cache *c)
{
    entry *lru = NULL;
    for (entry *e = c->entries; e; e = e->next)
        if (e->state == ENTRY_READY && e->refs == 0 && (!lru || e->last_use < lru->last_use))
            lru = e;
    return lru;
}

/*
 * Drops idle rootfs, least recently used first, until the total fits; each
 * is renamed aside now and its name appended (NUL-separated) to `victims`
 * for removal once the lock is released.
 */
static void evict_locked(funcd_rootfs_cache *c, funcd_buf *victims)
{
    while (c->max_bytes && c->stats.bytes > c->max_bytes) {
        entry *e = least_recently_used_idle(c);
        if (!e)
            return;
        char from[PATH_MAX], to[PATH_MAX];
        snprintf(from, sizeof(from), "%s/%s", c->dir, e->name);
        snprintf(to, sizeof(to), "%s/%s.tmp-evicted-%llu", c->dir, e->name,
                 (unsigned long long)++c->evict_seq);
        const char *doomed = rename(from, to) == 0 ? to : from;
        funcd_buf_append(victims, doomed, strlen(doomed) + 1);
        c->stats.bytes -= e->bytes;
        c->stats.entries--;
        c->stats.evictions++;
        unlink_entry(c, e);
        free(e);
    }
}

static void remove_victims(funcd_buf *victims)
{
    for (size_t off = 0; off < victims->len; off += strlen(victims->data + off) + 1)
        funcd__remove_tree_at(AT_FDCWD, victims->data + off);
    funcd_buf_free(victims);
}

/* ---- opening ------------------------------------------------------------------------ */

static int make_dirs(const char *dir)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *s = path + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(path, 0755) < 0 && errno != EEXIST)
            return -1;
        *s = '/';
    }
    return mkdir(path, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

static int index_one(funcd_rootfs_cache *c, int dfd, const char *name)
{
    char canonical[NAME_LEN];
    struct stat st;
    if (strstr(name, ".tmp-"))
        return funcd__remove_tree_at(dfd, name);
    if (!digest_name(name, '-', canonical) || strcmp(canonical, name) != 0 ||
        fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
        return 0; /* not ours: left alone */
    entry *e = calloc(1, sizeof(*e));
    if (!e)
        return -1;
    snprintf(e->name, sizeof(e->name), "%s", name);
    e->state = ENTRY_READY;
    e->bytes = disk_usage_at(dfd, name, 0);
    e->last_use = (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec;
    if (e->last_use > c->clock)
        c->clock = e->last_use;
    e->next = c->entries;
    c->entries = e;
    c->stats.entries++;
    c->stats.bytes += e->bytes;
    return 0;
}

static int reindex(funcd_rootfs_cache *c)
{
    DIR *d = opendir(c->dir);
    if (!d)
        return -1;
    funcd_buf names = FUNCD_BUF_INIT;
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(d)))
        if (de->d_name[0] != '.')
            rc = funcd_buf_append(&names, de->d_name, strlen(de->d_name) + 1);
    for (size_t off = 0; !rc && off < names.len; off += strlen(names.data + off) + 1)
        rc = index_one(c, dirfd(d), names.data + off);
    funcd_buf_free(&names);
    closedir(d);
    return rc;
}

static void free_entries(funcd_rootfs_cache *c)
{
    while (c->entries) {
        entry *next = c->entries->next;
        free(c->entries);
        c->entries = next;
    }
}

int funcd_rootfs_cache_new(funcd_rootfs_cache **out, const char *dir, uint64_t max_bytes)
{
    *out = NULL;
    if (!dir || !*dir)
        return funcd_error_set(FUNCD_EINVAL, "rootfs cache: no directory");
    funcd_rootfs_cache *c = calloc(1, sizeof(*c));
    if (!c)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory for the rootfs cache");
    c->max_bytes = max_bytes;
    if (make_dirs(dir) < 0 || !(c->dir = realpath(dir, NULL)) || reindex(c) < 0) {
        int rc = funcd_error_set(FUNCD_EIO, "cannot open the rootfs cache in %s: %s", dir,
                                 strerror(errno));
        free_entries(c);
        free(c->dir);
        free(c);
        return rc;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->changed, NULL);
    funcd_buf victims = FUNCD_BUF_INIT;
    evict_locked(c, &victims); /* no other thread has c yet */
    remove_victims(&victims);
    *out = c;
    return 0;
}

void funcd_rootfs_cache_free(funcd_rootfs_cache *c)
{
    if (!c)
        return;
    free_entries(c);
    pthread_cond_destroy(&c->changed);
    pthread_mutex_destroy(&c->mu);
    free(c->dir);
    free(c);
}

/* ---- use ---------------------------------------------------------------------------- */

/* Holds a ready entry or, when absent, claims its extraction (*claimed). Waits meanwhile. */
static int hold_or_claim(funcd_rootfs_cache *c, const char *name, bool *claimed)
{
    *claimed = false;
    for (;;) {
        entry *e = find(c, name);
        if (e && e->state == ENTRY_READY) {
            e->refs++;
            e->last_use = funcd_use_tick(&c->clock);
            return 0;
        }
        if (!e)
            break;
        pthread_cond_wait(&c->changed, &c->mu);
    }
    entry *e = calloc(1, sizeof(*e));
    if (!e)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory for the rootfs cache");
    snprintf(e->name, sizeof(e->name), "%s", name);
    e->state = ENTRY_EXTRACTING;
    e->refs = 1;
    e->next = c->entries;
    c->entries = e;
    *claimed = true;
    return 0;
}

/* Records the outcome of this thread's extraction and wakes the waiters. */
static void finish_extraction(funcd_rootfs_cache *c, const char *name, int rc, uint64_t bytes)
{
    entry *e = find(c, name);
    if (rc) {
        unlink_entry(c, e); /* a waiter, if any, tries again itself */
        free(e);
    } else {
        e->state = ENTRY_READY;
        e->bytes = bytes;
        e->last_use = funcd_use_tick(&c->clock);
        c->stats.entries++;
        c->stats.bytes += bytes;
        c->stats.extractions++;
    }
    pthread_cond_broadcast(&c->changed);
}

int funcd_rootfs_cache_get(funcd_rootfs_cache *c, const char *manifest_digest,
                           const char *const *layer_paths, const char *const *media_types,
                           size_t n, char *out_dir, size_t out_len, char *err, size_t errlen)
{
    char name[NAME_LEN], path[PATH_MAX];
    if (!c || !manifest_digest || !digest_name(manifest_digest, ':', name))
        return cache_fail(err, errlen, FUNCD_EINVAL,
                          "rootfs cache: \"%s\" is not a manifest digest (algorithm:hex)",
                          manifest_digest ? manifest_digest : "");
    int len = snprintf(path, sizeof(path), "%s/%s", c->dir, name);
    if (len < 0 || (size_t)len >= out_len || (size_t)len >= sizeof(path))
        return cache_fail(err, errlen, FUNCD_EINVAL,
                          "rootfs cache: the path %s does not fit in %zu bytes", path, out_len);
    bool claimed;
    pthread_mutex_lock(&c->mu);
    int rc = hold_or_claim(c, name, &claimed);
    pthread_mutex_unlock(&c->mu);
    if (rc)
        return cache_fail(err, errlen, rc, "%s", funcd_error_last()->message);

    uint64_t bytes = 0;
    if (claimed) {
        rc = funcd_oci_unpack(layer_paths, media_types, n, path, NULL, err, errlen);
        if (rc == FUNCD_EEXISTS) /* another process's, made since we indexed */
            rc = 0;
        if (!rc)
            bytes = disk_usage_at(AT_FDCWD, path, 0);
    } else {
        utimensat(AT_FDCWD, path, NULL, AT_SYMLINK_NOFOLLOW); /* the LRU order, for restarts */
    }
    funcd_buf victims = FUNCD_BUF_INIT;
    pthread_mutex_lock(&c->mu);
    if (claimed)
        finish_extraction(c, name, rc, bytes);
    evict_locked(c, &victims);
    pthread_mutex_unlock(&c->mu);
    remove_victims(&victims);
    if (!rc)
        memcpy(out_dir, path, (size_t)len + 1);
    return rc;
}

void funcd_rootfs_cache_put(funcd_rootfs_cache *c, const char *manifest_digest)
{
    char name[NAME_LEN];
    if (!c || !manifest_digest || !digest_name(manifest_digest, ':', name))
        return;
    funcd_buf victims = FUNCD_BUF_INIT;
    pthread_mutex_lock(&c->mu);
    entry *e = find(c, name);
    if (e && e->state == ENTRY_READY && e->refs > 0) {
        e->refs--;
        e->last_use = funcd_use_tick(&c->clock);
    }
    evict_locked(c, &victims);
    pthread_mutex_unlock(&c->mu);
    remove_victims(&victims);
}

int funcd_rootfs_cache_has(funcd_rootfs_cache *c, const char *manifest_digest)
{
    char name[NAME_LEN];
    if (!c || !manifest_digest || !digest_name(manifest_digest, ':', name))
        return 0;
    pthread_mutex_lock(&c->mu);
    entry *e = find(c, name);
    int ready = e && e->state == ENTRY_READY;
    pthread_mutex_unlock(&c->mu);
    return ready;
}

void funcd_rootfs_cache_stats_get(funcd_rootfs_cache *c, funcd_rootfs_cache_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    for (entry *e = c->entries; e; e = e->next)
        out->in_use += e->state == ENTRY_READY && e->refs > 0;
    pthread_mutex_unlock(&c->mu);
}
