/*
 * Outside input at the edges of its range, over real HTTP: quantities that
 * would overflow what the runtime stores, resourceVersions beyond the
 * store's revision type or not decimal, and object names in the path with
 * percent-encoded control bytes. Each is a 400 JSON Status naming the field,
 * and nothing is stored, changed or deleted.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../harness.h"
#include "env.h"

#define FNS NS("default") "/functions"
#define FCS NS("default") "/functionconfigs"

#define FN_WITH(spec_extra)                                                                        \
    "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":\"q\"},"      \
    "\"spec\":{\"runtime\":\"python3\",\"handler\":\"m.h\",\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"}," \
    spec_extra "}}"

#define FC_WITH(pod)                                                                               \
    "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"FunctionConfig\",\"metadata\":{\"name\":\"q\"}," \
    "\"spec\":{\"image\":\"example.com/fn:v1\",\"podExecutor\":{" pod "}}}"

typedef struct bad_case {
    const char *method, *path, *body, *field;
} bad_case;

static void expect_400(env *e, const bad_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const bad_case *c = &cases[i];
        REQ(c->method, c->path, DEV_TOKEN, c->body);
        const char *why = status_problem(&e->r, 400, "BadRequest", c->field);
        if (why)
            FAILF("case %zu (%s %s %.120s): %s; HTTP %ld: %.400s", i, c->method, c->path,
                  c->body ? c->body : "", why, e->r.status, e->r.body);
    }
}

static void expect_empty(env *e, const char *collection)
{
    CHECK_INT(REQ("GET", collection, DEV_TOKEN, NULL), 200);
    CHECK_INT(cJSON_GetArraySize(jget(e->r.json, "items")), 0);
}

/* ---- quantities ------------------------------------------------------------ */

E2E_TEST(quantities_beyond_their_range_are_400)
{
    static const bad_case cases[] = {
        /* 2^32 + 1 millicores once wrapped to 1m in the runtime's 32 bits. */
        {"POST", FNS, FN_WITH("\"resources\":{\"cpu\":\"4294967297m\"}"), "spec.resources.cpu"},
        {"POST", FNS, FN_WITH("\"resources\":{\"cpu\":\"4294968\"}"), "spec.resources.cpu"},
        {"POST", FNS, FN_WITH("\"resources\":{\"cpu\":4294968}"), "spec.resources.cpu"},
        {"POST", FNS, FN_WITH("\"resources\":{\"cpu\":\"1e300\"}"), "spec.resources.cpu"},
        /* Below the kernel's smallest CFS quota (1 ms per 100 ms period). */
        {"POST", FNS, FN_WITH("\"resources\":{\"cpu\":\"1m\"}"), "spec.resources.cpu"},
        {"POST", FNS, FN_WITH("\"resources\":{\"cpu\":0.001}"), "spec.resources.cpu"},
        {"POST", FNS, FN_WITH("\"resources\":{\"memory\":\"99999999999999999999Gi\"}"),
         "spec.resources.memory"},
        /* More than the kernel's signed 64-bit byte count. */
        {"POST", FNS, FN_WITH("\"resources\":{\"memory\":\"9Ei\"}"), "spec.resources.memory"},
        {"POST", FNS, FN_WITH("\"resources\":{\"memory\":\"18446744073709551615\"}"),
         "spec.resources.memory"},
        {"POST", FNS, FN_WITH("\"resources\":{\"pids\":4294967297}"), "spec.resources.pids"},
        {"POST", FNS, FN_WITH("\"resources\":{\"pids\":\"4294967297\"}"), "spec.resources.pids"},
        {"POST", FNS, FN_WITH("\"timeout\":\"99999999999h\""), "spec.timeout"},
        {"POST", FNS, FN_WITH("\"timeout\":\"99999999999999999999999h\""), "spec.timeout"},
        /* Past INT64_MAX milliseconds the pool's idle check went negative. */
        {"POST", FNS, FN_WITH("\"scaling\":{\"idleTimeout\":\"99999999999h\"}"),
         "spec.scaling.idleTimeout"},
        {"POST", FNS, FN_WITH("\"scaling\":{\"idleTimeout\":\"5124095576030432h\"}"),
         "spec.scaling.idleTimeout"},
        {"POST", FNS, FN_WITH("\"scaling\":{\"maxReplicas\":4294967297}"),
         "spec.scaling.maxReplicas"},
        {"POST", FNS, FN_WITH("\"scaling\":{\"minReplicas\":1e300}"), "spec.scaling.minReplicas"},
        {"POST", FNS, FN_WITH("\"scaling\":{\"concurrency\":1e12}"), "spec.scaling.concurrency"},
        {"POST", FNS, FN_WITH("\"scaling\":{\"queueLength\":-1}"), "spec.scaling.queueLength"},
        {"POST", FNS, FN_WITH("\"scaling\":{\"queueLength\":18446744073709551616}"),
         "spec.scaling.queueLength"},
        {"POST", FCS, FC_WITH("\"maxParallelExecutions\":4294967297"),
         "spec.podExecutor.maxParallelExecutions"},
        {"POST", FCS, FC_WITH("\"preferredMaxQueueLength\":-1"),
         "spec.podExecutor.preferredMaxQueueLength"},
        {"POST", FCS, FC_WITH("\"timeToLive\":\"99999999999h\""), "spec.podExecutor.timeToLive"},
    };
    expect_400(e, cases, sizeof(cases) / sizeof(cases[0]));
    expect_empty(e, FNS);
    expect_empty(e, FCS);

    /* The limits themselves are accepted. */
    CHECK_INT(REQ("POST", FNS, DEV_TOKEN,
                  FN_WITH("\"resources\":{\"cpu\":\"1000000\",\"memory\":\"7Ei\",\"pids\":1000000},"
                          "\"scaling\":{\"idleTimeout\":\"8760h\"},\"timeout\":\"1h\"")),
              201);
    CHECK_INT(REQ("PUT", FNS "/q", DEV_TOKEN, FN_WITH("\"resources\":{\"cpu\":\"10m\"}")), 200);
    CHECK_INT(REQ("POST", FCS, DEV_TOKEN, FC_WITH("\"timeToLive\":\"8760h\"")), 201);
}

