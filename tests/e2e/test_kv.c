/*
 * KV for functions, end to end (docs/services.md): a KVStore, a python3 and
 * a node function bound to it (spec.bindings.kv) running one scenario
 * through the runtimes' helpers over their local API (put/get, CAS
 * conflicts, TTL expiry, increments, list paging, a store not bound), the
 * per-namespace quota at admission, and the data surviving a restart on a
 * sqlite store.
 *
 *   test_e2e_kv CASE
 */
#include "../harness.h"
#include "test_serving_common.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define WAIT_MS 20000

static const char scenario_py[] =
    "import funcd, time\n"
    "def handler(req):\n"
    "    kv = funcd.kv('cache')\n"
    "    out = {}\n"
    "    r1 = kv.put('a', 'one')\n"
    "    it = kv.get('a')\n"
    "    out['get'] = [it.text, it.revision == r1]\n"
    "    r2 = kv.put('a', 'two', if_revision=r1)\n"
    "    try:\n"
    "        kv.put('a', 'three', if_revision=r1)\n"
    "        out['cas'] = 'no conflict'\n"
    "    except funcd.Conflict:\n"
    "        out['cas'] = 'conflict'\n"
    "    out['after_cas'] = kv.get('a').text\n"
    "    kv.put('new', 'x', if_revision=0)\n"
    "    try:\n"
    "        kv.put('new', 'y', if_revision=0)\n"
    "        out['absent'] = 'no conflict'\n"
    "    except funcd.Conflict:\n"
    "        out['absent'] = 'conflict'\n"
    "    out['incr'] = [kv.incr('n'), kv.incr('n', 5)]\n"
    "    kv.put('t', 'v', ttl='1s')\n"
    "    out['ttl_before'] = kv.get('t') is not None\n"
    "    time.sleep(1.3)\n"
    "    out['ttl_after'] = kv.get('t') is None\n"
    "    for i in range(10):\n"
    "        kv.put('p/%d' % i, str(i))\n"
    "    keys, after, pages = [], None, 0\n"
    "    while True:\n"
    "        page, after = kv.list(prefix='p/', limit=4, after=after)\n"
    "        keys += [k for k, _ in page]\n"
    "        pages += 1\n"
    "        if not after:\n"
    "            break\n"
    "    out['list'] = [len(keys), pages, keys == ['p/%d' % i for i in range(10)]]\n"
    "    out['delete'] = [kv.delete('a'), kv.delete('a'), kv.get('a') is None]\n"
    "    try:\n"
    "        funcd.kv('other').get('x')\n"
    "        out['unbound'] = 'allowed'\n"
    "    except funcd.Error as e:\n"
    "        out['unbound'] = str(e)\n"
    "    return out\n";

static const char scenario_js[] =
    "const sleep = (ms) => new Promise((r) => setTimeout(r, ms));\n"
    "exports.handler = async () => {\n"
    "    const kv = funcd.kv('cache'), out = {};\n"
    "    const r1 = await kv.put('a', 'one');\n"
    "    const it = await kv.get('a');\n"
    "    out.get = [it.text(), it.revision === r1];\n"
    "    await kv.put('a', 'two', {ifRevision: r1});\n"
    "    try { await kv.put('a', 'three', {ifRevision: r1}); out.cas = 'no conflict'; }\n"
    "    catch (e) { out.cas = e.conflict ? 'conflict' : String(e); }\n"
    "    out.after_cas = (await kv.get('a')).text();\n"
    "    await kv.put('new', 'x', {ifRevision: 0});\n"
    "    try { await kv.put('new', 'y', {ifRevision: 0}); out.absent = 'no conflict'; }\n"
    "    catch (e) { out.absent = e.conflict ? 'conflict' : String(e); }\n"
    "    out.incr = [await kv.incr('n'), await kv.incr('n', 5)];\n"
    "    await kv.put('t', 'v', {ttl: '1s'});\n"
    "    out.ttl_before = (await kv.get('t')) !== null;\n"
    "    await sleep(1300);\n"
    "    out.ttl_after = (await kv.get('t')) === null;\n"
    "    for (let i = 0; i < 10; i++) await kv.put(`p/${i}`, String(i));\n"
    "    let keys = [], after = null, pages = 0;\n"
    "    do {\n"
    "        const page = await kv.list({prefix: 'p/', limit: 4, after});\n"
    "        keys = keys.concat(page.items.map((i) => i.key));\n"
    "        after = page.next; pages++;\n"
    "    } while (after);\n"
    "    out.list = [keys.length, pages, keys.join() === [...Array(10).keys()].map((i) => `p/${i}`).join()];\n"
    "    out.delete = [await kv.delete('a'), await kv.delete('a'), (await kv.get('a')) === null];\n"
    "    try { await funcd.kv('other').get('x'); out.unbound = 'allowed'; }\n"
    "    catch (e) { out.unbound = e.message; }\n"
    "    return out;\n"
    "};\n";

