/*
 * The OCI distribution client: image references, manifests and configs,
 * registry auth, and asynchronous pulls on the platform's libevent loop
 * (libcurl multi; docs/adr/0014-oci-client.md).
 *
 * Threading: a client and its pulls belong to the loop they were created
 * on; call them only from that loop's thread. The parse functions are pure
 * and thread-safe.
 */
#ifndef FUNCD_OCI_OCI_H
#define FUNCD_OCI_OCI_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct funcd_logger;

/* ---- references ----------------------------------------------------------- */

typedef struct funcd_oci_ref {
    char *registry;   /* "registry-1.docker.io" for docker.io; may carry ":port" */
    char *repository; /* "library/alpine" */
    char *tag;        /* NULL when only a digest was given */
    char *digest;     /* "sha256:<64 hex>" or NULL */
} funcd_oci_ref;

/*
 * Parses "[registry/]repo[:tag][@sha256:hex]" with Docker's defaults
 * (docker.io, library/, latest). Returns 0 or FUNCD_EINVAL naming the part
 * that is wrong; *out is filled only on success.
 */
int funcd_oci_ref_parse(funcd_oci_ref *out, const char *ref);
void funcd_oci_ref_free(funcd_oci_ref *r);
/* "registry/repo:tag@digest" (what is set), malloc()ed; NULL on OOM. */
char *funcd_oci_ref_format(const funcd_oci_ref *r);
/* 1 for "127.0.0.0/8", "[::1]" and "localhost" hosts (with or without a port). */
int funcd_oci_host_is_loopback(const char *host_port);

struct sockaddr;
/* 1 when an allow-list entry "host[:port]" names `host_port` (no port: 443;
 * hosts compared without case). */
int funcd_oci_registry_matches(const char *entry, const char *host_port);
/* 1 for addresses a pull never connects to unless the operator named the
 * registry: loopback, link-local, unspecified, multicast, the clouds'
 * metadata services (169.254.169.254, 100.100.100.200, 168.63.129.16,
 * fd00:ec2::254); an IPv6 address that carries an IPv4 one (v4-mapped,
 * NAT64 64:ff9b::/96, v4-compatible) is judged by it. */
int funcd_oci_addr_is_internal(const struct sockaddr *sa);
/*
 * Whether a pull may go to registry `host_port`: one named in `insecure` or
 * `allowed` may; with a non-empty `allowed` nothing else may; without one,
 * any host but an internal address literal or localhost (names are checked
 * again, resolved, when the connection is made). 0 with `why` naming the rule.
 */
int funcd_oci_registry_allowed(const char *host_port, const char *const *allowed,
                               const char *const *insecure, char *why, size_t why_len);

/* ---- manifests and configs --------------------------------------------------- */

#define FUNCD_OCI_MT_OCI_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define FUNCD_OCI_MT_OCI_INDEX "application/vnd.oci.image.index.v1+json"
#define FUNCD_OCI_MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define FUNCD_OCI_MT_DOCKER_LIST "application/vnd.docker.distribution.manifest.list.v2+json"

/*
 * What an image may declare (review17 M-1): a config of 1 byte to
 * FUNCD_OCI_CONFIG_MAX, layers of at least 1 byte, and config and layers
 * together at most FUNCD_OCI_IMAGE_MAX bytes, which bounds each blob too
 * (a blob is received up to its declared size and must be exactly that).
 * The image limit is twice unpacking's on file content (unpack.h, 2 GiB):
 * room for tar headers and data that does not compress.
 */
#define FUNCD_OCI_CONFIG_MAX ((uint64_t)4 << 20)
#define FUNCD_OCI_IMAGE_MAX ((uint64_t)4 << 30)

typedef struct funcd_oci_descriptor {
    char *media_type;
    char *digest;
    uint64_t size;
} funcd_oci_descriptor;

typedef struct funcd_oci_manifest {
    int is_index;
    /* an image manifest: */
    funcd_oci_descriptor config;
    size_t n_layers;
    funcd_oci_descriptor *layers;
    /* an index: the entry picked for the platform (NULL digest: none fits) */
    funcd_oci_descriptor selected;
} funcd_oci_manifest;

/*
 * Parses a manifest or an index (content type `media_type`, or the body's
 * mediaType when NULL/unknown). From an index it selects the entry for
 * os/arch (variant-less "arm64" also matches "arm64/v8"). FUNCD_EINVAL on
 * malformed input or sizes past the limits above (the message names the
 * descriptor and "size"), FUNCD_ENOTFOUND when an index has no entry for
 * the platform.
 */
