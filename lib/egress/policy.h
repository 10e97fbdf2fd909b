/*
 * Egress policies (docs/egress.md): what the EgressPolicy objects of a
 * namespace allow, compiled once per object, and the decisions the egress
 * gateway makes per connection and per DNS question.
 *
 * Several policies of one namespace are unioned: a destination is allowed
 * when any rule of any of them allows it. Nothing else is (defaultAction is
 * always deny).
 *
 * Threads: a funcd_egress_policies table may be changed and read from any
 * thread (one lock); decisions copy what they report.
 */
#ifndef FUNCD_EGRESS_POLICY_H
#define FUNCD_EGRESS_POLICY_H

#include <cjson/cJSON.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define FUNCD_EGRESS_MAX_RULES 256
#define FUNCD_EGRESS_MAX_PORTS 64

/* An address range: `family` AF_INET or AF_INET6, `addr` in network order
 * (the first 4 bytes for IPv4), `prefix` bits. */
typedef struct funcd_egress_cidr {
    int family;
    uint8_t addr[16];
    unsigned prefix;
} funcd_egress_cidr;

/* Parses "10.20.0.0/16", "2001:db8::/32" or a bare address (a /32 or
 * /128). Host bits must be zero. 0, or -1. */
int funcd_egress_parse_cidr(const char *s, funcd_egress_cidr *out);
/* Whether `addr` (of `family`) is inside `c`. */
int funcd_egress_cidr_contains(const funcd_egress_cidr *c, int family, const uint8_t *addr);

/* Whether `pattern` is a valid host rule: a lowercase DNS name
 * ("api.example.com") or "*." and one ("*.example.com"). */
int funcd_egress_valid_host_pattern(const char *pattern);
/* Whether `name` (any case, an optional final dot) matches `pattern`:
 * exactly, or for "*.example.com" any name ending in ".example.com" (one
 * or more labels more; not example.com itself). */
int funcd_egress_host_matches(const char *pattern, const char *name);

/* A socket address as the gateway sees it. */
typedef struct funcd_egress_addr {
    int family;
    uint8_t addr[16];
} funcd_egress_addr;

/* Fills `out` from a sockaddr (AF_INET, AF_INET6; a v4-mapped v6 address
 * becomes AF_INET). 0, or -1. */
int funcd_egress_addr_from_sockaddr(const struct sockaddr *sa, funcd_egress_addr *out);
/* Parses a numeric address ("10.0.0.1", "::1", "[::1]"). 0, or -1. */
int funcd_egress_addr_parse(const char *s, funcd_egress_addr *out);
/* "10.0.0.1", "::1". */
void funcd_egress_addr_str(const funcd_egress_addr *a, char *out, size_t len);

/* Addresses never reached unless a CIDR rule names them explicitly:
 * loopback, link-local (169.254/16 with the cloud metadata address, fe80::/10),
 * unspecified, multicast; and the platform's own listeners (see below).
 * Returns a short word for the log ("loopback", "link-local", ...) or NULL. */
const char *funcd_egress_special(const funcd_egress_addr *a);
/* 1 when `a` is one of this node's own addresses (its interfaces', read
 * again at most once a minute). Any thread. */
int funcd_egress_node_address(const funcd_egress_addr *a);
/* The same word when range `c` overlaps such addresses (the platform's own
 * listeners are on loopback), else NULL: only an admin may write a rule
 * that opens them (lib/controlplane/admission.c). */
const char *funcd_egress_cidr_special(const funcd_egress_cidr *c);

typedef struct funcd_egress_policies funcd_egress_policies;

/* NULL only when out of memory. */
funcd_egress_policies *funcd_egress_policies_new(void);
void funcd_egress_policies_free(funcd_egress_policies *p);

/* Sets (or replaces) policy ns/name from its spec (an EgressPolicy's
 * validated "spec"). A spec that does not compile is an error and leaves
 * the old rules (FUNCD_EINVAL, funcd_error set). */
int funcd_egress_policies_put(funcd_egress_policies *p, const char *ns, const char *name,
                              const cJSON *spec);
void funcd_egress_policies_remove(funcd_egress_policies *p, const char *ns, const char *name);

/* The platform's own listeners: connections to them are denied unless a
 * CIDR rule of a single address (/32, /128) names their address and the
 * rule lists the port. A listener on 0.0.0.0 or :: stands for every
 * address of the host (loopback included). Replaces the previous list. */
int funcd_egress_policies_set_platform(funcd_egress_policies *p, const funcd_egress_addr *addrs,
                                       const uint16_t *ports, size_t n);

/* A decision, with what the audit line says about it. */
typedef struct funcd_egress_decision {
    int allowed;
    char rule[160]; /* "policy/name allow[0] host=api.example.com" or why denied */
} funcd_egress_decision;

/* May `name` (a DNS name, never a numeric address) be connected to on
 * `port`, before resolving it? port 0: any port (a DNS question). */
void funcd_egress_check_name(funcd_egress_policies *p, const char *ns, const char *name,
                             uint16_t port, funcd_egress_decision *d);
/* May address `a` be connected to on `port`? `by_name` 1 when it came from
 * resolving a name that check_name allowed: then an ordinary address
 * passes without a CIDR rule, and a special one (loopback, link-local, the
 * platform's) only with an explicit CIDR rule. `by_name` 0 (the client gave
 * a numeric address): a CIDR rule must contain it. */
void funcd_egress_check_addr(funcd_egress_policies *p, const char *ns, const funcd_egress_addr *a,
                             uint16_t port, int by_name, funcd_egress_decision *d);

#endif
