/*
 * funcd backend SPI — the gateway port.
 *
 * The gateway serves the data plane: `/fn/{namespace}/{name}/{rest}` is routed
 * to one of the function's workers. The platform tells it which functions
 * exist and where their ready workers listen; a request for a known function
 * with no ready worker is a cold request, handed to the activator.
 *
 * Writing a driver: embed `funcd_gateway` first, fill `version` with
 * FUNCD_GATEWAY_VERSION (FUNCD_GATEWAY_INIT), `name` and the methods.
 * Versions: funcd_platform_new takes a driver of any version from 1 to
 * FUNCD_GATEWAY_VERSION (else FUNCD_EVERSION) and refuses one that lacks a
 * slot marked required for its version (FUNCD_EINVAL). Slots are only
 * appended, under a "version N" line; an optional slot, or one appended
 * after the driver's version, is called only when the driver's version has it
 * and it is set (docs/backends.md).
 *
 * Ownership: funcd_with_gateway transfers the backend to the platform, which
 * calls `listen` during funcd_platform_new, `start` from funcd_platform_run,
 * `stop` and `free` at shutdown. Routes are copied by `set_route`.
 *
 * Threads: set_route and remove_route may be called from any thread while
 * the gateway serves; listen/start/stop/free are called from one thread.
 */
#ifndef FUNCD_SYS_GATEWAY_H
#define FUNCD_SYS_GATEWAY_H

#include "funcd/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FUNCD_GATEWAY_VERSION 2

typedef struct funcd_gateway funcd_gateway;

struct funcd_pool; /* the platform's worker pool of one function */

/** Where a function's requests go. */
typedef struct funcd_route {
    const char *namespace_;
    const char *name;
    const char *const *endpoints; /**< NULL-terminated worker addresses ("unix:/path"), for
                                       gateways outside libfuncd; may be NULL */
    uint64_t timeout_ms;          /**< per-request timeout; 0: the gateway's default */
    struct funcd_pool *pool;      /**< the function's workers (the embedded gateway takes slots
                                       from it); NULL while the function cannot run */
} funcd_route;

struct funcd_gateway {
    unsigned version;
    const char *name;

    /* ---- version 1: every slot required ---- */

    /** Binds `addr` ("host:port", port 0: ephemeral); writes the bound
     *  address to `bound`. FUNCD_EBIND on failure. */
    int (*listen)(funcd_gateway *gw, const char *addr, char *bound, size_t bound_len);

    /** Starts serving (on the gateway's own threads); returns at once. */
    int (*start)(funcd_gateway *gw);

    /** Adds or replaces the route of one function. */
    int (*set_route)(funcd_gateway *gw, const funcd_route *route);

    /** Removes a function's route; FUNCD_ENOTFOUND if there was none. */
    int (*remove_route)(funcd_gateway *gw, const char *namespace_, const char *name);

    /** Stops serving and joins the gateway's threads; idempotent. */
    int (*stop)(funcd_gateway *gw);

    void (*free)(funcd_gateway *gw);

    /* ---- version 2: optional ---- */

    /** Stops accepting connections; requests in flight go on until stop.
     *  Returns at once. Optional (NULL: stop does it all). */
    int (*quiesce)(funcd_gateway *gw);
};

#define FUNCD_GATEWAY_INIT {FUNCD_GATEWAY_VERSION}

/** The embedded h2o gateway serving on `threads` threads (0: one per CPU,
 *  at most 4). */
FUNCD_EXTERN int funcd_gateway_embedded_new(funcd_gateway **out, unsigned threads);

#ifdef __cplusplus
}
#endif
#endif
