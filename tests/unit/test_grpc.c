/* lib/fnrunner/grpc: the framing decoder and helpers, then the server on a
 * loop thread driven by a small nghttp2 client over a real socket (h2c with
 * prior knowledge, as gRPC clients speak it). The test handler serves
 * /test.Echo/Echo (echo), /test.Echo/Sleep (echo after the number of ms in
 * the request, from a timer), /test.Echo/Fail (INVALID_ARGUMENT with the
 * request as the message) and /test.Echo/Grow (the request plus one byte). */
#include <arpa/inet.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

#include "fnrunner/grpc.h"
#include "util/buf.h"
#include "util/misc.h"

/* ---- pure parts ---------------------------------------------------------- */

static funcd_buf framed(const void *msg, size_t len)
{
    funcd_buf b = FUNCD_BUF_INIT;
    funcd_grpc_frame_encode(&b, msg, len);
    return b;
}

TEST(frame_decodes_byte_by_byte)
{
    funcd_buf in = FUNCD_BUF_INIT;
    funcd_grpc_frame_encode(&in, (const uint8_t *)"hello", 5);
    funcd_grpc_frame_encode(&in, NULL, 0);
    funcd_grpc_frame f;
    funcd_grpc_frame_init(&f, 16);
    int msgs = 0;
    size_t used;
    for (size_t i = 0; i < in.len; i++) {
        int rc = funcd_grpc_frame_decode(&f, (const uint8_t *)in.data + i, 1, &used);
        CHECK_INT(used, 1);
        if (rc == FUNCD_GRPC_FRAME_MESSAGE) {
            CHECK_INT(f.msg.len, msgs == 0 ? 5 : 0);
            if (msgs == 0)
                CHECK(memcmp(f.msg.data, "hello", 5) == 0);
            msgs++;
            funcd_grpc_frame_next(&f);
        } else {
            CHECK_INT(rc, FUNCD_GRPC_FRAME_MORE);
            CHECK(funcd_grpc_frame_partial(&f));
        }
    }
    CHECK_INT(msgs, 2);
    CHECK(!funcd_grpc_frame_partial(&f));
    funcd_grpc_frame_free(&f);
    funcd_buf_free(&in);
}

TEST(frame_stops_after_a_message)
{
    funcd_buf in = framed("ab", 2);
    funcd_grpc_frame_encode(&in, (const uint8_t *)"c", 1);
    funcd_grpc_frame f;
    funcd_grpc_frame_init(&f, 16);
    size_t used;
    CHECK_INT(funcd_grpc_frame_decode(&f, (const uint8_t *)in.data, in.len, &used),
              FUNCD_GRPC_FRAME_MESSAGE);
    CHECK_INT(used, 7);
    /* Not advanced yet: the same message again, nothing taken. */
    CHECK_INT(funcd_grpc_frame_decode(&f, (const uint8_t *)in.data + 7, in.len - 7, &used),
              FUNCD_GRPC_FRAME_MESSAGE);
    CHECK_INT(used, 0);
    funcd_grpc_frame_next(&f);
    CHECK_INT(funcd_grpc_frame_decode(&f, (const uint8_t *)in.data + 7, in.len - 7, &used),
              FUNCD_GRPC_FRAME_MESSAGE);
    CHECK_INT(used, 6);
    CHECK_INT(f.count, 2);
    funcd_grpc_frame_free(&f);
    funcd_buf_free(&in);
}

TEST(frame_errors)
{
    funcd_grpc_frame f;
    size_t used;
    const uint8_t compressed[] = {1, 0, 0, 0, 1, 'x'};
    funcd_grpc_frame_init(&f, 16);
    CHECK_INT(funcd_grpc_frame_decode(&f, compressed, sizeof(compressed), &used),
              FUNCD_GRPC_FRAME_COMPRESSED);
    CHECK_INT(used, 5);
    CHECK_INT(funcd_grpc_frame_decode(&f, compressed, 1, &used), FUNCD_GRPC_FRAME_COMPRESSED);
    funcd_grpc_frame_free(&f);

    const uint8_t big[] = {0, 0, 0, 0, 17};
    funcd_grpc_frame_init(&f, 16);
    CHECK_INT(funcd_grpc_frame_decode(&f, big, sizeof(big), &used), FUNCD_GRPC_FRAME_TOO_LARGE);
    funcd_grpc_frame_free(&f);

    const uint8_t flag[] = {2, 0, 0, 0, 0};
    funcd_grpc_frame_init(&f, 16);
    CHECK_INT(funcd_grpc_frame_decode(&f, flag, sizeof(flag), &used), FUNCD_GRPC_FRAME_BAD_FLAG);
    funcd_grpc_frame_free(&f);

    const uint8_t huge[] = {0, 0xff, 0xff, 0xff, 0xff};
    funcd_grpc_frame_init(&f, FUNCD_GRPC_DEFAULT_MAX_MESSAGE);
    CHECK_INT(funcd_grpc_frame_decode(&f, huge, sizeof(huge), &used), FUNCD_GRPC_FRAME_TOO_LARGE);
    CHECK(f.msg.data == NULL); /* refused before allocating anything */
    funcd_grpc_frame_free(&f);
}

TEST(timeout_units)
{
    CHECK_INT(funcd_grpc_parse_timeout("2H", 2), 7200000);
    CHECK_INT(funcd_grpc_parse_timeout("3M", 2), 180000);
    CHECK_INT(funcd_grpc_parse_timeout("4S", 2), 4000);
    CHECK_INT(funcd_grpc_parse_timeout("50m", 3), 50);
    CHECK_INT(funcd_grpc_parse_timeout("1500u", 5), 2);
    CHECK_INT(funcd_grpc_parse_timeout("1n", 2), 1);
    CHECK_INT(funcd_grpc_parse_timeout("0m", 2), 0);
    CHECK_INT(funcd_grpc_parse_timeout("99999999H", 9), 99999999LL * 3600000);
    CHECK_INT(funcd_grpc_parse_timeout("123456789m", 10), -1); /* at most 8 digits */
    CHECK_INT(funcd_grpc_parse_timeout("m", 1), -1);
    CHECK_INT(funcd_grpc_parse_timeout("5s", 2), -1);
    CHECK_INT(funcd_grpc_parse_timeout("-5S", 3), -1);
    CHECK_INT(funcd_grpc_parse_timeout("", 0), -1);
}

