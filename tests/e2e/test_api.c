/*
 * The control-plane HTTP API over real HTTP (docs/api.md): every
 * route, status code and error shape, authentication and authorization,
 * and the three kinds. Each test embeds its own platform.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "env.h"

#define FNS NS("default") "/functions"
#define FN_HELLO FNS "/hello"

/* ---- unauthenticated endpoints, version ------------------------------------- */

E2E_TEST(healthz_needs_no_token)
{
    CHECK_INT(REQ("GET", "/healthz", NULL, NULL), 200);
    CHECK_STR(jstr(e->r.json, "status"), "ok");
}

E2E_TEST(version_needs_a_token)
{
    CHECK_INT(REQ("GET", "/version", NULL, NULL), 401);
    CHECK_STATUS(401, "Unauthorized", NULL);
    CHECK_INT(REQ("GET", "/version", VIEWER_TOKEN, NULL), 200);
    CHECK_STR(jstr(e->r.json, "version"), FUNCD_VERSION_STRING);
    CHECK_STR(jstr(e->r.json, "apiVersion"), "funcd.dev/v1");
    CHECK_STR(jstr(e->r.json, "backends.store"), "memory");
    CHECK(jstr(e->r.json, "backends.blob") != NULL);
    CHECK(jstr(e->r.json, "backends.bus") != NULL);
    CHECK_STR(jstr(e->r.json, "backends.gateway"), "embedded");
}

/* ---- list / create / get ---------------------------------------------------- */

E2E_TEST(list_empty_collection)
{
    char ct[128];
    CHECK_INT(REQ("GET", FNS, DEV_TOKEN, NULL), 200);
    CHECK_STR(jstr(e->r.json, "kind"), "FunctionList");
    CHECK_STR(jstr(e->r.json, "apiVersion"), "funcd.dev/v1");
    const char *rv = jstr(e->r.json, "metadata.resourceVersion");
    CHECK(rv != NULL && strspn(rv, "0123456789") == strlen(rv) && *rv);
    CHECK(cJSON_IsArray(jget(e->r.json, "items")));
    CHECK_INT(cJSON_GetArraySize(jget(e->r.json, "items")), 0);
    CHECK(e2e_resp_header(&e->r, "Content-Type", ct, sizeof(ct)) != NULL);
    CHECK_CONTAINS(ct, "application/json");
}

E2E_TEST(create_get_list_and_conflict)
{
    CHECK_INT(REQ("POST", FNS, DEV_TOKEN, FUNCTION_JSON("hello", "main.handler")), 201);
    cJSON *created = env_keep(e, cJSON_Duplicate(e->r.json, 1));
    CHECK_STR(jstr(created, "kind"), "Function");
    CHECK_STR(jstr(created, "apiVersion"), "funcd.dev/v1");
    CHECK_STR(jstr(created, "metadata.name"), "hello");
    CHECK_STR(jstr(created, "metadata.namespace"), "default");
    CHECK(jstr(created, "metadata.uid") && strlen(jstr(created, "metadata.uid")) == 36);
    CHECK(jnum(created, "metadata.generation") == 1);
    CHECK(jstr(created, "metadata.creationTimestamp") &&
          strlen(jstr(created, "metadata.creationTimestamp")) >= 20);
    CHECK(jrv(created) > 0);
    CHECK_STR(jstr(created, "spec.handler"), "main.handler");
    CHECK(jget(created, "status") == NULL);

    CHECK_INT(REQ("GET", FN_HELLO, DEV_TOKEN, NULL), 200);
    CHECK_STR(jstr(e->r.json, "metadata.uid"), jstr(created, "metadata.uid"));
    CHECK(jrv(e->r.json) >= jrv(created)); /* the controller may have written status */

    CHECK_INT(REQ("GET", FNS, DEV_TOKEN, NULL), 200);
    const cJSON *items = jget(e->r.json, "items");
    CHECK_INT(cJSON_GetArraySize(items), 1);
    CHECK_STR(jstr(cJSON_GetArrayItem(items, 0), "metadata.name"), "hello");
    CHECK(jrv(e->r.json) >= jrv(created));

    CHECK_INT(REQ("POST", FNS, DEV_TOKEN, FUNCTION_JSON("hello", "other.handler")), 409);
    CHECK_STATUS(409, "AlreadyExists", NULL);
    CHECK_INT(REQ("GET", FN_HELLO, DEV_TOKEN, NULL), 200);
    CHECK_STR(jstr(e->r.json, "spec.handler"), "main.handler");
}

E2E_TEST(get_missing_is_404)
{
    CHECK_INT(REQ("GET", FNS "/nope", DEV_TOKEN, NULL), 404);
    CHECK_STATUS(404, "NotFound", NULL);
    CHECK_CONTAINS(jstr(e->r.json, "message"), "nope");
}

/* ---- replace ------------------------------------------------------------------ */

