/*
 * The facade (include/funcd/funcd.h): typed failures of funcd_platform_new
 * that consume every option and leak nothing, option precedence, backend
 * registration checked with call-counting fake backends (libgit2-style), and
 * the lifecycle: run / start / stop (also from a signal handler) / shutdown.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../harness.h"
#include "env.h"
#include "funcd/funcd.h"

#define FN_BODY                                                                                    \
    "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":\"hello\"},"   \
    "\"spec\":{\"runtime\":\"python3\",\"handler\":\"m.h\",\"source\":{\"bundle\":\"" NO_SUCH_BUNDLE "\"}}}"

/* Any non-NULL value: funcd_platform_new must overwrite it with NULL. */
static char not_set_marker;
#define NOT_SET ((funcd_platform *)&not_set_marker)

static void quiet_log(funcd_log_level level, const char *message, void *payload)
{
    if (level >= FUNCD_LOG_WARN)
        fprintf(stderr, "    [funcd] %s\n", message);
}

/* ---- a call-counting store around the memory driver ------------------------ */

typedef struct counting_store {
    funcd_store base;
    funcd_store *inner;
    atomic_int gets, puts, dels, lists, watches, frees;
    /* Optional: free() waits at this gate until released. */
    int gated;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int entered_free, released, free_done;
} counting_store;

#define CS(s) ((counting_store *)(s))

static int cs_get(funcd_store *s, const char *key, funcd_store_value *out)
{
    atomic_fetch_add(&CS(s)->gets, 1);
    return CS(s)->inner->get(CS(s)->inner, key, out);
}

static int cs_put(funcd_store *s, const char *key, const void *value, size_t len,
                  uint64_t expected, uint64_t *revision)
{
    atomic_fetch_add(&CS(s)->puts, 1);
    return CS(s)->inner->put(CS(s)->inner, key, value, len, expected, revision);
}

static int cs_del(funcd_store *s, const char *key, uint64_t expected, uint64_t *revision)
{
    atomic_fetch_add(&CS(s)->dels, 1);
    return CS(s)->inner->del(CS(s)->inner, key, expected, revision);
}

static int cs_list(funcd_store *s, const char *prefix, funcd_store_list_cb cb, void *payload,
                   uint64_t *revision)
{
    atomic_fetch_add(&CS(s)->lists, 1);
    return CS(s)->inner->list(CS(s)->inner, prefix, cb, payload, revision);
}

static int cs_watch(funcd_store *s, const char *prefix, uint64_t after, funcd_store_watch_cb cb,
                    void *payload, funcd_store_watch **out)
{
    atomic_fetch_add(&CS(s)->watches, 1);
    return CS(s)->inner->watch(CS(s)->inner, prefix, after, cb, payload, out);
}

static void cs_unwatch(funcd_store *s, funcd_store_watch *w)
{
    CS(s)->inner->unwatch(CS(s)->inner, w);
}

static uint64_t cs_revision(funcd_store *s)
{
    return CS(s)->inner->revision(CS(s)->inner);
}

/* Releases the inner store only: the wrapper belongs to the test, which
 * reads the counters afterwards. */
static void cs_free(funcd_store *s)
{
    counting_store *c = CS(s);
    if (c->gated) {
        pthread_mutex_lock(&c->lock);
        c->entered_free = 1;
        pthread_cond_broadcast(&c->cond);
        while (!c->released)
            pthread_cond_wait(&c->cond, &c->lock);
        pthread_mutex_unlock(&c->lock);
    }
    c->inner->free(c->inner);
    c->inner = NULL;
    atomic_fetch_add(&c->frees, 1);
    pthread_mutex_lock(&c->lock);
    c->free_done = 1;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

static int cs_init(counting_store *c, const char *name)
{
    memset(c, 0, sizeof(*c));
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    c->base = (funcd_store)FUNCD_STORE_INIT;
    c->base.name = name;
    c->base.get = cs_get;
    c->base.put = cs_put;
    c->base.del = cs_del;
    c->base.list = cs_list;
    c->base.watch = cs_watch;
    c->base.unwatch = cs_unwatch;
    c->base.revision = cs_revision;
    c->base.free = cs_free;
    return funcd_store_memory_new(&c->inner, 0);
}

/* Frees what the platform did not (only when a test failed early). */
static void cs_fini(counting_store *c)
{
    if (c->inner)
        c->inner->free(c->inner);
    c->inner = NULL;
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
}

/* Waits (bounded) until `*flag` is set under c->lock. */
static int cs_wait_flag(counting_store *c, int *flag, int timeout_ms)
{
    int64_t deadline = e2e_now_ms() + timeout_ms;
    pthread_mutex_lock(&c->lock);
    while (!*flag && e2e_now_ms() < deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&c->cond, &c->lock, &ts);
    }
    int set = *flag;
    pthread_mutex_unlock(&c->lock);
    return set;
}

/* ---- a fake gateway that only counts ----------------------------------------- */

typedef struct fake_gateway {
    funcd_gateway base;
    int frees;
} fake_gateway;

static int fg_listen(funcd_gateway *g, const char *addr, char *bound, size_t len)
{
    snprintf(bound, len, "%s", addr);
    return 0;
}
static int fg_start(funcd_gateway *g) { return 0; }
static int fg_set_route(funcd_gateway *g, const funcd_route *r) { return 0; }
static int fg_remove_route(funcd_gateway *g, const char *ns, const char *name) { return 0; }
static int fg_stop(funcd_gateway *g) { return 0; }
static void fg_free(funcd_gateway *g) { ((fake_gateway *)g)->frees++; }

static void fg_init(fake_gateway *g)
{
    memset(g, 0, sizeof(*g));
    g->base = (funcd_gateway)FUNCD_GATEWAY_INIT;
    g->base.name = "fake";
    g->base.listen = fg_listen;
    g->base.start = fg_start;
    g->base.set_route = fg_set_route;
    g->base.remove_route = fg_remove_route;
    g->base.stop = fg_stop;
    g->base.free = fg_free;
}

