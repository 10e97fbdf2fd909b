/*
 * The OCI client against registries the test plays (fake_registry.c), for
 * what a real registry never does: one that claims to hold every digest
 * (review17 H-1), and ones whose blobs are not what their manifests declare
 * (review17 M-1).
 */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_registry.h"
#include "pull.h"
#include "funcd/common.h"
#include "harness.h"
#include "oci/oci.h"
#include "util/misc.h"

#if defined(__aarch64__)
#define ARCH "arm64"
#else
#define ARCH "amd64"
#endif
#define CONFIG "{\"architecture\":\"" ARCH "\",\"os\":\"linux\",\"config\":{\"Entrypoint\":[\"/app\"]}}"
#define LAYER_BYTES 3000

static struct event_base *loop;
static char work[256];
static fake_registry victim, claimer;
static char victim_manifest[1024];

/* A client that may reach both registries, with a cache of its own. */
static funcd_oci_client *new_client(void)
{
    const char *insecure[] = {victim.addr, claimer.addr, NULL};
    return new_client_of(loop, work, insecure);
}

static void pull(funcd_oci_client *c, const char *ref, result *r)
{
    pull_on(loop, c, ref, NULL, r);
}

/*
 * review17 H-1: a manifest in the cache serves a pull by digest only of the
 * registry and repository it was read from. Another registry that claims the
 * digest is asked for the manifest itself, and its bytes must hash to it: the
 * claimer's do not, so nothing cached comes of it. A repository that really
 * holds the same manifest gets it after one request, the blobs from the cache.
 */
TEST(cached_manifest_serves_only_its_repository)
{
    char ref[300];
    funcd_oci_client *c = new_client();
    CHECK(c);
    result r;
    snprintf(ref, sizeof(ref), "%s/team-a/app:1", victim.addr);
    pull(c, ref, &r);
    int pulled = r.rc == 0 && r.img && strcmp(r.img->digest, victim.manifest_digest) == 0;
    funcd_oci_image_free(r.img);
    funcd_oci_stats before = *funcd_oci_client_stats(c);

    snprintf(ref, sizeof(ref), "%s/anything/x@%s", claimer.addr, victim.manifest_digest);
    pull(c, ref, &r);
    funcd_oci_image_free(r.img);
    result stolen = r;
    int claimer_gets = atomic_load(&claimer.manifest_gets);
    funcd_oci_stats after_stolen = *funcd_oci_client_stats(c);

    snprintf(ref, sizeof(ref), "%s/team-a/app@%s", victim.addr, victim.manifest_digest);
    pull(c, ref, &r);
    funcd_oci_image_free(r.img);
    result same_repo = r;
    funcd_oci_stats after_same = *funcd_oci_client_stats(c);

    snprintf(ref, sizeof(ref), "%s/mirror/app@%s", victim.addr, victim.manifest_digest);
    pull(c, ref, &r);
    funcd_oci_image_free(r.img);
    funcd_oci_stats after_mirror = *funcd_oci_client_stats(c);
    funcd_oci_client_free(c);

    CHECK(pulled);
    if (stolen.rc == 0)
        FAILF("%s/anything/x got the image of %s/team-a/app from the cache", claimer.addr,
              victim.addr);
    CHECK_CONTAINS(stolen.msg, "does not match its digest");
    CHECK_INT(claimer_gets, 1);
    CHECK_INT(same_repo.rc, 0);
    CHECK_INT(after_same.manifest_requests, after_stolen.manifest_requests);
    CHECK_INT(r.rc, 0);
    CHECK_INT(after_mirror.manifest_requests, after_same.manifest_requests + 1);
    CHECK_INT(after_mirror.blob_transfers, before.blob_transfers);
}

/* A registry whose manifest declares `layers` (JSON descriptors) and sends
 * `layer_bytes` bytes for each: started, or -1. */
static int start_liar(fake_registry *f, char *manifest, size_t n, const char *layers,
                      size_t layer_bytes)
{
    char config_digest[72];
    fake_registry_digest(CONFIG, strlen(CONFIG), config_digest);
    snprintf(manifest, n,
             "{\"schemaVersion\":2,\"mediaType\":\"%s\",\"config\":{\"mediaType\":"
             "\"application/vnd.oci.image.config.v1+json\",\"digest\":\"%s\",\"size\":%zu},"
             "\"layers\":[%s]}",
             FUNCD_OCI_MT_OCI_MANIFEST, config_digest, strlen(CONFIG), layers);
    *f = (fake_registry){.manifest = manifest, .config = CONFIG, .layer_bytes = layer_bytes};
    return fake_registry_start(f);
}

/* Pulls liar:1 from `f` with a client of its own; its stats in `st`. */
static void pull_from_liar(fake_registry *f, result *r, funcd_oci_stats *st)
{
    char cache[400], ref[128];
    snprintf(cache, sizeof(cache), "%s/liar-%s", work, f->addr);
    const char *insecure[] = {f->addr, NULL};
    funcd_oci_client_options o = {.cache_dir = cache, .insecure = insecure};
    funcd_oci_client *c = NULL;
    memset(r, 0, sizeof(*r));
    if (funcd_oci_client_new(&c, loop, &o) < 0) {
        snprintf(r->msg, sizeof(r->msg), "no client: %s", funcd_error_last()->message);
        r->rc = -1;
        return;
    }
    snprintf(ref, sizeof(ref), "%s/liar:1", f->addr);
    pull(c, ref, r);
    *st = *funcd_oci_client_stats(c);
    funcd_oci_image_free(r->img);
    r->img = NULL;
    funcd_oci_client_free(c);
}

