/*
 * The cluster lease (lib/cluster/lease.c) over the memory store with fake
 * clocks: acquire, renew, expiry and takeover, a holder that cannot renew
 * stops before anyone else may start, release, a restart of the holder,
 * and node names.
 */
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../harness.h"
#include "cluster/nodes.h"
#include "cluster/lease.h"
#include "funcd/sys/error.h"
#include "funcd/sys/store.h"
#include "port/store.h"

#define TTL 1000

/* One process's view of the shared store: its writes fail while `down`
 * (the database is away for this node only). */
typedef struct view {
    funcd_store base;
    funcd_store *inner;
    int down;
} view;

static int v_get(funcd_store *s, const char *key, funcd_store_value *out)
{
    view *v = (view *)s;
    return v->down ? funcd_error_set(FUNCD_EUNAVAILABLE, "down")
                   : v->inner->get(v->inner, key, out);
}
static int v_put(funcd_store *s, const char *key, const void *value, size_t len,
                 uint64_t expected, uint64_t *revision)
{
    view *v = (view *)s;
    return v->down ? funcd_error_set(FUNCD_EUNAVAILABLE, "down")
                   : v->inner->put(v->inner, key, value, len, expected, revision);
}
static int v_del(funcd_store *s, const char *key, uint64_t expected, uint64_t *revision)
{
    view *v = (view *)s;
    return v->down ? funcd_error_set(FUNCD_EUNAVAILABLE, "down")
                   : v->inner->del(v->inner, key, expected, revision);
}

static void view_init(view *v, funcd_store *inner)
{
    memset(v, 0, sizeof(*v));
    v->base.version = FUNCD_STORE_VERSION;
    v->base.name = "view";
    v->base.get = v_get;
    v->base.put = v_put;
    v->base.del = v_del;
    v->inner = inner;
}

typedef struct world {
    funcd_store *store;
    view va, vb;
    funcd_lease a, b;
} world;

static int world_up(world *w)
{
    memset(w, 0, sizeof(*w));
    if (funcd_store_memory_new(&w->store, 0) < 0)
        return -1;
    view_init(&w->va, w->store);
    view_init(&w->vb, w->store);
    funcd_lease_init(&w->a, &w->va.base, FUNCD_LEADER_KEY, "node-a", TTL);
    funcd_lease_init(&w->b, &w->vb.base, FUNCD_LEADER_KEY, "node-b", TTL);
    return 0;
}

static void world_down(world *w)
{
    funcd_port_store_free(w->store);
}

/* Who the stored record names ("" when absent). */
static void stored_holder(world *w, char *out, size_t len)
{
    funcd_store_value v = {0};
    funcd_lease_record rec;
    out[0] = '\0';
    if (funcd_port_store_get(w->store, FUNCD_LEADER_KEY, &v) == 0 &&
        funcd_lease_record_parse(v.value, v.len, &rec) == 0)
        snprintf(out, len, "%s", rec.holder);
    free(v.value);
}

TEST(absent_lease_is_acquired_by_the_first)
{
    world w;
    CHECK(world_up(&w) == 0);
    char holder[64];
    int a = funcd_lease_step(&w.a, 1000000, 0);
    int b = funcd_lease_step(&w.b, 1000000, 1);
    stored_holder(&w, holder, sizeof(holder));
    int a_held = funcd_lease_held(&w.a, 1), b_held = funcd_lease_held(&w.b, 1);
    world_down(&w);
    CHECK_INT(a, 1);
    CHECK_INT(b, 0);
    CHECK_INT(a_held, 1);
    CHECK_INT(b_held, 0);
    CHECK_STR(holder, "node-a");
}

TEST(renewed_lease_is_never_taken)
{
    world w;
    CHECK(world_up(&w) == 0);
    int takeovers = 0, lapses = 0;
    CHECK(funcd_lease_step(&w.a, 0, 0) == 1);
    /* A renews every TTL/3, B tries at every 100 ms for 5 TTLs. */
    for (int64_t t = 0; t <= 5 * TTL; t += 100) {
        if (t % 300 == 0 && funcd_lease_step(&w.a, t, t) != 1)
            lapses++;
        if (funcd_lease_step(&w.b, t, t + 1) != 0)
            takeovers++;
        if (!funcd_lease_held(&w.a, t + 1))
            lapses++;
    }
    world_down(&w);
    CHECK_INT(takeovers, 0);
    CHECK_INT(lapses, 0);
}

TEST(expired_lease_is_taken_over_after_its_ttl)
{
    world w;
    CHECK(world_up(&w) == 0);
    CHECK(funcd_lease_step(&w.a, 0, 0) == 1);
    /* A stops renewing (it died). B first sees the record at 50. */
    int early = funcd_lease_step(&w.b, 50, 50);
    int before = funcd_lease_step(&w.b, 50 + TTL - 1, 50 + TTL - 1);
    int after = funcd_lease_step(&w.b, 50 + TTL, 50 + TTL);
    char holder[64];
    stored_holder(&w, holder, sizeof(holder));
    /* A comes back: it sees B's record and is not the leader. */
    int a_back = funcd_lease_step(&w.a, 60 + TTL, 60 + TTL);
    int a_held = funcd_lease_held(&w.a, 60 + TTL);
    world_down(&w);
    CHECK_INT(early, 0);
    CHECK_INT(before, 0);
    CHECK_INT(after, 1);
    CHECK_STR(holder, "node-b");
    CHECK_INT(a_back, 0);
    CHECK_INT(a_held, 0);
}

