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

/* The fallback of put_open for a driver without it (version 1, or the slot
 * unset): a writer that buffers the whole object and calls put at commit. */
int funcd_port_blob_buffered_writer(funcd_blob *b, const char *key, funcd_blob_writer **out);

/* A writer that gathers the bytes in memory and at commit hands them to
 * `publish` (malloc()ed, the callee's from then on; NULL for 0 bytes): the
 * fallback above, and a driver that keeps objects in memory. */
typedef int (*funcd_port_blob_publish)(funcd_blob *b, const char *key, unsigned char *data,
                                       size_t len);
int funcd_port_blob_gathering_writer(funcd_blob *b, const char *key,
                                     funcd_port_blob_publish publish, funcd_blob_writer **out);

/* A streaming writer for `key`: the driver's own (version 2), else the
 * buffering fallback. */
static inline int funcd_port_blob_put_open(funcd_blob *b, const char *key, funcd_blob_writer **out)
{
    if (FUNCD_PORT_HAS(b, 2, put_open))
        return b->put_open(b, key, out);
    return funcd_port_blob_buffered_writer(b, key, out);
}

/* 1 when put_open streams (the driver has its own), 0 when it buffers. */
static inline int funcd_port_blob_streams(const funcd_blob *b)
{
    return FUNCD_PORT_HAS(b, 2, put_open);
}

static inline void funcd_port_blob_free(funcd_blob *b)
{
    b->free(b);
}

#endif
