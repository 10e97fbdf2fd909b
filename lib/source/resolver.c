/*
 * The source resolver (resolver.h): one entry per distinct source, shared
 * by the functions that use it; pulls on the loop, extraction and git on
 * short-lived threads whose results come back through a queue and a wakeup.
 */
#include "source/resolver.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api.h"
#include "api/internal.h"
#include "funcd/sys/error.h"
#include "oci/oci.h"
#include "oci/unpack.h"
#include "objects/objects.h"
#include "port/store.h"
#include "source/git.h"
#include "util/misc.h"

#define IMAGE_META_PREFIX "/images/"
#define IMAGE_TAG_PREFIX "/imagetags/"
#define IMAGE_NS_PREFIX "/imagens/" /* <ns>/<digest>: the namespace pulled or runs it */
/* <registry>/<repository>@<digest>: pulled with no credentials, so no
 * Function needs its own checked to get it from the cache */
#define IMAGE_PUBLIC_PREFIX "/imagepublic/"
/* <registry>/<repository>@<digest>: the image's manifest came from there, so
 * its metadata under /images/<digest> serves references to it (and only to
 * it: another registry naming the digest proves nothing; review17 H-1) */
#define IMAGE_FROM_PREFIX "/imagefrom/"
/* <url>#<ref>: the commit a poll of a branch found, when, and by which node */
#define GIT_REF_PREFIX "/gitrefs/"
/* A node that does not poll (not the cluster's leader) polls itself once no
 * resolution younger than twice the interval and this has come. */
#define UNPOLLED_MS 10000
#define RETRY_MIN_MS 2000
#define RETRY_MAX_MS (5 * 60 * 1000)
#define FINISHED_PULLS_KEPT 64

/* A function waiting on a source (ns/name), or a one-shot callback (cb). */
typedef struct waiter {
    char *ns, *name;
    funcd_sources_cb cb;
    void *payload;
    struct waiter *next;
} waiter;

enum { E_PENDING = 0, E_READY = 1, E_FAILED = -1 };

typedef struct entry {
    funcd_sources *s;
    char *key;
    int is_image;
    char *ns, *ref, *secrets; /* image: the namespace and pull secrets (comma-separated) */
    char *url, *gref, *path;  /* git */
    int state;
    int busy;
    char reason[64], message[512];
    funcd_source_result res; /* E_READY */
    char *held_digest;       /* the rootfs we hold in the cache */
    int64_t resolved_ms;     /* monotonic: the last resolution that worked */
    int64_t resolved_wall;   /* wall ms of that resolution, or of the poller's it took */
    int64_t retry_ms;        /* E_FAILED: when to try again */
    unsigned failures;
    uint64_t bytes_done, bytes_total;
    unsigned layers_done, layers_total;
    waiter *waiters;
    funcd_oci_pull_handle *pull;
    funcd_oci_verify_handle *verify; /* checking this entry's credentials for `checking` */
    funcd_oci_image *checking;       /* a cached image, until its check answers */
    int checking_remembered;         /* it came from the store (not from a pull) */
    int by_digest; /* this pull fetches the digest another node resolved the tag to */
    int read_tag;  /* an explicit pull (the API's): read the tag at the registry, whatever
                      the store says another node found it to be a moment ago */
    struct entry *next;
} entry;

/* Work for a thread, and its answer. */
typedef struct job {
    entry *e;
    funcd_oci_image *img; /* unpack */
    int rc;
    char err[512];
    funcd_git_result git;
    char rootfs[1024];
    pthread_t tid; /* joined by the loop once the job is done */
    struct job *next;
} job;

/* A pull asked for through the API; updated by the loop, read by any thread. */
typedef struct api_pull {
    char id[40];
    char *key;
    char *ns, *ref, *secrets;
    int started;
    funcd_pull_state st;
    int64_t finished_ms;
    struct api_pull *next;
} api_pull;

struct funcd_sources {
    funcd_sources_config cfg;
    char *images_dir, *git_dir;
    char *node; /* cfg.node, copied */
    funcd_oci_client *oci;
    funcd_oci_blob_cache *blobs; /* opened at start: a smaller cap applies before any pull */
    funcd_rootfs_cache *rootfs;
    entry *entries;
    struct event *wake, *tick;
    pthread_mutex_t lock; /* done, pulls, threads */
    pthread_cond_t idle;
    job *done;
    api_pull *pulls;
    unsigned threads;
    funcd_git_cancel *git_cancel; /* fired at free: no waiting for a silent git server */
    int git_held;
    funcd_oci_client_options oci_opts; /* the client is made at the first pull */
};

/* ---- small helpers ------------------------------------------------------ */

static char **strv_copy(char *const *v)
{
    return v ? funcd_strv_dup((const char *const *)v) : NULL;
}

void funcd_source_result_clear(funcd_source_result *r)
{
    funcd_strv_free(r->entrypoint);
    funcd_strv_free(r->cmd);
    funcd_strv_free(r->env);
    free(r->working_dir);
    free(r->user);
    memset(r, 0, sizeof(*r));
}

static int result_copy(funcd_source_result *to, const funcd_source_result *from)
{
    memset(to, 0, sizeof(*to));
    to->is_image = from->is_image;
    memcpy(to->dir, from->dir, sizeof(to->dir));
    memcpy(to->resolved, from->resolved, sizeof(to->resolved));
    to->entrypoint = strv_copy(from->entrypoint);
    to->cmd = strv_copy(from->cmd);
    to->env = strv_copy(from->env);
    to->working_dir = funcd_strdup(from->working_dir);
    to->user = funcd_strdup(from->user);
    if ((from->entrypoint && !to->entrypoint) || (from->cmd && !to->cmd) ||
        (from->env && !to->env) || (from->working_dir && !to->working_dir) ||
        (from->user && !to->user)) {
        funcd_source_result_clear(to);
        return FUNCD_ENOMEM;
    }
    return 0;
}

static void set_failure(entry *e, const char *reason, const char *message)
{
    e->state = E_FAILED;
    snprintf(e->reason, sizeof(e->reason), "%s", reason);
    snprintf(e->message, sizeof(e->message), "%s", message);
    e->failures++;
    int64_t backoff = RETRY_MIN_MS << (e->failures < 8 ? e->failures - 1 : 7);
    e->retry_ms = funcd_mono_ms() + (backoff > RETRY_MAX_MS ? RETRY_MAX_MS : backoff);
}

static void notify(entry *e)
{
    funcd_sources *s = e->s;
    for (waiter **pp = &e->waiters; *pp;) {
        waiter *w = *pp;
        if (!w->cb) {
            if (s->cfg.changed)
                s->cfg.changed(w->ns, w->name, s->cfg.changed_payload);
            pp = &w->next;
            continue;
        }
        *pp = w->next; /* one-shot: unlinked before it runs, so it may resolve again */
        w->cb(w->payload);
        free(w);
    }
}

/* Copies the entry's outcome to the API pulls that follow it. */
static void publish(entry *e, int finished)
{
    funcd_sources *s = e->s;
    pthread_mutex_lock(&s->lock);
    for (api_pull *p = s->pulls; p; p = p->next) {
        if (!p->started || p->st.done || strcmp(p->key, e->key) != 0)
            continue;
        p->st.bytes_done = e->bytes_done;
        p->st.bytes_total = e->bytes_total;
        p->st.layers_done = e->layers_done;
        p->st.layers_total = e->layers_total;
        if (!finished)
            continue;
        p->st.done = 1;
        p->finished_ms = funcd_mono_ms();
        p->st.failed = e->state != E_READY;
        if (e->state == E_READY)
            snprintf(p->st.digest, sizeof(p->st.digest), "%s", e->res.resolved);
        snprintf(p->st.message, sizeof(p->st.message), "%s",
                 e->state == E_READY ? "pulled" : e->message);
        p->st.layers_done = p->st.layers_total = (unsigned)(e->state == E_READY
                                                                ? e->layers_total : 0);
    }
    pthread_mutex_unlock(&s->lock);
}

