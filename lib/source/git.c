/*
 * Git sources: per-URL bare mirrors, ref resolution and write-once trees.
 * The layout and the rules are in git.h; the reasons in docs/adr/0016.
 */
#include "source/git.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include "source/git2_lazy.h"
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "artifact/bundle.h"
#include "funcd/sys/error.h"
#include "oci/oci.h"
#include "util/misc.h"

#define PATH_LEN 1024
#define MIN_ABBREV 4
/* As spec.source.git.ref's validation allows. */
#define MAX_REF_LEN 256
/* Deeper trees than this are not source code; the bound keeps recursion off the stack's edge. */
#define MAX_TREE_DEPTH 256

/* ---- errors ----------------------------------------------------------------------------------- */

static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (err && errlen)
        snprintf(err, errlen, "%s", msg);
    return funcd_error_set(code, "%s", msg);
}

static const char *git_message(void)
{
    const git_error *e = git_error_last();
    return e && e->message ? e->message : "unknown libgit2 error";
}

static int os_code(int e)
{
    return e == ENOSPC || e == EDQUOT ? FUNCD_ENOSPC : FUNCD_EIO;
}

/* ---- small helpers ---------------------------------------------------------------------------- */

static int is_hex(const char *s, size_t min, size_t max)
{
    size_t n = strlen(s);
    if (n < min || n > max)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i]))
            return 0;
    return 1;
}

static void lower_copy(char *dst, const char *src, size_t n)
{
    size_t i = 0;
    for (; i + 1 < n && src[i]; i++)
        dst[i] = (char)tolower((unsigned char)src[i]);
    dst[i] = '\0';
}

