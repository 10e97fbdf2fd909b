/*
 * X-Callback-Url: the result of a finished async invocation is POSTed to
 * the URL its caller gave, as OpenFaaS does: the function's answer as the
 * body, its status in X-Funcd-Status (and X-Function-Status), the id in
 * X-Funcd-Invocation-Id (and X-Call-Id), the final state in X-Funcd-State.
 *
 * The caller may be anyone who can reach the data plane, and funcd itself
 * sends the request (no sandbox, no egress policy): so the host is resolved
 * here and the connection goes to an address that was checked, never to a
 * loopback, link-local, unspecified or multicast one, nor one of this
 * node's own, unless the operator allowed it (funcd --callback-allow), and
 * never to funcd's own listeners (review17-controlplane M-1).
 *
 * One try, no retry: the result stays readable at the invocation's
 * Location for the retention, which is where a caller that missed the
 * callback looks; the record's `callback` says how it went. libevent's HTTP
 * client, on the platform loop.
 */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <event2/buffer.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/util.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "egress/policy.h"
#include "eventing/queue_internal.h"
#include "funcd/sys/error.h"
#include "port/store.h"
#include "util/log.h"

#define CALLBACK_TIMEOUT_S 10
#define MAX_IN_FLIGHT 256 /* callbacks on their way at once; more are skipped */
#define MAX_IN_FLIGHT_NS 64 /* of them one namespace's: a tarpit URL holds its own */

typedef struct cb_ctx {
    funcd_callbacks *owner;
    struct evhttp_connection *conn;
    struct event *reap; /* frees the connection once its request is done */
    struct evhttp_request *req;              /* made, not yet sent (resolving) */
    struct evdns_getaddrinfo_request *lookup; /* the host's, under way */
    char host[256], target[2200];
    int port;
    char ns[256], id[FUNCD_QUEUE_ID_MAX];
    char what[400]; /* "invocation ns/id to URL", for the log */
    struct cb_ctx *prev, *next;
} cb_ctx;

/* ---- where a callback may go -------------------------------------------- */

static int port_of(const struct sockaddr_storage *ss)
{
    return ntohs(ss->ss_family == AF_INET ? ((const struct sockaddr_in *)ss)->sin_port
                                          : ((const struct sockaddr_in6 *)ss)->sin6_port);
}

/* Why a callback may not connect to `a` port `port` (a sentence for the
 * log and the caller), or NULL when it may. */
static const char *refused(const funcd_callbacks *o, const funcd_egress_addr *a, int port,
                           char *why, size_t why_len)
{
    char as[INET6_ADDRSTRLEN];
    funcd_egress_addr_str(a, as, sizeof(as));
    const char *special = funcd_egress_special(a);
    int own = !special && funcd_egress_node_address(a);
    static const uint8_t any[16];
    for (size_t i = 0; i < o->n_listeners; i++) {
        funcd_egress_addr l;
        if (port_of(&o->listeners[i]) != port ||
            funcd_egress_addr_from_sockaddr((const struct sockaddr *)&o->listeners[i], &l) < 0)
            continue;
        int wildcard = memcmp(l.addr, any, 16) == 0;
        if ((l.family == a->family && memcmp(l.addr, a->addr, 16) == 0) ||
            (wildcard && (special || own))) {
            snprintf(why, why_len, "%s port %d is funcd's own listener", as, port);
            return why;
        }
    }
    for (size_t i = 0; i < o->n_allow; i++)
        if (funcd_egress_cidr_contains(&o->allow[i], a->family, a->addr))
            return NULL;
    if (!special && !own)
        return NULL;
    snprintf(why, why_len, "%s is %s; callbacks to internal addresses are refused unless the "
             "operator allows them (funcd --callback-allow)", as,
             special ? special : "this node's own address");
    return why;
}

static int parse_allow(funcd_callbacks *o, const char *list)
{
    for (const char *s = list; s && *s;) {
        size_t n = strcspn(s, ",");
        char one[64];
        snprintf(one, sizeof(one), "%.*s", (int)(n < sizeof(one) - 1 ? n : sizeof(one) - 1), s);
        funcd_egress_cidr c;
        if (n && funcd_egress_parse_cidr(one, &c) == 0) { /* (checked by the options) */
            funcd_egress_cidr *v = realloc(o->allow, (o->n_allow + 1) * sizeof(*v));
            if (!v)
                return funcd_error_set(FUNCD_ENOMEM, "out of memory");
            o->allow = v;
            o->allow[o->n_allow++] = c;
        }
        s += n + (s[n] == ',');
    }
    return 0;
}

