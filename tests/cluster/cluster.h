/*
 * A funcd cluster on loopback for the cluster tests (issue 15): a real
 * PostgreSQL (tests/pg_env.c) holding the store and the blobs, a real
 * nats-server (tests/nats_env.c) as the bus, up to three funcd daemons
 * (the build's bin/funcd, started through tests/durable/daemon.c) and
 * Debian's nginx as the load balancer in front of their data planes.
 *
 * Every process the harness starts is ended by pid in cl_down, also when a
 * test failed half way: nginx (SIGTERM, its master ends its workers), each
 * node (SIGKILL) and whatever workers it left, nats-server and PostgreSQL.
 * nginx and both servers are also told to quit should the test itself die
 * (PR_SET_PDEATHSIG). One thread owns a cl_cluster.
 */
#ifndef FUNCD_TESTS_CLUSTER_CLUSTER_H
#define FUNCD_TESTS_CLUSTER_CLUSTER_H

#include <stdint.h>
#include <sys/types.h>

#include "../durable/daemon.h"
#include "../nats_env.h"
#include "../pg_env.h"

#define CL_NODES 3
#define CL_MAX_PROCS 64

typedef struct cl_node {
    dd_daemon d;
    char name[8];  /* "n1", "n2", "n3": its --node-name */
    char dir[300]; /* its state directory */
    char log[320]; /* its stderr */
    /* Its processes (workers) seen last: what cl_down ends should they
     * outlive the node. */
    dd_proc procs[CL_MAX_PROCS];
    size_t nprocs;
} cl_node;

typedef struct cl_cluster {
    char dir[256];     /* private temporary directory of the run */
    char fn[300];      /* a Function's source: the fixture worker as `worker` */
    char key[300];     /* the Secrets' encryption key file every node shares */
    pg_env pg;
    nats_env nats;
    int pg_started, nats_started;
    cl_node node[CL_NODES];
    pid_t nginx;        /* its master process, 0 when not running */
    char nginx_dir[300];
    char access_log[320]; /* "$http_x_req $status $upstream_addr $upstream_status" lines */
    char lb[96];          /* "http://127.0.0.1:PORT": nginx */
    const char *lease_ttl; /* --lease-ttl of every node (NULL: funcd's default) */
} cl_cluster;

/* 1 when PostgreSQL, nats-server and nginx are installed; else 0 with a
 * message naming what is missing (the test then exits 77). */
int cl_tools_present(void);

/* The temporary directory (with `fn/worker`, a copy of `worker_exe`),
 * PostgreSQL and nats-server. 0, or -1 with a message. */
int cl_init(cl_cluster *c, const char *tag, const char *worker_exe);

/* Starts node `i` (0-based: node i is --node-name n<i+1>) on ephemeral
 * loopback ports with --store and --blob on the PostgreSQL, --bus on the
 * NATS server, its own --state-dir, c->lease_ttl, and `extra` flags
 * (NULL-terminated, may be NULL). */
int cl_node_start(cl_cluster *c, int i, const char *const *extra);

/* SIGKILLs node `i` and reaps it; its workers are ended by cl_down if they
 * outlive it. Returns the monotonic milliseconds at which it was reaped. */
int64_t cl_node_kill(cl_cluster *c, int i);

/* Starts nginx on a free loopback port with one upstream server per running
 * node's data plane (keep-alive, proxy_next_upstream error). */
int cl_nginx_start(cl_cluster *c);

/* Ends everything still running (by pid) and removes the directory. 1 when
 * a worker outlived its node's SIGKILL by 5 s (it was ended: a finding). */
int cl_down(cl_cluster *c);

/* PUT of a native Function `name` serving c->fn with `scaling` (a JSON
 * object, or NULL) through the API at `api`; the HTTP status. */
long cl_put_function(const cl_cluster *c, const char *api, const char *name, const char *scaling);

/* Polls GET `url` until it answers 200, up to `timeout_ms`; the
 * milliseconds it took, or -1 (with the last answer on stderr). */
long cl_wait_200(const char *url, int timeout_ms);

/* Polls the Function's status through the API at `api` until its Ready
 * condition is True, up to `timeout_ms`; the milliseconds it took or -1. */
long cl_wait_ready(const char *api, const char *name, int timeout_ms);

/* Node `via`'s view of the cluster (GET /apis/funcd.dev/v1/nodes): the
 * leader's name in `leader` ("" when no node holds the lease) and how many
 * nodes are ready; whether node `name` (may be NULL) is ready in *ready.
 * 0, or -1 when the list could not be read. */
int cl_nodes_view(const cl_cluster *c, int via, char *leader, size_t n, const char *name,
                  int *ready, int *nready);

/* The URL of node i's data plane for function `name` and `rest` ("/hello"). */
void cl_fn_url(char *out, size_t n, const char *base, const char *name, const char *rest);

#endif