/* ---- helpers --------------------------------------------------------------------- */

/* A listening socket on an ephemeral loopback port; its "127.0.0.1:PORT". */
static int occupy_port(char *addr, size_t len)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 1) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    snprintf(addr, len, "127.0.0.1:%d", ntohs(sa.sin_port));
    return fd;
}

/* GET `path` on `addr` ("host:port") with `token`; the status (0: no answer). */
static long http_get(const char *addr, const char *path, const char *token, e2e_resp *out)
{
    char base[160];
    snprintf(base, sizeof(base), "http://%s", addr);
    e2e_http *h = e2e_http_new(base);
    long status = h ? e2e_http_do(h, "GET", path, token, NULL, out) : 0;
    e2e_http_free(h);
    return status;
}

static long http_status(const char *addr, const char *method, const char *path, const char *token,
                        const char *body)
{
    char base[160];
    snprintf(base, sizeof(base), "http://%s", addr);
    e2e_http *h = e2e_http_new(base);
    e2e_resp r = E2E_RESP_INIT;
    long status = h ? e2e_http_do(h, method, path, token, body, &r) : 0;
    e2e_resp_free(&r);
    e2e_http_free(h);
    return status;
}

/* ---- funcd_platform_new failures -------------------------------------------- */

TEST(production_without_a_store_is_EMISSING)
{
    funcd_platform *p = NOT_SET;
    CHECK_INT(funcd_platform_new(&p, funcd_production()), FUNCD_EMISSING);
    CHECK(p == NULL);
    CHECK_INT(funcd_error_last()->code, FUNCD_EMISSING);
    CHECK_CONTAINS(funcd_error_last()->message, "store");

    /* With a store but no blob: the store is consumed, the blob is named. */
    counting_store s;
    CHECK_INT(cs_init(&s, "counting"), 0);
    p = NOT_SET;
    int rc = funcd_platform_new(&p, funcd_production(), funcd_with_store(&s.base));
    int frees = atomic_load(&s.frees);
    const char *msg = funcd_error_last()->message;
    int names_blob = strstr(msg, "blob") != NULL;
    cs_fini(&s);
    CHECK_INT(rc, FUNCD_EMISSING);
    CHECK(p == NULL);
    CHECK(names_blob);
    CHECK_INT(frees, 1);
}

TEST(production_with_injected_backends_has_no_default_credential)
{
    counting_store s;
    funcd_blob *blob = NULL;
    funcd_bus *bus = NULL;
    CHECK_INT(cs_init(&s, "counting"), 0);
    funcd_blob_memory_new(&blob);
    funcd_bus_memory_new(&bus);
    funcd_platform *p = NULL;
    int rc = funcd_platform_new(&p, funcd_production(), funcd_with_store(&s.base),
                                funcd_with_blob(blob), funcd_with_bus(bus),
                                funcd_with_listen_addr("127.0.0.1:0"),
                                funcd_with_data_plane_addr("127.0.0.1:0"),
                                funcd_with_token("root", "admin", NULL),
                                funcd_with_logger(quiet_log, FUNCD_LOG_WARN, NULL));
    if (rc < 0) {
        cs_fini(&s);
        FAILF("funcd_platform_new: %s", funcd_error_last()->message);
    }
    e2e_resp r = E2E_RESP_INIT;
    long dev = -1, root = -1;
    char store_name[32] = "";
    if (funcd_platform_start(p) == 0) {
        dev = http_get(funcd_platform_addr(p), "/version", DEV_TOKEN, &r);
        root = http_get(funcd_platform_addr(p), "/version", "root", &r);
        const char *n = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(r.json, "backends"), "store"));
        snprintf(store_name, sizeof(store_name), "%s", n ? n : "");
    }
    e2e_resp_free(&r);
    funcd_platform_free(p);
    int frees = atomic_load(&s.frees);
    cs_fini(&s);
    CHECK_INT(dev, 401);
    CHECK_INT(root, 200);
    CHECK_STR(store_name, "counting");
    CHECK_INT(frees, 1);
}

TEST(address_in_use_is_EBIND)
{
    char addr[64];
    int fd = occupy_port(addr, sizeof(addr));
    CHECK(fd >= 0);
    counting_store s;
    cs_init(&s, "counting");
    funcd_platform *p = NOT_SET;
    int rc = funcd_platform_new(&p, funcd_in_memory(), funcd_with_store(&s.base),
                                funcd_with_listen_addr(addr));
    int names_addr = strstr(funcd_error_last()->message, addr) != NULL;
    int frees = atomic_load(&s.frees);
    funcd_platform *p2 = NOT_SET;
    int rc2 = funcd_platform_new(&p2, funcd_in_memory(), funcd_with_data_plane_addr(addr));
    int names_addr2 = strstr(funcd_error_last()->message, addr) != NULL;
    close(fd);
    cs_fini(&s);
    CHECK_INT(rc, FUNCD_EBIND);
    CHECK(p == NULL);
    CHECK(names_addr);
    CHECK_INT(frees, 1);
    CHECK_INT(rc2, FUNCD_EBIND);
    CHECK(p2 == NULL);
    CHECK(names_addr2);
}

TEST(malformed_address_is_an_error)
{
    funcd_platform *p = NOT_SET;
    CHECK_INT(funcd_platform_new(&p, funcd_in_memory(), funcd_with_listen_addr("nonsense")),
              FUNCD_EINVAL);
    CHECK(p == NULL);
    CHECK_CONTAINS(funcd_error_last()->message, "nonsense");
    p = NOT_SET;
    CHECK(funcd_platform_new(&p, funcd_in_memory(), funcd_with_data_plane_addr("127.0.0.1:x")) <
          0);
    CHECK(p == NULL);
}

