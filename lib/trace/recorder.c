/*
 * The writer thread of edge records (edge.h): every 10 ms it empties each
 * gateway thread's ring, writes the access log lines of what ended (the
 * only place that may wait on a disk) and hands every record to the sink
 * (the OTLP exporter). A gateway thread never waits for it: when a ring is
 * full the record is dropped and counted.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "funcd/sys/error.h"
#include "trace/edge.h"
#include "trace/recorder_ring.h"
#include "trace/traceparent.h"
#include "util/misc.h"

#define DRAIN_MS 10

struct funcd_edge_recorder {
    int fd;          /* the access log, or -1 */
    int own_fd;      /* 0 for stdout */
    funcd_edge_sink_fn sink;
    void *sink_payload;
    int want_starts;
    funcd_logger logger;
    pthread_mutex_t lock; /* the ring list and `stop` */
    pthread_cond_t cond;
    funcd_edge_ring *rings;
    int stop;
    int write_failed; /* said once */
    pthread_t thread;
    funcd_buf out;
};

static void json_string(funcd_buf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    funcd_buf_append(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        const unsigned char *run = p;
        while (*p >= 0x20 && *p != '"' && *p != '\\')
            p++;
        funcd_buf_append(b, run, (size_t)(p - run));
        if (!*p)
            break;
        char esc[6] = {'\\', (char)*p, 0, 0, 0, 0};
        if (*p < 0x20) {
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[*p >> 4];
            esc[5] = hex[*p & 15];
            funcd_buf_append(b, esc, 6);
        } else {
            funcd_buf_append(b, esc, 2);
        }
    }
    funcd_buf_append(b, "\"", 1);
}

/* Writes `v` in decimal at `out` (at least 20 bytes); its length. */
static size_t put_u64(char *out, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

/* `v` (< 10^digits) in exactly `digits` decimal digits. */
static void put_fixed(char *out, unsigned v, int digits)
{
    for (int i = digits - 1; i >= 0; i--) {
        out[i] = (char)('0' + v % 10);
        v /= 10;
    }
}

/*
 * The line by hand: this runs once per request on the writer thread, where
 * snprintf, strftime and a double's %.3f cost ~11,600 instructions a line
 * (bench/edge-cost.sh with EDGE_COST_ACCESS_LOG=1). The time's date part
 * comes from gmtime_r once per second (a line's second is mostly the last
 * one's).
 */
void funcd_edge_access_line(const funcd_edge_rec *r, funcd_buf *b)
{
    static _Thread_local struct {
        int64_t sec;
        char text[20]; /* YYYY-MM-DDTHH:MM:SS */
        int ok;
    } day;
    int64_t start_ms = r->start_ns / 1000000;
    int64_t sec = start_ms / 1000;
    if (!day.ok || day.sec != sec) {
        char when[40];
        funcd_rfc3339(start_ms, when, sizeof(when)); /* ...:SSZ */
        day.ok = strlen(when) == 20;
        memcpy(day.text, when, sizeof(day.text));
        day.sec = sec;
    }
    char when[40];
    if (day.ok) {
        memcpy(when, day.text, 19);
        when[19] = '.';
        put_fixed(when + 20, (unsigned)(start_ms % 1000), 3);
        memcpy(when + 23, "Z", 2);
    } else { /* a year of more than four digits: as strftime writes it */
        funcd_rfc3339(start_ms, when, sizeof(when));
    }
    char trace[33];
    funcd_trace_hex(r->trace_id, 16, trace);
    funcd_buf_puts(b, "{\"time\":\"");
    funcd_buf_puts(b, when);
    funcd_buf_puts(b, "\",\"method\":");
    json_string(b, r->method);
    funcd_buf_puts(b, ",\"path\":");
    json_string(b, r->path);
    /* ,"status":S,"bytes":B,"durationMs":M.UUU, the duration rounded to
     * the microsecond */
    char num[128];
    size_t n = 0;
    memcpy(num + n, ",\"status\":", 10);
    n += 10;
    if (r->status < 0) {
        num[n++] = '-';
        n += put_u64(num + n, (uint64_t)-(int64_t)r->status);
    } else {
        n += put_u64(num + n, (uint64_t)r->status);
    }
    memcpy(num + n, ",\"bytes\":", 9);
    n += 9;
    n += put_u64(num + n, r->bytes);
    memcpy(num + n, ",\"durationMs\":", 14);
    n += 14;
    int64_t d = r->end_ns - r->start_ns;
    if (d < 0) {
        num[n++] = '-';
        d = -d;
    }
    uint64_t us = ((uint64_t)d + 500) / 1000;
    n += put_u64(num + n, us / 1000);
    num[n++] = '.';
    put_fixed(num + n, (unsigned)(us % 1000), 3);
    n += 3;
    memcpy(num + n, ",\"namespace\":", 13);
    n += 13;
    funcd_buf_append(b, num, n);
    json_string(b, r->ns);
    funcd_buf_puts(b, ",\"function\":");
    json_string(b, r->fn);
    funcd_buf_puts(b, ",\"invocationId\":");
    json_string(b, r->invocation_id);
    funcd_buf_puts(b, ",\"traceId\":\"");
    funcd_buf_append(b, trace, 32);
    funcd_buf_puts(b, "\"}\n");
}

static void write_out(funcd_edge_recorder *rec)
{
    const char *p = rec->out.data;
    size_t n = rec->out.len;
    while (n) {
        ssize_t w = write(rec->fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (!rec->write_failed)
                funcd_log(&rec->logger, FUNCD_LOG_ERROR, "access log: write failed: %s",
                          w < 0 ? strerror(errno) : "nothing written");
            rec->write_failed = 1;
            break;
        }
        p += w;
        n -= (size_t)w;
    }
    funcd_buf_reset(&rec->out);
}

static void drain(funcd_edge_recorder *rec)
{
    pthread_mutex_lock(&rec->lock);
    funcd_edge_ring *rings = rec->rings; /* rings are only ever added at the head */
    pthread_mutex_unlock(&rec->lock);
    for (funcd_edge_ring *ring = rings; ring; ring = ring->next) {
        uint32_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
        uint32_t head = atomic_load_explicit(&ring->head, memory_order_acquire);
        for (; tail != head; tail++) {
            const funcd_edge_rec *r = &ring->recs[tail % FUNCD_EDGE_RING_SLOTS];
            if (r->kind == FUNCD_EDGE_END && rec->fd >= 0)
                funcd_edge_access_line(r, &rec->out);
            if (rec->sink)
                rec->sink(r, rec->sink_payload);
        }
        atomic_store_explicit(&ring->tail, tail, memory_order_release);
    }
    if (rec->out.len)
        write_out(rec);
}

static void *writer_main(void *arg)
{
    funcd_edge_recorder *rec = arg;
    pthread_mutex_lock(&rec->lock);
    while (!rec->stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += DRAIN_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&rec->cond, &rec->lock, &until);
        pthread_mutex_unlock(&rec->lock);
        drain(rec);
        pthread_mutex_lock(&rec->lock);
    }
    pthread_mutex_unlock(&rec->lock);
    drain(rec); /* what the last requests left */
    return NULL;
}

