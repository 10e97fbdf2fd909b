/*
 * The delivery queue (queue.h): records in the store, bodies in the blob,
 * one dispatcher on the lease holder's loop.
 *
 * An item's life, as its record's `state` says:
 *
 *   submit ─> Pending ─ attempt ─> Running ─┬─> Succeeded (2xx/3xx)
 *                ^                          ├─> Failed (the function answered 4xx but
 *                │                          │   408/429: retrying cannot change it)
 *                └──── backoff ─────────────┼─ (5xx, no answer, timeout) while attempts remain
 *                                           └─> DeadLettered (after the last attempt)
 *
 * `Running` is written before the attempt is sent: a dispatcher that dies
 * leaves it so, and the next one makes that attempt again with the same
 * invocation id (at-least-once; the only duplicates are attempts that were
 * running). Every write of a record names the revision it read, so two
 * dispatchers (a leader that has just lost the lease and the new one) never
 * both record an outcome: the one that loses the compare-and-swap forgets
 * the item.
 *
 * The dispatcher keeps the items it knows in a list ordered by their next
 * attempt, and a table by id. It learns of work from this node's
 * submissions (an inbox any thread writes) and, every tick, from the index
 * /queue/ (submissions of other nodes, replays, a lease taken over).
 */
#include "eventing/queue.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "cluster/nodes.h"
#include "eventing/queue_internal.h"
#include "funcd/sys/error.h"
#include "invoke/invoke.h"
#include "port/blob.h"
#include "port/store.h"
#include "util/misc.h"

#define DEFAULT_IN_FLIGHT 64
#define DEFAULT_RETENTION_MS (3600 * 1000ULL)
#define DEFAULT_DLQ_RETENTION_MS (7 * 24 * 3600 * 1000ULL)
#define DEFAULT_DLQ_MAX 10000
#define DEFAULT_TICK_MS 1000
#define SWEEP_EVERY_MS 60000
#define STORE_RETRY_MS 1000 /* the store was away: look again this much later */
#define BUCKETS 4096
#define RECOUNT_MS (FUNCD_QUEUE_RETRY_AFTER_S * 1000) /* a full namespace is counted again */

typedef struct qitem {
    char ns[256];
    char id[FUNCD_QUEUE_ID_MAX];
    int64_t next_ms;
    int running;
    struct qitem *prev, *next; /* the schedule, by next_ms; or not linked while running */
    struct qitem *hnext;       /* the table */
    /* while running */
    funcd_queue *q;
    cJSON *rec;
    uint64_t rev;
    void *body;
    size_t body_len;
    char **headers;
} qitem;

typedef struct inbox_entry {
    char ns[256];
    char id[FUNCD_QUEUE_ID_MAX];
    struct inbox_entry *next;
} inbox_entry;

/* What a namespace holds in the queue as this node knows it (the caps,
 * max_pending and max_bytes): counted from the store, then kept up to date
 * with what this node submits, finishes and sweeps. A node that does not
 * dispatch (a cluster) does not see items finish, so its figures only grow:
 * a namespace that looks full is counted again (at most every
 * RECOUNT_MS) before a submission is refused. `anon` is the part of the
 * figures that anonymous items hold (their records say "anonymous"), held
 * within the anonymous share of each cap. */
typedef struct ns_usage {
    char ns[256];
    uint64_t pending, bytes;
    uint64_t anon_pending, anon_bytes;
    int counted;
    int64_t counted_ms; /* monotonic */
    struct ns_usage *next;
} ns_usage;

typedef struct outcome_sub {
    char *prefix;
    funcd_queue_outcome_fn fn;
    void *arg;
    struct outcome_sub *next;
} outcome_sub;

struct funcd_queue {
    funcd_queue_config cfg;
    qitem *buckets[BUCKETS];
    qitem *head, *tail; /* the schedule */
    unsigned waiting, running;
    int leading, closed, abandoned;
    int dispatching; /* inside dispatch: an attempt that ends at once does not re-enter it */
    struct event *wake; /* the schedule's head is due */
    struct event *tick; /* leadership, the index, the sweeps */
    struct event *kick; /* the inbox has entries */
    pthread_mutex_t lock; /* the inbox */
    inbox_entry *inbox;
    int64_t next_sweep_ms;
    outcome_sub *subs;
    funcd_callbacks callbacks; /* X-Callback-Url deliveries on their way */
    uint64_t rng;
    pthread_mutex_t usage_lock; /* `usage` (submissions come from any thread) */
    ns_usage *usage;
};

/* ---- names and keys --------------------------------------------------- */

static int id_char(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           c == '.' || c == '_' || c == ':' || c == '-';
}

int funcd_queue_id_ok(const char *id)
{
    size_t n = 0;
    for (; id[n]; n++)
        if (!id_char(id[n]))
            return 0;
    return n > 0 && n <= FUNCD_QUEUE_SAFE_ID_MAX;
}

/* The id an item is kept under: its own when safe in keys and headers,
 * else "h-" and 40 hex digits of its SHA-256 (the same id, the same key:
 * idempotency holds). */
static void stored_id(const char *id, char *out, size_t len)
{
    if (funcd_queue_id_ok(id)) {
        snprintf(out, len, "%s", id);
        return;
    }
    char hex[65];
    funcd_sha256_hex(id, strlen(id), hex);
    snprintf(out, len, "h-%.40s", hex);
}

void funcd_queue_key(char *out, size_t len, const char *prefix, const char *ns, const char *id)
{
    snprintf(out, len, "%s%s/%s", prefix, ns, id);
}

static void blob_key(char *out, size_t len, const char *ns, const char *id, const char *what)
{
    snprintf(out, len, "invocations/%s/%s/%s", ns, id, what);
}

/* ---- records ----------------------------------------------------------- */

const char *funcd_queue_state_name(funcd_queue_state s)
{
    static const char *const names[] = {"Pending", "Running", "Succeeded", "Failed",
                                        "DeadLettered"};
    return names[s];
}

int funcd_queue_state_final(const char *state)
{
    return state && (strcmp(state, "Succeeded") == 0 || strcmp(state, "Failed") == 0 ||
                     strcmp(state, "DeadLettered") == 0);
}

static int64_t num_at(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : 0;
}

static const char *str_at(const cJSON *o, const char *name)
{
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, name));
}

static void set_num(cJSON *o, const char *name, double v)
{
    cJSON *n = cJSON_CreateNumber(v);
    if (n && !cJSON_ReplaceItemInObjectCaseSensitive(o, name, n))
        cJSON_AddItemToObject(o, name, n);
}

static void set_str(cJSON *o, const char *name, const char *v)
{
    cJSON_DeleteItemFromObjectCaseSensitive(o, name);
    if (v)
        cJSON_AddStringToObject(o, name, v);
}

static void set_bool(cJSON *o, const char *name, int v)
{
    cJSON_DeleteItemFromObjectCaseSensitive(o, name);
    cJSON_AddBoolToObject(o, name, v);
}

/* Reads a record: 0, FUNCD_ENOTFOUND, or the store's error. `len` (or
 * NULL) gets its length as stored. */
static int get_record_len(funcd_store *s, const char *key, cJSON **out, uint64_t *rev,
                          size_t *len)
{
    funcd_store_value v = {0};
    int rc = funcd_port_store_get(s, key, &v);
    if (rc < 0)
        return rc;
    *out = cJSON_ParseWithLength(v.value, v.len);
    *rev = v.revision;
    if (len)
        *len = v.len;
    free(v.value);
    return *out ? 0 : funcd_error_set(FUNCD_EIO, "the record %s is not JSON", key);
}

