/*
 * The egress gateway (egress.h): one event loop on its own thread serving
 * every attached worker's proxy and DNS sockets.
 *
 * A proxy connection goes HEAD (reading the request head) -> RESOLVING
 * (A, and AAAA when the host has IPv6, from the DNS cache or the upstream,
 * never blocking) -> CONNECTING (a non-blocking connect with a
 * timeout) -> RELAY (read(2)/write(2) through a buffer each way, each
 * side's reading paused while the other side's output is full) -> done;
 * or, at any decision, DENIED (a 403 with a body, then closed). Each ends
 * in one audit line.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "egress/dnscache.h"
#include "egress/egress.h"
#include "egress/wire.h"
#include "funcd/sys/error.h"
#include "metrics/egress.h"
#include "objects/objects.h"
#include "port/store.h"
#include "util/buf.h"

#define RELAY_MIN (64u << 10)    /* a relay buffer's first size, each way */
#define RELAY_MAX (4u << 20)     /* and its size once a read fills it (a bulk transfer) */
#define RELAY_SPARE 2            /* RELAY_MAX buffers kept for the next bulk transfer */
#define RELAY_SPARE_MS 10000     /* not used for this long: the spares are unmapped */
#define RELAY_BUDGET (256u << 20) /* all relay buffers beyond their first size, together */
#define RELAY_SHRINK_MS 1000     /* quiet for this long: a grown buffer goes back to RELAY_MIN */
#define MAX_READ (256u << 10)    /* per read() of a bufferevent (before relaying) */
#define MAX_CONNS 256             /* proxy connections of one worker at once (default) */
#define DNS_TCP_OUT_MAX (64u << 10) /* answers waiting for a DNS-over-TCP client: stop reading it */
#define HEAD_TIMEOUT_S 30        /* to send a request head */
#define DNS_TIMEOUT_S 3          /* an upstream DNS answer */
#define DNS_MAX_WAITING 32       /* per worker: questions waiting for the upstream */
#define DNS_MAX 4096             /* a DNS message we relay */

typedef struct conn conn;
typedef struct dns_tcp dns_tcp;
typedef struct relay_dir relay_dir;

struct funcd_egress_client {
    funcd_egress *eg;
    funcd_egress_client *next; /* eg->clients (gateway thread) */
    char *ns, *fn, *replica;
    int fds[3]; /* proxy, dns udp, dns tcp: until attached on the gateway thread */
    struct evconnlistener *proxy, *dns_tcp;
    struct event *dns_udp;
    int refs; /* the attachment, each connection and DNS query (gateway thread) */
    unsigned queries; /* DNS questions waiting for the upstream (gateway thread) */
    unsigned conns;   /* proxy connections open (gateway thread) */
    int refusing;     /* connections over the most were refused since the last one ended */
};

typedef enum cmd_type { CMD_ATTACH, CMD_DETACH } cmd_type;

typedef struct cmd {
    struct cmd *next;
    cmd_type type;
    funcd_egress_client *client;
} cmd;

struct funcd_egress {
    funcd_egress_config cfg;
    char *upstream_text;
    struct sockaddr_storage upstream;
    socklen_t upstream_len;
    funcd_egress_policies *policies;
    struct event_base *base;
    funcd_egress_dns_cache *cache; /* gateway thread */
    int have_v6;                   /* the host reaches IPv6: names are asked for AAAA too */
    struct event *wake;
    pthread_t thread;
    int started;

    pthread_mutex_t lock; /* cmds, stopping */
    cmd *cmds, **cmds_tail;
    int stopping;

    funcd_egress_client *clients; /* gateway thread */
    conn *conns;
    atomic_size_t relay_grown; /* bytes of relay buffers beyond RELAY_MIN (written by
                                * the gateway thread) */
    char *spare[RELAY_SPARE];  /* RELAY_MAX buffers no connection holds (gateway thread) */
    int n_spare;
    uint64_t spare_used_ms;    /* when one was last taken or given back */
    struct event *spare_trim;
    dns_tcp *dns_conns;
    struct dns_query *queries;

    funcd_store *store;
    funcd_store_watch *watch;
};

