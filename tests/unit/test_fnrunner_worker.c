/*
 * The worker evaluator (lib/fnrunner/worker.c) through the evaluator chain:
 * warm workers per podExecutor FunctionConfig, KRM results from the exec
 * shim, eviction and retry of dead workers, the idle TTL, deadlines and
 * concurrency. Real processes: the build's funcd-exec and shell-script
 * images in a temporary functions directory.
 */
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fnrunner/evaluator.h"
#include "fnrunner/worker.h"
#include "funcd/sys/runtime.h"
#include "funcd/sys/store.h"
#include "harness.h"
#include "pool/pool.h"
#include "util/log.h"
#include "util/misc.h"

static const char rl_in[] = "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n";

/* Images: each a directory holding `function`. */
static const struct {
    const char *name, *script;
} images[] = {
    {"echo", "#!/bin/sh\necho \"echo: read the input\" >&2\nexec cat\n"},
    {"fail", "#!/bin/sh\ncat\necho \"fail: the config is wrong\" >&2\nexit 1\n"},
    {"slow", "#!/bin/sh\nexec sleep 5\n"},
    {"noisy", "#!/bin/sh\nhead -c 100000 /dev/zero | tr '\\0' x >&2\necho >&2\n"
              "echo THE-END >&2\nexec cat\n"},
    {"killer", "#!/bin/sh\nkill -9 $PPID\nsleep 1\n"},
    {"short", "#!/bin/sh\nexec cat\n"},
};

typedef struct env {
    char tmp[64], fns[96], state[96], shims[512];
    struct event_base *base;
    funcd_runtime *rt;
    funcd_store *store;
    funcd_evaluator *ev; /* owned by the chain */
    funcd_eval_chain *chain;
    funcd_pool_budget *budget; /* the node's places for workers, or NULL */
} env;

static env E;
static const funcd_logger quiet = {NULL, FUNCD_LOG_WARN, NULL};

static int write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(text, f);
    fclose(f);
    return chmod(path, mode);
}

