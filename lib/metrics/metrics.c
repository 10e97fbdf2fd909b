/*
 * The registry: per-function blocks of per-thread counters, summed when
 * collected (metrics.h says who may call what, and when a block goes).
 */
#include "metrics/metrics.h"

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "funcd/sys/error.h"
#include "metrics/egress.h"
#include "metrics/internal.h"

/* A slot keeps this many distinct status codes; more go to code "other". */
#define CODES 24

typedef _Atomic uint64_t counter;

/* One gateway thread's counters of one function: written by that thread
 * only, so an increment is a plain load and store (no lock prefix, no
 * contended cache line: slots are cache-line aligned). */
typedef struct fn_slot {
    alignas(64) _Atomic uint32_t code[CODES]; /* 0: free; published after its count */
    counter count[CODES];
    counter other;
    counter bucket[FUNCD_METRICS_REQ_BUCKETS]; /* not cumulative; the last is +Inf */
    counter sum_ns;
    counter rejected[FUNCD_METRICS_REASONS];
    _Atomic uint32_t inflight; /* requests between enter and done */
} fn_slot;

struct funcd_metrics_fn {
    funcd_metrics *m;
    char *ns, *name;
    unsigned holders; /* under m->lock */
    /* cold starts, under m->lock */
    uint64_t cold_bucket[FUNCD_METRICS_COLD_BUCKETS];
    uint64_t cold_sum_ns;
    funcd_metrics_fn *next;
    fn_slot *slots; /* m->slots of them */
};

struct funcd_metrics {
    pthread_mutex_t lock;
    unsigned slots;
    funcd_metrics_fn *fns; /* held ones, and dropped ones not freed yet */
    funcd_metrics_gauge_source gauges;
    void *gauges_payload;
    funcd_metrics_egress *egress; /* lib/egress's counters, or NULL (egress.h) */
    funcd_metrics_events *events; /* events.c */
    funcd_metrics_sites_source sites; /* lib/sites's cache gauges, or NULL */
    void *sites_payload;
};

void funcd_metrics_set_sites_source(funcd_metrics *m, funcd_metrics_sites_source src,
                                    void *payload)
{
    pthread_mutex_lock(&m->lock);
    m->sites = src;
    m->sites_payload = payload;
    pthread_mutex_unlock(&m->lock);
}

int funcd_metrics__sites_read(funcd_metrics *m, uint64_t *bytes, uint64_t *limit,
                              uint64_t *files)
{
    pthread_mutex_lock(&m->lock);
    int have = m->sites != NULL;
    if (have)
        m->sites(m->sites_payload, bytes, limit, files);
    pthread_mutex_unlock(&m->lock);
    return have;
}

void funcd_metrics_set_egress(funcd_metrics *m, funcd_metrics_egress *e)
{
    pthread_mutex_lock(&m->lock);
    m->egress = e;
    pthread_mutex_unlock(&m->lock);
}

funcd_metrics_egress *funcd_metrics_egress_of(funcd_metrics *m)
{
    pthread_mutex_lock(&m->lock);
    funcd_metrics_egress *e = m->egress;
    pthread_mutex_unlock(&m->lock);
    return e;
}

const double funcd_metrics_req_bounds[FUNCD_METRICS_REQ_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
    __builtin_inf()};
const double funcd_metrics_cold_bounds[FUNCD_METRICS_COLD_BUCKETS] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, __builtin_inf()};

/* The same bounds in nanoseconds, so that recording compares integers. */
static const uint64_t req_bounds_ns[FUNCD_METRICS_REQ_BUCKETS - 1] = {
    500000,      1000000,     2500000,     5000000,      10000000,     25000000,
    50000000,    100000000,   250000000,   500000000,    1000000000,   2500000000,
    5000000000,  10000000000, 30000000000, 60000000000};
static const uint64_t cold_bounds_ns[FUNCD_METRICS_COLD_BUCKETS - 1] = {
    1000000,   2500000,   5000000,    10000000,   25000000,   50000000,   100000000,
    250000000, 500000000, 1000000000, 2500000000, 5000000000, 10000000000, 30000000000};

static const char *const reason_names[FUNCD_METRICS_REASONS] = {
    "rate_limited",    "body_too_large", "in_flight_limit",
    "unauthenticated", "forbidden",      "auth_unavailable"};

