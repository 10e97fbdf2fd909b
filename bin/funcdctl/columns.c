/* The table columns of each kind: NAME, the kind's own, AGE (wide: more). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "output.h"
#include "util/buf.h"
#include "util/misc.h"

#define NONE "<none>"

static const cJSON *ready_condition(const cJSON *obj)
{
    const cJSON *cond;
    cJSON_ArrayForEach(cond, ctl_get_path(obj, "status.conditions"))
    {
        const char *type = ctl_get_string(cond, "type");
        if (type && !strcmp(type, "Ready"))
            return cond;
    }
    return NULL;
}

static long count_of(const cJSON *obj, const char *path)
{
    const cJSON *v = ctl_get_path(obj, path);
    return cJSON_IsNumber(v) && v->valuedouble >= 0 ? (long)v->valuedouble : 0;
}

static int function_cells(ctl_row *r, const cJSON *obj)
{
    const char *status = ctl_get_string(ready_condition(obj), "status");
    char replicas[48];
    /* Scaled to zero, or not reported yet: both read as "0/0". */
    snprintf(replicas, sizeof(replicas), "%ld/%ld", count_of(obj, "status.replicas.ready"),
             count_of(obj, "status.replicas.total"));
    if (ctl_row_push(r, status ? status : "Unknown") != 0)
        return -1;
    return ctl_row_push(r, replicas);
}

char *ctl_function_url(const char *base, const cJSON *fn)
{
    const char *ns = ctl_get_string(fn, "metadata.namespace");
    const char *name = ctl_get_string(fn, "metadata.name");
    funcd_buf b = FUNCD_BUF_INIT;
    if (!base || !ns || !name || funcd_buf_printf(&b, "%s/fn/%s/%s/", base, ns, name) != 0) {
        funcd_buf_free(&b);
        return NULL;
    }
    return funcd_buf_detach(&b, NULL);
}

static int function_wide_cells(ctl_row *r, const cJSON *obj, const ctl_cols *c)
{
    if (ctl_row_push(r, ctl_get_string(ready_condition(obj), "reason")) != 0)
        return -1;
    char *url = ctl_function_url(c->url_base, obj);
    int rc = ctl_row_push(r, url);
    free(url);
    return rc;
}

/* "app=hello,tier=web", as kubectl's --show-labels. */
static int labels_cell(ctl_row *r, const cJSON *obj)
{
    funcd_buf b = FUNCD_BUF_INIT;
    const cJSON *e;
    int rc = 0;
    cJSON_ArrayForEach(e, ctl_get_path(obj, "metadata.labels"))
    {
        if (rc == 0 && cJSON_IsString(e))
            rc = funcd_buf_printf(&b, "%s%s=%s", b.len ? "," : "", e->string, e->valuestring);
    }
    if (rc == 0)
        rc = ctl_row_push(r, b.data);
    funcd_buf_free(&b);
    return rc;
}

static int functionconfig_cells(ctl_row *r, const cJSON *obj)
{
    int binary = ctl_get_path(obj, "spec.binaryExecutor") != NULL;
    int pod = ctl_get_path(obj, "spec.podExecutor") != NULL;
    if (ctl_row_push(r, ctl_get_string(obj, "spec.image")) != 0)
        return -1;
    return ctl_row_push(r, binary && pod ? "binary,pod" : binary ? "binary" : pod ? "pod" : NONE);
}

/* An EventSource's type and where its events go ("function/resize"). */
static int eventsource_cells(ctl_row *r, const cJSON *obj)
{
    const char *type = ctl_get_string(obj, "spec.type");
    const char *fn = ctl_get_string(obj, "spec.target.function");
    char target[100];
    snprintf(target, sizeof(target), "function/%s", fn ? fn : "?");
    if (ctl_row_push(r, type ? type : NONE) != 0)
        return -1;
    return ctl_row_push(r, fn ? target : NONE);
}

static int secret_cells(ctl_row *r, const cJSON *obj)
{
    char count[32];
    int n = cJSON_GetArraySize(ctl_get_path(obj, "data")) +
            cJSON_GetArraySize(ctl_get_path(obj, "stringData"));
    snprintf(count, sizeof(count), "%d", n);
    const char *type = ctl_get_string(obj, "type");
    if (ctl_row_push(r, type ? type : "Opaque") != 0)
        return -1;
    return ctl_row_push(r, count);
}

typedef struct kind_columns {
    const char *kind;
    const char *headers[3];
    size_t typical[2]; /* widths that fit most values, for rows printed one by one */
    int (*cells)(ctl_row *r, const cJSON *obj);
    const char *wide_headers[3]; /* -o wide: after AGE, before GENERATION */
    int (*wide_cells)(ctl_row *r, const cJSON *obj, const ctl_cols *c);
} kind_columns;

