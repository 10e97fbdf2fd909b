/*
 * Helpers of the serving end-to-end tests (test_serving_*.c): fixture code
 * copied into private directories, Functions created and waited on through
 * the control plane, requests (alone or in concurrent batches) through the
 * data plane, tar.gz bundles built in memory, and the host processes of
 * (sandboxed) workers, which a test kills or must see gone.
 *
 * Each test case runs in its own forked child with its own platform
 * (SV_TEST + SV_RUN), so cases can also run as separate meson tests in
 * parallel: `test_e2e_serving_X CASE` runs one case.
 */
#ifndef FUNCD_TESTS_E2E_SERVING_COMMON_H
#define FUNCD_TESTS_E2E_SERVING_COMMON_H

#include <stddef.h>
#include <sys/types.h>

#include "env.h"
#include "util/buf.h"

#define FN_PATH(name) NS("default") "/functions/" name
#define DP_PATH(name) "/fn/default/" name

/* Points the platform at the build's shims unless FUNCD_SHIM_DIR says
 * otherwise, ignores SIGPIPE, initializes the HTTP client. */
void sv_init(void);

/* ---- fixtures and processes ------------------------------------------- */

/*
 * Copies tests/e2e/fixtures/`name` into a new private directory (and, for
 * "native", the built fixture worker as `worker`) and stores its path in
 * `out`. The directory is removed by sv_cleanup. 0 on success.
 */
int sv_fixture(const char *name, char *out, size_t out_len);

/* A new empty private directory (removed by sv_cleanup). 0 on success. */
int sv_tempdir(char *out, size_t out_len);

/* 1 when python3 and node are installed; else 0, having said so (the
 * test then returns 77: skipped). */
int sv_have_interpreters(void);

/* A new private directory holding the file `name` with `content` (name
 * NULL: an empty directory); its path into `dir`. 0 on success. */
int sv_code_dir(char *dir, size_t n, const char *name, const char *content);

/* Removes the directories made above. */
void sv_cleanup(void);

/* ---- worker processes, seen from the host ------------------------------ */

/*
 * Workers run sandboxed: in its own pid namespace a worker is pid 2, so the
 * pid it reports says nothing on the host, and it cannot write into a test's
 * directories. A test names a worker by its replica (FUNCD_REPLICA, which
 * every fixture reports) and finds its host process among this process's
 * descendants (a worker is the child of a "funcd-sandbox" init, itself a
 * child of the platform, i.e. of this process): by its environment, or, for a
 * warm generic interpreter whose environment predates its function, by the
 * process name the interpreted fixtures take (their replica, in comm).
 * Descendants only, so the workers of other tests that run at the same time,
 * with the same function names, are never taken for ours.
 */
typedef struct sv_proc {
    pid_t pid;                /* on the host */
    unsigned long long start; /* field 22 of /proc/<pid>/stat: a reused pid is another process */
    char comm[16];
    char replica[64]; /* of a worker found by the functions below, else "" */
} sv_proc;

/* The host process of worker `replica` ("name-3"). 1 when exactly one
 * process is that worker. */
int sv_replica_proc(const char *replica, sv_proc *out);

/* The sandbox init of `worker` (its parent, named "funcd-sandbox"). 1 when
 * it has one, 0 when the worker is not sandboxed or gone. */
int sv_proc_init(const sv_proc *worker, sv_proc *out);

/* The host processes of every live worker of Function `name` (namespace
 * "default"); returns how many there are, stores at most `max`. */
size_t sv_function_procs(const char *name, sv_proc *out, size_t max);

/* The host processes of every live worker of any Function. */
size_t sv_workers(sv_proc *out, size_t max);

/* Every live descendant of this process (workers, sandbox inits, generic
 * spares); returns how many there are, stores at most `max`. */
size_t sv_descendants(sv_proc *out, size_t max);

/* The descendants of this process named "funcd-sandbox": the inits of
 * workers, and while a platform lives, blank inits made ahead of need
 * (docs/adr/0013-sandbox.md), which have no worker. */
size_t sv_sandbox_inits(sv_proc *out, size_t max);

/* 1 when process `p` exists no more (not even as a zombie). */
int sv_proc_gone(const sv_proc *p);

/* Waits until every process is gone; 1 when they are. */
int sv_wait_procs_gone(const sv_proc *p, size_t n, int timeout_ms);

/* Sends `sig` to `p` unless it is gone (its pid reused): 0, or -1 with errno. */
int sv_proc_kill(const sv_proc *p, int sig);

/* Describes the live child processes of this process in `out`; returns
 * how many there are. */
size_t sv_children(char *out, size_t out_len);

/* ---- functions through the control plane ------------------------------ */

/* POSTs a Function `name` in "default" whose spec is the JSON object
 * `spec_fmt` formats to; the answer is in e->r. */
