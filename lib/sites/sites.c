/*
 * Sites on the platform loop (sites.h): the table of Sites, each Site's
 * source materialized like a Function's, its Ready condition, and the
 * versions the gateway threads serve from.
 */
#include "sites/internal.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "api/api.h"
#include "artifact/bundle.h"
#include "cluster/nodes.h"
#include "funcd/sys/error.h"
#include "objects/objects.h"
#include "port/store.h"
#include "source/resolver.h"
#include "util/hostpath.h"
#include "util/misc.h"

#define SITE_BUCKETS 256

typedef struct site_rec {
    struct site_rec *next;
    char ns[64], name[64];
    char uid[64];
    double generation;
    int uses_resolver;
    site_ver *ver; /* published, or NULL: cannot be served now */
    int ready;
    char reason[64];
    char message[512];
} site_rec;

/* The hosts of the published versions, by name: open addressing, rebuilt
 * (under the table's writer lock) whenever a version is published or goes. */
typedef struct host_slot {
    const char *host; /* the version's own string; NULL: an empty slot */
    size_t len;
    site_rec *rec;
} host_slot;

struct inbox_item {
    struct inbox_item *next;
    char *key;    /* a store key to look at again */
    int force;    /* the source changed under the same spec */
};

struct funcd_sites {
    funcd_sites_config cfg;
    char *default_index;
    pthread_rwlock_t lock; /* the gateway threads read recs' ver and the host list */
    site_rec *buckets[SITE_BUCKETS];
    host_slot *hosts;   /* hosts_cap slots (a power of two), or NULL: none */
    size_t hosts_cap;
    atomic_uint n_hosts;
    pthread_mutex_t inbox_lock;
    struct inbox_item *inbox, **inbox_tail;
    int closed;
    struct event *wake, *resync;
    funcd_store_watch *watch;
    sites_cache cache; /* contents in memory, every Site's */
};

static const funcd_kind *site_kind(void)
{
    return funcd_kind_by_kind("Site");
}

/* ---- versions ---------------------------------------------------------------- */

void funcd__site_ver_ref(site_ver *v)
{
    atomic_fetch_add_explicit(&v->refs, 1, memory_order_relaxed);
}

void funcd__site_ver_unref(site_ver *v)
{
    if (!v || atomic_fetch_sub_explicit(&v->refs, 1, memory_order_acq_rel) != 1)
        return;
    funcd__sites_cache_forget(v->cache, v);
    for (unsigned i = 0; i < SITES_FILE_BUCKETS; i++)
        while (v->files[i]) {
            site_file *f = v->files[i];
            v->files[i] = f->next;
            funcd__site_file_free(f);
        }
    if (v->root_fd >= 0)
        close(v->root_fd);
    for (size_t i = 0; v->hosts && v->hosts[i]; i++)
        free(v->hosts[i]);
    free(v->hosts);
    free(v->root);
    free(v->index);
    free(v->not_found);
    free(v->cache_control);
    pthread_rwlock_destroy(&v->lock);
    free(v);
}

static unsigned bucket_of(const char *ns, size_t nsl, const char *name, size_t nl)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < nsl; i++)
        h = (h ^ (unsigned char)ns[i]) * 16777619u;
    h = (h ^ '/') * 16777619u;
    for (size_t i = 0; i < nl; i++)
        h = (h ^ (unsigned char)name[i]) * 16777619u;
    return h % SITE_BUCKETS;
}

static site_rec **find_rec(funcd_sites *s, const char *ns, size_t nsl, const char *name,
                           size_t nl)
{
    for (site_rec **pp = &s->buckets[bucket_of(ns, nsl, name, nl)]; *pp; pp = &(*pp)->next)
        if (strlen((*pp)->ns) == nsl && memcmp((*pp)->ns, ns, nsl) == 0 &&
            strlen((*pp)->name) == nl && memcmp((*pp)->name, name, nl) == 0)
            return pp;
    return NULL;
}

