/* The Workflow kind: validation naming the field, the JSONPath and condition
 * subsets, and the JSON Schema subset of typed edges. */
#include <stdlib.h>

#include "api/jsonpath.h"
#include "api/jsonschema.h"
#include "api_helpers.h"

#define WF(steps)                                                                                  \
    "apiVersion: funcd.dev/v1\nkind: Workflow\nmetadata: {name: order}\nspec:\n  steps:\n" steps

TEST(valid_workflows)
{
    VALID("Workflow", WF("  - {name: fetch, function: fetch-order}\n"));
    VALID("Workflow",
          "apiVersion: funcd.dev/v1\nkind: Workflow\nmetadata: {name: order}\nspec:\n"
          "  input: {schema: {type: object, required: [id], properties: {id: {type: string}}}}\n"
          "  steps:\n"
          "    - {name: fetch, function: fetch-order, input: \"$.input\"}\n"
          "    - name: price\n      function: price\n      dependsOn: [fetch]\n"
          "      input: \"$.steps.fetch.output\"\n      retry: {attempts: 3, backoff: 2s}\n"
          "      timeout: 10s\n"
          "    - name: notify\n      function: notify\n      dependsOn: [price]\n"
          "      forEach: \"$.steps.price.output.items[*]\"\n      maxConcurrency: 4\n"
          "      input: \"$.item\"\n"
          "      when: \"$.steps.price.output.total > 0 && !($.input.quiet == true)\"\n"
          "  output: \"$.steps.notify.output\"\n");
}

TEST(invalid_workflows)
{
    INVALID("Workflow", WF(""), "spec.steps", "required");
    INVALID("Workflow",
            "apiVersion: funcd.dev/v1\nkind: Workflow\nmetadata: {name: o}\nspec: {steps: []}\n",
            "spec.steps", "must be a non-empty list");
    INVALID("Workflow", WF("  - {name: a}\n"), "spec.steps[0].function", "required");
    INVALID("Workflow", WF("  - {name: a, function: f, extra: 1}\n"), "spec.steps[0].extra",
            "unknown field");
    INVALID("Workflow", WF("  - {name: a, function: f}\n  - {name: a, function: g}\n"),
            "spec.steps[1].name", "named twice");
    INVALID("Workflow", WF("  - {name: a, function: f, dependsOn: [b]}\n"),
            "spec.steps[0].dependsOn[0]", "unknown step \"b\"");
    INVALID("Workflow", WF("  - {name: a, function: f, dependsOn: [a]}\n"),
            "spec.steps[0].dependsOn[0]", "cannot depend on itself");
    INVALID("Workflow",
            WF("  - {name: a, function: f, dependsOn: [c]}\n"
               "  - {name: b, function: f, dependsOn: [a]}\n"
               "  - {name: c, function: f, dependsOn: [b]}\n"),
            "spec.steps[0].dependsOn", "cycle: a -> c -> b -> a");
    INVALID("Workflow", WF("  - {name: a, function: f, input: \"input\"}\n"),
            "spec.steps[0].input", "starts with '$'");
    INVALID("Workflow", WF("  - {name: a, function: f, input: \"$..x\"}\n"),
            "spec.steps[0].input", "recursive descent");
    INVALID("Workflow", WF("  - {name: a, function: f, input: \"$.input[?(@.x)]\"}\n"),
            "spec.steps[0].input", "filters");
    INVALID("Workflow", WF("  - {name: a, function: f, input: \"$.input[*]\"}\n"),
            "spec.steps[0].input", "only forEach");
    INVALID("Workflow", WF("  - {name: a, function: f, input: \"$.steps.b.output\"}\n"),
            "spec.steps[0].input", "unknown step \"b\"");
    INVALID("Workflow",
            WF("  - {name: a, function: f}\n"
               "  - {name: b, function: f, input: \"$.steps.a.output\"}\n"),
            "spec.steps[1].input", "does not depend on");
    INVALID("Workflow", WF("  - {name: a, function: f, input: \"$.item\"}\n"),
            "spec.steps[0].input", "only in a step with forEach");
    INVALID("Workflow", WF("  - {name: a, function: f, when: \"$.input.x >\"}\n"),
            "spec.steps[0].when", "not a valid condition");
    INVALID("Workflow", WF("  - {name: a, function: f, when: \"$.input.x = 1\"}\n"),
            "spec.steps[0].when", "not a valid condition");
    INVALID("Workflow", WF("  - {name: a, function: f, when: \"$.steps.z.output\"}\n"),
            "spec.steps[0].when", "unknown step \"z\"");
    INVALID("Workflow", WF("  - {name: a, function: f, maxConcurrency: 2}\n"),
            "spec.steps[0].maxConcurrency", "forEach step only");
    INVALID("Workflow", WF("  - {name: a, function: f, retry: {attempts: 0}}\n"),
            "spec.steps[0].retry.attempts", "between 1 and 100");
    INVALID("Workflow", WF("  - {name: a, function: F}\n"), "spec.steps[0].function",
            "DNS-1123");
    INVALID("Workflow",
            "apiVersion: funcd.dev/v1\nkind: Workflow\nmetadata: {name: o}\nspec:\n"
            "  input: {schema: {type: text}}\n  steps: [{name: a, function: f}]\n",
            "spec.input.schema.type", "must be one of object");
    INVALID("Workflow",
            "apiVersion: funcd.dev/v1\nkind: Workflow\nmetadata: {name: o}\nspec:\n"
            "  steps: [{name: a, function: f}]\n  output: \"$.steps.b.output\"\n",
            "spec.output", "unknown step \"b\"");
    INVALID("Function",
            "apiVersion: funcd.dev/v1\nkind: Function\nmetadata: {name: f}\nspec:\n"
            "  runtime: node\n  source: {path: /a}\n"
            "  contract: {input: {properties: {x: {type: [string, 3]}}}}\n",
            "spec.contract.input.properties.x.type", "must be one of");
    VALID("Function", "apiVersion: funcd.dev/v1\nkind: Function\nmetadata: {name: f}\nspec:\n"
                      "  runtime: node\n  source: {path: /a}\n"
                      "  contract: {input: {type: object}, output: {type: array, items: {}}}\n");
}

