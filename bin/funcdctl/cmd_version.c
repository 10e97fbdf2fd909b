/* version: this client's version and what GET /version says of the server. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "funcd/funcd.h"
#include "output.h"

static void print_text(cJSON *server)
{
    const char *version = ctl_get_string(server, "version");
    printf("Server Version: %s\n", version ? version : "<unknown>");
    cJSON_DeleteItemFromObjectCaseSensitive(server, "version");
    funcd_buf details = FUNCD_BUF_INIT;
    if (server->child && funcd_api_to_yaml(server, &details) == 0 && details.data)
        ctl_print_indented(details.data, "  ", stdout);
    funcd_buf_free(&details);
}

static int print_structured(const ctl_ctx *ctx, cJSON *server)
{
    cJSON *both = cJSON_CreateObject();
    if (!both || !cJSON_AddStringToObject(both, "clientVersion", FUNCD_VERSION_STRING)) {
        cJSON_Delete(both);
        cJSON_Delete(server);
        return ctl_fail("out of memory");
    }
    cJSON_AddItemToObject(both, "serverVersion", server);
    int rc = 0;
    if (ctx->output == CTL_OUT_JSON)
        ctl_print_json(both, stdout);
    else
        rc = ctl_print_yaml(both, stdout) == 0 ? 0 : CTL_EXIT_ERROR;
    cJSON_Delete(both);
    return rc;
}

int cmd_version(ctl_ctx *ctx, int argc, char **argv)
{
    if (argc > 0)
        return ctl_usage(ctx, "version takes no arguments");
    int structured = ctx->output == CTL_OUT_JSON || ctx->output == CTL_OUT_YAML;
    if (!structured)
        printf("Client Version: %s\n", FUNCD_VERSION_STRING);
    fflush(stdout);

    ctl_client *client = ctl_ctx_client(ctx);
    ctl_response resp = CTL_RESPONSE_INIT;
    cJSON *server = NULL;
    int rc;
    if (!client || ctl_request(client, "GET", "/version", NULL, &resp) != 0)
        rc = CTL_EXIT_ERROR;
    else if (resp.code != 200)
        rc = ctl_report_status(client, &resp, NULL, ctx->ns);
    else if (!(server = ctl_response_json(client, &resp)))
        rc = CTL_EXIT_ERROR;
    else if (structured) {
        rc = print_structured(ctx, server); /* takes `server` */
        server = NULL;
    } else {
        print_text(server);
        rc = 0;
    }
    cJSON_Delete(server);
    ctl_response_free(&resp);
    return rc;
}
