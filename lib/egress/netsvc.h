/*
 * The egress gateway as a serving plug-in (serving/netsvc.h): a Function
 * with `spec.network: egress` gets, in each worker's namespace, the proxy
 * at 127.0.0.1:3128 and the DNS server at 127.0.0.1:53 (UDP and TCP), an
 * /etc/resolv.conf naming it, and HTTP_PROXY / HTTPS_PROXY / NO_PROXY (both
 * cases). The gateway itself starts with the first such Function.
 *
 * Without the sandbox (--no-sandbox) workers share the host's network:
 * nothing could be enforced, so such a Function is refused (Ready=False,
 * reason EgressNeedsSandbox) rather than run with a proxy it could ignore.
 *
 * Threads: the hooks run on the platform loop; set_logs from any thread.
 */
#ifndef FUNCD_EGRESS_NETSVC_H
#define FUNCD_EGRESS_NETSVC_H

#include "egress/egress.h"
#include "serving/logs.h"
#include "serving/netsvc.h"

typedef struct funcd_egress_netsvc_config {
    const char *dns_upstream;      /* see funcd_egress_config; NULL: the host's resolv.conf */
    const char *state_dir;         /* where the workers' resolv.conf is written */
    funcd_store *store;            /* EgressPolicies are watched here */
    const funcd_logger *logger;
    funcd_metrics_egress *metrics; /* NULL: not counted */
    /* funcd's own listeners ("host:port"; NULL entries skipped): never
     * reached through the gateway unless a /32 CIDR rule names them. */
    const char *platform_addrs[4];
} funcd_egress_netsvc_config;

/* NULL when out of memory (funcd_error set). */
funcd_netsvc *funcd_egress_netsvc_new(const funcd_egress_netsvc_config *cfg);
/* Where denials are written into the Functions' logs: a function giving a
 * Function's ring (a reference), or NULL to stop; returns once no line is
 * being written. */
typedef funcd_log_ring *(*funcd_egress_logs_of)(void *payload, const char *ns, const char *fn);
void funcd_egress_netsvc_set_logs(funcd_netsvc *svc, funcd_egress_logs_of logs, void *payload);
/* Where the audit lines and denials learn the invocation a worker runs:
 * a function (funcd_serving_invocation_of's shape) or NULL to stop;
 * returns once no call is being made. */
void funcd_egress_netsvc_set_invocations(funcd_netsvc *svc, funcd_egress_invocation_of fn,
                                         void *payload);
/* Stops the gateway (after serving released every worker and version). */
void funcd_egress_netsvc_free(funcd_netsvc *svc);

#endif
