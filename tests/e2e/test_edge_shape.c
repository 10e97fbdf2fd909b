/*
 * Shaping at the edge, end to end (docs/edge.md, "Shaping"): a Function's
 * spec.edge.cors, .headers and .compress seen through the data plane of an
 * embedded platform, against the native fixture worker's /shape answers
 * (Content-Type, Content-Encoding and size chosen by the test, an
 * X-Remove-Me header and a CORS header of the worker's own).
 */
#include <zlib.h>

#include "../harness.h"
#include "test_serving_common.h"
#include "fixtures/native/shape_body.h"

#define ORIGIN "https://app.example"

/* CORS for ORIGIN (PUT and DELETE beyond the simple methods, two request
 * headers), two headers set (one replacing the worker's), one removed,
 * gzip on. */
#define EDGE_SPEC                                                                                  \
    "\"edge\":{\"cors\":{\"allowOrigins\":[\"" ORIGIN "\"],\"allowMethods\":[\"PUT\",\"DELETE\"],"  \
    "\"allowHeaders\":[\"content-type\",\"x-api-key\"],\"maxAge\":600},"                           \
    "\"headers\":{\"set\":{\"X-Frame-Options\":\"DENY\",\"X-Worker-Pid\":\"hidden\"},"             \
    "\"remove\":[\"X-Remove-Me\"]},\"compress\":true}"

/* Creates Function `name` on the native fixture with EDGE_SPEC; 1 when it
 * is Ready. */
static int create_shaped(env *e, const char *name)
{
    char dir[256];
    if (sv_fixture("native", dir, sizeof(dir)) != 0)
        return 0;
    if (sv_create(e, name,
                  "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"},"
                  EDGE_SPEC "}",
                  dir) != 201) {
        fprintf(stderr, "  create %s: HTTP %ld %.500s\n", name, e->r.status, e->r.body);
        return 0;
    }
    return sv_wait_ready(e, name, 10000);
}

/* A data-plane request with extra header lines (NULL-terminated). */
static long dp(env *e, const char *method, const char *path, const char *const *headers)
{
    return e2e_http_send(e->dp, method, path, NULL, headers, NULL, 0, &e->r);
}

/* The body the fixture's /shape sends for kb=N. */
static char *shape_body(size_t kb, size_t *len)
{
    *len = kb * 1024;
    return shape_body_make(*len, 0);
}

/* Inflates a gzip body; NULL when it is not one. */
static char *gunzip(const char *in, size_t in_len, size_t *out_len)
{
    z_stream zs = {0};
    if (inflateInit2(&zs, 15 + 16) != Z_OK)
        return NULL;
    size_t cap = in_len * 8 + 1024, len = 0;
    char *out = malloc(cap);
    zs.next_in = (Bytef *)(uintptr_t)in;
    zs.avail_in = (uInt)in_len;
    int rc = Z_OK;
    while (out && rc == Z_OK) {
        if (len == cap) {
            char *more = realloc(out, cap *= 2);
            if (!more) {
                free(out);
                out = NULL;
                break;
            }
            out = more;
        }
        zs.next_out = (Bytef *)out + len;
        zs.avail_out = (uInt)(cap - len);
        rc = inflate(&zs, Z_NO_FLUSH);
        len = cap - zs.avail_out;
    }
    inflateEnd(&zs);
    if (rc != Z_STREAM_END || zs.avail_in != 0) {
        free(out);
        return NULL;
    }
    *out_len = len;
    return out;
}

/* 1 when the comma list `list` names `what` (any case). */
static int lists(const char *list, const char *what)
{
    char copy[512];
    snprintf(copy, sizeof(copy), "%s", list);
    for (char *save = NULL, *t = strtok_r(copy, ", ", &save); t; t = strtok_r(NULL, ", ", &save))
        if (strcasecmp(t, what) == 0)
            return 1;
    return 0;
}

/*
 * A CORS preflight is answered by the gateway: 204 with the allowed origin,
 * methods, headers and max age, for a Function with no worker, which it
 * does not start; one from another origin, or for a method or header not
 * allowed, is 403 with no CORS headers. A plain OPTIONS is the function's.
 */
