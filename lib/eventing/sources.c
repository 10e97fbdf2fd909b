/*
 * EventSources (sources.h): the table of running sources, kept level-
 * triggered like the controller (a store event only says "look at this key
 * again"), the CloudEvents they emit, and their status.
 */
#include "eventing/sources_internal.h"

#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "cluster/nodes.h"
#include "eventing/queue.h"
#include "funcd/sys/error.h"
#include "gateway/prefix.h"
#include "metrics/metrics.h"
#include "objects/objects.h"
#include "port/blob.h"
#include "port/bus.h"
#include "port/store.h"
#include "util/misc.h"

static const funcd_kind *es_kind(void)
{
    return funcd_kind_by_kind("EventSource");
}

/* ---- the inbox: what other threads hand to the loop ----------------------- */

static void free_item(struct inbox_item *it)
{
    free(it->key);
    free(it->subject);
    free(it->data);
    free(it);
}

void funcd__evs_post(funcd_evsources *s, struct inbox_item *it)
{
    pthread_mutex_lock(&s->lock);
    int closed = s->closed;
    if (!closed) {
        *s->inbox_tail = it;
        s->inbox_tail = &it->next;
    }
    pthread_mutex_unlock(&s->lock);
    if (closed) {
        if (it->call)
            funcd_gw_call_answer_status(it->call, 503, "ServiceUnavailable",
                                        "funcd is shutting down; send the event again later");
        free_item(it);
        return;
    }
    event_active(s->wake, EV_READ, 0);
}

static void post_key(funcd_evsources *s, const char *key)
{
    struct inbox_item *it = calloc(1, sizeof(*it));
    if (!it || !(it->key = strdup(key))) {
        free(it);
        return; /* the periodic resync catches up */
    }
    it->kind = IN_KEY;
    funcd__evs_post(s, it);
}

static void on_store_event(const funcd_store_event *ev, void *payload)
{
    post_key(payload, ev->key);
}

/* ---- ids, errors, emitting -------------------------------------------------- */

void funcd__evs_id(const src *x, const char *a, const char *b, char out[64])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1) {
        EVP_DigestUpdate(ctx, x->uid, strlen(x->uid) + 1);
        EVP_DigestUpdate(ctx, a, strlen(a) + 1);
        EVP_DigestUpdate(ctx, b, strlen(b) + 1);
        EVP_DigestFinal_ex(ctx, md, &len);
    }
    EVP_MD_CTX_free(ctx);
    if (len < 16) { /* out of memory: an id that is at least unique */
        char u[37];
        funcd_uuid4(u);
        snprintf(out, 64, "es-%s", u);
        return;
    }
    static const char hex[] = "0123456789abcdef";
    memcpy(out, "es-", 3);
    for (int i = 0; i < 16; i++) {
        out[3 + 2 * i] = hex[md[i] >> 4];
        out[4 + 2 * i] = hex[md[i] & 15];
    }
    out[35] = '\0';
}

void funcd__evs_error(src *x, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->last_error, sizeof(x->last_error), fmt, ap);
    va_end(ap);
    x->dirty = 1;
}

int funcd__evs_emit(src *x, const char *id, const char *type, const char *subject,
                    int64_t time_ms, const char *content_type, const void *body, size_t len,
                    char *id_out)
{
    char fresh[64], when[40];
    if (!id) {
        char u[37];
        funcd_uuid4(u);
        snprintf(fresh, sizeof(fresh), "es-%s", u);
        id = fresh;
    }
    funcd_rfc3339(time_ms, when, sizeof(when));
    const char *headers[16];
    size_t n = 0;
    headers[n++] = "ce-specversion";
    headers[n++] = "1.0";
    headers[n++] = "ce-id";
    headers[n++] = id;
    headers[n++] = "ce-source";
    headers[n++] = x->ce_source;
    headers[n++] = "ce-type";
    headers[n++] = type;
    headers[n++] = "ce-time";
    headers[n++] = when;
    if (subject) {
        headers[n++] = "ce-subject";
        headers[n++] = subject;
    }
    if (content_type) {
        headers[n++] = "content-type";
        headers[n++] = content_type;
    }
    headers[n] = NULL;
    funcd_evsources_event ev = {
        .ns = x->ns,
        .function = x->function,
        .id = id,
        .origin = x->origin,
        .headers = headers,
        .body = body,
        .body_len = len,
        .attempts = x->attempts,
        .backoff_initial_ms = x->backoff_initial_ms,
        .backoff_max_ms = x->backoff_max_ms,
        .timeout_ms = x->timeout_ms,
        /* Anyone may call a webhook without a secret: its events are held within the
           anonymous share of the namespace's queue, apart from the tenant's own (and the runs
           they start within that share of the workflow-run caps). */
        .anonymous = x->type == SRC_WEBHOOK && !x->secret_name[0],
    };
    funcd_evsources *s = x->owner;
    int rc;
    if (x->workflow[0]) {
        rc = funcd__evs_start_run(x, id, headers, body, len, ev.anonymous);
        if (rc < 0) {
            funcd__evs_error(x, "event %s started no run of workflow %s: %s", id, x->workflow,
                             funcd_error_last()->message);
            return rc;
        }
    } else {
        rc = s->cfg.submit ? s->cfg.submit(&ev, s->cfg.submit_payload)
                           : funcd_error_set(FUNCD_EUNAVAILABLE, "no delivery queue");
        if (rc < 0) {
            funcd__evs_error(x, "event %s was not queued: %s", id, funcd_error_last()->message);
            return rc;
        }
    }
    if (id_out)
        snprintf(id_out, 64, "%s", id);
    x->events++;
    x->last_event_ms = funcd_now_ms();
    x->dirty = 1;
    return 0;
}

