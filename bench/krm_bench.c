/*
 * krm-bench: the timing half of bench/fnrunner.sh.
 *
 *   krm-bench latency N WARMUP RL_FILE BINARY ADDR IMAGE...
 *       N rounds (after WARMUP untimed ones), each running BINARY once the
 *       plain way (fork, execve, the ResourceList to stdin, stdout read to
 *       EOF, waitpid) and then making one EvaluateFunction call per IMAGE,
 *       sequentially, on ONE HTTP/2 connection to the runner at ADDR
 *       (host:port). Interleaved so that whatever else the machine does
 *       falls on every path alike.
 *   krm-bench direct-load SECONDS STREAMS RL_FILE BINARY
 *       BINARY run the plain way, STREAMS copies at a time for SECONDS, a new
 *       one as soon as one ends: what the machine allows the exec path.
 *   krm-bench load SECONDS STREAMS RL_FILE ADDR IMAGE
 *       STREAMS concurrent calls on one connection for SECONDS, a new call as
 *       soon as one ends; counts only calls that came back grpc-status 0 with
 *       the ResourceList intact (h2load cannot see gRPC trailers).
 *   krm-bench body RL_FILE IMAGE OUT
 *       writes the gRPC-framed EvaluateFunction request (h2load's -d file).
 *
 * Every call is checked: the function is krm-cat, so the output must equal
 * the input byte for byte. latency prints "direct p50_ms=X p99_ms=Y n=N"
 * and one such line per IMAGE; direct-load and load print "ok=N failed=N seconds=S rate=R".
 *
 * The gRPC client is a small one of its own: funcdctl's (bin/funcdctl/
 * grpc_client.c) opens a connection per call, and this measures calls on one
 * connection, as Porch's runner client makes them.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EVAL_PATH "/evaluator.FunctionEvaluator/EvaluateFunction"
#define MAX_STREAMS 256
#define STALL_MS 30000 /* no byte either way for this long: the runner hung */
#define PREFIX_LEN 5

extern char **environ;

typedef struct bytes {
    uint8_t *p;
    size_t len, cap;
} bytes;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "krm-bench: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void bytes_append(bytes *b, const void *data, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p)
            die("out of memory");
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static bytes read_file(const char *path)
{
    bytes b = {0};
    FILE *f = fopen(path, "rb");
    if (!f)
        die("cannot open %s", path);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        bytes_append(&b, chunk, n);
    fclose(f);
    return b;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest rank, as wrk and h2load report them. */
static void print_percentiles(const char *label, double *ms, size_t n)
{
    if (n == 0)
        die("no call was timed");
    qsort(ms, n, sizeof(*ms), cmp_double);
    size_t i50 = (n * 50 + 99) / 100, i99 = (n * 99 + 99) / 100;
    printf("%s p50_ms=%.3f p99_ms=%.3f n=%zu\n", label, ms[i50 ? i50 - 1 : 0],
           ms[i99 ? i99 - 1 : 0], n);
}

static size_t count_arg(const char *s, const char *what)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 0)
        die("%s must be a number", what);
    return (size_t)v;
}

/* ---- protobuf, by hand: request {1: resource_list, 2: image} ------------- */

