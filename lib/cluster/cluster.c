#include "cluster/nodes.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "funcd/sys/error.h"
#include "port/store.h"
#include "serving/serving.h"
#include "util/buf.h"
#include "util/misc.h"

/* Another node as last listed: its record and when its revision last moved
 * on our monotonic clock (liveness is judged like the lease's, lease.h). */
typedef struct peer {
    char name[FUNCD_NODE_NAME_MAX];
    uint64_t rev;
    int64_t seen_at;
    uint64_t ttl_ms;
    int ready;
    int live;          /* as judged at the last refresh */
    cJSON *functions;  /* {"ns/name": [ready, total]} */
    int listed;        /* scratch: still in the store */
} peer;

struct funcd_cluster {
    funcd_cluster_config cfg;
    char name[FUNCD_NODE_NAME_MAX];
    char address[256];
    char node_key[sizeof(FUNCD_NODES_PREFIX) + FUNCD_NODE_NAME_MAX];
    int64_t start_wall;
    uint64_t node_rev; /* our record's revision; 0: not written yet */
    int node_conflicts; /* logged once: another process uses our name */
    int renew_failing, lease_failing; /* logged when they start and end, not every tick */
    funcd_lease lease;
    atomic_int leader;          /* what the subsystems were told */
    _Atomic int64_t leader_until; /* monotonic ms: leader only before this */
    atomic_int stopped; /* read by funcd_cluster_poke on any thread */
    struct event *tick, *soon, *wake;
    atomic_int poked;
    atomic_int wake_lease, wake_peers;
    funcd_store_watch *watch;
    pthread_mutex_t lock; /* guards peers */
    peer *peers;
    size_t n_peers;
};

/* ---- the heartbeat ------------------------------------------------------ */

static void put_counts(void *ctx, const funcd_metrics_gauges *g)
{
    char key[300];
    snprintf(key, sizeof(key), "%s/%s", g->ns, g->name);
    cJSON *pair = cJSON_CreateArray();
    cJSON_AddItemToArray(pair, cJSON_CreateNumber(g->ready));
    cJSON_AddItemToArray(pair, cJSON_CreateNumber(g->ready + g->starting + g->stopping));
    cJSON_AddItemToObject(ctx, key, pair);
}

static char *node_value(funcd_cluster *c, int64_t wall)
{
    char started[32], renewed[32];
    funcd_rfc3339(c->start_wall, started, sizeof(started));
    funcd_rfc3339(wall, renewed, sizeof(renewed));
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "name", c->name);
    cJSON_AddStringToObject(j, "address", c->address);
    cJSON_AddStringToObject(j, "startTime", started);
    cJSON_AddStringToObject(j, "renewTime", renewed);
    cJSON_AddNumberToObject(j, "startMs", (double)c->start_wall);
    cJSON_AddNumberToObject(j, "renewMs", (double)wall);
    cJSON_AddNumberToObject(j, "ttlMs", (double)c->lease.ttl_ms);
    cJSON_AddBoolToObject(j, "ready", !atomic_load(&c->stopped));
    cJSON_AddNumberToObject(j, "workers", c->cfg.workers ? c->cfg.workers(c->cfg.payload) : 0);
    cJSON *fns = cJSON_AddObjectToObject(j, "functions");
    if (c->cfg.serving && fns)
        funcd_serving_gauges(c->cfg.serving, put_counts, fns);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

static void heartbeat(funcd_cluster *c)
{
    char *value = node_value(c, funcd_now_ms());
    if (!value)
        return;
    size_t len = strlen(value);
    uint64_t rev = 0;
    int rc = FUNCD_ECONFLICT;
    if (c->node_rev)
        rc = funcd_port_store_put(c->cfg.store, c->node_key, value, len, c->node_rev, &rev);
    if (rc == FUNCD_ECONFLICT || rc == FUNCD_ENOTFOUND) {
        if (c->node_rev && !c->node_conflicts++)
            funcd_log(c->cfg.logger, FUNCD_LOG_ERROR,
                      "cluster: another process wrote the record of node \"%s\": node names "
                      "must be unique (--node-name)", c->name);
        /* First write, or taken back: over whatever is there (an earlier run
         * of this node left it), still by compare-and-swap. */
        funcd_store_value old = {0};
        int g = funcd_port_store_get(c->cfg.store, c->node_key, &old);
        free(old.value);
        if (g == 0 || g == FUNCD_ENOTFOUND)
            rc = funcd_port_store_put(c->cfg.store, c->node_key, value, len,
                                      g == 0 ? old.revision : FUNCD_STORE_ABSENT, &rev);
        else
            rc = g;
    }
    free(value);
    if (rc == 0) {
        c->node_rev = rev;
        if (c->renew_failing)
            funcd_log(c->cfg.logger, FUNCD_LOG_INFO, "cluster: node \"%s\" renewed again",
                      c->name);
        c->renew_failing = 0;
    } else if (rc != FUNCD_ECONFLICT && rc != FUNCD_EEXISTS && !c->renew_failing++) {
        funcd_log(c->cfg.logger, FUNCD_LOG_WARN, "cluster: renewing node \"%s\": %s (retried "
                  "every %llu ms)", c->name, funcd_error_last()->message,
                  (unsigned long long)(c->lease.ttl_ms / 3));
    }
}

