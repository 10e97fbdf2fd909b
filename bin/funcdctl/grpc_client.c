/*
 * One unary gRPC call: connect, hand nghttp2 the request (HEADERS, then one
 * DATA frame's worth of length-prefixed message), and pump bytes between
 * the socket and nghttp2's memory API with poll() until the stream closes
 * or the deadline passes. The socket is non-blocking only so that a silent
 * runner cannot hold funcdctl past the deadline.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "funcd/funcd.h"
#include "grpc_client.h"
#include "util/misc.h"

#define DEFAULT_PORT "9445"
#define CONNECT_TIMEOUT_MS 10000
#define DEADLINE_GRACE_MS 1000 /* the runner's own DEADLINE_EXCEEDED should win */
#define PREFIX_LEN 5
#define WINDOW (16 << 20)      /* big windows: a 6 MiB answer in few round trips */

/* ---- status names, timeouts, percent-decoding ---------------------------- */

static const char *const status_names[] = {
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED",
};

const char *ctl_grpc_status_name(int status)
{
    if (status == CTL_GRPC_TRANSPORT)
        return "TRANSPORT";
    if (status < 0 || (size_t)status >= sizeof(status_names) / sizeof(status_names[0]))
        return "UNKNOWN_CODE";
    return status_names[status];
}

void ctl_grpc_timeout_value(int64_t ms, char *out, size_t len)
{
    /* gRPC allows at most 8 digits: fall back to coarser units. */
    if (ms < 100000000)
        snprintf(out, len, "%lldm", (long long)(ms < 1 ? 1 : ms));
    else if (ms / 1000 < 100000000)
        snprintf(out, len, "%lldS", (long long)(ms / 1000));
    else if (ms / 3600000 < 100000000)
        snprintf(out, len, "%lldH", (long long)(ms / 3600000));
    else
        snprintf(out, len, "99999999H");
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int ctl_grpc_percent_decode(const char *s, size_t len, funcd_buf *out)
{
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '%' && i + 2 < len && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
            c = (char)(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
            i += 2;
        }
        if (funcd_buf_append(out, &c, 1) != 0)
            return -1;
    }
    return 0;
}

/* ---- protobuf wire format ------------------------------------------------- */

static int put_varint(funcd_buf *b, uint64_t v)
{
    uint8_t tmp[10];
    size_t n = 0;
    do {
        tmp[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            tmp[n] |= 0x80;
        n++;
    } while (v);
    return funcd_buf_append(b, tmp, n);
}

int ctl_pb_put_bytes(funcd_buf *b, uint32_t number, const void *data, size_t len)
{
    if (len == 0)
        return 0;
    if (put_varint(b, ((uint64_t)number << 3) | CTL_PB_LEN) != 0 || put_varint(b, len) != 0)
        return -1;
    return funcd_buf_append(b, data, len);
}

static int get_varint(ctl_pb_reader *r, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end)
            return -1;
        uint8_t byte = *r->p++;
        v |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1; /* more than 10 bytes */
}

static int get_fixed(ctl_pb_reader *r, size_t n, uint64_t *out)
{
    if ((size_t)(r->end - r->p) < n)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)r->p[i] << (8 * i);
    r->p += n;
    *out = v;
    return 0;
}

int ctl_pb_next(ctl_pb_reader *r, ctl_pb_field *f)
{
    uint64_t key, len;
    if (r->p >= r->end)
        return 0;
    if (get_varint(r, &key) != 0 || (key >> 3) == 0 || (key >> 3) > 0x1fffffff)
        return -1;
    memset(f, 0, sizeof(*f));
    f->number = (uint32_t)(key >> 3);
    f->wire_type = (int)(key & 7);
    switch (f->wire_type) {
    case CTL_PB_VARINT:
        return get_varint(r, &f->value) == 0 ? 1 : -1;
    case CTL_PB_FIXED64:
        return get_fixed(r, 8, &f->value) == 0 ? 1 : -1;
    case CTL_PB_FIXED32:
        return get_fixed(r, 4, &f->value) == 0 ? 1 : -1;
    case CTL_PB_LEN:
        if (get_varint(r, &len) != 0 || len > (uint64_t)(r->end - r->p))
            return -1;
        f->data = r->p;
        f->len = (size_t)len;
        r->p += len;
        return 1;
    default:
        return -1;
    }
}

