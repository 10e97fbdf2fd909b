/*
 * The Bearer token challenge, end to end against a small registry served by
 * this test (libevent's evhttp on 127.0.0.1, same loop as the client): it
 * answers /v2/ requests without a current token with
 *   401 WWW-Authenticate: Bearer realm="http://ADDR/token",service="fake",scope="repository:app:pull"
 * and its /token endpoint hands out tokens for Basic credentials (GET) or an
 * identity token (POST, refresh-token grant). Docker's registry needs a JWT
 * token server for this, so the protocol is played here instead.
 */
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <mbedtls/base64.h>
#include <mbedtls/sha256.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include "funcd/common.h"
#include "harness.h"
#include "oci/oci.h"
#include "pull.h"
#include "util/misc.h"

static struct event_base *loop;
static char work[256], addr[64], cdn_addr[64];

typedef struct fake {
    char manifest[1024], config[256];
    unsigned char layer[50000];
    char manifest_digest[72], config_digest[72], layer_digest[72];
    int generation;              /* bump to revoke every token */
    int token_gets, token_posts; /* requests to /token */
    int unauthorized;            /* 401s sent on /v2/ */
    char last_scope[128], last_service[64];
    int redirect_layer;           /* the layer's GET goes to the "CDN" (cdn_serve) */
    int cdn_tokens;               /* requests to the CDN's /token */
    char cdn_token_auth[128];     /* the Authorization header of the last one */
} fake;

static fake srv;

static void digest_of(const void *data, size_t len, char out[72])
{
    unsigned char sum[32];
    mbedtls_sha256_ret(data, len, sum, 0);
    strcpy(out, "sha256:");
    for (int i = 0; i < 32; i++)
        snprintf(out + 7 + 2 * i, 3, "%02x", sum[i]);
}

static void fake_init(void)
{
    for (size_t i = 0; i < sizeof(srv.layer); i++)
        srv.layer[i] = (unsigned char)(i * 7 + 3);
    digest_of(srv.layer, sizeof(srv.layer), srv.layer_digest);
#if defined(__aarch64__)
    const char *arch = "arm64";
#else
    const char *arch = "amd64";
#endif
    snprintf(srv.config, sizeof(srv.config),
             "{\"architecture\":\"%s\",\"os\":\"linux\",\"config\":{\"Entrypoint\":[\"/app\"]}}", arch);
    digest_of(srv.config, strlen(srv.config), srv.config_digest);
    snprintf(srv.manifest, sizeof(srv.manifest),
             "{\"schemaVersion\":2,\"mediaType\":\"%s\",\"config\":{\"mediaType\":"
             "\"application/vnd.oci.image.config.v1+json\",\"digest\":\"%s\",\"size\":%zu},"
             "\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\","
             "\"digest\":\"%s\",\"size\":%zu}]}",
             FUNCD_OCI_MT_OCI_MANIFEST, srv.config_digest, strlen(srv.config), srv.layer_digest,
             sizeof(srv.layer));
    digest_of(srv.manifest, strlen(srv.manifest), srv.manifest_digest);
}

static void reply(struct evhttp_request *req, int code, const char *type, const void *body,
                  size_t len)
{
    struct evbuffer *b = evbuffer_new();
    evbuffer_add(b, body, len);
    if (type)
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", type);
    evhttp_send_reply(req, code, code == 200 ? "OK" : "No", b);
    evbuffer_free(b);
}

static void current_token(char *out, size_t n)
{
    snprintf(out, n, "tok-%d", srv.generation);
}

static void serve_token(struct evhttp_request *req, const char *uri)
{
    struct evkeyvalq q;
    char tok[64], body[128];
    current_token(tok, sizeof(tok));
    int ok = 0;
    if (evhttp_request_get_command(req) == EVHTTP_REQ_POST) {
        srv.token_posts++;
        struct evbuffer *in = evhttp_request_get_input_buffer(req);
        size_t len = evbuffer_get_length(in);
        char *form = calloc(1, len + 2);
        evbuffer_copyout(in, form, len);
        ok = strstr(form, "grant_type=refresh_token") && strstr(form, "refresh_token=rt-good") &&
             strstr(form, "scope=repository%3Aapp%3Apull");
        free(form);
        snprintf(body, sizeof(body), "{\"access_token\":\"%s\",\"expires_in\":300}", tok);
    } else {
        srv.token_gets++;
        const char *query = strchr(uri, '?');
        evhttp_parse_query_str(query ? query + 1 : "", &q);
        const char *scope = evhttp_find_header(&q, "scope"), *service = evhttp_find_header(&q, "service");
        snprintf(srv.last_scope, sizeof(srv.last_scope), "%s", scope ? scope : "");
        snprintf(srv.last_service, sizeof(srv.last_service), "%s", service ? service : "");
        evhttp_clear_headers(&q);
        const char *auth = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
        unsigned char want[64];
        size_t wl;
        mbedtls_base64_encode(want, sizeof(want), &wl, (const unsigned char *)"alice:pw", 8);
        ok = auth && strncmp(auth, "Basic ", 6) == 0 && strcmp(auth + 6, (char *)want) == 0;
        snprintf(body, sizeof(body), "{\"token\":\"%s\",\"expires_in\":300}", tok);
    }
    if (!ok) {
        reply(req, 401, "application/json", "{}", 2);
        return;
    }
    reply(req, 200, "application/json", body, strlen(body));
}

