/*
 * A slow link to the test's PostgreSQL (tests/pg_env.h): a Unix socket in a
 * directory of its own that forwards every connection to the server's
 * socket, what the client sends at once and what the server answers at
 * most `bytes_per_second`, in slices every 50 ms. A large answer then
 * arrives steadily but slowly, as over a thin network link.
 *
 * One thread per connection, all ended by pg_slow_proxy_stop.
 */
#ifndef FUNCD_TESTS_PG_SLOW_PROXY_H
#define FUNCD_TESTS_PG_SLOW_PROXY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#define PG_SLOW_PROXY_CONNS 8

typedef struct pg_slow_proxy {
    char dir[256];      /* holds .s.PGSQL.5432: "host=DIR" reaches the server through it */
    char server[300];   /* the server's socket */
    size_t per_slice;   /* bytes forwarded to the client per 50 ms */
    int listen_fd;
    atomic_int stop;
    pthread_t acceptor;
    int started;
    pthread_t conns[PG_SLOW_PROXY_CONNS];
    int fds[PG_SLOW_PROXY_CONNS][2]; /* client, server */
    atomic_int n_conns;
    /* Set by the test: a connection's answers after its startup are
     * dropped, so the server seems to accept a client and then say nothing
     * to its queries, as behind a partition. */
    atomic_int mute;
} pg_slow_proxy;

/* Listens in a new temporary directory and forwards to the server whose
 * socket is in `server_dir` (pg_env.root). 0, or -1 with a message. */
int pg_slow_proxy_start(pg_slow_proxy *p, const char *server_dir, size_t bytes_per_second);
/* Ends every connection and thread and removes the directory. */
void pg_slow_proxy_stop(pg_slow_proxy *p);

#endif
