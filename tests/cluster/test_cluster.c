/*
 * Three funcd nodes on one PostgreSQL and one NATS server (issue 15), with
 * nginx in front of their data planes, driven over real HTTP:
 *
 *   serve       a Function applied through node 1's API is served by node
 *               3's data plane (the time it took is printed); served by
 *               every node, its status sums their replicas; every node's
 *               log lines are read through another node's API;
 *   node_kill   constant load through nginx; node 2 is SIGKILLed mid-run;
 *               the only requests that fail are ones in flight at the kill
 *               that nginx sent to node 2 (its access log names the
 *               upstream of each); n2, which held the cluster lease, loses
 *               it to another node within its TTL (and a renewal step); a
 *               Function created afterwards becomes Ready and serves;
 *   db_restart  PostgreSQL stopped and started again under light API and
 *               data-plane load on one node: the API answers 503 (a JSON
 *               Status) while it is away, the data plane keeps serving (and
 *               starts the first worker of a Function it knows), the
 *               API recovers without a restart of funcd, and every write
 *               acknowledged with 201 is there afterwards;
 *   db_frozen   PostgreSQL stopped with SIGSTOP (it accepts connections and
 *               answers nothing, as behind a partition): the API answers
 *               503 within a bound instead of holding its callers, the data
 *               plane serves, and all recovers once it answers again;
 *   nats_down   nats-server SIGKILLed under load through nginx over two
 *               nodes and started again: the nodes stay up, nothing fails,
 *               the API works meanwhile, and every node's bus reconnects.
 *
 * Usage: test-cluster CASE. Exits 77 when PostgreSQL, nats-server or nginx
 * is not installed.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../e2e/client.h"
#include "../e2e/env.h"
#include "../harness.h"
#include "cluster.h"
#include "load.h"

#define N1 0
#define N2 1
#define N3 2

static cl_cluster cl;

/* Starts the nodes of `order` (indexes, -1 ends it) in that order. */
static int start_nodes(const int *order, const char *const *extra)
{
    for (; *order >= 0; order++)
        if (cl_node_start(&cl, *order, extra) < 0)
            return -1;
    return 0;
}

/* Polls the Function's status through `api` until status.replicas.ready is
 * `want`; the milliseconds it took, or -1. */
static long wait_replicas(const char *api, const char *name, double want, int timeout_ms)
{
    char path[256];
    snprintf(path, sizeof(path), DD_NS "/functions/%s", name);
    e2e_http *h = e2e_http_new(api);
    e2e_resp r = E2E_RESP_INIT;
    int64_t t0 = e2e_now_ms();
    long took = -1;
    while (h && e2e_now_ms() - t0 < timeout_ms) {
        if (e2e_http_do(h, "GET", path, DD_TOKEN, NULL, &r) == 200 &&
            jnum(r.json, "status.replicas.ready") == want) {
            took = (long)(e2e_now_ms() - t0);
            break;
        }
        dd_sleep_ms(20);
    }
    if (took < 0)
        fprintf(stderr, "  %s: status.replicas.ready never %g: %.400s\n", name, want,
                r.body ? r.body : "");
    e2e_resp_free(&r);
    e2e_http_free(h);
    return took;
}

/* Polls node `via`'s log API for `name` until every one of `msgs` is in
 * it; the milliseconds it took or -1. */
static long wait_logs(int via, const char *name, const char *const *msgs, int n, int timeout_ms)
{
    char path[256];
    snprintf(path, sizeof(path), DD_NS "/functions/%s/logs", name);
    e2e_http *h = e2e_http_new(cl.node[via].d.cp);
    e2e_resp r = E2E_RESP_INIT;
    int64_t t0 = e2e_now_ms();
    long took = -1;
    while (h && took < 0 && e2e_now_ms() - t0 < timeout_ms) {
        int found = 0;
        if (e2e_http_do(h, "GET", path, DD_TOKEN, NULL, &r) == 200)
            for (int i = 0; i < n; i++)
                found += strstr(r.body, msgs[i]) != NULL;
        if (found == n)
            took = (long)(e2e_now_ms() - t0);
        else
            dd_sleep_ms(100);
    }
    if (took < 0)
        fprintf(stderr, "  logs of %s on %s: HTTP %ld %.600s\n", name, cl.node[via].name,
                r.status, r.body ? r.body : "");
    e2e_resp_free(&r);
    e2e_http_free(h);
    return took;
}

