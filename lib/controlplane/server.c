/*
 * h2o binding of the control plane. Plain requests are answered inline on
 * the server thread. A watch registers a store watch whose callback (on any
 * writer's thread) appends NDJSON lines to the stream's pending buffer and
 * wakes the server thread, which hands them to h2o one batch at a time.
 *
 * A stream holds at most `stream_limit` bytes (pending + the batch h2o is
 * sending; a watch's initial listing aside): a client that falls further
 * behind loses what is pending and gets a final ERROR event (429), and if it
 * does not take the batch in flight within HANGUP_MS, its connection is shut.
 */
#include "controlplane/server.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "funcd/sys/error.h"
#include "http/httpd.h"
#include "objects/objects.h"
#include "port/store.h"
#include "serving/serving.h"

/* Objects over MAX_BODY get a JSON 413 from us; bundles may be larger. h2o
 * itself refuses (with a plain-text 413) only what is too large to buffer. */
#define MAX_BODY (2 * 1024 * 1024)
#define MAX_BUFFERED_BODY (65 * 1024 * 1024)
/* How long a stream that overflowed may take to accept its batch in flight
 * before its connection is shut down. */
#define HANGUP_MS 10000

typedef struct stream stream;
typedef struct deferred deferred;

/* Requests whose answer a thread of their own makes at once, at most:
 * more are answered 503 (try again). */
#define MAX_DEFERRED 4

struct funcd_cp_server {
    funcd_cp *cp;
    funcd_httpd *httpd;
    pthread_mutex_t lock;  /* guards every stream's pending/dirty and the lists */
    stream *streams;       /* all open watch streams */
    stream *dirty;         /* streams with pending data, via next_dirty */
    h2o_multithread_receiver_t receiver;
    h2o_multithread_message_t wake;
    int wake_sent;
    int has_receiver;
    size_t stream_limit;           /* bytes a stream may hold */
    h2o_loop_t *loop;              /* the server thread's, once it runs */
    h2o_timeout_t hangup_timeout;  /* HANGUP_MS, on that loop */
    unsigned deferred_running;     /* under lock: threads making an answer */
    deferred *deferred_done;       /* under lock: answers made, to send */
    pthread_cond_t deferred_idle;  /* deferred_running fell to 0 */
};

/* A request answered by a thread (funcd_cp_deferred). The server thread
 * sends the answer if the request is still there: its pool's dispose
 * hook (`hook`) forgets it when h2o frees it first. Both ends run on the
 * server thread, so only the hand-over (deferred_done) takes the lock. */
typedef struct deferred_hook {
    deferred *d;
} deferred_hook;

struct deferred {
    funcd_cp_server *srv;
    h2o_req_t *req; /* NULL once h2o freed it */
    deferred_hook *hook;
    funcd_cp_deferred job;
    funcd_cp_response resp;
    pthread_t thread;
    deferred *next;
};

struct stream {
    h2o_generator_t gen; /* first: h2o hands it back to proceed/stop */
    h2o_req_t *req;
    funcd_cp_server *srv;
    funcd_store_watch *sw;
    funcd_log_ring *ring; /* logs: the ring followed */
    funcd_log_follower *follower;
    char log_invocation[64]; /* logs: only this invocation's lines ("": all) */
    stream *prev, *next; /* in srv->streams */
    stream *next_dirty;
    int is_dirty;
    funcd_buf pending; /* under srv->lock */
    funcd_buf sending; /* owned by the server thread while h2o sends it */
    size_t sending_len; /* sending.len, under srv->lock (for the limit) */
    size_t exempt;      /* bytes of the first batch the limit ignores (a
                           watch's initial listing); 0 once it went out */
    int overflowed;     /* under srv->lock: fell behind, ends with ERROR */
    h2o_timeout_entry_t hangup; /* server thread: linked after an overflow */
    int in_flight;     /* h2o_send outstanding, waiting for proceed */
    int closed;        /* the client went away */
    int finishing;     /* shutting down: end after what is pending */
    int finished;
    int redact; /* a viewer's watch of Secrets: values elided */
};

/* ---- plain requests --------------------------------------------------- */