site_ver *funcd__sites_find(funcd_sites *s, const char *ns, size_t nsl, const char *name,
                            size_t nl, int *known)
{
    pthread_rwlock_rdlock(&s->lock);
    site_rec **r = find_rec(s, ns, nsl, name, nl);
    site_ver *v = r ? (*r)->ver : NULL;
    if (v)
        funcd__site_ver_ref(v);
    *known = r != NULL;
    pthread_rwlock_unlock(&s->lock);
    return v;
}

static uint64_t host_hash(const char *h, size_t n)
{
    uint64_t x = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        x = (x ^ (unsigned char)h[i]) * 1099511628211ull;
    return x;
}

static site_rec *slot_find(const host_slot *m, size_t cap, const char *host, size_t len)
{
    if (!cap)
        return NULL;
    size_t mask = cap - 1;
    for (size_t i = host_hash(host, len) & mask;; i = (i + 1) & mask) {
        const host_slot *h = &m[i];
        if (!h->host)
            return NULL;
        if (h->len == len && memcmp(h->host, host, len) == 0)
            return h->rec;
    }
}

/* The Site whose published version serves `host`, or NULL. Under the table's
 * lock (either side), or on the loop (its only writer). */
static site_rec *host_find(const funcd_sites *s, const char *host, size_t len)
{
    return slot_find(s->hosts, s->hosts_cap, host, len);
}

/* Under the writer lock: the map of the published versions' hosts, anew. A
 * host two versions claim stays with the Site the old map gave it to (build
 * refuses such a version with HostConflict; this holds whatever happens).
 * Out of memory: with no more hosts than the old map was made for, anew in
 * its place; else -1 and the map is left as it was. */
static int hosts_rebuild(funcd_sites *s)
{
    size_t n = 0;
    for (unsigned b = 0; b < SITE_BUCKETS; b++)
        for (site_rec *r = s->buckets[b]; r; r = r->next)
            for (size_t i = 0; r->ver && r->ver->hosts && r->ver->hosts[i]; i++)
                n++;
    host_slot *old = s->hosts;
    size_t old_cap = s->hosts_cap;
    if (!n) {
        free(old);
        s->hosts = NULL;
        s->hosts_cap = 0;
        return 0;
    }
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    host_slot *m = calloc(cap, sizeof(*m));
    if (!m) {
        if (old_cap < 2 * n)
            return -1;
        m = old; /* the old owners are not known then: with no conflict, none is needed */
        cap = old_cap;
        memset(m, 0, cap * sizeof(*m));
        old = NULL;
        old_cap = 0;
    }
    for (int pass = 0; pass < 2; pass++) /* first the hosts each Site owned already */
        for (unsigned b = 0; b < SITE_BUCKETS; b++)
            for (site_rec *r = s->buckets[b]; r; r = r->next)
                for (size_t i = 0; r->ver && r->ver->hosts && r->ver->hosts[i]; i++) {
                    const char *h = r->ver->hosts[i];
                    size_t len = strlen(h);
                    if (pass == 0 && slot_find(old, old_cap, h, len) != r)
                        continue;
                    size_t j = host_hash(h, len) & (cap - 1);
                    while (m[j].host && !(m[j].len == len && memcmp(m[j].host, h, len) == 0))
                        j = (j + 1) & (cap - 1);
                    if (!m[j].host)
                        m[j] = (host_slot){h, len, r};
                }
    free(old);
    s->hosts = m;
    s->hosts_cap = cap;
    return 0;
}

site_ver *funcd__sites_find_host(funcd_sites *s, const char *host, size_t len)
{
    pthread_rwlock_rdlock(&s->lock);
    site_rec *r = host_find(s, host, len);
    site_ver *v = r ? r->ver : NULL;
    if (v)
        funcd__site_ver_ref(v);
    pthread_rwlock_unlock(&s->lock);
    return v;
}

void funcd_sites_cache_stats(void *sites, uint64_t *bytes, uint64_t *limit, uint64_t *files)
{
    funcd_sites *s = sites;
    *bytes = atomic_load(&s->cache.bytes);
    *files = atomic_load(&s->cache.files);
    *limit = s->cache.limit;
}