src *funcd__evs_find(funcd_evsources *s, const char *ns, const char *name)
{
    for (src *x = s->sources; x; x = x->next)
        if (strcmp(x->ns, ns) == 0 && strcmp(x->name, name) == 0)
            return x;
    return NULL;
}

/* ---- checkpoints ------------------------------------------------------------- */

static void ckpt_key(const src *x, char *out, size_t len)
{
    snprintf(out, len, FUNCD_EVSOURCES_CHECKPOINTS "%s/%s", x->ns, x->name);
}

/* The checkpoint of this incarnation of the source (another uid's is
 * stale: a source deleted and made again starts afresh). NULL: none. */
static cJSON *ckpt_load(src *x)
{
    char key[256];
    ckpt_key(x, key, sizeof(key));
    funcd_store_value v = {0};
    int rc = funcd_port_store_get(x->owner->cfg.store, key, &v);
    if (rc == FUNCD_ENOTFOUND) {
        x->ckpt_rev = 0;
        return NULL;
    }
    if (rc < 0) {
        funcd__evs_error(x, "reading the checkpoint: %s", funcd_error_last()->message);
        return (cJSON *)-1;
    }
    x->ckpt_rev = v.revision;
    cJSON *j = cJSON_ParseWithLength(v.value, v.len);
    free(v.value);
    if (!j || strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "uid")) ?: "",
                     x->uid) != 0) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

/* Compare-and-swap on the revision read: two leaders for a moment (one
 * that has not yet seen its lease go) cannot both move it. */
static int ckpt_save(src *x, cJSON *j)
{
    char key[256];
    ckpt_key(x, key, sizeof(key));
    cJSON_DeleteItemFromObjectCaseSensitive(j, "uid");
    cJSON_AddStringToObject(j, "uid", x->uid);
    char *text = cJSON_PrintUnformatted(j);
    if (!text)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory writing a checkpoint");
    uint64_t rev = 0;
    int rc = funcd_port_store_put(x->owner->cfg.store, key, text, strlen(text), x->ckpt_rev, &rev);
    free(text);
    if (rc < 0) {
        funcd__evs_error(x, "writing the checkpoint: %s", funcd_error_last()->message);
        return rc;
    }
    x->ckpt_rev = rev;
    return 0;
}

/* ---- cron ---------------------------------------------------------------------- */

static void arm(src *x, int64_t delay_ms)
{
    if (!x->timer)
        return;
    if (delay_ms < 1)
        delay_ms = 1;
    struct timeval tv = {(time_t)(delay_ms / 1000), (suseconds_t)(delay_ms % 1000) * 1000};
    event_add(x->timer, &tv);
}

/* The latest tick at or before `now` after `last`; -1: none due. */
static int64_t latest_due(const funcd_cron *c, int64_t last, int64_t now)
{
    int64_t t = funcd_cron_next(c, last);
    if (t < 0 || t > now)
        return -1;
    if (c->every_ms)
        return now - now % (int64_t)c->every_ms;
    for (int i = 0; i < 1000000; i++) {
        int64_t n = funcd_cron_next(c, t);
        if (n < 0 || n > now)
            break;
        t = n;
    }
    return t;
}

static void cron_tick(src *x)
{
    int64_t now = funcd_now_ms();
    if (!x->owner->leader) {
        x->cron_last = -1; /* whoever leads next reads the checkpoint again */
        return;
    }
    if (x->cron_last < 0) {
        cJSON *j = ckpt_load(x);
        if (j == (cJSON *)-1) {
            arm(x, 1000);
            return;
        }
        const cJSON *last = cJSON_GetObjectItemCaseSensitive(j, "lastTick");
        /* A new source starts now: it fires the ticks to come, none before. */
        x->cron_last = cJSON_IsNumber(last) ? (int64_t)last->valuedouble : now;
        int fresh = !cJSON_IsNumber(last);
        cJSON_Delete(j);
        if (fresh) {
            cJSON *c = cJSON_CreateObject();
            cJSON_AddNumberToObject(c, "lastTick", (double)x->cron_last);
            if (ckpt_save(x, c) < 0)
                x->cron_last = -1;
            cJSON_Delete(c);
            if (x->cron_last < 0) {
                arm(x, 1000);
                return;
            }
        }
    }
    /* Ticks missed while no node led are not made up one by one: the
     * latest of them fires, once. */
    int64_t due = latest_due(&x->cron, x->cron_last, now);
    if (due >= 0) {
        char tick[32], id[64];
        snprintf(tick, sizeof(tick), "%lld", (long long)due);
        funcd__evs_id(x, "cron", tick, id);
        char when[40];
        funcd_rfc3339(due, when, sizeof(when));
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "tick", when);
        cJSON_AddNumberToObject(b, "tickMs", (double)due);
        char *text = cJSON_PrintUnformatted(b);
        cJSON_Delete(b);
        /* Queued first, then checkpointed: a crash between the two makes
         * the next leader queue the same id again, which the queue drops. */
        int rc = text ? funcd__evs_emit(x, id, "dev.funcd.cron.tick", when, due,
                                        "application/json", text, strlen(text), NULL)
                      : FUNCD_ENOMEM;
        free(text);
        if (rc == 0) {
            cJSON *c = cJSON_CreateObject();
            cJSON_AddNumberToObject(c, "lastTick", (double)due);
            if (ckpt_save(x, c) == 0)
                x->cron_last = due;
            else
                x->cron_last = -1; /* someone else moved it: read it again */
            cJSON_Delete(c);
        }
        if (rc < 0) {
            arm(x, 1000);
            return;
        }
    }
    int64_t next = funcd_cron_next(&x->cron, x->cron_last > now ? x->cron_last : now);
    if (next >= 0)
        arm(x, next - funcd_now_ms());
}

