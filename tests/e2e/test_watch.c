/*
 * Watches over real HTTP: streamed NDJSON events in order, the initial
 * listing, replay from a resourceVersion, 410 once history is compacted,
 * namespace scoping, many writers, and watches that are open while the
 * platform shuts down.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../harness.h"
#include "env.h"

#define FCS NS("default") "/functionconfigs"
#define FNS NS("default") "/functions"
#define QUIET_MS 200 /* how long "no further event" is waited for */

static const char *watch_path(char *buf, size_t len, const char *collection, uint64_t rv)
{
    snprintf(buf, len, "%s?watch=true&resourceVersion=%llu", collection, (unsigned long long)rv);
    return buf;
}

/* 1 when no further line arrives for a while. */
/* No change arrives within QUIET_MS (a BOOKMARK is not a change). */
static int quiet(e2e_watch *w)
{
    char *line;
    while ((line = e2e_watch_next(w, QUIET_MS)) && strstr(line, "\"type\":\"BOOKMARK\""))
        free(line);
    int none = line == NULL;
    if (line)
        fprintf(stderr, "  unexpected watch line: %.300s\n", line);
    free(line);
    return none;
}

/*
 * The resourceVersion of a list of `collection`, 0 on failure. An empty
 * store lists at revision 0, which a watch reads as "no resourceVersion"
 * (list first); an unrelated write first makes it a real revision, so a
 * watch from it replays exactly what follows.
 */
static uint64_t list_rv(env *e, const char *collection)
{
    if (REQ("GET", collection, ADMIN_TOKEN, NULL) != 200)
        return 0;
    if (jrv(e->r.json) > 0)
        return jrv(e->r.json);
    if (REQ("POST", NS("e2e-seed") "/secrets", ADMIN_TOKEN,
            "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":"
            "\"seed\"},\"type\":\"Opaque\",\"data\":{}}") != 201 ||
        REQ("GET", collection, ADMIN_TOKEN, NULL) != 200)
        return 0;
    return jrv(e->r.json);
}

/* ---- order and types -------------------------------------------------------- */

E2E_TEST(watch_sees_added_modified_deleted_in_order)
{
    char path[256];
    uint64_t rv0 = list_rv(e, FCS);
    CHECK(rv0 > 0);
    e2e_watch *w = env_watch(e, watch_path(path, sizeof(path), FCS, rv0), DEV_TOKEN);
    CHECK(w != NULL);

    CHECK_INT(REQ("POST", FCS, DEV_TOKEN, FUNCTIONCONFIG_JSON("a", "img-one")), 201);
    uint64_t rv1 = jrv(e->r.json);
    CHECK_INT(REQ("PUT", FCS "/a", DEV_TOKEN, FUNCTIONCONFIG_JSON("a", "img-two")), 200);
    uint64_t rv2 = jrv(e->r.json);
    CHECK_INT(REQ("DELETE", FCS "/a", DEV_TOKEN, NULL), 200);

    cJSON *ev = env_event(e, w, 3000);
    CHECK_EVENT(ev, "ADDED", "a");
    CHECK_INT(e2e_watch_status(w, 0), 200);
    CHECK_INT(jrv(jget(ev, "object")), rv1);
    CHECK_STR(jstr(ev, "object.spec.image"), "img-one");
    CHECK_STR(jstr(ev, "object.kind"), "FunctionConfig");
    CHECK(jstr(ev, "object.metadata.uid") != NULL);

    ev = env_event(e, w, 3000);
    CHECK_EVENT(ev, "MODIFIED", "a");
    CHECK_INT(jrv(jget(ev, "object")), rv2);
    CHECK_STR(jstr(ev, "object.spec.image"), "img-two");
    CHECK(jnum(ev, "object.metadata.generation") == 2);

    ev = env_event(e, w, 3000);
    CHECK_EVENT(ev, "DELETED", "a");
    CHECK(jrv(jget(ev, "object")) > rv2);
    CHECK_STR(jstr(ev, "object.spec.image"), "img-two"); /* the last state */

    CHECK(quiet(w));
}

