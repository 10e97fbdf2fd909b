/*
 * The egress gateway (docs/egress.md): the host side of the HTTP proxy and
 * the DNS server that a worker of a `spec.network: egress` Function reaches
 * at 127.0.0.1:3128 and 127.0.0.1:53 inside its own network namespace.
 *
 * It knows the calling Function by the listener a connection arrived on
 * (funcd_egress_attach), decides every connection and every DNS question
 * against the EgressPolicies of the Function's namespace (policy.h),
 * resolves names itself (never the worker's answer), connects with a
 * timeout and relays bytes both ways until both sides are done or the
 * connection is idle too long. A denial is a 403 with a body saying why,
 * one audit line, a metric and a line in the Function's own logs.
 *
 * Threads: the gateway runs its own event loop on its own thread; resolving
 * and connecting never block it, nor the platform loop. Every call here may
 * come from any thread.
 */
#ifndef FUNCD_EGRESS_EGRESS_H
#define FUNCD_EGRESS_EGRESS_H

#include <stddef.h>
#include <stdint.h>

#include "egress/policy.h"
#include "funcd/sys/store.h"
#include "util/log.h"

#define FUNCD_EGRESS_PROXY_PORT 3128
#define FUNCD_EGRESS_DNS_PORT 53

typedef struct funcd_egress funcd_egress;
typedef struct funcd_egress_client funcd_egress_client;
typedef struct funcd_metrics_egress funcd_metrics_egress;

/* A line for the Function's own logs (stderr of `replica`, of invocation
 * `invocation` or NULL), from the gateway's thread; must be quick. */
typedef void (*funcd_egress_fn_log)(void *payload, const char *ns, const char *fn,
                                    const char *replica, const char *invocation,
                                    const char *line);
/* The invocation `replica` of Function ns/fn runs now, when it runs exactly
 * one (its id into `out`): 1; else 0. From the gateway's thread. */
typedef int (*funcd_egress_invocation_of)(void *payload, const char *ns, const char *fn,
                                          const char *replica, char *out, size_t len);

typedef struct funcd_egress_config {
    /* The resolver names are sent to: "ip", "ip:port" or "[v6]:port"; NULL
     * or "": the first nameserver of /etc/resolv.conf. */
    const char *dns_upstream;
    unsigned connect_timeout_ms; /* 0: 10 s */
    unsigned idle_timeout_ms;    /* 0: 5 min without a byte either way */
    const funcd_logger *logger;  /* audit lines (INFO) and troubles; NULL: stderr */
    funcd_egress_fn_log fn_log;  /* NULL: none */
    /* NULL: audit lines and denials name no invocation */
    funcd_egress_invocation_of invocation_of;
    void *fn_log_payload; /* of both */
    funcd_metrics_egress *metrics; /* NULL: not counted */
    /* A relay buffer grown by a bulk transfer goes back to its first size
     * (64 KiB) once its direction has moved no byte for this long; 0: 1 s. */
    unsigned relay_shrink_ms;
    /* Proxy connections a worker may hold at once; beyond them a new one is
     * answered 503 and closed. 0: 256. */
    unsigned max_conns;
    /* A proxy connection's whole request head must come within this long
     * of its accept (a deadline, not an idle timeout); 0: 30 s. */
    unsigned head_timeout_ms;
} funcd_egress_config;

/* Starts the gateway's thread. 0, or a negative FUNCD_E* with
 * funcd_error set (a bad upstream, no nameserver found). */
int funcd_egress_new(funcd_egress **out, const funcd_egress_config *cfg);
/* Ends every connection, closes every listener, joins the thread. */
void funcd_egress_free(funcd_egress *eg);

/* The policies decisions are made from (owned by the gateway). */
funcd_egress_policies *funcd_egress_policies_of(funcd_egress *eg);

/* Keeps the policies in step with the EgressPolicy objects of `store`
 * (listed now, then watched: a change applies to the next connection).
 * Call once; funcd_egress_unwatch (or free) ends it. */
int funcd_egress_watch(funcd_egress *eg, funcd_store *store);
void funcd_egress_unwatch(funcd_egress *eg);

/*
 * Serves one worker of Function ns/fn: `proxy` a listening stream socket
 * (the HTTP proxy), `dns_udp` a datagram socket and `dns_tcp` a listening
 * stream socket (the DNS server); any may be -1. The gateway owns the fds
 * from now on, also when this fails (NULL: out of memory; fds closed).
 */
funcd_egress_client *funcd_egress_attach(funcd_egress *eg, const char *ns, const char *fn,
                                         const char *replica, int proxy, int dns_udp,
                                         int dns_tcp);
/* The worker is gone: its listeners close (soon, on the gateway's thread);
 * connections it opened run to their end. */
void funcd_egress_detach(funcd_egress *eg, funcd_egress_client *c);

/* Bytes that relay buffers hold beyond their first size (64 KiB each way
 * per connection), all connections together: what the 256 MiB budget
 * counts. Any thread. */
size_t funcd_egress_relay_grown(funcd_egress *eg);

#endif
