/*
 * lib/pool on its own, with fake front-door hooks: no process is started,
 * the test says when a worker is ready, failed or gone, and the pool's
 * clock is the test's (funcd_pool_ops.now_ms), so idle TTLs and backoffs
 * are decided without sleeping. The loop runs only when the test turns it.
 */
#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "funcd/sys/error.h"
#include "harness.h"
#include "pool/pool.h"

/* What the front door knows of a worker. */
typedef struct fake {
    funcd_pool_worker *pw;
    atomic_int stopped; /* ops->stop was called */
    atomic_int in_use;  /* slots the test holds on it */
    int exited;   /* reported to the pool (by the loop thread) */
    int disposed; /* the pool let go of it */
} fake;

typedef struct bench {
    struct event_base *loop;
    funcd_pool *pool;
    int64_t now;
    fake **fakes; /* every worker started, in order; touched by the loop thread only */
    unsigned n_fakes, cap_fakes;
    unsigned starts, stops, changes;
    int fail_start; /* start returns -1 */
    int closed;     /* the test closed the pool itself */
    atomic_int bad; /* a slot granted on a stopped worker, or a busy worker stopped */
} bench;

static int fake_start(funcd_pool *p, funcd_pool_worker *w, void *payload)
{
    bench *b = payload;
    b->starts++;
    if (b->fail_start)
        return funcd_error_set(FUNCD_EIO, "cannot start: the test says so");
    fake *f = calloc(1, sizeof(*f));
    if (!f)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory");
    if (b->n_fakes == b->cap_fakes) {
        unsigned cap = b->cap_fakes ? 2 * b->cap_fakes : 64;
        fake **v = realloc(b->fakes, cap * sizeof(*v));
        if (!v) {
            free(f);
            return funcd_error_set(FUNCD_ENOMEM, "out of memory");
        }
        b->fakes = v;
        b->cap_fakes = cap;
    }
    f->pw = w;
    funcd_pool_worker_set_data(w, f);
    b->fakes[b->n_fakes++] = f;
    return 0;
}

static void fake_stop(funcd_pool *p, funcd_pool_worker *w, void *payload)
{
    bench *b = payload;
    fake *f = funcd_pool_worker_data(w);
    b->stops++;
    if (atomic_load(&f->in_use))
        atomic_fetch_add(&b->bad, 1); /* a worker stopped while a request holds it */
    atomic_store(&f->stopped, 1);
}

/* Any thread (the last reference may be a released slot): the fake stays
 * until the test ends, so the loop thread may still look at it. */
static void fake_dispose(funcd_pool_worker *w, void *payload)
{
    fake *f = funcd_pool_worker_data(w);
    if (f)
        f->disposed = 1;
}

static void fake_changed(funcd_pool *p, void *payload)
{
    ((bench *)payload)->changes++;
}

static int64_t fake_now(void *payload)
{
    return ((bench *)payload)->now;
}

static void turn(bench *b)
{
    for (int i = 0; i < 4; i++)
        event_base_loop(b->loop, EVLOOP_NONBLOCK);
}

/* Makes the pool plan now (as its timer would). */
static void plan(bench *b, const funcd_pool_config *cfg)
{
    funcd_pool_configure(b->pool, cfg);
    turn(b);
}

static int bench_up(bench *b, const funcd_pool_config *cfg)
{
    memset(b, 0, sizeof(*b));
    b->now = 1000000;
    b->loop = event_base_new();
    funcd_pool_ops ops = {fake_start, fake_stop, fake_dispose, fake_changed, b, fake_now};
    if (!b->loop || funcd_pool_new(&b->pool, b->loop, cfg, &ops) < 0)
        return -1;
    turn(b);
    return 0;
}

/* The fake of the i-th worker started. */
static fake *nth(bench *b, unsigned i)
{
    return i < b->n_fakes ? b->fakes[i] : NULL;
}

/* Reports every stopped worker as exited. */
static void reap(bench *b)
{
    for (unsigned i = 0; i < b->n_fakes; i++) {
        fake *f = b->fakes[i];
        if (atomic_load(&f->stopped) && !f->exited) {
            f->exited = 1;
            funcd_pool_worker_exited(f->pw, "stopped");
        }
    }
    turn(b);
}

static void bench_down(bench *b)
{
    if (!b->closed)
        funcd_pool_close(b->pool, "the test ended");
    reap(b);
    event_base_free(b->loop);
    for (unsigned i = 0; i < b->n_fakes; i++) {
        if (!b->fakes[i]->disposed)
            fprintf(stderr, "  worker %u was never let go\n", i);
        free(b->fakes[i]);
    }
    free(b->fakes);
}

static funcd_pool_stats stats(bench *b)
{
    funcd_pool_stats st;
    funcd_pool_stats_get(b->pool, &st);
    return st;
}

/* A waiter that records its grant. */
typedef struct rec {
    funcd_pool_waiter wt; /* first */
    atomic_int calls;
    funcd_pool_worker *w;
    char error[600];
} rec;

static void on_grant(funcd_pool_waiter *wt, funcd_pool_worker *w, const char *error)
{
    rec *r = (rec *)wt;
    r->w = w;
    snprintf(r->error, sizeof(r->error), "%s", error ? error : "");
    atomic_fetch_add(&r->calls, 1);
}

/* ---- tests ---------------------------------------------------------------- */

/* minReplicas workers are started at once and kept through idleness;
 * lowering the minimum lets idle ones go. */
