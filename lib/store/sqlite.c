/*
 * The durable store: one SQLite database file (WAL, synchronous=FULL).
 *
 * Tables: `kv` (the keys as they are now), `changes` (the change log that
 * watches replay) and a one-row `meta` (the global revision and the newest
 * revision dropped from the log). Every write is one BEGIN IMMEDIATE
 * transaction: precondition, revision bump, kv + changes + meta, commit.
 * Watchers hear of a write only after its commit returned, so an event is
 * never seen for a write that could still be rolled back.
 *
 * One connection behind one recursive mutex (docs/adr/0010-sqlite-store.md):
 * commit and delivery happen under it, which gives watchers revision order,
 * no concurrent callbacks for one watch, and a gap-free hand-over from replay
 * to live events. As in the memory store, callbacks may read, watch and
 * unwatch (the mutex is recursive) but not write.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "funcd/sys/error.h"
#include "store/watchers.h"
#include "funcd/sys/store.h"
#include "store/sqlite_private.h"

#define DEFAULT_HISTORY 65536
#define DEFAULT_BUSY_TIMEOUT_MS 5000
/* The change log is trimmed once it holds this many rows beyond `history`,
 * so most commits touch no extra page for compaction. */
#define COMPACT_BATCH 1024
#define SCHEMA_VERSION 2

enum stmt_id {
    S_BEGIN_WRITE,
    S_BEGIN_READ,
    S_COMMIT,
    S_ROLLBACK,
    S_META,
    S_SET_META,
    S_GET,
    S_HEAD,
    S_UPSERT,
    S_DELETE,
    S_LOG,
    S_COMPACT,
    S_LIST,
    S_LIST_ALL,
    S_REPLAY,
    S_REPLAY_ALL,
    S_PURGE,
    S_PURGE_MARK,
    S_PURGED,
    S_PURGED_ALL,
    S_COMPACT_PURGED,
    S_COUNT
};

/* Keys are TEXT with the BINARY collation, which compares with memcmp: the
 * byte order the port promises. Prefixes are ranges [prefix, upper bound),
 * never LIKE, so '%' and '_' in keys mean nothing special. */
static const char *const stmt_sql[S_COUNT] = {
    [S_BEGIN_WRITE] = "BEGIN IMMEDIATE",
    [S_BEGIN_READ] = "BEGIN",
    [S_COMMIT] = "COMMIT",
    [S_ROLLBACK] = "ROLLBACK",
    [S_META] = "SELECT revision, compacted FROM meta WHERE id = 1",
    [S_SET_META] = "UPDATE meta SET revision = ?1, compacted = ?2 WHERE id = 1",
    [S_GET] = "SELECT value, revision, create_revision FROM kv WHERE key = ?1",
    [S_HEAD] = "SELECT revision, create_revision FROM kv WHERE key = ?1",
    [S_UPSERT] = "INSERT OR REPLACE INTO kv(key, value, revision, create_revision) "
                 "VALUES (?1, ?2, ?3, ?4)",
    [S_DELETE] = "DELETE FROM kv WHERE key = ?1",
    [S_LOG] = "INSERT INTO changes(revision, type, key, value, create_revision) "
              "VALUES (?1, ?2, ?3, ?4, ?5)",
    [S_COMPACT] = "DELETE FROM changes WHERE revision <= ?1",
    [S_LIST] = "SELECT key, value, revision, create_revision FROM kv "
               "WHERE key >= ?1 AND key < ?2 ORDER BY key",
    [S_LIST_ALL] = "SELECT key, value, revision, create_revision FROM kv "
                   "WHERE key >= ?1 ORDER BY key",
    [S_REPLAY] = "SELECT type, key, value, revision, create_revision FROM changes "
                 "WHERE revision > ?1 AND key >= ?2 AND key < ?3 ORDER BY revision",
    [S_REPLAY_ALL] = "SELECT type, key, value, revision, create_revision FROM changes "
                     "WHERE revision > ?1 AND key >= ?2 ORDER BY revision",
    [S_PURGE] = "DELETE FROM changes WHERE key = ?1 AND revision <= ?2",
    [S_PURGE_MARK] = "INSERT OR REPLACE INTO purged(key, revision) VALUES (?1, ?2)",
    [S_PURGED] = "SELECT key, revision FROM purged "
                 "WHERE revision > ?1 AND key >= ?2 AND key < ?3 LIMIT 1",
    [S_PURGED_ALL] = "SELECT key, revision FROM purged WHERE revision > ?1 AND key >= ?2 LIMIT 1",
    [S_COMPACT_PURGED] = "DELETE FROM purged WHERE revision <= ?1",
};

