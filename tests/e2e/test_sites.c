/*
 * Sites end to end (docs/sites.md): static files from a bundle or a host
 * path, served by the gateway at /site/{ns}/{name}/ and on spec.hosts, over
 * real HTTP on a raw socket (so a test says exactly which headers and which
 * path bytes go out): the index, the 404 page, the SPA fallback, ETag and
 * If-None-Match (304), If-Modified-Since, Range (206, 416), precompressed
 * .gz siblings, HEAD, Host routing, Ready only when the index exists, and
 * paths that try to leave the site's root.
 *
 *   test_e2e_sites CASE
 */
#include "../harness.h"
#include "test_serving_common.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define WAIT_MS 20000
#define SITE_PATH(name) NS("default") "/sites/" name

/* ---- raw HTTP ------------------------------------------------------------- */

typedef struct raw_resp {
    int status;
    char head[8192]; /* the header block, lowercase names kept as sent */
    char *body;      /* malloc, NUL-terminated */
    size_t len;
} raw_resp;

static void raw_free(raw_resp *r)
{
    free(r->body);
    r->body = NULL;
}

/* One request on a new connection to the data plane: `target` exactly as
 * given (no normalization on our side), `headers` extra lines each ending
 * with "\r\n" (NULL: none; a Host line replaces the default). 0 when an
 * answer came. */
static int raw(env *e, const char *method, const char *target, const char *headers, raw_resp *r)
{
    memset(r, 0, sizeof(*r));
    const char *port = strrchr(e->dp_base, ':');
    if (!port)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port + 1))};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval tv = {30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char req[4096];
    int n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\n%s%sConnection: close\r\n\r\n", method,
                     target, headers && strstr(headers, "Host:") ? "" : "Host: 127.0.0.1\r\n",
                     headers ? headers : "");
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    funcd_buf in = FUNCD_BUF_INIT;
    char buf[65536];
    ssize_t got;
    while ((got = read(fd, buf, sizeof(buf))) > 0)
        funcd_buf_append(&in, buf, (size_t)got);
    close(fd);
    char *end = in.data ? strstr(in.data, "\r\n\r\n") : NULL;
    if (!end || sscanf(in.data, "HTTP/1.%*d %d", &r->status) != 1) {
        funcd_buf_free(&in);
        return -1;
    }
    size_t hl = (size_t)(end - in.data);
    snprintf(r->head, sizeof(r->head), "%.*s\r\n", (int)(hl < sizeof(r->head) - 3 ? hl : 0),
             in.data);
    r->len = in.len - hl - 4;
    r->body = malloc(r->len + 1);
    memcpy(r->body, end + 4, r->len);
    r->body[r->len] = '\0';
    funcd_buf_free(&in);
    return 0;
}

/* The value of header `name` ("" when absent), in a static buffer. */
static const char *hdr(const raw_resp *r, const char *name)
{
    static char out[512];
    out[0] = '\0';
    size_t nl = strlen(name);
    for (const char *p = strstr(r->head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n")) {
        const char *line = p + 2;
        if (strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
            const char *v = line + nl + 1;
            while (*v == ' ')
                v++;
            size_t vl = strcspn(v, "\r");
            snprintf(out, sizeof(out), "%.*s", (int)vl, v);
            break;
        }
    }
    return out;
}

/* A connection to the data plane (a small receive buffer when `rcvbuf` is
 * not 0, set before connecting), or -1. */
static int dp_connect(env *e, int rcvbuf)
{
    const char *port = strrchr(e->dp_base, ':');
    if (!port)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port + 1))};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (rcvbuf)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads exactly one answer (headers, then Content-Length bytes) from a
 * keep-alive connection; `pending` holds bytes read past the previous one.
 * 0 when a whole answer came. */
static int read_one(int fd, funcd_buf *pending, raw_resp *r)
{
    memset(r, 0, sizeof(*r));
    char buf[65536];
    char *end;
    while (!(end = pending->data ? memmem(pending->data, pending->len, "\r\n\r\n", 4) : NULL)) {
        ssize_t got = read(fd, buf, sizeof(buf));
        if (got <= 0)
            return -1;
        funcd_buf_append(pending, buf, (size_t)got);
    }
    size_t hl = (size_t)(end - pending->data);
    if (sscanf(pending->data, "HTTP/1.%*d %d", &r->status) != 1 || hl >= sizeof(r->head) - 3)
        return -1;
    snprintf(r->head, sizeof(r->head), "%.*s\r\n", (int)hl, pending->data);
    const char *cl = hdr(r, "content-length");
    if (!*cl)
        return -1;
    size_t want = (size_t)strtoull(cl, NULL, 10);
    while (pending->len < hl + 4 + want) {
        ssize_t got = read(fd, buf, sizeof(buf));
        if (got <= 0)
            return -1;
        funcd_buf_append(pending, buf, (size_t)got);
    }
    r->len = want;
    r->body = malloc(want + 1);
    memcpy(r->body, pending->data + hl + 4, want);
    r->body[want] = '\0';
    size_t rest = pending->len - (hl + 4 + want);
    memmove(pending->data, pending->data + hl + 4 + want, rest);
    pending->len = rest;
    return 0;
}

/* ---- sites through the control plane ------------------------------------------ */

static long put_site(env *e, const char *method, const char *token, const char *name,
                     const char *spec)
{
    char body[2048], path[256];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Site\",\"metadata\":{\"name\":\"%s\"},"
             "\"spec\":%s}",
             name, spec);
    if (strcmp(method, "POST") == 0)
        snprintf(path, sizeof(path), NS("default") "/sites");
    else
        snprintf(path, sizeof(path), NS("default") "/sites/%s", name);
    return env_req(e, method, path, token, body);
}

/* Waits until the Site's status is of its generation with Ready `want`;
 * e->r holds the last GET. */
static int wait_site(env *e, const char *name, const char *want, int timeout_ms)
{
    char path[256];
    snprintf(path, sizeof(path), NS("default") "/sites/%s", name);
    int64_t deadline = e2e_now_ms() + timeout_ms;
    do {
        if (env_req(e, "GET", path, DEV_TOKEN, NULL) == 200) {
            const cJSON *md = cJSON_GetObjectItemCaseSensitive(e->r.json, "metadata");
            const cJSON *st = cJSON_GetObjectItemCaseSensitive(e->r.json, "status");
            double gen = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(md, "generation"));
            double seen =
                cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(st, "observedGeneration"));
            const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(st, "conditions"), 0);
            if (gen == seen && c && jstr(c, "status") && strcmp(jstr(c, "status"), want) == 0)
                return 1;
        }
        env_sleep_ms(20);
    } while (e2e_now_ms() < deadline);
    return 0;
}

/* The Ready condition's `field` of the last GET (e->r). */
static const char *ready_field(env *e, const char *field)
{
    const cJSON *c = cJSON_GetArrayItem(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(e->r.json, "status"),
                                         "conditions"),
        0);
    return jstr(c, field);
}

/* Uploads a bundle of `entries` and writes its digest. 0 on success. */
static int bundle(env *e, const sv_entry *entries, size_t n, char digest[80])
{
    void *tgz;
    size_t len;
    if (sv_targz(entries, n, &tgz, &len) != 0)
        return -1;
    long st = sv_upload(e, tgz, len);
    free(tgz);
    const char *d = jstr(e->r.json, "digest");
    if ((st != 200 && st != 201) || !d)
        return -1;
    snprintf(digest, 80, "%s", d);
    return 0;
}

/* Site `name` from a bundle of entries[0..n), created and Ready: 1. */
static int deploy_bundle(env *e, const char *name, const sv_entry *entries, size_t n)
{
    char digest[80], spec[300];
    if (bundle(e, entries, n, digest) != 0)
        return 0;
    snprintf(spec, sizeof(spec), "{\"source\":{\"bundle\":\"%s\"}}", digest);
    return put_site(e, "POST", DEV_TOKEN, name, spec) == 201 && wait_site(e, name, "True", WAIT_MS);
}

static const char index_html[] = "<!doctype html><title>home</title>INDEX-PAGE\n";
static const char not_found_html[] = "<!doctype html><title>gone</title>NOT-FOUND-PAGE\n";
static const char app_js[] = "console.log('0123456789abcdefghijklmnopqrstuvwxyz');\n";
static const char style_css[] = "body { color: black; } /* plain */\n";
/* Not really gzip: the test only checks which variant was chosen. */
static const char style_css_gz[] = "GZIP-VARIANT-OF-STYLE\n";

static int web_bundle(env *e, char digest[80])
{
    const sv_entry entries[] = {
        {"index.html", index_html, 0644},        {"404.html", not_found_html, 0644},
        {"app.js", app_js, 0644},                {"css", NULL, 0755},
        {"css/style.css", style_css, 0644},      {"css/style.css.gz", style_css_gz, 0644},
        {"docs", NULL, 0755},                    {"docs/index.html", "DOCS-INDEX\n", 0644},
    };
    return bundle(e, entries, sizeof(entries) / sizeof(entries[0]), digest);
}