/* The fail-safe: a holder cut off from the store stops acting as one
 * before the TTL it last renewed ends, and so before anyone can take it. */
TEST(holder_that_cannot_renew_stops_before_another_starts)
{
    world w;
    CHECK(world_up(&w) == 0);
    CHECK(funcd_lease_step(&w.a, 0, 0) == 1);
    CHECK(funcd_lease_step(&w.b, 0, 0) == 0); /* B sees A's record at once */
    w.va.down = 1;
    int64_t a_stopped = -1, b_started = -1;
    for (int64_t t = 1; t <= 3 * TTL; t++) {
        if (t % 333 == 0)
            funcd_lease_step(&w.a, t, t); /* fails: the store is away for A */
        if (a_stopped < 0 && !funcd_lease_held(&w.a, t))
            a_stopped = t;
        if (t % 10 == 0 && b_started < 0 && funcd_lease_step(&w.b, t, t) == 1)
            b_started = t;
    }
    world_down(&w);
    CHECK(a_stopped > 0);
    CHECK(a_stopped < TTL);  /* before its TTL is over */
    CHECK(b_started >= TTL); /* B waited the whole TTL */
    CHECK(a_stopped < b_started);
}

TEST(a_store_error_keeps_the_lease_until_its_deadline)
{
    world w;
    CHECK(world_up(&w) == 0);
    CHECK(funcd_lease_step(&w.a, 0, 0) == 1);
    w.va.down = 1;
    int rc = funcd_lease_step(&w.a, 300, 300);
    int held_soon = funcd_lease_held(&w.a, 400);
    w.va.down = 0;
    int renewed = funcd_lease_step(&w.a, 600, 600);
    int held_later = funcd_lease_held(&w.a, 600 + TTL / 2);
    world_down(&w);
    CHECK_INT(rc, FUNCD_EUNAVAILABLE);
    CHECK_INT(held_soon, 1);
    CHECK_INT(renewed, 1);
    CHECK_INT(held_later, 1);
}

TEST(released_lease_is_taken_at_once)
{
    world w;
    CHECK(world_up(&w) == 0);
    CHECK(funcd_lease_step(&w.a, 0, 0) == 1);
    CHECK(funcd_lease_step(&w.b, 0, 0) == 0);
    funcd_lease_release(&w.a);
    int a_held = funcd_lease_held(&w.a, 1);
    int b = funcd_lease_step(&w.b, 1, 1);
    world_down(&w);
    CHECK_INT(a_held, 0);
    CHECK_INT(b, 1);
}

/* The same node started again (names are unique): its old record is its own. */
TEST(a_restarted_holder_takes_its_own_lease_back)
{
    world w;
    CHECK(world_up(&w) == 0);
    CHECK(funcd_lease_step(&w.a, 0, 0) == 1);
    funcd_lease again;
    funcd_lease_init(&again, &w.va.base, FUNCD_LEADER_KEY, "node-a", TTL);
    int rc = funcd_lease_step(&again, 5, 5);
    int b = funcd_lease_step(&w.b, 6, 6);
    world_down(&w);
    CHECK_INT(rc, 1);
    CHECK_INT(b, 0);
}

/* A record that moved under the holder (another wrote it): not ours. */
TEST(a_renewal_that_conflicts_gives_the_lease_up)
{
    world w;
    CHECK(world_up(&w) == 0);
    CHECK(funcd_lease_step(&w.a, 0, 0) == 1);
    const char *other = "{\"holder\":\"node-c\",\"renewMs\":0,\"acquireMs\":0,\"ttlMs\":1000}";
    CHECK(funcd_port_store_put(w.store, FUNCD_LEADER_KEY, other, strlen(other), FUNCD_STORE_ANY,
                               NULL) == 0);
    int rc = funcd_lease_step(&w.a, 300, 300);
    int held = funcd_lease_held(&w.a, 300);
    char holder[64];
    snprintf(holder, sizeof(holder), "%s", w.a.holder);
    world_down(&w);
    CHECK_INT(rc, 0);
    CHECK_INT(held, 0);
    CHECK_STR(holder, "node-c");
}

/* Not a lease record: taken over after a TTL like any other. */
TEST(a_garbage_record_expires_too)
{
    world w;
    CHECK(world_up(&w) == 0);
    CHECK(funcd_port_store_put(w.store, FUNCD_LEADER_KEY, "not json", 8, FUNCD_STORE_ANY,
                               NULL) == 0);
    int first = funcd_lease_step(&w.a, 0, 0);
    int before = funcd_lease_step(&w.a, TTL - 1, TTL - 1);
    int after = funcd_lease_step(&w.a, TTL, TTL);
    world_down(&w);
    CHECK_INT(first, 0);
    CHECK_INT(before, 0);
    CHECK_INT(after, 1);
}

