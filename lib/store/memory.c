/*
 * The in-process store: keys in a sorted array of pointers (binary search,
 * byte order for free), one recursive mutex, a global revision counter and a
 * ring of the last `history` events for watch replay.
 *
 * Watch callbacks run on the writer's thread under the lock, so events reach
 * every watcher in revision order and unwatch from another thread cannot
 * return while a callback runs. The mutex is recursive so a callback can
 * unwatch (itself or others), get or list; writes from inside a callback are
 * refused because they would reorder the events other watchers see.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "funcd/sys/error.h"
#include "store/watchers.h"
#include "funcd/sys/store.h"

#define DEFAULT_HISTORY 65536
#define MIN_RING 64

typedef struct entry {
    char *key;
    char *value; /* NUL-terminated; the terminator is not counted in len */
    size_t len;
    uint64_t revision;
    uint64_t create_revision;
} entry;

typedef struct history_event {
    funcd_store_event_type type;
    char *key;
    char *value;
    size_t len;
    uint64_t revision;
    uint64_t create_revision;
} history_event;

typedef struct memory_store {
    funcd_store base;
    pthread_mutex_t lock;

    entry **entries; /* sorted by strcmp (byte order) */
    size_t n_entries, cap_entries;

    history_event *ring;
    size_t ring_cap, ring_len, ring_head, history;
    uint64_t revision;
    uint64_t compacted; /* newest revision dropped from the ring (0: none) */

    funcd_watch_list watches; /* its in_callback also guards the entries */
} memory_store;

static memory_store *ms(funcd_store *s)
{
    return (memory_store *)s;
}

static void lock(memory_store *m)
{
    pthread_mutex_lock(&m->lock);
}

static void unlock(memory_store *m)
{
    pthread_mutex_unlock(&m->lock);
}

