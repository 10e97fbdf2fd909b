/* The parts of `funcdctl fn eval`'s gRPC client that need no runner: the
 * protobuf wire format, grpc-timeout, grpc-message decoding, status names,
 * and the transport failures (nothing listening, a peer that hangs up, a
 * peer that never answers). The calls themselves run in tests/cli/test_cli.sh. */
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "grpc_client.h"
#include "harness.h"

TEST(pb_roundtrip)
{
    funcd_buf b = FUNCD_BUF_INIT;
    char big[300];
    memset(big, 'x', sizeof(big));
    CHECK(ctl_pb_put_bytes(&b, 1, big, sizeof(big)) == 0);
    CHECK(ctl_pb_put_bytes(&b, 2, "img", 3) == 0);
    CHECK(ctl_pb_put_bytes(&b, 3, "", 0) == 0); /* proto3: left out */
    CHECK(ctl_pb_put_bytes(&b, 100, "bin/f", 5) == 0);
    /* 300 needs a two-byte length; field 100 a two-byte key. */
    CHECK_INT((unsigned char)b.data[0], 0x0a);
    CHECK_INT((unsigned char)b.data[1], 0xac);
    CHECK_INT((unsigned char)b.data[2], 0x02);
    CHECK_INT((unsigned char)b.data[3 + 300 + 5], 0xa2);
    CHECK_INT((unsigned char)b.data[3 + 300 + 6], 0x06);
    ctl_pb_reader r = {(const uint8_t *)b.data, (const uint8_t *)b.data + b.len};
    ctl_pb_field f;
    CHECK_INT(ctl_pb_next(&r, &f), 1);
    CHECK_INT(f.number, 1);
    CHECK_INT(f.len, 300);
    CHECK_INT(ctl_pb_next(&r, &f), 1);
    CHECK_INT(f.number, 2);
    CHECK(f.len == 3 && !memcmp(f.data, "img", 3));
    CHECK_INT(ctl_pb_next(&r, &f), 1);
    CHECK_INT(f.number, 100);
    CHECK_INT(f.wire_type, CTL_PB_LEN);
    CHECK_INT(ctl_pb_next(&r, &f), 0);
    funcd_buf_free(&b);
}

TEST(pb_skips_other_wire_types)
{
    /* field 5 varint 150, field 6 fixed64, field 7 fixed32, field 2 "ok" */
    const uint8_t msg[] = {0x28, 0x96, 0x01, 0x31, 1, 2, 3, 4, 5, 6, 7, 8,
                           0x3d, 1, 2, 3, 4, 0x12, 2, 'o', 'k'};
    ctl_pb_reader r = {msg, msg + sizeof(msg)};
    ctl_pb_field f;
    CHECK_INT(ctl_pb_next(&r, &f), 1);
    CHECK_INT(f.value, 150);
    CHECK_INT(ctl_pb_next(&r, &f), 1);
    CHECK_INT(f.wire_type, CTL_PB_FIXED64);
    CHECK_INT(f.value, 0x0807060504030201LL);
    CHECK_INT(ctl_pb_next(&r, &f), 1);
    CHECK_INT(f.value, 0x04030201);
    CHECK_INT(ctl_pb_next(&r, &f), 1);
    CHECK(f.number == 2 && f.len == 2 && !memcmp(f.data, "ok", 2));
    CHECK_INT(ctl_pb_next(&r, &f), 0);
}

TEST(pb_rejects_malformed)
{
    static const struct {
        const char *what;
        uint8_t bytes[12];
        size_t len;
    } bad[] = {
        {"length past the end", {0x0a, 5, 'a'}, 3},
        {"truncated varint", {0x08, 0x80}, 2},
        {"field number 0", {0x02, 0}, 2},
        {"group wire type", {0x0b}, 1},
        {"truncated fixed32", {0x0d, 1, 2}, 3},
        {"varint over 10 bytes", {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                  0x01}, 12},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ctl_pb_reader r = {bad[i].bytes, bad[i].bytes + bad[i].len};
        ctl_pb_field f;
        if (ctl_pb_next(&r, &f) != -1)
            FAILF("%s was accepted", bad[i].what);
    }
}

TEST(timeout_values)
{
    char v[16];
    ctl_grpc_timeout_value(30000, v, sizeof(v));
    CHECK_STR(v, "30000m");
    ctl_grpc_timeout_value(0, v, sizeof(v));
    CHECK_STR(v, "1m");
    ctl_grpc_timeout_value(99999999, v, sizeof(v));
    CHECK_STR(v, "99999999m");
    ctl_grpc_timeout_value(100000000, v, sizeof(v));
    CHECK_STR(v, "100000S");
    ctl_grpc_timeout_value(INT64_MAX, v, sizeof(v));
    CHECK_STR(v, "99999999H");
}

