/*
 * The store on PostgreSQL (libpq), shared by every funcd that names the same
 * database (docs/adr/0038-postgres-drivers.md).
 *
 * Tables: `funcd_kv` (the keys as they are now), `funcd_changes` (the change
 * log that watches replay and follow) and a one-row `funcd_meta` (the global
 * revision and the newest revision dropped from the log). Keys are bytea, so
 * their order is byte order whatever the database's collation.
 *
 * A write is one call of the plpgsql function funcd_write, one statement in
 * its own transaction: it locks the meta row first, which serializes the
 * writers of every process, so revisions are handed out one by one, commit
 * in their order, and a failed precondition changes nothing (a SEQUENCE
 * would leave gaps and could commit 6 before 5). It ends with pg_notify on
 * channel `funcd_store`: a wake-up only. Each store follows the change log
 * from the last revision it delivered (`fed`), whoever wrote it: after its
 * own commits on the writer's thread, and on a notification on the listener
 * thread, which holds a second connection that does nothing but LISTEN.
 *
 * One connection behind one recursive mutex, as in the sqlite store:
 * delivery happens under it, which gives watchers revision order, no
 * concurrent callbacks for one watch and a gap-free hand-over from replay to
 * live events; callbacks may read, watch and unwatch but not write.
 *
 * While the server is away, calls answer FUNCD_EUNAVAILABLE (pg_conn.c
 * reconnects with a backoff); watches stay and continue from `fed` once the
 * server is back.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "funcd/sys/error.h"
#include "funcd/sys/store.h"
#include "store/pg_conn.h"
#include "store/watchers.h"

#define DEFAULT_HISTORY 65536
/* Rows the follower reads per round trip. */
#define FEED_BATCH 1024
#define SCHEMA_VERSION 1
#define CHANNEL "funcd_store"
/* Serializes schema creation between processes opening one new database. */
#define SCHEMA_LOCK "7305318472290481"

enum stmt_id {
    S_WRITE,
    S_GET,
    S_LIST,
    S_LIST_ALL,
    S_REPLAY,
    S_REPLAY_ALL,
    S_FEED,
    S_REVISION,
    S_COUNT
};

static const struct {
    const char *sql;
    int n;
    unsigned types[5];
} stmt[S_COUNT] = {
    /* A whole write in one round trip (funcd_write in schema_sql). */
    [S_WRITE] = {"SELECT o_status, o_revision, o_create_revision, o_old_value "
                 "FROM funcd_write($1, $2, $3, $4, $5)",
                 5,
                 {FUNCD_PG_INT4, FUNCD_PG_BYTEA, FUNCD_PG_BYTEA, FUNCD_PG_INT8, FUNCD_PG_INT8}},
    [S_GET] = {"SELECT value, revision, create_revision FROM funcd_kv WHERE key = $1",
               1,
               {FUNCD_PG_BYTEA}},
    /* One statement, one snapshot: the keys and the revision agree. The
     * meta row comes once even when no key matches (then key is NULL). */
    [S_LIST] = {"SELECT m.revision, k.key, k.value, k.revision, k.create_revision "
                "FROM funcd_meta m LEFT JOIN funcd_kv k ON k.key >= $1 AND k.key < $2 "
                "WHERE m.id = 1 ORDER BY k.key",
                2,
                {FUNCD_PG_BYTEA, FUNCD_PG_BYTEA}},
    [S_LIST_ALL] = {"SELECT m.revision, k.key, k.value, k.revision, k.create_revision "
                    "FROM funcd_meta m LEFT JOIN funcd_kv k ON k.key >= $1 "
                    "WHERE m.id = 1 ORDER BY k.key",
                    1,
                    {FUNCD_PG_BYTEA}},
    [S_REPLAY] = {"SELECT m.revision, m.compacted, c.type, c.key, c.value, c.revision, "
                  "c.create_revision FROM funcd_meta m LEFT JOIN funcd_changes c "
                  "ON c.revision > $1 AND c.key >= $2 AND c.key < $3 "
                  "WHERE m.id = 1 ORDER BY c.revision",
                  3,
                  {FUNCD_PG_INT8, FUNCD_PG_BYTEA, FUNCD_PG_BYTEA}},
    [S_REPLAY_ALL] = {"SELECT m.revision, m.compacted, c.type, c.key, c.value, c.revision, "
                      "c.create_revision FROM funcd_meta m LEFT JOIN funcd_changes c "
                      "ON c.revision > $1 AND c.key >= $2 "
                      "WHERE m.id = 1 ORDER BY c.revision",
                      2,
                      {FUNCD_PG_INT8, FUNCD_PG_BYTEA}},
    [S_FEED] = {"SELECT m.revision, m.compacted, c.type, c.key, c.value, c.revision, "
                "c.create_revision FROM funcd_meta m LEFT JOIN LATERAL ("
                "  SELECT * FROM funcd_changes WHERE revision > $1 ORDER BY revision "
                "  LIMIT 1024) c ON true WHERE m.id = 1 ORDER BY c.revision",
                1,
                {FUNCD_PG_INT8}},
    [S_REVISION] = {"SELECT revision FROM funcd_meta WHERE id = 1", 0, {0}},
};

