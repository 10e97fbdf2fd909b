/*
 * Resource kinds of funcd.dev/v1: decoding (JSON or YAML), validation with
 * errors that name the field, normalization, and YAML output.
 *
 * Objects are cJSON trees shaped like Kubernetes objects:
 *   apiVersion, kind, metadata{namespace,name,uid,resourceVersion,generation,
 *   creationTimestamp,labels,annotations}, spec, status (Secret: type, data,
 *   stringData instead of spec).
 */
#ifndef FUNCD_API_API_H
#define FUNCD_API_API_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "funcd/common.h"
#include "util/buf.h"

#define FUNCD_API_GROUP "funcd.dev"
#define FUNCD_API_VERSION "funcd.dev/v1"

/* Bounds on user input. */
#define FUNCD_API_MAX_OBJECT_BYTES (1024 * 1024) /* one encoded object */
#define FUNCD_API_MAX_NAME 63                   /* DNS-1123 label */
#define FUNCD_API_MAX_DEPTH 64                  /* JSON/YAML nesting */
#define FUNCD_API_WORKFLOW_MAX_STEPS 128        /* spec.steps of a Workflow */

/* Which field is wrong and why. `field` is a dotted path such as
 * "spec.scaling.maxReplicas" or "metadata.labels[app]"; empty when the
 * document as a whole is bad (not JSON/YAML). */
typedef struct funcd_api_error {
    char field[256];
    char message[512];
} funcd_api_error;

typedef struct funcd_kind {
    const char *kind;       /* "Function" */
    const char *list_kind;  /* "FunctionList" */
    const char *plural;     /* "functions" */
    const char *singular;   /* "function" */
    const char *short_name; /* "fn" (or NULL) */
    int has_spec;           /* 0 for Secret (type/data/stringData) */
} funcd_kind;

/* NULL-terminated table of every kind. */
extern const funcd_kind *const funcd_kinds[];

/* By plural ("functions"): for URL paths. NULL if unknown. */
const funcd_kind *funcd_kind_by_plural(const char *plural);
/* By Kind ("Function"): for decoded objects. NULL if unknown. */
const funcd_kind *funcd_kind_by_kind(const char *kind);
/* By anything a CLI user types: singular, plural, short name or Kind,
 * case-insensitive ("fn", "Functions", "functionconfig"). NULL if unknown. */
const funcd_kind *funcd_kind_lookup(const char *name);

/*
 * Decodes one document: JSON when the first non-space byte is '{', else YAML
 * (one document). Depth and size are bounded. On error returns FUNCD_EINVAL
 * and fills `err` (message says line/column where known).
 */
int funcd_api_decode(const char *buf, size_t len, cJSON **out, funcd_api_error *err);
/* The same with another size bound (KRM ResourceLists may reach the
 * function runner's message limit). */
int funcd_api_decode_max(const char *buf, size_t len, size_t max_bytes, cJSON **out,
                         funcd_api_error *err);

/*
 * Decodes a stream: a JSON object, a JSON array of objects, a sequence of JSON
 * objects, or a multi-document YAML stream ("---"). Empty documents are
 * skipped; a document of `kind: List` contributes its `items`. `*out` is a
 * cJSON array of objects (possibly empty).
 */
int funcd_api_decode_all(const char *buf, size_t len, cJSON **out, funcd_api_error *err);

/*
 * Validates a user-supplied object of `kind` (create or replace):
 * apiVersion must be funcd.dev/v1, kind must match, metadata.name a DNS-1123
 * label, namespace (if given) a DNS-1123 label, labels/annotations maps of
 * strings with bounded sizes, server-set metadata accepted but ignored,
 * unknown fields rejected anywhere, spec checked per kind. `status` is
 * allowed and ignored. Returns 0 or FUNCD_EINVAL with `err` naming the field.
 */
int funcd_api_validate(const funcd_kind *kind, const cJSON *obj, funcd_api_error *err);

/* Normalizes a validated object in place before storage: for Secret, merges
 * stringData into data (base64) and removes stringData. 0 or FUNCD_ENOMEM. */
int funcd_api_normalize(const funcd_kind *kind, cJSON *obj);

/* Durations: funcd_parse_duration_ms() is public, in funcd/common.h. */
/* Kubernetes quantities "256Mi", "1Gi", "512", "1k", "1M" -> bytes. */
int funcd_parse_quantity(const char *s, uint64_t *out);
/* Whether `s` may name an environment variable: letters, digits and '_',
 * not starting with a digit. */
int funcd_api_env_name_ok(const char *s);
/* CPU "1", "0.5", "500m" -> millicores. */
int funcd_parse_cpu_millis(const char *s, uint64_t *out);

/* The largest resourceVersion: store revisions are signed 64-bit (SQLite's
 * INTEGER), so a bigger number names no revision. */
#define FUNCD_API_MAX_REVISION INT64_MAX
/* A resourceVersion of `len` bytes: decimal digits only (no sign, space or
 * suffix), at most FUNCD_API_MAX_REVISION. 0, or FUNCD_EINVAL. */
int funcd_api_parse_revision(const char *s, size_t len, uint64_t *out);

/* ---- label selectors (equality-based, as Kubernetes') ----------------------- */

#define FUNCD_SELECTOR_MAX_TERMS 16

typedef struct funcd_label_term {
    char key[320]; /* [prefix/]name */
    char value[64];
    enum { FUNCD_SEL_EQ, FUNCD_SEL_NE, FUNCD_SEL_EXISTS, FUNCD_SEL_ABSENT } op;
} funcd_label_term;

typedef struct funcd_label_selector {
    size_t n;
    funcd_label_term terms[FUNCD_SELECTOR_MAX_TERMS];
} funcd_label_selector;

/* "k=v,k==v,k!=v,k,!k": every term must hold. "" selects everything.
 * 0, or FUNCD_EINVAL with err->message saying what is wrong. */
int funcd_label_selector_parse(funcd_label_selector *out, const char *text,
                               funcd_api_error *err);
/* Whether the object's metadata.labels satisfy `sel`. */
int funcd_label_selector_matches(const funcd_label_selector *sel, const cJSON *obj);

/* Appends `obj` as a block-style YAML document (no leading "---"). */
int funcd_api_to_yaml(const cJSON *obj, funcd_buf *out);

#endif
