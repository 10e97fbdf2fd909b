/*
 * The blob cache (oci.h "the blob cache"; docs/adr/0067-blob-cache-cap.md).
 * Layout of its directory:
 *   <hex>                 a verified blob, named by its sha256 (only ever renamed into place)
 *   .tmp-<12 hex>-XXXXXX  a transfer in progress (the client's; not counted, never evicted)
 *   .tmp-evicted-N        an evicted blob being deleted
 * The index lives in memory and is rebuilt from the directory on open; a
 * blob's modification time is its last use, so the LRU order survives a
 * restart. An entry exists while its blob is stored or held: a pull holds
 * the blobs its manifest names before it looks for them, so a blob it is
 * about to find in the cache, or is writing, is never taken from under it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "funcd/sys/error.h"
#include "oci/blob_cache.h"
#include "oci/oci.h"
#include "util/buf.h"
#include "util/log.h"
#include "util/misc.h"

#define HEX_LEN 64

typedef struct blob_entry {
    struct blob_entry *next;
    char hex[HEX_LEN + 1];
    uint64_t bytes;    /* on disk, when stored */
    uint64_t last_use; /* Unix ns */
    unsigned holds;
    int stored;
    int stuck; /* its rename aside failed in this eviction round: skipped */
} blob_entry;

struct funcd_oci_blob_cache {
    char *dir;
    uint64_t max_bytes;
    const funcd_logger *logger;
    pthread_mutex_t mu;
    unsigned refs;
    blob_entry *entries;
    uint64_t clock; /* the latest use time handed out */
    uint64_t evict_seq;
    funcd_oci_blob_cache_stats stats; /* held is counted on demand */
};

/* The 64 lowercase hex digits of "sha256:<hex>", or NULL. */
static const char *hex_of(const char *digest)
{
    if (!digest || strncmp(digest, "sha256:", 7) != 0)
        return NULL;
    const char *h = digest + 7;
    for (int i = 0; i < HEX_LEN; i++)
        if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
            return NULL;
    return h[HEX_LEN] == '\0' ? h : NULL;
}

static int is_blob_name(const char *name)
{
    size_t n = strspn(name, "0123456789abcdef");
    return n == HEX_LEN && name[n] == '\0';
}

/* Bytes a file takes: its blocks, at least its size. */
static uint64_t usage_of(const struct stat *st)
{
    uint64_t b = (uint64_t)st->st_blocks * 512;
    return b > (uint64_t)st->st_size ? b : (uint64_t)st->st_size;
}

/* ---- the index (callers hold mu) ------------------------------------------------------ */

static blob_entry *find(funcd_oci_blob_cache *c, const char *hex)
{
    for (blob_entry *e = c->entries; e; e = e->next)
        if (memcmp(e->hex, hex, HEX_LEN) == 0)
            return e;
    return NULL;
}

static blob_entry *add(funcd_oci_blob_cache *c, const char *hex)
{
    blob_entry *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    memcpy(e->hex, hex, HEX_LEN);
    e->next = c->entries;
    c->entries = e;
    return e;
}

static void drop(funcd_oci_blob_cache *c, blob_entry *gone)
{
    for (blob_entry **p = &c->entries; *p; p = &(*p)->next)
        if (*p == gone) {
            *p = gone->next;
            free(gone);
            return;
        }
}

static blob_entry *least_recently_used_idle(funcd_oci_blob_cache *c)
{
    blob_entry *lru = NULL;
    for (blob_entry *e = c->entries; e; e = e->next)
        if (e->stored && e->holds == 0 && !e->stuck && (!lru || e->last_use < lru->last_use))
            lru = e;
    return lru;
}

typedef struct victims {
    funcd_buf paths; /* NUL-separated, renamed aside: deleted once mu is released */
    unsigned n;
    uint64_t bytes;
    unsigned stuck; /* blobs that could not be renamed aside: they stay */
    char stuck_hex[HEX_LEN + 1];
    int stuck_errno; /* the first of them, and why */
} victims;

/*
 * Drops stored blobs nobody holds, least recently used first, until the
 * total fits. Each is renamed aside now, so a pull looking for it after
 * this finds nothing and fetches it again rather than a file about to go.
 * A blob whose rename fails (but for ENOENT: already gone) stays, indexed
 * and counted: deleting it by its name once mu is released could take it
 * from a pull that found it in between (review18 L-6). The next one goes
 * in its place; a later round tries it again.
 */