/* Migrations, one per schema version; migration[i] takes version i to i + 1. */
static const char *const migration[SCHEMA_VERSION] = {
    "CREATE TABLE meta(id INTEGER PRIMARY KEY CHECK (id = 1),"
    "  revision INTEGER NOT NULL, compacted INTEGER NOT NULL);"
    "INSERT INTO meta(id, revision, compacted) VALUES (1, 0, 0);"
    "CREATE TABLE kv(key TEXT NOT NULL PRIMARY KEY, value BLOB NOT NULL,"
    "  revision INTEGER NOT NULL, create_revision INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE changes(revision INTEGER PRIMARY KEY, type INTEGER NOT NULL,"
    "  key TEXT NOT NULL, value BLOB NOT NULL, create_revision INTEGER NOT NULL);",
    /* 2: keys whose history was purged when they were deleted (purge_prefix) */
    "CREATE TABLE purged(key TEXT NOT NULL PRIMARY KEY, revision INTEGER NOT NULL) WITHOUT ROWID;",
};

typedef struct sqlite_store {
    funcd_store base;
    pthread_mutex_t lock;
    sqlite3 *db;
    sqlite3_stmt *stmt[S_COUNT];
    char *path;
    uint64_t history;
    unsigned busy_timeout_ms;
    uint64_t last_revision; /* answered by revision() if the database cannot be read */
    char *purge_prefix;     /* deleting a key under it removes its history; NULL: none */

    funcd_watch_list watches; /* its in_callback also refuses writes from callbacks */
} sqlite_store;

/* The state of the log as the meta row says. */
typedef struct meta {
    uint64_t revision;
    uint64_t compacted; /* newest revision dropped from `changes` (0: none) */
} meta;

static sqlite_store *sq(funcd_store *s)
{
    return (sqlite_store *)s;
}

/* ---- errors ----------------------------------------------------------------------------- */

static int is_disk_full(sqlite_store *st, int rc)
{
    return (rc & 0xff) == SQLITE_FULL ||
           ((rc & 0xff) == SQLITE_IOERR && sqlite3_system_errno(st->db) == ENOSPC);
}

/* Turns a failed SQLite call during `what` (on `key`, may be NULL) into a
 * funcd error. Call it before a rollback, which overwrites sqlite3_errmsg. */
static int db_error(sqlite_store *st, int rc, const char *what, const char *key)
{
    const char *msg = sqlite3_errmsg(st->db);
    /* " of key \"k\"" when there is a key */
    const char *of = key ? " of key \"" : "", *k = key ? key : "", *q = key ? "\"" : "";
    if (is_disk_full(st, rc))
        return funcd_error_set(FUNCD_ENOSPC,
                               "store: the disk holding %s is full; the %s%s%s%s was not applied; "
                               "free space and retry",
                               st->path, what, of, k, q);
    switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return funcd_error_set(FUNCD_ETIMEOUT,
                               "store: %s stayed locked by another connection for more than %u ms "
                               "(%s%s%s%s); retry later or raise busy_timeout_ms",
                               st->path, st->busy_timeout_ms, what, of, k, q);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        return funcd_error_set(FUNCD_EIO,
                               "store: %s is corrupt or not a funcd sqlite store (%s during %s); "
                               "restore it from a backup",
                               st->path, msg, what);
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_READONLY:
        return funcd_error_set(FUNCD_EIO,
                               "store: cannot open or write %s (%s during %s); its directory must "
                               "exist and be writable",
                               st->path, msg, what);
    case SQLITE_NOMEM:
        return funcd_error_set(FUNCD_ENOMEM, "store: out of memory in sqlite (%s%s%s%s)", what, of,
                               k, q);
    default:
        return funcd_error_set(FUNCD_EIO, "store: sqlite error on %s during %s%s%s%s: %s",
                               st->path, what, of, k, q, msg);
    }
}

/* ---- statements ------------------------------------------------------------------------- */

static void bind_text(sqlite3_stmt *stmt, int i, const char *s)
{
    sqlite3_bind_text(stmt, i, s, -1, SQLITE_STATIC);
}

/* A zero-length value must stay a BLOB, not become NULL. */
static void bind_value(sqlite3_stmt *stmt, int i, const void *value, size_t len)
{
    if (len)
        sqlite3_bind_blob64(stmt, i, value, len, SQLITE_STATIC);
    else
        sqlite3_bind_zeroblob(stmt, i, 0);
}

static void bind_u64(sqlite3_stmt *stmt, int i, uint64_t v)
{
    sqlite3_bind_int64(stmt, i, (sqlite3_int64)v);
}

static uint64_t column_u64(sqlite3_stmt *stmt, int i)
{
    return (uint64_t)sqlite3_column_int64(stmt, i);
}

