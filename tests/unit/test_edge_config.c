/* spec.edge: validation naming the field, the effective edge built from the
 * daemon's defaults and the spec, its copy, and the limiter's arithmetic. */
#include <stdlib.h>

#include "api_helpers.h"
#include "gateway/edge.h"

TEST(edge_valid)
{
    VALID("Function", FN("  edge: {}\n"));
    VALID("Function", FN("  edge:\n"
                         "    auth: authenticated\n"
                         "    limits: {rps: 100, burst: 200, maxBodyBytes: 1Mi, maxInFlight: 64}\n"
                         "    cors: {allowOrigins: [\"https://app.example\", "
                         "\"http://localhost:3000\"], allowMethods: [GET, POST], allowHeaders: "
                         "[content-type], maxAge: 600}\n"
                         "    headers: {set: {X-Frame-Options: DENY}, remove: [Server]}\n"
                         "    compress: true\n"));
    VALID("Function", FN("  edge: {auth: open, limits: {rps: 0, maxBodyBytes: 0}}\n"));
    VALID("Function", FN("  edge: {limits: {maxBodyBytes: 1048576}, cors: {allowOrigins: ['*']}}\n"));
    VALID("Function", FN("  edge: {limits: {maxBodyBytes: 64Mi}}\n"));
}

TEST(edge_invalid)
{
    INVALID("Function", FN("  edge: 3\n"), "spec.edge", "must be an object");
    INVALID("Function", FN("  edge: {tls: true}\n"), "spec.edge.tls", "unknown field");
    INVALID("Function", FN("  edge: {auth: token}\n"), "spec.edge.auth",
            "must be one of: open, authenticated");
    INVALID("Function", FN("  edge: {limits: {rps: -1}}\n"), "spec.edge.limits.rps",
            "must be an integer between 0 and 1000000");
    INVALID("Function", FN("  edge: {limits: {rps: 1.5}}\n"), "spec.edge.limits.rps",
            "must be an integer");
    INVALID("Function", FN("  edge: {limits: {burst: x}}\n"), "spec.edge.limits.burst",
            "must be an integer");
    INVALID("Function", FN("  edge: {limits: {maxBodyBytes: 1Qi}}\n"),
            "spec.edge.limits.maxBodyBytes", "must be a quantity of bytes");
    INVALID("Function", FN("  edge: {limits: {maxBodyBytes: 65Mi}}\n"),
            "spec.edge.limits.maxBodyBytes", "must be at most 64Mi");
    INVALID("Function", FN("  edge: {limits: {maxInFlight: 2000000}}\n"),
            "spec.edge.limits.maxInFlight", "must be an integer between 0 and 1000000");
    INVALID("Function", FN("  edge: {limits: {rate: 3}}\n"), "spec.edge.limits.rate",
            "unknown field");
    INVALID("Function", FN("  edge: {cors: {allowOrigins: [\"https://a.example/path\"]}}\n"),
            "spec.edge.cors.allowOrigins[0]", "must be \"*\" or an origin");
    INVALID("Function", FN("  edge: {cors: {allowOrigins: [\"*\", \"ftp://x\"]}}\n"),
            "spec.edge.cors.allowOrigins[1]", "must be \"*\" or an origin");
    INVALID("Function", FN("  edge: {cors: {allowOrigins: \"*\"}}\n"),
            "spec.edge.cors.allowOrigins", "must be an array");
    INVALID("Function", FN("  edge: {cors: {allowMethods: [\"GE T\"]}}\n"),
            "spec.edge.cors.allowMethods[0]", "must be an HTTP method");
    INVALID("Function", FN("  edge: {cors: {allowHeaders: [\"a:b\"]}}\n"),
            "spec.edge.cors.allowHeaders[0]", "must be a header name");
    INVALID("Function", FN("  edge: {cors: {maxAge: 86401}}\n"), "spec.edge.cors.maxAge",
            "must be an integer between 0 and 86400");
    INVALID("Function", FN("  edge: {headers: {set: {\"X A\": b}}}\n"),
            "spec.edge.headers.set[X A]", "must be a header name");
    INVALID("Function", FN("  edge: {headers: {set: {X-A: \"a\\nb\"}}}\n"),
            "spec.edge.headers.set[X-A]", "without control characters");
    INVALID("Function", FN("  edge: {headers: {set: {X-A: 3}}}\n"), "spec.edge.headers.set[X-A]",
            "must be a string");
    INVALID("Function", FN("  edge: {headers: {set: {Content-Length: \"3\"}}}\n"),
            "spec.edge.headers.set[Content-Length]", "set by the gateway itself");
    INVALID("Function", FN("  edge: {headers: {set: []}}\n"), "spec.edge.headers.set",
            "must be an object");
    INVALID("Function", FN("  edge: {headers: {remove: [Transfer-Encoding]}}\n"),
            "spec.edge.headers.remove[0]", "set by the gateway itself");
    /* compress decides it: a configured one would lie about the bytes */
    INVALID("Function", FN("  edge: {headers: {set: {Content-Encoding: gzip}}}\n"),
            "spec.edge.headers.set[Content-Encoding]", "set by the gateway itself");
    INVALID("Function", FN("  edge: {headers: {remove: [content-encoding]}}\n"),
            "spec.edge.headers.remove[0]", "set by the gateway itself");
    INVALID("Function", FN("  edge: {compress: yes please}\n"), "spec.edge.compress",
            "must be true or false");
}

