/*
 * Workflow runs (docs/workflows.md):
 *   workflow run NAME [-d JSON|@FILE|@-] [--wait] [--timeout DURATION]
 *   get workflowruns [ID]                     (from cmd_get.c)
 *   describe workflowrun ID                   (from cmd_describe.c)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "output.h"
#include "util/buf.h"
#include "util/misc.h"

#define RUNS_PATH "/apis/funcd.dev/v1/namespaces/%s/workflowruns"

int ctl_is_workflowruns(const char *word)
{
    return !strcmp(word, "workflowruns") || !strcmp(word, "workflowrun") || !strcmp(word, "wfr");
}

static int finished(const char *phase)
{
    return phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed") ||
                     !strcmp(phase, "Cancelled"));
}

/* "1.2s", "3m4s": between two RFC 3339 times, or until now; "" without a start. */
static void duration(const cJSON *obj, char *out, size_t len)
{
    int64_t start, end;
    const char *s = ctl_get_string(obj, "startTime"), *e = ctl_get_string(obj, "completionTime");
    out[0] = '\0';
    if (!s || ctl_parse_time(s, &start) != 0)
        return;
    if (!e || ctl_parse_time(e, &end) != 0)
        end = funcd_now_ms();
    int64_t ms = end > start ? end - start : 0;
    if (ms < 60000)
        snprintf(out, len, "%llds", (long long)(ms / 1000));
    else
        snprintf(out, len, "%lldm%llds", (long long)(ms / 60000), (long long)(ms % 60000 / 1000));
}

/* GET one run; *out the JSON. 0, or an exit status after the message. */
static int fetch_run(ctl_ctx *ctx, ctl_client *client, const char *id, cJSON **out)
{
    ctl_response resp = CTL_RESPONSE_INIT;
    char path[600], what[200];
    char *escaped = ctl_escape(client, id);
    if (!escaped)
        return ctl_fail("out of memory");
    snprintf(path, sizeof(path), RUNS_PATH "/%s", ctx->ns, escaped);
    free(escaped);
    snprintf(what, sizeof(what), "workflowrun/%s", id);
    int rc = 0;
    *out = NULL;
    if (ctl_request(client, "GET", path, NULL, &resp) != 0)
        rc = CTL_EXIT_ERROR;
    else if (resp.code != 200)
        rc = ctl_report_status(client, &resp, what, ctx->ns);
    else if (!(*out = ctl_response_json(client, &resp)))
        rc = CTL_EXIT_ERROR;
    ctl_response_free(&resp);
    return rc;
}

/* ---- get workflowruns ----------------------------------------------------------- */

static int run_row(ctl_row *r, const cJSON *run, int64_t now)
{
    char age[32], took[32];
    ctl_age(ctl_get_string(run, "metadata.creationTimestamp"), now, age, sizeof(age));
    duration(ctl_get_path(run, "status"), took, sizeof(took));
    r->n = 0;
    const char *phase = ctl_get_string(run, "status.phase");
    if (ctl_row_push(r, ctl_get_string(run, "metadata.name")) != 0 ||
        ctl_row_push(r, ctl_get_string(run, "spec.workflow")) != 0 ||
        ctl_row_push(r, phase ? phase : "") != 0 || ctl_row_push(r, took) != 0 ||
        ctl_row_push(r, age) != 0)
        return -1;
    return 0;
}

static int print_runs(const cJSON *items)
{
    static const char *const names[] = {"NAME", "WORKFLOW", "PHASE", "DURATION", "AGE"};
    int64_t now = funcd_now_ms();
    ctl_table table = CTL_TABLE_INIT;
    ctl_row row = {0};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < 5; i++)
        rc = ctl_row_push(&row, names[i]);
    if (rc == 0)
        rc = ctl_table_add(&table, &row);
    const cJSON *run;
    cJSON_ArrayForEach(run, items)
    {
        if (rc == 0 && (rc = run_row(&row, run, now)) == 0)
            rc = ctl_table_add(&table, &row);
    }
    ctl_row_free(&row);
    if (rc == 0)
        ctl_table_print(&table, "", stdout);
    ctl_table_free(&table);
    return rc == 0 ? 0 : ctl_fail("out of memory");
}