/* ---- blob ------------------------------------------------------------------------ */

typedef struct listing {
    cJSON *now; /* key -> revision token */
    int failed;
} listing;

static int on_listed(const char *key, const funcd_blob_stat *st, void *payload)
{
    listing *l = payload;
    char rev[64];
    snprintf(rev, sizeof(rev), "%lld-%llu", (long long)st->mtime_ms, (unsigned long long)st->size);
    if (!cJSON_AddStringToObject(l->now, key, rev)) {
        l->failed = 1;
        return 1;
    }
    return 0;
}

static void blob_poll(src *x)
{
    if (!x->owner->leader) {
        cJSON_Delete(x->seen);
        x->seen = NULL; /* whoever leads next reads the checkpoint again */
        arm(x, (int64_t)x->poll_ms);
        return;
    }
    if (!x->seen) {
        cJSON *j = ckpt_load(x);
        if (j == (cJSON *)-1) {
            arm(x, (int64_t)x->poll_ms);
            return;
        }
        cJSON *seen = j ? cJSON_DetachItemFromObjectCaseSensitive(j, "seen") : NULL;
        cJSON_Delete(j);
        x->seen = cJSON_IsObject(seen) ? seen : cJSON_CreateObject();
        if (seen && !cJSON_IsObject(seen))
            cJSON_Delete(seen);
        if (!x->seen) {
            arm(x, (int64_t)x->poll_ms);
            return;
        }
    }
    listing l = {cJSON_CreateObject(), 0};
    int rc = l.now ? funcd_port_blob_list(x->owner->cfg.blob, x->prefix, on_listed, &l)
                   : FUNCD_ENOMEM;
    if (rc < 0 || l.failed) {
        funcd__evs_error(x, "listing the blob store under \"%s\": %s", x->prefix,
                         rc < 0 ? funcd_error_last()->message : "out of memory");
        cJSON_Delete(l.now);
        arm(x, (int64_t)x->poll_ms);
        return;
    }
    int changed = 0, stuck = 0;
    for (cJSON *o = l.now->child; o && !stuck; o = o->next) {
        const char *had = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x->seen, o->string));
        if (had && strcmp(had, o->valuestring) == 0)
            continue;
        char id[64];
        funcd__evs_id(x, o->string, o->valuestring, id);
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "key", o->string);
        cJSON_AddStringToObject(b, "revision", o->valuestring);
        char *text = cJSON_PrintUnformatted(b);
        cJSON_Delete(b);
        /* Queued first, then checkpointed (below): a crash between the two
         * queues the same id again, which the queue drops. */
        if (!text || funcd__evs_emit(x, id, had ? "dev.funcd.blob.updated" : "dev.funcd.blob.created",
                                     o->string, funcd_now_ms(), "application/json", text,
                                     strlen(text), NULL) < 0) {
            stuck = 1; /* the rest at the next poll */
        } else {
            cJSON_DeleteItemFromObjectCaseSensitive(x->seen, o->string);
            cJSON_AddStringToObject(x->seen, o->string, o->valuestring);
            changed = 1;
        }
        free(text);
    }
    if (!stuck) /* objects gone: forgotten, so the checkpoint stays the listing's size */
        for (cJSON *o = x->seen->child, *next; o; o = next) {
            next = o->next;
            if (!cJSON_GetObjectItemCaseSensitive(l.now, o->string)) {
                cJSON_Delete(cJSON_DetachItemViaPointer(x->seen, o));
                changed = 1;
            }
        }
    cJSON_Delete(l.now);
    if (changed) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemReferenceToObject(c, "seen", x->seen);
        if (ckpt_save(x, c) < 0) { /* read it again before the next poll */
            cJSON_Delete(x->seen);
            x->seen = NULL;
        }
        cJSON_Delete(c);
    }
    arm(x, (int64_t)x->poll_ms);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    src *x = arg;
    if (x->type == SRC_CRON)
        cron_tick(x);
    else
        blob_poll(x);
}

/* ---- bus ------------------------------------------------------------------------- */

typedef struct bus_ctx {
    funcd_evsources *s;
    char ns[64], name[64];
} bus_ctx;

