/*
 * One pull through a funcd_oci_client, waited for on the test's own loop:
 * what the client tests against registries they play share.
 */
#ifndef FUNCD_TESTS_OCI_PULL_H
#define FUNCD_TESTS_OCI_PULL_H

#include <event2/event.h>
#include <stdio.h>
#include <string.h>

#include "funcd/sys/error.h"
#include "oci/oci.h"
#include "util/misc.h"

typedef struct result {
    int finished, rc;
    char msg[512];
    funcd_oci_image *img;
} result;

static void on_done(int rc, const char *message, funcd_oci_image *image, void *payload)
{
    result *r = payload;
    r->finished = 1;
    r->rc = rc;
    snprintf(r->msg, sizeof(r->msg), "%s", message ? message : "");
    r->img = image;
}

/* A client with a cache of its own under `work` that may reach the
 * `insecure` registries (NULL-terminated) over plain HTTP. */
static inline funcd_oci_client *new_client_of(struct event_base *loop, const char *work,
                                       const char *const *insecure)
{
    static int seq;
    char cache[400];
    snprintf(cache, sizeof(cache), "%s/c%d", work, ++seq);
    funcd_oci_client_options o = {.cache_dir = cache, .insecure = insecure};
    funcd_oci_client *c;
    return funcd_oci_client_new(&c, loop, &o) == 0 ? c : NULL;
}

/* Pulls `ref` (with `secret`, may be NULL) for a caller that has the image
 * `have` (funcd_oci_pull_if_changed; NULL: none) and runs `loop` until done
 * (20 s at most); the image stays r->img's. */
static inline void pull_if_changed_on(struct event_base *loop, funcd_oci_client *c,
                                      const char *ref, const char *have, const char *secret,
                                      result *r)
{
    memset(r, 0, sizeof(*r));
    if (funcd_oci_pull_if_changed(c, ref, have, secret, NULL, on_done, r, NULL) < 0) {
        r->rc = funcd_error_last()->code;
        snprintf(r->msg, sizeof(r->msg), "%s", funcd_error_last()->message);
        return;
    }
    int64_t end = funcd_mono_ms() + 20000;
    while (!r->finished && funcd_mono_ms() < end)
        event_base_loop(loop, EVLOOP_ONCE);
    if (!r->finished)
        snprintf(r->msg, sizeof(r->msg), "(still pulling)");
}

/* The same, a whole pull (funcd_oci_pull). */
static inline void pull_on(struct event_base *loop, funcd_oci_client *c, const char *ref,
                           const char *secret, result *r)
{
    pull_if_changed_on(loop, c, ref, NULL, secret, r);
}

#endif
