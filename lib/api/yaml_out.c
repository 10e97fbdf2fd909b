/*
 * cJSON to block-style YAML that funcd_api_decode reads back unchanged.
 *
 * Strings stay plain only when they are unmistakably strings to any YAML
 * reader (1.1 or 1.2); everything else is double-quoted with escapes, on
 * one line.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "api/internal.h"
#include "funcd/common.h"

/* libyaml refuses implicit keys longer than 1024 characters. */
#define MAX_IMPLICIT_KEY 512

typedef struct writer {
    funcd_buf *out;
    int rc;
} writer;

static void put(writer *w, const char *s, size_t len)
{
    if (w->rc == 0 && funcd_buf_append(w->out, s, len) < 0)
        w->rc = FUNCD_ENOMEM;
}

static void puts_(writer *w, const char *s)
{
    put(w, s, strlen(s));
}

static void indent(writer *w, int n)
{
    static const char spaces[] = "                                                                ";
    while (n > 0) {
        int k = n < (int)sizeof(spaces) - 1 ? n : (int)sizeof(spaces) - 1;
        put(w, spaces, (size_t)k);
        n -= k;
    }
}

/* ---- strings ---------------------------------------------------------------- */

static int is_alnum(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
}

/* What YAML 1.1 readers take for booleans or null. */
static int is_yaml11_word(const char *s)
{
    static const char *const words[] = {"y", "n", "yes", "no", "on", "off", "true", "false",
                                        "null", NULL};
    for (size_t i = 0; words[i]; i++)
        if (strcasecmp(s, words[i]) == 0)
            return 1;
    return 0;
}

/* Numbers, sexagesimals and timestamps in any YAML version ("1_000", "1:30",
 * "2024-01-01T00:00:00Z"), with some harmless false positives ("1d"). */
static int looks_numeric(const char *s)
{
    int digit_first = (s[0] >= '0' && s[0] <= '9') ||
                      ((s[0] == '+' || s[0] == '-' || s[0] == '.') && s[1] >= '0' && s[1] <= '9');
    return digit_first && strspn(s, "0123456789abcdefABCDEFoOxX_.:+-tTzZ ") == strlen(s);
}

static int is_plain_inner(const char *s, size_t i)
{
    unsigned char ch = (unsigned char)s[i];
    if (is_alnum(ch) || strchr("._/-+=@%()", ch) || ch == ' ')
        return ch != '\0';
    /* "a:b" is one scalar; "a: b", "a :b" and "a:" are not. */
    return ch == ':' && i > 0 && s[i - 1] != ' ' && s[i + 1] != ' ' && s[i + 1] != '\0';
}

static int can_be_plain(const char *s)
{
    size_t len = strlen(s);
    int boolean;
    double number;
    if (len == 0 || funcd__api_resolve_plain(s, len, &boolean, &number) != FUNCD__API_PLAIN_STRING ||
        is_yaml11_word(s) || looks_numeric(s))
        return 0;
    unsigned char c0 = (unsigned char)s[0];
    if (!(is_alnum(c0) || c0 == '/' || c0 == '_' || (c0 == '.' && is_alnum((unsigned char)s[1]))))
        return 0;
    if (s[len - 1] == ' ')
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!is_plain_inner(s, i))
            return 0;
    return 1;
}

