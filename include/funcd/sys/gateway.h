/*
 * funcd backend SPI — the gateway port.
 *
 * The gateway serves the data plane: `/fn/{namespace}/{name}/{rest}` is routed
 * to one of the function's workers. The platform tells it which functions
 * exist (`set_route`, `remove_route`); for each request the gateway takes a
 * slot on one of the function's workers with the slot functions below (which
 * start workers from zero when none is ready), speaks HTTP/1.1 to the
 * worker's Unix socket (docs/worker-contract.md), and gives the slot back.
 *
 * Writing a driver: embed `funcd_gateway` first, fill `version` with
 * FUNCD_GATEWAY_VERSION (FUNCD_GATEWAY_INIT), `name` and the methods.
 * Versions: funcd_platform_new takes a driver of any version from 1 to
 * FUNCD_GATEWAY_VERSION (else FUNCD_EVERSION) and refuses one that lacks a
 * slot marked required for its version (FUNCD_EINVAL). Slots are only
 * appended, under a "version N" line; an optional slot, or one appended
 * after the driver's version, is called only when the driver's version has it
 * and it is set (docs/backends.md). Structures the platform hands a driver
 * (funcd_route) keep their layout across versions, so an older driver reads
 * them right. Version 3 added the slot functions below and made the route's
 * last field the function's `funcd_fn_target` (it was `struct funcd_pool *`,
 * which no driver outside libfuncd could use); `endpoints`, never filled,
 * is now a reserved word that is always NULL. Version 4 appended the route's
 * `edge` (what the edge does in front of the function, docs/edge.md); the
 * platform gives a driver older than 4 no route to a function whose edge
 * asks for authentication (it answers 503), so that such a function is
 * never served open by a gateway that cannot check tokens.
 *
 * Ownership: funcd_with_gateway transfers the backend to the platform, which
 * calls `listen` during funcd_platform_new, `start` from funcd_platform_run,
 * `stop` and `free` at shutdown. Routes are copied by `set_route`; the target
 * in a route is borrowed for the call (take a reference to keep it).
 *
 * Threads: set_route and remove_route may be called from any thread while
 * the gateway serves; listen/start/stop/free are called from one thread. The
 * slot functions may be called from any thread (see each for its callbacks).
 */
#ifndef FUNCD_SYS_GATEWAY_H
#define FUNCD_SYS_GATEWAY_H

#include "funcd/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FUNCD_GATEWAY_VERSION 4

typedef struct funcd_gateway funcd_gateway;

struct sockaddr_un; /* <sys/un.h> */

/** A function's workers (one version of the function): what the gateway
 *  takes slots from. Opaque; reference-counted. */
typedef struct funcd_fn_target funcd_fn_target;

/** One request's place on one worker, from acquire to release. Opaque. */
typedef struct funcd_slot funcd_slot;

/** What a function's spec.edge asks for (docs/edge.md). */
typedef enum funcd_edge_auth {
    FUNCD_EDGE_AUTH_OPEN = 0,          /**< no token needed */
    FUNCD_EDGE_AUTH_AUTHENTICATED = 1, /**< a control-plane token that may invoke in the namespace */
} funcd_edge_auth;

/** One header to set on every answer (spec.edge.headers.set). */
typedef struct funcd_edge_header {
    const char *name;
    const char *value;
} funcd_edge_header;

/**
 * Checks an `Authorization` header value for invoking a function of
 * namespace `ns`. Returns 0 when allowed (the token's name, for
 * X-Funcd-Subject, is copied to `subject`), 401 when there is no bearer
 * token or it is unknown, 403 when the token may not invoke in `ns`; a
 * sentence for the caller goes to `message` either way. Any thread, without
 * blocking.
 */
typedef int (*funcd_edge_authorize_fn)(void *payload, const char *ns, const char *authorization,
                                       size_t authorization_len, char *subject,
                                       size_t subject_len, char *message, size_t message_len);

/**
 * The effective edge of one function: the daemon's defaults (funcd_with_edge_*)
 * with the function's spec.edge over them. Every limit uses 0 for "off".
 * Lists are arrays of `n_*` items; strings are NUL-terminated. The
 * platform keeps it valid for the set_route call; a driver copies what it
 * keeps (the embedded gateway uses funcd_edge_dup).
 */
typedef struct funcd_edge {
    funcd_edge_auth auth;
    /* limits (0: off) */
    uint32_t rps;            /**< requests per second per function (per client address when
                                  limit_per_client), a token bucket; over it: 429 + Retry-After */
    uint32_t burst;          /**< the bucket's size; 0 with rps set means rps (one second's) */
    uint64_t max_body_bytes; /**< larger request bodies: 413 */
    uint32_t max_in_flight;  /**< requests of the function at once; more: 503 + Retry-After */
    int limit_per_client;    /**< rps/burst count per client address (bounded table) */
    /* cors (has_cors 0: none configured) */
    int has_cors;
    const char *const *cors_allow_origins;
    size_t n_cors_allow_origins;
    const char *const *cors_allow_methods;
    size_t n_cors_allow_methods;
    const char *const *cors_allow_headers;
    size_t n_cors_allow_headers;
    uint32_t cors_max_age; /**< seconds; 0: not sent */
    /* response headers */
    const funcd_edge_header *headers_set;
    size_t n_headers_set;
    const char *const *headers_remove;
    size_t n_headers_remove;
    int compress; /**< gzip answers when the client accepts it (docs/edge.md) */
    /** Checks tokens for FUNCD_EDGE_AUTH_AUTHENTICATED; NULL when the
     *  platform has none (such a function must then be refused, never
     *  served open). */
    funcd_edge_authorize_fn authorize;
    void *authorize_payload;
} funcd_edge;

