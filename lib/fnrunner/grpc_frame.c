/*
 * The pure parts of the gRPC server: message framing, grpc-timeout,
 * grpc-message encoding and the two grpc.health.v1 messages. No I/O, so
 * the fuzz targets can drive them directly.
 */
#include "fnrunner/grpc.h"

#include <string.h>

#define PREFIX_LEN 5

void funcd_grpc_frame_init(funcd_grpc_frame *f, size_t max)
{
    memset(f, 0, sizeof(*f));
    f->max = max;
}

void funcd_grpc_frame_free(funcd_grpc_frame *f)
{
    funcd_buf_free(&f->msg);
    f->hdr_len = 0;
}

void funcd_grpc_frame_next(funcd_grpc_frame *f)
{
    /* Keeps the buffer: the next message on the stream is likely as large. */
    f->msg.len = 0;
    f->hdr_len = 0;
    f->want = 0;
}

int funcd_grpc_frame_partial(const funcd_grpc_frame *f)
{
    return f->hdr_len > 0;
}

/* Fills the prefix; returns 1 once the whole prefix is in and valid. */
static int take_prefix(funcd_grpc_frame *f, const uint8_t *in, size_t len, size_t *pos)
{
    size_t n = PREFIX_LEN - f->hdr_len;
    if (n > len - *pos)
        n = len - *pos;
    memcpy(f->hdr + f->hdr_len, in + *pos, n);
    f->hdr_len += n;
    *pos += n;
    if (f->hdr_len < PREFIX_LEN)
        return 0;
    if (f->hdr[0] & 0x01)
        return f->error = FUNCD_GRPC_FRAME_COMPRESSED;
    if (f->hdr[0] != 0)
        return f->error = FUNCD_GRPC_FRAME_BAD_FLAG;
    uint32_t want = (uint32_t)f->hdr[1] << 24 | (uint32_t)f->hdr[2] << 16 |
                    (uint32_t)f->hdr[3] << 8 | f->hdr[4];
    if (want > f->max)
        return f->error = FUNCD_GRPC_FRAME_TOO_LARGE;
    f->want = want;
    f->msg.len = 0;
    return 1;
}

int funcd_grpc_frame_decode(funcd_grpc_frame *f, const uint8_t *in, size_t len, size_t *used)
{
    size_t pos = 0;
    *used = 0;
    if (f->error)
        return f->error;
    if (f->hdr_len == PREFIX_LEN && f->msg.len == f->want)
        return FUNCD_GRPC_FRAME_MESSAGE; /* the caller has not called _next yet */
    if (f->hdr_len < PREFIX_LEN) {
        int rc = take_prefix(f, in, len, &pos);
        *used = pos;
        if (rc <= 0)
            return rc;
    }
    size_t n = f->want - f->msg.len;
    if (n > len - pos)
        n = len - pos;
    /* Grows with what arrives, not with what the prefix promises. */
    if (n && funcd_buf_append(&f->msg, in + pos, n) < 0)
        return f->error = FUNCD_GRPC_FRAME_NOMEM;
    pos += n;
    *used = pos;
    if (f->msg.len < f->want)
        return FUNCD_GRPC_FRAME_MORE;
    f->count++;
    return FUNCD_GRPC_FRAME_MESSAGE;
}

int funcd_grpc_frame_encode(funcd_buf *out, const uint8_t *msg, size_t len)
{
    if (len > UINT32_MAX)
        return -1;
    uint8_t hdr[PREFIX_LEN] = {0, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
                               (uint8_t)len};
    if (funcd_buf_grow(out, sizeof(hdr) + len) < 0 || funcd_buf_append(out, hdr, sizeof(hdr)) < 0)
        return -1;
    return len ? funcd_buf_append(out, msg, len) : 0;
}

int64_t funcd_grpc_parse_timeout(const char *value, size_t len)
{
    if (len < 2 || len > 9)
        return -1;
    int64_t v = 0;
    for (size_t i = 0; i + 1 < len; i++) {
        if (value[i] < '0' || value[i] > '9')
            return -1;
        v = v * 10 + (value[i] - '0');
    }
    switch (value[len - 1]) {
    case 'H':
        return v * 3600000;
    case 'M':
        return v * 60000;
    case 'S':
        return v * 1000;
    case 'm':
        return v;
    case 'u':
        return (v + 999) / 1000;
    case 'n':
        return (v + 999999) / 1000000;
    default:
        return -1;
    }
}

static int needs_escape(unsigned char c)
{
    return c < 0x20 || c > 0x7e || c == '%';
}

int funcd_grpc_percent_encode(funcd_buf *out, const char *msg, size_t limit)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *m = (const unsigned char *)msg;
    size_t n = strlen(msg), cut = 0, size = 0;
    for (; cut < n; cut++) {
        size_t sz = needs_escape(m[cut]) ? 3 : 1;
        if (size + sz > limit)
            break;
        size += sz;
    }
    if (cut < n) /* never split a UTF-8 sequence: back up to its lead byte */
        while (cut > 0 && (m[cut] & 0xc0) == 0x80)
            cut--;
    if (funcd_buf_grow(out, size) < 0)
        return -1;
    for (size_t i = 0; i < cut; i++) {
        if (!needs_escape(m[i])) {
            out->data[out->len++] = (char)m[i];
            continue;
        }
        out->data[out->len++] = '%';
        out->data[out->len++] = hex[m[i] >> 4];
        out->data[out->len++] = hex[m[i] & 0x0f];
    }
    out->data[out->len] = '\0';
    return 0;
}

/* A protobuf varint; returns bytes used or 0 if truncated or too long. */
static size_t read_varint(const uint8_t *p, size_t len, uint64_t *v)
{
    *v = 0;
    for (size_t i = 0; i < len && i < 10; i++) {
        *v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if (!(p[i] & 0x80))
            return i + 1;
    }
    return 0;
}

/* Skips one field's value of wire type `wt`; returns bytes used or 0. */
static size_t skip_value(const uint8_t *p, size_t len, unsigned wt)
{
    uint64_t v;
    size_t n;
    switch (wt) {
    case 0:
        return read_varint(p, len, &v);
    case 1:
        return len >= 8 ? 8 : 0;
    case 2:
        n = read_varint(p, len, &v);
        return n && v <= len - n ? n + (size_t)v : 0;
    case 5:
        return len >= 4 ? 4 : 0;
    default:
        return 0;
    }
}

int funcd_grpc_health_request_service(const uint8_t *msg, size_t len, const uint8_t **service,
                                      size_t *service_len)
{
    static const uint8_t empty[1];
    *service = empty;
    *service_len = 0;
    size_t pos = 0;
    while (pos < len) {
        uint64_t key, slen;
        size_t n = read_varint(msg + pos, len - pos, &key);
        if (!n || key >> 3 == 0)
            return -1;
        pos += n;
        unsigned wt = (unsigned)(key & 7);
        if (key >> 3 == 1) { /* string service = 1 */
            if (wt != 2 || !(n = read_varint(msg + pos, len - pos, &slen)) ||
                slen > len - pos - n)
                return -1;
            *service = msg + pos + n;
            *service_len = (size_t)slen;
            pos += n + (size_t)slen;
            continue;
        }
        if (!(n = skip_value(msg + pos, len - pos, wt)))
            return -1;
        pos += n;
    }
    return 0;
}

size_t funcd_grpc_health_response(uint8_t out[2], int status)
{
    if (status <= 0 || status > 127)
        return 0; /* proto3 leaves the default value out */
    out[0] = 0x08; /* field 1, varint */
    out[1] = (uint8_t)status;
    return 2;
}
