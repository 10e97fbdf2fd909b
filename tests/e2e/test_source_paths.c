/*
 * "No tenant reads the host" (issue 11): host paths in a Function's source
 * are an operator feature. A developer's spec.source.path or host-local git
 * URL is refused with 403 unless it resolves under a source root the
 * operator allows (funcd_with_source_root); admin may name any. A handler
 * names a file inside the code directory (400 otherwise), whoever asks.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../harness.h"
#include "env.h"
#include "util/misc.h"

static char tmp_top[256];

/* A fresh temp dir holding root/fn (a function's directory), root/link-out
 * (a symlink to /etc) and out/ (beside the root). */
static int make_tree(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(tmp_top, sizeof(tmp_top), "%s/funcd-srcpaths-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(tmp_top))
        return -1;
    char p[512];
    static const char *const dirs[] = {"root", "root/fn", "out"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(p, sizeof(p), "%s/%s", tmp_top, dirs[i]);
        if (mkdir(p, 0755) != 0)
            return -1;
    }
    snprintf(p, sizeof(p), "%s/root/link-out", tmp_top);
    if (symlink("/etc", p) != 0)
        return -1;
    snprintf(p, sizeof(p), "%s/root/link-in", tmp_top);
    return symlink("fn", p);
}

static long create_fn(env *e, const char *token, const char *name, const char *source_json,
                      const char *handler)
{
    char body[2048];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"%s\"},\"spec\":{\"runtime\":\"native\",\"mode\":\"exec\",\"handler\":\"%s\","
             "\"source\":%s}}",
             name, handler, source_json);
    return env_req(e, "POST", NS("default") "/functions", token, body);
}

static long create_path_fn(env *e, const char *token, const char *name, const char *path)
{
    char src[1200];
    snprintf(src, sizeof(src), "{\"path\":\"%s\"}", path);
    return create_fn(e, token, name, src, "hello");
}

/* The last answer refused with 403 naming `field`, and the message says why. */
#define CHECK_FORBIDDEN(field)                                                                     \
    do {                                                                                           \
        CHECK_STATUS(403, "Forbidden", (field));                                                   \
        CHECK_CONTAINS(e->r.body, "source root");                                                  \
    } while (0)

E2E_TEST(developer_host_paths_are_forbidden)
{
    char link[512], dir[512];
    snprintf(dir, sizeof(dir), "%s/root/fn", tmp_top);
    snprintf(link, sizeof(link), "%s/root/link-out", tmp_top);
    const char *paths[] = {dir, "/", "/proc/1/root", "//etc", "/etc/.", link, "/tmp"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        char name[16];
        snprintf(name, sizeof(name), "p%zu", i);
        create_path_fn(e, DEV_TOKEN, name, paths[i]);
        fprintf(stderr, "    %s -> %ld\n", paths[i], e->r.status);
        CHECK_FORBIDDEN("spec.source.path");
        CHECK_CONTAINS(e->r.body, "developer");
    }
    /* A replace is admitted the same way. */
    char body[1024];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"put\"},\"spec\":{\"runtime\":\"native\",\"handler\":\"hello\",\"source\":"
             "{\"path\":\"/etc\"}}}");
    REQ("PUT", NS("default") "/functions/put", DEV_TOKEN, body);
    CHECK_FORBIDDEN("spec.source.path");
    /* Nothing was stored. */
    REQ("GET", NS("default") "/functions", ADMIN_TOKEN, NULL);
    CHECK_CODE(200);
    CHECK_INT(cJSON_GetArraySize(jget(e->r.json, "items")), 0);
    /* A source that is not a host path is not the admission's business. */
    create_fn(e, DEV_TOKEN, "bundled",
              "{\"bundle\":\"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"}",
              "hello");
    CHECK_CODE(201);
}

E2E_TEST(the_reported_exploit_is_refused)
{
    /* As reported: a developer reading the daemon's files through a handler
     * outside the artifact. Refused for the handler first (400), and for the
     * path once the handler is fixed (403). */
    REQ("POST", NS("default") "/functions", DEV_TOKEN,
        "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":\"x\"},"
        "\"spec\":{\"runtime\":\"native\",\"mode\":\"exec\",\"handler\":\"../../bin/cat\","
        "\"args\":[\"/tmp/x/tokens\"],\"source\":{\"path\":\"/tmp\"}}}");
    CHECK_STATUS(400, "BadRequest", "spec.handler");
    REQ("POST", NS("default") "/functions", DEV_TOKEN,
        "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":\"x\"},"
        "\"spec\":{\"runtime\":\"native\",\"mode\":\"exec\",\"handler\":\"cat\","
        "\"args\":[\"/tmp/x/tokens\"],\"source\":{\"path\":\"/tmp\"}}}");
    CHECK_FORBIDDEN("spec.source.path");
}

