/*
 * The quota on objects per namespace (docs/security.md, "Quotas"): every
 * kind together (Functions, Secrets, KVStores, ...). One more create
 * than the quota is 403 naming the quota and the namespace's own count; an
 * update never is; a delete makes room; another namespace has its own.
 * The count is right after a restart on the same store, concurrent creates
 * stop at the quota, and two nodes sharing a store see each other's objects.
 *
 * `test_e2e_quota CASE` runs one case; each runs in its own child.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "env.h"
#include "funcd/sys/error.h"
#include "shared_store.h"
#include "util/misc.h"

#define QUOTA 5
#define FNS NS("default") "/functions"
#define SECRETS NS("default") "/secrets"
#define KVSTORES NS("default") "/kvstores"

#define SECRET_JSON(name)                                                                          \
    "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":\"" name "\"},"   \
    "\"type\":\"Opaque\",\"stringData\":{\"k\":\"v\"}}"
#define KVSTORE_JSON(name, spec)                                                                   \
    "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"KVStore\",\"metadata\":{\"name\":\"" name "\"},"  \
    "\"spec\":" spec "}"

static int up(env *e, funcd_store *store, long quota)
{
    if (env_up_with(e, store, funcd_with_namespace_object_quota(quota), NULL, NULL) < 0) {
        fprintf(stderr, "  cannot start a platform: %s\n", funcd_error_last()->message);
        return -1;
    }
    return 0;
}

/* A test whose body gets a platform with quota `quota` on the preset's store. */
#define QUOTA_TEST(name, quota)                                                                    \
    static void name##_body(env *e);                                                               \
    TEST(name)                                                                                     \
    {                                                                                              \
        env e_;                                                                                    \
        if (up(&e_, NULL, (quota)) == 0)                                                           \
            name##_body(&e_);                                                                      \
        else                                                                                       \
            harness_failed_now = 1;                                                                \
        env_down(&e_);                                                                             \
    }                                                                                              \
    static void name##_body(env *e)

/* A Function named `name` in namespace `ns` by `token`: the status code. */
static long create_fn(env *e, const char *ns, const char *token, const char *name)
{
    char path[128], body[512];
    snprintf(path, sizeof(path), API "/namespaces/%s/functions", ns);
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"%s\"},\"spec\":{\"runtime\":\"python3\",\"handler\":\"m.h\",\"source\":"
             "{\"bundle\":\"" NO_SUCH_BUNDLE "\"}}}",
             name);
    return env_req(e, "POST", path, token, body);
}

/* The last answer is the quota's 403 with `count` for namespace `ns`. */
static const char *quota_problem(env *e, const char *ns, long count, long quota)
{
    static char why[512];
    const char *p = status_problem(&e->r, 403, "Forbidden", NULL);
    if (p)
        return p;
    const char *msg = jstr(e->r.json, "message");
    char want[160], flag[80];
    snprintf(want, sizeof(want), "namespace %s has %ld objects", ns, count);
    snprintf(flag, sizeof(flag), "--namespace-object-quota %ld", quota);
    if (!msg || !strstr(msg, want) || !strstr(msg, flag)) {
        snprintf(why, sizeof(why), "the message does not say \"%s\" and \"%s\"", want, flag);
        return why;
    }
    return NULL;
}

#define CHECK_QUOTA(ns, count, quota)                                                              \
    do {                                                                                           \
        const char *p_ = quota_problem(e, (ns), (count), (quota));                                 \
        if (p_)                                                                                    \
            FAILF("%s; HTTP %ld: %.500s", p_, e->r.status, e->r.body);                             \
    } while (0)

/* ---- one node ------------------------------------------------------------- */

