/*
 * The edge's limits, end to end (docs/edge.md, "Limits"): 413 for a body
 * over spec.edge.limits.maxBodyBytes (Content-Length and chunked), 429
 * with Retry-After once the token bucket is empty, 503 with Retry-After at
 * the in-flight ceiling. A refused request never starts a worker: each case
 * checks that status.replicas and the worker processes stay as they were
 * (0 for 413 and 429, at zero replicas).
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../harness.h"
#include "test_serving_common.h"


/* A POST of `len` bytes to `path`. */
static long post_bytes(env *e, const char *path, size_t len)
{
    char *body = malloc(len + 1);
    if (!body)
        return -1;
    memset(body, 'b', len);
    body[len] = '\0';
    long code = e2e_http_send(e->dp, "POST", path, NULL, NULL, body, len, &e->r);
    free(body);
    return code;
}

/* Sends `head` and then `chunks` chunks of `chunk` bytes with a chunked
 * body on a new connection to the data plane; returns the status of the
 * answer (0 when none). */
static char raw_answer[512]; /* the last answer raw_chunked read */

static int raw_chunked(env *e, const char *path, int chunks, size_t chunk)
{
    const char *hp = e->dp_base + strlen("http://");
    const char *colon = strrchr(hp, ':');
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    char head[512];
    int n = snprintf(head, sizeof(head),
                     "POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                     "Connection: close\r\n\r\n",
                     path);
    int ok = send(fd, head, (size_t)n, MSG_NOSIGNAL) == n;
    char *data = malloc(chunk);
    for (int i = 0; ok && data && i < chunks; i++) {
        char size[32];
        int sn = snprintf(size, sizeof(size), "%zx\r\n", chunk);
        memset(data, 'c', chunk);
        ok = send(fd, size, (size_t)sn, MSG_NOSIGNAL) == sn &&
             send(fd, data, chunk, MSG_NOSIGNAL) == (ssize_t)chunk &&
             send(fd, "\r\n", 2, MSG_NOSIGNAL) == 2;
    }
    free(data);
    if (ok)
        send(fd, "0\r\n\r\n", 5, MSG_NOSIGNAL);
    char resp[512] = "";
    size_t got = 0;
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    while (got < sizeof(resp) - 1) {
        ssize_t r = recv(fd, resp + got, sizeof(resp) - 1 - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    resp[got] = '\0';
    memcpy(raw_answer, resp, got + 1);
    close(fd);
    int status = 0;
    if (sscanf(resp, "HTTP/1.1 %d", &status) != 1)
        status = 0;
    return status;
}

/* A connection to the data plane (-1 on failure), with a receive timeout. */
static int dp_connect(env *e)
{
    const char *colon = strrchr(e->dp_base, ':');
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* Sends `req` and reads one answer (head and Content-Length body); its
 * status, or 0 when none came within 10 s. */
static int exchange(int fd, const char *req)
{
    if (send(fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req))
        return 0;
    char buf[8192];
    size_t got = 0;
    for (;;) {
        ssize_t r = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
        if (r <= 0)
            return 0;
        got += (size_t)r;
        buf[got] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        const char *cl = strcasestr(buf, "content-length:");
        if (end && cl && got >= (size_t)(end + 4 - buf) + (size_t)atol(cl + 15))
            break;
        if (got == sizeof(buf) - 1)
            return 0;
    }
    int status = 0;
    return sscanf(buf, "HTTP/1.1 %d", &status) == 1 ? status : 0;
}

/* The cap applies before the body is read: a head whose Content-Length is
 * over it is answered 413 with no byte of the body sent, on a keep-alive
 * connection's later request too (h2o alone would wait for the body). */
SV_TEST(content_length_refused_before_the_body)
{
    CHECK(sv_native(e, "capped", "\"edge\":{\"limits\":{\"maxBodyBytes\":\"1Ki\"}}") == 0);
    int fd = dp_connect(e);
    CHECK(fd >= 0);
    static const char big[] = "POST /fn/default/capped/x HTTP/1.1\r\nHost: x\r\n"
                              "Content-Length: 10485760\r\n\r\n";
    int first = exchange(fd, big);
    close(fd);
    CHECK_INT(first, 413);
    CHECK_INT(sv_worker_count(e, "capped"), 0);
    /* The second and third request of one connection. */
    fd = dp_connect(e);
    CHECK(fd >= 0);
    int small = exchange(fd, "POST /fn/default/capped/x HTTP/1.1\r\nHost: x\r\n"
                             "Content-Length: 2\r\n\r\nhi");
    int second = small == 200 ? exchange(fd, "GET /fn/default/capped/x HTTP/1.1\r\nHost: x\r\n\r\n")
                              : 0;
    int third = second == 200 ? exchange(fd, big) : 0;
    close(fd);
    CHECK_INT(small, 200);
    CHECK_INT(second, 200);
    CHECK_INT(third, 413);
}

/* A body over the function's cap: 413 (JSON Status), never a worker; a
 * body under it goes through. */
SV_TEST(body_over_the_cap_is_413)
{
    CHECK(sv_native(e, "capped", "\"edge\":{\"limits\":{\"maxBodyBytes\":\"1Ki\"}}") == 0);
    CHECK_INT(sv_worker_count(e, "capped"), 0);
    CHECK_INT(post_bytes(e, DP_PATH("capped") "/x", 1025), 413);
    CHECK_STATUS(413, "RequestEntityTooLarge", NULL);
    CHECK(strstr(jstr(e->r.json, "message"), "maxBodyBytes"));
    CHECK_STR(sv_header(&e->r, "connection"), "close"); /* answered from the head */
    /* A chunked body crossing the cap. */
    CHECK_INT(raw_chunked(e, DP_PATH("capped") "/x", 3, 512), 413);
    env_sleep_ms(300);
    CHECK_INT(sv_worker_count(e, "capped"), 0);
    /* At the cap: served (and now there is a worker). */
    CHECK_INT(post_bytes(e, DP_PATH("capped") "/x", 1024), 200);
    CHECK_INT((int)strlen(jstr(e->r.json, "body")), 1024);
    CHECK_INT(raw_chunked(e, DP_PATH("capped") "/x", 2, 512), 200);
}

/* 4 KiB of a body, then the upload pauses: the rest never comes. */
static size_t give_4k(char *buf, size_t size, size_t n, void *payload)
{
    size_t *given = payload;
    if (*given >= 4096)
        return CURL_READFUNC_PAUSE;
    size_t len = size * n < 4096 - *given ? size * n : 4096 - *given;
    memset(buf, 's', len);
    *given += len;
    return len;
}

static size_t drop_body(char *data, size_t size, size_t n, void *payload)
{
    return size * n;
}

/* The final answer's head is all the test wants: the transfer ends there
 * (the upload would otherwise wait for the rest of its body). */
static size_t end_at_head(char *data, size_t size, size_t n, void *payload)
{
    long status = 0;
    curl_easy_getinfo((CURL *)payload, CURLINFO_RESPONSE_CODE, &status);
    return status >= 200 && size * n == 2 && memcmp(data, "\r\n", 2) == 0 ? 0 : size * n;
}

/*
 * A POST through libcurl whose body has no length (chunked over HTTP/1.1)
 * and never ends: 4 KiB, then the upload waits. `version`: a
 * CURL_HTTP_VERSION_*; `expect`: send Expect: 100-continue. Returns the
 * status answered (0: none within 20 s).
 */
static long streamed_upload(env *e, long version, int expect)
{
    char url[256];
    snprintf(url, sizeof(url), "%s" DP_PATH("capped") "/x", e->dp_base);
    CURL *c = curl_easy_init();
    struct curl_slist *hl = curl_slist_append(NULL, expect ? "Expect: 100-continue" : "Expect:");
    hl = curl_slist_append(hl, "Transfer-Encoding: chunked");
    size_t given = 0;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, give_4k);
    curl_easy_setopt(c, CURLOPT_READDATA, &given);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, drop_body);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, end_at_head);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, c);
    curl_easy_setopt(c, CURLOPT_HTTP_VERSION, version);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 20000L);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (status != 413)
        fprintf(stderr, "  POST %s (HTTP version %ld, expect %d): %s, status %ld\n", url, version,
                expect, curl_easy_strerror(rc), status);
    curl_easy_cleanup(c);
    curl_slist_free_all(hl);
    return status;
}

