/*
 * Digests and the per-digest cache of extracted bundles.
 *
 * Layout: <cache_root>/<hex>/ is a complete extraction with a ".complete"
 * marker inside; <cache_root>/.tmp-XXXXXX/ are extractions in progress (or
 * left by a crash: any cleaner may remove them). A directory only ever
 * appears under its final name by rename(2), after its content is synced
 * and its marker written, so readers never see a partial tree.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <mbedtls/sha256.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "artifact/internal.h"
#include "funcd/sys/error.h"
#include "port/blob.h"

#define DIGEST_PREFIX "sha256:"
#define DIGEST_PREFIX_LEN 7
#define HEX_LEN 64
/* Bundles are at most FUNCD_BUNDLE_MAX_DEPTH deep; anything deeper is not ours. */
#define REMOVE_MAX_DEPTH 256

int funcd_bundle_digest(const void *data, size_t len, char out[FUNCD_BUNDLE_DIGEST_LEN])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char sum[32];
    mbedtls_sha256_context ctx;
    mbedtls_sha256_init(&ctx);
    int rc = mbedtls_sha256_starts_ret(&ctx, 0);
    if (!rc && len)
        rc = mbedtls_sha256_update_ret(&ctx, data, len);
    if (!rc)
        rc = mbedtls_sha256_finish_ret(&ctx, sum);
    mbedtls_sha256_free(&ctx);
    if (rc) {
        out[0] = '\0';
        return funcd_error_set(FUNCD_EIO, "sha256 of a bundle failed (mbedtls error %d)", rc);
    }
    memcpy(out, DIGEST_PREFIX, DIGEST_PREFIX_LEN);
    for (int i = 0; i < 32; i++) {
        out[DIGEST_PREFIX_LEN + 2 * i] = hex[sum[i] >> 4];
        out[DIGEST_PREFIX_LEN + 2 * i + 1] = hex[sum[i] & 15];
    }
    out[DIGEST_PREFIX_LEN + HEX_LEN] = '\0';
    return 0;
}

int funcd_bundle_digest_valid(const char *digest)
{
    if (!digest || strncmp(digest, DIGEST_PREFIX, DIGEST_PREFIX_LEN) != 0)
        return 0;
    const char *h = digest + DIGEST_PREFIX_LEN;
    for (int i = 0; i < HEX_LEN; i++)
        if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
            return 0;
    return h[HEX_LEN] == '\0';
}

/* ---- per-namespace visibility -------------------------------------------------------------- */

static int grant_key(char *out, size_t len, const char *ns, const char *digest)
{
    int n = snprintf(out, len, "bundles/%s/%s", ns ? ns : "", digest ? digest : "");
    return ns && *ns && funcd_bundle_digest_valid(digest) && n > 0 && (size_t)n < len ? 0 : -1;
}

int funcd_bundle_grant(funcd_blob *b, const char *ns, const char *digest)
{
    char key[256];
    if (grant_key(key, sizeof(key), ns, digest) < 0)
        return funcd_error_set(FUNCD_EINVAL, "bundle %s: not a digest of namespace \"%s\"",
                               digest ? digest : "", ns ? ns : "");
    return funcd_port_blob_put(b, key, digest, strlen(digest));
}

int funcd_bundle_visible(funcd_blob *b, const char *ns, const char *digest)
{
    char key[256];
    funcd_blob_stat st;
    return grant_key(key, sizeof(key), ns, digest) == 0 && funcd_port_blob_stat(b, key, &st) == 0;
}

/* ---- removing trees ------------------------------------------------------------------------ */

static int remove_contents(int fd, int depth);

static int remove_at(int dirfd, const char *name, int depth)
{
    if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
        return 0;
    if (errno != EISDIR && errno != EPERM)
        return -1;
    if (depth > REMOVE_MAX_DEPTH) {
        errno = ELOOP;
        return -1;
    }
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (remove_contents(fd, depth + 1) < 0) /* closes fd */
        return -1;
    if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
        return -1;
    return 0;
}

