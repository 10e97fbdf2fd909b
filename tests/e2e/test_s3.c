/*
 * The S3 gateway end to end (docs/s3.md), driven by Debian's real clients:
 * awscli (`aws s3 cp/ls/rm`) and boto3 (tests/s3/s3_client.py: multipart
 * upload of 64 MiB, ranged GETs, ListObjectsV2 with delimiter and
 * continuation, a presigned GET fetched here with curl, a write outside the
 * bound prefix denied), against the host listener (funcd_with_s3 on
 * 127.0.0.1:0) of a funcd_in_memory() platform; S3's errors; the admin-only
 * credentials endpoint; and the same boto3 script run as a sandboxed python3
 * Function reaching 127.0.0.1:9000 inside its own network namespace.
 *
 *   test_e2e_s3 CASE
 */
#include "../harness.h"
#include "test_serving_common.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/buf.h"

#ifndef S3_CLIENT_DIR
#error "S3_CLIENT_DIR: tests/s3"
#endif

#define AWS "/usr/bin/aws"
#define PYTHON "/usr/bin/python3"
#define MiB (1u << 20)

extern char **environ;

typedef struct creds {
    char akid[160], secret[64], endpoint[160];
} creds;

/* Runs argv with the gateway's credentials in the environment; stdout and
 * stderr together into `out`. Its exit status, -1 if it could not run or
 * was killed after `timeout_s`. */
