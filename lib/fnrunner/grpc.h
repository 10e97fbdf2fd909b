/*
 * A unary gRPC server: HTTP/2 cleartext with prior knowledge (h2c, as gRPC
 * clients speak it) or over TLS (cfg->tls), libnghttp2's session API on the
 * platform loop.
 *
 * The server handles the transport and the gRPC envelope: the 5-byte message
 * framing, grpc-timeout deadlines, trailers, grpc.health.v1.Health/Check,
 * and the status codes for malformed calls. Everything else goes to one
 * handler with the call's :path and its single request message.
 *
 * A call has two owners: the stream (until HTTP/2 is done with it) and the
 * handler (from the handler's invocation until funcd_grpc_reply). It is freed
 * when both have let go. A client RST_STREAM, a lost connection, a passed
 * deadline or funcd_grpc_server_free cancel a call: the handler still calls
 * funcd_grpc_reply, which then only frees it.
 *
 * Threads: everything runs on the loop's thread, except that
 * funcd_grpc_server_new and funcd_grpc_server_free may also run while the
 * loop is not running. Not for use from inside the handler:
 * funcd_grpc_server_free.
 */
#ifndef FUNCD_FNRUNNER_GRPC_H
#define FUNCD_FNRUNNER_GRPC_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"
#include "util/log.h"

struct event_base;
struct bufferevent;
struct funcd_auth;

/* gRPC status codes the platform uses. */
enum funcd_grpc_status {
    FUNCD_GRPC_OK = 0,
    FUNCD_GRPC_CANCELLED = 1,
    FUNCD_GRPC_UNKNOWN = 2,
    FUNCD_GRPC_INVALID_ARGUMENT = 3,
    FUNCD_GRPC_DEADLINE_EXCEEDED = 4,
    FUNCD_GRPC_NOT_FOUND = 5,
    FUNCD_GRPC_RESOURCE_EXHAUSTED = 8,
    FUNCD_GRPC_UNIMPLEMENTED = 12,
    FUNCD_GRPC_INTERNAL = 13,
    FUNCD_GRPC_UNAVAILABLE = 14,
    FUNCD_GRPC_UNAUTHENTICATED = 16,
};

#define FUNCD_GRPC_DEFAULT_MAX_MESSAGE ((size_t)6 << 20)
#define FUNCD_GRPC_DEFAULT_MAX_CONNS 1024u
#define FUNCD_GRPC_DEFAULT_IDLE_MS (300u * 1000)
#define FUNCD_GRPC_HEALTH_CHECK_PATH "/grpc.health.v1.Health/Check"

typedef struct funcd_grpc_server funcd_grpc_server;
typedef struct funcd_grpc_call funcd_grpc_call; /* one unary call */

/* Called on the platform loop when a unary request message is complete.
 * `path` is ":path", e.g. "/evaluator.FunctionEvaluator/EvaluateFunction";
 * `path` and `msg` stay valid until funcd_grpc_reply (the call owns them). The handler must
 * eventually call funcd_grpc_reply exactly once (may be later, from the loop
 * thread), unless funcd_grpc_call_cancelled says the call went away (then
 * reply is a no-op that frees the call). Paths the handler does not serve
 * get FUNCD_GRPC_UNIMPLEMENTED from it. */
typedef void (*funcd_grpc_handler)(funcd_grpc_call *call, const char *path, const uint8_t *msg,
                                   size_t len, void *payload);

typedef struct funcd_grpc_config {
    struct event_base *loop;
    size_t max_message;         /* 0: FUNCD_GRPC_DEFAULT_MAX_MESSAGE (receive and send) */
    funcd_grpc_handler handler; /* every path except grpc.health.v1.Health/Check; NULL: none */
    void *payload;
    const funcd_logger *logger;
    /* Set: every call but the health check needs `authorization: Bearer T`
     * with a token of it, else UNAUTHENTICATED. Borrowed. NULL: none. */
    const struct funcd_auth *auth;
    /* Set: TCP connections speak TLS with it (offer ALPN h2 in it);
     * borrowed, used while the server lives. A Unix socket stays plain
     * (its mode guards it). NULL: h2c. */
    struct ssl_ctx_st *tls;
    /* Connections open at once on the listener; beyond, new ones wait in
     * the listen backlog. 0: FUNCD_GRPC_DEFAULT_MAX_CONNS. */
    unsigned max_conns;
    /* A connection with no call in flight that sends nothing for this long
     * is closed (clients connect again). 0: FUNCD_GRPC_DEFAULT_IDLE_MS. */
    unsigned idle_ms;
} funcd_grpc_config;

/* Listens on `addr`: "host:port" (port 0: ephemeral), or "unix:/path" (a
 * Unix socket of mode 0600; a stale socket there is replaced, anything
 * else is refused; removed again by funcd_grpc_server_free). */

/* Writes the bound address ("host:port" or "unix:/path") into `bound`. `addr` NULL: no listener (connections come only
 * through funcd_grpc_server_adopt). Fails with FUNCD_EBIND / FUNCD_EINVAL. */
