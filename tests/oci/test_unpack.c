/* lib/oci/unpack.c: layers into a rootfs, whiteouts, and the refusals. Every test
 * writes its layers with libarchive under one mkdtemp() directory and unpacks
 * into <case>/out/rootfs, so "nothing left behind" means <case>/out is empty. */
#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "layers.h"

#include "artifact/bundle.h"
#include "funcd/funcd.h"

static char scratch[64];
static int seq;

typedef struct tcase {
    char dir[256], out[512], rootfs[1024];
    char layer[4][512];
    const char *paths[4], *types[4];
    size_t n;
    char err[1024];
} tcase;

static void case_init(tcase *t)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->dir, sizeof(t->dir), "%s/case-%d", scratch, ++seq);
    snprintf(t->out, sizeof(t->out), "%s/out", t->dir);
    snprintf(t->rootfs, sizeof(t->rootfs), "%s/rootfs", t->out);
    mkdir(t->dir, 0755);
    mkdir(t->out, 0755);
}

/* Appends a layer; gzip-compressed ones use the Docker media type every other time. */
static int add_layer(tcase *t, int gzip, const layer_entry *es)
{
    size_t i = t->n++;
    char name[sizeof(t->layer[0])];
    snprintf(name, sizeof(name), "%s/layer-%zu.tar%s", t->dir, i, gzip ? ".gz" : "");
    memcpy(t->layer[i], name, sizeof(name));
    t->paths[i] = t->layer[i];
    t->types[i] = !gzip ? FUNCD_OCI_MT_LAYER_TAR
                  : i % 2 ? FUNCD_OCI_MT_DOCKER_LAYER
                          : FUNCD_OCI_MT_LAYER_GZIP;
    return write_layer(t->layer[i], gzip, es);
}

static int unpack(tcase *t, const funcd_unpack_limits *lim)
{
    int rc = funcd_oci_unpack(t->paths, t->types, t->n, t->rootfs, lim, t->err, sizeof(t->err));
    if (rc)
        fprintf(stderr, "  unpack: %s\n", t->err);
    return rc;
}

static const char *in_root(const tcase *t, const char *rel, char *out)
{
    snprintf(out, PATH_MAX, "%s/%s", t->rootfs, rel);
    return out;
}

static mode_t mode_of(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 ? st.st_mode : 0;
}

TEST(gzip_and_plain_layers_stack)
{
    tcase t;
    char p[PATH_MAX];
    case_init(&t);
    CHECK_INT(add_layer(&t, 1,
                        (layer_entry[]){{L_DIR, "etc/"},
                                        {L_FILE, "etc/hello", "lower"},
                                        {L_FILE, "./bin/tool", "#!/bin/sh", 04755},
                                        {L_FILE, "bin/gid", "x", 02711},
                                        {L_DIR, "scratch", NULL, 01777},
                                        {L_END}}),
              0);
    CHECK_INT(add_layer(&t, 0, (layer_entry[]){{L_FILE, "etc/hello", "upper"}, {L_END}}), 0);
    CHECK_INT(unpack(&t, NULL), 0);
    CHECK_STR(file_text(in_root(&t, "etc/hello", p)), "upper");
    CHECK_INT(mode_of(in_root(&t, "bin/tool", p)) & 07777, 0755); /* setuid stripped */
    CHECK_INT(mode_of(in_root(&t, "bin/gid", p)) & 07777, 0711);  /* setgid stripped */
    CHECK_INT(mode_of(in_root(&t, "scratch", p)) & 07777, 01777); /* sticky kept */
    CHECK(S_ISDIR(mode_of(in_root(&t, "proc", p))));
    CHECK(S_ISDIR(mode_of(in_root(&t, "dev", p))));
    CHECK_INT(mode_of(in_root(&t, "tmp", p)) & 07777, 01777);
    CHECK(S_ISDIR(mode_of(in_root(&t, "run/funcd", p))));
    CHECK_INT(count_entries(t.out), 1); /* the rootfs alone: no .tmp- left */
}

