/*
 * Tracing at the data-plane edge, end to end (docs/observability.md): the
 * W3C traceparent a worker gets (continued, started, or replacing an
 * invalid one), the access log line of each request, field by field, and
 * OTLP export to a receiver in this test, which decodes what it gets with
 * the protobuf-c code generated from proto/opentelemetry (the same
 * definitions funcd encodes with). The fixture worker echoes the
 * traceparent and tracestate it received.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../harness.h"
#include "opentelemetry/proto/collector/logs/v1/logs_service.pb-c.h"
#include "opentelemetry/proto/collector/metrics/v1/metrics_service.pb-c.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb-c.h"
#include "test_serving_common.h"
#include "trace/traceparent.h"

#define CALLER_TRACE "4bf92f3577b34da6a3ce929d0e0e4736"
#define CALLER_SPAN "00f067aa0ba902b7"
#define CALLER_TP "00-" CALLER_TRACE "-" CALLER_SPAN "-01"

/* ---- an OTLP/HTTP receiver ---------------------------------------------- */

/*
 * One thread serving HTTP/1.1 POSTs on a loopback port (keep-alive, a few
 * connections at once). Each body is decoded as an ExportTraceServiceRequest
 * (/v1/traces) or ExportLogsServiceRequest (/v1/logs); what it held is kept
 * as JSON for the checks: spans {traceId, spanId, parentSpanId, name, kind,
 * attrs}, logs {body, traceId, spanId, attrs}. The first `fail_traces`
 * trace POSTs are answered 503.
 */
typedef struct otlp_rx {
    int fd, port;
    pthread_t thread;
    pthread_mutex_t lock;
    int stop;
    int fail_traces;
    int trace_posts, log_posts, metric_posts, bad_posts;
    cJSON *spans, *logs, *metrics;
} otlp_rx;

static otlp_rx rx;

typedef struct rx_conn {
    int fd;
    char *buf;
    size_t len, cap;
} rx_conn;

static void hex_of(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
    out[2 * n] = '\0';
}

static void add_hex(cJSON *o, const char *key, ProtobufCBinaryData d)
{
    char hex[80] = "";
    if (d.len <= 32)
        hex_of(d.data, d.len, hex);
    cJSON_AddStringToObject(o, key, hex);
}

static cJSON *attrs_json(Opentelemetry__Proto__Common__V1__KeyValue **kv, size_t n)
{
    cJSON *a = cJSON_CreateObject();
    for (size_t i = 0; i < n; i++) {
        const Opentelemetry__Proto__Common__V1__AnyValue *v = kv[i]->value;
        if (v && v->value_case == OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE)
            cJSON_AddStringToObject(a, kv[i]->key, v->string_value);
        else if (v && v->value_case == OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE)
            cJSON_AddNumberToObject(a, kv[i]->key, (double)v->int_value);
    }
    return a;
}

/* Metrics as {name, kind: "sum"|"gauge"|"histogram", points: [{attrs,
 * value or count}]}. */
static int rx_take_metrics(const uint8_t *body, size_t len)
{
    Opentelemetry__Proto__Collector__Metrics__V1__ExportMetricsServiceRequest *req =
        opentelemetry__proto__collector__metrics__v1__export_metrics_service_request__unpack(
            NULL, len, body);
    if (!req)
        return -1;
    for (size_t i = 0; i < req->n_resource_metrics; i++)
        for (size_t j = 0; j < req->resource_metrics[i]->n_scope_metrics; j++) {
            const Opentelemetry__Proto__Metrics__V1__ScopeMetrics *sm =
                req->resource_metrics[i]->scope_metrics[j];
            for (size_t k = 0; k < sm->n_metrics; k++) {
                const Opentelemetry__Proto__Metrics__V1__Metric *m = sm->metrics[k];
                cJSON *o = cJSON_CreateObject(), *pts = cJSON_CreateArray();
                cJSON_AddStringToObject(o, "name", m->name);
                if (m->data_case == OPENTELEMETRY__PROTO__METRICS__V1__METRIC__DATA_HISTOGRAM) {
                    cJSON_AddStringToObject(o, "kind", "histogram");
                    for (size_t p = 0; p < m->histogram->n_data_points; p++) {
                        const Opentelemetry__Proto__Metrics__V1__HistogramDataPoint *d =
                            m->histogram->data_points[p];
                        cJSON *pt = cJSON_CreateObject();
                        cJSON_AddItemToObject(pt, "attrs",
                                              attrs_json(d->attributes, d->n_attributes));
                        cJSON_AddNumberToObject(pt, "count", (double)d->count);
                        uint64_t in_buckets = 0;
                        for (size_t b = 0; b < d->n_bucket_counts; b++)
                            in_buckets += d->bucket_counts[b];
                        cJSON_AddNumberToObject(pt, "inBuckets", (double)in_buckets);
                        cJSON_AddNumberToObject(pt, "bounds", (double)d->n_explicit_bounds);
                        cJSON_AddItemToArray(pts, pt);
                    }
                } else {
                    int sum = m->data_case == OPENTELEMETRY__PROTO__METRICS__V1__METRIC__DATA_SUM;
                    cJSON_AddStringToObject(o, "kind", sum ? "sum" : "gauge");
                    size_t n = sum ? m->sum->n_data_points : m->gauge->n_data_points;
                    for (size_t p = 0; p < n; p++) {
                        const Opentelemetry__Proto__Metrics__V1__NumberDataPoint *d =
                            sum ? m->sum->data_points[p] : m->gauge->data_points[p];
                        cJSON *pt = cJSON_CreateObject();
                        cJSON_AddItemToObject(pt, "attrs",
                                              attrs_json(d->attributes, d->n_attributes));
                        cJSON_AddNumberToObject(pt, "value", d->as_double);
                        cJSON_AddItemToArray(pts, pt);
                    }
                }
                cJSON_AddItemToObject(o, "points", pts);
                cJSON_AddItemToArray(rx.metrics, o);
            }
        }
    opentelemetry__proto__collector__metrics__v1__export_metrics_service_request__free_unpacked(
        req, NULL);
    return 0;
}