TEST(serve)
{
    /* Log segments sealed each second, for the logs below. */
    const char *const extra[] = {"--log-seal-age", "1s", NULL};
    const int order[] = {N1, N2, N3, -1};
    CHECK(start_nodes(order, extra) == 0);
    CHECK_INT(cl_put_function(&cl, cl.node[N1].d.cp, "hello", NULL), 201);
    int64_t t0 = e2e_now_ms();
    char url[256];
    cl_fn_url(url, sizeof(url), cl.node[N3].d.dp, "hello", "/hello");
    /* Generous: the time is what matters, and it is printed. */
    long ms = cl_wait_200(url, 15000);
    CHECK(ms >= 0);
    fprintf(stderr, "  applied through n1, served by n3 %lld ms after the 201 "
                    "(the cold start of n3's worker included)\n",
            (long long)(e2e_now_ms() - t0));
    /* Served by every node: the status the leader writes sums their
     * replicas. */
    for (int i = N1; i <= N2; i++) {
        cl_fn_url(url, sizeof(url), cl.node[i].d.dp, "hello", "/hello");
        CHECK(cl_wait_200(url, 15000) >= 0);
    }
    long summed = wait_replicas(cl.node[N2].d.cp, "hello", 3, 15000);
    fprintf(stderr, "  status.replicas.ready 3 (one worker per node) %ld ms after the third "
                    "node served\n",
            summed);
    CHECK(summed >= 0);
    /* Each node's worker logs a line; node 2's API has all three. */
    const char *const msgs[] = {"cluster-log-n1", "cluster-log-n2", "cluster-log-n3"};
    for (int i = 0; i < CL_NODES; i++) {
        char rest[64];
        snprintf(rest, sizeof(rest), "/log?msg=%s", msgs[i]);
        cl_fn_url(url, sizeof(url), cl.node[i].d.dp, "hello", rest);
        CHECK(cl_wait_200(url, 15000) >= 0);
    }
    long logs = wait_logs(N2, "hello", msgs, CL_NODES, 20000);
    fprintf(stderr, "  every node's log line read through n2 %ld ms after the last was "
                    "written (segments sealed every 1 s)\n",
            logs);
    CHECK(logs >= 0);
    /* And node 3's API lists it: one store. */
    e2e_http *h = e2e_http_new(cl.node[N3].d.cp);
    e2e_resp r = E2E_RESP_INIT;
    long st = e2e_http_do(h, "GET", DD_NS "/functions/hello", DD_TOKEN, NULL, &r);
    e2e_resp_free(&r);
    e2e_http_free(h);
    CHECK_INT(st, 200);
}

/* The line of nginx's access log for request `id`: its upstream addresses
 * ("A" or "A, B" when nginx went on to the next) in `up`; 1 when found. */
static int access_line(const char *id, char *up, size_t n)
{
    FILE *f = fopen(cl.access_log, "re");
    char line[512];
    int found = 0;
    size_t idl = strlen(id);
    while (f && !found && fgets(line, sizeof(line), f))
        if (strncmp(line, id, idl) == 0 && line[idl] == ' ') {
            line[strcspn(line, "\n")] = '\0';
            snprintf(up, n, "%s", line + idl + 1);
            found = 1;
        }
    if (f)
        fclose(f);
    return found;
}

/* How many access-log lines name `addr` (host:port) as an upstream. */
static long served_by(const char *addr)
{
    FILE *f = fopen(cl.access_log, "re");
    char line[512];
    long n = 0;
    while (f && fgets(line, sizeof(line), f))
        n += strstr(line, addr) != NULL;
    if (f)
        fclose(f);
    return n;
}

static const char *hostport(int node)
{
    return cl.node[node].d.dp + strlen("http://");
}

/* Waits (up to `timeout_ms`) until the load has `want` more answers 200. */
static int load_gains(cl_load *l, long want, int timeout_ms)
{
    long from = cl_load_ok(l);
    for (int waited = 0; waited < timeout_ms; waited += 20) {
        if (cl_load_ok(l) - from >= want)
            return 1;
        dd_sleep_ms(20);
    }
    return 0;
}

