/*
 * The edge configuration (copy, build from spec.edge) and the limiter:
 * rate by GCRA on one atomic word, in-flight by one atomic counter.
 *
 * GCRA (the generic cell rate algorithm) is a token bucket kept as one
 * number, the "theoretical arrival time": each admitted request moves it
 * one interval (1/rps) later, and a request is admitted while it is at
 * most burst-1 intervals ahead of now. One compare-and-swap per request,
 * shared by every gateway thread: no lock, no per-thread split of the rate
 * (which would let a client on one connection see 1/threads of it).
 */
#include "gateway/edge.h"

#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "funcd/sys/error.h"

/* ---- copying ---------------------------------------------------------- */

typedef struct packer {
    char *base; /* NULL: only measuring */
    size_t at;
} packer;

static void *pack_bytes(packer *p, const void *src, size_t n, size_t align)
{
    p->at = (p->at + align - 1) & ~(align - 1);
    void *dst = p->base ? p->base + p->at : NULL;
    if (dst && src)
        memcpy(dst, src, n);
    p->at += n;
    return dst;
}

static const char *pack_str(packer *p, const char *s)
{
    return s ? pack_bytes(p, s, strlen(s) + 1, 1) : NULL;
}

static const char *const *pack_strv(packer *p, const char *const *v, size_t n)
{
    if (!n)
        return NULL;
    const char **out = pack_bytes(p, NULL, n * sizeof(char *), sizeof(char *));
    for (size_t i = 0; i < n; i++) {
        const char *s = pack_str(p, v[i]);
        if (out)
            out[i] = s;
    }
    return out;
}

/* Lays `e` out after the struct; with p->base NULL it only measures. */
static void pack(packer *p, funcd_edge *out, const funcd_edge *e)
{
    pack_bytes(p, NULL, sizeof(funcd_edge), sizeof(void *));
    funcd_edge copy = *e;
    copy.cors_allow_origins = pack_strv(p, e->cors_allow_origins, e->n_cors_allow_origins);
    copy.cors_allow_methods = pack_strv(p, e->cors_allow_methods, e->n_cors_allow_methods);
    copy.cors_allow_headers = pack_strv(p, e->cors_allow_headers, e->n_cors_allow_headers);
    copy.headers_remove = pack_strv(p, e->headers_remove, e->n_headers_remove);
    funcd_edge_header *h = NULL;
    if (e->n_headers_set)
        h = pack_bytes(p, NULL, e->n_headers_set * sizeof(*h), sizeof(void *));
    for (size_t i = 0; i < e->n_headers_set; i++) {
        const char *name = pack_str(p, e->headers_set[i].name);
        const char *value = pack_str(p, e->headers_set[i].value);
        if (h)
            h[i] = (funcd_edge_header){name, value};
    }
    copy.headers_set = h;
    if (out)
        *out = copy;
}

funcd_edge *funcd_edge_dup(const funcd_edge *e)
{
    if (!e)
        return NULL;
    packer measure = {NULL, 0};
    pack(&measure, NULL, e);
    char *mem = malloc(measure.at);
    if (!mem)
        return NULL;
    packer p = {mem, 0};
    pack(&p, (funcd_edge *)mem, e);
    return (funcd_edge *)mem;
}

void funcd_edge_free(funcd_edge *e)
{
    free(e);
}

/* ---- building from spec.edge ------------------------------------------- */

static const cJSON *member(const cJSON *o, const char *name)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNull(m) ? NULL : m;
}

/* A validated list of strings as an array pointing into the tree. */
static const char **strings_of(const cJSON *arr, size_t *n, int *oom)
{
    *n = 0;
    int size = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : 0;
    if (size <= 0)
        return NULL;
    const char **v = calloc((size_t)size, sizeof(*v));
    if (!v) {
        *oom = 1;
        return NULL;
    }
    for (const cJSON *s = arr->child; s; s = s->next)
        if (cJSON_IsString(s))
            v[(*n)++] = s->valuestring;
    return v;
}

static uint64_t number_of(const cJSON *v, uint64_t dflt)
{
    if (cJSON_IsNumber(v))
        return v->valuedouble <= 0 ? 0 : (uint64_t)v->valuedouble;
    uint64_t q;
    if (cJSON_IsString(v) && funcd_parse_quantity(v->valuestring, &q) == 0)
        return q;
    return dflt;
}

