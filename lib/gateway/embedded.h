/*
 * What the platform sets on the embedded gateway beyond the gateway SPI.
 */
#ifndef FUNCD_GATEWAY_EMBEDDED_H
#define FUNCD_GATEWAY_EMBEDDED_H

#include "funcd/sys/gateway.h"

/* Connections the data plane holds open at once (0: the default); more
 * wait in the listen backlog. Call before `listen`. 0 when set; -1 when
 * `gw` is not the embedded gateway (nothing is changed). */
int funcd_gateway_embedded_set_max_connections(funcd_gateway *gw, unsigned n);

#endif