/* ---- where to connect ----------------------------------------------------- */

typedef struct endpoint {
    char host[256];
    char port[16];
    char authority[300];
    char unix_path[108]; /* "unix:/path": a Unix socket, host and port unused */
    int tls;             /* "https://", or no scheme and a CA file given */
} endpoint;

static int parse_addr(const char *addr, const char *cacert, endpoint *ep)
{
    const char *s = addr;
    ep->tls = 0;
    if (!strncmp(s, "unix:", 5)) {
        if (!s[5] || strlen(s + 5) >= sizeof(ep->unix_path))
            return -1;
        snprintf(ep->unix_path, sizeof(ep->unix_path), "%s", s + 5);
        snprintf(ep->authority, sizeof(ep->authority), "localhost");
        return 0;
    }
    ep->unix_path[0] = '\0';
    if (!strncmp(s, "http://", 7))
        s += 7;
    else if (!strncmp(s, "https://", 8))
        s += 8, ep->tls = 1;
    else if (cacert && *cacert)
        ep->tls = 1;
    size_t n = strcspn(s, "/");
    const char *host = s, *port = NULL;
    size_t host_len = n;
    if (*s == '[') {
        const char *close = memchr(s, ']', n);
        if (!close)
            return -1;
        host = s + 1;
        host_len = (size_t)(close - host);
        if (close + 1 < s + n && close[1] == ':')
            port = close + 2;
    } else {
        const char *colon = memchr(s, ':', n);
        if (colon && !memchr(colon + 1, ':', (size_t)(s + n - colon - 1))) {
            host_len = (size_t)(colon - s);
            port = colon + 1;
        }
    }
    size_t port_len = port ? (size_t)(s + n - port) : 0;
    if (host_len >= sizeof(ep->host) || port_len >= sizeof(ep->port) ||
        (port && port_len == 0))
        return -1;
    snprintf(ep->host, sizeof(ep->host), "%.*s", (int)host_len, host);
    snprintf(ep->port, sizeof(ep->port), "%.*s", (int)port_len, port ? port : "");
    if (!ep->port[0])
        snprintf(ep->port, sizeof(ep->port), "%s", DEFAULT_PORT);
    /* "every address" is where a server listens, not where a client goes. */
    if (!ep->host[0] || !strcmp(ep->host, "0.0.0.0"))
        snprintf(ep->host, sizeof(ep->host), "127.0.0.1");
    else if (!strcmp(ep->host, "::"))
        snprintf(ep->host, sizeof(ep->host), "::1");
    int v6 = strchr(ep->host, ':') != NULL;
    snprintf(ep->authority, sizeof(ep->authority), "%s%s%s:%s", v6 ? "[" : "", ep->host,
             v6 ? "]" : "", ep->port);
    return 0;
}

static int remaining_ms(int64_t deadline)
{
    if (deadline == 0)
        return -1;
    int64_t left = deadline - funcd_mono_ms();
    return left <= 0 ? 0 : left > 3600000 ? 3600000 : (int)left;
}

static int connect_one(const struct addrinfo *ai, int64_t deadline, int *err)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    ai->ai_protocol);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
        *err = errno;
        close(fd);
        return -1;
    }
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    int ready = poll(&pfd, 1, remaining_ms(deadline));
    socklen_t len = sizeof(*err);
    *err = ETIMEDOUT;
    if (ready == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, err, &len) == 0 && *err == 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return fd;
    }
    close(fd);
    return -1;
}

