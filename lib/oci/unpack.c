/*
 * Image layers into a rootfs. Unlike a bundle, a layer lands on top of what
 * lower layers left, so the file system, not a table, is the truth about
 * what exists: every entry's directory is opened with openat2(2)
 * RESOLVE_IN_ROOT from the rootfs, which follows symbolic links the way the
 * sandbox will at run time but never out of the rootfs, and the entry itself
 * is then created, replaced or removed with *at() calls that never follow
 * its own name. A per-layer table of the entries seen tells whiteouts what
 * belongs to the layer itself (and so must stay).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "artifact/archive_lazy.h"
#include "artifact/extract_common.h"
#include "funcd/sys/error.h"
#include "oci/unpack.h"
#include "util/buf.h"

#define COPY_CHUNK 65536
/* Headers (and pax records) are decompressed too; see bundle.c for the sizing. */
#define HEADER_ALLOWANCE_PER_ENTRY 4096
#define HEADER_SLACK ((uint64_t)2 << 20)
#define MAX_NAME 255

#define WH_PREFIX ".wh."
#define WH_META_PREFIX ".wh..wh."
#define WH_OPAQUE ".wh..wh..opq"

/* A path cut into its components, each NUL-terminated in buf. */
typedef struct split_path {
    char buf[FUNCD_UNPACK_MAX_PATH + 1];
    const char *comp[FUNCD_UNPACK_MAX_DEPTH];
    int n;
} split_path;

/* A directory whose mode lacks owner rwx: it is applied last, so extraction can enter it. */
typedef struct deferred_mode {
    size_t path_off; /* into unpacker.deferred_paths */
    mode_t mode;
} deferred_mode;

typedef struct unpacker {
    struct archive *a;
    int root_fd;
    bool made_tmp, sync;
    const char *dest; /* the final name, for messages */
    size_t layer, layers;
    uint64_t max_bytes, max_entries, stream_cap;
    uint64_t total, entries, stream_done;
    funcd__path_table seen; /* the current layer's entries and their directories */
    funcd_buf deferred, deferred_paths;
    char *err;
    size_t errlen;
    split_path sp, target;
    char joined[FUNCD_UNPACK_MAX_PATH + 1];
    char buf[COPY_CHUNK];
} unpacker;

/* ---- messages ------------------------------------------------------------------------- */

