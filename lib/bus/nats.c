/*
 * The bus on a NATS server, through libnats. Subjects, wildcards and queue
 * groups are NATS's own, so publish and subscribe map one to one onto
 * natsConnection_Publish and natsConnection_(Queue)Subscribe on one
 * connection per bus (one connection keeps a subscribe and a later publish in
 * order: the server sees the SUB before the PUB).
 *
 * What libnats does not promise and the port does:
 * - Subjects are checked here (lib/bus/subject.c) with the memory bus's
 *   rules: libnats checks little and the server would answer a bad publish
 *   asynchronously, long after publish returned 0.
 * - unsubscribe returns only when the callback is done for good. libnats may
 *   still be delivering (its dispatcher thread holds messages it read before
 *   the UNSUB), so each subscription has a small gate: `ended` makes late
 *   messages drop, and unsubscribe waits while a callback runs on another
 *   thread. The gate is freed by whichever comes last of unsubscribe and
 *   libnats's on-complete callback (after which libnats never calls back).
 * One subscription's handler never runs concurrently with itself in libnats
 * (one dispatcher per subscription), which is the port's other promise.
 *
 * Durable streams (version 2) are JetStream's: a stream with interest
 * retention (a message stays until every consumer acknowledged it), and per
 * consumer name one durable push consumer whose deliver group is that name,
 * so every subscription attached to it shares its messages. libnats deletes a
 * consumer it created when such a subscription is unsubscribed, but not when
 * it is destroyed, so unsubscribe destroys: the consumer keeps its place.
 *
 * Reconnecting is libnats's: the options below only set its knobs and route
 * its disconnect, reconnect and error events to funcd's logger.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <nats/nats.h>

#include "bus/subject.h"
#include "funcd/sys/bus.h"
#include "funcd/sys/error.h"
#include "util/log.h"

#define DEFAULT_RECONNECT_WAIT_MS 2000
#define DEFAULT_RECONNECT_BUFFER (8 * 1024 * 1024)
#define DEFAULT_TIMEOUT_MS 2000
#define DEFAULT_MAX_AGE_MS (24 * 3600 * 1000LL)
#define REDELIVER_MS 1000 /* a refused durable message comes back after this */

typedef struct nats_bus {
    funcd_bus base;
    natsConnection *nc;
    jsCtx *js;
    funcd_logger log;
    char where[256]; /* the URL without credentials, for messages */
    int64_t timeout_ms;

    pthread_mutex_t mu; /* guards the fields below */
    pthread_cond_t cv;
    int closing; /* free() started: a disconnect is ours, not news */
    int closed;  /* libnats's closed callback ran: no more connection callbacks */
} nats_bus;

struct funcd_bus_sub {
    nats_bus *bus;
    natsSubscription *ns;
    funcd_bus_msg_cb cb;
    funcd_bus_durable_cb dcb; /* a durable consumer's subscription */
    void *payload;
    atomic_int refs; /* unsubscribe's and libnats's (until on-complete) */

    pthread_mutex_t mu; /* guards the fields below */
    pthread_cond_t idle;
    int ended;
    int running;
    pthread_t runner;
};

static nats_bus *nbus(funcd_bus *b)
{
    return (nats_bus *)b;
}

/* libnats's last error on this thread (it says more than the status's text),
 * without the "(conn.c:2088): " of where in libnats it was raised. */
static const char *nats_why(natsStatus s)
{
    natsStatus last = NATS_OK;
    const char *detail = nats_GetLastError(&last);
    if (!detail || !detail[0])
        return natsStatus_GetText(s);
    const char *end = detail[0] == '(' ? strstr(detail, "): ") : NULL;
    return end ? end + 3 : detail;
}

