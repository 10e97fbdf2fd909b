/*
 * The OTLP sender (otlp.h). Producers take the lock only to append to a
 * queue; the sender thread takes a batch out, encodes it and POSTs it with
 * the lock released, so a slow or absent collector holds up no one: the
 * queues fill up and then drop (counted).
 *
 * Log lines are tied to traces through the edge's START records: a table
 * from invocation id to the edge span (its trace and span id), filled as
 * requests start. The serving layer tells which invocation a line belongs
 * to (docs/logs.md); the exporter adds that invocation's trace. A line of
 * an invocation not in the table yet waits one flush (at most 500 ms) for
 * its START record, then goes without a trace.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "funcd/sys/error.h"
#include "oci/curl_lazy.h"
#include "otlp/otlp.h"
#include "util/misc.h"

#define TRACE_SLOTS 8192   /* invocation -> trace, direct-mapped */
#define LOG_HOLD_MS 500    /* a line waits this long for its invocation's trace */
#define MAX_BACKOFF_MS 5000
#define SHUTDOWN_MS 3000   /* what freeing may spend sending the rest */

typedef struct trace_slot {
    char invocation_id[40];
    uint8_t trace_id[16], span_id[8], flags;
} trace_slot;

struct funcd_otlp {
    char *traces_url, *logs_url, *metrics_url;
    uint64_t metrics_ms;
    pthread_mutex_t metrics_lock; /* held while collecting; guards `metrics` */
    funcd_metrics *metrics;
    uint64_t start_ns;
    int64_t next_metrics_ms;
    uint64_t flush_ms, retry_base_ms;
    size_t max_batch, max_queue;
    unsigned max_attempts;
    funcd_logger logger;
    funcd_log_observer_fn next;
    void *next_payload;

    pthread_mutex_t lock;
    pthread_cond_t cond;
    funcd_otlp_span *spans;
    size_t nspans;
    funcd_otlp_log *logs;
    size_t nlogs;
    trace_slot *traces;
    uint64_t dropped;
    int stop;
    pthread_t thread;

    /* the sender thread's own */
    CURL *curl;
    int curl_failed;
    char last_error[256];
    _Atomic int64_t deadline_ms; /* once stopping: no try starts after it */
};

/* ---- producers ---------------------------------------------------------- */

static unsigned slot_of(const char *id)
{
    uint32_t h = 2166136261u;
    for (; *id; id++)
        h = (h ^ (unsigned char)*id) * 16777619u;
    return h % TRACE_SLOTS;
}

void funcd_otlp_on_edge(const funcd_edge_rec *r, void *payload)
{
    funcd_otlp *o = payload;
    pthread_mutex_lock(&o->lock);
    if (r->kind == FUNCD_EDGE_START) {
        trace_slot *t = &o->traces[slot_of(r->invocation_id)];
        snprintf(t->invocation_id, sizeof(t->invocation_id), "%s", r->invocation_id);
        memcpy(t->trace_id, r->trace_id, 16);
        memcpy(t->span_id, r->span_id, 8);
        t->flags = r->flags;
    } else if (o->nspans >= o->max_queue) {
        o->dropped++;
    } else {
        funcd_otlp_span *s = &o->spans[o->nspans++];
        memcpy(s->trace_id, r->trace_id, 16);
        memcpy(s->span_id, r->span_id, 8);
        memcpy(s->parent_id, r->parent_id, 8);
        memcpy(s->wait_span_id, r->wait_span_id, 8);
        s->flags = r->flags;
        s->has_parent = r->continued;
        s->waited = r->waited;
        s->status = r->status;
        s->start_ns = r->start_ns;
        s->end_ns = r->end_ns;
        s->wait_start_ns = r->wait_start_ns;
        s->wait_end_ns = r->wait_end_ns;
        memcpy(s->method, r->method, sizeof(s->method));
        memcpy(s->path, r->path, sizeof(s->path));
        memcpy(s->ns, r->ns, sizeof(s->ns));
        memcpy(s->fn, r->fn, sizeof(s->fn));
        memcpy(s->invocation_id, r->invocation_id, sizeof(s->invocation_id));
        if (o->nspans >= o->max_batch)
            pthread_cond_signal(&o->cond);
    }
    pthread_mutex_unlock(&o->lock);
}