/* Any thread (the bus's): to the loop, where the source is looked up again. */
static void on_bus_msg(const char *subject, const void *data, size_t len, void *payload)
{
    src *x = payload; /* valid: unsubscribe waits for this callback */
    struct inbox_item *it = calloc(1, sizeof(*it));
    if (!it)
        return;
    it->kind = IN_BUS;
    snprintf(it->ns, sizeof(it->ns), "%s", x->ns);
    snprintf(it->name, sizeof(it->name), "%s", x->name);
    it->subject = strdup(subject);
    it->data = malloc(len ? len : 1);
    if (!it->subject || !it->data) {
        free_item(it);
        return;
    }
    memcpy(it->data, data, len);
    it->len = len;
    funcd__evs_post(x->owner, it);
}

/* ---- bus: what the queue does not take yet ----------------------------------------- */

#define DROP_LOG_EVERY_MS 10000

static void held_free(held_msg *h)
{
    free(h->subject);
    free(h->data);
    free(h);
}

/* Drops not yet in a WARN line, when the last line was at least
 * DROP_LOG_EVERY_MS ago: a flood makes one line each 10 s (the retry timer
 * writes what is left). */
static void log_drops(src *x)
{
    int64_t now = funcd_mono_ms();
    if (!x->drops_unlogged || (x->drop_logged_ms && now - x->drop_logged_ms < DROP_LOG_EVERY_MS))
        return;
    funcd_log(x->owner->cfg.logger, FUNCD_LOG_WARN, "eventsource %s/%s: dropped %llu bus "
              "message%s (the last: %s)", x->ns, x->name, (unsigned long long)x->drops_unlogged,
              x->drops_unlogged == 1 ? "" : "s", x->drop_why);
    x->drop_logged_ms = now;
    x->drops_unlogged = 0;
}

/* One message of `x` dropped: status (counts.dropped, lastError), metric,
 * log. */
static void count_drop(src *x, funcd_metrics_drop_reason reason, const char *why)
{
    x->dropped++;
    x->held_dropped++;
    x->drops_unlogged++;
    funcd_metrics_event_dropped(x->owner->cfg.metrics, x->ns, x->name, reason);
    funcd__evs_error(x, "dropped a bus message: %s", why);
    snprintf(x->drop_why, sizeof(x->drop_why), "%s", why);
    log_drops(x);
}

static void arm_retry(src *x)
{
    struct timeval tv = {(time_t)(x->retry_ms / 1000), (suseconds_t)(x->retry_ms % 1000) * 1000};
    event_add(x->retry, &tv);
}

/* The retry timer: the held messages in order, until the queue refuses
 * one again (then later, twice as late up to the maximum). Each submission
 * writes the store on the loop: a firing takes at most
 * FUNCD_EVSOURCES_BUS_RETRY_BATCH, and with more left fires again at once,
 * so the loop serves others in between (review18 L-9). */
static void on_bus_retry(evutil_socket_t fd, short what, void *arg)
{
    src *x = arg;
    for (int n = 0; x->held; n++) {
        if (n == FUNCD_EVSOURCES_BUS_RETRY_BATCH) { /* the rest at the loop's next turn */
            static const struct timeval now = {0, 0};
            event_add(x->retry, &now);
            break;
        }
        held_msg *h = x->held;
        int rc = funcd__evs_emit(x, h->id, "dev.funcd.bus.message", h->subject, h->time_ms, NULL,
                                 h->data, h->len, NULL);
        if (rc < 0 && rc != FUNCD_EINVAL) {
            funcd__evs_error(x, "%zu bus message%s wait for room in the delivery queue (%llu "
                             "dropped; a bus source holds at most %d): %s", x->held_n,
                             x->held_n == 1 ? "" : "s", (unsigned long long)x->held_dropped,
                             FUNCD_EVSOURCES_BUS_HELD_MAX, funcd_error_last()->message);
            x->retry_ms = x->retry_ms * 2 > FUNCD_EVSOURCES_BUS_RETRY_MAX_MS
                              ? FUNCD_EVSOURCES_BUS_RETRY_MAX_MS
                              : x->retry_ms * 2;
            arm_retry(x);
            break;
        }
        if (rc == FUNCD_EINVAL)
            count_drop(x, FUNCD_METRICS_DROP_REJECTED, funcd_error_last()->message);
        x->held = h->next;
        if (!x->held)
            x->held_tail = &x->held;
        x->held_n--;
        x->held_bytes -= h->len;
        x->owner->held_n--;
        x->owner->held_bytes -= h->len;
        held_free(h);
        x->retry_ms = FUNCD_EVSOURCES_BUS_RETRY_MIN_MS;
    }
    if (!x->held) /* no next try to write them: now */
        x->drop_logged_ms = 0;
    log_drops(x);
}

/* Keeps the message of `it` (its subject and data, taken) under `id`
 * until the queue takes it; beyond the bounds it is dropped. */
