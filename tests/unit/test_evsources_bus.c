/*
 * A bus source's messages that the delivery queue refuses (ADR 0066),
 * with a fake queue on a memory bus: they wait in the source, and once
 * the queue takes them again every one is delivered, once and in order;
 * one firing of the retry timer submits at most
 * FUNCD_EVSOURCES_BUS_RETRY_BATCH of them, the rest in the loop's next
 * turns (review18 L-9: each submission writes the store on the loop, and a
 * firing drained up to 1000).
 */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "eventing/sources_internal.h"
#include "funcd/funcd.h"
#include "funcd/sys/error.h"
#include "harness.h"
#include "objects/objects.h"
#include "util/misc.h"

#define MESSAGES 300

typedef struct fake_queue {
    struct event_base *loop;
    struct event *turn; /* made active by each submission: the loop's next callback ends a run */
    funcd_bus *bus;
    int full;           /* refuse (FUNCD_ENOSPC) while set */
    int refused;
    int taken, in_order;
    int streak, max_streak; /* submissions taken within one callback of the loop */
} fake_queue;

static int fake_submit(const funcd_evsources_event *ev, void *payload)
{
    fake_queue *q = payload;
    if (q->full) {
        q->refused++;
        return funcd_error_set(FUNCD_ENOSPC, "the test's queue is full");
    }
    char want[16];
    snprintf(want, sizeof(want), "m-%04d", q->taken);
    q->in_order += ev->body_len == strlen(want) && memcmp(ev->body, want, ev->body_len) == 0;
    q->taken++;
    if (++q->streak > q->max_streak)
        q->max_streak = q->streak;
    event_active(q->turn, EV_READ, 0);
    if (q->taken == MESSAGES)
        event_base_loopexit(q->loop, NULL);
    return 0;
}

static void on_turn(evutil_socket_t fd, short what, void *arg)
{
    ((fake_queue *)arg)->streak = 0;
}

/* The messages, published on the loop once the source subscribed. */
static void on_publish(evutil_socket_t fd, short what, void *arg)
{
    fake_queue *q = arg;
    for (int i = 0; i < MESSAGES; i++) {
        char m[16];
        snprintf(m, sizeof(m), "m-%04d", i);
        q->bus->publish(q->bus, "default.orders", m, strlen(m));
    }
}

/* The queue has room again. */
static void on_room(evutil_socket_t fd, short what, void *arg)
{
    ((fake_queue *)arg)->full = 0;
}

TEST(held_messages_all_delivered_in_batches)
{
    funcd_store *store = NULL;
    fake_queue q = {.full = 1};
    CHECK(funcd_store_memory_new(&store, 0) == 0);
    if (funcd_bus_memory_new(&q.bus) < 0) {
        store->free(store);
        FAILF("no memory bus");
    }
    const char *text = "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"EventSource\",\"metadata\":"
                       "{\"name\":\"orders\"},\"spec\":{\"type\":\"bus\",\"bus\":{\"subject\":"
                       "\"default.orders\"},\"target\":{\"function\":\"f\"}}}";
    cJSON *obj = cJSON_Parse(text), *out = NULL;
    int rc = funcd_objects_create(store, funcd_kind_by_kind("EventSource"), "default", obj, &out);
    cJSON_Delete(obj);
    cJSON_Delete(out);
    q.loop = event_base_new();
    q.turn = event_new(q.loop, -1, 0, on_turn, &q);
    funcd_evsources_config cfg = {.loop = q.loop, .store = store, .bus = q.bus,
                                  .submit = fake_submit, .submit_payload = &q};
    funcd_evsources *s = NULL;
    if (rc == 0)
        rc = funcd_evsources_new(&s, &cfg);
    if (rc == 0)
        rc = funcd_evsources_start(s);
    struct timeval publish_at = {0, 300000}, room_at = {0, 800000}, end = {10, 0};
    if (rc == 0) {
        event_base_once(q.loop, -1, EV_TIMEOUT, on_publish, &q, &publish_at);
        event_base_once(q.loop, -1, EV_TIMEOUT, on_room, &q, &room_at);
        event_base_loopexit(q.loop, &end);
        event_base_dispatch(q.loop);
    }
    funcd_evsources_free(s);
    event_free(q.turn);
    event_base_free(q.loop);
    q.bus->free(q.bus);
    store->free(store);
    CHECK_INT(rc, 0);
    fprintf(stderr, "  refused %d, then taken %d (%d in order), at most %d per firing\n",
            q.refused, q.taken, q.in_order, q.max_streak);
    CHECK(q.refused >= 1);
    CHECK_INT(q.taken, MESSAGES);
    CHECK_INT(q.in_order, MESSAGES);
    CHECK(q.max_streak <= FUNCD_EVSOURCES_BUS_RETRY_BATCH);
}

int main(void)
{
    RUN(held_messages_all_delivered_in_batches);
    return HARNESS_END();
}
