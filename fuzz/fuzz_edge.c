/*
 * Fuzz target for spec.edge: any bytes, decoded as a JSON or YAML document,
 * become a Function's spec.edge and go through validation; a valid one is
 * built into the effective edge (over non-zero defaults) and copied,
 * checking what must hold for every input:
 *   - the edge of a valid spec builds, and its copy says the same;
 *   - every list item and header of the edge is one the spec gave;
 *   - limits never exceed what validation allows.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "gateway/edge.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_edge: %s\n", what);
        abort();
    }
}

static void same_list(const char *const *a, const char *const *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        check(strcmp(a[i], b[i]) == 0, "a copied list differs");
}

static void check_edge(const cJSON *spec_edge)
{
    static const funcd_edge defaults = {.auth = FUNCD_EDGE_AUTH_AUTHENTICATED, .rps = 3,
                                        .burst = 4, .max_body_bytes = 5, .max_in_flight = 6};
    funcd_edge *e = NULL;
    check(funcd_edge_build(spec_edge, &defaults, &e) == 0 && e, "a valid edge does not build");
    check(e->max_body_bytes <= FUNCD_EDGE_MAX_BODY_CEILING, "a body cap over the ceiling");
    check(e->rps <= 1000000 && e->max_in_flight <= 1000000, "a limit over its bound");
    check(!e->rps || e->burst, "a rate without a burst");
    const cJSON *headers = cJSON_GetObjectItemCaseSensitive(spec_edge, "headers");
    const cJSON *set = cJSON_GetObjectItemCaseSensitive(headers, "set");
    for (size_t i = 0; i < e->n_headers_set; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(set, e->headers_set[i].name);
        check(cJSON_IsString(v) && strcmp(v->valuestring, e->headers_set[i].value) == 0,
              "a header the spec does not set");
    }
    funcd_edge *copy = funcd_edge_dup(e);
    check(copy != NULL, "copy failed");
    check(copy->auth == e->auth && copy->rps == e->rps && copy->burst == e->burst &&
              copy->max_body_bytes == e->max_body_bytes && copy->compress == e->compress &&
              copy->n_headers_set == e->n_headers_set &&
              copy->n_cors_allow_origins == e->n_cors_allow_origins,
          "the copy differs");
    same_list(copy->cors_allow_origins, e->cors_allow_origins, e->n_cors_allow_origins);
    same_list(copy->cors_allow_methods, e->cors_allow_methods, e->n_cors_allow_methods);
    same_list(copy->cors_allow_headers, e->cors_allow_headers, e->n_cors_allow_headers);
    same_list(copy->headers_remove, e->headers_remove, e->n_headers_remove);
    funcd_edge_free(copy);
    funcd_edge_free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    funcd_api_error err;
    cJSON *edge = NULL;
    if (funcd_api_decode((const char *)data, size, &edge, &err) != 0)
        return 0;
    cJSON *fn = cJSON_Parse("{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\","
                            "\"metadata\":{\"name\":\"f\"},\"spec\":{\"runtime\":\"native\","
                            "\"source\":{\"path\":\"/srv/f\"}}}");
    if (!fn) {
        cJSON_Delete(edge);
        return 0;
    }
    cJSON_AddItemToObject(cJSON_GetObjectItemCaseSensitive(fn, "spec"), "edge", edge);
    if (funcd_api_validate(funcd_kind_by_kind("Function"), fn, &err) == 0)
        check_edge(edge);
    else
        check(strncmp(err.field, "spec.edge", 9) == 0 || err.field[0] == '\0',
              "an invalid edge blamed on another field");
    /* Whatever validation said, building must not crash on it. */
    funcd_edge *any = NULL;
    if (funcd_edge_build(edge, NULL, &any) == 0)
        funcd_edge_free(any);
    cJSON_Delete(fn);
    return 0;
}