int funcd_callbacks_init(funcd_callbacks *o, struct event_base *loop, funcd_store *store,
                         const funcd_logger *logger, const char *const *allow,
                         const char *const listeners[4])
{
    memset(o, 0, sizeof(*o));
    o->loop = loop;
    o->store = store;
    o->logger = logger;
    for (size_t i = 0; i < 4; i++) {
        int len = (int)sizeof(o->listeners[0]);
        if (listeners[i] && *listeners[i] &&
            evutil_parse_sockaddr_port(listeners[i], (struct sockaddr *)&o->listeners[o->n_listeners],
                                       &len) == 0)
            o->n_listeners++;
    }
    for (const char *const *a = allow; a && *a; a++)
        if (parse_allow(o, *a) < 0)
            return FUNCD_ENOMEM;
    /* The host's resolver (resolv.conf, /etc/hosts) on the loop, answering
     * later: a slow DNS server holds one callback, not funcd's loop. */
    if (!(o->dns = evdns_base_new(loop, EVDNS_BASE_INITIALIZE_NAMESERVERS)) &&
        !(o->dns = evdns_base_new(loop, 0)))
        return FUNCD_ENOMEM;
    return 0;
}

/* The URL's host and port; the host without an IPv6 literal's brackets. */
static int split_url(const struct evhttp_uri *u, char *host, size_t host_len, int *port)
{
    const char *h = evhttp_uri_get_host(u);
    if (!h || !*h)
        return -1;
    size_t n = strlen(h);
    if (h[0] == '[' && n > 2 && h[n - 1] == ']')
        snprintf(host, host_len, "%.*s", (int)(n - 2), h + 1);
    else
        snprintf(host, host_len, "%s", h);
    *port = evhttp_uri_get_port(u) < 0 ? 80 : evhttp_uri_get_port(u);
    return 0;
}

int funcd_queue_callback_url_ok(funcd_queue *q, const char *url, char *why, size_t why_len)
{
    struct evhttp_uri *u = url ? evhttp_uri_parse(url) : NULL;
    const char *scheme = u ? evhttp_uri_get_scheme(u) : NULL;
    char host[256];
    int port = 0;
    int ok = u && scheme && strcmp(scheme, "http") == 0 &&
             split_url(u, host, sizeof(host), &port) == 0 && strlen(url) <= 2048;
    if (!ok)
        snprintf(why, why_len, "X-Callback-Url must be an http:// URL with a host (at most "
                 "2048 bytes)");
    funcd_egress_addr a;
    char reason[300];
    if (ok && funcd_egress_addr_parse(host, &a) == 0 &&
        refused(funcd_queue_callbacks(q), &a, port, reason, sizeof(reason))) {
        snprintf(why, why_len, "X-Callback-Url: %s", reason);
        ok = 0;
    }
    if (u)
        evhttp_uri_free(u);
    return ok ? 0 : -1;
}

/* ---- the outcome, on the invocation's record ------------------------------ */

/* record.callback = {state, statusCode, error}: Delivered (2xx), Failed (an
 * answer of another status, or none), Refused (the address), Skipped (too
 * many on their way). A few tries against concurrent writes; a record gone
 * (swept) or a store away: only the log has it. */
static void record(funcd_callbacks *o, const char *ns, const char *id, const char *state,
                   int code, const char *error)
{
    char key[600];
    funcd_queue_key(key, sizeof(key), FUNCD_QUEUE_RECORDS, ns, id);
    for (int tries = 0; tries < 3; tries++) {
        funcd_store_value v = {0};
        if (funcd_port_store_get(o->store, key, &v) < 0)
            return;
        cJSON *rec = cJSON_ParseWithLength(v.value, v.len);
        free(v.value);
        cJSON *cb = cJSON_CreateObject();
        char *text = NULL;
        if (rec && cb) {
            cJSON_AddStringToObject(cb, "state", state);
            if (code)
                cJSON_AddNumberToObject(cb, "statusCode", code);
            if (error)
                cJSON_AddStringToObject(cb, "error", error);
            cJSON_DeleteItemFromObjectCaseSensitive(rec, "callback");
            cJSON_AddItemToObject(rec, "callback", cb);
            cb = NULL;
            text = cJSON_PrintUnformatted(rec);
        }
        cJSON_Delete(cb);
        cJSON_Delete(rec);
        int rc = text ? funcd_port_store_put(o->store, key, text, strlen(text), v.revision, NULL)
                      : FUNCD_ENOMEM;
        free(text);
        if (rc != FUNCD_ECONFLICT)
            return;
    }
}