int ctl_get_workflowruns(ctl_ctx *ctx, const char *id)
{
    ctl_client *client = ctl_ctx_client(ctx);
    if (!client)
        return CTL_EXIT_ERROR;
    cJSON *json = NULL;
    int rc;
    if (id) {
        rc = fetch_run(ctx, client, id, &json);
    } else {
        ctl_response resp = CTL_RESPONSE_INIT;
        char path[300];
        snprintf(path, sizeof(path), RUNS_PATH, ctx->ns);
        rc = 0;
        if (ctl_request(client, "GET", path, NULL, &resp) != 0)
            rc = CTL_EXIT_ERROR;
        else if (resp.code != 200)
            rc = ctl_report_status(client, &resp, "listing workflow runs", ctx->ns);
        else if (!(json = ctl_response_json(client, &resp)))
            rc = CTL_EXIT_ERROR;
        ctl_response_free(&resp);
    }
    if (rc != 0)
        return rc;
    cJSON *items = id ? NULL : cJSON_GetObjectItemCaseSensitive(json, "items");
    if (ctx->output == CTL_OUT_NAME) {
        const cJSON *run;
        if (id)
            printf("workflowrun/%s\n", ctl_get_string(json, "metadata.name"));
        cJSON_ArrayForEach(run, items)
            printf("workflowrun/%s\n", ctl_get_string(run, "metadata.name"));
    } else if (ctx->output == CTL_OUT_JSON) {
        ctl_print_json(json, stdout);
    } else if (ctx->output == CTL_OUT_YAML) {
        rc = ctl_print_yaml(json, stdout) == 0 ? 0 : CTL_EXIT_ERROR;
    } else if (id) {
        cJSON *one = cJSON_CreateArray();
        rc = one && cJSON_AddItemReferenceToArray(one, json) ? print_runs(one)
                                                             : ctl_fail("out of memory");
        cJSON_Delete(one);
    } else if (cJSON_GetArraySize(items) == 0) {
        fprintf(stderr, "No workflow runs found in namespace %s.\n", ctx->ns);
    } else {
        rc = print_runs(items);
    }
    cJSON_Delete(json);
    return rc;
}

/* ---- describe workflowrun ------------------------------------------------------ */

static void print_step(const cJSON *spec_step, const cJSON *st, size_t width)
{
    const char *name = ctl_get_string(spec_step, "name");
    const char *phase = ctl_get_string(st, "phase");
    const cJSON *attempts = ctl_get_path(st, "attempts");
    const cJSON *items = ctl_get_path(st, "items");
    char took[32], tries[32], after[512] = "";
    duration(st, took, sizeof(took));
    int n = cJSON_IsNumber(attempts) ? (int)attempts->valuedouble : 0;
    snprintf(tries, sizeof(tries), "%d attempt%s", n, n == 1 ? "" : "s");
    size_t used = 0;
    const cJSON *deps = ctl_get_path(spec_step, "dependsOn"), *d;
    cJSON_ArrayForEach(d, deps)
    {
        if (used < sizeof(after) && cJSON_IsString(d))
            used += (size_t)snprintf(after + used, sizeof(after) - used, "%s%s",
                                     used ? ", " : "dependsOn ", d->valuestring);
    }
    if (ctl_get_path(spec_step, "forEach") && used < sizeof(after))
        used += (size_t)snprintf(after + used, sizeof(after) - used, "%s%d items",
                                 used ? "; " : "", cJSON_GetArraySize(items));
    printf("  %-*s  %-9s  %-10s  %-6s%s%s%s\n", (int)width, name ? name : "",
           phase ? phase : "Pending", tries, took, used ? "  (" : "", after, used ? ")" : "");
    const char *msg = ctl_get_string(st, "message");
    if (msg && phase && strcmp(phase, "Succeeded") != 0)
        printf("  %-*s  %s\n", (int)width, "", msg);
}

