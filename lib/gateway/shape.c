/*
 * Shaping at the edge: CORS, response headers set and removed, gzip
 * (shape.h; docs/edge.md, "Shaping"; docs/adr/0039-edge-shaping.md).
 *
 * It all hangs on one h2o request prefilter, put on the request before
 * anything is answered: whoever answers (the proxy with the worker's
 * answer, or funcd with a JSON Status), h2o_start_response runs it, and it
 * edits the answer's headers and, when the answer is to be compressed,
 * puts a gzip stream in front of the protocol's output. The compressor
 * streams: each piece the proxy sends is deflated with a sync flush and
 * passed on at once, so nothing waits for the whole body (a function that
 * streams keeps streaming, just smaller).
 */
#include "gateway/shape.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <isa-l/igzip_lib.h>
#include <stdint.h>

#include "gateway/gateway.h"

#define GZIP_MIN_BYTES 256   /* an answer known to be smaller goes as it is */
#define GZIP_OUT_FIRST 16384 /* a fresh stream's output buffer */
#define GZIP_OUT_KEEP 65536  /* the largest output buffer a cached stream keeps */
#define GZIP_CACHE_MAX 16    /* deflate streams a gateway thread keeps for reuse */

static atomic_uint_fast64_t shape_ids; /* funcd_shape ids given */

typedef struct set_header {
    h2o_iovec_t name; /* lowercase */
    const h2o_token_t *token; /* h2o's token of the name, or NULL */
    char *orig;       /* as configured, for HTTP/1 */
    h2o_iovec_t value;
} set_header;

/* A response header name the answer loses: h2o's token, or (none) the
 * lowercase name. */
typedef struct strip_name {
    const h2o_token_t *token;
    h2o_iovec_t name;
} strip_name;

struct funcd_shape {
    atomic_uint refs;
    uint64_t id; /* this process's, never reused: the gzip learners' key */
    int cors, any_origin, any_method, any_header, compress;
    h2o_iovec_t *origins;
    size_t n_origins;
    h2o_iovec_t *methods;
    size_t n_methods;
    h2o_iovec_t *headers; /* lowercase */
    size_t n_headers;
    h2o_iovec_t allow_methods, allow_headers, max_age; /* a preflight's answer */
    set_header *set;
    size_t n_set;
    h2o_iovec_t *remove; /* lowercase */
    size_t n_remove;
    /* every name removed from an answer, in one pass: the CORS header the
     * configuration answers for, headers.remove and headers.set's names */
    strip_name *strip;
    size_t n_strip;
    /* headers.remove or .set names a header the gateway adds (Vary, or
     * Access-Control-Allow-Origin): they go again after it added them */
    int restrip;
};

/* ---- the configuration ------------------------------------------------ */

static int is_star(const char *s)
{
    return s[0] == '*' && s[1] == '\0';
}

/* The gateway frames the answer and encodes it: these are not the
 * configuration's to set or remove. */
static int owned_by_gateway(const char *name)
{
    static const char *const owned[] = {"content-length", "transfer-encoding", "connection",
                                        "keep-alive", "proxy-connection", "te", "trailer",
                                        "upgrade", "content-encoding", "x-funcd-invocation-id",
                                        NULL};
    for (const char *const *o = owned; *o; o++)
        if (h2o_lcstris(name, strlen(name), *o, strlen(*o)))
            return 1;
    return 0;
}

static int dup_iov(h2o_iovec_t *out, const char *s, int lower)
{
    size_t n = strlen(s);
    char *p = malloc(n + 1);
    if (!p)
        return -1;
    memcpy(p, s, n + 1);
    if (lower)
        h2o_strtolower(p, n);
    *out = h2o_iovec_init(p, n);
    return 0;
}

/* "a, b, c" of `n` strings (malloc'ed; "" when n is 0). */
static int join(h2o_iovec_t *out, const char *const *v, size_t n)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += strlen(v[i]) + 2;
    char *p = malloc(len + 1);
    if (!p)
        return -1;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(v[i]);
        if (at) {
            memcpy(p + at, ", ", 2);
            at += 2;
        }
        memcpy(p + at, v[i], l);
        at += l;
    }
    p[at] = '\0';
    *out = h2o_iovec_init(p, at);
    return 0;
}

static void free_list(h2o_iovec_t *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i].base);
    free(v);
}

static void shape_free(funcd_shape *s)
{
    free_list(s->origins, s->n_origins);
    free_list(s->methods, s->n_methods);
    free_list(s->headers, s->n_headers);
    free(s->allow_methods.base);
    free(s->allow_headers.base);
    free(s->max_age.base);
    for (size_t i = 0; s->set && i < s->n_set; i++) {
        free(s->set[i].name.base);
        free(s->set[i].orig);
        free(s->set[i].value.base);
    }
    free(s->set);
    free_list(s->remove, s->n_remove);
    free(s->strip);
    free(s);
}

/* Copies a list (minus "*", which sets *star) into `out`. */
static int copy_list(h2o_iovec_t **out, size_t *n, int *star, const char *const *v, size_t count,
                     int lower)
{
    *out = calloc(count ? count : 1, sizeof(**out));
    if (!*out)
        return -1;
    for (size_t i = 0; i < count; i++) {
        if (star && is_star(v[i])) {
            *star = 1;
            continue;
        }
        if (dup_iov(&(*out)[*n], v[i], lower) < 0)
            return -1;
        (*n)++;
    }
    return 0;
}