const atomic_uint *funcd_sites_host_count(funcd_sites *s)
{
    return &s->n_hosts;
}

static size_t count_hosts(const site_ver *v)
{
    size_t n = 0;
    while (v && v->hosts && v->hosts[n])
        n++;
    return n;
}

/* Swaps the rec's published version (NULL: none); the reference to `v`
 * passes. -1 when the host map could not be made (out of memory): then
 * nothing of the Site is published (the map it had still fits), so no host
 * changes hands without the map that says who owns it. */
static int publish(funcd_sites *s, site_rec *r, site_ver *v)
{
    int rc = 0;
    pthread_rwlock_wrlock(&s->lock);
    site_ver *old = r->ver;
    r->ver = v;
    if ((count_hosts(v) || count_hosts(old)) && hosts_rebuild(s) != 0) {
        r->ver = NULL;
        hosts_rebuild(s); /* fewer hosts than the map holds: made in its place */
        rc = -1;
    }
    atomic_fetch_add(&s->n_hosts, (unsigned)count_hosts(r->ver));
    atomic_fetch_sub(&s->n_hosts, (unsigned)count_hosts(old));
    pthread_rwlock_unlock(&s->lock);
    funcd__site_ver_unref(old);
    if (rc)
        funcd__site_ver_unref(v);
    return rc;
}

/* ---- building a version --------------------------------------------------------- */

static void fail(site_rec *r, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fail(site_rec *r, const char *reason, const char *fmt, ...)
{
    r->ready = 0;
    snprintf(r->reason, sizeof(r->reason), "%s", reason);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof(r->message), fmt, ap);
    va_end(ap);
}

static const char *str_at(const cJSON *obj, const char *key)
{
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(obj, key));
}

/* `sub` looked up inside `root` as if `root` were "/" (openat2
 * RESOLVE_IN_ROOT): the host path it names (malloc), always `root` or below
 * it; NULL with `r` failed. */
static char *dir_in_root(site_rec *r, const char *root, const char *sub)
{
    int root_fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                           .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
    int fd = root_fd < 0 ? -1 : (int)syscall(SYS_openat2, root_fd, sub, &how, sizeof(how));
    int err = errno;
    char link[64], real[FUNCD_HOSTPATH_MAX];
    ssize_t n = -1;
    if (fd >= 0) {
        snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
        n = readlink(link, real, sizeof(real) - 1);
        close(fd);
    }
    if (root_fd >= 0)
        close(root_fd);
    if (n <= 0) {
        fail(r, "ArtifactFailed", "the image's working directory %s is not a directory in the "
             "image: %s", sub, strerror(fd < 0 ? err : errno));
        return NULL;
    }
    real[n] = '\0';
    char root_real[FUNCD_HOSTPATH_MAX];
    if (!realpath(root, root_real) || !funcd_hostpath_under(real, root_real)) {
        /* cannot happen: RESOLVE_IN_ROOT */
        fail(r, "ArtifactFailed", "the image's working directory %s leaves the image", sub);
        return NULL;
    }
    char *dir = strdup(real);
    if (!dir)
        fail(r, "InternalError", "out of memory");
    return dir;
}

/* The directory the Site's files are in (malloc), and whether they never
 * change; NULL with `r` failed (or pending). */
