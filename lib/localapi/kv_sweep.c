/*
 * The KV sweeper (kv.h): expired keys are invisible from the moment they
 * expire, and this removes them from the store soon after, with the keys of
 * KVStores that were deleted. It runs on the platform loop, on the lease
 * holder when there are several nodes; each removal names the revision it
 * saw, so a key written again meanwhile stays.
 *
 * When: a minute after the last sweep, or as soon as a key noted by a put
 * on this node expires, but never within five seconds of the last sweep.
 */
#include <cjson/cJSON.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "funcd/sys/error.h"
#include "localapi/kv.h"
#include "objects/objects.h"
#include "port/store.h"
#include "util/misc.h"

#define SWEEP_EVERY_MS 60000
#define SWEEP_GAP_MS 5000 /* a full walk of the KV keys: not more often */
#define SWEEP_BATCH 1000 /* keys removed per sweep; more: another sweep a gap later */

struct funcd_kv_sweeper {
    struct event_base *loop;
    funcd_store *store;
    int (*may_sweep)(void *payload);
    void *payload;
    struct event *timer;
    int64_t next_ms; /* when the timer fires */
    int64_t last_ms; /* when the last sweep ran */
    uint64_t removed; /* keys removed so far */
};

typedef struct doomed {
    char *key;
    uint64_t revision;
} doomed;

typedef struct sweep {
    funcd_kv_sweeper *sw;
    doomed *keys;
    size_t n;
    int64_t now_ms, earliest_ms; /* the next expiry seen, or 0 */
    char store_prefix[300];      /* the KVStore whose keys these are ... */
    int store_exists;            /* ... and whether it still exists */
} sweep;

/* Whether the KVStore of `key` (PREFIX ns/store/k) exists; asked once per store. */
static int store_exists(sweep *s, const char *key)
{
    const char *ns = key + strlen(FUNCD_KV_PREFIX);
    const char *slash = strchr(ns, '/');
    const char *end = slash ? strchr(slash + 1, '/') : NULL;
    if (!end || (size_t)(end - key + 1) >= sizeof(s->store_prefix))
        return 1; /* not a key kv.c writes: leave it */
    size_t len = (size_t)(end - key + 1);
    if (strncmp(s->store_prefix, key, len) == 0 && s->store_prefix[len] == '\0')
        return s->store_exists;
    memcpy(s->store_prefix, key, len);
    s->store_prefix[len] = '\0';
    char nsname[128], name[128];
    snprintf(nsname, sizeof(nsname), "%.*s", (int)(slash - ns), ns);
    snprintf(name, sizeof(name), "%.*s", (int)(end - slash - 1), slash + 1);
    cJSON *obj = NULL;
    int rc = funcd_objects_get(s->sw->store, funcd_kind_by_plural("kvstores"), nsname, name,
                               &obj, NULL);
    cJSON_Delete(obj);
    s->store_exists = rc != FUNCD_ENOTFOUND; /* an unreachable store: keep the keys */
    return s->store_exists;
}

static int on_key(const funcd_store_kv *e, void *payload)
{
    sweep *s = payload;
    uint64_t exp = funcd_kv_expiry(e->value, e->len);
    int gone = exp && (int64_t)exp <= s->now_ms;
    if (!gone && exp && (!s->earliest_ms || (int64_t)exp < s->earliest_ms))
        s->earliest_ms = (int64_t)exp;
    if (!gone && !store_exists(s, e->key))
        gone = 1;
    if (!gone)
        return 0;
    doomed *grown = realloc(s->keys, (s->n + 1) * sizeof(*s->keys));
    if (!grown)
        return 1;
    s->keys = grown;
    if (!(s->keys[s->n].key = strdup(e->key)))
        return 1;
    s->keys[s->n++].revision = e->revision;
    return s->n >= SWEEP_BATCH;
}

static void arm(funcd_kv_sweeper *sw, int64_t at_ms)
{
    int64_t now = funcd_now_ms();
    if (at_ms < sw->last_ms + SWEEP_GAP_MS)
        at_ms = sw->last_ms + SWEEP_GAP_MS;
    if (evtimer_pending(sw->timer, NULL) && sw->next_ms <= at_ms)
        return;
    int64_t in = at_ms > now ? at_ms - now : 0;
    struct timeval tv = {(time_t)(in / 1000), (suseconds_t)(in % 1000) * 1000};
    sw->next_ms = at_ms;
    evtimer_add(sw->timer, &tv);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    funcd_kv_sweeper *sw = arg;
    sw->last_ms = funcd_now_ms();
    if (sw->may_sweep && !sw->may_sweep(sw->payload)) {
        arm(sw, sw->last_ms + SWEEP_EVERY_MS);
        return;
    }
    sweep s = {.sw = sw, .now_ms = sw->last_ms};
    funcd_port_store_list(sw->store, FUNCD_KV_PREFIX, on_key, &s, NULL);
    for (size_t i = 0; i < s.n; i++) {
        if (funcd_port_store_del(sw->store, s.keys[i].key, s.keys[i].revision, NULL) == 0)
            sw->removed++;
        free(s.keys[i].key);
    }
    free(s.keys);
    int64_t next = sw->last_ms + SWEEP_EVERY_MS;
    if (s.n >= SWEEP_BATCH)
        next = sw->last_ms; /* more to do: after the gap */
    else if (s.earliest_ms && s.earliest_ms < next)
        next = s.earliest_ms;
    arm(sw, next);
}

int funcd_kv_sweeper_new(funcd_kv_sweeper **out, struct event_base *loop, funcd_store *store)
{
    *out = NULL;
    funcd_kv_sweeper *sw = calloc(1, sizeof(*sw));
    if (!sw || !(sw->timer = evtimer_new(loop, on_timer, sw))) {
        free(sw);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory");
    }
    sw->loop = loop;
    sw->store = store;
    sw->last_ms = funcd_now_ms();
    arm(sw, sw->last_ms + SWEEP_EVERY_MS);
    *out = sw;
    return 0;
}

void funcd_kv_sweeper_set_gate(funcd_kv_sweeper *sw, int (*may_sweep)(void *), void *payload)
{
    sw->may_sweep = may_sweep;
    sw->payload = payload;
}

void funcd_kv_sweeper_note(funcd_kv_sweeper *sw, uint64_t expiry_ms)
{
    if (sw && expiry_ms)
        arm(sw, (int64_t)expiry_ms);
}

uint64_t funcd_kv_sweeper_removed(const funcd_kv_sweeper *sw)
{
    return sw->removed;
}

void funcd_kv_sweeper_free(funcd_kv_sweeper *sw)
{
    if (!sw)
        return;
    event_free(sw->timer);
    free(sw);
}
