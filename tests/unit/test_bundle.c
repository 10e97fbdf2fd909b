/* lib/artifact: bundle digests, validation, safe extraction and the per-digest cache.
 * Archives are built in memory with libarchive's writer; everything on disk lives
 * under one mkdtemp() directory removed at the end. */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#include "artifact/bundle.h"
#include "funcd/sys/blob.h"
#include "util/buf.h"

static char scratch[128];
static int scratch_seq;

/* A fresh path under the scratch directory (not created). */
static const char *fresh_path(char *out, size_t len, const char *what)
{
    snprintf(out, len, "%s/%s-%d", scratch, what, ++scratch_seq);
    return out;
}

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

static int count_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    closedir(d);
    return n;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    funcd_buf b = FUNCD_BUF_INIT;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        funcd_buf_append(&b, chunk, n);
    fclose(f);
    return funcd_buf_detach(&b, NULL);
}

/* ---- building archives --------------------------------------------------------------- */

typedef struct tarb {
    struct archive *a;
    funcd_buf out;
} tarb;

static la_ssize_t tb_write(struct archive *a, void *payload, const void *buf, size_t n)
{
    return funcd_buf_append(payload, buf, n) < 0 ? -1 : (la_ssize_t)n;
}

enum { TB_TGZ, TB_TAR, TB_ZIP };

static void tb_open(tarb *t, int kind)
{
    memset(t, 0, sizeof(*t));
    t->a = archive_write_new();
    if (kind == TB_ZIP) {
        archive_write_set_format_zip(t->a);
    } else {
        if (kind == TB_TGZ)
            archive_write_add_filter_gzip(t->a);
        archive_write_set_format_pax_restricted(t->a);
    }
    archive_write_set_bytes_in_last_block(t->a, 1);
    if (archive_write_open(t->a, &t->out, NULL, tb_write, NULL) != ARCHIVE_OK) {
        fprintf(stderr, "archive_write_open: %s\n", archive_error_string(t->a));
        abort();
    }
}

static void tb_entry(tarb *t, const char *path, mode_t type, mode_t perm, int64_t size,
                     const char *symlink, const char *hardlink)
{
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, path);
    if (hardlink) {
        archive_entry_set_hardlink(e, hardlink);
    } else {
        archive_entry_set_filetype(e, type);
        archive_entry_set_perm(e, perm);
        archive_entry_set_size(e, size);
    }
    if (symlink)
        archive_entry_set_symlink(e, symlink);
    if (type == AE_IFCHR || type == AE_IFBLK)
        archive_entry_set_rdev(e, makedev(1, 3));
    archive_entry_set_mtime(e, 1700000000, 0);
    if (archive_write_header(t->a, e) < ARCHIVE_WARN) {
        fprintf(stderr, "archive_write_header(%s): %s\n", path, archive_error_string(t->a));
        abort();
    }
    archive_entry_free(e);
}

static void tb_file(tarb *t, const char *path, mode_t perm, const char *content)
{
    size_t n = strlen(content);
    tb_entry(t, path, AE_IFREG, perm, (int64_t)n, NULL, NULL);
    archive_write_data(t->a, content, n);
}

static void tb_data(tarb *t, const char *path, const void *data, size_t n)
{
    tb_entry(t, path, AE_IFREG, 0644, (int64_t)n, NULL, NULL);
    archive_write_data(t->a, data, n);
}

/* `size` zero bytes, written in chunks so a gzip bomb never sits in memory uncompressed. */
static void tb_zeros(tarb *t, const char *path, size_t size)
{
    static const char zeros[1 << 16];
    tb_entry(t, path, AE_IFREG, 0644, (int64_t)size, NULL, NULL);
    for (size_t done = 0; done < size;) {
        size_t n = size - done < sizeof(zeros) ? size - done : sizeof(zeros);
        archive_write_data(t->a, zeros, n);
        done += n;
    }
}

static void tb_dir(tarb *t, const char *path, mode_t perm)
{
    tb_entry(t, path, AE_IFDIR, perm, 0, NULL, NULL);
}

static void tb_symlink(tarb *t, const char *path, const char *target)
{
    tb_entry(t, path, AE_IFLNK, 0777, 0, target, NULL);
}