/* ---- small things -------------------------------------------------------- */

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static struct timeval tv_ms(unsigned ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

static void client_unref(funcd_egress_client *c)
{
    if (--c->refs > 0)
        return;
    for (int i = 0; i < 3; i++)
        if (c->fds[i] >= 0)
            close(c->fds[i]);
    free(c->ns);
    free(c->fn);
    free(c->replica);
    free(c);
}

/* The invocation client `c`'s worker runs now, when exactly one: into
 * `out` (40 bytes); else "". */
static void invocation_now(funcd_egress *eg, funcd_egress_client *c, char *out, size_t len)
{
    out[0] = '\0';
    if (eg->cfg.invocation_of &&
        !eg->cfg.invocation_of(eg->cfg.fn_log_payload, c->ns, c->fn, c->replica, out, len))
        out[0] = '\0';
}

static void fn_log(funcd_egress *eg, funcd_egress_client *c, const char *invocation,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void fn_log(funcd_egress *eg, funcd_egress_client *c, const char *invocation,
                   const char *fmt, ...)
{
    if (!eg->cfg.fn_log)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    eg->cfg.fn_log(eg->cfg.fn_log_payload, c->ns, c->fn, c->replica,
                   invocation && invocation[0] ? invocation : NULL, line);
}

/* ---- proxy connections --------------------------------------------------- */

typedef enum conn_state { S_HEAD, S_RESOLVING, S_CONNECTING, S_RELAY, S_DENIED } conn_state;

struct conn {
    conn *prev, *next;
    funcd_egress_client *cl;
    conn_state state;
    struct bufferevent *down; /* the worker's side */
    struct bufferevent *up;   /* the destination's side */
    struct dns_query *lookups[2]; /* A, AAAA: waiting for the upstream */
    int lookups_left;
    funcd_egress_answer answers[2];
    int answered[2];              /* 1: answers[i] holds the upstream's word */
    struct event *idle;
    struct event *head_deadline; /* the whole head within head_timeout_ms of the accept */
    size_t scanned;              /* head bytes searched for its end so far */
    struct event *shrink; /* a grown relay buffer may go back to RELAY_MIN */
    funcd_egress_request req;
    uint64_t start_ms, last_ms;
    uint64_t bytes_up, bytes_down;
    int down_fd, up_fd;           /* the sockets once relayed (-1 before) */
    relay_dir *dirs;              /* [0] up (worker -> destination), [1] down */
    char addr[INET6_ADDRSTRLEN + 8];
    char rule[160];
    char invocation[40]; /* the worker's one invocation when the connection came, or "" */
};

static void dir_close(relay_dir *d);
static void lookup_start(conn *c);
static void lookups_cancel(conn *c);

static void conn_free(conn *c)
{
    funcd_egress *eg = c->cl->eg;
    lookups_cancel(c);
    if (c->down)
        bufferevent_free(c->down);
    if (c->up)
        bufferevent_free(c->up);
    if (c->idle)
        event_free(c->idle);
    if (c->head_deadline)
        event_free(c->head_deadline);
    if (c->shrink)
        event_free(c->shrink);
    if (c->dirs) {
        dir_close(c->dirs);
        free(c->dirs);
    }
    if (c->down_fd >= 0)
        close(c->down_fd);
    if (c->up_fd >= 0)
        close(c->up_fd);
    funcd_buf_free(&c->req.head);
    if (c->prev)
        c->prev->next = c->next;
    else
        eg->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->cl->conns--;
    c->cl->refusing = 0;
    client_unref(c->cl);
    free(c);
}

/* The audit line, the metric and, for a denial, the Function's log. */
static void audit(conn *c, int allowed)
{
    funcd_egress *eg = c->cl->eg;
    const char *dest = c->req.host[0] ? c->req.host : "-";
    funcd_log(eg->cfg.logger, FUNCD_LOG_INFO,
              "egress: decision=%s namespace=%s function=%s replica=%s%s%s method=%s "
              "destination=%s:%u address=%s bytes_up=%llu bytes_down=%llu duration_ms=%llu "
              "rule=\"%s\"",
              allowed ? "allow" : "deny", c->cl->ns, c->cl->fn, c->cl->replica,
              c->invocation[0] ? " invocation=" : "", c->invocation,
              c->req.connect ? "CONNECT" : "HTTP", dest, c->req.port,
              c->addr[0] ? c->addr : "-", (unsigned long long)c->bytes_up,
              (unsigned long long)c->bytes_down,
              (unsigned long long)(now_ms() - c->start_ms), c->rule);
    funcd_metrics_egress_connection(eg->cfg.metrics, c->cl->ns, c->cl->fn, allowed, c->bytes_up,
                                    c->bytes_down);
}

static void finish(conn *c)
{
    if (c->state == S_RELAY)
        audit(c, 1);
    conn_free(c);
}

/* After an answer of our own: no more writing; wait (a little) for the
 * worker to close, so that unread bytes do not turn the answer into a reset. */
static void on_answer_drain(struct bufferevent *bev, void *arg)
{
    evbuffer_drain(bufferevent_get_input(bev), evbuffer_get_length(bufferevent_get_input(bev)));
}

static void on_answer_event(struct bufferevent *bev, short what, void *arg)
{
    conn_free(arg);
}

static void on_answer_sent(struct bufferevent *bev, void *arg)
{
    conn *c = arg;
    if (evbuffer_get_length(bufferevent_get_output(bev)) > 0)
        return;
    shutdown(bufferevent_getfd(bev), SHUT_WR);
    struct timeval two = {2, 0};
    bufferevent_set_timeouts(bev, &two, NULL);
    bufferevent_setcb(bev, on_answer_drain, NULL, on_answer_event, c);
    bufferevent_enable(bev, EV_READ);
}

/* Answers the worker with `status` and a plain-text body, then closes. */
static void answer(conn *c, int status, const char *reason, const char *body)
{
    if (c->up) {
        bufferevent_free(c->up);
        c->up = NULL;
    }
    if (c->idle)
        event_del(c->idle);
    struct evbuffer *out = bufferevent_get_output(c->down);
    evbuffer_add_printf(out,
                        "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
                        "Content-Length: %zu\r\nConnection: close\r\nX-Funcd-Egress: %s\r\n\r\n%s",
                        status, reason, strlen(body), status == 403 ? "denied" : "error", body);
    bufferevent_disable(c->down, EV_READ);
    bufferevent_setcb(c->down, NULL, on_answer_sent, on_answer_event, c);
    bufferevent_enable(c->down, EV_WRITE);
    struct timeval ten = {10, 0};
    bufferevent_set_timeouts(c->down, NULL, &ten);
}

static void deny(conn *c)
{
    funcd_egress *eg = c->cl->eg;
    c->state = S_DENIED;
    audit(c, 0);
    fn_log(eg, c->cl, c->invocation,
           "funcd egress: denied %s %s:%u: %s (EgressPolicy of namespace %s)",
           c->req.connect ? "CONNECT" : "HTTP", c->req.host, c->req.port, c->rule, c->cl->ns);
    char body[512];
    snprintf(body, sizeof(body),
             "funcd egress: %s:%u is not allowed for function %s/%s: %s. The EgressPolicies "
             "of namespace %s decide what its functions may reach.\n",
             c->req.host, c->req.port, c->cl->ns, c->cl->fn, c->rule, c->cl->ns);
    answer(c, 403, "Forbidden", body);
}

static void fail_upstream(conn *c, int status, const char *what)
{
    funcd_egress *eg = c->cl->eg;
    snprintf(c->rule, sizeof(c->rule), "%s", what);
    int allowed_before = c->state == S_CONNECTING || c->state == S_RESOLVING;
    c->state = S_DENIED;
    if (allowed_before)
        funcd_log(eg->cfg.logger, FUNCD_LOG_INFO,
                  "egress: decision=error namespace=%s function=%s replica=%s%s%s "
                  "destination=%s:%u address=%s reason=\"%s\"",
                  c->cl->ns, c->cl->fn, c->cl->replica, c->invocation[0] ? " invocation=" : "",
                  c->invocation, c->req.host, c->req.port,
                  c->addr[0] ? c->addr : "-", what);
    char body[512];
    snprintf(body, sizeof(body), "funcd egress: %s:%u: %s\n", c->req.host, c->req.port, what);
    answer(c, status, status == 504 ? "Gateway Timeout" : "Bad Gateway", body);
}

/* ---- relaying ------------------------------------------------------------ */

/* One direction of a connected connection: bytes go src -> buffer -> dst
 * with read(2) and write(2). Not splice(2): spliced pages reach the
 * receiving socket as many small page fragments, and on loopback that made
 * the worker's own reads cost three times as much CPU as these two copies
 * (docs/adr/0051-egress-relay-copies.md). What a bufferevent already read
 * (a body after the head) or our own 200 goes first. The buffer starts at
 * RELAY_MIN and becomes RELAY_MAX once a read fills it (a bulk
 * transfer); reading src pauses while dst cannot take what it holds. Once
 * the direction has been empty and quiet for relay_shrink_ms, the buffer
 * goes back to RELAY_MIN: an idle tunnel does not pin megabytes. */
struct relay_dir {
    conn *c;
    int src, dst;
    char *buf;
    size_t cap, off, len; /* buf[off..len) waits for dst */
    size_t grow_to;       /* the next capacity, once the buffer is empty */
    uint64_t read_ms;     /* when a read last brought bytes */
    struct event *rd, *wr;
    int eof, shut;
    uint64_t *count;
};

/* A relay buffer of `size` bytes. RELAY_MIN ones come from malloc. Larger
 * ones are mapped (pages made at once, MAP_POPULATE) and kept, up to
 * RELAY_SPARE of them, for the next bulk transfer once let go: on this
 * kind of (paravirtualised) machine each fresh 4 KiB page costs ~18-24 us
 * to fault in, ~100 us per MiB of relay buffer, which a transfer starting
 * on a reused buffer does not pay. Spares unused for RELAY_SPARE_MS are
 * unmapped (docs/adr/0055-egress-relay-buffers.md). */
static char *relay_alloc(funcd_egress *eg, size_t size)
{
    if (size <= RELAY_MIN)
        return malloc(size);
    if (size == RELAY_MAX && eg->n_spare > 0) {
        eg->spare_used_ms = now_ms();
        return eg->spare[--eg->n_spare];
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                   -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void relay_release(funcd_egress *eg, char *buf, size_t size)
{
    if (!buf)
        return;
    if (size <= RELAY_MIN) {
        free(buf);
        return;
    }
    if (size == RELAY_MAX && eg->n_spare < RELAY_SPARE && eg->spare_trim) {
        eg->spare[eg->n_spare++] = buf;
        eg->spare_used_ms = now_ms();
        if (!evtimer_pending(eg->spare_trim, NULL)) {
            struct timeval tv = tv_ms(RELAY_SPARE_MS);
            evtimer_add(eg->spare_trim, &tv);
        }
        return;
    }
    munmap(buf, size);
}

static void spares_free(funcd_egress *eg)
{
    while (eg->n_spare > 0)
        munmap(eg->spare[--eg->n_spare], RELAY_MAX);
}

static void on_spare_trim(evutil_socket_t fd, short what, void *arg)
{
    funcd_egress *eg = arg;
    uint64_t unused = now_ms() - eg->spare_used_ms;
    if (unused >= RELAY_SPARE_MS) {
        spares_free(eg);
        return;
    }
    struct timeval tv = tv_ms((unsigned)(RELAY_SPARE_MS - unused));
    evtimer_add(eg->spare_trim, &tv);
}

static void maybe_done(conn *c)
{
    if (c->dirs[0].shut && c->dirs[1].shut)
        finish(c);
}

static void dir_close_one(relay_dir *d)
{
    if (d->rd)
        event_free(d->rd);
    if (d->wr)
        event_free(d->wr);
    d->rd = d->wr = NULL;
    if (!d->buf) /* never opened (d->c unset) or already closed */
        return;
    if (d->cap > RELAY_MIN)
        d->c->cl->eg->relay_grown -= d->cap - RELAY_MIN;
    relay_release(d->c->cl->eg, d->buf, d->cap);
    d->buf = NULL;
}

/* Both directions of a connection (`d` points at two). */
static void dir_close(relay_dir *d)
{
    dir_close_one(&d[0]);
    dir_close_one(&d[1]);
}

/* Writes what waits for dst. 1: all of it, 0: dst is full, -1: an error. */
static int dir_flush(relay_dir *d)
{
    while (d->off < d->len) {
        ssize_t n = write(d->dst, d->buf + d->off, d->len - d->off);
        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -1;
        d->off += (size_t)n;
    }
    d->off = d->len = 0;
    funcd_egress *eg = d->c->cl->eg;
    /* Empty: a new buffer, nothing to copy; while all connections' growth
     * stays within RELAY_BUDGET (a tenant's idle tunnels must not pin
     * the process' memory). */
    if (d->grow_to > d->cap && eg->relay_grown + (d->grow_to - d->cap) <= RELAY_BUDGET) {
        char *bigger = relay_alloc(eg, d->grow_to);
        if (bigger) {
            relay_release(eg, d->buf, d->cap);
            d->buf = bigger;
            eg->relay_grown += d->grow_to - d->cap;
            d->cap = d->grow_to;
        }
    }
    d->grow_to = 0;
    /* grown and empty: it may shrink once quiet (the timer checks) */
    if (d->cap > RELAY_MIN && d->c->shrink && !evtimer_pending(d->c->shrink, NULL)) {
        struct timeval tv = tv_ms(eg->cfg.relay_shrink_ms);
        evtimer_add(d->c->shrink, &tv);
    }
    return 1;
}

/* After a flush: resume reading, pass on the EOF, or wait for dst. */
static void dir_step(relay_dir *d, int flushed)
{
    conn *c = d->c;
    if (flushed < 0) {
        finish(c);
        return;
    }
    if (flushed == 0) {
        event_del(d->rd);
        event_add(d->wr, NULL);
        return;
    }
    event_del(d->wr);
    if (d->eof) {
        event_del(d->rd); /* an ended socket stays readable: do not wake for it again */
        if (!d->shut) {
            shutdown(d->dst, SHUT_WR);
            d->shut = 1;
            maybe_done(c);
        }
        return;
    }
    event_add(d->rd, NULL);
}

static void on_relay_read(evutil_socket_t fd, short what, void *arg)
{
    relay_dir *d = arg;
    conn *c = d->c;
    c->last_ms = now_ms();
    size_t room = d->cap - d->len; /* reading runs only once the buffer is empty */
    ssize_t n = read(d->src, d->buf + d->len, room);
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return;
        finish(c); /* a reset or an error on either side ends both */
        return;
    }
    if (n == 0)
        d->eof = 1;
    else
        d->read_ms = c->last_ms;
    if ((size_t)n == room && d->cap < RELAY_MAX)
        d->grow_to = RELAY_MAX;
    d->len += (size_t)n;
    *d->count += (uint64_t)n;
    dir_step(d, dir_flush(d));
}

static void on_relay_write(evutil_socket_t fd, short what, void *arg)
{
    relay_dir *d = arg;
    d->c->last_ms = now_ms();
    dir_step(d, dir_flush(d));
}

/* `first` then `pending` (both may be NULL) go to dst before anything read. */
static int dir_open(conn *c, relay_dir *d, int src, int dst, struct evbuffer *pending,
                    const funcd_buf *first, uint64_t *count)
{
    funcd_egress *eg = c->cl->eg;
    d->c = c;
    d->src = src;
    d->dst = dst;
    d->count = count;
    size_t head = first ? first->len : 0, rest = pending ? evbuffer_get_length(pending) : 0;
    /* What came with the head is small (the head is read in small reads):
     * a buffer of the first size holds it; growth is dir_flush's, budgeted. */
    d->cap = head + rest <= RELAY_MIN ? RELAY_MIN : head + rest;
    if (!(d->buf = relay_alloc(eg, d->cap)))
        return -1;
    eg->relay_grown += d->cap - RELAY_MIN;
    if (head)
        memcpy(d->buf, first->data, head);
    if (rest && evbuffer_remove(pending, d->buf + head, rest) != (int)rest)
        return -1;
    d->len = head + rest;
    d->rd = event_new(eg->base, src, EV_READ | EV_PERSIST, on_relay_read, d);
    d->wr = event_new(eg->base, dst, EV_WRITE | EV_PERSIST, on_relay_write, d);
    return d->rd && d->wr ? 0 : -1;
}

/* Each grown buffer that is empty and has read nothing for relay_shrink_ms
 * goes back to RELAY_MIN; while one stays grown, look again later. */
static void on_shrink(evutil_socket_t fd, short what, void *arg)
{
    conn *c = arg;
    funcd_egress *eg = c->cl->eg;
    uint64_t now = now_ms(), quiet = eg->cfg.relay_shrink_ms;
    int grown = 0;
    for (int i = 0; i < 2; i++) {
        relay_dir *d = &c->dirs[i];
        if (d->cap <= RELAY_MIN)
            continue;
        char *small = d->len == 0 && now - d->read_ms >= quiet ? malloc(RELAY_MIN) : NULL;
        if (!small) {
            grown = 1;
            continue;
        }
        relay_release(eg, d->buf, d->cap);
        eg->relay_grown -= d->cap - RELAY_MIN;
        d->buf = small;
        d->cap = RELAY_MIN;
        d->off = d->len = 0;
        d->grow_to = 0;
    }
    if (grown) {
        struct timeval tv = tv_ms((unsigned)quiet);
        evtimer_add(c->shrink, &tv);
    }
}

static void on_idle(evutil_socket_t fd, short what, void *arg)
{
    conn *c = arg;
    funcd_egress *eg = c->cl->eg;
    uint64_t idle = eg->cfg.idle_timeout_ms, quiet = now_ms() - c->last_ms;
    if (quiet >= idle) {
        snprintf(c->rule + strlen(c->rule), sizeof(c->rule) - strlen(c->rule), "; idle timeout");
        finish(c);
        return;
    }
    struct timeval tv = tv_ms((unsigned)(idle - quiet));
    event_add(c->idle, &tv);
}

/* Connected: the bufferevents hand over their sockets (and whatever they
 * hold) to the relay. */
static void start_relay(conn *c)
{
    funcd_egress *eg = c->cl->eg;
    c->state = S_RELAY;
    c->last_ms = now_ms();
    /* the sockets leave their bufferevents (which then close nothing) */
    c->down_fd = bufferevent_getfd(c->down);
    c->up_fd = bufferevent_getfd(c->up);
    bufferevent_setfd(c->down, -1);
    bufferevent_setfd(c->up, -1);
    c->dirs = calloc(2, sizeof(relay_dir));
    c->shrink = evtimer_new(eg->base, on_shrink, c);
    int ok = c->down_fd >= 0 && c->up_fd >= 0 && c->dirs && c->shrink;
    /* Up: the origin's head (plain HTTP), then what the worker sent after
     * its head; down: our 200 (CONNECT). (A socket bufferevent's output
     * cannot be drained by others, so nothing goes through those.) */
    ok = ok && dir_open(c, &c->dirs[0], c->down_fd, c->up_fd, bufferevent_get_input(c->down),
                        c->req.connect ? NULL : &c->req.head, &c->bytes_up) == 0;
    static const char established[] = "HTTP/1.1 200 Connection established\r\n\r\n";
    funcd_buf est = {(char *)established, sizeof(established) - 1, 0};
    ok = ok && dir_open(c, &c->dirs[1], c->up_fd, c->down_fd, NULL, c->req.connect ? &est : NULL,
                        &c->bytes_down) == 0;
    bufferevent_free(c->down);
    bufferevent_free(c->up);
    c->down = c->up = NULL;
    if (!ok) {
        finish(c);
        return;
    }
    c->bytes_up = 0; /* counted from the relay on: the head is not the payload */
    for (int i = 0; i < 2; i++) { /* each flushes what it holds (at once: a new
                                     * socket has room), then reads */
        int flushed = dir_flush(&c->dirs[i]);
        if (flushed < 0) {
            finish(c);
            return;
        }
        dir_step(&c->dirs[i], flushed);
    }
    struct timeval tv = tv_ms(eg->cfg.idle_timeout_ms);
    c->idle = event_new(eg->base, -1, 0, on_idle, c);
    if (c->idle)
        event_add(c->idle, &tv);
}

static void on_up_connect_event(struct bufferevent *bev, short what, void *arg)
{
    conn *c = arg;
    if (what & BEV_EVENT_CONNECTED) {
        start_relay(c);
        return;
    }
    if (what & BEV_EVENT_TIMEOUT)
        fail_upstream(c, 504, "the destination did not accept the connection in time");
    else
        fail_upstream(c, 502, "the destination refused the connection");
}

/* `a` and `port` as a sockaddr in `ss`; its length. */
static socklen_t sockaddr_of(const funcd_egress_addr *a, uint16_t port, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    if (a->family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)ss;
        sin->sin_family = AF_INET;
        sin->sin_port = htons(port);
        memcpy(&sin->sin_addr, a->addr, 4);
        return sizeof(*sin);
    }
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(port);
    memcpy(&sin6->sin6_addr, a->addr, 16);
    return sizeof(*sin6);
}

static void connect_to(conn *c, const struct sockaddr *sa, socklen_t len)
{
    funcd_egress *eg = c->cl->eg;
    c->state = S_CONNECTING;
    c->up = bufferevent_socket_new(eg->base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!c->up) {
        fail_upstream(c, 502, "out of memory");
        return;
    }
    bufferevent_set_max_single_read(c->up, MAX_READ);
    bufferevent_set_max_single_write(c->up, MAX_READ);
    bufferevent_setcb(c->up, NULL, NULL, on_up_connect_event, c);
    struct timeval tv = tv_ms(eg->cfg.connect_timeout_ms);
    bufferevent_set_timeouts(c->up, NULL, &tv);
    if (bufferevent_socket_connect(c->up, sa, (int)len) < 0)
        fail_upstream(c, 502, "cannot connect to the destination");
}

/* The name resolved (c->answers): every address must pass, then connect to
 * the first (IPv4 before IPv6). */
static void resolved(conn *c)
{
    funcd_egress *eg = c->cl->eg;
    char name_rule[sizeof(c->rule)];
    snprintf(name_rule, sizeof(name_rule), "%s", c->rule);
    funcd_egress_addr first;
    int have_first = 0;
    for (int i = 0; i < 2; i++) {
        const funcd_egress_answer *an = &c->answers[i];
        for (size_t k = 0; c->answered[i] && k < an->n_addrs; k++) {
            funcd_egress_addr ad = {.family = an->addrs[k].family};
            memcpy(ad.addr, an->addrs[k].addr, 16);
            funcd_egress_decision d;
            funcd_egress_check_addr(eg->policies, c->cl->ns, &ad, c->req.port, 1, &d);
            if (!d.allowed) {
                funcd_egress_addr_str(&ad, c->addr, sizeof(c->addr));
                snprintf(c->rule, sizeof(c->rule), "%s resolves to %s", c->req.host, d.rule);
                deny(c);
                return;
            }
            if (!have_first) {
                first = ad;
                have_first = 1;
                if (strcmp(d.rule, "resolved") != 0)
                    snprintf(c->rule, sizeof(c->rule), "%s", d.rule);
            }
        }
    }
    if (!have_first) {
        fail_upstream(c, 502, "the name does not resolve");
        return;
    }
    if (strcmp(c->rule, name_rule) != 0 && strlen(name_rule) + strlen(c->rule) + 3 < sizeof(c->rule)) {
        char both[sizeof(c->rule)];
        snprintf(both, sizeof(both), "%s + %s", name_rule, c->rule);
        snprintf(c->rule, sizeof(c->rule), "%s", both);
    }
    funcd_egress_addr_str(&first, c->addr, sizeof(c->addr));
    struct sockaddr_storage ss;
    socklen_t len = sockaddr_of(&first, c->req.port, &ss);
    connect_to(c, (struct sockaddr *)&ss, len);
}

/* The head is parsed: decide, then resolve or connect. */
static void decide(conn *c)
{
    funcd_egress *eg = c->cl->eg;
    funcd_egress_addr ad;
    funcd_egress_decision d;
    bufferevent_disable(c->down, EV_READ); /* what follows the head waits for the relay */
    bufferevent_set_timeouts(c->down, NULL, NULL);
    if (funcd_egress_addr_parse(c->req.host, &ad) == 0) {
        funcd_egress_check_addr(eg->policies, c->cl->ns, &ad, c->req.port, 0, &d);
        funcd_egress_addr_str(&ad, c->addr, sizeof(c->addr));
        snprintf(c->rule, sizeof(c->rule), "%s", d.rule);
        if (!d.allowed) {
            deny(c);
            return;
        }
        struct sockaddr_storage ss;
        socklen_t len = sockaddr_of(&ad, c->req.port, &ss);
        connect_to(c, (struct sockaddr *)&ss, len);
        return;
    }
    funcd_egress_check_name(eg->policies, c->cl->ns, c->req.host, c->req.port, &d);
    snprintf(c->rule, sizeof(c->rule), "%s", d.rule);
    if (!d.allowed) {
        deny(c);
        return;
    }
    c->state = S_RESOLVING;
    lookup_start(c);
}

static void on_head_event(struct bufferevent *bev, short what, void *arg)
{
    conn *c = arg;
    conn_free(c); /* the worker left (or took too long) before a whole head */
}

static void on_head_deadline(evutil_socket_t fd, short what, void *arg)
{
    conn *c = arg;
    if (c->state == S_HEAD)
        conn_free(c); /* a head sent a byte at a time holds nothing longer than this */
}

static void on_head(struct bufferevent *bev, void *arg)
{
    conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    struct evbuffer_ptr from; /* where the end may start: not searched again each read */
    evbuffer_ptr_set(in, &from, c->scanned > 3 ? c->scanned - 3 : 0, EVBUFFER_PTR_SET);
    struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, &from);
    if (end.pos < 0) {
        c->scanned = evbuffer_get_length(in);
        if (evbuffer_get_length(in) > FUNCD_EGRESS_MAX_HEAD) {
            c->state = S_DENIED;
            answer(c, 431, "Request Header Fields Too Large",
                   "funcd egress: the request head is too large\n");
        }
        return;
    }
    event_del(c->head_deadline);
    size_t len = (size_t)end.pos + 4;
    char why[160];
    int status = FUNCD_EGRESS_MAX_HEAD + 1;
    char *head = len <= FUNCD_EGRESS_MAX_HEAD ? malloc(len) : NULL;
    if (head) {
        evbuffer_remove(in, head, len);
        status = funcd_egress_parse_request(head, len, &c->req, why, sizeof(why));
        free(head);
    } else {
        snprintf(why, sizeof(why), "the request head is too large");
        status = 431;
    }
    if (status != 0) {
        c->state = S_DENIED;
        char body[256];
        snprintf(body, sizeof(body), "funcd egress: %s\n", why);
        answer(c, status, status == 405 ? "Method Not Allowed" : status == 501 ? "Not Implemented"
                                        : status == 431 ? "Request Header Fields Too Large"
                                                        : "Bad Request",
               body);
        return;
    }
    decide(c);
}

static void on_proxy_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                            int socklen, void *arg)
{
    funcd_egress_client *cl = arg;
    funcd_egress *eg = cl->eg;
    unsigned most = eg->cfg.max_conns ? eg->cfg.max_conns : MAX_CONNS;
    if (cl->conns >= most) { /* each holds two of funcd's descriptors */
        char answer[256];
        int body = snprintf(answer + 128, 128, "this worker has %u proxy connections open, the "
                            "most a worker may\n", most);
        int len = snprintf(answer, 128, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: "
                           "text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", body);
        memmove(answer + len, answer + 128, (size_t)body);
        (void)send(fd, answer, (size_t)(len + body), MSG_DONTWAIT | MSG_NOSIGNAL);
        close(fd);
        if (!cl->refusing) /* once per spell, not per refusal */
            funcd_log(eg->cfg.logger, FUNCD_LOG_WARN, "egress: %s/%s (%s): proxy connections "
                      "refused: %u open, the most a worker may", cl->ns, cl->fn, cl->replica,
                      most);
        cl->refusing = 1;
        return;
    }
    conn *c = calloc(1, sizeof(*c));
    if (!c) {
        close(fd);
        return;
    }
    /* (evconnlistener accepts with SOCK_NONBLOCK: no fcntl needed) */
    c->down = bufferevent_socket_new(eg->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!c->down) {
        close(fd);
        free(c);
        return;
    }
    c->cl = cl;
    cl->refs++;
    cl->conns++;
    c->down_fd = c->up_fd = -1;
    invocation_now(eg, cl, c->invocation, sizeof(c->invocation));
    c->start_ms = c->last_ms = now_ms();
    c->next = eg->conns;
    if (eg->conns)
        eg->conns->prev = c;
    eg->conns = c;
    /* Reads no larger than a head: what follows the head in the last read
     * is all the relay starts with, within a relay buffer's first size. */
    bufferevent_set_max_single_read(c->down, FUNCD_EGRESS_MAX_HEAD);
    bufferevent_set_max_single_write(c->down, MAX_READ);
    bufferevent_setcb(c->down, on_head, NULL, on_head_event, c);
    struct timeval tv = tv_ms(eg->cfg.head_timeout_ms ? eg->cfg.head_timeout_ms
                                                      : HEAD_TIMEOUT_S * 1000u);
    if (!(c->head_deadline = evtimer_new(eg->base, on_head_deadline, c))) {
        conn_free(c);
        return;
    }
    evtimer_add(c->head_deadline, &tv); /* a deadline: a read does not move it */
    bufferevent_enable(c->down, EV_READ);
}

