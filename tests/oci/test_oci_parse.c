/* The OCI client's parsers: references, manifests, configs, challenges, Docker config. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "funcd/common.h"
#include "harness.h"
#include "oci/oci.h"

#define D1 "sha256:1111111111111111111111111111111111111111111111111111111111111111"
#define D2 "sha256:2222222222222222222222222222222222222222222222222222222222222222"
#define D3 "sha256:3333333333333333333333333333333333333333333333333333333333333333"

static int parse_ok(const char *in, const char *reg, const char *repo, const char *tag,
                    const char *digest)
{
    funcd_oci_ref r;
    if (funcd_oci_ref_parse(&r, in) < 0) {
        fprintf(stderr, "  %s: %s\n", in, funcd_error_last()->message);
        return 0;
    }
    int ok = strcmp(r.registry, reg) == 0 && strcmp(r.repository, repo) == 0 &&
             (tag ? r.tag && strcmp(r.tag, tag) == 0 : !r.tag) &&
             (digest ? r.digest && strcmp(r.digest, digest) == 0 : !r.digest);
    if (!ok)
        fprintf(stderr, "  %s → %s %s %s %s\n", in, r.registry, r.repository,
                r.tag ? r.tag : "-", r.digest ? r.digest : "-");
    funcd_oci_ref_free(&r);
    return ok;
}

TEST(references_and_defaults)
{
    CHECK(parse_ok("alpine", "registry-1.docker.io", "library/alpine", "latest", NULL));
    CHECK(parse_ok("docker.io/alpine:3.19", "registry-1.docker.io", "library/alpine", "3.19", NULL));
    CHECK(parse_ok("index.docker.io/user/app", "registry-1.docker.io", "user/app", "latest", NULL));
    CHECK(parse_ok("ghcr.io/o/r/x:v1", "ghcr.io", "o/r/x", "v1", NULL));
    CHECK(parse_ok("localhost/app", "localhost", "app", "latest", NULL));
    CHECK(parse_ok("127.0.0.1:5000/fn/echo:1", "127.0.0.1:5000", "fn/echo", "1", NULL));
    CHECK(parse_ok("127.0.0.1:5000/fn@" D1, "127.0.0.1:5000", "fn", NULL, D1));
    CHECK(parse_ok("127.0.0.1:5000/fn:2@" D1, "127.0.0.1:5000", "fn", "2", D1));
    CHECK(parse_ok("a/b__c-d.e", "registry-1.docker.io", "a/b__c-d.e", "latest", NULL));
    funcd_oci_ref r = {0};
    const char *bad[] = {"", "Upper", "reg.io/Upper", "app:", "app:-x", "app@sha256:12", "app@md5:" D1 + 7,
                         "/app", "app/", "a//b", "a..b", "reg.io/", "app:t@" D2 "x", "a___b"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = funcd_oci_ref_parse(&r, bad[i]);
        if (rc == 0) {
            funcd_oci_ref_free(&r);
            FAILF("\"%s\" parsed", bad[i]);
        }
        CHECK_INT(rc, FUNCD_EINVAL);
    }
    CHECK_CONTAINS(funcd_error_last()->message, "a___b");
}

TEST(reference_format_round_trips)
{
    funcd_oci_ref r;
    CHECK_INT(funcd_oci_ref_parse(&r, "127.0.0.1:5000/fn:2@" D1), 0);
    char *s = funcd_oci_ref_format(&r);
    funcd_oci_ref_free(&r);
    CHECK_STR(s, "127.0.0.1:5000/fn:2@" D1);
    free(s);
    CHECK_INT(funcd_oci_ref_parse(&r, "busybox"), 0);
    s = funcd_oci_ref_format(&r);
    funcd_oci_ref_free(&r);
    CHECK_STR(s, "registry-1.docker.io/library/busybox:latest");
    free(s);
}

TEST(loopback_hosts)
{
    CHECK(funcd_oci_host_is_loopback("127.0.0.1:5000"));
    CHECK(funcd_oci_host_is_loopback("127.9.8.7"));
    CHECK(funcd_oci_host_is_loopback("localhost:80"));
    CHECK(funcd_oci_host_is_loopback("[::1]:5000"));
    CHECK(!funcd_oci_host_is_loopback("10.0.0.1:5000"));
    CHECK(!funcd_oci_host_is_loopback("127.0.0.1.evil.com:5000"));
    CHECK(!funcd_oci_host_is_loopback("localhost.evil.com"));
    CHECK(!funcd_oci_host_is_loopback("[::2]:1"));
}

static int internal(const char *text)
{
    struct sockaddr_in v4 = {.sin_family = AF_INET};
    struct sockaddr_in6 v6 = {.sin6_family = AF_INET6};
    if (inet_pton(AF_INET, text, &v4.sin_addr) == 1)
        return funcd_oci_addr_is_internal((struct sockaddr *)&v4);
    if (inet_pton(AF_INET6, text, &v6.sin6_addr) == 1)
        return funcd_oci_addr_is_internal((struct sockaddr *)&v6);
    return -1;
}

/* What a pull (and a git fetch) never connects to unless the operator named
 * the host: loopback, link-local, unspecified, multicast, the clouds'
 * metadata services, in every form an address takes (review17: the AWS
 * IPv6 metadata address and NAT64 forms of loopback went through). */
