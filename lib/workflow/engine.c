/*
 * The workflow engine (docs/adr/0047-workflow-runs.md): on the platform
 * loop of the lease holder, every unfinished run record (found through the
 * index FUNCD_WORKFLOW_ACTIVE_PREFIX each tick, and a full list of the
 * records every minute) is loaded and driven. Each pass over a run (advance) works out what changed: steps whose
 * dependencies finished become Running (or Skipped by `when`), items are
 * launched up to maxConcurrency, finished steps gather their outputs, and
 * the run ends. The record is written (compare-and-swap on its revision)
 * before any invocation that pass decided starts, and after each result
 * before the next pass; so whatever the record says was completed is never
 * run again, and an item it says is Running is invoked again after a crash,
 * with the same idempotency key.
 *
 * A write that fails (another node leads now, or the store is away) drops
 * the run from memory; the next tick loads it again if this node still
 * leads. Results of invocations of dropped runs are ignored.
 */
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api.h"
#include "api/jsonpath.h"
#include "cluster/nodes.h"
#include "funcd/sys/error.h"
#include "invoke/invoke.h"
#include "objects/objects.h"
#include "port/store.h"
#include "util/misc.h"
#include "workflow/workflow.h"

#define MAX_STEPS FUNCD_API_WORKFLOW_MAX_STEPS
#define DEFAULT_BACKOFF_MS 1000
#define MAX_BACKOFF_MS 60000

typedef struct run run;

struct funcd_workflows {
    funcd_workflows_config cfg;
    struct event *tick, *scan;
    funcd_store_watch *watch;
    run *runs;
    int stopping;
    int64_t next_full_ms; /* the next scan of every run record (retention, lost index entries) */
};

struct run {
    funcd_workflows *w;
    run *next;
    char key[256];
    char id[FUNCD_WORKFLOW_MAX_RUN_ID];
    char ns[64];
    cJSON *doc; /* the record as stored, without metadata.resourceVersion */
    uint64_t rev;
    unsigned pending; /* invocations and retry timers outstanding */
    int dead;         /* dropped: freed once nothing is pending */
    int64_t next_write_ms; /* monotonic: no write of the record before (write_gap) */
    int dirty;             /* changed since the last write (a failed attempt) */
    struct event *later;   /* advances the run at next_write_ms */
    size_t nsteps;
    const cJSON *step[MAX_STEPS]; /* spec.workflowSpec.steps, in order */
    unsigned char *busy[MAX_STEPS]; /* per item: 1 invoking, 2 waiting to retry */
    size_t nbusy[MAX_STEPS];
    struct call *waiting; /* calls whose retry timer is armed */
};

typedef struct call {
    run *r;
    struct call *next; /* in r->waiting */
    size_t step, index;
    char *body;
    char idem[FUNCD_WORKFLOW_MAX_RUN_ID + 160];
    struct event *timer;
} call;

/* ---- small JSON helpers ---------------------------------------------------------- */

