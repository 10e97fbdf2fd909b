/*
 * Fuzz target for the pure parts of lib/fnrunner/grpc: the length-prefixed
 * message decoder, grpc-timeout, grpc-message encoding and the health
 * request parser. Checks what must hold for every input:
 *   - decoding in one piece and in arbitrary pieces gives the same messages
 *     and the same final error;
 *   - no message is longer than the limit, and every byte is accounted for;
 *   - an error is final;
 *   - percent-encoded text stays within its limit and its alphabet.
 * Input: byte 0 picks the limit, byte 1 seeds the piece sizes, the rest is
 * the stream.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fnrunner/grpc.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_grpc_frame: %s\n", what);
        abort();
    }
}

typedef struct outcome {
    unsigned messages;
    uint64_t digest; /* over every message's length and bytes */
    size_t consumed;
    int error;
} outcome;

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211u;
    return h;
}

/* Feeds `in` in pieces of at most `piece(state)` bytes (0: all at once). */
static outcome decode(const uint8_t *in, size_t len, size_t max, unsigned seed)
{
    outcome o = {0, 14695981039346656037u, 0, 0};
    funcd_grpc_frame f;
    funcd_grpc_frame_init(&f, max);
    size_t pos = 0;
    while (pos < len) {
        size_t n = len - pos;
        if (seed) {
            seed = seed * 1103515245u + 12345u;
            size_t cap = (seed >> 16) % 9 + 1;
            if (n > cap)
                n = cap;
        }
        size_t used;
        int rc = funcd_grpc_frame_decode(&f, in + pos, n, &used);
        check(used <= n, "used more than given");
        pos += used;
        o.consumed += used;
        if (rc < 0) {
            o.error = rc;
            size_t again;
            check(funcd_grpc_frame_decode(&f, in, len, &again) == rc && again == 0,
                  "error not final");
            break;
        }
        if (rc == FUNCD_GRPC_FRAME_MESSAGE) {
            check(f.msg.len <= max, "message over the limit");
            o.messages++;
            o.digest = mix(o.digest, &f.msg.len, sizeof(f.msg.len));
            o.digest = mix(o.digest, f.msg.data, f.msg.len);
            funcd_grpc_frame_next(&f);
        } else {
            check(rc == FUNCD_GRPC_FRAME_MORE && used == n, "MORE without taking everything");
        }
    }
    check(f.count == o.messages, "count disagrees");
    funcd_grpc_frame_free(&f);
    return o;
}

static void strings(const uint8_t *data, size_t size)
{
    char s[64];
    size_t n = size < sizeof(s) - 1 ? size : sizeof(s) - 1;
    memcpy(s, data, n);
    s[n] = '\0';
    int64_t ms = funcd_grpc_parse_timeout(s, n);
    check(ms >= -1, "negative timeout");

    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    size_t limit = size ? data[0] * 4u : 0;
    funcd_buf out = FUNCD_BUF_INIT;
    check(funcd_grpc_percent_encode(&out, text, limit) == 0, "percent_encode failed");
    check(out.len <= limit, "encoded past the limit");
    for (size_t i = 0; i < out.len; i++) {
        unsigned char c = (unsigned char)out.data[i];
        check(c >= 0x20 && c <= 0x7e, "unencoded byte in grpc-message");
        if (c == '%')
            check(i + 2 < out.len, "truncated escape");
    }
    funcd_buf_free(&out);
    free(text);

    const uint8_t *svc;
    size_t svc_len;
    if (funcd_grpc_health_request_service(data, size, &svc, &svc_len) == 0)
        check(svc_len == 0 || (svc >= data && svc + svc_len <= data + size),
              "service outside the message");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    strings(data, size);
    if (size < 2)
        return 0;
    static const size_t limits[] = {0, 1, 5, 16, 255, 4096, (size_t)6 << 20};
    size_t max = limits[data[0] % (sizeof(limits) / sizeof(limits[0]))];
    const uint8_t *in = data + 2;
    size_t len = size - 2;
    outcome whole = decode(in, len, max, 0);
    outcome pieces = decode(in, len, max, data[1] | 1u);
    check(whole.messages == pieces.messages && whole.digest == pieces.digest,
          "pieces decode to other messages");
    check(whole.error == pieces.error && whole.consumed == pieces.consumed,
          "pieces end differently");
    check(whole.error || whole.consumed == len, "bytes left over without an error");
    return 0;
}
