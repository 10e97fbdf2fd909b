/*
 * Serving, end to end: a python3 or node function whose handler cannot be
 * loaded is not reported Ready (issue 12). A new or changed spec of an
 * interpreted runtime is Ready only once one worker loaded its handler;
 * one that cannot says Ready=False, reason HandlerLoadFailed, with the
 * first line of the error as the message (the whole text in the function's
 * logs), and `funcdctl deploy` says so and exits 1. Fixing the spec makes
 * it Ready.
 *
 *   test_e2e_serving_handlers CASE
 */
#include "../harness.h"
#include "test_serving_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define WAIT_MS 20000

static long create(env *e, const char *name, const char *runtime, const char *handler,
                   const char *dir)
{
    return sv_create(e, name, "{\"runtime\":\"%s\",\"handler\":\"%s\",\"source\":{\"path\":\"%s\"}}",
                     runtime, handler, dir);
}

/* PUTs a new spec for `name` (a changed spec: a new generation). */
static long replace(env *e, const char *name, const char *runtime, const char *handler,
                    const char *dir)
{
    char body[1024], path[256];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"%s\"},\"spec\":{\"runtime\":\"%s\",\"handler\":\"%s\",\"source\":{\"path\":"
             "\"%s\"}}}",
             name, runtime, handler, dir);
    snprintf(path, sizeof(path), FN_PATH("%s"), name);
    return env_req(e, "PUT", path, ADMIN_TOKEN, body); /* a host path: the operator's */
}

typedef struct want {
    const char *name, *reason;
} want;

/* Ready=False with `reason` for the current generation. */
static int has_reason(env *e, void *arg)
{
    const want *w = arg;
    char path[256];
    snprintf(path, sizeof(path), FN_PATH("%s"), w->name);
    if (env_req(e, "GET", path, DEV_TOKEN, NULL) != 200)
        return 0;
    const cJSON *ready = sv_ready_condition(e->r.json);
    const char *status = jstr(ready, "status"), *reason = jstr(ready, "reason");
    double gen = jnum(e->r.json, "metadata.generation");
    double seen = jnum(e->r.json, "status.observedGeneration");
    return status && reason && strcmp(status, "False") == 0 && strcmp(reason, w->reason) == 0 &&
           seen >= gen;
}

/* Waits for HandlerLoadFailed; the condition's message into `msg`. */
static int wait_load_failed(env *e, const char *name, char *msg, size_t n)
{
    want w = {name, "HandlerLoadFailed"};
    msg[0] = '\0';
    if (!env_poll(e, WAIT_MS, has_reason, &w)) {
        fprintf(stderr, "  %s never said HandlerLoadFailed; its last state:\n  %.2000s\n", name,
                e->r.body ? e->r.body : "");
        return 0;
    }
    const char *m = jstr(sv_ready_condition(e->r.json), "message");
    snprintf(msg, n, "%s", m ? m : "");
    return 1;
}

typedef struct logged {
    const char *name, *text;
} logged;

static int logs_have(env *e, void *arg)
{
    const logged *l = arg;
    char path[256];
    snprintf(path, sizeof(path), FN_PATH("%s") "/logs", l->name);
    return env_req(e, "GET", path, DEV_TOKEN, NULL) == 200 && e->r.body &&
           strstr(e->r.body, l->text) != NULL;
}

/* The message is one line: the first of the error. */
#define CHECK_ONE_LINE(msg)                                                                        \
    do {                                                                                           \
        if (strchr((msg), '\n'))                                                                   \
            FAILF("the message is more than one line: %s", (msg));                                 \
    } while (0)

static const char good_py[] = "def handler(req):\n    return {'ok': True}\n";
static const char good_js[] = "exports.handler = async (req) => ({ ok: true });\n";

/* No main.py: ModuleNotFoundError, in the logs too. Fixing the spec (a directory with main.py) makes it Ready. */
SV_TEST(python_missing_module)
{
    char empty[256], good[256], msg[1024];
    CHECK(sv_code_dir(empty, sizeof(empty), "other.py", "x = 1\n") == 0);
    CHECK(sv_code_dir(good, sizeof(good), "main.py", good_py) == 0);
    CHECK_INT(create(e, "nomain", "python3", "main.handler", empty), 201);
    CHECK(wait_load_failed(e, "nomain", msg, sizeof(msg)));
    CHECK_CONTAINS(msg, "ModuleNotFoundError");
    CHECK_CONTAINS(msg, "No module named 'main'");
    CHECK_ONE_LINE(msg);
    logged l = {"nomain", "\"traceback\":\"ModuleNotFoundError: No module named 'main'"};
    if (!env_poll(e, 5000, logs_have, &l))
        FAILF("the error is not in the function's logs: %.1500s", e->r.body);
    CHECK_INT(replace(e, "nomain", "python3", "main.handler", good), 200);
    if (!sv_wait_ready(e, "nomain", WAIT_MS))
        FAILF("the fixed spec never became Ready: %.1500s", e->r.body);
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("nomain") "/", NULL), 200);
}