static const char *const stmt_name[S_COUNT] = {
    "funcd_write", "funcd_get",  "funcd_list",    "funcd_list_all",
    "funcd_replay", "funcd_replay_all", "funcd_feed", "funcd_revision",
};

/* Schema version 1. Created under a transaction-level advisory lock, so
 * processes opening one new database at once create it once. */
static const char schema_sql[] =
    "BEGIN;"
    "SELECT pg_advisory_xact_lock(" SCHEMA_LOCK ");"
    "CREATE TABLE IF NOT EXISTS funcd_meta(id integer PRIMARY KEY CHECK (id = 1),"
    "  schema integer NOT NULL, revision bigint NOT NULL, compacted bigint NOT NULL);"
    "INSERT INTO funcd_meta(id, schema, revision, compacted) VALUES (1, 1, 0, 0)"
    "  ON CONFLICT (id) DO NOTHING;"
    "CREATE TABLE IF NOT EXISTS funcd_kv(key bytea PRIMARY KEY, value bytea NOT NULL,"
    "  revision bigint NOT NULL, create_revision bigint NOT NULL);"
    "CREATE TABLE IF NOT EXISTS funcd_changes(revision bigint PRIMARY KEY,"
    "  type integer NOT NULL, key bytea NOT NULL, value bytea NOT NULL,"
    "  create_revision bigint NOT NULL);"
    /* One write. The meta row is locked first: that lock serializes the
     * writers of every process. A failed precondition changes nothing and
     * answers status 1 with the key's revision (NULL: absent), from which
     * the caller words the error. p_expected: -1 any, 0 absent, else the
     * revision. A delete answers the value it removed, for its event. */
    "CREATE OR REPLACE FUNCTION funcd_write(p_type integer, p_key bytea, p_value bytea,"
    "  p_expected bigint, p_history bigint, OUT o_status integer, OUT o_revision bigint,"
    "  OUT o_create_revision bigint, OUT o_old_value bytea) LANGUAGE plpgsql AS $f$"
    "DECLARE m_rev bigint; m_compacted bigint; c_rev bigint; c_create bigint;"
    "BEGIN"
    "  SELECT m.revision, m.compacted INTO m_rev, m_compacted FROM funcd_meta m"
    "    WHERE m.id = 1 FOR UPDATE;"
    "  SELECT k.revision, k.create_revision, k.value INTO c_rev, c_create, o_old_value"
    "    FROM funcd_kv k WHERE k.key = p_key;"
    "  IF (p_expected = 0 AND c_rev IS NOT NULL) OR"
    "     (p_expected > 0 AND c_rev IS DISTINCT FROM p_expected) OR"
    "     (p_type = 2 AND c_rev IS NULL) THEN"
    "    o_status := 1; o_revision := c_rev; o_old_value := NULL; RETURN;"
    "  END IF;"
    "  o_revision := m_rev + 1;"
    "  o_create_revision := coalesce(c_create, o_revision);"
    "  IF p_type = 2 THEN"
    "    DELETE FROM funcd_kv k WHERE k.key = p_key;"
    "    INSERT INTO funcd_changes VALUES (o_revision, 2, p_key, o_old_value, o_create_revision);"
    "  ELSE"
    "    o_old_value := NULL;"
    "    INSERT INTO funcd_kv AS k VALUES (p_key, p_value, o_revision, o_create_revision)"
    "      ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, revision = EXCLUDED.revision;"
    "    INSERT INTO funcd_changes VALUES (o_revision, 1, p_key, p_value, o_create_revision);"
    "  END IF;"
    /* Trim the log once it holds a batch beyond `history`. */
    "  IF o_revision - m_compacted > p_history AND"
    "     o_revision - m_compacted - p_history >= least(p_history, 1024) THEN"
    "    m_compacted := o_revision - p_history;"
    "    DELETE FROM funcd_changes c WHERE c.revision <= m_compacted;"
    "  END IF;"
    "  UPDATE funcd_meta SET revision = o_revision, compacted = m_compacted WHERE id = 1;"
    "  PERFORM pg_notify('" CHANNEL "', o_revision::text);"
    "  o_status := 0;"
    "END $f$;"
    "COMMIT;";