TEST(limits_out_of_range_are_EINVAL)
{
    funcd_platform *p = NOT_SET;
    CHECK_INT(funcd_platform_new(&p, funcd_in_memory(), funcd_with_stream_buffer_limit(1000)),
              FUNCD_EINVAL);
    CHECK(p == NULL);
    CHECK_CONTAINS(funcd_error_last()->message, "funcd_with_stream_buffer_limit");
    p = NOT_SET;
    CHECK_INT(funcd_platform_new(&p, funcd_in_memory(), funcd_with_max_connections(0)),
              FUNCD_EINVAL);
    CHECK(p == NULL);
    CHECK_CONTAINS(funcd_error_last()->message, "funcd_with_max_connections");
    p = NOT_SET;
    CHECK_INT(funcd_platform_new(&p, funcd_in_memory(), funcd_with_stream_buffer_limit(65536),
                                 funcd_with_max_connections(4)),
              0);
    funcd_platform_free(p);
}

TEST(operator_settings_of_the_sandbox_are_checked)
{
    funcd_platform *p = NOT_SET;
    CHECK_INT(funcd_platform_new(&p, funcd_in_memory(), funcd_with_seccomp_allow("no_such_call")),
              FUNCD_EINVAL);
    CHECK(p == NULL);
    CHECK_CONTAINS(funcd_error_last()->message, "no_such_call");
    p = NOT_SET;
    CHECK_INT(funcd_platform_new(&p, funcd_in_memory(),
                                 funcd_with_insecure_registry("10.1.2.3:5000")),
              FUNCD_EINVAL);
    CHECK(p == NULL);
    CHECK_CONTAINS(funcd_error_last()->message, "loopback");
    p = NOT_SET;
    CHECK_INT(funcd_platform_new(&p, funcd_in_memory(), funcd_with_seccomp_allow("io_uring_setup"),
                                 funcd_with_host_network_allowed(1),
                                 funcd_with_insecure_registry("127.0.0.1:5000")),
              0);
    funcd_platform_free(p);
}

TEST(backend_of_another_version_is_EVERSION)
{
    counting_store s;
    cs_init(&s, "counting");
    s.base.version = FUNCD_STORE_VERSION + 1;
    funcd_platform *p = NOT_SET;
    int rc = funcd_platform_new(&p, funcd_in_memory(), funcd_with_store(&s.base));
    int names_store = strstr(funcd_error_last()->message, "store") != NULL;
    int frees = atomic_load(&s.frees);
    cs_fini(&s);
    CHECK_INT(rc, FUNCD_EVERSION);
    CHECK(p == NULL);
    CHECK(names_store);
    CHECK_INT(frees, 1); /* ownership passed with the option */

    fake_gateway g;
    fg_init(&g);
    g.base.version = 0;
    p = NOT_SET;
    CHECK_INT(funcd_platform_new(&p, funcd_in_memory(), funcd_with_gateway(&g.base)),
              FUNCD_EVERSION);
    CHECK(p == NULL);
    CHECK_INT(g.frees, 1);

    funcd_blob *blob = NULL;
    CHECK_INT(funcd_blob_memory_new(&blob), 0);
    blob->version = 99;
    p = NOT_SET;
    CHECK_INT(funcd_platform_new(&p, funcd_in_memory(), funcd_with_blob(blob)), FUNCD_EVERSION);
    CHECK(p == NULL);
}

TEST(backend_without_a_required_method_is_refused)
{
    counting_store s;
    cs_init(&s, "counting");
    s.base.watch = NULL;
    funcd_platform *p = NOT_SET;
    int rc = funcd_platform_new(&p, funcd_in_memory(), funcd_with_store(&s.base));
    int names_store = strstr(funcd_error_last()->message, "store") != NULL;
    int frees = atomic_load(&s.frees);
    cs_fini(&s);
    CHECK(rc < 0);
    CHECK_INT(funcd_error_last()->code, rc);
    CHECK(p == NULL);
    CHECK(names_store);
    CHECK_INT(frees, 1);

    fake_gateway g;
    fg_init(&g);
    g.base.set_route = NULL;
    p = NOT_SET;
    CHECK(funcd_platform_new(&p, funcd_in_memory(), funcd_with_gateway(&g.base)) < 0);
    CHECK(p == NULL);
    CHECK_INT(g.frees, 1);
}

/*
 * A blob without list and del used to pass registration and then fail with
 * "out of memory" (the log store needs both): they are required slots, and
 * the refusal names them.
 */
TEST(blob_without_list_or_del_is_refused_naming_them)
{
    funcd_blob *blob = NULL;
    CHECK_INT(funcd_blob_memory_new(&blob), 0);
    blob->list = NULL;
    blob->del = NULL;
    funcd_platform *p = NOT_SET;
    int rc = funcd_platform_new(&p, funcd_in_memory(), funcd_with_blob(blob));
    if (rc == 0)
        funcd_platform_free(p);
    CHECK_INT(rc, FUNCD_EINVAL);
    CHECK(p == NULL);
    CHECK_CONTAINS(funcd_error_last()->message, "blob");
    CHECK_CONTAINS(funcd_error_last()->message, "list, del");
}

/* Options structs carry their version first: 0 (a struct not started from
 * the INIT macro) or a newer one is FUNCD_EVERSION, never read past. */
