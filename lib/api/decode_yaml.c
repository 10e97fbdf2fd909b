/*
 * YAML into cJSON through libyaml's event parser.
 *
 * Only the JSON-shaped part of YAML is accepted: anchors and aliases are
 * refused (an alias multiplies a small document into a huge tree), so are
 * custom tags, non-scalar keys and duplicate keys. Plain scalars resolve by
 * the YAML 1.2 core schema; quoted scalars are always strings.
 */
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "api/internal.h"
#include "funcd/common.h"

/* ---- plain scalars --------------------------------------------------------------- */

static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;
static locale_t c_locale;

static void make_c_locale(void)
{
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
}

double funcd__api_strtod(const char *s)
{
    pthread_once(&c_locale_once, make_c_locale);
    return c_locale ? strtod_l(s, NULL, c_locale) : strtod(s, NULL);
}

static int is_one_of(const char *s, const char *const *words)
{
    for (; *words; words++)
        if (strcmp(s, *words) == 0)
            return 1;
    return 0;
}

static size_t count_digits(const char *s, int base)
{
    size_t n = 0;
    for (;; n++) {
        char ch = s[n];
        int ok = base == 16 ? (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') ||
                                  (ch >= 'A' && ch <= 'F')
                            : ch >= '0' && ch < '0' + base;
        if (!ok)
            return n;
    }
}

static double digits_value(const char *s, size_t n, int base)
{
    double v = 0;
    for (size_t i = 0; i < n; i++) {
        int d = s[i] <= '9' ? s[i] - '0' : (s[i] | 0x20) - 'a' + 10;
        v = v * base + d;
    }
    return v;
}

/* [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? */
static int is_decimal_number(const char *s)
{
    if (*s == '+' || *s == '-')
        s++;
    size_t whole = count_digits(s, 10), frac = 0;
    s += whole;
    if (*s == '.') {
        frac = count_digits(s + 1, 10);
        s += 1 + frac;
    }
    if (whole == 0 && frac == 0)
        return 0;
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-')
            s++;
        size_t exp = count_digits(s, 10);
        if (exp == 0)
            return 0;
        s += exp;
    }
    return *s == '\0';
}

funcd__api_plain_type funcd__api_resolve_plain(const char *s, size_t len, int *boolean,
                                               double *number)
{
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL", NULL};
    static const char *const trues[] = {"true", "True", "TRUE", NULL};
    static const char *const falses[] = {"false", "False", "FALSE", NULL};
    static const char *const infinities[] = {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF",
                                             "-.inf", "-.Inf", "-.INF", ".nan", ".NaN", ".NAN",
                                             NULL};
    if (strlen(s) != len)
        return FUNCD__API_PLAIN_STRING;
    if (is_one_of(s, nulls))
        return FUNCD__API_PLAIN_NULL;
    if (is_one_of(s, trues) || is_one_of(s, falses)) {
        *boolean = is_one_of(s, trues);
        return FUNCD__API_PLAIN_BOOL;
    }
    if (is_one_of(s, infinities))
        return FUNCD__API_PLAIN_NONFINITE;
    double v;
    if (s[0] == '0' && (s[1] == 'o' || s[1] == 'x')) {
        int base = s[1] == 'o' ? 8 : 16;
        size_t n = count_digits(s + 2, base);
        if (n == 0 || s[2 + n] != '\0')
            return FUNCD__API_PLAIN_STRING;
        v = digits_value(s + 2, n, base);
    } else if (is_decimal_number(s)) {
        v = funcd__api_strtod(s);
    } else {
        return FUNCD__API_PLAIN_STRING;
    }
    if (!isfinite(v))
        return FUNCD__API_PLAIN_NONFINITE;
    *number = v;
    return FUNCD__API_PLAIN_NUMBER;
}

/* ---- the event parser ---------------------------------------------------------- */

typedef struct key_seen {
    const char *key; /* owned by the cJSON child */
    yaml_mark_t mark;
    size_t order;
} key_seen;

typedef struct frame {
    cJSON *node;
    char *pending_key; /* mapping: the key whose value comes next */
    yaml_mark_t pending_mark;
    key_seen *keys; /* mapping: for duplicate detection when it ends */
    size_t nkeys, cap;
} frame;

typedef struct yaml_state {
    yaml_parser_t parser;
    frame stack[FUNCD_API_MAX_DEPTH];
    size_t depth;
    cJSON *root;
    size_t nodes;
    size_t doc_start, doc_line, max_doc_bytes;
    funcd_api_error *err;
} yaml_state;