/* Functions also get the controller's status writes, as MODIFIED events. */
E2E_TEST(watch_functions_sees_every_change_in_revision_order)
{
    char path[256];
    uint64_t rv0 = list_rv(e, FNS);
    CHECK(rv0 > 0);
    e2e_watch *w = env_watch(e, watch_path(path, sizeof(path), FNS, rv0), DEV_TOKEN);
    CHECK_INT(REQ("POST", FNS, DEV_TOKEN, FUNCTION_JSON("f", "main.handler")), 201);

    cJSON *ev = env_event(e, w, 3000);
    CHECK_EVENT(ev, "ADDED", "f");
    CHECK_INT(e2e_watch_status(w, 0), 200);
    uint64_t last = jrv(jget(ev, "object"));
    /* The controller's status write arrives as MODIFIED. */
    ev = env_event(e, w, 3000);
    CHECK_EVENT(ev, "MODIFIED", "f");
    CHECK(jrv(jget(ev, "object")) > last);
    CHECK(jnum(ev, "object.status.observedGeneration") == 1);
    last = jrv(jget(ev, "object"));

    CHECK_INT(REQ("DELETE", FNS "/f", DEV_TOKEN, NULL), 200);
    for (;;) {
        ev = env_event(e, w, 3000);
        if (!ev)
            FAILF("no DELETED event");
        CHECK(jrv(jget(ev, "object")) > last);
        last = jrv(jget(ev, "object"));
        if (strcmp(jstr(ev, "type"), "DELETED") == 0)
            break;
        CHECK_STR(jstr(ev, "type"), "MODIFIED");
    }
    CHECK_STR(jstr(ev, "object.metadata.name"), "f");
}

/* ---- initial listing and replay ------------------------------------------- */

E2E_TEST(watch_without_resource_version_lists_existing_objects_first)
{
    CHECK_INT(REQ("POST", FCS, DEV_TOKEN, FUNCTIONCONFIG_JSON("b", "img")), 201);
    CHECK_INT(REQ("POST", FCS, DEV_TOKEN, FUNCTIONCONFIG_JSON("a", "img")), 201);
    uint64_t rv_a = jrv(e->r.json);
    e2e_watch *w = env_watch(e, FCS "?watch=true", DEV_TOKEN);
    CHECK_INT(e2e_watch_status(w, 3000), 200);
    cJSON *ev = env_event(e, w, 3000);
    CHECK_EVENT(ev, "ADDED", "a"); /* in key order */
    CHECK_INT(jrv(jget(ev, "object")), rv_a);
    CHECK_EVENT(env_event(e, w, 3000), "ADDED", "b");

    CHECK_INT(REQ("POST", FCS, DEV_TOKEN, FUNCTIONCONFIG_JSON("c", "img")), 201);
    uint64_t rv_c = jrv(e->r.json);
    ev = env_event(e, w, 3000);
    CHECK_EVENT(ev, "ADDED", "c");
    CHECK_INT(jrv(jget(ev, "object")), rv_c);
    CHECK(quiet(w));

    /* resourceVersion=0 means the same as none. */
    e2e_watch *w0 = env_watch(e, FCS "?watch=true&resourceVersion=0", DEV_TOKEN);
    CHECK_INT(e2e_watch_status(w0, 3000), 200);
    CHECK_EVENT(env_event(e, w0, 3000), "ADDED", "a");
    CHECK_EVENT(env_event(e, w0, 3000), "ADDED", "b");
    CHECK_EVENT(env_event(e, w0, 3000), "ADDED", "c");
}

