/*
 * Nodes and the cluster lease, end to end (docs/adr/0044-nodes-and-leases.md):
 * two in-memory platforms in this process share one store, as two funcd
 * processes share PostgreSQL. Both are listed by GET .../nodes with exactly
 * one leader; the leader's graceful shutdown hands the lease over at once;
 * a node that does not hold the lease writes no status (a record held by a
 * "ghost" keeps it from leading) and takes over when the record goes; the
 * leader's status.replicas sums the workers of both nodes.
 *
 * `test_e2e_nodes CASE` runs one case; each runs in its own child.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <string.h>

#include "../harness.h"
#include "cluster/lease.h"
#include "cluster/nodes.h"
#include "funcd/sys/error.h"
#include "shared_store.h"
#include "test_serving_common.h"

#define TTL_MS 1500
#define NODES API "/nodes"

/* ---- one store, two platforms ------------------------------------------- */

/* Node `name` (lease TTL_MS) on `store`. */
static int node_up(env *e, funcd_store *store, const char *name)
{
    return env_up_with(e, store, funcd_with_node_name(name), funcd_with_lease_ttl(TTL_MS), NULL);
}

/* ---- reading the node list ------------------------------------------------ */

typedef struct seen {
    int n, ready, leaders;
    char leader[64];
} seen;

static int list_nodes(env *e, seen *s)
{
    memset(s, 0, sizeof(*s));
    if (REQ("GET", NODES, VIEWER_TOKEN, NULL) != 200)
        return -1;
    const cJSON *item;
    cJSON_ArrayForEach(item, jget(e->r.json, "items"))
    {
        s->n++;
        s->ready += cJSON_IsTrue(jget(item, "status.ready"));
        if (cJSON_IsTrue(jget(item, "status.leader"))) {
            s->leaders++;
            snprintf(s->leader, sizeof(s->leader), "%s", jstr(item, "metadata.name"));
        }
    }
    return 0;
}

typedef struct want {
    int n;
    const char *leader;
} want;

static int nodes_are(env *e, void *arg)
{
    const want *w = arg;
    seen s;
    return list_nodes(e, &s) == 0 && s.n == w->n && s.ready == w->n && s.leaders == 1 &&
           strcmp(s.leader, w->leader) == 0;
}

/* ---- cases ---------------------------------------------------------------- */

#define TWO_NODES(name)                                                                            \
    static void name##_body(env *a, env *b);                                                       \
    TEST(name)                                                                                     \
    {                                                                                              \
        env a_, b_;                                                                                \
        funcd_store *sa = NULL, *sb = NULL;                                                        \
        memset(&a_, 0, sizeof(a_));                                                                \
        memset(&b_, 0, sizeof(b_));                                                                \
        if (shared_pair(&sa, &sb) < 0)                                                             \
            FAILF("cannot make the shared store");                                                 \
        int up_ = node_up(&a_, sa, "node-a") == 0 && node_up(&b_, sb, "node-b") == 0;              \
        if (up_)                                                                                   \
            name##_body(&a_, &b_);                                                                 \
        env_down(&b_);                                                                             \
        env_down(&a_);                                                                             \
        sv_cleanup();                                                                              \
        if (!up_)                                                                                  \
            FAILF("cannot start two platforms: %s", funcd_error_last()->message);                  \
        char left_[512];                                                                           \
        if (sv_children(left_, sizeof(left_)))                                                     \
            FAILF("processes left behind after the platforms were freed: %s", left_);          \
    }                                                                                              \
    static void name##_body(env *a, env *b)