TEST(jsonpath)
{
    funcd_jsonpath p;
    char why[256];
    cJSON *doc = cJSON_Parse("{\"a\":{\"b\":[10,{\"c d\":\"x\"}]},\"n\":null}");
    CHECK(doc);
    CHECK_INT(funcd_jsonpath_parse("$.a.b[0]", 0, &p, why, sizeof(why)), 0);
    CHECK(cJSON_GetNumberValue(funcd_jsonpath_get(&p, doc)) == 10);
    CHECK_INT(funcd_jsonpath_parse("$.a.b[1][\"c d\"]", 0, &p, why, sizeof(why)), 0);
    CHECK_STR(cJSON_GetStringValue(funcd_jsonpath_get(&p, doc)), "x");
    CHECK_INT(funcd_jsonpath_parse("$", 0, &p, why, sizeof(why)), 0);
    CHECK(funcd_jsonpath_get(&p, doc) == doc);
    CHECK_INT(funcd_jsonpath_parse("$.a.b[*]", 1, &p, why, sizeof(why)), 0);
    CHECK(cJSON_IsArray(funcd_jsonpath_get(&p, doc)));
    CHECK_INT(funcd_jsonpath_parse("$.a.b[2]", 0, &p, why, sizeof(why)), 0);
    CHECK(funcd_jsonpath_get(&p, doc) == NULL);
    CHECK_INT(funcd_jsonpath_parse("$.a[*].b", 1, &p, why, sizeof(why)), -1);
    CHECK_CONTAINS(why, "last segment");
    CHECK_INT(funcd_jsonpath_parse("$.a[01]", 0, &p, why, sizeof(why)), -1);
    CHECK_INT(funcd_jsonpath_parse("$.a[\"x]", 0, &p, why, sizeof(why)), -1);
    CHECK_CONTAINS(why, "no closing quote");
    CHECK_INT(funcd_jsonpath_parse("$.1a", 0, &p, why, sizeof(why)), -1);
    CHECK_INT(funcd_jsonpath_parse("$.a b", 0, &p, why, sizeof(why)), -1);
    CHECK_CONTAINS(why, "unexpected ' '");
    cJSON_Delete(doc);
}