E2E_TEST(handlers_stay_inside_the_code_directory)
{
    const char *bad[] = {"../../bin/cat", "/bin/cat", "bin/../../cat", ".."};
    const char *tokens[] = {DEV_TOKEN, ADMIN_TOKEN};
    for (size_t t = 0; t < 2; t++)
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            create_fn(e, tokens[t], "h",
                      "{\"bundle\":\"sha256:0123456789abcdef0123456789abcdef0123456789abcdef"
                      "0123456789abcdef\"}",
                      bad[i]);
            fprintf(stderr, "    handler %s -> %ld\n", bad[i], e->r.status);
            CHECK_STATUS(400, "BadRequest", "spec.handler");
        }
}

E2E_TEST(developer_host_git_urls_are_forbidden)
{
    const char *urls[] = {"/some/path", "file:///srv/repo.git", "/tmp"};
    for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]); i++) {
        char src[512];
        snprintf(src, sizeof(src), "{\"git\":{\"url\":\"%s\"}}", urls[i]);
        create_fn(e, DEV_TOKEN, "g", src, "hello");
        fprintf(stderr, "    git url %s -> %ld\n", urls[i], e->r.status);
        CHECK_FORBIDDEN("spec.source.git.url");
    }
    /* Network transports are every writer's. */
    create_fn(e, DEV_TOKEN, "net", "{\"git\":{\"url\":\"https://example.invalid/r.git\"}}",
              "hello");
    CHECK_CODE(201);
    create_fn(e, DEV_TOKEN, "net2", "{\"git\":{\"url\":\"git://example.invalid/r.git\"}}",
              "hello");
    CHECK_CODE(201);
    /* Admin may clone from the host. */
    create_fn(e, ADMIN_TOKEN, "local", "{\"git\":{\"url\":\"file:///srv/repo.git\"}}", "hello");
    CHECK_CODE(201);
}

/* spec.network: host is the operator's to allow and an admin's to ask for
 * (review17: once funcd ran with --allow-host-network, every developer's
 * workers could share the node's network and reach its loopback). */
E2E_TEST(developer_host_network_is_forbidden)
{
    const char *body = "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":"
                       "{\"name\":\"net\"},\"spec\":{\"runtime\":\"native\",\"handler\":"
                       "\"hello\",\"network\":\"host\",\"source\":{\"bundle\":\"sha256:"
                       "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"}}}";
    REQ("POST", NS("default") "/functions", DEV_TOKEN, body);
    CHECK_STATUS(403, "Forbidden", "spec.network");
    CHECK_CONTAINS(e->r.body, "only an admin");
    REQ("PUT", NS("default") "/functions/net", DEV_TOKEN, body);
    CHECK_STATUS(403, "Forbidden", "spec.network");
    REQ("POST", NS("default") "/functions", ADMIN_TOKEN, body);
    CHECK_CODE(201);
}

E2E_TEST(admin_may_name_any_host_path)
{
    const char *paths[] = {"/", "/etc/.", "//etc", "/srv/does/not/exist/yet"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        char name[16];
        snprintf(name, sizeof(name), "a%zu", i);
        create_path_fn(e, ADMIN_TOKEN, name, paths[i]);
        CHECK_CODE(201);
    }
}

/* The Ready condition's reason, once the controller has written one. */
static int has_ready_reason(env *e, void *arg)
{
    if (env_req(e, "GET", NS("default") "/functions/escape", ADMIN_TOKEN, NULL) != 200)
        return 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, jget(e->r.json, "status.conditions"))
        if (jstr(c, "type") && strcmp(jstr(c, "type"), "Ready") == 0 && jstr(c, "reason"))
            return strcmp(jstr(c, "reason"), (const char *)arg) == 0;
    return 0;
}

E2E_TEST(a_handler_symlink_out_of_the_artifact_is_refused_at_run_time)
{
    /* Admin may name the directory; its handler is a symlink to a host
     * program, which the worker must not be started through. */
    char dir[512], link[600];
    snprintf(dir, sizeof(dir), "%s/out", tmp_top);
    snprintf(link, sizeof(link), "%s/hello", dir);
    unlink(link);
    CHECK_INT(symlink("/bin/cat", link), 0);
    char src[700];
    snprintf(src, sizeof(src), "{\"path\":\"%s\"}", dir);
    create_fn(e, ADMIN_TOKEN, "escape", src, "hello");
    CHECK_CODE(201);
    static char bad_spec[] = "BadSpec";
    if (!env_poll(e, 10000, has_ready_reason, bad_spec))
        FAILF("the function is not refused with BadSpec: %.600s", e->r.body);
    CHECK_CONTAINS(e->r.body, "leads outside the code directory");
}

