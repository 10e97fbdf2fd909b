/* Run records (workflow.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "funcd/sys/error.h"
#include "port/store.h"
#include "util/misc.h"
#include "workflow/workflow.h"

int funcd_workflow_run_key(char *out, size_t len, const char *prefix, const char *ns,
                           const char *id)
{
    int n = snprintf(out, len, "%s%s/%s", prefix, ns, id);
    if (n < 0 || (size_t)n >= len)
        return funcd_error_set(FUNCD_EINVAL, "a workflow run key is too long");
    return 0;
}

/* 32 hex digits of a new UUID, without its dashes. */
static void random_hex(char *out, size_t digits)
{
    char u[37];
    size_t n = 0;
    while (n < digits) {
        funcd_uuid4(u);
        for (const char *c = u; *c && n < digits; c++)
            if (*c != '-')
                out[n++] = *c;
    }
    out[n] = '\0';
}

cJSON *funcd_workflow_run_new(const char *ns, const cJSON *workflow, const cJSON *input)
{
    return funcd_workflow_run_new_id(ns, workflow, input, NULL);
}

cJSON *funcd_workflow_run_new_id(const char *ns, const cJSON *workflow, const cJSON *input,
                                 const char *given)
{
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(workflow, "metadata");
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(md, "name"));
    char id[FUNCD_WORKFLOW_MAX_RUN_ID], rnd[17], now[40], trace[33], span[17], tp[64];
    random_hex(rnd, 10);
    if (given)
        snprintf(id, sizeof(id), "%s", given);
    else
        snprintf(id, sizeof(id), "%.63s-%s", name ? name : "run", rnd);
    random_hex(trace, 32);
    random_hex(span, 16);
    snprintf(tp, sizeof(tp), "00-%s-%s-01", trace, span);
    funcd_rfc3339(funcd_now_ms(), now, sizeof(now));

    cJSON *run = cJSON_CreateObject();
    cJSON_AddStringToObject(run, "apiVersion", "funcd.dev/v1");
    cJSON_AddStringToObject(run, "kind", "WorkflowRun");
    cJSON *m = cJSON_AddObjectToObject(run, "metadata");
    cJSON_AddStringToObject(m, "namespace", ns);
    cJSON_AddStringToObject(m, "name", id);
    cJSON_AddStringToObject(m, "creationTimestamp", now);
    cJSON *labels = cJSON_AddObjectToObject(m, "labels");
    cJSON_AddStringToObject(labels, "funcd.dev/workflow", name ? name : "");
    cJSON *spec = cJSON_AddObjectToObject(run, "spec");
    cJSON_AddStringToObject(spec, "workflow", name ? name : "");
    cJSON_AddNumberToObject(spec, "workflowGeneration",
                            cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(md, "generation")));
    cJSON_AddStringToObject(spec, "traceparent", tp);
    cJSON_AddItemToObject(spec, "input", input ? cJSON_Duplicate(input, 1) : cJSON_CreateNull());
    cJSON_AddItemToObject(spec, "workflowSpec",
                          cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(workflow, "spec"), 1));
    cJSON *st = cJSON_AddObjectToObject(run, "status");
    cJSON_AddStringToObject(st, "phase", "Pending");
    cJSON_AddObjectToObject(st, "steps");
    /* any allocation that failed left a member out: no run rather than half a one */
    if (!cJSON_GetObjectItemCaseSensitive(st, "steps") ||
        !cJSON_GetObjectItemCaseSensitive(spec, "workflowSpec") ||
        !cJSON_GetObjectItemCaseSensitive(spec, "input") ||
        !cJSON_GetObjectItemCaseSensitive(m, "labels")) {
        cJSON_Delete(run);
        return NULL;
    }
    return run;
}

cJSON *funcd_workflow_run_decode(const void *value, size_t len, uint64_t revision)
{
    cJSON *run = cJSON_ParseWithLength(value, len);
    cJSON *md = cJSON_GetObjectItemCaseSensitive(run, "metadata");
    if (!cJSON_IsObject(md)) {
        cJSON_Delete(run);
        return NULL;
    }
    char rv[32];
    snprintf(rv, sizeof(rv), "%llu", (unsigned long long)revision);
    cJSON_DeleteItemFromObjectCaseSensitive(md, "resourceVersion");
    cJSON_AddStringToObject(md, "resourceVersion", rv);
    return run;
}

