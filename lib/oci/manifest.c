/* Manifests, indexes and image configs (OCI and Docker v2 schema 2). */
#include "oci/oci.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "funcd/sys/error.h"
#include "util/misc.h"

/* A digest is used as a file name in the cache: accept nothing looser. */
static int valid_sha256_digest(const char *s)
{
    if (!s || strncmp(s, "sha256:", 7) != 0 || strlen(s) != 71)
        return 0;
    for (const char *p = s + 7; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return 1;
}

static const char *json_str(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void descriptor_free(funcd_oci_descriptor *d)
{
    free(d->media_type);
    free(d->digest);
    memset(d, 0, sizeof(*d));
}

static int descriptor_parse(funcd_oci_descriptor *d, const cJSON *j, const char *what)
{
    if (!cJSON_IsObject(j))
        return funcd_error_set(FUNCD_EINVAL, "manifest: %s is not an object", what);
    const char *digest = json_str(j, "digest");
    if (!valid_sha256_digest(digest))
        return funcd_error_set(FUNCD_EINVAL, "manifest: %s has no sha256 digest (\"%s\")", what,
                               digest ? digest : "");
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(j, "size");
    if (!cJSON_IsNumber(size) || size->valuedouble < 0 || size->valuedouble > 9.0e15)
        return funcd_error_set(FUNCD_EINVAL, "manifest: %s has no valid size", what);
    const char *mt = json_str(j, "mediaType");
    d->media_type = funcd_strdup(mt ? mt : "");
    d->digest = funcd_strdup(digest);
    d->size = (uint64_t)size->valuedouble;
    if (!d->media_type || !d->digest) {
        descriptor_free(d);
        return funcd_error_set(FUNCD_ENOMEM, "manifest: out of memory");
    }
    return 0;
}

/* "application/x; charset=utf-8" → compares only the type. */
static int media_type_is(const char *mt, const char *want)
{
    if (!mt)
        return 0;
    size_t n = strcspn(mt, "; \t");
    return n == strlen(want) && strncmp(mt, want, n) == 0;
}

static int kind_of(const cJSON *root, const char *media_type)
{
    const char *mts[] = {media_type, json_str(root, "mediaType")};
    for (size_t i = 0; i < 2; i++) {
        if (media_type_is(mts[i], FUNCD_OCI_MT_OCI_INDEX) ||
            media_type_is(mts[i], FUNCD_OCI_MT_DOCKER_LIST))
            return 1;
        if (media_type_is(mts[i], FUNCD_OCI_MT_OCI_MANIFEST) ||
            media_type_is(mts[i], FUNCD_OCI_MT_DOCKER_MANIFEST))
            return 0;
    }
    if (cJSON_GetObjectItemCaseSensitive(root, "manifests"))
        return 1;
    if (cJSON_GetObjectItemCaseSensitive(root, "layers"))
        return 0;
    return -1;
}

/* A config or a layer is never empty: a size of 0 would bound no download. */
static int not_empty(const funcd_oci_descriptor *d, const char *what)
{
    if (d->size == 0)
        return funcd_error_set(FUNCD_EINVAL,
                               "manifest: %s has \"size\" 0; no config or layer is empty", what);
    return 0;
}

static int parse_image_manifest(funcd_oci_manifest *m, const cJSON *root)
{
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(root, "schemaVersion");
    if (cJSON_IsNumber(sv) && sv->valueint != 2)
        return funcd_error_set(FUNCD_EINVAL, "manifest: schemaVersion %d is not supported",
                               sv->valueint);
    int rc = descriptor_parse(&m->config, cJSON_GetObjectItemCaseSensitive(root, "config"),
                              "config");
    if (rc == 0)
        rc = not_empty(&m->config, "config");
    if (rc == 0 && m->config.size > FUNCD_OCI_CONFIG_MAX)
        rc = funcd_error_set(FUNCD_EINVAL,
                             "manifest: config has \"size\" %llu, more than the %llu bytes a "
                             "config may have",
                             (unsigned long long)m->config.size,
                             (unsigned long long)FUNCD_OCI_CONFIG_MAX);
    if (rc < 0)
        return rc;
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(root, "layers");
    if (!cJSON_IsArray(layers))
        return funcd_error_set(FUNCD_EINVAL, "manifest: layers is not an array");
    int n = cJSON_GetArraySize(layers);
    if (n > 1000)
        return funcd_error_set(FUNCD_EINVAL, "manifest: %d layers is more than 1000", n);
    m->layers = calloc(n ? (size_t)n : 1, sizeof(*m->layers));
    if (!m->layers)
        return funcd_error_set(FUNCD_ENOMEM, "manifest: out of memory");
    uint64_t total = m->config.size;
    const cJSON *l;
    cJSON_ArrayForEach(l, layers)
    {
        char what[32];
        snprintf(what, sizeof(what), "layer %zu", m->n_layers);
        if ((rc = descriptor_parse(&m->layers[m->n_layers], l, what)) < 0)
            return rc;
        const funcd_oci_descriptor *d = &m->layers[m->n_layers++];
        if ((rc = not_empty(d, what)) < 0)
            return rc;
        total += d->size;
        if (total > FUNCD_OCI_IMAGE_MAX)
            return funcd_error_set(FUNCD_EINVAL,
                                   "manifest: with %s (\"size\" %llu) the image declares %llu "
                                   "bytes, more than the %llu an image may have",
                                   what, (unsigned long long)d->size, (unsigned long long)total,
                                   (unsigned long long)FUNCD_OCI_IMAGE_MAX);
    }
    return 0;
}

/* "arm64" and "arm64/v8" name the same platform; "arm" defaults to v7. */
static int platform_matches(const cJSON *p, const char *os, const char *arch)
{
    const char *pos = json_str(p, "os"), *parch = json_str(p, "architecture");
    const char *pvar = json_str(p, "variant");
    if (!pos || !parch || strcmp(pos, os) != 0)
        return 0;
    const char *slash = strchr(arch, '/');
    size_t arch_len = slash ? (size_t)(slash - arch) : strlen(arch);
    if (strlen(parch) != arch_len || strncmp(parch, arch, arch_len) != 0)
        return 0;
    const char *want_var = slash ? slash + 1 : NULL;
    if (!want_var && strcmp(parch, "arm64") == 0)
        want_var = "v8";
    if (!want_var && strcmp(parch, "arm") == 0)
        want_var = "v7";
    if (!pvar || !*pvar || !want_var)
        return 1;
    return strcmp(pvar, want_var) == 0;
}

static int parse_index(funcd_oci_manifest *m, const cJSON *root, const char *os, const char *arch)
{
    m->is_index = 1;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "manifests");
    if (!cJSON_IsArray(list))
        return funcd_error_set(FUNCD_EINVAL, "index: manifests is not an array");
    const cJSON *e;
    cJSON_ArrayForEach(e, list)
    {
        if (!platform_matches(cJSON_GetObjectItemCaseSensitive(e, "platform"), os, arch))
            continue;
        return descriptor_parse(&m->selected, e, "index entry");
    }
    return funcd_error_set(FUNCD_ENOTFOUND, "the image has no manifest for %s/%s", os, arch);
}

int funcd_oci_manifest_parse(funcd_oci_manifest *out, const char *json, size_t len,
                             const char *media_type, const char *os, const char *arch)
{
    memset(out, 0, sizeof(*out));
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return funcd_error_set(FUNCD_EINVAL, "manifest: not a JSON object");
    }
    int rc;
    switch (kind_of(root, media_type)) {
    case 1:
        rc = parse_index(out, root, os ? os : "linux", arch ? arch : "amd64");
        break;
    case 0:
        rc = parse_image_manifest(out, root);
        break;
    default:
        rc = funcd_error_set(FUNCD_EINVAL, "manifest: media type \"%s\" is neither an image "
                                           "manifest nor an index",
                             media_type ? media_type : "");
    }
    cJSON_Delete(root);
    if (rc < 0)
        funcd_oci_manifest_free(out);
    return rc;
}