E2E_TEST(put_replaces_and_counts_generations)
{
    CHECK_INT(REQ("POST", FNS, DEV_TOKEN, FUNCTION_JSON("hello", "main.handler")), 201);
    cJSON *created = env_keep(e, cJSON_Duplicate(e->r.json, 1));
    CHECK(env_settle(e, FN_HELLO));

    CHECK_INT(REQ("PUT", FN_HELLO, DEV_TOKEN, FUNCTION_JSON("hello", "main.other")), 200);
    CHECK_STR(jstr(e->r.json, "spec.handler"), "main.other");
    CHECK(jnum(e->r.json, "metadata.generation") == 2);
    CHECK_STR(jstr(e->r.json, "metadata.uid"), jstr(created, "metadata.uid"));
    CHECK_STR(jstr(e->r.json, "metadata.creationTimestamp"),
              jstr(created, "metadata.creationTimestamp"));
    uint64_t rv2 = jrv(e->r.json);
    CHECK(rv2 > jrv(created));
    CHECK(env_settle(e, FN_HELLO));

    /* Labels are metadata: the generation stays. */
    CHECK_INT(REQ("PUT", FN_HELLO, DEV_TOKEN,
                  "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
                  "\"hello\",\"labels\":{\"team\":\"a\"}},\"spec\":{\"runtime\":\"python3\","
                  "\"handler\":\"main.other\",\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"}}}"),
              200);
    CHECK(jnum(e->r.json, "metadata.generation") == 2);
    CHECK_STR(jstr(e->r.json, "metadata.labels.team"), "a");
    CHECK_STR(jstr(e->r.json, "metadata.uid"), jstr(created, "metadata.uid"));
    CHECK(jrv(e->r.json) > rv2);
    CHECK(env_settle(e, FN_HELLO));

    CHECK_INT(REQ("GET", FN_HELLO, DEV_TOKEN, NULL), 200);
    CHECK(jnum(e->r.json, "metadata.generation") == 2);
    CHECK_STR(jstr(e->r.json, "metadata.labels.team"), "a");
}

E2E_TEST(put_with_stale_resource_version_conflicts)
{
    char body[1024];
    CHECK_INT(REQ("POST", FNS, DEV_TOKEN, FUNCTION_JSON("hello", "main.handler")), 201);
    uint64_t rv1 = jrv(e->r.json);
    CHECK(env_settle(e, FN_HELLO));
    CHECK_INT(REQ("PUT", FN_HELLO, DEV_TOKEN, FUNCTION_JSON("hello", "main.two")), 200);
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"hello\",\"resourceVersion\":\"%llu\"},\"spec\":{\"runtime\":\"python3\","
             "\"handler\":\"main.three\",\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"}}}",
             (unsigned long long)rv1);
    CHECK_INT(REQ("PUT", FN_HELLO, DEV_TOKEN, body), 409);
    CHECK_STATUS(409, "Conflict", "metadata.resourceVersion");
    CHECK(env_settle(e, FN_HELLO)); /* leaves the current object in e->r */
    CHECK_STR(jstr(e->r.json, "spec.handler"), "main.two");

    /* The current resourceVersion is accepted. */
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"hello\",\"resourceVersion\":\"%llu\"},\"spec\":{\"runtime\":\"python3\","
             "\"handler\":\"main.three\",\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"}}}",
             (unsigned long long)jrv(e->r.json));
    CHECK_INT(REQ("PUT", FN_HELLO, DEV_TOKEN, body), 200);
    CHECK_STR(jstr(e->r.json, "spec.handler"), "main.three");
}

E2E_TEST(put_creates_a_new_name)
{
    CHECK_INT(REQ("PUT", FNS "/fresh", DEV_TOKEN, FUNCTION_JSON("fresh", "main.handler")), 201);
    CHECK(jnum(e->r.json, "metadata.generation") == 1);
    CHECK(jstr(e->r.json, "metadata.uid") != NULL);
    CHECK_INT(REQ("GET", FNS "/fresh", DEV_TOKEN, NULL), 200);
}

/* A uid names one incarnation: a PUT for another one is a conflict. */
E2E_TEST(put_with_another_uid_conflicts)
{
    CHECK_INT(REQ("POST", FNS, DEV_TOKEN, FUNCTION_JSON("hello", "main.handler")), 201);
    CHECK(env_settle(e, FN_HELLO));
    CHECK_INT(REQ("PUT", FN_HELLO, DEV_TOKEN,
                  "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
                  "\"hello\",\"uid\":\"11111111-2222-4333-8444-555555555555\"},\"spec\":{"
                  "\"runtime\":\"python3\",\"handler\":\"m.x\",\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"}}}"),
              409);
    CHECK_STATUS(409, "Conflict", NULL);
    CHECK_INT(REQ("GET", FN_HELLO, DEV_TOKEN, NULL), 200);
    CHECK_STR(jstr(e->r.json, "spec.handler"), "main.handler");
}