/* ---- sending --------------------------------------------------------------- */

static void ctx_free(cb_ctx *c)
{
    funcd_callbacks *o = c->owner;
    if (c->prev)
        c->prev->next = c->next;
    else
        o->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->lookup) /* its callback runs now, cancelled, and lets go of it */
        evdns_getaddrinfo_cancel(c->lookup);
    if (c->req)
        evhttp_request_free(c->req); /* never sent */
    if (c->conn)
        evhttp_connection_free(c->conn); /* a request still out goes with it, unanswered */
    if (c->reap)
        event_free(c->reap);
    o->in_flight--;
    free(c);
}

static void on_reap(evutil_socket_t fd, short what, void *arg)
{
    ctx_free(arg);
}

void funcd_callbacks_free(funcd_callbacks *o)
{
    while (o->head)
        ctx_free(o->head);
    if (o->dns)
        evdns_base_free(o->dns, 0);
    o->dns = NULL;
    free(o->allow);
    o->allow = NULL;
    o->n_allow = 0;
}

static void on_done(struct evhttp_request *req, void *arg)
{
    cb_ctx *c = arg;
    int code = req ? evhttp_request_get_response_code(req) : 0;
    int ok = code >= 200 && code < 300;
    if (!ok)
        funcd_log(c->owner->logger, FUNCD_LOG_WARN, "callback of %s: %s %d", c->what,
                  code ? "answered" : "failed", code);
    record(c->owner, c->ns, c->id, ok ? "Delivered" : "Failed", code,
           code ? NULL : "no answer (connection refused, reset or timed out)");
    /* libevent frees the request after this returns; the connection (ours)
     * goes on the loop's next turn. */
    event_active(c->reap, EV_TIMEOUT, 0);
}

/* The first address of `res` that a callback may reach, as a numeric
 * string in `out`; else -1 with why in `why`. */
static int pick_address(const funcd_callbacks *o, struct evutil_addrinfo *res, int port,
                        char *out, size_t out_len, char *why, size_t why_len)
{
    int found = 0;
    snprintf(why, why_len, "no address");
    for (struct evutil_addrinfo *ai = res; ai && !found; ai = ai->ai_next) {
        funcd_egress_addr a;
        char reason[300];
        if (funcd_egress_addr_from_sockaddr(ai->ai_addr, &a) < 0)
            continue;
        if (refused(o, &a, port, reason, sizeof(reason))) {
            if (ai == res)
                snprintf(why, why_len, "%s", reason);
            continue;
        }
        funcd_egress_addr_str(&a, out, out_len);
        found = 1;
    }
    return found ? 0 : -1;
}

/* The host's addresses are in (or it could not be resolved): the request
 * goes to the first one a callback may reach. */
static void on_resolved(int err, struct evutil_addrinfo *res, void *arg)
{
    cb_ctx *c = arg;
    funcd_callbacks *o = c->owner;
    c->lookup = NULL;
    if (err == EVUTIL_EAI_CANCEL) { /* ctx_free is letting go of it */
        if (res)
            evutil_freeaddrinfo(res);
        return;
    }
    char addr[INET6_ADDRSTRLEN] = "", why[400] = "";
    int rc = err ? (snprintf(why, sizeof(why), "cannot resolve %s: %s", c->host,
                             evutil_gai_strerror(err)), -1)
                 : pick_address(o, res, c->port, addr, sizeof(addr), why, sizeof(why));
    if (res)
        evutil_freeaddrinfo(res);
    if (rc < 0) {
        funcd_log(o->logger, FUNCD_LOG_WARN, "callback of %s refused: %s", c->what, why);
        record(o, c->ns, c->id, "Refused", 0, why);
        event_active(c->reap, EV_TIMEOUT, 0);
        return;
    }
    c->conn = evhttp_connection_base_new(o->loop, NULL, addr, (unsigned short)c->port);
    if (!c->conn) {
        record(o, c->ns, c->id, "Failed", 0, "out of memory");
        event_active(c->reap, EV_TIMEOUT, 0);
        return;
    }
    evhttp_connection_set_timeout(c->conn, CALLBACK_TIMEOUT_S);
    struct evhttp_request *req = c->req;
    c->req = NULL;
    if (evhttp_make_request(c->conn, req, EVHTTP_REQ_POST, c->target) != 0) {
        /* libevent freed the request */
        funcd_log(o->logger, FUNCD_LOG_WARN, "callback of %s: cannot send it", c->what);
        record(o, c->ns, c->id, "Failed", 0, "cannot send it");
        event_active(c->reap, EV_TIMEOUT, 0);
    }
}

