/*
 * Objects per namespace for the namespace object quota (quota.h).
 *
 * A namespace's entry: the objects the watch has seen (a PUT whose key was
 * created at that revision is one more, a DELETE one less; status writes
 * and replaces change nothing), the places creates under way have taken,
 * and the revisions of objects made here that the watch has not delivered
 * yet. An entry that holds nothing is freed, so the table is as large as
 * the namespaces that have objects.
 */
#include "controlplane/quota.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "funcd/sys/error.h"
#include "objects/objects.h"
#include "port/store.h"

#define BUCKETS 1024

typedef struct ns_entry {
    struct ns_entry *next;
    int64_t objects;    /* seen by the watch (or the first listing) */
    int64_t taken;      /* places of creates under way */
    uint64_t *awaited;  /* revisions made here, not yet delivered */
    size_t n_awaited, cap;
    char name[];
} ns_entry;

struct funcd_cp_counts {
    funcd_store *store;
    pthread_mutex_t start_lock; /* guards started and watch */
    int started;                /* listed and watching */
    funcd_store_watch *watch;
    pthread_mutex_t lock; /* guards everything below */
    uint64_t seen;        /* the last revision delivered (or listed) */
    ns_entry *buckets[BUCKETS];
};

static size_t bucket_of(const char *ns)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)ns; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h % BUCKETS;
}

/* The link that points at `ns`'s entry (or at NULL, where it would go). */
static ns_entry **link_of(funcd_cp_counts *c, const char *ns)
{
    ns_entry **l = &c->buckets[bucket_of(ns)];
    while (*l && strcmp((*l)->name, ns) != 0)
        l = &(*l)->next;
    return l;
}

/* `ns`'s entry, made when absent; NULL without memory. Under the lock. */
static ns_entry *entry_of(funcd_cp_counts *c, const char *ns)
{
    ns_entry **l = link_of(c, ns);
    if (*l)
        return *l;
    size_t len = strlen(ns);
    ns_entry *n = calloc(1, sizeof(*n) + len + 1);
    if (!n)
        return NULL;
    memcpy(n->name, ns, len + 1);
    *l = n;
    return n;
}

/* Frees `ns`'s entry if it holds nothing. Under the lock. */
static void forget_if_empty(funcd_cp_counts *c, const char *ns)
{
    ns_entry **l = link_of(c, ns), *n = *l;
    if (!n || n->objects > 0 || n->taken > 0 || n->n_awaited > 0)
        return;
    *l = n->next;
    free(n->awaited);
    free(n);
}

/* The namespace of an object's key into `ns`; 0, or -1 for another key. */
static int namespace_of(const char *key, char *ns, size_t len)
{
    const funcd_kind *kind;
    char name[128];
    return funcd_objects_parse_key(key, &kind, ns, len, name, sizeof(name)) == 0 ? 0 : -1;
}

static int count_listed(const funcd_store_kv *kv, void *payload)
{
    funcd_cp_counts *c = payload;
    char ns[128];
    if (namespace_of(kv->key, ns, sizeof(ns)) < 0)
        return 0;
    pthread_mutex_lock(&c->lock);
    ns_entry *n = entry_of(c, ns);
    if (n)
        n->objects++;
    pthread_mutex_unlock(&c->lock);
    return 0;
}

/* On a writer's thread (or the store's), in revision order. */
static void on_event(const funcd_store_event *ev, void *payload)
{
    funcd_cp_counts *c = payload;
    char ns[128];
    if (namespace_of(ev->key, ns, sizeof(ns)) < 0)
        return;
    pthread_mutex_lock(&c->lock);
    if (ev->revision > c->seen)
        c->seen = ev->revision;
    ns_entry *n = entry_of(c, ns);
    if (n) {
        if (ev->type == FUNCD_STORE_EVENT_PUT && ev->create_revision == ev->revision)
            n->objects++;
        else if (ev->type == FUNCD_STORE_EVENT_DELETE && n->objects > 0)
            n->objects--;
        size_t kept = 0; /* what this node made up to here is now among the objects */
        for (size_t i = 0; i < n->n_awaited; i++)
            if (n->awaited[i] > ev->revision)
                n->awaited[kept++] = n->awaited[i];
        n->n_awaited = kept;
        forget_if_empty(c, ns);
    }
    pthread_mutex_unlock(&c->lock);
}

