/*
 * Helpers of the function-runner end-to-end tests (test_fnrunner.c): a
 * private platform with a private functions directory, FunctionConfigs made
 * through the control plane, the real gRPC client (node client.js) run as a
 * child process, KRM fixtures compared after parsing, and the worker
 * processes found through /proc.
 *
 * Every case runs in its own forked child with its own platform (FR_TEST +
 * RUN_ISOLATED), so cases also run as separate meson tests in parallel:
 * `test_fnrunner CASE` runs one case.
 */
#ifndef FUNCD_TESTS_FNRUNNER_ENV_H
#define FUNCD_TESTS_FNRUNNER_ENV_H

#include <cjson/cJSON.h>
#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#include "env.h" /* tests/e2e: HTTP client, RUN_ISOLATED, jstr */

/* What fr_up puts in place besides the platform itself. */
enum {
    FR_EXEC_CONFIGS = 1, /* binaryExecutor FunctionConfigs, prefix example.com/fns, tag v1 */
    FR_POD_CONFIGS = 2,  /* podExecutor FunctionConfigs, prefix example.com/pods, tag v1 */
    FR_PREWARM = 4,      /* podExecutor warm-a and warm-b in the store before the start */
    FR_TLS = 8,          /* TLS on every listener (self-signed); the client trusts it. With
                          * it the control plane is not reached: no FunctionConfigs */
};

/* The builtins every platform of these tests registers. */
#define IMG_UPPER "example.com/upper:v1" /* upper-cases ConfigMap data values */
#define IMG_ECHO "example.com/echo:v1"   /* returns its input */
#define IMG_BIG "example.com/big:v1"     /* returns 7 MiB */
#define BIG_OUTPUT (7u << 20)

typedef struct fr {
    funcd_platform *p;
    e2e_http *h;
    char addr[64];      /* the function runner, host:port */
    char fns[PATH_MAX]; /* the functions directory */
    cJSON *keep;        /* client answers, freed by fr_down */
    char tls[PATH_MAX]; /* FR_TLS: the certificate's directory */
    const char *cacert; /* FR_TLS: the certificate client.js trusts */
} fr;

/*
 * Finds node and makes sure @grpc/grpc-js loads, installing the locked
 * packages with `npm ci` into tests/fnrunner/node_modules when they are
 * missing. 0 when the client can run; otherwise prints why and returns -1
 * (the caller skips: exit status 77).
 */
int fr_client_setup(void);

/* Starts a platform with the functions directory (and `what`) in place. */
int fr_up(fr *f, unsigned what);
/* Frees the platform and the functions directory. */
void fr_down(fr *f);

/* POSTs a FunctionConfig `name` in "default" with this spec (a JSON object
 * as a string); 0 when the control plane answered 201. */
int fr_config(fr *f, const char *name, const char *spec_json);

/* Calls the upper builtin got since the platform started. */
unsigned fr_upper_calls(void);

/*
 * Runs `node client.js ADDR OP ARGS...` (NULL-terminated) and waits for it
 * (at most 60 s: then it is killed). Returns the JSON lines it printed as a
 * cJSON array kept until fr_down, or NULL if it failed (printed why).
 */
cJSON *fr_client(fr *f, const char *op, ...) __attribute__((sentinel));
/* The first line of fr_client's answer, or NULL. */
cJSON *fr_call(fr *f, const char *op, ...) __attribute__((sentinel));

/* tests/fnrunner/fixtures/NAME/input.{json,yaml} (the one that exists). */
const char *fr_fixture_input(const char *name);
/*
 * Compares `output` with fixtures/NAME/expected.{json,yaml} after parsing
 * both (JSON or YAML: key order and formatting do not matter). NULL when
 * they match, else what differs (in a static buffer).
 */
const char *fr_fixture_mismatch(const char *name, const char *output);

/* ---- processes ---------------------------------------------------------- */

