/* get KIND [NAME]: a table, or the objects as JSON, YAML or names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "output.h"
#include "util/misc.h"

static int print_table(const ctl_ctx *ctx, const funcd_kind *kind, const cJSON *items,
                       int single)
{
    int wide = ctx->output == CTL_OUT_WIDE;
    int64_t now = funcd_now_ms();
    ctl_table table = CTL_TABLE_INIT;
    ctl_row row;
    int rc = ctl_row_header(&row, kind, wide, NULL) == 0 ? ctl_table_add(&table, &row) : -1;
    const cJSON *obj;
    if (single) {
        if (rc == 0 && ctl_row_object(&row, kind, wide, items, now, NULL) == 0)
            rc = ctl_table_add(&table, &row);
    } else {
        cJSON_ArrayForEach(obj, items)
        {
            if (rc == 0 && (rc = ctl_row_object(&row, kind, wide, obj, now, NULL)) == 0)
                rc = ctl_table_add(&table, &row);
        }
    }
    if (rc == 0)
        ctl_table_print(&table, "", stdout);
    ctl_table_free(&table);
    return rc == 0 ? 0 : ctl_fail("out of memory");
}

/* What kubectl prints for several objects: a v1 List, whatever the kind. */
static cJSON *as_v1_list(cJSON *server_list)
{
    const char *rv = ctl_get_string(server_list, "metadata.resourceVersion");
    cJSON *list = cJSON_CreateObject();
    cJSON *items = cJSON_DetachItemFromObjectCaseSensitive(server_list, "items");
    if (!items)
        items = cJSON_CreateArray();
    if (!list || !items || !cJSON_AddStringToObject(list, "apiVersion", "v1")) {
        cJSON_Delete(list);
        cJSON_Delete(items);
        return NULL;
    }
    cJSON_AddItemToObject(list, "items", items);
    cJSON *meta = cJSON_AddStringToObject(list, "kind", "List")
                      ? cJSON_AddObjectToObject(list, "metadata")
                      : NULL;
    if (!meta || !cJSON_AddStringToObject(meta, "resourceVersion", rv ? rv : "")) {
        cJSON_Delete(list);
        return NULL;
    }
    return list;
}

static int print_list(const ctl_ctx *ctx, const funcd_kind *kind, cJSON *server_list)
{
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(server_list, "items");
    const cJSON *obj;
    if (ctx->output == CTL_OUT_NAME) {
        cJSON_ArrayForEach(obj, items) ctl_print_name(kind, obj, stdout);
        return 0;
    }
    if (ctx->output == CTL_OUT_TABLE || ctx->output == CTL_OUT_WIDE) {
        if (cJSON_GetArraySize(items) == 0) {
            fprintf(stderr, "No %s found in namespace \"%s\".\n", kind->plural, ctx->ns);
            return 0;
        }
        return print_table(ctx, kind, items, 0);
    }
    cJSON *list = as_v1_list(server_list);
    if (!list)
        return ctl_fail("out of memory");
    int rc = 0;
    if (ctx->output == CTL_OUT_JSON)
        ctl_print_json(list, stdout);
    else
        rc = ctl_print_yaml(list, stdout) == 0 ? 0 : CTL_EXIT_ERROR;
    cJSON_Delete(list);
    return rc;
}

static int print_one(const ctl_ctx *ctx, const funcd_kind *kind, const cJSON *obj)
{
    switch (ctx->output) {
    case CTL_OUT_NAME: ctl_print_name(kind, obj, stdout); return 0;
    case CTL_OUT_JSON: ctl_print_json(obj, stdout); return 0;
    case CTL_OUT_YAML: return ctl_print_yaml(obj, stdout) == 0 ? 0 : CTL_EXIT_ERROR;
    default: return print_table(ctx, kind, obj, 1);
    }
}

int cmd_get(ctl_ctx *ctx, int argc, char **argv)
{
    const char *args[2];
    int nargs = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--"))
            continue;
        if (argv[i][0] == '-' && argv[i][1] != '\0')
            return ctl_usage(ctx, "unknown flag \"%s\"", argv[i]);
        if (nargs == 2)
            return ctl_usage(ctx, "too many arguments: get takes a KIND and at most one NAME");
        args[nargs++] = argv[i];
    }
    if (nargs == 0)
        return ctl_usage(ctx, "get needs a KIND, e.g. `funcdctl get functions`");
    const funcd_kind *kind = ctl_kind_arg(ctx, args[0]);
    if (!kind)
        return CTL_EXIT_USAGE;
    const char *name = nargs > 1 ? args[1] : NULL;

    ctl_client *client = ctl_ctx_client(ctx);
    char *path = client ? ctl_resource_path(client, ctx->ns, kind, name) : NULL;
    ctl_response resp = CTL_RESPONSE_INIT;
    cJSON *json = NULL;
    int rc;
    if (!path || ctl_request(client, "GET", path, NULL, &resp) != 0)
        rc = CTL_EXIT_ERROR;
    else if (resp.code != 200)
        rc = ctl_report_status(client, &resp, NULL, ctx->ns);
    else if (!(json = ctl_response_json(client, &resp)))
        rc = CTL_EXIT_ERROR;
    else
        rc = name ? print_one(ctx, kind, json) : print_list(ctx, kind, json);
    cJSON_Delete(json);
    ctl_response_free(&resp);
    free(path);
    return rc;
}
