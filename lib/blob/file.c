/*
 * The file blob store: one regular file per object, all in one directory.
 *
 * Key to file name (ADR 0011): bytes in [A-Za-z0-9._-] stay, every other
 * byte (including '/') becomes %XX with upper-case hex, and a leading '.'
 * is always encoded. So names are flat (no key can reach a subdirectory or
 * "..") and names starting with '.' are never objects: they are ours, for
 * temp files. The encoding is a prefix code, so "key starts with P" is the
 * same as "name starts with enc(P)", which lets list filter before decoding.
 *
 * Writes go to a temp file that is fsync()ed and renamed over the final
 * name, so readers see the old object or the new one, never a mix, and a
 * failed write leaves the old object as it was. Objects are never modified
 * in place, so one open fd reads one consistent version. Each temp file is
 * flock()ed by its writer until it is renamed: at open we remove exactly
 * the temp files nobody holds, which are the leftovers of a crash.
 *
 * Every call works on its own fds relative to one directory fd; the only
 * shared mutable state is an atomic counter, so no mutex is needed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "funcd/sys/blob.h"
#include "funcd/sys/error.h"
#include "util/misc.h"

#define TEMP_PREFIX ".tmp-"
#define TEMP_NAME_MAX 64
#define TEMP_ATTEMPTS 1000

typedef struct file_blob {
    funcd_blob base;
    int dirfd;
    char *dir; /* for messages */
    atomic_ulong temp_seq;
} file_blob;

typedef char file_name[NAME_MAX + 1];

static file_blob *fb(funcd_blob *b)
{
    return (file_blob *)b;
}

/* ---- key <-> file name ----------------------------------------------------------------- */

static int byte_is_plain(unsigned char c, size_t pos)
{
    if (c == '.')
        return pos > 0;
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

/* Returns the name's length, or -1 if it would not fit a file name. */
static long encode_key(const char *key, file_name out)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    for (size_t i = 0; key[i]; i++) {
        unsigned char c = (unsigned char)key[i];
        size_t need = byte_is_plain(c, i) ? 1 : 3;
        if (n + need > NAME_MAX)
            return -1;
        if (need == 1) {
            out[n++] = (char)c;
        } else {
            out[n++] = '%';
            out[n++] = hex[c >> 4];
            out[n++] = hex[c & 15];
        }
    }
    out[n] = '\0';
    return (long)n;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1; /* lower case is not canonical: such a name is not ours */
}

/*
 * Decodes a file name into `out` (at least strlen(name) + 1 bytes). Only the
 * exact encoding of some key decodes; anything else (a foreign file, an
 * editor's backup) is not an object and yields -1.
 */
static int decode_name(const char *name, char *out)
{
    size_t n = 0;
    for (size_t i = 0; name[i]; n++) {
        unsigned char c = (unsigned char)name[i];
        if (c != '%') {
            if (!byte_is_plain(c, n))
                return -1;
            out[n] = (char)c;
            i++;
            continue;
        }
        int hi = hex_digit(name[i + 1]), lo = hi < 0 ? -1 : hex_digit(name[i + 2]);
        if (lo < 0)
            return -1;
        c = (unsigned char)(hi << 4 | lo);
        if (c == 0 || byte_is_plain(c, n))
            return -1;
        out[n] = (char)c;
        i += 3;
    }
    out[n] = '\0';
    return n ? 0 : -1;
}

/* ---- errors ---------------------------------------------------------------------------- */

static int key_name(const file_blob *f, const char *key, const char *what, file_name name)
{
    if (!key || !key[0])
        return funcd_error_set(FUNCD_EINVAL,
                               "blob file %s: %s needs a non-empty key (like \"sha256:<hex>\")",
                               f->dir, what);
    if (encode_key(key, name) < 0)
        return funcd_error_set(FUNCD_EINVAL,
                               "blob file %s: key \"%.64s...\" is too long for a file name (at "
                               "most %d bytes once bytes outside [A-Za-z0-9._-] take 3 each); "
                               "use a shorter key",
                               f->dir, key, NAME_MAX);
    return 0;
}

