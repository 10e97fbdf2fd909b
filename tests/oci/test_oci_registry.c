/*
 * The OCI client against a real registry (Debian's docker-registry on
 * 127.0.0.1): plain, with htpasswd auth, and behind TLS with a generated
 * CA; images pushed with skopeo from layouts tests/oci/fixtures.sh builds.
 * Exits 77 when a tool is missing.
 */
#include <dirent.h>
#include <event2/event.h>
#include <mbedtls/sha256.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "funcd/common.h"
#include "harness.h"
#include "oci/oci.h"
#include "registry_env.h"
#include "util/log.h"
#include "util/misc.h"

static struct event_base *loop;
static char work[256];     /* fixtures and caches */
static char fixtures[320]; /* OCI layouts */
static registry_env plain, auth, tls;
static int cache_seq;

typedef struct pull_result {
    int finished, rc;
    char msg[1024];
    funcd_oci_image *img;
    uint64_t last_done, last_total;
    int progress_calls;
} pull_result;

static void on_done(int rc, const char *message, funcd_oci_image *image, void *payload)
{
    pull_result *r = payload;
    r->finished++;
    r->rc = rc;
    snprintf(r->msg, sizeof(r->msg), "%s", message ? message : "");
    r->img = image;
    event_base_loopbreak(loop);
}

static void on_progress(uint64_t done, uint64_t total, void *payload)
{
    pull_result *r = payload;
    r->last_done = done;
    r->last_total = total;
    r->progress_calls++;
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    event_base_loopbreak(loop);
}

/* Runs the loop until every result in `rs` finished (or 60 s passed). */
static void wait_all(pull_result *rs, size_t n)
{
    struct event *deadline = evtimer_new(loop, on_deadline, NULL);
    struct timeval tv = {60, 0};
    evtimer_add(deadline, &tv);
    int64_t end = funcd_mono_ms() + 60000;
    for (;;) {
        size_t left = 0;
        for (size_t i = 0; i < n; i++)
            left += rs[i].finished == 0;
        if (left == 0 || funcd_mono_ms() >= end)
            break;
        event_base_dispatch(loop);
    }
    event_free(deadline);
}

/* A fresh cache directory name, valid for the rest of the program. */
static char *new_cache(void)
{
    static char paths[64][400];
    char *path = paths[cache_seq % 64];
    snprintf(path, 400, "%s/cache%d", work, ++cache_seq);
    return path;
}

/* What the client wrote to funcd's log (the last lines). */
static char logged[4096];

static void capture_log(funcd_log_level level, const char *message, void *payload)
{
    size_t used = strlen(logged);
    if (used + strlen(message) + 2 >= sizeof(logged))
        used = 0;
    snprintf(logged + used, sizeof(logged) - used, "%s\n", message);
}

static const funcd_logger test_logger = {capture_log, FUNCD_LOG_DEBUG, NULL};

static funcd_oci_client *client_for(const registry_env *e, const char *cache, const char *auth_file,
                                    const char *certs_dir)
{
    /* A loopback registry: named insecure (plain) or allowed (TLS) by the "operator". */
    const char *insecure[] = {e->addr, NULL};
    funcd_oci_client_options o = {.cache_dir = cache, .auth_file = auth_file,
                                  .certs_dir = certs_dir,
                                  .insecure = e->kind == REGISTRY_TLS ? NULL : insecure,
                                  .allowed = e->kind == REGISTRY_TLS ? insecure : NULL,
                                  .logger = &test_logger};
    funcd_oci_client *c;
    if (funcd_oci_client_new(&c, loop, &o) < 0)
        fprintf(stderr, "  client: %s\n", funcd_error_last()->message);
    return c;
}

static int pull(funcd_oci_client *c, const char *ref, const char *secret, pull_result *r)
{
    memset(r, 0, sizeof(*r));
    int rc = funcd_oci_pull(c, ref, secret, on_progress, on_done, r, NULL);
    if (rc < 0) {
        snprintf(r->msg, sizeof(r->msg), "%s", funcd_error_last()->message);
        r->rc = rc;
        return rc;
    }
    wait_all(r, 1);
    if (r->rc < 0)
        fprintf(stderr, "  pull %s: %s\n", ref, r->msg);
    return r->rc;
}

