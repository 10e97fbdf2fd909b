#include "controller/controller.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "cluster/nodes.h"
#include "controller/secret_env.h"
#include "funcd/sys/error.h"
#include "objects/objects.h"
#include "port/store.h"
#include "util/misc.h"

struct funcd_controller {
    funcd_controller_config cfg;
    struct event *wake;
    struct event *resync;
    funcd_store_watch *watch;
    pthread_mutex_t lock; /* guards queue */
    char **queue;         /* keys to reconcile, deduplicated */
    size_t queued, cap;
};

/* Runs on writers' threads: remember the key, wake the loop. */
static void enqueue(funcd_controller *c, const char *key)
{
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->queued; i++)
        if (strcmp(c->queue[i], key) == 0)
            goto out;
    if (c->queued == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        char **q = realloc(c->queue, cap * sizeof(*q));
        if (!q)
            goto out; /* the periodic resync will catch up */
        c->queue = q;
        c->cap = cap;
    }
    char *copy = strdup(key);
    if (copy)
        c->queue[c->queued++] = copy;
out:
    pthread_mutex_unlock(&c->lock);
    event_active(c->wake, EV_READ, 0);
}

static void on_event(const funcd_store_event *ev, void *payload)
{
    enqueue(payload, ev->key);
}

void funcd_controller_requeue(funcd_controller *c, const char *plural, const char *ns,
                              const char *name)
{
    char key[256];
    snprintf(key, sizeof(key), FUNCD_OBJECTS_KEY_ROOT "%s/%s/%s", plural, ns, name);
    enqueue(c, key);
}

static cJSON *condition(const char *type, const char *status, const char *reason,
                        const char *message, const cJSON *old_conditions)
{
    char now[32];
    funcd_rfc3339(funcd_now_ms(), now, sizeof(now));
    const char *since = now;
    const cJSON *old;
    cJSON_ArrayForEach(old, old_conditions)
    {
        const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(old, "type"));
        const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(old, "status"));
        const char *ts =
            cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(old, "lastTransitionTime"));
        if (t && s && ts && strcmp(t, type) == 0 && strcmp(s, status) == 0)
            since = ts; /* no transition: keep the time it last changed */
    }
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "type", type);
    cJSON_AddStringToObject(c, "status", status);
    cJSON_AddStringToObject(c, "reason", reason);
    cJSON_AddStringToObject(c, "message", message);
    cJSON_AddStringToObject(c, "lastTransitionTime", since);
    return c;
}

/* The status a Function should have now, from what serving reports (the
 * replicas: of every live node). */
static cJSON *function_status(const cJSON *obj, const funcd_serving_status *ss,
                              unsigned ready, unsigned total)
{
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    const cJSON *old = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(obj, "status"), "conditions");
    cJSON *st = cJSON_CreateObject();
    cJSON_AddNumberToObject(st, "observedGeneration",
                            cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(md, "generation")));
    cJSON *conds = cJSON_AddArrayToObject(st, "conditions");
    cJSON_AddItemToArray(conds, condition("Ready", ss->ready ? "True" : "False", ss->reason,
                                          ss->message, old));
    if (ss->resolved[0]) { /* what an image tag or a git ref stands for now */
        cJSON *src = cJSON_AddObjectToObject(st, "source");
        int digest = strncmp(ss->resolved, "sha256:", 7) == 0;
        cJSON_AddStringToObject(src, digest ? "digest" : "commit", ss->resolved);
    }
    if (ss->last_oom[0]) { /* the kernel's OOM killer, at spec.resources.memory */
        cJSON *t = cJSON_AddObjectToObject(st, "lastTermination");
        cJSON_AddStringToObject(t, "reason", "OOMKilled");
        cJSON_AddStringToObject(t, "message", ss->last_oom);
    }
    if (ss->has_pool) {
        cJSON *rep = cJSON_AddObjectToObject(st, "replicas");
        cJSON_AddNumberToObject(rep, "ready", ready);
        cJSON_AddNumberToObject(rep, "total", total);
        if (ss->stats.last_cold_start_ms) {
            char ts[32];
            funcd_rfc3339(ss->stats.last_cold_start_ms, ts, sizeof(ts));
            cJSON *cs = cJSON_AddObjectToObject(st, "lastColdStart");
            cJSON_AddStringToObject(cs, "time", ts);
            cJSON_AddNumberToObject(cs, "durationMs", ss->stats.last_cold_start_millis);
        }
    }
    return st;
}

