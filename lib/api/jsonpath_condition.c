/*
 * The condition language of a Workflow step's `when` (grammar in
 * jsonpath.h): one recursive-descent pass that checks the syntax and, when
 * given a document, evaluates as it goes. Both sides of && and || are
 * always parsed (a syntax error hides behind no short circuit).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "api/jsonpath.h"

typedef struct parser {
    const char *s;
    size_t len, i;
    int depth;
    const cJSON *doc; /* NULL: syntax only */
    funcd_condition_path_fn on_path;
    void *arg;
    char *why;
    size_t why_len;
} parser;

/* An operand: a borrowed value from the document, or an owned literal. */
typedef struct operand {
    const cJSON *v;
    cJSON *own;
} operand;

static int fail(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(parser *p, const char *fmt, ...)
{
    if (p->why && p->why_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->why, p->why_len, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static void skip_space(parser *p)
{
    while (p->i < p->len && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
                             p->s[p->i] == '\r'))
        p->i++;
}

static int accept(parser *p, const char *tok)
{
    size_t n = strlen(tok);
    skip_space(p);
    if (p->len - p->i >= n && memcmp(p->s + p->i, tok, n) == 0) {
        p->i += n;
        return 1;
    }
    return 0;
}

static int truthy(const cJSON *v)
{
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v))
        return 0;
    if (cJSON_IsNumber(v))
        return v->valuedouble != 0;
    if (cJSON_IsString(v))
        return v->valuestring[0] != '\0';
    return 1;
}

static int is_word_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_';
}

static int keyword(parser *p, const char *word)
{
    size_t n = strlen(word);
    if (p->len - p->i >= n && memcmp(p->s + p->i, word, n) == 0 &&
        (p->i + n == p->len || !is_word_char(p->s[p->i + n]))) {
        p->i += n;
        return 1;
    }
    return 0;
}

/* A JSON string literal; the text between the quotes goes through cJSON so
 * that escapes (\u included) read as JSON says. */
static int string_literal(parser *p, operand *o)
{
    size_t start = p->i++;
    while (p->i < p->len && p->s[p->i] != '"') {
        if ((unsigned char)p->s[p->i] < 0x20)
            return fail(p, "a control character in the string at offset %zu", start);
        if (p->s[p->i] == '\\')
            p->i++;
        p->i++;
    }
    if (p->i >= p->len)
        return fail(p, "the string at offset %zu has no closing quote", start);
    p->i++;
    cJSON *v = cJSON_ParseWithLength(p->s + start, p->i - start);
    if (!cJSON_IsString(v)) {
        cJSON_Delete(v);
        return fail(p, "the string at offset %zu is not a valid JSON string", start);
    }
    o->own = v;
    o->v = v;
    return 0;
}

static int number_literal(parser *p, operand *o)
{
    size_t start = p->i, at = p->i;
    const char *s = p->s;
    if (at < p->len && s[at] == '-')
        at++;
    if (at >= p->len || s[at] < '0' || s[at] > '9')
        return fail(p, "expected a number at offset %zu", start);
    if (s[at] == '0' && at + 1 < p->len && s[at + 1] >= '0' && s[at + 1] <= '9')
        return fail(p, "the number at offset %zu has a leading zero", start);
    while (at < p->len && s[at] >= '0' && s[at] <= '9')
        at++;
    if (at < p->len && s[at] == '.') {
        size_t digits = ++at;
        while (at < p->len && s[at] >= '0' && s[at] <= '9')
            at++;
        if (at == digits)
            return fail(p, "the number at offset %zu has no digits after '.'", start);
    }
    if (at < p->len && (s[at] == 'e' || s[at] == 'E')) {
        at++;
        if (at < p->len && (s[at] == '+' || s[at] == '-'))
            at++;
        size_t digits = at;
        while (at < p->len && s[at] >= '0' && s[at] <= '9')
            at++;
        if (at == digits)
            return fail(p, "the number at offset %zu has no exponent digits", start);
    }
    char text[64];
    if (at - start >= sizeof(text))
        return fail(p, "the number at offset %zu is too long", start);
    memcpy(text, s + start, at - start);
    text[at - start] = '\0';
    double d = funcd__api_strtod(text);
    if (!__builtin_isfinite(d))
        return fail(p, "the number at offset %zu is out of range", start);
    o->own = cJSON_CreateNumber(d);
    if (!o->own)
        return fail(p, "out of memory");
    o->v = o->own;
    p->i = at;
    return 0;
}