/* ---- DNS ----------------------------------------------------------------- */

struct dns_tcp {
    dns_tcp *prev, *next;
    funcd_egress_client *cl;
    struct bufferevent *bev;
    int pending; /* queries not answered yet */
    int closed;  /* the worker's side is gone: free once pending is 0 */
};

/* A question waiting for the upstream: a worker's (answered to it) or one
 * of a proxy connection's lookups (`conn` set). */
typedef struct dns_query {
    struct dns_query *prev, *next;
    funcd_egress_client *cl;
    conn *conn;                    /* a lookup of this connection, or NULL */
    int slot;                      /* its index in conn->lookups */
    int counted;                   /* in cl->queries (a worker's question) */
    dns_tcp *tcp;                  /* NULL: answer over UDP to `peer` */
    struct sockaddr_storage peer;
    socklen_t peer_len;
    int fd;                        /* our socket to the upstream */
    struct event *ev;
    int sent;                      /* times sent (one more after a timeout) */
    uint8_t query[DNS_MAX];        /* as sent upstream: always funcd's own question */
    size_t query_len;
    funcd_egress_question q;
    uint8_t worker_head[3];        /* a worker's question: its id and RD, for the answer */
} dns_query;

static void dns_tcp_release(dns_tcp *t)
{
    if (!t->closed || t->pending > 0)
        return;
    funcd_egress *eg = t->cl->eg;
    if (t->prev)
        t->prev->next = t->next;
    else
        eg->dns_conns = t->next;
    if (t->next)
        t->next->prev = t->prev;
    if (t->bev)
        bufferevent_free(t->bev);
    client_unref(t->cl);
    free(t);
}

