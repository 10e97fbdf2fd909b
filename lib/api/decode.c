/*
 * Decoding: JSON via cJSON, YAML via decode_yaml.c, and the stream forms of
 * funcd_api_decode_all (JSON arrays, JSON sequences, YAML multi-document,
 * kind: List).
 *
 * cJSON accepts more than we want (duplicate keys, 1000 levels, raw NULs,
 * any bytes), so a pre-scan bounds depth and checks UTF-8 before cJSON
 * allocates anything, and a walk afterwards checks keys and numbers.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "funcd/common.h"

/* ---- shared helpers ------------------------------------------------------- */

size_t funcd__api_utf8_seq(const unsigned char *s, size_t avail, uint32_t *cp)
{
    uint32_t c = s[0], min;
    size_t n;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xe0) == 0xc0) {
        n = 2, c &= 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        n = 3, c &= 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
        n = 4, c &= 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n > avail)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return n;
}

static void line_col(const char *base, size_t pos, size_t *line, size_t *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < pos; i++) {
        if (base[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

static int json_error_at(funcd_api_error *err, const char *base, size_t pos, const char *what)
{
    size_t line, col;
    line_col(base, pos, &line, &col);
    return funcd__api_doc_error(err, "json: line %zu column %zu: %s", line, col, what);
}

static size_t skip_space(const char *buf, size_t len, size_t i)
{
    while (i < len && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\n' || buf[i] == '\r'))
        i++;
    return i;
}

/* Index of the first byte that is neither a UTF-8 BOM nor white space. */
static size_t first_byte(const char *buf, size_t len)
{
    size_t i = 0;
    if (len >= 3 && memcmp(buf, "\xef\xbb\xbf", 3) == 0)
        i = 3;
    return skip_space(buf, len, i);
}

/* ---- JSON ------------------------------------------------------------------- */

static int json_prescan(const char *buf, size_t len, funcd_api_error *err)
{
    size_t depth = 0;
    int in_string = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)buf[i];
        uint32_t cp;
        if (ch >= 0x80) {
            size_t n = funcd__api_utf8_seq((const unsigned char *)buf + i, len - i, &cp);
            if (!n)
                return json_error_at(err, buf, i, "invalid UTF-8");
            i += n - 1;
        } else if (ch == '\0') {
            return json_error_at(err, buf, i, "NUL character");
        } else if (in_string) {
            if (ch == '"')
                in_string = 0;
            else if (ch == '\\' && i + 1 < len) {
                if (len - i >= 6 && memcmp(buf + i + 1, "u0000", 5) == 0)
                    return json_error_at(err, buf, i, "strings must not contain NUL (\\u0000)");
                i++;
            }
        } else if (ch == '"') {
            in_string = 1;
        } else if (ch == '{' || ch == '[') {
            if (++depth > FUNCD_API_MAX_DEPTH)
                return json_error_at(err, buf, i, "nested deeper than 64 levels");
        } else if ((ch == '}' || ch == ']') && depth > 0) {
            depth--;
        }
    }
    return 0;
}

static int cmp_key(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first key that appears twice in `obj`, or NULL (or "" on OOM: then
 * the caller reports it as a duplicate, which fails safe). */
static const char *duplicate_key(const cJSON *obj)
{
    size_t n = 0, i = 0;
    for (const cJSON *m = obj->child; m; m = m->next)
        n++;
    if (n < 2)
        return NULL;
    const char **keys = malloc(n * sizeof(*keys));
    if (!keys)
        return "";
    for (const cJSON *m = obj->child; m; m = m->next)
        keys[i++] = m->string;
    qsort(keys, n, sizeof(*keys), cmp_key);
    const char *dup = NULL;
    for (i = 1; i < n && !dup; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0)
            dup = keys[i];
    free(keys);
    return dup;
}

typedef struct json_walk {
    funcd__api_ctx ctx;
    size_t nodes;
} json_walk;

static int walk_json(json_walk *w, const cJSON *node, size_t depth)
{
    if (++w->nodes > FUNCD__API_MAX_NODES)
        return funcd__api_fail(&w->ctx, "json: more than %d values", FUNCD__API_MAX_NODES);
    if (cJSON_IsNumber(node) && !isfinite(node->valuedouble))
        return funcd__api_fail(&w->ctx, "json: number out of range");
    if (!cJSON_IsObject(node) && !cJSON_IsArray(node))
        return 0;
    if (depth > FUNCD_API_MAX_DEPTH)
        return funcd__api_fail(&w->ctx, "json: nested deeper than %d levels",
                               FUNCD_API_MAX_DEPTH);
    if (cJSON_IsObject(node)) {
        const char *dup = duplicate_key(node);
        if (dup) {
            funcd__api_push_field(&w->ctx, dup);
            return funcd__api_fail(&w->ctx, "json: duplicate key");
        }
    }
    size_t i = 0;
    for (const cJSON *m = node->child; m; m = m->next, i++) {
        size_t old = cJSON_IsObject(node) ? funcd__api_push_field(&w->ctx, m->string)
                                          : funcd__api_push_index(&w->ctx, i);
        int rc = walk_json(w, m, depth + 1);
        if (rc < 0)
            return rc;
        funcd__api_pop(&w->ctx, old);
    }
    return 0;
}

/* Parses one JSON value starting at buf[*pos]; advances *pos past it. */
static int json_value(const char *buf, size_t len, size_t *pos, size_t max_bytes, cJSON **out,
                      funcd_api_error *err)
{
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(buf + *pos, len - *pos, &end, 0);
    if (!v) {
        size_t at = end && end >= buf + *pos && end <= buf + len ? (size_t)(end - buf) : *pos;
        return json_error_at(err, buf, at, "invalid JSON");
    }
    size_t start = *pos;
    *pos = (size_t)(end - buf);
    if (*pos - start > max_bytes) {
        cJSON_Delete(v);
        return json_error_at(err, buf, start, "object is larger than 1 MiB");
    }
    json_walk w = {.nodes = 0};
    funcd__api_ctx_init(&w.ctx, err);
    if (walk_json(&w, v, 1) < 0) {
        cJSON_Delete(v);
        return FUNCD_EINVAL;
    }
    *out = v;
    return 0;
}

/* ---- documents into results -------------------------------------------------- */

static int is_list_kind(const cJSON *doc)
{
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(doc, "kind");
    if (!cJSON_IsString(kind))
        return 0;
    if (strcmp(kind->valuestring, "List") == 0)
        return 1;
    for (size_t i = 0; funcd_kinds[i]; i++)
        if (strcmp(kind->valuestring, funcd_kinds[i]->list_kind) == 0)
            return 1;
    return 0;
}

static int where_error(funcd_api_error *err, size_t line, const char *what)
{
    if (line)
        return funcd__api_doc_error(err, "line %zu: %s", line, what);
    return funcd__api_doc_error(err, "%s", what);
}

/* Moves the items of a List into `out`. */
static int add_list_items(cJSON *out, cJSON *list, size_t line, funcd_api_error *err)
{
    cJSON *items = cJSON_GetObjectItemCaseSensitive(list, "items");
    if (!items || cJSON_IsNull(items))
        return 0;
    if (!cJSON_IsArray(items))
        return where_error(err, line, "items of a List must be an array of objects");
    for (cJSON *e = items->child; e; e = e->next)
        if (!cJSON_IsObject(e))
            return where_error(err, line, "items of a List must be an array of objects");
    while (items->child)
        cJSON_AddItemToArray(out, cJSON_DetachItemViaPointer(items, items->child));
    return 0;
}

/* Takes ownership of `doc`. */
static int add_document(cJSON *out, cJSON *doc, size_t line, funcd_api_error *err)
{
    int rc = 0;
    if (!doc || cJSON_IsNull(doc)) {
        cJSON_Delete(doc);
        return 0;
    }
    if (!cJSON_IsObject(doc))
        rc = where_error(err, line, "a document must be an object (a mapping), not a list or a "
                                    "scalar");
    else if (is_list_kind(doc))
        rc = add_list_items(out, doc, line, err);
    else {
        cJSON_AddItemToArray(out, doc);
        return 0;
    }
    cJSON_Delete(doc);
    return rc;
}

static int on_yaml_doc_all(cJSON *doc, size_t line, funcd_api_error *err, void *payload)
{
    return add_document(payload, doc, line, err);
}

typedef struct single {
    cJSON *doc;
} single;

static int on_yaml_doc_one(cJSON *doc, size_t line, funcd_api_error *err, void *payload)
{
    single *s = payload;
    if (!doc || cJSON_IsNull(doc)) {
        cJSON_Delete(doc);
        return 0;
    }
    if (s->doc || !cJSON_IsObject(doc)) {
        const char *what = s->doc ? "expected one document, found several"
                                  : "the document must be an object (a mapping)";
        cJSON_Delete(doc);
        return where_error(err, line, what);
    }
    s->doc = doc;
    return 0;
}

/* ---- public ------------------------------------------------------------------ */

int funcd_api_decode(const char *buf, size_t len, cJSON **out, funcd_api_error *err)
{
    return funcd_api_decode_max(buf, len, FUNCD_API_MAX_OBJECT_BYTES, out, err);
}

int funcd_api_decode_max(const char *buf, size_t len, size_t max_bytes, cJSON **out,
                         funcd_api_error *err)
{
    funcd__api_error_clear(err);
    *out = NULL;
    if (!buf && len)
        return funcd__api_doc_error(err, "no input");
    if (len > max_bytes)
        return funcd__api_doc_error(err, "document is too large: %zu bytes, at most %zu", len,
                                    max_bytes);
    size_t pos = first_byte(buf, len);
    if (pos < len && buf[pos] == '{') {
        cJSON *v;
        int rc = json_prescan(buf, len, err);
        if (rc == 0)
            rc = json_value(buf, len, &pos, max_bytes, &v, err);
        if (rc < 0)
            return rc;
        pos = skip_space(buf, len, pos);
        if (pos < len) {
            cJSON_Delete(v);
            return json_error_at(err, buf, pos, "unexpected data after the object");
        }
        *out = v;
        return 0;
    }
    single s = {NULL};
    int rc = funcd__api_yaml_decode(buf, len, max_bytes, on_yaml_doc_one, &s, err);
    if (rc == 0 && !s.doc)
        rc = funcd__api_doc_error(err, "empty document: expected an object");
    if (rc < 0) {
        cJSON_Delete(s.doc);
        return rc;
    }
    *out = s.doc;
    return 0;
}

static int decode_json_stream(const char *buf, size_t len, size_t pos, cJSON *out,
                              funcd_api_error *err)
{
    int rc = json_prescan(buf, len, err);
    while (rc == 0 && (pos = skip_space(buf, len, pos)) < len) {
        size_t start = pos, line, col;
        cJSON *v;
        int is_array = buf[pos] == '[';
        rc = json_value(buf, len, &pos, is_array ? FUNCD__API_STREAM_MAX : FUNCD_API_MAX_OBJECT_BYTES,
                        &v, err);
        if (rc < 0)
            break;
        line_col(buf, start, &line, &col);
        if (!is_array) {
            rc = add_document(out, v, line, err);
            continue;
        }
        while (rc == 0 && v->child)
            rc = add_document(out, cJSON_DetachItemViaPointer(v, v->child), line, err);
        cJSON_Delete(v);
    }
    return rc;
}

int funcd_api_decode_all(const char *buf, size_t len, cJSON **out, funcd_api_error *err)
{
    funcd__api_error_clear(err);
    *out = NULL;
    if (!buf && len)
        return funcd__api_doc_error(err, "no input");
    if (len > FUNCD__API_STREAM_MAX)
        return funcd__api_doc_error(err, "input is too large: %zu bytes, at most %d", len,
                                    FUNCD__API_STREAM_MAX);
    cJSON *all = cJSON_CreateArray();
    if (!all)
        return FUNCD_ENOMEM;
    size_t pos = first_byte(buf, len);
    int rc;
    if (pos < len && (buf[pos] == '{' || buf[pos] == '['))
        rc = decode_json_stream(buf, len, pos, all, err);
    else
        rc = funcd__api_yaml_decode(buf, len, FUNCD_API_MAX_OBJECT_BYTES, on_yaml_doc_all, all, err);
    if (rc < 0) {
        cJSON_Delete(all);
        return rc;
    }
    *out = all;
    return 0;
}
