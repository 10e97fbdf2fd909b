/*
 * Services a function's sandboxed workers reach at 127.0.0.1 inside their
 * own network namespace (the S3 gateway, the egress proxy and its DNS
 * server): a plug-in serving consults for every version of a Function.
 * The service says which sockets the workers need, what they are told in
 * their environment and which host files they see; the runtime makes the
 * sockets in each worker's namespace before its program runs (the runtime
 * port's `listen`), and serving hands them to the service, which serves
 * them from the host side and knows the caller by the socket itself.
 *
 * Threads: every hook runs on the platform loop.
 */
#ifndef FUNCD_SERVING_NETSVC_H
#define FUNCD_SERVING_NETSVC_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "funcd/sys/runtime.h"

#define FUNCD_NETSVC_MAX 4 /* services serving consults */
#define FUNCD_NETSVC_MAX_LISTEN 4
#define FUNCD_NETSVC_MAX_BINDS 2

typedef struct funcd_netsvc_plan {
    funcd_worker_listen listen[FUNCD_NETSVC_MAX_LISTEN];
    size_t n_listen;
    /* NULL-terminated "KEY=value" lines added to every worker's
     * environment (part of the version's fingerprint: a change starts new
     * workers); the service's, until unplan. */
    char **env;
    /* Host paths the workers see (e.g. a resolv.conf at /etc/resolv.conf);
     * the strings are the service's, until unplan. */
    funcd_worker_bind binds[FUNCD_NETSVC_MAX_BINDS];
    size_t n_binds;
    void *state; /* the service's, per version */
} funcd_netsvc_plan;

typedef struct funcd_netsvc funcd_netsvc;
struct funcd_netsvc {
    const char *name; /* "s3", "egress" */
    /* A version of Function ns/name is being prepared: `fn` is the object
     * the version is built from (metadata and spec), `spec` its spec. 0: it
     * does not use the service; 1: it does, `out` filled; -1: it cannot run: funcd_error
     * set (the Function's Ready=False message) and `reason` filled
     * (CamelCase). `sandboxed` is 0 when the workers have no network
     * namespace of their own (--no-sandbox, or spec.network: host): then
     * `out` must ask for no socket. */
    int (*plan)(funcd_netsvc *svc, const char *ns, const char *name, const cJSON *fn,
                const cJSON *spec, int sandboxed, funcd_netsvc_plan *out, char reason[64]);
    /* A worker of that version started: its sockets, in the order of the
     * plan's `listen` (the service's from now on; it closes them in
     * detach). A handle for detach, or NULL (then it closed them). */
    void *(*attach)(funcd_netsvc *svc, void *state, const char *replica, const int *fds,
                    size_t n);
    /* The worker is gone. NULL handles are not passed. */
    void (*detach)(funcd_netsvc *svc, void *handle);
    /* The version is gone (after every detach of its workers). */
    void (*unplan)(funcd_netsvc *svc, void *state);
};

#endif