/* ---- the lease ---------------------------------------------------------- */

static void lease_step(funcd_cluster *c)
{
    /* What the subsystems saw last: a deadline that passed before this step
     * (a loop held up, a slow store) made funcd_cluster_is_leader say no,
     * so leader-only work was skipped and a renewal now is a new start. */
    int was = funcd_cluster_is_leader(c);
    int64_t mono = funcd_mono_ms();
    int rc = funcd_lease_step(&c->lease, funcd_now_ms(), mono);
    if (rc < 0 && !c->lease_failing++)
        funcd_log(c->cfg.logger, FUNCD_LOG_WARN, "cluster: the lease: %s",
                  funcd_error_last()->message);
    else if (rc >= 0)
        c->lease_failing = 0;
    int held = funcd_lease_held(&c->lease, mono);
    atomic_store(&c->leader_until, held ? c->lease.held_until : 0);
    int told = atomic_exchange(&c->leader, held);
    if (held == was && held == told)
        return;
    funcd_log(c->cfg.logger, FUNCD_LOG_INFO, held ? "cluster: node \"%s\" leads"
                                                  : "cluster: node \"%s\" no longer leads",
              c->name);
    if (c->cfg.leading)
        c->cfg.leading(held, c->cfg.payload);
}

int funcd_cluster_is_leader(const funcd_cluster *c)
{
    if (!c)
        return 1;
    return atomic_load(&c->leader) && funcd_mono_ms() < atomic_load(&c->leader_until);
}

/* ---- other nodes ---------------------------------------------------------- */

static peer *find_peer(funcd_cluster *c, const char *name)
{
    for (size_t i = 0; i < c->n_peers; i++)
        if (strcmp(c->peers[i].name, name) == 0)
            return &c->peers[i];
    return NULL;
}

/* Tells the leader about every function whose counts differ between two
 * sets ({"ns/name": [ready, total]}; NULL: none). */
static void diff_counts(funcd_cluster *c, const cJSON *before, const cJSON *after)
{
    if (!c->cfg.replicas_changed || !atomic_load(&c->leader))
        return;
    const cJSON *sets[2] = {before, after}, *f;
    for (int s = 0; s < 2; s++)
        cJSON_ArrayForEach(f, sets[s])
        {
            const cJSON *other = cJSON_GetObjectItemCaseSensitive(sets[!s], f->string);
            if (s == 1 && other)
                continue; /* compared on the first pass */
            if (other && cJSON_Compare(f, other, 1))
                continue;
            char ns[128];
            const char *slash = strchr(f->string, '/');
            if (!slash || (size_t)(slash - f->string) >= sizeof(ns))
                continue;
            snprintf(ns, sizeof(ns), "%.*s", (int)(slash - f->string), f->string);
            c->cfg.replicas_changed(ns, slash + 1, c->cfg.payload);
        }
}

static int list_peer(const funcd_store_kv *kv, void *payload)
{
    funcd_cluster *c = payload;
    const char *name = kv->key + strlen(FUNCD_NODES_PREFIX);
    if (strcmp(name, c->name) == 0 || strlen(name) >= FUNCD_NODE_NAME_MAX)
        return 0;
    peer *p = find_peer(c, name);
    if (!p) {
        peer *grown = realloc(c->peers, (c->n_peers + 1) * sizeof(*grown));
        if (!grown)
            return 0;
        c->peers = grown;
        p = &c->peers[c->n_peers++];
        memset(p, 0, sizeof(*p));
        snprintf(p->name, sizeof(p->name), "%s", name);
    }
    p->listed = 1;
    if (p->rev == kv->revision)
        return 0;
    funcd_node_record rec;
    cJSON *j = cJSON_ParseWithLength(kv->value, kv->len);
    int parsed = funcd_node_record_parse(kv->value, kv->len, &rec) == 0;
    p->rev = kv->revision;
    p->seen_at = funcd_mono_ms();
    p->ttl_ms = parsed ? rec.ttl_ms : FUNCD_LEASE_TTL_DEFAULT_MS;
    p->ready = parsed && rec.ready;
    cJSON *fns = cJSON_DetachItemFromObjectCaseSensitive(j, "functions");
    if (p->live && p->ready)
        diff_counts(c, p->functions, fns);
    cJSON_Delete(p->functions);
    p->functions = fns;
    cJSON_Delete(j);
    return 0;
}

