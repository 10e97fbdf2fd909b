/*
 * The per-version slot tables of the five ports and the registration check
 * (port.h). A table lists every slot of the public struct in order, with the
 * version that appended it and whether a backend of that version must set
 * it; the marks in include/funcd/sys/<port>.h say the same.
 */
#include <stdio.h>
#include <string.h>

#include "funcd/sys/error.h"
#include "port/port.h"

#define SLOT(type, slot, since, required) {#slot, offsetof(type, slot), since, required}
#define TABLE(port_, type, current_, slots_)                                                       \
    const funcd_port_table funcd_port_##port_##_table = {                                          \
        #port_, "funcd_with_" #port_, current_, slots_, sizeof(slots_) / sizeof(slots_[0])}

static const funcd_port_slot store_slots[] = {
    SLOT(funcd_store, get, 1, 1),     SLOT(funcd_store, put, 1, 1),
    SLOT(funcd_store, del, 1, 1),     SLOT(funcd_store, list, 1, 1),
    SLOT(funcd_store, watch, 1, 1),   SLOT(funcd_store, unwatch, 1, 1),
    SLOT(funcd_store, revision, 1, 0), SLOT(funcd_store, free, 1, 1),
};
TABLE(store, funcd_store, FUNCD_STORE_VERSION, store_slots);

static const funcd_port_slot blob_slots[] = {
    SLOT(funcd_blob, put, 1, 1),  SLOT(funcd_blob, get, 1, 1), SLOT(funcd_blob, stat, 1, 1),
    SLOT(funcd_blob, list, 1, 1), SLOT(funcd_blob, del, 1, 1), SLOT(funcd_blob, free, 1, 1),
    SLOT(funcd_blob, put_open, 2, 0),
};
TABLE(blob, funcd_blob, FUNCD_BLOB_VERSION, blob_slots);

static const funcd_port_slot bus_slots[] = {
    SLOT(funcd_bus, publish, 1, 1),
    SLOT(funcd_bus, subscribe, 1, 1),
    SLOT(funcd_bus, unsubscribe, 1, 1),
    SLOT(funcd_bus, free, 1, 1),
    SLOT(funcd_bus, stream_ensure, 2, 0),
    SLOT(funcd_bus, publish_durable, 2, 0),
    SLOT(funcd_bus, consume, 2, 0),
    SLOT(funcd_bus, consumer_delete, 2, 0),
};
TABLE(bus, funcd_bus, FUNCD_BUS_VERSION, bus_slots);

static const funcd_port_slot runtime_slots[] = {
    SLOT(funcd_runtime, attach, 1, 1),      SLOT(funcd_runtime, start, 1, 1),
    SLOT(funcd_runtime, stop, 1, 1),        SLOT(funcd_runtime, pid, 1, 0),
    SLOT(funcd_runtime, release, 1, 1),     SLOT(funcd_runtime, free, 1, 1),
    SLOT(funcd_runtime, exit_reason, 2, 0), SLOT(funcd_runtime, specialize, 2, 0),
};
TABLE(runtime, funcd_runtime, FUNCD_RUNTIME_VERSION, runtime_slots);

static const funcd_port_slot gateway_slots[] = {
    SLOT(funcd_gateway, listen, 1, 1),       SLOT(funcd_gateway, start, 1, 1),
    SLOT(funcd_gateway, set_route, 1, 1),    SLOT(funcd_gateway, remove_route, 1, 1),
    SLOT(funcd_gateway, stop, 1, 1),         SLOT(funcd_gateway, free, 1, 1),
    SLOT(funcd_gateway, quiesce, 2, 0),
};
TABLE(gateway, funcd_gateway, FUNCD_GATEWAY_VERSION, gateway_slots);

/* Every port struct starts with `unsigned version; const char *name;`. */
typedef struct port_head {
    unsigned version;
    const char *name;
} port_head;

int funcd_port_check(const funcd_port_table *t, const void *backend)
{
    if (!backend)
        return funcd_error_set(FUNCD_EINVAL, "%s: the %s backend is NULL", t->option, t->port);
    const port_head *h = backend;
    const char *name = h->name ? h->name : "(unnamed)";
    if (h->version < 1 || h->version > t->current)
        return funcd_error_set(FUNCD_EVERSION, "the %s backend \"%s\" has version %u; this funcd "
                               "takes versions 1 to %u", t->port, name, h->version, t->current);
    char missing[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < t->n_slots; i++) {
        const funcd_port_slot *s = &t->slots[i];
        if (!s->required || s->since > h->version)
            continue;
        void (*fn)(void);
        memcpy(&fn, (const char *)backend + s->offset, sizeof(fn));
        if (fn)
            continue;
        int n = snprintf(missing + used, sizeof(missing) - used, "%s%s", used ? ", " : "",
                         s->name);
        if (n > 0 && (size_t)n < sizeof(missing) - used)
            used += (size_t)n;
    }
    if (used)
        return funcd_error_set(FUNCD_EINVAL, "the %s backend \"%s\" (version %u) lacks required "
                               "methods: %s", t->port, name, h->version, missing);
    return 0;
}

int funcd_port_notsup(const char *port, const char *name, const char *slot)
{
    return funcd_error_set(FUNCD_ENOTSUP, "the %s backend \"%s\" does not implement %s", port,
                           name ? name : "(unnamed)", slot);
}