int funcd_shape_new(funcd_shape **out, const funcd_edge *edge)
{
    *out = NULL;
    if (!edge)
        return 0;
    size_t n_set = 0, n_remove = 0;
    for (size_t i = 0; i < edge->n_headers_set; i++)
        n_set += !owned_by_gateway(edge->headers_set[i].name);
    for (size_t i = 0; i < edge->n_headers_remove; i++)
        n_remove += !owned_by_gateway(edge->headers_remove[i]);
    if (!edge->has_cors && !n_set && !n_remove && !edge->compress)
        return 0;
    funcd_shape *s = calloc(1, sizeof(*s));
    if (!s)
        return -1;
    atomic_init(&s->refs, 1);
    s->id = atomic_fetch_add_explicit(&shape_ids, 1, memory_order_relaxed) + 1;
    s->compress = edge->compress != 0;
    s->cors = edge->has_cors != 0;
    static const char *const safelisted[] = {"GET", "HEAD", "POST"};
    char age[24];
    snprintf(age, sizeof(age), "%u", (unsigned)edge->cors_max_age);
    if (copy_list(&s->origins, &s->n_origins, &s->any_origin, edge->cors_allow_origins,
                  edge->n_cors_allow_origins, 0) < 0 ||
        copy_list(&s->methods, &s->n_methods, &s->any_method, edge->cors_allow_methods,
                  edge->n_cors_allow_methods, 0) < 0 ||
        copy_list(&s->headers, &s->n_headers, &s->any_header, edge->cors_allow_headers,
                  edge->n_cors_allow_headers, 1) < 0 ||
        (edge->n_cors_allow_methods
             ? join(&s->allow_methods, edge->cors_allow_methods, edge->n_cors_allow_methods)
             : join(&s->allow_methods, safelisted, 3)) < 0 ||
        join(&s->allow_headers, edge->cors_allow_headers, edge->n_cors_allow_headers) < 0 ||
        (edge->cors_max_age && dup_iov(&s->max_age, age, 0) < 0))
        goto oom;
    s->set = calloc(n_set ? n_set : 1, sizeof(*s->set));
    if (!s->set)
        goto oom;
    for (size_t i = 0; i < edge->n_headers_set; i++) {
        const funcd_edge_header *eh = &edge->headers_set[i];
        if (owned_by_gateway(eh->name))
            continue;
        set_header *h = &s->set[s->n_set++];
        if (dup_iov(&h->name, eh->name, 1) < 0 || !(h->orig = strdup(eh->name)) ||
            dup_iov(&h->value, eh->value, 0) < 0)
            goto oom;
    }
    s->remove = calloc(n_remove ? n_remove : 1, sizeof(*s->remove));
    if (!s->remove)
        goto oom;
    for (size_t i = 0; i < edge->n_headers_remove; i++)
        if (!owned_by_gateway(edge->headers_remove[i]) &&
            dup_iov(&s->remove[s->n_remove++], edge->headers_remove[i], 1) < 0)
            goto oom;
    s->strip = calloc(1 + s->n_remove + s->n_set, sizeof(*s->strip));
    if (!s->strip)
        goto oom;
    if (s->cors)
        s->strip[s->n_strip++] = (strip_name){H2O_TOKEN_ACCESS_CONTROL_ALLOW_ORIGIN,
                                              H2O_TOKEN_ACCESS_CONTROL_ALLOW_ORIGIN->buf};
    for (size_t i = 0; i < s->n_remove; i++)
        s->strip[s->n_strip++] = (strip_name){h2o_lookup_token(s->remove[i].base, s->remove[i].len),
                                              s->remove[i]};
    for (size_t i = 0; i < s->n_set; i++) {
        s->set[i].token = h2o_lookup_token(s->set[i].name.base, s->set[i].name.len);
        s->strip[s->n_strip++] = (strip_name){s->set[i].token, s->set[i].name};
    }
    for (size_t i = s->cors; i < s->n_strip; i++)
        s->restrip |= s->strip[i].token == H2O_TOKEN_VARY ||
                      s->strip[i].token == H2O_TOKEN_ACCESS_CONTROL_ALLOW_ORIGIN;
    *out = s;
    return 0;
oom:
    shape_free(s);
    return -1;
}

void funcd_shape_inherit(funcd_shape *fresh, const funcd_shape *old)
{
    if (fresh && old)
        fresh->id = old->id;
}

void funcd_shape_ref(funcd_shape *s)
{
    atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}

void funcd_shape_unref(funcd_shape *s)
{
    if (s && atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1)
        shape_free(s);
}

/* ---- parsers ------------------------------------------------------------ */

static int is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* The next element of a comma list in [*p, end), trimmed; 0 at the end. */
static int next_element(const char **p, const char *end, h2o_iovec_t *el)
{
    while (*p < end && (is_ows(**p) || **p == ','))
        (*p)++;
    if (*p == end)
        return 0;
    const char *start = *p;
    while (*p < end && **p != ',')
        (*p)++;
    const char *e = *p;
    while (e > start && is_ows(e[-1]))
        e--;
    *el = h2o_iovec_init(start, (size_t)(e - start));
    return 1;
}