TEST(whiteouts_remove_lower_files_and_trees)
{
    tcase t;
    char p[PATH_MAX];
    case_init(&t);
    CHECK_INT(add_layer(&t, 1,
                        (layer_entry[]){{L_FILE, "a/gone", "x"},
                                        {L_FILE, "a/stays", "x"},
                                        {L_FILE, "d/x", "x"},
                                        {L_FILE, "d/sub/y", "y"},
                                        {L_END}}),
              0);
    CHECK_INT(add_layer(&t, 1,
                        (layer_entry[]){{L_FILE, "a/.wh.gone", ""},
                                        {L_FILE, ".wh.d", ""},
                                        {L_FILE, ".wh.never-existed", ""},
                                        {L_FILE, "missing/.wh.dir", ""},
                                        {L_END}}),
              0);
    CHECK_INT(unpack(&t, NULL), 0);
    CHECK(!path_exists(in_root(&t, "a/gone", p)));
    CHECK(path_exists(in_root(&t, "a/stays", p)));
    CHECK(!path_exists(in_root(&t, "d", p)));
    CHECK(!path_exists(in_root(&t, "a/.wh.gone", p)));
    CHECK(!path_exists(in_root(&t, ".wh.d", p)));
    CHECK(!path_exists(in_root(&t, "missing", p)));
}

TEST(opaque_directory_keeps_only_its_own_layer)
{
    tcase t;
    char p[PATH_MAX];
    case_init(&t);
    CHECK_INT(add_layer(&t, 1,
                        (layer_entry[]){{L_FILE, "o/old", "x"},
                                        {L_FILE, "o/sub/old2", "x"},
                                        {L_FILE, "o/kept/lower", "x"},
                                        {L_FILE, "w/f", "lower"},
                                        {L_FILE, "other/file", "x"},
                                        {L_END}}),
              0);
    CHECK_INT(add_layer(&t, 0,
                        (layer_entry[]){{L_DIR, "o/"},
                                        {L_FILE, "o/before", "b"},
                                        {L_FILE, "o/kept/upper", "u"},
                                        {L_FILE, "o/.wh..wh..opq", ""},
                                        {L_FILE, "o/after", "a"},
                                        {L_FILE, "w/f", "upper"},
                                        {L_FILE, "w/.wh.f", ""}, /* same layer: stays */
                                        {L_FILE, "o/.wh..wh.plnk", ""},
                                        {L_END}}),
              0);
    CHECK_INT(unpack(&t, NULL), 0);
    CHECK(!path_exists(in_root(&t, "o/old", p)));
    CHECK(!path_exists(in_root(&t, "o/sub", p)));
    CHECK(!path_exists(in_root(&t, "o/kept/lower", p)));
    CHECK_STR(file_text(in_root(&t, "o/kept/upper", p)), "u");
    CHECK_STR(file_text(in_root(&t, "o/before", p)), "b");
    CHECK_STR(file_text(in_root(&t, "o/after", p)), "a");
    CHECK(!path_exists(in_root(&t, "o/.wh..wh..opq", p)));
    CHECK(!path_exists(in_root(&t, "o/.wh..wh.plnk", p)));
    CHECK_STR(file_text(in_root(&t, "w/f", p)), "upper");
    CHECK(path_exists(in_root(&t, "other/file", p)));
}

TEST(symlinks_are_kept_and_resolved_inside_the_rootfs)
{
    tcase t;
    char p[PATH_MAX], target[PATH_MAX];
    case_init(&t);
    CHECK_INT(add_layer(&t, 1,
                        (layer_entry[]){{L_DIR, "usr/lib/"},
                                        {L_SYMLINK, "lib", "usr/lib"},
                                        {L_SYMLINK, "libabs", "/usr/lib"},
                                        {L_SYMLINK, "etc/passwd-link", "/etc/passwd"},
                                        {L_SYMLINK, "esc", "/../../../../.."},
                                        {L_SYMLINK, "dotdot", "../../../../usr"},
                                        {L_END}}),
              0);
    CHECK_INT(add_layer(&t, 0,
                        (layer_entry[]){{L_FILE, "lib/rel", "r"},
                                        {L_FILE, "libabs/abs", "a"},
                                        {L_FILE, "esc/pwned", "p"},
                                        {L_FILE, "dotdot/pwned2", "p"},
                                        {L_END}}),
              0);
    CHECK_INT(unpack(&t, NULL), 0);
    ssize_t n = readlink(in_root(&t, "etc/passwd-link", p), target, sizeof(target) - 1);
    CHECK(n > 0);
    target[n] = '\0';
    CHECK_STR(target, "/etc/passwd");
    CHECK_STR(file_text(in_root(&t, "usr/lib/rel", p)), "r");
    CHECK_STR(file_text(in_root(&t, "usr/lib/abs", p)), "a");
    /* Links that climb out land at the rootfs' own root, as in the sandbox. */
    CHECK_STR(file_text(in_root(&t, "pwned", p)), "p");
    CHECK_STR(file_text(in_root(&t, "usr/pwned2", p)), "p");
    CHECK(S_ISLNK(mode_of(in_root(&t, "esc", p))));
    CHECK_INT(count_entries(t.out), 1);
    CHECK_INT(count_entries(t.dir), 3); /* out and the two layers: nothing written beside */
}

