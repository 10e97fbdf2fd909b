/* lib/fnrunner: the evaluator chain driven directly on an event_base (no
 * gRPC): builtins, exec (FunctionConfigs in a memory store, shell scripts in
 * a temp functions dir), fall-through, cancellation, and the protobuf
 * messages. */
#include <event2/event.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#include "api/api.h"
#include "evaluator.pb-c.h"
#include "fnrunner/evaluator.h"
#include "platform/options.h"
#include "objects/objects.h"
#include "util/misc.h"

static char fn_dir[128];
static struct event_base *loop;
static funcd_store *store;

static const char deployment_rl[] =
    "apiVersion: config.kubernetes.io/v1\n"
    "kind: ResourceList\n"
    "items:\n"
    "- apiVersion: apps/v1\n"
    "  kind: Deployment\n"
    "  metadata:\n"
    "    name: web\n"
    "    labels: {app: web}\n"
    "  spec:\n"
    "    replicas: 2\n"
    "- apiVersion: v1\n"
    "  kind: Namespace\n"
    "  metadata:\n"
    "    name: old\n"
    "- apiVersion: v1\n"
    "  kind: Service\n"
    "  metadata:\n"
    "    name: web\n"
    "    namespace: old\n"
    "functionConfig:\n"
    "  apiVersion: v1\n"
    "  kind: ConfigMap\n"
    "  metadata:\n"
    "    name: conf\n"
    "  data:\n"
    "    namespace: prod\n";

/* ---- plumbing ------------------------------------------------------------ */

static void write_script(const char *name, const char *body)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", fn_dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        abort();
    fprintf(f, "#!/bin/sh\n%s", body);
    fclose(f);
    chmod(path, 0755);
}

static void put_config(const char *name, const char *json)
{
    cJSON *obj = cJSON_Parse(json), *stored = NULL;
    if (!obj || funcd_objects_create(store, funcd_kind_by_kind("FunctionConfig"), "default", obj,
                                      &stored) < 0)
        abort();
    cJSON_Delete(obj);
    cJSON_Delete(stored);
}

static funcd_eval_config config(size_t max_message)
{
    return (funcd_eval_config){.loop = loop, .store = store, .functions_dir = fn_dir,
                               .max_message = max_message};
}

static void on_done(funcd_eval_job *job, void *payload)
{
    (*(int *)payload)++;
}

/* Runs `job` through `ch` and waits (at most 10 s) for it to finish. */
static int run_job(funcd_eval_chain *ch, funcd_eval_job *job)
{
    int done = 0;
    int64_t give_up = funcd_mono_ms() + 10000;
    funcd_eval_chain_run(ch, job, on_done, &done);
    while (!done && funcd_mono_ms() < give_up)
        event_base_loop(loop, EVLOOP_ONCE);
    return done;
}

/* One evaluation through the default chain; the job is the caller's to clear. */
static int eval(funcd_eval_job *job, const char *image, const char *exec_path, const char *rl,
                size_t max_message)
{
    funcd_eval_config cfg = config(max_message);
    funcd_eval_chain *ch = NULL;
    if (funcd_eval_chain_new_default(&ch, &cfg) < 0)
        return 0;
    funcd_eval_job_init(job);
    job->req = (funcd_eval_request){(const uint8_t *)rl, strlen(rl), image, exec_path, 0};
    int done = run_job(ch, job);
    funcd_eval_chain_free(ch);
    return done;
}

static const cJSON *item(const cJSON *rl, int i)
{
    return cJSON_GetArrayItem(cJSON_GetObjectItem(rl, "items"), i);
}

static const char *item_ns(const cJSON *rl, int i)
{
    const cJSON *ns = cJSON_GetObjectItem(cJSON_GetObjectItem(item(rl, i), "metadata"), "namespace");
    return cJSON_IsString(ns) ? ns->valuestring : NULL;
}

/* ---- builtins ------------------------------------------------------------ */

