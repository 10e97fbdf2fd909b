/* Equality-based label selectors: the control plane's ?labelSelector= and
 * funcdctl's -l for watches, which the server does not filter. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "api/api.h"
#include "funcd/sys/error.h"

#define SHAPE "write key=value, key==value, key!=value, key or !key, separated by commas"

static int is_label_char(int c, int in_key)
{
    return isalnum(c) || c == '-' || c == '_' || c == '.' || (in_key && c == '/');
}

/* Copies the run of label characters at *p into out; -1 if it does not fit. */
static int take_word(const char **p, char *out, size_t len, int in_key)
{
    size_t n = 0;
    while (is_label_char((unsigned char)**p, in_key)) {
        if (n + 1 >= len)
            return -1;
        out[n++] = *(*p)++;
    }
    out[n] = '\0';
    return 0;
}

static int fail(funcd_api_error *err, const char *text, const char *why)
{
    snprintf(err->field, sizeof(err->field), "labelSelector");
    snprintf(err->message, sizeof(err->message), "labelSelector \"%.200s\" %s", text, why);
    return funcd_error_set(FUNCD_EINVAL, "%s", err->message);
}

int funcd_label_selector_parse(funcd_label_selector *out, const char *text,
                               funcd_api_error *err)
{
    memset(out, 0, sizeof(*out));
    for (const char *p = text; *p;) {
        if (out->n == FUNCD_SELECTOR_MAX_TERMS)
            return fail(err, text, "has more than 16 terms");
        funcd_label_term *t = &out->terms[out->n];
        while (*p == ' ')
            p++;
        int absent = *p == '!';
        p += absent;
        if (take_word(&p, t->key, sizeof(t->key), 1) < 0)
            return fail(err, text, "has a label key longer than 319 characters");
        if (!t->key[0])
            return fail(err, text, "needs a label key in every term: " SHAPE);
        while (*p == ' ')
            p++;
        if (absent || *p == ',' || !*p) {
            t->op = absent ? FUNCD_SEL_ABSENT : FUNCD_SEL_EXISTS;
        } else if (p[0] == '!' && p[1] == '=') {
            t->op = FUNCD_SEL_NE;
            p += 2;
        } else if (p[0] == '=') {
            t->op = FUNCD_SEL_EQ;
            p += p[1] == '=' ? 2 : 1;
        } else {
            return fail(err, text, "is not equality-based: " SHAPE);
        }
        while (*p == ' ')
            p++;
        if ((t->op == FUNCD_SEL_EQ || t->op == FUNCD_SEL_NE) &&
            take_word(&p, t->value, sizeof(t->value), 0) < 0)
            return fail(err, text, "has a label value longer than 63 characters");
        while (*p == ' ')
            p++;
        out->n++;
        if (*p == ',' && p[1])
            p++;
        else if (*p)
            return fail(err, text, "is not equality-based: " SHAPE);
    }
    return 0;
}

int funcd_label_selector_matches(const funcd_label_selector *sel, const cJSON *obj)
{
    const cJSON *labels = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "labels");
    for (size_t i = 0; i < sel->n; i++) {
        const char *v =
            cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(labels, sel->terms[i].key));
        int ok;
        switch (sel->terms[i].op) {
        case FUNCD_SEL_EXISTS: ok = v != NULL; break;
        case FUNCD_SEL_ABSENT: ok = v == NULL; break;
        case FUNCD_SEL_EQ: ok = v && strcmp(v, sel->terms[i].value) == 0; break;
        default: ok = !v || strcmp(v, sel->terms[i].value) != 0; break;
        }
        if (!ok)
            return 0;
    }
    return 1;
}
