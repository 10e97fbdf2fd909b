/*
 * GET /metrics on the control plane: the Prometheus text of lib/metrics.
 * Which token may read it (docs/observability.md): any valid one, of any
 * role, and it sees the series of functions in the namespaces it may read
 * (a token for "*" and an admin see all), plus the process series; with
 * --metrics-open no token is needed and every namespace is shown.
 */
#include <string.h>

#include "controlplane/api.h"
#include "metrics/metrics.h"

static int token_reads(void *payload, const char *ns)
{
    return funcd_token_allows(payload, ns, 0);
}

void funcd_cp_metrics(funcd_cp *cp, const funcd_cp_request *req, const funcd_token *t,
                      funcd_cp_response *resp)
{
    if (!(req->method_len == 3 && memcmp(req->method, "GET", 3) == 0) &&
        !(req->method_len == 4 && memcmp(req->method, "HEAD", 4) == 0)) {
        funcd_cp_status(resp, 405, "MethodNotAllowed", NULL, "metrics are read with GET");
        return;
    }
    if (!cp->metrics) {
        funcd_cp_status(resp, 404, "NotFound", NULL, "this platform keeps no metrics");
        return;
    }
    funcd_buf_reset(&resp->body);
    if (funcd_metrics_text(cp->metrics, t ? token_reads : NULL, (void *)t, &resp->body) < 0) {
        funcd_cp_status(resp, 503, "ServiceUnavailable", NULL, "out of memory collecting metrics");
        return;
    }
    resp->status = 200;
    resp->content_type = FUNCD_METRICS_CONTENT_TYPE;
}