E2E_TEST(watch_from_an_older_resource_version_replays)
{
    char path[256];
    uint64_t rv0 = list_rv(e, FCS);
    CHECK(rv0 > 0);
    CHECK_INT(REQ("POST", FCS, DEV_TOKEN, FUNCTIONCONFIG_JSON("a", "one")), 201);
    uint64_t rv1 = jrv(e->r.json);
    CHECK_INT(REQ("PUT", FCS "/a", DEV_TOKEN, FUNCTIONCONFIG_JSON("a", "two")), 200);
    CHECK_INT(REQ("DELETE", FCS "/a", DEV_TOKEN, NULL), 200);

    e2e_watch *w = env_watch(e, watch_path(path, sizeof(path), FCS, rv0), DEV_TOKEN);
    CHECK_INT(e2e_watch_status(w, 3000), 200);
    CHECK_EVENT(env_event(e, w, 3000), "ADDED", "a");
    CHECK_EVENT(env_event(e, w, 3000), "MODIFIED", "a");
    CHECK_EVENT(env_event(e, w, 3000), "DELETED", "a");
    CHECK(quiet(w));

    /* From the create's revision: only what came after it. */
    e2e_watch *w1 = env_watch(e, watch_path(path, sizeof(path), FCS, rv1), DEV_TOKEN);
    CHECK_INT(e2e_watch_status(w1, 3000), 200);
    CHECK_EVENT(env_event(e, w1, 3000), "MODIFIED", "a");
    CHECK_EVENT(env_event(e, w1, 3000), "DELETED", "a");
    /* And live events follow the replay. */
    CHECK_INT(REQ("POST", FCS, DEV_TOKEN, FUNCTIONCONFIG_JSON("z", "one")), 201);
    CHECK_EVENT(env_event(e, w1, 3000), "ADDED", "z");
}

E2E_TEST_WITH(watch_from_a_compacted_revision_is_410, tiny_history_store(4))
{
    char path[256], body[512];
    for (int i = 0; i < 8; i++) {
        snprintf(body, sizeof(body),
                 "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":"
                 "\"s%d\"},\"type\":\"Opaque\",\"stringData\":{\"k\":\"v\"}}",
                 i);
        CHECK_INT(REQ("POST", NS("default") "/secrets", DEV_TOKEN, body), 201);
    }
    uint64_t now = list_rv(e, NS("default") "/secrets");
    CHECK(now >= 8);

    watch_path(path, sizeof(path), NS("default") "/secrets", 1);
    CHECK_INT(REQ("GET", path, DEV_TOKEN, NULL), 410);
    CHECK_STATUS(410, "Expired", NULL);

    e2e_watch *w = env_watch(e, path, DEV_TOKEN);
    CHECK_INT(e2e_watch_status(w, 3000), 410);
    cJSON *st = env_event(e, w, 3000);
    CHECK(st != NULL);
    CHECK_STR(jstr(st, "kind"), "Status");
    CHECK(jnum(st, "code") == 410);
    CHECK_STR(jstr(st, "reason"), "Expired");
    CHECK(e2e_watch_wait_end(w, 3000));

    /* Within the retained history a watch still replays. */
    e2e_watch *ok = env_watch(e, watch_path(path, sizeof(path), NS("default") "/secrets", now - 2),
                              DEV_TOKEN);
    CHECK_INT(e2e_watch_status(ok, 3000), 200);
    CHECK_EVENT(env_event(e, ok, 3000), "ADDED", "s6");
    CHECK_EVENT(env_event(e, ok, 3000), "ADDED", "s7");
}

/*
 * A client learns that its watch is established from the response status
 * and headers; they must not wait for the first event, which may be hours
 * away on a quiet collection.
 */
E2E_TEST(watch_headers_arrive_before_the_first_event)
{
    char path[256];
    e2e_watch *w = env_watch(e, watch_path(path, sizeof(path), FCS, list_rv(e, FCS)), DEV_TOKEN);
    e2e_watch *w2 = env_watch(e, FCS "?watch=true", DEV_TOKEN);
    long status = e2e_watch_status(w, 1500);
    long status2 = e2e_watch_status(w2, 100);
    CHECK_INT(status, 200);
    CHECK_INT(status2, 200);
}

/* ---- scope and access -------------------------------------------------------- */

