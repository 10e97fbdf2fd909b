/*
 * SigV4 as the S3 gateway checks it (lib/s3/proto.c), against the example
 * requests AWS publishes for S3 (the "Signature Calculations for the
 * Authorization Header" and "Query Parameters" examples and the aws-chunked
 * streaming example: access key AKIAIOSFODNN7EXAMPLE, 24 May 2013,
 * us-east-1); then Range and the multipart document.
 */
#include "harness.h"

#include <stdlib.h>

#include "s3/proto.h"
#include "util/buf.h"
#include "util/misc.h"

#define SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define EMPTY_SHA "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define CRED "Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"

typedef struct mem {
    const char *data;
    size_t len, pos;
} mem;

static long mem_read(void *ctx, void *buf, size_t cap)
{
    mem *m = ctx;
    size_t n = m->len - m->pos;
    if (n > cap)
        n = cap;
    if (n > 7)
        n = 7; /* small reads: the parsers must not care */
    memcpy(buf, m->data + m->pos, n);
    m->pos += n;
    return (long)n;
}

static funcd_s3_reader *reader(mem *m, const char *data, size_t len)
{
    funcd_s3_reader *rd = calloc(1, sizeof(*rd));
    m->data = data;
    m->len = len;
    m->pos = 0;
    rd->read = mem_read;
    rd->ctx = m;
    return rd;
}

/* Parses `head`, checks the signature it carries against the one computed
 * with SECRET: NULL if they match, else what went wrong. */
static const char *verify(const char *head, char computed[65])
{
    static char why[600];
    funcd_s3_req *r = calloc(1, sizeof(*r));
    mem m;
    funcd_s3_reader *rd = reader(&m, head, strlen(head));
    char err[256] = "";
    const char *code = NULL;
    funcd_s3_auth a;
    uint8_t key[32];
    const char *res = NULL;
    if (funcd_s3_read_head(rd, r, err, sizeof(err)) != 1) {
        snprintf(why, sizeof(why), "head: %s", err);
        res = why;
    } else if (funcd_s3_auth_parse(r, &a, &code, err, sizeof(err)) < 0) {
        snprintf(why, sizeof(why), "auth: %s %s", code, err);
        res = why;
    } else {
        funcd_s3_signing_key(SECRET, a.date, a.region, a.service, key);
        if (funcd_s3_sign_request(r, &a, key, computed, err, sizeof(err)) < 0) {
            snprintf(why, sizeof(why), "sign: %s", err);
            res = why;
        } else if (strcmp(computed, a.signature) != 0) {
            snprintf(why, sizeof(why), "computed %s, published %s", computed, a.signature);
            res = why;
        }
    }
    free(rd);
    free(r);
    return res;
}

#define CHECK_SIGNED(head)                                                                         \
    do {                                                                                           \
        char c_[65] = "";                                                                          \
        const char *w_ = verify(head, c_);                                                         \
        if (w_)                                                                                    \
            FAILF("%s", w_);                                                                       \
    } while (0)

TEST(get_object_with_range)
{
    CHECK_SIGNED("GET /test.txt HTTP/1.1\r\n"
                 "Host: examplebucket.s3.amazonaws.com\r\n"
                 "Authorization: AWS4-HMAC-SHA256 " CRED
                 "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
                 "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41\r\n"
                 "Range: bytes=0-9\r\n"
                 "x-amz-content-sha256:" EMPTY_SHA "\r\n"
                 "x-amz-date: 20130524T000000Z\r\n\r\n");
}

TEST(put_object)
{
    CHECK_SIGNED("PUT /test$file.text HTTP/1.1\r\n"
                 "Host: examplebucket.s3.amazonaws.com\r\n"
                 "Date: Fri, 24 May 2013 00:00:00 GMT\r\n"
                 "Authorization: AWS4-HMAC-SHA256 " CRED
                 "SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class,"
                 "Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd\r\n"
                 "x-amz-date: 20130524T000000Z\r\n"
                 "x-amz-storage-class: REDUCED_REDUNDANCY\r\n"
                 "x-amz-content-sha256: "
                 "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072\r\n"
                 "Content-Length: 21\r\n\r\n");
}

TEST(get_bucket_lifecycle)
{
    CHECK_SIGNED("GET /?lifecycle HTTP/1.1\r\n"
                 "Host: examplebucket.s3.amazonaws.com\r\n"
                 "Authorization: AWS4-HMAC-SHA256 " CRED
                 "SignedHeaders=host;x-amz-content-sha256;x-amz-date,"
                 "Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543\r\n"
                 "x-amz-date: 20130524T000000Z\r\n"
                 "x-amz-content-sha256: " EMPTY_SHA "\r\n\r\n");
}

