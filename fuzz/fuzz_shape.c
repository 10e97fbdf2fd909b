/*
 * Fuzz target for the gateway's shaping parsers (lib/gateway/shape.c):
 * any bytes as an Accept-Encoding value, a Content-Type, and the Origin,
 * Access-Control-Request-Method and -Headers of a CORS preflight (the
 * input split at its first three NUL bytes), checked against a fixed
 * configuration. What must hold: no crash or overread, and a preflight
 * is only allowed from an allowed origin.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/shape.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_shape: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly `size` bytes: ASan sees any read past the end. */
    char *s = malloc(size ? size : 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    funcd_shape_accepts_gzip(s, size);
    funcd_shape_compressible_type(s, size);

    h2o_iovec_t part[3] = {{NULL, 0}, {NULL, 0}, {NULL, 0}};
    const char *p = s, *end = s + size;
    for (int i = 0; i < 3 && p <= end; i++) {
        const char *nul = memchr(p, '\0', (size_t)(end - p));
        part[i] = h2o_iovec_init(p, (size_t)((nul ? nul : end) - p));
        if (!nul)
            break;
        p = nul + 1;
    }
    const char *origins[] = {"https://app.example"}, *methods[] = {"PUT", "DELETE"};
    const char *headers[] = {"content-type", "x-api-key"};
    funcd_edge edge = {.has_cors = 1,
                       .cors_allow_origins = origins, .n_cors_allow_origins = 1,
                       .cors_allow_methods = methods, .n_cors_allow_methods = 2,
                       .cors_allow_headers = headers, .n_cors_allow_headers = 2,
                       .cors_max_age = 60};
    funcd_shape *shape = NULL;
    if (funcd_shape_new(&shape, &edge) == 0 && shape) {
        int ok = funcd_shape_preflight_allowed(shape, part[0], part[1], part[2]);
        check(!ok || funcd_shape_origin_allowed(shape, part[0]),
              "a preflight allowed from an origin that is not");
        funcd_shape_unref(shape);
    }
    free(s);
    return 0;
}