static int get_record(funcd_store *s, const char *key, cJSON **out, uint64_t *rev)
{
    return get_record_len(s, key, out, rev, NULL);
}

/* Writes a record; `len` (or NULL) gets its length as stored. */
static int put_record_len(funcd_store *s, const char *key, const cJSON *rec, uint64_t expected,
                          uint64_t *rev, size_t *len)
{
    char *text = cJSON_PrintUnformatted(rec);
    if (!text)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory writing %s", key);
    int rc = funcd_port_store_put(s, key, text, strlen(text), expected, rev);
    if (len)
        *len = strlen(text);
    free(text);
    return rc;
}

static int put_record(funcd_store *s, const char *key, const cJSON *rec, uint64_t expected,
                      uint64_t *rev)
{
    return put_record_len(s, key, rec, expected, rev, NULL);
}

/* ---- the table and the schedule --------------------------------------- */

static unsigned bucket(const char *ns, const char *id)
{
    uint32_t h = 2166136261u;
    for (const char *p = ns; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    h = (h ^ '/') * 16777619u;
    for (const char *p = id; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return h % BUCKETS;
}

static qitem *find(funcd_queue *q, const char *ns, const char *id)
{
    for (qitem *it = q->buckets[bucket(ns, id)]; it; it = it->hnext)
        if (strcmp(it->id, id) == 0 && strcmp(it->ns, ns) == 0)
            return it;
    return NULL;
}

static void unschedule(funcd_queue *q, qitem *it)
{
    if (it->prev)
        it->prev->next = it->next;
    else if (q->head == it)
        q->head = it->next;
    else
        return; /* not linked */
    if (it->next)
        it->next->prev = it->prev;
    else
        q->tail = it->prev;
    it->prev = it->next = NULL;
    q->waiting--;
}

/* Inserted by time from the tail: new work is the latest, so this is
 * usually one step. */
static void schedule(funcd_queue *q, qitem *it, int64_t at)
{
    it->next_ms = at;
    qitem *after = q->tail;
    while (after && after->next_ms > at)
        after = after->prev;
    it->prev = after;
    it->next = after ? after->next : q->head;
    if (it->next)
        it->next->prev = it;
    else
        q->tail = it;
    if (after)
        after->next = it;
    else
        q->head = it;
    q->waiting++;
}

static void running_clear(qitem *it)
{
    cJSON_Delete(it->rec);
    it->rec = NULL;
    free(it->body);
    it->body = NULL;
    funcd_strv_free(it->headers);
    it->headers = NULL;
}

static void forget(funcd_queue *q, qitem *it)
{
    unschedule(q, it);
    for (qitem **pp = &q->buckets[bucket(it->ns, it->id)]; *pp; pp = &(*pp)->hnext)
        if (*pp == it) {
            *pp = it->hnext;
            break;
        }
    running_clear(it);
    free(it);
}

static qitem *learn(funcd_queue *q, const char *ns, const char *id, int64_t at)
{
    if (strlen(ns) >= sizeof(((qitem *)0)->ns) || strlen(id) >= FUNCD_QUEUE_ID_MAX)
        return NULL;
    qitem *it = find(q, ns, id);
    if (it)
        return it;
    if (!(it = calloc(1, sizeof(*it))))
        return NULL;
    snprintf(it->ns, sizeof(it->ns), "%s", ns);
    snprintf(it->id, sizeof(it->id), "%s", id);
    it->q = q;
    unsigned b = bucket(ns, id);
    it->hnext = q->buckets[b];
    q->buckets[b] = it;
    schedule(q, it, at);
    return it;
}

/* ---- caps per namespace ------------------------------------------------ */

/* The bytes a record (or a dead letter) holds: itself and its bodies. A
 * dead-lettered invocation's request body is its dead letter's. */
static uint64_t held_by(const cJSON *rec, size_t rec_len, int deadletter)
{
    const char *state = str_at(rec, "state");
    uint64_t n = rec_len;
    if (deadletter || !state || strcmp(state, "DeadLettered") != 0)
        n += (uint64_t)num_at(rec, "bodyLen");
    if (!deadletter && funcd_queue_state_final(state))
        n += (uint64_t)num_at(rec, "responseLen");
    return n;
}

static int anonymous_rec(const cJSON *rec)
{
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rec, "anonymous"));
}

typedef struct ns_count {
    uint64_t pending, bytes;
    uint64_t anon_pending, anon_bytes;
    int deadletters;
} ns_count;

static int on_count_key(const funcd_store_kv *kv, void *arg)
{
    ns_count *c = arg;
    cJSON *rec = cJSON_ParseWithLength(kv->value, kv->len);
    if (!rec)
        return 0;
    uint64_t bytes = held_by(rec, kv->len, c->deadletters);
    int pending = !c->deadletters && !funcd_queue_state_final(str_at(rec, "state"));
    c->bytes += bytes;
    c->pending += (uint64_t)pending;
    if (anonymous_rec(rec)) {
        c->anon_bytes += bytes;
        c->anon_pending += (uint64_t)pending;
    }
    cJSON_Delete(rec);
    return 0;
}

/* Counts what namespace `ns` holds from the store. */
static int count_ns(funcd_queue *q, const char *ns, ns_count *c)
{
    char prefix[300];
    snprintf(prefix, sizeof(prefix), "%s%s/", FUNCD_QUEUE_RECORDS, ns);
    int rc = funcd_port_store_list(q->cfg.store, prefix, on_count_key, c, NULL);
    c->deadletters = 1;
    snprintf(prefix, sizeof(prefix), "%s%s/", FUNCD_QUEUE_DEADLETTERS, ns);
    return rc < 0 ? rc : funcd_port_store_list(q->cfg.store, prefix, on_count_key, c, NULL);
}

/* Under usage_lock. NULL when out of memory. */
static ns_usage *usage_of(funcd_queue *q, const char *ns)
{
    for (ns_usage *u = q->usage; u; u = u->next)
        if (strcmp(u->ns, ns) == 0)
            return u;
    ns_usage *u = calloc(1, sizeof(*u));
    if (u) {
        snprintf(u->ns, sizeof(u->ns), "%s", ns);
        u->next = q->usage;
        q->usage = u;
    }
    return u;
}

/* The anonymous share of the caps (0: that cap is off). */
static uint64_t anon_max_pending(const funcd_queue *q)
{
    uint64_t n = q->cfg.max_pending / 100 * q->cfg.anonymous_share +
                 q->cfg.max_pending % 100 * q->cfg.anonymous_share / 100;
    return n || !q->cfg.anonymous_share ? n : 1;
}

static uint64_t anon_max_bytes(const funcd_queue *q)
{
    return q->cfg.max_bytes / 100 * q->cfg.anonymous_share +
           q->cfg.max_bytes % 100 * q->cfg.anonymous_share / 100;
}

/* Which cap an item of `bytes` would pass: 0 none, 1 max_pending, 2
 * max_bytes, 3 the anonymous share of max_pending, 4 of max_bytes. */