static void hold(src *x, const char *id, int64_t time_ms, struct inbox_item *it)
{
    if (x->held_n + 1 > FUNCD_EVSOURCES_BUS_HELD_MAX ||
        x->held_bytes + it->len > FUNCD_EVSOURCES_BUS_HELD_BYTES) {
        char why[240];
        snprintf(why, sizeof(why), "%zu messages (%zu bytes) wait for room in the delivery "
                 "queue already; a bus source holds at most %d and %u bytes", x->held_n,
                 x->held_bytes, FUNCD_EVSOURCES_BUS_HELD_MAX, FUNCD_EVSOURCES_BUS_HELD_BYTES);
        count_drop(x, FUNCD_METRICS_DROP_BACKLOG_FULL, why);
        return;
    }
    funcd_evsources *s = x->owner;
    if (s->held_n + 1 > FUNCD_EVSOURCES_NODE_HELD_MAX ||
        s->held_bytes + it->len > FUNCD_EVSOURCES_NODE_HELD_BYTES) {
        char why[240];
        snprintf(why, sizeof(why), "the node's bus sources hold as many messages waiting for room "
                 "in the delivery queue as it keeps (%d, %u bytes)", FUNCD_EVSOURCES_NODE_HELD_MAX,
                 FUNCD_EVSOURCES_NODE_HELD_BYTES);
        count_drop(x, FUNCD_METRICS_DROP_BACKLOG_FULL, why);
        return;
    }
    held_msg *h = calloc(1, sizeof(*h));
    if (!x->retry)
        x->retry = event_new(x->owner->cfg.loop, -1, 0, on_bus_retry, x);
    if (!h || !x->retry) {
        free(h);
        count_drop(x, FUNCD_METRICS_DROP_BACKLOG_FULL, "out of memory");
        return;
    }
    snprintf(h->id, sizeof(h->id), "%s", id);
    h->time_ms = time_ms;
    h->subject = it->subject;
    h->data = it->data;
    h->len = it->len;
    it->subject = NULL;
    it->data = NULL;
    if (!x->held_tail)
        x->held_tail = &x->held;
    *x->held_tail = h;
    x->held_tail = &h->next;
    x->held_n++;
    x->held_bytes += h->len;
    s->held_n++;
    s->held_bytes += h->len;
    if (!evtimer_pending(x->retry, NULL)) {
        x->retry_ms = FUNCD_EVSOURCES_BUS_RETRY_MIN_MS;
        arm_retry(x);
    }
}

/* The messages `x` still holds go: counted as dropped (source_removed) when
 * the source is deleted or changed, only logged at shutdown. */
static void release_held(src *x, int shutdown)
{
    size_t n = x->held_n;
    while (x->held) {
        held_msg *h = x->held;
        x->held = h->next;
        if (!shutdown)
            funcd_metrics_event_dropped(x->owner->cfg.metrics, x->ns, x->name,
                                        FUNCD_METRICS_DROP_SOURCE_REMOVED);
        held_free(h);
    }
    x->held_tail = &x->held;
    x->owner->held_n -= x->held_n;
    x->owner->held_bytes -= x->held_bytes;
    x->held_n = x->held_bytes = 0;
    if (n)
        funcd_log(x->owner->cfg.logger, FUNCD_LOG_WARN, "eventsource %s/%s: dropped %zu bus "
                  "message%s that waited for room in the delivery queue: %s", x->ns, x->name, n,
                  n == 1 ? "" : "s",
                  shutdown ? "funcd is stopping" : "the source was deleted or changed");
}

static void bus_deliver(funcd_evsources *s, struct inbox_item *it)
{
    src *x = funcd__evs_find(s, it->ns, it->name);
    if (!x || x->type != SRC_BUS)
        return;
    /* Messages come once (core NATS, a queue group): a new id each, kept
     * while the message waits. */
    char id[64], u[37];
    funcd_uuid4(u);
    snprintf(id, sizeof(id), "es-%s", u);
    int64_t now = funcd_now_ms();
    if (!x->held) { /* else after those that wait: in order */
        int rc = funcd__evs_emit(x, id, "dev.funcd.bus.message", it->subject, now, NULL,
                                 it->data, it->len, NULL);
        if (rc == 0)
            return;
        if (rc == FUNCD_EINVAL) { /* refused for good: trying again cannot change it */
            count_drop(x, FUNCD_METRICS_DROP_REJECTED, funcd_error_last()->message);
            return;
        }
    }
    hold(x, id, now, it);
}

/* ---- the table -------------------------------------------------------------------- */

static void src_stop(src *x)
{
    if (x->timer) {
        event_free(x->timer);
        x->timer = NULL;
    }
    if (x->retry) {
        event_free(x->retry);
        x->retry = NULL;
    }
    if (x->sub) {
        funcd_port_bus_unsubscribe(x->owner->cfg.bus, x->sub);
        x->sub = NULL;
    }
}

static void src_free(src *x)
{
    src_stop(x);
    release_held(x, 1);
    free(x->prefix);
    free(x->subject);
    free(x->group);
    cJSON_Delete(x->seen);
    free(x);
}

static uint64_t duration_of(const cJSON *obj, const char *dotted_a, const char *b)
{
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(obj, dotted_a);
    if (b)
        o = cJSON_GetObjectItemCaseSensitive(o, b);
    uint64_t ms = 0;
    if (cJSON_IsString(o))
        funcd_parse_duration_ms(o->valuestring, &ms);
    return ms;
}