static long create_kvstore(env *e, const char *name, const char *spec)
{
    char body[512];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"KVStore\",\"metadata\":{\"name\":\"%s\"},"
             "\"spec\":%s}",
             name, spec);
    return env_req(e, "POST", NS("default") "/kvstores", DEV_TOKEN, body);
}

/* A function of `runtime` running `code`, bound to KVStore "cache". */
static int user(env *e, const char *name, const char *runtime, const char *code)
{
    char dir[256];
    int py = strcmp(runtime, "python3") == 0;
    if (sv_code_dir(dir, sizeof(dir), py ? "main.py" : "index.js", code) != 0)
        return -1;
    if (sv_create(e, name,
                  "{\"runtime\":\"%s\",\"handler\":\"%s\",\"source\":{\"path\":\"%s\"},"
                  "\"bindings\":{\"kv\":[\"cache\"]}}",
                  runtime, py ? "main.handler" : "index.js", dir) != 201)
        return -1;
    if (sv_wait_ready(e, name, WAIT_MS))
        return 0;
    fprintf(stderr, "%s is not ready: %.600s\n", name, e->r.body ? e->r.body : "");
    return -1;
}

static void check_scenario(env *e, const char *name)
{
    char path[128];
    snprintf(path, sizeof(path), DP_PATH("%s") "/", name);
    if (sv_invoke(e, "POST", path, NULL) != 200)
        FAILF("%s: %ld %.500s", name, e->r.status, e->r.body);
    const cJSON *j = e->r.json;
    CHECK_STR(cJSON_GetArrayItem(jget(j, "get"), 0)->valuestring, "one");
    CHECK(cJSON_IsTrue(cJSON_GetArrayItem(jget(j, "get"), 1)));
    CHECK_STR(jstr(j, "cas"), "conflict");
    CHECK_STR(jstr(j, "after_cas"), "two");
    CHECK_STR(jstr(j, "absent"), "conflict");
    CHECK_INT(cJSON_GetArrayItem(jget(j, "incr"), 0)->valuedouble, 1);
    CHECK_INT(cJSON_GetArrayItem(jget(j, "incr"), 1)->valuedouble, 6);
    CHECK(cJSON_IsTrue(jget(j, "ttl_before")));
    CHECK(cJSON_IsTrue(jget(j, "ttl_after")));
    CHECK_INT(cJSON_GetArrayItem(jget(j, "list"), 0)->valuedouble, 10);
    CHECK_INT(cJSON_GetArrayItem(jget(j, "list"), 1)->valuedouble, 3);
    CHECK(cJSON_IsTrue(cJSON_GetArrayItem(jget(j, "list"), 2)));
    CHECK(cJSON_IsTrue(cJSON_GetArrayItem(jget(j, "delete"), 0)));
    CHECK(cJSON_IsFalse(cJSON_GetArrayItem(jget(j, "delete"), 1)));
    CHECK(cJSON_IsTrue(cJSON_GetArrayItem(jget(j, "delete"), 2)));
    CHECK_CONTAINS(jstr(j, "unbound"), "403");
    CHECK_CONTAINS(jstr(j, "unbound"), "spec.bindings.kv");
}