static void ref_of(char *out, size_t n, const registry_env *e, const char *repo_tag)
{
    snprintf(out, n, "%s/%s", e->addr, repo_tag);
}

static int file_digest_matches(const char *path, const char *digest)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    mbedtls_sha256_context c;
    mbedtls_sha256_init(&c);
    mbedtls_sha256_starts_ret(&c, 0);
    unsigned char buf[65536], sum[32];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        mbedtls_sha256_update_ret(&c, buf, n);
    fclose(f);
    mbedtls_sha256_finish_ret(&c, sum);
    mbedtls_sha256_free(&c);
    char hex[65];
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", sum[i]);
    return strcmp(hex, digest + 7) == 0;
}

static int count_temps(const char *cache)
{
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/blobs/sha256", cache);
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strncmp(e->d_name, ".tmp-", 5) == 0;
    if (d)
        closedir(d);
    return n;
}

/* ---- plain registry ------------------------------------------------------------------ */

TEST(pull_worker_image)
{
    char ref[128], *cache = new_cache();
    ref_of(ref, sizeof(ref), &plain, "worker:1");
    funcd_oci_client *c = client_for(&plain, cache, NULL, NULL);
    CHECK(c);
    pull_result r;
    int rc = pull(c, ref, NULL, &r);
    const funcd_oci_stats st = *funcd_oci_client_stats(c);
    funcd_oci_image *img = r.img;
    int ok = rc == 0 && img && img->entrypoint && img->entrypoint[0] &&
             strcmp(img->entrypoint[0], "/bin/worker") == 0 && !img->entrypoint[1] &&
             img->n_layers == 1 && file_digest_matches(img->layer_paths[0], img->layer_digests[0]);
    int layer_type_ok = img && img->n_layers == 1 &&
                        strcmp(img->layer_media_types[0],
                               "application/vnd.oci.image.layer.v1.tar+gzip") == 0;
    int meta_ok = img && strcmp(img->os, "linux") == 0 && img->working_dir &&
                  strcmp(img->working_dir, "/") == 0 && img->env && img->env[0] &&
                  strcmp(img->env[0], "PATH=/bin") == 0 && strncmp(img->digest, "sha256:", 7) == 0;
    char listing[1024] = "";
    if (ok) {
        char cmd[1024];
        snprintf(cmd, sizeof(cmd), "tar -tzf '%s'", img->layer_paths[0]);
        FILE *p = popen(cmd, "r");
        size_t n = p ? fread(listing, 1, sizeof(listing) - 1, p) : 0;
        listing[n] = 0;
        if (p)
            pclose(p);
    }
    funcd_oci_image_free(img);
    funcd_oci_client_free(c);
    CHECK_INT(rc, 0);
    CHECK(ok);
    CHECK(layer_type_ok);
    CHECK(meta_ok);
    CHECK_CONTAINS(listing, "bin/worker");
    CHECK_INT(st.blob_transfers, 2); /* config + layer */
    CHECK_INT(st.manifest_requests, 1);
    CHECK(r.progress_calls > 0);
    CHECK(r.last_total > 0 && r.last_done == r.last_total);
}

/* The second pull of a tag asks for the manifest again and nothing else; a
 * pull by digest of a cached image asks for nothing. */
TEST(cached_pull_fetches_no_blob)
{
    char ref[128], by_digest[256], *cache = new_cache();
    ref_of(ref, sizeof(ref), &plain, "worker:1");
    funcd_oci_client *c = client_for(&plain, cache, NULL, NULL);
    CHECK(c);
    pull_result r1, r2, r3;
    pull(c, ref, NULL, &r1);
    snprintf(by_digest, sizeof(by_digest), "%s/worker@%s", plain.addr,
             r1.img ? r1.img->digest : "sha256:0");
    pull(c, ref, NULL, &r2);
    funcd_oci_stats after_tag = *funcd_oci_client_stats(c);
    pull(c, by_digest, NULL, &r3);
    funcd_oci_stats after_digest = *funcd_oci_client_stats(c);
    int same = r1.img && r2.img && r3.img && strcmp(r1.img->digest, r2.img->digest) == 0 &&
               strcmp(r1.img->digest, r3.img->digest) == 0;
    funcd_oci_image_free(r1.img);
    funcd_oci_image_free(r2.img);
    funcd_oci_image_free(r3.img);
    funcd_oci_client_free(c);
    CHECK_INT(r1.rc, 0);
    CHECK_INT(r2.rc, 0);
    CHECK_INT(r3.rc, 0);
    CHECK(same);
    CHECK_INT(after_tag.blob_transfers, 2);
    CHECK_INT(after_tag.manifest_requests, 2);
    CHECK_INT(after_tag.blob_cache_hits, 2);
    CHECK_INT(after_digest.manifest_requests, 2);
    CHECK_INT(after_digest.blob_transfers, 2);
}