static void send_response(h2o_req_t *req, funcd_cp_response *resp);
static void wake_locked(funcd_cp_server *srv);

static void deferred_free(deferred *d)
{
    if (d->hook)
        d->hook->d = NULL;
    funcd_cp_response_free(&d->resp);
    free(d);
}

static void on_deferred_req_gone(void *p)
{
    deferred_hook *h = p;
    if (h->d) {
        h->d->req = NULL;
        h->d->hook = NULL;
    }
}

static void *deferred_main(void *arg)
{
    deferred *d = arg;
    funcd_cp_server *srv = d->srv;
    d->job.run(d->job.arg, &d->resp);
    d->job.free_arg(d->job.arg);
    pthread_mutex_lock(&srv->lock);
    d->next = srv->deferred_done;
    srv->deferred_done = d;
    wake_locked(srv);
    if (--srv->deferred_running == 0)
        pthread_cond_broadcast(&srv->deferred_idle);
    pthread_mutex_unlock(&srv->lock);
    return NULL;
}

/* Hands `resp->defer` to a thread of its own; the answer goes out from
 * on_wake. 0, or -1 with `resp` answered (too many at once). */
static int start_deferred(funcd_cp_server *srv, h2o_req_t *req, funcd_cp_response *resp)
{
    deferred *d = calloc(1, sizeof(*d));
    deferred_hook *h = d ? h2o_mem_alloc_shared(&req->pool, sizeof(*h), on_deferred_req_gone)
                         : NULL;
    pthread_mutex_lock(&srv->lock);
    int room = srv->deferred_running < MAX_DEFERRED;
    if (room && h)
        srv->deferred_running++;
    pthread_mutex_unlock(&srv->lock);
    if (!h || !room) {
        if (h)
            h->d = NULL;
        free(d);
        funcd_cp_response_free(resp); /* frees the job's arg */
        funcd_cp_status(resp, 503, "ServiceUnavailable", NULL,
                        "%d bundle uploads are being checked now, the most at once; send it "
                        "again in a moment", MAX_DEFERRED);
        return -1;
    }
    h->d = d;
    d->srv = srv;
    d->req = req;
    d->hook = h;
    d->job = resp->defer;
    resp->defer = (funcd_cp_deferred){0};
    d->resp = (funcd_cp_response)FUNCD_CP_RESPONSE_INIT;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int err = pthread_create(&d->thread, &attr, deferred_main, d);
    pthread_attr_destroy(&attr);
    if (err) {
        pthread_mutex_lock(&srv->lock);
        srv->deferred_running--;
        pthread_mutex_unlock(&srv->lock);
        d->job.free_arg(d->job.arg);
        deferred_free(d);
        funcd_cp_status(resp, 503, "ServiceUnavailable", NULL, "cannot start a thread: %s",
                        strerror(err));
        return -1;
    }
    return 0;
}

/* Server thread: sends the answers the threads made (to requests still
 * there; none once the loop is gone: `send` 0). */
static void send_deferred(funcd_cp_server *srv, int send)
{
    pthread_mutex_lock(&srv->lock);
    deferred *list = srv->deferred_done;
    srv->deferred_done = NULL;
    pthread_mutex_unlock(&srv->lock);
    while (list) {
        deferred *d = list;
        list = d->next;
        if (d->req && send)
            send_response(d->req, &d->resp);
        deferred_free(d);
    }
}

/* Server thread, stopping: the answers being made are waited for (a
 * bundle's check ends within a second or so) and sent. */
static void drain_deferred(funcd_cp_server *srv, int send)
{
    pthread_mutex_lock(&srv->lock);
    while (srv->deferred_running)
        pthread_cond_wait(&srv->deferred_idle, &srv->lock);
    pthread_mutex_unlock(&srv->lock);
    send_deferred(srv, send);
}

static int on_req(void *payload, h2o_req_t *req);

static void on_proceed(h2o_generator_t *gen, h2o_req_t *req);
static void on_stop(h2o_generator_t *gen, h2o_req_t *req);

static void send_response(h2o_req_t *req, funcd_cp_response *resp)
{
    funcd_httpd_send(req, resp->status, resp->content_type ? resp->content_type : "application/json",
                     resp->body.data ? resp->body.data : "", resp->body.len);
}

