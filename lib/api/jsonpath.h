/*
 * The JSONPath and condition subsets of Workflows (docs/workflows.md).
 *
 * JSONPath: "$" followed by segments, each
 *   .name     a member; name is [A-Za-z_][A-Za-z0-9_-]*
 *   ["name"]  a member with any name (JSON string escapes \" \\ \/ \n \t \r \b \f)
 *   [N]       an array element, N a decimal from 0
 *   [*]       every element of an array: only as the last segment, and only
 *             where a list is wanted (forEach)
 * at most FUNCD_JSONPATH_MAX_SEGMENTS segments, FUNCD_JSONPATH_MAX_TEXT bytes.
 * No filters, slices, recursive descent or unions: a path names one value.
 *
 * Conditions (`when`):
 *   expr    := or
 *   or      := and ("||" and)*
 *   and     := unary ("&&" unary)*
 *   unary   := "!" unary | primary
 *   primary := "(" expr ")" | operand [cmp operand]
 *   cmp     := "==" | "!=" | "<" | "<=" | ">" | ">="
 *   operand := JSONPath | JSON literal (number, "string", true, false, null)
 * An operand alone is true unless it is missing, null, false, 0 or "".
 * == and != compare JSON values deeply; < <= > >= compare two numbers or
 * two strings (bytewise) and are false for anything else. A path that names
 * nothing reads as null. Nesting is bounded by FUNCD_CONDITION_MAX_DEPTH.
 */
#ifndef FUNCD_API_JSONPATH_H
#define FUNCD_API_JSONPATH_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#define FUNCD_JSONPATH_MAX_SEGMENTS 32
#define FUNCD_JSONPATH_MAX_TEXT 512
#define FUNCD_JSONPATH_MAX_NAME 128
#define FUNCD_CONDITION_MAX_TEXT 2048
#define FUNCD_CONDITION_MAX_DEPTH 32

typedef enum { FUNCD_JP_MEMBER, FUNCD_JP_INDEX, FUNCD_JP_ALL } funcd_jsonpath_seg_kind;

typedef struct funcd_jsonpath_seg {
    funcd_jsonpath_seg_kind kind;
    uint32_t index;
    char name[FUNCD_JSONPATH_MAX_NAME + 1];
} funcd_jsonpath_seg;

typedef struct funcd_jsonpath {
    size_t n;
    funcd_jsonpath_seg seg[FUNCD_JSONPATH_MAX_SEGMENTS];
} funcd_jsonpath;

/* Parses the path at the start of `text` (`len` bytes), stopping at the
 * first byte that cannot continue it; `*used` gets the bytes read. A [*]
 * is refused unless `allow_all`. 0, or -1 with `why` saying what is wrong. */
int funcd_jsonpath_parse_prefix(const char *text, size_t len, int allow_all, funcd_jsonpath *out,
                                size_t *used, char *why, size_t why_len);
/* The whole of `text` must be one path. */
int funcd_jsonpath_parse(const char *text, int allow_all, funcd_jsonpath *out, char *why,
                         size_t why_len);

/* The value the path names in `doc`, or NULL. A final [*] names the array
 * itself (NULL when it is not an array). */
const cJSON *funcd_jsonpath_get(const funcd_jsonpath *p, const cJSON *doc);

/* Checks a condition's syntax (doc NULL) or evaluates it against `doc`
 * (*result 1 or 0). 0, or -1 with `why` (syntax errors name the offset).
 * `on_path`, when not NULL, sees every path the condition names (for the
 * admission's reference checks); returning non-zero fails with its `why`. */
typedef int (*funcd_condition_path_fn)(const funcd_jsonpath *p, void *arg, char *why,
                                       size_t why_len);
int funcd_condition_eval(const char *text, const cJSON *doc, int *result,
                         funcd_condition_path_fn on_path, void *arg, char *why, size_t why_len);

#endif