/* A platform whose operator allows `tmp_top/root`. */
TEST(a_source_root_admits_paths_under_it)
{
    char root[512], p[700];
    snprintf(root, sizeof(root), "%s/root", tmp_top);
    env e_, *e = &e_;
    if (env_up_with(e, NULL, funcd_with_source_root(root), NULL, NULL) < 0) {
        env_down(e);
        FAILF("cannot start a platform: %s", funcd_error_last()->message);
    }
    snprintf(p, sizeof(p), "%s/fn", root);
    long ok1 = create_path_fn(e, DEV_TOKEN, "under", p);
    snprintf(p, sizeof(p), "%s//./fn/", root);
    long ok2 = create_path_fn(e, DEV_TOKEN, "spelled", p);
    snprintf(p, sizeof(p), "%s/link-in", root);
    long ok3 = create_path_fn(e, DEV_TOKEN, "linked", p);
    snprintf(p, sizeof(p), "%s/link-out", root); /* a symlink out of the root */
    create_path_fn(e, DEV_TOKEN, "out1", p);
    const char *p1 = status_problem(&e->r, 403, "Forbidden", "spec.source.path");
    snprintf(p, sizeof(p), "%s/../out", root); /* ".." out of it: refused by validation */
    create_path_fn(e, DEV_TOKEN, "out2", p);
    const char *p2 = status_problem(&e->r, 400, "BadRequest", "spec.source.path");
    snprintf(p, sizeof(p), "%s/out", tmp_top); /* beside it */
    create_path_fn(e, DEV_TOKEN, "out3", p);
    const char *p3 = status_problem(&e->r, 403, "Forbidden", "spec.source.path");
    snprintf(p, sizeof(p), "%s/fn/missing", root); /* under it, but not there */
    create_path_fn(e, DEV_TOKEN, "out4", p);
    const char *p4 = status_problem(&e->r, 403, "Forbidden", "spec.source.path");
    char src[800];
    snprintf(src, sizeof(src), "{\"git\":{\"url\":\"file://%s/fn\"}}", root);
    long ok4 = create_fn(e, DEV_TOKEN, "git-under", src, "hello");
    snprintf(src, sizeof(src), "{\"git\":{\"url\":\"%s/out\"}}", tmp_top);
    create_fn(e, DEV_TOKEN, "git-out", src, "hello");
    const char *p5 = status_problem(&e->r, 403, "Forbidden", "spec.source.git.url");
    env_down(e);
    CHECK_INT(ok1, 201);
    CHECK_INT(ok2, 201);
    CHECK_INT(ok3, 201);
    CHECK_INT(ok4, 201);
    if (p1 || p2 || p3 || p4 || p5)
        FAILF("refusals: symlink out %s; '..' %s; beside %s; missing %s; git %s", p1 ? p1 : "ok",
              p2 ? p2 : "ok", p3 ? p3 : "ok", p4 ? p4 : "ok", p5 ? p5 : "ok");
}

TEST(a_source_root_must_exist)
{
    funcd_platform *p = NULL;
    int rc = funcd_platform_new(&p, funcd_in_memory(),
                                funcd_with_source_root("/nonexistent/funcd/root"));
    CHECK(p == NULL);
    CHECK_INT(rc, FUNCD_EINVAL);
    CHECK_CONTAINS(funcd_error_last()->message, "/nonexistent/funcd/root");
}

int main(void)
{
    if (make_tree() != 0) {
        fprintf(stderr, "cannot make %s\n", tmp_top);
        return 1;
    }
    e2e_client_global_init();
    RUN_ISOLATED(developer_host_paths_are_forbidden);
    RUN_ISOLATED(the_reported_exploit_is_refused);
    RUN_ISOLATED(handlers_stay_inside_the_code_directory);
    RUN_ISOLATED(developer_host_git_urls_are_forbidden);
    RUN_ISOLATED(admin_may_name_any_host_path);
    RUN_ISOLATED(developer_host_network_is_forbidden);
    RUN_ISOLATED(a_handler_symlink_out_of_the_artifact_is_refused_at_run_time);
    RUN_ISOLATED(a_source_root_admits_paths_under_it);
    RUN_ISOLATED(a_source_root_must_exist);
    e2e_client_global_cleanup();
    funcd_remove_tree(tmp_top);
    return HARNESS_END();
}
