/* The memory bus against the bus conformance suite, plus what only it promises. */
#include <pthread.h>

#include "../harness.h"
#include "bus_durable_suite.h"
#include "bus_suite.h"
#include "funcd/sys/bus.h"

static funcd_bus *make_memory(void *payload)
{
    funcd_bus *b = NULL;
    funcd_bus_memory_new(&b);
    return b;
}

TEST(conformance)
{
    CHECK_INT(funcd_bus_conformance_run(make_memory, NULL, 1), 0);
}

TEST(durable_conformance)
{
    CHECK_INT(funcd_bus_durable_conformance_run(make_memory, NULL, 1), 0);
}

typedef struct tally {
    int n;
    pthread_t thread;
} tally;

static void tally_cb(const char *subject, const void *data, size_t len, void *payload)
{
    tally *t = payload;
    t->n++;
    t->thread = pthread_self();
}

/* Uncontended delivery happens before publish returns, on its thread. */
TEST(synchronous_on_the_publisher_thread)
{
    funcd_bus *b = make_memory(NULL);
    funcd_bus_sub *sub = NULL;
    tally t = {0, 0};
    CHECK(b != NULL);
    b->subscribe(b, "sync.x", NULL, tally_cb, &t, &sub);
    b->publish(b, "sync.x", "m", 1);
    int n = t.n, same = t.n && pthread_equal(t.thread, pthread_self());
    b->unsubscribe(b, sub);
    b->free(b);
    CHECK_INT(n, 1);
    CHECK(same);
}

TEST(queue_group_round_robin_is_even)
{
    funcd_bus *b = make_memory(NULL);
    funcd_bus_sub *sub[3] = {NULL, NULL, NULL};
    tally t[3] = {{0, 0}, {0, 0}, {0, 0}};
    CHECK(b != NULL);
    for (int i = 0; i < 3; i++)
        b->subscribe(b, "rr.x", "g", tally_cb, &t[i], &sub[i]);
    for (int i = 0; i < 300; i++)
        b->publish(b, "rr.x", "m", 1);
    for (int i = 0; i < 3; i++)
        b->unsubscribe(b, sub[i]);
    b->free(b);
    for (int i = 0; i < 3; i++)
        CHECK_INT(t[i].n, 100);
}

typedef struct looper {
    funcd_bus *b;
    int n, limit;
} looper;

static void loop_cb(const char *subject, const void *data, size_t len, void *payload)
{
    looper *l = payload;
    if (++l->n < l->limit)
        l->b->publish(l->b, subject, data, len);
}

/* A callback publishing to itself is queued, not nested: no stack growth. */
TEST(self_publish_does_not_recurse)
{
    funcd_bus *b = make_memory(NULL);
    funcd_bus_sub *sub = NULL;
    CHECK(b != NULL);
    looper l = {b, 0, 100000};
    b->subscribe(b, "loop", NULL, loop_cb, &l, &sub);
    b->publish(b, "loop", "m", 1);
    b->unsubscribe(b, sub);
    b->free(b);
    CHECK_INT(l.n, 100000);
}

TEST(bad_arguments)
{
    funcd_bus *b = make_memory(NULL);
    funcd_bus_sub *sub = NULL;
    tally t = {0, 0};
    CHECK(b != NULL);
    int space = b->subscribe(b, "a b", NULL, tally_cb, &t, &sub);
    int group_space = b->subscribe(b, "a", "g 1", tally_cb, &t, &sub);
    int no_cb = b->subscribe(b, "a", NULL, NULL, &t, &sub);
    int bad_pub = b->publish(b, "a.>", "x", 1);
    char msg[256];
    snprintf(msg, sizeof(msg), "%s", funcd_error_last()->message);
    b->free(b);
    CHECK_INT(space, FUNCD_EINVAL);
    CHECK_INT(group_space, FUNCD_EINVAL);
    CHECK_INT(no_cb, FUNCD_EINVAL);
    CHECK_INT(bad_pub, FUNCD_EINVAL);
    CHECK_CONTAINS(msg, "a.>");
}

int main(void)
{
    RUN(conformance);
    RUN(durable_conformance);
    RUN(synchronous_on_the_publisher_thread);
    RUN(queue_group_round_robin_is_even);
    RUN(self_publish_does_not_recurse);
    RUN(bad_arguments);
    return HARNESS_END();
}