static cJSON *edge_of(const char *text)
{
    cJSON *obj = NULL;
    funcd_api_error err;
    if (funcd_api_decode(text, strlen(text), &obj, &err) < 0)
        return NULL;
    return obj;
}

TEST(edge_build_merges_defaults)
{
    funcd_edge defaults = {.auth = FUNCD_EDGE_AUTH_AUTHENTICATED, .rps = 10, .burst = 20,
                           .max_body_bytes = 1000, .max_in_flight = 5, .limit_per_client = 1};
    funcd_edge *e = NULL;
    /* No spec.edge: the defaults. */
    CHECK_INT(funcd_edge_build(NULL, &defaults, &e), 0);
    CHECK_INT(e->auth, FUNCD_EDGE_AUTH_AUTHENTICATED);
    CHECK_INT(e->rps, 10);
    CHECK_INT(e->burst, 20);
    CHECK_INT((int)e->max_body_bytes, 1000);
    CHECK_INT(e->max_in_flight, 5);
    CHECK_INT(e->limit_per_client, 1);
    CHECK(funcd_edge_active(e));
    funcd_edge_free(e);

    /* Each field set overrides, 0 included; the rest stay. */
    cJSON *spec = edge_of("{\"auth\":\"open\",\"limits\":{\"rps\":0,\"maxBodyBytes\":\"1Ki\"},"
                          "\"cors\":{\"allowOrigins\":[\"https://a.example\"],"
                          "\"allowMethods\":[\"GET\",\"POST\"],\"maxAge\":600},"
                          "\"headers\":{\"set\":{\"X-Frame-Options\":\"DENY\",\"X-B\":\"b\"},"
                          "\"remove\":[\"Server\"]},\"compress\":true}");
    CHECK(spec);
    CHECK_INT(funcd_edge_build(spec, &defaults, &e), 0);
    cJSON_Delete(spec);
    CHECK_INT(e->auth, FUNCD_EDGE_AUTH_OPEN);
    CHECK_INT(e->rps, 0);
    CHECK_INT((int)e->max_body_bytes, 1024);
    CHECK_INT(e->max_in_flight, 5);
    CHECK_INT(e->has_cors, 1);
    CHECK_INT((int)e->n_cors_allow_origins, 1);
    CHECK_STR(e->cors_allow_origins[0], "https://a.example");
    CHECK_INT((int)e->n_cors_allow_methods, 2);
    CHECK_STR(e->cors_allow_methods[1], "POST");
    CHECK_INT((int)e->n_cors_allow_headers, 0);
    CHECK_INT(e->cors_max_age, 600);
    CHECK_INT((int)e->n_headers_set, 2);
    CHECK_STR(e->headers_set[0].name, "X-Frame-Options");
    CHECK_STR(e->headers_set[0].value, "DENY");
    CHECK_STR(e->headers_set[1].name, "X-B");
    CHECK_INT((int)e->n_headers_remove, 1);
    CHECK_STR(e->headers_remove[0], "Server");
    CHECK_INT(e->compress, 1);

    /* A copy stands alone. */
    funcd_edge *copy = funcd_edge_dup(e);
    funcd_edge_free(e);
    CHECK(copy);
    CHECK_STR(copy->headers_set[1].value, "b");
    CHECK_STR(copy->cors_allow_methods[0], "GET");
    funcd_edge_free(copy);

    /* No defaults and no spec: everything off, open. */
    CHECK_INT(funcd_edge_build(NULL, NULL, &e), 0);
    CHECK(!funcd_edge_active(e));
    funcd_edge_free(e);

    /* rps without burst: one second's worth. */
    spec = edge_of("{\"limits\":{\"rps\":7}}");
    CHECK_INT(funcd_edge_build(spec, NULL, &e), 0);
    cJSON_Delete(spec);
    CHECK_INT(e->burst, 7);
    funcd_edge_free(e);
}

