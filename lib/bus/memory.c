/*
 * The in-process bus. Publish picks its targets under the bus lock (every
 * matching plain subscription, one member per matching queue group, round
 * robin) and delivers after dropping it, on the publisher's thread.
 *
 * Each subscription is a small serial mailbox: the first publisher to find it
 * idle runs its callback directly; a publisher that finds it busy (another
 * thread, or the callback itself publishing to its own subject) queues a copy
 * that the running thread delivers before it lets go. So one callback never
 * runs concurrently with itself, a callback may publish anywhere without
 * recursion or lock-order deadlocks, and no lock is held while user code runs.
 * unsubscribe waits on the mailbox's condition variable until a callback
 * running on another thread returns; a reference count keeps the mailbox alive
 * for publishers that picked it just before it was removed.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "bus/subject.h"
#include "funcd/sys/bus.h"
#include "funcd/sys/error.h"

typedef struct queued_msg {
    struct queued_msg *next;
    char *subject;
    size_t len;
    unsigned char data[];
} queued_msg;

typedef struct queue_group queue_group;

struct funcd_bus_sub {
    struct funcd_bus_sub *prev, *next; /* the bus's plain list (plain subs only) */
    char *subject;
    queue_group *group; /* NULL for fan-out */
    funcd_bus_msg_cb cb;
    void *payload;
    atomic_int refs; /* one for the bus's lists, one per publisher holding it */

    pthread_mutex_t mu; /* guards the fields below */
    pthread_cond_t idle;
    int ended;
    int running;
    pthread_t runner;
    queued_msg *head, *tail;
};

struct queue_group {
    queue_group *next;
    char *subject;
    char *name;
    funcd_bus_sub **members;
    size_t n, cap;
    size_t turn; /* round robin */
};

typedef struct memory_bus {
    funcd_bus base;
    pthread_mutex_t lock; /* guards the lists and groups, never held during a callback */
    funcd_bus_sub *plain;
    queue_group *groups;
} memory_bus;

static memory_bus *mbus(funcd_bus *b)
{
    return (memory_bus *)b;
}

static void drop_queue(funcd_bus_sub *sub)
{
    while (sub->head) {
        queued_msg *m = sub->head;
        sub->head = m->next;
        free(m->subject);
        free(m);
    }
    sub->tail = NULL;
}

static void sub_free(funcd_bus_sub *sub)
{
    drop_queue(sub);
    pthread_cond_destroy(&sub->idle);
    pthread_mutex_destroy(&sub->mu);
    free(sub->subject);
    free(sub);
}

static void sub_unref(funcd_bus_sub *sub)
{
    if (atomic_fetch_sub(&sub->refs, 1) == 1)
        sub_free(sub);
}

static int enqueue(funcd_bus_sub *sub, const char *subject, const void *data, size_t len)
{
    queued_msg *m = malloc(sizeof(*m) + len);
    if (!m || !(m->subject = strdup(subject))) {
        free(m);
        return funcd_error_set(FUNCD_ENOMEM, "bus: out of memory queueing a message on \"%s\"",
                               subject);
    }
    m->next = NULL;
    m->len = len;
    if (len)
        memcpy(m->data, data, len);
    if (sub->tail)
        sub->tail->next = m;
    else
        sub->head = m;
    sub->tail = m;
    return 0;
}

/* Runs the callback, or queues the message for whoever is running it. */
static int deliver(funcd_bus_sub *sub, const char *subject, const void *data, size_t len)
{
    pthread_mutex_lock(&sub->mu);
    if (sub->ended || sub->running) {
        int rc = sub->ended ? 0 : enqueue(sub, subject, data, len);
        pthread_mutex_unlock(&sub->mu);
        return rc;
    }
    sub->running = 1;
    sub->runner = pthread_self();
    pthread_mutex_unlock(&sub->mu);

    sub->cb(subject, data, len, sub->payload);

    pthread_mutex_lock(&sub->mu);
    while (!sub->ended && sub->head) {
        queued_msg *m = sub->head;
        sub->head = m->next;
        if (!sub->head)
            sub->tail = NULL;
        pthread_mutex_unlock(&sub->mu);
        sub->cb(m->subject, m->data, m->len, sub->payload);
        free(m->subject);
        free(m);
        pthread_mutex_lock(&sub->mu);
    }
    sub->running = 0;
    drop_queue(sub); /* ended: nothing more may be delivered */
    pthread_cond_broadcast(&sub->idle);
    pthread_mutex_unlock(&sub->mu);
    return 0;
}