/* An Accept-Encoding element's q is zero ("q=0", "q=0.000"). */
static int q_is_zero(const char *p, const char *end)
{
    while (p < end) {
        const char *semi = memchr(p, ';', (size_t)(end - p));
        if (!semi)
            return 0;
        p = semi + 1;
        while (p < end && is_ows(*p))
            p++;
        if (end - p < 2 || (p[0] != 'q' && p[0] != 'Q') || p[1] != '=')
            continue;
        p += 2;
        if (p == end || *p != '0')
            return 0;
        for (p++; p < end && *p != ';' && !is_ows(*p); p++)
            if (*p != '.' && *p != '0')
                return 0;
        return 1;
    }
    return 0;
}

/* `el` is `lower` (lowercase ASCII), in any case. */
static int el_is(h2o_iovec_t el, const char *lower, size_t len)
{
    if (el.len != len)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = el.base[i];
        if ((c >= 'A' && c <= 'Z' ? (char)(c + 32) : c) != lower[i])
            return 0;
    }
    return 1;
}

int funcd_shape_accepts_gzip(const char *v, size_t len)
{
    const char *p = v, *end = v + len;
    h2o_iovec_t el;
    if (!memchr(v, ';', len)) { /* no q anywhere: what every browser sends */
        while (next_element(&p, end, &el))
            if (el_is(el, "gzip", 4) || el_is(el, "x-gzip", 6) || el_is(el, "*", 1))
                return 1;
        return 0;
    }
    int gzip = -1, star = -1; /* -1: not named; else acceptable */
    while (next_element(&p, end, &el)) {
        const char *semi = memchr(el.base, ';', el.len);
        size_t nl = semi ? (size_t)(semi - el.base) : el.len;
        while (nl && is_ows(el.base[nl - 1]))
            nl--;
        int ok = !q_is_zero(el.base, el.base + el.len);
        if (h2o_lcstris(el.base, nl, H2O_STRLIT("gzip")) ||
            h2o_lcstris(el.base, nl, H2O_STRLIT("x-gzip")))
            gzip = gzip == 1 ? 1 : ok;
        else if (nl == 1 && el.base[0] == '*')
            star = star == 1 ? 1 : ok;
    }
    return gzip >= 0 ? gzip : star == 1;
}

static int has_suffix(const char *s, size_t n, const char *suf)
{
    size_t l = strlen(suf);
    return n >= l && h2o_lcstris(s + n - l, l, suf, l);
}

int funcd_shape_compressible_type(const char *v, size_t len)
{
    const char *semi = memchr(v, ';', len);
    size_t n = semi ? (size_t)(semi - v) : len;
    while (n && is_ows(v[n - 1]))
        n--;
    while (n && is_ows(*v)) {
        v++;
        n--;
    }
    if (n > 5 && h2o_lcstris(v, 5, H2O_STRLIT("text/")))
        return !h2o_lcstris(v, n, H2O_STRLIT("text/event-stream"));
    static const char *const types[] = {"application/json", "application/javascript",
                                        "application/x-javascript", "application/ecmascript",
                                        "application/xml", "application/wasm", NULL};
    for (const char *const *t = types; *t; t++)
        if (h2o_lcstris(v, n, *t, strlen(*t)))
            return 1;
    return has_suffix(v, n, "+json") || has_suffix(v, n, "+xml");
}

int funcd_shape_origin_allowed(const funcd_shape *s, h2o_iovec_t origin)
{
    if (!s->cors || !origin.base)
        return 0;
    if (s->any_origin)
        return 1;
    /* Browsers send scheme and host in lowercase; a configured origin may
     * not be. */
    for (size_t i = 0; i < s->n_origins; i++)
        if (s->origins[i].len == origin.len &&
            strncasecmp(s->origins[i].base, origin.base, origin.len) == 0)
            return 1;
    return 0;
}

static int method_allowed(const funcd_shape *s, h2o_iovec_t m)
{
    if (s->any_method || h2o_memis(m.base, m.len, H2O_STRLIT("GET")) ||
        h2o_memis(m.base, m.len, H2O_STRLIT("HEAD")) || h2o_memis(m.base, m.len, H2O_STRLIT("POST")))
        return 1;
    for (size_t i = 0; i < s->n_methods; i++) /* methods are case-sensitive */
        if (h2o_memis(m.base, m.len, s->methods[i].base, s->methods[i].len))
            return 1;
    return 0;
}

static int header_allowed(const funcd_shape *s, h2o_iovec_t h)
{
    if (s->any_header)
        return 1;
    for (size_t i = 0; i < s->n_headers; i++)
        if (h2o_lcstris(h.base, h.len, s->headers[i].base, s->headers[i].len))
            return 1;
    return 0;
}

int funcd_shape_preflight_allowed(const funcd_shape *s, h2o_iovec_t origin, h2o_iovec_t method,
                                  h2o_iovec_t req_headers)
{
    if (!funcd_shape_origin_allowed(s, origin) || !method.len || !method_allowed(s, method))
        return 0;
    const char *p = req_headers.base, *end = p + req_headers.len;
    h2o_iovec_t el;
    while (p && next_element(&p, end, &el))
        if (!header_allowed(s, el))
            return 0;
    return 1;
}

/* ---- headers of the answer --------------------------------------------- */

/* Whether an answer's header is `token` (h2o's) or else `lower`, in any
 * case (over HTTP/1 a worker's names keep theirs). A name h2o made its
 * token is that token's string; any other is compared as text. */
