/*
 * The control-plane HTTP server: funcd_cp on one h2o thread, with watches
 * streamed as NDJSON.
 */
#ifndef FUNCD_CONTROLPLANE_SERVER_H
#define FUNCD_CONTROLPLANE_SERVER_H

#include <stddef.h>

#include "controlplane/api.h"

typedef struct funcd_cp_server funcd_cp_server;

int funcd_cp_server_new(funcd_cp_server **out, funcd_cp *cp, const char *addr, char *bound,
                        size_t bound_len);
int funcd_cp_server_start(funcd_cp_server *s);
void funcd_cp_server_stop(funcd_cp_server *s);
void funcd_cp_server_free(funcd_cp_server *s);

#endif