static int not_found(const file_blob *f, const char *key, const char *what)
{
    return funcd_error_set(FUNCD_ENOTFOUND,
                           "blob file %s: cannot %s \"%s\": no such object; list the prefix to "
                           "see what exists, or upload it first",
                           f->dir, what, key);
}

static int os_error(const file_blob *f, const char *key, const char *what, int err)
{
    return funcd_error_set(FUNCD_EIO, "blob file %s: cannot %s \"%s\": %s", f->dir, what, key,
                           strerror(err));
}

static int put_failed(const file_blob *f, const char *key, int err)
{
    if (err == ENOSPC || err == EDQUOT)
        return funcd_error_set(FUNCD_ENOSPC,
                               "blob file %s: no space to store \"%s\" (%s): nothing was stored "
                               "and any previous object under that key is unchanged; free space "
                               "or raise the quota, then retry",
                               f->dir, key, strerror(err));
    return funcd_error_set(FUNCD_EIO,
                           "blob file %s: cannot store \"%s\": %s; nothing was stored and any "
                           "previous object under that key is unchanged",
                           f->dir, key, strerror(err));
}

/* ---- put ------------------------------------------------------------------------------- */

/* Creates and locks a fresh temp file; -1 with errno on failure. */
static int open_temp(file_blob *f, char tmp[TEMP_NAME_MAX])
{
    for (int attempt = 0; attempt < TEMP_ATTEMPTS; attempt++) {
        unsigned long seq = atomic_fetch_add(&f->temp_seq, 1);
        snprintf(tmp, TEMP_NAME_MAX, TEMP_PREFIX "%ld-%lu", (long)getpid(), seq);
        int fd = openat(f->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 && errno == EEXIST)
            continue; /* another store instance in this process uses the same names */
        if (fd >= 0 && flock(fd, LOCK_EX) < 0) {
            int err = errno;
            unlinkat(f->dirfd, tmp, 0);
            close(fd);
            errno = err;
            return -1;
        }
        return fd;
    }
    errno = EEXIST;
    return -1;
}

static int file_put(funcd_blob *b, const char *key, const void *data, size_t len)
{
    file_blob *f = fb(b);
    file_name name;
    int rc = key_name(f, key, "put", name);
    if (rc < 0)
        return rc;
    if (!data && len)
        return funcd_error_set(FUNCD_EINVAL, "blob file %s: put of \"%s\" has no data but %zu bytes",
                               f->dir, key, len);
    char tmp[TEMP_NAME_MAX];
    int fd = open_temp(f, tmp);
    if (fd < 0)
        return put_failed(f, key, errno);
    int err = 0;
    if (funcd_write_all(fd, data, len) < 0 || fsync(fd) < 0)
        err = errno;
    /* Renamed while still locked, so a store opening now cannot take it for a leftover. */
    if (!err && renameat(f->dirfd, tmp, f->dirfd, name) < 0)
        err = errno;
    if (err)
        unlinkat(f->dirfd, tmp, 0);
    close(fd);
    if (err)
        return put_failed(f, key, err);
    if (fsync(f->dirfd) < 0)
        return funcd_error_set(FUNCD_EIO,
                               "blob file %s: stored \"%s\" but could not sync the directory (%s): "
                               "the object may be lost on a crash; check the disk",
                               f->dir, key, strerror(errno));
    return 0;
}

/* ---- put_open: the temp file grows with each write; commit is put's tail ---- */

typedef struct file_writer {
    funcd_blob_writer base;
    file_blob *f;
    char *key;
    file_name name;
    char tmp[TEMP_NAME_MAX];
    int fd;
    int err; /* the first write error: commit refuses to publish */
} file_writer;

static void fw_free(file_writer *w)
{
    free(w->key);
    free(w);
}

static int fw_write(funcd_blob_writer *base, const void *data, size_t len)
{
    file_writer *w = (file_writer *)base;
    if (!len)
        return 0;
    if (!data)
        return funcd_error_set(FUNCD_EINVAL, "blob file %s: write to \"%s\" has no data but %zu "
                                             "bytes",
                               w->f->dir, w->key, len);
    if (!w->err && funcd_write_all(w->fd, data, len) < 0)
        w->err = errno ? errno : EIO;
    return w->err ? put_failed(w->f, w->key, w->err) : 0;
}

