/*
 * Image layers into a root file system, and the per-digest cache of those
 * root file systems (docs/images.md, docs/adr/0015-rootfs-cache.md).
 *
 * Layers come from registries, so nothing in one is trusted. The rules:
 *  - entry paths are relative (a leading "/" is refused), contain no ".."
 *    component, are at most FUNCD_UNPACK_MAX_PATH bytes, FUNCD_UNPACK_MAX_DEPTH
 *    components deep and 255 bytes per component; "." components are ignored;
 *  - directories in an entry's path are resolved inside the rootfs, as the
 *    sandbox would at run time: a symbolic link there (absolute or relative)
 *    is followed with the rootfs as "/" (openat2 RESOLVE_IN_ROOT), so it
 *    can never lead outside; the entry's own name is never followed;
 *  - regular files, directories and symbolic links (any target: they are
 *    never followed during extraction) are created; a later entry replaces
 *    an earlier one of the same path (a directory over a directory merges);
 *  - hard links must name an existing non-directory inside the rootfs
 *    (from a lower layer or earlier in the same one);
 *  - devices, FIFOs and sockets are refused, naming the entry;
 *  - permissions are kept without the setuid and setgid bits; owners are not
 *    applied (everything belongs to the extracting user);
 *  - OCI whiteouts: "D/.wh.NAME" removes D/NAME (a file or a whole tree) as
 *    lower layers left it, "D/.wh..wh..opq" empties D of what lower layers put
 *    there; entries of the same layer stay; whiteout files are never created;
 *    other ".wh..wh." names (aufs metadata) are skipped;
 *  - uncompressed content over all layers is capped by max_bytes and the
 *    entry count by max_entries, enforced while decompressing.
 *
 * Errors: FUNCD_EINVAL for a bad layer or media type, FUNCD_EEXISTS when the
 * rootfs already exists, FUNCD_ENOSPC when the disk is full, FUNCD_EIO for
 * other OS failures, FUNCD_ENOMEM. `err` (if not NULL) and funcd_error_last()
 * get the same message, which names the layer and the entry.
 */
#ifndef FUNCD_OCI_UNPACK_H
#define FUNCD_OCI_UNPACK_H

#include <stddef.h>
#include <stdint.h>

#define FUNCD_UNPACK_MAX_BYTES ((uint64_t)2 << 30)
#define FUNCD_UNPACK_MAX_ENTRIES ((uint64_t)200000)
#define FUNCD_UNPACK_MAX_PATH 4096
#define FUNCD_UNPACK_MAX_DEPTH 256

#define FUNCD_OCI_MT_LAYER_TAR "application/vnd.oci.image.layer.v1.tar"
#define FUNCD_OCI_MT_LAYER_GZIP "application/vnd.oci.image.layer.v1.tar+gzip"
#define FUNCD_OCI_MT_LAYER_ZSTD "application/vnd.oci.image.layer.v1.tar+zstd"
#define FUNCD_OCI_MT_DOCKER_LAYER "application/vnd.docker.image.rootfs.diff.tar.gzip"

/* A zero field means its default above; a NULL pointer means all defaults. */
typedef struct funcd_unpack_limits {
    uint64_t max_bytes;   /* file content after decompression, all layers together */
    uint64_t max_entries; /* tar entries, all layers together */
    /* Skip the syncfs before the final rename (fuzzing): a power cut may then leave a
     * rootfs with empty files under its final name. */
    int skip_sync;
} funcd_unpack_limits;

/*
 * Applies the `n` layers (files on disk, lowest first) in order into
 * `rootfs_dir`, which must not exist (its parent must). The work happens in
 * `rootfs_dir`.tmp-XXXXXX, which is synced and renamed into place only when
 * complete, so no partial rootfs ever carries the final name; on failure it
 * is removed. The rootfs gets empty directories proc, dev, tmp (1777) and
 * run/funcd where absent: mount points for the sandbox.
 * The media type decides only whether a layer is accepted; compression
 * (none, gzip, zstd) is recognized from the data.
 * Reentrant: any number of threads may unpack at once into different dirs.
 */
int funcd_oci_unpack(const char *const *layer_paths, const char *const *media_types, size_t n,
                     const char *rootfs_dir, const funcd_unpack_limits *lim, char *err,
                     size_t errlen);

/* ---- the rootfs cache ------------------------------------------------------------------ */

/*
 * Root file systems by manifest digest under one directory: `dir`/<alg>-<hex>
 * (a ':' would split overlayfs' lowerdir lists). Each is extracted once and
 * shared; a caller holds one with get and releases it with put. When the
 * bytes on disk of all of them exceed max_bytes, the least recently used
 * ones nobody holds are removed (an image larger than the cap alone is
 * kept while in use and removed on its last put).
 *
 * Threads: every function is thread-safe except free, which must come after
 * all other calls. Concurrent gets of one digest wait for one extraction;
 * gets of different digests extract in parallel.
 */
typedef struct funcd_rootfs_cache funcd_rootfs_cache;

typedef struct funcd_rootfs_cache_stats {
    uint64_t entries;     /* rootfs ready on disk */
    uint64_t bytes;       /* their bytes on disk */
    uint64_t in_use;      /* entries with at least one holder */
    uint64_t extractions; /* successful unpacks since new */
    uint64_t evictions;   /* rootfs removed to stay under the cap */
} funcd_rootfs_cache_stats;

/*
 * Opens the cache in `dir` (created if missing, mode 0755). What a previous
 * run left is reused: complete rootfs are indexed (least recently used by
 * their directory's mtime), unfinished ".tmp-" directories removed. 0
 * `max_bytes` means no cap. 0 and the cache in `*out`, or FUNCD_EINVAL /
 * FUNCD_ENOMEM / FUNCD_EIO with funcd_error_last() saying why.
 */
int funcd_rootfs_cache_new(funcd_rootfs_cache **out, const char *dir, uint64_t max_bytes);

/*
 * The rootfs of `manifest_digest` ("<alg>:<hex>") in `out_dir`, extracted from
 * the layers with default limits unless already there; marks it in use until
 * the matching put. Errors as for funcd_oci_unpack, FUNCD_EINVAL for a
 * malformed digest or an out_len too small for the path.
 */
int funcd_rootfs_cache_get(funcd_rootfs_cache *c, const char *manifest_digest,
                           const char *const *layer_paths, const char *const *media_types,
                           size_t n, char *out_dir, size_t out_len, char *err, size_t errlen);

/* Releases one get of `manifest_digest`; it may be evicted from now on. */
void funcd_rootfs_cache_put(funcd_rootfs_cache *c, const char *manifest_digest);

void funcd_rootfs_cache_stats_get(funcd_rootfs_cache *c, funcd_rootfs_cache_stats *out);

/* 1 when the rootfs of `manifest_digest` is extracted now (a get would not
 * read the layers unless it is evicted first). */
int funcd_rootfs_cache_has(funcd_rootfs_cache *c, const char *manifest_digest);

/* Frees the cache object; what is on disk stays for the next run. NULL is fine. */
void funcd_rootfs_cache_free(funcd_rootfs_cache *c);

#endif
