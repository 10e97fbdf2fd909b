/*
 * Fuzz target for lib/api: any bytes through decode, decode_all, validate,
 * normalize and YAML output, checking what must hold for every input:
 *   - every decoded object survives to_yaml + decode unchanged;
 *   - a valid object stays valid after normalize.
 * The same bytes, as short strings, also go to the quantity and revision
 * parsers.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_resource: %s\n", what);
        abort();
    }
}

static void parse_scalars(const uint8_t *data, size_t size)
{
    char s[96];
    size_t n = size < sizeof(s) - 1 ? size : sizeof(s) - 1;
    uint64_t v;
    memcpy(s, data, n);
    s[n] = '\0';
    funcd_parse_duration_ms(s, &v);
    funcd_parse_quantity(s, &v);
    funcd_parse_cpu_millis(s, &v);
    if (funcd_api_parse_revision(s, n, &v) == 0 && v > FUNCD_API_MAX_REVISION) {
        fprintf(stderr, "fuzz_resource: a revision past the maximum was accepted\n");
        abort();
    }
}

/* cJSON_Compare looks every object up both ways and is exponential in depth;
 * the YAML writer keeps member order, so an ordered walk suffices. Numbers
 * must come back bit-exact: the writer prints the shortest exact form. */
static int same_tree(const cJSON *a, const cJSON *b)
{
    if ((a->type & 0xff) != (b->type & 0xff))
        return 0;
    if (cJSON_IsString(a))
        return strcmp(a->valuestring, b->valuestring) == 0;
    if (cJSON_IsNumber(a))
        return a->valuedouble == b->valuedouble;
    const cJSON *x = a->child, *y = b->child;
    for (; x && y; x = x->next, y = y->next) {
        if (cJSON_IsObject(a) && strcmp(x->string, y->string) != 0)
            return 0;
        if (!same_tree(x, y))
            return 0;
    }
    return !x && !y;
}

static void round_trip(const cJSON *obj)
{
    funcd_buf yaml = FUNCD_BUF_INIT;
    check(funcd_api_to_yaml(obj, &yaml) == 0, "to_yaml failed");
    /* Escaping can grow a document past the size bound; that is no bug. */
    if (yaml.len <= FUNCD_API_MAX_OBJECT_BYTES) {
        cJSON *back = NULL;
        funcd_api_error err;
        if (funcd_api_decode(yaml.data, yaml.len, &back, &err) != 0) {
            fprintf(stderr, "%s\n---\n%s\n", err.message, yaml.data);
            check(0, "to_yaml output does not decode");
        }
        if (!same_tree(obj, back)) {
            fprintf(stderr, "%s\n", yaml.data);
            check(0, "to_yaml output decodes to something else");
        }
        cJSON_Delete(back);
    }
    funcd_buf_free(&yaml);
}

static void validate_as(const funcd_kind *kind, const cJSON *obj)
{
    funcd_api_error err;
    if (funcd_api_validate(kind, obj, &err) != 0)
        return;
    cJSON *copy = cJSON_Duplicate(obj, 1);
    if (!copy)
        return;
    check(funcd_api_normalize(kind, copy) == 0, "normalize failed");
    if (funcd_api_validate(kind, copy, &err) != 0) {
        fprintf(stderr, "%s: %s\n", err.field, err.message);
        check(0, "normalized object no longer validates");
    }
    round_trip(copy);
    cJSON_Delete(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    funcd_api_error err;
    cJSON *one = NULL, *all = NULL;
    parse_scalars(data, size);
    if (funcd_api_decode((const char *)data, size, &one, &err) == 0)
        round_trip(one);
    cJSON_Delete(one);
    if (funcd_api_decode_all((const char *)data, size, &all, &err) != 0)
        return 0;
    for (const cJSON *obj = all->child; obj; obj = obj->next) {
        round_trip(obj);
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(obj, "kind");
        const funcd_kind *k = cJSON_IsString(kind) ? funcd_kind_by_kind(kind->valuestring) : NULL;
        if (k) {
            validate_as(k, obj);
            continue;
        }
        for (size_t i = 0; funcd_kinds[i]; i++)
            validate_as(funcd_kinds[i], obj);
    }
    cJSON_Delete(all);
    return 0;
}
