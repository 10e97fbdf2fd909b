/*
 * funcd backend SPI — the store port.
 *
 * A store is an ordered key/value map with a single global revision counter
 * (etcd-like). Every successful put or delete increments the revision by one;
 * the revision of a key's last change becomes the object's
 * metadata.resourceVersion.
 *
 * Writing a driver: embed `funcd_store` as the first member of your struct,
 * fill `version` with FUNCD_STORE_VERSION (FUNCD_STORE_INIT does), `name`,
 * and the methods.
 * Versions: funcd_platform_new takes a driver of any version from 1 to
 * FUNCD_STORE_VERSION (else FUNCD_EVERSION) and refuses one that lacks a
 * slot marked required for its version (FUNCD_EINVAL). Slots are only
 * appended, under a "version N" line; an optional slot, or one appended
 * after the driver's version, is called only when the driver's version has it
 * and it is set (docs/backends.md).
 *
 * Ownership: handing a store to the platform (funcd_with_store) transfers
 * ownership; the platform calls `free` exactly once at shutdown. Values the
 * store returns are malloc()ed copies owned by the caller (release with free()).
 * Values passed in are borrowed for the duration of the call.
 *
 * Threads: every method may be called from any thread concurrently.
 */
#ifndef FUNCD_SYS_STORE_H
#define FUNCD_SYS_STORE_H

#include "funcd/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FUNCD_STORE_VERSION 1

/** `expected` for put/delete: no precondition (last write wins). */
#define FUNCD_STORE_ANY UINT64_MAX
/** `expected` for put: the key must not exist (a create). */
#define FUNCD_STORE_ABSENT 0

typedef struct funcd_store funcd_store;
typedef struct funcd_store_watch funcd_store_watch; /* driver-defined */

/** One key as it is now. Pointers are valid only during the callback. */
typedef struct funcd_store_kv {
    const char *key;
    const void *value;
    size_t len;
    uint64_t revision;        /**< revision of the key's last change */
    uint64_t create_revision; /**< revision at which the key was created */
} funcd_store_kv;

/** A value returned to the caller; `value` is malloc()ed and NUL-terminated
 *  (the terminator is not counted in `len`). */
typedef struct funcd_store_value {
    void *value;
    size_t len;
    uint64_t revision;
    uint64_t create_revision;
} funcd_store_value;

typedef enum funcd_store_event_type {
    FUNCD_STORE_EVENT_PUT = 1,
    FUNCD_STORE_EVENT_DELETE = 2,
} funcd_store_event_type;

/** A change. For DELETE, `value` is the value the key had before the delete
 *  and `revision` is the revision of the delete itself. */
typedef struct funcd_store_event {
    funcd_store_event_type type;
    const char *key;
    const void *value;
    size_t len;
    uint64_t revision;
    uint64_t create_revision;
} funcd_store_event;

/** Return non-zero to stop the listing early. */
typedef int (*funcd_store_list_cb)(const funcd_store_kv *kv, void *payload);

/**
 * Called once per change, in strictly increasing revision order, never
 * twice for one revision and never concurrently for one watch. It may run on
 * the writer's thread while the store holds internal locks: it must be quick
 * and must not call back into the store.
 */
typedef void (*funcd_store_watch_cb)(const funcd_store_event *ev, void *payload);

struct funcd_store {
    unsigned version; /**< FUNCD_STORE_VERSION */
    const char *name; /**< "memory", "sqlite", ... shown in logs and /version */

    /* ---- version 1: every slot required unless marked optional ---- */

    /** Copies the value of `key` into `out`. FUNCD_ENOTFOUND if absent. */
    int (*get)(funcd_store *s, const char *key, funcd_store_value *out);

    /**
     * Writes `key`. `expected` is FUNCD_STORE_ANY, FUNCD_STORE_ABSENT, or the
     * revision the key must currently have. Fails with FUNCD_EEXISTS (expected
     * ABSENT, key exists), FUNCD_ENOTFOUND (expected a revision, key absent)
     * or FUNCD_ECONFLICT (key at another revision). On success stores the new
     * revision in `*revision` (if not NULL).
     */
    int (*put)(funcd_store *s, const char *key, const void *value, size_t len, uint64_t expected,
               uint64_t *revision);

    /** Deletes `key` under the same `expected` rules as put (ABSENT is invalid). */
    int (*del)(funcd_store *s, const char *key, uint64_t expected, uint64_t *revision);

    /**
     * Calls `cb` for every key starting with `prefix`, in byte order, on one
     * consistent snapshot; `*revision` (if not NULL) receives the store
     * revision of that snapshot, from which a watch continues without gaps.
     */
    int (*list)(funcd_store *s, const char *prefix, funcd_store_list_cb cb, void *payload,
                uint64_t *revision);

    /**
     * Delivers every change to keys starting with `prefix` whose revision is
     * greater than `after`, first those already made (replayed from history
     * before this call returns), then live ones, with no gap and no
     * duplicate. FUNCD_EGONE if `after` is older than the retained history.
     */
    int (*watch)(funcd_store *s, const char *prefix, uint64_t after, funcd_store_watch_cb cb,
                 void *payload, funcd_store_watch **out);

