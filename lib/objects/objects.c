#include "objects/objects.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "funcd/sys/error.h"
#include "port/store.h"
#include "util/misc.h"

int funcd_objects_key(funcd_buf *out, const funcd_kind *kind, const char *ns, const char *name)
{
    funcd_buf_reset(out);
    return funcd_buf_printf(out, FUNCD_OBJECTS_KEY_ROOT "%s/%s/%s", kind->plural, ns, name);
}

int funcd_objects_prefix(funcd_buf *out, const funcd_kind *kind, const char *ns)
{
    funcd_buf_reset(out);
    if (!ns)
        return funcd_buf_printf(out, FUNCD_OBJECTS_KEY_ROOT "%s/", kind->plural);
    return funcd_buf_printf(out, FUNCD_OBJECTS_KEY_ROOT "%s/%s/", kind->plural, ns);
}

int funcd_objects_parse_key(const char *key, const funcd_kind **kind, char *ns, size_t ns_len,
                             char *name, size_t name_len)
{
    if (!funcd_has_prefix(key, FUNCD_OBJECTS_KEY_ROOT))
        return FUNCD_EINVAL;
    const char *p = key + strlen(FUNCD_OBJECTS_KEY_ROOT);
    const char *s1 = strchr(p, '/');
    const char *s2 = s1 ? strchr(s1 + 1, '/') : NULL;
    if (!s1 || !s2 || strchr(s2 + 1, '/'))
        return FUNCD_EINVAL;
    char plural[64];
    size_t pl = (size_t)(s1 - p), nl = (size_t)(s2 - s1 - 1), ml = strlen(s2 + 1);
    if (pl >= sizeof(plural) || nl >= ns_len || ml >= name_len)
        return FUNCD_EINVAL;
    memcpy(plural, p, pl);
    plural[pl] = '\0';
    *kind = funcd_kind_by_plural(plural);
    if (!*kind)
        return FUNCD_EINVAL;
    memcpy(ns, s1 + 1, nl);
    ns[nl] = '\0';
    memcpy(name, s2 + 1, ml + 1);
    return 0;
}

static void set_string(cJSON *obj, const char *key, const char *value)
{
    cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    cJSON_AddStringToObject(obj, key, value);
}

static cJSON *metadata_of(cJSON *obj)
{
    cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    if (!cJSON_IsObject(md)) {
        cJSON_DeleteItemFromObjectCaseSensitive(obj, "metadata");
        md = cJSON_AddObjectToObject(obj, "metadata");
    }
    return md;
}

cJSON *funcd_objects_decode(const void *value, size_t len, uint64_t revision)
{
    cJSON *obj = cJSON_ParseWithLength(value, len);
    if (!obj)
        return NULL;
    char rv[24];
    snprintf(rv, sizeof(rv), "%" PRIu64, revision);
    set_string(metadata_of(obj), "resourceVersion", rv);
    return obj;
}

static int not_found(const funcd_kind *kind, const char *ns, const char *name)
{
    return funcd_error_set(FUNCD_ENOTFOUND, "%s \"%s\" not found in namespace \"%s\"", kind->plural,
                           name, ns);
}

int funcd_objects_get(funcd_store *s, const funcd_kind *kind, const char *ns, const char *name,
                       cJSON **out, uint64_t *revision)
{
    funcd_buf key = FUNCD_BUF_INIT;
    funcd_store_value v = {0};
    *out = NULL;
    int rc = funcd_objects_key(&key, kind, ns, name);
    if (rc == 0)
        rc = funcd_port_store_get(s, key.data, &v);
    funcd_buf_free(&key);
    if (rc == FUNCD_ENOTFOUND)
        return not_found(kind, ns, name);
    if (rc < 0)
        return rc;
    *out = funcd_objects_decode(v.value, v.len, v.revision);
    if (revision)
        *revision = v.revision;
    free(v.value);
    if (!*out)
        return funcd_error_set(FUNCD_EIO, "stored %s \"%s/%s\" is not valid JSON", kind->plural, ns,
                               name);
    return 0;
}

/* Serializes without resourceVersion (it lives in the store revision). */
static char *encode_for_store(const cJSON *obj)
{
    cJSON *copy = cJSON_Duplicate(obj, 1);
    if (!copy)
        return NULL;
    cJSON_DeleteItemFromObjectCaseSensitive(metadata_of(copy), "resourceVersion");
    char *s = cJSON_PrintUnformatted(copy);
    cJSON_Delete(copy);
    return s;
}

