/*
 * /async/fn/{ns}/{name}/{rest} (async.h): a call from a gateway thread is
 * queued in an inbox; on the loop it is checked (the function exists, its
 * edge's authentication and body cap, X-Callback-Url), persisted through
 * funcd_queue_submit, and answered 202. The answer goes out only after the
 * store and the blob have the request: a crash after a 202 loses nothing.
 */
#include "eventing/async.h"

#include <cjson/cJSON.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "eventing/queue_internal.h"
#include "funcd/sys/error.h"
#include "gateway/prefix.h"
#include "serving/serving.h"
#include "util/misc.h"

#define PREFIX "/async/fn/"
#define MAX_HEADERS 64

typedef struct pending {
    funcd_gw_call *call;
    struct pending *next;
} pending;

struct funcd_async {
    funcd_async_config cfg;
    pthread_mutex_t lock; /* the inbox and `closed` */
    pending *inbox, *inbox_tail;
    int closed;
    struct event *kick;
};

/* Headers a queued request does not keep: the token (never stored; the
 * worker gets who it was), our own, and what the exchange sets anew. */
static int dropped(const char *name)
{
    static const char *const drop[] = {"authorization", "x-callback-url", "x-funcd-subject",
                                       "x-funcd-invocation-id", "connection", "keep-alive",
                                       "proxy-connection", "te", "trailer", "transfer-encoding",
                                       "upgrade", "content-length", "host", "expect", NULL};
    for (const char *const *d = drop; *d; d++)
        if (strcasecmp(name, *d) == 0)
            return 1;
    return 0;
}

static int dns_name(const char *s, size_t n)
{
    if (n == 0 || n > 253)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' ||
              s[i] == '.'))
            return 0;
    return 1;
}

/* 429 with Retry-After and a JSON Status naming the cap. */
static void answer_full(funcd_gw_call *call, const char *why)
{
    cJSON *st = cJSON_CreateObject();
    cJSON_AddStringToObject(st, "kind", "Status");
    cJSON_AddStringToObject(st, "apiVersion", "v1");
    cJSON_AddStringToObject(st, "status", "Failure");
    cJSON_AddStringToObject(st, "message", why);
    cJSON_AddStringToObject(st, "reason", "TooManyRequests");
    cJSON_AddNumberToObject(st, "code", 429);
    char *json = cJSON_PrintUnformatted(st);
    cJSON_Delete(st);
    if (!json) {
        funcd_gw_call_answer_status(call, 503, "ServiceUnavailable", "out of memory");
        return;
    }
    char retry[16];
    snprintf(retry, sizeof(retry), "%d", FUNCD_QUEUE_RETRY_AFTER_S);
    const char *headers[] = {"Retry-After", retry, NULL};
    funcd_gw_call_answer(call, 429, "application/json", headers, json, strlen(json));
    free(json);
}

