/*
 * Log ingest: lines/s through funcd_logstore_append (formatted as JSON
 * records, sealed into blob objects) on the memory blob and on the file
 * blob, against the peer: the same raw lines fwrite()n to one file.
 * `meson test --benchmark log-ingest` or run it: log-ingest [LINES].
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "funcd/sys/blob.h"
#include "logstore/logstore.h"
#include "util/misc.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void make_line(char *out, size_t cap, long i)
{
    if (i % 10 == 0) /* one line in ten structured, as a JSON logger writes them */
        snprintf(out, cap, "{\"level\":\"info\",\"msg\":\"handled request %ld\",\"ms\":%ld}", i,
                 i % 97);
    else
        snprintf(out, cap, "GET /api/items/%ld 200 in %ld ms from 127.0.0.1", i, i % 97);
}

static double ingest(funcd_blob *blob, long lines)
{
    funcd_logstore_options o = {0, 1u << 20, 0}; /* 1 MiB segments */
    funcd_logstore *ls = NULL;
    if (funcd_logstore_new(&ls, blob, &o) < 0) {
        fprintf(stderr, "%s\n", funcd_error_last()->message);
        exit(1);
    }
    char line[160];
    int64_t t0 = funcd_now_ms();
    double start = now_s();
    for (long i = 0; i < lines; i++) {
        make_line(line, sizeof(line), i);
        funcd_logstore_record r = {t0 + i / 100, "default", "bench", "bench-1",
                                   "6f1c1e9e-2d0b-4c9e-9d1e-1c0f2a3b4c5d", 1 + (i % 7 == 0),
                                   line, strlen(line)};
        funcd_logstore_append(ls, &r);
    }
    funcd_logstore_free(ls); /* seals the last segment: part of the cost */
    return now_s() - start;
}

static double peer_fwrite(const char *path, long lines)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    char line[160];
    double start = now_s();
    for (long i = 0; i < lines; i++) {
        make_line(line, sizeof(line), i);
        fwrite(line, 1, strlen(line), f);
        fputc('\n', f);
    }
    fflush(f);
    fsync(fileno(f));
    fclose(f);
    return now_s() - start;
}

static int sum_size(const char *key, const funcd_blob_stat *st, void *payload)
{
    *(uint64_t *)payload += st->size;
    return 0;
}

static void report(const char *what, long lines, double secs, funcd_blob *b)
{
    uint64_t stored = 0;
    if (b)
        b->list(b, "logs/", sum_size, &stored);
    printf("%-28s %9.0f lines/s  (%ld lines in %.3f s%s", what, lines / secs, lines, secs,
           b ? "" : ")\n");
    if (b)
        printf(", %.1f MiB stored)\n", stored / 1048576.0);
}

int main(int argc, char **argv)
{
    long lines = argc > 1 ? strtol(argv[1], NULL, 10) : 300000;
    char dir[] = "/tmp/funcd-log-ingest-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    funcd_blob *mem = NULL, *file = NULL;
    funcd_blob_memory_new(&mem);
    report("logstore -> memory blob", lines, ingest(mem, lines), mem);
    char fdir[300], peer[300];
    snprintf(fdir, sizeof(fdir), "%s/blob", dir);
    if (funcd_blob_file_new(&file, fdir) == 0)
        report("logstore -> file blob", lines, ingest(file, lines), file);
    snprintf(peer, sizeof(peer), "%s/peer.log", dir);
    report("peer: fwrite raw lines", lines, peer_fwrite(peer, lines), NULL);
    mem->free(mem);
    if (file)
        file->free(file);
    funcd_remove_tree(dir);
    return 0;
}
