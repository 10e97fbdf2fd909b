/*
 * The Prometheus text lib/metrics writes: label values escaped as the
 * format says, edge rejections by reason, histograms cumulative with +Inf
 * equal to _count, counters summed over the gateway threads' slots, a
 * dropped function no longer written, and the namespace filter.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>

#include "harness.h"
#include "metrics/metrics.h"

static char *text_of(funcd_metrics *m, funcd_metrics_ns_filter allow, void *payload)
{
    funcd_buf b = FUNCD_BUF_INIT;
    if (funcd_metrics_text(m, allow, payload, &b) < 0) {
        funcd_buf_free(&b);
        return NULL;
    }
    return funcd_buf_detach(&b, NULL);
}

static int has_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, line, n) == 0 && (p[n] == '\n' || p[n] == '\0'))
            return 1;
    return 0;
}

#define CHECK_LINE(text, line)                                                                     \
    do {                                                                                           \
        if (!has_line((text), (line)))                                                             \
            FAILF("no line \"%s\" in:\n%s", (line), (text));                                       \
    } while (0)

TEST(escapes_label_values)
{
    funcd_buf b = FUNCD_BUF_INIT;
    funcd_metrics_escape_label(&b, "a\\b\"c\nd");
    CHECK_STR(b.data, "a\\\\b\\\"c\\nd");
    funcd_buf_reset(&b);
    funcd_metrics_escape_label(&b, "plain");
    CHECK_STR(b.data, "plain");
    funcd_buf_free(&b);

    funcd_metrics *m = NULL;
    CHECK_INT(funcd_metrics_new(&m, 2), 0);
    funcd_metrics_fn *fn = funcd_metrics_fn_hold(m, "n\"s", "f\\n\nx");
    CHECK(fn != NULL);
    funcd_metrics_fn_enter(fn, 0);
    funcd_metrics_fn_done(fn, 0, 200, 1000);
    char *t = text_of(m, NULL, NULL);
    CHECK(t != NULL);
    CHECK_LINE(t, "funcd_requests_total{namespace=\"n\\\"s\",function=\"f\\\\n\\nx\",code=\"200\"} 1");
    free(t);
    funcd_metrics_fn_drop(fn);
    funcd_metrics_free(m);
}

TEST(sums_slots_and_histograms)
{
    funcd_metrics *m = NULL;
    CHECK_INT(funcd_metrics_new(&m, 3), 0);
    funcd_metrics_fn *fn = funcd_metrics_fn_hold(m, "default", "f");
    CHECK(fn != NULL);
    /* 0.3 ms, 2 ms, 2 s on three threads; one 0 (the client left: 499) */
    const uint64_t ns[] = {300000, 2000000, 2000000000, 1000};
    const int codes[] = {200, 200, 503, 0};
    for (unsigned i = 0; i < 4; i++) {
        funcd_metrics_fn_enter(fn, i % 3);
        funcd_metrics_fn_done(fn, i % 3, codes[i], ns[i]);
    }
    funcd_metrics_fn_enter(fn, 1);
    funcd_metrics_fn_reject(fn, 1, FUNCD_METRICS_RATE_LIMITED);
    funcd_metrics_fn_done(fn, 1, 429, 5000);
    funcd_metrics_fn_enter(fn, 2);
    funcd_metrics_fn_reject(fn, 2, FUNCD_METRICS_BODY_TOO_LARGE);
    funcd_metrics_fn_done(fn, 2, 413, 5000);
    funcd_metrics_cold_start(m, "default", "f", 7000000); /* 7 ms */
    funcd_metrics_cold_start(m, "default", "other", 7000000); /* not held: not counted */
    char *t = text_of(m, NULL, NULL);
    CHECK(t != NULL);
    CHECK_LINE(t, "# TYPE funcd_requests_total counter");
    CHECK_LINE(t, "funcd_requests_total{namespace=\"default\",function=\"f\",code=\"200\"} 2");
    CHECK_LINE(t, "funcd_requests_total{namespace=\"default\",function=\"f\",code=\"413\"} 1");
    CHECK_LINE(t, "funcd_requests_total{namespace=\"default\",function=\"f\",code=\"429\"} 1");
    CHECK_LINE(t, "funcd_requests_total{namespace=\"default\",function=\"f\",code=\"499\"} 1");
    CHECK_LINE(t, "funcd_requests_total{namespace=\"default\",function=\"f\",code=\"503\"} 1");
    CHECK_LINE(t, "funcd_edge_rejections_total{namespace=\"default\",function=\"f\","
                  "reason=\"rate_limited\"} 1");
    CHECK_LINE(t, "funcd_edge_rejections_total{namespace=\"default\",function=\"f\","
                  "reason=\"body_too_large\"} 1");
    CHECK(!strstr(t, "reason=\"forbidden\""));
    CHECK_LINE(t, "# TYPE funcd_request_duration_seconds histogram");
    CHECK_LINE(t, "funcd_request_duration_seconds_bucket{namespace=\"default\",function=\"f\","
                  "le=\"0.0005\"} 4");
    CHECK_LINE(t, "funcd_request_duration_seconds_bucket{namespace=\"default\",function=\"f\","
                  "le=\"0.001\"} 4");
    CHECK_LINE(t, "funcd_request_duration_seconds_bucket{namespace=\"default\",function=\"f\","
                  "le=\"0.0025\"} 5");
    CHECK_LINE(t, "funcd_request_duration_seconds_bucket{namespace=\"default\",function=\"f\","
                  "le=\"1\"} 5");
    CHECK_LINE(t, "funcd_request_duration_seconds_bucket{namespace=\"default\",function=\"f\","
                  "le=\"2.5\"} 6");
    CHECK_LINE(t, "funcd_request_duration_seconds_bucket{namespace=\"default\",function=\"f\","
                  "le=\"+Inf\"} 6");
    CHECK_LINE(t, "funcd_request_duration_seconds_count{namespace=\"default\",function=\"f\"} 6");
    CHECK_LINE(t, "funcd_request_duration_seconds_sum{namespace=\"default\",function=\"f\"} "
                  "2.002311");
    CHECK_LINE(t, "funcd_cold_starts_total{namespace=\"default\",function=\"f\"} 1");
    CHECK_LINE(t, "funcd_cold_start_seconds_bucket{namespace=\"default\",function=\"f\","
                  "le=\"0.005\"} 0");
    CHECK_LINE(t, "funcd_cold_start_seconds_bucket{namespace=\"default\",function=\"f\","
                  "le=\"0.01\"} 1");
    CHECK_LINE(t, "funcd_cold_start_seconds_sum{namespace=\"default\",function=\"f\"} 0.007");
    CHECK(!strstr(t, "function=\"other\""));
    CHECK_LINE(t, "# TYPE process_open_fds gauge");
    free(t);

    /* Dropped: no longer written (and freed: no request is inside it). */
    funcd_metrics_fn_drop(fn);
    t = text_of(m, NULL, NULL);
    CHECK(t != NULL);
    CHECK(!strstr(t, "function=\"f\""));
    CHECK_LINE(t, "# TYPE funcd_requests_total counter");
    free(t);
    funcd_metrics_free(m);
}

