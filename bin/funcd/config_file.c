/*
 * The daemon's config file: a YAML mapping whose keys are funcd's long flag
 * names. It is turned into "--flag=value" arguments that go through the
 * same flag parser as the command line, so the two can never disagree.
 */
#include "config_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "funcd/sys/error.h"

typedef struct args {
    char **v;
    size_t n, cap;
} args;

static int add_arg(args *a, const char *key, const char *value)
{
    if (a->n + 2 > a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        char **v = realloc(a->v, cap * sizeof(*v));
        if (!v)
            return -1;
        a->v = v;
        a->cap = cap;
    }
    char *s;
    if ((value ? asprintf(&s, "--%s=%s", key, value) : asprintf(&s, "--%s", key)) < 0)
        return -1;
    a->v[a->n++] = s;
    a->v[a->n] = NULL;
    return 0;
}

static int is_true(const char *s)
{
    return strcmp(s, "true") == 0 || strcmp(s, "yes") == 0 || strcmp(s, "on") == 0;
}

static int is_false(const char *s)
{
    return strcmp(s, "false") == 0 || strcmp(s, "no") == 0 || strcmp(s, "off") == 0;
}

static int valid_key(const char *k)
{
    if (!*k || *k == '-')
        return 0;
    for (const char *c = k; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-'))
            return 0;
    return 1;
}

/* One scalar value of `key`: booleans become a bare flag (true) or nothing. */
static int add_scalar(args *a, const char *key, const yaml_node_t *n, char *err, size_t errlen)
{
    const char *v = (const char *)n->data.scalar.value;
    int plain = n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    if (plain && is_false(v))
        return 0;
    if (!*v) {
        snprintf(err, errlen, "%s: the value is empty", key);
        return -1;
    }
    if (add_arg(a, key, plain && is_true(v) ? NULL : v) < 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

static int add_entry(args *a, yaml_document_t *doc, const yaml_node_pair_t *pair, char *err,
                     size_t errlen)
{
    yaml_node_t *k = yaml_document_get_node(doc, pair->key);
    yaml_node_t *v = yaml_document_get_node(doc, pair->value);
    if (!k || k->type != YAML_SCALAR_NODE || !valid_key((const char *)k->data.scalar.value)) {
        snprintf(err, errlen, "line %lu: keys are funcd's long flag names (e.g. data-dir)",
                 k ? (unsigned long)k->start_mark.line + 1 : 0UL);
        return -1;
    }
    const char *key = (const char *)k->data.scalar.value;
    if (v && v->type == YAML_SCALAR_NODE)
        return add_scalar(a, key, v, err, errlen);
    if (v && v->type == YAML_SEQUENCE_NODE) { /* a repeatable flag */
        for (yaml_node_item_t *i = v->data.sequence.items.start; i < v->data.sequence.items.top;
             i++) {
            yaml_node_t *item = yaml_document_get_node(doc, *i);
            if (!item || item->type != YAML_SCALAR_NODE) {
                snprintf(err, errlen, "%s: list items must be plain values", key);
                return -1;
            }
            if (add_scalar(a, key, item, err, errlen) < 0)
                return -1;
        }
        return 0;
    }
    snprintf(err, errlen, "%s: the value must be a plain value or a list of them", key);
    return -1;
}

static void free_args(args *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->v[i]);
    free(a->v);
    a->v = NULL;
    a->n = a->cap = 0;
}

int funcd_config_file_parse(const char *text, size_t len, char ***out, char *err, size_t errlen)
{
    *out = NULL;
    err[0] = 0;
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "out of memory");
        return FUNCD_ENOMEM;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        snprintf(err, errlen, "line %lu: %s", (unsigned long)parser.problem_mark.line + 1,
                 parser.problem ? parser.problem : "not valid YAML");
        yaml_parser_delete(&parser);
        return FUNCD_EINVAL;
    }
    args a = {0};
    int rc = 0;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root && root->type != YAML_MAPPING_NODE) {
        snprintf(err, errlen, "the config file must be a mapping of flag names to values");
        rc = FUNCD_EINVAL;
    }
    for (yaml_node_pair_t *p = root && rc == 0 ? root->data.mapping.pairs.start : NULL;
         p && p < root->data.mapping.pairs.top; p++)
        if (add_entry(&a, &doc, p, err, errlen) < 0) {
            rc = FUNCD_EINVAL;
            break;
        }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    if (rc == 0 && !a.v && !(a.v = calloc(1, sizeof(char *)))) {
        snprintf(err, errlen, "out of memory");
        rc = FUNCD_ENOMEM;
    }
    if (rc < 0) {
        free_args(&a);
        return rc;
    }
    *out = a.v;
    return 0;
}

void funcd_config_file_free(char **args_)
{
    for (char **p = args_; p && *p; p++)
        free(*p);
    free(args_);
}
