/* Heartbeat records: what the API and the leader read of other nodes. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "cluster/nodes.h"

int funcd_node_name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > 253)
        return 0;
    /* Dot-separated labels of letters, digits and '-', each starting and
     * ending with a letter or a digit. */
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        int alnum = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
        int edge = i == 0 || i == n - 1 || name[i - 1] == '.' || name[i + 1] == '.';
        if (!alnum && (ch != '-' || edge) && (ch != '.' || i == 0 || i == n - 1 ||
                                              name[i - 1] == '.'))
            return 0;
    }
    return 1;
}

static int64_t number(const cJSON *j, const char *field)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, field);
    return cJSON_IsNumber(v) && v->valuedouble >= 0 ? (int64_t)v->valuedouble : -1;
}

int funcd_node_record_parse(const void *value, size_t len, funcd_node_record *out)
{
    memset(out, 0, sizeof(*out));
    cJSON *j = cJSON_ParseWithLength(value, len);
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "name"));
    const char *addr = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "address"));
    int64_t start = number(j, "startMs"), renew = number(j, "renewMs"), ttl = number(j, "ttlMs");
    int64_t workers = number(j, "workers");
    int ok = name && strlen(name) < sizeof(out->name) && start >= 0 && renew >= 0 && ttl > 0;
    if (ok) {
        snprintf(out->name, sizeof(out->name), "%s", name);
        snprintf(out->address, sizeof(out->address), "%s", addr ? addr : "");
        out->start_ms = start;
        out->renew_ms = renew;
        out->ttl_ms = (uint64_t)ttl;
        out->ready = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ready"));
        out->workers = workers > 0 ? (unsigned)workers : 0;
    }
    cJSON_Delete(j);
    return ok ? 0 : -1;
}