/* ---- threads -------------------------------------------------------------- */

static void job_free(job *j)
{
    if (j->img)
        funcd_oci_image_free(j->img);
    free(j);
}

static void *thread_main(void *arg)
{
    job *j = arg;
    entry *e = j->e;
    funcd_sources *s = e->s;
    if (j->img) {
        funcd_oci_image *img = j->img;
        j->rc = funcd_rootfs_cache_get(s->rootfs, img->digest, (const char *const *)img->layer_paths,
                                       (const char *const *)img->layer_media_types, img->n_layers,
                                       j->rootfs, sizeof(j->rootfs), j->err, sizeof(j->err));
    } else { /* the hosts the operator named for pulls are reached at any address */
        funcd_git_options opts = {.insecure_hosts = s->cfg.insecure,
                                  .allowed_hosts = s->cfg.allowed,
                                  .cancel = s->git_cancel};
        j->rc = funcd_git_fetch_opts(s->git_dir, e->url, e->gref, e->path, &opts, &j->git,
                                     j->err, sizeof(j->err));
    }
    pthread_mutex_lock(&s->lock);
    j->next = s->done;
    s->done = j;
    pthread_mutex_unlock(&s->lock);
    event_active(s->wake, EV_READ, 0);
    pthread_mutex_lock(&s->lock);
    if (--s->threads == 0)
        pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* Loop thread only. The thread is joined (on the loop, or at free) after
 * it handed its job back: libgit2 frees a thread's error record only as
 * the thread exits, so it must be gone before funcd_git_shutdown, which
 * deletes the key that record hangs on. */
static int run_thread(funcd_sources *s, job *j)
{
    pthread_mutex_lock(&s->lock);
    s->threads++;
    pthread_mutex_unlock(&s->lock);
    int err = pthread_create(&j->tid, NULL, thread_main, j);
    if (err) {
        pthread_mutex_lock(&s->lock);
        s->threads--;
        pthread_mutex_unlock(&s->lock);
        return funcd_error_set(FUNCD_EIO, "cannot start a thread: %s", strerror(err));
    }
    return 0;
}

/* ---- image metadata in the store ------------------------------------------- */

static void add_strv(cJSON *obj, const char *name, char *const *v)
{
    if (!v)
        return;
    cJSON *a = cJSON_AddArrayToObject(obj, name);
    for (char *const *p = v; a && *p; p++)
        cJSON_AddItemToArray(a, cJSON_CreateString(*p));
}

static char **get_strv(const cJSON *obj, const char *name)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (!cJSON_IsArray(a))
        return NULL;
    size_t n = (size_t)cJSON_GetArraySize(a), i = 0;
    char **v = calloc(n + 1, sizeof(*v));
    const cJSON *it;
    cJSON_ArrayForEach(it, a) if (v && cJSON_IsString(it)) v[i++] = strdup(it->valuestring);
    return v;
}

static void store_json(funcd_sources *s, const char *prefix, const char *id, cJSON *obj)
{
    char *text = cJSON_PrintUnformatted(obj);
    funcd_buf key = FUNCD_BUF_INIT;
    if (text && funcd_buf_printf(&key, "%s%s", prefix, id) == 0 &&
        funcd_port_store_put(s->cfg.store, key.data, text, strlen(text), FUNCD_STORE_ANY, NULL) < 0)
        funcd_log(s->cfg.logger, FUNCD_LOG_WARN, "keeping source metadata %s%s: %s", prefix,
                  id, funcd_error_last()->message);
    funcd_buf_free(&key);
    free(text);
}

static cJSON *load_json(funcd_sources *s, const char *prefix, const char *id)
{
    funcd_buf key = FUNCD_BUF_INIT;
    funcd_store_value v = {0};
    cJSON *obj = NULL;
    if (funcd_buf_printf(&key, "%s%s", prefix, id) == 0 &&
        funcd_port_store_get(s->cfg.store, key.data, &v) == 0) {
        obj = cJSON_ParseWithLength(v.value, v.len);
        free(v.value);
    }
    funcd_buf_free(&key);
    return obj;
}

/* "<registry>/<repository>@<digest>" of `ref`'s image, or "" */
static void image_key(const char *ref, const char *digest, char *out, size_t n)
{
    funcd_oci_ref r;
    out[0] = 0;
    if (funcd_oci_ref_parse(&r, ref) == 0) {
        snprintf(out, n, "%s/%s@%s", r.registry, r.repository, digest);
        funcd_oci_ref_free(&r);
    }
}

/* Whether the store has `prefix` + image_key(ref, digest). */
static int has_image_key(funcd_sources *s, const char *prefix, const char *ref,
                         const char *digest)
{
    char key[512];
    image_key(ref, digest, key, sizeof(key));
    cJSON *o = key[0] ? load_json(s, prefix, key) : NULL;
    cJSON_Delete(o);
    return o != NULL;
}

static void put_image_key(funcd_sources *s, const char *prefix, const char *ref,
                          const char *digest)
{
    char key[512];
    image_key(ref, digest, key, sizeof(key));
    cJSON *o = cJSON_CreateObject();
    if (key[0] && o)
        store_json(s, prefix, key, o);
    cJSON_Delete(o);
}

/* That this node read `ref`'s tag at the registry just now: it named `digest`. */
static void remember_tag(funcd_sources *s, const char *ref, const char *digest)
{
    cJSON *t = cJSON_CreateObject();
    if (!t)
        return;
    cJSON_AddStringToObject(t, "digest", digest);
    cJSON_AddNumberToObject(t, "resolvedAtMs", (double)funcd_now_ms());
    store_json(s, IMAGE_TAG_PREFIX, ref, t);
    cJSON_Delete(t);
}

/* The image's metadata under its digest, that `ref`'s registry and
 * repository hold it and, when `tag_resolved` (this node read the tag at the
 * registry), the tag's digest and when. */
static void remember_image(funcd_sources *s, const char *ref, const funcd_oci_image *img,
                           int tag_resolved)
{
    cJSON *m = cJSON_CreateObject();
    if (!m)
        return;
    char ts[40];
    funcd_rfc3339(funcd_now_ms(), ts, sizeof(ts));
    cJSON_AddStringToObject(m, "digest", img->digest);
    cJSON_AddStringToObject(m, "ref", ref);
    cJSON_AddStringToObject(m, "os", img->os ? img->os : "");
    cJSON_AddStringToObject(m, "architecture", img->arch ? img->arch : "");
    add_strv(m, "entrypoint", img->entrypoint);
    add_strv(m, "cmd", img->cmd);
    add_strv(m, "env", img->env);
    if (img->working_dir)
        cJSON_AddStringToObject(m, "workingDir", img->working_dir);
    if (img->user)
        cJSON_AddStringToObject(m, "user", img->user);
    cJSON *contract = img->contract ? cJSON_Parse(img->contract) : NULL;
    if (cJSON_IsObject(contract)) /* the typed edges' checks read it (funcd_sources_image_contract) */
        cJSON_AddItemToObject(m, "contract", contract);
    else
        cJSON_Delete(contract);
    uint64_t size = 0;
    cJSON *layers = cJSON_AddArrayToObject(m, "layers");
    for (size_t i = 0; layers && i < img->n_layers; i++) {
        cJSON *l = cJSON_CreateObject();
        cJSON_AddStringToObject(l, "digest", img->layer_digests[i]);
        cJSON_AddStringToObject(l, "mediaType", img->layer_media_types[i]);
        cJSON_AddNumberToObject(l, "size", (double)img->layer_sizes[i]);
        cJSON_AddItemToArray(layers, l);
        size += img->layer_sizes[i];
    }
    cJSON_AddNumberToObject(m, "size", (double)size);
    cJSON_AddStringToObject(m, "pulledAt", ts);
    store_json(s, IMAGE_META_PREFIX, img->digest, m);
    cJSON_Delete(m);
    put_image_key(s, IMAGE_FROM_PREFIX, ref, img->digest);
    if (tag_resolved)
        remember_tag(s, ref, img->digest);
}