static const cJSON *get(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

static const char *get_str(const cJSON *o, const char *k)
{
    return cJSON_GetStringValue(get(o, k));
}

static void set_item(cJSON *o, const char *k, cJSON *v)
{
    if (!v)
        return;
    if (get(o, k))
        cJSON_ReplaceItemInObjectCaseSensitive(o, k, v);
    else
        cJSON_AddItemToObject(o, k, v);
}

static void set_str(cJSON *o, const char *k, const char *v)
{
    set_item(o, k, cJSON_CreateString(v));
}

static void set_num(cJSON *o, const char *k, double v)
{
    set_item(o, k, cJSON_CreateNumber(v));
}

/* Milliseconds: a step takes less than a second, and the crash test
 * compares a call's start with the recorded completion. */
static void set_now(cJSON *o, const char *k)
{
    char now[40], ms[48];
    int64_t t = funcd_now_ms();
    funcd_rfc3339(t, now, sizeof(now));
    now[strcspn(now, "Z")] = '\0';
    snprintf(ms, sizeof(ms), "%s.%03dZ", now, (int)(t % 1000));
    set_str(o, k, ms);
}

static int phase_is(const cJSON *o, const char *phase)
{
    const char *p = get_str(o, "phase");
    return p && strcmp(p, phase) == 0;
}

static int step_done(const cJSON *st)
{
    return phase_is(st, "Succeeded") || phase_is(st, "Skipped") || phase_is(st, "Failed");
}

/* ---- runs in memory ---------------------------------------------------------------- */

static void run_free(run *r)
{
    if (r->later)
        event_free(r->later);
    for (size_t i = 0; i < MAX_STEPS; i++)
        free(r->busy[i]);
    cJSON_Delete(r->doc);
    free(r);
}

/* Frees the dropped runs nothing waits on. */
static void reap(funcd_workflows *w)
{
    for (run **p = &w->runs; *p;) {
        run *r = *p;
        if (r->dead && r->pending == 0) {
            *p = r->next;
            run_free(r);
        } else {
            p = &r->next;
        }
    }
}

static run *find_run(funcd_workflows *w, const char *key)
{
    for (run *r = w->runs; r; r = r->next)
        if (!r->dead && strcmp(r->key, key) == 0)
            return r;
    return NULL;
}

static cJSON *status_of(run *r)
{
    return cJSON_GetObjectItemCaseSensitive(r->doc, "status");
}

static cJSON *steps_status(run *r)
{
    cJSON *st = status_of(r);
    cJSON *steps = cJSON_GetObjectItemCaseSensitive(st, "steps");
    if (!cJSON_IsObject(steps)) {
        cJSON_DeleteItemFromObjectCaseSensitive(st, "steps");
        steps = cJSON_AddObjectToObject(st, "steps");
    }
    return steps;
}

static const char *step_name(run *r, size_t i)
{
    return get_str(r->step[i], "name");
}

static cJSON *step_status(run *r, size_t i)
{
    cJSON *steps = steps_status(r);
    cJSON *st = cJSON_GetObjectItemCaseSensitive(steps, step_name(r, i));
    if (!cJSON_IsObject(st)) {
        cJSON_DeleteItemFromObjectCaseSensitive(steps, step_name(r, i));
        st = cJSON_AddObjectToObject(steps, step_name(r, i));
        if (st)
            cJSON_AddStringToObject(st, "phase", "Pending");
    }
    return st;
}

/* Writes the record; 0, or -1 after dropping the run. */
/* Takes a run out of the index of unfinished runs (its record says it
 * finished; a failure leaves the entry, which the next tick removes). */
static void forget_active(funcd_workflows *w, const char *ns, const char *id)
{
    char key[300];
    if (funcd_workflow_run_key(key, sizeof(key), FUNCD_WORKFLOW_ACTIVE_PREFIX, ns, id) == 0)
        funcd_port_store_del(w->cfg.store, key, FUNCD_STORE_ANY, NULL);
}

static void finish(run *r, const char *phase, const char *message);

/* Drops from the record, by `level`: 1 every output (the steps', their
 * items' and the run's), 2 the items' messages too, 3 the items
 * themselves (each step keeps its phase and message). */
static void shed(run *r, int level)
{
    cJSON *st = status_of(r);
    cJSON_DeleteItemFromObjectCaseSensitive(st, "output");
    for (cJSON *s = steps_status(r) ? steps_status(r)->child : NULL; s; s = s->next) {
        cJSON_DeleteItemFromObjectCaseSensitive(s, "output");
        if (level >= 3) {
            cJSON_DeleteItemFromObjectCaseSensitive(s, "items");
            continue;
        }
        cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
        for (cJSON *it = items ? items->child : NULL; it; it = it->next) {
            cJSON_DeleteItemFromObjectCaseSensitive(it, "output");
            if (level >= 2)
                cJSON_DeleteItemFromObjectCaseSensitive(it, "message");
        }
    }
}

/* How long after writing `len` bytes the record is written again. */
static int64_t write_gap(size_t len)
{
    int64_t ms = (int64_t)(len * 1000 / FUNCD_WORKFLOW_WRITE_RATE);
    return ms > FUNCD_WORKFLOW_MIN_WRITE_GAP_MS ? ms : FUNCD_WORKFLOW_MIN_WRITE_GAP_MS;
}

/* A record past FUNCD_WORKFLOW_MAX_RECORD fails its run: the outputs go,
 * and what is written says why. Every write of a finished run drops it. */
static int persist(run *r)
{
    char *text = cJSON_PrintUnformatted(r->doc);
    if (text && strlen(text) > FUNCD_WORKFLOW_MAX_RECORD) {
        char msg[300];
        snprintf(msg, sizeof(msg), "the run's record grew to %zu bytes, more than the %u a run "
                 "may hold: its outputs were dropped (pass large results by reference, a blob "
                 "key, not by value)", strlen(text), FUNCD_WORKFLOW_MAX_RECORD);
        finish(r, "Failed", msg);
        for (int level = 1; text && level <= 3 && strlen(text) > FUNCD_WORKFLOW_MAX_RECORD;
             level++) { /* what the items said goes too, if their outputs were not enough */
            free(text);
            shed(r, level);
            text = cJSON_PrintUnformatted(r->doc);
        }
    }
    uint64_t rev = 0;
    int rc = text ? funcd_port_store_put(r->w->cfg.store, r->key, text, strlen(text), r->rev, &rev)
                  : funcd_error_set(FUNCD_ENOMEM, "out of memory encoding a workflow run");
    size_t len = text ? strlen(text) : 0;
    free(text);
    if (rc < 0) {
        funcd_log(r->w->cfg.logger, FUNCD_LOG_WARN,
                  "workflow run %s/%s: writing its record: %s (it resumes from the stored one)",
                  r->ns, r->id, funcd_error_last()->message);
        r->dead = 1;
        return -1;
    }
    r->rev = rev;
    r->dirty = 0;
    r->next_write_ms = funcd_mono_ms() + write_gap(len);
    if (funcd_workflow_run_finished(r->doc)) { /* no longer costs the tick anything */
        forget_active(r->w, r->ns, r->id);
        r->dead = 1; /* done here; calls still out are ignored */
    }
    return 0;
}

/* The run document paths read: {input, steps: {NAME: {output}}}, with
 * item and index inside a forEach. References, not copies. */
static cJSON *view(run *r, const cJSON *item, long index)
{
    cJSON *v = cJSON_CreateObject();
    cJSON *spec = cJSON_GetObjectItemCaseSensitive(r->doc, "spec");
    cJSON *steps = cJSON_AddObjectToObject(v, "steps");
    if (!v || !steps) {
        cJSON_Delete(v);
        return NULL;
    }
    cJSON_AddItemReferenceToObject(v, "input", cJSON_GetObjectItemCaseSensitive(spec, "input"));
    cJSON *ss = steps_status(r);
    for (cJSON *s = ss ? ss->child : NULL; s; s = s->next) {
        cJSON *out = cJSON_GetObjectItemCaseSensitive(s, "output");
        cJSON *one = cJSON_AddObjectToObject(steps, s->string);
        if (one && out)
            cJSON_AddItemReferenceToObject(one, "output", out);
    }
    if (item) {
        cJSON_AddItemReferenceToObject(v, "item", (cJSON *)item);
        cJSON_AddNumberToObject(v, "index", (double)index);
    }
    return v;
}

static const cJSON *eval_path(const char *text, const cJSON *doc)
{
    funcd_jsonpath p;
    if (!text || funcd_jsonpath_parse(text, 1, &p, NULL, 0) < 0)
        return NULL;
    return funcd_jsonpath_get(&p, doc);
}

static void finish(run *r, const char *phase, const char *message)
{
    cJSON *st = status_of(r);
    set_str(st, "phase", phase);
    set_now(st, "completionTime");
    if (message)
        set_str(st, "message", message);
    if (strcmp(phase, "Succeeded") == 0) {
        const cJSON *spec = get(get(r->doc, "spec"), "workflowSpec");
        const char *out_path = get_str(spec, "output");
        cJSON *v = view(r, NULL, 0);
        const cJSON *out = NULL;
        if (out_path)
            out = eval_path(out_path, v);
        else if (r->nsteps) /* the last step's output */
            out = get(get(get(v, "steps"), step_name(r, r->nsteps - 1)), "output");
        set_item(st, "output", out ? cJSON_Duplicate(out, 1) : cJSON_CreateNull());
        cJSON_Delete(v);
    }
}

/* ---- settings of a step -------------------------------------------------------- */

static unsigned attempts_of(run *r, size_t i)
{
    const cJSON *a = get(get(r->step[i], "retry"), "attempts");
    if (cJSON_IsNumber(a) && a->valuedouble >= 1)
        return (unsigned)a->valuedouble;
    return r->w->cfg.retry_attempts ? r->w->cfg.retry_attempts : 1;
}

static uint64_t duration_of(const cJSON *o, const char *k, uint64_t dflt)
{
    uint64_t ms;
    const char *s = get_str(o, k);
    return s && funcd_parse_duration_ms(s, &ms) == 0 ? ms : dflt;
}

static uint64_t backoff_of(run *r, size_t i, unsigned attempt)
{
    uint64_t ms = duration_of(get(r->step[i], "retry"), "backoff", DEFAULT_BACKOFF_MS);
    for (unsigned k = 1; k < attempt && ms < MAX_BACKOFF_MS; k++)
        ms *= 2;
    return ms < MAX_BACKOFF_MS ? ms : MAX_BACKOFF_MS;
}

static size_t payload_limit(const funcd_workflows *w)
{
    return w->cfg.payload_limit ? w->cfg.payload_limit : FUNCD_WORKFLOW_DEFAULT_PAYLOAD_LIMIT;
}

/* ---- advancing a run ------------------------------------------------------------- */

typedef struct launch {
    size_t step, index;
} launch;

static void advance(run *r);
static void start_call(run *r, size_t step, size_t index);

static int ensure_busy(run *r, size_t i, size_t n)
{
    if (r->nbusy[i] >= n)
        return 0;
    unsigned char *b = realloc(r->busy[i], n ? n : 1);
    if (!b)
        return -1;
    memset(b + r->nbusy[i], 0, n - r->nbusy[i]);
    r->busy[i] = b;
    r->nbusy[i] = n;
    return 0;
}

/* A Pending step whose dependencies finished: Skipped, or Running with its
 * items. 1 when the step failed at once (its forEach names no list). */
static int begin_step(run *r, size_t i, cJSON *st)
{
    const cJSON *step = r->step[i];
    cJSON *v = view(r, NULL, 0);
    const char *when = get_str(step, "when");
    int yes = 1, failed = 0;
    char why[256];
    if (when && funcd_condition_eval(when, v, &yes, NULL, NULL, why, sizeof(why)) < 0)
        yes = 0; /* admission parsed it: not reached */
    cJSON *items = cJSON_CreateArray();
    if (!yes) {
        set_str(st, "phase", "Skipped");
        set_now(st, "startTime");
        set_now(st, "completionTime");
        set_str(st, "message", "`when` is false");
        cJSON_Delete(items);
        cJSON_Delete(v);
        return 0;
    }
    const char *each = get_str(step, "forEach");
    size_t n = 1;
    if (each) {
        const cJSON *list = eval_path(each, v);
        int len = cJSON_IsArray(list) ? cJSON_GetArraySize(list) : 0;
        if (!cJSON_IsArray(list) || len > FUNCD_WORKFLOW_MAX_ITEMS) {
            char msg[600];
            if (cJSON_IsArray(list))
                snprintf(msg, sizeof(msg), "forEach %s names a list of %d items, more than the "
                         "%d a step may run", each, len, FUNCD_WORKFLOW_MAX_ITEMS);
            else
                snprintf(msg, sizeof(msg), "forEach %s names %s, not a list", each,
                         list ? "a value" : "nothing");
            set_str(st, "phase", "Failed");
            set_str(st, "message", msg);
            failed = 1;
            n = 0;
        } else {
            n = (size_t)cJSON_GetArraySize(list);
        }
    }
    for (size_t k = 0; k < n; k++) {
        cJSON *it = cJSON_CreateObject();
        cJSON_AddStringToObject(it, "phase", "Pending");
        cJSON_AddNumberToObject(it, "attempts", 0);
        cJSON_AddItemToArray(items, it);
    }
    set_item(st, "items", items);
    set_now(st, "startTime");
    set_num(st, "attempts", 0);
    if (!failed)
        set_str(st, "phase", "Running");
    cJSON_Delete(v);
    return failed;
}

/* The output of a step whose items all succeeded. */
static void gather(run *r, size_t i, cJSON *st)
{
    cJSON *items = cJSON_GetObjectItemCaseSensitive(st, "items");
    cJSON *out;
    if (get_str(r->step[i], "forEach")) {
        out = cJSON_CreateArray();
        for (cJSON *it = items ? items->child : NULL; it; it = it->next) {
            const cJSON *o = get(it, "output");
            cJSON_AddItemToArray(out, o ? cJSON_Duplicate(o, 1) : cJSON_CreateNull());
        }
    } else {
        const cJSON *o = get(items ? items->child : NULL, "output");
        out = o ? cJSON_Duplicate(o, 1) : cJSON_CreateNull();
    }
    set_item(st, "output", out);
    set_str(st, "phase", "Succeeded");
    set_now(st, "completionTime");
}

static int deps_done(run *r, size_t i)
{
    const cJSON *deps = get(r->step[i], "dependsOn");
    cJSON *ss = steps_status(r);
    for (const cJSON *d = cJSON_IsArray(deps) ? deps->child : NULL; d; d = d->next) {
        const cJSON *st = get(ss, cJSON_GetStringValue(d));
        if (!phase_is(st, "Succeeded") && !phase_is(st, "Skipped"))
            return 0;
    }
    return 1;
}

/* One pass over step i: 1 when it changed the record. Items to start go
 * into `todo`. A failed step fails the run (its name in the message). */
static int step_pass(run *r, size_t i, launch *todo, size_t *ntodo, size_t cap, int *run_failed)
{
    cJSON *st = step_status(r, i);
    int changed = 0;
    if (!st || step_done(st) || !deps_done(r, i))
        return 0;
    if (phase_is(st, "Pending")) {
        changed = 1;
        if (begin_step(r, i, st)) {
            *run_failed = 1;
            return 1;
        }
        if (phase_is(st, "Skipped"))
            return 1;
    }
    cJSON *items = cJSON_GetObjectItemCaseSensitive(st, "items");
    size_t n = (size_t)cJSON_GetArraySize(items);
    if (ensure_busy(r, i, n) < 0)
        return changed;
    const cJSON *mc = get(r->step[i], "maxConcurrency");
    size_t max = cJSON_IsNumber(mc) && mc->valuedouble >= 1 ? (size_t)mc->valuedouble : SIZE_MAX;
    size_t running = 0, j = 0;
    for (size_t k = 0; k < n; k++)
        running += r->busy[i][k] != 0;
    int all_done = 1;
    const cJSON *failed = NULL;
    size_t failed_index = 0;
    for (cJSON *it = items ? items->child : NULL; it; it = it->next, j++) {
        if (phase_is(it, "Succeeded"))
            continue;
        if (phase_is(it, "Failed")) {
            if (!failed)
                failed = it, failed_index = j;
            continue;
        }
        all_done = 0;
        if (r->busy[i][j] || running >= max || *ntodo == cap)
            continue;
        set_str(it, "phase", "Running");
        set_num(it, "attempts", cJSON_GetNumberValue(get(it, "attempts")) + 1);
        set_num(st, "attempts", cJSON_GetNumberValue(get(st, "attempts")) + 1);
        r->busy[i][j] = 1;
        running++;
        todo[(*ntodo)++] = (launch){i, j};
        changed = 1;
    }
    if (failed) {
        char msg[700];
        if (get_str(r->step[i], "forEach"))
            snprintf(msg, sizeof(msg), "item %zu: %s", failed_index,
                     get_str(failed, "message") ? get_str(failed, "message") : "failed");
        else
            snprintf(msg, sizeof(msg), "%s",
                     get_str(failed, "message") ? get_str(failed, "message") : "failed");
        set_str(st, "phase", "Failed");
        set_str(st, "message", msg);
        set_now(st, "completionTime");
        *run_failed = 1;
        return 1;
    }
    if (all_done) {
        gather(r, i, st);
        return 1;
    }
    return changed;
}

static void advance(run *r);

static void on_later(evutil_socket_t fd, short what, void *arg)
{
    run *r = arg;
    funcd_workflows *w = r->w;
    advance(r);
    reap(w);
}

/* 1 when the record was written less than its gap ago: the run advances
 * (writes, then starts what follows) once the gap is over. */
static int too_soon(run *r)
{
    int64_t wait = r->next_write_ms - funcd_mono_ms();
    if (wait <= 0 || (!r->later && !(r->later = evtimer_new(r->w->cfg.loop, on_later, r))))
        return 0;
    if (!evtimer_pending(r->later, NULL)) {
        struct timeval tv = {(time_t)(wait / 1000), (suseconds_t)(wait % 1000) * 1000};
        evtimer_add(r->later, &tv);
    }
    return 1;
}

static void advance(run *r)
{
    if (r->dead || r->w->stopping || too_soon(r))
        return;
    cJSON *st = status_of(r);
    int changed = 0, run_failed = 0;
    if (phase_is(st, "Pending")) {
        set_str(st, "phase", "Running");
        set_now(st, "startTime");
        changed = 1;
    }
    size_t cap = 256, ntodo = 0;
    launch todo[256];
    for (int progress = 1; progress && !run_failed;) {
        progress = 0;
        for (size_t i = 0; i < r->nsteps && !run_failed; i++)
            progress |= step_pass(r, i, todo, &ntodo, cap, &run_failed);
        changed |= progress;
    }
    if (run_failed) {
        char msg[800];
        for (size_t i = 0; i < r->nsteps; i++) {
            cJSON *s = step_status(r, i);
            if (phase_is(s, "Failed")) {
                snprintf(msg, sizeof(msg), "step %s failed: %s", step_name(r, i),
                         get_str(s, "message") ? get_str(s, "message") : "");
                break;
            }
        }
        finish(r, "Failed", msg);
    } else {
        size_t done = 0;
        for (size_t i = 0; i < r->nsteps; i++)
            done += step_done(step_status(r, i));
        if (done == r->nsteps) {
            finish(r, "Succeeded", NULL);
            changed = 1;
        }
    }
    if (!changed && !r->dirty)
        return;
    if (persist(r) < 0 || r->dead) /* written finished: calls still out are ignored */
        return;
    for (size_t k = 0; k < ntodo && !r->dead; k++)
        start_call(r, todo[k].step, todo[k].index);
}

/* ---- invocations ------------------------------------------------------------------- */

static cJSON *item_status(run *r, size_t step, size_t index)
{
    cJSON *items = cJSON_GetObjectItemCaseSensitive(step_status(r, step), "items");
    return cJSON_GetArrayItem(items, (int)index);
}

static void call_free(call *c)
{
    if (c->timer)
        event_free(c->timer);
    free(c->body);
    free(c);
}

static void unlink_waiting(run *r, call *c)
{
    for (call **p = &r->waiting; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            return;
        }
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    call *c = arg;
    run *r = c->r;
    (void)fd;
    (void)what;
    unlink_waiting(r, c);
    r->pending--;
    if (c->step < MAX_STEPS && c->index < r->nbusy[c->step])
        r->busy[c->step][c->index] = 0;
    call_free(c);
    advance(r);
    reap(r->w);
}

/* Item failed an attempt: wait and try again, or fail it. */
static void attempt_failed(run *r, call *c, cJSON *it, const char *msg, int retryable)
{
    unsigned attempts = (unsigned)cJSON_GetNumberValue(get(it, "attempts"));
    char text[700];
    snprintf(text, sizeof(text), "attempt %u: %s", attempts, msg);
    set_str(it, "message", text);
    if (retryable && attempts < attempts_of(r, c->step)) {
        struct timeval tv;
        uint64_t ms = backoff_of(r, c->step, attempts);
        tv.tv_sec = (time_t)(ms / 1000);
        tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
        c->timer = evtimer_new(r->w->cfg.loop, on_retry, c);
        if (c->timer && evtimer_add(c->timer, &tv) == 0) {
            r->busy[c->step][c->index] = 2;
            r->pending++;
            c->next = r->waiting;
            r->waiting = c;
            /* the failed attempt is recorded with the run's next write (its
             * gap applies: retries without a backoff cannot write faster);
             * the retry after the wait. A write that fails drops the run,
             * and on_retry lets the call go. */
            r->dirty = 1;
            if (!too_soon(r))
                persist(r);
            return;
        }
    }
    set_str(it, "phase", "Failed");
    set_now(it, "completionTime");
    call_free(c);
    advance(r);
}

static cJSON *parse_output(const funcd_invoke_res *res)
{
    if (res->body_len == 0)
        return cJSON_CreateNull();
    cJSON *v = cJSON_ParseWithLength(res->body, res->body_len);
    if (v)
        return v;
    /* not JSON: the text itself */
    char *s = funcd_strndup(res->body, res->body_len);
    v = s ? cJSON_CreateString(s) : NULL;
    free(s);
    return v;
}

static void on_done(const funcd_invoke_res *res, void *arg)
{
    call *c = arg;
    run *r = c->r;
    funcd_workflows *w = r->w;
    r->pending--;
    if (c->index < r->nbusy[c->step])
        r->busy[c->step][c->index] = 0;
    if (r->dead || w->stopping) {
        call_free(c);
        reap(w);
        return;
    }
    cJSON *it = item_status(r, c->step, c->index);
    size_t limit = payload_limit(w);
    char msg[600];
    if (!it) {
        call_free(c);
    } else if (!res->error && res->status >= 200 && res->status < 300) {
        if (res->truncated || res->body_len > limit) {
            snprintf(msg, sizeof(msg), "the output is larger than the payload limit of %zu bytes",
                     limit);
            attempt_failed(r, c, it, msg, 0);
        } else {
            cJSON *out = parse_output(res);
            set_item(it, "output", out ? out : cJSON_CreateNull());
            set_str(it, "phase", "Succeeded");
            cJSON_DeleteItemFromObjectCaseSensitive(it, "message");
            set_now(it, "completionTime");
            call_free(c);
            advance(r);
        }
    } else {
        if (res->status == 504)
            snprintf(msg, sizeof(msg), "timed out (%s)", res->error ? res->error : "no answer");
        else if (res->error)
            snprintf(msg, sizeof(msg), "status %d: %s", res->status, res->error);
        else /* the body is not NUL-terminated: its first bytes, at most 200 */
            snprintf(msg, sizeof(msg), "status %d: %.*s", res->status,
                     (int)(res->body_len < 200 ? res->body_len : 200),
                     res->body_len ? (const char *)res->body : "");
        attempt_failed(r, c, it, msg, 1);
    }
    reap(w);
}

static void start_call(run *r, size_t step, size_t index)
{
    funcd_workflows *w = r->w;
    cJSON *it = item_status(r, step, index);
    call *c = calloc(1, sizeof(*c));
    if (!c || !it) {
        free(c);
        r->dead = 1; /* out of memory: the next tick reloads the run */
        return;
    }
    c->r = r;
    c->step = step;
    c->index = index;
    const cJSON *s = r->step[step];
    const char *each = get_str(s, "forEach");
    cJSON *v0 = view(r, NULL, 0);
    const cJSON *item = NULL;
    const cJSON *list = each ? eval_path(each, v0) : NULL;
    if (each)
        item = cJSON_GetArrayItem(list, (int)index);
    cJSON *v = view(r, item, (long)index);
    const char *in_path = get_str(s, "input");
    const cJSON *input = eval_path(in_path ? in_path : each ? "$.item" : "$.input", v);
    c->body = input ? cJSON_PrintUnformatted(input) : funcd_strdup("null");
    cJSON_Delete(v);
    cJSON_Delete(v0);
    snprintf(c->idem, sizeof(c->idem), "%s/%s/%zu", r->id, step_name(r, step), index);
    if (!c->body) {
        call_free(c);
        r->dead = 1;
        return;
    }
    size_t limit = payload_limit(w);
    r->pending++;
    if (strlen(c->body) > limit) {
        char msg[200];
        r->pending--;
        r->busy[step][index] = 0;
        snprintf(msg, sizeof(msg), "the input is larger than the payload limit of %zu bytes",
                 limit);
        attempt_failed(r, c, it, msg, 0);
        return;
    }
    const char *headers[] = {"Content-Type", "application/json", "X-Funcd-Idempotency-Key",
                             c->idem, NULL};
    const char *fn = get_str(s, "function");
    funcd_invoke_req req = {
        .ns = r->ns,
        .name = fn,
        .path = "",
        .headers = headers,
        .body = c->body,
        .body_len = strlen(c->body),
        .timeout_ms = duration_of(s, "timeout", w->cfg.step_timeout_ms),
        .max_response = limit + 1,
        .traceparent = get_str(get(r->doc, "spec"), "traceparent"),
    };
    int rc = funcd_invoke(w->cfg.invoker, &req, on_done, c);
    if (rc < 0) {
        r->pending--;
        r->busy[step][index] = 0;
        attempt_failed(r, c, it, funcd_error_last()->message, 1);
    }
}

/* ---- loading, cancelling, sweeping ------------------------------------------------ */

static void load_run(funcd_workflows *w, const char *key, const char *value, size_t len,
                     uint64_t rev)
{
    run *r = calloc(1, sizeof(*r));
    if (!r)
        return;
    r->w = w;
    r->rev = rev;
    snprintf(r->key, sizeof(r->key), "%s", key);
    r->doc = cJSON_ParseWithLength(value, len);
    const cJSON *md = get(r->doc, "metadata");
    snprintf(r->ns, sizeof(r->ns), "%s", get_str(md, "namespace") ? get_str(md, "namespace") : "");
    snprintf(r->id, sizeof(r->id), "%s", get_str(md, "name") ? get_str(md, "name") : "");
    const cJSON *steps = get(get(get(r->doc, "spec"), "workflowSpec"), "steps");
    for (const cJSON *s = cJSON_IsArray(steps) ? steps->child : NULL; s && r->nsteps < MAX_STEPS;
         s = s->next)
        r->step[r->nsteps++] = s;
    if (!cJSON_IsObject(status_of(r)) || !r->ns[0] || !r->id[0] || r->nsteps == 0) {
        funcd_log(w->cfg.logger, FUNCD_LOG_WARN, "workflow run record %s is not valid; left as "
                  "it is", key);
        run_free(r);
        return;
    }
    r->next = w->runs;
    w->runs = r;
    advance(r);
}

typedef struct listed {
    char *key;
    char *value;
    size_t len;
    uint64_t rev;
} listed;

typedef struct listing {
    listed *v;
    size_t n, cap;
} listing;

static int collect(const funcd_store_kv *kv, void *payload)
{
    listing *l = payload;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        listed *v = realloc(l->v, cap * sizeof(*v));
        if (!v)
            return 1;
        l->v = v;
        l->cap = cap;
    }
    listed *e = &l->v[l->n];
    e->key = funcd_strdup(kv->key);
    e->value = funcd_strndup(kv->value, kv->len);
    e->len = kv->len;
    e->rev = kv->revision;
    if (!e->key || !e->value) {
        free(e->key);
        free(e->value);
        return 1;
    }
    l->n++;
    return 0;
}