typedef struct pg_store {
    funcd_store base;
    pthread_mutex_t lock; /* recursive: callbacks may read */
    funcd_pg_conn db;
    uint64_t history;
    uint64_t fed;           /* the newest revision handed to the watches */
    uint64_t last_revision; /* answered by revision() while the server is away */
    funcd_watch_list watches;

    /* The listener: its own connection, which only LISTENs. */
    funcd_pg_conn listener;
    pthread_t thread;
    int thread_started;
    int wake[2]; /* a pipe: a byte in it stops the listener */
} pg_store;

static pg_store *pq(funcd_store *s)
{
    return (pg_store *)s;
}

/* A revision bound for a bigint parameter: UINT64_MAX ("after everything")
 * must not wrap to a negative number. */
static uint64_t clamp(uint64_t v)
{
    return v > INT64_MAX ? INT64_MAX : v;
}

static int setup_main(PGconn *conn, void *arg)
{
    (void)arg;
    for (int i = 0; i < S_COUNT; i++) {
        int rc = funcd_pg_conn_prepare(conn, stmt_name[i], stmt[i].sql, stmt[i].n,
                                       stmt[i].types);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int setup_listener(PGconn *conn, void *arg)
{
    (void)arg;
    return funcd_pg_conn_setup_exec(conn, "LISTEN " CHANNEL, "LISTEN of the store's listener");
}

/* ---- following the change log --------------------------------------------------------- */

static funcd_store_event row_event(const PGresult *r, int row, int first)
{
    funcd_store_event ev = {(funcd_store_event_type)funcd_pg_get_u32(r, row, first),
                            PQgetvalue(r, row, first + 1),
                            PQgetvalue(r, row, first + 2),
                            (size_t)PQgetlength(r, row, first + 2),
                            funcd_pg_get_u64(r, row, first + 3),
                            funcd_pg_get_u64(r, row, first + 4)};
    return ev;
}

/*
 * Delivers every logged change after `fed` to the watches, in order. A log
 * compacted past `fed` (more than `history` writes while this process could
 * not read) cannot be delivered without a gap: the watches skip to what is
 * there, which docs/backends.md warns about.
 */
static int feed(pg_store *st)
{
    for (;;) {
        int rc = funcd_pg_conn_ready(&st->db);
        if (rc < 0)
            return rc;
        char after[8];
        funcd_pg_put_u64(after, st->fed);
        const char *v[] = {after};
        int len[] = {8};
        PGresult *r = funcd_pg_conn_run(&st->db, stmt_name[S_FEED], 1, v, len, "watch feed",
                                        NULL, &rc);
        if (!r)
            return rc;
        int n = PQntuples(r), delivered = 0;
        st->last_revision = n ? funcd_pg_get_u64(r, 0, 0) : st->last_revision;
        funcd_watch_list_enter(&st->watches);
        for (int i = 0; i < n; i++) {
            if (PQgetisnull(r, i, 5))
                continue;
            funcd_store_event ev = row_event(r, i, 2);
            if (ev.revision <= st->fed)
                continue;
            funcd_watch_list_dispatch(&st->watches, &ev);
            st->fed = ev.revision;
            delivered++;
        }
        funcd_watch_list_leave(&st->watches);
        PQclear(r);
        if (delivered < FEED_BATCH)
            return 0;
    }
}

/* ---- writes ------------------------------------------------------------------------------ */

typedef struct write_req {
    const char *what; /* "put" or "delete" */
    funcd_store_event_type type;
    const char *key;
    const void *value; /* put only */
    size_t len;
    uint64_t expected;
} write_req;

/* One write, one statement (funcd_write): watchers hear of it only once
 * it committed, on this thread, in revision order with others' writes. */
static int write_locked(pg_store *st, const write_req *req, uint64_t *revision)
{
    int rc = funcd_store_refuse_in_callback(&st->watches, req->what, req->key);
    if (rc < 0 || (rc = funcd_pg_conn_ready(&st->db)) < 0)
        return rc;
    int is_del = req->type == FUNCD_STORE_EVENT_DELETE;
    char type[4] = {0, 0, 0, (char)req->type}, expected[8], history[8];
    funcd_pg_put_u64(expected, req->expected == FUNCD_STORE_ANY ? UINT64_MAX : clamp(req->expected));
    funcd_pg_put_u64(history, clamp(st->history));
    const char *v[] = {type, req->key, is_del ? NULL : req->len ? req->value : "", expected,
                       history};
    int len[] = {4, (int)strlen(req->key), (int)req->len, 8, 8};
    /* A connection lost during the call leaves the outcome unknown: the
     * message says the server "went away during the put". */
    PGresult *r = funcd_pg_conn_run(&st->db, stmt_name[S_WRITE], 5, v, len, req->what,
                                    req->key, &rc);
    if (!r)
        return rc;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return funcd_error_set(FUNCD_EIO, "store: funcd_write answered no row for the %s of "
                               "\"%s\"", req->what, req->key);
    }
    if (funcd_pg_get_u32(r, 0, 0) != 0) { /* the precondition failed */
        int exists = !PQgetisnull(r, 0, 1);
        rc = funcd_store_check_expected(exists, funcd_pg_get_u64(r, 0, 1), req->key,
                                        req->expected);
        PQclear(r);
        if (rc == 0) /* a delete of an absent key */
            rc = funcd_error_set(FUNCD_ENOTFOUND,
                                 "store: cannot delete key \"%s\": it does not exist", req->key);
        return rc;
    }
    funcd_store_event ev = {req->type,
                            req->key,
                            is_del ? PQgetvalue(r, 0, 3) : req->value,
                            is_del ? (size_t)PQgetlength(r, 0, 3) : req->len,
                            funcd_pg_get_u64(r, 0, 1),
                            funcd_pg_get_u64(r, 0, 2)};
    if (!ev.value)
        ev.value = "";
    st->last_revision = ev.revision;
    if (st->fed + 1 == ev.revision) { /* nobody else wrote in between: no round trip */
        funcd_watch_list_enter(&st->watches);
        funcd_watch_list_dispatch(&st->watches, &ev);
        funcd_watch_list_leave(&st->watches);
        st->fed = ev.revision;
    } else {
        feed(st); /* others' writes first; if the server left just now, the listener catches up */
    }
    PQclear(r);
    if (revision)
        *revision = ev.revision;
    return 0;
}

static int pg_write(pg_store *st, const write_req *req, uint64_t *revision)
{
    pthread_mutex_lock(&st->lock);
    int rc = write_locked(st, req, revision);
    pthread_mutex_unlock(&st->lock);
    return rc;
}

static int pg_put(funcd_store *s, const char *key, const void *value, size_t len,
                  uint64_t expected, uint64_t *revision)
{
    int rc = funcd_store_check_key(key, "put");
    if (rc < 0)
        return rc;
    if (!value && len)
        return funcd_error_set(FUNCD_EINVAL, "store: put of key \"%s\" has no value but %zu bytes",
                               key, len);
    if (len > 256u << 20)
        return funcd_error_set(FUNCD_EINVAL, "store: the value of key \"%s\" has %zu bytes; the "
                               "PostgreSQL store takes at most 256 MiB", key, len);
    write_req req = {"put", FUNCD_STORE_EVENT_PUT, key, value, len, expected};
    return pg_write(pq(s), &req, revision);
}

static int pg_del(funcd_store *s, const char *key, uint64_t expected, uint64_t *revision)
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
    return pg_write(pq(s), &req, revision);
}