static int src_configure(funcd_evsources *s, src *x, const cJSON *obj)
{
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(obj, "spec");
    const char *uid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(md, "uid"));
    snprintf(x->uid, sizeof(x->uid), "%s", uid ? uid : "");
    x->generation = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(md, "generation"));
    snprintf(x->origin, sizeof(x->origin), FUNCD_EVSOURCES_ORIGIN "%s", x->name);
    snprintf(x->ce_source, sizeof(x->ce_source),
             "/apis/funcd.dev/v1/namespaces/%s/eventsources/%s", x->ns, x->name);
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "type"));
    const cJSON *target = cJSON_GetObjectItemCaseSensitive(spec, "target");
    const char *fn = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(target, "function"));
    const char *wf = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(target, "workflow"));
    snprintf(x->function, sizeof(x->function), "%s", fn ? fn : "");
    snprintf(x->workflow, sizeof(x->workflow), "%s", wf && !fn ? wf : "");
    const cJSON *del = cJSON_GetObjectItemCaseSensitive(spec, "delivery");
    const cJSON *att = cJSON_GetObjectItemCaseSensitive(del, "attempts");
    x->attempts = cJSON_IsNumber(att) ? (unsigned)att->valuedouble : 0;
    x->backoff_initial_ms = duration_of(cJSON_GetObjectItemCaseSensitive(del, "backoff"),
                                        "initial", NULL);
    x->backoff_max_ms = duration_of(cJSON_GetObjectItemCaseSensitive(del, "backoff"), "max", NULL);
    x->timeout_ms = duration_of(del, "timeout", NULL);
    x->cron_last = -1;
    if (!type)
        return -1;
    if (strcmp(type, "cron") == 0) {
        const char *sched = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(spec, "cron"), "schedule"));
        char err[256];
        x->type = SRC_CRON;
        if (funcd_cron_parse(sched, &x->cron, err, sizeof(err)) < 0)
            return -1;
        if (!(x->timer = event_new(s->cfg.loop, -1, 0, on_timer, x)))
            return -1;
        if (s->leader)
            arm(x, 0);
    } else if (strcmp(type, "blob") == 0) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(spec, "blob");
        const char *prefix = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "prefix"));
        x->type = SRC_BLOB;
        x->prefix = strdup(prefix ? prefix : "");
        x->poll_ms = duration_of(b, "pollInterval", NULL);
        if (!x->poll_ms)
            x->poll_ms = s->cfg.blob_poll_ms ? s->cfg.blob_poll_ms : 15000;
        if (!x->prefix || !(x->timer = event_new(s->cfg.loop, -1, 0, on_timer, x)))
            return -1;
        arm(x, s->leader ? 0 : (int64_t)x->poll_ms);
    } else if (strcmp(type, "bus") == 0) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(spec, "bus");
        const char *subject = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "subject"));
        const char *group = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "queueGroup"));
        char implied[160];
        /* Every node subscribes: without a group of the user's, one of the
         * source's own, so a message still reaches one node only. */
        snprintf(implied, sizeof(implied), "funcd.eventsource.%s.%s", x->ns, x->name);
        x->type = SRC_BUS;
        x->subject = strdup(subject ? subject : "");
        x->group = strdup(group ? group : implied);
        if (!x->subject || !x->group)
            return -1;
        if (funcd_port_bus_subscribe(s->cfg.bus, x->subject, x->group, on_bus_msg, x, &x->sub) < 0) {
            funcd__evs_error(x, "subscribing to %s: %s", x->subject, funcd_error_last()->message);
            x->sub = NULL;
        }
    } else if (strcmp(type, "webhook") == 0) {
        const cJSON *ref = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(spec, "webhook"), "secretRef");
        const char *sn = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ref, "name"));
        const char *sk = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ref, "key"));
        x->type = SRC_WEBHOOK;
        snprintf(x->secret_name, sizeof(x->secret_name), "%s", sn ? sn : "");
        snprintf(x->secret_key, sizeof(x->secret_key), "%s", sk ? sk : "");
    } else {
        return -1;
    }
    return 0;
}

static void remove_src(funcd_evsources *s, const char *ns, const char *name)
{
    for (src **pp = &s->sources; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->ns, ns) == 0 && strcmp((*pp)->name, name) == 0) {
            src *x = *pp;
            *pp = x->next;
            release_held(x, 0);
            src_free(x);
            return;
        }
}

static void reconcile(funcd_evsources *s, const char *key)
{
    const funcd_kind *kind;
    char ns[128], name[128];
    if (funcd_objects_parse_key(key, &kind, ns, sizeof(ns), name, sizeof(name)) < 0 ||
        kind != es_kind())
        return;
    cJSON *obj = NULL;
    uint64_t rev = 0;
    int rc = funcd_objects_get(s->cfg.store, kind, ns, name, &obj, &rev);
    src *have = funcd__evs_find(s, ns, name);
    if (rc == FUNCD_ENOTFOUND) {
        remove_src(s, ns, name);
        if (s->leader) { /* its checkpoint goes with it */
            char ck[300];
            snprintf(ck, sizeof(ck), FUNCD_EVSOURCES_CHECKPOINTS "%s/%s", ns, name);
            funcd_port_store_del(s->cfg.store, ck, FUNCD_STORE_ANY, NULL);
        }
        return;
    }
    if (rc < 0) {
        funcd_log(s->cfg.logger, FUNCD_LOG_WARN, "eventsource %s/%s: %s", ns, name,
                  funcd_error_last()->message);
        return;
    }
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    const char *uid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(md, "uid"));
    double gen = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(md, "generation"));
    if (have && gen == have->generation && uid && strcmp(uid, have->uid) == 0) {
        cJSON_Delete(obj); /* a status write, or nothing new */
        return;
    }
    src *x = calloc(1, sizeof(*x));
    if (!x) {
        cJSON_Delete(obj);
        return;
    }
    x->owner = s;
    snprintf(x->ns, sizeof(x->ns), "%s", ns);
    snprintf(x->name, sizeof(x->name), "%s", name);
    if (have) { /* counts not yet written carry over to the new spec */
        x->events = have->events;
        x->delivered = have->delivered;
        x->retried = have->retried;
        x->deadlettered = have->deadlettered;
        x->dropped = have->dropped;
        x->last_event_ms = have->last_event_ms;
        memcpy(x->last_error, have->last_error, sizeof(x->last_error));
    }
    x->held_tail = &x->held;
    x->dirty = 1; /* observedGeneration */
    int ok = src_configure(s, x, obj) == 0;
    if (!ok) {
        funcd_log(s->cfg.logger, FUNCD_LOG_WARN, "eventsource %s/%s cannot run", ns, name);
        src_stop(x);
    }
    if (have && ok && have->type == SRC_BUS && x->type == SRC_BUS && have->held) {
        /* Messages waiting go on waiting, to the new target. */
        x->held = have->held;
        x->held_tail = have->held_tail;
        x->held_n = have->held_n;
        x->held_bytes = have->held_bytes;
        x->held_dropped = have->held_dropped;
        have->held = NULL;
        have->held_tail = &have->held;
        have->held_n = have->held_bytes = 0;
        if ((x->retry = event_new(s->cfg.loop, -1, 0, on_bus_retry, x))) {
            x->retry_ms = FUNCD_EVSOURCES_BUS_RETRY_MIN_MS;
            arm_retry(x);
        }
    }
    if (have)
        remove_src(s, ns, name);
    x->next = s->sources;
    s->sources = x;
    cJSON_Delete(obj);
}

