/*
 * Secrets as environment variables, end to end (docs/secrets.md): a
 * Function's spec.env may take a value from a Secret's key
 * ({secretKeyRef: {name, key}}) and spec.envFrom every key of a Secret
 * ([{secretRef: {name}}]). Values are resolved when workers start; a
 * missing Secret or key is Ready=False naming it (and the function is not
 * served with a value missing); a Secret that changes rolls the workers of
 * the Functions that use it. The stored Function never holds the values.
 *
 * The native fixture worker answers with its GREETING variable.
 *
 *   test_e2e_secret_env CASE
 */
#include "../harness.h"
#include "test_serving_common.h"

#include <stdio.h>
#include <string.h>

#define WAIT_MS 15000

/* Creates (POST) or replaces (PUT) Secret `name` of "default" holding the
 * one key `key` = `value` (stringData). */
static long put_secret(env *e, const char *method, const char *name, const char *key,
                       const char *value)
{
    char body[512], path[256];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":\"%s\"},"
             "\"stringData\":{\"%s\":\"%s\"}}",
             name, key, value);
    if (strcmp(method, "POST") == 0)
        snprintf(path, sizeof(path), NS("default") "/secrets");
    else
        snprintf(path, sizeof(path), NS("default") "/secrets/%s", name);
    return env_req(e, method, path, DEV_TOKEN, body);
}

/* Creates a native Function `name` with `more` after its source (JSON
 * members: "env":{...} and/or "envFrom":[...]). */
static long create_fn(env *e, const char *name, const char *more)
{
    char dir[256];
    if (sv_fixture("native", dir, sizeof(dir)) != 0)
        return -1;
    return sv_create(e, name,
                     "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"},"
                     "%s}",
                     dir, more);
}

/* The greeting the function's worker answers with ("" on failure). */
static const char *greeting(env *e, const char *name)
{
    static char out[128];
    char path[256];
    out[0] = 0;
    snprintf(path, sizeof(path), DP_PATH("%s") "/", name);
    if (sv_invoke(e, "GET", path, NULL) == 200)
        snprintf(out, sizeof(out), "%s", jstr(e->r.json, "greeting") ? jstr(e->r.json, "greeting")
                                                                     : "");
    return out;
}

typedef struct want_greeting {
    const char *name, *value;
} want_greeting;

static int greets(env *e, void *arg)
{
    const want_greeting *w = arg;
    return strcmp(greeting(e, w->name), w->value) == 0;
}

/* Ready=False for the current generation with a message holding `text`. */
typedef struct want_not_ready {
    const char *name, *reason, *text;
} want_not_ready;

static int not_ready(env *e, void *arg)
{
    const want_not_ready *w = arg;
    char path[256];
    snprintf(path, sizeof(path), FN_PATH("%s"), w->name);
    if (env_req(e, "GET", path, DEV_TOKEN, NULL) != 200)
        return 0;
    const cJSON *ready = sv_ready_condition(e->r.json);
    const char *status = jstr(ready, "status"), *reason = jstr(ready, "reason");
    const char *message = jstr(ready, "message");
    return status && reason && message && strcmp(status, "False") == 0 &&
           strcmp(reason, w->reason) == 0 && strstr(message, w->text) &&
           jnum(e->r.json, "status.observedGeneration") >= jnum(e->r.json, "metadata.generation");
}

SV_TEST(secret_key_ref)
{
    CHECK(put_secret(e, "POST", "app", "greeting", "hello-from-a-secret") == 201);
    CHECK(create_fn(e, "skr", "\"env\":{\"GREETING\":{\"secretKeyRef\":{\"name\":\"app\","
                              "\"key\":\"greeting\"}},\"PLAIN\":\"x\"}") == 201);
    CHECK(sv_wait_ready(e, "skr", WAIT_MS));
    CHECK_STR(greeting(e, "skr"), "hello-from-a-secret");
    /* The stored Function keeps the reference, never the value. */
    CHECK(env_req(e, "GET", FN_PATH("skr"), DEV_TOKEN, NULL) == 200);
    CHECK(strstr(e->r.body, "hello-from-a-secret") == NULL);
    CHECK_STR(jstr(e->r.json, "spec.env.GREETING.secretKeyRef.name"), "app");
}

SV_TEST(env_from)
{
    CHECK(put_secret(e, "POST", "all", "GREETING", "from-env-from") == 201);
    CHECK(create_fn(e, "ef", "\"envFrom\":[{\"secretRef\":{\"name\":\"all\"}}]") == 201);
    CHECK(sv_wait_ready(e, "ef", WAIT_MS));
    CHECK_STR(greeting(e, "ef"), "from-env-from");
    /* spec.env wins over envFrom for the same name. */
    CHECK(create_fn(e, "ef2", "\"envFrom\":[{\"secretRef\":{\"name\":\"all\"}}],"
                              "\"env\":{\"GREETING\":\"explicit\"}") == 201);
    CHECK(sv_wait_ready(e, "ef2", WAIT_MS));
    CHECK_STR(greeting(e, "ef2"), "explicit");
}