    /** Ends a watch. When it returns, `cb` is not running and never runs
     *  again for that watch (unless called from inside `cb` itself). */
    void (*unwatch)(funcd_store *s, funcd_store_watch *w);

    /** The current revision (0 for an empty new store). Optional (NULL: the
     *  platform takes the revision of a `list` snapshot instead). */
    uint64_t (*revision)(funcd_store *s);

    /** Releases the store and everything it owns. Watches must be ended. */
    void (*free)(funcd_store *s);
};

#define FUNCD_STORE_INIT {FUNCD_STORE_VERSION}

/** A new, empty, in-process store; history keeps the last `history` events
 *  for watches (0 picks the default, 65536). */
FUNCD_EXTERN int funcd_store_memory_new(funcd_store **out, size_t history);

#define FUNCD_STORE_SQLITE_OPTIONS_VERSION 1

/** Options of the sqlite store. Start from FUNCD_STORE_SQLITE_OPTIONS_INIT
 *  (or funcd_store_sqlite_options_init): `version` says which fields the
 *  caller's header had. Fields are only appended; zero fields pick the
 *  defaults. */
typedef struct funcd_store_sqlite_options {
    unsigned version;         /**< FUNCD_STORE_SQLITE_OPTIONS_VERSION */
    uint64_t history;         /**< change-log entries kept at least, for watches; 0: 65536 */
    unsigned busy_timeout_ms; /**< how long a write waits for another process; 0: 5000 */
    /* Fields of later versions are appended here. */
} funcd_store_sqlite_options;

#define FUNCD_STORE_SQLITE_OPTIONS_INIT {FUNCD_STORE_SQLITE_OPTIONS_VERSION}

/** Fills `opts` with the defaults of `version`
 *  (FUNCD_STORE_SQLITE_OPTIONS_VERSION); FUNCD_EVERSION if this library does
 *  not know that version. */
FUNCD_EXTERN int funcd_store_sqlite_options_init(funcd_store_sqlite_options *opts,
                                                 unsigned version);

/**
 * A durable store in one SQLite database file at `path` (created if absent;
 * its directory must exist), in WAL mode with synchronous=FULL: a write that
 * returned 0 survives kill -9 and power loss. `opts` may be NULL (the
 * defaults); its `version` must be 1 to the library's (FUNCD_EVERSION).
 *
 * Fails with FUNCD_EIO (cannot open, not a database, corrupt), FUNCD_EVERSION
 * (written by a newer funcd), FUNCD_ETIMEOUT (locked by another process past
 * the busy timeout). Writes may also fail with FUNCD_ENOSPC (disk full; the
 * write was not applied). Watches see the changes made through this handle
 * (and replay those of any process from the change log).
 */
FUNCD_EXTERN int funcd_store_sqlite_new(funcd_store **out, const char *path,
                                        const funcd_store_sqlite_options *opts);

#define FUNCD_STORE_POSTGRES_OPTIONS_VERSION 1

/** Options of the PostgreSQL store (start from FUNCD_STORE_POSTGRES_OPTIONS_INIT
 *  or funcd_store_postgres_options_init; fields are only appended; zero
 *  fields pick the defaults). */
typedef struct funcd_store_postgres_options {
    unsigned version; /**< FUNCD_STORE_POSTGRES_OPTIONS_VERSION */
    uint64_t history; /**< change-log entries kept at least, for watches; 0: 65536 */
    /* Fields of later versions are appended here. */
} funcd_store_postgres_options;

#define FUNCD_STORE_POSTGRES_OPTIONS_INIT {FUNCD_STORE_POSTGRES_OPTIONS_VERSION}

/** Fills `opts` with the defaults of `version`; FUNCD_EVERSION if unknown. */
FUNCD_EXTERN int funcd_store_postgres_options_init(funcd_store_postgres_options *opts,
                                                   unsigned version);

/**
 * A store in the PostgreSQL database `conninfo` names (a URL
 * postgresql://user@host:port/db, postgresql:///db?host=/socket/dir, or
 * keyword=value pairs), shared by every funcd that names the same database:
 * each one's watches see every process's writes. Creates its three tables
 * (funcd_meta, funcd_kv, funcd_changes) in the first schema of the search
 * path if absent. `opts` may be NULL.
 *
 * Fails with FUNCD_EINVAL (a malformed connection string), FUNCD_EUNAVAILABLE
 * (the server cannot be reached now), FUNCD_EIO (refused: authentication,
 * permissions), FUNCD_EVERSION (tables of a newer funcd). Once open, every
 * call answers FUNCD_EUNAVAILABLE while the server is away and the store
 * reconnects by itself; watches continue where they were. A write whose
 * connection breaks during its commit also answers FUNCD_EUNAVAILABLE: it
 * may or may not have been applied. See docs/backends.md.
 */
FUNCD_EXTERN int funcd_store_postgres_new(funcd_store **out, const char *conninfo,
                                          const funcd_store_postgres_options *opts);

#ifdef __cplusplus
}
#endif
#endif
