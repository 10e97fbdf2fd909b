/*
 * libcurl multi on a libevent loop (the socket/timer callback pattern of
 * curl's hiperfifo example), plus registry auth and TLS per host.
 *
 * Credentials go to curl through CURLOPT_USERNAME/PASSWORD or a Bearer
 * header; curl does not repeat either to another host after a redirect,
 * and nothing here enables CURLOPT_VERBOSE or logs a header.
 */
#include "oci/transport.h"

#include "oci/curl_lazy.h"
#include <stdarg.h>
#include <cjson/cJSON.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <mbedtls/sha256.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "funcd/funcd.h"
#include "funcd/sys/error.h"
#include "util/buf.h"
#include "util/log.h"
#include "util/misc.h"

#define ERRBODY_MAX 4096
#define TOKEN_BODY_MAX (64 * 1024)
#define TOKEN_DEFAULT_TTL_S 60

typedef struct token_entry {
    struct token_entry *next;
    char *key; /* host|scope|credential fingerprint */
    char *token;
    int64_t expires_ms;
} token_entry;

typedef struct sock_ctx {
    struct event ev;
    int added;
} sock_ctx;

struct oci_transport {
    struct event_base *loop;
    CURLM *multi;
    struct event timer;
    char *certs_dir;
    char **insecure;
    char **allowed; /* the operator's allow-list (empty: any non-internal address) */
    funcd_logger logger;
    char **basic_hosts; /* hosts that challenged with Basic: send it up front */
    size_t n_basic;
    long connect_timeout_ms, low_speed_s;
    funcd_oci_stats *stats;
    token_entry *tokens;
    oci_req *reqs; /* every live request, for free */
};

struct oci_req {
    oci_transport *t;
    oci_req *prev, *next;
    CURL *easy;
    struct curl_slist *hdrs;
    char *url, *host, *repository, *accept, *post;
    oci_creds creds;
    int fd;
    size_t max_body;
    uint64_t expect_size;
    oci_req_data_fn on_data;
    oci_req_done_fn done;
    void *ctx;
    int retried, completing, in_multi, head;
    int named;   /* the operator named this registry: it may be at any address */
    int blocked; /* a connection to an internal address was refused */
    int in_callback, zombie; /* cancelled inside its own data callback */
    oci_req *token_req; /* the token request this one waits for */
    oci_req *waiter;    /* for a token request: who waits for it */
    char *token_key;
    /* the response */
    long status;
    funcd_buf body, errbody;
    char *www_auth, *content_type, *docker_digest;
    mbedtls_sha256_context sha;
    uint64_t received;
    const char *sink_error;
    char errbuf[CURL_ERROR_SIZE];
};

void oci_creds_clear(oci_creds *c)
{
    if (!c)
        return;
    if (c->pass)
        explicit_bzero(c->pass, strlen(c->pass));
    if (c->identitytoken)
        explicit_bzero(c->identitytoken, strlen(c->identitytoken));
    free(c->user);
    free(c->pass);
    free(c->identitytoken);
    memset(c, 0, sizeof(*c));
}

int oci_creds_copy(oci_creds *to, const oci_creds *from)
{
    memset(to, 0, sizeof(*to));
    if (!from)
        return 0;
    to->user = funcd_strdup(from->user);
    to->pass = funcd_strdup(from->pass);
    to->identitytoken = funcd_strdup(from->identitytoken);
    if ((from->user && !to->user) || (from->pass && !to->pass) ||
        (from->identitytoken && !to->identitytoken)) {
        oci_creds_clear(to);
        return funcd_error_set(FUNCD_ENOMEM, "registry auth: out of memory");
    }
    return 0;
}

static int has_creds(const oci_creds *c)
{
    return (c->user && c->pass) || c->identitytoken;
}

/* ---- curl on libevent ------------------------------------------------------------ */

static void check_multi_info(oci_transport *t);