/* A block dropped while a request is inside it stays until that request
 * is done (ASan would see a use after free otherwise). */
TEST(dropped_while_in_use)
{
    funcd_metrics *m = NULL;
    CHECK_INT(funcd_metrics_new(&m, 1), 0);
    funcd_metrics_fn *fn = funcd_metrics_fn_hold(m, "default", "f");
    CHECK(fn != NULL);
    funcd_metrics_fn_enter(fn, 0);
    funcd_metrics_fn_drop(fn);
    char *t = text_of(m, NULL, NULL); /* reaps what it can */
    CHECK(t && !strstr(t, "function=\"f\""));
    free(t);
    funcd_metrics_fn_done(fn, 0, 200, 1);
    /* Held again by name: the same counters go on. */
    funcd_metrics_fn *again = funcd_metrics_fn_hold(m, "default", "f");
    CHECK(again == fn);
    t = text_of(m, NULL, NULL);
    CHECK(t != NULL);
    CHECK_LINE(t, "funcd_requests_total{namespace=\"default\",function=\"f\",code=\"200\"} 1");
    free(t);
    funcd_metrics_fn_drop(again);
    funcd_metrics_free(m);
}

static int only_b(void *payload, const char *ns)
{
    return strcmp(ns, payload) == 0;
}

TEST(namespace_filter)
{
    funcd_metrics *m = NULL;
    CHECK_INT(funcd_metrics_new(&m, 1), 0);
    funcd_metrics_fn *a = funcd_metrics_fn_hold(m, "a", "f");
    funcd_metrics_fn *b = funcd_metrics_fn_hold(m, "b", "f");
    char *t = text_of(m, only_b, "b");
    CHECK(t != NULL);
    CHECK(!strstr(t, "namespace=\"a\""));
    CHECK_LINE(t, "funcd_cold_starts_total{namespace=\"b\",function=\"f\"} 0");
    free(t);
    funcd_metrics_fn_drop(a);
    funcd_metrics_fn_drop(b);
    funcd_metrics_free(m);
}