TEST(builtin_set_namespace_on_resource_list)
{
    funcd_eval_job job;
    CHECK(eval(&job, "gcr.io/kpt-fn/set-namespace:v0.4.1", NULL, deployment_rl, 0));
    cJSON *out = NULL;
    funcd_api_error err;
    int status = job.res.status, rc = funcd_api_decode(job.res.output.data, job.res.output.len,
                                                       &out, &err);
    funcd_eval_job_clear(&job);
    CHECK_INT(status, FUNCD_EVAL_OK);
    CHECK_INT(rc, 0);
    int n = cJSON_GetArraySize(cJSON_GetObjectItem(out, "items"));
    const char *dep = item_ns(out, 0), *ns = item_ns(out, 1), *svc = item_ns(out, 2);
    const cJSON *replicas = cJSON_GetObjectItem(cJSON_GetObjectItem(item(out, 0), "spec"),
                                                "replicas");
    int replica_count = cJSON_IsNumber(replicas) ? replicas->valueint : -1;
    char *dep_ns = funcd_strdup(dep), *svc_ns = funcd_strdup(svc);
    int ns_untouched = ns == NULL;
    cJSON_Delete(out);
    CHECK_INT(n, 3);
    CHECK_STR(dep_ns, "prod");
    CHECK_STR(svc_ns, "prod");
    free(dep_ns);
    free(svc_ns);
    CHECK(ns_untouched); /* Namespace is cluster-scoped */
    CHECK_INT(replica_count, 2);
}

TEST(builtin_set_namespace_yaml_order_and_json_input)
{
    static const char json_rl[] =
        "{\"apiVersion\":\"config.kubernetes.io/v1alpha1\",\"kind\":\"ResourceList\","
        "\"items\":[{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"a\","
        "\"labels\":{\"x\":\"y\"}}},{\"apiVersion\":\"rbac.authorization.k8s.io/v1\","
        "\"kind\":\"ClusterRole\",\"metadata\":{\"name\":\"r\"}}],"
        "\"functionConfig\":{\"apiVersion\":\"fn.kpt.dev/v1alpha1\",\"kind\":\"SetNamespace\","
        "\"metadata\":{\"name\":\"c\"},\"namespace\":\"team-a\"}}";
    funcd_eval_job job;
    CHECK(eval(&job, "set-namespace", NULL, json_rl, 0));
    char *yaml = funcd_strdup(job.res.output.data);
    int status = job.res.status;
    funcd_eval_job_clear(&job);
    CHECK_INT(status, FUNCD_EVAL_OK);
    CHECK_CONTAINS(yaml, "apiVersion: config.kubernetes.io/v1alpha1");
    /* the new field lands right after metadata.name, as kpt writes it */
    CHECK_CONTAINS(yaml, "name: a\n      namespace: team-a\n      labels:");
    int role_untouched = strstr(yaml, "name: r\n      namespace") == NULL;
    free(yaml);
    CHECK(role_untouched);
}

TEST(builtin_set_namespace_without_config_fails_with_results)
{
    static const char rl[] = "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\n"
                             "items: []\n";
    funcd_eval_job job;
    CHECK(eval(&job, "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4", NULL, rl, 0));
    int status = job.res.status;
    char msg[sizeof(job.res.message)];
    snprintf(msg, sizeof(msg), "%s", job.res.message);
    int has_results = job.res.output.len && strstr(job.res.output.data, "severity: error");
    funcd_eval_job_clear(&job);
    CHECK_INT(status, FUNCD_EVAL_INTERNAL);
    CHECK_CONTAINS(msg, "builtin function ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4 "
                        "failed");
    CHECK_CONTAINS(msg, "; results: set-namespace: functionConfig must set data.namespace");
    CHECK(has_results);
}

static int host_calls;

static int host_builtin(const char *in, size_t in_len, char **out, size_t *out_len, char **log,
                        size_t *log_len, void *payload)
{
    host_calls++;
    *out = strdup((const char *)payload);
    *out_len = strlen(*out);
    *log = strdup("host says hi\n");
    *log_len = strlen(*log);
    return 0;
}

TEST(host_builtin_comes_first_and_matches_wildcards)
{
    funcd_builtin_reg regs[] = {{(char *)"example.com/fns/echo:*", host_builtin, "one"},
                                {(char *)"set-namespace", host_builtin, "two"}};
    funcd_eval_config cfg = config(0);
    cfg.builtins = regs;
    cfg.n_builtins = 2;
    funcd_eval_chain *ch = NULL;
    CHECK_INT(funcd_eval_chain_new_default(&ch, &cfg), 0);
    const char *images[] = {"example.com/fns/echo:v9", "set-namespace"};
    const char *want[] = {"one", "two"};
    host_calls = 0;
    for (int i = 0; i < 2; i++) {
        funcd_eval_job job;
        funcd_eval_job_init(&job);
        job.req = (funcd_eval_request){(const uint8_t *)"x", 1, images[i], NULL, 0};
        int done = run_job(ch, &job), same = job.res.output.data &&
                                             strcmp(job.res.output.data, want[i]) == 0;
        int status = job.res.status, log_ok = job.res.log.len == 13;
        funcd_eval_job_clear(&job);
        if (!done || status != 0 || !same || !log_ok) {
            funcd_eval_chain_free(ch);
            FAILF("image %s: done %d status %d", images[i], done, status);
        }
    }
    funcd_eval_chain_free(ch);
    CHECK_INT(host_calls, 2);
}