/*
 * Workers run sandboxed (docs/security.md): each is the funcd-exec shim,
 * the child of a "funcd-sandbox" init that is a child of this process, with
 * its own pid namespace (it calls itself pid 2). So a worker is named by its
 * FUNCD_REPLICA and found by its host pid: a descendant of this process
 * whose environment says FUNCD_REPLICA / FUNCD_FUNCTION (the sandbox init
 * has ours instead). Only descendants count, so the same function names in
 * other tests' platforms running at the same time are never taken for ours.
 */

/* Host pids of the workers (funcd-exec shims) of `function` (a
 * FunctionConfig's spec.image, e.g. "passthrough"); returns how many. */
size_t fr_workers(const char *function, pid_t *out, size_t max);
/* The host pid of the worker whose FUNCD_REPLICA is `replica`, 0 if none. */
pid_t fr_replica_pid(const char *replica);
/* The FUNCD_REPLICA of process `pid` into `out` ("" when it has none);
 * returns `out`. */
const char *fr_replica_of(pid_t pid, char *out, size_t out_len);
/* Every descendant process (worker or the function it runs) whose
 * environment names `function`; describes them into `out`, returns how many. */
size_t fr_function_processes(const char *function, char *out, size_t out_len);
/* The sandbox init (comm "funcd-sandbox") whose child worker `pid` is, or 0
 * when its parent is no such init (an unsandboxed worker). The runtime also
 * keeps blank inits ready for the next start: only this one is the worker's. */
pid_t fr_sandbox_of(pid_t pid);
/* Describes every descendant of this one (for messages); returns how many. */
size_t fr_describe_descendants(char *out, size_t out_len);
/* Any process at all (ours or not) whose command line is exactly `argv0 arg`. */
int fr_process_with_cmdline(const char *argv0, const char *arg);
/* 1 when no process `pid` exists any more (not even a zombie). */
int fr_pid_gone(pid_t pid);
/* Waits until `pid` is gone; 1 when it is. */
int fr_wait_gone(pid_t pid, int timeout_ms);
/* The word after "replica=" in a passthrough log line ("" when none or
 * empty: not a worker); in a thread-local buffer, valid until the next call. */
const char *fr_logged_replica(const cJSON *answer);

/* ---- answers -------------------------------------------------------------- */

int fr_code(const cJSON *answer);         /* "code", -1 when absent */
double fr_ms(const cJSON *answer);        /* "ms" */
const char *fr_details(const cJSON *answer);
const char *fr_output(const cJSON *answer); /* "resource_list" */
const char *fr_log(const cJSON *answer);    /* "log" */

#define FR_TEST(name, what)                                                                        \
    static void name##_body(fr *f);                                                                \
    TEST(name)                                                                                     \
    {                                                                                              \
        fr f_;                                                                                     \
        if (fr_up(&f_, (what)) < 0) {                                                              \
            fr_down(&f_);                                                                          \
            FAILF("cannot start a platform: %s", funcd_error_last()->message);                     \
        }                                                                                          \
        name##_body(&f_);                                                                          \
        fr_down(&f_);                                                                              \
        char left_[512];                                                                           \
        if (fr_describe_descendants(left_, sizeof(left_)))                                         \
            FAILF("processes left behind after the platform was freed: %s", left_);                \
    }                                                                                              \
    static void name##_body(fr *f)

/* An answer with gRPC `code`; says what came instead. */
#define CHECK_GRPC(answer, want)                                                                   \
    do {                                                                                           \
        const cJSON *a_ = (answer);                                                                \
        if (!a_)                                                                                   \
            FAILF("no answer from the client, expected gRPC code %d", (want));                     \
        if (fr_code(a_) != (want))                                                                 \
            FAILF("gRPC code %d (%s), expected %d", fr_code(a_), fr_details(a_), (want));         \
    } while (0)

/* An OK answer whose output matches the fixture's expected output. */
#define CHECK_FIXTURE(answer, fixture)                                                             \
    do {                                                                                           \
        CHECK_GRPC((answer), 0);                                                                   \
        const char *m_ = fr_fixture_mismatch((fixture), fr_output(answer));                        \
        if (m_)                                                                                    \
            FAILF("fixture %s: %s", (fixture), m_);                                                \
    } while (0)

#endif
