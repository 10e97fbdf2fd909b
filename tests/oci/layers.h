/*
 * Writing image layers for tests: a layer is a list of entries written with
 * libarchive's writer to a file, plain or gzip-compressed. Header-only so
 * test_unpack.c and test_rootfs_cache.c share it.
 */
#ifndef FUNCD_TESTS_OCI_LAYERS_H
#define FUNCD_TESTS_OCI_LAYERS_H

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "oci/unpack.h"

enum { L_END, L_FILE, L_DIR, L_SYMLINK, L_HARDLINK, L_CHARDEV, L_FIFO };

typedef struct layer_entry {
    int type;
    const char *path;
    const char *data; /* file content; link target */
    unsigned mode;    /* 0: 0644 for files, 0755 for directories */
    size_t size;      /* when not 0: a file of `size` bytes of 'z' instead of data */
} layer_entry;

/* Writes the entries up to L_END into `path`; 0 or -1. */
static inline int write_layer(const char *path, int gzip, const layer_entry *es)
{
    struct archive *a = archive_write_new();
    int rc = archive_write_set_format_pax_restricted(a);
    if (!rc && gzip)
        rc = archive_write_add_filter_gzip(a);
    if (!rc)
        rc = archive_write_open_filename(a, path);
    for (; !rc && es->type != L_END; es++) {
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, es->path);
        archive_entry_set_mtime(e, 1700000000, 0);
        char *big = NULL;
        const char *content = NULL;
        size_t len = 0;
        switch (es->type) {
        case L_FILE:
            archive_entry_set_filetype(e, AE_IFREG);
            archive_entry_set_perm(e, es->mode ? es->mode : 0644);
            if (es->size) {
                big = malloc(es->size);
                memset(big, 'z', es->size);
                content = big;
                len = es->size;
            } else {
                content = es->data ? es->data : "";
                len = strlen(content);
            }
            archive_entry_set_size(e, (la_int64_t)len);
            break;
        case L_DIR:
            archive_entry_set_filetype(e, AE_IFDIR);
            archive_entry_set_perm(e, es->mode ? es->mode : 0755);
            break;
        case L_SYMLINK:
            archive_entry_set_filetype(e, AE_IFLNK);
            archive_entry_set_perm(e, 0777);
            archive_entry_set_symlink(e, es->data);
            break;
        case L_HARDLINK:
            archive_entry_set_filetype(e, AE_IFREG);
            archive_entry_set_perm(e, 0644);
            archive_entry_set_hardlink(e, es->data);
            archive_entry_set_size(e, 0);
            break;
        case L_CHARDEV:
            archive_entry_set_filetype(e, AE_IFCHR);
            archive_entry_set_perm(e, 0666);
            archive_entry_set_rdevmajor(e, 1);
            archive_entry_set_rdevminor(e, 3);
            break;
        default:
            archive_entry_set_filetype(e, AE_IFIFO);
            archive_entry_set_perm(e, 0644);
            break;
        }
        rc = archive_write_header(a, e);
        if (!rc && len && archive_write_data(a, content, len) != (la_ssize_t)len)
            rc = -1;
        free(big);
        archive_entry_free(e);
    }
    if (archive_write_close(a) != ARCHIVE_OK)
        rc = -1;
    archive_write_free(a);
    return rc ? -1 : 0;
}

static inline int path_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Entries in a directory, or -1. */
static inline int count_entries(const char *path)
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

/* The start of a file (up to 255 bytes); "" when unreadable. */
typedef struct file_text_buf {
    char text[256];
} file_text_buf;

#define file_text(path) file_text_into((path), &(file_text_buf){{0}})

static inline const char *file_text_into(const char *path, file_text_buf *b)
{
    char *text = b->text;
    text[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return text;
    size_t n = fread(text, 1, sizeof(b->text) - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

#endif