int funcd_workflow_run_finished(const cJSON *run)
{
    const char *phase = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(run, "status"), "phase"));
    return phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0 ||
                     strcmp(phase, "Cancelled") == 0);
}

/* Index entries of an anonymous run carry the mark: the active entry is
 * FUNCD_WORKFLOW_ACTIVE_ANONYMOUS, the held one "<length> anonymous". */
static int marked(const funcd_store_kv *kv)
{
    return memmem(kv->value, kv->len, "anonymous", 9) != NULL;
}

typedef struct unfinished {
    unsigned n, anon;
} unfinished;

static int count_one(const funcd_store_kv *kv, void *payload)
{
    unfinished *u = payload;
    u->anon += (unsigned)marked(kv);
    return ++u->n >= FUNCD_WORKFLOW_MAX_ACTIVE;
}

typedef struct held {
    unsigned n, anon;
    uint64_t bytes, anon_bytes;
} held;

static int add_held(const funcd_store_kv *kv, void *payload)
{
    held *h = payload;
    char num[24];
    size_t len = kv->len < sizeof(num) - 1 ? kv->len : sizeof(num) - 1;
    memcpy(num, kv->value, len);
    num[len] = '\0';
    uint64_t bytes = strtoull(num, NULL, 10);
    h->n++;
    h->bytes += bytes;
    if (marked(kv)) {
        h->anon++;
        h->anon_bytes += bytes;
    }
    return h->n >= FUNCD_WORKFLOW_MAX_HELD;
}

int funcd_workflow_run_anonymous(const cJSON *run)
{
    const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(run, "metadata"),
                                         "labels"),
        FUNCD_WORKFLOW_ANONYMOUS_LABEL));
    return v && strcmp(v, "true") == 0;
}

/* `share` percent of `cap`; at least 1 when the share is not 0. */
static uint64_t share_of(uint64_t cap, unsigned share)
{
    uint64_t n = cap / 100 * share + cap % 100 * share / 100;
    return n || !share ? n : 1;
}

/* The caps on the runs a namespace holds, checked against the index
 * entries; an anonymous run also against the anonymous share of each.
 * `len`: the new record's. 0, or FUNCD_ENOSPC (or a store error). The
 * caller may be anyone when the run is anonymous: its message names the
 * caps, never the namespace's figures. */
static int check_caps(funcd_store *s, const char *ns, size_t len, int anonymous, unsigned share)
{
    /* The index of unfinished runs counts them: a namespace holds at most
     * FUNCD_WORKFLOW_MAX_ACTIVE (a burst of events, or of API calls, cannot
     * queue runs without end). */
    char prefix[128];
    unfinished u = {0, 0};
    snprintf(prefix, sizeof(prefix), FUNCD_WORKFLOW_ACTIVE_PREFIX "%s/", ns);
    int rc = funcd_port_store_list(s, prefix, count_one, &u, NULL);
    if (rc < 0)
        return rc;
    if (u.n >= FUNCD_WORKFLOW_MAX_ACTIVE)
        return funcd_error_set(FUNCD_ENOSPC, "namespace %s has %u unfinished workflow runs, the "
                               "most it may have; start more once some finish", ns,
                               FUNCD_WORKFLOW_MAX_ACTIVE);
    if (anonymous && u.anon >= share_of(FUNCD_WORKFLOW_MAX_ACTIVE, share))
        return funcd_error_set(FUNCD_ENOSPC, "namespace %s has as many unfinished workflow runs "
                               "of unauthenticated callers as it takes from them (funcd "
                               "--queue-anonymous-share %u percent of the %u unfinished runs a "
                               "namespace may have); start more once some finish", ns, share,
                               FUNCD_WORKFLOW_MAX_ACTIVE);
    /* And every run it holds, finished ones too: a webhook's events, each
     * kept for the retention, cannot fill the store. */
    held h = {0, 0, 0, 0};
    snprintf(prefix, sizeof(prefix), FUNCD_WORKFLOW_HELD_PREFIX "%s/", ns);
    if ((rc = funcd_port_store_list(s, prefix, add_held, &h, NULL)) < 0)
        return rc;
    int full = h.n >= FUNCD_WORKFLOW_MAX_HELD || h.bytes + len > FUNCD_WORKFLOW_MAX_HELD_BYTES;
    if (full && !anonymous)
        return funcd_error_set(FUNCD_ENOSPC, "namespace %s holds %u workflow runs of %llu bytes, "
                               "the most it may (%u runs, %llu bytes, finished ones kept for "
                               "funcd --workflow-retention included); start more once old ones go",
                               ns, h.n, (unsigned long long)h.bytes, FUNCD_WORKFLOW_MAX_HELD,
                               (unsigned long long)FUNCD_WORKFLOW_MAX_HELD_BYTES);
    if (full)
        return funcd_error_set(FUNCD_ENOSPC, "namespace %s holds as many workflow runs as it may "
                               "(%u runs, %llu bytes, finished ones kept for funcd "
                               "--workflow-retention included); start more once old ones go", ns,
                               FUNCD_WORKFLOW_MAX_HELD,
                               (unsigned long long)FUNCD_WORKFLOW_MAX_HELD_BYTES);
    if (anonymous && (h.anon >= share_of(FUNCD_WORKFLOW_MAX_HELD, share) ||
                      h.anon_bytes + len > share_of(FUNCD_WORKFLOW_MAX_HELD_BYTES, share)))
        return funcd_error_set(FUNCD_ENOSPC, "namespace %s holds as many workflow runs of "
                               "unauthenticated callers as it takes from them (funcd "
                               "--queue-anonymous-share %u percent of the %u runs and %llu bytes "
                               "a namespace may hold, finished ones kept for funcd "
                               "--workflow-retention included); start more once old ones go", ns,
                               share, FUNCD_WORKFLOW_MAX_HELD,
                               (unsigned long long)FUNCD_WORKFLOW_MAX_HELD_BYTES);
    return 0;
}