static int remove_contents(int fd, int depth)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -1;
    }
    int rc = 0;
    /* Entries removed while reading may shift the rest: read again until a pass finds none. */
    for (int removed = 1; rc == 0 && removed; rewinddir(d)) {
        struct dirent *de;
        removed = 0;
        while (rc == 0 && (errno = 0, de = readdir(d))) {
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                continue;
            rc = remove_at(dirfd(d), de->d_name, depth);
            removed++;
        }
        if (rc == 0 && errno)
            rc = -1;
    }
    int e = errno;
    closedir(d);
    errno = e;
    return rc;
}

int funcd__remove_tree_at(int dirfd, const char *name)
{
    return remove_at(dirfd, name, 0);
}

int funcd_bundle_remove_tree(const char *path)
{
    if (!path || !*path)
        return funcd_error_set(FUNCD_EINVAL, "bundle cache: no path to remove");
    if (funcd__remove_tree_at(AT_FDCWD, path) < 0)
        return funcd_error_set(FUNCD_EIO, "cannot remove %s: %s", path, strerror(errno));
    return 0;
}

/* ---- the cache --------------------------------------------------------------------------- */

static int mkdir_parents(char *path)
{
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int rc = mkdir(path, 0755);
        *p = '/';
        if (rc < 0 && errno != EEXIST)
            return -1;
    }
    return mkdir(path, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

static int is_complete(const char *dir)
{
    char marker[PATH_MAX];
    struct stat st;
    if (snprintf(marker, sizeof(marker), "%s/" FUNCD_BUNDLE_COMPLETE_MARKER, dir) >=
        (int)sizeof(marker))
        return 0;
    return lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && lstat(marker, &st) == 0 &&
           S_ISREG(st.st_mode);
}

/* The marker goes in last, after everything under the tree reached the disk. */
static int seal(int fd, const char *digest)
{
    if (syncfs(fd) < 0)
        return -1;
    int m = openat(fd, FUNCD_BUNDLE_COMPLETE_MARKER,
                   O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (m < 0)
        return -1;
    size_t len = strlen(digest);
    int ok = write(m, digest, len) == (ssize_t)len && write(m, "\n", 1) == 1 && fsync(m) == 0 &&
             fchmod(m, 0644) == 0;
    int e = errno;
    close(m);
    errno = e;
    return ok ? 0 : -1;
}

typedef struct cache_job {
    funcd_blob *blob;
    const char *digest;
    char root[PATH_MAX];  /* absolute cache root */
    char final[PATH_MAX]; /* root/<hex> */
    char *err;
    size_t errlen;
} cache_job;

#define JOB_FAIL(j, code, ...) funcd__bundle_fail((j)->err, (j)->errlen, code, __VA_ARGS__)

static int read_verified(cache_job *j, void **data, size_t *len)
{
    funcd_blob *b = j->blob;
    if (!b || !b->get)
        return JOB_FAIL(j, FUNCD_ENOTSUP, "bundle %s: no blob store to read it from", j->digest);
    int rc = funcd_port_blob_get(b, j->digest, 0, FUNCD_BLOB_TO_END, data, len);
    if (rc == FUNCD_ENOTFOUND)
        return JOB_FAIL(j, FUNCD_ENOTFOUND,
                        "bundle %s is not in the blob store: upload it with funcdctl deploy or "
                        "POST /apis/funcd.dev/v1/namespaces/{ns}/bundles",
                        j->digest);
    if (rc < 0)
        return JOB_FAIL(j, rc, "bundle %s: cannot read it from the %s blob store: %s", j->digest,
                        b->name ? b->name : "", funcd_error_last()->message);
    char actual[FUNCD_BUNDLE_DIGEST_LEN];
    if ((rc = funcd_bundle_digest(*data, *len, actual)) < 0 || strcmp(actual, j->digest) != 0) {
        free(*data);
        *data = NULL;
        if (rc < 0)
            return JOB_FAIL(j, rc, "bundle %s: %s", j->digest, funcd_error_last()->message);
        return JOB_FAIL(j, FUNCD_EINVAL,
                        "bundle %s does not match its content (the stored bytes hash to %s): "
                        "upload it again",
                        j->digest, actual);
    }
    return 0;
}

/* Moves the sealed `tmp` into place, or keeps the copy another writer put there first. */
static int publish(cache_job *j, const char *tmp)
{
    for (int attempt = 0; attempt < 3; attempt++) {
        if (rename(tmp, j->final) == 0)
            return 0;
        if (errno != EEXIST && errno != ENOTEMPTY)
            break;
        if (is_complete(j->final)) {
            funcd__remove_tree_at(AT_FDCWD, tmp);
            return 0;
        }
        /* Not ours and not complete (a foreign or damaged tree): replace it. */
        if (funcd__remove_tree_at(AT_FDCWD, j->final) < 0)
            break;
    }
    int e = errno;
    funcd__remove_tree_at(AT_FDCWD, tmp);
    return JOB_FAIL(j, FUNCD_EIO, "bundle %s: cannot move its extraction to %s: %s", j->digest,
                    j->final, strerror(e));
}

static int extract_and_publish(cache_job *j, const void *data, size_t len)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s/.tmp-XXXXXX", j->root) >= (int)sizeof(tmp))
        return JOB_FAIL(j, FUNCD_EINVAL, "bundle cache root %s is too long", j->root);
    if (!mkdtemp(tmp))
        return JOB_FAIL(j, FUNCD_EIO, "bundle %s: cannot create a directory in %s: %s", j->digest,
                        j->root, strerror(errno));
    int rc = 0, fd = open(tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fchmod(fd, 0755) < 0)
        rc = JOB_FAIL(j, FUNCD_EIO, "bundle %s: cannot open %s: %s", j->digest, tmp,
                      strerror(errno));
    if (!rc)
        rc = funcd__bundle_extract_fd(data, len, fd, tmp, NULL, j->err, j->errlen);
    if (!rc && seal(fd, j->digest) < 0)
        rc = JOB_FAIL(j, FUNCD_EIO, "bundle %s: cannot finish %s: %s", j->digest, tmp,
                      strerror(errno));
    if (fd >= 0)
        close(fd);
    if (rc) {
        funcd__remove_tree_at(AT_FDCWD, tmp);
        return rc;
    }
    return publish(j, tmp);
}

static int prepare_root(cache_job *j, const char *cache_root)
{
    char made[PATH_MAX];
    if (snprintf(made, sizeof(made), "%s", cache_root) >= (int)sizeof(made))
        return JOB_FAIL(j, FUNCD_EINVAL, "bundle cache root %s is too long", cache_root);
    if (mkdir_parents(made) < 0)
        return JOB_FAIL(j, FUNCD_EIO, "cannot create the bundle cache %s: %s", cache_root,
                        strerror(errno));
    if (!realpath(cache_root, j->root))
        return JOB_FAIL(j, FUNCD_EIO, "cannot resolve the bundle cache %s: %s", cache_root,
                        strerror(errno));
    if (snprintf(j->final, sizeof(j->final), "%s/%s", j->root, j->digest + DIGEST_PREFIX_LEN) >=
        (int)sizeof(j->final))
        return JOB_FAIL(j, FUNCD_EINVAL, "bundle cache root %s is too long", cache_root);
    return 0;
}

int funcd_bundle_materialize(funcd_blob *blob, const char *digest, const char *cache_root,
                             char *out_dir, size_t out_len, char *err, size_t errlen)
{
    cache_job *j = calloc(1, sizeof(*j));
    if (!j)
        return funcd__bundle_fail(err, errlen, FUNCD_ENOMEM,
                                  "out of memory materializing a bundle");
    j->blob = blob;
    j->digest = digest;
    j->err = err;
    j->errlen = errlen;

    int rc = 0;
    if (!funcd_bundle_digest_valid(digest))
        rc = JOB_FAIL(j, FUNCD_EINVAL,
                      "bundle digest \"%.80s\" is not sha256:<64 lowercase hex digits>",
                      digest ? digest : "");
    else if (!cache_root || !*cache_root)
        rc = JOB_FAIL(j, FUNCD_EINVAL, "bundle %s: no cache directory given", digest);
    else
        rc = prepare_root(j, cache_root);

    if (!rc && !is_complete(j->final)) {
        void *data = NULL;
        size_t len = 0;
        rc = read_verified(j, &data, &len);
        if (!rc)
            rc = extract_and_publish(j, data, len);
        free(data);
    }
    if (!rc && (!out_dir || snprintf(out_dir, out_len, "%s", j->final) >= (int)out_len))
        rc = JOB_FAIL(j, FUNCD_EINVAL, "bundle %s: the output buffer cannot hold %s", digest,
                      j->final);
    free(j);
    return rc;
}
