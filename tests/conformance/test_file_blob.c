/* The file blob store against the blob conformance suite, plus what only it promises. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../harness.h"
#include "blob_suite.h"
#include "funcd/sys/blob.h"
#include "util/misc.h"

/* Short enough that names built from it always fit PATH_MAX. */
#define DIR_LEN 512

typedef struct fixture {
    char root[256]; /* everything this program writes lives under it */
    int next;
    int skipped;
} fixture;

static fixture fx;

/* A fresh directory path under the root, not yet created. */
static void fresh_dir(char *out, size_t len, const char *what)
{
    snprintf(out, len, "%s/%s-%d", fx.root, what, ++fx.next);
}

static funcd_blob *open_store(const char *dir)
{
    funcd_blob *b = NULL;
    return funcd_blob_file_new(&b, dir) == 0 ? b : NULL;
}

static funcd_blob *make_file(void *payload)
{
    char dir[DIR_LEN];
    (void)payload;
    fresh_dir(dir, sizeof(dir), "conf");
    return open_store(dir);
}

TEST(conformance)
{
    CHECK_INT(funcd_blob_conformance_run(make_file, NULL, 1), 0);
}

/* Directory entries whose names start with `prefix` ("" for all but . and ..). */
static int count_entries(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && funcd_has_prefix(de->d_name, prefix))
            n++;
    closedir(d);
    return n;
}

static int value_is(funcd_blob *b, const char *key, const void *want, size_t want_len)
{
    void *data = NULL;
    size_t len = 0;
    int ok = b->get(b, key, 0, FUNCD_BLOB_TO_END, &data, &len) == 0 && len == want_len &&
             memcmp(data, want, len) == 0;
    free(data);
    return ok;
}

#define MAX_KEYS 32

typedef struct collected {
    char *keys[MAX_KEYS];
    size_t n;
} collected;

static int collect_cb(const char *key, const funcd_blob_stat *st, void *payload)
{
    collected *c = payload;
    (void)st;
    if (c->n < MAX_KEYS)
        c->keys[c->n++] = strdup(key);
    return 0;
}

static void collected_free(collected *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->keys[i]);
    c->n = 0;
}

TEST(reopen_reads_back)
{
    char dir[DIR_LEN];
    fresh_dir(dir, sizeof(dir), "reopen");
    strncat(dir, "/nested/blobs", sizeof(dir) - strlen(dir) - 1); /* parents are created too */
    funcd_blob *b = open_store(dir);
    CHECK(b != NULL);
    CHECK_STR(b->name, "file");
    int put1 = b->put(b, "sha256:abc", "artifact", 8);
    int put2 = b->put(b, "logs/default/fn/2026-11-29T21/seg-000001.jsonl", "{}\n", 3);
    b->free(b);
    CHECK_INT(put1, 0);
    CHECK_INT(put2, 0);

    b = open_store(dir);
    CHECK(b != NULL);
    collected c = {{0}, 0};
    funcd_blob_stat st = {0, 0};
    int listed = b->list(b, "logs/", collect_cb, &c);
    int ok1 = value_is(b, "sha256:abc", "artifact", 8);
    int ok2 = value_is(b, "logs/default/fn/2026-11-29T21/seg-000001.jsonl", "{}\n", 3);
    int stat_rc = b->stat(b, "sha256:abc", &st);
    b->free(b);
    int one = c.n == 1 && strcmp(c.keys[0], "logs/default/fn/2026-11-29T21/seg-000001.jsonl") == 0;
    collected_free(&c);
    CHECK_INT(listed, 0);
    CHECK(one);
    CHECK(ok1 && ok2);
    CHECK_INT(stat_rc, 0);
    CHECK_INT(st.size, 8);
}

static int by_bytes(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every file under `dir` is a regular file whose name does not start with '.'. */
static int flat_and_plain(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int ok = 1;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        struct stat st;
        if (de->d_name[0] == '.' || fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            !S_ISREG(st.st_mode))
            ok = 0;
    }
    closedir(d);
    return ok;
}

