/*
 * Packing a directory into the tar.gz that `deploy` uploads as a bundle.
 *
 * The archive holds regular files and directories only, with paths relative
 * to the directory ("main.py", "lib/util.py"), sorted, owned by 0:0, mode
 * 0755 or 0644 (the exec bit is what survives), and the files' modification
 * times; symlinks and other special files are skipped with a warning, and
 * every entry named ".git" is left out. The same tree packs to the same
 * bytes (gzip's own timestamp is not stored), so redeploying an unchanged
 * directory uploads the same digest.
 */
#ifndef FUNCDCTL_BUNDLE_H
#define FUNCDCTL_BUNDLE_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

typedef struct ctl_bundle_stats {
    size_t files;
    size_t dirs;
    size_t skipped;
    uint64_t bytes; /* file contents before compression */
} ctl_bundle_stats;

/* Called once per entry left out, with a message naming it. */
typedef void (*ctl_bundle_warn_fn)(const char *message, void *payload);

/*
 * Packs `dir` into `out` (appended; a tar.gz). Stops with an error once the
 * compressed size would pass `max_bytes`. Returns 0, or -1 with `err` set to
 * a message naming the file and what went wrong.
 */
int ctl_bundle_pack(const char *dir, size_t max_bytes, funcd_buf *out, ctl_bundle_stats *stats,
                    ctl_bundle_warn_fn warn, void *payload, funcd_buf *err);

struct ctl_ctx;
struct ctl_client;

/* POSTs the tar.gz to the namespace's bundles (deploy, deploy-site): 0 with
 * *digest (malloc()ed) the bundle's sha256 digest, or an exit status (the
 * error reported). */
int ctl_bundle_upload(struct ctl_ctx *ctx, struct ctl_client *client, const funcd_buf *tgz,
                      char **digest);

#endif