SV_TEST(preflight)
{
    CHECK(create_shaped(e, "pre"));
    static const char *const ok[] = {"Origin: " ORIGIN, "Access-Control-Request-Method: PUT",
                                     "Access-Control-Request-Headers: Content-Type, X-API-Key",
                                     NULL};
    CHECK_INT(dp(e, "OPTIONS", DP_PATH("pre") "/x", ok), 204);
    CHECK_STR(sv_header(&e->r, "Access-Control-Allow-Origin"), ORIGIN);
    CHECK_STR(sv_header(&e->r, "Access-Control-Allow-Methods"), "PUT, DELETE");
    CHECK_STR(sv_header(&e->r, "Access-Control-Allow-Headers"), "content-type, x-api-key");
    CHECK_STR(sv_header(&e->r, "Access-Control-Max-Age"), "600");
    CHECK(lists(sv_header(&e->r, "Vary"), "Origin"));
    CHECK_STR(sv_header(&e->r, "X-Frame-Options"), "DENY"); /* set on every answer */
    CHECK(sv_header(&e->r, "X-Funcd-Invocation-Id")[0]);
    CHECK_INT(e->r.len, 0);

    static const char *const other_origin[] = {"Origin: https://evil.example",
                                               "Access-Control-Request-Method: PUT", NULL};
    static const char *const other_method[] = {"Origin: " ORIGIN,
                                               "Access-Control-Request-Method: PATCH", NULL};
    static const char *const other_header[] = {"Origin: " ORIGIN,
                                               "Access-Control-Request-Method: GET",
                                               "Access-Control-Request-Headers: x-secret", NULL};
    const char *const *refused[] = {other_origin, other_method, other_header};
    for (size_t i = 0; i < 3; i++) {
        dp(e, "OPTIONS", DP_PATH("pre") "/x", refused[i]);
        CHECK_DP_STATUS(403, "Forbidden");
        CHECK_STR(sv_header(&e->r, "Access-Control-Allow-Origin"), "");
        CHECK_STR(sv_header(&e->r, "Access-Control-Allow-Methods"), "");
    }
    /* None of it reached a worker: there is none. */
    int ready = -1, total = -1;
    CHECK(sv_replicas(e, "pre", &ready, &total) == 0);
    CHECK_INT(total, 0);
    CHECK_INT(sv_function_procs("pre", NULL, 0), 0);

    /* An OPTIONS that is not a preflight goes to the function. */
    static const char *const plain[] = {"Origin: " ORIGIN, NULL};
    CHECK_INT(dp(e, "OPTIONS", DP_PATH("pre") "/x", plain), 200);
    CHECK_STR(jstr(e->r.json, "method"), "OPTIONS");
    CHECK_STR(sv_header(&e->r, "Access-Control-Allow-Origin"), ORIGIN);
}

/*
 * A preflight comes before the authentication stance and the limits: it is
 * answered without a token and takes no token of the rate; the refusals
 * those make are shaped like any answer of the function.
 */
SV_TEST(preflight_before_edge)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(sv_create(e, "limited",
                        "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":"
                        "\"%s\"},\"edge\":{\"limits\":{\"rps\":1,\"burst\":1},"
                        "\"cors\":{\"allowOrigins\":[\"" ORIGIN "\"]}}}",
                        dir),
              201);
    CHECK_INT(sv_create(e, "private",
                        "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":"
                        "\"%s\"},\"edge\":{\"auth\":\"authenticated\","
                        "\"cors\":{\"allowOrigins\":[\"" ORIGIN "\"]}}}",
                        dir),
              201);
    CHECK(sv_wait_ready(e, "limited", 10000));
    CHECK(sv_wait_ready(e, "private", 10000));
    static const char *const pre[] = {"Origin: " ORIGIN, "Access-Control-Request-Method: POST",
                                      NULL};
    static const char *const plain[] = {"Origin: " ORIGIN, NULL};

    /* Preflights take no token of the rate: the bucket's one is there after them. */
    for (int i = 0; i < 5; i++)
        CHECK_INT(dp(e, "OPTIONS", DP_PATH("limited") "/", pre), 204);
    CHECK_INT(dp(e, "GET", DP_PATH("limited") "/", plain), 200);
    dp(e, "GET", DP_PATH("limited") "/", plain);
    CHECK_DP_STATUS(429, "TooManyRequests");
    CHECK_STR(sv_header(&e->r, "Access-Control-Allow-Origin"), ORIGIN); /* shaped too */

    /* A preflight needs no token; the request itself does. */
    CHECK_INT(dp(e, "OPTIONS", DP_PATH("private") "/", pre), 204);
    CHECK_STR(sv_header(&e->r, "Access-Control-Allow-Origin"), ORIGIN);
    dp(e, "GET", DP_PATH("private") "/", plain);
    CHECK_DP_STATUS(401, "Unauthorized");
    CHECK_STR(sv_header(&e->r, "Access-Control-Allow-Origin"), ORIGIN);
    int ready = -1, total = -1;
    CHECK(sv_replicas(e, "private", &ready, &total) == 0);
    CHECK_INT(total, 0);
}

