/*
 * What the embedded gateway tells the metrics (lib/metrics): each request
 * routed to a function is counted by its answer's status and duration, on
 * its own thread's counters, when it ends; and GET /metrics on the data
 * plane when the operator turned it on.
 */
#include "gateway/gateway.h"
#include "http/httpd.h"

void funcd_gw_track_end(gw_track *track, int status)
{
    if (!track->fn)
        return;
    funcd_metrics_fn_done(track->fn, track->slot, status,
                          funcd_metrics_now_ns() - track->start_ns);
    track->fn = NULL; /* exactly once */
}

void funcd_gw_track_rejected(gw_track *track, h2o_req_t *req, funcd_metrics_reason reason)
{
    if (!track->fn)
        return;
    funcd_metrics_fn_reject(track->fn, track->slot, reason);
    funcd_gw_track_end(track, req->res.status);
}

void funcd_gw_send_metrics(h2o_req_t *req, funcd_metrics *m)
{
    funcd_buf text = FUNCD_BUF_INIT;
    if (funcd_metrics_text(m, NULL, NULL, &text) < 0 || !text.data) {
        funcd_buf_free(&text);
        funcd_gw_send_status(req, 503, "ServiceUnavailable", "out of memory collecting metrics");
        return;
    }
    funcd_httpd_send(req, 200, FUNCD_METRICS_CONTENT_TYPE, text.data, text.len);
    funcd_buf_free(&text);
}
