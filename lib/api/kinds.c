/* The table of resource kinds and the ways users name them. */
#include <stddef.h>
#include <string.h>
#include <strings.h>

#include "api/api.h"

static const funcd_kind kind_function = {
    .kind = "Function",
    .list_kind = "FunctionList",
    .plural = "functions",
    .singular = "function",
    .short_name = "fn",
    .has_spec = 1,
};

static const funcd_kind kind_functionconfig = {
    .kind = "FunctionConfig",
    .list_kind = "FunctionConfigList",
    .plural = "functionconfigs",
    .singular = "functionconfig",
    .short_name = "fc",
    .has_spec = 1,
};

static const funcd_kind kind_secret = {
    .kind = "Secret",
    .list_kind = "SecretList",
    .plural = "secrets",
    .singular = "secret",
    .short_name = NULL,
    .has_spec = 0,
};

static const funcd_kind kind_workflow = {
    .kind = "Workflow",
    .list_kind = "WorkflowList",
    .plural = "workflows",
    .singular = "workflow",
    .short_name = "wf",
    .has_spec = 1,
};

static const funcd_kind kind_eventsource = {
    .kind = "EventSource",
    .list_kind = "EventSourceList",
    .plural = "eventsources",
    .singular = "eventsource",
    .short_name = "es",
    .has_spec = 1,
};

static const funcd_kind kind_kvstore = {
    .kind = "KVStore",
    .list_kind = "KVStoreList",
    .plural = "kvstores",
    .singular = "kvstore",
    .short_name = "kv",
    .has_spec = 1,
};

static const funcd_kind kind_egresspolicy = {
    .kind = "EgressPolicy",
    .list_kind = "EgressPolicyList",
    .plural = "egresspolicies",
    .singular = "egresspolicy",
    .short_name = "egp",
    .has_spec = 1,
};

static const funcd_kind kind_site = {
    .kind = "Site",
    .list_kind = "SiteList",
    .plural = "sites",
    .singular = "site",
    .short_name = NULL,
    .has_spec = 1,
};

const funcd_kind *const funcd_kinds[] = {&kind_function,    &kind_functionconfig, &kind_secret,
                                         &kind_workflow,    &kind_eventsource,    &kind_kvstore,
                                         &kind_egresspolicy, &kind_site, NULL};

const funcd_kind *funcd_kind_by_plural(const char *plural)
{
    if (!plural)
        return NULL;
    for (size_t i = 0; funcd_kinds[i]; i++)
        if (strcmp(funcd_kinds[i]->plural, plural) == 0)
            return funcd_kinds[i];
    return NULL;
}

const funcd_kind *funcd_kind_by_kind(const char *kind)
{
    if (!kind)
        return NULL;
    for (size_t i = 0; funcd_kinds[i]; i++)
        if (strcmp(funcd_kinds[i]->kind, kind) == 0)
            return funcd_kinds[i];
    return NULL;
}

static int names_kind(const funcd_kind *k, const char *name)
{
    return strcasecmp(k->kind, name) == 0 || strcasecmp(k->plural, name) == 0 ||
           strcasecmp(k->singular, name) == 0 ||
           (k->short_name && strcasecmp(k->short_name, name) == 0);
}

const funcd_kind *funcd_kind_lookup(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; funcd_kinds[i]; i++)
        if (names_kind(funcd_kinds[i], name))
            return funcd_kinds[i];
    return NULL;
}
