/* s3-credentials NAME: a Function's S3 access key (admins; docs/s3.md), as shell
 * exports for awscli and the SDKs, or the server's object with -o json|yaml. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "output.h"

/* Shell single quotes around `s`. */
static void quoted(const char *s)
{
    putchar('\'');
    for (; *s; s++)
        if (*s == '\'')
            fputs("'\\''", stdout);
        else
            putchar(*s);
    putchar('\'');
}

int cmd_s3_credentials(ctl_ctx *ctx, int argc, char **argv)
{
    const char *name = NULL;
    int only = 0;
    for (int i = 0; i < argc; i++) {
        if (ctl_end_of_flags(argv[i], &only))
            continue;
        if (ctl_is_flag(argv[i], only))
            return ctl_usage(ctx, "unknown flag \"%s\"", argv[i]);
        if (name)
            return ctl_usage(ctx, "s3-credentials takes one Function NAME");
        name = argv[i];
    }
    if (!name)
        return ctl_usage(ctx, "s3-credentials needs the NAME of a Function, e.g. "
                              "`funcdctl s3-credentials thumbnails`");
    ctl_client *client = ctl_ctx_client(ctx);
    if (!client)
        return CTL_EXIT_ERROR;
    char *path = ctl_api_path(client, ctx->ns, "functions", name, "s3-credentials");
    ctl_response resp = CTL_RESPONSE_INIT;
    cJSON *obj = NULL;
    int rc = 0;
    if (!path || ctl_request(client, "GET", path, NULL, &resp) != 0)
        rc = CTL_EXIT_ERROR;
    else if (resp.code != 200)
        rc = ctl_report_status(client, &resp, NULL, ctx->ns);
    else if (!(obj = ctl_response_json(client, &resp)))
        rc = CTL_EXIT_ERROR;
    else if (ctx->output == CTL_OUT_JSON)
        ctl_print_json(obj, stdout);
    else if (ctx->output == CTL_OUT_YAML)
        rc = ctl_print_yaml(obj, stdout) == 0 ? 0 : CTL_EXIT_ERROR;
    else {
        static const char *const vars[][2] = {
            {"AWS_ACCESS_KEY_ID", "accessKeyId"},
            {"AWS_SECRET_ACCESS_KEY", "secretAccessKey"},
            {"AWS_REGION", "region"},
            {"AWS_ENDPOINT_URL", "endpoint"},
        };
        for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
            const char *v = ctl_get_string(obj, vars[i][1]);
            if (!v || !*v)
                continue; /* no host listener: no endpoint */
            printf("export %s=", vars[i][0]);
            quoted(v);
            putchar('\n');
        }
    }
    cJSON_Delete(obj);
    ctl_response_free(&resp);
    free(path);
    return rc;
}
