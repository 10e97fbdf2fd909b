/*
 * A real PostgreSQL for tests: initdb and the postgres server of Debian's
 * postgresql package, in a temporary directory, listening only on a Unix
 * socket there (listen_addresses = ''). Run as root (CI), the server runs as
 * the `postgres` user (else `nobody`): PostgreSQL refuses to run as root.
 * The server is a child of the test, stopped by pid, and told to quit if
 * the test dies first (PR_SET_PDEATHSIG).
 *
 * The cluster is for tests only: fsync is off.
 */
#ifndef FUNCD_TESTS_PG_ENV_H
#define FUNCD_TESTS_PG_ENV_H

#include <stddef.h>
#include <sys/types.h>

typedef struct pg_env {
    pid_t pid;          /* the postmaster while running, else 0 */
    char bindir[256];   /* where initdb and postgres are */
    char root[256];     /* the mkdtemp directory: data/ and the socket */
    char data[300];     /* the cluster */
    char conninfo[600]; /* "host=ROOT user=postgres dbname=postgres" */
    char url[600];      /* the same as "postgresql:///postgres?host=ROOT&user=postgres" */
    int frozen;         /* pg_env_freeze'd: its processes are stopped */
} pg_env;

/* 1 when the PostgreSQL server binaries are installed ($FUNCD_PG_BIN, else
 * the newest /usr/lib/postgresql/N/bin). */
int pg_env_present(void);

/* initdb + start; waits until the server accepts connections. 0 or -1
 * (with a message on stderr). */
int pg_env_start(pg_env *e);

/* Stops the server (fast shutdown, SIGKILL after 30 s) and waits for it;
 * the cluster stays. */
void pg_env_stop_server(pg_env *e);

/* Starts the stopped server again on the same cluster and socket. */
int pg_env_restart_server(pg_env *e);

/* SIGSTOPs the postmaster and every process it started: a server that
 * accepts connections into the kernel's backlog and answers nothing, as
 * one behind a network partition. pg_env_thaw (or pg_env_stop_server)
 * SIGCONTs them. */
void pg_env_freeze(pg_env *e);
void pg_env_thaw(pg_env *e);

/* Runs SQL on a connection of its own; 0 or -1 (message on stderr). */
int pg_env_exec(const pg_env *e, const char *sql);

/* A conninfo for database `db` with extra keywords (may be NULL), e.g.
 * "options='-csearch_path=s1'". */
void pg_env_conninfo(const pg_env *e, const char *extra, char *out, size_t n);

/* Stops the server and removes the directory. */
void pg_env_free(pg_env *e);

#endif