static int mkdir_p(const char *path)
{
    char tmp[PATH_LEN];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(tmp, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

/* Formats a path; -1 (errno ENAMETOOLONG) rather than a truncated name. */
static int path_fmt(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int path_fmt(char *out, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(out, n, fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= n) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

static int is_dir(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* ---- the subdirectory --------------------------------------------------------------------------- */

/*
 * Normalises `path` to components joined by '/', dropping empty and "."
 * ones; refuses absolute paths and "..". The result may be empty (the root).
 */
static int clean_subpath(const char *path, char *out, size_t outlen, char *err, size_t errlen)
{
    size_t len = 0;
    out[0] = '\0';
    if (!path)
        return 0;
    if (path[0] == '/')
        return fail(err, errlen, FUNCD_EINVAL,
                    "git: path '%s' must be relative to the repository's root", path);
    const char *p = path;
    while (*p) {
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return fail(err, errlen, FUNCD_EINVAL,
                        "git: path '%s' must stay inside the repository: no '..'", path);
        if (n > 0 && !(n == 1 && p[0] == '.')) {
            if (len + (len ? 1 : 0) + n + 1 > outlen)
                return fail(err, errlen, FUNCD_EINVAL, "git: path '%s' is too long", path);
            if (len)
                out[len++] = '/';
            memcpy(out + len, p, n);
            len += n;
            out[len] = '\0';
        }
        p += n;
        while (*p == '/')
            p++;
    }
    return 0;
}

/* Walks `sub` inside `root` one component at a time, never following a symbolic link. */
static int check_subdir(const char *root, const char *sub, const char *commit, char *err,
                        size_t errlen)
{
    int fd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return fail(err, errlen, FUNCD_EIO, "git: cannot open tree %s: %s", root, strerror(errno));
    char comp[PATH_LEN];
    const char *p = sub;
    int rc = 0;
    while (*p && rc == 0) {
        size_t n = strcspn(p, "/");
        memcpy(comp, p, n);
        comp[n] = '\0';
        int next = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0 && errno == ENOENT)
            rc = fail(err, errlen, FUNCD_ENOTFOUND, "git: path '%s' not found in commit %s", sub,
                      commit);
        else if (next < 0 && (errno == ENOTDIR || errno == ELOOP))
            rc = fail(err, errlen, FUNCD_EINVAL,
                      "git: path '%s' is not a directory in commit %s (symbolic links are not "
                      "followed)",
                      sub, commit);
        else if (next < 0)
            rc = fail(err, errlen, FUNCD_EIO, "git: cannot open path '%s' in commit %s: %s", sub,
                      commit, strerror(errno));
        close(fd);
        fd = next;
        p += n;
        if (*p == '/')
            p++;
    }
    if (fd >= 0)
        close(fd);
    return rc;
}

static int finish(const char *trees, const char *commit, const char *sub, funcd_git_result *out,
                  char *err, size_t errlen)
{
    char root[PATH_LEN];
    if (path_fmt(root, sizeof root, "%s/%s", trees, commit) < 0)
        return fail(err, errlen, FUNCD_EINVAL, "git: cache path %s is too long", trees);
    int rc = check_subdir(root, sub, commit, err, errlen);
    if (rc)
        return rc;
    int n = *sub ? snprintf(out->dir, sizeof out->dir, "%s/%s", root, sub)
                 : snprintf(out->dir, sizeof out->dir, "%s", root);
    if (n >= (int)sizeof out->dir) {
        out->dir[0] = '\0';
        return fail(err, errlen, FUNCD_EINVAL, "git: tree path %s/%s is too long", root, sub);
    }
    snprintf(out->commit, sizeof out->commit, "%s", commit);
    return 0;
}

/* ---- writing a tree ----------------------------------------------------------------------------- */

typedef struct tree_writer {
    git_repository *repo;
    git_odb *odb;
    const char *commit;
    uint64_t entries, max_entries; /* written so far, and the limit */
    uint64_t bytes, max_bytes;
    char *err;
    size_t errlen;
} tree_writer;

static int write_failed(tree_writer *w, const char *name, const char *what)
{
    int e = errno;
    return fail(w->err, w->errlen, os_code(e), "git: cannot %s '%s' of commit %s: %s", what, name,
                w->commit, strerror(e));
}

/* A tree entry name becomes a directory entry: it must not be able to address anything else. */
static int safe_name(const char *name)
{
    return *name && !strchr(name, '/') && strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

/* Counts a blob's bytes against the limit, from its header: before it is read into memory. */
static int count_bytes(tree_writer *w, const git_tree_entry *e)
{
    size_t size;
    git_object_t type;
    if (git_odb_read_header(&size, &type, w->odb, git_tree_entry_id(e)) < 0)
        return fail(w->err, w->errlen, FUNCD_EIO, "git: cannot read '%s' of commit %s: %s",
                    git_tree_entry_name(e), w->commit, git_message());
    if (size > w->max_bytes - w->bytes)
        return fail(w->err, w->errlen, FUNCD_EINVAL,
                    "git: commit %s is refused: its files hold more than %llu bytes, the limit "
                    "for a git source",
                    w->commit, (unsigned long long)w->max_bytes);
    w->bytes += size;
    return 0;
}

static int write_blob(tree_writer *w, int dirfd, const git_tree_entry *e, mode_t mode)
{
    const char *name = git_tree_entry_name(e);
    git_blob *blob;
    int counted = count_bytes(w, e);
    if (counted)
        return counted;
    if (git_blob_lookup(&blob, w->repo, git_tree_entry_id(e)) < 0)
        return fail(w->err, w->errlen, FUNCD_EIO, "git: cannot read '%s' of commit %s: %s", name,
                    w->commit, git_message());
    int rc = 0;
    int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0)
        rc = write_failed(w, name, "create");
    else if (funcd_write_all(fd, git_blob_rawcontent(blob), (size_t)git_blob_rawsize(blob)) < 0 ||
             fchmod(fd, mode) < 0) /* the umask must not drop the exec bit */
        rc = write_failed(w, name, "write");
    if (fd >= 0)
        close(fd);
    git_blob_free(blob);
    return rc;
}

static int write_link(tree_writer *w, int dirfd, const git_tree_entry *e)
{
    const char *name = git_tree_entry_name(e);
    git_blob *blob;
    int counted = count_bytes(w, e);
    if (counted)
        return counted;
    if (git_blob_lookup(&blob, w->repo, git_tree_entry_id(e)) < 0)
        return fail(w->err, w->errlen, FUNCD_EIO, "git: cannot read link '%s' of commit %s: %s",
                    name, w->commit, git_message());
    size_t len = (size_t)git_blob_rawsize(blob);
    const char *data = git_blob_rawcontent(blob);
    int rc = 0;
    char *target = len && !memchr(data, '\0', len) ? funcd_strndup(data, len) : NULL;
    if (!target)
        rc = fail(w->err, w->errlen, FUNCD_EINVAL, "git: link '%s' of commit %s has no valid target",
                  name, w->commit);
    else if (symlinkat(target, dirfd, name) < 0)
        rc = write_failed(w, name, "create link");
    free(target);
    git_blob_free(blob);
    return rc;
}

static int write_tree(tree_writer *w, int dirfd, const git_tree *tree, int depth);

static int write_subdir(tree_writer *w, int dirfd, const git_tree_entry *e, int depth)
{
    const char *name = git_tree_entry_name(e);
    if (depth >= MAX_TREE_DEPTH)
        return fail(w->err, w->errlen, FUNCD_EINVAL,
                    "git: commit %s nests directories deeper than %d", w->commit, MAX_TREE_DEPTH);
    if (mkdirat(dirfd, name, 0755) < 0)
        return write_failed(w, name, "create directory");
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fchmod(fd, 0755) < 0) {
        int rc = write_failed(w, name, "open directory");
        if (fd >= 0)
            close(fd);
        return rc;
    }
    int rc = 0;
    git_tree *sub = NULL;
    /* A submodule is a commit of another repository: it stays an empty directory. */
    if (git_tree_entry_filemode(e) == GIT_FILEMODE_TREE) {
        if (git_tree_lookup(&sub, w->repo, git_tree_entry_id(e)) < 0)
            rc = fail(w->err, w->errlen, FUNCD_EIO, "git: cannot read directory '%s' of commit %s: %s",
                      name, w->commit, git_message());
        else
            rc = write_tree(w, fd, sub, depth + 1);
    }
    git_tree_free(sub);
    close(fd);
    return rc;
}

static int write_entry(tree_writer *w, int dirfd, const git_tree_entry *e, int depth)
{
    const char *name = git_tree_entry_name(e);
    if (!safe_name(name))
        return fail(w->err, w->errlen, FUNCD_EINVAL, "git: commit %s has an unsafe entry name '%s'",
                    w->commit, name);
    /* Trees may name one subtree many times (a "git bomb"): each time counts. */
    if (++w->entries > w->max_entries)
        return fail(w->err, w->errlen, FUNCD_EINVAL,
                    "git: commit %s is refused: it has more than %llu entries (files, "
                    "directories, links), the limit for a git source",
                    w->commit, (unsigned long long)w->max_entries);
    switch (git_tree_entry_filemode(e)) {
    case GIT_FILEMODE_TREE:
    case GIT_FILEMODE_COMMIT:
        return write_subdir(w, dirfd, e, depth);
    case GIT_FILEMODE_BLOB_EXECUTABLE:
        return write_blob(w, dirfd, e, 0755);
    case GIT_FILEMODE_BLOB:
        return write_blob(w, dirfd, e, 0644);
    case GIT_FILEMODE_LINK:
        return write_link(w, dirfd, e);
    default:
        return fail(w->err, w->errlen, FUNCD_EINVAL, "git: entry '%s' of commit %s has mode %o",
                    name, w->commit, (unsigned)git_tree_entry_filemode(e));
    }
}

static int write_tree(tree_writer *w, int dirfd, const git_tree *tree, int depth)
{
    size_t n = git_tree_entrycount(tree);
    for (size_t i = 0; i < n; i++) {
        int rc = write_entry(w, dirfd, git_tree_entry_byindex(tree, i), depth);
        if (rc)
            return rc;
    }
    return 0;
}

static int write_commit_tree(tree_writer *w, const git_oid *id, const char *dir)
{
    git_commit *commit = NULL;
    git_tree *tree = NULL;
    if (git_commit_lookup(&commit, w->repo, id) < 0 || git_commit_tree(&tree, commit) < 0) {
        git_commit_free(commit);
        return fail(w->err, w->errlen, FUNCD_EIO, "git: cannot read the tree of commit %s: %s",
                    w->commit, git_message());
    }
    int rc = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fchmod(fd, 0755) < 0)
        rc = write_failed(w, dir, "open");
    else
        rc = write_tree(w, fd, tree, 0);
    /* One syncfs is far cheaper than an fsync per file, and the rename must not outrun the data. */
    if (rc == 0 && syncfs(fd) < 0)
        rc = write_failed(w, dir, "sync");
    if (fd >= 0)
        close(fd);
    git_tree_free(tree);
    git_commit_free(commit);
    return rc;
}

/* Writes the tree once: into a temporary directory, then renamed to trees/<commit>. */
static int ensure_tree(git_repository *repo, const git_oid *id, const char *trees,
                       const funcd_git_options *opts, char *err, size_t errlen)
{
    char hex[GIT_OID_HEXSZ + 1], final[PATH_LEN], tmp[PATH_LEN];
    git_oid_tostr(hex, sizeof hex, id);
    if (path_fmt(final, sizeof final, "%s/%s", trees, hex) < 0 ||
        path_fmt(tmp, sizeof tmp, "%s/.tmp-XXXXXX", trees) < 0)
        return fail(err, errlen, FUNCD_EINVAL, "git: cache path %s is too long", trees);
    if (is_dir(final))
        return 0;
    if (!mkdtemp(tmp))
        return fail(err, errlen, os_code(errno), "git: cannot create a directory in %s: %s", trees,
                    strerror(errno));
    tree_writer w = {
        .repo = repo,
        .commit = hex,
        .max_entries = opts && opts->max_entries ? opts->max_entries : FUNCD_BUNDLE_MAX_ENTRIES,
        .max_bytes = opts && opts->max_bytes ? opts->max_bytes : FUNCD_BUNDLE_MAX_TOTAL,
        .err = err,
        .errlen = errlen,
    };
    int rc = git_repository_odb(&w.odb, repo) < 0
                 ? fail(err, errlen, FUNCD_EIO, "git: cannot open the objects of the mirror: %s",
                        git_message())
                 : write_commit_tree(&w, id, tmp);
    git_odb_free(w.odb);
    if (rc == 0 && rename(tmp, final) < 0) {
        /* Another fetch (of another URL with the same commit) won the race: use its tree. */
        if (errno != EEXIST && errno != ENOTEMPTY)
            rc = fail(err, errlen, os_code(errno), "git: cannot rename %s to %s: %s", tmp, final,
                      strerror(errno));
    }
    if (is_dir(tmp))
        funcd_remove_tree(tmp);
    return rc;
}

/* ---- the mirror --------------------------------------------------------------------------------- */

static int init_mirror(git_repository **repo, const char *path, const char *url, char *err,
                       size_t errlen)
{
    git_config *cfg = NULL;
    if (git_repository_init(repo, path, 1) < 0)
        return fail(err, errlen, FUNCD_EIO, "git: cannot create the mirror %s: %s", path,
                    git_message());
    /* Only for people reading the cache: which URL this hashed name stands for. */
    if (git_repository_config(&cfg, *repo) == 0)
        git_config_set_string(cfg, "funcd.url", url);
    git_config_free(cfg);
    return 0;
}

static int open_mirror(git_repository **repo, const char *path, const char *url, char *err,
                       size_t errlen)
{
    if (is_dir(path) && git_repository_open_bare(repo, path) == 0)
        return 0;
    /* Absent, or left half-made by a crash: we hold the lock, so nobody else is using it. */
    if (is_dir(path))
        funcd_remove_tree(path);
    return init_mirror(repo, path, url, err, errlen);
}

static int lock_mirror(const char *lock_path, char *err, size_t errlen)
{
    int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return fail(err, errlen, os_code(errno), "git: cannot open lock %s: %s", lock_path,
                    strerror(errno));
    while (flock(fd, LOCK_EX) < 0) {
        if (errno != EINTR) {
            close(fd);
            return fail(err, errlen, FUNCD_EIO, "git: cannot lock %s: %s", lock_path,
                        strerror(errno));
        }
    }
    return fd;
}

/* ---- refs --------------------------------------------------------------------------------------- */

static int is_full_ref(const char *ref)
{
    return funcd_has_prefix(ref, "refs/heads/") || funcd_has_prefix(ref, "refs/tags/");
}

static int lookup_ref(git_repository *repo, const char *name, git_object **obj)
{
    git_oid id;
    if (git_reference_name_to_id(&id, repo, name) < 0)
        return -1;
    return git_object_lookup(obj, repo, &id, GIT_OBJECT_ANY);
}

static int lookup_named(git_repository *repo, const char *ref, git_object **obj)
{
    char name[PATH_LEN];
    if (is_full_ref(ref))
        return lookup_ref(repo, ref, obj);
    if (path_fmt(name, sizeof name, "refs/heads/%s", ref) == 0 && lookup_ref(repo, name, obj) == 0)
        return 0;
    if (path_fmt(name, sizeof name, "refs/tags/%s", ref) < 0)
        return -1;
    return lookup_ref(repo, name, obj);
}

static int lookup_commit_id(git_repository *repo, const char *ref, git_object **obj,
                            const char *url, char *err, size_t errlen)
{
    git_oid id;
    if (git_oid_fromstrn(&id, ref, strlen(ref)) < 0)
        return GIT_ENOTFOUND;
    int rc = git_object_lookup_prefix(obj, repo, &id, strlen(ref), GIT_OBJECT_ANY);
    if (rc == GIT_EAMBIGUOUS)
        return fail(err, errlen, FUNCD_EINVAL,
                    "git: commit id '%s' is ambiguous in %s: give more digits", ref, url);
    return rc < 0 ? GIT_ENOTFOUND : 0;
}

/* Resolves `ref` in the mirror (after the fetch) and peels it to a commit. */
static int resolve_local(git_repository *repo, const char *url, const char *ref,
                         const git_oid *head, git_oid *out, char *err, size_t errlen)
{
    git_object *obj = NULL, *commit = NULL;
    int rc = GIT_ENOTFOUND;
    if (!*ref && head)
        rc = git_object_lookup(&obj, repo, head, GIT_OBJECT_ANY);
    else if (*ref && !is_hex(ref, GIT_OID_HEXSZ, GIT_OID_HEXSZ))
        rc = lookup_named(repo, ref, &obj);
    if (rc < 0 && is_hex(ref, MIN_ABBREV, GIT_OID_HEXSZ)) {
        rc = lookup_commit_id(repo, ref, &obj, url, err, errlen);
        if (rc < 0 && rc != GIT_ENOTFOUND)
            return rc;
    }
    if (rc < 0 && !*ref)
        return fail(err, errlen, FUNCD_ENOTFOUND, "git: %s has no HEAD (an empty repository?)",
                    url);
    if (rc < 0)
        return fail(err, errlen, FUNCD_ENOTFOUND, "git: ref '%s' not found in %s", ref, url);
    rc = git_object_peel(&commit, obj, GIT_OBJECT_COMMIT);
    git_object_free(obj);
    if (rc < 0)
        return fail(err, errlen, FUNCD_EINVAL, "git: ref '%s' in %s does not name a commit", ref,
                    url);
    git_oid_cpy(out, git_object_id(commit));
    git_object_free(commit);
    return 0;
}

static int has_commit(git_repository *repo, const char *hex)
{
    git_oid id;
    git_object *obj = NULL;
    if (git_oid_fromstr(&id, hex) < 0 || git_object_lookup(&obj, repo, &id, GIT_OBJECT_COMMIT) < 0)
        return 0;
    git_object_free(obj);
    return 1;
}

/* ---- which addresses a fetch reaches ---------------------------------------------------------- */

/*
 * Every connection libgit2 makes for a network URL (http, git://, ssh, and
 * https, whose TLS runs over this) opens a plain socket stream; funcd
 * registers its own (funcd_git_init), which connects only to addresses a
 * registry pull could reach: not loopback, link-local, unspecified or
 * multicast (funcd_oci_addr_is_internal) unless the operator named the
 * host. The address checked is the one connected to, so a name that
 * resolves elsewhere later changes nothing. A fetch says which hosts are
 * named, and learns that its host was refused, through `net_rule`, which is
 * per thread: libgit2 connects on the thread that fetches.
 */
typedef struct net_rule {
    const funcd_git_options *opts;
    char refused[256]; /* a host none of whose addresses may be reached */
    int64_t deadline_ms; /* monotonic: the fetch's end (opts->fetch_ms) */
} net_rule;

static _Thread_local net_rule *rule;

static int64_t fetch_deadline(const funcd_git_options *o)
{
    return funcd_mono_ms() + (o && o->fetch_ms ? o->fetch_ms : FUNCD_GIT_FETCH_MS);
}

/* A fetch past its deadline: its next read or write fails. */
static int past_deadline(void)
{
    return rule && funcd_mono_ms() > rule->deadline_ms;
}

/* libgit2 1.5's ssh transport takes the socket out of the stream as if it were
 * libgit2's own socket stream: these first fields must stay as they are there. */
typedef struct guarded_stream {
    git_stream parent;
    char *host;
    char *port;
    int s;
    /* funcd's own, after libgit2's */
    unsigned stall_ms;
    funcd_git_cancel *cancel;
    int fd;                              /* the socket as `cancel` knows it, or -1 */
    struct guarded_stream *prev, *next; /* in cancel->streams */
} guarded_stream;

struct funcd_git_cancel {
    pthread_mutex_t lock;
    int fired;
    guarded_stream *streams; /* with a socket open */
};

funcd_git_cancel *funcd_git_cancel_new(void)
{
    funcd_git_cancel *c = calloc(1, sizeof(*c));
    if (c)
        pthread_mutex_init(&c->lock, NULL);
    return c;
}

void funcd_git_cancel_fire(funcd_git_cancel *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    c->fired = 1;
    for (guarded_stream *st = c->streams; st; st = st->next)
        shutdown(st->fd, SHUT_RDWR); /* its blocked connect, recv or send returns */
    pthread_mutex_unlock(&c->lock);
}

void funcd_git_cancel_free(funcd_git_cancel *c)
{
    if (!c)
        return;
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* Makes socket `fd` the stream's, known to its cancel group; -1 when the
 * group was fired (the socket is not the stream's then). */
static int stream_adopt(guarded_stream *st, int fd)
{
    funcd_git_cancel *c = st->cancel;
    if (!c)
        return 0;
    pthread_mutex_lock(&c->lock);
    int fired = c->fired;
    if (!fired) {
        st->fd = fd;
        st->prev = NULL;
        st->next = c->streams;
        if (c->streams)
            c->streams->prev = st;
        c->streams = st;
    }
    pthread_mutex_unlock(&c->lock);
    return fired ? -1 : 0;
}

/* Before its socket is closed: the group never touches a descriptor again
 * once its number may be another's. */
static void stream_release(guarded_stream *st)
{
    funcd_git_cancel *c = st->cancel;
    if (!c || st->fd < 0)
        return;
    pthread_mutex_lock(&c->lock);
    if (st->prev)
        st->prev->next = st->next;
    else
        c->streams = st->next;
    if (st->next)
        st->next->prev = st->prev;
    st->fd = -1;
    pthread_mutex_unlock(&c->lock);
}

/* connect(2) within stall_ms; the socket stays blocking, its reads and
 * writes bounded by the same (SO_RCVTIMEO, SO_SNDTIMEO). 0, or an errno. */
static int connect_within(int s, const struct sockaddr *a, socklen_t len, unsigned stall_ms)
{
    int flags = fcntl(s, F_GETFL);
    if (flags < 0 || fcntl(s, F_SETFL, flags | O_NONBLOCK) < 0)
        return errno;
    int e = connect(s, a, len) == 0 ? 0 : errno;
    if (e == EINPROGRESS) {
        struct pollfd p = {s, POLLOUT, 0};
        int n;
        do
            n = poll(&p, 1, (int)stall_ms);
        while (n < 0 && errno == EINTR);
        socklen_t el = sizeof(e);
        if (n == 0)
            e = ETIMEDOUT;
        else if (n < 0 || getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &el) < 0)
            e = errno;
    }
    if (e == 0 && fcntl(s, F_SETFL, flags) < 0)
        e = errno;
    struct timeval tv = {(time_t)(stall_ms / 1000), (suseconds_t)(stall_ms % 1000) * 1000};
    if (e == 0 && (setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
                   setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0))
        e = errno;
    return e;
}

static int host_named(const funcd_git_options *o, const char *host, const char *port)
{
    char host_port[300];
    if (strchr(host, ':'))
        snprintf(host_port, sizeof host_port, "[%s]:%s", host, port);
    else
        snprintf(host_port, sizeof host_port, "%s:%s", host, port);
    const char *const *lists[] = {o ? o->insecure_hosts : NULL, o ? o->allowed_hosts : NULL};
    for (int i = 0; i < 2; i++)
        for (const char *const *h = lists[i]; h && *h; h++)
            if (funcd_oci_registry_matches(*h, host_port))
                return 1;
    return 0;
}

static int stream_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int stream_error(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    git_error_set_str(GIT_ERROR_NET, msg);
    return -1;
}

static int guarded_connect(git_stream *stream)
{
    guarded_stream *st = (guarded_stream *)stream;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *info;
    int gai = getaddrinfo(st->host, st->port, &hints, &info);
    if (gai != 0)
        return stream_error("failed to resolve address for %s: %s", st->host, gai_strerror(gai));
    int named = host_named(rule ? rule->opts : NULL, st->host, st->port), tried = 0, e = 0;
    int cancelled = 0;
    for (struct addrinfo *a = info; a && !cancelled; a = a->ai_next) {
        if (!named && funcd_oci_addr_is_internal(a->ai_addr))
            continue;
        tried++;
        int s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (s < 0) {
            e = errno;
            continue;
        }
        if (stream_adopt(st, s) < 0) {
            cancelled = 1;
            close(s);
            break;
        }
        e = connect_within(s, a->ai_addr, a->ai_addrlen, st->stall_ms);
        if (e == 0) {
            st->s = s;
            break;
        }
        stream_release(st);
        close(s);
        if (st->cancel) {
            pthread_mutex_lock(&st->cancel->lock);
            cancelled = st->cancel->fired;
            pthread_mutex_unlock(&st->cancel->lock);
        }
    }
    freeaddrinfo(info);
    if (st->s >= 0)
        return 0;
    if (cancelled)
        return stream_error("cancelled: funcd is stopping");
    if (!tried) {
        if (rule)
            snprintf(rule->refused, sizeof rule->refused, "%s", st->host);
        return stream_error("%s is at an address git sources may not reach", st->host);
    }
    if (e == ETIMEDOUT)
        return stream_error("failed to connect to %s: no answer in %u ms", st->host,
                            st->stall_ms);
    return stream_error("failed to connect to %s: %s", st->host, strerror(e));
}

static ssize_t guarded_read(git_stream *stream, void *data, size_t len)
{
    guarded_stream *st = (guarded_stream *)stream;
    if (past_deadline())
        return stream_error("the fetch from %s took longer than the most one may take", st->host);
    ssize_t n = recv(st->s, data, len, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        stream_error("%s sent nothing for %u ms", st->host, st->stall_ms);
    else if (n < 0)
        stream_error("error receiving socket data: %s", strerror(errno));
    return n;
}

static ssize_t guarded_write(git_stream *stream, const char *data, size_t len, int flags)
{
    guarded_stream *st = (guarded_stream *)stream;
    if (past_deadline())
        return stream_error("the fetch from %s took longer than the most one may take", st->host);
    ssize_t n = send(st->s, data, len, flags | MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        stream_error("%s took nothing for %u ms", st->host, st->stall_ms);
    else if (n < 0)
        stream_error("error sending data: %s", strerror(errno));
    return n;
}

static int guarded_close(git_stream *stream)
{
    guarded_stream *st = (guarded_stream *)stream;
    stream_release(st);
    int rc = st->s >= 0 ? close(st->s) : 0;
    st->s = -1;
    return rc;
}

static void guarded_free(git_stream *stream)
{
    guarded_stream *st = (guarded_stream *)stream;
    guarded_close(stream);
    free(st->host);
    free(st->port);
    free(st);
}

static int guarded_new(git_stream **out, const char *host, const char *port)
{
    guarded_stream *st = calloc(1, sizeof *st);
    if (st) {
        st->host = strdup(host);
        st->port = strdup(port);
    }
    if (!st || !st->host || !st->port) {
        if (st)
            guarded_free(&st->parent);
        git_error_set_oom();
        return -1;
    }
    st->s = st->fd = -1;
    const funcd_git_options *o = rule ? rule->opts : NULL;
    st->stall_ms = o && o->stall_ms ? o->stall_ms : FUNCD_GIT_STALL_MS;
    st->cancel = o ? o->cancel : NULL;
    st->parent.version = GIT_STREAM_VERSION;
    st->parent.connect = guarded_connect;
    st->parent.read = guarded_read;
    st->parent.write = guarded_write;
    st->parent.close = guarded_close;
    st->parent.free = guarded_free;
    *out = &st->parent;
    return 0;
}

/* libgit2's error for `url`, unless the URL's host was refused: then funcd's words, naming it. */
static int remote_failed(const char *what, const char *url, char *err, size_t errlen)
{
    if (rule && rule->refused[0])
        return fail(err, errlen, FUNCD_EIO,
                    "git: cannot reach %s: host %s is refused: it is (or resolves to) a loopback, "
                    "link-local, unspecified or multicast address, which git sources reach only "
                    "when the operator names the host (funcd --allowed-registry or "
                    "--insecure-registry HOST:PORT)",
                    url, rule->refused);
    const char *msg = git_message();
    /* libgit2's own words for this case name a config key, not the cause. */
    const char *hint = strstr(msg, "safe.directory")
                           ? " (the repository is owned by another user: add it to git's "
                             "safe.directory or change its owner)"
                           : "";
    return fail(err, errlen, FUNCD_EIO, "git: cannot %s %s: %s%s", what, url, msg, hint);
}

/* ---- talking to the remote ----------------------------------------------------------------------- */

/*
 * insteadOf rewriting is skipped: it makes the URL depend on the host's git
 * configuration, and libgit2 1.5.1 leaks a PCRE2 match block for every config
 * entry it tests against the insteadOf pattern (fixed upstream in PR #6382).
 */
static int new_remote(git_remote **out, git_repository *repo, const char *url, char *err,
                      size_t errlen)
{
    git_remote_create_options opts;
    git_remote_create_options_init(&opts, GIT_REMOTE_CREATE_OPTIONS_VERSION);
    opts.repository = repo;
    opts.flags = GIT_REMOTE_CREATE_SKIP_INSTEADOF | GIT_REMOTE_CREATE_SKIP_DEFAULT_FETCHSPEC;
    if (git_remote_create_with_opts(out, url, &opts) < 0)
        return fail(err, errlen, FUNCD_EINVAL, "git: cannot use URL %s: %s", url, git_message());
    return 0;
}

static int connect_remote(git_remote *remote, const char *url, char *err, size_t errlen)
{
    git_remote_callbacks cb;
    git_remote_init_callbacks(&cb, GIT_REMOTE_CALLBACKS_VERSION);
    if (git_remote_connect(remote, GIT_DIRECTION_FETCH, &cb, NULL, NULL) == 0)
        return 0;
    return remote_failed("reach", url, err, errlen);
}

static const git_remote_head *find_head(const git_remote_head **heads, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(heads[i]->name, name) == 0)
            return heads[i];
    return NULL;
}

/* Connects, remembers the remote's HEAD, and fetches branches and tags (pruning gone ones). */
static int fetch_remote(git_repository *repo, const char *url, const funcd_git_options *opts,
                        git_oid *head, int *has_head, char *err, size_t errlen)
{
    git_remote *remote = NULL;
    int rc = new_remote(&remote, repo, url, err, errlen);
    if (rc)
        return rc;
    net_rule net = {opts, "", fetch_deadline(opts)};
    rule = &net;
    rc = connect_remote(remote, url, err, errlen);
    const git_remote_head **heads = NULL;
    size_t n = 0;
    if (rc == 0 && git_remote_ls(&heads, &n, remote) < 0)
        rc = fail(err, errlen, FUNCD_EIO, "git: cannot list refs of %s: %s", url, git_message());
    const git_remote_head *h = rc == 0 ? find_head(heads, n, "HEAD") : NULL;
    *has_head = h != NULL;
    if (h)
        git_oid_cpy(head, &h->oid);
    if (rc == 0) {
        /* HEAD too: a detached HEAD is reachable from no branch. */
        char *specs[] = {"+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*",
                         "+HEAD:refs/funcd/HEAD"};
        git_strarray arr = {specs, h ? 3 : 2};
        git_fetch_options fo;
        git_fetch_options_init(&fo, GIT_FETCH_OPTIONS_VERSION);
        fo.prune = GIT_FETCH_PRUNE;
        fo.update_fetchhead = 0;
        fo.download_tags = GIT_REMOTE_DOWNLOAD_TAGS_NONE;
        if (git_remote_fetch(remote, &arr, &fo, NULL) < 0)
            rc = remote_failed("fetch from", url, err, errlen);
    }
    git_remote_free(remote);
    rule = NULL;
    return rc;
}

/*
 * With the mirror locked: fetch unless `ref` is a commit this URL's mirror
 * already has, resolve, write the tree (or find it written). The mirror holds
 * only what this URL sent, so a commit resolved here came from this URL.
 */
static int fetch_locked(const char *repos, const char *trees, const char *url, const char *ref,
                        const funcd_git_options *opts, char commit[41], char *err, size_t errlen)
{
    char key[65], path[PATH_LEN];
    funcd_sha256_hex(url, strlen(url), key);
    if (path_fmt(path, sizeof path, "%s/%s.lock", repos, key) < 0)
        return fail(err, errlen, FUNCD_EINVAL, "git: cache path %s is too long", repos);
    int lock = lock_mirror(path, err, errlen);
    if (lock < 0)
        return lock;
    path_fmt(path, sizeof path, "%s/%s.git", repos, key); /* shorter than the lock's */
    git_repository *repo = NULL;
    int rc = open_mirror(&repo, path, url, err, errlen);
    git_oid head, id;
    int has_head = 0;
    if (rc == 0 && !(is_hex(ref, GIT_OID_HEXSZ, GIT_OID_HEXSZ) && has_commit(repo, ref)))
        rc = fetch_remote(repo, url, opts, &head, &has_head, err, errlen);
    if (rc == 0)
        rc = resolve_local(repo, url, ref, has_head ? &head : NULL, &id, err, errlen);
    if (rc == 0)
        rc = ensure_tree(repo, &id, trees, opts, err, errlen);
    if (rc == 0)
        git_oid_tostr(commit, 41, &id);
    git_repository_free(repo);
    close(lock);
    return rc;
}

/* ---- public ------------------------------------------------------------------------------------ */

int funcd_git_init(void)
{
    if (funcd__git2_load() < 0)
        return FUNCD_EIO;
    if (git_libgit2_init() < 0)
        return funcd_error_set(FUNCD_EIO, "git: libgit2 failed to initialise: %s", git_message());
    /* Again at every init: libgit2 forgets it when the last user shuts it down. */
    static git_stream_registration guarded = {GIT_STREAM_VERSION, guarded_new, NULL};
    if (git_stream_register(GIT_STREAM_STANDARD, &guarded) < 0) {
        int rc = funcd_error_set(FUNCD_EIO, "git: cannot register funcd's socket stream: %s",
                                 git_message());
        git_libgit2_shutdown();
        return rc;
    }
    return 0;
}

void funcd_git_shutdown(void)
{
    git_libgit2_shutdown();
}

static int make_cache_dirs(const char *cache_dir, char *repos, char *trees, char *err,
                           size_t errlen)
{
    if (snprintf(repos, PATH_LEN, "%s/repos", cache_dir) >= PATH_LEN - 80 ||
        snprintf(trees, PATH_LEN, "%s/trees", cache_dir) >= PATH_LEN - 80)
        return fail(err, errlen, FUNCD_EINVAL, "git: cache directory %s is too long", cache_dir);
    if (mkdir_p(repos) < 0 || mkdir_p(trees) < 0)
        return fail(err, errlen, os_code(errno), "git: cannot create the cache in %s: %s",
                    cache_dir, strerror(errno));
    return 0;
}

int funcd_git_fetch(const char *cache_dir, const char *url, const char *ref, const char *path,
                    funcd_git_result *out, char *err, size_t errlen)
{
    return funcd_git_fetch_opts(cache_dir, url, ref, path, NULL, out, err, errlen);
}

int funcd_git_fetch_opts(const char *cache_dir, const char *url, const char *ref,
                         const char *path, const funcd_git_options *opts, funcd_git_result *out,
                         char *err, size_t errlen)
{
    char repos[PATH_LEN], trees[PATH_LEN], sub[PATH_LEN], want[PATH_LEN], commit[41];
    if (ref && strlen(ref) > MAX_REF_LEN)
        return fail(err, errlen, FUNCD_EINVAL, "git: ref '%.40s...' is longer than %d bytes", ref,
                    MAX_REF_LEN);
    /* Copied before `out` is cleared: a caller may pass out->commit as the ref. */
    lower_copy(want, ref ? ref : "", sizeof want);
    if (!is_hex(want, GIT_OID_HEXSZ, GIT_OID_HEXSZ))
        snprintf(want, sizeof want, "%s", ref ? ref : "");
    int rc = clean_subpath(path, sub, sizeof sub, err, errlen);
    if (out)
        memset(out, 0, sizeof *out);
    if (!cache_dir || !*cache_dir || !url || !*url || !out)
        return fail(err, errlen, FUNCD_EINVAL, "git: a cache directory, a URL and out are needed");
    if (rc == 0)
        rc = make_cache_dirs(cache_dir, repos, trees, err, errlen);
    if (rc)
        return rc;
    /* No shortcut to a cached tree here: trees are shared by every URL, and a
     * commit id names a tree only for a URL whose own mirror holds the commit
     * (fetch_locked skips the network then). */
    if ((rc = funcd_git_init()) < 0)
        return fail(err, errlen, rc, "%s", funcd_error_last()->message);
    rc = fetch_locked(repos, trees, url, want, opts, commit, err, errlen);
    git_libgit2_shutdown();
    return rc ? rc : finish(trees, commit, sub, out, err, errlen);
}

static const git_remote_head *find_named(const git_remote_head **heads, size_t n,
                                         const char *prefix, const char *ref)
{
    char name[PATH_LEN], peeled[PATH_LEN + 8];
    snprintf(name, sizeof name, "%s%s", prefix, ref);
    /* An annotated tag is advertised twice; its "^{}" line carries the commit. */
    snprintf(peeled, sizeof peeled, "%s^{}", name);
    const git_remote_head *h = find_head(heads, n, peeled);
    return h ? h : find_head(heads, n, name);
}

static int match_abbrev(const git_remote_head **heads, size_t n, const char *ref, git_oid *out)
{
    char want[GIT_OID_HEXSZ + 1];
    lower_copy(want, ref, sizeof want);
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        char hex[GIT_OID_HEXSZ + 1];
        git_oid_tostr(hex, sizeof hex, &heads[i]->oid);
        if (strncmp(hex, want, strlen(want)) != 0 || (found && git_oid_equal(out, &heads[i]->oid)))
            continue;
        if (found++)
            return -1;
        git_oid_cpy(out, &heads[i]->oid);
    }
    return found == 1 ? 0 : -1;
}

/* The same order as resolve_local, over the advertised refs only. */
static int resolve_advertised(const git_remote_head **heads, size_t n, const char *ref,
                              git_oid *out)
{
    const git_remote_head *h = NULL;
    if (!*ref)
        h = find_head(heads, n, "HEAD");
    else if (is_full_ref(ref))
        h = find_named(heads, n, "", ref);
    else if (!(h = find_named(heads, n, "refs/heads/", ref)))
        h = find_named(heads, n, "refs/tags/", ref);
    if (h) {
        git_oid_cpy(out, &h->oid);
        return 0;
    }
    return is_hex(ref, MIN_ABBREV, GIT_OID_HEXSZ - 1) ? match_abbrev(heads, n, ref, out) : -1;
}

static int ls_remote(const char *url, const char *ref, const funcd_git_options *opts,
                     char commit[41], char *err, size_t errlen)
{
    git_remote *remote = NULL;
    int rc = new_remote(&remote, NULL, url, err, errlen);
    if (rc)
        return rc;
    net_rule net = {opts, "", fetch_deadline(opts)};
    rule = &net;
    rc = connect_remote(remote, url, err, errlen);
    const git_remote_head **heads = NULL;
    size_t n = 0;
    git_oid id;
    if (rc == 0 && git_remote_ls(&heads, &n, remote) < 0)
        rc = fail(err, errlen, FUNCD_EIO, "git: cannot list refs of %s: %s", url, git_message());
    if (rc == 0 && resolve_advertised(heads, n, ref, &id) < 0)
        rc = *ref ? fail(err, errlen, FUNCD_ENOTFOUND, "git: ref '%s' not found in %s", ref, url)
                  : fail(err, errlen, FUNCD_ENOTFOUND,
                         "git: %s has no HEAD (an empty repository?)", url);
    if (rc == 0)
        git_oid_tostr(commit, 41, &id);
    git_remote_free(remote);
    rule = NULL;
    return rc;
}

int funcd_git_ls_remote(const char *url, const char *ref, const funcd_git_options *opts,
                        char commit[41], char *err, size_t errlen)
{
    char want[PATH_LEN], name[PATH_LEN];
    if (ref && strlen(ref) > MAX_REF_LEN)
        return fail(err, errlen, FUNCD_EINVAL, "git: ref '%.40s...' is longer than %d bytes", ref,
                    MAX_REF_LEN);
    /* Copied before `commit` is cleared: the caller may pass the same buffer. */
    snprintf(name, sizeof name, "%s", ref ? ref : "");
    lower_copy(want, name, sizeof want);
    if (commit)
        commit[0] = '\0';
    if (!url || !*url || !commit)
        return fail(err, errlen, FUNCD_EINVAL, "git: a URL and a commit buffer are needed");
    if (is_hex(want, GIT_OID_HEXSZ, GIT_OID_HEXSZ)) {
        memcpy(commit, want, 41);
        return 0;
    }
    int rc = funcd_git_init();
    if (rc < 0)
        return fail(err, errlen, rc, "%s", funcd_error_last()->message);
    rc = ls_remote(url, name, opts, commit, err, errlen);
    git_libgit2_shutdown();
    return rc;
}