/* Runs a statement that returns no rows; SQLITE_OK or the failure. */
static int run(sqlite_store *st, enum stmt_id id)
{
    sqlite3_stmt *stmt = st->stmt[id];
    int rc = sqlite3_step(stmt);
    sqlite3_reset(stmt);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

/*
 * The list and replay statements stay open while callbacks run, and a
 * callback may list or watch again: then the cached statement is busy and
 * the nested call gets a statement of its own, finalized by release().
 */
static int acquire(sqlite_store *st, enum stmt_id id, sqlite3_stmt **stmt, int *temporary)
{
    *temporary = sqlite3_stmt_busy(st->stmt[id]);
    if (!*temporary) {
        *stmt = st->stmt[id];
        return SQLITE_OK;
    }
    return sqlite3_prepare_v2(st->db, stmt_sql[id], -1, stmt, NULL);
}

static void release(sqlite3_stmt *stmt, int temporary)
{
    if (temporary) {
        sqlite3_finalize(stmt);
    } else {
        sqlite3_reset(stmt);
        sqlite3_clear_bindings(stmt);
    }
}

static int read_meta(sqlite_store *st, meta *m)
{
    sqlite3_stmt *stmt = st->stmt[S_META];
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW) {
        m->revision = column_u64(stmt, 0);
        m->compacted = column_u64(stmt, 1);
        st->last_revision = m->revision;
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_CORRUPT; /* the migration always writes the row */
    }
    sqlite3_reset(stmt);
    return rc;
}

/* Opens a read transaction unless one is open already (a nested call from a
 * callback): statements inside it see one snapshot. Returns whether it did. */
static int begin_read(sqlite_store *st, int *opened)
{
    *opened = sqlite3_get_autocommit(st->db);
    return *opened ? run(st, S_BEGIN_READ) : SQLITE_OK;
}

static void end_read(sqlite_store *st, int opened)
{
    if (opened && run(st, S_COMMIT) != SQLITE_OK)
        run(st, S_ROLLBACK);
}

static void rollback(sqlite_store *st)
{
    if (!sqlite3_get_autocommit(st->db))
        run(st, S_ROLLBACK);
}

/* ---- watches ---------------------------------------------------------------------------- */

static void dispatch(sqlite_store *st, const funcd_store_event *ev)
{
    funcd_watch_list_dispatch(&st->watches, ev);
}

/* ---- writes ----------------------------------------------------------------------------- */

/* The key as it is inside the write transaction. `value` is copied only for
 * a delete, whose event carries the previous value. */
typedef struct current {
    int exists;
    uint64_t revision, create_revision;
    void *value;
    size_t len;
} current;

static int read_current(sqlite_store *st, const char *key, int want_value, current *cur)
{
    sqlite3_stmt *stmt = st->stmt[want_value ? S_GET : S_HEAD];
    int col = want_value ? 1 : 0;
    bind_text(stmt, 1, key);
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW) {
        cur->exists = 1;
        cur->revision = column_u64(stmt, col);
        cur->create_revision = column_u64(stmt, col + 1);
        if (want_value) {
            const void *v = sqlite3_column_blob(stmt, 0);
            cur->len = (size_t)sqlite3_column_bytes(stmt, 0);
            cur->value = malloc(cur->len + 1);
            if (!cur->value)
                rc = SQLITE_NOMEM;
            else if (cur->len)
                memcpy(cur->value, v, cur->len);
        }
    }
    sqlite3_reset(stmt);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int write_kv(sqlite_store *st, const funcd_store_event *ev)
{
    sqlite3_stmt *stmt;
    if (ev->type == FUNCD_STORE_EVENT_DELETE) {
        stmt = st->stmt[S_DELETE];
        bind_text(stmt, 1, ev->key);
        return run(st, S_DELETE);
    }
    stmt = st->stmt[S_UPSERT];
    bind_text(stmt, 1, ev->key);
    bind_value(stmt, 2, ev->value, ev->len);
    bind_u64(stmt, 3, ev->revision);
    bind_u64(stmt, 4, ev->create_revision);
    return run(st, S_UPSERT);
}

static int write_log(sqlite_store *st, const funcd_store_event *ev)
{
    sqlite3_stmt *stmt = st->stmt[S_LOG];
    bind_u64(stmt, 1, ev->revision);
    sqlite3_bind_int(stmt, 2, (int)ev->type);
    bind_text(stmt, 3, ev->key);
    bind_value(stmt, 4, ev->value, ev->len);
    bind_u64(stmt, 5, ev->create_revision);
    return run(st, S_LOG);
}

/* Bumps the revision and, once the log holds a batch beyond `history`,
 * drops its oldest rows in the same transaction. */
static int write_meta(sqlite_store *st, const meta *before)
{
    uint64_t revision = before->revision + 1, compacted = before->compacted;
    uint64_t batch = st->history < COMPACT_BATCH ? st->history : COMPACT_BATCH;
    int rc = SQLITE_OK;
    if (revision - compacted > st->history && revision - compacted - st->history >= batch) {
        compacted = revision - st->history;
        bind_u64(st->stmt[S_COMPACT], 1, compacted);
        rc = run(st, S_COMPACT);
        if (rc == SQLITE_OK) {
            bind_u64(st->stmt[S_COMPACT_PURGED], 1, compacted);
            rc = run(st, S_COMPACT_PURGED);
        }
    }
    if (rc != SQLITE_OK)
        return rc;
    bind_u64(st->stmt[S_SET_META], 1, revision);
    bind_u64(st->stmt[S_SET_META], 2, compacted);
    return run(st, S_SET_META);
}

