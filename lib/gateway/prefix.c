/*
 * Requests answered from another thread (prefix.h). A call copies what it
 * needs of the request, so whoever answers never touches h2o; the answer
 * travels back as a message to the gateway thread's mailbox, which sends
 * it if the request is still there.
 *
 * A mailbox outlives its thread while calls are out: a call answered after
 * its thread ended is dropped (the platform answers every call before it
 * stops the gateway, so that is only a bound, never the plan).
 */
#include "gateway/prefix.h"

#include <ctype.h>
#include <h2o.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "http/httpd.h"
#include "util/status.h"
#include "util/misc.h"

typedef struct mailbox {
    pthread_mutex_t lock;
    int alive;     /* the thread still receives */
    unsigned refs; /* the thread's, and one per call out */
    unsigned out;  /* calls not yet delivered back */
    h2o_context_t *ctx;
    h2o_multithread_receiver_t receiver;
} mailbox;

struct funcd_gw_call {
    h2o_multithread_message_t msg;
    mailbox *box;
    h2o_req_t *req;          /* this thread only; NULL once the request went away */
    struct funcd_gw_call **slot; /* in the request's pool: cleared when answered */
    char *method, *path;
    char **headers; /* name, value, ..., NULL */
    void *body;
    size_t body_len;
    /* the answer */
    int status;
    char *content_type;
    char **res_headers;
    void *res_body;
    size_t res_len;
};

static _Thread_local mailbox *this_box;

static void box_unref(mailbox *b)
{
    pthread_mutex_lock(&b->lock);
    unsigned left = --b->refs;
    pthread_mutex_unlock(&b->lock);
    if (left == 0) {
        pthread_mutex_destroy(&b->lock);
        free(b);
    }
}

static void free_strv(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

static void call_free(funcd_gw_call *c)
{
    free(c->method);
    free(c->path);
    free_strv(c->headers);
    free(c->body);
    free(c->content_type);
    free_strv(c->res_headers);
    free(c->res_body);
    free(c);
}

static char **dup_strv(const char *const *v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    char **out = calloc(n + 1, sizeof(*out));
    for (size_t i = 0; out && i < n; i++)
        if (!(out[i] = strdup(v[i]))) {
            free_strv(out);
            return NULL;
        }
    return out;
}

/* ---- the table ------------------------------------------------------------ */

int funcd_gw_prefixes_add(funcd_gw_prefixes *t, const char *prefix, funcd_gw_prefix_fn fn,
                          void *payload)
{
    if (t->n == FUNCD_GW_MAX_PREFIXES || !prefix || !fn)
        return -1;
    if (!(t->e[t->n].prefix = strdup(prefix)))
        return -1;
    t->e[t->n].len = strlen(prefix);
    t->e[t->n].fn = fn;
    t->e[t->n].payload = payload;
    t->n++;
    return 0;
}

void funcd_gw_prefixes_clear(funcd_gw_prefixes *t)
{
    for (unsigned i = 0; i < t->n; i++)
        free(t->e[i].prefix);
    t->n = 0;
}

static void on_req_gone(void *p)
{
    funcd_gw_call *c = *(funcd_gw_call **)p;
    if (c)
        c->req = NULL;
}

static funcd_gw_call *copy_request(h2o_req_t *req)
{
    funcd_gw_call *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->method = strndup(req->method.base, req->method.len);
    c->path = strndup(req->path.base, req->path.len);
    c->headers = calloc(2 * req->headers.size + 1, sizeof(char *));
    c->body = malloc(req->entity.len ? req->entity.len : 1);
    if (!c->method || !c->path || !c->headers || !c->body) {
        call_free(c);
        return NULL;
    }
    if (req->entity.len)
        memcpy(c->body, req->entity.base, req->entity.len);
    c->body_len = req->entity.len;
    for (size_t i = 0; i < req->headers.size; i++) {
        const h2o_header_t *h = &req->headers.entries[i];
        char *name = strndup(h->name->base, h->name->len);
        char *value = strndup(h->value.base, h->value.len);
        c->headers[2 * i] = name;
        c->headers[2 * i + 1] = value;
        if (!name || !value) {
            call_free(c);
            return NULL;
        }
        for (char *s = name; *s; s++)
            *s = (char)tolower((unsigned char)*s);
    }
    return c;
}

int funcd_gw_prefixes_dispatch(const funcd_gw_prefixes *t, h2o_req_t *req)
{
    const char *p = req->path_normalized.base;
    size_t n = req->path_normalized.len;
    for (unsigned i = 0; i < t->n; i++) {
        if (n < t->e[i].len || memcmp(p, t->e[i].prefix, t->e[i].len) != 0)
            continue;
        funcd_gw_call *c = this_box ? copy_request(req) : NULL;
        if (!c) {
            static const char oom[] =
                "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
                "\"code\":503,\"reason\":\"ServiceUnavailable\",\"message\":\"out of memory\"}";
            funcd_httpd_send(req, 503, "application/json", oom, sizeof(oom) - 1);
            return 1;
        }
        c->req = req;
        c->box = this_box;
        c->slot = h2o_mem_alloc_shared(&req->pool, sizeof(*c->slot), on_req_gone);
        *c->slot = c;
        pthread_mutex_lock(&this_box->lock);
        this_box->refs++;
        this_box->out++;
        pthread_mutex_unlock(&this_box->lock);
        t->e[i].fn(c, t->e[i].payload);
        return 1;
    }
    return 0;
}

/* ---- answers ---------------------------------------------------------------- */

const char *funcd_gw_call_method(const funcd_gw_call *c)
{
    return c->method;
}

const char *funcd_gw_call_path(const funcd_gw_call *c)
{
    return c->path;
}

const char *funcd_gw_call_header(const funcd_gw_call *c, const char *name)
{
    for (size_t i = 0; c->headers[i]; i += 2)
        if (strcasecmp(c->headers[i], name) == 0)
            return c->headers[i + 1];
    return NULL;
}

const char *const *funcd_gw_call_headers(const funcd_gw_call *c)
{
    return (const char *const *)c->headers;
}

const void *funcd_gw_call_body(const funcd_gw_call *c, size_t *len)
{
    *len = c->body_len;
    return c->body;
}

/* This thread: send what came back, if the request is still there. */
static void on_answers(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    while (!h2o_linklist_is_empty(messages)) {
        funcd_gw_call *c = H2O_STRUCT_FROM_MEMBER(funcd_gw_call, msg.link, messages->next);
        h2o_linklist_unlink(&c->msg.link);
        mailbox *b = c->box;
        pthread_mutex_lock(&b->lock);
        b->out--;
        pthread_mutex_unlock(&b->lock);
        h2o_req_t *req = c->req;
        if (req) {
            *c->slot = NULL;
            req->res.status = c->status;
            req->res.reason = funcd_httpd_reason(c->status);
            const char *type = c->content_type ? c->content_type : "application/json";
            h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                           h2o_strdup(&req->pool, type, SIZE_MAX).base, strlen(type));
            for (size_t i = 0; c->res_headers && c->res_headers[i] && c->res_headers[i + 1];
                 i += 2)
            {
                /* Names are lowercased (h2o wants them so); both outlive the call. */
                h2o_iovec_t name = h2o_strdup(&req->pool, c->res_headers[i], SIZE_MAX);
                h2o_iovec_t value = h2o_strdup(&req->pool, c->res_headers[i + 1], SIZE_MAX);
                for (size_t k = 0; k < name.len; k++)
                    name.base[k] = (char)tolower((unsigned char)name.base[k]);
                h2o_add_header_by_str(&req->pool, &req->res.headers, name.base, name.len, 0, NULL,
                                      value.base, value.len);
            }
            /* with its length: see funcd_httpd_send */
            if (req->res.status >= 200 && req->res.status != 204 && req->res.status != 304)
                req->res.content_length = c->res_len;
            h2o_send_inline(req, c->res_body ? c->res_body : "", c->res_len);
        }
        call_free(c);
        box_unref(b);
    }
}