/* ---- watch streams ---------------------------------------------------- */

static void wake_locked(funcd_cp_server *srv)
{
    if (!srv->wake_sent && srv->has_receiver) {
        srv->wake_sent = 1;
        h2o_multithread_send_message(&srv->receiver, &srv->wake);
    }
}

static void mark_dirty_locked(stream *st)
{
    funcd_cp_server *srv = st->srv;
    if (!st->is_dirty) {
        st->is_dirty = 1;
        st->next_dirty = srv->dirty;
        srv->dirty = st;
    }
    wake_locked(srv);
}

/* Appends `len` bytes to what the stream will send, unless the client
 * has fallen so far behind that the stream would hold more than the limit:
 * then what is pending is dropped and replaced by a final ERROR event.
 * 0 when appended, 1 when the stream has overflowed (now or before). */
static int queue_locked(stream *st, const void *data, size_t len)
{
    if (st->overflowed || st->finishing)
        return 1;
    size_t held = st->pending.len + st->sending_len - st->exempt;
    size_t limit = st->srv->stream_limit;
    if (held + len <= limit && funcd_buf_append(&st->pending, data, len) == 0)
        return 0;
    st->overflowed = 1;
    st->finishing = 1;
    funcd_buf_free(&st->pending);
    funcd_buf_printf(&st->pending,
                     "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\","
                     "\"status\":\"Failure\",\"code\":429,\"reason\":\"TooManyRequests\","
                     "\"message\":\"the client fell behind: %zu bytes were waiting to be sent, "
                     "the limit is %zu (--stream-buffer-limit); what was waiting is dropped: "
                     "watch again from the last resourceVersion received, or follow the logs "
                     "again with since= or tailLines=\"}}\n",
                     held + len, limit);
    mark_dirty_locked(st);
    return 1;
}

static void on_store_event(const funcd_store_event *ev, void *payload)
{
    stream *st = payload;
    const char *type = ev->type == FUNCD_STORE_EVENT_DELETE ? "DELETED"
                       : ev->create_revision == ev->revision ? "ADDED"
                                                             : "MODIFIED";
    funcd_buf line = FUNCD_BUF_INIT;
    if (funcd_cp_watch_line(&line, type, ev->value, ev->len, ev->revision, st->redact) < 0) {
        funcd_buf_free(&line);
        return;
    }
    pthread_mutex_lock(&st->srv->lock);
    if (queue_locked(st, line.data, line.len) == 0)
        mark_dirty_locked(st);
    pthread_mutex_unlock(&st->srv->lock);
    funcd_buf_free(&line);
}

/* Hands pending data to h2o if it is not busy with the previous batch. */
static void flush_stream(stream *st)
{
    if (st->in_flight || st->closed || st->finished)
        return;
    funcd_cp_server *srv = st->srv;
    pthread_mutex_lock(&srv->lock);
    funcd_buf_swap_in(&st->sending, &st->pending);
    st->sending_len = st->sending.len;
    int final = st->finishing;
    pthread_mutex_unlock(&srv->lock);
    if (st->sending.len == 0 && !final)
        return;
    h2o_iovec_t buf = h2o_iovec_init(st->sending.data, st->sending.len);
    st->in_flight = 1;
    if (final)
        st->finished = 1;
    h2o_send(st->req, &buf, st->sending.len ? 1 : 0,
             final ? H2O_SEND_STATE_FINAL : H2O_SEND_STATE_IN_PROGRESS);
}

static void on_proceed(h2o_generator_t *gen, h2o_req_t *req)
{
    stream *st = (stream *)gen;
    st->in_flight = 0;
    pthread_mutex_lock(&st->srv->lock);
    st->exempt = 0;
    st->sending_len = 0;
    pthread_mutex_unlock(&st->srv->lock);
    funcd_buf_reset(&st->sending);
    flush_stream(st);
}

/* The stream overflowed and its client still has not taken the batch in
 * flight: shut the connection, so h2o fails the write and frees it all. */
