/*
 * Workflows (docs/workflows.md, docs/adr/0047-workflow-runs.md): typed
 * edges checked against the store (edges.c), run records (runs.c) and the
 * engine that executes them (engine.c).
 *
 * A run is one store record, FUNCD_WORKFLOW_RUNS_PREFIX{ns}/{id}: the
 * Workflow's spec as it was when the run started, the input, and the
 * status of every step and item. The engine writes every transition there
 * (compare-and-swap on the revision) before it starts what follows, so a
 * restarted leader resumes each unfinished run from its record.
 */
#ifndef FUNCD_WORKFLOW_WORKFLOW_H
#define FUNCD_WORKFLOW_WORKFLOW_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "funcd/sys/store.h"
#include "util/log.h"

#define FUNCD_WORKFLOW_RUNS_PREFIX "/workflowruns/"
/* A cancel asked for: its own key, so that the API never races the engine's
 * compare-and-swap on the run record. */
#define FUNCD_WORKFLOW_CANCELS_PREFIX "/workflowcancels/"
/* The index of unfinished runs: FUNCD_WORKFLOW_ACTIVE_PREFIX{ns}/{id} exists
 * ("{}", or FUNCD_WORKFLOW_ACTIVE_ANONYMOUS) from the run's creation until the engine wrote its final phase;
 * the engine's tick lists it, not every run record. */
#define FUNCD_WORKFLOW_ACTIVE_PREFIX "/workflowactive/"
#define FUNCD_WORKFLOW_DEFAULT_PAYLOAD_LIMIT (1024 * 1024)
#define FUNCD_WORKFLOW_DEFAULT_RETENTION_MS (7ull * 24 * 3600 * 1000)
#define FUNCD_WORKFLOW_MAX_RUN_ID 96
/* A forEach step runs at most this many items: a longer list fails it. */
#define FUNCD_WORKFLOW_MAX_ITEMS 1000
/* A run's record is at most this long: outputs that would pass it fail the
 * run (they are dropped from the record). */
#define FUNCD_WORKFLOW_MAX_RECORD (16u << 20)
/* A run writes its record at most at this rate (bytes per second), and at
 * most every FUNCD_WORKFLOW_MIN_WRITE_GAP_MS: the transitions between two
 * writes are written together, and what they start waits for the write. */
#define FUNCD_WORKFLOW_WRITE_RATE (8u << 20)
#define FUNCD_WORKFLOW_MIN_WRITE_GAP_MS 20
/* Unfinished runs of one namespace at most: one more is refused
 * (FUNCD_ENOSPC) until one finishes. */
#define FUNCD_WORKFLOW_MAX_ACTIVE 1000
/* Every run a namespace holds, finished ones kept for the retention
 * included: FUNCD_WORKFLOW_HELD_PREFIX{ns}/{id} holds the length of its
 * record when created (an input of up to the payload limit), written with
 * it and removed with it; past either bound a new run is refused
 * (FUNCD_ENOSPC) until the retention removes old ones. */
#define FUNCD_WORKFLOW_HELD_PREFIX "/workflowheld/"
#define FUNCD_WORKFLOW_MAX_HELD 10000
#define FUNCD_WORKFLOW_MAX_HELD_BYTES (1ull << 30)
/* A run that someone the namespace did not authenticate started (an
 * unsigned webhook's event, ADR 0066) carries this label ("true"); its
 * entry in the index of unfinished runs is FUNCD_WORKFLOW_ACTIVE_ANONYMOUS
 * and its held entry "<length> anonymous", so the caps count such runs
 * apart from the store alone. */
#define FUNCD_WORKFLOW_ANONYMOUS_LABEL "funcd.dev/anonymous"
#define FUNCD_WORKFLOW_ACTIVE_ANONYMOUS "{\"anonymous\":true}"

/* ---- typed edges (edges.c) ---------------------------------------------------- */

/* Checks a validated Workflow against the store: every step's function
 * exists in `ns`, and on every edge whose two ends declare contracts the
 * producer's output (narrowed by the edge's JSONPath) is assignable to the
 * consumer's input. 0; FUNCD_EINVAL with `field` (spec.steps[i]...) and
 * `why` naming the edge and the first incompatible property, and `reason`
 * (FunctionNotFound or ContractMismatch); or a store error. */