/*
 * Answers from the worker: Access-Control-Allow-Origin for an allowed
 * origin, none for another (the worker's own is replaced or removed: the
 * configuration answers for CORS); headers set, replaced and removed, on
 * the worker's answers and on funcd's own.
 */
SV_TEST(cors_and_headers)
{
    CHECK(create_shaped(e, "hdr"));
    static const char *const allowed[] = {"Origin: " ORIGIN, NULL};
    CHECK_INT(dp(e, "GET", DP_PATH("hdr") "/shape?kb=1", allowed), 200);
    CHECK_STR(sv_header(&e->r, "Access-Control-Allow-Origin"), ORIGIN);
    CHECK(lists(sv_header(&e->r, "Vary"), "Origin"));
    CHECK_STR(sv_header(&e->r, "X-Frame-Options"), "DENY");
    CHECK_STR(sv_header(&e->r, "X-Worker-Pid"), "hidden");
    CHECK_STR(sv_header(&e->r, "X-Remove-Me"), "");
    CHECK(!strstr(e->r.headers, "X-Remove-Me"));
    /* The worker's Server header, once: the gateway adds none of its own. */
    CHECK_STR(sv_header(&e->r, "Server"), "fixture/1");
    CHECK(!strcasestr(e->r.headers, "funcd\r\n"));

    static const char *const other[] = {"Origin: https://evil.example", NULL};
    CHECK_INT(dp(e, "GET", DP_PATH("hdr") "/shape?kb=1", other), 200);
    CHECK_STR(sv_header(&e->r, "Access-Control-Allow-Origin"), "");
    CHECK(lists(sv_header(&e->r, "Vary"), "Origin"));
    CHECK_INT(dp(e, "GET", DP_PATH("hdr") "/shape?kb=1", NULL), 200);
    CHECK_STR(sv_header(&e->r, "Access-Control-Allow-Origin"), "");

    /* funcd's own answer (the worker exits without one): shaped the same. */
    dp(e, "GET", DP_PATH("hdr") "/exit?code=3", allowed);
    CHECK_DP_STATUS(502, "BadGateway");
    CHECK_STR(sv_header(&e->r, "X-Frame-Options"), "DENY");
    CHECK_STR(sv_header(&e->r, "Access-Control-Allow-Origin"), ORIGIN);
}

/*
 * headers.remove and .set come last, over what the gateway itself adds:
 * a Vary of the operator's replaces the gateway's "Origin", a removed
 * Access-Control-Allow-Origin goes though CORS allowed the origin, a
 * name matches whatever its case (the worker sends "X-Remove-Me"), and
 * the Server header can go (the worker's; the gateway sends none).
 */
SV_TEST(headers_over_the_gateways)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(sv_create(e, "own",
                        "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"},"
                        "\"edge\":{\"cors\":{\"allowOrigins\":[\"" ORIGIN "\"]},"
                        "\"headers\":{\"set\":{\"Vary\":\"Cookie\"},"
                        "\"remove\":[\"ACCESS-CONTROL-ALLOW-ORIGIN\",\"x-remove-me\",\"server\"]}}}",
                        dir),
              201);
    CHECK(sv_wait_ready(e, "own", 10000));
    static const char *const allowed[] = {"Origin: " ORIGIN, NULL};
    CHECK_INT(dp(e, "GET", DP_PATH("own") "/shape?kb=1", allowed), 200);
    CHECK_STR(sv_header(&e->r, "Vary"), "Cookie");
    CHECK_STR(sv_header(&e->r, "Access-Control-Allow-Origin"), "");
    CHECK(!strstr(e->r.headers, "X-Remove-Me"));
    CHECK(!strstr(e->r.headers, "Access-Control-Allow-Origin"));
    CHECK(!strcasestr(e->r.headers, "server:")); /* the worker's removed, and none of funcd's */
}