void funcd_oci_manifest_free(funcd_oci_manifest *m)
{
    if (!m)
        return;
    descriptor_free(&m->config);
    descriptor_free(&m->selected);
    for (size_t i = 0; i < m->n_layers; i++)
        descriptor_free(&m->layers[i]);
    free(m->layers);
    memset(m, 0, sizeof(*m));
}

/* A JSON array of strings → NULL-terminated vector; NULL (absent) stays NULL. */
static int string_vector(char ***out, const cJSON *arr, const char *what)
{
    *out = NULL;
    if (!arr || cJSON_IsNull(arr))
        return 0;
    if (!cJSON_IsArray(arr))
        return funcd_error_set(FUNCD_EINVAL, "image config: %s is not an array", what);
    int n = cJSON_GetArraySize(arr);
    char **v = calloc((size_t)n + 1, sizeof(*v));
    if (!v)
        return funcd_error_set(FUNCD_ENOMEM, "image config: out of memory");
    *out = v;
    const cJSON *s;
    size_t i = 0;
    cJSON_ArrayForEach(s, arr)
    {
        if (!cJSON_IsString(s))
            return funcd_error_set(FUNCD_EINVAL, "image config: %s has a non-string entry", what);
        if (!(v[i++] = funcd_strdup(s->valuestring)))
            return funcd_error_set(FUNCD_ENOMEM, "image config: out of memory");
    }
    return 0;
}

