/* lib/oci/rootfs_cache.c: one extraction per digest, LRU eviction under a cap that
 * spares rootfs in use, and reuse of a previous run's directory. */
#include <limits.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "layers.h"

#include "artifact/bundle.h"
#include "funcd/funcd.h"

#define OUT_LEN 512

static char scratch[64];
static int seq;

/* A cache directory path (not created) and layer files under scratch. */
typedef struct fixture {
    char dir[256];
    char layer[256];
    const char *paths[1], *types[1];
} fixture;

static int fixture_init(fixture *f, size_t file_size)
{
    int n = ++seq;
    snprintf(f->dir, sizeof(f->dir), "%s/cache-%d", scratch, n);
    snprintf(f->layer, sizeof(f->layer), "%s/layer-%d.tar.gz", scratch, n);
    f->paths[0] = f->layer;
    f->types[0] = FUNCD_OCI_MT_LAYER_GZIP;
    return write_layer(f->layer, 1,
                       (layer_entry[]){{L_FILE, "bin/app", "#!/bin/sh\n", 0755},
                                       {L_FILE, "data/blob", NULL, 0, file_size},
                                       {L_END}});
}

static const char *digest(char letter, char *out)
{
    char hex[65];
    memset(hex, letter, 64);
    hex[64] = '\0';
    snprintf(out, 72, "sha256:%s", hex);
    return out;
}

static int get(funcd_rootfs_cache *c, const fixture *f, char letter, char *out)
{
    char d[72], err[1024] = "";
    int rc = funcd_rootfs_cache_get(c, digest(letter, d), f->paths, f->types, 1, out, OUT_LEN,
                                    err, sizeof(err));
    if (rc)
        fprintf(stderr, "  get %c: %s\n", letter, err);
    return rc;
}

static void put(funcd_rootfs_cache *c, char letter)
{
    char d[72];
    funcd_rootfs_cache_put(c, digest(letter, d));
}

static funcd_rootfs_cache_stats stats(funcd_rootfs_cache *c)
{
    funcd_rootfs_cache_stats s;
    funcd_rootfs_cache_stats_get(c, &s);
    return s;
}

static int touch(const char *dir, const char *name)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    return f && fclose(f) == 0 ? 0 : -1;
}

TEST(get_twice_extracts_once)
{
    fixture f;
    char a[OUT_LEN], b[OUT_LEN], p[PATH_MAX];
    CHECK_INT(fixture_init(&f, 1000), 0);
    funcd_rootfs_cache *c;
    CHECK_INT(funcd_rootfs_cache_new(&c, f.dir, 0), 0);
    CHECK_INT(get(c, &f, 'a', a), 0);
    CHECK_CONTAINS(a, "/sha256-aaaa");
    CHECK_INT(touch(a, "marker"), 0); /* a second extraction would not have it */
    CHECK_INT(get(c, &f, 'a', b), 0);
    CHECK_STR(a, b);
    snprintf(p, sizeof(p), "%s/marker", b);
    CHECK(path_exists(p));
    snprintf(p, sizeof(p), "%s/bin/app", b);
    CHECK(path_exists(p));
    funcd_rootfs_cache_stats s = stats(c);
    CHECK_INT(s.extractions, 1);
    CHECK_INT(s.entries, 1);
    CHECK_INT(s.in_use, 1);
    CHECK(s.bytes >= 1000);
    put(c, 'a');
    put(c, 'a');
    CHECK_INT(stats(c).in_use, 0);
    funcd_rootfs_cache_free(c);
}

typedef struct racer {
    funcd_rootfs_cache *c;
    const fixture *f;
    char out[OUT_LEN];
    int rc;
} racer;

static void *race(void *arg)
{
    racer *r = arg;
    r->rc = get(r->c, r->f, 'b', r->out);
    return NULL;
}

