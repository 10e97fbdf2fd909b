/*
 * What the store drivers share: key and revision checks, prefix ranges, and the watch list: watches in registration order,
 * delivery in revision order, and unwatch from inside a callback deferred
 * until no callback runs. The caller holds its store's lock around every
 * function here.
 */
#ifndef FUNCD_STORE_WATCHERS_H
#define FUNCD_STORE_WATCHERS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "funcd/sys/store.h"

struct funcd_store_watch {
    struct funcd_store_watch *prev, *next;
    char *prefix;
    size_t prefix_len;
    /* The last revision handed to cb: a watch registered from inside a
     * callback must not see the event being dispatched a second time. */
    uint64_t delivered;
    funcd_store_watch_cb cb;
    void *payload;
    int ended; /* unwatched while callbacks were running; freed by sweep */
};

typedef struct funcd_watch_list {
    funcd_store_watch *head, *tail;
    /* Depth of list/watch callbacks running on the lock holder's thread;
     * while non-zero the store's entries and this list must not be unlinked. */
    unsigned in_callback;
    size_t n_ended;
} funcd_watch_list;

/* ---- checks both drivers make ---------------------------------------- */

int funcd_store_check_key(const char *key, const char *what);
/* FUNCD_ESTATE for a write from inside a list or watch callback. */
int funcd_store_refuse_in_callback(const funcd_watch_list *l, const char *what, const char *key);
/* `expected` (FUNCD_STORE_ANY, _ABSENT or a revision) against the key now:
 * `exists`, at `revision`. FUNCD_EEXISTS, FUNCD_ENOTFOUND or FUNCD_ECONFLICT. */
int funcd_store_check_expected(int exists, uint64_t revision, const char *key, uint64_t expected);

/* The smallest string greater than every string starting with `prefix`
 * (keys compare as bytes), in `out` (strlen(prefix) + 1 bytes), so a
 * prefix is the range [prefix, out); 0 if there is none ("" or all 0xff):
 * then every key >= prefix. Also used by the PostgreSQL blob driver. */
int funcd_prefix_upper_bound(const char *prefix, char *out);

/* The SQL drivers' lock, recursive: a list or watch callback run under it
 * may read the store again. 0, or FUNCD_EIO
 * naming `driver`. */
int funcd_store_lock_init(pthread_mutex_t *lock, const char *driver);

/* ---- the watch list --------------------------------------------------- */

/* A watch of `prefix` (NULL: everything) after revision `after`; NULL on OOM. */
funcd_store_watch *funcd_watch_new(const char *prefix, uint64_t after, funcd_store_watch_cb cb,
                                   void *payload);
void funcd_watch_free(funcd_store_watch *w);

void funcd_watch_list_append(funcd_watch_list *l, funcd_store_watch *w);
void funcd_watch_list_enter(funcd_watch_list *l);
/* Frees the watches ended from inside callbacks once none is running. */
void funcd_watch_list_leave(funcd_watch_list *l);
/* Hands `ev` to `w` if it matches and is new to it. */
void funcd_watch_deliver(funcd_store_watch *w, const funcd_store_event *ev);
void funcd_watch_list_dispatch(funcd_watch_list *l, const funcd_store_event *ev);
/* Unwatch: at once, or (from inside a callback) at the next leave. */
void funcd_watch_list_remove(funcd_watch_list *l, funcd_store_watch *w);
/* Frees every watch (the store is going away). */
void funcd_watch_list_clear(funcd_watch_list *l);

/* ---- a driver's watch and unwatch ------------------------------------- */

/*
 * The driver's part of opening a watch, under its lock: replay what it
 * keeps after `after` to `w` (not yet linked) and set `*revision` to the
 * store's revision then; a negative error (FUNCD_EGONE when `after` is
 * older than the history) leaves `w` to the caller to free.
 */
typedef int (*funcd_watch_replay_fn)(void *store, funcd_store_watch *w, uint64_t after,
                                     uint64_t *revision);

/* The store's watch(): checks the arguments, makes the watch, and under
 * `lock` replays (driver's `replay`) and links it into `l`, so no write
 * falls between the two. */
int funcd_store_watch_open(pthread_mutex_t *lock, funcd_watch_list *l, void *store,
                           funcd_watch_replay_fn replay, const char *prefix, uint64_t after,
                           funcd_store_watch_cb cb, void *payload, funcd_store_watch **out);
/* The store's unwatch(): NULL is nothing; else removed under `lock`. */
void funcd_store_watch_close(pthread_mutex_t *lock, funcd_watch_list *l, funcd_store_watch *w);

#endif
