/*
 * funcdctl output: aligned tables, kubectl-style ages, per-kind columns, and
 * objects printed as JSON, YAML or "kind/name".
 */
#ifndef FUNCDCTL_OUTPUT_H
#define FUNCDCTL_OUTPUT_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>

#include "api/api.h"

#define CTL_MAX_COLUMNS 12

/* One table row; cells are malloc()ed and owned by the row. */
typedef struct ctl_row {
    size_t n;
    char *cells[CTL_MAX_COLUMNS];
} ctl_row;

void ctl_row_free(ctl_row *r);
/* Appends a copy of `cell` ("<none>" when empty or NULL); -1 when full or out of memory. */
int ctl_row_push(ctl_row *r, const char *cell);

/* Which columns a table of objects has. */
typedef struct ctl_cols {
    int wide;             /* the kind's extra columns, GENERATION, RESOURCE-VERSION */
    int namespace_column; /* -A: NAMESPACE first */
    int labels_column;    /* --show-labels: LABELS last */
    const char *url_base; /* wide Functions: the data plane's URL (NULL: unknown) */
} ctl_cols;

/*
 * The column headers for `kind` ([NAMESPACE] NAME ... AGE; wide adds the
 * kind's extra columns, GENERATION and RESOURCE-VERSION; [LABELS]), after an
 * optional first column `first` (watch's "EVENT"). 0 or -1 on OOM.
 */
int ctl_row_header(ctl_row *out, const funcd_kind *kind, const ctl_cols *cols,
                   const char *first);
/* The same columns filled from `obj`; ages are relative to `now_ms`. */
int ctl_row_object(ctl_row *out, const funcd_kind *kind, const ctl_cols *cols, const cJSON *obj,
                   int64_t now_ms, const char *first);

/* Starting widths for rows printed one at a time (watch), so that most stay
 * aligned with the header; `has_first`: an extra first column. */
void ctl_row_typical_widths(const funcd_kind *kind, const ctl_cols *cols, int has_first,
                            size_t *widths);

/* A Function's URL on the data plane at `base`: BASE/fn/NS/NAME/ (malloc()ed). */
char *ctl_function_url(const char *base, const cJSON *fn);

/* Rows printed with columns padded to `widths` (one per column, grown to fit
 * this row), three spaces apart, no trailing blanks. */
void ctl_row_print(const ctl_row *r, size_t *widths, FILE *out);

/* A whole table: rows added (ownership taken), then printed aligned. */
typedef struct ctl_table {
    ctl_row *rows;
    size_t n, cap;
} ctl_table;

#define CTL_TABLE_INIT {NULL, 0, 0}

int ctl_table_add(ctl_table *t, ctl_row *row);
/* Grows widths[] (CTL_MAX_COLUMNS) to fit every cell of the table. */
void ctl_table_widths(const ctl_table *t, size_t *widths);
/* Every line starts with `indent` (""). */
void ctl_table_print(const ctl_table *t, const char *indent, FILE *out);
void ctl_table_free(ctl_table *t);

/* RFC 3339 ("2026-11-29T19:23:37Z", fraction and offset allowed) to epoch
 * milliseconds; 0 or -1 if malformed. */
int ctl_parse_time(const char *s, int64_t *out_ms);
/* How long ago, like kubectl: "5s", "3m", "2h", "4d", "2y"; "<unknown>" when
 * `timestamp` is missing or malformed. */
void ctl_age(const char *timestamp, int64_t now_ms, char *out, size_t len);

/* A string field by dotted path ("metadata.name"), or NULL. */
const char *ctl_get_string(const cJSON *obj, const char *path);
const cJSON *ctl_get_path(const cJSON *obj, const char *path);

/* JSON pretty-printed with two-space indents and a final newline. */
void ctl_print_json(const cJSON *obj, FILE *out);
/* YAML via funcd_api_to_yaml; 0 or -1 (message printed). */
int ctl_print_yaml(const cJSON *obj, FILE *out);
/* "function/NAME". */
void ctl_print_name(const funcd_kind *kind, const cJSON *obj, FILE *out);

/* Writes `text` with every line prefixed by `indent`. */
void ctl_print_indented(const char *text, const char *indent, FILE *out);

#endif