/* ---- status ------------------------------------------------------------------------ */

static double num_or0(const cJSON *o, const char *name)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNumber(n) ? n->valuedouble : 0;
}

static void write_status(funcd_evsources *s, src *x)
{
    cJSON *obj = NULL;
    uint64_t rev = 0;
    if (funcd_objects_get(s->cfg.store, es_kind(), x->ns, x->name, &obj, &rev) < 0)
        return;
    const cJSON *old = cJSON_GetObjectItemCaseSensitive(obj, "status");
    const cJSON *oc = cJSON_GetObjectItemCaseSensitive(old, "counts");
    cJSON *st = cJSON_CreateObject();
    cJSON_AddNumberToObject(st, "observedGeneration", x->generation);
    int64_t last = x->last_event_ms;
    const char *old_last = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(old, "lastEventTime"));
    if (last) {
        char when[40];
        funcd_rfc3339(last, when, sizeof(when));
        cJSON_AddStringToObject(st, "lastEventTime", when);
    } else if (old_last) {
        cJSON_AddStringToObject(st, "lastEventTime", old_last);
    }
    const char *old_err = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(old, "lastError"));
    if (x->last_error[0])
        cJSON_AddStringToObject(st, "lastError", x->last_error);
    else if (old_err)
        cJSON_AddStringToObject(st, "lastError", old_err);
    cJSON *c = cJSON_AddObjectToObject(st, "counts");
    cJSON_AddNumberToObject(c, "events", num_or0(oc, "events") + (double)x->events);
    cJSON_AddNumberToObject(c, "delivered", num_or0(oc, "delivered") + (double)x->delivered);
    cJSON_AddNumberToObject(c, "retried", num_or0(oc, "retried") + (double)x->retried);
    cJSON_AddNumberToObject(c, "deadLettered",
                            num_or0(oc, "deadLettered") + (double)x->deadlettered);
    cJSON_AddNumberToObject(c, "dropped", num_or0(oc, "dropped") + (double)x->dropped);
    int rc = funcd_objects_put_status(s->cfg.store, es_kind(), x->ns, x->name, rev, st);
    if (rc == 0) { /* written: the deltas are in the store now */
        x->events = x->delivered = x->retried = x->deadlettered = x->dropped = 0;
        x->dirty = 0;
    }
    cJSON_Delete(st);
    cJSON_Delete(obj);
}

/* Every node adds what it counted (a follower takes bus messages and
 * webhook calls too): write_status adds this node's deltas to the stored
 * counts with a compare-and-swap on the object, so that two nodes writing
 * at once lose nothing (the loser keeps its deltas for the next tick) and
 * count nothing twice. */
static void on_status_tick(evutil_socket_t fd, short what, void *arg)
{
    funcd_evsources *s = arg;
    for (src *x = s->sources; x; x = x->next)
        if (x->dirty)
            write_status(s, x);
}

void funcd_evsources_outcome(const char *ns, const char *origin, const char *id, int outcome,
                             int status, const char *error, void *payload)
{
    funcd_evsources *s = payload;
    if (!origin || strncmp(origin, FUNCD_EVSOURCES_ORIGIN, strlen(FUNCD_EVSOURCES_ORIGIN)) != 0)
        return;
    src *x = funcd__evs_find(s, ns, origin + strlen(FUNCD_EVSOURCES_ORIGIN));
    if (!x)
        return;
    if (outcome == 0)
        x->delivered++;
    else if (outcome == 1)
        x->retried++;
    else
        x->deadlettered++;
    if (outcome != 0)
        funcd__evs_error(x, "event %s: %s%s%d", id ? id : "?", error ? error : "",
                         error ? "; HTTP " : "HTTP ", status);
    x->dirty = 1;
}

