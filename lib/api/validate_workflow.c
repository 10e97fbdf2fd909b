/*
 * Validation of Workflow specs (docs/workflows.md): the shape of each step,
 * then what ties the steps together: unique names, dependsOn naming other
 * steps, no cycle, and every JSONPath and condition naming only what the
 * run document holds when the step runs (the input, the item of a forEach,
 * and the outputs of the steps it depends on, directly or not).
 *
 * Whether each function exists, and whether typed edges fit, needs the
 * store: the control plane checks that at admission (lib/controlplane).
 */
#include <stdio.h>
#include <string.h>

#include "api/internal.h"
#include "api/jsonpath.h"
#include "api/jsonschema.h"

#define MAX_STEPS FUNCD_API_WORKFLOW_MAX_STEPS
#define MAX_DEPENDS 64

static const funcd__api_range attempts_range = {1, 100}, concurrency_range = {1, 1000},
                              path_len = {1, FUNCD_JSONPATH_MAX_TEXT},
                              condition_len = {1, FUNCD_CONDITION_MAX_TEXT},
                              step_timeout_ms = {1, 24 * 3600 * 1000LL},
                              backoff_ms = {0, 3600 * 1000LL};

static int check_path(funcd__api_ctx *c, const cJSON *item, int allow_all)
{
    char why[256];
    funcd_jsonpath p;
    int rc = funcd__api_check_string(c, item, &path_len);
    if (rc < 0)
        return rc;
    if (funcd_jsonpath_parse(item->valuestring, allow_all, &p, why, sizeof(why)) < 0)
        return funcd__api_fail(c, "is not a JSONPath of the supported subset: %s", why);
    return 0;
}

static int check_value_path(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return check_path(c, item, 0);
}

static int check_list_path(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return check_path(c, item, 1);
}

static int check_condition(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    char why[256];
    int rc = funcd__api_check_string(c, item, &condition_len);
    if (rc < 0)
        return rc;
    if (funcd_condition_eval(item->valuestring, NULL, NULL, NULL, NULL, why, sizeof(why)) < 0)
        return funcd__api_fail(c, "is not a valid condition: %s", why);
    return 0;
}

static int check_depends(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    static const size_t max = MAX_DEPENDS;
    return funcd__api_check_string_array(c, item, &max);
}

static const funcd__api_field retry_fields[] = {
    {"attempts", 0, funcd__api_check_int, &attempts_range},
    {"backoff", 0, funcd__api_check_duration, &backoff_ms},
};

static int check_retry(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return FUNCD__API_CHECK_OBJECT(c, item, retry_fields);
}

static const funcd__api_field step_fields[] = {
    {"name", 1, funcd__api_check_dns_label, NULL},
    {"function", 1, funcd__api_check_dns_label, NULL},
    {"input", 0, check_value_path, NULL},
    {"dependsOn", 0, check_depends, NULL},
    {"retry", 0, check_retry, NULL},
    {"timeout", 0, funcd__api_check_duration, &step_timeout_ms},
    {"forEach", 0, check_list_path, NULL},
    {"maxConcurrency", 0, funcd__api_check_int, &concurrency_range},
    {"when", 0, check_condition, NULL},
};

static int check_step(funcd__api_ctx *c, const cJSON *step)
{
    int rc = FUNCD__API_CHECK_OBJECT(c, step, step_fields);
    if (rc == 0 && funcd__api_member(step, "maxConcurrency") && !funcd__api_member(step, "forEach")) {
        size_t old = funcd__api_push_field(c, "maxConcurrency");
        rc = funcd__api_fail(c, "applies to a forEach step only");
        funcd__api_pop(c, old);
    }
    return rc;
}

static int check_steps(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (!cJSON_IsArray(item) || !item->child)
        return funcd__api_fail(c, "must be a non-empty list of steps");
    if (cJSON_GetArraySize(item) > MAX_STEPS)
        return funcd__api_fail(c, "must have at most %d steps", MAX_STEPS);
    size_t i = 0;
    for (const cJSON *s = item->child; s; s = s->next, i++) {
        size_t old = funcd__api_push_index(c, i);
        int rc = check_step(c, s);
        if (rc < 0)
            return rc;
        funcd__api_pop(c, old);
    }
    return 0;
}

