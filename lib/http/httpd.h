/*
 * An h2o (evloop) HTTP server on its own threads: one listening socket that
 * every thread accepts from, one h2o_context_t per thread. Shared by
 * the control plane (one thread) and the data-plane gateway (several).
 *
 * Threads: funcd_httpd_new/start/stop/free are called from one owner thread;
 * hooks run on the server's threads.
 */
#ifndef FUNCD_HTTP_HTTPD_H
#define FUNCD_HTTP_HTTPD_H

#include <h2o.h>

#include "util/buf.h"

typedef struct funcd_httpd funcd_httpd;

/* The head of a connection's first request, as on_head sees it (raw: the
 * target is not decoded; values point into the connection's buffer). */
typedef struct funcd_httpd_head {
    const char *method;
    size_t method_len;
    const char *target; /* path and query, as sent */
    size_t target_len;
    const char *authorization; /* the header's value, or NULL */
    size_t authorization_len;
    int has_body; /* Content-Length > 0 or Transfer-Encoding */
    uint64_t content_length; /* UINT64_MAX: none given (chunked, or no body) */
    int chunked;
    /* on_each_head, a chunked head: where the hook may put a cap on the
     * body (0: none, NULL: not offered). Once what came of the body passes
     * it, the hook is called again for the answer, with method, target
     * and content_length (the bytes so far) and body_cap NULL; what it
     * answers is sent (no handler has seen the request), 0 lets the body
     * be read on. */
    uint64_t *body_cap;
} funcd_httpd_head;

typedef struct funcd_httpd_hooks {
    /* Handles a request (h2o on_req contract: 0 when handled). */
    int (*on_req)(void *payload, h2o_req_t *req);
    /* Per-thread start, before serving (register receivers on ctx->queue). */
    void (*on_thread_init)(void *payload, h2o_context_t *ctx);
    /* Per-thread stop: listeners are closed; end long-lived responses. */
    void (*on_thread_stopping)(void *payload, h2o_context_t *ctx);
    /* Per-thread exit, after connections drained, before the context goes. */
    void (*on_thread_exit)(void *payload, h2o_context_t *ctx);
    void *payload;
    /* Optional, on the server's threads: the head of a connection's first
     * request that carries a body, before any of it is read. 0 lets it be
     * read; else the HTTP status to answer at once with `body` (JSON) and
     * close. With this hook the server speaks HTTP/1.1 only (h2o reads
     * an HTTP/2 request's body before any hook could look): an HTTP/2
     * preface gets GOAWAY HTTP_1_1_REQUIRED, `Upgrade: h2c` is ignored.
     * Later requests on a connection are not shown: the handler decides
     * (req->http1_is_persistent = 0) whether a connection may carry
     * another. */
    int (*on_head)(void *payload, const funcd_httpd_head *head, funcd_buf *body);
    /* Optional, on the server's threads, while funcd_httpd_check_heads is
     * on: like on_head, for the head of every HTTP/1.1 request with a body
     * (keep-alive ones too), and HTTP/2 stays on (its connections are not
     * shown). Best effort: a head h2o has already taken (a pipelined
     * request, or one right after an answer that a timer finished) is not
     * shown, so on_req must check again. Costs a second parse of each
     * request head and a timer per request while on. */
    int (*on_each_head)(void *payload, const funcd_httpd_head *head, funcd_buf *body);
} funcd_httpd_hooks;

/* Binds `addr` for `nthreads` threads; writes the bound address to `bound`.
 * `max_body` bounds request bodies (h2o answers 413 beyond it). */
int funcd_httpd_new(funcd_httpd **out, const char *addr, unsigned nthreads, size_t max_body,
                    const funcd_httpd_hooks *hooks, char *bound, size_t bound_len);
/* Connections open at once on this listener (all threads); beyond it new
 * ones wait in the kernel's listen backlog. Call before start; 0: the
 * default. */
#define FUNCD_HTTPD_MAX_CONNECTIONS_DEFAULT 1024u
void funcd_httpd_set_max_connections(funcd_httpd *s, unsigned n);
/* The Server header of this listener's answers: "funcd" unless changed.
 * NULL: none of its own (a proxy's answers then carry their upstream's,
 * if any). Call before start. */
void funcd_httpd_set_server_name(funcd_httpd *s, const char *name);
/* Serves TLS with `tls` (a reference is taken; NULL: plain TCP). Call
 * before start. Its ALPN list decides HTTP/2: a server with on_head must
 * offer only http/1.1 (a client that speaks HTTP/2 anyway gets the same
 * GOAWAY as over TCP). */
void funcd_httpd_set_tls(funcd_httpd *s, SSL_CTX *tls);
/* Names this listener's threads "NAME/0", "NAME/1"... (at most 11 bytes of
 * NAME; for top -H, perf and /proc) and, when `batch`, runs them under
 * SCHED_BATCH: a thread woken by a socket then does not preempt the task
 * on its CPU (a worker, a client), and takes what arrived in one batch
 * when that task yields (docs/adr/0061). Call before start. */
void funcd_httpd_set_threads(funcd_httpd *s, const char *name, int batch);
int funcd_httpd_start(funcd_httpd *s);
/* Turns on_each_head on or off for connections from now on; any thread. */
void funcd_httpd_check_heads(funcd_httpd *s, int on);
/* Stops accepting, lets hooks end streams, drains connections (bounded
 * wait), and joins the threads. Idempotent. */
/* Stops accepting new connections and asks open ones to close after their
 * current requests; returns at once. stop() still ends everything. */
void funcd_httpd_quiesce(funcd_httpd *s);
void funcd_httpd_stop(funcd_httpd *s);
void funcd_httpd_free(funcd_httpd *s);

/* Helpers for handlers. */
void funcd_httpd_send(h2o_req_t *req, int status, const char *content_type, const char *body,
                      size_t len);
h2o_iovec_t funcd_httpd_header(h2o_req_t *req, const h2o_token_t *token);
const char *funcd_httpd_reason(int status);

#endif
