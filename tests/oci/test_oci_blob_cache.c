/*
 * The blob cache's size cap (docs/images.md "The blob cache"): the OCI
 * client against registries the test plays (fake_registry.c), one image per
 * registry, its layers `x` bytes of 'x' each (images with a layer of the same
 * size share it; they all share the config blob). Sizes count as the cache
 * counts them: bytes on disk.
 */
#include <dirent.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fake_registry.h"
#include "pull.h"
#include "funcd/common.h"
#include "harness.h"
#include "oci/oci.h"
#include "util/log.h"
#include "util/misc.h"

#if defined(__aarch64__)
#define ARCH "arm64"
#else
#define ARCH "amd64"
#endif
#define CONFIG "{\"architecture\":\"" ARCH "\",\"os\":\"linux\",\"config\":{\"Entrypoint\":[\"/app\"]}}"

/* Layer sizes: A + B (and the config) pass CAP, any one of them fits. */
#define A_BYTES 40000
#define B_BYTES 50000
#define C_BYTES 60000
#define H_BYTES 30000
#define CAP 100000

static struct event_base *loop;
static char work[256];

typedef struct image {
    fake_registry reg;
    char manifest[2048];
    char ref[128];
} image;

/* A registry serving one image whose layers have `sizes` (0-terminated). */
static int image_start(image *im, const size_t *sizes, const char *hold)
{
    char config_digest[72], layers[1024] = "";
    fake_registry_digest(CONFIG, strlen(CONFIG), config_digest);
    memset(&im->reg, 0, sizeof(im->reg));
    for (int i = 0; sizes[i] && i < 4; i++) {
        char d[72];
        fake_registry_layer_digest(sizes[i], d);
        size_t used = strlen(layers);
        snprintf(layers + used, sizeof(layers) - used,
                 "%s{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"%s\","
                 "\"size\":%zu}",
                 i ? "," : "", d, sizes[i]);
        im->reg.layer_sizes[i] = sizes[i];
    }
    snprintf(im->manifest, sizeof(im->manifest),
             "{\"schemaVersion\":2,\"mediaType\":\"%s\",\"config\":{\"mediaType\":"
             "\"application/vnd.oci.image.config.v1+json\",\"digest\":\"%s\",\"size\":%zu},"
             "\"layers\":[%s]}",
             FUNCD_OCI_MT_OCI_MANIFEST, config_digest, strlen(CONFIG), layers);
    im->reg.manifest = im->manifest;
    im->reg.config = CONFIG;
    im->reg.hold = hold;
    if (fake_registry_start(&im->reg) < 0)
        return -1;
    snprintf(im->ref, sizeof(im->ref), "%s/app:1", im->reg.addr);
    return 0;
}

/* A client on `cache` (its own directory) capped at `cap` that may reach `images`. */
static funcd_oci_client *client_on(const char *cache, uint64_t cap, image *const *images)
{
    const char *insecure[8] = {0};
    for (int i = 0; images[i] && i < 7; i++)
        insecure[i] = images[i]->reg.addr;
    funcd_oci_client_options o = {.cache_dir = cache, .insecure = insecure,
                                  .blob_cache_bytes = cap};
    funcd_oci_client *c;
    return funcd_oci_client_new(&c, loop, &o) == 0 ? c : NULL;
}

/* Bytes on disk of the stored blobs under cache/blobs/sha256 (not .tmp- files). */
static uint64_t blob_bytes(const char *cache)
{
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/blobs/sha256", cache);
    DIR *d = opendir(dir);
    uint64_t total = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        struct stat st;
        if (de->d_name[0] == '.' || fstatat(dirfd(d), de->d_name, &st, 0) < 0)
            continue;
        uint64_t b = (uint64_t)st.st_blocks * 512;
        total += b > (uint64_t)st.st_size ? b : (uint64_t)st.st_size;
    }
    if (d)
        closedir(d);
    return total;
}

