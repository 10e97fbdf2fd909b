/*
 * What the egress gateway reads from workers: the head of a request to its
 * HTTP proxy, and a DNS question. Pure functions of their input (fuzzed by
 * fuzz/fuzz_egress.c).
 */
#ifndef FUNCD_EGRESS_WIRE_H
#define FUNCD_EGRESS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

#define FUNCD_EGRESS_MAX_HEAD 16384 /* a proxy request's head, request line and headers */
#define FUNCD_EGRESS_MAX_HOST 253

/* A request to the proxy: CONNECT host:port, or an absolute-URI request
 * ("GET http://host[:port]/path HTTP/1.1") rewritten for the origin. */
typedef struct funcd_egress_request {
    int connect;                          /* 1: CONNECT (a tunnel) */
    char host[FUNCD_EGRESS_MAX_HOST + 1]; /* a name (lowercased) or a numeric address (no []) */
    uint16_t port;
    funcd_buf head; /* plain HTTP: the head to send the origin (origin-form, Connection: close) */
} funcd_egress_request;

/*
 * Parses the head `data[0..len)` (up to and including the blank line).
 * 0, or an HTTP status to answer with (400 malformed, 405 a method the
 * proxy does not carry, 501 https:// or another scheme) and `why` set.
 * Free `req->head` in every case.
 */
int funcd_egress_parse_request(const char *data, size_t len, funcd_egress_request *req,
                               char *why, size_t why_len);

/* A DNS question (the first of the message). */
typedef struct funcd_egress_question {
    uint16_t id;
    char name[FUNCD_EGRESS_MAX_HOST + 2]; /* dotted, lowercased, no final dot; "" for the root */
    uint16_t qtype, qclass;
    size_t end; /* the offset after the question */
} funcd_egress_question;

/* Parses a DNS query: 0, or -1 (not a query with exactly one question; no
 * answer should be given beyond FORMERR when at least the header is there). */
int funcd_egress_parse_question(const uint8_t *msg, size_t len, funcd_egress_question *q);

/* Writes into `out` (room `cap`) an answer to the query `msg` with rcode
 * (3 NXDOMAIN, 1 FORMERR, 2 SERVFAIL, 5 REFUSED) and no records: header
 * and question copied. Returns its length, or 0 when `msg` is too short. */
size_t funcd_egress_dns_error(const uint8_t *msg, size_t len, const funcd_egress_question *q,
                              int rcode, uint8_t *out, size_t cap);

#endif
