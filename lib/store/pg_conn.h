/*
 * One libpq connection that comes back by itself: what the PostgreSQL store
 * and blob drivers share (docs/adr/0038-postgres-drivers.md).
 *
 * While the server cannot be reached, calls answer FUNCD_EUNAVAILABLE at
 * once and a new connection is tried only after a backoff (50 ms doubling
 * to 2 s), so callers never queue behind a dead server. The caller holds
 * its own lock around every function here.
 */
#ifndef FUNCD_STORE_PG_CONN_H
#define FUNCD_STORE_PG_CONN_H

#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>

/* Prepares the driver's statements, LISTENs, ... on a new connection;
 * 0, or a FUNCD_E* (the connection is then dropped). */
typedef int (*funcd_pg_setup_fn)(PGconn *conn, void *arg);

typedef struct funcd_pg_conn {
    char *conninfo;       /* as given: a URL or keyword=value pairs */
    char *display;        /* host, port and dbname only: never the password */
    const char *who;      /* "store" or "blob", for messages */
    PGconn *conn;         /* NULL while down */
    funcd_pg_setup_fn setup;
    void *setup_arg;
    int64_t retry_at_ms;  /* no connection attempt before (monotonic) */
    unsigned backoff_ms;
    char last_error[300]; /* why the last attempt or call failed */
} funcd_pg_conn;

/* Checks `conninfo` (FUNCD_EINVAL naming what is wrong) and copies it; no
 * connection yet. */
int funcd_pg_conn_init(funcd_pg_conn *c, const char *conninfo, const char *who,
                       funcd_pg_setup_fn setup, void *setup_arg);
void funcd_pg_conn_close(funcd_pg_conn *c);

/* The connection, made now if there is none and the backoff allows:
 * 0, or FUNCD_EUNAVAILABLE with a message saying why and what is retried. */
int funcd_pg_conn_ready(funcd_pg_conn *c);

/* Drops the connection (it broke) and schedules the next attempt. */
void funcd_pg_conn_lost(funcd_pg_conn *c, const char *why);

/*
 * The funcd error for a failed call `r` (may be NULL) during `what` (on
 * `key`, may be NULL): FUNCD_EUNAVAILABLE if the connection broke or the
 * server is going away (the connection is dropped), FUNCD_ENOSPC for a full
 * disk, else FUNCD_EIO with the server's message. Clears `r`.
 */
int funcd_pg_conn_error(funcd_pg_conn *c, PGresult *r, const char *what, const char *key);

/* Runs a command without parameters (BEGIN, COMMIT, ...); 0 or the error. */
int funcd_pg_conn_exec(funcd_pg_conn *c, const char *sql, const char *what, const char *key);
/* The same with the answer (text rows; PQclear it), or NULL and *err. */
PGresult *funcd_pg_conn_query(funcd_pg_conn *c, const char *sql, const char *what,
                              const char *key, int *err);
/* Ends the transaction in progress, if any, leaving the funcd error as it
 * is (the caller reports why it rolls back); the connection is dropped if
 * the ROLLBACK fails or is not answered in time. */
void funcd_pg_conn_rollback(funcd_pg_conn *c);

/* Runs the prepared statement `name` with binary parameters and binary
 * results; the result when it succeeded (PQclear it), else NULL with the
 * error in *err. */
PGresult *funcd_pg_conn_run(funcd_pg_conn *c, const char *name, int n, const char *const *values,
                            const int *lengths, const char *what, const char *key, int *err);

/* For setup functions, on the connection being set up (non-blocking, like
 * every call here, so bounded by the same answer deadline): 0,
 * FUNCD_EUNAVAILABLE when the server broke the connection or went silent,
 * or FUNCD_EIO. Runs `sql` (several statements allowed), for `what`. */
int funcd_pg_conn_setup_exec(PGconn *conn, const char *sql, const char *what);
/* Prepares `sql` as `name` with parameter types `types` (n of them). */
int funcd_pg_conn_prepare(PGconn *conn, const char *name, const char *sql, int n,
                          const unsigned *types);

/* Binary int8 helpers: network byte order. */
void funcd_pg_put_u64(char out[8], uint64_t v);
uint64_t funcd_pg_get_u64(const PGresult *r, int row, int col);
uint32_t funcd_pg_get_u32(const PGresult *r, int row, int col);

/* Type OIDs of the parameters the drivers bind. */
#define FUNCD_PG_BYTEA 17
#define FUNCD_PG_INT8 20
#define FUNCD_PG_INT4 23
#define FUNCD_PG_TEXT 25

int64_t funcd_pg_now_ms(void);

#endif