/* A /shape answer of `kb` KiB with `query` and the request headers, its
 * body (inflated when gzip'd) compared with the fixture's. */
static const char *check_body(env *e, const char *query, size_t kb, const char *const *headers,
                              int want_gzip)
{
    static char why[256];
    char path[256];
    snprintf(path, sizeof(path), DP_PATH("gz") "/shape?kb=%zu%s", kb, query);
    if (dp(e, "GET", path, headers) != 200) {
        snprintf(why, sizeof(why), "GET %s: HTTP %ld", path, e->r.status);
        return why;
    }
    const char *ce = sv_header(&e->r, "Content-Encoding");
    if (want_gzip != (strcmp(ce, "gzip") == 0)) {
        snprintf(why, sizeof(why), "GET %s: Content-Encoding \"%s\"", path, ce);
        return why;
    }
    size_t want_len, got_len = e->r.len;
    char *want = shape_body(kb, &want_len), *got = e->r.body, *inflated = NULL;
    if (want_gzip && !(inflated = got = gunzip(e->r.body, e->r.len, &got_len))) {
        free(want);
        snprintf(why, sizeof(why), "GET %s: not a gzip body", path);
        return why;
    }
    int same = want && got_len == want_len && memcmp(got, want, want_len) == 0;
    free(want);
    free(inflated);
    if (!same)
        snprintf(why, sizeof(why), "GET %s: %zu bytes, not the %zu the worker sent", path, got_len,
                 want_len);
    else if (want_gzip && e->r.len >= want_len / 2)
        snprintf(why, sizeof(why), "GET %s: %zu bytes only gzip'd to %zu", path, want_len, e->r.len);
    else
        return NULL;
    return why;
}

#define CHECK_BODY(query, kb, hdrs, gz)                                                         \
    do {                                                                                           \
        const char *why_ = check_body(e, (query), (kb), (hdrs), (gz));                          \
        if (why_)                                                                                  \
            FAILF("%s\n%s", why_, e->r.headers);                                                   \
    } while (0)

/*
 * gzip when the client takes it and the answer is text, JSON or the like
 * and not tiny, streamed (a chunked answer too); never for an event
 * stream, an answer already encoded, a client that does not accept it, or
 * a tiny answer. Vary: Accept-Encoding whenever it could have been.
 */