/* ---- the loop ---------------------------------------------------------------------- */

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    funcd_evsources *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        struct inbox_item *batch = s->inbox;
        s->inbox = NULL;
        s->inbox_tail = &s->inbox;
        pthread_mutex_unlock(&s->lock);
        if (!batch)
            break;
        while (batch) {
            struct inbox_item *it = batch;
            batch = it->next;
            if (it->kind == IN_KEY)
                reconcile(s, it->key);
            else if (it->kind == IN_BUS)
                bus_deliver(s, it);
            else
                funcd__evs_webhook_run(s, it->call);
            free_item(it);
        }
    }
}

static int post_listed(const funcd_store_kv *kv, void *payload)
{
    post_key(payload, kv->key);
    return 0;
}

static void list_all(funcd_evsources *s, uint64_t *rev)
{
    funcd_buf prefix = FUNCD_BUF_INIT;
    if (funcd_objects_prefix(&prefix, es_kind(), NULL) == 0)
        funcd_port_store_list(s->cfg.store, prefix.data, post_listed, s, rev);
    funcd_buf_free(&prefix);
}

static void on_resync(evutil_socket_t fd, short what, void *arg)
{
    funcd_evsources *s = arg;
    list_all(s, NULL);
    /* Sources whose object went while the watch was away. */
    for (src *x = s->sources; x; x = x->next) {
        char key[300];
        snprintf(key, sizeof(key), FUNCD_OBJECTS_KEY_ROOT "eventsources/%s/%s", x->ns, x->name);
        post_key(s, key);
    }
}

void funcd_evsources_leading(funcd_evsources *s, int leader)
{
    if (!s)
        return;
    s->leader = leader;
    for (src *x = s->sources; x; x = x->next) {
        x->cron_last = -1; /* read the checkpoints again: another node moved them */
        cJSON_Delete(x->seen);
        x->seen = NULL;
        if (leader && x->timer)
            arm(x, 0);
    }
}

int funcd_evsources_new(funcd_evsources **out, const funcd_evsources_config *cfg)
{
    *out = NULL;
    funcd_evsources *s = calloc(1, sizeof(*s));
    if (!s)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the event sources");
    s->cfg = *cfg;
    if (!s->cfg.anonymous_share) /* as the queue's (queue.h) */
        s->cfg.anonymous_share = FUNCD_QUEUE_DEFAULT_ANONYMOUS_SHARE;
    else if (s->cfg.anonymous_share == FUNCD_QUEUE_ANONYMOUS_NONE)
        s->cfg.anonymous_share = 0;
    else if (s->cfg.anonymous_share > 100)
        s->cfg.anonymous_share = 100;
    s->inbox_tail = &s->inbox;
    pthread_mutex_init(&s->lock, NULL);
    s->wake = event_new(cfg->loop, -1, 0, on_wake, s);
    s->status_tick = event_new(cfg->loop, -1, EV_PERSIST, on_status_tick, s);
    s->resync = event_new(cfg->loop, -1, EV_PERSIST, on_resync, s);
    if (!s->wake || !s->status_tick || !s->resync) {
        funcd_evsources_free(s);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the event sources");
    }
    *out = s;
    return 0;
}

int funcd_evsources_start(funcd_evsources *s)
{
    s->leader = funcd_cluster_is_leader(s->cfg.cluster);
    uint64_t rev = 0;
    funcd_buf prefix = FUNCD_BUF_INIT;
    int rc = funcd_objects_prefix(&prefix, es_kind(), NULL);
    if (rc == 0)
        rc = funcd_port_store_list(s->cfg.store, prefix.data, post_listed, s, &rev);
    if (rc == 0)
        rc = funcd_port_store_watch(s->cfg.store, prefix.data, rev, on_store_event, s, &s->watch);
    funcd_buf_free(&prefix);
    if (rc < 0)
        return rc;
    uint64_t ms = s->cfg.status_ms ? s->cfg.status_ms : 1000;
    struct timeval every = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    struct timeval minute = {60, 0};
    event_add(s->status_tick, &every);
    event_add(s->resync, &minute);
    return 0;
}

void funcd_evsources_close(funcd_evsources *s)
{
    if (!s)
        return;
    if (s->watch) {
        funcd_port_store_unwatch(s->cfg.store, s->watch);
        s->watch = NULL;
    }
    for (src *x = s->sources; x; x = x->next)
        src_stop(x); /* no bus callback runs after this */
    pthread_mutex_lock(&s->lock);
    s->closed = 1;
    struct inbox_item *batch = s->inbox;
    s->inbox = NULL;
    s->inbox_tail = &s->inbox;
    pthread_mutex_unlock(&s->lock);
    while (batch) {
        struct inbox_item *it = batch;
        batch = it->next;
        if (it->call)
            funcd_gw_call_answer_status(it->call, 503, "ServiceUnavailable",
                                        "funcd is shutting down; send the event again later");
        free_item(it);
    }
}

void funcd_evsources_free(funcd_evsources *s)
{
    if (!s)
        return;
    funcd_evsources_close(s);
    while (s->sources) {
        src *x = s->sources;
        s->sources = x->next;
        src_free(x);
    }
    if (s->wake)
        event_free(s->wake);
    if (s->status_tick)
        event_free(s->status_tick);
    if (s->resync)
        event_free(s->resync);
    pthread_mutex_destroy(&s->lock);
    free(s);
}
