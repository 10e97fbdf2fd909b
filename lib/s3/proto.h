/*
 * The S3 protocol's pieces that read outside input: an HTTP/1.1 request head,
 * its query, SigV4 (Authorization header and presigned query), aws-chunked
 * bodies, Range and the CompleteMultipartUpload document. No I/O of its own
 * except through funcd_s3_reader, so the fuzz target drives it from memory.
 */
#ifndef FUNCD_S3_PROTO_H
#define FUNCD_S3_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define FUNCD_S3_MAX_HEAD (16u << 10) /* request line and headers */
#define FUNCD_S3_MAX_HEADERS 64
#define FUNCD_S3_MAX_PARAMS 32

/* A buffered byte source: `read` fills up to `cap` bytes, returns the count,
 * 0 at the end, -1 on an error. */
typedef struct funcd_s3_reader {
    long (*read)(void *ctx, void *buf, size_t cap);
    void *ctx;
    char buf[64u << 10];
    size_t pos, len;
    int eof, failed;
} funcd_s3_reader;

typedef struct funcd_s3_param {
    char *name, *value; /* decoded */
} funcd_s3_param;

typedef struct funcd_s3_req {
    char head[FUNCD_S3_MAX_HEAD + 1]; /* split in place */
    const char *method;
    const char *target;               /* as sent */
    char path[4096];                  /* decoded path */
    char raw_query[FUNCD_S3_MAX_HEAD + 1];
    int http10;
    size_t n_headers;
    const char *hname[FUNCD_S3_MAX_HEADERS]; /* lower-cased */
    const char *hvalue[FUNCD_S3_MAX_HEADERS];
    size_t n_params;
    funcd_s3_param params[FUNCD_S3_MAX_PARAMS];
    char param_store[FUNCD_S3_MAX_HEAD + FUNCD_S3_MAX_PARAMS * 2];
} funcd_s3_req;

/* Reads one request head. 1: `r` filled; 0: the peer closed before a byte;
 * -1: a read error or timeout; -2: malformed (`err` says why); -3: too large. */
int funcd_s3_read_head(funcd_s3_reader *rd, funcd_s3_req *r, char *err, size_t errlen);
/* Parses a head already in r->head (NUL-terminated, "\r\n\r\n" cut off). */
int funcd_s3_parse_head(funcd_s3_req *r, char *err, size_t errlen);

const char *funcd_s3_header(const funcd_s3_req *r, const char *lname);
/* The decoded value of the query parameter, NULL if absent ("" if valueless). */
const char *funcd_s3_param_get(const funcd_s3_req *r, const char *name);

/* Reads 1 to `cap` bytes (what is buffered, else one read; a large read
 * skips the buffer); the count, or -1 at the end or on an error. */
long funcd_s3_read_upto(funcd_s3_reader *rd, void *out, size_t cap);
/* Reads exactly `len` bytes; 0 or -1. */
int funcd_s3_read_exact(funcd_s3_reader *rd, void *out, size_t len);

/* ---- SigV4 ----------------------------------------------------------------- */

typedef struct funcd_s3_auth {
    char akid[160];
    char date[9];        /* yyyymmdd of the scope */
    char region[64];
    char service[16];
    char amz_date[17];   /* yyyymmddThhmmssZ */
    char signed_headers[1024];
    char signature[65];
    int presigned;
    long expires;        /* presigned: seconds */
    char payload_hash[80]; /* a hex SHA-256, UNSIGNED-PAYLOAD, STREAMING-... */
} funcd_s3_auth;

/* Fills `a` from the Authorization header or the X-Amz-* query. 0; -1 with
 * `code` an S3 error code (AccessDenied, AuthorizationHeaderMalformed, ...)
 * and `err` a message. */
int funcd_s3_auth_parse(const funcd_s3_req *r, funcd_s3_auth *a, const char **code, char *err,
                        size_t errlen);

/* The signing key of secret/date/region/service. */
void funcd_s3_signing_key(const char *secret, const char *date, const char *region,
                          const char *service, uint8_t key[32]);
/* The request's signature (64 hex + NUL) with key `key`. 0, or -1 when a
 * signed header is missing (`err`). */
int funcd_s3_sign_request(const funcd_s3_req *r, const funcd_s3_auth *a, const uint8_t key[32],
                          char out[65], char *err, size_t errlen);
/* One aws-chunked chunk's signature, chained from `prev`. */
void funcd_s3_sign_chunk(const funcd_s3_auth *a, const uint8_t key[32], const char *prev,
                         const char *chunk_sha256_hex, char out[65]);

/* Constant-time equality of two NUL-terminated strings. */
int funcd_s3_streq_ct(const char *a, const char *b);
/* yyyymmddThhmmssZ to epoch seconds; -1 if malformed. */
int64_t funcd_s3_parse_amz_date(const char *s);

/* ---- aws-chunked ----------------------------------------------------------- */

/* One chunk header "hex[;chunk-signature=sig]\r\n": the size and the
 * signature (or "" if none). 0; -1 malformed or read error. */
int funcd_s3_chunk_header(funcd_s3_reader *rd, uint64_t *size, char sig[65]);
/* The CRLF after a chunk's data; 0 or -1. */
int funcd_s3_chunk_end(funcd_s3_reader *rd);
/* Trailer lines after the last chunk, up to the empty line; 0 or -1. */
int funcd_s3_chunk_trailers(funcd_s3_reader *rd);

/* ---- Range ----------------------------------------------------------------- */

/* "bytes=a-b", "bytes=a-", "bytes=-n" against an object of `size`:
 * 1 with [*off, *off+*len); 0: not a range S3 honours (serve the whole object);
 * -1: unsatisfiable (InvalidRange). */
int funcd_s3_parse_range(const char *v, uint64_t size, uint64_t *off, uint64_t *len);

/* ---- XML ------------------------------------------------------------------- */

typedef struct funcd_s3_part_ref {
    unsigned number;
    char etag[72]; /* without quotes */
} funcd_s3_part_ref;

/* The parts of a CompleteMultipartUpload body: 0 with *out malloc()ed
 * (count in *n), -1 malformed (MalformedXML). */
int funcd_s3_parse_complete(const char *xml, size_t len, funcd_s3_part_ref **out, size_t *n);
/* The <Key> elements of a DeleteObjects body and whether <Quiet>true</Quiet>.
 * 0 with *keys a malloc()ed, NULL-terminated list of malloc()ed strings. */
int funcd_s3_parse_delete(const char *xml, size_t len, char ***keys, int *quiet);

/* URI encoding as SigV4 wants it: unreserved bytes kept, '/' kept when
 * `keep_slash`, everything else %XX. Appends to a funcd_buf. */
struct funcd_buf;
int funcd_s3_uri_encode(struct funcd_buf *out, const char *s, size_t len, int keep_slash);
/* XML text escaping: markup characters as entities; C0 controls (TAB, LF
 * and CR included) and U+FFFE/U+FFFF as character references "&#xN;", as
 * S3 writes them (a strict XML 1.0 parser refuses all but TAB, LF and CR:
 * list with encoding-type=url); a byte that is not UTF-8 as "&#xFFFD;". */
int funcd_s3_xml_escape(struct funcd_buf *out, const char *s);
/* 1 if `s` is UTF-8 (shortest forms, no surrogates, at most U+10FFFF). */
int funcd_s3_utf8_valid(const char *s);
/* Percent-decoding in place ("+" kept); -1 on a bad escape or a NUL. */
int funcd_s3_uri_decode(char *s);

#endif
