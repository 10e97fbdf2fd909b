/*
 * Admission: what a role may write beyond what validation checks, decided
 * where the caller's role is known (docs/security.md, "Host paths").
 *
 * A host path in a Function's source (spec.source.path, a git URL that is a
 * path or file://) shows the host's files to the function: an operator
 * feature. Admin may name any; other roles only directories that resolve
 * under a source root the operator allows (funcd_with_source_root).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controlplane/api.h"
#include "controlplane/quota.h"
#include "funcd/sys/error.h"
#include "objects/objects.h"
#include "port/store.h"
#include "egress/policy.h"
#include "util/hostpath.h"

/* 1 when allowed; 0 with `resp` set to 403 naming `field`. */
static int admit_host_path(const funcd_cp *cp, const funcd_token *t, const char *field,
                           const char *shown, const char *path, funcd_cp_response *resp)
{
    char real[FUNCD_HOSTPATH_MAX];
    const char *why = "is not an absolute path";
    if (path[0] == '/' &&
        funcd_hostpath_allowed(path, cp->source_roots, real, sizeof(real), &why) == 0)
        return 1;
    funcd_cp_status(resp, 403, "Forbidden", field,
                    "%s: %s %s; host paths are for admin only, unless they lie under a source "
                    "root the operator allows (funcd --source-root DIR), rule \"no tenant reads "
                    "the host\" (role %s)",
                    field, shown, why, funcd_role_name(t->role));
    return 0;
}

/* An EgressPolicy rule that opens loopback (where funcd's own listeners
 * are), link-local (cloud metadata) or the like is the operator's: 1 when
 * none does; 0 with `resp` set to 403 naming the rule. */
static int admit_egress(const funcd_token *t, const cJSON *obj, funcd_cp_response *resp)
{
    const cJSON *allow = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(obj, "spec"), "allow");
    int i = 0;
    const cJSON *rule;
    cJSON_ArrayForEach(rule, allow)
    {
        const char *text = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rule, "cidr"));
        funcd_egress_cidr c;
        const char *word = text && funcd_egress_parse_cidr(text, &c) == 0
                               ? funcd_egress_cidr_special(&c)
                               : NULL;
        if (word) {
            char field[48];
            snprintf(field, sizeof(field), "spec.allow[%d].cidr", i);
            funcd_cp_status(resp, 403, "Forbidden", field,
                            "%s: %s opens %s addresses, where the platform's own listeners or "
                            "a cloud's metadata service answer; only an admin may allow them "
                            "(role %s)",
                            field, text, word, funcd_role_name(t->role));
            return 0;
        }
        i++;
    }
    return 1;
}

/* 1 when `text` starts with `ns` and then `sep`. */
static int under_namespace(const char *text, const char *root, const char *ns, char sep)
{
    size_t r = strlen(root), n = strlen(ns);
    return strncmp(text, root, r) == 0 && strncmp(text + r, ns, n) == 0 && text[r + n] == sep;
}

/* A blob or bus EventSource reaches only what its namespace owns: a blob
 * prefix under s3/{ns}/ (its S3 buckets), a bus subject and queue group
 * under "{ns}.". The rest of the blob store (every namespace's invocations,
 * logs and buckets, bundles, the operator's own objects) and of the bus is
 * the operator's: 1 when the source stays inside; 0 with `resp` a 403. */
static int admit_eventsource(const funcd_token *t, const char *ns, const cJSON *obj,
                             funcd_cp_response *resp)
{
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(obj, "spec");
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "type"));
    const cJSON *blob = cJSON_GetObjectItemCaseSensitive(spec, "blob");
    const cJSON *bus = cJSON_GetObjectItemCaseSensitive(spec, "bus");
    const char *field = NULL, *value = NULL, *owned = NULL;
    char root[80];
    if (type && strcmp(type, "blob") == 0) { /* no spec.blob: the whole store */
        value = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(blob, "prefix"));
        if (!value || !under_namespace(value, "s3/", ns, '/'))
            field = "spec.blob.prefix", owned = "its S3 buckets' objects";
        snprintf(root, sizeof(root), "s3/%s/", ns);
    } else if (bus) {
        const char *subject = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(bus, "subject"));
        const char *group = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(bus,
                                                                                 "queueGroup"));
        if (subject && !under_namespace(subject, "", ns, '.'))
            field = "spec.bus.subject", value = subject;
        else if (group && !under_namespace(group, "", ns, '.'))
            field = "spec.bus.queueGroup", value = group;
        owned = "its subjects and queue groups";
        snprintf(root, sizeof(root), "%s.", ns);
    }
    if (!field)
        return 1;
    funcd_cp_status(resp, 403, "Forbidden", field,
                    "%s: \"%s\" is outside what namespace %s owns (%s, \"%s...\"); only an "
                    "admin may reach the rest, which other namespaces and the platform share "
                    "(role %s)",
                    field, value ? value : "", ns, owned, root, funcd_role_name(t->role));
    return 0;
}

