/*
 * Serving, end to end: function logs through the control plane (history
 * and follow), and what the data plane answers for unknown functions, with
 * an invocation id on every answer; pipelined requests on one connection.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "../harness.h"
#include "test_serving_common.h"

/* The first NDJSON record of `body` whose "line" equals `line`, parsed
 * (kept until env_down), or NULL. */
static const cJSON *find_record(env *e, const char *body, const char *line)
{
    for (const char *p = body; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        cJSON *rec = cJSON_ParseWithLength(p, len);
        const char *l = jstr(rec, "line");
        if (l && strcmp(l, line) == 0)
            return env_keep(e, rec);
        cJSON_Delete(rec);
        p = nl ? nl + 1 : NULL;
    }
    return NULL;
}

static size_t count_lines(const char *body)
{
    size_t n = 0;
    for (const char *p = body; p && *p; p++)
        n += *p == '\n';
    return n;
}

typedef struct wanted {
    const char *line;
    const cJSON *rec;
} wanted;

static int logs_have(env *e, void *arg)
{
    wanted *w = arg;
    if (REQ("GET", FN_PATH("talker") "/logs", DEV_TOKEN, NULL) != 200)
        return 0;
    w->rec = find_record(e, e->r.body, w->line);
    return w->rec != NULL;
}

/* The structured line the fixture prints for /log?msg=MSG. */
static char *structured_line(const char *msg, const char *id)
{
    char *s = NULL;
    if (asprintf(
            &s,
            "{\"severity\":\"INFO\",\"msg\":\"%s\",\"structured\":true,\"invocationId\":\"%s\"}",
            msg, id) < 0)
        return NULL;
    return s;
}

/*
 * Lines a worker prints while serving a request come back from .../logs
 * with the replica and that request's invocation id; follow=true streams a
 * line printed later; tailLines limits the history.
 */
SV_TEST(logs)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(
        sv_create(e, "talker",
                  "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"}}",
                  dir),
        201);
    if (!sv_wait_ready(e, "talker", 5000))
        FAILF("not Ready: %.500s", e->r.body);
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("talker") "/log?msg=first-7f3a", NULL), 200);
    char id1[64];
    snprintf(id1, sizeof(id1), "%s", sv_header(&e->r, "X-Funcd-Invocation-Id"));
    CHECK(id1[0]);
    long pid = (long)jnum(e->r.json, "pid");

    /* The structured line carries its invocation id itself. */
    char *structured = structured_line("first-7f3a", id1);
    wanted w = {structured, NULL};
    int found = env_poll(e, 5000, logs_have, &w);
    free(structured);
    if (!found)
        FAILF("the structured line is not in the logs: %.1000s", e->r.body);
    char ctype[128];
    CHECK_CONTAINS(e2e_resp_header(&e->r, "Content-Type", ctype, sizeof(ctype)),
                   "application/x-ndjson");
    CHECK_STR(jstr(w.rec, "replica"), "talker-1");
    CHECK_STR(jstr(w.rec, "stream"), "stdout");
    CHECK_STR(jstr(w.rec, "invocationId"), id1);
    CHECK(jstr(w.rec, "time") && strlen(jstr(w.rec, "time")) >= 20);
    /*
     * The plain line printed just before it, during the same request. Its
     * invocation id is the platform's guess (the request in flight on that
     * worker when the line is read from the pipe), which can come after the
     * gateway finished the request: then it has none, but never a wrong one.
     */
    const cJSON *plain = find_record(e, e->r.body, "first-7f3a");
    CHECK(plain != NULL);
    CHECK_STR(jstr(plain, "replica"), "talker-1");
    CHECK_STR(jstr(plain, "stream"), "stdout");
    if (jget(plain, "invocationId"))
        CHECK_STR(jstr(plain, "invocationId"), id1);
    else
        fprintf(stderr,
                "  note: the plain line was read after its request ended: no invocationId\n");
    /* What the worker wrote on stderr as it started belongs to no request. */
    char start_line[96];
    snprintf(start_line, sizeof(start_line), "fixture worker %ld listening", pid);
    const cJSON *started = find_record(e, e->r.body, start_line);
    if (!started)
        FAILF("\"%s\" is not in the logs: %.1000s", start_line, e->r.body);
    CHECK_STR(jstr(started, "stream"), "stderr");
    CHECK_STR(jstr(started, "replica"), "talker-1");
    CHECK(jget(started, "invocationId") == NULL);

    /* tailLines: only the newest records. */
    CHECK_INT(REQ("GET", FN_PATH("talker") "/logs?tailLines=1", DEV_TOKEN, NULL), 200);
    CHECK_INT(count_lines(e->r.body), 1);

    /* follow=true: a line printed after the stream opened arrives on it. */
    e2e_watch *follow = env_watch(e, FN_PATH("talker") "/logs?follow=true", DEV_TOKEN);
    CHECK(follow != NULL);
    CHECK_INT(e2e_watch_status(follow, 3000), 200);
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("talker") "/log?msg=second-91c2", NULL), 200);
    char id2[64];
    snprintf(id2, sizeof(id2), "%s", sv_header(&e->r, "X-Funcd-Invocation-Id"));
    char *want = structured_line("second-91c2", id2);
    const cJSON *streamed = NULL, *streamed_plain = NULL;
    int64_t deadline = e2e_now_ms() + 5000;
    while (want && !(streamed && streamed_plain) && e2e_now_ms() < deadline) {
        char *line = e2e_watch_next(follow, 500);
        if (!line && e2e_watch_wait_end(follow, 0))
            break; /* the stream ended */
        cJSON *rec = line ? cJSON_Parse(line) : NULL;
        free(line);
        const char *l = jstr(rec, "line");
        if (l && strcmp(l, want) == 0)
            streamed = env_keep(e, rec);
        else if (l && strcmp(l, "second-91c2") == 0)
            streamed_plain = env_keep(e, rec);
        else
            cJSON_Delete(rec);
    }
    free(want);
    if (!streamed || !streamed_plain)
        FAILF("the new lines did not arrive on the follow stream");
    CHECK_STR(jstr(streamed, "replica"), "talker-1");
    CHECK_STR(jstr(streamed, "invocationId"), id2);
    CHECK_STR(jstr(streamed_plain, "replica"), "talker-1");

    /* Logs of a function that does not exist: 404. */
    CHECK_INT(REQ("GET", FN_PATH("nobody") "/logs", DEV_TOKEN, NULL), 404);
}