/* Code points a reader would take for line breaks or refuse unescaped. */
static int must_escape(uint32_t cp)
{
    return (cp >= 0x80 && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029 || cp == 0xfeff ||
           cp == 0xfffe || cp == 0xffff;
}

static void put_quoted(writer *w, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t len = strlen(s);
    char esc[16];
    puts_(w, "\"");
    for (size_t i = 0; i < len;) {
        unsigned char ch = p[i];
        uint32_t cp;
        size_t n = 1;
        if (ch == '"' || ch == '\\') {
            snprintf(esc, sizeof(esc), "\\%c", ch);
            puts_(w, esc);
        } else if (ch == '\n' || ch == '\t' || ch == '\r') {
            puts_(w, ch == '\n' ? "\\n" : ch == '\t' ? "\\t" : "\\r");
        } else if (ch < 0x20 || ch == 0x7f) {
            snprintf(esc, sizeof(esc), "\\x%02x", ch);
            puts_(w, esc);
        } else if (ch < 0x80) {
            put(w, (const char *)p + i, 1);
        } else if (!(n = funcd__api_utf8_seq(p + i, len - i, &cp))) {
            puts_(w, "\\ufffd"); /* not UTF-8: YAML cannot carry raw bytes */
            n = 1;
        } else if (must_escape(cp)) {
            snprintf(esc, sizeof(esc), "\\u%04x", (unsigned)cp);
            puts_(w, esc);
        } else {
            put(w, (const char *)p + i, n);
        }
        i += n;
    }
    puts_(w, "\"");
}

static void put_string(writer *w, const char *s)
{
    if (can_be_plain(s))
        puts_(w, s);
    else
        put_quoted(w, s);
}

/* ---- numbers and other scalars -------------------------------------------------- */

static void put_number(writer *w, double d)
{
    char text[64];
    if (isnan(d)) {
        puts_(w, ".nan");
        return;
    }
    if (isinf(d)) {
        puts_(w, d < 0 ? "-.inf" : ".inf");
        return;
    }
    if (funcd__api_is_integral(d) && d > -1e15 && d < 1e15) {
        snprintf(text, sizeof(text), "%.0f", d);
    } else {
        /* The shortest of these that reads back exactly. */
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(text, sizeof(text), "%.*g", prec, d);
            for (char *p = text; *p; p++)
                if (*p == ',')
                    *p = '.'; /* a process locale's decimal comma */
            if (funcd__api_strtod(text) == d)
                break;
        }
    }
    puts_(w, text);
}

static int is_inline(const cJSON *node)
{
    return !(cJSON_IsObject(node) || cJSON_IsArray(node)) || !node->child;
}

static void put_inline(writer *w, const cJSON *node)
{
    if (cJSON_IsObject(node))
        puts_(w, "{}");
    else if (cJSON_IsArray(node))
        puts_(w, "[]");
    else if (cJSON_IsString(node) || cJSON_IsRaw(node))
        put_string(w, node->valuestring ? node->valuestring : "");
    else if (cJSON_IsNumber(node))
        put_number(w, node->valuedouble);
    else if (cJSON_IsTrue(node))
        puts_(w, "true");
    else if (cJSON_IsFalse(node))
        puts_(w, "false");
    else
        puts_(w, "null");
}

/* ---- block structure ------------------------------------------------------------- */

static void put_node(writer *w, const cJSON *node, int depth, int first_inline);

static void put_value_after_key(writer *w, const cJSON *value, int depth)
{
    if (is_inline(value)) {
        puts_(w, " ");
        put_inline(w, value);
        puts_(w, "\n");
    } else {
        puts_(w, "\n");
        put_node(w, value, depth + 1, 0);
    }
}

static void put_member(writer *w, const cJSON *m, int depth)
{
    const char *key = m->string ? m->string : "";
    size_t start = w->out->len;
    put_string(w, key);
    if (w->rc == 0 && w->out->len - start > MAX_IMPLICIT_KEY) {
        /* Rewrite as an explicit key: "? key" then ": value". */
        w->out->len = start;
        puts_(w, "? ");
        put_string(w, key);
        puts_(w, "\n");
        indent(w, depth * 2);
    }
    puts_(w, ":");
    put_value_after_key(w, m, depth);
}

static void put_node(writer *w, const cJSON *node, int depth, int first_inline)
{
    int first = 1;
    for (const cJSON *m = node->child; m && w->rc == 0; m = m->next, first = 0) {
        if (!(first && first_inline))
            indent(w, depth * 2);
        if (cJSON_IsObject(node)) {
            put_member(w, m, depth);
            continue;
        }
        puts_(w, "- ");
        if (is_inline(m)) {
            put_inline(w, m);
            puts_(w, "\n");
        } else {
            put_node(w, m, depth + 1, 1);
        }
    }
}

int funcd_api_to_yaml(const cJSON *obj, funcd_buf *out)
{
    writer w = {out, 0};
    if (!obj)
        return FUNCD_EINVAL;
    if (is_inline(obj)) {
        put_inline(&w, obj);
        puts_(&w, "\n");
    } else {
        put_node(&w, obj, 0, 0);
    }
    return w.rc;
}