/* ---- exec ---------------------------------------------------------------- */

TEST(function_config_matching)
{
    cJSON *spec = cJSON_Parse("{\"image\":\"echo\",\"prefixes\":[\"\",\"example.com/fns/\"],"
                              "\"binaryExecutor\":{\"tags\":[\"v1\",\"v2\"],\"path\":\"echo.sh\"}}");
    int m[7] = {
        funcd_eval_config_matches(spec, "binaryExecutor", "echo:v1"),
        funcd_eval_config_matches(spec, "binaryExecutor", "example.com/fns/echo:v2"),
        funcd_eval_config_matches(spec, "binaryExecutor", "example.com/fns/echo:v3"),
        funcd_eval_config_matches(spec, "binaryExecutor", "echo"),
        funcd_eval_config_matches(spec, "binaryExecutor", "other.io/echo:v1"),
        funcd_eval_config_matches(spec, "binaryExecutor", "echoes:v1"),
        funcd_eval_config_matches(spec, "podExecutor", "echo:v1"),
    };
    cJSON_Delete(spec);
    CHECK(m[0] && m[1]);
    CHECK(!m[2] && !m[3] && !m[4] && !m[5] && !m[6]);
}

TEST(exec_ok_passes_stdout_and_stderr)
{
    funcd_eval_job job;
    CHECK(eval(&job, "example.com/fns/echo:v1", NULL, deployment_rl, 0));
    int status = job.res.status, same = job.res.output.len == strlen(deployment_rl) &&
                                        memcmp(job.res.output.data, deployment_rl,
                                               job.res.output.len) == 0;
    char log[64];
    snprintf(log, sizeof(log), "%s", job.res.log.data ? job.res.log.data : "");
    funcd_eval_job_clear(&job);
    CHECK_INT(status, FUNCD_EVAL_OK);
    CHECK(same);
    CHECK_STR(log, "echo ran\n");
}

TEST(exec_nonzero_exit_is_internal_with_stderr_and_results)
{
    funcd_eval_job job;
    CHECK(eval(&job, "fail:v1", NULL, deployment_rl, 0));
    int status = job.res.status, has_output = job.res.output.len > 0;
    char msg[sizeof(job.res.message)];
    snprintf(msg, sizeof(msg), "%s", job.res.message);
    funcd_eval_job_clear(&job);
    CHECK_INT(status, FUNCD_EVAL_INTERNAL);
    CHECK_STR(msg, "function fail:v1 exited with status 3: cannot do it\nreally; "
                   "results: replicas must be odd");
    CHECK(has_output);
}

TEST(exec_deadline_kills_the_function)
{
    funcd_eval_config cfg = config(0);
    funcd_eval_chain *ch = NULL;
    CHECK_INT(funcd_eval_chain_new_default(&ch, &cfg), 0);
    funcd_eval_job job;
    funcd_eval_job_init(&job);
    int64_t t0 = funcd_mono_ms();
    job.req = (funcd_eval_request){(const uint8_t *)"x", 1, NULL, "slow.sh", t0 + 300};
    int done = run_job(ch, &job);
    int64_t took = funcd_mono_ms() - t0;
    int status = job.res.status;
    funcd_eval_job_clear(&job);
    funcd_eval_chain_free(ch);
    CHECK(done);
    CHECK_INT(status, FUNCD_EVAL_DEADLINE_EXCEEDED);
    CHECK(took >= 250 && took < 3000);
}

/* An exec function runs with the environment a warm worker gets (PATH,
 * LANG), not funcd's: the daemon's own (a token, a database password, an
 * S3 master secret file's path) is not the function's to read. */
TEST(exec_runs_with_its_own_environment)
{
    setenv("FUNCD_TEST_SECRET", "do-not-pass", 1);
    funcd_eval_job job;
    CHECK(eval(&job, NULL, "env.sh", "x", 0));
    unsetenv("FUNCD_TEST_SECRET");
    int status = job.res.status;
    char log[4096];
    snprintf(log, sizeof(log), "%s", job.res.log.data ? job.res.log.data : "");
    funcd_eval_job_clear(&job);
    CHECK_INT(status, FUNCD_EVAL_OK);
    CHECK(!strstr(log, "do-not-pass"));
    CHECK_CONTAINS(log, "PATH=/usr/local/bin:/usr/bin:/bin\n");
    CHECK_CONTAINS(log, "LANG=C.UTF-8\n");
}