static void evict_locked(funcd_oci_blob_cache *c, victims *v)
{
    while (c->max_bytes && c->stats.bytes > c->max_bytes) {
        blob_entry *e = least_recently_used_idle(c);
        if (!e)
            break;
        char from[PATH_MAX], to[PATH_MAX];
        snprintf(from, sizeof(from), "%s/%s", c->dir, e->hex);
        snprintf(to, sizeof(to), "%s/.tmp-evicted-%llu", c->dir,
                 (unsigned long long)++c->evict_seq);
        if (rename(from, to) == 0) {
            funcd_buf_append(&v->paths, to, strlen(to) + 1);
        } else if (errno != ENOENT) {
            if (v->stuck++ == 0) {
                memcpy(v->stuck_hex, e->hex, sizeof(v->stuck_hex));
                v->stuck_errno = errno;
            }
            e->stuck = 1;
            continue;
        }
        v->n++;
        v->bytes += e->bytes;
        c->stats.bytes -= e->bytes;
        c->stats.blobs--;
        c->stats.evictions++;
        c->stats.evicted_bytes += e->bytes;
        drop(c, e);
    }
    for (blob_entry *e = c->entries; v->stuck && e; e = e->next)
        e->stuck = 0;
}

/* Deletes what evict_locked renamed aside (mu released) and says so. */
static void finish_victims(funcd_oci_blob_cache *c, victims *v, uint64_t kept)
{
    for (size_t off = 0; off < v->paths.len; off += strlen(v->paths.data + off) + 1)
        unlink(v->paths.data + off);
    funcd_buf_free(&v->paths);
    if (v->stuck)
        funcd_log(c->logger, FUNCD_LOG_WARN,
                  "image blob cache: cannot rename blob sha256:%s aside to evict it: %s; "
                  "it stays (%u blob%s stayed so this round)",
                  v->stuck_hex, strerror(v->stuck_errno), v->stuck, v->stuck == 1 ? "" : "s");
    if (v->n)
        funcd_log(c->logger, FUNCD_LOG_INFO,
                  "image blob cache: evicted %u blob%s (%llu bytes), least recently used "
                  "first; %llu bytes stay of the %llu the cap allows",
                  v->n, v->n == 1 ? "" : "s", (unsigned long long)v->bytes,
                  (unsigned long long)kept, (unsigned long long)c->max_bytes);
}

static void evict(funcd_oci_blob_cache *c)
{
    victims v = {.paths = FUNCD_BUF_INIT};
    pthread_mutex_lock(&c->mu);
    evict_locked(c, &v);
    uint64_t kept = c->stats.bytes;
    pthread_mutex_unlock(&c->mu);
    finish_victims(c, &v, kept);
}

/* ---- opening ---------------------------------------------------------------------------- */

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

