#include "serving/logs.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "funcd/sys/error.h"
#include "util/misc.h"

typedef struct record {
    int64_t time_ms;
    int stream;
    char replica[64];
    char invocation_id[40];
    char *line;
    size_t len;
} record;

struct funcd_log_follower {
    funcd_log_follow_cb cb;
    void *payload;
    funcd_log_follower *next;
};

struct funcd_log_ring {
    pthread_mutex_t lock;
    atomic_int refs;
    record recs[FUNCD_LOG_RING];
    size_t head, count; /* recs[head] is the oldest */
    funcd_log_follower *followers;
    funcd_logstore *store; /* borrowed; NULL: the ring only */
    char *ns, *fn;
};

funcd_log_ring *funcd_log_ring_new(void)
{
    funcd_log_ring *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    pthread_mutex_init(&r->lock, NULL);
    atomic_init(&r->refs, 1);
    return r;
}

funcd_log_ring *funcd_log_ring_new_stored(funcd_logstore *store, const char *ns, const char *name)
{
    funcd_log_ring *r = funcd_log_ring_new();
    if (r && (!(r->ns = strdup(ns ? ns : "")) || !(r->fn = strdup(name ? name : "")))) {
        funcd_log_ring_unref(r);
        return NULL;
    }
    if (r)
        r->store = store;
    return r;
}

void funcd_log_ring_ref(funcd_log_ring *r)
{
    atomic_fetch_add(&r->refs, 1);
}

void funcd_log_ring_unref(funcd_log_ring *r)
{
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    for (size_t i = 0; i < FUNCD_LOG_RING; i++)
        free(r->recs[i].line);
    while (r->followers) {
        funcd_log_follower *f = r->followers;
        r->followers = f->next;
        free(f);
    }
    pthread_mutex_destroy(&r->lock);
    free(r->ns);
    free(r->fn);
    free(r);
}

static funcd_log_line view(const funcd_log_ring *r, const record *rec)
{
    funcd_log_line l = {rec->time_ms, rec->replica, rec->stream,
                        rec->invocation_id[0] ? rec->invocation_id : NULL, rec->line, rec->len,
                        r->ns, r->fn, funcd_logstore_node(r->store)};
    return l;
}

void funcd_log_ring_append(funcd_log_ring *r, const funcd_log_line *in)
{
    char *copy = malloc(in->len + 1);
    if (!copy)
        return;
    memcpy(copy, in->line, in->len);
    copy[in->len] = '\0';
    pthread_mutex_lock(&r->lock);
    size_t slot = (r->head + r->count) % FUNCD_LOG_RING;
    if (r->count == FUNCD_LOG_RING) {
        slot = r->head;
        r->head = (r->head + 1) % FUNCD_LOG_RING;
    } else {
        r->count++;
    }
    record *rec = &r->recs[slot];
    free(rec->line);
    rec->time_ms = in->time_ms;
    rec->stream = in->stream;
    snprintf(rec->replica, sizeof(rec->replica), "%s", in->replica ? in->replica : "");
    snprintf(rec->invocation_id, sizeof(rec->invocation_id), "%s",
             in->invocation_id ? in->invocation_id : "");
    rec->line = copy;
    rec->len = in->len;
    funcd_log_line l = view(r, rec);
    if (r->store) {
        funcd_logstore_record sr = {l.time_ms, r->ns, r->fn, l.replica, l.invocation_id,
                                    l.stream, l.line, l.len};
        funcd_logstore_append(r->store, &sr);
    }
    for (funcd_log_follower *f = r->followers; f; f = f->next)
        f->cb(&l, f->payload);
    pthread_mutex_unlock(&r->lock);
}

static void read_locked(funcd_log_ring *r, size_t tail, funcd_log_follow_cb cb, void *payload)
{
    size_t n = tail && tail < r->count ? tail : r->count;
    for (size_t i = r->count - n; i < r->count; i++) {
        funcd_log_line l = view(r, &r->recs[(r->head + i) % FUNCD_LOG_RING]);
        cb(&l, payload);
    }
}

void funcd_log_ring_read(funcd_log_ring *r, size_t tail, funcd_log_follow_cb cb, void *payload)
{
    pthread_mutex_lock(&r->lock);
    read_locked(r, tail, cb, payload);
    pthread_mutex_unlock(&r->lock);
}