TEST(options_structs_of_an_unknown_version_are_EVERSION)
{
    funcd_runtime *rt = NULL;
    funcd_process_options po = {0};
    CHECK_INT(funcd_runtime_process_new_with(&rt, &po), FUNCD_EVERSION);
    CHECK(rt == NULL);
    po.version = FUNCD_PROCESS_OPTIONS_VERSION + 1;
    CHECK_INT(funcd_runtime_process_new_with(&rt, &po), FUNCD_EVERSION);
    CHECK_CONTAINS(funcd_error_last()->message, "funcd_process_options");
    CHECK_INT(funcd_process_options_init(&po, FUNCD_PROCESS_OPTIONS_VERSION + 1), FUNCD_EVERSION);
    CHECK_INT(funcd_process_options_init(&po, FUNCD_PROCESS_OPTIONS_VERSION), 0);
    CHECK_INT(po.version, FUNCD_PROCESS_OPTIONS_VERSION);
    po.sandbox = -1;
    CHECK_INT(funcd_runtime_process_new_with(&rt, &po), 0);
    rt->free(rt);
    funcd_process_options init = FUNCD_PROCESS_OPTIONS_INIT;
    CHECK_INT(init.version, FUNCD_PROCESS_OPTIONS_VERSION);

    funcd_store_sqlite_options so = {0};
    funcd_store *s = NULL;
    CHECK_INT(funcd_store_sqlite_new(&s, ":memory:", &so), FUNCD_EVERSION);
    CHECK(s == NULL);
    CHECK_CONTAINS(funcd_error_last()->message, "funcd_store_sqlite_options");
    CHECK_INT(funcd_store_sqlite_options_init(&so, 0), FUNCD_EVERSION);
    CHECK_INT(funcd_store_sqlite_options_init(&so, FUNCD_STORE_SQLITE_OPTIONS_VERSION), 0);
    CHECK_INT(so.version, FUNCD_STORE_SQLITE_OPTIONS_VERSION);
}

/*
 * A backend whose `free` slot is NULL cannot be released by the platform:
 * it must be refused without calling through the NULL slot. Run in a child
 * so a crash is reported as a failure instead of ending the suite.
 */
TEST(backend_without_free_is_refused_without_crashing)
{
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        counting_store s;
        cs_init(&s, "counting");
        s.base.free = NULL;
        funcd_platform *p = NOT_SET;
        int rc = funcd_platform_new(&p, funcd_in_memory(), funcd_with_store(&s.base));
        cs_fini(&s);
        _exit(rc < 0 && p == NULL ? 0 : 3);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    if (WIFSIGNALED(status))
        FAILF("funcd_platform_new crashed with signal %d on a store whose free is NULL",
              WTERMSIG(status));
    CHECK(WIFEXITED(status));
    CHECK_INT(WEXITSTATUS(status), 0);
}

/* ---- tokens ---------------------------------------------------------------------- */

TEST(bad_token_options_are_EINVAL)
{
    static const char *const ns[] = {"default", NULL};
    funcd_platform *p = NOT_SET;
    CHECK_INT(funcd_platform_new(&p, funcd_in_memory(), funcd_with_token("t", "root", ns)),
              FUNCD_EINVAL);
    CHECK(p == NULL);
    CHECK_CONTAINS(funcd_error_last()->message, "role");
    p = NOT_SET;
    CHECK_INT(funcd_platform_new(&p, funcd_in_memory(), funcd_with_token("t", NULL, ns)),
              FUNCD_EINVAL);
    CHECK(p == NULL);
    p = NOT_SET;
    CHECK_INT(funcd_platform_new(&p, funcd_in_memory(), funcd_with_token("", "admin", NULL)),
              FUNCD_EINVAL);
    CHECK(p == NULL);
    p = NOT_SET;
    /* A developer of no namespace is a mistake, not a token for nothing. */
    CHECK_INT(funcd_platform_new(&p, funcd_in_memory(), funcd_with_token("t", "developer", NULL)),
              FUNCD_EINVAL);
    CHECK(p == NULL);
}

TEST(missing_or_malformed_token_file_is_an_error)
{
    funcd_platform *p = NOT_SET;
    const char *missing = "/nonexistent/funcd-e2e/tokens.txt";
    int rc = funcd_platform_new(&p, funcd_in_memory(), funcd_with_token_file(missing));
    CHECK(rc < 0);
    CHECK(p == NULL);
    CHECK_CONTAINS(funcd_error_last()->message, missing);

    char path[] = "/tmp/funcd-e2e-tokens-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    static const char bad[] = "good admin\nbroken-line-without-role\n";
    ssize_t n = write(fd, bad, sizeof(bad) - 1);
    close(fd);
    p = NOT_SET;
    rc = funcd_platform_new(&p, funcd_in_memory(), funcd_with_token_file(path));
    int names_line = strstr(funcd_error_last()->message, ":2") != NULL;
    unlink(path);
    CHECK_INT(n, (ssize_t)sizeof(bad) - 1);
    CHECK_INT(rc, FUNCD_EINVAL);
    CHECK(p == NULL);
    CHECK(names_line);
}

