/*
 * Reading persistent logs: hour objects, then sealed segments, then what is
 * still in memory, each in time order. A segment is skipped when an hour
 * object's header names it (a compaction was cut short after writing the
 * hour) or when it is still in memory (its put finished after the snapshot).
 *
 * A logstore with a node name shares its blob with other nodes: when the
 * listing holds another node's segments, they overlap ours in time, so the
 * matches are collected, sorted by time (stable: one node's order stays)
 * and emitted after the last object. Nothing is emitted before, so a
 * segment the leader's compaction deleted under us (the hour object we
 * read was older) just reads everything again. A node alone streams, as
 * without a name; an hour object that merged other nodes' segments is
 * sorted on its own before it is streamed.
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "funcd/sys/error.h"
#include "logstore/internal.h"
#include "port/blob.h"
#include "util/misc.h"

typedef struct emitter {
    int64_t since;
    const char *inv;
    size_t inv_len;
    size_t tail; /* 0: every match goes to cb at once */
    funcd_logstore_cb cb;
    void *payload;
    int stopped;
    char **kept; /* the last `tail` matches, a ring once full */
    size_t *kept_len;
    size_t head, count, cap;
    int merge; /* collect every match into `all`, then sort by time */
    struct timed *all;
    size_t n_all, cap_all;
    funcd_buf text; /* the collected lines, one after the other: two blocks to free, not
                       one per line (a follower's replay freed line by line left the
                       daemon's RSS 25% higher for good, durable/limits-follow-memory) */
} emitter;

typedef struct timed {
    int64_t time;
    size_t seq; /* the order read: ties keep it */
    size_t off; /* in `text` */
    size_t len;
} timed;

static int matches(const emitter *e, const char *line, size_t len, int64_t *time)
{
    int64_t t = 0;
    const char *inv = NULL;
    size_t il = 0;
    cJSON *j = NULL;
    if (funcd__logstore_peek(line, len, &t, &inv, &il) < 0) {
        j = cJSON_ParseWithLength(line, len);
        const char *ts = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "time"));
        if (!ts || funcd__logstore_parse_time(ts, strlen(ts), &t) < 0)
            t = 0;
        inv = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "invocationId"));
        il = inv ? strlen(inv) : 0;
    }
    int ok = t >= e->since &&
             (!e->inv || (inv && il == e->inv_len && memcmp(inv, e->inv, il) == 0));
    cJSON_Delete(j);
    *time = t;
    return ok;
}

static int collect(emitter *e, const char *line, size_t len, int64_t time)
{
    if (e->n_all == e->cap_all) {
        size_t nc = e->cap_all ? e->cap_all * 2 : 256;
        timed *na = realloc(e->all, nc * sizeof(*na));
        if (!na)
            return -1;
        e->all = na;
        e->cap_all = nc;
    }
    timed *t = &e->all[e->n_all];
    t->off = e->text.len;
    if (funcd_buf_append(&e->text, line, len) < 0)
        return -1;
    t->time = time;
    t->seq = e->n_all++;
    t->len = len;
    return 0;
}