/*
 * A PUT without metadata.resourceVersion is an unconditional replace (last
 * write wins): it must not answer 409 because another write (another client,
 * or the controller writing status) landed between the server's read and its
 * write. Several clients replacing one object at once keep that window busy.
 */
#define PUTTERS 4
#define PUTS_EACH 40

typedef struct putter {
    const char *base;
    int id;
    int ok;
    long bad_status;
    char bad_body[256];
} putter;

/* A large annotation makes every read-modify-write of the object slow
 * enough that the controller's status write regularly lands inside it. */
#define BALLAST_BYTES (120 * 1024)

static char *function_with_ballast(int id, int i)
{
    static const char head[] =
        "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
        "\"hello\",\"annotations\":{\"ballast\":\"";
    char tail[512];
    snprintf(tail, sizeof(tail),
             "\"}},\"spec\":{\"runtime\":\"python3\",\"handler\":\"main.h%d_%d\",\"source\":"
             "{\"bundle\":\"" NO_SUCH_BUNDLE "\"}}}",
             id, i);
    size_t hl = sizeof(head) - 1, tl = strlen(tail);
    char *body = malloc(hl + BALLAST_BYTES + tl + 1);
    if (!body)
        return NULL;
    memcpy(body, head, hl);
    memset(body + hl, 'x', BALLAST_BYTES);
    memcpy(body + hl + BALLAST_BYTES, tail, tl + 1);
    return body;
}

static void *put_many(void *arg)
{
    putter *pt = arg;
    e2e_http *h = e2e_http_new(pt->base);
    e2e_resp r = E2E_RESP_INIT;
    for (int i = 0; h && i < PUTS_EACH; i++) {
        char *body = function_with_ballast(pt->id, i);
        long status = body ? e2e_http_do(h, "PUT", FN_HELLO, DEV_TOKEN, body, &r) : 0;
        free(body);
        if (status == 200) {
            pt->ok++;
        } else {
            pt->bad_status = r.status;
            snprintf(pt->bad_body, sizeof(pt->bad_body), "%s", r.body ? r.body : "");
        }
    }
    e2e_resp_free(&r);
    e2e_http_free(h);
    return NULL;
}

E2E_TEST(put_without_resource_version_is_unconditional)
{
    CHECK_INT(REQ("POST", FNS, DEV_TOKEN, FUNCTION_JSON("hello", "main.handler")), 201);
    putter putters[PUTTERS];
    pthread_t threads[PUTTERS];
    for (int i = 0; i < PUTTERS; i++) {
        putters[i] = (putter){.base = e->base, .id = i};
        pthread_create(&threads[i], NULL, put_many, &putters[i]);
    }
    for (int i = 0; i < PUTTERS; i++)
        pthread_join(threads[i], NULL);
    for (int i = 0; i < PUTTERS; i++)
        if (putters[i].ok != PUTS_EACH)
            FAILF("client %d: %d of %d PUTs without resourceVersion succeeded; last failure "
                  "HTTP %ld: %s",
                  i, putters[i].ok, PUTS_EACH, putters[i].bad_status, putters[i].bad_body);
    CHECK_INT(REQ("GET", FN_HELLO, DEV_TOKEN, NULL), 200);
    CHECK(jnum(e->r.json, "metadata.generation") == 1 + PUTTERS * PUTS_EACH);
}

/* ---- delete ------------------------------------------------------------------ */

typedef struct churn {
    const char *base;
    atomic_int *stop;
} churn;

/* Replaces (or re-creates) FN_HELLO until told to stop. */
static void *churn_main(void *arg)
{
    churn *c = arg;
    e2e_http *h = e2e_http_new(c->base);
    e2e_resp r = E2E_RESP_INIT;
    for (int i = 0; h && !atomic_load(c->stop) && i < 5000; i++) {
        char *body = function_with_ballast(99, i);
        if (body)
            e2e_http_do(h, "PUT", FN_HELLO, DEV_TOKEN, body, &r);
        free(body);
    }
    e2e_resp_free(&r);
    e2e_http_free(h);
    return NULL;
}

/* A DELETE without a precondition either deletes (200) or finds nothing
 * (404); a concurrent write is no reason to refuse it with 409. */