static char *materialize(funcd_sites *s, site_rec *r, const cJSON *spec, int user_write,
                         int *immutable)
{
    const cJSON *source = cJSON_GetObjectItemCaseSensitive(spec, "source");
    const char *path = str_at(source, "path");
    const char *bundle = str_at(source, "bundle");
    *immutable = 1;
    r->uses_resolver = 0;
    if (path) {
        char real[FUNCD_HOSTPATH_MAX];
        const char *why;
        if (funcd_hostpath_resolve(path, real, sizeof(real), &why) < 0) {
            fail(r, "ArtifactFailed", "spec.source.path %s %s", path, why);
            return NULL;
        }
        *immutable = 0; /* the operator's directory: read per request */
        return strdup(real);
    }
    if (bundle) {
        char dir[512], err[512];
        if (!s->cfg.blob || !s->cfg.bundle_cache) {
            fail(r, "ArtifactFailed", "this platform has no blob store for bundles");
            return NULL;
        }
        if (!funcd_bundle_visible(s->cfg.blob, r->ns, bundle)) {
            fail(r, "ArtifactFailed", "spec.source.bundle %s was not uploaded to namespace "
                 "\"%s\": upload it there (funcdctl deploy-site -n %s)", bundle, r->ns, r->ns);
            return NULL;
        }
        if (funcd_bundle_materialize(s->cfg.blob, bundle, s->cfg.bundle_cache, dir, sizeof(dir),
                                     err, sizeof(err)) < 0) {
            fail(r, "ArtifactFailed", "spec.source.bundle %s: %s", bundle, err);
            return NULL;
        }
        return strdup(dir);
    }
    if (!cJSON_GetObjectItemCaseSensitive(source, "image") &&
        !cJSON_GetObjectItemCaseSensitive(source, "git")) {
        fail(r, "BadSpec", "spec.source names no artifact");
        return NULL;
    }
    if (!s->cfg.sources) {
        fail(r, "SourceNotSupported", "this platform has no source resolver for image and git "
             "sources; use spec.source.path or spec.source.bundle");
        return NULL;
    }
    char as[128], reason[64], msg[512];
    snprintf(as, sizeof(as), FUNCD_SITES_SOURCE_PREFIX "%s", r->name);
    r->uses_resolver = 1;
    funcd_source_result res;
    int rc = funcd_sources_resolve(s->cfg.sources, r->ns, as, spec, user_write, &res, reason,
                                   sizeof(reason), msg, sizeof(msg));
    if (rc != FUNCD_SOURCE_READY) {
        fail(r, reason, "%s", msg);
        return NULL;
    }
    char *dir = NULL;
    /* An image's files are below its working directory (WORKDIR), else its
     * root. The image says what its WORKDIR is: it is looked up with the
     * image's root as "/", so neither ".." nor a link climbs out of it. */
    if (res.is_image && res.working_dir && res.working_dir[0] == '/' && res.working_dir[1])
        dir = dir_in_root(r, res.dir, res.working_dir);
    else if (!(dir = strdup(res.dir)))
        fail(r, "InternalError", "out of memory");
    funcd_source_result_clear(&res);
    return dir;
}

static char *cache_control_of(const cJSON *cache)
{
    if (cJSON_IsString(cache))
        return strdup(cache->valuestring);
    if (!cJSON_IsObject(cache))
        return NULL;
    char out[160] = "";
    size_t n = 0;
#define PART(...) n += (size_t)snprintf(out + n, sizeof(out) - n, __VA_ARGS__)
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cache, "private")))
        PART("%sprivate", n ? ", " : "");
    else
        PART("%spublic", n ? ", " : "");
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cache, "noCache")))
        PART("%sno-cache", n ? ", " : "");
    const cJSON *age = cJSON_GetObjectItemCaseSensitive(cache, "maxAge");
    if (cJSON_IsNumber(age))
        PART("%smax-age=%lld", n ? ", " : "", (long long)age->valuedouble);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cache, "immutable")))
        PART("%simmutable", n ? ", " : "");
#undef PART
    return strdup(out);
}

/* 1 when `rel` is a regular file below the root. */
static int has_file(int root_fd, const char *rel, int public_only)
{
    struct stat st;
    int fd = funcd__site_open(root_fd, rel, public_only, &st);
    if (fd < 0)
        return 0;
    close(fd);
    return S_ISREG(st.st_mode);
}

/* The Site that serves `host` other than `self`, or NULL (the loop). */
static const site_rec *host_owner(funcd_sites *s, const site_rec *self, const char *host)
{
    const site_rec *r = host_find(s, host, strlen(host));
    return r != self ? r : NULL;
}