static int make_images(void)
{
    char path[256];
    if (mkdir(E.fns, 0755) != 0)
        return -1;
    for (size_t i = 0; i < sizeof(images) / sizeof(images[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", E.fns, images[i].name);
        if (mkdir(path, 0755) != 0)
            return -1;
        snprintf(path, sizeof(path), "%s/%s/function", E.fns, images[i].name);
        if (write_file(path, images[i].script, 0755) != 0)
            return -1;
    }
    return 0;
}

/* A FunctionConfig with a podExecutor for `image` ("" extra: none). */
static int put_config(const char *name, const char *image, const char *pod_extra)
{
    char key[256], value[1024];
    snprintf(key, sizeof(key), "/registry/functionconfigs/default/%s", name);
    snprintf(value, sizeof(value),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"FunctionConfig\","
             "\"metadata\":{\"name\":\"%s\",\"namespace\":\"default\"},"
             "\"spec\":{\"image\":\"%s\",\"prefixes\":[\"\",\"example.com/fns\"],"
             "\"podExecutor\":{\"tags\":[\"v1\"]%s%s}}}",
             name, image, pod_extra[0] ? "," : "", pod_extra);
    return E.store->put(E.store, key, value, strlen(value), FUNCD_STORE_ANY, NULL);
}

static int delete_config(const char *name)
{
    char key[256];
    snprintf(key, sizeof(key), "/registry/functionconfigs/default/%s", name);
    return E.store->del(E.store, key, FUNCD_STORE_ANY, NULL);
}

/* Runs the loop in short slices until cond() or the timeout. */
static int run_until(int (*cond)(void *), void *arg, int timeout_ms)
{
    int64_t end = funcd_mono_ms() + timeout_ms;
    while (!cond(arg)) {
        if (funcd_mono_ms() > end)
            return 0;
        struct timeval tv = {0, 2000};
        event_base_loopexit(E.base, &tv);
        event_base_dispatch(E.base);
    }
    return 1;
}

static int live_is(void *want)
{
    return funcd_eval_chain_live_workers(E.chain) == *(unsigned *)want;
}

static int wait_live(unsigned n, int timeout_ms)
{
    return run_until(live_is, &n, timeout_ms);
}

static int setup(void)
{
    memset(&E, 0, sizeof(E));
    snprintf(E.tmp, sizeof(E.tmp), "/tmp/fnw.XXXXXX"); /* short: socket paths */
    /* 0755: a sandboxed worker sees --functions-dir with its host owners. */
    if (!mkdtemp(E.tmp) || chmod(E.tmp, 0755) != 0)
        return -1;
    snprintf(E.fns, sizeof(E.fns), "%s/functions", E.tmp);
    snprintf(E.state, sizeof(E.state), "%s/state", E.tmp);
    const char *root = getenv("FUNCD_BUILD_ROOT");
    snprintf(E.shims, sizeof(E.shims), "%s/shims", root ? root : ".");
    if (mkdir(E.state, 0700) != 0 || make_images() != 0)
        return -1;
    E.base = event_base_new();
    if (!E.base || funcd_runtime_process_new(&E.rt) < 0 || E.rt->attach(E.rt, E.base) < 0 ||
        funcd_store_memory_new(&E.store, 0) < 0)
        return -1;
    return 0;
}

/* The chain over a fresh worker evaluator, started. */
static int start_chain(void)
{
    funcd_eval_config cfg = {.loop = E.base, .store = E.store, .runtime = E.rt,
                             .functions_dir = E.fns, .shim_dir = E.shims, .state_dir = E.state,
                             .config_namespace = "default", .logger = &quiet,
                             .budget = E.budget};
    if (funcd_eval_worker_new(&E.ev, &cfg) < 0)
        return -1;
    funcd_evaluator *evs[] = {E.ev};
    if (funcd_eval_chain_new(&E.chain, evs, 1) < 0)
        return -1;
    return funcd_eval_chain_start(E.chain);
}

static void teardown(void)
{
    if (E.chain) {
        funcd_eval_chain_close(E.chain);
        wait_live(0, 5000);
        funcd_eval_chain_free(E.chain);
    }
    if (E.rt)
        E.rt->free(E.rt);
    if (E.store)
        E.store->free(E.store);
    if (E.base)
        event_base_free(E.base);
    if (E.tmp[0])
        funcd_remove_tree(E.tmp);
    memset(&E, 0, sizeof(E));
}

/* ---- evaluations ------------------------------------------------------ */

typedef struct call {
    funcd_eval_job job;
    int done;
    int64_t took_ms, started;
} call;

static void on_done(funcd_eval_job *job, void *payload)
{
    call *c = payload;
    c->done++;
    c->took_ms = funcd_mono_ms() - c->started;
}

static void call_start(call *c, const char *image, const char *rl, size_t len, int timeout_ms)
{
    funcd_eval_job_init(&c->job);
    c->done = 0;
    c->started = funcd_mono_ms();
    c->job.req.rl = (const uint8_t *)rl;
    c->job.req.rl_len = len;
    c->job.req.image = image;
    c->job.req.deadline_ms = timeout_ms ? funcd_mono_ms() + timeout_ms : 0;
    funcd_eval_chain_run(E.chain, &c->job, on_done, c);
}

static int call_done(void *arg)
{
    return ((call *)arg)->done > 0;
}

/* Evaluates `image` and waits (10 s at most) for the answer. */
static int evaluate(call *c, const char *image, int timeout_ms)
{
    call_start(c, image, rl_in, sizeof(rl_in) - 1, timeout_ms);
    return run_until(call_done, c, 10000);
}

static int first_pid(void)
{
    int pid = 0;
    return funcd_eval_worker_pids(E.ev, &pid, 1) ? pid : 0;
}

/* ---- tests ------------------------------------------------------------ */

TEST(warms_one_worker_per_pod_executor_at_start)
{
    CHECK(setup() == 0);
    CHECK(put_config("echo", "echo", "") == 0);
    CHECK(put_config("fail", "fail", "\"maxParallelExecutions\":3") == 0);
    const char *binary_only = "{\"metadata\":{\"name\":\"bin\"},\"spec\":{\"image\":\"short\","
                              "\"binaryExecutor\":{\"path\":\"short/function\"}}}";
    CHECK(E.store->put(E.store, "/registry/functionconfigs/default/bin", binary_only,
                       strlen(binary_only), FUNCD_STORE_ANY, NULL) == 0);
    CHECK(start_chain() == 0);
    CHECK_INT(funcd_eval_worker_pools(E.ev), 2);
    CHECK(wait_live(2, 5000));
    /* A warm worker is a ready one: its first evaluation starts nothing. */
    int pid = first_pid();
    int pids[4];
    CHECK_INT(funcd_eval_worker_pids(E.ev, pids, 4), 2);
    call c;
    CHECK(evaluate(&c, "echo:v1", 0));
    CHECK_INT(c.job.res.status, FUNCD_EVAL_OK);
    CHECK_INT(funcd_eval_chain_live_workers(E.chain), 2);
    CHECK(pid != 0);
    funcd_eval_job_clear(&c.job);
    teardown();
}

TEST(evaluates_through_a_warm_worker)
{
    CHECK(setup() == 0);
    CHECK(put_config("echo", "echo", "") == 0);
    CHECK(start_chain() == 0);
    CHECK(wait_live(1, 5000));
    call c;
    CHECK(evaluate(&c, "example.com/fns/echo:v1", 0));
    CHECK_INT(c.job.res.status, FUNCD_EVAL_OK);
    CHECK_STR(c.job.res.output.data, rl_in);
    CHECK_STR(c.job.res.log.data, "echo: read the input\n");
    funcd_eval_job_clear(&c.job);
    /* The same worker serves the next one (keep-alive connection, no start). */
    int pid = first_pid();
    CHECK(evaluate(&c, "echo:v1", 0));
    CHECK_INT(c.job.res.status, FUNCD_EVAL_OK);
    CHECK_INT(first_pid(), pid);
    funcd_eval_job_clear(&c.job);
    teardown();
}

TEST(a_non_zero_exit_is_internal_with_stderr)
{
    CHECK(setup() == 0);
    CHECK(put_config("fail", "fail", "") == 0);
    CHECK(start_chain() == 0);
    call c;
    CHECK(evaluate(&c, "fail:v1", 0));
    CHECK_INT(c.job.res.status, FUNCD_EVAL_INTERNAL);
    CHECK_CONTAINS(c.job.res.message, "function fail:v1 exited with status 1");
    CHECK_CONTAINS(c.job.res.message, "fail: the config is wrong");
    CHECK_STR(c.job.res.log.data, "fail: the config is wrong\n");
    CHECK_STR(c.job.res.output.data, rl_in); /* the output may carry results */
    funcd_eval_job_clear(&c.job);
    teardown();
}

TEST(images_without_a_pod_executor_are_not_found)
{
    CHECK(setup() == 0);
    CHECK(put_config("echo", "echo", "") == 0);
    CHECK(put_config("ghost", "ghost", "") == 0); /* no directory for it */
    CHECK(start_chain() == 0);
    call c;
    CHECK(evaluate(&c, "nope:v1", 0));
    CHECK_INT(c.job.res.status, FUNCD_EVAL_NOT_FOUND);
    funcd_eval_job_clear(&c.job);
    CHECK(evaluate(&c, "echo:v2", 0)); /* a tag the podExecutor does not list */
    CHECK_INT(c.job.res.status, FUNCD_EVAL_NOT_FOUND);
    funcd_eval_job_clear(&c.job);
    CHECK(evaluate(&c, "ghost:v1", 0));
    CHECK_INT(c.job.res.status, FUNCD_EVAL_NOT_FOUND);
    CHECK_CONTAINS(c.job.res.message, "ghost/function is not an executable file");
    funcd_eval_job_clear(&c.job);
    teardown();
}

TEST(a_worker_killed_between_calls_is_replaced)
{
    CHECK(setup() == 0);
    CHECK(put_config("echo", "echo", "") == 0);
    CHECK(start_chain() == 0);
    CHECK(wait_live(1, 5000));
    call c;
    CHECK(evaluate(&c, "echo:v1", 0)); /* leaves a keep-alive connection behind */
    funcd_eval_job_clear(&c.job);
    /* Killed, and the next call comes before the loop notices the exit. */
    int pid = first_pid();
    CHECK(pid > 0 && kill(pid, SIGKILL) == 0);
    usleep(50000);
    CHECK(evaluate(&c, "echo:v1", 3000));
    CHECK_INT(c.job.res.status, FUNCD_EVAL_OK);
    CHECK_STR(c.job.res.output.data, rl_in);
    CHECK(c.took_ms < 2000);
    funcd_eval_job_clear(&c.job);
    CHECK(wait_live(1, 5000));
    int pid2 = first_pid();
    CHECK(pid2 > 0 && pid2 != pid);
    /* Killed, and the loop sees the exit first. */
    CHECK(kill(pid2, SIGKILL) == 0);
    CHECK(wait_live(0, 5000));
    CHECK(evaluate(&c, "echo:v1", 3000));
    CHECK_INT(c.job.res.status, FUNCD_EVAL_OK);
    CHECK(c.took_ms < 2000);
    funcd_eval_job_clear(&c.job);
    teardown();
}

TEST(a_worker_that_dies_mid_call_is_retried_once_then_unavailable)
{
    CHECK(setup() == 0);
    CHECK(put_config("killer", "killer", "") == 0);
    CHECK(start_chain() == 0);
    call c;
    CHECK(evaluate(&c, "killer:v1", 5000));
    CHECK_INT(c.job.res.status, FUNCD_EVAL_UNAVAILABLE);
    CHECK_CONTAINS(c.job.res.message, "failed 2 times");
    CHECK(c.took_ms < 4000);
    funcd_eval_job_clear(&c.job);
    teardown();
}

TEST(the_ttl_reaps_idle_workers_and_use_extends_it)
{
    CHECK(setup() == 0);
    CHECK(put_config("echo", "echo", "\"timeToLive\":\"500ms\"") == 0);
    CHECK(start_chain() == 0);
    CHECK(wait_live(1, 5000));
    int pid = first_pid();
    call c;
    for (int i = 0; i < 8; i++) { /* 8 x 100 ms of use: longer than the TTL */
        struct timeval tv = {0, 100000};
        event_base_loopexit(E.base, &tv);
        event_base_dispatch(E.base);
        CHECK(evaluate(&c, "echo:v1", 0));
        CHECK_INT(c.job.res.status, FUNCD_EVAL_OK);
        funcd_eval_job_clear(&c.job);
    }
    CHECK_INT(first_pid(), pid);
    CHECK(wait_live(0, 3000));
    /* Gone, yet the image still evaluates: from zero. */
    CHECK(evaluate(&c, "echo:v1", 0));
    CHECK_INT(c.job.res.status, FUNCD_EVAL_OK);
    funcd_eval_job_clear(&c.job);
    teardown();
}

TEST(twenty_concurrent_evaluations_are_all_answered)
{
    enum { N = 20 };
    CHECK(setup() == 0);
    CHECK(put_config("echo", "echo", "\"maxParallelExecutions\":3,\"preferredMaxQueueLength\":2") ==
          0);
    CHECK(start_chain() == 0);
    static call calls[N];
    static char inputs[N][128];
    for (int i = 0; i < N; i++) {
        int n = snprintf(inputs[i], sizeof(inputs[i]), "%sitems-of-call: %d\n", rl_in, i);
        call_start(&calls[i], "echo:v1", inputs[i], (size_t)n, 10000);
    }
    int all = 0;
    for (int64_t end = funcd_mono_ms() + 10000; !all && funcd_mono_ms() < end;) {
        struct timeval tv = {0, 2000};
        event_base_loopexit(E.base, &tv);
        event_base_dispatch(E.base);
        all = 1;
        for (int i = 0; i < N; i++)
            all &= calls[i].done == 1;
    }
    CHECK(all);
    for (int i = 0; i < N; i++) {
        CHECK_INT(calls[i].job.res.status, FUNCD_EVAL_OK);
        CHECK_STR(calls[i].job.res.output.data, inputs[i]);
        funcd_eval_job_clear(&calls[i].job);
    }
    CHECK(funcd_eval_chain_live_workers(E.chain) <= 3);
    teardown();
}

TEST(a_deadline_kills_the_evaluation_not_the_worker)
{
    CHECK(setup() == 0);
    CHECK(put_config("slow", "slow", "") == 0);
    CHECK(start_chain() == 0);
    CHECK(wait_live(1, 5000));
    int pid = first_pid();
    call c;
    CHECK(evaluate(&c, "slow:v1", 300));
    CHECK_INT(c.job.res.status, FUNCD_EVAL_DEADLINE_EXCEEDED);
    CHECK(c.took_ms >= 250 && c.took_ms < 2000);
    funcd_eval_job_clear(&c.job);
    CHECK_INT(first_pid(), pid);
    CHECK_INT(funcd_eval_chain_live_workers(E.chain), 1);
    teardown();
}

TEST(stderr_keeps_its_last_64_kib)
{
    CHECK(setup() == 0);
    CHECK(put_config("noisy", "noisy", "") == 0);
    CHECK(start_chain() == 0);
    call c;
    CHECK(evaluate(&c, "noisy:v1", 0));
    CHECK_INT(c.job.res.status, FUNCD_EVAL_OK);
    CHECK_INT(c.job.res.log.len, 64 * 1024);
    CHECK(c.job.res.log.len > 8 && strcmp(c.job.res.log.data + c.job.res.log.len - 9,
                                           "\nTHE-END\n") == 0);
    CHECK_STR(c.job.res.output.data, rl_in);
    funcd_eval_job_clear(&c.job);
    teardown();
}

TEST(a_large_resource_list_round_trips)
{
    CHECK(setup() == 0);
    CHECK(put_config("short", "short", "") == 0);
    CHECK(start_chain() == 0);
    size_t len = 3u << 20;
    char *big = malloc(len + 1);
    CHECK(big != NULL);
    for (size_t i = 0; i < len; i++)
        big[i] = (char)('a' + i % 26);
    big[len] = '\0';
    call c;
    call_start(&c, "short:v1", big, len, 10000);
    CHECK(run_until(call_done, &c, 10000));
    CHECK_INT(c.job.res.status, FUNCD_EVAL_OK);
    CHECK_INT(c.job.res.output.len, len);
    CHECK(memcmp(c.job.res.output.data, big, len) == 0);
    funcd_eval_job_clear(&c.job);
    free(big);
    teardown();
}

TEST(an_answer_over_the_message_limit_is_resource_exhausted)
{
    CHECK(setup() == 0);
    CHECK(put_config("short", "short", "") == 0);
    funcd_eval_config cfg = {.loop = E.base, .store = E.store, .runtime = E.rt,
                             .functions_dir = E.fns, .shim_dir = E.shims, .state_dir = E.state,
                             .max_message = 1000, .logger = &quiet};
    CHECK(funcd_eval_worker_new(&E.ev, &cfg) == 0);
    funcd_evaluator *evs[] = {E.ev};
    CHECK(funcd_eval_chain_new(&E.chain, evs, 1) == 0);
    CHECK(funcd_eval_chain_start(E.chain) == 0);
    static char big[4000];
    memset(big, 'x', sizeof(big) - 1);
    call c;
    call_start(&c, "short:v1", big, sizeof(big) - 1, 5000);
    CHECK(run_until(call_done, &c, 10000));
    CHECK_INT(c.job.res.status, FUNCD_EVAL_RESOURCE_EXHAUSTED);
    funcd_eval_job_clear(&c.job);
    teardown();
}

TEST(function_configs_added_and_deleted_while_running)
{
    CHECK(setup() == 0);
    CHECK(start_chain() == 0);
    CHECK_INT(funcd_eval_worker_pools(E.ev), 0);
    CHECK(put_config("echo", "echo", "") == 0); /* the watch warms it */
    CHECK(wait_live(1, 5000));
    CHECK_INT(funcd_eval_worker_pools(E.ev), 1);
    int pid = first_pid();
    /* New limits keep the worker; the shorter TTL then reaps it. */
    CHECK(put_config("echo", "echo", "\"timeToLive\":\"200ms\"") == 0);
    struct timeval tv = {0, 50000};
    event_base_loopexit(E.base, &tv);
    event_base_dispatch(E.base);
    CHECK_INT(first_pid(), pid);
    CHECK(wait_live(0, 3000));
    CHECK_INT(funcd_eval_worker_pools(E.ev), 1);
    CHECK(put_config("echo", "echo", "") == 0);
    call c;
    CHECK(evaluate(&c, "echo:v1", 0));
    CHECK_INT(c.job.res.status, FUNCD_EVAL_OK);
    funcd_eval_job_clear(&c.job);
    CHECK(delete_config("echo") == 0); /* and drains it */
    CHECK(wait_live(0, 5000));
    CHECK_INT(funcd_eval_worker_pools(E.ev), 0);
    CHECK(evaluate(&c, "echo:v1", 0));
    CHECK_INT(c.job.res.status, FUNCD_EVAL_NOT_FOUND);
    funcd_eval_job_clear(&c.job);
    teardown();
}

TEST(a_cancelled_evaluation_frees_its_worker_slot)
{
    CHECK(setup() == 0);
    CHECK(put_config("slow", "slow", "\"preferredMaxQueueLength\":1") == 0);
    CHECK(start_chain() == 0);
    CHECK(wait_live(1, 5000));
    call c;
    call_start(&c, "slow:v1", rl_in, sizeof(rl_in) - 1, 10000);
    struct timeval tv = {0, 100000};
    event_base_loopexit(E.base, &tv);
    event_base_dispatch(E.base);
    CHECK_INT(c.done, 0);
    funcd_eval_job_cancel(&c.job);
    funcd_eval_job_clear(&c.job);
    /* The one slot is free again: a short deadline only fails by the clock. */
    CHECK(evaluate(&c, "slow:v1", 200));
    CHECK_INT(c.job.res.status, FUNCD_EVAL_DEADLINE_EXCEEDED);
    CHECK_CONTAINS(c.job.res.message, "did not finish");
    funcd_eval_job_clear(&c.job);
    teardown();
}

TEST(without_a_functions_dir_nothing_is_found)
{
    CHECK(setup() == 0);
    CHECK(put_config("echo", "echo", "") == 0);
    funcd_eval_config cfg = {.loop = E.base, .store = E.store, .runtime = E.rt,
                             .shim_dir = E.shims, .state_dir = E.state, .logger = &quiet};
    CHECK(funcd_eval_worker_new(&E.ev, &cfg) == 0);
    funcd_evaluator *evs[] = {E.ev};
    CHECK(funcd_eval_chain_new(&E.chain, evs, 1) == 0);
    CHECK(funcd_eval_chain_start(E.chain) == 0);
    CHECK_INT(funcd_eval_chain_live_workers(E.chain), 0);
    call c;
    CHECK(evaluate(&c, "echo:v1", 0));
    CHECK_INT(c.job.res.status, FUNCD_EVAL_NOT_FOUND);
    CHECK_CONTAINS(c.job.res.message, "no functions directory");
    funcd_eval_job_clear(&c.job);
    teardown();
}

/* Warm workers take their places from the node's budget (funcd
 * --max-workers): with one place, two pod executors warm one worker; the
 * place comes back when the runner closes and its worker exited. */
TEST(warm_workers_take_places_from_the_node_budget)
{
    CHECK(setup() == 0);
    funcd_pool_budget *node = funcd_pool_budget_new(1, NULL, "this node", "funcd --max-workers");
    CHECK(node);
    E.budget = node;
    CHECK(put_config("echo", "echo", "") == 0);
    CHECK(put_config("fail", "fail", "") == 0);
    CHECK(start_chain() == 0);
    CHECK_INT(funcd_eval_worker_pools(E.ev), 2);
    CHECK(wait_live(1, 5000));
    CHECK(!wait_live(2, 500)); /* and no second one */
    CHECK_INT(funcd_pool_budget_taken(node), 1);
    teardown();
    CHECK_INT(funcd_pool_budget_taken(node), 0);
    funcd_pool_budget_unref(node);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    evthread_use_pthreads(); /* the store watch pokes the loop, as on the platform */
    RUN(warms_one_worker_per_pod_executor_at_start);
    teardown();
    RUN(evaluates_through_a_warm_worker);
    teardown();
    RUN(a_non_zero_exit_is_internal_with_stderr);
    teardown();
    RUN(images_without_a_pod_executor_are_not_found);
    teardown();
    RUN(a_worker_killed_between_calls_is_replaced);
    teardown();
    RUN(a_worker_that_dies_mid_call_is_retried_once_then_unavailable);
    teardown();
    RUN(the_ttl_reaps_idle_workers_and_use_extends_it);
    teardown();
    RUN(twenty_concurrent_evaluations_are_all_answered);
    teardown();
    RUN(a_deadline_kills_the_evaluation_not_the_worker);
    teardown();
    RUN(stderr_keeps_its_last_64_kib);
    teardown();
    RUN(a_large_resource_list_round_trips);
    teardown();
    RUN(an_answer_over_the_message_limit_is_resource_exhausted);
    teardown();
    RUN(function_configs_added_and_deleted_while_running);
    teardown();
    RUN(a_cancelled_evaluation_frees_its_worker_slot);
    teardown();
    RUN(without_a_functions_dir_nothing_is_found);
    teardown();
    RUN(warm_workers_take_places_from_the_node_budget);
    teardown();
    libevent_global_shutdown();
    return HARNESS_END();
}
