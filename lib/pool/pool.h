/*
 * Worker pools: the one mechanism behind both front doors (HTTP functions
 * through the gateway, KRM function images through the function runner).
 *
 * A pool keeps 0..max workers for one key. Requests take a slot on the
 * least-loaded ready worker (round-robin among ties) without leaving their
 * thread; when every worker is at its concurrency they wait in a bounded
 * queue while the pool starts more workers, up to max. Workers idle for
 * longer than the idle TTL (every use extends it) are stopped down to min.
 * A worker that fails is evicted and replaced when there is demand.
 *
 * How a worker is started, probed and stopped is the front door's business
 * (funcd_pool_ops); the pool only decides when.
 *
 * Threads: funcd_pool_new/configure/close and the worker_* state calls run
 * on the platform loop; acquire/release/cancel may run on any thread;
 * waiters' `granted` callbacks run on whichever thread freed the slot.
 * Those threads wake the loop with event_active, so libevent's threading
 * must be on before the loop's base is made (evthread_use_pthreads; the
 * platform does it): without it the base's queue of active events is
 * raced and can loop for ever.
 */
#ifndef FUNCD_POOL_POOL_H
#define FUNCD_POOL_POOL_H

#include <event2/event.h>
#include <stdint.h>

typedef struct funcd_pool funcd_pool;
typedef struct funcd_pool_worker funcd_pool_worker;
typedef struct funcd_pool_waiter funcd_pool_waiter;

/*
 * A budget of places for workers, shared by pools (a namespace's pools, the
 * node's). Each worker a pool starts first takes a place from its budget
 * and from every parent up the chain; with no place it is not started (the
 * pool says so, see funcd_pool_stats.budget_short) and the pool is woken to
 * plan again when a place is given back anywhere in its chain. A worker
 * gives its places back once its process has exited (a stopping worker
 * still holds them). Any thread; reference counted.
 */
typedef struct funcd_pool_budget funcd_pool_budget;

/* `limit` 0: none. `what` names the budget in messages ("namespace dev"),
 * `flag` the setting of its limit ("funcd --namespace-max-workers"). A
 * parent is referenced for as long as the budget lives. NULL: out of memory. */
funcd_pool_budget *funcd_pool_budget_new(unsigned limit, funcd_pool_budget *parent,
                                         const char *what, const char *flag);
void funcd_pool_budget_ref(funcd_pool_budget *b);
void funcd_pool_budget_unref(funcd_pool_budget *b);
/* Places taken now (live worker processes charged to this budget). */
unsigned funcd_pool_budget_taken(funcd_pool_budget *b);

/* The start of the `error` of waiters failed because no place was left in
 * their pool's budget chain (a gateway answers 503, not 502); the rest
 * names the limit and its flag, never a count (anyone may read it: the
 * counts are in funcd_pool_stats.budget_error). */
#define FUNCD_POOL_NO_PLACE "worker limit reached: "
/* A pool with no worker and no place keeps its waiters this long (a worker
 * of its budget may give a place back) before failing them; while a worker
 * told to stop still holds a place of the full budget (it comes back at its
 * exit), up to the pool's start timeout instead. */
#define FUNCD_POOL_BUDGET_WAIT_MS 3000
/* While a pool of its budget chain waits for a place, a worker idle this
 * long above its pool's minimum is stopped to give its place (one a plan). */
#define FUNCD_POOL_PRESSED_IDLE_MS 1000

typedef struct funcd_pool_config {
    unsigned min_workers;
    unsigned max_workers;      /* >= 1 */
    unsigned concurrency;      /* requests per worker, >= 1 */
    unsigned queue_length;     /* waiters beyond this are refused */
    uint64_t idle_ms;          /* stop workers idle this long; 0: never */
    uint64_t start_timeout_ms; /* a worker not ready by then has failed */
    funcd_pool_budget *budget; /* places for workers; NULL: none (the pool refs it) */
} funcd_pool_config;

typedef struct funcd_pool_ops {
    /* Start worker `w` (its index in funcd_pool_worker_replica). Report the
     * outcome later with funcd_pool_worker_ready / _failed. Non-zero: the
     * start failed at once (the message is in funcd_error_last()). */
    int (*start)(funcd_pool *p, funcd_pool_worker *w, void *payload);
    /* Stop worker `w`; report its end with funcd_pool_worker_exited. */
    void (*stop)(funcd_pool *p, funcd_pool_worker *w, void *payload);
    /* Releases the front door's data of a worker that is gone for good.
     * Runs on the thread that drops the last reference. */
    void (*dispose)(funcd_pool_worker *w, void *payload);
    /* Replica counts or the last cold start changed (on the loop). */
    void (*changed)(funcd_pool *p, void *payload);
    void *payload;
    /* The monotonic clock in ms the pool decides by (idle TTL, start
     * timeouts, backoff); NULL: the system's. Tests pass their own. */
    int64_t (*now_ms)(void *payload);
} funcd_pool_ops;

