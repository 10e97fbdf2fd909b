/* The bus conformance suite: see bus_suite.h. */
#include "bus_suite.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "bus_common.h"
#include "conformance.h"

/* A subscription callback that counts, and optionally acts from inside. */
typedef struct counter {
    atomic_int n;
    atomic_int inflight, overlapped; /* never concurrently with itself */
    atomic_int bad_data;
    const char *expect_data; /* NULL: any */
    funcd_bus *bus;
    /* Publish the message on to this subject, for the first `forward_limit`. */
    const char *forward_to;
    int forward_limit;
    atomic_int forward_errors;
    /* Unsubscribe `self` on the Nth message. */
    _Atomic(funcd_bus_sub *) self;
    int unsubscribe_at;
    atomic_int unsubscribed;
    /* Subscribe `spawn` to this subject on the first message. */
    const char *spawn_subject;
    struct counter *spawn;
    _Atomic(funcd_bus_sub *) spawned;
    /* Stay inside the callback for a while, flagged in `running`. */
    int linger_ms;
    atomic_int running;
} counter;

static void counter_init(counter *c, funcd_bus *bus)
{
    memset(c, 0, sizeof(*c));
    c->bus = bus;
}

/* A spawned subscription counts with a counter hung off its parent. */
static void spawned_cb(const char *subject, const void *data, size_t len, void *payload)
{
    atomic_fetch_add(&((counter *)payload)->n, 1);
}

static void act_inside(counter *c, int n, const void *data, size_t len)
{
    if (c->forward_to && n <= c->forward_limit &&
        c->bus->publish(c->bus, c->forward_to, data, len) < 0)
        atomic_fetch_add(&c->forward_errors, 1);
    if (c->unsubscribe_at && n == c->unsubscribe_at) {
        funcd_bus_sub *self = atomic_load(&c->self);
        if (self) {
            c->bus->unsubscribe(c->bus, self);
            atomic_store(&c->unsubscribed, 1);
        }
    }
    if (c->spawn_subject && n == 1) {
        funcd_bus_sub *sub = NULL;
        if (c->bus->subscribe(c->bus, c->spawn_subject, NULL, spawned_cb, c->spawn, &sub) == 0)
            atomic_store(&c->spawned, sub);
    }
}

static void count_cb(const char *subject, const void *data, size_t len, void *payload)
{
    counter *c = payload;
    if (atomic_fetch_add(&c->inflight, 1) != 0)
        atomic_store(&c->overlapped, 1);
    atomic_store(&c->running, 1);
    int n = atomic_fetch_add(&c->n, 1) + 1;
    if (c->expect_data && (len != strlen(c->expect_data) || memcmp(data, c->expect_data, len) != 0))
        atomic_fetch_add(&c->bad_data, 1);
    act_inside(c, n, data, len);
    if (c->linger_ms)
        conf_sleep_ms(c->linger_ms);
    atomic_store(&c->running, 0);
    atomic_fetch_sub(&c->inflight, 1);
}

/* count_cb without the overlap check, for callbacks that nest (publish to themselves). */
static void nesting_cb(const char *subject, const void *data, size_t len, void *payload)
{
    counter *c = payload;
    int n = atomic_fetch_add(&c->n, 1) + 1;
    act_inside(c, n, data, len);
}

#define SUBS_MAX 8

static int total(counter **cs, size_t n)
{
    int sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += atomic_load(&cs[i]->n);
    return sum;
}

/* Waits until the counters together saw `want` messages, then a little
 * longer to catch extra deliveries; returns their total. */
static int wait_total(counter **cs, size_t n, int want)
{
    atomic_int *counts[SUBS_MAX];
    for (size_t i = 0; i < n && i < SUBS_MAX; i++)
        counts[i] = &cs[i]->n;
    return conf_wait_sum(counts, n < SUBS_MAX ? n : SUBS_MAX, want, CONF_WAIT_MS, CONF_SETTLE_MS);
}

static int wait_count(counter *c, int want)
{
    return wait_total(&c, 1, want);
}

/* Subscriptions of one case, ended at its end. */
typedef struct subs {
    funcd_bus *bus;
    funcd_bus_sub *sub[SUBS_MAX];
    size_t n;
} subs;