static int reindex(funcd_oci_blob_cache *c)
{
    DIR *d = opendir(c->dir);
    if (!d)
        return -1;
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(d))) {
        struct stat st;
        if (strncmp(de->d_name, ".tmp-evicted-", 13) == 0) { /* a crash's leftover */
            unlinkat(dirfd(d), de->d_name, 0);
            continue;
        }
        if (!is_blob_name(de->d_name) ||
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue; /* not ours: left alone */
        blob_entry *e = add(c, de->d_name);
        if (!e) {
            rc = -1;
            errno = ENOMEM;
            break;
        }
        e->stored = 1;
        e->bytes = usage_of(&st);
        e->last_use = (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec;
        if (e->last_use > c->clock)
            c->clock = e->last_use;
        c->stats.blobs++;
        c->stats.bytes += e->bytes;
    }
    closedir(d);
    return rc;
}

static void free_cache(funcd_oci_blob_cache *c)
{
    while (c->entries) {
        blob_entry *next = c->entries->next;
        free(c->entries);
        c->entries = next;
    }
    pthread_mutex_destroy(&c->mu);
    free(c->dir);
    free(c);
}

int funcd_oci_blob_cache_open(funcd_oci_blob_cache **out, const char *dir, uint64_t max_bytes,
                              const funcd_logger *logger)
{
    *out = NULL;
    if (!dir || !*dir)
        return funcd_error_set(FUNCD_EINVAL, "image blob cache: no directory");
    funcd_oci_blob_cache *c = calloc(1, sizeof(*c));
    if (!c || !(c->dir = funcd_strdup(dir))) {
        free(c);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory for the image blob cache");
    }
    pthread_mutex_init(&c->mu, NULL);
    c->refs = 1;
    c->max_bytes = max_bytes;
    c->logger = logger;
    if (make_dirs(dir) < 0 || reindex(c) < 0) {
        int rc = funcd_error_set(FUNCD_EIO, "cannot open the image blob cache in %s: %s", dir,
                                 strerror(errno));
        free_cache(c);
        return rc;
    }
    evict(c); /* a smaller cap than the last run's */
    *out = c;
    return 0;
}

funcd_oci_blob_cache *funcd_oci_blob_cache_ref(funcd_oci_blob_cache *c)
{
    pthread_mutex_lock(&c->mu);
    c->refs++;
    pthread_mutex_unlock(&c->mu);
    return c;
}

void funcd_oci_blob_cache_unref(funcd_oci_blob_cache *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    unsigned left = --c->refs;
    pthread_mutex_unlock(&c->mu);
    if (left == 0)
        free_cache(c);
}

void funcd_oci_blob_cache_stats_get(funcd_oci_blob_cache *c, funcd_oci_blob_cache_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    for (blob_entry *e = c->entries; e; e = e->next)
        out->held += e->holds > 0;
    pthread_mutex_unlock(&c->mu);
}

/* ---- holding and using ------------------------------------------------------------------ */

int funcd__oci_blob_hold(funcd_oci_blob_cache *c, const char *digest)
{
    const char *hex = hex_of(digest);
    if (!hex)
        return 0; /* not a blob the cache can store: nothing to keep */
    pthread_mutex_lock(&c->mu);
    blob_entry *e = find(c, hex);
    if (!e)
        e = add(c, hex);
    if (e)
        e->holds++;
    pthread_mutex_unlock(&c->mu);
    return e ? 0 : funcd_error_set(FUNCD_ENOMEM, "out of memory for the image blob cache");
}

void funcd__oci_blob_release(funcd_oci_blob_cache *c, const char *digest)
{
    const char *hex = hex_of(digest);
    if (!hex)
        return;
    int over = 0;
    pthread_mutex_lock(&c->mu);
    blob_entry *e = find(c, hex);
    if (e && e->holds > 0 && --e->holds == 0) {
        if (!e->stored)
            drop(c, e); /* never arrived */
        else
            over = c->max_bytes && c->stats.bytes > c->max_bytes;
    }
    pthread_mutex_unlock(&c->mu);
    if (over) /* what a pull larger than the cap left, or what it could not evict */
        evict(c);
}

void funcd__oci_blob_used(funcd_oci_blob_cache *c, const char *digest, const struct stat *st,
                          int stored)
{
    const char *hex = hex_of(digest);
    if (!hex)
        return;
    pthread_mutex_lock(&c->mu);
    blob_entry *e = find(c, hex);
    if (!e)
        e = add(c, hex);
    if (e) {
        uint64_t bytes = usage_of(st);
        if (e->stored) {
            c->stats.bytes -= e->bytes;
        } else {
            e->stored = 1;
            c->stats.blobs++;
        }
        e->bytes = bytes;
        c->stats.bytes += bytes;
        e->last_use = funcd_use_tick(&c->clock);
    }
    pthread_mutex_unlock(&c->mu);
    if (!stored) { /* found in the cache: its use time, for a restart */
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", c->dir, hex);
        utimensat(AT_FDCWD, path, NULL, 0);
        return;
    }
    evict(c);
}

int funcd_oci_image_hold_blobs(funcd_oci_image *img, funcd_oci_blob_cache *c)
{
    if (!img || !c || img->blobs)
        return 0;
    int rc = img->config_digest ? funcd__oci_blob_hold(c, img->config_digest) : 0;
    if (rc < 0)
        return rc;
    size_t held = 0;
    while (rc == 0 && held < img->n_layers)
        if ((rc = funcd__oci_blob_hold(c, img->layer_digests[held])) == 0)
            held++;
    if (rc < 0) {
        if (img->config_digest)
            funcd__oci_blob_release(c, img->config_digest);
        for (size_t i = 0; i < held; i++)
            funcd__oci_blob_release(c, img->layer_digests[i]);
        return rc;
    }
    img->blobs = funcd_oci_blob_cache_ref(c);
    return 0;
}

void funcd__oci_image_release_blobs(funcd_oci_image *img)
{
    funcd_oci_blob_cache *c = img->blobs;
    if (!c)
        return;
    img->blobs = NULL;
    if (img->config_digest)
        funcd__oci_blob_release(c, img->config_digest);
    for (size_t i = 0; img->layer_digests && i < img->n_layers; i++)
        funcd__oci_blob_release(c, img->layer_digests[i]);
    funcd_oci_blob_cache_unref(c);
}