static int check_schema_field(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    char where[128], why[256];
    if (funcd_schema_check(item, where, sizeof(where), why, sizeof(why)) < 0) {
        size_t old = where[0] ? funcd__api_push_field(c, where) : c->len;
        int rc = funcd__api_fail(c, "%s", why);
        funcd__api_pop(c, old);
        return rc;
    }
    return 0;
}

static const funcd__api_field contract_fields[] = {
    {"input", 0, check_schema_field, NULL},
    {"output", 0, check_schema_field, NULL},
};

int funcd__api_check_contract(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return FUNCD__API_CHECK_OBJECT(c, item, contract_fields);
}

static const funcd__api_field input_fields[] = {
    {"schema", 0, check_schema_field, NULL},
};

static int check_input(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return FUNCD__API_CHECK_OBJECT(c, item, input_fields);
}

static const funcd__api_field spec_fields[] = {
    {"input", 0, check_input, NULL},
    {"steps", 1, check_steps, NULL},
    {"output", 0, check_value_path, NULL},
};

/* ---- the steps together ---------------------------------------------------- */

typedef struct graph {
    size_t n;
    const cJSON *step[MAX_STEPS];
    const char *name[MAX_STEPS];
    unsigned char dep[MAX_STEPS][MAX_STEPS]; /* dep[a][b]: a depends on b, directly */
    unsigned char reach[MAX_STEPS][MAX_STEPS]; /* a depends on b, directly or not */
} graph;

static int index_of(const graph *g, const char *name)
{
    for (size_t i = 0; i < g->n; i++)
        if (strcmp(g->name[i], name) == 0)
            return (int)i;
    return -1;
}

/* Depth-first: 0 unvisited, 1 on the stack, 2 done. On a cycle, `cycle`
 * gets "a -> b -> a". */
static int find_cycle(const graph *g, size_t at, unsigned char *state, size_t *stack,
                      size_t depth, char *cycle, size_t len)
{
    state[at] = 1;
    stack[depth] = at;
    for (size_t b = 0; b < g->n; b++) {
        if (!g->dep[at][b])
            continue;
        if (state[b] == 1) {
            size_t from = 0, used = 0;
            while (stack[from] != b)
                from++;
            for (size_t k = from; k <= depth && used < len; k++)
                used += (size_t)snprintf(cycle + used, len - used, "%s -> ", g->name[stack[k]]);
            if (used < len)
                snprintf(cycle + used, len - used, "%s", g->name[b]);
            return 1;
        }
        if (state[b] == 0 && find_cycle(g, b, state, stack, depth + 1, cycle, len))
            return 1;
    }
    state[at] = 2;
    return 0;
}

/* What a path may name from where it is used: `self` is the step (-1 for
 * spec.output, which sees every step), `for_each` whether $.item exists. */
typedef struct ref_ctx {
    const graph *g;
    int self;
    int for_each;
} ref_ctx;

static int check_reference(const funcd_jsonpath *p, void *arg, char *why, size_t why_len)
{
    const ref_ctx *r = arg;
    const char *root = p->n && p->seg[0].kind == FUNCD_JP_MEMBER ? p->seg[0].name : "";
    if (strcmp(root, "input") == 0)
        return 0;
    if (strcmp(root, "item") == 0 || strcmp(root, "index") == 0) {
        if (r->for_each)
            return 0;
        snprintf(why, why_len, "$.%s exists only in a step with forEach", root);
        return -1;
    }
    if (strcmp(root, "steps") != 0) {
        snprintf(why, why_len, "a path starts at $.input, $.steps.NAME.output%s",
                 r->for_each ? ", $.item or $.index" : "");
        return -1;
    }
    if (p->n < 2 || p->seg[1].kind != FUNCD_JP_MEMBER) {
        snprintf(why, why_len, "$.steps must be followed by a step's name");
        return -1;
    }
    int target = index_of(r->g, p->seg[1].name);
    if (target < 0) {
        snprintf(why, why_len, "names the unknown step \"%s\"", p->seg[1].name);
        return -1;
    }
    if (r->self >= 0 && !r->g->reach[r->self][target]) {
        snprintf(why, why_len, "names step \"%s\", which step \"%s\" does not depend on "
                 "(add it to dependsOn)", p->seg[1].name, r->g->name[r->self]);
        return -1;
    }
    if (p->n < 3 || p->seg[2].kind != FUNCD_JP_MEMBER || strcmp(p->seg[2].name, "output") != 0) {
        snprintf(why, why_len, "a step's part of the run document is $.steps.%s.output",
                 p->seg[1].name);
        return -1;
    }
    return 0;
}