E2E_TEST(delete_without_precondition_never_conflicts)
{
    atomic_int stop = 0;
    churn c = {e->base, &stop};
    pthread_t threads[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&threads[i], NULL, churn_main, &c);
    long bad = 0;
    char bad_body[256] = "";
    for (int i = 0; i < 400 && !bad; i++) {
        long code = REQ("DELETE", FN_HELLO, DEV_TOKEN, NULL);
        if (code != 200 && code != 404) {
            bad = code;
            snprintf(bad_body, sizeof(bad_body), "%s", e->r.body);
        }
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(threads[i], NULL);
    if (bad)
        FAILF("DELETE answered %ld: %s", bad, bad_body);
}

E2E_TEST(delete_returns_the_object_then_404)
{
    CHECK_INT(REQ("POST", FNS, DEV_TOKEN, FUNCTION_JSON("hello", "main.handler")), 201);
    const char *uid = jstr(env_keep(e, cJSON_Duplicate(e->r.json, 1)), "metadata.uid");
    CHECK(env_settle(e, FN_HELLO));
    CHECK_INT(REQ("DELETE", FN_HELLO, DEV_TOKEN, NULL), 200);
    CHECK_STR(jstr(e->r.json, "kind"), "Function");
    CHECK_STR(jstr(e->r.json, "metadata.name"), "hello");
    CHECK_STR(jstr(e->r.json, "metadata.uid"), uid);
    CHECK_INT(REQ("GET", FN_HELLO, DEV_TOKEN, NULL), 404);
    CHECK_STATUS(404, "NotFound", NULL);
    CHECK_INT(REQ("DELETE", FN_HELLO, DEV_TOKEN, NULL), 404);
    CHECK_STATUS(404, "NotFound", NULL);
    CHECK_INT(REQ("GET", FNS, DEV_TOKEN, NULL), 200);
    CHECK_INT(cJSON_GetArraySize(jget(e->r.json, "items")), 0);
}

/* ---- bad requests ------------------------------------------------------------- */

typedef struct bad_case {
    const char *method, *path, *body, *field; /* field NULL: not checked */
} bad_case;

E2E_TEST(bad_requests_are_400_naming_the_field)
{
    static const bad_case cases[] = {
        {"POST", FNS, FUNCTION_JSON("Bad_Name", "main.handler"), "metadata.name"},
        {"POST", FNS,
         "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":\"a\"},"
         "\"spec\":{\"runtime\":\"python3\",\"handler\":\"m.h\",\"bogus\":1,\"source\":"
         "{\"bundle\":\"" NO_SUCH_BUNDLE "\"}}}",
         "spec.bogus"},
        {"POST", FNS,
         "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":\"a\"},"
         "\"spec\":{\"runtime\":\"cobol\",\"handler\":\"m.h\",\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"}}}",
         "spec.runtime"},
        {"POST", FNS,
         "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":\"a\"},"
         "\"spec\":{\"runtime\":\"python3\",\"handler\":\"m.h\",\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"},"
         "\"scaling\":{\"minReplicas\":3,\"maxReplicas\":2}}}",
         "spec.scaling.maxReplicas"},
        {"POST", FNS,
         "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":\"a\","
         "\"namespace\":\"other\"},\"spec\":{\"runtime\":\"python3\",\"handler\":\"m.h\","
         "\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"}}}",
         "metadata.namespace"},
        {"PUT", FNS "/b", FUNCTION_JSON("a", "main.handler"), "metadata.name"},
        {"POST", NS("Not_A_Label") "/functions", FUNCTION_JSON("a", "main.handler"),
         "metadata.namespace"},
        {"POST", FNS, FUNCTIONCONFIG_JSON("a", "img"), NULL}, /* wrong kind for the URL */
        {"POST", FNS, "", NULL},
        {"POST", FNS, "{\"apiVersion\": ", NULL},
        {"POST", FNS, "[1,2,3]", NULL},
        {"PUT", FNS "/a", "", NULL},
        {"GET", FNS "?watch=true&resourceVersion=abc", NULL, "resourceVersion"},
        {"GET", FNS "?watch=true&resourceVersion=12abc", NULL, "resourceVersion"},
        {"PUT", FNS "/a",
         "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":\"a\","
         "\"resourceVersion\":\"abc\"},\"spec\":{\"runtime\":\"python3\",\"handler\":\"m.h\","
         "\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"}}}",
         "metadata.resourceVersion"},
        {"PUT", FNS "/a",
         "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":\"a\","
         "\"resourceVersion\":7},\"spec\":{\"runtime\":\"python3\",\"handler\":\"m.h\","
         "\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"}}}",
         "metadata.resourceVersion"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const bad_case *c = &cases[i];
        REQ(c->method, c->path, DEV_TOKEN, c->body);
        const char *why = status_problem(&e->r, 400, "BadRequest", c->field);
        if (why)
            FAILF("case %zu (%s %s): %s; HTTP %ld: %.400s", i, c->method, c->path, why,
                  e->r.status, e->r.body);
    }
    CHECK_INT(REQ("GET", FNS, DEV_TOKEN, NULL), 200);
    CHECK_INT(cJSON_GetArraySize(jget(e->r.json, "items")), 0);
}

E2E_TEST(yaml_body_is_accepted)
{
    CHECK_INT(REQ("POST", FNS, DEV_TOKEN,
                  "apiVersion: funcd.dev/v1\n"
                  "kind: Function\n"
                  "metadata:\n"
                  "  name: from-yaml\n"
                  "  labels: {app: demo}\n"
                  "spec:\n"
                  "  runtime: node\n"
                  "  handler: index.js#handler\n"
                  "  source:\n"
                  "    bundle: \"" NO_SUCH_BUNDLE "\"\n"
                  "  scaling: {minReplicas: 0, maxReplicas: 3}\n"
                  "  timeout: 30s\n"),
              201);
    CHECK_STR(jstr(e->r.json, "metadata.name"), "from-yaml");
    CHECK_STR(jstr(e->r.json, "spec.runtime"), "node");
    CHECK(jnum(e->r.json, "spec.scaling.maxReplicas") == 3);
    CHECK_STR(jstr(e->r.json, "metadata.labels.app"), "demo");
    CHECK_INT(REQ("GET", FNS "/from-yaml", DEV_TOKEN, NULL), 200);
}

