#include "controller/secret_env.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/internal.h"
#include "funcd/sys/error.h"
#include "objects/objects.h"

static const cJSON *spec_of(const cJSON *fn)
{
    return cJSON_GetObjectItemCaseSensitive(fn, "spec");
}

static const char *str_at(const cJSON *obj, const char *key)
{
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(obj, key));
}

/* The Secret named by env value `v` ({secretKeyRef: {name}}), or NULL. */
static const char *key_ref_secret(const cJSON *v)
{
    return str_at(cJSON_GetObjectItemCaseSensitive(v, "secretKeyRef"), "name");
}

static const char *env_from_secret(const cJSON *item)
{
    return str_at(cJSON_GetObjectItemCaseSensitive(item, "secretRef"), "name");
}

int funcd_secret_env_uses(const cJSON *fn, const char *secret)
{
    const cJSON *spec = spec_of(fn), *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(spec, "env"))
    {
        const char *s = key_ref_secret(v);
        if (s && (!secret || strcmp(s, secret) == 0))
            return 1;
    }
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(spec, "envFrom"))
    {
        const char *s = env_from_secret(v);
        if (s && (!secret || strcmp(s, secret) == 0))
            return 1;
    }
    return 0;
}

typedef struct why {
    char *reason, *message;
    size_t reason_len, message_len;
} why;

static cJSON *fail(why *w, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static cJSON *fail(why *w, const char *reason, const char *fmt, ...)
{
    snprintf(w->reason, w->reason_len, "%s", reason);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->message, w->message_len, fmt, ap);
    va_end(ap);
    return NULL;
}

/* The data map of Secret `name` (owned by `*obj`), or NULL when there is no
 * such Secret. */
static const cJSON *secret_data(funcd_store *store, const char *ns, const char *name,
                                cJSON **obj)
{
    uint64_t rev;
    *obj = NULL;
    if (funcd_objects_get(store, funcd_kind_by_plural("secrets"), ns, name, obj, &rev) < 0)
        return NULL;
    return cJSON_GetObjectItemCaseSensitive(*obj, "data");
}

/* The decoded value of a data entry as a C string, or NULL when it is not
 * base64 or holds a NUL byte (which no environment variable can). */
static char *decoded(const cJSON *entry)
{
    const char *b64 = cJSON_GetStringValue(entry);
    size_t len = 0;
    if (!b64 || funcd__api_base64_decoded_len(b64, strlen(b64), &len) < 0)
        return NULL;
    char *out = malloc(len + 1);
    if (!out)
        return NULL;
    funcd__api_base64_decode(b64, strlen(b64), (unsigned char *)out);
    out[len] = 0;
    if (strlen(out) != len) {
        free(out);
        return NULL;
    }
    return out;
}

/* Replaces the secretKeyRef values of `env` (in the copy) by strings. */
static int resolve_refs(funcd_store *store, const char *ns, cJSON *env, why *w)
{
    for (cJSON *v = env ? env->child : NULL; v; v = v->next) {
        const char *name = key_ref_secret(v);
        if (!name)
            continue;
        const char *key = str_at(cJSON_GetObjectItemCaseSensitive(v, "secretKeyRef"), "key");
        cJSON *secret = NULL;
        const cJSON *data = secret_data(store, ns, name, &secret);
        const cJSON *entry = data ? cJSON_GetObjectItemCaseSensitive(data, key ? key : "") : NULL;
        char *value = entry ? decoded(entry) : NULL;
        cJSON_Delete(secret);
        if (!value) {
            if (!secret)
                fail(w, "SecretNotFound", "spec.env[%s]: Secret \"%s\" does not exist", v->string,
                     name);
            else if (!entry)
                fail(w, "SecretNotFound", "spec.env[%s]: Secret \"%s\" has no key \"%s\"",
                     v->string, name, key ? key : "");
            else
                fail(w, "SecretNotUsable", "spec.env[%s]: key \"%s\" of Secret \"%s\" holds a NUL "
                     "byte, which an environment variable cannot", v->string, key, name);
            return -1;
        }
        cJSON *s = cJSON_CreateString(value);
        free(value);
        /* Replacing via the pointer keeps the member's name on the new item. */
        if (!s || !(s->string = strdup(v->string)) || !cJSON_ReplaceItemViaPointer(env, v, s)) {
            cJSON_Delete(s);
            fail(w, "InternalError", "out of memory reading Secrets");
            return -1;
        }
        v = s;
    }
    return 0;
}

/* Adds the keys of the envFrom Secrets that spec.env does not set. */
static int add_env_from(funcd_store *store, const char *ns, const cJSON *list,
                        const cJSON *explicit, cJSON *env, why *w)
{
    size_t i = 0;
    for (const cJSON *item = list ? list->child : NULL; item; item = item->next, i++) {
        const char *name = env_from_secret(item);
        cJSON *secret = NULL;
        const cJSON *data = name ? secret_data(store, ns, name, &secret) : NULL;
        if (!secret) {
            fail(w, "SecretNotFound", "spec.envFrom[%zu]: Secret \"%s\" does not exist", i,
                 name ? name : "");
            return -1;
        }
        const cJSON *entry;
        cJSON_ArrayForEach(entry, data)
        {
            /* Keys that cannot name a variable are skipped, as are the
             * platform's; spec.env wins. */
            if (!entry->string || !funcd_api_env_name_ok(entry->string) ||
                strncmp(entry->string, "FUNCD_", 6) == 0 ||
                cJSON_GetObjectItemCaseSensitive(explicit, entry->string))
                continue;
            char *value = decoded(entry);
            if (!value)
                continue;
            cJSON_DeleteItemFromObjectCaseSensitive(env, entry->string);
            cJSON_AddStringToObject(env, entry->string, value);
            free(value);
        }
        cJSON_Delete(secret);
    }
    return 0;
}

cJSON *funcd_secret_env_resolve(funcd_store *store, const char *ns, const cJSON *fn,
                                char *reason, size_t reason_len, char *message,
                                size_t message_len)
{
    why w = {reason, message, reason_len, message_len};
    cJSON *copy = cJSON_Duplicate(fn, 1);
    cJSON *spec = copy ? cJSON_GetObjectItemCaseSensitive(copy, "spec") : NULL;
    if (!spec)
        return cJSON_Delete(copy), fail(&w, "InternalError", "out of memory reading Secrets");
    cJSON *env = cJSON_GetObjectItemCaseSensitive(spec, "env");
    cJSON *from = cJSON_DetachItemFromObjectCaseSensitive(spec, "envFrom");
    /* The names spec.env sets, before envFrom adds any. */
    cJSON *explicit = env ? cJSON_Duplicate(env, 1) : NULL;
    if (!env && from)
        env = cJSON_AddObjectToObject(spec, "env");
    int rc = resolve_refs(store, ns, env, &w);
    if (rc == 0 && from)
        rc = add_env_from(store, ns, from, explicit, env, &w);
    cJSON_Delete(explicit);
    cJSON_Delete(from);
    if (rc < 0) {
        cJSON_Delete(copy);
        return NULL;
    }
    return copy;
}