static void put_varint(bytes *b, uint64_t v)
{
    uint8_t tmp[10];
    size_t n = 0;
    do {
        tmp[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    bytes_append(b, tmp, n);
}

static void put_len_field(bytes *b, unsigned number, const void *data, size_t len)
{
    put_varint(b, (uint64_t)number << 3 | 2);
    put_varint(b, len);
    bytes_append(b, data, len);
}

/* The 5-byte gRPC prefix (uncompressed, big-endian length) and the message. */
static bytes framed_request(const bytes *rl, const char *image)
{
    bytes msg = {0}, frame = {0};
    put_len_field(&msg, 1, rl->p, rl->len);
    put_len_field(&msg, 2, image, strlen(image));
    uint8_t prefix[PREFIX_LEN] = {0, (uint8_t)(msg.len >> 24), (uint8_t)(msg.len >> 16),
                                  (uint8_t)(msg.len >> 8), (uint8_t)msg.len};
    bytes_append(&frame, prefix, PREFIX_LEN);
    bytes_append(&frame, msg.p, msg.len);
    free(msg.p);
    return frame;
}

static int get_varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t byte = *(*p)++;
        v |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* Whether a framed EvaluateFunctionResponse carries `want` as its
 * resource_list (field 1). Other fields (the log) are skipped. */
static int response_echoes(const bytes *body, const bytes *want)
{
    if (body->len < PREFIX_LEN || body->p[0] != 0)
        return 0;
    const uint8_t *p = body->p + PREFIX_LEN, *end = body->p + body->len;
    size_t announced = (size_t)body->p[1] << 24 | (size_t)body->p[2] << 16 |
                       (size_t)body->p[3] << 8 | body->p[4];
    if (announced != body->len - PREFIX_LEN)
        return 0;
    int seen = 0;
    while (p < end) {
        uint64_t key, len;
        if (get_varint(&p, end, &key) != 0)
            return 0;
        if ((key & 7) == 0) {
            if (get_varint(&p, end, &len) != 0)
                return 0;
            continue;
        }
        if ((key & 7) != 2 || get_varint(&p, end, &len) != 0 || len > (uint64_t)(end - p))
            return 0;
        if (key >> 3 == 1)
            seen = len == want->len && memcmp(p, want->p, want->len) == 0;
        p += len;
    }
    return seen;
}

/* ---- direct: what running the function costs without the runner --------- */

typedef struct kid {
    pid_t pid;
    int in, out; /* -1 once closed */
    size_t off;  /* how much of the ResourceList went to stdin */
    bytes got;
} kid;

static void spawn_kid(kid *k, const char *binary)
{
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0)
        die("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        char *argv[] = {(char *)binary, NULL};
        execve(binary, argv, environ);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    fcntl(in[1], F_SETFL, O_NONBLOCK);
    k->pid = pid;
    k->in = in[1];
    k->out = out[0];
    k->off = 0;
    k->got.len = 0;
}

/* Feeds stdin as far as the pipe takes it; closes it at the end. */
static void kid_write(kid *k, const bytes *rl)
{
    ssize_t n = write(k->in, rl->p + k->off, rl->len - k->off);
    if (n > 0)
        k->off += (size_t)n;
    if ((n < 0 && errno != EAGAIN && errno != EINTR) || k->off == rl->len) {
        close(k->in);
        k->in = -1;
    }
}

/* Reads what stdout has; at EOF reaps the child, checks its answer and
 * returns 1. */
static int kid_read(kid *k, const bytes *rl, const char *binary)
{
    char buf[65536];
    ssize_t n = read(k->out, buf, sizeof(buf));
    if (n < 0 && errno == EINTR)
        return 0;
    if (n > 0) {
        bytes_append(&k->got, buf, (size_t)n);
        return 0;
    }
    close(k->out);
    k->out = -1;
    if (k->in >= 0)
        close(k->in);
    k->in = -1;
    int status;
    while (waitpid(k->pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die("%s failed", binary);
    if (k->got.len != rl->len || memcmp(k->got.p, rl->p, rl->len) != 0)
        die("%s did not echo the ResourceList", binary);
    return 1;
}

/* Runs `streams` copies of `binary` at a time, a new one as soon as one ends,
 * until `until` (0: just one run). Returns how many ran. */
static size_t run_direct(const char *binary, const bytes *rl, size_t streams, double until)
{
    kid *kids = calloc(streams, sizeof(*kids));
    struct pollfd *pfd = calloc(2 * streams, sizeof(*pfd));
    size_t active = 0, done = 0, started = 0;
    for (size_t i = 0; i < streams; i++)
        kids[i].pid = -1;
    while (active > 0 || (until ? now_ms() < until : started == 0)) {
        for (size_t i = 0; i < streams && (until ? now_ms() < until : started == 0); i++) {
            if (kids[i].pid < 0) {
                spawn_kid(&kids[i], binary);
                active++;
                started++;
            }
        }
        for (size_t i = 0; i < streams; i++) {
            int live = kids[i].pid >= 0;
            pfd[2 * i] = (struct pollfd){.fd = live ? kids[i].in : -1, .events = POLLOUT};
            pfd[2 * i + 1] = (struct pollfd){.fd = live ? kids[i].out : -1, .events = POLLIN};
        }
        int ready = poll(pfd, 2 * streams, STALL_MS);
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready <= 0)
            die("the function neither read nor wrote");
        for (size_t i = 0; i < streams; i++) {
            if (pfd[2 * i].revents)
                kid_write(&kids[i], rl);
            if (pfd[2 * i + 1].revents && kid_read(&kids[i], rl, binary)) {
                kids[i].pid = -1;
                active--;
                done++;
            }
        }
    }
    for (size_t i = 0; i < streams; i++)
        free(kids[i].got.p);
    free(kids);
    free(pfd);
    return done;
}

static int cmd_direct_load(size_t seconds, size_t streams, const char *rl_path,
                           const char *binary)
{
    if (streams == 0)
        die("STREAMS must be at least 1");
    bytes rl = read_file(rl_path);
    double t0 = now_ms();
    size_t done = run_direct(binary, &rl, streams, t0 + (double)seconds * 1e3);
    double elapsed = (now_ms() - t0) / 1e3;
    printf("ok=%zu failed=0 seconds=%.2f rate=%.0f\n", done, elapsed, (double)done / elapsed);
    free(rl.p);
    return 0;
}

/* ---- a gRPC client on one connection ------------------------------------- */

typedef struct call {
    int busy;
    int32_t id;
    size_t sent;
    double t0;
    int http_status, grpc_status;
    bytes body;
} call;

typedef struct client {
    int fd;
    nghttp2_session *h2;
    char authority[300];
    const bytes *frame; /* the framed request of the next calls */
    const bytes *rl;
    call calls[MAX_STREAMS];
    size_t in_flight;
    const uint8_t *pending; /* what nghttp2 gave us to send and the socket took not yet */
    size_t pending_len;
    /* what ended calls add up to */
    size_t ok, failed;
    double last_ms;
    int last_grpc_status;
} client;

static ssize_t send_request(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length,
                            uint32_t *flags, nghttp2_data_source *src, void *user)
{
    client *c = user;
    call *k = src->ptr;
    size_t n = c->frame->len - k->sent;
    if (n > length)
        n = length;
    memcpy(buf, c->frame->p + k->sent, n);
    k->sent += n;
    if (k->sent == c->frame->len)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user)
{
    call *k = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
    if (!k)
        return 0;
    char v[16];
    snprintf(v, sizeof(v), "%.*s", (int)(valuelen < 15 ? valuelen : 15), (const char *)value);
    if (namelen == 7 && !memcmp(name, ":status", 7))
        k->http_status = atoi(v);
    else if (namelen == 11 && !memcmp(name, "grpc-status", 11))
        k->grpc_status = atoi(v);
    return 0;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data,
                   size_t len, void *user)
{
    call *k = nghttp2_session_get_stream_user_data(s, id);
    if (k)
        bytes_append(&k->body, data, len);
    return 0;
}

static int on_close(nghttp2_session *s, int32_t id, uint32_t error, void *user)
{
    client *c = user;
    call *k = nghttp2_session_get_stream_user_data(s, id);
    if (!k)
        return 0;
    int good = error == 0 && k->http_status == 200 && k->grpc_status == 0 &&
               response_echoes(&k->body, c->rl);
    c->last_grpc_status = error ? -2 : k->grpc_status;
    c->last_ms = now_ms() - k->t0;
    if (good)
        c->ok++;
    else
        c->failed++;
    k->busy = 0;
    k->body.len = 0;
    c->in_flight--;
    return 0;
}

static void client_connect(client *c, const char *addr)
{
    char host[256], port[16];
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof(host) ||
        strlen(colon + 1) >= sizeof(port))
        die("\"%s\" is not HOST:PORT", addr);
    snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
    snprintf(port, sizeof(port), "%s", colon + 1);
    snprintf(c->authority, sizeof(c->authority), "%s", addr);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(host, port, &hints, &ai) != 0)
        die("cannot resolve %s", host);
    c->fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (c->fd < 0 || connect(c->fd, ai->ai_addr, ai->ai_addrlen) != 0)
        die("cannot connect to %s", addr);
    freeaddrinfo(ai);
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);

    nghttp2_session_callbacks *cbs;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_close);
    if (nghttp2_session_client_new(&c->h2, cbs, c) != 0)
        die("nghttp2_session_client_new failed");
    nghttp2_session_callbacks_del(cbs);
    nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                         {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 24}};
    nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, settings, 2);
    nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, 1 << 24);
}