static int run(const creds *c, const char *home, int timeout_s, funcd_buf *out, ...)
{
    const char *argv[32];
    int argc = 0;
    va_list ap;
    va_start(ap, out);
    for (const char *a; argc < 31 && (a = va_arg(ap, const char *)) != NULL;)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        dup2(p[1], 2);
        close(0);
        /* only what we give: no configuration of the developer's */
        setenv("AWS_ACCESS_KEY_ID", c->akid, 1);
        setenv("AWS_SECRET_ACCESS_KEY", c->secret, 1);
        setenv("AWS_ENDPOINT_URL", c->endpoint, 1);
        setenv("AWS_REGION", "funcd", 1);
        setenv("AWS_CONFIG_FILE", "/nonexistent", 1);
        setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent", 1);
        setenv("AWS_PAGER", "", 1);
        setenv("HOME", home, 1);
        setenv("PYTHONDONTWRITEBYTECODE", "1", 1);
        unsetenv("AWS_PROFILE");
        unsetenv("AWS_SESSION_TOKEN");
        execve(argv[0], (char *const *)argv, environ);
        _exit(127);
    }
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        return -1;
    }
    int64_t deadline = e2e_now_ms() + (int64_t)timeout_s * 1000;
    int killed = 0;
    for (;;) {
        struct pollfd pf = {p[0], POLLIN, 0};
        int64_t left = deadline - e2e_now_ms();
        if (left <= 0) {
            kill(pid, SIGKILL);
            killed = 1;
            break;
        }
        if (poll(&pf, 1, (int)(left > 1000 ? 1000 : left)) < 0)
            break;
        if (!pf.revents)
            continue;
        char chunk[4096];
        ssize_t n = read(p[0], chunk, sizeof(chunk));
        if (n <= 0)
            break;
        funcd_buf_append(out, chunk, (size_t)n);
    }
    close(p[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (killed || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

static int have_clients(void)
{
    funcd_buf out = FUNCD_BUF_INIT;
    creds c = {"x", "x", "http://127.0.0.1:1"};
    int ok = access(AWS, X_OK) == 0 &&
             run(&c, "/tmp", 60, &out, PYTHON, "-c", "import boto3", NULL) == 0;
    funcd_buf_free(&out);
    return ok;
}

#define BINDINGS                                                                                   \
    "\"bindings\":{\"blob\":[{\"bucket\":\"data\",\"prefix\":\"p/\",\"access\":\"readwrite\"},"    \
    "{\"bucket\":\"data\",\"prefix\":\"ro/\",\"access\":\"read\"}]}"

/* A Function with bindings (it need not run: the gateway reads its spec)
 * and its credentials from the admin endpoint. */
static int bound_function(env *e, const char *name, creds *c)
{
    if (sv_create(e, name,
                  "{\"runtime\":\"python3\",\"handler\":\"main.handler\",\"source\":{\"bundle\":"
                  "\"" NO_SUCH_BUNDLE "\"}," BINDINGS "}") != 201) {
        fprintf(stderr, "create %s: %.400s\n", name, e->r.body ? e->r.body : "");
        return -1;
    }
    char path[256];
    snprintf(path, sizeof(path), NS("default") "/functions/%s/s3-credentials", name);
    if (REQ("GET", path, ADMIN_TOKEN, NULL) != 200 || !jstr(e->r.json, "secretAccessKey")) {
        fprintf(stderr, "credentials of %s: %ld %.400s\n", name, e->r.status,
                e->r.body ? e->r.body : "");
        return -1;
    }
    snprintf(c->akid, sizeof(c->akid), "%s", jstr(e->r.json, "accessKeyId"));
    snprintf(c->secret, sizeof(c->secret), "%s", jstr(e->r.json, "secretAccessKey"));
    snprintf(c->endpoint, sizeof(c->endpoint), "%s", jstr(e->r.json, "endpoint"));
    char want[160];
    snprintf(want, sizeof(want), "http://%s", funcd_platform_s3_addr(e->p));
    if (strcmp(c->endpoint, want) != 0) {
        fprintf(stderr, "endpoint %s, the listener is %s\n", c->endpoint, want);
        return -1;
    }
    return 0;
}

static int write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "we");
    if (!f)
        return -1;
    int ok = fwrite(data, 1, len, f) == len;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return NULL;
    funcd_buf b = FUNCD_BUF_INIT;
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        funcd_buf_append(&b, chunk, n);
    fclose(f);
    return funcd_buf_detach(&b, len);
}

#define CHECK_RUN(rc, out)                                                                         \
    do {                                                                                           \
        int rc_ = (rc);                                                                            \
        if (rc_ != 0) {                                                                            \
            fprintf(stderr, "%.3000s\n", (out).data ? (out).data : "");                           \
            funcd_buf_free(&(out));                                                                \
            FAILF("exit %d", rc_);                                                                 \
        }                                                                                          \
    } while (0)

/* aws s3 cp (up and down, small and multipart), ls, rm; a write to the
 * read-only prefix fails with AccessDenied. */
SV_TEST_WITH(awscli, funcd_with_s3("127.0.0.1:0", NULL, 0), NULL)
{
    creds c;
    char dir[256], up[300], down[300], s3url[64];
    CHECK(bound_function(e, "up", &c) == 0);
    CHECK(sv_tempdir(dir, sizeof(dir)) == 0);
    snprintf(up, sizeof(up), "%s/up.bin", dir);
    snprintf(down, sizeof(down), "%s/down.bin", dir);
    /* 20 MiB: awscli uploads it in 8 MiB parts */
    size_t len = 20 * MiB + 123;
    char *data = malloc(len);
    CHECK(data != NULL);
    for (size_t i = 0; i < len; i++)
        data[i] = (char)((i * 2654435761u) >> 13);
    int wrc = write_file(up, data, len);
    if (wrc != 0) {
        free(data);
        FAILF("cannot write %s", up);
    }
    funcd_buf out = FUNCD_BUF_INIT;
    snprintf(s3url, sizeof(s3url), "s3://data/p/obj.bin");
    int rc = run(&c, dir, 300, &out, AWS, "--endpoint-url", c.endpoint, "s3", "cp", "--no-progress", up, s3url, NULL);
    if (rc == 0)
        rc = run(&c, dir, 300, &out, AWS, "--endpoint-url", c.endpoint, "s3", "cp", "--no-progress", s3url, down, NULL);
    if (rc != 0) {
        free(data);
        CHECK_RUN(rc, out);
    }
    size_t got_len = 0;
    char *got = read_file(down, &got_len);
    int same = got && got_len == len && memcmp(got, data, len) == 0;
    free(got);
    free(data);
    if (!same)
        FAILF("the object came back different (%zu bytes, sent %zu)", got_len, len);

    funcd_buf_reset(&out);
    CHECK_RUN(run(&c, dir, 120, &out, AWS, "--endpoint-url", c.endpoint, "s3", "ls", "s3://data/p/", NULL), out);
    CHECK_CONTAINS(out.data, "20971643 obj.bin");
    funcd_buf_reset(&out);
    CHECK_RUN(run(&c, dir, 120, &out, AWS, "--endpoint-url", c.endpoint, "s3", "ls", NULL), out);
    CHECK_CONTAINS(out.data, "data");

    /* read-only prefix */
    funcd_buf_reset(&out);
    CHECK(run(&c, dir, 120, &out, AWS, "--endpoint-url", c.endpoint, "s3", "cp", "--no-progress", up, "s3://data/ro/x", NULL) != 0);
    CHECK_CONTAINS(out.data, "AccessDenied");

    funcd_buf_reset(&out);
    CHECK_RUN(run(&c, dir, 120, &out, AWS, "--endpoint-url", c.endpoint, "s3", "rm", s3url, NULL), out);
    funcd_buf_reset(&out);
    run(&c, dir, 120, &out, AWS, "--endpoint-url", c.endpoint, "s3", "ls", "s3://data/p/", NULL);
    if (out.data && strstr(out.data, "obj.bin"))
        FAILF("obj.bin still listed after rm: %s", out.data);
    funcd_buf_free(&out);
}

/* The boto3 script against the host listener; its presigned URL fetched
 * with curl. */
SV_TEST_WITH(boto3, funcd_with_s3("127.0.0.1:0", NULL, 0), NULL)
{
    creds c;
    CHECK(bound_function(e, "up", &c) == 0);
    funcd_buf out = FUNCD_BUF_INIT;
    int rc = run(&c, "/tmp", 600, &out, PYTHON, S3_CLIENT_DIR "/s3_client.py", "full", "data",
                 "p/", NULL);
    CHECK_RUN(rc, out);
    CHECK_CONTAINS(out.data, "OK full");
    char url[1024] = "", expect[80] = "";
    const char *u = strstr(out.data, "PRESIGNED "), *x = strstr(out.data, "EXPECT ");
    CHECK(u && x);
    sscanf(u + 10, "%1023s", url);
    sscanf(x + 7, "%79s", expect);
    funcd_buf body = FUNCD_BUF_INIT, err = FUNCD_BUF_INIT;
    CHECK(sv_curl(&body, &err, -1, "-f", url, NULL) == 0);
    CHECK(body.len == 5 && memcmp(body.data, "dir/c", 5) == 0);
    /* the same URL with its signature changed is refused */
    funcd_buf_reset(&body);
    char bad[1024];
    snprintf(bad, sizeof(bad), "%s", url);
    char *sig = strstr(bad, "X-Amz-Signature=");
    CHECK(sig != NULL);
    sig[16] = sig[16] == '0' ? '1' : '0';
    CHECK(sv_curl(&body, &err, -1, bad, NULL) == 0);
    CHECK_CONTAINS(body.data, "<Code>SignatureDoesNotMatch</Code>");
    funcd_buf_free(&body);
    funcd_buf_free(&err);
    funcd_buf_free(&out);
}

/* S3's errors with a 1 MiB cap; anonymous requests; who may read
 * credentials; bindings validated naming the field. */
SV_TEST_WITH(errors, funcd_with_s3("127.0.0.1:0", NULL, MiB), NULL)
{
    creds c;
    CHECK(bound_function(e, "up", &c) == 0);
    funcd_buf out = FUNCD_BUF_INIT;
    int rc = run(&c, "/tmp", 300, &out, PYTHON, S3_CLIENT_DIR "/s3_client.py", "errors", "data",
                 "p/", NULL);
    CHECK_RUN(rc, out);
    CHECK_CONTAINS(out.data, "OK errors");
    funcd_buf_free(&out);

    /* unsigned: AccessDenied, as S3's XML */
    char url[256];
    funcd_buf body = FUNCD_BUF_INIT, err = FUNCD_BUF_INIT;
    snprintf(url, sizeof(url), "%s/data/p/small", c.endpoint);
    CHECK(sv_curl(&body, &err, -1, "-w", "\n%{http_code}", url, NULL) == 0);
    CHECK_CONTAINS(body.data, "<Code>AccessDenied</Code>");
    CHECK_CONTAINS(body.data, "\n403");
    funcd_buf_reset(&body);
    /* a malformed request line */
    snprintf(url, sizeof(url), "%s/data/p/%%zz", c.endpoint);
    CHECK(sv_curl(&body, &err, -1, "-w", "\n%{http_code}", url, NULL) == 0);
    CHECK_CONTAINS(body.data, "\n400");
    funcd_buf_free(&body);
    funcd_buf_free(&err);

    /* funcdctl s3-credentials prints them as shell exports, for admins only */
    const char *root = getenv("FUNCD_BUILD_ROOT");
    char ctl[512], line[160];
    snprintf(ctl, sizeof(ctl), "%s/bin/funcdctl/funcdctl", root ? root : ".");
    out = (funcd_buf)FUNCD_BUF_INIT;
    rc = run(&c, "/tmp", 60, &out, ctl, "--server", e->base, "--token", ADMIN_TOKEN,
             "s3-credentials", "up", NULL);
    CHECK_RUN(rc, out);
    snprintf(line, sizeof(line), "export AWS_SECRET_ACCESS_KEY='%s'\n", c.secret);
    CHECK_CONTAINS(out.data, line);
    snprintf(line, sizeof(line), "export AWS_ACCESS_KEY_ID='%s'\n", c.akid);
    CHECK_CONTAINS(out.data, line);
    funcd_buf_reset(&out);
    CHECK(run(&c, "/tmp", 60, &out, ctl, "--server", e->base, "--token", DEV_TOKEN,
              "s3-credentials", "up", NULL) != 0);
    CHECK_CONTAINS(out.data, "only an admin");
    funcd_buf_free(&out);

    /* credentials: admins only; an absent Function is 404 */
    REQ("GET", FN_PATH("up") "/s3-credentials", DEV_TOKEN, NULL);
    CHECK_STATUS(403, "Forbidden", NULL);
    REQ("GET", FN_PATH("absent") "/s3-credentials", ADMIN_TOKEN, NULL);
    CHECK_STATUS(404, "NotFound", NULL);
    REQ("POST", FN_PATH("up") "/s3-credentials", ADMIN_TOKEN, "{}");
    CHECK_STATUS(405, "MethodNotAllowed", NULL);

    /* bindings.blob is validated, naming the field */
    static const struct {
        const char *blob, *field;
    } bad[] = {
        {"[{\"bucket\":\"Bad_Name\",\"access\":\"read\"}]", "spec.bindings.blob[0].bucket"},
        {"[{\"bucket\":\"data\",\"access\":\"write\"}]", "spec.bindings.blob[0].access"},
        {"[{\"bucket\":\"data\"}]", "spec.bindings.blob[0].access"},
        {"{\"bucket\":\"data\"}", "spec.bindings.blob"},
        {"[{\"bucket\":\"data\",\"access\":\"read\",\"prefix\":7}]", "spec.bindings.blob[0].prefix"},
        {"[{\"bucket\":\"data\",\"access\":\"read\",\"extra\":1}]", "spec.bindings.blob[0]"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char name[16];
        snprintf(name, sizeof(name), "bad%zu", i);
        CHECK(sv_create(e, name,
                        "{\"runtime\":\"python3\",\"handler\":\"main.handler\",\"source\":"
                        "{\"bundle\":\"" NO_SUCH_BUNDLE "\"},\"bindings\":{\"blob\":%s}}",
                        bad[i].blob) == 400);
        CHECK_CONTAINS(jstr(e->r.json, "message"), bad[i].field);
    }
}

/* Without funcd_with_s3 there are no credentials to read. */
SV_TEST(off)
{
    creds c;
    CHECK(sv_create(e, "up",
                    "{\"runtime\":\"python3\",\"handler\":\"main.handler\",\"source\":{\"bundle\":"
                    "\"" NO_SUCH_BUNDLE "\"}," BINDINGS "}") == 201);
    (void)c;
    REQ("GET", FN_PATH("up") "/s3-credentials", ADMIN_TOKEN, NULL);
    CHECK_STATUS(404, "NotFound", NULL);
    CHECK_CONTAINS(jstr(e->r.json, "message"), "--s3-listen");
}

/* A python3 Function running the boto3 script (tests/s3/s3_client.py) as its
 * handler, bound like BINDINGS; 0 once it is Ready. */
static int script_function(env *e, const char *name, int64_t wait_ms)
{
    size_t len = 0;
    char *code = read_file(S3_CLIENT_DIR "/s3_client.py", &len);
    char dir[256];
    int rc = code ? sv_code_dir(dir, sizeof(dir), "s3_client.py", code) : -1;
    free(code);
    if (rc != 0)
        return -1;
    if (sv_create(e, name,
                  "{\"runtime\":\"python3\",\"handler\":\"s3_client.handler\",\"timeout\":\"600s\","
                  "\"source\":{\"path\":\"%s\"}," BINDINGS "}",
                  dir) != 201) {
        fprintf(stderr, "create %s: %.400s\n", name, e->r.body ? e->r.body : "");
        return -1;
    }
    if (wait_ms && !sv_wait_ready(e, name, (int)wait_ms)) {
        fprintf(stderr, "%s is not ready: %.600s\n", name, e->r.body ? e->r.body : "");
        return -1;
    }
    return 0;
}

/* Calls the script Function (64 MiB each way: longer than the data-plane
 * client's 15 s under load, so curl with 10 minutes); 0 if it said OK. */
static int call_script(env *e)
{
    char url[512];
    snprintf(url, sizeof(url), "%s" DP_PATH("s3fn") "/?bucket=data&prefix=p/", e->dp_base);
    creds none = {"", "", ""};
    funcd_buf out = FUNCD_BUF_INIT;
    int rc = run(&none, "/tmp", 600, &out, "/usr/bin/curl", "-sS", "--max-time", "600", "-w",
                 "\nHTTP %{http_code}", url, NULL);
    int ok = rc == 0 && out.data && strstr(out.data, "OK full") && strstr(out.data, "HTTP 200");
    if (!ok)
        fprintf(stderr, "the function answered (curl exit %d): %.2000s\n", rc,
                out.data ? out.data : "");
    funcd_buf_free(&out);
    return ok ? 0 : -1;
}

/* The boto3 script as a sandboxed python3 Function: it reaches the gateway
 * at 127.0.0.1:9000 inside its own network namespace (there is no host
 * listener here) with the credentials funcd put in its environment; a
 * write outside its prefix is denied. */
SV_TEST_WITH(sandboxed, funcd_with_s3(NULL, NULL, 0), NULL)
{
    CHECK(script_function(e, "s3fn", 60000) == 0);
    CHECK(call_script(e) == 0);
}

/* Without the sandbox the workers are told the host listener; with no host
 * listener the Function cannot run and says why. */
SV_TEST_WITH(no_sandbox, funcd_with_s3("127.0.0.1:0", NULL, 0), funcd_with_sandbox(0))
{
    CHECK(script_function(e, "s3fn", 60000) == 0);
    CHECK(call_script(e) == 0);
}

SV_TEST_WITH(no_sandbox_no_listener, funcd_with_s3(NULL, NULL, 0), funcd_with_sandbox(0))
{
    CHECK(script_function(e, "s3fn", 0) == 0);
    CHECK(sv_wait_condition(e, "s3fn", "False", 30000));
    const cJSON *ready = sv_ready_condition(e->r.json);
    CHECK_STR(jstr(ready, "reason"), "S3Unavailable");
    CHECK_CONTAINS(jstr(ready, "message"), "--s3-listen");
}

/* ---- keys XML cannot carry as they are -------------------------------------------- */

/* curl signing with --aws-sigv4; the body (and "\nHTTP <code>") into out. */
static int curl_s3(const creds *c, funcd_buf *out, const char *method, const char *path,
                   const char *data)
{
    char url[512], user[256];
    snprintf(url, sizeof(url), "%s%s", c->endpoint, path);
    snprintf(user, sizeof(user), "%s:%s", c->akid, c->secret);
    funcd_buf_reset(out);
    return run(c, "/tmp", 60, out, "/usr/bin/curl", "-sS", "--aws-sigv4", "aws:amz:funcd:s3",
               "--user", user, "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-X", method,
               "-w", "\nHTTP %{http_code}", "--data-binary", data ? data : "", url, NULL);
}

/* As S3: a key with control bytes is stored and comes back in XML as
 * character references (TAB, LF, CR too, which XML would otherwise
 * normalize), exactly with encoding-type=url; a key that is not UTF-8 is
 * refused at PUT with InvalidArgument. */
SV_TEST_WITH(xml_keys, funcd_with_s3("127.0.0.1:0", NULL, 0), NULL)
{
    creds c;
    funcd_buf out = FUNCD_BUF_INIT;
    CHECK(bound_function(e, "up", &c) == 0);
    CHECK_RUN(curl_s3(&c, &out, "PUT", "/data/p/ctl%01%0D%0A%09end", "v"), out);
    CHECK_CONTAINS(out.data, "HTTP 200");
    CHECK_RUN(curl_s3(&c, &out, "GET", "/data/p/ctl%01%0D%0A%09end", NULL), out);
    CHECK_CONTAINS(out.data, "v\nHTTP 200");
    CHECK_RUN(curl_s3(&c, &out, "GET", "/data?list-type=2&prefix=p%2Fctl", NULL), out);
    CHECK_CONTAINS(out.data, "<Key>p/ctl&#x1;&#xD;&#xA;&#x9;end</Key>");
    CHECK_RUN(curl_s3(&c, &out, "GET", "/data?encoding-type=url&list-type=2&prefix=p%2Fctl", NULL),
              out);
    CHECK_CONTAINS(out.data, "<Key>p/ctl%01%0D%0A%09end</Key>");
    CHECK_RUN(curl_s3(&c, &out, "POST", "/data/p/up%0D?uploads", NULL), out);
    CHECK_CONTAINS(out.data, "<Key>p/up&#xD;</Key>");
    /* not UTF-8: refused, and nothing stored */
    CHECK_RUN(curl_s3(&c, &out, "PUT", "/data/p/bad%FF", "v"), out);
    CHECK_CONTAINS(out.data, "<Code>InvalidArgument</Code>");
    CHECK_CONTAINS(out.data, "UTF-8");
    CHECK_CONTAINS(out.data, "HTTP 400");
    CHECK_RUN(curl_s3(&c, &out, "GET", "/data?list-type=2&prefix=p%2Fbad", NULL), out);
    CHECK_CONTAINS(out.data, "<KeyCount>0</KeyCount>");
    funcd_buf_free(&out);
}

/* ---- revocable keys -------------------------------------------------------------- */

/* The credentials endpoint's key of `name` into c; 0 or -1. */
static int read_creds(env *e, const char *name, creds *c)
{
    char path[256];
    snprintf(path, sizeof(path), NS("default") "/functions/%s/s3-credentials", name);
    if (REQ("GET", path, ADMIN_TOKEN, NULL) != 200 || !jstr(e->r.json, "secretAccessKey"))
        return -1;
    snprintf(c->akid, sizeof(c->akid), "%s", jstr(e->r.json, "accessKeyId"));
    snprintf(c->secret, sizeof(c->secret), "%s", jstr(e->r.json, "secretAccessKey"));
    snprintf(c->endpoint, sizeof(c->endpoint), "%s", jstr(e->r.json, "endpoint"));
    return 0;
}

/* A Function deleted and created again under the same name has a new key
 * and the old one is refused with InvalidAccessKeyId; so is a key whose
 * spec.bindings.blobKeyVersion was raised. funcdctl prints the current one. */
SV_TEST_WITH(revoked_keys, funcd_with_s3("127.0.0.1:0", NULL, 0), NULL)
{
    creds old, now, rotated;
    funcd_buf out = FUNCD_BUF_INIT;
    CHECK(bound_function(e, "up", &old) == 0);
    CHECK_CONTAINS(old.akid, "default.up.");
    CHECK_RUN(curl_s3(&old, &out, "PUT", "/data/p/k", "v"), out);
    CHECK_CONTAINS(out.data, "HTTP 200");

    CHECK_INT(REQ("DELETE", FN_PATH("up"), ADMIN_TOKEN, NULL), 200);
    CHECK_RUN(curl_s3(&old, &out, "GET", "/data/p/k", NULL), out);
    CHECK_CONTAINS(out.data, "<Code>InvalidAccessKeyId</Code>");
    CHECK(bound_function(e, "up", &now) == 0);
    CHECK(strcmp(now.akid, old.akid) != 0 && strcmp(now.secret, old.secret) != 0);
    CHECK_RUN(curl_s3(&old, &out, "GET", "/data/p/k", NULL), out);
    CHECK_CONTAINS(out.data, "<Code>InvalidAccessKeyId</Code>");
    /* the shared endpoint says no more for a revoked key than for a made-up one */
    CHECK_CONTAINS(out.data, "does not exist in our records");
    CHECK(strstr(out.data, "revoked") == NULL && strstr(out.data, "default/up") == NULL);
    CHECK_CONTAINS(out.data, "HTTP 403");
    CHECK_RUN(curl_s3(&now, &out, "GET", "/data/p/k", NULL), out);
    CHECK_CONTAINS(out.data, "v\nHTTP 200");

    /* rotation by the operator: blobKeyVersion */
    char spec[1024];
    snprintf(spec, sizeof(spec),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"up\"},\"spec\":{\"runtime\":\"python3\",\"handler\":\"main.handler\",\"source\":"
             "{\"bundle\":\"" NO_SUCH_BUNDLE "\"},\"bindings\":{\"blobKeyVersion\":1,\"blob\":[{"
             "\"bucket\":\"data\",\"prefix\":\"p/\",\"access\":\"readwrite\"}]}}}");
    CHECK_INT(REQ("PUT", FN_PATH("up"), ADMIN_TOKEN, spec), 200);
    CHECK(read_creds(e, "up", &rotated) == 0);
    CHECK(strcmp(rotated.akid, now.akid) != 0 && strcmp(rotated.secret, now.secret) != 0);
    CHECK_RUN(curl_s3(&now, &out, "GET", "/data/p/k", NULL), out);
    CHECK_CONTAINS(out.data, "<Code>InvalidAccessKeyId</Code>");
    CHECK_RUN(curl_s3(&rotated, &out, "GET", "/data/p/k", NULL), out);
    CHECK_CONTAINS(out.data, "v\nHTTP 200");

    /* funcdctl prints the current key */
    const char *root = getenv("FUNCD_BUILD_ROOT");
    char ctl[512], line[200];
    snprintf(ctl, sizeof(ctl), "%s/bin/funcdctl/funcdctl", root ? root : ".");
    funcd_buf_reset(&out);
    CHECK_RUN(run(&rotated, "/tmp", 60, &out, ctl, "--server", e->base, "--token", ADMIN_TOKEN,
                  "s3-credentials", "up", NULL),
              out);
    snprintf(line, sizeof(line), "export AWS_ACCESS_KEY_ID='%s'\n", rotated.akid);
    CHECK_CONTAINS(out.data, line);
    snprintf(line, sizeof(line), "export AWS_SECRET_ACCESS_KEY='%s'\n", rotated.secret);
    CHECK_CONTAINS(out.data, line);

    /* a bad blobKeyVersion names the field */
    CHECK(sv_create(e, "badver",
                    "{\"runtime\":\"python3\",\"handler\":\"main.handler\",\"source\":"
                    "{\"bundle\":\"" NO_SUCH_BUNDLE "\"},\"bindings\":{\"blobKeyVersion\":-1}}") ==
          400);
    CHECK_CONTAINS(jstr(e->r.json, "message"), "spec.bindings.blobKeyVersion");
    funcd_buf_free(&out);
}

/* ---- memory: a 256 MiB object through the gateway ---------------------------------- */

/* The sanitizers' quarantine of freed memory would count a bounded buffer
 * reused per MiB as growth; keep it small so RSS shows what funcd holds. */
const char *__asan_default_options(void) __attribute__((visibility("default"), used));
const char *__asan_default_options(void)
{
    return "quarantine_size_mb=16";
}

/* kB of field `name` ("VmRSS", "VmHWM") in /proc/self/status, -1 if absent. */
static long proc_status_kb(const char *name)
{
    FILE *f = fopen("/proc/self/status", "re");
    char line[256];
    long kb = -1;
    size_t n = strlen(name);
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, name, n) == 0 && line[n] == ':')
            kb = strtol(line + n + 1, NULL, 10);
    if (f)
        fclose(f);
    return kb;
}

