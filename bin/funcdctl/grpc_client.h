/*
 * funcdctl's gRPC client: one unary call over HTTP/2 (cleartext with prior
 * knowledge, or TLS with ALPN h2; no compression), with libnghttp2's client session on a
 * socket this code drives itself, plus the few protobuf wire-format helpers
 * that encoding a request and decoding a response by hand need.
 *
 * Synchronous and single-threaded, like the rest of funcdctl.
 */
#ifndef FUNCDCTL_GRPC_CLIENT_H
#define FUNCDCTL_GRPC_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

/* gRPC status codes funcdctl names (the full list is in ctl_grpc_status_name). */
#define CTL_GRPC_OK 0
#define CTL_GRPC_UNKNOWN 2
#define CTL_GRPC_DEADLINE_EXCEEDED 4
#define CTL_GRPC_RESOURCE_EXHAUSTED 8
#define CTL_GRPC_INTERNAL 13
#define CTL_GRPC_UNAVAILABLE 14
/* Not a gRPC code: the runner could not be reached or spoke no HTTP/2. */
#define CTL_GRPC_TRANSPORT (-1)

typedef struct ctl_grpc_call {
    const char *addr;         /* "host:port", "[v6]:port", "http[s]://host:port" or "unix:/path" */
    const char *path;         /* "/package.Service/Method" */
    const uint8_t *request;   /* the serialized request message */
    size_t request_len;
    int64_t timeout_ms;       /* sent as grpc-timeout; the call gives up a second later. 0: none */
    size_t max_response;      /* a larger response message fails the call (RESOURCE_EXHAUSTED) */
    const char *token;        /* sent as `authorization: Bearer TOKEN`; NULL or "": none */
    /* TLS ("https://ADDR", or ADDR without a scheme when this is set): the
     * runner's certificate must chain to this PEM file (NULL: the system's
     * CAs) and name the host or address dialled. */
    const char *cacert;
} ctl_grpc_call;

typedef struct ctl_grpc_result {
    int status;        /* the gRPC status, or CTL_GRPC_TRANSPORT */
    funcd_buf message; /* grpc-message, percent-decoded, or what went wrong; may be empty */
    funcd_buf response; /* the response message without its 5-byte prefix (status OK only) */
} ctl_grpc_result;

#define CTL_GRPC_RESULT_INIT {CTL_GRPC_TRANSPORT, FUNCD_BUF_INIT, FUNCD_BUF_INIT}

/* Makes the call and fills `out` (freed by the caller, whatever happened).
 * Returns out->status. */
int ctl_grpc_unary(const ctl_grpc_call *call, ctl_grpc_result *out);
void ctl_grpc_result_free(ctl_grpc_result *r);

/* "NOT_FOUND" for 5; "TRANSPORT" for CTL_GRPC_TRANSPORT; "UNKNOWN_CODE" past the list. */
const char *ctl_grpc_status_name(int status);

/* The grpc-timeout header value for `ms` (at most 8 digits and a unit:
 * "30000m", "5000000S", "99999999H"), into out (at least 10 bytes). */
void ctl_grpc_timeout_value(int64_t ms, char *out, size_t len);

/* grpc-message's percent-encoding undone ("%25" -> "%"); a malformed escape
 * is kept as it is. Appends to `out`; 0 or -1 on OOM. */
int ctl_grpc_percent_decode(const char *s, size_t len, funcd_buf *out);

/* ---- protobuf wire format ------------------------------------------------- */

#define CTL_PB_VARINT 0
#define CTL_PB_FIXED64 1
#define CTL_PB_LEN 2
#define CTL_PB_FIXED32 5

/* Appends field `number` as length-delimited bytes (or a string). proto3
 * leaves empty fields out, and so does this. 0 or -1 on OOM. */
int ctl_pb_put_bytes(funcd_buf *b, uint32_t number, const void *data, size_t len);

typedef struct ctl_pb_reader {
    const uint8_t *p, *end;
} ctl_pb_reader;

typedef struct ctl_pb_field {
    uint32_t number;
    int wire_type;       /* CTL_PB_* */
    uint64_t value;      /* VARINT, FIXED64, FIXED32 */
    const uint8_t *data; /* LEN: points into the message */
    size_t len;
} ctl_pb_field;

/* The next field of a message: 1 and *f filled, 0 at its end, -1 when the
 * bytes are not a well-formed message (groups, which proto3 lacks, count
 * as malformed). */
int ctl_pb_next(ctl_pb_reader *r, ctl_pb_field *f);

#endif
