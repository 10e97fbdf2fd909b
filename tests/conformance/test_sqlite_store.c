/* The sqlite store against the store conformance suite, plus what only it promises:
 * durability across reopen and kill -9, compaction, disk full, locking, schema versions. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../harness.h"
#include "funcd/sys/store.h"
#include "store/sqlite_private.h"
#include "store_suite.h"
#include "util/misc.h"

#define ANY FUNCD_STORE_ANY

/* Durability cases use a directory on the real disk ($TMPDIR or /tmp). The
 * conformance suite (semantics, 16,000 fsync'd writes under deadlines of its
 * own) uses one in /dev/shm when there is one, so a busy shared disk cannot
 * make it flaky. */
static char tmpdir[200], suitedir[200];

static void db_path(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", tmpdir, name);
}

static funcd_store *open_path(const char *path, uint64_t history, unsigned busy_ms)
{
    funcd_store_sqlite_options opts = {FUNCD_STORE_SQLITE_OPTIONS_VERSION, history, busy_ms};
    funcd_store *s = NULL;
    if (funcd_store_sqlite_new(&s, path, &opts) < 0)
        fprintf(stderr, "  open %s: %s\n", path, funcd_error_last()->message);
    return s;
}

static funcd_store *open_store(const char *name, uint64_t history, unsigned busy_ms)
{
    char path[256];
    db_path(path, sizeof(path), name);
    return open_path(path, history, busy_ms);
}

/* A fresh database file per conformance case. */
static funcd_store *make_sqlite(void *payload)
{
    int *n = payload;
    char path[256];
    snprintf(path, sizeof(path), "%s/conformance-%d.db", suitedir, (*n)++);
    return open_path(path, 0, 0);
}

/* Runs `sql` on a connection of its own and returns the first column of the
 * first row as an integer (-1 on error). */
static long long query_int(const char *name, const char *sql)
{
    char path[256];
    sqlite3 *db = NULL;
    sqlite3_stmt *stmt = NULL;
    long long v = -1;
    db_path(path, sizeof(path), name);
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &stmt, NULL) == SQLITE_OK) {
        int rc = sqlite3_step(stmt);
        if (rc == SQLITE_ROW)
            v = sqlite3_column_int64(stmt, 0);
        else if (rc == SQLITE_DONE)
            v = 0;
    }
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    return v;
}

/* "ok" from PRAGMA integrity_check, on a connection of its own. */
static int integrity_ok(const char *name)
{
    char path[256];
    sqlite3 *db = NULL;
    sqlite3_stmt *stmt = NULL;
    int ok = 0;
    db_path(path, sizeof(path), name);
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &stmt, NULL) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW)
        ok = strcmp((const char *)sqlite3_column_text(stmt, 0), "ok") == 0;
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    return ok;
}

static int put_str(funcd_store *s, const char *key, const char *value, uint64_t expected,
                   uint64_t *rev)
{
    return s->put(s, key, value, strlen(value), expected, rev);
}

TEST(conformance)
{
    int n = 0;
    CHECK_INT(funcd_store_conformance_run(make_sqlite, &n, 1), 0);
}

typedef struct counting {
    int n;
    uint64_t first, last;
} counting;

static void count_cb(const funcd_store_event *ev, void *payload)
{
    counting *c = payload;
    if (!c->n++)
        c->first = ev->revision;
    c->last = ev->revision;
}

static int count_kv(const funcd_store_kv *kv, void *payload)
{
    ++*(int *)payload;
    return 0;
}