static site_ver *build(funcd_sites *s, site_rec *r, const cJSON *spec, int user_write)
{
    int immutable;
    char *root = materialize(s, r, spec, user_write, &immutable);
    if (!root)
        return NULL;
    site_ver *v = calloc(1, sizeof(*v));
    if (!v) {
        free(root);
        fail(r, "InternalError", "out of memory");
        return NULL;
    }
    atomic_init(&v->refs, 1);
    pthread_rwlock_init(&v->lock, NULL);
    v->cache = &s->cache;
    v->send_timeout_ms = s->cfg.send_timeout_ms ? s->cfg.send_timeout_ms
                                                : SITES_SEND_TIMEOUT_DEFAULT_MS;
    snprintf(v->ns, sizeof(v->ns), "%s", r->ns);
    snprintf(v->name, sizeof(v->name), "%s", r->name);
    v->root = root;
    v->immutable = immutable;
    v->root_fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    const char *index = str_at(spec, "index");
    const char *nf = str_at(spec, "notFound");
    v->index = strdup(index ? index : s->default_index);
    v->not_found = nf ? strdup(nf) : NULL;
    v->spa = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(spec, "spa"));
    v->cache_control = cache_control_of(cJSON_GetObjectItemCaseSensitive(spec, "cache"));
    const cJSON *hosts = cJSON_GetObjectItemCaseSensitive(spec, "hosts");
    int n = cJSON_GetArraySize(hosts);
    v->hosts = calloc((size_t)n + 1, sizeof(char *));
    int i = 0;
    const cJSON *h;
    cJSON_ArrayForEach(h, hosts)
    {
        if (v->hosts && cJSON_IsString(h))
            v->hosts[i++] = strdup(h->valuestring);
    }
    if (v->root_fd < 0) {
        fail(r, "ArtifactFailed", "the site's files at %s cannot be opened: %s", root,
             strerror(errno));
        funcd__site_ver_unref(v);
        return NULL;
    }
    if (!v->index || !v->hosts || (nf && !v->not_found)) {
        fail(r, "InternalError", "out of memory");
        funcd__site_ver_unref(v);
        return NULL;
    }
    if (!has_file(v->root_fd, v->index, !v->immutable)) {
        fail(r, "IndexMissing", "spec.index %s is not a file in the site's files%s%s", v->index,
             index ? "" : " (the default index; set spec.index or funcd --site-default-index)",
             v->immutable ? "" : " that any user of the host may read (a host path's files "
                                 "must be readable by others, in directories others may enter)");
        funcd__site_ver_unref(v);
        return NULL;
    }
    if (v->not_found && !has_file(v->root_fd, v->not_found, !v->immutable)) {
        fail(r, "NotFoundPageMissing", "spec.notFound %s is not a file in the site's files",
             v->not_found);
        funcd__site_ver_unref(v);
        return NULL;
    }
    for (i = 0; v->hosts[i]; i++) {
        const site_rec *o = host_owner(s, r, v->hosts[i]);
        if (o) {
            fail(r, "HostConflict", "spec.hosts[%d] %s is served by site %s/%s already", i,
                 v->hosts[i], o->ns, o->name);
            funcd__site_ver_unref(v);
            return NULL;
        }
    }
    r->ready = 1;
    snprintf(r->reason, sizeof(r->reason), "Serving");
    int len = snprintf(r->message, sizeof(r->message), "serving at /site/%s/%s/", r->ns, r->name);
    for (i = 0; v->hosts[i] && len > 0 && (size_t)len < sizeof(r->message); i++)
        len += snprintf(r->message + len, sizeof(r->message) - (size_t)len, "%s%s",
                        i ? ", " : " and on hosts ", v->hosts[i]);
    return v;
}

/* ---- status --------------------------------------------------------------------- */