static int fail(unpacker *u, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* "layer I of N: <what>" (just <what> outside a layer), into err and the last error. */
static int fail(unpacker *u, int code, const char *fmt, ...)
{
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (u->layer)
        funcd_error_set(code, "layer %zu of %zu: %s", u->layer, u->layers, what);
    else
        funcd_error_set(code, "%s", what);
    if (u->err && u->errlen)
        snprintf(u->err, u->errlen, "%s", funcd_error_last()->message);
    return code;
}

static int entry_fail(unpacker *u, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int entry_fail(unpacker *u, const char *path, const char *fmt, ...)
{
    char q[256], what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return fail(u, FUNCD_EINVAL, "entry %s: %s", funcd__quote_name(path, q, sizeof(q)), what);
}

static int errno_code(int e)
{
    if (e == ENOSPC || e == EDQUOT)
        return FUNCD_ENOSPC;
    return e == ENOMEM ? FUNCD_ENOMEM : FUNCD_EIO;
}

static int os_fail(unpacker *u, const char *path, const char *call)
{
    char q[256];
    int e = errno;
    return fail(u, errno_code(e), "cannot extract entry %s into %s: %s: %s",
                funcd__quote_name(path, q, sizeof(q)), u->dest, call, strerror(e));
}

static int oom(unpacker *u)
{
    return fail(u, FUNCD_ENOMEM, "out of memory while unpacking an image");
}

static int too_large(unpacker *u, const char *path)
{
    char lim[32], q[256];
    funcd__human_size(u->max_bytes, lim, sizeof(lim));
    return fail(u, FUNCD_EINVAL, "the image is larger than the %s uncompressed limit (at entry %s)",
                lim, funcd__quote_name(path ? path : "", q, sizeof(q)));
}

static int corrupt(unpacker *u, const char *path)
{
    char q[256];
    const char *why = archive_error_string(u->a);
    if (!why)
        why = "unexpected end of data";
    if (path)
        return fail(u, FUNCD_EINVAL, "truncated or corrupt at entry %s: %s",
                    funcd__quote_name(path, q, sizeof(q)), why);
    return fail(u, FUNCD_EINVAL, "truncated or corrupt: %s", why);
}

/* ---- paths -------------------------------------------------------------------------- */

/* Cuts `path` into components; NULL, or why the path is refused. */
static const char *split(const char *path, split_path *sp)
{
    size_t len = strlen(path);
    sp->n = 0;
    if (len > FUNCD_UNPACK_MAX_PATH)
        return "path is longer than 4096 bytes";
    if (path[0] == '/')
        return "path is absolute";
    memcpy(sp->buf, path, len + 1);
    for (char *s = sp->buf; *s;) {
        char *end = strchr(s, '/');
        char *next = end ? end + 1 : s + strlen(s);
        if (end)
            *end = '\0';
        if (strcmp(s, "..") == 0)
            return "path contains a \"..\" component";
        if (strlen(s) > MAX_NAME)
            return "a path component is longer than 255 bytes";
        if (*s && strcmp(s, ".") != 0) {
            if (sp->n == FUNCD_UNPACK_MAX_DEPTH)
                return "path is more than 256 levels deep";
            sp->comp[sp->n++] = s;
        }
        s = next;
    }
    return NULL;
}

/* The first `k` components of `sp` joined with "/" ("" for none), in u->joined. */
static const char *join(unpacker *u, const split_path *sp, int k)
{
    size_t o = 0;
    for (int i = 0; i < k; i++)
        o += (size_t)snprintf(u->joined + o, sizeof(u->joined) - o, "%s%s", i ? "/" : "",
                              sp->comp[i]);
    u->joined[o] = '\0';
    return u->joined;
}

/*
 * Without openat2 (older kernels, some seccomp profiles) a directory path
 * is walked one component at a time refusing every symbolic link (ELOOP):
 * safe, only stricter.
 */
static int open_dir_nofollow(int root_fd, const char *rel)
{
    int fd = fcntl(root_fd, F_DUPFD_CLOEXEC, 0);
    char comp[MAX_NAME + 1];
    for (const char *s = rel; fd >= 0 && *s;) {
        size_t len = strcspn(s, "/");
        snprintf(comp, sizeof(comp), "%.*s", (int)len, s);
        int next = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        close(fd);
        errno = e;
        fd = next;
        s += len + (s[len] == '/');
    }
    return fd;
}

/* Opens directory `rel` with the rootfs as "/" for every link on the way. */
static int open_in_root(unpacker *u, const char *rel)
{
    if (!*rel)
        return fcntl(u->root_fd, F_DUPFD_CLOEXEC, 0);
    struct open_how how = {
        .flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
        .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
    };
    long fd = syscall(SYS_openat2, u->root_fd, rel, &how, sizeof(how));
    if (fd >= 0 || (errno != ENOSYS && errno != EPERM))
        return (int)fd;
    return open_dir_nofollow(u->root_fd, rel);
}

/* Why the directory `k` components into `sp` cannot be entered. */
static int parent_fail(unpacker *u, const char *path, const split_path *sp, int k)
{
    char pre[FUNCD_UNPACK_MAX_PATH + 1], q[256];
    snprintf(pre, sizeof(pre), "%s", join(u, sp, k));
    funcd__quote_name(pre, q, sizeof(q));
    switch (errno) {
    case ENOTDIR: return entry_fail(u, path, "%s is not a directory", q);
    case ENOENT:
        return entry_fail(u, path, "%s is a symbolic link to a missing directory", q);
    case ELOOP:
        return entry_fail(u, path, "%s is a symbolic link that cannot be followed inside the rootfs",
                          q);
    case EXDEV: return entry_fail(u, path, "%s leads outside the rootfs", q);
    default: return os_fail(u, path, "open directory");
    }
}

static int make_dir(int dirfd, const char *name, mode_t mode)
{
    if (mkdirat(dirfd, name, 0700) < 0)
        return -1;
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fchmod(fd, mode);
    close(fd);
    return rc;
}

/*
 * Opens the directory that holds the last component of `sp`. Missing
 * directories are created (0755) when `create`; otherwise *out is -1 and
 * the result 0 when one is missing.
 */
static int open_parent(unpacker *u, const char *path, const split_path *sp, bool create, int *out)
{
    *out = open_in_root(u, join(u, sp, sp->n - 1));
    if (*out >= 0)
        return 0;
    if (errno != ENOENT)
        return parent_fail(u, path, sp, sp->n - 1);
    if (!create)
        return 0;
    int fd = fcntl(u->root_fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return os_fail(u, path, "open directory");
    for (int i = 0; i < sp->n - 1; i++) {
        int next = open_in_root(u, join(u, sp, i + 1));
        if (next < 0 && errno == ENOENT) {
            if (make_dir(fd, sp->comp[i], 0755) < 0 && errno != EEXIST) {
                int rc = os_fail(u, path, "mkdir");
                close(fd);
                return rc;
            }
            next = open_in_root(u, join(u, sp, i + 1));
        }
        int e = errno;
        close(fd);
        errno = e;
        if (next < 0)
            return parent_fail(u, path, sp, i + 1);
        fd = next;
    }
    *out = fd;
    return 0;
}

/* ---- the table of this layer's entries ------------------------------------------------ */

/* The table node of the first `k` components of `sp`, or NULL. */
static funcd__path_node *seen_node(unpacker *u, const split_path *sp, int k)
{
    funcd__path_node *cur = &u->seen.root;
    for (int i = 0; cur && i < k; i++)
        cur = funcd__path_table_find(&u->seen, cur, sp->comp[i]);
    return cur;
}

static int mark_seen(unpacker *u)
{
    funcd__path_node *cur = &u->seen.root;
    for (int i = 0; i < u->sp.n; i++) {
        funcd__path_node *next = funcd__path_table_find(&u->seen, cur, u->sp.comp[i]);
        if (!next && !(next = funcd__path_table_add(&u->seen, cur, u->sp.comp[i], 0)))
            return oom(u);
        cur = next;
    }
    return 0;
}

/* ---- whiteouts ---------------------------------------------------------------------- */

/* The names in directory `dfd`, NUL-separated in `out`; -1 with errno. */
static int list_dir(int dfd, funcd_buf *out)
{
    int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    struct dirent *de;
    int rc = 0;
    while (!rc && (errno = 0, de = readdir(d)))
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            rc = funcd_buf_append(out, de->d_name, strlen(de->d_name) + 1);
    if (!rc && errno)
        rc = -1;
    int e = errno;
    closedir(d);
    errno = e;
    return rc;
}

/*
 * Removes from directory `dfd` everything lower layers put there: what
 * `dir` (this layer's node for it, NULL for none) does not list goes,
 * directories it lists are cleared the same way.
 */
static int clear_lower(unpacker *u, const char *path, int dfd, funcd__path_node *dir)
{
    funcd_buf names = FUNCD_BUF_INIT;
    int rc = 0;
    if (list_dir(dfd, &names) < 0)
        rc = os_fail(u, path, "read directory");
    for (size_t off = 0; !rc && off < names.len; off += strlen(names.data + off) + 1) {
        const char *name = names.data + off;
        funcd__path_node *child = dir ? funcd__path_table_find(&u->seen, dir, name) : NULL;
        if (!child) {
            if (funcd__remove_tree_at(dfd, name) < 0)
                rc = os_fail(u, path, "remove");
            continue;
        }
        int cfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (cfd >= 0) {
            rc = clear_lower(u, path, cfd, child);
            close(cfd);
        }
    }
    funcd_buf_free(&names);
    return rc;
}

/* "D/.wh.NAME" hides D/NAME of lower layers; "D/.wh..wh..opq" hides all of D's lower content. */
static int whiteout(unpacker *u, const char *path)
{
    const split_path *sp = &u->sp;
    const char *name = sp->comp[sp->n - 1];
    bool opaque = strcmp(name, WH_OPAQUE) == 0;
    if (!opaque && strncmp(name, WH_META_PREFIX, strlen(WH_META_PREFIX)) == 0)
        return 0; /* aufs bookkeeping, meaningless here */
    const char *hidden = name + strlen(WH_PREFIX);
    if (!opaque && (!*hidden || strcmp(hidden, ".") == 0 || strcmp(hidden, "..") == 0))
        return entry_fail(u, path, "whiteout names no file");

    int pfd, rc = open_parent(u, path, sp, false, &pfd);
    if (rc || pfd < 0)
        return rc; /* nothing below to hide */
    funcd__path_node *dir = seen_node(u, sp, sp->n - 1);
    if (opaque) {
        rc = clear_lower(u, path, pfd, dir);
    } else {
        funcd__path_node *self = dir ? funcd__path_table_find(&u->seen, dir, hidden) : NULL;
        if (!self) {
            if (funcd__remove_tree_at(pfd, hidden) < 0)
                rc = os_fail(u, path, "remove");
        } else { /* this layer made it: only what lower layers left inside goes */
            int cfd = openat(pfd, hidden, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (cfd >= 0) {
                rc = clear_lower(u, path, cfd, self);
                close(cfd);
            }
        }
    }
    close(pfd);
    return rc;
}

/* ---- entries ------------------------------------------------------------------------ */

static bool stream_too_large(unpacker *u)
{
    int64_t consumed = archive_filter_bytes(u->a, 0);
    return consumed > 0 && u->stream_done + (uint64_t)consumed > u->stream_cap;
}

/* Reads the entry's data to its end, counting it, into `fd` when >= 0. */
static int copy_data(unpacker *u, const char *path, int fd)
{
    for (;;) {
        la_ssize_t n = archive_read_data(u->a, u->buf, sizeof(u->buf));
        if (n == 0)
            return 0;
        if (n < 0)
            return corrupt(u, path);
        if ((uint64_t)n > u->max_bytes - u->total)
            return too_large(u, path);
        u->total += (uint64_t)n;
        if (stream_too_large(u))
            return too_large(u, path);
        if (fd >= 0 && funcd__write_all(fd, u->buf, (size_t)n) < 0)
            return os_fail(u, path, "write");
    }
}

/* Removes what is at `name` unless it is a directory and `keep_dir`; 1 when kept. */
static int clear_name(unpacker *u, const char *path, int pfd, const char *name, bool keep_dir)
{
    struct stat st;
    if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : os_fail(u, path, "stat");
    if (keep_dir && S_ISDIR(st.st_mode))
        return 1;
    return funcd__remove_tree_at(pfd, name) < 0 ? os_fail(u, path, "remove") : 0;
}

/* Keeps the permission bits, the sticky bit included, never setuid or setgid. */
static mode_t safe_mode(struct archive_entry *e)
{
    return archive_entry_perm(e) & 01777;
}

static int defer_mode(unpacker *u, mode_t mode)
{
    deferred_mode d = {u->deferred_paths.len, mode};
    const char *p = join(u, &u->sp, u->sp.n);
    if (funcd_buf_append(&u->deferred_paths, p, strlen(p) + 1) < 0 ||
        funcd_buf_append(&u->deferred, &d, sizeof(d)) < 0)
        return oom(u);
    return 0;
}

static int write_dir(unpacker *u, const char *path, int pfd, const char *name,
                     struct archive_entry *e)
{
    int rc = clear_name(u, path, pfd, name, true);
    if (rc < 0)
        return rc;
    if (rc == 0 && mkdirat(pfd, name, 0700) < 0)
        return os_fail(u, path, "mkdir");
    int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return os_fail(u, path, "open directory");
    mode_t mode = safe_mode(e);
    rc = fchmod(fd, mode | 0700) < 0 ? os_fail(u, path, "chmod") : 0;
    close(fd);
    if (!rc && (mode & 0700) != 0700)
        rc = defer_mode(u, mode);
    return rc;
}

static int write_file(unpacker *u, const char *path, int pfd, const char *name,
                      struct archive_entry *e)
{
    int rc = clear_name(u, path, pfd, name, false);
    if (rc)
        return rc;
    int fd = openat(pfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return os_fail(u, path, "create");
    rc = copy_data(u, path, fd);
    if (!rc && fchmod(fd, safe_mode(e)) < 0)
        rc = os_fail(u, path, "chmod");
    if (close(fd) < 0 && !rc)
        rc = os_fail(u, path, "close");
    return rc;
}

static int write_symlink(unpacker *u, const char *path, int pfd, const char *name,
                         const char *target)
{
    if (!target || !*target)
        return entry_fail(u, path, "symbolic link with an empty target");
    if (strlen(target) > FUNCD_UNPACK_MAX_PATH)
        return entry_fail(u, path, "symbolic link target is longer than 4096 bytes");
    int rc = clear_name(u, path, pfd, name, false);
    if (!rc && symlinkat(target, pfd, name) < 0)
        rc = os_fail(u, path, "symlink");
    return rc;
}

static int write_hardlink(unpacker *u, const char *path, int pfd, const char *name,
                          const char *target)
{
    char q[256];
    const char *why = split(target, &u->target);
    if (!why && u->target.n == 0)
        why = "names the rootfs itself";
    if (why)
        return entry_fail(u, path, "hard link target %s: %s",
                          funcd__quote_name(target, q, sizeof(q)), why);
    char self[FUNCD_UNPACK_MAX_PATH + 1];
    snprintf(self, sizeof(self), "%s", join(u, &u->sp, u->sp.n));
    if (strcmp(self, join(u, &u->target, u->target.n)) == 0)
        return entry_fail(u, path, "hard link to itself");

    int tfd, rc = open_parent(u, path, &u->target, false, &tfd);
    const char *tname = u->target.comp[u->target.n - 1];
    struct stat st;
    if (!rc && (tfd < 0 || fstatat(tfd, tname, &st, AT_SYMLINK_NOFOLLOW) < 0))
        rc = entry_fail(u, path, "hard link target %s is not an earlier entry of the image",
                        funcd__quote_name(target, q, sizeof(q)));
    else if (!rc && S_ISDIR(st.st_mode))
        rc = entry_fail(u, path, "hard link target %s is a directory",
                        funcd__quote_name(target, q, sizeof(q)));
    if (!rc)
        rc = clear_name(u, path, pfd, name, false);
    if (!rc && linkat(tfd, tname, pfd, name, 0) < 0)
        rc = os_fail(u, path, "link");
    if (tfd >= 0)
        close(tfd);
    return rc;
}

/* Creates (or replaces) the entry in u->sp in its open parent directory `pfd`. */
static int place_entry(unpacker *u, const char *path, int pfd, struct archive_entry *e)
{
    const char *name = u->sp.comp[u->sp.n - 1];
    const char *hard = funcd__entry_hardlink(e);
    if (hard)
        return write_hardlink(u, path, pfd, name, hard);
    switch (archive_entry_filetype(e)) {
    case AE_IFREG: return write_file(u, path, pfd, name, e);
    case AE_IFDIR: return write_dir(u, path, pfd, name, e);
    default: return write_symlink(u, path, pfd, name, funcd__entry_symlink(e));
    }
}

static int apply_entry(unpacker *u, struct archive_entry *e)
{
    const char *path = funcd__entry_path(e);
    if (!path)
        return fail(u, FUNCD_EINVAL, "entry %llu has no readable path",
                    (unsigned long long)u->entries);
    const char *why = split(path, &u->sp);
    if (why)
        return entry_fail(u, path, "%s", why);
    mode_t ft = archive_entry_filetype(e);
    if (u->sp.n == 0) { /* "./": the rootfs itself keeps 0755 */
        if (ft != AE_IFDIR || funcd__entry_hardlink(e))
            return entry_fail(u, path, "path is empty");
        return copy_data(u, path, -1);
    }
    int rc;
    if (strncmp(u->sp.comp[u->sp.n - 1], WH_PREFIX, strlen(WH_PREFIX)) == 0) {
        rc = whiteout(u, path);
        return rc ? rc : copy_data(u, path, -1);
    }
    if (!funcd__entry_hardlink(e) && ft != AE_IFREG && ft != AE_IFDIR && ft != AE_IFLNK)
        return entry_fail(u, path, "%s", funcd__refused_type(ft));
    int64_t size = archive_entry_size(e);
    if (archive_entry_size_is_set(e) && size > 0 && (uint64_t)size > u->max_bytes - u->total)
        return too_large(u, path);

    int pfd;
    if ((rc = open_parent(u, path, &u->sp, true, &pfd)))
        return rc;
    rc = place_entry(u, path, pfd, e);
    close(pfd);
    if (!rc)
        rc = mark_seen(u);
    /* Whatever data an entry other than a file carries is read (and counted) too. */
    return rc ? rc : copy_data(u, path, -1);
}

/* ---- layers ------------------------------------------------------------------------- */

static int not_tar(unpacker *u)
{
    const char *why = archive_error_string(u->a);
    if (archive_filter_count(u->a) > 2)
        why = "it is compressed more than once";
    return fail(u, FUNCD_EINVAL, "not a tar archive (plain, gzip or zstd)%s%s%s",
                why ? " (" : "", why ? why : "", why ? ")" : "");
}

static int walk_layer(unpacker *u)
{
    for (bool first = true;; first = false) {
        struct archive_entry *e;
        int r = archive_read_next_header(u->a, &e);
        if (first && r != ARCHIVE_EOF &&
            ((archive_format(u->a) & ARCHIVE_FORMAT_BASE_MASK) != ARCHIVE_FORMAT_TAR ||
             archive_filter_count(u->a) > 2))
            return not_tar(u);
        if (r == ARCHIVE_EOF)
            return 0;
        if (r < ARCHIVE_WARN)
            return first ? not_tar(u) : corrupt(u, NULL);
        if (++u->entries > u->max_entries)
            return fail(u, FUNCD_EINVAL, "the image has more than %llu entries",
                        (unsigned long long)u->max_entries);
        if (stream_too_large(u))
            return too_large(u, funcd__entry_path(e));
        int rc = apply_entry(u, e);
        if (rc)
            return rc;
    }
}

static int apply_layer(unpacker *u, const char *layer_path)
{
    int rc, fd = open(layer_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return fail(u, e == ENOENT ? FUNCD_ENOTFOUND : FUNCD_EIO, "cannot open %s: %s",
                    layer_path, strerror(e));
    }
    if (!(u->a = archive_read_new())) {
        close(fd);
        return oom(u);
    }
    /* zstd is optional: without it a zstd layer fails as "not a tar archive". */
    archive_read_support_filter_zstd(u->a);
    if (archive_read_support_format_tar(u->a) != ARCHIVE_OK ||
        archive_read_support_filter_gzip(u->a) != ARCHIVE_OK)
        rc = fail(u, FUNCD_EIO, "libarchive cannot read gzip-compressed tar: %s",
                  archive_error_string(u->a));
    else if (archive_read_open_fd(u->a, fd, COPY_CHUNK) != ARCHIVE_OK)
        rc = not_tar(u);
    else
        rc = walk_layer(u);
    int64_t consumed = archive_filter_bytes(u->a, 0);
    if (consumed > 0)
        u->stream_done += (uint64_t)consumed;
    archive_read_free(u->a);
    u->a = NULL;
    close(fd);
    funcd__path_table_free(&u->seen);
    return rc;
}

/* ---- finishing ---------------------------------------------------------------------- */

/* Sets a recorded directory mode unless a later layer replaced the directory. */
static int restore_mode(unpacker *u, const char *path, mode_t mode)
{
    int pfd, rc;
    if (split(path, &u->sp) || (rc = open_parent(u, path, &u->sp, false, &pfd)) || pfd < 0)
        return 0;
    int fd = openat(pfd, u->sp.comp[u->sp.n - 1], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    rc = fd >= 0 && fchmod(fd, mode) < 0 ? os_fail(u, path, "chmod") : 0;
    if (fd >= 0)
        close(fd);
    close(pfd);
    return rc;
}

static int apply_deferred_modes(unpacker *u)
{
    const deferred_mode *d = (const deferred_mode *)u->deferred.data;
    int rc = 0;
    /* Children were recorded after their parents: restore them first. */
    for (size_t i = u->deferred.len / sizeof(*d); !rc && i-- > 0;)
        rc = restore_mode(u, u->deferred_paths.data + d[i].path_off, d[i].mode);
    return rc;
}

/* An empty directory `name` under `dirfd` unless something of that name is there. */
static int mount_point(unpacker *u, int dirfd, const char *name, mode_t mode)
{
    if (make_dir(dirfd, name, mode) < 0 && errno != EEXIST)
        return os_fail(u, name, "mkdir");
    return 0;
}

static int add_mount_points(unpacker *u)
{
    int rc = mount_point(u, u->root_fd, "proc", 0555);
    if (!rc)
        rc = mount_point(u, u->root_fd, "dev", 0755);
    if (!rc)
        rc = mount_point(u, u->root_fd, "tmp", 01777);
    if (!rc)
        rc = mount_point(u, u->root_fd, "run", 0755);
    if (rc)
        return rc;
    int run = open_in_root(u, "run");
    if (run < 0)
        return fail(u, FUNCD_EINVAL, "the image's /run is not a directory inside the rootfs "
                                     "(the sandbox mounts run/funcd)");
    rc = mount_point(u, run, "funcd", 0755);
    close(run);
    return rc;
}

static int known_media_type(const char *mt)
{
    return mt && (strcmp(mt, FUNCD_OCI_MT_LAYER_TAR) == 0 ||
                  strcmp(mt, FUNCD_OCI_MT_LAYER_GZIP) == 0 ||
                  strcmp(mt, FUNCD_OCI_MT_LAYER_ZSTD) == 0 ||
                  strcmp(mt, FUNCD_OCI_MT_DOCKER_LAYER) == 0);
}

static bool zstd_available(void)
{
    struct archive *a = archive_read_new();
    bool ok = a && archive_read_support_filter_zstd(a) == ARCHIVE_OK;
    if (a)
        archive_read_free(a);
    return ok;
}

static int check_media_types(unpacker *u, const char *const *media_types, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *mt = media_types[i];
        u->layer = i + 1;
        if (!known_media_type(mt))
            return fail(u, FUNCD_EINVAL,
                        "media type \"%s\" cannot be unpacked (expected " FUNCD_OCI_MT_LAYER_TAR
                        "[+gzip|+zstd] or " FUNCD_OCI_MT_DOCKER_LAYER ")",
                        mt ? mt : "");
        if (strcmp(mt, FUNCD_OCI_MT_LAYER_ZSTD) == 0 && !zstd_available())
            return fail(u, FUNCD_EINVAL, "zstd-compressed layers need libarchive built with "
                                         "libzstd, which this machine's libarchive is not");
    }
    u->layer = 0;
    return 0;
}

static int unpack_into(unpacker *u, const char *const *layer_paths, size_t n)
{
    int rc = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        u->layer = i + 1;
        rc = apply_layer(u, layer_paths[i]);
    }
    u->layer = 0;
    if (!rc)
        rc = add_mount_points(u);
    if (!rc)
        rc = apply_deferred_modes(u);
    /* Renamed into place only once durable, so a crash never leaves a half rootfs behind it. */
    if (!rc && u->sync && syncfs(u->root_fd) < 0)
        rc = os_fail(u, ".", "syncfs");
    return rc;
}

static int publish(unpacker *u, const char *tmp, const char *rootfs_dir)
{
    int r = renameat2(AT_FDCWD, tmp, AT_FDCWD, rootfs_dir, RENAME_NOREPLACE);
    if (r < 0 && errno == EINVAL) /* a file system without RENAME_NOREPLACE */
        r = rename(tmp, rootfs_dir);
    if (r == 0)
        return 0;
    int e = errno;
    return fail(u, e == EEXIST || e == ENOTEMPTY ? FUNCD_EEXISTS : errno_code(e),
                "cannot rename %s to %s: %s", tmp, rootfs_dir, strerror(e));
}

static void setup(unpacker *u, const funcd_unpack_limits *lim, const char *dest, char *err,
                  size_t errlen)
{
    u->max_bytes = lim && lim->max_bytes ? lim->max_bytes : FUNCD_UNPACK_MAX_BYTES;
    u->max_entries = lim && lim->max_entries ? lim->max_entries : FUNCD_UNPACK_MAX_ENTRIES;
    uint64_t headers = u->max_entries > (UINT64_MAX / 4) / HEADER_ALLOWANCE_PER_ENTRY
                           ? UINT64_MAX / 4
                           : u->max_entries * HEADER_ALLOWANCE_PER_ENTRY + HEADER_SLACK;
    u->stream_cap = u->max_bytes > UINT64_MAX - headers ? UINT64_MAX : u->max_bytes + headers;
    u->sync = !(lim && lim->skip_sync);
    u->dest = dest;
    u->err = err;
    u->errlen = errlen;
    u->root_fd = -1;
}

static int prepare(unpacker *u, const char *const *media_types, size_t n, const char *rootfs_dir,
                   char *tmp)
{
    int rc = check_media_types(u, media_types, n);
    if (rc)
        return rc;
    struct stat st;
    if (lstat(rootfs_dir, &st) == 0)
        return fail(u, FUNCD_EEXISTS, "%s already exists", rootfs_dir);
    if (errno != ENOENT)
        return fail(u, FUNCD_EIO, "cannot stat %s: %s", rootfs_dir, strerror(errno));
    if (!mkdtemp(tmp))
        return fail(u, errno_code(errno), "cannot create %s: %s", tmp, strerror(errno));
    u->made_tmp = true;
    u->root_fd = open(tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (u->root_fd < 0 || fchmod(u->root_fd, 0755) < 0)
        return fail(u, FUNCD_EIO, "cannot open %s: %s", tmp, strerror(errno));
    return 0;
}

int funcd_oci_unpack(const char *const *layer_paths, const char *const *media_types, size_t n,
                     const char *rootfs_dir, const funcd_unpack_limits *lim, char *err,
                     size_t errlen)
{
    if (!rootfs_dir || !*rootfs_dir || (n && (!layer_paths || !media_types))) {
        if (err && errlen)
            snprintf(err, errlen, "unpack: no rootfs directory or no layer list");
        return funcd_error_set(FUNCD_EINVAL, "unpack: no rootfs directory or no layer list");
    }
    if (funcd__archive_load() < 0) {
        if (err && errlen)
            snprintf(err, errlen, "%s", funcd_error_last()->message);
        return FUNCD_EIO;
    }
    unpacker *u = calloc(1, sizeof(*u));
    size_t tmp_len = strlen(rootfs_dir) + sizeof(".tmp-XXXXXX");
    char *tmp = malloc(tmp_len);
    if (!u || !tmp) {
        free(u);
        free(tmp);
        if (err && errlen)
            snprintf(err, errlen, "out of memory while unpacking an image");
        return funcd_error_set(FUNCD_ENOMEM, "out of memory while unpacking an image");
    }
    snprintf(tmp, tmp_len, "%s.tmp-XXXXXX", rootfs_dir);
    setup(u, lim, rootfs_dir, err, errlen);
    u->layers = n;

    int rc = prepare(u, media_types, n, rootfs_dir, tmp);
    if (!rc)
        rc = unpack_into(u, layer_paths, n);
    if (u->root_fd >= 0)
        close(u->root_fd);
    if (!rc)
        rc = publish(u, tmp, rootfs_dir);
    if (rc && u->made_tmp)
        funcd__remove_tree_at(AT_FDCWD, tmp);
    funcd_buf_free(&u->deferred);
    funcd_buf_free(&u->deferred_paths);
    free(tmp);
    free(u);
    return rc;
}
