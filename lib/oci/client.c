/*
 * Pulls: manifest (tag or digest; an index resolved for the node's
 * platform) → config and layer blobs streamed into the content-addressed
 * cache, each verified against its digest as it arrives. Blob transfers are
 * shared between pulls (single-flight by digest); done callbacks are always
 * delivered from a fresh loop iteration, never from inside a call.
 */
#include "oci/oci.h"

#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <fcntl.h>
#include <mbedtls/sha256.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "funcd/sys/error.h"
#include "oci/blob_cache.h"
#include "oci/transport.h"
#include "util/buf.h"
#include "util/misc.h"

#define MANIFEST_MAX (4u << 20)
#define MANIFEST_ACCEPT                                                                            \
    FUNCD_OCI_MT_OCI_MANIFEST ", " FUNCD_OCI_MT_OCI_INDEX ", " FUNCD_OCI_MT_DOCKER_MANIFEST     \
                              ", " FUNCD_OCI_MT_DOCKER_LIST

typedef struct blob_waiter {
    funcd_oci_pull_handle *pull;
    size_t idx;
} blob_waiter;

typedef struct blob_fetch {
    struct blob_fetch *next;
    funcd_oci_client *c;
    char *digest;
    uint64_t size;
    char *tmp_path, *final_path;
    int fd;
    oci_req *req;
    blob_waiter *waiters;
    size_t n_waiters, cap;
} blob_fetch;

struct funcd_oci_pull_handle {
    funcd_oci_client *c;
    funcd_oci_pull_handle *prev, *next;
    char *ref_str, *display; /* as given; registry/repo:tag for messages */
    funcd_oci_ref ref;
    oci_creds creds;
    char *base_url; /* scheme://host/v2/repo */
    funcd_oci_progress_cb progress;
    funcd_oci_done_cb done;
    void *payload;
    oci_req *mreq;
    char *requested_digest; /* the manifest digest asked for, if any */
    char *manifest_digest;
    char *have_digest; /* the image the caller has (funcd_oci_pull_if_changed), or NULL */
    int hops;
    funcd_oci_manifest m;
    size_t n_blobs, blobs_left;
    size_t held; /* blobs 0..held-1 are held in the blob cache for this pull */
    unsigned char *blob_ready;
    uint64_t total, got;
    struct event finish;
    int finishing, rc, progress_dirty;
    int reporting, cancelled; /* in on_finish's last report; cancel() during it */
    int from_registry; /* the first manifest came from the registry (not the cache) */
    char *msg;
    funcd_oci_image *img;
};

/* Credentials verified for a repository's manifest digest, and when. */
typedef struct verified_entry {
    unsigned char key[32]; /* sha256 of credentials, registry, repository, digest */
    int64_t at_ms;
} verified_entry;

struct funcd_oci_verify_handle {
    funcd_oci_client *c;
    funcd_oci_verify_handle *prev, *next;
    funcd_oci_ref ref;
    oci_creds creds;
    char *digest;
    unsigned char key[32];
    oci_req *req;
    funcd_oci_verify_cb done;
    void *payload;
    struct event finish;
    int rc;
    char *msg;
};

struct funcd_oci_client {
    struct event_base *loop;
    oci_transport *t;
    funcd_oci_stats stats;
    funcd_oci_blob_cache *blobs;
    char *blob_dir, *manifest_dir, *auth_file, *os, *arch;
    funcd_oci_pull_handle *pulls;
    funcd_oci_verify_handle *verifies;
    blob_fetch *fetches;
    struct event progress_ev;
    verified_entry *verified; /* FUNCD_OCI_VERIFIED_MAX slots, unordered */
    size_t n_verified;
};

/* ---- credentials verified per repository and digest ------------------------------------ */

static int has_credentials(const oci_creds *cr)
{
    return (cr->user && cr->pass) || cr->identitytoken;
}

static void verified_key(const oci_creds *cr, const funcd_oci_ref *ref, const char *digest,
                         unsigned char out[32])
{
    mbedtls_sha256_context h;
    mbedtls_sha256_init(&h);
    mbedtls_sha256_starts_ret(&h, 0);
    const char *parts[] = {cr->user, cr->pass, cr->identitytoken, ref->registry,
                           ref->repository, digest};
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
        mbedtls_sha256_update_ret(&h, (const unsigned char *)(parts[i] ? parts[i] : ""),
                                  strlen(parts[i] ? parts[i] : "") + 1);
    mbedtls_sha256_finish_ret(&h, out);
    mbedtls_sha256_free(&h);
}

static verified_entry *verified_find(funcd_oci_client *c, const unsigned char key[32])
{
    int64_t now = funcd_mono_ms();
    for (size_t i = 0; i < c->n_verified; i++)
        if (memcmp(c->verified[i].key, key, 32) == 0)
            return now - c->verified[i].at_ms < FUNCD_OCI_VERIFIED_TTL_MS ? &c->verified[i]
                                                                          : NULL;
    return NULL;
}

static void verified_put(funcd_oci_client *c, const unsigned char key[32])
{
    if (!c->verified && !(c->verified = calloc(FUNCD_OCI_VERIFIED_MAX, sizeof(*c->verified))))
        return;
    size_t slot = c->n_verified, oldest = 0;
    for (size_t i = 0; i < c->n_verified; i++) {
        if (memcmp(c->verified[i].key, key, 32) == 0) {
            slot = i;
            break;
        }
        if (c->verified[i].at_ms < c->verified[oldest].at_ms)
            oldest = i;
    }
    if (slot == c->n_verified) {
        if (c->n_verified < FUNCD_OCI_VERIFIED_MAX)
            c->n_verified++;
        else
            slot = oldest; /* full: the oldest verification goes */
    }
    memcpy(c->verified[slot].key, key, 32);
    c->verified[slot].at_ms = funcd_mono_ms();
}

