/* Calls into the gateway port (port.h): components use these, never the slots. */
#ifndef FUNCD_PORT_GATEWAY_H
#define FUNCD_PORT_GATEWAY_H

#include "port/port.h"

static inline int funcd_port_gateway_listen(funcd_gateway *gw, const char *addr, char *bound,
                                            size_t bound_len)
{
    return gw->listen(gw, addr, bound, bound_len);
}

static inline int funcd_port_gateway_start(funcd_gateway *gw)
{
    return gw->start(gw);
}

static inline int funcd_port_gateway_set_route(funcd_gateway *gw, const funcd_route *route)
{
    return gw->set_route(gw, route);
}

static inline int funcd_port_gateway_remove_route(funcd_gateway *gw, const char *namespace_,
                                                  const char *name)
{
    return gw->remove_route(gw, namespace_, name);
}

static inline int funcd_port_gateway_stop(funcd_gateway *gw)
{
    return gw->stop(gw);
}

static inline void funcd_port_gateway_free(funcd_gateway *gw)
{
    gw->free(gw);
}

/* Version 2, optional: FUNCD_ENOTSUP without it (stop then does it all). */
static inline int funcd_port_gateway_quiesce(funcd_gateway *gw)
{
    if (!FUNCD_PORT_HAS(gw, 2, quiesce))
        return funcd_port_notsup("gateway", gw->name, "quiesce");
    return gw->quiesce(gw);
}

#endif