/* Every failure of the load was a request in flight at the kill (started
 * before node 2 was reaped, ended after the SIGKILL was sent) that nginx
 * had sent to node 2. */
static int failures_were_in_flight_on(cl_load *l, int64_t killed, int64_t reaped, int node)
{
    int ok = 1;
    for (int i = 0; i < l->n; i++)
        for (int j = 0; j < l->t[i].nfails; j++) {
            const cl_failure *f = &l->t[i].fails[j];
            char up[256] = "";
            int logged = access_line(f->id, up, sizeof(up));
            fprintf(stderr, "  failed: %s %s [%+lld, %+lld] ms from the kill: HTTP %ld, "
                            "upstream %s; %.100s\n",
                    l->t[i].method, f->id, (long long)(f->start - killed),
                    (long long)(f->end - killed), f->status, logged ? up : "(not logged)",
                    f->body);
            if (f->start > reaped || f->end < killed || !logged || !strstr(up, hostport(node)))
                ok = 0;
        }
    return ok;
}

/* Polls node `via`'s nodes API until the leader is `want` (NULL: any node
 * but `not`) and, unless `nready` is -1, that many nodes are ready; the
 * milliseconds it took, or -1. The leader last seen is in `leader`. */
static long wait_nodes(int via, const char *want, const char *not, int nready, int timeout_ms,
                       char *leader, size_t n)
{
    int64_t t0 = e2e_now_ms();
    int ready = 0;
    while (e2e_now_ms() - t0 < timeout_ms) {
        if (cl_nodes_view(&cl, via, leader, n, NULL, NULL, &ready) == 0 &&
            (want ? strcmp(leader, want) == 0 : leader[0] && strcmp(leader, not) != 0) &&
            (nready < 0 || ready == nready))
            return (long)(e2e_now_ms() - t0);
        dd_sleep_ms(20);
    }
    fprintf(stderr, "  nodes as %s sees them: leader \"%s\", %d ready; waited for %s%s and "
                    "%d ready\n",
            cl.node[via].name, leader, ready, want ? want : "any but ", want ? "" : not, nready);
    return -1;
}

#define LEASE_TTL_MS 3000

