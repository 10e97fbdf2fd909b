/*
 * Leases in the store (docs/adr/0044-nodes-and-leases.md): a key whose value
 * names a holder, renewed by compare-and-swap on the key's revision.
 *
 * Who holds a lease is decided by the store alone (one CAS succeeds); when a
 * lease is over is decided by each contender on its own monotonic clock: a
 * record whose revision has not moved for its TTL, as this process saw it,
 * is expired. No two clocks are compared for that, so it holds with clocks
 * that disagree on the time of day (only their rates must be close).
 *
 * The holder stops acting as one before any contender can take over: it
 * counts its TTL from the moment it sent the renewal that succeeded, which
 * is before the store made the new revision that contenders count from.
 *
 * The clocks are parameters, so the unit tests drive a fake one.
 */
#ifndef FUNCD_CLUSTER_LEASE_H
#define FUNCD_CLUSTER_LEASE_H

#include <stdint.h>

#include "funcd/sys/store.h"

#define FUNCD_CLUSTER_PREFIX "/cluster/"
#define FUNCD_NODES_PREFIX "/cluster/nodes/"
#define FUNCD_LEADER_KEY "/cluster/leader"
#define FUNCD_NODE_NAME_MAX 254 /* a host name and its NUL */
#define FUNCD_LEASE_TTL_DEFAULT_MS 10000

typedef struct funcd_lease {
    funcd_store *store;
    const char *key;   /* borrowed */
    const char *me;    /* the holder this process writes; borrowed */
    uint64_t ttl_ms;
    int held;          /* the last step held it */
    int64_t held_until; /* monotonic ms: act as holder before this only */
    uint64_t rev;      /* revision of the record last read or written; 0: absent */
    int64_t seen_at;   /* monotonic ms when `rev` (another's) was first seen */
    uint64_t seen_ttl; /* that record's TTL */
    char holder[FUNCD_NODE_NAME_MAX]; /* who the record names, "" when absent */
    int64_t acquired_wall; /* wall ms of our acquisition, kept across renewals */
} funcd_lease;

void funcd_lease_init(funcd_lease *l, funcd_store *store, const char *key, const char *me,
                      uint64_t ttl_ms);

/*
 * One step: takes the lease when it is absent, expired or ours from an
 * earlier run of this node, renews it when held. `wall` and `mono` are the
 * clocks, in ms. 1 when held afterwards, 0 when not, or a store error
 * (FUNCD_EUNAVAILABLE...), after which the lease stays held only until its
 * deadline (funcd_lease_held).
 */
int funcd_lease_step(funcd_lease *l, int64_t wall, int64_t mono);

/* Whether this process may act as the holder at `mono`. */
int funcd_lease_held(const funcd_lease *l, int64_t mono);

/* Gives the lease up (deleted, if still ours) so another takes it at once. */
void funcd_lease_release(funcd_lease *l);

/* A lease record as stored: parsed from `value`; 0, or -1 if it is not one. */
typedef struct funcd_lease_record {
    char holder[FUNCD_NODE_NAME_MAX];
    int64_t acquire_ms, renew_ms; /* the holder's wall clock */
    uint64_t ttl_ms;
} funcd_lease_record;

int funcd_lease_record_parse(const void *value, size_t len, funcd_lease_record *out);

#endif