static int subscribe(subs *ss, const char *subject, const char *group, counter *c)
{
    funcd_bus_sub *sub = NULL;
    if (ss->n == SUBS_MAX)
        return FUNCD_ENOMEM;
    int rc = ss->bus->subscribe(ss->bus, subject, group, count_cb, c, &sub);
    if (rc == 0)
        ss->sub[ss->n++] = sub;
    return rc;
}

static void unsubscribe_all(subs *ss)
{
    for (size_t i = 0; i < ss->n; i++)
        if (ss->sub[i])
            ss->bus->unsubscribe(ss->bus, ss->sub[i]);
    ss->n = 0;
}

static int publish_str(funcd_bus *b, const char *subject, const char *data)
{
    return b->publish(b, subject, data, strlen(data));
}

/* ---- cases ------------------------------------------------------------------------------- */

static void case_fanout(conf_case *cc, funcd_bus *b)
{
    subs ss = {b, {0}, 0};
    counter c[3];
    counter *all[3] = {&c[0], &c[1], &c[2]};
    for (int i = 0; i < 3; i++) {
        counter_init(&c[i], b);
        c[i].expect_data = "hello";
        EXPECT_OK(subscribe(&ss, "fan.out", NULL, &c[i]));
    }
    for (int i = 0; i < 10; i++)
        EXPECT_OK(publish_str(b, "fan.out", "hello"));
    EXPECT_OK(publish_str(b, "fan.other", "hello"));
    EXPECT_INT(wait_total(all, 3, 30), 30);
    for (int i = 0; i < 3; i++) {
        EXPECT_INT(atomic_load(&c[i].n), 10);
        EXPECT_INT(atomic_load(&c[i].bad_data), 0);
    }
done:
    unsubscribe_all(&ss);
}

static void case_wildcard_star(conf_case *cc, funcd_bus *b)
{
    subs ss = {b, {0}, 0};
    counter a, one;
    counter *all[2] = {&a, &one};
    counter_init(&a, b);
    counter_init(&one, b);
    EXPECT_OK(subscribe(&ss, "ws.*.c", NULL, &a));
    EXPECT_OK(subscribe(&ss, "*", NULL, &one));
    static const char *const subjects[] = {"ws.b.c", "ws.x.c", "ws.b", "ws.b.c.d",
                                           "ws.c",   "x.b.c",  "ws",   "ws.b.cc"};
    for (size_t i = 0; i < sizeof(subjects) / sizeof(subjects[0]); i++)
        EXPECT_OK(publish_str(b, subjects[i], "x"));
    EXPECT_INT(wait_total(all, 2, 3), 3);
    EXPECT_INT(atomic_load(&a.n), 2);   /* ws.b.c, ws.x.c */
    EXPECT_INT(atomic_load(&one.n), 1); /* ws */
done:
    unsubscribe_all(&ss);
}

static void case_wildcard_tail(conf_case *cc, funcd_bus *b)
{
    subs ss = {b, {0}, 0};
    counter tail, every, mid, lit;
    counter *all[4] = {&tail, &every, &mid, &lit};
    for (int i = 0; i < 4; i++)
        counter_init(all[i], b);
    EXPECT_OK(subscribe(&ss, "wg.>", NULL, &tail));
    EXPECT_OK(subscribe(&ss, ">", NULL, &every));
    EXPECT_OK(subscribe(&ss, "wg.*.>", NULL, &mid));
    EXPECT_OK(subscribe(&ss, "wg.a", NULL, &lit));
    EXPECT_OK(publish_str(b, "wg", "x"));      /* every */
    EXPECT_OK(publish_str(b, "wg.a", "x"));    /* tail, every, lit */
    EXPECT_OK(publish_str(b, "wg.a.b", "x"));  /* tail, every, mid */
    EXPECT_OK(publish_str(b, "wg.ab", "x"));   /* tail, every */
    EXPECT_OK(publish_str(b, "other.x", "x")); /* every */
    EXPECT_INT(wait_total(all, 4, 10), 10);
    EXPECT_INT(atomic_load(&tail.n), 3);
    EXPECT_INT(atomic_load(&every.n), 5);
    EXPECT_INT(atomic_load(&mid.n), 1);
    EXPECT_INT(atomic_load(&lit.n), 1);
done:
    unsubscribe_all(&ss);
}

