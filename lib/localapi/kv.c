#include "localapi/kv.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "funcd/sys/error.h"
#include "localapi/reply.h"
#include "objects/objects.h"
#include "port/store.h"
#include "util/buf.h"
#include "util/misc.h"

#define MAX_KEY 512
#define MAX_TTL_MS (8760ull * 3600 * 1000) /* a year, as spec.defaultTTL */
#define DEFAULT_MAX_KEYS 1000
#define DEFAULT_MAX_VALUE (64 * 1024)
#define DEFAULT_LIST_LIMIT 100
#define MAX_LIST_LIMIT 1000
#define INCREMENT_TRIES 32

/* One request's store: its limits from the KVStore object. */
typedef struct kvstore {
    funcd_store *store;
    funcd_kv_sweeper *sw; /* told the expiry of each key written */
    const char *ns;
    char name[64];
    int64_t max_keys, max_value;
    uint64_t default_ttl_ms;
    funcd_buf prefix; /* FUNCD_KV_PREFIX ns/store/ */
} kvstore;

static int64_t int_at(const cJSON *o, const char *k, int64_t def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : def;
}

/* Loads KVStore `name`: 0, or answers 404 / 503 and returns -1. */
static int kv_open(kvstore *kv, funcd_store *store, const char *ns, const char *name,
                   struct evhttp_request *req)
{
    cJSON *obj = NULL;
    uint64_t rev;
    int rc = funcd_objects_get(store, funcd_kind_by_plural("kvstores"), ns, name, &obj, &rev);
    if (rc < 0) {
        if (rc == FUNCD_ENOTFOUND)
            funcd_localapi_status(req, 404, "NotFound", "KVStore %s/%s does not exist", ns, name);
        else
            funcd_localapi_status(req, 503, "ServiceUnavailable", "the store is unavailable: %s",
                                  funcd_error_last()->message);
        return -1;
    }
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(obj, "spec");
    kv->store = store;
    kv->ns = ns;
    snprintf(kv->name, sizeof(kv->name), "%s", name);
    kv->max_keys = int_at(spec, "maxKeys", DEFAULT_MAX_KEYS);
    kv->max_value = int_at(spec, "maxValueBytes", DEFAULT_MAX_VALUE);
    const char *ttl = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "defaultTTL"));
    kv->default_ttl_ms = 0;
    if (ttl)
        funcd_parse_duration_ms(ttl, &kv->default_ttl_ms);
    cJSON_Delete(obj);
    kv->prefix = (funcd_buf)FUNCD_BUF_INIT;
    return funcd_buf_printf(&kv->prefix, FUNCD_KV_PREFIX "%s/%s/", ns, name) == 0 ? 0 : -1;
}

/* ---- values ---------------------------------------------------------------- */

uint64_t funcd_kv_expiry(const void *value, size_t len)
{
    if (len < 8)
        return 0;
    const unsigned char *p = value;
    uint64_t t = 0;
    for (int i = 7; i >= 0; i--)
        t = t << 8 | p[i];
    return t;
}

static int expired(const void *value, size_t len)
{
    uint64_t t = funcd_kv_expiry(value, len);
    return t && (int64_t)t <= funcd_now_ms();
}

/* The stored form of `data` expiring at `expiry_ms` (0: never). */
static int envelope(funcd_buf *out, uint64_t expiry_ms, const void *data, size_t len)
{
    unsigned char head[8];
    for (int i = 0; i < 8; i++)
        head[i] = (unsigned char)(expiry_ms >> (8 * i));
    return funcd_buf_append(out, head, 8) == 0 && funcd_buf_append(out, data, len) == 0 ? 0 : -1;
}

/* The key's value now: 0 (owned by `out`), or FUNCD_ENOTFOUND when absent or
 * expired (an expired key is deleted on the way). */
static int kv_get(kvstore *kv, const char *key, funcd_store_value *out)
{
    int rc = funcd_port_store_get(kv->store, key, out);
    if (rc < 0)
        return rc;
    if (!expired(out->value, out->len))
        return 0;
    funcd_port_store_del(kv->store, key, out->revision, NULL);
    free(out->value);
    out->value = NULL;
    return FUNCD_ENOTFOUND;
}

