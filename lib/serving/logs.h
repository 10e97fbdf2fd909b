/*
 * Function logs, first cut: every line a worker writes, kept in a bounded
 * ring per function and fanned out to followers.
 *
 * Threads: append runs on the platform loop; read, follow and unfollow may
 * run on any thread. Follower callbacks run on the appending thread and must
 * be quick (copy and wake).
 */
#ifndef FUNCD_SERVING_LOGS_H
#define FUNCD_SERVING_LOGS_H

#include <stddef.h>
#include <stdint.h>

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
} funcd_log_line;

typedef void (*funcd_log_follow_cb)(const funcd_log_line *rec, void *payload);
typedef struct funcd_log_follower funcd_log_follower;

funcd_log_ring *funcd_log_ring_new(void);
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
/* When it returns the callback is not running and will not run again. */
void funcd_log_ring_unfollow(funcd_log_ring *r, funcd_log_follower *f);

/* One NDJSON record: {"time":..,"replica":..,"stream":..,"invocationId":..,"line":..}\n */
int funcd_log_line_json(funcd_buf *out, const funcd_log_line *rec);

#endif
