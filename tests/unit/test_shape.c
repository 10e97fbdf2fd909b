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
    funcd_shape_spec spec = {origins, 2, methods, 2, headers, 2, 600};
    funcd_shape *s = NULL;
    CHECK_INT(funcd_shape_new(&s, &spec), 0);
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
    funcd_shape_spec open = {any, 1, any, 1, any, 1, 0};
    CHECK_INT(funcd_shape_new(&s, &open), 0);
    CHECK(funcd_shape_preflight_allowed(s, IOV("https://whoever.example"), IOV("PATCH"),
                                        IOV("x-anything")));
    funcd_shape_unref(s);
}

TEST(compile)
{
    funcd_shape *s = (funcd_shape *)1;
    funcd_shape_spec nothing = {0};
    CHECK_INT(funcd_shape_new(&s, &nothing), 0);
    CHECK(s == NULL); /* nothing to shape: the request path costs one branch */

    /* Only headers the gateway owns: nothing left to do. */
    const char *names[] = {"Content-Length", "transfer-encoding"}, *values[] = {"1", "x"};
    const char *remove[] = {"Connection", "Content-Encoding"};
    funcd_shape_spec owned = {.set_names = names, .set_values = values, .n_set = 2,
                              .remove = remove, .n_remove = 2};
    CHECK_INT(funcd_shape_new(&s, &owned), 0);
    CHECK(s == NULL);

    funcd_shape_spec gz = {.compress = 1};
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