/* A connected socket, or -1 with the reason in `why`. */
static int dial(const endpoint *ep, int64_t deadline, funcd_buf *why)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *list = NULL;
    if (ep->unix_path[0]) {
        struct sockaddr_un sun = {.sun_family = AF_UNIX};
        memcpy(sun.sun_path, ep->unix_path, strlen(ep->unix_path) + 1);
        struct addrinfo ai = {.ai_family = AF_UNIX, .ai_socktype = SOCK_STREAM,
                              .ai_addr = (struct sockaddr *)&sun, .ai_addrlen = sizeof(sun)};
        int err = 0, fd = connect_one(&ai, deadline ? deadline : funcd_mono_ms() +
                                      CONNECT_TIMEOUT_MS, &err);
        if (fd < 0)
            funcd_buf_printf(why, "%s: %s", ep->unix_path, strerror(err));
        return fd;
    }
    int rc = getaddrinfo(ep->host, ep->port, &hints, &list);
    if (rc != 0) {
        funcd_buf_printf(why, "cannot resolve %s: %s", ep->host, gai_strerror(rc));
        return -1;
    }
    int64_t connect_deadline = funcd_mono_ms() + CONNECT_TIMEOUT_MS;
    if (deadline && deadline < connect_deadline)
        connect_deadline = deadline;
    int fd = -1, err = 0;
    for (struct addrinfo *ai = list; ai && fd < 0; ai = ai->ai_next)
        fd = connect_one(ai, connect_deadline, &err);
    freeaddrinfo(list);
    if (fd < 0)
        funcd_buf_printf(why, "%s", strerror(err));
    return fd;
}

/* ---- TLS ------------------------------------------------------------------ */

/* The handshake over the connected non-blocking socket, verifying the
 * runner's certificate against `cacert` (NULL: the system's CAs) and its
 * name or address, offering ALPN h2. NULL with `why` set. */
static SSL *tls_handshake(int fd, const endpoint *ep, const char *cacert, int64_t deadline,
                          funcd_buf *why)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    SSL *ssl = ctx ? SSL_new(ctx) : NULL;
    SSL_CTX_free(ctx); /* the SSL keeps its own reference */
    if (!ssl)
        return funcd_buf_puts(why, "cannot start TLS (out of memory?)"), NULL;
    SSL_set_min_proto_version(ssl, TLS1_2_VERSION);
    SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    int ca_ok = cacert && *cacert ? SSL_CTX_load_verify_locations(SSL_get_SSL_CTX(ssl), cacert,
                                                                  NULL)
                                  : SSL_CTX_set_default_verify_paths(SSL_get_SSL_CTX(ssl));
    if (ca_ok != 1) {
        funcd_buf_printf(why, "cannot use the CA file %s: %s", cacert ? cacert : "(system)",
                         ERR_reason_error_string(ERR_peek_last_error()));
        SSL_free(ssl);
        return NULL;
    }
    unsigned char ip[16];
    int is_ip = inet_pton(AF_INET, ep->host, ip) == 1 || inet_pton(AF_INET6, ep->host, ip) == 1;
    X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
    if (is_ip)
        X509_VERIFY_PARAM_set1_ip_asc(param, ep->host);
    else {
        SSL_set_tlsext_host_name(ssl, ep->host);
        SSL_set1_host(ssl, ep->host);
    }
    SSL_set_verify(ssl, SSL_VERIFY_PEER, NULL);
    SSL_set_alpn_protos(ssl, (const unsigned char *)"\x02h2", 3);
    SSL_set_fd(ssl, fd);
    for (;;) {
        ERR_clear_error();
        int r = SSL_connect(ssl);
        if (r == 1)
            return ssl;
        int e = SSL_get_error(ssl, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
            struct pollfd pfd = {.fd = fd, .events = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT};
            int ready = poll(&pfd, 1, remaining_ms(deadline ? deadline
                                                            : funcd_mono_ms() + CONNECT_TIMEOUT_MS));
            if (ready > 0 || (ready < 0 && errno == EINTR))
                continue;
            funcd_buf_puts(why, "the TLS handshake did not finish in time");
            break;
        }
        long v = SSL_get_verify_result(ssl);
        if (v != X509_V_OK)
            funcd_buf_printf(why, "its TLS certificate is not trusted: %s (give the CA that "
                             "signed it, or funcd's self-signed certificate, with --cacert "
                             "FILE or FUNCD_CACERT)", X509_verify_cert_error_string(v));
        else {
            unsigned long err = ERR_peek_last_error();
            funcd_buf_printf(why, "the TLS handshake failed: %s (does the runner serve TLS? "
                             "without it, drop https:// and --cacert)",
                             err ? ERR_reason_error_string(err) : "the connection closed");
        }
        break;
    }
    SSL_free(ssl);
    return NULL;
}

