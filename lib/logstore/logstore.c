/*
 * Persistent logs: appending, sealing, compaction and retention. Reading is
 * in query.c, the record format in format.c.
 *
 * Blob I/O never runs under ls->lock: a sealed buffer moves to the
 * function's pending list (readers still see it there) and whoever sealed
 * it writes it. Compaction and retention hold the layout lock for writing,
 * so a reader never lists a half-compacted hour.
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "funcd/sys/error.h"
#include "logstore/internal.h"
#include "port/blob.h"
#include "util/misc.h"

#define MAINTENANCE_EVERY_MS 60000
#define HOUR_MS 3600000LL
/* Segments the blob refused, kept for retry; beyond this the oldest goes. */
#define MAX_PENDING 16

static uint64_t fn_hash(const char *ns, const char *fn)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (const char *p = ns; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    h = (h ^ '/') * 1099511628211ULL;
    for (const char *p = fn; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    return h;
}

funcd__log_fn *funcd__logstore_find(funcd_logstore *ls, const char *ns, const char *fn)
{
    funcd__log_fn *f = ls->buckets[fn_hash(ns, fn) % FUNCD__LOG_BUCKETS];
    while (f && (strcmp(f->ns, ns) != 0 || strcmp(f->fn, fn) != 0))
        f = f->next;
    return f;
}

static int key_safe(const char *s)
{
    return s && s[0] && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

int funcd__logstore_prefix(funcd_buf *out, const char *ns, const char *fn)
{
    if (!key_safe(ns) || !key_safe(fn))
        return -1;
    return funcd_buf_printf(out, "logs/%s/%s/", ns, fn);
}

static funcd__log_fn *fn_get_locked(funcd_logstore *ls, const char *ns, const char *fn)
{
    funcd__log_fn *f = funcd__logstore_find(ls, ns, fn);
    if (f)
        return f;
    funcd_buf prefix = FUNCD_BUF_INIT;
    if (!(f = calloc(1, sizeof(*f))) || funcd__logstore_prefix(&prefix, ns, fn) < 0 ||
        !(f->ns = strdup(ns)) || !(f->fn = strdup(fn))) {
        if (f) {
            free(f->ns);
            free(f);
        }
        funcd_buf_free(&prefix);
        return NULL;
    }
    f->prefix = funcd_buf_detach(&prefix, NULL);
    funcd__log_fn **head = &ls->buckets[fn_hash(ns, fn) % FUNCD__LOG_BUCKETS];
    f->next = *head;
    *head = f;
    return f;
}

static void seg_free(funcd__log_seg *s)
{
    if (s) {
        free(s->key);
        free(s->data);
        free(s);
    }
}

/* Moves the open buffer to the pending list; the caller writes it. */
static funcd__log_seg *seal_locked(funcd_logstore *ls, funcd__log_fn *f)
{
    funcd__log_seg *s = calloc(1, sizeof(*s));
    funcd_buf key = FUNCD_BUF_INIT;
    if (!s || funcd_buf_printf(&key, "%sseg/%s%s%013" PRId64 "-%013" PRId64 "-%s%06" PRIu64
                               ".jsonl", f->prefix, ls->node_key, ls->node ? "/" : "",
                               f->open_start, f->open_end, ls->instance, ++ls->seq) < 0) {
        free(s);
        funcd_buf_free(&key);
        return NULL; /* the buffer stays open: the next tick tries again */
    }
    s->key = funcd_buf_detach(&key, NULL);
    s->data = funcd_buf_detach(&f->open, &s->len);
    s->start = f->open_start;
    s->end = f->open_end;
    funcd__log_seg **pp = &f->pending;
    while (*pp)
        pp = &(*pp)->next;
    *pp = s;
    f->n_pending++;
    return s;
}

static void unlink_locked(funcd__log_fn *f, funcd__log_seg *s)
{
    for (funcd__log_seg **pp = &f->pending; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            f->n_pending--;
            return;
        }
}

/* The blob refused too often: give up the oldest idle segments. */
static void shed_locked(funcd_logstore *ls, funcd__log_fn *f)
{
    funcd__log_seg **pp = &f->pending;
    while (f->n_pending > MAX_PENDING && *pp) {
        funcd__log_seg *s = *pp;
        if (s->writing) {
            pp = &s->next;
            continue;
        }
        for (const char *c = s->data; c < s->data + s->len; c++)
            ls->stats.dropped += *c == '\n';
        *pp = s->next;
        f->n_pending--;
        seg_free(s);
    }
}

/* Writes a segment marked `writing`; on success it leaves the pending list. */
static int write_segment(funcd_logstore *ls, funcd__log_fn *f, funcd__log_seg *s)
{
    int rc = funcd_port_blob_put(ls->blob, s->key, s->data, s->len);
    pthread_mutex_lock(&ls->lock);
    s->writing = 0;
    if (rc == 0) {
        unlink_locked(f, s);
        ls->stats.segments_sealed++;
        ls->stats.bytes_sealed += s->len;
    } else {
        ls->stats.put_failures++;
        shed_locked(ls, f);
        s = NULL;
    }
    pthread_mutex_unlock(&ls->lock);
    seg_free(s);
    return rc;
}

int funcd_logstore_new(funcd_logstore **out, funcd_blob *blob, const funcd_logstore_options *o)
{
    *out = NULL;
    if (!blob)
        return funcd_error_set(FUNCD_EINVAL, "logs: the log store needs a blob backend");
    const char *node = o ? o->node : NULL;
    if (node && (!node[0] || strlen(node) > 253 ||
                 strspn(node, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
                     strlen(node) ||
                 !strcmp(node, ".") || !strcmp(node, "..")))
        return funcd_error_set(FUNCD_EINVAL, "logs: node name \"%.80s\" cannot name log segments "
                               "(1 to 253 letters, digits, '.', '_' or '-')", node);
    funcd_logstore *ls = calloc(1, sizeof(*ls));
    if (!ls || (node && !(ls->node = strdup(node)))) {
        free(ls);
        return funcd_error_set(FUNCD_ENOMEM, "logs: out of memory creating the log store");
    }
    if (node && strlen(node) <= 32) {
        snprintf(ls->node_key, sizeof(ls->node_key), "%s", node);
    } else if (node) { /* a file blob's keys are file names: 255 bytes with ns and fn */
        uint64_t h = fn_hash(node, "");
        snprintf(ls->node_key, sizeof(ls->node_key), "%.15s~%016" PRIx64, node, h);
    }
    ls->blob = blob;
    ls->seal_ms = o && o->seal_ms ? o->seal_ms : FUNCD_LOGSTORE_SEAL_MS;
    ls->seal_bytes = o && o->seal_bytes ? o->seal_bytes : FUNCD_LOGSTORE_SEAL_BYTES;
    ls->retention_ms = o && o->retention_ms ? (int64_t)o->retention_ms
                                            : FUNCD_LOGSTORE_RETENTION_MS;
    char uuid[37];
    funcd_uuid4(uuid);
    memcpy(ls->instance, uuid, 8);
    pthread_mutex_init(&ls->lock, NULL);
    pthread_rwlock_init(&ls->layout, NULL);
    *out = ls;
    return 0;
}

void funcd_logstore_append(funcd_logstore *ls, const funcd_logstore_record *r)
{
    if (!ls || !r || !key_safe(r->ns) || !key_safe(r->fn))
        return;
    funcd_logstore_record own = *r;
    if (!own.node)
        own.node = ls->node;
    funcd_buf line = FUNCD_BUF_INIT;
    if (funcd_logstore_format(&line, &own) < 0 || funcd_buf_append(&line, "\n", 1) < 0) {
        funcd_buf_free(&line);
        return;
    }
    funcd__log_seg *full = NULL;
    pthread_mutex_lock(&ls->lock);
    funcd__log_fn *f = fn_get_locked(ls, r->ns, r->fn);
    if (f && funcd_buf_append(&f->open, line.data, line.len) == 0) {
        if (f->open.len == line.len)
            f->open_start = f->open_end = r->time_ms;
        if (r->time_ms > f->open_end)
            f->open_end = r->time_ms;
        ls->stats.appended++;
        if (f->open.len >= ls->seal_bytes && (full = seal_locked(ls, f)))
            full->writing = 1;
    }
    pthread_mutex_unlock(&ls->lock);
    funcd_buf_free(&line);
    if (full)
        write_segment(ls, f, full);
}

const char *funcd_logstore_node(const funcd_logstore *ls)
{
    return ls ? ls->node : NULL;
}

typedef struct work {
    funcd__log_fn *f;
    funcd__log_seg *s;
} work;

/* Seals what is due (everything when `all`) and claims every segment no
 * one is writing; the caller writes them outside the lock. */
static size_t claim_locked(funcd_logstore *ls, int64_t now, int all, work **out)
{
    size_t n = 0, cap = 0;
    work *w = NULL;
    for (size_t b = 0; b < FUNCD__LOG_BUCKETS; b++)
        for (funcd__log_fn *f = ls->buckets[b]; f; f = f->next) {
            if (f->open.len && (all || now - f->open_start >= (int64_t)ls->seal_ms))
                seal_locked(ls, f);
            for (funcd__log_seg *s = f->pending; s; s = s->next) {
                if (s->writing)
                    continue;
                if (n == cap) {
                    size_t nc = cap ? cap * 2 : 16;
                    work *nw = realloc(w, nc * sizeof(*w));
                    if (!nw)
                        goto out;
                    w = nw;
                    cap = nc;
                }
                s->writing = 1;
                w[n].f = f;
                w[n++].s = s;
            }
        }
out:
    *out = w;
    return n;
}

static void flush(funcd_logstore *ls, int64_t now, int all)
{
    pthread_mutex_lock(&ls->lock);
    work *w = NULL;
    size_t n = claim_locked(ls, now, all, &w);
    pthread_mutex_unlock(&ls->lock);
    for (size_t i = 0; i < n; i++)
        write_segment(ls, w[i].f, w[i].s);
    free(w);
}

/* ---- compaction and retention ------------------------------------------ */

static int collect_key(const char *key, const funcd_blob_stat *st, void *payload)
{
    (void)st;
    funcd__keylist *kl = payload;
    if (kl->n == kl->cap) {
        size_t nc = kl->cap ? kl->cap * 2 : 64;
        char **nk = realloc(kl->keys, nc * sizeof(*nk));
        if (!nk)
            return kl->failed = 1;
        kl->keys = nk;
        kl->cap = nc;
    }
    if (!(kl->keys[kl->n] = strdup(key)))
        return kl->failed = 1;
    kl->n++;
    return 0;
}

int funcd__logstore_keys(funcd_blob *blob, const char *prefix, funcd__keylist *out)
{
    memset(out, 0, sizeof(*out));
    int rc = funcd_port_blob_list(blob, prefix, collect_key, out);
    if (rc == 0 && out->failed)
        rc = funcd_error_set(FUNCD_ENOMEM, "logs: out of memory listing \"%s\"", prefix);
    return rc;
}

void funcd__keylist_free(funcd__keylist *kl)
{
    for (size_t i = 0; i < kl->n; i++)
        free(kl->keys[i]);
    free(kl->keys);
}

/* One function's objects, as maintenance sees them. */
typedef struct seg_ref {
    const char *key, *name; /* name: after "seg/" ("<node>/…" in a cluster) */
    int64_t start, end;
    char hour[16];
} seg_ref;

typedef struct fn_objects {
    char prefix[300];
    char ns[128], fn[128];
    seg_ref *segs;
    size_t n_segs;
    const char **hours; /* keys */
    size_t n_hours;
} fn_objects;

int funcd__logstore_seg_times(const char *name, int64_t *start, int64_t *end)
{
    const char *slash = strchr(name, '/');
    if (slash) /* "<node>/<start>-…": one level, no more */
        name = strchr(slash + 1, '/') ? "" : slash + 1;
    char dash1, dash2;
    return sscanf(name, "%13" SCNd64 "%c%13" SCNd64 "%c", start, &dash1, end, &dash2) == 4 &&
                   dash1 == '-' && dash2 == '-'
               ? 0
               : -1;
}

/* Splits "logs/<ns>/<fn>/<rest>"; 0 on success. */
static int split_key(const char *key, char ns[128], char fn[128], const char **rest)
{
    const char *a = key + 5, *b = strchr(a, '/'), *c = b ? strchr(b + 1, '/') : NULL;
    if (strncmp(key, "logs/", 5) != 0 || !b || !c || b - a >= 128 || c - b - 1 >= 128)
        return -1;
    snprintf(ns, 128, "%.*s", (int)(b - a), a);
    snprintf(fn, 128, "%.*s", (int)(c - b - 1), b + 1);
    *rest = c + 1;
    return 0;
}

/* The earliest record of the function still in memory (INT64_MAX: none). */
static int64_t busy_from(funcd_logstore *ls, const char *ns, const char *fn)
{
    int64_t from = INT64_MAX;
    pthread_mutex_lock(&ls->lock);
    funcd__log_fn *f = funcd__logstore_find(ls, ns, fn);
    if (f && f->open.len)
        from = f->open_start;
    for (funcd__log_seg *s = f ? f->pending : NULL; s; s = s->next)
        if (s->start < from)
            from = s->start;
    pthread_mutex_unlock(&ls->lock);
    return from;
}

typedef struct hour_obj {
    char *data; /* the whole object */
    size_t len;
    const char *body; /* after the header line */
    cJSON *header;
} hour_obj;

static int hour_covers(const hour_obj *h, const char *name)
{
    const cJSON *segs = cJSON_GetObjectItemCaseSensitive(h->header, "segments");
    const cJSON *it;
    cJSON_ArrayForEach(it, segs) if (cJSON_IsString(it) && strcmp(it->valuestring, name) == 0) return 1;
    return 0;
}

int funcd__logstore_hour_read(funcd_blob *blob, const char *key, char **data, size_t *len,
                              size_t *body_at, cJSON **header)
{
    void *d = NULL;
    size_t n = 0;
    int rc = funcd_port_blob_get(blob, key, 0, FUNCD_BLOB_TO_END, &d, &n);
    if (rc < 0)
        return rc;
    const char *nl = memchr(d, '\n', n);
    size_t hl = nl ? (size_t)(nl - (const char *)d) : n;
    *header = cJSON_ParseWithLength(d, hl);
    *data = d;
    *len = n;
    *body_at = nl ? hl + 1 : n;
    return 0;
}

static int64_t header_num(const cJSON *h, const char *name, int64_t dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(h, name);
    return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : dflt;
}

/* Merges the segments segs[0..n) of one hour (plus the hour object, if
 * there is one) into the hour object, then deletes the segments. */
static void compact_hour(funcd_logstore *ls, const fn_objects *fo, seg_ref *segs, size_t n)
{
    char key[400];
    snprintf(key, sizeof(key), "%shour/%s.jsonl", fo->prefix, segs[0].hour);
    hour_obj old = {0};
    size_t body_at = 0;
    int rc = funcd__logstore_hour_read(ls->blob, key, &old.data, &old.len, &body_at, &old.header);
    if (rc < 0 && rc != FUNCD_ENOTFOUND)
        return;
    int64_t start = header_num(old.header, "start", INT64_MAX);
    int64_t end = header_num(old.header, "end", INT64_MIN);
    funcd_buf out = FUNCD_BUF_INIT;
    rc = funcd_buf_printf(&out, "{\"funcdLogHour\":\"%s\",\"start\":", segs[0].hour);
    funcd_buf merged = FUNCD_BUF_INIT, names = FUNCD_BUF_INIT;
    if (old.data && body_at < old.len)
        rc |= funcd_buf_append(&merged, old.data + body_at, old.len - body_at);
    size_t added = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = funcd_buf_printf(&names, "%s\"%s\"", i ? "," : "", segs[i].name);
        if (segs[i].start < start)
            start = segs[i].start;
        if (segs[i].end > end)
            end = segs[i].end;
        if (old.header && hour_covers(&old, segs[i].name))
            continue; /* a leftover of a compaction cut short: already merged */
        void *d = NULL;
        size_t dl = 0;
        int g = funcd_port_blob_get(ls->blob, segs[i].key, 0, FUNCD_BLOB_TO_END, &d, &dl);
        if (g == FUNCD_ENOTFOUND)
            continue;
        if (g < 0)
            rc = -1;
        else if (dl && (rc = funcd_buf_append(&merged, d, dl)) == 0 && ((char *)d)[dl - 1] != '\n')
            rc = funcd_buf_append(&merged, "\n", 1);
        added++;
        free(d);
    }
    if (rc == 0)
        rc = funcd_buf_printf(&out, "%" PRId64 ",\"end\":%" PRId64 ",\"segments\":[%s]}\n", start,
                              end, names.data ? names.data : "");
    if (rc == 0 && merged.len)
        rc = funcd_buf_append(&out, merged.data, merged.len);
    /* Nothing new: the segments are leftovers already merged; just delete. */
    if (rc == 0 && added)
        rc = funcd_port_blob_put(ls->blob, key, out.data, out.len);
    if (rc == 0) {
        for (size_t i = 0; i < n; i++)
            funcd_port_blob_del(ls->blob, segs[i].key);
        pthread_mutex_lock(&ls->lock);
        ls->stats.hours_compacted += added != 0;
        pthread_mutex_unlock(&ls->lock);
    }
    funcd_buf_free(&out);
    funcd_buf_free(&merged);
    funcd_buf_free(&names);
    free(old.data);
    cJSON_Delete(old.header);
}

static void expire(funcd_logstore *ls, fn_objects *fo, int64_t now)
{
    int64_t horizon = now - ls->retention_ms;
    size_t kept = 0;
    for (size_t i = 0; i < fo->n_hours; i++) {
        const char *label = strrchr(fo->hours[i], '/') + 1;
        int64_t hs;
        if (funcd__logstore_hour_start(label, &hs) == 0 && hs + HOUR_MS <= horizon &&
            funcd_port_blob_del(ls->blob, fo->hours[i]) == 0) {
            pthread_mutex_lock(&ls->lock);
            ls->stats.hours_expired++;
            pthread_mutex_unlock(&ls->lock);
        }
    }
    for (size_t i = 0; i < fo->n_segs; i++) {
        if (fo->segs[i].end < horizon && funcd_port_blob_del(ls->blob, fo->segs[i].key) == 0)
            continue;
        fo->segs[kept++] = fo->segs[i];
    }
    fo->n_segs = kept;
}

static void maintain_fn(funcd_logstore *ls, fn_objects *fo, int64_t now)
{
    expire(ls, fo, now);
    int64_t busy = busy_from(ls, fo->ns, fo->fn);
    /* Other nodes' lines of an hour still in their memory are not known
     * here: wait their seal age past the hour (a later one is merged into
     * the hour on the next pass all the same). */
    int64_t grace = ls->node ? 2 * (int64_t)ls->seal_ms : 0;
    size_t i = 0;
    while (i < fo->n_segs) {
        size_t j = i + 1;
        while (j < fo->n_segs && strcmp(fo->segs[j].hour, fo->segs[i].hour) == 0)
            j++;
        int64_t hs;
        if (funcd__logstore_hour_start(fo->segs[i].hour, &hs) == 0 &&
            hs + HOUR_MS + grace <= now && busy >= hs + HOUR_MS)
            compact_hour(ls, fo, fo->segs + i, j - i);
        i = j;
    }
}

/* Adds keys[i] to the function group `fo`; 0 if it belongs elsewhere. */
static int group_add(fn_objects *fo, const char *key)
{
    char ns[128], fn[128];
    const char *rest;
    if (split_key(key, ns, fn, &rest) < 0 || strcmp(ns, fo->ns) != 0 || strcmp(fn, fo->fn) != 0)
        return 0;
    if (strncmp(rest, "hour/", 5) == 0) {
        fo->hours[fo->n_hours++] = key;
    } else if (strncmp(rest, "seg/", 4) == 0) {
        seg_ref *s = &fo->segs[fo->n_segs];
        s->key = key;
        s->name = rest + 4;
        if (funcd__logstore_seg_times(s->name, &s->start, &s->end) == 0 &&
            funcd__logstore_hour_label(s->hour, s->start) > 0)
            fo->n_segs++;
    }
    return 1;
}

static void maintain(funcd_logstore *ls, int64_t now)
{
    funcd__keylist kl;
    funcd__logstore_keys(ls->blob, "logs/", &kl);
    fn_objects fo = {0};
    fo.segs = calloc(kl.n + 1, sizeof(*fo.segs));
    fo.hours = calloc(kl.n + 1, sizeof(*fo.hours));
    pthread_rwlock_wrlock(&ls->layout);
    for (size_t i = 0; fo.segs && fo.hours && !kl.failed && i < kl.n;) {
        const char *rest;
        if (split_key(kl.keys[i], fo.ns, fo.fn, &rest) < 0) {
            i++;
            continue;
        }
        snprintf(fo.prefix, sizeof(fo.prefix), "logs/%s/%s/", fo.ns, fo.fn);
        fo.n_segs = fo.n_hours = 0;
        while (i < kl.n && group_add(&fo, kl.keys[i]))
            i++;
        maintain_fn(ls, &fo, now);
    }
    pthread_rwlock_unlock(&ls->layout);
    free(fo.segs);
    free(fo.hours);
    funcd__keylist_free(&kl);
}

/* ---- lifecycle ----------------------------------------------------------- */

void funcd_logstore_tick(funcd_logstore *ls, int64_t now_ms)
{
    if (!ls)
        return;
    flush(ls, now_ms, 0);
    if (ls->last_maintenance && now_ms - ls->last_maintenance < MAINTENANCE_EVERY_MS &&
        now_ms >= ls->last_maintenance)
        return;
    ls->last_maintenance = now_ms;
    maintain(ls, now_ms);
}

void funcd_logstore_flush(funcd_logstore *ls, int64_t now_ms)
{
    if (ls)
        flush(ls, now_ms, 0);
}

void funcd_logstore_stats_get(funcd_logstore *ls, funcd_logstore_stats *out)
{
    pthread_mutex_lock(&ls->lock);
    *out = ls->stats;
    pthread_mutex_unlock(&ls->lock);
}

void funcd_logstore_free(funcd_logstore *ls)
{
    if (!ls)
        return;
    flush(ls, 0, 1);
    for (size_t b = 0; b < FUNCD__LOG_BUCKETS; b++)
        while (ls->buckets[b]) {
            funcd__log_fn *f = ls->buckets[b];
            ls->buckets[b] = f->next;
            while (f->pending) { /* the blob refused them: they are lost */
                funcd__log_seg *s = f->pending;
                f->pending = s->next;
                seg_free(s);
            }
            funcd_buf_free(&f->open);
            free(f->prefix);
            free(f->ns);
            free(f->fn);
            free(f);
        }
    pthread_rwlock_destroy(&ls->layout);
    pthread_mutex_destroy(&ls->lock);
    free(ls->node);
    free(ls);
}