int funcd_oci_manifest_parse(funcd_oci_manifest *out, const char *json, size_t len,
                             const char *media_type, const char *os, const char *arch);
void funcd_oci_manifest_free(funcd_oci_manifest *m);

typedef struct funcd_oci_config {
    char *os, *arch;
    char **entrypoint, **cmd, **env; /* NULL-terminated, or NULL when absent */
    char *working_dir, *user;
    char *contract; /* the label dev.funcd.contract as it is (JSON text), or NULL */
} funcd_oci_config;

/* The image config label holding a Function's typed contract (docs/workflows.md). */
#define FUNCD_OCI_CONTRACT_LABEL "dev.funcd.contract"

int funcd_oci_config_parse(funcd_oci_config *out, const char *json, size_t len);
void funcd_oci_config_free(funcd_oci_config *c);

/* ---- auth --------------------------------------------------------------------- */

typedef struct funcd_www_authenticate {
    char *scheme; /* "Bearer", "Basic" (as sent) */
    char *realm, *service, *scope, *error;
} funcd_www_authenticate;

/* Parses one challenge (RFC 7235 auth-params, quoted or token values). */
int funcd_www_authenticate_parse(funcd_www_authenticate *out, const char *header);
void funcd_www_authenticate_free(funcd_www_authenticate *w);

/*
 * Looks up `registry_host` in a Docker config JSON ("auths": {host: {auth |
 * username+password | identitytoken}}). docker.io hosts also match the
 * "https://index.docker.io/v1/" key; "https://host/" keys match "host".
 * Fills whatever is present (malloc()ed, caller frees; NULL otherwise).
 * Returns 0, FUNCD_ENOTFOUND when no entry matches, FUNCD_EINVAL on bad JSON.
 */
int funcd_docker_config_lookup(const char *json, const char *registry_host, char **user,
                               char **pass, char **identitytoken);

/* ---- images and the client ------------------------------------------------------ */

typedef struct funcd_oci_blob_cache funcd_oci_blob_cache;
typedef struct funcd_oci_image funcd_oci_image;

struct funcd_oci_image {
    char *ref;           /* as given */
    char *digest;        /* the image manifest's digest */
    char *config_digest;
    char *os, *arch;
    char **entrypoint, **cmd, **env; /* NULL-terminated, or NULL */
    char *working_dir, *user;
    char *contract; /* the dev.funcd.contract label (JSON text), or NULL */
    size_t n_layers;
    char **layer_digests, **layer_media_types;
    char **layer_paths; /* verified files in the cache, in layer order */
    uint64_t *layer_sizes;
    int from_registry;    /* 1: the registry served this pull's manifest, with its credentials;
                             0: the manifest came from the cache (no request was made) */
    int with_credentials; /* credentials for the registry were found (a Secret, the auth file) */
    funcd_oci_blob_cache *blobs; /* holds config_digest and layer_digests there, or NULL */
    int unchanged; /* funcd_oci_pull_if_changed found the digest the caller has: only ref,
                      digest, n_layers, from_registry and with_credentials are set (no
                      config, no layer arrays, no blobs held) */
};

void funcd_oci_image_free(funcd_oci_image *img);

/* ---- the blob cache ---------------------------------------------------------------- */

/*
 * The verified blobs under <cache>/blobs/sha256, with a size cap in bytes on
 * disk (docs/images.md "The blob cache"). Blobs are held while a pull wants
 * them (from the moment its manifest is known) and while an image a pull
 * returned lives (until funcd_oci_image_free: the caller unpacks it). When
 * the blobs stored pass the cap, the least recently used that nobody holds
 * are deleted: after a pull stores a blob, when the last hold of a blob goes
 * while the cache is over its cap, and when the cache is opened. Use times
 * are kept in memory and as each blob's modification time, so the order
 * survives a restart. Thread-safe; shared by reference.
 */

typedef struct funcd_oci_blob_cache_stats {
    uint64_t blobs, bytes;       /* stored now (bytes on disk) */
    uint64_t held;               /* blobs held now (stored or still coming) */
    uint64_t evictions, evicted_bytes; /* since opened */
} funcd_oci_blob_cache_stats;