/* "nats://user:pass@host:4222" -> "nats://host:4222", for every server of a list. */
static void redact_url(const char *url, char *out, size_t cap)
{
    size_t o = 0;
    const char *p = url;
    while (*p && o + 1 < cap) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *scheme = memmem(p, len, "://", 3);
        const char *host = scheme ? scheme + 3 : p;
        const char *at = memchr(host, '@', len - (size_t)(host - p));
        size_t head = (size_t)(host - p);
        const char *rest = at ? at + 1 : host;
        size_t tail = len - (size_t)(rest - p);
        int n = snprintf(out + o, cap - o, "%s%.*s%.*s", o ? "," : "", (int)head, p, (int)tail,
                         rest);
        if (n < 0)
            break;
        o += (size_t)n < cap - o ? (size_t)n : cap - o - 1;
        if (!end)
            break;
        p = end + 1;
    }
    out[o] = 0;
}

/* ---- connection events ------------------------------------------------------------------ */

static void on_disconnected(natsConnection *nc, void *closure)
{
    nats_bus *n = closure;
    pthread_mutex_lock(&n->mu);
    int closing = n->closing;
    pthread_mutex_unlock(&n->mu);
    if (!closing)
        funcd_log(&n->log, FUNCD_LOG_WARN,
                  "bus: disconnected from NATS at %s; reconnecting (publishes are held meanwhile)",
                  n->where);
}

static void on_reconnected(natsConnection *nc, void *closure)
{
    nats_bus *n = closure;
    char url[256] = "";
    natsConnection_GetConnectedUrl(nc, url, sizeof(url));
    char shown[256];
    redact_url(url, shown, sizeof(shown));
    funcd_log(&n->log, FUNCD_LOG_INFO, "bus: reconnected to NATS at %s; subscriptions resumed",
              shown[0] ? shown : n->where);
}

static void on_closed(natsConnection *nc, void *closure)
{
    nats_bus *n = closure;
    pthread_mutex_lock(&n->mu);
    int closing = n->closing;
    n->closed = 1;
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
    if (!closing)
        funcd_log(&n->log, FUNCD_LOG_ERROR,
                  "bus: gave up reconnecting to NATS at %s; the bus is closed until funcd restarts "
                  "(raise --bus's max reconnect or leave it unlimited)",
                  n->where);
}

static void on_error(natsConnection *nc, natsSubscription *sub, natsStatus err, void *closure)
{
    nats_bus *n = closure;
    if (err == NATS_SLOW_CONSUMER)
        funcd_log(&n->log, FUNCD_LOG_WARN,
                  "bus: a subscription on %s fell behind and NATS messages were dropped for it",
                  n->where);
    else
        funcd_log(&n->log, FUNCD_LOG_WARN, "bus: NATS at %s: %s", n->where,
                  natsStatus_GetText(err));
}

/* ---- publish and subscribe ------------------------------------------------------------- */

static int nats_publish(funcd_bus *b, const char *subject, const void *data, size_t len)
{
    nats_bus *n = nbus(b);
    int rc = funcd_bus_check_subject(subject, 0, "publish to");
    if (rc < 0)
        return rc;
    if (!data && len)
        return funcd_error_set(FUNCD_EINVAL, "bus: publish to \"%s\" has no data but %zu bytes",
                               subject, len);
    if (len > INT32_MAX)
        return funcd_error_set(FUNCD_EINVAL, "bus: a message of %zu bytes to \"%s\" is larger "
                               "than NATS carries", len, subject);
    natsStatus s = natsConnection_Publish(n->nc, subject, data, (int)len);
    if (s == NATS_MAX_PAYLOAD)
        return funcd_error_set(FUNCD_EINVAL, "bus: a message of %zu bytes to \"%s\" exceeds the "
                               "NATS server's max_payload", len, subject);
    if (s != NATS_OK)
        return funcd_error_set(FUNCD_EIO, "bus: cannot publish to \"%s\" on NATS at %s: %s",
                               subject, n->where, nats_why(s));
    return 0;
}

static void sub_unref(funcd_bus_sub *sub)
{
    if (atomic_fetch_sub(&sub->refs, 1) != 1)
        return;
    pthread_cond_destroy(&sub->idle);
    pthread_mutex_destroy(&sub->mu);
    free(sub);
}