SV_TEST(python_kv)
{
    CHECK(create_kvstore(e, "cache", "{\"maxKeys\":100}") == 201);
    CHECK(create_kvstore(e, "other", "{}") == 201);
    CHECK(user(e, "py-kv", "python3", scenario_py) == 0);
    check_scenario(e, "py-kv");
}

SV_TEST(node_kv)
{
    CHECK(create_kvstore(e, "cache", "{}") == 201);
    CHECK(create_kvstore(e, "other", "{}") == 201);
    CHECK(user(e, "js-kv", "node", scenario_js) == 0);
    check_scenario(e, "js-kv");
}

static const char limits_py[] =
    "import funcd, os, socket\n"
    "def handler(req):\n"
    "    kv, out = funcd.kv('cache'), {}\n"
    "    kv.put('k1', 'x')\n"
    "    kv.put('k2', 'x')\n"
    "    kv.put('k1', 'replaced')  # not a new key\n"
    "    try:\n"
    "        kv.put('k3', 'x')\n"
    "        out['keys'] = 'stored'\n"
    "    except funcd.Error as e:\n"
    "        out['keys'] = str(e)\n"
    "    try:\n"
    "        kv.put('k1', 'x' * 17)\n"
    "        out['value'] = 'stored'\n"
    "    except funcd.Error as e:\n"
    "        out['value'] = str(e)\n"
    "    try:\n"
    "        kv.put('k1', 'x', ttl='9000h')  # over a year\n"
    "        out['ttl'] = 'stored'\n"
    "    except funcd.Error as e:\n"
    "        out['ttl'] = str(e)\n"
    "    # a query libevent cannot read must not lose its ifRevision\n"
    "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
    "    s.connect(os.environ['FUNCD_API'][len('unix:'):])\n"
    "    s.sendall(b'PUT /kv/cache/k1?ifRevision=1&x HTTP/1.1\\r\\nHost: api\\r\\n'\n"
    "              b'Content-Length: 1\\r\\nConnection: close\\r\\n\\r\\nz')\n"
    "    answer = b''\n"
    "    while True:\n"
    "        d = s.recv(4096)\n"
    "        if not d:\n"
    "            break\n"
    "        answer += d\n"
    "    out['query'] = answer.split(b' ')[1].decode()\n"
    "    out['k1'] = kv.get('k1').text\n"
    "    return out\n";

/* spec.maxKeys and spec.maxValueBytes hold. */
SV_TEST(store_limits)
{
    CHECK(create_kvstore(e, "cache", "{\"maxKeys\":2,\"maxValueBytes\":16}") == 201);
    CHECK(user(e, "lim", "python3", limits_py) == 0);
    if (sv_invoke(e, "POST", DP_PATH("lim") "/", NULL) != 200)
        FAILF("lim: %ld %.500s", e->r.status, e->r.body);
    CHECK_CONTAINS(jstr(e->r.json, "keys"), "507");
    CHECK_CONTAINS(jstr(e->r.json, "keys"), "spec.maxKeys");
    CHECK_CONTAINS(jstr(e->r.json, "value"), "413");
    CHECK_CONTAINS(jstr(e->r.json, "value"), "spec.maxValueBytes");
    CHECK_CONTAINS(jstr(e->r.json, "ttl"), "400");
    CHECK_STR(jstr(e->r.json, "query"), "400");
    CHECK_STR(jstr(e->r.json, "k1"), "replaced"); /* neither changed it */
}

/* The 101st KVStore of a namespace is refused (the default quota, 100);
 * replacing one that exists is not a new one. */
