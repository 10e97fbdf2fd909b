/*
 * picohttpparser, as libh2o-evloop exports it (the library installs no
 * header of its own): the HTTP/1 response parser the gateway proxies with
 * and the serving layer probes workers with.
 */
#ifndef FUNCD_HTTP_PHR_H
#define FUNCD_HTTP_PHR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct phr_header {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
};

struct phr_chunked_decoder {
    size_t bytes_left_in_chunk;
    char consume_trailer;
    char _hex_count;
    char _state;
    uint64_t _reserved[4]; /* room for fields newer versions add */
};

/* The head's length when complete, -2 when more is needed, -1 when bad. */
int phr_parse_response(const char *buf, size_t len, int *minor_version, int *status,
                       const char **msg, size_t *msg_len, struct phr_header *headers,
                       size_t *num_headers, size_t last_len);
ssize_t phr_decode_chunked(struct phr_chunked_decoder *decoder, char *buf, size_t *bufsz);

#endif
