/*
 * Secrets at rest (issue 11, finding 8), through the real daemon on a data
 * directory: the key file is made 0600 at first start; a Secret's value is
 * in no file of the store, neither as text nor as base64; the files are
 * 0600; a restart reads the Secret back; after a DELETE not even its
 * ciphertext is left in the change log or the files; a key file that does
 * not open the stored Secrets, and a token file others can read, stop the
 * start with a clear message.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../e2e/client.h"
#include "../e2e/env.h"
#include "../harness.h"
#include "daemon.h"
#include "util/misc.h"

#define VALUE "durable-s3cr3t-value-9f2c41"
#define VALUE_B64 "ZHVyYWJsZS1zM2NyM3QtdmFsdWUtOWYyYzQx"
#define SECRET_KEY "/registry/secrets/default/db"

typedef struct secrets_test {
    char dir[256], data[300], log[300], key[320];
    dd_daemon d;
    e2e_http *h;
    e2e_resp r;
} secrets_test;

static int start_with(secrets_test *t, const char *const *extra)
{
    const char *args[40];
    dd_default_args(args, 40, "--data-dir", t->data, extra);
    if (dd_start(&t->d, t->log, args) < 0)
        return -1;
    e2e_http_free(t->h);
    t->h = e2e_http_new(t->d.cp);
    return t->h ? 0 : -1;
}

/* 1 when any of DIR/store.db* holds `needle`. */
static int store_files_hold(const char *data, const void *needle, size_t len, char *which,
                            size_t which_len)
{
    static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
        char path[400];
        snprintf(path, sizeof(path), "%s/store.db%s", data, suffix[i]);
        FILE *f = fopen(path, "rb");
        if (!f)
            continue;
        size_t cap = 1 << 16, n = 0, r;
        char *buf = malloc(cap);
        while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
            n += r;
            if (n == cap) {
                char *grown = realloc(buf, cap *= 2);
                if (!grown)
                    break;
                buf = grown;
            }
        }
        fclose(f);
        int found = buf && memmem(buf, n, needle, len) != NULL;
        free(buf);
        if (found) {
            snprintf(which, which_len, "%s", path);
            return 1;
        }
    }
    return 0;
}

/* Every DIR/store.db* that exists has mode 0600; the first that does not in `which`. */
static int store_files_private(const char *data, char *which, size_t which_len)
{
    static const char *const suffix[] = {"", "-wal", "-shm"};
    for (size_t i = 0; i < 3; i++) {
        char path[400];
        struct stat sb;
        snprintf(path, sizeof(path), "%s/store.db%s", data, suffix[i]);
        if (stat(path, &sb) == 0 && (sb.st_mode & 07777) != 0600) {
            snprintf(which, which_len, "%s (mode %04o)", path, (unsigned)(sb.st_mode & 07777));
            return 0;
        }
    }
    return 1;
}

/* The stored bytes of `key` in the kv table (read-only connection). */
static int stored_value(const char *data, const char *key, unsigned char *out, size_t max,
                        size_t *len)
{
    char path[400];
    sqlite3 *db = NULL;
    sqlite3_stmt *stmt = NULL;
    int rc = -1;
    snprintf(path, sizeof(path), "%s/store.db", data);
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, "SELECT value FROM kv WHERE key = ?1", -1, &stmt, NULL) ==
            SQLITE_OK) {
        sqlite3_bind_text(stmt, 1, key, -1, SQLITE_STATIC);
        if (sqlite3_step(stmt) == SQLITE_ROW) {
            size_t n = (size_t)sqlite3_column_bytes(stmt, 0);
            *len = n < max ? n : max;
            memcpy(out, sqlite3_column_blob(stmt, 0), *len);
            rc = 0;
        }
    }
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    return rc;
}

