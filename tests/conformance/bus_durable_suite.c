/* The bus port's durable-stream conformance suite: see bus_durable_suite.h. */
#include "bus_durable_suite.h"

#include <stdatomic.h>

#include "bus_common.h"
#include "conformance.h"

/* Redelivery after a refusal may take a second (NATS), on a loaded machine more. */
#define DURABLE_WAIT_MS 15000
/* How long to watch for an unwanted extra delivery. */
#define DURABLE_SETTLE_MS 300

typedef struct dcounter {
    atomic_int deliveries, acked;
    atomic_int refuse; /* refuse this many deliveries first */
} dcounter;

static int durable_cb(const char *subject, const void *data, size_t len, void *payload)
{
    dcounter *c = payload;
    atomic_fetch_add(&c->deliveries, 1);
    int left = atomic_load(&c->refuse);
    while (left > 0)
        if (atomic_compare_exchange_weak(&c->refuse, &left, left - 1))
            return -1;
    atomic_fetch_add(&c->acked, 1);
    return 0;
}

/* Waits until the counters together acknowledged `want`, then a little longer
 * for extra deliveries; returns their total. */
static int wait_acked(dcounter **cs, size_t n, int want)
{
    atomic_int *counts[2];
    for (size_t i = 0; i < n && i < 2; i++)
        counts[i] = &cs[i]->acked;
    return conf_wait_sum(counts, n < 2 ? n : 2, want, DURABLE_WAIT_MS, DURABLE_SETTLE_MS);
}

static int wait_one(dcounter *c, int want)
{
    return wait_acked(&c, 1, want);
}

