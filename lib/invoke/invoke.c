/*
 * Internal invocations (invoke.h): the gateway's path without the gateway.
 *
 *   route ─ funcd_serving_route: the function's current target (404, 503)
 *   slot  ─ funcd_slot_acquire: GRANTED at once, or QUEUED (a cold start, or
 *           every worker busy): the grant comes on any thread and is handed
 *           to the loop; the wait is bounded by the invocation's deadline
 *   send  ─ lib/http/client.h on the worker's socket, one peer per worker
 *           id so connections are reused across invocations
 *   end   ─ the slot released OK (answered, timed out) or FAILED (the worker
 *           broke), exactly as lib/gateway/proxy.c decides
 *
 * Retries follow the gateway (docs/adr/0021-first-request.md): a worker
 * that cannot be connected to is evicted and another tried (at most three
 * attempts); a request refused or reset before any byte of an answer is
 * tried once more on a ready worker (the worker is evicted when that
 * connection was fresh); a worker that closed after taking the request is
 * not given it twice: the caller gets 502 with how the worker ended.
 *
 * One deadline (req.timeout_ms, else the function's spec.timeout) covers
 * the whole invocation, waiting for a worker included: the gateway restarts
 * its timer per read, a caller here wants one bound.
 */
#include "invoke/invoke.h"

#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/un.h>

#include "funcd/sys/error.h"
#include "funcd/sys/gateway.h"
#include "http/client.h"
#include "serving/serving.h"
#include "util/buf.h"
#include "util/misc.h"

#define MAX_CONNECT_ATTEMPTS 3
#define EXIT_POLL_MS 10 /* a broken exchange looks this often whether its worker ended */
#define EXIT_POLLS 100  /* and this many times (1 s) before it answers without knowing why */
#define DEFAULT_MAX_RESPONSE (1024 * 1024)
#define DEFAULT_TIMEOUT_MS 30000
#define MAX_ID 128

typedef struct peer_entry {
    uint64_t worker_id;
    funcd_http_peer *peer;
    unsigned users; /* calls using it now */
    struct peer_entry *next;
} peer_entry;

typedef struct call call;

struct funcd_invoker {
    struct event_base *loop;
    funcd_serving *serving;
    const funcd_logger *logger;
    pthread_mutex_t lock; /* `granted`: grants arrive on any thread */
    call *granted;
    struct event *grant_ev;
    call *calls; /* every call not freed yet */
    unsigned busy; /* calls whose `done` has not run */
    peer_entry *peers;
    uint64_t rng[2];
    int closing;
};

struct call {
    funcd_invoker *inv;
    call *prev, *next; /* inv->calls */
    call *gnext;       /* inv->granted, under the lock */
    funcd_invoke_done_fn done;
    void *arg;
    funcd_fn_target *target; /* a reference */
    uint64_t timeout_ms;
    /* waiting for a slot */
    funcd_slot_waiter waiter;
    int queued;          /* acquire said QUEUED and no grant was taken yet */
    int orphan;          /* done ran while a grant was still on its way: free it then */
    funcd_slot *granted_slot;  /* under the lock until taken */
    char grant_error[256];
    /* the exchange */
    funcd_slot *slot;
    unsigned hops; /* funcd_invoke_req.hops */
    int began;
    peer_entry *peer;
    funcd_http_call *http;
    int attempts, retried;
    unsigned exit_polls;
    char why[160];
    /* what is sent */
    funcd_buf head;
    const void *body;
    size_t body_len;
    size_t max_response;
    /* the result */
    int finished; /* the result is set; `done` runs on the next turn */
    int status;
    char *error;
    funcd_buf answer;
    char *content_type;
    int truncated;
    struct event *deadline; /* the invocation's timeout */
    struct event *later;    /* exit polls, and running `done` off the caller's stack */
    char id[MAX_ID];
    char name[2 * 254 + 2]; /* ns/name, for messages */
};

/* ---- small helpers ---------------------------------------------------- */

static uint64_t next_random(funcd_invoker *inv)
{
    uint64_t s1 = inv->rng[0];
    const uint64_t s0 = inv->rng[1];
    inv->rng[0] = s0;
    s1 ^= s1 << 23;
    inv->rng[1] = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
    return inv->rng[1] + s0;
}