/* The KRM function's binary, straight out of the pulled layer, still works. */
TEST(pull_krm_function_and_run_it)
{
    char ref[128], *cache = new_cache();
    ref_of(ref, sizeof(ref), &plain, "krm:1");
    funcd_oci_client *c = client_for(&plain, cache, NULL, NULL);
    CHECK(c);
    pull_result r;
    int rc = pull(c, ref, NULL, &r);
    char out[256] = "";
    int entry_ok = r.img && r.img->entrypoint && strcmp(r.img->entrypoint[0], "/bin/krm-cat") == 0;
    if (rc == 0 && r.img->n_layers == 1) {
        char cmd[1024];
        snprintf(cmd, sizeof(cmd),
                 "d=$(mktemp -d) && tar -xzf '%s' -C $d && echo 'kind: ResourceList' | "
                 "$d/bin/krm-cat; rm -rf $d",
                 r.img->layer_paths[0]);
        FILE *p = popen(cmd, "r");
        size_t n = p ? fread(out, 1, sizeof(out) - 1, p) : 0;
        out[n] = 0;
        if (p)
            pclose(p);
    }
    funcd_oci_image_free(r.img);
    funcd_oci_client_free(c);
    CHECK_INT(rc, 0);
    CHECK(entry_ok);
    CHECK_STR(out, "kind: ResourceList\n");
}

/* An index is resolved to the node's platform, and to another for another node. */
TEST(index_selects_node_platform)
{
    char ref[128], *cache = new_cache();
    ref_of(ref, sizeof(ref), &plain, "multi:1");
    const char *insecure[] = {plain.addr, NULL};
    funcd_oci_client_options o = {.cache_dir = cache, .insecure = insecure};
    funcd_oci_client *native, *arm, *none;
    CHECK_INT(funcd_oci_client_new(&native, loop, &o), 0);
#if defined(__aarch64__)
    const char *other = "amd64";
#else
    const char *other = "arm64";
#endif
    o.arch = other;
    CHECK_INT(funcd_oci_client_new(&arm, loop, &o), 0);
    o.arch = "s390x";
    CHECK_INT(funcd_oci_client_new(&none, loop, &o), 0);
    CHECK(native && arm && none);
    pull_result a, b, n;
    pull(native, ref, NULL, &a);
    pull(arm, ref, NULL, &b);
    pull(none, ref, NULL, &n);
    int differ = a.img && b.img && strcmp(a.img->digest, b.img->digest) != 0;
    int arm_ok = b.img && strcmp(b.img->arch, other) == 0;
    funcd_oci_image_free(a.img);
    funcd_oci_image_free(b.img);
    funcd_oci_image_free(n.img);
    funcd_oci_client_free(native);
    funcd_oci_client_free(arm);
    funcd_oci_client_free(none);
    CHECK_INT(a.rc, 0);
    CHECK_INT(b.rc, 0);
    CHECK(differ);
    CHECK(arm_ok);
    CHECK_INT(n.rc, FUNCD_ENOTFOUND);
    CHECK_CONTAINS(n.msg, "linux/s390x");
}

TEST(unknown_tag_is_a_clear_error)
{
    char ref[128], *cache = new_cache();
    ref_of(ref, sizeof(ref), &plain, "worker:nope");
    funcd_oci_client *c = client_for(&plain, cache, NULL, NULL);
    CHECK(c);
    pull_result r;
    pull(c, ref, NULL, &r);
    funcd_oci_client_free(c);
    CHECK_INT(r.rc, FUNCD_ENOTFOUND);
    CHECK(r.img == NULL);
    CHECK_CONTAINS(r.msg, "worker:nope not found in registry");
}

