/* One libpq connection that comes back by itself (pg_conn.h). */
#include "store/pg_conn.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "funcd/sys/error.h"

#define BACKOFF_FIRST_MS 50
#define BACKOFF_MAX_MS 2000

/* How long a call waits for the server to say anything. A server that
 * stops answering (a partition, a frozen host) would else hold the caller,
 * and every caller queued behind the driver's lock, until TCP gives up:
 * many minutes, and never on a Unix socket. Past it the connection is
 * dropped and the call answers FUNCD_EUNAVAILABLE, as for a broken
 * connection (a write's outcome is then unknown). It counts silence, from
 * the last byte that moved, so a large answer over a slow link is not cut.
 * As long as libpq's connect_timeout. */
#define ANSWER_TIMEOUT_MS 5000

int64_t funcd_pg_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void funcd_pg_put_u64(char out[8], uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        out[i] = (char)(v & 0xff);
}

uint64_t funcd_pg_get_u64(const PGresult *r, int row, int col)
{
    const unsigned char *p = (const unsigned char *)PQgetvalue(r, row, col);
    uint64_t v = 0;
    if (PQgetisnull(r, row, col) || PQgetlength(r, row, col) != 8)
        return 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

uint32_t funcd_pg_get_u32(const PGresult *r, int row, int col)
{
    const unsigned char *p = (const unsigned char *)PQgetvalue(r, row, col);
    if (PQgetisnull(r, row, col) || PQgetlength(r, row, col) != 4)
        return 0;
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The server's notices (a NOTICE of CREATE ... IF NOT EXISTS) are not ours
 * to print on the host's stderr. */
static void quiet(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

/* "host=H port=P dbname=D" of a conninfo, for messages: no password. */
static char *display_of(PQconninfoOption *opts)
{
    char buf[600] = "";
    size_t n = 0;
    for (PQconninfoOption *o = opts; o && o->keyword; o++) {
        if (!o->val || !*o->val ||
            (strcmp(o->keyword, "host") != 0 && strcmp(o->keyword, "hostaddr") != 0 &&
             strcmp(o->keyword, "port") != 0 && strcmp(o->keyword, "dbname") != 0))
            continue;
        int w = snprintf(buf + n, sizeof(buf) - n, "%s%s=%s", n ? " " : "", o->keyword, o->val);
        if (w < 0 || (size_t)w >= sizeof(buf) - n)
            break;
        n += (size_t)w;
    }
    return strdup(n ? buf : "the default server (PGHOST, or the local socket)");
}

int funcd_pg_conn_init(funcd_pg_conn *c, const char *conninfo, const char *who,
                       funcd_pg_setup_fn setup, void *setup_arg)
{
    memset(c, 0, sizeof(*c));
    c->who = who;
    c->setup = setup;
    c->setup_arg = setup_arg;
    if (!conninfo)
        return funcd_error_set(FUNCD_EINVAL, "%s: no PostgreSQL connection string", who);
    char *err = NULL;
    PQconninfoOption *opts = PQconninfoParse(conninfo, &err);
    if (!opts) {
        int rc = funcd_error_set(FUNCD_EINVAL,
                                 "%s: the PostgreSQL connection string is not valid: %s(a URL "
                                 "postgresql://user@host:port/db or host=... dbname=... pairs)",
                                 who, err ? err : "out of memory ");
        PQfreemem(err);
        return rc;
    }
    c->display = display_of(opts);
    PQconninfoFree(opts);
    c->conninfo = strdup(conninfo);
    if (!c->conninfo || !c->display) {
        funcd_pg_conn_close(c);
        return funcd_error_set(FUNCD_ENOMEM, "%s: out of memory", who);
    }
    return 0;
}

void funcd_pg_conn_close(funcd_pg_conn *c)
{
    if (c->conn)
        PQfinish(c->conn);
    c->conn = NULL;
    free(c->conninfo);
    free(c->display);
    c->conninfo = c->display = NULL;
}

static void set_last_error(funcd_pg_conn *c, const char *why)
{
    snprintf(c->last_error, sizeof(c->last_error), "%s", why ? why : "unknown error");
    size_t n = strlen(c->last_error); /* libpq's messages end in a newline */
    while (n && (c->last_error[n - 1] == '\n' || c->last_error[n - 1] == ' '))
        c->last_error[--n] = '\0';
}

void funcd_pg_conn_lost(funcd_pg_conn *c, const char *why)
{
    if (why)
        set_last_error(c, why);
    if (c->conn)
        PQfinish(c->conn);
    c->conn = NULL;
    c->backoff_ms = c->backoff_ms ? c->backoff_ms * 2 : BACKOFF_FIRST_MS;
    if (c->backoff_ms > BACKOFF_MAX_MS)
        c->backoff_ms = BACKOFF_MAX_MS;
    c->retry_at_ms = funcd_pg_now_ms() + c->backoff_ms;
}

static int unavailable(funcd_pg_conn *c)
{
    return funcd_error_set(FUNCD_EUNAVAILABLE,
                           "%s: the PostgreSQL server (%s) cannot be reached: %s; funcd "
                           "reconnects by itself, retry",
                           c->who, c->display, c->last_error);
}

/* Defaults a connection string can override: a bounded connect, and TCP
 * keepalives so that a server lost behind a partition is noticed. */
static PGconn *connect_now(const char *conninfo)
{
    static const char *const keys[] = {"connect_timeout", "keepalives_idle",
                                       "keepalives_interval", "keepalives_count",
                                       "application_name", "dbname", NULL};
    const char *values[] = {"5", "10", "5", "3", "funcd", conninfo, NULL};
    return PQconnectdbParams(keys, values, 1);
}

int funcd_pg_conn_ready(funcd_pg_conn *c)
{
    if (c->conn && PQstatus(c->conn) == CONNECTION_OK)
        return 0;
    if (c->conn)
        funcd_pg_conn_lost(c, PQerrorMessage(c->conn));
    if (funcd_pg_now_ms() < c->retry_at_ms)
        return unavailable(c);
    c->conn = connect_now(c->conninfo);
    if (!c->conn || PQstatus(c->conn) != CONNECTION_OK) {
        funcd_pg_conn_lost(c, c->conn ? PQerrorMessage(c->conn) : "out of memory");
        return unavailable(c);
    }
    PQsetNoticeProcessor(c->conn, quiet, NULL);
    /* Every query, the setup's too, is sent without blocking and its answer
     * awaited with a deadline (await_result). */
    if (PQsetnonblocking(c->conn, 1) != 0) {
        funcd_pg_conn_lost(c, PQerrorMessage(c->conn));
        return unavailable(c);
    }
    int rc = c->setup ? c->setup(c->conn, c->setup_arg) : 0;
    if (rc < 0) {
        /* It went away, or went silent, while we set up. */
        if (PQstatus(c->conn) != CONNECTION_OK || rc == FUNCD_EUNAVAILABLE) {
            funcd_pg_conn_lost(c, rc == FUNCD_EUNAVAILABLE ? funcd_error_last()->message
                                                           : PQerrorMessage(c->conn));
            return unavailable(c);
        }
        PQfinish(c->conn);
        c->conn = NULL;
        return rc;
    }
    c->backoff_ms = 0;
    return 0;
}

/* SQLSTATE classes that mean "the server is not there for us now". */
static int state_unavailable(const char *state)
{
    return state && (strncmp(state, "08", 2) == 0 ||    /* connection exception */
                     strncmp(state, "57P", 3) == 0 ||   /* admin shutdown, crash, starting up */
                     strcmp(state, "53300") == 0);      /* too many connections */
}

int funcd_pg_conn_error(funcd_pg_conn *c, PGresult *r, const char *what, const char *key)
{
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    char msg[300];
    snprintf(msg, sizeof(msg), "%s",
             r && PQresultErrorMessage(r)[0] ? PQresultErrorMessage(r)
             : c->conn                       ? PQerrorMessage(c->conn)
                                             : c->last_error); /* answer() dropped it */
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    const char *of = key ? " of \"" : "", *k = key ? key : "", *q = key ? "\"" : "";
    int broken = !c->conn || PQstatus(c->conn) != CONNECTION_OK || state_unavailable(state);
    PQclear(r);
    if (broken) {
        if (c->conn)
            funcd_pg_conn_lost(c, msg);
        return funcd_error_set(FUNCD_EUNAVAILABLE,
                               "%s: the PostgreSQL server (%s) went away during the %s%s%s%s: "
                               "%s; funcd reconnects by itself, retry",
                               c->who, c->display, what, of, k, q, msg);
    }
    if (state && strcmp(state, "53100") == 0)
        return funcd_error_set(FUNCD_ENOSPC,
                               "%s: the PostgreSQL server (%s) is out of disk space; the %s%s%s%s "
                               "was not applied",
                               c->who, c->display, what, of, k, q);
    return funcd_error_set(FUNCD_EIO, "%s: PostgreSQL (%s) failed the %s%s%s%s: %s", c->who,
                           c->display, what, of, k, q, msg);
}

/* Waits until the socket is ready for `events` or the deadline passed;
 * 1 ready, 0 timed out. */
static int wait_socket(PGconn *conn, short events, int64_t deadline)
{
    struct pollfd p = {PQsocket(conn), events, 0};
    for (;;) {
        int64_t left = deadline - funcd_pg_now_ms();
        if (left <= 0)
            return 0;
        int n = poll(&p, 1, (int)left);
        if (n > 0 || (n < 0 && errno != EINTR))
            return 1; /* an error shows in the libpq call that follows */
    }
}

/*
 * The answer to the query just sent, as PQexec gives it (the first error,
 * else the last result): sends what libpq holds, then reads until the
 * connection is idle again, as long as the socket is never silent for
 * ANSWER_TIMEOUT_MS. NULL with *timed_out set when it was; NULL alone when
 * the connection broke (PQstatus says so).
 */
static PGresult *await_result(PGconn *conn, int *timed_out)
{
    int64_t deadline = funcd_pg_now_ms() + ANSWER_TIMEOUT_MS;
    *timed_out = 0;
    int f;
    while ((f = PQflush(conn)) == 1) {
        if (!wait_socket(conn, POLLOUT | POLLIN, deadline)) {
            *timed_out = 1;
            return NULL;
        }
        deadline = funcd_pg_now_ms() + ANSWER_TIMEOUT_MS; /* bytes moved */
        if (!PQconsumeInput(conn)) /* what the server says while we send */
            return NULL;
    }
    if (f < 0)
        return NULL;
    PGresult *keep = NULL;
    for (;;) {
        while (PQisBusy(conn)) {
            if (!wait_socket(conn, POLLIN, deadline)) {
                *timed_out = 1;
                PQclear(keep);
                return NULL;
            }
            deadline = funcd_pg_now_ms() + ANSWER_TIMEOUT_MS; /* bytes came */
            if (!PQconsumeInput(conn)) {
                PQclear(keep);
                return NULL;
            }
        }
        PGresult *r = PQgetResult(conn);
        if (!r)
            return keep;
        ExecStatusType st = PQresultStatus(keep);
        if (keep && st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
            PQclear(r); /* an error stays the answer */
        } else {
            PQclear(keep);
            keep = r;
        }
    }
}

/* The answer to the query `sent` (PQsend*'s return) on c->conn, or NULL
 * with the connection dropped when it broke or the server did not answer in
 * time; funcd_pg_conn_error then reports FUNCD_EUNAVAILABLE. */
static PGresult *answer(funcd_pg_conn *c, int sent)
{
    int timed_out = 0;
    PGresult *r = sent ? await_result(c->conn, &timed_out) : NULL;
    if (timed_out) {
        char why[96];
        snprintf(why, sizeof(why), "no answer within %d ms", ANSWER_TIMEOUT_MS);
        funcd_pg_conn_lost(c, why);
    }
    return r;
}

PGresult *funcd_pg_conn_query(funcd_pg_conn *c, const char *sql, const char *what,
                              const char *key, int *err)
{
    PGresult *r = answer(c, PQsendQuery(c->conn, sql));
    ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
        *err = 0;
        return r;
    }
    *err = funcd_pg_conn_error(c, r, what, key);
    return NULL;
}

int funcd_pg_conn_exec(funcd_pg_conn *c, const char *sql, const char *what, const char *key)
{
    int err;
    PQclear(funcd_pg_conn_query(c, sql, what, key, &err));
    return err;
}

void funcd_pg_conn_rollback(funcd_pg_conn *c)
{
    if (!c->conn || PQtransactionStatus(c->conn) == PQTRANS_IDLE)
        return;
    int timed_out = 0;
    PGresult *r = PQsendQuery(c->conn, "ROLLBACK") ? await_result(c->conn, &timed_out) : NULL;
    if (PQresultStatus(r) != PGRES_COMMAND_OK) /* a connection we cannot trust: a new one */
        funcd_pg_conn_lost(c, timed_out ? "no answer to ROLLBACK" : PQerrorMessage(c->conn));
    PQclear(r);
}

/* A setup step's answer (before the connection is handed out): 0, or
 * FUNCD_EUNAVAILABLE when the server broke the connection or went silent,
 * else FUNCD_EIO naming `what`. */
static int setup_answer(PGconn *conn, int sent, const char *what)
{
    int timed_out = 0;
    PGresult *r = sent ? await_result(conn, &timed_out) : NULL;
    ExecStatusType st = PQresultStatus(r);
    int rc = 0;
    if (timed_out)
        rc = funcd_error_set(FUNCD_EUNAVAILABLE, "no answer within %d ms to the %s",
                             ANSWER_TIMEOUT_MS, what);
    else if (!r || PQstatus(conn) != CONNECTION_OK)
        rc = funcd_error_set(FUNCD_EUNAVAILABLE, "the connection broke during the %s: %s", what,
                             PQerrorMessage(conn));
    else if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        rc = funcd_error_set(FUNCD_EIO, "PostgreSQL refused the %s: %s", what,
                             PQresultErrorMessage(r));
    PQclear(r);
    return rc;
}

int funcd_pg_conn_setup_exec(PGconn *conn, const char *sql, const char *what)
{
    return setup_answer(conn, PQsendQuery(conn, sql), what);
}

PGresult *funcd_pg_conn_run(funcd_pg_conn *c, const char *name, int n, const char *const *values,
                            const int *lengths, const char *what, const char *key, int *err)
{
    int formats[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    PGresult *r =
        answer(c, PQsendQueryPrepared(c->conn, name, n, values, lengths, formats, 1));
    ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
        *err = 0;
        return r;
    }
    *err = funcd_pg_conn_error(c, r, what, key);
    return NULL;
}

int funcd_pg_conn_prepare(PGconn *conn, const char *name, const char *sql, int n,
                          const unsigned *types)
{
    char what[96];
    snprintf(what, sizeof(what), "statement %s", name);
    return setup_answer(conn, PQsendPrepare(conn, name, sql, n, (const Oid *)types), what);
}