TEST(min_replicas_kept)
{
    funcd_pool_config cfg = {.min_workers = 2, .max_workers = 4, .concurrency = 1,
                             .queue_length = 10, .idle_ms = 1000, .start_timeout_ms = 10000};
    bench b;
    CHECK(bench_up(&b, &cfg) == 0);
    CHECK_INT(b.starts, 2);
    funcd_pool_worker_ready(nth(&b, 0)->pw);
    funcd_pool_worker_ready(nth(&b, 1)->pw);
    CHECK_INT(stats(&b).ready, 2);
    b.now += 60000; /* long idle */
    plan(&b, &cfg);
    CHECK_INT(b.stops, 0);
    CHECK_INT(stats(&b).total, 2);
    cfg.min_workers = 1;
    plan(&b, &cfg);
    CHECK_INT(b.stops, 1);
    reap(&b);
    CHECK_INT(stats(&b).total, 1);
    /* A minimum worker that dies is replaced without demand. */
    fake *left = atomic_load(&nth(&b, 0)->stopped) ? nth(&b, 1) : nth(&b, 0);
    left->exited = 1;
    funcd_pool_worker_exited(left->pw, "crashed");
    turn(&b);
    CHECK_INT(b.starts, 3);
    bench_down(&b);
}

/* Every use restarts the idle TTL: a worker used within it is kept. */
TEST(idle_ttl_extended_by_use)
{
    funcd_pool_config cfg = {.min_workers = 0, .max_workers = 1, .concurrency = 2,
                             .queue_length = 10, .idle_ms = 1000, .start_timeout_ms = 10000};
    bench b;
    CHECK(bench_up(&b, &cfg) == 0);
    rec r = {.wt.granted = on_grant};
    funcd_pool_worker *w = NULL;
    CHECK_INT(funcd_pool_acquire(b.pool, &r.wt, &w), FUNCD_POOL_QUEUED); /* cold */
    turn(&b);
    CHECK_INT(b.starts, 1);
    funcd_pool_worker_ready(nth(&b, 0)->pw);
    CHECK_INT(atomic_load(&r.calls), 1);
    CHECK(r.w == nth(&b, 0)->pw);
    funcd_pool_release(b.pool, r.w, 0);
    for (int i = 0; i < 5; i++) { /* used every 900 ms for 4.5 s */
        b.now += 900;
        plan(&b, &cfg);
        CHECK_INT(b.stops, 0);
        CHECK_INT(funcd_pool_acquire(b.pool, &r.wt, &w), FUNCD_POOL_GRANTED);
        funcd_pool_release(b.pool, w, 0);
    }
    b.now += 999;
    plan(&b, &cfg);
    CHECK_INT(b.stops, 0);
    b.now += 1;
    plan(&b, &cfg);
    CHECK_INT(b.stops, 1); /* idle for exactly the TTL: stopped */
    reap(&b);
    CHECK_INT(stats(&b).total, 0);
    bench_down(&b);
}

/* A worker a request holds is never stopped for idleness, however long it
 * is held; a worker the pool decided to stop gets no new request: the
 * next one waits for a new worker. */
TEST(no_slot_on_a_stopping_worker)
{
    funcd_pool_config cfg = {.min_workers = 0, .max_workers = 2, .concurrency = 1,
                             .queue_length = 10, .idle_ms = 100, .start_timeout_ms = 10000};
    bench b;
    CHECK(bench_up(&b, &cfg) == 0);
    rec r = {.wt.granted = on_grant};
    funcd_pool_worker *w = NULL;
    CHECK_INT(funcd_pool_acquire(b.pool, &r.wt, &w), FUNCD_POOL_QUEUED);
    turn(&b);
    fake *first = nth(&b, 0);
    funcd_pool_worker_ready(first->pw);
    CHECK(r.w == first->pw);
    b.now += 10000; /* held far beyond the TTL */
    plan(&b, &cfg);
    CHECK_INT(b.stops, 0);
    funcd_pool_release(b.pool, r.w, 0);
    b.now += 100;
    plan(&b, &cfg);
    CHECK_INT(b.stops, 1);
    CHECK(atomic_load(&first->stopped));
    /* Still listed (stopping) until it exits; a request now must not get it. */
    rec r2 = {.wt.granted = on_grant};
    CHECK_INT(funcd_pool_acquire(b.pool, &r2.wt, &w), FUNCD_POOL_QUEUED);
    turn(&b);
    CHECK_INT(b.starts, 2);
    funcd_pool_worker_ready(nth(&b, 1)->pw);
    CHECK_INT(atomic_load(&r2.calls), 1);
    CHECK(r2.w == nth(&b, 1)->pw);
    funcd_pool_release(b.pool, r2.w, 0);
    CHECK_INT(atomic_load(&b.bad), 0);
    bench_down(&b);
}

/* cancel says whether the waiter was still queued; a grant on its way
 * must be released by the canceller, and a cancelled waiter gets none. */
TEST(grant_and_cancel)
{
    funcd_pool_config cfg = {.min_workers = 0, .max_workers = 1, .concurrency = 1,
                             .queue_length = 10, .idle_ms = 0, .start_timeout_ms = 10000};
    bench b;
    CHECK(bench_up(&b, &cfg) == 0);
    rec gone = {.wt.granted = on_grant}, kept = {.wt.granted = on_grant};
    funcd_pool_worker *w = NULL;
    CHECK_INT(funcd_pool_acquire(b.pool, &gone.wt, &w), FUNCD_POOL_QUEUED);
    CHECK_INT(funcd_pool_acquire(b.pool, &kept.wt, &w), FUNCD_POOL_QUEUED);
    CHECK_INT(stats(&b).waiting, 2);
    CHECK_INT(funcd_pool_cancel(b.pool, &gone.wt), 1); /* still queued: removed */
    CHECK_INT(stats(&b).waiting, 1);
    turn(&b);
    funcd_pool_worker_ready(nth(&b, 0)->pw);
    CHECK_INT(atomic_load(&gone.calls), 0);
    CHECK_INT(atomic_load(&kept.calls), 1);
    CHECK_INT(funcd_pool_cancel(b.pool, &kept.wt), 0); /* granted: the slot is the caller's */
    CHECK_INT(stats(&b).in_flight, 1);
    funcd_pool_release(b.pool, kept.w, 0);
    CHECK_INT(stats(&b).in_flight, 0);
    bench_down(&b);
}