static void on_hangup(h2o_timeout_entry_t *entry)
{
    stream *st = H2O_STRUCT_FROM_MEMBER(stream, hangup, entry);
    if (!st->in_flight || st->closed)
        return;
    h2o_socket_t *sock = st->req->conn->callbacks->get_socket
                             ? st->req->conn->callbacks->get_socket(st->req->conn)
                             : NULL;
    if (sock)
        shutdown(h2o_socket_get_fd(sock), SHUT_RDWR);
}

static void on_stop(h2o_generator_t *gen, h2o_req_t *req)
{
    ((stream *)gen)->closed = 1;
}

static void on_wake(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    funcd_cp_server *srv = H2O_STRUCT_FROM_MEMBER(funcd_cp_server, receiver, receiver);
    pthread_mutex_lock(&srv->lock);
    while (!h2o_linklist_is_empty(messages))
        h2o_linklist_unlink(messages->next);
    srv->wake_sent = 0;
    stream *list = srv->dirty;
    srv->dirty = NULL;
    for (stream *st = list; st; st = st->next_dirty)
        st->is_dirty = 0;
    pthread_mutex_unlock(&srv->lock);
    /* Streams are only freed on this thread, so the list stays valid. */
    for (stream *st = list, *next; st; st = next) {
        next = st->next_dirty;
        pthread_mutex_lock(&srv->lock);
        int overflowed = st->overflowed;
        pthread_mutex_unlock(&srv->lock);
        if (overflowed && srv->loop && !h2o_timeout_is_linked(&st->hangup)) {
            st->hangup.cb = on_hangup;
            h2o_timeout_link(srv->loop, &srv->hangup_timeout, &st->hangup);
        }
        flush_stream(st);
    }
    send_deferred(srv, 1);
}

/* Runs when h2o frees the request: the store watch ends first, so no
 * callback can touch the stream afterwards. */
static void dispose_stream(void *p)
{
    stream *st = p;
    funcd_cp_server *srv = st->srv;
    if (st->sw)
        funcd_port_store_unwatch(srv->cp->store, st->sw);
    if (st->follower)
        funcd_log_ring_unfollow(st->ring, st->follower);
    funcd_log_ring_unref(st->ring);
    if (h2o_timeout_is_linked(&st->hangup))
        h2o_timeout_unlink(&st->hangup);
    pthread_mutex_lock(&srv->lock);
    if (st->prev)
        st->prev->next = st->next;
    else if (srv->streams == st)
        srv->streams = st->next;
    if (st->next)
        st->next->prev = st->prev;
    if (st->is_dirty) {
        for (stream **pp = &srv->dirty; *pp; pp = &(*pp)->next_dirty)
            if (*pp == st) {
                *pp = st->next_dirty;
                break;
            }
    }
    pthread_mutex_unlock(&srv->lock);
    funcd_buf_free(&st->pending);
    funcd_buf_free(&st->sending);
}

/* Runs on the platform loop for every new log line of the function. */
static void on_log_line(const funcd_log_line *rec, void *payload)
{
    stream *st = payload;
    if (st->log_invocation[0] &&
        (!rec->invocation_id || strcmp(rec->invocation_id, st->log_invocation) != 0))
        return;
    funcd_buf line = FUNCD_BUF_INIT;
    if (funcd_log_line_json(&line, rec) == 0) {
        pthread_mutex_lock(&st->srv->lock);
        if (queue_locked(st, line.data, line.len) == 0)
            mark_dirty_locked(st);
        pthread_mutex_unlock(&st->srv->lock);
    }
    funcd_buf_free(&line);
}

/* The history is appended by the follow call itself, on this thread, under
 * the ring's lock (so on_log_line cannot run meanwhile). It counts toward
 * the stream's limit: a history larger than that ends the stream at once
 * (the reader asks for less with tailLines or since). */
static int on_log_history(const char *rec, size_t len, void *payload)
{
    stream *st = payload;
    pthread_mutex_lock(&st->srv->lock);
    int over = queue_locked(st, rec, len) || queue_locked(st, "\n", 1);
    pthread_mutex_unlock(&st->srv->lock);
    return over;
}

typedef struct added_ctx {
    stream *st;
    int failed;
} added_ctx;

