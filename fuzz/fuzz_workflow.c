/*
 * Fuzz target for Workflows: any bytes, decoded as a JSON or YAML document,
 * go through Workflow validation, and the JSON Schema subset (checked,
 * validated against, assigned to itself); the same bytes as a string go
 * through the JSONPath and condition parsers, evaluated against the
 * document. What must hold for every input:
 *   - a schema the subset reads is assignable to itself;
 *   - a path that parses names nothing or a value inside the document;
 *   - a condition that parses without a document evaluates with one.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/jsonpath.h"
#include "api/jsonschema.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_workflow: %s\n", what);
        abort();
    }
}

static int inside(const cJSON *node, const cJSON *target)
{
    if (node == target)
        return 1;
    for (const cJSON *c = node ? node->child : NULL; c; c = c->next)
        if (inside(c, target))
            return 1;
    return 0;
}

static void strings(const uint8_t *data, size_t size, const cJSON *doc)
{
    char text[FUNCD_CONDITION_MAX_TEXT + 2];
    size_t n = size < sizeof(text) - 1 ? size : sizeof(text) - 1;
    memcpy(text, data, n);
    text[n] = '\0';
    char why[256];
    funcd_jsonpath p;
    for (int all = 0; all < 2; all++) {
        if (funcd_jsonpath_parse(text, all, &p, why, sizeof(why)) == 0) {
            check(p.n <= FUNCD_JSONPATH_MAX_SEGMENTS, "too many segments");
            const cJSON *v = funcd_jsonpath_get(&p, doc);
            check(!v || inside(doc, v), "a path named a value outside the document");
        }
    }
    int syntax = funcd_condition_eval(text, NULL, NULL, NULL, NULL, why, sizeof(why));
    int result = -1;
    int evaluated = funcd_condition_eval(text, doc, &result, NULL, NULL, why, sizeof(why));
    check(syntax == evaluated, "a condition parses alone but not with a document, or back");
    check(evaluated < 0 || result == 0 || result == 1, "a condition is neither true nor false");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    funcd_api_error err;
    cJSON *doc = NULL;
    if (funcd_api_decode((const char *)data, size, &doc, &err) == 0) {
        funcd_api_validate(funcd_kind_by_kind("Workflow"), doc, &err);
        char where[128], why[256];
        if (funcd_schema_check(doc, where, sizeof(where), why, sizeof(why)) == 0) {
            check(funcd_schema_assignable(doc, doc, where, sizeof(where), why, sizeof(why)) == 0,
                  "a schema is not assignable to itself");
            funcd_schema_validate(doc, doc, where, sizeof(where), why, sizeof(why));
        }
    }
    strings(data, size, doc);
    cJSON_Delete(doc);
    return 0;
}