/* A request waiting for a slot. `granted` gets the worker (slot taken) or
 * NULL with an error message when no worker could be started. */
struct funcd_pool_waiter {
    void (*granted)(funcd_pool_waiter *wt, funcd_pool_worker *w, const char *error);
    /* Set before acquire (0: a request): never failed for want of a place,
     * it waits for one however long (only a closed pool or failed starts
     * fail it). */
    int patient;
    /* private */
    int queued;
    funcd_pool_waiter *prev, *next;
    funcd_pool_worker *slot;
};

typedef struct funcd_pool_stats {
    unsigned ready;
    unsigned starting, stopping;
    unsigned total; /* ready + starting + stopping */
    unsigned waiting;
    unsigned in_flight; /* requests being served now */
    int64_t last_cold_start_ms;    /* wall clock; 0: none yet */
    double last_cold_start_millis; /* duration */
    unsigned failures;             /* consecutive start failures (0 after a success) */
    char last_error[512];          /* why the last start failed */
    unsigned budget_short;         /* workers wanted but not started: no place in the budget */
    char budget_error[256];        /* which limit, when budget_short */
} funcd_pool_stats;

int funcd_pool_new(funcd_pool **out, struct event_base *loop, const funcd_pool_config *cfg,
                   const funcd_pool_ops *ops);
/* New limits; takes effect at once (scales up or down as needed). */
void funcd_pool_configure(funcd_pool *p, const funcd_pool_config *cfg);
/* Stops every worker, fails every waiter with `reason`, and drops the
 * loop's reference. The pool is freed when the last reference goes. */
void funcd_pool_close(funcd_pool *p, const char *reason);
/* funcd_pool_close for a pool that `heir` replaces (a new version of the
 * same function, on the same budget): as its workers exit, their places go
 * to `heir` first while it waits for places, not to any pool of the budget
 * (a worker exiting from an open pool gives its place to that pool first
 * the same way). `heir` is referenced until `p` is freed. */
void funcd_pool_close_for(funcd_pool *p, funcd_pool *heir, const char *reason);

void funcd_pool_ref(funcd_pool *p);
void funcd_pool_unref(funcd_pool *p);

/* What funcd_pool_acquire did. Non-negative, so never taken for a FUNCD_E*
 * code; the public slot API (funcd/sys/gateway.h) has the same four. */
typedef enum funcd_pool_outcome {
    FUNCD_POOL_GRANTED = 0, /* `*out` holds a slot */
    FUNCD_POOL_QUEUED = 1,  /* `wt` is queued and will be granted (or failed) */
    FUNCD_POOL_FULL = 2,    /* the queue is full (answer 503) */
    FUNCD_POOL_CLOSED = 3,  /* the pool is closed */
} funcd_pool_outcome;

funcd_pool_outcome funcd_pool_acquire(funcd_pool *p, funcd_pool_waiter *wt,
                                      funcd_pool_worker **out);
/* 1 if `wt` was still queued (now removed); 0 if a grant is on its way or
 * was delivered: the caller must release that slot when it arrives. */
int funcd_pool_cancel(funcd_pool *p, funcd_pool_waiter *wt);
/* Gives a slot back; `failed` evicts the worker (it could not be reached). */
void funcd_pool_release(funcd_pool *p, funcd_pool_worker *w, int failed);

void funcd_pool_stats_get(funcd_pool *p, funcd_pool_stats *out);

/* Front-door data per worker (e.g. its socket address and connection pool). */
void funcd_pool_worker_set_data(funcd_pool_worker *w, void *data);
void *funcd_pool_worker_data(const funcd_pool_worker *w);
unsigned funcd_pool_worker_replica(const funcd_pool_worker *w);
funcd_pool *funcd_pool_worker_pool(const funcd_pool_worker *w);

/* Loop thread: the worker started by ops->start is ready, failed to
 * start, or (after ops->stop or by itself) exited. */
void funcd_pool_worker_ready(funcd_pool_worker *w);
void funcd_pool_worker_failed(funcd_pool_worker *w, const char *why);
void funcd_pool_worker_exited(funcd_pool_worker *w, const char *why);

#endif