int funcd_cp_counts_new(funcd_cp_counts **out, funcd_store *store)
{
    *out = NULL;
    funcd_cp_counts *c = calloc(1, sizeof(*c));
    if (!c)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory counting objects per namespace");
    c->store = store;
    pthread_mutex_init(&c->start_lock, NULL);
    pthread_mutex_init(&c->lock, NULL);
    *out = c;
    return 0;
}

static void clear(funcd_cp_counts *c)
{
    for (size_t b = 0; b < BUCKETS; b++)
        while (c->buckets[b]) {
            ns_entry *n = c->buckets[b];
            c->buckets[b] = n->next;
            free(n->awaited);
            free(n);
        }
}

/* Lists and watches at the first create, not at start: a node that is
 * never written to never reads every object for it, and a restart answers
 * before the listing. A failure is tried again at the next create. */
static int start(funcd_cp_counts *c)
{
    pthread_mutex_lock(&c->start_lock);
    int rc = 0;
    if (!c->started) {
        uint64_t rev = 0;
        rc = funcd_port_store_list(c->store, FUNCD_OBJECTS_KEY_ROOT, count_listed, c, &rev);
        pthread_mutex_lock(&c->lock);
        c->seen = rev;
        pthread_mutex_unlock(&c->lock);
        if (rc == 0)
            rc = funcd_port_store_watch(c->store, FUNCD_OBJECTS_KEY_ROOT, rev, on_event, c,
                                        &c->watch);
        if (rc < 0) {
            pthread_mutex_lock(&c->lock);
            clear(c);
            pthread_mutex_unlock(&c->lock);
        }
        c->started = rc == 0;
    }
    pthread_mutex_unlock(&c->start_lock);
    return rc;
}

void funcd_cp_counts_free(funcd_cp_counts *c)
{
    if (!c)
        return;
    if (c->watch)
        funcd_port_store_unwatch(c->store, c->watch);
    clear(c);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->start_lock);
    free(c);
}

int funcd_cp_counts_take(funcd_cp_counts *c, const char *ns, int64_t quota, int64_t *count)
{
    *count = 0;
    int rc = start(c);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&c->lock);
    ns_entry *n = entry_of(c, ns);
    int64_t held = n ? n->objects + n->taken + (int64_t)n->n_awaited : 0;
    int ok = held < quota;
    if (ok && n)
        n->taken++;
    else if (n)
        forget_if_empty(c, ns);
    pthread_mutex_unlock(&c->lock);
    *count = held;
    return ok; /* without memory for an entry, the store's own writes fail next */
}

void funcd_cp_counts_give(funcd_cp_counts *c, const char *ns, uint64_t revision)
{
    pthread_mutex_lock(&c->lock);
    ns_entry *n = *link_of(c, ns);
    if (n) {
        if (n->taken > 0)
            n->taken--;
        if (revision > c->seen) { /* made, and the watch has not said so yet */
            if (n->n_awaited == n->cap) {
                size_t cap = n->cap ? n->cap * 2 : 8;
                uint64_t *a = realloc(n->awaited, cap * sizeof(*a));
                if (a) {
                    n->awaited = a;
                    n->cap = cap;
                }
            }
            if (n->n_awaited < n->cap) /* else it counts once delivered */
                n->awaited[n->n_awaited++] = revision;
        }
        forget_if_empty(c, ns);
    }
    pthread_mutex_unlock(&c->lock);
}