/* Through the gate: 0 when the subscription was ended (drop the message). */
static int gate_enter(funcd_bus_sub *sub)
{
    pthread_mutex_lock(&sub->mu);
    int open = !sub->ended;
    if (open) {
        sub->running = 1;
        sub->runner = pthread_self();
    }
    pthread_mutex_unlock(&sub->mu);
    return open;
}

static void gate_leave(funcd_bus_sub *sub)
{
    pthread_mutex_lock(&sub->mu);
    sub->running = 0;
    pthread_cond_broadcast(&sub->idle);
    pthread_mutex_unlock(&sub->mu);
}

static void on_msg(natsConnection *nc, natsSubscription *ns, natsMsg *msg, void *closure)
{
    funcd_bus_sub *sub = closure;
    if (gate_enter(sub)) {
        const char *data = natsMsg_GetData(msg);
        sub->cb(natsMsg_GetSubject(msg), data ? data : "", (size_t)natsMsg_GetDataLength(msg),
                sub->payload);
        gate_leave(sub);
    }
    natsMsg_Destroy(msg);
}

/* A durable message: acknowledged when the callback says 0, else handed back
 * (also when the subscription ended before it ran) to come again. */
static void on_durable_msg(natsConnection *nc, natsSubscription *ns, natsMsg *msg,
                           void *closure)
{
    funcd_bus_sub *sub = closure;
    int rc = -1;
    if (gate_enter(sub)) {
        const char *data = natsMsg_GetData(msg);
        rc = sub->dcb(natsMsg_GetSubject(msg), data ? data : "",
                      (size_t)natsMsg_GetDataLength(msg), sub->payload);
        gate_leave(sub);
    }
    /* A failed ack or nak leaves the message to JetStream's ack wait: it comes again. */
    if (rc == 0)
        natsMsg_Ack(msg, NULL);
    else
        natsMsg_NakWithDelay(msg, REDELIVER_MS, NULL);
    natsMsg_Destroy(msg);
}

/* libnats will not call on_msg for this subscription again. */
static void on_complete(void *closure)
{
    sub_unref(closure);
}

static funcd_bus_sub *sub_new(nats_bus *n, void *payload)
{
    funcd_bus_sub *sub = calloc(1, sizeof(*sub));
    if (!sub)
        return NULL;
    sub->bus = n;
    sub->payload = payload;
    atomic_init(&sub->refs, 2);
    pthread_mutex_init(&sub->mu, NULL);
    pthread_cond_init(&sub->idle, NULL);
    return sub;
}

/* Asks libnats to say when it is done with `sub`; on failure (the
 * subscription was closed already: the connection closed under us) libnats
 * may still hold `sub` in a dispatch, so it is left to the process rather
 * than freed under libnats. */
static int watch_completion(funcd_bus_sub *sub, const char *what)
{
    natsStatus s = natsSubscription_SetOnCompleteCB(sub->ns, on_complete, sub);
    if (s == NATS_OK)
        return 0;
    int rc = funcd_error_set(FUNCD_EIO, "bus: cannot subscribe to \"%s\" on NATS at %s: %s",
                             what, sub->bus->where, natsStatus_GetText(s));
    sub->ended = 1;
    natsSubscription_Destroy(sub->ns);
    return rc;
}

static int nats_subscribe(funcd_bus *b, const char *subject, const char *queue_group,
                          funcd_bus_msg_cb cb, void *payload, funcd_bus_sub **out)
{
    nats_bus *n = nbus(b);
    int rc = funcd_bus_check_subscribe(subject, queue_group, cb && out);
    if (rc < 0)
        return rc;
    funcd_bus_sub *sub = sub_new(n, payload);
    if (!sub)
        return funcd_error_set(FUNCD_ENOMEM, "bus: out of memory subscribing to \"%s\"", subject);
    sub->cb = cb;
    natsStatus s = queue_group
                       ? natsConnection_QueueSubscribe(&sub->ns, n->nc, subject, queue_group,
                                                       on_msg, sub)
                       : natsConnection_Subscribe(&sub->ns, n->nc, subject, on_msg, sub);
    if (s != NATS_OK) {
        rc = funcd_error_set(FUNCD_EIO, "bus: cannot subscribe to \"%s\" on NATS at %s: %s",
                             subject, n->where, nats_why(s));
        atomic_store(&sub->refs, 1);
        sub_unref(sub);
        return rc;
    }
    if ((rc = watch_completion(sub, subject)) < 0)
        return rc;
    *out = sub;
    return 0;
}

