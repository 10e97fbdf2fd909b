/* Calls into the blob port (port.h): components use these, never the slots. */
#ifndef FUNCD_PORT_BLOB_H
#define FUNCD_PORT_BLOB_H

#include "port/port.h"

static inline int funcd_port_blob_put(funcd_blob *b, const char *key, const void *data,
                                      size_t len)
{
    return b->put(b, key, data, len);
}

static inline int funcd_port_blob_get(funcd_blob *b, const char *key, uint64_t offset,
                                      uint64_t length, void **out, size_t *out_len)
{
    return b->get(b, key, offset, length, out, out_len);
}

static inline int funcd_port_blob_stat(funcd_blob *b, const char *key, funcd_blob_stat *out)
{
    return b->stat(b, key, out);
}

static inline int funcd_port_blob_list(funcd_blob *b, const char *prefix, funcd_blob_list_cb cb,
                                       void *payload)
{
    return b->list(b, prefix, cb, payload);
}

static inline int funcd_port_blob_del(funcd_blob *b, const char *key)
{
    return b->del(b, key);
}

static inline void funcd_port_blob_free(funcd_blob *b)
{
    b->free(b);
}

#endif