/* Whether the cache holds the layer of `size` bytes. */
static int has_layer(const char *cache, size_t size)
{
    char d[72], path[600];
    fake_registry_layer_digest(size, d);
    snprintf(path, sizeof(path), "%s/blobs/sha256/%s", cache, d + 7);
    return access(path, R_OK) == 0;
}

static void cache_dir(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", work, name);
}

/* Pulls `ref` to the end; the image is freed (as a caller that unpacked it). 0 or rc. */
static int pull_and_free(funcd_oci_client *c, const char *ref, char *msg, size_t n)
{
    result r;
    pull_on(loop, c, ref, NULL, &r);
    funcd_oci_image_free(r.img);
    snprintf(msg, n, "%s", r.msg);
    return r.finished ? r.rc : -1;
}

/*
 * Three images whose blobs together pass the cap: once each was pulled
 * (and unpacked), what stays is at most the cap, the last image's blobs
 * among it, the first's layer gone. Before the cap, all of them stayed.
 */
TEST(the_cap_bounds_what_stays)
{
    image a, b, c3;
    image *all[] = {&a, &b, &c3, NULL};
    CHECK(image_start(&a, (size_t[]){A_BYTES, 0}, NULL) == 0);
    CHECK(image_start(&b, (size_t[]){B_BYTES, 0}, NULL) == 0);
    CHECK(image_start(&c3, (size_t[]){C_BYTES, 0}, NULL) == 0);
    char cache[400], msg[512];
    cache_dir(cache, sizeof(cache), "cap");
    funcd_oci_client *c = client_on(cache, CAP, all);
    CHECK(c);
    int rc_a = pull_and_free(c, a.ref, msg, sizeof(msg));
    int rc_b = pull_and_free(c, b.ref, msg, sizeof(msg));
    int rc_c = pull_and_free(c, c3.ref, msg, sizeof(msg));
    uint64_t bytes = blob_bytes(cache);
    funcd_oci_client_free(c);
    for (int i = 0; all[i]; i++)
        fake_registry_stop(&all[i]->reg);
    CHECK_INT(rc_a, 0);
    CHECK_INT(rc_b, 0);
    CHECK_INT(rc_c, 0);
    if (bytes > CAP)
        FAILF("the blobs take %llu bytes, over the cap of %d", (unsigned long long)bytes, CAP);
    CHECK(has_layer(cache, C_BYTES));
    CHECK(!has_layer(cache, A_BYTES));
}

/*
 * An image whose blobs were evicted is pulled again: by tag (the manifest
 * from the registry) and by digest (the manifest still in the cache, its
 * blobs not): its layer is fetched again and the pull works.
 */
TEST(an_evicted_image_is_fetched_again)
{
    image a, b;
    image *all[] = {&a, &b, NULL};
    CHECK(image_start(&a, (size_t[]){A_BYTES, 0}, NULL) == 0);
    CHECK(image_start(&b, (size_t[]){B_BYTES + 20000, 0}, NULL) == 0);
    char cache[400], msg[512], by_digest[300];
    cache_dir(cache, sizeof(cache), "again");
    funcd_oci_client *c = client_on(cache, CAP, all);
    CHECK(c);
    result r;
    pull_on(loop, c, a.ref, NULL, &r);
    snprintf(by_digest, sizeof(by_digest), "%s/app@%s", a.reg.addr,
             r.img ? r.img->digest : "sha256:none");
    funcd_oci_image_free(r.img);
    int rc_b = pull_and_free(c, b.ref, msg, sizeof(msg)); /* A's layer goes */
    int a_gone = !has_layer(cache, A_BYTES);
    funcd_oci_stats before = *funcd_oci_client_stats(c);

    pull_on(loop, c, by_digest, NULL, &r); /* B's layer goes */
    int rc_digest = r.rc, there = r.img && access(r.img->layer_paths[0], R_OK) == 0;
    funcd_oci_image_free(r.img);
    funcd_oci_stats after_digest = *funcd_oci_client_stats(c);
    int rc_b_again = pull_and_free(c, b.ref, msg, sizeof(msg)); /* and A's again */
    pull_on(loop, c, a.ref, NULL, &r);
    int rc_tag = r.rc, there_tag = r.img && access(r.img->layer_paths[0], R_OK) == 0;
    funcd_oci_image_free(r.img);
    funcd_oci_stats after_tag = *funcd_oci_client_stats(c);
    funcd_oci_client_free(c);
    for (int i = 0; all[i]; i++)
        fake_registry_stop(&all[i]->reg);
    CHECK_INT(rc_b, 0);
    CHECK(a_gone);
    CHECK_INT(rc_digest, 0);
    CHECK(there);
    CHECK_INT(after_digest.manifest_requests, before.manifest_requests); /* cached */
    CHECK_INT(after_digest.blob_transfers, before.blob_transfers + 1);
    CHECK_INT(rc_b_again, 0);
    CHECK_INT(rc_tag, 0);
    CHECK(there_tag);
    CHECK_INT(after_tag.blob_transfers, after_digest.blob_transfers + 2);
    CHECK(blob_bytes(cache) <= CAP);
}

