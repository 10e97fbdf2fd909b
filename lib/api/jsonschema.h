/*
 * The JSON Schema subset of typed edges (docs/workflows.md, "Contracts"):
 *   type        a name or a list of names: object, array, string, number,
 *               integer (a whole number), boolean, null
 *   properties  an object of schemas
 *   required    a list of property names
 *   items       one schema for every element
 *   enum        a list of JSON values
 * Every other keyword (description, format, minimum, ...) is accepted and
 * not checked. A missing keyword constrains nothing.
 */
#ifndef FUNCD_API_JSONSCHEMA_H
#define FUNCD_API_JSONSCHEMA_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "api/jsonpath.h"

#define FUNCD_SCHEMA_MAX_DEPTH 32

/* Whether `schema` is one the subset reads: 0, or -1 with `where` (a dotted
 * path inside the schema, "" for its root) and `why`. */
int funcd_schema_check(const cJSON *schema, char *where, size_t where_len, char *why,
                       size_t why_len);

/* Whether `value` matches `schema`: 0, or -1 with `where` (the value's
 * path, "" for the root) and `why`. */
int funcd_schema_validate(const cJSON *schema, const cJSON *value, char *where, size_t where_len,
                          char *why, size_t why_len);

/* Whether every value `producer` allows is one `consumer` takes, as far as
 * the subset tells: 0, or -1 with `where` (the first incompatible
 * property, "" for the root) and `why`. */
int funcd_schema_assignable(const cJSON *producer, const cJSON *consumer, char *where,
                            size_t where_len, char *why, size_t why_len);

/* The schema of what `path` (its segments from `from` on) names inside a
 * value of `schema`: through properties for members, items for indexes and
 * [*]. NULL when the schema does not say (no check is possible). */
const cJSON *funcd_schema_narrow(const cJSON *schema, const funcd_jsonpath *path, size_t from);

#endif