TEST(reopen_finds_every_key_and_the_revision)
{
    funcd_store *s = open_store("reopen.db", 0, 0);
    char key[32], value[32];
    uint64_t rev = 0;
    CHECK(s != NULL);
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "/re/k%03d", i);
        snprintf(value, sizeof(value), "value %d", i);
        put_str(s, key, value, FUNCD_STORE_ABSENT, &rev);
    }
    s->del(s, "/re/k050", ANY, &rev);
    s->free(s);

    s = open_store("reopen.db", 0, 0);
    CHECK(s != NULL);
    uint64_t reopened_rev = s->revision(s), list_rev = 0;
    int listed = 0, same = 1;
    s->list(s, "/re/", count_kv, &listed, &list_rev);
    for (int i = 0; i < 100; i++) {
        funcd_store_value v = {0};
        snprintf(key, sizeof(key), "/re/k%03d", i);
        snprintf(value, sizeof(value), "value %d", i);
        int rc = s->get(s, key, &v);
        if (i == 50 ? rc != FUNCD_ENOTFOUND : rc != 0 || strcmp(v.value, value) != 0)
            same = 0;
        free(v.value);
    }
    counting c = {0, 0, 0};
    funcd_store_watch *w = NULL;
    int wrc = s->watch(s, "/re/", 0, count_cb, &c, &w); /* the change log survived too */
    if (wrc == 0)
        s->unwatch(s, w);
    uint64_t next = 0;
    put_str(s, "/re/next", "x", ANY, &next);
    s->free(s);
    CHECK_INT(reopened_rev, rev);
    CHECK_INT(list_rev, rev);
    CHECK_INT(listed, 99);
    CHECK(same);
    CHECK_INT(wrc, 0);
    CHECK_INT(c.n, 101);
    CHECK_INT(next, rev + 1);
    CHECK(integrity_ok("reopen.db"));
}

TEST(compacted_history_is_gone)
{
    funcd_store *s = open_store("compact.db", 8, 0);
    funcd_store_watch *w = NULL;
    counting c = {0, 0, 0};
    CHECK(s != NULL);
    for (int i = 0; i < 20; i++)
        s->put(s, "/h/k", "v", 1, ANY, NULL);
    /* At least 8 changes are kept; the log is trimmed in batches, so here
     * revisions 9..20 remain and 8 is the newest one dropped. */
    int gone = s->watch(s, "/h/", 7, count_cb, &c, &w);
    char message[512];
    snprintf(message, sizeof(message), "%s", funcd_error_last()->message);
    int rc = s->watch(s, "/h/", 8, count_cb, &c, &w);
    if (rc == 0)
        s->unwatch(s, w);
    s->free(s);
    CHECK_INT(gone, FUNCD_EGONE);
    CHECK_CONTAINS(message, "compacted");
    CHECK_CONTAINS(message, "list the prefix again");
    CHECK_INT(rc, 0);
    CHECK_INT(c.n, 12);
    CHECK_INT(c.first, 9);
    CHECK_INT(c.last, 20);

    /* Compaction is durable, and the log stays bounded under many writes. */
    s = open_store("compact.db", 8, 0);
    CHECK(s != NULL);
    int gone_again = s->watch(s, "/h/", 7, count_cb, &c, &w);
    if (gone_again == 0)
        s->unwatch(s, w);
    for (int i = 0; i < 500; i++)
        s->put(s, "/h/k", "v", 1, ANY, NULL);
    s->free(s);
    CHECK_INT(gone_again, FUNCD_EGONE);
    long long rows = query_int("compact.db", "SELECT count(*) FROM changes");
    CHECK(rows >= 8 && rows < 16);
}

/* A deleted key under the purge prefix leaves nothing of its values in the
 * log or the files; watches from before the delete that cover it get
 * FUNCD_EGONE, the others replay as before. */