static void write_status(funcd_sites *s, site_rec *r)
{
    if (s->cfg.cluster && !funcd_cluster_is_leader(s->cfg.cluster))
        return;
    cJSON *obj = NULL;
    uint64_t rev = 0;
    if (funcd_objects_get(s->cfg.store, site_kind(), r->ns, r->name, &obj, &rev) < 0)
        return;
    const cJSON *old = cJSON_GetObjectItemCaseSensitive(obj, "status");
    const char *status = r->ready ? "True" : "False";
    const cJSON *oc = NULL, *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(old, "conditions"))
    {
        if (strcmp(str_at(c, "type") ? str_at(c, "type") : "", "Ready") == 0)
            oc = c;
    }
    const char *os = str_at(oc, "status"), *orr = str_at(oc, "reason"),
               *om = str_at(oc, "message"), *since = str_at(oc, "lastTransitionTime");
    double og = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(old, "observedGeneration"));
    if (os && orr && om && strcmp(os, status) == 0 && strcmp(orr, r->reason) == 0 &&
        strcmp(om, r->message) == 0 && og == r->generation) {
        cJSON_Delete(obj); /* nothing new */
        return;
    }
    char now[32];
    funcd_rfc3339(funcd_now_ms(), now, sizeof(now));
    cJSON *st = cJSON_CreateObject();
    cJSON_AddNumberToObject(st, "observedGeneration", r->generation);
    cJSON *conds = cJSON_AddArrayToObject(st, "conditions");
    cJSON *cond = cJSON_CreateObject();
    cJSON_AddStringToObject(cond, "type", "Ready");
    cJSON_AddStringToObject(cond, "status", status);
    cJSON_AddStringToObject(cond, "reason", r->reason);
    cJSON_AddStringToObject(cond, "message", r->message);
    cJSON_AddStringToObject(cond, "lastTransitionTime",
                            os && since && strcmp(os, status) == 0 ? since : now);
    cJSON_AddItemToArray(conds, cond);
    if (funcd_objects_put_status(s->cfg.store, site_kind(), r->ns, r->name, rev, st) < 0) {
        char why[600];
        funcd_log(s->cfg.logger, FUNCD_LOG_DEBUG, "site %s/%s: status not written: %s", r->ns,
                  r->name, funcd_log_escape(why, sizeof(why), funcd_error_last()->message));
    }
    cJSON_Delete(st);
    cJSON_Delete(obj);
}

/* ---- reconciling ------------------------------------------------------------------- */

static void post(funcd_sites *s, const char *key, int force);

static void requeue_all(funcd_sites *s, const site_rec *except)
{
    for (unsigned b = 0; b < SITE_BUCKETS; b++)
        for (site_rec *r = s->buckets[b]; r; r = r->next)
            if (r != except) {
                char key[300];
                snprintf(key, sizeof(key), FUNCD_OBJECTS_KEY_ROOT "sites/%s/%s", r->ns, r->name);
                post(s, key, 1);
            }
}

static void remove_rec(funcd_sites *s, site_rec **pp)
{
    site_rec *r = *pp;
    int had_hosts = count_hosts(r->ver) > 0;
    pthread_rwlock_wrlock(&s->lock);
    *pp = r->next;
    atomic_fetch_sub(&s->n_hosts, (unsigned)count_hosts(r->ver));
    if (had_hosts)
        hosts_rebuild(s); /* fewer hosts than the map holds: cannot fail */
    pthread_rwlock_unlock(&s->lock);
    if (r->uses_resolver && s->cfg.sources) {
        char as[128];
        snprintf(as, sizeof(as), FUNCD_SITES_SOURCE_PREFIX "%s", r->name);
        funcd_sources_forget(s->cfg.sources, r->ns, as);
    }
    funcd__site_ver_unref(r->ver);
    free(r);
    if (had_hosts) /* a Site refused for a host of this one may take it now */
        requeue_all(s, NULL);
}