/* ---- cases ---------------------------------------------------------------------- */

/* The index, files with their types, validators, conditional requests,
 * ranges, HEAD, gzip siblings, Cache-Control, a directory without its '/'. */
SV_TEST(serve_files)
{
    char digest[80], spec[512];
    CHECK(web_bundle(e, digest) == 0);
    snprintf(spec, sizeof(spec),
             "{\"source\":{\"bundle\":\"%s\"},\"cache\":{\"maxAge\":3600,\"immutable\":true}}",
             digest);
    CHECK_INT(put_site(e, "POST", DEV_TOKEN, "web", spec), 201);
    CHECK(wait_site(e, "web", "True", WAIT_MS));
    CHECK_STR(ready_field(e, "reason"), "Serving");

    raw_resp r;
    CHECK(raw(e, "GET", "/site/default/web/", NULL, &r) == 0);
    CHECK_INT(r.status, 200);
    CHECK_STR(r.body, index_html);
    CHECK_CONTAINS(hdr(&r, "content-type"), "text/html");
    CHECK_STR(hdr(&r, "cache-control"), "public, max-age=3600, immutable");
    char etag[128], lm[128];
    snprintf(etag, sizeof(etag), "%s", hdr(&r, "etag"));
    snprintf(lm, sizeof(lm), "%s", hdr(&r, "last-modified"));
    CHECK(etag[0] == '"');
    CHECK(lm[0] != '\0');
    raw_free(&r);

    /* The site's root without its '/' is redirected to it. */
    CHECK(raw(e, "GET", "/site/default/web?x=1", NULL, &r) == 0);
    CHECK_INT(r.status, 301);
    CHECK_STR(hdr(&r, "location"), "/site/default/web/?x=1");
    raw_free(&r);
    CHECK(raw(e, "GET", "/site/default/web/docs", NULL, &r) == 0);
    CHECK_INT(r.status, 301);
    CHECK_STR(hdr(&r, "location"), "/site/default/web/docs/");
    raw_free(&r);
    CHECK(raw(e, "GET", "/site/default/web/docs/", NULL, &r) == 0);
    CHECK_INT(r.status, 200);
    CHECK_STR(r.body, "DOCS-INDEX\n");
    raw_free(&r);

    /* If-None-Match: 304 with no body; another tag: the file. */
    char h[512];
    snprintf(h, sizeof(h), "If-None-Match: \"other\", %s\r\n", etag);
    CHECK(raw(e, "GET", "/site/default/web/index.html", h, &r) == 0);
    CHECK_INT(r.status, 304);
    CHECK_INT(r.len, 0);
    CHECK_STR(hdr(&r, "etag"), etag);
    raw_free(&r);
    CHECK(raw(e, "GET", "/site/default/web/index.html", "If-None-Match: \"other\"\r\n", &r) == 0);
    CHECK_INT(r.status, 200);
    CHECK_STR(r.body, index_html);
    raw_free(&r);
    /* If-Modified-Since: the file's own date is 304, an older one 200. */
    snprintf(h, sizeof(h), "If-Modified-Since: %s\r\n", lm);
    CHECK(raw(e, "GET", "/site/default/web/", h, &r) == 0);
    CHECK_INT(r.status, 304);
    raw_free(&r);
    CHECK(raw(e, "GET", "/site/default/web/", "If-Modified-Since: Thu, 01 Jan 1970 00:00:01 GMT\r\n",
              &r) == 0);
    CHECK_INT(r.status, 200);
    raw_free(&r);

    /* Ranges. */
    CHECK(raw(e, "GET", "/site/default/web/app.js", "Range: bytes=13-22\r\n", &r) == 0);
    CHECK_INT(r.status, 206);
    CHECK_STR(r.body, "0123456789");
    char want[64];
    snprintf(want, sizeof(want), "bytes 13-22/%zu", sizeof(app_js) - 1);
    CHECK_STR(hdr(&r, "content-range"), want);
    CHECK_CONTAINS(hdr(&r, "content-type"), "javascript");
    raw_free(&r);
    CHECK(raw(e, "GET", "/site/default/web/app.js", "Range: bytes=-4\r\n", &r) == 0);
    CHECK_INT(r.status, 206);
    CHECK_STR(r.body, "');\n");
    raw_free(&r);
    CHECK(raw(e, "GET", "/site/default/web/app.js", "Range: bytes=100000-\r\n", &r) == 0);
    CHECK_INT(r.status, 416);
    snprintf(want, sizeof(want), "bytes */%zu", sizeof(app_js) - 1);
    CHECK_STR(hdr(&r, "content-range"), want);
    raw_free(&r);
    /* If-Range of another version: the whole file. */
    CHECK(raw(e, "GET", "/site/default/web/app.js", "Range: bytes=0-3\r\nIf-Range: \"old\"\r\n",
              &r) == 0);
    CHECK_INT(r.status, 200);
    CHECK_STR(r.body, app_js);
    raw_free(&r);

    /* HEAD: the length, no body. */
    CHECK(raw(e, "HEAD", "/site/default/web/app.js", NULL, &r) == 0);
    CHECK_INT(r.status, 200);
    snprintf(want, sizeof(want), "%zu", sizeof(app_js) - 1);
    CHECK_STR(hdr(&r, "content-length"), want);
    CHECK_INT(r.len, 0);
    raw_free(&r);

    /* A precompressed sibling when the client takes gzip. */
    CHECK(raw(e, "GET", "/site/default/web/css/style.css", "Accept-Encoding: br, gzip\r\n",
              &r) == 0);
    CHECK_INT(r.status, 200);
    CHECK_STR(r.body, style_css_gz);
    CHECK_STR(hdr(&r, "content-encoding"), "gzip");
    CHECK_STR(hdr(&r, "vary"), "Accept-Encoding");
    CHECK_CONTAINS(hdr(&r, "content-type"), "text/css");
    raw_free(&r);
    CHECK(raw(e, "GET", "/site/default/web/css/style.css", "Accept-Encoding: gzip;q=0\r\n",
              &r) == 0);
    CHECK_STR(r.body, style_css);
    CHECK_STR(hdr(&r, "content-encoding"), "");
    CHECK_STR(hdr(&r, "vary"), "Accept-Encoding");
    raw_free(&r);
    CHECK(raw(e, "GET", "/site/default/web/css/style.css", NULL, &r) == 0);
    CHECK_STR(r.body, style_css);
    raw_free(&r);

    /* Files only: no writes; no such file, no such site. */
    CHECK(raw(e, "POST", "/site/default/web/index.html", "Content-Length: 0\r\n", &r) == 0);
    CHECK_INT(r.status, 405);
    CHECK_STR(hdr(&r, "allow"), "GET, HEAD");
    raw_free(&r);
    CHECK(raw(e, "GET", "/site/default/web/nope.txt", NULL, &r) == 0);
    CHECK_INT(r.status, 404);
    raw_free(&r);
    CHECK(raw(e, "GET", "/site/default/nosite/", NULL, &r) == 0);
    CHECK_INT(r.status, 404);
    CHECK_CONTAINS(r.body, "nosite");
    raw_free(&r);

    /* A raw Cache-Control string is sent as it is. */
    snprintf(spec, sizeof(spec), "{\"source\":{\"bundle\":\"%s\"},\"cache\":\"no-store\"}",
             digest);
    CHECK_INT(put_site(e, "PUT", DEV_TOKEN, "web", spec), 200);
    CHECK(wait_site(e, "web", "True", WAIT_MS));
    CHECK(raw(e, "GET", "/site/default/web/", NULL, &r) == 0);
    CHECK_STR(hdr(&r, "cache-control"), "no-store");
    raw_free(&r);

    /* Deleted: gone from the data plane. */
    CHECK_INT(env_req(e, "DELETE", SITE_PATH("web"), DEV_TOKEN, NULL), 200);
    int64_t deadline = e2e_now_ms() + WAIT_MS;
    int status = 0;
    do {
        CHECK(raw(e, "GET", "/site/default/web/", NULL, &r) == 0);
        status = r.status;
        raw_free(&r);
        if (status != 404)
            env_sleep_ms(20);
    } while (status != 404 && e2e_now_ms() < deadline);
    CHECK_INT(status, 404);
}

