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
 *
 * Durable streams (version 2) keep, per durable consumer, a queue of the
 * messages it has not acknowledged yet (a copy each: streams are small and
 * consumers few). One thread at a time pumps a consumer's queue, head first,
 * into its attached subscriptions in turn; another thread that finds it
 * pumping only flags `again`. A refused message stays at the head and the pump
 * stops: the next publish to the stream or the next attach retries it (there
 * is no timer thread in this bus).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
typedef struct consumer consumer;
typedef struct stream stream;

struct funcd_bus_sub {
    struct funcd_bus_sub *prev, *next; /* the bus's plain list (plain subs only) */
    char *subject;
    queue_group *group; /* NULL for fan-out */
    consumer *consumer; /* a durable consumer's subscription (then `dcb`, not `cb`) */
    funcd_bus_durable_cb dcb;
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
    stream *streams;
} memory_bus;

/* A message a durable consumer has not acknowledged yet. */
typedef struct dmsg {
    struct dmsg *next;
    int64_t at_ms; /* when it was stored (CLOCK_MONOTONIC), for max_age */
    char *subject;
    size_t len;
    unsigned char data[];
} dmsg;

struct consumer {
    consumer *next;
    stream *stream;
    char *name;
    dmsg *head, *tail;
    funcd_bus_sub **members; /* attached subscriptions, served in turn */
    size_t n, cap, turn;
    int pumping, again, deleted;
};

struct stream {
    stream *next;
    char *name, *subjects;
    int64_t max_age_ms;
    consumer *consumers;
};

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

static int store_and_pump(memory_bus *m, const char *subject, const void *data, size_t len);

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
    if (rc == 0) {
        rc = store_and_pump(mbus(b), subject, data, len);
        rc = rc == FUNCD_ENOTFOUND ? 0 : rc; /* no stream takes it: a plain publish */
    }
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
    int rc = funcd_bus_check_subscribe(subject, queue_group, cb && out);
    if (rc < 0)
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

static void consumer_detach(consumer *c, funcd_bus_sub *sub);