static void listing_free(listing *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].key);
        free(l->v[i].value);
    }
    free(l->v);
}

static void cancel_runs(funcd_workflows *w)
{
    listing l = {0};
    if (funcd_port_store_list(w->cfg.store, FUNCD_WORKFLOW_CANCELS_PREFIX, collect, &l, NULL) < 0) {
        listing_free(&l);
        return;
    }
    for (size_t i = 0; i < l.n; i++) {
        char key[300];
        snprintf(key, sizeof(key), FUNCD_WORKFLOW_RUNS_PREFIX "%s",
                 l.v[i].key + strlen(FUNCD_WORKFLOW_CANCELS_PREFIX));
        run *r = find_run(w, key);
        funcd_store_value sv = {0};
        if (r) {
            finish(r, "Cancelled", "cancelled on request");
            if (persist(r) == 0)
                r->dead = 1;
        } else if (funcd_port_store_get(w->cfg.store, key, &sv) == 0) {
            cJSON *doc = cJSON_ParseWithLength(sv.value, sv.len);
            if (doc && !funcd_workflow_run_finished(doc)) {
                run tmp = {.w = w, .doc = doc, .rev = sv.revision};
                finish(&tmp, "Cancelled", "cancelled on request");
                char *text = cJSON_PrintUnformatted(doc);
                if (text && funcd_port_store_put(w->cfg.store, key, text, strlen(text),
                                                 sv.revision, NULL) == 0) {
                    const cJSON *md = get(doc, "metadata");
                    if (get_str(md, "namespace") && get_str(md, "name"))
                        forget_active(w, get_str(md, "namespace"), get_str(md, "name"));
                }
                free(text);
            }
            cJSON_Delete(doc);
            free(sv.value);
        }
        funcd_port_store_del(w->cfg.store, l.v[i].key, l.v[i].rev, NULL);
    }
    listing_free(&l);
}