const char *funcd_metrics_reason_name(funcd_metrics_reason r)
{
    return (unsigned)r < FUNCD_METRICS_REASONS ? reason_names[r] : "unknown";
}

uint64_t funcd_metrics_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static size_t bucket_of(const uint64_t *bounds_ns, size_t n, uint64_t v)
{
    size_t i = 0;
    while (i < n && v > bounds_ns[i])
        i++;
    return i; /* n: +Inf */
}

/* ---- the registry -------------------------------------------------------- */

int funcd_metrics_new(funcd_metrics **out, unsigned slots)
{
    *out = NULL;
    funcd_metrics *m = calloc(1, sizeof(*m));
    if (!m)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the metrics registry");
    if (!(m->events = funcd_metrics__events_new())) {
        free(m);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the metrics registry");
    }
    pthread_mutex_init(&m->lock, NULL);
    m->slots = slots ? slots : 1;
    *out = m;
    return 0;
}

static void fn_free(funcd_metrics_fn *fn)
{
    free(fn->slots);
    free(fn->ns);
    free(fn->name);
    free(fn);
}

void funcd_metrics_free(funcd_metrics *m)
{
    if (!m)
        return;
    while (m->fns) {
        funcd_metrics_fn *fn = m->fns;
        m->fns = fn->next;
        fn_free(fn);
    }
    funcd_metrics__events_free(m->events);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

funcd_metrics_events *funcd_metrics__events(funcd_metrics *m)
{
    return m->events;
}

unsigned funcd_metrics_slots(const funcd_metrics *m)
{
    return m ? m->slots : 0;
}

void funcd_metrics_set_gauge_source(funcd_metrics *m, funcd_metrics_gauge_source src,
                                    void *payload)
{
    pthread_mutex_lock(&m->lock);
    m->gauges = src;
    m->gauges_payload = payload;
    pthread_mutex_unlock(&m->lock);
}

static funcd_metrics_fn *find_locked(funcd_metrics *m, const char *ns, const char *name)
{
    for (funcd_metrics_fn *fn = m->fns; fn; fn = fn->next)
        if (strcmp(fn->ns, ns) == 0 && strcmp(fn->name, name) == 0)
            return fn;
    return NULL;
}

funcd_metrics_fn *funcd_metrics_fn_hold(funcd_metrics *m, const char *ns, const char *name)
{
    if (!m || !ns || !name)
        return NULL;
    pthread_mutex_lock(&m->lock);
    funcd_metrics_fn *fn = find_locked(m, ns, name);
    if (!fn && (fn = calloc(1, sizeof(*fn)))) {
        size_t bytes = sizeof(fn_slot) * m->slots;
        fn->slots = aligned_alloc(alignof(fn_slot), bytes);
        fn->ns = strdup(ns);
        fn->name = strdup(name);
        if (!fn->slots || !fn->ns || !fn->name) {
            fn_free(fn);
            fn = NULL;
        } else {
            memset(fn->slots, 0, bytes);
            fn->m = m;
            fn->next = m->fns;
            m->fns = fn;
        }
    }
    if (fn)
        fn->holders++;
    pthread_mutex_unlock(&m->lock);
    return fn;
}

/* No request is between enter and done on any thread. */
static int idle(const funcd_metrics_fn *fn)
{
    for (unsigned i = 0; i < fn->m->slots; i++)
        if (atomic_load_explicit(&fn->slots[i].inflight, memory_order_acquire))
            return 0;
    return 1;
}

/* Frees dropped blocks no request counts into any more. */
static void reap_locked(funcd_metrics *m)
{
    for (funcd_metrics_fn **pp = &m->fns; *pp;) {
        funcd_metrics_fn *fn = *pp;
        if (fn->holders == 0 && idle(fn)) {
            *pp = fn->next;
            fn_free(fn);
        } else {
            pp = &fn->next;
        }
    }
}

void funcd_metrics_fn_drop(funcd_metrics_fn *fn)
{
    if (!fn)
        return;
    funcd_metrics *m = fn->m;
    pthread_mutex_lock(&m->lock);
    if (fn->holders && --fn->holders == 0)
        reap_locked(m);
    pthread_mutex_unlock(&m->lock);
}

/* ---- recording ------------------------------------------------------------ */

static inline void bump(counter *c, uint64_t by)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + by,
                          memory_order_relaxed);
}