/* Waiters beyond queue_length are refused (the gateway answers 503);
 * those queued are served in order as slots free up. */
TEST(queue_overflow)
{
    funcd_pool_config cfg = {.min_workers = 0, .max_workers = 1, .concurrency = 1,
                             .queue_length = 2, .idle_ms = 0, .start_timeout_ms = 10000};
    bench b;
    CHECK(bench_up(&b, &cfg) == 0);
    rec r[3] = {{.wt.granted = on_grant}, {.wt.granted = on_grant}, {.wt.granted = on_grant}};
    funcd_pool_worker *w = NULL;
    CHECK_INT(funcd_pool_acquire(b.pool, &r[0].wt, &w), FUNCD_POOL_QUEUED);
    CHECK_INT(funcd_pool_acquire(b.pool, &r[1].wt, &w), FUNCD_POOL_QUEUED);
    CHECK_INT(funcd_pool_acquire(b.pool, &r[2].wt, &w), FUNCD_POOL_FULL);
    turn(&b);
    CHECK_INT(b.starts, 1); /* max 1 */
    funcd_pool_worker_ready(nth(&b, 0)->pw);
    CHECK_INT(atomic_load(&r[0].calls), 1);
    CHECK_INT(atomic_load(&r[1].calls), 0);
    funcd_pool_release(b.pool, r[0].w, 0);
    CHECK_INT(atomic_load(&r[1].calls), 1);
    funcd_pool_release(b.pool, r[1].w, 0);
    funcd_pool_close(b.pool, "closed");
    b.closed = 1;
    CHECK_INT(funcd_pool_acquire(b.pool, &r[2].wt, &w), FUNCD_POOL_CLOSED);
    bench_down(&b);
}

/* Failed starts: the waiters are told why, and each next try waits
 * twice as long as the one before (50 ms, 100 ms, 200 ms, ...); a start
 * that succeeds clears the backoff. */
TEST(start_failure_backoff)
{
    funcd_pool_config cfg = {.min_workers = 0, .max_workers = 1, .concurrency = 1,
                             .queue_length = 10, .idle_ms = 0, .start_timeout_ms = 10000};
    bench b;
    CHECK(bench_up(&b, &cfg) == 0);
    rec r = {.wt.granted = on_grant};
    funcd_pool_worker *w = NULL;
    CHECK_INT(funcd_pool_acquire(b.pool, &r.wt, &w), FUNCD_POOL_QUEUED);
    turn(&b);
    CHECK_INT(b.starts, 1);
    funcd_pool_worker_failed(nth(&b, 0)->pw, "exec: no such file");
    CHECK_INT(atomic_load(&r.calls), 1); /* nobody left to serve it: told why */
    CHECK(r.w == NULL);
    CHECK_CONTAINS(r.error, "exec: no such file");
    reap(&b);
    CHECK_INT(stats(&b).failures, 1);
    int64_t wait = 50;
    for (int i = 0; i < 4; i++) {
        /* Within the backoff: no start, and a request is told why at once. */
        rec early = {.wt.granted = on_grant};
        b.now += wait - 1;
        CHECK_INT(funcd_pool_acquire(b.pool, &early.wt, &w), FUNCD_POOL_QUEUED);
        turn(&b);
        CHECK_INT(b.starts, 1 + (unsigned)i);
        CHECK_INT(atomic_load(&early.calls), 1);
        CHECK(early.w == NULL);
        CHECK_CONTAINS(early.error, i ? "exit 3" : "exec: no such file");
        /* After it: a new start. */
        rec q = {.wt.granted = on_grant};
        b.now += 1;
        CHECK_INT(funcd_pool_acquire(b.pool, &q.wt, &w), FUNCD_POOL_QUEUED);
        turn(&b);
        CHECK_INT(b.starts, 2 + (unsigned)i);
        CHECK_INT(atomic_load(&q.calls), 0);
        funcd_pool_worker_failed(nth(&b, b.n_fakes - 1)->pw, "exit 3");
        CHECK_INT(atomic_load(&q.calls), 1);
        CHECK(q.w == NULL);
        reap(&b);
        wait *= 2;
    }
    CHECK_INT(stats(&b).failures, 5);
    CHECK_CONTAINS(stats(&b).last_error, "exit 3");
    /* A start that fails at once (ops->start < 0) counts the same. */
    b.fail_start = 1;
    b.now += wait;
    rec q = {.wt.granted = on_grant};
    CHECK_INT(funcd_pool_acquire(b.pool, &q.wt, &w), FUNCD_POOL_QUEUED);
    turn(&b);
    CHECK_INT(atomic_load(&q.calls), 1);
    CHECK_INT(stats(&b).failures, 6);
    /* Success resets it. */
    b.fail_start = 0;
    b.now += 20000;
    rec ok = {.wt.granted = on_grant};
    CHECK_INT(funcd_pool_acquire(b.pool, &ok.wt, &w), FUNCD_POOL_QUEUED);
    turn(&b);
    funcd_pool_worker_ready(nth(&b, b.n_fakes - 1)->pw);
    CHECK_INT(atomic_load(&ok.calls), 1);
    CHECK(ok.w != NULL);
    CHECK_INT(stats(&b).failures, 0);
    funcd_pool_release(b.pool, ok.w, 0);
    bench_down(&b);
}

/* ---- the race: requests on many threads, reaping on the loop ----------- */

#define RACE_THREADS 4

