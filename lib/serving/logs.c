#include "serving/logs.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    free(r);
}

static funcd_log_line view(const record *rec)
{
    funcd_log_line l = {rec->time_ms, rec->replica, rec->stream,
                        rec->invocation_id[0] ? rec->invocation_id : NULL, rec->line, rec->len};
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
    funcd_log_line l = view(rec);
    for (funcd_log_follower *f = r->followers; f; f = f->next)
        f->cb(&l, f->payload);
    pthread_mutex_unlock(&r->lock);
}

static void read_locked(funcd_log_ring *r, size_t tail, funcd_log_follow_cb cb, void *payload)
{
    size_t n = tail && tail < r->count ? tail : r->count;
    for (size_t i = r->count - n; i < r->count; i++) {
        funcd_log_line l = view(&r->recs[(r->head + i) % FUNCD_LOG_RING]);
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
    char ts[40];
    time_t t = (time_t)(rec->time_ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    size_t n = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + n, sizeof(ts) - n, ".%03dZ", (int)(rec->time_ms % 1000));
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "time", ts);
    cJSON_AddStringToObject(o, "replica", rec->replica ? rec->replica : "");
    cJSON_AddStringToObject(o, "stream", rec->stream == 2 ? "stderr" : "stdout");
    if (rec->invocation_id)
        cJSON_AddStringToObject(o, "invocationId", rec->invocation_id);
    char *line = malloc(rec->len + 1);
    if (line) {
        memcpy(line, rec->line, rec->len);
        line[rec->len] = '\0';
        /* cJSON needs valid text: a line with a NUL is cut there. */
        cJSON_AddStringToObject(o, "line", line);
        free(line);
    }
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text)
        return -1;
    int rc = funcd_buf_printf(out, "%s\n", text);
    free(text);
    return rc;
}