void funcd_metrics_fn_enter(funcd_metrics_fn *fn, unsigned slot)
{
    _Atomic uint32_t *n = &fn->slots[slot].inflight;
    atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

void funcd_metrics_fn_done(funcd_metrics_fn *fn, unsigned slot, int code, uint64_t duration_ns)
{
    fn_slot *s = &fn->slots[slot];
    uint32_t c = code > 0 && code < 1000 ? (uint32_t)code : 499;
    size_t i = 0;
    for (; i < CODES; i++) {
        uint32_t have = atomic_load_explicit(&s->code[i], memory_order_relaxed);
        if (have == c) {
            bump(&s->count[i], 1);
            break;
        }
        if (have == 0) { /* the count first: a collector never sees a code without it */
            bump(&s->count[i], 1);
            atomic_store_explicit(&s->code[i], c, memory_order_release);
            break;
        }
    }
    if (i == CODES)
        bump(&s->other, 1);
    bump(&s->bucket[bucket_of(req_bounds_ns, FUNCD_METRICS_REQ_BUCKETS - 1, duration_ns)], 1);
    bump(&s->sum_ns, duration_ns);
    /* The last touch: from here the block may be freed (release: the
     * counts above are written before a reaper can see 0). */
    atomic_store_explicit(&s->inflight, atomic_load_explicit(&s->inflight, memory_order_relaxed) - 1,
                          memory_order_release);
}

void funcd_metrics_fn_reject(funcd_metrics_fn *fn, unsigned slot, funcd_metrics_reason reason)
{
    if ((unsigned)reason < FUNCD_METRICS_REASONS)
        bump(&fn->slots[slot].rejected[reason], 1);
}

void funcd_metrics_cold_start(funcd_metrics *m, const char *ns, const char *name,
                              uint64_t duration_ns)
{
    if (!m || !ns || !name)
        return;
    pthread_mutex_lock(&m->lock);
    funcd_metrics_fn *fn = find_locked(m, ns, name);
    if (fn && fn->holders) {
        fn->cold_bucket[bucket_of(cold_bounds_ns, FUNCD_METRICS_COLD_BUCKETS - 1, duration_ns)]++;
        fn->cold_sum_ns += duration_ns;
    }
    pthread_mutex_unlock(&m->lock);
}

/* ---- snapshots -------------------------------------------------------------- */

/* Sums the slots of `fn` (each counter read once). */
static void snapshot_fn(const funcd_metrics_fn *fn, unsigned slots, funcd_metrics_fn_snapshot *out)
{
    memset(out, 0, sizeof(*out));
    for (unsigned t = 0; t < slots; t++) {
        fn_slot *s = &fn->slots[t];
        for (size_t i = 0; i < CODES; i++) {
            uint32_t c = atomic_load_explicit(&s->code[i], memory_order_acquire);
            if (!c)
                break;
            uint64_t n = atomic_load_explicit(&s->count[i], memory_order_relaxed);
            size_t j = 0;
            while (j < out->n_codes && out->codes[j].code != c)
                j++;
            if (j == out->n_codes) {
                if (j == FUNCD_METRICS_SNAPSHOT_CODES) {
                    out->other += n;
                    continue;
                }
                out->codes[out->n_codes++].code = c;
            }
            out->codes[j].count += n;
        }
        out->other += atomic_load_explicit(&s->other, memory_order_relaxed);
        for (size_t b = 0; b < FUNCD_METRICS_REQ_BUCKETS; b++)
            out->req_bucket[b] += atomic_load_explicit(&s->bucket[b], memory_order_relaxed);
        out->req_sum_ns += atomic_load_explicit(&s->sum_ns, memory_order_relaxed);
        for (size_t r = 0; r < FUNCD_METRICS_REASONS; r++)
            out->rejected[r] += atomic_load_explicit(&s->rejected[r], memory_order_relaxed);
    }
    memcpy(out->cold_bucket, fn->cold_bucket, sizeof(out->cold_bucket));
    out->cold_sum_ns = fn->cold_sum_ns;
}

static int by_code(const void *a, const void *b)
{
    uint32_t x = ((const funcd_metrics_code_count *)a)->code;
    uint32_t y = ((const funcd_metrics_code_count *)b)->code;
    return (x > y) - (x < y);
}

static int by_name(const void *a, const void *b)
{
    const funcd_metrics_fn_snapshot *x = a, *y = b;
    int c = strcmp(x->ns, y->ns);
    return c ? c : strcmp(x->name, y->name);
}

void funcd_metrics_snapshot_free(funcd_metrics_snapshot *s)
{
    for (size_t i = 0; i < s->n_fns; i++) {
        free(s->fns[i].ns);
        free(s->fns[i].name);
    }
    free(s->fns);
    for (size_t i = 0; i < s->n_gauges; i++) {
        free(s->gauges[i].ns);
        free(s->gauges[i].name);
    }
    free(s->gauges);
    memset(s, 0, sizeof(*s));
}

typedef struct gauge_ctx {
    funcd_metrics_snapshot *s;
    size_t cap;
    funcd_metrics_ns_filter allow;
    void *allow_payload;
    int oom;
} gauge_ctx;

static void put_gauges(void *ctx, const funcd_metrics_gauges *g)
{
    gauge_ctx *gc = ctx;
    funcd_metrics_snapshot *s = gc->s;
    if (gc->oom || (gc->allow && !gc->allow(gc->allow_payload, g->ns)))
        return;
    if (s->n_gauges == gc->cap) {
        size_t cap = gc->cap ? gc->cap * 2 : 16;
        funcd_metrics_gauge_snapshot *v = realloc(s->gauges, cap * sizeof(*v));
        if (!v) {
            gc->oom = 1;
            return;
        }
        s->gauges = v;
        gc->cap = cap;
    }
    funcd_metrics_gauge_snapshot *o = &s->gauges[s->n_gauges];
    o->g = *g;
    o->ns = strdup(g->ns);
    o->name = strdup(g->name);
    s->n_gauges++;
    if (!o->ns || !o->name)
        gc->oom = 1;
}

static int by_gauge_name(const void *a, const void *b)
{
    const funcd_metrics_gauge_snapshot *x = a, *y = b;
    int c = strcmp(x->ns, y->ns);
    return c ? c : strcmp(x->name, y->name);
}

int funcd_metrics_take_snapshot(funcd_metrics *m, funcd_metrics_ns_filter allow, void *allow_payload,
                           funcd_metrics_snapshot *out)
{
    memset(out, 0, sizeof(*out));
    int oom = 0;
    pthread_mutex_lock(&m->lock);
    reap_locked(m);
    size_t n = 0;
    for (funcd_metrics_fn *fn = m->fns; fn; fn = fn->next)
        n += fn->holders > 0;
    out->fns = n ? calloc(n, sizeof(*out->fns)) : NULL;
    oom = n && !out->fns;
    for (funcd_metrics_fn *fn = m->fns; fn && !oom; fn = fn->next) {
        if (!fn->holders || (allow && !allow(allow_payload, fn->ns)))
            continue;
        funcd_metrics_fn_snapshot *o = &out->fns[out->n_fns++];
        snapshot_fn(fn, m->slots, o);
        o->ns = strdup(fn->ns);
        o->name = strdup(fn->name);
        oom = !o->ns || !o->name;
        if (o->n_codes > 1)
            qsort(o->codes, o->n_codes, sizeof(o->codes[0]), by_code);
    }
    funcd_metrics_gauge_source src = m->gauges;
    void *src_payload = m->gauges_payload;
    pthread_mutex_unlock(&m->lock);
    /* The source takes its own locks: never under ours. */
    gauge_ctx gc = {out, 0, allow, allow_payload, 0};
    if (src && !oom)
        src(src_payload, put_gauges, &gc);
    if (oom || gc.oom) {
        funcd_metrics_snapshot_free(out);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory collecting metrics");
    }
    if (out->n_fns > 1)
        qsort(out->fns, out->n_fns, sizeof(*out->fns), by_name);
    if (out->n_gauges > 1)
        qsort(out->gauges, out->n_gauges, sizeof(*out->gauges), by_gauge_name);
    funcd_metrics_process_read(&out->process);
    return 0;
}