/* spec.notFound is served with 404; spec.spa sends routes to the index. */
SV_TEST(not_found_and_spa)
{
    char digest[80], spec[512];
    CHECK(web_bundle(e, digest) == 0);
    snprintf(spec, sizeof(spec), "{\"source\":{\"bundle\":\"%s\"},\"notFound\":\"404.html\"}",
             digest);
    CHECK_INT(put_site(e, "POST", DEV_TOKEN, "plain", spec), 201);
    snprintf(spec, sizeof(spec),
             "{\"source\":{\"bundle\":\"%s\"},\"notFound\":\"404.html\",\"spa\":true}", digest);
    CHECK_INT(put_site(e, "POST", DEV_TOKEN, "app", spec), 201);
    CHECK(wait_site(e, "plain", "True", WAIT_MS));
    CHECK(wait_site(e, "app", "True", WAIT_MS));

    raw_resp r;
    CHECK(raw(e, "GET", "/site/default/plain/no/such/page", NULL, &r) == 0);
    CHECK_INT(r.status, 404);
    CHECK_STR(r.body, not_found_html);
    CHECK_CONTAINS(hdr(&r, "content-type"), "text/html");
    raw_free(&r);
    /* A route of the app: its index. */
    CHECK(raw(e, "GET", "/site/default/app/users/42", NULL, &r) == 0);
    CHECK_INT(r.status, 200);
    CHECK_STR(r.body, index_html);
    raw_free(&r);
    /* A missing asset (it has an extension) is not a route. */
    CHECK(raw(e, "GET", "/site/default/app/missing.js", NULL, &r) == 0);
    CHECK_INT(r.status, 404);
    CHECK_STR(r.body, not_found_html);
    raw_free(&r);
    /* Files still win over the fallback. */
    CHECK(raw(e, "GET", "/site/default/app/app.js", NULL, &r) == 0);
    CHECK_INT(r.status, 200);
    CHECK_STR(r.body, app_js);
    raw_free(&r);

    /* A notFound page that is not there keeps the Site from being Ready. */
    snprintf(spec, sizeof(spec), "{\"source\":{\"bundle\":\"%s\"},\"notFound\":\"gone.html\"}",
             digest);
    CHECK_INT(put_site(e, "PUT", DEV_TOKEN, "plain", spec), 200);
    CHECK(wait_site(e, "plain", "False", WAIT_MS));
    CHECK_STR(ready_field(e, "reason"), "NotFoundPageMissing");
    CHECK_CONTAINS(ready_field(e, "message"), "spec.notFound gone.html");
}

/* spec.hosts: the site on those Host names, at /, every path of them. */
SV_TEST(host_routing)
{
    char digest[80], spec[512];
    CHECK(web_bundle(e, digest) == 0);
    snprintf(spec, sizeof(spec),
             "{\"source\":{\"bundle\":\"%s\"},\"hosts\":[\"www.example.test\",\"example.test\"]}",
             digest);
    CHECK_INT(put_site(e, "POST", DEV_TOKEN, "home", spec), 201);
    CHECK(wait_site(e, "home", "True", WAIT_MS));
    CHECK_CONTAINS(ready_field(e, "message"), "www.example.test");

    raw_resp r;
    CHECK(raw(e, "GET", "/", "Host: www.example.test\r\n", &r) == 0);
    CHECK_INT(r.status, 200);
    CHECK_STR(r.body, index_html);
    raw_free(&r);
    CHECK(raw(e, "GET", "/app.js", "Host: EXAMPLE.test:8080\r\n", &r) == 0);
    CHECK_INT(r.status, 200);
    CHECK_STR(r.body, app_js);
    raw_free(&r);
    /* Another host is the gateway's as before. */
    CHECK(raw(e, "GET", "/", "Host: other.test\r\n", &r) == 0);
    CHECK_INT(r.status, 404);
    CHECK_CONTAINS(r.body, "/fn/");
    raw_free(&r);
    /* The site's path still works. */
    CHECK(raw(e, "GET", "/site/default/home/app.js", "Host: other.test\r\n", &r) == 0);
    CHECK_INT(r.status, 200);
    raw_free(&r);

    /* A host another Site serves is refused, naming it. */
    CHECK_INT(put_site(e, "POST", DEV_TOKEN, "copy", spec), 201);
    CHECK(wait_site(e, "copy", "False", WAIT_MS));
    CHECK_STR(ready_field(e, "reason"), "HostConflict");
    CHECK_CONTAINS(ready_field(e, "message"), "default/home");
    /* Once the first one goes, the second takes the host. */
    CHECK_INT(env_req(e, "DELETE", SITE_PATH("home"), DEV_TOKEN, NULL), 200);
    CHECK(wait_site(e, "copy", "True", WAIT_MS));
    CHECK(raw(e, "GET", "/", "Host: www.example.test\r\n", &r) == 0);
    CHECK_INT(r.status, 200);
    raw_free(&r);
    /* The platform's own paths stay the platform's on a site's host: a
     * Site never answers for another namespace's functions. */
    CHECK(raw(e, "GET", "/fn/default/nothing/x", "Host: www.example.test\r\n", &r) == 0);
    CHECK_INT(r.status, 404);
    CHECK_CONTAINS(r.body, "nothing");
    CHECK(!strstr(r.body, "site"));
    raw_free(&r);
    /* The machine's own names are no Site's to take. */
    static const char *const machine[] = {"127.0.0.1", "localhost", "funcd", "10.1.2.3",
                                          "app.localhost"};
    for (size_t i = 0; i < sizeof(machine) / sizeof(machine[0]); i++) {
        char bad[512];
        snprintf(bad, sizeof(bad), "{\"source\":{\"bundle\":\"%s\"},\"hosts\":[\"%s\"]}",
                 digest, machine[i]);
        if (put_site(e, "POST", DEV_TOKEN, "hijack", bad) != 400)
            FAILF("hosts [%s]: HTTP %ld, not 400", machine[i], e->r.status);
        CHECK_CONTAINS(jstr(e->r.json, "message"), "spec.hosts[0]");
    }
    /* A directory's redirect names the normalized path, never a raw
     * "/\\host" or "//host" a browser would follow to another site. */
    CHECK(raw(e, "GET", "/\\evil.example/%2e%2e/site/default/copy", "Host: x.test\r\n", &r) ==
          0);
    CHECK_INT(r.status, 301);
    CHECK_STR(hdr(&r, "location"), "/site/default/copy/");
    raw_free(&r);
    CHECK(raw(e, "GET", "//evil.example/%2e%2e/docs", "Host: www.example.test\r\n", &r) == 0);
    CHECK_INT(r.status, 301);
    CHECK_STR(hdr(&r, "location"), "/docs/");
    raw_free(&r);
}

/* Many Sites with hosts: each Host finds its own Site (one lookup in a map
 * rebuilt when Sites change), a changed host list moves, a deleted Site's
 * hosts go, the others stay. */
SV_TEST(many_hosts)
{
    enum { SITES = 24 };
    char pages[SITES][32];
    for (int i = 0; i < SITES; i++) {
        snprintf(pages[i], sizeof(pages[i]), "SITE-%d\n", i);
        const sv_entry entries[] = {{"index.html", pages[i], 0644}};
        char digest[80], spec[512], name[16];
        CHECK(bundle(e, entries, 1, digest) == 0);
        snprintf(spec, sizeof(spec),
                 "{\"source\":{\"bundle\":\"%s\"},\"hosts\":[\"s%d.example.test\","
                 "\"www.s%d.example.test\"]}",
                 digest, i, i);
        snprintf(name, sizeof(name), "m%d", i);
        CHECK_INT(put_site(e, "POST", DEV_TOKEN, name, spec), 201);
    }
    for (int i = 0; i < SITES; i++) {
        char name[16];
        snprintf(name, sizeof(name), "m%d", i);
        CHECK(wait_site(e, name, "True", WAIT_MS));
    }
    raw_resp r;
    char h[128];
    for (int i = 0; i < SITES; i++) {
        snprintf(h, sizeof(h), "Host: %ss%d.example.test\r\n", i % 2 ? "www." : "", i);
        CHECK(raw(e, "GET", "/", h, &r) == 0);
        CHECK_INT(r.status, 200);
        CHECK_STR(r.body, pages[i]);
        raw_free(&r);
    }
    /* Site 5 moves to another host. */
    const sv_entry five[] = {{"index.html", pages[5], 0644}};
    char digest[80], spec[512];
    CHECK(bundle(e, five, 1, digest) == 0);
    snprintf(spec, sizeof(spec), "{\"source\":{\"bundle\":\"%s\"},\"hosts\":[\"moved.test\"]}",
             digest);
    CHECK_INT(put_site(e, "PUT", DEV_TOKEN, "m5", spec), 200);
    CHECK(wait_site(e, "m5", "True", WAIT_MS));
    CHECK(raw(e, "GET", "/", "Host: moved.test\r\n", &r) == 0);
    CHECK_STR(r.body, pages[5]);
    raw_free(&r);
    CHECK(raw(e, "GET", "/", "Host: s5.example.test\r\n", &r) == 0);
    CHECK_INT(r.status, 404);
    raw_free(&r);
    /* Site 7 goes: its hosts with it, the others stay. */
    char path[128];
    snprintf(path, sizeof(path), NS("default") "/sites/m7");
    CHECK_INT(env_req(e, "DELETE", path, DEV_TOKEN, NULL), 200);
    int64_t deadline = e2e_now_ms() + WAIT_MS;
    int gone = 0;
    while (!gone && e2e_now_ms() < deadline) {
        CHECK(raw(e, "GET", "/", "Host: s7.example.test\r\n", &r) == 0);
        gone = r.status == 404;
        raw_free(&r);
        if (!gone)
            env_sleep_ms(20);
    }
    CHECK(gone);
    for (int i = 0; i < SITES; i++) {
        if (i == 5 || i == 7)
            continue;
        snprintf(h, sizeof(h), "Host: www.s%d.example.test\r\n", i);
        CHECK(raw(e, "GET", "/", h, &r) == 0);
        CHECK_STR(r.body, pages[i]);
        raw_free(&r);
    }
}