static int res_is(const h2o_header_t *h, const h2o_token_t *token, const char *lower, size_t len)
{
    /* h2o_iovec_is_token, without a call into libh2o per header */
    const h2o_token_t *t = (const h2o_token_t *)(uintptr_t)h->name;
    if (t >= h2o__tokens && t < h2o__tokens + H2O_MAX_TOKENS)
        return token && h->name == &token->buf;
    return h2o_lcstris(h->name->base, h->name->len, lower, len);
}

/* The answer's headers named `token`, in any case (a worker's names keep theirs). */
static ssize_t find_tok(const h2o_headers_t *hs, const h2o_token_t *token, ssize_t after)
{
    for (size_t i = (size_t)(after + 1); i < hs->size; i++)
        if (res_is(&hs->entries[i], token, token->buf.base, token->buf.len))
            return (ssize_t)i;
    return -1;
}

/* Removes every header of the `n` names, in one pass over the answer. */
static void strip_res(h2o_headers_t *hs, const strip_name *names, size_t n)
{
    for (size_t i = 0; i < hs->size;) {
        const h2o_header_t *h = &hs->entries[i];
        size_t k = 0;
        while (k < n && !res_is(h, names[k].token, names[k].name.base, names[k].name.len))
            k++;
        if (k < n)
            h2o_delete_header(hs, (ssize_t)i); /* the next entry moved to i */
        else
            i++;
    }
}

static h2o_iovec_t req_header(h2o_req_t *req, const char *lower, size_t len)
{
    ssize_t i = h2o_find_header_by_str(&req->headers, lower, len, -1);
    return i < 0 ? h2o_iovec_init(NULL, 0) : req->headers.entries[i].value;
}

/* Adds `what` (e.g. "Origin") to the answer's Vary unless it is there. */
static void add_vary(h2o_req_t *req, const char *what, size_t len)
{
    h2o_headers_t *hs = &req->res.headers;
    ssize_t i = find_tok(hs, H2O_TOKEN_VARY, -1);
    if (i < 0) {
        h2o_add_header(&req->pool, hs, H2O_TOKEN_VARY, NULL, what, len);
        return;
    }
    h2o_iovec_t *v = &hs->entries[i].value;
    const char *p = v->base, *end = p + v->len;
    h2o_iovec_t el;
    while (next_element(&p, end, &el))
        if (h2o_lcstris(el.base, el.len, "*", 1) ||
            (el.len == len && strncasecmp(el.base, what, len) == 0))
            return;
    h2o_iovec_t joined = h2o_concat(&req->pool, *v, h2o_iovec_init(H2O_STRLIT(", ")),
                                    h2o_iovec_init(what, len));
    *v = joined;
}

/* ---- gzip ----------------------------------------------------------------- */

/*
 * Answers are compressed with ISA-L's igzip at its fastest level, 0: one
 * hash probe per position and the Huffman tables it is given
 * (docs/adr/0062-gzip-isal-learned-tables.md). ISA-L's default tables are
 * made for any data; a function's answers look alike (the same JSON keys,
 * the same markup), and tables learned from them code them nearly as tightly
 * as zlib's level 1 does, in about a third of its time.
 *
 * Learning, per function (its funcd_shape) and gateway thread, so that
 * nothing is shared: once a function has kept its place for GZIP_ADMIT
 * answers, the first GZIP_LEARN answers of every GZIP_ROUND are sampled (a
 * histogram of their first GZIP_SAMPLE_MAX bytes); when a round has its
 * samples, tables are built from them and serve the answers that follow.
 * Each sampled answer is also compressed a second time, into scratch, with
 * the tables not in use (the function's own or ISA-L's default), and the
 * next round uses whichever made fewer bytes: a function whose answers do
 * not look alike goes back to the default tables after one round.
 *
 * Learned tables code only answers that come whole, compressed in one call
 * that stores the bytes as they are when coding would make them larger. A
 * stream is deflated piece by piece, each with a sync flush, with ISA-L's
 * default tables, or deflate's static ones (no table in the block: a small
 * piece, or a stream that has come out larger than it went in).
 */
#define GZIP_LEARN 8           /* answers sampled per round */
#define GZIP_ROUND 1024        /* a round starts every so many answers of a function */
#define GZIP_SAMPLE_MAX 65536  /* bytes of one answer a histogram takes */
#define GZIP_ADMIT 64          /* answers a function's place must last before it samples */
#define GZIP_LEARNERS 64       /* functions a gateway thread learns (least recently used go) */
#define GZIP_STATIC_BELOW 1024 /* a stream's piece smaller than this: deflate's static tables */

typedef struct gz {
    struct isal_zstream zs;
    unsigned char *out;
    size_t cap;
    struct gz *next;
} gz;

typedef struct learner {
    uint64_t shape;   /* the function's funcd_shape id; 0: a free place */
    uint64_t last;    /* the thread's clock when it was last used */
    uint64_t answers; /* answers compressed */
    int have_own, use_own;
    struct isal_hufftables own;
    struct isal_huff_histogram *hist; /* the round's, while it samples */
    unsigned sampled;                 /* answers ended into it */
    uint64_t out_used, out_other;     /* whole sampled answers: bytes with the tables used, the others */
} learner;

static _Thread_local struct {
    gz *free;
    unsigned n;
    int closed;        /* the thread is ending: streams returned now are freed */
    learner *learners; /* GZIP_LEARNERS of them, from the first compressed answer on */
    uint64_t clock;
} gz_cache;