/* The leader deletes the record of a node that has not renewed it for
 * FUNCD_NODE_FORGET_TTLS of its TTLs (judged like liveness, on our clock),
 * by compare-and-swap on the revision it judged: a node that renews at
 * that moment keeps its record. 1 when deleted. */
static int forgotten(funcd_cluster *c, const peer *p, int64_t mono)
{
    if (!funcd_cluster_is_leader(c) ||
        mono - p->seen_at <= (int64_t)(p->ttl_ms * FUNCD_NODE_FORGET_TTLS))
        return 0;
    char key[sizeof(FUNCD_NODES_PREFIX) + FUNCD_NODE_NAME_MAX];
    snprintf(key, sizeof(key), FUNCD_NODES_PREFIX "%s", p->name);
    if (funcd_port_store_del(c->cfg.store, key, p->rev, NULL) < 0)
        return 0; /* renewed meanwhile, or the store is away: judged again next time */
    funcd_log(c->cfg.logger, FUNCD_LOG_INFO, "cluster: deleted the record of node \"%s\", not "
              "renewed for %lld s", p->name, (long long)((mono - p->seen_at) / 1000));
    return 1;
}

/* Re-lists the records and judges which nodes are live; the leader hears
 * of every count that came or went with a node. */
static void refresh_peers(funcd_cluster *c)
{
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->n_peers; i++)
        c->peers[i].listed = 0;
    int rc = funcd_port_store_list(c->cfg.store, FUNCD_NODES_PREFIX, list_peer, c, NULL);
    int64_t mono = funcd_mono_ms();
    size_t kept = 0;
    for (size_t i = 0; i < c->n_peers; i++) {
        peer *p = &c->peers[i];
        if (rc < 0)
            p->listed = 1; /* the store is away: judge by what we saw last */
        int live = p->listed && p->ready && mono - p->seen_at <= (int64_t)p->ttl_ms;
        if (live != p->live)
            diff_counts(c, live ? NULL : p->functions, live ? p->functions : NULL);
        p->live = live;
        if (rc >= 0 && p->listed && forgotten(c, p, mono))
            p->listed = 0; /* deleted: dropped below like any record gone */
        if (p->listed) {
            c->peers[kept++] = *p;
        } else {
            cJSON_Delete(p->functions);
        }
    }
    c->n_peers = kept;
    pthread_mutex_unlock(&c->lock);
}

void funcd_cluster_add_replicas(funcd_cluster *c, const char *ns, const char *name,
                                unsigned *ready, unsigned *total)
{
    if (!c)
        return;
    char key[300];
    snprintf(key, sizeof(key), "%s/%s", ns, name);
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->n_peers; i++) {
        const cJSON *pair = c->peers[i].live
                                ? cJSON_GetObjectItemCaseSensitive(c->peers[i].functions, key)
                                : NULL;
        const cJSON *r = cJSON_GetArrayItem(pair, 0), *t = cJSON_GetArrayItem(pair, 1);
        if (cJSON_IsNumber(r) && cJSON_IsNumber(t) && r->valuedouble >= 0 &&
            t->valuedouble >= 0) {
            *ready += (unsigned)r->valuedouble;
            *total += (unsigned)t->valuedouble;
        }
    }
    pthread_mutex_unlock(&c->lock);
}

/* ---- the loop ----------------------------------------------------------- */

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    funcd_cluster *c = arg;
    heartbeat(c);
    lease_step(c);
    refresh_peers(c);
}

static void on_soon(evutil_socket_t fd, short what, void *arg)
{
    funcd_cluster *c = arg;
    atomic_store(&c->poked, 0);
    heartbeat(c);
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    funcd_cluster *c = arg;
    if (atomic_exchange(&c->wake_lease, 0))
        lease_step(c);
    if (atomic_exchange(&c->wake_peers, 0))
        refresh_peers(c);
}

/* On the writer's thread: only flags and a wake-up. Our own writes are
 * not news; another's renewal of the lease changes nothing before its TTL. */