static void on_socket_event(evutil_socket_t fd, short what, void *arg)
{
    oci_transport *t = arg;
    int action = ((what & EV_READ) ? CURL_CSELECT_IN : 0) | ((what & EV_WRITE) ? CURL_CSELECT_OUT : 0);
    int running;
    curl_multi_socket_action(t->multi, fd, action, &running);
    check_multi_info(t);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    oci_transport *t = arg;
    int running;
    curl_multi_socket_action(t->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_multi_info(t);
}

static int curl_socket_cb(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    oci_transport *t = userp;
    sock_ctx *sc = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (sc) {
            if (sc->added)
                event_del(&sc->ev);
            free(sc);
            curl_multi_assign(t->multi, s, NULL);
        }
        return 0;
    }
    if (!sc) {
        if (!(sc = calloc(1, sizeof(*sc))))
            return -1;
        curl_multi_assign(t->multi, s, sc);
    } else if (sc->added) {
        event_del(&sc->ev);
    }
    short kind = EV_PERSIST | ((what & CURL_POLL_IN) ? EV_READ : 0) |
                 ((what & CURL_POLL_OUT) ? EV_WRITE : 0);
    event_assign(&sc->ev, t->loop, s, kind, on_socket_event, t);
    sc->added = event_add(&sc->ev, NULL) == 0;
    return 0;
}

static int curl_timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    oci_transport *t = userp;
    if (timeout_ms < 0) {
        evtimer_del(&t->timer);
        return 0;
    }
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    evtimer_add(&t->timer, &tv);
    return 0;
}

oci_transport *oci_transport_new(struct event_base *loop, const funcd_oci_client_options *o,
                                 funcd_oci_stats *stats)
{
    if (funcd__curl_load() < 0)
        return NULL;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        funcd_error_set(FUNCD_EIO, "registry client: libcurl failed to initialise");
        return NULL;
    }
    oci_transport *t = calloc(1, sizeof(*t));
    if (!t || !(t->multi = curl_multi_init())) {
        free(t);
        curl_global_cleanup();
        funcd_error_set(FUNCD_ENOMEM, "registry client: out of memory");
        return NULL;
    }
    t->loop = loop;
    t->stats = stats;
    t->certs_dir = funcd_strdup(o->certs_dir);
    size_t n = 0;
    while (o->insecure && o->insecure[n])
        n++;
    t->insecure = calloc(n + 1, sizeof(char *));
    for (size_t i = 0; t->insecure && i < n; i++)
        t->insecure[i] = funcd_strdup(o->insecure[i]);
    n = 0;
    while (o->allowed && o->allowed[n])
        n++;
    t->allowed = calloc(n + 1, sizeof(char *));
    for (size_t i = 0; t->allowed && i < n; i++)
        t->allowed[i] = funcd_strdup(o->allowed[i]);
    if (o->logger)
        t->logger = *o->logger;
    t->connect_timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 10000;
    t->low_speed_s = o->low_speed_timeout_s > 0 ? o->low_speed_timeout_s : 60;
    evtimer_assign(&t->timer, loop, on_timer, t);
    curl_multi_setopt(t->multi, CURLMOPT_SOCKETFUNCTION, curl_socket_cb);
    curl_multi_setopt(t->multi, CURLMOPT_SOCKETDATA, t);
    curl_multi_setopt(t->multi, CURLMOPT_TIMERFUNCTION, curl_timer_cb);
    curl_multi_setopt(t->multi, CURLMOPT_TIMERDATA, t);
    curl_multi_setopt(t->multi, CURLMOPT_MAX_HOST_CONNECTIONS,
                      (long)(o->max_connections_per_host ? o->max_connections_per_host : 6));
    return t;
}

static void req_free(oci_req *r);

void oci_transport_free(oci_transport *t)
{
    if (!t)
        return;
    while (t->reqs)
        req_free(t->reqs);
    evtimer_del(&t->timer);
    curl_multi_cleanup(t->multi);
    for (token_entry *e = t->tokens, *next; e; e = next) {
        next = e->next;
        free(e->key);
        explicit_bzero(e->token, strlen(e->token));
        free(e->token);
        free(e);
    }
    for (size_t i = 0; t->insecure && t->insecure[i]; i++)
        free(t->insecure[i]);
    free(t->insecure);
    for (size_t i = 0; t->allowed && t->allowed[i]; i++)
        free(t->allowed[i]);
    free(t->allowed);
    for (size_t i = 0; i < t->n_basic; i++)
        free(t->basic_hosts[i]);
    free(t->basic_hosts);
    free(t->certs_dir);
    free(t);
    curl_global_cleanup();
}

