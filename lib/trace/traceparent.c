/*
 * The traceparent parser: outside input on every request, so it reads
 * nothing past `n`, allocates nothing, and takes only what the W3C spec
 * calls valid. Anything else is "no parent": the edge starts a new trace
 * and never fails the request for it (docs/observability.md).
 */
#include "trace/traceparent.h"

#include <string.h>


/* The value of a lowercase hex digit, or -1 (uppercase is invalid). */
static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Decodes 2*len hex digits; 0, or -1 on a non-hex character. */
static int unhex(const char *s, uint8_t *out, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

static int all_zero(const uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (p[i])
            return 0;
    return 1;
}

int funcd_traceparent_parse(const char *s, size_t n, funcd_traceparent *out)
{
    uint8_t version;
    if (!s || n < FUNCD_TRACEPARENT_LEN || unhex(s, &version, 1) < 0 || version == 0xff)
        return -1;
    /* Version 00 is exactly 55 characters; a later one may add fields,
     * each after a '-'. */
    if (version == 0 ? n != FUNCD_TRACEPARENT_LEN
                     : n > FUNCD_TRACEPARENT_LEN && s[FUNCD_TRACEPARENT_LEN] != '-')
        return -1;
    if (s[2] != '-' || s[35] != '-' || s[52] != '-')
        return -1;
    if (unhex(s + 3, out->trace_id, 16) < 0 || unhex(s + 36, out->parent_id, 8) < 0 ||
        unhex(s + 53, &out->flags, 1) < 0)
        return -1;
    if (all_zero(out->trace_id, 16) || all_zero(out->parent_id, 8))
        return -1;
    return 0;
}

/* Every byte's two digits: one load a byte (this runs for every request,
 * the child traceparent and the access log's ids). */
static const char hex_pairs[513] =
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
    "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
    "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
    "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f"
    "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
    "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
    "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf"
    "e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";

void funcd_trace_hex(const uint8_t *bytes, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        memcpy(out + 2 * i, hex_pairs + 2 * bytes[i], 2);
    out[2 * n] = '\0';
}

void funcd_traceparent_format(const uint8_t trace_id[16], const uint8_t parent_id[8],
                              uint8_t flags, char out[FUNCD_TRACEPARENT_LEN + 1])
{
    memcpy(out, "00-", 3);
    funcd_trace_hex(trace_id, 16, out + 3);
    out[35] = '-';
    funcd_trace_hex(parent_id, 8, out + 36);
    out[52] = '-';
    funcd_trace_hex(&flags, 1, out + 53);
}
