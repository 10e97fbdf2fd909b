/*
 * Several tenants on one platform (issue 11, findings 8 and 10): a viewer
 * reads a Secret's metadata, type and keys but none of its values, through
 * GET, list and watch, while developers and admins read them; a Secret is
 * sealed before it reaches the store driver, whatever the driver (here the
 * memory store given to the platform, read behind its back).
 */
#include "../harness.h"
#include "env.h"

#include "funcd/sys/error.h"
#include "objects/encryption.h"

#define SECRETS NS("default") "/secrets"
#define SECRET_JSON(user)                                                                          \
    "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":\"creds\","     \
    "\"annotations\":{\"kubectl.kubernetes.io/last-applied-configuration\":\"{\\\"data\\\":"      \
    "\\\"c2VjcmV0\\\"}\"}},\"type\":\"Opaque\",\"stringData\":{\"user\":\"" user "\"},"          \
    "\"data\":{\"pass\":\"c2VjcmV0\"}}"

/* A viewer's copy: keys with empty values, marked, no last-applied copy. */
static const char *redaction_problem(const cJSON *secret)
{
    if (!secret)
        return "no object";
    const char *user = jstr(secret, "data.user"), *pass = jstr(secret, "data.pass");
    if (!user || !pass)
        return "the keys of data are missing";
    if (*user || *pass)
        return "a value of data is visible";
    if (jget(secret, "stringData"))
        return "stringData is visible";
    const cJSON *ann = jget(secret, "metadata.annotations");
    if (cJSON_GetObjectItemCaseSensitive(ann, "kubectl.kubernetes.io/last-applied-configuration"))
        return "the last-applied annotation is visible";
    const char *mark = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(ann, "funcd.dev/data-redacted"));
    if (!mark || strcmp(mark, "true") != 0)
        return "no funcd.dev/data-redacted annotation";
    if (!jstr(secret, "type") || strcmp(jstr(secret, "type"), "Opaque") != 0)
        return "the type is missing";
    return NULL;
}

#define CHECK_REDACTED(obj)                                                                        \
    do {                                                                                           \
        const char *p_ = redaction_problem(obj);                                                   \
        if (p_)                                                                                    \
            FAILF("%s: %.600s", p_, e->r.body);                                                    \
    } while (0)