/* A new kind gets a row here; one without a row shows NAME and AGE only. */
static const kind_columns columns[] = {
    {"Function", {"READY", "REPLICAS", NULL}, {7, 8}, function_cells, {"REASON", "URL", NULL},
     function_wide_cells},
    {"FunctionConfig", {"IMAGE", "EXECUTORS", NULL}, {24, 10}, functionconfig_cells, {NULL}, NULL},
    {"Secret", {"TYPE", "DATA", NULL}, {30, 4}, secret_cells, {NULL}, NULL},
    {"EventSource", {"TYPE", "TARGET", NULL}, {7, 20}, eventsource_cells, {NULL}, NULL},
};

static const kind_columns *columns_of(const funcd_kind *kind)
{
    for (size_t i = 0; i < sizeof(columns) / sizeof(columns[0]); i++)
        if (!strcmp(columns[i].kind, kind->kind))
            return &columns[i];
    return NULL;
}

#define TYPICAL_NAME 24
#define TYPICAL_FIRST 8 /* "MODIFIED" */

void ctl_row_typical_widths(const funcd_kind *kind, const ctl_cols *c, int has_first,
                            size_t *widths)
{
    const kind_columns *cols = columns_of(kind);
    size_t i = 0;
    if (has_first)
        widths[i++] = TYPICAL_FIRST;
    if (c->namespace_column)
        widths[i++] = TYPICAL_NAME / 2;
    widths[i++] = TYPICAL_NAME;
    for (size_t k = 0; cols && k < 2 && cols->headers[k]; k++)
        widths[i++] = cols->typical[k];
    widths[i++] = 5; /* AGE */
    while (i < CTL_MAX_COLUMNS)
        widths[i++] = 0;
}

static int fail(ctl_row *r)
{
    ctl_row_free(r);
    return -1;
}

int ctl_row_header(ctl_row *out, const funcd_kind *kind, const ctl_cols *c, const char *first)
{
    const kind_columns *cols = columns_of(kind);
    out->n = 0;
    if ((first && ctl_row_push(out, first) != 0) ||
        (c->namespace_column && ctl_row_push(out, "NAMESPACE") != 0) || ctl_row_push(out, "NAME") != 0)
        return fail(out);
    for (size_t i = 0; cols && cols->headers[i]; i++)
        if (ctl_row_push(out, cols->headers[i]) != 0)
            return fail(out);
    if (ctl_row_push(out, "AGE") != 0)
        return fail(out);
    if (c->wide) {
        for (size_t i = 0; cols && cols->wide_headers[i]; i++)
            if (ctl_row_push(out, cols->wide_headers[i]) != 0)
                return fail(out);
        if (ctl_row_push(out, "GENERATION") != 0 || ctl_row_push(out, "RESOURCE-VERSION") != 0)
            return fail(out);
    }
    if (c->labels_column && ctl_row_push(out, "LABELS") != 0)
        return fail(out);
    return 0;
}

/* metadata.resourceVersion is a string in the API, but be lenient. */
static void scalar_text(const cJSON *v, char *buf, size_t len)
{
    if (cJSON_IsString(v))
        snprintf(buf, len, "%s", v->valuestring);
    else if (cJSON_IsNumber(v))
        snprintf(buf, len, "%.0f", v->valuedouble);
    else
        snprintf(buf, len, NONE);
}

int ctl_row_object(ctl_row *out, const funcd_kind *kind, const ctl_cols *c, const cJSON *obj,
                   int64_t now_ms, const char *first)
{
    const kind_columns *cols = columns_of(kind);
    char age[32], generation[32], rv[64];
    out->n = 0;
    if ((first && ctl_row_push(out, first) != 0) ||
        (c->namespace_column && ctl_row_push(out, ctl_get_string(obj, "metadata.namespace")) != 0) ||
        ctl_row_push(out, ctl_get_string(obj, "metadata.name")) != 0)
        return fail(out);
    if (cols && cols->cells(out, obj) != 0)
        return fail(out);
    ctl_age(ctl_get_string(obj, "metadata.creationTimestamp"), now_ms, age, sizeof(age));
    if (ctl_row_push(out, age) != 0)
        return fail(out);
    if (c->wide) {
        if (cols && cols->wide_cells && cols->wide_cells(out, obj, c) != 0)
            return fail(out);
        scalar_text(ctl_get_path(obj, "metadata.generation"), generation, sizeof(generation));
        scalar_text(ctl_get_path(obj, "metadata.resourceVersion"), rv, sizeof(rv));
        if (ctl_row_push(out, generation) != 0 || ctl_row_push(out, rv) != 0)
            return fail(out);
    }
    if (c->labels_column && labels_cell(out, obj) != 0)
        return fail(out);
    return 0;
}
