#include "pool/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "funcd/sys/error.h"
#include "util/misc.h"

#define TIMER_MS 100
#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 10000
#define POOL_LISTED_MAX 4 /* budgets a pool may wait on at once (its chain's depth) */

typedef enum wstate { W_STARTING, W_READY, W_STOPPING, W_GONE } wstate;

struct funcd_pool_worker {
    funcd_pool *pool;
    wstate state;     /* under pool->lock */
    unsigned replica;
    unsigned in_flight;
    int64_t started_ms;
    int64_t last_used_ms;
    int stop_called;
    funcd_pool_budget *budget; /* the place it holds (given back once exited); NULL: none */
    int leaving;      /* told to stop: counted in its budgets' `leaving` until it exits */
    funcd_pool *leaving_for; /* the pool its place will reach, counted in its `leaving_for`
                              * and referenced until it exits (review19 M-1); NULL: none */
    atomic_int refs;  /* 1 while listed + 1 per slot held */
    void *data;
    funcd_pool_worker *next;
};

struct funcd_pool {
    pthread_mutex_t lock;
    atomic_int refs;
    funcd_pool_config cfg;
    funcd_pool_ops ops;
    struct event_base *loop;
    struct event *tick;  /* any thread: event_active under lock while open */
    struct event *timer; /* idle reaping, start timeouts, backoff */
    funcd_pool_worker *workers;
    unsigned n_ready, n_starting, n_stopping;
    unsigned next_replica, rr;
    funcd_pool_waiter waiters; /* anchor */
    unsigned n_waiting;
    unsigned n_in_flight; /* requests holding a slot, over all workers */
    int closed;
    unsigned failures; /* consecutive start failures */
    int64_t backoff_until_ms;
    char last_error[512];
    int64_t last_cold_start_ms;
    double last_cold_start_millis;
    unsigned budget_short; /* workers the last plan wanted but found no place for */
    int place_coming; /* a leaving worker holds a place of the full budget and will give it
                       * to this pool (its own, or a closed pool's it succeeds) */
    atomic_uint leaving_for; /* workers told to stop whose places come to this pool */
    unsigned kept; /* places taken for its next starts, left by its (or its predecessor's)
                    * exited workers (review18 M-3) */
    funcd_pool *heir; /* once closed, who gets its workers' places first; referenced */
    int64_t short_since_ms; /* waiters present, no worker, no place: since (0: not so) */
    /* The budgets whose starved list holds this pool: a slot is set under
     * the pool's lock and that budget's, cleared under the budget's. */
    _Atomic(funcd_pool_budget *) listed_on[POOL_LISTED_MAX];
    char budget_error[256]; /* which limit, with the counts (the status says it) */
    char budget_limit[200]; /* which limit, no count (a request's 503 says it; review18 L-3) */
};

/* ---- budgets ---------------------------------------------------------- */

struct funcd_pool_budget {
    atomic_int refs;
    atomic_uint taken;
    atomic_uint leaving; /* of those, held by workers told to stop: they come back */
    unsigned limit; /* 0: none */
    funcd_pool_budget *parent;
    pthread_mutex_t lock; /* taken's changes and the starved list */
    funcd_pool **starved; /* pools that found no place here, each referenced */
    unsigned n_starved, cap_starved;
    char what[128], flag[96];
};

funcd_pool_budget *funcd_pool_budget_new(unsigned limit, funcd_pool_budget *parent,
                                         const char *what, const char *flag)
{
    funcd_pool_budget *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    atomic_init(&b->refs, 1);
    atomic_init(&b->taken, 0);
    atomic_init(&b->leaving, 0);
    b->limit = limit;
    b->parent = parent;
    if (parent)
        funcd_pool_budget_ref(parent);
    pthread_mutex_init(&b->lock, NULL);
    snprintf(b->what, sizeof(b->what), "%s", what ? what : "the budget");
    snprintf(b->flag, sizeof(b->flag), "%s", flag ? flag : "its limit");
    return b;
}

void funcd_pool_budget_ref(funcd_pool_budget *b)
{
    atomic_fetch_add(&b->refs, 1);
}

void funcd_pool_budget_unref(funcd_pool_budget *b)
{
    while (b && atomic_fetch_sub(&b->refs, 1) == 1) {
        funcd_pool_budget *parent = b->parent;
        /* The starved list is empty: a pool leaves it when it closes and
         * holds a reference to its budget until then. */
        free(b->starved);
        pthread_mutex_destroy(&b->lock);
        free(b);
        b = parent;
    }
}