void funcd_gw_call_answer(funcd_gw_call *c, int status, const char *content_type,
                          const char *const *headers, const void *body, size_t len)
{
    c->status = status;
    c->content_type = strdup(content_type ? content_type : "application/json");
    c->res_headers = headers ? dup_strv(headers) : NULL;
    c->res_body = malloc(len ? len : 1);
    if (!c->content_type || !c->res_body || (headers && !c->res_headers)) {
        /* Out of memory: a bare 503 (on_answers copes with what is NULL). */
        c->status = 503;
        free_strv(c->res_headers);
        c->res_headers = NULL;
        len = 0;
    }
    if (c->res_body && len)
        memcpy(c->res_body, body, len);
    c->res_len = c->res_body ? len : 0;
    mailbox *b = c->box;
    pthread_mutex_lock(&b->lock);
    int alive = b->alive;
    if (alive)
        h2o_multithread_send_message(&b->receiver, &c->msg);
    else
        b->out--;
    pthread_mutex_unlock(&b->lock);
    if (!alive) { /* the thread has ended: nobody to answer */
        call_free(c);
        box_unref(b);
    }
}

void funcd_gw_call_answer_status(funcd_gw_call *c, int status, const char *reason,
                                 const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *body = funcd_status_json_v(status, reason, fmt, ap);
    va_end(ap);
    funcd_gw_call_answer(c, status, "application/json", NULL, body ? body : "{}",
                         body ? strlen(body) : 2);
    free(body);
}

/* ---- per thread ------------------------------------------------------------ */

void funcd_gw_prefix_thread_init(h2o_context_t *ctx)
{
    mailbox *b = calloc(1, sizeof(*b));
    if (!b)
        return; /* prefix requests on this thread get 503 */
    pthread_mutex_init(&b->lock, NULL);
    b->alive = 1;
    b->refs = 1;
    b->ctx = ctx;
    h2o_multithread_register_receiver(ctx->queue, &b->receiver, on_answers);
    this_box = b;
}

void funcd_gw_prefix_thread_exit(void)
{
    mailbox *b = this_box;
    if (!b)
        return;
    /* Answers on their way are delivered (the platform answers every call
     * before it stops the gateway); a bounded wait all the same. */
    int64_t deadline = funcd_mono_ms() + 2000;
    for (;;) {
        pthread_mutex_lock(&b->lock);
        unsigned out = b->out;
        pthread_mutex_unlock(&b->lock);
        if (!out || funcd_mono_ms() >= deadline)
            break;
        h2o_evloop_run(b->ctx->loop, 10);
    }
    pthread_mutex_lock(&b->lock);
    b->alive = 0;
    pthread_mutex_unlock(&b->lock);
    h2o_multithread_unregister_receiver(b->ctx->queue, &b->receiver);
    this_box = NULL;
    box_unref(b);
}