static void nats_unsubscribe(funcd_bus *b, funcd_bus_sub *sub)
{
    if (!sub)
        return;
    /* Destroy, not Unsubscribe: both end the interest, but Unsubscribe would
     * also delete a durable consumer libnats created. */
    natsSubscription_Destroy(sub->ns);
    sub->ns = NULL;
    pthread_mutex_lock(&sub->mu);
    sub->ended = 1;
    /* A callback running on this thread is our caller: waiting would never end. */
    while (sub->running && !pthread_equal(sub->runner, pthread_self()))
        pthread_cond_wait(&sub->idle, &sub->mu);
    pthread_mutex_unlock(&sub->mu);
    sub_unref(sub);
}

static void nats_free(funcd_bus *b)
{
    nats_bus *n = nbus(b);
    if (!n)
        return;
    if (n->nc) {
        pthread_mutex_lock(&n->mu);
        n->closing = 1;
        pthread_mutex_unlock(&n->mu);
        /* What was published before free reaches the server if it can in time. */
        natsConnection_FlushTimeout(n->nc, n->timeout_ms);
        natsConnection_Close(n->nc);
        /* The connection callbacks point at `n`: wait for the last of them. */
        pthread_mutex_lock(&n->mu);
        while (!n->closed)
            pthread_cond_wait(&n->cv, &n->mu);
        pthread_mutex_unlock(&n->mu);
        jsCtx_Destroy(n->js);
        natsConnection_Destroy(n->nc);
    }
    pthread_cond_destroy(&n->cv);
    pthread_mutex_destroy(&n->mu);
    free(n);
}

/* ---- durable streams: JetStream ------------------------------------------------------ */

/* FUNCD_E* for a failed JetStream call; `jerr` is the server's code. */
static int js_error(nats_bus *n, natsStatus s, jsErrCode jerr, const char *what)
{
    if (s == NATS_TIMEOUT)
        return funcd_error_set(FUNCD_ETIMEOUT, "bus: %s: NATS at %s did not answer in %lld ms",
                               what, n->where, (long long)n->timeout_ms);
    if (jerr == JSNotEnabledErr || jerr == JSNotEnabledForAccountErr)
        return funcd_error_set(FUNCD_ENOTSUP, "bus: %s: JetStream is not enabled on NATS at %s "
                               "(start nats-server with -js)", what, n->where);
    return funcd_error_set(FUNCD_EIO, "bus: %s on NATS at %s: %s (JetStream error %d)", what,
                           n->where, nats_why(s), (int)jerr);
}