E2E_TEST(watch_is_scoped_to_its_namespace)
{
    e2e_watch *w = env_watch(e, FCS "?watch=true", DEV_TOKEN);
    e2e_watch *all = env_watch(e, API "/functionconfigs?watch=true", ADMIN_TOKEN);
    /* "default2" shares a prefix with "default" but is another namespace. */
    CHECK_INT(REQ("POST", NS("default2") "/functionconfigs", ADMIN_TOKEN,
                  FUNCTIONCONFIG_JSON("x", "img")),
              201);
    CHECK_INT(REQ("POST", NS("team-b") "/functionconfigs", ADMIN_TOKEN,
                  FUNCTIONCONFIG_JSON("y", "img")),
              201);
    CHECK_INT(REQ("POST", FCS, ADMIN_TOKEN, FUNCTIONCONFIG_JSON("z", "img")), 201);
    CHECK_INT(REQ("POST", FNS, ADMIN_TOKEN, FUNCTION_JSON("other-kind", "m.h")), 201);

    cJSON *ev = env_event(e, w, 3000);
    CHECK_EVENT(ev, "ADDED", "z");
    CHECK_INT(e2e_watch_status(w, 0), 200);
    CHECK_STR(jstr(ev, "object.metadata.namespace"), "default");
    CHECK(quiet(w));

    /* Listed (key order) or live (write order), depending on when the
     * watch began: compare as a set. */
    int seen = 0;
    for (int i = 0; i < 3; i++) {
        ev = env_event(e, all, 3000);
        CHECK(ev != NULL);
        CHECK_STR(jstr(ev, "type"), "ADDED");
        const char *name = jstr(ev, "object.metadata.name");
        CHECK(name && strlen(name) == 1 && name[0] >= 'x' && name[0] <= 'z');
        seen |= 1 << (name[0] - 'x');
    }
    CHECK_INT(seen, 7);
    CHECK(quiet(all));
}

E2E_TEST(watch_requires_authorization)
{
    CHECK_INT(REQ("GET", FCS "?watch=true", NULL, NULL), 401);
    CHECK_STATUS(401, "Unauthorized", NULL);
    CHECK_INT(REQ("GET", API "/functionconfigs?watch=true", DEV_TOKEN, NULL), 403);
    CHECK_STATUS(403, "Forbidden", NULL);
    CHECK_INT(REQ("GET", FCS "?watch=true", TEAM_B_TOKEN, NULL), 403);
    CHECK_STATUS(403, "Forbidden", NULL);
    CHECK_INT(REQ("POST", FCS, DEV_TOKEN, FUNCTIONCONFIG_JSON("a", "img")), 201);
    e2e_watch *w = env_watch(e, FCS "?watch=true", VIEWER_TOKEN);
    CHECK_INT(e2e_watch_status(w, 3000), 200);
    CHECK_EVENT(env_event(e, w, 3000), "ADDED", "a");
}

/* A client that goes away must not disturb later writes or watches. */
E2E_TEST(watch_client_disconnect_is_harmless)
{
    char url[256], body[512];
    snprintf(url, sizeof(url), "%s%s", e->base, FCS "?watch=true");
    /* Something to list, so each watch has begun when its status arrives. */
    CHECK_INT(REQ("POST", FCS, DEV_TOKEN, FUNCTIONCONFIG_JSON("first", "img")), 201);
    for (int round = 0; round < 5; round++) {
        e2e_watch *w = e2e_watch_open(url, DEV_TOKEN);
        CHECK(w != NULL);
        long status = e2e_watch_status(w, 3000);
        e2e_watch_close(w);
        CHECK_INT(status, 200);
        for (int i = 0; i < 10; i++) {
            snprintf(body, sizeof(body),
                     "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"FunctionConfig\",\"metadata\":"
                     "{\"name\":\"r%d-%d\"},\"spec\":{\"image\":\"img\",\"binaryExecutor\":"
                     "{\"path\":\"img\"}}}",
                     round, i);
            CHECK_INT(REQ("POST", FCS, DEV_TOKEN, body), 201);
        }
    }
    e2e_watch *w = env_watch(e, FCS "?watch=true", DEV_TOKEN);
    CHECK_INT(e2e_watch_status(w, 3000), 200);
    for (int i = 0; i < 51; i++)
        if (!env_event(e, w, 3000))
            FAILF("only %d of 51 initial events", i);
}

/* ---- many writers ------------------------------------------------------------ */

#define WRITERS 8
#define WRITES_EACH 25

typedef struct writer {
    const char *base;
    int id;
    int created;
    long bad_status;
} writer;

