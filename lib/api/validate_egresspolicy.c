/* Validation of EgressPolicies (docs/egress.md): the destinations the
 * functions of a namespace with `spec.network: egress` may reach. */
#include "api/internal.h"
#include "egress/policy.h"

static int check_host(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (!cJSON_IsString(item) || !funcd_egress_valid_host_pattern(item->valuestring))
        return funcd__api_fail(c, "must be a lowercase DNS name (\"api.example.com\") or a "
                                  "wildcard over its subdomains (\"*.example.com\")");
    return 0;
}

static int check_cidr(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    funcd_egress_cidr cidr;
    if (!cJSON_IsString(item) || funcd_egress_parse_cidr(item->valuestring, &cidr) < 0)
        return funcd__api_fail(c, "must be an address range such as \"10.20.0.0/16\" or "
                                  "\"2001:db8::/32\" (host bits zero), or one address");
    return 0;
}

static const funcd__api_range port_range = {1, 65535};

static int check_ports(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (!cJSON_IsArray(item))
        return funcd__api_fail(c, "must be an array of ports");
    if (cJSON_GetArraySize(item) > FUNCD_EGRESS_MAX_PORTS)
        return funcd__api_fail(c, "must have at most %d ports", FUNCD_EGRESS_MAX_PORTS);
    size_t i = 0;
    for (const cJSON *e = item->child; e; e = e->next, i++) {
        size_t old = funcd__api_push_index(c, i);
        int rc = funcd__api_check_int(c, e, &port_range);
        if (rc < 0)
            return rc;
        funcd__api_pop(c, old);
    }
    return 0;
}

static const funcd__api_field rule_fields[] = {
    {"host", 0, check_host, NULL},
    {"cidr", 0, check_cidr, NULL},
    {"ports", 0, check_ports, NULL},
};

static int check_allow(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (!cJSON_IsArray(item))
        return funcd__api_fail(c, "must be an array of rules");
    if (cJSON_GetArraySize(item) > FUNCD_EGRESS_MAX_RULES)
        return funcd__api_fail(c, "must have at most %d rules", FUNCD_EGRESS_MAX_RULES);
    size_t i = 0;
    for (const cJSON *e = item->child; e; e = e->next, i++) {
        size_t old = funcd__api_push_index(c, i);
        int rc = FUNCD__API_CHECK_OBJECT(c, e, rule_fields);
        if (rc < 0)
            return rc;
        if (!funcd__api_member(e, "host") == !funcd__api_member(e, "cidr"))
            return funcd__api_fail(c, "must have exactly one of host or cidr");
        funcd__api_pop(c, old);
    }
    return 0;
}

static const char *const actions[] = {"deny", NULL};

static const funcd__api_field egresspolicy_fields[] = {
    {"allow", 1, check_allow, NULL},
    {"defaultAction", 0, funcd__api_check_enum, actions},
};

int funcd__api_validate_egresspolicy_spec(funcd__api_ctx *c, const cJSON *spec, const void *unused)
{
    return FUNCD__API_CHECK_OBJECT(c, spec, egresspolicy_fields);
}
