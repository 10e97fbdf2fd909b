/* The EventSources' events into the delivery queue, and its outcomes back
 * into their status counts (sources.h, queue.h). */
#include "eventing/queue.h"
#include "eventing/sources.h"

int funcd_evsources_queue_submit(const funcd_evsources_event *ev, void *payload)
{
    funcd_queue_item item = {
        .ns = ev->ns,
        .function = ev->function,
        .headers = ev->headers,
        .body = ev->body,
        .body_len = ev->body_len,
        .delivery = {ev->attempts, ev->backoff_initial_ms, ev->backoff_max_ms, ev->timeout_ms},
        .id = ev->id,
        .origin = ev->origin,
        .anonymous = ev->anonymous,
    };
    char id[128];
    return funcd_queue_submit(payload, &item, id, sizeof(id));
}

static void on_outcome(const char *ns, const char *origin, const char *id,
                       funcd_queue_outcome outcome, int status, const char *error, void *arg)
{
    funcd_evsources_outcome(ns, origin, id,
                            outcome == FUNCD_QUEUE_DELIVERED ? 0
                            : outcome == FUNCD_QUEUE_RETRIED ? 1
                                                             : 2,
                            status, error, arg);
}

int funcd_evsources_queue_outcomes(struct funcd_queue *q, funcd_evsources *s)
{
    return funcd_queue_on_outcome(q, FUNCD_EVSOURCES_ORIGIN, on_outcome, s);
}
