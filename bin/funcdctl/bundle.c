#include "bundle.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK (64 * 1024)

typedef struct packer {
    struct archive *a;
    funcd_buf *out;
    size_t out_start; /* out->len before packing: the limit counts only ours */
    size_t max_bytes;
    int too_large;
    ctl_bundle_stats *stats;
    ctl_bundle_warn_fn warn;
    void *payload;
    funcd_buf *err;
    funcd_buf path; /* "DIR/rel/ative", grown and cut back while walking */
    size_t root_len;
    char *chunk;
} packer;

static int fail(packer *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(packer *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    funcd_buf_reset(p->err);
    funcd_buf_vprintf(p->err, fmt, ap);
    va_end(ap);
    return -1;
}

static void warn(packer *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void warn(packer *p, const char *fmt, ...)
{
    funcd_buf msg = FUNCD_BUF_INIT;
    va_list ap;
    va_start(ap, fmt);
    funcd_buf_vprintf(&msg, fmt, ap);
    va_end(ap);
    if (p->warn && msg.data)
        p->warn(msg.data, p->payload);
    funcd_buf_free(&msg);
}

/* The path inside the archive: what follows "DIR/". */
static const char *rel_path(const packer *p)
{
    return p->path.data + p->root_len + 1;
}

static int archive_fail(packer *p)
{
    if (p->too_large)
        return fail(p, "the bundle passes %zu MiB compressed, the most funcd accepts: leave build "
                       "outputs, dependencies and data out of the directory",
                    p->max_bytes >> 20);
    return fail(p, "cannot pack %s: %s", rel_path(p), archive_error_string(p->a));
}

static la_ssize_t on_archive_write(struct archive *a, void *client, const void *data, size_t n)
{
    packer *p = client;
    if (p->out->len - p->out_start + n > p->max_bytes) {
        p->too_large = 1;
        archive_set_error(a, EFBIG, "bundle too large");
        return -1;
    }
    if (funcd_buf_append(p->out, data, n) != 0) {
        archive_set_error(a, ENOMEM, "out of memory");
        return -1;
    }
    return (la_ssize_t)n;
}

/* Owner, group and permissions are normalized: the platform runs the code
 * as its own user, and only "may this be executed" carries over. */
static int write_header(packer *p, const struct stat *st, mode_t type, int64_t size)
{
    struct archive_entry *e = archive_entry_new();
    if (!e)
        return fail(p, "out of memory");
    archive_entry_set_pathname(e, rel_path(p));
    archive_entry_set_filetype(e, type);
    archive_entry_set_perm(e, type == AE_IFDIR || (st->st_mode & 0111) ? 0755 : 0644);
    archive_entry_set_size(e, size);
    archive_entry_set_mtime(e, st->st_mtime, 0);
    archive_entry_set_uid(e, 0);
    archive_entry_set_gid(e, 0);
    int rc = archive_write_header(p->a, e);
    archive_entry_free(e);
    if (rc == ARCHIVE_WARN)
        warn(p, "%s: %s", rel_path(p), archive_error_string(p->a));
    else if (rc != ARCHIVE_OK)
        return archive_fail(p);
    return 0;
}

static int copy_contents(packer *p, int fd, int64_t size)
{
    while (size > 0) {
        size_t want = size < CHUNK ? (size_t)size : CHUNK;
        ssize_t n = read(fd, p->chunk, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return fail(p, "cannot read %s: %s", p->path.data, strerror(errno));
        if (n == 0)
            return fail(p, "%s shrank while it was being packed: run the command again",
                        p->path.data);
        if (archive_write_data(p->a, p->chunk, (size_t)n) != n)
            return archive_fail(p);
        size -= n;
    }
    return 0;
}

static int pack_file(packer *p)
{
    int fd = open(p->path.data, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int rc = fail(p, "cannot read %s: %s", p->path.data, strerror(errno));
        if (fd >= 0)
            close(fd);
        return rc;
    }
    int rc = S_ISREG(st.st_mode) ? write_header(p, &st, AE_IFREG, st.st_size)
                                 : fail(p, "%s changed while it was being packed: run the "
                                           "command again",
                                        p->path.data);
    if (rc == 0)
        rc = copy_contents(p, fd, st.st_size);
    close(fd);
    if (rc == 0) {
        p->stats->files++;
        p->stats->bytes += (uint64_t)st.st_size;
    }
    return rc;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* The names in the directory at p->path, sorted so the archive is the
 * same from one run to the next. */
static int list_names(packer *p, char ***out, size_t *count)
{
    DIR *d = opendir(p->path.data);
    if (!d)
        return fail(p, "cannot read directory %s: %s", p->path.data, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    int rc = 0;
    errno = 0;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            char **grown = realloc(names, cap * sizeof(*names));
            if (!grown) {
                rc = fail(p, "out of memory");
                break;
            }
            names = grown;
        }
        if (!(names[n] = strdup(de->d_name)))
            rc = fail(p, "out of memory");
        else
            n++;
    }
    if (rc == 0 && errno != 0)
        rc = fail(p, "cannot read directory %s: %s", p->path.data, strerror(errno));
    closedir(d);
    if (rc != 0) {
        free_names(names, n);
        return rc;
    }
    if (n > 0)
        qsort(names, n, sizeof(*names), compare_names);
    *out = names;
    *count = n;
    return 0;
}

static int pack_entry(packer *p);

/* Packs what the directory at p->path holds (not the directory itself). */
static int pack_children(packer *p)
{
    char **names = NULL;
    size_t n = 0, dir_len = p->path.len;
    int rc = list_names(p, &names, &n);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        /* Version-control state is not part of the function. */
        if (!strcmp(names[i], ".git"))
            continue;
        if (funcd_buf_printf(&p->path, "/%s", names[i]) != 0)
            rc = fail(p, "out of memory");
        else
            rc = pack_entry(p);
        p->path.len = dir_len;
        p->path.data[dir_len] = '\0';
    }
    free_names(names, n);
    return rc;
}

static int pack_entry(packer *p)
{
    struct stat st;
    if (lstat(p->path.data, &st) != 0)
        return fail(p, "cannot read %s: %s", p->path.data, strerror(errno));
    if (S_ISREG(st.st_mode))
        return pack_file(p);
    if (S_ISDIR(st.st_mode)) {
        if (write_header(p, &st, AE_IFDIR, 0) != 0)
            return -1;
        p->stats->dirs++;
        return pack_children(p);
    }
    p->stats->skipped++;
    if (S_ISLNK(st.st_mode))
        warn(p, "skipping symlink %s (a bundle holds regular files and directories only; copy "
                "the target in instead)",
             rel_path(p));
    else
        warn(p, "skipping %s: not a regular file or directory", rel_path(p));
    return 0;
}

static int open_archive(packer *p)
{
    p->a = archive_write_new();
    if (!p->a)
        return fail(p, "out of memory");
    if (archive_write_add_filter_gzip(p->a) != ARCHIVE_OK ||
        /* gzip would store the current time: the same tree must give the same digest. */
        archive_write_set_filter_option(p->a, "gzip", "timestamp", NULL) != ARCHIVE_OK ||
        archive_write_set_format_pax_restricted(p->a) != ARCHIVE_OK ||
        /* File names are bytes: store them as they are, whatever the locale
         * (libarchive would convert from it, and the C locale has no "é"). */
        archive_write_set_format_option(p->a, "pax", "hdrcharset", "BINARY") != ARCHIVE_OK ||
        archive_write_set_bytes_in_last_block(p->a, 1) != ARCHIVE_OK ||
        archive_write_open(p->a, p, NULL, on_archive_write, NULL) != ARCHIVE_OK)
        return fail(p, "cannot start the archive: %s", archive_error_string(p->a));
    return 0;
}

static int pack_root(packer *p, const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return fail(p, "cannot read %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return fail(p, "%s is not a directory: give the directory that holds the function's code",
                    dir);
    if (funcd_buf_puts(&p->path, dir) != 0)
        return fail(p, "out of memory");
    while (p->path.len > 1 && p->path.data[p->path.len - 1] == '/')
        p->path.data[--p->path.len] = '\0';
    p->root_len = p->path.len;
    return pack_children(p);
}

int ctl_bundle_pack(const char *dir, size_t max_bytes, funcd_buf *out, ctl_bundle_stats *stats,
                    ctl_bundle_warn_fn warn_fn, void *payload, funcd_buf *err)
{
    packer p = {.out = out, .out_start = out->len, .max_bytes = max_bytes, .stats = stats,
                .warn = warn_fn, .payload = payload, .err = err};
    memset(stats, 0, sizeof(*stats));
    p.chunk = malloc(CHUNK);
    int rc = p.chunk ? open_archive(&p) : fail(&p, "out of memory");
    if (rc == 0)
        rc = pack_root(&p, dir);
    if (rc == 0 && archive_write_close(p.a) != ARCHIVE_OK) {
        rc = p.too_large ? archive_fail(&p)
                         : fail(&p, "cannot finish the archive of %s: %s", dir,
                                archive_error_string(p.a));
    }
    if (p.a)
        archive_write_free(p.a);
    free(p.chunk);
    funcd_buf_free(&p.path);
    return rc;
}