/* An unknown function gets a 404 JSON Status naming it, with an
 * invocation id. */
SV_TEST(not_found)
{
    static const char *const paths[] = {
        DP_PATH("nosuch"),
        DP_PATH("nosuch") "/",
        DP_PATH("nosuch") "/deeper/path?x=1",
        "/fn/other-namespace/nosuch/",
    };
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        sv_invoke(e, i == 2 ? "POST" : "GET", paths[i], i == 2 ? "body" : NULL);
        const char *p = status_problem(&e->r, 404, "NotFound", NULL);
        if (p)
            FAILF("%s: %s: HTTP %ld %.300s", paths[i], p, e->r.status, e->r.body);
        CHECK_CONTAINS(jstr(e->r.json, "message"), "nosuch");
        if (!sv_header(&e->r, "X-Funcd-Invocation-Id")[0])
            FAILF("%s: no X-Funcd-Invocation-Id in\n%s", paths[i], e->r.headers);
    }
}

/*
 * Every data-plane answer carries X-Funcd-Invocation-Id: served requests
 * (each a different id, the one the worker saw) and every error, also for
 * paths that name no function at all.
 */
SV_TEST(invocation_ids)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(
        sv_create(e, "ids",
                  "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"}}",
                  dir),
        201);
    if (!sv_wait_ready(e, "ids", 5000))
        FAILF("not Ready: %.500s", e->r.body);
    char ids[20][64];
    for (int i = 0; i < 20; i++) {
        CHECK_INT(sv_invoke(e, "GET", DP_PATH("ids") "/n", NULL), 200);
        snprintf(ids[i], sizeof(ids[i]), "%s", sv_header(&e->r, "X-Funcd-Invocation-Id"));
        CHECK(strlen(ids[i]) >= 16);
        CHECK_STR(jstr(e->r.json, "invocationId"), ids[i]);
        for (int k = 0; k < i; k++)
            CHECK(strcmp(ids[k], ids[i]) != 0);
    }
    static const char *const elsewhere[] = {"/", "/nope", "/fn/", "/fn/default", "/fn/default/"};
    for (size_t i = 0; i < sizeof(elsewhere) / sizeof(elsewhere[0]); i++) {
        sv_invoke(e, "GET", elsewhere[i], NULL);
        const char *p = status_problem(&e->r, 404, "NotFound", NULL);
        if (p)
            FAILF("%s: %s: HTTP %ld %.300s", elsewhere[i], p, e->r.status, e->r.body);
        if (!sv_header(&e->r, "X-Funcd-Invocation-Id")[0])
            FAILF("GET %s: a 404 without X-Funcd-Invocation-Id:\n%s", elsewhere[i], e->r.headers);
    }
}

/* ---- pipelined requests on one connection ------------------------------- */