static void reconcile(funcd_sites *s, const char *key, int force)
{
    const funcd_kind *kind;
    char ns[128], name[128];
    if (funcd_objects_parse_key(key, &kind, ns, sizeof(ns), name, sizeof(name)) < 0 ||
        kind != site_kind() || strlen(ns) >= 64 || strlen(name) >= 64)
        return;
    cJSON *obj = NULL;
    uint64_t rev = 0;
    int rc = funcd_objects_get(s->cfg.store, kind, ns, name, &obj, &rev);
    site_rec **pp = find_rec(s, ns, strlen(ns), name, strlen(name));
    if (rc == FUNCD_ENOTFOUND) {
        if (pp)
            remove_rec(s, pp);
        return;
    }
    if (rc < 0) {
        char why[600];
        funcd_log(s->cfg.logger, FUNCD_LOG_WARN, "site %s/%s: %s", ns, name,
                  funcd_log_escape(why, sizeof(why), funcd_error_last()->message));
        return;
    }
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    const char *uid = str_at(md, "uid");
    double gen = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(md, "generation"));
    site_rec *r = pp ? *pp : NULL;
    int fresh = !r || !uid || strcmp(uid, r->uid) != 0 || gen != r->generation;
    if (!fresh && !force) {
        cJSON_Delete(obj); /* a status write, or nothing new */
        return;
    }
    if (!r) {
        if (!(r = calloc(1, sizeof(*r)))) {
            cJSON_Delete(obj);
            return;
        }
        snprintf(r->ns, sizeof(r->ns), "%s", ns);
        snprintf(r->name, sizeof(r->name), "%s", name);
        pthread_rwlock_wrlock(&s->lock);
        site_rec **head = &s->buckets[bucket_of(ns, strlen(ns), name, strlen(name))];
        r->next = *head;
        *head = r;
        pthread_rwlock_unlock(&s->lock);
    }
    snprintf(r->uid, sizeof(r->uid), "%s", uid ? uid : "");
    r->generation = gen;
    int had_hosts = count_hosts(r->ver) > 0;
    site_ver *v = build(s, r, cJSON_GetObjectItemCaseSensitive(obj, "spec"), fresh);
    if (publish(s, r, v) != 0) {
        fail(r, "InternalError", "out of memory publishing the site's hosts");
        v = NULL;
    }
    if (had_hosts && count_hosts(v) == 0)
        requeue_all(s, r);
    if (!r->ready) { /* the message names paths and what a resolver said: escaped */
        char reason[sizeof(r->reason) * 4], message[sizeof(r->message) * 2];
        funcd_log(s->cfg.logger, FUNCD_LOG_INFO, "site %s/%s cannot be served: %s: %s", ns, name,
                  funcd_log_escape(reason, sizeof(reason), r->reason),
                  funcd_log_escape(message, sizeof(message), r->message));
    }
    write_status(s, r);
    cJSON_Delete(obj);
}

/* ---- the inbox ------------------------------------------------------------------------- */

static void post(funcd_sites *s, const char *key, int force)
{
    struct inbox_item *it = calloc(1, sizeof(*it));
    if (!it || !(it->key = strdup(key))) {
        free(it);
        return; /* the periodic resync catches up */
    }
    it->force = force;
    pthread_mutex_lock(&s->inbox_lock);
    int closed = s->closed;
    if (!closed) {
        *s->inbox_tail = it;
        s->inbox_tail = &it->next;
    }
    pthread_mutex_unlock(&s->inbox_lock);
    if (closed) {
        free(it->key);
        free(it);
        return;
    }
    event_active(s->wake, EV_READ, 0);
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    funcd_sites *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->inbox_lock);
        struct inbox_item *batch = s->inbox;
        s->inbox = NULL;
        s->inbox_tail = &s->inbox;
        int closed = s->closed;
        pthread_mutex_unlock(&s->inbox_lock);
        if (!batch)
            break;
        while (batch) {
            struct inbox_item *it = batch;
            batch = it->next;
            if (!closed)
                reconcile(s, it->key, it->force);
            free(it->key);
            free(it);
        }
    }
}

static void on_store_event(const funcd_store_event *ev, void *payload)
{
    post(payload, ev->key, 0);
}

void funcd_sites_source_changed(funcd_sites *s, const char *ns, const char *name)
{
    if (!s)
        return;
    char key[300];
    snprintf(key, sizeof(key), FUNCD_OBJECTS_KEY_ROOT "sites/%s/%s", ns, name);
    post(s, key, 1);
}

static int post_listed(const funcd_store_kv *kv, void *payload)
{
    post(payload, kv->key, 0);
    return 0;
}

