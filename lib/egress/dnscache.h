/*
 * The egress gateway's DNS answer cache (docs/egress.md): answers from the
 * upstream, kept for their own TTL clamped to [FUNCD_EGRESS_DNS_TTL_MIN,
 * FUNCD_EGRESS_DNS_TTL_MAX] seconds, at most a given number of them (the
 * least recently used goes first). It holds name -> answer only: whether a
 * worker may ask for a name or connect to an address is decided anew each
 * time (policy.h), never cached.
 *
 * Threads: one thread (the gateway's) uses a cache.
 */
#ifndef FUNCD_EGRESS_DNSCACHE_H
#define FUNCD_EGRESS_DNSCACHE_H

#include <stddef.h>
#include <stdint.h>

#define FUNCD_EGRESS_DNS_TTL_MIN 5    /* seconds: a TTL of 0 still spares the next question */
#define FUNCD_EGRESS_DNS_TTL_MAX 300  /* seconds: a changed record is seen within 5 minutes */
#define FUNCD_EGRESS_DNS_CACHE_MAX 4096 /* answers kept (each at most 4 KiB) */

typedef struct funcd_egress_dns_cache funcd_egress_dns_cache;

/* NULL when out of memory. */
funcd_egress_dns_cache *funcd_egress_dns_cache_new(size_t max_entries);
void funcd_egress_dns_cache_free(funcd_egress_dns_cache *c);

/* Keeps a copy of `msg`, the answer for name/qtype/qclass (name lowercase,
 * no final dot), for `ttl` seconds clamped as above, from `now_ms` (a
 * monotonic clock). Replaces an earlier answer; out of memory: not kept. */
void funcd_egress_dns_cache_put(funcd_egress_dns_cache *c, const char *name, uint16_t qtype,
                                uint16_t qclass, const uint8_t *msg, size_t len, uint32_t ttl,
                                uint64_t now_ms);

/* The kept answer (valid until the next call on the cache) and in *ttl_left
 * the seconds it has left (at least 1); NULL when none or expired. */
const uint8_t *funcd_egress_dns_cache_get(funcd_egress_dns_cache *c, const char *name,
                                          uint16_t qtype, uint16_t qclass, uint64_t now_ms,
                                          size_t *len, uint32_t *ttl_left);

/* Answers kept now (expired ones included until they are met or evicted). */
size_t funcd_egress_dns_cache_count(const funcd_egress_dns_cache *c);

#endif