TEST(token_file_and_token_options_grant_roles)
{
    char path[] = "/tmp/funcd-e2e-tokens-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    static const char lines[] = "# tokens for the e2e test\n"
                                "root-token admin\n"
                                "look-token viewer default,team-a\n"
                                "\n"
                                "dev-token developer team-a # trailing comment\n";
    ssize_t n = write(fd, lines, sizeof(lines) - 1);
    close(fd);
    funcd_platform *p = NULL;
    int rc = funcd_platform_new(&p, funcd_in_memory(), funcd_with_token_file(path),
                                funcd_with_dev_auth("macro-token", "default", "team-c"),
                                funcd_with_logger(quiet_log, FUNCD_LOG_WARN, NULL));
    unlink(path);
    CHECK_INT(n, (ssize_t)sizeof(lines) - 1);
    if (rc < 0)
        FAILF("funcd_platform_new: %s", funcd_error_last()->message);
    long s[8] = {0};
    if (funcd_platform_start(p) == 0) {
        const char *a = funcd_platform_addr(p);
        s[0] = http_status(a, "GET", "/apis/funcd.dev/v1/functions", "root-token", NULL);
        s[1] = http_status(a, "GET", "/apis/funcd.dev/v1/namespaces/team-a/functions",
                           "look-token", NULL);
        s[2] = http_status(a, "POST", "/apis/funcd.dev/v1/namespaces/team-a/functions",
                           "look-token", FN_BODY);
        s[3] = http_status(a, "POST", "/apis/funcd.dev/v1/namespaces/team-a/functions",
                           "dev-token", FN_BODY);
        s[4] = http_status(a, "POST", "/apis/funcd.dev/v1/namespaces/team-c/functions",
                           "macro-token", FN_BODY);
        s[5] = http_status(a, "GET", "/apis/funcd.dev/v1/namespaces/default/functions",
                           "dev-token", NULL);
        s[6] = http_status(a, "GET", "/version", DEV_TOKEN, NULL); /* the preset's, still there */
    }
    funcd_platform_free(p);
    CHECK_INT(s[0], 200);
    CHECK_INT(s[1], 200);
    CHECK_INT(s[2], 403);
    CHECK_INT(s[3], 201);
    CHECK_INT(s[4], 201);
    CHECK_INT(s[5], 403);
    CHECK_INT(s[6], 200);
}

TEST(without_auth_tokens_drops_the_preset_credential)
{
    static const char *const everywhere[] = {"*", NULL};
    funcd_platform *p = NULL;
    int rc = funcd_platform_new(&p, funcd_in_memory(), funcd_without_auth_tokens(),
                                funcd_with_token("only", "viewer", everywhere),
                                funcd_with_logger(quiet_log, FUNCD_LOG_WARN, NULL));
    if (rc < 0)
        FAILF("funcd_platform_new: %s", funcd_error_last()->message);
    long dev = 0, only = 0, health = 0;
    if (funcd_platform_start(p) == 0) {
        dev = http_status(funcd_platform_addr(p), "GET", "/version", DEV_TOKEN, NULL);
        only = http_status(funcd_platform_addr(p), "GET", "/apis/funcd.dev/v1/functions", "only",
                           NULL);
        health = http_status(funcd_platform_addr(p), "GET", "/healthz", NULL, NULL);
    }
    funcd_platform_free(p);
    CHECK_INT(dev, 401);
    CHECK_INT(only, 200); /* "*" covers every namespace, also all at once */
    CHECK_INT(health, 200);
}

/* ---- option precedence ---------------------------------------------------------- */

TEST(later_options_override_and_presets_apply_first)
{
    funcd_platform *p = NULL;
    int rc = funcd_platform_new(&p, funcd_in_memory(), funcd_with_listen_addr("127.0.0.2:0"),
                                funcd_with_data_plane_addr("127.0.0.3:0"));
    if (rc < 0)
        FAILF("funcd_platform_new: %s", funcd_error_last()->message);
    char a[128], d[128];
    snprintf(a, sizeof(a), "%s", funcd_platform_addr(p));
    snprintf(d, sizeof(d), "%s", funcd_platform_data_plane_addr(p));
    funcd_platform_free(p);
    CHECK(strncmp(a, "127.0.0.2:", 10) == 0);
    CHECK(strncmp(d, "127.0.0.3:", 10) == 0);

    /* Written before the preset, the option still wins: presets go first. */
    p = NULL;
    rc = funcd_platform_new(&p, funcd_with_listen_addr("127.0.0.4:0"),
                            funcd_with_listen_addr("127.0.0.5:0"), funcd_in_memory());
    if (rc < 0)
        FAILF("funcd_platform_new: %s", funcd_error_last()->message);
    snprintf(a, sizeof(a), "%s", funcd_platform_addr(p));
    funcd_platform_free(p);
    CHECK(strncmp(a, "127.0.0.5:", 10) == 0);
}

TEST(a_second_store_replaces_the_first)
{
    counting_store first, second;
    cs_init(&first, "store-a");
    cs_init(&second, "store-b");
    funcd_platform *p = NULL;
    int rc = funcd_platform_new(&p, funcd_in_memory(), funcd_with_store(&first.base),
                                funcd_with_store(&second.base),
                                funcd_with_logger(quiet_log, FUNCD_LOG_WARN, NULL));
    int first_freed_by_new = atomic_load(&first.frees);
    int second_freed_by_new = atomic_load(&second.frees);
    long created = 0;
    char store_name[32] = "";
    if (rc == 0 && funcd_platform_start(p) == 0) {
        created = http_status(funcd_platform_addr(p), "POST",
                              "/apis/funcd.dev/v1/namespaces/default/functions", DEV_TOKEN,
                              FN_BODY);
        e2e_resp r = E2E_RESP_INIT;
        http_get(funcd_platform_addr(p), "/version", DEV_TOKEN, &r);
        const char *n = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(r.json, "backends"), "store"));
        snprintf(store_name, sizeof(store_name), "%s", n ? n : "");
        e2e_resp_free(&r);
    }
    funcd_platform_free(p);
    int first_puts = atomic_load(&first.puts), first_watches = atomic_load(&first.watches);
    int second_puts = atomic_load(&second.puts), second_watches = atomic_load(&second.watches);
    int first_frees = atomic_load(&first.frees), second_frees = atomic_load(&second.frees);
    cs_fini(&first);
    cs_fini(&second);
    CHECK_INT(rc, 0);
    CHECK_INT(first_freed_by_new, 1);
    CHECK_INT(second_freed_by_new, 0);
    CHECK_INT(created, 201);
    CHECK_STR(store_name, "store-b");
    CHECK_INT(first_puts, 0);
    CHECK_INT(first_watches, 0);
    CHECK(second_puts >= 1);
    CHECK(second_watches >= 1); /* the controller watches it */
    CHECK_INT(first_frees, 1);
    CHECK_INT(second_frees, 1);
}