static void reconcile_function(funcd_controller *c, const funcd_kind *kind, const char *ns,
                               const char *name)
{
    cJSON *obj = NULL;
    uint64_t rev = 0;
    int rc = funcd_objects_get(c->cfg.store, kind, ns, name, &obj, &rev);
    if (rc == FUNCD_ENOTFOUND) {
        funcd_serving_remove(c->cfg.serving, ns, name);
        return;
    }
    if (rc < 0) {
        funcd_log(c->cfg.logger, FUNCD_LOG_WARN, "reconcile %s/%s: %s", ns, name,
                  funcd_error_last()->message);
        return;
    }
    funcd_serving_status ss;
    if (funcd_secret_env_uses(obj, NULL)) { /* serving sees the values, the store keeps refs */
        char reason[64], message[512];
        cJSON *resolved = funcd_secret_env_resolve(c->cfg.store, ns, obj, reason, sizeof(reason),
                                                   message, sizeof(message));
        if (resolved)
            funcd_serving_apply(c->cfg.serving, ns, name, resolved, &ss);
        else
            funcd_serving_refuse(c->cfg.serving, ns, name, obj, reason, message, &ss);
        cJSON_Delete(resolved);
    } else {
        funcd_serving_apply(c->cfg.serving, ns, name, obj, &ss);
    }
    if (!funcd_cluster_is_leader(c->cfg.cluster)) { /* served here; the leader writes status */
        cJSON_Delete(obj);
        return;
    }
    unsigned ready = ss.stats.ready, total = ss.stats.total;
    funcd_cluster_add_replicas(c->cfg.cluster, ns, name, &ready, &total);
    cJSON *want = function_status(obj, &ss, ready, total);
    const cJSON *have = cJSON_GetObjectItemCaseSensitive(obj, "status");
    if (!have || !cJSON_Compare(have, want, 1)) {
        rc = funcd_objects_put_status(c->cfg.store, kind, ns, name, rev, want);
        /* A conflict means a newer event is queued: it will reconcile again. */
        if (rc < 0 && rc != FUNCD_ECONFLICT && rc != FUNCD_ENOTFOUND)
            funcd_log(c->cfg.logger, FUNCD_LOG_WARN, "writing status of function %s/%s: %s", ns,
                      name, funcd_error_last()->message);
    }
    cJSON_Delete(want);
    cJSON_Delete(obj);
}

typedef struct secret_users {
    funcd_controller *c;
    const char *secret;
} secret_users;

static int requeue_user(const funcd_store_kv *kv, void *payload)
{
    secret_users *u = payload;
    cJSON *fn = funcd_objects_decode(kv->value, kv->len, kv->revision);
    if (fn && funcd_secret_env_uses(fn, u->secret))
        enqueue(u->c, kv->key);
    cJSON_Delete(fn);
    return 0;
}

/* A Secret changed (or came, or went): the Functions of its namespace that
 * read it are reconciled, so that their workers roll to the new values. */
static void reconcile_secret(funcd_controller *c, const char *ns, const char *name)
{
    funcd_buf prefix = FUNCD_BUF_INIT;
    secret_users u = {c, name};
    if (funcd_objects_prefix(&prefix, funcd_kind_by_plural("functions"), ns) == 0)
        funcd_port_store_list(c->cfg.store, prefix.data, requeue_user, &u, NULL);
    funcd_buf_free(&prefix);
}

static void reconcile(funcd_controller *c, const char *key)
{
    const funcd_kind *kind;
    char ns[128], name[128];
    if (funcd_objects_parse_key(key, &kind, ns, sizeof(ns), name, sizeof(name)) < 0)
        return;
    if (strcmp(kind->kind, "Function") == 0)
        reconcile_function(c, kind, ns, name);
    else if (strcmp(kind->kind, "Secret") == 0)
        reconcile_secret(c, ns, name);
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    funcd_controller *c = arg;
    for (;;) {
        pthread_mutex_lock(&c->lock);
        char **batch = c->queue;
        size_t n = c->queued;
        c->queue = NULL;
        c->queued = c->cap = 0;
        pthread_mutex_unlock(&c->lock);
        if (n == 0)
            break;
        for (size_t i = 0; i < n; i++) {
            reconcile(c, batch[i]);
            free(batch[i]);
        }
        free(batch);
    }
}

static int enqueue_listed(const funcd_store_kv *kv, void *payload)
{
    enqueue(payload, kv->key);
    return 0;
}

static void on_resync(evutil_socket_t fd, short what, void *arg)
{
    funcd_controller *c = arg;
    funcd_port_store_list(c->cfg.store, FUNCD_OBJECTS_KEY_ROOT, enqueue_listed, c, NULL);
}

void funcd_controller_resync(funcd_controller *c)
{
    event_active(c->resync, EV_TIMEOUT, 0);
}

int funcd_controller_new(funcd_controller **out, const funcd_controller_config *cfg)
{
    *out = NULL;
    funcd_controller *c = calloc(1, sizeof(*c));
    if (!c)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the controller");
    c->cfg = *cfg;
    if (!c->cfg.resync_ms)
        c->cfg.resync_ms = 60000;
    pthread_mutex_init(&c->lock, NULL);
    c->wake = event_new(cfg->base, -1, 0, on_wake, c);
    c->resync = event_new(cfg->base, -1, EV_PERSIST, on_resync, c);
    if (!c->wake || !c->resync) {
        funcd_controller_free(c);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the controller's events");
    }
    *out = c;
    return 0;
}

int funcd_controller_start(funcd_controller *c)
{
    uint64_t rev = 0;
    int rc = funcd_port_store_list(c->cfg.store, FUNCD_OBJECTS_KEY_ROOT, enqueue_listed, c, &rev);
    if (rc == 0)
        rc = funcd_port_store_watch(c->cfg.store, FUNCD_OBJECTS_KEY_ROOT, rev, on_event, c,
                                    &c->watch);
    if (rc < 0)
        return rc;
    struct timeval tv = {c->cfg.resync_ms / 1000, (c->cfg.resync_ms % 1000) * 1000};
    event_add(c->resync, &tv);
    return 0;
}

void funcd_controller_free(funcd_controller *c)
{
    if (!c)
        return;
    if (c->watch)
        funcd_port_store_unwatch(c->cfg.store, c->watch);
    if (c->wake)
        event_free(c->wake);
    if (c->resync)
        event_free(c->resync);
    for (size_t i = 0; i < c->queued; i++)
        free(c->queue[i]);
    free(c->queue);
    pthread_mutex_destroy(&c->lock);
    free(c);
}
