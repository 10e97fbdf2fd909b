/*
 * Validating and extracting bundles. One walker does both: it reads the
 * archive once, checks every entry against a table of the paths seen so far
 * (the table, not the file system, decides what is safe, so the check and
 * the extraction agree), and, when extracting, creates each entry with
 * *at() calls under directories it created itself, never following a link.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "artifact/archive_lazy.h"
#include "artifact/extract_common.h"
#include "artifact/internal.h"
#include "funcd/sys/error.h"

#define COPY_CHUNK 65536
/*
 * Tar headers are decompressed too but are not file content. Each entry may
 * bring a header block and pax or GNU long-name records; libarchive caps one
 * such record at 1 MiB. Beyond this allowance the stream counts as a bomb.
 */
#define HEADER_ALLOWANCE_PER_ENTRY 4096
#define HEADER_SLACK ((uint64_t)2 << 20)

#define NOT_GZIP_TAR "bundle is not a gzip-compressed tar archive"

/* ---- messages ---------------------------------------------------------------------- */

int funcd__bundle_fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (err && errlen)
        snprintf(err, errlen, "%s", msg);
    return funcd_error_set(code, "%s", msg);
}

/* ---- the table of paths seen (artifact/extract_common.h) -------------------------------- */

enum node_type { NODE_DIR = 1, NODE_FILE, NODE_LINK };

typedef funcd__path_node node;

/* ---- paths --------------------------------------------------------------------------- */

enum path_verdict {
    PATH_OK,
    PATH_ABSOLUTE,
    PATH_ESCAPES,
    PATH_DOTDOT,
    PATH_TOO_LONG,
    PATH_TOO_DEEP
};

/* A path cut into its components: "." and empty ones dropped, each NUL-terminated in buf. */
typedef struct split_path {
    char buf[FUNCD_BUNDLE_MAX_PATH + 1];
    const char *comp[FUNCD_BUNDLE_MAX_DEPTH];
    int n;
} split_path;

static int split(const char *path, split_path *sp)
{
    size_t len = strlen(path);
    sp->n = 0;
    if (len > FUNCD_BUNDLE_MAX_PATH)
        return PATH_TOO_LONG;
    if (path[0] == '/')
        return PATH_ABSOLUTE;
    memcpy(sp->buf, path, len + 1);
    int depth = 0;
    bool dotdot = false, escapes = false;
    for (char *s = sp->buf; *s;) {
        char *end = strchr(s, '/');
        char *next = end ? end + 1 : s + strlen(s);
        if (end)
            *end = '\0';
        if (strcmp(s, "..") == 0) {
            dotdot = true;
            escapes |= --depth < 0;
        } else if (*s && strcmp(s, ".") != 0) {
            if (sp->n == FUNCD_BUNDLE_MAX_DEPTH)
                return PATH_TOO_DEEP;
            sp->comp[sp->n++] = s;
            depth++;
        }
        s = next;
    }
    if (escapes)
        return PATH_ESCAPES;
    return dotdot ? PATH_DOTDOT : PATH_OK;
}

static const char *path_problem(int verdict)
{
    switch (verdict) {
    case PATH_ABSOLUTE: return "path is absolute";
    case PATH_ESCAPES: return "path escapes the bundle";
    case PATH_DOTDOT: return "path contains a \"..\" component";
    case PATH_TOO_LONG: return "path is longer than 1024 bytes";
    default: return "path is more than 64 levels deep";
    }
}

/*
 * Why a symlink target is unsafe, or NULL. Only leading ".." are allowed:
 * they climb real directories (the link's parents, which the table keeps
 * from ever being links). A ".." after a name could climb out of a
 * directory reached through another link, which lexical checks cannot see.
 */
static const char *symlink_problem(const char *target, int link_depth)
{
    if (!*target)
        return "is empty";
    if (strlen(target) > FUNCD_BUNDLE_MAX_PATH)
        return "is longer than 1024 bytes";
    if (target[0] == '/')
        return "is absolute";
    int up = 0;
    bool named = false;
    for (const char *s = target; *s;) {
        size_t len = strcspn(s, "/");
        if (len == 2 && s[0] == '.' && s[1] == '.') {
            if (named)
                return "has \"..\" after a name (only leading \"..\" are allowed)";
            up++;
        } else if (len && !(len == 1 && s[0] == '.')) {
            named = true;
        }
        s += len;
        if (*s)
            s++;
    }
    return up > link_depth ? "escapes the bundle" : NULL;
}

/* ---- the walker ------------------------------------------------------------------------ */