/* ---- resourceVersion ------------------------------------------------------- */

/* A watch that must be refused before it streams. */
static void expect_watch_400(env *e, const char *query)
{
    char path[256];
    snprintf(path, sizeof(path), FNS "?watch=true&%s", query);
    e2e_watch *w = env_watch(e, path, DEV_TOKEN);
    CHECK(w != NULL);
    long code = e2e_watch_status(w, 10000);
    if (code != 400)
        FAILF("GET %s: HTTP %ld, expected 400", path, code);
    char *line = e2e_watch_next(w, 10000);
    cJSON *j = line ? cJSON_Parse(line) : NULL;
    free(line);
    const char *field = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "field"));
    int ok = field && strcmp(field, "resourceVersion") == 0;
    cJSON_Delete(j);
    if (!ok)
        FAILF("GET %s: the Status does not name resourceVersion", path);
}

static const char *const bad_rvs[] = {
    "resourceVersion=99999999999999999999999", /* past uint64 */
    "resourceVersion=9223372036854775808",     /* past the store's int64 revisions */
    "resourceVersion=12a",
    "resourceVersion=-1",
    "resourceVersion=+5",
    "resourceVersion=%205",
    "resourceVersion=", /* given but empty: leave it out instead */
    "resourceVersion",
};

E2E_TEST(watch_resource_version_is_strict)
{
    for (size_t i = 0; i < sizeof(bad_rvs) / sizeof(bad_rvs[0]); i++)
        expect_watch_400(e, bad_rvs[i]);
}

E2E_TEST(list_resource_version_is_strict)
{
    for (size_t i = 0; i < sizeof(bad_rvs) / sizeof(bad_rvs[0]); i++) {
        char path[256];
        snprintf(path, sizeof(path), FNS "?%s", bad_rvs[i]);
        REQ("GET", path, DEV_TOKEN, NULL);
        CHECK_STATUS(400, "BadRequest", "resourceVersion");
    }
    CHECK_INT(REQ("GET", FNS "?resourceVersion=0", DEV_TOKEN, NULL), 200);
    CHECK_INT(REQ("GET", FNS "?resourceVersion=9223372036854775807", DEV_TOKEN, NULL), 200);
}

#define FN_RV(rv)                                                                                  \
    "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":\"a\","        \
    "\"resourceVersion\":\"" rv "\"},\"spec\":{\"runtime\":\"python3\",\"handler\":\"m.h\","     \
    "\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"}}}"