TEST(odd_keys_round_trip)
{
    static const char *const keys[] = {
        "a/b/c", "a//b", "/abs", "100%", "a%2Fb", "with space", "..", ".", "../escape",
        "a/../../escape", ".hidden", ".tmp-1-1", "unicode \xe2\x98\x83 \xc3\xa9", "~tilde",
        "sha256:ab", "tab\tnl\n", "UPPER", "upper",
    };
    enum { N = sizeof(keys) / sizeof(keys[0]) };
    char dir[DIR_LEN];
    fresh_dir(dir, sizeof(dir), "odd");
    funcd_blob *b = open_store(dir);
    CHECK(b != NULL);
    int puts_ok = 1, gets_ok = 1;
    for (size_t i = 0; i < N; i++)
        puts_ok &= b->put(b, keys[i], keys[i], strlen(keys[i])) == 0;
    for (size_t i = 0; i < N; i++)
        gets_ok &= value_is(b, keys[i], keys[i], strlen(keys[i]));
    collected all = {{0}, 0}, dots = {{0}, 0};
    int rc_all = b->list(b, "", collect_cb, &all);
    int rc_dots = b->list(b, ".", collect_cb, &dots);
    b->free(b);

    const char *want[N];
    memcpy(want, keys, sizeof(want));
    qsort(want, N, sizeof(want[0]), by_bytes);
    int order_ok = all.n == N;
    for (size_t i = 0; order_ok && i < N; i++)
        order_ok = strcmp(all.keys[i], want[i]) == 0;
    int dots_ok = dots.n == 5 && strcmp(dots.keys[0], ".") == 0 &&
                  strcmp(dots.keys[4], ".tmp-1-1") == 0;
    collected_free(&all);
    collected_free(&dots);
    CHECK(puts_ok);
    CHECK(gets_ok);
    CHECK_INT(rc_all, 0);
    CHECK(order_ok);
    CHECK_INT(rc_dots, 0);
    CHECK(dots_ok); /* ".", "..", "../escape", ".hidden", ".tmp-1-1" */
    CHECK(flat_and_plain(dir));
    CHECK_INT(count_entries(dir, ""), N);
    CHECK_INT(count_entries(fx.root, "escape"), 0);
}

TEST(key_length_limit)
{
    char dir[DIR_LEN], plain[NAME_MAX + 2], slashes[100];
    fresh_dir(dir, sizeof(dir), "long");
    memset(plain, 'k', NAME_MAX);
    plain[NAME_MAX] = '\0';
    memset(slashes, '/', 86); /* 86 * 3 > NAME_MAX once encoded */
    slashes[86] = '\0';
    funcd_blob *b = open_store(dir);
    CHECK(b != NULL);
    int longest = b->put(b, plain, "x", 1);
    plain[NAME_MAX] = 'k';
    plain[NAME_MAX + 1] = '\0';
    int too_long = b->put(b, plain, "x", 1);
    int too_long_encoded = b->put(b, slashes, "x", 1);
    collected c = {{0}, 0};
    int listed = b->list(b, plain, collect_cb, &c);
    void *data = NULL;
    size_t len = 0;
    int get_rc = b->get(b, slashes, 0, FUNCD_BLOB_TO_END, &data, &len);
    b->free(b);
    collected_free(&c);
    CHECK_INT(longest, 0);
    CHECK_INT(too_long, FUNCD_EINVAL);
    CHECK_INT(too_long_encoded, FUNCD_EINVAL);
    CHECK_INT(listed, 0);
    CHECK_INT(get_rc, FUNCD_EINVAL);
}

static int write_file(const char *dir, const char *name, const char *text)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

TEST(crash_leftovers_ignored_then_removed)
{
    char dir[DIR_LEN], held[PATH_MAX];
    fresh_dir(dir, sizeof(dir), "crash");
    funcd_blob *b = open_store(dir);
    CHECK(b != NULL);
    int put = b->put(b, "k", "v", 1);
    /* What a crash mid-put leaves, a writer still at work, and files that are not ours. */
    int made = write_file(dir, ".tmp-999999-7", "half a blob") |
               write_file(dir, ".tmp-garbled", "junk") | write_file(dir, "README~", "foreign") |
               write_file(dir, "k%2f", "lower-case hex is not our encoding");
    snprintf(held, sizeof(held), "%s/.tmp-in-flight", dir);
    int hfd = open(held, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    int locked = hfd >= 0 && flock(hfd, LOCK_EX) == 0;
    collected c = {{0}, 0};
    int listed = b->list(b, "", collect_cb, &c);
    b->free(b);
    int only_k = c.n == 1 && strcmp(c.keys[0], "k") == 0;
    collected_free(&c);

    b = open_store(dir);
    int reopened = b != NULL, still = b && value_is(b, "k", "v", 1);
    if (b)
        b->free(b);
    int temps_left = count_entries(dir, ".tmp-");
    struct stat st;
    int held_kept = stat(held, &st) == 0;
    if (hfd >= 0)
        close(hfd);
    CHECK_INT(put, 0);
    CHECK_INT(made, 0);
    CHECK(locked);
    CHECK_INT(listed, 0);
    CHECK(only_k);
    CHECK(reopened);
    CHECK(still);
    CHECK_INT(temps_left, 1); /* only the one a writer holds */
    CHECK(held_kept);
    CHECK_INT(count_entries(dir, "README~"), 1); /* not ours: left alone */
}

TEST(errors)
{
    char dir[DIR_LEN];
    fresh_dir(dir, sizeof(dir), "errors");
    funcd_blob *b = NULL;
    CHECK_INT(funcd_blob_file_new(NULL, dir), FUNCD_EINVAL);
    CHECK_INT(funcd_blob_file_new(&b, NULL), FUNCD_EINVAL);
    CHECK_INT(funcd_blob_file_new(&b, "/proc/funcd-cannot-create-this"), FUNCD_EIO);
    CHECK_CONTAINS(funcd_error_last()->message, "/proc/funcd-cannot-create-this");
    CHECK(b == NULL);
    b = open_store(dir);
    CHECK(b != NULL);
    void *data = NULL;
    size_t len = 0;
    int missing = b->get(b, "sha256:gone", 0, FUNCD_BLOB_TO_END, &data, &len);
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", funcd_error_last()->message);
    int empty = b->put(b, "", "x", 1);
    int null_data = b->put(b, "k", NULL, 3);
    b->free(b);
    CHECK_INT(missing, FUNCD_ENOTFOUND);
    CHECK_CONTAINS(msg, "sha256:gone");
    CHECK_INT(empty, FUNCD_EINVAL);
    CHECK_INT(null_data, FUNCD_EINVAL);
}

/* ---- a full disk ----------------------------------------------------------------------- */

enum { FILL_SIZE = 16 * 1024, MAX_FILL = 64 };

static void pattern(unsigned char *p, size_t len, int seed)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (unsigned char)(i * 31 + (size_t)seed * 7);
}