/* What set_now writes ("2026-12-02T03:32:00.123Z"), in ms; -1. */
static int64_t parse_rfc3339_ms(const char *s)
{
    struct tm tm = {0};
    int frac = 0;
    char z = 0;
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d.%3d%c", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
               &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &frac, &z) != 8 || z != 'Z')
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    time_t t = timegm(&tm);
    return t == (time_t)-1 ? -1 : (int64_t)t * 1000 + frac;
}

static int expired(const funcd_workflows *w, const char *value, size_t len)
{
    if (!w->cfg.retention_ms)
        return 0;
    cJSON *doc = cJSON_ParseWithLength(value, len);
    const char *done = get_str(get(doc, "status"), "completionTime");
    int64_t at = done ? parse_rfc3339_ms(done) : -1;
    cJSON_Delete(doc);
    return at >= 0 && funcd_now_ms() - at >= (int64_t)w->cfg.retention_ms;
}

/* Every run record: unfinished ones not in memory are loaded (and put
 * back in the index if a crash left them out of it), finished ones past
 * the retention deleted. At the start, then every minute (every half
 * retention when that is shorter). */
static void drive_all(funcd_workflows *w)
{
    listing l = {0};
    if (funcd_port_store_list(w->cfg.store, FUNCD_WORKFLOW_RUNS_PREFIX, collect, &l, NULL) < 0) {
        listing_free(&l);
        return;
    }
    for (size_t i = 0; i < l.n && !w->stopping; i++) {
        listed *e = &l.v[i];
        if (find_run(w, e->key))
            continue;
        cJSON *doc = cJSON_ParseWithLength(e->value, e->len);
        int finished = funcd_workflow_run_finished(doc);
        const char *mark = funcd_workflow_run_anonymous(doc) ? FUNCD_WORKFLOW_ACTIVE_ANONYMOUS
                                                             : "{}";
        cJSON_Delete(doc);
        if (!finished) {
            char active[300];
            snprintf(active, sizeof(active), FUNCD_WORKFLOW_ACTIVE_PREFIX "%s",
                     e->key + strlen(FUNCD_WORKFLOW_RUNS_PREFIX));
            funcd_port_store_put(w->cfg.store, active, mark, strlen(mark), FUNCD_STORE_ABSENT,
                                 NULL);
            load_run(w, e->key, e->value, e->len, e->rev);
        } else if (expired(w, e->value, e->len) &&
                   funcd_port_store_del(w->cfg.store, e->key, e->rev, NULL) == 0) {
            char kept[300];
            snprintf(kept, sizeof(kept), FUNCD_WORKFLOW_HELD_PREFIX "%s",
                     e->key + strlen(FUNCD_WORKFLOW_RUNS_PREFIX));
            funcd_port_store_del(w->cfg.store, kept, FUNCD_STORE_ANY, NULL);
        }
    }
    listing_free(&l);
}