TEST(node_kill)
{
    /* n2 first: the first node takes the cluster lease. A short TTL keeps
     * the test short. */
    cl.lease_ttl = "3s";
    const int order[] = {N2, N1, N3, -1};
    CHECK(start_nodes(order, NULL) == 0);
    char leader[64];
    CHECK(wait_nodes(N1, "n2", NULL, 3, 15000, leader, sizeof(leader)) >= 0);
    CHECK_INT(cl_put_function(&cl, cl.node[N1].d.cp, "web", NULL), 201);
    char url[256];
    for (int i = 0; i < CL_NODES; i++) {
        /* Warm on every node, so the load meets no cold start. */
        cl_fn_url(url, sizeof(url), cl.node[i].d.dp, "web", "/hello");
        CHECK(cl_wait_200(url, 15000) >= 0);
    }
    CHECK(cl_nginx_start(&cl) == 0);

    /* GETs nginx may send again to the next node; POSTs it never resends
     * once sent, so those in flight on node 2 at the kill fail. Each thread
     * has one request in flight at a time: at most 4 were at the kill. */
    cl_load load = {0};
    char get[256], post[256];
    cl_fn_url(get, sizeof(get), cl.lb, "web", "/hello");
    cl_fn_url(post, sizeof(post), cl.lb, "web", "/sleep?ms=20");
    cl_load_add(&load, "GET", get);
    cl_load_add(&load, "GET", get);
    cl_load_add(&load, "POST", post);
    cl_load_add(&load, "POST", post);
    CHECK(cl_load_start(&load) == 0);
    int steady = load_gains(&load, 200, 30000);
    long before = cl_load_ok(&load), failed_before = cl_load_failed(&load);
    long n2_before = served_by(hostport(N2));

    int64_t killed = e2e_now_ms();
    int64_t reaped = cl_node_kill(&cl, N2);
    /* The lease expires at most a TTL after n2's last renewal, and another
     * node takes it at its next step (every TTL/3): within the TTL and a
     * step of the kill; twice the TTL leaves room for a loaded machine. */
    long moved = wait_nodes(N1, NULL, "n2", -1, 30000, leader, sizeof(leader));
    long n2_gone = wait_nodes(N3, NULL, "n2", 2, 30000, leader, sizeof(leader));
    int after = load_gains(&load, 300, 30000);
    long n1_after = served_by(hostport(N1)), n3_after = served_by(hostport(N3));
    long passed_on = served_by(", "); /* "A, B": nginx went on to the next node */

    /* Controller work goes on: a new Function becomes Ready and serves
     * through nginx. */
    long put = cl_put_function(&cl, cl.node[N1].d.cp, "after-kill", NULL);
    long ready = put == 201 ? cl_wait_ready(cl.node[N3].d.cp, "after-kill", 30000) : -1;
    cl_fn_url(url, sizeof(url), cl.lb, "after-kill", "/hello");
    long served = ready >= 0 ? cl_wait_200(url, 15000) : -1;
    cl_load_stop(&load);

    long total_failed = cl_load_failed(&load);
    fprintf(stderr, "  load: %ld answers 200 before the kill (%ld by n2), %ld after; "
                    "%ld failed; %ld passed on to the next node by nginx; n2 reaped %lld ms "
                    "after the SIGKILL\n",
            before, n2_before, cl_load_ok(&load) - before, total_failed, passed_on,
            (long long)(reaped - killed));
    fprintf(stderr, "  lease: %s leads %ld ms after n2's SIGKILL (TTL %d ms); n2 shown not "
                    "ready %ld ms later\n",
            leader, moved, LEASE_TTL_MS, n2_gone);
    fprintf(stderr, "  after-kill: Ready %ld ms after its 201, served through nginx %ld ms later\n",
            ready, served);
    CHECK(steady);
    CHECK_INT(failed_before, 0);
    CHECK(n2_before > 0); /* node 2 had its share of the load */
    CHECK(after);
    CHECK(moved >= 0 && moved <= 2 * LEASE_TTL_MS);
    CHECK(n2_gone >= 0);
    CHECK(failures_were_in_flight_on(&load, killed, reaped, N2));
    CHECK(total_failed <= load.n);
    CHECK(n1_after > 0 && n3_after > 0);
    CHECK_INT(put, 201);
    CHECK(ready >= 0);
    CHECK(served >= 0);
}

/* ---- database restart ----------------------------------------------------------- */

#define MAX_WRITES 4096
#define WRITERS 2

typedef struct writer {
    pthread_t th;
    int started;
    int idx;
    const char *api;
    atomic_int stop;
    atomic_long acked, unavailable;
    long other;              /* answers neither 201 nor 503 */
    char other_body[300];
    int acked_ids[MAX_WRITES]; /* fc-<idx>-<id> acknowledged with 201 */
} writer;

typedef struct db_test {
    writer w[WRITERS];
    cl_load dp;
    e2e_http *h;
    e2e_resp r;
    e2e_watch *watch; /* FunctionConfigs, opened before the first write */
} db_test;

/* One FunctionConfig PUT after another, each with a new name, a little
 * apart: the light API load. */
static void *write_loop(void *arg)
{
    writer *w = arg;
    e2e_http *h = e2e_http_new(w->api);
    e2e_resp r = E2E_RESP_INIT;
    for (int id = 0; h && id < MAX_WRITES && !atomic_load(&w->stop); id++) {
        char path[128], body[512];
        snprintf(path, sizeof(path), DD_NS "/functionconfigs/fc-%d-%d", w->idx, id);
        snprintf(body, sizeof(body),
                 "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"FunctionConfig\",\"metadata\":"
                 "{\"name\":\"fc-%d-%d\"},\"spec\":{\"image\":\"set-labels\",\"binaryExecutor\":"
                 "{\"path\":\"set-labels\"}}}",
                 w->idx, id);
        long st = e2e_http_do(h, "PUT", path, DD_TOKEN, body, &r);
        if (st == 201) {
            w->acked_ids[atomic_load(&w->acked)] = id;
            atomic_fetch_add(&w->acked, 1);
        } else if (st == 503) {
            atomic_fetch_add(&w->unavailable, 1);
        } else if (w->other++ == 0) {
            snprintf(w->other_body, sizeof(w->other_body), "HTTP %ld %s", st,
                     r.body ? r.body : "");
        }
        dd_sleep_ms(10);
    }
    e2e_resp_free(&r);
    e2e_http_free(h);
    return NULL;
}