/* ---- the query ---------------------------------------------------------------- */

static const char *query_param(struct evhttp_request *req, struct evkeyvalq *q, const char *name)
{
    (void)req;
    return evhttp_find_header(q, name);
}

static int parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

static void send_json(struct evhttp_request *req, int code, cJSON *body)
{
    char *text = cJSON_PrintUnformatted(body);
    cJSON_Delete(body);
    funcd_localapi_send(req, code, "application/json", text, text ? strlen(text) : 0);
    free(text);
}

static void send_revision(struct evhttp_request *req, uint64_t rev)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "revision", (double)rev);
    send_json(req, 200, o);
}

static void store_failed(struct evhttp_request *req, int rc, const char *key_shown)
{
    if (rc == FUNCD_ECONFLICT || rc == FUNCD_EEXISTS || rc == FUNCD_ENOTFOUND)
        funcd_localapi_status(req, 409, "Conflict", "key %s is not at the revision given "
                              "(ifRevision)", key_shown);
    else
        funcd_localapi_status(req, 503, "ServiceUnavailable", "the store is unavailable: %s",
                              funcd_error_last()->message);
}

/* Room for one more key under spec.maxKeys. Every row of the store counts,
 * expired or not: the sweeper removes expired rows only now and then, and a
 * stream of short-lived keys must not grow the store past its bound. When
 * expired rows take the room, the put removes up to EXPIRED_INLINE of them
 * first. 0: room; otherwise the answer (507, or the store's error) is sent. */
#define EXPIRED_INLINE 64

typedef struct counting {
    int64_t rows, stop_at;
    size_t n_expired;
    char *expired_key[EXPIRED_INLINE];
    uint64_t expired_rev[EXPIRED_INLINE];
} counting;

static int count_rows(const funcd_store_kv *e, void *payload)
{
    counting *c = payload;
    c->rows++;
    if (expired(e->value, e->len) && c->n_expired < EXPIRED_INLINE &&
        (c->expired_key[c->n_expired] = strdup(e->key)))
        c->expired_rev[c->n_expired++] = e->revision;
    return c->rows >= c->stop_at;
}

static int room_for_a_key(kvstore *kv, const char *shown, struct evhttp_request *req)
{
    counting c = {.stop_at = kv->max_keys + EXPIRED_INLINE};
    int rc = funcd_port_store_list(kv->store, kv->prefix.data, count_rows, &c, NULL);
    for (size_t i = 0; i < c.n_expired; i++) {
        if (rc == 0 && c.rows >= kv->max_keys &&
            funcd_port_store_del(kv->store, c.expired_key[i], c.expired_rev[i], NULL) == 0)
            c.rows--;
        free(c.expired_key[i]);
    }
    if (rc < 0) {
        store_failed(req, rc, shown);
        return -1;
    }
    if (c.rows < kv->max_keys)
        return 0;
    funcd_localapi_status(req, 507, "InsufficientStorage", "KVStore %s has %lld keys, its "
                          "spec.maxKeys", kv->name, (long long)kv->max_keys);
    return -1;
}

/* ---- operations ------------------------------------------------------------- */

static void op_get(kvstore *kv, const char *key, const char *shown, struct evhttp_request *req)
{
    funcd_store_value v = {0};
    int rc = kv_get(kv, key, &v);
    if (rc == FUNCD_ENOTFOUND)
        return funcd_localapi_status(req, 404, "NotFound", "no key %s in KVStore %s", shown,
                                     kv->name);
    if (rc < 0)
        return store_failed(req, rc, shown);
    char rev[32];
    snprintf(rev, sizeof(rev), "%" PRIu64, v.revision);
    evhttp_add_header(evhttp_request_get_output_headers(req), "X-Funcd-Revision", rev);
    uint64_t exp = funcd_kv_expiry(v.value, v.len);
    if (exp) {
        char ts[32];
        snprintf(ts, sizeof(ts), "%" PRIu64, exp);
        evhttp_add_header(evhttp_request_get_output_headers(req), "X-Funcd-Expires-Ms", ts);
    }
    funcd_localapi_send(req, 200, "application/octet-stream", (char *)v.value + 8, v.len - 8);
    free(v.value);
}

