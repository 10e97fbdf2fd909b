/*
 * Tracing at the data-plane edge, end to end (docs/observability.md): the
 * W3C traceparent a worker gets (continued, started, or replacing an
 * invalid one), and the access log line of each request, field by field.
 * The fixture worker echoes the traceparent and tracestate it received.
 */
#include <sys/stat.h>
#include <unistd.h>

#include "../harness.h"
#include "test_serving_common.h"
#include "trace/traceparent.h"

#define CALLER_TRACE "4bf92f3577b34da6a3ce929d0e0e4736"
#define CALLER_SPAN "00f067aa0ba902b7"
#define CALLER_TP "00-" CALLER_TRACE "-" CALLER_SPAN "-01"

/* Options of each case: the access log goes to <dir>/access.log. */
static void options_for(const char *name, const char *dir, funcd_option **a, funcd_option **b)
{
    *a = *b = NULL;
    if (strcmp(name, "access_log") == 0) {
        char path[320];
        snprintf(path, sizeof(path), "%s/access.log", dir);
        *a = funcd_with_access_log(path);
    }
}

#define TR_TEST(name)                                                                              \
    static void name##_body(env *e, const char *dir);                                              \
    TEST(name)                                                                                     \
    {                                                                                              \
        char dir_[256];                                                                            \
        if (sv_tempdir(dir_, sizeof(dir_)) < 0)                                                    \
            FAILF("no temporary directory");                                                       \
        funcd_option *a_, *b_;                                                                     \
        options_for(#name, dir_, &a_, &b_);                                                        \
        env e_;                                                                                    \
        if (env_up_with(&e_, NULL, a_, b_, NULL) < 0) {                                            \
            env_down(&e_);                                                                         \
            sv_cleanup();                                                                          \
            FAILF("cannot start a platform: %s", funcd_error_last()->message);                     \
        }                                                                                          \
        name##_body(&e_, dir_);                                                                    \
        env_down(&e_);                                                                             \
        sv_cleanup();                                                                              \
        char left_[512];                                                                           \
        if (sv_children(left_, sizeof(left_)))                                                     \
            FAILF("processes left behind after the platform was freed: %s", left_);                \
    }                                                                                              \
    static void name##_body(env *e, const char *dir)

/* Creates Function "tracer" on the native fixture and waits until Ready. */
static int make_tracer(env *e)
{
    char dir[256];
    if (sv_fixture("native", dir, sizeof(dir)) != 0)
        return -1;
    if (sv_create(e, "tracer",
                  "{\"runtime\":\"native\",\"handler\":\"worker\",\"source\":{\"path\":\"%s\"}}",
                  dir) != 201)
        return -1;
    return sv_wait_ready(e, "tracer", 10000) ? 0 : -1;
}

/* One request to the tracer with extra headers (NULL-terminated). */
static long invoke_with(env *e, const char *path, const char *const *headers)
{
    return e2e_http_send(e->dp, "GET", path, NULL, headers, NULL, 0, &e->r);
}

/* The traceparent the worker echoed, parsed; NULL (and a message) when it
 * got none, several, or an invalid one. */
static const char *worker_parent(env *e, funcd_traceparent *tp)
{
    static char why[300];
    const char *v = jstr(e->r.json, "traceparent");
    if (!v || !*v)
        return "the worker got no traceparent";
    if (jnum(e->r.json, "traceparents") != 1) {
        snprintf(why, sizeof(why), "the worker got %g traceparent headers",
                 jnum(e->r.json, "traceparents"));
        return why;
    }
    if (strlen(v) != FUNCD_TRACEPARENT_LEN || strncmp(v, "00-", 3) != 0 ||
        funcd_traceparent_parse(v, strlen(v), tp) < 0) {
        snprintf(why, sizeof(why), "the worker got an invalid traceparent \"%s\"", v);
        return why;
    }
    return NULL;
}

#define CHECK_WORKER_PARENT(tp)                                                                    \
    do {                                                                                           \
        const char *why_ = worker_parent(e, (tp));                                                 \
        if (why_)                                                                                  \
            FAILF("%s: %.500s", why_, e->r.body);                                                  \
    } while (0)

static void hex_of(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

/*
 * A valid traceparent is continued: the worker sees the same trace id, a
 * new parent (the edge span), the caller's sampled flag, and the
 * tracestate as sent.
 */
TR_TEST(traceparent_continued)
{
    (void)dir;
    CHECK(make_tracer(e) == 0);
    static const char *const hdrs[] = {"traceparent: " CALLER_TP, "tracestate: congo=t61rcWkgMzE",
                                       NULL};
    CHECK_INT(invoke_with(e, DP_PATH("tracer") "/x", hdrs), 200);
    funcd_traceparent tp;
    CHECK_WORKER_PARENT(&tp);
    char trace[33], parent[17];
    hex_of(tp.trace_id, 16, trace);
    hex_of(tp.parent_id, 8, parent);
    CHECK_STR(trace, CALLER_TRACE);
    if (strcmp(parent, CALLER_SPAN) == 0)
        FAILF("the worker's parent is the caller's span, not the edge's");
    CHECK_INT(tp.flags, 1);
    CHECK_STR(jstr(e->r.json, "tracestate"), "congo=t61rcWkgMzE");

    /* Not sampled stays not sampled; each request gets its own edge span. */
    static const char *const unsampled[] = {"traceparent: 00-" CALLER_TRACE "-" CALLER_SPAN "-00",
                                            NULL};
    CHECK_INT(invoke_with(e, DP_PATH("tracer") "/x", unsampled), 200);
    funcd_traceparent tp2;
    CHECK_WORKER_PARENT(&tp2);
    CHECK_INT(tp2.flags, 0);
    CHECK(memcmp(tp2.trace_id, tp.trace_id, 16) == 0);
    CHECK(memcmp(tp2.parent_id, tp.parent_id, 8) != 0);
    CHECK_STR(jstr(e->r.json, "tracestate"), "");
}

/* Without a traceparent the edge starts a trace: each request its own. */
TR_TEST(traceparent_started)
{
    (void)dir;
    CHECK(make_tracer(e) == 0);
    funcd_traceparent a, b;
    CHECK_INT(invoke_with(e, DP_PATH("tracer") "/x", NULL), 200);
    CHECK_WORKER_PARENT(&a);
    CHECK_INT(a.flags, 1);
    /* A tracestate without a traceparent has nothing to belong to. */
    static const char *const orphan[] = {"tracestate: congo=t61rcWkgMzE", NULL};
    CHECK_INT(invoke_with(e, DP_PATH("tracer") "/x", orphan), 200);
    CHECK_WORKER_PARENT(&b);
    CHECK(memcmp(a.trace_id, b.trace_id, 16) != 0);
    CHECK(memcmp(a.parent_id, b.parent_id, 8) != 0);
    CHECK_STR(jstr(e->r.json, "tracestate"), "");
}

/*
 * An invalid traceparent never fails the request: it is replaced by a new
 * trace (and its tracestate dropped). Two traceparent headers are no single
 * parent either.
 */
TR_TEST(traceparent_invalid)
{
    (void)dir;
    CHECK(make_tracer(e) == 0);
    static const char *const bad[] = {
        "traceparent: 00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",
        "traceparent: 00-00000000000000000000000000000000-" CALLER_SPAN "-01",
        "traceparent: 00-" CALLER_TRACE "-0000000000000000-01",
        "traceparent: ff-" CALLER_TRACE "-" CALLER_SPAN "-01",
        "traceparent: 00-" CALLER_TRACE "-" CALLER_SPAN "-01-extra",
        "traceparent: 00-" CALLER_TRACE "-" CALLER_SPAN,
        "traceparent: garbage",
        NULL};
    for (const char *const *b = bad; *b; b++) {
        const char *hdrs[] = {*b, "tracestate: congo=t61rcWkgMzE", NULL};
        CHECK_INT(invoke_with(e, DP_PATH("tracer") "/x", hdrs), 200);
        funcd_traceparent tp;
        CHECK_WORKER_PARENT(&tp);
        char trace[33];
        hex_of(tp.trace_id, 16, trace);
        if (strcmp(trace, CALLER_TRACE) == 0)
            FAILF("\"%s\" was continued", *b);
        CHECK_STR(jstr(e->r.json, "tracestate"), "");
    }
    static const char *const twice[] = {"traceparent: " CALLER_TP,
                                        "traceparent: 00-" CALLER_TRACE "-" CALLER_SPAN "-00",
                                        NULL};
    CHECK_INT(invoke_with(e, DP_PATH("tracer") "/x", twice), 200);
    funcd_traceparent tp;
    CHECK_WORKER_PARENT(&tp);
    char trace[33];
    hex_of(tp.trace_id, 16, trace);
    if (strcmp(trace, CALLER_TRACE) == 0)
        FAILF("two traceparent headers were continued");
}

/* ---- the access log ------------------------------------------------------ */

typedef struct log_want {
    char path[320];
    const char *invocation;
    cJSON *line; /* found */
} log_want;

static int log_has(env *e, void *arg)
{
    log_want *w = arg;
    FILE *f = fopen(w->path, "re");
    if (!f)
        return 0;
    char line[4096];
    while (!w->line && fgets(line, sizeof(line), f)) {
        cJSON *j = cJSON_Parse(line);
        if (j && jstr(j, "invocationId") && strcmp(jstr(j, "invocationId"), w->invocation) == 0)
            w->line = env_keep(e, j);
        else
            cJSON_Delete(j);
    }
    fclose(f);
    return w->line != NULL;
}

/* The line of invocation `id` in the access log, or NULL after 10 s. */
static const cJSON *access_line(env *e, const char *dir, const char *id)
{
    static log_want w;
    memset(&w, 0, sizeof(w));
    snprintf(w.path, sizeof(w.path), "%s/access.log", dir);
    w.invocation = id;
    return env_poll(e, 10000, log_has, &w) ? w.line : NULL;
}

/* "2026-12-01T21:30:00.123Z" */
static int is_time(const char *s)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ";
    if (!s || strlen(s) != sizeof(shape) - 1)
        return 0;
    for (size_t i = 0; shape[i]; i++)
        if (shape[i] == 'd' ? (s[i] < '0' || s[i] > '9') : s[i] != shape[i])
            return 0;
    return 1;
}

/*
 * Each request gets one JSON line: time, method, path (with the query),
 * status, bytes of the body sent, duration, namespace, function,
 * invocation id and trace id; an answer of the edge's own (404) too.
 */
TR_TEST(access_log)
{
    CHECK(make_tracer(e) == 0);
    static const char *const hdrs[] = {"traceparent: " CALLER_TP, NULL};
    CHECK_INT(invoke_with(e, DP_PATH("tracer") "/some/where?q=1", hdrs), 200);
    char id[64];
    snprintf(id, sizeof(id), "%s", sv_header(&e->r, "X-Funcd-Invocation-Id"));
    size_t body_len = e->r.len;
    const cJSON *l = access_line(e, dir, id);
    if (!l)
        FAILF("no access log line for invocation %s", id);
    CHECK(is_time(jstr(l, "time")));
    CHECK_STR(jstr(l, "method"), "GET");
    CHECK_STR(jstr(l, "path"), DP_PATH("tracer") "/some/where?q=1");
    CHECK_INT(jnum(l, "status"), 200);
    CHECK_INT(jnum(l, "bytes"), body_len);
    CHECK(cJSON_IsNumber(jget(l, "durationMs")) && jnum(l, "durationMs") >= 0 &&
          jnum(l, "durationMs") < 60000);
    CHECK_STR(jstr(l, "namespace"), "default");
    CHECK_STR(jstr(l, "function"), "tracer");
    CHECK_STR(jstr(l, "invocationId"), id);
    CHECK_STR(jstr(l, "traceId"), CALLER_TRACE);
    CHECK_INT(cJSON_GetArraySize(l), 10); /* nothing else */

    /* A started trace: the line has the id the worker saw. */
    CHECK_INT(invoke_with(e, DP_PATH("tracer") "/x", NULL), 200);
    funcd_traceparent tp;
    CHECK_WORKER_PARENT(&tp);
    char trace[33];
    hex_of(tp.trace_id, 16, trace);
    snprintf(id, sizeof(id), "%s", sv_header(&e->r, "X-Funcd-Invocation-Id"));
    l = access_line(e, dir, id);
    if (!l)
        FAILF("no access log line for invocation %s", id);
    CHECK_STR(jstr(l, "traceId"), trace);

    /* The edge's own answer: no function, its status, a JSON-escaped path. */
    CHECK_INT(invoke_with(e, "/fn/default/nosuch/%22q%22", NULL), 404);
    snprintf(id, sizeof(id), "%s", sv_header(&e->r, "X-Funcd-Invocation-Id"));
    body_len = e->r.len;
    l = access_line(e, dir, id);
    if (!l)
        FAILF("no access log line for the 404, invocation %s", id);
    CHECK_INT(jnum(l, "status"), 404);
    CHECK_INT(jnum(l, "bytes"), body_len);
    CHECK_STR(jstr(l, "path"), "/fn/default/nosuch/%22q%22");
    CHECK_STR(jstr(l, "function"), "");
    CHECK_INT(strlen(jstr(l, "traceId")), 32);
}

int main(int argc, char **argv)
{
    sv_init();
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    SV_RUN(only, ran, traceparent_continued);
    SV_RUN(only, ran, traceparent_started);
    SV_RUN(only, ran, traceparent_invalid);
    SV_RUN(only, ran, access_log);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no test case named %s\n", only);
        return 1;
    }
    return HARNESS_END();
}