static long acked(db_test *t)
{
    long n = 0;
    for (int i = 0; i < WRITERS; i++)
        n += atomic_load(&t->w[i].acked);
    return n;
}

static int acked_at_least(db_test *t, long n, int timeout_ms)
{
    for (int waited = 0; waited < timeout_ms; waited += 20) {
        if (acked(t) >= n)
            return 1;
        dd_sleep_ms(20);
    }
    return 0;
}

/* GET of the list on the API until it answers `want`; the last answer in t->r. */
static long api_until(db_test *t, long want, int timeout_ms)
{
    int64_t t0 = e2e_now_ms();
    while (e2e_now_ms() - t0 < timeout_ms) {
        if (e2e_http_do(t->h, "GET", DD_NS "/functionconfigs", DD_TOKEN, NULL, &t->r) == want)
            return (long)(e2e_now_ms() - t0);
        dd_sleep_ms(20);
    }
    return -1;
}

/* Marks fc-<w>-<id> in `seen` (WRITERS x MAX_WRITES counters); 0 when the
 * name is not one of the writers'. */
static int mark(unsigned char *seen, const char *name)
{
    int w, id;
    if (!name || sscanf(name, "fc-%d-%d", &w, &id) != 2 || w < 0 || w >= WRITERS || id < 0 ||
        id >= MAX_WRITES)
        return 0;
    if (seen[w * MAX_WRITES + id] < 255)
        seen[w * MAX_WRITES + id]++;
    return 1;
}

/* How many acknowledged writes `seen` lacks, the first few named on stderr
 * as not in `what` (NULL: quiet). */
static long missing_acked(db_test *t, const unsigned char *seen, const char *what)
{
    long missing = 0;
    for (int i = 0; i < WRITERS; i++)
        for (long j = 0; j < atomic_load(&t->w[i].acked); j++)
            if (!seen[i * MAX_WRITES + t->w[i].acked_ids[j]]) {
                if (what && missing < 5)
                    fprintf(stderr, "  fc-%d-%d was acknowledged (201) and is not in %s\n", i,
                            t->w[i].acked_ids[j], what);
                missing++;
            }
    return missing;
}

/* Every acknowledged write is in the list, and came once as ADDED on the
 * watch opened before the first write. */
static void check_acked(db_test *t)
{
    unsigned char *listed = calloc(WRITERS * MAX_WRITES, 1);
    unsigned char *added = calloc(WRITERS * MAX_WRITES, 1);
    CHECK(listed && added);
    if (e2e_http_do(t->h, "GET", DD_NS "/functionconfigs", DD_TOKEN, NULL, &t->r) == 200) {
        const cJSON *item;
        cJSON_ArrayForEach(item, jget(t->r.json, "items")) mark(listed, jstr(item, "metadata.name"));
    }
    /* The events come in revision order; the last write's event ends the wait. */
    long dups = 0;
    for (cJSON *ev; missing_acked(t, added, NULL) && (ev = e2e_watch_next_json(t->watch, 10000));
         cJSON_Delete(ev)) {
        const char *type = jstr(ev, "type"), *name = jstr(ev, "object.metadata.name");
        if (type && strcmp(type, "ADDED") == 0 && mark(added, name) && name) {
            int w, id;
            sscanf(name, "fc-%d-%d", &w, &id);
            dups += added[w * MAX_WRITES + id] > 1;
        }
    }
    long not_listed = missing_acked(t, listed, "the list");
    long not_watched = missing_acked(t, added, "the watch opened before the writes");
    free(listed);
    free(added);
    CHECK_INT(not_listed, 0);
    CHECK_INT(not_watched, 0);
    CHECK_INT(dups, 0);
}

