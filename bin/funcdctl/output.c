#include "output.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "util/buf.h"
#include "util/misc.h"

void ctl_row_free(ctl_row *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->cells[i]);
    r->n = 0;
}

int ctl_row_push(ctl_row *r, const char *cell)
{
    if (r->n >= CTL_MAX_COLUMNS)
        return -1;
    char *copy = funcd_strdup(cell && *cell ? cell : "<none>");
    if (!copy)
        return -1;
    r->cells[r->n++] = copy;
    return 0;
}

void ctl_row_print(const ctl_row *r, size_t *widths, FILE *out)
{
    for (size_t i = 0; i < r->n; i++) {
        size_t len = strlen(r->cells[i]);
        if (len > widths[i])
            widths[i] = len;
        if (i + 1 < r->n)
            fprintf(out, "%-*s   ", (int)widths[i], r->cells[i]);
        else
            fputs(r->cells[i], out);
    }
    fputc('\n', out);
}

int ctl_table_add(ctl_table *t, ctl_row *row)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        ctl_row *rows = realloc(t->rows, cap * sizeof(*rows));
        if (!rows) {
            ctl_row_free(row);
            return -1;
        }
        t->rows = rows;
        t->cap = cap;
    }
    t->rows[t->n++] = *row;
    row->n = 0;
    return 0;
}

void ctl_table_widths(const ctl_table *t, size_t *widths)
{
    for (size_t r = 0; r < t->n; r++)
        for (size_t i = 0; i < t->rows[r].n; i++) {
            size_t len = strlen(t->rows[r].cells[i]);
            if (len > widths[i])
                widths[i] = len;
        }
}

void ctl_table_print(const ctl_table *t, const char *indent, FILE *out)
{
    size_t widths[CTL_MAX_COLUMNS] = {0};
    ctl_table_widths(t, widths);
    for (size_t r = 0; r < t->n; r++) {
        fputs(indent, out);
        ctl_row_print(&t->rows[r], widths, out);
    }
}

void ctl_table_free(ctl_table *t)
{
    for (size_t r = 0; r < t->n; r++)
        ctl_row_free(&t->rows[r]);
    free(t->rows);
    t->rows = NULL;
    t->n = t->cap = 0;
}

/* Reads a signed "+hh:mm" / "-hh:mm" offset in seconds; -1 if malformed. */
static int parse_offset(const char *p, long *out)
{
    int sign = *p == '-' ? -1 : 1;
    if ((*p != '+' && *p != '-') || !isdigit((unsigned char)p[1]) ||
        !isdigit((unsigned char)p[2]) || p[3] != ':' || !isdigit((unsigned char)p[4]) ||
        !isdigit((unsigned char)p[5]) || p[6] != '\0')
        return -1;
    long hours = (p[1] - '0') * 10 + (p[2] - '0');
    long minutes = (p[4] - '0') * 10 + (p[5] - '0');
    *out = sign * (hours * 3600 + minutes * 60);
    return 0;
}

int ctl_parse_time(const char *s, int64_t *out_ms)
{
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *p = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
    if (!p)
        return -1;
    int64_t ms = 0;
    if (*p == '.') {
        int64_t scale = 100;
        for (p++; isdigit((unsigned char)*p); p++, scale /= 10)
            ms += (*p - '0') * scale;
    }
    long offset = 0;
    if (!(p[0] == 'Z' && p[1] == '\0') && parse_offset(p, &offset) != 0)
        return -1;
    *out_ms = ((int64_t)timegm(&tm) - offset) * 1000 + ms;
    return 0;
}

void ctl_age(const char *timestamp, int64_t now_ms, char *out, size_t len)
{
    int64_t then;
    if (ctl_parse_time(timestamp, &then) != 0) {
        snprintf(out, len, "<unknown>");
        return;
    }
    int64_t s = (now_ms - then) / 1000;
    if (s < 0)
        s = 0; /* clocks disagree a little: the object is new */
    if (s < 120)
        snprintf(out, len, "%llds", (long long)s);
    else if (s < 120 * 60)
        snprintf(out, len, "%lldm", (long long)(s / 60));
    else if (s < 48 * 3600)
        snprintf(out, len, "%lldh", (long long)(s / 3600));
    else if (s < 2 * 365 * 86400LL)
        snprintf(out, len, "%lldd", (long long)(s / 86400));
    else
        snprintf(out, len, "%lldy", (long long)(s / (365 * 86400LL)));
}

const cJSON *ctl_get_path(const cJSON *obj, const char *path)
{
    char key[128];
    while (obj && *path) {
        size_t n = strcspn(path, ".");
        if (n >= sizeof(key))
            return NULL;
        memcpy(key, path, n);
        key[n] = '\0';
        obj = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
        path += n + (path[n] == '.');
    }
    return obj;
}

const char *ctl_get_string(const cJSON *obj, const char *path)
{
    const cJSON *v = ctl_get_path(obj, path);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void write_json_string(const char *str, FILE *out)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)str; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\t': fputs("\\t", out); break;
        default:
            if (*p < 0x20)
                fprintf(out, "\\u%04x", *p);
            else
                fputc(*p, out);
        }
    }
    fputc('"', out);
}

/* kubectl's layout: every member and element on its own line. (cJSON_Print
 * indents with tabs and keeps "[{" together.) Depth is bounded by the API. */
static void write_json(const cJSON *v, int depth, FILE *out)
{
    int is_object = cJSON_IsObject(v);
    if (!is_object && !cJSON_IsArray(v)) {
        char *scalar = cJSON_PrintUnformatted(v);
        fputs(scalar ? scalar : "null", out);
        free(scalar);
        return;
    }
    if (!v->child) {
        fputs(is_object ? "{}" : "[]", out);
        return;
    }
    fputs(is_object ? "{\n" : "[\n", out);
    for (const cJSON *item = v->child; item; item = item->next) {
        fprintf(out, "%*s", (depth + 1) * 2, "");
        if (is_object) {
            write_json_string(item->string ? item->string : "", out);
            fputs(": ", out);
        }
        write_json(item, depth + 1, out);
        fputs(item->next ? ",\n" : "\n", out);
    }
    fprintf(out, "%*s%c", depth * 2, "", is_object ? '}' : ']');
}

void ctl_print_json(const cJSON *obj, FILE *out)
{
    write_json(obj, 0, out);
    fputc('\n', out);
}

int ctl_print_yaml(const cJSON *obj, FILE *out)
{
    funcd_buf b = FUNCD_BUF_INIT;
    if (funcd_api_to_yaml(obj, &b) != 0) {
        funcd_buf_free(&b);
        ctl_fail("cannot render the object as YAML; try -o json");
        return -1;
    }
    if (b.len > 0)
        fwrite(b.data, 1, b.len, out);
    funcd_buf_free(&b);
    return 0;
}

void ctl_print_name(const funcd_kind *kind, const cJSON *obj, FILE *out)
{
    const char *name = ctl_get_string(obj, "metadata.name");
    fprintf(out, "%s/%s\n", kind->singular, name ? name : "<unnamed>");
}

void ctl_print_indented(const char *text, const char *indent, FILE *out)
{
    while (*text) {
        size_t n = strcspn(text, "\n");
        fprintf(out, "%s%.*s\n", indent, (int)n, text);
        text += n + (text[n] == '\n');
    }
}