static int fw_commit(funcd_blob_writer *base)
{
    file_writer *w = (file_writer *)base;
    file_blob *f = w->f;
    int err = w->err;
    if (!err && fsync(w->fd) < 0)
        err = errno;
    /* Renamed while still locked, as put does. */
    if (!err && renameat(f->dirfd, w->tmp, f->dirfd, w->name) < 0)
        err = errno;
    if (err)
        unlinkat(f->dirfd, w->tmp, 0);
    close(w->fd);
    int rc = 0;
    if (err)
        rc = put_failed(f, w->key, err);
    else if (fsync(f->dirfd) < 0)
        rc = funcd_error_set(FUNCD_EIO,
                             "blob file %s: stored \"%s\" but could not sync the directory (%s): "
                             "the object may be lost on a crash; check the disk",
                             f->dir, w->key, strerror(errno));
    fw_free(w);
    return rc;
}

static void fw_abort(funcd_blob_writer *base)
{
    file_writer *w = (file_writer *)base;
    unlinkat(w->f->dirfd, w->tmp, 0);
    close(w->fd);
    fw_free(w);
}

static int file_put_open(funcd_blob *b, const char *key, funcd_blob_writer **out)
{
    file_blob *f = fb(b);
    file_name name;
    int rc = key_name(f, key, "put", name);
    if (rc < 0)
        return rc;
    if (!out)
        return funcd_error_set(FUNCD_EINVAL, "blob file %s: put_open of \"%s\" needs an out "
                                             "pointer",
                               f->dir, key);
    file_writer *w = calloc(1, sizeof(*w));
    if (!w || !(w->key = strdup(key))) {
        free(w);
        return funcd_error_set(FUNCD_ENOMEM, "blob file %s: out of memory opening a writer for "
                                             "\"%s\"",
                               f->dir, key);
    }
    memcpy(w->name, name, sizeof(name));
    if ((w->fd = open_temp(f, w->tmp)) < 0) {
        rc = put_failed(f, key, errno);
        fw_free(w);
        return rc;
    }
    w->base.write = fw_write;
    w->base.commit = fw_commit;
    w->base.abort = fw_abort;
    w->f = f;
    *out = &w->base;
    return 0;
}

/* ---- get, stat ------------------------------------------------------------------------- */

static int read_range(const file_blob *f, const char *key, int fd, uint64_t offset, size_t n,
                      void **out, size_t *out_len)
{
    unsigned char *buf = malloc(n ? n : 1);
    if (!buf)
        return funcd_error_set(FUNCD_ENOMEM, "blob file %s: out of memory reading %zu bytes of \"%s\"",
                               f->dir, n, key);
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)(offset + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int err = errno;
            free(buf);
            return os_error(f, key, "read", err);
        }
        if (r == 0)
            break; /* only if someone truncated the file behind our back */
        got += (size_t)r;
    }
    *out = buf;
    *out_len = got;
    return 0;
}