static void db_restart_body(db_test *t)
{
    CHECK(cl_node_start(&cl, N1, NULL) == 0);
    const char *api = cl.node[N1].d.cp;
    CHECK((t->h = e2e_http_new(api)) != NULL);
    CHECK_INT(cl_put_function(&cl, api, "steady", NULL), 201);
    char url[256];
    cl_fn_url(url, sizeof(url), cl.node[N1].d.dp, "steady", "/hello");
    CHECK(cl_wait_200(url, 15000) >= 0);

    /* Known to the node but never called: its first worker starts while the
     * database is away. */
    CHECK_INT(cl_put_function(&cl, api, "cold", NULL), 201);
    CHECK(cl_wait_ready(api, "cold", 15000) >= 0);
    char cold[256];
    cl_fn_url(cold, sizeof(cold), cl.node[N1].d.dp, "cold", "/hello");

    char watch[256];
    snprintf(watch, sizeof(watch), "%s" DD_NS "/functionconfigs?watch=true", api);
    CHECK((t->watch = e2e_watch_open(watch, DD_TOKEN)) != NULL);
    CHECK_INT(e2e_watch_status(t->watch, 10000), 200);

    cl_load_add(&t->dp, "GET", url);
    CHECK(cl_load_start(&t->dp) == 0);
    for (int i = 0; i < WRITERS; i++) {
        t->w[i].idx = i;
        t->w[i].api = api;
        CHECK(pthread_create(&t->w[i].th, NULL, write_loop, &t->w[i]) == 0);
        t->w[i].started = 1;
    }
    CHECK(acked_at_least(t, 20, 20000));

    pg_env_stop_server(&cl.pg);
    int64_t stopped = e2e_now_ms();
    long to_503 = api_until(t, 503, 10000);
    fprintf(stderr, "  PostgreSQL stopped: the API answered 503 after %ld ms: %.200s\n", to_503,
            t->r.body ? t->r.body : "");
    CHECK(to_503 >= 0);
    CHECK_STR(jstr(t->r.json, "kind"), "Status");
    CHECK_STR(jstr(t->r.json, "reason"), "ServiceUnavailable");
    CHECK_INT((long)jnum(t->r.json, "code"), 503);
    long acked_down = acked(t);
    long served_down = cl_load_ok(&t->dp);
    long cold_ms = cl_wait_200(cold, 10000);
    fprintf(stderr, "  a first worker started while PostgreSQL was away: %ld ms\n", cold_ms);
    CHECK(cold_ms >= 0);
    dd_sleep_ms(2000);
    /* While it is away: data plane answers, no write acknowledged. */
    long served_while_down = cl_load_ok(&t->dp) - served_down;
    long acked_while_down = acked(t) - acked_down;

    CHECK(pg_env_restart_server(&cl.pg) == 0);
    int64_t restarted = e2e_now_ms();
    long to_200 = api_until(t, 200, 30000);
    fprintf(stderr, "  away %lld ms; the API answered 200 again %ld ms after the restart; "
                    "%ld data-plane answers while it was away\n",
            (long long)(restarted - stopped), to_200, served_while_down);
    CHECK(to_200 >= 0);
    CHECK(acked_at_least(t, acked(t) + 20, 20000));
    /* The controller's watch came back too: a new Function is Ready. */
    CHECK_INT(cl_put_function(&cl, api, "after-db", NULL), 201);
    CHECK(cl_wait_ready(api, "after-db", 30000) >= 0);

    for (int i = 0; i < WRITERS; i++) {
        atomic_store(&t->w[i].stop, 1);
        pthread_join(t->w[i].th, NULL);
        t->w[i].started = 0;
    }
    cl_load_stop(&t->dp);
    long unavailable = 0, other = 0;
    for (int i = 0; i < WRITERS; i++) {
        unavailable += atomic_load(&t->w[i].unavailable);
        other += t->w[i].other;
    }
    fprintf(stderr, "  writes: %ld acknowledged, %ld answered 503, %ld otherwise; data plane: "
                    "%ld answers 200, %ld failed\n",
            acked(t), unavailable, other, cl_load_ok(&t->dp), cl_load_failed(&t->dp));
    CHECK(served_while_down > 0);
    CHECK_INT(acked_while_down, 0);
    CHECK_INT(cl_load_failed(&t->dp), 0);
    for (int i = 0; i < WRITERS; i++)
        if (t->w[i].other)
            FAILF("%ld writes answered neither 201 nor 503, first: %s", t->w[i].other,
                  t->w[i].other_body);
    check_acked(t);
}

