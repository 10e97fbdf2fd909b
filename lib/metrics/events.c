/*
 * Eventing's series (metrics.h, docs/eventing.md): delivery outcomes of
 * EventSource events counted per source, and the delivery queue's gauges
 * read from its source at collection time.
 *
 * Two locks: `lock` guards the counters (taken by the platform loop for an
 * increment, by a collection for a copy), `src_lock` the source (held by a
 * collection while it reads the queue and the store, and by whoever clears
 * it, so that the queue is not freed under a collection). A collection
 * never holds both.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/internal.h"

typedef struct ev_counter {
    struct ev_counter *next;
    char *ns, *source;
    uint64_t n[FUNCD_METRICS_EVENT_OUTCOMES];
    uint64_t dropped[FUNCD_METRICS_DROP_REASONS];
} ev_counter;

struct funcd_metrics_events {
    pthread_mutex_t lock;
    ev_counter *counters; /* newest first */
    pthread_mutex_t src_lock;
    funcd_metrics_delivery_source src;
    int has_src;
};

enum { F_EVENTS, F_DROPPED, F_DLQ, F_DEPTH, F_COUNT };

static const funcd_metric_family families[F_COUNT] = {
    [F_EVENTS] = {"funcd_events_total",
                  "Delivery attempts of EventSource events by outcome (delivered; retried: it "
                  "failed and will be tried again; deadlettered: its last attempt failed), "
                  "counted on the node that dispatched them.",
                  FUNCD_METRIC_COUNTER, ""},
    [F_DROPPED] = {"funcd_event_source_dropped_total",
                   "EventSource events dropped before they were queued, by reason (backlog_full: "
                   "a bus source held as many messages waiting for room in the delivery queue "
                   "as it may; rejected: the target refuses the event for good; source_removed: "
                   "held by a source deleted or changed), counted on the node that dropped them.",
                   FUNCD_METRIC_COUNTER, ""},
    [F_DLQ] = {"funcd_deadletters", "Dead letters held by a namespace's dead-letter queue.",
               FUNCD_METRIC_GAUGE, ""},
    [F_DEPTH] = {"funcd_async_queue_depth",
                 "Items of the delivery queue (async invocations and events) this node holds: "
                 "waiting for their time, and running.",
                 FUNCD_METRIC_GAUGE, ""},
};

static const char *const outcome_names[FUNCD_METRICS_EVENT_OUTCOMES] = {"delivered", "retried",
                                                                         "deadlettered"};
static const char *const drop_names[FUNCD_METRICS_DROP_REASONS] = {"backlog_full", "rejected",
                                                                   "source_removed"};

funcd_metrics_events *funcd_metrics__events_new(void)
{
    funcd_metrics_events *ev = calloc(1, sizeof(*ev));
    if (!ev)
        return NULL;
    pthread_mutex_init(&ev->lock, NULL);
    pthread_mutex_init(&ev->src_lock, NULL);
    return ev;
}

void funcd_metrics__events_free(funcd_metrics_events *ev)
{
    if (!ev)
        return;
    while (ev->counters) {
        ev_counter *c = ev->counters;
        ev->counters = c->next;
        free(c->ns);
        free(c->source);
        free(c);
    }
    pthread_mutex_destroy(&ev->lock);
    pthread_mutex_destroy(&ev->src_lock);
    free(ev);
}

/* Under ev->lock: the counter of ns/eventsource, made if new; NULL when
 * out of memory (not counted). */
static ev_counter *counter_of(funcd_metrics_events *ev, const char *ns, const char *eventsource)
{
    ev_counter *c = ev->counters;
    while (c && (strcmp(c->ns, ns) != 0 || strcmp(c->source, eventsource) != 0))
        c = c->next;
    if (!c && (c = calloc(1, sizeof(*c)))) {
        c->ns = strdup(ns);
        c->source = strdup(eventsource);
        if (!c->ns || !c->source) { /* out of memory: not counted */
            free(c->ns);
            free(c->source);
            free(c);
            c = NULL;
        } else {
            c->next = ev->counters;
            ev->counters = c;
        }
    }
    return c;
}

void funcd_metrics_event(funcd_metrics *m, const char *ns, const char *eventsource,
                         funcd_metrics_event_outcome outcome)
{
    if (!m || !ns || !eventsource || (unsigned)outcome >= FUNCD_METRICS_EVENT_OUTCOMES)
        return;
    funcd_metrics_events *ev = funcd_metrics__events(m);
    pthread_mutex_lock(&ev->lock);
    ev_counter *c = counter_of(ev, ns, eventsource);
    if (c)
        c->n[outcome]++;
    pthread_mutex_unlock(&ev->lock);
}

void funcd_metrics_event_dropped(funcd_metrics *m, const char *ns, const char *eventsource,
                                 funcd_metrics_drop_reason reason)
{
    if (!m || !ns || !eventsource || (unsigned)reason >= FUNCD_METRICS_DROP_REASONS)
        return;
    funcd_metrics_events *ev = funcd_metrics__events(m);
    pthread_mutex_lock(&ev->lock);
    ev_counter *c = counter_of(ev, ns, eventsource);
    if (c)
        c->dropped[reason]++;
    pthread_mutex_unlock(&ev->lock);
}

void funcd_metrics_set_delivery_source(funcd_metrics *m, const funcd_metrics_delivery_source *src)
{
    funcd_metrics_events *ev = funcd_metrics__events(m);
    pthread_mutex_lock(&ev->src_lock);
    ev->has_src = src != NULL;
    if (src)
        ev->src = *src;
    pthread_mutex_unlock(&ev->src_lock);
}

