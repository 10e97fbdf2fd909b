/*
 * funcd backend SPI — the blob port.
 *
 * A blob store keeps opaque byte objects under string keys. Artifacts are
 * stored content-addressed under "sha256:<hex>" keys by their callers; the
 * port itself does not interpret keys.
 *
 * Writing a driver: embed `funcd_blob` first, fill `version` with
 * FUNCD_BLOB_VERSION (FUNCD_BLOB_INIT), `name` and the methods.
 * Versions: funcd_platform_new takes a driver of any version from 1 to
 * FUNCD_BLOB_VERSION (else FUNCD_EVERSION) and refuses one that lacks a
 * slot marked required for its version (FUNCD_EINVAL). Slots are only
 * appended, under a "version N" line; an optional slot, or one appended
 * after the driver's version, is called only when the driver's version has it
 * and it is set (docs/backends.md).
 *
 * Ownership: funcd_with_blob transfers the backend to the platform, which
 * calls `free` once. Data returned by `get` is malloc()ed and owned by the
 * caller; data passed to `put` is borrowed for the call.
 *
 * Threads: every method may be called from any thread concurrently.
 */
#ifndef FUNCD_SYS_BLOB_H
#define FUNCD_SYS_BLOB_H

#include "funcd/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FUNCD_BLOB_VERSION 2

/** `length` for get: read to the end of the object. */
#define FUNCD_BLOB_TO_END UINT64_MAX

typedef struct funcd_blob funcd_blob;
typedef struct funcd_blob_writer funcd_blob_writer;

typedef struct funcd_blob_stat {
    uint64_t size;
    int64_t mtime_ms; /**< last write, Unix epoch milliseconds */
} funcd_blob_stat;

/** Return non-zero to stop the listing early. */
typedef int (*funcd_blob_list_cb)(const char *key, const funcd_blob_stat *st, void *payload);

struct funcd_blob {
    unsigned version;
    const char *name;

    /* ---- version 1: every slot required (the platform's function logs
     *      list and delete objects too) ---- */

    /** Stores `data` under `key`, replacing any previous object atomically. */
    int (*put)(funcd_blob *b, const char *key, const void *data, size_t len);

    /**
     * Reads `length` bytes from `offset` (FUNCD_BLOB_TO_END: to the end; a
     * range running past the end is cut at the end). `*out` is malloc()ed
     * (never NULL on success, even for 0 bytes). FUNCD_ENOTFOUND if absent,
     * FUNCD_ERANGE if `offset` is greater than the object's size.
     */
    int (*get)(funcd_blob *b, const char *key, uint64_t offset, uint64_t length, void **out,
               size_t *out_len);

    /** FUNCD_ENOTFOUND if absent. */
    int (*stat)(funcd_blob *b, const char *key, funcd_blob_stat *out);

    /** Calls `cb` for every key starting with `prefix`, in byte order. */
    int (*list)(funcd_blob *b, const char *prefix, funcd_blob_list_cb cb, void *payload);

    /** FUNCD_ENOTFOUND if absent. */
    int (*del)(funcd_blob *b, const char *key);

    void (*free)(funcd_blob *b);

    /* ---- version 2: optional ---- */

    /**
     * Opens a writer that streams a new object under `key` (see
     * funcd_blob_writer): nothing is visible under `key` until its commit,
     * which replaces any previous object atomically, as put does. Errors as
     * put's (FUNCD_EINVAL for a key the driver cannot hold). Without it the
     * platform buffers the whole object and calls put.
     */
    int (*put_open)(funcd_blob *b, const char *key, funcd_blob_writer **out);
};

/**
 * A streaming write (blob version 2), made by put_open and used by one
 * thread at a time. Every writer ends with exactly one commit or abort,
 * which frees it, whatever they return; after a failed write only abort is
 * allowed. A driver may embed this struct first in its own.
 */
struct funcd_blob_writer {
    /** Appends `len` bytes (`data` borrowed for the call). FUNCD_ENOSPC,
     *  FUNCD_EIO, FUNCD_EUNAVAILABLE, ... */
    int (*write)(funcd_blob_writer *w, const void *data, size_t len);
    /** Publishes what was written under the key, replacing any previous
     *  object atomically; on failure nothing was stored and the previous
     *  object is unchanged. Frees the writer. */
    int (*commit)(funcd_blob_writer *w);
    /** Discards what was written (the previous object stays) and frees the
     *  writer. */
    void (*abort)(funcd_blob_writer *w);
};

#define FUNCD_BLOB_INIT {FUNCD_BLOB_VERSION}

/** A new, empty, in-process blob store. */
FUNCD_EXTERN int funcd_blob_memory_new(funcd_blob **out);

/**
 * A blob store in the directory `dir` (created, with parents, if absent):
 * one file per object, written (by put, or streamed by put_open) to a temp
 * file, fsync()ed and renamed into place, so a crash or a full disk leaves the previous object intact. A key
 * becomes a file name with bytes outside [A-Za-z0-9._-] (and '/') as %XX;
 * that name may be at most 255 bytes, else put/get fail with FUNCD_EINVAL.
 * A full disk or quota gives FUNCD_ENOSPC. Temp files left by a crash are
 * removed here. The name is "file". See docs/backends.md.
 */
FUNCD_EXTERN int funcd_blob_file_new(funcd_blob **out, const char *dir);

/**
 * A blob store in the PostgreSQL database `conninfo` names (a URL
 * postgresql://user@host:port/db, postgresql:///db?host=/socket/dir, or
 * keyword=value pairs), shared by every funcd that names it: objects are
 * rows of up to 1 MiB chunks in funcd_blobs and funcd_blob_chunks (created
 * if absent in the first schema of the search path). A put replaces an
 * object atomically; a get reads one snapshot. A put_open writer stores
 * each 1 MiB chunk as it fills, under a staging key no object can have,
 * and its commit moves them under the key in one transaction (staging rows
 * a crash left are removed a day later, when a store opens). The name is
 * "postgres".
 *
 * Fails with FUNCD_EINVAL (a malformed connection string) or
 * FUNCD_EUNAVAILABLE (the server cannot be reached now). Once open, calls
 * answer FUNCD_EUNAVAILABLE while the server is away and the store
 * reconnects by itself. See docs/backends.md.
 */
FUNCD_EXTERN int funcd_blob_postgres_new(funcd_blob **out, const char *conninfo);

#ifdef __cplusplus
}
#endif
#endif