TEST(internal_addresses)
{
    const char *in[] = {"127.0.0.1", "0.0.0.0", "169.254.169.254", "224.0.0.1",
                        "255.255.255.255", "100.100.100.200", "168.63.129.16", "::1", "::",
                        "fe80::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:169.254.169.254",
                        "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "::127.0.0.1",
                        "fd00:ec2::254", "64:ff9b:1::a9fe:a9fe", "2002:a9fe:a9fe::1",
                        "64:ff9b:1:a9fe:a9:fe00:808:808", "64:ff9b:1:7f:0:100::",
                        "2002:7f00:1::"};
    const char *out[] = {"10.0.0.1", "192.168.1.1", "8.8.8.8", "100.64.0.1", "2001:db8::1",
                         "fd00::1", "64:ff9b::808:808", "::ffff:8.8.8.8",
                         "64:ff9b:1::808:808", "2002:808:808::1",
                         "64:ff9b:1:808:8:800::"};
    for (size_t i = 0; i < sizeof(in) / sizeof(*in); i++)
        if (internal(in[i]) != 1)
            FAILF("%s is not internal", in[i]);
    for (size_t i = 0; i < sizeof(out) / sizeof(*out); i++)
        if (internal(out[i]) != 0)
            FAILF("%s is internal", out[i]);
}

static const char manifest[] =
    "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
    "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"" D1
    "\",\"size\":12},\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\","
    "\"digest\":\"" D2 "\",\"size\":345},{\"mediaType\":\"application/vnd.docker.image.rootfs."
    "diff.tar.gzip\",\"digest\":\"" D3 "\",\"size\":32}]}";

TEST(image_manifest)
{
    funcd_oci_manifest m;
    CHECK_INT(funcd_oci_manifest_parse(&m, manifest, sizeof(manifest) - 1, NULL, "linux", "amd64"), 0);
    int ok = !m.is_index && strcmp(m.config.digest, D1) == 0 && m.config.size == 12 &&
             m.n_layers == 2 && strcmp(m.layers[0].digest, D2) == 0 && m.layers[0].size == 345 &&
             strcmp(m.layers[1].media_type, "application/vnd.docker.image.rootfs.diff.tar.gzip") == 0;
    funcd_oci_manifest_free(&m);
    CHECK(ok);
    /* the Content-Type wins over a body without mediaType */
    const char docker[] = "{\"schemaVersion\":2,\"config\":{\"digest\":\"" D1 "\",\"size\":1},"
                          "\"layers\":[]}";
    CHECK_INT(funcd_oci_manifest_parse(&m, docker, sizeof(docker) - 1,
                                       FUNCD_OCI_MT_DOCKER_MANIFEST "; charset=utf-8", NULL, NULL),
              0);
    CHECK_INT(m.n_layers, 0);
    funcd_oci_manifest_free(&m);
}

TEST(manifest_rejects_unsafe_digests)
{
    const char *bad[] = {
        "{\"config\":{\"digest\":\"sha256:../../etc/passwd\",\"size\":1},\"layers\":[]}",
        "{\"config\":{\"digest\":\"" D1 "\",\"size\":1},\"layers\":[{\"digest\":\"sha512:aa\",\"size\":1}]}",
        "{\"config\":{\"digest\":\"" D1 "\",\"size\":-1},\"layers\":[]}",
        "{\"config\":{\"digest\":\"" D1 "\",\"size\":1},\"layers\":{}}",
        "{\"schemaVersion\":1,\"config\":{\"digest\":\"" D1 "\",\"size\":1},\"layers\":[]}",
        "[]",
        "{}",
        "{\"config\":",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        funcd_oci_manifest m;
        int rc = funcd_oci_manifest_parse(&m, bad[i], strlen(bad[i]), NULL, "linux", "amd64");
        if (rc == 0) {
            funcd_oci_manifest_free(&m);
            FAILF("accepted %s", bad[i]);
        }
        CHECK_INT(rc, FUNCD_EINVAL);
    }
}