/* ---- methods and paths ------------------------------------------------------ */

E2E_TEST(wrong_methods_are_405)
{
    CHECK_INT(REQ("DELETE", FNS, DEV_TOKEN, NULL), 405);
    CHECK_STATUS(405, "MethodNotAllowed", NULL);
    CHECK_INT(REQ("PUT", FNS, DEV_TOKEN, FUNCTION_JSON("a", "m.h")), 405);
    CHECK_STATUS(405, "MethodNotAllowed", NULL);
    CHECK_INT(REQ("POST", FN_HELLO, DEV_TOKEN, FUNCTION_JSON("hello", "m.h")), 405);
    CHECK_STATUS(405, "MethodNotAllowed", NULL);
    CHECK_INT(REQ("PATCH", FN_HELLO, DEV_TOKEN, "{}"), 405);
    CHECK_STATUS(405, "MethodNotAllowed", NULL);
    /* There is nowhere to create an object across all namespaces. */
    CHECK_INT(REQ("POST", API "/functions", ADMIN_TOKEN, FUNCTION_JSON("a", "m.h")), 405);
    CHECK_STATUS(405, "MethodNotAllowed", NULL);
}

E2E_TEST(unknown_paths_are_404)
{
    static const char *const paths[] = {
        NS("default") "/widgets",
        NS("default") "/widgets/a",
        API "/widgets",
        "/nope",
        "/apis/other.dev/v1/namespaces/default/functions",
        NS("default") "/functions/a/extra",
        NS("default"),
        API,
    };
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        REQ("GET", paths[i], ADMIN_TOKEN, NULL);
        const char *why = status_problem(&e->r, 404, "NotFound", NULL);
        if (why)
            FAILF("GET %s: %s; HTTP %ld: %.300s", paths[i], why, e->r.status, e->r.body);
    }
    CHECK_INT(REQ("GET", NS("default") "/widgets", ADMIN_TOKEN, NULL), 404);
    CHECK_CONTAINS(jstr(e->r.json, "message"), "widgets");
}

/* ---- authentication and authorization --------------------------------------- */

E2E_TEST(unauthenticated_requests_are_401)
{
    CHECK_INT(REQ("GET", FNS, NULL, NULL), 401);
    CHECK_STATUS(401, "Unauthorized", NULL);
    CHECK_INT(REQ("GET", FNS, "not-a-token", NULL), 401);
    CHECK_STATUS(401, "Unauthorized", NULL);
    CHECK_INT(REQ("GET", FNS, DEV_TOKEN "x", NULL), 401);
    CHECK_INT(REQ("POST", FNS, "nope", FUNCTION_JSON("a", "m.h")), 401);
    CHECK_STATUS(401, "Unauthorized", NULL);
    CHECK_INT(e2e_http_do_auth(e->h, "GET", FNS, "Basic ZnVuY2Q6ZnVuY2Q=", NULL, &e->r), 401);
    CHECK_STATUS(401, "Unauthorized", NULL);
    CHECK_INT(e2e_http_do_auth(e->h, "GET", FNS, "Bearer", NULL, &e->r), 401);
    /* An unknown path still asks for a token first: it reveals nothing. */
    CHECK_INT(REQ("GET", "/nope", NULL, NULL), 401);
    /* Case-insensitive scheme, as in RFC 7235. */
    CHECK_INT(e2e_http_do_auth(e->h, "GET", FNS, "bearer " DEV_TOKEN, NULL, &e->r), 200);
}