static void vector_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

static int dup_opt(char **out, const char *s)
{
    *out = NULL;
    if (s && !(*out = funcd_strdup(s)))
        return funcd_error_set(FUNCD_ENOMEM, "image config: out of memory");
    return 0;
}

int funcd_oci_config_parse(funcd_oci_config *out, const char *json, size_t len)
{
    memset(out, 0, sizeof(*out));
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return funcd_error_set(FUNCD_EINVAL, "image config: not a JSON object");
    }
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "config");
    if (cfg && !cJSON_IsNull(cfg) && !cJSON_IsObject(cfg)) {
        cJSON_Delete(root);
        return funcd_error_set(FUNCD_EINVAL, "image config: config is not an object");
    }
    int rc = dup_opt(&out->os, json_str(root, "os"));
    if (rc == 0)
        rc = dup_opt(&out->arch, json_str(root, "architecture"));
    if (rc == 0 && cJSON_IsObject(cfg)) {
        rc = string_vector(&out->entrypoint, cJSON_GetObjectItemCaseSensitive(cfg, "Entrypoint"),
                           "Entrypoint");
        if (rc == 0)
            rc = string_vector(&out->cmd, cJSON_GetObjectItemCaseSensitive(cfg, "Cmd"), "Cmd");
        if (rc == 0)
            rc = string_vector(&out->env, cJSON_GetObjectItemCaseSensitive(cfg, "Env"), "Env");
        if (rc == 0)
            rc = dup_opt(&out->working_dir, json_str(cfg, "WorkingDir"));
        if (rc == 0)
            rc = dup_opt(&out->user, json_str(cfg, "User"));
        if (rc == 0) /* Labels: only funcd's own is kept */
            rc = dup_opt(&out->contract,
                         json_str(cJSON_GetObjectItemCaseSensitive(cfg, "Labels"),
                                  FUNCD_OCI_CONTRACT_LABEL));
    }
    cJSON_Delete(root);
    if (rc < 0)
        funcd_oci_config_free(out);
    return rc;
}

void funcd_oci_config_free(funcd_oci_config *c)
{
    if (!c)
        return;
    free(c->os);
    free(c->arch);
    vector_free(c->entrypoint);
    vector_free(c->cmd);
    vector_free(c->env);
    free(c->working_dir);
    free(c->user);
    free(c->contract);
    memset(c, 0, sizeof(*c));
}