TEST(percent_encoding)
{
    funcd_buf b = FUNCD_BUF_INIT;
    CHECK(funcd_grpc_percent_encode(&b, "bad: 100% \xc3\xbc\n", 100) == 0);
    CHECK_STR(b.data, "bad: 100%25 %C3%BC%0A");
    funcd_buf_reset(&b);
    /* Cut to the limit without splitting the two-byte character. */
    CHECK(funcd_grpc_percent_encode(&b, "ab\xc3\xbc", 7) == 0);
    CHECK_STR(b.data, "ab");
    funcd_buf_reset(&b);
    CHECK(funcd_grpc_percent_encode(&b, "ab\xc3\xbc", 8) == 0);
    CHECK_STR(b.data, "ab%C3%BC");
    funcd_buf_free(&b);
}

TEST(health_messages)
{
    const uint8_t *svc;
    size_t n;
    const uint8_t req[] = {0x0a, 3, 'a', 'b', 'c'};
    CHECK(funcd_grpc_health_request_service(req, sizeof(req), &svc, &n) == 0);
    CHECK(n == 3 && memcmp(svc, "abc", 3) == 0);
    CHECK(funcd_grpc_health_request_service(NULL, 0, &svc, &n) == 0);
    CHECK_INT(n, 0);
    const uint8_t unknown_field[] = {0x10, 0x96, 0x01, 0x0a, 1, 'x', 0x1d, 1, 2, 3, 4};
    CHECK(funcd_grpc_health_request_service(unknown_field, sizeof(unknown_field), &svc, &n) == 0);
    CHECK(n == 1 && svc[0] == 'x');
    const uint8_t truncated[] = {0x0a, 5, 'a'};
    CHECK(funcd_grpc_health_request_service(truncated, sizeof(truncated), &svc, &n) < 0);
    const uint8_t wrong_type[] = {0x08, 1};
    CHECK(funcd_grpc_health_request_service(wrong_type, sizeof(wrong_type), &svc, &n) < 0);
    uint8_t out[2];
    CHECK_INT(funcd_grpc_health_response(out, 1), 2);
    CHECK(out[0] == 0x08 && out[1] == 0x01);
    CHECK_INT(funcd_grpc_health_response(out, 0), 0);
}

/* ---- the server on its loop thread ----------------------------------------- */

static atomic_int handled, in_flight, max_in_flight, late_replies, late_cancelled, had_deadline;

typedef struct fixture {
    struct event_base *base;
    funcd_grpc_server *srv;
    pthread_t thread;
    char addr[64];
} fixture;

typedef struct sleeper {
    struct event *ev;
    funcd_grpc_call *call;
    uint8_t *msg;
    size_t len;
} sleeper;

static void leave(void)
{
    atomic_fetch_sub(&in_flight, 1);
}

static void sleeper_fire(evutil_socket_t fd, short what, void *arg)
{
    sleeper *s = arg;
    int cancelled = funcd_grpc_call_cancelled(s->call);
    funcd_grpc_reply(s->call, FUNCD_GRPC_OK, NULL, s->msg, s->len);
    leave();
    atomic_fetch_add(&late_cancelled, cancelled);
    atomic_fetch_add(&late_replies, 1);
    event_free(s->ev);
    free(s->msg);
    free(s);
}

static void sleep_then_echo(struct event_base *base, funcd_grpc_call *call, const uint8_t *msg,
                            size_t len)
{
    sleeper *s = calloc(1, sizeof(*s));
    s->call = call;
    s->msg = malloc(len ? len : 1);
    memcpy(s->msg, msg, len);
    s->len = len;
    char num[16] = {0};
    memcpy(num, msg, len < sizeof(num) - 1 ? len : sizeof(num) - 1);
    long ms = atol(num);
    struct timeval tv = {ms / 1000, ms % 1000 * 1000};
    s->ev = evtimer_new(base, sleeper_fire, s);
    evtimer_add(s->ev, &tv);
}

static void test_handler(funcd_grpc_call *call, const char *path, const uint8_t *msg, size_t len,
                         void *payload)
{
    fixture *fx = payload;
    atomic_fetch_add(&handled, 1);
    int now = atomic_fetch_add(&in_flight, 1) + 1;
    int max = atomic_load(&max_in_flight);
    while (now > max && !atomic_compare_exchange_weak(&max_in_flight, &max, now))
        ;
    if (funcd_grpc_call_deadline_ms(call) != 0)
        atomic_fetch_add(&had_deadline, 1);
    if (strcmp(path, "/test.Echo/Sleep") == 0) {
        sleep_then_echo(fx->base, call, msg, len);
        return;
    }
    leave();
    if (strcmp(path, "/test.Echo/Echo") == 0) {
        funcd_grpc_reply(call, FUNCD_GRPC_OK, NULL, msg, len);
    } else if (strcmp(path, "/test.Echo/Fail") == 0) {
        char *text = funcd_strndup((const char *)msg, len);
        funcd_grpc_reply(call, FUNCD_GRPC_INVALID_ARGUMENT, text, NULL, 0);
        free(text);
    } else if (strcmp(path, "/test.Echo/Grow") == 0) {
        uint8_t *more = calloc(1, len + 1);
        memcpy(more, msg, len);
        funcd_grpc_reply(call, FUNCD_GRPC_OK, NULL, more, len + 1);
        free(more);
    } else {
        funcd_grpc_reply(call, FUNCD_GRPC_UNIMPLEMENTED, "unknown method", NULL, 0);
    }
}