static int pulled_once(void *payload)
{
    return ((result *)payload)->finished;
}

/* Runs the loop until done(payload) or 20 s. */
static int run_until(int (*done)(void *), void *payload)
{
    int64_t end = funcd_mono_ms() + 20000;
    while (!done(payload) && funcd_mono_ms() < end)
        event_base_loop(loop, EVLOOP_ONCE | EVLOOP_NONBLOCK), usleep(1000);
    return done(payload);
}

static int held_at_registry(void *payload)
{
    event_base_loop(loop, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    return atomic_load(&((fake_registry *)payload)->held) > 0;
}

/*
 * Two pulls, one in progress, the cap forcing eviction: H needs A's layer
 * (in the cache, the least recently used blob) and one the registry holds
 * back. While H waits, B is pulled and passes the cap: A's layer, which H
 * found, stays (B's own goes once B is done). H completes with every layer
 * there; while its image lives (the caller unpacks it) C is pulled and
 * passes the cap again: H's layers stay, C's goes. Once H's image is freed
 * the cache is under the cap.
 */
TEST(pulls_in_progress_keep_their_blobs)
{
    char held[72];
    fake_registry_layer_digest(H_BYTES, held);
    image a, b, c3, h;
    image *all[] = {&a, &b, &c3, &h, NULL};
    CHECK(image_start(&a, (size_t[]){A_BYTES, 0}, NULL) == 0);
    CHECK(image_start(&b, (size_t[]){B_BYTES + 20000, 0}, NULL) == 0);
    CHECK(image_start(&c3, (size_t[]){C_BYTES, 0}, NULL) == 0);
    CHECK(image_start(&h, (size_t[]){A_BYTES, H_BYTES, 0}, held) == 0);
    char cache[400], msg[512];
    cache_dir(cache, sizeof(cache), "in-progress");
    funcd_oci_client *c = client_on(cache, CAP, all);
    CHECK(c);
    int rc_a = pull_and_free(c, a.ref, msg, sizeof(msg));

    result rh = {0};
    int started = funcd_oci_pull(c, h.ref, NULL, NULL, on_done, &rh, NULL);
    int waiting = started == 0 && run_until(held_at_registry, &h.reg);
    int rc_b = pull_and_free(c, b.ref, msg, sizeof(msg));
    int kept_found = has_layer(cache, A_BYTES);
    fake_registry_release(&h.reg);
    int done = waiting && run_until(pulled_once, &rh);
    int all_there = done && rh.rc == 0 && rh.img;
    for (size_t i = 0; all_there && i < rh.img->n_layers; i++)
        all_there = access(rh.img->layer_paths[i], R_OK) == 0;
    int rc_c = pull_and_free(c, c3.ref, msg, sizeof(msg));
    int kept_unpacking = rh.img && has_layer(cache, A_BYTES) && has_layer(cache, H_BYTES);
    int c_went = !has_layer(cache, C_BYTES); /* the one blob nobody held */
    funcd_oci_image_free(rh.img);
    uint64_t after = blob_bytes(cache);
    funcd_oci_blob_cache_stats st;
    funcd_oci_blob_cache_stats_get(funcd_oci_client_blob_cache(c), &st);
    funcd_oci_client_free(c);
    for (int i = 0; all[i]; i++)
        fake_registry_stop(&all[i]->reg);
    CHECK_INT(rc_a, 0);
    CHECK_INT(started, 0);
    CHECK(waiting);
    CHECK_INT(rc_b, 0);
    if (!kept_found)
        FAILF("A's layer, found in the cache by the pull in progress, was evicted");
    CHECK(done);
    CHECK_INT(rh.rc, 0);
    CHECK(all_there);
    CHECK_INT(rc_c, 0);
    if (!kept_unpacking)
        FAILF("a layer of the image being unpacked was evicted");
    CHECK(c_went);
    if (after > CAP)
        FAILF("%llu bytes stay once nothing is held, over the cap of %d",
              (unsigned long long)after, CAP);
    CHECK_INT(st.held, 0);
    CHECK_INT(st.evictions, 2); /* B's layer, C's */
}

/* A blob larger than the whole cap: the pull completes, the blob is there
 * while the image lives, and goes once it is freed. */
TEST(a_blob_larger_than_the_cap_still_pulls)
{
    image a;
    image *all[] = {&a, NULL};
    CHECK(image_start(&a, (size_t[]){A_BYTES, 0}, NULL) == 0);
    char cache[400];
    cache_dir(cache, sizeof(cache), "larger");
    funcd_oci_client *c = client_on(cache, 10000, all);
    CHECK(c);
    result r;
    pull_on(loop, c, a.ref, NULL, &r);
    int there = r.img && access(r.img->layer_paths[0], R_OK) == 0;
    funcd_oci_image_free(r.img);
    int gone = !has_layer(cache, A_BYTES);
    uint64_t after = blob_bytes(cache);
    funcd_oci_client_free(c);
    fake_registry_stop(&a.reg);
    CHECK_INT(r.rc, 0);
    CHECK(there);
    CHECK(gone);
    CHECK(after <= 10000);
}

static char logged[1024];

static void log_to(funcd_log_level level, const char *message, void *payload)
{
    if (level == FUNCD_LOG_INFO)
        snprintf(logged, sizeof(logged), "%s", message);
}

/*
 * A cache filled without a cap, opened again with one (a restart with a
 * smaller --image-blob-cache-bytes): it shrinks as it opens, least recently
 * used first by the use times kept in the files. C was pulled last, but A
 * used after it: A and C stay, B goes.
 */
TEST(a_smaller_cap_at_start_shrinks_the_cache)
{
    image a, b, c3;
    image *all[] = {&a, &b, &c3, NULL};
    CHECK(image_start(&a, (size_t[]){A_BYTES, 0}, NULL) == 0);
    CHECK(image_start(&b, (size_t[]){B_BYTES, 0}, NULL) == 0);
    CHECK(image_start(&c3, (size_t[]){C_BYTES, 0}, NULL) == 0);
    char cache[400], msg[512], blobs[500];
    cache_dir(cache, sizeof(cache), "restart");
    snprintf(blobs, sizeof(blobs), "%s/blobs/sha256", cache);
    funcd_oci_client *c = client_on(cache, 0, all);
    CHECK(c);
    int rc = pull_and_free(c, a.ref, msg, sizeof(msg));
    rc = rc ? rc : pull_and_free(c, b.ref, msg, sizeof(msg));
    rc = rc ? rc : pull_and_free(c, c3.ref, msg, sizeof(msg));
    rc = rc ? rc : pull_and_free(c, a.ref, msg, sizeof(msg)); /* a cache hit: A used last */
    funcd_oci_client_free(c);
    uint64_t before = blob_bytes(cache);

    funcd_oci_blob_cache *bc = NULL;
    funcd_logger lg = {.fn = log_to, .min = FUNCD_LOG_INFO};
    logged[0] = '\0';
    CHECK_INT(funcd_oci_blob_cache_open(&bc, blobs, CAP + 10000, &lg), 0);
    funcd_oci_blob_cache_stats st;
    funcd_oci_blob_cache_stats_get(bc, &st);
    funcd_oci_blob_cache_unref(bc);
    uint64_t after = blob_bytes(cache);
    for (int i = 0; all[i]; i++)
        fake_registry_stop(&all[i]->reg);
    CHECK_INT(rc, 0);
    CHECK(before > CAP + 10000);
    if (after > CAP + 10000)
        FAILF("%llu bytes after opening with a cap of %d", (unsigned long long)after,
              CAP + 10000);
    CHECK_INT(st.bytes, after);
    CHECK_INT(st.evictions, 1);
    CHECK(has_layer(cache, A_BYTES));
    CHECK(!has_layer(cache, B_BYTES));
    CHECK(has_layer(cache, C_BYTES));
    CHECK_CONTAINS(logged, "evicted 1 blob (");
    char bytes[64];
    snprintf(bytes, sizeof(bytes), "(%llu bytes)", (unsigned long long)st.evicted_bytes);
    CHECK_CONTAINS(logged, bytes);
}

/*
 * A refresh of an image whose blobs were evicted (funcd_oci_pull_if_changed
 * with the digest the caller has): the registry is asked for the manifest
 * and nothing else, and the image says `unchanged`. Given another digest,
 * the same call pulls the image whole, its blobs again.
 */
TEST(a_refresh_of_the_same_digest_fetches_no_blob)
{
    image a;
    image *all[] = {&a, NULL};
    CHECK(image_start(&a, (size_t[]){A_BYTES, 0}, NULL) == 0);
    char cache[400], digest[80] = "";
    cache_dir(cache, sizeof(cache), "refresh");
    funcd_oci_client *c = client_on(cache, 10000, all); /* A's layer goes once freed */
    CHECK(c);
    result r;
    pull_on(loop, c, a.ref, NULL, &r);
    int rc_first = r.rc;
    snprintf(digest, sizeof(digest), "%s", r.img ? r.img->digest : "");
    funcd_oci_image_free(r.img);
    int evicted = !has_layer(cache, A_BYTES);
    int blob_gets = atomic_load(&a.reg.blob_gets);
    int manifest_gets = atomic_load(&a.reg.manifest_gets);

    pull_if_changed_on(loop, c, a.ref, digest, NULL, &r);
    int rc_same = r.rc, unchanged = r.img && r.img->unchanged;
    int same_digest = r.img && strcmp(r.img->digest, digest) == 0;
    size_t layers = r.img ? r.img->n_layers : 0;
    funcd_oci_image_free(r.img);
    int blob_gets_same = atomic_load(&a.reg.blob_gets);
    int manifest_gets_same = atomic_load(&a.reg.manifest_gets);

    pull_if_changed_on(loop, c, a.ref,
                       "sha256:0000000000000000000000000000000000000000000000000000000000000000",
                       NULL, &r);
    int rc_other = r.rc, whole = r.img && !r.img->unchanged && r.img->n_layers == 1 &&
                                 access(r.img->layer_paths[0], R_OK) == 0;
    funcd_oci_image_free(r.img);
    int blob_gets_other = atomic_load(&a.reg.blob_gets);
    funcd_oci_client_free(c);
    fake_registry_stop(&a.reg);
    CHECK_INT(rc_first, 0);
    CHECK(evicted);
    CHECK_INT(rc_same, 0);
    CHECK(unchanged);
    CHECK(same_digest);
    CHECK_INT(layers, 1);
    CHECK_INT(manifest_gets_same, manifest_gets + 1);
    if (blob_gets_same != blob_gets)
        FAILF("a refresh of the same digest fetched %d blobs", blob_gets_same - blob_gets);
    CHECK_INT(rc_other, 0);
    CHECK(whole);
    CHECK_INT(blob_gets_other, blob_gets + 2); /* the config and the layer */
}

/* A blob file of `size` bytes named `hex` in `dir`, last used `age` s ago. */
static int put_blob(const char *dir, const char *hex, size_t size, int age)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", dir, hex);
    FILE *f = fopen(path, "w");
    for (size_t i = 0; f && i < size; i++)
        fputc('x', f);
    if (!f || fclose(f) != 0)
        return -1;
    struct timespec t[2] = {{.tv_sec = time(NULL) - age}, {.tv_sec = time(NULL) - age}};
    return utimensat(AT_FDCWD, path, t, 0);
}