/* The learner of function `id` on this thread; with `make`, a place is
 * taken for it (the least recently used one's). NULL: none (or no memory). */
static learner *learner_of(uint64_t id, int make)
{
    if (gz_cache.closed)
        return NULL;
    if (!gz_cache.learners &&
        (!make || !(gz_cache.learners = calloc(GZIP_LEARNERS, sizeof(learner)))))
        return NULL;
    learner *l = gz_cache.learners, *lru = l;
    for (int i = 0; i < GZIP_LEARNERS; i++) {
        if (l[i].shape == id) {
            l[i].last = ++gz_cache.clock;
            return &l[i];
        }
        if (l[i].last < lru->last)
            lru = &l[i];
    }
    if (!make)
        return NULL;
    free(lru->hist);
    memset(lru, 0, sizeof(*lru));
    lru->shape = id;
    lru->last = ++gz_cache.clock;
    /* no sampling before GZIP_ADMIT answers: functions that only pass
     * through a full table pay for no histogram */
    lru->answers = GZIP_ROUND - GZIP_ADMIT;
    return lru;
}

/* A round has its samples: the better tables of the round go on, and the
 * function's own are built again from what it sampled. */
static void learner_round(learner *l)
{
    if (!l->have_own || !l->out_other)
        l->use_own = 1; /* no evidence: tables from its own answers are the best guess */
    else if (l->out_other < l->out_used)
        l->use_own = !l->use_own;
    struct isal_hufftables *fresh = malloc(sizeof(*fresh));
    if (fresh && isal_create_hufftables(fresh, l->hist) == 0) {
        memcpy(&l->own, fresh, sizeof(*fresh));
        l->have_own = 1;
    }
    free(fresh);
    l->use_own &= l->have_own;
    free(l->hist);
    l->hist = NULL;
    l->sampled = 0;
    l->out_used = l->out_other = 0;
}

static void gz_destroy(gz *z)
{
    free(z->out);
    free(z);
}

/* A stream ready for an answer, coding with `tables` (NULL: ISA-L's).
 * Learned tables are a learner's own, not copied: they code only a whole
 * answer, compressed within the call that took the stream, before any
 * round can rebuild them. */
static gz *gz_take(const struct isal_hufftables *tables)
{
    gz *z = gz_cache.free;
    if (z) {
        gz_cache.free = z->next;
        gz_cache.n--;
    } else {
        if (!(z = malloc(sizeof(*z))))
            return NULL;
        z->out = NULL;
        z->cap = 0;
    }
    isal_deflate_init(&z->zs);
    z->zs.level = 0;
    z->zs.gzip_flag = IGZIP_GZIP;
    if (tables)
        isal_deflate_set_hufftables(&z->zs, (struct isal_hufftables *)(uintptr_t)tables,
                                    IGZIP_HUFFTABLE_CUSTOM);
    return z;
}

static void gz_give_back(gz *z)
{
    if (gz_cache.closed || gz_cache.n >= GZIP_CACHE_MAX) {
        gz_destroy(z);
        return;
    }
    if (z->cap > GZIP_OUT_KEEP) {
        free(z->out);
        z->out = NULL;
        z->cap = 0;
    }
    z->next = gz_cache.free;
    gz_cache.free = z;
    gz_cache.n++;
}

void funcd_shape_thread_dispose(void)
{
    gz_cache.closed = 1;
    while (gz_cache.free) {
        gz *z = gz_cache.free;
        gz_cache.free = z->next;
        gz_destroy(z);
    }
    gz_cache.n = 0;
    for (int i = 0; gz_cache.learners && i < GZIP_LEARNERS; i++)
        free(gz_cache.learners[i].hist);
    free(gz_cache.learners);
    gz_cache.learners = NULL;
}

static int gz_reserve(gz *z, size_t cap)
{
    if (z->cap >= cap)
        return 0;
    unsigned char *out = realloc(z->out, cap);
    if (!out)
        return -1;
    z->out = out;
    z->cap = cap;
    return 0;
}

/* Room for a whole answer of `len` bytes compressed: stored blocks take 5
 * bytes per 64 KiB, gzip's header and trailer 18. */
static size_t gz_whole_cap(size_t len)
{
    return len + len / 8192 + 1024;
}

/* A whole answer in one call: the gzip member in out[0, *used), `out` having
 * gz_whole_cap(in.len) bytes. One call stores the bytes as they are where
 * coding them would make more. */
static int gz_whole(gz *z, h2o_iovec_t in, unsigned char *out, size_t *used)
{
    size_t cap = gz_whole_cap(in.len);
    z->zs.next_in = (uint8_t *)in.base;
    z->zs.avail_in = (uint32_t)in.len;
    z->zs.end_of_stream = 1;
    z->zs.flush = NO_FLUSH;
    z->zs.next_out = out;
    z->zs.avail_out = (uint32_t)cap;
    if (isal_deflate_stateless(&z->zs) != COMP_OK)
        return -1;
    *used = cap - z->zs.avail_out;
    return 0;
}

/* Deflates the pieces of a stream into z->out from `*used` on, with a sync
 * flush after the last (or the end of the stream when `final`); `*grew`
 * once the stream has come out larger than it went in. Each call starts a
 * block: small pieces, and a stream that grew, get deflate's static tables
 * (nothing in the block's header), the rest ISA-L's default ones. */
