/* The delivery queue's side of eventing's metrics (queue.h, lib/metrics/events.c). */
#include <string.h>

#include "eventing/queue.h"
#include "eventing/sources.h"
#include "metrics/metrics.h"

static void on_outcome(const char *ns, const char *origin, const char *id,
                       funcd_queue_outcome outcome, int status, const char *error, void *arg)
{
    if (!origin || strncmp(origin, FUNCD_EVSOURCES_ORIGIN, strlen(FUNCD_EVSOURCES_ORIGIN)) != 0)
        return;
    funcd_metrics_event(arg, ns, origin + strlen(FUNCD_EVSOURCES_ORIGIN),
                        outcome == FUNCD_QUEUE_DELIVERED ? FUNCD_METRICS_EVENT_DELIVERED
                        : outcome == FUNCD_QUEUE_RETRIED ? FUNCD_METRICS_EVENT_RETRIED
                                                         : FUNCD_METRICS_EVENT_DEADLETTERED);
}

static void depth(void *payload, unsigned *waiting, unsigned *running)
{
    funcd_queue_depth(payload, waiting, running);
}

static int deadletters(void *payload, funcd_metrics_dlq_put put, void *ctx)
{
    return funcd_queue_deadletter_counts(payload, put, ctx);
}

int funcd_queue_metrics_start(funcd_queue *q, struct funcd_metrics *m)
{
    if (!m)
        return 0;
    int rc = funcd_queue_on_outcome(q, FUNCD_EVSOURCES_ORIGIN, on_outcome, m);
    if (rc < 0)
        return rc;
    funcd_metrics_delivery_source src = {depth, deadletters, q};
    funcd_metrics_set_delivery_source(m, &src);
    return 0;
}

void funcd_queue_metrics_stop(struct funcd_metrics *m)
{
    if (m)
        funcd_metrics_set_delivery_source(m, NULL);
}
