/*
 * Image functions end to end, against a real registry (issue 5): Debian's
 * docker-registry on 127.0.0.1 (plain, with htpasswd auth, behind TLS with a
 * CA made here), images pushed with skopeo from the OCI layouts that
 * fixtures.sh builds (the static native worker, the krm-cat KRM function).
 *
 * Each registry kind: a Function whose source is the worker image becomes
 * Ready through Pulling/Extracting, reports the manifest digest and answers
 * on the data plane; a podExecutor FunctionConfig naming the krm image
 * answers EvaluateFunction, asked by funcdctl's own gRPC client. Failures
 * (wrong password, unknown tag, tampered blob) show in the Function's
 * status; a restart on the same sqlite store and state directory serves
 * again with the registry gone.
 *
 *   test-image-functions CASE     (one meson test per case; no CASE: all)
 *
 * Exits 77 when a tool is missing. Every case stops its registry by pid and
 * fails if the platform left a process behind.
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e/test_serving_common.h"
#include "fake_registry.h"
#include "harness.h"
#include "registry_env.h"
#include "util/buf.h"
#include "util/misc.h"

#define WAIT_MS 30000
#define SECRET_NAME "regcred"

static char work[256];    /* fixtures, ResourceLists, stores: removed at exit */
static char layouts[320]; /* the OCI layouts of fixtures.sh */
static registry_env reg;  /* the registry of the running case */

/* ---- the registry ------------------------------------------------------------ */

/* Starts a registry of `kind` and pushes worker:1 and krm:1 into it. */
static int start_registry(registry_kind kind)
{
    char worker[400], krm[400];
    snprintf(worker, sizeof(worker), "%s/worker", layouts);
    snprintf(krm, sizeof(krm), "%s/krm", layouts);
    if (registry_env_start(&reg, kind) < 0)
        return -1;
    return registry_env_push(&reg, worker, "worker:1", 0) == 0 &&
                   registry_env_push(&reg, krm, "krm:1", 0) == 0
               ? 0
               : -1;
}

static size_t on_body(char *p, size_t size, size_t n, void *payload)
{
    return funcd_buf_append(payload, p, size * n) == 0 ? size * n : 0;
}

static size_t on_header(char *p, size_t size, size_t n, void *payload)
{
    static const char name[] = "docker-content-digest:";
    size_t len = size * n;
    if (len > sizeof(name) && strncasecmp(p, name, sizeof(name) - 1) == 0) {
        const char *v = p + sizeof(name) - 1;
        while (*v == ' ')
            v++;
        snprintf(payload, 80, "%.*s", (int)strcspn(v, "\r\n"), v);
    }
    return len;
}

/* What the registry itself says of repo:tag: the manifest digest and the
 * manifest. The test's expectations come from here, not from the client
 * under test. 0 on success. */
static int registry_manifest(const char *repo_tag, char digest[80], funcd_buf *manifest)
{
    char url[256], ca[400], repo[128];
    snprintf(repo, sizeof(repo), "%.*s", (int)strcspn(repo_tag, ":"), repo_tag);
    snprintf(url, sizeof(url), "%s://%s/v2/%s/manifests/%s",
             reg.kind == REGISTRY_TLS ? "https" : "http", reg.addr, repo,
             repo_tag + strlen(repo) + 1);
    snprintf(ca, sizeof(ca), "%s/ca.crt", reg.root);
    struct curl_slist *accept = curl_slist_append(
        NULL, "Accept: application/vnd.oci.image.manifest.v1+json, "
              "application/vnd.docker.distribution.manifest.v2+json");
    CURL *h = curl_easy_init();
    if (!h || !accept) {
        curl_slist_free_all(accept);
        curl_easy_cleanup(h);
        return -1;
    }
    digest[0] = '\0';
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, accept);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, manifest);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, digest);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
    if (reg.kind == REGISTRY_TLS)
        curl_easy_setopt(h, CURLOPT_CAINFO, ca);
    if (reg.kind == REGISTRY_HTPASSWD)
        curl_easy_setopt(h, CURLOPT_USERPWD, REGISTRY_USER ":" REGISTRY_PASS);
    long code = 0;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    curl_slist_free_all(accept);
    return code == 200 && strncmp(digest, "sha256:", 7) == 0 ? 0 : -1;
}

static void image_ref(char *out, size_t n, const char *repo_tag)
{
    snprintf(out, n, "%s/%s", reg.addr, repo_tag);
}

/* ---- credentials ---------------------------------------------------------------- */

static void base64(const char *in, char *out, size_t out_len)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = strlen(in), o = 0;
    for (size_t i = 0; i < n && o + 5 < out_len; i += 3) {
        unsigned v = (unsigned char)in[i] << 16;
        if (i + 1 < n)
            v |= (unsigned char)in[i + 1] << 8;
        if (i + 2 < n)
            v |= (unsigned char)in[i + 2];
        out[o++] = abc[(v >> 18) & 63];
        out[o++] = abc[(v >> 12) & 63];
        out[o++] = i + 1 < n ? abc[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? abc[v & 63] : '=';
    }
    out[o] = '\0';
}

/* A Docker config JSON for the registry with user:pass. */
static void docker_config(char *out, size_t n, const char *pass)
{
    char raw[128], b64[256];
    snprintf(raw, sizeof(raw), "%s:%s", REGISTRY_USER, pass);
    base64(raw, b64, sizeof(b64));
    snprintf(out, n, "{\"auths\":{\"%s\":{\"auth\":\"%s\"}}}", reg.addr, b64);
}

/* A kubernetes.io/dockerconfigjson Secret `name` in namespace `ns` with that password. */
static long create_named_secret(env *e, const char *ns, const char *token, const char *name,
                                const char *pass)
{
    char config[512];
    docker_config(config, sizeof(config), pass);
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "apiVersion", "funcd.dev/v1");
    cJSON_AddStringToObject(s, "kind", "Secret");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(s, "metadata"), "name", name);
    cJSON_AddStringToObject(s, "type", "kubernetes.io/dockerconfigjson");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(s, "stringData"), ".dockerconfigjson", config);
    char *body = cJSON_PrintUnformatted(s);
    cJSON_Delete(s);
    char path[256];
    snprintf(path, sizeof(path), API "/namespaces/%s/secrets", ns);
    long code = env_req(e, "POST", path, token, body);
    free(body);
    return code;
}

/* The Secret SECRET_NAME in "default" with that password. */
static long create_pull_secret(env *e, const char *pass)
{
    return create_named_secret(e, "default", DEV_TOKEN, SECRET_NAME, pass);
}

/* The daemon-level auth file (funcd_with_registry_auth_file). */
static int write_auth_file(char *path, size_t n)
{
    char config[512];
    docker_config(config, sizeof(config), REGISTRY_PASS);
    snprintf(path, n, "%s/auth.json", work);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(config, f);
    return fclose(f) == 0 ? 0 : -1;
}

/* ---- platforms --------------------------------------------------------------- */

/* How the platform reaches this kind of registry. */
static funcd_option *registry_option(void)
{
    return reg.kind == REGISTRY_TLS ? funcd_with_registry_certs_dir(reg.certs_dir)
                                    : funcd_with_insecure_registry(reg.addr);
}

/* After the platform is gone, nothing it started may be left. */
static int no_children(void)
{
    char left[512];
    if (sv_children(left, sizeof(left)) == 0)
        return 1;
    fprintf(stderr, "  processes left behind after the platform was freed: %s\n", left);
    return 0;
}

/* ---- serving an image -------------------------------------------------------- */

static const char *ready_reason(const cJSON *fn)
{
    const char *r = jstr(sv_ready_condition(fn), "reason");
    return r ? r : "";
}

/* Polls until the Function `name` of namespace `ns` (read with `token`) is
 * Ready=False with `reason` (past any Pulling/Extracting); 1 when so, else
 * prints the last state. e->r holds the last GET. */
