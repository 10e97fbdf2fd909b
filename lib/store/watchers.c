/* The store drivers' watch list (watchers.h). */
#include "store/watchers.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "funcd/sys/error.h"

funcd_store_watch *funcd_watch_new(const char *prefix, uint64_t after, funcd_store_watch_cb cb,
                                   void *payload)
{
    funcd_store_watch *w = calloc(1, sizeof(*w));
    if (!w || !(w->prefix = strdup(prefix ? prefix : ""))) {
        free(w);
        return NULL;
    }
    w->prefix_len = strlen(w->prefix);
    w->cb = cb;
    w->payload = payload;
    w->delivered = after;
    return w;
}

void funcd_watch_free(funcd_store_watch *w)
{
    if (!w)
        return;
    free(w->prefix);
    free(w);
}

void funcd_watch_list_append(funcd_watch_list *l, funcd_store_watch *w)
{
    w->prev = l->tail;
    w->next = NULL;
    if (l->tail)
        l->tail->next = w;
    else
        l->head = w;
    l->tail = w;
}

static void unlink_watch(funcd_watch_list *l, funcd_store_watch *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        l->head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        l->tail = w->prev;
}

void funcd_watch_list_enter(funcd_watch_list *l)
{
    l->in_callback++;
}

void funcd_watch_list_leave(funcd_watch_list *l)
{
    if (--l->in_callback || !l->n_ended)
        return;
    funcd_store_watch *w = l->head;
    while (w) {
        funcd_store_watch *next = w->next;
        if (w->ended) {
            unlink_watch(l, w);
            funcd_watch_free(w);
        }
        w = next;
    }
    l->n_ended = 0;
}

void funcd_watch_deliver(funcd_store_watch *w, const funcd_store_event *ev)
{
    if (w->ended || ev->revision <= w->delivered ||
        strncmp(ev->key, w->prefix, w->prefix_len) != 0)
        return;
    w->delivered = ev->revision;
    w->cb(ev, w->payload);
}

void funcd_watch_list_dispatch(funcd_watch_list *l, const funcd_store_event *ev)
{
    funcd_watch_list_enter(l);
    for (funcd_store_watch *w = l->head; w; w = w->next)
        funcd_watch_deliver(w, ev);
    funcd_watch_list_leave(l);
}

void funcd_watch_list_remove(funcd_watch_list *l, funcd_store_watch *w)
{
    if (l->in_callback) {
        /* Only the lock holder's own callback can get here: unlink later. */
        if (!w->ended) {
            w->ended = 1;
            l->n_ended++;
        }
        return;
    }
    unlink_watch(l, w);
    funcd_watch_free(w);
}

void funcd_watch_list_clear(funcd_watch_list *l)
{
    while (l->head) {
        funcd_store_watch *w = l->head;
        l->head = w->next;
        funcd_watch_free(w);
    }
    l->tail = NULL;
}

int funcd_store_watch_open(pthread_mutex_t *lock, funcd_watch_list *l, void *store,
                           funcd_watch_replay_fn replay, const char *prefix, uint64_t after,
                           funcd_store_watch_cb cb, void *payload, funcd_store_watch **out)
{
    if (!cb || !out)
        return funcd_error_set(FUNCD_EINVAL, "store: watch needs a callback and an out handle");
    if (!prefix)
        prefix = "";
    funcd_store_watch *w = funcd_watch_new(prefix, after, cb, payload);
    if (!w)
        return funcd_error_set(FUNCD_ENOMEM, "store: out of memory watching prefix \"%s\"", prefix);
    uint64_t revision = 0;
    pthread_mutex_lock(lock);
    int rc = replay(store, w, after, &revision);
    if (rc == 0) {
        if (w->delivered < revision)
            w->delivered = revision; /* the rest of the history did not match the prefix */
        funcd_watch_list_append(l, w);
    }
    pthread_mutex_unlock(lock);
    if (rc < 0) {
        funcd_watch_free(w);
        return rc;
    }
    *out = w;
    return 0;
}

void funcd_store_watch_close(pthread_mutex_t *lock, funcd_watch_list *l, funcd_store_watch *w)
{
    if (!w)
        return;
    pthread_mutex_lock(lock);
    funcd_watch_list_remove(l, w);
    pthread_mutex_unlock(lock);
}

int funcd_store_check_key(const char *key, const char *what)
{
    if (!key || !key[0])
        return funcd_error_set(
            FUNCD_EINVAL, "store: %s needs a non-empty key (like \"/functions/default/x\")", what);
    return 0;
}

int funcd_store_refuse_in_callback(const funcd_watch_list *l, const char *what, const char *key)
{
    if (l->in_callback)
        return funcd_error_set(FUNCD_ESTATE,
                               "store: %s of key \"%s\" from inside a list or watch callback; "
                               "callbacks must not write, do the write after it returns",
                               what, key);
    return 0;
}

int funcd_store_check_expected(int exists, uint64_t revision, const char *key, uint64_t expected)
{
    if (expected == FUNCD_STORE_ANY)
        return 0;
    if (expected == FUNCD_STORE_ABSENT) {
        if (exists)
            return funcd_error_set(FUNCD_EEXISTS,
                                   "store: key \"%s\" already exists (revision %" PRIu64
                                   "); update it with its revision instead of creating it",
                                   key, revision);
        return 0;
    }
    if (!exists)
        return funcd_error_set(FUNCD_ENOTFOUND,
                               "store: key \"%s\" does not exist (expected revision %" PRIu64
                               "); it was deleted, get or create it again",
                               key, expected);
    if (revision != expected)
        return funcd_error_set(FUNCD_ECONFLICT,
                               "store: key \"%s\" is at revision %" PRIu64 ", not %" PRIu64
                               "; get it again and retry the change",
                               key, revision, expected);
    return 0;
}

int funcd_prefix_upper_bound(const char *prefix, char *out)
{
    size_t n = strlen(prefix);
    while (n > 0 && (unsigned char)prefix[n - 1] == 0xff)
        n--;
    if (n == 0)
        return 0;
    memcpy(out, prefix, n);
    out[n - 1] = (char)((unsigned char)out[n - 1] + 1);
    out[n] = '\0';
    return 1;
}

int funcd_store_lock_init(pthread_mutex_t *lock, const char *driver)
{
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    int err = pthread_mutex_init(lock, &attr);
    pthread_mutexattr_destroy(&attr);
    return err ? funcd_error_set(FUNCD_EIO, "store: cannot create the %s store's mutex", driver)
               : 0;
}