SV_TEST(quota)
{
    for (int i = 0; i < 100; i++) {
        char name[32];
        snprintf(name, sizeof(name), "s%d", i);
        if (create_kvstore(e, name, "{}") != 201)
            FAILF("KVStore %d: %ld %.300s", i, e->r.status, e->r.body);
    }
    CHECK(create_kvstore(e, "s100", "{}") == 403);
    CHECK_CONTAINS(jstr(e->r.json, "message"), "quota");
    CHECK_CONTAINS(jstr(e->r.json, "message"), "100");
    CHECK(env_req(e, "PUT", NS("default") "/kvstores/s7", DEV_TOKEN,
                  "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"KVStore\",\"metadata\":{\"name\":"
                  "\"s7\"},\"spec\":{\"maxKeys\":5}}") == 200);
    /* Another namespace has its own quota. */
    CHECK(env_req(e, "POST", NS("team-b") "/kvstores", TEAM_B_TOKEN,
                  "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"KVStore\",\"metadata\":{\"name\":"
                  "\"s0\"},\"spec\":{}}") == 201);
    /* Bad specs name the field. */
    CHECK(create_kvstore(e, "bad", "{\"maxKeys\":0}") == 400);
    CHECK_CONTAINS(jstr(e->r.json, "message"), "spec.maxKeys");
}


static const char isolation_py[] =
    "import funcd, os\n"
    "def handler(req):\n"
    "    kv = funcd.kv('cache')\n"
    "    it = kv.get('k')\n"
    "    kv.put('k', os.environ['FUNCD_NAMESPACE'])\n"
    "    out = {'seen': it.text if it is not None else None}\n"
    "    try:\n"
    "        funcd.kv('only-default').get('x')\n"
    "        out['other'] = 'reached'\n"
    "    except funcd.Error as e:\n"
    "        out['other'] = str(e)\n"
    "    return out\n";

/* The same function in namespace `ns`, bound to "cache" and "only-default". */
static int isolation_fn(env *e, const char *ns, const char *dir)
{
    char path[160], body[600];
    snprintf(path, sizeof(path), API "/namespaces/%s/functions", ns);
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"iso\"},\"spec\":{\"runtime\":\"python3\",\"handler\":\"main.handler\","
             "\"source\":{\"path\":\"%s\"},\"bindings\":{\"kv\":[\"cache\",\"only-default\"]}}}",
             dir);
    if (env_req(e, "POST", path, ADMIN_TOKEN, body) != 201)
        return -1;
    snprintf(path, sizeof(path), API "/namespaces/%s/functions/iso", ns);
    for (int i = 0; i < WAIT_MS / 100; i++, usleep(100 * 1000)) {
        const char *st = env_req(e, "GET", path, ADMIN_TOKEN, NULL) == 200
                             ? jstr(sv_ready_condition(e->r.json), "status")
                             : NULL;
        if (st && strcmp(st, "True") == 0)
            return 0;
    }
    fprintf(stderr, "%s/iso is not ready: %.600s\n", ns, e->r.body ? e->r.body : "");
    return -1;
}

static const cJSON *isolation_call(env *e, const char *ns)
{
    char path[64];
    snprintf(path, sizeof(path), "/fn/%s/iso/", ns);
    if (sv_invoke(e, "POST", path, NULL) != 200)
        fprintf(stderr, "%s/iso: %ld %.500s\n", ns, e->r.status, e->r.body);
    return e->r.json;
}

/* A function of team-b bound to a store named like one of default's sees
 * only its own namespace's store: the namespace comes from the worker's
 * socket, never from the request. */