static void hex_random(funcd_invoker *inv, char *out, size_t digits)
{
    static const char hex[] = "0123456789abcdef";
    uint64_t w = 0;
    for (size_t i = 0; i < digits; i++) {
        if (i % 16 == 0)
            w = next_random(inv);
        out[i] = hex[w & 15];
        w >>= 4;
    }
    out[digits] = '\0';
}

/* Printable ASCII, no space or separator that would end a header value or
 * a request target early. */
static int clean(const char *s, int allow_space)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 + !allow_space || (unsigned char)*s >= 0x7f)
            return 0;
    return 1;
}

static int token(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!strchr("!#$%&'*+-.^_`|~", *s) && !((*s >= '0' && *s <= '9') ||
                                                ((*s | 0x20) >= 'a' && (*s | 0x20) <= 'z')))
            return 0;
    return 1;
}

static int hop_by_hop(const char *name)
{
    static const char *const hop[] = {"connection", "keep-alive", "proxy-connection", "te",
                                      "trailer", "transfer-encoding", "upgrade", "content-length",
                                      "host", "x-funcd-invocation-id", "traceparent",
                                      "tracestate", NULL};
    for (const char *const *h = hop; *h; h++)
        if (strcasecmp(name, *h) == 0)
            return 1;
    return 0;
}

/* ---- peers: one per worker, kept while it has idle connections ---------- */

static peer_entry *peer_for(funcd_invoker *inv, funcd_slot *slot)
{
    uint64_t id = funcd_slot_worker_id(slot);
    for (peer_entry *p = inv->peers; p; p = p->next)
        if (p->worker_id == id) {
            p->users++;
            return p;
        }
    peer_entry *p = calloc(1, sizeof(*p));
    if (!p || !(p->peer = funcd_http_peer_new(inv->loop, funcd_slot_sockaddr(slot)->sun_path))) {
        free(p);
        return NULL;
    }
    p->worker_id = id;
    p->users = 1;
    p->next = inv->peers;
    inv->peers = p;
    return p;
}

/* Peers nobody uses that keep no connection (their worker is gone: its
 * idle connections closed when it did) are dropped. */
static void peers_prune(funcd_invoker *inv)
{
    for (peer_entry **pp = &inv->peers; *pp;) {
        peer_entry *p = *pp;
        if (p->users == 0 && funcd_http_peer_idle(p->peer) == 0) {
            *pp = p->next;
            funcd_http_peer_free(p->peer);
            free(p);
        } else {
            pp = &p->next;
        }
    }
}

static void peer_put(call *c)
{
    if (c->peer)
        c->peer->users--;
    c->peer = NULL;
}

/* ---- ending ----------------------------------------------------------- */

static void release_slot(call *c, int failed)
{
    if (!c->slot)
        return;
    if (failed) { /* its worker is going: keep no connection to it */
        uint64_t id = funcd_slot_worker_id(c->slot);
        for (peer_entry *p = c->inv->peers; p; p = p->next)
            if (p->worker_id == id)
                funcd_http_peer_close(p->peer);
    }
    if (c->began)
        funcd_slot_end(c->slot);
    c->began = 0;
    funcd_slot_release(c->slot, failed ? FUNCD_SLOT_FAILED : FUNCD_SLOT_OK);
    c->slot = NULL;
}

static void call_free(call *c)
{
    funcd_invoker *inv = c->inv;
    if (c->prev)
        c->prev->next = c->next;
    else
        inv->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->http)
        funcd_http_cancel(c->http);
    peer_put(c);
    release_slot(c, 0);
    funcd_fn_target_unref(c->target);
    if (c->deadline)
        event_free(c->deadline);
    if (c->later)
        event_free(c->later);
    funcd_buf_free(&c->head);
    funcd_buf_free(&c->answer);
    free(c->error);
    free(c->content_type);
    free(c);
}

static void run_done(call *c)
{
    funcd_invoke_res res = {
        .status = c->status,
        .error = c->error,
        .body = c->answer.data ? c->answer.data : "",
        .body_len = c->answer.len,
        .content_type = c->content_type,
        .invocation_id = c->id,
        .truncated = c->truncated,
    };
    c->inv->busy--;
    c->done(&res, c->arg);
    if (c->queued)
        c->orphan = 1; /* a grant is still on its way: its slot must be given back */
    else
        call_free(c);
}