unsigned funcd_pool_budget_taken(funcd_pool_budget *b)
{
    return atomic_load(&b->taken);
}

/* Clears `p`'s mark of being listed on `b` (under b->lock). */
static void unlist_mark(funcd_pool *p, funcd_pool_budget *b)
{
    for (int i = 0; i < POOL_LISTED_MAX; i++)
        if (atomic_load(&p->listed_on[i]) == b)
            atomic_store(&p->listed_on[i], NULL);
}

/* Adds `p` to the pools woken when a place is given back to `b` (under
 * b->lock and p->lock): once, known by its mark and not by a search of the
 * list, which may hold thousands (review18 M-2). */
static void starve_locked(funcd_pool_budget *b, funcd_pool *p)
{
    int free_slot = -1;
    for (int i = 0; i < POOL_LISTED_MAX; i++) {
        funcd_pool_budget *on = atomic_load(&p->listed_on[i]);
        if (on == b)
            return;
        if (!on && free_slot < 0)
            free_slot = i;
    }
    if (free_slot < 0)
        return; /* a chain deeper than any funcd makes: it plans at its next timer */
    if (b->n_starved == b->cap_starved) {
        unsigned cap = b->cap_starved ? 2 * b->cap_starved : 8;
        funcd_pool **v = realloc(b->starved, cap * sizeof(*v));
        if (!v)
            return; /* it plans again at its next timer or request */
        b->starved = v;
        b->cap_starved = cap;
    }
    funcd_pool_ref(p);
    b->starved[b->n_starved++] = p;
    atomic_store(&p->listed_on[free_slot], b);
}

static void budget_put(funcd_pool_budget *b, funcd_pool_budget *upto)
{
    for (; b != upto; b = b->parent) {
        pthread_mutex_lock(&b->lock);
        atomic_fetch_sub(&b->taken, 1);
        pthread_mutex_unlock(&b->lock);
    }
}

/* Takes one place from `b` and each parent for `p` (under its lock); none
 * left somewhere: 0, the place taken below is given back, `p` is listed to
 * be woken, its budget_error and budget_limit name the limit, and its
 * place_coming says whether a worker told to stop holds a place there. */
static int budget_take(funcd_pool_budget *leaf, funcd_pool *p)
{
    for (funcd_pool_budget *b = leaf; b; b = b->parent) {
        pthread_mutex_lock(&b->lock);
        unsigned taken = atomic_load(&b->taken);
        if (b->limit && taken >= b->limit) {
            starve_locked(b, p);
            pthread_mutex_unlock(&b->lock);
            snprintf(p->budget_error, sizeof(p->budget_error),
                     "%s has %u workers, its limit (%s %u)", b->what, taken, b->flag, b->limit);
            snprintf(p->budget_limit, sizeof(p->budget_limit), "the worker limit of %s (%s)",
                     b->what, b->flag);
            /* Only a place that will reach p (its own leaving workers', or
             * those of a pool it succeeds) is worth the long wait: another
             * pool's is kept there whenever that pool is short (review19 M-1). */
            p->place_coming = atomic_load(&b->leaving) > 0 && atomic_load(&p->leaving_for) > 0;
            budget_put(leaf, b); /* no wake-up: nobody could use it (they would take b too) */
            return 0;
        }
        atomic_fetch_add(&b->taken, 1);
        pthread_mutex_unlock(&b->lock);
    }
    return 1;
}

/* Some pool waits for a place of a budget in `leaf`'s chain (under the
 * pool's lock: pool, then budget, as budget_take). */
static int budget_pressed(funcd_pool_budget *leaf)
{
    for (funcd_pool_budget *b = leaf; b; b = b->parent) {
        pthread_mutex_lock(&b->lock);
        unsigned n = b->n_starved;
        pthread_mutex_unlock(&b->lock);
        if (n)
            return 1;
    }
    return 0;
}

/* Counts leaving worker `w` on `to` (NULL: nobody), the pool its place
 * goes to first (under w's pool's lock: atomics only, no other pool's lock). */
static void leave_for(funcd_pool_worker *w, funcd_pool *to)
{
    if (to) {
        funcd_pool_ref(to);
        atomic_fetch_add(&to->leaving_for, 1);
    }
    w->leaving_for = to;
}

/* Worker `w` (under its pool's lock) is told to stop: its places will come
 * back, to its pool (or, closed, to its heir) first: that pool may wait
 * for them. */