static void *loop_main(void *arg)
{
    fixture *fx = arg;
    event_base_loop(fx->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

static int fixture_start_with(fixture *fx, size_t max_message, unsigned max_conns,
                              unsigned idle_ms)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, (void (*)(void))evthread_use_pthreads);
    memset(fx, 0, sizeof(*fx));
    fx->base = event_base_new();
    funcd_grpc_config cfg = {fx->base, max_message, test_handler, fx, NULL};
    cfg.max_conns = max_conns;
    cfg.idle_ms = idle_ms;
    if (!fx->base || funcd_grpc_server_new(&fx->srv, &cfg, "127.0.0.1:0", fx->addr,
                                           sizeof(fx->addr)) != 0) {
        fprintf(stderr, "  server: %s\n", funcd_error_last()->message);
        return -1;
    }
    return pthread_create(&fx->thread, NULL, loop_main, fx);
}

static int fixture_start(fixture *fx, size_t max_message)
{
    return fixture_start_with(fx, max_message, 0, 0);
}

static void fixture_stop(fixture *fx)
{
    event_base_loopbreak(fx->base);
    pthread_join(fx->thread, NULL);
    funcd_grpc_server_free(fx->srv);
    event_base_free(fx->base);
}

typedef struct probe {
    fixture *fx;
    atomic_int done;
    unsigned conns;
} probe;

static void probe_run(evutil_socket_t fd, short what, void *arg)
{
    probe *p = arg;
    p->conns = funcd_grpc_server_connections(p->fx->srv);
    atomic_store(&p->done, 1);
}

/* The server's connection count, read on its own thread. */
static unsigned server_connections(fixture *fx)
{
    probe p = {fx, 0, 0};
    event_base_once(fx->base, -1, EV_TIMEOUT, probe_run, &p, NULL);
    while (!atomic_load(&p.done))
        usleep(1000);
    return p.conns;
}

/* ---- a small h2c client ------------------------------------------------------ */

typedef struct reply {
    funcd_buf req; /* the framed request body */
    size_t req_off;
    int keep_open; /* after req, send nothing more (no END_STREAM) */
    int done;
    uint32_t close_error;
    int http_status;
    int grpc_status; /* -1: none */
    char grpc_message[256];
    funcd_buf data;
    int32_t stream_id;
} reply;

typedef struct client {
    int fd;
    nghttp2_session *h2;
    funcd_buf out;
    size_t out_off;
    int eof;
    int goaway;
    int64_t read_after; /* a slow reader: no reads before this mono ms time */
    char authority[64];
} client;

static reply *reply_new(const void *msg, size_t len)
{
    reply *r = calloc(1, sizeof(*r));
    r->grpc_status = -1;
    r->req = framed(msg, len);
    return r;
}

static void reply_free(reply *r)
{
    if (!r)
        return;
    funcd_buf_free(&r->req);
    funcd_buf_free(&r->data);
    free(r);
}

static int cl_header(nghttp2_session *h2, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user)
{
    reply *r = nghttp2_session_get_stream_user_data(h2, frame->hd.stream_id);
    if (!r)
        return 0;
    char v[256];
    snprintf(v, sizeof(v), "%.*s", (int)valuelen, value);
    if (namelen == 7 && memcmp(name, ":status", 7) == 0)
        r->http_status = atoi(v);
    else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0)
        r->grpc_status = atoi(v);
    else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0)
        snprintf(r->grpc_message, sizeof(r->grpc_message), "%s", v);
    return 0;
}

static int cl_data(nghttp2_session *h2, uint8_t flags, int32_t stream_id, const uint8_t *data,
                   size_t len, void *user)
{
    reply *r = nghttp2_session_get_stream_user_data(h2, stream_id);
    if (r)
        funcd_buf_append(&r->data, data, len);
    return 0;
}

static int cl_close(nghttp2_session *h2, int32_t stream_id, uint32_t error_code, void *user)
{
    reply *r = nghttp2_session_get_stream_user_data(h2, stream_id);
    if (r) {
        r->done = 1;
        r->close_error = error_code;
    }
    return 0;
}

static int cl_frame(nghttp2_session *h2, const nghttp2_frame *frame, void *user)
{
    client *cl = user;
    if (frame->hd.type == NGHTTP2_GOAWAY)
        cl->goaway = 1;
    return 0;
}

static ssize_t cl_body(nghttp2_session *h2, int32_t stream_id, uint8_t *buf, size_t length,
                       uint32_t *flags, nghttp2_data_source *source, void *user)
{
    reply *r = source->ptr;
    size_t n = r->req.len - r->req_off;
    if (n > length)
        n = length;
    memcpy(buf, r->req.data + r->req_off, n);
    r->req_off += n;
    if (n == 0 && r->keep_open)
        return NGHTTP2_ERR_DEFERRED;
    if (r->req_off == r->req.len && !r->keep_open)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static client *client_connect(const char *addr)
{
    client *cl = calloc(1, sizeof(*cl));
    snprintf(cl->authority, sizeof(cl->authority), "%s", addr);
    struct sockaddr_in sin = {.sin_family = AF_INET};
    const char *colon = strrchr(addr, ':');
    sin.sin_port = htons((uint16_t)atoi(colon + 1));
    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    cl->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(cl->fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        close(cl->fd);
        free(cl);
        return NULL;
    }
    int one = 1;
    setsockopt(cl->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    nghttp2_session_callbacks *cb;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_header_callback(cb, cl_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, cl_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, cl_close);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, cl_frame);
    nghttp2_session_client_new(&cl->h2, cb, cl);
    nghttp2_session_callbacks_del(cb);
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 4 << 20}};
    nghttp2_submit_settings(cl->h2, NGHTTP2_FLAG_NONE, iv, 1);
    nghttp2_session_set_local_window_size(cl->h2, NGHTTP2_FLAG_NONE, 0, 32 << 20);
    return cl;
}