/* send/recv through TLS when `ssl` is set: -1 with errno EAGAIN when
 * OpenSSL waits for the socket, 0 at the end of the stream. */
static ssize_t io_send(int fd, SSL *ssl, const void *buf, size_t len)
{
    if (!ssl)
        return send(fd, buf, len, MSG_NOSIGNAL);
    int n = SSL_write(ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
    if (n > 0)
        return n;
    int e = SSL_get_error(ssl, n);
    errno = e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? EAGAIN : EPIPE;
    return -1;
}

static ssize_t io_recv(int fd, SSL *ssl, void *buf, size_t len)
{
    if (!ssl)
        return recv(fd, buf, len, 0);
    int n = SSL_read(ssl, buf, (int)len);
    if (n > 0)
        return n;
    int e = SSL_get_error(ssl, n);
    if (e == SSL_ERROR_ZERO_RETURN)
        return 0;
    if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 && errno == 0)
        return 0; /* closed without close_notify */
    errno = e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? EAGAIN : ECONNRESET;
    return -1;
}

/* ---- the call ------------------------------------------------------------- */

typedef struct call_state {
    const ctl_grpc_call *call;
    ctl_grpc_result *out;
    funcd_buf frame; /* the length-prefixed request message */
    size_t sent;
    int32_t stream_id;
    int http_status;     /* 0 until the response headers came */
    int grpc_status;     /* -1 until seen (headers of a trailers-only answer, or trailers) */
    int content_type_ok;
    int closed;
    uint32_t close_error;
    int http1_only;      /* the server sent GOAWAY HTTP_1_1_REQUIRED */
    int too_large;
    funcd_buf body;      /* DATA as it came, prefix included */
} call_state;

static ssize_t read_request(nghttp2_session *session, int32_t stream_id, uint8_t *buf,
                            size_t length, uint32_t *data_flags, nghttp2_data_source *source,
                            void *user_data)
{
    call_state *st = user_data;
    size_t n = st->frame.len - st->sent;
    if (n > length)
        n = length;
    memcpy(buf, st->frame.data + st->sent, n);
    st->sent += n;
    if (st->sent == st->frame.len)
        *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static int is_grpc_type(const uint8_t *v, size_t len)
{
    static const char type[] = "application/grpc";
    size_t n = sizeof(type) - 1;
    return len >= n && !memcmp(v, type, n) && (len == n || v[n] == '+' || v[n] == ';');
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user_data)
{
    call_state *st = user_data;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->hd.stream_id != st->stream_id)
        return 0;
#define IS(lit) (namelen == sizeof(lit) - 1 && !memcmp(name, lit, namelen))
    if (IS(":status")) {
        st->http_status = atoi((const char *)value);
    } else if (IS("content-type")) {
        st->content_type_ok = is_grpc_type(value, valuelen);
    } else if (IS("grpc-status")) {
        char digits[12];
        snprintf(digits, sizeof(digits), "%.*s", (int)(valuelen < 11 ? valuelen : 11),
                 (const char *)value);
        st->grpc_status = atoi(digits);
    } else if (IS("grpc-message")) {
        funcd_buf_reset(&st->out->message);
        ctl_grpc_percent_decode((const char *)value, valuelen, &st->out->message);
    }
#undef IS
    return 0;
}