static int over(const funcd_queue *q, const ns_usage *u, uint64_t bytes, int anonymous)
{
    if (q->cfg.max_pending && u->pending + 1 > q->cfg.max_pending)
        return 1;
    if (q->cfg.max_bytes && u->bytes + bytes > q->cfg.max_bytes)
        return 2;
    if (anonymous && q->cfg.max_pending && u->anon_pending + 1 > anon_max_pending(q))
        return 3;
    if (anonymous && q->cfg.max_bytes && u->anon_bytes + bytes > anon_max_bytes(q))
        return 4;
    return 0;
}

/* Takes a place for an item of `bytes` in namespace `ns` (an anonymous
 * one within the namespace's anonymous share), or refuses it (FUNCD_ENOSPC
 * naming the cap). */
static int admit(funcd_queue *q, const char *ns, uint64_t bytes, int anonymous)
{
    if (!q->cfg.max_pending && !q->cfg.max_bytes)
        return 0;
    pthread_mutex_lock(&q->usage_lock);
    ns_usage *u = usage_of(q, ns);
    if (!u) {
        pthread_mutex_unlock(&q->usage_lock);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory queueing an invocation");
    }
    int64_t now = funcd_mono_ms();
    int recount = !u->counted ||
                  (over(q, u, bytes, anonymous) && now - u->counted_ms >= RECOUNT_MS);
    if (recount) {
        u->counted_ms = now; /* this thread counts: others meanwhile go by the figures */
        pthread_mutex_unlock(&q->usage_lock);
        ns_count c = {0};
        int rc = count_ns(q, ns, &c);
        pthread_mutex_lock(&q->usage_lock);
        if (rc < 0) {
            pthread_mutex_unlock(&q->usage_lock);
            return rc;
        }
        u->pending = c.pending;
        u->bytes = c.bytes;
        u->anon_pending = c.anon_pending;
        u->anon_bytes = c.anon_bytes;
        u->counted = 1;
        u->counted_ms = now;
    }
    uint64_t pending = u->pending, held = u->bytes;
    uint64_t anon_pending = u->anon_pending, anon_held = u->anon_bytes;
    int refused = over(q, u, bytes, anonymous);
    if (!refused) {
        u->pending++;
        u->bytes += bytes;
        if (anonymous) {
            u->anon_pending++;
            u->anon_bytes += bytes;
        }
    }
    pthread_mutex_unlock(&q->usage_lock);
    if (!refused)
        return 0;
    if (recount && refused <= 2) /* once per count, not per refusal */
        funcd_log(q->cfg.logger, FUNCD_LOG_WARN, "delivery queue: namespace %s is full (%llu "
                  "items pending, %llu bytes held): submissions are refused", ns,
                  (unsigned long long)pending, (unsigned long long)held);
    else if (recount)
        funcd_log(q->cfg.logger, FUNCD_LOG_WARN, "delivery queue: namespace %s: anonymous "
                  "submissions hold their share (%llu items pending, %llu bytes held, of %llu "
                  "and %llu in all): theirs are refused", ns, (unsigned long long)anon_pending,
                  (unsigned long long)anon_held, (unsigned long long)pending,
                  (unsigned long long)held);
    /* The caller may be anyone: the namespace's own figures stay in the log. */
    if (refused == 1)
        return funcd_error_set(FUNCD_ENOSPC, "namespace %s has as many invocations and events "
                               "waiting for delivery as the queue holds (funcd "
                               "--queue-max-pending %llu)", ns,
                               (unsigned long long)q->cfg.max_pending);
    if (refused == 2)
        return funcd_error_set(FUNCD_ENOSPC, "namespace %s holds as many bytes in the delivery "
                               "queue as it may (funcd --queue-max-bytes %llu) until finished "
                               "invocations expire or dead letters are purged", ns,
                               (unsigned long long)q->cfg.max_bytes);
    if (refused == 3)
        return funcd_error_set(FUNCD_ENOSPC, "namespace %s has as many invocations and events "
                               "of unauthenticated callers waiting for delivery as the queue "
                               "takes from them (funcd --queue-anonymous-share %u percent of "
                               "--queue-max-pending %llu)", ns, q->cfg.anonymous_share,
                               (unsigned long long)q->cfg.max_pending);
    return funcd_error_set(FUNCD_ENOSPC, "namespace %s holds as many bytes of unauthenticated "
                           "callers in the delivery queue as it takes from them (funcd "
                           "--queue-anonymous-share %u percent of --queue-max-bytes %llu) until "
                           "finished invocations expire or dead letters are purged", ns,
                           q->cfg.anonymous_share, (unsigned long long)q->cfg.max_bytes);
}

/* What this node saw leave or grow: an item final (`done`), bytes added
 * (its answer) or freed (`freed`, a sweep); of an anonymous item, also in
 * the anonymous figures. */
static void usage_change(funcd_queue *q, const char *ns, int anonymous, int done, uint64_t added,
                         uint64_t freed)
{
    pthread_mutex_lock(&q->usage_lock);
    for (ns_usage *u = q->usage; u; u = u->next)
        if (strcmp(u->ns, ns) == 0) {
            u->pending -= done && u->pending ? 1 : 0;
            u->bytes += added;
            u->bytes -= freed < u->bytes ? freed : u->bytes;
            if (anonymous) {
                u->anon_pending -= done && u->anon_pending ? 1 : 0;
                u->anon_bytes += added;
                u->anon_bytes -= freed < u->anon_bytes ? freed : u->anon_bytes;
            }
            break;
        }
    pthread_mutex_unlock(&q->usage_lock);
}

/* ---- dispatching ------------------------------------------------------- */

static void dispatch(funcd_queue *q);

static void arm_wake(funcd_queue *q)
{
    event_del(q->wake);
    if (!q->head || !q->leading || q->closed)
        return;
    int64_t wait = q->head->next_ms - funcd_now_ms();
    if (wait < 0)
        wait = 0;
    struct timeval tv = {(time_t)(wait / 1000), (suseconds_t)(wait % 1000) * 1000};
    event_add(q->wake, &tv);
}

/* Exponential from the initial delay, capped, with jitter in [0.8, 1.0] of
 * it: gaps spread out yet still grow with every attempt. */
static int64_t backoff_ms(funcd_queue *q, const cJSON *delivery, int64_t attempts)
{
    int64_t initial = num_at(delivery, "backoffInitialMs");
    int64_t max = num_at(delivery, "backoffMaxMs");
    int64_t d = initial;
    for (int64_t i = 1; i < attempts && d < max; i++)
        d *= 2;
    if (d > max)
        d = max;
    q->rng ^= q->rng << 13;
    q->rng ^= q->rng >> 7;
    q->rng ^= q->rng << 17;
    return d - (int64_t)((double)(q->rng % 1001) / 1000.0 * (double)d * 0.2);
}

static void notify(funcd_queue *q, const qitem *it, funcd_queue_outcome outcome, int status,
                   const char *error)
{
    const char *origin = str_at(it->rec, "origin");
    for (outcome_sub *s = q->subs; s; s = s->next)
        if (origin && funcd_has_prefix(origin, s->prefix))
            s->fn(it->ns, origin, it->id, outcome, status, error, s->arg);
}

/* The request blob is the invocation record's and the dead letter's: it
 * goes once neither holds it. */
