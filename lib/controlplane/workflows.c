/*
 * The Workflow side of the control plane (docs/workflows.md): admission
 * against the store (functions exist, typed edges fit), and the runs API:
 *
 *   POST .../namespaces/{ns}/workflows/{name}/runs      the input -> 201 WorkflowRun
 *   GET  .../namespaces/{ns}/workflowruns               WorkflowRunList
 *   GET  .../namespaces/{ns}/workflowruns/{id}          WorkflowRun
 *   POST .../namespaces/{ns}/workflowruns/{id}/cancel   202 WorkflowRun
 *
 * The API only writes records (a new run, a cancel asked for); the engine
 * on the lease holder executes them (lib/workflow/engine.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/jsonschema.h"
#include "controlplane/api.h"
#include "funcd/sys/error.h"
#include "objects/objects.h"
#include "port/store.h"
#include "workflow/workflow.h"

#define PREFIX "/apis/funcd.dev/v1/namespaces/"

int funcd_cp_admit_workflow(const funcd_cp *cp, const char *ns, const cJSON *obj,
                            funcd_cp_response *resp)
{
    char field[256] = "", why[700] = "";
    const char *reason = NULL;
    int rc = funcd_workflow_check(cp->store, ns, obj, field, sizeof(field), why, sizeof(why),
                                  &reason);
    if (rc == 0)
        return 1;
    if (rc == FUNCD_EINVAL)
        funcd_cp_status(resp, 400, "BadRequest", field, "%s: %s", field, why);
    else
        funcd_cp_status(resp, rc == FUNCD_EUNAVAILABLE ? 503 : 500,
                        rc == FUNCD_EUNAVAILABLE ? "ServiceUnavailable" : "InternalError", NULL,
                        "checking the workflow's functions: %s", funcd_error_last()->message);
    return 0;
}

static int method_is(const funcd_cp_request *req, const char *m)
{
    return req->method_len == strlen(m) && memcmp(req->method, m, req->method_len) == 0;
}

static void send_json(funcd_cp_response *resp, int code, const cJSON *obj)
{
    char *text = cJSON_PrintUnformatted(obj);
    if (!text) {
        funcd_cp_status(resp, 500, "InternalError", NULL, "out of memory encoding the response");
        return;
    }
    resp->status = code;
    funcd_buf_reset(&resp->body);
    funcd_buf_puts(&resp->body, text);
    free(text);
}

static void store_error(funcd_cp_response *resp, int rc, const char *what)
{
    if (rc == FUNCD_EUNAVAILABLE)
        funcd_cp_status(resp, 503, "ServiceUnavailable", NULL, "%s: %s", what,
                        funcd_error_last()->message);
    else
        funcd_cp_status(resp, 500, "InternalError", NULL, "%s: %s", what,
                        funcd_error_last()->message);
}

static size_t payload_limit(const funcd_cp *cp)
{
    return cp->workflow_payload_limit ? cp->workflow_payload_limit
                                      : FUNCD_WORKFLOW_DEFAULT_PAYLOAD_LIMIT;
}

/* ---- runs ------------------------------------------------------------------------ */

static void start_run(funcd_cp *cp, const funcd_cp_request *req, const char *ns,
                      const char *name, funcd_cp_response *resp)
{
    size_t limit = payload_limit(cp);
    if (req->body_len > limit) {
        funcd_cp_status(resp, 400, "BadRequest", "input",
                        "the input has %zu bytes; the workflow payload limit is %zu (funcd "
                        "--workflow-payload-limit)",
                        req->body_len, limit);
        return;
    }
    cJSON *input = req->body_len ? cJSON_ParseWithLength(req->body, req->body_len)
                                 : cJSON_CreateNull();
    if (!input) {
        funcd_cp_status(resp, 400, "BadRequest", "input",
                        "the input is not JSON; send the run's input document as the body");
        return;
    }
    cJSON *wf = NULL, *run = NULL;
    int rc = funcd_objects_get(cp->store, funcd_kind_by_kind("Workflow"), ns, name, &wf, NULL);
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(wf, "spec");
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(spec, "input"), "schema");
    const cJSON *cond = cJSON_GetArrayItem(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(wf, "status"),
                                         "conditions"),
        0);
    const char *ready = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cond, "status"));
    char where[128], why[256], field[160];
    if (rc == FUNCD_ENOTFOUND) {
        funcd_cp_status(resp, 404, "NotFound", NULL, "workflow %s/%s not found", ns, name);
    } else if (rc < 0) {
        store_error(resp, rc, "reading the workflow");
    } else if (ready && strcmp(ready, "False") == 0) {
        funcd_cp_status(resp, 409, "Conflict", NULL, "workflow %s/%s is not ready: %s", ns,
                        name,
                        cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cond, "message"))
                            ?: "");
    } else if (cJSON_IsObject(schema) &&
               funcd_schema_validate(schema, input, where, sizeof(where), why, sizeof(why)) < 0) {
        snprintf(field, sizeof(field), "input%s%s", where[0] ? "." : "", where);
        funcd_cp_status(resp, 400, "BadRequest", field, "%s %s (spec.input.schema of workflow %s)",
                        field, why, name);
    } else if (!(run = funcd_workflow_run_new(ns, wf, input))) {
        funcd_cp_status(resp, 500, "InternalError", NULL, "out of memory creating the run");
    } else {
        uint64_t rev = 0;
        rc = funcd_workflow_run_store(cp->store, ns, run, &rev);
        if (rc == FUNCD_ENOSPC) {
            funcd_cp_status(resp, 429, "TooManyRequests", NULL, "%s",
                            funcd_error_last()->message);
        } else if (rc < 0) {
            store_error(resp, rc, "storing the run");
        } else {
            char rv[32];
            snprintf(rv, sizeof(rv), "%" PRIu64, rev);
            cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(run, "metadata"),
                                    "resourceVersion", rv);
            send_json(resp, 201, run);
        }
    }
    cJSON_Delete(run);
    cJSON_Delete(wf);
    cJSON_Delete(input);
}