/** A copy of `edge` in one allocation (free with funcd_edge_free), or
 *  NULL when out of memory. */
FUNCD_EXTERN funcd_edge *funcd_edge_dup(const funcd_edge *edge);
FUNCD_EXTERN void funcd_edge_free(funcd_edge *edge);

/** Where a function's requests go. */
typedef struct funcd_route {
    const char *namespace_;
    const char *name;
    const void *reserved_;   /**< always NULL (the place of versions 1-2's unfilled
                                  `endpoints`, kept so that their drivers read the rest) */
    uint64_t timeout_ms;     /**< per-request timeout; 0: the gateway's default */
    funcd_fn_target *target; /**< the function's workers; NULL while the function cannot run
                                  (answer 503). Borrowed: funcd_fn_target_ref to keep it */
    /* ---- version 4 ---- */
    const funcd_edge *edge;  /**< never NULL from the platform; borrowed for the call */
} funcd_route;

struct funcd_gateway {
    unsigned version;
    const char *name;

    /* ---- version 1: every slot required ---- */

    /** Binds `addr` ("host:port", port 0: ephemeral); writes the bound
     *  address to `bound`. FUNCD_EBIND on failure. */
    int (*listen)(funcd_gateway *gw, const char *addr, char *bound, size_t bound_len);

    /** Starts serving (on the gateway's own threads); returns at once. */
    int (*start)(funcd_gateway *gw);

    /** Adds or replaces the route of one function. */
    int (*set_route)(funcd_gateway *gw, const funcd_route *route);

    /** Removes a function's route; FUNCD_ENOTFOUND if there was none. */
    int (*remove_route)(funcd_gateway *gw, const char *namespace_, const char *name);

    /** Stops serving and joins the gateway's threads; idempotent. */
    int (*stop)(funcd_gateway *gw);

    void (*free)(funcd_gateway *gw);

    /* ---- version 2: optional ---- */

    /** Stops accepting connections; requests in flight go on until stop.
     *  Returns at once. Optional (NULL: stop does it all). */
    int (*quiesce)(funcd_gateway *gw);
};

#define FUNCD_GATEWAY_INIT {FUNCD_GATEWAY_VERSION}

/** The embedded h2o gateway serving on `threads` threads (0: one per CPU
 *  this process may run on, by its affinity mask and cgroup CPU quota, at
 *  most 4; FUNCD_GATEWAY_THREADS=N in the environment overrides 0). */
FUNCD_EXTERN int funcd_gateway_embedded_new(funcd_gateway **out, unsigned threads);

/* ---- slots: what a gateway does per request ------------------------------
 *
 *   acquire ──GRANTED──────────────────────────┐
 *      └──QUEUED── granted(waiter, slot) ──────┤ (or granted(waiter, NULL, why))
 *                                              v
 *   connect to funcd_slot_sockaddr, begin, exchange, end, release(OK|FAILED)
 *
 * A slot is one of a worker's `concurrency` places (spec.scaling); while it
 * is held the worker is not stopped for idleness and its socket address and
 * end stay valid. Every slot obtained (at once or by a grant) is released
 * exactly once.
 */

/** Keeps `target` (from a route) beyond the call that passed it. Any thread. */
FUNCD_EXTERN void funcd_fn_target_ref(funcd_fn_target *target);
/** Drops a reference. Slots held stay valid until released. Any thread. */
FUNCD_EXTERN void funcd_fn_target_unref(funcd_fn_target *target);

typedef struct funcd_slot_waiter funcd_slot_waiter;

/**
 * A queued request's slot arrived (`slot` is held: release it), or no
 * worker could give one (`slot` NULL; `error` says why: the function failed
 * to start, or it was updated or deleted meanwhile). Called exactly once per
 * QUEUED acquire unless funcd_slot_cancel returned 1, on whichever thread
 * freed the slot (another request's release, the platform loop when a worker
 * became ready). Do not block in it: hand the slot to the request's own
 * thread. It may call the slot functions.
 */
typedef void (*funcd_slot_granted_fn)(funcd_slot_waiter *waiter, funcd_slot *slot,
                                      const char *error);

/** The start of a grant's `error` when no worker may be started because the
 *  node or the function's namespace has as many workers as its limit allows
 *  (funcd --max-workers, --namespace-max-workers); the rest names the limit
 *  and its flag, never a count, so it may be told to any caller (the counts
 *  are in the Function's status). Answer 503 with Retry-After: a place comes
 *  back when a worker exits. */
