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
#include <curl/curl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e/test_serving_common.h"
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

/* A kubernetes.io/dockerconfigjson Secret SECRET_NAME with that password. */
static long create_pull_secret(env *e, const char *pass)
{
    char config[512];
    docker_config(config, sizeof(config), pass);
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "apiVersion", "funcd.dev/v1");
    cJSON_AddStringToObject(s, "kind", "Secret");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(s, "metadata"), "name", SECRET_NAME);
    cJSON_AddStringToObject(s, "type", "kubernetes.io/dockerconfigjson");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(s, "stringData"), ".dockerconfigjson", config);
    char *body = cJSON_PrintUnformatted(s);
    cJSON_Delete(s);
    long code = env_req(e, "POST", NS("default") "/secrets", DEV_TOKEN, body);
    free(body);
    return code;
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

/* Polls until Ready=False with `reason` (past any Pulling/Extracting); 1 when
 * so, else prints the last state. e->r holds the last GET. */
static int wait_failure(env *e, const char *name, const char *reason, int timeout_ms)
{
    int64_t end = e2e_now_ms() + timeout_ms;
    char path[256];
    snprintf(path, sizeof(path), FN_PATH("%s"), name);
    do {
        if (env_req(e, "GET", path, DEV_TOKEN, NULL) == 200 &&
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
        int k = snprintf(out + used, n - used, "%s%s=%s", used ? "," : "", ready_reason(obj),
                         jstr(sv_ready_condition(obj), "status"));
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
    if (!strstr(reasons, "Pulling=") && !strstr(reasons, "Extracting="))
        FAILF("no Pulling or Extracting before Ready; Ready went %s", reasons);
    snprintf(path, sizeof(path), DP_PATH("%s") "/hello?x=1", name);
    CHECK_INT(sv_invoke(e, "POST", path, "ping"), 200);
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

/* ---- cases --------------------------------------------------------------------- */

/* The registry of `kind` for the case, or a failed case. */
#define START_REGISTRY(kind)                                                                       \
    do {                                                                                           \
        if (start_registry(kind) < 0) {                                                            \
            registry_env_stop(&reg);                                                               \
            FAILF("cannot start and fill a registry");                                             \
        }                                                                                          \
    } while (0)

#define ENV_UP(e, store, a, b, c)                                                                  \
    do {                                                                                           \
        if (env_up_with((e), (store), (a), (b), (c)) < 0) {                                        \
            env_down(e);                                                                           \
            registry_env_stop(&reg);                                                               \
            FAILF("cannot start a platform: %s", funcd_error_last()->message);                     \
        }                                                                                          \
    } while (0)

/* Both front doors on one platform with `option` (how to reach the registry). */
static void both_paths(registry_kind kind)
{
    env e_, *e = &e_;
    START_REGISTRY(kind);
    ENV_UP(e, NULL, registry_option(), NULL, NULL);
    serve_image(e, "from-image", "worker:1", "");
    eval_image(e, "krm:1");
    env_down(e);
    registry_env_stop(&reg);
    CHECK(no_children());
}

TEST(plain)
{
    both_paths(REGISTRY_PLAIN);
}

TEST(tls)
{
    both_paths(REGISTRY_TLS);
}

/* Pull secrets for Functions; the daemon's auth file for the runner, which
 * has no Function to name a secret. */
TEST(htpasswd)
{
    env e_, *e = &e_;
    char auth_file[400], ref[256];
    START_REGISTRY(REGISTRY_HTPASSWD);
    CHECK(write_auth_file(auth_file, sizeof(auth_file)) == 0);

    ENV_UP(e, NULL, registry_option(), NULL, NULL);
    CHECK_INT(create_pull_secret(e, REGISTRY_PASS), 201);
    serve_image(e, "with-secret", "worker:1", ",\"imagePullSecrets\":[\"" SECRET_NAME "\"]");
    /* the secret is what let it in */
    image_ref(ref, sizeof(ref), "worker:1");
    CHECK_INT(sv_create(e, "no-secret", "{\"runtime\":\"native\",\"source\":{\"image\":\"%s\"}}",
                        ref),
              201);
    CHECK(wait_failure(e, "no-secret", "ImagePullFailed", WAIT_MS));
    CHECK_CONTAINS(jstr(sv_ready_condition(e->r.json), "message"), "credentials");
    env_down(e);

    ENV_UP(e, NULL, registry_option(), funcd_with_registry_auth_file(auth_file), NULL);
    eval_image(e, "krm:1");
    env_down(e);
    registry_env_stop(&reg);
    CHECK(no_children());
}

TEST(wrong_password)
{
    env e_, *e = &e_;
    char ref[256], want[256];
    static const char bad[] = "not-the-password";
    START_REGISTRY(REGISTRY_HTPASSWD);
    ENV_UP(e, NULL, registry_option(), NULL, NULL);
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
    env_down(e);
    registry_env_stop(&reg);
    CHECK(no_children());
}

TEST(unknown_tag)
{
    env e_, *e = &e_;
    char ref[256];
    START_REGISTRY(REGISTRY_PLAIN);
    ENV_UP(e, NULL, registry_option(), NULL, NULL);
    image_ref(ref, sizeof(ref), "worker:nope");
    CHECK_INT(sv_create(e, "no-tag", "{\"runtime\":\"native\",\"source\":{\"image\":\"%s\"}}",
                        ref),
              201);
    CHECK(wait_failure(e, "no-tag", "ImagePullFailed", WAIT_MS));
    const char *msg = jstr(sv_ready_condition(e->r.json), "message");
    CHECK_CONTAINS(msg, "worker:nope");
    CHECK_CONTAINS(msg, "not found");
    env_down(e);
    registry_env_stop(&reg);
    CHECK(no_children());
}

/* The layer's bytes change in the registry's storage before the first pull:
 * the digest check refuses it and the function never runs. */
TEST(tampered_blob)
{
    env e_, *e = &e_;
    char ref[256], digest[80], data[600];
    funcd_buf manifest = FUNCD_BUF_INIT;
    START_REGISTRY(REGISTRY_PLAIN);
    int have = registry_manifest("worker:1", digest, &manifest) == 0;
    cJSON *m = have ? cJSON_ParseWithLength(manifest.data, manifest.len) : NULL;
    funcd_buf_free(&manifest);
    const char *layer = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(jget(m, "layers"), 0), "digest"));
    snprintf(digest, sizeof(digest), "%s", layer ? layer : "");
    cJSON_Delete(m);
    if (strncmp(digest, "sha256:", 7) != 0) {
        registry_env_stop(&reg);
        FAILF("the registry's manifest of worker:1 names no layer");
    }
    registry_env_blob_path(&reg, digest, data, sizeof(data));
    FILE *f = fopen(data, "r+b");
    int tampered = f && fseek(f, 100, SEEK_SET) == 0 && fputs("tampered", f) >= 0;
    if (f)
        fclose(f);
    if (!tampered) {
        registry_env_stop(&reg);
        FAILF("cannot overwrite %s", data);
    }

    ENV_UP(e, NULL, registry_option(), NULL, NULL);
    image_ref(ref, sizeof(ref), "worker:1");
    CHECK_INT(sv_create(e, "tampered", "{\"runtime\":\"native\",\"source\":{\"image\":\"%s\"}}",
                        ref),
              201);
    CHECK(wait_failure(e, "tampered", "ImagePullFailed", WAIT_MS));
    const char *msg = jstr(sv_ready_condition(e->r.json), "message");
    CHECK_CONTAINS(msg, "does not match its digest");
    CHECK_CONTAINS(msg, digest);
    CHECK(sv_invoke(e, "GET", DP_PATH("tampered") "/", NULL) != 200);
    env_down(e);
    registry_env_stop(&reg);
    CHECK(no_children());
}

/* 1 when the data plane answers the function with the worker's echo. */
static int serves(env *e, void *name)
{
    char path[256];
    snprintf(path, sizeof(path), DP_PATH("%s") "/again", (const char *)name);
    return sv_invoke(e, "GET", path, NULL) == 200 && jstr(e->r.json, "path") &&
           strcmp(jstr(e->r.json, "path"), "/again") == 0;
}

static funcd_store *sqlite_store(const char *path)
{
    funcd_store *s = NULL;
    return funcd_store_sqlite_new(&s, path, NULL) == 0 ? s : NULL;
}

/* The second platform finds the image's metadata and tag in the store and
 * its layers in the state directory: with the registry stopped it serves. */
TEST(restart)
{
    env e_, *e = &e_;
    char db[400], state[400], digest[80] = "", listing_digest[96];
    snprintf(db, sizeof(db), "%s/store.db", work);
    snprintf(state, sizeof(state), "%s/state", work);
    CHECK(mkdir(state, 0700) == 0);
    START_REGISTRY(REGISTRY_PLAIN);

    funcd_store *s = sqlite_store(db);
    if (!s) {
        registry_env_stop(&reg);
        FAILF("cannot open %s: %s", db, funcd_error_last()->message);
    }
    ENV_UP(e, s, registry_option(), funcd_with_state_dir(state), NULL);
    serve_image(e, "durable", "worker:1", "");
    const char *pulled = jstr(e->r.json, "status.source.digest");
    snprintf(digest, sizeof(digest), "%s", pulled ? pulled : "");
    env_down(e);
    registry_env_stop(&reg);
    CHECK(digest[0]);

    s = sqlite_store(db);
    CHECK(s);
    /* the same options as before: only the registry is gone */
    ENV_UP(e, s, funcd_with_insecure_registry(reg.addr), funcd_with_state_dir(state), NULL);
    if (!env_poll(e, WAIT_MS, serves, "durable"))
        FAILF("after the restart the function does not serve: HTTP %ld %.1000s", e->r.status,
              e->r.body ? e->r.body : "");
    CHECK(wait_ready_verbose(e, "durable"));
    CHECK_STR(jstr(e->r.json, "status.source.digest"), digest);
    /* the metadata cache survived too */
    CHECK_INT(env_req(e, "GET", API "/images", ADMIN_TOKEN, NULL), 200);
    snprintf(listing_digest, sizeof(listing_digest), "\"digest\":\"%s\"", digest);
    CHECK_CONTAINS(e->r.body, listing_digest);
    env_down(e);
    CHECK(no_children());
}

/* ---- main ---------------------------------------------------------------------- */

typedef struct image_case {
    const char *name;
    void (*fn)(void);
} image_case;

static const image_case cases[] = {
    {"plain", plain},
    {"htpasswd", htpasswd},
    {"tls", tls},
    {"wrong-password", wrong_password},
    {"unknown-tag", unknown_tag},
    {"tampered-blob", tampered_blob},
    {"restart", restart},
};

static void run_case(const image_case *c)
{
    harness_failed_now = 0;
    c->fn();
    registry_env_stop(&reg); /* a case that failed early left it running */
    if (harness_failed_now) {
        harness_failed++;
        fprintf(stderr, "FAIL %s\n", c->name);
    } else {
        harness_passed++;
        fprintf(stderr, "ok   %s\n", c->name);
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
    if (registry_env_build_fixtures(layouts, "worker krm") < 0) {
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
