/* Normalization of validated objects before storage. */
#include <string.h>

#include "api/internal.h"
#include "funcd/common.h"

/* Validation reads a null field as absent; storage should not keep it.
 * Maps of user data are left alone: their nulls were rejected, and those
 * under templateOverrides or status may mean something to their reader. */
static void strip_nulls(cJSON *node, int depth)
{
    if (depth > FUNCD_API_MAX_DEPTH)
        return;
    cJSON *next;
    for (cJSON *m = node->child; m; m = next) {
        next = m->next;
        if (cJSON_IsObject(node) && cJSON_IsNull(m)) {
            cJSON_Delete(cJSON_DetachItemViaPointer(node, m));
            continue;
        }
        if (m->string && (strcmp(m->string, "templateOverrides") == 0 ||
                          (depth == 0 && strcmp(m->string, "status") == 0)))
            continue;
        if (cJSON_IsObject(m) || cJSON_IsArray(m))
            strip_nulls(m, depth + 1);
    }
}

int funcd_api_normalize(const funcd_kind *kind, cJSON *obj)
{
    if (!kind || !cJSON_IsObject(obj))
        return FUNCD_EINVAL;
    strip_nulls(obj, 0);
    if (!kind->has_spec)
        return funcd__api_normalize_secret(obj);
    return 0;
}