static char *blob_path(funcd_sources *s, const char *digest)
{
    char *p = NULL;
    if (strncmp(digest, "sha256:", 7) != 0 ||
        asprintf(&p, "%s/blobs/sha256/%s", s->images_dir, digest + 7) < 0)
        return NULL;
    return p;
}

/* The digest the store says `ref`'s tag named when some node (this one,
 * or another sharing the store) last read it at the registry, if that was
 * less than the refresh interval ago; its age in `*age_ms`. NULL if not. */
static char *tag_within(funcd_sources *s, const char *ref, uint64_t every, int64_t *age_ms);

static char *fresh_tag(funcd_sources *s, const char *ref, int64_t *age_ms)
{
    return tag_within(s, ref, s->cfg.tag_refresh_ms ? s->cfg.tag_refresh_ms : 5 * 60 * 1000,
                      age_ms);
}

/* The same, for a record younger than `every`. */
static char *tag_within(funcd_sources *s, const char *ref, uint64_t every, int64_t *age_ms)
{
    cJSON *t = load_json(s, IMAGE_TAG_PREFIX, ref);
    double at = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(t, "resolvedAtMs"));
    const char *d = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "digest"));
    int64_t age = at == at ? funcd_now_ms() - (int64_t)at : INT64_MAX;
    char *digest = d && age >= 0 && age < (int64_t)every ? strdup(d) : NULL;
    cJSON_Delete(t);
    if (age_ms)
        *age_ms = age;
    return digest;
}

/* The image as remembered, if the tag is fresh (or pinned by digest), it
 * was pulled from `ref`'s registry and repository, and its rootfs or every
 * layer is still in the cache: a restart needs no registry. The layers are
 * held in the blob cache (then looked for) until the image is freed, after
 * unpacking; with the rootfs there they are not needed (the blob cache may
 * have evicted them), unless the rootfs goes before the unpack: then that
 * fails, and the retry pulls. */
static funcd_oci_image *remembered_image(funcd_sources *s, const char *ref)
{
    funcd_oci_ref r;
    if (funcd_oci_ref_parse(&r, ref) < 0)
        return NULL;
    char *digest = r.digest ? strdup(r.digest) : NULL;
    funcd_oci_ref_free(&r);
    if (!digest)
        digest = fresh_tag(s, ref, NULL);
    cJSON *m = digest && has_image_key(s, IMAGE_FROM_PREFIX, ref, digest)
                   ? load_json(s, IMAGE_META_PREFIX, digest)
                   : NULL;
    funcd_oci_image *img = m ? calloc(1, sizeof(*img)) : NULL;
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(m, "layers");
    size_t n = (size_t)cJSON_GetArraySize(layers);
    if (img) {
        img->ref = strdup(ref);
        img->digest = digest;
        digest = NULL;
        img->entrypoint = get_strv(m, "entrypoint");
        img->cmd = get_strv(m, "cmd");
        img->env = get_strv(m, "env");
        img->working_dir = funcd_strdup(
            cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "workingDir")));
        img->user = funcd_strdup(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "user")));
        img->layer_digests = calloc(n + 1, sizeof(char *));
        img->layer_media_types = calloc(n + 1, sizeof(char *));
        img->layer_paths = calloc(n + 1, sizeof(char *));
        img->layer_sizes = calloc(n + 1, sizeof(uint64_t));
    }
    int ok = img && img->ref && img->layer_digests && img->layer_media_types && img->layer_paths &&
             img->layer_sizes && n > 0;
    const cJSON *l;
    cJSON_ArrayForEach(l, layers)
    {
        const char *d = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(l, "digest"));
        const char *mt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(l, "mediaType"));
        if (!ok || !d || !mt)
            break;
        size_t i = img->n_layers++;
        img->layer_digests[i] = strdup(d);
        img->layer_media_types[i] = strdup(mt);
        img->layer_paths[i] = blob_path(s, d);
        ok = img->layer_digests[i] && img->layer_media_types[i] && img->layer_paths[i];
    }
    free(digest);
    cJSON_Delete(m);
    ok = ok && img->n_layers == n && funcd_oci_image_hold_blobs(img, s->blobs) == 0;
    int extracted = ok && funcd_rootfs_cache_has(s->rootfs, img->digest);
    for (size_t i = 0; ok && !extracted && i < img->n_layers; i++)
        ok = access(img->layer_paths[i], R_OK) == 0;
    if (img && !ok) {
        funcd_oci_image_free(img);
        return NULL;
    }
    return img;
}

/* ---- pull secrets --------------------------------------------------------------- */

/* The .dockerconfigjson of a Secret, malloc()ed, or NULL. */
static char *secret_config(funcd_sources *s, const char *ns, const char *name)
{
    const funcd_kind *kind = funcd_kind_by_plural("secrets");
    cJSON *obj = NULL;
    uint64_t rev;
    if (!kind || funcd_objects_get(s->cfg.store, kind, ns, name, &obj, &rev) < 0)
        return NULL;
    const char *b64 = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(obj, "data"), ".dockerconfigjson"));
    size_t len = 0;
    char *out = NULL;
    if (b64 && funcd__api_base64_decoded_len(b64, strlen(b64), &len) == 0 &&
        (out = malloc(len + 1))) {
        funcd__api_base64_decode(b64, strlen(b64), (unsigned char *)out);
        out[len] = 0;
    }
    cJSON_Delete(obj);
    return out;
}

/* One Docker config JSON holding the "auths" of every named Secret. */
static char *merged_secrets(funcd_sources *s, const char *ns, const char *names,
                            char *missing, size_t missing_len)
{
    missing[0] = 0;
    if (!names || !*names)
        return NULL;
    cJSON *all = cJSON_CreateObject();
    cJSON *auths = all ? cJSON_AddObjectToObject(all, "auths") : NULL;
    char *copy = strdup(names), *save = NULL;
    for (char *n = copy ? strtok_r(copy, ",", &save) : NULL; n && auths;
         n = strtok_r(NULL, ",", &save)) {
        char *text = secret_config(s, ns, n);
        cJSON *cfg = text ? cJSON_Parse(text) : NULL;
        free(text);
        if (!cfg) {
            snprintf(missing, missing_len, "%s", n);
            continue;
        }
        cJSON *a;
        cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(cfg, "auths")) if (
            a->string && !cJSON_GetObjectItemCaseSensitive(auths, a->string))
            cJSON_AddItemToObject(auths, a->string, cJSON_Duplicate(a, 1));
        cJSON_Delete(cfg);
    }
    free(copy);
    char *out = all ? cJSON_PrintUnformatted(all) : NULL;
    cJSON_Delete(all);
    return out;
}

/* ---- starting work ---------------------------------------------------------- */

static void start(entry *e);

static void start_unpack(entry *e, funcd_oci_image *img)
{
    job *j = calloc(1, sizeof(*j));
    if (!j) {
        funcd_oci_image_free(img);
        set_failure(e, "InternalError", "out of memory");
        e->busy = 0;
        return;
    }
    j->e = e;
    j->img = img;
    snprintf(e->reason, sizeof(e->reason), "Extracting");
    if (run_thread(e->s, j) < 0) {
        job_free(j);
        set_failure(e, "InternalError", funcd_error_last()->message);
        e->busy = 0;
        publish(e, 1);
        notify(e);
    }
}