TWO_NODES(both_listed_one_leader)
{
    env *e = b; /* either node answers for the cluster */
    want w = {2, "node-a"}; /* the first to start took the absent lease */
    if (!env_poll(e, 5000, nodes_are, &w))
        FAILF("want node-a and node-b ready, node-a leading: %.800s", e->r.body);
    CHECK_STR(jstr(e->r.json, "kind"), "NodeList");
    CHECK_INT(REQ("GET", NODES "/node-b", DEV_TOKEN, NULL), 200);
    CHECK_STR(jstr(e->r.json, "kind"), "Node");
    CHECK_STR(jstr(e->r.json, "metadata.name"), "node-b");
    CHECK_STR(jstr(e->r.json, "status.address"), funcd_platform_data_plane_addr(b->p));
    CHECK(cJSON_IsTrue(jget(e->r.json, "status.ready")));
    CHECK(cJSON_IsFalse(jget(e->r.json, "status.leader")));
    CHECK(jstr(e->r.json, "status.startTime") && jstr(e->r.json, "status.renewTime"));
    /* The same answer from node-a. */
    e = a;
    CHECK_INT(REQ("GET", NODES "/node-a", ADMIN_TOKEN, NULL), 200);
    CHECK(cJSON_IsTrue(jget(e->r.json, "status.leader")));
    CHECK_INT(REQ("GET", NODES "/node-c", ADMIN_TOKEN, NULL), 404);
    CHECK(!status_problem(&e->r, 404, "NotFound", NULL));
    CHECK_INT(REQ("GET", NODES "/Not_A_Name", ADMIN_TOKEN, NULL), 400);
    CHECK(!status_problem(&e->r, 400, "BadRequest", "metadata.name"));
    CHECK_INT(REQ("DELETE", NODES "/node-b", ADMIN_TOKEN, NULL), 405);
    CHECK_INT(REQ("POST", NODES, ADMIN_TOKEN, "{}"), 405);
    CHECK(!status_problem(&e->r, 405, "MethodNotAllowed", NULL));
    CHECK_INT(REQ("GET", NODES, NULL, NULL), 401);
}

TWO_NODES(leader_shutdown_hands_over_within_the_ttl)
{
    env *e = b;
    want w = {2, "node-a"};
    if (!env_poll(e, 5000, nodes_are, &w))
        FAILF("want node-a leading two nodes: %.800s", e->r.body);
    env_down(a); /* graceful: node-a releases the lease and deletes its record */
    int64_t gone = e2e_now_ms();
    want alone = {1, "node-b"};
    int took = env_poll(e, TTL_MS, nodes_are, &alone);
    int64_t after = e2e_now_ms() - gone;
    if (!took)
        FAILF("node-b did not lead alone within the TTL (%d ms): %.800s", TTL_MS, e->r.body);
    fprintf(stderr, "  node-b leads %lld ms after node-a left\n", (long long)after);
    /* The new leader's controller writes status. */
    CHECK_INT(REQ("POST", NS("default") "/functions", DEV_TOKEN, FUNCTION_JSON("after", "h.h")),
              201);
    if (!sv_wait_condition(e, "after", "False", 5000))
        FAILF("no status from the new leader: %.800s", e->r.body);
}

/* Only the lease holder writes status; the others serve. A record held by
 * a node that is not running ("ghost", with a TTL far longer than the
 * test) keeps this node from leading until the record is deleted. */
TEST(a_follower_writes_no_status_until_it_leads)
{
    funcd_store *store = NULL;
    CHECK(funcd_store_memory_new(&store, 0) == 0);
    const char *ghost = "{\"holder\":\"ghost\",\"renewMs\":0,\"acquireMs\":0,\"ttlMs\":600000}";
    uint64_t rev = 0;
    if (store->put(store, FUNCD_LEADER_KEY, ghost, strlen(ghost), FUNCD_STORE_ABSENT, &rev) < 0) {
        store->free(store);
        FAILF("cannot write the ghost's lease");
    }
    env e_;
    env *e = &e_;
    if (node_up(e, store, "follower") < 0) {
        env_down(e);
        FAILF("cannot start a platform: %s", funcd_error_last()->message);
    }
    CHECK_INT(REQ("POST", NS("default") "/functions", DEV_TOKEN, FUNCTION_JSON("f", "h.h")), 201);
    env_sleep_ms(2 * TTL_MS); /* several heartbeats and reconciles */
    int follower_wrote = REQ("GET", NS("default") "/functions/f", DEV_TOKEN, NULL) != 200 ||
                         jget(e->r.json, "status") != NULL;
    seen s;
    int listed = list_nodes(e, &s) == 0 && s.n == 1 && s.ready == 1 && s.leaders == 0;
    /* The ghost's record goes: this node leads and writes the status. */
    int deleted = store->del(store, FUNCD_LEADER_KEY, rev, NULL); /* the platform's store */
    int took = sv_wait_condition(e, "f", "False", 3 * TTL_MS);
    want alone = {1, "follower"};
    int leads = env_poll(e, 3 * TTL_MS, nodes_are, &alone);
    env_down(e);
    CHECK(!follower_wrote);
    CHECK(listed);
    CHECK(deleted == 0);
    CHECK(took);
    CHECK(leads);
}

