/*
 * Typed edges: what a step receives must be what its function's contract
 * takes. An edge runs from a producer (the run's input, or a step's
 * function output) through a JSONPath to a consumer (a step's function
 * input); a forEach step receives each item of the list its forEach names,
 * and its own output is the list of its items' outputs.
 */
#include <stdio.h>
#include <string.h>

#include "api/jsonpath.h"
#include "api/jsonschema.h"
#include "funcd/sys/error.h"
#include "objects/objects.h"
#include "source/resolver.h"
#include "workflow/workflow.h"

#define MAX_STEPS 64

typedef struct edge_ctx {
    funcd_store *store;
    const char *ns;
    const cJSON *spec;
    size_t n;
    const cJSON *step[MAX_STEPS];
    cJSON *function[MAX_STEPS]; /* the stored Function of each step */
} edge_ctx;

static const cJSON *contract(const edge_ctx *e, size_t i, const char *which)
{
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(e->function[i], "spec");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(spec, "contract"), which);
    return cJSON_IsObject(s) ? s : NULL;
}

/* An image Function without spec.contract takes its image's label
 * dev.funcd.contract, once a node pulled the image (status.source.digest
 * names it): put in the copy's spec.contract, it counts exactly the same. */
static void image_contract(funcd_store *s, cJSON *function)
{
    cJSON *spec = cJSON_GetObjectItemCaseSensitive(function, "spec");
    if (!cJSON_IsObject(spec) || cJSON_GetObjectItemCaseSensitive(spec, "contract") ||
        !cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(spec, "source"), "image")))
        return;
    const char *digest = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(function, "status"),
                                         "source"),
        "digest"));
    cJSON *c = funcd_sources_image_contract(s, digest);
    if (c)
        cJSON_AddItemToObject(spec, "contract", c);
}

static int step_index(const edge_ctx *e, const char *name)
{
    for (size_t i = 0; i < e->n; i++)
        if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e->step[i], "name")),
                   name) == 0)
            return (int)i;
    return -1;
}

/* The schema of what `text` names in the run document as step `self` sees
 * it, with the producer's name; NULL when nothing is declared. `wrap`
 * holds the list schema of a forEach step's output. */
static const cJSON *producer_schema(const edge_ctx *e, int self, const char *text, cJSON *wrap,
                                    const char **producer, int depth)
{
    funcd_jsonpath p;
    if (depth > 2 || funcd_jsonpath_parse(text, 1, &p, NULL, 0) < 0 || p.n == 0)
        return NULL;
    const char *root = p.seg[0].name;
    if (strcmp(root, "input") == 0) {
        *producer = "input";
        const cJSON *in = cJSON_GetObjectItemCaseSensitive(e->spec, "input");
        return funcd_schema_narrow(cJSON_GetObjectItemCaseSensitive(in, "schema"), &p, 1);
    }
    if (strcmp(root, "item") == 0 && self >= 0) {
        const char *each = cJSON_GetStringValue(
            cJSON_GetObjectItemCaseSensitive(e->step[self], "forEach"));
        funcd_jsonpath fp;
        cJSON *inner = cJSON_CreateObject();
        const cJSON *list = each && inner && funcd_jsonpath_parse(each, 1, &fp, NULL, 0) == 0
                                ? producer_schema(e, self, each, inner, producer, depth + 1)
                                : NULL;
        /* a final [*] already names the element; else the list's items do */
        const cJSON *elem = !list                                  ? NULL
                            : fp.n && fp.seg[fp.n - 1].kind == FUNCD_JP_ALL ? list
                                : cJSON_GetObjectItemCaseSensitive(list, "items");
        const cJSON *out = elem ? funcd_schema_narrow(elem, &p, 1) : NULL;
        /* `inner` may hold what `out` points into: it lives as long as `wrap` */
        if (inner)
            cJSON_AddItemToObject(wrap, "inner", inner);
        return out;
    }
    if (strcmp(root, "steps") != 0 || p.n < 3)
        return NULL;
    int from = step_index(e, p.seg[1].name);
    if (from < 0)
        return NULL;
    *producer = p.seg[1].name;
    const cJSON *out = contract(e, (size_t)from, "output");
    if (!out)
        return NULL;
    if (cJSON_GetObjectItemCaseSensitive(e->step[from], "forEach")) {
        cJSON *list = cJSON_AddObjectToObject(wrap, "list");
        cJSON_AddStringToObject(list, "type", "array");
        cJSON_AddItemReferenceToObject(list, "items", (cJSON *)out);
        out = list;
    }
    return funcd_schema_narrow(out, &p, 3);
}

static int check_step_edge(edge_ctx *e, size_t i, char *field, size_t field_len, char *why,
                           size_t why_len)
{
    const cJSON *step = e->step[i];
    const cJSON *takes = contract(e, i, "input");
    if (!takes)
        return 0;
    const char *input = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(step, "input"));
    int explicit_input = input != NULL;
    if (!input)
        input = cJSON_GetObjectItemCaseSensitive(step, "forEach") ? "$.item" : "$.input";
    cJSON *wrap = cJSON_CreateObject();
    const char *producer = NULL;
    const cJSON *gives = wrap ? producer_schema(e, (int)i, input, wrap, &producer, 0) : NULL;
    char where[128], reason[256];
    int rc = 0;
    if (gives && funcd_schema_assignable(gives, takes, where, sizeof(where), reason,
                                         sizeof(reason)) < 0) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(step, "name"));
        snprintf(field, field_len, "spec.steps[%zu].%s", i,
                 explicit_input ? "input" : strcmp(input, "$.item") == 0 ? "forEach" : "name");
        snprintf(why, why_len, "edge %s -> %s (%s): %s%s%s", producer, name, input,
                 where[0] ? "property " : "", where, where[0] ? ": " : "");
        size_t used = strlen(why);
        snprintf(why + used, why_len - used, "%s", reason);
        rc = FUNCD_EINVAL;
    }
    cJSON_Delete(wrap);
    return rc;
}

int funcd_workflow_check(funcd_store *s, const char *ns, const cJSON *workflow, char *field,
                         size_t field_len, char *why, size_t why_len, const char **reason)
{
    edge_ctx e = {.store = s, .ns = ns};
    e.spec = cJSON_GetObjectItemCaseSensitive(workflow, "spec");
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(e.spec, "steps");
    const funcd_kind *fn = funcd_kind_by_kind("Function");
    int rc = 0;
    *reason = "ContractMismatch";
    for (const cJSON *st = cJSON_IsArray(steps) ? steps->child : NULL; st && e.n < MAX_STEPS;
         st = st->next) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(st, "function"));
        e.step[e.n] = st;
        rc = name ? funcd_objects_get(s, fn, ns, name, &e.function[e.n], NULL) : FUNCD_EINVAL;
        e.n++;
        if (rc == 0)
            image_contract(s, e.function[e.n - 1]);
        if (rc == FUNCD_ENOTFOUND || rc == FUNCD_EINVAL) {
            snprintf(field, field_len, "spec.steps[%zu].function", e.n - 1);
            snprintf(why, why_len, "function \"%s\" does not exist in namespace \"%s\"",
                     name ? name : "", ns);
            *reason = "FunctionNotFound";
            rc = FUNCD_EINVAL;
        }
        if (rc < 0)
            break;
    }
    for (size_t i = 0; rc == 0 && i < e.n; i++)
        rc = check_step_edge(&e, i, field, field_len, why, why_len);
    for (size_t i = 0; i < e.n; i++)
        cJSON_Delete(e.function[i]);
    return rc;
}