TEST(node_names)
{
    CHECK(funcd_node_name_ok("node-1"));
    CHECK(funcd_node_name_ok("a"));
    CHECK(funcd_node_name_ok("host.example.com"));
    CHECK(funcd_node_name_ok("10.0.0.1"));
    CHECK(!funcd_node_name_ok(""));
    CHECK(!funcd_node_name_ok(NULL));
    CHECK(!funcd_node_name_ok("Node"));
    CHECK(!funcd_node_name_ok("-a"));
    CHECK(!funcd_node_name_ok("a-"));
    CHECK(!funcd_node_name_ok("a..b"));
    CHECK(!funcd_node_name_ok(".a"));
    CHECK(!funcd_node_name_ok("a."));
    CHECK(!funcd_node_name_ok("a.-b"));
    CHECK(!funcd_node_name_ok("a-.b"));
    CHECK(!funcd_node_name_ok("a/b"));
    CHECK(!funcd_node_name_ok("a_b"));
    char longest[300];
    memset(longest, 'a', 253);
    longest[253] = '\0';
    CHECK(funcd_node_name_ok(longest));
    longest[253] = 'a';
    longest[254] = '\0';
    CHECK(!funcd_node_name_ok(longest));
}

TEST(node_records)
{
    funcd_node_record r;
    const char *ok = "{\"name\":\"n1\",\"address\":\"127.0.0.1:1\",\"startMs\":5,\"renewMs\":9,"
                     "\"ttlMs\":1000,\"ready\":true,\"workers\":3}";
    CHECK(funcd_node_record_parse(ok, strlen(ok), &r) == 0);
    CHECK_STR(r.name, "n1");
    CHECK_STR(r.address, "127.0.0.1:1");
    CHECK_INT(r.start_ms, 5);
    CHECK_INT(r.renew_ms, 9);
    CHECK_INT(r.ttl_ms, 1000);
    CHECK_INT(r.ready, 1);
    CHECK_INT(r.workers, 3);
    CHECK(funcd_node_record_parse("{}", 2, &r) < 0);
    CHECK(funcd_node_record_parse("[", 1, &r) < 0);
    const char *no_ttl = "{\"name\":\"n1\",\"startMs\":5,\"renewMs\":9}";
    CHECK(funcd_node_record_parse(no_ttl, strlen(no_ttl), &r) < 0);
}

typedef struct hooks {
    int led, stopped; /* leading(1) and leading(0) calls */
} hooks;

static void on_leading(int leader, void *payload)
{
    hooks *h = payload;
    if (leader)
        h->led++;
    else
        h->stopped++;
}

/* A leader whose loop was held past its lease's deadline (is_leader said
 * no meanwhile, so leader-only work was skipped) and whose next renewal
 * succeeds is told it leads again: the platform then resyncs what it
 * skipped, instead of waiting for the next periodic resync. */
TEST(a_leader_back_from_a_lapse_is_told_again)
{
    struct event_base *loop = event_base_new();
    funcd_store *store = NULL;
    CHECK(loop && funcd_store_memory_new(&store, 0) == 0);
    hooks h = {0, 0};
    funcd_cluster_config cfg = {.loop = loop, .store = store, .name = "n1", .address = "",
                                .ttl_ms = 300, .leading = on_leading, .payload = &h};
    funcd_cluster *c = NULL;
    CHECK(funcd_cluster_new(&c, &cfg) == 0);
    CHECK(funcd_cluster_start(c) == 0);
    CHECK_INT(h.led, 1);
    CHECK(funcd_cluster_is_leader(c));
    usleep(400 * 1000); /* the loop is held: no renewal for longer than the TTL */
    int lapsed = !funcd_cluster_is_leader(c);
    struct timeval tick = {0, 250 * 1000}; /* one renewal (every 100 ms) at least */
    event_base_loopexit(loop, &tick);
    event_base_dispatch(loop);
    int leads = funcd_cluster_is_leader(c);
    funcd_cluster_free(c);
    store->free(store);
    event_base_free(loop);
    CHECK(lapsed);
    CHECK(leads);
    CHECK_INT(h.led, 2);
}

int main(void)
{
    RUN(absent_lease_is_acquired_by_the_first);
    RUN(renewed_lease_is_never_taken);
    RUN(expired_lease_is_taken_over_after_its_ttl);
    RUN(holder_that_cannot_renew_stops_before_another_starts);
    RUN(a_store_error_keeps_the_lease_until_its_deadline);
    RUN(released_lease_is_taken_at_once);
    RUN(a_restarted_holder_takes_its_own_lease_back);
    RUN(a_renewal_that_conflicts_gives_the_lease_up);
    RUN(a_garbage_record_expires_too);
    RUN(node_names);
    RUN(node_records);
    RUN(a_leader_back_from_a_lapse_is_told_again);
    return HARNESS_END();
}