TEST(exec_output_over_the_limit)
{
    funcd_eval_job job;
    CHECK(eval(&job, NULL, "big.sh", "x", 4096));
    int status = job.res.status;
    funcd_eval_job_clear(&job);
    CHECK_INT(status, FUNCD_EVAL_RESOURCE_EXHAUSTED);
}

TEST(exec_large_input_read_or_ignored)
{
    size_t n = 3 * 1024 * 1024;
    char *big = malloc(n + 1);
    CHECK(big);
    memset(big, 'k', n);
    big[n] = '\0';
    funcd_eval_job job;
    int done = eval(&job, NULL, "echo.sh", big, 0);
    int status = job.res.status, same = job.res.output.len == n &&
                                        memcmp(job.res.output.data, big, n) == 0;
    funcd_eval_job_clear(&job);
    int done2 = eval(&job, NULL, "ignore.sh", big, 0);
    int status2 = job.res.status, out_ok = job.res.output.data &&
                                           strcmp(job.res.output.data, "ignored\n") == 0;
    funcd_eval_job_clear(&job);
    free(big);
    CHECK(done && done2);
    CHECK_INT(status, FUNCD_EVAL_OK);
    CHECK(same);
    CHECK_INT(status2, FUNCD_EVAL_OK);
    CHECK(out_ok);
}

TEST(exec_path_relative_absolute_and_refused)
{
    char abs[256];
    snprintf(abs, sizeof(abs), "%s/echo.sh", fn_dir);
    const char *paths[] = {"echo.sh", abs, "../echo.sh", "/bin/sh", "sub/../echo.sh", "nope.sh"};
    const int want[] = {FUNCD_EVAL_OK, FUNCD_EVAL_OK, FUNCD_EVAL_INVALID_ARGUMENT,
                        FUNCD_EVAL_INVALID_ARGUMENT, FUNCD_EVAL_INVALID_ARGUMENT,
                        FUNCD_EVAL_NOT_FOUND};
    for (int i = 0; i < 6; i++) {
        funcd_eval_job job;
        int done = eval(&job, NULL, paths[i], "in", 0), status = job.res.status;
        funcd_eval_job_clear(&job);
        if (!done || status != want[i])
            FAILF("exec_path %s: status %d, expected %d", paths[i], status, want[i]);
    }
    /* exec_path wins over a builtin of the same image */
    funcd_eval_job job;
    int done = eval(&job, "set-namespace", "echo.sh", deployment_rl, 0);
    int status = job.res.status, same = job.res.output.data &&
                                        strcmp(job.res.output.data, deployment_rl) == 0;
    funcd_eval_job_clear(&job);
    CHECK(done);
    CHECK_INT(status, FUNCD_EVAL_OK);
    CHECK(same);
}

TEST(unknown_image_falls_through_to_not_found)
{
    funcd_eval_job job;
    CHECK(eval(&job, "example.com/fns/echo:v7", NULL, "x", 0));
    int status = job.res.status;
    char msg[sizeof(job.res.message)];
    snprintf(msg, sizeof(msg), "%s", job.res.message);
    funcd_eval_job_clear(&job);
    CHECK_INT(status, FUNCD_EVAL_NOT_FOUND);
    CHECK_CONTAINS(msg, "no evaluator has function \"example.com/fns/echo:v7\"");
    CHECK_CONTAINS(msg, "builtin: no builtin named");
    CHECK_CONTAINS(msg, "exec: no FunctionConfig in namespace default has a binaryExecutor");
}

TEST(cancel_kills_a_running_function)
{
    funcd_eval_config cfg = config(0);
    funcd_eval_chain *ch = NULL;
    CHECK_INT(funcd_eval_chain_new_default(&ch, &cfg), 0);
    funcd_eval_job job;
    funcd_eval_job_init(&job);
    job.req = (funcd_eval_request){(const uint8_t *)"x", 1, NULL, "slow.sh", 0};
    int done = 0;
    funcd_eval_chain_run(ch, &job, on_done, &done);
    int had_cancel = job.cancel != NULL;
    funcd_eval_job_cancel(&job);
    event_base_loop(loop, EVLOOP_NONBLOCK);
    funcd_eval_job_clear(&job);
    funcd_eval_chain_free(ch);
    CHECK(had_cancel);
    CHECK_INT(done, 0);
}