static void drop_request_blob(funcd_queue *q, const char *ns, const char *id, int unless_record,
                              int unless_deadletter)
{
    char key[600];
    funcd_store_value v = {0};
    if (unless_record) {
        funcd_queue_key(key, sizeof(key), FUNCD_QUEUE_RECORDS, ns, id);
        if (funcd_port_store_get(q->cfg.store, key, &v) == 0) {
            free(v.value);
            return;
        }
    }
    if (unless_deadletter) {
        funcd_queue_key(key, sizeof(key), FUNCD_QUEUE_DEADLETTERS, ns, id);
        if (funcd_port_store_get(q->cfg.store, key, &v) == 0) {
            free(v.value);
            return;
        }
    }
    blob_key(key, sizeof(key), ns, id, "request");
    funcd_port_blob_del(q->cfg.blob, key);
}

typedef struct dlq_scan {
    char **keys;
    uint64_t *created;
    size_t n, cap;
} dlq_scan;

static int on_dlq_key(const funcd_store_kv *kv, void *arg)
{
    dlq_scan *d = arg;
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 64;
        char **k = realloc(d->keys, cap * sizeof(*k));
        if (k)
            d->keys = k;
        uint64_t *c = realloc(d->created, cap * sizeof(*c));
        if (c)
            d->created = c;
        if (!k || !c)
            return 1;
        d->cap = cap;
    }
    if (!(d->keys[d->n] = strdup(kv->key)))
        return 1;
    d->created[d->n++] = kv->create_revision;
    return 0;
}

/* Deletes dead letter `id` of `ns` (its key `key`), and its body unless
 * the invocation's record still holds it. What it held leaves the figures
 * with it (review18 L-4: purges and the cap's drops kept its bytes until a
 * recount); so it is read first (not JSON: deleted all the same, and a
 * recount finds its bytes gone). */
static int delete_deadletter(funcd_queue *q, const char *ns, const char *key, const char *id)
{
    cJSON *dl = NULL;
    uint64_t rev = 0;
    size_t len = 0;
    int rc = get_record_len(q->cfg.store, key, &dl, &rev, &len);
    if (rc < 0 && rc != FUNCD_EIO)
        return rc;
    uint64_t bytes = dl ? held_by(dl, len, 1) : 0;
    int anonymous = anonymous_rec(dl);
    cJSON_Delete(dl);
    rc = funcd_port_store_del(q->cfg.store, key, FUNCD_STORE_ANY, NULL);
    if (rc == 0) {
        drop_request_blob(q, ns, id, 1, 0);
        usage_change(q, ns, anonymous, 0, 0, bytes);
    }
    return rc;
}

/* Over the cap: the oldest dead letters (by creation) go, counted in
 * /deadletterdrops/<ns>. */
static void dlq_cap(funcd_queue *q, const char *ns)
{
    char prefix[300];
    snprintf(prefix, sizeof(prefix), "%s%s/", FUNCD_QUEUE_DEADLETTERS, ns);
    dlq_scan d = {0};
    funcd_port_store_list(q->cfg.store, prefix, on_dlq_key, &d, NULL);
    unsigned max = q->cfg.dlq_max_entries;
    size_t dropped = 0;
    while (d.n - dropped > max) {
        size_t oldest = SIZE_MAX;
        for (size_t i = 0; i < d.n; i++)
            if (d.keys[i] && (oldest == SIZE_MAX || d.created[i] < d.created[oldest]))
                oldest = i;
        if (oldest == SIZE_MAX)
            break;
        delete_deadletter(q, ns, d.keys[oldest], d.keys[oldest] + strlen(prefix));
        free(d.keys[oldest]);
        d.keys[oldest] = NULL;
        dropped++;
    }
    if (dropped) {
        char key[300];
        snprintf(key, sizeof(key), "%s%s", FUNCD_QUEUE_DLQ_DROPS, ns);
        for (int tries = 0; tries < 5; tries++) {
            cJSON *rec = NULL;
            uint64_t rev = 0;
            int rc = get_record(q->cfg.store, key, &rec, &rev);
            if (rc == FUNCD_ENOTFOUND) {
                rec = cJSON_CreateObject();
                rev = FUNCD_STORE_ABSENT;
            } else if (rc < 0) {
                break;
            }
            set_num(rec, "dropped", (double)(num_at(rec, "dropped") + (int64_t)dropped));
            rc = put_record(q->cfg.store, key, rec, rev, NULL);
            cJSON_Delete(rec);
            if (rc != FUNCD_ECONFLICT && rc != FUNCD_EEXISTS)
                break;
        }
        funcd_log(q->cfg.logger, FUNCD_LOG_WARN, "dead-letter queue of namespace %s is over %u "
                  "entries: dropped the %zu oldest", ns, max, dropped);
    }
    for (size_t i = 0; i < d.n; i++)
        free(d.keys[i]);
    free(d.keys);
    free(d.created);
}

static void deliver_callback(funcd_queue *q, const qitem *it, const funcd_invoke_res *res);

/* Records how the attempt ended. */
static void on_attempt_done(const funcd_invoke_res *res, void *arg)
{
    qitem *it = arg;
    funcd_queue *q = it->q;
    q->running--;
    it->running = 0;
    if (q->abandoned) { /* funcd is going: the record stays Running, the next dispatcher redoes it */
        forget(q, it);
        return;
    }
    cJSON *rec = it->rec;
    const cJSON *delivery = cJSON_GetObjectItemCaseSensitive(rec, "delivery");
    int64_t attempts = num_at(rec, "attempts");
    int answered = res->error == NULL;
    int ok = answered && res->status < 400;
    int final_failure = answered && res->status >= 400 && res->status < 500 &&
                        res->status != 408 && res->status != 429;
    int64_t now = funcd_now_ms();
    funcd_queue_state state = ok              ? FUNCD_QSTATE_SUCCEEDED
                              : final_failure ? FUNCD_QSTATE_FAILED
                              : attempts >= num_at(delivery, "attempts")
                                  ? FUNCD_QSTATE_DEADLETTERED
                                  : FUNCD_QSTATE_PENDING;
    char key[600];
    set_str(rec, "state", funcd_queue_state_name(state));
    set_num(rec, "updatedMs", (double)now);
    set_num(rec, "status", res->status);
    set_str(rec, "error", res->error);
    if (state != FUNCD_QSTATE_PENDING) {
        set_num(rec, "finishedMs", (double)now);
        set_num(rec, "responseLen", (double)res->body_len);
        set_str(rec, "contentType", res->content_type);
        set_bool(rec, "truncated", res->truncated);
        blob_key(key, sizeof(key), it->ns, it->id, "response");
        if (res->body_len)
            funcd_port_blob_put(q->cfg.blob, key, res->body, res->body_len);
    } else {
        set_num(rec, "nextAttemptMs", (double)(now + backoff_ms(q, delivery, attempts)));
    }
    size_t dl_len = 0; /* the dead letter's record, counted with it (its body is already) */
    if (state == FUNCD_QSTATE_DEADLETTERED) {
        cJSON *dl = cJSON_Duplicate(rec, 1);
        if (dl) {
            set_num(dl, "deadLetteredMs", (double)now);
            funcd_queue_key(key, sizeof(key), FUNCD_QUEUE_DEADLETTERS, it->ns, it->id);
            if (put_record_len(q->cfg.store, key, dl, FUNCD_STORE_ANY, NULL, &dl_len) < 0) {
                dl_len = 0;
                funcd_log(q->cfg.logger, FUNCD_LOG_WARN, "invocation %s/%s: cannot write its "
                          "dead letter: %s", it->ns, it->id, funcd_error_last()->message);
            }
            cJSON_Delete(dl);
        }
    }
    funcd_queue_key(key, sizeof(key), FUNCD_QUEUE_RECORDS, it->ns, it->id);
    int rc = put_record(q->cfg.store, key, rec, it->rev, &it->rev);
    if (rc < 0) {
        /* Taken over (another dispatcher) or deleted: not ours to record. The
         * store away: the record says Running, the attempt is made again. */
        if (rc == FUNCD_EUNAVAILABLE || rc == FUNCD_EIO || rc == FUNCD_ENOSPC) {
            funcd_log(q->cfg.logger, FUNCD_LOG_WARN, "invocation %s/%s: cannot record attempt "
                      "%lld: %s; it will be made again", it->ns, it->id, (long long)attempts,
                      funcd_error_last()->message);
            running_clear(it);
            schedule(q, it, now + STORE_RETRY_MS);
        } else {
            forget(q, it);
        }
        dispatch(q);
        return;
    }
    if (state != FUNCD_QSTATE_PENDING) {
        funcd_queue_key(key, sizeof(key), FUNCD_QUEUE_INDEX, it->ns, it->id);
        funcd_port_store_del(q->cfg.store, key, FUNCD_STORE_ANY, NULL);
        usage_change(q, it->ns, anonymous_rec(rec), 1, res->body_len + dl_len, 0);
        if (state == FUNCD_QSTATE_DEADLETTERED)
            dlq_cap(q, it->ns);
        if (str_at(rec, "callbackUrl"))
            deliver_callback(q, it, res);
    }
    notify(q, it,
           state == FUNCD_QSTATE_PENDING        ? FUNCD_QUEUE_RETRIED
           : state == FUNCD_QSTATE_DEADLETTERED ? FUNCD_QUEUE_DEADLETTERED
                                               : FUNCD_QUEUE_DELIVERED,
           res->status, res->error);
    if (state == FUNCD_QSTATE_PENDING) {
        int64_t at = num_at(rec, "nextAttemptMs");
        running_clear(it);
        schedule(q, it, at);
    } else {
        forget(q, it);
    }
    dispatch(q);
}