/* Resets VmHWM to the current RSS (proc(5), clear_refs "5"); 0 or -1. */
static int reset_peak_rss(void)
{
    int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int ok = write(fd, "5", 1) == 1;
    close(fd);
    return ok ? 0 : -1;
}

static char big_dir[256];

/* A file blob store in a temp dir: the object must not live in memory. */
static funcd_option *file_blob(void)
{
    funcd_blob *b = NULL;
    if (sv_tempdir(big_dir, sizeof(big_dir)) != 0)
        return NULL;
    char dir[300];
    snprintf(dir, sizeof(dir), "%s/blobs", big_dir);
    if (funcd_blob_file_new(&b, dir) < 0)
        return NULL;
    return funcd_with_blob(b);
}

#define BIG (256u * MiB)

/* A 256 MiB PutObject and GetObject through the gateway, by curl (another
 * process, signing with --aws-sigv4 and streaming from and to files):
 * funcd's peak RSS (this process) grows by less than 64 MiB over the pair. */
SV_TEST_WITH(rss_bounded, funcd_with_s3("127.0.0.1:0", NULL, 0), file_blob())
{
    creds c;
    char up[300], down[300], url[256], user[256];
    CHECK(bound_function(e, "big", &c) == 0);
    snprintf(up, sizeof(up), "%s/up.bin", big_dir);
    snprintf(down, sizeof(down), "%s/down.bin", big_dir);
    FILE *f = fopen(up, "we");
    CHECK(f != NULL);
    static unsigned char chunk[1u << 20];
    int wrote = 1;
    for (unsigned i = 0; i < BIG / sizeof(chunk); i++) {
        for (size_t j = 0; j < sizeof(chunk); j += 8) {
            uint64_t v = ((uint64_t)i << 32 | j) * 0x9E3779B97F4A7C15ull;
            memcpy(chunk + j, &v, 8);
        }
        wrote &= fwrite(chunk, 1, sizeof(chunk), f) == sizeof(chunk);
    }
    wrote &= fclose(f) == 0;
    CHECK(wrote);
    snprintf(url, sizeof(url), "%s/data/p/big.bin", c.endpoint);
    snprintf(user, sizeof(user), "%s:%s", c.akid, c.secret);
    long base_kb = proc_status_kb("VmRSS");
    CHECK(base_kb > 0);
    CHECK(reset_peak_rss() == 0);
    funcd_buf out = FUNCD_BUF_INIT;
    int rc = run(&c, big_dir, 600, &out, "/usr/bin/curl", "-sS", "-f", "--aws-sigv4",
                 "aws:amz:" "funcd" ":s3", "--user", user, "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-T", up, url, NULL);
    CHECK_RUN(rc, out);
    long put_peak_kb = proc_status_kb("VmHWM");
    rc = run(&c, big_dir, 600, &out, "/usr/bin/curl", "-sS", "-f", "--aws-sigv4",
             "aws:amz:" "funcd" ":s3", "--user", user, "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-o", down, url, NULL);
    CHECK_RUN(rc, out);
    long peak_kb = proc_status_kb("VmHWM");
    funcd_buf_reset(&out);
    rc = run(&c, big_dir, 120, &out, "/usr/bin/cmp", up, down, NULL);
    CHECK_RUN(rc, out);
    funcd_buf_free(&out);
    fprintf(stderr, "  RSS before %ld kB, peak after the 256 MiB PUT %ld kB, after the GET %ld kB "
            "(+%ld kB)\n",
            base_kb, put_peak_kb, peak_kb, peak_kb - base_kb);
    CHECK(peak_kb > 0);
    if (peak_kb - base_kb >= 64 * 1024)
        FAILF("funcd's RSS grew by %ld kB moving a 256 MiB object: the gateway holds objects in "
              "memory",
              peak_kb - base_kb);
}

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    if (!have_clients()) {
        fprintf(stderr, "skipped: needs Debian's awscli (" AWS ") and python3-boto3 "
                        "(scripts/install-deps.sh)\n");
        return 77;
    }
    sv_init();
    SV_RUN(only, ran, awscli);
    SV_RUN(only, ran, boto3);
    SV_RUN(only, ran, errors);
    SV_RUN(only, ran, off);
    SV_RUN(only, ran, sandboxed);
    SV_RUN(only, ran, no_sandbox);
    SV_RUN(only, ran, no_sandbox_no_listener);
    SV_RUN(only, ran, rss_bounded);
    SV_RUN(only, ran, xml_keys);
    SV_RUN(only, ran, revoked_keys);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no case %s\n", only);
        return 2;
    }
    return HARNESS_END();
}
