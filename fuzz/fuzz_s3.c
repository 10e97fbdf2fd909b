/*
 * The S3 gateway's parsers of outside input (lib/s3/proto.c): a request
 * head, its query and SigV4 fields (header and presigned), the signature
 * computation over them, an aws-chunked body, Range, and the
 * CompleteMultipartUpload and DeleteObjects documents. The input is a
 * request as it comes off the wire: the head, then the body.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "s3/proto.h"

typedef struct mem {
    const uint8_t *data;
    size_t len, pos;
} mem;

static long mem_read(void *ctx, void *buf, size_t cap)
{
    mem *m = ctx;
    size_t n = m->len - m->pos;
    if (n > cap)
        n = cap;
    if (n > 4096)
        n = 4096;
    memcpy(buf, m->data + m->pos, n);
    m->pos += n;
    return (long)n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    funcd_s3_reader *rd = calloc(1, sizeof(*rd));
    funcd_s3_req *r = calloc(1, sizeof(*r));
    if (!rd || !r)
        goto done;
    mem m = {data, size, 0};
    rd->read = mem_read;
    rd->ctx = &m;
    char err[256];
    if (funcd_s3_read_head(rd, r, err, sizeof(err)) != 1)
        goto done;
    funcd_s3_auth a;
    const char *code;
    if (funcd_s3_auth_parse(r, &a, &code, err, sizeof(err)) == 0) {
        uint8_t key[32];
        char sig[65];
        funcd_s3_signing_key("secret", a.date, a.region, a.service, key);
        funcd_s3_sign_request(r, &a, key, sig, err, sizeof(err));
        funcd_s3_sign_chunk(&a, key, a.signature, sig, sig);
    }
    const char *range = funcd_s3_header(r, "range");
    uint64_t off, len;
    if (range) {
        funcd_s3_parse_range(range, 0, &off, &len);
        funcd_s3_parse_range(range, 1000, &off, &len);
        funcd_s3_parse_range(range, UINT64_MAX, &off, &len);
    }
    funcd_s3_param_get(r, "uploadId");
    if (funcd_s3_header(r, "x-amz-decoded-content-length")) {
        /* aws-chunked, up to 64 chunks of at most 64 KiB */
        char *chunk = malloc(65536);
        for (int i = 0; chunk && i < 64; i++) {
            uint64_t n;
            char s[65];
            if (funcd_s3_chunk_header(rd, &n, s) < 0 || n > 65536 ||
                funcd_s3_read_exact(rd, chunk, (size_t)n) < 0)
                break;
            if (n == 0) {
                funcd_s3_chunk_trailers(rd);
                break;
            }
            if (funcd_s3_chunk_end(rd) < 0)
                break;
        }
        free(chunk);
    } else {
        /* the rest is a document */
        size_t rest = rd->len - rd->pos + (m.len - m.pos);
        char *doc = malloc(rest + 1);
        if (doc && funcd_s3_read_exact(rd, doc, rest) == 0) {
            doc[rest] = '\0';
            funcd_s3_part_ref *parts = NULL;
            size_t np = 0;
            if (funcd_s3_parse_complete(doc, rest, &parts, &np) == 0)
                free(parts);
            char **keys = NULL;
            int quiet = 0;
            if (funcd_s3_parse_delete(doc, rest, &keys, &quiet) == 0) {
                for (char **k = keys; *k; k++)
                    free(*k);
                free(keys);
            }
        }
        free(doc);
    }
done:
    free(rd);
    free(r);
    return 0;
}
