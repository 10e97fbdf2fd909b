/*
 * The NATS bus against a real nats-server the test starts itself
 * (tests/nats_env.c): the bus conformance suite, then what only NATS brings:
 * a server restarted under a subscriber, a JetStream durable consumer that
 * was away (its process gone, and the server restarted meanwhile), and
 * connection errors.
 * Exits 77 when nats-server is not installed.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "../harness.h"
#include "../nats_env.h"
#include "bus_durable_suite.h"
#include "bus_suite.h"
#include "funcd/funcd.h"
#include "funcd/sys/bus.h"

static nats_env env;

static funcd_bus *make_nats(void *payload)
{
    funcd_bus *b = NULL;
    funcd_bus_nats_new(&b, env.url, NULL);
    return b;
}

TEST(conformance)
{
    CHECK_INT(funcd_bus_conformance_run(make_nats, NULL, 1), 0);
}

TEST(durable_conformance)
{
    CHECK_INT(funcd_bus_durable_conformance_run(make_nats, NULL, 1), 0);
}

static void sleep_ms(int ms)
{
    nanosleep(&(struct timespec){ms / 1000, (long)(ms % 1000) * 1000000L}, NULL);
}

/* Polls until *n reaches want or timeout_ms passes; returns *n. */
static int wait_at_least(atomic_int *n, int want, int timeout_ms)
{
    for (int waited = 0; atomic_load(n) < want && waited < timeout_ms; waited += 5)
        sleep_ms(5);
    return atomic_load(n);
}

/* What the bus told funcd's logger. */
typedef struct log_seen {
    atomic_int disconnected, reconnected, lines;
} log_seen;

static void log_cb(funcd_log_level level, const char *message, void *payload)
{
    log_seen *s = payload;
    atomic_fetch_add(&s->lines, 1);
    if (strstr(message, "disconnected from NATS at nats://127.0.0.1:"))
        atomic_fetch_add(&s->disconnected, 1);
    if (strstr(message, "reconnected to NATS at nats://127.0.0.1:"))
        atomic_fetch_add(&s->reconnected, 1);
}

static void count_cb(const char *subject, const void *data, size_t len, void *payload)
{
    atomic_fetch_add((atomic_int *)payload, 1);
}

/* nats-server killed and started again under a subscriber: libnats
 * reconnects by itself, the subscription is resumed on the new connection,
 * messages published after the reconnect arrive, and funcd's logger heard of
 * both events. */
TEST(server_restart_under_a_subscriber)
{
    log_seen seen = {0};
    atomic_int got = 0;
    funcd_bus *b = NULL;
    funcd_bus_sub *sub = NULL;
    funcd_bus_nats_options o = FUNCD_BUS_NATS_OPTIONS_INIT;
    o.reconnect_wait_ms = 50;
    o.log = log_cb;
    o.log_level = FUNCD_LOG_DEBUG;
    o.log_payload = &seen;
    CHECK_INT(funcd_bus_nats_new(&b, env.url, &o), 0);
    int rc = b->subscribe(b, "rs.events", NULL, count_cb, &got, &sub);
    if (rc == 0)
        rc = b->publish(b, "rs.events", "before", 6);
    int before = rc == 0 ? wait_at_least(&got, 1, 5000) : -1;

    nats_env_halt(&env);
    int down = wait_at_least(&seen.disconnected, 1, 10000);
    int resumed = nats_env_resume(&env);
    int back = resumed == 0 ? wait_at_least(&seen.reconnected, 1, 20000) : 0;
    int after = -1, publish_errors = 0;
    if (back) {
        for (int i = 0; i < 50; i++)
            publish_errors += b->publish(b, "rs.events", "after", 5) < 0;
        after = wait_at_least(&got, 51, 10000);
    }
    sleep_ms(50);
    int total = atomic_load(&got);
    if (sub)
        b->unsubscribe(b, sub);
    b->free(b);
    CHECK_INT(rc, 0);
    CHECK_INT(before, 1);
    CHECK_INT(down, 1);
    CHECK_INT(resumed, 0);
    CHECK_INT(back, 1);
    CHECK_INT(publish_errors, 0);
    CHECK_INT(after, 51);
    CHECK_INT(total, 51); /* nothing twice */
}