/* Ready only when spec.index is in the files; until then 503. */
SV_TEST(index_missing)
{
    const sv_entry entries[] = {{"main.html", index_html, 0644}};
    char digest[80], spec[512];
    CHECK(bundle(e, entries, 1, digest) == 0);
    snprintf(spec, sizeof(spec), "{\"source\":{\"bundle\":\"%s\"}}", digest);
    CHECK_INT(put_site(e, "POST", DEV_TOKEN, "bare", spec), 201);
    CHECK(wait_site(e, "bare", "False", WAIT_MS));
    CHECK_STR(ready_field(e, "reason"), "IndexMissing");
    CHECK_CONTAINS(ready_field(e, "message"), "spec.index index.html");
    raw_resp r;
    CHECK(raw(e, "GET", "/site/default/bare/main.html", NULL, &r) == 0);
    CHECK_INT(r.status, 503);
    CHECK_CONTAINS(r.body, "Ready");
    raw_free(&r);

    snprintf(spec, sizeof(spec), "{\"source\":{\"bundle\":\"%s\"},\"index\":\"main.html\"}",
             digest);
    CHECK_INT(put_site(e, "PUT", DEV_TOKEN, "bare", spec), 200);
    CHECK(wait_site(e, "bare", "True", WAIT_MS));
    CHECK(raw(e, "GET", "/site/default/bare/", NULL, &r) == 0);
    CHECK_INT(r.status, 200);
    CHECK_STR(r.body, index_html);
    raw_free(&r);

    /* A bundle never uploaded. */
    CHECK_INT(put_site(e, "POST", DEV_TOKEN, "ghost",
                       "{\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"}}"), 201);
    CHECK(wait_site(e, "ghost", "False", WAIT_MS));
    CHECK_STR(ready_field(e, "reason"), "ArtifactFailed");
}

/* The platform's default index (funcd_with_site_default_index). */
SV_TEST_WITH(default_index_option, funcd_with_site_default_index("home.htm"), NULL)
{
    const sv_entry entries[] = {{"home.htm", "HOME\n", 0644}};
    CHECK(deploy_bundle(e, "h", entries, 1));
    raw_resp r;
    CHECK(raw(e, "GET", "/site/default/h/", NULL, &r) == 0);
    CHECK_INT(r.status, 200);
    CHECK_STR(r.body, "HOME\n");
    raw_free(&r);
}

static int write_file(const char *dir, const char *name, const char *content)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(content, f);
    return fclose(f);
}

/* Paths that try to leave the site's root: "..", encoded, symbolic links
 * out; a link inside the root is followed. A path source is read per
 * request: a changed file is served changed. */
SV_TEST(traversal_refused)
{
    char base[256], root[300], outside[300];
    CHECK(sv_tempdir(base, sizeof(base)) == 0);
    CHECK(chmod(base, 0755) == 0); /* a host path's files are served only if anyone may read them */
    snprintf(root, sizeof(root), "%s/site", base);
    snprintf(outside, sizeof(outside), "%s/secret", base);
    CHECK(mkdir(root, 0755) == 0);
    CHECK(mkdir(outside, 0755) == 0);
    CHECK(write_file(root, "index.html", index_html) == 0);
    CHECK(write_file(outside, "key.txt", "TOP-SECRET\n") == 0);
    char link[400], sub[400];
    snprintf(link, sizeof(link), "%s/out", root);
    CHECK(symlink(outside, link) == 0); /* a directory link out */
    snprintf(link, sizeof(link), "%s/key.txt", root);
    CHECK(symlink("../secret/key.txt", link) == 0); /* a relative file link out */
    snprintf(link, sizeof(link), "%s/abs.txt", root);
    snprintf(sub, sizeof(sub), "%s/key.txt", outside);
    CHECK(symlink(sub, link) == 0); /* an absolute one */
    snprintf(link, sizeof(link), "%s/home.html", root);
    CHECK(symlink("index.html", link) == 0); /* inside: fine */

    char spec[600];
    snprintf(spec, sizeof(spec), "{\"source\":{\"path\":\"%s\"}}", root);
    /* A host path is the operator's. */
    CHECK_INT(put_site(e, "POST", DEV_TOKEN, "t", spec), 403);
    CHECK_CONTAINS(jstr(e->r.json, "message"), "spec.source.path");
    CHECK_INT(put_site(e, "POST", ADMIN_TOKEN, "t", spec), 201);
    CHECK(wait_site(e, "t", "True", WAIT_MS));

    static const char *const attempts[] = {
        "/site/default/t/../../../secret/key.txt",
        "/site/default/t/%2e%2e/%2e%2e/%2e%2e/secret/key.txt",
        "/site/default/t/%2E%2E%2F%2E%2E%2Fsecret%2Fkey.txt",
        "/site/default/t/..%2f..%2fsecret/key.txt",
        "/site/default/t/.%2e/secret/key.txt",
        "/site/default/t/out/key.txt",
        "/site/default/t/key.txt",
        "/site/default/t/abs.txt",
        "/site/default/t//out/key.txt",
        "/site/default/t/%00/../key.txt",
    };
    raw_resp r;
    for (size_t i = 0; i < sizeof(attempts) / sizeof(attempts[0]); i++) {
        CHECK(raw(e, "GET", attempts[i], NULL, &r) == 0);
        if (strstr(r.body, "TOP-SECRET") || r.status == 200)
            FAILF("%s: HTTP %d: %s", attempts[i], r.status, r.body);
        raw_free(&r);
    }
    /* The same by Host. */
    snprintf(spec, sizeof(spec), "{\"source\":{\"path\":\"%s\"},\"hosts\":[\"t.test\"]}", root);
    CHECK_INT(put_site(e, "PUT", ADMIN_TOKEN, "t", spec), 200);
    CHECK(wait_site(e, "t", "True", WAIT_MS));
    static const char *const by_host[] = {"/../secret/key.txt", "/%2e%2e/secret/key.txt",
                                          "/out/key.txt", "/key.txt"};
    for (size_t i = 0; i < sizeof(by_host) / sizeof(by_host[0]); i++) {
        CHECK(raw(e, "GET", by_host[i], "Host: t.test\r\n", &r) == 0);
        if (strstr(r.body, "TOP-SECRET") || r.status == 200)
            FAILF("Host t.test %s: HTTP %d: %s", by_host[i], r.status, r.body);
        raw_free(&r);
    }
    /* A link that stays inside is served. */
    CHECK(raw(e, "GET", "/site/default/t/home.html", NULL, &r) == 0);
    CHECK_INT(r.status, 200);
    CHECK_STR(r.body, index_html);
    raw_free(&r);
    /* Read per request. */
    CHECK(write_file(root, "index.html", "CHANGED\n") == 0);
    CHECK(raw(e, "GET", "/site/default/t/", NULL, &r) == 0);
    CHECK_STR(r.body, "CHANGED\n");
    raw_free(&r);
    /* funcd reads a host path as it runs (often root): it serves only what
     * any user of the host may read, so a root swapped for a link to /etc
     * or /root publishes nothing a local user could not read already. */
    char closed[400];
    snprintf(closed, sizeof(closed), "%s/closed", root);
    CHECK(mkdir(closed, 0700) == 0);
    CHECK(write_file(closed, "open.txt", "TOP-SECRET\n") == 0);
    CHECK(write_file(root, "private.txt", "TOP-SECRET\n") == 0);
    snprintf(sub, sizeof(sub), "%s/private.txt", root);
    CHECK(chmod(sub, 0600) == 0);
    CHECK(write_file(root, "public.txt", "PUBLIC\n") == 0);
    static const char *const unreadable[] = {"/site/default/t/private.txt",
                                             "/site/default/t/closed/open.txt"};
    for (size_t i = 0; i < sizeof(unreadable) / sizeof(unreadable[0]); i++) {
        CHECK(raw(e, "GET", unreadable[i], NULL, &r) == 0);
        if (strstr(r.body, "TOP-SECRET") || r.status == 200)
            FAILF("%s: HTTP %d: %s", unreadable[i], r.status, r.body);
        raw_free(&r);
    }
    CHECK(raw(e, "GET", "/site/default/t/public.txt", NULL, &r) == 0);
    CHECK_INT(r.status, 200);
    raw_free(&r);
}

