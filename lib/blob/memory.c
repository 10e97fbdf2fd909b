/*
 * The in-process blob store: objects in a sorted array (binary search, byte
 * order for listing), one mutex. Data is copied outside the lock on put, and
 * list callbacks run on a snapshot outside the lock so they may call back in.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "blob/shared.h"
#include "funcd/sys/blob.h"
#include "funcd/sys/error.h"
#include "port/blob.h"
#include "util/misc.h"

typedef struct blob_obj {
    char *key;
    unsigned char *data; /* NULL for an empty object */
    size_t len;
    int64_t mtime_ms;
} blob_obj;

typedef struct memory_blob {
    funcd_blob base;
    pthread_mutex_t lock;
    blob_obj **objs; /* sorted by strcmp */
    size_t n, cap;
} memory_blob;

static memory_blob *mb(funcd_blob *b)
{
    return (memory_blob *)b;
}

static size_t lower_bound(const memory_blob *m, const char *key)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(m->objs[mid]->key, key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static blob_obj *find(const memory_blob *m, const char *key, size_t *pos)
{
    size_t i = lower_bound(m, key);
    if (pos)
        *pos = i;
    return i < m->n && strcmp(m->objs[i]->key, key) == 0 ? m->objs[i] : NULL;
}

static int not_found(const char *key, const char *what)
{
    return funcd_error_set(FUNCD_ENOTFOUND,
                           "blob: cannot %s \"%s\": no such object; list the prefix to see what "
                           "exists, or upload it first",
                           what, key);
}

/* Inserts a new object at `pos`; on failure nothing changes. */
static int insert(memory_blob *m, size_t pos, const char *key, unsigned char *data, size_t len)
{
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 32;
        blob_obj **p = realloc(m->objs, cap * sizeof(*p));
        if (!p)
            return FUNCD_ENOMEM;
        m->objs = p;
        m->cap = cap;
    }
    blob_obj *o = calloc(1, sizeof(*o));
    if (!o || !(o->key = strdup(key))) {
        free(o);
        return FUNCD_ENOMEM;
    }
    o->data = data;
    o->len = len;
    o->mtime_ms = funcd_now_ms();
    memmove(&m->objs[pos + 1], &m->objs[pos], (m->n - pos) * sizeof(*m->objs));
    m->objs[pos] = o;
    m->n++;
    return 0;
}

/* Publishes `copy` (malloc()ed, ours now; NULL for 0 bytes) under `key`. */
static int store_owned(memory_blob *m, const char *key, unsigned char *copy, size_t len)
{
    pthread_mutex_lock(&m->lock);
    size_t pos;
    blob_obj *o = find(m, key, &pos);
    if (o) {
        unsigned char *old = o->data;
        o->data = copy;
        o->len = len;
        o->mtime_ms = funcd_now_ms();
        copy = old; /* freed below, outside the lock */
    } else if (insert(m, pos, key, copy, len) < 0) {
        pthread_mutex_unlock(&m->lock);
        free(copy);
        return funcd_error_set(FUNCD_ENOMEM, "blob: out of memory storing \"%s\"", key);
    } else {
        copy = NULL;
    }
    pthread_mutex_unlock(&m->lock);
    free(copy);
    return 0;
}

static int mem_put(funcd_blob *b, const char *key, const void *data, size_t len)
{
    memory_blob *m = mb(b);
    int rc = funcd_blob_check_key(key, "put");
    if (rc < 0)
        return rc;
    if (!data && len)
        return funcd_error_set(FUNCD_EINVAL, "blob: put of \"%s\" has no data but %zu bytes", key,
                               len);
    unsigned char *copy = NULL;
    if (len && !(copy = malloc(len)))
        return funcd_error_set(FUNCD_ENOMEM, "blob: out of memory storing %zu bytes under \"%s\"",
                               len, key);
    if (len)
        memcpy(copy, data, len);
    return store_owned(m, key, copy, len);
}

/* ---- put_open: the bytes gather in the writer, published at commit ---- */

static int publish_gathered(funcd_blob *b, const char *key, unsigned char *data, size_t len)
{
    return store_owned(mb(b), key, data, len);
}

static int mem_put_open(funcd_blob *b, const char *key, funcd_blob_writer **out)
{
    int rc = funcd_blob_check_key(key, "put");
    if (rc < 0)
        return rc;
    return funcd_port_blob_gathering_writer(b, key, publish_gathered, out);
}

