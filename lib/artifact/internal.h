/* Shared by the files of lib/artifact; not for other folders. */
#ifndef FUNCD_ARTIFACT_INTERNAL_H
#define FUNCD_ARTIFACT_INTERNAL_H

#include <stddef.h>

#include "artifact/bundle.h"

/*
 * Formats a message into `err` (when not NULL) and the thread's last error;
 * returns `code` so callers can `return funcd__bundle_fail(...)`.
 */
int funcd__bundle_fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Extracts into the open, empty directory `root_fd` (named `dest` in messages). */
int funcd__bundle_extract_fd(const void *data, size_t len, int root_fd, const char *dest,
                             const funcd_bundle_limits *lim, char *err, size_t errlen);

/* Removes `name` under `dirfd` (a file or a whole tree) without following
 * symbolic links. 0 when removed or absent, -1 with errno otherwise. */
int funcd__remove_tree_at(int dirfd, const char *name);

#endif