static int wait_failure_in(env *e, const char *ns, const char *token, const char *name,
                           const char *reason, int timeout_ms)
{
    int64_t end = e2e_now_ms() + timeout_ms;
    char path[256];
    snprintf(path, sizeof(path), API "/namespaces/%s/functions/%s", ns, name);
    do {
        if (env_req(e, "GET", path, token, NULL) == 200 &&
            strcmp(ready_reason(e->r.json), reason) == 0 &&
            jstr(sv_ready_condition(e->r.json), "status") &&
            strcmp(jstr(sv_ready_condition(e->r.json), "status"), "False") == 0)
            return 1;
        env_sleep_ms(20);
    } while (e2e_now_ms() < end);
    fprintf(stderr, "  %s never failed with %s; its last state:\n  %.2000s\n", name, reason,
            e->r.body ? e->r.body : "");
    return 0;
}

static int wait_failure(env *e, const char *name, const char *reason, int timeout_ms)
{
    return wait_failure_in(e, "default", DEV_TOKEN, name, reason, timeout_ms);
}

static int wait_ready_verbose(env *e, const char *name)
{
    if (sv_wait_ready(e, name, WAIT_MS))
        return 1;
    fprintf(stderr, "  %s never became Ready; its last state:\n  %.2000s\n", name,
            e->r.body ? e->r.body : "");
    return 0;
}

/* The Ready reasons the watch saw for `name`, in order, comma-separated. */
static void reasons_seen(env *e, e2e_watch *w, const char *name, char *out, size_t n)
{
    size_t used = 0;
    out[0] = '\0';
    cJSON *ev;
    while ((ev = env_event(e, w, 300)) != NULL) {
        const cJSON *obj = jget(ev, "object");
        const char *got = jstr(obj, "metadata.name");
        if (!got || strcmp(got, name) != 0 || !sv_ready_condition(obj))
            continue;
        const char *status = jstr(sv_ready_condition(obj), "status");
        int k = snprintf(out + used, n - used, "%s%s=%s", used ? "," : "", ready_reason(obj),
                         status ? status : "");
        if (k < 0 || (size_t)k >= n - used)
            break;
        used += (size_t)k;
    }
}

/*
 * A native Function on `repo_tag` of the registry (`extra`: more spec
 * members, e.g. imagePullSecrets) becomes Ready with the registry's
 * manifest digest, having said Pulling or Extracting first, and runs the
 * image's entrypoint: the worker fixture's echo.
 */
static void serve_image(env *e, const char *name, const char *repo_tag, const char *extra)
{
    char ref[256], want_digest[80], path[256], reasons[1024];
    funcd_buf manifest = FUNCD_BUF_INIT;
    int have_digest = registry_manifest(repo_tag, want_digest, &manifest) == 0;
    funcd_buf_free(&manifest);
    CHECK(have_digest);
    image_ref(ref, sizeof(ref), repo_tag);
    e2e_watch *w = env_watch(e, NS("default") "/functions?watch=true", DEV_TOKEN);
    CHECK(w);
    CHECK_INT(e2e_watch_status(w, 5000), 200);
    CHECK_INT(sv_create(e, name,
                        "{\"runtime\":\"native\",\"source\":{\"image\":\"%s\"},"
                        "\"env\":{\"GREETING\":\"from-image\"}%s}",
                        ref, extra),
              201);
    CHECK(wait_ready_verbose(e, name));
    CHECK_STR(jstr(e->r.json, "status.source.digest"), want_digest);
    reasons_seen(e, w, name, reasons, sizeof(reasons));
    const char *pulling = strstr(reasons, "Pulling="), *ready = strstr(reasons, "=True");
    if (!pulling)
        pulling = strstr(reasons, "Extracting=");
    if (!pulling || !ready || pulling > ready)
        FAILF("no Pulling or Extracting before Ready; Ready went %s", reasons);
    snprintf(path, sizeof(path), DP_PATH("%s") "/hello?x=1", name);
    if (sv_invoke(e, "POST", path, "ping") != 200)
        FAILF("HTTP %ld: %.1000s", e->r.status, e->r.body ? e->r.body : "");
    CHECK_STR(jstr(e->r.json, "path"), "/hello?x=1");
    CHECK_STR(jstr(e->r.json, "body"), "ping");
    CHECK_STR(jstr(e->r.json, "greeting"), "from-image");
}

/* ---- the function runner's worker path ---------------------------------------- */

static const char resource_list[] = "apiVersion: config.kubernetes.io/v1\n"
                                    "kind: ResourceList\n"
                                    "items:\n"
                                    "- apiVersion: v1\n"
                                    "  kind: ConfigMap\n"
                                    "  metadata:\n"
                                    "    name: from-an-image\n"
                                    "  data:\n"
                                    "    answer: \"42\"\n";

static void slurp(const char *path, char *out, size_t n)
{
    FILE *f = fopen(path, "r");
    size_t k = f ? fread(out, 1, n - 1, f) : 0;
    out[k] = '\0';
    if (f)
        fclose(f);
}

/* funcdctl fn eval IMAGE -f FILE --runner ADDR: its exit status, stdout, stderr. */
static int funcdctl_eval(env *e, const char *image, char *out, size_t out_len, char *err,
                         size_t err_len)
{
    const char *root = getenv("FUNCD_BUILD_ROOT");
    char in[400], outf[400], errf[400], cmd[2048];
    snprintf(in, sizeof(in), "%s/rl.yaml", work);
    snprintf(outf, sizeof(outf), "%s/eval.out", work);
    snprintf(errf, sizeof(errf), "%s/eval.err", work);
    FILE *f = fopen(in, "w");
    if (!f)
        return -1;
    fputs(resource_list, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd),
             "'%s/bin/funcdctl/funcdctl' fn eval '%s' -f '%s' --runner '%s' --timeout 40s "
             ">'%s' 2>'%s' </dev/null",
             root ? root : ".", image, in, funcd_platform_fn_runner_addr(e->p), outf, errf);
    int st = system(cmd);
    slurp(outf, out, out_len);
    slurp(errf, err, err_len);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/*
 * A podExecutor FunctionConfig on the krm image makes the runner answer
 * EvaluateFunction with krm-cat's output: the ResourceList, unchanged. The
 * runner learns of the FunctionConfig through a store watch, so a call in
 * the instant after the create may still get NOT_FOUND: only that is retried.
 */
static void eval_image(env *e, const char *repo_tag)
{
    char ref[256], body[768], out[4096], err[4096];
    image_ref(ref, sizeof(ref), repo_tag);
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"FunctionConfig\",\"metadata\":"
             "{\"name\":\"krm\"},\"spec\":{\"image\":\"%s\",\"podExecutor\":{}}}",
             ref);
    CHECK_INT(env_req(e, "POST", NS("default") "/functionconfigs", DEV_TOKEN, body), 201);
    int rc = -1;
    for (int i = 0; i < 20; i++) {
        rc = funcdctl_eval(e, ref, out, sizeof(out), err, sizeof(err));
        if (rc == 0 || !strstr(err, "NOT_FOUND"))
            break;
        env_sleep_ms(100);
    }
    if (rc != 0)
        FAILF("funcdctl fn eval %s exited %d; stderr: %s", ref, rc, err);
    CHECK_STR(out, resource_list);
}

/*
 * Porch's prefixes (issue 12): the FunctionConfig names the bare image "krm"
 * and the prefix ADDR/test, so the runner pulls the image the request names,
 * ADDR/test/krm:v1, not "krm". The same image under a prefix the config does
 * not list is no function of it: NOT_FOUND, though the registry has it.
 */
static void eval_prefixed(env *e)
{
    char layout[400], body[768], ref[256], other[256], out[4096], err[4096];
    snprintf(layout, sizeof(layout), "%s/krm", layouts);
    CHECK(registry_env_push(&reg, layout, "test/krm:v1", 0) == 0);
    CHECK(registry_env_push(&reg, layout, "other/krm:v1", 0) == 0);
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"FunctionConfig\",\"metadata\":"
             "{\"name\":\"krm-prefixed\"},\"spec\":{\"image\":\"krm\",\"prefixes\":"
             "[\"%s/test\"],\"podExecutor\":{\"tags\":[\"v1\"]}}}",
             reg.addr);
    CHECK_INT(env_req(e, "POST", NS("default") "/functionconfigs", DEV_TOKEN, body), 201);
    image_ref(ref, sizeof(ref), "test/krm:v1");
    int rc = -1;
    for (int i = 0; i < 20; i++) {
        rc = funcdctl_eval(e, ref, out, sizeof(out), err, sizeof(err));
        if (rc == 0 || !strstr(err, "has a podExecutor for image"))
            break; /* only the instant before the runner saw the config is retried */
        env_sleep_ms(100);
    }
    if (rc != 0)
        FAILF("funcdctl fn eval %s exited %d; stderr: %s", ref, rc, err);
    CHECK_STR(out, resource_list);
    image_ref(other, sizeof(other), "other/krm:v1");
    rc = funcdctl_eval(e, other, out, sizeof(out), err, sizeof(err));
    if (rc == 0)
        FAILF("%s is under no prefix of the FunctionConfig, yet it ran", other);
    CHECK_CONTAINS(err, "NOT_FOUND");
    CHECK_CONTAINS(err, "no FunctionConfig in namespace default has a podExecutor");
}

