/* Calls into the runtime port (port.h): components use these, never the slots. */
#ifndef FUNCD_PORT_RUNTIME_H
#define FUNCD_PORT_RUNTIME_H

#include "funcd/sys/error.h"
#include "port/port.h"

static inline int funcd_port_runtime_attach(funcd_runtime *rt, struct event_base *base)
{
    return rt->attach(rt, base);
}

static inline int funcd_port_runtime_start(funcd_runtime *rt, const funcd_worker_spec *spec,
                                           const funcd_worker_events *events, funcd_worker **out)
{
    /* A driver older than version 3 would ignore the sockets asked for. */
    if (spec->n_listen && rt->version < 3) {
        *out = NULL;
        return funcd_error_set(FUNCD_ENOTSUP, "the runtime \"%s\" cannot place sockets in a "
                               "worker's network namespace (runtime port version 3)", rt->name);
    }
    return rt->start(rt, spec, events, out);
}

static inline int funcd_port_runtime_stop(funcd_runtime *rt, funcd_worker *w, unsigned grace_ms)
{
    return rt->stop(rt, w, grace_ms);
}

/* Optional: 0 when the runtime does not tell. */
static inline int funcd_port_runtime_pid(funcd_runtime *rt, funcd_worker *w)
{
    return FUNCD_PORT_HAS(rt, 1, pid) ? rt->pid(rt, w) : 0;
}

static inline void funcd_port_runtime_release(funcd_runtime *rt, funcd_worker *w)
{
    rt->release(rt, w);
}

static inline void funcd_port_runtime_free(funcd_runtime *rt)
{
    rt->free(rt);
}

/* Version 2, optional: NULL when the runtime knows nothing beyond the wait
 * status. */
static inline const char *funcd_port_runtime_exit_reason(funcd_runtime *rt, funcd_worker *w)
{
    return FUNCD_PORT_HAS(rt, 2, exit_reason) ? rt->exit_reason(rt, w) : NULL;
}

/* Whether the runtime has `specialize` (version 2, optional): without it a
 * warm generic worker is used as it is, seeing what the runtime shows every
 * worker. */
static inline int funcd_port_runtime_has_specialize(const funcd_runtime *rt)
{
    return FUNCD_PORT_HAS(rt, 2, specialize);
}

/* Version 2, optional: FUNCD_ENOTSUP when the runtime cannot (the caller
 * starts a fresh worker). */
static inline int funcd_port_runtime_specialize(funcd_runtime *rt, funcd_worker *w,
                                                const funcd_worker_bind *binds, size_t n_binds,
                                                const funcd_worker_limits *limits)
{
    if (!FUNCD_PORT_HAS(rt, 2, specialize))
        return funcd_port_notsup("runtime", rt->name, "specialize");
    return rt->specialize(rt, w, binds, n_binds, limits);
}

#endif
