/* The JSONPath subset of Workflows (jsonpath.h). */
#include "api/jsonpath.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int fail(char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *why, size_t why_len, const char *fmt, ...)
{
    if (why && why_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, why_len, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int is_name_start(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
}

static int is_name_char(char ch)
{
    return is_name_start(ch) || (ch >= '0' && ch <= '9') || ch == '-';
}

/* A JSON-style quoted name at text[*i] (the opening quote); without \u,
 * which a member name in a workflow has no need of. */
static int quoted_name(const char *text, size_t len, size_t *i, char *out, char *why,
                       size_t why_len)
{
    size_t at = *i + 1, n = 0;
    while (at < len && text[at] != '"') {
        char ch = text[at];
        if ((unsigned char)ch < 0x20)
            return fail(why, why_len, "a control character in the quoted name at offset %zu", at);
        if (ch == '\\') {
            if (++at >= len)
                break;
            static const char from[] = "\"\\/ntrbf", to[] = "\"\\/\n\t\r\b\f";
            const char *e = strchr(from, text[at]);
            if (!e || !text[at])
                return fail(why, why_len,
                            "unknown escape \\%c at offset %zu (known: \\\" \\\\ \\/ \\n \\t "
                            "\\r \\b \\f)",
                            text[at], at);
            ch = to[e - from];
        }
        if (n == FUNCD_JSONPATH_MAX_NAME)
            return fail(why, why_len, "a member name is longer than %d bytes",
                        FUNCD_JSONPATH_MAX_NAME);
        out[n++] = ch;
        at++;
    }
    if (at >= len)
        return fail(why, why_len, "the quoted name at offset %zu has no closing quote", *i);
    out[n] = '\0';
    *i = at + 1;
    return 0;
}

static int bracket(const char *text, size_t len, size_t *i, int allow_all, funcd_jsonpath_seg *s,
                   char *why, size_t why_len)
{
    size_t at = *i + 1; /* past '[' */
    if (at < len && text[at] == '"') {
        s->kind = FUNCD_JP_MEMBER;
        if (quoted_name(text, len, &at, s->name, why, why_len) < 0)
            return -1;
    } else if (at < len && text[at] == '*') {
        if (!allow_all)
            return fail(why, why_len, "[*] at offset %zu: only forEach takes every item of an "
                                      "array", *i);
        s->kind = FUNCD_JP_ALL;
        at++;
    } else if (at < len && text[at] >= '0' && text[at] <= '9') {
        uint64_t v = 0;
        size_t start = at;
        while (at < len && text[at] >= '0' && text[at] <= '9') {
            v = v * 10 + (uint64_t)(text[at] - '0');
            if (v > UINT32_MAX)
                return fail(why, why_len, "the index at offset %zu is too large", start);
            at++;
        }
        if (at - start > 1 && text[start] == '0')
            return fail(why, why_len, "the index at offset %zu has a leading zero", start);
        s->kind = FUNCD_JP_INDEX;
        s->index = (uint32_t)v;
    } else {
        return fail(why, why_len, "expected an index, [*] or a quoted name after '[' at offset %zu"
                                  " (filters and slices are not supported)", *i);
    }
    if (at >= len || text[at] != ']')
        return fail(why, why_len, "expected ']' at offset %zu", at);
    *i = at + 1;
    return 0;
}

int funcd_jsonpath_parse_prefix(const char *text, size_t len, int allow_all, funcd_jsonpath *out,
                                size_t *used, char *why, size_t why_len)
{
    out->n = 0;
    if (len == 0 || text[0] != '$')
        return fail(why, why_len, "a JSONPath starts with '$' (such as $.input or "
                                  "$.steps.fetch.output)");
    size_t i = 1;
    while (i < len && (text[i] == '.' || text[i] == '[')) {
        if (i > FUNCD_JSONPATH_MAX_TEXT)
            return fail(why, why_len, "longer than %d bytes", FUNCD_JSONPATH_MAX_TEXT);
        if (out->n == FUNCD_JSONPATH_MAX_SEGMENTS)
            return fail(why, why_len, "more than %d segments", FUNCD_JSONPATH_MAX_SEGMENTS);
        if (out->n && out->seg[out->n - 1].kind == FUNCD_JP_ALL)
            return fail(why, why_len, "[*] must be the last segment");
        funcd_jsonpath_seg *s = &out->seg[out->n];
        memset(s, 0, sizeof(*s));
        if (text[i] == '[') {
            if (bracket(text, len, &i, allow_all, s, why, why_len) < 0)
                return -1;
        } else {
            size_t start = ++i, n = 0;
            if (i < len && text[i] == '.')
                return fail(why, why_len, "'..' at offset %zu: recursive descent is not "
                                          "supported", start - 1);
            if (i >= len || !is_name_start(text[i]))
                return fail(why, why_len, "expected a member name after '.' at offset %zu "
                                          "(letters, digits, '_' and '-', not starting with a "
                                          "digit; quote others as [\"name\"])", start - 1);
            while (i < len && is_name_char(text[i]))
                i++;
            n = i - start;
            if (n > FUNCD_JSONPATH_MAX_NAME)
                return fail(why, why_len, "a member name is longer than %d bytes",
                            FUNCD_JSONPATH_MAX_NAME);
            s->kind = FUNCD_JP_MEMBER;
            memcpy(s->name, text + start, n);
            s->name[n] = '\0';
        }
        out->n++;
    }
    if (i > FUNCD_JSONPATH_MAX_TEXT)
        return fail(why, why_len, "longer than %d bytes", FUNCD_JSONPATH_MAX_TEXT);
    *used = i;
    return 0;
}

int funcd_jsonpath_parse(const char *text, int allow_all, funcd_jsonpath *out, char *why,
                         size_t why_len)
{
    size_t len = strlen(text), used = 0;
    if (funcd_jsonpath_parse_prefix(text, len, allow_all, out, &used, why, why_len) < 0)
        return -1;
    if (used != len)
        return fail(why, why_len, "unexpected '%c' at offset %zu (a path is $ followed by "
                                  ".name, [\"name\"], [N]%s)",
                    text[used], used, allow_all ? " or a final [*]" : "");
    return 0;
}

const cJSON *funcd_jsonpath_get(const funcd_jsonpath *p, const cJSON *doc)
{
    const cJSON *v = doc;
    for (size_t i = 0; v && i < p->n; i++) {
        const funcd_jsonpath_seg *s = &p->seg[i];
        if (s->kind == FUNCD_JP_MEMBER)
            v = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, s->name) : NULL;
        else if (s->kind == FUNCD_JP_INDEX)
            v = cJSON_IsArray(v) && s->index < (uint32_t)cJSON_GetArraySize(v)
                    ? cJSON_GetArrayItem(v, (int)s->index)
                    : NULL;
        else
            v = cJSON_IsArray(v) ? v : NULL;
    }
    return v;
}
