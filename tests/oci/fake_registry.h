/*
 * A registry played by a test, for what a real one never does: libevent's
 * evhttp on 127.0.0.1, on a thread and a loop of its own, so that a test may
 * block (on a platform's API, on its own client's loop) while it answers.
 *
 *   claims_any  every HEAD of a manifest, whatever the repository and digest,
 *               is answered 200 with a Docker-Content-Digest naming what was
 *               asked for; a GET of one gets bytes that are no such manifest.
 *               The registry of review17 H-1: it claims to hold any image.
 *   otherwise   `manifest` for any manifest of any repository, `config` for
 *               the blob that is its digest, N bytes of 'x' for the blob
 *               that is their digest, N one of `layer_sizes`, and
 *               `layer_bytes` bytes of 'x' for any other blob, whatever its
 *               manifest declares. A GET of the blob `hold` is answered only
 *               once fake_registry_release is called.
 */
#ifndef FUNCD_TESTS_OCI_FAKE_REGISTRY_H
#define FUNCD_TESTS_OCI_FAKE_REGISTRY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

typedef struct fake_registry {
    /* set before fake_registry_start */
    int claims_any;
    const char *manifest, *config;
    size_t layer_bytes;
    size_t layer_sizes[4]; /* 0 ends the list */
    const char *hold;      /* a blob digest, or NULL */
    /* set by fake_registry_start */
    char addr[64];                            /* "127.0.0.1:PORT" */
    char manifest_digest[72], config_digest[72];
    atomic_int heads, manifest_gets, blob_gets; /* requests answered so far */
    atomic_int held;                            /* GETs of `hold` waiting */
    /* private */
    struct event_base *base;
    struct evhttp *http;
    struct event *stop, *hold_check;
    struct evhttp_request *held_req[4];
    atomic_int released;
    int stop_fds[2];
    pthread_t thread;
    int made, running;
} fake_registry;

/* "sha256:<hex>" of `len` bytes. */
void fake_registry_digest(const void *data, size_t len, char out[72]);

/* Listens on a loopback port and answers on a thread of its own; 0 or -1. */
int fake_registry_start(fake_registry *f);

/* "sha256:<hex>" of n bytes of 'x': a layer of `layer_sizes`. */
void fake_registry_layer_digest(size_t n, char out[72]);

/* Answers the GETs of `hold` waiting, and those to come, from now on. */
void fake_registry_release(fake_registry *f);

/* Stops the thread and frees what start made. Safe on a registry not started. */
void fake_registry_stop(fake_registry *f);

#endif