static int list_added(const funcd_store_kv *kv, void *payload)
{
    added_ctx *ac = payload;
    if (funcd_cp_watch_line(&ac->st->pending, "ADDED", kv->value, kv->len, kv->revision,
                            ac->st->redact) < 0)
        ac->failed = 1;
    return ac->failed;
}

static void start_log_stream(funcd_cp_server *srv, h2o_req_t *req, stream *st,
                             funcd_cp_response *resp);
static void begin_streaming(funcd_cp_server *srv, h2o_req_t *req, stream *st);
static void link_stream(funcd_cp_server *srv, stream *st);

static void start_stream(funcd_cp_server *srv, h2o_req_t *req, funcd_cp_response *resp)
{
    funcd_store *store = srv->cp->store;
    stream *st = h2o_mem_alloc_shared(&req->pool, sizeof(*st), dispose_stream);
    memset(st, 0, sizeof(*st));
    st->req = req;
    st->srv = srv;
    st->gen.proceed = on_proceed;
    st->gen.stop = on_stop;
    st->redact = resp->w.redact;

    if (resp->w.logs) {
        start_log_stream(srv, req, st, resp);
        return;
    }
    funcd_buf prefix = FUNCD_BUF_INIT;
    int rc = funcd_objects_prefix(&prefix, resp->w.kind, resp->w.ns[0] ? resp->w.ns : NULL);
    uint64_t after = resp->w.rv;
    if (rc == 0 && !resp->w.from_rv) {
        /* No revision: the current objects as ADDED, then changes after them. */
        added_ctx ac = {st, 0};
        rc = funcd_port_store_list(store, prefix.data, list_added, &ac, &after);
        if (rc == 0 && ac.failed)
            rc = funcd_error_set(FUNCD_EIO, "a stored object is not valid JSON");
    }
    /* The listing is what a plain list would answer at once: the limit
     * counts what comes after it. */
    st->exempt = st->pending.len;
    link_stream(srv, st);
    /* A BOOKMARK says from which revision changes follow; being always
     * there, it also gets the response head out before the first change. */
    if (rc == 0)
        rc = funcd_buf_printf(&st->pending,
                              "{\"type\":\"BOOKMARK\",\"object\":{\"apiVersion\":\"" FUNCD_API_VERSION
                              "\",\"kind\":\"%s\",\"metadata\":{\"resourceVersion\":\"%" PRIu64
                              "\"}}}\n",
                              resp->w.kind->kind, after);
    if (rc == 0)
        rc = funcd_port_store_watch(store, prefix.data, after, on_store_event, st, &st->sw);
    funcd_buf_free(&prefix);
    if (rc < 0) {
        st->sw = NULL;
        funcd_cp_response err = FUNCD_CP_RESPONSE_INIT;
        if (rc == FUNCD_EGONE)
            funcd_cp_status(&err, 410, "Expired", "resourceVersion", "%s",
                            funcd_error_last()->message);
        else
            funcd_cp_status(&err, 500, "InternalError", NULL, "%s", funcd_error_last()->message);
        send_response(req, &err);
        funcd_cp_response_free(&err);
        st->finished = 1;
        return;
    }
    begin_streaming(srv, req, st);
}

static void link_stream(funcd_cp_server *srv, stream *st)
{
    pthread_mutex_lock(&srv->lock);
    st->next = srv->streams;
    if (st->next)
        st->next->prev = st;
    srv->streams = st;
    pthread_mutex_unlock(&srv->lock);
}

/* Logs of one function, history first: the follow call replays the stored
 * lines on this thread and then delivers new ones from the loop. api.c has
 * validated the query; it is read again here for since and invocation. */
static void start_log_stream(funcd_cp_server *srv, h2o_req_t *req, stream *st,
                             funcd_cp_response *resp)
{
    funcd_cp *cp = srv->cp;
    funcd_log_query q;
    const char *field;
    const char *query = req->query_at != SIZE_MAX ? req->path.base + req->query_at + 1 : NULL;
    size_t query_len = query ? req->path.len - req->query_at - 1 : 0;
    if (funcd_log_query_parse(&q, query, query_len, 0, &field) < 0)
        memset(&q, 0, sizeof(q));
    q.tail = resp->w.tail;
    snprintf(st->log_invocation, sizeof(st->log_invocation), "%s", q.invocation);
    link_stream(srv, st);
    st->ring = cp->serving ? funcd_serving_logs(cp->serving, resp->w.ns, resp->w.name) : NULL;
    if (st->ring) /* a tail of SIZE_MAX (tailLines=0) replays nothing */
        st->follower = funcd_log_ring_follow_query(st->ring, &q, on_log_history, on_log_line, st);
    begin_streaming(srv, req, st);
}

