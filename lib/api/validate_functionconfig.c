/* Validation of FunctionConfig specs (Porch's shape). */
#include <stdint.h>

#include "api/internal.h"

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

static const funcd__api_field pod_fields[] = {
    {"tags", 0, funcd__api_check_string_array, &max_tags},
    {"timeToLive", 0, funcd__api_check_duration, &funcd__api_max_idle_ms},
    {"maxParallelExecutions", 0, funcd__api_check_int, &parallel},
    {"preferredMaxQueueLength", 0, funcd__api_check_int, &queue},
    /* A pod template patch: its shape belongs to whoever applies it. */
    {"templateOverrides", 0, funcd__api_check_is_object, NULL},
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