/* ---- helpers ------------------------------------------------------------------------- */

static char *blob_path(const funcd_oci_client *c, const char *digest)
{
    funcd_buf b = FUNCD_BUF_INIT;
    funcd_buf_printf(&b, "%s/%s", c->blob_dir, digest + 7);
    return funcd_buf_detach(&b, NULL);
}

/*
 * A manifest is cached per registry and repository it was read from, in
 * manifests/<sha256 of "registry/repository@digest">: a pull by digest takes
 * it from the cache only when it names that registry and repository. Another
 * one claiming the digest is asked for the manifest itself, whose bytes must
 * hash to the digest (review17 H-1: a registry's HEAD 200 proves nothing).
 */
static char *manifest_path(const funcd_oci_client *c, const funcd_oci_ref *ref,
                           const char *digest)
{
    funcd_buf key = FUNCD_BUF_INIT, path = FUNCD_BUF_INIT;
    char hex[65];
    if (funcd_buf_printf(&key, "%s/%s@%s", ref->registry, ref->repository, digest) < 0) {
        funcd_buf_free(&key);
        return NULL;
    }
    funcd_sha256_hex(key.data, key.len, hex);
    funcd_buf_free(&key);
    funcd_buf_printf(&path, "%s/%s", c->manifest_dir, hex);
    return funcd_buf_detach(&path, NULL);
}

static int mkdir_p(const char *path)
{
    char *p = funcd_strdup(path);
    if (!p)
        return -1;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        if (mkdir(p, 0755) < 0 && errno != EEXIST) {
            free(p);
            return -1;
        }
        *s = '/';
    }
    int rc = mkdir(p, 0755) < 0 && errno != EEXIST ? -1 : 0;
    free(p);
    return rc;
}

static int read_small_file(const char *path, size_t max, char **out, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    funcd_buf b = FUNCD_BUF_INIT;
    char chunk[16384];
    ssize_t n;
    while ((n = read(fd, chunk, sizeof(chunk))) > 0 && b.len <= max)
        funcd_buf_append(&b, chunk, (size_t)n);
    close(fd);
    if (n < 0 || b.len > max) {
        funcd_buf_free(&b);
        return -1;
    }
    funcd_buf_puts(&b, "");
    *out = funcd_buf_detach(&b, len);
    return 0;
}

/* Writes `data` as the cache file `final` (a temp file, then rename); frees `final`. */
static void cache_store(funcd_oci_client *c, char *final, const char *data, size_t len)
{
    funcd_buf tmp = FUNCD_BUF_INIT;
    funcd_buf_printf(&tmp, "%s/.tmp-m-XXXXXX", c->blob_dir);
    int fd = final && tmp.data ? mkstemp(tmp.data) : -1;
    if (fd >= 0) {
        int ok = write(fd, data, len) == (ssize_t)len;
        close(fd);
        if (!ok || rename(tmp.data, final) < 0)
            unlink(tmp.data);
    }
    funcd_buf_free(&tmp);
    free(final);
}

static const char *default_arch(void)
{
    struct utsname u;
    if (uname(&u) < 0)
        return "amd64";
    static const char *const map[][2] = {{"x86_64", "amd64"}, {"aarch64", "arm64"},
                                         {"armv7l", "arm"},   {"i686", "386"},
                                         {"ppc64le", "ppc64le"}, {"s390x", "s390x"},
                                         {"riscv64", "riscv64"}};
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (strcmp(u.machine, map[i][0]) == 0)
            return map[i][1];
    return "amd64";
}

/* ---- pull lifecycle ------------------------------------------------------------------- */

static void fetch_remove_waiters(blob_fetch *f, funcd_oci_pull_handle *p);
static const funcd_oci_descriptor *blob_desc(const funcd_oci_pull_handle *p, size_t idx);

static void pull_detach(funcd_oci_pull_handle *p)
{
    if (p->mreq) {
        oci_req_cancel(p->mreq);
        p->mreq = NULL;
    }
    for (blob_fetch *f = p->c->fetches, *next; f; f = next) {
        next = f->next;
        fetch_remove_waiters(f, p);
    }
}

static void pull_free(funcd_oci_pull_handle *p)
{
    funcd_oci_client *c = p->c;
    if (p->prev)
        p->prev->next = p->next;
    else if (c->pulls == p)
        c->pulls = p->next;
    if (p->next)
        p->next->prev = p->prev;
    event_del(&p->finish);
    for (size_t i = 0; i < p->held; i++)
        funcd__oci_blob_release(c->blobs, blob_desc(p, i)->digest);
    free(p->ref_str);
    free(p->display);
    funcd_oci_ref_free(&p->ref);
    oci_creds_clear(&p->creds);
    free(p->base_url);
    free(p->requested_digest);
    free(p->manifest_digest);
    free(p->have_digest);
    funcd_oci_manifest_free(&p->m);
    free(p->blob_ready);
    free(p->msg);
    funcd_oci_image_free(p->img);
    free(p);
}

static void on_finish(evutil_socket_t fd, short what, void *arg)
{
    funcd_oci_pull_handle *p = arg;
    funcd_oci_done_cb done = p->done;
    void *payload = p->payload;
    int rc = p->rc;
    char *msg = p->msg;
    funcd_oci_image *img = p->img;
    p->msg = NULL;
    p->img = NULL;
    /* The last progress report comes before done, whichever event ran first,
     * while the handle is still valid (the caller may look at it); should the
     * callback cancel the pull, done is not called, as after any cancel. */
    if (p->progress_dirty && p->progress && rc == 0) {
        p->reporting = 1;
        p->progress(p->got, p->total, payload);
        p->reporting = 0;
        if (p->cancelled)
            done = NULL;
    }
    pull_free(p);
    if (done)
        done(rc, msg, img, payload);
    else
        funcd_oci_image_free(img);
    free(msg);
}

