/*
 * This node in a cluster of funcd processes sharing one store
 * (docs/adr/0044-nodes-and-leases.md).
 *
 * Every TTL/3 on the platform loop the node renews its heartbeat record
 * (FUNCD_NODES_PREFIX + name: address, times, readiness, worker and
 * per-function replica counts) and takes one step on the cluster lease
 * (FUNCD_LEADER_KEY). The lease holder is the leader: the only node that
 * writes controller status and does the cluster's singleton work. With one
 * node that node leads from funcd_cluster_start on.
 *
 * The leader also deletes the records of nodes dead for
 * FUNCD_NODE_FORGET_TTLS TTLs.
 *
 * A watch on FUNCD_CLUSTER_PREFIX brings other nodes' records (their replica
 * counts, summed by the leader) and a released lease (taken at once) early;
 * the timer alone would do, later.
 */
#ifndef FUNCD_CLUSTER_NODES_H
#define FUNCD_CLUSTER_NODES_H

#include <event2/event.h>
#include <stdint.h>

#include "cluster/lease.h"
#include "funcd/sys/store.h"
#include "util/log.h"

/* The leader deletes a node's record once it has not been renewed for this
 * many of the record's TTLs (a node that crashed and never came back). */
#define FUNCD_NODE_FORGET_TTLS 10

struct funcd_serving;
typedef struct funcd_cluster funcd_cluster;

typedef struct funcd_cluster_config {
    struct event_base *loop;
    funcd_store *store;
    const char *name;    /* this node's, unique in the cluster (copied) */
    const char *address; /* where its data plane serves (copied) */
    uint64_t ttl_ms;     /* 0: FUNCD_LEASE_TTL_DEFAULT_MS */
    const funcd_logger *logger;
    struct funcd_serving *serving; /* replica counts; may be NULL */
    unsigned (*workers)(void *payload); /* live worker processes; may be NULL */
    /* On the loop: this node became (1) or stopped being (0) the leader. */
    void (*leading)(int leader, void *payload);
    /* On the loop, at the leader only: another node's replica counts of a
     * function changed (the node came, went, or its workers did). */
    void (*replicas_changed)(const char *ns, const char *name, void *payload);
    void *payload;
} funcd_cluster_config;

int funcd_cluster_new(funcd_cluster **out, const funcd_cluster_config *cfg);
/* Writes the heartbeat and takes the first lease step before it returns,
 * then keeps both going on the loop. */
int funcd_cluster_start(funcd_cluster *c);
/* Whether this node may act as the leader now. Any thread; NULL: 1 (no
 * cluster, one node). */
int funcd_cluster_is_leader(const funcd_cluster *c);
/* Adds the replica counts other live nodes report for a function. */
void funcd_cluster_add_replicas(funcd_cluster *c, const char *ns, const char *name,
                                unsigned *ready, unsigned *total);
/* This node's replica counts changed: renew the heartbeat soon. Any thread. */
void funcd_cluster_poke(funcd_cluster *c);
/* Graceful leave: the lease is released and the heartbeat record deleted,
 * so the others see it at once; the timers stop. */
void funcd_cluster_stop(funcd_cluster *c);
void funcd_cluster_free(funcd_cluster *c);

/* A heartbeat record as stored (node.c). */
typedef struct funcd_node_record {
    char name[FUNCD_NODE_NAME_MAX];
    char address[256];
    int64_t start_ms, renew_ms; /* the node's wall clock */
    uint64_t ttl_ms;
    int ready;
    unsigned workers;
} funcd_node_record;

/* 0, or -1 when `value` is not a heartbeat record. */
int funcd_node_record_parse(const void *value, size_t len, funcd_node_record *out);
/* Whether `name` may name a node: a DNS-1123 subdomain (lowercase letters,
 * digits, '-' and '.', at most 253 characters). */
int funcd_node_name_ok(const char *name);

#endif
