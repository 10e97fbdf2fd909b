/* Validation of FunctionConfig specs (Porch's shape). */
#include <stdint.h>
#include <string.h>

#include "api/api.h"
#include "api/internal.h"
#include "funcd/common.h"

#define MAX_TAGS 256
#define MAX_PREFIXES 256

static const size_t max_tags = MAX_TAGS, max_prefixes = MAX_PREFIXES;
static const funcd__api_range image_len = {1, 4096};
static const funcd__api_range parallel = {1, INT32_MAX}, queue = {0, INT32_MAX};

static const funcd__api_field binary_fields[] = {
    {"tags", 0, funcd__api_check_string_array, &max_tags},
    {"path", 1, funcd__api_check_relpath, NULL},
};

static int check_binary_executor(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return FUNCD__API_CHECK_OBJECT(c, item, binary_fields);
}

/* The function runner honours the limits of the container named
 * "function" (docs/function-runner.md): they must be quantities. The rest
 * of templateOverrides is a pod template patch, whose shape is its
 * writer's: what the runner ignores it lists in the status. */
static int check_limit(funcd__api_ctx *c, const cJSON *limits, const char *name, int cpu)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(limits, name);
    uint64_t n = 0;
    int ok;
    if (!v)
        return 0;
    if (cJSON_IsString(v))
        ok = (cpu ? funcd_parse_cpu_millis(v->valuestring, &n)
                  : funcd_parse_quantity(v->valuestring, &n)) == 0 && n > 0;
    else
        ok = cJSON_IsNumber(v) && (cpu ? v->valuedouble > 0 && v->valuedouble <= 1.0e6
                                       : v->valuedouble >= 1 && v->valuedouble <= 9.0e18);
    if (ok)
        return 0;
    size_t old = funcd__api_push_field(c, name);
    int rc = funcd__api_fail(c, cpu ? "must be a positive CPU quantity such as \"1\", \"0.5\" "
                                      "or \"500m\""
                                    : "must be a positive quantity of bytes such as \"256Mi\", "
                                      "\"1Gi\" or \"512M\"");
    funcd__api_pop(c, old);
    return rc;
}

static int check_template_overrides(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (funcd__api_check_is_object(c, item, NULL) < 0)
        return FUNCD_EINVAL;
    const cJSON *containers = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(item, "spec"), "containers");
    const cJSON *list = cJSON_IsArray(containers) ? containers : NULL, *ctr;
    size_t i = 0;
    cJSON_ArrayForEach(ctr, list)
    {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ctr, "name"));
        const cJSON *limits = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(ctr, "resources"), "limits");
        if (name && strcmp(name, "function") == 0 && cJSON_IsObject(limits)) {
            size_t old = funcd__api_push_field(c, "spec");
            funcd__api_push_field(c, "containers");
            funcd__api_push_index(c, i);
            funcd__api_push_field(c, "resources");
            funcd__api_push_field(c, "limits");
            int rc = check_limit(c, limits, "memory", 0);
            if (rc == 0)
                rc = check_limit(c, limits, "cpu", 1);
            funcd__api_pop(c, old);
            if (rc < 0)
                return rc;
        }
        i++;
    }
    return 0;
}

static const funcd__api_field pod_fields[] = {
    {"tags", 0, funcd__api_check_string_array, &max_tags},
    {"timeToLive", 0, funcd__api_check_duration, &funcd__api_max_idle_ms},
    {"maxParallelExecutions", 0, funcd__api_check_int, &parallel},
    {"preferredMaxQueueLength", 0, funcd__api_check_int, &queue},
    {"templateOverrides", 0, check_template_overrides, NULL},
};

static int check_pod_executor(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return FUNCD__API_CHECK_OBJECT(c, item, pod_fields);
}

static const funcd__api_field spec_fields[] = {
    {"image", 1, funcd__api_check_string, &image_len},
    {"prefixes", 0, funcd__api_check_string_array, &max_prefixes},
    {"binaryExecutor", 0, check_binary_executor, NULL},
    {"podExecutor", 0, check_pod_executor, NULL},
};

int funcd__api_validate_functionconfig_spec(funcd__api_ctx *c, const cJSON *spec,
                                            const void *unused)
{
    int rc = FUNCD__API_CHECK_OBJECT(c, spec, spec_fields);
    if (rc < 0)
        return rc;
    if (!funcd__api_member(spec, "binaryExecutor") && !funcd__api_member(spec, "podExecutor"))
        return funcd__api_fail(c, "must set binaryExecutor, podExecutor or both");
    return 0;
}