static int dp_connect(env *e)
{
    const char *hp = e->dp_base + strlen("http://");
    const char *colon = strrchr(hp, ':');
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        fd = -1;
    }
    struct timeval tv = {10, 0};
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* Reads until `want` complete answers (each ends with the echo's closing
 * brace and newline) have arrived, or the peer stops sending. */
static size_t read_answers(int fd, char *buf, size_t cap, int want)
{
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
        buf[n] = '\0';
        int got = 0;
        for (const char *p = buf; (p = strstr(p, "HTTP/1.1 200 ")); p++)
            got++;
        if (got >= want && strstr(buf + n - (n > 2 ? 2 : n), "}"))
            break;
    }
    buf[n] = '\0';
    return n;
}

static int count_of(const char *hay, const char *needle)
{
    int k = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        k++;
    return k;
}

/*
 * A client may send its next requests before the answer to the first one
 * (pipelining), in one write or while the first is in flight; each gets its
 * answer, in order. The gateway keeps reading a connection while it answers
 * (lib/http/httpd.c): what arrives meanwhile must wait for its turn, and a
 * client that hangs up mid-request must not disturb anyone else.
 */
SV_TEST(pipelined)
{
    char dir[256];
    CHECK(sv_fixture("native", dir, sizeof(dir)) == 0);
    CHECK_INT(
        sv_create(e, "pipe",
                  "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"}}",
                  dir),
        201);
    if (!sv_wait_ready(e, "pipe", 5000))
        FAILF("not Ready: %.500s", e->r.body);
    static const char get1[] = "GET /fn/default/pipe/one HTTP/1.1\r\nHost: t\r\n\r\n";
    static const char post2[] = "POST /fn/default/pipe/two HTTP/1.1\r\nHost: t\r\n"
                                "Content-Length: 5\r\n\r\nhello";
    static const char slow3[] = "GET /fn/default/pipe/sleep?ms=200 HTTP/1.1\r\nHost: t\r\n\r\n";
    static const char get4[] = "GET /fn/default/pipe/four HTTP/1.1\r\nHost: t\r\n\r\n";
    static char buf[65536];

    /* All in one write. */
    int fd = dp_connect(e);
    CHECK(fd >= 0);
    char all[512];
    int len = snprintf(all, sizeof(all), "%s%s%s", get1, post2, get4);
    CHECK_INT((int)write(fd, all, (size_t)len), len);
    read_answers(fd, buf, sizeof(buf), 3);
    CHECK_INT(count_of(buf, "HTTP/1.1 200 "), 3);
    const char *a = strstr(buf, "\"path\":\"/one\""), *b = strstr(buf, "\"path\":\"/two\"");
    const char *c = strstr(buf, "\"path\":\"/four\"");
    if (!a || !b || !c || !(a < b && b < c))
        FAILF("answers missing or out of order:\n%.2000s", buf);
    CHECK(strstr(buf, "\"body\":\"hello\"") != NULL);

    /* The next ones sent while a slow one is being answered. */
    CHECK_INT((int)write(fd, slow3, sizeof(slow3) - 1), (int)sizeof(slow3) - 1);
    usleep(50 * 1000);
    CHECK_INT((int)write(fd, get1, sizeof(get1) - 1), (int)sizeof(get1) - 1);
    usleep(20 * 1000);
    CHECK_INT((int)write(fd, post2, sizeof(post2) - 1), (int)sizeof(post2) - 1);
    read_answers(fd, buf, sizeof(buf), 3);
    CHECK_INT(count_of(buf, "HTTP/1.1 200 "), 3);
    a = strstr(buf, "\"path\":\"/sleep?ms=200\"");
    b = strstr(buf, "\"path\":\"/one\"");
    c = strstr(buf, "\"path\":\"/two\"");
    if (!a || !b || !c || !(a < b && b < c))
        FAILF("answers missing or out of order:\n%.2000s", buf);
    close(fd);

    /* A client that hangs up while its request is in flight. */
    for (int i = 0; i < 5; i++) {
        fd = dp_connect(e);
        CHECK(fd >= 0);
        CHECK_INT((int)write(fd, slow3, sizeof(slow3) - 1), (int)sizeof(slow3) - 1);
        shutdown(fd, SHUT_WR);
        usleep(10 * 1000);
        close(fd);
    }
    CHECK_INT(sv_invoke(e, "GET", DP_PATH("pipe") "/after", NULL), 200);
    CHECK_STR(jstr(e->r.json, "path"), "/after");
}

int main(int argc, char **argv)
{
    sv_init();
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    SV_RUN(only, ran, logs);
    SV_RUN(only, ran, not_found);
    SV_RUN(only, ran, invocation_ids);
    SV_RUN(only, ran, pipelined);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no test case named %s\n", only);
        return 1;
    }
    return HARNESS_END();
}
