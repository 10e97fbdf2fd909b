/* The bus port's durable-stream conformance suite: see bus_durable_suite.h. */
#include "bus_durable_suite.h"

#include <stdatomic.h>

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

typedef struct acked_target {
    dcounter **cs;
    size_t n;
    int want;
} acked_target;

static int acked_total(dcounter **cs, size_t n)
{
    int sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += atomic_load(&cs[i]->acked);
    return sum;
}

static int reached(void *arg)
{
    acked_target *t = arg;
    return acked_total(t->cs, t->n) >= t->want;
}

/* Waits until the counters together acknowledged `want`, then a little longer
 * for extra deliveries; returns their total. */
static int wait_acked(dcounter **cs, size_t n, int want)
{
    acked_target t = {cs, n, want};
    if (conf_wait(reached, &t, DURABLE_WAIT_MS))
        conf_sleep_ms(DURABLE_SETTLE_MS);
    return acked_total(cs, n);
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

typedef void (*durable_case_fn)(conf_case *cc, funcd_bus *b);

static const struct {
    const char *name;
    durable_case_fn fn;
} cases[] = {
    {"stream_and_name_rules", case_rules},
    {"delivers_and_acknowledges", case_delivers_and_acks},
    {"away_and_back", case_away_and_back},
    {"only_after_creation", case_only_after_creation},
    {"refused_comes_again", case_refused_comes_again},
    {"shared_consumer", case_shared_consumer},
    {"independent_consumers", case_independent_consumers},
    {"delete_consumer", case_delete_consumer},
};

static int has_durable(const funcd_bus *b)
{
    return b->version >= 2 && b->stream_ensure && b->publish_durable && b->consume &&
           b->consumer_delete;
}

int funcd_bus_durable_conformance_run(funcd_bus *(*make)(void *payload), void *payload,
                                      int verbose)
{
    conf_tally tally = {0, 0};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        conf_case cc = {"bus-durable", cases[i].name, verbose, 0};
        funcd_bus *b = make(payload);
        if (!b)
            conf_fail(&cc, __FILE__, __LINE__, "the factory returned no bus: %s",
                      funcd_error_last()->message);
        else if (!has_durable(b))
            conf_fail(&cc, __FILE__, __LINE__, "the driver has no durable streams (version %u)",
                      b->version);
        else
            cases[i].fn(&cc, b);
        if (b && b->free)
            b->free(b);
        conf_report(&cc, &tally);
    }
    if (verbose)
        fprintf(stderr, "bus durable conformance: %d passed, %d failed\n", tally.passed,
                tally.failed);
    return tally.failed;
}
