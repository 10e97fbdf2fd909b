/*
 * OTLP protobuf for a batch, with the protobuf-c code generated from
 * proto/opentelemetry/: one resource (service.name "funcd"), one scope,
 * and the items. Everything a message points to lives in one arena freed
 * after packing.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "metrics/metrics.h"
#include "opentelemetry/proto/collector/logs/v1/logs_service.pb-c.h"
#include "opentelemetry/proto/collector/metrics/v1/metrics_service.pb-c.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb-c.h"
#include "otlp/otlp.h"

typedef Opentelemetry__Proto__Common__V1__KeyValue KeyValue;
typedef Opentelemetry__Proto__Common__V1__AnyValue AnyValue;
typedef Opentelemetry__Proto__Trace__V1__Span Span;
typedef Opentelemetry__Proto__Logs__V1__LogRecord LogRecord;

/* A bump allocator: every allocation of one encoding, freed at once. */
typedef struct arena {
    struct chunk {
        struct chunk *next;
        size_t used, cap;
        max_align_t data[];
    } *head;
    int failed;
} arena;

static void *arena_alloc(arena *a, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (!a->head || a->head->cap - a->head->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        struct chunk *c = malloc(sizeof(*c) + cap);
        if (!c) {
            a->failed = 1;
            return NULL;
        }
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    void *p = (char *)a->head->data + a->head->used;
    a->head->used += n;
    memset(p, 0, n);
    return p;
}

static void arena_free(arena *a)
{
    while (a->head) {
        struct chunk *c = a->head;
        a->head = c->next;
        free(c);
    }
}

/* Attributes being built for one item. */
typedef struct attrs {
    KeyValue **kv;
    size_t n, cap;
} attrs;

static AnyValue *any(arena *a)
{
    AnyValue *v = arena_alloc(a, sizeof(*v));
    if (v)
        *v = (AnyValue)OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__INIT;
    return v;
}

static KeyValue *kv_new(arena *a, attrs *at, const char *key)
{
    if (at->n == at->cap)
        return NULL; /* sized by the caller */
    KeyValue *kv = arena_alloc(a, sizeof(*kv));
    AnyValue *v = any(a);
    if (!kv || !v)
        return NULL;
    *kv = (KeyValue)OPENTELEMETRY__PROTO__COMMON__V1__KEY_VALUE__INIT;
    kv->key = (char *)key;
    kv->value = v;
    at->kv[at->n++] = kv;
    return kv;
}

static void kv_str(arena *a, attrs *at, const char *key, const char *value)
{
    KeyValue *kv = kv_new(a, at, key);
    if (!kv)
        return;
    kv->value->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE;
    kv->value->string_value = (char *)value;
}

static void kv_int(arena *a, attrs *at, const char *key, int64_t value)
{
    KeyValue *kv = kv_new(a, at, key);
    if (!kv)
        return;
    kv->value->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE;
    kv->value->int_value = value;
}

static attrs attrs_new(arena *a, size_t cap)
{
    attrs at = {arena_alloc(a, cap * sizeof(KeyValue *)), 0, cap};
    if (!at.kv)
        at.cap = 0;
    return at;
}

/* The resource every item shares: this funcd. */
static Opentelemetry__Proto__Resource__V1__Resource *resource(arena *a)
{
    Opentelemetry__Proto__Resource__V1__Resource *r = arena_alloc(a, sizeof(*r));
    char *host = arena_alloc(a, 256);
    if (!r || !host)
        return NULL;
    *r = (Opentelemetry__Proto__Resource__V1__Resource)
        OPENTELEMETRY__PROTO__RESOURCE__V1__RESOURCE__INIT;
    if (gethostname(host, 255) < 0)
        host[0] = '\0';
    attrs at = attrs_new(a, 3);
    kv_str(a, &at, "service.name", "funcd");
    kv_str(a, &at, "service.version", FUNCD_VERSION_STRING);
    if (host[0])
        kv_str(a, &at, "host.name", host);
    r->n_attributes = at.n;
    r->attributes = at.kv;
    return r;
}

static Opentelemetry__Proto__Common__V1__InstrumentationScope *scope(arena *a, const char *name)
{
    Opentelemetry__Proto__Common__V1__InstrumentationScope *s = arena_alloc(a, sizeof(*s));
    if (!s)
        return NULL;
    *s = (Opentelemetry__Proto__Common__V1__InstrumentationScope)
        OPENTELEMETRY__PROTO__COMMON__V1__INSTRUMENTATION_SCOPE__INIT;
    s->name = (char *)name;
    s->version = (char *)FUNCD_VERSION_STRING;
    return s;
}

static ProtobufCBinaryData bin(const uint8_t *p, size_t n)
{
    return (ProtobufCBinaryData){n, (uint8_t *)p};
}

static Span *span_new(arena *a)
{
    Span *s = arena_alloc(a, sizeof(*s));
    Opentelemetry__Proto__Trace__V1__Status *st = arena_alloc(a, sizeof(*st));
    if (!s || !st)
        return NULL;
    *s = (Span)OPENTELEMETRY__PROTO__TRACE__V1__SPAN__INIT;
    *st = (Opentelemetry__Proto__Trace__V1__Status)OPENTELEMETRY__PROTO__TRACE__V1__STATUS__INIT;
    s->status = st;
    return s;
}

/* The edge span: SERVER, named after the method and the function. */
static Span *edge_span(arena *a, const funcd_otlp_span *in)
{
    Span *s = span_new(a);
    size_t pathlen = strcspn(in->path, "?");
    char *name = arena_alloc(a, sizeof(in->method) + sizeof(in->ns) + sizeof(in->fn) + 8);
    char *path = arena_alloc(a, pathlen + 1);
    if (!s || !name || !path)
        return NULL;
    s->trace_id = bin(in->trace_id, 16);
    s->span_id = bin(in->span_id, 8);
    if (in->has_parent)
        s->parent_span_id = bin(in->parent_id, 8);
    s->flags = in->flags | 0x100; /* the W3C flags; bit 8: "has remote parent" is known */
    if (in->has_parent)
        s->flags |= 0x200;
    if (in->fn[0])
        snprintf(name, sizeof(in->method) + sizeof(in->ns) + sizeof(in->fn) + 8, "%s /fn/%s/%s",
                 in->method, in->ns, in->fn);
    else
        snprintf(name, sizeof(in->method) + 8, "%s", in->method);
    s->name = name;
    s->kind = OPENTELEMETRY__PROTO__TRACE__V1__SPAN__SPAN_KIND__SPAN_KIND_SERVER;
    s->start_time_unix_nano = (uint64_t)in->start_ns;
    s->end_time_unix_nano = (uint64_t)in->end_ns;
    memcpy(path, in->path, pathlen);
    path[pathlen] = '\0';
    attrs at = attrs_new(a, 6);
    kv_str(a, &at, "http.request.method", in->method);
    kv_str(a, &at, "url.path", path);
    kv_int(a, &at, "http.response.status_code", in->status);
    if (in->fn[0]) {
        kv_str(a, &at, "funcd.namespace", in->ns);
        kv_str(a, &at, "funcd.function", in->fn);
    }
    kv_str(a, &at, "funcd.invocation_id", in->invocation_id);
    s->n_attributes = at.n;
    s->attributes = at.kv;
    if (in->status >= 500)
        s->status->code = OPENTELEMETRY__PROTO__TRACE__V1__STATUS__STATUS_CODE__STATUS_CODE_ERROR;
    return s;
}

/* The wait for a slot: INTERNAL, a child of the edge span. */
static Span *wait_span(arena *a, const funcd_otlp_span *in)
{
    Span *s = span_new(a);
    if (!s)
        return NULL;
    s->trace_id = bin(in->trace_id, 16);
    s->span_id = bin(in->wait_span_id, 8);
    s->parent_span_id = bin(in->span_id, 8);
    s->flags = in->flags | 0x100;
    s->name = (char *)"activation wait";
    s->kind = OPENTELEMETRY__PROTO__TRACE__V1__SPAN__SPAN_KIND__SPAN_KIND_INTERNAL;
    s->start_time_unix_nano = (uint64_t)in->wait_start_ns;
    s->end_time_unix_nano = (uint64_t)in->wait_end_ns;
    attrs at = attrs_new(a, 3);
    if (in->fn[0]) {
        kv_str(a, &at, "funcd.namespace", in->ns);
        kv_str(a, &at, "funcd.function", in->fn);
    }
    kv_str(a, &at, "funcd.invocation_id", in->invocation_id);
    s->n_attributes = at.n;
    s->attributes = at.kv;
    return s;
}

static uint8_t *pack(arena *a, const ProtobufCMessage *m, size_t *len)
{
    uint8_t *out = NULL;
    if (!a->failed) {
        *len = protobuf_c_message_get_packed_size(m);
        out = malloc(*len ? *len : 1);
        if (out)
            protobuf_c_message_pack(m, out);
    }
    arena_free(a);
    return out;
}

uint8_t *funcd_otlp_encode_spans(const funcd_otlp_span *spans, size_t n, size_t *len)
{
    arena a = {0};
    Span **all = arena_alloc(&a, (2 * n + 1) * sizeof(Span *));
    size_t count = 0;
    for (size_t i = 0; all && i < n; i++) {
        Span *s = edge_span(&a, &spans[i]);
        if (s)
            all[count++] = s;
        if (spans[i].waited && (s = wait_span(&a, &spans[i])))
            all[count++] = s;
    }
    Opentelemetry__Proto__Trace__V1__ScopeSpans ss =
        OPENTELEMETRY__PROTO__TRACE__V1__SCOPE_SPANS__INIT;
    ss.scope = scope(&a, "funcd.gateway");
    ss.n_spans = count;
    ss.spans = all;
    Opentelemetry__Proto__Trace__V1__ResourceSpans rs =
        OPENTELEMETRY__PROTO__TRACE__V1__RESOURCE_SPANS__INIT;
    Opentelemetry__Proto__Trace__V1__ScopeSpans *ssp = &ss;
    rs.resource = resource(&a);
    rs.n_scope_spans = 1;
    rs.scope_spans = &ssp;
    Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceRequest req =
        OPENTELEMETRY__PROTO__COLLECTOR__TRACE__V1__EXPORT_TRACE_SERVICE_REQUEST__INIT;
    Opentelemetry__Proto__Trace__V1__ResourceSpans *rsp = &rs;
    req.n_resource_spans = 1;
    req.resource_spans = &rsp;
    return pack(&a, &req.base, len);
}

uint8_t *funcd_otlp_encode_logs(const funcd_otlp_log *logs, size_t n, size_t *len)
{
    arena a = {0};
    LogRecord **all = arena_alloc(&a, (n + 1) * sizeof(LogRecord *));
    size_t count = 0;
    for (size_t i = 0; all && i < n; i++) {
        const funcd_otlp_log *in = &logs[i];
        LogRecord *r = arena_alloc(&a, sizeof(*r));
        AnyValue *body = any(&a);
        if (!r || !body)
            break;
        *r = (LogRecord)OPENTELEMETRY__PROTO__LOGS__V1__LOG_RECORD__INIT;
        r->time_unix_nano = r->observed_time_unix_nano = (uint64_t)in->time_ns;
        body->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE;
        body->string_value = in->line;
        r->body = body;
        if (in->has_trace) {
            r->trace_id = bin(in->trace_id, 16);
            r->span_id = bin(in->span_id, 8);
            r->flags = in->flags;
        }
        attrs at = attrs_new(&a, 5);
        kv_str(&a, &at, "funcd.namespace", in->ns);
        kv_str(&a, &at, "funcd.function", in->fn);
        kv_str(&a, &at, "funcd.replica", in->replica);
        if (in->invocation_id[0])
            kv_str(&a, &at, "funcd.invocation_id", in->invocation_id);
        kv_str(&a, &at, "log.iostream", in->stream == 2 ? "stderr" : "stdout");
        r->n_attributes = at.n;
        r->attributes = at.kv;
        all[count++] = r;
    }
    Opentelemetry__Proto__Logs__V1__ScopeLogs sl = OPENTELEMETRY__PROTO__LOGS__V1__SCOPE_LOGS__INIT;
    sl.scope = scope(&a, "funcd.functions");
    sl.n_log_records = count;
    sl.log_records = all;
    Opentelemetry__Proto__Logs__V1__ScopeLogs *slp = &sl;
    Opentelemetry__Proto__Logs__V1__ResourceLogs rl =
        OPENTELEMETRY__PROTO__LOGS__V1__RESOURCE_LOGS__INIT;
    rl.resource = resource(&a);
    rl.n_scope_logs = 1;
    rl.scope_logs = &slp;
    Opentelemetry__Proto__Logs__V1__ResourceLogs *rlp = &rl;
    Opentelemetry__Proto__Collector__Logs__V1__ExportLogsServiceRequest req =
        OPENTELEMETRY__PROTO__COLLECTOR__LOGS__V1__EXPORT_LOGS_SERVICE_REQUEST__INIT;
    req.n_resource_logs = 1;
    req.resource_logs = &rlp;
    return pack(&a, &req.base, len);
}

/* ---- metrics ------------------------------------------------------------- */

typedef Opentelemetry__Proto__Metrics__V1__Metric Metric;
typedef Opentelemetry__Proto__Metrics__V1__NumberDataPoint NumberPoint;
typedef Opentelemetry__Proto__Metrics__V1__HistogramDataPoint HistPoint;

#define MAX_METRICS 64
#define CUMULATIVE \
    OPENTELEMETRY__PROTO__METRICS__V1__AGGREGATION_TEMPORALITY__AGGREGATION_TEMPORALITY_CUMULATIVE

/* What the visitor builds: one Metric per family, its points appended. */
typedef struct mbuild {
    arena a;
    Metric *metrics[MAX_METRICS + 1];
    size_t n;
    void **points; /* the current family's points */
    size_t npoints, cap;
    uint64_t start_ns, now_ns;
} mbuild;

static char *arena_str(arena *a, const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = arena_alloc(a, n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* Ends the current family: its points go into its Metric. */
static void close_family(mbuild *b)
{
    if (!b->n)
        return;
    Metric *m = b->metrics[b->n - 1];
    if (m->data_case == OPENTELEMETRY__PROTO__METRICS__V1__METRIC__DATA_HISTOGRAM) {
        m->histogram->n_data_points = b->npoints;
        m->histogram->data_points = (HistPoint **)b->points;
    } else if (m->data_case == OPENTELEMETRY__PROTO__METRICS__V1__METRIC__DATA_SUM) {
        m->sum->n_data_points = b->npoints;
        m->sum->data_points = (NumberPoint **)b->points;
    } else {
        m->gauge->n_data_points = b->npoints;
        m->gauge->data_points = (NumberPoint **)b->points;
    }
    b->points = NULL;
    b->npoints = b->cap = 0;
}

static Metric *add_metric(mbuild *b, const char *name, const char *help, const char *unit,
                          funcd_metric_type type)
{
    close_family(b);
    Metric *m = b->n < MAX_METRICS ? arena_alloc(&b->a, sizeof(*m)) : NULL;
    if (!m)
        return NULL;
    *m = (Metric)OPENTELEMETRY__PROTO__METRICS__V1__METRIC__INIT;
    m->name = arena_str(&b->a, name);
    m->description = arena_str(&b->a, help);
    /* UCUM: "s" for seconds, "By" for bytes, "1" for counts */
    m->unit = (char *)(strcmp(unit, "seconds") == 0 ? "s" : strcmp(unit, "bytes") == 0 ? "By" : "1");
    if (type == FUNCD_METRIC_HISTOGRAM) {
        Opentelemetry__Proto__Metrics__V1__Histogram *h = arena_alloc(&b->a, sizeof(*h));
        if (!h)
            return NULL;
        *h = (Opentelemetry__Proto__Metrics__V1__Histogram)
            OPENTELEMETRY__PROTO__METRICS__V1__HISTOGRAM__INIT;
        h->aggregation_temporality = CUMULATIVE;
        m->data_case = OPENTELEMETRY__PROTO__METRICS__V1__METRIC__DATA_HISTOGRAM;
        m->histogram = h;
    } else if (type == FUNCD_METRIC_COUNTER) {
        Opentelemetry__Proto__Metrics__V1__Sum *sum = arena_alloc(&b->a, sizeof(*sum));
        if (!sum)
            return NULL;
        *sum = (Opentelemetry__Proto__Metrics__V1__Sum)OPENTELEMETRY__PROTO__METRICS__V1__SUM__INIT;
        sum->aggregation_temporality = CUMULATIVE;
        sum->is_monotonic = 1;
        m->data_case = OPENTELEMETRY__PROTO__METRICS__V1__METRIC__DATA_SUM;
        m->sum = sum;
    } else {
        Opentelemetry__Proto__Metrics__V1__Gauge *g = arena_alloc(&b->a, sizeof(*g));
        if (!g)
            return NULL;
        *g = (Opentelemetry__Proto__Metrics__V1__Gauge)
            OPENTELEMETRY__PROTO__METRICS__V1__GAUGE__INIT;
        m->data_case = OPENTELEMETRY__PROTO__METRICS__V1__METRIC__DATA_GAUGE;
        m->gauge = g;
    }
    b->metrics[b->n++] = m;
    return m;
}

static void on_family(void *payload, const funcd_metric_family *f)
{
    mbuild *b = payload;
    add_metric(b, f->name, f->help, f->unit, f->type);
}

static void push_point(mbuild *b, void *p)
{
    if (b->npoints == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 16;
        void **np = arena_alloc(&b->a, cap * sizeof(void *));
        if (!np)
            return;
        if (b->npoints)
            memcpy(np, b->points, b->npoints * sizeof(void *));
        b->points = np;
        b->cap = cap;
    }
    b->points[b->npoints++] = p;
}

static attrs labels(mbuild *b, const funcd_metric_label *l, size_t n)
{
    attrs at = attrs_new(&b->a, n ? n : 1);
    for (size_t i = 0; i < n; i++)
        kv_str(&b->a, &at, arena_str(&b->a, l[i].name), arena_str(&b->a, l[i].value));
    return at;
}

static void on_sample(void *payload, const funcd_metric_family *f, const funcd_metric_sample *s)
{
    mbuild *b = payload;
    if (!b->n || b->a.failed)
        return;
    attrs at = labels(b, s->labels, s->n_labels);
    if (f->type == FUNCD_METRIC_HISTOGRAM) {
        HistPoint *p = arena_alloc(&b->a, sizeof(*p));
        size_t nb = s->n_buckets;
        uint64_t *counts = arena_alloc(&b->a, (nb ? nb : 1) * sizeof(uint64_t));
        double *bounds = arena_alloc(&b->a, (nb ? nb : 1) * sizeof(double));
        if (!p || !counts || !bounds)
            return;
        *p = (HistPoint)OPENTELEMETRY__PROTO__METRICS__V1__HISTOGRAM_DATA_POINT__INIT;
        /* Prometheus buckets are cumulative and end with +Inf; OTLP's count
         * each bucket alone and leave +Inf's bound out. */
        for (size_t i = 0; i < nb; i++)
            counts[i] = s->buckets[i] - (i ? s->buckets[i - 1] : 0);
        for (size_t i = 0; i + 1 < nb; i++)
            bounds[i] = s->bounds[i];
        p->n_bucket_counts = nb;
        p->bucket_counts = counts;
        p->n_explicit_bounds = nb ? nb - 1 : 0;
        p->explicit_bounds = bounds;
        p->count = s->count;
        p->sum = s->sum;
        p->start_time_unix_nano = b->start_ns;
        p->time_unix_nano = b->now_ns;
        p->n_attributes = at.n;
        p->attributes = at.kv;
        push_point(b, p);
        return;
    }
    NumberPoint *p = arena_alloc(&b->a, sizeof(*p));
    if (!p)
        return;
    *p = (NumberPoint)OPENTELEMETRY__PROTO__METRICS__V1__NUMBER_DATA_POINT__INIT;
    p->value_case = OPENTELEMETRY__PROTO__METRICS__V1__NUMBER_DATA_POINT__VALUE_AS_DOUBLE;
    p->as_double = s->value;
    if (f->type == FUNCD_METRIC_COUNTER)
        p->start_time_unix_nano = b->start_ns;
    p->time_unix_nano = b->now_ns;
    p->n_attributes = at.n;
    p->attributes = at.kv;
    push_point(b, p);
}

uint8_t *funcd_otlp_encode_metrics(funcd_metrics *m, uint64_t start_ns, uint64_t now_ns,
                                   uint64_t dropped, size_t *len)
{
    mbuild b = {.start_ns = start_ns, .now_ns = now_ns};
    funcd_metrics_visitor v = {on_family, on_sample, &b};
    if (funcd_metrics_collect(m, NULL, NULL, &v) < 0) {
        arena_free(&b.a);
        return NULL;
    }
    /* The exporter's own: what it could not deliver. */
    if (add_metric(&b, "funcd_otlp_dropped_items_total",
                   "Spans and log records the OTLP exporter dropped (queue full, or never "
                   "accepted after every retry).",
                   "", FUNCD_METRIC_COUNTER)) {
        funcd_metric_sample s = {.value = (double)dropped};
        funcd_metric_family f = {"funcd_otlp_dropped_items_total", "", FUNCD_METRIC_COUNTER, ""};
        on_sample(&b, &f, &s);
    }
    close_family(&b);
    Opentelemetry__Proto__Metrics__V1__ScopeMetrics sm =
        OPENTELEMETRY__PROTO__METRICS__V1__SCOPE_METRICS__INIT;
    sm.scope = scope(&b.a, "funcd.metrics");
    sm.n_metrics = b.n;
    sm.metrics = b.metrics;
    Opentelemetry__Proto__Metrics__V1__ScopeMetrics *smp = &sm;
    Opentelemetry__Proto__Metrics__V1__ResourceMetrics rm =
        OPENTELEMETRY__PROTO__METRICS__V1__RESOURCE_METRICS__INIT;
    rm.resource = resource(&b.a);
    rm.n_scope_metrics = 1;
    rm.scope_metrics = &smp;
    Opentelemetry__Proto__Metrics__V1__ResourceMetrics *rmp = &rm;
    Opentelemetry__Proto__Collector__Metrics__V1__ExportMetricsServiceRequest req =
        OPENTELEMETRY__PROTO__COLLECTOR__METRICS__V1__EXPORT_METRICS_SERVICE_REQUEST__INIT;
    req.n_resource_metrics = 1;
    req.resource_metrics = &rmp;
    return pack(&b.a, &req.base, len);
}
