/* scale [fn] NAME: sets spec.scaling.minReplicas / maxReplicas of a Function. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "output.h"

#define MAX_REPLICAS 1000L /* what the API accepts */

typedef struct scale_opts {
    const char *name;
    long min, max; /* -1: not given */
} scale_opts;

static int count_arg(const ctl_ctx *ctx, const char *flag, const char *value, long *out)
{
    char *end;
    long n = strtol(value, &end, 10);
    if (!*value || *end || n < 0 || n > MAX_REPLICAS)
        return ctl_usage(ctx, "%s takes a whole number from 0 to %ld, not \"%s\"", flag,
                         MAX_REPLICAS, value);
    *out = n;
    return 0;
}

/* The Function named by `args`: NAME, fn NAME, or fn/NAME. */
static int function_name(const ctl_ctx *ctx, char **args, int nargs, const char **name)
{
    const funcd_kind *fn = funcd_kind_by_kind("Function");
    const funcd_kind *kind = NULL;
    ctl_ref *refs = NULL;
    int nrefs = 0, rc;
    if (nargs == 1 && !strchr(args[0], '/')) {
        *name = args[0];
        return 0;
    }
    rc = ctl_parse_refs(ctx, nargs, args, &kind, &refs, &nrefs);
    if (rc == 0 && nrefs != 1)
        rc = ctl_usage(ctx, "scale takes one Function: NAME, fn NAME or fn/NAME");
    else if (rc == 0 && refs[0].kind != fn)
        rc = ctl_usage(ctx, "only Functions scale, not a %s", refs[0].kind->kind);
    if (rc == 0)
        *name = refs[0].name;
    free(refs);
    return rc;
}

static int parse(ctl_ctx *ctx, int argc, char **argv, scale_opts *o, char **args)
{
    int nargs = 0, only = 0;
    o->min = o->max = -1;
    for (int i = 0; i < argc; i++) {
        const char *v;
        int r;
        if (ctl_end_of_flags(argv[i], &only))
            continue;
        if (!only && (r = ctl_flag_value(ctx, argc, argv, &i, NULL, "--replicas", &v)) != 0) {
            if (r < 0 || count_arg(ctx, "--replicas", v, &o->min) != 0)
                return CTL_EXIT_USAGE;
            o->max = o->min;
        } else if (!only && (r = ctl_flag_value(ctx, argc, argv, &i, NULL, "--min", &v)) != 0) {
            if (r < 0 || count_arg(ctx, "--min", v, &o->min) != 0)
                return CTL_EXIT_USAGE;
        } else if (!only && (r = ctl_flag_value(ctx, argc, argv, &i, NULL, "--max", &v)) != 0) {
            if (r < 0 || count_arg(ctx, "--max", v, &o->max) != 0)
                return CTL_EXIT_USAGE;
        } else if (ctl_is_flag(argv[i], only)) {
            return ctl_usage(ctx, "unknown flag \"%s\"", argv[i]);
        } else {
            args[nargs++] = argv[i];
        }
    }
    if (nargs == 0)
        return ctl_usage(ctx, "scale needs the NAME of a Function, e.g. "
                              "`funcdctl scale hello --max 4`");
    if (o->min < 0 && o->max < 0)
        return ctl_usage(ctx, "scale needs --replicas N, --min N or --max N");
    if (o->max == 0)
        return ctl_usage(ctx, "--max is at least 1 (--min 0 scales to zero when idle)");
    return function_name(ctx, args, nargs, &o->name);
}

static int set_count(cJSON *scaling, const char *key, long n)
{
    if (n < 0)
        return 0;
    cJSON_DeleteItemFromObjectCaseSensitive(scaling, key);
    return cJSON_AddNumberToObject(scaling, key, (double)n) ? 0 : -1;
}

static int print_result(const ctl_ctx *ctx, const cJSON *fn, const char *name)
{
    switch (ctx->output) {
    case CTL_OUT_NAME: printf("function/%s\n", name); return 0;
    case CTL_OUT_JSON: ctl_print_json(fn, stdout); return 0;
    case CTL_OUT_YAML: return ctl_print_yaml(fn, stdout) == 0 ? 0 : CTL_EXIT_ERROR;
    default: printf("function/%s scaled\n", name); return 0;
    }
}

/* GET, change spec.scaling, PUT with the revision read (a change made in
 * between is refused with 409 rather than overwritten). */
int cmd_scale(ctl_ctx *ctx, int argc, char **argv)
{
    char **args = calloc((size_t)argc + 1, sizeof(*args));
    scale_opts o;
    int rc = args ? parse(ctx, argc, argv, &o, args) : ctl_fail("out of memory");
    ctl_client *client = rc == 0 ? ctl_ctx_client(ctx) : NULL;
    char *path = client ? ctl_api_path(client, ctx->ns, "functions", o.name, NULL) : NULL;
    ctl_response resp = CTL_RESPONSE_INIT;
    cJSON *fn = NULL, *done = NULL;
    char what[160];
    if (rc == 0 && !path)
        rc = CTL_EXIT_ERROR;
    if (rc == 0) {
        snprintf(what, sizeof(what), "function/%s", o.name);
        if (ctl_request(client, "GET", path, NULL, &resp) != 0)
            rc = CTL_EXIT_ERROR;
        else if (resp.code != 200)
            rc = ctl_report_status(client, &resp, what, ctx->ns);
        else if (!(fn = ctl_response_json(client, &resp)))
            rc = CTL_EXIT_ERROR;
    }
    cJSON *spec = rc == 0 ? cJSON_GetObjectItemCaseSensitive(fn, "spec") : NULL;
    cJSON *scaling = cJSON_GetObjectItemCaseSensitive(spec, "scaling");
    if (rc == 0 && spec && !scaling)
        scaling = cJSON_AddObjectToObject(spec, "scaling");
    char *body = NULL;
    if (rc == 0 && (!scaling || set_count(scaling, "minReplicas", o.min) != 0 ||
                    set_count(scaling, "maxReplicas", o.max) != 0 ||
                    !(body = cJSON_PrintUnformatted(fn))))
        rc = ctl_fail("out of memory");
    if (rc == 0) {
        ctl_response_free(&resp);
        if (ctl_request(client, "PUT", path, body, &resp) != 0)
            rc = CTL_EXIT_ERROR;
        else if (resp.code != 200)
            rc = ctl_report_status(client, &resp, what, ctx->ns);
        else if (!(done = ctl_response_json(client, &resp)))
            rc = CTL_EXIT_ERROR;
        else
            rc = print_result(ctx, done, o.name);
    }
    free(body);
    cJSON_Delete(fn);
    cJSON_Delete(done);
    ctl_response_free(&resp);
    free(path);
    free(args);
    return rc;
}