/* Targets of one publish, each holding a reference. */
typedef struct targets {
    funcd_bus_sub *inline_subs[16];
    funcd_bus_sub **subs;
    size_t n, cap;
} targets;

static int targets_add(targets *t, funcd_bus_sub *sub)
{
    if (t->n == t->cap) {
        size_t cap = t->cap * 2;
        funcd_bus_sub **p = malloc(cap * sizeof(*p));
        if (!p)
            return FUNCD_ENOMEM;
        memcpy(p, t->subs, t->n * sizeof(*p));
        if (t->subs != t->inline_subs)
            free(t->subs);
        t->subs = p;
        t->cap = cap;
    }
    atomic_fetch_add(&sub->refs, 1);
    t->subs[t->n++] = sub;
    return 0;
}

static int collect(memory_bus *m, const char *subject, targets *t)
{
    int rc = 0;
    pthread_mutex_lock(&m->lock);
    for (funcd_bus_sub *s = m->plain; s && rc == 0; s = s->next)
        if (funcd_bus_subject_matches(s->subject, subject))
            rc = targets_add(t, s);
    for (queue_group *g = m->groups; g && rc == 0; g = g->next)
        if (g->n && funcd_bus_subject_matches(g->subject, subject))
            rc = targets_add(t, g->members[g->turn++ % g->n]);
    pthread_mutex_unlock(&m->lock);
    return rc;
}

static int mem_publish(funcd_bus *b, const char *subject, const void *data, size_t len)
{
    int rc = funcd_bus_check_subject(subject, 0, "publish to");
    if (rc < 0)
        return rc;
    if (!data && len)
        return funcd_error_set(FUNCD_EINVAL, "bus: publish to \"%s\" has no data but %zu bytes",
                               subject, len);
    targets t = {.subs = NULL, .n = 0, .cap = 16};
    t.subs = t.inline_subs;
    if (collect(mbus(b), subject, &t) < 0)
        rc = funcd_error_set(FUNCD_ENOMEM, "bus: out of memory publishing to \"%s\"", subject);
    for (size_t i = 0; i < t.n; i++) {
        if (rc == 0)
            rc = deliver(t.subs[i], subject, data, len);
        sub_unref(t.subs[i]);
    }
    if (t.subs != t.inline_subs)
        free(t.subs);
    return rc;
}

static queue_group *find_group(memory_bus *m, const char *subject, const char *name)
{
    for (queue_group *g = m->groups; g; g = g->next)
        if (strcmp(g->subject, subject) == 0 && strcmp(g->name, name) == 0)
            return g;
    return NULL;
}

static void group_free(queue_group *g)
{
    free(g->subject);
    free(g->name);
    free(g->members);
    free(g);
}

/* Adds sub to its group, creating the group; called with the bus lock. */
static int group_join(memory_bus *m, funcd_bus_sub *sub, const char *name)
{
    queue_group *g = find_group(m, sub->subject, name);
    if (!g) {
        g = calloc(1, sizeof(*g));
        if (!g || !(g->subject = strdup(sub->subject)) || !(g->name = strdup(name))) {
            if (g)
                group_free(g);
            return FUNCD_ENOMEM;
        }
        g->next = m->groups;
        m->groups = g;
    }
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 4;
        funcd_bus_sub **p = realloc(g->members, cap * sizeof(*p));
        if (!p)
            return FUNCD_ENOMEM; /* an empty new group is harmless and reused */
        g->members = p;
        g->cap = cap;
    }
    g->members[g->n++] = sub;
    sub->group = g;
    return 0;
}

static void group_leave(memory_bus *m, funcd_bus_sub *sub)
{
    queue_group *g = sub->group;
    for (size_t i = 0; i < g->n; i++) {
        if (g->members[i] == sub) {
            memmove(&g->members[i], &g->members[i + 1], (g->n - i - 1) * sizeof(*g->members));
            g->n--;
            break;
        }
    }
    if (g->n)
        return;
    for (queue_group **pp = &m->groups; *pp; pp = &(*pp)->next) {
        if (*pp == g) {
            *pp = g->next;
            break;
        }
    }
    group_free(g);
}