/* Two pulls of one image at once: every blob crosses the wire once. */
TEST(single_flight_shares_transfers)
{
    char ref[128], *cache = new_cache();
    ref_of(ref, sizeof(ref), &plain, "big:1");
    funcd_oci_client *c = client_for(&plain, cache, NULL, NULL);
    CHECK(c);
    pull_result rs[2];
    memset(rs, 0, sizeof(rs));
    CHECK_INT(funcd_oci_pull(c, ref, NULL, NULL, on_done, &rs[0], NULL), 0);
    CHECK_INT(funcd_oci_pull(c, ref, NULL, NULL, on_done, &rs[1], NULL), 0);
    wait_all(rs, 2);
    funcd_oci_stats st = *funcd_oci_client_stats(c);
    int same = rs[0].img && rs[1].img && rs[0].img->n_layers == 8 &&
               strcmp(rs[0].img->layer_paths[7], rs[1].img->layer_paths[7]) == 0;
    funcd_oci_image_free(rs[0].img);
    funcd_oci_image_free(rs[1].img);
    funcd_oci_client_free(c);
    CHECK_INT(rs[0].rc, 0);
    CHECK_INT(rs[1].rc, 0);
    CHECK(same);
    CHECK_INT(st.blob_transfers, 9);
    CHECK(st.bytes_downloaded >= 8u * 4 * 1024 * 1024 && st.bytes_downloaded < 9u * 4 * 1024 * 1024);
}

/* A blob whose bytes were changed in the registry's storage is refused and
 * leaves nothing in the cache. */
TEST(tampered_blob_is_refused)
{
    char ref[128], *cache = new_cache(), layout[400];
    snprintf(layout, sizeof(layout), "%s/krm", fixtures);
    CHECK_INT(registry_env_push(&plain, layout, "tamper:1", 0), 0);
    ref_of(ref, sizeof(ref), &plain, "tamper:1");
    /* learn the layer digest from a clean pull into a throwaway cache */
    funcd_oci_client *c = client_for(&plain, new_cache(), NULL, NULL);
    CHECK(c);
    pull_result r0;
    pull(c, ref, NULL, &r0);
    funcd_oci_client_free(c);
    CHECK_INT(r0.rc, 0);
    char digest[80], data[600];
    snprintf(digest, sizeof(digest), "%s", r0.img->layer_digests[0]);
    funcd_oci_image_free(r0.img);
    registry_env_blob_path(&plain, digest, data, sizeof(data));
    FILE *f = fopen(data, "r+b");
    CHECK(f);
    fseek(f, 100, SEEK_SET);
    fputs("tampered", f);
    fclose(f);

    c = client_for(&plain, cache, NULL, NULL);
    CHECK(c);
    pull_result r;
    pull(c, ref, NULL, &r);
    funcd_oci_client_free(c);
    char cached[600];
    snprintf(cached, sizeof(cached), "%s/blobs/sha256/%s", cache, digest + 7);
    CHECK(r.rc < 0);
    CHECK(r.img == NULL);
    CHECK_CONTAINS(r.msg, "does not match its digest");
    CHECK_CONTAINS(r.msg, digest);
    CHECK(access(cached, F_OK) != 0);
    CHECK_INT(count_temps(cache), 0);
}

typedef struct cancel_ctx {
    funcd_oci_pull_handle *h;
    int done_calls, cancelled;
} cancel_ctx;

static void cancel_done(int rc, const char *message, funcd_oci_image *image, void *payload)
{
    ((cancel_ctx *)payload)->done_calls++;
    funcd_oci_image_free(image);
}

/* Cancels from inside the transfer's own data callback: the hardest place. */
static void cancel_on_first_bytes(uint64_t done, uint64_t total, void *payload)
{
    cancel_ctx *x = payload;
    if (done > 0 && x->h) {
        funcd_oci_pull_cancel(x->h);
        x->h = NULL;
        x->cancelled = 1;
        event_base_loopbreak(loop);
    }
}

