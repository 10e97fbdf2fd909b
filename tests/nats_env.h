/*
 * A real nats-server for tests (Debian's nats-server, with JetStream): on
 * 127.0.0.1 at a port the kernel picks, its JetStream store and log in a
 * temporary directory, ended by pid. Shared by the NATS bus tests and the
 * cluster tests.
 */
#ifndef FUNCD_TESTS_NATS_ENV_H
#define FUNCD_TESTS_NATS_ENV_H

#include <sys/types.h>

typedef struct nats_env {
    pid_t pid;      /* 0 while stopped */
    int port;       /* kept across nats_env_halt/nats_env_resume */
    char root[256]; /* a mkdtemp dir: JetStream store (root/js), log (root/nats.log) */
    char url[64];   /* "nats://127.0.0.1:PORT" */
} nats_env;

/* The nats-server binary, or NULL when it is not installed. */
const char *nats_env_server(void);

/* Starts nats-server -js and waits until it accepts clients; 0, or -1 with
 * a message (and the server's log) on stderr. */
int nats_env_start(nats_env *e);

/* Kills the server with SIGKILL and waits for it; its directory and port stay
 * for nats_env_resume. */
void nats_env_halt(nats_env *e);

/* Starts the server again on the same port and JetStream store; 0 or -1. */
int nats_env_resume(nats_env *e);

/* Ends the server by pid (SIGTERM, then SIGKILL after 5 s), waits for it,
 * removes its directory. Safe to call twice. */
void nats_env_stop(nats_env *e);

#endif