static void case_queue_group(conf_case *cc, funcd_bus *b)
{
    subs ss = {b, {0}, 0};
    counter m[3];
    counter *all[3] = {&m[0], &m[1], &m[2]};
    for (int i = 0; i < 3; i++) {
        counter_init(&m[i], b);
        EXPECT_OK(subscribe(&ss, "q.job", "workers", &m[i]));
    }
    for (int i = 0; i < 300; i++)
        EXPECT_OK(publish_str(b, "q.job", "work"));
    EXPECT_INT(wait_total(all, 3, 300), 300);
    for (int i = 0; i < 3; i++)
        EXPECT(atomic_load(&m[i].n) > 0); /* spread over the members */
done:
    unsubscribe_all(&ss);
}

static void case_mixed(conf_case *cc, funcd_bus *b)
{
    subs ss = {b, {0}, 0};
    counter p[2], g[3], h[2];
    counter *gs[3] = {&g[0], &g[1], &g[2]}, *hs[2] = {&h[0], &h[1]};
    counter *all[7] = {&p[0], &p[1], &g[0], &g[1], &g[2], &h[0], &h[1]};
    for (int i = 0; i < 7; i++)
        counter_init(all[i], b);
    for (int i = 0; i < 2; i++)
        EXPECT_OK(subscribe(&ss, "mx.>", NULL, &p[i]));
    for (int i = 0; i < 3; i++)
        EXPECT_OK(subscribe(&ss, "mx.>", "g", &g[i]));
    for (int i = 0; i < 2; i++)
        EXPECT_OK(subscribe(&ss, "mx.>", "h", &h[i]));
    for (int i = 0; i < 60; i++)
        EXPECT_OK(publish_str(b, i % 2 ? "mx.a" : "mx.b.c", "m"));
    EXPECT_INT(wait_total(all, 7, 240), 240);
    EXPECT_INT(atomic_load(&p[0].n), 60);
    EXPECT_INT(atomic_load(&p[1].n), 60);
    EXPECT_INT(total(gs, 3), 60);
    EXPECT_INT(total(hs, 2), 60);
done:
    unsubscribe_all(&ss);
}

static void case_unsubscribe_stops(conf_case *cc, funcd_bus *b)
{
    subs ss = {b, {0}, 0};
    counter c;
    counter_init(&c, b);
    EXPECT_OK(subscribe(&ss, "us.x", NULL, &c));
    EXPECT_OK(publish_str(b, "us.x", "1"));
    EXPECT_INT(wait_count(&c, 1), 1);
    unsubscribe_all(&ss);
    for (int i = 0; i < 3; i++)
        EXPECT_OK(publish_str(b, "us.x", "2"));
    EXPECT_INT(atomic_load(&c.n), 1);
    conf_sleep_ms(CONF_SETTLE_MS);
    EXPECT_INT(atomic_load(&c.n), 1);
done:
    unsubscribe_all(&ss);
}

static void case_publish_in_callback(conf_case *cc, funcd_bus *b)
{
    subs ss = {b, {0}, 0};
    funcd_bus_sub *loop_sub = NULL;
    counter ping, pong, loop;
    counter_init(&ping, b);
    counter_init(&pong, b);
    counter_init(&loop, b);
    ping.forward_to = "pi.pong";
    ping.forward_limit = 1000;
    pong.expect_data = "ball";
    EXPECT_OK(subscribe(&ss, "pi.ping", NULL, &ping));
    EXPECT_OK(subscribe(&ss, "pi.pong", NULL, &pong));
    for (int i = 0; i < 5; i++)
        EXPECT_OK(publish_str(b, "pi.ping", "ball"));
    EXPECT_INT(wait_count(&pong, 5), 5);
    EXPECT_INT(atomic_load(&pong.bad_data), 0);
    EXPECT_INT(atomic_load(&ping.forward_errors), 0);
    /* A callback publishing to its own subject: 1 + 4 forwarded. */
    loop.forward_to = "pi.loop";
    loop.forward_limit = 4;
    EXPECT_OK(b->subscribe(b, "pi.loop", NULL, nesting_cb, &loop, &loop_sub));
    EXPECT_OK(publish_str(b, "pi.loop", "again"));
    EXPECT_INT(wait_count(&loop, 5), 5);
    EXPECT_INT(atomic_load(&loop.forward_errors), 0);
done:
    if (loop_sub)
        b->unsubscribe(b, loop_sub);
    unsubscribe_all(&ss);
}