static void pull_finish(funcd_oci_pull_handle *p, int rc, const char *msg)
{
    if (p->finishing)
        return;
    p->finishing = 1;
    p->rc = rc;
    p->msg = msg ? funcd_strdup(msg) : NULL;
    pull_detach(p);
    event_active(&p->finish, EV_TIMEOUT, 1);
}

static void pull_fail(funcd_oci_pull_handle *p, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void pull_fail(funcd_oci_pull_handle *p, int rc, const char *fmt, ...)
{
    funcd_buf m = FUNCD_BUF_INIT;
    va_list ap;
    va_start(ap, fmt);
    funcd_buf_vprintf(&m, fmt, ap);
    va_end(ap);
    pull_finish(p, rc < 0 ? rc : FUNCD_EIO, m.data ? m.data : "pull failed");
    funcd_buf_free(&m);
}

/* Progress is reported from its own loop event, never from inside a curl
 * callback: a progress callback may cancel pulls and so free transfers. */
static void report_progress(funcd_oci_pull_handle *p)
{
    if (!p->progress)
        return;
    p->progress_dirty = 1;
    event_active(&p->c->progress_ev, EV_TIMEOUT, 1);
}

static void on_progress_event(evutil_socket_t fd, short what, void *arg)
{
    funcd_oci_client *c = arg;
    /* Restart the walk after each callback: it may have freed any pull. */
    for (;;) {
        funcd_oci_pull_handle *p = c->pulls;
        while (p && !p->progress_dirty)
            p = p->next;
        if (!p)
            return;
        p->progress_dirty = 0;
        p->progress(p->got, p->total, p->payload);
    }
}

/* ---- the image ---------------------------------------------------------------------- */

static char **vec_take(char ***v)
{
    char **out = *v;
    *v = NULL;
    return out;
}

static const funcd_oci_descriptor *blob_desc(const funcd_oci_pull_handle *p, size_t idx)
{
    return idx == 0 ? &p->m.config : &p->m.layers[idx - 1];
}

static int arch_matches(const char *have, const char *want)
{
    size_t n = strcspn(want, "/");
    return strlen(have) == n && strncmp(have, want, n) == 0;
}

/* Hands `img` to the caller, with what the pull learnt of its credentials. */
static void pull_deliver(funcd_oci_pull_handle *p, funcd_oci_image *img)
{
    img->from_registry = p->from_registry;
    img->with_credentials = has_credentials(&p->creds);
    if (p->from_registry) { /* these credentials read this image's manifest just now */
        unsigned char key[32];
        verified_key(&p->creds, &p->ref, p->manifest_digest, key);
        verified_put(p->c, key);
    }
    p->img = img;
    pull_finish(p, 0, NULL);
}

/* The manifest is the image the caller has (funcd_oci_pull_if_changed): the
 * pull ends here, no blob looked for, held or fetched. Its progress says
 * every blob is done, as for blobs found in the cache. */
static void pull_unchanged(funcd_oci_pull_handle *p)
{
    p->n_blobs = p->m.n_layers + 1;
    for (size_t i = 0; i < p->n_blobs; i++)
        p->total += blob_desc(p, i)->size;
    p->got = p->total;
    report_progress(p);
    funcd_oci_image *img = calloc(1, sizeof(*img));
    if (img) {
        img->ref = funcd_strdup(p->ref_str);
        img->digest = funcd_strdup(p->manifest_digest);
        img->n_layers = p->m.n_layers; /* the layer arrays stay NULL */
        img->unchanged = 1;
    }
    if (!img || !img->ref || !img->digest) {
        funcd_oci_image_free(img);
        pull_fail(p, FUNCD_ENOMEM, "%s: out of memory", p->display);
        return;
    }
    pull_deliver(p, img);
}

static void pull_assemble(funcd_oci_pull_handle *p)
{
    funcd_oci_client *c = p->c;
    char *path = blob_path(c, p->m.config.digest), *json = NULL;
    size_t len = 0;
    if (!path || read_small_file(path, FUNCD_OCI_CONFIG_MAX, &json, &len) < 0) {
        free(path);
        pull_fail(p, FUNCD_EIO, "%s: cannot read its config blob from the cache", p->display);
        return;
    }
    free(path);
    funcd_oci_config cfg;
    int rc = funcd_oci_config_parse(&cfg, json, len);
    free(json);
    if (rc < 0) {
        pull_fail(p, rc, "%s: %s", p->display, funcd_error_last()->message);
        return;
    }
    if ((cfg.os && strcmp(cfg.os, c->os) != 0) || (cfg.arch && !arch_matches(cfg.arch, c->arch))) {
        pull_fail(p, FUNCD_EINVAL, "%s is built for %s/%s; this node runs %s/%s", p->display,
                  cfg.os ? cfg.os : "?", cfg.arch ? cfg.arch : "?", c->os, c->arch);
        funcd_oci_config_free(&cfg);
        return;
    }
    funcd_oci_image *img = calloc(1, sizeof(*img));
    size_t n = p->m.n_layers;
    if (img) {
        img->ref = funcd_strdup(p->ref_str);
        img->digest = funcd_strdup(p->manifest_digest);
        img->config_digest = funcd_strdup(p->m.config.digest);
        img->os = funcd_strdup(cfg.os ? cfg.os : c->os);
        img->arch = funcd_strdup(cfg.arch ? cfg.arch : c->arch);
        img->entrypoint = vec_take(&cfg.entrypoint);
        img->cmd = vec_take(&cfg.cmd);
        img->env = vec_take(&cfg.env);
        img->working_dir = cfg.working_dir;
        img->user = cfg.user;
        img->contract = cfg.contract;
        cfg.working_dir = cfg.user = cfg.contract = NULL;
        img->n_layers = n;
        img->layer_digests = calloc(n + 1, sizeof(char *));
        img->layer_media_types = calloc(n + 1, sizeof(char *));
        img->layer_paths = calloc(n + 1, sizeof(char *));
        img->layer_sizes = calloc(n + 1, sizeof(uint64_t));
    }
    funcd_oci_config_free(&cfg);
    int ok = img && img->ref && img->digest && img->config_digest && img->layer_digests &&
             img->layer_media_types && img->layer_paths && img->layer_sizes;
    for (size_t i = 0; ok && i < n; i++) {
        img->layer_digests[i] = funcd_strdup(p->m.layers[i].digest);
        img->layer_media_types[i] = funcd_strdup(p->m.layers[i].media_type);
        img->layer_paths[i] = blob_path(c, p->m.layers[i].digest);
        img->layer_sizes[i] = p->m.layers[i].size;
        ok = img->layer_digests[i] && img->layer_media_types[i] && img->layer_paths[i];
    }
    if (!ok) {
        funcd_oci_image_free(img);
        pull_fail(p, FUNCD_ENOMEM, "%s: out of memory", p->display);
        return;
    }
    img->blobs = funcd_oci_blob_cache_ref(c->blobs); /* the pull's holds are the image's now */
    p->held = 0;
    pull_deliver(p, img);
}

static void pull_blob_ready(funcd_oci_pull_handle *p, size_t idx)
{
    if (p->finishing || p->blob_ready[idx])
        return;
    p->blob_ready[idx] = 1;
    if (--p->blobs_left == 0)
        pull_assemble(p);
}

/* ---- shared blob transfers ------------------------------------------------------------ */

static void fetch_free(blob_fetch *f)
{
    if (f->req)
        oci_req_cancel(f->req);
    if (f->fd >= 0)
        close(f->fd);
    if (f->tmp_path)
        unlink(f->tmp_path);
    free(f->tmp_path);
    free(f->final_path);
    free(f->digest);
    free(f->waiters);
    free(f);
}

static void fetch_unlink(blob_fetch *f)
{
    for (blob_fetch **pp = &f->c->fetches; *pp; pp = &(*pp)->next)
        if (*pp == f) {
            *pp = f->next;
            return;
        }
}

static void fetch_remove_waiters(blob_fetch *f, funcd_oci_pull_handle *p)
{
    size_t kept = 0;
    for (size_t i = 0; i < f->n_waiters; i++)
        if (f->waiters[i].pull != p)
            f->waiters[kept++] = f->waiters[i];
    int had = kept != f->n_waiters;
    f->n_waiters = kept;
    if (had && kept == 0) {
        fetch_unlink(f);
        fetch_free(f);
    }
}

static int fetch_add_waiter(blob_fetch *f, funcd_oci_pull_handle *p, size_t idx)
{
    if (f->n_waiters == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 4;
        blob_waiter *w = realloc(f->waiters, cap * sizeof(*w));
        if (!w)
            return funcd_error_set(FUNCD_ENOMEM, "registry client: out of memory");
        f->waiters = w;
        f->cap = cap;
    }
    f->waiters[f->n_waiters++] = (blob_waiter){p, idx};
    return 0;
}

static void on_blob_data(oci_req *r, size_t n, void *ctx)
{
    blob_fetch *f = ctx;
    for (size_t i = 0; i < f->n_waiters; i++) {
        funcd_oci_pull_handle *p = f->waiters[i].pull;
        p->got += n;
        report_progress(p);
    }
}

/* Settles every waiter: ready, or failed with `msg`. Consumes the fetch. */
static void fetch_settle(blob_fetch *f, int rc, const char *msg)
{
    fetch_unlink(f);
    for (size_t i = 0; i < f->n_waiters; i++) {
        funcd_oci_pull_handle *p = f->waiters[i].pull;
        if (rc == 0)
            pull_blob_ready(p, f->waiters[i].idx);
        else
            pull_fail(p, rc, "%s: %s", p->display, msg);
    }
    fetch_free(f);
}

/*
 * The verified temp file becomes the cache entry named by its digest. What it
 * takes on disk is read from its final name, closed: before close XFS counts
 * the blocks it preallocated past the end, GiBs for a large file, trimmed at
 * close (review18 L-5).
 */
static int store_fetched(blob_fetch *f)
{
    int rc = close(f->fd);
    f->fd = -1;
    if (rc < 0 || rename(f->tmp_path, f->final_path) < 0)
        return -1;
    free(f->tmp_path);
    f->tmp_path = NULL;
    struct stat st;
    if (stat(f->final_path, &st) < 0) { /* it is in place all the same: count its size */
        memset(&st, 0, sizeof(st));
        st.st_size = (off_t)f->size;
    }
    /* Every pull waiting for it holds it: the eviction this may start leaves it. */
    funcd__oci_blob_used(f->c->blobs, f->digest, &st, 1);
    return 0;
}

static void on_blob_done(oci_req *r, int rc, const char *message, void *ctx)
{
    blob_fetch *f = ctx;
    f->req = NULL;
    if (rc < 0) {
        fetch_settle(f, rc, message);
        return;
    }
    funcd_buf m = FUNCD_BUF_INIT;
    char got[72];
    oci_req_body_digest(r, got);
    long status = oci_req_status(r);
    if (status == 404)
        funcd_buf_printf(&m, "blob %s not found in registry", f->digest);
    else if (status != 200)
        funcd_buf_printf(&m, "registry answered %ld for blob %s", status, f->digest);
    else if (strcmp(got, f->digest) != 0)
        funcd_buf_printf(&m, "blob %s does not match its digest (the registry sent %s); refused",
                         f->digest, got);
    else if (oci_req_received(r) != f->size)
        funcd_buf_printf(&m, "blob %s is %llu bytes, its descriptor says %llu; refused", f->digest,
                         (unsigned long long)oci_req_received(r), (unsigned long long)f->size);
    else if (store_fetched(f) < 0)
        funcd_buf_printf(&m, "cannot store blob %s in the cache: %s", f->digest, strerror(errno));
    fetch_settle(f, m.data ? (status == 404 ? FUNCD_ENOTFOUND : FUNCD_EIO) : 0, m.data);
    funcd_buf_free(&m);
}

static int fetch_start(funcd_oci_pull_handle *p, size_t idx, const funcd_oci_descriptor *d)
{
    funcd_oci_client *c = p->c;
    blob_fetch *f = calloc(1, sizeof(*f));
    if (!f)
        return funcd_error_set(FUNCD_ENOMEM, "registry client: out of memory");
    f->c = c;
    f->fd = -1;
    f->size = d->size;
    f->digest = funcd_strdup(d->digest);
    f->final_path = blob_path(c, d->digest);
    funcd_buf tmp = FUNCD_BUF_INIT;
    funcd_buf_printf(&tmp, "%s/.tmp-%.12s-XXXXXX", c->blob_dir, d->digest + 7);
    f->tmp_path = funcd_buf_detach(&tmp, NULL);
    if (!f->digest || !f->final_path || (f->fd = mkostemp(f->tmp_path, O_CLOEXEC)) < 0 ||
        fetch_add_waiter(f, p, idx) < 0) {
        if (f->fd < 0) {
            free(f->tmp_path);
            f->tmp_path = NULL;
        }
        fetch_free(f);
        return funcd_error_set(FUNCD_EIO, "cannot create a file in the image cache %s", c->blob_dir);
    }
    funcd_buf url = FUNCD_BUF_INIT;
    funcd_buf_printf(&url, "%s/blobs/%s", p->base_url, d->digest);
    oci_req_spec s = {.url = url.data, .host = p->ref.registry, .repository = p->ref.repository,
                      .creds = &p->creds, .fd = f->fd, .expect_size = d->size,
                      .on_data = on_blob_data};
    int rc = oci_req_start(c->t, &s, on_blob_done, f, &f->req);
    funcd_buf_free(&url);
    if (rc < 0) {
        fetch_free(f);
        return rc;
    }
    f->next = c->fetches;
    c->fetches = f;
    c->stats.blob_transfers++;
    return 0;
}

static int pull_want_blob(funcd_oci_pull_handle *p, size_t idx)
{
    funcd_oci_client *c = p->c;
    const funcd_oci_descriptor *d = blob_desc(p, idx);
    char *path = blob_path(c, d->digest);
    struct stat st;
    int cached = path && stat(path, &st) == 0 && (uint64_t)st.st_size == d->size;
    free(path);
    if (cached) {
        funcd__oci_blob_used(c->blobs, d->digest, &st, 0);
        c->stats.blob_cache_hits++;
        p->got += d->size;
        pull_blob_ready(p, idx);
        return 0;
    }
    for (blob_fetch *f = c->fetches; f; f = f->next) {
        if (strcmp(f->digest, d->digest) != 0)
            continue;
        p->got += f->req ? oci_req_received(f->req) : 0;
        return fetch_add_waiter(f, p, idx);
    }
    return fetch_start(p, idx, d);
}

void funcd_oci_pull_layers(const funcd_oci_pull_handle *p, unsigned *done, unsigned *total)
{
    size_t blobs_done = p->n_blobs - p->blobs_left; /* the config blob is one of them */
    *total = (unsigned)p->m.n_layers;
    *done = (unsigned)(blobs_done > p->m.n_layers ? p->m.n_layers : blobs_done);
}

static void pull_start_blobs(funcd_oci_pull_handle *p)
{
    p->n_blobs = p->blobs_left = p->m.n_layers + 1;
    p->blob_ready = calloc(p->n_blobs, 1);
    if (!p->blob_ready) {
        pull_fail(p, FUNCD_ENOMEM, "%s: out of memory", p->display);
        return;
    }
    for (size_t i = 0; i < p->n_blobs; i++)
        p->total += blob_desc(p, i)->size;
    /* Held before they are looked for: none goes between finding it and using it. */
    for (; p->held < p->n_blobs; p->held++)
        if (funcd__oci_blob_hold(p->c->blobs, blob_desc(p, p->held)->digest) < 0) {
            pull_fail(p, FUNCD_ENOMEM, "%s: out of memory", p->display);
            return;
        }
    report_progress(p);
    for (size_t i = 0; i < p->n_blobs && !p->finishing; i++) {
        int rc = pull_want_blob(p, i);
        if (rc < 0)
            pull_fail(p, rc, "%s: %s", p->display, funcd_error_last()->message);
    }
}

/* ---- manifests -------------------------------------------------------------------------- */

static void pull_fetch_manifest(funcd_oci_pull_handle *p, const char *reference);

static void pull_got_manifest(funcd_oci_pull_handle *p, const char *body, size_t len,
                              const char *content_type, const char *digest)
{
    funcd_oci_manifest m;
    int rc = funcd_oci_manifest_parse(&m, body, len, content_type, p->c->os, p->c->arch);
    if (rc < 0) {
        pull_fail(p, rc, "%s: %s", p->display, funcd_error_last()->message);
        return;
    }
    if (m.is_index) {
        if (++p->hops > 2) {
            funcd_oci_manifest_free(&m);
            pull_fail(p, FUNCD_EINVAL, "%s: indexes nest too deep", p->display);
            return;
        }
        char *child = funcd_strdup(m.selected.digest);
        funcd_oci_manifest_free(&m);
        if (!child) {
            pull_fail(p, FUNCD_ENOMEM, "%s: out of memory", p->display);
            return;
        }
        pull_fetch_manifest(p, child);
        free(child);
        return;
    }
    p->m = m;
    free(p->manifest_digest);
    p->manifest_digest = funcd_strdup(digest);
    if (p->have_digest && strcmp(digest, p->have_digest) == 0)
        pull_unchanged(p);
    else
        pull_start_blobs(p);
}

static void on_manifest(oci_req *r, int rc, const char *message, void *ctx)
{
    funcd_oci_pull_handle *p = ctx;
    p->mreq = NULL;
    if (rc < 0) {
        pull_fail(p, rc, "%s", message);
        return;
    }
    long status = oci_req_status(r);
    if (status == 404) {
        if (p->hops == 0)
            pull_fail(p, FUNCD_ENOTFOUND, "%s not found in registry", p->display);
        else
            pull_fail(p, FUNCD_ENOTFOUND, "%s: manifest %s of its index not found in registry",
                      p->display, p->requested_digest);
        return;
    }
    if (status == 403) {
        pull_fail(p, FUNCD_EINVAL, "registry %s denied access to %s", p->ref.registry,
                  p->ref.repository);
        return;
    }
    if (status != 200) {
        pull_fail(p, FUNCD_EIO, "registry %s answered %ld for the manifest of %s",
                  p->ref.registry, status, p->display);
        return;
    }
    char got[72];
    oci_req_body_digest(r, got);
    const char *header = oci_req_docker_digest(r);
    if ((p->requested_digest && strcmp(got, p->requested_digest) != 0) ||
        (!p->requested_digest && header && strncmp(header, "sha256:", 7) == 0 &&
         strcmp(header, got) != 0)) {
        pull_fail(p, FUNCD_EIO, "the manifest of %s does not match its digest (%s); refused",
                  p->display, p->requested_digest ? p->requested_digest : header);
        return;
    }
    size_t len;
    const char *body = oci_req_body(r, &len);
    if (p->hops == 0)
        p->from_registry = 1;
    cache_store(p->c, manifest_path(p->c, &p->ref, got), body, len);
    pull_got_manifest(p, body, len, oci_req_content_type(r), got);
}

/* `reference`: a tag, or a digest (then a copy cached from this registry and
 * repository answers without a request). */
static void pull_fetch_manifest(funcd_oci_pull_handle *p, const char *reference)
{
    funcd_oci_client *c = p->c;
    int by_digest = strncmp(reference, "sha256:", 7) == 0;
    free(p->requested_digest);
    p->requested_digest = by_digest ? funcd_strdup(reference) : NULL;
    if (by_digest) {
        char *path = manifest_path(c, &p->ref, reference), *json = NULL;
        size_t len = 0;
        int hit = path && read_small_file(path, MANIFEST_MAX, &json, &len) == 0;
        free(path);
        if (hit) {
            pull_got_manifest(p, json, len, NULL, reference);
            free(json);
            return;
        }
    }
    funcd_buf url = FUNCD_BUF_INIT;
    funcd_buf_printf(&url, "%s/manifests/%s", p->base_url, reference);
    oci_req_spec s = {.url = url.data, .host = p->ref.registry, .repository = p->ref.repository,
                      .accept = MANIFEST_ACCEPT, .creds = &p->creds, .fd = -1,
                      .max_body = MANIFEST_MAX};
    int rc = oci_req_start(c->t, &s, on_manifest, p, &p->mreq);
    funcd_buf_free(&url);
    c->stats.manifest_requests++;
    if (rc < 0)
        pull_fail(p, rc, "%s: %s", p->display, funcd_error_last()->message);
}

/* ---- credentials ------------------------------------------------------------------------ */

static int lookup_into(oci_creds *cr, const char *json, const char *host)
{
    return funcd_docker_config_lookup(json, host, &cr->user, &cr->pass, &cr->identitytoken);
}

/* A Secret's config first, then the daemon's auth file (read on every pull,
 * so rotated credentials apply without a restart). */
static int resolve_creds(funcd_oci_client *c, const char *secret_json, const char *host,
                         oci_creds *out)
{
    memset(out, 0, sizeof(*out));
    if (secret_json) {
        int rc = lookup_into(out, secret_json, host);
        if (rc != FUNCD_ENOTFOUND)
            return rc < 0 ? funcd_error_set(rc, "pull secret: %s", funcd_error_last()->message)
                          : 0;
    }
    if (!c->auth_file)
        return 0;
    char *json = NULL;
    size_t len;
    if (read_small_file(c->auth_file, 1u << 20, &json, &len) < 0)
        return funcd_error_set(FUNCD_EIO, "registry auth file %s cannot be read: %s",
                               c->auth_file, strerror(errno));
    int rc = lookup_into(out, json, host);
    explicit_bzero(json, len);
    free(json);
    if (rc == FUNCD_ENOTFOUND)
        return 0;
    return rc < 0 ? funcd_error_set(rc, "%s: %s", c->auth_file, funcd_error_last()->message) : 0;
}

/* ---- public API -------------------------------------------------------------------------- */

int funcd_oci_pull(funcd_oci_client *c, const char *ref, const char *dockerconfigjson,
                   funcd_oci_progress_cb progress, funcd_oci_done_cb done, void *payload,
                   funcd_oci_pull_handle **handle)
{
    return funcd_oci_pull_if_changed(c, ref, NULL, dockerconfigjson, progress, done, payload,
                                     handle);
}

int funcd_oci_pull_if_changed(funcd_oci_client *c, const char *ref, const char *have_digest,
                              const char *dockerconfigjson, funcd_oci_progress_cb progress,
                              funcd_oci_done_cb done, void *payload,
                              funcd_oci_pull_handle **handle)
{
    if (handle)
        *handle = NULL;
    if (!c || !ref)
        return funcd_error_set(FUNCD_EINVAL, "funcd_oci_pull: no client or reference");
    funcd_oci_pull_handle *p = calloc(1, sizeof(*p));
    if (!p)
        return funcd_error_set(FUNCD_ENOMEM, "funcd_oci_pull: out of memory");
    p->c = c;
    event_assign(&p->finish, c->loop, -1, 0, on_finish, p);
    int rc = funcd_oci_ref_parse(&p->ref, ref);
    if (rc == 0)
        rc = resolve_creds(c, dockerconfigjson, p->ref.registry, &p->creds);
    if (rc < 0) {
        pull_free(p);
        return rc;
    }
    p->ref_str = funcd_strdup(ref);
    p->display = funcd_oci_ref_format(&p->ref);
    p->have_digest = have_digest ? funcd_strdup(have_digest) : NULL;
    funcd_buf u = FUNCD_BUF_INIT;
    funcd_buf_printf(&u, "%s://%s/v2/%s", oci_transport_scheme(c->t, p->ref.registry),
                     p->ref.registry, p->ref.repository);
    p->base_url = funcd_buf_detach(&u, NULL);
    p->progress = progress;
    p->done = done;
    p->payload = payload;
    p->next = c->pulls;
    if (c->pulls)
        c->pulls->prev = p;
    c->pulls = p;
    if (!p->ref_str || !p->display || (have_digest && !p->have_digest)) {
        pull_free(p);
        return funcd_error_set(FUNCD_ENOMEM, "funcd_oci_pull: out of memory");
    }
    pull_fetch_manifest(p, p->ref.digest ? p->ref.digest : p->ref.tag);
    if (handle)
        *handle = p;
    return 0;
}

void funcd_oci_pull_cancel(funcd_oci_pull_handle *h)
{
    if (!h)
        return;
    if (h->reporting) { /* on_finish frees it once its report returns */
        h->cancelled = 1;
        return;
    }
    pull_detach(h);
    pull_free(h);
}

static void verify_free(funcd_oci_verify_handle *h)
{
    funcd_oci_client *c = h->c;
    if (h->prev)
        h->prev->next = h->next;
    else if (c->verifies == h)
        c->verifies = h->next;
    if (h->next)
        h->next->prev = h->prev;
    if (h->req)
        oci_req_cancel(h->req);
    event_del(&h->finish);
    funcd_oci_ref_free(&h->ref);
    oci_creds_clear(&h->creds);
    free(h->digest);
    free(h->msg);
    free(h);
}

static void on_verify_finish(evutil_socket_t fd, short what, void *arg)
{
    funcd_oci_verify_handle *h = arg;
    funcd_oci_verify_cb done = h->done;
    void *payload = h->payload;
    int rc = h->rc;
    char *msg = h->msg;
    h->msg = NULL;
    verify_free(h);
    done(rc, msg, payload);
    free(msg);
}

static void verify_finish(funcd_oci_verify_handle *h, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void verify_finish(funcd_oci_verify_handle *h, int rc, const char *fmt, ...)
{
    h->rc = rc;
    if (fmt) {
        funcd_buf m = FUNCD_BUF_INIT;
        va_list ap;
        va_start(ap, fmt);
        funcd_buf_vprintf(&m, fmt, ap);
        va_end(ap);
        h->msg = funcd_buf_detach(&m, NULL);
    }
    event_active(&h->finish, EV_TIMEOUT, 1);
}

static void on_verify_head(oci_req *r, int rc, const char *message, void *ctx)
{
    funcd_oci_verify_handle *h = ctx;
    h->req = NULL;
    if (rc < 0) {
        verify_finish(h, rc, "%s", message);
        return;
    }
    long status = oci_req_status(r);
    if (status == 200) {
        verified_put(h->c, h->key);
        verify_finish(h, 0, NULL);
    } else if (status == 404) {
        verify_finish(h, FUNCD_ENOTFOUND, "%s/%s@%s not found in registry", h->ref.registry,
                      h->ref.repository, h->digest);
    } else if (status == 403) {
        verify_finish(h, FUNCD_EINVAL, "registry %s denied access to %s", h->ref.registry,
                      h->ref.repository);
    } else {
        verify_finish(h, FUNCD_EIO, "registry %s answered %ld for the manifest of %s/%s@%s",
                      h->ref.registry, status, h->ref.registry, h->ref.repository, h->digest);
    }
}

int funcd_oci_verify(funcd_oci_client *c, const char *ref, const char *digest,
                     const char *dockerconfigjson, funcd_oci_verify_cb done, void *payload,
                     funcd_oci_verify_handle **handle)
{
    if (handle)
        *handle = NULL;
    if (!c || !ref || !digest || !done)
        return funcd_error_set(FUNCD_EINVAL, "funcd_oci_verify: missing argument");
    funcd_oci_verify_handle *h = calloc(1, sizeof(*h));
    if (!h)
        return funcd_error_set(FUNCD_ENOMEM, "funcd_oci_verify: out of memory");
    h->c = c;
    event_assign(&h->finish, c->loop, -1, 0, on_verify_finish, h);
    h->next = c->verifies;
    if (c->verifies)
        c->verifies->prev = h;
    c->verifies = h;
    int rc = funcd_oci_ref_parse(&h->ref, ref);
    if (rc == 0)
        rc = resolve_creds(c, dockerconfigjson, h->ref.registry, &h->creds);
    if (rc == 0 && !(h->digest = funcd_strdup(digest)))
        rc = funcd_error_set(FUNCD_ENOMEM, "funcd_oci_verify: out of memory");
    if (rc < 0) {
        verify_free(h);
        return rc;
    }
    h->done = done;
    h->payload = payload;
    verified_key(&h->creds, &h->ref, digest, h->key);
    if (verified_find(c, h->key)) {
        verify_finish(h, 0, NULL);
    } else {
        funcd_buf url = FUNCD_BUF_INIT;
        funcd_buf_printf(&url, "%s://%s/v2/%s/manifests/%s",
                         oci_transport_scheme(c->t, h->ref.registry), h->ref.registry,
                         h->ref.repository, digest);
        oci_req_spec s = {.url = url.data, .host = h->ref.registry,
                          .repository = h->ref.repository, .accept = MANIFEST_ACCEPT,
                          .creds = &h->creds, .fd = -1, .head = 1};
        rc = url.data ? oci_req_start(c->t, &s, on_verify_head, h, &h->req)
                      : funcd_error_set(FUNCD_ENOMEM, "funcd_oci_verify: out of memory");
        funcd_buf_free(&url);
        c->stats.verify_requests++;
        if (rc < 0) {
            verify_free(h);
            return rc;
        }
    }
    if (handle)
        *handle = h;
    return 0;
}

void funcd_oci_verify_cancel(funcd_oci_verify_handle *h)
{
    if (h)
        verify_free(h);
}

static void remove_stale_temps(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, ".tmp-", 5) == 0)
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
}