E2E_TEST(body_resource_version_is_strict)
{
    static const bad_case cases[] = {
        {"PUT", FNS "/a", FN_RV("99999999999999999999999"), "metadata.resourceVersion"},
        {"PUT", FNS "/a", FN_RV("18446744073709551615"), "metadata.resourceVersion"},
        {"PUT", FNS "/a", FN_RV("9223372036854775808"), "metadata.resourceVersion"},
        {"PUT", FNS "/a", FN_RV("-1"), "metadata.resourceVersion"},
        {"PUT", FNS "/a", FN_RV("12a"), "metadata.resourceVersion"},
    };
    CHECK_INT(REQ("POST", FNS, DEV_TOKEN, FUNCTION_JSON("a", "m.h")), 201);
    uint64_t rv = jrv(e->r.json);
    expect_400(e, cases, sizeof(cases) / sizeof(cases[0]));
    CHECK_INT(REQ("GET", FNS "/a", DEV_TOKEN, NULL), 200);
    CHECK(jnum(e->r.json, "metadata.generation") == 1);
    CHECK(jrv(e->r.json) >= rv);
    /* The largest revision is well-formed: a conflict, not a bad request. */
    CHECK_INT(REQ("PUT", FNS "/a", DEV_TOKEN, FN_RV("9223372036854775807")), 409);
    CHECK_STATUS(409, "Conflict", "metadata.resourceVersion");
}

/* ---- log query numbers --------------------------------------------------------- */

E2E_TEST(log_tail_lines_beyond_range_are_400)
{
    CHECK_INT(REQ("POST", FNS, DEV_TOKEN, FUNCTION_JSON("abc", "main.handler")), 201);
    static const char *const bad[] = {"99999999999999999999", "9223372036854775808", "-1", "1x",
                                      "+1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char path[256];
        snprintf(path, sizeof(path), FNS "/abc/logs?tailLines=%s", bad[i]);
        REQ("GET", path, DEV_TOKEN, NULL);
        const char *why = status_problem(&e->r, 400, "BadRequest", "tailLines");
        if (why)
            FAILF("GET %s: %s; HTTP %ld: %.300s", path, why, e->r.status, e->r.body);
    }
    CHECK_INT(REQ("GET", FNS "/abc/logs?tailLines=9223372036854775807", DEV_TOKEN, NULL), 200);
}

/* ---- names with control bytes ------------------------------------------------ */

E2E_TEST(names_with_control_bytes_are_400)
{
    CHECK_INT(REQ("POST", FNS, DEV_TOKEN, FUNCTION_JSON("abc", "main.handler")), 201);
    CHECK(env_settle(e, FNS "/abc"));
    CHECK_INT(REQ("GET", FNS "/abc", DEV_TOKEN, NULL), 200);
    uint64_t rv = jrv(e->r.json);

    static const char *const names[] = {"abc%00def", "abc%00", "abc%0a", "abc%0A", "abc%1f",
                                        "abc%7f", "abc%0d%0a"};
    static const char *const methods[] = {"GET", "PUT", "DELETE"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        for (size_t m = 0; m < 3; m++) {
            char path[256];
            snprintf(path, sizeof(path), FNS "/%s", names[i]);
            REQ(methods[m], path, DEV_TOKEN,
                m == 1 ? FUNCTION_JSON("abc", "other.handler") : NULL);
            const char *why = status_problem(&e->r, 400, "BadRequest", "metadata.name");
            if (why)
                FAILF("%s %s: %s; HTTP %ld: %.300s", methods[m], path, why, e->r.status,
                      e->r.body);
        }
    }
    /* The namespace segment too. */
    REQ("DELETE", NS("default%00x") "/functions/abc", DEV_TOKEN, NULL);
    CHECK_STATUS(400, "BadRequest", "metadata.namespace");
    REQ("GET", NS("default%0a") "/functions", DEV_TOKEN, NULL);
    CHECK_STATUS(400, "BadRequest", "metadata.namespace");

    /* "abc" is untouched: same handler, same revision. */
    CHECK_INT(REQ("GET", FNS "/abc", DEV_TOKEN, NULL), 200);
    CHECK_STR(jstr(e->r.json, "spec.handler"), "main.handler");
    CHECK(jrv(e->r.json) == rv);

    /* Names in bodies: a NUL escape in JSON or YAML, a control character. */
    REQ("POST", FNS, DEV_TOKEN, FUNCTION_JSON("abc\\u0000def", "m.h"));
    CHECK_STATUS(400, "BadRequest", NULL);
    REQ("PUT", FNS "/abc", DEV_TOKEN, FUNCTION_JSON("abc\\u0000def", "m.h"));
    CHECK_STATUS(400, "BadRequest", NULL);
    REQ("POST", FNS, DEV_TOKEN, FUNCTION_JSON("abc\\u000adef", "m.h"));
    CHECK_STATUS(400, "BadRequest", "metadata.name");
    REQ("POST", FNS, DEV_TOKEN,
        "apiVersion: funcd.dev/v1\nkind: Function\nmetadata: {name: \"abc\\0def\"}\n"
        "spec: {runtime: python3, handler: m.h, source: {bundle: \"" NO_SUCH_BUNDLE "\"}}\n");
    CHECK_STATUS(400, "BadRequest", NULL);
    CHECK_INT(REQ("GET", FNS, DEV_TOKEN, NULL), 200);
    CHECK_INT(cJSON_GetArraySize(jget(e->r.json, "items")), 1);
    CHECK_INT(REQ("GET", FNS "/abc", DEV_TOKEN, NULL), 200);
    CHECK_STR(jstr(e->r.json, "spec.handler"), "main.handler");
}