static void on_event(const funcd_store_event *ev, void *payload)
{
    funcd_cluster *c = payload;
    if (strcmp(ev->key, FUNCD_LEADER_KEY) == 0) {
        if (ev->type != FUNCD_STORE_EVENT_DELETE)
            return;
        atomic_store(&c->wake_lease, 1);
    } else if (funcd_has_prefix(ev->key, FUNCD_NODES_PREFIX) && strcmp(ev->key, c->node_key)) {
        atomic_store(&c->wake_peers, 1);
    } else {
        return;
    }
    event_active(c->wake, EV_READ, 0);
}

void funcd_cluster_poke(funcd_cluster *c)
{
    if (!c || atomic_load(&c->stopped) || atomic_exchange(&c->poked, 1))
        return;
    /* Coalesced: a burst of replica changes is one renewal. */
    struct timeval soon = {0, 100 * 1000};
    event_add(c->soon, &soon);
}

int funcd_cluster_new(funcd_cluster **out, const funcd_cluster_config *cfg)
{
    *out = NULL;
    if (!funcd_node_name_ok(cfg->name))
        return funcd_error_set(FUNCD_EINVAL, "node name \"%s\" must be a DNS-1123 subdomain: "
                               "lowercase letters, digits, '-' and '.', at most 253 characters "
                               "(--node-name)", cfg->name ? cfg->name : "");
    funcd_cluster *c = calloc(1, sizeof(*c));
    if (!c)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the cluster node");
    c->cfg = *cfg;
    snprintf(c->name, sizeof(c->name), "%s", cfg->name);
    snprintf(c->address, sizeof(c->address), "%s", cfg->address ? cfg->address : "");
    snprintf(c->node_key, sizeof(c->node_key), FUNCD_NODES_PREFIX "%s", c->name);
    funcd_lease_init(&c->lease, cfg->store, FUNCD_LEADER_KEY, c->name, cfg->ttl_ms);
    pthread_mutex_init(&c->lock, NULL);
    c->tick = event_new(cfg->loop, -1, EV_PERSIST, on_tick, c);
    c->soon = event_new(cfg->loop, -1, 0, on_soon, c);
    c->wake = event_new(cfg->loop, -1, 0, on_wake, c);
    if (!c->tick || !c->soon || !c->wake) {
        funcd_cluster_free(c);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the cluster's events");
    }
    *out = c;
    return 0;
}

int funcd_cluster_start(funcd_cluster *c)
{
    c->start_wall = funcd_now_ms();
    uint64_t rev = funcd_port_store_revision(c->cfg.store);
    /* Without a watch the timer still does everything, a little later. */
    if (funcd_port_store_watch(c->cfg.store, FUNCD_CLUSTER_PREFIX, rev, on_event, c,
                               &c->watch) < 0) {
        c->watch = NULL;
        funcd_log(c->cfg.logger, FUNCD_LOG_WARN, "cluster: watching %s: %s",
                  FUNCD_CLUSTER_PREFIX, funcd_error_last()->message);
    }
    on_tick(-1, 0, c); /* a single node leads before its controller starts */
    uint64_t every = c->lease.ttl_ms / 3 ? c->lease.ttl_ms / 3 : 1;
    struct timeval tv = {(time_t)(every / 1000), (suseconds_t)(every % 1000) * 1000};
    if (event_add(c->tick, &tv) < 0)
        return funcd_error_set(FUNCD_ENOMEM, "cannot start the cluster's timer");
    return 0;
}

void funcd_cluster_stop(funcd_cluster *c)
{
    if (!c || atomic_exchange(&c->stopped, 1))
        return;
    event_del(c->tick);
    event_del(c->soon);
    event_del(c->wake);
    if (c->watch)
        funcd_port_store_unwatch(c->cfg.store, c->watch);
    c->watch = NULL;
    atomic_store(&c->leader, 0);
    atomic_store(&c->leader_until, 0);
    funcd_lease_release(&c->lease);
    if (c->node_rev)
        funcd_port_store_del(c->cfg.store, c->node_key, c->node_rev, NULL);
    c->node_rev = 0;
}

void funcd_cluster_free(funcd_cluster *c)
{
    if (!c)
        return;
    if (c->start_wall)
        funcd_cluster_stop(c);
    if (c->tick)
        event_free(c->tick);
    if (c->soon)
        event_free(c->soon);
    if (c->wake)
        event_free(c->wake);
    for (size_t i = 0; i < c->n_peers; i++)
        cJSON_Delete(c->peers[i].functions);
    free(c->peers);
    pthread_mutex_destroy(&c->lock);
    free(c);
}