E2E_TEST(viewer_sees_secret_keys_not_values)
{
    e2e_watch *w = env_watch(e, SECRETS "?watch=true", VIEWER_TOKEN);
    CHECK_INT(e2e_watch_status(w, 5000), 200);
    CHECK_INT(REQ("POST", SECRETS, DEV_TOKEN, SECRET_JSON("hello")), 201);
    CHECK_STR(jstr(e->r.json, "data.user"), "aGVsbG8=");

    CHECK_INT(REQ("GET", SECRETS "/creds", VIEWER_TOKEN, NULL), 200);
    CHECK_REDACTED(e->r.json);
    CHECK(strstr(e->r.body, "c2VjcmV0") == NULL && strstr(e->r.body, "aGVsbG8=") == NULL);
    CHECK_STR(jstr(e->r.json, "metadata.name"), "creds");
    CHECK(jstr(e->r.json, "metadata.resourceVersion") != NULL);

    CHECK_INT(REQ("GET", SECRETS, VIEWER_TOKEN, NULL), 200);
    CHECK_STR(jstr(e->r.json, "kind"), "SecretList");
    CHECK_INT(cJSON_GetArraySize(jget(e->r.json, "items")), 1);
    CHECK_REDACTED(cJSON_GetArrayItem(jget(e->r.json, "items"), 0));
    CHECK(strstr(e->r.body, "c2VjcmV0") == NULL);

    /* the live event, and a new watch's ADDED */
    cJSON *ev = env_event(e, w, 5000);
    CHECK_EVENT(ev, "ADDED", "creds");
    CHECK_REDACTED(jget(ev, "object"));
    CHECK_INT(REQ("PUT", SECRETS "/creds", DEV_TOKEN, SECRET_JSON("world")), 200);
    ev = env_event(e, w, 5000);
    CHECK_EVENT(ev, "MODIFIED", "creds");
    CHECK_REDACTED(jget(ev, "object"));
    e2e_watch *w2 = env_watch(e, SECRETS "?watch=1", VIEWER_TOKEN);
    ev = env_event(e, w2, 5000);
    CHECK_EVENT(ev, "ADDED", "creds");
    CHECK_REDACTED(jget(ev, "object"));

    /* developers and admins read the values */
    CHECK_INT(REQ("GET", SECRETS "/creds", DEV_TOKEN, NULL), 200);
    CHECK_STR(jstr(e->r.json, "data.user"), "d29ybGQ=");
    CHECK_STR(jstr(e->r.json, "data.pass"), "c2VjcmV0");
    CHECK_INT(REQ("GET", SECRETS "/creds", ADMIN_TOKEN, NULL), 200);
    CHECK_STR(jstr(e->r.json, "data.pass"), "c2VjcmV0");
    CHECK(!cJSON_GetObjectItemCaseSensitive(jget(e->r.json, "metadata.annotations"),
                                            "funcd.dev/data-redacted"));
    CHECK_INT(REQ("GET", API "/secrets", ADMIN_TOKEN, NULL), 200);
    CHECK_STR(jstr(cJSON_GetArrayItem(jget(e->r.json, "items"), 0), "data.pass"), "c2VjcmV0");
    e2e_watch *w3 = env_watch(e, SECRETS "?watch=1", DEV_TOKEN);
    ev = env_event(e, w3, 5000);
    CHECK_EVENT(ev, "ADDED", "creds");
    CHECK_STR(jstr(ev, "object.data.pass"), "c2VjcmV0");
    /* the viewer's DELETED event carries no value either */
    CHECK_INT(REQ("DELETE", SECRETS "/creds", DEV_TOKEN, NULL), 200);
    ev = env_event(e, w, 5000);
    CHECK_EVENT(ev, "DELETED", "creds");
    CHECK_REDACTED(jget(ev, "object"));
    /* other kinds are not touched for a viewer */
    CHECK_INT(REQ("POST", NS("default") "/functions", DEV_TOKEN, FUNCTION_JSON("f", "m.h")), 201);
    CHECK_INT(REQ("GET", NS("default") "/functions/f", VIEWER_TOKEN, NULL), 200);
    CHECK_STR(jstr(e->r.json, "spec.handler"), "m.h");
}

/* The store the platform was given holds the Secret sealed; through the
 * API it reads back. */
static funcd_store *raw_store;

static funcd_store *memory_store(void)
{
    raw_store = NULL;
    funcd_store_memory_new(&raw_store, 0);
    return raw_store;
}

E2E_TEST_WITH(secrets_reach_the_store_driver_sealed, memory_store())
{
    CHECK_INT(REQ("POST", SECRETS, DEV_TOKEN, SECRET_JSON("hello")), 201);
    funcd_store_value v = {0};
    CHECK_INT(raw_store->get(raw_store, "/registry/secrets/default/creds", &v), 0);
    int sealed = funcd_enc_is_sealed(v.value, v.len);
    int clear = v.value && (strstr(v.value, "c2VjcmV0") || strstr(v.value, "aGVsbG8="));
    free(v.value);
    CHECK(sealed);
    CHECK(!clear);
    /* Functions are not sealed: only Secrets */
    CHECK_INT(REQ("POST", NS("default") "/functions", DEV_TOKEN, FUNCTION_JSON("f", "m.h")), 201);
    CHECK_INT(raw_store->get(raw_store, "/registry/functions/default/f", &v), 0);
    sealed = funcd_enc_is_sealed(v.value, v.len);
    free(v.value);
    CHECK(!sealed);
    CHECK_INT(REQ("GET", SECRETS "/creds", DEV_TOKEN, NULL), 200);
    CHECK_STR(jstr(e->r.json, "data.pass"), "c2VjcmV0");
}

int main(void)
{
    e2e_client_global_init();
    RUN_ISOLATED(viewer_sees_secret_keys_not_values);
    RUN_ISOLATED(secrets_reach_the_store_driver_sealed);
    e2e_client_global_cleanup();
    return HARNESS_END();
}
