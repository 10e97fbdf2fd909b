/*
 * What the platform sets on the embedded gateway beyond the gateway SPI.
 */
#ifndef FUNCD_GATEWAY_EMBEDDED_H
#define FUNCD_GATEWAY_EMBEDDED_H

#include <stdatomic.h>

#include "funcd/sys/gateway.h"
#include "metrics/metrics.h"
#include "util/log.h"

/* Connections the data plane holds open at once (0: the default); more
 * wait in the listen backlog. Call before `listen`. 0 when set; -1 when
 * `gw` is not the embedded gateway (nothing is changed). */
int funcd_gateway_embedded_set_max_connections(funcd_gateway *gw, unsigned n);

/* Serves the data plane over TLS with `tls` (borrowed until `listen`,
 * which takes its own reference). Call before `listen`. 0 when set; -1
 * when `gw` is not the embedded gateway. */
struct ssl_ctx_st;
int funcd_gateway_embedded_set_tls(funcd_gateway *gw, struct ssl_ctx_st *tls);

/* The number of threads the embedded gateway serves on (what
 * funcd_gateway_embedded_new settled on); 0 for any other gateway. */
unsigned funcd_gateway_embedded_threads(const funcd_gateway *gw);

/* The embedded gateway logs to `lg` (copied) what its error answers leave
 * out (why a worker did not start: host paths, cgroups, pids); a no-op for
 * any other gateway. Call before it listens. */
void funcd_gw_set_logger(funcd_gateway *gw, const funcd_logger *lg);

/* Gateway threads started after this record each request to `rec`
 * (lib/trace/edge.h; it must outlive the gateway's threads); a no-op for
 * any other gateway. Call before it listens. */
typedef struct funcd_edge_recorder funcd_edge_recorder;
void funcd_gw_set_edge_recorder(funcd_gateway *gw, funcd_edge_recorder *rec);
/* The embedded gateway counts the requests of each function in `m`
 * (borrowed: it must outlive the gateway; with at least
 * funcd_gateway_embedded_threads slots) and, when `serve` is set, answers
 * GET /metrics on the data plane with them (docs/observability.md). Call
 * before routes are set. 0; -1 when `gw` is not the embedded gateway or `m`
 * has too few slots (nothing is changed). */
int funcd_gw_set_metrics(funcd_gateway *gw, funcd_metrics *m, int serve);

/* Static files answered on the gateway's own threads (lib/sites), never
 * through the platform loop: `fn(payload, req, 0)` answers every request
 * under /site/; while `*hosts` is not 0, `fn(payload, req, 1)` is asked
 * first about any other request (but /healthz and /metrics) and answers it
 * when its Host is a site's (1), else returns 0. A /fn/ request pays one
 * atomic load for it. Call before it listens. 0; -1 when `gw` is not the
 * embedded gateway. */
struct st_h2o_req_t;
typedef int (*funcd_gw_files_fn)(void *payload, struct st_h2o_req_t *req, int by_host);
int funcd_gw_set_files(funcd_gateway *gw, funcd_gw_files_fn fn, void *payload,
                       const atomic_uint *hosts);

#endif