/* Big files (plain HTTP/1 bodies from 64 KiB go out with sendfile): whole,
 * ranged and gzip-sibling bodies byte for byte; several answers pipelined
 * on one keep-alive connection; a reader slower than the server (a small
 * receive buffer, so the socket fills and the rest waits for room); a
 * client that goes away in the middle; the same from a host path. */
static char *big_content(size_t n, unsigned seed)
{
    char *b = malloc(n + 1);
    uint32_t x = seed;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        b[i] = (char)('!' + (x >> 16) % 90);
    }
    b[n] = '\0';
    return b;
}

static int same_bytes(const raw_resp *r, const char *want, size_t n)
{
    return r->len == n && memcmp(r->body, want, n) == 0;
}

static void big_files_of(env *e, const char *site, const char *big, size_t bn, const char *huge,
                         size_t hn)
{
    char path[256], h[256];
    raw_resp r;
    snprintf(path, sizeof(path), "/site/default/%s/big.bin", site);
    CHECK(raw(e, "GET", path, NULL, &r) == 0);
    CHECK_INT(r.status, 200);
    CHECK(same_bytes(&r, big, bn));
    raw_free(&r);
    CHECK(raw(e, "GET", path, "Range: bytes=100000-299999\r\n", &r) == 0);
    CHECK_INT(r.status, 206);
    CHECK(same_bytes(&r, big + 100000, 200000));
    raw_free(&r);
    CHECK(raw(e, "GET", path, "Accept-Encoding: gzip\r\n", &r) == 0);
    CHECK_INT(r.status, 200);
    CHECK_STR(hdr(&r, "content-encoding"), "gzip");
    CHECK(same_bytes(&r, huge, bn)); /* the sibling: the first bn bytes of huge */
    raw_free(&r);

    /* Pipelined on one connection: each answer whole and in order. */
    int fd = dp_connect(e, 0);
    CHECK(fd >= 0);
    char reqs[2048];
    int n = snprintf(reqs, sizeof(reqs),
                     "GET /site/default/%s/big.bin HTTP/1.1\r\nHost: a\r\n\r\n"
                     "GET /site/default/%s/ HTTP/1.1\r\nHost: a\r\n\r\n"
                     "GET /site/default/%s/big.bin HTTP/1.1\r\nHost: a\r\nRange: bytes=-70000\r\n\r\n"
                     "HEAD /site/default/%s/huge.bin HTTP/1.1\r\nHost: a\r\n\r\n"
                     "GET /site/default/%s/ HTTP/1.1\r\nHost: a\r\n\r\n",
                     site, site, site, site, site);
    CHECK(write(fd, reqs, (size_t)n) == n);
    funcd_buf pending = FUNCD_BUF_INIT;
    CHECK(read_one(fd, &pending, &r) == 0);
    CHECK_INT(r.status, 200);
    CHECK(same_bytes(&r, big, bn));
    raw_free(&r);
    CHECK(read_one(fd, &pending, &r) == 0);
    CHECK_STR(r.body, index_html);
    raw_free(&r);
    CHECK(read_one(fd, &pending, &r) == 0);
    CHECK_INT(r.status, 206);
    CHECK(same_bytes(&r, big + bn - 70000, 70000));
    raw_free(&r);
    /* HEAD: headers only (read_one would wait for the body). */
    char buf[4096];
    while (!pending.data || !memmem(pending.data, pending.len, "\r\n\r\n", 4)) {
        ssize_t got = read(fd, buf, sizeof(buf));
        CHECK(got > 0);
        funcd_buf_append(&pending, buf, (size_t)got);
    }
    char *hend = memmem(pending.data, pending.len, "\r\n\r\n", 4);
    snprintf(h, sizeof(h), "content-length: %zu", hn);
    *hend = '\0';
    CHECK(strcasestr(pending.data, h) != NULL);
    size_t used = (size_t)(hend + 4 - pending.data);
    memmove(pending.data, pending.data + used, pending.len - used);
    pending.len -= used;
    CHECK(read_one(fd, &pending, &r) == 0);
    CHECK_STR(r.body, index_html);
    raw_free(&r);

    /* A slow reader: the server's socket fills; the rest goes when the
     * client reads; the connection then serves the next request. */
    int slow = dp_connect(e, 4096);
    CHECK(slow >= 0);
    n = snprintf(reqs, sizeof(reqs),
                 "GET /site/default/%s/huge.bin HTTP/1.1\r\nHost: a\r\n\r\n", site);
    CHECK(write(slow, reqs, (size_t)n) == n);
    env_sleep_ms(200); /* not a timing assertion: any order of events gives the same bytes */
    funcd_buf sp = FUNCD_BUF_INIT;
    CHECK(read_one(slow, &sp, &r) == 0);
    CHECK_INT(r.status, 200);
    CHECK(same_bytes(&r, huge, hn));
    raw_free(&r);
    n = snprintf(reqs, sizeof(reqs), "GET /site/default/%s/ HTTP/1.1\r\nHost: a\r\n\r\n", site);
    CHECK(write(slow, reqs, (size_t)n) == n);
    CHECK(read_one(slow, &sp, &r) == 0);
    CHECK_STR(r.body, index_html);
    raw_free(&r);
    funcd_buf_free(&sp);
    close(slow);

    /* A client that goes in the middle of a big answer: the others go on. */
    int gone = dp_connect(e, 4096);
    CHECK(gone >= 0);
    n = snprintf(reqs, sizeof(reqs),
                 "GET /site/default/%s/huge.bin HTTP/1.1\r\nHost: a\r\n\r\n", site);
    CHECK(write(gone, reqs, (size_t)n) == n);
    CHECK(read(gone, buf, sizeof(buf)) > 0);
    close(gone);
    n = snprintf(reqs, sizeof(reqs), "GET /site/default/%s/big.bin HTTP/1.1\r\nHost: a\r\n\r\n",
                 site);
    CHECK(write(fd, reqs, (size_t)n) == n);
    CHECK(read_one(fd, &pending, &r) == 0);
    CHECK(same_bytes(&r, big, bn));
    raw_free(&r);
    funcd_buf_free(&pending);
    close(fd);
}

SV_TEST(big_files)
{
    const size_t bn = 1u << 20, hn = 9u << 20; /* kept in memory; not (over 8 MiB) */
    char *big = big_content(bn, 1), *huge = big_content(hn, 2);
    char *huge_head = strndup(huge, bn);
    const sv_entry entries[] = {{"index.html", index_html, 0644},
                                {"big.bin", big, 0644},
                                {"big.bin.gz", huge_head, 0644},
                                {"huge.bin", huge, 0644}};
    char spec[600];
    CHECK(deploy_bundle(e, "big", entries, 4));
    for (int round = 0; round < 2; round++) /* the first reads the files, the second is cached */
        big_files_of(e, "big", big, bn, huge, hn);

    /* A host path: opened per request. */
    char base[256], root[300];
    CHECK(sv_tempdir(base, sizeof(base)) == 0);
    CHECK(chmod(base, 0755) == 0);
    snprintf(root, sizeof(root), "%s/site", base);
    CHECK(mkdir(root, 0755) == 0);
    for (size_t i = 0; i < 4; i++)
        CHECK(write_file(root, entries[i].path, entries[i].content) == 0);
    snprintf(spec, sizeof(spec), "{\"source\":{\"path\":\"%s\"}}", root);
    CHECK_INT(put_site(e, "POST", ADMIN_TOKEN, "bigpath", spec), 201);
    CHECK(wait_site(e, "bigpath", "True", WAIT_MS));
    big_files_of(e, "bigpath", big, bn, huge, hn);
    free(big);
    free(huge);
    free(huge_head);
}

/* A client that stops taking a sendfile'd answer (a full socket, nothing
 * read) is cut off after funcd_with_site_send_timeout (1 s here): its
 * connection is reset, so a stalled reader holds no descriptor and no place
 * on the thread forever. The wait is bounded (30 s), not timed. Others are
 * served meanwhile, and a reader that keeps taking is never cut off. */