static void submit_call(client *c)
{
    call *k = NULL;
    for (size_t i = 0; i < MAX_STREAMS && !k; i++)
        if (!c->calls[i].busy)
            k = &c->calls[i];
    if (!k)
        die("more calls than slots");
#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}
    nghttp2_nv headers[] = {
        NV(":method", "POST"),        NV(":scheme", "http"),
        NV(":path", EVAL_PATH),       NV(":authority", c->authority),
        NV("content-type", "application/grpc"), NV("te", "trailers"),
    };
#undef NV
    nghttp2_data_provider body = {.source.ptr = k, .read_callback = send_request};
    k->busy = 1;
    k->sent = 0;
    k->http_status = 0;
    k->grpc_status = -1;
    k->t0 = now_ms();
    k->id = nghttp2_submit_request(c->h2, NULL, headers, sizeof(headers) / sizeof(headers[0]),
                                   &body, k);
    if (k->id < 0)
        die("submit: %s", nghttp2_strerror(k->id));
    c->in_flight++;
}

/* Moves bytes both ways, keeping `streams` calls going until `until`
 * (monotonic ms), then until no call is in flight. */
static void pump(client *c, size_t streams, double until)
{
    uint8_t in[65536];
    while (c->in_flight > 0 || (streams && now_ms() < until)) {
        while (c->in_flight < streams && now_ms() < until)
            submit_call(c);
        if (c->pending_len == 0) {
            ssize_t n = nghttp2_session_mem_send(c->h2, &c->pending);
            if (n < 0)
                die("HTTP/2: %s", nghttp2_strerror((int)n));
            c->pending_len = (size_t)n;
        }
        struct pollfd pfd = {.fd = c->fd, .events = POLLIN | (c->pending_len ? POLLOUT : 0)};
        int ready = poll(&pfd, 1, STALL_MS);
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready <= 0)
            die("the runner stopped answering");
        if (pfd.revents & POLLOUT) {
            ssize_t n = send(c->fd, c->pending, c->pending_len, MSG_NOSIGNAL);
            if (n < 0 && errno != EAGAIN && errno != EINTR)
                die("send: %s", strerror(errno));
            if (n > 0) {
                c->pending += n;
                c->pending_len -= (size_t)n;
            }
        }
        if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t n = recv(c->fd, in, sizeof(in), 0);
            if (n == 0)
                die("the runner closed the connection");
            if (n < 0 && errno != EAGAIN && errno != EINTR)
                die("recv: %s", strerror(errno));
            if (n > 0 && nghttp2_session_mem_recv(c->h2, in, (size_t)n) < 0)
                die("HTTP/2 protocol error from the runner");
        }
    }
}