int funcd_edge_build(const cJSON *spec_edge, const funcd_edge *defaults, funcd_edge **out)
{
    funcd_edge e = {0};
    if (defaults) {
        e.auth = defaults->auth;
        e.rps = defaults->rps;
        e.burst = defaults->burst;
        e.max_body_bytes = defaults->max_body_bytes;
        e.max_in_flight = defaults->max_in_flight;
        e.limit_per_client = defaults->limit_per_client;
        e.authorize = defaults->authorize;
        e.authorize_payload = defaults->authorize_payload;
    }
    const char **origins = NULL, **methods = NULL, **hdrs = NULL, **remove = NULL;
    funcd_edge_header *set = NULL;
    int oom = 0;
    if (cJSON_IsObject(spec_edge)) {
        const cJSON *auth = member(spec_edge, "auth");
        if (cJSON_IsString(auth))
            e.auth = strcmp(auth->valuestring, "authenticated") == 0
                         ? FUNCD_EDGE_AUTH_AUTHENTICATED
                         : FUNCD_EDGE_AUTH_OPEN;
        const cJSON *limits = member(spec_edge, "limits");
        e.rps = (uint32_t)number_of(member(limits, "rps"), e.rps);
        e.burst = (uint32_t)number_of(member(limits, "burst"), e.burst);
        e.max_body_bytes = number_of(member(limits, "maxBodyBytes"), e.max_body_bytes);
        e.max_in_flight = (uint32_t)number_of(member(limits, "maxInFlight"), e.max_in_flight);
        const cJSON *cors = member(spec_edge, "cors");
        if (cJSON_IsObject(cors)) {
            e.has_cors = 1;
            origins = strings_of(member(cors, "allowOrigins"), &e.n_cors_allow_origins, &oom);
            methods = strings_of(member(cors, "allowMethods"), &e.n_cors_allow_methods, &oom);
            hdrs = strings_of(member(cors, "allowHeaders"), &e.n_cors_allow_headers, &oom);
            e.cors_max_age = (uint32_t)number_of(member(cors, "maxAge"), 0);
        }
        const cJSON *headers = member(spec_edge, "headers");
        const cJSON *set_map = member(headers, "set");
        int n_set = cJSON_IsObject(set_map) ? cJSON_GetArraySize(set_map) : 0;
        if (n_set > 0 && !(set = calloc((size_t)n_set, sizeof(*set))))
            oom = 1;
        for (const cJSON *h = set ? set_map->child : NULL; h; h = h->next)
            if (cJSON_IsString(h))
                set[e.n_headers_set++] = (funcd_edge_header){h->string, h->valuestring};
        remove = strings_of(member(headers, "remove"), &e.n_headers_remove, &oom);
        e.compress = cJSON_IsTrue(member(spec_edge, "compress"));
    }
    e.cors_allow_origins = origins;
    e.cors_allow_methods = methods;
    e.cors_allow_headers = hdrs;
    e.headers_set = set;
    e.headers_remove = remove;
    if (e.rps && !e.burst)
        e.burst = e.rps; /* one second's worth */
    *out = oom ? NULL : funcd_edge_dup(&e);
    free(origins);
    free(methods);
    free(hdrs);
    free(remove);
    free(set);
    if (!*out)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory building a function's edge");
    return 0;
}

/* ---- the limiter --------------------------------------------------------- */

#define CLIENTS 1024 /* per-client buckets per function (a power of 2) */
#define PROBES 4

typedef struct client_bucket {
    _Atomic uint64_t key; /* funcd_edge_client_hash; 0: free */
    _Atomic uint64_t tat;
} client_bucket;

struct funcd_edge_limiter {
    atomic_uint refs;
    _Atomic uint64_t tat;       /* the function's bucket */
    atomic_uint in_flight;
    _Atomic(client_bucket *) clients; /* CLIENTS of them, once a route counts per client */
};

funcd_edge_limiter *funcd_edge_limiter_new(void)
{
    funcd_edge_limiter *l = calloc(1, sizeof(*l));
    if (l)
        atomic_init(&l->refs, 1);
    return l;
}