/* ---- the chain with counting fakes --------------------------------------- */

typedef struct fake_eval {
    funcd_evaluator base;
    int status;
    int calls;
} fake_eval;

static void fake_evaluate(funcd_evaluator *ev, funcd_eval_job *job)
{
    fake_eval *f = (fake_eval *)ev;
    f->calls++;
    funcd_eval_finishf(job, f->status, "fake %d said %d", f->calls, f->status);
}

TEST(chain_stops_at_the_first_answer_other_than_not_found)
{
    fake_eval fakes[3] = {
        {{"one", fake_evaluate, NULL, NULL, NULL, NULL}, FUNCD_EVAL_NOT_FOUND, 0},
        {{"two", fake_evaluate, NULL, NULL, NULL, NULL}, FUNCD_EVAL_INTERNAL, 0},
        {{"three", fake_evaluate, NULL, NULL, NULL, NULL}, FUNCD_EVAL_OK, 0},
    };
    funcd_evaluator *evs[3] = {&fakes[0].base, &fakes[1].base, &fakes[2].base};
    funcd_eval_chain *ch = NULL;
    CHECK_INT(funcd_eval_chain_new(&ch, evs, 3), 0);
    funcd_eval_job job;
    funcd_eval_job_init(&job);
    job.req.image = "img";
    int done = run_job(ch, &job), status = job.res.status;
    funcd_eval_job_clear(&job);
    funcd_eval_chain_free(ch);
    CHECK(done);
    CHECK_INT(status, FUNCD_EVAL_INTERNAL);
    CHECK_INT(fakes[0].calls, 1);
    CHECK_INT(fakes[1].calls, 1);
    CHECK_INT(fakes[2].calls, 0);
}

TEST(chain_all_not_found_lists_what_was_tried)
{
    fake_eval fakes[2] = {
        {{"one", fake_evaluate, NULL, NULL, NULL, NULL}, FUNCD_EVAL_NOT_FOUND, 0},
        {{"two", fake_evaluate, NULL, NULL, NULL, NULL}, FUNCD_EVAL_NOT_FOUND, 0},
    };
    funcd_evaluator *evs[2] = {&fakes[0].base, &fakes[1].base};
    funcd_eval_chain *ch = NULL;
    CHECK_INT(funcd_eval_chain_new(&ch, evs, 2), 0);
    funcd_eval_job job;
    funcd_eval_job_init(&job);
    job.req.image = "img";
    run_job(ch, &job);
    int status = job.res.status;
    char msg[sizeof(job.res.message)];
    snprintf(msg, sizeof(msg), "%s", job.res.message);
    funcd_eval_job_clear(&job);
    funcd_eval_chain_free(ch);
    CHECK_INT(status, FUNCD_EVAL_NOT_FOUND);
    CHECK_STR(msg, "no evaluator has function \"img\" (one: fake 1 said 5; two: fake 1 said 5)");
}

/* ---- protobuf -------------------------------------------------------------- */