static long long count_changes(const char *data, const char *key)
{
    char path[400];
    sqlite3 *db = NULL;
    sqlite3_stmt *stmt = NULL;
    long long n = -1;
    snprintf(path, sizeof(path), "%s/store.db", data);
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, "SELECT count(*) FROM changes WHERE key = ?1", -1, &stmt, NULL) ==
            SQLITE_OK) {
        sqlite3_bind_text(stmt, 1, key, -1, SQLITE_STATIC);
        if (sqlite3_step(stmt) == SQLITE_ROW)
            n = sqlite3_column_int64(stmt, 0);
    }
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    return n;
}

static void secrets_body(secrets_test *t)
{
    char which[500];
    umask(022); /* what a careless service manager would leave */
    CHECK(start_with(t, NULL) == 0);
    /* the key file, made at first start */
    struct stat sb;
    if (stat(t->key, &sb) != 0)
        FAILF("no key file %s after the first start: %s", t->key, strerror(errno));
    CHECK_INT(sb.st_mode & 07777, 0600);
    CHECK_INT(sb.st_size, 32);

    static const char body[] = "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Secret\",\"metadata\":"
                               "{\"name\":\"db\"},\"stringData\":{\"password\":\"" VALUE "\"}}";
    CHECK_INT(e2e_http_do(t->h, "POST", DD_NS "/secrets", DD_TOKEN, body, &t->r), 201);
    CHECK_STR(jstr(t->r.json, "data.password"), VALUE_B64);
    /* an update: a second version in the history */
    static const char body2[] = "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Secret\",\"metadata\":"
                                "{\"name\":\"db\"},\"stringData\":{\"password\":\"" VALUE "\","
                                "\"user\":\"" VALUE "-user\"}}";
    CHECK_INT(e2e_http_do(t->h, "PUT", DD_NS "/secrets/db", DD_TOKEN, body2, &t->r), 200);
    if (store_files_hold(t->data, VALUE, strlen(VALUE), which, sizeof(which)))
        FAILF("%s holds the Secret's value in clear", which);
    if (store_files_hold(t->data, VALUE_B64, strlen(VALUE_B64), which, sizeof(which)))
        FAILF("%s holds the Secret's value in base64", which);
    if (!store_files_private(t->data, which, sizeof(which)))
        FAILF("%s is not private", which);

    /* a restart reads it back */
    dd_kill9(&t->d);
    CHECK(start_with(t, NULL) == 0);
    CHECK_INT(e2e_http_do(t->h, "GET", DD_NS "/secrets/db", DD_TOKEN, NULL, &t->r), 200);
    CHECK_STR(jstr(t->r.json, "data.password"), VALUE_B64);

    /* DELETE: not even the ciphertext survives, in the log or the files */
    unsigned char sealed[4096];
    size_t sealed_len = 0;
    CHECK(stored_value(t->data, SECRET_KEY, sealed, sizeof(sealed), &sealed_len) == 0);
    CHECK(sealed_len > 64);
    CHECK(count_changes(t->data, SECRET_KEY) >= 1);
    CHECK_INT(e2e_http_do(t->h, "DELETE", DD_NS "/secrets/db", DD_TOKEN, NULL, &t->r), 200);
    CHECK_INT(count_changes(t->data, SECRET_KEY), 0);
    /* 40 bytes from the middle of the ciphertext: nonce-random, so unique */
    const unsigned char *probe = sealed + sealed_len / 2 - 20;
    if (store_files_hold(t->data, probe, 40, which, sizeof(which)))
        FAILF("%s still holds the deleted Secret's ciphertext", which);
    dd_kill9(&t->d);
    if (store_files_hold(t->data, probe, 40, which, sizeof(which)))
        FAILF("%s still holds the deleted Secret's ciphertext after a kill -9", which);
}

TEST(secrets_are_encrypted_at_rest_and_purged_on_delete)
{
    secrets_test t = {.r = E2E_RESP_INIT};
    if (dd_tempdir(t.dir, sizeof(t.dir), "secrets") < 0)
        FAILF("mkdtemp: %s", strerror(errno));
    snprintf(t.data, sizeof(t.data), "%s/data", t.dir);
    snprintf(t.log, sizeof(t.log), "%s/funcd.log", t.dir);
    snprintf(t.key, sizeof(t.key), "%s/encryption.key", t.data);
    secrets_body(&t);
    if (harness_failed_now)
        dd_dump_log(&t.d);
    dd_kill9(&t.d);
    e2e_http_free(t.h);
    e2e_resp_free(&t.r);
    funcd_remove_tree(t.dir);
}