static void serve(struct evhttp_request *req, void *arg)
{
    const char *uri = evhttp_request_get_uri(req);
    if (strncmp(uri, "/token", 6) == 0) {
        serve_token(req, uri);
        return;
    }
    char want[80], tok[64];
    current_token(tok, sizeof(tok));
    snprintf(want, sizeof(want), "Bearer %s", tok);
    const char *auth = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    if (!auth || strcmp(auth, want) != 0) {
        char challenge[256];
        snprintf(challenge, sizeof(challenge),
                 "Bearer realm=\"http://%s/token\",service=\"fake\",scope=\"repository:app:pull\"",
                 addr);
        evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate", challenge);
        srv.unauthorized++;
        reply(req, 401, "application/json", "{}", 2);
        return;
    }
    char path[200];
    if (strcmp(uri, "/v2/app/manifests/1") == 0 ||
        (snprintf(path, sizeof(path), "/v2/app/manifests/%s", srv.manifest_digest),
         strcmp(uri, path) == 0)) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Docker-Content-Digest",
                          srv.manifest_digest);
        reply(req, 200, FUNCD_OCI_MT_OCI_MANIFEST, srv.manifest, strlen(srv.manifest));
        return;
    }
    snprintf(path, sizeof(path), "/v2/app/blobs/%s", srv.config_digest);
    if (strcmp(uri, path) == 0) {
        reply(req, 200, "application/octet-stream", srv.config, strlen(srv.config));
        return;
    }
    snprintf(path, sizeof(path), "/v2/app/blobs/%s", srv.layer_digest);
    if (strcmp(uri, path) == 0 && srv.redirect_layer) {
        char to[128];
        snprintf(to, sizeof(to), "http://%s/blob", cdn_addr);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Location", to);
        reply(req, 307, NULL, "", 0);
        return;
    }
    if (strcmp(uri, path) == 0) {
        reply(req, 200, "application/octet-stream", srv.layer, sizeof(srv.layer));
        return;
    }
    reply(req, 404, "application/json", "{}", 2);
}

/* Where a registry redirects blob downloads (a CDN, a bucket): it asks for
 * a token of its own realm. */
static void cdn_serve(struct evhttp_request *req, void *arg)
{
    const char *uri = evhttp_request_get_uri(req);
    if (strncmp(uri, "/token", 6) == 0) {
        const char *auth = evhttp_find_header(evhttp_request_get_input_headers(req),
                                              "Authorization");
        srv.cdn_tokens++;
        snprintf(srv.cdn_token_auth, sizeof(srv.cdn_token_auth), "%s", auth ? auth : "");
        reply(req, 200, "application/json", "{\"token\":\"cdn\"}", 15);
        return;
    }
    char challenge[200];
    snprintf(challenge, sizeof(challenge), "Bearer realm=\"http://%s/token\",service=\"cdn\"",
             cdn_addr);
    evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate", challenge);
    reply(req, 401, "application/json", "{}", 2);
}

static funcd_oci_client *new_client(void)
{
    const char *insecure[] = {addr, cdn_addr, NULL};
    return new_client_of(loop, work, insecure);
}

static void pull(funcd_oci_client *c, const char *secret, result *r)
{
    char ref[128];
    snprintf(ref, sizeof(ref), "%s/app:1", addr);
    pull_on(loop, c, ref, secret, r);
}

static void secret_for(char *out, size_t n, const char *user_pass)
{
    unsigned char b64[128];
    size_t len;
    mbedtls_base64_encode(b64, sizeof(b64), &len, (const unsigned char *)user_pass, strlen(user_pass));
    snprintf(out, n, "{\"auths\":{\"%s\":{\"auth\":\"%s\"}}}", addr, b64);
}

/* One token serves the manifest and both blobs. */
TEST(bearer_token_with_basic_credentials)
{
    char secret[256];
    secret_for(secret, sizeof(secret), "alice:pw");
    funcd_oci_client *c = new_client();
    CHECK(c);
    int gets = srv.token_gets;
    result r;
    pull(c, secret, &r);
    uint64_t token_requests = funcd_oci_client_stats(c)->token_requests;
    int ok = r.img && strcmp(r.img->digest, srv.manifest_digest) == 0 && r.img->n_layers == 1 &&
             strcmp(r.img->entrypoint[0], "/app") == 0;
    funcd_oci_image_free(r.img);
    funcd_oci_client_free(c);
    CHECK_INT(r.rc, 0);
    CHECK(ok);
    CHECK_INT(srv.token_gets - gets, 1);
    CHECK_INT(token_requests, 1);
    CHECK_STR(srv.last_scope, "repository:app:pull");
    CHECK_STR(srv.last_service, "fake");
}