int funcd_oci_client_new(funcd_oci_client **out, struct event_base *loop,
                         const funcd_oci_client_options *o)
{
    *out = NULL;
    if (!loop || !o || !o->cache_dir || !*o->cache_dir) {
        return funcd_error_set(FUNCD_EINVAL, "registry client: a loop and a cache_dir are required");
    }
    for (size_t i = 0; o->insecure && o->insecure[i]; i++) {
        if (!funcd_oci_host_is_loopback(o->insecure[i])) {
            return funcd_error_set(FUNCD_EINVAL,
                                   "insecure registry %s: only a loopback registry (127.0.0.0/8, "
                                   "::1, localhost) may be spoken to over plain HTTP",
                                   o->insecure[i]);
        }
    }
    funcd_oci_client *c = calloc(1, sizeof(*c));
    if (!c)
        return funcd_error_set(FUNCD_ENOMEM, "registry client: out of memory");
    c->loop = loop;
    event_assign(&c->progress_ev, loop, -1, 0, on_progress_event, c);
    funcd_buf b = FUNCD_BUF_INIT;
    funcd_buf_printf(&b, "%s/blobs/sha256", o->cache_dir);
    c->blob_dir = funcd_buf_detach(&b, NULL);
    funcd_buf_printf(&b, "%s/manifests", o->cache_dir);
    c->manifest_dir = funcd_buf_detach(&b, NULL);
    c->auth_file = o->auth_file ? funcd_strdup(o->auth_file) : NULL;
    c->os = funcd_strdup(o->os ? o->os : "linux");
    c->arch = funcd_strdup(o->arch ? o->arch : default_arch());
    if (!c->blob_dir || !c->manifest_dir || !c->os || !c->arch ||
        (o->auth_file && !c->auth_file)) {
        funcd_oci_client_free(c);
        return funcd_error_set(FUNCD_ENOMEM, "registry client: out of memory");
    }
    if (mkdir_p(c->blob_dir) < 0 || mkdir_p(c->manifest_dir) < 0) {
        int rc = funcd_error_set(FUNCD_EIO, "image cache %s cannot be created: %s", o->cache_dir,
                                 strerror(errno));
        funcd_oci_client_free(c);
        return rc;
    }
    remove_stale_temps(c->blob_dir);
    int brc = o->blob_cache ? 0
                            : funcd_oci_blob_cache_open(&c->blobs, c->blob_dir,
                                                        o->blob_cache_bytes, o->logger);
    if (brc < 0) {
        funcd_oci_client_free(c);
        return brc;
    }
    if (o->blob_cache)
        c->blobs = funcd_oci_blob_cache_ref(o->blob_cache);
    if (!(c->t = oci_transport_new(loop, o, &c->stats))) {
        int rc = funcd_error_last()->code ? funcd_error_last()->code : FUNCD_EIO;
        funcd_oci_client_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void funcd_oci_client_free(funcd_oci_client *c)
{
    if (!c)
        return;
    while (c->pulls)
        funcd_oci_pull_cancel(c->pulls);
    while (c->verifies)
        verify_free(c->verifies);
    while (c->fetches) {
        blob_fetch *f = c->fetches;
        c->fetches = f->next;
        fetch_free(f);
    }
    oci_transport_free(c->t);
    funcd_oci_blob_cache_unref(c->blobs);
    event_del(&c->progress_ev);
    free(c->blob_dir);
    free(c->manifest_dir);
    free(c->auth_file);
    free(c->os);
    free(c->arch);
    free(c->verified);
    free(c);
}

const funcd_oci_stats *funcd_oci_client_stats(const funcd_oci_client *c)
{
    return &c->stats;
}

funcd_oci_blob_cache *funcd_oci_client_blob_cache(const funcd_oci_client *c)
{
    return c->blobs;
}

static void vec_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

void funcd_oci_image_free(funcd_oci_image *img)
{
    if (!img)
        return;
    funcd__oci_image_release_blobs(img);
    free(img->ref);
    free(img->digest);
    free(img->config_digest);
    free(img->os);
    free(img->arch);
    vec_free(img->entrypoint);
    vec_free(img->cmd);
    vec_free(img->env);
    free(img->working_dir);
    free(img->user);
    free(img->contract);
    for (size_t i = 0; i < img->n_layers; i++) {
        free(img->layer_digests ? img->layer_digests[i] : NULL);
        free(img->layer_media_types ? img->layer_media_types[i] : NULL);
        free(img->layer_paths ? img->layer_paths[i] : NULL);
    }
    free(img->layer_digests);
    free(img->layer_media_types);
    free(img->layer_paths);
    free(img->layer_sizes);
    free(img);
}