/* A cancelled pull never calls done, and its partial blobs are removed. */
TEST(cancel_stops_and_cleans_up)
{
    char ref[128], *cache = new_cache();
    ref_of(ref, sizeof(ref), &plain, "big:1");
    funcd_oci_client *c = client_for(&plain, cache, NULL, NULL);
    CHECK(c);
    cancel_ctx x = {0};
    CHECK_INT(funcd_oci_pull(c, ref, NULL, cancel_on_first_bytes, cancel_done, &x, &x.h), 0);
    struct event *t = evtimer_new(loop, on_deadline, NULL);
    struct timeval tv = {10, 0};
    evtimer_add(t, &tv);
    event_base_dispatch(loop);
    /* let the aborted transfers wind down */
    tv = (struct timeval){0, 200000};
    evtimer_add(t, &tv);
    event_base_dispatch(loop);
    event_free(t);
    int temps = count_temps(cache);
    funcd_oci_client_free(c);
    CHECK(x.cancelled);
    CHECK_INT(x.done_calls, 0);
    CHECK_INT(temps, 0);
}

TEST(insecure_must_be_loopback)
{
    const char *insecure[] = {"10.1.2.3:5000", NULL};
    funcd_oci_client_options o = {.cache_dir = new_cache(), .insecure = insecure};
    funcd_oci_client *c;
    CHECK_INT(funcd_oci_client_new(&c, loop, &o), FUNCD_EINVAL);
    CHECK(c == NULL);
    CHECK_INT(funcd_error_last()->code, FUNCD_EINVAL);
    CHECK_CONTAINS(funcd_error_last()->message, "10.1.2.3:5000");
    CHECK_CONTAINS(funcd_error_last()->message, "loopback");
}

/* ---- htpasswd registry --------------------------------------------------------------- */

static void auth_json(char *out, size_t n, const char *host, const char *user, const char *pass)
{
    char raw[128], b64[256];
    snprintf(raw, sizeof(raw), "%s:%s", user, pass);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "printf '%%s' '%s' | base64 -w0", raw);
    FILE *p = popen(cmd, "r");
    size_t k = p ? fread(b64, 1, sizeof(b64) - 1, p) : 0;
    b64[k] = 0;
    if (p)
        pclose(p);
    snprintf(out, n, "{\"auths\":{\"%s\":{\"auth\":\"%s\"}}}", host, b64);
}

TEST(auth_required_without_credentials)
{
    char ref[128];
    ref_of(ref, sizeof(ref), &auth, "worker:1");
    funcd_oci_client *c = client_for(&auth, new_cache(), NULL, NULL);
    CHECK(c);
    pull_result r;
    pull(c, ref, NULL, &r);
    funcd_oci_client_free(c);
    CHECK(r.rc < 0);
    CHECK_CONTAINS(r.msg, "requires credentials");
}

TEST(auth_with_daemon_auth_file)
{
    char ref[128], json[512], file[400];
    ref_of(ref, sizeof(ref), &auth, "worker:1");
    auth_json(json, sizeof(json), auth.addr, REGISTRY_USER, REGISTRY_PASS);
    snprintf(file, sizeof(file), "%s/auth.json", work);
    FILE *f = fopen(file, "w");
    CHECK(f);
    fputs(json, f);
    fclose(f);
    funcd_oci_client *c = client_for(&auth, new_cache(), file, NULL);
    CHECK(c);
    pull_result r;
    pull(c, ref, NULL, &r);
    funcd_oci_image_free(r.img);
    funcd_oci_client_free(c);
    CHECK_INT(r.rc, 0);
}

TEST(auth_with_pull_secret)
{
    char ref[128], json[512];
    ref_of(ref, sizeof(ref), &auth, "worker:1");
    snprintf(json, sizeof(json),
             "{\"auths\":{\"http://%s\":{\"username\":\"%s\",\"password\":\"%s\"}}}", auth.addr,
             REGISTRY_USER, REGISTRY_PASS);
    funcd_oci_client *c = client_for(&auth, new_cache(), NULL, NULL);
    CHECK(c);
    pull_result r;
    pull(c, ref, json, &r);
    funcd_oci_image_free(r.img);
    funcd_oci_client_free(c);
    CHECK_INT(r.rc, 0);
}

TEST(wrong_password_is_a_clear_error)
{
    char ref[128], json[512];
    ref_of(ref, sizeof(ref), &auth, "worker:1");
    auth_json(json, sizeof(json), auth.addr, REGISTRY_USER, "wrong");
    funcd_oci_client *c = client_for(&auth, new_cache(), NULL, NULL);
    CHECK(c);
    pull_result r;
    pull(c, ref, json, &r);
    funcd_oci_client_free(c);
    char want[256];
    snprintf(want, sizeof(want), "registry %s refused the credentials for worker", auth.addr);
    CHECK(r.rc < 0);
    CHECK_CONTAINS(r.msg, want);
    CHECK(!strstr(r.msg, "wrong"));
}