/* get() under the lock (shared.c checks the arguments and takes it). */
static int get_locked(void *blob, const char *key, uint64_t offset, uint64_t length, void **out,
                      size_t *out_len)
{
    blob_obj *o = find(blob, key, NULL);
    if (!o)
        return not_found(key, "read");
    size_t n;
    unsigned char *copy;
    int rc = funcd_blob_span(key, o->len, offset, length, &n, &copy);
    if (rc < 0)
        return rc;
    if (n)
        memcpy(copy, o->data + offset, n);
    *out = copy;
    *out_len = n;
    return 0;
}

static int mem_get(funcd_blob *b, const char *key, uint64_t offset, uint64_t length, void **out,
                   size_t *out_len)
{
    memory_blob *m = mb(b);
    return funcd_blob_get_locked(&m->lock, m, get_locked, key, offset, length, out, out_len);
}

static int stat_locked(void *blob, const char *key, funcd_blob_stat *out)
{
    blob_obj *o = find(blob, key, NULL);
    if (o) {
        out->size = o->len;
        out->mtime_ms = o->mtime_ms;
    }
    return o != NULL;
}

static int mem_stat(funcd_blob *b, const char *key, funcd_blob_stat *out)
{
    memory_blob *m = mb(b);
    return funcd_blob_stat_locked(&m->lock, m, stat_locked, key, out);
}

typedef struct listed {
    char *key;
    funcd_blob_stat st;
} listed;

static void free_listed(listed *items, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(items[i].key);
    free(items);
}

/* Copies the matching keys so callbacks run without the lock held. */
static int snapshot(memory_blob *m, const char *prefix, listed **out, size_t *out_n)
{
    size_t plen = strlen(prefix), n = 0;
    pthread_mutex_lock(&m->lock);
    size_t first = lower_bound(m, prefix), end = first;
    while (end < m->n && strncmp(m->objs[end]->key, prefix, plen) == 0)
        end++;
    listed *items = calloc(end - first + 1, sizeof(*items));
    for (size_t i = first; items && i < end; i++, n++) {
        const blob_obj *o = m->objs[i];
        items[n].st.size = o->len;
        items[n].st.mtime_ms = o->mtime_ms;
        if (!(items[n].key = strdup(o->key))) {
            free_listed(items, n);
            items = NULL;
        }
    }
    pthread_mutex_unlock(&m->lock);
    if (!items)
        return funcd_error_set(FUNCD_ENOMEM, "blob: out of memory listing prefix \"%s\"", prefix);
    *out = items;
    *out_n = n;
    return 0;
}

static int mem_list(funcd_blob *b, const char *prefix, funcd_blob_list_cb cb, void *payload)
{
    if (!cb)
        return funcd_error_set(FUNCD_EINVAL, "blob: list needs a callback");
    listed *items = NULL;
    size_t n = 0;
    int rc = snapshot(mb(b), prefix ? prefix : "", &items, &n);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n; i++)
        if (cb(items[i].key, &items[i].st, payload))
            break;
    free_listed(items, n);
    return 0;
}

static int mem_del(funcd_blob *b, const char *key)
{
    memory_blob *m = mb(b);
    int rc = funcd_blob_check_key(key, "delete");
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&m->lock);
    size_t pos;
    blob_obj *o = find(m, key, &pos);
    if (o) {
        memmove(&m->objs[pos], &m->objs[pos + 1], (m->n - pos - 1) * sizeof(*m->objs));
        m->n--;
    }
    pthread_mutex_unlock(&m->lock);
    if (!o)
        return not_found(key, "delete");
    free(o->key);
    free(o->data);
    free(o);
    return 0;
}

static void mem_free(funcd_blob *b)
{
    memory_blob *m = mb(b);
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++) {
        free(m->objs[i]->key);
        free(m->objs[i]->data);
        free(m->objs[i]);
    }
    free(m->objs);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

FUNCD_EXTERN int funcd_blob_memory_new(funcd_blob **out)
{
    if (!out)
        return funcd_error_set(FUNCD_EINVAL, "blob: funcd_blob_memory_new needs an out pointer");
    *out = NULL;
    memory_blob *m = calloc(1, sizeof(*m));
    if (!m)
        return funcd_error_set(FUNCD_ENOMEM, "blob: out of memory creating the memory blob store");
    if (pthread_mutex_init(&m->lock, NULL)) {
        free(m);
        return funcd_error_set(FUNCD_EIO, "blob: cannot create the memory blob store's mutex");
    }
    m->base.version = FUNCD_BLOB_VERSION;
    m->base.name = "memory";
    m->base.put = mem_put;
    m->base.get = mem_get;
    m->base.stat = mem_stat;
    m->base.list = mem_list;
    m->base.del = mem_del;
    m->base.free = mem_free;
    m->base.put_open = mem_put_open;
    *out = &m->base;
    return 0;
}