static void *write_many(void *arg)
{
    writer *wr = arg;
    e2e_http *h = e2e_http_new(wr->base);
    e2e_resp r = E2E_RESP_INIT;
    char body[512];
    for (int i = 0; h && i < WRITES_EACH; i++) {
        snprintf(body, sizeof(body),
                 "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"FunctionConfig\",\"metadata\":{"
                 "\"name\":\"w%d-%d\"},\"spec\":{\"image\":\"img\",\"binaryExecutor\":{\"path\":"
                 "\"img\"}}}",
                 wr->id, i);
        long status = e2e_http_do(h, "POST", FCS, DEV_TOKEN, body, &r);
        if (status == 201)
            wr->created++;
        else
            wr->bad_status = status;
    }
    e2e_resp_free(&r);
    e2e_http_free(h);
    return NULL;
}

E2E_TEST(concurrent_writers_are_seen_without_gaps)
{
    char path[256];
    uint64_t rv0 = list_rv(e, FCS);
    CHECK(rv0 > 0);
    e2e_watch *w = env_watch(e, watch_path(path, sizeof(path), FCS, rv0), DEV_TOKEN);

    writer writers[WRITERS];
    pthread_t threads[WRITERS];
    for (int i = 0; i < WRITERS; i++) {
        writers[i] = (writer){e->base, i, 0, 0};
        pthread_create(&threads[i], NULL, write_many, &writers[i]);
    }
    for (int i = 0; i < WRITERS; i++)
        pthread_join(threads[i], NULL);
    for (int i = 0; i < WRITERS; i++)
        if (writers[i].created != WRITES_EACH)
            FAILF("writer %d created %d of %d (last status %ld)", i, writers[i].created,
                  WRITES_EACH, writers[i].bad_status);

    unsigned char seen[WRITERS][WRITES_EACH] = {{0}};
    uint64_t expect = rv0 + 1;
    int64_t deadline = e2e_now_ms() + 15000;
    for (int n = 0; n < WRITERS * WRITES_EACH; n++) {
        int64_t left = deadline - e2e_now_ms();
        cJSON *ev = env_keep(e, e2e_watch_next_json(w, left > 0 ? (int)left : 1));
        if (!ev)
            FAILF("the watch delivered %d of %d events", n, WRITERS * WRITES_EACH);
        CHECK_STR(jstr(ev, "type"), "ADDED");
        if (jrv(jget(ev, "object")) != expect)
            FAILF("event %d has resourceVersion %llu, expected %llu (a gap or a reorder)", n,
                  (unsigned long long)jrv(jget(ev, "object")), (unsigned long long)expect);
        expect++;
        int id = -1, i = -1;
        CHECK(sscanf(jstr(ev, "object.metadata.name"), "w%d-%d", &id, &i) == 2);
        CHECK(id >= 0 && id < WRITERS && i >= 0 && i < WRITES_EACH);
        if (seen[id][i]++)
            FAILF("w%d-%d delivered twice", id, i);
    }
    CHECK_INT(e2e_watch_status(w, 0), 200);
    CHECK(quiet(w));
}

/* ---- shutdown ------------------------------------------------------------------ */

E2E_TEST(watch_open_while_the_platform_shuts_down)
{
    CHECK_INT(REQ("POST", FCS, DEV_TOKEN, FUNCTIONCONFIG_JSON("a", "img")), 201);
    CHECK_INT(REQ("POST", NS("default") "/secrets", DEV_TOKEN,
                  "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":"
                  "\"s\"},\"type\":\"Opaque\",\"data\":{}}"),
              201);
    e2e_watch *w = env_watch(e, FCS "?watch=true", DEV_TOKEN);
    e2e_watch *idle = env_watch(e, NS("default") "/secrets?watch=true", DEV_TOKEN);
    CHECK_INT(e2e_watch_status(w, 3000), 200);
    CHECK_INT(e2e_watch_status(idle, 3000), 200);
    CHECK_EVENT(env_event(e, w, 3000), "ADDED", "a");
    CHECK_EVENT(env_event(e, idle, 3000), "ADDED", "s"); /* then nothing is pending */

    int64_t t0 = e2e_now_ms();
    funcd_platform_free(e->p);
    e->p = NULL;
    int64_t took = e2e_now_ms() - t0;
    CHECK(e2e_watch_wait_end(w, 3000));
    CHECK(e2e_watch_wait_end(idle, 3000));
    if (took > 3000)
        FAILF("shutdown with open watches took %lld ms", (long long)took);
}

