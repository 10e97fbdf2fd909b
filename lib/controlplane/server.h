/*
 * The control-plane HTTP server: funcd_cp on one h2o thread, with watches
 * streamed as NDJSON.
 */
#ifndef FUNCD_CONTROLPLANE_SERVER_H
#define FUNCD_CONTROLPLANE_SERVER_H

#include <stddef.h>

#include "controlplane/api.h"

typedef struct funcd_cp_server funcd_cp_server;

/* Bytes a watch or log stream may hold for a client that reads slower than
 * events come (docs/operating.md). */
#define FUNCD_CP_STREAM_BUFFER_DEFAULT ((size_t)2 * 1024 * 1024)

typedef struct funcd_cp_server_limits {
    size_t stream_buffer;     /* 0: FUNCD_CP_STREAM_BUFFER_DEFAULT */
    unsigned max_connections; /* 0: FUNCD_HTTPD_MAX_CONNECTIONS_DEFAULT */
    struct ssl_ctx_st *tls;   /* serve TLS with it (ALPN http/1.1 only); NULL: plain */
} funcd_cp_server_limits;

/* `limits` may be NULL (the defaults). */
int funcd_cp_server_new(funcd_cp_server **out, funcd_cp *cp, const char *addr,
                        const funcd_cp_server_limits *limits, char *bound, size_t bound_len);
int funcd_cp_server_start(funcd_cp_server *s);
void funcd_cp_server_stop(funcd_cp_server *s);
void funcd_cp_server_free(funcd_cp_server *s);

#endif