static void on_resync(evutil_socket_t fd, short what, void *arg)
{
    funcd_sites *s = arg;
    funcd_buf prefix = FUNCD_BUF_INIT;
    if (funcd_objects_prefix(&prefix, site_kind(), NULL) == 0)
        funcd_port_store_list(s->cfg.store, prefix.data, post_listed, s, NULL);
    funcd_buf_free(&prefix);
    /* Sites whose object went while the watch was away. */
    for (unsigned b = 0; b < SITE_BUCKETS; b++)
        for (site_rec *r = s->buckets[b]; r; r = r->next) {
            char key[300];
            snprintf(key, sizeof(key), FUNCD_OBJECTS_KEY_ROOT "sites/%s/%s", r->ns, r->name);
            post(s, key, 0);
        }
}

int funcd_sites_new(funcd_sites **out, const funcd_sites_config *cfg)
{
    *out = NULL;
    funcd_sites *s = calloc(1, sizeof(*s));
    if (!s)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the sites");
    s->cfg = *cfg;
    s->cfg.bundle_cache = NULL;
    s->cfg.default_index = NULL;
    pthread_rwlock_init(&s->lock, NULL);
    pthread_mutex_init(&s->inbox_lock, NULL);
    s->inbox_tail = &s->inbox;
    pthread_mutex_init(&s->cache.lock, NULL);
    s->cache.limit = cfg->cache_bytes < 0 ? SITES_CACHE_DEFAULT_BYTES : (uint64_t)cfg->cache_bytes;
    s->default_index = strdup(cfg->default_index ? cfg->default_index : "index.html");
    char *cache = cfg->bundle_cache ? strdup(cfg->bundle_cache) : NULL;
    s->cfg.bundle_cache = cache;
    s->wake = event_new(cfg->loop, -1, 0, on_wake, s);
    s->resync = event_new(cfg->loop, -1, EV_PERSIST, on_resync, s);
    if (!s->default_index || (cfg->bundle_cache && !cache) || !s->wake || !s->resync) {
        funcd_sites_free(s);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the sites");
    }
    *out = s;
    return 0;
}

int funcd_sites_start(funcd_sites *s)
{
    uint64_t rev = 0;
    funcd_buf prefix = FUNCD_BUF_INIT;
    int rc = funcd_objects_prefix(&prefix, site_kind(), NULL);
    if (rc == 0)
        rc = funcd_port_store_list(s->cfg.store, prefix.data, post_listed, s, &rev);
    if (rc == 0)
        rc = funcd_port_store_watch(s->cfg.store, prefix.data, rev, on_store_event, s, &s->watch);
    funcd_buf_free(&prefix);
    if (rc < 0)
        return rc;
    struct timeval minute = {60, 0};
    event_add(s->resync, &minute);
    return 0;
}

void funcd_sites_close(funcd_sites *s)
{
    if (!s)
        return;
    if (s->watch) {
        funcd_port_store_unwatch(s->cfg.store, s->watch);
        s->watch = NULL;
    }
    pthread_mutex_lock(&s->inbox_lock);
    s->closed = 1;
    pthread_mutex_unlock(&s->inbox_lock);
    if (s->resync)
        event_del(s->resync);
}

void funcd_sites_free(funcd_sites *s)
{
    if (!s)
        return;
    funcd_sites_close(s);
    while (s->inbox) {
        struct inbox_item *it = s->inbox;
        s->inbox = it->next;
        free(it->key);
        free(it);
    }
    for (unsigned b = 0; b < SITE_BUCKETS; b++)
        while (s->buckets[b]) {
            site_rec *r = s->buckets[b];
            s->buckets[b] = r->next;
            funcd__site_ver_unref(r->ver);
            free(r);
        }
    if (s->wake)
        event_free(s->wake);
    if (s->resync)
        event_free(s->resync);
    free(s->hosts);
    free(s->default_index);
    free((char *)s->cfg.bundle_cache);
    pthread_rwlock_destroy(&s->lock);
    pthread_mutex_destroy(&s->inbox_lock);
    pthread_mutex_destroy(&s->cache.lock);
    free(s);
}