static int by_time(const void *a, const void *b)
{
    const timed *x = a, *y = b;
    if (x->time != y->time)
        return x->time < y->time ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void drop_collected(emitter *e)
{
    e->n_all = 0;
    funcd_buf_reset(&e->text);
}

/* The merged answer: every match in time order, the last `tail` of them. */
static void emit_collected(emitter *e)
{
    if (e->n_all)
        qsort(e->all, e->n_all, sizeof(*e->all), by_time);
    size_t from = e->tail && e->tail < e->n_all ? e->n_all - e->tail : 0;
    for (size_t i = from; i < e->n_all && !e->stopped; i++)
        e->stopped = e->cb(e->text.data + e->all[i].off, e->all[i].len, e->payload) != 0;
    drop_collected(e);
    free(e->all);
    e->all = NULL;
    funcd_buf_free(&e->text);
}

static int keep(emitter *e, const char *line, size_t len)
{
    char *copy = funcd_strndup(line, len);
    if (!copy)
        return -1;
    if (e->count < e->tail) {
        if (e->count == e->cap) {
            size_t nc = e->cap ? e->cap * 2 : 64;
            if (nc > e->tail)
                nc = e->tail;
            char **nk = realloc(e->kept, nc * sizeof(*nk));
            size_t *nl = nk ? realloc(e->kept_len, nc * sizeof(*nl)) : NULL;
            if (nk)
                e->kept = nk;
            if (!nl) {
                free(copy);
                return -1;
            }
            e->kept_len = nl;
            e->cap = nc;
        }
        e->kept[e->count] = copy;
        e->kept_len[e->count++] = len;
        return 0;
    }
    free(e->kept[e->head]);
    e->kept[e->head] = copy;
    e->kept_len[e->head] = len;
    e->head = (e->head + 1) % e->tail;
    return 0;
}

/* Passes a match on when not merging: to the caller, or to the tail. */
static int pass(emitter *e, const char *line, size_t len)
{
    if (!e->tail)
        e->stopped = e->cb(line, len, e->payload) != 0;
    else if (keep(e, line, len) < 0)
        return funcd_error_set(FUNCD_ENOMEM, "logs: out of memory keeping the tail");
    return 0;
}

static int scan(emitter *e, const char *data, size_t len)
{
    const char *p = data, *end = data + len;
    while (p < end && !e->stopped) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = (size_t)((nl ? nl : end) - p);
        int64_t t;
        if (n && matches(e, p, n, &t)) {
            if (e->merge) {
                if (collect(e, p, n, t) < 0)
                    return funcd_error_set(FUNCD_ENOMEM, "logs: out of memory merging nodes");
            } else if (pass(e, p, n) < 0) {
                return -1;
            }
        }
        p = nl ? nl + 1 : end;
    }
    return 0;
}

static void emit_kept(emitter *e)
{
    for (size_t i = 0; i < e->count; i++) {
        size_t at = (e->head + i) % e->count;
        if (!e->stopped)
            e->stopped = e->cb(e->kept[at], e->kept_len[at], e->payload) != 0;
        free(e->kept[at]);
    }
    free(e->kept);
    free(e->kept_len);
}

/* What of the function is in memory, copied so no lock is held while
 * the blob is read. */
typedef struct snapshot {
    char **keys; /* pending segments' keys */
    funcd_buf data; /* pending segments then the open buffer, in order */
    size_t n;
} snapshot;

static int take_snapshot(funcd_logstore *ls, const char *ns, const char *fn, snapshot *snap)
{
    int rc = 0;
    memset(snap, 0, sizeof(*snap));
    pthread_mutex_lock(&ls->lock);
    funcd__log_fn *f = funcd__logstore_find(ls, ns, fn);
    if (f && f->n_pending && !(snap->keys = calloc(f->n_pending, sizeof(char *))))
        rc = -1;
    for (funcd__log_seg *s = f ? f->pending : NULL; s && rc == 0; s = s->next) {
        if (!(snap->keys[snap->n] = strdup(s->key)))
            rc = -1;
        else
            snap->n++;
        if (rc == 0)
            rc = funcd_buf_append(&snap->data, s->data, s->len);
    }
    if (rc == 0 && f && f->open.len)
        rc = funcd_buf_append(&snap->data, f->open.data, f->open.len);
    pthread_mutex_unlock(&ls->lock);
    return rc < 0 ? funcd_error_set(FUNCD_ENOMEM, "logs: out of memory reading %s/%s", ns, fn) : 0;
}

static void snapshot_free(snapshot *snap)
{
    for (size_t i = 0; i < snap->n; i++)
        free(snap->keys[i]);
    free(snap->keys);
    funcd_buf_free(&snap->data);
}