/* Opens (creating) `dir` with a cap of `max_bytes` (0: none), indexes the
 * blobs there and evicts down to the cap. `logger` (may be NULL) gets an
 * INFO line for each eviction round. 0, or FUNCD_EIO naming the directory. */
int funcd_oci_blob_cache_open(funcd_oci_blob_cache **out, const char *dir, uint64_t max_bytes,
                              const struct funcd_logger *logger);
/* Another reference; the cache is freed with the last funcd_oci_blob_cache_unref. */
funcd_oci_blob_cache *funcd_oci_blob_cache_ref(funcd_oci_blob_cache *c);
void funcd_oci_blob_cache_unref(funcd_oci_blob_cache *c); /* NULL-safe */
void funcd_oci_blob_cache_stats_get(funcd_oci_blob_cache *c, funcd_oci_blob_cache_stats *out);
/*
 * Holds the blobs `img` names (its config, when known, and its layers) in
 * `c` until funcd_oci_image_free, for an image the caller made itself (one
 * remembered from an earlier pull). Check that the files are there after
 * this call, not before. 0, or FUNCD_ENOMEM (then nothing is held).
 * An image a pull returned holds its blobs already.
 */
int funcd_oci_image_hold_blobs(funcd_oci_image *img, funcd_oci_blob_cache *c);

typedef struct funcd_oci_client funcd_oci_client;
/* The function funcd_oci_pull takes the plain name; its handle is this. */
typedef struct funcd_oci_pull_handle funcd_oci_pull_handle;

typedef struct funcd_oci_client_options {
    const char *cache_dir;            /* required: blobs in cache_dir/blobs/sha256/<hex>,
                                         manifests per registry and repository in
                                         cache_dir/manifests */
    const char *auth_file;            /* Docker config JSON for every pull, or NULL */
    const char *certs_dir;            /* DIR/<host[:port]>/ca.crt, or NULL */
    const char *const *insecure;      /* NULL-terminated "host:port" list (loopback only) */
    const char *const *allowed;       /* NULL-terminated "host[:port]" allow-list, or NULL:
                                         any host reached at a non-internal address */
    const struct funcd_logger *logger; /* connection failures in detail (NULL: stderr) */
    const char *os, *arch;            /* NULL: this host's ("linux", "amd64") */
    unsigned max_connections_per_host; /* 0: 6 */
    long connect_timeout_ms;          /* 0: 10 s */
    long low_speed_timeout_s;         /* a transfer under 1 KiB/s this long fails; 0: 60 */
    funcd_oci_blob_cache *blob_cache; /* the cache of cache_dir/blobs/sha256, opened by the
                                         caller (the client takes a reference), or NULL:
                                         the client opens it */
    uint64_t blob_cache_bytes;        /* the cap when the client opens it (0: none) */
} funcd_oci_client_options;

typedef struct funcd_oci_stats {
    uint64_t verify_requests;   /* manifest HEADs sent by funcd_oci_verify (retries included) */
    uint64_t manifest_requests; /* manifest GETs sent (retries included) */
    uint64_t blob_transfers;    /* blob downloads started (single-flight shares one) */
    uint64_t blob_cache_hits;   /* blobs found verified in the cache */
    uint64_t token_requests;    /* bearer-token requests */
    uint64_t bytes_downloaded;  /* blob bytes received */
} funcd_oci_stats;

/*
 * Bytes of one pull so far, across its blobs (cached ones count as done);
 * total is 0 until the manifest is known. Coalesced and delivered from its
 * own loop event (never from inside curl): it may cancel pulls or start new
 * ones, but must not free the client. The last call (done == total) comes
 * before a successful done callback.
 */
typedef void (*funcd_oci_progress_cb)(uint64_t done, uint64_t total, void *payload);

/*
 * Called exactly once per accepted pull, from its own loop event (never from
 * inside funcd_oci_pull, never after funcd_oci_pull_cancel or
 * funcd_oci_client_free). rc 0: `image` is the caller's (free it with
 * funcd_oci_image_free). rc < 0: image is NULL and `message` (valid during
 * the call) says what failed: FUNCD_ENOTFOUND "R:tag not found in registry",
 * FUNCD_EINVAL "registry X refused the credentials for REPO" / "requires
 * credentials", FUNCD_EIO "blob sha256:… does not match its digest …; refused",
 * "TLS certificate not trusted …", FUNCD_ETIMEOUT for a stalled transfer.
 * The pull's handle is gone once done is called; done may free the client.
 */
