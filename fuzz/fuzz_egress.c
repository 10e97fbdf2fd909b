/*
 * Fuzz target for what the egress gateway reads (issue 19): any bytes
 * decoded and validated as an EgressPolicy, parsed as the head of a proxy
 * request and as a DNS query. What must hold for every input:
 *   - a valid EgressPolicy compiles into the gateway's rules (validation
 *     and the gateway read a policy alike);
 *   - a proxy request that parses names a host and a port, and a plain
 *     HTTP one gives a complete origin-form head without proxy headers;
 *   - a DNS question that parses lies inside the message, its name in
 *     lowercase, and an error answer to it is no longer than the query;
 *   - an upstream's answer (the same bytes, read as the answer to the
 *     question a query for "api.example.com" asks) parses within bounds,
 *     and lowering its TTLs leaves it an answer with no larger a TTL.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "api/api.h"
#include "egress/policy.h"
#include "egress/wire.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_egress: %s\n", what);
        abort();
    }
}

static void policy(const uint8_t *data, size_t size)
{
    cJSON *obj = NULL;
    funcd_api_error err;
    if (funcd_api_decode((const char *)data, size, &obj, &err) < 0)
        return;
    if (funcd_api_validate(funcd_kind_by_kind("EgressPolicy"), obj, &err) == 0) {
        funcd_egress_policies *p = funcd_egress_policies_new();
        check(p && funcd_egress_policies_put(p, "ns", "p",
                                             cJSON_GetObjectItemCaseSensitive(obj, "spec")) == 0,
              "a valid EgressPolicy compiles");
        funcd_egress_decision d;
        funcd_egress_check_name(p, "ns", "api.example.com", 443, &d);
        funcd_egress_addr a;
        funcd_egress_addr_parse("169.254.169.254", &a);
        funcd_egress_check_addr(p, "ns", &a, 80, 1, &d);
        funcd_egress_policies_free(p);
    } else {
        check(err.message[0] != '\0', "a refused EgressPolicy says why");
    }
    cJSON_Delete(obj);
}

static void request(const uint8_t *data, size_t size)
{
    funcd_egress_request r = {0};
    char why[160] = "";
    int st = funcd_egress_parse_request((const char *)data, size, &r, why, sizeof(why));
    if (st == 0) {
        check(r.host[0] && r.port, "a parsed request names host and port");
        if (!r.connect) {
            check(r.head.len >= 4 && memcmp(r.head.data + r.head.len - 4, "\r\n\r\n", 4) == 0,
                  "the origin's head is complete");
            check(r.head.data[0] != ' ', "the origin's head starts with a method");
            for (size_t i = 0; i + 6 <= r.head.len; i++)
                check(strncasecmp(r.head.data + i, "\nProxy-", 7) != 0,
                      "no proxy header reaches the origin");
        }
    } else {
        check(st >= 400 && why[0], "a refused request has a status and a reason");
    }
    funcd_buf_free(&r.head);
}

static void question(const uint8_t *data, size_t size)
{
    funcd_egress_question q;
    if (funcd_egress_parse_question(data, size, &q) < 0)
        return;
    check(q.end <= size && q.end >= 17, "the question lies inside the message");
    for (const char *s = q.name; *s; s++)
        check(!isupper((unsigned char)*s), "names are lowercased");
    uint8_t out[4096];
    size_t n = funcd_egress_dns_error(data, size, &q, 3, out, sizeof(out));
    check(n <= size && (n == 0 || (out[3] & 0xf) == 3), "an error answer echoes the question");
}

static void answer(const uint8_t *data, size_t size)
{
    funcd_egress_question q = {.qtype = 1, .qclass = 1};
    snprintf(q.name, sizeof(q.name), "api.example.com");
    if (size >= 2)
        q.id = (uint16_t)(data[0] << 8 | data[1]);
    funcd_egress_answer a;
    if (funcd_egress_parse_answer(data, size, &q, &a) < 0)
        return;
    check(a.n_addrs <= FUNCD_EGRESS_MAX_ADDRS, "addresses fit");
    for (size_t i = 0; i < a.n_addrs; i++)
        check(a.addrs[i].family == AF_INET || a.addrs[i].family == AF_INET6, "an address family");
    check(a.cacheable || a.ttl == 0, "an answer not to keep has no TTL");
    uint8_t *copy = malloc(size);
    if (!copy)
        return;
    memcpy(copy, data, size);
    funcd_egress_dns_cap_ttl(copy, size, 3);
    funcd_egress_answer b;
    check(funcd_egress_parse_answer(copy, size, &q, &b) == 0, "a capped answer still parses");
    check(b.n_addrs == a.n_addrs && (!b.cacheable || b.ttl <= 3), "capping lowers TTLs only");
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    policy(data, size);
    request(data, size);
    question(data, size);
    answer(data, size);
    return 0;
}