/*
 * One backend handed over twice: the platform must not free it for the
 * "override" and then go on using it (a use-after-free ASan reports). It is
 * refused with FUNCD_EINVAL and freed exactly once.
 */
TEST(the_same_backend_twice_is_EINVAL_and_freed_once)
{
    funcd_store *mem = NULL;
    CHECK_INT(funcd_store_memory_new(&mem, 0), 0);
    funcd_platform *p = NOT_SET;
    int rc = funcd_platform_new(&p, funcd_in_memory(), funcd_with_store(mem),
                                funcd_with_store(mem),
                                funcd_with_logger(quiet_log, FUNCD_LOG_WARN, NULL));
    if (rc == 0)
        funcd_platform_free(p);
    CHECK_INT(rc, FUNCD_EINVAL);
    CHECK(p == NULL);
    CHECK_CONTAINS(funcd_error_last()->message, "twice");
    CHECK_CONTAINS(funcd_error_last()->message, "funcd_with_store");

    counting_store s;
    cs_init(&s, "counting");
    fake_gateway g;
    fg_init(&g);
    p = NOT_SET;
    rc = funcd_platform_new(&p, funcd_in_memory(), funcd_with_gateway(&g.base),
                            funcd_with_store(&s.base), funcd_with_gateway(&g.base));
    int frees = atomic_load(&s.frees);
    cs_fini(&s);
    CHECK_INT(rc, FUNCD_EINVAL);
    CHECK(p == NULL);
    CHECK_CONTAINS(funcd_error_last()->message, "funcd_with_gateway");
    CHECK_INT(g.frees, 1);
    CHECK_INT(frees, 1); /* consumed like any option */
}

/*
 * funcd_with_sandbox, funcd_with_seccomp_allow and
 * funcd_with_host_network_allowed set up the process runtime funcd makes;
 * next to a runtime of the caller's they would be silently ignored (a
 * sandbox the operator asked for, not there). They are refused instead.
 */
TEST(runtime_options_next_to_an_injected_runtime_are_EINVAL)
{
    struct {
        const char *name;
        funcd_option *opt;
    } cases[] = {
        {"funcd_with_sandbox", funcd_with_sandbox(0)},
        {"funcd_with_sandbox", funcd_with_sandbox(1)},
        {"funcd_with_seccomp_allow", funcd_with_seccomp_allow("io_uring_setup")},
        {"funcd_with_host_network_allowed", funcd_with_host_network_allowed(1)},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        funcd_runtime *rt = NULL;
        CHECK_INT(funcd_runtime_process_new(&rt), 0);
        funcd_platform *p = NOT_SET;
        int rc = funcd_platform_new(&p, funcd_in_memory(), funcd_with_runtime(rt), cases[i].opt,
                                    funcd_with_logger(quiet_log, FUNCD_LOG_WARN, NULL));
        if (rc == 0)
            funcd_platform_free(p);
        if (rc != FUNCD_EINVAL)
            FAILF("%s next to funcd_with_runtime: rc %d, want FUNCD_EINVAL", cases[i].name, rc);
        CHECK(p == NULL);
        CHECK_CONTAINS(funcd_error_last()->message, cases[i].name);
        CHECK_CONTAINS(funcd_error_last()->message, "funcd_with_runtime");
    }
    /* Without an injected runtime they configure the one funcd makes. */
    funcd_platform *p = NULL;
    int rc = funcd_platform_new(&p, funcd_in_memory(), funcd_with_sandbox(0),
                                funcd_with_logger(quiet_log, FUNCD_LOG_WARN, NULL));
    funcd_platform_free(p);
    CHECK_INT(rc, 0);
}

TEST(null_options_are_skipped)
{
    funcd_platform *p = NULL;
    int rc = funcd_platform_new(&p, NULL, funcd_in_memory(), NULL,
                                funcd_with_listen_addr("127.0.0.2:0"), NULL);
    if (rc < 0)
        FAILF("funcd_platform_new: %s", funcd_error_last()->message);
    int on_two = strncmp(funcd_platform_addr(p), "127.0.0.2:", 10) == 0;
    funcd_platform_free(p);
    CHECK(on_two);

    /* The array form stops at the first NULL. */
    funcd_option *opts[] = {funcd_in_memory(), funcd_with_listen_addr("127.0.0.6:0"), NULL};
    p = NULL;
    rc = funcd_platform_new_v(&p, opts);
    if (rc < 0)
        FAILF("funcd_platform_new_v: %s", funcd_error_last()->message);
    on_two = strncmp(funcd_platform_addr(p), "127.0.0.6:", 10) == 0;
    funcd_platform_free(p);
    CHECK(on_two);
}

TEST(no_preset_or_no_out_is_EINVAL_and_consumes_options)
{
    funcd_platform *p = NOT_SET;
    CHECK_INT(funcd_platform_new(&p, funcd_with_listen_addr("127.0.0.1:0")), FUNCD_EINVAL);
    CHECK(p == NULL);
    CHECK_CONTAINS(funcd_error_last()->message, "preset");

    counting_store s;
    cs_init(&s, "counting");
    int rc = funcd_platform_new(NULL, funcd_in_memory(), funcd_with_store(&s.base));
    int frees = atomic_load(&s.frees);
    cs_fini(&s);
    CHECK_INT(rc, FUNCD_EINVAL);
    CHECK_INT(frees, 1);
}

/* ---- lifecycle ---------------------------------------------------------------------- */

static funcd_platform *new_quiet_platform(void)
{
    funcd_platform *p = NULL;
    if (funcd_platform_new(&p, funcd_in_memory(),
                           funcd_with_logger(quiet_log, FUNCD_LOG_WARN, NULL)) < 0)
        return NULL;
    return p;
}