static void on_later(evutil_socket_t fd, short what, void *arg);

/* Sets the result (an `error` sentence, or NULL when the worker answered)
 * and runs `done` on the loop's next turn: never inside funcd_invoke. */
static void finish(call *c, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void finish(call *c, int status, const char *fmt, ...)
{
    if (c->finished)
        return;
    c->finished = 1;
    c->status = status;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        if (vasprintf(&c->error, fmt, ap) < 0)
            c->error = NULL;
        va_end(ap);
        if (!c->error)
            c->error = strdup("out of memory");
    }
    if (c->http) {
        funcd_http_cancel(c->http);
        c->http = NULL;
    }
    peer_put(c);
    event_del(c->deadline);
    event_del(c->later);
    event_active(c->later, EV_TIMEOUT, 0);
}

/* ---- the exchange ----------------------------------------------------- */

static void acquire(call *c);

/* Nothing was sent: the worker is gone (or going). Evict it, try another. */
static void connect_failed(call *c, const char *why)
{
    peer_put(c);
    release_slot(c, 1);
    if (c->attempts < MAX_CONNECT_ATTEMPTS)
        acquire(c);
    else
        finish(c, 502, "cannot reach a worker of function %s: %s", c->name, why);
}

static void fail_with_worker_end(call *c)
{
    char end[160];
    funcd_slot_worker_state ended = funcd_slot_worker_end(c->slot, end, sizeof(end));
    if (ended == FUNCD_SLOT_WORKER_RUNNING)
        snprintf(end, sizeof(end), "%s", c->why);
    release_slot(c, 1);
    if (ended == FUNCD_SLOT_WORKER_OOM_KILLED)
        finish(c, 502, "function %s ran out of memory while handling the request: %s", c->name,
               end);
    else
        finish(c, 502, "function %s failed while handling the request: %s", c->name, end);
}

/* The worker took the request and broke: its end is known a little after
 * its socket closed, so look for a while before saying why. */
static void broken(call *c, const char *why)
{
    snprintf(c->why, sizeof(c->why), "%s", why);
    peer_put(c);
    if (funcd_slot_worker_end(c->slot, NULL, 0) != FUNCD_SLOT_WORKER_RUNNING) {
        fail_with_worker_end(c);
        return;
    }
    c->exit_polls = 0;
    struct timeval tv = {0, EXIT_POLL_MS * 1000};
    event_add(c->later, &tv);
}

static void on_answer(funcd_http_call *hc, funcd_http_outcome outcome, funcd_http_response *resp,
                      const char *error, void *arg)
{
    call *c = arg;
    c->http = NULL;
    int reused = funcd_http_call_reused(hc);
    switch (outcome) {
    case FUNCD_HTTP_ANSWERED:
    case FUNCD_HTTP_TOO_LARGE: {
        const char *ct = funcd_http_response_header(resp, "content-type");
        c->content_type = ct ? strdup(ct) : NULL;
        funcd_buf_swap_in(&c->answer, &resp->body);
        c->truncated = outcome == FUNCD_HTTP_TOO_LARGE;
        peer_put(c);
        release_slot(c, 0);
        finish(c, resp->status, NULL);
        return;
    }
    case FUNCD_HTTP_NOT_TAKEN:
        if (!c->retried) {
            /* Refused or reset with the request unread: once more, on a ready
             * worker. A kept-alive connection the worker had closed says
             * nothing against it; a fresh one does: it is going. */
            c->retried = 1;
            peer_put(c);
            release_slot(c, !reused);
            acquire(c);
            return;
        }
        broken(c, error);
        return;
    case FUNCD_HTTP_BROKEN:
        broken(c, error);
        return;
    case FUNCD_HTTP_MALFORMED:
        broken(c, "its answer is not valid HTTP/1.1");
        return;
    }
}