static void op_put(kvstore *kv, const char *key, const char *shown, struct evhttp_request *req,
                   struct evkeyvalq *q)
{
    const char *if_rev = query_param(req, q, "ifRevision"), *ttl = query_param(req, q, "ttl");
    uint64_t expected = FUNCD_STORE_ANY, ttl_ms = kv->default_ttl_ms;
    if (if_rev && parse_u64(if_rev, &expected) < 0)
        return funcd_localapi_status(req, 400, "BadRequest", "ifRevision: must be a revision "
                                     "(0: the key must not exist)");
    if (if_rev && expected == 0)
        expected = FUNCD_STORE_ABSENT;
    if (ttl && (funcd_parse_duration_ms(ttl, &ttl_ms) < 0 || ttl_ms > MAX_TTL_MS))
        return funcd_localapi_status(req, 400, "BadRequest", "ttl: must be a duration such as "
                                     "\"30s\" or \"1h\", at most 8760h (\"0\": never expires)");
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    if ((int64_t)len > kv->max_value)
        return funcd_localapi_status(req, 413, "RequestEntityTooLarge", "the value is %zu bytes; "
                                     "KVStore %s takes at most %lld (spec.maxValueBytes)", len,
                                     kv->name, (long long)kv->max_value);
    /* A new key counts against spec.maxKeys. */
    funcd_store_value old = {0};
    int rc = kv_get(kv, key, &old);
    free(old.value);
    if (rc == FUNCD_ENOTFOUND) {
        if (expected != FUNCD_STORE_ANY && expected != FUNCD_STORE_ABSENT)
            return store_failed(req, FUNCD_ENOTFOUND, shown);
        if (room_for_a_key(kv, shown, req) < 0)
            return;
    } else if (rc < 0) {
        return store_failed(req, rc, shown);
    }
    funcd_buf value = FUNCD_BUF_INIT;
    uint64_t rev = 0, exp = ttl_ms ? (uint64_t)funcd_now_ms() + ttl_ms : 0;
    if (envelope(&value, exp, len ? evbuffer_pullup(in, -1) : (unsigned char *)"", len) < 0) {
        funcd_buf_free(&value);
        return funcd_localapi_status(req, 503, "ServiceUnavailable", "out of memory");
    }
    rc = funcd_port_store_put(kv->store, key, value.data, value.len, expected, &rev);
    funcd_buf_free(&value);
    if (rc < 0)
        return store_failed(req, rc, shown);
    funcd_kv_sweeper_note(kv->sw, exp);
    send_revision(req, rev);
}

static void op_delete(kvstore *kv, const char *key, const char *shown,
                      struct evhttp_request *req, struct evkeyvalq *q)
{
    const char *if_rev = query_param(req, q, "ifRevision");
    uint64_t expected = FUNCD_STORE_ANY, rev = 0;
    if (if_rev && (parse_u64(if_rev, &expected) < 0 || expected == 0))
        return funcd_localapi_status(req, 400, "BadRequest", "ifRevision: must be a revision");
    funcd_store_value v = {0};
    int rc = kv_get(kv, key, &v);
    free(v.value);
    if (rc == FUNCD_ENOTFOUND)
        return funcd_localapi_status(req, 404, "NotFound", "no key %s in KVStore %s", shown,
                                     kv->name);
    rc = rc < 0 ? rc : funcd_port_store_del(kv->store, key, expected, &rev);
    if (rc == FUNCD_ENOTFOUND)
        return funcd_localapi_status(req, 404, "NotFound", "no key %s in KVStore %s", shown,
                                     kv->name);
    if (rc < 0)
        return store_failed(req, rc, shown);
    send_revision(req, rev);
}