const char *oci_transport_scheme(const oci_transport *t, const char *host)
{
    for (size_t i = 0; t->insecure && t->insecure[i]; i++)
        if (strcasecmp(t->insecure[i], host) == 0)
            return "http";
    return "https";
}

/* ---- tokens -------------------------------------------------------------------------- */

static char *token_key(const oci_req *r)
{
    unsigned char sum[32];
    mbedtls_sha256_context c;
    mbedtls_sha256_init(&c);
    mbedtls_sha256_starts_ret(&c, 0);
    const char *parts[] = {r->creds.user, r->creds.pass, r->creds.identitytoken};
    for (size_t i = 0; i < 3; i++)
        mbedtls_sha256_update_ret(&c, (const unsigned char *)(parts[i] ? parts[i] : ""),
                                  strlen(parts[i] ? parts[i] : "") + 1);
    mbedtls_sha256_finish_ret(&c, sum);
    mbedtls_sha256_free(&c);
    funcd_buf b = FUNCD_BUF_INIT;
    funcd_buf_printf(&b, "%s|repository:%s:pull|", r->host, r->repository ? r->repository : "");
    for (size_t i = 0; i < 8; i++)
        funcd_buf_printf(&b, "%02x", sum[i]);
    return funcd_buf_detach(&b, NULL);
}

static token_entry **token_find(oci_transport *t, const char *key)
{
    token_entry **p = &t->tokens;
    while (*p && strcmp((*p)->key, key) != 0)
        p = &(*p)->next;
    return p;
}

static void token_drop(oci_transport *t, const char *key)
{
    token_entry **p = token_find(t, key), *e = *p;
    if (!e)
        return;
    *p = e->next;
    free(e->key);
    explicit_bzero(e->token, strlen(e->token));
    free(e->token);
    free(e);
}

static const char *token_lookup(oci_transport *t, const char *key)
{
    token_entry *e = *token_find(t, key);
    if (e && e->expires_ms <= funcd_mono_ms()) {
        token_drop(t, key);
        return NULL;
    }
    return e ? e->token : NULL;
}

static void token_store(oci_transport *t, const char *key, const char *token, double ttl_s)
{
    token_drop(t, key);
    token_entry *e = calloc(1, sizeof(*e));
    if (!e)
        return;
    e->key = funcd_strdup(key);
    e->token = funcd_strdup(token);
    if (!e->key || !e->token) {
        free(e->key);
        free(e->token);
        free(e);
        return;
    }
    /* Renew a little early so a token does not expire mid-request. */
    if (ttl_s < 1)
        ttl_s = TOKEN_DEFAULT_TTL_S;
    e->expires_ms = funcd_mono_ms() + (int64_t)(ttl_s * 1000) - 5000;
    e->next = t->tokens;
    t->tokens = e;
}

static int host_is_basic(const oci_transport *t, const char *host)
{
    for (size_t i = 0; i < t->n_basic; i++)
        if (strcmp(t->basic_hosts[i], host) == 0)
            return 1;
    return 0;
}

static void mark_basic(oci_transport *t, const char *host)
{
    if (host_is_basic(t, host))
        return;
    char **v = realloc(t->basic_hosts, (t->n_basic + 1) * sizeof(char *));
    if (!v)
        return;
    t->basic_hosts = v;
    if ((v[t->n_basic] = funcd_strdup(host)))
        t->n_basic++;
}

/* ---- requests ------------------------------------------------------------------------ */

static void reset_response(oci_req *r)
{
    r->status = 0;
    funcd_buf_reset(&r->body);
    funcd_buf_reset(&r->errbody);
    free(r->www_auth);
    free(r->content_type);
    free(r->docker_digest);
    r->www_auth = r->content_type = r->docker_digest = NULL;
    mbedtls_sha256_free(&r->sha);
    mbedtls_sha256_init(&r->sha);
    mbedtls_sha256_starts_ret(&r->sha, 0);
    r->received = 0;
    r->sink_error = NULL;
    r->errbuf[0] = 0;
    if (r->fd >= 0) {
        if (ftruncate(r->fd, 0) < 0 || lseek(r->fd, 0, SEEK_SET) < 0)
            r->sink_error = "cannot rewind the blob file";
    }
}