static int in_memory(const snapshot *snap, const char *key)
{
    for (size_t i = 0; i < snap->n; i++)
        if (strcmp(snap->keys[i], key) == 0)
            return 1;
    return 0;
}

/* The "end" of an hour object's header, from its first bytes only. */
static int64_t hour_end(funcd_blob *blob, const char *key)
{
    void *d = NULL;
    size_t n = 0;
    int64_t end = INT64_MAX; /* unknown: read it */
    if (funcd_port_blob_get(blob, key, 0, 160, &d, &n) == 0) {
        char head[161];
        memcpy(head, d, n);
        head[n] = '\0';
        const char *at = strstr(head, "\"end\":");
        if (at)
            end = strtoll(at + 6, NULL, 10);
    }
    free(d);
    return end;
}

typedef struct reader {
    funcd_logstore *ls;
    emitter *e;
    cJSON **headers; /* of the hour objects read */
    size_t n_headers;
    size_t plen;  /* of "logs/<ns>/<fn>/" */
    int vanished; /* a listed segment was gone when read */
} reader;

static int covered(const reader *r, const char *name)
{
    for (size_t i = 0; i < r->n_headers; i++) {
        const cJSON *it, *segs = cJSON_GetObjectItemCaseSensitive(r->headers[i], "segments");
        cJSON_ArrayForEach(it, segs) if (cJSON_IsString(it) && !strcmp(it->valuestring, name))
            return 1;
    }
    return 0;
}

/* Whether a segment's name ("<node>/<file>", or "<file>" from before
 * nodes) is another node's than this logstore's. */
static int others(const funcd_logstore *ls, const char *name)
{
    const char *slash = strchr(name, '/');
    size_t n = slash ? (size_t)(slash - name) : 0;
    return slash && (n != strlen(ls->node_key) || memcmp(name, ls->node_key, n) != 0);
}

static int lists_others(const funcd_logstore *ls, const funcd__keylist *kl, size_t plen)
{
    for (size_t i = 0; i < kl->n; i++)
        if (strncmp(kl->keys[i] + plen, "seg/", 4) == 0 && others(ls, kl->keys[i] + plen + 4))
            return 1;
    return 0;
}

/* Streams an hour object's body; one that merged other nodes' segments
 * (its header names them) is sorted by time first. */
static int scan_hour(reader *r, const cJSON *header, const char *body, size_t len)
{
    emitter *e = r->e;
    const cJSON *it;
    int mixed = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(header, "segments"))
        mixed |= cJSON_IsString(it) && others(r->ls, it->valuestring);
    if (e->merge || !mixed)
        return scan(e, body, len);
    e->merge = 1;
    int rc = scan(e, body, len);
    e->merge = 0;
    if (e->n_all)
        qsort(e->all, e->n_all, sizeof(*e->all), by_time);
    for (size_t i = 0; rc == 0 && i < e->n_all && !e->stopped; i++)
        rc = pass(e, e->text.data + e->all[i].off, e->all[i].len);
    drop_collected(e);
    return rc;
}

static int read_hour(reader *r, const char *key)
{
    if (hour_end(r->ls->blob, key) < r->e->since)
        return 0; /* its leftover segments end before `since` too */
    char *data = NULL;
    size_t len = 0, body_at = 0;
    cJSON *header = NULL;
    int rc = funcd__logstore_hour_read(r->ls->blob, key, &data, &len, &body_at, &header);
    if (rc == FUNCD_ENOTFOUND)
        return 0;
    if (rc == 0)
        rc = scan_hour(r, header, data + body_at, len - body_at);
    if (header)
        r->headers[r->n_headers++] = header;
    free(data);
    return rc;
}