typedef void (*funcd_oci_done_cb)(int rc, const char *message, funcd_oci_image *image,
                                  void *payload);

/* 0 and the client in `*out`; FUNCD_EINVAL on a bad option (e.g. a
 * non-loopback insecure registry, a missing cache_dir), FUNCD_EIO when
 * the cache cannot be made, with funcd_error_last() saying why. */
int funcd_oci_client_new(funcd_oci_client **out, struct event_base *loop,
                         const funcd_oci_client_options *o);
/* Cancels every pull still running (their done callbacks are not called). NULL-safe. */
void funcd_oci_client_free(funcd_oci_client *c);
const funcd_oci_stats *funcd_oci_client_stats(const funcd_oci_client *c);
/* The client's blob cache (its reference, not the caller's). */
funcd_oci_blob_cache *funcd_oci_client_blob_cache(const funcd_oci_client *c);

/*
 * Starts pulling `ref`. `dockerconfigjson`: a Secret's .dockerconfigjson
 * content, searched before the client's auth_file (NULL: daemon credentials
 * only). Returns 0 (done will be called) or a negative code for a pull that
 * cannot start (a bad reference, a malformed secret, an unreadable auth
 * file); then done is not called. `*handle` (may be NULL) stays valid until
 * done is called or the pull is cancelled.
 */
int funcd_oci_pull(funcd_oci_client *c, const char *ref, const char *dockerconfigjson,
                   funcd_oci_progress_cb progress, funcd_oci_done_cb done, void *payload,
                   funcd_oci_pull_handle **handle);
/*
 * funcd_oci_pull for a caller that has the image `have_digest` (an image
 * manifest's digest) extracted already, e.g. a tag's refresh: when `ref`
 * names that image (directly or through an index) the pull ends once the
 * manifest is read: no blob is looked for, held or fetched, even if the
 * blob cache evicted them; progress reports the image's blobs all done (as
 * if found in the cache) and done gets an image with `unchanged` set.
 * Any other image is pulled whole, as funcd_oci_pull does (which is this
 * with have_digest NULL).
 */
int funcd_oci_pull_if_changed(funcd_oci_client *c, const char *ref, const char *have_digest,
                              const char *dockerconfigjson, funcd_oci_progress_cb progress,
                              funcd_oci_done_cb done, void *payload,
                              funcd_oci_pull_handle **handle);
/* Layers of a running pull verified so far, of how many (0 of 0 until the
 * manifest is known). */
void funcd_oci_pull_layers(const funcd_oci_pull_handle *h, unsigned *done, unsigned *total);

/* Stops a pull; its done callback will not be called. Shared blob transfers
 * other pulls still wait for go on. Call only before done has run. */
void funcd_oci_pull_cancel(funcd_oci_pull_handle *h);

/* ---- credential checks of cached images (docs/adr/0023-cached-image-credentials.md) ---- */

typedef struct funcd_oci_verify_handle funcd_oci_verify_handle;
/* rc 0: the credentials may read `digest` of the reference's repository;
 * rc < 0: `message` says why not (as a pull would: "registry R refused the
 * credentials for REPO", "... requires credentials ...", "not found"). */
typedef void (*funcd_oci_verify_cb)(int rc, const char *message, void *payload);

/*
 * Asks the registry whether the credentials a pull of `ref` would use
 * (`dockerconfigjson` first, then the auth file; none: anonymous) may read
 * the manifest `digest` of its repository: a HEAD of the manifest, answered
 * from a table instead when the same credentials were verified for that
 * repository and digest (by a pull or a check) within the last hour. The
 * table is bounded (FUNCD_OCI_VERIFIED_MAX entries, the oldest go first).
 * Returns 0 (done is called once, from its own loop event) or a negative
 * code (a bad reference or secret; done is not called).
 */
#define FUNCD_OCI_VERIFIED_MAX 4096
#define FUNCD_OCI_VERIFIED_TTL_MS (60 * 60 * 1000)
int funcd_oci_verify(funcd_oci_client *c, const char *ref, const char *digest,
                     const char *dockerconfigjson, funcd_oci_verify_cb done, void *payload,
                     funcd_oci_verify_handle **handle);
/* Stops a check; done will not be called. Call only before done has run. */
void funcd_oci_verify_cancel(funcd_oci_verify_handle *h);

#endif