/* Whether GET .../nodes lists node `name`; its readiness in *ready. */
static int node_listed(env *e, const char *name, int *ready)
{
    const cJSON *item;
    *ready = -1;
    if (REQ("GET", NODES, VIEWER_TOKEN, NULL) != 200)
        return -1;
    cJSON_ArrayForEach(item, jget(e->r.json, "items"))
    {
        if (strcmp(jstr(item, "metadata.name") ? jstr(item, "metadata.name") : "", name) == 0) {
            *ready = cJSON_IsTrue(jget(item, "status.ready"));
            return 1;
        }
    }
    return 0;
}

static int ghost_gone(env *e, void *arg)
{
    int ready;
    return node_listed(e, "dead", &ready) == 0;
}

/* A crashed node's record (never renewed, a TTL of 200 ms) is listed not
 * ready, and the leader, only the leader, deletes it once it has not moved
 * for FUNCD_NODE_FORGET_TTLS of its TTLs. */
TEST(dead_nodes_records_are_deleted_by_the_leader)
{
    funcd_store *store = NULL;
    CHECK(funcd_store_memory_new(&store, 0) == 0);
    const char *lease = "{\"holder\":\"ghost\",\"renewMs\":0,\"acquireMs\":0,\"ttlMs\":600000}";
    const char *dead = "{\"name\":\"dead\",\"address\":\"127.0.0.1:1\",\"startMs\":1000,"
                       "\"renewMs\":2000,\"ttlMs\":200,\"ready\":true,\"workers\":0}";
    uint64_t rev = 0, dead_rev = 0;
    if (store->put(store, FUNCD_LEADER_KEY, lease, strlen(lease), FUNCD_STORE_ABSENT, &rev) < 0 ||
        store->put(store, FUNCD_NODES_PREFIX "dead", dead, strlen(dead), FUNCD_STORE_ABSENT,
                   &dead_rev) < 0) {
        store->free(store);
        FAILF("cannot write the ghost's lease and the dead node's record");
    }
    env e_;
    env *e = &e_;
    if (node_up(e, store, "follower") < 0) {
        env_down(e);
        FAILF("cannot start a platform: %s", funcd_error_last()->message);
    }
    int ready = -1;
    int listed = node_listed(e, "dead", &ready);
    /* Well past 10 x 200 ms: a follower deletes nothing. */
    env_sleep_ms(4 * FUNCD_NODE_FORGET_TTLS * 200);
    int ready_later = -1;
    int kept = node_listed(e, "dead", &ready_later);
    /* The ghost's lease goes: this node leads and deletes the record. */
    int deleted = store->del(store, FUNCD_LEADER_KEY, rev, NULL);
    int gone = env_poll(e, 2 * FUNCD_NODE_FORGET_TTLS * 200 + 3 * TTL_MS, ghost_gone, NULL);
    int self = node_listed(e, "follower", &ready);
    env_down(e);
    CHECK_INT(listed, 1);
    CHECK_INT(kept, 1);
    CHECK_INT(ready_later, 0);
    CHECK(deleted == 0);
    CHECK(gone);
    CHECK_INT(self, 1); /* its own record stays */
}

/* The native fixture, one replica on each node that runs it. */
#define ONE_REPLICA_FN                                                                             \
    "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"},"                 \
    "\"scaling\":{\"minReplicas\":1,\"maxReplicas\":1}}"

TWO_NODES(leader_sums_the_replicas_of_every_node)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    env *e = b; /* created through the follower, read back there */
    CHECK_INT(sv_create(e, "summed", ONE_REPLICA_FN, dir), 201);
    if (!sv_wait_ready(e, "summed", 10000))
        FAILF("not Ready: %.800s", e->r.body);
    /* minReplicas 1 on each of the two nodes. */
    if (!sv_wait_replicas(e, "summed", 2, 2, 10000))
        FAILF("want 2 replicas over two nodes: %.800s", e->r.body);
    /* Each node serves it itself. */
    CHECK_INT(sv_invoke(a, "GET", DP_PATH("summed") "/", NULL), 200);
    CHECK_INT(sv_invoke(b, "GET", DP_PATH("summed") "/", NULL), 200);
    /* node-b leaves: its replica is no longer counted. */
    env_down(b);
    e = a;
    if (!sv_wait_replicas(e, "summed", 1, 1, 5 * TTL_MS))
        FAILF("want node-a's one replica once node-b left: %.800s", e->r.body);
}

