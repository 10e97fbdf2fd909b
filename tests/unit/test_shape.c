/*
 * The gateway's shaping rules (lib/gateway/shape.c) on their own: which
 * Accept-Encoding values accept gzip, which content types are worth
 * compressing, which CORS preflights a configuration allows, and what a
 * configuration compiles to. The answers themselves are the e2e tests'
 * (tests/e2e/test_edge_shape.c).
 */
#include <string.h>

#include "gateway/shape.h"
#include "harness.h"

#define AE(s) funcd_shape_accepts_gzip((s), strlen(s))
#define CT(s) funcd_shape_compressible_type((s), strlen(s))
#define IOV(s) h2o_iovec_init((s), strlen(s))
#define NONE h2o_iovec_init(NULL, 0)

TEST(accept_encoding)
{
    CHECK(AE("gzip"));
    CHECK(AE("gzip, deflate, br"));
    CHECK(AE("br;q=1.0, GZIP;q=0.5"));
    CHECK(AE("x-gzip"));
    CHECK(AE("*"));
    CHECK(AE("identity, *;q=0.1"));
    CHECK(!AE(""));
    CHECK(!AE("identity"));
    CHECK(!AE("br, deflate"));
    CHECK(!AE("gzip;q=0"));
    CHECK(!AE("gzip; q=0.000"));
    CHECK(!AE("*;q=0"));
    CHECK(!AE("gzip;q=0, *"));   /* named and refused: "*" does not bring it back */
    CHECK(AE("gzip;q=0.001"));
    CHECK(!AE("gzipped, xgzip")); /* whole names only */
    CHECK(AE(" ,, gzip ,"));
    /* without any q (shape.c's quick path): names in any case, trimmed */
    CHECK(AE("Deflate, GZip"));
    CHECK(AE("br,x-GZIP\t"));
    CHECK(AE("br, *"));
    CHECK(!AE("gzi, zip, x-gzi p, **"));
}

TEST(content_types)
{
    CHECK(CT("text/plain"));
    CHECK(CT("text/html; charset=utf-8"));
    CHECK(CT("Application/JSON"));
    CHECK(CT("application/json;charset=utf-8"));
    CHECK(CT("application/problem+json"));
    CHECK(CT("application/javascript"));
    CHECK(CT("image/svg+xml"));
    CHECK(CT("application/xml"));
    CHECK(CT("application/wasm"));
    CHECK(!CT("text/event-stream"));
    CHECK(!CT("text/event-stream; charset=utf-8"));
    CHECK(!CT("image/png"));
    CHECK(!CT("application/octet-stream"));
    CHECK(!CT("application/gzip"));
    CHECK(!CT("text/"));
    CHECK(!CT(""));
}

TEST(preflights)
{
    const char *origins[] = {"https://app.example", "HTTPS://Other.Example"};
    const char *methods[] = {"PUT", "DELETE"};
    const char *headers[] = {"Content-Type", "x-api-key"};
    funcd_edge edge = {.has_cors = 1,
                       .cors_allow_origins = origins, .n_cors_allow_origins = 2,
                       .cors_allow_methods = methods, .n_cors_allow_methods = 2,
                       .cors_allow_headers = headers, .n_cors_allow_headers = 2,
                       .cors_max_age = 600};
    funcd_shape *s = NULL;
    CHECK_INT(funcd_shape_new(&s, &edge), 0);
    CHECK(s != NULL);
    CHECK(funcd_shape_origin_allowed(s, IOV("https://app.example")));
    CHECK(funcd_shape_origin_allowed(s, IOV("https://other.example")));
    CHECK(!funcd_shape_origin_allowed(s, IOV("https://app.example.evil")));
    CHECK(!funcd_shape_origin_allowed(s, IOV("null")));
    CHECK(!funcd_shape_origin_allowed(s, NONE));
    CHECK(funcd_shape_preflight_allowed(s, IOV("https://app.example"), IOV("PUT"), NONE));
    CHECK(funcd_shape_preflight_allowed(s, IOV("https://app.example"), IOV("GET"),
                                        IOV("content-type, X-API-Key")));
    CHECK(!funcd_shape_preflight_allowed(s, IOV("https://app.example"), IOV("PATCH"), NONE));
    CHECK(!funcd_shape_preflight_allowed(s, IOV("https://app.example"), IOV("put"), NONE));
    CHECK(!funcd_shape_preflight_allowed(s, IOV("https://app.example"), IOV("PUT"),
                                         IOV("content-type, x-other")));
    CHECK(!funcd_shape_preflight_allowed(s, IOV("https://evil.example"), IOV("PUT"), NONE));
    CHECK(!funcd_shape_preflight_allowed(s, IOV("https://app.example"), IOV(""), NONE));
    funcd_shape_unref(s);

    const char *any[] = {"*"};
    funcd_edge open = {.has_cors = 1,
                       .cors_allow_origins = any, .n_cors_allow_origins = 1,
                       .cors_allow_methods = any, .n_cors_allow_methods = 1,
                       .cors_allow_headers = any, .n_cors_allow_headers = 1};
    CHECK_INT(funcd_shape_new(&s, &open), 0);
    CHECK(funcd_shape_preflight_allowed(s, IOV("https://whoever.example"), IOV("PATCH"),
                                        IOV("x-anything")));
    funcd_shape_unref(s);

    /* A cors block that allows no origin: every preflight refused. */
    funcd_edge none = {.has_cors = 1};
    CHECK_INT(funcd_shape_new(&s, &none), 0);
    CHECK(s != NULL);
    CHECK(!funcd_shape_preflight_allowed(s, IOV("https://app.example"), IOV("GET"), NONE));
    funcd_shape_unref(s);
}

TEST(compile)
{
    funcd_shape *s = (funcd_shape *)1;
    funcd_edge nothing = {.rps = 10, .max_in_flight = 4}; /* limits only */
    CHECK_INT(funcd_shape_new(&s, &nothing), 0);
    CHECK(s == NULL); /* nothing to shape: the request path costs one branch */
    s = (funcd_shape *)1;
    CHECK_INT(funcd_shape_new(&s, NULL), 0);
    CHECK(s == NULL);

    /* Only headers the gateway owns: nothing left to do. */
    const funcd_edge_header set[] = {{"Content-Length", "1"}, {"transfer-encoding", "x"}};
    const char *remove[] = {"Connection", "Content-Encoding"};
    funcd_edge owned = {.headers_set = set, .n_headers_set = 2, .headers_remove = remove,
                        .n_headers_remove = 2};
    CHECK_INT(funcd_shape_new(&s, &owned), 0);
    CHECK(s == NULL);

    funcd_edge gz = {.compress = 1};
    CHECK_INT(funcd_shape_new(&s, &gz), 0);
    CHECK(s != NULL);
    funcd_shape_ref(s);
    funcd_shape_unref(s);
    funcd_shape_unref(s);
    funcd_shape_unref(NULL);
}

int main(void)
{
    RUN(accept_encoding);
    RUN(content_types);
    RUN(preflights);
    RUN(compile);
    return HARNESS_END();
}
