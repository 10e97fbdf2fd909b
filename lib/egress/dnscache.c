/* The egress gateway's DNS answer cache (dnscache.h): a hash table of
 * entries on a least-recently-used list. */
#include <stdlib.h>
#include <string.h>

#include "egress/dnscache.h"

#define BUCKETS 1024

typedef struct entry {
    struct entry *hnext;       /* the bucket's chain */
    struct entry *prev, *next; /* most recently used first */
    char *name;
    uint16_t qtype, qclass;
    uint64_t expires_ms;
    size_t len;
    uint8_t *msg;
} entry;

struct funcd_egress_dns_cache {
    entry *buckets[BUCKETS];
    entry *head, *tail;
    size_t count, max;
};

static unsigned hash(const char *name, uint16_t qtype)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 16777619u;
    h = (h ^ qtype) * 16777619u;
    return h % BUCKETS;
}

funcd_egress_dns_cache *funcd_egress_dns_cache_new(size_t max_entries)
{
    funcd_egress_dns_cache *c = calloc(1, sizeof(*c));
    if (c)
        c->max = max_entries ? max_entries : 1;
    return c;
}

static entry **slot_of(funcd_egress_dns_cache *c, const char *name, uint16_t qtype,
                       uint16_t qclass)
{
    entry **pp = &c->buckets[hash(name, qtype)];
    while (*pp && ((*pp)->qtype != qtype || (*pp)->qclass != qclass || strcmp((*pp)->name, name)))
        pp = &(*pp)->hnext;
    return pp;
}

static void unlink_lru(funcd_egress_dns_cache *c, entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(funcd_egress_dns_cache *c, entry *e)
{
    e->prev = NULL;
    e->next = c->head;
    if (c->head)
        c->head->prev = e;
    c->head = e;
    if (!c->tail)
        c->tail = e;
}

static void drop(funcd_egress_dns_cache *c, entry *e)
{
    entry **pp = slot_of(c, e->name, e->qtype, e->qclass);
    if (*pp == e)
        *pp = e->hnext;
    unlink_lru(c, e);
    free(e->name);
    free(e->msg);
    free(e);
    c->count--;
}

void funcd_egress_dns_cache_free(funcd_egress_dns_cache *c)
{
    if (!c)
        return;
    while (c->head)
        drop(c, c->head);
    free(c);
}

void funcd_egress_dns_cache_put(funcd_egress_dns_cache *c, const char *name, uint16_t qtype,
                                uint16_t qclass, const uint8_t *msg, size_t len, uint32_t ttl,
                                uint64_t now_ms)
{
    if (ttl < FUNCD_EGRESS_DNS_TTL_MIN)
        ttl = FUNCD_EGRESS_DNS_TTL_MIN;
    if (ttl > FUNCD_EGRESS_DNS_TTL_MAX)
        ttl = FUNCD_EGRESS_DNS_TTL_MAX;
    entry *old = *slot_of(c, name, qtype, qclass);
    if (old)
        drop(c, old);
    entry *e = calloc(1, sizeof(*e));
    if (!e || !(e->name = strdup(name)) || !(e->msg = malloc(len ? len : 1))) {
        if (e)
            free(e->name);
        free(e);
        return;
    }
    memcpy(e->msg, msg, len);
    e->len = len;
    e->qtype = qtype;
    e->qclass = qclass;
    e->expires_ms = now_ms + (uint64_t)ttl * 1000;
    while (c->count >= c->max && c->tail)
        drop(c, c->tail);
    entry **pp = slot_of(c, name, qtype, qclass); /* the chain's end */
    *pp = e;
    push_front(c, e);
    c->count++;
}

const uint8_t *funcd_egress_dns_cache_get(funcd_egress_dns_cache *c, const char *name,
                                          uint16_t qtype, uint16_t qclass, uint64_t now_ms,
                                          size_t *len, uint32_t *ttl_left)
{
    entry *e = *slot_of(c, name, qtype, qclass);
    if (!e)
        return NULL;
    if (now_ms >= e->expires_ms) {
        drop(c, e);
        return NULL;
    }
    unlink_lru(c, e);
    push_front(c, e);
    uint64_t left = (e->expires_ms - now_ms + 999) / 1000;
    *ttl_left = left ? (uint32_t)left : 1;
    *len = e->len;
    return e->msg;
}

size_t funcd_egress_dns_cache_count(const funcd_egress_dns_cache *c)
{
    return c->count;
}