TEST(values)
{
    funcd_buf b = FUNCD_BUF_INIT;
    const double v[] = {0, 3, 0.1, 2.5, 1e300, NAN, INFINITY, -INFINITY, 123456789012.0};
    const char *want = "0 3 0.1 2.5 1e+300 NaN +Inf -Inf 123456789012 ";
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        funcd_metrics_put_value(&b, v[i]);
        funcd_buf_puts(&b, " ");
    }
    CHECK_STR(b.data, want);
    funcd_buf_free(&b);
}

/* Every funcd_* and process_* name in `expr` (a _bucket, _sum or _count
 * suffix taken off a histogram's) has a TYPE line in `text`; else the name. */
static const char *unknown_series(const char *expr, const char *text, char *name, size_t len)
{
    for (const char *p = expr; *p; p++) {
        if ((strncmp(p, "funcd_", 6) != 0 && strncmp(p, "process_", 8) != 0) ||
            (p > expr && (isalnum((unsigned char)p[-1]) || p[-1] == '_')))
            continue;
        size_t n = 0;
        while (n + 1 < len && (isalnum((unsigned char)p[n]) || p[n] == '_'))
            n++;
        snprintf(name, len, "%.*s", (int)n, p);
        p += n - 1;
        char type[200];
        snprintf(type, sizeof(type), "# TYPE %s ", name);
        if (strstr(text, type))
            continue;
        static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
        int found = 0;
        for (int i = 0; i < 3 && !found; i++) {
            size_t sl = strlen(suffixes[i]);
            if (n > sl && strcmp(name + n - sl, suffixes[i]) == 0) {
                snprintf(type, sizeof(type), "# TYPE %.*s histogram", (int)(n - sl), name);
                found = strstr(text, type) != NULL;
            }
        }
        if (!found)
            return name;
    }
    return NULL;
}

static int walk_exprs(const cJSON *j, const char *text, char *bad, size_t len, int *n)
{
    if (cJSON_IsString(j) && j->string && strcmp(j->string, "expr") == 0) {
        (*n)++;
        return unknown_series(j->valuestring, text, bad, len) ? -1 : 0;
    }
    for (const cJSON *c = j ? j->child : NULL; c; c = c->next)
        if (walk_exprs(c, text, bad, len, n) < 0)
            return -1;
    return 0;
}

/* The example dashboard queries only series funcd writes. */
TEST(dashboard_names_real_series)
{
    const char *root = getenv("FUNCD_SOURCE_ROOT");
    CHECK(root != NULL);
    char path[1024];
    snprintf(path, sizeof(path), "%s/examples/observability/funcd-dashboard.json", root);
    FILE *f = fopen(path, "re");
    if (!f)
        FAILF("cannot open %s", path);
    static char json[262144];
    size_t len = fread(json, 1, sizeof(json) - 1, f);
    fclose(f);
    json[len] = '\0';
    cJSON *d = cJSON_Parse(json);
    CHECK(d != NULL);
    funcd_metrics *m = NULL;
    CHECK_INT(funcd_metrics_new(&m, 1), 0);
    char *t = text_of(m, NULL, NULL);
    char bad[128] = "";
    int exprs = 0;
    int rc = t ? walk_exprs(d, t, bad, sizeof(bad), &exprs) : -1;
    free(t);
    funcd_metrics_free(m);
    cJSON_Delete(d);
    if (rc < 0)
        FAILF("the dashboard queries %s, which funcd does not write", bad);
    CHECK(exprs >= 10);
}

int main(void)
{
    RUN(escapes_label_values);
    RUN(sums_slots_and_histograms);
    RUN(dropped_while_in_use);
    RUN(namespace_filter);
    RUN(values);
    RUN(dashboard_names_real_series);
    return HARNESS_END();
}