static int purges(const sqlite_store *st, const funcd_store_event *ev)
{
    return ev->type == FUNCD_STORE_EVENT_DELETE && st->purge_prefix &&
           strncmp(ev->key, st->purge_prefix, strlen(st->purge_prefix)) == 0;
}

/* A deleted key under purge_prefix leaves no value in the log: its rows up
 * to the delete go, and `purged` remembers that replays from before the
 * delete cannot be complete for it. */
static int purge(sqlite_store *st, const funcd_store_event *ev)
{
    bind_text(st->stmt[S_PURGE], 1, ev->key);
    bind_u64(st->stmt[S_PURGE], 2, ev->revision);
    int rc = run(st, S_PURGE);
    if (rc != SQLITE_OK)
        return rc;
    bind_text(st->stmt[S_PURGE_MARK], 1, ev->key);
    bind_u64(st->stmt[S_PURGE_MARK], 2, ev->revision);
    return run(st, S_PURGE_MARK);
}

/* kv, changes and meta for `ev`, whose revision is before->revision + 1. */
static int apply(sqlite_store *st, const funcd_store_event *ev, const meta *before)
{
    int rc;
    if ((rc = write_kv(st, ev)) != SQLITE_OK || (rc = write_log(st, ev)) != SQLITE_OK)
        return rc;
    if (purges(st, ev) && (rc = purge(st, ev)) != SQLITE_OK)
        return rc;
    return write_meta(st, before);
}

typedef struct write_req {
    const char *what; /* "put" or "delete" */
    funcd_store_event_type type;
    const char *key;
    const void *value; /* put only */
    size_t len;
    uint64_t expected;
} write_req;

/* Checks the precondition and applies the change; fills `ev` (whose value
 * may point into `cur`). Runs inside BEGIN IMMEDIATE; SQLite errors are
 * raised here, so the caller only rolls back. */
static int stage(sqlite_store *st, const write_req *req, current *cur, funcd_store_event *ev)
{
    int is_del = req->type == FUNCD_STORE_EVENT_DELETE;
    meta m = {0};
    int rc = read_current(st, req->key, is_del, cur);
    if (rc == SQLITE_OK)
        rc = read_meta(st, &m);
    if (rc != SQLITE_OK)
        return db_error(st, rc, req->what, req->key);
    int err = funcd_store_check_expected(cur->exists, cur->revision, req->key, req->expected);
    if (err < 0)
        return err;
    if (is_del && !cur->exists)
        return funcd_error_set(FUNCD_ENOTFOUND,
                               "store: cannot delete key \"%s\": it does not exist", req->key);
    ev->type = req->type;
    ev->key = req->key;
    ev->value = is_del ? cur->value : req->value;
    ev->len = is_del ? cur->len : req->len;
    ev->revision = m.revision + 1;
    ev->create_revision = cur->exists ? cur->create_revision : ev->revision;
    if ((rc = apply(st, ev, &m)) != SQLITE_OK)
        return db_error(st, rc, req->what, req->key);
    return 0;
}

static int commit(sqlite_store *st, const write_req *req)
{
    int rc = run(st, S_COMMIT);
    return rc == SQLITE_OK ? 0 : db_error(st, rc, req->what, req->key);
}