static void dns_reply(funcd_egress_client *cl, dns_tcp *tcp, const struct sockaddr *peer,
                      socklen_t peer_len, const uint8_t *msg, size_t len)
{
    if (len == 0)
        return;
    if (tcp) {
        if (tcp->closed || !tcp->bev)
            return;
        uint8_t prefix[2] = {(uint8_t)(len >> 8), (uint8_t)len};
        bufferevent_write(tcp->bev, prefix, 2);
        bufferevent_write(tcp->bev, msg, len);
        return;
    }
    int fd = event_get_fd(cl->dns_udp);
    (void)sendto(fd, msg, len, MSG_DONTWAIT, peer, peer_len);
}

static void query_free(dns_query *q)
{
    funcd_egress *eg = q->cl->eg;
    if (q->ev)
        event_free(q->ev);
    if (q->fd >= 0)
        close(q->fd);
    if (q->prev)
        q->prev->next = q->next;
    else
        eg->queries = q->next;
    if (q->next)
        q->next->prev = q->prev;
    if (q->tcp) {
        q->tcp->pending--;
        dns_tcp_release(q->tcp);
    }
    if (q->conn)
        q->conn->lookups[q->slot] = NULL;
    if (q->counted)
        q->cl->queries--;
    client_unref(q->cl);
    free(q);
}