long sv_create(env *e, const char *name, const char *spec_fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The Ready condition of a Function object, or NULL. */
const cJSON *sv_ready_condition(const cJSON *fn);

/* Waits until the controller reported the current generation of Function
 * `name` with Ready of `status` ("True"/"False"); 1 when it did. e->r
 * holds the last GET either way. */
int sv_wait_condition(env *e, const char *name, const char *status, int timeout_ms);
#define sv_wait_ready(e, name, timeout_ms) sv_wait_condition((e), (name), "True", (timeout_ms))

/* status.replicas of Function `name` (GET into e->r); -1 when absent. */
int sv_replicas(env *e, const char *name, int *ready, int *total);

/*
 * Runs the curl program: `curl -sS --max-time 30 ARGS...` (NULL-terminated
 * strings after `in`), its standard input `in` (-1: none), and waits for
 * it, 60 s at most (then it is killed). What it wrote to stdout and stderr
 * is appended to `out` and `err`. Returns its exit status, -1 when it could
 * not run or was killed.
 */
int sv_curl(funcd_buf *out, funcd_buf *err, int in, ...) __attribute__((sentinel));

/* Creates Function `name` on the native fixture worker, with `more` (NULL
 * or JSON members after the source, like "\"edge\":{...}"), and waits
 * (10 s) until it is Ready. 0 when it is; e->r holds the last answer. */
int sv_native(env *e, const char *name, const char *more);

/* How many workers Function `name` has: its worker processes, which must
 * agree with status.replicas.total (none yet: 0); -1 when they do not.
 * e->r is kept. */
int sv_worker_count(env *e, const char *name);

/* Waits until min <= status.replicas.total <= max; 1 when it is. `*seen`
 * (if not NULL) gets the largest total observed. */
int sv_wait_total(env *e, const char *name, int min, int max, int timeout_ms, int *seen);

/* Waits until status.replicas is exactly {ready, total}; 1 when it is. */
int sv_wait_replicas(env *e, const char *name, int ready, int total, int timeout_ms);

/* ---- the data plane ----------------------------------------------------- */

/* One request on e->dp (path e.g. DP_PATH("x") "/y"); answer in e->r. */
long sv_invoke(env *e, const char *method, const char *path, const char *body);

/* The value of header `name` of e->r ("" when absent), in a static buffer
 * of this thread. */
const char *sv_header(const e2e_resp *r, const char *name);

/* Concurrent requests, each on its own connection and thread; they start
 * together. */
typedef struct sv_call {
    const char *method;
    char path[256];
    const char *body;
    e2e_resp r;
    int64_t done_ms; /* e2e_now_ms() when the answer was complete */
} sv_call;

typedef struct sv_batch sv_batch;

/* Starts `n` calls on the data plane at `base`; NULL on failure. */
sv_batch *sv_batch_start(const char *base, sv_call *calls, size_t n);
/* Waits for every call to end and frees the batch (not the answers:
 * e2e_resp_free each calls[i].r). */
void sv_batch_join(sv_batch *b);
/* How many calls ended so far. */
size_t sv_batch_done(sv_batch *b);

/* ---- bundles ------------------------------------------------------------ */

typedef struct sv_entry {
    const char *path;
    const char *content; /* NULL: a directory */
    int mode;
} sv_entry;

/* A tar.gz of the entries, in memory (free() it). 0 on success. */
int sv_targz(const sv_entry *entries, size_t n, void **out, size_t *out_len);

/* POSTs bytes to .../namespaces/default/bundles; the answer is in e->r. */
long sv_upload(env *e, const void *data, size_t len);

/* ---- test cases ----------------------------------------------------------- */

/*
 * Like E2E_TEST, with up to two more platform options (env_up_with), and
 * after the platform is freed: the fixture directories go, and no child
 * process of this one may be left.
 */
#define SV_TEST_WITH(name, opt_a, opt_b)                                                           \
    static void name##_body(env *e);                                                               \
    TEST(name)                                                                                     \
    {                                                                                              \
        env e_;                                                                                    \
        if (env_up_with(&e_, NULL, (opt_a), (opt_b), NULL) < 0) {                                  \
            env_down(&e_);                                                                         \
            sv_cleanup();                                                                          \
            FAILF("cannot start a platform: %s", funcd_error_last()->message);                     \
        }                                                                                          \
        name##_body(&e_);                                                                          \
        env_down(&e_);                                                                             \
        sv_cleanup();                                                                              \
        char left_[512];                                                                           \
        if (sv_children(left_, sizeof(left_)))                                                     \
            FAILF("processes left behind after the platform was freed: %s", left_);                \
    }                                                                                              \
    static void name##_body(env *e)

#define SV_TEST(name) SV_TEST_WITH(name, NULL, NULL)

/* Runs case `name` (isolated) when `only` is NULL or names it. */
#define SV_RUN(only, ran, name)                                                                    \
    do {                                                                                           \
        if (!(only) || strcmp((only), #name) == 0) {                                               \
            RUN_ISOLATED(name);                                                                    \
            (ran)++;                                                                               \
        }                                                                                          \
    } while (0)

/* The last answer (e->r) is a JSON Status with `code` and `reason` and a
 * non-empty message. */
#define CHECK_DP_STATUS(code, reason)                                                              \
    do {                                                                                           \
        const char *p_ = status_problem(&e->r, (code), (reason), NULL);                            \
        if (p_)                                                                                    \
            FAILF("%s; HTTP %ld: %.500s", p_, e->r.status, e->r.body);                             \
    } while (0)

#endif