/* ---- cases --------------------------------------------------------------------- */

/*
 * A case body runs on a platform that on_platform starts (reaching the
 * case's registry, plus up to two options) and always frees, so a failed
 * CHECK in a body leaves no platform, worker or allocation behind.
 */
typedef void (*case_body)(env *e);

static void on_platform(funcd_store *store, funcd_option *a, funcd_option *b, case_body body)
{
    env e;
    if (env_up_with(&e, store, registry_option(), a, b) < 0) {
        env_down(&e);
        FAILF("cannot start a platform: %s", funcd_error_last()->message);
    }
    body(&e);
    env_down(&e);
}

static char auth_file[400]; /* htpasswd: the daemon-level Docker config */
static char pulled[80];     /* restart: the digest the first platform served */

static void serve_worker(env *e)
{
    serve_image(e, "from-image", "worker:1", "");
}

static void eval_krm(env *e)
{
    eval_image(e, "krm:1");
}

static void serve_and_eval(env *e)
{
    serve_worker(e);
    eval_krm(e); /* runs even when serving failed: the two paths are independent */
}

static void plain(void)
{
    on_platform(NULL, NULL, NULL, serve_and_eval);
}

static void prefixes(void)
{
    on_platform(NULL, NULL, NULL, eval_prefixed);
}

/* A TLS registry on loopback: the operator names it. */
static void tls(void)
{
    on_platform(NULL, funcd_with_allowed_registry(reg.addr), NULL, serve_and_eval);
}

/* mode: exec runs the image's program once per request under the static
 * exec shim: krm-cat answers the request body. */
static void serve_exec(env *e)
{
    char ref[256];
    image_ref(ref, sizeof(ref), "krm:1");
    CHECK_INT(sv_create(e, "exec-image",
                        "{\"runtime\":\"native\",\"mode\":\"exec\",\"source\":{\"image\":\"%s\"}}",
                        ref),
              201);
    CHECK(wait_ready_verbose(e, "exec-image"));
    if (sv_invoke(e, "POST", DP_PATH("exec-image") "/", resource_list) != 200)
        FAILF("HTTP %ld: %.1000s", e->r.status, e->r.body ? e->r.body : "");
    CHECK_STR(e->r.body, resource_list);
}

static void exec_mode(void)
{
    on_platform(NULL, NULL, NULL, serve_exec);
}

/* Without a secret the pull is refused; with the Secret it serves. The
 * unauthenticated one goes first: the image is not yet on this node. */
static void serve_with_secret(env *e)
{
    char ref[256];
    image_ref(ref, sizeof(ref), "worker:1");
    CHECK_INT(sv_create(e, "no-secret", "{\"runtime\":\"native\",\"source\":{\"image\":\"%s\"}}",
                        ref),
              201);
    CHECK(wait_failure(e, "no-secret", "ImagePullFailed", WAIT_MS));
    CHECK_CONTAINS(jstr(sv_ready_condition(e->r.json), "message"), "credentials");
    CHECK_INT(create_pull_secret(e, REGISTRY_PASS), 201);
    serve_image(e, "with-secret", "worker:1", ",\"imagePullSecrets\":[\"" SECRET_NAME "\"]");
}

/* Pull secrets for Functions; the daemon's auth file for the runner, which
 * has no Function to name a secret. */
static void htpasswd(void)
{
    on_platform(NULL, NULL, NULL, serve_with_secret);
    if (write_auth_file(auth_file, sizeof(auth_file)) < 0)
        FAILF("cannot write %s", auth_file);
    on_platform(NULL, funcd_with_registry_auth_file(auth_file), NULL, eval_krm);
}

static void refused_password(env *e)
{
    static const char bad[] = "not-the-password";
    char ref[256], want[256];
    CHECK_INT(create_pull_secret(e, bad), 201);
    image_ref(ref, sizeof(ref), "worker:1");
    CHECK_INT(sv_create(e, "bad-login",
                        "{\"runtime\":\"native\",\"source\":{\"image\":\"%s\"},"
                        "\"imagePullSecrets\":[\"" SECRET_NAME "\"]}",
                        ref),
              201);
    CHECK(wait_failure(e, "bad-login", "ImagePullFailed", WAIT_MS));
    const char *msg = jstr(sv_ready_condition(e->r.json), "message");
    snprintf(want, sizeof(want), "registry %s refused the credentials", reg.addr);
    CHECK_CONTAINS(msg, want);
    if (strstr(msg, bad))
        FAILF("the status shows the password: %s", msg);
}

static void wrong_password(void)
{
    on_platform(NULL, NULL, NULL, refused_password);
}

static void missing_tag(env *e)
{
    char ref[256];
    image_ref(ref, sizeof(ref), "worker:nope");
    CHECK_INT(sv_create(e, "no-tag", "{\"runtime\":\"native\",\"source\":{\"image\":\"%s\"}}",
                        ref),
              201);
    CHECK(wait_failure(e, "no-tag", "ImagePullFailed", WAIT_MS));
    const char *msg = jstr(sv_ready_condition(e->r.json), "message");
    CHECK_CONTAINS(msg, "worker:nope");
    CHECK_CONTAINS(msg, "not found");
}

static void unknown_tag(void)
{
    on_platform(NULL, NULL, NULL, missing_tag);
}

static char tampered_layer[80];

static void refused_blob(env *e)
{
    char ref[256];
    image_ref(ref, sizeof(ref), "worker:1");
    CHECK_INT(sv_create(e, "tampered", "{\"runtime\":\"native\",\"source\":{\"image\":\"%s\"}}",
                        ref),
              201);
    CHECK(wait_failure(e, "tampered", "ImagePullFailed", WAIT_MS));
    const char *msg = jstr(sv_ready_condition(e->r.json), "message");
    CHECK_CONTAINS(msg, "does not match its digest");
    CHECK_CONTAINS(msg, tampered_layer);
    CHECK(sv_invoke(e, "GET", DP_PATH("tampered") "/", NULL) != 200);
}

/* Overwrites bytes of the worker image's first layer in the registry's storage. */
static int tamper_worker_layer(void)
{
    char data[600];
    funcd_buf manifest = FUNCD_BUF_INIT;
    char digest[80];
    int have = registry_manifest("worker:1", digest, &manifest) == 0;
    cJSON *m = have ? cJSON_ParseWithLength(manifest.data, manifest.len) : NULL;
    funcd_buf_free(&manifest);
    const char *layer = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(jget(m, "layers"), 0), "digest"));
    snprintf(tampered_layer, sizeof(tampered_layer), "%s", layer ? layer : "");
    cJSON_Delete(m);
    if (strncmp(tampered_layer, "sha256:", 7) != 0)
        return -1;
    registry_env_blob_path(&reg, tampered_layer, data, sizeof(data));
    FILE *f = fopen(data, "r+b");
    int ok = f && fseek(f, 100, SEEK_SET) == 0 && fputs("tampered", f) >= 0;
    return f && fclose(f) == 0 && ok ? 0 : -1;
}

/* Before the first pull the layer changes in the registry: the digest check
 * refuses it and the function never runs. */
static void tampered_blob(void)
{
    if (tamper_worker_layer() < 0)
        FAILF("cannot tamper with the layer of worker:1 in %s", reg.storage);
    on_platform(NULL, NULL, NULL, refused_blob);
}

static void serve_durably(env *e)
{
    serve_image(e, "durable", "worker:1", "");
    CHECK_INT(env_req(e, "GET", FN_PATH("durable"), DEV_TOKEN, NULL), 200);
    const char *d = jstr(e->r.json, "status.source.digest");
    snprintf(pulled, sizeof(pulled), "%s", d ? d : "");
}