static int on_data(nghttp2_session *session, uint8_t flags, int32_t stream_id,
                   const uint8_t *data, size_t len, void *user_data)
{
    call_state *st = user_data;
    if (stream_id != st->stream_id || st->too_large)
        return 0;
    if (st->body.len + len > st->call->max_response + PREFIX_LEN ||
        funcd_buf_append(&st->body, data, len) != 0) {
        st->too_large = 1;
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_CANCEL);
    }
    return 0;
}

static int on_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
                    void *user_data)
{
    call_state *st = user_data;
    if (stream_id == st->stream_id) {
        st->closed = 1;
        st->close_error = error_code;
    }
    return 0;
}

static int on_frame(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
    call_state *st = user_data;
    (void)session;
    if (frame->hd.type == NGHTTP2_GOAWAY && frame->goaway.error_code == NGHTTP2_HTTP_1_1_REQUIRED)
        st->http1_only = 1;
    return 0;
}

static int new_session(call_state *st, nghttp2_session **out)
{
    nghttp2_session_callbacks *cbs;
    if (nghttp2_session_callbacks_new(&cbs) != 0)
        return -1;
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_close);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame);
    int rc = nghttp2_session_client_new(out, cbs, st);
    nghttp2_session_callbacks_del(cbs);
    if (rc != 0)
        return -1;
    nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, WINDOW},
    };
    if (nghttp2_submit_settings(*out, NGHTTP2_FLAG_NONE, settings, 2) != 0 ||
        nghttp2_session_set_local_window_size(*out, NGHTTP2_FLAG_NONE, 0, WINDOW) != 0)
        return -1;
    return 0;
}

static int submit(nghttp2_session *session, call_state *st, const endpoint *ep)
{
    char timeout[16] = "";
    if (st->call->timeout_ms > 0)
        ctl_grpc_timeout_value(st->call->timeout_ms, timeout, sizeof(timeout));
    funcd_buf bearer = FUNCD_BUF_INIT;
    if (st->call->token && *st->call->token &&
        funcd_buf_printf(&bearer, "Bearer %s", st->call->token) < 0)
        return -1;
#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}
    nghttp2_nv headers[] = {
        NV(":method", "POST"),
        NV(":scheme", "http"),
        NV(":path", st->call->path),
        NV(":authority", ep->authority),
        NV("content-type", "application/grpc"),
        NV("te", "trailers"),
        NV("user-agent", "funcdctl/" FUNCD_VERSION_STRING),
        NV("grpc-timeout", timeout),
        NV("authorization", bearer.data ? bearer.data : ""),
    };
#undef NV
    size_t n = sizeof(headers) / sizeof(headers[0]) - 2;
    if (timeout[0])
        n++;
    if (bearer.data) /* after grpc-timeout, or in its place */
        headers[n++] = headers[sizeof(headers) / sizeof(headers[0]) - 1];
    nghttp2_data_provider body = {.read_callback = read_request};
    st->stream_id = nghttp2_submit_request(session, NULL, headers, n, &body, st); /* copies */
    funcd_buf_free(&bearer);
    return st->stream_id < 0 ? -1 : 0;
}

/* Moves bytes both ways until the stream closes. 0, or -1 with `why` set
 * (and *timed_out when the deadline passed). */