static void lookup_done(conn *c, int slot, const funcd_egress_answer *a);

/* The upstream's answer `msg` (NULL: none came, or not a valid one) to `q`:
 * to the worker that asked or to the connection looking the name up. */
static void query_done(dns_query *q, const uint8_t *msg, size_t len, const funcd_egress_answer *a)
{
    if (q->conn) {
        conn *c = q->conn;
        int slot = q->slot;
        query_free(q); /* first: lookup_done may end the connection */
        lookup_done(c, slot, msg ? a : NULL);
        return;
    }
    uint8_t buf[DNS_MAX];
    if (!msg)
        len = funcd_egress_dns_error(q->query, q->query_len, &q->q, 2, buf, sizeof(buf));
    else if (len <= sizeof(buf))
        memcpy(buf, msg, len);
    else
        len = 0;
    if (len >= 12) { /* under the worker's id, with its RD */
        buf[0] = q->worker_head[0];
        buf[1] = q->worker_head[1];
        buf[2] = (uint8_t)((buf[2] & ~1) | (q->worker_head[2] & 1));
    }
    dns_reply(q->cl, q->tcp, (struct sockaddr *)&q->peer, q->peer_len, buf, len);
    query_free(q);
}

static int query_send(dns_query *q)
{
    struct timeval tv = {DNS_TIMEOUT_S, 0};
    q->sent++;
    return send(q->fd, q->query, q->query_len, MSG_DONTWAIT) < 0 || event_add(q->ev, &tv) < 0
               ? -1
               : 0;
}

static void on_upstream_answer(evutil_socket_t fd, short what, void *arg)
{
    dns_query *q = arg;
    if (what & EV_TIMEOUT) {
        if (q->sent < 2 && query_send(q) == 0) /* one more try, as a resolver would */
            return;
        query_done(q, NULL, 0, NULL);
        return;
    }
    uint8_t buf[DNS_MAX];
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        struct timeval tv = {DNS_TIMEOUT_S, 0};
        event_add(q->ev, &tv);
        return;
    }
    funcd_egress_answer a;
    if (n < 12 || funcd_egress_parse_answer(buf, (size_t)n, &q->q, &a) < 0) {
        query_done(q, NULL, 0, NULL);
        return;
    }
    /* The question was funcd's own (RD, no EDNS, nothing after it), for a
     * worker too: the answer may serve every namespace. */
    if (a.cacheable)
        funcd_egress_dns_cache_put(q->cl->eg->cache, q->q.name, q->q.qtype, q->q.qclass, buf,
                                   (size_t)n, a.ttl, now_ms());
    query_done(q, buf, (size_t)n, &a);
}

/* Sends `msg` (question `qq`) to the upstream for client `cl`: a new query
 * on eg->queries, or NULL (nothing kept) when it cannot be sent. */
