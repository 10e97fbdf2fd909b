/*
 * Function-to-function calls through the local API, end to end
 * (docs/services.md): a python3 or node function whose spec.bindings.invoke
 * lists a native function calls it with funcd.invoke (the shims' helper,
 * over FUNCD_API); the call goes through the platform (the callee starts
 * from zero), carries the caller's trace, and says who called. A callee not
 * in the bindings is 403; a function without bindings has no FUNCD_API.
 *
 *   test_e2e_fn_invoke CASE
 */
#include "../harness.h"
#include "test_serving_common.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define WAIT_MS 20000

static const char caller_py[] =
    "import funcd\n"
    "def handler(req):\n"
    "    target = req.args.get('target', 'callee')\n"
    "    try:\n"
    "        r = funcd.invoke(target, req.body, path='/from-python?x=1')\n"
    "    except funcd.Error as e:\n"
    "        return 500, {'content-type': 'text/plain'}, 'no api: ' + str(e)\n"
    "    return r.status, {'content-type': r.headers.get('content-type', '')}, r.body\n";

static const char caller_js[] =
    "exports.handler = async (req) => {\n"
    "    const r = await req.invoke(req.args.target || 'callee', req.body, {path: '/from-node'});\n"
    "    return {status: r.status, headers: {'content-type': r.headers['content-type'] || ''},\n"
    "            body: r.body};\n"
    "};\n";

/* A function of `code` (python3 or node) named `name`, bound to `bound`
 * (a JSON list, or NULL: no bindings), with `more` spec fields (or ""),
 * ready. */
static int bound_fn(env *e, const char *name, const char *runtime, const char *code,
                    const char *bound, const char *more)
{
    char dir[256], bindings[256] = "";
    int py = strcmp(runtime, "python3") == 0;
    if (sv_code_dir(dir, sizeof(dir), py ? "main.py" : "index.js", code) != 0)
        return -1;
    if (bound)
        snprintf(bindings, sizeof(bindings), ",\"bindings\":{\"invoke\":%s}", bound);
    if (sv_create(e, name, "{\"runtime\":\"%s\",\"handler\":\"%s\",\"source\":{\"path\":\"%s\"}%s%s}",
                  runtime, py ? "main.handler" : "index.js", dir, bindings, more) != 201)
        return -1;
    if (sv_wait_ready(e, name, WAIT_MS))
        return 0;
    fprintf(stderr, "%s is not ready: %.600s\n", name, e->r.body ? e->r.body : "");
    return -1;
}

/* The caller (`runtime` python3 or node) named `name`, bound to `bound`. */
static int caller(env *e, const char *name, const char *runtime, const char *bound)
{
    int py = strcmp(runtime, "python3") == 0;
    return bound_fn(e, name, runtime, py ? caller_py : caller_js, bound, "");
}

/* The callee: the native fixture, from zero. */
static int callee(env *e, const char *name)
{
    return sv_native(e, name, "\"scaling\":{\"minReplicas\":0,\"idleTimeout\":\"1s\"}");
}

static const char trace[] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/* Calls `who` on the data plane with a traceparent and checks the native
 * callee's echo. */
static void check_call(env *e, const char *who, const char *sub_path)
{
    char path[256], out[512];
    snprintf(path, sizeof(path), DP_PATH("%s") "/?target=callee", who);
    e2e_resp_free(&e->r);
    char hdr[128];
    snprintf(hdr, sizeof(hdr), "traceparent: %s", trace);
    const char *headers[] = {hdr, NULL};
    long code = e2e_http_send(e->dp, "POST", path, NULL, headers, "ping", 4, &e->r);
    snprintf(out, sizeof(out), "%ld %.400s", code, e->r.body ? e->r.body : "");
    if (code != 200)
        FAILF("caller %s: %s", who, out);
    CHECK_STR(jstr(e->r.json, "method"), "POST");
    CHECK_CONTAINS(jstr(e->r.json, "path"), sub_path);
    CHECK_STR(jstr(e->r.json, "body"), "ping");
    /* The callee continues the caller's trace (a child span of it). */
    CHECK(strncmp(jstr(e->r.json, "traceparent"), trace, 36) == 0);
}

SV_TEST(python_calls_native)
{
    CHECK(callee(e, "callee") == 0);
    CHECK(sv_wait_total(e, "callee", 0, 0, WAIT_MS, NULL)); /* from zero */
    CHECK(caller(e, "py-caller", "python3", "[\"callee\"]") == 0);
    check_call(e, "py-caller", "/from-python");
    if (harness_failed_now)
        return;
    /* Not bound: 403 from the local API, passed back by the caller. */
    CHECK(sv_native(e, "other", NULL) == 0);
    CHECK(sv_invoke(e, "POST", DP_PATH("py-caller") "/?target=other", "x") == 403);
    CHECK_CONTAINS(jstr(e->r.json, "message"), "spec.bindings.invoke");
    /* Bound but not there: 404. */
    CHECK(caller(e, "py-ghost", "python3", "[\"ghost\"]") == 0);
    CHECK(sv_invoke(e, "POST", DP_PATH("py-ghost") "/?target=ghost", "x") == 404);
}