static int store_put(funcd_store *s, const funcd_kind *kind, const char *ns, const char *name,
                     const cJSON *obj, uint64_t expected, cJSON **out)
{
    funcd_buf key = FUNCD_BUF_INIT;
    int rc = funcd_objects_key(&key, kind, ns, name);
    char *text = rc == 0 ? encode_for_store(obj) : NULL;
    uint64_t rev = 0;
    if (rc == 0 && !text)
        rc = funcd_error_set(FUNCD_ENOMEM, "out of memory encoding %s \"%s\"", kind->plural, name);
    if (rc == 0)
        rc = funcd_port_store_put(s, key.data, text, strlen(text), expected, &rev);
    funcd_buf_free(&key);
    if (rc == FUNCD_EEXISTS)
        rc = funcd_error_set(FUNCD_EEXISTS, "%s \"%s\" already exists in namespace \"%s\"",
                             kind->plural, name, ns);
    else if (rc == FUNCD_ECONFLICT || rc == FUNCD_ENOTFOUND)
        rc = funcd_error_set(FUNCD_ECONFLICT,
                             "%s \"%s\" was modified concurrently; read the latest version and "
                             "apply your change again",
                             kind->plural, name);
    if (rc == 0 && out) {
        *out = funcd_objects_decode(text, strlen(text), rev);
        if (!*out)
            rc = funcd_error_set(FUNCD_ENOMEM, "out of memory");
    }
    free(text);
    return rc;
}

/* The user-owned part of an object: the spec, or a Secret's type and data. */
static const char *const secret_fields[] = {"type", "data", NULL};

static int same_item(const cJSON *a, const cJSON *b, const char *field)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(a, field);
    const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, field);
    if (!x || !y)
        return !x && !y;
    return cJSON_Compare(x, y, 1);
}

static int spec_changed(const funcd_kind *kind, const cJSON *a, const cJSON *b)
{
    if (kind->has_spec)
        return !same_item(a, b, "spec");
    for (const char *const *f = secret_fields; *f; f++)
        if (!same_item(a, b, *f))
            return 1;
    return 0;
}

/* Builds the object to store from the user's one: user fields from `in`,
 * server fields (`uid`, `creationTimestamp`, `generation`, `status`) given. */
static cJSON *build(const cJSON *in, const char *ns, const char *uid, const char *created,
                    double generation, const cJSON *status)
{
    cJSON *obj = cJSON_Duplicate(in, 1);
    if (!obj)
        return NULL;
    cJSON *md = metadata_of(obj);
    set_string(md, "namespace", ns);
    set_string(md, "uid", uid);
    set_string(md, "creationTimestamp", created);
    cJSON_DeleteItemFromObjectCaseSensitive(md, "generation");
    cJSON_AddNumberToObject(md, "generation", generation);
    cJSON_DeleteItemFromObjectCaseSensitive(md, "resourceVersion");
    cJSON_DeleteItemFromObjectCaseSensitive(obj, "status");
    if (status)
        cJSON_AddItemToObject(obj, "status", cJSON_Duplicate(status, 1));
    return obj;
}

int funcd_objects_create(funcd_store *s, const funcd_kind *kind, const char *ns, const cJSON *obj,
                          cJSON **out)
{
    char uid[37], created[32];
    funcd_uuid4(uid);
    funcd_rfc3339(funcd_now_ms(), created, sizeof(created));
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(md, "name"));
    if (!name)
        return funcd_error_set(FUNCD_EINVAL, "metadata.name is required");
    cJSON *stored = build(obj, ns, uid, created, 1, NULL);
    if (!stored)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory");
    int rc = store_put(s, kind, ns, name, stored, FUNCD_STORE_ABSENT, out);
    cJSON_Delete(stored);
    return rc;
}

/* 1 and *rv when the object names a resourceVersion, 0 when it does not,
 * -1 when it is not a decimal string within the store's revisions. */
static int parse_rv(const cJSON *obj, uint64_t *rv)
{
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(md, "resourceVersion");
    if (!item || cJSON_IsNull(item))
        return 0;
    const char *s = cJSON_GetStringValue(item);
    if (!s)
        return -1;
    if (!*s)
        return 0;
    return funcd_api_parse_revision(s, strlen(s), rv) == 0 ? 1 : -1;
}