static void begin_streaming(funcd_cp_server *srv, h2o_req_t *req, stream *st)
{
    req->res.status = 200;
    req->res.reason = "OK";
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                   H2O_STRLIT("application/x-ndjson"));
    h2o_start_response(req, &st->gen);
    /* Send the headers (and anything already pending) right away. */
    pthread_mutex_lock(&srv->lock);
    funcd_buf_swap_in(&st->sending, &st->pending);
    st->sending_len = st->sending.len;
    pthread_mutex_unlock(&srv->lock);
    h2o_iovec_t buf = h2o_iovec_init(st->sending.data, st->sending.len);
    st->in_flight = 1;
    h2o_send(req, &buf, st->sending.len ? 1 : 0, H2O_SEND_STATE_IN_PROGRESS);
}

static int is_bundle_upload(const funcd_cp_request *r)
{
    static const char suffix[] = "/bundles";
    const size_t n = sizeof(suffix) - 1;
    return r->path_len > n && memcmp(r->path + r->path_len - n, suffix, n) == 0;
}

static int on_req(void *payload, h2o_req_t *req)
{
    funcd_cp_server *srv = payload;
    h2o_iovec_t auth = funcd_httpd_header(req, H2O_TOKEN_AUTHORIZATION);
    size_t path_len = req->path_normalized.len;
    funcd_cp_request r = {
        .method = req->method.base,
        .method_len = req->method.len,
        .path = req->path_normalized.base,
        .path_len = path_len,
        .authorization = auth.base,
        .authorization_len = auth.len,
        .body = req->entity.base,
        .body_len = req->entity.base ? req->entity.len : 0,
    };
    if (req->query_at != SIZE_MAX) {
        r.query = req->path.base + req->query_at + 1;
        r.query_len = req->path.len - req->query_at - 1;
    }
    /* Only a request with a valid token keeps its connection open: the
     * head of a later request is not shown to on_head, and h2o reads its
     * body before this handler runs. */
    if (!funcd_cp_authenticated(srv->cp, &r))
        req->http1_is_persistent = 0;
    funcd_cp_response resp = FUNCD_CP_RESPONSE_INIT;
    if (r.body_len > MAX_BODY && !is_bundle_upload(&r))
        funcd_cp_status(&resp, 413, "RequestEntityTooLarge", NULL,
                        "the request body has %zu bytes; the limit is %d bytes", r.body_len,
                        MAX_BODY);
    else
        funcd_cp_handle(srv->cp, &r, &resp);
    if (resp.watch)
        start_stream(srv, req, &resp);
    else if (!resp.defer.run || start_deferred(srv, req, &resp) < 0)
        send_response(req, &resp);
    funcd_cp_response_free(&resp);
    return 0;
}

/* Before a body is read: a valid token, and the right to write in the
 * namespace the path names (the path normalized as h2o will route it). */
static int on_head(void *payload, const funcd_httpd_head *head, funcd_buf *body)
{
    funcd_cp_server *srv = payload;
    h2o_mem_pool_t pool;
    h2o_mem_init_pool(&pool);
    size_t query_at = SIZE_MAX, *norm_indexes = NULL;
    h2o_iovec_t path =
        h2o_url_normalize_path(&pool, head->target, head->target_len, &query_at, &norm_indexes);
    funcd_cp_request r = {
        .method = head->method,
        .method_len = head->method_len,
        .path = path.base,
        .path_len = path.len,
        .authorization = head->authorization,
        .authorization_len = head->authorization_len,
    };
    funcd_cp_response resp = FUNCD_CP_RESPONSE_INIT;
    int status = 0;
    if (!funcd_cp_admit_body(srv->cp, &r, &resp)) {
        status = resp.status;
        funcd_buf_append(body, resp.body.data ? resp.body.data : "", resp.body.len);
    }
    funcd_cp_response_free(&resp);
    h2o_mem_clear_pool(&pool);
    return status;
}