TEST(hardlinks_to_earlier_entries)
{
    tcase t;
    char p[PATH_MAX], q[PATH_MAX];
    case_init(&t);
    CHECK_INT(add_layer(&t, 1,
                        (layer_entry[]){{L_FILE, "h/orig", "same"},
                                        {L_HARDLINK, "h/link", "h/orig"},
                                        {L_END}}),
              0);
    CHECK_INT(add_layer(&t, 0, (layer_entry[]){{L_HARDLINK, "h2/link", "./h/orig"}, {L_END}}), 0);
    CHECK_INT(unpack(&t, NULL), 0);
    struct stat a, b, c;
    CHECK_INT(lstat(in_root(&t, "h/orig", p), &a), 0);
    CHECK_INT(lstat(in_root(&t, "h/link", q), &b), 0);
    CHECK_INT(lstat(in_root(&t, "h2/link", q), &c), 0);
    CHECK(a.st_ino == b.st_ino && a.st_ino == c.st_ino);
    CHECK_STR(file_text(in_root(&t, "h2/link", p)), "same");
}

TEST(types_replace_each_other_across_layers)
{
    tcase t;
    char p[PATH_MAX];
    case_init(&t);
    CHECK_INT(add_layer(&t, 1,
                        (layer_entry[]){{L_FILE, "t/x", "x"},
                                        {L_FILE, "f", "file"},
                                        {L_DIR, "ro", NULL, 0555},
                                        {L_FILE, "ro/inside", "i"},
                                        {L_END}}),
              0);
    CHECK_INT(add_layer(&t, 0,
                        (layer_entry[]){{L_FILE, "t", "now a file"},
                                        {L_DIR, "f/"},
                                        {L_FILE, "f/child", "c"},
                                        {L_FILE, "ro/second", "s"},
                                        {L_END}}),
              0);
    CHECK_INT(unpack(&t, NULL), 0);
    CHECK_STR(file_text(in_root(&t, "t", p)), "now a file");
    CHECK_STR(file_text(in_root(&t, "f/child", p)), "c");
    CHECK_INT(mode_of(in_root(&t, "ro", p)) & 07777, 0555);
    CHECK_STR(file_text(in_root(&t, "ro/second", p)), "s");
}

/* Unpacks one gzip layer that must be refused with EINVAL and `needle`, leaving nothing. */
static int refused(const layer_entry *es, const funcd_unpack_limits *lim, const char *needle,
                   char *why, size_t why_len)
{
    tcase t;
    case_init(&t);
    if (add_layer(&t, 1, (layer_entry[]){{L_FILE, "ok/first", "fine"}, {L_END}}) < 0 ||
        add_layer(&t, 1, es) < 0)
        return snprintf(why, why_len, "cannot write the layers"), -1;
    int rc = unpack(&t, lim);
    if (rc != FUNCD_EINVAL)
        return snprintf(why, why_len, "rc %d (%s)", rc, t.err), -1;
    if (!strstr(t.err, needle) || !strstr(funcd_error_last()->message, needle))
        return snprintf(why, why_len, "message \"%s\" lacks \"%s\"", t.err, needle), -1;
    if (count_entries(t.out) != 0)
        return snprintf(why, why_len, "%s is not empty after: %s", t.out, t.err), -1;
    return 0;
}

#define CHECK_REFUSED(lim, needle, ...)                                                            \
    do {                                                                                           \
        char why_[2048];                                                                           \
        if (refused((layer_entry[]){__VA_ARGS__, {L_END}}, lim, needle, why_, sizeof(why_)) < 0) \
            FAILF("%s", why_);                                                                     \
    } while (0)

