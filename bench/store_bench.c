/*
 * Store benchmark: N creates into the memory store and into the sqlite store
 * (each one its own fsync'd transaction), then the restart cost of the sqlite
 * store: reopen the file and list every key.
 *
 *   store-bench [DIR [N]]    DIR holds the database (default $TMPDIR or /tmp),
 *                            N creates (default 10000)
 *
 * The figures depend on the disk under DIR: its fsync latency bounds the
 * sqlite create rate.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "funcd/sys/store.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A Function-sized value: what the control plane stores per object. */
static const char value[] =
    "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"namespace\":"
    "\"default\",\"name\":\"fn\",\"uid\":\"8a4c6d1e-3f0b-4c2a-9e57-1d2b3c4d5e6f\"},\"spec\":"
    "{\"runtime\":\"python3\",\"handler\":\"main.handler\",\"source\":{\"path\":\"/srv/fn\"},"
    "\"scaling\":{\"minReplicas\":0,\"maxReplicas\":10,\"concurrency\":10}}}";

/* Seconds for n creates, or a negative number on failure. */
static double creates(funcd_store *s, int n)
{
    char key[64];
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "/functions/ns%d/fn%06d", i % 16, i);
        if (s->put(s, key, value, sizeof(value) - 1, FUNCD_STORE_ABSENT, NULL) < 0) {
            fprintf(stderr, "store-bench: %s put %s: %s\n", s->name, key,
                    funcd_error_last()->message);
            return -1;
        }
    }
    return now_s() - t0;
}

static int count_kv(const funcd_store_kv *kv, void *payload)
{
    (void)kv;
    ++*(int *)payload;
    return 0;
}

static void remove_db(const char *dir, const char *path)
{
    static const char *const suffixes[] = {"", "-wal", "-shm"};
    char file[4200];
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        snprintf(file, sizeof(file), "%s%s", path, suffixes[i]);
        unlink(file);
    }
    rmdir(dir);
}

/* Reopens the database and lists every key: what a restart of funcd costs. */
static int restart(const char *path, int n)
{
    funcd_store *s = NULL;
    int listed = 0;
    double t0 = now_s();
    if (funcd_store_sqlite_new(&s, path, NULL) < 0 ||
        s->list(s, "/", count_kv, &listed, NULL) < 0) {
        fprintf(stderr, "store-bench: reopen: %s\n", funcd_error_last()->message);
        if (s)
            s->free(s);
        return 1;
    }
    double t = now_s() - t0;
    s->free(s);
    printf("sqlite reopen + list of %d keys: %.1f ms\n", listed, t * 1e3);
    return listed == n ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *base = argc > 1 ? argv[1] : getenv("TMPDIR");
    int n = argc > 2 ? atoi(argv[2]) : 10000;
    char dir[4096], path[4128];
    snprintf(dir, sizeof(dir), "%s/funcd-store-bench-XXXXXX", base && base[0] ? base : "/tmp");
    if (n <= 0 || !mkdtemp(dir)) {
        fprintf(stderr, "usage: store-bench [DIR [N]] (DIR must exist and be writable)\n");
        return 2;
    }
    snprintf(path, sizeof(path), "%s/store.db", dir);

    funcd_store *mem = NULL, *sql = NULL;
    int rc = 1;
    if (funcd_store_memory_new(&mem, 0) < 0 || funcd_store_sqlite_new(&sql, path, NULL) < 0) {
        fprintf(stderr, "store-bench: %s\n", funcd_error_last()->message);
        goto out;
    }
    double t_mem = creates(mem, n), t_sql = creates(sql, n);
    if (t_mem < 0 || t_sql < 0)
        goto out;
    sql->free(sql);
    sql = NULL;
    printf("memory: %d creates in %.3f s: %.0f creates/s\n", n, t_mem, n / t_mem);
    printf("sqlite: %d creates in %.3f s: %.0f creates/s (%.1f us each, one fsync'd "
           "transaction per create)\n",
           n, t_sql, n / t_sql, t_sql / n * 1e6);
    printf("memory/sqlite: %.0fx\n", t_sql / t_mem);
    rc = restart(path, n);
out:
    if (mem)
        mem->free(mem);
    if (sql)
        sql->free(sql);
    remove_db(dir, path);
    return rc;
}