/* A manifest whose config has `config_size` bytes and whose layers are `layers` (JSON). */
static int parse_sizes(const char *config_size, const char *layers)
{
    char json[1024];
    snprintf(json, sizeof(json),
             "{\"schemaVersion\":2,\"config\":{\"digest\":\"" D1 "\",\"size\":%s},"
             "\"layers\":[%s]}",
             config_size, layers);
    funcd_oci_manifest m;
    int rc = funcd_oci_manifest_parse(&m, json, strlen(json), FUNCD_OCI_MT_OCI_MANIFEST, NULL,
                                      NULL);
    if (rc == 0)
        funcd_oci_manifest_free(&m);
    return rc;
}

#define LAYER(size) "{\"digest\":\"" D2 "\",\"size\":" size "}"

/* review17 M-1: what a manifest declares bounds what is downloaded, so it
 * must bound something: no empty config or layer (a size of 0 was "no
 * limit"), a config of at most 4 MiB, an image of at most 4 GiB. */
TEST(manifest_sizes_are_bounded)
{
    CHECK_INT(parse_sizes("12", LAYER("4294967284")), 0); /* exactly the limit */
    CHECK_INT(parse_sizes("12", LAYER("0")), FUNCD_EINVAL);
    CHECK_CONTAINS(funcd_error_last()->message, "layer 0");
    CHECK_CONTAINS(funcd_error_last()->message, "\"size\"");
    CHECK_INT(parse_sizes("0", LAYER("1")), FUNCD_EINVAL);
    CHECK_CONTAINS(funcd_error_last()->message, "config");
    CHECK_CONTAINS(funcd_error_last()->message, "\"size\"");
    CHECK_INT(parse_sizes("4194305", LAYER("1")), FUNCD_EINVAL); /* 4 MiB + 1 */
    CHECK_CONTAINS(funcd_error_last()->message, "config");
    CHECK_INT(parse_sizes("12", LAYER("1") "," LAYER("5368709120")), FUNCD_EINVAL);
    CHECK_CONTAINS(funcd_error_last()->message, "layer 1");
    CHECK_INT(parse_sizes("12", LAYER("3221225472") "," LAYER("3221225472")), FUNCD_EINVAL);
    CHECK_CONTAINS(funcd_error_last()->message, "4294967296");
    CHECK_INT(parse_sizes("12", LAYER("4294967285")), FUNCD_EINVAL); /* one byte over */
}

static const char index_json[] =
    "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\",\"manifests\":["
    "{\"digest\":\"" D3 "\",\"size\":5,\"platform\":{\"os\":\"unknown\",\"architecture\":\"unknown\"}},"
    "{\"digest\":\"" D1 "\",\"size\":7,\"platform\":{\"os\":\"linux\",\"architecture\":\"arm\",\"variant\":\"v6\"}},"
    "{\"digest\":\"" D2 "\",\"size\":8,\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\",\"variant\":\"v8\"}},"
    "{\"digest\":\"" D3 "\",\"size\":9,\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"}}]}";

static const char *select_for(const char *os, const char *arch, int *rc)
{
    static char digest[80];
    funcd_oci_manifest m;
    *rc = funcd_oci_manifest_parse(&m, index_json, sizeof(index_json) - 1, NULL, os, arch);
    if (*rc < 0)
        return NULL;
    snprintf(digest, sizeof(digest), "%s", m.is_index ? m.selected.digest : "not an index");
    funcd_oci_manifest_free(&m);
    return digest;
}

TEST(index_platform_selection)
{
    int rc;
    CHECK_STR(select_for("linux", "amd64", &rc), D3);
    CHECK_STR(select_for("linux", "arm64", &rc), D2);
    CHECK_STR(select_for("linux", "arm64/v8", &rc), D2);
    CHECK_STR(select_for("linux", "arm/v6", &rc), D1);
    CHECK(select_for("linux", "arm", &rc) == NULL); /* arm means v7 */
    CHECK_INT(rc, FUNCD_ENOTFOUND);
    CHECK(select_for("windows", "amd64", &rc) == NULL);
    CHECK_CONTAINS(funcd_error_last()->message, "windows/amd64");
}

TEST(image_config)
{
    const char cfg[] = "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{"
                       "\"Entrypoint\":[\"/bin/worker\",\"--x\"],\"Cmd\":null,\"Env\":[\"A=1\",\"B=2\"],"
                       "\"WorkingDir\":\"/srv\",\"User\":\"1000:1000\"},\"rootfs\":{}}";
    funcd_oci_config c;
    CHECK_INT(funcd_oci_config_parse(&c, cfg, sizeof(cfg) - 1), 0);
    int ok = strcmp(c.os, "linux") == 0 && strcmp(c.arch, "amd64") == 0 &&
             strcmp(c.entrypoint[0], "/bin/worker") == 0 && strcmp(c.entrypoint[1], "--x") == 0 &&
             !c.entrypoint[2] && !c.cmd && strcmp(c.env[1], "B=2") == 0 && !c.env[2] &&
             strcmp(c.working_dir, "/srv") == 0 && strcmp(c.user, "1000:1000") == 0;
    funcd_oci_config_free(&c);
    CHECK(ok);
    const char bad[] = "{\"config\":{\"Entrypoint\":[1]}}";
    CHECK_INT(funcd_oci_config_parse(&c, bad, sizeof(bad) - 1), FUNCD_EINVAL);
    CHECK_INT(funcd_oci_config_parse(&c, "{}", 2), 0);
    CHECK(!c.entrypoint && !c.os);
    funcd_oci_config_free(&c);
}