static void tb_hardlink(tarb *t, const char *path, const char *target)
{
    tb_entry(t, path, AE_IFREG, 0644, 0, NULL, target);
}

static char *tb_finish(tarb *t, size_t *len)
{
    archive_write_close(t->a);
    archive_write_free(t->a);
    return funcd_buf_detach(&t->out, len);
}

/* ---- digests ------------------------------------------------------------------------- */

TEST(digest_known_values)
{
    char d[FUNCD_BUNDLE_DIGEST_LEN];
    CHECK_INT(funcd_bundle_digest("abc", 3, d), 0);
    CHECK_STR(d, "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK_INT(funcd_bundle_digest(NULL, 0, d), 0);
    CHECK_STR(d, "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(funcd_bundle_digest_valid(d));
    CHECK(!funcd_bundle_digest_valid(
        "sha256:E3B0C44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    CHECK(!funcd_bundle_digest_valid("sha256:e3b0"));
    CHECK(!funcd_bundle_digest_valid(
        "sha512:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    CHECK(!funcd_bundle_digest_valid(NULL));
}

/* ---- a good bundle ----------------------------------------------------------------------- */

static char *good_bundle(size_t *len)
{
    tarb t;
    tb_open(&t, TB_TGZ);
    tb_dir(&t, "./", 0755);
    tb_dir(&t, "./bin/", 0700);
    tb_file(&t, "./bin/run", 0755, "#!/bin/sh\necho hi\n");
    tb_file(&t, "lib/a/b/c/data.txt", 0600, "data\n"); /* parents implied */
    tb_file(&t, "lib/a/b/c/data.txt.bak", 0640, "old\n");
    tb_file(&t, "setuid", 04755 | 02000 | 01000, "x");
    tb_dir(&t, "lib/a", 0555); /* again, explicitly: fine */
    tb_symlink(&t, "lib/current", "a/b/c/data.txt");
    tb_symlink(&t, "bin/lib", "../lib/a");
    tb_symlink(&t, "lib/a/b/c/top", "../../../..");
    tb_hardlink(&t, "copy.txt", "lib/a/b/c/data.txt");
    tb_file(&t, "h\xc3\xa9llo.txt", 0644, "utf-8\n");
    tb_file(&t, "empty", 0644, "");
    return tb_finish(&t, len);
}

static int mode_of(const char *dir, const char *rel)
{
    char p[PATH_MAX];
    struct stat st;
    snprintf(p, sizeof(p), "%s/%s", dir, rel);
    return lstat(p, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
}

static void check_good_tree(const char *dir)
{
    char p[PATH_MAX], q[PATH_MAX], link[PATH_MAX];
    struct stat a, b;
    CHECK_INT(mode_of(dir, "bin"), 0755);
    CHECK_INT(mode_of(dir, "bin/run"), 0755);
    CHECK_INT(mode_of(dir, "lib/a"), 0755);
    CHECK_INT(mode_of(dir, "lib/a/b/c"), 0755);
    CHECK_INT(mode_of(dir, "lib/a/b/c/data.txt"), 0644);
    CHECK_INT(mode_of(dir, "lib/a/b/c/data.txt.bak"), 0644);
    CHECK_INT(mode_of(dir, "setuid"), 0755);
    CHECK_INT(mode_of(dir, "empty"), 0644);

    snprintf(p, sizeof(p), "%s/bin/run", dir);
    char *run = slurp(p);
    CHECK_STR(run, "#!/bin/sh\necho hi\n");
    free(run);
    snprintf(p, sizeof(p), "%s/h\xc3\xa9llo.txt", dir);
    CHECK(exists(p));

    snprintf(p, sizeof(p), "%s/lib/current", dir);
    ssize_t n = readlink(p, link, sizeof(link) - 1);
    CHECK(n > 0);
    link[n] = '\0';
    CHECK_STR(link, "a/b/c/data.txt");
    char *via_link = slurp(p);
    CHECK_STR(via_link, "data\n");
    free(via_link);
    snprintf(p, sizeof(p), "%s/bin/lib/b/c/data.txt", dir);
    CHECK(exists(p));

    snprintf(p, sizeof(p), "%s/copy.txt", dir);
    snprintf(q, sizeof(q), "%s/lib/a/b/c/data.txt", dir);
    CHECK(stat(p, &a) == 0 && stat(q, &b) == 0);
    CHECK(a.st_ino == b.st_ino);
}

TEST(good_bundle_checks_and_extracts)
{
    size_t len;
    char *tgz = good_bundle(&len);
    char err[512] = "", dest[PATH_MAX];
    CHECK_INT(funcd_bundle_check(tgz, len, NULL, err, sizeof(err)), 0);
    fresh_path(dest, sizeof(dest), "good");
    mode_t old_mask = umask(077); /* modes are set, not left to the umask */
    int rc = funcd_bundle_extract(tgz, len, dest, NULL, err, sizeof(err));
    umask(old_mask);
    free(tgz);
    if (rc)
        FAILF("extract: %s", err);
    CHECK_INT(mode_of(dest, "."), 0755);
    check_good_tree(dest);
}

TEST(extract_refuses_an_existing_directory)
{
    size_t len;
    char *tgz = good_bundle(&len);
    char err[512] = "";
    int rc = funcd_bundle_extract(tgz, len, scratch, NULL, err, sizeof(err));
    free(tgz);
    CHECK_INT(rc, FUNCD_EEXISTS);
    CHECK(exists(scratch));
}

/* ---- unsafe entries ------------------------------------------------------------------------- */

typedef void (*build_fn)(tarb *t);
typedef struct bad_case {
    const char *name;
    build_fn build;
    const char *message;
} bad_case;

static void b_absolute(tarb *t) { tb_file(t, "/etc/passwd", 0644, "root"); }
static void b_dotdot(tarb *t) { tb_file(t, "../etc/passwd", 0644, "root"); }
static void b_dotdot_deep(tarb *t) { tb_file(t, "a/../../x", 0644, "x"); }
static void b_dotdot_inside(tarb *t) { tb_file(t, "a/../x", 0644, "x"); }
static void b_symlink_abs(tarb *t) { tb_symlink(t, "etc", "/etc"); }
static void b_symlink_up(tarb *t) { tb_symlink(t, "a/etc", "../../etc"); }
static void b_symlink_mid(tarb *t) { tb_symlink(t, "l", "a/../.."); }
static void b_symlink_chain(tarb *t)
{
    /* a/b/up points at the root, legally; "a/b/up/.." would be the root's parent. */
    tb_symlink(t, "a/b/up", "../..");
    tb_symlink(t, "escape", "a/b/up/..");
}
static void b_symlink_empty(tarb *t) { tb_symlink(t, "l", ""); }
static void b_through_symlink(tarb *t)
{
    tb_dir(t, "real", 0755);
    tb_symlink(t, "l", "real");
    tb_file(t, "l/x", 0644, "x");
}
static void b_under_file(tarb *t)
{
    tb_file(t, "f", 0644, "f");
    tb_file(t, "f/x", 0644, "x");
}
static void b_duplicate(tarb *t)
{
    tb_file(t, "f", 0644, "one");
    tb_file(t, "./f", 0644, "two");
}
static void b_dir_over_file(tarb *t)
{
    tb_file(t, "f", 0644, "one");
    tb_dir(t, "f", 0755);
}
static void b_hardlink_missing(tarb *t) { tb_hardlink(t, "h", "nothing"); }
static void b_hardlink_escape(tarb *t) { tb_hardlink(t, "h", "../outside"); }
static void b_hardlink_abs(tarb *t) { tb_hardlink(t, "h", "/etc/passwd"); }
static void b_hardlink_dir(tarb *t)
{
    tb_dir(t, "d", 0755);
    tb_hardlink(t, "h", "d");
}
static void b_hardlink_symlink(tarb *t)
{
    tb_symlink(t, "s", "good.txt");
    tb_hardlink(t, "h", "s");
}
static void b_chardev(tarb *t) { tb_entry(t, "null", AE_IFCHR, 0666, 0, NULL, NULL); }
static void b_blockdev(tarb *t) { tb_entry(t, "sda", AE_IFBLK, 0660, 0, NULL, NULL); }
static void b_fifo(tarb *t) { tb_entry(t, "pipe", AE_IFIFO, 0644, 0, NULL, NULL); }
static void b_reserved(tarb *t) { tb_file(t, "./.complete", 0644, ""); }
static void b_too_long(tarb *t)
{
    char p[1100];
    memset(p, 'a', sizeof(p) - 1);
    p[sizeof(p) - 1] = '\0';
    tb_file(t, p, 0644, "x");
}
static void b_too_deep(tarb *t)
{
    char p[200] = "";
    for (int i = 0; i < 65; i++)
        strcat(p, "d/");
    strcat(p, "f");
    tb_file(t, p, 0644, "x");
}

static const bad_case bad_cases[] = {
    {"absolute", b_absolute, "entry \"/etc/passwd\": path is absolute"},
    {"dotdot", b_dotdot, "entry \"../etc/passwd\": path escapes the bundle"},
    {"dotdot-deep", b_dotdot_deep, "entry \"a/../../x\": path escapes the bundle"},
    {"dotdot-inside", b_dotdot_inside, "entry \"a/../x\": path contains a \"..\" component"},
    {"symlink-absolute", b_symlink_abs, "entry \"etc\": symbolic link to \"/etc\" is absolute"},
    {"symlink-up", b_symlink_up,
     "entry \"a/etc\": symbolic link to \"../../etc\" escapes the bundle"},
    {"symlink-mid", b_symlink_mid, "symbolic link to \"a/../..\" has \"..\" after a name"},
    {"symlink-chain", b_symlink_chain, "entry \"escape\": symbolic link to \"a/b/up/..\" has"},
    {"symlink-empty", b_symlink_empty, "symbolic link to \"\" is empty"},
    {"through-symlink", b_through_symlink,
     "entry \"l/x\": \"l\" is a symbolic link, not a directory"},
    {"under-file", b_under_file, "entry \"f/x\": \"f\" is a file, not a directory"},
    {"duplicate", b_duplicate, "entry \"./f\": duplicate path"},
    {"dir-over-file", b_dir_over_file, "entry \"f/\": duplicate path"},
    {"hardlink-missing", b_hardlink_missing,
     "hard link target \"nothing\" is not an earlier regular file"},
    {"hardlink-escape", b_hardlink_escape,
     "hard link target \"../outside\": path escapes the bundle"},
    {"hardlink-absolute", b_hardlink_abs, "hard link target \"/etc/passwd\": path is absolute"},
    {"hardlink-dir", b_hardlink_dir, "hard link target \"d\" is not an earlier regular file"},
    {"hardlink-symlink", b_hardlink_symlink,
     "hard link target \"s\" is not an earlier regular file"},
    {"chardev", b_chardev, "entry \"null\": character devices are not allowed"},
    {"blockdev", b_blockdev, "entry \"sda\": block devices are not allowed"},
    {"fifo", b_fifo, "entry \"pipe\": FIFOs are not allowed"},
    {"reserved", b_reserved, "is reserved for funcd's cache marker"},
    {"too-long", b_too_long, "path is longer than 1024 bytes"},
    {"too-deep", b_too_deep, "path is more than 64 levels deep"},
};

TEST(unsafe_entries_are_refused)
{
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        const bad_case *c = &bad_cases[i];
        tarb t;
        tb_open(&t, TB_TGZ);
        tb_file(&t, "good.txt", 0644, "written before the bad entry\n");
        c->build(&t);
        tb_file(&t, "after.txt", 0644, "x");
        size_t len;
        char *tgz = tb_finish(&t, &len);
        char err[512] = "", dest[PATH_MAX];
        int rc = funcd_bundle_check(tgz, len, NULL, err, sizeof(err));
        if (rc != FUNCD_EINVAL || !strstr(err, c->message)) {
            free(tgz);
            FAILF("%s: check gave %d \"%s\", expected \"%s\"", c->name, rc, err, c->message);
        }
        CHECK_STR(funcd_error_last()->message, err);
        CHECK_INT(funcd_error_last()->code, FUNCD_EINVAL);

        err[0] = '\0';
        fresh_path(dest, sizeof(dest), c->name);
        rc = funcd_bundle_extract(tgz, len, dest, NULL, err, sizeof(err));
        free(tgz);
        if (rc != FUNCD_EINVAL || !strstr(err, c->message))
            FAILF("%s: extract gave %d \"%s\"", c->name, rc, err);
        if (exists(dest))
            FAILF("%s: the partial %s was left behind", c->name, dest);
    }
    char etc_link[PATH_MAX];
    snprintf(etc_link, sizeof(etc_link), "%s/../outside", scratch);
    CHECK(!exists(etc_link));
}

TEST(root_symlink_may_point_at_the_root)
{
    tarb t;
    tb_open(&t, TB_TGZ);
    tb_symlink(&t, "self", ".");
    tb_symlink(&t, "d/parent", "..");
    tb_symlink(&t, "d/e/f", "../../d/./x");
    size_t len;
    char *tgz = tb_finish(&t, &len);
    char err[512] = "";
    int rc = funcd_bundle_check(tgz, len, NULL, err, sizeof(err));
    free(tgz);
    if (rc)
        FAILF("check: %s", err);
}

/* ---- limits -------------------------------------------------------------------------------- */

static char *files_bundle(int n, size_t *len)
{
    tarb t;
    tb_open(&t, TB_TGZ);
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof(name), "dir/f%03d", i);
        tb_file(&t, name, 0644, name);
    }
    return tb_finish(&t, len);
}

TEST(too_many_entries)
{
    funcd_bundle_limits lim = {.max_entries = 5};
    size_t len;
    char err[512] = "";
    char *tgz = files_bundle(5, &len);
    CHECK_INT(funcd_bundle_check(tgz, len, &lim, err, sizeof(err)), 0);
    free(tgz);
    tgz = files_bundle(6, &len);
    int rc = funcd_bundle_check(tgz, len, &lim, err, sizeof(err));
    free(tgz);
    CHECK_INT(rc, FUNCD_EINVAL);
    CHECK_STR(err, "bundle has more than 5 entries");
}

TEST(compressed_size_limit)
{
    funcd_bundle_limits lim = {.max_compressed = 100};
    size_t len;
    char err[512] = "";
    char *tgz = files_bundle(20, &len);
    int rc = funcd_bundle_check(tgz, len, &lim, err, sizeof(err));
    free(tgz);
    CHECK_INT(rc, FUNCD_EINVAL);
    CHECK_CONTAINS(err, "over the 100 bytes limit");
}

/* 300 MiB of zeros: about 300 KiB compressed, refused at the default 256 MiB. */
TEST(gzip_bomb_default_limits)
{
    tarb t;
    tb_open(&t, TB_TGZ);
    tb_file(&t, "readme", 0644, "hi");
    tb_zeros(&t, "zeros", (size_t)300 << 20);
    size_t len;
    char *tgz = tb_finish(&t, &len);
    CHECK(len < (2u << 20));
    char err[512] = "", dest[PATH_MAX];
    int rc = funcd_bundle_check(tgz, len, NULL, err, sizeof(err));
    if (rc != FUNCD_EINVAL) {
        free(tgz);
        FAILF("check gave %d: %s", rc, err);
    }
    CHECK_STR(err, "bundle is larger than the 256 MiB uncompressed limit (at entry \"zeros\")");
    fresh_path(dest, sizeof(dest), "bomb");
    rc = funcd_bundle_extract(tgz, len, dest, NULL, err, sizeof(err));
    free(tgz);
    CHECK_INT(rc, FUNCD_EINVAL);
    CHECK(!exists(dest));
}

/* Several files, each within the limit, add up past it; the total counts as it is read. */
TEST(uncompressed_total_limit)
{
    funcd_bundle_limits lim = {.max_total = 1 << 20};
    tarb t;
    tb_open(&t, TB_TGZ);
    tb_zeros(&t, "a", 600 << 10);
    tb_zeros(&t, "b", 400 << 10);
    size_t len;
    char *tgz = tb_finish(&t, &len);
    char err[512] = "";
    CHECK_INT(funcd_bundle_check(tgz, len, &lim, err, sizeof(err)), 0);
    free(tgz);

    tb_open(&t, TB_TGZ);
    tb_zeros(&t, "a", 600 << 10);
    tb_zeros(&t, "b", 600 << 10);
    tgz = tb_finish(&t, &len);
    int rc = funcd_bundle_check(tgz, len, &lim, err, sizeof(err));
    free(tgz);
    CHECK_INT(rc, FUNCD_EINVAL);
    CHECK_STR(err, "bundle is larger than the 1 MiB uncompressed limit (at entry \"b\")");
}

/* ---- not a gzip-compressed tar -------------------------------------------------------------- */

static void check_not_tgz(const char *what, const void *data, size_t len)
{
    char err[512] = "";
    int rc = funcd_bundle_check(data, len, NULL, err, sizeof(err));
    if (rc != FUNCD_EINVAL || strncmp(err, "bundle is not a gzip-compressed tar archive", 43) != 0)
        FAILF("%s: check gave %d \"%s\"", what, rc, err);
}

TEST(not_gzip_tar)
{
    size_t len;
    tarb t;
    tb_open(&t, TB_TAR);
    tb_file(&t, "plain.txt", 0644, "plain tar\n");
    char *tar = tb_finish(&t, &len);
    check_not_tgz("plain tar", tar, len);
    free(tar);

    tb_open(&t, TB_ZIP);
    tb_file(&t, "zipped.txt", 0644, "zip\n");
    char *zip = tb_finish(&t, &len);
    check_not_tgz("zip", zip, len);
    free(zip);

    unsigned char random[4096];
    unsigned x = 12345;
    for (size_t i = 0; i < sizeof(random); i++) {
        x = x * 1103515245u + 12345u;
        random[i] = (unsigned char)(x >> 16);
    }
    check_not_tgz("random bytes", random, sizeof(random));
    check_not_tgz("empty", "", 0);
    check_not_tgz("NULL", NULL, 0);

    /* gzip, but of text rather than a tar archive */
    struct archive *a = archive_write_new();
    funcd_buf out = FUNCD_BUF_INIT;
    archive_write_add_filter_gzip(a);
    archive_write_set_format_raw(a);
    archive_write_open(a, &out, NULL, tb_write, NULL);
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_filetype(e, AE_IFREG);
    archive_write_header(a, e);
    archive_write_data(a, "just some text, not a tar archive\n", 34);
    archive_entry_free(e);
    archive_write_close(a);
    archive_write_free(a);
    check_not_tgz("gzip of text", out.data, out.len);
    funcd_buf_free(&out);
}

TEST(empty_archive)
{
    tarb t;
    tb_open(&t, TB_TGZ);
    size_t len;
    char *tgz = tb_finish(&t, &len);
    char err[512] = "";
    int rc = funcd_bundle_check(tgz, len, NULL, err, sizeof(err));
    free(tgz);
    CHECK_INT(rc, FUNCD_EINVAL);
    CHECK_CONTAINS(err, "bundle is");
}

TEST(truncated_gzip)
{
    unsigned char noise[256 << 10];
    unsigned x = 99;
    for (size_t i = 0; i < sizeof(noise); i++) {
        x = x * 1103515245u + 12345u;
        noise[i] = (unsigned char)(x >> 16);
    }
    tarb t;
    tb_open(&t, TB_TGZ);
    tb_file(&t, "first.txt", 0644, "first\n");
    tb_data(&t, "noise.bin", noise, sizeof(noise));
    size_t len;
    char *tgz = tb_finish(&t, &len);
    char err[512] = "", dest[PATH_MAX];
    CHECK_INT(funcd_bundle_check(tgz, len, NULL, err, sizeof(err)), 0);

    size_t cut = len / 2;
    int rc = funcd_bundle_check(tgz, cut, NULL, err, sizeof(err));
    if (rc != FUNCD_EINVAL) {
        free(tgz);
        FAILF("check gave %d", rc);
    }
    CHECK_CONTAINS(err, "bundle is truncated or corrupt at entry \"noise.bin\"");
    fresh_path(dest, sizeof(dest), "truncated");
    rc = funcd_bundle_extract(tgz, cut, dest, NULL, err, sizeof(err));
    free(tgz);
    CHECK_INT(rc, FUNCD_EINVAL);
    CHECK(!exists(dest));
}

/* ---- the cache ---------------------------------------------------------------------------- */

TEST(materialize_and_cache_hit)
{
    funcd_blob *blob = NULL;
    CHECK_INT(funcd_blob_memory_new(&blob), 0);
    size_t len;
    char *tgz = good_bundle(&len);
    char digest[FUNCD_BUNDLE_DIGEST_LEN], cache[PATH_MAX], out[PATH_MAX], err[512] = "";
    funcd_bundle_digest(tgz, len, digest);
    CHECK_INT(blob->put(blob, digest, tgz, len), 0);
    free(tgz);
    fresh_path(cache, sizeof(cache), "cache/nested");

    int rc = funcd_bundle_materialize(blob, digest, cache, out, sizeof(out), err, sizeof(err));
    if (rc) {
        blob->free(blob);
        FAILF("materialize: %s", err);
    }
    char real[PATH_MAX], want[PATH_MAX * 2];
    CHECK(realpath(cache, real) != NULL);
    snprintf(want, sizeof(want), "%s/%s", real, digest + 7);
    CHECK_STR(out, want);
    check_good_tree(out);
    CHECK_INT(mode_of(out, ".complete"), 0644);
    CHECK_INT(count_dir(cache), 1);

    /* A hit does not read the blob at all. */
    CHECK_INT(blob->del(blob, digest), 0);
    char again[PATH_MAX];
    rc = funcd_bundle_materialize(blob, digest, cache, again, sizeof(again), err, sizeof(err));
    blob->free(blob);
    CHECK_INT(rc, 0);
    CHECK_STR(again, out);

    /* A relative cache root gives an absolute directory. */
    char cwd[PATH_MAX];
    CHECK(getcwd(cwd, sizeof(cwd)) != NULL);
    CHECK_INT(chdir(cache), 0);
    rc = funcd_bundle_materialize(NULL, digest, ".", again, sizeof(again), err, sizeof(err));
    CHECK_INT(chdir(cwd), 0);
    CHECK_INT(rc, 0);
    CHECK_STR(again, out);
}

TEST(materialize_missing_mismatched_and_bad)
{
    funcd_blob *blob = NULL;
    CHECK_INT(funcd_blob_memory_new(&blob), 0);
    char cache[PATH_MAX], out[PATH_MAX] = "", err[512] = "";
    fresh_path(cache, sizeof(cache), "cache");
    const char *absent = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

    int rc = funcd_bundle_materialize(blob, absent, cache, out, sizeof(out), err, sizeof(err));
    CHECK_INT(rc, FUNCD_ENOTFOUND);
    CHECK_CONTAINS(err, "funcdctl deploy");
    CHECK_CONTAINS(err, "/bundles");
    CHECK_INT(funcd_error_last()->code, FUNCD_ENOTFOUND);

    /* Stored under a digest that is not its own. */
    size_t len;
    char *tgz = good_bundle(&len);
    CHECK_INT(blob->put(blob, absent, tgz, len), 0);
    rc = funcd_bundle_materialize(blob, absent, cache, out, sizeof(out), err, sizeof(err));
    CHECK_INT(rc, FUNCD_EINVAL);
    CHECK_CONTAINS(err,
                   "bundle sha256:0000000000000000000000000000000000000000000000000000000000000000 "
                   "does not match its content");
    free(tgz);

    rc = funcd_bundle_materialize(blob, "sha256:abc", cache, out, sizeof(out), err, sizeof(err));
    CHECK_INT(rc, FUNCD_EINVAL);
    CHECK_CONTAINS(err, "is not sha256:<64 lowercase hex digits>");

    /* Under its own digest but unsafe: nothing is left in the cache. */
    tarb t;
    tb_open(&t, TB_TGZ);
    tb_file(&t, "ok", 0644, "ok");
    tb_symlink(&t, "passwd", "/etc/passwd");
    tgz = tb_finish(&t, &len);
    char digest[FUNCD_BUNDLE_DIGEST_LEN];
    funcd_bundle_digest(tgz, len, digest);
    CHECK_INT(blob->put(blob, digest, tgz, len), 0);
    free(tgz);
    rc = funcd_bundle_materialize(blob, digest, cache, out, sizeof(out), err, sizeof(err));
    blob->free(blob);
    CHECK_INT(rc, FUNCD_EINVAL);
    CHECK_CONTAINS(err, "entry \"passwd\": symbolic link to \"/etc/passwd\" is absolute");
    CHECK_INT(count_dir(cache), 0);
}

typedef struct racer {
    funcd_blob *blob;
    const char *digest, *cache;
    pthread_barrier_t *start;
    char out[PATH_MAX], err[512];
    int rc;
} racer;

static void *race(void *arg)
{
    racer *r = arg;
    pthread_barrier_wait(r->start);
    r->rc = funcd_bundle_materialize(r->blob, r->digest, r->cache, r->out, sizeof(r->out), r->err,
                                     sizeof(r->err));
    return NULL;
}

TEST(concurrent_materialize_gives_one_directory)
{
    funcd_blob *blob = NULL;
    CHECK_INT(funcd_blob_memory_new(&blob), 0);
    size_t len;
    char *tgz = files_bundle(300, &len);
    char digest[FUNCD_BUNDLE_DIGEST_LEN], cache[PATH_MAX];
    funcd_bundle_digest(tgz, len, digest);
    CHECK_INT(blob->put(blob, digest, tgz, len), 0);
    free(tgz);
    fresh_path(cache, sizeof(cache), "race");

    enum { N = 4 };
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, N);
    racer r[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        r[i] = (racer){.blob = blob, .digest = digest, .cache = cache, .start = &start};
        pthread_create(&th[i], NULL, race, &r[i]);
    }
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    blob->free(blob);
    for (int i = 0; i < N; i++) {
        if (r[i].rc)
            FAILF("thread %d: %s", i, r[i].err);
        CHECK_STR(r[i].out, r[0].out);
    }
    CHECK_INT(count_dir(cache), 1);    /* no .tmp-* left behind */
    CHECK_INT(count_dir(r[0].out), 2); /* dir/ and .complete */
    char sub[PATH_MAX * 2];
    snprintf(sub, sizeof(sub), "%s/dir", r[0].out);
    CHECK_INT(count_dir(sub), 300);
}

TEST(remove_tree_does_not_follow_links)
{
    char victim[PATH_MAX], tree[PATH_MAX], p[PATH_MAX * 2];
    fresh_path(victim, sizeof(victim), "victim");
    fresh_path(tree, sizeof(tree), "tree");
    CHECK_INT(mkdir(victim, 0755), 0);
    snprintf(p, sizeof(p), "%s/keep", victim);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    fclose(f);
    CHECK_INT(mkdir(tree, 0755), 0);
    snprintf(p, sizeof(p), "%s/link", tree);
    CHECK_INT(symlink(victim, p), 0);
    CHECK_INT(funcd_bundle_remove_tree(tree), 0);
    CHECK(!exists(tree));
    snprintf(p, sizeof(p), "%s/keep", victim);
    CHECK(exists(p));
    CHECK_INT(funcd_bundle_remove_tree(tree), 0); /* absent: fine */
}

int main(void)
{
    snprintf(scratch, sizeof(scratch), "/tmp/funcd-test-bundle-XXXXXX");
    if (!mkdtemp(scratch)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(digest_known_values);
    RUN(good_bundle_checks_and_extracts);
    RUN(extract_refuses_an_existing_directory);
    RUN(unsafe_entries_are_refused);
    RUN(root_symlink_may_point_at_the_root);
    RUN(too_many_entries);
    RUN(compressed_size_limit);
    RUN(gzip_bomb_default_limits);
    RUN(uncompressed_total_limit);
    RUN(not_gzip_tar);
    RUN(empty_archive);
    RUN(truncated_gzip);
    RUN(materialize_and_cache_hit);
    RUN(materialize_missing_mismatched_and_bad);
    RUN(concurrent_materialize_gives_one_directory);
    RUN(remove_tree_does_not_follow_links);
    if (funcd_bundle_remove_tree(scratch) < 0)
        fprintf(stderr, "cleanup: %s\n", funcd_error_last()->message);
    return HARNESS_END();
}
