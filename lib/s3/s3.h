/*
 * The S3 gateway (docs/s3.md): an S3-protocol server over the blob port.
 * Each Function with spec.bindings.blob has an access key derived from the
 * node's master secret; a request signed with it (SigV4) may reach the
 * buckets and prefixes its bindings name. Objects live in the blob port
 * under "s3/{namespace}/{bucket}/{key}".
 *
 * Threads: one acceptor thread over every listener (--s3-listen and the
 * per-worker ones), one thread per connection with blocking I/O; the blob
 * and store ports are called from those threads.
 */
#ifndef FUNCD_S3_S3_H
#define FUNCD_S3_S3_H

#include <stddef.h>
#include <stdint.h>

#include "funcd/sys/blob.h"
#include "funcd/sys/store.h"
#include "util/log.h"

struct cJSON;

#define FUNCD_S3_MAX_UPLOAD_DEFAULT (1ull << 30)
#define FUNCD_S3_REGION "funcd"
#define FUNCD_S3_SECRET_FILE "s3-master-secret" /* in the state directory */

typedef struct funcd_s3 funcd_s3;

typedef struct funcd_s3_config {
    funcd_store *store;
    funcd_blob *blob;
    const funcd_logger *logger;
    const char *listen_addr;        /* the host listener, or NULL */
    const char *master_secret_file; /* NULL: state_dir/s3-master-secret, or in memory */
    const char *state_dir;          /* NULL: the master secret is random and kept in memory */
    uint64_t max_upload;            /* 0: FUNCD_S3_MAX_UPLOAD_DEFAULT */
} funcd_s3_config;

/* Starts the gateway (and the host listener when cfg->listen_addr is set;
 * its bound address into `bound`). */
int funcd_s3_new(funcd_s3 **out, const funcd_s3_config *cfg, char *bound, size_t bound_len);
/* Stops accepting, ends open connections and waits for their threads. */
void funcd_s3_free(funcd_s3 *s);

/* The host listener's address ("" if none). */
const char *funcd_s3_addr(const funcd_s3 *s);

/* The access key of Function `fn` (the stored object): id
 * "{ns}.{name}.{tag}" and its secret, both derived with HMAC from the master
 * secret, the Function's namespace, name, metadata.uid and
 * spec.bindings.blobKeyVersion, so a Function deleted and created again, or
 * given another blobKeyVersion, has a new key and the old one is refused. */
int funcd_s3_credentials(const funcd_s3 *s, const struct cJSON *fn, char akid[160],
                         char secret[48]);

/* Serves `fd` (a listening socket, now the gateway's) for Function ns/name
 * only. Returns a handle for funcd_s3_unlisten, or NULL (fd closed). */
void *funcd_s3_listen_fd(funcd_s3 *s, int fd, const char *ns, const char *name);
void funcd_s3_unlisten(funcd_s3 *s, void *handle);

/* The gateway as serving's plug-in (netsvc.c): 127.0.0.1:9000 in each
 * sandboxed worker of a Function with spec.bindings.blob, and the AWS_*
 * variables. Free after serving. */
struct funcd_netsvc;
struct funcd_netsvc *funcd_s3_netsvc_new(funcd_s3 *s3);
void funcd_s3_netsvc_free(struct funcd_netsvc *svc);

#endif
