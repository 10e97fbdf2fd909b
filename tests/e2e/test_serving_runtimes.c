/*
 * Serving, end to end: each runtime (native, python3, node, exec mode, and
 * code from an uploaded bundle) serves real requests through the data
 * plane, with real worker processes started from zero.
 */
#include "../harness.h"
#include "test_serving_common.h"

#include <unistd.h>

#define QUERY "x=1&y=two"
#define BODY "ping from the test"

/* What a fixture's echo looks like for one runtime. */
typedef struct expect {
    long code;       /* HTTP status of the echo */
    int split_query; /* the echo has "path" without the query and "query" apart */
    int has_worker;  /* a long-lived worker: X-Worker-Pid, replica */
} expect;

static int has_node(void)
{
    static const char *const nodes[] = {"/usr/bin/node", "/usr/local/bin/node", "/usr/bin/nodejs",
                                        NULL};
    for (const char *const *n = nodes; *n; n++)
        if (access(*n, X_OK) == 0)
            return 1;
    return 0;
}

static long invoke_echo(env *e, const char *name)
{
    char path[256];
    snprintf(path, sizeof(path), "/fn/default/%s/echo/path?" QUERY, name);
    static const char *const headers[] = {"Content-Type: text/plain", "X-Test: t1", NULL};
    return e2e_http_send(e->dp, "POST", path, NULL, headers, BODY, strlen(BODY), &e->r);
}

/*
 * The function answers its first request from zero with what the request
 * was (method, path, query, body, invocation id, environment), and a second
 * request, to the function's root, reaches the same worker.
 */
static void check_serves(env *e, const char *name, expect x)
{
    if (!sv_wait_ready(e, name, 5000))
        FAILF("function %s not Ready: %.500s", name, e->r.body);
    int ready = -1, total = -1;
    CHECK(sv_replicas(e, name, &ready, &total) == 0);
    CHECK_INT(total, 0); /* nothing runs before the first request */

    invoke_echo(e, name);
    if (e->r.status != x.code)
        FAILF("HTTP %ld, expected %ld: %.500s", e->r.status, x.code, e->r.body);
    const cJSON *j = e->r.json;
    CHECK(cJSON_IsObject(j));
    char id[128];
    snprintf(id, sizeof(id), "%s", sv_header(&e->r, "X-Funcd-Invocation-Id"));
    CHECK(strlen(id) >= 16);
    CHECK_STR(jstr(j, "invocationId"), id);
    CHECK_STR(jstr(j, "method"), "POST");
    if (x.split_query) {
        CHECK_STR(jstr(j, "path"), "/echo/path");
        CHECK_STR(jstr(j, "query"), QUERY);
    } else {
        CHECK_STR(jstr(j, "path"), "/echo/path?" QUERY);
    }
    CHECK_STR(jstr(j, "body"), BODY);
    CHECK_STR(jstr(j, "greeting"), "hi from spec.env");
    char replica_prefix[128];
    snprintf(replica_prefix, sizeof(replica_prefix), "%s-", name);
    double pid = jnum(j, "pid");
    char replica[64];
    snprintf(replica, sizeof(replica), "%s", jstr(j, "replica") ? jstr(j, "replica") : "");
    if (x.has_worker) {
        CHECK(strncmp(replica, replica_prefix, strlen(replica_prefix)) == 0);
        CHECK(pid > 0);
        if (atol(sv_header(&e->r, "X-Worker-Pid")) != (long)pid)
            FAILF("X-Worker-Pid is not %ld in the headers:\n%s", (long)pid, e->r.headers);
    }

    char root[256];
    snprintf(root, sizeof(root), "/fn/default/%s", name);
    CHECK_INT(sv_invoke(e, "GET", root, NULL), x.code);
    char id2[128];
    snprintf(id2, sizeof(id2), "%s", sv_header(&e->r, "X-Funcd-Invocation-Id"));
    CHECK_STR(jstr(e->r.json, "invocationId"), id2);
    CHECK(strcmp(id, id2) != 0);
    CHECK_STR(jstr(e->r.json, "method"), "GET");
    CHECK_STR(jstr(e->r.json, "path"), "/");
    if (x.has_worker) /* the warm worker, not a new one (in the sandbox every pid is 2) */
        CHECK_STR(jstr(e->r.json, "replica"), replica);

    /* The cold start shows in the status (written after the worker is ready,
     * possibly after a status that already counted it as starting). */
    CHECK(sv_wait_total(e, name, 1, 1, 3000, NULL));
    char fn_path[256];
    snprintf(fn_path, sizeof(fn_path), FN_PATH("%s"), name);
    for (int i = 0; i < 300 && !jstr(e->r.json, "status.lastColdStart.time"); i++) {
        env_sleep_ms(10);
        env_req(e, "GET", fn_path, DEV_TOKEN, NULL);
    }
    CHECK(jstr(e->r.json, "status.lastColdStart.time") != NULL);
    CHECK(jnum(e->r.json, "status.lastColdStart.durationMs") >= 0);
    CHECK_STR(jstr(sv_ready_condition(e->r.json), "reason"), "Ready");
}