E2E_TEST(roles_and_namespaces_are_enforced_with_403)
{
    /* viewer: reads its namespace, writes nothing */
    CHECK_INT(REQ("GET", FNS, VIEWER_TOKEN, NULL), 200);
    CHECK_INT(REQ("POST", FNS, VIEWER_TOKEN, FUNCTION_JSON("hello", "m.h")), 403);
    CHECK_STATUS(403, "Forbidden", NULL);
    CHECK_INT(REQ("POST", FNS, DEV_TOKEN, FUNCTION_JSON("hello", "m.h")), 201);
    CHECK_INT(REQ("GET", FN_HELLO, VIEWER_TOKEN, NULL), 200);
    CHECK_INT(REQ("PUT", FN_HELLO, VIEWER_TOKEN, FUNCTION_JSON("hello", "m.x")), 403);
    CHECK_STATUS(403, "Forbidden", NULL);
    CHECK_INT(REQ("DELETE", FN_HELLO, VIEWER_TOKEN, NULL), 403);
    CHECK_STATUS(403, "Forbidden", NULL);
    CHECK_INT(REQ("GET", NS("team-b") "/functions", VIEWER_TOKEN, NULL), 403);
    CHECK_STATUS(403, "Forbidden", NULL);

    /* developer of team-b: not in default */
    CHECK_INT(REQ("POST", FNS, TEAM_B_TOKEN, FUNCTION_JSON("b", "m.h")), 403);
    CHECK_STATUS(403, "Forbidden", NULL);
    CHECK_INT(REQ("GET", FN_HELLO, TEAM_B_TOKEN, NULL), 403);
    CHECK_INT(REQ("DELETE", FN_HELLO, TEAM_B_TOKEN, NULL), 403);
    CHECK_INT(REQ("POST", NS("team-b") "/functions", TEAM_B_TOKEN, FUNCTION_JSON("b", "m.h")),
              201);
    CHECK_STR(jstr(e->r.json, "metadata.namespace"), "team-b");

    /* a list across namespaces shows a confined token its own namespaces
     * (funcdctl get -A); watching across them needs admin or "*" */
    CHECK_INT(REQ("GET", API "/functions", TEAM_B_TOKEN, NULL), 200);
    CHECK_INT(cJSON_GetArraySize(jget(e->r.json, "items")), 1);
    CHECK_STR(jstr(cJSON_GetArrayItem(jget(e->r.json, "items"), 0), "metadata.namespace"),
              "team-b");
    CHECK_INT(REQ("GET", API "/functions", DEV_TOKEN, NULL), 200);
    CHECK_INT(cJSON_GetArraySize(jget(e->r.json, "items")), 1);
    CHECK_STR(jstr(cJSON_GetArrayItem(jget(e->r.json, "items"), 0), "metadata.namespace"),
              "default");
    CHECK_INT(REQ("GET", API "/functions", VIEWER_TOKEN, NULL), 200);
    CHECK_INT(REQ("GET", API "/functions?watch=true", TEAM_B_TOKEN, NULL), 403);
    CHECK_STATUS(403, "Forbidden", NULL);
    CHECK_INT(REQ("GET", API "/functions", ADMIN_TOKEN, NULL), 200);
    CHECK_STR(jstr(e->r.json, "kind"), "FunctionList");
    const cJSON *items = jget(e->r.json, "items");
    CHECK_INT(cJSON_GetArraySize(items), 2);

    /* admin writes anywhere */
    CHECK_INT(REQ("POST", NS("elsewhere") "/functions", ADMIN_TOKEN, FUNCTION_JSON("z", "m.h")),
              201);
    CHECK(env_settle(e, FN_HELLO));
    CHECK_INT(REQ("DELETE", FN_HELLO, ADMIN_TOKEN, NULL), 200);
    /* A 403 leaks nothing about existence: same answer for absent objects. */
    CHECK_INT(REQ("GET", NS("team-b") "/functions/absent", VIEWER_TOKEN, NULL), 403);
}

E2E_TEST(list_label_selector)
{
    static const char *const labels[][2] = {
        {"red", "{\"team\":\"a\",\"tier\":\"web\"}"},
        {"green", "{\"team\":\"a\"}"},
        {"blue", "{\"team\":\"b\"}"},
        {"plain", "{}"},
    };
    char body[512];
    for (size_t i = 0; i < 4; i++) {
        snprintf(body, sizeof(body),
                 "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Secret\",\"metadata\":"
                 "{\"name\":\"%s\",\"labels\":%s},\"stringData\":{\"k\":\"v\"}}",
                 labels[i][0], labels[i][1]);
        CHECK_INT(REQ("POST", NS("default") "/secrets", DEV_TOKEN, body), 201);
    }
    static const struct {
        const char *query;
        int count;
    } cases[] = {
        {"labelSelector=team%3Da", 2},         {"labelSelector=team=a,tier=web", 1},
        {"labelSelector=team==b", 1},          {"labelSelector=team%21%3Da", 2},
        {"labelSelector=team", 3},             {"labelSelector=%21team", 1},
        {"labelSelector=", 4},                 {"labelSelector=team=nobody", 0},
    };
    char path[256];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(path, sizeof(path), "%s?%s", NS("default") "/secrets", cases[i].query);
        CHECK_INT(REQ("GET", path, DEV_TOKEN, NULL), 200);
        if (cJSON_GetArraySize(jget(e->r.json, "items")) != cases[i].count)
            FAILF("%s: %d items, want %d", cases[i].query,
                  cJSON_GetArraySize(jget(e->r.json, "items")), cases[i].count);
    }
    CHECK_INT(REQ("GET", API "/secrets?labelSelector=tier%3Dweb", ADMIN_TOKEN, NULL), 200);
    CHECK_INT(cJSON_GetArraySize(jget(e->r.json, "items")), 1);
    static const char *const bad[] = {
        "labelSelector=team+in+(a,b)", "labelSelector=%3Da", "labelSelector=a%3D%3D%3Db",
        "labelSelector=a,,b", "labelSelector=%zz",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(path, sizeof(path), "%s?%s", NS("default") "/secrets", bad[i]);
        CHECK_INT(REQ("GET", path, DEV_TOKEN, NULL), 400);
        CHECK_STATUS(400, "BadRequest", "labelSelector");
    }
    CHECK_INT(REQ("GET", NS("default") "/secrets?watch=true&labelSelector=team%3Da", DEV_TOKEN,
                  NULL),
              400);
    CHECK_STATUS(400, "BadRequest", "labelSelector");
}