SV_TEST(namespaces_are_apart)
{
    char dir[256];
    CHECK(sv_code_dir(dir, sizeof(dir), "main.py", isolation_py) == 0);
    CHECK(create_kvstore(e, "cache", "{}") == 201);
    CHECK(create_kvstore(e, "only-default", "{}") == 201);
    CHECK(env_req(e, "POST", NS("team-b") "/kvstores", TEAM_B_TOKEN,
                  "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"KVStore\",\"metadata\":{\"name\":"
                  "\"cache\"},\"spec\":{}}") == 201);
    CHECK(isolation_fn(e, "default", dir) == 0);
    CHECK(isolation_fn(e, "team-b", dir) == 0);
    const cJSON *j = isolation_call(e, "default");
    CHECK(cJSON_IsNull(jget(j, "seen")));
    CHECK_STR(jstr(j, "other"), "reached"); /* its own store: no key x, None */
    j = isolation_call(e, "team-b");
    CHECK(cJSON_IsNull(jget(j, "seen"))); /* not default's value */
    CHECK_CONTAINS(jstr(j, "other"), "KVStore team-b/only-default does not exist");
    j = isolation_call(e, "default");
    CHECK_STR(jstr(j, "seen"), "default");
    j = isolation_call(e, "team-b");
    CHECK_STR(jstr(j, "seen"), "team-b");
}

static const char sweep_py[] =
    "import funcd\n"
    "def handler(req):\n"
    "    other = funcd.kv('other')\n"
    "    other.put('left', 'x')\n"
    "    return {'ok': True}\n";

static const char sweep2_py[] =
    "import funcd\n"
    "def handler(req):\n"
    "    kv = funcd.kv('cache')\n"
    "    for i in range(3):\n"
    "        kv.put('t%d' % i, 'v', ttl='1s')\n"
    "    kv.put('keep', 'v')\n"
    "    return {'ok': True}\n";

static int count_key(const funcd_store_kv *kv, void *payload)
{
    funcd_buf *names = payload;
    funcd_buf_printf(names, "%s ", kv->key + strlen("/funcd/kv/default/"));
    return 0;
}

/* The keys under /funcd/kv/default/, as "store/key " words. */
static const char *kv_keys(funcd_store *store, funcd_buf *out)
{
    funcd_buf_reset(out);
    store->list(store, "/funcd/kv/default/", count_key, out, NULL);
    return out->data ? out->data : "";
}

/* A platform on a memory store the test also reads (the store's keys). */
static int platform_on_memory_store(env *e, funcd_store **store)
{
    if (funcd_store_memory_new(store, 0) < 0)
        return -1;
    if (env_up_with(e, *store, NULL, NULL, NULL) == 0)
        return 0;
    env_down(e);
    sv_cleanup();
    return -1;
}

/* Nobody reads them again, yet expired keys leave the store, and so do
 * the keys of a KVStore that was deleted: the sweeper. */
TEST(expired_keys_are_swept)
{
    funcd_store *store = NULL;
    env e_, *e = &e_;
    if (platform_on_memory_store(e, &store) < 0)
        FAILF("cannot start a platform: %s", funcd_error_last()->message);
    funcd_buf keys = FUNCD_BUF_INIT;
    char dir[256], dir2[256];
    CHECK(create_kvstore(e, "cache", "{}") == 201);
    CHECK(create_kvstore(e, "other", "{}") == 201);
    CHECK(sv_code_dir(dir, sizeof(dir), "main.py", sweep_py) == 0);
    CHECK(sv_code_dir(dir2, sizeof(dir2), "main.py", sweep2_py) == 0);
    CHECK(sv_create(e, "w1", "{\"runtime\":\"python3\",\"handler\":\"main.handler\",\"source\":"
                    "{\"path\":\"%s\"},\"bindings\":{\"kv\":[\"other\"]}}", dir) == 201);
    CHECK(sv_create(e, "w2", "{\"runtime\":\"python3\",\"handler\":\"main.handler\",\"source\":"
                    "{\"path\":\"%s\"},\"bindings\":{\"kv\":[\"cache\"]}}", dir2) == 201);
    CHECK(sv_wait_ready(e, "w1", WAIT_MS) && sv_wait_ready(e, "w2", WAIT_MS));
    CHECK_INT(sv_invoke(e, "POST", DP_PATH("w1") "/", NULL), 200);
    CHECK(env_req(e, "DELETE", NS("default") "/kvstores/other", DEV_TOKEN, NULL) == 200);
    CHECK_INT(sv_invoke(e, "POST", DP_PATH("w2") "/", NULL), 200);
    CHECK_STR(kv_keys(store, &keys), "cache/keep cache/t0 cache/t1 cache/t2 other/left ");
    for (int i = 0; i < 300 && strcmp(kv_keys(store, &keys), "cache/keep "); i++)
        usleep(100 * 1000);
    CHECK_STR(kv_keys(store, &keys), "cache/keep ");
    funcd_buf_free(&keys);
    env_down(e);
    sv_cleanup();
}