int funcd_edge_recorder_new(funcd_edge_recorder **out, const char *access_log,
                            funcd_edge_sink_fn sink, void *sink_payload, int want_starts,
                            const funcd_logger *lg)
{
    *out = NULL;
    funcd_edge_recorder *rec = calloc(1, sizeof(*rec));
    if (!rec)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory starting the edge recorder");
    rec->fd = -1;
    if (access_log && strcmp(access_log, "-") == 0) {
        rec->fd = STDOUT_FILENO;
    } else if (access_log) {
        rec->fd = open(access_log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
        if (rec->fd < 0) {
            int e = errno;
            free(rec);
            return funcd_error_set(FUNCD_EIO, "cannot open the access log %s: %s", access_log,
                                   strerror(e));
        }
        rec->own_fd = 1;
    }
    rec->sink = sink;
    rec->sink_payload = sink_payload;
    rec->want_starts = sink && want_starts;
    if (lg)
        rec->logger = *lg;
    pthread_mutex_init(&rec->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&rec->cond, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&rec->thread, NULL, writer_main, rec);
    if (rc != 0) {
        pthread_cond_destroy(&rec->cond);
        pthread_mutex_destroy(&rec->lock);
        if (rec->own_fd)
            close(rec->fd);
        free(rec);
        return funcd_error_set(FUNCD_EIO, "cannot start the edge recorder: %s", strerror(rc));
    }
    *out = rec;
    return 0;
}

funcd_edge_ring *funcd_edge_recorder_attach(funcd_edge_recorder *rec)
{
    if (!rec)
        return NULL;
    funcd_edge_ring *ring = calloc(1, sizeof(*ring));
    if (!ring)
        return NULL;
    ring->want_starts = rec->want_starts;
    pthread_mutex_lock(&rec->lock);
    ring->next = rec->rings;
    rec->rings = ring;
    pthread_mutex_unlock(&rec->lock);
    return ring;
}

uint64_t funcd_edge_recorder_dropped(funcd_edge_recorder *rec)
{
    uint64_t n = 0;
    if (!rec)
        return 0;
    pthread_mutex_lock(&rec->lock);
    for (funcd_edge_ring *r = rec->rings; r; r = r->next)
        n += atomic_load_explicit(&r->dropped, memory_order_relaxed);
    pthread_mutex_unlock(&rec->lock);
    return n;
}

void funcd_edge_recorder_free(funcd_edge_recorder *rec)
{
    if (!rec)
        return;
    pthread_mutex_lock(&rec->lock);
    rec->stop = 1;
    pthread_cond_signal(&rec->cond);
    pthread_mutex_unlock(&rec->lock);
    pthread_join(rec->thread, NULL);
    uint64_t dropped = funcd_edge_recorder_dropped(rec);
    if (dropped)
        funcd_log(&rec->logger, FUNCD_LOG_WARN,
                  "edge recorder: %llu request records dropped (a gateway thread's ring was full)",
                  (unsigned long long)dropped);
    while (rec->rings) {
        funcd_edge_ring *r = rec->rings;
        rec->rings = r->next;
        free(r);
    }
    if (rec->own_fd)
        close(rec->fd);
    funcd_buf_free(&rec->out);
    pthread_cond_destroy(&rec->cond);
    pthread_mutex_destroy(&rec->lock);
    free(rec);
}
