/*
 * Host paths named by users (spec.source.path, a host-local git URL), checked
 * against the roots the operator allows (docs/security.md, "Host paths").
 *
 * A path is judged by what it resolves to on this host, never by its text:
 * "//etc", "/etc/.", "/srv/fn/../../etc", a symlink and /proc/<pid>/root all
 * resolve to what they name before the check.
 */
#ifndef FUNCD_UTIL_HOSTPATH_H
#define FUNCD_UTIL_HOSTPATH_H

#include <stddef.h>

/* Longest path accepted (the API's limit for spec.source.path). */
#define FUNCD_HOSTPATH_MAX 4096

/*
 * Resolves `path` as the kernel would open it (realpath(3): every symlink,
 * "//", ".", ".."), into `out` (at least FUNCD_HOSTPATH_MAX bytes). The
 * resolved path must name the same file as `path` (a link into another mount
 * namespace, such as /proc/<pid>/root of a container, does not). 0, or -1
 * with `why` saying what is wrong ("does not exist", "is not absolute", ...).
 */
int funcd_hostpath_resolve(const char *path, char *out, size_t out_len, const char **why);

/* 1 when the resolved path `path` is `root` or lies below it (by whole
 * components: /srv/fn2 is not below /srv/fn). Both must be resolved. */
int funcd_hostpath_under(const char *path, const char *root);

/*
 * Resolves `path` and checks it lies under one of `roots` (resolved paths,
 * NULL-terminated; NULL: none). 0 with `out` filled, or -1 with `why`.
 */
int funcd_hostpath_allowed(const char *path, const char *const *roots, char *out,
                           size_t out_len, const char **why);

/* The host path a git URL names, or NULL for a network transport (https://,
 * http://, ssh://, git://, user@host:path). "file:///x" gives "/x", an
 * absolute path itself; anything else is returned as it is (not a network
 * transport, so it is host-local: the caller refuses what is not absolute). */
const char *funcd_git_url_host_path(const char *url);

#endif