static int file_get(funcd_blob *b, const char *key, uint64_t offset, uint64_t length, void **out,
                    size_t *out_len)
{
    file_blob *f = fb(b);
    file_name name;
    int rc = key_name(f, key, "get", name);
    if (rc < 0)
        return rc;
    if (!out || !out_len)
        return funcd_error_set(FUNCD_EINVAL, "blob file %s: get of \"%s\" needs out pointers",
                               f->dir, key);
    int fd = openat(f->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? not_found(f, key, "read") : os_error(f, key, "open", errno);
    struct stat st;
    if (fstat(fd, &st) < 0) {
        rc = os_error(f, key, "stat", errno);
    } else if (offset > (uint64_t)st.st_size) {
        rc = funcd_error_set(FUNCD_ERANGE,
                             "blob file %s: offset %" PRIu64 " lies past the end of \"%s\" (%jd "
                             "bytes); stat it for its size",
                             f->dir, offset, key, (intmax_t)st.st_size);
    } else {
        uint64_t avail = (uint64_t)st.st_size - offset;
        uint64_t n = length < avail ? length : avail;
        if (n > SIZE_MAX / 2)
            rc = funcd_error_set(FUNCD_ENOMEM,
                                 "blob file %s: \"%s\" is too large to read at once; read a range",
                                 f->dir, key);
        else
            rc = read_range(f, key, fd, offset, (size_t)n, out, out_len);
    }
    close(fd);
    return rc;
}

static void fill_stat(const struct stat *st, funcd_blob_stat *out)
{
    out->size = (uint64_t)st->st_size;
    out->mtime_ms = (int64_t)st->st_mtim.tv_sec * 1000 + st->st_mtim.tv_nsec / 1000000;
}

static int file_stat(funcd_blob *b, const char *key, funcd_blob_stat *out)
{
    file_blob *f = fb(b);
    file_name name;
    int rc = key_name(f, key, "stat", name);
    if (rc < 0)
        return rc;
    struct stat st;
    if (fstatat(f->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? not_found(f, key, "stat") : os_error(f, key, "stat", errno);
    if (!S_ISREG(st.st_mode))
        return not_found(f, key, "stat");
    if (out)
        fill_stat(&st, out);
    return 0;
}

/* ---- list ------------------------------------------------------------------------------ */

typedef struct listed {
    char *key;
    funcd_blob_stat st;
} listed;

typedef struct listing {
    listed *items;
    size_t n, cap;
} listing;

static void listing_free(listing *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->items[i].key);
    free(l->items);
}

static int listing_add(listing *l, const char *key, const struct stat *st)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        listed *p = realloc(l->items, cap * sizeof(*p));
        if (!p)
            return -1;
        l->items = p;
        l->cap = cap;
    }
    if (!(l->items[l->n].key = strdup(key)))
        return -1;
    fill_stat(st, &l->items[l->n].st);
    l->n++;
    return 0;
}

static int by_key(const void *a, const void *b)
{
    return strcmp(((const listed *)a)->key, ((const listed *)b)->key);
}

/* Adds the object behind one directory entry, if it is one and matches. */
static int consider_entry(const file_blob *f, const char *entry, const char *enc_prefix,
                          size_t enc_len, listing *l)
{
    char key[NAME_MAX + 1];
    struct stat st;
    if (entry[0] == '.' || strncmp(entry, enc_prefix, enc_len) != 0 || decode_name(entry, key) < 0)
        return 0;
    if (fstatat(f->dirfd, entry, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
        return 0; /* deleted since readdir, or not an object */
    return listing_add(l, key, &st);
}

/* Collects the matching objects so callbacks run with no directory open and may call back in. */
static int collect(const file_blob *f, const char *enc_prefix, listing *l)
{
    int fd = openat(f->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        return funcd_error_set(FUNCD_EIO, "blob file %s: cannot read the directory: %s", f->dir,
                               strerror(err));
    }
    size_t enc_len = strlen(enc_prefix);
    int rc = 0;
    while (rc == 0) {
        errno = 0; /* readdir reports errors only through errno */
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno)
                rc = funcd_error_set(FUNCD_EIO, "blob file %s: cannot read the directory: %s",
                                     f->dir, strerror(errno));
            break;
        }
        if (consider_entry(f, de->d_name, enc_prefix, enc_len, l) < 0)
            rc = funcd_error_set(FUNCD_ENOMEM, "blob file %s: out of memory listing \"%s\"",
                                 f->dir, enc_prefix);
    }
    closedir(d);
    return rc;
}

static int file_list(funcd_blob *b, const char *prefix, funcd_blob_list_cb cb, void *payload)
{
    file_blob *f = fb(b);
    if (!cb)
        return funcd_error_set(FUNCD_EINVAL, "blob file %s: list needs a callback", f->dir);
    file_name enc_prefix;
    if (encode_key(prefix ? prefix : "", enc_prefix) < 0)
        return 0; /* longer than any key can be: nothing matches */
    listing l = {NULL, 0, 0};
    int rc = collect(f, enc_prefix, &l);
    if (rc == 0 && l.n)
        qsort(l.items, l.n, sizeof(*l.items), by_key);
    for (size_t i = 0; rc == 0 && i < l.n; i++)
        if (cb(l.items[i].key, &l.items[i].st, payload))
            break;
    listing_free(&l);
    return rc;
}

