/* Uploading a packed bundle (bundle.h): shared by deploy and deploy-site. */
#include "bundle.h"

#include <stdlib.h>

#include "cli.h"
#include "output.h"
#include "util/misc.h"


int ctl_bundle_upload(ctl_ctx *ctx, ctl_client *client, const funcd_buf *tgz, char **digest)
{
    char *path = ctl_api_path(client, ctx->ns, "bundles", NULL, NULL);
    ctl_response resp = CTL_RESPONSE_INIT;
    cJSON *answer = NULL;
    int rc;
    if (!path)
        rc = ctl_fail("out of memory");
    else if (ctl_request_body(client, "POST", path, "application/gzip", tgz->data, tgz->len,
                              &resp) != 0)
        rc = CTL_EXIT_ERROR;
    else if (resp.code != 200 && resp.code != 201)
        rc = ctl_report_status(client, &resp, "uploading the bundle", ctx->ns);
    else if (!(answer = ctl_response_json(client, &resp)))
        rc = CTL_EXIT_ERROR;
    else {
        const char *d = ctl_get_string(answer, "digest");
        *digest = d && funcd_has_prefix(d, "sha256:") ? funcd_strdup(d) : NULL;
        rc = *digest ? 0
                     : ctl_fail("%s accepted the bundle but its answer names no sha256 digest",
                                ctl_client_server(client));
    }
    cJSON_Delete(answer);
    ctl_response_free(&resp);
    free(path);
    return rc;
}