/* A run as the API shows it: a cancel asked for and not yet carried out
 * shows as status.cancelRequested. */
static cJSON *read_run(funcd_cp *cp, const char *ns, const char *id, int *rc)
{
    char key[300];
    funcd_store_value v = {0};
    *rc = funcd_workflow_run_key(key, sizeof(key), FUNCD_WORKFLOW_RUNS_PREFIX, ns, id);
    if (*rc == 0)
        *rc = funcd_port_store_get(cp->store, key, &v);
    if (*rc < 0)
        return NULL;
    cJSON *run = funcd_workflow_run_decode(v.value, v.len, v.revision);
    free(v.value);
    if (!run) {
        *rc = funcd_error_set(FUNCD_EIO, "the stored run %s/%s is not valid JSON", ns, id);
        return NULL;
    }
    funcd_store_value c = {0};
    if (!funcd_workflow_run_finished(run) &&
        funcd_workflow_run_key(key, sizeof(key), FUNCD_WORKFLOW_CANCELS_PREFIX, ns, id) == 0 &&
        funcd_port_store_get(cp->store, key, &c) == 0) {
        cJSON *st = cJSON_GetObjectItemCaseSensitive(run, "status");
        if (cJSON_IsObject(st))
            cJSON_AddTrueToObject(st, "cancelRequested");
        free(c.value);
    }
    return run;
}

static void get_run(funcd_cp *cp, const char *ns, const char *id, funcd_cp_response *resp)
{
    int rc;
    cJSON *run = read_run(cp, ns, id, &rc);
    if (rc == FUNCD_ENOTFOUND)
        funcd_cp_status(resp, 404, "NotFound", NULL, "workflow run %s/%s not found", ns, id);
    else if (rc < 0)
        store_error(resp, rc, "reading the run");
    else
        send_json(resp, 200, run);
    cJSON_Delete(run);
}

static void cancel_run(funcd_cp *cp, const char *ns, const char *id, funcd_cp_response *resp)
{
    int rc;
    char key[300];
    cJSON *run = read_run(cp, ns, id, &rc);
    const char *phase = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(run, "status"), "phase"));
    if (rc == FUNCD_ENOTFOUND) {
        funcd_cp_status(resp, 404, "NotFound", NULL, "workflow run %s/%s not found", ns, id);
    } else if (rc < 0) {
        store_error(resp, rc, "reading the run");
    } else if (funcd_workflow_run_finished(run)) {
        funcd_cp_status(resp, 409, "Conflict", NULL, "workflow run %s/%s has already finished "
                        "(%s)", ns, id, phase ? phase : "");
    } else if ((rc = funcd_workflow_run_key(key, sizeof(key), FUNCD_WORKFLOW_CANCELS_PREFIX, ns,
                                            id)) < 0 ||
               (rc = funcd_port_store_put(cp->store, key, "{}", 2, FUNCD_STORE_ANY, NULL)) < 0) {
        store_error(resp, rc, "recording the cancel");
    } else {
        cJSON *st = cJSON_GetObjectItemCaseSensitive(run, "status");
        if (cJSON_IsObject(st) && !cJSON_GetObjectItemCaseSensitive(st, "cancelRequested"))
            cJSON_AddTrueToObject(st, "cancelRequested");
        send_json(resp, 202, run);
    }
    cJSON_Delete(run);
}

typedef struct list_ctx {
    funcd_buf *out;
    int count, failed;
} list_ctx;