static char **headers_of(const cJSON *rec)
{
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(rec, "headers");
    int n = cJSON_GetArraySize(h);
    char **v = calloc((size_t)n * 2 + 1, sizeof(*v));
    if (!v)
        return NULL;
    int k = 0;
    const cJSON *pair;
    cJSON_ArrayForEach(pair, h)
    {
        const char *name = cJSON_GetStringValue(cJSON_GetArrayItem(pair, 0));
        const char *value = cJSON_GetStringValue(cJSON_GetArrayItem(pair, 1));
        if (!name || !value)
            continue;
        if (!(v[k] = strdup(name)) || !(v[k + 1] = strdup(value))) {
            funcd_strv_free(v);
            return NULL;
        }
        k += 2;
    }
    return v;
}

/* One attempt of `it` (taken off the schedule). */
static void start(funcd_queue *q, qitem *it)
{
    char key[600];
    funcd_queue_key(key, sizeof(key), FUNCD_QUEUE_RECORDS, it->ns, it->id);
    int64_t now = funcd_now_ms();
    int rc = get_record(q->cfg.store, key, &it->rec, &it->rev);
    if (rc == FUNCD_ENOTFOUND || (rc == 0 && funcd_queue_state_final(str_at(it->rec, "state")))) {
        /* done or gone: an index entry left behind goes too */
        funcd_queue_key(key, sizeof(key), FUNCD_QUEUE_INDEX, it->ns, it->id);
        funcd_port_store_del(q->cfg.store, key, FUNCD_STORE_ANY, NULL);
        forget(q, it);
        return;
    }
    if (rc < 0) {
        running_clear(it);
        schedule(q, it, now + STORE_RETRY_MS);
        return;
    }
    cJSON *rec = it->rec;
    const char *state = str_at(rec, "state");
    int recovering = state && strcmp(state, "Running") == 0;
    int64_t at = num_at(rec, "nextAttemptMs");
    if (!recovering && at > now) { /* known early (from the index): wait for its time */
        running_clear(it);
        schedule(q, it, at);
        return;
    }
    /* A Running record is an attempt a dispatcher began and never recorded:
     * it is made again, as the same attempt. */
    int64_t attempts = num_at(rec, "attempts") + (recovering ? 0 : 1);
    if (attempts < 1)
        attempts = 1;
    set_str(rec, "state", "Running");
    set_num(rec, "attempts", (double)attempts);
    set_num(rec, "updatedMs", (double)now);
    if ((rc = put_record(q->cfg.store, key, rec, it->rev, &it->rev)) < 0) {
        if (rc == FUNCD_EUNAVAILABLE || rc == FUNCD_EIO || rc == FUNCD_ENOSPC) {
            running_clear(it);
            schedule(q, it, now + STORE_RETRY_MS);
        } else {
            forget(q, it); /* another dispatcher has it */
        }
        return;
    }
    if (num_at(rec, "bodyLen") > 0) {
        blob_key(key, sizeof(key), it->ns, it->id, "request");
        if (funcd_port_blob_get(q->cfg.blob, key, 0, FUNCD_BLOB_TO_END, &it->body,
                                &it->body_len) < 0) {
            it->body = NULL;
            it->body_len = 0;
            funcd_log(q->cfg.logger, FUNCD_LOG_WARN, "invocation %s/%s: its body is gone (%s); "
                      "delivered without it", it->ns, it->id, funcd_error_last()->message);
        }
    }
    it->headers = headers_of(rec);
    const cJSON *delivery = cJSON_GetObjectItemCaseSensitive(rec, "delivery");
    funcd_invoke_req req = {
        .ns = it->ns,
        .name = str_at(rec, "function"),
        .method = str_at(rec, "method"),
        .path = str_at(rec, "path"),
        .headers = (const char *const *)it->headers,
        .body = it->body,
        .body_len = it->body_len,
        .timeout_ms = (uint64_t)num_at(delivery, "timeoutMs"),
        .invocation_id = it->id,
    };
    it->running = 1;
    q->running++;
    if (funcd_invoke(q->cfg.invoker, &req, on_attempt_done, it) < 0) {
        /* A record funcd_invoke refuses cannot become deliverable: final. */
        funcd_invoke_res res = {.status = 400, .error = funcd_error_last()->message};
        on_attempt_done(&res, it);
    }
}

static void dispatch(funcd_queue *q)
{
    if (!q->leading || q->closed || q->dispatching)
        return;
    q->dispatching = 1;
    int64_t now = funcd_now_ms();
    while (q->head && q->head->next_ms <= now && q->running < q->cfg.max_in_flight) {
        qitem *it = q->head;
        unschedule(q, it);
        start(q, it);
    }
    q->dispatching = 0;
    arm_wake(q);
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    dispatch(arg);
}

/* ---- learning of work -------------------------------------------------- */

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    funcd_queue *q = arg;
    pthread_mutex_lock(&q->lock);
    inbox_entry *list = q->inbox;
    q->inbox = NULL;
    pthread_mutex_unlock(&q->lock);
    int64_t now = funcd_now_ms();
    while (list) {
        inbox_entry *e = list;
        list = e->next;
        if (q->leading && !q->closed)
            learn(q, e->ns, e->id, now);
        free(e);
    }
    dispatch(q);
}

