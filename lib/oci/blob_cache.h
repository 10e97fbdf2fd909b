/*
 * The blob cache's side the client uses (oci.h has the public side): holds
 * on blobs by digest, and what a pull found or stored.
 */
#ifndef FUNCD_OCI_BLOB_CACHE_H
#define FUNCD_OCI_BLOB_CACHE_H

#include <sys/stat.h>

#include "oci/oci.h"

/* Holds `digest` (stored or not yet): never evicted until released. 0 or FUNCD_ENOMEM. */
int funcd__oci_blob_hold(funcd_oci_blob_cache *c, const char *digest);
/* Gives one hold back; the cache evicts when it is over its cap and this was the last. */
void funcd__oci_blob_release(funcd_oci_blob_cache *c, const char *digest);
/* `digest` is in the cache (`st`: its file) and was used now: found there
 * (stored 0: its modification time is set, for a restart's order) or just
 * stored (1: the cache evicts down to its cap). */
void funcd__oci_blob_used(funcd_oci_blob_cache *c, const char *digest, const struct stat *st,
                          int stored);
/* Gives back what funcd_oci_image_hold_blobs (or the pull) held for `img`. */
void funcd__oci_image_release_blobs(funcd_oci_image *img);

#endif