/* A copy of the line that is valid UTF-8 (protobuf strings must be): each
 * byte that does not start a well-formed sequence becomes U+FFFD. */
static char *utf8_copy(const char *s, size_t n, size_t *out_len)
{
    char *out = malloc(n * 3 + 1), *p = out;
    if (!out)
        return NULL;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        int ok = len && i + len <= n && (len != 2 || c >= 0xc2);
        for (size_t k = 1; ok && k < len; k++)
            ok = (u[i + k] & 0xc0) == 0x80;
        if (ok && len == 3) { /* no overlongs, no surrogates */
            unsigned cp = (c & 15) << 12 | (u[i + 1] & 63) << 6 | (u[i + 2] & 63);
            ok = cp >= 0x800 && (cp < 0xd800 || cp > 0xdfff);
        } else if (ok && len == 4) {
            unsigned cp = (c & 7) << 18 | (u[i + 1] & 63) << 12 | (u[i + 2] & 63) << 6 |
                          (u[i + 3] & 63);
            ok = cp >= 0x10000 && cp <= 0x10ffff;
        }
        if (ok && c) {
            memcpy(p, u + i, len);
            p += len;
            i += len;
        } else {
            memcpy(p, "\xef\xbf\xbd", 3);
            p += 3;
            i++;
        }
    }
    *p = '\0';
    *out_len = (size_t)(p - out);
    return out;
}

void funcd_otlp_observe(const funcd_log_record *rec, void *payload)
{
    funcd_otlp *o = payload;
    size_t len = 0;
    char *line = utf8_copy(rec->line, rec->len, &len);
    pthread_mutex_lock(&o->lock);
    if (!line || o->nlogs >= o->max_queue) {
        o->dropped++;
        pthread_mutex_unlock(&o->lock);
        free(line);
    } else {
        funcd_otlp_log *l = &o->logs[o->nlogs++];
        memset(l, 0, sizeof(*l));
        l->time_ns = rec->time_ms * 1000000;
        l->stream = rec->stream;
        snprintf(l->ns, sizeof(l->ns), "%s", rec->namespace_ ? rec->namespace_ : "");
        snprintf(l->fn, sizeof(l->fn), "%s", rec->function ? rec->function : "");
        snprintf(l->replica, sizeof(l->replica), "%s", rec->replica ? rec->replica : "");
        snprintf(l->invocation_id, sizeof(l->invocation_id), "%s",
                 rec->invocation_id ? rec->invocation_id : "");
        l->line = line;
        l->len = len;
        l->queued_ms = funcd_mono_ms();
        if (o->nlogs >= o->max_batch)
            pthread_cond_signal(&o->cond);
        pthread_mutex_unlock(&o->lock);
    }
    if (o->next)
        o->next(rec, o->next_payload);
}

void funcd_otlp_set_next_observer(funcd_otlp *o, funcd_log_observer_fn fn, void *payload)
{
    o->next = fn;
    o->next_payload = payload;
}

uint64_t funcd_otlp_dropped(funcd_otlp *o)
{
    pthread_mutex_lock(&o->lock);
    uint64_t n = o->dropped;
    pthread_mutex_unlock(&o->lock);
    return n;
}

/* ---- the sender ----------------------------------------------------------- */

static size_t discard(char *p, size_t size, size_t n, void *unused)
{
    (void)p;
    (void)unused;
    return size * n;
}

/* One POST: the HTTP status, or 0 when no answer came (why in last_error). */
static long post(funcd_otlp *o, const char *url, const uint8_t *body, size_t len)
{
    if (!o->curl) {
        if (funcd__curl_load() < 0 || !(o->curl = curl_easy_init())) {
            if (!o->curl_failed)
                funcd_log(&o->logger, FUNCD_LOG_ERROR, "otlp: libcurl is not available: %s",
                          funcd_error_last()->message);
            o->curl_failed = 1;
            return 0;
        }
    }
    CURL *c = o->curl;
    struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/x-protobuf");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, (const char *)body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 3000L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    else
        snprintf(o->last_error, sizeof(o->last_error), "%s", curl_easy_strerror(rc));
    curl_slist_free_all(hdrs);
    return status;
}