static const char churn_py[] =
    "import funcd, time\n"
    "def handler(req):\n"
    "    kv, out = funcd.kv('small'), {'stored': 0}\n"
    "    for i in range(40):\n"
    "        kv.put('e%d' % i, 'x' * 64, ttl='1ms')  # gone before the next\n"
    "        out['stored'] += 1\n"
    "        time.sleep(0.003)\n"
    "    kv.put('a', 'x')\n"
    "    kv.put('b', 'x')\n"
    "    try:\n"
    "        kv.incr('c')\n"
    "        out['incr'] = 'stored'\n"
    "    except funcd.Error as e:\n"
    "        out['incr'] = str(e)\n"
    "    return out\n";

/* Short-lived keys count against spec.maxKeys until they are removed, and
 * a put that needs room removes expired ones itself: a stream of them
 * never holds more rows than maxKeys in the store. A new key made by an
 * increment counts too. */
TEST(short_lived_keys_stay_within_max_keys)
{
    funcd_store *store = NULL;
    env e_, *e = &e_;
    if (platform_on_memory_store(e, &store) < 0)
        FAILF("cannot start a platform: %s", funcd_error_last()->message);
    funcd_buf keys = FUNCD_BUF_INIT;
    char dir[256];
    CHECK(create_kvstore(e, "small", "{\"maxKeys\":2}") == 201);
    CHECK(sv_code_dir(dir, sizeof(dir), "main.py", churn_py) == 0);
    CHECK(sv_create(e, "churn", "{\"runtime\":\"python3\",\"handler\":\"main.handler\","
                    "\"source\":{\"path\":\"%s\"},\"bindings\":{\"kv\":[\"small\"]}}", dir) == 201);
    CHECK(sv_wait_ready(e, "churn", WAIT_MS));
    if (sv_invoke(e, "POST", DP_PATH("churn") "/", NULL) != 200)
        FAILF("churn: %ld %.500s", e->r.status, e->r.body);
    CHECK_INT((int)cJSON_GetNumberValue(cJSON_GetObjectItem(e->r.json, "stored")), 40);
    CHECK_CONTAINS(jstr(e->r.json, "incr"), "507");
    const char *rows = kv_keys(store, &keys);
    int n = 0;
    for (const char *p = rows; (p = strstr(p, "small/")); p++)
        n++;
    if (n > 2)
        FAILF("%d rows in a KVStore of maxKeys 2: %.300s", n, rows);
    CHECK_STR(rows, "small/a small/b ");
    funcd_buf_free(&keys);
    env_down(e);
    sv_cleanup();
}

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    if (!sv_have_interpreters())
        return 77; /* meson: skipped */
    sv_init();
    SV_RUN(only, ran, python_kv);
    SV_RUN(only, ran, node_kv);
    SV_RUN(only, ran, store_limits);
    SV_RUN(only, ran, quota);
    SV_RUN(only, ran, namespaces_are_apart);
    SV_RUN(only, ran, expired_keys_are_swept);
    SV_RUN(only, ran, short_lived_keys_stay_within_max_keys);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no case %s\n", only);
        return 2;
    }
    return HARNESS_END();
}