/* One write, one transaction; watchers hear of it only once it committed. */
static int write_locked(sqlite_store *st, const write_req *req, uint64_t *revision)
{
    current cur = {0};
    funcd_store_event ev;
    int rc = funcd_store_refuse_in_callback(&st->watches, req->what, req->key);
    if (rc < 0)
        return rc;
    if ((rc = run(st, S_BEGIN_WRITE)) != SQLITE_OK)
        return db_error(st, rc, req->what, req->key);
    if ((rc = stage(st, req, &cur, &ev)) < 0 || (rc = commit(st, req)) < 0) {
        rollback(st);
        free(cur.value);
        return rc;
    }
    st->last_revision = ev.revision;
    /* The purged rows' pages were zeroed (secure_delete); older copies of
     * them may still sit in the write-ahead log: empty it (best effort). */
    if (purges(st, &ev))
        sqlite3_wal_checkpoint_v2(st->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    dispatch(st, &ev);
    free(cur.value);
    if (revision)
        *revision = ev.revision;
    return 0;
}

static int sq_write(sqlite_store *st, const write_req *req, uint64_t *revision)
{
    pthread_mutex_lock(&st->lock);
    int rc = write_locked(st, req, revision);
    pthread_mutex_unlock(&st->lock);
    return rc;
}

static int sq_put(funcd_store *s, const char *key, const void *value, size_t len,
                  uint64_t expected, uint64_t *revision)
{
    int rc = funcd_store_check_key(key, "put");
    if (rc < 0)
        return rc;
    if (!value && len)
        return funcd_error_set(FUNCD_EINVAL, "store: put of key \"%s\" has no value but %zu bytes",
                               key, len);
    write_req req = {"put", FUNCD_STORE_EVENT_PUT, key, value, len, expected};
    return sq_write(sq(s), &req, revision);
}

static int sq_del(funcd_store *s, const char *key, uint64_t expected, uint64_t *revision)
{
    int rc = funcd_store_check_key(key, "delete");
    if (rc < 0)
        return rc;
    if (expected == FUNCD_STORE_ABSENT)
        return funcd_error_set(FUNCD_EINVAL,
                               "store: delete of key \"%s\" expects it absent; pass its revision "
                               "or FUNCD_STORE_ANY",
                               key);
    write_req req = {"delete", FUNCD_STORE_EVENT_DELETE, key, NULL, 0, expected};
    return sq_write(sq(s), &req, revision);
}

/* ---- reads ------------------------------------------------------------------------------ */

static int get_locked(sqlite_store *st, const char *key, funcd_store_value *out)
{
    current cur = {0};
    int rc = read_current(st, key, 1, &cur);
    if (rc != SQLITE_OK)
        return db_error(st, rc, "get", key);
    if (!cur.exists)
        return funcd_error_set(FUNCD_ENOTFOUND,
                               "store: key \"%s\" not found; list its prefix to see what exists",
                               key);
    ((char *)cur.value)[cur.len] = '\0';
    out->value = cur.value;
    out->len = cur.len;
    out->revision = cur.revision;
    out->create_revision = cur.create_revision;
    return 0;
}

static int sq_get(funcd_store *s, const char *key, funcd_store_value *out)
{
    sqlite_store *st = sq(s);
    int rc = funcd_store_check_key(key, "get");
    if (rc < 0)
        return rc;
    if (!out)
        return funcd_error_set(FUNCD_EINVAL, "store: get of key \"%s\" needs an out value", key);
    pthread_mutex_lock(&st->lock);
    rc = get_locked(st, key, out);
    pthread_mutex_unlock(&st->lock);
    return rc;
}

/* Binds the key range of `prefix` to ?first and ?first + 1 and picks the
 * statement variant: `bounded` or, without an upper bound, `unbounded`. */
static int open_range(sqlite_store *st, enum stmt_id bounded, const char *prefix, int first,
                      char *upper, sqlite3_stmt **stmt, int *temporary)
{
    int has_upper = funcd_prefix_upper_bound(prefix, upper);
    int rc = acquire(st, has_upper ? bounded : bounded + 1, stmt, temporary);
    if (rc != SQLITE_OK)
        return rc;
    bind_text(*stmt, first, prefix);
    if (has_upper)
        bind_text(*stmt, first + 1, upper);
    return SQLITE_OK;
}

static int list_rows(sqlite_store *st, const char *prefix, funcd_store_list_cb cb, void *payload)
{
    char *upper = malloc(strlen(prefix) + 1);
    sqlite3_stmt *stmt = NULL;
    int temporary = 0, rc;
    if (!upper)
        return SQLITE_NOMEM;
    if ((rc = open_range(st, S_LIST, prefix, 1, upper, &stmt, &temporary)) != SQLITE_OK) {
        free(upper);
        return rc;
    }
    funcd_watch_list_enter(&st->watches);
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        const void *value = sqlite3_column_blob(stmt, 1);
        funcd_store_kv kv = {(const char *)sqlite3_column_text(stmt, 0), value ? value : "",
                             (size_t)sqlite3_column_bytes(stmt, 1), column_u64(stmt, 2),
                             column_u64(stmt, 3)};
        if (cb(&kv, payload)) {
            rc = SQLITE_DONE;
            break;
        }
    }
    funcd_watch_list_leave(&st->watches);
    release(stmt, temporary);
    free(upper);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int list_locked(sqlite_store *st, const char *prefix, funcd_store_list_cb cb, void *payload,
                       uint64_t *revision)
{
    int opened;
    meta m = {0, 0};
    int rc = begin_read(st, &opened);
    if (rc == SQLITE_OK && (rc = read_meta(st, &m)) == SQLITE_OK)
        rc = list_rows(st, prefix, cb, payload);
    int err = rc == SQLITE_OK ? 0 : db_error(st, rc, "list", prefix);
    end_read(st, opened);
    if (!err && revision)
        *revision = m.revision;
    return err;
}

static int sq_list(funcd_store *s, const char *prefix, funcd_store_list_cb cb, void *payload,
                   uint64_t *revision)
{
    sqlite_store *st = sq(s);
    if (!cb)
        return funcd_error_set(FUNCD_EINVAL, "store: list needs a callback");
    pthread_mutex_lock(&st->lock);
    int rc = list_locked(st, prefix ? prefix : "", cb, payload, revision);
    pthread_mutex_unlock(&st->lock);
    return rc;
}

/* Delivers the logged changes after `after` to a watch not yet linked. */
static int replay(sqlite_store *st, funcd_store_watch *w, uint64_t after)
{
    char *upper = malloc(w->prefix_len + 1);
    sqlite3_stmt *stmt = NULL;
    int temporary = 0, rc;
    if (!upper)
        return SQLITE_NOMEM;
    if ((rc = open_range(st, S_REPLAY, w->prefix, 2, upper, &stmt, &temporary)) != SQLITE_OK) {
        free(upper);
        return rc;
    }
    bind_u64(stmt, 1, after);
    funcd_watch_list_enter(&st->watches);
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        const void *value = sqlite3_column_blob(stmt, 2);
        funcd_store_event ev = {(funcd_store_event_type)sqlite3_column_int(stmt, 0),
                                (const char *)sqlite3_column_text(stmt, 1),
                                value ? value : "",
                                (size_t)sqlite3_column_bytes(stmt, 2),
                                column_u64(stmt, 3),
                                column_u64(stmt, 4)};
        funcd_watch_deliver(w, &ev);
    }
    funcd_watch_list_leave(&st->watches);
    release(stmt, temporary);
    free(upper);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int gone(const char *prefix, uint64_t after, uint64_t compacted)
{
    return funcd_error_set(FUNCD_EGONE,
                           "store: cannot watch prefix \"%s\" from revision %" PRIu64
                           ": history up to revision %" PRIu64
                           " was compacted; list the prefix again and watch from the "
                           "list's revision",
                           prefix, after, compacted);
}

/* A key under the watch's prefix whose history was purged after `after`
 * (FUNCD_EGONE), or 0. */
static int check_purged(sqlite_store *st, funcd_store_watch *w, uint64_t after, int *err)
{
    char *upper = malloc(w->prefix_len + 1);
    sqlite3_stmt *stmt = NULL;
    int temporary = 0, rc;
    *err = 0;
    if (!upper)
        return SQLITE_NOMEM;
    if ((rc = open_range(st, S_PURGED, w->prefix, 2, upper, &stmt, &temporary)) != SQLITE_OK) {
        free(upper);
        return rc;
    }
    bind_u64(stmt, 1, after);
    rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW)
        *err = funcd_error_set(FUNCD_EGONE,
                               "store: cannot watch prefix \"%s\" from revision %" PRIu64
                               ": the history of \"%s\" up to revision %" PRIu64
                               " was purged when it was deleted; list the prefix again and "
                               "watch from the list's revision",
                               w->prefix, after, (const char *)sqlite3_column_text(stmt, 0),
                               column_u64(stmt, 1));
    release(stmt, temporary);
    free(upper);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* Replays; watchers.c then links the watch, both under the lock writers
 * commit under, so no write falls between the two. */
static int replay_locked(void *store, funcd_store_watch *w, uint64_t after, uint64_t *revision)
{
    sqlite_store *st = store;
    int opened, err = 0;
    meta m = {0, 0};
    int rc = begin_read(st, &opened);
    if (rc == SQLITE_OK && (rc = read_meta(st, &m)) == SQLITE_OK) {
        if (after < m.compacted)
            err = gone(w->prefix, after, m.compacted);
        else if ((rc = check_purged(st, w, after, &err)) == SQLITE_OK && err == 0)
            rc = replay(st, w, after);
    }
    if (rc != SQLITE_OK)
        err = db_error(st, rc, "watch", w->prefix);
    end_read(st, opened);
    *revision = m.revision;
    return err < 0 ? err : 0;
}

static int sq_watch(funcd_store *s, const char *prefix, uint64_t after, funcd_store_watch_cb cb,
                    void *payload, funcd_store_watch **out)
{
    sqlite_store *st = sq(s);
    return funcd_store_watch_open(&st->lock, &st->watches, st, replay_locked, prefix, after, cb,
                                  payload, out);
}

static void sq_unwatch(funcd_store *s, funcd_store_watch *w)
{
    sqlite_store *st = sq(s);
    funcd_store_watch_close(&st->lock, &st->watches, w);
}

static uint64_t sq_revision(funcd_store *s)
{
    sqlite_store *st = sq(s);
    meta m = {0};
    pthread_mutex_lock(&st->lock);
    uint64_t rev = read_meta(st, &m) == SQLITE_OK ? m.revision : st->last_revision;
    pthread_mutex_unlock(&st->lock);
    return rev;
}

static void sq_free(funcd_store *s)
{
    sqlite_store *st = sq(s);
    if (!st)
        return;
    funcd_watch_list_clear(&st->watches); /* watches must be ended: be forgiving */
    for (int i = 0; i < S_COUNT; i++)
        sqlite3_finalize(st->stmt[i]);
    sqlite3_close(st->db);
    pthread_mutex_destroy(&st->lock);
    free(st->purge_prefix);
    free(st->path);
    free(st);
}

/* ---- opening ---------------------------------------------------------------------------- */

static int exec_sql(sqlite_store *st, const char *sql, const char *what)
{
    int rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : db_error(st, rc, what, NULL);
}

/* Reads a one-integer pragma. */
static int pragma_int(sqlite_store *st, const char *sql, int *out)
{
    sqlite3_stmt *stmt;
    int rc = sqlite3_prepare_v2(st->db, sql, -1, &stmt, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        *out = sqlite3_column_int(stmt, 0);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(stmt);
    return rc == SQLITE_OK ? 0 : db_error(st, rc, "open (reading the schema version)", NULL);
}

/* One attempt at PRAGMA journal_mode=WAL; *wal tells whether it took. */
static int try_wal(sqlite_store *st, int *wal)
{
    sqlite3_stmt *stmt;
    int rc = sqlite3_prepare_v2(st->db, "PRAGMA journal_mode=WAL", -1, &stmt, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        const char *mode = (const char *)sqlite3_column_text(stmt, 0);
        *wal = mode && strcmp(mode, "wal") == 0;
        rc = SQLITE_OK;
    }
    sqlite3_finalize(stmt);
    return rc;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Switching a new file to WAL needs it unlocked, and SQLite answers BUSY at
 * once, without its busy handler, while another process opens it too: retry
 * until the busy timeout. */
static int enable_wal(sqlite_store *st)
{
    int64_t deadline = mono_ms() + st->busy_timeout_ms;
    int wal = 0, rc;
    while ((rc = try_wal(st, &wal)) == SQLITE_BUSY && mono_ms() < deadline)
        sqlite3_sleep(5);
    if (rc != SQLITE_OK)
        return db_error(st, rc, "open (switching to WAL)", NULL);
    if (!wal)
        return funcd_error_set(FUNCD_EIO,
                               "store: %s cannot use a write-ahead log (is it on a network file "
                               "system?); put the database on a local disk",
                               st->path);
    return 0;
}

static int migrate_locked(sqlite_store *st)
{
    int version = 0, rc = pragma_int(st, "PRAGMA user_version", &version);
    if (rc < 0)
        return rc;
    if (version > SCHEMA_VERSION)
        return funcd_error_set(FUNCD_EVERSION,
                               "store: %s has schema version %d, newer than the %d this funcd "
                               "knows; it was written by a newer funcd: upgrade funcd",
                               st->path, version, SCHEMA_VERSION);
    if (version == SCHEMA_VERSION)
        return 0; /* no write: opening an up-to-date file costs no fsync */
    for (; version < SCHEMA_VERSION; version++)
        if ((rc = exec_sql(st, migration[version], "migrate")) < 0)
            return rc;
    char sql[64];
    snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", SCHEMA_VERSION);
    return exec_sql(st, sql, "migrate");
}

/* Brings the schema to SCHEMA_VERSION in one transaction, so two processes
 * opening a new file at once cannot both create it. */
static int migrate(sqlite_store *st)
{
    int rc = exec_sql(st, "BEGIN IMMEDIATE", "open (locking for migration)");
    if (rc < 0)
        return rc;
    if ((rc = migrate_locked(st)) < 0) {
        rollback(st);
        return rc;
    }
    return exec_sql(st, "COMMIT", "open (committing the migration)");
}

static int prepare_all(sqlite_store *st)
{
    for (int i = 0; i < S_COUNT; i++) {
        int rc = sqlite3_prepare_v3(st->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                                    &st->stmt[i], NULL);
        if (rc != SQLITE_OK)
            return db_error(st, rc, "open (preparing statements)", NULL);
    }
    return 0;
}

/* The database and its -wal and -shm hold every object: owner only. A new
 * file is made 0600 before SQLite opens it (SQLite gives -wal and -shm the
 * database's mode); older files are narrowed to it. */
static int make_private(const sqlite_store *st)
{
    int fd = open(st->path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return funcd_error_set(FUNCD_EIO,
                               "store: cannot open sqlite database %s: %s; its directory must "
                               "exist and be writable",
                               st->path, strerror(errno));
    close(fd);
    static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
        char path[4200];
        struct stat sb;
        snprintf(path, sizeof(path), "%s%s", st->path, suffix[i]);
        if (lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 077) &&
            chmod(path, sb.st_mode & 0700) != 0)
            return funcd_error_set(FUNCD_EIO, "store: cannot make %s private (chmod 600): %s",
                                   path, strerror(errno));
    }
    return 0;
}

static int open_db(sqlite_store *st)
{
    int rc = make_private(st);
    if (rc < 0)
        return rc;
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    rc = sqlite3_open_v2(st->path, &st->db, flags, NULL);
    if (rc != SQLITE_OK)
        return funcd_error_set(rc == SQLITE_NOMEM ? FUNCD_ENOMEM : FUNCD_EIO,
                               "store: cannot open sqlite database %s: %s; its directory must "
                               "exist and be writable",
                               st->path, st->db ? sqlite3_errmsg(st->db) : "out of memory");
    sqlite3_extended_result_codes(st->db, 1);
    sqlite3_busy_timeout(st->db, (int)st->busy_timeout_ms);
    if ((rc = enable_wal(st)) < 0 ||
        (rc = exec_sql(st, "PRAGMA synchronous=FULL; PRAGMA foreign_keys=OFF; "
                           "PRAGMA secure_delete=ON",
                       "open (setting pragmas)")) < 0 ||
        (rc = migrate(st)) < 0 || (rc = prepare_all(st)) < 0)
        return rc;
    meta m = {0};
    if ((rc = read_meta(st, &m)) != SQLITE_OK)
        return db_error(st, rc, "open (reading the revision)", NULL);
    return 0;
}

static void fill_vtable(sqlite_store *st)
{
    st->base.version = FUNCD_STORE_VERSION;
    st->base.name = "sqlite";
    st->base.get = sq_get;
    st->base.put = sq_put;
    st->base.del = sq_del;
    st->base.list = sq_list;
    st->base.watch = sq_watch;
    st->base.unwatch = sq_unwatch;
    st->base.revision = sq_revision;
    st->base.free = sq_free;
}

FUNCD_EXTERN int funcd_store_sqlite_options_init(funcd_store_sqlite_options *opts,
                                                 unsigned version)
{
    if (!opts)
        return funcd_error_set(FUNCD_EINVAL, "funcd_store_sqlite_options_init: opts is NULL");
    if (version < 1 || version > FUNCD_STORE_SQLITE_OPTIONS_VERSION)
        return funcd_error_set(FUNCD_EVERSION, "funcd_store_sqlite_options version %u: this "
                               "funcd knows versions 1 to %d", version,
                               FUNCD_STORE_SQLITE_OPTIONS_VERSION);
    *opts = (funcd_store_sqlite_options)FUNCD_STORE_SQLITE_OPTIONS_INIT;
    opts->version = version;
    return 0;
}

FUNCD_EXTERN int funcd_store_sqlite_new(funcd_store **out, const char *path,
                                        const funcd_store_sqlite_options *opts)
{
    if (!out)
        return funcd_error_set(FUNCD_EINVAL, "store: funcd_store_sqlite_new needs an out pointer");
    *out = NULL;
    /* Fields appended after version 1 are read only when opts->version has them. */
    if (opts && (opts->version < 1 || opts->version > FUNCD_STORE_SQLITE_OPTIONS_VERSION))
        return funcd_error_set(FUNCD_EVERSION, "store: funcd_store_sqlite_options has version "
                               "%u; this funcd knows versions 1 to %d (start from "
                               "FUNCD_STORE_SQLITE_OPTIONS_INIT)", opts->version,
                               FUNCD_STORE_SQLITE_OPTIONS_VERSION);
    if (!path || !path[0])
        return funcd_error_set(FUNCD_EINVAL, "store: the sqlite store needs a database file path");
    sqlite_store *st = calloc(1, sizeof(*st));
    if (!st || !(st->path = strdup(path))) {
        free(st);
        return funcd_error_set(FUNCD_ENOMEM, "store: out of memory opening %s", path);
    }
    int rc = funcd_store_lock_init(&st->lock, "sqlite");
    if (rc < 0) {
        free(st->path);
        free(st);
        return rc;
    }
    st->history = opts && opts->history ? opts->history : DEFAULT_HISTORY;
    st->busy_timeout_ms =
        opts && opts->busy_timeout_ms ? opts->busy_timeout_ms : DEFAULT_BUSY_TIMEOUT_MS;
    fill_vtable(st);
    if ((rc = open_db(st)) < 0) {
        sq_free(&st->base);
        return rc;
    }
    *out = &st->base;
    return 0;
}

sqlite3 *funcd__store_sqlite_db(funcd_store *s)
{
    return s && s->get == sq_get ? sq(s)->db : NULL;
}

int funcd__store_sqlite_purge_prefix(funcd_store *s, const char *prefix)
{
    if (!s || s->get != sq_get)
        return funcd_error_set(FUNCD_EINVAL, "store: not a sqlite store");
    sqlite_store *st = sq(s);
    char *copy = prefix ? strdup(prefix) : NULL;
    if (prefix && !copy)
        return funcd_error_set(FUNCD_ENOMEM, "store: out of memory");
    pthread_mutex_lock(&st->lock);
    free(st->purge_prefix);
    st->purge_prefix = copy;
    pthread_mutex_unlock(&st->lock);
    return 0;
}