static int gz_stream(gz *z, h2o_iovec_t *in, size_t n, int final, size_t *used, int *grew)
{
    struct isal_zstream *zs = &z->zs;
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += in[i].len;
    isal_deflate_set_hufftables(zs, NULL, *grew || total < GZIP_STATIC_BELOW
                                              ? IGZIP_HUFFTABLE_STATIC
                                              : IGZIP_HUFFTABLE_DEFAULT);
    size_t i = 0;
    do {
        int last = i + 1 >= n;
        if (n && in[i].len > UINT32_MAX / 2)
            return -1;
        zs->next_in = n ? (uint8_t *)in[i].base : NULL;
        zs->avail_in = n ? (uint32_t)in[i].len : 0;
        zs->flush = last && !final ? SYNC_FLUSH : NO_FLUSH;
        zs->end_of_stream = last && final;
        for (;;) {
            if (*used == z->cap && gz_reserve(z, z->cap ? z->cap * 2 : GZIP_OUT_FIRST) < 0)
                return -1;
            zs->next_out = z->out + *used;
            zs->avail_out = (uint32_t)(z->cap - *used);
            if (isal_deflate(zs) != COMP_OK)
                return -1;
            size_t was = *used;
            *used = z->cap - zs->avail_out;
            int state = zs->internal_state.state;
            int done = zs->end_of_stream ? state == ZSTATE_END
                                         : zs->avail_out > 0 ||
                                               (zs->flush == SYNC_FLUSH && state == ZSTATE_NEW_HDR);
            if (zs->avail_in == 0 && done)
                break;
            if (*used == was && zs->avail_out > 0)
                return -1; /* no progress with room to write: never expected */
        }
    } while (++i < n);
    if (zs->total_out > (uint64_t)zs->total_in + 64)
        *grew = 1;
    return 0;
}

typedef struct gz_ostream {
    h2o_ostream_t super; /* first */
    gz *z;
    uint64_t shape;   /* the function's funcd_shape id (its learner) */
    int decided, plain, sample, whole, grew;
    size_t sampled;   /* bytes of the answer histogrammed */
    h2o_iovec_t out;
    unsigned char *whole_out; /* a whole answer's gzip member (malloc'd) */
} gz_ostream;

static void dispose_gz_ostream(void *p)
{
    gz_ostream *g = p;
    if (g->z)
        gz_give_back(g->z);
    free(g->whole_out);
}

/* The first piece decides: an answer that is complete and tiny goes as it
 * is (funcd's own JSON Status, a short body the worker sent chunked). */
static void gz_decide(gz_ostream *g, h2o_req_t *req, h2o_iovec_t *in, size_t n,
                      h2o_send_state_t state)
{
    g->decided = 1;
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += in[i].len;
    if (!h2o_send_state_is_in_progress(state) && total < GZIP_MIN_BYTES) {
        g->plain = 1;
        /* HTTP/2 frames the length itself. Over HTTP/1.1 h2o's chunked
         * filter ran after on_setup_ostream and already chose chunked (it
         * added Transfer-Encoding): a Content-Length too would make two
         * framings of one answer. */
        if (req->version >= 0x200)
            req->res.content_length = total;
        return;
    }
    learner *l = learner_of(g->shape, 1);
    /* whole: all of it in one piece, compressed in one call */
    g->whole = !h2o_send_state_is_in_progress(state) && n == 1;
    if (!(g->z = gz_take(g->whole && l && l->use_own ? &l->own : NULL))) {
        g->plain = 1; /* out of memory: send it as it is */
        return;
    }
    if (l && l->answers++ % GZIP_ROUND < GZIP_LEARN &&
        (l->hist || (l->hist = calloc(1, sizeof(*l->hist)))))
        g->sample = 1;
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_ENCODING, NULL,
                   H2O_STRLIT("gzip"));
    /* Other bytes than the worker's: a strong validator no longer holds. */
    ssize_t e = find_tok(&req->res.headers, H2O_TOKEN_ETAG, -1);
    if (e >= 0) {
        h2o_iovec_t *v = &req->res.headers.entries[e].value;
        if (!(v->len >= 2 && v->base[0] == 'W' && v->base[1] == '/'))
            *v = h2o_concat(&req->pool, h2o_iovec_init(H2O_STRLIT("W/")), *v);
    }
}

/* Histograms what the sample still takes of these pieces. */
static void gz_sample(gz_ostream *g, learner *l, const h2o_iovec_t *in, size_t n)
{
    for (size_t i = 0; i < n && g->sampled < GZIP_SAMPLE_MAX; i++) {
        size_t take = GZIP_SAMPLE_MAX - g->sampled;
        if (in[i].len < take)
            take = in[i].len;
        isal_update_histogram((uint8_t *)in[i].base, (int)take, l->hist);
        g->sampled += take;
    }
}

