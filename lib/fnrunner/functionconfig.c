/* Which FunctionConfig serves an image: Porch's prefixes x image x tags; the
 * image a podExecutor is warmed with; what of its templateOverrides a
 * sandboxed worker honours. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "fnrunner/evaluator.h"
#include "funcd/sys/error.h"
#include "port/store.h"
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
    int rc = funcd_port_store_list(store, prefix.data, on_config, &f, NULL);
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

char *funcd_eval_warm_image(const cJSON *spec)
{
    const char *image = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "image"));
    const cJSON *pod = cJSON_GetObjectItemCaseSensitive(spec, "podExecutor");
    if (!image || !*image)
        return NULL;
    const char *prefix = cJSON_GetStringValue(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(spec, "prefixes"), 0));
    const char *tag = cJSON_GetStringValue(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(pod, "tags"), 0));
    size_t plen = prefix ? strlen(prefix) : 0;
    while (plen && prefix[plen - 1] == '/')
        plen--; /* "example.com/fns/" and "example.com/fns" mean the same */
    funcd_buf b = FUNCD_BUF_INIT;
    if (plen)
        funcd_buf_printf(&b, "%.*s/", (int)plen, prefix);
    funcd_buf_puts(&b, image);
    if (tag && *tag)
        funcd_buf_printf(&b, ":%s", tag);
    return funcd_buf_detach(&b, NULL);
}

/* ---- podExecutor.templateOverrides ---------------------------------------- */

typedef struct ov_ctx {
    funcd_eval_overrides *o;
    size_t n_env;
    int oom;
} ov_ctx;

static void ignore(ov_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void ignore(ov_ctx *c, const char *fmt, ...)
{
    char path[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof(path), fmt, ap);
    va_end(ap);
    if (!cJSON_AddItemToArray(c->o->ignored, cJSON_CreateString(path)))
        c->oom = 1;
}

static void add_env(ov_ctx *c, const char *name, const char *value)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < c->n_env; i++) /* a later entry replaces an earlier one */
        if (strncmp(c->o->env[i], name, n) == 0 && c->o->env[i][n] == '=') {
            char *v = NULL;
            if (asprintf(&v, "%s=%s", name, value) < 0) {
                c->oom = 1;
                return;
            }
            free(c->o->env[i]);
            c->o->env[i] = v;
            return;
        }
    char **env = realloc(c->o->env, (c->n_env + 2) * sizeof(char *));
    if (!env) {
        c->oom = 1;
        return;
    }
    c->o->env = env;
    if (asprintf(&env[c->n_env], "%s=%s", name, value) < 0) {
        env[c->n_env] = NULL;
        c->oom = 1;
        return;
    }
    env[++c->n_env] = NULL;
}

static int env_name_ok(const char *name)
{
    return *name && !strchr(name, '=') && strncmp(name, "FUNCD_", 6) != 0;
}

static void container_env(ov_ctx *c, const cJSON *env, const char *at)
{
    const cJSON *e;
    int i = 0;
    if (!cJSON_IsArray(env)) {
        ignore(c, "%s.env", at);
        return;
    }
    cJSON_ArrayForEach(e, env)
    {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "name"));
        const cJSON *value = cJSON_GetObjectItemCaseSensitive(e, "value");
        const cJSON *m;
        if (!name || !env_name_ok(name)) {
            ignore(c, "%s.env[%d]", at, i++);
            continue;
        }
        cJSON_ArrayForEach(m, e)
        {
            if (strcmp(m->string, "name") != 0 && strcmp(m->string, "value") != 0)
                ignore(c, "%s.env[%s].%s", at, name, m->string); /* valueFrom, ... */
        }
        if (cJSON_IsString(value))
            add_env(c, name, value->valuestring);
        else if (!value || cJSON_IsNull(value))
            add_env(c, name, ""); /* Kubernetes: an absent value is "" */
        else
            ignore(c, "%s.env[%s].value", at, name);
        i++;
    }
}