static void on_progress(uint64_t done, uint64_t total, void *payload)
{
    entry *e = payload;
    e->bytes_done = done;
    e->bytes_total = total;
    if (e->pull)
        funcd_oci_pull_layers(e->pull, &e->layers_done, &e->layers_total);
    publish(e, 0);
}

/* The image may run for this entry: what a pull brought, or what was
 * remembered, once this entry's credentials are known to read it. */
static void image_allowed(entry *e, funcd_oci_image *img, int remembered)
{
    if (remembered) {
        start_unpack(e, img);
        return;
    }
    if (e->state == E_READY && strcmp(img->digest, e->res.resolved) == 0) {
        e->resolved_ms = funcd_mono_ms(); /* the tag still names the same image */
        e->busy = 0;
        e->layers_done = e->layers_total = (unsigned)img->n_layers;
        if (img->unchanged) { /* only its manifest was read: its metadata is stored already */
            if (!e->by_digest)
                remember_tag(e->s, e->ref, img->digest);
        } else {
            remember_image(e->s, e->ref, img, !e->by_digest);
        }
        funcd_oci_image_free(img);
        publish(e, 1);
        return;
    }
    remember_image(e->s, e->ref, img, !e->by_digest);
    start_unpack(e, img);
}

static void image_refused(entry *e, const char *message)
{
    char msg[600];
    snprintf(msg, sizeof(msg), "pulling %s: %s", e->ref, message ? message : "failed");
    e->busy = 0;
    if (e->state == E_READY) { /* a refresh failed: keep what runs */
        funcd_log(e->s->cfg.logger, FUNCD_LOG_WARN, "%s", msg);
        e->resolved_ms = funcd_mono_ms();
    } else {
        set_failure(e, "ImagePullFailed", msg);
        notify(e);
    }
    publish(e, 1);
}

static void on_checked(int rc, const char *message, void *payload)
{
    entry *e = payload;
    funcd_oci_image *img = e->checking;
    e->verify = NULL;
    e->checking = NULL;
    if (rc < 0) {
        funcd_log(e->s->cfg.logger, FUNCD_LOG_INFO, "image %s (%s) in namespace %s: cached "
                  "copy refused: %s", e->ref, img->digest, e->ns, message ? message : "");
        funcd_oci_image_free(img);
        image_refused(e, message);
        return;
    }
    image_allowed(e, img, e->checking_remembered);
}

static int ensure_client(funcd_sources *s)
{
    if (!s->oci && funcd_oci_client_new(&s->oci, s->cfg.loop, &s->oci_opts) < 0)
        return -1;
    return 0;
}

/*
 * An image this entry did not just read from the registry itself (it was
 * remembered, or its manifest was in the cache) runs only when it is
 * public or the entry's own credentials read its manifest at the registry
 * (funcd_oci_verify; docs/adr/0023-cached-image-credentials.md). That is
 * the registry and repository the image was pulled from: neither cache
 * serves a reference naming another (remembered_image; the client's
 * manifests are kept per repository).
 */
static void check_image(entry *e, funcd_oci_image *img, int remembered)
{
    funcd_sources *s = e->s;
    if (img->from_registry) {
        if (!img->with_credentials) /* anyone may read it */
            put_image_key(s, IMAGE_PUBLIC_PREFIX, e->ref, img->digest);
        image_allowed(e, img, remembered);
        return;
    }
    if (has_image_key(s, IMAGE_PUBLIC_PREFIX, e->ref, img->digest)) {
        image_allowed(e, img, remembered);
        return;
    }
    char missing[128];
    char *cfg = merged_secrets(s, e->ns, e->secrets, missing, sizeof(missing));
    snprintf(e->reason, sizeof(e->reason), "Pulling");
    e->checking = img;
    e->checking_remembered = remembered;
    int rc = ensure_client(s);
    if (rc == 0)
        rc = funcd_oci_verify(s->oci, e->ref, img->digest, cfg, on_checked, e, &e->verify);
    free(cfg);
    if (rc < 0) {
        e->checking = NULL;
        funcd_oci_image_free(img);
        image_refused(e, funcd_error_last()->message);
    }
}

static void start_pull(entry *e, const char *ref);

static void on_pulled(int rc, const char *message, funcd_oci_image *img, void *payload)
{
    entry *e = payload;
    e->pull = NULL;
    if (rc < 0 && e->by_digest) { /* the digest is gone from the registry: read the tag */
        e->by_digest = 0;
        start_pull(e, e->ref);
        return;
    }
    if (rc < 0) {
        image_refused(e, message);
        return;
    }
    check_image(e, img, 0);
}

/* Pulls `ref` (the entry's own, or the digest another node resolved its
 * tag to: then no request names the tag). */
static void start_pull(entry *e, const char *ref)
{
    funcd_sources *s = e->s;
    char missing[128];
    char *cfg = merged_secrets(s, e->ns, e->secrets, missing, sizeof(missing));
    if (missing[0]) {
        char msg[256];
        snprintf(msg, sizeof(msg), "imagePullSecrets: Secret \"%s\" is missing or has no "
                 ".dockerconfigjson", missing);
        funcd_log(s->cfg.logger, FUNCD_LOG_WARN, "image %s: %s", e->ref, msg);
    }
    snprintf(e->reason, sizeof(e->reason), "Pulling");
    if (ensure_client(s) < 0) {
        free(cfg);
        e->busy = 0;
        set_failure(e, "ImagePullFailed", funcd_error_last()->message);
        publish(e, 1);
        notify(e);
        return;
    }
    /* A refresh of what runs reads the manifest only while the digest is the
     * same: the rootfs is there, its blobs (maybe evicted) are not needed. */
    const char *have = e->state == E_READY ? e->res.resolved : NULL;
    int rc = funcd_oci_pull_if_changed(s->oci, ref, have, cfg, on_progress, on_pulled, e,
                                       &e->pull);
    free(cfg);
    if (rc < 0) {
        e->busy = 0;
        set_failure(e, "ImagePullFailed", funcd_error_last()->message);
        publish(e, 1);
        notify(e);
    }
}

/*
 * Nodes sharing a store share tag resolutions: when the store has a fresh
 * digest for the entry's tag (another node read the tag, or this one did
 * before a restart but its layers are gone), the tag is not read again.
 * The same digest as what runs only moves the next refresh to that
 * resolution's; another one is pulled by digest. 1 when handled.
 */
static int tag_known(entry *e)
{
    funcd_oci_ref r;
    if (strchr(e->ref, '@') || funcd_oci_ref_parse(&r, e->ref) < 0)
        return 0;
    int64_t age = 0;
    char *digest = fresh_tag(e->s, e->ref, &age);
    char pinned[512];
    snprintf(pinned, sizeof(pinned), "%s/%s@%s", r.registry, r.repository, digest ? digest : "");
    funcd_oci_ref_free(&r);
    if (!digest)
        return 0;
    if (e->state == E_READY && strcmp(digest, e->res.resolved) == 0) {
        e->resolved_ms = funcd_mono_ms() - age;
        e->busy = 0;
        publish(e, 1);
    } else {
        e->by_digest = 1;
        start_pull(e, pinned);
    }
    free(digest);
    return 1;
}