int funcd_grpc_server_new(funcd_grpc_server **out, const funcd_grpc_config *cfg, const char *addr,
                          char *bound, size_t bound_len);
/* Sends GOAWAY on every connection (best effort), closes them and cancels
 * their pending calls. NULL is fine. */
void funcd_grpc_server_free(funcd_grpc_server *s);

/* Serves one HTTP/2 connection over `bev` (taking ownership), for tests and
 * fuzzing through in-memory bufferevent pairs. A pair must be made with
 * BEV_OPT_DEFER_CALLBACKS: the server's callbacks do not expect to run
 * inside its own writes. */
int funcd_grpc_server_adopt(funcd_grpc_server *s, struct bufferevent *bev);
/* Open connections (for tests). */
unsigned funcd_grpc_server_connections(const funcd_grpc_server *s);

/* status: gRPC code (0 OK, 3 INVALID_ARGUMENT, 4 DEADLINE_EXCEEDED, 5 NOT_FOUND,
 * 8 RESOURCE_EXHAUSTED, 12 UNIMPLEMENTED, 13 INTERNAL, 14 UNAVAILABLE);
 * `message`: grpc-message (NULL: none), sent percent-encoded;
 * msg/len: the response message (OK only; copied). A response over
 * max_message becomes RESOURCE_EXHAUSTED. Frees `call` when the stream is
 * done with it. */
void funcd_grpc_reply(funcd_grpc_call *call, int status, const char *message, const uint8_t *msg,
                      size_t len);
int funcd_grpc_call_cancelled(const funcd_grpc_call *call);
/* The deadline from grpc-timeout as a monotonic ms time (funcd_mono_ms), or 0 if none. */
int64_t funcd_grpc_call_deadline_ms(const funcd_grpc_call *call);

/* ---- the pure parts (grpc_frame.c), also for the fuzz targets ---------- */

/* Incremental decoder of gRPC's length-prefixed messages: a flag byte
 * (bit 0: compressed), a 4-byte big-endian length, the message. */
typedef struct funcd_grpc_frame {
    size_t max;      /* largest message accepted */
    uint8_t hdr[5];  /* the prefix, while incomplete */
    size_t hdr_len;  /* bytes of hdr filled */
    size_t want;     /* length of the current message, once hdr is complete */
    funcd_buf msg;   /* the current message's bytes so far */
    unsigned count;  /* messages completed */
    int error;       /* the final error, once one happened */
} funcd_grpc_frame;

typedef enum funcd_grpc_frame_result {
    FUNCD_GRPC_FRAME_MORE = 0,        /* every input byte taken; no message complete */
    FUNCD_GRPC_FRAME_MESSAGE = 1,     /* f->msg holds a whole message */
    FUNCD_GRPC_FRAME_COMPRESSED = -1, /* compressed flag set: UNIMPLEMENTED */
    FUNCD_GRPC_FRAME_TOO_LARGE = -2,  /* declared length > max: RESOURCE_EXHAUSTED */
    FUNCD_GRPC_FRAME_NOMEM = -3,
    FUNCD_GRPC_FRAME_BAD_FLAG = -4,   /* flag bits other than bit 0: INTERNAL */
} funcd_grpc_frame_result;

void funcd_grpc_frame_init(funcd_grpc_frame *f, size_t max);
/* Takes bytes from in[0..len) and stores how many in *used; stops after a
 * complete message (FUNCD_GRPC_FRAME_MESSAGE: read f->msg, then call
 * funcd_grpc_frame_next before decoding more). Errors are final and leave
 * *used at the offending prefix's end. An over-long length is refused from
 * the prefix alone, before any of the message arrives. */
int funcd_grpc_frame_decode(funcd_grpc_frame *f, const uint8_t *in, size_t len, size_t *used);
/* Drops the completed message and gets ready for the next one. */
void funcd_grpc_frame_next(funcd_grpc_frame *f);
/* Nonzero when input stopped in the middle of a message. */
int funcd_grpc_frame_partial(const funcd_grpc_frame *f);
void funcd_grpc_frame_free(funcd_grpc_frame *f);

/* Appends the 5-byte prefix (uncompressed) and msg to out. */
int funcd_grpc_frame_encode(funcd_buf *out, const uint8_t *msg, size_t len);

/* grpc-timeout ("1-8 digits" + H|M|S|m|u|n) in ms, rounded up; -1 if malformed. */
int64_t funcd_grpc_parse_timeout(const char *value, size_t len);
/* grpc-message encoding: bytes outside 0x20..0x7e and '%' as %XX. Stops
 * before the output would pass `limit` bytes, at a UTF-8 boundary. */
int funcd_grpc_percent_encode(funcd_buf *out, const char *msg, size_t limit);

/* grpc.health.v1 by hand (the messages have one field each): the service
 * name from a HealthCheckRequest (0 or -1 if malformed) and a
 * HealthCheckResponse with `status` (1 SERVING), into out[0..2]. */
int funcd_grpc_health_request_service(const uint8_t *msg, size_t len, const uint8_t **service,
                                      size_t *service_len);
size_t funcd_grpc_health_response(uint8_t out[2], int status);

#endif
