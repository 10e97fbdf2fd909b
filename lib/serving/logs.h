/*
 * Function logs: every line a worker writes, kept in a bounded ring per
 * function and fanned out to followers; a ring made with a logstore also
 * persists every line (under the ring's lock, so a follower that replays
 * the store and then follows sees each line once: no gap, no repeat).
 *
 * Threads: append runs on the platform loop; read, follow and unfollow may
 * run on any thread. Follower callbacks run on the appending thread and must
 * be quick (copy and wake).
 */
#ifndef FUNCD_SERVING_LOGS_H
#define FUNCD_SERVING_LOGS_H

#include <stddef.h>
#include <stdint.h>

#include "logstore/logstore.h"
#include "util/buf.h"

#define FUNCD_LOG_RING 2000 /* records kept per function */

typedef struct funcd_log_ring funcd_log_ring;

typedef struct funcd_log_line {
    int64_t time_ms;
    const char *replica;
    int stream; /* 1 stdout, 2 stderr */
    const char *invocation_id; /* may be NULL */
    const char *line;
    size_t len;
    const char *ns, *fn; /* set on the records a ring hands out; may be NULL */
    const char *node;    /* the logstore's node name, on records a ring hands out; may be NULL */
} funcd_log_line;

/* What a reader asks of a function's logs (?since=, ?invocation=, ?tailLines=). */
typedef struct funcd_log_query {
    int64_t since_ms;       /* 0: from the start */
    size_t tail;            /* 0: all; SIZE_MAX: no history (tailLines=0) */
    int follow;
    char invocation[64];    /* "": every invocation */
} funcd_log_query;

typedef void (*funcd_log_follow_cb)(const funcd_log_line *rec, void *payload);
typedef struct funcd_log_follower funcd_log_follower;

funcd_log_ring *funcd_log_ring_new(void);
/* A ring whose lines also go to `store` (may be NULL), as function ns/name. */
funcd_log_ring *funcd_log_ring_new_stored(funcd_logstore *store, const char *ns, const char *name);
void funcd_log_ring_ref(funcd_log_ring *r);
void funcd_log_ring_unref(funcd_log_ring *r);

void funcd_log_ring_append(funcd_log_ring *r, const funcd_log_line *rec);
/* Calls `cb` for the last `tail` records (0: all kept), oldest first. */
void funcd_log_ring_read(funcd_log_ring *r, size_t tail, funcd_log_follow_cb cb, void *payload);
/* Like read, then delivers every new record until unfollow, with no gap. */
funcd_log_follower *funcd_log_ring_follow(funcd_log_ring *r, size_t tail, funcd_log_follow_cb cb,
                                          void *payload);
/* Like follow, but the history goes to `history_cb` (on this thread). */
funcd_log_follower *funcd_log_ring_follow_with_history(funcd_log_ring *r, size_t tail,
                                                       funcd_log_follow_cb history_cb,
                                                       funcd_log_follow_cb cb, void *payload);
/* The history a query asks for, as JSON records (no newline), oldest first:
 * from the logstore when the ring has one, else from the ring. 0 or a
 * negative FUNCD_E* (the store failed). */
int funcd_log_ring_query(funcd_log_ring *r, const funcd_log_query *q, funcd_logstore_cb history,
                         void *payload);
/* Like query, then every new record to `cb` (filter the invocation there).
 * The store is read under the ring's lock: appends wait meanwhile. */
funcd_log_follower *funcd_log_ring_follow_query(funcd_log_ring *r, const funcd_log_query *q,
                                                funcd_logstore_cb history, funcd_log_follow_cb cb,
                                                void *payload);
/* When it returns the callback is not running and will not run again. */
void funcd_log_ring_unfollow(funcd_log_ring *r, funcd_log_follower *f);

/* One NDJSON record in the logstore's format (funcd_logstore_format) + "\n". */
int funcd_log_line_json(funcd_buf *out, const funcd_log_line *rec);

/*
 * Reads tailLines, since, invocation and follow from a raw query string
 * ("a=1&b=2"); since counts back from now_ms (0: the wall clock). On a bad value returns FUNCD_EINVAL with `*bad_field` naming
 * the parameter and funcd_error_last() saying why.
 */
int funcd_log_query_parse(funcd_log_query *out, const char *query, size_t len, int64_t now_ms,
                          const char **bad_field);

#endif