static dns_query *upstream_ask(funcd_egress_client *cl, const uint8_t *msg, size_t len,
                               const funcd_egress_question *qq)
{
    funcd_egress *eg = cl->eg;
    dns_query *x = len <= DNS_MAX ? calloc(1, sizeof(*x)) : NULL;
    if (!x)
        return NULL;
    x->cl = cl;
    cl->refs++;
    x->fd = -1;
    memcpy(x->query, msg, len);
    x->query_len = len;
    x->q = *qq;
    x->next = eg->queries;
    if (eg->queries)
        eg->queries->prev = x;
    eg->queries = x;
    x->fd = socket(eg->upstream.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (x->fd < 0 || connect(x->fd, (struct sockaddr *)&eg->upstream, eg->upstream_len) < 0 ||
        !(x->ev = event_new(eg->base, x->fd, EV_READ, on_upstream_answer, x)) ||
        query_send(x) < 0) {
        query_free(x);
        return NULL;
    }
    return x;
}

/* ---- the proxy's lookups ------------------------------------------------- */

static void lookups_cancel(conn *c)
{
    for (int i = 0; i < 2; i++)
        if (c->lookups[i]) {
            c->lookups[i]->conn = NULL;
            query_free(c->lookups[i]);
            c->lookups[i] = NULL;
        }
}

static void lookup_done(conn *c, int slot, const funcd_egress_answer *a)
{
    if (a) {
        c->answers[slot] = *a;
        c->answered[slot] = 1;
    }
    if (--c->lookups_left == 0)
        resolved(c);
}

/* Asks for the name's A (slot 0) and, when the host has IPv6, AAAA (slot 1)
 * records: from the cache, else from the upstream. */
static void lookup_start(conn *c)
{
    funcd_egress *eg = c->cl->eg;
    static const uint16_t qtypes[2] = {1, 28};
    int n = eg->have_v6 ? 2 : 1;
    c->lookups_left = n + 1; /* held until every lookup started */
    for (int i = 0; i < n; i++) {
        funcd_egress_question q = {0};
        snprintf(q.name, sizeof(q.name), "%s", c->req.host);
        size_t nl = strlen(q.name);
        if (nl && q.name[nl - 1] == '.')
            q.name[nl - 1] = '\0';
        q.qtype = qtypes[i];
        q.qclass = 1;
        size_t len;
        uint32_t left;
        const uint8_t *hit =
            funcd_egress_dns_cache_get(eg->cache, q.name, q.qtype, 1, now_ms(), &len, &left);
        funcd_egress_answer a;
        if (hit) {
            q.id = (uint16_t)(hit[0] << 8 | hit[1]);
            if (funcd_egress_parse_answer(hit, len, &q, &a) == 0) {
                lookup_done(c, i, &a);
                continue;
            }
        }
        uint16_t id = 0;
        if (getrandom(&id, sizeof(id), GRND_NONBLOCK) != (ssize_t)sizeof(id))
            id = (uint16_t)(now_ms() * 2654435761u >> 16);
        uint8_t msg[DNS_MAX];
        size_t ml = funcd_egress_dns_query(q.name, q.qtype, id, msg, sizeof(msg));
        q.id = id;
        /* The proxy's questions count against the worker's cap too. */
        dns_query *x = ml && c->cl->queries < DNS_MAX_WAITING ? upstream_ask(c->cl, msg, ml, &q)
                                                              : NULL;
        if (!x) {
            lookup_done(c, i, NULL);
            continue;
        }
        x->counted = 1;
        c->cl->queries++;
        x->conn = c;
        x->slot = i;
        c->lookups[i] = x;
    }
    lookup_done(c, 0, NULL); /* every lookup started: the last one answered resolves */
}

/* ---- the DNS server ------------------------------------------------------ */

/* One DNS message from a worker: NXDOMAIN unless a rule allows the name,
 * else answered from the cache or forwarded to the upstream and its answer
 * relayed. The policy decides every question; only answers are cached. */
static void dns_handle(funcd_egress_client *cl, dns_tcp *tcp, const struct sockaddr *peer,
                       socklen_t peer_len, const uint8_t *msg, size_t len)
{
    funcd_egress *eg = cl->eg;
    uint8_t out[DNS_MAX];
    funcd_egress_question q;
    if (len > DNS_MAX || funcd_egress_parse_question(msg, len, &q) < 0) {
        dns_reply(cl, tcp, peer, peer_len, out,
                  len <= DNS_MAX ? funcd_egress_dns_error(msg, len, NULL, 1, out, sizeof(out)) : 0);
        return;
    }
    funcd_egress_decision d;
    funcd_egress_addr numeric;
    if (q.name[0] && funcd_egress_addr_parse(q.name, &numeric) < 0)
        funcd_egress_check_name(eg->policies, cl->ns, q.name, 0, &d);
    else
        d.allowed = 0;
    funcd_metrics_egress_dns(eg->cfg.metrics, cl->ns, cl->fn, d.allowed);
    if (!d.allowed) {
        funcd_log(eg->cfg.logger, FUNCD_LOG_DEBUG,
                  "egress: dns decision=deny namespace=%s function=%s name=%s qtype=%u",
                  cl->ns, cl->fn, q.name, q.qtype);
        char inv[40];
        invocation_now(eg, cl, inv, sizeof(inv));
        fn_log(eg, cl, inv,
               "funcd egress: DNS %s: NXDOMAIN, no rule of namespace %s's EgressPolicies "
               "allows this name",
               q.name[0] ? q.name : ".", cl->ns);
        dns_reply(cl, tcp, peer, peer_len, out,
                  funcd_egress_dns_error(msg, len, &q, 3, out, sizeof(out)));
        return;
    }
    size_t hl = 0;
    uint32_t left = 0;
    const uint8_t *hit =
        funcd_egress_dns_cache_get(eg->cache, q.name, q.qtype, q.qclass, now_ms(), &hl, &left);
    /* Over UDP without EDNS (no additional record) an answer must fit 512 bytes. */
    int fits = tcp || hl <= 512 || (msg[10] | msg[11]) != 0;
    if (hit && hl <= sizeof(out) && fits) {
        memcpy(out, hit, hl);
        out[0] = msg[0]; /* the worker's id and RD */
        out[1] = msg[1];
        out[2] = (uint8_t)((out[2] & ~1) | (msg[2] & 1));
        funcd_egress_dns_cap_ttl(out, hl, left);
        dns_reply(cl, tcp, peer, peer_len, out, hl);
        return;
    }
    /* A worker's questions each hold a socket until answered: a bounded
     * number of them, the rest SERVFAIL (a flood costs the worker, not funcd). */
    /* Upstream goes funcd's own question for the name, under a fresh id:
     * neither the worker's id, flags and options (EDNS data, trailing
     * bytes: a channel out) nor its choices reach the resolver. */
    uint8_t own[DNS_MAX];
    funcd_egress_question oq = q;
    size_t own_len = 0;
    if (q.qclass == 1 && getrandom(&oq.id, sizeof(oq.id), GRND_NONBLOCK) == (ssize_t)sizeof(oq.id))
        own_len = funcd_egress_dns_query(q.name, q.qtype, oq.id, own, sizeof(own));
    if (!own_len) { /* not class IN (or no random id): refused */
        dns_reply(cl, tcp, peer, peer_len, out,
                  funcd_egress_dns_error(msg, len, &q, 5, out, sizeof(out)));
        return;
    }
    dns_query *x = cl->queries < DNS_MAX_WAITING ? upstream_ask(cl, own, own_len, &oq) : NULL;
    if (!x) {
        dns_reply(cl, tcp, peer, peer_len, out,
                  funcd_egress_dns_error(msg, len, &q, 2, out, sizeof(out)));
        return;
    }
    x->counted = 1;
    memcpy(x->worker_head, msg, 3);
    cl->queries++;
    x->tcp = tcp;
    if (tcp)
        tcp->pending++;
    if (peer)
        memcpy(&x->peer, peer, peer_len);
    x->peer_len = peer_len;
}

static void on_dns_udp(evutil_socket_t fd, short what, void *arg)
{
    funcd_egress_client *cl = arg;
    for (int i = 0; i < 16; i++) {
        uint8_t msg[DNS_MAX + 1];
        struct sockaddr_storage peer;
        socklen_t plen = sizeof(peer);
        ssize_t n = recvfrom(fd, msg, sizeof(msg), MSG_DONTWAIT, (struct sockaddr *)&peer, &plen);
        if (n < 0)
            return;
        dns_handle(cl, NULL, (struct sockaddr *)&peer, plen, msg, (size_t)n);
    }
}

static void on_dns_tcp_read(struct bufferevent *bev, void *arg)
{
    dns_tcp *t = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    for (;;) {
        /* A client that does not read its answers is not read either until
         * they drain (on_dns_tcp_drained): they do not pile up in funcd. */
        if (evbuffer_get_length(bufferevent_get_output(bev)) > DNS_TCP_OUT_MAX) {
            bufferevent_disable(bev, EV_READ);
            return;
        }
        uint8_t prefix[2];
        if (evbuffer_copyout(in, prefix, 2) < 2)
            return;
        size_t len = (size_t)prefix[0] << 8 | prefix[1];
        if (len > DNS_MAX || len < 12) {
            t->closed = 1;
            bufferevent_free(t->bev);
            t->bev = NULL;
            dns_tcp_release(t);
            return;
        }
        if (evbuffer_get_length(in) < len + 2)
            return;
        uint8_t msg[DNS_MAX];
        evbuffer_drain(in, 2);
        evbuffer_remove(in, msg, len);
        dns_handle(t->cl, t, NULL, 0, msg, len);
    }
}

/* The answers drained below the write watermark: read questions again. */
static void on_dns_tcp_drained(struct bufferevent *bev, void *arg)
{
    if (bufferevent_get_enabled(bev) & EV_READ)
        return;
    bufferevent_enable(bev, EV_READ);
    on_dns_tcp_read(bev, arg); /* questions already read wait in the input */
}

static void on_dns_tcp_event(struct bufferevent *bev, short what, void *arg)
{
    dns_tcp *t = arg;
    t->closed = 1;
    bufferevent_free(t->bev);
    t->bev = NULL;
    dns_tcp_release(t);
}

static void on_dns_tcp_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                              int socklen, void *arg)
{
    funcd_egress_client *cl = arg;
    funcd_egress *eg = cl->eg;
    dns_tcp *t = calloc(1, sizeof(*t)); /* fd is non-blocking (accept4) */
    if (!t || !(t->bev = bufferevent_socket_new(eg->base, fd, BEV_OPT_CLOSE_ON_FREE))) {
        free(t);
        close(fd);
        return;
    }
    t->cl = cl;
    cl->refs++;
    t->next = eg->dns_conns;
    if (eg->dns_conns)
        eg->dns_conns->prev = t;
    eg->dns_conns = t;
    struct timeval tv = {HEAD_TIMEOUT_S, 0};
    bufferevent_set_timeouts(t->bev, &tv, &tv); /* also: answers not taken for this long */
    bufferevent_setwatermark(t->bev, EV_WRITE, DNS_TCP_OUT_MAX / 2, 0);
    bufferevent_setcb(t->bev, on_dns_tcp_read, on_dns_tcp_drained, on_dns_tcp_event, t);
    bufferevent_enable(t->bev, EV_READ);
}