static void start(entry *e)
{
    e->busy = 1;
    e->bytes_done = e->bytes_total = 0;
    e->layers_done = e->layers_total = 0;
    if (!e->is_image) {
        if (!e->s->git_held) { /* libgit2 (and its TLS library) at the first fetch */
            funcd_git_init();
            e->s->git_held = 1;
        }
        job *j = calloc(1, sizeof(*j));
        snprintf(e->reason, sizeof(e->reason), "Fetching");
        if (j)
            j->e = e;
        if (!j || run_thread(e->s, j) < 0) {
            free(j);
            e->busy = 0;
            set_failure(e, "GitFetchFailed", "cannot start a thread for the fetch");
            notify(e);
        }
        return;
    }
    e->by_digest = 0;
    if (e->state != E_READY) { /* first resolution: what a previous run pulled will do */
        funcd_oci_image *img = remembered_image(e->s, e->ref);
        if (img) {
            check_image(e, img, 1);
            return;
        }
    }
    int read_tag = e->read_tag;
    e->read_tag = 0;
    if (!read_tag && tag_known(e))
        return;
    start_pull(e, e->ref);
}

/* ---- results ------------------------------------------------------------------- */

/* Whether this node polls tags and branches (funcd_sources_config.polls). */
static int polls(funcd_sources *s)
{
    return !s->cfg.polls || s->cfg.polls(s->cfg.polls_payload);
}

static void git_ref_id(const entry *e, funcd_buf *id)
{
    funcd_buf_printf(id, "%s#%s", e->url, e->gref ? e->gref : "");
}

/* What a fetch found, for the nodes that do not poll (on_tick). */
static void remember_commit(funcd_sources *s, const entry *e)
{
    funcd_buf id = FUNCD_BUF_INIT;
    cJSON *t = cJSON_CreateObject();
    git_ref_id(e, &id);
    if (t && id.data) {
        cJSON_AddStringToObject(t, "commit", e->res.resolved);
        cJSON_AddNumberToObject(t, "resolvedAtMs", (double)e->resolved_wall);
        if (s->node)
            cJSON_AddStringToObject(t, "node", s->node);
        store_json(s, GIT_REF_PREFIX, id.data, t);
    }
    cJSON_Delete(t);
    funcd_buf_free(&id);
}

/*
 * A node that does not poll takes what the poller (the cluster's leader)
 * resolved, from the store: a record younger than `window` naming what
 * runs moves the next look by an interval; one naming another digest or a
 * newer commit is pulled by digest or fetched. Nothing else: the caller
 * polls itself once no record has come for the whole window.
 */
static void follow(entry *e, uint64_t window)
{
    funcd_sources *s = e->s;
    int64_t age = 0;
    if (e->is_image) {
        char *digest = tag_within(s, e->ref, window, &age);
        if (digest && strcmp(digest, e->res.resolved) == 0) {
            e->resolved_ms = funcd_mono_ms();
        } else if (digest) {
            funcd_oci_ref r;
            if (funcd_oci_ref_parse(&r, e->ref) == 0) {
                char pinned[512];
                snprintf(pinned, sizeof(pinned), "%s/%s@%s", r.registry, r.repository, digest);
                funcd_oci_ref_free(&r);
                e->busy = 1;
                e->bytes_done = e->bytes_total = 0;
                e->layers_done = e->layers_total = 0;
                e->by_digest = 1;
                start_pull(e, pinned);
            }
        }
        free(digest);
        return;
    }
    funcd_buf id = FUNCD_BUF_INIT;
    git_ref_id(e, &id);
    cJSON *t = id.data ? load_json(s, GIT_REF_PREFIX, id.data) : NULL;
    funcd_buf_free(&id);
    const char *commit = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "commit"));
    double at = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(t, "resolvedAtMs"));
    age = at == at ? funcd_now_ms() - (int64_t)at : INT64_MAX;
    if (commit && age >= 0 && age < (int64_t)window) {
        if (strcmp(commit, e->res.resolved) == 0)
            e->resolved_ms = funcd_mono_ms();
        else if ((int64_t)at > e->resolved_wall)
            start(e); /* the fetch takes the branch's tip: that commit, or a newer one */
    }
    cJSON_Delete(t);
}

static void image_ready(entry *e, job *j)
{
    funcd_sources *s = e->s;
    funcd_oci_image *img = j->img;
    char *old = e->held_digest;
    e->held_digest = strdup(img->digest);
    e->layers_done = e->layers_total = (unsigned)img->n_layers;
    funcd_source_result_clear(&e->res);
    e->res.is_image = 1;
    snprintf(e->res.dir, sizeof(e->res.dir), "%s", j->rootfs);
    snprintf(e->res.resolved, sizeof(e->res.resolved), "%s", img->digest);
    e->res.entrypoint = strv_copy(img->entrypoint);
    e->res.cmd = strv_copy(img->cmd);
    e->res.env = strv_copy(img->env);
    e->res.working_dir = funcd_strdup(img->working_dir);
    e->res.user = funcd_strdup(img->user);
    if (!old || strcmp(old, img->digest) != 0) { /* GET /images shows it to e->ns, as e->ref */
        char key[400];
        snprintf(key, sizeof(key), "%s/%s", e->ns, img->digest);
        cJSON *o = cJSON_CreateObject();
        if (o && cJSON_AddStringToObject(o, "ref", e->ref))
            store_json(s, IMAGE_NS_PREFIX, key, o);
        cJSON_Delete(o);
    }
    if (old) {
        funcd_rootfs_cache_put(s->rootfs, old);
        free(old);
    }
}

static void finish(funcd_sources *s, job *j)
{
    entry *e = j->e;
    e->busy = 0;
    if (j->rc < 0) {
        char msg[700];
        snprintf(msg, sizeof(msg), "%s", j->err);
        if (e->state == E_READY) {
            funcd_log(s->cfg.logger, FUNCD_LOG_WARN, "refreshing %s: %s",
                      e->is_image ? e->ref : e->url, msg);
            e->resolved_ms = funcd_mono_ms();
        } else {
            set_failure(e, e->is_image ? "ImageExtractFailed" : "GitFetchFailed", msg);
            notify(e);
        }
        publish(e, 1);
        return;
    }
    int changed = e->state != E_READY;
    if (e->is_image) {
        changed = 1;
        image_ready(e, j);
    } else if (changed || strcmp(e->res.resolved, j->git.commit) != 0) {
        changed = 1;
        funcd_source_result_clear(&e->res);
        snprintf(e->res.dir, sizeof(e->res.dir), "%s", j->git.dir);
        snprintf(e->res.resolved, sizeof(e->res.resolved), "%s", j->git.commit);
    }
    e->state = E_READY;
    e->failures = 0;
    e->resolved_ms = funcd_mono_ms();
    e->resolved_wall = funcd_now_ms();
    if (!e->is_image && polls(s))
        remember_commit(s, e);
    publish(e, 1);
    if (changed)
        notify(e);
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    funcd_sources *s = arg;
    pthread_mutex_lock(&s->lock);
    job *list = s->done;
    s->done = NULL;
    pthread_mutex_unlock(&s->lock);
    while (list) {
        job *j = list;
        list = j->next;
        pthread_join(j->tid, NULL); /* it is past its last touch of `s` */
        finish(s, j);
        job_free(j);
    }
}

/* ---- entries ----------------------------------------------------------------- */

static int refreshable(const entry *e)
{
    if (!e->is_image)
        return 1;
    return strchr(e->ref, '@') == NULL; /* a digest never changes */
}

