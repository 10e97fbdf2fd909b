/*
 * Persistent function logs on the blob port.
 *
 * Every record is one JSON line (see funcd_logstore_format). Each function
 * has one open segment buffered in memory; it is sealed — written to the
 * blob as one object "logs/<ns>/<fn>/seg/<start>-<end>-<id>.jsonl" — when it
 * is older than seal_ms or larger than seal_bytes, and at free. Once an hour
 * is over, its segments are merged into "logs/<ns>/<fn>/hour/<YYYYMMDDHH>.jsonl"
 * (merged object first, segments deleted after; the hour object's header
 * line names the segments it covers, so a reader ignores leftovers and a
 * crash in between neither loses nor duplicates lines). Retention deletes
 * hour objects older than retention_ms. Queries read hour objects, sealed
 * segments, segments being written and the open buffer, in time order.
 *
 * Nodes sharing one blob (a cluster, docs/adr/0043-logs-across-nodes.md):
 * a logstore given a node name writes its segments under
 * "logs/<ns>/<fn>/seg/<node>/", stamps each record with "node", and a query
 * merges the segments of every node by time. Without a name the layout and
 * records are the single node's above.
 *
 * Threads: every function may be called from any thread; the blob is
 * borrowed and must outlive the logstore.
 */
#ifndef FUNCD_LOGSTORE_LOGSTORE_H
#define FUNCD_LOGSTORE_LOGSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "funcd/sys/blob.h"
#include "util/buf.h"

#define FUNCD_LOGSTORE_SEAL_MS 10000
#define FUNCD_LOGSTORE_SEAL_BYTES (8u << 20)
#define FUNCD_LOGSTORE_RETENTION_MS (7LL * 24 * 3600 * 1000)

typedef struct funcd_logstore funcd_logstore;

typedef struct funcd_logstore_options {
    uint64_t seal_ms;      /* 0: FUNCD_LOGSTORE_SEAL_MS */
    uint64_t seal_bytes;   /* 0: FUNCD_LOGSTORE_SEAL_BYTES */
    uint64_t retention_ms; /* 0: FUNCD_LOGSTORE_RETENTION_MS */
    const char *node;      /* this node's name (copied); NULL: a single node */
} funcd_logstore_options;

typedef struct funcd_logstore_record {
    int64_t time_ms;
    const char *ns;
    const char *fn;
    const char *replica;    /* may be NULL */
    const char *invocation; /* may be NULL */
    int stream;             /* 1 stdout, 2 stderr */
    const char *line;       /* the text the worker wrote, without its newline */
    size_t len;
    const char *node; /* the node that read it; NULL: none (appends use the logstore's) */
} funcd_logstore_record;

typedef struct funcd_logstore_stats {
    uint64_t appended;
    uint64_t segments_sealed;
    uint64_t bytes_sealed;
    uint64_t hours_compacted;
    uint64_t hours_expired;
    uint64_t put_failures; /* kept in memory and retried on the next tick */
    uint64_t dropped;      /* lines lost because the blob refused them for too long */
} funcd_logstore_stats;

/* One record, one JSON line (no newline). Returns non-zero to stop. */
typedef int (*funcd_logstore_cb)(const char *rec, size_t len, void *payload);

/* A logstore on `blob` (a registered backend: put, get, list and del are
 * required slots) in `*out`. `o` may be NULL (defaults). 0, or FUNCD_EINVAL
 * (no blob, or a node name that cannot be part of a key: 1 to 253 of
 * [A-Za-z0-9._-]) or FUNCD_ENOMEM with funcd_error_last() saying which;
 * `*out` is NULL then. */
int funcd_logstore_new(funcd_logstore **out, funcd_blob *blob, const funcd_logstore_options *o);
/* Seals what is open (a clean shutdown loses nothing). NULL is fine. */
void funcd_logstore_free(funcd_logstore *ls);

void funcd_logstore_append(funcd_logstore *ls, const funcd_logstore_record *r);

/* The node name the logstore was given, or NULL. */
const char *funcd_logstore_node(const funcd_logstore *ls);

/*
 * The records of one function with time >= since_ms (0: all), of one
 * invocation (NULL: all), the last `tail` of them (0: all), oldest first.
 * 0, or a negative FUNCD_E* when the blob failed.
 */
int funcd_logstore_query(funcd_logstore *ls, const char *ns, const char *fn, int64_t since_ms,
                         const char *invocation, size_t tail, funcd_logstore_cb cb, void *payload);

/* Seals aged segments and retries failed ones; at most once a minute (of
 * `now_ms`), compacts finished hours and applies retention. */
void funcd_logstore_tick(funcd_logstore *ls, int64_t now_ms);
/* Only the sealing part of a tick: a node that is not the cluster's leader
 * leaves compaction and retention of the shared blob to it. */
void funcd_logstore_flush(funcd_logstore *ls, int64_t now_ms);

void funcd_logstore_stats_get(funcd_logstore *ls, funcd_logstore_stats *out);

/* The JSON line of a record, appended to `out` without a newline:
 * {"time","invocationId"?,"severity","body","attributes","namespace",
 *  "function","replica","node"?,"stream","line"}. 0 or FUNCD_ENOMEM. */
int funcd_logstore_format(funcd_buf *out, const funcd_logstore_record *r);

/* ?since=: a duration ("90s", "5m", "2h", "1h30m", "3d") back from now_ms.
 * 0 or FUNCD_EINVAL. */
int funcd_logstore_parse_since(const char *s, int64_t now_ms, int64_t *out_since_ms);

#endif
