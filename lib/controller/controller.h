/*
 * The controller: a level-triggered reconcile loop on the platform loop.
 * Store watch events only say "look at this key again"; each reconcile
 * reads the object as it is now, computes its status and the gateway route,
 * and writes what differs. A periodic resync re-queues every object.
 */
#ifndef FUNCD_CONTROLLER_CONTROLLER_H
#define FUNCD_CONTROLLER_CONTROLLER_H

#include <event2/event.h>

#include "funcd/sys/store.h"
#include "serving/serving.h"
#include "util/log.h"

typedef struct funcd_controller funcd_controller;

typedef struct funcd_controller_config {
    struct event_base *base;
    funcd_store *store;
    funcd_serving *serving;  /* runs the Functions */
    const funcd_logger *logger;
    unsigned resync_ms;      /* 0: 60 s */
    /* The cluster this node is in (NULL: one node): status is written by
     * its leader only, with the replicas of every live node summed. Every
     * node applies the specs to its own serving. */
    struct funcd_cluster *cluster;
} funcd_controller_config;

int funcd_controller_new(funcd_controller **out, const funcd_controller_config *cfg);
/* Lists, starts the watch and queues every object. */
int funcd_controller_start(funcd_controller *c);
/* Re-reconciles one object soon (any thread). */
void funcd_controller_requeue(funcd_controller *c, const char *plural, const char *ns,
                              const char *name);
/* Re-reconciles every object soon (a new leader; any thread). */
void funcd_controller_resync(funcd_controller *c);
/* Ends the watch; pending work is dropped. */
void funcd_controller_free(funcd_controller *c);

#endif