TEST(concurrent_gets_share_one_extraction)
{
    fixture f;
    CHECK_INT(fixture_init(&f, 256 << 10), 0);
    funcd_rootfs_cache *c;
    CHECK_INT(funcd_rootfs_cache_new(&c, f.dir, 0), 0);
    racer r[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (racer){.c = c, .f = &f};
        CHECK_INT(pthread_create(&th[i], NULL, race, &r[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        CHECK_INT(r[i].rc, 0);
        CHECK_STR(r[i].out, r[0].out);
        put(c, 'b');
    }
    funcd_rootfs_cache_stats s = stats(c);
    CHECK_INT(s.extractions, 1);
    CHECK_INT(s.in_use, 0);
    CHECK_INT(count_entries(f.dir), 1); /* no .tmp- left */
    funcd_rootfs_cache_free(c);
}

TEST(lru_eviction_spares_rootfs_in_use)
{
    fixture f;
    char a[OUT_LEN], b[OUT_LEN], x[OUT_LEN];
    CHECK_INT(fixture_init(&f, 128 << 10), 0);
    /* One rootfs' size, to set a cap that holds two of them but not three. */
    funcd_rootfs_cache *probe;
    CHECK_INT(funcd_rootfs_cache_new(&probe, f.dir, 0), 0);
    CHECK_INT(get(probe, &f, 'p', x), 0);
    uint64_t one = stats(probe).bytes;
    put(probe, 'p');
    funcd_rootfs_cache_free(probe);
    CHECK_INT(funcd_bundle_remove_tree(f.dir), 0);

    funcd_rootfs_cache *c;
    CHECK_INT(funcd_rootfs_cache_new(&c, f.dir, one * 2 + one / 2), 0);
    CHECK_INT(get(c, &f, 'a', a), 0); /* held throughout: oldest, but in use */
    CHECK_INT(get(c, &f, 'b', b), 0);
    put(c, 'b');
    CHECK_INT(get(c, &f, 'c', x), 0);
    put(c, 'c');
    funcd_rootfs_cache_stats s = stats(c);
    CHECK_INT(s.evictions, 1);
    CHECK_INT(s.entries, 2);
    CHECK(s.bytes <= one * 2 + one / 2);
    CHECK(path_exists(a));
    CHECK(!path_exists(b));
    CHECK(path_exists(x));

    put(c, 'a'); /* now the most recently used: 'c' goes next */
    CHECK_INT(get(c, &f, 'd', x), 0);
    put(c, 'd');
    CHECK(path_exists(a));
    CHECK_INT(stats(c).evictions, 2);
    CHECK_INT(count_entries(f.dir), 2);
    funcd_rootfs_cache_free(c);
}

TEST(restart_reuses_what_is_on_disk)
{
    fixture f;
    char a[OUT_LEN], p[PATH_MAX];
    CHECK_INT(fixture_init(&f, 4096), 0);
    funcd_rootfs_cache *c;
    CHECK_INT(funcd_rootfs_cache_new(&c, f.dir, 0), 0);
    CHECK_INT(get(c, &f, 'a', a), 0);
    put(c, 'a');
    funcd_rootfs_cache_free(c);
    CHECK_INT(touch(a, "marker"), 0);
    /* What a crash mid-extraction leaves, and a file that is not the cache's. */
    snprintf(p, sizeof(p), "%s/sha256-%064d.tmp-Ab12Cd", f.dir, 7);
    CHECK_INT(mkdir(p, 0755), 0);
    CHECK_INT(touch(p, "half"), 0);
    CHECK_INT(touch(f.dir, "README"), 0);

    CHECK_INT(funcd_rootfs_cache_new(&c, f.dir, 0), 0);
    funcd_rootfs_cache_stats s = stats(c);
    CHECK_INT(s.entries, 1);
    CHECK(s.bytes >= 4096);
    CHECK(!path_exists(p));
    CHECK_INT(get(c, &f, 'a', a), 0);
    CHECK_INT(stats(c).extractions, 0);
    snprintf(p, sizeof(p), "%s/marker", a);
    CHECK(path_exists(p));
    snprintf(p, sizeof(p), "%s/README", f.dir);
    CHECK(path_exists(p));
    put(c, 'a');
    funcd_rootfs_cache_free(c);
}

TEST(failures_leave_no_entry)
{
    fixture f;
    char out[OUT_LEN], err[512];
    CHECK_INT(fixture_init(&f, 10), 0);
    funcd_rootfs_cache *c;
    CHECK_INT(funcd_rootfs_cache_new(&c, f.dir, 0), 0);
    CHECK_INT(funcd_rootfs_cache_get(c, "sha256:../../etc", f.paths, f.types, 1, out,
                                     sizeof(out), err, sizeof(err)),
              FUNCD_EINVAL);
    CHECK_CONTAINS(err, "not a manifest digest");

    const char *missing[1] = {"/nonexistent/layer.tar.gz"};
    char d[72];
    CHECK_INT(funcd_rootfs_cache_get(c, digest('e', d), missing, f.types, 1, out, sizeof(out),
                                     err, sizeof(err)),
              FUNCD_ENOTFOUND);
    CHECK_CONTAINS(err, "layer 1 of 1: cannot open /nonexistent/layer.tar.gz");
    CHECK_INT(stats(c).entries, 0);
    CHECK_INT(count_entries(f.dir), 0);
    CHECK_INT(get(c, &f, 'e', out), 0); /* the same digest works once the layer does */
    put(c, 'e');
    funcd_rootfs_cache_free(c);
}

int main(void)
{
    snprintf(scratch, sizeof(scratch), "/tmp/funcd-rootfs-cache-XXXXXX");
    if (!mkdtemp(scratch)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(get_twice_extracts_once);
    RUN(concurrent_gets_share_one_extraction);
    RUN(lru_eviction_spares_rootfs_in_use);
    RUN(restart_reuses_what_is_on_disk);
    RUN(failures_leave_no_entry);
    funcd_bundle_remove_tree(scratch);
    return HARNESS_END();
}