/* Decodes a POST body; 0, or -1 when it is not the message its path says. */
static int rx_take(const char *path, const uint8_t *body, size_t len)
{
    if (strcmp(path, "/v1/metrics") == 0)
        return rx_take_metrics(body, len);
    if (strcmp(path, "/v1/traces") == 0) {
        Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceRequest *req =
            opentelemetry__proto__collector__trace__v1__export_trace_service_request__unpack(
                NULL, len, body);
        if (!req)
            return -1;
        for (size_t i = 0; i < req->n_resource_spans; i++)
            for (size_t j = 0; j < req->resource_spans[i]->n_scope_spans; j++) {
                const Opentelemetry__Proto__Trace__V1__ScopeSpans *ss =
                    req->resource_spans[i]->scope_spans[j];
                for (size_t k = 0; k < ss->n_spans; k++) {
                    const Opentelemetry__Proto__Trace__V1__Span *sp = ss->spans[k];
                    cJSON *o = cJSON_CreateObject();
                    add_hex(o, "traceId", sp->trace_id);
                    add_hex(o, "spanId", sp->span_id);
                    add_hex(o, "parentSpanId", sp->parent_span_id);
                    cJSON_AddStringToObject(o, "name", sp->name);
                    cJSON_AddNumberToObject(o, "kind", sp->kind);
                    cJSON_AddNumberToObject(o, "durationNs",
                                            (double)(sp->end_time_unix_nano -
                                                     sp->start_time_unix_nano));
                    cJSON_AddNumberToObject(o, "startNs", (double)sp->start_time_unix_nano);
                    cJSON_AddItemToObject(o, "attrs", attrs_json(sp->attributes, sp->n_attributes));
                    cJSON_AddItemToArray(rx.spans, o);
                }
            }
        opentelemetry__proto__collector__trace__v1__export_trace_service_request__free_unpacked(
            req, NULL);
        return 0;
    }
    Opentelemetry__Proto__Collector__Logs__V1__ExportLogsServiceRequest *req =
        opentelemetry__proto__collector__logs__v1__export_logs_service_request__unpack(NULL, len,
                                                                                        body);
    if (!req)
        return -1;
    for (size_t i = 0; i < req->n_resource_logs; i++)
        for (size_t j = 0; j < req->resource_logs[i]->n_scope_logs; j++) {
            const Opentelemetry__Proto__Logs__V1__ScopeLogs *sl =
                req->resource_logs[i]->scope_logs[j];
            for (size_t k = 0; k < sl->n_log_records; k++) {
                const Opentelemetry__Proto__Logs__V1__LogRecord *lr = sl->log_records[k];
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(
                    o, "body",
                    lr->body && lr->body->value_case ==
                                    OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE
                        ? lr->body->string_value
                        : "");
                add_hex(o, "traceId", lr->trace_id);
                add_hex(o, "spanId", lr->span_id);
                cJSON_AddItemToObject(o, "attrs", attrs_json(lr->attributes, lr->n_attributes));
                cJSON_AddItemToArray(rx.logs, o);
            }
        }
    opentelemetry__proto__collector__logs__v1__export_logs_service_request__free_unpacked(req,
                                                                                          NULL);
    return 0;
}

/* Answers every complete request in the connection's buffer; -1: close. */
static int rx_serve(rx_conn *c)
{
    for (;;) {
        char *end = c->len ? memmem(c->buf, c->len, "\r\n\r\n", 4) : NULL;
        if (!end)
            return 0;
        size_t head = (size_t)(end - c->buf) + 4, clen = 0;
        char method[8] = "", path[64] = "";
        if (sscanf(c->buf, "%7s %63s", method, path) != 2)
            return -1;
        for (char *l = strstr(c->buf, "\r\n"); l && l < end; l = strstr(l + 2, "\r\n"))
            if (strncasecmp(l + 2, "content-length:", 15) == 0)
                clen = strtoul(l + 17, NULL, 10);
        if (c->len < head + clen)
            return 0;
        const char *answer = "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\n"
                             "Content-Length: 0\r\n\r\n";
        pthread_mutex_lock(&rx.lock);
        int traces = strcmp(path, "/v1/traces") == 0, logs = strcmp(path, "/v1/logs") == 0;
        int metrics = strcmp(path, "/v1/metrics") == 0;
        rx.metric_posts += metrics;
        if (strcmp(method, "POST") != 0 || (!traces && !logs && !metrics)) {
            rx.bad_posts++;
            answer = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
        } else if (traces && rx.trace_posts++ < rx.fail_traces) {
            answer = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n";
        } else {
            rx.log_posts += logs;
            if (rx_take(path, (const uint8_t *)c->buf + head, clen) < 0) {
                rx.bad_posts++;
                answer = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
            }
        }
        pthread_mutex_unlock(&rx.lock);
        if (send(c->fd, answer, strlen(answer), MSG_NOSIGNAL) < 0)
            return -1;
        memmove(c->buf, c->buf + head + clen, c->len - head - clen);
        c->len -= head + clen;
    }
}

