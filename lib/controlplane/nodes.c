/*
 * The nodes API: the funcd processes sharing this store, from their
 * heartbeat records (docs/adr/0044-nodes-and-leases.md). Read-only and
 * cluster-scoped; any valid token reads it.
 *
 *   GET /apis/funcd.dev/v1/nodes          NodeList
 *   GET /apis/funcd.dev/v1/nodes/{name}   Node
 *
 * A node is ready while its record says so and its last renewal is within
 * its TTL; the leader is the lease's holder while the lease is within its
 * TTL. Both are judged on this node's wall clock against the writers'
 * (clocks in sync, as for Kubernetes leases); the lease itself never
 * depends on that (cluster/lease.h).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/nodes.h"
#include "controlplane/api.h"
#include "funcd/sys/error.h"
#include "port/store.h"
#include "util/misc.h"

#define NODES_PATH "/apis/funcd.dev/v1/nodes"

static int method_is(const funcd_cp_request *req, const char *m)
{
    return req->method_len == strlen(m) && memcmp(req->method, m, req->method_len) == 0;
}

/* The live leader's name into `out` ("" when none). */
static int current_leader(funcd_store *store, int64_t now, char *out, size_t len)
{
    funcd_store_value v = {0};
    funcd_lease_record rec;
    out[0] = '\0';
    int rc = funcd_port_store_get(store, FUNCD_LEADER_KEY, &v);
    if (rc == FUNCD_ENOTFOUND)
        return 0;
    if (rc < 0)
        return rc;
    if (funcd_lease_record_parse(v.value, v.len, &rec) == 0 &&
        now - rec.renew_ms <= (int64_t)rec.ttl_ms)
        snprintf(out, len, "%s", rec.holder);
    free(v.value);
    return 0;
}

static cJSON *node_object(const funcd_node_record *rec, uint64_t rev, const char *leader,
                          int64_t now)
{
    char started[32], renewed[32], rv[24];
    funcd_rfc3339(rec->start_ms, started, sizeof(started));
    funcd_rfc3339(rec->renew_ms, renewed, sizeof(renewed));
    snprintf(rv, sizeof(rv), "%llu", (unsigned long long)rev);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "apiVersion", "funcd.dev/v1");
    cJSON_AddStringToObject(o, "kind", "Node");
    cJSON *md = cJSON_AddObjectToObject(o, "metadata");
    cJSON_AddStringToObject(md, "name", rec->name);
    cJSON_AddStringToObject(md, "resourceVersion", rv);
    cJSON_AddStringToObject(md, "creationTimestamp", started);
    cJSON *st = cJSON_AddObjectToObject(o, "status");
    cJSON_AddStringToObject(st, "address", rec->address);
    cJSON_AddStringToObject(st, "startTime", started);
    cJSON_AddStringToObject(st, "renewTime", renewed);
    int live = rec->ready && now - rec->renew_ms <= (int64_t)rec->ttl_ms;
    cJSON_AddBoolToObject(st, "ready", live);
    cJSON_AddNumberToObject(st, "workers", rec->workers);
    cJSON_AddBoolToObject(st, "leader", live && strcmp(leader, rec->name) == 0);
    return o;
}

typedef struct listing {
    cJSON *items;
    const char *leader;
    int64_t now;
} listing;

static int add_node(const funcd_store_kv *kv, void *payload)
{
    listing *l = payload;
    funcd_node_record rec;
    if (funcd_node_record_parse(kv->value, kv->len, &rec) == 0)
        cJSON_AddItemToArray(l->items, node_object(&rec, kv->revision, l->leader, l->now));
    return 0;
}

static void reply(funcd_cp_response *resp, cJSON *obj)
{
    char *text = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    if (!text) {
        funcd_cp_status(resp, 500, "InternalError", NULL, "out of memory encoding the nodes");
        return;
    }
    resp->status = 200;
    funcd_buf_reset(&resp->body);
    funcd_buf_puts(&resp->body, text);
    free(text);
}

static void store_failed(funcd_cp_response *resp, int rc)
{
    if (rc == FUNCD_EUNAVAILABLE)
        funcd_cp_status(resp, 503, "ServiceUnavailable", NULL, "%s", funcd_error_last()->message);
    else
        funcd_cp_status(resp, 500, "InternalError", NULL, "reading the nodes: %s",
                        funcd_error_last()->message);
}