static void gz_do_send(h2o_ostream_t *os, h2o_req_t *req, h2o_iovec_t *in, size_t n,
                       h2o_send_state_t state)
{
    gz_ostream *g = (gz_ostream *)os;
    if (!g->decided)
        gz_decide(g, req, in, n, state);
    if (g->plain) {
        h2o_ostream_send_next(os, req, in, n, state);
        return;
    }
    /* the learner, unless its round ended or its place went to another
     * function while this answer streamed */
    learner *l = g->sample ? learner_of(g->shape, 0) : NULL;
    if (l && !l->hist)
        l = NULL;
    if (l)
        gz_sample(g, l, in, n);
    int final = state == H2O_SEND_STATE_FINAL, whole = g->whole && final;
    size_t used = 0;
    unsigned char *out = NULL;
    int rc;
    if (whole) {
        /* The output lives with the answer and the stream (82 KiB of state)
         * goes back at once: with many answers in flight, a stream each
         * overflowed the thread's cache, and malloc gave their pages back to
         * the kernel and faulted them in again, answer after answer. (Not
         * from the request's pool: h2o aborts where malloc fails.) */
        rc = in[0].len > UINT32_MAX / 2 ? -1 : 0;
        if (rc == 0 && !(out = g->whole_out = malloc(gz_whole_cap(in[0].len))))
            rc = -1;
        if (rc == 0)
            rc = gz_whole(g->z, in[0], out, &used);
    } else {
        rc = gz_stream(g->z, in, n, final, &used, &g->grew);
        out = g->z->out;
    }
    if (rc < 0) {
        h2o_ostream_send_next(os, req, NULL, 0, H2O_SEND_STATE_ERROR); /* cut the stream */
        return;
    }
    if (l && final) {
        if (whole && l->have_own) { /* the other tables' bytes, for the round's choice */
            gz *t = gz_take(l->use_own ? NULL : &l->own);
            size_t other = 0;
            if (t && gz_reserve(t, gz_whole_cap(in[0].len)) == 0 &&
                gz_whole(t, in[0], t->out, &other) == 0) {
                l->out_used += used;
                l->out_other += other;
            }
            if (t)
                gz_give_back(t);
        }
        if (++l->sampled >= GZIP_LEARN)
            learner_round(l);
    }
    if (whole) {
        gz_give_back(g->z);
        g->z = NULL;
    }
    g->out = h2o_iovec_init(out, used);
    h2o_ostream_send_next(os, req, &g->out, used ? 1 : 0, state);
}

/* The answer is one to compress, the client's acceptance aside. */
static int worth_compressing(h2o_req_t *req)
{
    int st = req->res.status;
    if (st < 200 || st == 204 || st == 206 || st == 304)
        return 0;
    if (h2o_memis(req->input.method.base, req->input.method.len, H2O_STRLIT("HEAD")))
        return 0;
    /* the length first: it needs no look at the headers */
    if (req->res.content_length != SIZE_MAX && req->res.content_length < GZIP_MIN_BYTES)
        return 0;
    const h2o_headers_t *hs = &req->res.headers;
    ssize_t ct = find_tok(hs, H2O_TOKEN_CONTENT_TYPE, -1);
    if (ct < 0 || !funcd_shape_compressible_type(hs->entries[ct].value.base,
                                                 hs->entries[ct].value.len))
        return 0;
    if (find_tok(hs, H2O_TOKEN_CONTENT_ENCODING, -1) >= 0 ||
        find_tok(hs, H2O_TOKEN_CONTENT_RANGE, -1) >= 0)
        return 0;
    ssize_t cc = -1;
    while ((cc = find_tok(hs, H2O_TOKEN_CACHE_CONTROL, cc)) >= 0) {
        h2o_iovec_t v = hs->entries[cc].value;
        const char *p = v.base, *end = p + v.len;
        h2o_iovec_t el;
        while (next_element(&p, end, &el))
            if (h2o_lcstris(el.base, el.len, H2O_STRLIT("no-transform")))
                return 0;
    }
    return 1;
}

/* ---- the request ------------------------------------------------------- */

typedef struct shape_req {
    h2o_req_prefilter_t super; /* first */
    funcd_shape *s;            /* a reference */
    h2o_iovec_t origin;        /* the request's Origin (cors), or none */
    int gzip_ok;               /* compress, and the client accepts gzip */
} shape_req;

static void dispose_shape_req(void *p)
{
    funcd_shape_unref(((shape_req *)p)->s);
}

static void on_setup_ostream(h2o_req_prefilter_t *pf, h2o_req_t *req, h2o_ostream_t **slot)
{
    shape_req *sr = (shape_req *)pf;
    const funcd_shape *s = sr->s;
    h2o_headers_t *hs = &req->res.headers;
    /* The worker's Access-Control-Allow-Origin (the configuration answers
     * for CORS, not the worker), headers.remove and the names headers.set
     * replaces, in one pass; nothing added below is one of them but what
     * headers.set adds last, so the operator's word stays final. */
    strip_res(hs, s->strip, s->n_strip);
    if (s->cors) {
        if (funcd_shape_origin_allowed(s, sr->origin)) {
            h2o_iovec_t v = s->any_origin ? h2o_iovec_init(H2O_STRLIT("*")) : sr->origin;
            h2o_add_header(&req->pool, hs, H2O_TOKEN_ACCESS_CONTROL_ALLOW_ORIGIN, NULL, v.base,
                           v.len);
        }
    }
    int vary_origin = s->cors && !s->any_origin;
    int compressible = s->compress && worth_compressing(req);
    if (vary_origin && compressible && find_tok(hs, H2O_TOKEN_VARY, -1) < 0) {
        /* the usual case in one header, built once */
        h2o_add_header(&req->pool, hs, H2O_TOKEN_VARY, NULL,
                       H2O_STRLIT("Origin, Accept-Encoding"));
    } else {
        if (vary_origin)
            add_vary(req, H2O_STRLIT("Origin"));
        if (compressible)
            add_vary(req, H2O_STRLIT("Accept-Encoding"));
    }
    if (compressible) {
        /* Over HTTP/1.1 an answer whose length compressing changes must
         * be chunked, and h2o 2.2.5 chunks only 200s: any other status would
         * go close-delimited and end the connection, so it goes as it is. */
        if (sr->gzip_ok && (req->version >= 0x200 || (req->version == 0x101 && req->res.status == 200))) {
            gz_ostream *g = h2o_mem_alloc_shared(&req->pool, sizeof(*g), dispose_gz_ostream);
            memset(g, 0, sizeof(*g));
            g->super.do_send = gz_do_send;
            g->super.next = *slot;
            *slot = &g->super;
            slot = &g->super.next;
            g->shape = s->id;
            req->res.content_length = SIZE_MAX; /* decided on the first piece */
        }
    }
    if (s->restrip) /* headers.remove and .set's names, again */
        strip_res(hs, s->strip + s->cors, s->n_strip - (size_t)s->cors);
    for (size_t i = 0; i < s->n_set; i++) {
        const set_header *h = &s->set[i];
        if (h->token) {
            h2o_add_header(&req->pool, hs, h->token, h->orig, h->value.base, h->value.len);
        } else { /* the name lives as long as the request's reference to `s` */
            h2o_vector_reserve(&req->pool, hs, hs->size + 1);
            hs->entries[hs->size++] = (h2o_header_t){(h2o_iovec_t *)(uintptr_t)&h->name, h->orig,
                                                     h->value};
        }
    }
    h2o_setup_next_prefilter(pf, req, slot);
}