static int nats_stream_ensure(funcd_bus *b, const char *name, const char *subjects,
                              int64_t max_age_ms)
{
    nats_bus *n = nbus(b);
    int rc = funcd_bus_check_name("stream", name);
    if (rc < 0 || (rc = funcd_bus_check_subject(subjects, 1, "keep a stream of")) < 0)
        return rc;
    if (max_age_ms < 0 || max_age_ms > INT64_MAX / 1000000)
        return funcd_error_set(FUNCD_EINVAL, "bus: stream %s: max age %lld ms is out of range",
                               name, (long long)max_age_ms);
    const char *subj[1] = {subjects};
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    cfg.Name = name;
    cfg.Subjects = subj;
    cfg.SubjectsLen = 1;
    cfg.Retention = js_InterestPolicy;
    cfg.Storage = js_FileStorage;
    cfg.MaxAge = (max_age_ms ? max_age_ms : DEFAULT_MAX_AGE_MS) * 1000000; /* nanoseconds */
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_AddStream(&si, n->js, &cfg, NULL, &jerr);
    jsStreamInfo_Destroy(si);
    si = NULL;
    if (s != NATS_OK && jerr == JSStreamNameExistErr) {
        /* It exists with another configuration: the same subjects take the new max age. */
        jerr = 0;
        s = js_GetStreamInfo(&si, n->js, name, NULL, &jerr);
        int same = s == NATS_OK && si->Config && si->Config->SubjectsLen == 1 &&
                   strcmp(si->Config->Subjects[0], subjects) == 0;
        if (s == NATS_OK && !same)
            rc = funcd_error_set(FUNCD_EEXISTS, "bus: stream %s exists with subjects \"%s\", "
                                 "not \"%s\"", name,
                                 si->Config && si->Config->SubjectsLen ? si->Config->Subjects[0]
                                                                       : "",
                                 subjects);
        jsStreamInfo_Destroy(si);
        si = NULL;
        if (rc < 0)
            return rc;
        if (s == NATS_OK) {
            s = js_UpdateStream(&si, n->js, &cfg, NULL, &jerr);
            jsStreamInfo_Destroy(si);
        }
    }
    if (s == NATS_OK)
        return 0;
    if (jerr == JSStreamSubjectOverlapErr)
        return funcd_error_set(FUNCD_EEXISTS, "bus: stream %s's subjects \"%s\" overlap another "
                               "stream's on NATS at %s", name, subjects, n->where);
    char what[128];
    snprintf(what, sizeof(what), "cannot create stream %s", name);
    return js_error(n, s, jerr, what);
}

static int nats_publish_durable(funcd_bus *b, const char *subject, const void *data, size_t len)
{
    nats_bus *n = nbus(b);
    int rc = funcd_bus_check_subject(subject, 0, "publish to");
    if (rc < 0)
        return rc;
    if (!data && len)
        return funcd_error_set(FUNCD_EINVAL, "bus: publish to \"%s\" has no data but %zu bytes",
                               subject, len);
    if (len > INT32_MAX)
        return funcd_error_set(FUNCD_EINVAL, "bus: a message of %zu bytes to \"%s\" is larger "
                               "than NATS carries", len, subject);
    jsPubAck *pa = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_Publish(&pa, n->js, subject, data, (int)len, NULL, &jerr);
    jsPubAck_Destroy(pa);
    if (s == NATS_OK)
        return 0;
    if (s == NATS_NO_RESPONDERS)
        return funcd_error_set(FUNCD_ENOTFOUND, "bus: no stream keeps subject \"%s\" on NATS at "
                               "%s; create one whose subjects match it first", subject, n->where);
    char what[160];
    snprintf(what, sizeof(what), "cannot store a message on \"%.100s\"", subject);
    return js_error(n, s, jerr, what);
}