static int on_index_key(const funcd_store_kv *kv, void *arg)
{
    funcd_queue *q = arg;
    /* "/queue/<ns>/<id>" */
    const char *rest = kv->key + strlen(FUNCD_QUEUE_INDEX);
    const char *slash = strchr(rest, '/');
    if (!slash || (size_t)(slash - rest) >= sizeof(((qitem *)0)->ns))
        return 0;
    char ns[256];
    memcpy(ns, rest, (size_t)(slash - rest));
    ns[slash - rest] = '\0';
    learn(q, ns, slash + 1, funcd_now_ms());
    return 0;
}

typedef struct sweep_entry {
    char *key;
    uint64_t rev;
    uint64_t bytes; /* what deleting it frees */
    int anonymous;
    struct sweep_entry *next;
} sweep_entry;

typedef struct sweep {
    int64_t before;
    const char *time_field;
    int final_only;
    sweep_entry *list;
} sweep;

static int on_sweep_key(const funcd_store_kv *kv, void *arg)
{
    sweep *s = arg;
    cJSON *rec = cJSON_ParseWithLength(kv->value, kv->len);
    if (!rec)
        return 0;
    int64_t t = num_at(rec, s->time_field);
    int due = (!s->final_only || funcd_queue_state_final(str_at(rec, "state"))) && t &&
              t < s->before;
    uint64_t bytes = held_by(rec, kv->len, !s->final_only);
    int anonymous = anonymous_rec(rec);
    cJSON_Delete(rec);
    sweep_entry *e = due ? calloc(1, sizeof(*e)) : NULL;
    if (e && (e->key = strdup(kv->key))) {
        e->rev = kv->revision;
        e->bytes = bytes;
        e->anonymous = anonymous;
        e->next = s->list;
        s->list = e;
    } else {
        free(e);
    }
    return 0;
}

/* Final records past the invocation retention and dead letters past theirs
 * are deleted (the listing first, the deletes after: a store callback must
 * not call back into the store). */
static void sweep_prefix(funcd_queue *q, const char *prefix, const char *time_field,
                         uint64_t retention, int records)
{
    sweep s = {funcd_now_ms() - (int64_t)retention, time_field, records, NULL};
    funcd_port_store_list(q->cfg.store, prefix, on_sweep_key, &s, NULL);
    while (s.list) {
        sweep_entry *e = s.list;
        s.list = e->next;
        if (funcd_port_store_del(q->cfg.store, e->key, e->rev, NULL) == 0) {
            const char *rest = e->key + strlen(prefix);
            const char *slash = strchr(rest, '/');
            if (slash && slash - rest < 256) {
                char ns[256], key[600];
                memcpy(ns, rest, (size_t)(slash - rest));
                ns[slash - rest] = '\0';
                if (records) {
                    blob_key(key, sizeof(key), ns, slash + 1, "response");
                    funcd_port_blob_del(q->cfg.blob, key);
                }
                drop_request_blob(q, ns, slash + 1, !records, records);
                usage_change(q, ns, e->anonymous, 0, 0, e->bytes);
            }
        }
        free(e->key);
        free(e);
    }
}

/* Every minute, or every half of the shorter retention when that is less
 * (a short --dlq-retention is kept to within half of itself); never more
 * often than the tick. */
static uint64_t sweep_every_ms(const funcd_queue *q)
{
    uint64_t every = SWEEP_EVERY_MS;
    uint64_t shortest = q->cfg.dlq_retention_ms < q->cfg.invocation_retention_ms
                            ? q->cfg.dlq_retention_ms
                            : q->cfg.invocation_retention_ms;
    if (shortest / 2 < every)
        every = shortest / 2;
    return every < q->cfg.tick_ms ? q->cfg.tick_ms : every;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    funcd_queue *q = arg;
    if (q->closed)
        return;
    int lead = funcd_cluster_is_leader(q->cfg.cluster);
    if (lead != q->leading) {
        funcd_log(q->cfg.logger, FUNCD_LOG_INFO, "delivery queue: %s",
                  lead ? "this node dispatches (it holds the cluster lease)"
                       : "this node no longer dispatches (it lost the cluster lease)");
        q->leading = lead;
        if (!lead) /* what waits is the new leader's now; attempts running finish */
            while (q->head)
                forget(q, q->head);
    }
    if (lead) {
        funcd_port_store_list(q->cfg.store, FUNCD_QUEUE_INDEX, on_index_key, q, NULL);
        int64_t now = funcd_now_ms();
        if (now >= q->next_sweep_ms) {
            q->next_sweep_ms = now + (int64_t)sweep_every_ms(q);
            sweep_prefix(q, FUNCD_QUEUE_RECORDS, "finishedMs", q->cfg.invocation_retention_ms, 1);
            sweep_prefix(q, FUNCD_QUEUE_DEADLETTERS, "deadLetteredMs", q->cfg.dlq_retention_ms, 0);
        }
        dispatch(q);
    }
}

/* ---- submitting -------------------------------------------------------- */

static void push_inbox(funcd_queue *q, const char *ns, const char *id)
{
    inbox_entry *e = calloc(1, sizeof(*e));
    if (!e)
        return; /* the tick's index listing finds it */
    snprintf(e->ns, sizeof(e->ns), "%s", ns);
    snprintf(e->id, sizeof(e->id), "%s", id);
    pthread_mutex_lock(&q->lock);
    e->next = q->inbox;
    q->inbox = e;
    pthread_mutex_unlock(&q->lock);
    event_active(q->kick, EV_READ, 0);
}

static int name_ok(const char *s)
{
    if (!s || !*s || strlen(s) > 253)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-' || *s == '.'))
            return 0;
    return 1;
}

static cJSON *new_record(const funcd_queue_item *item, const char *id, int64_t now)
{
    cJSON *rec = cJSON_CreateObject();
    cJSON *headers = cJSON_AddArrayToObject(rec, "headers");
    cJSON *delivery = cJSON_AddObjectToObject(rec, "delivery");
    if (!rec || !headers || !delivery) {
        cJSON_Delete(rec);
        return NULL;
    }
    cJSON_AddStringToObject(rec, "id", id);
    cJSON_AddStringToObject(rec, "namespace", item->ns);
    cJSON_AddStringToObject(rec, "function", item->function);
    cJSON_AddStringToObject(rec, "method", item->method ? item->method : "POST");
    cJSON_AddStringToObject(rec, "path", item->path ? item->path : "");
    for (const char *const *h = item->headers; h && h[0] && h[1]; h += 2) {
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateString(h[0]));
        cJSON_AddItemToArray(pair, cJSON_CreateString(h[1]));
        cJSON_AddItemToArray(headers, pair);
    }
    if (item->origin)
        cJSON_AddStringToObject(rec, "origin", item->origin);
    if (item->callback_url)
        cJSON_AddStringToObject(rec, "callbackUrl", item->callback_url);
    if (item->anonymous)
        cJSON_AddBoolToObject(rec, "anonymous", 1);
    const funcd_delivery *d = &item->delivery;
    cJSON_AddNumberToObject(delivery, "attempts", d->attempts ? d->attempts : 3);
    uint64_t initial = d->backoff_initial_ms ? d->backoff_initial_ms : 1000;
    uint64_t max = d->backoff_max_ms ? d->backoff_max_ms : 60000;
    cJSON_AddNumberToObject(delivery, "backoffInitialMs", (double)initial);
    cJSON_AddNumberToObject(delivery, "backoffMaxMs", (double)(max < initial ? initial : max));
    cJSON_AddNumberToObject(delivery, "timeoutMs", d->timeout_ms ? (double)d->timeout_ms : 30000);
    cJSON_AddNumberToObject(rec, "bodyLen", (double)item->body_len);
    cJSON_AddStringToObject(rec, "state", "Pending");
    cJSON_AddNumberToObject(rec, "attempts", 0);
    cJSON_AddNumberToObject(rec, "createdMs", (double)now);
    cJSON_AddNumberToObject(rec, "updatedMs", (double)now);
    cJSON_AddNumberToObject(rec, "nextAttemptMs", (double)now);
    return rec;
}