static void *rx_main(void *unused)
{
    (void)unused;
    rx_conn conns[8] = {0};
    for (int i = 0; i < 8; i++)
        conns[i].fd = -1;
    for (;;) {
        pthread_mutex_lock(&rx.lock);
        int stop = rx.stop;
        pthread_mutex_unlock(&rx.lock);
        if (stop)
            break;
        struct pollfd p[9] = {{rx.fd, POLLIN, 0}};
        for (int i = 0; i < 8; i++)
            p[i + 1] = (struct pollfd){conns[i].fd, POLLIN, 0};
        if (poll(p, 9, 50) <= 0)
            continue;
        if (p[0].revents & POLLIN) {
            int fd = accept(rx.fd, NULL, NULL);
            int i = 0;
            while (i < 8 && conns[i].fd >= 0)
                i++;
            if (i == 8 && fd >= 0)
                close(fd);
            else if (fd >= 0)
                conns[i].fd = fd;
        }
        for (int i = 0; i < 8; i++) {
            rx_conn *c = &conns[i];
            if (c->fd < 0 || !(p[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (c->cap - c->len < 65536) {
                char *nb = realloc(c->buf, c->cap + 1048576);
                if (nb) {
                    c->buf = nb;
                    c->cap += 1048576;
                }
            }
            ssize_t n = c->cap > c->len ? recv(c->fd, c->buf + c->len, c->cap - c->len - 1, 0)
                                        : -1;
            if (n > 0) {
                c->len += (size_t)n;
                c->buf[c->len] = '\0';
            }
            if (n <= 0 || rx_serve(c) < 0) {
                close(c->fd);
                c->fd = -1;
                c->len = 0;
            }
        }
    }
    for (int i = 0; i < 8; i++) {
        if (conns[i].fd >= 0)
            close(conns[i].fd);
        free(conns[i].buf);
    }
    return NULL;
}

static int rx_start(int fail_traces)
{
    memset(&rx, 0, sizeof(rx));
    pthread_mutex_init(&rx.lock, NULL);
    rx.fail_traces = fail_traces;
    rx.spans = cJSON_CreateArray();
    rx.logs = cJSON_CreateArray();
    rx.metrics = cJSON_CreateArray();
    rx.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (rx.fd < 0 || bind(rx.fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(rx.fd, 16) < 0 ||
        getsockname(rx.fd, (struct sockaddr *)&a, &al) < 0)
        return -1;
    rx.port = ntohs(a.sin_port);
    return pthread_create(&rx.thread, NULL, rx_main, NULL) == 0 ? 0 : -1;
}

static void rx_stop(void)
{
    if (!rx.spans)
        return;
    pthread_mutex_lock(&rx.lock);
    rx.stop = 1;
    pthread_mutex_unlock(&rx.lock);
    pthread_join(rx.thread, NULL);
    close(rx.fd);
    cJSON_Delete(rx.spans);
    cJSON_Delete(rx.logs);
    cJSON_Delete(rx.metrics);
    rx.spans = rx.logs = rx.metrics = NULL;
}

/* A copy (kept until env_down) of the first span or log whose `key` is
 * `value`, or NULL. */
static const cJSON *rx_find(env *e, int logs, const char *key, const char *value)
{
    const cJSON *found = NULL, *it;
    pthread_mutex_lock(&rx.lock);
    const cJSON *all = logs ? rx.logs : rx.spans;
    cJSON_ArrayForEach(it, all)
    {
        if (!found && jstr(it, key) && strcmp(jstr(it, key), value) == 0)
            found = env_keep(e, cJSON_Duplicate(it, 1));
    }
    pthread_mutex_unlock(&rx.lock);
    return found;
}

/* ---- the cases -------------------------------------------------------------- */

/* Options of each case: the access log goes to <dir>/access.log; the OTLP
 * cases export to the receiver (which the retry case makes fail first). */
static void options_for(const char *name, const char *dir, funcd_option **a, funcd_option **b)
{
    *a = *b = NULL;
    if (strcmp(name, "access_log") == 0) {
        char path[320];
        snprintf(path, sizeof(path), "%s/access.log", dir);
        *a = funcd_with_access_log(path);
    }
    if (strncmp(name, "otlp_", 5) == 0 && rx_start(strcmp(name, "otlp_retry") == 0 ? 3 : 0) == 0) {
        char url[64];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d", rx.port);
        *b = funcd_with_otlp_endpoint(url);
    }
}

#define TR_TEST(name)                                                                              \
    static void name##_body(env *e, const char *dir);                                              \
    TEST(name)                                                                                     \
    {                                                                                              \
        char dir_[256];                                                                            \
        if (sv_tempdir(dir_, sizeof(dir_)) < 0)                                                    \
            FAILF("no temporary directory");                                                       \
        funcd_option *a_, *b_;                                                                     \
        options_for(#name, dir_, &a_, &b_);                                                        \
        env e_;                                                                                    \
        if (env_up_with(&e_, NULL, a_, b_, NULL) < 0) {                                            \
            env_down(&e_);                                                                         \
            sv_cleanup();                                                                          \
            FAILF("cannot start a platform: %s", funcd_error_last()->message);                     \
        }                                                                                          \
        name##_body(&e_, dir_);                                                                    \
        env_down(&e_);                                                                             \
        rx_stop();                                                                                 \
        sv_cleanup();                                                                              \
        char left_[512];                                                                           \
        if (sv_children(left_, sizeof(left_)))                                                     \
            FAILF("processes left behind after the platform was freed: %s", left_);                \
    }                                                                                              \
    static void name##_body(env *e, const char *dir)

/* Creates Function "tracer" on the native fixture and waits until Ready. */
static int make_tracer(env *e)
{
    return sv_native(e, "tracer", NULL);
}

/* One request to the tracer with extra headers (NULL-terminated). */
static long invoke_with(env *e, const char *path, const char *const *headers)
{
    return e2e_http_send(e->dp, "GET", path, NULL, headers, NULL, 0, &e->r);
}

/* The traceparent the worker echoed, parsed; NULL (and a message) when it
 * got none, several, or an invalid one. */
static const char *worker_parent(env *e, funcd_traceparent *tp)
{
    static char why[300];
    const char *v = jstr(e->r.json, "traceparent");
    if (!v || !*v)
        return "the worker got no traceparent";
    if (jnum(e->r.json, "traceparents") != 1) {
        snprintf(why, sizeof(why), "the worker got %g traceparent headers",
                 jnum(e->r.json, "traceparents"));
        return why;
    }
    if (strlen(v) != FUNCD_TRACEPARENT_LEN || strncmp(v, "00-", 3) != 0 ||
        funcd_traceparent_parse(v, strlen(v), tp) < 0) {
        snprintf(why, sizeof(why), "the worker got an invalid traceparent \"%s\"", v);
        return why;
    }
    return NULL;
}

#define CHECK_WORKER_PARENT(tp)                                                                    \
    do {                                                                                           \
        const char *why_ = worker_parent(e, (tp));                                                 \
        if (why_)                                                                                  \
            FAILF("%s: %.500s", why_, e->r.body);                                                  \
    } while (0)

/*
 * A valid traceparent is continued: the worker sees the same trace id, a
 * new parent (the edge span), the caller's sampled flag, and the
 * tracestate as sent.
 */
TR_TEST(traceparent_continued)
{
    (void)dir;
    CHECK(make_tracer(e) == 0);
    static const char *const hdrs[] = {"traceparent: " CALLER_TP, "tracestate: congo=t61rcWkgMzE",
                                       NULL};
    CHECK_INT(invoke_with(e, DP_PATH("tracer") "/x", hdrs), 200);
    funcd_traceparent tp;
    CHECK_WORKER_PARENT(&tp);
    char trace[33], parent[17];
    hex_of(tp.trace_id, 16, trace);
    hex_of(tp.parent_id, 8, parent);
    CHECK_STR(trace, CALLER_TRACE);
    if (strcmp(parent, CALLER_SPAN) == 0)
        FAILF("the worker's parent is the caller's span, not the edge's");
    CHECK_INT(tp.flags, 1);
    CHECK_STR(jstr(e->r.json, "tracestate"), "congo=t61rcWkgMzE");

    /* Not sampled stays not sampled; each request gets its own edge span. */
    static const char *const unsampled[] = {"traceparent: 00-" CALLER_TRACE "-" CALLER_SPAN "-00",
                                            NULL};
    CHECK_INT(invoke_with(e, DP_PATH("tracer") "/x", unsampled), 200);
    funcd_traceparent tp2;
    CHECK_WORKER_PARENT(&tp2);
    CHECK_INT(tp2.flags, 0);
    CHECK(memcmp(tp2.trace_id, tp.trace_id, 16) == 0);
    CHECK(memcmp(tp2.parent_id, tp.parent_id, 8) != 0);
    CHECK_STR(jstr(e->r.json, "tracestate"), "");
}

/* Without a traceparent the edge starts a trace: each request its own. */
TR_TEST(traceparent_started)
{
    (void)dir;
    CHECK(make_tracer(e) == 0);
    funcd_traceparent a, b;
    CHECK_INT(invoke_with(e, DP_PATH("tracer") "/x", NULL), 200);
    CHECK_WORKER_PARENT(&a);
    CHECK_INT(a.flags, 1);
    /* A tracestate without a traceparent has nothing to belong to. */
    static const char *const orphan[] = {"tracestate: congo=t61rcWkgMzE", NULL};
    CHECK_INT(invoke_with(e, DP_PATH("tracer") "/x", orphan), 200);
    CHECK_WORKER_PARENT(&b);
    CHECK(memcmp(a.trace_id, b.trace_id, 16) != 0);
    CHECK(memcmp(a.parent_id, b.parent_id, 8) != 0);
    CHECK_STR(jstr(e->r.json, "tracestate"), "");
}

/*
 * An invalid traceparent never fails the request: it is replaced by a new
 * trace (and its tracestate dropped). Two traceparent headers are no single
 * parent either.
 */
TR_TEST(traceparent_invalid)
{
    (void)dir;
    CHECK(make_tracer(e) == 0);
    static const char *const bad[] = {
        "traceparent: 00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",
        "traceparent: 00-00000000000000000000000000000000-" CALLER_SPAN "-01",
        "traceparent: 00-" CALLER_TRACE "-0000000000000000-01",
        "traceparent: ff-" CALLER_TRACE "-" CALLER_SPAN "-01",
        "traceparent: 00-" CALLER_TRACE "-" CALLER_SPAN "-01-extra",
        "traceparent: 00-" CALLER_TRACE "-" CALLER_SPAN,
        "traceparent: garbage",
        NULL};
    for (const char *const *b = bad; *b; b++) {
        const char *hdrs[] = {*b, "tracestate: congo=t61rcWkgMzE", NULL};
        CHECK_INT(invoke_with(e, DP_PATH("tracer") "/x", hdrs), 200);
        funcd_traceparent tp;
        CHECK_WORKER_PARENT(&tp);
        char trace[33];
        hex_of(tp.trace_id, 16, trace);
        if (strcmp(trace, CALLER_TRACE) == 0)
            FAILF("\"%s\" was continued", *b);
        CHECK_STR(jstr(e->r.json, "tracestate"), "");
    }
    static const char *const twice[] = {"traceparent: " CALLER_TP,
                                        "traceparent: 00-" CALLER_TRACE "-" CALLER_SPAN "-00",
                                        NULL};
    CHECK_INT(invoke_with(e, DP_PATH("tracer") "/x", twice), 200);
    funcd_traceparent tp;
    CHECK_WORKER_PARENT(&tp);
    char trace[33];
    hex_of(tp.trace_id, 16, trace);
    if (strcmp(trace, CALLER_TRACE) == 0)
        FAILF("two traceparent headers were continued");
}

/* ---- the access log ------------------------------------------------------ */

typedef struct log_want {
    char path[320];
    const char *invocation;
    cJSON *line; /* found */
} log_want;

static int log_has(env *e, void *arg)
{
    log_want *w = arg;
    FILE *f = fopen(w->path, "re");
    if (!f)
        return 0;
    char line[4096];
    while (!w->line && fgets(line, sizeof(line), f)) {
        cJSON *j = cJSON_Parse(line);
        if (j && jstr(j, "invocationId") && strcmp(jstr(j, "invocationId"), w->invocation) == 0)
            w->line = env_keep(e, j);
        else
            cJSON_Delete(j);
    }
    fclose(f);
    return w->line != NULL;
}

/* The line of invocation `id` in the access log, or NULL after 10 s. */
static const cJSON *access_line(env *e, const char *dir, const char *id)
{
    static log_want w;
    memset(&w, 0, sizeof(w));
    snprintf(w.path, sizeof(w.path), "%s/access.log", dir);
    w.invocation = id;
    return env_poll(e, 10000, log_has, &w) ? w.line : NULL;
}

/* "2026-12-01T21:30:00.123Z" */
static int is_time(const char *s)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ";
    if (!s || strlen(s) != sizeof(shape) - 1)
        return 0;
    for (size_t i = 0; shape[i]; i++)
        if (shape[i] == 'd' ? (s[i] < '0' || s[i] > '9') : s[i] != shape[i])
            return 0;
    return 1;
}

/*
 * Each request gets one JSON line: time, method, path (with the query),
 * status, bytes of the body sent, duration, namespace, function,
 * invocation id and trace id; an answer of the edge's own (404) too.
 */
TR_TEST(access_log)
{
    CHECK(make_tracer(e) == 0);
    static const char *const hdrs[] = {"traceparent: " CALLER_TP, NULL};
    CHECK_INT(invoke_with(e, DP_PATH("tracer") "/some/where?q=1", hdrs), 200);
    char id[64];
    snprintf(id, sizeof(id), "%s", sv_header(&e->r, "X-Funcd-Invocation-Id"));
    size_t body_len = e->r.len;
    const cJSON *l = access_line(e, dir, id);
    if (!l)
        FAILF("no access log line for invocation %s", id);
    CHECK(is_time(jstr(l, "time")));
    CHECK_STR(jstr(l, "method"), "GET");
    CHECK_STR(jstr(l, "path"), DP_PATH("tracer") "/some/where?q=1");
    CHECK_INT(jnum(l, "status"), 200);
    CHECK_INT(jnum(l, "bytes"), body_len);
    CHECK(cJSON_IsNumber(jget(l, "durationMs")) && jnum(l, "durationMs") >= 0 &&
          jnum(l, "durationMs") < 60000);
    CHECK_STR(jstr(l, "namespace"), "default");
    CHECK_STR(jstr(l, "function"), "tracer");
    CHECK_STR(jstr(l, "invocationId"), id);
    CHECK_STR(jstr(l, "traceId"), CALLER_TRACE);
    CHECK_INT(cJSON_GetArraySize(l), 10); /* nothing else */

    /* A started trace: the line has the id the worker saw. */
    CHECK_INT(invoke_with(e, DP_PATH("tracer") "/x", NULL), 200);
    funcd_traceparent tp;
    CHECK_WORKER_PARENT(&tp);
    char trace[33];
    hex_of(tp.trace_id, 16, trace);
    snprintf(id, sizeof(id), "%s", sv_header(&e->r, "X-Funcd-Invocation-Id"));
    l = access_line(e, dir, id);
    if (!l)
        FAILF("no access log line for invocation %s", id);
    CHECK_STR(jstr(l, "traceId"), trace);

    /* The edge's own answer: no function, its status, a JSON-escaped path. */
    CHECK_INT(invoke_with(e, "/fn/default/nosuch/%22q%22", NULL), 404);
    snprintf(id, sizeof(id), "%s", sv_header(&e->r, "X-Funcd-Invocation-Id"));
    body_len = e->r.len;
    l = access_line(e, dir, id);
    if (!l)
        FAILF("no access log line for the 404, invocation %s", id);
    CHECK_INT(jnum(l, "status"), 404);
    CHECK_INT(jnum(l, "bytes"), body_len);
    CHECK_STR(jstr(l, "path"), "/fn/default/nosuch/%22q%22");
    CHECK_STR(jstr(l, "function"), "");
    CHECK_INT(strlen(jstr(l, "traceId")), 32);

    /* A request the edge refuses (here its rate limit) names the function. */
    char fixture[256];
    CHECK(sv_fixture("native", fixture, sizeof(fixture)) == 0);
    CHECK_INT(sv_create(e, "capped",
                        "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":"
                        "\"%s\"},\"edge\":{\"limits\":{\"rps\":1,\"burst\":1}}}",
                        fixture),
              201);
    CHECK(sv_wait_ready(e, "capped", 10000));
    long code = 0;
    for (int i = 0; i < 20 && code != 429; i++)
        code = sv_invoke(e, "GET", DP_PATH("capped") "/x", NULL);
    CHECK_INT(code, 429);
    snprintf(id, sizeof(id), "%s", sv_header(&e->r, "X-Funcd-Invocation-Id"));
    l = access_line(e, dir, id);
    if (!l)
        FAILF("no access log line for the 429, invocation %s", id);
    CHECK_INT(jnum(l, "status"), 429);
    CHECK_STR(jstr(l, "namespace"), "default");
    CHECK_STR(jstr(l, "function"), "capped");
}

/* ---- OTLP export -------------------------------------------------------------- */

/* An attribute (its key has dots, which jstr would take for nesting). */
static const char *attr_str(const cJSON *attrs, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(attrs, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double attr_num(const cJSON *attrs, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(attrs, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

typedef struct rx_want {
    int logs;
    const char *key, *value;
    const cJSON *found;
} rx_want;

static int rx_has(env *e, void *arg)
{
    rx_want *w = arg;
    w->found = rx_find(e, w->logs, w->key, w->value);
    return w->found != NULL;
}

/* Waits (15 s at most) for a span or log whose `key` is `value`. */
static const cJSON *rx_wait(env *e, int logs, const char *key, const char *value)
{
    rx_want w = {logs, key, value, NULL};
    return env_poll(e, 15000, rx_has, &w) ? w.found : NULL;
}

typedef struct wait_want {
    const char *ids[2];
    const cJSON *found;
} wait_want;

/* An "activation wait" span of one of two invocations. */
static int rx_has_wait(env *e, void *arg)
{
    wait_want *w = arg;
    const cJSON *it;
    pthread_mutex_lock(&rx.lock);
    cJSON_ArrayForEach(it, rx.spans)
    {
        const char *inv = attr_str(jget(it, "attrs"), "funcd.invocation_id");
        if (!w->found && inv && strcmp(jstr(it, "name"), "activation wait") == 0 &&
            (strcmp(inv, w->ids[0]) == 0 || strcmp(inv, w->ids[1]) == 0))
            w->found = env_keep(e, cJSON_Duplicate(it, 1));
    }
    pthread_mutex_unlock(&rx.lock);
    return w->found != NULL;
}

/*
 * The receiver gets the edge span of a request (its trace, its parent the
 * caller's span, its id the parent the worker saw, its attributes) and
 * the lines the function printed during it, with that trace and span; a
 * request that waited for a slot has an "activation wait" span under its
 * edge span.
 */
TR_TEST(otlp_export)
{
    (void)dir;
    char fixture[256];
    CHECK(sv_fixture("native", fixture, sizeof(fixture)) == 0);
    /* One worker taking one request at a time: a second request waits. */
    CHECK_INT(sv_create(e, "tracer",
                        "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":"
                        "\"%s\"},\"scaling\":{\"maxReplicas\":1,\"concurrency\":1}}",
                        fixture),
              201);
    CHECK(sv_wait_ready(e, "tracer", 10000));
    static const char *const hdrs[] = {"traceparent: " CALLER_TP, NULL};
    CHECK_INT(invoke_with(e, DP_PATH("tracer") "/log?msg=otlp-7c1e", hdrs), 200);
    char id[64];
    snprintf(id, sizeof(id), "%s", sv_header(&e->r, "X-Funcd-Invocation-Id"));
    funcd_traceparent tp;
    CHECK_WORKER_PARENT(&tp);
    char edge_span[17];
    hex_of(tp.parent_id, 8, edge_span);

    const cJSON *sp = rx_wait(e, 0, "spanId", edge_span);
    if (!sp)
        FAILF("the receiver got no span %s (%d trace POSTs)", edge_span, rx.trace_posts);
    CHECK_STR(jstr(sp, "traceId"), CALLER_TRACE);
    CHECK_STR(jstr(sp, "parentSpanId"), CALLER_SPAN);
    CHECK_STR(jstr(sp, "name"), "GET /fn/default/tracer");
    CHECK_INT(jnum(sp, "kind"), 2); /* SERVER */
    CHECK(jnum(sp, "durationNs") > 0);
    const cJSON *at = jget(sp, "attrs");
    CHECK_STR(attr_str(at, "funcd.namespace"), "default");
    CHECK_STR(attr_str(at, "funcd.function"), "tracer");
    CHECK_STR(attr_str(at, "funcd.invocation_id"), id);
    CHECK_STR(attr_str(at, "http.request.method"), "GET");
    CHECK_STR(attr_str(at, "url.path"), DP_PATH("tracer") "/log");
    CHECK_INT(attr_num(at, "http.response.status_code"), 200);

    /* The structured line names its invocation itself: it has the trace. */
    char structured[256];
    snprintf(structured, sizeof(structured),
             "{\"severity\":\"INFO\",\"msg\":\"otlp-7c1e\",\"structured\":true,"
             "\"invocationId\":\"%s\"}",
             id);
    const cJSON *lg = rx_wait(e, 1, "body", structured);
    if (!lg)
        FAILF("the receiver got no log line %s (%d log POSTs)", structured, rx.log_posts);
    CHECK_STR(jstr(lg, "traceId"), CALLER_TRACE);
    CHECK_STR(jstr(lg, "spanId"), edge_span);
    CHECK_STR(attr_str(jget(lg, "attrs"), "funcd.invocation_id"), id);
    CHECK_STR(attr_str(jget(lg, "attrs"), "funcd.function"), "tracer");
    CHECK_STR(attr_str(jget(lg, "attrs"), "funcd.replica"), "tracer-1");
    CHECK_STR(attr_str(jget(lg, "attrs"), "log.iostream"), "stdout");
    /* The plain line printed just before: the platform's guess of its
     * invocation (docs/logs.md); when it has one, it has the trace. */
    lg = rx_wait(e, 1, "body", "otlp-7c1e");
    CHECK(lg != NULL);
    if (attr_str(jget(lg, "attrs"), "funcd.invocation_id")) {
        CHECK_STR(attr_str(jget(lg, "attrs"), "funcd.invocation_id"), id);
        CHECK_STR(jstr(lg, "traceId"), CALLER_TRACE);
    }

    /* Two at once on a worker that takes one: one of them waits. */
    sv_call calls[2] = {{.method = "GET"}, {.method = "GET"}};
    for (int i = 0; i < 2; i++)
        snprintf(calls[i].path, sizeof(calls[i].path), DP_PATH("tracer") "/sleep?ms=300");
    sv_batch *b = sv_batch_start(e->dp_base, calls, 2);
    CHECK(b != NULL);
    sv_batch_join(b);
    char ids[2][64];
    for (int i = 0; i < 2; i++) {
        CHECK_INT(calls[i].r.status, 200);
        snprintf(ids[i], sizeof(ids[i]), "%s", sv_header(&calls[i].r, "X-Funcd-Invocation-Id"));
        e2e_resp_free(&calls[i].r);
    }
    wait_want ww = {{ids[0], ids[1]}, NULL};
    if (!env_poll(e, 15000, rx_has_wait, &ww))
        FAILF("no activation wait span for either of %s, %s", ids[0], ids[1]);
    const cJSON *wait = ww.found;
    const char *waited = attr_str(jget(wait, "attrs"), "funcd.invocation_id");
    CHECK_INT(jnum(wait, "kind"), 1); /* INTERNAL */
    const cJSON *parent = rx_wait(e, 0, "spanId", jstr(wait, "parentSpanId"));
    if (!parent)
        FAILF("the wait span's parent %s never arrived", jstr(wait, "parentSpanId"));
    CHECK_STR(attr_str(jget(parent, "attrs"), "funcd.invocation_id"), waited);
    CHECK_STR(jstr(parent, "traceId"), jstr(wait, "traceId"));
    CHECK_STR(jstr(parent, "name"), "GET /fn/default/tracer");
    CHECK(jnum(wait, "startNs") >= jnum(parent, "startNs"));
    CHECK(jnum(wait, "durationNs") <= jnum(parent, "durationNs"));
    pthread_mutex_lock(&rx.lock);
    int bad = rx.bad_posts;
    pthread_mutex_unlock(&rx.lock);
    CHECK_INT(bad, 0);
}

/* A collector that answers 503 three times still gets the span: the batch
 * is retried with backoff. */
TR_TEST(otlp_retry)
{
    (void)dir;
    CHECK(make_tracer(e) == 0);
    static const char *const hdrs[] = {"traceparent: " CALLER_TP, NULL};
    CHECK_INT(invoke_with(e, DP_PATH("tracer") "/x", hdrs), 200);
    funcd_traceparent tp;
    CHECK_WORKER_PARENT(&tp);
    char edge_span[17];
    hex_of(tp.parent_id, 8, edge_span);
    const cJSON *sp = rx_wait(e, 0, "spanId", edge_span);
    pthread_mutex_lock(&rx.lock);
    int posts = rx.trace_posts;
    pthread_mutex_unlock(&rx.lock);
    if (!sp)
        FAILF("the span never arrived (%d trace POSTs)", posts);
    CHECK_STR(jstr(sp, "traceId"), CALLER_TRACE);
    if (posts < 4)
        FAILF("%d trace POSTs: the three 503s were not all retried", posts);
}

/* The point of metric `name` whose attribute function is `fn` (and code
 * `code`, when not NULL), as a copy kept until env_down; NULL if none. */
static const cJSON *rx_point(env *e, const char *name, const char *fn, const char *code)
{
    const cJSON *found = NULL, *m, *pt;
    pthread_mutex_lock(&rx.lock);
    cJSON_ArrayForEach(m, rx.metrics)
    {
        if (strcmp(jstr(m, "name"), name) != 0)
            continue;
        const cJSON *pts = jget(m, "points");
        cJSON_ArrayForEach(pt, pts)
        {
            const cJSON *at = jget(pt, "attrs");
            const char *f = attr_str(at, "function"), *c = attr_str(at, "code");
            if (f && strcmp(f, fn) == 0 && (!code || (c && strcmp(c, code) == 0))) {
                cJSON *copy = cJSON_Duplicate(pt, 1);
                cJSON_AddStringToObject(copy, "kind", jstr(m, "kind"));
                found = env_keep(e, copy); /* the latest export wins */
            }
        }
    }
    pthread_mutex_unlock(&rx.lock);
    return found;
}

typedef struct point_want {
    const char *name, *fn, *code;
    double at_least;
    const cJSON *found;
} point_want;

static int rx_has_point(env *e, void *arg)
{
    point_want *w = arg;
    w->found = rx_point(e, w->name, w->fn, w->code);
    return w->found && (jget(w->found, "value") ? jnum(w->found, "value")
                                                 : jnum(w->found, "count")) >= w->at_least;
}

/* Metrics go every 10 s: the series of the platform's registry (the same
 * as GET /metrics) arrive as OTLP sums, gauges and histograms. */
TR_TEST(otlp_metrics)
{
    (void)dir;
    CHECK(make_tracer(e) == 0);
    for (int i = 0; i < 3; i++)
        CHECK_INT(invoke_with(e, DP_PATH("tracer") "/x", NULL), 200);
    point_want w = {"funcd_requests_total", "tracer", "200", 3, NULL};
    if (!env_poll(e, 30000, rx_has_point, &w))
        FAILF("no funcd_requests_total{function=tracer,code=200} >= 3 (%d metric POSTs)",
              rx.metric_posts);
    CHECK_STR(jstr(w.found, "kind"), "sum");
    CHECK_STR(attr_str(jget(w.found, "attrs"), "namespace"), "default");
    point_want h = {"funcd_request_duration_seconds", "tracer", NULL, 3, NULL};
    CHECK(env_poll(e, 1000, rx_has_point, &h));
    CHECK_STR(jstr(h.found, "kind"), "histogram");
    CHECK_INT(jnum(h.found, "inBuckets"), jnum(h.found, "count"));
    CHECK(jnum(h.found, "bounds") > 0);
    point_want g = {"funcd_replicas", "tracer", NULL, 0, NULL};
    CHECK(env_poll(e, 1000, rx_has_point, &g));
    CHECK_STR(jstr(g.found, "kind"), "gauge");
    pthread_mutex_lock(&rx.lock);
    int found_dropped = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, rx.metrics)
    found_dropped |= strcmp(jstr(m, "name"), "funcd_otlp_dropped_items_total") == 0;
    pthread_mutex_unlock(&rx.lock);
    CHECK(found_dropped);
}

int main(int argc, char **argv)
{
    sv_init();
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    SV_RUN(only, ran, traceparent_continued);
    SV_RUN(only, ran, traceparent_started);
    SV_RUN(only, ran, traceparent_invalid);
    SV_RUN(only, ran, access_log);
    SV_RUN(only, ran, otlp_export);
    SV_RUN(only, ran, otlp_retry);
    SV_RUN(only, ran, otlp_metrics);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no test case named %s\n", only);
        return 1;
    }
    return HARNESS_END();
}
