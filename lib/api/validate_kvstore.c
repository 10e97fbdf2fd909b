/* Validation of KVStores (docs/services.md): limits of one function-facing
 * key/value store. */
#include "api/internal.h"

/* The largest value a KVStore may allow, and the most keys: KV data lives in
 * the store port next to the platform's own objects. */
#define KV_MAX_VALUE (1 << 20)
#define KV_MAX_KEYS 1000000

static const funcd__api_range max_keys = {1, KV_MAX_KEYS}, max_value = {1, KV_MAX_VALUE};

static const funcd__api_field kvstore_fields[] = {
    {"maxKeys", 0, funcd__api_check_int, &max_keys},
    {"maxValueBytes", 0, funcd__api_check_int, &max_value},
    {"defaultTTL", 0, funcd__api_check_duration, &funcd__api_max_idle_ms},
};

int funcd__api_validate_kvstore_spec(funcd__api_ctx *c, const cJSON *spec, const void *unused)
{
    return FUNCD__API_CHECK_OBJECT(c, spec, kvstore_fields);
}
