/*
 * HTTP/1.x message parsing for funcd's own clients and servers (the gateway
 * reading a worker's answer, the readiness probe, the control plane's look
 * at a request head), on Debian's libhttp-parser (docs/adr/0029-packaged-
 * http-parser.md).
 *
 * A message is read in two steps:
 *  - funcd_http1_head() parses the head from the start of a buffer that
 *    holds every byte read so far (it parses from the start again on each
 *    call, so a head cut across reads needs no state): its length once
 *    complete. The fields and spans point into that buffer.
 *  - funcd_http1_body() then decodes the bytes after the head, read by
 *    read, in place (a chunked body's framing is dropped), until `done`.
 *
 *      funcd_http1_field fields[64];
 *      funcd_http1 m;
 *      funcd_http1_init_response(&m, is_head_request, fields, 64);
 *      ssize_t n = funcd_http1_head(&m, buf, len);   // 0: read more
 *      ...  m.status, m.fields[0..m.nfields), m.keep_alive
 *      size_t out;
 *      ssize_t took = funcd_http1_body(&m, buf + n, len - n, &out);
 *      ...  buf[n .. n+out) is body; m.done once it is all there
 */
#ifndef FUNCD_HTTP_HTTP1_H
#define FUNCD_HTTP_HTTP1_H

#include <http_parser.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* content_length when the head gives none */
#define FUNCD_HTTP1_NO_LENGTH UINT64_MAX

typedef struct funcd_http1_field {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
} funcd_http1_field;

typedef struct funcd_http1 {
    /* The head, once funcd_http1_head() returned its length. */
    int status;                    /* a response's status code */
    const char *reason;            /* its reason phrase (may be empty) */
    size_t reason_len;
    const char *method;            /* a request's method, as sent */
    size_t method_len;
    const char *target;            /* a request's target (path and query) */
    size_t target_len;
    int minor_version;             /* HTTP/1.<minor> */
    funcd_http1_field *fields;     /* the caller's array, in order */
    size_t nfields, max_fields;
    uint64_t content_length;       /* FUNCD_HTTP1_NO_LENGTH: none given */
    int chunked;                   /* Transfer-Encoding: chunked */
    int has_body;                  /* body bytes follow the head (or may: until_close) */
    int until_close;               /* the body ends when the connection does */
    int keep_alive;                /* the connection may carry another message after this one */
    /* The body. */
    int done;                      /* the message is complete */
    const char *error;             /* why the message is not valid, when a call returned -1 */
    /* private */
    int fast;                      /* the head was read by the fast path (http1.c) */
    uint64_t left;                 /* fast: body bytes still to come */
    http_parser parser;
    int head_request;
    int last_cb;
    int in_body;
    char *out;
    size_t out_len;
} funcd_http1;

/* A response; `head_request`: it answers a HEAD request (no body follows). */
void funcd_http1_init_response(funcd_http1 *m, int head_request, funcd_http1_field *fields,
                               size_t max_fields);
void funcd_http1_init_request(funcd_http1 *m, funcd_http1_field *fields, size_t max_fields);

/* Parses the head at the start of buf[0..len): its length when complete,
 * 0 when more bytes are needed, -1 when it is not a valid HTTP/1.x head
 * or has more than max_fields fields (m->error says which). A message
 * without a body is `done` at once. The caller bounds the head's size. */
ssize_t funcd_http1_head(funcd_http1 *m, const char *buf, size_t len);

/* funcd_http1_head() through libhttp-parser only, never the fast path:
 * for tests and the fuzz target, which compare the two. */
ssize_t funcd_http1_head_slow(funcd_http1 *m, const char *buf, size_t len);

/* Decodes body bytes (those after the head) in place: the body's bytes
 * move to the front of buf and *out says how many. Returns how many of the
 * `len` bytes belong to this message: fewer than `len` only when it ended
 * before them (m->done; the rest is whatever the peer sent next). -1 when
 * the body is malformed (m->error). */
ssize_t funcd_http1_body(funcd_http1 *m, char *buf, size_t len, size_t *out);

/* The connection ended after the bytes given so far: 1 when that completes
 * the message (a body that ends with the connection, or one already done),
 * 0 when the message was cut short. */
int funcd_http1_eof(funcd_http1 *m);

/* Case-insensitive comparison of a field name with a lowercase literal. */
int funcd_http1_name_is(const funcd_http1_field *f, const char *lower, size_t lower_len);
#define FUNCD_HTTP1_NAME_IS(f, lit) funcd_http1_name_is((f), lit, sizeof(lit) - 1)

#endif