void funcd_queue_callback(funcd_callbacks *o, const char *url, const char *ns, const char *id,
                          const char *function, const char *state, const funcd_invoke_res *res)
{
    struct evhttp_uri *u = evhttp_uri_parse(url);
    char host[256], host_header[260];
    int port = 0;
    if (!u || split_url(u, host, sizeof(host), &port) < 0) {
        if (u)
            evhttp_uri_free(u);
        return;
    }
    snprintf(host_header, sizeof(host_header), "%s", evhttp_uri_get_host(u));
    const char *path = evhttp_uri_get_path(u);
    const char *query = evhttp_uri_get_query(u);
    char target[2200];
    snprintf(target, sizeof(target), "%s%s%s", path && *path ? path : "/", query ? "?" : "",
             query ? query : "");
    evhttp_uri_free(u);
    unsigned of_ns = 0;
    for (const cb_ctx *x = o->head; x; x = x->next)
        of_ns += strcmp(x->ns, ns) == 0;
    if (o->in_flight >= MAX_IN_FLIGHT || of_ns >= MAX_IN_FLIGHT_NS) {
        funcd_log(o->logger, FUNCD_LOG_WARN, "callback of invocation %s/%s to %.200s skipped: "
                  "%u callbacks are on their way (%u of namespace %s; at most %d, %d of one "
                  "namespace)", ns, id, url, o->in_flight, of_ns, ns, MAX_IN_FLIGHT,
                  MAX_IN_FLIGHT_NS);
        record(o, ns, id, "Skipped", 0, "too many callbacks on their way");
        return;
    }
    cb_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return;
    c->owner = o;
    c->next = o->head;
    if (o->head)
        o->head->prev = c;
    o->head = c;
    o->in_flight++;
    snprintf(c->ns, sizeof(c->ns), "%s", ns);
    snprintf(c->id, sizeof(c->id), "%s", id);
    snprintf(c->what, sizeof(c->what), "invocation %s/%s to %.200s", ns, id, url);
    snprintf(c->host, sizeof(c->host), "%s", host);
    snprintf(c->target, sizeof(c->target), "%s", target);
    c->port = port;
    c->req = evhttp_request_new(on_done, c);
    c->reap = event_new(o->loop, -1, 0, on_reap, c);
    if (!c->req || !c->reap) {
        ctx_free(c);
        return;
    }
    struct evkeyvalq *h = evhttp_request_get_output_headers(c->req);
    char status[16];
    snprintf(status, sizeof(status), "%d", res->status);
    evhttp_add_header(h, "Host", host_header);
    evhttp_add_header(h, "Connection", "close");
    evhttp_add_header(h, "X-Funcd-Invocation-Id", id);
    evhttp_add_header(h, "X-Call-Id", id);
    evhttp_add_header(h, "X-Funcd-Function", function ? function : "");
    evhttp_add_header(h, "X-Funcd-State", state ? state : "");
    evhttp_add_header(h, "X-Funcd-Status", status);
    evhttp_add_header(h, "X-Function-Status", status);
    if (res->error)
        evhttp_add_header(h, "X-Funcd-Error", res->error);
    evhttp_add_header(h, "Content-Type",
                      res->content_type ? res->content_type : "application/octet-stream");
    if (res->body_len)
        evbuffer_add(evhttp_request_get_output_buffer(c->req), res->body, res->body_len);
    /* The answer may come at once (a literal, /etc/hosts): on_resolved
     * then runs inside this call, and may hand `c` to the reaper. */
    struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct evdns_getaddrinfo_request *lookup =
        evdns_getaddrinfo(o->dns, host, NULL, &hints, on_resolved, c);
    if (lookup)
        c->lookup = lookup;
}