/* A body of unknown length (chunked HTTP/1.1, with and without Expect:
 * 100-continue) is answered 413 as soon as what came of it passes the
 * cap, though the client has not finished it; no worker starts. */
SV_TEST(streamed_body_over_the_cap_is_413)
{
    CHECK(sv_native(e, "capped", "\"edge\":{\"limits\":{\"maxBodyBytes\":\"1Ki\"}}") == 0);
    CHECK_INT(streamed_upload(e, CURL_HTTP_VERSION_1_1, 0), 413);
    CHECK_INT(streamed_upload(e, CURL_HTTP_VERSION_1_1, 1), 413);
    env_sleep_ms(300);
    CHECK_INT(sv_worker_count(e, "capped"), 0);
}

/* Reads a whole answer body into a funcd_buf. */
static size_t keep_body(char *data, size_t size, size_t n, void *payload)
{
    funcd_buf_append(payload, data, size * n);
    return size * n;
}

/*
 * HTTP/2 (h2c with prior knowledge: the same h2o code as h2 over TLS). h2o
 * 2.2.5 buffers an HTTP/2 request's body and calls the gateway only at its
 * END_STREAM, so the cap is checked then: a body over maxBodyBytes is 413
 * with the JSON Status once it has all come (not from its head, as over
 * HTTP/1.1; docs/edge.md, "Bodies"), and never reaches a worker.
 */
