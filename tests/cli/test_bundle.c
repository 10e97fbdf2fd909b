/* The bundle packer of `funcdctl deploy`: builds a tree, packs it, reads the
 * tar.gz back with libarchive and checks what went in and what stayed out. */
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bundle.h"
#include "harness.h"

#define LIMIT (64u * 1024 * 1024)

static char root[256];

static void put_file(const char *rel, const char *text, mode_t mode)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (fd >= 0) {
        ssize_t n = write(fd, text, strlen(text));
        (void)n;
        fchmod(fd, mode); /* whatever the umask */
        close(fd);
    }
}

static void put_dir(const char *rel)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    mkdir(path, 0755);
}

static void put_symlink(const char *target, const char *rel)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    if (symlink(target, path) != 0)
        perror("symlink");
}

static void remove_tree(void)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", root);
}

/* The archive's entries, one "TYPE PERM NAME SIZE[ CONTENT]" line each. */
static int list_archive(const funcd_buf *tgz, funcd_buf *out)
{
    struct archive *a = archive_read_new();
    struct archive_entry *e;
    archive_read_support_filter_gzip(a);
    archive_read_support_format_tar(a);
    int rc = archive_read_open_memory(a, tgz->data, tgz->len) == ARCHIVE_OK ? 0 : -1;
    while (rc == 0 && archive_read_next_header(a, &e) == ARCHIVE_OK) {
        char content[256] = "";
        la_ssize_t n = archive_read_data(a, content, sizeof(content) - 1);
        content[n > 0 ? n : 0] = '\0';
        funcd_buf_printf(out, "%c %o %s %lld%s%s uid=%lld\n",
                         archive_entry_filetype(e) == AE_IFDIR ? 'd' : 'f',
                         (unsigned)archive_entry_perm(e), archive_entry_pathname(e),
                         (long long)archive_entry_size(e), n > 0 ? " " : "", content,
                         (long long)archive_entry_uid(e));
    }
    archive_read_free(a);
    return rc;
}

static void count_warning(const char *message, void *payload)
{
    funcd_buf *warnings = payload;
    funcd_buf_printf(warnings, "%s\n", message);
}

static void make_tree(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof(root), "%s/funcdctl-bundle.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(root))
        return;
    put_file("main.py", "def handler(req):\n    return 'hi'\n", 0644);
    put_file("run.sh", "#!/bin/sh\necho hi\n", 0750);
    put_dir("pkg");
    put_file("pkg/util.py", "X = 1\n", 0600);
    put_dir("pkg/empty");
    put_dir(".git");
    put_file(".git/config", "[core]\n", 0644);
    put_file("pkg/.git", "gitdir: ../.git/modules/pkg\n", 0644);
    put_symlink("main.py", "link.py");
    put_file("h\xc3\xa9llo.txt", "hi\n", 0644); /* not ASCII, in whatever locale */
}

TEST(packs_files_and_dirs_sorted_with_exec_bits)
{
    funcd_buf tgz = FUNCD_BUF_INIT, listing = FUNCD_BUF_INIT, err = FUNCD_BUF_INIT,
              warnings = FUNCD_BUF_INIT;
    ctl_bundle_stats stats;
    int rc = ctl_bundle_pack(root, LIMIT, &tgz, &stats, count_warning, &warnings, &err);
    int listed = rc == 0 ? list_archive(&tgz, &listing) : -1;
    char *text = funcd_buf_detach(&listing, NULL);
    char *warned = funcd_buf_detach(&warnings, NULL);
    funcd_buf_free(&tgz);
    funcd_buf_free(&err);
    int ok = rc == 0 && listed == 0;
    const char *want = "f 644 h\xc3\xa9llo.txt 3 hi\n uid=0\n"
                       "f 644 main.py 34 def handler(req):\n    return 'hi'\n uid=0\n"
                       "d 755 pkg/ 0 uid=0\n"
                       "d 755 pkg/empty/ 0 uid=0\n"
                       "f 644 pkg/util.py 6 X = 1\n uid=0\n"
                       "f 755 run.sh 18 #!/bin/sh\necho hi\n uid=0\n";
    int same = ok && !strcmp(text, want);
    int counted = stats.files == 4 && stats.dirs == 2 && stats.skipped == 1;
    int warned_link = strstr(warned, "skipping symlink link.py") != NULL;
    if (!same)
        fprintf(stderr, "  got:\n%s  want:\n%s", text, want);
    free(text);
    free(warned);
    CHECK(ok);
    CHECK(same);
    CHECK(counted);
    CHECK(warned_link);
}

