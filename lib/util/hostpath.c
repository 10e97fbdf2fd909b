#include "util/hostpath.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int funcd_hostpath_resolve(const char *path, char *out, size_t out_len, const char **why)
{
    static const char *const unset = "cannot be resolved";
    *why = unset;
    if (out_len > 0)
        out[0] = '\0';
    if (!path || path[0] != '/') {
        *why = "is not an absolute path";
        return -1;
    }
    if (strnlen(path, FUNCD_HOSTPATH_MAX) >= FUNCD_HOSTPATH_MAX) {
        *why = "is too long";
        return -1;
    }
    char *real = realpath(path, NULL);
    if (!real) {
        switch (errno) {
        case ENOENT: *why = "does not exist on the funcd host"; break;
        case ENOTDIR: *why = "passes through something that is not a directory"; break;
        case ELOOP: *why = "loops through symlinks"; break;
        case ENAMETOOLONG: *why = "is too long"; break;
        case EACCES: *why = "cannot be searched by funcd"; break;
        default: break;
        }
        return -1;
    }
    /* realpath reads magic links (/proc/<pid>/root, /proc/<pid>/cwd) as
     * text: the text names a path in another process's view, which need not
     * be the object the path opens. Only a path whose resolution is the
     * same file is taken. */
    struct stat a, b;
    int same = stat(path, &a) == 0 && stat(real, &b) == 0 && a.st_dev == b.st_dev &&
               a.st_ino == b.st_ino;
    size_t n = strlen(real);
    int rc = -1;
    if (!same)
        *why = "resolves through a link to another process's view of the file system";
    else if (n >= out_len)
        *why = "is too long";
    else {
        memcpy(out, real, n + 1);
        rc = 0;
    }
    free(real);
    return rc;
}

int funcd_hostpath_under(const char *path, const char *root)
{
    size_t n = strlen(root);
    while (n > 1 && root[n - 1] == '/') /* "/" itself keeps its slash */
        n--;
    if (n == 1 && root[0] == '/')
        return path[0] == '/';
    return strncmp(path, root, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

int funcd_hostpath_allowed(const char *path, const char *const *roots, char *out,
                           size_t out_len, const char **why)
{
    if (funcd_hostpath_resolve(path, out, out_len, why) < 0)
        return -1;
    for (const char *const *r = roots; r && *r; r++)
        if (funcd_hostpath_under(out, *r))
            return 0;
    *why = roots && roots[0] ? "lies outside every source root the operator allows"
                             : "is a host path, and the operator allows no source root";
    return -1;
}

static int has_prefix(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

/* user@host:path, the scp-like form git reads as ssh (no '/' before the
 * colon: "./a:b" and "/a:b" are local paths). */
static int is_scp_like(const char *s)
{
    const char *at = strchr(s, '@'), *colon = strchr(s, ':'), *slash = strchr(s, '/');
    return at && colon && at < colon && at > s && colon > at + 1 && (!slash || slash > colon);
}

const char *funcd_git_url_host_path(const char *url)
{
    static const char *const network[] = {"https://", "http://", "ssh://", "git://"};
    for (size_t i = 0; i < sizeof(network) / sizeof(network[0]); i++)
        if (has_prefix(url, network[i]))
            return NULL;
    if (is_scp_like(url))
        return NULL;
    if (has_prefix(url, "file://"))
        return url + 7; /* file:///x -> /x; file://host/x -> "host/x": not absolute */
    return url;
}