TEST(db_restart)
{
    static db_test t;
    memset(&t, 0, sizeof(t));
    t.r = (e2e_resp)E2E_RESP_INIT;
    db_restart_body(&t);
    for (int i = 0; i < WRITERS; i++) {
        atomic_store(&t.w[i].stop, 1);
        if (t.w[i].started)
            pthread_join(t.w[i].th, NULL);
    }
    cl_load_stop(&t.dp);
    e2e_watch_close(t.watch);
    e2e_resp_free(&t.r);
    e2e_http_free(t.h);
}

/* ---- a database that answers nothing ------------------------------------------- */

/* PostgreSQL frozen (SIGSTOP: connections are accepted into the backlog
 * and nothing answers, as behind a partition): the API must still answer,
 * 503, and not hold its callers until TCP gives up (forever on a Unix
 * socket); the data plane serves; all recovers once the server answers. */
static void db_frozen_body(cl_load *dp, e2e_http **hp, e2e_resp *r)
{
    CHECK(cl_node_start(&cl, N1, NULL) == 0);
    const char *api = cl.node[N1].d.cp;
    e2e_http *h = *hp = e2e_http_new(api);
    CHECK(h);
    CHECK_INT(cl_put_function(&cl, api, "steady", NULL), 201);
    char url[256];
    cl_fn_url(url, sizeof(url), cl.node[N1].d.dp, "steady", "/hello");
    CHECK(cl_wait_200(url, 15000) >= 0);
    cl_load_add(dp, "GET", url);
    CHECK(cl_load_start(dp) == 0);

    pg_env_freeze(&cl.pg);
    long served_before = cl_load_ok(dp);
    /* Each call gets its answer within the client's 15 s; three, apart, so
     * that reconnect attempts (after the backoff) are covered too. */
    for (int i = 0; i < 3; i++) {
        if (i)
            dd_sleep_ms(500);
        int64_t t0 = e2e_now_ms();
        long st = e2e_http_do(h, "GET", DD_NS "/functionconfigs", DD_TOKEN, NULL, r);
        fprintf(stderr, "  PostgreSQL frozen: GET answered %ld after %lld ms: %.300s\n", st,
                (long long)(e2e_now_ms() - t0), r->body ? r->body : "");
        CHECK_INT(st, 503);
        CHECK_STR(jstr(r->json, "reason"), "ServiceUnavailable");
    }
    long served_frozen = cl_load_ok(dp) - served_before;
    pg_env_thaw(&cl.pg);
    int64_t t0 = e2e_now_ms();
    long st = 0;
    while (e2e_now_ms() - t0 < 30000 &&
           (st = e2e_http_do(h, "GET", DD_NS "/functionconfigs", DD_TOKEN, NULL, r)) != 200)
        dd_sleep_ms(20);
    fprintf(stderr, "  thawed: the API answered %ld after %lld ms; %ld data-plane answers while "
                    "it was frozen\n",
            st, (long long)(e2e_now_ms() - t0), served_frozen);
    CHECK_INT(st, 200);
    CHECK_INT(cl_put_function(&cl, api, "after-freeze", NULL), 201);
    CHECK(cl_wait_ready(api, "after-freeze", 30000) >= 0);
    cl_load_stop(dp);
    CHECK(served_frozen > 0);
    CHECK_INT(cl_load_failed(dp), 0);
}

TEST(db_frozen)
{
    cl_load dp = {0};
    e2e_http *h = NULL;
    e2e_resp r = E2E_RESP_INIT;
    db_frozen_body(&dp, &h, &r);
    cl_load_stop(&dp);
    pg_env_thaw(&cl.pg);
    e2e_resp_free(&r);
    e2e_http_free(h);
}

/* Polls until every running node's log has `text`; the milliseconds it
 * took, or -1. */
static long wait_logged(const int *nodes, const char *text, int timeout_ms)
{
    int64_t t0 = e2e_now_ms();
    for (;;) {
        int all = 1;
        for (const int *n = nodes; *n >= 0; n++)
            all = all && dd_log_has(cl.node[*n].log, text);
        if (all)
            return (long)(e2e_now_ms() - t0);
        if (e2e_now_ms() - t0 > timeout_ms)
            return -1;
        dd_sleep_ms(50);
    }
}

/* nats-server killed (SIGKILL, by pid) under load through nginx over two
 * nodes, then started again on its port: the nodes stay up, the data
 * planes serve without a failure and the API works (a Function created
 * meanwhile becomes Ready and serves); each node's bus says it lost NATS
 * and reconnects by itself once the server is back. */