typedef struct stopper {
    funcd_platform *p;
    pthread_t target; /* for the signal */
    int by_signal;
    atomic_int stop_sent;
    int served; /* /healthz answered 200 while run() blocked */
} stopper;

static volatile sig_atomic_t signal_seen;
static funcd_platform *signal_platform;

static void on_sigusr1(int sig)
{
    signal_seen = 1;
    funcd_platform_stop(signal_platform); /* async-signal-safe by contract */
}

/* Waits until the platform serves, then stops it (directly or by signal). */
static void *stop_when_serving(void *arg)
{
    stopper *s = arg;
    int64_t deadline = e2e_now_ms() + 5000;
    while (e2e_now_ms() < deadline && !s->served)
        s->served = http_status(funcd_platform_addr(s->p), "GET", "/healthz", NULL, NULL) == 200;
    atomic_store(&s->stop_sent, 1);
    if (s->by_signal)
        pthread_kill(s->target, SIGUSR1);
    else
        funcd_platform_stop(s->p);
    return NULL;
}

TEST(run_blocks_until_stop_from_another_thread)
{
    funcd_platform *p = new_quiet_platform();
    CHECK(p != NULL);
    stopper s = {.p = p};
    pthread_t t;
    pthread_create(&t, NULL, stop_when_serving, &s);
    int rc = funcd_platform_run(p);
    int returned_after_stop = atomic_load(&s.stop_sent);
    pthread_join(t, NULL);
    funcd_platform_free(p);
    CHECK_INT(rc, 0);
    CHECK(s.served);
    CHECK(returned_after_stop);
}

TEST(stop_from_a_signal_handler)
{
    funcd_platform *p = new_quiet_platform();
    CHECK(p != NULL);
    struct sigaction sa = {0}, old;
    sa.sa_handler = on_sigusr1;
    sigemptyset(&sa.sa_mask);
    signal_platform = p;
    signal_seen = 0;
    sigaction(SIGUSR1, &sa, &old);
    stopper s = {.p = p, .target = pthread_self(), .by_signal = 1};
    pthread_t t;
    pthread_create(&t, NULL, stop_when_serving, &s);
    int rc = funcd_platform_run(p);
    int returned_after_stop = atomic_load(&s.stop_sent);
    pthread_join(t, NULL);
    sigaction(SIGUSR1, &old, NULL);
    signal_platform = NULL;
    funcd_platform_free(p);
    CHECK_INT(rc, 0);
    CHECK(s.served);
    CHECK(returned_after_stop);
    CHECK(signal_seen);
}

TEST(stop_before_run_makes_run_return_at_once)
{
    funcd_platform *p = new_quiet_platform();
    CHECK(p != NULL);
    funcd_platform_stop(p);
    funcd_platform_stop(p); /* any number of times */
    int64_t t0 = e2e_now_ms();
    int rc = funcd_platform_run(p);
    int64_t took = e2e_now_ms() - t0;
    funcd_platform_free(p);
    CHECK_INT(rc, 0);
    CHECK(took < 2000);
}

static void *shutdown_main(void *arg)
{
    funcd_platform_shutdown(arg);
    return NULL;
}

TEST(shutdown_is_idempotent_and_safe_from_two_threads)
{
    funcd_platform *p = new_quiet_platform();
    CHECK(p != NULL);
    if (funcd_platform_start(p) < 0) {
        funcd_platform_free(p);
        FAILF("start: %s", funcd_error_last()->message);
    }
    char addr[128];
    snprintf(addr, sizeof(addr), "%s", funcd_platform_addr(p));
    long before = http_status(addr, "GET", "/healthz", NULL, NULL);
    pthread_t a, b;
    pthread_create(&a, NULL, shutdown_main, p);
    pthread_create(&b, NULL, shutdown_main, p);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    int again = funcd_platform_shutdown(p);
    long after = http_status(addr, "GET", "/healthz", NULL, NULL);
    funcd_platform_stop(p); /* harmless after shutdown */
    funcd_platform_free(p);
    CHECK_INT(before, 200);
    CHECK_INT(again, 0);
    CHECK_INT(after, 0); /* the listener is closed */
}

typedef struct late_shutdown {
    funcd_platform *p;
    counting_store *store;
    atomic_int returned;
    int store_freed_on_return;
} late_shutdown;

static void *late_shutdown_main(void *arg)
{
    late_shutdown *ls = arg;
    funcd_platform_shutdown(ls->p);
    pthread_mutex_lock(&ls->store->lock);
    ls->store_freed_on_return = ls->store->free_done;
    pthread_mutex_unlock(&ls->store->lock);
    atomic_store(&ls->returned, 1);
    return NULL;
}

/*
 * "Idempotent and thread-safe" means a second, concurrent shutdown returns
 * only once the platform is shut down: its caller may free the platform or
 * exit right after. The store's free is held at a gate to keep the first
 * shutdown in the middle of its teardown.
 */
TEST(concurrent_shutdown_returns_only_after_teardown)
{
    counting_store s;
    cs_init(&s, "gated");
    s.gated = 1;
    funcd_platform *p = NULL;
    if (funcd_platform_new(&p, funcd_in_memory(), funcd_with_store(&s.base),
                           funcd_with_logger(quiet_log, FUNCD_LOG_WARN, NULL)) < 0 ||
        funcd_platform_start(p) < 0) {
        s.released = 1;
        funcd_platform_free(p);
        cs_fini(&s);
        FAILF("cannot start: %s", funcd_error_last()->message);
    }
    pthread_t first, second;
    pthread_create(&first, NULL, shutdown_main, p);
    int reached_free = cs_wait_flag(&s, &s.entered_free, 5000);

    late_shutdown ls = {.p = p, .store = &s};
    pthread_create(&second, NULL, late_shutdown_main, &ls);
    int64_t deadline = e2e_now_ms() + 300;
    struct timespec tick = {0, 5 * 1000000L};
    while (!atomic_load(&ls.returned) && e2e_now_ms() < deadline)
        nanosleep(&tick, NULL); /* a correct shutdown does not return here at all */
    pthread_mutex_lock(&s.lock);
    s.released = 1;
    pthread_cond_broadcast(&s.cond);
    pthread_mutex_unlock(&s.lock);
    pthread_join(first, NULL);
    pthread_join(second, NULL);
    funcd_platform_free(p);
    int frees = atomic_load(&s.frees);
    cs_fini(&s);
    CHECK(reached_free);
    CHECK_INT(frees, 1);
    if (!ls.store_freed_on_return)
        FAILF("a concurrent funcd_platform_shutdown returned while the other was still tearing "
              "down (the store was not yet freed)");
}