void funcd_edge_limiter_ref(funcd_edge_limiter *l)
{
    atomic_fetch_add_explicit(&l->refs, 1, memory_order_relaxed);
}

void funcd_edge_limiter_unref(funcd_edge_limiter *l)
{
    if (!l || atomic_fetch_sub_explicit(&l->refs, 1, memory_order_acq_rel) != 1)
        return;
    free(atomic_load(&l->clients));
    free(l);
}

int funcd_edge_limiter_prepare(funcd_edge_limiter *l, const funcd_edge *e)
{
    if (!e->limit_per_client || !e->rps || atomic_load(&l->clients))
        return 0;
    client_bucket *c = calloc(CLIENTS, sizeof(*c));
    if (!c)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory for per-client rate limits");
    client_bucket *none = NULL;
    if (!atomic_compare_exchange_strong(&l->clients, &none, c))
        free(c); /* another route update got there first */
    return 0;
}

uint64_t funcd_edge_client_hash(const void *addr, size_t len)
{
    uint64_t h = 14695981039346656037ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ ((const unsigned char *)addr)[i]) * 1099511628211ull;
    return h | 1;
}

static uint32_t gcra(_Atomic uint64_t *tat, uint64_t now, uint64_t interval, uint64_t tau)
{
    uint64_t old = atomic_load_explicit(tat, memory_order_relaxed);
    for (;;) {
        uint64_t base = old > now ? old : now;
        if (base - now > tau) {
            uint64_t wait = base - now - tau;
            uint64_t s = (wait + 999999999u) / 1000000000u;
            return s < 1 ? 1 : s > 3600 ? 3600 : (uint32_t)s;
        }
        if (atomic_compare_exchange_weak_explicit(tat, &old, base + interval,
                                                  memory_order_relaxed, memory_order_relaxed))
            return 0;
    }
}

/* The bucket of `client`: its own, or the stalest of PROBES places, taken
 * over (a full table forgets the client that waited longest; racing
 * threads may share a place for a moment, which errs toward admitting). */
static _Atomic uint64_t *client_tat(client_bucket *table, uint64_t client)
{
    size_t at = (size_t)(client >> 7) & (CLIENTS - 1);
    client_bucket *oldest = NULL;
    uint64_t oldest_tat = UINT64_MAX;
    for (size_t i = 0; i < PROBES; i++) {
        client_bucket *b = &table[(at + i) & (CLIENTS - 1)];
        uint64_t key = atomic_load_explicit(&b->key, memory_order_relaxed);
        if (key == client)
            return &b->tat;
        uint64_t t = key ? atomic_load_explicit(&b->tat, memory_order_relaxed) : 0;
        if (t < oldest_tat) {
            oldest_tat = t;
            oldest = b;
        }
    }
    atomic_store_explicit(&oldest->tat, 0, memory_order_relaxed);
    atomic_store_explicit(&oldest->key, client, memory_order_relaxed);
    return &oldest->tat;
}

uint32_t funcd_edge_rate_take(funcd_edge_limiter *l, const funcd_edge *e, uint64_t client,
                              uint64_t now_ns)
{
    if (!e->rps)
        return 0;
    uint64_t interval = 1000000000u / e->rps;
    uint64_t burst = e->burst ? e->burst : e->rps;
    uint64_t tau = interval * (burst - 1);
    client_bucket *table = e->limit_per_client
                               ? atomic_load_explicit(&l->clients, memory_order_acquire)
                               : NULL;
    _Atomic uint64_t *tat = table ? client_tat(table, client) : &l->tat;
    return gcra(tat, now_ns, interval, tau);
}

int funcd_edge_in_flight_enter(funcd_edge_limiter *l, uint32_t max)
{
    if (atomic_fetch_add_explicit(&l->in_flight, 1, memory_order_relaxed) < max)
        return 1;
    atomic_fetch_sub_explicit(&l->in_flight, 1, memory_order_relaxed);
    return 0;
}

void funcd_edge_in_flight_leave(funcd_edge_limiter *l)
{
    atomic_fetch_sub_explicit(&l->in_flight, 1, memory_order_relaxed);
}