TEST(protobuf_request_and_response_round_trip)
{
    Evaluator__EvaluateFunctionRequest req = EVALUATOR__EVALUATE_FUNCTION_REQUEST__INIT;
    req.resource_list.data = (uint8_t *)deployment_rl;
    req.resource_list.len = strlen(deployment_rl);
    req.image = "gcr.io/kpt-fn/set-namespace:v0.4.1";
    req.exec_path = "bin/fn";
    uint8_t buf[4096];
    size_t n = evaluator__evaluate_function_request__pack(&req, buf);
    CHECK(n == evaluator__evaluate_function_request__get_packed_size(&req));
    CHECK_INT(buf[0], 0x0a); /* field 1, bytes: Porch's resource_list */
    Evaluator__EvaluateFunctionRequest *back =
        evaluator__evaluate_function_request__unpack(NULL, n, buf);
    CHECK(back);
    int same = back->resource_list.len == strlen(deployment_rl) &&
               memcmp(back->resource_list.data, deployment_rl, back->resource_list.len) == 0 &&
               strcmp(back->image, req.image) == 0 && strcmp(back->exec_path, "bin/fn") == 0;
    evaluator__evaluate_function_request__free_unpacked(back, NULL);
    CHECK(same);

    /* Porch's request (fields 1 and 2 only): exec_path reads as "". */
    static const uint8_t porch[] = {0x0a, 0x02, 'h', 'i', 0x12, 0x03, 'a', ':', 'b'};
    back = evaluator__evaluate_function_request__unpack(NULL, sizeof(porch), porch);
    CHECK(back);
    int porch_ok = back->resource_list.len == 2 && strcmp(back->image, "a:b") == 0 &&
                   back->exec_path && back->exec_path[0] == '\0';
    evaluator__evaluate_function_request__free_unpacked(back, NULL);
    CHECK(porch_ok);

    Evaluator__EvaluateFunctionResponse resp = EVALUATOR__EVALUATE_FUNCTION_RESPONSE__INIT;
    resp.resource_list.data = (uint8_t *)"out";
    resp.resource_list.len = 3;
    resp.log.data = (uint8_t *)"log line\n";
    resp.log.len = 9;
    n = evaluator__evaluate_function_response__pack(&resp, buf);
    Evaluator__EvaluateFunctionResponse *rb =
        evaluator__evaluate_function_response__unpack(NULL, n, buf);
    CHECK(rb);
    int resp_ok = rb->resource_list.len == 3 && memcmp(rb->resource_list.data, "out", 3) == 0 &&
                  rb->log.len == 9 && memcmp(rb->log.data, "log line\n", 9) == 0;
    evaluator__evaluate_function_response__free_unpacked(rb, NULL);
    CHECK(resp_ok);

    static const uint8_t garbage[] = {0x0a, 0x7f, 0x01};
    CHECK(evaluator__evaluate_function_request__unpack(NULL, sizeof(garbage), garbage) == NULL);
}

/* ---- setup ------------------------------------------------------------------ */

static void setup(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(fn_dir, sizeof(fn_dir), "%s/funcd-fnrunner-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(fn_dir))
        abort();
    write_script("echo.sh", "cat\necho 'echo ran' >&2\n");
    write_script("fail.sh", "cat >/dev/null\n"
                            "printf 'apiVersion: config.kubernetes.io/v1\\nkind: ResourceList\\n"
                            "items: []\\nresults:\\n- message: replicas must be odd\\n"
                            "  severity: error\\n- message: just saying\\n  severity: info\\n"
                            "- message: no owner\\n'\n"
                            "printf 'cannot do it\\nreally\\n' >&2\nexit 3\n");
    write_script("slow.sh", "sleep 30\n");
    write_script("ignore.sh", "echo ignored\n");
    write_script("env.sh", "cat\nenv >&2\n");
    write_script("big.sh", "head -c 100000 /dev/zero\n");
    loop = event_base_new();
    if (!loop || funcd_store_memory_new(&store, 0) < 0)
        abort();
    put_config("echo", "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"FunctionConfig\","
                       "\"metadata\":{\"name\":\"echo\"},\"spec\":{\"image\":\"echo\","
                       "\"prefixes\":[\"\",\"example.com/fns\"],"
                       "\"binaryExecutor\":{\"tags\":[\"v1\"],\"path\":\"echo.sh\"}}}");
    put_config("fail", "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"FunctionConfig\","
                       "\"metadata\":{\"name\":\"fail\"},\"spec\":{\"image\":\"fail\","
                       "\"binaryExecutor\":{\"path\":\"fail.sh\"}}}");
}

int main(void)
{
    setup();
    RUN(builtin_set_namespace_on_resource_list);
    RUN(builtin_set_namespace_yaml_order_and_json_input);
    RUN(builtin_set_namespace_without_config_fails_with_results);
    RUN(host_builtin_comes_first_and_matches_wildcards);
    RUN(function_config_matching);
    RUN(exec_ok_passes_stdout_and_stderr);
    RUN(exec_nonzero_exit_is_internal_with_stderr_and_results);
    RUN(exec_deadline_kills_the_function);
    RUN(exec_runs_with_its_own_environment);
    RUN(exec_output_over_the_limit);
    RUN(exec_large_input_read_or_ignored);
    RUN(exec_path_relative_absolute_and_refused);
    RUN(unknown_image_falls_through_to_not_found);
    RUN(cancel_kills_a_running_function);
    RUN(chain_stops_at_the_first_answer_other_than_not_found);
    RUN(chain_all_not_found_lists_what_was_tried);
    RUN(protobuf_request_and_response_round_trip);
    store->free(store);
    event_base_free(loop);
    funcd_remove_tree(fn_dir);
    return HARNESS_END();
}