static void op_increment(kvstore *kv, const char *key, const char *shown,
                         struct evhttp_request *req, const char *by_text)
{
    char *end;
    errno = 0;
    long long by = strtoll(by_text, &end, 10);
    if (errno || !*by_text || *end)
        return funcd_localapi_status(req, 400, "BadRequest", "increment: must be an integer");
    for (int i = 0; i < INCREMENT_TRIES; i++) {
        funcd_store_value v = {0};
        int rc = kv_get(kv, key, &v);
        long long now = 0;
        uint64_t expected = FUNCD_STORE_ABSENT, exp = 0;
        if (rc == 0) {
            char text[32];
            size_t n = v.len - 8;
            int ok = n > 0 && n < sizeof(text);
            if (ok) {
                memcpy(text, (char *)v.value + 8, n);
                text[n] = 0;
                errno = 0;
                now = strtoll(text, &end, 10);
                ok = !errno && !*end;
            }
            expected = v.revision;
            exp = funcd_kv_expiry(v.value, v.len);
            free(v.value);
            if (!ok)
                return funcd_localapi_status(req, 409, "Conflict", "key %s does not hold an "
                                             "integer", shown);
        } else if (rc != FUNCD_ENOTFOUND) {
            return store_failed(req, rc, shown);
        } else if (room_for_a_key(kv, shown, req) < 0) { /* a new key counts too */
            return;
        } else if (kv->default_ttl_ms) {
            exp = (uint64_t)funcd_now_ms() + kv->default_ttl_ms;
        }
        if ((by > 0 && now > INT64_MAX - by) || (by < 0 && now < INT64_MIN - by))
            return funcd_localapi_status(req, 409, "Conflict", "key %s would overflow", shown);
        char text[32];
        int n = snprintf(text, sizeof(text), "%lld", now + by);
        funcd_buf value = FUNCD_BUF_INIT;
        uint64_t rev = 0;
        if (envelope(&value, exp, text, (size_t)n) < 0) {
            funcd_buf_free(&value);
            return funcd_localapi_status(req, 503, "ServiceUnavailable", "out of memory");
        }
        rc = funcd_port_store_put(kv->store, key, value.data, value.len, expected, &rev);
        funcd_buf_free(&value);
        if (rc == FUNCD_ECONFLICT || rc == FUNCD_EEXISTS || rc == FUNCD_ENOTFOUND)
            continue; /* another writer came first: read again */
        if (rc < 0)
            return store_failed(req, rc, shown);
        funcd_kv_sweeper_note(kv->sw, exp);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "value", (double)(now + by));
        cJSON_AddNumberToObject(o, "revision", (double)rev);
        return send_json(req, 200, o);
    }
    funcd_localapi_status(req, 409, "Conflict", "key %s changed %d times during the increment",
                          shown, INCREMENT_TRIES);
}

typedef struct listing {
    kvstore *kv;
    size_t skip_len; /* the prefix */
    const char *after; /* the continue key, or NULL */
    size_t limit, n;
    cJSON *items;
    char *last;
    int more;
} listing;

static int list_one(const funcd_store_kv *e, void *payload)
{
    listing *l = payload;
    const char *key = e->key + l->skip_len;
    if ((l->after && strcmp(key, l->after) <= 0) || expired(e->value, e->len))
        return 0;
    if (l->n == l->limit) {
        l->more = 1;
        return 1;
    }
    cJSON *item = cJSON_CreateObject();
    cJSON_AddStringToObject(item, "key", key);
    cJSON_AddNumberToObject(item, "revision", (double)e->revision);
    cJSON_AddItemToArray(l->items, item);
    free(l->last);
    l->last = strdup(key);
    l->n++;
    return 0;
}

static void op_list(kvstore *kv, struct evhttp_request *req, struct evkeyvalq *q)
{
    const char *prefix = query_param(req, q, "prefix"), *limit = query_param(req, q, "limit");
    uint64_t n = DEFAULT_LIST_LIMIT;
    if (limit && (parse_u64(limit, &n) < 0 || n == 0 || n > MAX_LIST_LIMIT))
        return funcd_localapi_status(req, 400, "BadRequest", "limit: must be 1 to %d",
                                     MAX_LIST_LIMIT);
    funcd_buf full = FUNCD_BUF_INIT;
    funcd_buf_printf(&full, "%s%s", kv->prefix.data, prefix ? prefix : "");
    cJSON *out = cJSON_CreateObject();
    listing l = {kv, kv->prefix.len, query_param(req, q, "continue"), n, 0,
                 cJSON_AddArrayToObject(out, "items"), NULL, 0};
    int rc = funcd_port_store_list(kv->store, full.data, list_one, &l, NULL);
    funcd_buf_free(&full);
    if (rc < 0) {
        free(l.last);
        cJSON_Delete(out);
        return store_failed(req, rc, "");
    }
    if (l.more && l.last)
        cJSON_AddStringToObject(out, "continue", l.last);
    free(l.last);
    send_json(req, 200, out);
}