static void unlink_sub(memory_bus *m, funcd_bus_sub *sub)
{
    pthread_mutex_lock(&m->lock);
    if (sub->consumer) {
        consumer_detach(sub->consumer, sub);
        sub->consumer = NULL;
    } else if (sub->group) {
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

static void stream_free(stream *st);

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
    while (m->streams) {
        stream *st = m->streams;
        m->streams = st->next;
        stream_free(st);
    }
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* ---- durable streams (version 2) ------------------------------------------------------ */

#define DEFAULT_MAX_AGE_MS (24 * 3600 * 1000LL)

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void dmsg_free(dmsg *d)
{
    free(d->subject);
    free(d);
}

static void consumer_free(consumer *c)
{
    while (c->head) {
        dmsg *d = c->head;
        c->head = d->next;
        dmsg_free(d);
    }
    free(c->members);
    free(c->name);
    free(c);
}

static void stream_free(stream *st)
{
    while (st->consumers) {
        consumer *c = st->consumers;
        st->consumers = c->next;
        for (size_t i = 0; i < c->n; i++)
            c->members[i]->consumer = NULL; /* subscriptions outliving the bus: forgiven */
        consumer_free(c);
    }
    free(st->name);
    free(st->subjects);
    free(st);
}

static stream *find_stream(memory_bus *m, const char *name)
{
    for (stream *st = m->streams; st; st = st->next)
        if (strcmp(st->name, name) == 0)
            return st;
    return NULL;
}

static consumer *find_consumer(stream *st, const char *name)
{
    for (consumer *c = st->consumers; c; c = c->next)
        if (strcmp(c->name, name) == 0)
            return c;
    return NULL;
}

/* Called with the bus lock. */
static void consumer_detach(consumer *c, funcd_bus_sub *sub)
{
    for (size_t i = 0; i < c->n; i++) {
        if (c->members[i] == sub) {
            memmove(&c->members[i], &c->members[i + 1], (c->n - i - 1) * sizeof(*c->members));
            c->n--;
            return;
        }
    }
}

/* Runs a durable callback through the subscription's gate: 1 acknowledged,
 * 0 refused, -1 not delivered (the subscription was ended). */
static int run_durable(funcd_bus_sub *sub, dmsg *d)
{
    pthread_mutex_lock(&sub->mu);
    if (sub->ended) {
        pthread_mutex_unlock(&sub->mu);
        return -1;
    }
    sub->running = 1;
    sub->runner = pthread_self();
    pthread_mutex_unlock(&sub->mu);
    int rc = sub->dcb(d->subject, d->data, d->len, sub->payload);
    pthread_mutex_lock(&sub->mu);
    sub->running = 0;
    pthread_cond_broadcast(&sub->idle);
    pthread_mutex_unlock(&sub->mu);
    return rc == 0 ? 1 : 0;
}

/* Delivers c's queue to its members, head first, until it is empty, nobody
 * is attached or a message is refused; called with the bus lock, which is
 * dropped around each callback. */
static void pump_locked(memory_bus *m, consumer *c)
{
    if (c->pumping) {
        c->again = 1;
        return;
    }
    c->pumping = 1;
    for (;;) {
        c->again = 0;
        int64_t cutoff = now_ms() - c->stream->max_age_ms;
        while (c->head && c->head->at_ms < cutoff) {
            dmsg *d = c->head;
            if (!(c->head = d->next))
                c->tail = NULL;
            dmsg_free(d);
        }
        if (c->deleted || !c->head || !c->n)
            break;
        funcd_bus_sub *sub = c->members[c->turn++ % c->n];
        dmsg *d = c->head; /* only the pump removes the head */
        atomic_fetch_add(&sub->refs, 1);
        pthread_mutex_unlock(&m->lock);
        int delivered = run_durable(sub, d);
        pthread_mutex_lock(&m->lock);
        sub_unref(sub);
        if (delivered == 1) {
            if (!(c->head = d->next))
                c->tail = NULL;
            dmsg_free(d);
        } else if (delivered == 0 && !c->again) {
            break; /* refused: retried at the next publish or attach */
        }
    }
    c->pumping = 0;
    if (c->deleted)
        consumer_free(c); /* consumer_delete left it to us */
}

/* Stores a message for every consumer of the stream taking `subject`, then
 * pumps them; FUNCD_ENOTFOUND when no stream takes it. */
static int store_and_pump(memory_bus *m, const char *subject, const void *data, size_t len)
{
    pthread_mutex_lock(&m->lock);
    stream *st = m->streams;
    while (st && !funcd_bus_subject_matches(st->subjects, subject))
        st = st->next;
    if (!st) {
        pthread_mutex_unlock(&m->lock);
        return FUNCD_ENOTFOUND;
    }
    int64_t at = now_ms();
    for (consumer *c = st->consumers; c; c = c->next) {
        dmsg *d = malloc(sizeof(*d) + len);
        if (!d || !(d->subject = strdup(subject))) {
            free(d);
            pthread_mutex_unlock(&m->lock);
            return funcd_error_set(FUNCD_ENOMEM, "bus: out of memory storing a message on "
                                   "\"%s\" in stream %s", subject, st->name);
        }
        d->next = NULL;
        d->at_ms = at;
        d->len = len;
        if (len)
            memcpy(d->data, data, len);
        if (c->tail)
            c->tail->next = d;
        else
            c->head = d;
        c->tail = d;
    }
    /* The lock is dropped inside each pump, and a consumer deleted meanwhile
     * is unlinked: find the next one by name, or start over (pumping one
     * twice only finds its queue empty). */
    consumer *c = st->consumers;
    while (c) {
        char *name = strdup(c->name);
        if (!name)
            break; /* the messages are stored; the next publish or attach pumps them */
        pump_locked(m, c);
        consumer *still = find_consumer(st, name);
        free(name);
        c = still ? still->next : st->consumers;
    }
    pthread_mutex_unlock(&m->lock);
    return 0;
}

static int mem_stream_ensure(funcd_bus *b, const char *name, const char *subjects,
                             int64_t max_age_ms)
{
    memory_bus *m = mbus(b);
    int rc = funcd_bus_check_name("stream", name);
    if (rc < 0 || (rc = funcd_bus_check_subject(subjects, 1, "keep a stream of")) < 0)
        return rc;
    if (max_age_ms < 0)
        return funcd_error_set(FUNCD_EINVAL, "bus: stream %s: max age %lld ms is negative", name,
                               (long long)max_age_ms);
    pthread_mutex_lock(&m->lock);
    stream *st = find_stream(m, name);
    if (st) {
        if (strcmp(st->subjects, subjects) == 0)
            st->max_age_ms = max_age_ms ? max_age_ms : DEFAULT_MAX_AGE_MS;
        rc = strcmp(st->subjects, subjects) == 0
                 ? 0
                 : funcd_error_set(FUNCD_EEXISTS, "bus: stream %s exists with subjects \"%s\", "
                                   "not \"%s\"", name, st->subjects, subjects);
        pthread_mutex_unlock(&m->lock);
        return rc;
    }
    for (stream *o = m->streams; o; o = o->next) {
        if (funcd_bus_patterns_overlap(o->subjects, subjects)) {
            pthread_mutex_unlock(&m->lock);
            return funcd_error_set(FUNCD_EEXISTS, "bus: stream %s's subjects \"%s\" overlap "
                                   "stream %s's \"%s\"", name, subjects, o->name, o->subjects);
        }
    }
    st = calloc(1, sizeof(*st));
    if (!st || !(st->name = strdup(name)) || !(st->subjects = strdup(subjects))) {
        if (st)
            stream_free(st);
        pthread_mutex_unlock(&m->lock);
        return funcd_error_set(FUNCD_ENOMEM, "bus: out of memory creating stream %s", name);
    }
    st->max_age_ms = max_age_ms ? max_age_ms : DEFAULT_MAX_AGE_MS;
    st->next = m->streams;
    m->streams = st;
    pthread_mutex_unlock(&m->lock);
    return 0;
}

static int mem_publish_durable(funcd_bus *b, const char *subject, const void *data, size_t len)
{
    int rc = funcd_bus_check_subject(subject, 0, "publish to");
    if (rc < 0)
        return rc;
    if (!data && len)
        return funcd_error_set(FUNCD_EINVAL, "bus: publish to \"%s\" has no data but %zu bytes",
                               subject, len);
    /* Plain subscribers see it as well, as on NATS. */
    if ((rc = mem_publish(b, subject, data, len)) < 0)
        return rc;
    pthread_mutex_lock(&mbus(b)->lock);
    stream *st = mbus(b)->streams;
    while (st && !funcd_bus_subject_matches(st->subjects, subject))
        st = st->next;
    pthread_mutex_unlock(&mbus(b)->lock);
    if (!st)
        return funcd_error_set(FUNCD_ENOTFOUND, "bus: no stream keeps subject \"%s\"; create "
                               "one whose subjects match it first", subject);
    return 0;
}

static int mem_consume(funcd_bus *b, const char *stream_name, const char *durable,
                       funcd_bus_durable_cb cb, void *payload, funcd_bus_sub **out)
{
    memory_bus *m = mbus(b);
    int rc = funcd_bus_check_name("stream", stream_name);
    if (rc < 0 || (rc = funcd_bus_check_name("consumer", durable)) < 0)
        return rc;
    if (!cb || !out)
        return funcd_error_set(FUNCD_EINVAL, "bus: consume of %s needs a callback and an out "
                               "handle", durable);
    funcd_bus_sub *sub = sub_new(durable, NULL, payload);
    if (!sub)
        return funcd_error_set(FUNCD_ENOMEM, "bus: out of memory attaching to %s", durable);
    sub->dcb = cb;
    pthread_mutex_lock(&m->lock);
    stream *st = find_stream(m, stream_name);
    consumer *c = st ? find_consumer(st, durable) : NULL;
    if (st && !c && (c = calloc(1, sizeof(*c)))) {
        if (!(c->name = strdup(durable))) {
            free(c);
            c = NULL;
        } else {
            c->stream = st;
            c->next = st->consumers;
            st->consumers = c;
        }
    }
    if (c && c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 4;
        funcd_bus_sub **p = realloc(c->members, cap * sizeof(*p));
        if (p) {
            c->members = p;
            c->cap = cap;
        }
    }
    if (!st || !c || c->n == c->cap) {
        pthread_mutex_unlock(&m->lock);
        sub_free(sub);
        return st ? funcd_error_set(FUNCD_ENOMEM, "bus: out of memory attaching to %s", durable)
                  : funcd_error_set(FUNCD_ENOTFOUND, "bus: no stream %s to consume from",
                                    stream_name);
    }
    c->members[c->n++] = sub;
    sub->consumer = c;
    *out = sub;
    pump_locked(m, c); /* what was stored while nobody was attached */
    pthread_mutex_unlock(&m->lock);
    return 0;
}

static int mem_consumer_delete(funcd_bus *b, const char *stream_name, const char *durable)
{
    memory_bus *m = mbus(b);
    int rc = funcd_bus_check_name("stream", stream_name);
    if (rc < 0 || (rc = funcd_bus_check_name("consumer", durable)) < 0)
        return rc;
    pthread_mutex_lock(&m->lock);
    stream *st = find_stream(m, stream_name);
    consumer *c = st ? find_consumer(st, durable) : NULL;
    if (!c)
        rc = funcd_error_set(FUNCD_ENOTFOUND, "bus: no consumer %s on stream %s", durable,
                             stream_name);
    else if (c->n)
        rc = funcd_error_set(FUNCD_ESTATE, "bus: consumer %s on stream %s has %zu subscriptions "
                             "attached; unsubscribe them first", durable, stream_name, c->n);
    if (rc == 0) {
        for (consumer **pp = &st->consumers; *pp; pp = &(*pp)->next) {
            if (*pp == c) {
                *pp = c->next;
                break;
            }
        }
        if (c->pumping)
            c->deleted = 1; /* its pump frees it */
        else
            consumer_free(c);
    }
    pthread_mutex_unlock(&m->lock);
    return rc;
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
    m->base.stream_ensure = mem_stream_ensure;
    m->base.publish_durable = mem_publish_durable;
    m->base.consume = mem_consume;
    m->base.consumer_delete = mem_consumer_delete;
    *out = &m->base;
    return 0;
}