/* ---- attaching, on the gateway's thread ---------------------------------- */

static void do_attach(funcd_egress *eg, funcd_egress_client *c)
{
    c->next = eg->clients;
    eg->clients = c;
    unsigned flags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC;
    if (c->fds[0] >= 0) {
        evutil_make_socket_nonblocking(c->fds[0]);
        c->proxy = evconnlistener_new(eg->base, on_proxy_accept, c, flags, 0, c->fds[0]);
        if (c->proxy)
            c->fds[0] = -1;
    }
    if (c->fds[1] >= 0) {
        evutil_make_socket_nonblocking(c->fds[1]);
        c->dns_udp = event_new(eg->base, c->fds[1], EV_READ | EV_PERSIST, on_dns_udp, c);
        if (c->dns_udp)
            event_add(c->dns_udp, NULL); /* fds[1] stays: closed with the client */
    }
    if (c->fds[2] >= 0) {
        evutil_make_socket_nonblocking(c->fds[2]);
        c->dns_tcp = evconnlistener_new(eg->base, on_dns_tcp_accept, c, flags, 0, c->fds[2]);
        if (c->dns_tcp)
            c->fds[2] = -1;
    }
}

static void do_detach(funcd_egress *eg, funcd_egress_client *c)
{
    for (funcd_egress_client **pp = &eg->clients; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    if (c->proxy)
        evconnlistener_free(c->proxy);
    if (c->dns_tcp)
        evconnlistener_free(c->dns_tcp);
    if (c->dns_udp)
        event_free(c->dns_udp);
    c->proxy = c->dns_tcp = NULL;
    c->dns_udp = NULL;
    if (c->fds[1] >= 0) {
        close(c->fds[1]);
        c->fds[1] = -1;
    }
    client_unref(c);
}

static void run_cmds(funcd_egress *eg)
{
    pthread_mutex_lock(&eg->lock);
    cmd *list = eg->cmds;
    eg->cmds = NULL;
    eg->cmds_tail = &eg->cmds;
    int stopping = eg->stopping;
    pthread_mutex_unlock(&eg->lock);
    while (list) {
        cmd *x = list;
        list = x->next;
        if (x->type == CMD_ATTACH)
            do_attach(eg, x->client);
        else
            do_detach(eg, x->client);
        free(x);
    }
    if (stopping) {
        while (eg->conns)
            conn_free(eg->conns);
        while (eg->queries)
            query_free(eg->queries);
        while (eg->dns_conns) {
            dns_tcp *t = eg->dns_conns;
            t->closed = 1;
            t->pending = 0;
            dns_tcp_release(t);
        }
        while (eg->clients)
            do_detach(eg, eg->clients);
        event_base_loopbreak(eg->base);
    }
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    run_cmds(arg);
}

static int post(funcd_egress *eg, cmd_type type, funcd_egress_client *c)
{
    cmd *x = calloc(1, sizeof(*x));
    if (!x)
        return -1;
    x->type = type;
    x->client = c;
    pthread_mutex_lock(&eg->lock);
    *eg->cmds_tail = x;
    eg->cmds_tail = &x->next;
    pthread_mutex_unlock(&eg->lock);
    event_active(eg->wake, EV_READ, 0);
    return 0;
}

funcd_egress_client *funcd_egress_attach(funcd_egress *eg, const char *ns, const char *fn,
                                         const char *replica, int proxy, int dns_udp,
                                         int dns_tcp)
{
    funcd_egress_client *c = calloc(1, sizeof(*c));
    if (!c || !(c->ns = strdup(ns)) || !(c->fn = strdup(fn)) ||
        !(c->replica = strdup(replica ? replica : ""))) {
        if (c) {
            free(c->ns);
            free(c->fn);
            free(c);
        }
        goto fail;
    }
    c->eg = eg;
    c->refs = 1;
    c->fds[0] = proxy;
    c->fds[1] = dns_udp;
    c->fds[2] = dns_tcp;
    if (post(eg, CMD_ATTACH, c) < 0) {
        free(c->ns);
        free(c->fn);
        free(c->replica);
        free(c);
        goto fail;
    }
    return c;
fail:
    if (proxy >= 0)
        close(proxy);
    if (dns_udp >= 0)
        close(dns_udp);
    if (dns_tcp >= 0)
        close(dns_tcp);
    return NULL;
}

void funcd_egress_detach(funcd_egress *eg, funcd_egress_client *c)
{
    if (!c)
        return;
    while (post(eg, CMD_DETACH, c) < 0) /* the only way to let go of it */
        usleep(1000);
}

/* ---- policies from the store --------------------------------------------- */

static void policy_event(funcd_egress *eg, const char *key, const void *value, size_t len,
                         int deleted)
{
    const funcd_kind *kind;
    char ns[128], name[128];
    if (funcd_objects_parse_key(key, &kind, ns, sizeof(ns), name, sizeof(name)) < 0)
        return;
    if (deleted) {
        funcd_egress_policies_remove(eg->policies, ns, name);
        return;
    }
    cJSON *obj = funcd_objects_decode(value, len, 0);
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(obj, "spec");
    if (!obj || funcd_egress_policies_put(eg->policies, ns, name, spec) < 0)
        funcd_log(eg->cfg.logger, FUNCD_LOG_WARN,
                  "egress: EgressPolicy %s/%s cannot be used: %s", ns, name,
                  obj ? funcd_error_last()->message : "not an object");
    cJSON_Delete(obj);
}

static int on_listed(const funcd_store_kv *kv, void *payload)
{
    policy_event(payload, kv->key, kv->value, kv->len, 0);
    return 0;
}

static void on_store_event(const funcd_store_event *ev, void *payload)
{
    policy_event(payload, ev->key, ev->value, ev->len, ev->type == FUNCD_STORE_EVENT_DELETE);
}

int funcd_egress_watch(funcd_egress *eg, funcd_store *store)
{
    funcd_buf prefix = FUNCD_BUF_INIT;
    uint64_t rev = 0;
    int rc = funcd_objects_prefix(&prefix, funcd_kind_by_kind("EgressPolicy"), NULL);
    if (rc == 0)
        rc = funcd_port_store_list(store, prefix.data, on_listed, eg, &rev);
    if (rc == 0)
        rc = funcd_port_store_watch(store, prefix.data, rev, on_store_event, eg, &eg->watch);
    funcd_buf_free(&prefix);
    if (rc == 0)
        eg->store = store;
    return rc;
}

void funcd_egress_unwatch(funcd_egress *eg)
{
    if (eg && eg->watch) {
        funcd_port_store_unwatch(eg->store, eg->watch);
        eg->watch = NULL;
    }
}

/* ---- the gateway --------------------------------------------------------- */

/* "ip", "ip:port", "[v6]:port", "[v6]", or a bare v6 address. */
static int parse_upstream(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
    int l = (int)sizeof(*ss);
    memset(ss, 0, sizeof(*ss));
    if (evutil_parse_sockaddr_port(s, (struct sockaddr *)ss, &l) < 0)
        return -1;
    if (ss->ss_family == AF_INET && ((struct sockaddr_in *)ss)->sin_port == 0)
        ((struct sockaddr_in *)ss)->sin_port = htons(53);
    if (ss->ss_family == AF_INET6 && ((struct sockaddr_in6 *)ss)->sin6_port == 0)
        ((struct sockaddr_in6 *)ss)->sin6_port = htons(53);
    *len = (socklen_t)l;
    return 0;
}

/* The first "nameserver" of /etc/resolv.conf, into `out`. */
static int host_nameserver(char *out, size_t len)
{
    FILE *f = fopen("/etc/resolv.conf", "re");
    if (!f)
        return -1;
    char line[512];
    int rc = -1;
    while (rc < 0 && fgets(line, sizeof(line), f)) {
        char addr[256];
        if (sscanf(line, " nameserver %255s", addr) == 1) {
            char *pct = strchr(addr, '%'); /* a zone id: not for us */
            if (pct)
                *pct = '\0';
            if (strchr(addr, ':'))
                snprintf(out, len, "[%s]:53", addr);
            else
                snprintf(out, len, "%s", addr);
            rc = 0;
        }
    }
    fclose(f);
    return rc;
}

/* Whether the host reaches IPv6 beyond loopback and link-local, as
 * getaddrinfo's AI_ADDRCONFIG would judge it (a UDP connect sends nothing). */
static int host_has_ipv6(void)
{
    int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(53)};
    inet_pton(AF_INET6, "2001:db8::1", &a.sin6_addr);
    struct sockaddr_in6 me;
    socklen_t len = sizeof(me);
    int ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
             getsockname(fd, (struct sockaddr *)&me, &len) == 0 &&
             !IN6_IS_ADDR_LOOPBACK(&me.sin6_addr) && !IN6_IS_ADDR_LINKLOCAL(&me.sin6_addr) &&
             !IN6_IS_ADDR_UNSPECIFIED(&me.sin6_addr);
    close(fd);
    return ok;
}

