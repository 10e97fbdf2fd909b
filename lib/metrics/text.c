/*
 * The Prometheus text exposition format, version 0.0.4: per family a HELP
 * and a TYPE line, then its samples; a histogram as its _bucket{le=...}
 * series (cumulative, ending with le="+Inf"), _sum and _count.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/internal.h"

void funcd_metrics_escape_label(funcd_buf *out, const char *value)
{
    const char *run = value;
    for (const char *p = value; *p; p++) {
        const char *esc = *p == '\\' ? "\\\\" : *p == '"' ? "\\\"" : *p == '\n' ? "\\n" : NULL;
        if (!esc)
            continue;
        funcd_buf_append(out, run, (size_t)(p - run));
        funcd_buf_puts(out, esc);
        run = p + 1;
    }
    funcd_buf_puts(out, run);
}

/* HELP text escapes only \ and newline. */
static void escape_help(funcd_buf *out, const char *text)
{
    for (const char *p = text; *p; p++) {
        if (*p == '\\')
            funcd_buf_puts(out, "\\\\");
        else if (*p == '\n')
            funcd_buf_puts(out, "\\n");
        else
            funcd_buf_append(out, p, 1);
    }
}

void funcd_metrics_put_value(funcd_buf *out, double v)
{
    if (isnan(v))
        funcd_buf_puts(out, "NaN");
    else if (isinf(v))
        funcd_buf_puts(out, v > 0 ? "+Inf" : "-Inf");
    else if (v == floor(v) && fabs(v) < 9007199254740992.0) /* 2^53: exact */
        funcd_buf_printf(out, "%.0f", v);
    else {
        char s[40];
        snprintf(s, sizeof(s), "%.15g", v); /* the shortest that reads back the same */
        if (strtod(s, NULL) != v)
            snprintf(s, sizeof(s), "%.17g", v);
        funcd_buf_puts(out, s);
    }
}

static void put_series(funcd_buf *out, const char *name, const char *suffix,
                       const funcd_metric_sample *s, const char *le)
{
    funcd_buf_puts(out, name);
    funcd_buf_puts(out, suffix);
    if (s->n_labels || le) {
        funcd_buf_puts(out, "{");
        for (size_t i = 0; i < s->n_labels; i++) {
            funcd_buf_printf(out, "%s%s=\"", i ? "," : "", s->labels[i].name);
            funcd_metrics_escape_label(out, s->labels[i].value ? s->labels[i].value : "");
            funcd_buf_puts(out, "\"");
        }
        if (le)
            funcd_buf_printf(out, "%sle=\"%s\"", s->n_labels ? "," : "", le);
        funcd_buf_puts(out, "}");
    }
    funcd_buf_puts(out, " ");
}

static void on_family(void *payload, const funcd_metric_family *f)
{
    funcd_buf *out = payload;
    static const char *const types[] = {"counter", "gauge", "histogram"};
    funcd_buf_printf(out, "# HELP %s ", f->name);
    escape_help(out, f->help);
    funcd_buf_printf(out, "\n# TYPE %s %s\n", f->name, types[f->type]);
}

static void on_sample(void *payload, const funcd_metric_family *f, const funcd_metric_sample *s)
{
    funcd_buf *out = payload;
    if (f->type != FUNCD_METRIC_HISTOGRAM) {
        put_series(out, f->name, "", s, NULL);
        funcd_metrics_put_value(out, s->value);
        funcd_buf_puts(out, "\n");
        return;
    }
    for (size_t i = 0; i < s->n_buckets; i++) {
        funcd_buf le = FUNCD_BUF_INIT;
        funcd_metrics_put_value(&le, s->bounds[i]);
        put_series(out, f->name, "_bucket", s, le.data ? le.data : "");
        funcd_buf_free(&le);
        funcd_metrics_put_value(out, (double)s->buckets[i]);
        funcd_buf_puts(out, "\n");
    }
    put_series(out, f->name, "_sum", s, NULL);
    funcd_metrics_put_value(out, s->sum);
    funcd_buf_puts(out, "\n");
    put_series(out, f->name, "_count", s, NULL);
    funcd_metrics_put_value(out, (double)s->count);
    funcd_buf_puts(out, "\n");
}

int funcd_metrics_text(funcd_metrics *m, funcd_metrics_ns_filter allow, void *allow_payload,
                       funcd_buf *out)
{
    funcd_metrics_visitor v = {on_family, on_sample, out};
    return funcd_metrics_collect(m, allow, allow_payload, &v);
}