SV_TEST(gzip)
{
    CHECK(create_shaped(e, "gz"));
    static const char *const gzip[] = {"Accept-Encoding: gzip, deflate", NULL};
    static const char *const none[] = {"Accept-Encoding: identity", NULL};
    static const char *const refused[] = {"Accept-Encoding: br, gzip;q=0", NULL};

    CHECK_BODY("&type=application/json", 64, gzip, 1);
    CHECK(lists(sv_header(&e->r, "Vary"), "Accept-Encoding"));
    CHECK_STR(sv_header(&e->r, "Content-Length"), "");
    CHECK_BODY("&type=text/plain&chunked=1", 300, gzip, 1); /* streamed, in two pieces */
    CHECK_BODY("&type=text/html;charset=utf-8", 3, gzip, 1);
    /* The window follows the answer's length (shape.c): each size, and the
     * same sizes again on streams a thread kept from earlier answers. */
    for (int round = 0; round < 2; round++) {
        static const size_t kbs[] = {1, 2, 5, 16, 33, 200};
        for (size_t i = 0; i < sizeof(kbs) / sizeof(kbs[0]); i++)
            CHECK_BODY("&type=application/json", kbs[i], gzip, 1);
    }

    CHECK_BODY("&type=text/event-stream", 64, gzip, 0);
    CHECK_BODY("&type=image/png", 64, gzip, 0);
    CHECK_BODY("&type=application/json", 64, none, 0);
    CHECK(lists(sv_header(&e->r, "Vary"), "Accept-Encoding"));
    CHECK_BODY("&type=application/json", 64, refused, 0);
    CHECK_BODY("&type=application/json", 64, NULL, 0);
    CHECK_BODY("&type=application/json", 0, gzip, 0); /* nothing to compress */

    /* A tiny answer the worker sent chunked, all in one write: left as it
     * is, framed once over HTTP/1.1 (chunked, or a length: never both). */
    char tiny[128];
    snprintf(tiny, sizeof(tiny), DP_PATH("gz") "/shape?bytes=100&chunked=once&type=text/plain");
    CHECK_INT(dp(e, "GET", tiny, gzip), 200);
    CHECK_STR(sv_header(&e->r, "Content-Encoding"), "");
    CHECK_INT((int)e->r.len, 100);
    CHECK(strncmp(e->r.body, "line 000000: the edge", 21) == 0);
    int te = strcasestr(e->r.headers, "\ntransfer-encoding:") != NULL;
    int cl = strcasestr(e->r.headers, "\ncontent-length:") != NULL;
    if (te && cl)
        FAILF("both Transfer-Encoding and Content-Length:\n%s", e->r.headers);

    /* Not 200 over HTTP/1.1: h2o chunks only 200s, so a compressed 404 could
     * only end by closing the connection. It goes as the worker sent it,
     * with its length, and the connection stays. */
    snprintf(tiny, sizeof(tiny), DP_PATH("gz") "/shape?kb=4&type=application/json&status=404");
    CHECK_INT(dp(e, "GET", tiny, gzip), 404);
    CHECK_STR(sv_header(&e->r, "Content-Encoding"), "");
    CHECK_STR(sv_header(&e->r, "Content-Length"), "4096");
    CHECK_INT((int)e->r.len, 4096);
    if (strcasestr(e->r.headers, "\nconnection: close"))
        FAILF("a 404 ended its keep-alive connection:\n%s", e->r.headers);

    /* Already encoded: left as the worker sent it. */
    char path[128];
    snprintf(path, sizeof(path), DP_PATH("gz") "/shape?kb=8&type=text/plain&encoding=br");
    CHECK_INT(dp(e, "GET", path, gzip), 200);
    CHECK_STR(sv_header(&e->r, "Content-Encoding"), "br");
    size_t want_len;
    char *want = shape_body(8, &want_len);
    CHECK(want != NULL);
    int same = e->r.len == want_len && memcmp(e->r.body, want, want_len) == 0;
    free(want);
    CHECK(same);

}

/* One gzip'd /shape answer of function gz: `kb` KiB of text, or of letters;
 * its body checked against the fixture's. The compressed size, or 0 (with
 * *why) when the answer is not the gzip'd body. */
static size_t gz_answer(env *e, size_t kb, int letters, const char *chunked, const char **why)
{
    static char msg[256];
    static const char *const gzip[] = {"Accept-Encoding: gzip", NULL};
    char path[256];
    snprintf(path, sizeof(path), DP_PATH("gz") "/shape?kb=%zu&type=text/plain%s%s", kb,
             letters ? "&fill=letters" : "", chunked ? chunked : "");
    *why = msg;
    if (dp(e, "GET", path, gzip) != 200 || strcmp(sv_header(&e->r, "Content-Encoding"), "gzip")) {
        snprintf(msg, sizeof(msg), "GET %s: HTTP %ld, Content-Encoding \"%s\"", path, e->r.status,
                 sv_header(&e->r, "Content-Encoding"));
        return 0;
    }
    size_t want_len = kb * 1024, got_len = 0;
    char *want = shape_body_make(want_len, letters), *got = gunzip(e->r.body, e->r.len, &got_len);
    int same = want && got && got_len == want_len && memcmp(got, want, want_len) == 0;
    free(want);
    free(got);
    if (!same) {
        snprintf(msg, sizeof(msg), "GET %s: %zu bytes inflated, not the %zu the worker sent", path,
                 got_len, want_len);
        return 0;
    }
    *why = NULL;
    return e->r.len;
}

#define GZ_ANSWER(var, kb, letters, chunked)                                                      \
    do {                                                                                           \
        const char *why_;                                                                          \
        if (!((var) = gz_answer(e, (kb), (letters), (chunked), &why_)))                            \
            FAILF("%s", why_);                                                                     \
    } while (0)