static int check_path_refs(funcd__api_ctx *c, const cJSON *obj, const char *field, int allow_all,
                           const ref_ctx *r)
{
    const char *text = cJSON_GetStringValue(funcd__api_member(obj, field));
    if (!text)
        return 0;
    size_t old = funcd__api_push_field(c, field);
    char why[256];
    funcd_jsonpath p;
    int rc = 0;
    if (funcd_jsonpath_parse(text, allow_all, &p, why, sizeof(why)) < 0 ||
        check_reference(&p, (void *)r, why, sizeof(why)) < 0)
        rc = funcd__api_fail(c, "%s", why);
    funcd__api_pop(c, old);
    return rc;
}

static int check_graph(funcd__api_ctx *c, const cJSON *spec)
{
    graph local, *gp = &local; /* about 9 KB */
    memset(gp, 0, sizeof(*gp));
    const cJSON *steps = funcd__api_member(spec, "steps");
    size_t old = funcd__api_push_field(c, "steps");
    for (const cJSON *s = steps->child; s; s = s->next) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s, "name"));
        if (index_of(gp, name) >= 0) {
            funcd__api_push_index(c, gp->n);
            funcd__api_push_field(c, "name");
            return funcd__api_fail(c, "step \"%s\" is named twice; step names are unique", name);
        }
        gp->step[gp->n] = s;
        gp->name[gp->n++] = name;
    }
    for (size_t a = 0; a < gp->n; a++) {
        const cJSON *deps = funcd__api_member(gp->step[a], "dependsOn");
        size_t j = 0;
        for (const cJSON *d = deps ? deps->child : NULL; d; d = d->next, j++) {
            int b = index_of(gp, d->valuestring);
            if (b < 0 || (size_t)b == a) {
                funcd__api_push_index(c, a);
                funcd__api_push_field(c, "dependsOn");
                funcd__api_push_index(c, j);
                return b < 0 ? funcd__api_fail(c, "names the unknown step \"%s\"", d->valuestring)
                             : funcd__api_fail(c, "a step cannot depend on itself");
            }
            gp->dep[a][b] = 1;
        }
    }
    unsigned char state[MAX_STEPS] = {0};
    size_t stack[MAX_STEPS];
    char cycle[512];
    for (size_t a = 0; a < gp->n; a++) {
        if (state[a] == 0 && find_cycle(gp, a, state, stack, 0, cycle, sizeof(cycle))) {
            funcd__api_push_index(c, a);
            funcd__api_push_field(c, "dependsOn");
            return funcd__api_fail(c, "the steps form a cycle: %s", cycle);
        }
    }
    /* reach: the transitive closure (at most MAX_STEPS steps) */
    memcpy(gp->reach, gp->dep, sizeof(gp->reach));
    for (size_t k = 0; k < gp->n; k++)
        for (size_t a = 0; a < gp->n; a++)
            if (gp->reach[a][k])
                for (size_t b = 0; b < gp->n; b++)
                    if (gp->reach[k][b])
                        gp->reach[a][b] = 1;
    for (size_t a = 0; a < gp->n; a++) {
        const cJSON *s = gp->step[a];
        int for_each = funcd__api_member(s, "forEach") != NULL;
        ref_ctx plain = {gp, (int)a, 0}, inner = {gp, (int)a, for_each};
        size_t at = funcd__api_push_index(c, a);
        int rc = check_path_refs(c, s, "forEach", 1, &plain);
        if (rc == 0)
            rc = check_path_refs(c, s, "input", 0, &inner);
        const char *when = cJSON_GetStringValue(funcd__api_member(s, "when"));
        char why[256];
        if (rc == 0 && when &&
            funcd_condition_eval(when, NULL, NULL, check_reference, &plain, why, sizeof(why)) < 0) {
            funcd__api_push_field(c, "when");
            rc = funcd__api_fail(c, "%s", why);
        }
        if (rc < 0)
            return rc;
        funcd__api_pop(c, at);
    }
    funcd__api_pop(c, old);
    ref_ctx all = {gp, -1, 0};
    return check_path_refs(c, spec, "output", 0, &all);
}

int funcd__api_validate_workflow_spec(funcd__api_ctx *c, const cJSON *spec, const void *unused)
{
    int rc = FUNCD__API_CHECK_OBJECT(c, spec, spec_fields);
    return rc < 0 ? rc : check_graph(c, spec);
}
