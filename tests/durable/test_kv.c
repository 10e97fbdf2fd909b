/*
 * KV data across a restart (docs/services.md), through the real daemon on a
 * data directory: a python3 function bound to a KVStore writes a key and
 * increments a counter; funcd is killed with SIGKILL and started again on
 * the same directory; the function reads back what was acknowledged. The
 * --kv-store-quota and --namespace-object-quota flags are honoured.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../e2e/client.h"
#include "../e2e/env.h"
#include "../harness.h"
#include "daemon.h"
#include "util/misc.h"

static const char handler_py[] =
    "import funcd\n"
    "def handler(req):\n"
    "    kv = funcd.kv('cache')\n"
    "    if req.args.get('op') == 'write':\n"
    "        kv.put('greeting', 'kept across a restart')\n"
    "        return {'count': kv.incr('count')}\n"
    "    item = kv.get('greeting')\n"
    "    return {'greeting': item.text if item else None, 'count': kv.incr('count')}\n";

typedef struct kv_test {
    char dir[256], data[300], log[300], code[300];
    dd_daemon d;
    e2e_http *h, *dp;
    e2e_resp r;
} kv_test;

static int start(kv_test *t, const char *const *extra)
{
    const char *args[40];
    dd_default_args(args, 40, "--data-dir", t->data, extra);
    if (dd_start(&t->d, t->log, args) < 0)
        return -1;
    e2e_http_free(t->h);
    e2e_http_free(t->dp);
    t->h = e2e_http_new(t->d.cp);
    t->dp = e2e_http_new(t->d.dp);
    return t->h && t->dp ? 0 : -1;
}

/* Calls the function until it answers 200 (it may still be starting). */
static long call(kv_test *t, const char *op)
{
    char path[128];
    snprintf(path, sizeof(path), "/fn/default/kv-user/?op=%s", op);
    long code = 0;
    for (int i = 0; i < 200 && code != 200; i++) {
        code = e2e_http_do(t->dp, "POST", path, NULL, "", &t->r);
        if (code != 200)
            dd_sleep_ms(100);
    }
    return code;
}

static void kv_body(kv_test *t)
{
    char file[400], body[1024];
    snprintf(file, sizeof(file), "%s/main.py", t->code);
    FILE *f = mkdir(t->code, 0755) == 0 ? fopen(file, "w") : NULL;
    CHECK(f);
    fputs(handler_py, f);
    fclose(f);
    CHECK(start(t, NULL) == 0);
    CHECK_INT(e2e_http_do(t->h, "POST", DD_NS "/kvstores", DD_TOKEN,
                          "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"KVStore\",\"metadata\":"
                          "{\"name\":\"cache\"},\"spec\":{}}",
                          &t->r),
              201);
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"kv-user\"},\"spec\":{\"runtime\":\"python3\",\"handler\":\"main.handler\","
             "\"source\":{\"path\":\"%s\"},\"bindings\":{\"kv\":[\"cache\"]}}}",
             t->code);
    CHECK_INT(e2e_http_do(t->h, "POST", DD_NS "/functions", DD_TOKEN, body, &t->r), 201);
    CHECK_INT(call(t, "write"), 200);
    CHECK_INT(jnum(t->r.json, "count"), 1);
    CHECK_INT(call(t, "write"), 200);
    CHECK_INT(jnum(t->r.json, "count"), 2);
    dd_kill9(&t->d); /* acknowledged writes must be there after this */
    CHECK(start(t, NULL) == 0);
    CHECK_INT(call(t, "read"), 200);
    CHECK_STR(jstr(t->r.json, "greeting"), "kept across a restart");
    CHECK_INT(jnum(t->r.json, "count"), 3);
    dd_kill9(&t->d);

    /* --kv-store-quota 1: the cache exists, a second store is refused.
     * --namespace-object-quota 2: the cache and the function, counted from
     * the data directory at the first create, fill the namespace; updates pass. */
    static const char *const quota[] = {"--kv-store-quota", "1", "--namespace-object-quota", "2",
                                        NULL};
    CHECK(start(t, quota) == 0);
    CHECK_INT(e2e_http_do(t->h, "POST", DD_NS "/kvstores", DD_TOKEN,
                          "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"KVStore\",\"metadata\":"
                          "{\"name\":\"second\"},\"spec\":{}}",
                          &t->r),
              403);
    CHECK_CONTAINS(jstr(t->r.json, "message"), "--kv-store-quota 1");
    CHECK_INT(e2e_http_do(t->h, "POST", DD_NS "/secrets", DD_TOKEN,
                          "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Secret\",\"metadata\":"
                          "{\"name\":\"one-more\"},\"stringData\":{\"k\":\"v\"}}",
                          &t->r),
              403);
    CHECK_CONTAINS(jstr(t->r.json, "message"), "namespace default has 2 objects");
    CHECK_CONTAINS(jstr(t->r.json, "message"), "--namespace-object-quota 2");
    CHECK_INT(e2e_http_do(t->h, "PUT", DD_NS "/kvstores/cache", DD_TOKEN,
                          "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"KVStore\",\"metadata\":"
                          "{\"name\":\"cache\"},\"spec\":{\"maxKeys\":100}}",
                          &t->r),
              200);
}

TEST(kv_survives_kill9)
{
    kv_test t = {.r = E2E_RESP_INIT};
    if (dd_tempdir(t.dir, sizeof(t.dir), "kv") < 0)
        FAILF("mkdtemp: %s", strerror(errno));
    chmod(t.dir, 0755); /* sandboxed workers run as nobody and must reach their code */
    snprintf(t.data, sizeof(t.data), "%s/data", t.dir);
    snprintf(t.log, sizeof(t.log), "%s/funcd.log", t.dir);
    snprintf(t.code, sizeof(t.code), "%s/code", t.dir);
    kv_body(&t);
    if (harness_failed_now)
        dd_dump_log(&t.d);
    dd_kill9(&t.d);
    e2e_http_free(t.h);
    e2e_http_free(t.dp);
    e2e_resp_free(&t.r);
    funcd_remove_tree(t.dir);
}

int main(void)
{
    if (access("/usr/bin/python3", X_OK) != 0) {
        fprintf(stderr, "SKIP: python3 is not installed\n");
        return 77;
    }
    signal(SIGPIPE, SIG_IGN);
    e2e_client_global_init();
    RUN(kv_survives_kill9);
    e2e_client_global_cleanup();
    return HARNESS_END();
}