QUOTA_TEST(objects_over_the_quota_are_refused, QUOTA)
{
    /* Another namespace's objects are not the default's, nor shown to it. */
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof(name), "b%d", i);
        CHECK_INT(create_fn(e, "team-b", TEAM_B_TOKEN, name), 201);
    }
    /* Five objects of three kinds fill the default namespace. */
    CHECK_INT(create_fn(e, "default", DEV_TOKEN, "f1"), 201);
    CHECK_INT(create_fn(e, "default", DEV_TOKEN, "f2"), 201);
    CHECK_INT(REQ("POST", SECRETS, DEV_TOKEN, SECRET_JSON("s1")), 201);
    CHECK_INT(REQ("POST", SECRETS, DEV_TOKEN, SECRET_JSON("s2")), 201);
    CHECK_INT(REQ("POST", KVSTORES, DEV_TOKEN, KVSTORE_JSON("k1", "{}")), 201);
    /* The sixth, of any kind, by POST or by a PUT that would create it. */
    CHECK_INT(create_fn(e, "default", DEV_TOKEN, "f3"), 403);
    CHECK_QUOTA("default", QUOTA, QUOTA);
    CHECK(!strstr(e->r.body, "team-b"));
    CHECK_INT(REQ("POST", SECRETS, DEV_TOKEN, SECRET_JSON("s3")), 403);
    CHECK_QUOTA("default", QUOTA, QUOTA);
    CHECK_INT(REQ("PUT", SECRETS "/s3", DEV_TOKEN, SECRET_JSON("s3")), 403);
    CHECK_QUOTA("default", QUOTA, QUOTA);
    /* An admin is held to it too: it protects the node, not a role. */
    CHECK_INT(REQ("POST", SECRETS, ADMIN_TOKEN, SECRET_JSON("s3")), 403);
    CHECK_QUOTA("default", QUOTA, QUOTA);
    /* A POST of a name that exists is still a conflict, not the quota. */
    CHECK_INT(REQ("POST", SECRETS, DEV_TOKEN, SECRET_JSON("s1")), 409);
    /* Updates are never refused. */
    CHECK_INT(REQ("PUT", SECRETS "/s1", DEV_TOKEN, SECRET_JSON("s1")), 200);
    CHECK_INT(REQ("PUT", KVSTORES "/k1", DEV_TOKEN, KVSTORE_JSON("k1", "{\"maxKeys\":5}")), 200);
    CHECK_INT(REQ("GET", FNS "/f1", DEV_TOKEN, NULL), 200);
    const char *rv = jstr(e->r.json, "metadata.resourceVersion");
    CHECK(rv);
    char body[512];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"f1\",\"resourceVersion\":\"%s\"},\"spec\":{\"runtime\":\"python3\",\"handler\":"
             "\"m.other\",\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"}}}",
             rv);
    CHECK_INT(REQ("PUT", FNS "/f1", DEV_TOKEN, body), 200);
    /* Another namespace is not held by the default's. */
    CHECK_INT(create_fn(e, "team-b", TEAM_B_TOKEN, "b3"), 201);
    CHECK_INT(create_fn(e, "team-b", TEAM_B_TOKEN, "b4"), 201);
    CHECK_INT(create_fn(e, "team-b", TEAM_B_TOKEN, "b5"), 403);
    CHECK_QUOTA("team-b", QUOTA, QUOTA);
    CHECK(!strstr(e->r.body, "default"));
    /* A delete makes room for one, and only one. */
    CHECK_INT(REQ("DELETE", SECRETS "/s2", DEV_TOKEN, NULL), 200);
    CHECK_INT(create_fn(e, "default", DEV_TOKEN, "f3"), 201);
    CHECK_INT(create_fn(e, "default", DEV_TOKEN, "f4"), 403);
    CHECK_QUOTA("default", QUOTA, QUOTA);
    CHECK_INT(REQ("GET", FNS, DEV_TOKEN, NULL), 200);
    CHECK_INT(cJSON_GetArraySize(jget(e->r.json, "items")), 3);
}

/* A negative quota is none at all. */
QUOTA_TEST(negative_is_no_limit, -1)
{
    for (int i = 0; i < 12; i++) {
        char name[16];
        snprintf(name, sizeof(name), "f%d", i);
        CHECK_INT(create_fn(e, "default", DEV_TOKEN, name), 201);
    }
}

