/* delete KIND NAME... | delete KIND/NAME... | delete KIND -l SEL | delete -f FILE */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "manifest.h"
#include "output.h"

typedef struct delete_opts {
    const char *file;
    const char *selector;
    int ignore_not_found;
    char **args;
    int nargs;
} delete_opts;

/* 0, CTL_EXIT_ERROR (reported), or -1 when funcd is unreachable. */
static int delete_one(ctl_ctx *ctx, const delete_opts *o, const funcd_kind *kind,
                      const char *ns, const char *name)
{
    ctl_client *client = ctl_ctx_client(ctx);
    char *path = client ? ctl_resource_path(client, ns, kind, name) : NULL;
    ctl_response resp = CTL_RESPONSE_INIT;
    char what[160];
    int rc = 0;
    snprintf(what, sizeof(what), "%s/%s", kind->singular, name);
    if (!path || ctl_request(client, "DELETE", path, NULL, &resp) != 0)
        rc = -1;
    else if (resp.code == 404 && o->ignore_not_found)
        rc = 0;
    else if (resp.code != 200 && resp.code != 202)
        rc = ctl_report_status(client, &resp, what, ns);
    else if (ctx->output == CTL_OUT_NAME)
        printf("%s\n", what);
    else
        printf("%s deleted\n", what);
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

/* Lists KIND with the selector, then deletes each object listed. */
static int delete_selected(ctl_ctx *ctx, const delete_opts *o, const funcd_kind *kind)
{
    ctl_client *client = ctl_ctx_client(ctx);
    char *base = client ? ctl_resource_path(client, ctx->ns, kind, NULL) : NULL;
    char *sel = base ? ctl_escape(client, o->selector) : NULL;
    funcd_buf path = FUNCD_BUF_INIT;
    ctl_response resp = CTL_RESPONSE_INIT;
    cJSON *list = NULL;
    int rc = 0;
    if (!client)
        rc = CTL_EXIT_ERROR;
    else if (!sel || funcd_buf_printf(&path, "%s?labelSelector=%s", base, sel) != 0)
        rc = ctl_fail("out of memory");
    else if (ctl_request(client, "GET", path.data, NULL, &resp) != 0)
        rc = CTL_EXIT_ERROR;
    else if (resp.code != 200)
        rc = ctl_report_status(client, &resp, NULL, ctx->ns);
    else if (!(list = ctl_response_json(client, &resp)))
        rc = CTL_EXIT_ERROR;
    const cJSON *obj;
    int n = 0;
    cJSON_ArrayForEach(obj, ctl_get_path(list, "items"))
    {
        const char *name = ctl_get_string(obj, "metadata.name");
        int r = name ? delete_one(ctx, o, kind, ctx->ns, name) : 0;
        n++;
        if (r != 0)
            rc = CTL_EXIT_ERROR;
        if (r < 0)
            break;
    }
    if (rc == 0 && n == 0)
        fprintf(stderr, "No %s found in namespace \"%s\".\n", kind->plural, ctx->ns);
    cJSON_Delete(list);
    ctl_response_free(&resp);
    funcd_buf_free(&path);
    free(sel);
    free(base);
    return rc;
}

static int parse(ctl_ctx *ctx, int argc, char **argv, delete_opts *o)
{
    int only = 0;
    for (int i = 0; i < argc; i++) {
        const char *value;
        if (ctl_end_of_flags(argv[i], &only))
            continue;
        int r = only ? 0 : ctl_flag_value(ctx, argc, argv, &i, "-f", "--filename", &value);
        int l = r || only ? 0 : ctl_flag_value(ctx, argc, argv, &i, "-l", "--selector", &o->selector);
        if (r < 0 || l < 0)
            return CTL_EXIT_USAGE;
        if (l > 0)
            continue;
        if (r > 0) {
            if (o->file)
                return ctl_usage(ctx, "give -f once");
            o->file = value;
        } else if (!only && !strcmp(argv[i], "--ignore-not-found")) {
            o->ignore_not_found = 1;
        } else if (ctl_is_flag(argv[i], only)) {
            return ctl_usage(ctx, "unknown flag \"%s\"", argv[i]);
        } else {
            o->args[o->nargs++] = argv[i];
        }
    }
    if (o->file && (o->nargs > 0 || o->selector))
        return ctl_usage(ctx, "give either -f FILE or KIND NAME..., not both");
    if (!o->file && o->nargs == 0)
        return ctl_usage(ctx, "delete needs KIND NAME (e.g. `funcdctl delete fn hello`), "
                              "KIND -l SELECTOR or -f FILE");
    return 0;
}

int cmd_delete(ctl_ctx *ctx, int argc, char **argv)
{
    delete_opts o = {0};
    o.args = calloc((size_t)argc + 1, sizeof(*o.args));
    if (!o.args)
        return ctl_fail("out of memory");
    int rc = parse(ctx, argc, argv, &o);
    const funcd_kind *kind = NULL;
    ctl_ref *refs = NULL;
    int nrefs = 0;
    if (rc == 0 && o.file) {
        rc = delete_file(ctx, &o);
        goto out;
    }
    if (rc == 0)
        rc = ctl_parse_refs(ctx, o.nargs, o.args, &kind, &refs, &nrefs);
    if (rc == 0 && o.selector && nrefs > 0)
        rc = ctl_usage(ctx, "-l selects among all objects of a KIND: give no NAME with it");
    else if (rc == 0 && o.selector)
        rc = delete_selected(ctx, &o, kind);
    else if (rc == 0 && nrefs == 0)
        rc = ctl_usage(ctx, "delete needs the NAME of the %s to delete (or -l SELECTOR)",
                       kind->singular);
    for (int i = 0, failed = 0; rc == 0 && i < nrefs; i++) {
        int r = delete_one(ctx, &o, refs[i].kind, ctx->ns, refs[i].name);
        failed |= r != 0;
        if (r < 0 || (i + 1 == nrefs && failed))
            rc = CTL_EXIT_ERROR;
    }
out:
    free(refs);
    free(o.args);
    return rc;
}
