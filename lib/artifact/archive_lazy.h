/*
 * libarchive, loaded on first use. libarchive pulls in a dozen libraries
 * (libxml2, ICU, libstdc++, the compressors) that an idle funcd never needs:
 * linked directly they were most of its resident memory. bundle.c and
 * lib/oci/unpack.c include this header; the names below then resolve through the
 * table, whose types come from libarchive's own prototypes.
 */
#ifndef FUNCD_ARTIFACT_ARCHIVE_LAZY_H
#define FUNCD_ARTIFACT_ARCHIVE_LAZY_H

#include <archive.h>
#include <archive_entry.h>

#define FUNCD_ARCHIVE_FUNCTIONS(X)                                                                 \
    X(archive_error_string)                                                                        \
    X(archive_format)                                                                              \
    X(archive_filter_count)                                                                        \
    X(archive_filter_code)                                                                         \
    X(archive_filter_bytes)                                                                        \
    X(archive_read_new)                                                                            \
    X(archive_read_free)                                                                           \
    X(archive_read_support_format_tar)                                                             \
    X(archive_read_support_filter_gzip)                                                            \
    X(archive_read_open_memory)                                                                    \
    X(archive_read_next_header)                                                                    \
    X(archive_read_data)                                                                           \
    X(archive_entry_symlink)                                                                       \
    X(archive_entry_size_is_set)                                                                   \
    X(archive_entry_size)                                                                          \
    X(archive_entry_perm)                                                                          \
    X(archive_entry_pathname)                                                                      \
    X(archive_entry_hardlink)                                                                      \
    X(archive_entry_filetype)                                                                      \
    X(archive_entry_pathname_utf8)                                                                 \
    X(archive_entry_hardlink_utf8)                                                                 \
    X(archive_entry_symlink_utf8)                                                                  \
    X(archive_read_support_filter_zstd)                                                            \
    X(archive_read_open_fd)

typedef struct funcd_archive_api {
#define FUNCD_ARCHIVE_SLOT(name) __typeof__(name) *name;
    FUNCD_ARCHIVE_FUNCTIONS(FUNCD_ARCHIVE_SLOT)
#undef FUNCD_ARCHIVE_SLOT
} funcd_archive_api;

extern funcd_archive_api funcd__archive;

/* Loads libarchive once (thread-safe). 0, or FUNCD_EIO naming what failed. */
int funcd__archive_load(void);

#ifndef FUNCD_ARCHIVE_LAZY_IMPL
#define archive_error_string (funcd__archive.archive_error_string)
#define archive_format (funcd__archive.archive_format)
#define archive_filter_count (funcd__archive.archive_filter_count)
#define archive_filter_code (funcd__archive.archive_filter_code)
#define archive_filter_bytes (funcd__archive.archive_filter_bytes)
#define archive_read_new (funcd__archive.archive_read_new)
#define archive_read_free (funcd__archive.archive_read_free)
#define archive_read_support_format_tar (funcd__archive.archive_read_support_format_tar)
#define archive_read_support_filter_gzip (funcd__archive.archive_read_support_filter_gzip)
#define archive_read_open_memory (funcd__archive.archive_read_open_memory)
#define archive_read_next_header (funcd__archive.archive_read_next_header)
#define archive_read_data (funcd__archive.archive_read_data)
#define archive_entry_symlink (funcd__archive.archive_entry_symlink)
#define archive_entry_size_is_set (funcd__archive.archive_entry_size_is_set)
#define archive_entry_size (funcd__archive.archive_entry_size)
#define archive_entry_perm (funcd__archive.archive_entry_perm)
#define archive_entry_pathname (funcd__archive.archive_entry_pathname)
#define archive_entry_hardlink (funcd__archive.archive_entry_hardlink)
#define archive_entry_filetype (funcd__archive.archive_entry_filetype)
#define archive_entry_pathname_utf8 (funcd__archive.archive_entry_pathname_utf8)
#define archive_entry_hardlink_utf8 (funcd__archive.archive_entry_hardlink_utf8)
#define archive_entry_symlink_utf8 (funcd__archive.archive_entry_symlink_utf8)
#define archive_read_support_filter_zstd (funcd__archive.archive_read_support_filter_zstd)
#define archive_read_open_fd (funcd__archive.archive_read_open_fd)
#endif

#endif