/* 0 allows no object at all. */
QUOTA_TEST(zero_allows_none, 0)
{
    CHECK_INT(create_fn(e, "default", DEV_TOKEN, "f"), 403);
    CHECK_QUOTA("default", 0, 0);
}

/* ---- concurrent creates ------------------------------------------------------ */

#define CREATORS 8
#define CREATES_EACH 10
#define CONCURRENT_QUOTA 23

typedef struct creator {
    const char *base;
    int id;
    atomic_int *created, *refused, *other;
} creator;

static void *create_many(void *arg)
{
    creator *c = arg;
    e2e_http *h = e2e_http_new(c->base);
    e2e_resp r = E2E_RESP_INIT;
    for (int i = 0; h && i < CREATES_EACH; i++) {
        char body[512];
        snprintf(body, sizeof(body),
                 "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":"
                 "\"c%d-%d\"},\"type\":\"Opaque\",\"stringData\":{\"k\":\"v\"}}",
                 c->id, i);
        long code = e2e_http_do(h, "POST", SECRETS, DEV_TOKEN, body, &r);
        atomic_fetch_add(code == 201 ? c->created : code == 403 ? c->refused : c->other, 1);
    }
    e2e_resp_free(&r);
    e2e_http_free(h);
    return NULL;
}

/* 80 creates at once from 8 clients against a quota of 23: 23 are made. */
QUOTA_TEST(concurrent_creates_stop_at_the_quota, CONCURRENT_QUOTA)
{
    atomic_int created = 0, refused = 0, other = 0;
    creator cs[CREATORS];
    pthread_t threads[CREATORS];
    for (int i = 0; i < CREATORS; i++) {
        cs[i] = (creator){e->base, i, &created, &refused, &other};
        pthread_create(&threads[i], NULL, create_many, &cs[i]);
    }
    for (int i = 0; i < CREATORS; i++)
        pthread_join(threads[i], NULL);
    fprintf(stderr, "  %d created, %d refused, %d other\n", atomic_load(&created),
            atomic_load(&refused), atomic_load(&other));
    CHECK_INT(atomic_load(&other), 0);
    CHECK_INT(atomic_load(&created), CONCURRENT_QUOTA);
    CHECK_INT(REQ("GET", SECRETS, DEV_TOKEN, NULL), 200);
    CHECK_INT(cJSON_GetArraySize(jget(e->r.json, "items")), CONCURRENT_QUOTA);
}

/* ---- a restart ---------------------------------------------------------------- */

/* The objects a platform made on a durable store count for the next one on
 * it, from its first request. */
TEST(counted_after_a_restart)
{
    char dir[] = "/tmp/funcd-quota-XXXXXX", path[64];
    if (!mkdtemp(dir))
        FAILF("mkdtemp failed");
    snprintf(path, sizeof(path), "%s/store.db", dir);
    env e_, *e = &e_;
    funcd_store *s = NULL;
    int ok = funcd_store_sqlite_new(&s, path, NULL) == 0 && up(e, s, QUOTA) == 0;
    for (int i = 0; ok && i < QUOTA - 1; i++) {
        char name[16];
        snprintf(name, sizeof(name), "f%d", i);
        ok = create_fn(e, "default", DEV_TOKEN, name) == 201;
    }
    ok = ok && REQ("POST", SECRETS, DEV_TOKEN, SECRET_JSON("s")) == 201 &&
         REQ("DELETE", SECRETS "/s", DEV_TOKEN, NULL) == 200 &&
         REQ("POST", SECRETS, DEV_TOKEN, SECRET_JSON("s2")) == 201;
    env_down(e);
    s = NULL;
    ok = ok && funcd_store_sqlite_new(&s, path, NULL) == 0 && up(e, s, QUOTA) == 0;
    long code = ok ? create_fn(e, "default", DEV_TOKEN, "again") : 0;
    const char *p = ok ? quota_problem(e, "default", QUOTA, QUOTA) : "could not start";
    if (ok && code == 403 && !p) { /* and a delete still makes room */
        ok = REQ("DELETE", FNS "/f0", DEV_TOKEN, NULL) == 200 &&
             create_fn(e, "default", DEV_TOKEN, "again") == 201;
        p = ok ? NULL : "no room after a delete";
    }
    if (!ok || code != 403 || p)
        fprintf(stderr, "  %s:%d: after the restart: HTTP %ld (%s): %.300s\n", __FILE__,
                __LINE__, e->r.status, p ? p : "", e->r.body ? e->r.body : "");
    harness_failed_now = !ok || code != 403 || p;
    env_down(e);
    funcd_remove_tree(dir);
}

