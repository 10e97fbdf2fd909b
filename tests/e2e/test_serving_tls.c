/*
 * TLS on an embedded platform (docs/edge.md, "TLS"): funcd_in_memory() with
 * funcd_with_tls_self_signed makes its certificate in the directory given,
 * and the real curl, trusting that certificate with --cacert, reaches both
 * listeners: the control plane (HTTP/1.1) creates a Function and reads it
 * back, the data plane serves it over HTTP/1.1 and HTTP/2 (ALPN). Without
 * --cacert curl refuses the certificate, and plain HTTP gets no answer.
 * (tests/durable/test_tls.c does the same on the daemon.)
 */
#include <sys/stat.h>

#include "../harness.h"
#include "test_serving_common.h"
#include "util/buf.h"
#include "util/misc.h"

static char tls_dir[256];

/* What a buffer holds, as a string ("" when nothing). */
#define TEXT(b) ((b).data ? (b).data : "")

/* The platform option: a self-signed certificate in a new directory. */
static funcd_option *self_signed(void)
{
    if (sv_tempdir(tls_dir, sizeof(tls_dir)) != 0)
        return NULL;
    return funcd_with_tls_self_signed(tls_dir);
}

#define CURL_OK(out, err, ...)                                                                     \
    do {                                                                                           \
        funcd_buf_reset(out);                                                                      \
        funcd_buf_reset(err);                                                                      \
        int rc_ = sv_curl((out), (err), -1, __VA_ARGS__, (const char *)NULL);                             \
        if (rc_ != 0)                                                                              \
            FAILF("curl exited %d: %.*s", rc_, (int)(err)->len, (err)->data);                      \
    } while (0)

SV_TEST_WITH(in_memory_tls, self_signed(), NULL)
{
    const char *cert = funcd_platform_tls_cert_file(e->p);
    CHECK(cert != NULL);
    CHECK(strncmp(cert, tls_dir, strlen(tls_dir)) == 0);
    struct stat st;
    CHECK(stat(cert, &st) == 0);
    CHECK(funcd_platform_tls_fingerprint(e->p) != NULL);

    char cp[200], dp[200], fn_dir[256], spec[1024];
    snprintf(cp, sizeof(cp), "https://%s", funcd_platform_addr(e->p));
    snprintf(dp, sizeof(dp), "https://%s", funcd_platform_data_plane_addr(e->p));
    CHECK(sv_fixture("native", fn_dir, sizeof(fn_dir)) == 0);
    snprintf(spec, sizeof(spec),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"hello\"},\"spec\":{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{"
             "\"path\":\"%s\"}}}",
             fn_dir);
    funcd_buf out = FUNCD_BUF_INIT, err = FUNCD_BUF_INIT;
    char url[300];

    /* The control plane, trusting the certificate: create, then read. */
    snprintf(url, sizeof(url), "%s" NS("default") "/functions", cp);
    CURL_OK(&out, &err, "--cacert", cert, "-o", "/dev/null", "-w", "%{http_code} %{http_version}",
            "-H", "Authorization: Bearer " ADMIN_TOKEN, "-H", "Content-Type: application/json",
            "--data-binary", spec, url);
    CHECK_STR(TEXT(out), "201 1.1");
    snprintf(url, sizeof(url), "%s" FN_PATH("hello"), cp);
    CURL_OK(&out, &err, "--cacert", cert, "-H", "Authorization: Bearer " ADMIN_TOKEN, url);
    CHECK(strstr(TEXT(out), "\"name\":\"hello\"") != NULL);

    /* The data plane over HTTP/1.1 and HTTP/2, once the Function is routed. */
    snprintf(url, sizeof(url), "%s" DP_PATH("hello") "/tls", dp);
    int served = 0;
    for (int64_t end = funcd_mono_ms() + 15000; !served && funcd_mono_ms() < end;) {
        CURL_OK(&out, &err, "--cacert", cert, "--http1.1", "-o", "/dev/null", "-w",
                "%{http_code}", url);
        served = strcmp(TEXT(out), "200") == 0;
        if (!served)
            env_sleep_ms(50);
    }
    CHECK(served);
    CURL_OK(&out, &err, "--cacert", cert, "--http2", "-w", "\n%{http_code} %{http_version}", url);
    const char *last = strrchr(TEXT(out), '\n');
    CHECK(last != NULL);
    CHECK_STR(last + 1, "200 2");
    CHECK(strstr(TEXT(out), "/tls") != NULL); /* the worker's echo of its path */

    /* Not trusted: curl refuses the certificate (60) on both listeners. */
    funcd_buf_reset(&out);
    funcd_buf_reset(&err);
    CHECK_INT(sv_curl(&out, &err, -1, url, (const char *)NULL), 60);
    snprintf(url, sizeof(url), "%s/healthz", cp);
    funcd_buf_reset(&err);
    CHECK_INT(sv_curl(&out, &err, -1, url, (const char *)NULL), 60);
    /* Plain HTTP to a TLS listener gets no HTTP answer. */
    snprintf(url, sizeof(url), "http://%s/healthz", funcd_platform_addr(e->p));
    funcd_buf_reset(&out);
    funcd_buf_reset(&err);
    int plain = sv_curl(&out, &err, -1, "-o", "/dev/null", "-w", "%{http_code}", url, (const char *)NULL);
    CHECK(plain != 0);
    CHECK_STR(TEXT(out), "000");
    funcd_buf_free(&out);
    funcd_buf_free(&err);
}

int main(int argc, char **argv)
{
    sv_init();
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    SV_RUN(only, ran, in_memory_tls);
    if (!ran) {
        fprintf(stderr, "no case %s\n", only);
        return 2;
    }
    return HARNESS_END();
}