static void client_open(client *c, const char *addr, const bytes *rl)
{
    memset(c, 0, sizeof(*c));
    c->rl = rl;
    client_connect(c, addr);
}

static void client_close(client *c)
{
    nghttp2_session_del(c->h2);
    close(c->fd);
    for (size_t i = 0; i < MAX_STREAMS; i++)
        free(c->calls[i].body.p);
}

static int cmd_latency(size_t n, size_t warmup, const char *rl_path, const char *binary,
                       const char *addr, char **images, size_t n_images)
{
    bytes rl = read_file(rl_path);
    bytes *frames = calloc(n_images, sizeof(*frames));
    double *ms = calloc((n_images + 1) * (n ? n : 1), sizeof(*ms)); /* direct, then each image */
    if (!frames || !ms)
        die("out of memory");
    for (size_t i = 0; i < n_images; i++)
        frames[i] = framed_request(&rl, images[i]);
    client c;
    client_open(&c, addr, &rl);
    const char *failed = NULL;
    for (size_t r = 0; r < warmup + n && !failed; r++) {
        double t0 = now_ms();
        run_direct(binary, &rl, 1, 0);
        if (r >= warmup)
            ms[r - warmup] = now_ms() - t0;
        for (size_t i = 0; i < n_images && !failed; i++) {
            c.frame = &frames[i];
            submit_call(&c);
            pump(&c, 0, 0);
            if (c.failed)
                failed = images[i];
            else if (r >= warmup)
                ms[(i + 1) * n + r - warmup] = c.last_ms;
        }
    }
    if (failed) {
        fprintf(stderr, "krm-bench: a call for %s failed: grpc-status %d (-1: none, "
                "-2: stream reset)\n", failed, c.last_grpc_status);
    } else {
        print_percentiles("direct", ms, n);
        for (size_t i = 0; i < n_images; i++)
            print_percentiles(images[i], ms + (i + 1) * n, n);
    }
    client_close(&c);
    for (size_t i = 0; i < n_images; i++)
        free(frames[i].p);
    free(frames);
    free(ms);
    free(rl.p);
    return failed ? 1 : 0;
}

