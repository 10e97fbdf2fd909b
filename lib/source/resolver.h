/*
 * Source resolver: turns spec.source.image and spec.source.git into a
 * directory a worker can run from, without ever blocking the platform loop.
 *
 * An image is pulled (lib/oci, on the loop), its layers extracted into a
 * rootfs per manifest digest (lib/oci/unpack.h, on a thread); a git source is
 * fetched and its commit's tree written once (lib/source/git.h, on a
 * thread). Until a result exists, resolve answers "pending"; when it
 * arrives, every function waiting on it is named to `changed` so the
 * controller reconciles it again. Tags and branches are resolved again on
 * an interval, and when a function is re-applied; a new digest or commit
 * is announced the same way, and the function redeploys.
 *
 * Image metadata (digest, entrypoint, cmd, env, layers) and tag → digest
 * resolutions are kept in the store under /images/ and /imagetags/, so a
 * restart within the refresh interval reaches no registry.
 *
 * Threads: everything runs on the platform loop, except
 * funcd_sources_list_images, funcd_sources_pull_start and
 * funcd_sources_pull_get (any thread).
 */
#ifndef FUNCD_SOURCE_RESOLVER_H
#define FUNCD_SOURCE_RESOLVER_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "funcd/funcd.h"
#include "util/buf.h"
#include "util/log.h"

struct event_base;
typedef struct funcd_sources funcd_sources;

typedef struct funcd_sources_config {
    struct event_base *loop;
    funcd_store *store;    /* image metadata; pull secrets are read from it */
    const char *cache_dir; /* images/ (blobs, rootfs) and git/ go below it */
    const char *auth_file, *certs_dir;
    const char *const *insecure;
    const char *const *allowed; /* the operator's registry allow-list, or NULL */
    const char *os, *arch;
    uint64_t image_cache_bytes; /* 0: 4 GiB */
    uint64_t image_blob_cache_bytes; /* the blobs under images/blobs; 0: no cap */
    uint64_t tag_refresh_ms;    /* 0: 5 min */
    uint64_t git_poll_ms;       /* 0: 1 min */
    const funcd_logger *logger;
    void (*changed)(const char *ns, const char *name, void *payload);
    void *changed_payload;
    /* Whether this node polls tags and branches now (the cluster's leader);
     * NULL: always. The others take the poller's resolutions from the
     * store (/imagetags/, /gitrefs/). */
    int (*polls)(void *payload);
    void *polls_payload;
    const char *node; /* named in /gitrefs/ records; may be NULL (copied) */
} funcd_sources_config;

/* Where and how a resolved source runs. */
typedef struct funcd_source_result {
    int is_image;
    char dir[1024];      /* git: the code directory; image: the rootfs */
    char resolved[80];   /* "sha256:<hex>" of the image manifest, or the git commit */
    char **entrypoint;   /* image config (NULL-terminated, or NULL) */
    char **cmd;
    char **env;
    char *working_dir;
    char *user;
} funcd_source_result;

void funcd_source_result_clear(funcd_source_result *r);

int funcd_sources_new(funcd_sources **out, const funcd_sources_config *cfg);
void funcd_sources_free(funcd_sources *s);

enum { FUNCD_SOURCE_READY = 0, FUNCD_SOURCE_PENDING = 1 };

/*
 * Resolves the Function `ns/name`'s spec.source (image or git). Returns
 * FUNCD_SOURCE_READY with `out` filled, FUNCD_SOURCE_PENDING (reason and
 * message say what it waits for; `changed` will name the function), or a
 * negative code with reason and message saying what failed. `user_write`:
 * the object was written by a user since the last call (a re-apply), so a
 * tag or branch is resolved again.
 */
int funcd_sources_resolve(funcd_sources *s, const char *ns, const char *name, const cJSON *spec,
                          int user_write, funcd_source_result *out, char *reason,
                          size_t reason_len, char *message, size_t message_len);

/* The function no longer uses its source (deleted, or moved to another). */
void funcd_sources_forget(funcd_sources *s, const char *ns, const char *name);

/* For other users of images (the function runner's workers): READY with
 * `out` filled, a negative code with `message`, or PENDING, and then
 * cb(payload) runs once on the loop when the image is ready or failed
 * (call again then), unless funcd_sources_cancel(s, payload) came first. */
typedef void (*funcd_sources_cb)(void *payload);
int funcd_sources_image(funcd_sources *s, const char *ns, const char *ref,
                        funcd_source_result *out, char *message, size_t message_len,
                        funcd_sources_cb cb, void *payload);
void funcd_sources_cancel(funcd_sources *s, void *payload);

/* ---- the images API (any thread) ------------------------------------------ */

/* Appends {"items":[...]} of the image metadata cache to `out`: every image
 * when `visible` is NULL, else those of which a namespace for which
 * visible(ns, payload) is 1 pulled or runs the image. */
int funcd_sources_list_images(funcd_sources *s, int (*visible)(const char *ns, void *payload),
                              void *payload, funcd_buf *out);

typedef struct funcd_pull_state {
    int done;            /* 1: finished (ok or failed) */
    int failed;
    uint64_t bytes_done, bytes_total;
    unsigned layers_done, layers_total;
    char digest[80];
    char message[512];
} funcd_pull_state;

/* 1 when `ref` parses and names a registry pulls may go to; else 0 with
 * `why` naming the rule (funcd_oci_registry_allowed). */
int funcd_sources_registry_allowed(funcd_sources *s, const char *ref, char *why, size_t n);

/* Starts pulling `ref` (with the pull secrets `secrets` of namespace `ns`,
 * NULL-terminated, may be NULL); writes an id to poll with. */
int funcd_sources_pull_start(funcd_sources *s, const char *ns, const char *ref,
                             const char *const *secrets, char id[40]);
/* FUNCD_ENOTFOUND for an unknown (or long finished) id, or one of another
 * namespace than `ns`. */
int funcd_sources_pull_get(funcd_sources *s, const char *ns, const char *id,
                           funcd_pull_state *out);
/* Calls `visit` (under the resolver's lock: format, do not call back) for
 * each pull of namespace `ns`, newest first. */
void funcd_sources_pull_list(funcd_sources *s, const char *ns,
                             void (*visit)(const char *id, const char *ref,
                                           const funcd_pull_state *st, void *payload),
                             void *payload);

/* The typed contract ({input, output} JSON Schemas) that the image of
 * manifest `digest` declares in its config label dev.funcd.contract, as
 * recorded in the store (/images/) when a node pulled it: a new object, or
 * NULL (not pulled yet, no label, or a label that is not a JSON object).
 * Any thread. */
cJSON *funcd_sources_image_contract(funcd_store *store, const char *digest);

#endif