TEST(percent_decoding)
{
    funcd_buf b = FUNCD_BUF_INIT;
    const char *in = "100%25 done%0Aline 2 %C3%A9 %zz %4";
    CHECK(ctl_grpc_percent_decode(in, strlen(in), &b) == 0);
    CHECK_STR(b.data, "100% done\nline 2 \xc3\xa9 %zz %4");
    funcd_buf_free(&b);
}

TEST(status_names)
{
    CHECK_STR(ctl_grpc_status_name(0), "OK");
    CHECK_STR(ctl_grpc_status_name(5), "NOT_FOUND");
    CHECK_STR(ctl_grpc_status_name(8), "RESOURCE_EXHAUSTED");
    CHECK_STR(ctl_grpc_status_name(16), "UNAUTHENTICATED");
    CHECK_STR(ctl_grpc_status_name(17), "UNKNOWN_CODE");
    CHECK_STR(ctl_grpc_status_name(CTL_GRPC_TRANSPORT), "TRANSPORT");
}

/* A listening socket on an ephemeral loopback port. */
static int listen_any(int *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 4) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

typedef struct peer {
    int fd;
    int hang_up; /* close at once; else read and say nothing */
} peer;

static void *run_peer(void *arg)
{
    peer *p = arg;
    int c = accept(p->fd, NULL, NULL);
    char buf[4096];
    if (c >= 0 && !p->hang_up)
        while (read(c, buf, sizeof(buf)) > 0) {
        }
    if (c >= 0)
        close(c);
    return NULL;
}

static int call_peer(int hang_up, int64_t timeout_ms, ctl_grpc_result *res)
{
    int port;
    peer p = {.hang_up = hang_up};
    pthread_t t;
    char addr[32];
    if ((p.fd = listen_any(&port)) < 0 || pthread_create(&t, NULL, run_peer, &p) != 0)
        return -2;
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    ctl_grpc_call call = {addr, "/x.Y/Z", (const uint8_t *)"m", 1, timeout_ms, 1024};
    int status = ctl_grpc_unary(&call, res);
    shutdown(p.fd, SHUT_RDWR);
    pthread_join(t, NULL);
    close(p.fd);
    return status;
}

TEST(transport_failures)
{
    int port, fd = listen_any(&port);
    char addr[32];
    CHECK(fd >= 0);
    close(fd); /* nothing listens there now */
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    ctl_grpc_call call = {addr, "/x.Y/Z", (const uint8_t *)"m", 1, 5000, 1024};
    ctl_grpc_result res = CTL_GRPC_RESULT_INIT;
    CHECK_INT(ctl_grpc_unary(&call, &res), CTL_GRPC_TRANSPORT);
    CHECK_CONTAINS(res.message.data, "cannot reach the function runner at 127.0.0.1:");
    ctl_grpc_result_free(&res);

    ctl_grpc_result bad = CTL_GRPC_RESULT_INIT;
    call.addr = "[::1";
    CHECK_INT(ctl_grpc_unary(&call, &bad), CTL_GRPC_TRANSPORT);
    CHECK_CONTAINS(bad.message.data, "is not an address");
    ctl_grpc_result_free(&bad);
}

TEST(peer_hangs_up)
{
    ctl_grpc_result res = CTL_GRPC_RESULT_INIT;
    CHECK_INT(call_peer(1, 5000, &res), CTL_GRPC_TRANSPORT);
    CHECK_CONTAINS(res.message.data, "does not speak gRPC over HTTP/2");
    ctl_grpc_result_free(&res);
}

TEST(silent_peer_hits_the_deadline)
{
    ctl_grpc_result res = CTL_GRPC_RESULT_INIT;
    CHECK_INT(call_peer(0, 100, &res), CTL_GRPC_DEADLINE_EXCEEDED);
    CHECK_CONTAINS(res.message.data, "in time");
    ctl_grpc_result_free(&res);
}

int main(void)
{
    RUN(pb_roundtrip);
    RUN(pb_skips_other_wire_types);
    RUN(pb_rejects_malformed);
    RUN(timeout_values);
    RUN(percent_decoding);
    RUN(status_names);
    RUN(transport_failures);
    RUN(peer_hangs_up);
    RUN(silent_peer_hits_the_deadline);
    return HARNESS_END();
}