/* ---- the other kinds ----------------------------------------------------------- */

E2E_TEST(functionconfigs_roundtrip)
{
    const char *fcs = NS("default") "/functionconfigs";
    CHECK_INT(REQ("GET", fcs, DEV_TOKEN, NULL), 200);
    CHECK_STR(jstr(e->r.json, "kind"), "FunctionConfigList");
    CHECK_INT(REQ("POST", fcs, DEV_TOKEN, FUNCTIONCONFIG_JSON("set-ns", "set-namespace")), 201);
    CHECK_STR(jstr(e->r.json, "kind"), "FunctionConfig");
    CHECK(jnum(e->r.json, "metadata.generation") == 1);
    CHECK_INT(REQ("POST", fcs, DEV_TOKEN, FUNCTIONCONFIG_JSON("set-ns", "set-namespace")), 409);
    CHECK_STATUS(409, "AlreadyExists", NULL);
    CHECK_INT(REQ("PUT", NS("default") "/functionconfigs/set-ns", DEV_TOKEN,
                  FUNCTIONCONFIG_JSON("set-ns", "set-labels")),
              200);
    CHECK(jnum(e->r.json, "metadata.generation") == 2);
    CHECK_INT(REQ("GET", fcs, DEV_TOKEN, NULL), 200);
    CHECK_INT(cJSON_GetArraySize(jget(e->r.json, "items")), 1);
    CHECK_INT(REQ("POST", fcs, DEV_TOKEN,
                  "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"FunctionConfig\",\"metadata\":{"
                  "\"name\":\"x\"},\"spec\":{\"image\":\"x\"}}"),
              400);
    CHECK_STATUS(400, "BadRequest", "spec");
    CHECK_INT(REQ("DELETE", NS("default") "/functionconfigs/set-ns", DEV_TOKEN, NULL), 200);
    CHECK_STR(jstr(e->r.json, "spec.image"), "set-labels");
    CHECK_INT(REQ("GET", NS("default") "/functionconfigs/set-ns", DEV_TOKEN, NULL), 404);
}

E2E_TEST(secret_string_data_is_stored_as_base64)
{
    const char *secrets = NS("default") "/secrets";
    CHECK_INT(REQ("POST", secrets, DEV_TOKEN,
                  "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":"
                  "\"creds\"},\"type\":\"Opaque\",\"stringData\":{\"user\":\"hello\"},"
                  "\"data\":{\"pass\":\"c2VjcmV0\"}}"),
              201);
    CHECK_STR(jstr(e->r.json, "kind"), "Secret");
    CHECK_STR(jstr(e->r.json, "data.user"), "aGVsbG8=");
    CHECK_STR(jstr(e->r.json, "data.pass"), "c2VjcmV0");
    CHECK(jget(e->r.json, "stringData") == NULL);
    CHECK(jnum(e->r.json, "metadata.generation") == 1);

    CHECK_INT(REQ("GET", NS("default") "/secrets/creds", DEV_TOKEN, NULL), 200);
    CHECK_STR(jstr(e->r.json, "data.user"), "aGVsbG8=");
    CHECK(jget(e->r.json, "stringData") == NULL);
    CHECK_INT(REQ("GET", secrets, DEV_TOKEN, NULL), 200);
    CHECK_STR(jstr(e->r.json, "kind"), "SecretList");

    /* Changing the data is a new generation (a Secret has no spec). */
    CHECK_INT(REQ("PUT", NS("default") "/secrets/creds", DEV_TOKEN,
                  "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":"
                  "\"creds\"},\"type\":\"Opaque\",\"stringData\":{\"user\":\"world\"}}"),
              200);
    CHECK_STR(jstr(e->r.json, "data.user"), "d29ybGQ=");
    CHECK(jget(e->r.json, "data.pass") == NULL);
    CHECK(jnum(e->r.json, "metadata.generation") == 2);

    CHECK_INT(REQ("POST", secrets, DEV_TOKEN,
                  "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":"
                  "\"bad\"},\"type\":\"Opaque\",\"data\":{\"k\":\"not base64!\"}}"),
              400);
    CHECK_STATUS(400, "BadRequest", "data[k]");
    CHECK_INT(REQ("POST", secrets, DEV_TOKEN,
                  "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":"
                  "\"pull\"},\"type\":\"kubernetes.io/dockerconfigjson\",\"stringData\":{"
                  "\".dockerconfigjson\":\"{\\\"auths\\\":{}}\"}}"),
              201);
    CHECK_STR(jstr(e->r.json, "type"), "kubernetes.io/dockerconfigjson");
    CHECK(cJSON_GetObjectItemCaseSensitive(jget(e->r.json, "data"), ".dockerconfigjson") != NULL);
    CHECK_INT(REQ("DELETE", NS("default") "/secrets/creds", DEV_TOKEN, NULL), 200);
    CHECK_INT(REQ("GET", NS("default") "/secrets/creds", DEV_TOKEN, NULL), 404);
}