/* Each tick: only the index of unfinished runs, and the records it names
 * that are not in memory yet. Entries of runs that finished or went are
 * removed. */
static void drive_active(funcd_workflows *w)
{
    listing l = {0};
    if (funcd_port_store_list(w->cfg.store, FUNCD_WORKFLOW_ACTIVE_PREFIX, collect, &l, NULL) < 0) {
        listing_free(&l);
        return;
    }
    for (size_t i = 0; i < l.n && !w->stopping; i++) {
        char key[300];
        snprintf(key, sizeof(key), FUNCD_WORKFLOW_RUNS_PREFIX "%s",
                 l.v[i].key + strlen(FUNCD_WORKFLOW_ACTIVE_PREFIX));
        if (find_run(w, key))
            continue;
        funcd_store_value sv = {0};
        int rc = funcd_port_store_get(w->cfg.store, key, &sv);
        if (rc == FUNCD_ENOTFOUND) {
            funcd_port_store_del(w->cfg.store, l.v[i].key, l.v[i].rev, NULL);
            continue;
        }
        if (rc < 0)
            break; /* the store: next tick */
        cJSON *doc = cJSON_ParseWithLength(sv.value, sv.len);
        int finished = funcd_workflow_run_finished(doc);
        cJSON_Delete(doc);
        if (finished)
            funcd_port_store_del(w->cfg.store, l.v[i].key, l.v[i].rev, NULL);
        else
            load_run(w, key, sv.value, sv.len, sv.revision);
        free(sv.value);
    }
    listing_free(&l);
}