static void start_exchange(call *c)
{
    if (!c->began) {
        funcd_slot_begin(c->slot, c->id);
        c->began = 1;
    }
    c->attempts++;
    char end[160];
    if (funcd_slot_worker_end(c->slot, end, sizeof(end)) != FUNCD_SLOT_WORKER_RUNNING) {
        connect_failed(c, end); /* gone, and the pool not told yet */
        return;
    }
    peers_prune(c->inv);
    if (!(c->peer = peer_for(c->inv, c->slot))) {
        release_slot(c, 0);
        finish(c, 503, "out of memory");
        return;
    }
    c->http = funcd_http_send(c->peer->peer, c->head.data, c->head.len, c->body, c->body_len,
                              c->max_response, on_answer, c);
    if (!c->http)
        connect_failed(c, strerror(errno));
}

/* ---- waiting for a slot ----------------------------------------------- */

/* Any thread: the pool granted a slot (or gave up). */
static void on_granted(funcd_slot_waiter *w, funcd_slot *slot, const char *error)
{
    call *c = w->payload;
    funcd_invoker *inv = c->inv;
    pthread_mutex_lock(&inv->lock);
    c->granted_slot = slot;
    if (!slot)
        snprintf(c->grant_error, sizeof(c->grant_error), "%s",
                 error ? error : "no worker could be started");
    c->gnext = inv->granted;
    inv->granted = c;
    pthread_mutex_unlock(&inv->lock);
    event_active(inv->grant_ev, EV_READ, 0);
}

static void take_grant(call *c)
{
    c->queued = 0;
    funcd_slot *slot = c->granted_slot;
    c->granted_slot = NULL;
    if (c->orphan) { /* it ended meanwhile: give the slot back */
        if (slot)
            funcd_slot_release(slot, FUNCD_SLOT_OK);
        call_free(c);
        return;
    }
    if (!slot) {
        /* Why is the operator's (host paths, cgroups): funcd's log. */
        funcd_log(c->inv->logger, FUNCD_LOG_WARN, "invocation %s of function %s: %s", c->id,
                  c->name, c->grant_error);
        finish(c, 502, "function %s: worker failed to start (see the function's logs and "
               "status, invocation %s)", c->name, c->id);
        return;
    }
    c->slot = slot;
    if (c->finished) { /* timed out while the grant travelled */
        release_slot(c, 0);
        return;
    }
    start_exchange(c);
}

/* The loop: deliver grants to their calls. */
static void on_grants(evutil_socket_t fd, short what, void *arg)
{
    funcd_invoker *inv = arg;
    pthread_mutex_lock(&inv->lock);
    call *list = inv->granted;
    inv->granted = NULL;
    pthread_mutex_unlock(&inv->lock);
    while (list) {
        call *c = list;
        list = c->gnext;
        take_grant(c);
    }
}

static void acquire(call *c)
{
    funcd_slot *slot = NULL;
    c->waiter.granted = on_granted;
    c->waiter.payload = c;
    int rc = funcd_slot_acquire(c->target, &c->waiter, &slot);
    switch (rc) {
    case FUNCD_SLOT_GRANTED:
        c->slot = slot;
        start_exchange(c);
        return;
    case FUNCD_SLOT_QUEUED:
        c->queued = 1;
        return;
    case FUNCD_SLOT_QUEUE_FULL:
        finish(c, 503, "function %s is at capacity (every worker busy and the wait queue "
               "full); retry later", c->name);
        return;
    default:
        finish(c, 503, "function %s is being updated or deleted; retry", c->name);
        return;
    }
}

/* ---- timers ----------------------------------------------------------- */

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    call *c = arg;
    if (c->queued && funcd_slot_cancel(c->target, &c->waiter)) {
        c->queued = 0;
        finish(c, 504, "function %s had no worker ready within %llu ms", c->name,
               (unsigned long long)c->timeout_ms);
        return;
    }
    if (c->queued) { /* the grant is on its way: take_grant gives the slot back */
        finish(c, 504, "function %s had no worker ready within %llu ms", c->name,
               (unsigned long long)c->timeout_ms);
        return;
    }
    if (c->http) {
        funcd_http_cancel(c->http); /* its connection is closed: a late answer cannot mix in */
        c->http = NULL;
        peer_put(c);
        release_slot(c, 0); /* busy, not broken: keep the worker */
        finish(c, 504, "function %s did not answer within %llu ms", c->name,
               (unsigned long long)c->timeout_ms);
        return;
    }
    if (c->slot) { /* waiting to learn how the worker ended: say what is known */
        event_del(c->later);
        fail_with_worker_end(c);
    }
}

