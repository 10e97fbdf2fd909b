/*
 * Counters of the egress gateway (lib/egress), walked with the rest at
 * scrape time: funcd_egress_connections_total{namespace,function,decision},
 * funcd_egress_bytes_total{namespace,function,direction} and
 * funcd_egress_dns_queries_total{namespace,function,decision}.
 * Any thread (one lock; a connection counts once, when it ends).
 */
#ifndef FUNCD_METRICS_EGRESS_H
#define FUNCD_METRICS_EGRESS_H

#include <stdint.h>

#include "metrics/metrics.h"

typedef struct funcd_metrics_egress funcd_metrics_egress;

/* NULL only when out of memory. */
funcd_metrics_egress *funcd_metrics_egress_new(void);
void funcd_metrics_egress_free(funcd_metrics_egress *e);

void funcd_metrics_egress_connection(funcd_metrics_egress *e, const char *ns, const char *fn,
                                     int allowed, uint64_t bytes_up, uint64_t bytes_down);
void funcd_metrics_egress_dns(funcd_metrics_egress *e, const char *ns, const char *fn,
                              int allowed);

/* Makes funcd_metrics_collect walk `e` too (NULL: no more). Set before
 * collections start, clear before freeing `e`. */
void funcd_metrics_set_egress(funcd_metrics *m, funcd_metrics_egress *e);

/* What collect calls: the three families, filtered by namespace. */
void funcd_metrics_egress_walk(funcd_metrics_egress *e, funcd_metrics_ns_filter allow,
                               void *allow_payload, const funcd_metrics_visitor *v);

#endif