SV_TEST(node_calls_native)
{
    CHECK(callee(e, "callee") == 0);
    CHECK(caller(e, "js-caller", "node", "[\"callee\"]") == 0);
    check_call(e, "js-caller", "/from-node");
    if (harness_failed_now)
        return;
    CHECK(sv_native(e, "other", NULL) == 0);
    CHECK(sv_invoke(e, "POST", DP_PATH("js-caller") "/?target=other", "x") == 403);
}

SV_TEST(no_bindings_no_api)
{
    CHECK(callee(e, "callee") == 0);
    CHECK(caller(e, "plain", "python3", NULL) == 0);
    CHECK(sv_invoke(e, "POST", DP_PATH("plain") "/?target=callee", "x") == 500);
    CHECK_CONTAINS(e->r.body, "no api: FUNCD_API is not set");
}

/* A caller that sends a call with a body through its local API and exits
 * before the callee (from zero) takes it: funcd must send the callee the
 * body it was given, never memory freed with the caller's socket. Run
 * many times, since the caller's end and the callee's start race. */
static const char leaver_py[] =
    "import os, socket, time\n"
    "def handler(req):\n"
    "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
    "    s.connect(os.environ['FUNCD_API'][len('unix:'):])\n"
    "    body = b'funcd-body-' * 6000\n"
    "    s.sendall(b'POST /fn/callee/ HTTP/1.1\\r\\nHost: api\\r\\nContent-Length: %d\\r\\n'\n"
    "              b'\\r\\n' % len(body) + body)\n"
    "    time.sleep(0.02)\n"
    "    os._exit(0)\n";

SV_TEST(caller_gone_before_the_callee)
{
    CHECK(bound_fn(e, "leaver", "python3", leaver_py, "[\"callee\"]", "") == 0);
    CHECK(sv_native(e, "callee", "\"scaling\":{\"minReplicas\":0,\"idleTimeout\":\"1s\"},"
                                 "\"env\":{\"FIXTURE_START_DELAY_MS\":\"300\"}") == 0);
    for (int round = 0; round < 4 && !harness_failed_now; round++) {
        /* the callee from zero each round: its start outlasts the caller */
        CHECK(sv_wait_total(e, "callee", 0, 0, WAIT_MS, NULL));
        long code = sv_invoke(e, "POST", DP_PATH("leaver") "/", "x");
        if (code == 200)
            FAILF("round %d: the caller answered although it exits", round);
        /* the callee took its call (or none came), and the platform stands */
        usleep(500 * 1000);
        CHECK(sv_invoke(e, "POST", DP_PATH("callee") "/", "after") == 200);
        CHECK_STR(jstr(e->r.json, "body"), "after");
    }
}

/* A function bound to itself that calls itself on every request: the chain
 * ends at the hop limit with 508, passed back up, rather than filling its
 * pool's slots until the timeout. */
static const char recurse_py[] =
    "import funcd\n"
    "def handler(req):\n"
    "    r = funcd.invoke('rec', b'', path='/')\n"
    "    return r.status, {'content-type': 'application/json'}, r.body\n";

SV_TEST(a_binding_cycle_ends_at_the_hop_limit)
{
    CHECK(bound_fn(e, "rec", "python3", recurse_py, "[\"rec\"]",
                   ",\"scaling\":{\"maxReplicas\":12,\"concurrency\":1,\"queueLength\":4}") == 0);
    long code = sv_invoke(e, "POST", DP_PATH("rec") "/", "x");
    if (code != 508)
        FAILF("a cycle of calls: %ld %.300s", code, e->r.body ? e->r.body : "");
    CHECK_CONTAINS(e->r.body, "spec.bindings.invoke");
}

SV_TEST(bad_bindings)
{
    static const struct {
        const char *bindings, *field;
    } bad[] = {
        {"{\"invoke\":\"callee\"}", "spec.bindings.invoke"},
        {"{\"invoke\":[\"Bad_Name\"]}", "spec.bindings.invoke[0]"},
        {"{\"invoke\":[\"a\",\"a\"]}", "spec.bindings.invoke[1]"},
        {"{\"blob\":[\"store\"],\"invoke\":[]}", "spec.bindings"},
        {"[\"callee\"]", "spec.bindings"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char name[16];
        snprintf(name, sizeof(name), "bad%zu", i);
        CHECK(sv_create(e, name,
                        "{\"runtime\":\"python3\",\"handler\":\"main.handler\",\"source\":"
                        "{\"bundle\":\"" NO_SUCH_BUNDLE "\"},\"bindings\":%s}",
                        bad[i].bindings) == 400);
        CHECK_CONTAINS(jstr(e->r.json, "message"), bad[i].field);
    }
}

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    if (!sv_have_interpreters())
        return 77; /* meson: skipped */
    sv_init();
    SV_RUN(only, ran, python_calls_native);
    SV_RUN(only, ran, node_calls_native);
    SV_RUN(only, ran, no_bindings_no_api);
    SV_RUN(only, ran, bad_bindings);
    SV_RUN(only, ran, caller_gone_before_the_callee);
    SV_RUN(only, ran, a_binding_cycle_ends_at_the_hop_limit);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no case %s\n", only);
        return 2;
    }
    return HARNESS_END();
}
