/* Calls into the bus port (port.h): components use these, never the slots. */
#ifndef FUNCD_PORT_BUS_H
#define FUNCD_PORT_BUS_H

#include "port/port.h"

static inline int funcd_port_bus_publish(funcd_bus *b, const char *subject, const void *data,
                                         size_t len)
{
    return b->publish(b, subject, data, len);
}

static inline int funcd_port_bus_subscribe(funcd_bus *b, const char *subject,
                                           const char *queue_group, funcd_bus_msg_cb cb,
                                           void *payload, funcd_bus_sub **out)
{
    return b->subscribe(b, subject, queue_group, cb, payload, out);
}

static inline void funcd_port_bus_unsubscribe(funcd_bus *b, funcd_bus_sub *sub)
{
    b->unsubscribe(b, sub);
}

static inline void funcd_port_bus_free(funcd_bus *b)
{
    b->free(b);
}

#endif
