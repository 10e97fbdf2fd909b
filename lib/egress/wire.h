/*
 * What the egress gateway reads from workers: the head of a request to its
 * HTTP proxy, and a DNS question; and from its DNS upstream: answers. Pure
 * functions of their input (fuzzed by fuzz/fuzz_egress.c).
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

/* A query for `name` (dotted, no final dot) of `qtype`, class IN, RD set,
 * into `out`. Its length, or 0 when the name is not a valid one or `cap` too
 * small. */
size_t funcd_egress_dns_query(const char *name, uint16_t qtype, uint16_t id, uint8_t *out,
                              size_t cap);

#define FUNCD_EGRESS_MAX_ADDRS 16

/* What the gateway reads from an upstream's answer. */
typedef struct funcd_egress_answer {
    int rcode;      /* 0 NOERROR, 3 NXDOMAIN, ... */
    int cacheable;  /* 1: it may be kept `ttl` seconds */
    uint32_t ttl;   /* an answer: its records' least TTL; none (NODATA,
                       NXDOMAIN): the SOA's negative TTL (RFC 2308) */
    size_t n_addrs; /* A and AAAA records of the answer section, in order */
    struct {
        int family; /* AF_INET, AF_INET6 */
        uint8_t addr[16];
    } addrs[FUNCD_EGRESS_MAX_ADDRS];
} funcd_egress_answer;

/* Parses `msg` as the answer to question `q` (same id, QR set, the question
 * echoed; a truncated one is never cacheable). 0, or -1 when it is not. */
int funcd_egress_parse_answer(const uint8_t *msg, size_t len, const funcd_egress_question *q,
                              funcd_egress_answer *a);

/* Lowers the TTL of every record of the well-formed answer `msg` (EDNS's
 * OPT aside) to at most `ttl`: a cached answer tells the time left. */
void funcd_egress_dns_cap_ttl(uint8_t *msg, size_t len, uint32_t ttl);

#endif