TEST(deleted_secrets_are_purged_from_history)
{
    static const char secret_value[] = "purge-me-7c1d9e";
    funcd_store *s = open_store("purge.db", 0, 0);
    funcd_store_watch *w = NULL;
    counting c = {0, 0, 0};
    CHECK(s != NULL);
    CHECK_INT(funcd__store_sqlite_purge_prefix(s, "/registry/secrets/"), 0);
    uint64_t rev = 0, del_rev = 0;
    s->put(s, "/registry/functions/ns/f", "fn", 2, ANY, NULL);
    for (int i = 0; i < 3; i++)
        s->put(s, "/registry/secrets/ns/db", secret_value, sizeof(secret_value) - 1, ANY, &rev);
    s->put(s, "/registry/secrets/ns/kept", "kept", 4, ANY, NULL);
    int del = s->del(s, "/registry/secrets/ns/db", ANY, &del_rev);
    int gone = s->watch(s, "/registry/", rev, count_cb, &c, &w);
    char message[512];
    snprintf(message, sizeof(message), "%s", funcd_error_last()->message);
    int other = s->watch(s, "/registry/functions/", 0, count_cb, &c, &w);
    if (other == 0)
        s->unwatch(s, w);
    int functions_replayed = c.n;
    int after = s->watch(s, "/registry/", del_rev, count_cb, &c, &w);
    if (after == 0)
        s->unwatch(s, w);
    s->free(s);
    CHECK_INT(del, 0);
    CHECK_INT(gone, FUNCD_EGONE);
    CHECK_CONTAINS(message, "purged");
    CHECK_CONTAINS(message, "list the prefix again");
    CHECK_INT(other, 0);
    CHECK_INT(functions_replayed, 1);
    CHECK_INT(after, 0);
    CHECK_INT(query_int("purge.db", "SELECT count(*) FROM changes WHERE key = "
                                    "'/registry/secrets/ns/db'"), 0);
    CHECK_INT(query_int("purge.db", "SELECT count(*) FROM changes WHERE key = "
                                    "'/registry/secrets/ns/kept'"), 1);
    /* not in any file of the database either */
    static const char *const suffix[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
        char path[300];
        db_path(path, sizeof(path), "purge.db");
        strcat(path, suffix[i]);
        FILE *f = fopen(path, "rb");
        if (!f)
            continue;
        static char buf[1 << 20];
        size_t n = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        if (memmem(buf, n, secret_value, sizeof(secret_value) - 1))
            FAILF("%s still holds the deleted value", path);
    }
    /* the purge survives a reopen */
    s = open_store("purge.db", 0, 0);
    CHECK(s != NULL);
    gone = s->watch(s, "/registry/secrets/", 0, count_cb, &c, &w);
    if (gone == 0)
        s->unwatch(s, w);
    s->free(s);
    CHECK_INT(gone, FUNCD_EGONE);
}

TEST(database_files_are_private)
{
    char path[300];
    umask(022);
    funcd_store *s = open_store("modes.db", 0, 0);
    CHECK(s != NULL);
    s->put(s, "/k", "v", 1, ANY, NULL); /* makes -wal and -shm */
    static const char *const suffix[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
        struct stat sb;
        db_path(path, sizeof(path), "modes.db");
        strcat(path, suffix[i]);
        if (stat(path, &sb) != 0)
            FAILF("%s: %s", path, strerror(errno));
        if ((sb.st_mode & 07777) != 0600)
            FAILF("%s has mode %04o", path, (unsigned)(sb.st_mode & 07777));
    }
    s->free(s);
    /* a database made 0644 by an older funcd is narrowed when opened */
    db_path(path, sizeof(path), "modes.db");
    CHECK(chmod(path, 0644) == 0);
    s = open_store("modes.db", 0, 0);
    CHECK(s != NULL);
    s->free(s);
    struct stat sb;
    CHECK(stat(path, &sb) == 0);
    CHECK_INT(sb.st_mode & 07777, 0600);
}

typedef struct reentrant {
    funcd_store *s;
    int put_rc, get_rc, list_rc, listed;
    funcd_store_watch *nested;
    counting nested_count;
} reentrant;

/* Reads, lists and watches are allowed from a callback; writes are refused. */
static void reentrant_cb(const funcd_store_event *ev, void *payload)
{
    reentrant *r = payload;
    funcd_store_value v = {0};
    r->put_rc = r->s->put(r->s, "/re/other", "x", 1, ANY, NULL);
    r->get_rc = r->s->get(r->s, ev->key, &v);
    free(v.value);
    r->list_rc = r->s->list(r->s, "/re/", count_kv, &r->listed, NULL);
    if (!r->nested) /* a nested replay: runs while the outer one holds its statement */
        r->s->watch(r->s, "/re/", 0, count_cb, &r->nested_count, &r->nested);
}