int ctl_describe_workflowrun(ctl_ctx *ctx, const char *id)
{
    ctl_client *client = ctl_ctx_client(ctx);
    if (!client)
        return CTL_EXIT_ERROR;
    cJSON *run = NULL;
    int rc = fetch_run(ctx, client, id, &run);
    if (rc != 0)
        return rc;
    if (ctx->output == CTL_OUT_JSON || ctx->output == CTL_OUT_YAML) {
        if (ctx->output == CTL_OUT_JSON)
            ctl_print_json(run, stdout);
        else
            rc = ctl_print_yaml(run, stdout) == 0 ? 0 : CTL_EXIT_ERROR;
        cJSON_Delete(run);
        return rc;
    }
    char took[32];
    const cJSON *status = ctl_get_path(run, "status");
    duration(status, took, sizeof(took));
    const char *phase = ctl_get_string(run, "status.phase");
    printf("Run:        %s\n", ctl_get_string(run, "metadata.name"));
    printf("Namespace:  %s\n", ctl_get_string(run, "metadata.namespace"));
    printf("Workflow:   %s\n", ctl_get_string(run, "spec.workflow"));
    printf("Phase:      %s%s%s%s\n", phase ? phase : "", took[0] ? " (" : "", took,
           took[0] ? ")" : "");
    if (cJSON_IsTrue(ctl_get_path(status, "cancelRequested")))
        printf("            (a cancel is requested)\n");
    if (ctl_get_string(run, "status.message"))
        printf("Message:    %s\n", ctl_get_string(run, "status.message"));
    printf("Created:    %s\n", ctl_get_string(run, "metadata.creationTimestamp"));
    printf("Steps:\n");
    const cJSON *steps = ctl_get_path(run, "spec.workflowSpec.steps");
    const cJSON *states = ctl_get_path(status, "steps");
    size_t width = 4;
    const cJSON *s;
    cJSON_ArrayForEach(s, steps)
    {
        const char *name = ctl_get_string(s, "name");
        if (name && strlen(name) > width)
            width = strlen(name);
    }
    cJSON_ArrayForEach(s, steps)
    {
        const char *name = ctl_get_string(s, "name");
        print_step(s, name ? cJSON_GetObjectItemCaseSensitive(states, name) : NULL, width);
    }
    const cJSON *out = ctl_get_path(status, "output");
    if (out && phase && !strcmp(phase, "Succeeded")) {
        char *text = cJSON_PrintUnformatted(out);
        printf("Output:     %.2000s%s\n", text ? text : "", text && strlen(text) > 2000 ? "..." : "");
        free(text);
    }
    cJSON_Delete(run);
    return 0;
}

/* ---- workflow run --------------------------------------------------------------- */

/* -d DATA, @FILE or @- (stdin), into `out`. */
static int read_data(const char *arg, funcd_buf *out)
{
    if (arg[0] != '@')
        return funcd_buf_puts(out, arg) < 0 ? ctl_fail("out of memory") : 0;
    FILE *f = strcmp(arg, "@-") == 0 ? stdin : fopen(arg + 1, "rb");
    if (!f)
        return ctl_fail("cannot read %s", arg + 1);
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        if (funcd_buf_append(out, chunk, n) < 0)
            break;
    if (f != stdin)
        fclose(f);
    return 0;
}

