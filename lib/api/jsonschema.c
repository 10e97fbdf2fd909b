/* The JSON Schema subset of typed edges (jsonschema.h). */
#include "api/jsonschema.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "api/internal.h"

enum {
    T_OBJECT = 1 << 0,
    T_ARRAY = 1 << 1,
    T_STRING = 1 << 2,
    T_NUMBER = 1 << 3, /* any number; integers included */
    T_INTEGER = 1 << 4,
    T_BOOLEAN = 1 << 5,
    T_NULL = 1 << 6,
    T_ANY = 0x7f,
};

static const struct {
    const char *name;
    unsigned bit;
} type_names[] = {{"object", T_OBJECT},   {"array", T_ARRAY},     {"string", T_STRING},
                  {"number", T_NUMBER},   {"integer", T_INTEGER}, {"boolean", T_BOOLEAN},
                  {"null", T_NULL}};

typedef struct where {
    char *buf;
    size_t cap, len;
    char *why;
    size_t why_len;
} where;

static int fail(where *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(where *w, const char *fmt, ...)
{
    if (w->why && w->why_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->why, w->why_len, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static size_t push(where *w, const char *fmt, const char *s)
{
    size_t old = w->len;
    if (w->buf && w->len < w->cap) {
        int n = snprintf(w->buf + w->len, w->cap - w->len, fmt, w->len ? "." : "", s);
        if (n > 0)
            w->len = (size_t)n < w->cap - w->len ? w->len + (size_t)n : w->cap - 1;
    }
    return old;
}

static size_t push_index(where *w, size_t i)
{
    size_t old = w->len;
    if (w->buf && w->len < w->cap) {
        int n = snprintf(w->buf + w->len, w->cap - w->len, "[%zu]", i);
        if (n > 0)
            w->len = (size_t)n < w->cap - w->len ? w->len + (size_t)n : w->cap - 1;
    }
    return old;
}

static void pop(where *w, size_t old)
{
    w->len = old;
    if (w->buf && w->cap)
        w->buf[old < w->cap ? old : w->cap - 1] = '\0';
}

static void where_init(where *w, char *buf, size_t cap, char *why, size_t why_len)
{
    *w = (where){buf, cap, 0, why, why_len};
    if (buf && cap)
        buf[0] = '\0';
    if (why && why_len)
        why[0] = '\0';
}

static unsigned type_bit(const char *name)
{
    for (size_t i = 0; i < sizeof(type_names) / sizeof(type_names[0]); i++)
        if (strcmp(type_names[i].name, name) == 0)
            return type_names[i].bit;
    return 0;
}

/* The types a schema allows; T_ANY without "type". "number" takes the
 * integers too. */
static unsigned types_of(const cJSON *schema)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(schema, "type");
    unsigned bits = 0;
    if (cJSON_IsString(t))
        bits = type_bit(t->valuestring);
    else if (cJSON_IsArray(t))
        for (const cJSON *e = t->child; e; e = e->next)
            bits |= cJSON_IsString(e) ? type_bit(e->valuestring) : 0;
    else
        return T_ANY;
    if (bits & T_NUMBER)
        bits |= T_INTEGER;
    return bits;
}

static void types_text(unsigned bits, char *out, size_t len)
{
    size_t at = 0;
    out[0] = '\0';
    if ((bits & T_NUMBER) && (bits & T_INTEGER))
        bits &= ~(unsigned)T_INTEGER;
    for (size_t i = 0; i < sizeof(type_names) / sizeof(type_names[0]) && at < len; i++)
        if (bits & type_names[i].bit)
            at += (size_t)snprintf(out + at, len - at, "%s%s", at ? " or " : "",
                                   type_names[i].name);
    if (!out[0])
        snprintf(out, len, "nothing");
}

static unsigned value_type(const cJSON *v)
{
    if (cJSON_IsObject(v))
        return T_OBJECT;
    if (cJSON_IsArray(v))
        return T_ARRAY;
    if (cJSON_IsString(v))
        return T_STRING;
    if (cJSON_IsBool(v))
        return T_BOOLEAN;
    if (cJSON_IsNumber(v))
        return funcd__api_is_integral(v->valuedouble) ? T_NUMBER | T_INTEGER : T_NUMBER;
    return T_NULL;
}

/* ---- the shape of a schema ---------------------------------------------- */

static int check_node(where *w, const cJSON *s, int depth)
{
    if (depth > FUNCD_SCHEMA_MAX_DEPTH)
        return fail(w, "nested deeper than %d", FUNCD_SCHEMA_MAX_DEPTH);
    if (!cJSON_IsObject(s))
        return fail(w, "a schema must be an object");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (t) {
        int ok = cJSON_IsString(t) ? type_bit(t->valuestring) != 0 : cJSON_IsArray(t) && t->child;
        for (const cJSON *e = cJSON_IsArray(t) ? t->child : NULL; ok && e; e = e->next)
            ok = cJSON_IsString(e) && type_bit(e->valuestring);
        if (!ok) {
            push(w, "%s%s", "type");
            return fail(w, "must be one of object, array, string, number, integer, boolean, "
                           "null, or a non-empty list of them");
        }
    }
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    if (props) {
        if (!cJSON_IsObject(props)) {
            push(w, "%s%s", "properties");
            return fail(w, "must be an object of schemas");
        }
        for (const cJSON *p = props->child; p; p = p->next) {
            size_t old = push(w, "%s%s", "properties");
            push(w, "%s%s", p->string);
            if (check_node(w, p, depth + 1) < 0)
                return -1;
            pop(w, old);
        }
    }
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    if (req) {
        int ok = cJSON_IsArray(req);
        for (const cJSON *e = ok ? req->child : NULL; ok && e; e = e->next)
            ok = cJSON_IsString(e);
        if (!ok) {
            push(w, "%s%s", "required");
            return fail(w, "must be a list of property names");
        }
    }
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    if (items) {
        size_t old = push(w, "%s%s", "items");
        if (check_node(w, items, depth + 1) < 0)
            return -1;
        pop(w, old);
    }
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    if (en && (!cJSON_IsArray(en) || !en->child)) {
        push(w, "%s%s", "enum");
        return fail(w, "must be a non-empty list of values");
    }
    return 0;
}

int funcd_schema_check(const cJSON *schema, char *where_buf, size_t where_len, char *why,
                       size_t why_len)
{
    where w;
    where_init(&w, where_buf, where_len, why, why_len);
    return check_node(&w, schema, 0);
}

/* ---- a value against a schema ------------------------------------------- */

static int in_enum(const cJSON *en, const cJSON *v)
{
    for (const cJSON *e = en->child; e; e = e->next)
        if (cJSON_Compare(e, v, 1))
            return 1;
    return 0;
}

static int validate_node(where *w, const cJSON *s, const cJSON *v, int depth)
{
    if (depth > FUNCD_SCHEMA_MAX_DEPTH || !cJSON_IsObject(s))
        return 0;
    unsigned allowed = types_of(s), have = value_type(v);
    if (!(allowed & have)) {
        char want[128], got[32];
        types_text(allowed, want, sizeof(want));
        types_text(have, got, sizeof(got));
        return fail(w, "must be %s, not %s", want, got);
    }
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    if (cJSON_IsArray(en) && !in_enum(en, v))
        return fail(w, "must be one of the values of enum");
    if (cJSON_IsObject(v)) {
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
        for (const cJSON *r = cJSON_IsArray(req) ? req->child : NULL; r; r = r->next) {
            if (cJSON_IsString(r) && !cJSON_GetObjectItemCaseSensitive(v, r->valuestring)) {
                push(w, "%s%s", r->valuestring);
                return fail(w, "required");
            }
        }
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
        for (const cJSON *p = cJSON_IsObject(props) ? props->child : NULL; p; p = p->next) {
            const cJSON *m = cJSON_GetObjectItemCaseSensitive(v, p->string);
            if (!m)
                continue;
            size_t old = push(w, "%s%s", p->string);
            if (validate_node(w, p, m, depth + 1) < 0)
                return -1;
            pop(w, old);
        }
    }
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    if (cJSON_IsArray(v) && items) {
        size_t i = 0;
        for (const cJSON *e = v->child; e; e = e->next, i++) {
            size_t old = push_index(w, i);
            if (validate_node(w, items, e, depth + 1) < 0)
                return -1;
            pop(w, old);
        }
    }
    return 0;
}

int funcd_schema_validate(const cJSON *schema, const cJSON *value, char *where_buf,
                          size_t where_len, char *why, size_t why_len)
{
    where w;
    where_init(&w, where_buf, where_len, why, why_len);
    return validate_node(&w, schema, value, 0);
}

/* ---- assignability --------------------------------------------------------- */

static int has_string(const cJSON *list, const char *s)
{
    for (const cJSON *e = cJSON_IsArray(list) ? list->child : NULL; e; e = e->next)
        if (cJSON_IsString(e) && strcmp(e->valuestring, s) == 0)
            return 1;
    return 0;
}

static int assignable_node(where *w, const cJSON *p, const cJSON *c, int depth)
{
    static const cJSON empty = {.type = cJSON_Object};
    if (depth > FUNCD_SCHEMA_MAX_DEPTH)
        return 0;
    p = cJSON_IsObject(p) ? p : &empty;
    c = cJSON_IsObject(c) ? c : &empty;
    const cJSON *pen = cJSON_GetObjectItemCaseSensitive(p, "enum");
    const cJSON *cen = cJSON_GetObjectItemCaseSensitive(c, "enum");
    unsigned pt = types_of(p), ct = types_of(c);
    unsigned declared = pt;
    if (cJSON_IsArray(pen)) { /* the producer's values are known: their own types */
        pt = 0;
        for (const cJSON *e = pen->child; e; e = e->next)
            if (value_type(e) & declared) /* else the producer never gives it */
                pt |= value_type(e) == (T_NUMBER | T_INTEGER) ? T_INTEGER : value_type(e);
    }
    /* T_NUMBER in pt: it may give any number; T_INTEGER: whole ones. */
    const unsigned numbers = T_NUMBER | T_INTEGER;
    int bad = ((pt & ~numbers) & ~ct) || ((pt & T_NUMBER) && !(ct & T_NUMBER)) ||
              ((pt & T_INTEGER) && !(ct & numbers));
    if (bad) {
        char gives[128], takes[128];
        types_text(pt, gives, sizeof(gives));
        types_text(ct, takes, sizeof(takes));
        return fail(w, "the producer gives %s, the consumer takes %s", gives, takes);
    }
    if (cJSON_IsArray(cen)) {
        if (!cJSON_IsArray(pen))
            return fail(w, "the consumer takes only the values of its enum, the producer's "
                           "schema does not limit its values to them");
        for (const cJSON *e = pen->child; e; e = e->next)
            if ((value_type(e) & declared) && !in_enum(cen, e)) {
                char *text = cJSON_PrintUnformatted(e);
                int rc = fail(w, "the producer may give %.64s, which the consumer's enum does "
                                 "not take", text ? text : "a value");
                cJSON_free(text);
                return rc;
            }
    }
    if ((ct & T_OBJECT) && (pt & T_OBJECT)) {
        const cJSON *preq = cJSON_GetObjectItemCaseSensitive(p, "required");
        const cJSON *creq = cJSON_GetObjectItemCaseSensitive(c, "required");
        for (const cJSON *r = cJSON_IsArray(creq) ? creq->child : NULL; r; r = r->next) {
            if (cJSON_IsString(r) && !has_string(preq, r->valuestring)) {
                push(w, "%s%s", r->valuestring);
                return fail(w, "required by the consumer, but the producer does not promise it "
                               "(not in its required)");
            }
        }
        const cJSON *pprops = cJSON_GetObjectItemCaseSensitive(p, "properties");
        const cJSON *cprops = cJSON_GetObjectItemCaseSensitive(c, "properties");
        for (const cJSON *cp = cJSON_IsObject(cprops) ? cprops->child : NULL; cp; cp = cp->next) {
            const cJSON *pp = cJSON_GetObjectItemCaseSensitive(pprops, cp->string);
            if (!pp && !has_string(preq, cp->string))
                continue; /* the producer says nothing of it */
            size_t old = push(w, "%s%s", cp->string);
            if (assignable_node(w, pp, cp, depth + 1) < 0)
                return -1;
            pop(w, old);
        }
    }
    if ((ct & T_ARRAY) && (pt & T_ARRAY)) {
        const cJSON *citems = cJSON_GetObjectItemCaseSensitive(c, "items");
        if (citems) {
            size_t old = push(w, "%s%s", "items");
            if (assignable_node(w, cJSON_GetObjectItemCaseSensitive(p, "items"), citems,
                                depth + 1) < 0)
                return -1;
            pop(w, old);
        }
    }
    return 0;
}

int funcd_schema_assignable(const cJSON *producer, const cJSON *consumer, char *where_buf,
                            size_t where_len, char *why, size_t why_len)
{
    where w;
    where_init(&w, where_buf, where_len, why, why_len);
    return assignable_node(&w, producer, consumer, 0);
}

const cJSON *funcd_schema_narrow(const cJSON *schema, const funcd_jsonpath *path, size_t from)
{
    const cJSON *s = schema;
    for (size_t i = from; s && i < path->n; i++) {
        if (path->seg[i].kind == FUNCD_JP_MEMBER)
            s = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(s, "properties"),
                                                 path->seg[i].name);
        else
            s = cJSON_GetObjectItemCaseSensitive(s, "items");
    }
    return cJSON_IsObject(s) ? s : NULL;
}