static void start_api_pulls(funcd_sources *s);

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    funcd_sources *s = arg;
    int64_t now = funcd_mono_ms();
    uint64_t tag_every = s->cfg.tag_refresh_ms ? s->cfg.tag_refresh_ms : 5 * 60 * 1000;
    uint64_t git_every = s->cfg.git_poll_ms ? s->cfg.git_poll_ms : 60 * 1000;
    /* Tags and branches are polled once for the cluster, by its leader
     * (docs/adr/0044-nodes-and-leases.md); the others take its resolutions
     * from the store, and poll themselves only when none comes. */
    int poller = polls(s);
    for (entry *e = s->entries; e; e = e->next) {
        if (e->busy || !e->waiters)
            continue;
        uint64_t every = e->is_image ? tag_every : git_every;
        uint64_t window = 2 * every + UNPOLLED_MS;
        if (e->state == E_FAILED && now >= e->retry_ms)
            start(e);
        else if (e->state != E_READY || !refreshable(e) || now - e->resolved_ms < (int64_t)every)
            continue;
        else if (poller || now - e->resolved_ms >= (int64_t)window)
            start(e);
        else
            follow(e, window);
    }
    start_api_pulls(s);
}

static entry *find_entry(funcd_sources *s, const char *key)
{
    for (entry *e = s->entries; e; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

static void entry_free(entry *e)
{
    if (e->pull)
        funcd_oci_pull_cancel(e->pull);
    if (e->verify)
        funcd_oci_verify_cancel(e->verify);
    funcd_oci_image_free(e->checking);
    while (e->waiters) {
        waiter *w = e->waiters;
        e->waiters = w->next;
        free(w->ns);
        free(w->name);
        free(w);
    }
    if (e->held_digest)
        funcd_rootfs_cache_put(e->s->rootfs, e->held_digest);
    free(e->held_digest);
    funcd_source_result_clear(&e->res);
    free(e->key);
    free(e->ns);
    free(e->ref);
    free(e->secrets);
    free(e->url);
    free(e->gref);
    free(e->path);
    free(e);
}

static entry *new_entry(funcd_sources *s, const char *key, int is_image)
{
    entry *e = calloc(1, sizeof(*e));
    if (!e || !(e->key = strdup(key))) {
        free(e);
        return NULL;
    }
    e->s = s;
    e->is_image = is_image;
    e->next = s->entries;
    s->entries = e;
    return e;
}

static entry *image_entry(funcd_sources *s, const char *ns, const char *ref, const char *secrets)
{
    funcd_buf key = FUNCD_BUF_INIT;
    entry *e = NULL;
    if (funcd_buf_printf(&key, "i|%s|%s|%s", ns, ref, secrets) == 0 &&
        !(e = find_entry(s, key.data)) && (e = new_entry(s, key.data, 1))) {
        e->ns = strdup(ns);
        e->ref = strdup(ref);
        e->secrets = strdup(secrets);
    }
    funcd_buf_free(&key);
    return e;
}

static const char *str_at(const cJSON *obj, const char *key)
{
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(obj, key));
}

/* The entry for `spec`'s source, created if new; NULL on OOM. */
static entry *entry_for(funcd_sources *s, const char *ns, const cJSON *spec)
{
    const cJSON *source = cJSON_GetObjectItemCaseSensitive(spec, "source");
    const char *image = str_at(source, "image");
    if (image) {
        funcd_buf secrets = FUNCD_BUF_INIT;
        const cJSON *n;
        cJSON_ArrayForEach(n, cJSON_GetObjectItemCaseSensitive(spec, "imagePullSecrets"))
            if (cJSON_IsString(n))
                funcd_buf_printf(&secrets, "%s%s", secrets.len ? "," : "", n->valuestring);
        entry *e = image_entry(s, ns, image, secrets.data ? secrets.data : "");
        funcd_buf_free(&secrets);
        return e;
    }
    const cJSON *git = cJSON_GetObjectItemCaseSensitive(source, "git");
    const char *url = str_at(git, "url"), *ref = str_at(git, "ref"), *path = str_at(git, "path");
    funcd_buf key = FUNCD_BUF_INIT;
    entry *e = NULL;
    if (url && funcd_buf_printf(&key, "g|%s|%s|%s", url, ref ? ref : "", path ? path : "") == 0 &&
        !(e = find_entry(s, key.data)) && (e = new_entry(s, key.data, 0))) {
        e->url = strdup(url);
        e->gref = funcd_strdup(ref);
        e->path = funcd_strdup(path);
    }
    funcd_buf_free(&key);
    return e;
}

/* Removes ns/name from every entry but `keep`; 1 if it was waiting on `keep`. */
static int move_waiter(funcd_sources *s, const char *ns, const char *name, entry *keep)
{
    int found = 0;
    for (entry *e = s->entries; e; e = e->next)
        for (waiter **pp = &e->waiters; *pp;) {
            waiter *w = *pp;
            if (w->cb || strcmp(w->ns, ns) != 0 || strcmp(w->name, name) != 0) {
                pp = &w->next;
                continue;
            }
            if (e == keep) {
                found = 1;
                pp = &w->next;
                continue;
            }
            *pp = w->next;
            free(w->ns);
            free(w->name);
            free(w);
        }
    return found;
}

void funcd_sources_forget(funcd_sources *s, const char *ns, const char *name)
{
    if (!s)
        return;
    move_waiter(s, ns, name, NULL);
    /* An image nobody runs any more may leave the rootfs cache (LRU); the
     * next function that names it resolves it again, from the cache if it
     * is still there. */
    for (entry *e = s->entries; e; e = e->next) {
        if (e->waiters || e->busy || e->state != E_READY || !e->held_digest)
            continue;
        funcd_rootfs_cache_put(s->rootfs, e->held_digest);
        free(e->held_digest);
        e->held_digest = NULL;
        funcd_source_result_clear(&e->res);
        e->state = E_PENDING;
    }
}

int funcd_sources_resolve(funcd_sources *s, const char *ns, const char *name, const cJSON *spec,
                          int user_write, funcd_source_result *out, char *reason,
                          size_t reason_len, char *message, size_t message_len)
{
    memset(out, 0, sizeof(*out));
    entry *e = entry_for(s, ns, spec);
    if (!e) {
        snprintf(reason, reason_len, "InternalError");
        snprintf(message, message_len, "out of memory");
        return FUNCD_ENOMEM;
    }
    if (!move_waiter(s, ns, name, e)) {
        waiter *w = calloc(1, sizeof(*w));
        if (w && (w->ns = strdup(ns)) && (w->name = strdup(name))) {
            w->next = e->waiters;
            e->waiters = w;
        } else if (w) {
            free(w->ns);
            free(w);
        }
    }
    if (!e->busy && (e->state == E_PENDING || (user_write && (e->state == E_FAILED ||
                                                              refreshable(e)))))
        start(e);
    if (e->state == E_READY) {
        if (result_copy(out, &e->res) < 0) {
            snprintf(reason, reason_len, "InternalError");
            snprintf(message, message_len, "out of memory");
            return FUNCD_ENOMEM;
        }
        return FUNCD_SOURCE_READY;
    }
    if (e->state == E_FAILED) {
        snprintf(reason, reason_len, "%s", e->reason);
        snprintf(message, message_len, "%s", e->message);
        return FUNCD_EIO;
    }
    snprintf(reason, reason_len, "%s", e->reason[0] ? e->reason : "Pending");
    if (e->is_image && e->bytes_total)
        snprintf(message, message_len, "pulling %s: %" PRIu64 " of %" PRIu64 " bytes", e->ref,
                 e->bytes_done, e->bytes_total);
    else if (e->is_image)
        snprintf(message, message_len, "%s %s", strcmp(e->reason, "Extracting") == 0
                                                    ? "extracting the layers of"
                                                    : "pulling", e->ref);
    else
        snprintf(message, message_len, "fetching %s%s%s", e->url, e->gref ? " at " : "",
                 e->gref ? e->gref : "");
    return FUNCD_SOURCE_PENDING;
}

static int result_of(entry *e, funcd_source_result *out, char *message, size_t message_len)
{
    if (e->state == E_READY)
        return result_copy(out, &e->res) < 0 ? FUNCD_ENOMEM : FUNCD_SOURCE_READY;
    if (e->state == E_FAILED) {
        snprintf(message, message_len, "%s", e->message);
        return FUNCD_EIO;
    }
    snprintf(message, message_len, "%s %s", e->reason[0] ? e->reason : "Pending", e->ref);
    return FUNCD_SOURCE_PENDING;
}

int funcd_sources_image(funcd_sources *s, const char *ns, const char *ref,
                        funcd_source_result *out, char *message, size_t message_len,
                        funcd_sources_cb cb, void *payload)
{
    memset(out, 0, sizeof(*out));
    entry *e = image_entry(s, ns, ref, "");
    if (!e) {
        snprintf(message, message_len, "out of memory");
        return FUNCD_ENOMEM;
    }
    if (!e->busy && (e->state == E_PENDING || (e->state == E_FAILED &&
                                               funcd_mono_ms() >= e->retry_ms)))
        start(e);
    int rc = result_of(e, out, message, message_len);
    if (rc != FUNCD_SOURCE_PENDING)
        return rc;
    waiter *w = calloc(1, sizeof(*w));
    if (!w) {
        snprintf(message, message_len, "out of memory");
        return FUNCD_ENOMEM;
    }
    w->cb = cb;
    w->payload = payload;
    w->next = e->waiters;
    e->waiters = w;
    return rc;
}

void funcd_sources_cancel(funcd_sources *s, void *payload)
{
    for (entry *e = s ? s->entries : NULL; e; e = e->next)
        for (waiter **pp = &e->waiters; *pp;) {
            waiter *w = *pp;
            if (w->cb && w->payload == payload) {
                *pp = w->next;
                free(w);
            } else {
                pp = &w->next;
            }
        }
}

/* ---- the images API ------------------------------------------------------------- */

typedef struct list_ctx {
    funcd_buf *out;
    int n;
    int (*visible)(const char *ns, void *payload);
    void *payload;
    cJSON *refs; /* digest → the reference a namespace the caller may see used for it */
} list_ctx;

/* /imagens/<ns>/<digest>: note the digest, and the reference ns named it by
 * ("" in a record older than that), when the caller may see ns. */
static int note_visible(const funcd_store_kv *kv, void *payload)
{
    list_ctx *c = payload;
    const char *rest = kv->key + strlen(IMAGE_NS_PREFIX), *slash = strrchr(rest, '/');
    if (!slash || slash == rest)
        return 0;
    char ns[256];
    snprintf(ns, sizeof(ns), "%.*s", (int)(slash - rest), rest);
    if (!c->visible(ns, c->payload) || cJSON_GetObjectItemCaseSensitive(c->refs, slash + 1))
        return 0;
    cJSON *o = cJSON_ParseWithLength(kv->value, kv->len);
    const char *ref = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "ref"));
    cJSON_AddStringToObject(c->refs, slash + 1, ref ? ref : "");
    cJSON_Delete(o);
    return 0;
}