static int publish_n(funcd_bus *b, const char *subject, int n)
{
    for (int i = 0; i < n; i++) {
        char msg[32];
        int len = snprintf(msg, sizeof(msg), "m%d", i);
        int rc = b->publish_durable(b, subject, msg, (size_t)len);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static void unsub(funcd_bus *b, funcd_bus_sub **sub)
{
    if (*sub)
        b->unsubscribe(b, *sub);
    *sub = NULL;
}

/* ---- cases ------------------------------------------------------------------------------- */

static void case_rules(conf_case *cc, funcd_bus *b)
{
    funcd_bus_sub *sub = NULL;
    dcounter c = {0};
    EXPECT_OK(b->stream_ensure(b, "dr-a", "dr.a.>", 0));
    EXPECT_OK(b->stream_ensure(b, "dr-a", "dr.a.>", 60000)); /* again: fine */
    EXPECT_RC(b->stream_ensure(b, "dr-a", "dr.b.>", 0), FUNCD_EEXISTS);
    EXPECT_RC(b->stream_ensure(b, "dr-b", "dr.a.x", 0), FUNCD_EEXISTS); /* overlaps dr-a */
    EXPECT_RC(b->stream_ensure(b, "dr-c", "dr.*.y", 0), FUNCD_EEXISTS); /* overlaps dr-a too */
    EXPECT_RC(b->stream_ensure(b, "dr.c", "dr.c.>", 0), FUNCD_EINVAL);
    EXPECT_RC(b->stream_ensure(b, "", "dr.c.>", 0), FUNCD_EINVAL);
    EXPECT_RC(b->stream_ensure(b, "dr-c", "dr..c", 0), FUNCD_EINVAL);
    EXPECT_RC(b->stream_ensure(b, "dr-c", "dr.c", -1), FUNCD_EINVAL);
    EXPECT_RC(b->publish_durable(b, "dr.none.x", "x", 1), FUNCD_ENOTFOUND);
    EXPECT_RC(b->publish_durable(b, "dr.a.>", "x", 1), FUNCD_EINVAL);
    EXPECT_RC(b->consume(b, "dr-none", "c", durable_cb, &c, &sub), FUNCD_ENOTFOUND);
    EXPECT_RC(b->consume(b, "dr-a", "c.1", durable_cb, &c, &sub), FUNCD_EINVAL);
    EXPECT_RC(b->consume(b, "dr-a", "c", NULL, &c, &sub), FUNCD_EINVAL);
    EXPECT_RC(b->consumer_delete(b, "dr-a", "ghost"), FUNCD_ENOTFOUND);
done:
    unsub(b, &sub);
}

static void case_delivers_and_acks(conf_case *cc, funcd_bus *b)
{
    funcd_bus_sub *sub = NULL;
    dcounter c = {0};
    EXPECT_OK(b->stream_ensure(b, "dd", "dd.>", 0));
    EXPECT_OK(b->consume(b, "dd", "c1", durable_cb, &c, &sub));
    EXPECT_OK(publish_n(b, "dd.x", 10));
    EXPECT_OK(b->publish(b, "dd.y", "plain", 5)); /* a plain publish is kept too */
    EXPECT_INT(wait_one(&c, 11), 11);
    EXPECT_INT(atomic_load(&c.deliveries), 11);
done:
    unsub(b, &sub);
}

/* What was published while nobody was attached arrives on the next attach. */
static void case_away_and_back(conf_case *cc, funcd_bus *b)
{
    funcd_bus_sub *sub = NULL;
    dcounter first = {0}, second = {0};
    EXPECT_OK(b->stream_ensure(b, "da", "da.>", 0));
    EXPECT_OK(b->consume(b, "da", "c", durable_cb, &first, &sub));
    EXPECT_OK(publish_n(b, "da.x", 1));
    EXPECT_INT(wait_one(&first, 1), 1);
    unsub(b, &sub);
    EXPECT_OK(publish_n(b, "da.x", 5));
    conf_sleep_ms(DURABLE_SETTLE_MS);
    EXPECT_INT(atomic_load(&first.deliveries), 1);
    EXPECT_OK(b->consume(b, "da", "c", durable_cb, &second, &sub));
    EXPECT_INT(wait_one(&second, 5), 5);
    EXPECT_INT(atomic_load(&second.deliveries), 5);
done:
    unsub(b, &sub);
}

/* A consumer starts at its creation: earlier messages are not its own. */
static void case_only_after_creation(conf_case *cc, funcd_bus *b)
{
    funcd_bus_sub *sub = NULL;
    dcounter c = {0};
    EXPECT_OK(b->stream_ensure(b, "dn", "dn.>", 0));
    EXPECT_OK(publish_n(b, "dn.x", 3));
    EXPECT_OK(b->consume(b, "dn", "c", durable_cb, &c, &sub));
    EXPECT_OK(publish_n(b, "dn.x", 1));
    EXPECT_INT(wait_one(&c, 1), 1);
    EXPECT_INT(atomic_load(&c.deliveries), 1);
done:
    unsub(b, &sub);
}

static int delivered_once(void *arg)
{
    return atomic_load(&((dcounter *)arg)->deliveries) >= 1;
}

/* A refused message comes again (after a second on NATS; at the next publish
 * on the memory bus): at least once. */
static void case_refused_comes_again(conf_case *cc, funcd_bus *b)
{
    funcd_bus_sub *sub = NULL;
    dcounter c = {0};
    atomic_store(&c.refuse, 1);
    EXPECT_OK(b->stream_ensure(b, "drf", "drf.>", 0));
    EXPECT_OK(b->consume(b, "drf", "c", durable_cb, &c, &sub));
    EXPECT_OK(publish_n(b, "drf.x", 1));
    EXPECT(conf_wait(delivered_once, &c, DURABLE_WAIT_MS));
    EXPECT_OK(publish_n(b, "drf.x", 1));
    EXPECT_INT(wait_one(&c, 2), 2);
    EXPECT_INT(atomic_load(&c.deliveries), 3);
done:
    unsub(b, &sub);
}

/* Subscriptions attached to one consumer share its messages. */
static void case_shared_consumer(conf_case *cc, funcd_bus *b)
{
    funcd_bus_sub *s1 = NULL, *s2 = NULL;
    dcounter c1 = {0}, c2 = {0};
    dcounter *both[2] = {&c1, &c2};
    EXPECT_OK(b->stream_ensure(b, "ds", "ds.>", 0));
    EXPECT_OK(b->consume(b, "ds", "workers", durable_cb, &c1, &s1));
    EXPECT_OK(b->consume(b, "ds", "workers", durable_cb, &c2, &s2));
    EXPECT_OK(publish_n(b, "ds.job", 100));
    EXPECT_INT(wait_acked(both, 2, 100), 100);
    EXPECT_INT(atomic_load(&c1.deliveries) + atomic_load(&c2.deliveries), 100);
    EXPECT(atomic_load(&c1.acked) > 0);
    EXPECT(atomic_load(&c2.acked) > 0);
done:
    unsub(b, &s1);
    unsub(b, &s2);
}

/* Two consumers of one stream each get every message. */
static void case_independent_consumers(conf_case *cc, funcd_bus *b)
{
    funcd_bus_sub *s1 = NULL, *s2 = NULL;
    dcounter c1 = {0}, c2 = {0};
    EXPECT_OK(b->stream_ensure(b, "di", "di.>", 0));
    EXPECT_OK(b->consume(b, "di", "one", durable_cb, &c1, &s1));
    EXPECT_OK(b->consume(b, "di", "two", durable_cb, &c2, &s2));
    EXPECT_OK(publish_n(b, "di.x", 10));
    EXPECT_INT(wait_one(&c1, 10), 10);
    EXPECT_INT(wait_one(&c2, 10), 10);
done:
    unsub(b, &s1);
    unsub(b, &s2);
}

/* A deleted consumer forgets its place: the same name starts afresh. */
static void case_delete_consumer(conf_case *cc, funcd_bus *b)
{
    funcd_bus_sub *sub = NULL;
    dcounter first = {0}, second = {0};
    EXPECT_OK(b->stream_ensure(b, "dx", "dx.>", 0));
    EXPECT_OK(b->consume(b, "dx", "c", durable_cb, &first, &sub));
    unsub(b, &sub);
    EXPECT_OK(publish_n(b, "dx.x", 3));
    EXPECT_OK(b->consumer_delete(b, "dx", "c"));
    EXPECT_RC(b->consumer_delete(b, "dx", "c"), FUNCD_ENOTFOUND);
    EXPECT_OK(b->consume(b, "dx", "c", durable_cb, &second, &sub));
    EXPECT_OK(publish_n(b, "dx.x", 1));
    EXPECT_INT(wait_one(&second, 1), 1);
    EXPECT_INT(atomic_load(&second.deliveries), 1);
    EXPECT_INT(atomic_load(&first.deliveries), 0);
done:
    unsub(b, &sub);
}

/* ---- the runner ------------------------------------------------------------------------ */

static const conf_bus_case cases[] = {
    {"stream_and_name_rules", case_rules},
    {"delivers_and_acknowledges", case_delivers_and_acks},
    {"away_and_back", case_away_and_back},
    {"only_after_creation", case_only_after_creation},
    {"refused_comes_again", case_refused_comes_again},
    {"shared_consumer", case_shared_consumer},
    {"independent_consumers", case_independent_consumers},
    {"delete_consumer", case_delete_consumer},
};

static int fit(const funcd_bus *b, char *why, size_t len)
{
    if (b->version >= 2 && b->stream_ensure && b->publish_durable && b->consume &&
        b->consumer_delete)
        return 1;
    snprintf(why, len, "the driver has no durable streams (version %u)", b->version);
    return 0;
}

int funcd_bus_durable_conformance_run(funcd_bus *(*make)(void *payload), void *payload,
                                      int verbose)
{
    return conf_bus_run("bus-durable", "bus durable conformance", cases,
                        sizeof(cases) / sizeof(cases[0]), make, payload, verbose, fit);
}