static int run_workflow(ctl_ctx *ctx, const char *name, const char *data, int wait,
                        uint64_t timeout_ms)
{
    ctl_client *client = ctl_ctx_client(ctx);
    if (!client)
        return CTL_EXIT_ERROR;
    funcd_buf body = FUNCD_BUF_INIT;
    if (data && read_data(data, &body) != 0) {
        funcd_buf_free(&body);
        return CTL_EXIT_ERROR;
    }
    char path[600], what[200];
    char *escaped = ctl_escape(client, name);
    if (!escaped) {
        funcd_buf_free(&body);
        return ctl_fail("out of memory");
    }
    snprintf(path, sizeof(path), "/apis/funcd.dev/v1/namespaces/%s/workflows/%s/runs", ctx->ns,
             escaped);
    free(escaped);
    snprintf(what, sizeof(what), "starting a run of workflow/%s", name);
    ctl_response resp = CTL_RESPONSE_INIT;
    cJSON *run = NULL;
    int rc = 0;
    if (ctl_request_body(client, "POST", path, "application/json", body.data ? body.data : "",
                         body.len, &resp) != 0)
        rc = CTL_EXIT_ERROR;
    else if (resp.code != 201)
        rc = ctl_report_status(client, &resp, what, ctx->ns);
    else if (!(run = ctl_response_json(client, &resp)))
        rc = CTL_EXIT_ERROR;
    ctl_response_free(&resp);
    funcd_buf_free(&body);
    if (rc != 0)
        return rc;
    char id[128];
    snprintf(id, sizeof(id), "%s", ctl_get_string(run, "metadata.name"));
    if (!wait) {
        if (ctx->output == CTL_OUT_JSON)
            ctl_print_json(run, stdout);
        else if (ctx->output == CTL_OUT_YAML)
            rc = ctl_print_yaml(run, stdout) == 0 ? 0 : CTL_EXIT_ERROR;
        else
            printf("workflowrun/%s created\n", id);
        cJSON_Delete(run);
        return rc;
    }
    cJSON_Delete(run);
    run = NULL;
    volatile sig_atomic_t *stop = ctl_stop_on_signals();
    int64_t deadline = timeout_ms ? funcd_mono_ms() + (int64_t)timeout_ms : 0;
    int interactive = isatty(STDERR_FILENO);
    for (;;) {
        cJSON_Delete(run);
        if ((rc = fetch_run(ctx, client, id, &run)) != 0)
            return rc;
        const char *phase = ctl_get_string(run, "status.phase");
        if (finished(phase))
            break;
        if (*stop || (deadline && funcd_mono_ms() >= deadline)) {
            ctl_status_clear();
            cJSON_Delete(run);
            return ctl_fail("workflowrun/%s is still %s; `funcdctl describe workflowrun %s` "
                            "shows where it is", id, phase ? phase : "Pending", id);
        }
        if (interactive)
            ctl_status("workflowrun/%s: %s", id, phase ? phase : "Pending");
        usleep(200 * 1000);
    }
    ctl_status_clear();
    const char *phase = ctl_get_string(run, "status.phase");
    if (ctx->output == CTL_OUT_JSON) {
        ctl_print_json(run, stdout);
    } else if (ctx->output == CTL_OUT_YAML) {
        ctl_print_yaml(run, stdout);
    } else if (!strcmp(phase, "Succeeded")) {
        const cJSON *out = ctl_get_path(run, "status.output");
        if (out)
            ctl_print_json(out, stdout);
        else
            printf("null\n");
    }
    if (strcmp(phase, "Succeeded") != 0) {
        const char *msg = ctl_get_string(run, "status.message");
        rc = ctl_fail("workflowrun/%s %s%s%s", id, phase, msg ? ": " : "", msg ? msg : "");
    }
    cJSON_Delete(run);
    return rc;
}

int cmd_workflow(ctl_ctx *ctx, int argc, char **argv)
{
    const char *name = NULL, *data = NULL, *timeout = NULL;
    int wait = 0, only = 0;
    if (argc < 1 || strcmp(argv[0], "run") != 0)
        return ctl_usage(ctx, "workflow takes a subcommand: `funcdctl workflow run NAME -d JSON`");
    for (int i = 1; i < argc; i++) {
        int got;
        if (ctl_end_of_flags(argv[i], &only))
            continue;
        if (!ctl_is_flag(argv[i], only)) {
            if (name)
                return ctl_usage(ctx, "workflow run takes one NAME");
            name = argv[i];
            continue;
        }
        if (!strcmp(argv[i], "--wait")) {
            wait = 1;
            continue;
        }
        if ((got = ctl_flag_value(ctx, argc, argv, &i, "-d", "--data", &data)) != 0 ||
            (got = ctl_flag_value(ctx, argc, argv, &i, NULL, "--timeout", &timeout)) != 0) {
            if (got < 0)
                return CTL_EXIT_USAGE;
            continue;
        }
        return ctl_usage(ctx, "unknown flag \"%s\"", argv[i]);
    }
    if (!name)
        return ctl_usage(ctx, "workflow run needs the workflow's NAME");
    uint64_t timeout_ms = 0;
    if (timeout && (funcd_parse_duration_ms(timeout, &timeout_ms) < 0 || !wait))
        return ctl_usage(ctx, "--timeout takes a duration such as 30s or 5m, with --wait");
    return run_workflow(ctx, name, data, wait, timeout_ms);
}
