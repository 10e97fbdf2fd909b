/*
 * Sites (docs/sites.md): static files served by the gateway itself, at
 * /site/{ns}/{name}/... and on a Site's spec.hosts by Host header.
 *
 * The loop side keeps a table of Sites level-triggered like the event
 * sources (a store event only says "look at this key again"): it
 * materializes each Site's source the way serving does a Function's,
 * checks that spec.index (and spec.notFound) exist in the tree, writes the
 * Ready condition, and publishes a version of the site to the table.
 *
 * The gateway threads read the table under a reader lock and answer from
 * the published version on their own thread (serve.c): files of a bundle,
 * git or image source never change, so their contents are kept in memory
 * after the first read; a spec.source.path directory is read per request.
 *
 * Threads: funcd_sites_serve on gateway threads; everything else on the
 * platform loop, except funcd_sites_source_changed (any thread).
 */
#ifndef FUNCD_SITES_SITES_H
#define FUNCD_SITES_SITES_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "funcd/funcd.h"
#include "util/log.h"

struct event_base;
struct funcd_sources;
struct funcd_cluster;
struct st_h2o_req_t;

typedef struct funcd_sites funcd_sites;

typedef struct funcd_sites_config {
    struct event_base *loop;
    funcd_store *store;
    funcd_blob *blob;               /* bundles; NULL: spec.source.bundle fails */
    struct funcd_sources *sources;  /* git and image; NULL: they fail */
    struct funcd_cluster *cluster;  /* its leader writes status; NULL: this node does */
    const char *bundle_cache;       /* where bundles are extracted (shared with serving) */
    const char *default_index;      /* NULL: "index.html" */
    int64_t cache_bytes;            /* files kept in memory, all Sites together;
                                     * negative: the default (256 MiB); 0: none */
    uint64_t send_timeout_ms;       /* an answer's client taking nothing this long is
                                     * cut off; 0: the default (60 s) */
    const funcd_logger *logger;
} funcd_sites_config;

/* The name the source resolver knows a Site's source by ("site:NAME"):
 * its `changed` callback names it so; pass it to funcd_sites_source_changed. */
#define FUNCD_SITES_SOURCE_PREFIX "site:"

int funcd_sites_new(funcd_sites **out, const funcd_sites_config *cfg);
/* Lists the Sites and watches them. */
int funcd_sites_start(funcd_sites *s);
/* Stops watching (the table stays until free: gateway threads may read it). */
void funcd_sites_close(funcd_sites *s);
/* After the gateway stopped. NULL ok. */
void funcd_sites_free(funcd_sites *s);

/* The source resolver has news for Site ns/`name` (the name without the prefix). */
void funcd_sites_source_changed(funcd_sites *s, const char *ns, const char *name);

/* Gateway threads. `by_host` 0: the path starts with /site/ and the request is
 * answered (1 returned). `by_host` 1: the request is answered (1) when its
 * Host names a site's host, else 0 and nothing was done. */
int funcd_sites_serve(void *sites, struct st_h2o_req_t *req, int by_host);
/* The contents kept in memory now (bytes, files) and the budget; any
 * thread (funcd_site_cache_bytes and friends on /metrics). */
void funcd_sites_cache_stats(void *sites, uint64_t *bytes, uint64_t *limit, uint64_t *files);
/* How many hosts the published sites declare (the gateway asks
 * funcd_sites_serve by host only while this is not 0). */
const atomic_uint *funcd_sites_host_count(funcd_sites *s);

#endif