SV_TEST(h2_body_over_the_cap_is_413)
{
    CHECK(sv_native(e, "capped", "\"edge\":{\"limits\":{\"maxBodyBytes\":\"1Ki\"}}") == 0);
    char url[256];
    snprintf(url, sizeof(url), "%s" DP_PATH("capped") "/x", e->dp_base);
    size_t len = 65536;
    char *body = malloc(len);
    CHECK(body != NULL);
    memset(body, 'b', len);
    funcd_buf got = FUNCD_BUF_INIT;
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, keep_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &got);
    curl_easy_setopt(c, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 20000L);
    CURLcode rc = curl_easy_perform(c);
    long status = 0, version = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(c, CURLINFO_HTTP_VERSION, &version);
    curl_easy_cleanup(c);
    free(body);
    if (rc != CURLE_OK)
        fprintf(stderr, "  h2 POST %s: %s\n", url, curl_easy_strerror(rc));
    CHECK_INT((int)rc, CURLE_OK);
    CHECK_INT((int)version, CURL_HTTP_VERSION_2_0);
    CHECK_INT((int)status, 413);
    funcd_buf_append(&got, "", 1);
    CHECK(strstr(got.data, "\"reason\":\"RequestEntityTooLarge\""));
    CHECK(strstr(got.data, "maxBodyBytes"));
    funcd_buf_free(&got);
    env_sleep_ms(300);
    CHECK_INT(sv_worker_count(e, "capped"), 0);
}

/* maxBodyBytes 0 is off: only the gateway's own 64 MiB cap stays. */
SV_TEST(zero_cap_is_off)
{
    CHECK(sv_native(e, "uncapped", "\"edge\":{\"limits\":{\"maxBodyBytes\":0}}") == 0);
    CHECK_INT(post_bytes(e, DP_PATH("uncapped") "/x", 200000), 200);
}

/* An empty bucket: 429 with Retry-After and a JSON Status, at zero
 * replicas, and still zero after. The bucket (1 per second, bursts of 1)
 * is emptied by chunked bodies over the cap (the rate is checked before
 * the buffered body is, so they take tokens without reaching a worker). */
static int drain_until_429(env *e, const char *path)
{
    int code = 0;
    for (int i = 0; i < 50 && code != 429; i++) {
        code = raw_chunked(e, path, 1, 64);
        if (code != 413 && code != 429)
            return code;
    }
    return code;
}

SV_TEST(rate_over_the_bucket_is_429)
{
    CHECK(sv_native(e, "rated", "\"edge\":{\"limits\":{\"rps\":1,\"burst\":1,\"maxBodyBytes\":16}}") ==
          0);
    CHECK_INT(drain_until_429(e, DP_PATH("rated") "/x"), 429);
    CHECK(strstr(raw_answer, "\"reason\":\"TooManyRequests\""));
    CHECK(strstr(raw_answer, "\"code\":429"));
    const char *ra = strcasestr(raw_answer, "\r\nretry-after:");
    CHECK(ra);
    int retry = atoi(ra + 14);
    CHECK(retry >= 1 && retry <= 2);
    CHECK(strcasestr(raw_answer, "\r\nx-funcd-invocation-id:"));
    env_sleep_ms(300);
    CHECK_INT(sv_worker_count(e, "rated"), 0);
    /* Once a token is back, a request goes through. */
    env_sleep_ms(1100);
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("rated") "/x", NULL), 200);
}