TEST(www_authenticate)
{
    funcd_www_authenticate w;
    CHECK_INT(funcd_www_authenticate_parse(
                  &w, "Bearer realm=\"https://auth.example.com/token\",service=\"registry.example.com\","
                      "scope=\"repository:library/alpine:pull\",error=\"insufficient_scope\""),
              0);
    int ok = strcmp(w.scheme, "Bearer") == 0 && strcmp(w.realm, "https://auth.example.com/token") == 0 &&
             strcmp(w.service, "registry.example.com") == 0 &&
             strcmp(w.scope, "repository:library/alpine:pull") == 0 &&
             strcmp(w.error, "insufficient_scope") == 0;
    funcd_www_authenticate_free(&w);
    CHECK(ok);
    CHECK_INT(funcd_www_authenticate_parse(&w, "Basic realm=\"a \\\"quoted\\\" realm\""), 0);
    ok = strcmp(w.scheme, "Basic") == 0 && strcmp(w.realm, "a \"quoted\" realm") == 0 && !w.service;
    funcd_www_authenticate_free(&w);
    CHECK(ok);
    CHECK_INT(funcd_www_authenticate_parse(&w, "bearer  realm = tok , service=svc"), 0);
    ok = strcmp(w.realm, "tok") == 0 && strcmp(w.service, "svc") == 0;
    funcd_www_authenticate_free(&w);
    CHECK(ok);
    CHECK_INT(funcd_www_authenticate_parse(&w, "Bearer realm=\"unterminated"), FUNCD_EINVAL);
    CHECK_INT(funcd_www_authenticate_parse(&w, ""), FUNCD_EINVAL);
    CHECK_INT(funcd_www_authenticate_parse(&w, "Bearer realm"), FUNCD_EINVAL);
}

TEST(docker_config_lookup)
{
    /* "dXNlcjpwYTpzcw==" is base64("user:pa:ss") */
    const char *json = "{\"auths\":{"
                       "\"https://index.docker.io/v1/\":{\"auth\":\"dXNlcjpwYTpzcw==\"},"
                       "\"127.0.0.1:5000\":{\"username\":\"u\",\"password\":\"p\"},"
                       "\"https://ghcr.io\":{\"identitytoken\":\"refresh-me\"},"
                       "\"broken.io\":{\"auth\":\"!!!\"}}}";
    char *u, *p, *t;
    CHECK_INT(funcd_docker_config_lookup(json, "registry-1.docker.io", &u, &p, &t), 0);
    int ok = u && p && strcmp(u, "user") == 0 && strcmp(p, "pa:ss") == 0 && !t;
    free(u), free(p), free(t);
    CHECK(ok);
    CHECK_INT(funcd_docker_config_lookup(json, "127.0.0.1:5000", &u, &p, &t), 0);
    ok = strcmp(u, "u") == 0 && strcmp(p, "p") == 0;
    free(u), free(p), free(t);
    CHECK(ok);
    CHECK_INT(funcd_docker_config_lookup(json, "ghcr.io", &u, &p, &t), 0);
    ok = !u && !p && t && strcmp(t, "refresh-me") == 0;
    free(u), free(p), free(t);
    CHECK(ok);
    CHECK_INT(funcd_docker_config_lookup(json, "127.0.0.1:5001", &u, &p, &t), FUNCD_ENOTFOUND);
    CHECK(!u && !p && !t);
    CHECK_INT(funcd_docker_config_lookup(json, "broken.io", &u, &p, &t), FUNCD_EINVAL);
    CHECK(!u && !p && !t);
    CHECK_INT(funcd_docker_config_lookup("not json", "x", &u, &p, &t), FUNCD_EINVAL);
}

int main(void)
{
    RUN(references_and_defaults);
    RUN(reference_format_round_trips);
    RUN(loopback_hosts);
    RUN(internal_addresses);
    RUN(image_manifest);
    RUN(manifest_rejects_unsafe_digests);
    RUN(manifest_sizes_are_bounded);
    RUN(index_platform_selection);
    RUN(image_config);
    RUN(www_authenticate);
    RUN(docker_config_lookup);
    return HARNESS_END();
}