static int pump(nghttp2_session *session, int fd, SSL *ssl, call_state *st, int64_t deadline,
                funcd_buf *why, int *timed_out)
{
    const uint8_t *pending = NULL;
    size_t pending_len = 0;
    uint8_t in[65536];
    while (!st->closed) {
        if (pending_len == 0) {
            ssize_t n = nghttp2_session_mem_send(session, &pending);
            if (n < 0)
                return funcd_buf_printf(why, "HTTP/2: %s", nghttp2_strerror((int)n)), -1;
            pending_len = (size_t)n;
        }
        if (pending_len == 0 && !nghttp2_session_want_read(session))
            return funcd_buf_puts(why, "the connection ended before the answer"), -1;
        struct pollfd pfd = {.fd = fd, .events = POLLIN | (pending_len ? POLLOUT : 0)};
        int ready = poll(&pfd, 1, remaining_ms(deadline));
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready == 0) {
            *timed_out = 1;
            return -1;
        }
        if (ready < 0)
            return funcd_buf_printf(why, "poll: %s", strerror(errno)), -1;
        if (pfd.revents & POLLOUT) {
            ssize_t n = io_send(fd, ssl, pending, pending_len);
            if (n < 0 && errno != EAGAIN && errno != EINTR)
                return funcd_buf_printf(why, "send: %s", strerror(errno)), -1;
            if (n > 0) {
                pending += n;
                pending_len -= (size_t)n;
            }
        }
        /* TLS hands out a record per read: read until it waits for more. */
        for (int more = !!(pfd.revents & (POLLIN | POLLHUP | POLLERR)); more && !st->closed;) {
            errno = 0;
            ssize_t n = io_recv(fd, ssl, in, sizeof(in));
            if (n < 0 && errno != EAGAIN && errno != EINTR)
                return funcd_buf_printf(why, "recv: %s", strerror(errno)), -1;
            if (n == 0)
                return funcd_buf_puts(why, "the runner closed the connection before answering"),
                       -1;
            if (n > 0) {
                ssize_t used = nghttp2_session_mem_recv(session, in, (size_t)n);
                if (used < 0)
                    return funcd_buf_printf(why, "HTTP/2: %s", nghttp2_strerror((int)used)), -1;
            }
            more = ssl && n > 0;
        }
    }
    return 0;
}

/* gRPC's mapping of an HTTP status without grpc-status to a gRPC code. */
static int status_from_http(int http)
{
    switch (http) {
    case 400: return CTL_GRPC_INTERNAL;
    case 401: return 16; /* UNAUTHENTICATED */
    case 403: return 7;  /* PERMISSION_DENIED */
    case 404: return 12; /* UNIMPLEMENTED */
    case 429: case 502: case 503: case 504: return CTL_GRPC_UNAVAILABLE;
    default: return CTL_GRPC_UNKNOWN;
    }
}