static int response_is_success(oci_req *r)
{
    long code = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &code);
    return code >= 200 && code < 300;
}

static int sink_file(oci_req *r, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(r->fd, p, n);
        if (w < 0) {
            r->sink_error = "cannot write the blob to the cache (disk full?)";
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *arg)
{
    oci_req *r = arg;
    size_t n = size * nmemb;
    if (!response_is_success(r)) {
        if (r->errbody.len < ERRBODY_MAX)
            funcd_buf_append(&r->errbody, p, n < ERRBODY_MAX ? n : ERRBODY_MAX);
        return n;
    }
    if (r->fd < 0 && r->body.len + n > r->max_body) {
        r->sink_error = "the response is larger than allowed";
        return 0;
    }
    if (r->fd >= 0 && r->received + n > r->expect_size) {
        r->sink_error = "the blob is larger than its descriptor says";
        return 0;
    }
    if (r->fd >= 0 ? sink_file(r, p, n) < 0 : funcd_buf_append(&r->body, p, n) < 0) {
        if (!r->sink_error)
            r->sink_error = "out of memory";
        return 0;
    }
    mbedtls_sha256_update_ret(&r->sha, (const unsigned char *)p, n);
    r->received += n;
    if (r->t->stats && r->fd >= 0)
        r->t->stats->bytes_downloaded += n;
    if (r->on_data) {
        r->in_callback = 1;
        r->on_data(r, n, r->ctx);
        r->in_callback = 0;
    }
    /* A cancel from inside on_data: abort; check_multi_info frees it. */
    return r->zombie ? 0 : n;
}

static char *header_value(const char *line, size_t n, const char *name)
{
    size_t nl = strlen(name);
    if (n <= nl || strncasecmp(line, name, nl) != 0 || line[nl] != ':')
        return NULL;
    const char *v = line + nl + 1, *end = line + n;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
        end--;
    return funcd_strndup(v, (size_t)(end - v));
}

static void keep_header(char **slot, char *value)
{
    if (!value)
        return;
    free(*slot);
    *slot = value;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *arg)
{
    oci_req *r = arg;
    size_t n = size * nmemb;
    if (n >= 5 && strncmp(p, "HTTP/", 5) == 0) {
        /* A new response (after a redirect): forget the previous one's headers. */
        free(r->www_auth);
        free(r->content_type);
        free(r->docker_digest);
        r->www_auth = r->content_type = r->docker_digest = NULL;
        return n;
    }
    char *v;
    if ((v = header_value(p, n, "WWW-Authenticate")) && r->www_auth && strncasecmp(v, "Bearer", 6))
        free(v); /* keep the first (Bearer preferred) challenge */
    else
        keep_header(&r->www_auth, v);
    keep_header(&r->content_type, header_value(p, n, "Content-Type"));
    keep_header(&r->docker_digest, header_value(p, n, "Docker-Content-Digest"));
    return n;
}

static void configure_tls(oci_req *r)
{
    if (!r->t->certs_dir || strncmp(r->url, "https://", 8) != 0)
        return;
    /* The host of this URL (a token realm can live elsewhere). */
    const char *h = r->url + 8;
    size_t hl = strcspn(h, "/?#");
    char host[300];
    if (hl >= sizeof(host) - 1)
        return;
    memcpy(host, h, hl);
    host[hl] = 0;
    funcd_buf p = FUNCD_BUF_INIT;
    struct stat st;
    funcd_buf_printf(&p, "%s/%s/ca.crt", r->t->certs_dir, host);
    if (stat(p.data, &st) == 0) {
        curl_easy_setopt(r->easy, CURLOPT_CAINFO, p.data);
        if (stat("/etc/ssl/certs", &st) == 0)
            curl_easy_setopt(r->easy, CURLOPT_CAPATH, "/etc/ssl/certs");
    }
    funcd_buf_reset(&p);
    funcd_buf_printf(&p, "%s/%s/client.cert", r->t->certs_dir, host);
    if (stat(p.data, &st) == 0) {
        curl_easy_setopt(r->easy, CURLOPT_SSLCERT, p.data);
        funcd_buf_reset(&p);
        funcd_buf_printf(&p, "%s/%s/client.key", r->t->certs_dir, host);
        curl_easy_setopt(r->easy, CURLOPT_SSLKEY, p.data);
    }
    funcd_buf_free(&p);
}

static int req_submit(oci_req *r)
{
    oci_transport *t = r->t;
    curl_slist_free_all(r->hdrs);
    r->hdrs = NULL;
    reset_response(r);
    curl_easy_setopt(r->easy, CURLOPT_USERNAME, NULL);
    curl_easy_setopt(r->easy, CURLOPT_PASSWORD, NULL);
    funcd_buf h = FUNCD_BUF_INIT;
    if (r->accept) {
        funcd_buf_printf(&h, "Accept: %s", r->accept);
        r->hdrs = curl_slist_append(r->hdrs, h.data);
    }
    const char *token = r->waiter ? NULL : token_lookup(t, r->token_key);
    int basic = r->waiter ? r->creds.user && r->creds.pass && !r->post
                          : !token && host_is_basic(t, r->host) && r->creds.user && r->creds.pass;
    if (token) {
        funcd_buf_reset(&h);
        funcd_buf_printf(&h, "Authorization: Bearer %s", token);
        r->hdrs = curl_slist_append(r->hdrs, h.data);
        explicit_bzero(h.data, h.len);
    }
    funcd_buf_free(&h);
    if (basic) {
        curl_easy_setopt(r->easy, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(r->easy, CURLOPT_USERNAME, r->creds.user);
        curl_easy_setopt(r->easy, CURLOPT_PASSWORD, r->creds.pass);
    }
    curl_easy_setopt(r->easy, CURLOPT_HTTPHEADER, r->hdrs);
    if (curl_multi_add_handle(t->multi, r->easy) != CURLM_OK)
        return funcd_error_set(FUNCD_EIO, "registry %s: cannot start a request", r->host);
    r->in_multi = 1;
    return 0;
}

/* Every connection, redirects and token realms included: an address that
 * is internal (loopback, link-local...) is refused unless the operator
 * named the registry. The resolved address is checked, not the name. */
static curl_socket_t open_socket(void *clientp, curlsocktype purpose, struct curl_sockaddr *a)
{
    oci_req *r = clientp;
    if (!r->named && funcd_oci_addr_is_internal(&a->addr)) {
        r->blocked = 1;
        return CURL_SOCKET_BAD;
    }
    return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

static int req_setup(oci_req *r)
{
    CURL *e = r->easy;
    curl_easy_setopt(e, CURLOPT_URL, r->url);
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, open_socket);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, r);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, r->t->connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, r->t->low_speed_s);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "funcd/" FUNCD_VERSION_STRING);
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 256L * 1024);
    if (r->post)
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->post);
    if (r->head)
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    configure_tls(r);
    return 0;
}