int funcd_queue_submit(funcd_queue *q, const funcd_queue_item *item, char *id_out, size_t id_len)
{
    if (!q || !item || !id_out || id_len < 64)
        return funcd_error_set(FUNCD_EINVAL, "funcd_queue_submit needs a queue, an item and 64 "
                               "bytes for the id");
    if (!name_ok(item->ns) || !name_ok(item->function))
        return funcd_error_set(FUNCD_EINVAL, "the item needs a namespace and a function name");
    if (item->delivery.attempts > 100)
        return funcd_error_set(FUNCD_EINVAL, "delivery.attempts is at most 100");
    for (const char *const *h = item->headers; h && h[0]; h += 2)
        if (!h[1])
            return funcd_error_set(FUNCD_EINVAL, "header %s has no value", h[0]);
    if (item->id && !*item->id)
        return funcd_error_set(FUNCD_EINVAL, "the item's id is empty");
    char id[FUNCD_QUEUE_ID_MAX];
    if (item->id)
        stored_id(item->id, id, sizeof(id));
    else
        funcd_uuid4(id);
    snprintf(id_out, id_len, "%s", id);
    char key[600];
    funcd_queue_key(key, sizeof(key), FUNCD_QUEUE_RECORDS, item->ns, id);
    if (item->id) { /* known (queued, running or done): nothing to add */
        funcd_store_value v = {0};
        int rc = funcd_port_store_get(q->cfg.store, key, &v);
        free(v.value);
        if (rc == 0)
            return 0;
        if (rc != FUNCD_ENOTFOUND)
            return rc;
    }
    int64_t now = funcd_now_ms();
    cJSON *rec = new_record(item, id, now);
    char *text = rec ? cJSON_PrintUnformatted(rec) : NULL;
    cJSON_Delete(rec);
    if (!text)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory queueing an invocation");
    uint64_t bytes = strlen(text) + item->body_len;
    int rc = admit(q, item->ns, bytes, item->anonymous); /* before anything is stored */
    int admitted = rc == 0;
    if (rc == 0 && item->body_len) {
        char bkey[600];
        blob_key(bkey, sizeof(bkey), item->ns, id, "request");
        rc = funcd_port_blob_put(q->cfg.blob, bkey, item->body ? item->body : "", item->body_len);
    }
    if (rc == 0)
        rc = funcd_port_store_put(q->cfg.store, key, text, strlen(text), FUNCD_STORE_ABSENT, NULL);
    free(text);
    if (admitted && rc < 0) /* the place taken goes back: nothing of it was kept */
        usage_change(q, item->ns, item->anonymous, 1, 0, bytes);
    if (rc == FUNCD_EEXISTS)
        return 0; /* submitted at the same moment by someone else */
    if (rc < 0)
        return rc;
    funcd_queue_key(key, sizeof(key), FUNCD_QUEUE_INDEX, item->ns, id);
    if ((rc = funcd_port_store_put(q->cfg.store, key, "{}", 2, FUNCD_STORE_ANY, NULL)) < 0)
        return rc; /* the record stays, unindexed: a later submit of the id adds nothing */
    push_inbox(q, item->ns, id);
    return 0;
}

int funcd_queue_on_outcome(funcd_queue *q, const char *origin_prefix, funcd_queue_outcome_fn fn,
                           void *arg)
{
    if (!q || !origin_prefix || !fn)
        return funcd_error_set(FUNCD_EINVAL, "funcd_queue_on_outcome needs a queue, a prefix and "
                               "a callback");
    outcome_sub *s = calloc(1, sizeof(*s));
    if (!s || !(s->prefix = strdup(origin_prefix))) {
        free(s);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory");
    }
    s->fn = fn;
    s->arg = arg;
    s->next = q->subs;
    q->subs = s;
    return 0;
}

/* ---- dead letters ------------------------------------------------------ */

int funcd_queue_replay(funcd_queue *q, const char *ns, const char *id)
{
    char key[600];
    funcd_queue_key(key, sizeof(key), FUNCD_QUEUE_DEADLETTERS, ns, id);
    cJSON *dl = NULL;
    uint64_t rev = 0;
    size_t dl_len = 0;
    int rc = get_record_len(q->cfg.store, key, &dl, &rev, &dl_len);
    if (rc < 0)
        return rc;
    char rkey[600];
    funcd_queue_key(rkey, sizeof(rkey), FUNCD_QUEUE_RECORDS, ns, id);
    /* What leaves the figures once replayed (review19 L-3): the dead
     * letter, and the DeadLettered record with its last answer (only that:
     * a record already Pending again is another replay's, not counted). */
    uint64_t freed = held_by(dl, dl_len, 1);
    cJSON *old = NULL;
    uint64_t old_rev = 0;
    size_t old_len = 0;
    if (get_record_len(q->cfg.store, rkey, &old, &old_rev, &old_len) == 0 &&
        strcmp(str_at(old, "state") ? str_at(old, "state") : "", "DeadLettered") == 0)
        freed += held_by(old, old_len, 0);
    cJSON_Delete(old);
    /* Pending again, it takes a place as a submission does (an anonymous
     * one within the share), or stays a dead letter (FUNCD_ENOSPC): else
     * the figures would miss it, and lose it again when it finishes
     * (review18 L-4). No bytes more: the record takes over what the dead
     * letter held (the same body), counted once the replay is written. */
    int anonymous = anonymous_rec(dl);
    if ((rc = admit(q, ns, 0, anonymous)) < 0) {
        cJSON_Delete(dl);
        return rc;
    }
    int64_t now = funcd_now_ms();
    static const char *const drop[] = {"deadLetteredMs", "finishedMs", "status", "error",
                                       "responseLen", "contentType", "truncated", NULL};
    for (const char *const *d = drop; *d; d++)
        cJSON_DeleteItemFromObjectCaseSensitive(dl, *d);
    set_str(dl, "state", "Pending");
    set_num(dl, "attempts", 0);
    set_num(dl, "updatedMs", (double)now);
    set_num(dl, "nextAttemptMs", (double)now);
    set_num(dl, "replayedMs", (double)now);
    /* The record first: should the rest fail, the item is not lost, and a
     * replay again finds the dead letter still there. */
    size_t new_len = 0;
    int written = (rc = put_record_len(q->cfg.store, rkey, dl, FUNCD_STORE_ANY, NULL,
                                       &new_len)) == 0;
    uint64_t added = written ? held_by(dl, new_len, 0) : 0; /* it and the body */
    if (written) {
        char ikey[600];
        funcd_queue_key(ikey, sizeof(ikey), FUNCD_QUEUE_INDEX, ns, id);
        if ((rc = funcd_port_store_put(q->cfg.store, ikey, "{}", 2, FUNCD_STORE_ANY, NULL)) == 0)
            rc = funcd_port_store_del(q->cfg.store, key, rev, NULL);
    }
    cJSON_Delete(dl);
    /* The place goes back when nothing was written, or when another replay
     * of it took one too (one record is Pending). */
    if (!written || rc == FUNCD_ECONFLICT)
        usage_change(q, ns, anonymous, 1, 0, 0);
    if (rc == 0) {
        usage_change(q, ns, anonymous, 0, added, freed);
        blob_key(rkey, sizeof(rkey), ns, id, "response");
        funcd_port_blob_del(q->cfg.blob, rkey); /* the last failure's answer */
        push_inbox(q, ns, id);
    }
    return rc == FUNCD_ECONFLICT ? 0 : rc; /* replayed at the same moment by someone else */
}