static void note_leaving(funcd_pool_worker *w)
{
    if (!w->budget || w->leaving)
        return;
    w->leaving = 1;
    for (funcd_pool_budget *b = w->budget; b; b = b->parent)
        atomic_fetch_add(&b->leaving, 1);
    funcd_pool *p = w->pool;
    leave_for(w, p->closed ? p->heir : p);
}

static void pool_wake(funcd_pool *p);
static void poke_locked(funcd_pool *p);

/* A worker's process is gone: its places are given back, and every pool
 * that found no place in the chain plans again. Not under a pool's lock. */
static void budget_give(funcd_pool_budget *leaf)
{
    for (funcd_pool_budget *b = leaf; b; b = b->parent) {
        pthread_mutex_lock(&b->lock);
        atomic_fetch_sub(&b->taken, 1);
        funcd_pool **woken = b->starved;
        unsigned n = b->n_starved;
        b->starved = NULL;
        b->n_starved = b->cap_starved = 0;
        for (unsigned i = 0; i < n; i++)
            unlist_mark(woken[i], b);
        pthread_mutex_unlock(&b->lock);
        for (unsigned i = 0; i < n; i++) {
            pool_wake(woken[i]);
            funcd_pool_unref(woken[i]);
        }
        free(woken);
    }
}

/* A worker of `p` exited holding a place of `b`: `p` keeps it if it waits
 * for places of `b`, or once closed its heir (and so on) does, ahead of
 * every other pool of the budget, which would take it first as often as
 * not (review18 M-3). 1: kept. Not under a pool's lock. */
static int pool_keep_place(funcd_pool *p, funcd_pool_budget *b)
{
    pthread_mutex_lock(&p->lock);
    if (p->closed) {
        funcd_pool *heir = p->heir; /* set once, with closed; referenced by p */
        pthread_mutex_unlock(&p->lock);
        return heir && pool_keep_place(heir, b);
    }
    int keep = p->cfg.budget == b && p->kept < p->budget_short;
    if (keep) {
        p->kept++;
        poke_locked(p); /* its plan starts a worker on it */
    }
    pthread_mutex_unlock(&p->lock);
    return keep;
}

/* `p` no longer waits for a place anywhere in the chain (it closed, or
 * moved to another budget). */
static void budget_forget(funcd_pool_budget *leaf, funcd_pool *p)
{
    for (funcd_pool_budget *b = leaf; b; b = b->parent) {
        int found = 0;
        pthread_mutex_lock(&b->lock);
        int marked = 0;
        for (int i = 0; i < POOL_LISTED_MAX; i++)
            marked |= atomic_load(&p->listed_on[i]) == b;
        for (unsigned i = 0; marked && i < b->n_starved; i++)
            if (b->starved[i] == p) {
                b->starved[i] = b->starved[--b->n_starved];
                unlist_mark(p, b);
                found = 1;
                break;
            }
        pthread_mutex_unlock(&b->lock);
        if (found)
            funcd_pool_unref(p);
    }
}

static int64_t now_ms(const funcd_pool *p)
{
    return p->ops.now_ms ? p->ops.now_ms(p->ops.payload) : funcd_mono_ms();
}

/* ---- references ------------------------------------------------------- */

void funcd_pool_ref(funcd_pool *p)
{
    atomic_fetch_add(&p->refs, 1);
}