static int nats_consume(funcd_bus *b, const char *stream, const char *durable,
                        funcd_bus_durable_cb cb, void *payload, funcd_bus_sub **out)
{
    nats_bus *n = nbus(b);
    int rc = funcd_bus_check_name("stream", stream);
    if (rc < 0 || (rc = funcd_bus_check_name("consumer", durable)) < 0)
        return rc;
    if (!cb || !out)
        return funcd_error_set(FUNCD_EINVAL, "bus: consume of %s needs a callback and an out "
                               "handle", durable);
    /* libnats wants the subject to filter on: the stream's own. */
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetStreamInfo(&si, n->js, stream, NULL, &jerr);
    char what[160];
    if (s == NATS_NOT_FOUND || jerr == JSStreamNotFoundErr)
        return funcd_error_set(FUNCD_ENOTFOUND, "bus: no stream %s to consume from on NATS at %s",
                               stream, n->where);
    if (s != NATS_OK || !si->Config || si->Config->SubjectsLen < 1) {
        jsStreamInfo_Destroy(si);
        snprintf(what, sizeof(what), "cannot look up stream %s", stream);
        return js_error(n, s == NATS_OK ? NATS_ERR : s, jerr, what);
    }
    char subject[256];
    snprintf(subject, sizeof(subject), "%s", si->Config->Subjects[0]);
    jsStreamInfo_Destroy(si);

    funcd_bus_sub *sub = sub_new(n, payload);
    if (!sub)
        return funcd_error_set(FUNCD_ENOMEM, "bus: out of memory attaching to %s", durable);
    sub->dcb = cb;
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = stream;
    so.Queue = durable; /* the deliver group: attached subscriptions share the messages */
    so.Config.Durable = durable;
    so.Config.DeliverPolicy = js_DeliverNew;
    so.Config.AckPolicy = js_AckExplicit;
    so.ManualAck = true;
    s = js_Subscribe(&sub->ns, n->js, subject, on_durable_msg, sub, NULL, &so, &jerr);
    if (s != NATS_OK) {
        snprintf(what, sizeof(what), "cannot attach to consumer %s of stream %s", durable, stream);
        rc = js_error(n, s, jerr, what);
        atomic_store(&sub->refs, 1);
        sub_unref(sub);
        return rc;
    }
    if ((rc = watch_completion(sub, durable)) < 0)
        return rc;
    *out = sub;
    return 0;
}

static int nats_consumer_delete(funcd_bus *b, const char *stream, const char *durable)
{
    nats_bus *n = nbus(b);
    int rc = funcd_bus_check_name("stream", stream);
    if (rc < 0 || (rc = funcd_bus_check_name("consumer", durable)) < 0)
        return rc;
    jsErrCode jerr = 0;
    natsStatus s = js_DeleteConsumer(n->js, stream, durable, NULL, &jerr);
    if (s == NATS_OK)
        return 0;
    if (s == NATS_NOT_FOUND || jerr == JSConsumerNotFoundErr || jerr == JSStreamNotFoundErr)
        return funcd_error_set(FUNCD_ENOTFOUND, "bus: no consumer %s on stream %s on NATS at %s",
                               durable, stream, n->where);
    char what[160];
    snprintf(what, sizeof(what), "cannot delete consumer %s of stream %s", durable, stream);
    return js_error(n, s, jerr, what);
}

/* ---- construction ---------------------------------------------------------------------- */

FUNCD_EXTERN int funcd_bus_nats_options_init(funcd_bus_nats_options *opts, unsigned version)
{
    if (!opts)
        return funcd_error_set(FUNCD_EINVAL, "funcd_bus_nats_options_init: opts is NULL");
    if (version < 1 || version > FUNCD_BUS_NATS_OPTIONS_VERSION)
        return funcd_error_set(FUNCD_EVERSION, "funcd_bus_nats_options version %u: this funcd "
                               "knows versions 1 to %d", version, FUNCD_BUS_NATS_OPTIONS_VERSION);
    *opts = (funcd_bus_nats_options)FUNCD_BUS_NATS_OPTIONS_INIT;
    opts->version = version;
    return 0;
}

/* natsOptions for `o` (already checked); NULL with the thread's error set. */
static natsOptions *make_options(nats_bus *n, const char *url, const funcd_bus_nats_options *o)
{
    natsOptions *no = NULL;
    natsStatus s = natsOptions_Create(&no);
    int max_reconnect = o->max_reconnect > 0 ? o->max_reconnect : -1;
    if (s == NATS_OK)
        s = natsOptions_SetURL(no, url);
    if (s == NATS_OK)
        s = natsOptions_SetName(no, "funcd");
    if (s == NATS_OK)
        s = natsOptions_SetTimeout(no, n->timeout_ms);
    if (s == NATS_OK)
        s = natsOptions_SetAllowReconnect(no, true);
    if (s == NATS_OK)
        s = natsOptions_SetMaxReconnect(no, max_reconnect);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectWait(
            no, o->reconnect_wait_ms > 0 ? o->reconnect_wait_ms : DEFAULT_RECONNECT_WAIT_MS);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectBufSize(
            no, o->reconnect_buffer > 0 ? o->reconnect_buffer : DEFAULT_RECONNECT_BUFFER);
    if (s == NATS_OK)
        s = natsOptions_SetDisconnectedCB(no, on_disconnected, n);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectedCB(no, on_reconnected, n);
    if (s == NATS_OK)
        s = natsOptions_SetClosedCB(no, on_closed, n);
    if (s == NATS_OK)
        s = natsOptions_SetErrorHandler(no, on_error, n);
    if (s != NATS_OK) {
        funcd_error_set(s == NATS_NO_MEMORY ? FUNCD_ENOMEM : FUNCD_EINVAL,
                        "bus: cannot use NATS URL \"%s\": %s", n->where, nats_why(s));
        natsOptions_Destroy(no);
        return NULL;
    }
    return no;
}