SV_TEST(native)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(
        sv_create(e, "native-echo",
                  "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"},"
                  "\"env\":{\"GREETING\":\"hi from spec.env\"}}",
                  dir),
        201);
    check_serves(e, "native-echo", (expect){200, 0, 1});
    if (harness_failed_now)
        return;
    /* A body that follows its head later: the head's headers arrive intact. */
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("native-echo") "/slowbody?ms=50", NULL), 200);
    CHECK_STR(jstr(e->r.json, "path"), "/slowbody?ms=50");
    long pid = (long)jnum(e->r.json, "pid");
    if (atol(sv_header(&e->r, "X-Worker-Pid")) != pid)
        FAILF("X-Worker-Pid is not %ld in the headers:\n%s", pid, e->r.headers);
}

SV_TEST(python3)
{
    char dir[256];
    CHECK(sv_fixture("python", dir, sizeof(dir)) == 0);
    CHECK_INT(
        sv_create(e, "py-echo",
                  "{\"runtime\":\"python3\",\"handler\":\"main.handler\",\"source\":{\"path\":"
                  "\"%s\"},\"env\":{\"GREETING\":\"hi from spec.env\"}}",
                  dir),
        201);
    check_serves(e, "py-echo", (expect){200, 1, 1});
}

SV_TEST(node)
{
    char dir[256];
    CHECK(sv_fixture("node", dir, sizeof(dir)) == 0);
    CHECK_INT(
        sv_create(e, "node-echo",
                  "{\"runtime\":\"node\",\"handler\":\"index.js#handler\",\"source\":{\"path\":"
                  "\"%s\"},\"env\":{\"GREETING\":\"hi from spec.env\"}}",
                  dir),
        201);
    check_serves(e, "node-echo", (expect){200, 1, 1});
}

SV_TEST(exec)
{
    char dir[256];
    CHECK(sv_fixture("exec", dir, sizeof(dir)) == 0);
    CHECK_INT(sv_create(e, "exec-echo",
                        "{\"runtime\":\"native\",\"mode\":\"exec\",\"handler\":\"handler.sh\","
                        "\"source\":{\"path\":\"%s\"},\"env\":{\"GREETING\":\"hi from spec.env\"}}",
                        dir),
              201);
    check_serves(e, "exec-echo", (expect){201, 1, 0});
    if (harness_failed_now)
        return;
    /* CGI headers of the script reach the client; request headers reach it. */
    invoke_echo(e, "exec-echo");
    CHECK_INT(e->r.status, 201);
    CHECK_STR(sv_header(&e->r, "X-Exec"), "yes");
    CHECK_STR(jstr(e->r.json, "test"), "t1");
    CHECK_STR(jstr(e->r.json, "runtime"), "exec");
}

/* Code uploaded as a tar.gz bundle (with a subdirectory) is served. */
SV_TEST(bundle)
{
    static const sv_entry files[] = {
        {"main.py",
         "import os\n"
         "from helpers.words import WORD\n"
         "def handler(req):\n"
         "    return {'bundled': WORD, 'path': req.path, 'body': req.text,\n"
         "            'invocationId': req.invocation_id, 'pid': os.getpid()}\n",
         0644},
        {"helpers", NULL, 0755},
        {"helpers/words.py", "WORD = 'from a bundle'\n", 0644},
    };
    void *tgz = NULL;
    size_t len = 0;
    CHECK(sv_targz(files, sizeof(files) / sizeof(files[0]), &tgz, &len) == 0);
    long st = sv_upload(e, tgz, len);
    long again = st == 201 ? sv_upload(e, tgz, len) : 0;
    free(tgz);
    if (st != 201)
        FAILF("upload: HTTP %ld, expected 201: %.500s", st, e->r.body);
    CHECK_INT(again, 200); /* the same bytes again: already stored */
    CHECK_STR(jstr(e->r.json, "kind"), "Bundle");
    CHECK_INT(jnum(e->r.json, "size"), len);
    const char *digest = jstr(e->r.json, "digest");
    CHECK(digest && strncmp(digest, "sha256:", 7) == 0 && strlen(digest) == 71);
    char dg[80];
    snprintf(dg, sizeof(dg), "%s", digest);

    CHECK_INT(sv_create(e, "bundled",
                        "{\"runtime\":\"python3\",\"handler\":\"main.handler\",\"source\":"
                        "{\"bundle\":\"%s\"}}",
                        dg),
              201);
    if (!sv_wait_ready(e, "bundled", 5000))
        FAILF("function not Ready: %.500s", e->r.body);
    CHECK_INT(sv_invoke(e, "POST", DP_PATH("bundled") "/inside", "payload"), 200);
    CHECK_STR(jstr(e->r.json, "bundled"), "from a bundle");
    CHECK_STR(jstr(e->r.json, "path"), "/inside");
    CHECK_STR(jstr(e->r.json, "body"), "payload");
    CHECK_STR(jstr(e->r.json, "invocationId"), sv_header(&e->r, "X-Funcd-Invocation-Id"));
}

int main(int argc, char **argv)
{
    sv_init();
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    SV_RUN(only, ran, native);
    SV_RUN(only, ran, python3);
    if (has_node()) {
        SV_RUN(only, ran, node);
    } else if (!only || strcmp(only, "node") == 0) {
        fprintf(stderr, "SKIP node: node is not installed on this host\n");
        if (only) {
            e2e_client_global_cleanup();
            return 77; /* meson: skipped */
        }
    }
    SV_RUN(only, ran, exec);
    SV_RUN(only, ran, bundle);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no test case named %s\n", only);
        return 1;
    }
    return HARNESS_END();
}