TEST(list_objects)
{
    CHECK_SIGNED("GET /?max-keys=2&prefix=J HTTP/1.1\r\n"
                 "Host: examplebucket.s3.amazonaws.com\r\n"
                 "Authorization: AWS4-HMAC-SHA256 " CRED
                 "SignedHeaders=host;x-amz-content-sha256;x-amz-date,"
                 "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7\r\n"
                 "x-amz-date: 20130524T000000Z\r\n"
                 "x-amz-content-sha256: " EMPTY_SHA "\r\n\r\n");
}

TEST(presigned_get)
{
    CHECK_SIGNED("GET /test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="
                 "AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date="
                 "20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature="
                 "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404 HTTP/1.1\r\n"
                 "Host: examplebucket.s3.amazonaws.com\r\n\r\n");
}

/* One signature changed: refused; a signed header missing: refused. */
TEST(tampered)
{
    char c[65];
    CHECK(verify("GET /test.txt HTTP/1.1\r\n"
                 "Host: examplebucket.s3.amazonaws.com\r\n"
                 "Authorization: AWS4-HMAC-SHA256 " CRED
                 "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
                 "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41\r\n"
                 "Range: bytes=0-10\r\n"
                 "x-amz-content-sha256:" EMPTY_SHA "\r\n"
                 "x-amz-date: 20130524T000000Z\r\n\r\n",
                 c) != NULL);
    CHECK(verify("GET /test.txt HTTP/1.1\r\n"
                 "Host: examplebucket.s3.amazonaws.com\r\n"
                 "Authorization: AWS4-HMAC-SHA256 " CRED
                 "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
                 "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41\r\n"
                 "x-amz-content-sha256:" EMPTY_SHA "\r\n"
                 "x-amz-date: 20130524T000000Z\r\n\r\n",
                 c) != NULL);
}

/* The aws-chunked example: a seed signature, then 64 KiB, 1 KiB and the
 * empty chunk, each signed with the previous signature. */
TEST(streaming_chunks)
{
    static const char head[] =
        "PUT /examplebucket/chunkObject.txt HTTP/1.1\r\n"
        "Host: s3.amazonaws.com\r\n"
        "x-amz-date: 20130524T000000Z\r\n"
        "x-amz-storage-class: REDUCED_REDUNDANCY\r\n"
        "Authorization: AWS4-HMAC-SHA256 " CRED
        "SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
        "x-amz-decoded-content-length;x-amz-storage-class,"
        "Signature=4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9\r\n"
        "x-amz-content-sha256: STREAMING-AWS4-HMAC-SHA256-PAYLOAD\r\n"
        "Content-Encoding: aws-chunked\r\n"
        "x-amz-decoded-content-length: 66560\r\n"
        "Content-Length: 66824\r\n\r\n";
    CHECK_SIGNED(head);
    static const char *const sigs[] = {
        "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
        "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
        "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
    };
    static const size_t sizes[] = {65536, 1024, 0};
    /* the body on the wire */
    funcd_buf wire = FUNCD_BUF_INIT;
    char *a = malloc(65536);
    memset(a, 'a', 65536);
    for (int i = 0; i < 3; i++) {
        funcd_buf_printf(&wire, "%zx;chunk-signature=%s\r\n", sizes[i], sigs[i]);
        funcd_buf_append(&wire, a, sizes[i]);
        funcd_buf_puts(&wire, "\r\n");
    }
    CHECK_INT((long)wire.len, 66824);
    funcd_s3_req *r = calloc(1, sizeof(*r));
    mem m;
    funcd_s3_reader *rd = reader(&m, head, strlen(head));
    char err[128];
    const char *code;
    funcd_s3_auth au;
    uint8_t key[32];
    int ok = funcd_s3_read_head(rd, r, err, sizeof(err)) == 1 &&
             funcd_s3_auth_parse(r, &au, &code, err, sizeof(err)) == 0;
    free(rd);
    funcd_s3_signing_key(SECRET, au.date, au.region, au.service, key);
    rd = reader(&m, wire.data, wire.len);
    char prev[65];
    snprintf(prev, sizeof(prev), "%s", au.signature);
    char *data = malloc(65536);
    for (int i = 0; ok && i < 3; i++) {
        uint64_t n;
        char sig[65], hex[65], want[65];
        ok = funcd_s3_chunk_header(rd, &n, sig) == 0 && n == sizes[i] &&
             funcd_s3_read_exact(rd, data, (size_t)n) == 0 && funcd_s3_chunk_end(rd) == 0;
        if (!ok)
            break;
        funcd_sha256_hex(data, (size_t)n, hex);
        funcd_s3_sign_chunk(&au, key, prev, hex, want);
        if (strcmp(want, sig) != 0) {
            fprintf(stderr, "chunk %d: computed %s, published %s\n", i, want, sig);
            ok = 0;
        }
        snprintf(prev, sizeof(prev), "%s", sig);
    }
    free(data);
    free(a);
    free(rd);
    free(r);
    funcd_buf_free(&wire);
    CHECK(ok);
}