static void fill_until_full(funcd_blob *b, const char *mnt)
{
    unsigned char *data = malloc(8 * FILL_SIZE), *want = malloc(FILL_SIZE);
    char key[64], msg[512];
    int stored = 0, rc = 0;
    if (!data || !want) {
        free(data);
        free(want);
        FAILF("out of memory");
    }
    for (; stored < MAX_FILL; stored++) {
        snprintf(key, sizeof(key), "fill/%03d", stored);
        pattern(data, FILL_SIZE, stored);
        if ((rc = b->put(b, key, data, FILL_SIZE)) < 0)
            break;
    }
    snprintf(msg, sizeof(msg), "%s", funcd_error_last()->message);
    int failed_absent = b->stat(b, key, NULL) == FUNCD_ENOTFOUND;
    int intact = 1;
    for (int i = 0; i < stored; i++) {
        snprintf(key, sizeof(key), "fill/%03d", i);
        pattern(want, FILL_SIZE, i);
        intact &= value_is(b, key, want, FILL_SIZE);
    }
    /* A bigger replacement that cannot fit leaves the old object whole. */
    pattern(data, 8 * FILL_SIZE, 99);
    int overwrite = b->put(b, "fill/000", data, 8 * FILL_SIZE);
    pattern(want, FILL_SIZE, 0);
    int old_kept = value_is(b, "fill/000", want, FILL_SIZE);
    int temps = count_entries(mnt, ".tmp-");
    collected c = {{0}, 0};
    b->list(b, "fill/", collect_cb, &c);
    size_t listed = c.n;
    collected_free(&c);
    int freed = b->del(b, "fill/001") == 0 && b->put(b, "after", "room again", 10) == 0;
    free(data);
    free(want);
    CHECK_INT(rc, FUNCD_ENOSPC);
    CHECK(stored > 2 && stored < MAX_FILL);
    CHECK_CONTAINS(msg, "fill/");
    CHECK_CONTAINS(msg, "nothing was stored");
    CHECK(failed_absent);
    CHECK(intact);
    CHECK_INT(overwrite, FUNCD_ENOSPC);
    CHECK(old_kept);
    CHECK_INT(temps, 0);
    CHECK_INT(listed, stored < MAX_KEYS ? stored : MAX_KEYS);
    CHECK(freed);
}

TEST(full_disk_keeps_what_was_stored)
{
    char mnt[DIR_LEN];
    fresh_dir(mnt, sizeof(mnt), "tmpfs");
    CHECK(mkdir(mnt, 0700) == 0);
    if (mount("funcd-test", mnt, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=256k,mode=0700") <
        0) {
        int err = errno;
        rmdir(mnt);
        if (err == EPERM) {
            fprintf(stderr, "  skipped: mounting a tmpfs needs root\n");
            fx.skipped = 1;
            return;
        }
        FAILF("mount tmpfs on %s: %s", mnt, strerror(err));
    }
    funcd_blob *b = open_store(mnt);
    if (b) {
        fill_until_full(b, mnt);
        b->free(b);
    }
    int unmounted = umount2(mnt, MNT_DETACH) == 0;
    rmdir(mnt);
    CHECK(b != NULL);
    CHECK(unmounted);
}

/*
 * A private mount namespace (when we may have one) keeps the test's tmpfs
 * invisible to the rest of the machine and gone with the process even if
 * it crashes before unmounting. Only possible while single-threaded.
 */
static void private_mounts(void)
{
    if (unshare(CLONE_NEWNS) == 0)
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
}

int main(void)
{
    private_mounts();
    const char *tmp = getenv("TMPDIR");
    snprintf(fx.root, sizeof(fx.root), "%s/funcd-file-blob-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(fx.root)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(conformance);
    RUN(reopen_reads_back);
    RUN(odd_keys_round_trip);
    RUN(key_length_limit);
    RUN(crash_leftovers_ignored_then_removed);
    RUN(errors);
    RUN(full_disk_keeps_what_was_stored);
    funcd_remove_tree(fx.root);
    int rc = HARNESS_END();
    return rc == 0 && fx.skipped ? 77 : rc;
}
