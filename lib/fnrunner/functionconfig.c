/* Which FunctionConfig serves an image: Porch's prefixes x image x tags. */
#include <stdlib.h>
#include <string.h>

#include "fnrunner/evaluator.h"
#include "funcd/sys/error.h"
#include "util/buf.h"

/* `image` without its ":tag" is exactly prefix + "/" + name. Returns the tag
 * part (after ':'), "" when untagged, or NULL when the name differs. */
static const char *tag_after(const char *image, const char *prefix, const char *name)
{
    size_t plen = strlen(prefix);
    while (plen && prefix[plen - 1] == '/')
        plen--; /* "example.com/fns/" and "example.com/fns" mean the same */
    if (plen) {
        if (strncmp(image, prefix, plen) != 0 || image[plen] != '/')
            return NULL;
        image += plen + 1;
    }
    size_t nlen = strlen(name);
    if (strncmp(image, name, nlen) != 0)
        return NULL;
    if (image[nlen] == '\0')
        return image + nlen;
    return image[nlen] == ':' ? image + nlen + 1 : NULL;
}

static int tag_allowed(const cJSON *tags, const char *tag)
{
    if (cJSON_GetArraySize(tags) == 0)
        return 1;
    const cJSON *t;
    cJSON_ArrayForEach(t, tags)
    {
        if (cJSON_IsString(t) && strcmp(t->valuestring, tag) == 0)
            return 1;
    }
    return 0;
}

int funcd_eval_config_matches(const cJSON *spec, const char *executor, const char *image)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(spec, "image");
    const cJSON *exe = cJSON_GetObjectItemCaseSensitive(spec, executor);
    if (!image || !cJSON_IsString(name) || !cJSON_IsObject(exe))
        return 0;
    const cJSON *tags = cJSON_GetObjectItemCaseSensitive(exe, "tags");
    const cJSON *prefixes = cJSON_GetObjectItemCaseSensitive(spec, "prefixes"), *p;
    if (cJSON_GetArraySize(prefixes) == 0) {
        const char *tag = tag_after(image, "", name->valuestring);
        return tag && tag_allowed(tags, tag);
    }
    cJSON_ArrayForEach(p, prefixes)
    {
        const char *tag = cJSON_IsString(p) ? tag_after(image, p->valuestring, name->valuestring)
                                            : NULL;
        if (tag && tag_allowed(tags, tag))
            return 1;
    }
    return 0;
}

typedef struct find_ctx {
    const char *image, *executor;
    cJSON *found;
} find_ctx;

static int on_config(const funcd_store_kv *kv, void *payload)
{
    find_ctx *f = payload;
    cJSON *obj = cJSON_ParseWithLength(kv->value, kv->len);
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(obj, "spec");
    if (funcd_eval_config_matches(spec, f->executor, f->image)) {
        f->found = obj;
        return 1;
    }
    cJSON_Delete(obj);
    return 0;
}

int funcd_eval_find_config(funcd_store *store, const char *ns, const char *image,
                           const char *executor, cJSON **out)
{
    *out = NULL;
    if (!store || !store->list)
        return funcd_error_set(FUNCD_ENOTFOUND, "no store holds FunctionConfigs");
    funcd_buf prefix = FUNCD_BUF_INIT;
    if (funcd_buf_printf(&prefix, "/registry/functionconfigs/%s/", ns ? ns : "default") < 0)
        return FUNCD_ENOMEM;
    find_ctx f = {image, executor, NULL};
    int rc = store->list(store, prefix.data, on_config, &f, NULL);
    funcd_buf_free(&prefix);
    if (rc < 0) {
        cJSON_Delete(f.found);
        return rc;
    }
    if (!f.found)
        return funcd_error_set(FUNCD_ENOTFOUND,
                               "no FunctionConfig in namespace %s has a %s for image %s",
                               ns ? ns : "default", executor, image);
    *out = f.found;
    return 0;
}