static oci_req *req_alloc(oci_transport *t, const oci_req_spec *s, oci_req_done_fn done, void *ctx)
{
    oci_req *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->t = t;
    r->fd = s->fd;
    r->max_body = s->max_body ? s->max_body : 4u << 20;
    r->expect_size = s->expect_size;
    r->on_data = s->on_data;
    r->head = s->head;
    r->done = done;
    r->ctx = ctx;
    mbedtls_sha256_init(&r->sha);
    r->url = funcd_strdup(s->url);
    r->host = funcd_strdup(s->host);
    r->repository = funcd_strdup(s->repository);
    r->accept = s->accept ? funcd_strdup(s->accept) : NULL;
    for (char **a = t->insecure; a && *a && !r->named; a++)
        r->named = funcd_oci_registry_matches(*a, s->host);
    for (char **a = t->allowed; a && *a && !r->named; a++)
        r->named = funcd_oci_registry_matches(*a, s->host);
    r->easy = curl_easy_init();
    r->next = t->reqs;
    if (t->reqs)
        t->reqs->prev = r;
    t->reqs = r;
    if (!r->url || !r->host || !r->easy || (s->accept && !r->accept) ||
        oci_creds_copy(&r->creds, s->creds) < 0 || !(r->token_key = token_key(r))) {
        req_free(r);
        return NULL;
    }
    return r;
}