#define LAYER_OF(digest, size)                                                                     \
    "{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"" digest      \
    "\",\"size\":" size "}"
#define ANY_DIGEST "sha256:1111111111111111111111111111111111111111111111111111111111111111"

/* review17 M-1: a layer declared with size 0 was a layer of any size (the
 * registry streamed a GiB). It is refused before anything is downloaded. */
TEST(empty_layer_is_refused_before_any_transfer)
{
    fake_registry f;
    char manifest[1024];
    CHECK(start_liar(&f, manifest, sizeof(manifest), LAYER_OF(ANY_DIGEST, "0"), 8u << 20) == 0);
    result r;
    funcd_oci_stats st;
    pull_from_liar(&f, &r, &st);
    int blob_gets = atomic_load(&f.blob_gets);
    fake_registry_stop(&f);
    CHECK_INT(r.rc, FUNCD_EINVAL);
    CHECK_CONTAINS(r.msg, "layer 0");
    CHECK_CONTAINS(r.msg, "\"size\"");
    CHECK_INT(blob_gets, 0);
    CHECK_INT(st.bytes_downloaded, 0);
}

/* Declared sizes that add up past what an image may have (4 GiB) are
 * refused before anything is downloaded. */
TEST(image_over_its_limit_is_refused_before_any_transfer)
{
    fake_registry f;
    char manifest[1024];
    CHECK(start_liar(&f, manifest, sizeof(manifest),
                     LAYER_OF(ANY_DIGEST, "3221225472") "," LAYER_OF(ANY_DIGEST, "3221225472"),
                     1000) == 0);
    result r;
    funcd_oci_stats st;
    pull_from_liar(&f, &r, &st);
    int blob_gets = atomic_load(&f.blob_gets);
    fake_registry_stop(&f);
    CHECK_INT(r.rc, FUNCD_EINVAL);
    CHECK_CONTAINS(r.msg, "4294967296");
    CHECK_INT(blob_gets, 0);
}

/* A blob is received up to its declared size and no further; a shorter one
 * is refused too. */
TEST(blob_must_be_its_declared_size)
{
    fake_registry f;
    char manifest[1024];
    CHECK(start_liar(&f, manifest, sizeof(manifest), LAYER_OF(ANY_DIGEST, "1000"), 4u << 20) == 0);
    result r;
    funcd_oci_stats st;
    pull_from_liar(&f, &r, &st);
    fake_registry_stop(&f);
    CHECK(r.rc < 0);
    CHECK_CONTAINS(r.msg, "larger than its descriptor");
    CHECK(st.bytes_downloaded <= 1000 + strlen(CONFIG));

    char layer[500], digest[72], layers[300];
    memset(layer, 'x', sizeof(layer));
    fake_registry_digest(layer, sizeof(layer), digest);
    snprintf(layers, sizeof(layers),
             "{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"%s\","
             "\"size\":1000}",
             digest);
    CHECK(start_liar(&f, manifest, sizeof(manifest), layers, sizeof(layer)) == 0);
    pull_from_liar(&f, &r, &st);
    fake_registry_stop(&f);
    CHECK(r.rc < 0);
    CHECK_CONTAINS(r.msg, "is 500 bytes, its descriptor says 1000");
}

int main(void)
{
    loop = event_base_new();
    snprintf(work, sizeof(work), "/tmp/funcd-oci-fake-XXXXXX");
    if (!loop || !mkdtemp(work))
        return 1;
    char layer[LAYER_BYTES], layer_digest[72], config_digest[72];
    memset(layer, 'x', sizeof(layer));
    fake_registry_digest(layer, sizeof(layer), layer_digest);
    fake_registry_digest(CONFIG, strlen(CONFIG), config_digest);
    snprintf(victim_manifest, sizeof(victim_manifest),
             "{\"schemaVersion\":2,\"mediaType\":\"%s\",\"config\":{\"mediaType\":"
             "\"application/vnd.oci.image.config.v1+json\",\"digest\":\"%s\",\"size\":%zu},"
             "\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\","
             "\"digest\":\"%s\",\"size\":%d}]}",
             FUNCD_OCI_MT_OCI_MANIFEST, config_digest, strlen(CONFIG), layer_digest, LAYER_BYTES);
    victim.manifest = victim_manifest;
    victim.config = CONFIG;
    victim.layer_bytes = LAYER_BYTES;
    claimer.claims_any = 1;
    if (fake_registry_start(&victim) < 0 || fake_registry_start(&claimer) < 0) {
        fprintf(stderr, "FAIL cannot start the fake registries\n");
        harness_failed++;
    } else {
        RUN(cached_manifest_serves_only_its_repository);
        RUN(empty_layer_is_refused_before_any_transfer);
        RUN(image_over_its_limit_is_refused_before_any_transfer);
        RUN(blob_must_be_its_declared_size);
    }
    fake_registry_stop(&victim);
    fake_registry_stop(&claimer);
    event_base_free(loop);
    funcd_remove_tree(work);
    return HARNESS_END();
}
