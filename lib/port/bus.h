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

/* Durable streams (version 2, optional): FUNCD_ENOTSUP from a bus without them. */
static inline int funcd_port_bus_stream_ensure(funcd_bus *b, const char *name,
                                               const char *subjects, int64_t max_age_ms)
{
    if (!FUNCD_PORT_HAS(b, 2, stream_ensure))
        return funcd_port_notsup("bus", b->name, "stream_ensure");
    return b->stream_ensure(b, name, subjects, max_age_ms);
}

static inline int funcd_port_bus_publish_durable(funcd_bus *b, const char *subject,
                                                 const void *data, size_t len)
{
    if (!FUNCD_PORT_HAS(b, 2, publish_durable))
        return funcd_port_notsup("bus", b->name, "publish_durable");
    return b->publish_durable(b, subject, data, len);
}

static inline int funcd_port_bus_consume(funcd_bus *b, const char *stream, const char *durable,
                                         funcd_bus_durable_cb cb, void *payload,
                                         funcd_bus_sub **out)
{
    if (!FUNCD_PORT_HAS(b, 2, consume))
        return funcd_port_notsup("bus", b->name, "consume");
    return b->consume(b, stream, durable, cb, payload, out);
}

static inline int funcd_port_bus_consumer_delete(funcd_bus *b, const char *stream,
                                                 const char *durable)
{
    if (!FUNCD_PORT_HAS(b, 2, consumer_delete))
        return funcd_port_notsup("bus", b->name, "consumer_delete");
    return b->consumer_delete(b, stream, durable);
}

#endif