TEST(ranges)
{
    uint64_t off, len;
    CHECK_INT(funcd_s3_parse_range("bytes=0-9", 100, &off, &len), 1);
    CHECK(off == 0 && len == 10);
    CHECK_INT(funcd_s3_parse_range("bytes=90-", 100, &off, &len), 1);
    CHECK(off == 90 && len == 10);
    CHECK_INT(funcd_s3_parse_range("bytes=95-200", 100, &off, &len), 1);
    CHECK(off == 95 && len == 5);
    CHECK_INT(funcd_s3_parse_range("bytes=-10", 100, &off, &len), 1);
    CHECK(off == 90 && len == 10);
    CHECK_INT(funcd_s3_parse_range("bytes=-1000", 100, &off, &len), 1);
    CHECK(off == 0 && len == 100);
    CHECK_INT(funcd_s3_parse_range("bytes=100-", 100, &off, &len), -1);
    CHECK_INT(funcd_s3_parse_range("bytes=-0", 100, &off, &len), -1);
    CHECK_INT(funcd_s3_parse_range("bytes=5-1", 100, &off, &len), 0);
    CHECK_INT(funcd_s3_parse_range("bytes=0-1,5-6", 100, &off, &len), 0);
    CHECK_INT(funcd_s3_parse_range("items=0-1", 100, &off, &len), 0);
}

TEST(complete_document)
{
    static const char xml[] =
        "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        "<Part><ETag>&quot;abc&quot;</ETag><PartNumber>1</PartNumber></Part>"
        "<Part><PartNumber>2</PartNumber><ETag>\"def\"</ETag></Part></CompleteMultipartUpload>";
    funcd_s3_part_ref *p = NULL;
    size_t n = 0;
    CHECK_INT(funcd_s3_parse_complete(xml, strlen(xml), &p, &n), 0);
    CHECK_INT((long)n, 2);
    CHECK_INT(p[0].number, 1);
    CHECK_STR(p[0].etag, "abc");
    CHECK_STR(p[1].etag, "def");
    free(p);
    static const char *const bad[] = {
        "", "<CompleteMultipartUpload></CompleteMultipartUpload>",
        "<CompleteMultipartUpload><Part><PartNumber>0</PartNumber><ETag>x</ETag></Part>",
        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber></Part>",
        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>&bogus;</ETag></Part>",
        NULL};
    for (const char *const *b = bad; *b; b++)
        if (funcd_s3_parse_complete(*b, strlen(*b), &p, &n) == 0) {
            free(p);
            FAILF("\"%s\" was taken", *b);
        }
}

/* Keys in XML answers: every C0 control (TAB, LF and CR too, which XML
 * would otherwise normalize) and U+FFFE/U+FFFF as character references, as
 * S3 writes them; bytes that are not UTF-8 as U+FFFD; the rest as is. */
TEST(xml_escape_keys)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"a<b>&\"'", "a&lt;b&gt;&amp;&quot;&apos;"},
        {"ctl\x01\x1f", "ctl&#x1;&#x1F;"},
        {"t\tl\nc\r", "t&#x9;l&#xA;c&#xD;"},
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
        {"nc\xef\xbf\xbe\xef\xbf\xbf", "nc&#xFFFE;&#xFFFF;"},
        {"bad\xff\xc3", "bad&#xFFFD;&#xFFFD;"},
        {"over\xc0\xaf", "over&#xFFFD;&#xFFFD;"},
        {"sur\xed\xa0\x80", "sur&#xFFFD;&#xFFFD;&#xFFFD;"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        funcd_buf b = FUNCD_BUF_INIT;
        CHECK_INT(funcd_s3_xml_escape(&b, cases[i].in), 0);
        funcd_buf_append(&b, "", 1);
        int same = strcmp(b.data, cases[i].out) == 0;
        if (!same)
            fprintf(stderr, "  case %zu: got \"%s\"\n", i, b.data);
        funcd_buf_free(&b);
        CHECK(same);
    }
    CHECK_INT(funcd_s3_utf8_valid("caf\xc3\xa9 \x01\r\xf0\x9f\x98\x80"), 1);
    CHECK_INT(funcd_s3_utf8_valid("bad\xff"), 0);
    CHECK_INT(funcd_s3_utf8_valid("\xc0\xaf"), 0);
    CHECK_INT(funcd_s3_utf8_valid("\xed\xa0\x80"), 0);
    CHECK_INT(funcd_s3_utf8_valid("\xf4\x90\x80\x80"), 0);
    CHECK_INT(funcd_s3_utf8_valid("cut\xe2\x82"), 0);
}

int main(void)
{
    RUN(xml_escape_keys);
    RUN(get_object_with_range);
    RUN(put_object);
    RUN(get_bucket_lifecycle);
    RUN(list_objects);
    RUN(presigned_get);
    RUN(tampered);
    RUN(streaming_chunks);
    RUN(ranges);
    RUN(complete_document);
    return HARNESS_END();
}
