/*
 * Functions whose code comes from a git repository: a local bare repository
 * the test makes with the git CLI. Deploy, push a commit, and see the
 * function redeploy to it: on its own (the poll interval) and when the
 * Function is re-applied with a new spec.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../harness.h"
#include "test_serving_common.h"

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

/* Commits a handler answering `version` and pushes it; the commit id into `out`. */
static int push_version(const char *version, char out[41])
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
    if (sh("cd %s && git add -A && git -c user.name=t -c user.email=t@e commit -qm %s && "
           "git push -q origin HEAD:refs/heads/main 2>/dev/null",
           work, version) != 0)
        return -1;
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "git -C %s rev-parse HEAD", work);
    FILE *p = popen(cmd, "r");
    int ok = p && fgets(out, 41, p) && strlen(out) == 40;
    if (p)
        pclose(p);
    return ok ? 0 : -1;
}

static int make_repo(void)
{
    if (sv_tempdir(tmp, sizeof(tmp)) != 0)
        return -1;
    snprintf(repo, sizeof(repo), "%s/repo.git", tmp);
    snprintf(work, sizeof(work), "%s/work", tmp);
    return sh("git init -q --bare %s && git clone -q %s %s 2>/dev/null && mkdir -p %s/fn", repo,
              repo, work, work);
}

/* Waits until status.source.commit is `commit`; 1 when it is. */
static int wait_commit(env *e, const char *name, const char *commit, int timeout_ms)
{
    int64_t end = e2e_now_ms() + timeout_ms;
    char path[256];
    snprintf(path, sizeof(path), FN_PATH("%s"), name);
    while (e2e_now_ms() < end) {
        if (env_req(e, "GET", path, DEV_TOKEN, NULL) == 200) {
            const char *c = jstr(e->r.json, "status.source.commit");
            const cJSON *ready = sv_ready_condition(e->r.json);
            if (c && strcmp(c, commit) == 0 && ready &&
                strcmp(jstr(ready, "status"), "True") == 0)
                return 1;
        }
        env_sleep_ms(50);
    }
    fprintf(stderr, "  %s never ran commit %s; its last state:\n  %.*s\n", name, commit,
            2000, e->r.body ? e->r.body : "");
    return 0;
}

static int answers(env *e, const char *version)
{
    for (int i = 0; i < 100; i++) {
        if (sv_invoke(e, "GET", DP_PATH("from-git") "/", NULL) == 200 &&
            jstr(e->r.json, "version") && strcmp(jstr(e->r.json, "version"), version) == 0)
            return 1;
        env_sleep_ms(50);
    }
    return 0;
}

/* The Ready condition of `name` once its fetch failed (it is Fetching first). */
static const cJSON *fetch_failed(env *e, const char *name)
{
    const cJSON *ready = NULL;
    for (int i = 0; i < 200; i++) {
        if (!sv_wait_condition(e, name, "False", 10000))
            return NULL;
        ready = sv_ready_condition(e->r.json);
        if (strcmp(jstr(ready, "reason"), "Fetching") != 0)
            return ready;
        env_sleep_ms(50);
    }
    return NULL;
}

#define SPEC "{\"runtime\":\"native\",\"mode\":\"exec\",\"handler\":\"handler.sh\"," \
             "\"source\":{\"git\":{\"url\":\"%s\",\"ref\":\"main\",\"path\":\"fn\"}}%s}"

TEST(git)
{
    if (system("git --version >/dev/null 2>&1") != 0) {
        printf("  skipped: git is not installed\n");
        return;
    }
    env e_, *e = &e_;
    char c1[41], c2[41], c3[41];
    CHECK(make_repo() == 0);
    CHECK(push_version("v1", c1) == 0);
    if (harness_failed_now) {
        sv_cleanup();
        return;
    }
    /* Polls the ref every 300 ms. */
    if (env_up_with(e, NULL, funcd_with_source_refresh(0, 300), NULL, NULL) < 0) {
        env_down(e);
        sv_cleanup();
        FAILF("cannot start a platform: %s", funcd_error_last()->message);
    }
    CHECK_INT(sv_create(e, "from-git", SPEC, repo, ""), 201);
    CHECK(wait_commit(e, "from-git", c1, 20000));
    CHECK(answers(e, "v1"));

    /* A new commit on the ref: the poll finds it and the function redeploys. */
    CHECK(push_version("v2", c2) == 0);
    CHECK(wait_commit(e, "from-git", c2, 10000));
    CHECK(answers(e, "v2"));

    /* Re-applied with a new spec: the ref is resolved again at once. */
    CHECK(push_version("v3", c3) == 0);
    char body[1024];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"from-git\"},\"spec\":" SPEC "}",
             repo, ",\"env\":{\"REDEPLOY\":\"1\"}");
    /* A repository on the host: the operator's (admin's) to name. */
    CHECK_INT(env_req(e, "PUT", FN_PATH("from-git"), ADMIN_TOKEN, body), 200);
    CHECK(wait_commit(e, "from-git", c3, 3000));
    CHECK(answers(e, "v3"));

    /* An unknown ref is a clear error in the status. */
    snprintf(body, sizeof(body),
             "{\"runtime\":\"native\",\"mode\":\"exec\",\"handler\":\"handler.sh\","
             "\"source\":{\"git\":{\"url\":\"%s\",\"ref\":\"no-such-branch\"}}}",
             repo);
    CHECK_INT(sv_create(e, "bad-ref", "%s", body), 201);
    const cJSON *ready = fetch_failed(e, "bad-ref");
    CHECK(ready != NULL);
    CHECK_STR(jstr(ready, "reason"), "GitFetchFailed");
    CHECK(jstr(ready, "message") && strstr(jstr(ready, "message"), "no-such-branch"));

    /* A URL at a loopback address is refused before anything connects, and the status names
     * the host, not what answered there (review17-artifacts M-3: a port scanner before). */
    CHECK_INT(sv_create(e, "scan",
                        "{\"runtime\":\"native\",\"mode\":\"exec\",\"handler\":\"handler.sh\","
                        "\"source\":{\"git\":{\"url\":\"http://localhost:1/x.git\"}}}"),
              201);
    ready = fetch_failed(e, "scan");
    CHECK(ready != NULL);
    CHECK_STR(jstr(ready, "reason"), "GitFetchFailed");
    CHECK(jstr(ready, "message") && strstr(jstr(ready, "message"), "host localhost is refused"));
    CHECK(jstr(ready, "message") && !strstr(jstr(ready, "message"), "Connection refused"));
    env_down(e);
    sv_cleanup();
    char left[512];
    if (sv_children(left, sizeof(left)))
        FAILF("processes left behind after the platform was freed: %s", left);
}

int main(int argc, char **argv)
{
    sv_init();
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    if (!only || strcmp(only, "git") == 0) {
        RUN_ISOLATED(git);
        ran++;
    }
    if (!ran) {
        fprintf(stderr, "no case %s\n", only);
        return 2;
    }
    return HARNESS_END();
}