/* 1 when the data plane answers the function with the worker's echo. */
static int serves(env *e, void *name)
{
    char path[256];
    snprintf(path, sizeof(path), DP_PATH("%s") "/again", (const char *)name);
    return sv_invoke(e, "GET", path, NULL) == 200 && jstr(e->r.json, "path") &&
           strcmp(jstr(e->r.json, "path"), "/again") == 0;
}

static void serve_again(env *e)
{
    char item[128];
    /* the status in the store says Ready from before: only an answer counts */
    if (!env_poll(e, WAIT_MS, serves, "durable"))
        FAILF("after the restart the function does not serve: HTTP %ld %.1000s", e->r.status,
              e->r.body ? e->r.body : "");
    CHECK(wait_ready_verbose(e, "durable"));
    CHECK_STR(jstr(e->r.json, "status.source.digest"), pulled);
    CHECK_INT(env_req(e, "GET", API "/images", ADMIN_TOKEN, NULL), 200);
    snprintf(item, sizeof(item), "\"digest\":\"%s\"", pulled);
    CHECK_CONTAINS(e->r.body, item);
}

static funcd_store *sqlite_store(const char *path)
{
    funcd_store *s = NULL;
    return funcd_store_sqlite_new(&s, path, NULL) == 0 ? s : NULL;
}

/* The second platform finds the image's metadata and tag in the store and
 * its layers in the state directory: with the registry stopped it serves. */
static void restart(void)
{
    char db[400], state[400];
    snprintf(db, sizeof(db), "%s/store.db", work);
    snprintf(state, sizeof(state), "%s/state", work);
    if (mkdir(state, 0700) != 0)
        FAILF("cannot create %s", state);
    funcd_store *s = sqlite_store(db);
    if (!s)
        FAILF("cannot open %s: %s", db, funcd_error_last()->message);
    on_platform(s, funcd_with_state_dir(state), NULL, serve_durably);
    if (harness_failed_now)
        return;
    registry_env_stop(&reg);
    if (!(s = sqlite_store(db)))
        FAILF("cannot open %s again: %s", db, funcd_error_last()->message);
    on_platform(s, funcd_with_state_dir(state), NULL, serve_again);
}

/* Bytes of the files in the blob cache of `state` (its blobs/sha256 directory). */
static long long blob_cache_bytes(const char *state)
{
    char dir[500];
    snprintf(dir, sizeof(dir), "%s/images/blobs/sha256", state);
    DIR *d = opendir(dir);
    long long total = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        struct stat st;
        if (de->d_name[0] != '.' && fstatat(dirfd(d), de->d_name, &st, 0) == 0)
            total += st.st_size;
    }
    if (d)
        closedir(d);
    return d ? total : -1;
}

static char blob_state[400];  /* blob-cache-cap: the state directory */
static long long blobs_at_start; /* ... and its blob bytes as the second platform started */

static void blobs_then_serve_again(env *e)
{
    blobs_at_start = blob_cache_bytes(blob_state);
    serve_again(e);
}

/*
 * --image-blob-cache-bytes (docs/images.md "The blob cache"): a platform
 * serves worker:1 with the default cap, its blobs stay; the next starts on
 * the same state with a cap of 1 byte and the registry gone. The cache
 * shrinks as it starts (no pull could have run), and the function serves
 * from its extracted rootfs without the blobs.
 */
static void blob_cache_cap(void)
{
    char db[400];
    snprintf(db, sizeof(db), "%s/store.db", work);
    snprintf(blob_state, sizeof(blob_state), "%s/state", work);
    if (mkdir(blob_state, 0700) != 0)
        FAILF("cannot create %s", blob_state);
    funcd_store *s = sqlite_store(db);
    if (!s)
        FAILF("cannot open %s: %s", db, funcd_error_last()->message);
    on_platform(s, funcd_with_state_dir(blob_state), NULL, serve_durably);
    if (harness_failed_now)
        return;
    long long pulled_bytes = blob_cache_bytes(blob_state);
    registry_env_stop(&reg);
    if (!(s = sqlite_store(db)))
        FAILF("cannot open %s again: %s", db, funcd_error_last()->message);
    blobs_at_start = -1;
    on_platform(s, funcd_with_state_dir(blob_state), funcd_with_image_blob_cache_bytes(1),
                blobs_then_serve_again);
    if (harness_failed_now)
        return;
    if (pulled_bytes <= 0)
        FAILF("the first platform kept no blobs (%lld bytes)", pulled_bytes);
    if (blobs_at_start != 0)
        FAILF("with a cap of 1 byte the blob cache holds %lld bytes at start (%lld before)",
              blobs_at_start, pulled_bytes);
}

static int registry_requests(const char *what);

#define WORKER_TAG_GET "\"GET /v2/worker/manifests/1 "
#define WORKER_BLOB_GET "\"GET /v2/worker/blobs/"

/*
 * A tag refresh whose tag still names the image that runs downloads nothing,
 * though the blob cache evicted its blobs (a cap of 1 byte: they go once the
 * rootfs is extracted): it reads the manifest by tag, finds the digest it
 * has, and stops there. Over three refreshes (every 300 ms) the registry
 * sees tag GETs and no blob GET; the function still serves.
 */
static void refresh_unchanged_body(env *e)
{
    serve_image(e, "refreshed", "worker:1", "");
    if (harness_failed_now)
        return;
    int tag_gets = registry_requests(WORKER_TAG_GET);
    int blob_gets = registry_requests(WORKER_BLOB_GET);
    CHECK(blob_gets > 0); /* the first pull */
    int64_t end = e2e_now_ms() + WAIT_MS;
    while (registry_requests(WORKER_TAG_GET) < tag_gets + 3 && e2e_now_ms() < end)
        env_sleep_ms(100);
    int refreshes = registry_requests(WORKER_TAG_GET) - tag_gets;
    int blob_gets_after = registry_requests(WORKER_BLOB_GET);
    if (refreshes < 3)
        FAILF("%d tag refreshes in %d ms (every 300 ms)", refreshes, WAIT_MS);
    if (blob_gets_after != blob_gets)
        FAILF("%d refreshes of an unchanged tag fetched %d blobs", refreshes,
              blob_gets_after - blob_gets);
    if (!env_poll(e, WAIT_MS, serves, "refreshed"))
        FAILF("after the refreshes the function does not serve: HTTP %ld %.1000s",
              e->r.status, e->r.body ? e->r.body : "");
    CHECK_STR(jstr(e->r.json, "greeting"), "from-image");
}

static void refresh_unchanged(void)
{
    on_platform(NULL, funcd_with_source_refresh(300, 0), funcd_with_image_blob_cache_bytes(1),
                refresh_unchanged_body);
}

/*
 * Nodes sharing a store share tag resolutions (issue 15): a second platform
 * on the first one's store, with a state directory of its own (no layers),
 * serves the function the first resolved without asking the registry for
 * the tag — it fetches the manifest and the layers by digest.
 */
static void second_node(void)
{
    char db[400], state1[400], state2[400];
    snprintf(db, sizeof(db), "%s/store.db", work);
    snprintf(state1, sizeof(state1), "%s/state1", work);
    snprintf(state2, sizeof(state2), "%s/state2", work);
    if (mkdir(state1, 0700) != 0 || mkdir(state2, 0700) != 0)
        FAILF("cannot create %s or %s", state1, state2);
    funcd_store *s = sqlite_store(db);
    if (!s)
        FAILF("cannot open %s: %s", db, funcd_error_last()->message);
    on_platform(s, funcd_with_state_dir(state1), NULL, serve_durably);
    if (harness_failed_now)
        return;
    /* HEAD or GET of the manifest by its tag, and of any blob */
    int by_tag = registry_requests(" /v2/worker/manifests/1 ");
    int blobs = registry_requests("\"GET /v2/worker/blobs/");
    CHECK(by_tag > 0);
    if (!(s = sqlite_store(db)))
        FAILF("cannot open %s again: %s", db, funcd_error_last()->message);
    on_platform(s, funcd_with_state_dir(state2), NULL, serve_again);
    CHECK_INT(registry_requests(" /v2/worker/manifests/1 "), by_tag);
    CHECK(registry_requests("\"GET /v2/worker/blobs/") > blobs); /* its own copy of the layers */
}

/* ---- who sees what (issue 11) ---------------------------------------------------- */