funcd_log_follower *funcd_log_ring_follow(funcd_log_ring *r, size_t tail, funcd_log_follow_cb cb,
                                          void *payload)
{
    return funcd_log_ring_follow_with_history(r, tail, cb, cb, payload);
}

funcd_log_follower *funcd_log_ring_follow_with_history(funcd_log_ring *r, size_t tail,
                                                       funcd_log_follow_cb history_cb,
                                                       funcd_log_follow_cb cb, void *payload)
{
    funcd_log_follower *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    f->cb = cb;
    f->payload = payload;
    pthread_mutex_lock(&r->lock);
    if (tail != SIZE_MAX)
        read_locked(r, tail, history_cb, payload);
    f->next = r->followers;
    r->followers = f;
    pthread_mutex_unlock(&r->lock);
    return f;
}

void funcd_log_ring_unfollow(funcd_log_ring *r, funcd_log_follower *f)
{
    pthread_mutex_lock(&r->lock);
    for (funcd_log_follower **pp = &r->followers; *pp; pp = &(*pp)->next)
        if (*pp == f) {
            *pp = f->next;
            break;
        }
    pthread_mutex_unlock(&r->lock);
    free(f);
}

int funcd_log_line_json(funcd_buf *out, const funcd_log_line *rec)
{
    funcd_logstore_record r = {rec->time_ms, rec->ns, rec->fn, rec->replica, rec->invocation_id,
                               rec->stream, rec->line, rec->len, rec->node};
    int rc = funcd_logstore_format(out, &r);
    return rc < 0 ? rc : funcd_buf_append(out, "\n", 1);
}

/* ---- queries ------------------------------------------------------------ */

typedef struct ring_history {
    const funcd_log_query *q;
    funcd_logstore_cb cb;
    void *payload;
    int stopped;
    funcd_buf line;
} ring_history;

static void ring_record(const funcd_log_line *rec, void *payload)
{
    ring_history *h = payload;
    if (h->stopped || rec->time_ms < h->q->since_ms ||
        (h->q->invocation[0] &&
         (!rec->invocation_id || strcmp(rec->invocation_id, h->q->invocation) != 0)))
        return;
    funcd_buf_reset(&h->line);
    funcd_logstore_record r = {rec->time_ms, rec->ns, rec->fn, rec->replica, rec->invocation_id,
                               rec->stream, rec->line, rec->len, rec->node};
    if (funcd_logstore_format(&h->line, &r) == 0)
        h->stopped = h->cb(h->line.data, h->line.len, h->payload) != 0;
}

/* The ring keeps no index: filter everything, then keep the tail. */
static void ring_history_locked(funcd_log_ring *r, const funcd_log_query *q,
                                funcd_logstore_cb cb, void *payload)
{
    size_t matching = 0;
    for (size_t i = 0; i < r->count; i++) {
        const record *rec = &r->recs[(r->head + i) % FUNCD_LOG_RING];
        matching += rec->time_ms >= q->since_ms &&
                    (!q->invocation[0] || strcmp(rec->invocation_id, q->invocation) == 0);
    }
    size_t skip = q->tail && q->tail < matching ? matching - q->tail : 0;
    ring_history h = {q, cb, payload, 0, FUNCD_BUF_INIT};
    for (size_t i = 0; i < r->count; i++) {
        const record *rec = &r->recs[(r->head + i) % FUNCD_LOG_RING];
        if (rec->time_ms < q->since_ms ||
            (q->invocation[0] && strcmp(rec->invocation_id, q->invocation) != 0))
            continue;
        if (skip) {
            skip--;
            continue;
        }
        funcd_log_line l = view(r, rec);
        ring_record(&l, &h);
    }
    funcd_buf_free(&h.line);
}

static int history_locked(funcd_log_ring *r, const funcd_log_query *q, funcd_logstore_cb cb,
                          void *payload)
{
    if (q->tail == SIZE_MAX)
        return 0;
    if (!r->store) {
        ring_history_locked(r, q, cb, payload);
        return 0;
    }
    return funcd_logstore_query(r->store, r->ns, r->fn, q->since_ms,
                                q->invocation[0] ? q->invocation : NULL, q->tail, cb, payload);
}