int oci_req_start(oci_transport *t, const oci_req_spec *s, oci_req_done_fn done, void *ctx,
                  oci_req **out)
{
    char why[400];
    if (!funcd_oci_registry_allowed(s->host, (const char *const *)t->allowed,
                                    (const char *const *)t->insecure, why, sizeof(why)))
        return funcd_error_set(FUNCD_EINVAL, "%s", why);
    oci_req *r = req_alloc(t, s, done, ctx);
    if (!r)
        return funcd_error_set(FUNCD_ENOMEM, "registry client: out of memory");
    req_setup(r);
    int rc = req_submit(r);
    if (rc < 0) {
        req_free(r);
        return rc;
    }
    if (out)
        *out = r;
    return 0;
}

static void req_free(oci_req *r)
{
    oci_transport *t = r->t;
    if (r->token_req) {
        r->token_req->waiter = NULL;
        req_free(r->token_req);
    }
    if (r->waiter)
        r->waiter->token_req = NULL;
    if (r->in_multi)
        curl_multi_remove_handle(t->multi, r->easy);
    if (r->easy)
        curl_easy_cleanup(r->easy);
    curl_slist_free_all(r->hdrs);
    if (r->prev)
        r->prev->next = r->next;
    else
        t->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    free(r->url);
    free(r->host);
    free(r->repository);
    free(r->accept);
    if (r->post)
        explicit_bzero(r->post, strlen(r->post));
    free(r->post);
    free(r->token_key);
    oci_creds_clear(&r->creds);
    funcd_buf_free(&r->body);
    funcd_buf_free(&r->errbody);
    free(r->www_auth);
    free(r->content_type);
    free(r->docker_digest);
    mbedtls_sha256_free(&r->sha);
    free(r);
}

void oci_req_cancel(oci_req *r)
{
    if (!r || r->completing)
        return;
    if (r->in_callback) {
        /* curl forbids removing a handle from inside its own callback. */
        r->zombie = 1;
        r->done = NULL;
        r->on_data = NULL;
        r->fd = -1;
        return;
    }
    req_free(r);
}

static void req_complete(oci_req *r, int rc, const char *message)
{
    r->completing = 1;
    if (r->done)
        r->done(r, rc, message, r->ctx);
    req_free(r);
}