TEST(callbacks_may_read_and_watch_but_not_write)
{
    funcd_store *s = open_store("reentrant.db", 0, 0);
    funcd_store_watch *w = NULL;
    reentrant r = {s, 0, 0, 0, 0, NULL, {0, 0, 0}};
    CHECK(s != NULL);
    put_str(s, "/re/a", "1", ANY, NULL);
    put_str(s, "/re/b", "2", ANY, NULL);
    int rc = s->watch(s, "/re/", 0, reentrant_cb, &r, &w); /* replays a and b */
    uint64_t rev = 0;
    int put = put_str(s, "/re/c", "3", ANY, &rev);
    uint64_t revision_after = s->revision(s);
    if (rc == 0)
        s->unwatch(s, w);
    if (r.nested)
        s->unwatch(s, r.nested);
    s->free(s);
    CHECK_INT(rc, 0);
    CHECK_INT(put, 0);
    CHECK_INT(r.put_rc, FUNCD_ESTATE);
    CHECK_INT(r.get_rc, 0);
    CHECK_INT(r.list_rc, 0);
    CHECK_INT(r.listed, 2 + 2 + 3);
    CHECK_INT(revision_after, 3);
    CHECK(r.nested != NULL);
    CHECK_INT(r.nested_count.n, 3); /* a and b replayed, then c live, once each */
    CHECK_INT(r.nested_count.last, rev);
}

typedef struct keys_seen {
    char keys[8][16];
    int n;
} keys_seen;

static int collect_kv(const funcd_store_kv *kv, void *payload)
{
    keys_seen *k = payload;
    if (k->n < 8)
        snprintf(k->keys[k->n++], sizeof(k->keys[0]), "%s", kv->key);
    return 0;
}

