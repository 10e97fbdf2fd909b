/*
 * oci-pull: pulls one image with funcd's OCI client and prints how long it
 * took, then pulls it again (tag: one manifest request; blobs from the
 * cache) and prints that too. Driven by bench/pull.sh.
 *
 *   oci-pull [--insecure HOST:PORT] [--certs-dir DIR] CACHE_DIR REF
 */
#include <event2/event.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "funcd/common.h"
#include "oci/oci.h"

typedef struct result {
    int finished, rc;
    char msg[512];
} result;

static void on_done(int rc, const char *message, funcd_oci_image *image, void *payload)
{
    result *r = payload;
    r->finished = 1;
    r->rc = rc;
    snprintf(r->msg, sizeof(r->msg), "%s", message ? message : "");
    funcd_oci_image_free(image);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int pull_once(struct event_base *loop, funcd_oci_client *c, const char *ref, double *ms)
{
    result r = {0};
    double t0 = now_ms();
    if (funcd_oci_pull(c, ref, NULL, NULL, on_done, &r, NULL) < 0) {
        fprintf(stderr, "oci-pull: %s\n", funcd_error_last()->message);
        return -1;
    }
    while (!r.finished)
        event_base_loop(loop, EVLOOP_ONCE);
    *ms = now_ms() - t0;
    if (r.rc < 0)
        fprintf(stderr, "oci-pull: %s\n", r.msg);
    return r.rc;
}

int main(int argc, char **argv)
{
    const char *insecure[2] = {NULL, NULL}, *certs = NULL;
    int i = 1;
    for (; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        if (strcmp(argv[i], "--insecure") == 0)
            insecure[0] = argv[i + 1];
        else if (strcmp(argv[i], "--certs-dir") == 0)
            certs = argv[i + 1];
    }
    if (argc - i != 2) {
        fprintf(stderr, "usage: oci-pull [--insecure HOST:PORT] [--certs-dir DIR] CACHE_DIR REF\n");
        return 2;
    }
    struct event_base *loop = event_base_new();
    funcd_oci_client_options o = {.cache_dir = argv[i], .certs_dir = certs,
                                  .insecure = insecure[0] ? insecure : NULL};
    funcd_oci_client *c;
    if (funcd_oci_client_new(&c, loop, &o) < 0) {
        fprintf(stderr, "oci-pull: %s\n", funcd_error_last()->message);
        return 1;
    }
    double first, second;
    int rc = pull_once(loop, c, argv[i + 1], &first);
    if (rc == 0)
        rc = pull_once(loop, c, argv[i + 1], &second);
    const funcd_oci_stats *st = funcd_oci_client_stats(c);
    if (rc == 0)
        printf("pull_ms=%.1f cached_ms=%.1f bytes=%llu transfers=%llu\n", first, second,
               (unsigned long long)st->bytes_downloaded, (unsigned long long)st->blob_transfers);
    funcd_oci_client_free(c);
    event_base_free(loop);
    return rc == 0 ? 0 : 1;
}