static void req_fail(oci_req *r, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void req_fail(oci_req *r, int rc, const char *fmt, ...)
{
    funcd_buf m = FUNCD_BUF_INIT;
    va_list ap;
    va_start(ap, fmt);
    funcd_buf_vprintf(&m, fmt, ap);
    va_end(ap);
    req_complete(r, rc, m.data ? m.data : "registry request failed");
    funcd_buf_free(&m);
}

static void fail_unauthorized(oci_req *r)
{
    if (has_creds(&r->creds))
        req_fail(r, FUNCD_EINVAL, "registry %s refused the credentials for %s", r->host,
                 r->repository);
    else
        req_fail(r, FUNCD_EINVAL,
                 "registry %s requires credentials for %s and none are configured "
                 "(imagePullSecrets or --registry-auth-file)",
                 r->host, r->repository);
}

static void resubmit(oci_req *r)
{
    if (req_submit(r) < 0)
        req_fail(r, FUNCD_EIO, "%s", funcd_error_last()->message);
}

static void on_token(oci_req *tr, int rc, const char *message, void *ctx)
{
    oci_req *r = tr->waiter;
    if (!r)
        return;
    r->token_req = NULL;
    tr->waiter = NULL;
    if (rc < 0) {
        req_fail(r, rc, "%s", message);
        return;
    }
    if (tr->status == 401 || tr->status == 403) {
        fail_unauthorized(r);
        return;
    }
    size_t len;
    const char *body = oci_req_body(tr, &len);
    cJSON *j = tr->status == 200 ? cJSON_ParseWithLength(body, len) : NULL;
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(j, "token");
    if (!cJSON_IsString(tok) || !tok->valuestring[0])
        tok = cJSON_GetObjectItemCaseSensitive(j, "access_token");
    if (!cJSON_IsString(tok) || !tok->valuestring[0]) {
        cJSON_Delete(j);
        req_fail(r, FUNCD_EIO, "registry %s: its token service answered %ld without a token",
                 r->host, tr->status);
        return;
    }
    const cJSON *ttl = cJSON_GetObjectItemCaseSensitive(j, "expires_in");
    token_store(r->t, r->token_key, tok->valuestring, cJSON_IsNumber(ttl) ? ttl->valuedouble : 0);
    cJSON_Delete(j);
    resubmit(r);
}

static char *token_url(oci_req *r, const funcd_www_authenticate *w, char **post)
{
    funcd_buf u = FUNCD_BUF_INIT, q = FUNCD_BUF_INIT;
    char *service = curl_easy_escape(r->easy, w->service ? w->service : "", 0);
    funcd_buf scope = FUNCD_BUF_INIT;
    funcd_buf_printf(&scope, "repository:%s:pull", r->repository);
    char *scope_e = curl_easy_escape(r->easy, scope.data, 0);
    funcd_buf_free(&scope);
    if (w->service)
        funcd_buf_printf(&q, "service=%s&", service);
    funcd_buf_printf(&q, "scope=%s", scope_e);
    if (r->creds.identitytoken) {
        /* OAuth2 refresh-token grant, as Docker sends an identity token. */
        char *rt = curl_easy_escape(r->easy, r->creds.identitytoken, 0);
        funcd_buf p = FUNCD_BUF_INIT;
        funcd_buf_printf(&p, "grant_type=refresh_token&client_id=funcd&%s&refresh_token=%s",
                         q.data, rt);
        explicit_bzero(rt, strlen(rt));
        curl_free(rt);
        *post = funcd_buf_detach(&p, NULL);
        funcd_buf_puts(&u, w->realm);
    } else {
        funcd_buf_printf(&u, "%s%c%s", w->realm, strchr(w->realm, '?') ? '&' : '?', q.data);
    }
    curl_free(service);
    curl_free(scope_e);
    funcd_buf_free(&q);
    return funcd_buf_detach(&u, NULL);
}

/* Credentials go to a plain-HTTP realm only on a host named insecure (loopback). */
static int realm_may_be_plain(const oci_transport *t, const char *realm)
{
    if (strncmp(realm, "http://", 7) != 0)
        return 0;
    char host[300];
    size_t n = strcspn(realm + 7, "/?#");
    if (n >= sizeof(host))
        return 0;
    memcpy(host, realm + 7, n);
    host[n] = 0;
    return strcmp(oci_transport_scheme(t, host), "http") == 0;
}

static void start_token_request(oci_req *r, const funcd_www_authenticate *w)
{
    if (strncmp(w->realm, "https://", 8) != 0 && !realm_may_be_plain(r->t, w->realm)) {
        req_fail(r, FUNCD_EIO,
                 "registry %s: its token realm \"%s\" is not an https URL (plain HTTP only "
                 "for a registry named insecure)",
                 r->host, w->realm);
        return;
    }
    char *post = NULL;
    char *url = token_url(r, w, &post);
    oci_req_spec s = {.url = url, .host = r->host, .repository = r->repository,
                      .creds = &r->creds, .fd = -1, .max_body = TOKEN_BODY_MAX};
    oci_req *tr = req_alloc(r->t, &s, on_token, NULL);
    free(url);
    if (!tr) {
        free(post);
        req_fail(r, FUNCD_ENOMEM, "registry client: out of memory");
        return;
    }
    tr->post = post;
    tr->waiter = r;
    r->token_req = tr;
    req_setup(tr);
    if (r->t->stats)
        r->t->stats->token_requests++;
    if (req_submit(tr) < 0) {
        r->token_req = NULL;
        tr->waiter = NULL;
        req_free(tr);
        req_fail(r, FUNCD_EIO, "registry %s: cannot start the token request", r->host);
    }
}

/* 401: answer the challenge once; a second 401 means the credentials are wrong. */
static void on_unauthorized(oci_req *r)
{
    funcd_www_authenticate w;
    if (r->retried || !r->www_auth || funcd_www_authenticate_parse(&w, r->www_auth) < 0) {
        fail_unauthorized(r);
        return;
    }
    r->retried = 1;
    if (strcasecmp(w.scheme, "Bearer") == 0 && w.realm) {
        token_drop(r->t, r->token_key);
        start_token_request(r, &w);
    } else if (strcasecmp(w.scheme, "Basic") == 0 && r->creds.user && r->creds.pass) {
        mark_basic(r->t, r->host);
        resubmit(r);
    } else {
        fail_unauthorized(r);
    }
    funcd_www_authenticate_free(&w);
}

static void on_transfer_done(oci_req *r, CURLcode code)
{
    if (r->zombie) {
        req_free(r);
        return;
    }
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->status);
    if (r->sink_error) {
        req_fail(r, FUNCD_EIO, "registry %s: %s: %s", r->host, r->url, r->sink_error);
        return;
    }
    if (code != CURLE_OK && r->blocked) {
        req_fail(r, FUNCD_EINVAL, "registry %s: a connection to a loopback or link-local "
                 "address was refused (the operator names such a registry with funcd "
                 "--insecure-registry or --allowed-registry)", r->host);
        return;
    }
    if (code != CURLE_OK) {
        /* Whether the port was closed, silent, not TLS or TLS with another
         * CA is the operator's to know, not the tenant's: a pull must not
         * be a port scanner. The detail goes to funcd's log. */
        const char *hint = code == CURLE_PEER_FAILED_VERIFICATION ||
                                   code == CURLE_SSL_CACERT_BADFILE
                               ? "; if its certificate is from a private CA, put the CA in "
                                 "<certs-dir>/<host:port>/ca.crt (--registry-certs-dir)"
                               : "";
        funcd_log(&r->t->logger, FUNCD_LOG_WARN, "registry %s: %s (%s)%s", r->host,
                  curl_easy_strerror(code), r->errbuf[0] ? r->errbuf : r->url, hint);
        req_fail(r, code == CURLE_OPERATION_TIMEDOUT ? FUNCD_ETIMEOUT : FUNCD_EIO,
                 "cannot reach registry %s", r->host);
        return;
    }
    long redirects = 0;
    if (r->status == 401 && !r->waiter &&
        curl_easy_getinfo(r->easy, CURLINFO_REDIRECT_COUNT, &redirects) == CURLE_OK &&
        redirects > 0) {
        /* Where the registry sent the download (a CDN, a bucket) asks for
         * credentials of its own: the registry's go to the registry only. */
        req_fail(r, FUNCD_EIO, "registry %s: a download it redirected elsewhere was answered "
                 "401 there; the registry's credentials are not sent to another place", r->host);
        return;
    }
    if (r->status == 401 && !r->waiter) {
        on_unauthorized(r);
        return;
    }
    req_complete(r, 0, NULL);
}

static void check_multi_info(oci_transport *t)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(t->multi, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        CURL *easy = msg->easy_handle;
        CURLcode code = msg->data.result;
        oci_req *r = NULL;
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&r);
        curl_multi_remove_handle(t->multi, easy);
        if (!r)
            continue;
        r->in_multi = 0;
        on_transfer_done(r, code);
    }
}

long oci_req_status(const oci_req *r)
{
    return r->status;
}

const char *oci_req_body(const oci_req *r, size_t *len)
{
    if (len)
        *len = r->body.len;
    return r->body.data ? r->body.data : "";
}

const char *oci_req_content_type(const oci_req *r)
{
    return r->content_type;
}

const char *oci_req_docker_digest(const oci_req *r)
{
    return r->docker_digest;
}

void oci_req_body_digest(oci_req *r, char out[72])
{
    unsigned char sum[32];
    mbedtls_sha256_finish_ret(&r->sha, sum);
    memcpy(out, "sha256:", 7);
    funcd_hex(sum, sizeof(sum), out + 7);
}

uint64_t oci_req_received(const oci_req *r)
{
    return r->received;
}