static void on_later(evutil_socket_t fd, short what, void *arg)
{
    call *c = arg;
    if (c->finished) {
        run_done(c);
        return;
    }
    /* an exit poll */
    if (funcd_slot_worker_end(c->slot, NULL, 0) == FUNCD_SLOT_WORKER_RUNNING &&
        ++c->exit_polls < EXIT_POLLS) {
        struct timeval tv = {0, EXIT_POLL_MS * 1000};
        event_add(c->later, &tv);
        return;
    }
    fail_with_worker_end(c);
}

/* ---- the request ------------------------------------------------------ */

static int build_head(call *c, const funcd_invoke_req *req, const char *traceparent)
{
    funcd_buf *b = &c->head;
    const char *path = req->path ? req->path : "";
    funcd_buf_printf(b, "%s %s%s HTTP/1.1\r\nHost: function\r\n", req->method ? req->method : "POST",
                     path[0] == '/' ? "" : "/", path);
    for (const char *const *h = req->headers; h && h[0] && h[1]; h += 2)
        if (!hop_by_hop(h[0]))
            funcd_buf_printf(b, "%s: %s\r\n", h[0], h[1]);
    funcd_buf_printf(b, "traceparent: %s\r\nX-Funcd-Invocation-Id: %s\r\nContent-Length: %zu\r\n\r\n",
                     traceparent, c->id, req->body_len);
    return b->data ? 0 : -1;
}

static int check_req(const funcd_invoke_req *req)
{
    if (!req->ns || !req->name || !*req->ns || !*req->name)
        return funcd_error_set(FUNCD_EINVAL, "an invocation needs a namespace and a function name");
    if (strlen(req->ns) > 253 || strlen(req->name) > 253 || !clean(req->ns, 0) || !clean(req->name, 0))
        return funcd_error_set(FUNCD_EINVAL, "the function's namespace or name is not a name");
    if (req->method && !token(req->method))
        return funcd_error_set(FUNCD_EINVAL, "the method is not an HTTP token");
    if (req->path && ((req->path[0] && req->path[0] != '/' && req->path[0] != '?') ||
                      !clean(req->path, 0)))
        return funcd_error_set(FUNCD_EINVAL, "the path must be empty or start with / or ?, "
                               "without spaces or control characters");
    for (const char *const *h = req->headers; h && h[0]; h += 2) {
        if (!h[1])
            return funcd_error_set(FUNCD_EINVAL, "header %s has no value", h[0]);
        if (!token(h[0]) || !clean(h[1], 1))
            return funcd_error_set(FUNCD_EINVAL, "header %s is not a valid HTTP header", h[0]);
    }
    if (req->invocation_id && (!*req->invocation_id || strlen(req->invocation_id) >= MAX_ID ||
                               !clean(req->invocation_id, 0)))
        return funcd_error_set(FUNCD_EINVAL, "the invocation id must be 1 to %d printable "
                               "characters", MAX_ID - 1);
    if (req->traceparent && (strlen(req->traceparent) > 128 || !clean(req->traceparent, 0)))
        return funcd_error_set(FUNCD_EINVAL, "the traceparent is not a traceparent value");
    return 0;
}

