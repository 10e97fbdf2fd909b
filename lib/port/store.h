/* Calls into the store port (port.h): components use these, never the slots. */
#ifndef FUNCD_PORT_STORE_H
#define FUNCD_PORT_STORE_H

#include "port/port.h"

static inline int funcd_port_store_get(funcd_store *s, const char *key, funcd_store_value *out)
{
    return s->get(s, key, out);
}

static inline int funcd_port_store_put(funcd_store *s, const char *key, const void *value,
                                       size_t len, uint64_t expected, uint64_t *revision)
{
    return s->put(s, key, value, len, expected, revision);
}

static inline int funcd_port_store_del(funcd_store *s, const char *key, uint64_t expected,
                                       uint64_t *revision)
{
    return s->del(s, key, expected, revision);
}

static inline int funcd_port_store_list(funcd_store *s, const char *prefix,
                                        funcd_store_list_cb cb, void *payload,
                                        uint64_t *revision)
{
    return s->list(s, prefix, cb, payload, revision);
}

static inline int funcd_port_store_watch(funcd_store *s, const char *prefix, uint64_t after,
                                         funcd_store_watch_cb cb, void *payload,
                                         funcd_store_watch **out)
{
    return s->watch(s, prefix, after, cb, payload, out);
}

static inline void funcd_port_store_unwatch(funcd_store *s, funcd_store_watch *w)
{
    s->unwatch(s, w);
}

static inline int funcd_port__stop_listing(const funcd_store_kv *kv, void *payload)
{
    (void)kv;
    (void)payload;
    return 1;
}

/* Optional: without `revision`, the revision of a list's snapshot (the
 * listing stops at its first key). 0 if even that fails. */
static inline uint64_t funcd_port_store_revision(funcd_store *s)
{
    if (FUNCD_PORT_HAS(s, 1, revision))
        return s->revision(s);
    uint64_t rev = 0;
    if (s->list(s, "", funcd_port__stop_listing, NULL, &rev) < 0)
        return 0;
    return rev;
}

static inline void funcd_port_store_free(funcd_store *s)
{
    s->free(s);
}

#endif