/* How many requests the registry's access log shows whose line contains
 * `what` (e.g. "\"HEAD /v2/worker/manifests/"). */
static int registry_requests(const char *what)
{
    char path[400], line[4096];
    snprintf(path, sizeof(path), "%s/registry.log", reg.root);
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f && fgets(line, sizeof(line), f))
        if (strstr(line, what))
            n++;
    if (f)
        fclose(f);
    return n;
}

/* POST .../namespaces/NS/imagepulls {"image": IMAGE (, secrets)}: the HTTP status; the id in `id`. */
static long start_api_pull(env *e, const char *ns, const char *token, const char *image,
                           const char *secrets_json, char id[64])
{
    char path[256], body[1024];
    snprintf(path, sizeof(path), API "/namespaces/%s/imagepulls", ns);
    snprintf(body, sizeof(body), "{\"image\":\"%s\"%s%s}", image,
             secrets_json ? ",\"imagePullSecrets\":" : "", secrets_json ? secrets_json : "");
    long code = env_req(e, "POST", path, token, body);
    const char *got = jstr(e->r.json, "id");
    snprintf(id, 64, "%s", got && code == 202 ? got : "");
    return code;
}

/* Polls the pull until it is Done or Failed; its phase, e->r holding the last GET. */
static const char *wait_api_pull(env *e, const char *ns, const char *token, const char *id)
{
    char path[256];
    snprintf(path, sizeof(path), API "/namespaces/%s/imagepulls/%s", ns, id);
    int64_t end = e2e_now_ms() + WAIT_MS;
    do {
        if (env_req(e, "GET", path, token, NULL) != 200)
            return "(no answer)";
        const char *phase = jstr(e->r.json, "phase");
        if (phase && strcmp(phase, "Pulling") != 0)
            return phase;
        env_sleep_ms(20);
    } while (e2e_now_ms() < end);
    return "(still pulling)";
}

/*
 * A pull belongs to its namespace: team-b's token reads neither team-a's
 * ("default") pull by id nor in its list; names in imagePullSecrets are
 * DNS labels. GET /images shows team-b only the images it pulled or runs.
 */
static void pulls_and_images_by_namespace(env *e)
{
    char ref[256], id[64], other[64], path[256], digest[80], item[128];
    funcd_buf manifest = FUNCD_BUF_INIT;
    int have = registry_manifest("worker:1", digest, &manifest) == 0;
    funcd_buf_free(&manifest);
    CHECK(have);
    snprintf(item, sizeof(item), "\"digest\":\"%s\"", digest);
    image_ref(ref, sizeof(ref), "worker:1");

    CHECK_INT(start_api_pull(e, "default", DEV_TOKEN, ref, NULL, id), 202);
    CHECK_STR(wait_api_pull(e, "default", DEV_TOKEN, id), "Done");
    snprintf(path, sizeof(path), NS("team-b") "/imagepulls/%s", id);
    CHECK_INT(env_req(e, "GET", path, TEAM_B_TOKEN, NULL), 404);
    CHECK_INT(env_req(e, "GET", NS("team-b") "/imagepulls", TEAM_B_TOKEN, NULL), 200);
    CHECK(cJSON_IsArray(jget(e->r.json, "items")));
    if (strstr(e->r.body, id))
        FAILF("team-b's list shows team-a's pull: %s", e->r.body);
    CHECK_INT(env_req(e, "GET", NS("default") "/imagepulls", DEV_TOKEN, NULL), 200);
    CHECK_CONTAINS(e->r.body, id);
    CHECK_INT(start_api_pull(e, "team-b", TEAM_B_TOKEN, ref, NULL, other), 202);
    CHECK_INT(env_req(e, "GET", NS("default") "/imagepulls", DEV_TOKEN, NULL), 200);
    if (strstr(e->r.body, other))
        FAILF("team-a's list shows team-b's pull: %s", e->r.body);
    CHECK_STR(wait_api_pull(e, "team-b", TEAM_B_TOKEN, other), "Done");

    /* Secret names: a newline would forge a log line; uppercase is no DNS label. */
    CHECK_INT(start_api_pull(e, "default", DEV_TOKEN, ref, "[\"ok\",\"evil\\nINFO forged\"]", id),
              400);
    CHECK_STATUS(400, "BadRequest", "imagePullSecrets");
    CHECK_INT(start_api_pull(e, "default", DEV_TOKEN, ref, "[\"Regcred\"]", id), 400);
    CHECK_STATUS(400, "BadRequest", "imagePullSecrets");
    CHECK_CONTAINS(jstr(e->r.json, "message"), "Regcred");
}

static void pull_scope(void)
{
    on_platform(NULL, NULL, NULL, pulls_and_images_by_namespace);
}

/* GET /images: team-a's image is not listed to team-b until team-b pulls it
 * or runs a Function on it; the admin and team-a see it. */
static void images_by_namespace(env *e)
{
    char ref[256], id[64], digest[80], item[128], body[768];
    funcd_buf manifest = FUNCD_BUF_INIT;
    int have = registry_manifest("worker:1", digest, &manifest) == 0;
    funcd_buf_free(&manifest);
    CHECK(have);
    snprintf(item, sizeof(item), "\"digest\":\"%s\"", digest);
    image_ref(ref, sizeof(ref), "worker:1");
    CHECK_INT(start_api_pull(e, "default", DEV_TOKEN, ref, NULL, id), 202);
    CHECK_STR(wait_api_pull(e, "default", DEV_TOKEN, id), "Done");
    CHECK_INT(env_req(e, "GET", API "/images", DEV_TOKEN, NULL), 200);
    CHECK_CONTAINS(e->r.body, item);
    CHECK_INT(env_req(e, "GET", API "/images", ADMIN_TOKEN, NULL), 200);
    CHECK_CONTAINS(e->r.body, item);
    CHECK_INT(env_req(e, "GET", API "/images", TEAM_B_TOKEN, NULL), 200);
    CHECK(cJSON_IsArray(jget(e->r.json, "items")));
    if (strstr(e->r.body, item) || strstr(e->r.body, "worker"))
        FAILF("team-b sees team-a's image: %s", e->r.body);
    /* A Function of team-b on the image makes it team-b's too. */
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"b-fn\"},\"spec\":{\"runtime\":\"native\",\"source\":{\"image\":\"%s\"}}}",
             ref);
    CHECK_INT(env_req(e, "POST", NS("team-b") "/functions", TEAM_B_TOKEN, body), 201);
    int64_t end = e2e_now_ms() + WAIT_MS;
    int seen = 0;
    while (!seen && e2e_now_ms() < end) {
        seen = env_req(e, "GET", API "/images", TEAM_B_TOKEN, NULL) == 200 &&
               strstr(e->r.body, item) != NULL;
        if (!seen)
            env_sleep_ms(50);
    }
    if (!seen)
        FAILF("team-b's Function runs the image, yet team-b's list lacks it: %s", e->r.body);
}

static void images_scope(void)
{
    on_platform(NULL, NULL, NULL, images_by_namespace);
}

/*
 * A private image pulled with Function A's secret is on this node; B, whose
 * secret has a wrong password, and C, with none, do not get it from the
 * cache: their credentials are checked at the registry (a HEAD of the
 * manifest) and refused. D and E (another namespace), with the right
 * password in other Secrets, run it with no new request: those credentials
 * were verified for that digest when A pulled.
 */