static int cond(const char *text, const char *json)
{
    cJSON *doc = cJSON_Parse(json);
    int r = -1;
    char why[256];
    if (funcd_condition_eval(text, doc, &r, NULL, NULL, why, sizeof(why)) < 0) {
        fprintf(stderr, "  condition %s: %s\n", text, why);
        r = -1;
    }
    cJSON_Delete(doc);
    return r;
}

TEST(conditions)
{
    const char *d = "{\"n\":3,\"s\":\"b\",\"t\":true,\"o\":{\"k\":[1,2]},\"z\":0,\"e\":\"\"}";
    CHECK_INT(cond("$.n > 0", d), 1);
    CHECK_INT(cond("$.n >= 3 && $.n <= 3", d), 1);
    CHECK_INT(cond("$.n < 3", d), 0);
    CHECK_INT(cond("$.s == \"b\"", d), 1);
    CHECK_INT(cond("$.s > \"a\"", d), 1);
    CHECK_INT(cond("$.s > 1", d), 0); /* mixed types: false */
    CHECK_INT(cond("$.o.k == [1,2]", d), -1); /* arrays are not literals of the subset */
    CHECK_INT(cond("$.o.k[1] == 2", d), 1);
    CHECK_INT(cond("$.t", d), 1);
    CHECK_INT(cond("!$.t", d), 0);
    CHECK_INT(cond("$.z || $.e || $.missing", d), 0);
    CHECK_INT(cond("$.missing == null", d), 1);
    CHECK_INT(cond("!($.n == 3) || $.s != \"b\"", d), 0);
    CHECK_INT(cond("($.n == 3)", d), 1);
    CHECK_INT(cond("$.n == 3.0", d), 1);
    CHECK_INT(cond("-1 < $.n", d), 1);
    CHECK_INT(cond("\"\\u0062\" == $.s", d), 1);
    CHECK_INT(cond("true && false", d), 0);
    char why[256];
    CHECK_INT(funcd_condition_eval("$.n > ", NULL, NULL, NULL, NULL, why, sizeof(why)), -1);
    CHECK_INT(funcd_condition_eval("$.n === 1", NULL, NULL, NULL, NULL, why, sizeof(why)), -1);
    CHECK_INT(funcd_condition_eval("($.n", NULL, NULL, NULL, NULL, why, sizeof(why)), -1);
    CHECK_CONTAINS(why, "expected ')'");
    CHECK_INT(funcd_condition_eval("01 == 1", NULL, NULL, NULL, NULL, why, sizeof(why)), -1);
    CHECK_INT(funcd_condition_eval("nulls", NULL, NULL, NULL, NULL, why, sizeof(why)), -1);
    char deep[200];
    memset(deep, '(', 100);
    snprintf(deep + 100, sizeof(deep) - 100, "1");
    CHECK_INT(funcd_condition_eval(deep, NULL, NULL, NULL, NULL, why, sizeof(why)), -1);
    CHECK_CONTAINS(why, "nested deeper");
}

static int assignable(const char *p, const char *c, char *where, char *why)
{
    cJSON *ps = cJSON_Parse(p), *cs = cJSON_Parse(c);
    int rc = funcd_schema_assignable(ps, cs, where, 128, why, 256);
    cJSON_Delete(ps);
    cJSON_Delete(cs);
    return rc;
}