static void container_limits(ov_ctx *c, const cJSON *res, const char *at)
{
    const cJSON *m;
    cJSON_ArrayForEach(m, res)
    {
        if (strcmp(m->string, "limits") != 0) {
            ignore(c, "%s.resources.%s", at, m->string); /* requests, claims */
            continue;
        }
        const cJSON *l;
        cJSON_ArrayForEach(l, m)
        {
            uint64_t v = 0;
            int ok = 0;
            if (strcmp(l->string, "memory") == 0) {
                ok = cJSON_IsString(l) ? funcd_parse_quantity(l->valuestring, &v) == 0
                                       : cJSON_IsNumber(l) && l->valuedouble >= 1;
                if (ok && !cJSON_IsString(l))
                    v = (uint64_t)l->valuedouble;
                if (ok && v > 0)
                    c->o->limits.memory_bytes = v;
            } else if (strcmp(l->string, "cpu") == 0) {
                ok = cJSON_IsString(l) ? funcd_parse_cpu_millis(l->valuestring, &v) == 0
                                       : cJSON_IsNumber(l) && l->valuedouble > 0;
                if (ok && !cJSON_IsString(l))
                    v = (uint64_t)(l->valuedouble * 1000 + 0.5);
                ok = ok && v > 0 && v <= UINT32_MAX;
                if (ok)
                    c->o->limits.cpu_millis = (uint32_t)v;
            }
            if (!ok) /* ephemeral-storage, hugepages, or a value that is no quantity */
                ignore(c, "%s.resources.limits.%s", at, l->string);
        }
    }
}

/* The "function" container: the one Porch runs the function in. */
static void function_container(ov_ctx *c, const cJSON *ctr, const char *at)
{
    const cJSON *m;
    cJSON_ArrayForEach(m, ctr)
    {
        if (strcmp(m->string, "name") == 0)
            continue;
        if (strcmp(m->string, "env") == 0)
            container_env(c, m, at);
        else if (strcmp(m->string, "resources") == 0 && cJSON_IsObject(m))
            container_limits(c, m, at);
        else if (strcmp(m->string, "securityContext") == 0 && cJSON_IsObject(m)) {
            /* The sandbox runs every worker as its one unprivileged uid
             * (docs/function-runner.md): runAsUser cannot choose another. */
            const cJSON *s;
            cJSON_ArrayForEach(s, m)
                ignore(c, "%s.securityContext.%s", at, s->string);
        } else
            ignore(c, "%s.%s", at, m->string); /* image, command, volumeMounts, ... */
    }
}

int funcd_eval_overrides_parse(const cJSON *tmpl, funcd_eval_overrides *out)
{
    memset(out, 0, sizeof(*out));
    ov_ctx c = {out, 0, 0};
    out->env = calloc(1, sizeof(char *));
    out->ignored = cJSON_CreateArray();
    if (!out->env || !out->ignored) {
        funcd_eval_overrides_clear(out);
        return FUNCD_ENOMEM;
    }
    const cJSON *top = cJSON_IsObject(tmpl) ? tmpl : NULL, *m;
    cJSON_ArrayForEach(m, top)
    {
        if (strcmp(m->string, "spec") != 0 || !cJSON_IsObject(m)) {
            ignore(&c, "%s", m->string); /* metadata: labels of a pod there is not */
            continue;
        }
        const cJSON *s;
        cJSON_ArrayForEach(s, m)
        {
            if (strcmp(s->string, "containers") != 0 || !cJSON_IsArray(s)) {
                ignore(&c, "spec.%s", s->string); /* nodeSelector, volumes, ... */
                continue;
            }
            const cJSON *ctr;
            int i = 0;
            cJSON_ArrayForEach(ctr, s)
            {
                const char *name =
                    cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ctr, "name"));
                char at[300];
                if (name)
                    snprintf(at, sizeof(at), "spec.containers[%s]", name);
                else
                    snprintf(at, sizeof(at), "spec.containers[%d]", i);
                i++;
                if (name && strcmp(name, "function") == 0 && cJSON_IsObject(ctr))
                    function_container(&c, ctr, at);
                else
                    ignore(&c, "%s", at); /* a sidecar: no pod to put it in */
            }
        }
    }
    if (c.oom) {
        funcd_eval_overrides_clear(out);
        return FUNCD_ENOMEM;
    }
    return 0;
}

void funcd_eval_overrides_clear(funcd_eval_overrides *o)
{
    for (char **p = o->env; p && *p; p++)
        free(*p);
    free(o->env);
    cJSON_Delete(o->ignored);
    memset(o, 0, sizeof(*o));
}
