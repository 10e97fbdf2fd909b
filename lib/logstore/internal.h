/* Shared between the logstore's files; not for other modules. */
#ifndef FUNCD_LOGSTORE_INTERNAL_H
#define FUNCD_LOGSTORE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "logstore/logstore.h"

/* "2026-01-02T03:04:05.678Z" */
int funcd__logstore_time(char out[32], int64_t ms);
int funcd__logstore_parse_time(const char *s, size_t len, int64_t *out);
/* "2026010203" of the hour holding `ms`, and back to its first millisecond. */
int funcd__logstore_hour_label(char out[16], int64_t ms);
int funcd__logstore_hour_start(const char *label, int64_t *out);
int funcd__logstore_peek(const char *line, size_t len, int64_t *time_ms, const char **inv,
                         size_t *inv_len);

#endif

/* ---- the store's state, shared by logstore.c and query.c ---- */
#include <pthread.h>

#include "util/buf.h"

struct cJSON;

/* A sealed segment until the blob has it (or while a put is retried). */
typedef struct funcd__log_seg {
    char *key;
    char *data;
    size_t len;
    int64_t start, end;
    int writing; /* a put is under way: nobody else starts one */
    struct funcd__log_seg *next;
} funcd__log_seg;

typedef struct funcd__log_fn {
    char *ns, *fn;
    char *prefix; /* "logs/<ns>/<fn>/" */
    funcd_buf open;
    int64_t open_start, open_end;
    funcd__log_seg *pending; /* oldest first */
    size_t n_pending;
    struct funcd__log_fn *next;
} funcd__log_fn;

#define FUNCD__LOG_BUCKETS 256

struct funcd_logstore {
    funcd_blob *blob;
    uint64_t seal_ms, seal_bytes;
    int64_t retention_ms;
    pthread_mutex_t lock;    /* functions, buffers, pending lists, stats */
    pthread_rwlock_t layout; /* queries read; compaction and retention write */
    funcd__log_fn *buckets[FUNCD__LOG_BUCKETS];
    char *node;       /* NULL: a single node (no per-node prefix) */
    char node_key[40]; /* the node in segment keys: its name, or a hash of a long one */
    char instance[9]; /* in segment names: two processes never pick the same */
    uint64_t seq;
    int64_t last_maintenance;
    funcd_logstore_stats stats;
};

/* Under ls->lock. NULL if the function has logged nothing in this process. */
funcd__log_fn *funcd__logstore_find(funcd_logstore *ls, const char *ns, const char *fn);
/* "logs/<ns>/<fn>/" into `out`; -1 if a name cannot be part of a key. */
int funcd__logstore_prefix(funcd_buf *out, const char *ns, const char *fn);
typedef struct funcd__keylist {
    char **keys; /* in byte order */
    size_t n, cap;
    int failed;
} funcd__keylist;

/* Every key under `prefix`. */
int funcd__logstore_keys(funcd_blob *blob, const char *prefix, funcd__keylist *out);
void funcd__keylist_free(funcd__keylist *kl);
/* A segment's name "[<node>/]<start>-<end>-<id>.jsonl" → its first and
 * last times. */
int funcd__logstore_seg_times(const char *name, int64_t *start, int64_t *end);
/* Reads an hour object: its header line parsed (NULL if it is not JSON) and
 * where the records begin. `*data` is malloc()ed. */
int funcd__logstore_hour_read(funcd_blob *blob, const char *key, char **data, size_t *len,
                              size_t *body_at, struct cJSON **header);
