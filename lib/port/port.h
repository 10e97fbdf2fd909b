/*
 * The backend SPI's rules, in one place per port (docs/backends.md,
 * docs/adr/0032-backend-spi-rules.md).
 *
 * Registration: funcd_port_check_<port> accepts a backend whose `version`
 * is 1 to the current one and whose required slots of that version are set;
 * the tables in check.c hold, per port, every slot with the version that
 * appended it and whether it is required, as the public headers mark them.
 *
 * Calls: components never call a slot; they call the static inline wrappers
 * of lib/port/<port>.h. A required slot is called directly (registration
 * checked it); an optional one, or one appended after version 1, only when
 * the backend's version has it and it is set, else the wrapper answers
 * FUNCD_ENOTSUP or a documented default. A backend built against an older
 * header is smaller than today's struct: its later slots are never read.
 */
#ifndef FUNCD_PORT_PORT_H
#define FUNCD_PORT_PORT_H

#include <stddef.h>

#include "funcd/sys/blob.h"
#include "funcd/sys/bus.h"
#include "funcd/sys/gateway.h"
#include "funcd/sys/runtime.h"
#include "funcd/sys/store.h"

/* One slot of a port: its name, where it is, the version that appended it. */
typedef struct funcd_port_slot {
    const char *name;
    size_t offset;
    unsigned since;
    int required;
} funcd_port_slot;

/* A port's table (check.c), for tests and docs. */
typedef struct funcd_port_table {
    const char *port;   /* "store" */
    const char *option; /* "funcd_with_store" */
    unsigned current;   /* FUNCD_STORE_VERSION */
    const funcd_port_slot *slots;
    size_t n_slots;
} funcd_port_table;

extern const funcd_port_table funcd_port_store_table;
extern const funcd_port_table funcd_port_blob_table;
extern const funcd_port_table funcd_port_bus_table;
extern const funcd_port_table funcd_port_runtime_table;
extern const funcd_port_table funcd_port_gateway_table;

/*
 * Checks a backend at registration: FUNCD_EVERSION when its version is 0 or
 * newer than this library's, FUNCD_EINVAL naming every required slot of its
 * version that is NULL. 0 when the platform may use it.
 */
int funcd_port_check(const funcd_port_table *t, const void *backend);

static inline int funcd_port_check_store(const funcd_store *b)
{
    return funcd_port_check(&funcd_port_store_table, b);
}
static inline int funcd_port_check_blob(const funcd_blob *b)
{
    return funcd_port_check(&funcd_port_blob_table, b);
}
static inline int funcd_port_check_bus(const funcd_bus *b)
{
    return funcd_port_check(&funcd_port_bus_table, b);
}
static inline int funcd_port_check_runtime(const funcd_runtime *b)
{
    return funcd_port_check(&funcd_port_runtime_table, b);
}
static inline int funcd_port_check_gateway(const funcd_gateway *b)
{
    return funcd_port_check(&funcd_port_gateway_table, b);
}

/* A slot appended in version `since` that may be NULL: usable in `b`?
 * The version is tested first, so a smaller (older) struct is never read
 * past its end. */
#define FUNCD_PORT_HAS(b, since, slot) ((b)->version >= (since) && (b)->slot != NULL)

/* The answer of a wrapper whose optional slot is missing. */
int funcd_port_notsup(const char *port, const char *name, const char *slot);

#endif