SV_TEST(missing_secret_then_created)
{
    CHECK(create_fn(e, "ms", "\"env\":{\"GREETING\":{\"secretKeyRef\":{\"name\":\"later\","
                             "\"key\":\"g\"}}}") == 201);
    want_not_ready w = {"ms", "SecretNotFound", "\"later\""};
    CHECK(env_poll(e, WAIT_MS, not_ready, &w));
    CHECK_CONTAINS(jstr(sv_ready_condition(e->r.json), "message"), "spec.env[GREETING]");
    /* Not served with the variable missing. */
    CHECK(sv_invoke(e, "GET", DP_PATH("ms") "/", NULL) == 503);
    /* A key that is not there names the key. */
    CHECK(put_secret(e, "POST", "later", "other", "v") == 201);
    want_not_ready k = {"ms", "SecretNotFound", "\"g\""};
    CHECK(env_poll(e, WAIT_MS, not_ready, &k));
    /* The Secret gains the key: the function becomes Ready and serves it. */
    CHECK(put_secret(e, "PUT", "later", "g", "now-there") == 200);
    CHECK(sv_wait_ready(e, "ms", WAIT_MS));
    want_greeting g = {"ms", "now-there"};
    CHECK(env_poll(e, WAIT_MS, greets, &g));
    /* envFrom of a missing Secret names it too. */
    CHECK(create_fn(e, "ms2", "\"envFrom\":[{\"secretRef\":{\"name\":\"nope\"}}]") == 201);
    want_not_ready n = {"ms2", "SecretNotFound", "spec.envFrom[0]"};
    CHECK(env_poll(e, WAIT_MS, not_ready, &n));
}

SV_TEST(secret_change_rolls)
{
    CHECK(put_secret(e, "POST", "roll", "greeting", "one") == 201);
    CHECK(create_fn(e, "rl", "\"env\":{\"GREETING\":{\"secretKeyRef\":{\"name\":\"roll\","
                             "\"key\":\"greeting\"}}}") == 201);
    CHECK(sv_wait_ready(e, "rl", WAIT_MS));
    CHECK_STR(greeting(e, "rl"), "one");
    CHECK(put_secret(e, "PUT", "roll", "greeting", "two") == 200);
    want_greeting g = {"rl", "two"};
    CHECK(env_poll(e, WAIT_MS, greets, &g));
    /* (A process' environment never changes: "two" comes from a new worker.) */
    /* A Secret nobody uses changes nothing for this function. */
    CHECK(put_secret(e, "POST", "unrelated", "k", "v") == 201);
    CHECK_STR(greeting(e, "rl"), "two");
}

SV_TEST(bad_references)
{
    static const struct {
        const char *more, *field;
    } bad[] = {
        {"\"env\":{\"G\":{\"secretKeyRef\":{\"name\":\"Bad_Name\",\"key\":\"k\"}}}",
         "spec.env[G].secretKeyRef.name"},
        {"\"env\":{\"G\":{\"secretKeyRef\":{\"name\":\"s\"}}}", "spec.env[G].secretKeyRef.key"},
        {"\"env\":{\"G\":{\"secretKeyRef\":{\"name\":\"s\",\"key\":\"../k\"}}}",
         "spec.env[G].secretKeyRef.key"},
        {"\"env\":{\"G\":{\"configMapKeyRef\":{\"name\":\"s\",\"key\":\"k\"}}}", "spec.env[G]"},
        {"\"env\":{\"G\":7}", "spec.env[G]"},
        {"\"envFrom\":{\"secretRef\":{\"name\":\"s\"}}", "spec.envFrom"},
        {"\"envFrom\":[{\"secretRef\":{}}]", "spec.envFrom[0].secretRef.name"},
        {"\"envFrom\":[{\"prefix\":\"A\"}]", "spec.envFrom[0]"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char name[16];
        snprintf(name, sizeof(name), "bad%zu", i);
        CHECK(create_fn(e, name, bad[i].more) == 400);
        CHECK_CONTAINS(jstr(e->r.json, "message"), bad[i].field);
    }
}

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    sv_init();
    SV_RUN(only, ran, secret_key_ref);
    SV_RUN(only, ran, env_from);
    SV_RUN(only, ran, missing_secret_then_created);
    SV_RUN(only, ran, secret_change_rolls);
    SV_RUN(only, ran, bad_references);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no case %s\n", only);
        return 2;
    }
    return HARNESS_END();
}