typedef struct racer {
    bench *b;
    pthread_t thread;
    atomic_int *stop;
    unsigned granted, cancelled, refused;
} racer;

typedef struct race_wait {
    funcd_pool_waiter wt; /* first */
    bench *b;
    atomic_int done;
    funcd_pool_worker *w;
} race_wait;

static void use(bench *b, funcd_pool_worker *w)
{
    fake *f = funcd_pool_worker_data(w);
    atomic_fetch_add(&f->in_use, 1);
    if (atomic_load(&f->stopped))
        atomic_fetch_add(&b->bad, 1); /* granted a slot on a worker it decided to stop */
    atomic_fetch_sub(&f->in_use, 1);
}

static void on_race_grant(funcd_pool_waiter *wt, funcd_pool_worker *w, const char *error)
{
    race_wait *rw = (race_wait *)wt;
    rw->w = w;
    atomic_store(&rw->done, 1);
}

static void *race_main(void *arg)
{
    racer *r = arg;
    bench *b = r->b;
    for (unsigned i = 0; !atomic_load(r->stop); i++) {
        if (i % 8 == 0)
            sched_yield(); /* let the pool go idle now and then */
        race_wait rw = {.wt.granted = on_race_grant, .b = b};
        funcd_pool_worker *w = NULL;
        funcd_pool_outcome rc = funcd_pool_acquire(b->pool, &rw.wt, &w);
        if (rc == FUNCD_POOL_GRANTED) {
            use(b, w);
            funcd_pool_release(b->pool, w, 0);
            r->granted++;
        } else if (rc == FUNCD_POOL_QUEUED) {
            if (i % 3 == 0 && funcd_pool_cancel(b->pool, &rw.wt)) {
                r->cancelled++;
                continue;
            }
            while (!atomic_load(&rw.done) && !atomic_load(r->stop))
                sched_yield();
            if (!atomic_load(&rw.done)) { /* the test ends: let it go */
                if (!funcd_pool_cancel(b->pool, &rw.wt)) {
                    while (!atomic_load(&rw.done))
                        sched_yield();
                    if (rw.w)
                        funcd_pool_release(b->pool, rw.w, 0);
                }
                break;
            }
            if (rw.w) {
                use(b, rw.w);
                funcd_pool_release(b->pool, rw.w, 0);
                r->granted++;
            }
        } else {
            r->refused++;
        }
    }
    return NULL;
}

/*
 * Threads acquire, cancel and release as fast as they can while the loop
 * reaps idle workers (the TTL is 0 ms of the test's clock, which moves
 * ahead all the time), starts new ones and reports them ready and gone.
 * Never is a slot granted on a worker the pool stopped, nor a worker stopped
 * while a slot on it is held; at the end nothing is in flight or waiting.
 */