/* ---- collecting ---------------------------------------------------------- */

typedef struct ev_copy {
    char *ns, *source;
    uint64_t n[FUNCD_METRICS_EVENT_OUTCOMES];
    uint64_t dropped[FUNCD_METRICS_DROP_REASONS];
} ev_copy;

static int by_ns_source(const void *a, const void *b)
{
    const ev_copy *x = a, *y = b;
    int c = strcmp(x->ns, y->ns);
    return c ? c : strcmp(x->source, y->source);
}

typedef struct dlq_count {
    char *ns;
    uint64_t n;
} dlq_count;

typedef struct dlq_list {
    dlq_count *v;
    size_t n, cap;
    funcd_metrics_ns_filter allow;
    void *allow_payload;
} dlq_list;

static void on_dlq(void *ctx, const char *ns, uint64_t entries)
{
    dlq_list *l = ctx;
    if (l->allow && !l->allow(l->allow_payload, ns))
        return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        dlq_count *v = realloc(l->v, cap * sizeof(*v));
        if (!v)
            return;
        l->v = v;
        l->cap = cap;
    }
    if ((l->v[l->n].ns = strdup(ns)))
        l->v[l->n++].n = entries;
}

static int by_ns(const void *a, const void *b)
{
    return strcmp(((const dlq_count *)a)->ns, ((const dlq_count *)b)->ns);
}

static void sample(const funcd_metrics_visitor *v, int f, const funcd_metric_label *labels,
                   size_t n, double x)
{
    funcd_metric_sample s = {.labels = labels, .n_labels = n, .value = x};
    v->sample(v->payload, &families[f], &s);
}

void funcd_metrics__events_walk(funcd_metrics *m, funcd_metrics_ns_filter allow,
                                void *allow_payload, const funcd_metrics_visitor *v)
{
    funcd_metrics_events *ev = funcd_metrics__events(m);

    /* The counters: copied under the lock, walked without it. */
    size_t n = 0, k = 0;
    pthread_mutex_lock(&ev->lock);
    for (ev_counter *c = ev->counters; c; c = c->next)
        n++;
    ev_copy *copy = n ? calloc(n, sizeof(*copy)) : NULL;
    for (ev_counter *c = copy ? ev->counters : NULL; c; c = c->next) {
        if (allow && !allow(allow_payload, c->ns))
            continue;
        copy[k].ns = strdup(c->ns);
        copy[k].source = strdup(c->source);
        memcpy(copy[k].n, c->n, sizeof(c->n));
        memcpy(copy[k].dropped, c->dropped, sizeof(c->dropped));
        if (!copy[k].ns || !copy[k].source) {
            free(copy[k].ns);
            free(copy[k].source);
            continue;
        }
        k++;
    }
    pthread_mutex_unlock(&ev->lock);
    if (k)
        qsort(copy, k, sizeof(*copy), by_ns_source);
    v->family(v->payload, &families[F_EVENTS]);
    funcd_metric_label l[3] = {{"namespace", NULL}, {"eventsource", NULL}, {"outcome", NULL}};
    for (size_t i = 0; i < k; i++) {
        l[0].value = copy[i].ns;
        l[1].value = copy[i].source;
        for (int o = 0; o < FUNCD_METRICS_EVENT_OUTCOMES; o++) {
            l[2].value = outcome_names[o];
            sample(v, F_EVENTS, l, 3, (double)copy[i].n[o]);
        }
    }
    v->family(v->payload, &families[F_DROPPED]);
    funcd_metric_label ld[3] = {{"namespace", NULL}, {"eventsource", NULL}, {"reason", NULL}};
    for (size_t i = 0; i < k; i++) {
        ld[0].value = copy[i].ns;
        ld[1].value = copy[i].source;
        for (int r = 0; r < FUNCD_METRICS_DROP_REASONS; r++) {
            ld[2].value = drop_names[r];
            sample(v, F_DROPPED, ld, 3, (double)copy[i].dropped[r]);
        }
        free(copy[i].ns);
        free(copy[i].source);
    }
    free(copy);

    /* The queue's gauges, read from it now (under src_lock only). */
    dlq_list dl = {.allow = allow, .allow_payload = allow_payload};
    unsigned waiting = 0, running = 0;
    pthread_mutex_lock(&ev->src_lock);
    int has = ev->has_src;
    if (has && ev->src.deadletters)
        ev->src.deadletters(ev->src.payload, on_dlq, &dl);
    if (has && ev->src.depth)
        ev->src.depth(ev->src.payload, &waiting, &running);
    pthread_mutex_unlock(&ev->src_lock);
    if (dl.n)
        qsort(dl.v, dl.n, sizeof(*dl.v), by_ns);
    v->family(v->payload, &families[F_DLQ]);
    for (size_t i = 0; i < dl.n; i++) {
        funcd_metric_label ln = {"namespace", dl.v[i].ns};
        sample(v, F_DLQ, &ln, 1, (double)dl.v[i].n);
        free(dl.v[i].ns);
    }
    free(dl.v);
    v->family(v->payload, &families[F_DEPTH]);
    if (has) { /* node-wide, like the process_* series */
        funcd_metric_label ls = {"state", "waiting"};
        sample(v, F_DEPTH, &ls, 1, waiting);
        ls.value = "running";
        sample(v, F_DEPTH, &ls, 1, running);
    }
}