TEST(schemas)
{
    char where[128], why[256];
    CHECK_INT(assignable("{\"type\":\"integer\"}", "{\"type\":\"number\"}", where, why), 0);
    CHECK_INT(assignable("{\"type\":\"number\"}", "{\"type\":\"integer\"}", where, why), -1);
    CHECK_INT(assignable("{}", "{}", where, why), 0);
    CHECK_INT(assignable("{}", "{\"type\":\"string\"}", where, why), -1);
    CHECK_INT(assignable("{\"type\":\"object\",\"required\":[\"a\"],\"properties\":{\"a\":"
                         "{\"type\":\"string\"},\"b\":{\"type\":\"number\"}}}",
                         "{\"type\":\"object\",\"required\":[\"a\"],\"properties\":{\"a\":"
                         "{\"type\":[\"string\",\"null\"]},\"b\":{\"type\":\"number\"}}}",
                         where, why),
              0);
    CHECK_INT(assignable("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}}}",
                         "{\"type\":\"object\",\"required\":[\"a\"]}", where, why),
              -1);
    CHECK_STR(where, "a");
    CHECK_CONTAINS(why, "required by the consumer");
    CHECK_INT(assignable("{\"type\":\"object\",\"properties\":{\"o\":{\"type\":\"object\","
                         "\"properties\":{\"total\":{\"type\":\"string\"}}}}}",
                         "{\"type\":\"object\",\"properties\":{\"o\":{\"type\":\"object\","
                         "\"properties\":{\"total\":{\"type\":\"number\"}}}}}",
                         where, why),
              -1);
    CHECK_STR(where, "o.total");
    CHECK_CONTAINS(why, "gives string, the consumer takes number");
    CHECK_INT(assignable("{\"enum\":[\"a\",\"b\"]}", "{\"enum\":[\"a\",\"b\",\"c\"]}", where, why),
              0);
    CHECK_INT(assignable("{\"enum\":[\"a\",\"d\"]}", "{\"enum\":[\"a\",\"b\"]}", where, why), -1);
    CHECK_CONTAINS(why, "\"d\"");
    CHECK_INT(assignable("{\"type\":\"string\"}", "{\"enum\":[\"a\"]}", where, why), -1);
    CHECK_INT(assignable("{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}",
                         "{\"type\":\"array\",\"items\":{\"type\":\"string\"}}", where, why),
              -1);
    CHECK_STR(where, "items");

    cJSON *s = cJSON_Parse("{\"type\":\"object\",\"required\":[\"id\"],\"properties\":{\"id\":"
                           "{\"type\":\"string\"},\"n\":{\"type\":\"array\",\"items\":{\"type\":"
                           "\"integer\"}}}}");
    cJSON *ok = cJSON_Parse("{\"id\":\"x\",\"n\":[1,2]}"), *bad = cJSON_Parse("{\"id\":\"x\","
                                                                              "\"n\":[1,2.5]}");
    cJSON *missing = cJSON_Parse("{\"n\":[]}");
    CHECK_INT(funcd_schema_validate(s, ok, where, 128, why, 256), 0);
    int rc = funcd_schema_validate(s, bad, where, 128, why, 256);
    int rc2 = funcd_schema_validate(s, missing, where + 0, 128, why, 256);
    funcd_jsonpath p;
    funcd_jsonpath_parse("$.x.n[*]", 1, &p, NULL, 0);
    const cJSON *narrow = funcd_schema_narrow(s, &p, 1);
    int narrowed_ok = narrow && strcmp(cJSON_GetStringValue(
                                           cJSON_GetObjectItem(narrow, "type")), "integer") == 0;
    cJSON_Delete(s);
    cJSON_Delete(ok);
    cJSON_Delete(bad);
    cJSON_Delete(missing);
    CHECK_INT(rc, -1);
    CHECK_INT(rc2, -1);
    CHECK_STR(where, "id");
    CHECK(narrowed_ok);
}

int main(void)
{
    RUN(valid_workflows);
    RUN(invalid_workflows);
    RUN(jsonpath);
    RUN(conditions);
    RUN(schemas);
    return HARNESS_END();
}