/* ---- two nodes on one store ------------------------------------------------ */

static int seen_on(env *e, void *arg)
{
    char path[128];
    snprintf(path, sizeof(path), FNS "/%s", (const char *)arg);
    return REQ("GET", path, DEV_TOKEN, NULL) == 200;
}

static int made_on(env *e, void *arg)
{
    return create_fn(e, "default", DEV_TOKEN, arg) == 201;
}

static void two_nodes_body(env *a, env *b)
{
    env *e = b;
    /* b counts first (its first create lists), then learns of a's by its watch */
    CHECK_INT(create_fn(b, "default", DEV_TOKEN, "b0"), 201);
    CHECK_INT(create_fn(a, "default", DEV_TOKEN, "a0"), 201);
    CHECK_INT(create_fn(a, "default", DEV_TOKEN, "a1"), 201);
    CHECK_INT(create_fn(a, "default", DEV_TOKEN, "a2"), 201);
    CHECK(env_poll(b, 3000, seen_on, "a2") == 1);
    CHECK_INT(create_fn(b, "default", DEV_TOKEN, "b1"), 201); /* the fifth */
    CHECK_INT(create_fn(b, "default", DEV_TOKEN, "b2"), 403);
    CHECK_QUOTA("default", QUOTA, QUOTA);
    e = a; /* and a of b's */
    CHECK(env_poll(a, 3000, seen_on, "b1") == 1);
    CHECK_INT(create_fn(a, "default", DEV_TOKEN, "a3"), 403);
    CHECK_QUOTA("default", QUOTA, QUOTA);
    /* a delete on one node makes room on the other once its watch has it */
    CHECK_INT(env_req(a, "DELETE", FNS "/a0", DEV_TOKEN, NULL), 200);
    CHECK(env_poll(b, 3000, made_on, "b2") == 1);
    e = a;
    CHECK(env_poll(a, 3000, seen_on, "b2") == 1);
    CHECK_INT(create_fn(a, "default", DEV_TOKEN, "a3"), 403);
}

/* The quota holds for the namespace across nodes: each counts what the
 * others made once its watch has delivered it. */
TEST(nodes_sharing_a_store_count_each_others_objects)
{
    funcd_store *va = NULL, *vb = NULL;
    if (shared_pair(&va, &vb) < 0)
        FAILF("out of memory");
    env a, b;
    memset(&b, 0, sizeof(b));
    if (up(&a, va, QUOTA) < 0) {
        vb->free(vb);
        harness_failed_now = 1;
    } else if (up(&b, vb, QUOTA) < 0) {
        harness_failed_now = 1;
    } else {
        two_nodes_body(&a, &b);
    }
    env_down(&b);
    env_down(&a);
}

int main(int argc, char **argv)
{
    e2e_client_global_init();
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
#define CASE(name)                                                                                 \
    do {                                                                                           \
        if (!only || strcmp(only, #name) == 0) {                                                   \
            RUN_ISOLATED(name);                                                                    \
            ran++;                                                                                 \
        }                                                                                          \
    } while (0)
    CASE(objects_over_the_quota_are_refused);
    CASE(negative_is_no_limit);
    CASE(zero_allows_none);
    CASE(concurrent_creates_stop_at_the_quota);
    CASE(counted_after_a_restart);
    CASE(nodes_sharing_a_store_count_each_others_objects);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no test case named %s\n", only);
        return 1;
    }
    return HARNESS_END();
}