/* An image's metadata; to a caller who may not see every namespace, only
 * those its namespaces pulled or run, with the reference they used (the
 * metadata's is whichever pull came last, maybe another tenant's). */
static int list_one(const funcd_store_kv *kv, void *payload)
{
    list_ctx *c = payload;
    if (!c->visible) {
        funcd_buf_printf(c->out, "%s%.*s", c->n++ ? "," : "", (int)kv->len,
                         (const char *)kv->value);
        return 0;
    }
    const char *ref = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(c->refs, kv->key + strlen(IMAGE_META_PREFIX)));
    cJSON *m = ref ? cJSON_ParseWithLength(kv->value, kv->len) : NULL;
    if (!cJSON_IsObject(m)) {
        cJSON_Delete(m);
        return 0;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(m, "ref");
    cJSON_AddStringToObject(m, "ref", ref);
    char *text = cJSON_PrintUnformatted(m);
    if (text)
        funcd_buf_printf(c->out, "%s%s", c->n++ ? "," : "", text);
    free(text);
    cJSON_Delete(m);
    return 0;
}

int funcd_sources_list_images(funcd_sources *s, int (*visible)(const char *ns, void *payload),
                              void *payload, funcd_buf *out)
{
    list_ctx c = {out, 0, visible, payload, cJSON_CreateObject()};
    if (!c.refs)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory");
    int rc = visible ? funcd_port_store_list(s->cfg.store, IMAGE_NS_PREFIX, note_visible, &c, NULL)
                     : 0;
    funcd_buf_puts(out, "{\"items\":[");
    if (rc == 0)
        rc = funcd_port_store_list(s->cfg.store, IMAGE_META_PREFIX, list_one, &c, NULL);
    funcd_buf_puts(out, "]}");
    cJSON_Delete(c.refs);
    return rc;
}

/* Runs on the loop: entries for the pulls the API asked for. */
static void start_api_pulls(funcd_sources *s)
{
    pthread_mutex_lock(&s->lock);
    int64_t now = funcd_mono_ms();
    for (api_pull **pp = &s->pulls; *pp;) { /* forget answers nobody came back for */
        api_pull *p = *pp;
        if (p->st.done && now - p->finished_ms > 10 * 60 * 1000) {
            *pp = p->next;
            free(p->key);
            free(p->ns);
            free(p->ref);
            free(p->secrets);
            free(p);
            continue;
        }
        pp = &p->next;
    }
    api_pull *todo = NULL;
    for (api_pull *p = s->pulls; p; p = p->next)
        if (!p->started && !todo)
            todo = p;
    pthread_mutex_unlock(&s->lock);
    while (todo) {
        entry *e = image_entry(s, todo->ns, todo->ref, todo->secrets);
        pthread_mutex_lock(&s->lock);
        todo->started = 1;
        if (e)
            todo->key = strdup(e->key);
        if (!e || !todo->key) {
            todo->st.done = todo->st.failed = 1;
            snprintf(todo->st.message, sizeof(todo->st.message), "out of memory");
        }
        pthread_mutex_unlock(&s->lock);
        if (e && todo->key) {
            if (!e->busy && e->state == E_READY && !refreshable(e)) {
                publish(e, 1); /* pinned by digest and here already */
            } else if (!e->busy) {
                e->state = e->state == E_READY ? E_READY : E_PENDING;
                e->read_tag = 1;
                start(e);
            }
        }
        pthread_mutex_lock(&s->lock);
        api_pull *next = NULL;
        for (api_pull *p = s->pulls; p; p = p->next)
            if (!p->started && !next)
                next = p;
        todo = next;
        pthread_mutex_unlock(&s->lock);
    }
}

int funcd_sources_registry_allowed(funcd_sources *s, const char *ref, char *why, size_t n)
{
    funcd_oci_ref r;
    if (funcd_oci_ref_parse(&r, ref) < 0)
        return 1; /* not a reference: the pull says what is wrong with it */
    int ok = funcd_oci_registry_allowed(r.registry, s->cfg.allowed, s->cfg.insecure, why, n);
    funcd_oci_ref_free(&r);
    return ok;
}

int funcd_sources_pull_start(funcd_sources *s, const char *ns, const char *ref,
                             const char *const *secrets, char id[40])
{
    funcd_oci_ref r;
    int rc = funcd_oci_ref_parse(&r, ref);
    if (rc < 0)
        return rc;
    funcd_oci_ref_free(&r);
    api_pull *p = calloc(1, sizeof(*p));
    funcd_buf names = FUNCD_BUF_INIT;
    for (const char *const *n = secrets; n && *n; n++)
        funcd_buf_printf(&names, "%s%s", names.len ? "," : "", *n);
    if (!p || !(p->ns = strdup(ns)) || !(p->ref = strdup(ref)) ||
        !(p->secrets = strdup(names.data ? names.data : ""))) {
        if (p) {
            free(p->ns);
            free(p->ref);
        }
        free(p);
        funcd_buf_free(&names);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory");
    }
    funcd_buf_free(&names);
    funcd_uuid4(p->id);
    snprintf(id, 40, "%s", p->id);
    pthread_mutex_lock(&s->lock);
    p->next = s->pulls;
    s->pulls = p;
    pthread_mutex_unlock(&s->lock);
    event_active(s->tick, EV_TIMEOUT, 0);
    return 0;
}