SV_TEST_WITH(send_timeout, funcd_with_site_send_timeout(1000), NULL)
{
    const size_t hn = 9u << 20;
    char *huge = big_content(hn, 5);
    const sv_entry entries[] = {{"index.html", index_html, 0644}, {"huge.bin", huge, 0644}};
    CHECK(deploy_bundle(e, "st", entries, 2));
    static const char get[] = "GET /site/default/st/huge.bin HTTP/1.1\r\nHost: a\r\n\r\n";
    int stalled = dp_connect(e, 4096);
    CHECK(stalled >= 0);
    CHECK(write(stalled, get, sizeof(get) - 1) == (ssize_t)sizeof(get) - 1);
    /* Never read: the server's socket fills and then nothing moves. The
     * reset (or a hang-up) shows on the socket without reading it. */
    struct pollfd pfd = {.fd = stalled, .events = POLLRDHUP};
    int64_t deadline = e2e_now_ms() + 30000;
    int cut = 0;
    while (!cut && e2e_now_ms() < deadline) {
        CHECK(poll(&pfd, 1, 500) >= 0);
        cut = (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
    }
    CHECK(cut);
    close(stalled);
    /* A slow reader that keeps reading gets every byte. */
    int slow = dp_connect(e, 4096);
    CHECK(slow >= 0);
    CHECK(write(slow, get, sizeof(get) - 1) == (ssize_t)sizeof(get) - 1);
    funcd_buf sp = FUNCD_BUF_INIT;
    raw_resp r;
    CHECK(read_one(slow, &sp, &r) == 0);
    CHECK(same_bytes(&r, huge, hn));
    raw_free(&r);
    funcd_buf_free(&sp);
    close(slow);
    CHECK(raw(e, "GET", "/site/default/st/", NULL, &r) == 0);
    CHECK_STR(r.body, index_html);
    raw_free(&r);
    free(huge);
}

/* ---- raw HTTP/2 (h2c with prior knowledge) ------------------------------------ */

static void h2_frame(funcd_buf *out, unsigned type, unsigned flags, uint32_t stream,
                     const void *payload, size_t len)
{
    const unsigned char head[9] = {(unsigned char)(len >> 16), (unsigned char)(len >> 8),
                                   (unsigned char)len, (unsigned char)type, (unsigned char)flags,
                                   (unsigned char)(stream >> 24 & 0x7f), (unsigned char)(stream >> 16),
                                   (unsigned char)(stream >> 8), (unsigned char)stream};
    funcd_buf_append(out, head, 9);
    if (len)
        funcd_buf_append(out, payload, len);
}

static int h2_write(int fd, funcd_buf *out)
{
    int ok = write(fd, out->data, out->len) == (ssize_t)out->len;
    funcd_buf_free(out);
    return ok ? 0 : -1;
}

/* A connection that spoke the client preface and SETTINGS with
 * SETTINGS_INITIAL_WINDOW_SIZE `window` (0: no stream may send a byte of
 * DATA until the client says so); with `open_conn`, the connection's own
 * window opened all the way. -1 on failure. */
static int h2_open(env *e, uint32_t window, int open_conn, int rcvbuf)
{
    int fd = dp_connect(e, rcvbuf);
    if (fd < 0)
        return -1;
    funcd_buf out = FUNCD_BUF_INIT;
    funcd_buf_append(&out, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
    const unsigned char settings[6] = {0, 4, (unsigned char)(window >> 24),
                                       (unsigned char)(window >> 16), (unsigned char)(window >> 8),
                                       (unsigned char)window};
    h2_frame(&out, 4, 0, 0, settings, sizeof(settings));
    if (open_conn) {
        uint32_t inc = 0x7fffffffu - 65535u;
        const unsigned char up[4] = {(unsigned char)(inc >> 24), (unsigned char)(inc >> 16),
                                     (unsigned char)(inc >> 8), (unsigned char)inc};
        h2_frame(&out, 8, 0, 0, up, sizeof(up));
    }
    if (h2_write(fd, &out) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* GET `path` on stream `id` (HPACK: :method GET and :scheme http indexed,
 * :authority and :path literal without indexing, no Huffman). */
static int h2_get(int fd, uint32_t id, const char *path)
{
    funcd_buf block = FUNCD_BUF_INIT, out = FUNCD_BUF_INIT;
    const unsigned char fixed[] = {0x82, 0x86, 0x01, 0x01, 'a', 0x04};
    funcd_buf_append(&block, fixed, sizeof(fixed));
    unsigned char pl = (unsigned char)strlen(path); /* < 127 */
    funcd_buf_append(&block, &pl, 1);
    funcd_buf_append(&block, path, pl);
    h2_frame(&out, 1, 0x5 /* END_STREAM | END_HEADERS */, id, block.data, block.len);
    funcd_buf_free(&block);
    return h2_write(fd, &out);
}

/* Reads one frame: its type, flags and stream; its payload into `payload`
 * (replaced). 0, or -1 when the connection ended. */
static int h2_read_frame(int fd, funcd_buf *pending, unsigned *type, unsigned *flags,
                         uint32_t *stream, funcd_buf *payload)
{
    char buf[65536];
    size_t len = 0;
    for (;;) {
        if (pending->len >= 9) {
            const unsigned char *h = (const unsigned char *)pending->data;
            len = (size_t)h[0] << 16 | (size_t)h[1] << 8 | h[2];
            if (pending->len >= 9 + len)
                break;
        }
        ssize_t got = read(fd, buf, sizeof(buf));
        if (got <= 0)
            return -1;
        funcd_buf_append(pending, buf, (size_t)got);
    }
    const unsigned char *h = (const unsigned char *)pending->data;
    *type = h[3];
    *flags = h[4];
    *stream = (uint32_t)(h[5] & 0x7f) << 24 | (uint32_t)h[6] << 16 | (uint32_t)h[7] << 8 | h[8];
    payload->len = 0;
    funcd_buf_append(payload, pending->data + 9, len);
    memmove(pending->data, pending->data + 9 + len, pending->len - 9 - len);
    pending->len -= 9 + len;
    return 0;
}

/* Waits (at most `ms`) until the peer reset or closed connection `fd`,
 * without reading it; 1 when it did. */
static int cut_within(int fd, int64_t ms)
{
    struct pollfd pfd = {.fd = fd, .events = POLLRDHUP};
    int64_t deadline = e2e_now_ms() + ms;
    while (e2e_now_ms() < deadline) {
        if (poll(&pfd, 1, 100) < 0)
            return 0;
        if (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR))
            return 1;
    }
    return 0;
}

/* The send timeout covers the answers h2o writes itself too, not only
 * sendfile'd ones: over HTTP/2 a file from memory whose stream the client
 * keeps shut (SETTINGS_INITIAL_WINDOW_SIZE 0, never a WINDOW_UPDATE), and
 * one whose connection the client never reads (its socket full), are cut
 * off within two timeouts (1 s here; 4 s allowed for a loaded machine),
 * not held for as long as the connection lives (h2o 2.2.5 turns its
 * HTTP/2 idle timeout off while a stream is open). Others are served
 * meanwhile. */
SV_TEST_WITH(send_timeout_h2, funcd_with_site_send_timeout(1000), NULL)
{
    const size_t bn = 4u << 20; /* kept in memory */
    char *big = big_content(bn, 11);
    const sv_entry entries[] = {{"index.html", index_html, 0644}, {"big.bin", big, 0644}};
    CHECK(deploy_bundle(e, "h2", entries, 2));
    int shut = h2_open(e, 0, 0, 0);
    CHECK(shut >= 0);
    CHECK(h2_get(shut, 1, "/site/default/h2/big.bin") == 0);
    int unread = h2_open(e, 0x7fffffffu, 1, 4096);
    CHECK(unread >= 0);
    CHECK(h2_get(unread, 1, "/site/default/h2/big.bin") == 0);
    int64_t start = e2e_now_ms();
    raw_resp r;
    CHECK(raw(e, "GET", "/site/default/h2/", NULL, &r) == 0);
    CHECK_STR(r.body, index_html);
    raw_free(&r);
    int shut_cut = cut_within(shut, 5000);
    int64_t shut_ms = e2e_now_ms() - start;
    int unread_cut = cut_within(unread, 5000);
    int64_t unread_ms = e2e_now_ms() - start;
    printf("  window shut: %s after %lld ms; never read: %s after %lld ms\n",
           shut_cut ? "cut" : "still open", (long long)shut_ms, unread_cut ? "cut" : "still open",
           (long long)unread_ms);
    CHECK(shut_cut);
    CHECK(unread_cut);
    close(shut);
    close(unread);
    CHECK(raw(e, "GET", "/site/default/h2/big.bin", NULL, &r) == 0);
    CHECK(same_bytes(&r, big, bn));
    raw_free(&r);
    free(big);
}

/* A gauge of the control plane's /metrics (a series without labels), or -1. */
static double metric(env *e, const char *name)
{
    if (env_req(e, "GET", "/metrics", ADMIN_TOKEN, NULL) != 200 || !e->r.body)
        return -1;
    size_t nl = strlen(name);
    for (const char *p = e->r.body; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, name, nl) == 0 && p[nl] == ' ')
            return strtod(p + nl + 1, NULL);
    return -1;
}

/* Every Site's files in memory stay within one budget
 * (funcd_with_site_cache_bytes): eight Sites of three 40 KiB files each
 * (960 KiB) under a 200 KiB budget keep at most 200 KiB (the
 * funcd_site_cache_bytes gauge), older contents going for newer ones, and
 * every answer has the right bytes, kept, let go or read again. */
SV_TEST_WITH(cache_budget, funcd_with_site_cache_bytes(200 << 10), NULL)
{
    enum { SITES = 8, FILES = 3, SIZE = 40 << 10 };
    char *content[SITES][FILES];
    for (int i = 0; i < SITES; i++)
        for (int j = 0; j < FILES; j++)
            content[i][j] = big_content(SIZE, (unsigned)(i * FILES + j + 7));
    CHECK_INT((long long)metric(e, "funcd_site_cache_limit_bytes"), 200 << 10);
    for (int i = 0; i < SITES; i++) {
        const sv_entry entries[] = {{"index.html", index_html, 0644},
                                    {"a.txt", content[i][0], 0644},
                                    {"b.txt", content[i][1], 0644},
                                    {"c.txt", content[i][2], 0644}};
        char digest[80], spec[300], name[16];
        CHECK(bundle(e, entries, 4, digest) == 0);
        snprintf(spec, sizeof(spec), "{\"source\":{\"bundle\":\"%s\"}}", digest);
        snprintf(name, sizeof(name), "s%d", i);
        CHECK_INT(put_site(e, "POST", DEV_TOKEN, name, spec), 201);
        CHECK(wait_site(e, name, "True", WAIT_MS));
    }
    double most = 0;
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < SITES; i++)
            for (int j = 0; j < FILES; j++) {
                char path[64];
                snprintf(path, sizeof(path), "/site/default/s%d/%c.txt", i, 'a' + j);
                raw_resp r;
                CHECK(raw(e, "GET", path, NULL, &r) == 0);
                CHECK_INT(r.status, 200);
                CHECK(same_bytes(&r, content[i][j], SIZE));
                raw_free(&r);
                double now = metric(e, "funcd_site_cache_bytes");
                CHECK(now >= 0 && now <= 200 << 10);
                if (now > most)
                    most = now;
            }
    CHECK(most >= 4 * SIZE); /* it does keep files: as many as fit */
    CHECK(metric(e, "funcd_site_cache_files") >= 4);
    /* A Site that goes lets its files go. */
    for (int i = 0; i < SITES; i++) {
        char path[64];
        snprintf(path, sizeof(path), NS("default") "/sites/s%d", i);
        CHECK_INT(env_req(e, "DELETE", path, DEV_TOKEN, NULL), 200);
    }
    int64_t deadline = e2e_now_ms() + WAIT_MS;
    while (metric(e, "funcd_site_cache_bytes") != 0 && e2e_now_ms() < deadline)
        env_sleep_ms(20);
    CHECK_INT((long long)metric(e, "funcd_site_cache_bytes"), 0);
    for (int i = 0; i < SITES; i++)
        for (int j = 0; j < FILES; j++)
            free(content[i][j]);
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = -1, resident = -1;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
            resident = -1;
        fclose(f);
    }
    return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* The budget holds while slow clients pin answers (ADR 0056, F3): an
 * HTTP/2 client asks for 24 distinct 512 KiB files (12 MiB) on streams it
 * keeps shut, under a 4 MiB budget. The contents being sent are never let
 * go, so the files past the budget are read from their files in 64 KiB
 * steps: funcd_site_cache_bytes stays within 4 MiB, and the process grows
 * by less than 10 MiB (RSS: 6.4 MiB measured; 12 MiB more if every answer
 * held a copy). Then the
 * streams open: every answer has its bytes (a pinned copy freed early is
 * a use after free for ASan), and once they are done, contents that were
 * in use when the cache looked for room are let go in turn: 30 small
 * files read afterwards over HTTP/1 find room. */
SV_TEST_WITH(cache_pinned, funcd_with_site_cache_bytes(4 << 20), NULL)
{
    enum { BIG = 24, BIG_SIZE = 512 << 10, SMALL = 30, SMALL_SIZE = 40 << 10 };
    sv_entry entries[1 + BIG + SMALL];
    char *content[BIG + SMALL], names[BIG + SMALL][24];
    entries[0] = (sv_entry){"index.html", index_html, 0644};
    for (int i = 0; i < BIG + SMALL; i++) {
        content[i] = big_content(i < BIG ? BIG_SIZE : SMALL_SIZE, (unsigned)(100 + i));
        snprintf(names[i], sizeof(names[i]), i < BIG ? "big%d.bin" : "small%d.txt", i);
        entries[1 + i] = (sv_entry){names[i], content[i], 0644};
    }
    char path[96];
    CHECK(deploy_bundle(e, "p", entries, 1 + BIG + SMALL));
    long before = rss_kib();

    int fd = h2_open(e, 0, 1, 0);
    CHECK(fd >= 0);
    for (int i = 0; i < BIG; i++) {
        snprintf(path, sizeof(path), "/site/default/p/%s", names[i]);
        CHECK(h2_get(fd, (uint32_t)(2 * i + 1), path) == 0);
    }
    /* Every answer started (its HEADERS came): the files were looked up. */
    funcd_buf pending = FUNCD_BUF_INIT, payload = FUNCD_BUF_INIT;
    int headers = 0;
    while (headers < BIG) {
        unsigned type, flags;
        uint32_t id;
        if (h2_read_frame(fd, &pending, &type, &flags, &id, &payload) != 0)
            FAILF("the connection ended after %d answers' headers", headers);
        if (type == 1 && id)
            headers++;
        CHECK(type != 0); /* no DATA: every window is shut */
    }
    double held = metric(e, "funcd_site_cache_bytes");
    long grew = rss_kib() - before;
    printf("  24 pinned answers of 512 KiB, budget 4096 KiB: cache %.0f KiB, RSS +%ld KiB\n",
           held / 1024, grew);
    CHECK(held > 0 && held <= 4 << 20);
    CHECK(grew < 10 << 10);

    /* The windows open: every answer whole. */
    funcd_buf out = FUNCD_BUF_INIT;
    const unsigned char up[4] = {0x01, 0x00, 0x00, 0x00}; /* 16 MiB */
    for (int i = 0; i < BIG; i++)
        h2_frame(&out, 8, 0, (uint32_t)(2 * i + 1), up, sizeof(up));
    CHECK(h2_write(fd, &out) == 0);
    funcd_buf got[BIG];
    for (int i = 0; i < BIG; i++)
        got[i] = (funcd_buf)FUNCD_BUF_INIT;
    int done = 0;
    while (done < BIG) {
        unsigned type, flags;
        uint32_t id;
        CHECK(h2_read_frame(fd, &pending, &type, &flags, &id, &payload) == 0);
        CHECK(type != 3 && type != 7); /* no RST_STREAM, no GOAWAY */
        if (type != 0 || id == 0 || id > 2 * BIG)
            continue;
        funcd_buf_append(&got[id / 2], payload.data, payload.len);
        if (flags & 0x1) {
            CHECK(got[id / 2].len == BIG_SIZE &&
                  memcmp(got[id / 2].data, content[id / 2], BIG_SIZE) == 0);
            done++;
        }
    }
    for (int i = 0; i < BIG; i++)
        funcd_buf_free(&got[i]);
    funcd_buf_free(&pending);
    funcd_buf_free(&payload);
    close(fd);
    env_sleep_ms(200);

    /* The contents that were in use are back in the clock's turn: small
     * files make room by letting them go. */
    for (int round = 0; round < 2; round++)
        for (int i = BIG; i < BIG + SMALL; i++) {
            snprintf(path, sizeof(path), "/site/default/p/%s", names[i]);
            raw_resp r;
            CHECK(raw(e, "GET", path, NULL, &r) == 0);
            CHECK(same_bytes(&r, content[i], SMALL_SIZE));
            raw_free(&r);
        }
    double files = metric(e, "funcd_site_cache_files");
    held = metric(e, "funcd_site_cache_bytes");
    printf("  after: %.0f files, %.0f KiB kept\n", files, held / 1024);
    CHECK(files >= SMALL);
    CHECK(held <= 4 << 20);
    for (int i = 0; i < BIG + SMALL; i++)
        free(content[i]);
}

/* A budget of 0 keeps nothing: every answer is read from its file. */
SV_TEST_WITH(cache_off, funcd_with_site_cache_bytes(0), NULL)
{
    char *a = big_content(1000, 3);
    const sv_entry entries[] = {{"index.html", index_html, 0644}, {"a.txt", a, 0644}};
    CHECK(deploy_bundle(e, "z", entries, 2));
    for (int i = 0; i < 3; i++) {
        raw_resp r;
        CHECK(raw(e, "GET", "/site/default/z/a.txt", NULL, &r) == 0);
        CHECK(same_bytes(&r, a, 1000));
        raw_free(&r);
    }
    CHECK_INT((long long)metric(e, "funcd_site_cache_bytes"), 0);
    CHECK_INT((long long)metric(e, "funcd_site_cache_limit_bytes"), 0);
    free(a);
}

/* ---- log injection ---------------------------------------------------------------- */

static pthread_mutex_t logged_lock = PTHREAD_MUTEX_INITIALIZER;
static funcd_buf logged = FUNCD_BUF_INIT; /* every line, each ending with '\n' */

static void capture_log(funcd_log_level level, const char *message, void *payload)
{
    pthread_mutex_lock(&logged_lock);
    funcd_buf_append(&logged, message, strlen(message));
    funcd_buf_append(&logged, "\n", 1);
    pthread_mutex_unlock(&logged_lock);
}

/* 1 when a logged line has `needle`; *raw set when any line has a control
 * byte (but the '\n' that ends it). */
static int logged_has(const char *needle, int *raw)
{
    pthread_mutex_lock(&logged_lock);
    int found = 0;
    *raw = 0;
    for (size_t i = 0; i < logged.len; i++)
        if (((unsigned char)logged.data[i] < 0x20 && logged.data[i] != '\n') ||
            logged.data[i] == 0x7f)
            *raw = 1;
    if (logged.data && memmem(logged.data, logged.len, needle, strlen(needle)))
        found = 1;
    pthread_mutex_unlock(&logged_lock);
    return found;
}

/* What a client or a spec says never reaches a log line as it is: CR, LF
 * and ESC in a Site's paths, Host headers and request paths are escaped
 * (or refused) first, so nobody forges a line or steers an operator's
 * terminal. */
SV_TEST_WITH(log_injection, funcd_with_logger(capture_log, FUNCD_LOG_DEBUG, NULL), NULL)
{
    char base[256], spec[700];
    CHECK(sv_tempdir(base, sizeof(base)) == 0);
    /* A host path (an admin's) that does not exist: the Site is not Ready,
     * and why is logged, with the path escaped. */
    snprintf(spec, sizeof(spec),
             "{\"source\":{\"path\":\"%s/gone\\r\\nfuncd: error: FORGED\\u001b[2J\"}}", base);
    CHECK_INT(put_site(e, "POST", ADMIN_TOKEN, "inj", spec), 201);
    CHECK(wait_site(e, "inj", "False", WAIT_MS));
    int raw_bytes = 0;
    int64_t deadline = e2e_now_ms() + WAIT_MS;
    while (!logged_has("FORGED", &raw_bytes) && e2e_now_ms() < deadline)
        env_sleep_ms(20);
    CHECK(logged_has("gone\\r\\nfuncd: error: FORGED\\x1b[2J", &raw_bytes));
    CHECK(!raw_bytes);
    /* spec.index and spec.notFound with control bytes are refused. */
    static const char *const bad[] = {"{\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"},"
                                      "\"index\":\"a\\nb.html\"}",
                                      "{\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"},"
                                      "\"notFound\":\"x\\u001b.html\"}"};
    for (size_t i = 0; i < 2; i++) {
        long st = put_site(e, "POST", DEV_TOKEN, "bad", bad[i]);
        if (st != 400)
            FAILF("%s: HTTP %ld: %s", bad[i], st, e->r.body);
        CHECK_CONTAINS(jstr(e->r.json, "message"), i ? "spec.notFound" : "spec.index");
    }
    /* Request bytes: a path with encoded CR LF ESC, a Host with ESC. */
    char digest[80];
    CHECK(web_bundle(e, digest) == 0);
    snprintf(spec, sizeof(spec), "{\"source\":{\"bundle\":\"%s\"},\"hosts\":[\"inj.test\"]}",
             digest);
    CHECK_INT(put_site(e, "POST", DEV_TOKEN, "web", spec), 201);
    CHECK(wait_site(e, "web", "True", WAIT_MS));
    raw_resp r;
    CHECK(raw(e, "GET", "/site/default/web/a%0d%0aFORGED2%1b[2J", NULL, &r) == 0);
    CHECK_INT(r.status, 404);
    raw_free(&r);
    CHECK(raw(e, "GET", "/%0d%0aFORGED3%1b[2J", "Host: inj.test\r\n", &r) == 0);
    CHECK_INT(r.status, 404);
    raw_free(&r);
    CHECK(raw(e, "GET", "/site/x%0d%0aFORGED4/y/", NULL, &r) == 0);
    CHECK_INT(r.status, 404);
    raw_free(&r);
    if (raw(e, "GET", "/", "Host: inj\x1b[2J.test\r\n", &r) == 0) {
        CHECK(r.status == 400 || r.status == 404);
        raw_free(&r);
    }
    CHECK(!logged_has("FORGED2", &raw_bytes) || !raw_bytes);
    CHECK(!raw_bytes);
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    return system(cmd);
}

