/*
 * The peer of bench/s3.sh: one object of SIZE bytes written and read
 * directly through the file blob (funcd_blob_file_new) in DIR, ROUNDS times;
 * prints each round's put and get time in seconds.
 *
 *   s3-blob DIR SIZE ROUNDS
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "funcd/sys/blob.h"
#include "funcd/sys/error.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: s3-blob DIR SIZE ROUNDS\n");
        return 2;
    }
    size_t size = strtoull(argv[2], NULL, 10);
    int rounds = atoi(argv[3]);
    funcd_blob *b;
    if (funcd_blob_file_new(&b, argv[1]) < 0) {
        fprintf(stderr, "s3-blob: %s\n", funcd_error_last()->message);
        return 1;
    }
    char *data = malloc(size);
    if (!data)
        return 1;
    for (size_t i = 0; i < size; i++)
        data[i] = (char)(i * 2654435761u >> 13);
    int rc = 0;
    for (int r = 0; r < rounds && rc == 0; r++) {
        double t0 = now();
        rc = b->put(b, "bench/direct", data, size);
        double t1 = now();
        void *out = NULL;
        size_t n = 0;
        if (rc == 0)
            rc = b->get(b, "bench/direct", 0, FUNCD_BLOB_TO_END, &out, &n);
        double t2 = now();
        if (rc == 0 && (n != size || memcmp(out, data, size) != 0))
            rc = -1;
        free(out);
        printf("%.6f %.6f\n", t1 - t0, t2 - t1);
    }
    if (rc < 0)
        fprintf(stderr, "s3-blob: %s\n", funcd_error_last()->message);
    b->del(b, "bench/direct");
    b->free(b);
    free(data);
    return rc < 0;
}