static funcd_bus_sub *sub_new(const char *subject, funcd_bus_msg_cb cb, void *payload)
{
    funcd_bus_sub *sub = calloc(1, sizeof(*sub));
    if (!sub)
        return NULL;
    if (!(sub->subject = strdup(subject))) {
        free(sub);
        return NULL;
    }
    pthread_mutex_init(&sub->mu, NULL);
    pthread_cond_init(&sub->idle, NULL);
    atomic_init(&sub->refs, 1);
    sub->cb = cb;
    sub->payload = payload;
    return sub;
}

static int mem_subscribe(funcd_bus *b, const char *subject, const char *queue_group,
                         funcd_bus_msg_cb cb, void *payload, funcd_bus_sub **out)
{
    memory_bus *m = mbus(b);
    int rc = funcd_bus_check_subject(subject, 1, "subscribe to");
    if (rc < 0)
        return rc;
    if (!cb || !out)
        return funcd_error_set(FUNCD_EINVAL,
                               "bus: subscribe to \"%s\" needs a callback and an out "
                               "handle",
                               subject);
    if ((rc = funcd_bus_check_queue_group(queue_group, subject)) < 0)
        return rc;
    funcd_bus_sub *sub = sub_new(subject, cb, payload);
    if (!sub)
        return funcd_error_set(FUNCD_ENOMEM, "bus: out of memory subscribing to \"%s\"", subject);
    pthread_mutex_lock(&m->lock);
    if (queue_group) {
        rc = group_join(m, sub, queue_group);
    } else {
        sub->next = m->plain;
        if (m->plain)
            m->plain->prev = sub;
        m->plain = sub;
    }
    pthread_mutex_unlock(&m->lock);
    if (rc < 0) {
        sub_free(sub);
        return funcd_error_set(FUNCD_ENOMEM, "bus: out of memory joining queue group \"%s\"",
                               queue_group);
    }
    *out = sub;
    return 0;
}

static void unlink_sub(memory_bus *m, funcd_bus_sub *sub)
{
    pthread_mutex_lock(&m->lock);
    if (sub->group) {
        group_leave(m, sub);
        sub->group = NULL;
    } else {
        if (sub->prev)
            sub->prev->next = sub->next;
        else
            m->plain = sub->next;
        if (sub->next)
            sub->next->prev = sub->prev;
    }
    pthread_mutex_unlock(&m->lock);
}

static void mem_unsubscribe(funcd_bus *b, funcd_bus_sub *sub)
{
    if (!sub)
        return;
    unlink_sub(mbus(b), sub);
    pthread_mutex_lock(&sub->mu);
    sub->ended = 1;
    drop_queue(sub);
    /* A callback running on this thread is our caller (possibly further up
     * the stack): waiting for it would never end. */
    while (sub->running && !pthread_equal(sub->runner, pthread_self()))
        pthread_cond_wait(&sub->idle, &sub->mu);
    pthread_mutex_unlock(&sub->mu);
    sub_unref(sub);
}

static void mem_free(funcd_bus *b)
{
    memory_bus *m = mbus(b);
    if (!m)
        return;
    /* The contract says subscriptions must be ended; be forgiving. */
    while (m->plain) {
        funcd_bus_sub *sub = m->plain;
        m->plain = sub->next;
        sub_unref(sub);
    }
    while (m->groups) {
        queue_group *g = m->groups;
        m->groups = g->next;
        for (size_t i = 0; i < g->n; i++)
            sub_unref(g->members[i]);
        group_free(g);
    }
    pthread_mutex_destroy(&m->lock);
    free(m);
}

FUNCD_EXTERN int funcd_bus_memory_new(funcd_bus **out)
{
    if (!out)
        return funcd_error_set(FUNCD_EINVAL, "bus: funcd_bus_memory_new needs an out pointer");
    *out = NULL;
    memory_bus *m = calloc(1, sizeof(*m));
    if (!m)
        return funcd_error_set(FUNCD_ENOMEM, "bus: out of memory creating the memory bus");
    if (pthread_mutex_init(&m->lock, NULL)) {
        free(m);
        return funcd_error_set(FUNCD_EIO, "bus: cannot create the memory bus's mutex");
    }
    m->base.version = FUNCD_BUS_VERSION;
    m->base.name = "memory";
    m->base.publish = mem_publish;
    m->base.subscribe = mem_subscribe;
    m->base.unsubscribe = mem_unsubscribe;
    m->base.free = mem_free;
    *out = &m->base;
    return 0;
}