static void handle(funcd_async *a, funcd_gw_call *call)
{
    const char *raw = funcd_gw_call_path(call);
    const char *ns = raw + strlen(PREFIX);
    const char *q = strchr(ns, '?');
    const char *path_end = q ? q : ns + strlen(ns);
    const char *slash = memchr(ns, '/', (size_t)(path_end - ns));
    const char *name = slash ? slash + 1 : path_end;
    const char *rest = memchr(name, '/', (size_t)(path_end - name));
    size_t nsl = slash ? (size_t)(slash - ns) : (size_t)(path_end - ns);
    size_t nl = slash ? (size_t)((rest ? rest : path_end) - name) : 0;
    if (!dns_name(ns, nsl) || !dns_name(name, nl)) {
        funcd_gw_call_answer_status(call, 404, "NotFound", "no function in path %.200s: use "
                                    "/async/fn/{namespace}/{name}/", raw);
        return;
    }
    for (const char *c = rest ? rest : q ? q : ""; *c; c++)
        if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f) {
            funcd_gw_call_answer_status(call, 400, "BadRequest", "the path after the function "
                                        "name has a character that must be percent-encoded");
            return;
        }
    char nsb[256], nameb[256];
    snprintf(nsb, sizeof(nsb), "%.*s", (int)nsl, ns);
    snprintf(nameb, sizeof(nameb), "%.*s", (int)nl, name);
    funcd_edge_auth auth;
    uint64_t max_body = 0;
    if (funcd_serving_edge_of(a->cfg.serving, nsb, nameb, &auth, &max_body) < 0) {
        funcd_gw_call_answer_status(call, 404, "NotFound", "function %s/%s does not exist", nsb,
                                    nameb);
        return;
    }
    size_t body_len = 0;
    const void *body = funcd_gw_call_body(call, &body_len);
    if (max_body && body_len > max_body) {
        funcd_gw_call_answer_status(call, 413, "RequestEntityTooLarge", "the request body is "
                                    "larger than function %s/%s takes (spec.edge.limits."
                                    "maxBodyBytes: %llu bytes)", nsb, nameb,
                                    (unsigned long long)max_body);
        return;
    }
    if (!max_body && a->cfg.max_body && body_len > a->cfg.max_body) {
        funcd_gw_call_answer_status(call, 413, "RequestEntityTooLarge", "the request body is "
                                    "larger than /async/ takes (%llu bytes, funcd "
                                    "--async-max-body); function %s/%s may take more with "
                                    "spec.edge.limits.maxBodyBytes",
                                    (unsigned long long)a->cfg.max_body, nsb, nameb);
        return;
    }
    char subject[256] = "", message[512] = "";
    if (auth != FUNCD_EDGE_AUTH_OPEN) {
        if (!a->cfg.authorize) {
            funcd_gw_call_answer_status(call, 503, "ServiceUnavailable", "function %s/%s needs "
                                        "authentication and this gateway has no way to check "
                                        "tokens", nsb, nameb);
            return;
        }
        const char *token = funcd_gw_call_header(call, "authorization");
        int code = a->cfg.authorize(a->cfg.authorize_payload, nsb, token ? token : "",
                                    token ? strlen(token) : 0, subject, sizeof(subject), message,
                                    sizeof(message));
        if (code) {
            funcd_gw_call_answer_status(call, code == 403 ? 403 : 401,
                                        code == 403 ? "Forbidden" : "Unauthorized", "%s", message);
            return;
        }
    }
    const char *callback = funcd_gw_call_header(call, "x-callback-url");
    char why[200];
    if (callback && funcd_queue_callback_url_ok(a->cfg.queue, callback, why, sizeof(why)) < 0) {
        funcd_gw_call_answer_status(call, 400, "BadRequest", "%s", why);
        return;
    }
    /* The request's headers, less what is not kept, plus who called. */
    const char *headers[2 * MAX_HEADERS + 3];
    size_t n = 0;
    for (const char *const *h = funcd_gw_call_headers(call); h && h[0] && h[1]; h += 2)
        if (!dropped(h[0]) && n < 2 * MAX_HEADERS) {
            headers[n++] = h[0];
            headers[n++] = h[1];
        }
    if (subject[0]) {
        headers[n++] = "X-Funcd-Subject";
        headers[n++] = subject;
    }
    headers[n] = NULL;
    uint64_t timeout_ms = 0;
    int known = 0;
    funcd_fn_target *t = funcd_serving_route(a->cfg.serving, nsb, nameb, &timeout_ms, &known);
    funcd_fn_target_unref(t);
    funcd_queue_item item = {
        .ns = nsb,
        .function = nameb,
        .method = funcd_gw_call_method(call),
        .path = rest ? rest : q ? q : "",
        .headers = headers,
        .body = body,
        .body_len = body_len,
        .delivery = {.timeout_ms = timeout_ms},
        .callback_url = callback,
        .anonymous = auth == FUNCD_EDGE_AUTH_OPEN, /* no token was asked for */
    };
    char id[FUNCD_QUEUE_ID_MAX];
    int rc = funcd_queue_submit(a->cfg.queue, &item, id, sizeof(id));
    if (rc == FUNCD_EINVAL) {
        funcd_gw_call_answer_status(call, 400, "BadRequest", "%s", funcd_error_last()->message);
        return;
    }
    if (rc == FUNCD_ENOSPC) { /* a cap of the namespace's queue: nothing was stored */
        answer_full(call, funcd_error_last()->message);
        return;
    }
    if (rc < 0) {
        funcd_log(a->cfg.logger, FUNCD_LOG_WARN, "async invocation of %s/%s not queued: %s", nsb,
                  nameb, funcd_error_last()->message);
        funcd_gw_call_answer_status(call, 503, "ServiceUnavailable", "the invocation could not "
                                    "be queued (the store is unavailable); retry later");
        return;
    }
    char location[700], json[900];
    snprintf(location, sizeof(location), "/apis/funcd.dev/v1/namespaces/%s/invocations/%s", nsb,
             id);
    snprintf(json, sizeof(json),
             "{\"kind\":\"Invocation\",\"apiVersion\":\"funcd.dev/v1\",\"metadata\":{\"name\":"
             "\"%s\",\"namespace\":\"%s\"},\"status\":{\"state\":\"Pending\"}}\n",
             id, nsb);
    const char *res_headers[] = {"X-Funcd-Invocation-Id", id, "Location", location,
                                 "X-Call-Id", id, NULL};
    funcd_gw_call_answer(call, 202, "application/json", res_headers, json, strlen(json));
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    funcd_async *a = arg;
    pthread_mutex_lock(&a->lock);
    pending *list = a->inbox;
    a->inbox = a->inbox_tail = NULL;
    pthread_mutex_unlock(&a->lock);
    while (list) {
        pending *p = list;
        list = p->next;
        handle(a, p->call);
        free(p);
    }
}