TEST(grant_cancel_reap_race)
{
    funcd_pool_config cfg = {.min_workers = 0, .max_workers = 3, .concurrency = 2,
                             .queue_length = 1000, .idle_ms = 1, .start_timeout_ms = 100000};
    bench b;
    CHECK(bench_up(&b, &cfg) == 0);
    atomic_int stop = 0;
    racer rs[RACE_THREADS];
    for (int i = 0; i < RACE_THREADS; i++) {
        rs[i] = (racer){.b = &b, .stop = &stop};
        CHECK(pthread_create(&rs[i].thread, NULL, race_main, &rs[i]) == 0);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int spin = 0;; spin++) { /* for one second of real time */
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if ((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 >= 1000)
            break;
        b.now += 2;
        plan(&b, &cfg);
        for (unsigned i = 0; i < b.n_fakes; i++) {
            fake *f = b.fakes[i];
            if (!f->exited && spin % 2) /* listed until it exits: pw is alive */
                funcd_pool_worker_ready(f->pw); /* no-op unless starting */
        }
        reap(&b);
    }
    atomic_store(&stop, 1);
    unsigned granted = 0, cancelled = 0;
    for (int i = 0; i < RACE_THREADS; i++) {
        while (pthread_tryjoin_np(rs[i].thread, NULL) != 0) {
            for (unsigned k = 0; k < b.n_fakes; k++)
                if (!b.fakes[k]->exited)
                    funcd_pool_worker_ready(b.fakes[k]->pw);
            turn(&b);
            sched_yield();
        }
        granted += rs[i].granted;
        cancelled += rs[i].cancelled;
    }
    fprintf(stderr, "  %u slots granted, %u waits cancelled, %u workers started, %u stopped\n",
            granted, cancelled, b.starts, b.stops);
    CHECK_INT(atomic_load(&b.bad), 0);
    CHECK(granted > 0);
    CHECK(b.stops > 0); /* the reaper did race the requests */
    CHECK_INT(stats(&b).in_flight, 0);
    CHECK_INT(stats(&b).waiting, 0);
    bench_down(&b);
}

/* Pools sharing a budget start only as many workers as it has places: two
 * pools of minimum 2 under a budget of 3 get 3; the one left short says
 * which limit, its waiters queue while it has a worker, and it reaches its
 * 2 without polling once the other's workers have exited (stopping ones
 * still hold their places). A pool with no worker and no place fails its
 * waiters at once; a pool moved to another budget leaks no place. */
TEST(budget_shared_by_pools)
{
    funcd_pool_budget *node = funcd_pool_budget_new(0, NULL, "this node", "funcd --max-workers");
    funcd_pool_budget *ns =
        funcd_pool_budget_new(3, node, "namespace t", "funcd --namespace-max-workers");
    CHECK(node && ns);
    funcd_pool_config cfg = {.min_workers = 2, .max_workers = 4, .concurrency = 1,
                             .queue_length = 10, .idle_ms = 0, .start_timeout_ms = 10000,
                             .budget = ns};
    bench a, b, c, d;
    CHECK(bench_up(&a, &cfg) == 0);
    CHECK(bench_up(&b, &cfg) == 0);
    CHECK_INT(a.starts, 2);
    CHECK_INT(b.starts, 1); /* only 3 places */
    CHECK_INT(funcd_pool_budget_taken(ns), 3);
    CHECK_INT(funcd_pool_budget_taken(node), 3);
    CHECK_INT(stats(&b).budget_short, 1);
    CHECK_CONTAINS(stats(&b).budget_error,
                   "namespace t has 3 workers, its limit (funcd --namespace-max-workers 3)");
    /* b has a worker coming: its waiter queues as usual. */
    rec rb = {.wt.granted = on_grant};
    funcd_pool_worker *w = NULL;
    CHECK_INT(funcd_pool_acquire(b.pool, &rb.wt, &w), FUNCD_POOL_QUEUED);
    turn(&b);
    CHECK_INT(atomic_load(&rb.calls), 0);
    funcd_pool_worker_ready(nth(&b, 0)->pw);
    CHECK_INT(atomic_load(&rb.calls), 1);
    CHECK(rb.w == nth(&b, 0)->pw);
    funcd_pool_release(b.pool, rb.w, 0);
    /* c has no worker and no place, and no worker of the namespace is idle
     * above its minimum: its waiter waits FUNCD_POOL_BUDGET_WAIT_MS for one
     * to give its place back, then is told why. */
    funcd_pool_config none = cfg;
    none.min_workers = 0;
    CHECK(bench_up(&c, &none) == 0);
    rec rc = {.wt.granted = on_grant};
    CHECK_INT(funcd_pool_acquire(c.pool, &rc.wt, &w), FUNCD_POOL_QUEUED);
    turn(&c);
    CHECK_INT(c.starts, 0);
    CHECK_INT(atomic_load(&rc.calls), 0);
    c.now += FUNCD_POOL_BUDGET_WAIT_MS;
    plan(&c, &none);
    CHECK_INT(atomic_load(&rc.calls), 1);
    CHECK(rc.w == NULL);
    /* The limit's name, no count: a caller may be anyone (review18 L-3). */
    CHECK_CONTAINS(rc.error, FUNCD_POOL_NO_PLACE
                   "the worker limit of namespace t (funcd --namespace-max-workers)");
    CHECK(strpbrk(rc.error, "0123456789") == NULL);
    /* d wants a minimum of 1 and has nothing: no timer, no request; only
     * a place given back wakes it. */
    funcd_pool_config one = cfg;
    one.min_workers = 1;
    CHECK(bench_up(&d, &one) == 0);
    CHECK_INT(d.starts, 0);
    CHECK_INT(stats(&d).budget_short, 1);
    /* a's workers stop: their places come back only once they exited. */
    funcd_pool_close(a.pool, "the test moves on");
    a.closed = 1;
    turn(&a);
    turn(&b);
    CHECK_INT(b.starts, 1);
    CHECK_INT(funcd_pool_budget_taken(ns), 3);
    reap(&a);
    turn(&b);
    turn(&d);
    CHECK_INT(b.starts, 2); /* woken by the places given back */
    CHECK_INT(d.starts, 1);
    CHECK_INT(stats(&b).budget_short, 0);
    CHECK_INT(stats(&d).budget_short, 0);
    CHECK_INT(funcd_pool_budget_taken(ns), 3);
    bench_down(&d);
    CHECK_INT(funcd_pool_budget_taken(ns), 2);
    /* Moved to another budget: b's workers keep their places where they
     * took them until they exit; none is lost. */
    funcd_pool_budget *other = funcd_pool_budget_new(5, node, "namespace u", "x");
    CHECK(other);
    cfg.budget = other;
    plan(&b, &cfg);
    CHECK_INT(funcd_pool_budget_taken(ns), 2);
    CHECK_INT(funcd_pool_budget_taken(other), 0);
    bench_down(&a);
    bench_down(&b);
    bench_down(&c);
    CHECK_INT(funcd_pool_budget_taken(ns), 0);
    CHECK_INT(funcd_pool_budget_taken(other), 0);
    CHECK_INT(funcd_pool_budget_taken(node), 0);
    funcd_pool_budget_unref(other);
    funcd_pool_budget_unref(ns);
    funcd_pool_budget_unref(node);
}

/* A worker idle above its pool's minimum gives its place to a pool that
 * has none (review18 M-4: it kept it for its whole idle time, 5 minutes by
 * default, while the other pool's requests failed at once). */
TEST(budget_idle_worker_gives_its_place)
{
    funcd_pool_budget *ns = funcd_pool_budget_new(1, NULL, "namespace t", "x");
    CHECK(ns != NULL);
    funcd_pool_config cfg = {.min_workers = 0, .max_workers = 2, .concurrency = 1,
                             .queue_length = 10, .idle_ms = 300000, .start_timeout_ms = 10000,
                             .budget = ns};
    bench a, b;
    CHECK(bench_up(&a, &cfg) == 0);
    CHECK(bench_up(&b, &cfg) == 0);
    rec ra = {.wt.granted = on_grant}, rb = {.wt.granted = on_grant};
    funcd_pool_worker *w = NULL;
    CHECK_INT(funcd_pool_acquire(a.pool, &ra.wt, &w), FUNCD_POOL_QUEUED);
    turn(&a);
    funcd_pool_worker_ready(nth(&a, 0)->pw);
    CHECK_INT(atomic_load(&ra.calls), 1);
    funcd_pool_release(a.pool, ra.w, 0); /* idle now */
    CHECK_INT(funcd_pool_acquire(b.pool, &rb.wt, &w), FUNCD_POOL_QUEUED);
    turn(&b);
    CHECK_INT(b.starts, 0);
    CHECK_INT(atomic_load(&rb.calls), 0); /* waits: a place may come back */
    /* a's worker, idle a moment, goes for b's sake; not before. */
    plan(&a, &cfg);
    CHECK_INT(a.stops, 0);
    a.now += FUNCD_POOL_PRESSED_IDLE_MS;
    plan(&a, &cfg);
    CHECK_INT(a.stops, 1);
    reap(&a);
    turn(&b);
    CHECK_INT(b.starts, 1);
    funcd_pool_worker_ready(nth(&b, 0)->pw);
    CHECK_INT(atomic_load(&rb.calls), 1);
    CHECK(rb.w == nth(&b, 0)->pw);
    funcd_pool_release(b.pool, rb.w, 0);
    /* With nobody waiting, an idle worker keeps its place. */
    b.now += FUNCD_POOL_PRESSED_IDLE_MS;
    plan(&b, &cfg);
    CHECK_INT(b.stops, 0);
    bench_down(&a);
    bench_down(&b);
    CHECK_INT(funcd_pool_budget_taken(ns), 0);
    funcd_pool_budget_unref(ns);
}

/* A replica evicted after a failed request holds its place until it exits:
 * meanwhile its pool's waiters wait for that place (not the 3 s of
 * FUNCD_POOL_BUDGET_WAIT_MS), and it goes to that pool, not to another pool
 * of the budget that also waits for one (review18 M-3). */
TEST(budget_evicted_worker_place_stays)
{
    funcd_pool_budget *ns = funcd_pool_budget_new(2, NULL, "namespace t", "x");
    CHECK(ns != NULL);
    funcd_pool_config one = {.min_workers = 1, .max_workers = 1, .concurrency = 1,
                             .queue_length = 10, .start_timeout_ms = 10000, .budget = ns};
    funcd_pool_config more = one;
    more.max_workers = 2;
    bench a, b;
    CHECK(bench_up(&a, &one) == 0);
    CHECK(bench_up(&b, &more) == 0);
    funcd_pool_worker_ready(nth(&a, 0)->pw);
    funcd_pool_worker_ready(nth(&b, 0)->pw);
    /* b is busy and wants a second worker: it waits for a place too. */
    rec b1 = {.wt.granted = on_grant}, b2 = {.wt.granted = on_grant};
    funcd_pool_worker *wb = NULL, *w = NULL;
    CHECK_INT(funcd_pool_acquire(b.pool, &b1.wt, &wb), FUNCD_POOL_GRANTED);
    CHECK_INT(funcd_pool_acquire(b.pool, &b2.wt, &w), FUNCD_POOL_QUEUED);
    turn(&b);
    CHECK_INT(stats(&b).budget_short, 1);
    /* a's request fails: its worker is evicted, and a's next request waits. */
    rec a1 = {.wt.granted = on_grant}, ra = {.wt.granted = on_grant};
    CHECK_INT(funcd_pool_acquire(a.pool, &a1.wt, &w), FUNCD_POOL_GRANTED);
    funcd_pool_release(a.pool, w, 1);
    CHECK_INT(funcd_pool_acquire(a.pool, &ra.wt, &w), FUNCD_POOL_QUEUED);
    turn(&a);
    CHECK_INT(a.stops, 1);
    CHECK_INT(stats(&a).budget_short, 1);
    a.now += FUNCD_POOL_BUDGET_WAIT_MS;
    plan(&a, &one);
    CHECK_INT(atomic_load(&ra.calls), 0); /* its place comes back */
    /* It exits: b plans first, but the place is a's. */
    nth(&a, 0)->exited = 1;
    funcd_pool_worker_exited(nth(&a, 0)->pw, "stopped");
    turn(&b);
    turn(&a);
    CHECK_INT(b.starts, 1);
    CHECK_INT(a.starts, 2);
    CHECK_INT(funcd_pool_budget_taken(ns), 2);
    funcd_pool_worker_ready(nth(&a, 1)->pw);
    CHECK_INT(atomic_load(&ra.calls), 1);
    CHECK(ra.w == nth(&a, 1)->pw);
    funcd_pool_release(a.pool, ra.w, 0);
    funcd_pool_release(b.pool, wb, 0); /* b's request waited on its worker */
    CHECK_INT(atomic_load(&b2.calls), 1);
    funcd_pool_release(b.pool, b2.w, 0);
    bench_down(&a);
    bench_down(&b);
    CHECK_INT(funcd_pool_budget_taken(ns), 0);
    funcd_pool_budget_unref(ns);
}

/* An update: the old version's pool is closed for the new one, whose
 * requests wait while the old workers exit (beyond FUNCD_POOL_BUDGET_WAIT_MS,
 * up to the start timeout), and whose places they are as they exit, before
 * any other pool of the namespace that waits for one (review18 M-3: 503 at
 * once, and the places could go to another function for good). */
TEST(budget_successor_gets_the_places)
{
    funcd_pool_budget *ns = funcd_pool_budget_new(2, NULL, "namespace t", "x");
    CHECK(ns != NULL);
    funcd_pool_config one = {.min_workers = 1, .max_workers = 1, .concurrency = 1,
                             .queue_length = 10, .start_timeout_ms = 10000, .budget = ns};
    funcd_pool_config more = one;
    more.max_workers = 2;
    bench old, b, heir;
    CHECK(bench_up(&old, &one) == 0);
    CHECK(bench_up(&b, &more) == 0);
    funcd_pool_worker_ready(nth(&old, 0)->pw);
    funcd_pool_worker_ready(nth(&b, 0)->pw);
    rec b1 = {.wt.granted = on_grant}, b2 = {.wt.granted = on_grant};
    funcd_pool_worker *wb = NULL, *w = NULL;
    CHECK_INT(funcd_pool_acquire(b.pool, &b1.wt, &wb), FUNCD_POOL_GRANTED);
    CHECK_INT(funcd_pool_acquire(b.pool, &b2.wt, &w), FUNCD_POOL_QUEUED);
    turn(&b);
    CHECK_INT(stats(&b).budget_short, 1);
    CHECK(bench_up(&heir, &one) == 0);
    CHECK_INT(heir.starts, 0);
    rec r = {.wt.granted = on_grant};
    CHECK_INT(funcd_pool_acquire(heir.pool, &r.wt, &w), FUNCD_POOL_QUEUED);
    turn(&heir);
    funcd_pool_close_for(old.pool, heir.pool, "the function was updated");
    old.closed = 1;
    turn(&old);
    CHECK_INT(old.stops, 1);
    heir.now += FUNCD_POOL_BUDGET_WAIT_MS;
    plan(&heir, &one);
    CHECK_INT(atomic_load(&r.calls), 0);
    /* The old worker exits: b plans first, the place is the heir's. */
    nth(&old, 0)->exited = 1;
    funcd_pool_worker_exited(nth(&old, 0)->pw, "stopped");
    turn(&b);
    turn(&heir);
    CHECK_INT(b.starts, 1);
    CHECK_INT(heir.starts, 1);
    CHECK_INT(funcd_pool_budget_taken(ns), 2);
    funcd_pool_worker_ready(nth(&heir, 0)->pw);
    CHECK_INT(atomic_load(&r.calls), 1);
    CHECK(r.w == nth(&heir, 0)->pw);
    funcd_pool_release(heir.pool, r.w, 0);
    funcd_pool_release(b.pool, wb, 0);
    CHECK_INT(atomic_load(&b2.calls), 1);
    funcd_pool_release(b.pool, b2.w, 0);
    bench_down(&heir);
    bench_down(&b);
    bench_down(&old);
    CHECK_INT(funcd_pool_budget_taken(ns), 0);
    funcd_pool_budget_unref(ns);
}

/* Two updates before the first version's worker exited: its place goes to
 * the latest version, the heir of its heir. */
TEST(budget_successor_of_a_successor)
{
    funcd_pool_budget *ns = funcd_pool_budget_new(1, NULL, "namespace t", "x");
    CHECK(ns != NULL);
    funcd_pool_config one = {.min_workers = 1, .max_workers = 1, .concurrency = 1,
                             .queue_length = 10, .start_timeout_ms = 10000, .budget = ns};
    funcd_pool_config none = one;
    none.min_workers = 0;
    bench v1, v2, v3, b;
    CHECK(bench_up(&v1, &one) == 0);
    CHECK_INT(v1.starts, 1);
    CHECK(bench_up(&b, &none) == 0);
    rec rb = {.wt.granted = on_grant};
    funcd_pool_worker *w = NULL;
    CHECK_INT(funcd_pool_acquire(b.pool, &rb.wt, &w), FUNCD_POOL_QUEUED);
    turn(&b);
    CHECK(bench_up(&v2, &one) == 0);
    funcd_pool_close_for(v1.pool, v2.pool, "the function was updated");
    v1.closed = 1;
    turn(&v1);
    CHECK(bench_up(&v3, &one) == 0);
    funcd_pool_close_for(v2.pool, v3.pool, "the function was updated");
    v2.closed = 1;
    CHECK_INT(v2.starts + v3.starts, 0);
    nth(&v1, 0)->exited = 1;
    funcd_pool_worker_exited(nth(&v1, 0)->pw, "stopped");
    turn(&b);
    turn(&v3);
    CHECK_INT(b.starts, 0);
    CHECK_INT(v3.starts, 1);
    CHECK_INT(funcd_pool_budget_taken(ns), 1);
    bench_down(&v3); /* and then b's */
    turn(&b);
    CHECK_INT(b.starts, 1);
    funcd_pool_worker_ready(nth(&b, 0)->pw);
    CHECK_INT(atomic_load(&rb.calls), 1);
    funcd_pool_release(b.pool, rb.w, 0);
    bench_down(&b);
    bench_down(&v2);
    bench_down(&v1);
    CHECK_INT(funcd_pool_budget_taken(ns), 0);
    funcd_pool_budget_unref(ns);
}

/* A patient waiter (serving's handler load check) is not failed for want
 * of a place however long it waits, unlike requests; a place given back
 * reaches it. */
TEST(budget_patient_waiter_waits_for_a_place)
{
    funcd_pool_budget *ns = funcd_pool_budget_new(1, NULL, "namespace t", "x");
    CHECK(ns != NULL);
    funcd_pool_config cfg = {.min_workers = 1, .max_workers = 1, .concurrency = 1,
                             .queue_length = 10, .start_timeout_ms = 10000, .budget = ns};
    bench a, c;
    CHECK(bench_up(&a, &cfg) == 0);
    funcd_pool_worker_ready(nth(&a, 0)->pw);
    cfg.min_workers = 0;
    CHECK(bench_up(&c, &cfg) == 0);
    rec patient = {.wt.granted = on_grant, .wt.patient = 1}, req = {.wt.granted = on_grant};
    funcd_pool_worker *w = NULL;
    CHECK_INT(funcd_pool_acquire(c.pool, &patient.wt, &w), FUNCD_POOL_QUEUED);
    CHECK_INT(funcd_pool_acquire(c.pool, &req.wt, &w), FUNCD_POOL_QUEUED);
    turn(&c);
    c.now += 10 * FUNCD_POOL_BUDGET_WAIT_MS;
    plan(&c, &cfg);
    CHECK_INT(atomic_load(&req.calls), 1);
    CHECK(req.w == NULL);
    CHECK_INT(atomic_load(&patient.calls), 0);
    CHECK_INT(stats(&c).waiting, 1);
    bench_down(&a); /* a place comes back */
    turn(&c);
    CHECK_INT(c.starts, 1);
    funcd_pool_worker_ready(nth(&c, 0)->pw);
    CHECK_INT(atomic_load(&patient.calls), 1);
    CHECK(patient.w == nth(&c, 0)->pw);
    funcd_pool_release(c.pool, patient.w, 0);
    bench_down(&c);
    CHECK_INT(funcd_pool_budget_taken(ns), 0);
    funcd_pool_budget_unref(ns);
}

/* A place coming back to another pool is not one this pool may wait for:
 * at the full budget, a pool whose leaving workers are neither its own nor
 * those of a pool it succeeds fails its requests after
 * FUNCD_POOL_BUDGET_WAIT_MS, not at its start timeout (review19 M-1). */
TEST(budget_others_leaving_worker_no_long_wait)
{
    funcd_pool_budget *ns = funcd_pool_budget_new(2, NULL, "namespace t", "x");
    CHECK(ns != NULL);
    funcd_pool_config one = {.min_workers = 1, .max_workers = 1, .concurrency = 1,
                             .queue_length = 10, .start_timeout_ms = 10000, .budget = ns};
    funcd_pool_config none = one;
    none.min_workers = 0;
    none.start_timeout_ms = 30000;
    bench a, b, c;
    CHECK(bench_up(&a, &one) == 0);
    CHECK(bench_up(&b, &one) == 0);
    funcd_pool_worker_ready(nth(&a, 0)->pw);
    funcd_pool_worker_ready(nth(&b, 0)->pw);
    /* a's request fails: its worker is evicted, and a is short. */
    rec a1 = {.wt.granted = on_grant};
    funcd_pool_worker *w = NULL;
    CHECK_INT(funcd_pool_acquire(a.pool, &a1.wt, &w), FUNCD_POOL_GRANTED);
    funcd_pool_release(a.pool, w, 1);
    plan(&a, &one);
    CHECK_INT(a.stops, 1);
    CHECK_INT(stats(&a).budget_short, 1);
    /* c gets a request: the place of a's leaving worker is a's, not c's. */
    CHECK(bench_up(&c, &none) == 0);
    rec rc = {.wt.granted = on_grant};
    CHECK_INT(funcd_pool_acquire(c.pool, &rc.wt, &w), FUNCD_POOL_QUEUED);
    turn(&c);
    CHECK_INT(stats(&c).budget_short, 1);
    c.now += FUNCD_POOL_BUDGET_WAIT_MS;
    plan(&c, &none);
    CHECK_INT(atomic_load(&rc.calls), 1);
    CHECK(rc.w == NULL);
    CHECK_CONTAINS(rc.error, "namespace t");
    /* a's worker exits: a keeps its place, c starts nothing. */
    nth(&a, 0)->exited = 1;
    funcd_pool_worker_exited(nth(&a, 0)->pw, "stopped");
    turn(&c);
    turn(&a);
    CHECK_INT(a.starts, 2);
    CHECK_INT(c.starts, 0);
    CHECK_INT(funcd_pool_budget_taken(ns), 2);
    bench_down(&c);
    bench_down(&b);
    bench_down(&a);
    CHECK_INT(funcd_pool_budget_taken(ns), 0);
    funcd_pool_budget_unref(ns);
}

/* The node's budget bounds every namespace below it. */
TEST(budget_parent_bounds_children)
{
    funcd_pool_budget *node = funcd_pool_budget_new(3, NULL, "this node", "funcd --max-workers");
    funcd_pool_budget *n1 = funcd_pool_budget_new(0, node, "namespace a", "x");
    funcd_pool_budget *n2 = funcd_pool_budget_new(0, node, "namespace b", "x");
    CHECK(node && n1 && n2);
    funcd_pool_config cfg = {.min_workers = 2, .max_workers = 4, .concurrency = 1,
                             .queue_length = 10, .start_timeout_ms = 10000, .budget = n1};
    bench a, b;
    CHECK(bench_up(&a, &cfg) == 0);
    cfg.budget = n2;
    CHECK(bench_up(&b, &cfg) == 0);
    CHECK_INT(a.starts + b.starts, 3);
    CHECK_INT(funcd_pool_budget_taken(node), 3);
    CHECK_INT(funcd_pool_budget_taken(n2), b.starts);
    CHECK_CONTAINS(stats(&b).budget_error, "this node has 3 workers, its limit (funcd --max-workers 3)");
    bench_down(&a);
    turn(&b);
    CHECK_INT(b.starts, 2);
    bench_down(&b);
    CHECK_INT(funcd_pool_budget_taken(node), 0);
    funcd_pool_budget_unref(n1);
    funcd_pool_budget_unref(n2);
    funcd_pool_budget_unref(node);
}

int main(void)
{
    /* The racers wake the loop from their threads, as requests do on the
     * platform, which turns libevent's threading on (pool.h). */
    evthread_use_pthreads();
    RUN(min_replicas_kept);
    RUN(idle_ttl_extended_by_use);
    RUN(no_slot_on_a_stopping_worker);
    RUN(grant_and_cancel);
    RUN(queue_overflow);
    RUN(start_failure_backoff);
    RUN(grant_cancel_reap_race);
    RUN(budget_shared_by_pools);
    RUN(budget_parent_bounds_children);
    RUN(budget_idle_worker_gives_its_place);
    RUN(budget_evicted_worker_place_stays);
    RUN(budget_successor_gets_the_places);
    RUN(budget_successor_of_a_successor);
    RUN(budget_patient_waiter_waits_for_a_place);
    RUN(budget_others_leaving_worker_no_long_wait);
    return HARNESS_END();
}