static int ack_cb(const char *subject, const void *data, size_t len, void *payload)
{
    atomic_fetch_add((atomic_int *)payload, 1);
    return 0;
}

/* A durable consumer whose bus is gone (a node that died) while messages
 * were published, and the server restarted meanwhile (the stream is on
 * disk): attached again from a new bus, it gets every one of them, once. */
TEST(durable_consumer_away_across_a_restart)
{
    atomic_int first = 0, later = 0;
    funcd_bus *b = NULL;
    funcd_bus_sub *sub = NULL;
    CHECK_INT(funcd_bus_nats_new(&b, env.url, NULL), 0);
    int rc = b->stream_ensure(b, "away", "away.>", 0);
    if (rc == 0)
        rc = b->consume(b, "away", "node", ack_cb, &first, &sub);
    if (sub)
        b->unsubscribe(b, sub);
    sub = NULL;
    b->free(b); /* the consumer's node is gone */
    CHECK_INT(rc, 0);

    CHECK_INT(funcd_bus_nats_new(&b, env.url, NULL), 0);
    int published = 0;
    for (int i = 0; i < 20; i++)
        published += b->publish_durable(b, "away.event", "e", 1) == 0;
    b->free(b);
    CHECK_INT(published, 20);

    nats_env_halt(&env);
    CHECK_INT(nats_env_resume(&env), 0);

    funcd_bus_nats_options o = FUNCD_BUS_NATS_OPTIONS_INIT;
    o.timeout_ms = 10000; /* JetStream may still be recovering its store */
    CHECK_INT(funcd_bus_nats_new(&b, env.url, &o), 0);
    rc = b->consume(b, "away", "node", ack_cb, &later, &sub);
    int got = rc == 0 ? wait_at_least(&later, 20, 15000) : -1;
    sleep_ms(300);
    int total = atomic_load(&later);
    if (sub)
        b->unsubscribe(b, sub);
    b->free(b);
    CHECK_INT(rc, 0);
    CHECK_INT(got, 20);
    CHECK_INT(total, 20);
    CHECK_INT(atomic_load(&first), 0);
}

/* Nothing listens: a clear error naming the server, without its password. */
TEST(unreachable_server)
{
    funcd_bus *b = NULL;
    char url[128];
    /* The restart test's server port while halted would race; use port 1. */
    snprintf(url, sizeof(url), "nats://funcd:s3cret@127.0.0.1:1");
    funcd_bus_nats_options o = FUNCD_BUS_NATS_OPTIONS_INIT;
    o.timeout_ms = 500;
    int rc = funcd_bus_nats_new(&b, url, &o);
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", funcd_error_last()->message);
    CHECK_INT(rc, FUNCD_EIO);
    CHECK(b == NULL);
    CHECK_CONTAINS(msg, "nats://127.0.0.1:1");
    CHECK(strstr(msg, "s3cret") == NULL);
}

TEST(bad_arguments)
{
    funcd_bus *b = NULL;
    funcd_bus_nats_options o = {0};
    CHECK_INT(funcd_bus_nats_new(&b, env.url, &o), FUNCD_EVERSION); /* not from _INIT */
    CHECK_INT(funcd_bus_nats_new(&b, "", NULL), FUNCD_EINVAL);
    CHECK_INT(funcd_bus_nats_new(NULL, env.url, NULL), FUNCD_EINVAL);
    CHECK_INT(funcd_bus_nats_options_init(&o, 0), FUNCD_EVERSION);
    CHECK_INT(funcd_bus_nats_options_init(&o, FUNCD_BUS_NATS_OPTIONS_VERSION), 0);
    CHECK_INT(o.version, FUNCD_BUS_NATS_OPTIONS_VERSION);
    CHECK(b == NULL);
}

int main(void)
{
    if (!nats_env_server()) {
        fprintf(stderr, "nats-server is not installed: skipped\n");
        return 77;
    }
    if (nats_env_start(&env) < 0) {
        fprintf(stderr, "cannot start nats-server\n");
        return 1;
    }
    RUN(conformance);
    RUN(durable_conformance);
    RUN(durable_consumer_away_across_a_restart);
    RUN(server_restart_under_a_subscriber);
    RUN(unreachable_server);
    RUN(bad_arguments);
    nats_env_stop(&env);
    return HARNESS_END();
}