/* A key file that does not open the stored Secrets stops the start. */
TEST(another_key_file_is_refused)
{
    secrets_test t = {.r = E2E_RESP_INIT};
    if (dd_tempdir(t.dir, sizeof(t.dir), "secrets-key") < 0)
        FAILF("mkdtemp: %s", strerror(errno));
    snprintf(t.data, sizeof(t.data), "%s/data", t.dir);
    snprintf(t.log, sizeof(t.log), "%s/funcd.log", t.dir);
    int ok = start_with(&t, NULL) == 0 &&
             e2e_http_do(t.h, "POST", DD_NS "/secrets", DD_TOKEN,
                         "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Secret\",\"metadata\":"
                         "{\"name\":\"k\"},\"stringData\":{\"a\":\"b\"}}",
                         &t.r) == 201;
    dd_kill9(&t.d);
    char other[400];
    snprintf(other, sizeof(other), "%s/other.key", t.dir);
    const char *extra[] = {"--encryption-key-file", other, NULL};
    const char *args[40];
    dd_default_args(args, 40, "--data-dir", t.data, extra);
    int code = ok ? dd_run(t.log, args, 20000) : -2;
    int says = dd_log_has(t.log, "does not decrypt");
    struct stat sb;
    int made = stat(other, &sb) == 0 && (sb.st_mode & 07777) == 0600;
    e2e_http_free(t.h);
    e2e_resp_free(&t.r);
    funcd_remove_tree(t.dir);
    CHECK(ok);
    CHECK(code > 0);
    CHECK(says);
    CHECK(made);
}

static int write_mode(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    int rc = n == (ssize_t)strlen(text) && fchmod(fd, mode) == 0 ? 0 : -1;
    close(fd);
    return rc;
}

/* A token file group or others can read: funcd does not start, and says why. */
TEST(token_file_readable_by_others_stops_the_start)
{
    secrets_test t = {.r = E2E_RESP_INIT};
    if (dd_tempdir(t.dir, sizeof(t.dir), "secrets-tok") < 0)
        FAILF("mkdtemp: %s", strerror(errno));
    char tokens[400];
    snprintf(tokens, sizeof(tokens), "%s/tokens", t.dir);
    snprintf(t.data, sizeof(t.data), "%s/data", t.dir);
    snprintf(t.log, sizeof(t.log), "%s/funcd.log", t.dir);
    CHECK(write_mode(tokens, "tok-admin admin\n", 0644) == 0);
    const char *extra[] = {"--token-file", tokens, NULL};
    const char *args[40];
    dd_default_args(args, 40, "--memory", NULL, extra);
    int code = dd_run(t.log, args, 20000);
    int says = dd_log_has(t.log, "chmod 600") && dd_log_has(t.log, tokens);
    /* 0600: it starts, and the token works */
    int started = chmod(tokens, 0600) == 0 && start_with(&t, extra) == 0;
    (void)started;
    long status = 0;
    if (t.d.pid > 0)
        status = e2e_http_do(t.h, "GET", "/apis/funcd.dev/v1/secrets", "tok-admin", NULL, &t.r);
    dd_kill9(&t.d);
    e2e_http_free(t.h);
    e2e_resp_free(&t.r);
    funcd_remove_tree(t.dir);
    CHECK(code > 0);
    CHECK(says);
    CHECK_INT(status, 200);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    e2e_client_global_init();
    RUN(secrets_are_encrypted_at_rest_and_purged_on_delete);
    RUN(another_key_file_is_refused);
    RUN(token_file_readable_by_others_stops_the_start);
    e2e_client_global_cleanup();
    return HARNESS_END();
}