/* A git source, resolved by the source resolver as a Function's is: the
 * Site serves the branch's commit, and a new commit pushed to the branch
 * (polled every 300 ms) is served once fetched. */
SV_TEST_WITH(git_source, funcd_with_source_refresh(0, 300), NULL)
{
    if (system("git --version >/dev/null 2>&1") != 0) {
        printf("  skipped: git is not installed\n");
        return;
    }
    char tmp[256], repo[300], work[300], spec[800];
    CHECK(sv_tempdir(tmp, sizeof(tmp)) == 0);
    snprintf(repo, sizeof(repo), "%s/repo.git", tmp);
    snprintf(work, sizeof(work), "%s/work", tmp);
    CHECK(sh("git init -q --bare %s && git clone -q %s %s 2>/dev/null && mkdir -p %s/www && "
             "echo GIT-V1 >%s/www/index.html && cd %s && git add -A && "
             "git -c user.name=t -c user.email=t@e commit -qm v1 && "
             "git push -q origin HEAD:refs/heads/main 2>/dev/null",
             repo, repo, work, work, work, work) == 0);
    snprintf(spec, sizeof(spec),
             "{\"source\":{\"git\":{\"url\":\"%s\",\"ref\":\"main\",\"path\":\"www\"}}}", repo);
    CHECK_INT(put_site(e, "POST", ADMIN_TOKEN, "g", spec), 201);
    CHECK(wait_site(e, "g", "True", WAIT_MS));
    raw_resp r;
    CHECK(raw(e, "GET", "/site/default/g/", NULL, &r) == 0);
    CHECK_INT(r.status, 200);
    CHECK_STR(r.body, "GIT-V1\n");
    raw_free(&r);

    CHECK(sh("cd %s && echo GIT-V2 >www/index.html && git add -A && "
             "git -c user.name=t -c user.email=t@e commit -qm v2 && "
             "git push -q origin HEAD:refs/heads/main 2>/dev/null",
             work) == 0);
    int64_t deadline = e2e_now_ms() + WAIT_MS;
    int seen = 0;
    while (!seen && e2e_now_ms() < deadline) {
        CHECK(raw(e, "GET", "/site/default/g/", NULL, &r) == 0);
        seen = r.status == 200 && strcmp(r.body, "GIT-V2\n") == 0;
        raw_free(&r);
        if (!seen)
            env_sleep_ms(50);
    }
    CHECK(seen);
}

