/* delete KIND NAME | delete -f FILE */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "manifest.h"

typedef struct delete_opts {
    const char *file;
    int ignore_not_found;
    const char *args[2];
    int nargs;
} delete_opts;

/* 0, CTL_EXIT_ERROR (reported), or -1 when funcd is unreachable. */
static int delete_one(ctl_ctx *ctx, const delete_opts *o, const funcd_kind *kind,
                      const char *ns, const char *name)
{
    ctl_client *client = ctl_ctx_client(ctx);
    char *path = client ? ctl_resource_path(client, ns, kind, name) : NULL;
    ctl_response resp = CTL_RESPONSE_INIT;
    int rc = 0;
    if (!path || ctl_request(client, "DELETE", path, NULL, &resp) != 0)
        rc = -1;
    else if (resp.code == 404 && o->ignore_not_found)
        rc = 0;
    else if (resp.code != 200 && resp.code != 202)
        rc = ctl_report_status(client, &resp, NULL, ns);
    else if (ctx->output == CTL_OUT_NAME)
        printf("%s/%s\n", kind->singular, name);
    else
        printf("%s/%s deleted\n", kind->singular, name);
    ctl_response_free(&resp);
    free(path);
    return rc;
}

static int delete_file(ctl_ctx *ctx, const delete_opts *o)
{
    cJSON *objects;
    if (ctl_read_manifest(o->file, &objects) != 0)
        return CTL_EXIT_ERROR;
    int rc = 0, index = 0;
    const cJSON *obj;
    cJSON_ArrayForEach(obj, objects)
    {
        ctl_target t;
        int r = ctl_manifest_target(ctx, o->file, index++, obj, &t);
        if (r == 0)
            r = delete_one(ctx, o, t.kind, t.ns, t.name);
        if (r != 0)
            rc = CTL_EXIT_ERROR;
        if (r < 0)
            break;
    }
    cJSON_Delete(objects);
    return rc;
}

static int parse(ctl_ctx *ctx, int argc, char **argv, delete_opts *o)
{
    for (int i = 0; i < argc; i++) {
        const char *value;
        int r = ctl_flag_value(ctx, argc, argv, &i, "-f", "--filename", &value);
        if (r < 0)
            return CTL_EXIT_USAGE;
        if (r > 0) {
            if (o->file)
                return ctl_usage(ctx, "give -f once");
            o->file = value;
        } else if (!strcmp(argv[i], "--ignore-not-found")) {
            o->ignore_not_found = 1;
        } else if (!strcmp(argv[i], "--")) {
            continue;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return ctl_usage(ctx, "unknown flag \"%s\"", argv[i]);
        } else if (o->nargs == 2) {
            return ctl_usage(ctx, "too many arguments: delete takes a KIND and one NAME");
        } else {
            o->args[o->nargs++] = argv[i];
        }
    }
    if (o->file && o->nargs > 0)
        return ctl_usage(ctx, "give either -f FILE or KIND NAME, not both");
    if (!o->file && o->nargs < 2)
        return ctl_usage(ctx, "delete needs KIND NAME (e.g. `funcdctl delete fn hello`) or -f FILE");
    return 0;
}

int cmd_delete(ctl_ctx *ctx, int argc, char **argv)
{
    delete_opts o = {0};
    int rc = parse(ctx, argc, argv, &o);
    if (rc != 0)
        return rc;
    if (o.file)
        return delete_file(ctx, &o);
    const funcd_kind *kind = ctl_kind_arg(ctx, o.args[0]);
    if (!kind)
        return CTL_EXIT_USAGE;
    return delete_one(ctx, &o, kind, ctx->ns, o.args[1]) == 0 ? 0 : CTL_EXIT_ERROR;
}