int funcd_log_ring_query(funcd_log_ring *r, const funcd_log_query *q, funcd_logstore_cb history,
                         void *payload)
{
    if (r->store) /* the store has its own locks; appends need not wait */
        return history_locked(r, q, history, payload);
    pthread_mutex_lock(&r->lock);
    int rc = history_locked(r, q, history, payload);
    pthread_mutex_unlock(&r->lock);
    return rc;
}

funcd_log_follower *funcd_log_ring_follow_query(funcd_log_ring *r, const funcd_log_query *q,
                                                funcd_logstore_cb history, funcd_log_follow_cb cb,
                                                void *payload)
{
    funcd_log_follower *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    f->cb = cb;
    f->payload = payload;
    pthread_mutex_lock(&r->lock);
    history_locked(r, q, history, payload);
    f->next = r->followers;
    r->followers = f;
    pthread_mutex_unlock(&r->lock);
    return f;
}

/* ---- query strings ------------------------------------------------------- */

static int hexval(char c)
{
    if (isdigit((unsigned char)c))
        return c - '0';
    return isxdigit((unsigned char)c) ? tolower((unsigned char)c) - 'a' + 10 : -1;
}

/* Percent-decodes [v, v+n) into out; 0, or -1 if it does not fit. */
static int decode(const char *v, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = v[i];
        if (c == '+')
            c = ' ';
        else if (c == '%' && i + 2 < n && hexval(v[i + 1]) >= 0 && hexval(v[i + 2]) >= 0) {
            c = (char)(hexval(v[i + 1]) * 16 + hexval(v[i + 2]));
            i += 2;
        }
        if (o + 1 >= cap)
            return -1;
        out[o++] = c;
    }
    out[o] = '\0';
    return 0;
}

static int bad(const char **bad_field, const char *field)
{
    *bad_field = field;
    return FUNCD_EINVAL;
}

static int query_param(funcd_log_query *q, const char *name, const char *value, int64_t now_ms,
                       const char **bad_field)
{
    if (!strcmp(name, "follow")) {
        q->follow = !strcmp(value, "true") || !strcmp(value, "1");
    } else if (!strcmp(name, "tailLines") && value[0]) {
        char *end;
        errno = 0;
        long long n = strtoll(value, &end, 10);
        if (*end || n < 0 || errno || strspn(value, "0123456789") != strlen(value)) {
            funcd_error_set(FUNCD_EINVAL, "tailLines \"%.32s\" is not a non-negative number "
                            "(at most %lld)", value, LLONG_MAX);
            return bad(bad_field, "tailLines");
        }
        q->tail = n == 0 ? SIZE_MAX : (size_t)n; /* 0: no history, just what comes next */
    } else if (!strcmp(name, "since") && value[0]) {
        if (value[0] == '-' || funcd_logstore_parse_since(value, now_ms, &q->since_ms) < 0) {
            funcd_error_set(FUNCD_EINVAL,
                            "since \"%s\" is not a duration; write it like 90s, 5m or 2h",
                            value);
            return bad(bad_field, "since");
        }
    } else if (!strcmp(name, "invocation")) {
        snprintf(q->invocation, sizeof(q->invocation), "%s", value);
    }
    return 0;
}

int funcd_log_query_parse(funcd_log_query *out, const char *query, size_t len, int64_t now_ms,
                          const char **bad_field)
{
    memset(out, 0, sizeof(*out));
    *bad_field = NULL;
    if (!now_ms)
        now_ms = funcd_now_ms();
    const char *p = query, *end = query ? query + len : NULL;
    while (p && p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(stop - p));
        char name[32], value[256];
        const char *kend = eq ? eq : stop;
        if (decode(p, (size_t)(kend - p), name, sizeof(name)) == 0) {
            int too_long = eq && decode(eq + 1, (size_t)(stop - eq - 1), value, sizeof(value)) < 0;
            if (!eq || too_long)
                value[0] = '\0';
            if (too_long && (!strcmp(name, "since") || !strcmp(name, "invocation") ||
                             !strcmp(name, "tailLines"))) {
                funcd_error_set(FUNCD_EINVAL, "the value of %s is too long", name);
                return bad(bad_field, !strcmp(name, "since") ? "since"
                                      : !strcmp(name, "tailLines") ? "tailLines" : "invocation");
            }
            int rc = query_param(out, name, value, now_ms, bad_field);
            if (rc < 0)
                return rc;
        }
        p = amp ? amp + 1 : end;
    }
    return 0;
}
