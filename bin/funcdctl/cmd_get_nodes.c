/* get nodes [NAME]: the funcd processes sharing the server's store
 * (GET /apis/funcd.dev/v1/nodes; docs/cluster.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "output.h"
#include "util/misc.h"

int ctl_is_nodes(const char *word)
{
    return !strcmp(word, "nodes") || !strcmp(word, "node") || !strcmp(word, "no");
}

static const char *yes_no(const cJSON *node, const char *path)
{
    return cJSON_IsTrue(ctl_get_path(node, path)) ? "True" : "False";
}

static int node_row(ctl_row *r, const cJSON *node, int64_t now)
{
    char age[32], workers[16];
    const cJSON *w = ctl_get_path(node, "status.workers");
    ctl_age(ctl_get_string(node, "status.startTime"), now, age, sizeof(age));
    snprintf(workers, sizeof(workers), "%.0f", cJSON_IsNumber(w) ? w->valuedouble : 0);
    r->n = 0;
    if (ctl_row_push(r, ctl_get_string(node, "metadata.name")) != 0 ||
        ctl_row_push(r, ctl_get_string(node, "status.address")) != 0 || ctl_row_push(r, age) != 0 ||
        ctl_row_push(r, yes_no(node, "status.ready")) != 0 || ctl_row_push(r, workers) != 0 ||
        ctl_row_push(r, yes_no(node, "status.leader")) != 0)
        return -1;
    return 0;
}

static int print_table(const cJSON *items)
{
    static const char *const names[] = {"NAME", "ADDRESS", "AGE", "READY", "WORKERS", "LEADER"};
    int64_t now = funcd_now_ms();
    ctl_table table = CTL_TABLE_INIT;
    ctl_row row = {0};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < 6; i++)
        rc = ctl_row_push(&row, names[i]);
    if (rc == 0)
        rc = ctl_table_add(&table, &row);
    const cJSON *node;
    cJSON_ArrayForEach(node, items)
    {
        if (rc == 0 && (rc = node_row(&row, node, now)) == 0)
            rc = ctl_table_add(&table, &row);
    }
    ctl_row_free(&row);
    if (rc == 0)
        ctl_table_print(&table, "", stdout);
    ctl_table_free(&table);
    return rc == 0 ? 0 : ctl_fail("out of memory");
}

/* A list becomes kubectl's v1 List for -o json|yaml; one node prints as is. */
static int print_structured(const ctl_ctx *ctx, cJSON *obj)
{
    if (ctx->output == CTL_OUT_JSON) {
        ctl_print_json(obj, stdout);
        return 0;
    }
    return ctl_print_yaml(obj, stdout) == 0 ? 0 : CTL_EXIT_ERROR;
}

static int print_nodes(const ctl_ctx *ctx, cJSON *json, int one)
{
    cJSON *items = one ? NULL : cJSON_GetObjectItemCaseSensitive(json, "items");
    const cJSON *node;
    if (ctx->output == CTL_OUT_NAME) {
        if (one)
            printf("node/%s\n", ctl_get_string(json, "metadata.name"));
        cJSON_ArrayForEach(node, items) printf("node/%s\n", ctl_get_string(node, "metadata.name"));
        return 0;
    }
    if (ctx->output == CTL_OUT_JSON || ctx->output == CTL_OUT_YAML) {
        if (!one) {
            cJSON_ReplaceItemInObjectCaseSensitive(json, "apiVersion", cJSON_CreateString("v1"));
            cJSON_ReplaceItemInObjectCaseSensitive(json, "kind", cJSON_CreateString("List"));
        }
        return print_structured(ctx, json);
    }
    if (one) {
        cJSON *single = cJSON_CreateArray();
        int rc = single && cJSON_AddItemReferenceToArray(single, json) ? print_table(single)
                                                                      : ctl_fail("out of memory");
        cJSON_Delete(single);
        return rc;
    }
    if (cJSON_GetArraySize(items) == 0) {
        fputs("No nodes found.\n", stderr);
        return 0;
    }
    return print_table(items);
}

int ctl_get_nodes(ctl_ctx *ctx, const char *name)
{
    ctl_client *client = ctl_ctx_client(ctx);
    ctl_response resp = CTL_RESPONSE_INIT;
    cJSON *json = NULL;
    char path[1200], what[300];
    if (name && strlen(name) > 253)
        return ctl_fail("node name \"%.40s...\" is longer than 253 characters", name);
    char *escaped = client && name ? ctl_escape(client, name) : NULL;
    if (client && name && !escaped)
        return ctl_fail("out of memory");
    snprintf(path, sizeof(path), "/apis/funcd.dev/v1/nodes%s%s", name ? "/" : "",
             escaped ? escaped : "");
    free(escaped);
    snprintf(what, sizeof(what), "node/%s", name ? name : "");
    int rc;
    if (!client || ctl_request(client, "GET", path, NULL, &resp) != 0)
        rc = CTL_EXIT_ERROR;
    else if (resp.code != 200)
        rc = ctl_report_status(client, &resp, name ? what : "listing nodes", NULL);
    else if (!(json = ctl_response_json(client, &resp)))
        rc = CTL_EXIT_ERROR;
    else
        rc = print_nodes(ctx, json, name != NULL);
    cJSON_Delete(json);
    ctl_response_free(&resp);
    return rc;
}