static uint64_t full_every_ms(const funcd_workflows *w)
{
    uint64_t every = 60000;
    if (w->cfg.retention_ms && w->cfg.retention_ms / 2 < every)
        every = w->cfg.retention_ms / 2;
    return every < w->cfg.tick_ms ? w->cfg.tick_ms : every;
}

static void drive(funcd_workflows *w)
{
    int64_t now = funcd_now_ms();
    if (now >= w->next_full_ms) {
        w->next_full_ms = now + (int64_t)full_every_ms(w);
        drive_all(w);
    } else {
        drive_active(w);
    }
}

/* ---- Workflow readiness ---------------------------------------------------------- */

static void workflow_ready(funcd_workflows *w, const char *value, size_t len, uint64_t rev)
{
    cJSON *wf = cJSON_ParseWithLength(value, len);
    const cJSON *md = get(wf, "metadata");
    const char *ns = get_str(md, "namespace"), *name = get_str(md, "name");
    if (!ns || !name) {
        cJSON_Delete(wf);
        return;
    }
    char field[256] = "", why[700] = "", message[1000];
    const char *reason = "Admitted";
    int rc = funcd_workflow_check(w->cfg.store, ns, wf, field, sizeof(field), why, sizeof(why),
                                  &reason);
    if (rc < 0 && rc != FUNCD_EINVAL) { /* the store: next tick */
        cJSON_Delete(wf);
        return;
    }
    if (rc == 0) {
        reason = "Admitted";
        snprintf(message, sizeof(message), "every function exists and every typed edge fits");
    } else {
        snprintf(message, sizeof(message), "%s: %s", field, why);
    }
    const cJSON *old = get(get(wf, "status"), "conditions");
    const cJSON *c0 = cJSON_IsArray(old) ? old->child : NULL;
    const char *status = rc == 0 ? "True" : "False";
    double gen = cJSON_GetNumberValue(get(md, "generation"));
    if (c0 && get_str(c0, "status") && strcmp(get_str(c0, "status"), status) == 0 &&
        get_str(c0, "message") && strcmp(get_str(c0, "message"), message) == 0 &&
        cJSON_GetNumberValue(get(get(wf, "status"), "observedGeneration")) == gen) {
        cJSON_Delete(wf);
        return;
    }
    cJSON *st = cJSON_CreateObject();
    cJSON_AddNumberToObject(st, "observedGeneration", gen);
    cJSON *conds = cJSON_AddArrayToObject(st, "conditions");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "type", "Ready");
    cJSON_AddStringToObject(c, "status", status);
    cJSON_AddStringToObject(c, "reason", reason);
    cJSON_AddStringToObject(c, "message", message);
    set_now(c, "lastTransitionTime");
    cJSON_AddItemToArray(conds, c);
    int prc = funcd_objects_put_status(w->cfg.store, funcd_kind_by_kind("Workflow"), ns, name,
                                       rev, st);
    if (prc < 0 && prc != FUNCD_ECONFLICT && prc != FUNCD_ENOTFOUND)
        funcd_log(w->cfg.logger, FUNCD_LOG_WARN, "writing the status of workflow %s/%s: %s", ns,
                  name, funcd_error_last()->message);
    cJSON_Delete(st);
    cJSON_Delete(wf);
}