void funcd_async_call(funcd_gw_call *call, funcd_async *a)
{
    pending *p = a ? calloc(1, sizeof(*p)) : NULL;
    if (!p) {
        funcd_gw_call_answer_status(call, 503, "ServiceUnavailable", "async invocations are not "
                                    "available now; retry later");
        return;
    }
    p->call = call;
    pthread_mutex_lock(&a->lock);
    int closed = a->closed;
    if (!closed) {
        if (a->inbox_tail)
            a->inbox_tail->next = p;
        else
            a->inbox = p;
        a->inbox_tail = p;
    }
    pthread_mutex_unlock(&a->lock);
    if (closed) {
        free(p);
        funcd_gw_call_answer_status(call, 503, "ServiceUnavailable", "funcd is shutting down");
        return;
    }
    event_active(a->kick, EV_READ, 0);
}

int funcd_async_new(funcd_async **out, const funcd_async_config *cfg)
{
    *out = NULL;
    funcd_async *a = calloc(1, sizeof(*a));
    if (!a)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory");
    a->cfg = *cfg;
    pthread_mutex_init(&a->lock, NULL);
    if (!(a->kick = event_new(cfg->loop, -1, 0, on_kick, a))) {
        funcd_async_free(a);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory");
    }
    *out = a;
    return 0;
}

void funcd_async_close(funcd_async *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    a->closed = 1;
    pending *list = a->inbox;
    a->inbox = a->inbox_tail = NULL;
    pthread_mutex_unlock(&a->lock);
    while (list) {
        pending *p = list;
        list = p->next;
        funcd_gw_call_answer_status(p->call, 503, "ServiceUnavailable", "funcd is shutting down");
        free(p);
    }
}

void funcd_async_free(funcd_async *a)
{
    if (!a)
        return;
    funcd_async_close(a);
    if (a->kick)
        event_free(a->kick);
    pthread_mutex_destroy(&a->lock);
    free(a);
}