/*
 * A blob that cannot be renamed aside (here: the name it would go to is a
 * directory, EISDIR) is not evicted: it stays on disk, indexed and counted,
 * since deleting it by its name later could take it from a pull that just
 * found it (review18 L-6). The next least recently used goes instead.
 */
TEST(a_blob_that_cannot_be_renamed_aside_stays)
{
    static const char old_hex[] =
        "1111111111111111111111111111111111111111111111111111111111111111";
    static const char new_hex[] =
        "2222222222222222222222222222222222222222222222222222222222222222";
    char dir[400], old_path[500], in_the_way[500];
    cache_dir(dir, sizeof(dir), "stuck");
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(old_path, sizeof(old_path), "%s/%s", dir, old_hex);
    snprintf(in_the_way, sizeof(in_the_way), "%s/.tmp-evicted-1", dir); /* the first victim's */
    CHECK(mkdir(in_the_way, 0755) == 0);
    CHECK(put_blob(dir, old_hex, A_BYTES, 100) == 0); /* the least recently used */
    CHECK(put_blob(dir, new_hex, B_BYTES, 10) == 0);
    struct stat st;
    CHECK(stat(old_path, &st) == 0);
    uint64_t old_bytes = (uint64_t)st.st_blocks * 512 > (uint64_t)st.st_size
                             ? (uint64_t)st.st_blocks * 512
                             : (uint64_t)st.st_size;

    funcd_oci_blob_cache *bc = NULL;
    funcd_logger lg = {.fn = log_to, .min = FUNCD_LOG_INFO};
    logged[0] = '\0';
    CHECK_INT(funcd_oci_blob_cache_open(&bc, dir, A_BYTES + 20000, &lg), 0);
    funcd_oci_blob_cache_stats s;
    funcd_oci_blob_cache_stats_get(bc, &s);
    funcd_oci_blob_cache_unref(bc);
    char new_path[500];
    snprintf(new_path, sizeof(new_path), "%s/%s", dir, new_hex);
    CHECK(access(old_path, R_OK) == 0);
    CHECK(access(new_path, F_OK) != 0);
    CHECK_INT(s.blobs, 1);
    CHECK_INT(s.bytes, old_bytes);
    CHECK_INT(s.evictions, 1);
    CHECK_CONTAINS(logged, "evicted 1 blob (");
}

int main(void)
{
    loop = event_base_new();
    snprintf(work, sizeof(work), "/tmp/funcd-oci-blob-cache-XXXXXX");
    if (!loop || !mkdtemp(work))
        return 1;
    RUN(the_cap_bounds_what_stays);
    RUN(an_evicted_image_is_fetched_again);
    RUN(pulls_in_progress_keep_their_blobs);
    RUN(a_blob_larger_than_the_cap_still_pulls);
    RUN(a_smaller_cap_at_start_shrinks_the_cache);
    RUN(a_refresh_of_the_same_digest_fetches_no_blob);
    RUN(a_blob_that_cannot_be_renamed_aside_stays);
    event_base_free(loop);
    funcd_remove_tree(work);
    return HARNESS_END();
}
