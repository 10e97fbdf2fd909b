/*
 * Private helpers shared by the lib/api files: field paths, table-driven
 * object checks, base64, and the YAML half of the decoder.
 */
#ifndef FUNCD_API_INTERNAL_H
#define FUNCD_API_INTERNAL_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "api/api.h"
#include "util/buf.h"

/* Bounds that callers never see but that keep hostile input cheap. */
#define FUNCD__API_MAX_NODES (1 << 20)          /* values per decode call */
#define FUNCD__API_STREAM_MAX (16 * FUNCD_API_MAX_OBJECT_BYTES)

/* ---- errors and field paths ------------------------------------------ */

/* Validation state: where we are in the object, and where errors go. */
typedef struct funcd__api_ctx {
    funcd_api_error *err;
    char path[sizeof(((funcd_api_error *)0)->field)];
    size_t len;
} funcd__api_ctx;

void funcd__api_ctx_init(funcd__api_ctx *c, funcd_api_error *err);
/* Each push returns the previous length, which pop restores. */
size_t funcd__api_push_field(funcd__api_ctx *c, const char *name); /* ".name" */
size_t funcd__api_push_index(funcd__api_ctx *c, size_t i);         /* "[3]" */
size_t funcd__api_push_key(funcd__api_ctx *c, const char *key);    /* "[key]" */
void funcd__api_pop(funcd__api_ctx *c, size_t old_len);
/* Records the error at the current path; returns FUNCD_EINVAL. */
int funcd__api_fail(funcd__api_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Records an error that concerns the document as a whole. */
int funcd__api_doc_error(funcd_api_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void funcd__api_error_clear(funcd_api_error *err);

/* ---- table-driven object checks ---------------------------------------- */

typedef int (*funcd__api_check_fn)(funcd__api_ctx *c, const cJSON *item, const void *arg);

/* One known field of an object. `check` NULL accepts any value. */
typedef struct funcd__api_field {
    const char *name;
    int required;
    funcd__api_check_fn check;
    const void *arg;
} funcd__api_field;

/* Inclusive bounds: integer values, string lengths, durations (ms). */
typedef struct funcd__api_range {
    int64_t min, max;
} funcd__api_range;

/* Idle times (idleTimeout, timeToLive): 0 to a year, so that every
 * consumer's signed 64-bit millisecond arithmetic stays in range. */
extern const funcd__api_range funcd__api_max_idle_ms;

/* The member `name` of `obj`, treating JSON null as absent. */
const cJSON *funcd__api_member(const cJSON *obj, const char *name);

/* `obj` must be an object with only the listed fields; each present field
 * is checked in table order, and a missing required one is an error. */
int funcd__api_check_object(funcd__api_ctx *c, const cJSON *obj, const funcd__api_field *fields,
                            size_t n);
#define FUNCD__API_CHECK_OBJECT(c, obj, table)                                                     \
    funcd__api_check_object((c), (obj), (table), sizeof(table) / sizeof((table)[0]))

/* Checkers usable in field tables. */
int funcd__api_check_is_object(funcd__api_ctx *c, const cJSON *item, const void *unused);
int funcd__api_check_string(funcd__api_ctx *c, const cJSON *item, const void *len_range);
int funcd__api_check_int(funcd__api_ctx *c, const cJSON *item, const void *range);
int funcd__api_check_enum(funcd__api_ctx *c, const cJSON *item, const void *null_terminated);
int funcd__api_check_duration(funcd__api_ctx *c, const cJSON *item, const void *ms_range);
int funcd__api_check_dns_label(funcd__api_ctx *c, const cJSON *item, const void *unused);
int funcd__api_check_relpath(funcd__api_ctx *c, const cJSON *item, const void *unused);
/* An array of at most `*max_items` (size_t) strings. */
int funcd__api_check_string_array(funcd__api_ctx *c, const cJSON *item, const void *max_items);

int funcd__api_is_dns_label(const char *s);
int funcd__api_is_dns_subdomain(const char *s, size_t len);
/* No ".." component; `absolute` says whether it must start with '/'. */
int funcd__api_is_clean_path(const char *s, int absolute);

/* Per-kind parts of funcd_api_validate. `c` points at "spec" (or the root
 * for Secret). */
int funcd__api_validate_function_spec(funcd__api_ctx *c, const cJSON *spec, const void *unused);
int funcd__api_validate_functionconfig_spec(funcd__api_ctx *c, const cJSON *spec,
                                            const void *unused);
int funcd__api_validate_secret(funcd__api_ctx *c, const cJSON *obj);
/* Whether `s` may be a key of a Secret's data (1 to 253 of [-._A-Za-z0-9],
 * not "." or ".."). */
int funcd__api_is_secret_key(const char *s);
int funcd__api_validate_eventsource_spec(funcd__api_ctx *c, const cJSON *spec, const void *unused);
/* A KVStore's spec (validate_kvstore.c). */
int funcd__api_validate_kvstore_spec(funcd__api_ctx *c, const cJSON *spec, const void *unused);
/* An EgressPolicy's spec (validate_egresspolicy.c). */
int funcd__api_validate_egresspolicy_spec(funcd__api_ctx *c, const cJSON *spec, const void *unused);
/* A Site's spec (validate_site.c). */
int funcd__api_validate_site_spec(funcd__api_ctx *c, const cJSON *spec, const void *unused);
/* A spec.source of a Function or a Site: exactly one of path, bundle, image
 * or git (validate_function.c). */
int funcd__api_check_source(funcd__api_ctx *c, const cJSON *item, const void *unused);
/* A Function's spec.edge (validate_edge.c). */
int funcd__api_check_edge(funcd__api_ctx *c, const cJSON *item, const void *unused);
int funcd__api_normalize_secret(cJSON *obj);
/* A Workflow's spec, and a Function's spec.contract (validate_workflow.c). */
int funcd__api_validate_workflow_spec(funcd__api_ctx *c, const cJSON *spec, const void *unused);
int funcd__api_check_contract(funcd__api_ctx *c, const cJSON *item, const void *unused);

/* ---- base64 (standard alphabet, padded) ------------------------------- */

/* Validates strictly; *out is the decoded length. FUNCD_EINVAL if bad. */
int funcd__api_base64_decoded_len(const char *s, size_t len, size_t *out);
/* Decodes validated input into `out` (room for the decoded length). */
void funcd__api_base64_decode(const char *s, size_t len, unsigned char *out);
int funcd__api_base64_encode(const void *data, size_t len, funcd_buf *out);

/* ---- decoding ------------------------------------------------------------ */

/* Called for each document root of a stream, in order. Takes ownership of
 * `doc` (NULL for an empty document). `line` is 1-based, 0 if unknown. */
typedef int (*funcd__api_doc_fn)(cJSON *doc, size_t line, funcd_api_error *err, void *payload);

/* Parses a YAML stream, calling `on_doc` per document. Each document is
 * bounded to `max_doc_bytes`. */
int funcd__api_yaml_decode(const char *buf, size_t len, size_t max_doc_bytes,
                           funcd__api_doc_fn on_doc, void *payload, funcd_api_error *err);

/*
 * How a plain (unquoted) YAML scalar reads under the YAML 1.2 core schema:
 * null, bool, number (finite), or string. Shared by the decoder and by the
 * YAML writer, which must quote whatever would not read back as a string.
 */
typedef enum {
    FUNCD__API_PLAIN_STRING,
    FUNCD__API_PLAIN_NULL,
    FUNCD__API_PLAIN_BOOL,
    FUNCD__API_PLAIN_NUMBER,
    FUNCD__API_PLAIN_NONFINITE, /* .inf, .nan, or a number too large for a double */
} funcd__api_plain_type;

funcd__api_plain_type funcd__api_resolve_plain(const char *s, size_t len, int *boolean,
                                               double *number);

/* strtod in the C locale, whatever the process locale says. */
double funcd__api_strtod(const char *s);

/* Whether a double is a whole number; without libm, which the library does
 * not link. Every double of magnitude 2^53 or more is whole. */
static inline int funcd__api_is_integral(double d)
{
    double magnitude = d < 0 ? -d : d;
    return __builtin_isfinite(d) &&
           (magnitude >= 9007199254740992.0 || (double)(int64_t)d == d);
}

/* Length of the valid UTF-8 sequence at s (1..4), 0 if invalid. */
size_t funcd__api_utf8_seq(const unsigned char *s, size_t avail, uint32_t *cp);

#endif