FUNCD_EXTERN int funcd_bus_nats_new(funcd_bus **out, const char *url,
                                    const funcd_bus_nats_options *opts)
{
    if (!out)
        return funcd_error_set(FUNCD_EINVAL, "bus: funcd_bus_nats_new needs an out pointer");
    *out = NULL;
    if (!url || !url[0])
        return funcd_error_set(FUNCD_EINVAL, "bus: funcd_bus_nats_new needs a URL like "
                               "nats://127.0.0.1:4222");
    /* Fields appended after version 1 are read only when opts->version has them. */
    if (opts && (opts->version < 1 || opts->version > FUNCD_BUS_NATS_OPTIONS_VERSION))
        return funcd_error_set(FUNCD_EVERSION, "bus: funcd_bus_nats_options has version %u; "
                               "this funcd knows versions 1 to %d (start from "
                               "FUNCD_BUS_NATS_OPTIONS_INIT)", opts->version,
                               FUNCD_BUS_NATS_OPTIONS_VERSION);
    funcd_bus_nats_options o = FUNCD_BUS_NATS_OPTIONS_INIT;
    if (opts)
        o = *opts;
    nats_bus *n = calloc(1, sizeof(*n));
    if (!n)
        return funcd_error_set(FUNCD_ENOMEM, "bus: out of memory creating the NATS bus");
    pthread_mutex_init(&n->mu, NULL);
    pthread_cond_init(&n->cv, NULL);
    n->log = (funcd_logger){o.log, o.log_level, o.log_payload};
    n->timeout_ms = o.timeout_ms > 0 ? o.timeout_ms : DEFAULT_TIMEOUT_MS;
    redact_url(url, n->where, sizeof(n->where));
    n->base.version = FUNCD_BUS_VERSION;
    n->base.name = "nats";
    n->base.publish = nats_publish;
    n->base.subscribe = nats_subscribe;
    n->base.unsubscribe = nats_unsubscribe;
    n->base.free = nats_free;
    n->base.stream_ensure = nats_stream_ensure;
    n->base.publish_durable = nats_publish_durable;
    n->base.consume = nats_consume;
    n->base.consumer_delete = nats_consumer_delete;

    natsOptions *no = make_options(n, url, &o);
    if (!no) {
        nats_free(&n->base);
        return funcd_error_last()->code;
    }
    natsStatus s = natsConnection_Connect(&n->nc, no);
    natsOptions_Destroy(no);
    if (s != NATS_OK) {
        int rc = funcd_error_set(FUNCD_EIO, "bus: cannot connect to NATS at %s: %s (is "
                                 "nats-server running there?)", n->where, nats_why(s));
        n->nc = NULL;
        nats_free(&n->base);
        return rc;
    }
    /* A context only: no traffic until a durable call (JetStream may be off). */
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = n->timeout_ms;
    if ((s = natsConnection_JetStream(&n->js, n->nc, &jo)) != NATS_OK) {
        int rc = funcd_error_set(FUNCD_ENOMEM, "bus: cannot make a JetStream context: %s",
                                 nats_why(s));
        nats_free(&n->base);
        return rc;
    }
    *out = &n->base;
    return 0;
}