/* A revoked token: 401, one fresh token, one retry. */
TEST(expired_token_is_renewed_once)
{
    char secret[256];
    secret_for(secret, sizeof(secret), "alice:pw");
    funcd_oci_client *c = new_client();
    CHECK(c);
    result r1, r2;
    pull(c, secret, &r1);
    funcd_oci_image_free(r1.img);
    srv.generation++;
    int gets = srv.token_gets;
    pull(c, secret, &r2); /* manifest by tag: the cached token is refused */
    funcd_oci_image_free(r2.img);
    uint64_t token_requests = funcd_oci_client_stats(c)->token_requests;
    funcd_oci_client_free(c);
    CHECK_INT(r1.rc, 0);
    CHECK_INT(r2.rc, 0);
    CHECK_INT(srv.token_gets - gets, 1);
    CHECK_INT(token_requests, 2);
}

TEST(token_service_refuses_wrong_password)
{
    char secret[256], want[128];
    secret_for(secret, sizeof(secret), "alice:nope");
    funcd_oci_client *c = new_client();
    CHECK(c);
    result r;
    pull(c, secret, &r);
    funcd_oci_client_free(c);
    snprintf(want, sizeof(want), "registry %s refused the credentials for app", addr);
    CHECK(r.rc < 0);
    CHECK_CONTAINS(r.msg, want);
}

TEST(identity_token_uses_refresh_grant)
{
    char secret[256];
    snprintf(secret, sizeof(secret), "{\"auths\":{\"%s\":{\"identitytoken\":\"rt-good\"}}}", addr);
    funcd_oci_client *c = new_client();
    CHECK(c);
    int posts = srv.token_posts;
    result r;
    pull(c, secret, &r);
    funcd_oci_image_free(r.img);
    funcd_oci_client_free(c);
    CHECK_INT(r.rc, 0);
    CHECK_INT(srv.token_posts - posts, 1);
}

/* A 401 from where a redirect led is not the registry's challenge: the
 * registry's credentials are not sent to the realm it names (review17: a
 * CDN that answered 401 got the registry's Basic credentials at its
 * token endpoint); the pull fails. */
TEST(no_credentials_for_a_realm_after_a_redirect)
{
    char secret[256];
    secret_for(secret, sizeof(secret), "alice:pw");
    funcd_oci_client *c = new_client();
    CHECK(c);
    srv.redirect_layer = 1;
    srv.cdn_tokens = 0;
    result r;
    pull(c, secret, &r);
    srv.redirect_layer = 0;
    funcd_oci_image_free(r.img);
    funcd_oci_client_free(c);
    CHECK(r.rc < 0);
    CHECK_INT(srv.cdn_tokens, 0);
    CHECK_STR(srv.cdn_token_auth, "");
}

/* Without credentials the token service says no: a clear message. */
TEST(anonymous_is_refused_clearly)
{
    funcd_oci_client *c = new_client();
    CHECK(c);
    result r;
    pull(c, NULL, &r);
    funcd_oci_client_free(c);
    CHECK(r.rc < 0);
    CHECK_CONTAINS(r.msg, "requires credentials for app");
}

int main(void)
{
    loop = event_base_new();
    snprintf(work, sizeof(work), "/tmp/funcd-oci-bearer-XXXXXX");
    if (!mkdtemp(work))
        return 1;
    fake_init();
    struct evhttp *http = evhttp_new(loop);
    evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD);
    struct evhttp_bound_socket *bs = evhttp_bind_socket_with_handle(http, "127.0.0.1", 0);
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    if (!bs || getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&sa, &sl) < 0)
        return 1;
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(sa.sin_port));
    evhttp_set_gencb(http, serve, NULL);
    struct evhttp *cdn = evhttp_new(loop);
    struct evhttp_bound_socket *cs = evhttp_bind_socket_with_handle(cdn, "127.0.0.1", 0);
    sl = sizeof(sa);
    if (!cs || getsockname(evhttp_bound_socket_get_fd(cs), (struct sockaddr *)&sa, &sl) < 0)
        return 1;
    snprintf(cdn_addr, sizeof(cdn_addr), "127.0.0.1:%d", ntohs(sa.sin_port));
    evhttp_set_gencb(cdn, cdn_serve, NULL);

    RUN(bearer_token_with_basic_credentials);
    RUN(expired_token_is_renewed_once);
    RUN(token_service_refuses_wrong_password);
    RUN(identity_token_uses_refresh_grant);
    RUN(anonymous_is_refused_clearly);
    RUN(no_credentials_for_a_realm_after_a_redirect);

    evhttp_free(cdn);
    evhttp_free(http);
    event_base_free(loop);
    funcd_remove_tree(work);
    return HARNESS_END();
}