static void client_free(client *cl)
{
    if (!cl)
        return;
    if (cl->fd >= 0)
        close(cl->fd);
    nghttp2_session_del(cl->h2);
    funcd_buf_free(&cl->out);
    free(cl);
}

/* Starts a call; `timeout` is a grpc-timeout value or NULL. */
static int32_t client_call(client *cl, reply *r, const char *path, const char *ctype,
                           const char *timeout)
{
    nghttp2_nv nv[7];
    size_t n = 0;
#define NV(k, v)                                                                                   \
    nv[n++] = (nghttp2_nv){(uint8_t *)(k), (uint8_t *)(v), strlen(k), strlen(v), NGHTTP2_NV_FLAG_NONE}
    NV(":method", "POST");
    NV(":scheme", "http");
    NV(":authority", cl->authority);
    NV(":path", path);
    NV("content-type", ctype ? ctype : "application/grpc");
    NV("te", "trailers");
    if (timeout)
        NV("grpc-timeout", timeout);
#undef NV
    nghttp2_data_provider dp = {.source.ptr = r, .read_callback = cl_body};
    r->stream_id = nghttp2_submit_request(cl->h2, NULL, nv, n, r->req.len ? &dp : NULL, r);
    return r->stream_id;
}

typedef int (*until_fn)(void *arg);

/* Moves bytes both ways until `until` holds, the peer closes, or `ms` pass. */
static int client_pump(client *cl, until_fn until, void *arg, int ms)
{
    int64_t end = funcd_mono_ms() + ms;
    while (!until(arg)) {
        if (cl->eof || funcd_mono_ms() > end)
            return -1;
        if (cl->out_off == cl->out.len) {
            cl->out.len = cl->out_off = 0;
            const uint8_t *data;
            ssize_t n;
            while (cl->out.len < (256 << 10) && (n = nghttp2_session_mem_send(cl->h2, &data)) > 0)
                funcd_buf_append(&cl->out, data, (size_t)n);
        }
        short in = funcd_mono_ms() >= cl->read_after ? POLLIN : 0;
        struct pollfd p = {cl->fd, in | (cl->out_off < cl->out.len ? POLLOUT : 0), 0};
        if (poll(&p, 1, 20) <= 0)
            continue;
        if (p.revents & POLLOUT) {
            ssize_t w = send(cl->fd, cl->out.data + cl->out_off, cl->out.len - cl->out_off,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
            if (w > 0)
                cl->out_off += (size_t)w;
        }
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            uint8_t buf[65536];
            ssize_t r = recv(cl->fd, buf, sizeof(buf), MSG_DONTWAIT);
            if (r <= 0) {
                cl->eof = 1;
                continue;
            }
            if (nghttp2_session_mem_recv(cl->h2, buf, (size_t)r) < 0)
                return -1;
        }
    }
    return 0;
}

typedef struct replies {
    reply **r;
    size_t n;
} replies;

static int all_done(void *arg)
{
    replies *rs = arg;
    for (size_t i = 0; i < rs->n; i++)
        if (!rs->r[i]->done)
            return 0;
    return 1;
}

static int wait_replies(client *cl, reply **r, size_t n, int ms)
{
    replies rs = {r, n};
    return client_pump(cl, all_done, &rs, ms);
}

typedef struct at_least {
    atomic_int *counter;
    int target;
} at_least;

static int reached(void *arg)
{
    at_least *a = arg;
    return atomic_load(a->counter) >= a->target;
}

static int wait_counter(client *cl, atomic_int *counter, int target, int ms)
{
    at_least a = {counter, target};
    if (cl)
        return client_pump(cl, reached, &a, ms);
    for (int64_t end = funcd_mono_ms() + ms; funcd_mono_ms() < end; usleep(2000))
        if (reached(&a))
            return 0;
    return -1;
}

static int got_goaway(void *arg)
{
    return ((client *)arg)->goaway;
}

static int never(void *arg)
{
    return 0;
}

/* One call to completion on a fresh connection. */
static reply *rpc(const char *addr, const char *path, const char *ctype, const char *timeout,
                  const void *msg, size_t len)
{
    client *cl = client_connect(addr);
    if (!cl)
        return NULL;
    reply *r = reply_new(msg, len);
    if (client_call(cl, r, path, ctype, timeout) < 0 || wait_replies(cl, &r, 1, 20000) < 0) {
        reply_free(r);
        r = NULL;
    }
    client_free(cl);
    return r;
}

/* The response message, unframed, or NULL if the framing is off. */
static const uint8_t *reply_message(const reply *r, size_t *len)
{
    if (r->data.len < 5 || r->data.data[0] != 0)
        return NULL;
    const uint8_t *p = (const uint8_t *)r->data.data;
    size_t n = (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4];
    if (n != r->data.len - 5)
        return NULL;
    *len = n;
    return p + 5;
}

static fixture fx; /* one server for most of the tests below */

TEST(unary_echo)
{
    reply *r = rpc(fx.addr, "/test.Echo/Echo", NULL, NULL, "hi there", 8);
    CHECK(r);
    size_t n;
    const uint8_t *m = reply_message(r, &n);
    int ok = r->http_status == 200 && r->grpc_status == 0 && m && n == 8 &&
             memcmp(m, "hi there", 8) == 0 && r->close_error == 0;
    reply_free(r);
    CHECK(ok);
}