static void private_cached_image(env *e)
{
    char ref[256], body[768];
    image_ref(ref, sizeof(ref), "worker:1");
    CHECK_INT(create_named_secret(e, "default", DEV_TOKEN, "regcred", REGISTRY_PASS), 201);
    CHECK_INT(create_named_secret(e, "default", DEV_TOKEN, "badcred", "not-the-password"), 201);
    CHECK_INT(create_named_secret(e, "default", DEV_TOKEN, "goodcred", REGISTRY_PASS), 201);
    CHECK_INT(create_named_secret(e, "team-b", TEAM_B_TOKEN, "goodcred", REGISTRY_PASS), 201);
    serve_image(e, "fn-a", "worker:1", ",\"imagePullSecrets\":[\"regcred\"]");
    if (harness_failed_now)
        return;
    int pushed = registry_requests("\"HEAD /v2/worker/manifests/"); /* skopeo's, fn-a's */

    CHECK_INT(sv_create(e, "fn-b",
                        "{\"runtime\":\"native\",\"source\":{\"image\":\"%s\"},"
                        "\"imagePullSecrets\":[\"badcred\"]}",
                        ref),
              201);
    CHECK(wait_failure(e, "fn-b", "ImagePullFailed", WAIT_MS));
    CHECK_CONTAINS(jstr(sv_ready_condition(e->r.json), "message"), "refused the credentials");
    CHECK(sv_invoke(e, "GET", DP_PATH("fn-b") "/", NULL) != 200);

    CHECK_INT(sv_create(e, "fn-c", "{\"runtime\":\"native\",\"source\":{\"image\":\"%s\"}}", ref),
              201);
    CHECK(wait_failure(e, "fn-c", "ImagePullFailed", WAIT_MS));
    CHECK_CONTAINS(jstr(sv_ready_condition(e->r.json), "message"), "credentials");
    CHECK(sv_invoke(e, "GET", DP_PATH("fn-c") "/", NULL) != 200);

    /* An API pull without credentials gets nothing from the cache either. */
    char id[64];
    CHECK_INT(start_api_pull(e, "team-b", TEAM_B_TOKEN, ref, NULL, id), 202);
    CHECK_STR(wait_api_pull(e, "team-b", TEAM_B_TOKEN, id), "Failed");
    CHECK_CONTAINS(jstr(e->r.json, "message"), "credentials");

    int heads = registry_requests("\"HEAD /v2/worker/manifests/");
    CHECK(heads > pushed); /* B's and C's credentials were asked about */
    CHECK_INT(sv_create(e, "fn-d",
                        "{\"runtime\":\"native\",\"source\":{\"image\":\"%s\"},"
                        "\"imagePullSecrets\":[\"goodcred\"]}",
                        ref),
              201);
    CHECK(wait_ready_verbose(e, "fn-d"));
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("fn-d") "/x", NULL), 200);
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"fn-e\"},\"spec\":{\"runtime\":\"native\",\"source\":{\"image\":\"%s\"},"
             "\"imagePullSecrets\":[\"goodcred\"]}}",
             ref);
    CHECK_INT(env_req(e, "POST", NS("team-b") "/functions", TEAM_B_TOKEN, body), 201);
    int64_t end = e2e_now_ms() + WAIT_MS;
    while (e2e_now_ms() < end) {
        if (env_req(e, "GET", NS("team-b") "/functions/fn-e", TEAM_B_TOKEN, NULL) == 200 &&
            jstr(sv_ready_condition(e->r.json), "status") &&
            strcmp(jstr(sv_ready_condition(e->r.json), "status"), "True") == 0)
            break;
        env_sleep_ms(50);
    }
    CHECK_STR(jstr(sv_ready_condition(e->r.json), "status"), "True");
    CHECK_INT(registry_requests("\"HEAD /v2/worker/manifests/"), heads);
}

static void private_cache(void)
{
    on_platform(NULL, NULL, NULL, private_cached_image);
}

/* An image pulled anonymously is public: other Functions get it from the
 * cache with no request for their credentials. */
static void public_cached_image(env *e)
{
    char ref[256];
    image_ref(ref, sizeof(ref), "worker:1");
    serve_image(e, "pub-a", "worker:1", "");
    if (harness_failed_now)
        return;
    CHECK_INT(create_pull_secret(e, REGISTRY_PASS), 201);
    int heads = registry_requests("\"HEAD /v2/worker/manifests/");
    CHECK_INT(sv_create(e, "pub-b",
                        "{\"runtime\":\"native\",\"source\":{\"image\":\"%s\"},"
                        "\"imagePullSecrets\":[\"" SECRET_NAME "\"]}",
                        ref),
              201);
    CHECK(wait_ready_verbose(e, "pub-b"));
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("pub-b") "/x", NULL), 200);
    CHECK_INT(registry_requests("\"HEAD /v2/worker/manifests/"), heads);
}

static void public_cache(void)
{
    on_platform(NULL, NULL, NULL, public_cached_image);
}

/* ---- another registry claiming a cached digest (review17 H-1) ----------------------- */

static fake_registry claimer; /* HEAD 200 for any manifest, other bytes for a GET */

/* Polls until team-b's Function `name` is Ready=True; e->r holds the last GET. */
static int team_b_ready(env *e, const char *name)
{
    char path[256];
    snprintf(path, sizeof(path), NS("team-b") "/functions/%s", name);
    int64_t end = e2e_now_ms() + WAIT_MS;
    do {
        if (env_req(e, "GET", path, TEAM_B_TOKEN, NULL) == 200 &&
            jstr(sv_ready_condition(e->r.json), "status") &&
            strcmp(jstr(sv_ready_condition(e->r.json), "status"), "True") == 0)
            return 1;
        env_sleep_ms(50);
    } while (e2e_now_ms() < end);
    fprintf(stderr, "  %s never became Ready; its last state:\n  %.2000s\n", name,
            e->r.body ? e->r.body : "");
    return 0;
}

/* team-b's Function `name` on `image` (`extra`: more spec members). */
static long team_b_function(env *e, const char *name, const char *image, const char *extra)
{
    char body[1024];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"%s\"},\"spec\":{\"runtime\":\"native\",\"source\":{\"image\":\"%s\"}%s}}",
             name, image, extra);
    return env_req(e, "POST", NS("team-b") "/functions", TEAM_B_TOKEN, body);
}

/* The function runner evaluates `image` of a podExecutor FunctionConfig made
 * for it; its exit status, stderr in `err`. */
static int eval_config_image(env *e, const char *config, const char *image, char *err,
                             size_t err_len)
{
    char body[768], out[4096];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"FunctionConfig\",\"metadata\":"
             "{\"name\":\"%s\"},\"spec\":{\"image\":\"%s\",\"podExecutor\":{}}}",
             config, image);
    if (env_req(e, "POST", NS("default") "/functionconfigs", DEV_TOKEN, body) != 201)
        return -1;
    int rc = -1;
    for (int i = 0; i < 20; i++) {
        rc = funcdctl_eval(e, image, out, sizeof(out), err, err_len);
        if (rc == 0 || !strstr(err, "NOT_FOUND"))
            break; /* only the instant before the runner saw the config is retried */
        env_sleep_ms(100);
    }
    return rc;
}

/*
 * The private worker:1 and krm:1 of team-a ("default") are on this node.
 * team-b names their digests at a registry that claims every digest (HEAD
 * 200; a GET gets other bytes): an API pull, a Function and the function
 * runner's image get nothing of the cache, for the claimer's manifest is
 * read and does not match; team-b's image list shows nothing of team-a's.
 * The same manifest in a repository that holds it (mirror/worker, team-b's
 * own credentials) runs: its manifest read there, its layers from the
 * cache, listed to each namespace under the reference it used.
 */