static void case_unsubscribe_self_in_callback(conf_case *cc, funcd_bus *b)
{
    subs ss = {b, {0}, 0};
    funcd_bus_sub *self_sub = NULL;
    counter self, other;
    counter_init(&self, b);
    counter_init(&other, b);
    self.unsubscribe_at = 1;
    EXPECT_OK(b->subscribe(b, "uself.x", NULL, count_cb, &self, &self_sub));
    atomic_store(&self.self, self_sub);
    EXPECT_OK(subscribe(&ss, "uself.x", NULL, &other));
    for (int i = 0; i < 5; i++)
        EXPECT_OK(publish_str(b, "uself.x", "m"));
    EXPECT_INT(wait_count(&other, 5), 5);
    EXPECT_INT(atomic_load(&self.unsubscribed), 1);
    EXPECT_INT(atomic_load(&self.n), 1);
done:
    if (self_sub && !atomic_load(&self.unsubscribed))
        b->unsubscribe(b, self_sub);
    unsubscribe_all(&ss);
}

static void case_subscribe_in_callback(conf_case *cc, funcd_bus *b)
{
    subs ss = {b, {0}, 0};
    funcd_bus_sub *spawned = NULL;
    counter parent, child;
    counter_init(&parent, b);
    counter_init(&child, b);
    parent.spawn_subject = "sc.new";
    parent.spawn = &child;
    EXPECT_OK(subscribe(&ss, "sc.trigger", NULL, &parent));
    EXPECT_OK(publish_str(b, "sc.trigger", "go"));
    EXPECT_INT(wait_count(&parent, 1), 1);
    spawned = atomic_load(&parent.spawned);
    EXPECT(spawned != NULL);
    EXPECT_OK(publish_str(b, "sc.new", "hi"));
    EXPECT_INT(wait_count(&child, 1), 1);
done:
    if (!spawned)
        spawned = atomic_load(&parent.spawned);
    if (spawned)
        b->unsubscribe(b, spawned);
    unsubscribe_all(&ss);
}

static void case_invalid_subjects(conf_case *cc, funcd_bus *b)
{
    static const char *const bad_publish[] = {"", "a..b", ".a", "a.", "a.*", "a.>", "*", ">"};
    static const char *const bad_subscribe[] = {"", "a..b", ".a", "a.", "a.>.b", ">.a"};
    funcd_bus_sub *sub = NULL;
    counter c;
    counter_init(&c, b);
    for (size_t i = 0; i < sizeof(bad_publish) / sizeof(bad_publish[0]); i++) {
        int rc = publish_str(b, bad_publish[i], "x");
        if (rc != FUNCD_EINVAL)
            conf_fail(cc, __FILE__, __LINE__,
                      "publish to \"%s\" returned %s, expected FUNCD_EINVAL", bad_publish[i],
                      funcd_error_name(rc));
    }
    for (size_t i = 0; i < sizeof(bad_subscribe) / sizeof(bad_subscribe[0]); i++) {
        sub = NULL;
        int rc = b->subscribe(b, bad_subscribe[i], NULL, count_cb, &c, &sub);
        if (rc == 0 && sub)
            b->unsubscribe(b, sub);
        if (rc != FUNCD_EINVAL)
            conf_fail(cc, __FILE__, __LINE__,
                      "subscribe to \"%s\" returned %s, expected FUNCD_EINVAL", bad_subscribe[i],
                      funcd_error_name(rc));
    }
    sub = NULL;
    EXPECT_RC(b->subscribe(b, "ok.x", "", count_cb, &c, &sub), FUNCD_EINVAL);
    EXPECT_OK(b->subscribe(b, "ok.*.x-y_z.>", NULL, count_cb, &c, &sub));
    EXPECT_OK(publish_str(b, "ok.A9.x-y_z.tail", "x"));
    EXPECT_INT(wait_count(&c, 1), 1);
done:
    if (sub)
        b->unsubscribe(b, sub);
}

#define PUBLISHERS 4
#define PUBLISHES 1000

typedef struct publisher {
    pthread_t th;
    funcd_bus *b;
    int id, errors;
} publisher;

static void *publisher_main(void *arg)
{
    publisher *p = arg;
    char subject[32];
    snprintf(subject, sizeof(subject), "cp.t%d", p->id);
    for (int i = 0; i < PUBLISHES; i++)
        if (publish_str(p->b, subject, "payload") < 0)
            p->errors++;
    return NULL;
}