/* ---- routing ---------------------------------------------------------------- */

static int is_bound(char *const *bound, const char *name)
{
    for (char *const *p = bound; p && *p; p++)
        if (strcmp(*p, name) == 0)
            return 1;
    return 0;
}

void funcd_kv_request(funcd_store *store, funcd_kv_sweeper *sw, const char *ns,
                      char *const *bound, struct evhttp_request *req, const char *target)
{
    /* /kv/{store}[/{key}][?query] */
    const char *name = target + 4, *q = strchr(name, '?');
    size_t path_len = q ? (size_t)(q - name) : strlen(name);
    size_t name_len = strcspn(name, "/?");
    char store_name[64];
    if (name_len == 0 || name_len >= sizeof(store_name))
        return funcd_localapi_status(req, 404, "NotFound", "a KV call is /kv/{store}/{key}");
    snprintf(store_name, sizeof(store_name), "%.*s", (int)name_len, name);
    if (!is_bound(bound, store_name))
        return funcd_localapi_status(req, 403, "Forbidden", "this function may not use KVStore "
                                     "\"%s\": it is not in spec.bindings.kv", store_name);
    size_t raw_len = name_len < path_len ? path_len - name_len - 1 : 0;
    char *key = NULL;
    if (raw_len) {
        char raw[3 * MAX_KEY + 1];
        if (raw_len >= sizeof(raw))
            return funcd_localapi_status(req, 414, "RequestURITooLong", "a key is at most %d "
                                         "bytes", MAX_KEY);
        memcpy(raw, name + name_len + 1, raw_len);
        raw[raw_len] = 0;
        size_t klen = 0;
        key = evhttp_uridecode(raw, 0, &klen);
        if (!key || klen == 0 || klen > MAX_KEY || strlen(key) != klen) {
            free(key);
            return funcd_localapi_status(req, 400, "BadRequest", "a key is 1 to %d bytes, "
                                         "without NUL", MAX_KEY);
        }
    }
    kvstore kv;
    if (kv_open(&kv, store, ns, store_name, req) < 0) {
        free(key);
        return;
    }
    kv.sw = sw;
    struct evkeyvalq query; /* initialized by the parse, also of "" */
    if (evhttp_parse_query_str(q ? q + 1 : "", &query) < 0) {
        /* libevent then drops every parameter: an ifRevision must not be
         * lost that way, turning a compare-and-set into a plain write */
        evhttp_clear_headers(&query);
        funcd_buf_free(&kv.prefix);
        free(key);
        return funcd_localapi_status(req, 400, "BadRequest", "the query is not name=value pairs "
                                     "joined by &");
    }
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    if (!key) {
        if (cmd == EVHTTP_REQ_GET)
            op_list(&kv, req, &query);
        else
            funcd_localapi_status(req, 405, "MethodNotAllowed", "a KVStore is listed with GET");
    } else {
        funcd_buf full = FUNCD_BUF_INIT;
        funcd_buf_printf(&full, "%s%s", kv.prefix.data, key);
        char shown[80];
        snprintf(shown, sizeof(shown), "\"%.60s%s\"", key, strlen(key) > 60 ? "..." : "");
        const char *by = evhttp_find_header(&query, "increment");
        if (cmd == EVHTTP_REQ_GET)
            op_get(&kv, full.data, shown, req);
        else if (cmd == EVHTTP_REQ_PUT)
            op_put(&kv, full.data, shown, req, &query);
        else if (cmd == EVHTTP_REQ_DELETE)
            op_delete(&kv, full.data, shown, req, &query);
        else if (cmd == EVHTTP_REQ_POST && by)
            op_increment(&kv, full.data, shown, req, by);
        else
            funcd_localapi_status(req, 405, "MethodNotAllowed", "a key takes GET, PUT, DELETE "
                                  "or POST ?increment=N");
        funcd_buf_free(&full);
    }
    evhttp_clear_headers(&query);
    funcd_buf_free(&kv.prefix);
    free(key);
}