/* ---- TLS registry ---------------------------------------------------------------------- */

TEST(tls_with_custom_ca)
{
    char ref[128];
    ref_of(ref, sizeof(ref), &tls, "worker:1");
    funcd_oci_client *c = client_for(&tls, new_cache(), NULL, tls.certs_dir);
    CHECK(c);
    pull_result r;
    pull(c, ref, NULL, &r);
    funcd_oci_image_free(r.img);
    funcd_oci_client_free(c);
    CHECK_INT(r.rc, 0);
}

/* The tenant's message says only that the registry cannot be reached; the
 * operator's log says why (issue 11: a pull must not be a port scanner). */
TEST(tls_without_ca_is_a_clear_error)
{
    char ref[128];
    ref_of(ref, sizeof(ref), &tls, "worker:1");
    funcd_oci_client *c = client_for(&tls, new_cache(), NULL, NULL);
    CHECK(c);
    pull_result r;
    logged[0] = '\0';
    pull(c, ref, NULL, &r);
    funcd_oci_client_free(c);
    CHECK(r.rc < 0);
    CHECK_CONTAINS(r.msg, "cannot reach registry");
    CHECK_CONTAINS(r.msg, tls.addr);
    CHECK(!strstr(r.msg, "certificate") && !strstr(r.msg, "SSL"));
    CHECK_CONTAINS(logged, tls.addr);
    CHECK_CONTAINS(logged, "ca.crt");
}

static int setup(void)
{
    snprintf(work, sizeof(work), "/tmp/funcd-oci-test-XXXXXX");
    if (!mkdtemp(work))
        return -1;
    snprintf(fixtures, sizeof(fixtures), "%s/layouts", work);
    if (registry_env_build_fixtures(fixtures, "worker krm multi big") < 0)
        return -1;
    if (registry_env_start(&plain, REGISTRY_PLAIN) < 0 ||
        registry_env_start(&auth, REGISTRY_HTPASSWD) < 0 ||
        registry_env_start(&tls, REGISTRY_TLS) < 0)
        return -1;
    const char *pushes[][3] = {{"worker", "worker:1", ""}, {"krm", "krm:1", ""},
                               {"multi", "multi:1", "all"}, {"big", "big:1", ""}};
    char layout[512];
    for (size_t i = 0; i < 4; i++) {
        snprintf(layout, sizeof(layout), "%s/%s", fixtures, pushes[i][0]);
        if (registry_env_push(&plain, layout, pushes[i][1], pushes[i][2][0] != 0) < 0)
            return -1;
    }
    snprintf(layout, sizeof(layout), "%s/worker", fixtures);
    if (registry_env_push(&auth, layout, "worker:1", 0) < 0 ||
        registry_env_push(&tls, layout, "worker:1", 0) < 0)
        return -1;
    return 0;
}

int main(void)
{
    if (!registry_env_tools_present()) {
        fprintf(stderr, "skip: docker-registry, skopeo, htpasswd, openssl or cc is missing\n");
        return 77;
    }
    loop = event_base_new();
    if (setup() == 0) {
        RUN(pull_worker_image);
        RUN(cached_pull_fetches_no_blob);
        RUN(pull_krm_function_and_run_it);
        RUN(index_selects_node_platform);
        RUN(unknown_tag_is_a_clear_error);
        RUN(single_flight_shares_transfers);
        RUN(tampered_blob_is_refused);
        RUN(cancel_stops_and_cleans_up);
        RUN(insecure_must_be_loopback);
        RUN(auth_required_without_credentials);
        RUN(auth_with_daemon_auth_file);
        RUN(auth_with_pull_secret);
        RUN(wrong_password_is_a_clear_error);
        RUN(tls_with_custom_ca);
        RUN(tls_without_ca_is_a_clear_error);
    } else {
        fprintf(stderr, "FAIL setup\n");
        harness_failed++;
    }
    registry_env_stop(&plain);
    registry_env_stop(&auth);
    registry_env_stop(&tls);
    if (work[0])
        funcd_remove_tree(work);
    event_base_free(loop);
    return HARNESS_END();
}
