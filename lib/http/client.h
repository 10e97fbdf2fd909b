/*
 * A keep-alive HTTP/1.1 client over Unix sockets (libevent bufferevents),
 * the one way funcd talks to its workers from the platform loop: the
 * readiness probe and the function runner's evaluations (the gateway has its
 * own, on h2o's sockets: docs/adr/0020-gateway-upstream-client.md). Answers
 * are parsed by lib/http/http1.h. A peer is one
 * server socket with the idle connections kept for it; a request takes an
 * idle one or connects anew, and its connection goes back idle after a
 * complete answer the server let stay open.
 *
 * A connection to a server that is gone is never used: an idle connection
 * that sees anything (EOF, an error, bytes out of turn) is closed at once,
 * one taken from the idle list is checked for a close not yet seen, and
 * funcd_http_peer_close drops them all when the owner knows the server
 * ended (its worker exited).
 *
 * Threads: the loop's thread only.
 */
#ifndef FUNCD_HTTP_CLIENT_H
#define FUNCD_HTTP_CLIENT_H

#include <event2/event.h>

#include "http/http1.h"
#include "util/buf.h"

/* The longest head the client accepts (the function runner's
 * X-Funcd-Stderr carries up to 64 KiB in base64). */
#define FUNCD_HTTP_CLIENT_MAX_HEAD (256 * 1024)
#define FUNCD_HTTP_CLIENT_MAX_FIELDS 64

/* An answer: its head parsed by lib/http/http1.h, its body de-chunked. */
typedef struct funcd_http_response {
    int status;
    int keep_alive; /* the connection may carry the next request */
    funcd_buf head; /* the head's bytes: `msg.fields` point into them */
    funcd_buf body; /* NUL-terminated */
    funcd_http1 msg;
    funcd_http1_field fields[FUNCD_HTTP_CLIENT_MAX_FIELDS];
} funcd_http_response;

/* The value of the first header named `lower` (a lowercase name), NUL-
 * terminated in place, or NULL. */
const char *funcd_http_response_header(funcd_http_response *r, const char *lower);

typedef struct funcd_http_peer funcd_http_peer;
typedef struct funcd_http_call funcd_http_call;

/* How a call ended. */
typedef enum funcd_http_outcome {
    FUNCD_HTTP_ANSWERED = 0, /* the whole answer is in */
    /* The server cannot have taken the request: the connect failed, or the
     * connection was reset before any byte of an answer came. */
    FUNCD_HTTP_NOT_TAKEN,
    FUNCD_HTTP_BROKEN,    /* closed or failed when it may have taken the request */
    FUNCD_HTTP_MALFORMED, /* not HTTP/1.x */
    FUNCD_HTTP_TOO_LARGE, /* the body passed the call's limit (the status is known) */
} funcd_http_outcome;

/* The answer (`resp`, whose body the callback may take) or why there is
 * none (`error`, a sentence). Runs once, on the loop; the call is gone
 * after it returns. */
typedef void (*funcd_http_done_fn)(funcd_http_call *c, funcd_http_outcome outcome,
                                   funcd_http_response *resp, const char *error, void *arg);

/* NULL when out of memory. */
funcd_http_peer *funcd_http_peer_new(struct event_base *loop, const char *socket_path);
/* The server is gone or going: idle connections are closed and none is
 * kept from now on (calls in flight finish). */
void funcd_http_peer_close(funcd_http_peer *p);
/* Closes the peer and drops the owner's reference (calls in flight keep
 * theirs). NULL is fine. */
void funcd_http_peer_free(funcd_http_peer *p);
/* Idle connections kept now. */
unsigned funcd_http_peer_idle(const funcd_http_peer *p);

/* Sends `head` (copied) and `body` (referenced: it must outlive the call)
 * and reads the answer (a body of at most `max_body` bytes). NULL with
 * errno set when no connection could be made (the server cannot have
 * taken the request). */
funcd_http_call *funcd_http_send(funcd_http_peer *p, const char *head, size_t head_len,
                                 const void *body, size_t body_len, size_t max_body,
                                 funcd_http_done_fn done, void *arg);
/* Whether the call went out on a connection kept idle from an earlier one
 * (a NOT_TAKEN there says little against the server; on a fresh one it
 * says the server is going). */
int funcd_http_call_reused(const funcd_http_call *c);
/* Abandons a call: its connection is closed and `done` never runs. */
void funcd_http_cancel(funcd_http_call *c);

#endif
