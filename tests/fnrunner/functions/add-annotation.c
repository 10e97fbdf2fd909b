/*
 * A KRM function in C: adds the entries of its functionConfig (a ConfigMap's
 * data) as annotations to every item, or "funcd.dev/annotated: true" when
 * it has none, and reports what it did as an info result. It reads JSON
 * ResourceLists (KRM allows JSON); anything else gets an error result and
 * exit status 1. Built like user code: no sanitizers, no libfuncd.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *bigger = realloc(buf, cap * 2 + 1);
        if (!bigger) {
            free(buf);
            return NULL;
        }
        buf = bigger;
        cap *= 2;
    }
    if (buf)
        buf[n] = '\0';
    *len = n;
    return buf;
}

static void add_result(cJSON *rl, const char *message, const char *severity)
{
    cJSON *results = cJSON_GetObjectItemCaseSensitive(rl, "results");
    if (!cJSON_IsArray(results)) {
        cJSON_DeleteItemFromObjectCaseSensitive(rl, "results");
        results = cJSON_AddArrayToObject(rl, "results");
    }
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "message", message);
    cJSON_AddStringToObject(r, "severity", severity);
    cJSON_AddItemToArray(results, r);
}

static int emit(cJSON *rl, int status)
{
    char *text = cJSON_Print(rl);
    if (!text)
        return 2;
    puts(text);
    free(text);
    return status;
}

static int refuse(const char *why)
{
    fprintf(stderr, "add-annotation: %s\n", why);
    cJSON *rl = cJSON_CreateObject();
    cJSON_AddStringToObject(rl, "apiVersion", "config.kubernetes.io/v1");
    cJSON_AddStringToObject(rl, "kind", "ResourceList");
    cJSON_AddArrayToObject(rl, "items");
    add_result(rl, why, "error");
    int status = emit(rl, 1);
    cJSON_Delete(rl);
    return status;
}

static cJSON *object_member(cJSON *parent, const char *name)
{
    cJSON *child = cJSON_GetObjectItemCaseSensitive(parent, name);
    if (cJSON_IsObject(child))
        return child;
    cJSON_DeleteItemFromObjectCaseSensitive(parent, name);
    return cJSON_AddObjectToObject(parent, name);
}

static void annotate(cJSON *item, const cJSON *data)
{
    cJSON *annotations = object_member(object_member(item, "metadata"), "annotations");
    if (!cJSON_IsObject(data) || !data->child) {
        cJSON_DeleteItemFromObjectCaseSensitive(annotations, "funcd.dev/annotated");
        cJSON_AddStringToObject(annotations, "funcd.dev/annotated", "true");
        return;
    }
    for (const cJSON *e = data->child; e; e = e->next) {
        if (!cJSON_IsString(e))
            continue;
        cJSON_DeleteItemFromObjectCaseSensitive(annotations, e->string);
        cJSON_AddStringToObject(annotations, e->string, e->valuestring);
    }
}

int main(void)
{
    size_t len = 0;
    char *in = read_all(stdin, &len);
    if (!in)
        return refuse("cannot read stdin");
    cJSON *rl = cJSON_ParseWithLength(in, len);
    free(in);
    if (!cJSON_IsObject(rl)) {
        cJSON_Delete(rl);
        return refuse("the input is not a JSON ResourceList");
    }
    cJSON *items = cJSON_GetObjectItemCaseSensitive(rl, "items");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(rl, "functionConfig"), "data");
    int n = 0;
    cJSON *item;
    cJSON_ArrayForEach(item, items)
    {
        if (cJSON_IsObject(item)) {
            annotate(item, data);
            n++;
        }
    }
    char message[64];
    snprintf(message, sizeof(message), "annotated %d items", n);
    add_result(rl, message, "info");
    fprintf(stderr, "add-annotation: %s\n", message);
    int status = emit(rl, 0);
    cJSON_Delete(rl);
    return status;
}
