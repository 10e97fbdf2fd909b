/*
 * The blob store on PostgreSQL (libpq): what several funcd nodes share
 * (docs/adr/0038-postgres-drivers.md).
 *
 * Tables: `funcd_blobs` (one row per object: key, size, mtime) and
 * `funcd_blob_chunks` (the bytes, in rows of up to 1 MiB, so a range reads
 * only the chunks it covers and an object may be larger than one bytea's
 * 1 GB). A put is one transaction: the object's row is upserted first (its
 * row lock orders two puts of one key), then the old chunks go and the new
 * ones come. A get is one statement, so it reads one snapshot: the old object
 * or the new one, never a mix.
 *
 * One connection behind one mutex; list callbacks run after the lock is
 * released, so they may call back in.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "blob/shared.h"
#include "funcd/sys/blob.h"
#include "funcd/sys/error.h"
#include "util/misc.h"
#include "store/pg_conn.h"
#include "store/watchers.h" /* funcd_prefix_upper_bound */

#define CHUNK (1u << 20)
/* Another number than the store's: both may open one database at once. */
#define SCHEMA_LOCK "7305318472290482"

enum stmt_id { S_HEAD_UPSERT, S_CHUNKS_DELETE, S_CHUNK_INSERT, S_GET, S_STAT, S_LIST, S_LIST_ALL,
               S_DELETE, S_STAGE_MOVE, S_STAGE_SWEEP, S_COUNT };

static const struct {
    const char *name, *sql;
    int n;
    unsigned types[4];
} stmt[S_COUNT] = {
    [S_HEAD_UPSERT] = {"funcd_blob_head",
                       "INSERT INTO funcd_blobs(key, size, mtime_ms) VALUES ($1, $2, "
                       "  (extract(epoch from clock_timestamp()) * 1000)::bigint) "
                       "ON CONFLICT (key) DO UPDATE SET size = EXCLUDED.size, "
                       "  mtime_ms = EXCLUDED.mtime_ms",
                       2,
                       {FUNCD_PG_BYTEA, FUNCD_PG_INT8}},
    [S_CHUNKS_DELETE] = {"funcd_blob_chunks_delete",
                         "DELETE FROM funcd_blob_chunks WHERE key = $1",
                         1,
                         {FUNCD_PG_BYTEA}},
    [S_CHUNK_INSERT] = {"funcd_blob_chunk",
                        "INSERT INTO funcd_blob_chunks(key, n, data) VALUES ($1, $2, $3)",
                        3,
                        {FUNCD_PG_BYTEA, FUNCD_PG_INT4, FUNCD_PG_BYTEA}},
    /* The object's size and the chunks of the range in one snapshot. */
    [S_GET] = {"funcd_blob_get",
               "SELECT b.size, c.n, c.data FROM funcd_blobs b LEFT JOIN funcd_blob_chunks c "
               "ON c.key = b.key AND c.n BETWEEN $2 AND $3 WHERE b.key = $1 ORDER BY c.n",
               3,
               {FUNCD_PG_BYTEA, FUNCD_PG_INT4, FUNCD_PG_INT4}},
    [S_STAT] = {"funcd_blob_stat", "SELECT size, mtime_ms FROM funcd_blobs WHERE key = $1", 1,
                {FUNCD_PG_BYTEA}},
    [S_LIST] = {"funcd_blob_list",
                "SELECT key, size, mtime_ms FROM funcd_blobs WHERE key >= $1 AND key < $2 "
                "ORDER BY key",
                2,
                {FUNCD_PG_BYTEA, FUNCD_PG_BYTEA}},
    [S_LIST_ALL] = {"funcd_blob_list_all",
                    "SELECT key, size, mtime_ms FROM funcd_blobs WHERE key >= $1 ORDER BY key", 1,
                    {FUNCD_PG_BYTEA}},
    [S_DELETE] = {"funcd_blob_delete", "DELETE FROM funcd_blobs WHERE key = $1 RETURNING 1", 1,
                  {FUNCD_PG_BYTEA}},
    /* A writer's staged chunks become the object's (the bytes are not copied). */
    [S_STAGE_MOVE] = {"funcd_blob_stage_move",
                      "UPDATE funcd_blob_chunks SET key = $1 WHERE key = $2", 2,
                      {FUNCD_PG_BYTEA, FUNCD_PG_BYTEA}},
    [S_STAGE_SWEEP] = {"funcd_blob_stage_sweep",
                       "DELETE FROM funcd_blob_chunks WHERE key >= $1 AND key < $2", 2,
                       {FUNCD_PG_BYTEA, FUNCD_PG_BYTEA}},
};