static int list_one(const funcd_store_kv *kv, void *payload)
{
    list_ctx *lc = payload;
    cJSON *run = funcd_workflow_run_decode(kv->value, kv->len, kv->revision);
    char *text = run ? cJSON_PrintUnformatted(run) : NULL;
    cJSON_Delete(run);
    if (!text) {
        lc->failed = 1;
        return 1;
    }
    if (lc->count++)
        funcd_buf_puts(lc->out, ",");
    funcd_buf_puts(lc->out, text);
    free(text);
    return 0;
}

static void list_runs(funcd_cp *cp, const char *ns, funcd_cp_response *resp)
{
    char prefix[128];
    funcd_buf items = FUNCD_BUF_INIT;
    list_ctx lc = {&items, 0, 0};
    uint64_t rev = 0;
    snprintf(prefix, sizeof(prefix), FUNCD_WORKFLOW_RUNS_PREFIX "%s/", ns);
    int rc = funcd_port_store_list(cp->store, prefix, list_one, &lc, &rev);
    if (rc == 0 && lc.failed)
        rc = funcd_error_set(FUNCD_EIO, "a stored workflow run is not valid JSON");
    if (rc < 0) {
        store_error(resp, rc, "listing the runs");
    } else {
        resp->status = 200;
        funcd_buf_reset(&resp->body);
        funcd_buf_printf(&resp->body,
                         "{\"apiVersion\":\"" FUNCD_API_VERSION "\",\"kind\":\"WorkflowRunList\","
                         "\"metadata\":{\"resourceVersion\":\"%" PRIu64 "\"},\"items\":[",
                         rev);
        funcd_buf_append(&resp->body, items.data ? items.data : "", items.len);
        funcd_buf_puts(&resp->body, "]}");
    }
    funcd_buf_free(&items);
}

/* ---- routing --------------------------------------------------------------------- */

static int is_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= FUNCD_WORKFLOW_MAX_RUN_ID || s[0] == '-' || s[n - 1] == '-')
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-'))
            return 0;
    return 1;
}

int funcd_cp_workflows(funcd_cp *cp, const funcd_cp_request *req, const funcd_token *t,
                       funcd_cp_response *resp)
{
    const size_t pl = sizeof(PREFIX) - 1;
    if (req->path_len <= pl || memcmp(req->path, PREFIX, pl) != 0)
        return 0;
    char seg[5][FUNCD_WORKFLOW_MAX_RUN_ID];
    size_t n = 0, i = pl;
    while (i < req->path_len && n < 5) {
        size_t j = i;
        while (j < req->path_len && req->path[j] != '/')
            j++;
        if (j - i >= sizeof(seg[0]))
            return 0;
        memcpy(seg[n], req->path + i, j - i);
        seg[n++][j - i] = '\0';
        i = j + 1;
    }
    if (i < req->path_len || n < 2)
        return 0;
    const char *ns = seg[0];
    int runs = n == 4 && strcmp(seg[1], "workflows") == 0 && strcmp(seg[3], "runs") == 0;
    int listing = n == 2 && strcmp(seg[1], "workflowruns") == 0;
    int one = n == 3 && strcmp(seg[1], "workflowruns") == 0;
    int cancel = n == 4 && strcmp(seg[1], "workflowruns") == 0 && strcmp(seg[3], "cancel") == 0;
    if (!runs && !listing && !one && !cancel)
        return 0;
    if (!is_name(ns) || strlen(ns) > FUNCD_API_MAX_NAME || (n > 2 && !is_name(seg[2]))) {
        funcd_cp_status(resp, 400, "BadRequest", NULL,
                        "namespaces, workflows and runs are named by DNS-1123 labels: lowercase "
                        "letters, digits and '-'");
        return 1;
    }
    int write = runs || cancel;
    if (write != method_is(req, "POST") || (!write && !method_is(req, "GET"))) {
        funcd_cp_status(resp, 405, "MethodNotAllowed", NULL, "%.*s is not allowed here; use %s",
                        (int)req->method_len, req->method, write ? "POST" : "GET");
        return 1;
    }
    if (!funcd_token_allows(t, ns, write)) {
        funcd_cp_status(resp, 403, "Forbidden", NULL,
                        "role %s may not %s workflow runs in namespace \"%s\"; ask an admin for a "
                        "token that covers it",
                        funcd_role_name(t->role), write ? "start or cancel" : "read", ns);
        return 1;
    }
    if (runs)
        start_run(cp, req, ns, seg[2], resp);
    else if (listing)
        list_runs(cp, ns, resp);
    else if (one)
        get_run(cp, ns, seg[2], resp);
    else
        cancel_run(cp, ns, seg[2], resp);
    return 1;
}