TEST(empty_message_echo)
{
    reply *r = rpc(fx.addr, "/test.Echo/Echo", "application/grpc+proto", NULL, "", 0);
    CHECK(r);
    size_t n = 99;
    int ok = r->grpc_status == 0 && reply_message(r, &n) && n == 0;
    reply_free(r);
    CHECK(ok);
}

static uint8_t *pattern(size_t len)
{
    uint8_t *p = malloc(len);
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)(i * 2654435761u >> 13);
    return p;
}

TEST(five_mib_echo)
{
    size_t len = (size_t)5 << 20;
    uint8_t *big = pattern(len);
    reply *r = rpc(fx.addr, "/test.Echo/Echo", NULL, NULL, big, len);
    size_t n = 0;
    const uint8_t *m = r ? reply_message(r, &n) : NULL;
    int ok = r && r->grpc_status == 0 && m && n == len && memcmp(m, big, len) == 0;
    free(big);
    reply_free(r);
    CHECK(ok);
}

TEST(message_over_limit_is_resource_exhausted)
{
    size_t len = FUNCD_GRPC_DEFAULT_MAX_MESSAGE + 1;
    uint8_t *big = pattern(len);
    reply *r = rpc(fx.addr, "/test.Echo/Echo", NULL, NULL, big, len);
    free(big);
    CHECK(r);
    int status = r->grpc_status, http = r->http_status, data = (int)r->data.len;
    reply_free(r);
    CHECK_INT(http, 200);
    CHECK_INT(status, FUNCD_GRPC_RESOURCE_EXHAUSTED);
    CHECK_INT(data, 0);
}

/* Bytes dropped with refused calls still count against the connection
 * window (16 MiB) and must be consumed: 20 refused calls each push a full
 * stream window (1 MiB) before reading their answer; then a 5 MiB echo must
 * still get through on the same connection. */
TEST(refused_bytes_keep_the_window_open)
{
    client *cl = client_connect(fx.addr);
    CHECK(cl);
    size_t len = (size_t)5 << 20, over = FUNCD_GRPC_DEFAULT_MAX_MESSAGE + 1;
    uint8_t *big = pattern(over);
    int refused = 0, echoed = 0;
    for (int i = 0; i < 20; i++) {
        reply *a = reply_new(big, over);
        client_call(cl, a, "/test.Echo/Echo", NULL, NULL);
        cl->read_after = funcd_mono_ms() + 30;
        refused += wait_replies(cl, &a, 1, 20000) == 0 && a->grpc_status == 8;
        reply_free(a);
    }
    reply *b = reply_new(big, len);
    client_call(cl, b, "/test.Echo/Echo", NULL, NULL);
    size_t n = 0;
    const uint8_t *m = wait_replies(cl, &b, 1, 20000) == 0 ? reply_message(b, &n) : NULL;
    echoed = b->grpc_status == 0 && m && n == len && memcmp(m, big, len) == 0;
    reply_free(b);
    free(big);
    client_free(cl);
    CHECK_INT(refused, 20);
    CHECK(echoed);
}

/* A client that reads nothing for a while: the server holds its output,
 * stops reading, and resumes both once the client catches up. */
TEST(slow_reader_gets_everything)
{
    client *cl = client_connect(fx.addr);
    CHECK(cl);
    enum { N = 24 };
    size_t len = (size_t)1 << 20;
    uint8_t *big = pattern(len);
    reply *r[N];
    cl->read_after = funcd_mono_ms() + 500;
    for (int i = 0; i < N; i++) {
        big[0] = (uint8_t)i;
        r[i] = reply_new(big, len);
        client_call(cl, r[i], "/test.Echo/Echo", NULL, NULL);
    }
    int rc = wait_replies(cl, r, N, 30000), ok = 0;
    for (int i = 0; i < N; i++) {
        size_t n = 0;
        const uint8_t *m = reply_message(r[i], &n);
        big[0] = (uint8_t)i;
        ok += r[i]->grpc_status == 0 && m && n == len && memcmp(m, big, len) == 0;
        reply_free(r[i]);
    }
    free(big);
    client_free(cl);
    CHECK_INT(rc, 0);
    CHECK_INT(ok, N);
}

TEST(deadline_exceeded)
{
    int before = atomic_load(&late_replies), cancelled = atomic_load(&late_cancelled);
    int deadlines = atomic_load(&had_deadline);
    int64_t t0 = funcd_mono_ms();
    reply *r = rpc(fx.addr, "/test.Echo/Sleep", NULL, "50m", "600", 3);
    int64_t took = funcd_mono_ms() - t0;
    CHECK(r);
    int status = r->grpc_status;
    reply_free(r);
    CHECK_INT(status, FUNCD_GRPC_DEADLINE_EXCEEDED);
    CHECK(took < 500);
    CHECK(atomic_load(&had_deadline) == deadlines + 1);
    /* The handler's late reply finds the call cancelled and frees it. */
    CHECK(wait_counter(NULL, &late_replies, before + 1, 5000) == 0);
    CHECK_INT(atomic_load(&late_cancelled), cancelled + 1);
}

TEST(zero_timeout_fails_at_once)
{
    int h0 = atomic_load(&handled);
    reply *r = rpc(fx.addr, "/test.Echo/Echo", NULL, "0n", "x", 1);
    CHECK(r);
    int status = r->grpc_status;
    reply_free(r);
    CHECK_INT(status, FUNCD_GRPC_DEADLINE_EXCEEDED);
    CHECK_INT(atomic_load(&handled), h0);
}

/* The deadline passes while the message is still arriving: the server
 * answers, stops the stream, and never calls the handler. */