static void check_workflows(funcd_workflows *w)
{
    listing l = {0};
    if (funcd_port_store_list(w->cfg.store, FUNCD_OBJECTS_KEY_ROOT "workflows/", collect, &l,
                              NULL) == 0)
        for (size_t i = 0; i < l.n; i++)
            workflow_ready(w, l.v[i].value, l.v[i].len, l.v[i].rev);
    listing_free(&l);
}

/* ---- the loop's side ------------------------------------------------------------- */

static void on_scan(evutil_socket_t fd, short what, void *arg)
{
    funcd_workflows *w = arg;
    (void)fd;
    (void)what;
    if (w->stopping)
        return;
    if (!funcd_cluster_is_leader(w->cfg.cluster)) {
        for (run *r = w->runs; r; r = r->next)
            r->dead = 1; /* the leader runs them now */
        reap(w);
        return;
    }
    cancel_runs(w);
    drive(w);
    reap(w);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    funcd_workflows *w = arg;
    on_scan(fd, what, arg);
    if (!w->stopping && funcd_cluster_is_leader(w->cfg.cluster))
        check_workflows(w);
}

/* Store thread: a new run or a cancel wakes the loop; the engine's own
 * writes to known runs do not. */
static void on_event(const funcd_store_event *ev, void *payload)
{
    funcd_workflows *w = payload;
    if (ev->type != FUNCD_STORE_EVENT_PUT)
        return;
    if (ev->create_revision == ev->revision ||
        strncmp(ev->key, FUNCD_WORKFLOW_CANCELS_PREFIX, strlen(FUNCD_WORKFLOW_CANCELS_PREFIX)) == 0)
        event_active(w->scan, EV_TIMEOUT, 0);
}

