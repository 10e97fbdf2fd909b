/*
 * The slot functions of the gateway SPI (funcd/sys/gateway.h): a gateway's
 * view of a function's pool. A funcd_fn_target is the function's
 * funcd_pool and a funcd_slot the pool worker whose slot is held; what a
 * gateway may know of the worker is its funcd_serving_worker (serving.h).
 * Only serving's pools are ever routed, so every worker here has one.
 */
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "funcd/sys/error.h"
#include "funcd/sys/gateway.h"
#include "pool/pool.h"
#include "serving/serving.h"
#include "util/misc.h"

/* Drivers of versions 1 and 2 read routes with the layout they had. */
_Static_assert(offsetof(funcd_route, reserved_) == 2 * sizeof(void *) &&
                   offsetof(funcd_route, timeout_ms) == 3 * sizeof(void *) &&
                   offsetof(funcd_route, target) == 3 * sizeof(void *) + sizeof(uint64_t),
               "funcd_route must keep the layout of gateway versions 1 and 2");

/* A pool's waiters failed for want of a place carry the public prefix. */
_Static_assert(sizeof(FUNCD_POOL_NO_PLACE) == sizeof(FUNCD_SLOT_ERROR_WORKER_LIMIT),
               "FUNCD_POOL_NO_PLACE must be FUNCD_SLOT_ERROR_WORKER_LIMIT");

/* The pool's waiter lives in the public waiter's reserved words. */
_Static_assert(sizeof(funcd_pool_waiter) <= sizeof(((funcd_slot_waiter *)0)->reserved_),
               "funcd_slot_waiter.reserved_ cannot hold a funcd_pool_waiter");
_Static_assert(alignof(funcd_pool_waiter) <= alignof(void *),
               "funcd_slot_waiter.reserved_ is not aligned for a funcd_pool_waiter");

static funcd_pool *pool_of(funcd_fn_target *t)
{
    return (funcd_pool *)t;
}

static funcd_pool_worker *worker_of(const funcd_slot *s)
{
    return (funcd_pool_worker *)s;
}

static funcd_serving_worker *data_of(const funcd_slot *s)
{
    return funcd_pool_worker_data(worker_of(s));
}

static funcd_pool_waiter *inner(funcd_slot_waiter *w)
{
    return (funcd_pool_waiter *)(void *)w->reserved_;
}

static funcd_slot_waiter *outer(funcd_pool_waiter *pw)
{
    return (funcd_slot_waiter *)(void *)((char *)pw - offsetof(funcd_slot_waiter, reserved_));
}

void funcd_fn_target_ref(funcd_fn_target *target)
{
    if (target)
        funcd_pool_ref(pool_of(target));
}

void funcd_fn_target_unref(funcd_fn_target *target)
{
    if (target)
        funcd_pool_unref(pool_of(target));
}

static void on_pool_grant(funcd_pool_waiter *pw, funcd_pool_worker *w, const char *error)
{
    funcd_slot_waiter *wt = outer(pw);
    wt->granted(wt, (funcd_slot *)w, error);
}

int funcd_slot_acquire(funcd_fn_target *target, funcd_slot_waiter *waiter, funcd_slot **out)
{
    if (out)
        *out = NULL;
    if (!target || !waiter || !waiter->granted || !out)
        return funcd_error_set(FUNCD_EINVAL, "funcd_slot_acquire needs a target, a waiter with "
                               "a granted callback, and a place for the slot");
    funcd_pool_waiter *pw = inner(waiter);
    memset(pw, 0, sizeof(*pw));
    pw->granted = on_pool_grant;
    funcd_pool_worker *w = NULL;
    switch (funcd_pool_acquire(pool_of(target), pw, &w)) {
    case FUNCD_POOL_GRANTED:
        *out = (funcd_slot *)w;
        return FUNCD_SLOT_GRANTED;
    case FUNCD_POOL_QUEUED:
        return FUNCD_SLOT_QUEUED;
    case FUNCD_POOL_FULL:
        return FUNCD_SLOT_QUEUE_FULL;
    case FUNCD_POOL_CLOSED:
        break;
    }
    return FUNCD_SLOT_CLOSED;
}

int funcd_slot_cancel(funcd_fn_target *target, funcd_slot_waiter *waiter)
{
    return funcd_pool_cancel(pool_of(target), inner(waiter));
}

void funcd_slot_release(funcd_slot *slot, funcd_slot_outcome outcome)
{
    funcd_pool_worker *w = worker_of(slot);
    funcd_pool_release(funcd_pool_worker_pool(w), w, outcome == FUNCD_SLOT_FAILED);
}

const struct sockaddr_un *funcd_slot_sockaddr(const funcd_slot *slot)
{
    return &data_of(slot)->addr;
}

const char *funcd_slot_endpoint(const funcd_slot *slot)
{
    return data_of(slot)->endpoint;
}

uint64_t funcd_slot_worker_id(const funcd_slot *slot)
{
    return data_of(slot)->id;
}

void funcd_slot_begin(funcd_slot *slot, const char *invocation_id)
{
    funcd_serving_worker *w = data_of(slot);
    pthread_mutex_lock(&w->invocation_lock);
    if (++w->in_flight == 1) { /* (strlcpy, not snprintf: this runs for every request) */
        size_t n = invocation_id ? strnlen(invocation_id, sizeof(w->invocation) - 1) : 0;
        memcpy(w->invocation, invocation_id ? invocation_id : "", n);
        w->invocation[n] = '\0';
        w->invocation_solo = 1;
    } else {
        w->invocation_solo = 0; /* which one ends first is not known */
    }
    pthread_mutex_unlock(&w->invocation_lock);
}

void funcd_slot_end(funcd_slot *slot)
{
    funcd_serving_worker *w = data_of(slot);
    pthread_mutex_lock(&w->invocation_lock);
    if (w->in_flight)
        w->in_flight--;
    w->ended_ms = funcd_mono_ms();
    pthread_mutex_unlock(&w->invocation_lock);
}

funcd_slot_worker_state funcd_slot_worker_end(const funcd_slot *slot, char *message,
                                              size_t message_len)
{
    const funcd_serving_worker *w = data_of(slot);
    if (!atomic_load(&w->ended))
        return FUNCD_SLOT_WORKER_RUNNING;
    /* Final once `ended` is set (serving.c writes them before). */
    if (message && message_len)
        snprintf(message, message_len, "%s", w->end_message);
    return strcmp(w->end_reason, "OOMKilled") == 0 ? FUNCD_SLOT_WORKER_OOM_KILLED
                                                   : FUNCD_SLOT_WORKER_EXITED;
}