/* The platform of gzip_learns has one gateway thread: the learning is per
 * thread, and the test counts answers. */
static funcd_option *one_gateway_thread(void)
{
    setenv("FUNCD_GATEWAY_THREADS", "1", 1);
    return NULL;
}

/*
 * The gateway thread learns Huffman tables from a function's answers
 * (shape.c, ADR 0062): the first answers go with ISA-L's default tables,
 * then answers like them come out clearly smaller. When the function's
 * answers change to something its tables code badly (letters, after text),
 * an answer is never larger than itself stored, the next round goes back to
 * the default tables (smaller), and the round after to tables learned from
 * the letters (smaller still). Streams never use learned tables: letters
 * streamed right after the text was learned do not grow. Each step is
 * allowed a few rounds of 1024 answers.
 */
SV_TEST_WITH(gzip_learns, one_gateway_thread(), NULL)
{
    CHECK(create_shaped(e, "gz"));
    /* a function samples once its place lasted 64 answers, learns from 8:
     * answer 8 is coded with the default tables, answer 128 with learned ones */
    size_t early = 0, size = 0;
    for (int n = 1; n <= 128; n++) {
        GZ_ANSWER(size, 4, 0, NULL);
        if (n == 8)
            early = size;
    }
    if (size * 10 >= early * 9)
        FAILF("128 answers of the same text: %zu bytes, the 8th %zu (want 10%% fewer)", size,
              early);
    /* The function updated (a longer timeout: the same workers, its route set
     * again, as every reconcile does): what the thread learned goes on. */
    size_t learned = size;
    long put = 0;
    for (int i = 0; i < 20 && put != 200; i++) {
        CHECK_INT(env_req(e, "GET", FN_PATH("gz"), DEV_TOKEN, NULL), 200);
        cJSON *fn = cJSON_Duplicate(e->r.json, 1);
        cJSON_AddStringToObject(cJSON_GetObjectItem(fn, "spec"), "timeout", "31s");
        char *text = cJSON_PrintUnformatted(fn);
        cJSON_Delete(fn);
        put = env_req(e, "PUT", FN_PATH("gz"), ADMIN_TOKEN, text); /* a host path */
        free(text);
        if (put != 409)
            break;
    }
    CHECK_INT(put, 200);
    CHECK(sv_wait_ready(e, "gz", 10000));
    GZ_ANSWER(size, 4, 0, NULL);
    if (size != learned)
        FAILF("after an update that set the route again: %zu bytes, learned %zu", size, learned);
    /* a streamed answer: two pieces, a sync flush between */
    size_t streamed;
    GZ_ANSWER(streamed, 16, 0, "&chunked=1");
    GZ_ANSWER(size, 16, 1, "&chunked=1"); /* letters, streamed: the default tables */
    if (size > 16384 + 128)
        FAILF("16 KiB of letters streamed after learning text: %zu bytes", size);

    /* letters now: coded with the text's tables they would grow; stored instead */
    size_t stored;
    GZ_ANSWER(stored, 16, 1, NULL);
    if (stored < 16384 || stored > 16384 + 64)
        FAILF("letters with tables learned from text: %zu bytes (want stored, 16384-16448)", stored);
    size_t by_default = stored, own = stored;
    for (int i = 0; i < 4 * 1024 && own >= by_default; i++) {
        GZ_ANSWER(size, 16, 1, NULL);
        if (by_default == stored && size < stored)
            by_default = own = size; /* the default tables' round */
        else if (size < by_default)
            own = size; /* tables learned from the letters */
    }
    if (by_default >= stored || own >= by_default)
        FAILF("letters: %zu stored, then %zu, then %zu bytes (want each smaller)", stored,
              by_default, own);
}

int main(int argc, char **argv)
{
    sv_init();
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    SV_RUN(only, ran, preflight);
    SV_RUN(only, ran, preflight_before_edge);
    SV_RUN(only, ran, cors_and_headers);
    SV_RUN(only, ran, headers_over_the_gateways);
    SV_RUN(only, ran, gzip);
    SV_RUN(only, ran, gzip_learns);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no test case named %s\n", only);
        return 1;
    }
    return HARNESS_END();
}