/*
 * A put_open writer's chunks wait under a staging key: "\0" (no object key
 * can hold a NUL byte, and chunks without a funcd_blobs row are never
 * read), STAGE, the writer's start in epoch milliseconds as 16 hex digits
 * (so staging keys sort by age), '/', 16 random hex digits.
 */
#define STAGE "funcd-staging/"
#define STAGE_LEN (1 + sizeof(STAGE) - 1)
#define STAGE_KEY_LEN (STAGE_LEN + 16 + 1 + 16)
#define STAGE_MAX_AGE_MS (24 * 3600 * 1000LL)

static const char schema_sql[] =
    "BEGIN;"
    "SELECT pg_advisory_xact_lock(" SCHEMA_LOCK ");"
    "CREATE TABLE IF NOT EXISTS funcd_blobs(key bytea PRIMARY KEY, size bigint NOT NULL,"
    "  mtime_ms bigint NOT NULL);"
    "CREATE TABLE IF NOT EXISTS funcd_blob_chunks(key bytea NOT NULL, n integer NOT NULL,"
    "  data bytea NOT NULL, PRIMARY KEY (key, n));"
    /* Artifacts are compressed already: no second compression attempt. */
    "ALTER TABLE funcd_blob_chunks ALTER COLUMN data SET STORAGE EXTERNAL;"
    "COMMENT ON TABLE funcd_blobs IS 'funcd blob schema 1';"
    "COMMIT;";

typedef struct pg_blob {
    funcd_blob base;
    pthread_mutex_t lock;
    funcd_pg_conn db;
} pg_blob;

static pg_blob *pb(funcd_blob *b)
{
    return (pg_blob *)b;
}

static int not_found(const char *key, const char *what)
{
    return funcd_error_set(FUNCD_ENOTFOUND, "blob: cannot %s \"%s\": no such object", what, key);
}

