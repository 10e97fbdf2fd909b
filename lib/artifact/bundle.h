/*
 * Function artifacts from uploaded bundles: a bundle is a gzip-compressed
 * tar archive stored in the blob store under "sha256:<hex>" of its bytes.
 *
 * Bundles come from users, so nothing in one is trusted: every entry is
 * validated (paths, link targets, entry types, sizes) before anything is
 * written, and extraction never follows a symbolic link. funcd_bundle_check
 * and funcd_bundle_extract run the same validation, so a bundle that passes
 * the check on upload extracts later (barring OS errors).
 *
 * Rules (docs/bundles.md says the same for users):
 *  - entry paths are relative, contain no ".." component, are at most
 *    FUNCD_BUNDLE_MAX_PATH bytes and FUNCD_BUNDLE_MAX_DEPTH components deep;
 *    "." components and a leading "./" are ignored; a path may appear once
 *    (directories may repeat); no entry may live under a file or a symlink;
 *    the top-level name ".complete" is reserved for the cache marker;
 *  - regular files and directories are allowed; files keep only the user
 *    exec bit (0755 or 0644), directories are 0755, no setuid/setgid/sticky;
 *  - symbolic links need a relative target made of leading ".." components
 *    followed by names only, and may not climb above the bundle root from
 *    the link's directory (so no chain of links can escape either);
 *  - hard links must name an earlier regular file of the bundle;
 *  - devices, FIFOs and sockets are refused;
 *  - the compressed input, the uncompressed content and the entry count are
 *    bounded by funcd_bundle_limits; the uncompressed bound is enforced
 *    while decompressing, so a gzip bomb stops at the limit.
 *
 * Errors: FUNCD_EINVAL for a bad bundle, FUNCD_EIO for an OS failure,
 * FUNCD_ENOTFOUND for a missing blob; `err` (if not NULL) and
 * funcd_error_last() get the same message, which names the entry.
 *
 * Threads: every function is reentrant; materialize may run concurrently
 * for the same digest and cache root from any number of threads.
 */
#ifndef FUNCD_ARTIFACT_BUNDLE_H
#define FUNCD_ARTIFACT_BUNDLE_H

#include <stddef.h>
#include <stdint.h>

#include "funcd/sys/blob.h"

#define FUNCD_BUNDLE_MAX_COMPRESSED ((uint64_t)64 << 20)
#define FUNCD_BUNDLE_MAX_TOTAL ((uint64_t)256 << 20)
#define FUNCD_BUNDLE_MAX_ENTRIES ((uint64_t)10000)
#define FUNCD_BUNDLE_MAX_PATH 1024
#define FUNCD_BUNDLE_MAX_DEPTH 64

/* The marker written last into a complete cache directory. */
#define FUNCD_BUNDLE_COMPLETE_MARKER ".complete"

/* "sha256:" + 64 hex digits + NUL. */
#define FUNCD_BUNDLE_DIGEST_LEN 72

/* A zero field means its default above; a NULL pointer means all defaults. */
typedef struct funcd_bundle_limits {
    uint64_t max_compressed; /* bytes of the .tar.gz */
    uint64_t max_total;      /* bytes of file content after decompression */
    uint64_t max_entries;    /* tar entries, directories included */
} funcd_bundle_limits;

/* "sha256:<64 lowercase hex>" of the bytes. 0, or FUNCD_EIO if mbedtls fails. */
int funcd_bundle_digest(const void *data, size_t len, char out[FUNCD_BUNDLE_DIGEST_LEN]);

/* 1 when `digest` is "sha256:" followed by 64 lowercase hex digits. */
int funcd_bundle_digest_valid(const char *digest);

/*
 * Bundles belong to the namespaces that uploaded them: the bytes are stored
 * once under their digest, and a marker "bundles/<ns>/<digest>" in the same
 * blob store says that `ns` uploaded them. Only a namespace with the marker
 * may run the bundle, and an upload answers "already there" only to it.
 */
int funcd_bundle_grant(funcd_blob *b, const char *ns, const char *digest);
/* 1 when `ns` uploaded `digest`, else 0. */
int funcd_bundle_visible(funcd_blob *b, const char *ns, const char *digest);

/* Validates a bundle in memory without writing anything. */
int funcd_bundle_check(const void *data, size_t len, const funcd_bundle_limits *lim, char *err,
                       size_t errlen);

/*
 * Extracts a bundle into `dest_dir`, which must not exist (its parent must);
 * it is created with mode 0755 and removed again on any error.
 * FUNCD_EEXISTS when `dest_dir` already exists.
 */
int funcd_bundle_extract(const void *data, size_t len, const char *dest_dir,
                         const funcd_bundle_limits *lim, char *err, size_t errlen);

/*
 * The per-digest cache: returns in `out_dir` the absolute path of
 * `cache_root`/<hex>, a complete extraction of the bundle `digest`
 * ("sha256:<hex>") read from `blob`. An existing complete directory is
 * returned without reading the blob. Otherwise the blob is read, its sha256
 * verified against `digest`, extracted (default limits) into
 * `cache_root`/.tmp-XXXXXX, synced, marked complete and renamed into place;
 * when another thread or process won the race, its directory is used.
 * `cache_root` is created (0755) if missing.
 * FUNCD_ENOTFOUND when the blob is missing; FUNCD_EINVAL for a malformed
 * digest, a digest mismatch or an unsafe bundle.
 */
int funcd_bundle_materialize(funcd_blob *blob, const char *digest, const char *cache_root,
                             char *out_dir, size_t out_len, char *err, size_t errlen);

/*
 * Removes a directory tree without following symbolic links (for a cache
 * entry or a failed extraction). 0 when removed or absent, FUNCD_EIO.
 */
int funcd_bundle_remove_tree(const char *path);

#endif