void funcd_pool_unref(funcd_pool *p)
{
    if (!p || atomic_fetch_sub(&p->refs, 1) != 1)
        return;
    funcd_pool_budget_unref(p->cfg.budget);
    if (p->heir)
        funcd_pool_unref(p->heir);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

static void worker_unref(funcd_pool_worker *w)
{
    if (atomic_fetch_sub(&w->refs, 1) != 1)
        return;
    funcd_pool *p = w->pool;
    if (p->ops.dispose)
        p->ops.dispose(w, p->ops.payload);
    free(w);
    funcd_pool_unref(p);
}

/* ---- waiters ---------------------------------------------------------- */

static void enqueue(funcd_pool *p, funcd_pool_waiter *wt)
{
    wt->next = &p->waiters;
    wt->prev = p->waiters.prev;
    wt->prev->next = wt;
    p->waiters.prev = wt;
    wt->queued = 1;
    wt->slot = NULL;
    p->n_waiting++;
}

static funcd_pool_waiter *dequeue(funcd_pool *p)
{
    funcd_pool_waiter *wt = p->waiters.next;
    if (wt == &p->waiters)
        return NULL;
    wt->prev->next = wt->next;
    wt->next->prev = wt->prev;
    wt->queued = 0;
    p->n_waiting--;
    return wt;
}

/* The ready worker with the fewest requests in flight and a free slot;
 * ties go round-robin so load spreads over equal workers. */
static funcd_pool_worker *pick(funcd_pool *p)
{
    funcd_pool_worker *best = NULL;
    unsigned best_load = 0, i = 0, start = p->rr++;
    unsigned n = p->n_ready ? p->n_ready : 1;
    unsigned best_rank = 0;
    for (funcd_pool_worker *w = p->workers; w; w = w->next) {
        if (w->state != W_READY || w->in_flight >= p->cfg.concurrency)
            continue;
        unsigned rank = (i++ + n - start % n) % n; /* rotate the tie order */
        if (!best || w->in_flight < best_load || (w->in_flight == best_load && rank < best_rank)) {
            best = w;
            best_load = w->in_flight;
            best_rank = rank;
        }
    }
    return best;
}

static void take_slot(funcd_pool_worker *w)
{
    w->in_flight++;
    w->pool->n_in_flight++;
    w->last_used_ms = now_ms(w->pool);
    atomic_fetch_add(&w->refs, 1);
}

/* Hands free slots to waiters in order; the grants are delivered by
 * deliver() once the lock is dropped. */
static funcd_pool_waiter *grant_locked(funcd_pool *p)
{
    funcd_pool_waiter *granted = NULL, **tail = &granted;
    while (p->n_waiting) {
        funcd_pool_worker *w = pick(p);
        if (!w)
            break;
        funcd_pool_waiter *wt = dequeue(p);
        take_slot(w);
        wt->slot = w;
        wt->next = NULL;
        *tail = wt;
        tail = &wt->next;
    }
    return granted;
}

static void deliver(funcd_pool_waiter *list, const char *error)
{
    while (list) {
        funcd_pool_waiter *next = list->next;
        list->granted(list, list->slot, list->slot ? NULL : error);
        list = next;
    }
}

/* Takes every waiter out of the queue (to be failed). */
static funcd_pool_waiter *take_all_waiters(funcd_pool *p)
{
    funcd_pool_waiter *all = NULL, **tail = &all, *wt;
    while ((wt = dequeue(p))) {
        wt->slot = NULL;
        wt->next = NULL;
        *tail = wt;
        tail = &wt->next;
    }
    return all;
}

static void poke_locked(funcd_pool *p)
{
    if (!p->closed)
        event_active(p->tick, 0, 0);
}

static void pool_wake(funcd_pool *p)
{
    pthread_mutex_lock(&p->lock);
    poke_locked(p);
    pthread_mutex_unlock(&p->lock);
}

/* ---- the request side (any thread) ------------------------------------ */

funcd_pool_outcome funcd_pool_acquire(funcd_pool *p, funcd_pool_waiter *wt,
                                      funcd_pool_worker **out)
{
    *out = NULL;
    pthread_mutex_lock(&p->lock);
    funcd_pool_outcome rc;
    funcd_pool_worker *w = NULL;
    if (p->closed) {
        rc = FUNCD_POOL_CLOSED;
    } else if (!p->n_waiting && (w = pick(p))) {
        take_slot(w);
        *out = w;
        rc = FUNCD_POOL_GRANTED;
    } else if (p->n_waiting >= p->cfg.queue_length) {
        rc = FUNCD_POOL_FULL;
    } else {
        enqueue(p, wt);
        poke_locked(p); /* the loop decides whether to start a worker */
        rc = FUNCD_POOL_QUEUED;
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

int funcd_pool_cancel(funcd_pool *p, funcd_pool_waiter *wt)
{
    pthread_mutex_lock(&p->lock);
    int was_queued = wt->queued;
    if (was_queued) {
        wt->prev->next = wt->next;
        wt->next->prev = wt->prev;
        wt->queued = 0;
        p->n_waiting--;
    }
    pthread_mutex_unlock(&p->lock);
    return was_queued;
}

void funcd_pool_release(funcd_pool *p, funcd_pool_worker *w, int failed)
{
    pthread_mutex_lock(&p->lock);
    w->in_flight--;
    p->n_in_flight--;
    w->last_used_ms = now_ms(w->pool);
    if (failed && w->state == W_READY) {
        w->state = W_STOPPING; /* evicted: the loop stops it and replaces it */
        p->n_ready--;
        p->n_stopping++;
        note_leaving(w);
        poke_locked(p);
    }
    funcd_pool_waiter *granted = grant_locked(p);
    pthread_mutex_unlock(&p->lock);
    deliver(granted, NULL);
    worker_unref(w);
}

void funcd_pool_stats_get(funcd_pool *p, funcd_pool_stats *out)
{
    pthread_mutex_lock(&p->lock);
    out->ready = p->n_ready;
    out->starting = p->n_starting;
    out->stopping = p->n_stopping;
    out->total = p->n_ready + p->n_starting + p->n_stopping;
    out->waiting = p->n_waiting;
    out->in_flight = p->n_in_flight;
    out->last_cold_start_ms = p->last_cold_start_ms;
    out->last_cold_start_millis = p->last_cold_start_millis;
    out->failures = p->failures;
    snprintf(out->last_error, sizeof(out->last_error), "%s", p->last_error);
    out->budget_short = p->budget_short;
    snprintf(out->budget_error, sizeof(out->budget_error), "%s",
             p->budget_short ? p->budget_error : "");
    pthread_mutex_unlock(&p->lock);
}

void funcd_pool_worker_set_data(funcd_pool_worker *w, void *data) { w->data = data; }
void *funcd_pool_worker_data(const funcd_pool_worker *w) { return w->data; }
unsigned funcd_pool_worker_replica(const funcd_pool_worker *w) { return w->replica; }
funcd_pool *funcd_pool_worker_pool(const funcd_pool_worker *w) { return w->pool; }

/* ---- the loop side ---------------------------------------------------- */

typedef struct work {
    funcd_pool_worker *stop[64];
    unsigned n_stop;
    funcd_pool_worker *start[64];
    unsigned n_start;
    unsigned give_back; /* kept places the plan did not use, to give back */
} work;

static void mark_stopping(funcd_pool *p, funcd_pool_worker *w, work *wk)
{
    if (w->state == W_READY)
        p->n_ready--;
    else if (w->state == W_STARTING)
        p->n_starting--;
    else
        return;
    w->state = W_STOPPING;
    p->n_stopping++;
    note_leaving(w);
    if (!w->stop_called && wk->n_stop < 64) {
        w->stop_called = 1;
        wk->stop[wk->n_stop++] = w;
    }
}

static void plan_locked(funcd_pool *p, work *wk)
{
    int64_t now = now_ms(p);
    /* Evicted workers still to be stopped. */
    for (funcd_pool_worker *w = p->workers; w; w = w->next)
        if (w->state == W_STOPPING && !w->stop_called && wk->n_stop < 64) {
            w->stop_called = 1;
            wk->stop[wk->n_stop++] = w;
        }
    /* Starts that took too long, and idle workers beyond the minimum; while
     * another pool waits for a place this one's budgets give, the worker idle
     * longest (FUNCD_POOL_PRESSED_IDLE_MS at least) goes too. */
    int pressed = !p->budget_short && p->cfg.budget && budget_pressed(p->cfg.budget);
    funcd_pool_worker *spare = NULL;
    for (funcd_pool_worker *w = p->workers; w; w = w->next) {
        if (w->state == W_STARTING && p->cfg.start_timeout_ms &&
            now - w->started_ms >= (int64_t)p->cfg.start_timeout_ms) {
            snprintf(p->last_error, sizeof(p->last_error),
                     "replica %u was not ready within %llu ms", w->replica,
                     (unsigned long long)p->cfg.start_timeout_ms);
            p->failures++;
            mark_stopping(p, w, wk);
        } else if (w->state == W_READY && w->in_flight == 0 && p->cfg.idle_ms &&
                   now - w->last_used_ms >= (int64_t)p->cfg.idle_ms &&
                   p->n_ready + p->n_starting > p->cfg.min_workers) {
            mark_stopping(p, w, wk);
        } else if (pressed && w->state == W_READY && w->in_flight == 0 &&
                   now - w->last_used_ms >= FUNCD_POOL_PRESSED_IDLE_MS &&
                   (!spare || w->last_used_ms < spare->last_used_ms)) {
            spare = w;
        }
    }
    if (spare && spare->state == W_READY && p->n_ready + p->n_starting > p->cfg.min_workers)
        mark_stopping(p, spare, wk);
    /* Demand: waiters beyond the free slots, less what is starting. */
    unsigned free_slots = 0;
    for (funcd_pool_worker *w = p->workers; w; w = w->next)
        if (w->state == W_READY)
            free_slots += p->cfg.concurrency - w->in_flight;
    unsigned conc = p->cfg.concurrency;
    unsigned demand = p->n_waiting > free_slots ? p->n_waiting - free_slots : 0;
    unsigned coming = p->n_starting * conc;
    unsigned need = demand > coming ? (demand - coming + conc - 1) / conc : 0;
    unsigned alive = p->n_ready + p->n_starting;
    if (alive + need < p->cfg.min_workers)
        need = p->cfg.min_workers - alive;
    if (alive + need > p->cfg.max_workers)
        need = p->cfg.max_workers > alive ? p->cfg.max_workers - alive : 0;
    if (now < p->backoff_until_ms)
        need = 0;
    p->budget_short = 0;
    p->place_coming = 0;
    for (unsigned i = 0; i < need && wk->n_start < 64; i++) {
        if (p->kept) {
            p->kept--; /* a place an exited worker left it, taken already */
        } else if (p->cfg.budget && !budget_take(p->cfg.budget, p)) {
            p->budget_short = need - i; /* woken when a place is given back */
            break;
        }
        funcd_pool_worker *w = calloc(1, sizeof(*w));
        if (!w) {
            if (p->cfg.budget)
                budget_put(p->cfg.budget, NULL);
            break;
        }
        if (p->cfg.budget)
            funcd_pool_budget_ref(w->budget = p->cfg.budget);
        w->pool = p;
        w->state = W_STARTING;
        w->replica = ++p->next_replica;
        w->started_ms = now;
        w->last_used_ms = now;
        atomic_init(&w->refs, 1);
        funcd_pool_ref(p);
        w->next = p->workers;
        p->workers = w;
        p->n_starting++;
        wk->start[wk->n_start++] = w;
    }
    wk->give_back = p->kept; /* not needed after all: anyone's */
    p->kept = 0;
}

static void unlist_locked(funcd_pool *p, funcd_pool_worker *w)
{
    for (funcd_pool_worker **pp = &p->workers; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    if (w->state == W_READY)
        p->n_ready--;
    else if (w->state == W_STARTING)
        p->n_starting--;
    else if (w->state == W_STOPPING)
        p->n_stopping--;
    w->state = W_GONE;
}

/* After start failures with nobody left to serve them, waiters would only
 * wait for a timeout: tell them why instead. */
static funcd_pool_waiter *fail_waiters_if_hopeless_locked(funcd_pool *p)
{
    if (p->failures == 0 || p->n_ready || p->n_starting)
        return NULL;
    return take_all_waiters(p);
}

/* No worker and no place for one: the waiters wait FUNCD_POOL_BUDGET_WAIT_MS
 * (an idle worker of the budget may give its place), or while a worker told
 * to stop holds a place of the full budget that comes to this pool at its
 * exit (its own evicted worker, an update's old version; review18 M-3, not
 * another pool's: review19 M-1) up to the start timeout, then are told which
 * limit. Patient waiters wait on. */
static funcd_pool_waiter *fail_waiters_if_no_place_locked(funcd_pool *p)
{
    if (!p->budget_short || p->n_ready || p->n_starting || !p->n_waiting) {
        p->short_since_ms = 0;
        return NULL;
    }
    int64_t now = now_ms(p);
    if (!p->short_since_ms)
        p->short_since_ms = now;
    uint64_t wait = FUNCD_POOL_BUDGET_WAIT_MS;
    if (p->place_coming && p->cfg.start_timeout_ms > wait)
        wait = p->cfg.start_timeout_ms;
    if (now - p->short_since_ms < (int64_t)wait)
        return NULL;
    p->short_since_ms = 0;
    funcd_pool_waiter *failed = NULL, **tail = &failed;
    for (funcd_pool_waiter *wt = p->waiters.next, *next; wt != &p->waiters; wt = next) {
        next = wt->next;
        if (wt->patient)
            continue;
        wt->prev->next = wt->next;
        wt->next->prev = wt->prev;
        wt->queued = 0;
        p->n_waiting--;
        wt->slot = NULL;
        wt->next = NULL;
        *tail = wt;
        tail = &wt->next;
    }
    return failed;
}

static void arm_timer(funcd_pool *p)
{
    struct timeval tv = {0, TIMER_MS * 1000};
    if (!p->closed && !evtimer_pending(p->timer, NULL))
        evtimer_add(p->timer, &tv);
}

static void run_plan(funcd_pool *p)
{
    work wk = {0};
    pthread_mutex_lock(&p->lock);
    if (p->closed) {
        pthread_mutex_unlock(&p->lock);
        return;
    }
    unsigned was_short = p->budget_short;
    plan_locked(p, &wk);
    int short_changed = p->budget_short != was_short; /* the status says it */
    funcd_pool_waiter *failed = fail_waiters_if_hopeless_locked(p);
    funcd_pool_waiter *no_place = failed ? NULL : fail_waiters_if_no_place_locked(p);
    int busy = p->workers || p->n_waiting;
    char error[600], limit[300];
    snprintf(error, sizeof(error), "the function failed to start: %s", p->last_error);
    snprintf(limit, sizeof(limit), FUNCD_POOL_NO_PLACE "%s", p->budget_limit);
    funcd_pool_budget *budget = p->cfg.budget; /* the loop's: no configure meanwhile */
    pthread_mutex_unlock(&p->lock);
    deliver(failed, error);
    deliver(no_place, limit);
    for (unsigned i = 0; i < wk.give_back; i++)
        budget_give(budget);

    for (unsigned i = 0; i < wk.n_stop; i++)
        p->ops.stop(p, wk.stop[i], p->ops.payload);
    for (unsigned i = 0; i < wk.n_start; i++)
        if (p->ops.start(p, wk.start[i], p->ops.payload) < 0) /* nothing runs: forget it */
            funcd_pool_worker_exited(wk.start[i], funcd_error_last()->message);
    if (busy)
        arm_timer(p);
    if (wk.n_start || wk.n_stop || short_changed)
        p->ops.changed(p, p->ops.payload);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    run_plan(arg);
}

void funcd_pool_worker_ready(funcd_pool_worker *w)
{
    funcd_pool *p = w->pool;
    pthread_mutex_lock(&p->lock);
    funcd_pool_waiter *granted = NULL;
    if (w->state == W_STARTING) {
        int64_t now = now_ms(p);
        w->state = W_READY;
        p->n_starting--;
        p->n_ready++;
        w->last_used_ms = now;
        p->failures = 0;
        p->backoff_until_ms = 0;
        p->last_cold_start_ms = funcd_now_ms();
        p->last_cold_start_millis = (double)(now - w->started_ms);
        granted = grant_locked(p);
    }
    pthread_mutex_unlock(&p->lock);
    deliver(granted, NULL);
    p->ops.changed(p, p->ops.payload);
}

static void note_failure_locked(funcd_pool *p, const char *why)
{
    snprintf(p->last_error, sizeof(p->last_error), "%s", why ? why : "unknown error");
    p->failures++;
    int64_t backoff = BACKOFF_MIN_MS;
    for (unsigned i = 1; i < p->failures && backoff < BACKOFF_MAX_MS; i++)
        backoff *= 2;
    p->backoff_until_ms = now_ms(p) + (backoff < BACKOFF_MAX_MS ? backoff : BACKOFF_MAX_MS);
}

void funcd_pool_worker_failed(funcd_pool_worker *w, const char *why)
{
    funcd_pool *p = w->pool;
    work wk = {0};
    pthread_mutex_lock(&p->lock);
    note_failure_locked(p, why);
    mark_stopping(p, w, &wk);
    funcd_pool_waiter *failed = fail_waiters_if_hopeless_locked(p);
    pthread_mutex_unlock(&p->lock);
    char error[600];
    snprintf(error, sizeof(error), "the function failed to start: %s", why ? why : "?");
    deliver(failed, error);
    for (unsigned i = 0; i < wk.n_stop; i++)
        p->ops.stop(p, wk.stop[i], p->ops.payload);
    pthread_mutex_lock(&p->lock);
    poke_locked(p);
    pthread_mutex_unlock(&p->lock);
}

void funcd_pool_worker_exited(funcd_pool_worker *w, const char *why)
{
    funcd_pool *p = w->pool;
    pthread_mutex_lock(&p->lock);
    if (w->state == W_STARTING)
        note_failure_locked(p, why);
    unlist_locked(p, w);
    funcd_pool_budget *budget = w->budget;
    w->budget = NULL;
    if (budget && w->leaving)
        for (funcd_pool_budget *b = budget; b; b = b->parent)
            atomic_fetch_sub(&b->leaving, 1);
    funcd_pool *leaving_for = w->leaving_for;
    w->leaving_for = NULL;
    if (leaving_for)
        atomic_fetch_sub(&leaving_for->leaving_for, 1);
    funcd_pool_waiter *failed = fail_waiters_if_hopeless_locked(p);
    poke_locked(p); /* replace it if there is demand or a minimum */
    pthread_mutex_unlock(&p->lock);
    if (budget) { /* its process is gone: its place is free, its pool's first */
        if (!pool_keep_place(p, budget))
            budget_give(budget);
        funcd_pool_budget_unref(budget);
    }
    char error[600];
    snprintf(error, sizeof(error), "the function failed to start: %s", why ? why : "?");
    deliver(failed, error);
    funcd_pool_unref(leaving_for);
    if (!p->closed)
        p->ops.changed(p, p->ops.payload);
    worker_unref(w);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    run_plan(arg);
}

int funcd_pool_new(funcd_pool **out, struct event_base *loop, const funcd_pool_config *cfg,
                   const funcd_pool_ops *ops)
{
    *out = NULL;
    funcd_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating a worker pool");
    pthread_mutex_init(&p->lock, NULL);
    atomic_init(&p->refs, 1);
    atomic_init(&p->leaving_for, 0);
    p->ops = *ops;
    p->loop = loop;
    p->waiters.next = p->waiters.prev = &p->waiters;
    p->tick = event_new(loop, -1, 0, on_tick, p);
    p->timer = evtimer_new(loop, on_timer, p);
    if (!p->tick || !p->timer) {
        if (p->tick)
            event_free(p->tick);
        if (p->timer)
            event_free(p->timer);
        pthread_mutex_destroy(&p->lock);
        free(p);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating a worker pool");
    }
    funcd_pool_configure(p, cfg);
    *out = p;
    return 0;
}

void funcd_pool_configure(funcd_pool *p, const funcd_pool_config *cfg)
{
    funcd_pool_config c = *cfg;
    if (c.max_workers == 0)
        c.max_workers = 1;
    if (c.concurrency == 0)
        c.concurrency = 1;
    if (c.min_workers > c.max_workers)
        c.min_workers = c.max_workers;
    if (c.budget)
        funcd_pool_budget_ref(c.budget);
    pthread_mutex_lock(&p->lock);
    if (memcmp(&c, &p->cfg, sizeof(c)) != 0) {
        /* A new configuration deserves a fresh start; the same one (every
         * reconcile passes it again) keeps the backoff of failed starts. */
        p->failures = 0;
        p->backoff_until_ms = 0;
    }
    funcd_pool_budget *old = p->cfg.budget;
    unsigned kept = 0;
    if (old != c.budget) { /* places kept for it are the old budget's */
        kept = p->kept;
        p->kept = 0;
    }
    p->cfg = c;
    funcd_pool_waiter *granted = grant_locked(p);
    poke_locked(p);
    pthread_mutex_unlock(&p->lock);
    deliver(granted, NULL);
    while (kept--)
        budget_give(old);
    /* Workers keep the budget they took from until they exit. */
    if (old && old != c.budget)
        budget_forget(old, p);
    funcd_pool_budget_unref(old);
}

void funcd_pool_close(funcd_pool *p, const char *reason)
{
    funcd_pool_close_for(p, NULL, reason);
}

void funcd_pool_close_for(funcd_pool *p, funcd_pool *heir, const char *reason)
{
    work wk = {0};
    if (heir)
        funcd_pool_ref(heir);
    pthread_mutex_lock(&p->lock);
    p->closed = 1;
    p->heir = heir;
    unsigned kept = p->kept; /* nobody here to start on them: the heir's, or anyone's */
    p->kept = 0;
    funcd_pool_waiter *failed = take_all_waiters(p);
    /* Workers already leaving (evicted) leave their places to the heir now. */
    for (funcd_pool_worker *w = p->workers; w; w = w->next)
        if (w->leaving_for == p) {
            atomic_fetch_sub(&p->leaving_for, 1);
            funcd_pool_unref(p); /* p's caller holds a reference: not the last */
            leave_for(w, heir);
        }
    for (funcd_pool_worker *w = p->workers; w; w = w->next)
        mark_stopping(p, w, &wk);
    /* Stop also those mark_stopping could not list (more than 64). */
    for (funcd_pool_worker *w = p->workers; w; w = w->next)
        if (!w->stop_called && wk.n_stop == 64) {
            w->stop_called = 1;
            p->ops.stop(p, w, p->ops.payload);
        }
    event_free(p->tick);
    event_free(p->timer);
    p->tick = p->timer = NULL;
    pthread_mutex_unlock(&p->lock);
    deliver(failed, reason);
    for (unsigned i = 0; i < wk.n_stop; i++)
        p->ops.stop(p, wk.stop[i], p->ops.payload);
    if (p->cfg.budget) /* the list's reference would keep it for ever */
        budget_forget(p->cfg.budget, p);
    while (kept--)
        if (!pool_keep_place(p, p->cfg.budget))
            budget_give(p->cfg.budget);
    funcd_pool_unref(p);
}