typedef struct racer {
    const char *base;
    int id;
    atomic_int *stop;
    int created;
} racer;

static void *write_until_gone(void *arg)
{
    racer *rc = arg;
    e2e_http *h = e2e_http_new(rc->base);
    e2e_resp r = E2E_RESP_INIT;
    char body[512];
    for (int i = 0; h && i < 5000 && !atomic_load(rc->stop); i++) {
        snprintf(body, sizeof(body),
                 "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"FunctionConfig\",\"metadata\":{"
                 "\"name\":\"r%d-%d\"},\"spec\":{\"image\":\"img\",\"binaryExecutor\":{\"path\":"
                 "\"img\"}}}",
                 rc->id, i);
        long status = e2e_http_do(h, "POST", FCS, DEV_TOKEN, body, &r);
        if (status == 0)
            break; /* the platform is gone */
        rc->created += status == 201;
    }
    e2e_resp_free(&r);
    e2e_http_free(h);
    return NULL;
}

/* Writers keep the watch busy while the platform shuts down under them. */
E2E_TEST(shutdown_while_writers_feed_a_watch)
{
    atomic_int stop = 0;
    e2e_watch *w = env_watch(e, FCS "?watch=true", DEV_TOKEN);
    racer racers[4];
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) {
        racers[i] = (racer){e->base, i, &stop, 0};
        pthread_create(&threads[i], NULL, write_until_gone, &racers[i]);
    }
    int events = 0;
    while (events < 40 && env_event(e, w, 3000))
        events++;
    int64_t t0 = e2e_now_ms();
    funcd_platform_free(e->p);
    e->p = NULL;
    int64_t took = e2e_now_ms() - t0;
    atomic_store(&stop, 1);
    for (int i = 0; i < 4; i++)
        pthread_join(threads[i], NULL);
    CHECK_INT(events, 40);
    CHECK(e2e_watch_wait_end(w, 3000));
    if (took > 3000)
        FAILF("shutdown under load took %lld ms", (long long)took);
}

/* ---- slow clients ------------------------------------------------------------- */

#define SMALL_LIMIT 65536
#define PAD 50000

/* A FunctionConfig `name` with a PAD-byte annotation (`fill` repeated). */
static char *padded_fc(const char *name, char fill)
{
    char *body = malloc(PAD + 512);
    if (!body)
        return NULL;
    int n = snprintf(body, 512,
                     "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"FunctionConfig\",\"metadata\":"
                     "{\"name\":\"%s\",\"annotations\":{\"pad\":\"",
                     name);
    memset(body + n, fill, PAD);
    snprintf(body + n + PAD, 512,
             "\"}},\"spec\":{\"image\":\"img\",\"binaryExecutor\":{\"path\":\"img\"}}}");
    return body;
}

static int up_small_limit(env *e)
{
    return env_up_with(e, NULL, funcd_with_stream_buffer_limit(SMALL_LIMIT), NULL, NULL);
}

/* A client that stops reading while events pile up past the limit: when it
 * reads again it finds a final ERROR event (429) and the end of the stream. */
