/*
 * Objects per namespace, every kind together, for the namespace object
 * quota (funcd_with_namespace_object_quota; docs/security.md, "Quotas").
 *
 * Counted once, at the first create, by listing /registry/, then kept by a
 * watch on it from that listing's revision: a create costs a hash lookup, not a
 * listing, and the count is right after a restart and follows what other
 * nodes sharing the store write (once this node's watch has delivered it).
 *
 * A create first takes a place (funcd_cp_counts_take), then gives it back
 * with the revision it made (funcd_cp_counts_give); until the watch has
 * delivered that revision the object counts as awaited. On one node the
 * bound is exact, however many creates run at once; nodes sharing a store
 * count each other's creates only once their watches deliver them.
 *
 * Threads: every function may be called from any thread.
 */
#ifndef FUNCD_CONTROLPLANE_QUOTA_H
#define FUNCD_CONTROLPLANE_QUOTA_H

#include <stdint.h>

#include "funcd/sys/store.h"

typedef struct funcd_cp_counts funcd_cp_counts;

/* Counts of the objects in `store` (listed and watched at the first take). */
int funcd_cp_counts_new(funcd_cp_counts **out, funcd_store *store);
void funcd_cp_counts_free(funcd_cp_counts *c);

/* Takes a place for one new object in `ns` when the namespace holds fewer
 * than `quota` (objects seen, places taken, objects awaited): 1. Else 0,
 * with `*count` what it holds. A negative error when the store could not
 * be listed or watched (tried again at the next call). */
int funcd_cp_counts_take(funcd_cp_counts *c, const char *ns, int64_t quota, int64_t *count);

/* Gives back a place taken in `ns`: `revision` is the store revision of the
 * object the create made, 0 when it made none. */
void funcd_cp_counts_give(funcd_cp_counts *c, const char *ns, uint64_t revision);

#endif
