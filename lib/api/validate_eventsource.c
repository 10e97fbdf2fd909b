/* Validation of EventSource specs (docs/eventing.md). */
#include <string.h>

#include "api/internal.h"
#include "bus/subject.h"
#include "eventing/cron.h"
#include "funcd/sys/error.h"

#define MAX_PREFIX 1024
#define MAX_SUBJECT 256

static const char *const types[] = {"cron", "blob", "bus", "webhook", NULL};

static int check_schedule(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (!cJSON_IsString(item))
        return funcd__api_fail(c, "must be a string");
    funcd_cron cron;
    char err[256];
    if (funcd_cron_parse(item->valuestring, &cron, err, sizeof(err)) < 0)
        return funcd__api_fail(c, "%s", err);
    return 0;
}

static int check_timezone(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (!cJSON_IsString(item) || strcmp(item->valuestring, "UTC") != 0)
        return funcd__api_fail(c, "must be UTC: schedules are read in UTC only (write the "
                                  "hours in UTC)");
    return 0;
}

static const funcd__api_field cron_fields[] = {
    {"schedule", 1, check_schedule, NULL},
    {"timezone", 0, check_timezone, NULL},
};

static int check_cron(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return FUNCD__API_CHECK_OBJECT(c, item, cron_fields);
}

static const funcd__api_range prefix_len = {0, MAX_PREFIX};
static const funcd__api_range poll_interval = {100, 24LL * 3600 * 1000};

static const funcd__api_field blob_fields[] = {
    {"prefix", 0, funcd__api_check_string, &prefix_len},
    {"pollInterval", 0, funcd__api_check_duration, &poll_interval},
};

static int check_blob(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return FUNCD__API_CHECK_OBJECT(c, item, blob_fields);
}

static int check_subject(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (!cJSON_IsString(item) || strlen(item->valuestring) > MAX_SUBJECT ||
        funcd_bus_check_subject(item->valuestring, 1, "subscribe to") < 0)
        return funcd__api_fail(c, "must be a bus subject of dot-separated tokens (at most %d "
                                  "characters; '*' stands for one token, a last '>' for the "
                                  "rest), such as \"orders.created\"",
                               MAX_SUBJECT);
    return 0;
}

static int check_queue_group(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (!cJSON_IsString(item) || !item->valuestring[0] || strlen(item->valuestring) > 64 ||
        funcd_bus_check_queue_group(item->valuestring, "x") < 0)
        return funcd__api_fail(c, "must be a queue group name: 1 to 64 characters, no spaces");
    return 0;
}

static const funcd__api_field bus_fields[] = {
    {"subject", 1, check_subject, NULL},
    {"queueGroup", 0, check_queue_group, NULL},
};

static int check_bus(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return FUNCD__API_CHECK_OBJECT(c, item, bus_fields);
}

static int check_secret_key(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (!cJSON_IsString(item) || !funcd__api_is_secret_key(item->valuestring))
        return funcd__api_fail(c, "must be a key of the Secret: 1 to 253 letters, digits, '-', "
                                  "'_' or '.', other than \".\" and \"..\"");
    return 0;
}

static const funcd__api_field secret_ref_fields[] = {
    {"name", 1, funcd__api_check_dns_label, NULL},
    {"key", 1, check_secret_key, NULL},
};

static int check_secret_ref(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return FUNCD__API_CHECK_OBJECT(c, item, secret_ref_fields);
}

static const funcd__api_field webhook_fields[] = {
    {"secretRef", 0, check_secret_ref, NULL},
};

static int check_webhook(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return FUNCD__API_CHECK_OBJECT(c, item, webhook_fields);
}

static const funcd__api_field target_fields[] = {
    {"function", 0, funcd__api_check_dns_label, NULL},
    {"workflow", 0, funcd__api_check_dns_label, NULL},
};

static int check_target(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    int rc = FUNCD__API_CHECK_OBJECT(c, item, target_fields);
    if (rc < 0)
        return rc;
    int fn = funcd__api_member(item, "function") != NULL;
    int wf = funcd__api_member(item, "workflow") != NULL;
    if (fn == wf)
        return funcd__api_fail(c, "must name one function or one workflow: {function: NAME} or "
                                  "{workflow: NAME}");
    return 0;
}

static const funcd__api_range attempts = {1, 100};
static const funcd__api_range backoff_ms = {1, 24LL * 3600 * 1000};
static const funcd__api_range timeout_ms = {1, 3600LL * 1000};

static const funcd__api_field backoff_fields[] = {
    {"initial", 0, funcd__api_check_duration, &backoff_ms},
    {"max", 0, funcd__api_check_duration, &backoff_ms},
};

static int check_backoff(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    int rc = FUNCD__API_CHECK_OBJECT(c, item, backoff_fields);
    const cJSON *initial = funcd__api_member(item, "initial"), *max = funcd__api_member(item, "max");
    uint64_t i_ms, m_ms;
    if (rc == 0 && initial && max && funcd_parse_duration_ms(initial->valuestring, &i_ms) == 0 &&
        funcd_parse_duration_ms(max->valuestring, &m_ms) == 0 && m_ms < i_ms) {
        funcd__api_push_field(c, "max");
        return funcd__api_fail(c, "must be at least spec.delivery.backoff.initial");
    }
    return rc;
}

static const funcd__api_field delivery_fields[] = {
    {"attempts", 0, funcd__api_check_int, &attempts},
    {"backoff", 0, check_backoff, NULL},
    {"timeout", 0, funcd__api_check_duration, &timeout_ms},
};

static int check_delivery(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return FUNCD__API_CHECK_OBJECT(c, item, delivery_fields);
}

static const funcd__api_field spec_fields[] = {
    {"type", 1, funcd__api_check_enum, types},
    {"cron", 0, check_cron, NULL},
    {"blob", 0, check_blob, NULL},
    {"bus", 0, check_bus, NULL},
    {"webhook", 0, check_webhook, NULL},
    {"target", 1, check_target, NULL},
    {"delivery", 0, check_delivery, NULL},
};

int funcd__api_validate_eventsource_spec(funcd__api_ctx *c, const cJSON *spec, const void *unused)
{
    int rc = FUNCD__API_CHECK_OBJECT(c, spec, spec_fields);
    if (rc < 0)
        return rc;
    const char *type = cJSON_GetStringValue(funcd__api_member(spec, "type"));
    /* The settings of the type: required where there is no default, and
     * no other type's (a spec that says two things means neither). */
    for (size_t i = 0; types[i]; i++) {
        const cJSON *settings = funcd__api_member(spec, types[i]);
        int mine = strcmp(types[i], type) == 0;
        size_t old = funcd__api_push_field(c, types[i]);
        if (!mine && settings)
            return funcd__api_fail(c, "only for type %s (this source's type is %s)", types[i],
                                   type);
        if (mine && !settings && (strcmp(type, "cron") == 0 || strcmp(type, "bus") == 0))
            return funcd__api_fail(c, "required for type %s", type);
        funcd__api_pop(c, old);
    }
    return 0;
}