static void foreign_digest_body(env *e)
{
    char ref[256], digest[80], krm_digest[80], mirror_digest[80], stolen[400], id[64];
    char err[4096], layout[400];
    funcd_buf m = FUNCD_BUF_INIT;
    int have = registry_manifest("worker:1", digest, &m) == 0;
    funcd_buf_free(&m);
    have = have && registry_manifest("krm:1", krm_digest, &m) == 0;
    funcd_buf_free(&m);
    CHECK(have);
    CHECK_INT(create_named_secret(e, "default", DEV_TOKEN, "regcred", REGISTRY_PASS), 201);
    CHECK_INT(create_named_secret(e, "team-b", TEAM_B_TOKEN, "goodcred", REGISTRY_PASS), 201);
    serve_image(e, "fn-a", "worker:1", ",\"imagePullSecrets\":[\"regcred\"]");
    if (harness_failed_now)
        return;
    image_ref(ref, sizeof(ref), "krm:1");
    CHECK_INT(start_api_pull(e, "default", DEV_TOKEN, ref, "[\"regcred\"]", id), 202);
    CHECK_STR(wait_api_pull(e, "default", DEV_TOKEN, id), "Done");

    snprintf(stolen, sizeof(stolen), "%s/whatever/x@%s", claimer.addr, digest);
    CHECK_INT(start_api_pull(e, "team-b", TEAM_B_TOKEN, stolen, NULL, id), 202);
    CHECK_STR(wait_api_pull(e, "team-b", TEAM_B_TOKEN, id), "Failed");
    CHECK_CONTAINS(jstr(e->r.json, "message"), "does not match its digest");
    CHECK_INT(team_b_function(e, "steal", stolen, ""), 201);
    CHECK(wait_failure_in(e, "team-b", TEAM_B_TOKEN, "steal", "ImagePullFailed", WAIT_MS));
    CHECK_CONTAINS(jstr(sv_ready_condition(e->r.json), "message"), "does not match its digest");
    CHECK(sv_invoke(e, "GET", "/fn/team-b/steal/", NULL) != 200);

    snprintf(stolen, sizeof(stolen), "%s/fns/krm@%s", claimer.addr, krm_digest);
    if (eval_config_image(e, "stolen-krm", stolen, err, sizeof(err)) == 0)
        FAILF("the function runner ran team-a's krm image as %s", stolen);
    CHECK_CONTAINS(err, "does not match its digest");
    CHECK(atomic_load(&claimer.manifest_gets) >= 3); /* each was asked for the manifest */

    CHECK_INT(env_req(e, "GET", API "/images", TEAM_B_TOKEN, NULL), 200);
    if (strstr(e->r.body, digest) || strstr(e->r.body, krm_digest) || strstr(e->r.body, reg.addr))
        FAILF("team-b sees team-a's images: %s", e->r.body);

    snprintf(layout, sizeof(layout), "%s/worker", layouts);
    CHECK(registry_env_push(&reg, layout, "mirror/worker:1", 0) == 0);
    have = registry_manifest("mirror/worker:1", mirror_digest, &m) == 0;
    funcd_buf_free(&m);
    CHECK(have);
    CHECK_STR(mirror_digest, digest);
    int manifests = registry_requests("\"GET /v2/mirror/worker/manifests/sha256:");
    int blobs = registry_requests("\"GET /v2/mirror/worker/blobs/");
    snprintf(stolen, sizeof(stolen), "%s/mirror/worker@%s", reg.addr, digest);
    CHECK_INT(team_b_function(e, "mirror", stolen, ",\"imagePullSecrets\":[\"goodcred\"]"), 201);
    CHECK(team_b_ready(e, "mirror"));
    CHECK_INT(sv_invoke(e, "GET", "/fn/team-b/mirror/x", NULL), 200);
    CHECK(registry_requests("\"GET /v2/mirror/worker/manifests/sha256:") > manifests);
    CHECK_INT(registry_requests("\"GET /v2/mirror/worker/blobs/"), blobs);
    CHECK_INT(env_req(e, "GET", API "/images", TEAM_B_TOKEN, NULL), 200);
    CHECK_CONTAINS(e->r.body, stolen);
    if (strstr(e->r.body, "/worker:1"))
        FAILF("team-b sees team-a's reference: %s", e->r.body);
    CHECK_INT(env_req(e, "GET", API "/images", DEV_TOKEN, NULL), 200);
    image_ref(ref, sizeof(ref), "worker:1");
    CHECK_CONTAINS(e->r.body, ref);
    if (strstr(e->r.body, "mirror/worker"))
        FAILF("team-a sees team-b's reference: %s", e->r.body);
}

static void foreign_digest(void)
{
    claimer = (fake_registry){.claims_any = 1};
    if (fake_registry_start(&claimer) < 0)
        FAILF("cannot start the claiming registry");
    on_platform(NULL, funcd_with_insecure_registry(claimer.addr), NULL, foreign_digest_body);
    fake_registry_stop(&claimer);
}

/* `msg` with every `addr` replaced by "ADDR". */
static void without_addr(const char *msg, const char *addr, char *out, size_t n)
{
    size_t used = 0, al = strlen(addr);
    out[0] = '\0';
    for (const char *p = msg; p && *p && used + 5 < n;) {
        if (strncmp(p, addr, al) == 0) {
            used += (size_t)snprintf(out + used, n - used, "ADDR");
            p += al;
        } else {
            out[used++] = *p++;
            out[used] = '\0';
        }
    }
}

/* Without the operator's word, a tenant's pull does not go to a loopback
 * registry: refused at once, naming the rule. */
static void loopback_refused(env *e)
{
    char ref[256], id[64];
    snprintf(ref, sizeof(ref), "127.0.0.1:%d/x:1", registry_env_free_port());
    CHECK_INT(start_api_pull(e, "default", DEV_TOKEN, ref, NULL, id), 403);
    CHECK_STATUS(403, "Forbidden", "image");
    CHECK_CONTAINS(jstr(e->r.json, "message"), "--insecure-registry");
    CHECK_INT(start_api_pull(e, "default", DEV_TOKEN, "localhost:5000/x:1", NULL, id), 403);
    /* A Function on such an image fails the same way, without a connection. */
    CHECK_INT(sv_create(e, "loopback", "{\"runtime\":\"native\",\"source\":{\"image\":\"%s\"}}",
                        ref),
              201);
    CHECK(wait_failure(e, "loopback", "ImagePullFailed", WAIT_MS));
    CHECK_CONTAINS(jstr(sv_ready_condition(e->r.json), "message"), "--allowed-registry");
}

/* Allowed registries that cannot be reached fail alike, whatever the
 * reason: here a closed port and a plain-HTTP one spoken to over TLS. */
static char closed_addr[64];

static void unreachable_alike(env *e)
{
    char ref[256], id[64], closed_msg[600], open_msg[600], a[600], b[600];
    snprintf(ref, sizeof(ref), "%s/worker:1", closed_addr);
    CHECK_INT(start_api_pull(e, "default", DEV_TOKEN, ref, NULL, id), 202);
    CHECK_STR(wait_api_pull(e, "default", DEV_TOKEN, id), "Failed");
    snprintf(closed_msg, sizeof(closed_msg), "%s", jstr(e->r.json, "message"));
    image_ref(ref, sizeof(ref), "worker:1");
    CHECK_INT(start_api_pull(e, "default", DEV_TOKEN, ref, NULL, id), 202);
    CHECK_STR(wait_api_pull(e, "default", DEV_TOKEN, id), "Failed");
    snprintf(open_msg, sizeof(open_msg), "%s", jstr(e->r.json, "message"));
    CHECK_CONTAINS(closed_msg, "cannot reach registry");
    without_addr(closed_msg, closed_addr, a, sizeof(a));
    without_addr(open_msg, reg.addr, b, sizeof(b));
    if (strcmp(a, b) != 0)
        FAILF("the messages tell a closed port from an open one:\n  %s\n  %s", closed_msg,
              open_msg);
}

static void allow_list(void)
{
    env e;
    if (env_up_with(&e, NULL, NULL, NULL, NULL) < 0) {
        env_down(&e);
        FAILF("cannot start a platform: %s", funcd_error_last()->message);
    }
    loopback_refused(&e);
    env_down(&e);
    if (harness_failed_now)
        return;
    snprintf(closed_addr, sizeof(closed_addr), "127.0.0.1:%d", registry_env_free_port());
    if (env_up_with(&e, NULL, funcd_with_allowed_registry(closed_addr),
                    funcd_with_allowed_registry(reg.addr), NULL) < 0) {
        env_down(&e);
        FAILF("cannot start a platform: %s", funcd_error_last()->message);
    }
    unreachable_alike(&e);
    env_down(&e);
}

/* ---- main ---------------------------------------------------------------------- */

/* ---- the image config label dev.funcd.contract ---------------------------------- */

#define TYPED_FN(name, contract)                                                                   \
    "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":\"" name        \
    "\"},\"spec\":{\"runtime\":\"native\",\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"},"        \
    "\"contract\":" contract "}}"

static long typed_workflow(env *e, const char *name, const char *steps)
{
    char body[2048];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Workflow\",\"metadata\":{\"name\":"
             "\"%s\"},\"spec\":{\"steps\":%s}}",
             name, steps);
    return REQ("POST", NS("default") "/workflows", DEV_TOKEN, body);
}

/* An image Function without spec.contract whose image declares one in the
 * label dev.funcd.contract (input {n: integer}, output {total: number}):
 * once pulled, admission checks its edges with it like a spec.contract: a
 * producer of {n: string} and a consumer of {total: string} are refused
 * naming the edge and the property, a producer of {n: integer} admitted. */