TEST(deadline_while_receiving)
{
    client *cl = client_connect(fx.addr);
    CHECK(cl);
    int h0 = atomic_load(&handled);
    reply *r = reply_new("abcdef", 6);
    r->req.len = 7; /* the prefix and two bytes of six */
    r->keep_open = 1;
    client_call(cl, r, "/test.Echo/Echo", NULL, "30m");
    int rc = wait_replies(cl, &r, 1, 5000);
    int status = r->grpc_status;
    uint32_t err = r->close_error;
    reply_free(r);
    client_free(cl);
    CHECK_INT(rc, 0);
    CHECK_INT(status, FUNCD_GRPC_DEADLINE_EXCEEDED);
    CHECK_INT(err, NGHTTP2_NO_ERROR);
    CHECK_INT(atomic_load(&handled), h0);
}

TEST(unknown_method_and_bad_paths)
{
    const char *paths[] = {"/test.Echo/Nope", "/grpc.health.v1.Health/Watch", "/nopath", "//x",
                           "/a/b/c"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        reply *r = rpc(fx.addr, paths[i], NULL, NULL, "x", 1);
        CHECK(r);
        int status = r->grpc_status, http = r->http_status;
        reply_free(r);
        CHECK_INT(http, 200);
        CHECK_INT(status, FUNCD_GRPC_UNIMPLEMENTED);
    }
}

static int health(const char *service, int *serving)
{
    uint8_t req[64] = {0x0a, (uint8_t)strlen(service)};
    memcpy(req + 2, service, strlen(service));
    reply *r = rpc(fx.addr, FUNCD_GRPC_HEALTH_CHECK_PATH, NULL, NULL, req,
                   *service ? 2 + strlen(service) : 0);
    if (!r)
        return -1;
    int status = r->grpc_status;
    size_t n;
    const uint8_t *m = reply_message(r, &n);
    *serving = m && n == 2 && m[0] == 0x08 ? m[1] : -1;
    reply_free(r);
    return status;
}

TEST(health_check)
{
    int serving;
    CHECK_INT(health("", &serving), 0);
    CHECK_INT(serving, 1);
    CHECK_INT(health("evaluator.FunctionEvaluator", &serving), 0);
    CHECK_INT(serving, 1);
    CHECK_INT(health("some.Other", &serving), FUNCD_GRPC_NOT_FOUND);
}