/* ---- del, free, open ------------------------------------------------------------------- */

static int file_del(funcd_blob *b, const char *key)
{
    file_blob *f = fb(b);
    file_name name;
    int rc = key_name(f, key, "delete", name);
    if (rc < 0)
        return rc;
    if (unlinkat(f->dirfd, name, 0) < 0)
        return errno == ENOENT ? not_found(f, key, "delete") : os_error(f, key, "delete", errno);
    if (fsync(f->dirfd) < 0)
        return funcd_error_set(FUNCD_EIO,
                               "blob file %s: deleted \"%s\" but could not sync the directory "
                               "(%s): it may reappear after a crash",
                               f->dir, key, strerror(errno));
    return 0;
}

static void file_free(funcd_blob *b)
{
    file_blob *f = fb(b);
    if (!f)
        return;
    if (f->dirfd >= 0)
        close(f->dirfd);
    free(f->dir);
    free(f);
}

/* mkdir -p with mode 0700 for what it creates. */
static int make_dirs(const char *dir)
{
    char *path = strdup(dir);
    if (!path)
        return ENOMEM;
    int err = 0;
    for (char *p = path + 1; !err; p++) {
        int last = *p == '\0';
        if (*p != '/' && !last)
            continue;
        *p = '\0';
        if (mkdir(path, 0700) < 0 && errno != EEXIST)
            err = errno;
        if (last)
            break;
        *p = '/';
    }
    free(path);
    return err;
}

/* A temp file no writer holds locked is the leftover of a crash. */
static void remove_stale_temps(const file_blob *f)
{
    int fd = openat(f->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, TEMP_PREFIX, strlen(TEMP_PREFIX)) != 0)
            continue;
        int tfd = openat(f->dirfd, de->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (tfd < 0)
            continue;
        if (flock(tfd, LOCK_EX | LOCK_NB) == 0)
            unlinkat(f->dirfd, de->d_name, 0);
        close(tfd);
    }
    closedir(d);
}

static int open_dir(file_blob *f)
{
    int err = make_dirs(f->dir);
    if (err)
        return funcd_error_set(err == ENOMEM ? FUNCD_ENOMEM : FUNCD_EIO,
                               "blob file %s: cannot create the directory: %s", f->dir,
                               strerror(err));
    f->dirfd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (f->dirfd < 0)
        return funcd_error_set(FUNCD_EIO, "blob file %s: cannot open the directory: %s", f->dir,
                               strerror(errno));
    remove_stale_temps(f);
    return 0;
}

FUNCD_EXTERN int funcd_blob_file_new(funcd_blob **out, const char *dir)
{
    if (!out)
        return funcd_error_set(FUNCD_EINVAL, "blob: funcd_blob_file_new needs an out pointer");
    *out = NULL;
    if (!dir || !dir[0])
        return funcd_error_set(FUNCD_EINVAL,
                               "blob: funcd_blob_file_new needs a directory (like "
                               "\"/var/lib/funcd/blobs\")");
    file_blob *f = calloc(1, sizeof(*f));
    if (!f || !(f->dir = strdup(dir))) {
        free(f);
        return funcd_error_set(FUNCD_ENOMEM, "blob: out of memory opening the file blob store %s",
                               dir);
    }
    f->dirfd = -1;
    atomic_init(&f->temp_seq, 0);
    int rc = open_dir(f);
    if (rc < 0) {
        file_free(&f->base);
        return rc;
    }
    f->base.version = FUNCD_BLOB_VERSION;
    f->base.name = "file";
    f->base.put = file_put;
    f->base.get = file_get;
    f->base.stat = file_stat;
    f->base.list = file_list;
    f->base.del = file_del;
    f->base.free = file_free;
    f->base.put_open = file_put_open;
    *out = &f->base;
    return 0;
}