static void case_concurrent_publishers(conf_case *cc, funcd_bus *b)
{
    subs ss = {b, {0}, 0};
    publisher p[PUBLISHERS];
    int started = 0;
    counter plain, g1, g2;
    counter *group[2] = {&g1, &g2};
    counter_init(&plain, b);
    counter_init(&g1, b);
    counter_init(&g2, b);
    EXPECT_OK(subscribe(&ss, "cp.>", NULL, &plain));
    EXPECT_OK(subscribe(&ss, "cp.*", "pool", &g1));
    EXPECT_OK(subscribe(&ss, "cp.*", "pool", &g2));
    for (; started < PUBLISHERS; started++) {
        p[started] = (publisher){.b = b, .id = started};
        EXPECT(pthread_create(&p[started].th, NULL, publisher_main, &p[started]) == 0);
    }
    for (int i = 0; i < started; i++)
        pthread_join(p[i].th, NULL);
    started = 0;
    for (int i = 0; i < PUBLISHERS; i++)
        EXPECT_INT(p[i].errors, 0);
    EXPECT_INT(wait_count(&plain, PUBLISHERS * PUBLISHES), PUBLISHERS * PUBLISHES);
    EXPECT_INT(wait_total(group, 2, PUBLISHERS * PUBLISHES), PUBLISHERS * PUBLISHES);
    EXPECT_INT(atomic_load(&plain.overlapped), 0);
    EXPECT_INT(atomic_load(&g1.overlapped), 0);
    EXPECT_INT(atomic_load(&g2.overlapped), 0);
done:
    for (int i = 0; i < started; i++)
        pthread_join(p[i].th, NULL);
    unsubscribe_all(&ss);
}

typedef struct one_publish {
    funcd_bus *b;
    const char *subject;
} one_publish;

static void *publish_once(void *arg)
{
    one_publish *o = arg;
    publish_str(o->b, o->subject, "slow");
    return NULL;
}

static int callback_running(void *arg)
{
    return atomic_load(&((counter *)arg)->running);
}

/* unsubscribe from another thread returns only once the callback is done. */
static void case_unsubscribe_waits_for_callback(conf_case *cc, funcd_bus *b)
{
    funcd_bus_sub *sub = NULL;
    pthread_t th;
    int started = 0;
    counter c;
    counter_init(&c, b);
    c.linger_ms = 100;
    one_publish o = {b, "slow.x"};
    EXPECT_OK(b->subscribe(b, "slow.x", NULL, count_cb, &c, &sub));
    EXPECT(pthread_create(&th, NULL, publish_once, &o) == 0);
    started = 1;
    EXPECT(conf_wait(callback_running, &c, CONF_WAIT_MS));
    b->unsubscribe(b, sub);
    sub = NULL;
    EXPECT_INT(atomic_load(&c.running), 0);
done:
    if (started)
        pthread_join(th, NULL);
    if (sub)
        b->unsubscribe(b, sub);
}

/* ---- the runner ------------------------------------------------------------------------ */

static const conf_bus_case cases[] = {
    {"fanout_to_every_subscriber", case_fanout},
    {"wildcard_star", case_wildcard_star},
    {"wildcard_tail", case_wildcard_tail},
    {"queue_group_exactly_once", case_queue_group},
    {"mixed_fanout_and_queue_groups", case_mixed},
    {"unsubscribe_stops_delivery", case_unsubscribe_stops},
    {"publish_inside_callback", case_publish_in_callback},
    {"unsubscribe_self_inside_callback", case_unsubscribe_self_in_callback},
    {"subscribe_inside_callback", case_subscribe_in_callback},
    {"invalid_subjects", case_invalid_subjects},
    {"concurrent_publishers", case_concurrent_publishers},
    {"unsubscribe_waits_for_callback", case_unsubscribe_waits_for_callback},
};

static int fit(const funcd_bus *b, char *why, size_t len)
{
    if (b->version == FUNCD_BUS_VERSION && b->name && b->publish && b->subscribe &&
        b->unsubscribe && b->free)
        return 1;
    snprintf(why, len, "the driver's vtable is not version %d or has NULL slots",
             FUNCD_BUS_VERSION);
    return 0;
}

int funcd_bus_conformance_run(funcd_bus *(*make)(void *payload), void *payload, int verbose)
{
    return conf_bus_run("bus", "bus conformance", cases, sizeof(cases) / sizeof(cases[0]), make,
                        payload, verbose, fit);
}