TEST(escaping_paths_are_refused)
{
    CHECK_REFUSED(NULL, "entry \"../evil\": path contains a \"..\" component",
                  {L_FILE, "../evil", "x"});
    CHECK_REFUSED(NULL, "layer 2 of 2: entry \"a/../../b\"", {L_FILE, "a/../../b", "x"});
    CHECK_REFUSED(NULL, "entry \"/etc/abs\": path is absolute", {L_FILE, "/etc/abs", "x"});
    CHECK_REFUSED(NULL, "entry \"dl/x\": \"dl\" is a symbolic link to a missing directory",
                  {L_SYMLINK, "dl", "/nowhere"}, {L_FILE, "dl/x", "x"});
    CHECK_REFUSED(NULL, "entry \"ok/first/x\": \"ok/first\" is not a directory",
                  {L_FILE, "ok/first/x", "x"});
}

TEST(escaping_hardlinks_are_refused)
{
    CHECK_REFUSED(NULL, "hard link target \"../../etc/passwd\"",
                  {L_HARDLINK, "h", "../../etc/passwd"});
    CHECK_REFUSED(NULL, "hard link target \"/etc/passwd\": path is absolute",
                  {L_HARDLINK, "h", "/etc/passwd"});
    CHECK_REFUSED(NULL, "is not an earlier entry", {L_HARDLINK, "h", "not/there"});
    CHECK_REFUSED(NULL, "is a directory", {L_HARDLINK, "h", "ok"});
}

TEST(devices_and_fifos_are_refused)
{
    CHECK_REFUSED(NULL, "entry \"dev/null\": character devices are not allowed",
                  {L_DIR, "dev/"}, {L_CHARDEV, "dev/null"});
    CHECK_REFUSED(NULL, "entry \"pipe\": FIFOs are not allowed", {L_FIFO, "pipe"});
}

TEST(size_and_entry_caps_are_enforced)
{
    funcd_unpack_limits small = {.max_bytes = 16 << 10};
    CHECK_REFUSED(&small, "larger than the 16 KiB uncompressed limit (at entry \"big\")",
                  {L_FILE, "big", NULL, 0, 64 << 10});
    funcd_unpack_limits few = {.max_entries = 3};
    CHECK_REFUSED(&few, "more than 3 entries", {L_FILE, "a", "1"}, {L_FILE, "b", "2"},
                  {L_FILE, "c", "3"});
}

TEST(bad_inputs_are_refused_before_writing)
{
    tcase t;
    case_init(&t);
    CHECK_INT(add_layer(&t, 1, (layer_entry[]){{L_FILE, "f", "x"}, {L_END}}), 0);
    t.types[0] = "application/vnd.oci.image.layer.v1.tar+lz4";
    CHECK_INT(unpack(&t, NULL), FUNCD_EINVAL);
    CHECK_CONTAINS(t.err, "layer 1 of 1: media type \"application/vnd.oci.image.layer.v1.tar+lz4\"");
    CHECK_INT(count_entries(t.out), 0);

    t.types[0] = FUNCD_OCI_MT_LAYER_GZIP;
    CHECK_INT(mkdir(t.rootfs, 0755), 0);
    CHECK_INT(unpack(&t, NULL), FUNCD_EEXISTS);
    CHECK_INT(count_entries(t.out), 1);
    CHECK_INT(rmdir(t.rootfs), 0);

    FILE *f = fopen(t.layer[0], "w"); /* not an archive at all */
    CHECK(f != NULL);
    fputs("this is not a tar archive, not even close, and it goes on for a while......", f);
    fclose(f);
    CHECK_INT(unpack(&t, NULL), FUNCD_EINVAL);
    CHECK_CONTAINS(t.err, "not a tar archive");
    CHECK_INT(count_entries(t.out), 0);
}

int main(void)
{
    snprintf(scratch, sizeof(scratch), "/tmp/funcd-unpack-XXXXXX");
    if (!mkdtemp(scratch)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(gzip_and_plain_layers_stack);
    RUN(whiteouts_remove_lower_files_and_trees);
    RUN(opaque_directory_keeps_only_its_own_layer);
    RUN(symlinks_are_kept_and_resolved_inside_the_rootfs);
    RUN(hardlinks_to_earlier_entries);
    RUN(types_replace_each_other_across_layers);
    RUN(escaping_paths_are_refused);
    RUN(escaping_hardlinks_are_refused);
    RUN(devices_and_fifos_are_refused);
    RUN(size_and_entry_caps_are_enforced);
    RUN(bad_inputs_are_refused_before_writing);
    funcd_bundle_remove_tree(scratch);
    return HARNESS_END();
}