static int setup(PGconn *conn, void *arg)
{
    (void)arg;
    for (int i = 0; i < S_COUNT; i++) {
        int rc = funcd_pg_conn_prepare(conn, stmt[i].name, stmt[i].sql, stmt[i].n,
                                       stmt[i].types);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static void rollback(pg_blob *p)
{
    funcd_pg_conn_rollback(&p->db);
}

/* Runs a statement whose rows we do not need; 0 or the error. */
static int run(pg_blob *p, enum stmt_id id, int n, const char *const *v, const int *len,
               const char *what, const char *key)
{
    int rc;
    PGresult *r = funcd_pg_conn_run(&p->db, stmt[id].name, n, v, len, what, key, &rc);
    PQclear(r);
    return r ? 0 : rc;
}

static int put_locked(pg_blob *p, const char *key, const unsigned char *data, size_t len)
{
    int rc = funcd_pg_conn_ready(&p->db);
    if (rc < 0 || (rc = funcd_pg_conn_exec(&p->db, "BEGIN", "put", key)) < 0)
        return rc;
    char size[8];
    funcd_pg_put_u64(size, len);
    int klen = (int)strlen(key);
    const char *hv[] = {key, size};
    int hl[] = {klen, 8};
    if ((rc = run(p, S_HEAD_UPSERT, 2, hv, hl, "put", key)) < 0 ||
        (rc = run(p, S_CHUNKS_DELETE, 1, hv, hl, "put", key)) < 0)
        goto fail;
    for (size_t off = 0, n = 0; off < len; off += CHUNK, n++) {
        char idx[4] = {(char)(n >> 24), (char)(n >> 16), (char)(n >> 8), (char)n};
        size_t part = len - off < CHUNK ? len - off : CHUNK;
        const char *cv[] = {key, idx, (const char *)data + off};
        int cl[] = {klen, 4, (int)part};
        if ((rc = run(p, S_CHUNK_INSERT, 3, cv, cl, "put", key)) < 0)
            goto fail;
    }
    if ((rc = funcd_pg_conn_exec(&p->db, "COMMIT", "put", key)) < 0)
        goto fail;
    return 0;
fail:
    rollback(p);
    return rc;
}

static int pg_put(funcd_blob *b, const char *key, const void *data, size_t len)
{
    pg_blob *p = pb(b);
    int rc = funcd_blob_check_key(key, "put");
    if (rc < 0)
        return rc;
    if (!data && len)
        return funcd_error_set(FUNCD_EINVAL, "blob: put of \"%s\" has no data but %zu bytes", key,
                               len);
    if (len / CHUNK >= INT32_MAX)
        return funcd_error_set(FUNCD_EINVAL, "blob: \"%s\" is too large (%zu bytes)", key, len);
    pthread_mutex_lock(&p->lock);
    rc = put_locked(p, key, data, len);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

static void put_i32(char out[4], int32_t v);

/* ---- put_open: chunks staged as they fill, moved under the key at commit ---- */

typedef struct pg_writer {
    funcd_blob_writer base;
    pg_blob *p;
    char *key;
    char skey[STAGE_KEY_LEN + 1]; /* and the NUL snprintf writes */
    unsigned char *buf; /* the chunk being filled */
    size_t fill;
    uint64_t size;  /* bytes written */
    int32_t chunks; /* chunks staged */
    int failed;
} pg_writer;

static void stage_prefix(char *out, int64_t ms)
{
    out[0] = '\0';
    memcpy(out + 1, STAGE, sizeof(STAGE) - 1);
    snprintf(out + STAGE_LEN, 17, "%016llx", (unsigned long long)ms);
}

static int stage_chunk(pg_writer *w)
{
    pg_blob *p = w->p;
    if (w->chunks == INT32_MAX)
        return funcd_error_set(FUNCD_EINVAL, "blob: \"%s\" is too large", w->key);
    char idx[4];
    put_i32(idx, w->chunks);
    const char *cv[] = {w->skey, idx, (const char *)w->buf};
    int cl[] = {(int)STAGE_KEY_LEN, 4, (int)w->fill};
    pthread_mutex_lock(&p->lock);
    int rc = funcd_pg_conn_ready(&p->db);
    if (rc == 0)
        rc = run(p, S_CHUNK_INSERT, 3, cv, cl, "put", w->key);
    pthread_mutex_unlock(&p->lock);
    if (rc == 0) {
        w->chunks++;
        w->fill = 0;
    }
    return rc;
}

static int pw_write(funcd_blob_writer *base, const void *data, size_t len)
{
    pg_writer *w = (pg_writer *)base;
    if (w->failed)
        return funcd_error_set(FUNCD_EINVAL, "blob: write to \"%s\" after a failed write: abort "
                                             "the writer",
                               w->key);
    if (len && !data)
        return funcd_error_set(FUNCD_EINVAL, "blob: write to \"%s\" has no data but %zu bytes",
                               w->key, len);
    const unsigned char *d = data;
    while (len) {
        size_t n = CHUNK - w->fill < len ? CHUNK - w->fill : len;
        memcpy(w->buf + w->fill, d, n);
        w->fill += n;
        w->size += n;
        d += n;
        len -= n;
        int rc;
        if (w->fill == CHUNK && (rc = stage_chunk(w)) < 0) {
            w->failed = 1;
            return rc;
        }
    }
    return 0;
}

/* Removes the writer's staged chunks (best effort: a sweep gets them later). */
static void unstage(pg_writer *w)
{
    if (!w->chunks)
        return;
    pg_blob *p = w->p;
    const char *v[] = {w->skey};
    int l[] = {(int)STAGE_KEY_LEN};
    pthread_mutex_lock(&p->lock);
    if (funcd_pg_conn_ready(&p->db) == 0)
        run(p, S_CHUNKS_DELETE, 1, v, l, "put", w->key);
    pthread_mutex_unlock(&p->lock);
}

static void pw_free(pg_writer *w)
{
    free(w->key);
    free(w->buf);
    free(w);
}

static int commit_locked(pg_writer *w)
{
    pg_blob *p = w->p;
    int rc = funcd_pg_conn_ready(&p->db);
    if (rc < 0 || (rc = funcd_pg_conn_exec(&p->db, "BEGIN", "put", w->key)) < 0)
        return rc;
    char size[8];
    funcd_pg_put_u64(size, w->size);
    const char *v[] = {w->key, size};
    int l[] = {(int)strlen(w->key), 8};
    const char *mv[] = {w->key, w->skey};
    int ml[] = {(int)strlen(w->key), (int)STAGE_KEY_LEN};
    PGresult *moved = NULL;
    if ((rc = run(p, S_HEAD_UPSERT, 2, v, l, "put", w->key)) < 0 ||
        (rc = run(p, S_CHUNKS_DELETE, 1, v, l, "put", w->key)) < 0 ||
        !(moved = funcd_pg_conn_run(&p->db, stmt[S_STAGE_MOVE].name, 2, mv, ml, "put", w->key,
                                    &rc))) {
        rollback(p);
        return rc;
    }
    /* Every staged chunk, or nothing: a chunk swept meanwhile would publish
     * a short object under the full size. */
    long n = strtol(PQcmdTuples(moved), NULL, 10);
    PQclear(moved);
    if (n != (long)w->chunks) {
        rollback(p);
        return funcd_error_set(FUNCD_EIO, "blob: put of \"%s\": %ld of its %ld staged chunks "
                               "were left; nothing was stored", w->key, n, (long)w->chunks);
    }
    if ((rc = funcd_pg_conn_exec(&p->db, "COMMIT", "put", w->key)) < 0) {
        rollback(p);
        return rc;
    }
    return 0;
}

static int pw_commit(funcd_blob_writer *base)
{
    pg_writer *w = (pg_writer *)base;
    int rc = 0;
    if (w->failed)
        rc = funcd_error_set(FUNCD_EINVAL, "blob: commit of \"%s\" after a failed write: "
                                           "nothing was stored",
                             w->key);
    else if (w->fill)
        rc = stage_chunk(w);
    if (rc == 0) {
        pthread_mutex_lock(&w->p->lock);
        rc = commit_locked(w);
        pthread_mutex_unlock(&w->p->lock);
    }
    if (rc < 0) {
        char why[512];
        snprintf(why, sizeof(why), "%s", funcd_error_last()->message);
        unstage(w);
        funcd_error_set(rc, "%s", why);
    }
    pw_free(w);
    return rc;
}

static void pw_abort(funcd_blob_writer *base)
{
    pg_writer *w = (pg_writer *)base;
    unstage(w);
    pw_free(w);
}

static int pg_put_open(funcd_blob *b, const char *key, funcd_blob_writer **out)
{
    int rc = funcd_blob_check_key(key, "put");
    if (rc < 0)
        return rc;
    if (!out)
        return funcd_error_set(FUNCD_EINVAL, "blob: put_open of \"%s\" needs an out pointer", key);
    uint8_t rnd[8];
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        return funcd_error_set(FUNCD_EIO, "blob: no randomness for a staging key");
    pg_writer *w = calloc(1, sizeof(*w));
    if (!w || !(w->key = strdup(key)) || !(w->buf = malloc(CHUNK))) {
        if (w)
            free(w->key);
        free(w);
        return funcd_error_set(FUNCD_ENOMEM, "blob: out of memory opening a writer for \"%s\"",
                               key);
    }
    stage_prefix(w->skey, funcd_now_ms());
    w->skey[STAGE_LEN + 16] = '/';
    for (int i = 0; i < 8; i++)
        snprintf(w->skey + STAGE_LEN + 17 + 2 * i, 3, "%02x", rnd[i]);
    w->base.write = pw_write;
    w->base.commit = pw_commit;
    w->base.abort = pw_abort;
    w->p = pb(b);
    *out = &w->base;
    return 0;
}

static void put_i32(char out[4], int32_t v)
{
    uint32_t u = (uint32_t)v;
    out[0] = (char)(u >> 24);
    out[1] = (char)(u >> 16);
    out[2] = (char)(u >> 8);
    out[3] = (char)u;
}

static int32_t chunk_of(uint64_t offset)
{
    uint64_t n = offset / CHUNK;
    return n > INT32_MAX ? INT32_MAX : (int32_t)n;
}

/* Copies the part of the fetched chunks inside [offset, offset + n). */
static void assemble(const PGresult *r, uint64_t offset, size_t n, unsigned char *out)
{
    for (int i = 0; i < PQntuples(r); i++) {
        if (PQgetisnull(r, i, 1))
            continue;
        uint64_t start = (uint64_t)funcd_pg_get_u32(r, i, 1) * CHUNK;
        uint64_t end = start + (uint64_t)PQgetlength(r, i, 2);
        uint64_t from = start > offset ? start : offset;
        uint64_t to = end < offset + n ? end : offset + n;
        if (from < to)
            memcpy(out + (from - offset), PQgetvalue(r, i, 2) + (from - start), to - from);
    }
}

static int get_locked(void *blob, const char *key, uint64_t offset, uint64_t length, void **out,
                      size_t *out_len)
{
    pg_blob *p = blob;
    int rc = funcd_pg_conn_ready(&p->db);
    if (rc < 0)
        return rc;
    int32_t first = chunk_of(offset), last;
    if (length == 0)
        last = first - 1; /* no chunk: only the size, for the range check */
    else if (length == FUNCD_BLOB_TO_END || offset + length < offset)
        last = INT32_MAX;
    else
        last = chunk_of(offset + length - 1);
    char f[4], l[4];
    put_i32(f, first);
    put_i32(l, last);
    const char *v[] = {key, f, l};
    int len[] = {(int)strlen(key), 4, 4};
    PGresult *r = funcd_pg_conn_run(&p->db, stmt[S_GET].name, 3, v, len, "get", key, &rc);
    if (!r)
        return rc;
    if (PQntuples(r) == 0) {
        PQclear(r);
        return not_found(key, "read");
    }
    size_t n;
    unsigned char *copy;
    rc = funcd_blob_span(key, funcd_pg_get_u64(r, 0, 0), offset, length, &n, &copy);
    if (rc < 0) {
        PQclear(r);
        return rc;
    }
    assemble(r, offset, n, copy);
    PQclear(r);
    *out = copy;
    *out_len = n;
    return 0;
}

static int pg_get(funcd_blob *b, const char *key, uint64_t offset, uint64_t length, void **out,
                  size_t *out_len)
{
    pg_blob *p = pb(b);
    return funcd_blob_get_locked(&p->lock, p, get_locked, key, offset, length, out, out_len);
}

static int stat_locked(void *blob, const char *key, funcd_blob_stat *out)
{
    pg_blob *p = blob;
    int rc = funcd_pg_conn_ready(&p->db);
    if (rc < 0)
        return rc;
    const char *v[] = {key};
    int len[] = {(int)strlen(key)};
    PGresult *r = funcd_pg_conn_run(&p->db, stmt[S_STAT].name, 1, v, len, "stat", key, &rc);
    if (!r)
        return rc;
    int found = PQntuples(r) == 1;
    if (found) {
        out->size = funcd_pg_get_u64(r, 0, 0);
        out->mtime_ms = (int64_t)funcd_pg_get_u64(r, 0, 1);
    }
    PQclear(r);
    return found;
}

static int pg_stat(funcd_blob *b, const char *key, funcd_blob_stat *out)
{
    pg_blob *p = pb(b);
    return funcd_blob_stat_locked(&p->lock, p, stat_locked, key, out);
}

static int pg_list(funcd_blob *b, const char *prefix, funcd_blob_list_cb cb, void *payload)
{
    pg_blob *p = pb(b);
    if (!cb)
        return funcd_error_set(FUNCD_EINVAL, "blob: list needs a callback");
    if (!prefix)
        prefix = "";
    char *upper = malloc(strlen(prefix) + 1);
    if (!upper)
        return funcd_error_set(FUNCD_ENOMEM, "blob: out of memory listing \"%s\"", prefix);
    int has_upper = funcd_prefix_upper_bound(prefix, upper), rc;
    const char *v[] = {prefix, upper};
    int len[] = {(int)strlen(prefix), has_upper ? (int)strlen(upper) : 0};
    PGresult *r = NULL;
    pthread_mutex_lock(&p->lock);
    if ((rc = funcd_pg_conn_ready(&p->db)) == 0)
        r = funcd_pg_conn_run(&p->db, stmt[has_upper ? S_LIST : S_LIST_ALL].name,
                              has_upper ? 2 : 1, v, len, "list", prefix, &rc);
    pthread_mutex_unlock(&p->lock);
    free(upper);
    if (!r)
        return rc;
    /* The rows are ours now: callbacks run without the lock. */
    for (int i = 0; i < PQntuples(r); i++) {
        funcd_blob_stat st = {funcd_pg_get_u64(r, i, 1), (int64_t)funcd_pg_get_u64(r, i, 2)};
        if (cb(PQgetvalue(r, i, 0), &st, payload))
            break;
    }
    PQclear(r);
    return 0;
}

static int del_locked(pg_blob *p, const char *key)
{
    int rc = funcd_pg_conn_ready(&p->db);
    if (rc < 0 || (rc = funcd_pg_conn_exec(&p->db, "BEGIN", "delete", key)) < 0)
        return rc;
    const char *v[] = {key};
    int len[] = {(int)strlen(key)};
    /* The object's row first: it waits for a put of the same key to end. */
    PGresult *r = funcd_pg_conn_run(&p->db, stmt[S_DELETE].name, 1, v, len, "delete", key, &rc);
    if (!r) {
        rollback(p);
        return rc;
    }
    int found = PQntuples(r) == 1;
    PQclear(r);
    if (!found) {
        rollback(p);
        return not_found(key, "delete");
    }
    if ((rc = run(p, S_CHUNKS_DELETE, 1, v, len, "delete", key)) < 0 ||
        (rc = funcd_pg_conn_exec(&p->db, "COMMIT", "delete", key)) < 0) {
        rollback(p);
        return rc;
    }
    return 0;
}

static int pg_del(funcd_blob *b, const char *key)
{
    pg_blob *p = pb(b);
    int rc = funcd_blob_check_key(key, "delete");
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&p->lock);
    rc = del_locked(p, key);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

static void pg_free(funcd_blob *b)
{
    pg_blob *p = pb(b);
    if (!p)
        return;
    funcd_pg_conn_close(&p->db);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

/* Creates the tables on the first connection, then prepares. */
static int bootstrap(pg_blob *p)
{
    p->db.setup = NULL;
    int rc = funcd_pg_conn_ready(&p->db);
    p->db.setup = setup;
    if (rc < 0)
        return rc;
    if ((rc = funcd_pg_conn_exec(&p->db, schema_sql, "creation of the funcd blob tables",
                                 NULL)) < 0) {
        rollback(p);
        return rc;
    }
    if ((rc = setup(p->db.conn, NULL)) < 0) {
        funcd_pg_conn_lost(&p->db, funcd_error_last()->message);
        return rc;
    }
    /* Chunks a writer staged a day ago belong to a crashed funcd. */
    char lo[STAGE_KEY_LEN + 1], hi[STAGE_KEY_LEN + 1];
    stage_prefix(lo, 0);
    stage_prefix(hi, funcd_now_ms() - STAGE_MAX_AGE_MS);
    const char *v[] = {lo, hi};
    int l[] = {(int)STAGE_LEN, (int)(STAGE_LEN + 16)};
    run(p, S_STAGE_SWEEP, 2, v, l, "the sweep of staged chunks", NULL);
    return 0;
}

FUNCD_EXTERN int funcd_blob_postgres_new(funcd_blob **out, const char *conninfo)
{
    if (!out)
        return funcd_error_set(FUNCD_EINVAL, "blob: funcd_blob_postgres_new needs an out pointer");
    *out = NULL;
    pg_blob *p = calloc(1, sizeof(*p));
    if (!p)
        return funcd_error_set(FUNCD_ENOMEM, "blob: out of memory");
    if (pthread_mutex_init(&p->lock, NULL) != 0) {
        free(p);
        return funcd_error_set(FUNCD_EIO, "blob: cannot create the postgres blob's mutex");
    }
    p->base = (funcd_blob)FUNCD_BLOB_INIT;
    p->base.name = "postgres";
    p->base.put = pg_put;
    p->base.get = pg_get;
    p->base.stat = pg_stat;
    p->base.list = pg_list;
    p->base.del = pg_del;
    p->base.free = pg_free;
    p->base.put_open = pg_put_open;
    int rc;
    if ((rc = funcd_pg_conn_init(&p->db, conninfo, "blob", setup, NULL)) < 0 ||
        (rc = bootstrap(p)) < 0) {
        pg_free(&p->base);
        return rc;
    }
    *out = &p->base;
    return 0;
}