int funcd_workflows_new(funcd_workflows **out, const funcd_workflows_config *cfg)
{
    *out = NULL;
    funcd_workflows *w = calloc(1, sizeof(*w));
    if (!w)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the workflow engine");
    w->cfg = *cfg;
    if (!w->cfg.tick_ms)
        w->cfg.tick_ms = 1000;
    w->tick = event_new(cfg->loop, -1, EV_PERSIST, on_tick, w);
    w->scan = event_new(cfg->loop, -1, 0, on_scan, w);
    if (!w->tick || !w->scan) {
        funcd_workflows_free(w);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the workflow engine");
    }
    *out = w;
    return 0;
}

int funcd_workflows_start(funcd_workflows *w)
{
    uint64_t rev = funcd_port_store_revision(w->cfg.store);
    int rc = funcd_port_store_watch(w->cfg.store, "/workflow", rev, on_event, w, &w->watch);
    if (rc < 0)
        return rc;
    struct timeval tv = {(time_t)(w->cfg.tick_ms / 1000),
                         (suseconds_t)(w->cfg.tick_ms % 1000) * 1000};
    event_add(w->tick, &tv);
    event_active(w->tick, EV_TIMEOUT, 0); /* resume what a crash left at once */
    return 0;
}

void funcd_workflows_stop(funcd_workflows *w)
{
    if (!w)
        return;
    w->stopping = 1;
    if (w->watch)
        funcd_port_store_unwatch(w->cfg.store, w->watch);
    w->watch = NULL;
    if (w->tick)
        event_del(w->tick);
    if (w->scan)
        event_del(w->scan);
    for (run *r = w->runs; r; r = r->next) {
        r->dead = 1;
        while (r->waiting) {
            call *c = r->waiting;
            r->waiting = c->next;
            r->pending--;
            call_free(c); /* event_free also takes the timer off the loop */
        }
    }
}

void funcd_workflows_free(funcd_workflows *w)
{
    if (!w)
        return;
    funcd_workflows_stop(w);
    /* the invoker, freed before, ran every `done`: nothing is pending */
    for (run *r = w->runs; r; r = r->next)
        r->pending = 0;
    reap(w);
    if (w->tick)
        event_free(w->tick);
    if (w->scan)
        event_free(w->scan);
    free(w);
}