static struct timespec mono_after(uint64_t ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += (time_t)(ms / 1000);
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

/* Waits `ms` before a retry; stopping cuts the wait short only by making
 * the next try the last (the deadline), never by retrying at once. */
static void backoff_wait(funcd_otlp *o, uint64_t ms)
{
    struct timespec until = mono_after(ms);
    pthread_mutex_lock(&o->lock);
    while (pthread_cond_timedwait(&o->cond, &o->lock, &until) == 0)
        ;
    pthread_mutex_unlock(&o->lock);
}

/* Sends one encoded batch of `items`, retrying what may succeed later
 * (no answer, 429, 5xx) with exponential backoff; counts it as dropped
 * when it never arrives. */
static void send_batch(funcd_otlp *o, const char *what, const char *url, uint8_t *body,
                       size_t len, size_t items)
{
    uint64_t backoff = o->retry_base_ms;
    long status = 0;
    unsigned attempt = 0;
    while (body) {
        status = post(o, url, body, len);
        attempt++;
        if (status >= 200 && status < 300)
            break;
        int retryable = status == 0 || status == 429 || status >= 500;
        int64_t deadline = atomic_load(&o->deadline_ms);
        int stopping = deadline && funcd_mono_ms() + (int64_t)backoff > deadline;
        if (!retryable || attempt >= o->max_attempts || stopping || o->curl_failed)
            break;
        backoff_wait(o, backoff);
        backoff = backoff * 2 > MAX_BACKOFF_MS ? MAX_BACKOFF_MS : backoff * 2;
    }
    free(body);
    if (body && status >= 200 && status < 300)
        return;
    pthread_mutex_lock(&o->lock);
    o->dropped += items;
    pthread_mutex_unlock(&o->lock);
    if (!body)
        funcd_log(&o->logger, FUNCD_LOG_WARN, "otlp: %zu %s dropped: out of memory", items, what);
    else if (status)
        funcd_log(&o->logger, FUNCD_LOG_WARN, "otlp: %zu %s dropped: %s answered %ld after %u "
                  "tries", items, what, url, status, attempt);
    else if (!o->curl_failed)
        funcd_log(&o->logger, FUNCD_LOG_WARN, "otlp: %zu %s dropped: %s: %s after %u tries",
                  items, what, url, o->last_error, attempt);
}

/* Takes up to max_batch spans (lock held). */
static funcd_otlp_span *take_spans(funcd_otlp *o, size_t *n)
{
    *n = o->nspans < o->max_batch ? o->nspans : o->max_batch;
    if (!*n)
        return NULL;
    funcd_otlp_span *batch = malloc(*n * sizeof(*batch));
    if (!batch) {
        *n = 0;
        return NULL;
    }
    memcpy(batch, o->spans, *n * sizeof(*batch));
    memmove(o->spans, o->spans + *n, (o->nspans - *n) * sizeof(*batch));
    o->nspans -= *n;
    return batch;
}

/* Takes up to max_batch log lines with their traces (lock held); a line
 * whose invocation has no trace yet stays, for LOG_HOLD_MS at most. */
static funcd_otlp_log *take_logs(funcd_otlp *o, size_t *n, int final)
{
    *n = 0;
    if (!o->nlogs)
        return NULL;
    funcd_otlp_log *batch = malloc((o->nlogs < o->max_batch ? o->nlogs : o->max_batch) *
                                   sizeof(*batch));
    if (!batch)
        return NULL;
    int64_t now = funcd_mono_ms();
    size_t kept = 0;
    for (size_t i = 0; i < o->nlogs; i++) {
        funcd_otlp_log *l = &o->logs[i];
        if (*n < o->max_batch && l->invocation_id[0] && !l->has_trace) {
            const trace_slot *t = &o->traces[slot_of(l->invocation_id)];
            if (strcmp(t->invocation_id, l->invocation_id) == 0) {
                memcpy(l->trace_id, t->trace_id, 16);
                memcpy(l->span_id, t->span_id, 8);
                l->flags = t->flags;
                l->has_trace = 1;
            }
        }
        int wait = !final && l->invocation_id[0] && !l->has_trace &&
                   now - l->queued_ms < LOG_HOLD_MS;
        if (*n < o->max_batch && !wait)
            batch[(*n)++] = *l;
        else
            o->logs[kept++] = *l;
    }
    o->nlogs = kept;
    return batch;
}

static void flush_once(funcd_otlp *o, int final)
{
    pthread_mutex_lock(&o->lock);
    size_t ns, nl;
    funcd_otlp_span *spans = take_spans(o, &ns);
    funcd_otlp_log *logs = take_logs(o, &nl, final);
    pthread_mutex_unlock(&o->lock);
    if (ns) {
        size_t len = 0;
        uint8_t *body = funcd_otlp_encode_spans(spans, ns, &len);
        send_batch(o, "spans", o->traces_url, body, len, ns);
    }
    if (nl) {
        size_t len = 0;
        uint8_t *body = funcd_otlp_encode_logs(logs, nl, &len);
        send_batch(o, "log records", o->logs_url, body, len, nl);
        for (size_t i = 0; i < nl; i++)
            free(logs[i].line);
    }
    free(spans);
    free(logs);
}

void funcd_otlp_set_metrics(funcd_otlp *o, funcd_metrics *m)
{
    pthread_mutex_lock(&o->metrics_lock);
    o->metrics = m;
    pthread_mutex_unlock(&o->metrics_lock);
}

void funcd_otlp_stop_metrics(funcd_otlp *o)
{
    if (o)
        funcd_otlp_set_metrics(o, NULL);
}

static uint64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Every metrics_ms: the whole registry, one request. */
static void send_metrics(funcd_otlp *o)
{
    int64_t now = funcd_mono_ms();
    if (now < o->next_metrics_ms)
        return;
    o->next_metrics_ms = now + (int64_t)o->metrics_ms;
    uint64_t dropped = funcd_otlp_dropped(o);
    size_t len = 0;
    uint8_t *body = NULL;
    pthread_mutex_lock(&o->metrics_lock);
    int on = o->metrics != NULL;
    if (on)
        body = funcd_otlp_encode_metrics(o->metrics, o->start_ns, wall_ns(), dropped, &len);
    pthread_mutex_unlock(&o->metrics_lock);
    if (on)
        send_batch(o, "metric batches", o->metrics_url, body, len, 0);
}

static void *sender_main(void *arg)
{
    funcd_otlp *o = arg;
    pthread_mutex_lock(&o->lock);
    while (!o->stop) {
        struct timespec until = mono_after(o->flush_ms);
        if (o->metrics_ms < o->flush_ms) /* (metrics are looked at after each flush) */
            until = mono_after(o->metrics_ms);
        while (!o->stop && o->nspans < o->max_batch && o->nlogs < o->max_batch &&
               pthread_cond_timedwait(&o->cond, &o->lock, &until) == 0)
            ;
        if (o->stop)
            break;
        pthread_mutex_unlock(&o->lock);
        flush_once(o, 0);
        send_metrics(o);
        pthread_mutex_lock(&o->lock);
    }
    pthread_mutex_unlock(&o->lock);
    /* Stopping: what is queued gets its tries until the deadline. */
    for (;;) {
        pthread_mutex_lock(&o->lock);
        int more = o->nspans || o->nlogs;
        pthread_mutex_unlock(&o->lock);
        if (!more)
            break;
        if (funcd_mono_ms() >= atomic_load(&o->deadline_ms) || o->curl_failed) {
            pthread_mutex_lock(&o->lock);
            o->dropped += o->nspans + o->nlogs;
            for (size_t i = 0; i < o->nlogs; i++)
                free(o->logs[i].line);
            o->nspans = o->nlogs = 0;
            pthread_mutex_unlock(&o->lock);
            break;
        }
        flush_once(o, 1);
    }
    return NULL;
}

static char *join_url(const char *base, const char *path)
{
    size_t n = strlen(base);
    while (n && base[n - 1] == '/')
        n--;
    char *s = NULL;
    if (asprintf(&s, "%.*s%s", (int)n, base, path) < 0)
        return NULL;
    return s;
}

int funcd_otlp_new(funcd_otlp **out, const funcd_otlp_config *cfg)
{
    *out = NULL;
    const char *ep = cfg->endpoint;
    if (!ep || (strncmp(ep, "http://", 7) != 0 && strncmp(ep, "https://", 8) != 0) ||
        strlen(ep) <= (ep[4] == 's' ? 8u : 7u) || strpbrk(ep, " \t\r\n?#"))
        return funcd_error_set(FUNCD_EINVAL, "OTLP endpoint \"%s\": give an http:// or https:// "
                               "URL without query, like http://127.0.0.1:4318",
                               ep ? ep : "(null)");
    funcd_otlp *o = calloc(1, sizeof(*o));
    if (!o)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory starting the OTLP exporter");
    o->flush_ms = cfg->flush_ms ? cfg->flush_ms : 1000;
    o->max_batch = cfg->max_batch ? cfg->max_batch : 512;
    o->max_queue = cfg->max_queue ? cfg->max_queue : 8192;
    if (o->max_batch > o->max_queue)
        o->max_batch = o->max_queue;
    o->retry_base_ms = cfg->retry_base_ms ? cfg->retry_base_ms : 200;
    o->max_attempts = cfg->max_attempts ? cfg->max_attempts : 6;
    o->metrics_ms = cfg->metrics_ms ? cfg->metrics_ms : 10000;
    o->start_ns = wall_ns();
    o->next_metrics_ms = funcd_mono_ms() + (int64_t)o->metrics_ms;
    pthread_mutex_init(&o->metrics_lock, NULL);
    if (cfg->logger)
        o->logger = *cfg->logger;
    o->traces_url = join_url(ep, "/v1/traces");
    o->logs_url = join_url(ep, "/v1/logs");
    o->metrics_url = join_url(ep, "/v1/metrics");
    o->spans = calloc(o->max_queue, sizeof(*o->spans));
    o->logs = calloc(o->max_queue, sizeof(*o->logs));
    o->traces = calloc(TRACE_SLOTS, sizeof(*o->traces));
    pthread_mutex_init(&o->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&o->cond, &ca);
    pthread_condattr_destroy(&ca);
    int rc = 0;
    if (!o->traces_url || !o->logs_url || !o->metrics_url || !o->spans || !o->logs || !o->traces)
        rc = funcd_error_set(FUNCD_ENOMEM, "out of memory starting the OTLP exporter");
    else if ((rc = pthread_create(&o->thread, NULL, sender_main, o)) != 0)
        rc = funcd_error_set(FUNCD_EIO, "cannot start the OTLP exporter: %s", strerror(rc));
    if (rc < 0) {
        pthread_cond_destroy(&o->cond);
        pthread_mutex_destroy(&o->lock);
        pthread_mutex_destroy(&o->metrics_lock);
        free(o->traces_url);
        free(o->logs_url);
        free(o->metrics_url);
        free(o->spans);
        free(o->logs);
        free(o->traces);
        free(o);
        return rc;
    }
    *out = o;
    return 0;
}

void funcd_otlp_free(funcd_otlp *o)
{
    if (!o)
        return;
    atomic_store(&o->deadline_ms, funcd_mono_ms() + SHUTDOWN_MS);
    pthread_mutex_lock(&o->lock);
    o->stop = 1;
    pthread_cond_signal(&o->cond);
    pthread_mutex_unlock(&o->lock);
    pthread_join(o->thread, NULL);
    if (o->dropped)
        funcd_log(&o->logger, FUNCD_LOG_WARN, "otlp: %llu items dropped in all",
                  (unsigned long long)o->dropped);
    if (o->curl)
        curl_easy_cleanup(o->curl);
    pthread_cond_destroy(&o->cond);
    pthread_mutex_destroy(&o->lock);
    pthread_mutex_destroy(&o->metrics_lock);
    free(o->traces_url);
    free(o->logs_url);
    free(o->metrics_url);
    free(o->spans);
    free(o->logs);
    free(o->traces);
    free(o);
}