int funcd_sources_pull_get(funcd_sources *s, const char *ns, const char *id,
                           funcd_pull_state *out)
{
    int rc = FUNCD_ENOTFOUND;
    pthread_mutex_lock(&s->lock);
    for (api_pull *p = s->pulls; p; p = p->next)
        if (strcmp(p->id, id) == 0 && strcmp(p->ns, ns) == 0) {
            *out = p->st;
            rc = 0;
            break;
        }
    pthread_mutex_unlock(&s->lock);
    if (rc < 0)
        funcd_error_set(rc, "no pull %s in namespace %s (finished pulls are kept for 10 "
                        "minutes)", id, ns);
    return rc;
}

void funcd_sources_pull_list(funcd_sources *s, const char *ns,
                             void (*visit)(const char *id, const char *ref,
                                           const funcd_pull_state *st, void *payload),
                             void *payload)
{
    pthread_mutex_lock(&s->lock);
    for (api_pull *p = s->pulls; p; p = p->next)
        if (strcmp(p->ns, ns) == 0)
            visit(p->id, p->ref, &p->st, payload);
    pthread_mutex_unlock(&s->lock);
}

/* ---- lifecycle ------------------------------------------------------------------ */

static int make_dir(const char *path)
{
    if (mkdir(path, 0700) != 0 && errno != EEXIST)
        return funcd_error_set(FUNCD_EIO, "cannot create %s: %s", path, strerror(errno));
    return 0;
}

int funcd_sources_new(funcd_sources **out, const funcd_sources_config *cfg)
{
    *out = NULL;
    funcd_sources *s = calloc(1, sizeof(*s));
    if (!s)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory");
    s->cfg = *cfg;
    s->cfg.node = NULL;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->idle, NULL);
    int rc = 0;
    if ((cfg->node && !(s->node = strdup(cfg->node))) ||
        asprintf(&s->images_dir, "%s/images", cfg->cache_dir) < 0 ||
        asprintf(&s->git_dir, "%s/git", cfg->cache_dir) < 0) {
        funcd_sources_free(s);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory");
    }
    char rootfs_dir[1200];
    snprintf(rootfs_dir, sizeof(rootfs_dir), "%s/rootfs", s->images_dir);
    if ((rc = make_dir(s->images_dir)) < 0 || (rc = make_dir(s->git_dir)) < 0) {
        funcd_sources_free(s);
        return rc;
    }
    char blob_dir[1200];
    snprintf(blob_dir, sizeof(blob_dir), "%s/blobs/sha256", s->images_dir);
    if ((rc = funcd_oci_blob_cache_open(&s->blobs, blob_dir, cfg->image_blob_cache_bytes,
                                        cfg->logger)) < 0) {
        funcd_sources_free(s);
        return rc;
    }
    s->oci_opts = (funcd_oci_client_options){
        .cache_dir = s->images_dir,
        .blob_cache = s->blobs,
        .auth_file = cfg->auth_file,
        .certs_dir = cfg->certs_dir,
        .insecure = cfg->insecure,
        .allowed = cfg->allowed,
        .logger = cfg->logger,
        .os = cfg->os,
        .arch = cfg->arch,
    };
    /* The client (libcurl, and the TLS library it initializes) costs
     * megabytes of resident memory: made at the first pull. Its options are
     * checked now, so a bad flag still fails the start. */
    for (const char *const *h = cfg->insecure; h && *h; h++)
        if (!funcd_oci_host_is_loopback(*h)) {
            funcd_sources_free(s);
            return funcd_error_set(FUNCD_EINVAL, "insecure registry %s: plain HTTP is allowed "
                                   "only for a loopback registry (127.0.0.0/8, [::1], "
                                   "localhost)", *h);
        }
    for (const char *const *h = cfg->allowed; h && *h; h++)
        if (!funcd_oci_registry_matches(*h, *h)) {
            funcd_sources_free(s);
            return funcd_error_set(FUNCD_EINVAL, "allowed registry \"%s\": expected HOST or "
                                   "HOST:PORT", *h);
        }
    int cache_rc = funcd_rootfs_cache_new(&s->rootfs, rootfs_dir,
                                          cfg->image_cache_bytes ? cfg->image_cache_bytes
                                                                 : (uint64_t)4 << 30);
    s->wake = event_new(cfg->loop, -1, EV_PERSIST, on_wake, s);
    s->tick = event_new(cfg->loop, -1, EV_PERSIST, on_tick, s);
    s->git_cancel = funcd_git_cancel_new();
    struct timeval every = {1, 0};
    if (cache_rc < 0) {
        funcd_sources_free(s);
        return cache_rc; /* funcd_error_last() says why */
    }
    if (!s->wake || !s->tick || !s->git_cancel || event_add(s->tick, &every) < 0) {
        funcd_sources_free(s);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory");
    }
    *out = s;
    return 0;
}

void funcd_sources_free(funcd_sources *s)
{
    if (!s)
        return;
    /* Threads run to their end (an extraction in flight); a git fetch's
     * connections are shut, so a server that stopped answering is not
     * waited for. */
    funcd_git_cancel_fire(s->git_cancel);
    pthread_mutex_lock(&s->lock);
    while (s->threads)
        pthread_cond_wait(&s->idle, &s->lock);
    pthread_mutex_unlock(&s->lock);
    funcd_git_cancel_free(s->git_cancel);
    while (s->done) {
        job *j = s->done;
        s->done = j->next;
        pthread_join(j->tid, NULL);
        if (j->img && j->rc == 0)
            funcd_rootfs_cache_put(s->rootfs, j->img->digest);
        job_free(j);
    }
    while (s->entries) {
        entry *e = s->entries;
        s->entries = e->next;
        entry_free(e);
    }
    while (s->pulls) {
        api_pull *p = s->pulls;
        s->pulls = p->next;
        free(p->key);
        free(p->ns);
        free(p->ref);
        free(p->secrets);
        free(p);
    }
    if (s->wake)
        event_free(s->wake);
    if (s->tick)
        event_free(s->tick);
    funcd_oci_client_free(s->oci);
    funcd_oci_blob_cache_unref(s->blobs);
    funcd_rootfs_cache_free(s->rootfs);
    if (s->git_held)
        funcd_git_shutdown();
    free(s->node);
    free(s->images_dir);
    free(s->git_dir);
    pthread_cond_destroy(&s->idle);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

cJSON *funcd_sources_image_contract(funcd_store *store, const char *digest)
{
    if (!digest || strncmp(digest, "sha256:", 7) != 0)
        return NULL;
    funcd_buf key = FUNCD_BUF_INIT;
    funcd_store_value v = {0};
    cJSON *m = NULL;
    if (funcd_buf_printf(&key, "%s%s", IMAGE_META_PREFIX, digest) == 0 &&
        funcd_port_store_get(store, key.data, &v) == 0) {
        m = cJSON_ParseWithLength(v.value, v.len);
        free(v.value);
    }
    funcd_buf_free(&key);
    cJSON *c = cJSON_DetachItemFromObjectCaseSensitive(m, "contract");
    cJSON_Delete(m);
    if (!cJSON_IsObject(c)) {
        cJSON_Delete(c);
        return NULL;
    }
    return c;
}