int funcd_cp_admit(const funcd_cp *cp, const funcd_kind *kind, const char *ns,
                   const funcd_token *t, const cJSON *obj, funcd_cp_response *resp)
{
    if (t->role == FUNCD_ROLE_ADMIN)
        return 1;
    if (strcmp(kind->kind, "EgressPolicy") == 0)
        return admit_egress(t, obj, resp);
    if (strcmp(kind->kind, "EventSource") == 0)
        return admit_eventsource(t, ns, obj, resp);
    if (strcmp(kind->kind, "Function") != 0 && strcmp(kind->kind, "Site") != 0)
        return 1;
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(obj, "spec");
    const char *network = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "network"));
    if (network && strcmp(network, "host") == 0) {
        funcd_cp_status(resp, 403, "Forbidden", "spec.network",
                        "spec.network: host puts the worker in the node's own network, where "
                        "funcd's listeners and every loopback service of the host answer; only "
                        "an admin may ask for it, on a node whose operator allows it (funcd "
                        "--allow-host-network) (role %s)",
                        funcd_role_name(t->role));
        return 0;
    }
    const cJSON *source = cJSON_GetObjectItemCaseSensitive(spec, "source");
    const char *path = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(source, "path"));
    if (path)
        return admit_host_path(cp, t, "spec.source.path", path, path, resp);
    const cJSON *git = cJSON_GetObjectItemCaseSensitive(source, "git");
    const char *url = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(git, "url"));
    const char *local = url ? funcd_git_url_host_path(url) : NULL;
    if (local)
        return admit_host_path(cp, t, "spec.source.git.url", url, local, resp);
    return 1;
}

/* ---- quotas -------------------------------------------------------------- */

typedef struct counting {
    int64_t n, stop_at;
} counting;

static int count_one(const funcd_store_kv *kv, void *payload)
{
    counting *c = payload;
    return ++c->n >= c->stop_at; /* enough to know the quota is reached */
}

/* 1 when `obj` is already stored: a replace adds nothing. */
static int exists(const funcd_cp *cp, const funcd_kind *kind, const char *ns, const cJSON *obj)
{
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "name"));
    cJSON *old = NULL;
    uint64_t rev;
    if (!name || funcd_objects_get(cp->store, kind, ns, name, &old, &rev) < 0)
        return 0;
    cJSON_Delete(old);
    return 1;
}

static int admit_kv_store_quota(const funcd_cp *cp, const funcd_kind *kind, const char *ns,
                                const cJSON *obj, funcd_cp_response *resp)
{
    if (strcmp(kind->kind, "KVStore") != 0 || cp->kv_store_quota < 0 || exists(cp, kind, ns, obj))
        return 1;
    funcd_buf prefix = FUNCD_BUF_INIT;
    counting c = {0, cp->kv_store_quota};
    int rc = funcd_objects_prefix(&prefix, kind, ns);
    if (rc == 0 && c.stop_at > 0)
        rc = funcd_port_store_list(cp->store, prefix.data, count_one, &c, NULL);
    funcd_buf_free(&prefix);
    if (rc == 0 && c.n < cp->kv_store_quota)
        return 1;
    funcd_cp_status(resp, 403, "Forbidden", NULL,
                    "namespace %s has %lld KVStores, its quota (funcd --kv-store-quota %lld)",
                    ns, (long long)c.n, (long long)cp->kv_store_quota);
    return 0;
}

/* Objects of every kind (WorkflowRuns are not objects: lib/workflow caps
 * them). The count is the namespace's own, and its caller's to see. */
int funcd_cp_admit_quota(const funcd_cp *cp, const funcd_kind *kind, const char *ns,
                         const cJSON *obj, funcd_cp_response *resp, int *held)
{
    *held = 0;
    if (!admit_kv_store_quota(cp, kind, ns, obj, resp))
        return 0;
    if (!cp->counts || cp->object_quota < 0)
        return 1;
    int64_t n = 0;
    int rc = funcd_cp_counts_take(cp->counts, ns, cp->object_quota, &n);
    if (rc > 0) {
        *held = 1;
        return 1;
    }
    if (rc < 0) {
        funcd_cp_status(resp, 503, "ServiceUnavailable", NULL,
                        "cannot count the objects of namespace %s for its quota: %s; retry", ns,
                        funcd_error_last()->message);
        return 0;
    }
    if (exists(cp, kind, ns, obj)) /* only looked for once the namespace is full */
        return 1;
    funcd_cp_status(resp, 403, "Forbidden", NULL,
                    "namespace %s has %lld objects, its quota (funcd --namespace-object-quota "
                    "%lld, every kind together): delete one, or ask the operator to raise it",
                    ns, (long long)n, (long long)cp->object_quota);
    return 0;
}

void funcd_cp_quota_done(const funcd_cp *cp, const char *ns, int held, const cJSON *made)
{
    if (!held || !cp->counts)
        return;
    const char *rv = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(made, "metadata"), "resourceVersion"));
    funcd_cp_counts_give(cp->counts, ns, rv ? strtoull(rv, NULL, 10) : 0);
}