typedef struct walker {
    struct archive *a;
    uint64_t max_compressed, max_total, max_entries, stream_cap;
    uint64_t total, entries;
    funcd__path_table table;
    int root_fd; /* -1: validate only */
    const char *dest;
    char *err;
    size_t errlen;
    char buf[COPY_CHUNK];
    split_path sp, target;
} walker;

#define FAIL(w, code, ...) funcd__bundle_fail((w)->err, (w)->errlen, code, __VA_ARGS__)

static int entry_fail(walker *w, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* `entry "<path>": <what>` with FUNCD_EINVAL. */
static int entry_fail(walker *w, const char *path, const char *fmt, ...)
{
    char q[256], what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return FAIL(w, FUNCD_EINVAL, "entry %s: %s", funcd__quote_name(path, q, sizeof(q)), what);
}

static int os_fail(walker *w, const char *path, const char *call)
{
    char q[256];
    int e = errno;
    return FAIL(w, FUNCD_EIO, "cannot extract entry %s into %s: %s: %s",
                funcd__quote_name(path, q, sizeof(q)), w->dest, call, strerror(e));
}

static int oom(walker *w)
{
    return FAIL(w, FUNCD_ENOMEM, "out of memory while reading a bundle");
}

static int too_large(walker *w, const char *path)
{
    char lim[32], q[256];
    funcd__human_size(w->max_total, lim, sizeof(lim));
    if (path)
        return FAIL(w, FUNCD_EINVAL,
                    "bundle is larger than the %s uncompressed limit (at entry %s)", lim,
                    funcd__quote_name(path, q, sizeof(q)));
    return FAIL(w, FUNCD_EINVAL, "bundle is larger than the %s uncompressed limit", lim);
}

static int corrupt(walker *w, const char *path)
{
    char q[256];
    const char *why = archive_error_string(w->a);
    if (!why)
        why = "unexpected end of data";
    if (path)
        return FAIL(w, FUNCD_EINVAL, "bundle is truncated or corrupt at entry %s: %s",
                    funcd__quote_name(path, q, sizeof(q)), why);
    return FAIL(w, FUNCD_EINVAL, "bundle is truncated or corrupt: %s", why);
}

static bool stream_too_large(walker *w)
{
    int64_t consumed = archive_filter_bytes(w->a, 0);
    return consumed > 0 && (uint64_t)consumed > w->stream_cap;
}

/* Reads the entry's data to its end, counting it, into `fd` when >= 0. */
static int copy_data(walker *w, const char *path, int fd)
{
    for (;;) {
        la_ssize_t n = archive_read_data(w->a, w->buf, sizeof(w->buf));
        if (n == 0)
            return 0;
        if (n < 0)
            return corrupt(w, path);
        if ((uint64_t)n > w->max_total - w->total)
            return too_large(w, path);
        w->total += (uint64_t)n;
        if (stream_too_large(w))
            return too_large(w, path);
        if (fd >= 0 && funcd__write_all(fd, w->buf, (size_t)n) < 0)
            return os_fail(w, path, "write");
    }
}

static void close_parent(walker *w, int fd)
{
    if (fd >= 0 && fd != w->root_fd)
        close(fd);
}

static int make_dir(walker *w, const char *path, int parent_fd, const char *name)
{
    if (mkdirat(parent_fd, name, 0755) < 0)
        return os_fail(w, path, "mkdir");
    /* The umask may have narrowed the mode; workers need 0755. */
    int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return os_fail(w, path, "open directory");
    int rc = fchmod(fd, 0755) < 0 ? os_fail(w, path, "chmod") : 0;
    close(fd);
    return rc;
}

/* "a/b" for the first `n` components, for messages. */
static const char *prefix_of(const split_path *sp, int n, char *out, size_t out_len)
{
    size_t o = 0;
    out[0] = '\0';
    for (int i = 0; i < n && o < out_len; i++)
        o += (size_t)snprintf(out + o, out_len - o, "%s%s", i ? "/" : "", sp->comp[i]);
    return out;
}

/* Opens directory `name` under `fd`, creating it first when `create`; closes `fd`. */
static int descend(walker *w, const char *path, int *fd, const char *name, bool create)
{
    int rc = create ? make_dir(w, path, *fd, name) : 0;
    int next = rc ? -1 : openat(*fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int e = errno;
    close_parent(w, *fd);
    *fd = next;
    errno = e;
    if (!rc && next < 0)
        rc = os_fail(w, path, "open directory");
    return rc;
}

/* Opens the directory holding component `upto` of `sp` (all of them exist), or the root. */
static int open_parent(walker *w, const char *path, const split_path *sp, int upto, int *out)
{
    int rc = 0, fd = w->root_fd;
    for (int i = 0; !rc && i < upto; i++)
        rc = descend(w, path, &fd, sp->comp[i], false);
    *out = fd;
    return rc;
}

/*
 * Finds or records the parent directories of the entry in w->sp, creating
 * on disk the ones seen for the first time. `*parent` is the table node of
 * the entry's directory and `*parent_fd` that directory, open (-1 when only
 * validating; close it with close_parent).
 */
static int place_parents(walker *w, const char *path, node **parent, int *parent_fd)
{
    const split_path *sp = &w->sp;
    node *cur = &w->table.root;
    int rc = 0, fd = w->root_fd;
    for (int i = 0; !rc && i < sp->n - 1; i++) {
        node *next = funcd__path_table_find(&w->table, cur, sp->comp[i]);
        bool created = !next;
        if (next && next->type != NODE_DIR) {
            char pre[FUNCD_BUNDLE_MAX_PATH + 1], q[256];
            rc = entry_fail(w, path, "%s is %s, not a directory",
                            funcd__quote_name(prefix_of(sp, i + 1, pre, sizeof(pre)), q, sizeof(q)),
                            next->type == NODE_LINK ? "a symbolic link" : "a file");
        } else if (!next &&
                   !(next = funcd__path_table_add(&w->table, cur, sp->comp[i], NODE_DIR))) {
            rc = oom(w);
        } else if (fd >= 0) {
            rc = descend(w, path, &fd, sp->comp[i], created);
        }
        cur = next;
    }
    if (rc) {
        close_parent(w, fd);
        return rc;
    }
    *parent = cur;
    *parent_fd = fd;
    return 0;
}

static int add_node(walker *w, node *parent, const char *name, int type, node **out)
{
    if (!(*out = funcd__path_table_add(&w->table, parent, name, type)))
        return oom(w);
    return 0;
}

static int extract_file(walker *w, const char *path, int parent_fd, const char *name,
                        struct archive_entry *e)
{
    int fd = openat(parent_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return os_fail(w, path, "create");
    int rc = copy_data(w, path, fd);
    /* Only the owner's exec bit survives: no setuid, setgid, sticky or odd modes. */
    mode_t mode = (archive_entry_perm(e) & 0100) ? 0755 : 0644;
    if (!rc && fchmod(fd, mode) < 0)
        rc = os_fail(w, path, "chmod");
    if (close(fd) < 0 && !rc)
        rc = os_fail(w, path, "close");
    return rc;
}

/* Validates a hard link's target: an earlier regular file. */
static int find_link_target(walker *w, const char *path, const char *target, node **out)
{
    char q[256];
    const char *why = "is not an earlier regular file in the bundle";
    int verdict = split(target, &w->target);
    if (verdict != PATH_OK)
        why = path_problem(verdict);
    node *cur = &w->table.root;
    for (int i = 0; verdict == PATH_OK && cur && i < w->target.n; i++) {
        if (cur->type != NODE_DIR)
            cur = NULL;
        else
            cur = funcd__path_table_find(&w->table, cur, w->target.comp[i]);
    }
    if (verdict != PATH_OK || !cur || cur->type != NODE_FILE)
        return entry_fail(w, path, "hard link target %s%s%s",
                          funcd__quote_name(target, q, sizeof(q)),
                          verdict == PATH_OK ? " " : ": ", why);
    *out = cur;
    return 0;
}

static int extract_hardlink(walker *w, const char *path, int parent_fd, const char *name)
{
    int tfd = -1;
    int rc = open_parent(w, path, &w->target, w->target.n - 1, &tfd);
    if (rc)
        return rc;
    if (linkat(tfd, w->target.comp[w->target.n - 1], parent_fd, name, 0) < 0)
        rc = os_fail(w, path, "link");
    close_parent(w, tfd);
    return rc;
}

/* Checks the entry's name and type, and places its parents (see place_parents). */
static int admit(walker *w, const char *path, struct archive_entry *e, int *type, node **parent,
                 int *parent_fd)
{
    int verdict = split(path, &w->sp);
    if (verdict != PATH_OK)
        return entry_fail(w, path, "%s", path_problem(verdict));
    mode_t ft = archive_entry_filetype(e);
    if (funcd__entry_hardlink(e))
        *type = 0;
    else if (ft == AE_IFREG)
        *type = NODE_FILE;
    else if (ft == AE_IFDIR)
        *type = NODE_DIR;
    else if (ft == AE_IFLNK)
        *type = NODE_LINK;
    else
        return entry_fail(w, path, "%s", funcd__refused_type(ft));

    if (w->sp.n == 0) {
        if (*type == NODE_DIR)
            return 0; /* "./": the bundle root itself */
        return entry_fail(w, path, "path is empty");
    }
    if (w->sp.n == 1 && strcmp(w->sp.comp[0], FUNCD_BUNDLE_COMPLETE_MARKER) == 0)
        return entry_fail(w, path,
                          "the top-level name \"" FUNCD_BUNDLE_COMPLETE_MARKER
                          "\" is reserved for funcd's cache marker");
    int64_t size = archive_entry_size(e);
    if (archive_entry_size_is_set(e) && size > 0 && (uint64_t)size > w->max_total - w->total)
        return too_large(w, path);
    return place_parents(w, path, parent, parent_fd);
}

/* Records the entry (type 0: a hard link) in its directory and, when extracting, creates it. */
static int place_entry(walker *w, const char *path, struct archive_entry *e, int type, node *parent,
                       int pfd)
{
    const char *name = w->sp.comp[w->sp.n - 1];
    node *self = funcd__path_table_find(&w->table, parent, name);
    if (self && !(self->type == NODE_DIR && type == NODE_DIR))
        return entry_fail(w, path, "duplicate path");
    if (self) /* a directory again */
        return 0;

    int rc;
    node *target = NULL;
    const char *link = NULL;
    if (type == 0) {
        if ((rc = find_link_target(w, path, funcd__entry_hardlink(e), &target)))
            return rc;
    } else if (type == NODE_LINK) {
        char q[256];
        const char *why;
        if (!(link = funcd__entry_symlink(e)))
            link = ""; /* libarchive has no target for an empty one */
        if ((why = symlink_problem(link, w->sp.n - 1)))
            return entry_fail(w, path, "symbolic link to %s %s",
                              funcd__quote_name(link, q, sizeof(q)), why);
    }
    if ((rc = add_node(w, parent, name, type ? type : NODE_FILE, &self)) || pfd < 0)
        return rc;
    if (type == NODE_FILE)
        return extract_file(w, path, pfd, name, e);
    if (type == NODE_DIR)
        return make_dir(w, path, pfd, name);
    if (type == NODE_LINK)
        return symlinkat(link, pfd, name) < 0 ? os_fail(w, path, "symlink") : 0;
    return extract_hardlink(w, path, pfd, name);
}

static int walk_entry(walker *w, struct archive_entry *e)
{
    const char *path = funcd__entry_path(e);
    if (!path)
        return FAIL(w, FUNCD_EINVAL, "bundle has an entry without a readable path (entry %llu)",
                    (unsigned long long)w->entries);
    int type = 0, pfd = -1, rc;
    node *parent = NULL;
    if ((rc = admit(w, path, e, &type, &parent, &pfd)))
        return rc;
    if (parent) { /* not the root entry */
        rc = place_entry(w, path, e, type, parent, pfd);
        close_parent(w, pfd);
    }
    /* Whatever data an entry other than a file carries is read (and counted) too. */
    return rc ? rc : copy_data(w, path, -1);
}

static bool is_gzip_tar(struct archive *a)
{
    return archive_filter_count(a) == 2 && archive_filter_code(a, 0) == ARCHIVE_FILTER_GZIP &&
           (archive_format(a) & ARCHIVE_FORMAT_BASE_MASK) == ARCHIVE_FORMAT_TAR;
}

static int not_gzip_tar(walker *w)
{
    const char *why = archive_error_string(w->a);
    if ((archive_format(w->a) & ARCHIVE_FORMAT_BASE_MASK) == ARCHIVE_FORMAT_TAR) {
        if (archive_filter_count(w->a) > 2)
            why = "it is compressed more than once";
        else if (archive_filter_code(w->a, 0) != ARCHIVE_FILTER_GZIP)
            why = "it is a tar archive, but not compressed";
    }
    if (!why)
        return FAIL(w, FUNCD_EINVAL, NOT_GZIP_TAR);
    return FAIL(w, FUNCD_EINVAL, NOT_GZIP_TAR " (%s)", why);
}

static int walk_entries(walker *w)
{
    for (bool first = true;; first = false) {
        struct archive_entry *e;
        int r = archive_read_next_header(w->a, &e);
        if (first && !is_gzip_tar(w->a))
            return not_gzip_tar(w);
        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN)
            return corrupt(w, NULL);
        if (++w->entries > w->max_entries)
            return FAIL(w, FUNCD_EINVAL, "bundle has more than %llu entries",
                        (unsigned long long)w->max_entries);
        if (stream_too_large(w))
            return too_large(w, funcd__entry_path(e));
        int rc = walk_entry(w, e);
        if (rc)
            return rc;
    }
    if (!w->entries)
        return FAIL(w, FUNCD_EINVAL, "bundle is empty: the archive has no entries");
    return 0;
}

/* How many tar bytes (content and headers) may be decompressed, saturating. */
static uint64_t stream_cap(uint64_t max_total, uint64_t max_entries)
{
    uint64_t headers = max_entries > (UINT64_MAX / 4) / HEADER_ALLOWANCE_PER_ENTRY
                           ? UINT64_MAX / 4
                           : max_entries * HEADER_ALLOWANCE_PER_ENTRY + HEADER_SLACK;
    return max_total > UINT64_MAX - headers ? UINT64_MAX : max_total + headers;
}

static int walk(const void *data, size_t len, const funcd_bundle_limits *lim, int root_fd,
                const char *dest, char *err, size_t errlen)
{
    walker *w = calloc(1, sizeof(*w));
    if (!w)
        return funcd__bundle_fail(err, errlen, FUNCD_ENOMEM,
                                  "out of memory while reading a bundle");
    w->max_compressed =
        lim && lim->max_compressed ? lim->max_compressed : FUNCD_BUNDLE_MAX_COMPRESSED;
    w->max_total = lim && lim->max_total ? lim->max_total : FUNCD_BUNDLE_MAX_TOTAL;
    w->max_entries = lim && lim->max_entries ? lim->max_entries : FUNCD_BUNDLE_MAX_ENTRIES;
    w->stream_cap = stream_cap(w->max_total, w->max_entries);
    w->root_fd = root_fd;
    w->dest = dest;
    w->err = err;
    w->errlen = errlen;
    w->table.root.type = NODE_DIR;
    w->table.root.name = (char *)"";

    int rc;
    char lim_s[32];
    if ((uint64_t)len > w->max_compressed) {
        rc = FAIL(w, FUNCD_EINVAL, "bundle is %zu bytes, over the %s limit for a bundle", len,
                  funcd__human_size(w->max_compressed, lim_s, sizeof(lim_s)));
    } else if (!data || !len) {
        rc = FAIL(w, FUNCD_EINVAL, NOT_GZIP_TAR " (it is empty)");
    } else if (funcd__archive_load() < 0) {
        rc = FAIL(w, FUNCD_EIO, "%s", funcd_error_last()->message);
    } else if (!(w->a = archive_read_new())) {
        rc = oom(w);
    } else if (archive_read_support_filter_gzip(w->a) != ARCHIVE_OK ||
               archive_read_support_format_tar(w->a) != ARCHIVE_OK) {
        rc = FAIL(w, FUNCD_EIO, "libarchive cannot read gzip-compressed tar: %s",
                  archive_error_string(w->a));
    } else if (archive_read_open_memory(w->a, data, len) != ARCHIVE_OK) {
        rc = not_gzip_tar(w);
    } else {
        rc = walk_entries(w);
    }
    if (w->a)
        archive_read_free(w->a);
    funcd__path_table_free(&w->table);
    free(w);
    return rc;
}

/* ---- entry points ------------------------------------------------------------------------ */

int funcd_bundle_check(const void *data, size_t len, const funcd_bundle_limits *lim, char *err,
                       size_t errlen)
{
    return walk(data, len, lim, -1, NULL, err, errlen);
}

int funcd__bundle_extract_fd(const void *data, size_t len, int root_fd, const char *dest,
                             const funcd_bundle_limits *lim, char *err, size_t errlen)
{
    return walk(data, len, lim, root_fd, dest, err, errlen);
}

int funcd_bundle_extract(const void *data, size_t len, const char *dest_dir,
                         const funcd_bundle_limits *lim, char *err, size_t errlen)
{
    if (!dest_dir || !*dest_dir)
        return funcd__bundle_fail(err, errlen, FUNCD_EINVAL, "bundle: no destination directory");
    if (mkdir(dest_dir, 0755) < 0) {
        int e = errno;
        return funcd__bundle_fail(err, errlen, e == EEXIST ? FUNCD_EEXISTS : FUNCD_EIO,
                                  "cannot create %s to extract a bundle: %s", dest_dir,
                                  strerror(e));
    }
    int rc, fd = open(dest_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fchmod(fd, 0755) < 0) {
        int e = errno;
        rc = funcd__bundle_fail(err, errlen, FUNCD_EIO, "cannot open %s to extract a bundle: %s",
                                dest_dir, strerror(e));
    } else {
        rc = walk(data, len, lim, fd, dest_dir, err, errlen);
    }
    if (fd >= 0)
        close(fd);
    if (rc)
        funcd__remove_tree_at(AT_FDCWD, dest_dir);
    return rc;
}
