/*
 * Fuzz target for the gRPC server's HTTP/2 side: the client connection
 * preface, then the input as raw frames, into a server connection over an
 * in-memory bufferevent pair; what the server writes back is discarded.
 * The handler answers at once (echo, or an error for paths with "Fail"),
 * or later for paths with "Defer": half of those are answered while the
 * server runs, the rest after it is freed, so the late-reply paths run too.
 * ASan/UBSan and the leak checker are the oracle.
 */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fnrunner/grpc.h"

#define MAX_PENDING 256

typedef struct pending {
    funcd_grpc_call *calls[MAX_PENDING];
    size_t n;
} pending;

static void quiet(funcd_log_level level, const char *message, void *payload)
{
}

static void handler(funcd_grpc_call *call, const char *path, const uint8_t *msg, size_t len,
                    void *payload)
{
    pending *p = payload;
    if (strstr(path, "Defer") && p->n < MAX_PENDING) {
        p->calls[p->n++] = call;
        return;
    }
    if (strstr(path, "Fail"))
        funcd_grpc_reply(call, FUNCD_GRPC_INVALID_ARGUMENT, (const char *)path, NULL, 0);
    else
        funcd_grpc_reply(call, FUNCD_GRPC_OK, NULL, msg, len);
}

static void reply_all(pending *p, size_t keep)
{
    while (p->n > keep) {
        funcd_grpc_call *c = p->calls[--p->n];
        if (funcd_grpc_call_cancelled(c))
            funcd_grpc_reply(c, FUNCD_GRPC_OK, NULL, NULL, 0);
        else
            funcd_grpc_reply(c, FUNCD_GRPC_OK, NULL, (const uint8_t *)"late", 4);
    }
}

static void discard(struct bufferevent *bev, void *arg)
{
    struct evbuffer *in = bufferevent_get_input(bev);
    evbuffer_drain(in, evbuffer_get_length(in));
}

/* Deferred callbacks chain (read, respond, partner reads): a few rounds. */
static void run(struct event_base *base)
{
    for (int i = 0; i < 8; i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    static const funcd_logger logger = {quiet, FUNCD_LOG_ERROR, NULL};
    pending p = {.n = 0};
    struct event_base *base = event_base_new();
    funcd_grpc_server *s = NULL;
    funcd_grpc_config cfg = {base, 4096, handler, &p, &logger};
    struct bufferevent *pair[2];
    if (!base || funcd_grpc_server_new(&s, &cfg, NULL, NULL, 0) != 0 ||
        bufferevent_pair_new(base, BEV_OPT_DEFER_CALLBACKS, pair) != 0) {
        fprintf(stderr, "fuzz_grpc_h2: setup failed\n");
        abort();
    }
    bufferevent_setcb(pair[1], discard, NULL, NULL, NULL);
    bufferevent_enable(pair[1], EV_READ | EV_WRITE);
    if (funcd_grpc_server_adopt(s, pair[0]) != 0)
        abort();
    bufferevent_write(pair[1], preface, sizeof(preface) - 1);
    /* In two halves, so replies made in between interleave with input. */
    size_t half = size / 2;
    bufferevent_write(pair[1], data, half);
    run(base);
    reply_all(&p, p.n / 2);
    bufferevent_write(pair[1], data + half, size - half);
    run(base);
    reply_all(&p, p.n / 2);
    run(base);
    funcd_grpc_server_free(s);
    reply_all(&p, 0);
    bufferevent_free(pair[1]);
    run(base); /* deferred callbacks hold references to the pair */
    event_base_free(base);
    return 0;
}