/* ---- request heads ------------------------------------------------------------ */

/* Sends `head` (and no body) on a new connection; what comes back before
 * the server closes, within 10 s. */
static void raw_exchange(env *e, const char *head, char *out, size_t cap)
{
    out[0] = '\0';
    int port = 0;
    if (sscanf(e->base, "http://127.0.0.1:%d", &port) != 1)
        return;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    size_t got = 0;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        send(fd, head, strlen(head), MSG_NOSIGNAL) == (ssize_t)strlen(head)) {
        for (int64_t t0 = e2e_now_ms(); got < cap - 1 && e2e_now_ms() - t0 < 10000;) {
            struct pollfd p = {fd, POLLIN, 0};
            if (poll(&p, 1, 200) <= 0)
                continue;
            ssize_t n = recv(fd, out + got, cap - 1 - got, 0);
            if (n <= 0)
                break;
            got += (size_t)n;
        }
    }
    out[got] = '\0';
    close(fd);
}

/* A head that h2o and funcd's parser could read differently (a body
 * announced two ways, a field folded over lines) is refused with a JSON
 * Status before its body: h2o would otherwise read the body unchecked. */
E2E_TEST(ambiguous_request_heads_are_400_before_their_body)
{
    static const char *const heads[] = {
        "POST " FNS " HTTP/1.1\r\nHost: funcd\r\nAuthorization: Bearer " DEV_TOKEN "\r\n"
        "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST " FNS " HTTP/1.1\r\nHost: funcd\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        "POST " FNS " HTTP/1.1\r\nHost: funcd\r\nX-A: a\r\n folded\r\nContent-Length: 5\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
        char answer[4096];
        raw_exchange(e, heads[i], answer, sizeof(answer));
        if (strncmp(answer, "HTTP/1.1 400 ", 13) != 0 || !strstr(answer, "\"kind\":\"Status\"") ||
            !strstr(answer, "not valid HTTP/1.1"))
            FAILF("head %zu: answered %.300s", i, answer);
    }
    /* The same requests, well formed, are still served. */
    CHECK_INT(REQ("POST", FNS, DEV_TOKEN, FUNCTION_JSON("abc", "main.handler")), 201);
}

int main(void)
{
    e2e_client_global_init();
    RUN_ISOLATED(quantities_beyond_their_range_are_400);
    RUN_ISOLATED(watch_resource_version_is_strict);
    RUN_ISOLATED(list_resource_version_is_strict);
    RUN_ISOLATED(body_resource_version_is_strict);
    RUN_ISOLATED(names_with_control_bytes_are_400);
    RUN_ISOLATED(log_tail_lines_beyond_range_are_400);
    RUN_ISOLATED(ambiguous_request_heads_are_400_before_their_body);
    e2e_client_global_cleanup();
    return HARNESS_END();
}