/* ---- reads ------------------------------------------------------------------------------- */

static int get_locked(pg_store *st, const char *key, funcd_store_value *out)
{
    int rc = funcd_pg_conn_ready(&st->db);
    if (rc < 0)
        return rc;
    const char *v[] = {key};
    int len[] = {(int)strlen(key)};
    PGresult *r = funcd_pg_conn_run(&st->db, stmt_name[S_GET], 1, v, len, "get", key, &rc);
    if (!r)
        return rc;
    if (PQntuples(r) == 0) {
        PQclear(r);
        return funcd_error_set(FUNCD_ENOTFOUND,
                               "store: key \"%s\" not found; list its prefix to see what exists",
                               key);
    }
    size_t n = (size_t)PQgetlength(r, 0, 0);
    char *copy = malloc(n + 1);
    if (!copy) {
        PQclear(r);
        return funcd_error_set(FUNCD_ENOMEM, "store: out of memory reading key \"%s\"", key);
    }
    memcpy(copy, PQgetvalue(r, 0, 0), n);
    copy[n] = '\0';
    out->value = copy;
    out->len = n;
    out->revision = funcd_pg_get_u64(r, 0, 1);
    out->create_revision = funcd_pg_get_u64(r, 0, 2);
    PQclear(r);
    return 0;
}

