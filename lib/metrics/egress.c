/* Counters of the egress gateway (egress.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/egress.h"

typedef struct entry {
    struct entry *next;
    char *ns, *fn;
    uint64_t allowed, denied, up, down, dns_allowed, dns_denied;
} entry;

struct funcd_metrics_egress {
    pthread_mutex_t lock;
    entry *list; /* by namespace, function */
};

funcd_metrics_egress *funcd_metrics_egress_new(void)
{
    funcd_metrics_egress *e = calloc(1, sizeof(*e));
    if (e)
        pthread_mutex_init(&e->lock, NULL);
    return e;
}

void funcd_metrics_egress_free(funcd_metrics_egress *e)
{
    if (!e)
        return;
    while (e->list) {
        entry *x = e->list;
        e->list = x->next;
        free(x->ns);
        free(x->fn);
        free(x);
    }
    pthread_mutex_destroy(&e->lock);
    free(e);
}

/* Under the lock: the entry of ns/fn, made when new (NULL: out of memory). */
static entry *find(funcd_metrics_egress *e, const char *ns, const char *fn)
{
    entry **pp = &e->list;
    for (; *pp; pp = &(*pp)->next) {
        int c = strcmp((*pp)->ns, ns);
        if (c == 0)
            c = strcmp((*pp)->fn, fn);
        if (c == 0)
            return *pp;
        if (c > 0)
            break;
    }
    entry *x = calloc(1, sizeof(*x));
    if (!x || !(x->ns = strdup(ns)) || !(x->fn = strdup(fn))) {
        if (x)
            free(x->ns);
        free(x);
        return NULL;
    }
    x->next = *pp;
    *pp = x;
    return x;
}

void funcd_metrics_egress_connection(funcd_metrics_egress *e, const char *ns, const char *fn,
                                     int allowed, uint64_t bytes_up, uint64_t bytes_down)
{
    if (!e)
        return;
    pthread_mutex_lock(&e->lock);
    entry *x = find(e, ns, fn);
    if (x) {
        if (allowed)
            x->allowed++;
        else
            x->denied++;
        x->up += bytes_up;
        x->down += bytes_down;
    }
    pthread_mutex_unlock(&e->lock);
}

void funcd_metrics_egress_dns(funcd_metrics_egress *e, const char *ns, const char *fn,
                              int allowed)
{
    if (!e)
        return;
    pthread_mutex_lock(&e->lock);
    entry *x = find(e, ns, fn);
    if (x) {
        if (allowed)
            x->dns_allowed++;
        else
            x->dns_denied++;
    }
    pthread_mutex_unlock(&e->lock);
}

static const funcd_metric_family families[] = {
    {"funcd_egress_connections_total",
     "Connections through the egress gateway's proxy, by decision (allowed, denied).",
     FUNCD_METRIC_COUNTER, ""},
    {"funcd_egress_bytes_total",
     "Bytes carried by the egress gateway, by direction (up: from the function).",
     FUNCD_METRIC_COUNTER, "bytes"},
    {"funcd_egress_dns_queries_total",
     "DNS questions to the egress gateway, by decision (allowed: forwarded; denied: NXDOMAIN).",
     FUNCD_METRIC_COUNTER, ""},
};

void funcd_metrics_egress_walk(funcd_metrics_egress *e, funcd_metrics_ns_filter allow,
                               void *allow_payload, const funcd_metrics_visitor *v)
{
    static const char *const words[3][2] = {
        {"allowed", "denied"}, {"up", "down"}, {"allowed", "denied"}};
    static const char *const label[3] = {"decision", "direction", "decision"};
    for (size_t f = 0; f < 3; f++) {
        v->family(v->payload, &families[f]);
        if (!e)
            continue;
        pthread_mutex_lock(&e->lock);
        for (entry *x = e->list; x; x = x->next) {
            if (allow && !allow(allow_payload, x->ns))
                continue;
            uint64_t n[3][2] = {{x->allowed, x->denied}, {x->up, x->down},
                                {x->dns_allowed, x->dns_denied}};
            for (size_t k = 0; k < 2; k++) {
                funcd_metric_label l[3] = {
                    {"namespace", x->ns}, {"function", x->fn}, {label[f], words[f][k]}};
                funcd_metric_sample s = {.labels = l, .n_labels = 3, .value = (double)n[f][k]};
                v->sample(v->payload, &families[f], &s);
            }
        }
        pthread_mutex_unlock(&e->lock);
    }
}