static int read_segment(reader *r, const char *key, const snapshot *snap)
{
    const char *name = key + r->plen + 4; /* after "seg/": "[<node>/]<start>-…" */
    int64_t start, end;
    if (covered(r, name) || in_memory(snap, key) ||
        (funcd__logstore_seg_times(name, &start, &end) == 0 && end < r->e->since))
        return 0;
    void *d = NULL;
    size_t n = 0;
    int rc = funcd_port_blob_get(r->ls->blob, key, 0, FUNCD_BLOB_TO_END, &d, &n);
    if (rc == 0)
        rc = scan(r->e, d, n);
    free(d);
    r->vanished |= rc == FUNCD_ENOTFOUND;
    return rc == FUNCD_ENOTFOUND ? 0 : rc;
}

static int read_objects(reader *r, const funcd__keylist *kl, size_t plen, const snapshot *snap)
{
    int rc = 0;
    if (kl->n && !(r->headers = calloc(kl->n, sizeof(*r->headers))))
        return funcd_error_set(FUNCD_ENOMEM, "logs: out of memory reading");
    /* "hour/" sorts before "seg/": every header is known before a segment. */
    for (size_t i = 0; i < kl->n && rc == 0 && !r->e->stopped; i++) {
        const char *rest = kl->keys[i] + plen;
        if (strncmp(rest, "hour/", 5) == 0)
            rc = read_hour(r, kl->keys[i]);
        else if (strncmp(rest, "seg/", 4) == 0)
            rc = read_segment(r, kl->keys[i], snap);
    }
    return rc;
}

/* One pass over the objects and the memory of a function; 1 when merging
 * and a segment vanished under us (the caller reads again). */
static int query_once(funcd_logstore *ls, emitter *e, const funcd_buf *prefix, const char *ns,
                      const char *fn)
{
    reader r = {.ls = ls, .e = e, .plen = prefix->len};
    snapshot snap;
    funcd__keylist kl = {0};
    pthread_rwlock_rdlock(&ls->layout);
    int rc = take_snapshot(ls, ns, fn, &snap);
    if (rc == 0)
        rc = funcd__logstore_keys(ls->blob, prefix->data, &kl);
    if (rc == 0 && ls->node && !e->merge) /* once merging, every try merges */
        e->merge = lists_others(ls, &kl, prefix->len);
    if (rc == 0)
        rc = read_objects(&r, &kl, prefix->len, &snap);
    pthread_rwlock_unlock(&ls->layout);
    if (rc == 0 && !e->stopped)
        rc = scan(e, snap.data.data ? snap.data.data : "", snap.data.len);
    if (rc == 0 && e->merge && r.vanished)
        rc = 1;
    for (size_t i = 0; i < r.n_headers; i++)
        cJSON_Delete(r.headers[i]);
    free(r.headers);
    funcd__keylist_free(&kl);
    snapshot_free(&snap);
    return rc;
}

int funcd_logstore_query(funcd_logstore *ls, const char *ns, const char *fn, int64_t since_ms,
                         const char *invocation, size_t tail, funcd_logstore_cb cb, void *payload)
{
    funcd_buf prefix = FUNCD_BUF_INIT;
    if (!ls || !cb || funcd__logstore_prefix(&prefix, ns, fn) < 0) {
        funcd_buf_free(&prefix);
        return funcd_error_set(FUNCD_EINVAL, "logs: a query needs a namespace and a function");
    }
    emitter e = {.since = since_ms, .inv = invocation, .inv_len = invocation ? strlen(invocation) : 0,
                 .tail = tail, .cb = cb, .payload = payload};
    int rc, tries = 0;
    do {
        drop_collected(&e);
        rc = query_once(ls, &e, &prefix, ns, fn);
    } while (rc == 1 && ++tries < 3);
    if (rc == 1)
        rc = funcd_error_set(FUNCD_EIO, "logs: segments of %s/%s kept moving while read", ns, fn);
    if (rc < 0)
        e.stopped = 1; /* a partial answer would look complete */
    emit_collected(&e); /* when streaming: frees what a mixed hour's sort used */
    emit_kept(&e);
    funcd_buf_free(&prefix);
    return rc;
}