/* main.py imports a module that does not exist. */
SV_TEST(python_import_error)
{
    char dir[256], msg[1024];
    CHECK(sv_code_dir(dir, sizeof(dir), "main.py",
                   "import funcd_no_such_module_here\n\n" "def handler(req):\n    return 'x'\n") ==
          0);
    CHECK_INT(create(e, "badimport", "python3", "main.handler", dir), 201);
    CHECK(wait_load_failed(e, "badimport", msg, sizeof(msg)));
    CHECK_CONTAINS(msg, "No module named 'funcd_no_such_module_here'");
    CHECK_ONE_LINE(msg);
    /* The whole traceback, which the message is the last line of, is in the logs. */
    logged l = {"badimport", "Traceback (most recent call last)"};
    if (!env_poll(e, 5000, logs_have, &l))
        FAILF("the traceback is not in the function's logs: %.1500s", e->r.body);
}

/* index.js does not parse; fixed, it becomes Ready. */
SV_TEST(node_syntax_error)
{
    char bad[256], good[256], msg[1024];
    CHECK(sv_code_dir(bad, sizeof(bad), "index.js",
                   "exports.handler = async (req) => {\n  return { ok: true ;\n};\n") == 0);
    CHECK(sv_code_dir(good, sizeof(good), "index.js", good_js) == 0);
    CHECK_INT(create(e, "badjs", "node", "index.js#handler", bad), 201);
    CHECK(wait_load_failed(e, "badjs", msg, sizeof(msg)));
    CHECK_CONTAINS(msg, "SyntaxError");
    CHECK_ONE_LINE(msg);
    CHECK_INT(replace(e, "badjs", "node", "index.js#handler", good), 200);
    if (!sv_wait_ready(e, "badjs", WAIT_MS))
        FAILF("the fixed spec never became Ready: %.1500s", e->r.body);
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("badjs") "/", NULL), 200);
}

/* Good handlers of both runtimes become Ready and serve. */
SV_TEST(good_handlers_ready)
{
    char py[256], js[256];
    CHECK(sv_code_dir(py, sizeof(py), "main.py", good_py) == 0);
    CHECK(sv_code_dir(js, sizeof(js), "index.js", good_js) == 0);
    CHECK_INT(create(e, "goodpy", "python3", "main.handler", py), 201);
    CHECK_INT(create(e, "goodjs", "node", "index.js#handler", js), 201);
    if (!sv_wait_ready(e, "goodpy", WAIT_MS))
        FAILF("goodpy never became Ready: %.1500s", e->r.body);
    if (!sv_wait_ready(e, "goodjs", WAIT_MS))
        FAILF("goodjs never became Ready: %.1500s", e->r.body);
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("goodpy") "/", NULL), 200);
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("goodjs") "/", NULL), 200);
}

/* `funcdctl deploy` waits for Ready: for a handler that cannot load it
 * prints the reason and the message, and exits 1. */
SV_TEST(deploy_says_why)
{
    char dir[256], cmd[2048], errf[300], err[4096] = "";
    CHECK(sv_code_dir(dir, sizeof(dir), "main.py", "import funcd_not_installed_anywhere\n") == 0);
    snprintf(errf, sizeof(errf), "%s/.deploy.err", dir);
    const char *root = getenv("FUNCD_BUILD_ROOT");
    snprintf(cmd, sizeof(cmd),
             "'%s/bin/funcdctl/funcdctl' --server '%s' --token " DEV_TOKEN " deploy '%s' "
             "--name clibad --runtime python3 --handler main.handler --wait-timeout 30s "
             ">/dev/null 2>'%s' </dev/null",
             root ? root : ".", e->base, dir, errf);
    int st = system(cmd);
    FILE *f = fopen(errf, "r");
    size_t n = f ? fread(err, 1, sizeof(err) - 1, f) : 0;
    err[n] = '\0';
    if (f)
        fclose(f);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 1)
        FAILF("funcdctl deploy ended with %d, not exit 1; stderr: %s", st, err);
    CHECK_CONTAINS(err, "function/clibad is not ready: HandlerLoadFailed: cannot load handler "
                        "main.handler");
    CHECK_CONTAINS(err, "No module named 'funcd_not_installed_anywhere'");
}

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    if (!sv_have_interpreters())
        return 77; /* meson: skipped */
    sv_init();
    SV_RUN(only, ran, python_missing_module);
    SV_RUN(only, ran, python_import_error);
    SV_RUN(only, ran, node_syntax_error);
    SV_RUN(only, ran, good_handlers_ready);
    SV_RUN(only, ran, deploy_says_why);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no case %s\n", only);
        return 2;
    }
    return HARNESS_END();
}