static void answer_preflight(h2o_req_t *req, shape_req *sr, h2o_iovec_t method)
{
    const funcd_shape *s = sr->s;
    h2o_iovec_t asked = req_header(req, H2O_STRLIT("access-control-request-headers"));
    if (!funcd_shape_preflight_allowed(s, sr->origin, method, asked)) {
        h2o_iovec_t o = sr->origin;
        sr->origin = h2o_iovec_init(NULL, 0); /* and no CORS headers */
        funcd_gw_send_status(req, 403, "Forbidden",
                             "CORS preflight refused: origin %.*s, method %.*s%s%.*s: not "
                             "allowed by spec.edge.cors",
                             (int)(o.len > 200 ? 200 : o.len), o.base,
                             (int)(method.len > 32 ? 32 : method.len), method.base,
                             asked.len ? ", headers " : "", (int)(asked.len > 200 ? 200 : asked.len),
                             asked.base);
        return;
    }
    h2o_mem_pool_t *pool = &req->pool;
    h2o_headers_t *hs = &req->res.headers;
    h2o_iovec_t methods = s->any_method ? method : s->allow_methods;
    h2o_add_header_by_str(pool, hs, H2O_STRLIT("access-control-allow-methods"), 0,
                          "Access-Control-Allow-Methods", methods.base, methods.len);
    h2o_iovec_t headers = s->any_header ? asked : s->allow_headers;
    if (headers.len)
        h2o_add_header_by_str(pool, hs, H2O_STRLIT("access-control-allow-headers"), 0,
                              "Access-Control-Allow-Headers", headers.base, headers.len);
    if (s->max_age.len)
        h2o_add_header_by_str(pool, hs, H2O_STRLIT("access-control-max-age"), 0,
                              "Access-Control-Max-Age", s->max_age.base, s->max_age.len);
    if (s->any_method || s->any_header)
        add_vary(req, H2O_STRLIT("Access-Control-Request-Method, Access-Control-Request-Headers"));
    req->res.status = 204;
    req->res.reason = "No Content";
    req->res.content_length = 0;
    h2o_send_inline(req, "", 0);
}

int funcd_shape_request(h2o_req_t *req, funcd_shape *s, int preflight)
{
    shape_req *sr = h2o_mem_alloc_shared(&req->pool, sizeof(*sr), dispose_shape_req);
    memset(sr, 0, sizeof(*sr));
    sr->s = s; /* the caller's reference passes to the request */
    sr->super.on_setup_ostream = on_setup_ostream;
    sr->super.next = req->prefilters;
    req->prefilters = &sr->super;
    /* Accept-Encoding (h2o's token) and Origin (not one: h2o lowercased
     * its name) in one pass over the request's headers. */
    for (size_t i = 0; (s->compress || s->cors) && i < req->headers.size; i++) {
        const h2o_header_t *h = &req->headers.entries[i];
        if (h->name == &H2O_TOKEN_ACCEPT_ENCODING->buf) {
            if (s->compress)
                sr->gzip_ok |= funcd_shape_accepts_gzip(h->value.base, h->value.len);
        } else if (s->cors && !sr->origin.base && h->name->len == 6 &&
                   memcmp(h->name->base, "origin", 6) == 0) {
            sr->origin = h->value;
        }
    }
    if (!s->cors || !preflight)
        return 0;
    answer_preflight(req, sr, req_header(req, H2O_STRLIT("access-control-request-method")));
    return 1;
}

int funcd_shape_is_preflight(const funcd_shape *s, h2o_req_t *req)
{
    /* An OPTIONS without both headers is not a preflight: the function's. */
    return s->cors && h2o_memis(req->method.base, req->method.len, H2O_STRLIT("OPTIONS")) &&
           req_header(req, H2O_STRLIT("origin")).base &&
           req_header(req, H2O_STRLIT("access-control-request-method")).base;
}