static int replace_once(funcd_store *s, const funcd_kind *kind, const char *ns, const char *name,
                        const cJSON *obj, int *created, cJSON **out)
{
    cJSON *cur = NULL;
    uint64_t rev = 0, want = 0;
    *created = 0;
    int has_rv = parse_rv(obj, &want);
    if (has_rv < 0)
        return funcd_error_set(FUNCD_EINVAL, "metadata.resourceVersion must be a string holding a decimal revision (at most %lld), as read from the server", (long long)FUNCD_API_MAX_REVISION);
    int rc = funcd_objects_get(s, kind, ns, name, &cur, &rev);
    if (rc == FUNCD_ENOTFOUND) {
        if (has_rv)
            return funcd_error_set(FUNCD_ECONFLICT,
                                   "%s \"%s\" does not exist at resourceVersion %" PRIu64
                                   " (it was deleted); drop metadata.resourceVersion to create it",
                                   kind->plural, name, want);
        *created = 1;
        return funcd_objects_create(s, kind, ns, obj, out);
    }
    if (rc < 0)
        return rc;
    if (has_rv && want != rev) {
        cJSON_Delete(cur);
        return funcd_error_set(FUNCD_ECONFLICT,
                               "%s \"%s\" has been modified (resourceVersion %" PRIu64
                               ", yours %" PRIu64 "); read the latest version and apply your "
                               "change again",
                               kind->plural, name, rev, want);
    }
    const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(cur, "metadata");
    const char *uid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cmd, "uid"));
    const char *ts = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cmd, "creationTimestamp"));
    double gen = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(cmd, "generation"));
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    const char *want_uid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(md, "uid"));
    if (want_uid && *want_uid && uid && strcmp(want_uid, uid) != 0) {
        rc = funcd_error_set(FUNCD_ECONFLICT,
                             "metadata.uid %s does not match %s \"%s\" (uid %s): the object was "
                             "deleted and created again",
                             want_uid, kind->plural, name, uid);
        cJSON_Delete(cur);
        return rc;
    }
    if (gen != gen || gen < 1) /* NaN or missing */
        gen = 1;
    cJSON *next = build(obj, ns, uid ? uid : "", ts ? ts : "",
                        spec_changed(kind, cur, obj) ? gen + 1 : gen,
                        cJSON_GetObjectItemCaseSensitive(cur, "status"));
    cJSON_Delete(cur);
    if (!next)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory");
    rc = store_put(s, kind, ns, name, next, rev, out);
    cJSON_Delete(next);
    return rc;
}

/* Without a precondition from the client, a write that lost a race with
 * another writer (the controller writing status, say) reads again and
 * retries; a client that sent a resourceVersion gets the conflict. */
#define UNCONDITIONAL_ATTEMPTS 16

int funcd_objects_replace(funcd_store *s, const funcd_kind *kind, const char *ns, const char *name,
                           const cJSON *obj, int *created, cJSON **out)
{
    uint64_t want;
    int conditional = parse_rv(obj, &want) != 0;
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    conditional |= cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(md, "uid")) != NULL;
    int rc = FUNCD_ECONFLICT;
    for (int i = 0; i < UNCONDITIONAL_ATTEMPTS && rc == FUNCD_ECONFLICT; i++) {
        rc = replace_once(s, kind, ns, name, obj, created, out);
        if (conditional)
            break;
    }
    return rc;
}

static int delete_once(funcd_store *s, const funcd_kind *kind, const char *ns, const char *name,
                       cJSON **out)
{
    uint64_t rev = 0, del_rev = 0;
    int rc = funcd_objects_get(s, kind, ns, name, out, &rev);
    if (rc < 0)
        return rc;
    funcd_buf key = FUNCD_BUF_INIT;
    rc = funcd_objects_key(&key, kind, ns, name);
    if (rc == 0)
        rc = funcd_port_store_del(s, key.data, rev, &del_rev);
    funcd_buf_free(&key);
    if (rc == FUNCD_ENOTFOUND)
        rc = not_found(kind, ns, name);
    else if (rc == FUNCD_ECONFLICT)
        rc = funcd_error_set(FUNCD_ECONFLICT,
                             "%s \"%s\" was modified while being deleted; try again", kind->plural,
                             name);
    if (rc < 0) {
        cJSON_Delete(*out);
        *out = NULL;
    }
    return rc;
}

int funcd_objects_put_status(funcd_store *s, const funcd_kind *kind, const char *ns,
                              const char *name, uint64_t revision, const cJSON *status)
{
    cJSON *cur = NULL;
    uint64_t rev = 0;
    int rc = funcd_objects_get(s, kind, ns, name, &cur, &rev);
    if (rc < 0)
        return rc;
    if (rev != revision) {
        cJSON_Delete(cur);
        return funcd_error_set(FUNCD_ECONFLICT, "%s \"%s\" changed before its status was written",
                               kind->plural, name);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(cur, "status");
    cJSON_AddItemToObject(cur, "status", cJSON_Duplicate(status, 1));
    rc = store_put(s, kind, ns, name, cur, rev, NULL);
    cJSON_Delete(cur);
    return rc;
}

int funcd_objects_delete(funcd_store *s, const funcd_kind *kind, const char *ns, const char *name,
                          cJSON **out)
{
    int rc = FUNCD_ECONFLICT;
    for (int i = 0; i < UNCONDITIONAL_ATTEMPTS && rc == FUNCD_ECONFLICT; i++)
        rc = delete_once(s, kind, ns, name, out);
    return rc;
}
