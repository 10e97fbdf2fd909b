/*
 * One private platform per end-to-end test (funcd_in_memory on ephemeral
 * loopback ports) and helpers to talk to it over HTTP.
 *
 * A test written with E2E_TEST gets `env *e`: a started platform with the
 * tokens below, a control-plane client and a data-plane client. CHECK
 * failures return from the test body only, so env_down always runs and the
 * test leaves no thread, socket or allocation behind.
 */
#ifndef FUNCD_TESTS_E2E_ENV_H
#define FUNCD_TESTS_E2E_ENV_H

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client.h"
#include "funcd/funcd.h"

#define API "/apis/funcd.dev/v1"
#define NS(ns) API "/namespaces/" ns

#define DEV_TOKEN "funcd-dev-token" /* developer of "default" (the preset's) */
#define ADMIN_TOKEN "e2e-admin"     /* admin */
#define VIEWER_TOKEN "e2e-viewer"   /* viewer of "default" */
#define TEAM_B_TOKEN "e2e-team-b"   /* developer of "team-b" */

/* A bundle nobody uploaded: a source any writer may name (a host path is
 * the operator's: docs/security.md), which fails as ArtifactFailed. */
#define NO_SUCH_BUNDLE "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

/* Bodies. `name` and `handler` are string literals. */
#define FUNCTION_JSON(name, handler)                                                               \
    "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":\"" name        \
    "\"},\"spec\":{\"runtime\":\"python3\",\"handler\":\"" handler "\",\"source\":{\"bundle\":"    \
    "\"" NO_SUCH_BUNDLE "\"}}}"
#define FUNCTIONCONFIG_JSON(name, image)                                                           \
    "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"FunctionConfig\",\"metadata\":{\"name\":\"" name  \
    "\"},\"spec\":{\"image\":\"" image "\",\"binaryExecutor\":{\"path\":\"" image "\"}}}"

typedef struct env {
    funcd_platform *p;
    e2e_http *h;  /* control plane */
    e2e_http *dp; /* data plane */
    e2e_resp r;   /* the last answer of REQ / DP */
    e2e_watch *watches[16];
    size_t nwatches;
    cJSON *keep; /* values that live until env_down */
    char base[160];
    char dp_base[160];
} env;

/* Starts a platform; `store` (NULL: the preset's) is handed to it. */
int env_up(env *e, funcd_store *store);
/* The same with up to three more options (NULL: none), applied last. */
int env_up_with(env *e, funcd_store *store, funcd_option *a, funcd_option *b, funcd_option *c);
/* Closes watches, frees the platform (if the test did not) and clients. */
void env_down(env *e);

long env_req(env *e, const char *method, const char *path, const char *token, const char *body);
long env_dp(env *e, const char *method, const char *path);

/* Opens a watch on the control plane; closed by env_down. */
e2e_watch *env_watch(env *e, const char *path, const char *token);
/* The next watch line as JSON (kept until env_down), or NULL. */
cJSON *env_event(env *e, e2e_watch *w, int timeout_ms);
cJSON *env_keep(env *e, cJSON *value);

/* Calls `pred` every few milliseconds until it returns 1 or time runs out. */
int env_poll(env *e, int timeout_ms, int (*pred)(env *e, void *arg), void *arg);
void env_sleep_ms(int ms);

/*
 * Waits (3 s at most) until the controller has written the status of the
 * Function at `path` for its current generation, so that a following write
 * does not race the controller's. (A write without resourceVersion should
 * never lose that race, but that is what put_without_resource_version_* tests;
 * other tests settle first so they test one thing.) 1 when settled.
 */
int env_settle(env *e, const char *path);

/* JSON lookups by dotted path ("metadata.name"); NULL / NAN when absent. */
const cJSON *jget(const cJSON *j, const char *dotted);
const char *jstr(const cJSON *j, const char *dotted);
double jnum(const cJSON *j, const char *dotted);
/* metadata.resourceVersion as a number (0 if absent or not decimal). */
uint64_t jrv(const cJSON *obj);

/* NULL if `r` is a JSON Status with this code and reason (and `field`, when
 * not NULL) and a non-empty message; else what is wrong. */
const char *status_problem(const e2e_resp *r, long code, const char *reason, const char *field);

/* A memory store with a tiny watch history, to make revisions expire. */
funcd_store *tiny_history_store(size_t history);

/* ---- test macros (need tests/harness.h included first) ------------------- */

#define E2E_TEST_WITH(name, make_store)                                                            \
    static void name##_body(env *e);                                                               \
    TEST(name)                                                                                     \
    {                                                                                              \
        env e_;                                                                                    \
        if (env_up(&e_, (make_store)) < 0) {                                                       \
            env_down(&e_);                                                                         \
            FAILF("cannot start a platform: %s", funcd_error_last()->message);                     \
        }                                                                                          \
        name##_body(&e_);                                                                          \
        env_down(&e_);                                                                             \
    }                                                                                              \
    static void name##_body(env *e)

#define E2E_TEST(name) E2E_TEST_WITH(name, NULL)

/*
 * Runs one test in a forked child, so a crash or an abort in the library
 * fails that test and the rest still run; the child's exit also runs
 * LeakSanitizer over what that test left behind. Call only while no other
 * thread runs (between tests).
 */
#define RUN_ISOLATED(name)                                                                         \
    do {                                                                                           \
        fflush(NULL);                                                                              \
        pid_t pid_ = fork();                                                                       \
        if (pid_ == 0) {                                                                           \
            harness_failed_now = 0;                                                                \
            name();                                                                                \
            e2e_client_global_cleanup();                                                           \
            exit(harness_failed_now ? 1 : 0);                                                      \
        }                                                                                          \
        int st_ = 0;                                                                               \
        if (pid_ > 0 && waitpid(pid_, &st_, 0) == pid_ && WIFEXITED(st_) &&                        \
            WEXITSTATUS(st_) == 0) {                                                               \
            harness_passed++;                                                                      \
            fprintf(stderr, "ok   %s\n", #name);                                                   \
        } else {                                                                                   \
            harness_failed++;                                                                      \
            fprintf(stderr, "FAIL %s (%s %d)\n", #name,                                            \
                    WIFSIGNALED(st_) ? "killed by signal" : "exit status",                         \
                    WIFSIGNALED(st_) ? WTERMSIG(st_) : WEXITSTATUS(st_));                          \
        }                                                                                          \
    } while (0)

#define REQ(method, path, token, body) env_req(e, (method), (path), (token), (body))

/* The last answer has `code`; prints the body otherwise. */
#define CHECK_CODE(code)                                                                           \
    do {                                                                                           \
        if (e->r.status != (code))                                                                 \
            FAILF("HTTP %ld, expected %d: %.500s", e->r.status, (code), e->r.body);                \
    } while (0)

/* The last answer is a JSON Status error as described. */
#define CHECK_STATUS(code, reason, field)                                                          \
    do {                                                                                           \
        const char *p_ = status_problem(&e->r, (code), (reason), (field));                         \
        if (p_)                                                                                    \
            FAILF("%s; HTTP %ld: %.500s", p_, e->r.status, e->r.body);                             \
    } while (0)

/* A watch event of `type` for object `name`. */
#define CHECK_EVENT(ev, type, name)                                                                \
    do {                                                                                           \
        const cJSON *ev_ = (ev);                                                                   \
        if (!ev_)                                                                                  \
            FAILF("no watch event, expected %s %s", (type), (name));                               \
        CHECK_STR(jstr(ev_, "type"), (type));                                                      \
        CHECK_STR(jstr(ev_, "object.metadata.name"), (name));                                     \
    } while (0)

#endif