/* The ceiling on requests in flight: 503 with Retry-After while one is
 * in flight, and that request does not start the second worker it would
 * otherwise have (concurrency 1, up to 2 replicas). */
SV_TEST(in_flight_ceiling_is_503)
{
    CHECK(sv_native(e, "narrow", "\"scaling\":{\"concurrency\":1,\"maxReplicas\":2},"
                               "\"edge\":{\"limits\":{\"maxInFlight\":1}}") == 0);
    CHECK_INT(sv_worker_count(e, "narrow"), 0);
    sv_call slow = {.method = "GET"};
    snprintf(slow.path, sizeof(slow.path), "%s", DP_PATH("narrow") "/sleep?ms=3000");
    sv_batch *b = sv_batch_start(e->dp_base, &slow, 1);
    CHECK(b);
    int settled = 0;
    for (int i = 0; i < 200 && !settled; i++) { /* the slow one is on its worker */
        env_sleep_ms(20);
        settled = sv_worker_count(e, "narrow") == 1;
    }
    long code = sv_invoke(e, "GET", DP_PATH("narrow") "/x", NULL);
    int retry = atoi(sv_header(&e->r, "retry-after"));
    const char *why = status_problem(&e->r, 503, "ServiceUnavailable", NULL);
    const char *message = jstr(e->r.json, "message");
    env_sleep_ms(300);
    int workers = sv_worker_count(e, "narrow");
    sv_batch_join(b);
    long slow_code = slow.r.status;
    e2e_resp_free(&slow.r);
    CHECK(settled);
    CHECK_INT(code, 503);
    if (why)
        FAILF("%s: %.300s", why, e->r.body);
    CHECK(message && strstr(message, "maxInFlight"));
    CHECK_INT(retry, 1);
    CHECK_INT(workers, 1);
    CHECK_INT(slow_code, 200);
    /* The slow one is done: room again. */
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("narrow") "/x", NULL), 200);
}

/* Per client, with the daemon's defaults: each client address has its own
 * bucket (here there is one address, so the function's bucket behaves the
 * same), and a spec without limits takes the daemon's. */
static void per_client_body(env *e);
TEST(per_client_defaults)
{
    env e_;
    if (env_up_with(&e_, NULL, funcd_with_edge_limits(1, 1, 16, 0),
                    funcd_with_edge_limit_per_client(1), NULL) < 0) {
        env_down(&e_);
        sv_cleanup();
        FAILF("cannot start a platform: %s", funcd_error_last()->message);
    }
    per_client_body(&e_);
    env_down(&e_);
    sv_cleanup();
    char left_[512];
    if (sv_children(left_, sizeof(left_)))
        FAILF("processes left behind after the platform was freed: %s", left_);
}

static void per_client_body(env *e)
{
    CHECK(sv_native(e, "plain", "\"timeout\":\"30s\"") == 0);
    CHECK_INT(drain_until_429(e, DP_PATH("plain") "/x"), 429);
    CHECK(strstr(raw_answer, "from one client"));
    CHECK_INT(sv_worker_count(e, "plain"), 0);
}

int main(int argc, char **argv)
{
    sv_init();
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    SV_RUN(only, ran, body_over_the_cap_is_413);
    SV_RUN(only, ran, streamed_body_over_the_cap_is_413);
    SV_RUN(only, ran, h2_body_over_the_cap_is_413);
    SV_RUN(only, ran, zero_cap_is_off);
    SV_RUN(only, ran, content_length_refused_before_the_body);
    SV_RUN(only, ran, rate_over_the_bucket_is_429);
    SV_RUN(only, ran, in_flight_ceiling_is_503);
    SV_RUN(only, ran, per_client_defaults);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no test case named %s\n", only);
        return 1;
    }
    return HARNESS_END();
}