static void slow_watcher_body(env *e)
{
    int port = 0;
    CHECK(sscanf(e->base, "http://127.0.0.1:%d", &port) == 1);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    static const char req[] = "GET " FCS "?watch=true HTTP/1.1\r\nHost: funcd\r\n"
                              "Authorization: Bearer " DEV_TOKEN "\r\n\r\n";
    CHECK(send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) == (ssize_t)sizeof(req) - 1);
    env_sleep_ms(200); /* the watch is registered */
    int written = 0;
    /* 4 MB of events: more than the kernel's socket buffers take (over
     * 1 MB on loopback) plus the limit. */
    for (int i = 0; i < 80; i++) {
        char *body = padded_fc("big", (char)('a' + i % 26));
        written += body && REQ("PUT", FCS "/big", DEV_TOKEN, body) / 100 == 2;
        free(body);
    }
    CHECK_INT(written, 80);
    /* Now read it all: up to the end of the response. */
    size_t cap = 16 << 20, got = 0;
    char *all = malloc(cap);
    CHECK(all);
    int ended = 0;
    for (int64_t t0 = e2e_now_ms(); !ended && e2e_now_ms() - t0 < 8000;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0)
            continue;
        ssize_t n = recv(fd, all + got, cap - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
        all[got] = '\0';
        ended = got >= 5 && memcmp(all + got - 5, "0\r\n\r\n", 5) == 0;
    }
    close(fd);
    const char *err = got ? strstr(all, "{\"type\":\"ERROR\"") : NULL;
    int events = 0;
    for (const char *p = all; got && (p = strstr(p, "\"type\":\"MODIFIED\"")); p++)
        events++;
    fprintf(stderr, "  %zu bytes read, %d MODIFIED events before the end\n", got, events);
    int ok = ended && err && strstr(err, "\"code\":429") &&
             strstr(err, "\"reason\":\"TooManyRequests\"") && strstr(err, "fell behind") &&
             !strstr(err + 8, "\"type\":"); /* the last event */
    if (!ok) {
        fprintf(stderr, "  the stream's tail: %.400s\n  last bytes:", got > 400 ? all + got - 400 : all);
        for (size_t i = got > 12 ? got - 12 : 0; i < got; i++)
            fprintf(stderr, " %02x", (unsigned char)all[i]);
        fprintf(stderr, "\n");
    }
    free(all);
    CHECK(ok);
    CHECK(events < 79);
}

TEST(slow_watcher_gets_an_error_event_and_the_stream_ends)
{
    env e_;
    if (up_small_limit(&e_) < 0) {
        env_down(&e_);
        FAILF("cannot start a platform: %s", funcd_error_last()->message);
    }
    slow_watcher_body(&e_);
    env_down(&e_);
}

/* The initial listing of a watch may be larger than the limit: it is what a
 * plain list would answer at once. */
static void big_listing_body(env *e)
{
    char name[32];
    for (int i = 0; i < 20; i++) {
        snprintf(name, sizeof(name), "big%d", i);
        char *body = padded_fc(name, 'x');
        CHECK(body);
        long st = REQ("POST", FCS, DEV_TOKEN, body);
        free(body);
        CHECK_INT(st, 201);
    }
    e2e_watch *w = env_watch(e, FCS "?watch=true", DEV_TOKEN);
    CHECK_INT(e2e_watch_status(w, 3000), 200);
    for (int i = 0; i < 20; i++) {
        cJSON *ev = env_event(e, w, 3000);
        if (!ev)
            FAILF("only %d of 20 listed objects", i);
        CHECK_STR(jstr(ev, "type"), "ADDED");
    }
    CHECK(quiet(w));
}

TEST(a_listing_larger_than_the_limit_is_sent_whole)
{
    env e_;
    if (up_small_limit(&e_) < 0) {
        env_down(&e_);
        FAILF("cannot start a platform: %s", funcd_error_last()->message);
    }
    big_listing_body(&e_);
    env_down(&e_);
}

int main(void)
{
    e2e_client_global_init();
    RUN_ISOLATED(watch_sees_added_modified_deleted_in_order);
    RUN_ISOLATED(watch_functions_sees_every_change_in_revision_order);
    RUN_ISOLATED(watch_without_resource_version_lists_existing_objects_first);
    RUN_ISOLATED(watch_from_an_older_resource_version_replays);
    RUN_ISOLATED(watch_from_a_compacted_revision_is_410);
    RUN_ISOLATED(watch_headers_arrive_before_the_first_event);
    RUN_ISOLATED(watch_is_scoped_to_its_namespace);
    RUN_ISOLATED(watch_requires_authorization);
    RUN_ISOLATED(watch_client_disconnect_is_harmless);
    RUN_ISOLATED(concurrent_writers_are_seen_without_gaps);
    RUN_ISOLATED(watch_open_while_the_platform_shuts_down);
    RUN_ISOLATED(shutdown_while_writers_feed_a_watch);
    RUN_ISOLATED(slow_watcher_gets_an_error_event_and_the_stream_ends);
    RUN_ISOLATED(a_listing_larger_than_the_limit_is_sent_whole);
    e2e_client_global_cleanup();
    return HARNESS_END();
}
