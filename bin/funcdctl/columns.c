/* The table columns of each kind: NAME, the kind's own, AGE (wide: more). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "output.h"
#include "util/misc.h"

#define NONE "<none>"

static int push(ctl_row *r, const char *cell)
{
    if (r->n >= CTL_MAX_COLUMNS)
        return -1;
    char *copy = funcd_strdup(cell && *cell ? cell : NONE);
    if (!copy)
        return -1;
    r->cells[r->n++] = copy;
    return 0;
}

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
    if (push(r, status ? status : "Unknown") != 0)
        return -1;
    return push(r, replicas);
}

static int function_wide_cells(ctl_row *r, const cJSON *obj)
{
    return push(r, ctl_get_string(ready_condition(obj), "reason"));
}

static int functionconfig_cells(ctl_row *r, const cJSON *obj)
{
    int binary = ctl_get_path(obj, "spec.binaryExecutor") != NULL;
    int pod = ctl_get_path(obj, "spec.podExecutor") != NULL;
    if (push(r, ctl_get_string(obj, "spec.image")) != 0)
        return -1;
    return push(r, binary && pod ? "binary,pod" : binary ? "binary" : pod ? "pod" : NONE);
}

static int secret_cells(ctl_row *r, const cJSON *obj)
{
    char count[32];
    int n = cJSON_GetArraySize(ctl_get_path(obj, "data")) +
            cJSON_GetArraySize(ctl_get_path(obj, "stringData"));
    snprintf(count, sizeof(count), "%d", n);
    const char *type = ctl_get_string(obj, "type");
    if (push(r, type ? type : "Opaque") != 0)
        return -1;
    return push(r, count);
}

typedef struct kind_columns {
    const char *kind;
    const char *headers[3];
    size_t typical[2]; /* widths that fit most values, for rows printed one by one */
    int (*cells)(ctl_row *r, const cJSON *obj);
    const char *wide_headers[2]; /* -o wide: after AGE, before GENERATION */
    int (*wide_cells)(ctl_row *r, const cJSON *obj);
} kind_columns;

/* A new kind gets a row here; one without a row shows NAME and AGE only. */
static const kind_columns columns[] = {
    {"Function", {"READY", "REPLICAS", NULL}, {7, 8}, function_cells, {"REASON", NULL},
     function_wide_cells},
    {"FunctionConfig", {"IMAGE", "EXECUTORS", NULL}, {24, 10}, functionconfig_cells, {NULL}, NULL},
    {"Secret", {"TYPE", "DATA", NULL}, {30, 4}, secret_cells, {NULL}, NULL},
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

void ctl_row_typical_widths(const funcd_kind *kind, int has_first, size_t *widths)
{
    const kind_columns *cols = columns_of(kind);
    size_t i = 0;
    if (has_first)
        widths[i++] = TYPICAL_FIRST;
    widths[i++] = TYPICAL_NAME;
    for (size_t c = 0; cols && c < 2 && cols->headers[c]; c++)
        widths[i++] = cols->typical[c];
    widths[i++] = 5; /* AGE */
}

static int fail(ctl_row *r)
{
    ctl_row_free(r);
    return -1;
}

int ctl_row_header(ctl_row *out, const funcd_kind *kind, int wide, const char *first)
{
    const kind_columns *cols = columns_of(kind);
    out->n = 0;
    if ((first && push(out, first) != 0) || push(out, "NAME") != 0)
        return fail(out);
    for (size_t i = 0; cols && cols->headers[i]; i++)
        if (push(out, cols->headers[i]) != 0)
            return fail(out);
    if (push(out, "AGE") != 0)
        return fail(out);
    if (!wide)
        return 0;
    for (size_t i = 0; cols && cols->wide_headers[i]; i++)
        if (push(out, cols->wide_headers[i]) != 0)
            return fail(out);
    if (push(out, "GENERATION") != 0 || push(out, "RESOURCE-VERSION") != 0)
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

int ctl_row_object(ctl_row *out, const funcd_kind *kind, int wide, const cJSON *obj,
                   int64_t now_ms, const char *first)
{
    const kind_columns *cols = columns_of(kind);
    char age[32], generation[32], rv[64];
    out->n = 0;
    if ((first && push(out, first) != 0) || push(out, ctl_get_string(obj, "metadata.name")) != 0)
        return fail(out);
    if (cols && cols->cells(out, obj) != 0)
        return fail(out);
    ctl_age(ctl_get_string(obj, "metadata.creationTimestamp"), now_ms, age, sizeof(age));
    if (push(out, age) != 0)
        return fail(out);
    if (!wide)
        return 0;
    if (cols && cols->wide_cells && cols->wide_cells(out, obj) != 0)
        return fail(out);
    scalar_text(ctl_get_path(obj, "metadata.generation"), generation, sizeof(generation));
    scalar_text(ctl_get_path(obj, "metadata.resourceVersion"), rv, sizeof(rv));
    if (push(out, generation) != 0 || push(out, rv) != 0)
        return fail(out);
    return 0;
}