static int pg_get(funcd_store *s, const char *key, funcd_store_value *out)
{
    pg_store *st = pq(s);
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

/* Runs the bounded statement `id` (or its unbounded neighbour id + 1) on the
 * key range of `prefix`, after the `lead` parameters. */
static PGresult *run_range(pg_store *st, enum stmt_id id, const char *prefix, int lead,
                           const char *const *lead_v, const char *what, int *err)
{
    char *upper = malloc(strlen(prefix) + 1);
    if (!upper) {
        *err = funcd_error_set(FUNCD_ENOMEM, "store: out of memory (%s)", what);
        return NULL;
    }
    int has_upper = funcd_prefix_upper_bound(prefix, upper);
    const char *v[4];
    int len[4], n = 0;
    for (; n < lead; n++) {
        v[n] = lead_v[n];
        len[n] = 8;
    }
    v[n] = prefix;
    len[n++] = (int)strlen(prefix);
    if (has_upper) {
        v[n] = upper;
        len[n++] = (int)strlen(upper);
    }
    enum stmt_id which = has_upper ? id : (enum stmt_id)(id + 1);
    PGresult *r = funcd_pg_conn_run(&st->db, stmt_name[which], n, v, len, what, prefix, err);
    free(upper);
    return r;
}

static int list_locked(pg_store *st, const char *prefix, funcd_store_list_cb cb, void *payload,
                       uint64_t *revision)
{
    int rc = funcd_pg_conn_ready(&st->db);
    if (rc < 0)
        return rc;
    PGresult *r = run_range(st, S_LIST, prefix, 0, NULL, "list", &rc);
    if (!r)
        return rc;
    int n = PQntuples(r);
    if (n == 0) { /* no meta row: someone dropped it */
        PQclear(r);
        return funcd_error_set(FUNCD_EIO, "store: the funcd_meta row is missing in %s",
                               st->db.display);
    }
    uint64_t rev = funcd_pg_get_u64(r, 0, 0);
    st->last_revision = rev;
    funcd_watch_list_enter(&st->watches);
    for (int i = 0; i < n; i++) {
        if (PQgetisnull(r, i, 1))
            break;
        funcd_store_kv kv = {PQgetvalue(r, i, 1), PQgetvalue(r, i, 2),
                             (size_t)PQgetlength(r, i, 2), funcd_pg_get_u64(r, i, 3),
                             funcd_pg_get_u64(r, i, 4)};
        if (cb(&kv, payload))
            break;
    }
    funcd_watch_list_leave(&st->watches);
    PQclear(r);
    if (revision)
        *revision = rev;
    return 0;
}

static int pg_list(funcd_store *s, const char *prefix, funcd_store_list_cb cb, void *payload,
                   uint64_t *revision)
{
    pg_store *st = pq(s);
    if (!cb)
        return funcd_error_set(FUNCD_EINVAL, "store: list needs a callback");
    pthread_mutex_lock(&st->lock);
    int rc = list_locked(st, prefix ? prefix : "", cb, payload, revision);
    pthread_mutex_unlock(&st->lock);
    return rc;
}

/* ---- watches ----------------------------------------------------------------------------- */

static int gone(const char *prefix, uint64_t after, uint64_t compacted)
{
    return funcd_error_set(FUNCD_EGONE,
                           "store: cannot watch prefix \"%s\" from revision %" PRIu64
                           ": history up to revision %" PRIu64
                           " was compacted; list the prefix again and watch from the "
                           "list's revision",
                           prefix, after, compacted);
}

/* Replays the log after `after` (one statement: one snapshot with the
 * revision); watchers.c then links the watch under the lock the follower
 * delivers under, so nothing falls between the two. */
static int replay_locked(void *store, funcd_store_watch *w, uint64_t after, uint64_t *revision)
{
    pg_store *st = store;
    int rc = funcd_pg_conn_ready(&st->db);
    if (rc < 0)
        return rc;
    char a[8];
    funcd_pg_put_u64(a, clamp(after));
    const char *lead[] = {a};
    PGresult *r = run_range(st, S_REPLAY, w->prefix, 1, lead, "watch", &rc);
    if (!r)
        return rc;
    int n = PQntuples(r);
    if (n == 0) {
        PQclear(r);
        return funcd_error_set(FUNCD_EIO, "store: the funcd_meta row is missing in %s",
                               st->db.display);
    }
    uint64_t compacted = funcd_pg_get_u64(r, 0, 1);
    *revision = funcd_pg_get_u64(r, 0, 0);
    if (after < compacted) {
        PQclear(r);
        return gone(w->prefix, after, compacted);
    }
    funcd_watch_list_enter(&st->watches);
    for (int i = 0; i < n && !PQgetisnull(r, i, 5); i++) {
        funcd_store_event ev = row_event(r, i, 2);
        funcd_watch_deliver(w, &ev);
    }
    funcd_watch_list_leave(&st->watches);
    PQclear(r);
    return 0;
}

static int pg_watch(funcd_store *s, const char *prefix, uint64_t after, funcd_store_watch_cb cb,
                    void *payload, funcd_store_watch **out)
{
    pg_store *st = pq(s);
    return funcd_store_watch_open(&st->lock, &st->watches, st, replay_locked, prefix, after, cb,
                                  payload, out);
}

static void pg_unwatch(funcd_store *s, funcd_store_watch *w)
{
    pg_store *st = pq(s);
    funcd_store_watch_close(&st->lock, &st->watches, w);
}

static uint64_t pg_revision(funcd_store *s)
{
    pg_store *st = pq(s);
    pthread_mutex_lock(&st->lock);
    int rc = funcd_pg_conn_ready(&st->db);
    PGresult *r = rc < 0 ? NULL
                         : funcd_pg_conn_run(&st->db, stmt_name[S_REVISION], 0, NULL, NULL,
                                             "revision", NULL, &rc);
    if (r && PQntuples(r) == 1)
        st->last_revision = funcd_pg_get_u64(r, 0, 0);
    PQclear(r);
    uint64_t rev = st->last_revision;
    pthread_mutex_unlock(&st->lock);
    return rev;
}

/* ---- the listener ------------------------------------------------------------------------ */

/* Waits for notifications (or a stop byte) and follows the log on each;
 * also after every reconnect, which may have missed some. */
static void *listen_main(void *arg)
{
    pg_store *st = arg;
    int behind = 1; /* the log may hold changes not yet delivered */
    for (;;) {
        if (!st->listener.conn && funcd_pg_conn_ready(&st->listener) == 0)
            behind = 1;
        if (behind) {
            pthread_mutex_lock(&st->lock);
            behind = feed(st) < 0;
            pthread_mutex_unlock(&st->lock);
        }
        struct pollfd pfd[2] = {{st->wake[0], POLLIN, 0}, {-1, POLLIN, 0}};
        if (st->listener.conn)
            pfd[1].fd = PQsocket(st->listener.conn);
        int timeout = behind || !st->listener.conn ? 100 : 5000;
        if (poll(pfd, 2, timeout) < 0 && errno != EINTR)
            break;
        if (pfd[0].revents)
            break;
        if (!st->listener.conn || !pfd[1].revents)
            continue;
        if (!PQconsumeInput(st->listener.conn)) {
            funcd_pg_conn_lost(&st->listener, PQerrorMessage(st->listener.conn));
            continue;
        }
        PGnotify *n;
        while ((n = PQnotifies(st->listener.conn)) != NULL) {
            behind = 1;
            PQfreemem(n);
        }
    }
    return NULL;
}

/* ---- opening ----------------------------------------------------------------------------- */

static void pg_free(funcd_store *s)
{
    pg_store *st = pq(s);
    if (!st)
        return;
    if (st->thread_started) {
        char b = 1;
        ssize_t n = write(st->wake[1], &b, 1);
        (void)n;
        pthread_join(st->thread, NULL);
    }
    for (int i = 0; i < 2; i++)
        if (st->wake[i] >= 0)
            close(st->wake[i]);
    funcd_watch_list_clear(&st->watches); /* watches must be ended: be forgiving */
    funcd_pg_conn_close(&st->listener);
    funcd_pg_conn_close(&st->db);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

static int open_schema(pg_store *st)
{
    int rc = funcd_pg_conn_ready(&st->db);
    if (rc < 0)
        return rc;
    /* The statements were prepared before the tables existed only if they
     * did exist: prepare failed on a new database, so create, then again. */
    if ((rc = funcd_pg_conn_exec(&st->db, schema_sql, "creation of the funcd tables", NULL)) < 0) {
        funcd_pg_conn_rollback(&st->db);
        return rc;
    }
    PGresult *r = funcd_pg_conn_query(&st->db, "SELECT schema, revision FROM funcd_meta WHERE id = 1",
                                      "reading of the schema version", NULL, &rc);
    if (!r)
        return rc;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return funcd_error_set(FUNCD_EIO, "store: the funcd_meta table in %s has no row 1: it "
                               "was not made by funcd", st->db.display);
    }
    int version = atoi(PQgetvalue(r, 0, 0));
    st->fed = st->last_revision = strtoull(PQgetvalue(r, 0, 1), NULL, 10);
    PQclear(r);
    if (version > SCHEMA_VERSION)
        return funcd_error_set(FUNCD_EVERSION,
                               "store: the funcd tables in %s have schema version %d, newer than "
                               "the %d this funcd knows; they were written by a newer funcd: "
                               "upgrade funcd",
                               st->db.display, version, SCHEMA_VERSION);
    return 0;
}

/* The first connection: no statements yet (the tables may not exist). */
static int bootstrap(pg_store *st)
{
    st->db.setup = NULL;
    int rc = open_schema(st);
    st->db.setup = setup_main;
    if (rc == 0 && (rc = setup_main(st->db.conn, NULL)) < 0)
        funcd_pg_conn_lost(&st->db, funcd_error_last()->message);
    return rc;
}

FUNCD_EXTERN int funcd_store_postgres_options_init(funcd_store_postgres_options *opts,
                                                   unsigned version)
{
    if (!opts)
        return funcd_error_set(FUNCD_EINVAL, "funcd_store_postgres_options_init: opts is NULL");
    if (version < 1 || version > FUNCD_STORE_POSTGRES_OPTIONS_VERSION)
        return funcd_error_set(FUNCD_EVERSION, "funcd_store_postgres_options version %u: this "
                               "funcd knows versions 1 to %d", version,
                               FUNCD_STORE_POSTGRES_OPTIONS_VERSION);
    *opts = (funcd_store_postgres_options)FUNCD_STORE_POSTGRES_OPTIONS_INIT;
    opts->version = version;
    return 0;
}

FUNCD_EXTERN int funcd_store_postgres_new(funcd_store **out, const char *conninfo,
                                          const funcd_store_postgres_options *opts)
{
    if (!out)
        return funcd_error_set(FUNCD_EINVAL, "store: funcd_store_postgres_new needs an out pointer");
    *out = NULL;
    if (opts && (opts->version < 1 || opts->version > FUNCD_STORE_POSTGRES_OPTIONS_VERSION))
        return funcd_error_set(FUNCD_EVERSION, "store: funcd_store_postgres_options has version "
                               "%u; this funcd knows versions 1 to %d (start from "
                               "FUNCD_STORE_POSTGRES_OPTIONS_INIT)", opts->version,
                               FUNCD_STORE_POSTGRES_OPTIONS_VERSION);
    pg_store *st = calloc(1, sizeof(*st));
    if (!st)
        return funcd_error_set(FUNCD_ENOMEM, "store: out of memory");
    st->wake[0] = st->wake[1] = -1;
    int rc = funcd_store_lock_init(&st->lock, "postgres");
    if (rc < 0) {
        free(st);
        return rc;
    }
    st->base = (funcd_store)FUNCD_STORE_INIT;
    st->base.name = "postgres";
    st->base.get = pg_get;
    st->base.put = pg_put;
    st->base.del = pg_del;
    st->base.list = pg_list;
    st->base.watch = pg_watch;
    st->base.unwatch = pg_unwatch;
    st->base.revision = pg_revision;
    st->base.free = pg_free;
    st->history = opts && opts->history ? opts->history : DEFAULT_HISTORY;
    if ((rc = funcd_pg_conn_init(&st->db, conninfo, "store", setup_main, NULL)) < 0 ||
        (rc = funcd_pg_conn_init(&st->listener, conninfo, "store", setup_listener, NULL)) < 0 ||
        (rc = bootstrap(st)) < 0 || (rc = funcd_pg_conn_ready(&st->listener)) < 0) {
        pg_free(&st->base);
        return rc;
    }
    if (pipe2(st->wake, O_CLOEXEC) != 0 ||
        pthread_create(&st->thread, NULL, listen_main, st) != 0) {
        rc = funcd_error_set(FUNCD_EIO, "store: cannot start the postgres listener: %s",
                             strerror(errno));
        pg_free(&st->base);
        return rc;
    }
    st->thread_started = 1;
    *out = &st->base;
    return 0;
}