TEST(non_post_is_405)
{
    client *cl = client_connect(fx.addr);
    CHECK(cl);
    reply *r = reply_new(NULL, 0);
    r->req.len = 0;
    nghttp2_nv nv[] = {
        {(uint8_t *)":method", (uint8_t *)"GET", 7, 3, 0},
        {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
        {(uint8_t *)":authority", (uint8_t *)cl->authority, 10, strlen(cl->authority), 0},
        {(uint8_t *)":path", (uint8_t *)"/test.Echo/Echo", 5, 15, 0},
        {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, 0},
    };
    nghttp2_submit_request(cl->h2, NULL, nv, 5, NULL, r);
    int rc = wait_replies(cl, &r, 1, 5000), http = r->http_status;
    reply_free(r);
    client_free(cl);
    CHECK_INT(rc, 0);
    CHECK_INT(http, 405);
}

TEST(non_grpc_content_type_is_415)
{
    reply *r = rpc(fx.addr, "/test.Echo/Echo", "application/json", NULL, "{}", 2);
    CHECK(r);
    int http = r->http_status;
    reply_free(r);
    CHECK_INT(http, 415);
}

TEST(error_message_is_percent_encoded)
{
    const char *text = "bad: 100% \xc3\xbc\n";
    reply *r = rpc(fx.addr, "/test.Echo/Fail", NULL, NULL, text, strlen(text));
    CHECK(r);
    int status = r->grpc_status;
    char msg[256];
    snprintf(msg, sizeof(msg), "%s", r->grpc_message);
    size_t data = r->data.len;
    reply_free(r);
    CHECK_INT(status, FUNCD_GRPC_INVALID_ARGUMENT);
    CHECK_STR(msg, "bad: 100%25 %C3%BC%0A");
    CHECK_INT(data, 0);
}

TEST(compressed_message_is_unimplemented)
{
    client *cl = client_connect(fx.addr);
    CHECK(cl);
    reply *r = reply_new("abc", 3);
    r->req.data[0] = 1; /* compressed flag */
    client_call(cl, r, "/test.Echo/Echo", NULL, NULL);
    int rc = wait_replies(cl, &r, 1, 5000);
    int status = r->grpc_status;
    char msg[256];
    snprintf(msg, sizeof(msg), "%s", r->grpc_message);
    reply_free(r);
    client_free(cl);
    CHECK_INT(rc, 0);
    CHECK_INT(status, FUNCD_GRPC_UNIMPLEMENTED);
    CHECK_STR(msg, "compression is not supported");
}

TEST(missing_or_extra_messages_are_internal)
{
    client *cl = client_connect(fx.addr);
    CHECK(cl);
    reply *none = reply_new(NULL, 0);
    none->req.len = 0; /* END_STREAM on the HEADERS */
    reply *two = reply_new("a", 1);
    funcd_grpc_frame_encode(&two->req, (const uint8_t *)"b", 1);
    reply *cut = reply_new("abcdef", 6);
    cut->req.len -= 2;
    client_call(cl, none, "/test.Echo/Echo", NULL, NULL);
    client_call(cl, two, "/test.Echo/Echo", NULL, NULL);
    client_call(cl, cut, "/test.Echo/Echo", NULL, NULL);
    reply *all[] = {none, two, cut};
    int rc = wait_replies(cl, all, 3, 5000);
    int s1 = none->grpc_status, s2 = two->grpc_status, s3 = cut->grpc_status;
    for (int i = 0; i < 3; i++)
        reply_free(all[i]);
    client_free(cl);
    CHECK_INT(rc, 0);
    CHECK_INT(s1, FUNCD_GRPC_INTERNAL);
    CHECK_INT(s2, FUNCD_GRPC_INTERNAL);
    CHECK_INT(s3, FUNCD_GRPC_INTERNAL);
}

#define MANY 200

TEST(many_concurrent_streams_on_one_connection)
{
    client *cl = client_connect(fx.addr);
    CHECK(cl);
    atomic_store(&max_in_flight, 0);
    reply *r[MANY];
    for (int i = 0; i < MANY; i++) {
        char msg[16];
        snprintf(msg, sizeof(msg), "%03d", 150 + i % 10); /* "150".."159" ms */
        r[i] = reply_new(msg, 3);
        client_call(cl, r[i], "/test.Echo/Sleep", NULL, NULL);
    }
    int rc = wait_replies(cl, r, MANY, 30000), ok = 0;
    for (int i = 0; i < MANY; i++) {
        size_t n;
        const uint8_t *m = reply_message(r[i], &n);
        ok += r[i]->grpc_status == 0 && m && n == 3 && memcmp(m, r[i]->req.data + 5, 3) == 0;
        reply_free(r[i]);
    }
    client_free(cl);
    CHECK_INT(rc, 0);
    CHECK_INT(ok, MANY);
    CHECK(atomic_load(&max_in_flight) >= 64);
}

TEST(client_cancel_then_late_reply)
{
    client *cl = client_connect(fx.addr);
    CHECK(cl);
    int h0 = atomic_load(&handled), late0 = atomic_load(&late_replies);
    int cancelled0 = atomic_load(&late_cancelled);
    reply *slow = reply_new("200", 3);
    client_call(cl, slow, "/test.Echo/Sleep", NULL, NULL);
    int rc1 = wait_counter(cl, &handled, h0 + 1, 5000);
    nghttp2_submit_rst_stream(cl->h2, NGHTTP2_FLAG_NONE, slow->stream_id, NGHTTP2_CANCEL);
    int rc2 = wait_counter(cl, &late_replies, late0 + 1, 5000);
    /* The connection still serves calls afterwards. */
    reply *echo = reply_new("ok", 2);
    client_call(cl, echo, "/test.Echo/Echo", NULL, NULL);
    int rc3 = wait_replies(cl, &echo, 1, 5000);
    int status = echo->grpc_status;
    reply_free(slow);
    reply_free(echo);
    client_free(cl);
    CHECK_INT(rc1, 0);
    CHECK_INT(rc2, 0);
    CHECK_INT(rc3, 0);
    CHECK_INT(status, 0);
    CHECK_INT(atomic_load(&late_cancelled), cancelled0 + 1);
}

TEST(connection_drop_cancels_calls_in_flight)
{
    client *cl = client_connect(fx.addr);
    CHECK(cl);
    int h0 = atomic_load(&handled), late0 = atomic_load(&late_replies);
    int cancelled0 = atomic_load(&late_cancelled);
    reply *r[5];
    for (int i = 0; i < 5; i++) {
        r[i] = reply_new("300", 3);
        client_call(cl, r[i], "/test.Echo/Sleep", NULL, NULL);
    }
    /* A sixth call still sending its message when the connection goes. */
    uint8_t *big = pattern(1 << 20);
    reply *partial = reply_new(big, 1 << 20);
    free(big);
    partial->req.len = 3 << 19;
    client_call(cl, partial, "/test.Echo/Echo", NULL, NULL);
    int rc = wait_counter(cl, &handled, h0 + 5, 5000);
    client_pump(cl, never, NULL, 50);
    client_free(cl);
    for (int i = 0; i < 5; i++)
        reply_free(r[i]);
    reply_free(partial);
    CHECK_INT(rc, 0);
    CHECK(wait_counter(NULL, &late_replies, late0 + 5, 5000) == 0);
    CHECK_INT(atomic_load(&late_cancelled), cancelled0 + 5);
    for (int i = 0; i < 200 && server_connections(&fx) != 0; i++)
        usleep(5000);
    CHECK_INT(server_connections(&fx), 0);
}

TEST(garbage_is_not_http2)
{
    client *cl = client_connect(fx.addr);
    CHECK(cl);
    const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK(send(cl->fd, junk, sizeof(junk) - 1, MSG_NOSIGNAL) == (ssize_t)sizeof(junk) - 1);
    int64_t end = funcd_mono_ms() + 5000;
    char buf[4096];
    ssize_t n;
    while ((n = recv(cl->fd, buf, sizeof(buf), 0)) > 0 && funcd_mono_ms() < end)
        ;
    client_free(cl);
    CHECK(n == 0 || n < 0);
}

static int64_t cpu_ms(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
}

/* Out of file descriptors, accept() fails on every loop turn: the listener
 * must back off instead of spinning, and serve the waiting client later. */
TEST(accept_failures_back_off_then_recover)
{
    struct rlimit old;
    CHECK(getrlimit(RLIMIT_NOFILE, &old) == 0);
    int next = dup(0);
    CHECK(next >= 0);
    close(next);
    struct rlimit tight = {(rlim_t)next + 1, old.rlim_max};
    CHECK(setrlimit(RLIMIT_NOFILE, &tight) == 0); /* room for the client's socket only */
    client *cl = client_connect(fx.addr);
    int64_t cpu0 = cpu_ms();
    usleep(300 * 1000);
    int64_t spent = cpu_ms() - cpu0;
    setrlimit(RLIMIT_NOFILE, &old);
    CHECK(cl);
    reply *r = reply_new("back", 4);
    client_call(cl, r, "/test.Echo/Echo", NULL, NULL);
    int rc = wait_replies(cl, &r, 1, 5000), status = r->grpc_status;
    reply_free(r);
    client_free(cl);
    CHECK(spent < 50);
    CHECK_INT(rc, 0);
    CHECK_INT(status, 0);
}

/* ---- tests with their own server --------------------------------------------- */

TEST(response_over_limit_is_resource_exhausted)
{
    fixture small;
    CHECK(fixture_start(&small, 1024) == 0);
    uint8_t msg[1024] = {0};
    reply *fits = rpc(small.addr, "/test.Echo/Grow", NULL, NULL, msg, 1023);
    reply *over = rpc(small.addr, "/test.Echo/Grow", NULL, NULL, msg, 1024);
    fixture_stop(&small);
    CHECK(fits && over);
    int s1 = fits->grpc_status, s2 = over->grpc_status;
    size_t n1 = fits->data.len, n2 = over->data.len;
    reply_free(fits);
    reply_free(over);
    CHECK_INT(s1, 0);
    CHECK_INT(n1, 5 + 1024);
    CHECK_INT(s2, FUNCD_GRPC_RESOURCE_EXHAUSTED);
    CHECK_INT(n2, 0);
}

/* A plain TCP connection to `addr` that sends nothing. */
static int silent_connect(const char *addr)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    sin.sin_port = htons((uint16_t)atoi(strrchr(addr, ':') + 1));
    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* 1 when the server closed `fd` within `ms` (what it sent before is read). */
static int closed_within(int fd, int ms)
{
    char buf[512];
    int64_t end = funcd_mono_ms() + ms;
    while (funcd_mono_ms() < end) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 50) == 1) {
            ssize_t n = read(fd, buf, sizeof(buf));
            if (n <= 0)
                return 1;
        }
    }
    return 0;
}