int funcd_invoke(funcd_invoker *inv, const funcd_invoke_req *req, funcd_invoke_done_fn done,
                 void *arg)
{
    if (!inv || !req || !done)
        return funcd_error_set(FUNCD_EINVAL, "funcd_invoke needs an invoker, a request and a "
                               "callback");
    if (inv->closing)
        return funcd_error_set(FUNCD_EUNAVAILABLE, "funcd is shutting down");
    int rc = check_req(req);
    if (rc < 0)
        return rc;
    call *c = calloc(1, sizeof(*c));
    if (!c)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory starting an invocation");
    c->inv = inv;
    c->done = done;
    c->arg = arg;
    c->hops = req->hops;
    c->body = req->body;
    c->body_len = req->body ? req->body_len : 0;
    c->max_response = req->max_response ? req->max_response : DEFAULT_MAX_RESPONSE;
    snprintf(c->name, sizeof(c->name), "%s/%s", req->ns, req->name);
    if (req->invocation_id)
        snprintf(c->id, sizeof(c->id), "%s", req->invocation_id);
    else
        funcd_uuid4(c->id);
    char traceparent[64];
    if (!req->traceparent) {
        char trace[33], span[17];
        hex_random(inv, trace, 32);
        hex_random(inv, span, 16);
        snprintf(traceparent, sizeof(traceparent), "00-%s-%s-01", trace, span);
    }
    c->deadline = event_new(inv->loop, -1, 0, on_deadline, c);
    c->later = event_new(inv->loop, -1, 0, on_later, c);
    if (!c->deadline || !c->later ||
        build_head(c, req, req->traceparent ? req->traceparent : traceparent) < 0) {
        if (c->deadline)
            event_free(c->deadline);
        if (c->later)
            event_free(c->later);
        funcd_buf_free(&c->head);
        free(c);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory starting an invocation");
    }
    c->next = inv->calls;
    if (inv->calls)
        inv->calls->prev = c;
    inv->calls = c;
    inv->busy++;
    int known = 0;
    uint64_t fn_timeout = 0;
    c->target = funcd_serving_route(inv->serving, req->ns, req->name, &fn_timeout, &known);
    c->timeout_ms = req->timeout_ms ? req->timeout_ms
                    : fn_timeout    ? fn_timeout
                                    : DEFAULT_TIMEOUT_MS;
    if (!c->target) {
        if (known)
            finish(c, 503, "function %s cannot run now (see its status)", c->name);
        else
            finish(c, 404, "function %s does not exist", c->name);
        return 0;
    }
    struct timeval tv = {(time_t)(c->timeout_ms / 1000), (suseconds_t)(c->timeout_ms % 1000) * 1000};
    event_add(c->deadline, &tv);
    acquire(c);
    return 0;
}

unsigned funcd_invoke_hops_on(funcd_invoker *inv, uint64_t worker_id)
{
    unsigned most = 0;
    for (call *c = inv ? inv->calls : NULL; c; c = c->next)
        if (c->slot && c->hops > most && funcd_slot_worker_id(c->slot) == worker_id)
            most = c->hops;
    return most;
}

/* ---- the invoker ------------------------------------------------------ */

int funcd_invoker_new(funcd_invoker **out, struct event_base *loop, struct funcd_serving *serving,
                      const funcd_logger *logger)
{
    *out = NULL;
    funcd_invoker *inv = calloc(1, sizeof(*inv));
    if (!inv)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the invoker");
    inv->loop = loop;
    inv->serving = serving;
    inv->logger = logger;
    pthread_mutex_init(&inv->lock, NULL);
    if (getrandom(inv->rng, sizeof(inv->rng), 0) != (ssize_t)sizeof(inv->rng))
        inv->rng[0] = (uint64_t)funcd_now_ms();
    inv->rng[0] |= 1;
    inv->grant_ev = event_new(loop, -1, 0, on_grants, inv);
    if (!inv->grant_ev) {
        funcd_invoker_free(inv);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the invoker");
    }
    *out = inv;
    return 0;
}

unsigned funcd_invoker_busy(const funcd_invoker *inv)
{
    return inv ? inv->busy : 0;
}

void funcd_invoker_free(funcd_invoker *inv)
{
    if (!inv)
        return;
    if (inv->grant_ev)
        on_grants(-1, 0, inv); /* grants that came while the loop no longer ran */
    /* Withdraw what still waits, end what runs: every `done` runs now (and
     * may start nothing new). */
    inv->closing = 1;
    while (inv->calls) {
        call *c = inv->calls;
        if (c->queued && funcd_slot_cancel(c->target, &c->waiter))
            c->queued = 0;
        c->queued = 0; /* a grant still travelling has nowhere to go once we are gone */
        if (!c->finished)
            finish(c, 503, "funcd is shutting down");
        if (!c->orphan) {
            event_del(c->later);
            run_done(c); /* frees it */
        } else {
            call_free(c);
        }
    }
    while (inv->peers) {
        peer_entry *p = inv->peers;
        inv->peers = p->next;
        funcd_http_peer_free(p->peer);
        free(p);
    }
    if (inv->grant_ev)
        event_free(inv->grant_ev);
    pthread_mutex_destroy(&inv->lock);
    free(inv);
}