TEST(limiter)
{
    funcd_edge e = {.rps = 2, .burst = 3};
    funcd_edge_limiter *l = funcd_edge_limiter_new();
    CHECK(l);
    uint64_t now = 5000000000ull;
    /* A burst of 3 at once, then the fourth waits a whole second (rounded up). */
    CHECK_INT(funcd_edge_rate_take(l, &e, 0, now), 0);
    CHECK_INT(funcd_edge_rate_take(l, &e, 0, now), 0);
    CHECK_INT(funcd_edge_rate_take(l, &e, 0, now), 0);
    CHECK_INT(funcd_edge_rate_take(l, &e, 0, now), 1);
    /* Half a second later (2 per second): one more. */
    CHECK_INT(funcd_edge_rate_take(l, &e, 0, now + 500000000ull), 0);
    CHECK_INT(funcd_edge_rate_take(l, &e, 0, now + 500000000ull), 1);

    /* Per client: each address has its own bucket. */
    funcd_edge pc = {.rps = 1, .burst = 1, .limit_per_client = 1};
    CHECK_INT(funcd_edge_limiter_prepare(l, &pc), 0);
    uint64_t a = funcd_edge_client_hash("\x7f\0\0\1", 4), b = funcd_edge_client_hash("\x7f\0\0\2", 4);
    CHECK(a != b && a && b);
    CHECK_INT(funcd_edge_rate_take(l, &pc, a, now), 0);
    CHECK_INT(funcd_edge_rate_take(l, &pc, a, now), 1);
    CHECK_INT(funcd_edge_rate_take(l, &pc, b, now), 0);
    CHECK_INT(funcd_edge_rate_take(l, &pc, b, now), 1);
    CHECK_INT(funcd_edge_rate_take(l, &pc, a, now + 1000000000ull), 0);

    /* In flight: at most max, each leave makes room. */
    CHECK_INT(funcd_edge_in_flight_enter(l, 2), 1);
    CHECK_INT(funcd_edge_in_flight_enter(l, 2), 1);
    CHECK_INT(funcd_edge_in_flight_enter(l, 2), 0);
    funcd_edge_in_flight_leave(l);
    CHECK_INT(funcd_edge_in_flight_enter(l, 2), 1);
    funcd_edge_in_flight_leave(l);
    funcd_edge_in_flight_leave(l);
    funcd_edge_limiter_unref(l);
}

/* The example in examples/edge/ is a valid Function. */
TEST(example_validates)
{
    const char *root = getenv("FUNCD_SOURCE_ROOT");
    char path[1024];
    snprintf(path, sizeof(path), "%s/examples/edge/function.yaml", root ? root : ".");
    FILE *f = fopen(path, "r");
    CHECK(f);
    static char text[8192];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    VALID("Function", text);
}

int main(void)
{
    RUN(edge_valid);
    RUN(edge_invalid);
    RUN(edge_build_merges_defaults);
    RUN(limiter);
    RUN(example_validates);
    return HARNESS_END();
}