/* EventSource counts taken on any node reach the status: webhook calls
 * answered by the follower count as well as the leader's (each node adds
 * its own with a compare-and-swap on the object, so none is lost or
 * counted twice). */
static long hook(env *e, const char *ce_id)
{
    char ce[96];
    snprintf(ce, sizeof(ce), "ce-id: %s", ce_id);
    const char *h[] = {"Content-Type: text/plain", ce, NULL};
    return e2e_http_send(e->dp, "POST", "/events/default/hook", NULL, h, "x", 1, &e->r);
}

static int counted(env *e, void *arg)
{
    return REQ("GET", NS("default") "/eventsources/hook", VIEWER_TOKEN, NULL) == 200 &&
           jnum(e->r.json, "status.counts.events") == *(const double *)arg;
}

TWO_NODES(eventsource_counts_from_every_node)
{
    env *e = a;
    want w = {2, "node-a"};
    if (!env_poll(e, 5000, nodes_are, &w))
        FAILF("want node-a leading two nodes: %.800s", e->r.body);
    CHECK_INT(REQ("POST", NS("default") "/eventsources", DEV_TOKEN,
                  "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"EventSource\",\"metadata\":"
                  "{\"name\":\"hook\"},\"spec\":{\"type\":\"webhook\",\"target\":"
                  "{\"function\":\"nobody\"}}}"),
              201);
    /* Both nodes run the source once their watch saw it. */
    int64_t end = e2e_now_ms() + 5000;
    while (hook(a, "warm-a") == 404 && e2e_now_ms() < end)
        env_sleep_ms(20);
    CHECK_INT((int)a->r.status, 202);
    while (hook(b, "warm-b") == 404 && e2e_now_ms() < end)
        env_sleep_ms(20);
    CHECK_INT((int)b->r.status, 202);
    CHECK_INT(hook(a, "a-1"), 202);
    for (int i = 0; i < 3; i++) {
        char id[16];
        snprintf(id, sizeof(id), "b-%d", i);
        CHECK_INT(hook(b, id), 202);
    }
    /* 2 + 4 calls that the sources took (a warm-up call of each node included). */
    double want_events = 2 + 4;
    if (!env_poll(a, 10000, counted, &want_events))
        FAILF("want status.counts.events %g (follower's included): %.800s", want_events,
              a->r.body);
    env_sleep_ms(2500); /* several status ticks of both nodes: nothing counted twice */
    CHECK(counted(b, &want_events));
}

/* ---- git polling on the leader only ---------------------------------------- */

static char repo[300], work[300], tmp[256];

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    return system(cmd);
}

/* Commits a handler answering `version` and pushes it to the branch main. */
static int push_version(const char *version)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/fn/handler.sh", work);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "#!/bin/sh\ncat >/dev/null\n"
               "printf 'Content-Type: application/json\\r\\n\\r\\n{\"version\":\"%s\"}'\n",
            version);
    fclose(f);
    chmod(path, 0755);
    return sh("cd %s && git add -A && git -c user.name=t -c user.email=t@e commit -qm %s && "
              "git push -q origin HEAD:refs/heads/main 2>/dev/null",
              work, version) == 0 ? 0 : -1;
}

/* Whether node `e` answers `version` within `timeout_ms`. */
static int answers(env *e, const char *version, int timeout_ms)
{
    int64_t end = e2e_now_ms() + timeout_ms;
    do {
        if (sv_invoke(e, "GET", DP_PATH("from-git") "/", NULL) == 200 &&
            jstr(e->r.json, "version") && strcmp(jstr(e->r.json, "version"), version) == 0)
            return 1;
        env_sleep_ms(50);
    } while (e2e_now_ms() < end);
    return 0;
}