static int operand_parse(parser *p, operand *o)
{
    skip_space(p);
    o->v = NULL;
    o->own = NULL;
    if (p->i >= p->len)
        return fail(p, "expected a JSONPath or a JSON literal at the end");
    char ch = p->s[p->i];
    if (ch == '$') {
        funcd_jsonpath path;
        size_t used = 0;
        char why[256];
        if (funcd_jsonpath_parse_prefix(p->s + p->i, p->len - p->i, 0, &path, &used, why,
                                        sizeof(why)) < 0)
            return fail(p, "the JSONPath at offset %zu: %s", p->i, why);
        if (p->on_path && p->on_path(&path, p->arg, p->why, p->why_len) != 0)
            return -1;
        p->i += used;
        if (p->doc)
            o->v = funcd_jsonpath_get(&path, p->doc);
        return 0;
    }
    if (ch == '"')
        return string_literal(p, o);
    if (ch == '-' || (ch >= '0' && ch <= '9'))
        return number_literal(p, o);
    cJSON *lit = NULL;
    if (keyword(p, "true"))
        lit = cJSON_CreateTrue();
    else if (keyword(p, "false"))
        lit = cJSON_CreateFalse();
    else if (keyword(p, "null"))
        lit = cJSON_CreateNull();
    else
        return fail(p, "unexpected '%c' at offset %zu: expected a JSONPath ($...), a number, a "
                       "\"string\", true, false or null", ch, p->i);
    if (!lit)
        return fail(p, "out of memory");
    o->own = lit;
    o->v = lit;
    return 0;
}

static int compare(const char *op, const cJSON *a, const cJSON *b)
{
    static const cJSON null_value = {.type = cJSON_NULL};
    a = a ? a : &null_value;
    b = b ? b : &null_value;
    if (strcmp(op, "==") == 0)
        return cJSON_Compare(a, b, 1);
    if (strcmp(op, "!=") == 0)
        return !cJSON_Compare(a, b, 1);
    int c;
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b))
        c = a->valuedouble < b->valuedouble ? -1 : a->valuedouble > b->valuedouble ? 1 : 0;
    else if (cJSON_IsString(a) && cJSON_IsString(b))
        c = strcmp(a->valuestring, b->valuestring);
    else
        return 0;
    if (strcmp(op, "<") == 0)
        return c < 0;
    if (strcmp(op, "<=") == 0)
        return c <= 0;
    if (strcmp(op, ">") == 0)
        return c > 0;
    return c >= 0;
}

static int expr(parser *p, int *out);

static int primary(parser *p, int *out)
{
    if (accept(p, "(")) {
        if (expr(p, out) < 0)
            return -1;
        if (!accept(p, ")"))
            return fail(p, "expected ')' at offset %zu", p->i);
        return 0;
    }
    operand a, b;
    if (operand_parse(p, &a) < 0)
        return -1;
    static const char *const ops[] = {"==", "!=", "<=", ">=", "<", ">", NULL};
    const char *op = NULL;
    for (size_t k = 0; ops[k] && !op; k++)
        if (accept(p, ops[k]))
            op = ops[k];
    if (!op) {
        *out = truthy(a.v);
        cJSON_Delete(a.own);
        return 0;
    }
    if (operand_parse(p, &b) < 0) {
        cJSON_Delete(a.own);
        return -1;
    }
    *out = compare(op, a.v, b.v);
    cJSON_Delete(a.own);
    cJSON_Delete(b.own);
    return 0;
}

static int unary(parser *p, int *out)
{
    if (++p->depth > FUNCD_CONDITION_MAX_DEPTH)
        return fail(p, "nested deeper than %d", FUNCD_CONDITION_MAX_DEPTH);
    int rc;
    skip_space(p);
    /* "!" but not "!=" (which cannot start an operand anyway) */
    if (p->i < p->len && p->s[p->i] == '!' && !(p->i + 1 < p->len && p->s[p->i + 1] == '=')) {
        p->i++;
        rc = unary(p, out);
        *out = !*out;
    } else {
        rc = primary(p, out);
    }
    p->depth--;
    return rc;
}

static int and_expr(parser *p, int *out)
{
    if (unary(p, out) < 0)
        return -1;
    while (accept(p, "&&")) {
        int rhs;
        if (unary(p, &rhs) < 0)
            return -1;
        *out = *out && rhs;
    }
    return 0;
}

static int expr(parser *p, int *out)
{
    if (++p->depth > FUNCD_CONDITION_MAX_DEPTH)
        return fail(p, "nested deeper than %d", FUNCD_CONDITION_MAX_DEPTH);
    if (and_expr(p, out) < 0)
        return -1;
    while (accept(p, "||")) {
        int rhs;
        if (and_expr(p, &rhs) < 0)
            return -1;
        *out = *out || rhs;
    }
    p->depth--;
    return 0;
}

int funcd_condition_eval(const char *text, const cJSON *doc, int *result,
                         funcd_condition_path_fn on_path, void *arg, char *why, size_t why_len)
{
    parser p = {text, strlen(text), 0, 0, doc, on_path, arg, why, why_len};
    int value = 0;
    if (p.len > FUNCD_CONDITION_MAX_TEXT)
        return fail(&p, "longer than %d bytes", FUNCD_CONDITION_MAX_TEXT);
    if (expr(&p, &value) < 0)
        return -1;
    skip_space(&p);
    if (p.i < p.len)
        return fail(&p, "unexpected '%c' at offset %zu (expected &&, || or the end)", p.s[p.i],
                    p.i);
    if (result)
        *result = value;
    return 0;
}