static void fail(ctl_grpc_result *out, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fail(ctl_grpc_result *out, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    out->status = status;
    funcd_buf_reset(&out->message);
    funcd_buf_vprintf(&out->message, fmt, ap);
    va_end(ap);
}

/* The call's outcome from what the stream carried. */
static void conclude(call_state *st, const endpoint *ep)
{
    ctl_grpc_result *out = st->out;
    if (st->http1_only) {
        /* funcd's control plane (and other HTTP/1.1-only ports) say so this way. */
        fail(out, CTL_GRPC_TRANSPORT, "%s speaks HTTP/1.1 only, not gRPC", ep->authority);
    } else if (st->grpc_status < 0 && !st->content_type_ok && st->http_status != 0) {
        /* Some other HTTP/2 server (h2o serves h2c too): no gRPC status to report. */
        fail(out, CTL_GRPC_TRANSPORT, "%s answered HTTP %d, not gRPC", ep->authority,
             st->http_status);
    } else if (st->too_large) {
        fail(out, CTL_GRPC_RESOURCE_EXHAUSTED, "the answer is larger than %zu bytes",
             st->call->max_response);
    } else if (st->grpc_status < 0 && st->http_status != 200 && st->http_status != 0) {
        fail(out, status_from_http(st->http_status), "the runner answered HTTP %d",
             st->http_status);
    } else if (st->grpc_status < 0) {
        fail(out, st->close_error == NGHTTP2_REFUSED_STREAM ? CTL_GRPC_UNAVAILABLE
                                                            : CTL_GRPC_INTERNAL,
             "the runner ended the call without a grpc-status (HTTP/2 %s)",
             nghttp2_http2_strerror(st->close_error));
    } else if (st->grpc_status != CTL_GRPC_OK) {
        out->status = st->grpc_status;
    } else if (!st->content_type_ok) {
        fail(out, CTL_GRPC_UNKNOWN, "the answer is not application/grpc");
    } else if (st->body.len < PREFIX_LEN) {
        fail(out, CTL_GRPC_INTERNAL, "the runner sent no response message");
    } else if (st->body.data[0] != 0) {
        fail(out, CTL_GRPC_INTERNAL, "the runner sent a compressed message, which funcdctl "
             "did not ask for");
    } else {
        const uint8_t *p = (const uint8_t *)st->body.data;
        size_t len = (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4];
        if (len != st->body.len - PREFIX_LEN) {
            fail(out, CTL_GRPC_INTERNAL, "the response message is framed wrongly (%zu bytes "
                 "announced, %zu sent)", len, st->body.len - PREFIX_LEN);
            return;
        }
        out->status = CTL_GRPC_OK;
        funcd_buf_append(&out->response, p + PREFIX_LEN, len);
    }
}

static int frame_request(const ctl_grpc_call *call, funcd_buf *frame)
{
    uint8_t prefix[PREFIX_LEN] = {0, (uint8_t)(call->request_len >> 24),
                                  (uint8_t)(call->request_len >> 16),
                                  (uint8_t)(call->request_len >> 8), (uint8_t)call->request_len};
    if (call->request_len > UINT32_MAX || funcd_buf_append(frame, prefix, PREFIX_LEN) != 0)
        return -1;
    return call->request_len ? funcd_buf_append(frame, call->request, call->request_len) : 0;
}

int ctl_grpc_unary(const ctl_grpc_call *call, ctl_grpc_result *out)
{
    call_state st = {.call = call, .out = out, .grpc_status = -1};
    funcd_buf why = FUNCD_BUF_INIT;
    nghttp2_session *session = NULL;
    endpoint ep;
    int64_t deadline = call->timeout_ms > 0
                           ? funcd_mono_ms() + call->timeout_ms + DEADLINE_GRACE_MS
                           : 0;
    int fd = -1, timed_out = 0;
    SSL *ssl = NULL;
    out->status = CTL_GRPC_TRANSPORT;
    if (parse_addr(call->addr, call->cacert, &ep) != 0) {
        funcd_buf_printf(&out->message, "\"%s\" is not an address: use HOST:PORT", call->addr);
        return out->status;
    }
    if (frame_request(call, &st.frame) != 0 || new_session(&st, &session) != 0 ||
        submit(session, &st, &ep) != 0) {
        funcd_buf_puts(&out->message, "out of memory");
    } else if ((fd = dial(&ep, deadline, &why)) < 0) {
        funcd_buf_printf(&out->message, "cannot reach the function runner at %s: %s",
                         ep.authority, why.data ? why.data : "?");
    } else if (ep.tls && !ep.unix_path[0] &&
               !(ssl = tls_handshake(fd, &ep, call->cacert, deadline, &why))) {
        funcd_buf_printf(&out->message, "cannot reach the function runner at %s: %s",
                         ep.authority, why.data ? why.data : "?");
    } else if (pump(session, fd, ssl, &st, deadline, &why, &timed_out) != 0 && !st.http1_only) {
        if (timed_out)
            fail(out, CTL_GRPC_DEADLINE_EXCEEDED, "no answer from %s in time", ep.authority);
        else if (st.http_status == 0)
            funcd_buf_printf(&out->message, "%s does not speak gRPC over HTTP/2: %s",
                             ep.authority, why.data ? why.data : "?");
        else
            funcd_buf_printf(&out->message, "the call to %s failed: %s", ep.authority,
                             why.data ? why.data : "?");
    } else {
        conclude(&st, &ep);
    }
    SSL_free(ssl);
    if (fd >= 0)
        close(fd);
    nghttp2_session_del(session);
    funcd_buf_free(&st.frame);
    funcd_buf_free(&st.body);
    funcd_buf_free(&why);
    return out->status;
}

void ctl_grpc_result_free(ctl_grpc_result *r)
{
    funcd_buf_free(&r->message);
    funcd_buf_free(&r->response);
}