static void list_nodes(funcd_cp *cp, funcd_cp_response *resp)
{
    char leader[FUNCD_NODE_NAME_MAX];
    int64_t now = funcd_now_ms();
    int rc = current_leader(cp->store, now, leader, sizeof(leader));
    cJSON *list = cJSON_CreateObject();
    listing l = {cJSON_CreateArray(), leader, now};
    uint64_t rev = 0;
    if (rc == 0)
        rc = funcd_port_store_list(cp->store, FUNCD_NODES_PREFIX, add_node, &l, &rev);
    if (rc < 0) {
        cJSON_Delete(list);
        cJSON_Delete(l.items);
        store_failed(resp, rc);
        return;
    }
    char rv[24];
    snprintf(rv, sizeof(rv), "%llu", (unsigned long long)rev);
    cJSON_AddStringToObject(list, "apiVersion", "funcd.dev/v1");
    cJSON_AddStringToObject(list, "kind", "NodeList");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(list, "metadata"), "resourceVersion", rv);
    cJSON_AddItemToObject(list, "items", l.items);
    reply(resp, list);
}

static void get_node(funcd_cp *cp, const char *name, funcd_cp_response *resp)
{
    char key[sizeof(FUNCD_NODES_PREFIX) + FUNCD_NODE_NAME_MAX], leader[FUNCD_NODE_NAME_MAX];
    snprintf(key, sizeof(key), FUNCD_NODES_PREFIX "%s", name);
    int64_t now = funcd_now_ms();
    funcd_store_value v = {0};
    funcd_node_record rec;
    int rc = current_leader(cp->store, now, leader, sizeof(leader));
    if (rc == 0)
        rc = funcd_port_store_get(cp->store, key, &v);
    if (rc == FUNCD_ENOTFOUND)
        funcd_cp_status(resp, 404, "NotFound", NULL, "node \"%s\" not found (funcdctl get "
                        "nodes lists them)", name);
    else if (rc < 0)
        store_failed(resp, rc);
    else if (funcd_node_record_parse(v.value, v.len, &rec) < 0)
        funcd_cp_status(resp, 500, "InternalError", NULL, "the record of node \"%s\" is not a "
                        "heartbeat record", name);
    else
        reply(resp, node_object(&rec, v.revision, leader, now));
    free(v.value);
}

int funcd_cp_nodes(funcd_cp *cp, const funcd_cp_request *req, funcd_cp_response *resp)
{
    const size_t pl = sizeof(NODES_PATH) - 1;
    if (req->path_len < pl || memcmp(req->path, NODES_PATH, pl) != 0 ||
        (req->path_len > pl && req->path[pl] != '/'))
        return 0;
    const char *name = req->path + pl + (req->path_len > pl);
    size_t nl = req->path_len > pl ? req->path_len - pl - 1 : 0;
    char shown[80];
    if (req->path_len > pl &&
        (nl == 0 || nl >= FUNCD_NODE_NAME_MAX || memchr(name, '/', nl) != NULL)) {
        funcd_cp_status(resp, 404, "NotFound", NULL, "no such path: %.*s",
                        (int)(req->path_len > 200 ? 200 : req->path_len), req->path);
        return 1;
    }
    char node[FUNCD_NODE_NAME_MAX];
    snprintf(node, sizeof(node), "%.*s", (int)nl, name);
    if (!method_is(req, "GET")) {
        funcd_cp_status(resp, 405, "MethodNotAllowed", NULL, "%.*s is not allowed on nodes: "
                        "they are read-only (GET); a node joins by starting funcd on this store "
                        "and leaves by stopping it",
                        (int)(req->method_len > 16 ? 16 : req->method_len), req->method);
    } else if (nl && !funcd_node_name_ok(node)) {
        size_t i = 0;
        for (; node[i] && i + 1 < sizeof(shown); i++)
            shown[i] = node[i] > 0x20 && node[i] < 0x7f && node[i] != '"' ? node[i] : '?';
        shown[i] = '\0';
        funcd_cp_status(resp, 400, "BadRequest", "metadata.name", "node name \"%s\" must be a "
                        "DNS-1123 subdomain: lowercase letters, digits, '-' and '.'", shown);
    } else if (nl) {
        get_node(cp, node, resp);
    } else {
        list_nodes(cp, resp);
    }
    return 1;
}