static int cmd_load(size_t seconds, size_t streams, const char *rl_path, const char *addr,
                    const char *image)
{
    if (streams == 0 || streams > MAX_STREAMS)
        die("STREAMS must be 1..256");
    bytes rl = read_file(rl_path);
    bytes frame = framed_request(&rl, image);
    client c;
    client_open(&c, addr, &rl);
    c.frame = &frame;
    double t0 = now_ms();
    pump(&c, streams, t0 + (double)seconds * 1e3);
    double elapsed = (now_ms() - t0) / 1e3;
    printf("ok=%zu failed=%zu seconds=%.2f rate=%.0f\n", c.ok, c.failed, elapsed,
           (double)c.ok / elapsed);
    client_close(&c);
    free(frame.p);
    free(rl.p);
    return c.failed ? 1 : 0;
}

static int cmd_body(const char *rl_path, const char *image, const char *out)
{
    bytes rl = read_file(rl_path);
    bytes frame = framed_request(&rl, image);
    FILE *f = fopen(out, "wb");
    if (!f || fwrite(frame.p, 1, frame.len, f) != frame.len || fclose(f) != 0)
        die("cannot write %s", out);
    free(frame.p);
    free(rl.p);
    return 0;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    const char *cmd = argc > 1 ? argv[1] : "";
    if (!strcmp(cmd, "latency") && argc >= 8)
        return cmd_latency(count_arg(argv[2], "N"), count_arg(argv[3], "WARMUP"), argv[4],
                           argv[5], argv[6], argv + 7, (size_t)argc - 7);
    if (!strcmp(cmd, "direct-load") && argc == 6)
        return cmd_direct_load(count_arg(argv[2], "SECONDS"), count_arg(argv[3], "STREAMS"),
                               argv[4], argv[5]);
    if (!strcmp(cmd, "load") && argc == 7)
        return cmd_load(count_arg(argv[2], "SECONDS"), count_arg(argv[3], "STREAMS"), argv[4],
                        argv[5], argv[6]);
    if (!strcmp(cmd, "body") && argc == 5)
        return cmd_body(argv[2], argv[3], argv[4]);
    fprintf(stderr, "usage: krm-bench latency N WARMUP RL_FILE BINARY ADDR IMAGE...\n"
                    "       krm-bench direct-load SECONDS STREAMS RL_FILE BINARY\n"
                    "       krm-bench load SECONDS STREAMS RL_FILE ADDR IMAGE\n"
                    "       krm-bench body RL_FILE IMAGE OUT\n");
    return 2;
}
