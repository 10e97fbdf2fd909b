#include "fake_registry.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <fcntl.h>
#include <mbedtls/sha256.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MT_MANIFEST "application/vnd.oci.image.manifest.v1+json"

void fake_registry_digest(const void *data, size_t len, char out[72])
{
    unsigned char sum[32];
    mbedtls_sha256_ret(data, len, sum, 0);
    strcpy(out, "sha256:");
    for (int i = 0; i < 32; i++)
        snprintf(out + 7 + 2 * i, 3, "%02x", sum[i]);
}

void fake_registry_layer_digest(size_t n, char out[72])
{
    char *data = malloc(n ? n : 1);
    if (!data) {
        out[0] = '\0';
        return;
    }
    memset(data, 'x', n);
    fake_registry_digest(data, n, out);
    free(data);
}

static void reply(struct evhttp_request *req, int code, const char *type, const char *digest,
                  const void *body, size_t len)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    struct evbuffer *b = evbuffer_new();
    if (b && len)
        evbuffer_add(b, body, len);
    if (type)
        evhttp_add_header(h, "Content-Type", type);
    if (digest)
        evhttp_add_header(h, "Docker-Content-Digest", digest);
    evhttp_send_reply(req, code, code == 200 ? "OK" : "No", b);
    if (b)
        evbuffer_free(b);
}

/* HEAD: "I have it", naming the digest asked for. GET: other bytes. */
static void claim(fake_registry *f, struct evhttp_request *req, const char *reference, int head)
{
    static const char other[] = "{\"schemaVersion\":2,\"mediaType\":\"" MT_MANIFEST "\","
                                "\"config\":{\"mediaType\":\"application/vnd.oci.image.config."
                                "v1+json\",\"digest\":\"sha256:00000000000000000000000000000000"
                                "00000000000000000000000000000000\",\"size\":2},\"layers\":[]}";
    const char *digest = strncmp(reference, "sha256:", 7) == 0 ? reference : NULL;
    if (head)
        reply(req, 200, MT_MANIFEST, digest, NULL, 0);
    else
        reply(req, 200, MT_MANIFEST, digest, other, sizeof(other) - 1);
}

static void serve(struct evhttp_request *req, void *arg)
{
    fake_registry *f = arg;
    const char *uri = evhttp_request_get_uri(req);
    int head = evhttp_request_get_command(req) == EVHTTP_REQ_HEAD;
    const char *manifest = strstr(uri, "/manifests/"), *blob = strstr(uri, "/blobs/");
    if (strcmp(uri, "/v2/") == 0) {
        reply(req, 200, "application/json", NULL, "{}", 2);
    } else if (strncmp(uri, "/v2/", 4) != 0 || (!manifest && !blob)) {
        reply(req, 404, "application/json", NULL, "{}", 2);
    } else if (manifest) {
        atomic_fetch_add(head ? &f->heads : &f->manifest_gets, 1);
        if (f->claims_any)
            claim(f, req, manifest + strlen("/manifests/"), head);
        else if (f->manifest)
            reply(req, 200, MT_MANIFEST, f->manifest_digest, f->manifest, strlen(f->manifest));
        else
            reply(req, 404, "application/json", NULL, "{}", 2);
    } else if (f->config && strcmp(blob + strlen("/blobs/"), f->config_digest) == 0) {
        atomic_fetch_add(&f->blob_gets, 1);
        reply(req, 200, "application/octet-stream", NULL, f->config, strlen(f->config));
    } else {
        const char *digest = blob + strlen("/blobs/");
        if (f->hold && strcmp(digest, f->hold) == 0 && !atomic_load(&f->released)) {
            int n = atomic_load(&f->held);
            if (n < 4) {
                f->held_req[n] = req;
                atomic_store(&f->held, n + 1);
                return;
            }
        }
        atomic_fetch_add(&f->blob_gets, 1);
        size_t len = f->layer_bytes;
        for (int i = 0; i < 4 && f->layer_sizes[i]; i++) {
            char d[72];
            fake_registry_layer_digest(f->layer_sizes[i], d);
            if (strcmp(d, digest) == 0)
                len = f->layer_sizes[i];
        }
        char *data = malloc(len ? len : 1);
        if (data)
            memset(data, 'x', len);
        reply(req, data ? 200 : 500, "application/octet-stream", NULL, data, data ? len : 0);
        free(data);
    }
}

/* Every 10 ms: once released, the held GETs are answered. */
static void on_hold_check(evutil_socket_t fd, short what, void *arg)
{
    fake_registry *f = arg;
    if (!atomic_load(&f->released))
        return;
    int n = atomic_exchange(&f->held, 0);
    for (int i = 0; i < n; i++) {
        struct evhttp_request *req = f->held_req[i];
        f->held_req[i] = NULL;
        serve(req, f);
    }
}

void fake_registry_release(fake_registry *f)
{
    atomic_store(&f->released, 1);
}

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
    event_base_loopbreak(((fake_registry *)arg)->base);
}

static void *run(void *arg)
{
    event_base_dispatch(((fake_registry *)arg)->base);
    return NULL;
}

int fake_registry_start(fake_registry *f)
{
    f->stop_fds[0] = f->stop_fds[1] = -1;
    f->made = 1;
    if (f->manifest)
        fake_registry_digest(f->manifest, strlen(f->manifest), f->manifest_digest);
    if (f->config)
        fake_registry_digest(f->config, strlen(f->config), f->config_digest);
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    struct evhttp_bound_socket *bs = NULL;
    if (pipe2(f->stop_fds, O_CLOEXEC) < 0 || !(f->base = event_base_new()) ||
        !(f->http = evhttp_new(f->base)) ||
        !(f->stop = event_new(f->base, f->stop_fds[0], EV_READ, on_stop, f)) ||
        event_add(f->stop, NULL) < 0 ||
        !(f->hold_check = event_new(f->base, -1, EV_PERSIST, on_hold_check, f)) ||
        event_add(f->hold_check, &(struct timeval){0, 10000}) < 0 ||
        !(bs = evhttp_bind_socket_with_handle(f->http, "127.0.0.1", 0)) ||
        getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&sa, &sl) < 0) {
        fake_registry_stop(f);
        return -1;
    }
    snprintf(f->addr, sizeof(f->addr), "127.0.0.1:%d", ntohs(sa.sin_port));
    evhttp_set_allowed_methods(f->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
    evhttp_set_gencb(f->http, serve, f);
    if (pthread_create(&f->thread, NULL, run, f) != 0) {
        fake_registry_stop(f);
        return -1;
    }
    f->running = 1;
    return 0;
}

void fake_registry_stop(fake_registry *f)
{
    if (!f->made)
        return;
    if (f->running) {
        ssize_t w = write(f->stop_fds[1], "x", 1);
        (void)w;
        pthread_join(f->thread, NULL);
        f->running = 0;
    }
    if (f->stop)
        event_free(f->stop);
    if (f->hold_check)
        event_free(f->hold_check);
    f->hold_check = NULL;
    if (f->http)
        evhttp_free(f->http);
    if (f->base)
        event_base_free(f->base);
    f->stop = NULL;
    f->http = NULL;
    f->base = NULL;
    for (int i = 0; i < 2; i++) {
        if (f->stop_fds[i] >= 0)
            close(f->stop_fds[i]);
        f->stop_fds[i] = -1;
    }
    f->made = 0;
}
