/*
 * The shipped set-namespace builtin, after kpt's set-namespace: sets
 * metadata.namespace on every namespaced item of a ResourceList.
 *
 * functionConfig: a ConfigMap with data.namespace, or any kind (kpt's
 * SetNamespace) with a top-level `namespace` or spec.namespace. Cluster-scoped
 * kinds and local-config objects (config.kubernetes.io/local-config: "true",
 * e.g. a Kptfile) are left alone. Output is YAML.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "fnrunner/evaluator.h"

/* Kubernetes' cluster-scoped kinds (those kpt and kustomize know of). */
static const char *const cluster_scoped[] = {
    "APIService", "CertificateSigningRequest", "ClusterIssuer", "ClusterRole",
    "ClusterRoleBinding", "ClusterTrustBundle", "ComponentStatus", "CSIDriver", "CSINode",
    "CustomResourceDefinition", "FlowSchema", "IngressClass", "MutatingWebhookConfiguration",
    "Namespace", "Node", "PersistentVolume", "PodSecurityPolicy", "PriorityClass",
    "PriorityLevelConfiguration", "RuntimeClass", "SelfSubjectAccessReview",
    "SelfSubjectReview", "SelfSubjectRulesReview", "StorageClass", "SubjectAccessReview",
    "TokenReview", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    "ValidatingWebhookConfiguration", "VolumeAttachment",
};

static int is_cluster_scoped(const char *kind)
{
    for (size_t i = 0; i < sizeof(cluster_scoped) / sizeof(cluster_scoped[0]); i++)
        if (strcmp(kind, cluster_scoped[i]) == 0)
            return 1;
    return 0;
}

static const char *string_at(const cJSON *obj, const char *a, const char *b)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, a);
    if (b)
        v = cJSON_GetObjectItemCaseSensitive(v, b);
    return cJSON_IsString(v) && *v->valuestring ? v->valuestring : NULL;
}

static const char *wanted_namespace(const cJSON *fn_config)
{
    if (!fn_config)
        return NULL;
    const char *kind = string_at(fn_config, "kind", NULL);
    if (kind && strcmp(kind, "ConfigMap") == 0)
        return string_at(fn_config, "data", "namespace");
    const char *ns = string_at(fn_config, "namespace", NULL);
    return ns ? ns : string_at(fn_config, "spec", "namespace");
}

static int is_local_config(const cJSON *item)
{
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(item, "metadata");
    const char *v = string_at(cJSON_GetObjectItemCaseSensitive(meta, "annotations"),
                              "config.kubernetes.io/local-config", NULL);
    return v && strcmp(v, "true") == 0;
}

/* Sets metadata.namespace, right after metadata.name when it is new. */
static int set_item_namespace(cJSON *item, const char *ns)
{
    cJSON *meta = cJSON_GetObjectItemCaseSensitive(item, "metadata");
    if (!cJSON_IsObject(meta)) {
        cJSON_DeleteItemFromObjectCaseSensitive(item, "metadata");
        meta = cJSON_AddObjectToObject(item, "metadata");
    }
    cJSON *v = cJSON_CreateString(ns);
    if (!meta || !v) {
        cJSON_Delete(v);
        return -1;
    }
    if (cJSON_GetObjectItemCaseSensitive(meta, "namespace"))
        return cJSON_ReplaceItemInObjectCaseSensitive(meta, "namespace", v) ? 0 : -1;
    if (!cJSON_AddItemToObject(meta, "namespace", v))
        return -1;
    /* Move what sat between name and the new field behind it. (Debian's
     * cJSON refuses cJSON_InsertItemInArray on an object.) */
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(meta, "name");
    for (cJSON *c = name ? name->next : NULL, *next; c && c != v; c = next) {
        next = c->next;
        cJSON_AddItemToArray(meta, cJSON_DetachItemViaPointer(meta, c));
    }
    return 0;
}

static int add_error_result(cJSON *rl, const char *message)
{
    cJSON *results = cJSON_GetObjectItemCaseSensitive(rl, "results");
    if (!cJSON_IsArray(results)) {
        cJSON_DeleteItemFromObjectCaseSensitive(rl, "results");
        results = cJSON_AddArrayToObject(rl, "results");
    }
    cJSON *r = cJSON_CreateObject();
    if (!results || !r || !cJSON_AddItemToArray(results, r)) {
        cJSON_Delete(r);
        return -1;
    }
    return cJSON_AddStringToObject(r, "message", message) &&
                   cJSON_AddStringToObject(r, "severity", "error")
               ? 0
               : -1;
}

static void set_text(char **dst, size_t *len, const char *text)
{
    *dst = strdup(text);
    *len = *dst ? strlen(text) : 0;
}

static int emit(const cJSON *rl, char **out, size_t *out_len)
{
    funcd_buf b = FUNCD_BUF_INIT;
    if (funcd_api_to_yaml(rl, &b) < 0) {
        funcd_buf_free(&b);
        return -1;
    }
    *out = funcd_buf_detach(&b, out_len);
    return *out ? 0 : -1;
}

static int set_all(cJSON *rl, const char *ns)
{
    cJSON *item;
    cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(rl, "items"))
    {
        const char *kind = string_at(item, "kind", NULL);
        if (!cJSON_IsObject(item) || (kind && is_cluster_scoped(kind)) || is_local_config(item))
            continue;
        if (set_item_namespace(item, ns) < 0)
            return -1;
    }
    return 0;
}

int funcd_builtin_set_namespace(const char *in, size_t in_len, char **out, size_t *out_len,
                                char **log, size_t *log_len, void *payload)
{
    cJSON *rl = NULL;
    funcd_api_error err;
    if (funcd_api_decode_max(in, in_len, FUNCD_EVAL_DEFAULT_MAX_MESSAGE, &rl, &err) < 0) {
        char msg[1024];
        snprintf(msg, sizeof(msg), "set-namespace: the input is not a ResourceList: %s%s%s\n",
                 err.field, *err.field ? ": " : "", err.message);
        set_text(log, log_len, msg);
        return 1;
    }
    const char *kind = string_at(rl, "kind", NULL);
    if (!kind || strcmp(kind, "ResourceList") != 0) {
        cJSON_Delete(rl);
        set_text(log, log_len, "set-namespace: the input is not a ResourceList\n");
        return 1;
    }
    const char *ns = wanted_namespace(cJSON_GetObjectItemCaseSensitive(rl, "functionConfig"));
    int failed = !ns;
    int rc = failed ? add_error_result(rl, "set-namespace: functionConfig must set data.namespace "
                                           "(ConfigMap) or namespace")
                    : set_all(rl, ns);
    if (rc == 0)
        rc = emit(rl, out, out_len);
    cJSON_Delete(rl);
    if (rc < 0) {
        set_text(log, log_len, "set-namespace: out of memory\n");
        return 1;
    }
    if (failed)
        set_text(log, log_len, "set-namespace: no namespace given in functionConfig\n");
    return failed;
}