#define FUNCD_SLOT_ERROR_WORKER_LIMIT "worker limit reached: "

/** A request waiting for a slot; the caller's memory. It must stay valid and
 *  untouched (but for `payload`) from a QUEUED acquire until `granted` has
 *  returned or funcd_slot_cancel returned 1. */
struct funcd_slot_waiter {
    funcd_slot_granted_fn granted; /**< set before acquire */
    void *payload;                 /**< the caller's */
    void *reserved_[6];            /**< the platform's queue link */
};

/** What funcd_slot_acquire did (never a FUNCD_E* code: those are negative). */
typedef enum funcd_slot_acquired {
    FUNCD_SLOT_GRANTED = 0,    /**< `*out` holds a slot on a ready worker */
    FUNCD_SLOT_QUEUED = 1,     /**< every worker is busy or none runs yet (a cold start): the
                                    waiter is queued, workers are started as needed, and
                                    `granted` will be called; bound the wait yourself (the
                                    route's timeout) and funcd_slot_cancel when it passes */
    FUNCD_SLOT_QUEUE_FULL = 2, /**< every worker busy and spec.scaling.queueLength requests
                                    already wait: answer 503 with Retry-After */
    FUNCD_SLOT_CLOSED = 3,     /**< this version of the function was updated or deleted:
                                    answer 503; the route has (or will have) a new target */
} funcd_slot_acquired;

/**
 * Takes a slot on the least-loaded ready worker of `target`, or queues
 * `waiter`. Any thread; never blocks. Returns a funcd_slot_acquired value, or
 * FUNCD_EINVAL when an argument is NULL or the waiter has no callback.
 */
FUNCD_EXTERN int funcd_slot_acquire(funcd_fn_target *target, funcd_slot_waiter *waiter,
                                    funcd_slot **out);

/**
 * Withdraws a QUEUED waiter (the request timed out, or its client left).
 * Returns 1 when it was still queued: `granted` will not be called. Returns
 * 0 when a grant is already on its way (or was delivered): `granted` runs
 * (or ran), and the slot it carries, if any, must still be released. Any
 * thread.
 */
FUNCD_EXTERN int funcd_slot_cancel(funcd_fn_target *target, funcd_slot_waiter *waiter);

/** How the exchange with the worker ended. */
typedef enum funcd_slot_outcome {
    FUNCD_SLOT_OK = 0,     /**< the worker answered, or the request ended for another reason
                                (timeout, client gone): the worker stays */
    FUNCD_SLOT_FAILED = 1, /**< the worker could not be reached or broke the exchange: it is
                                taken out of service, stopped, and replaced as demand asks */
} funcd_slot_outcome;

/** Gives the slot back; `slot` is invalid afterwards. Any thread. The
 *  release may grant the slot to a waiter at once, on this thread. */
FUNCD_EXTERN void funcd_slot_release(funcd_slot *slot, funcd_slot_outcome outcome);

/** The worker's socket (AF_UNIX, HTTP/1.1 with keep-alive), valid while the
 *  slot is held. */
FUNCD_EXTERN const struct sockaddr_un *funcd_slot_sockaddr(const funcd_slot *slot);

/** The same as "unix:/path", valid while the slot is held. */
FUNCD_EXTERN const char *funcd_slot_endpoint(const funcd_slot *slot);

/** The worker's id, unique for the life of the process (never reused): the
 *  key of connections a gateway keeps open to a worker across requests. */
FUNCD_EXTERN uint64_t funcd_slot_worker_id(const funcd_slot *slot);

/**
 * The request `invocation_id` (the X-Funcd-Invocation-Id sent to the worker)
 * is now on the worker: lines the worker writes while it is its only
 * request are logged with that id. Pair with one funcd_slot_end before the
 * release. Both are optional; any thread.
 */
FUNCD_EXTERN void funcd_slot_begin(funcd_slot *slot, const char *invocation_id);
FUNCD_EXTERN void funcd_slot_end(funcd_slot *slot);

/** Whether the slot's worker process is still there. */
typedef enum funcd_slot_worker_state {
    FUNCD_SLOT_WORKER_RUNNING = 0,
    FUNCD_SLOT_WORKER_EXITED = 1,     /**< it exited or was killed by a signal */
    FUNCD_SLOT_WORKER_OOM_KILLED = 2, /**< the kernel killed it at its memory limit */
} funcd_slot_worker_state;

/**
 * Whether the worker has ended, and how: when it has, a sentence for the
 * caller of a request it took ("replica hello-3 exited with status 3",
 * "... was killed by signal 9 (SIGKILL)"; never its output nor a host path)
 * is copied to `message` (when not NULL). A gateway whose exchange broke asks
 * this (a worker's end is known a little after its socket closes; wait up to
 * about a second) before answering 502, and releases the slot FAILED. Any
 * thread, while the slot is held.
 */
FUNCD_EXTERN funcd_slot_worker_state funcd_slot_worker_end(const funcd_slot *slot, char *message,
                                                           size_t message_len);

#ifdef __cplusplus
}
#endif
#endif