/* The runner's listener holds at most max_conns connections (the next
 * waits in the backlog until one closes), and one with no call in flight
 * that sends nothing for idle_ms is closed; a call longer than that is
 * answered (review: any number of connections, each held for ever). */
TEST(connections_are_capped_and_idle_ones_closed)
{
    fixture own;
    CHECK(fixture_start_with(&own, 0, 3, 400) == 0);
    int fds[4];
    for (int i = 0; i < 4; i++)
        fds[i] = silent_connect(own.addr);
    usleep(100 * 1000);
    unsigned at_cap = server_connections(&own);
    close(fds[0]);
    usleep(100 * 1000);
    unsigned after_one = server_connections(&own); /* the waiting one came in */
    int idle_closed = closed_within(fds[1], 2000);
    reply *slow = rpc(own.addr, "/test.Echo/Sleep", NULL, NULL, "900", 3);
    int slow_ok = slow && slow->grpc_status == 0;
    reply_free(slow);
    for (int i = 1; i < 4; i++)
        close(fds[i]);
    fixture_stop(&own);
    CHECK(fds[0] >= 0 && fds[3] >= 0);
    CHECK_INT(at_cap, 3);
    CHECK_INT(after_one, 3);
    CHECK(idle_closed);
    CHECK(slow_ok);
}

TEST(shutdown_sends_goaway_and_cancels)
{
    fixture own;
    CHECK(fixture_start(&own, 0) == 0);
    client *cl = client_connect(own.addr);
    CHECK(cl);
    int h0 = atomic_load(&handled), late0 = atomic_load(&late_replies);
    int cancelled0 = atomic_load(&late_cancelled);
    reply *slow = reply_new("300", 3);
    client_call(cl, slow, "/test.Echo/Sleep", NULL, NULL);
    int rc = wait_counter(cl, &handled, h0 + 1, 5000);
    event_base_loopbreak(own.base);
    pthread_join(own.thread, NULL);
    funcd_grpc_server_free(own.srv); /* the sleeper's timer is still armed */
    int rc2 = client_pump(cl, got_goaway, cl, 2000);
    /* Let the sleeper reply into the cancelled call; the loop also runs
     * libevent's deferred closes, so the socket goes now. */
    for (int i = 0; i < 100 && atomic_load(&late_replies) < late0 + 1; i++)
        event_base_loop(own.base, EVLOOP_ONCE);
    event_base_free(own.base);
    client_pump(cl, never, NULL, 2000);
    int eof = cl->eof;
    client_free(cl);
    reply_free(slow);
    CHECK_INT(rc, 0);
    CHECK_INT(rc2, 0);
    CHECK(eof);
    CHECK_INT(atomic_load(&late_replies), late0 + 1);
    CHECK_INT(atomic_load(&late_cancelled), cancelled0 + 1);
}

int main(void)
{
    RUN(frame_decodes_byte_by_byte);
    RUN(frame_stops_after_a_message);
    RUN(frame_errors);
    RUN(timeout_units);
    RUN(percent_encoding);
    RUN(health_messages);
    if (fixture_start(&fx, 0) != 0)
        return 1;
    RUN(unary_echo);
    RUN(empty_message_echo);
    RUN(five_mib_echo);
    RUN(message_over_limit_is_resource_exhausted);
    RUN(refused_bytes_keep_the_window_open);
    RUN(slow_reader_gets_everything);
    RUN(deadline_exceeded);
    RUN(zero_timeout_fails_at_once);
    RUN(deadline_while_receiving);
    RUN(unknown_method_and_bad_paths);
    RUN(health_check);
    RUN(non_post_is_405);
    RUN(non_grpc_content_type_is_415);
    RUN(error_message_is_percent_encoded);
    RUN(compressed_message_is_unimplemented);
    RUN(missing_or_extra_messages_are_internal);
    RUN(many_concurrent_streams_on_one_connection);
    RUN(client_cancel_then_late_reply);
    RUN(connection_drop_cancels_calls_in_flight);
    RUN(garbage_is_not_http2);
    RUN(accept_failures_back_off_then_recover);
    fixture_stop(&fx);
    RUN(response_over_limit_is_resource_exhausted);
    RUN(shutdown_sends_goaway_and_cancels);
    RUN(connections_are_capped_and_idle_ones_closed);
    return HARNESS_END();
}