static void *thread_main(void *arg)
{
    funcd_egress *eg = arg;
    event_base_loop(eg->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

int funcd_egress_new(funcd_egress **out, const funcd_egress_config *cfg)
{
    *out = NULL;
    funcd_egress *eg = calloc(1, sizeof(*eg));
    if (!eg)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the egress gateway");
    eg->cfg = *cfg;
    if (!eg->cfg.connect_timeout_ms)
        eg->cfg.connect_timeout_ms = 10000;
    if (!eg->cfg.idle_timeout_ms)
        eg->cfg.idle_timeout_ms = 300000;
    if (!eg->cfg.relay_shrink_ms)
        eg->cfg.relay_shrink_ms = RELAY_SHRINK_MS;
    pthread_mutex_init(&eg->lock, NULL);
    eg->cmds_tail = &eg->cmds;
    char found[300];
    const char *up = cfg->dns_upstream && *cfg->dns_upstream ? cfg->dns_upstream : NULL;
    if (!up && host_nameserver(found, sizeof(found)) == 0)
        up = found;
    int rc;
    if (!up) {
        rc = funcd_error_set(FUNCD_EINVAL, "egress: /etc/resolv.conf names no nameserver; give "
                                           "one (--egress-dns-upstream)");
        goto fail;
    }
    if (parse_upstream(up, &eg->upstream, &eg->upstream_len) < 0) {
        rc = funcd_error_set(FUNCD_EINVAL,
                             "egress: DNS upstream \"%s\" is not an address (ip, ip:port or "
                             "[ipv6]:port)",
                             up);
        goto fail;
    }
    if (!(eg->upstream_text = strdup(up)) || !(eg->policies = funcd_egress_policies_new()) ||
        !(eg->base = event_base_new()) ||
        !(eg->cache = funcd_egress_dns_cache_new(FUNCD_EGRESS_DNS_CACHE_MAX)) ||
        !(eg->wake = event_new(eg->base, -1, EV_READ, on_wake, eg)) ||
        !(eg->spare_trim = evtimer_new(eg->base, on_spare_trim, eg))) {
        rc = funcd_error_set(FUNCD_ENOMEM, "out of memory creating the egress gateway");
        goto fail;
    }
    eg->have_v6 = host_has_ipv6();
    if (pthread_create(&eg->thread, NULL, thread_main, eg) != 0) {
        rc = funcd_error_set(FUNCD_ENOMEM, "egress: cannot start its thread");
        goto fail;
    }
    eg->started = 1;
    (void)pthread_setname_np(eg->thread, "funcd-egress"); /* for top -H, perf, the bench */
    funcd_log(cfg->logger, FUNCD_LOG_INFO, "egress: gateway up; DNS upstream %s", up);
    *out = eg;
    return 0;
fail:
    funcd_egress_free(eg);
    return rc;
}

void funcd_egress_free(funcd_egress *eg)
{
    if (!eg)
        return;
    funcd_egress_unwatch(eg);
    if (eg->started) {
        pthread_mutex_lock(&eg->lock);
        eg->stopping = 1;
        pthread_mutex_unlock(&eg->lock);
        event_active(eg->wake, EV_READ, 0);
        pthread_join(eg->thread, NULL);
    }
    run_cmds(eg); /* whatever was posted after the loop ended */
    while (eg->clients)
        do_detach(eg, eg->clients);
    if (eg->wake)
        event_free(eg->wake);
    if (eg->spare_trim)
        event_free(eg->spare_trim);
    eg->spare_trim = NULL;
    spares_free(eg);
    funcd_egress_dns_cache_free(eg->cache);
    if (eg->base)
        event_base_free(eg->base);
    funcd_egress_policies_free(eg->policies);
    free(eg->upstream_text);
    pthread_mutex_destroy(&eg->lock);
    free(eg);
}

size_t funcd_egress_relay_grown(funcd_egress *eg)
{
    return atomic_load(&eg->relay_grown);
}

funcd_egress_policies *funcd_egress_policies_of(funcd_egress *eg)
{
    return eg->policies;
}