static void nats_down_body(cl_load *load)
{
    const int nodes[] = {N1, N2, -1};
    CHECK(start_nodes(nodes, NULL) == 0);
    CHECK_INT(cl_put_function(&cl, cl.node[N1].d.cp, "web", NULL), 201);
    char url[256];
    for (const int *n = nodes; *n >= 0; n++) {
        cl_fn_url(url, sizeof(url), cl.node[*n].d.dp, "web", "/hello");
        CHECK(cl_wait_200(url, 15000) >= 0);
    }
    CHECK(cl_nginx_start(&cl) == 0);
    cl_fn_url(url, sizeof(url), cl.lb, "web", "/hello");
    cl_load_add(load, "GET", url);
    cl_load_add(load, "GET", url);
    CHECK(cl_load_start(load) == 0);
    CHECK(load_gains(load, 100, 30000));

    nats_env_halt(&cl.nats);
    long before = cl_load_ok(load);
    long lost = wait_logged(nodes, "bus: disconnected from NATS", 15000);
    /* The control plane does not need the bus: a Function created now. */
    CHECK_INT(cl_put_function(&cl, cl.node[N2].d.cp, "during", NULL), 201);
    CHECK(cl_wait_ready(cl.node[N1].d.cp, "during", 30000) >= 0);
    char during[256];
    cl_fn_url(during, sizeof(during), cl.lb, "during", "/hello");
    CHECK(cl_wait_200(during, 15000) >= 0);
    CHECK(load_gains(load, 100, 30000));
    long served_down = cl_load_ok(load) - before;
    int alive = 1;
    for (const int *n = nodes; *n >= 0; n++)
        alive = alive && dd_wait_exit(&cl.node[*n].d, 0) == 0;

    CHECK(nats_env_resume(&cl.nats) == 0);
    int64_t back = e2e_now_ms();
    long again = wait_logged(nodes, "bus: reconnected to NATS", 30000);
    fprintf(stderr, "  NATS killed: the nodes logged it within %ld ms, served %ld requests "
                    "while it was away; reconnected %ld ms after it was back (%lld ms now)\n",
            lost, served_down, again, (long long)(e2e_now_ms() - back));
    CHECK(load_gains(load, 100, 30000));
    cl_load_stop(load);
    CHECK(lost >= 0);
    CHECK(alive);
    CHECK(served_down > 0);
    CHECK(again >= 0);
    CHECK_INT(cl_load_failed(load), 0);
}

TEST(nats_down)
{
    cl_load load = {0};
    nats_down_body(&load);
    cl_load_stop(&load);
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {{"serve", serve},
                 {"node_kill", node_kill},
                 {"db_restart", db_restart},
                 {"db_frozen", db_frozen},
                 {"nats_down", nats_down}};
    if (argc != 2) {
        fprintf(stderr, "usage: %s serve|node_kill|db_restart|db_frozen|nats_down\n", argv[0]);
        return 2;
    }
    if (!cl_tools_present())
        return 77;
    signal(SIGPIPE, SIG_IGN);
    e2e_client_global_init();
    int found = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (strcmp(argv[1], cases[i].name) != 0)
            continue;
        found = 1;
        if (cl_init(&cl, "cluster", SERVING_WORKER) == 0) {
            harness_failed_now = 0;
            cases[i].fn();
            fprintf(stderr, "%s %s\n", harness_failed_now ? "FAIL" : "ok  ", argv[1]);
            *(harness_failed_now ? &harness_failed : &harness_passed) += 1;
        } else {
            fprintf(stderr, "FAIL %s: the cluster did not start\n", argv[1]);
            harness_failed++;
        }
        if (harness_failed)
            for (int n = 0; n < CL_NODES; n++)
                if (cl.node[n].log[0])
                    dd_dump_log(&cl.node[n].d);
        if (cl_down(&cl)) {
            fprintf(stderr, "FAIL %s: a worker outlived its node\n", argv[1]);
            harness_failed++;
        }
    }
    e2e_client_global_cleanup();
    if (!found) {
        fprintf(stderr, "no case %s\n", argv[1]);
        return 2;
    }
    return HARNESS_END();
}