TEST(same_tree_packs_to_same_bytes)
{
    funcd_buf a = FUNCD_BUF_INIT, b = FUNCD_BUF_INIT, err = FUNCD_BUF_INIT;
    ctl_bundle_stats stats;
    int rc = ctl_bundle_pack(root, LIMIT, &a, &stats, NULL, NULL, &err);
    sleep(1); /* gzip would stamp a different time */
    if (rc == 0)
        rc = ctl_bundle_pack(root, LIMIT, &b, &stats, NULL, NULL, &err);
    int same = rc == 0 && a.len == b.len && a.len > 0 && !memcmp(a.data, b.data, a.len);
    funcd_buf_free(&a);
    funcd_buf_free(&b);
    funcd_buf_free(&err);
    CHECK_INT(rc, 0);
    CHECK(same);
}

TEST(over_the_limit_is_an_error)
{
    funcd_buf tgz = FUNCD_BUF_INIT, err = FUNCD_BUF_INIT;
    ctl_bundle_stats stats;
    int rc = ctl_bundle_pack(root, 16, &tgz, &stats, NULL, NULL, &err);
    char *msg = funcd_buf_detach(&err, NULL);
    int says = strstr(msg, "passes") != NULL;
    if (!says)
        fprintf(stderr, "  message: %s\n", msg);
    free(msg);
    funcd_buf_free(&tgz);
    CHECK_INT(rc, -1);
    CHECK(says);
}

TEST(missing_or_not_a_directory)
{
    funcd_buf tgz = FUNCD_BUF_INIT, err = FUNCD_BUF_INIT;
    ctl_bundle_stats stats;
    char path[300];
    snprintf(path, sizeof(path), "%s/nosuch", root);
    int missing = ctl_bundle_pack(path, LIMIT, &tgz, &stats, NULL, NULL, &err);
    int says_missing = err.data && strstr(err.data, "No such file") != NULL;
    snprintf(path, sizeof(path), "%s/main.py", root);
    int file = ctl_bundle_pack(path, LIMIT, &tgz, &stats, NULL, NULL, &err);
    int says_file = err.data && strstr(err.data, "is not a directory") != NULL;
    funcd_buf_free(&tgz);
    funcd_buf_free(&err);
    CHECK_INT(missing, -1);
    CHECK(says_missing);
    CHECK_INT(file, -1);
    CHECK(says_file);
}

TEST(unreadable_file_is_named)
{
    if (geteuid() == 0)
        return; /* root reads everything */
    put_file("secret.txt", "x", 0000);
    funcd_buf tgz = FUNCD_BUF_INIT, err = FUNCD_BUF_INIT;
    ctl_bundle_stats stats;
    int rc = ctl_bundle_pack(root, LIMIT, &tgz, &stats, NULL, NULL, &err);
    int named = err.data && strstr(err.data, "secret.txt") != NULL;
    char path[300];
    snprintf(path, sizeof(path), "%s/secret.txt", root);
    unlink(path);
    funcd_buf_free(&tgz);
    funcd_buf_free(&err);
    CHECK_INT(rc, -1);
    CHECK(named);
}

int main(void)
{
    make_tree();
    RUN(packs_files_and_dirs_sorted_with_exec_bits);
    RUN(same_tree_packs_to_same_bytes);
    RUN(over_the_limit_is_an_error);
    RUN(missing_or_not_a_directory);
    RUN(unreadable_file_is_named);
    remove_tree();
    return HARNESS_END();
}
