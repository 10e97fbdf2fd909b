/* Validation and normalization of Secrets. */
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "funcd/common.h"

#define MAX_SECRET_BYTES (1024 * 1024)
#define MAX_SECRET_KEY 253
#define DOCKER_CONFIG_TYPE "kubernetes.io/dockerconfigjson"
#define DOCKER_CONFIG_KEY ".dockerconfigjson"

static const char *const secret_types[] = {"Opaque", DOCKER_CONFIG_TYPE, NULL};

/* Keys become file names when a Secret is mounted: "." and ".." never are. */
int funcd__api_is_secret_key(const char *s)
{
    size_t len = strlen(s);
    if (len == 0 || len > MAX_SECRET_KEY || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return 0;
    return strspn(s, "-._abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") == len;
}

/* Checks a data or stringData map and adds its decoded size to *total. */
static int check_map(funcd__api_ctx *c, const cJSON *map, int base64, size_t *total)
{
    if (!cJSON_IsObject(map))
        return funcd__api_fail(c, "must be an object of strings");
    for (const cJSON *m = map->child; m; m = m->next) {
        size_t old = funcd__api_push_key(c, m->string), len;
        if (!funcd__api_is_secret_key(m->string))
            return funcd__api_fail(c, "must be a key of 1 to 253 letters, digits, '-', '_' or "
                                      "'.', other than \".\" and \"..\"");
        if (!cJSON_IsString(m))
            return funcd__api_fail(c, "must be a string");
        len = strlen(m->valuestring);
        if (base64 && funcd__api_base64_decoded_len(m->valuestring, len, &len) < 0)
            return funcd__api_fail(c, "must be base64-encoded (standard alphabet, with padding)");
        *total += len;
        funcd__api_pop(c, old);
    }
    return 0;
}

static int is_docker_config(const char *json, size_t len)
{
    cJSON *doc = cJSON_ParseWithLength(json, len);
    int ok = cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(doc, "auths"));
    cJSON_Delete(doc);
    return ok;
}

static int check_docker_config(funcd__api_ctx *c, const cJSON *obj)
{
    const char *expected = "must be Docker config JSON: an object with \"auths\"";
    const cJSON *plain = cJSON_GetObjectItemCaseSensitive(funcd__api_member(obj, "stringData"),
                                                          DOCKER_CONFIG_KEY);
    const cJSON *encoded =
        cJSON_GetObjectItemCaseSensitive(funcd__api_member(obj, "data"), DOCKER_CONFIG_KEY);
    if (plain) {
        funcd__api_push_field(c, "stringData");
        funcd__api_push_key(c, DOCKER_CONFIG_KEY);
        if (!is_docker_config(plain->valuestring, strlen(plain->valuestring)))
            return funcd__api_fail(c, "%s", expected);
        return 0;
    }
    funcd__api_push_field(c, "data");
    if (!encoded)
        return funcd__api_fail(c, "must contain \"" DOCKER_CONFIG_KEY "\" for type " DOCKER_CONFIG_TYPE);
    funcd__api_push_key(c, DOCKER_CONFIG_KEY);
    size_t len = strlen(encoded->valuestring), decoded_len;
    funcd__api_base64_decoded_len(encoded->valuestring, len, &decoded_len); /* checked before */
    unsigned char *decoded = malloc(decoded_len + 1);
    if (!decoded)
        return funcd__api_fail(c, "out of memory decoding the value");
    funcd__api_base64_decode(encoded->valuestring, len, decoded);
    int ok = is_docker_config((const char *)decoded, decoded_len);
    free(decoded);
    return ok ? 0 : funcd__api_fail(c, "%s", expected);
}

int funcd__api_validate_secret(funcd__api_ctx *c, const cJSON *obj)
{
    const cJSON *type = funcd__api_member(obj, "type");
    const cJSON *data = funcd__api_member(obj, "data");
    const cJSON *string_data = funcd__api_member(obj, "stringData");
    size_t total = 0, old;
    int rc;
    if (type) {
        old = funcd__api_push_field(c, "type");
        if ((rc = funcd__api_check_enum(c, type, secret_types)) < 0)
            return rc;
        funcd__api_pop(c, old);
    }
    if (data) {
        old = funcd__api_push_field(c, "data");
        if ((rc = check_map(c, data, 1, &total)) < 0)
            return rc;
        funcd__api_pop(c, old);
    }
    if (string_data) {
        old = funcd__api_push_field(c, "stringData");
        if ((rc = check_map(c, string_data, 0, &total)) < 0)
            return rc;
        funcd__api_pop(c, old);
    }
    if (total > MAX_SECRET_BYTES) {
        funcd__api_push_field(c, "data");
        return funcd__api_fail(c, "total decoded size of data and stringData must be at most %d "
                                  "bytes",
                               MAX_SECRET_BYTES);
    }
    if (type && strcmp(type->valuestring, DOCKER_CONFIG_TYPE) == 0)
        return check_docker_config(c, obj);
    return 0;
}

/* Moves one stringData entry into data, base64-encoded, in place of any
 * entry of the same key. */
static int move_entry(cJSON *data, cJSON *entry)
{
    funcd_buf b64 = FUNCD_BUF_INIT;
    if (funcd__api_base64_encode(entry->valuestring, strlen(entry->valuestring), &b64) < 0) {
        cJSON_Delete(entry);
        return FUNCD_ENOMEM;
    }
    cJSON_free(entry->valuestring);
    entry->valuestring = cJSON_malloc(b64.len + 1);
    if (!entry->valuestring) {
        funcd_buf_free(&b64);
        cJSON_Delete(entry);
        return FUNCD_ENOMEM;
    }
    memcpy(entry->valuestring, b64.data, b64.len + 1);
    funcd_buf_free(&b64);
    cJSON *old = cJSON_GetObjectItemCaseSensitive(data, entry->string);
    if (old)
        cJSON_ReplaceItemViaPointer(data, old, entry);
    else
        cJSON_AddItemToArray(data, entry); /* keeps entry->string: objects are lists too */
    return 0;
}

int funcd__api_normalize_secret(cJSON *obj)
{
    if (!cJSON_GetObjectItemCaseSensitive(obj, "type")) {
        if (!cJSON_AddStringToObject(obj, "type", "Opaque"))
            return FUNCD_ENOMEM;
    }
    cJSON *string_data = cJSON_DetachItemFromObjectCaseSensitive(obj, "stringData");
    if (!string_data)
        return 0;
    cJSON *data = cJSON_GetObjectItemCaseSensitive(obj, "data");
    if (!cJSON_IsObject(data)) {
        cJSON_DeleteItemFromObjectCaseSensitive(obj, "data");
        if (!(data = cJSON_AddObjectToObject(obj, "data"))) {
            cJSON_Delete(string_data);
            return FUNCD_ENOMEM;
        }
    }
    int rc = 0;
    for (cJSON *entry = string_data->child; entry && rc == 0; entry = string_data->child) {
        cJSON_DetachItemViaPointer(string_data, entry);
        if (cJSON_IsString(entry) && entry->string)
            rc = move_entry(data, entry);
        else
            cJSON_Delete(entry);
    }
    cJSON_Delete(string_data);
    return rc;
}