static void on_thread_init(void *payload, h2o_context_t *ctx)
{
    funcd_cp_server *srv = payload;
    srv->loop = ctx->loop;
    h2o_timeout_init(ctx->loop, &srv->hangup_timeout, HANGUP_MS);
    h2o_multithread_register_receiver(ctx->queue, &srv->receiver, on_wake);
    pthread_mutex_lock(&srv->lock);
    srv->has_receiver = 1;
    pthread_mutex_unlock(&srv->lock);
}

/* Ends every open watch so its connection can close. */
static void on_thread_stopping(void *payload, h2o_context_t *ctx)
{
    funcd_cp_server *srv = payload;
    drain_deferred(srv, 1);
    pthread_mutex_lock(&srv->lock);
    stream *list = srv->streams;
    for (stream *st = list; st; st = st->next)
        st->finishing = 1;
    pthread_mutex_unlock(&srv->lock);
    for (stream *st = list, *next; st; st = next) {
        next = st->next;
        flush_stream(st);
    }
}

static void on_thread_exit(void *payload, h2o_context_t *ctx)
{
    funcd_cp_server *srv = payload;
    drain_deferred(srv, 1); /* one started while the connections drained */
    pthread_mutex_lock(&srv->lock);
    srv->has_receiver = 0;
    /* A wake sent after the loop stopped is still linked: take it back. */
    if (srv->wake_sent && h2o_linklist_is_linked(&srv->wake.link))
        h2o_linklist_unlink(&srv->wake.link);
    srv->wake_sent = 0;
    /* A stream whose connection outlived the drain may still wait. */
    for (stream *st = srv->streams; st; st = st->next)
        if (h2o_timeout_is_linked(&st->hangup))
            h2o_timeout_unlink(&st->hangup);
    pthread_mutex_unlock(&srv->lock);
    h2o_multithread_unregister_receiver(ctx->queue, &srv->receiver);
    h2o_timeout_dispose(ctx->loop, &srv->hangup_timeout);
    srv->loop = NULL;
}

int funcd_cp_server_new(funcd_cp_server **out, funcd_cp *cp, const char *addr,
                        const funcd_cp_server_limits *limits, char *bound, size_t bound_len)
{
    *out = NULL;
    funcd_cp_server *srv = calloc(1, sizeof(*srv));
    if (!srv)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the control plane");
    srv->cp = cp;
    srv->stream_limit = limits && limits->stream_buffer ? limits->stream_buffer
                                                        : FUNCD_CP_STREAM_BUFFER_DEFAULT;
    pthread_mutex_init(&srv->lock, NULL);
    pthread_cond_init(&srv->deferred_idle, NULL);
    funcd_httpd_hooks hooks = {on_req,         on_thread_init, on_thread_stopping,
                               on_thread_exit, srv,            on_head};
    int rc = funcd_httpd_new(&srv->httpd, addr, 1, MAX_BUFFERED_BODY, &hooks, bound, bound_len);
    if (rc < 0) {
        pthread_cond_destroy(&srv->deferred_idle);
        pthread_mutex_destroy(&srv->lock);
        free(srv);
        return rc;
    }
    funcd_httpd_set_max_connections(srv->httpd, limits ? limits->max_connections : 0);
    funcd_httpd_set_tls(srv->httpd, limits ? limits->tls : NULL);
    funcd_httpd_set_threads(srv->httpd, "funcd-api", 0);
    *out = srv;
    return 0;
}

int funcd_cp_server_start(funcd_cp_server *srv)
{
    return funcd_httpd_start(srv->httpd);
}

void funcd_cp_server_stop(funcd_cp_server *srv)
{
    if (srv)
        funcd_httpd_stop(srv->httpd);
}

void funcd_cp_server_free(funcd_cp_server *srv)
{
    if (!srv)
        return;
    funcd_httpd_free(srv->httpd);
    drain_deferred(srv, 0); /* the loop is gone: nothing is sent */
    pthread_cond_destroy(&srv->deferred_idle);
    pthread_mutex_destroy(&srv->lock);
    free(srv);
}