/* Bad specs name their field. */
SV_TEST(bad_specs)
{
    static const struct {
        const char *spec, *field;
    } bad[] = {
        {"{}", "spec.source"},
        {"{\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"},\"index\":\"../x.html\"}", "spec.index"},
        {"{\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"},\"index\":\"/x.html\"}", "spec.index"},
        {"{\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"},\"notFound\":7}", "spec.notFound"},
        {"{\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"},\"spa\":\"yes\"}", "spec.spa"},
        {"{\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"},\"hosts\":[\"Bad Host\"]}",
         "spec.hosts[0]"},
        {"{\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"},\"hosts\":[\"a.test\",\"a.test\"]}",
         "spec.hosts[1]"},
        {"{\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"},\"cache\":{\"maxAge\":-1}}",
         "spec.cache.maxAge"},
        {"{\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"},\"cache\":\"a\\nb\"}", "spec.cache"},
        {"{\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"},\"other\":1}", "spec.other"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        long st = put_site(e, "POST", DEV_TOKEN, "bad", bad[i].spec);
        if (st != 400 && st != 422)
            FAILF("%s: HTTP %ld: %s", bad[i].spec, st, e->r.body);
        CHECK_CONTAINS(jstr(e->r.json, "message"), bad[i].field);
    }
}

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    sv_init();
    SV_RUN(only, ran, serve_files);
    SV_RUN(only, ran, not_found_and_spa);
    SV_RUN(only, ran, host_routing);
    SV_RUN(only, ran, many_hosts);
    SV_RUN(only, ran, index_missing);
    SV_RUN(only, ran, default_index_option);
    SV_RUN(only, ran, traversal_refused);
    SV_RUN(only, ran, git_source);
    SV_RUN(only, ran, bad_specs);
    SV_RUN(only, ran, big_files);
    SV_RUN(only, ran, cache_budget);
    SV_RUN(only, ran, cache_off);
    SV_RUN(only, ran, send_timeout);
    SV_RUN(only, ran, send_timeout_h2);
    SV_RUN(only, ran, cache_pinned);
    SV_RUN(only, ran, log_injection);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no case %s\n", only);
        return 2;
    }
    return HARNESS_END();
}