#define GIT_SPEC "{\"runtime\":\"native\",\"mode\":\"exec\",\"handler\":\"handler.sh\"," \
                 "\"source\":{\"git\":{\"url\":\"%s\",\"ref\":\"main\",\"path\":\"fn\"}}}"

typedef struct polls_seen {
    int samples, by_leader, by_others, times;
    double last_at;
} polls_seen;

/* Reads the branch's record (what the last poll found, when, by whom). */
static void sample(funcd_store *store, polls_seen *p)
{
    char key[400];
    snprintf(key, sizeof(key), "/gitrefs/%s#main", repo);
    funcd_store_value v = {0};
    if (store->get(store, key, &v) != 0)
        return;
    cJSON *j = cJSON_ParseWithLength(v.value, v.len);
    free(v.value);
    const char *node = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "node"));
    double at = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "resolvedAtMs"));
    p->samples++;
    if (node && strcmp(node, "node-a") == 0)
        p->by_leader++;
    else
        p->by_others++;
    if (at != p->last_at)
        p->times++;
    p->last_at = at;
    cJSON_Delete(j);
}

/* Both nodes serve a Function from a git branch polled every 300 ms: only
 * the leader (node-a) polls it (the branch's record in the store, rewritten
 * at each poll, always names node-a), and node-b, which does not poll, still
 * moves to a new commit, from the leader's record. */
TEST(only_the_leader_polls_branches)
{
    if (system("git --version >/dev/null 2>&1") != 0) {
        printf("  skipped: git is not installed\n");
        return;
    }
    CHECK(sv_tempdir(tmp, sizeof(tmp)) == 0);
    snprintf(repo, sizeof(repo), "%s/repo.git", tmp);
    snprintf(work, sizeof(work), "%s/work", tmp);
    CHECK(sh("git init -q --bare %s && git clone -q %s %s 2>/dev/null && mkdir -p %s/fn", repo,
             repo, work, work) == 0);
    CHECK(push_version("v1") == 0);
    funcd_store *sa = NULL, *sb = NULL;
    CHECK(shared_pair(&sa, &sb) == 0);
    env a_, b_;
    env *a = &a_, *b = &b_;
    memset(a, 0, sizeof(*a));
    memset(b, 0, sizeof(*b));
    int up = env_up_with(a, sa, funcd_with_node_name("node-a"), funcd_with_lease_ttl(TTL_MS),
                         funcd_with_source_refresh(0, 300)) == 0 &&
             env_up_with(b, sb, funcd_with_node_name("node-b"), funcd_with_lease_ttl(TTL_MS),
                         funcd_with_source_refresh(0, 300)) == 0;
    polls_seen p = {0};
    int v1 = 0, v2 = 0;
    if (up) {
        env *e = a;
        CHECK_INT(sv_create(e, "from-git", GIT_SPEC, repo), 201);
        v1 = answers(a, "v1", 20000) && answers(b, "v1", 20000);
        for (int i = 0; i < 40; i++) { /* 4 s: about four polls by the leader */
            sample(sa, &p);
            env_sleep_ms(100);
        }
        v2 = push_version("v2") == 0 && answers(a, "v2", 15000) && answers(b, "v2", 15000);
    }
    env_down(b);
    env_down(a);
    sv_cleanup();
    if (!up)
        FAILF("cannot start two platforms: %s", funcd_error_last()->message);
    fprintf(stderr, "  %d samples: %d by the leader, %d by another node, %d polls seen\n",
            p.samples, p.by_leader, p.by_others, p.times);
    CHECK(v1);
    CHECK(p.samples > 0);
    CHECK_INT(p.by_others, 0);
    CHECK(p.times >= 2);
    CHECK(v2);
}

int main(int argc, char **argv)
{
    sv_init();
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    SV_RUN(only, ran, both_listed_one_leader);
    SV_RUN(only, ran, leader_shutdown_hands_over_within_the_ttl);
    SV_RUN(only, ran, a_follower_writes_no_status_until_it_leads);
    SV_RUN(only, ran, leader_sums_the_replicas_of_every_node);
    SV_RUN(only, ran, eventsource_counts_from_every_node);
    SV_RUN(only, ran, dead_nodes_records_are_deleted_by_the_leader);
    SV_RUN(only, ran, only_the_leader_polls_branches);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no test case named %s\n", only);
        return 1;
    }
    return HARNESS_END();
}