/* Index of the first entry whose key is >= key. */
static size_t lower_bound(const memory_store *m, const char *key)
{
    size_t lo = 0, hi = m->n_entries;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(m->entries[mid]->key, key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static entry *find(const memory_store *m, const char *key, size_t *pos)
{
    size_t i = lower_bound(m, key);
    if (pos)
        *pos = i;
    if (i < m->n_entries && strcmp(m->entries[i]->key, key) == 0)
        return m->entries[i];
    return NULL;
}

static char *copy_value(const void *value, size_t len)
{
    char *p = malloc(len + 1);
    if (!p)
        return NULL;
    if (len)
        memcpy(p, value, len);
    p[len] = '\0';
    return p;
}

/* Makes room for one more event so that committing a write cannot fail. */
static int ring_reserve(memory_store *m)
{
    if (m->ring_len < m->ring_cap || m->ring_cap == m->history)
        return 0;
    size_t cap = m->ring_cap ? m->ring_cap * 2 : MIN_RING;
    if (cap > m->history)
        cap = m->history;
    history_event *ring = malloc(cap * sizeof(*ring));
    if (!ring)
        return funcd_error_set(FUNCD_ENOMEM, "store: out of memory growing the watch history");
    for (size_t i = 0; i < m->ring_len; i++)
        ring[i] = m->ring[(m->ring_head + i) % m->ring_cap];
    free(m->ring);
    m->ring = ring;
    m->ring_cap = cap;
    m->ring_head = 0;
    return 0;
}

static history_event *ring_at(const memory_store *m, size_t i)
{
    return &m->ring[(m->ring_head + i) % m->ring_cap];
}

/* Takes ownership of ev's strings; ring_reserve() ran before. */
static const history_event *ring_push(memory_store *m, history_event ev)
{
    if (m->ring_len == m->history) {
        history_event *old = ring_at(m, 0);
        m->compacted = old->revision;
        free(old->key);
        free(old->value);
        m->ring_head = (m->ring_head + 1) % m->ring_cap;
        m->ring_len--;
    }
    history_event *slot = ring_at(m, m->ring_len);
    *slot = ev;
    m->ring_len++;
    return slot;
}

static funcd_store_event event_of(const history_event *h)
{
    return (funcd_store_event){h->type, h->key, h->value, h->len, h->revision,
                               h->create_revision};
}

static void dispatch(memory_store *m, const history_event *h)
{
    funcd_store_event ev = event_of(h);
    funcd_watch_list_dispatch(&m->watches, &ev);
}

static int mem_get(funcd_store *s, const char *key, funcd_store_value *out)
{
    memory_store *m = ms(s);
    int rc = funcd_store_check_key(key, "get");
    if (rc < 0)
        return rc;
    if (!out)
        return funcd_error_set(FUNCD_EINVAL, "store: get of key \"%s\" needs an out value", key);
    lock(m);
    entry *e = find(m, key, NULL);
    if (!e) {
        unlock(m);
        return funcd_error_set(FUNCD_ENOTFOUND,
                               "store: key \"%s\" not found; list its prefix to see what exists",
                               key);
    }
    char *copy = copy_value(e->value, e->len);
    if (copy) {
        out->value = copy;
        out->len = e->len;
        out->revision = e->revision;
        out->create_revision = e->create_revision;
    }
    unlock(m);
    if (!copy)
        return funcd_error_set(FUNCD_ENOMEM, "store: out of memory copying key \"%s\"", key);
    return 0;
}

static int grow_entries(memory_store *m)
{
    if (m->n_entries < m->cap_entries)
        return 0;
    size_t cap = m->cap_entries ? m->cap_entries * 2 : 64;
    entry **p = realloc(m->entries, cap * sizeof(*p));
    if (!p)
        return FUNCD_ENOMEM;
    m->entries = p;
    m->cap_entries = cap;
    return 0;
}

/* Everything a put allocates, gathered before anything changes. */
typedef struct put_alloc {
    entry *fresh;   /* the new entry when the key is absent */
    char *value;    /* the entry's copy */
    char *hist_key; /* the history event's copies */
    char *hist_value;
} put_alloc;

static void put_alloc_free(put_alloc *a)
{
    if (a->fresh)
        free(a->fresh->key);
    free(a->fresh);
    free(a->value);
    free(a->hist_key);
    free(a->hist_value);
}

static int put_prepare(memory_store *m, const entry *e, const char *key, const void *value,
                       size_t len, put_alloc *a)
{
    int fail = 0;
    if (!e) {
        a->fresh = calloc(1, sizeof(*a->fresh));
        fail |= !a->fresh || !(a->fresh->key = strdup(key)) || grow_entries(m) < 0;
    }
    fail |= !(a->value = copy_value(value, len));
    fail |= !(a->hist_key = strdup(key));
    fail |= !(a->hist_value = copy_value(value, len));
    fail |= ring_reserve(m) < 0;
    if (fail) {
        put_alloc_free(a);
        return funcd_error_set(FUNCD_ENOMEM, "store: out of memory writing key \"%s\"", key);
    }
    return 0;
}

static int mem_put(funcd_store *s, const char *key, const void *value, size_t len,
                   uint64_t expected, uint64_t *revision)
{
    memory_store *m = ms(s);
    int rc = funcd_store_check_key(key, "put");
    if (rc < 0)
        return rc;
    if (!value && len)
        return funcd_error_set(FUNCD_EINVAL, "store: put of key \"%s\" has no value but %zu bytes",
                               key, len);
    lock(m);
    size_t pos;
    entry *e = find(m, key, &pos);
    put_alloc a = {0};
    if ((rc = funcd_store_refuse_in_callback(&m->watches, "put", key)) < 0 ||
        (rc = funcd_store_check_expected(e != NULL, e ? e->revision : 0, key, expected)) < 0 ||
        (rc = put_prepare(m, e, key, value, len, &a)) < 0) {
        unlock(m);
        return rc;
    }
    uint64_t rev = ++m->revision;
    if (!e) {
        e = a.fresh;
        e->create_revision = rev;
        memmove(&m->entries[pos + 1], &m->entries[pos], (m->n_entries - pos) * sizeof(*m->entries));
        m->entries[pos] = e;
        m->n_entries++;
    }
    free(e->value);
    e->value = a.value;
    e->len = len;
    e->revision = rev;
    history_event ev = {FUNCD_STORE_EVENT_PUT, a.hist_key, a.hist_value, len, rev,
                        e->create_revision};
    dispatch(m, ring_push(m, ev));
    unlock(m);
    if (revision)
        *revision = rev;
    return 0;
}

static int mem_del(funcd_store *s, const char *key, uint64_t expected, uint64_t *revision)
{
    memory_store *m = ms(s);
    int rc = funcd_store_check_key(key, "delete");
    if (rc < 0)
        return rc;
    if (expected == FUNCD_STORE_ABSENT)
        return funcd_error_set(FUNCD_EINVAL,
                               "store: delete of key \"%s\" expects it absent; pass its revision "
                               "or FUNCD_STORE_ANY",
                               key);
    lock(m);
    size_t pos;
    entry *e = find(m, key, &pos);
    if ((rc = funcd_store_refuse_in_callback(&m->watches, "delete", key)) < 0 ||
        (rc = funcd_store_check_expected(e != NULL, e ? e->revision : 0, key, expected)) < 0) {
        unlock(m);
        return rc;
    }
    if (!e) {
        unlock(m);
        return funcd_error_set(FUNCD_ENOTFOUND,
                               "store: cannot delete key \"%s\": it does not exist", key);
    }
    if (ring_reserve(m) < 0) {
        unlock(m);
        return FUNCD_ENOMEM;
    }
    uint64_t rev = ++m->revision;
    memmove(&m->entries[pos], &m->entries[pos + 1], (m->n_entries - pos - 1) * sizeof(*m->entries));
    m->n_entries--;
    /* The event inherits the entry's strings: it carries the previous value. */
    history_event ev = {FUNCD_STORE_EVENT_DELETE, e->key, e->value, e->len, rev,
                        e->create_revision};
    free(e);
    dispatch(m, ring_push(m, ev));
    unlock(m);
    if (revision)
        *revision = rev;
    return 0;
}

static int mem_list(funcd_store *s, const char *prefix, funcd_store_list_cb cb, void *payload,
                    uint64_t *revision)
{
    memory_store *m = ms(s);
    if (!cb)
        return funcd_error_set(FUNCD_EINVAL, "store: list needs a callback");
    if (!prefix)
        prefix = "";
    size_t plen = strlen(prefix);
    lock(m);
    if (revision)
        *revision = m->revision;
    funcd_watch_list_enter(&m->watches);
    for (size_t i = lower_bound(m, prefix); i < m->n_entries; i++) {
        const entry *e = m->entries[i];
        if (strncmp(e->key, prefix, plen) != 0)
            break;
        funcd_store_kv kv = {e->key, e->value, e->len, e->revision, e->create_revision};
        if (cb(&kv, payload))
            break;
    }
    funcd_watch_list_leave(&m->watches);
    unlock(m);
    return 0;
}

/* Replays the retained events after `after` to a watch not yet linked
 * (watchers.c links it, under the same lock). */
static int replay_locked(void *store, funcd_store_watch *w, uint64_t after, uint64_t *revision)
{
    memory_store *m = store;
    *revision = m->revision;
    if (after < m->compacted)
        return funcd_error_set(FUNCD_EGONE,
                               "store: cannot watch prefix \"%s\" from revision %" PRIu64
                               ": history up to revision %" PRIu64
                               " was compacted; list the prefix again and watch from the "
                               "list's revision",
                               w->prefix, after, m->compacted);
    if (!m->ring_len)
        return 0;
    uint64_t first = ring_at(m, 0)->revision; /* the ring holds consecutive revisions */
    size_t start = after >= first ? (size_t)(after - first + 1) : 0;
    funcd_watch_list_enter(&m->watches);
    for (size_t i = start; i < m->ring_len; i++) {
        funcd_store_event ev = event_of(ring_at(m, i));
        funcd_watch_deliver(w, &ev);
    }
    funcd_watch_list_leave(&m->watches);
    return 0;
}

static int mem_watch(funcd_store *s, const char *prefix, uint64_t after, funcd_store_watch_cb cb,
                     void *payload, funcd_store_watch **out)
{
    memory_store *m = ms(s);
    return funcd_store_watch_open(&m->lock, &m->watches, m, replay_locked, prefix, after, cb,
                                  payload, out);
}

static void mem_unwatch(funcd_store *s, funcd_store_watch *w)
{
    memory_store *m = ms(s);
    funcd_store_watch_close(&m->lock, &m->watches, w);
}

static uint64_t mem_revision(funcd_store *s)
{
    memory_store *m = ms(s);
    lock(m);
    uint64_t rev = m->revision;
    unlock(m);
    return rev;
}

static void mem_free(funcd_store *s)
{
    memory_store *m = ms(s);
    if (!m)
        return;
    for (size_t i = 0; i < m->n_entries; i++) {
        free(m->entries[i]->key);
        free(m->entries[i]->value);
        free(m->entries[i]);
    }
    free(m->entries);
    for (size_t i = 0; i < m->ring_len; i++) {
        free(ring_at(m, i)->key);
        free(ring_at(m, i)->value);
    }
    free(m->ring);
    funcd_watch_list_clear(&m->watches); /* watches must be ended: be forgiving */
    pthread_mutex_destroy(&m->lock);
    free(m);
}

FUNCD_EXTERN int funcd_store_memory_new(funcd_store **out, size_t history)
{
    if (!out)
        return funcd_error_set(FUNCD_EINVAL, "store: funcd_store_memory_new needs an out pointer");
    *out = NULL;
    memory_store *m = calloc(1, sizeof(*m));
    if (!m)
        return funcd_error_set(FUNCD_ENOMEM, "store: out of memory creating the memory store");
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    int err = pthread_mutex_init(&m->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    if (err) {
        free(m);
        return funcd_error_set(FUNCD_EIO, "store: cannot create the memory store's mutex");
    }
    m->base.version = FUNCD_STORE_VERSION;
    m->base.name = "memory";
    m->base.get = mem_get;
    m->base.put = mem_put;
    m->base.del = mem_del;
    m->base.list = mem_list;
    m->base.watch = mem_watch;
    m->base.unwatch = mem_unwatch;
    m->base.revision = mem_revision;
    m->base.free = mem_free;
    m->history = history ? history : DEFAULT_HISTORY;
    *out = &m->base;
    return 0;
}