int funcd_queue_purge(funcd_queue *q, const char *ns, const char *id)
{
    char key[600];
    funcd_queue_key(key, sizeof(key), FUNCD_QUEUE_DEADLETTERS, ns, id);
    return delete_deadletter(q, ns, key, id);
}

/* ---- callbacks (X-Callback-Url) ---------------------------------------- */

static void deliver_callback(funcd_queue *q, const qitem *it, const funcd_invoke_res *res)
{
    funcd_queue_callback(&q->callbacks, str_at(it->rec, "callbackUrl"), it->ns, it->id,
                         str_at(it->rec, "function"), str_at(it->rec, "state"), res);
}

funcd_callbacks *funcd_queue_callbacks(funcd_queue *q)
{
    return &q->callbacks;
}

/* ---- lifecycle --------------------------------------------------------- */

int funcd_queue_new(funcd_queue **out, const funcd_queue_config *cfg)
{
    *out = NULL;
    funcd_queue *q = calloc(1, sizeof(*q));
    if (!q)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the delivery queue");
    q->cfg = *cfg;
    if (!q->cfg.max_in_flight)
        q->cfg.max_in_flight = DEFAULT_IN_FLIGHT;
    if (!q->cfg.invocation_retention_ms)
        q->cfg.invocation_retention_ms = DEFAULT_RETENTION_MS;
    if (!q->cfg.dlq_retention_ms)
        q->cfg.dlq_retention_ms = DEFAULT_DLQ_RETENTION_MS;
    if (!q->cfg.dlq_max_entries)
        q->cfg.dlq_max_entries = DEFAULT_DLQ_MAX;
    if (!q->cfg.tick_ms)
        q->cfg.tick_ms = DEFAULT_TICK_MS;
    if (!q->cfg.anonymous_share)
        q->cfg.anonymous_share = FUNCD_QUEUE_DEFAULT_ANONYMOUS_SHARE;
    else if (q->cfg.anonymous_share == FUNCD_QUEUE_ANONYMOUS_NONE)
        q->cfg.anonymous_share = 0;
    else if (q->cfg.anonymous_share > 100)
        q->cfg.anonymous_share = 100;
    pthread_mutex_init(&q->lock, NULL);
    pthread_mutex_init(&q->usage_lock, NULL);
    if (getrandom(&q->rng, sizeof(q->rng), 0) != (ssize_t)sizeof(q->rng) || !q->rng)
        q->rng = (uint64_t)funcd_now_ms() | 1;
    q->wake = event_new(cfg->loop, -1, 0, on_wake, q);
    q->tick = event_new(cfg->loop, -1, EV_PERSIST, on_tick, q);
    q->kick = event_new(cfg->loop, -1, 0, on_kick, q);
    struct timeval every = {(time_t)(q->cfg.tick_ms / 1000),
                            (suseconds_t)(q->cfg.tick_ms % 1000) * 1000};
    if (funcd_callbacks_init(&q->callbacks, cfg->loop, cfg->store, cfg->logger,
                             cfg->callback_allow, cfg->platform_addrs) < 0 ||
        !q->wake || !q->tick || !q->kick || event_add(q->tick, &every) < 0) {
        funcd_queue_free(q);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the delivery queue");
    }
    event_active(q->tick, EV_TIMEOUT, 0); /* the first look as soon as the loop runs */
    *out = q;
    return 0;
}

void funcd_queue_close(funcd_queue *q)
{
    if (!q)
        return;
    q->closed = 1;
    event_del(q->tick);
    event_del(q->wake);
}

void funcd_queue_abandon(funcd_queue *q)
{
    if (q) {
        funcd_queue_close(q);
        q->abandoned = 1;
    }
}

void funcd_queue_depth(const funcd_queue *q, unsigned *waiting, unsigned *running)
{
    /* (the loop writes them; another thread's read sees one or the other value) */
    *waiting = q ? __atomic_load_n(&q->waiting, __ATOMIC_RELAXED) : 0;
    *running = q ? __atomic_load_n(&q->running, __ATOMIC_RELAXED) : 0;
}

typedef struct dlq_ns {
    char ns[256];
    uint64_t n;
} dlq_ns;

typedef struct dlq_counts {
    dlq_ns *v;
    size_t n, cap;
} dlq_counts;

static int on_dlq_count(const funcd_store_kv *kv, void *arg)
{
    dlq_counts *c = arg;
    const char *rest = kv->key + strlen(FUNCD_QUEUE_DEADLETTERS);
    const char *slash = strchr(rest, '/');
    size_t len = slash ? (size_t)(slash - rest) : 0;
    if (!len || len >= sizeof(c->v->ns))
        return 0;
    for (size_t i = c->n; i-- > 0;) /* a listing by key has a namespace's entries together */
        if (strncmp(c->v[i].ns, rest, len) == 0 && c->v[i].ns[len] == '\0') {
            c->v[i].n++;
            return 0;
        }
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 8;
        dlq_ns *v = realloc(c->v, cap * sizeof(*v));
        if (!v)
            return 1;
        c->v = v;
        c->cap = cap;
    }
    memcpy(c->v[c->n].ns, rest, len);
    c->v[c->n].ns[len] = '\0';
    c->v[c->n++].n = 1;
    return 0;
}

int funcd_queue_deadletter_counts(funcd_queue *q, void (*put)(void *ctx, const char *ns,
                                                              uint64_t n),
                                  void *ctx)
{
    dlq_counts c = {0};
    int rc = funcd_port_store_list(q->cfg.store, FUNCD_QUEUE_DEADLETTERS, on_dlq_count, &c, NULL);
    for (size_t i = 0; rc == 0 && i < c.n; i++)
        put(ctx, c.v[i].ns, c.v[i].n);
    free(c.v);
    return rc;
}

void funcd_queue_free(funcd_queue *q)
{
    if (!q)
        return;
    for (unsigned b = 0; b < BUCKETS; b++)
        while (q->buckets[b]) {
            qitem *it = q->buckets[b];
            forget(q, it); /* (the invoker was freed first: no attempt runs) */
        }
    funcd_callbacks_free(&q->callbacks);
    while (q->inbox) {
        inbox_entry *e = q->inbox;
        q->inbox = e->next;
        free(e);
    }
    while (q->subs) {
        outcome_sub *s = q->subs;
        q->subs = s->next;
        free(s->prefix);
        free(s);
    }
    if (q->wake)
        event_free(q->wake);
    if (q->tick)
        event_free(q->tick);
    if (q->kick)
        event_free(q->kick);
    while (q->usage) {
        ns_usage *u = q->usage;
        q->usage = u->next;
        free(u);
    }
    pthread_mutex_destroy(&q->usage_lock);
    pthread_mutex_destroy(&q->lock);
    free(q);
}