int funcd_workflow_check(funcd_store *s, const char *ns, const cJSON *workflow, char *field,
                         size_t field_len, char *why, size_t why_len, const char **reason);

/* ---- run records (runs.c) ----------------------------------------------------- */

/* The key of a run. 0, or FUNCD_EINVAL when it would not fit. */
int funcd_workflow_run_key(char *out, size_t len, const char *prefix, const char *ns,
                           const char *id);

/* A new run record of `workflow` (a stored Workflow) with `input`
 * (borrowed JSON), in phase Pending, with a new id and traceparent. */
cJSON *funcd_workflow_run_new(const char *ns, const cJSON *workflow, const cJSON *input);
/* The same with the run id `id` ([a-z0-9-], at most FUNCD_WORKFLOW_MAX_RUN_ID - 1
 * bytes; NULL: a new one). */
cJSON *funcd_workflow_run_new_id(const char *ns, const cJSON *workflow, const cJSON *input,
                                 const char *id);

/* Stores a new run record (none of its id may exist) and then its entry in
 * the index of unfinished runs (a crash between the two: the engine's
 * periodic full scan adds the entry). 0 with the record's revision in
 * *rev; FUNCD_EEXISTS when a run of that id exists; a store error. Any
 * thread. */
int funcd_workflow_run_store(funcd_store *s, const char *ns, const cJSON *run, uint64_t *rev);
/* The same for a run that someone the namespace did not authenticate
 * started (an unsigned webhook's event): `run` is labelled so, and the
 * namespace's anonymous runs together hold at most `share` percent (at most
 * 100; 0: none) of each cap (FUNCD_WORKFLOW_MAX_ACTIVE,
 * FUNCD_WORKFLOW_MAX_HELD, FUNCD_WORKFLOW_MAX_HELD_BYTES), so that the
 * tenant's own runs (the API, signed webhooks, bus and cron sources) always
 * have the rest. FUNCD_ENOSPC names the caps and the share, never the
 * namespace's figures (the caller may be anyone). */
int funcd_workflow_run_store_anonymous(funcd_store *s, const char *ns, cJSON *run, uint64_t *rev,
                                       unsigned share);
/* Whether `run` carries FUNCD_WORKFLOW_ANONYMOUS_LABEL. */
int funcd_workflow_run_anonymous(const cJSON *run);

/* A stored record with metadata.resourceVersion set, or NULL. */
cJSON *funcd_workflow_run_decode(const void *value, size_t len, uint64_t revision);

/* Whether a run's phase is final (Succeeded, Failed, Cancelled). */
int funcd_workflow_run_finished(const cJSON *run);

/* ---- the engine (engine.c) ------------------------------------------------------ */

struct event_base;
struct funcd_invoker;
struct funcd_cluster;
typedef struct funcd_workflows funcd_workflows;

typedef struct funcd_workflows_config {
    struct event_base *loop;
    funcd_store *store;
    struct funcd_invoker *invoker;
    struct funcd_cluster *cluster; /* NULL: one node, which leads */
    const funcd_logger *logger;
    uint64_t step_timeout_ms;      /* 0: the function's spec.timeout */
    unsigned retry_attempts;       /* 0: 1 */
    uint64_t retention_ms;         /* 0: keep finished runs forever */
    size_t payload_limit;          /* 0: FUNCD_WORKFLOW_DEFAULT_PAYLOAD_LIMIT */
    unsigned tick_ms;              /* 0: 1000 */
} funcd_workflows_config;

int funcd_workflows_new(funcd_workflows **out, const funcd_workflows_config *cfg);
/* Watches the runs and starts the ticks (on the loop from then on). */
int funcd_workflows_start(funcd_workflows *w);
/* Before the invoker is freed: what is still running is dropped, not
 * failed (the next leader resumes it). */
void funcd_workflows_stop(funcd_workflows *w);
/* After the invoker is freed. NULL is fine. */
void funcd_workflows_free(funcd_workflows *w);

#endif