static void typed_by_label(env *e)
{
    char ref[256];
    image_ref(ref, sizeof(ref), "contract:1");
    CHECK_INT(sv_create(e, "labeled", "{\"runtime\":\"native\",\"source\":{\"image\":\"%s\"}}",
                        ref),
              201);
    CHECK(wait_ready_verbose(e, "labeled"));
    CHECK(jstr(e->r.json, "status.source.digest") != NULL);
    CHECK(jget(e->r.json, "spec.contract") == NULL);
    CHECK_INT(REQ("POST", NS("default") "/functions", DEV_TOKEN,
                  TYPED_FN("gives-text", "{\"output\":{\"type\":\"object\",\"required\":[\"n\"],"
                                         "\"properties\":{\"n\":{\"type\":\"string\"}}}}")),
              201);
    CHECK_INT(REQ("POST", NS("default") "/functions", DEV_TOKEN,
                  TYPED_FN("gives-int", "{\"output\":{\"type\":\"object\",\"required\":[\"n\"],"
                                        "\"properties\":{\"n\":{\"type\":\"integer\"}}}}")),
              201);
    CHECK_INT(REQ("POST", NS("default") "/functions", DEV_TOKEN,
                  TYPED_FN("takes-text", "{\"input\":{\"type\":\"object\",\"required\":[\"total\"],"
                                         "\"properties\":{\"total\":{\"type\":\"string\"}}}}")),
              201);
    /* The label's input refuses what gives-text produces. */
    CHECK_INT(typed_workflow(e, "bad-in",
                             "[{\"name\":\"p\",\"function\":\"gives-text\"},"
                             "{\"name\":\"c\",\"function\":\"labeled\",\"dependsOn\":[\"p\"],"
                             "\"input\":\"$.steps.p.output\"}]"),
              400);
    CHECK(!status_problem(&e->r, 400, "BadRequest", "spec.steps[1].input"));
    CHECK_CONTAINS(jstr(e->r.json, "message"), "edge p -> c");
    CHECK_CONTAINS(jstr(e->r.json, "message"), "n");
    /* The label's output does not fit takes-text. */
    CHECK_INT(typed_workflow(e, "bad-out",
                             "[{\"name\":\"p\",\"function\":\"labeled\"},"
                             "{\"name\":\"c\",\"function\":\"takes-text\",\"dependsOn\":[\"p\"],"
                             "\"input\":\"$.steps.p.output\"}]"),
              400);
    CHECK(!status_problem(&e->r, 400, "BadRequest", "spec.steps[1].input"));
    CHECK_CONTAINS(jstr(e->r.json, "message"), "total");
    /* A fitting producer: admitted. */
    CHECK_INT(typed_workflow(e, "good",
                             "[{\"name\":\"p\",\"function\":\"gives-int\"},"
                             "{\"name\":\"c\",\"function\":\"labeled\",\"dependsOn\":[\"p\"],"
                             "\"input\":\"$.steps.p.output\"}]"),
              201);
}

static void contract_label(void)
{
    char layout[400];
    snprintf(layout, sizeof(layout), "%s/contract", layouts);
    CHECK(registry_env_push(&reg, layout, "contract:1", 0) == 0);
    on_platform(NULL, NULL, NULL, typed_by_label);
}

/* ---- a Site from an image whose WorkingDir climbs ---------------------------- */

/* The image "escape" holds /etc/hostname ("image-hostname") and says
 * WorkingDir "/../../../../../../etc". A developer's Site from it is served
 * from the image's /etc: its WorkingDir is looked up with the image as "/",
 * never as a host path that ".." could climb out of (the host's
 * /etc/hostname, /etc/shadow). */
static void site_escape_body(env *e)
{
    char ref[256], body[600];
    image_ref(ref, sizeof(ref), "escape:1");
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Site\",\"metadata\":{\"name\":"
             "\"esc\"},\"spec\":{\"source\":{\"image\":\"%s\"},\"index\":\"hostname\"}}",
             ref);
    CHECK_INT(REQ("POST", NS("default") "/sites", DEV_TOKEN, body), 201);
    const char *st = NULL;
    for (int i = 0; i < 600; i++, usleep(50 * 1000)) {
        REQ("GET", NS("default") "/sites/esc", DEV_TOKEN, NULL);
        st = jstr(sv_ready_condition(e->r.json), "status");
        if (st && strcmp(st, "True") == 0)
            break;
    }
    if (!st || strcmp(st, "True") != 0)
        FAILF("site esc is not ready: %.600s", e->r.body ? e->r.body : "");
    CHECK_INT(sv_invoke(e, "GET", "/site/default/esc/hostname", NULL), 200);
    CHECK_STR(e->r.body, "image-hostname\n");
    CHECK_INT(sv_invoke(e, "GET", "/site/default/esc/shadow", NULL), 404);
}

static void site_workdir_escape(void)
{
    char layout[400];
    snprintf(layout, sizeof(layout), "%s/escape", layouts);
    CHECK(registry_env_push(&reg, layout, "escape:1", 0) == 0);
    on_platform(NULL, NULL, NULL, site_escape_body);
}

typedef struct image_case {
    const char *name;
    registry_kind kind;
    void (*fn)(void);
} image_case;

static const image_case cases[] = {
    {"plain", REGISTRY_PLAIN, plain},
    {"htpasswd", REGISTRY_HTPASSWD, htpasswd},
    {"tls", REGISTRY_TLS, tls},
    {"wrong-password", REGISTRY_HTPASSWD, wrong_password},
    {"unknown-tag", REGISTRY_PLAIN, unknown_tag},
    {"tampered-blob", REGISTRY_PLAIN, tampered_blob},
    {"restart", REGISTRY_PLAIN, restart},
    {"second-node", REGISTRY_PLAIN, second_node},
    {"exec-mode", REGISTRY_PLAIN, exec_mode},
    {"prefixes", REGISTRY_PLAIN, prefixes},
    {"pull-scope", REGISTRY_PLAIN, pull_scope},
    {"images-scope", REGISTRY_PLAIN, images_scope},
    {"private-cache", REGISTRY_HTPASSWD, private_cache},
    {"public-cache", REGISTRY_PLAIN, public_cache},
    {"foreign-digest", REGISTRY_HTPASSWD, foreign_digest},
    {"allow-list", REGISTRY_PLAIN, allow_list},
    {"contract-label", REGISTRY_PLAIN, contract_label},
    {"site-workdir-escape", REGISTRY_PLAIN, site_workdir_escape},
    {"blob-cache-cap", REGISTRY_PLAIN, blob_cache_cap},
    {"refresh-unchanged", REGISTRY_PLAIN, refresh_unchanged},
};

/* A registry of its own per case; after the case no process may be left. */
static void run_case(const image_case *c)
{
    int64_t start = e2e_now_ms();
    harness_failed_now = 0;
    if (start_registry(c->kind) < 0) {
        fprintf(stderr, "  cannot start and fill a registry\n");
        harness_failed_now = 1;
    } else {
        c->fn();
    }
    registry_env_stop(&reg);
    if (!no_children())
        harness_failed_now = 1;
    if (harness_failed_now) {
        harness_failed++;
        fprintf(stderr, "FAIL %s\n", c->name);
    } else {
        harness_passed++;
        fprintf(stderr, "ok   %s (%" PRId64 " ms)\n", c->name, e2e_now_ms() - start);
    }
}

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    size_t n = sizeof(cases) / sizeof(cases[0]), ran = 0;
    if (!registry_env_tools_present()) {
        fprintf(stderr, "skip: docker-registry, skopeo, htpasswd, openssl or cc is missing\n");
        return 77;
    }
    sv_init();
    snprintf(work, sizeof(work), "/tmp/funcd-image-fn-XXXXXX");
    if (!mkdtemp(work))
        return 1;
    snprintf(layouts, sizeof(layouts), "%s/layouts", work);
    if (registry_env_build_fixtures(layouts, "worker krm contract escape") < 0) {
        fprintf(stderr, "FAIL cannot build the OCI layouts\n");
        harness_failed++;
        n = 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (only && strcmp(only, cases[i].name) != 0)
            continue;
        run_case(&cases[i]);
        ran++;
    }
    funcd_remove_tree(work);
    e2e_client_global_cleanup();
    if (n && !ran) {
        fprintf(stderr, "no case %s\n", only);
        return 2;
    }
    return HARNESS_END();
}