static int fail_at(yaml_state *st, yaml_mark_t mark, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail_at(yaml_state *st, yaml_mark_t mark, const char *fmt, ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return funcd__api_doc_error(st->err, "yaml: line %zu column %zu: %s", mark.line + 1,
                                mark.column + 1, what);
}

static int parser_error(yaml_state *st)
{
    yaml_parser_t *p = &st->parser;
    const char *problem = p->problem ? p->problem : "invalid YAML";
    if (p->error == YAML_MEMORY_ERROR)
        return funcd__api_doc_error(st->err, "yaml: out of memory");
    if (p->error == YAML_READER_ERROR)
        return funcd__api_doc_error(st->err, "yaml: byte %zu: %s", p->problem_offset, problem);
    if (p->context)
        return fail_at(st, p->problem_mark, "%s %s", problem, p->context);
    return fail_at(st, p->problem_mark, "%s", problem);
}

static int is_tag(const yaml_char_t *tag, const char *expected)
{
    return tag && strcmp((const char *)tag, expected) == 0;
}

static cJSON *resolved_value(yaml_state *st, const yaml_event_t *ev, funcd__api_plain_type type,
                             int boolean, double number)
{
    switch (type) {
    case FUNCD__API_PLAIN_NULL: return cJSON_CreateNull();
    case FUNCD__API_PLAIN_BOOL: return cJSON_CreateBool(boolean);
    case FUNCD__API_PLAIN_NUMBER: return cJSON_CreateNumber(number);
    case FUNCD__API_PLAIN_NONFINITE:
        fail_at(st, ev->start_mark, "number out of range (quote it to make it a string)");
        return NULL;
    case FUNCD__API_PLAIN_STRING: break;
    }
    return cJSON_CreateString((const char *)ev->data.scalar.value);
}

/* The value of a scalar event, or NULL with st->err set. */
static cJSON *scalar_value(yaml_state *st, const yaml_event_t *ev)
{
    const char *s = (const char *)ev->data.scalar.value;
    size_t len = ev->data.scalar.length;
    const yaml_char_t *tag = ev->data.scalar.tag;
    int boolean = 0;
    double number = 0;
    funcd__api_plain_type type = funcd__api_resolve_plain(s, len, &boolean, &number);
    if (!tag || is_tag(tag, "!")) {
        if (tag || ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
            type = FUNCD__API_PLAIN_STRING;
    } else if (is_tag(tag, YAML_STR_TAG)) {
        type = FUNCD__API_PLAIN_STRING;
    } else if (!((is_tag(tag, YAML_NULL_TAG) && type == FUNCD__API_PLAIN_NULL) ||
                 (is_tag(tag, YAML_BOOL_TAG) && type == FUNCD__API_PLAIN_BOOL) ||
                 ((is_tag(tag, YAML_INT_TAG) || is_tag(tag, YAML_FLOAT_TAG)) &&
                  (type == FUNCD__API_PLAIN_NUMBER || type == FUNCD__API_PLAIN_NONFINITE)))) {
        fail_at(st, ev->start_mark, "unsupported tag %.64s for this value", (const char *)tag);
        return NULL;
    }
    cJSON *v = resolved_value(st, ev, type, boolean, number);
    if (!v && type != FUNCD__API_PLAIN_NONFINITE)
        funcd__api_doc_error(st->err, "yaml: out of memory");
    return v;
}

static int cmp_seen(const void *a, const void *b)
{
    const key_seen *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->order > y->order) - (x->order < y->order);
}

/* Sorting at the end keeps a mapping of n keys at n log n. */
static int check_duplicates(yaml_state *st, frame *f)
{
    if (f->nkeys < 2)
        return 0;
    qsort(f->keys, f->nkeys, sizeof(*f->keys), cmp_seen);
    const key_seen *dup = NULL;
    for (size_t i = 1; i < f->nkeys; i++)
        if (strcmp(f->keys[i - 1].key, f->keys[i].key) == 0 &&
            (!dup || f->keys[i].order < dup->order))
            dup = &f->keys[i];
    return dup ? fail_at(st, dup->mark, "duplicate key \"%.64s\"", dup->key) : 0;
}

static int remember_key(yaml_state *st, frame *f, const char *key, yaml_mark_t mark)
{
    if (f->nkeys == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        key_seen *keys = realloc(f->keys, cap * sizeof(*keys));
        if (!keys)
            return funcd__api_doc_error(st->err, "yaml: out of memory");
        f->keys = keys;
        f->cap = cap;
    }
    f->keys[f->nkeys] = (key_seen){key, mark, f->nkeys};
    f->nkeys++;
    return 0;
}

/* Places a new value under its parent (or as the root); takes ownership. */
static int attach(yaml_state *st, cJSON *v)
{
    if (++st->nodes > FUNCD__API_MAX_NODES) {
        cJSON_Delete(v);
        return funcd__api_doc_error(st->err, "yaml: more than %d values", FUNCD__API_MAX_NODES);
    }
    if (st->depth == 0) {
        st->root = v;
        return 0;
    }
    frame *f = &st->stack[st->depth - 1];
    if (cJSON_IsArray(f->node)) {
        cJSON_AddItemToArray(f->node, v);
        return 0;
    }
    char *key = f->pending_key;
    f->pending_key = NULL;
    if (!cJSON_AddItemToObject(f->node, key, v)) {
        free(key);
        cJSON_Delete(v);
        return funcd__api_doc_error(st->err, "yaml: out of memory");
    }
    free(key);
    return remember_key(st, f, v->string, f->pending_mark);
}

static int expecting_key(const yaml_state *st)
{
    const frame *f = st->depth ? &st->stack[st->depth - 1] : NULL;
    return f && cJSON_IsObject(f->node) && !f->pending_key;
}

static int check_node_start(yaml_state *st, const yaml_event_t *ev, const yaml_char_t *anchor)
{
    if (anchor)
        return fail_at(st, ev->start_mark, "anchors (&%.64s) and aliases are not allowed",
                       (const char *)anchor);
    if (ev->start_mark.index - st->doc_start > st->max_doc_bytes)
        return fail_at(st, ev->start_mark, "document is larger than %zu bytes", st->max_doc_bytes);
    return 0;
}

static int on_scalar(yaml_state *st, const yaml_event_t *ev)
{
    int rc = check_node_start(st, ev, ev->data.scalar.anchor);
    if (rc < 0)
        return rc;
    const char *s = (const char *)ev->data.scalar.value;
    if (strlen(s) != ev->data.scalar.length)
        return fail_at(st, ev->start_mark, "strings must not contain NUL characters");
    if (expecting_key(st)) {
        frame *f = &st->stack[st->depth - 1];
        if (!(f->pending_key = strdup(s)))
            return funcd__api_doc_error(st->err, "yaml: out of memory");
        f->pending_mark = ev->start_mark;
        return 0;
    }
    cJSON *v = scalar_value(st, ev);
    return v ? attach(st, v) : FUNCD_EINVAL;
}

static int on_collection_start(yaml_state *st, const yaml_event_t *ev, int mapping)
{
    const yaml_char_t *anchor =
        mapping ? ev->data.mapping_start.anchor : ev->data.sequence_start.anchor;
    const yaml_char_t *tag = mapping ? ev->data.mapping_start.tag : ev->data.sequence_start.tag;
    int rc = check_node_start(st, ev, anchor);
    if (rc < 0)
        return rc;
    if (tag && !is_tag(tag, mapping ? YAML_MAP_TAG : YAML_SEQ_TAG) && !is_tag(tag, "!"))
        return fail_at(st, ev->start_mark, "unsupported tag %.64s", (const char *)tag);
    if (expecting_key(st))
        return fail_at(st, ev->start_mark, "mapping keys must be strings");
    if (st->depth == FUNCD_API_MAX_DEPTH)
        return fail_at(st, ev->start_mark, "nested deeper than %d levels", FUNCD_API_MAX_DEPTH);
    cJSON *v = mapping ? cJSON_CreateObject() : cJSON_CreateArray();
    if (!v)
        return funcd__api_doc_error(st->err, "yaml: out of memory");
    if ((rc = attach(st, v)) < 0)
        return rc;
    st->stack[st->depth++] = (frame){.node = v};
    return 0;
}

static void frame_free(frame *f)
{
    free(f->pending_key);
    free(f->keys);
    *f = (frame){0};
}

static int on_collection_end(yaml_state *st)
{
    frame *f = &st->stack[st->depth - 1];
    int rc = cJSON_IsObject(f->node) ? check_duplicates(st, f) : 0;
    frame_free(f);
    st->depth--;
    return rc;
}

static int on_event(yaml_state *st, const yaml_event_t *ev, funcd__api_doc_fn on_doc,
                    void *payload)
{
    switch (ev->type) {
    case YAML_DOCUMENT_START_EVENT:
        st->doc_start = ev->start_mark.index;
        st->doc_line = ev->start_mark.line + 1;
        return 0;
    case YAML_DOCUMENT_END_EVENT: {
        cJSON *doc = st->root;
        st->root = NULL;
        return on_doc(doc, st->doc_line, st->err, payload);
    }
    case YAML_ALIAS_EVENT: return fail_at(st, ev->start_mark, "aliases are not allowed");
    case YAML_SCALAR_EVENT: return on_scalar(st, ev);
    case YAML_SEQUENCE_START_EVENT: return on_collection_start(st, ev, 0);
    case YAML_MAPPING_START_EVENT: return on_collection_start(st, ev, 1);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT: return on_collection_end(st);
    default: return 0;
    }
}

int funcd__api_yaml_decode(const char *buf, size_t len, size_t max_doc_bytes,
                           funcd__api_doc_fn on_doc, void *payload, funcd_api_error *err)
{
    yaml_state *st = calloc(1, sizeof(*st));
    if (!st)
        return funcd__api_doc_error(err, "yaml: out of memory");
    st->err = err;
    st->max_doc_bytes = max_doc_bytes;
    if (!yaml_parser_initialize(&st->parser)) {
        free(st);
        return funcd__api_doc_error(err, "yaml: out of memory");
    }
    yaml_parser_set_input_string(&st->parser, (const unsigned char *)(buf ? buf : ""), len);
    int rc = 0, done = 0;
    while (rc == 0 && !done) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&st->parser, &ev)) {
            rc = parser_error(st);
            break;
        }
        done = ev.type == YAML_STREAM_END_EVENT;
        rc = on_event(st, &ev, on_doc, payload);
        yaml_event_delete(&ev);
    }
    while (st->depth)
        frame_free(&st->stack[--st->depth]);
    cJSON_Delete(st->root);
    yaml_parser_delete(&st->parser);
    free(st);
    return rc;
}