TEST(prefixes_are_byte_ranges_not_patterns)
{
    funcd_store *s = open_store("prefix.db", 0, 0);
    keys_seen pct = {0}, under = {0}, high = {0};
    CHECK(s != NULL);
    static const char *const keys[] = {"/a%/x", "/ab/x", "/a_/y", "/aX/y", "/\xff\xff/1", "/\xff"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        put_str(s, keys[i], "v", ANY, NULL);
    s->list(s, "/a%", collect_kv, &pct, NULL);
    s->list(s, "/a_", collect_kv, &under, NULL);
    s->list(s, "/\xff", collect_kv, &high, NULL);
    counting c = {0, 0, 0};
    funcd_store_watch *w = NULL;
    int rc = s->watch(s, "/\xff\xff", 0, count_cb, &c, &w);
    if (rc == 0)
        s->unwatch(s, w);
    s->free(s);
    CHECK_INT(pct.n, 1);
    CHECK_STR(pct.keys[0], "/a%/x");
    CHECK_INT(under.n, 1);
    CHECK_STR(under.keys[0], "/a_/y");
    CHECK_INT(high.n, 2);
    CHECK_STR(high.keys[0], "/\xff");
    CHECK_INT(rc, 0);
    CHECK_INT(c.n, 1);
}

TEST(disk_full_gives_enospc_and_keeps_earlier_data)
{
    funcd_store *s = open_store("full.db", 0, 0);
    uint64_t rev = 0;
    CHECK(s != NULL);
    for (int i = 0; i < 10; i++) {
        char key[32];
        snprintf(key, sizeof(key), "/full/k%d", i);
        put_str(s, key, "small", ANY, &rev);
    }
    /* The database may not grow by one page more: a large value needs many. */
    sqlite3 *db = funcd__store_sqlite_db(s);
    int limited = db && sqlite3_exec(db, "PRAGMA max_page_count = 1", NULL, NULL, NULL) == 0;
    size_t big_len = 256 * 1024;
    char *big = calloc(1, big_len);
    int full = s->put(s, "/full/big", big, big_len, ANY, NULL);
    char message[512];
    snprintf(message, sizeof(message), "%s", funcd_error_last()->message);
    uint64_t after_full = s->revision(s);
    funcd_store_value v = {0};
    int big_rc = s->get(s, "/full/big", &v);
    free(v.value);
    int listed = 0;
    s->list(s, "/full/", count_kv, &listed, NULL);
    /* Room again: the next write gets the very next revision. */
    if (db)
        sqlite3_exec(db, "PRAGMA max_page_count = 1073741823", NULL, NULL, NULL);
    uint64_t next = 0;
    int retry = s->put(s, "/full/big", big, big_len, ANY, &next);
    free(big);
    s->free(s);
    CHECK(limited);
    CHECK_INT(full, FUNCD_ENOSPC);
    CHECK_CONTAINS(message, "full.db is full");
    CHECK_CONTAINS(message, "not applied");
    CHECK_INT(after_full, rev);
    CHECK_INT(big_rc, FUNCD_ENOTFOUND);
    CHECK_INT(listed, 10);
    CHECK_INT(retry, 0);
    CHECK_INT(next, rev + 1);
    CHECK_INT(query_int("full.db", "SELECT count(*) FROM changes"), 11);
    CHECK(integrity_ok("full.db"));
}

TEST(a_held_write_lock_times_out)
{
    funcd_store *s = open_store("busy.db", 0, 100);
    char path[256];
    sqlite3 *other = NULL;
    CHECK(s != NULL);
    put_str(s, "/b/k", "1", ANY, NULL);
    db_path(path, sizeof(path), "busy.db");
    int held = sqlite3_open(path, &other) == SQLITE_OK &&
               sqlite3_exec(other, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK;
    int64_t t0 = funcd_mono_ms();
    int busy = put_str(s, "/b/k", "2", ANY, NULL);
    int64_t waited = funcd_mono_ms() - t0;
    char message[512];
    snprintf(message, sizeof(message), "%s", funcd_error_last()->message);
    funcd_store_value v = {0};
    int read_rc = s->get(s, "/b/k", &v); /* WAL: readers are not blocked by the writer */
    free(v.value);
    sqlite3_exec(other, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(other);
    int after = put_str(s, "/b/k", "3", ANY, NULL);
    s->free(s);
    CHECK(held);
    CHECK_INT(busy, FUNCD_ETIMEOUT);
    CHECK_CONTAINS(message, "100 ms");
    CHECK(waited >= 90);
    CHECK_INT(read_rc, 0);
    CHECK_INT(after, 0);
}

/* Writes /<who>/k0..k(n-1); returns the number of failures. */
static int write_many(funcd_store *s, const char *who, int n)
{
    int failures = 0;
    for (int i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof(key), "/%s/k%d", who, i);
        if (put_str(s, key, who, FUNCD_STORE_ABSENT, NULL) < 0)
            failures++;
    }
    return failures;
}

typedef struct rev_set {
    uint64_t max;
    unsigned char *seen;
    int duplicates, listed;
} rev_set;

static int mark_revision(const funcd_store_kv *kv, void *payload)
{
    rev_set *r = payload;
    r->listed++;
    if (kv->revision == 0 || kv->revision > r->max || r->seen[kv->revision]++)
        r->duplicates++;
    return 0;
}

TEST(two_processes_share_one_file)
{
    enum { N = 300 };
    /* Both processes open the new file at once: creating the schema races too.
     * The parent opens only after the fork so no connection crosses it. */
    pid_t pid = fork();
    if (pid == 0) {
        funcd_store *c = open_store("shared.db", 0, 10000);
        int failures = c ? write_many(c, "child", N) : 1;
        if (c)
            c->free(c);
        _exit(failures ? 1 : 0);
    }
    funcd_store *s = open_store("shared.db", 0, 10000);
    int parent_failures = s ? write_many(s, "parent", N) : N;
    int status = 0;
    if (pid > 0)
        waitpid(pid, &status, 0);
    CHECK(s != NULL);
    uint64_t rev = s->revision(s);
    rev_set r = {2 * N, calloc(2 * N + 1, 1), 0, 0};
    if (r.seen)
        s->list(s, "/", mark_revision, &r, NULL);
    free(r.seen);
    s->free(s);
    CHECK(pid > 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_INT(parent_failures, 0);
    CHECK_INT(rev, 2 * N);
    CHECK_INT(r.listed, 2 * N);
    CHECK_INT(r.duplicates, 0);
    CHECK(integrity_ok("shared.db"));
}

/* The child writes forever and reports each acknowledged revision on `fd`. */
static void crash_child(int fd)
{
    funcd_store *s = open_store("crash.db", 0, 0);
    if (!s)
        _exit(1);
    for (uint64_t i = 0;; i++) {
        char key[32], value[64];
        uint64_t rev = 0;
        snprintf(key, sizeof(key), "/crash/k%" PRIu64, i % 64);
        snprintf(value, sizeof(value), "value of write %" PRIu64, i);
        if (put_str(s, key, value, ANY, &rev) < 0 || write(fd, &rev, sizeof(rev)) != sizeof(rev))
            _exit(1);
    }
}

TEST(kill_9_loses_no_acknowledged_write)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        crash_child(fds[1]);
    }
    close(fds[1]);
    uint64_t acked = 0, rev;
    while (pid > 0 && acked < 500 && read(fds[0], &rev, sizeof(rev)) == sizeof(rev))
        acked = rev;
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    while (read(fds[0], &rev, sizeof(rev)) == sizeof(rev)) /* acknowledged before the kill */
        acked = rev;
    close(fds[0]);
    CHECK(pid > 0);
    CHECK(acked >= 500);
    CHECK(integrity_ok("crash.db"));
    funcd_store *s = open_store("crash.db", 0, 0);
    CHECK(s != NULL);
    uint64_t reopened = s->revision(s);
    counting c = {0, 0, 0};
    funcd_store_watch *w = NULL;
    int rc = s->watch(s, "/crash/", 0, count_cb, &c, &w);
    if (rc == 0)
        s->unwatch(s, w);
    s->free(s);
    fprintf(stderr, "  %" PRIu64 " writes acknowledged, %" PRIu64 " found after kill -9\n", acked,
            reopened);
    CHECK(reopened >= acked);
    CHECK_INT(rc, 0);
    CHECK_INT(c.n, reopened);
    CHECK_INT(c.last, reopened);
}

TEST(a_newer_schema_is_refused)
{
    funcd_store *s = open_store("newer.db", 0, 0);
    CHECK(s != NULL);
    s->free(s);
    query_int("newer.db", "PRAGMA user_version = 99");
    s = open_store("newer.db", 0, 0);
    CHECK(s == NULL);
    CHECK_INT(funcd_error_last()->code, FUNCD_EVERSION);
    CHECK_CONTAINS(funcd_error_last()->message, "newer");
    CHECK_CONTAINS(funcd_error_last()->message, "newer.db");
}

TEST(bad_files_are_named_in_the_error)
{
    char path[256];
    funcd_store *s = NULL;
    db_path(path, sizeof(path), "garbage.db");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    char junk[8192];
    memset(junk, 'x', sizeof(junk));
    CHECK(write(fd, junk, sizeof(junk)) == (ssize_t)sizeof(junk));
    close(fd);
    CHECK_INT(funcd_store_sqlite_new(&s, path, NULL), FUNCD_EIO);
    CHECK(s == NULL);
    CHECK_CONTAINS(funcd_error_last()->message, "garbage.db");

    db_path(path, sizeof(path), "no/such/dir/x.db");
    CHECK_INT(funcd_store_sqlite_new(&s, path, NULL), FUNCD_EIO);
    CHECK_CONTAINS(funcd_error_last()->message, "directory must exist");
    CHECK_INT(funcd_store_sqlite_new(NULL, path, NULL), FUNCD_EINVAL);
    CHECK_INT(funcd_store_sqlite_new(&s, NULL, NULL), FUNCD_EINVAL);
}

int main(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof(tmpdir), "%s/funcd-sqlite-XXXXXX", base && base[0] ? base : "/tmp");
    snprintf(suitedir, sizeof(suitedir), "/dev/shm/funcd-sqlite-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    if (!mkdtemp(suitedir))
        snprintf(suitedir, sizeof(suitedir), "%s", tmpdir);
    RUN(conformance);
    RUN(reopen_finds_every_key_and_the_revision);
    RUN(compacted_history_is_gone);
    RUN(deleted_secrets_are_purged_from_history);
    RUN(database_files_are_private);
    RUN(callbacks_may_read_and_watch_but_not_write);
    RUN(prefixes_are_byte_ranges_not_patterns);
    RUN(disk_full_gives_enospc_and_keeps_earlier_data);
    RUN(a_held_write_lock_times_out);
    RUN(two_processes_share_one_file);
    RUN(kill_9_loses_no_acknowledged_write);
    RUN(a_newer_schema_is_refused);
    RUN(bad_files_are_named_in_the_error);
    if (strcmp(suitedir, tmpdir) != 0)
        funcd_remove_tree(suitedir);
    funcd_remove_tree(tmpdir);
    return HARNESS_END();
}