/* Server-set fields in a body are ignored, never trusted. */
E2E_TEST(server_fields_in_the_body_are_ignored)
{
    CHECK_INT(REQ("POST", FNS, DEV_TOKEN,
                  "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
                  "\"hello\",\"uid\":\"00000000-0000-4000-8000-000000000000\",\"generation\":41,"
                  "\"creationTimestamp\":\"2000-01-01T00:00:00Z\"},\"spec\":{\"runtime\":"
                  "\"python3\",\"handler\":\"m.h\",\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"}},"
                  "\"status\":{\"observedGeneration\":41}}"),
              201);
    CHECK(jnum(e->r.json, "metadata.generation") == 1);
    CHECK(strcmp(jstr(e->r.json, "metadata.uid"), "00000000-0000-4000-8000-000000000000") != 0);
    CHECK(strcmp(jstr(e->r.json, "metadata.creationTimestamp"), "2000-01-01T00:00:00Z") != 0);
    CHECK(jnum(e->r.json, "status.observedGeneration") != 41);
}

/* Every error, including one the HTTP layer produces, is a JSON Status. */
E2E_TEST(oversized_body_is_a_json_status)
{
    size_t n = 3 * 1024 * 1024;
    char *big = malloc(n + 1);
    CHECK(big != NULL);
    memset(big, ' ', n);
    big[0] = '{';
    big[n - 1] = '}';
    big[n] = '\0';
    REQ("POST", FNS, DEV_TOKEN, big);
    free(big);
    CHECK(e->r.status == 413 || e->r.status == 400);
    if (!cJSON_IsObject(e->r.json))
        FAILF("HTTP %ld with a body that is not JSON: %.200s", e->r.status, e->r.body);
    CHECK_STR(jstr(e->r.json, "kind"), "Status");
    CHECK(jnum(e->r.json, "code") == (double)e->r.status);
}

/*
 * HTTP/1.1 clients keep their connection open between requests. Shutting
 * down while such an idle connection exists (control plane and data plane)
 * must complete promptly, without a crash or a leak.
 */
E2E_TEST(shutdown_with_idle_keepalive_connections)
{
    CHECK_INT(REQ("GET", FNS, DEV_TOKEN, NULL), 200);
    CHECK_INT(env_dp(e, "GET", "/healthz"), 200);
    int64_t t0 = e2e_now_ms();
    funcd_platform_free(e->p);
    e->p = NULL;
    int64_t took = e2e_now_ms() - t0;
    if (took > 3000)
        FAILF("shutdown took %lld ms", (long long)took);
}

int main(void)
{
    e2e_client_global_init();
    RUN_ISOLATED(healthz_needs_no_token);
    RUN_ISOLATED(version_needs_a_token);
    RUN_ISOLATED(list_empty_collection);
    RUN_ISOLATED(create_get_list_and_conflict);
    RUN_ISOLATED(get_missing_is_404);
    RUN_ISOLATED(put_replaces_and_counts_generations);
    RUN_ISOLATED(put_with_stale_resource_version_conflicts);
    RUN_ISOLATED(put_creates_a_new_name);
    RUN_ISOLATED(put_with_another_uid_conflicts);
    RUN_ISOLATED(put_without_resource_version_is_unconditional);
    RUN_ISOLATED(delete_returns_the_object_then_404);
    RUN_ISOLATED(delete_without_precondition_never_conflicts);
    RUN_ISOLATED(bad_requests_are_400_naming_the_field);
    RUN_ISOLATED(yaml_body_is_accepted);
    RUN_ISOLATED(wrong_methods_are_405);
    RUN_ISOLATED(unknown_paths_are_404);
    RUN_ISOLATED(unauthenticated_requests_are_401);
    RUN_ISOLATED(roles_and_namespaces_are_enforced_with_403);
    RUN_ISOLATED(list_label_selector);
    RUN_ISOLATED(functionconfigs_roundtrip);
    RUN_ISOLATED(secret_string_data_is_stored_as_base64);
    RUN_ISOLATED(server_fields_in_the_body_are_ignored);
    RUN_ISOLATED(oversized_body_is_a_json_status);
    RUN_ISOLATED(shutdown_with_idle_keepalive_connections);
    e2e_client_global_cleanup();
    return HARNESS_END();
}