static int store_run(funcd_store *s, const char *ns, const cJSON *run, uint64_t *rev,
                     int anonymous, unsigned share)
{
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(run, "metadata"), "name"));
    char key[300], active[300], kept[300];
    int rc = id ? funcd_workflow_run_key(key, sizeof(key), FUNCD_WORKFLOW_RUNS_PREFIX, ns, id)
                : funcd_error_set(FUNCD_EINVAL, "a workflow run without an id");
    if (rc == 0)
        rc = funcd_workflow_run_key(active, sizeof(active), FUNCD_WORKFLOW_ACTIVE_PREFIX, ns, id);
    if (rc == 0)
        rc = funcd_workflow_run_key(kept, sizeof(kept), FUNCD_WORKFLOW_HELD_PREFIX, ns, id);
    if (rc < 0)
        return rc;
    char *text = cJSON_PrintUnformatted(run);
    if (!text)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory storing a workflow run");
    size_t len = strlen(text);
    rc = check_caps(s, ns, len, anonymous, share);
    if (rc == 0)
        rc = funcd_port_store_put(s, key, text, len, FUNCD_STORE_ABSENT, rev);
    free(text);
    if (rc < 0)
        return rc;
    /* The record is what counts: without its index entries the engine still
     * finds it at its next full scan (a run whose held entry a crash lost
     * is not counted). */
    const char *mark = anonymous ? FUNCD_WORKFLOW_ACTIVE_ANONYMOUS : "{}";
    funcd_port_store_put(s, active, mark, strlen(mark), FUNCD_STORE_ANY, NULL);
    char size[40];
    snprintf(size, sizeof(size), "%zu%s", len, anonymous ? " anonymous" : "");
    funcd_port_store_put(s, kept, size, strlen(size), FUNCD_STORE_ANY, NULL);
    return 0;
}

int funcd_workflow_run_store(funcd_store *s, const char *ns, const cJSON *run, uint64_t *rev)
{
    return store_run(s, ns, run, rev, 0, 0);
}

int funcd_workflow_run_store_anonymous(funcd_store *s, const char *ns, cJSON *run, uint64_t *rev,
                                       unsigned share)
{
    cJSON *labels = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(run,
                                                                                      "metadata"),
                                                     "labels");
    cJSON_DeleteItemFromObjectCaseSensitive(labels, FUNCD_WORKFLOW_ANONYMOUS_LABEL);
    if (!cJSON_AddStringToObject(labels, FUNCD_WORKFLOW_ANONYMOUS_LABEL, "true"))
        return funcd_error_set(FUNCD_ENOMEM, "out of memory storing a workflow run");
    return store_run(s, ns, run, rev, 1, share > 100 ? 100 : share);
}