TEST(run_or_start_after_shutdown_is_ESTATE)
{
    funcd_platform *p = new_quiet_platform();
    CHECK(p != NULL);
    int started = funcd_platform_start(p);
    int run_while_started = funcd_platform_run(p);
    int start_again = funcd_platform_start(p);
    funcd_platform_shutdown(p);
    int run_after = funcd_platform_run(p);
    int run_code = funcd_error_last()->code;
    int start_after = funcd_platform_start(p);
    funcd_platform_free(p);
    CHECK_INT(started, 0);
    CHECK_INT(run_while_started, FUNCD_ESTATE);
    CHECK_INT(start_again, FUNCD_ESTATE);
    CHECK_INT(run_after, FUNCD_ESTATE);
    CHECK_INT(run_code, FUNCD_ESTATE);
    CHECK_INT(start_after, FUNCD_ESTATE);
}

TEST(null_platform_is_harmless)
{
    funcd_platform_free(NULL);
    funcd_platform_stop(NULL);
    CHECK_INT(funcd_platform_shutdown(NULL), 0);
    CHECK_INT(funcd_platform_run(NULL), FUNCD_EINVAL);
    CHECK_INT(funcd_platform_start(NULL), FUNCD_EINVAL);
    CHECK_STR(funcd_platform_addr(NULL), "");
    CHECK_STR(funcd_platform_data_plane_addr(NULL), "");
}

static void *error_on_fresh_thread(void *arg)
{
    const funcd_error *e = funcd_error_last();
    *(int *)arg = e != NULL && e->message != NULL && e->code == 0;
    return NULL;
}

TEST(error_last_is_never_null)
{
    int fresh_ok = 0;
    pthread_t t;
    pthread_create(&t, NULL, error_on_fresh_thread, &fresh_ok);
    pthread_join(t, NULL);
    CHECK(fresh_ok);
    funcd_error_clear();
    CHECK(funcd_error_last() != NULL);
    CHECK(funcd_error_last()->message != NULL);
    CHECK_INT(funcd_error_last()->code, 0);
    funcd_platform *p = NOT_SET;
    funcd_platform_new(&p, funcd_production());
    CHECK(funcd_error_last() != NULL);
    CHECK(funcd_error_last()->code < 0);
    CHECK(funcd_error_last()->message && *funcd_error_last()->message);
    CHECK_STR(funcd_error_name(FUNCD_ENOTFOUND), "FUNCD_ENOTFOUND");
    CHECK_STR(funcd_error_name(FUNCD_EBIND), "FUNCD_EBIND");
    CHECK(funcd_error_name(-12345) != NULL);
    CHECK_STR(funcd_version(), FUNCD_VERSION_STRING);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    e2e_client_global_init();
    RUN_ISOLATED(production_without_a_store_is_EMISSING);
    RUN_ISOLATED(production_with_injected_backends_has_no_default_credential);
    RUN_ISOLATED(address_in_use_is_EBIND);
    RUN_ISOLATED(malformed_address_is_an_error);
    RUN_ISOLATED(operator_settings_of_the_sandbox_are_checked);
    RUN_ISOLATED(backend_of_another_version_is_EVERSION);
    RUN_ISOLATED(backend_without_a_required_method_is_refused);
    RUN_ISOLATED(backend_without_free_is_refused_without_crashing);
    RUN_ISOLATED(blob_without_list_or_del_is_refused_naming_them);
    RUN_ISOLATED(options_structs_of_an_unknown_version_are_EVERSION);
    RUN_ISOLATED(bad_token_options_are_EINVAL);
    RUN_ISOLATED(missing_or_malformed_token_file_is_an_error);
    RUN_ISOLATED(token_file_and_token_options_grant_roles);
    RUN_ISOLATED(without_auth_tokens_drops_the_preset_credential);
    RUN_ISOLATED(later_options_override_and_presets_apply_first);
    RUN_ISOLATED(a_second_store_replaces_the_first);
    RUN_ISOLATED(the_same_backend_twice_is_EINVAL_and_freed_once);
    RUN_ISOLATED(runtime_options_next_to_an_injected_runtime_are_EINVAL);
    RUN_ISOLATED(null_options_are_skipped);
    RUN_ISOLATED(no_preset_or_no_out_is_EINVAL_and_consumes_options);
    RUN_ISOLATED(run_blocks_until_stop_from_another_thread);
    RUN_ISOLATED(stop_from_a_signal_handler);
    RUN_ISOLATED(stop_before_run_makes_run_return_at_once);
    RUN_ISOLATED(shutdown_is_idempotent_and_safe_from_two_threads);
    RUN_ISOLATED(concurrent_shutdown_returns_only_after_teardown);
    RUN_ISOLATED(run_or_start_after_shutdown_is_ESTATE);
    RUN_ISOLATED(null_platform_is_harmless);
    RUN_ISOLATED(limits_out_of_range_are_EINVAL);
    RUN_ISOLATED(error_last_is_never_null);
    e2e_client_global_cleanup();
    return HARNESS_END();
}
