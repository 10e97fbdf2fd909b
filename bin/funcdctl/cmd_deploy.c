/*
 * deploy DIR: packs a directory into a tar.gz, uploads it as a bundle,
 * applies a Function that runs it (create or replace, as apply does), and
 * waits until the Function is Ready for the generation just written.
 *
 * deploy --image IMAGE: has the server pull the image first (so a bad
 * reference or a registry's refusal shows at once, with the pull's
 * progress), then applies a Function that runs it and waits the same way.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bundle.h"
#include "cli.h"
#include "manifest.h"
#include "output.h"
#include "progress.h"
#include "util/misc.h"

#define BUNDLE_MAX (64u * 1024 * 1024) /* what the server accepts */
#define DEFAULT_WAIT_MS 60000
#define MAX_COUNT 1000000L
#define RESYNC_PAUSE_MS 200 /* between a watch that ended early and the next */

typedef struct deploy_opts {
    const char *dir, *image, *name, *runtime, *handler, *mode, *timeout;
    const char *min, *max, *concurrency, *queue, *idle_timeout, *wait_timeout;
    const char *memory, *cpu, *pids;
    const char **env;
    size_t nenv;
    const char **labels; /* --label */
    size_t nlabels;
    const char **secrets; /* --pull-secret */
    size_t nsecrets;
    int no_wait;
    uint64_t wait_ms;
} deploy_opts;

/* Progress: one line rewritten in place on a terminal (ctl_status), plain
 * lines otherwise. */
typedef struct progress {
    int tty;
    const char *name;
} progress;

/* On a terminal only: a step too short to deserve a line of its own. */
static void progress_tty(const progress *pg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void progress_tty(const progress *pg, const char *fmt, ...)
{
    if (!pg->tty)
        return;
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    ctl_status("deploying %s: %s", pg->name, text);
}

static void progress_line(const progress *pg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void progress_line(const progress *pg, const char *fmt, ...)
{
    if (pg->tty)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "deploying %s: ", pg->name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void on_pack_warning(const char *message, void *payload)
{
    ctl_warn("%s", message);
}

static void human_size(uint64_t bytes, char *out, size_t len)
{
    if (bytes < 1024)
        snprintf(out, len, "%llu B", (unsigned long long)bytes);
    else if (bytes < 1024 * 1024)
        snprintf(out, len, "%.1f KiB", (double)bytes / 1024);
    else
        snprintf(out, len, "%.1f MiB", (double)bytes / (1024 * 1024));
}

/* ---- the command line ----------------------------------------------------- */

static int parse_count(const ctl_ctx *ctx, const char *flag, const char *value, long *out)
{
    if (!value)
        return 0;
    char *end;
    long n = strtol(value, &end, 10);
    if (!*value || *end || n < 0 || n > MAX_COUNT)
        return ctl_usage(ctx, "%s takes a whole number from 0 to %ld, not \"%s\"", flag,
                         MAX_COUNT, value);
    *out = n;
    return 0;
}

static int check_duration(const ctl_ctx *ctx, const char *flag, const char *value,
                          uint64_t *ms)
{
    uint64_t parsed = 0;
    if (!value)
        return 0;
    if (funcd_parse_duration_ms(value, &parsed) != 0 || parsed == 0)
        return ctl_usage(ctx, "%s takes a duration such as 500ms, 30s or 5m, not \"%s\"", flag,
                         value);
    if (ms)
        *ms = parsed;
    return 0;
}

static int check_opts(const ctl_ctx *ctx, deploy_opts *o)
{
    long unused;
    if (o->dir && o->image)
        return ctl_usage(ctx, "deploy takes a DIR or --image IMAGE, not both");
    if (!o->dir && !o->image)
        return ctl_usage(ctx, "deploy needs the DIR that holds the function's code, or "
                              "--image IMAGE");
    if (o->image && !*o->image)
        return ctl_usage(ctx, "--image needs an image reference, e.g. registry/repo:tag");
    if (o->nsecrets > 0 && !o->image)
        return ctl_usage(ctx, "--pull-secret goes with --image");
    if (!o->name)
        return ctl_usage(ctx, "deploy needs --name NAME (the Function to create or replace)");
    if (!o->runtime && o->image)
        o->runtime = "native"; /* what an image holds: a program */
    if (!o->runtime)
        return ctl_usage(ctx, "deploy needs --runtime native|python3|node");
    if (o->mode && strcmp(o->mode, "http") != 0 && strcmp(o->mode, "exec") != 0)
        return ctl_usage(ctx, "--mode is http (the default) or exec, not \"%s\"", o->mode);
    for (size_t i = 0; i < o->nenv; i++)
        if (o->env[i][0] == '=' || !strchr(o->env[i], '='))
            return ctl_usage(ctx, "--env takes NAME=VALUE, not \"%s\"", o->env[i]);
    for (size_t i = 0; i < o->nlabels; i++)
        if (o->labels[i][0] == '=' || !strchr(o->labels[i], '='))
            return ctl_usage(ctx, "--label takes KEY=VALUE, not \"%s\"", o->labels[i]);
    uint64_t q;
    if (o->memory && (funcd_parse_quantity(o->memory, &q) != 0 || q == 0))
        return ctl_usage(ctx, "--memory takes a quantity of bytes such as 256Mi or 1Gi, not "
                              "\"%s\"",
                         o->memory);
    if (o->cpu && (funcd_parse_cpu_millis(o->cpu, &q) != 0 || q == 0))
        return ctl_usage(ctx, "--cpu takes a CPU quantity such as 1, 0.5 or 500m, not \"%s\"",
                         o->cpu);
    if (o->idle_timeout && strcmp(o->idle_timeout, "0") != 0 &&
        check_duration(ctx, "--idle-timeout", o->idle_timeout, NULL))
        return CTL_EXIT_USAGE;
    o->wait_ms = DEFAULT_WAIT_MS;
    if (parse_count(ctx, "--min", o->min, &unused) || parse_count(ctx, "--max", o->max, &unused) ||
        parse_count(ctx, "--concurrency", o->concurrency, &unused) ||
        parse_count(ctx, "--queue", o->queue, &unused) ||
        parse_count(ctx, "--pids", o->pids, &unused) ||
        check_duration(ctx, "--timeout", o->timeout, NULL) ||
        check_duration(ctx, "--wait-timeout", o->wait_timeout, &o->wait_ms))
        return CTL_EXIT_USAGE;
    return 0;
}

/* Takes the value of the flag at argv[*i] if it is one deploy knows:
 * 1 taken, 0 not one of ours, -1 usage error printed. */
static int take_flag(ctl_ctx *ctx, int argc, char **argv, int *i, deploy_opts *o)
{
    static const struct {
        const char *flag;
        size_t offset;
    } flags[] = {
        {"--name", offsetof(deploy_opts, name)},
        {"--runtime", offsetof(deploy_opts, runtime)},
        {"--handler", offsetof(deploy_opts, handler)},
        {"--mode", offsetof(deploy_opts, mode)},
        {"--timeout", offsetof(deploy_opts, timeout)},
        {"--min", offsetof(deploy_opts, min)},
        {"--max", offsetof(deploy_opts, max)},
        {"--concurrency", offsetof(deploy_opts, concurrency)},
        {"--queue", offsetof(deploy_opts, queue)},
        {"--idle-timeout", offsetof(deploy_opts, idle_timeout)},
        {"--wait-timeout", offsetof(deploy_opts, wait_timeout)},
        {"--image", offsetof(deploy_opts, image)},
        {"--memory", offsetof(deploy_opts, memory)},
        {"--cpu", offsetof(deploy_opts, cpu)},
        {"--pids", offsetof(deploy_opts, pids)},
    };
    const char *value;
    for (size_t f = 0; f < sizeof(flags) / sizeof(flags[0]); f++) {
        int r = ctl_flag_value(ctx, argc, argv, i, NULL, flags[f].flag, &value);
        if (r != 0) {
            if (r > 0)
                *(const char **)((char *)o + flags[f].offset) = value;
            return r;
        }
    }
    int r = ctl_flag_value(ctx, argc, argv, i, NULL, "--pull-secret", &value);
    if (r > 0 && !*value) {
        ctl_usage(ctx, "--pull-secret needs the name of a Secret");
        return -1;
    }
    if (r > 0)
        o->secrets[o->nsecrets++] = value;
    if (r != 0)
        return r;
    r = ctl_flag_value(ctx, argc, argv, i, NULL, "--label", &value);
    if (r > 0)
        o->labels[o->nlabels++] = value;
    if (r != 0)
        return r;
    r = ctl_flag_value(ctx, argc, argv, i, "-e", "--env", &value);
    if (r > 0)
        o->env[o->nenv++] = value;
    return r;
}

static int parse(ctl_ctx *ctx, int argc, char **argv, deploy_opts *o)
{
    int only = 0;
    for (int i = 0; i < argc; i++) {
        if (ctl_end_of_flags(argv[i], &only))
            continue;
        int r = only ? 0 : take_flag(ctx, argc, argv, &i, o);
        if (r < 0)
            return CTL_EXIT_USAGE;
        if (r > 0)
            continue;
        if (!only && !strcmp(argv[i], "--no-wait")) {
            o->no_wait = 1;
        } else if (ctl_is_flag(argv[i], only)) {
            return ctl_usage(ctx, "unknown flag \"%s\"", argv[i]);
        } else if (o->dir) {
            return ctl_usage(ctx, "deploy takes one DIR (got \"%s\" and \"%s\")", o->dir,
                             argv[i]);
        } else {
            o->dir = argv[i];
        }
    }
    return check_opts(ctx, o);
}

/* ---- the Function --------------------------------------------------------- */

/* parent[key] as an object, created (or replacing a non-object) if need be. */
static cJSON *object_at(cJSON *parent, const char *key)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(parent, key);
    if (cJSON_IsObject(v))
        return v;
    cJSON_DeleteItemFromObjectCaseSensitive(parent, key);
    return cJSON_AddObjectToObject(parent, key);
}

/* Sets parent[key] to `v` (taken), replacing what was there. */
static int set_item(cJSON *parent, const char *key, cJSON *v)
{
    if (!parent || !v) {
        cJSON_Delete(v);
        return -1;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(parent, key);
    return cJSON_AddItemToObject(parent, key, v) ? 0 : (cJSON_Delete(v), -1);
}

static int set_string(cJSON *parent, const char *key, const char *value)
{
    return !value ? 0 : set_item(parent, key, cJSON_CreateString(value));
}

static int set_count(cJSON *parent, const char *key, const char *value)
{
    return !value ? 0 : set_item(parent, key, cJSON_CreateNumber(strtod(value, NULL)));
}

/* KEY=VALUE pairs into `map` (the last one given wins). */
static int set_pairs(cJSON *map, const char **pairs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(pairs[i], '=');
        char *key = funcd_strndup(pairs[i], (size_t)(eq - pairs[i]));
        int rc = key ? set_string(map, key, eq + 1) : -1;
        free(key);
        if (rc != 0)
            return -1;
    }
    return 0;
}

static int set_pull_secrets(cJSON *spec, const deploy_opts *o)
{
    if (!o->image) /* a bundle needs none: what an image left behind goes */
        cJSON_DeleteItemFromObjectCaseSensitive(spec, "imagePullSecrets");
    if (o->nsecrets == 0)
        return 0;
    cJSON *names = cJSON_CreateArray();
    for (size_t i = 0; names && i < o->nsecrets; i++) {
        cJSON *name = cJSON_CreateString(o->secrets[i]);
        if (!name || !cJSON_AddItemToArray(names, name)) {
            cJSON_Delete(name);
            cJSON_Delete(names);
            return -1;
        }
    }
    return set_item(spec, "imagePullSecrets", names);
}

/*
 * The spec: the current one (NULL for a new Function) with what the flags
 * say on top. The source is always replaced; env, scaling, resources are
 * merged key by key; everything else a flag does not name is kept, so a
 * field set with `apply` survives the next deploy. `digest`: the bundle
 * uploaded, or NULL when the Function runs o->image.
 */
static int set_spec(cJSON *fn, const deploy_opts *o, const cJSON *current, const char *digest)
{
    cJSON *spec = current ? cJSON_Duplicate(current, 1) : cJSON_CreateObject();
    if (!spec || !cJSON_AddItemToObject(fn, "spec", spec)) {
        cJSON_Delete(spec);
        return -1;
    }
    cJSON *source = cJSON_CreateObject();
    /* The image as the user named it, not the digest just pulled: a tag the
     * user moves later is theirs to follow (status.source.digest says which
     * one runs). */
    if (!source || !(digest ? cJSON_AddStringToObject(source, "bundle", digest)
                            : cJSON_AddStringToObject(source, "image", o->image))) {
        cJSON_Delete(source);
        return -1;
    }
    if (set_item(spec, "source", source) != 0 || set_string(spec, "runtime", o->runtime) != 0 ||
        set_string(spec, "handler", o->handler) != 0 || set_string(spec, "mode", o->mode) != 0 ||
        set_string(spec, "timeout", o->timeout) != 0 || set_pull_secrets(spec, o) != 0)
        return -1;
    if (o->nenv && set_pairs(object_at(spec, "env"), o->env, o->nenv) != 0)
        return -1;
    if (o->min || o->max || o->concurrency || o->queue || o->idle_timeout) {
        cJSON *scaling = object_at(spec, "scaling");
        if (!scaling || set_count(scaling, "minReplicas", o->min) != 0 ||
            set_count(scaling, "maxReplicas", o->max) != 0 ||
            set_count(scaling, "concurrency", o->concurrency) != 0 ||
            set_count(scaling, "queueLength", o->queue) != 0 ||
            set_string(scaling, "idleTimeout", o->idle_timeout) != 0)
            return -1;
    }
    if (o->memory || o->cpu || o->pids) {
        cJSON *res = object_at(spec, "resources");
        if (!res || set_string(res, "memory", o->memory) != 0 ||
            set_string(res, "cpu", o->cpu) != 0 || set_count(res, "pids", o->pids) != 0)
            return -1;
    }
    return 0;
}

/* The Function to apply, from `current` (the one the server has, or NULL). */
static cJSON *build_function(const ctl_ctx *ctx, const deploy_opts *o, const cJSON *current,
                             const char *digest)
{
    cJSON *fn = cJSON_CreateObject();
    cJSON *meta = NULL;
    const cJSON *labels = ctl_get_path(current, "metadata.labels");
    const char *rv = ctl_get_string(current, "metadata.resourceVersion");
    if (!fn || !cJSON_AddStringToObject(fn, "apiVersion", FUNCD_API_VERSION) ||
        !cJSON_AddStringToObject(fn, "kind", "Function") ||
        !(meta = cJSON_AddObjectToObject(fn, "metadata")) ||
        !cJSON_AddStringToObject(meta, "name", o->name) ||
        !cJSON_AddStringToObject(meta, "namespace", ctx->ns) ||
        /* the revision merged onto: a change made since is refused (409) */
        (rv && !cJSON_AddStringToObject(meta, "resourceVersion", rv)) ||
        (labels && set_item(meta, "labels", cJSON_Duplicate(labels, 1)) != 0) ||
        (o->nlabels && set_pairs(object_at(meta, "labels"), o->labels, o->nlabels) != 0) ||
        set_spec(fn, o, ctl_get_path(current, "spec"), digest) != 0) {
        cJSON_Delete(fn);
        return NULL;
    }
    return fn;
}

/* The Function as the server has it: 0 and *out (NULL when there is none),
 * or CTL_EXIT_ERROR (reported). */
static int read_current(ctl_ctx *ctx, ctl_client *client, const char *name, cJSON **out)
{
    char *path = ctl_api_path(client, ctx->ns, "functions", name, NULL);
    ctl_response resp = CTL_RESPONSE_INIT;
    int rc = 0;
    *out = NULL;
    if (!path || ctl_request(client, "GET", path, NULL, &resp) != 0)
        rc = CTL_EXIT_ERROR;
    else if (resp.code == 200)
        rc = (*out = ctl_response_json(client, &resp)) ? 0 : CTL_EXIT_ERROR;
    else if (resp.code != 404)
        rc = ctl_report_status(client, &resp, NULL, ctx->ns);
    ctl_response_free(&resp);
    free(path);
    return rc;
}

/* ---- pack and upload ------------------------------------------------------ */

static int pack(const deploy_opts *o, const progress *pg, funcd_buf *tgz)
{
    ctl_bundle_stats stats;
    funcd_buf err = FUNCD_BUF_INIT;
    progress_tty(pg, "packing %s…", o->dir);
    int rc = ctl_bundle_pack(o->dir, BUNDLE_MAX, tgz, &stats, on_pack_warning, NULL, &err);
    ctl_status_clear();
    if (rc != 0)
        rc = ctl_fail("%s", err.data ? err.data : "cannot pack the directory");
    else if (stats.files == 0)
        rc = ctl_fail("%s holds no files to deploy (symlinks and .git are left out)", o->dir);
    funcd_buf_free(&err);
    return rc;
}

/* ---- waiting for Ready ---------------------------------------------------- */

typedef enum readiness { PENDING, READY, FAILED } readiness;

static const cJSON *ready_condition(const cJSON *fn)
{
    const cJSON *cond;
    cJSON_ArrayForEach(cond, ctl_get_path(fn, "status.conditions"))
    {
        const char *type = ctl_get_string(cond, "type");
        if (type && !strcmp(type, "Ready"))
            return cond;
    }
    return NULL;
}

/* Reasons a controller may give while it is still getting there. */
static int still_working(const char *reason)
{
    static const char *const working[] = {"Pending",  "Progressing", "Materializing",
                                          "Reconciling", "Starting", "Deploying",
                                          "Pulling",  "Extracting"};
    for (size_t i = 0; reason && i < sizeof(working) / sizeof(working[0]); i++)
        if (!strcmp(reason, working[i]))
            return 1;
    return 0;
}

/* The Ready condition counts only once the controller has seen the
 * generation we wrote; a False for that generation is its answer. */
static readiness readiness_of(const cJSON *fn)
{
    const cJSON *generation = ctl_get_path(fn, "metadata.generation");
    const cJSON *observed = ctl_get_path(fn, "status.observedGeneration");
    if (!cJSON_IsNumber(generation) || !cJSON_IsNumber(observed) ||
        observed->valuedouble < generation->valuedouble)
        return PENDING;
    const cJSON *ready = ready_condition(fn);
    const char *status = ctl_get_string(ready, "status");
    if (status && !strcmp(status, "True"))
        return READY;
    if (status && !strcmp(status, "False") && !still_working(ctl_get_string(ready, "reason")))
        return FAILED;
    return PENDING;
}

typedef struct waiter {
    const char *name;
    cJSON *last; /* the Function as last seen; owned */
    readiness state;
    int deleted;
} waiter;

static int on_watch_event(const char *line, size_t len, void *payload)
{
    waiter *w = payload;
    cJSON *event = cJSON_ParseWithLength(line, len);
    const char *type = ctl_get_string(event, "type");
    cJSON *obj = cJSON_GetObjectItemCaseSensitive(event, "object");
    const char *name = ctl_get_string(obj, "metadata.name");
    int stop = 0;
    if (!type || !strcmp(type, "ERROR")) {
        stop = 1; /* the watch cannot go on: read the object again */
    } else if (name && !strcmp(name, w->name) && !strcmp(type, "DELETED")) {
        w->deleted = stop = 1;
    } else if (name && !strcmp(name, w->name) && strcmp(type, "BOOKMARK") != 0) {
        cJSON_Delete(w->last);
        w->last = cJSON_DetachItemViaPointer(event, obj);
        w->state = readiness_of(w->last);
        stop = w->state != PENDING;
    }
    cJSON_Delete(event);
    return stop;
}

static char *watch_path(ctl_client *client, const ctl_ctx *ctx, const char *rv)
{
    char *base = ctl_api_path(client, ctx->ns, "functions", NULL, NULL);
    funcd_buf b = FUNCD_BUF_INIT;
    if (!base || funcd_buf_printf(&b, "%s?watch=true&resourceVersion=%s", base, rv) != 0) {
        free(base);
        funcd_buf_free(&b);
        return NULL;
    }
    free(base);
    return funcd_buf_detach(&b, NULL);
}

/* Reads the Function again after a watch ended early. */
static int refresh(ctl_ctx *ctx, ctl_client *client, waiter *w)
{
    char *path = ctl_api_path(client, ctx->ns, "functions", w->name, NULL);
    ctl_response resp = CTL_RESPONSE_INIT;
    cJSON *fn = NULL;
    int rc = 0;
    if (!path || ctl_request(client, "GET", path, NULL, &resp) != 0)
        rc = CTL_EXIT_ERROR;
    else if (resp.code == 404)
        w->deleted = 1;
    else if (resp.code != 200)
        rc = ctl_report_status(client, &resp, NULL, ctx->ns);
    else if (!(fn = ctl_response_json(client, &resp)))
        rc = CTL_EXIT_ERROR;
    else {
        cJSON_Delete(w->last);
        w->last = fn;
        w->state = readiness_of(fn);
    }
    ctl_response_free(&resp);
    free(path);
    return rc;
}

/* Watches from the revision last seen until the Function settles, is
 * deleted, or the deadline passes; a watch the server ends is resumed. */
static int wait_ready(ctl_ctx *ctx, ctl_client *client, waiter *w, int64_t deadline)
{
    w->state = readiness_of(w->last);
    while (w->state == PENDING && !w->deleted && funcd_mono_ms() < deadline) {
        const char *rv = ctl_get_string(w->last, "metadata.resourceVersion");
        char *path = watch_path(client, ctx, rv ? rv : "0");
        ctl_response resp = CTL_RESPONSE_INIT;
        int rc = path ? ctl_stream(client, path, on_watch_event, w, NULL, deadline, &resp)
                      : ctl_fail("out of memory");
        if (rc == 0 && resp.code != 200)
            rc = ctl_report_status(client, &resp, NULL, ctx->ns);
        ctl_response_free(&resp);
        free(path);
        if (rc != 0)
            return CTL_EXIT_ERROR;
        if (w->state != PENDING || w->deleted || funcd_mono_ms() >= deadline)
            break;
        struct timespec pause = {0, RESYNC_PAUSE_MS * 1000000L};
        nanosleep(&pause, NULL);
        if (refresh(ctx, client, w) != 0)
            return CTL_EXIT_ERROR;
    }
    return 0;
}

static int report_not_ready(const deploy_opts *o, const waiter *w)
{
    const cJSON *ready = ready_condition(w->last);
    const char *status = ctl_get_string(ready, "status");
    const char *reason = ctl_get_string(ready, "reason");
    const char *message = ctl_get_string(ready, "message");
    if (w->deleted)
        return ctl_fail("function/%s was deleted while deploy waited for it", o->name);
    if (w->state == FAILED)
        return ctl_fail("function/%s is not ready: %s: %s (see `funcdctl describe fn %s`)",
                        o->name, reason ? reason : "NoReason", message ? message : "no message",
                        o->name);
    char waited[32];
    if (o->wait_ms % 1000)
        snprintf(waited, sizeof(waited), "%llums", (unsigned long long)o->wait_ms);
    else
        snprintf(waited, sizeof(waited), "%llus", (unsigned long long)(o->wait_ms / 1000));
    return ctl_fail("function/%s did not become Ready within %s (Ready: %s%s%s%s%s); see "
                    "`funcdctl describe fn %s`, or wait longer with --wait-timeout",
                    o->name, waited, status ? status : "not reported", reason ? ", " : "",
                    reason ? reason : "", message ? ": " : "", message ? message : "",
                    o->name);
}

/* ---- the command ---------------------------------------------------------- */

static int print_outcome(const ctl_ctx *ctx, const deploy_opts *o, const cJSON *fn,
                         const char *verb)
{
    switch (ctx->output) {
    case CTL_OUT_NAME: printf("function/%s\n", o->name); return 0;
    case CTL_OUT_JSON: ctl_print_json(fn, stdout); return 0;
    case CTL_OUT_YAML: return ctl_print_yaml(fn, stdout) == 0 ? 0 : CTL_EXIT_ERROR;
    default: printf("function/%s %s\n", o->name, verb); return 0;
    }
}

static void show_uploaded(const progress *pg, const deploy_opts *o, size_t bytes,
                          const char *digest)
{
    char size[32];
    human_size(bytes, size, sizeof(size));
    /* sha256: and 12 hex digits identify a bundle to a person. */
    progress_tty(pg, "uploaded %s (%.19s…), %s", size, digest,
                 o->no_wait ? "applying…" : "waiting for Ready…");
    progress_line(pg, "uploaded %s (%s)", size, digest);
}

static int apply_and_wait(ctl_ctx *ctx, ctl_client *client, const deploy_opts *o,
                          const progress *pg, const char *digest)
{
    ctl_target t = {.kind = funcd_kind_by_kind("Function"), .name = o->name, .ns = ctx->ns};
    snprintf(t.what, sizeof(t.what), "function/%s", o->name);
    cJSON *current = NULL, *fn = NULL;
    waiter w = {.name = o->name};
    const char *verb = NULL;
    int rc = read_current(ctx, client, o->name, &current);
    if (rc == 0 && !(fn = build_function(ctx, o, current, digest)))
        rc = ctl_fail("out of memory");
    if (rc == 0)
        rc = ctl_apply_object(client, &t, fn, CTL_APPLY_KEEP_METADATA, &w.last, &verb);
    cJSON_Delete(current);
    cJSON_Delete(fn);
    if (rc != 0) {
        ctl_status_clear();
        return CTL_EXIT_ERROR;
    }
    if (!o->no_wait) {
        progress_line(pg, "function/%s %s, waiting for Ready...", o->name, verb);
        rc = wait_ready(ctx, client, &w, funcd_mono_ms() + (int64_t)o->wait_ms);
    }
    ctl_status_clear();
    if (rc == 0 && !o->no_wait && w.state != READY)
        rc = report_not_ready(o, &w);
    else if (rc == 0)
        rc = print_outcome(ctx, o, w.last, o->no_wait ? verb : "ready");
    cJSON_Delete(w.last);
    return rc;
}

static int deploy_dir(ctl_ctx *ctx, ctl_client *client, const deploy_opts *o,
                      const progress *pg)
{
    funcd_buf tgz = FUNCD_BUF_INIT;
    char *digest = NULL;
    char size[32];
    int rc = pack(o, pg, &tgz) != 0 ? CTL_EXIT_ERROR : 0;
    if (rc == 0) {
        human_size(tgz.len, size, sizeof(size));
        progress_tty(pg, "uploading %s…", size);
        rc = ctl_bundle_upload(ctx, client, &tgz, &digest);
        if (rc != 0)
            ctl_status_clear();
    }
    if (rc == 0) {
        show_uploaded(pg, o, tgz.len, digest);
        rc = apply_and_wait(ctx, client, o, pg, digest);
    }
    free(digest);
    funcd_buf_free(&tgz);
    return rc;
}

/* --wait-timeout bounds the pull, and then the wait for Ready, each. */
static int deploy_image(ctl_ctx *ctx, ctl_client *client, const deploy_opts *o,
                        const progress *pg)
{
    char *digest = NULL;
    int rc = ctl_image_pull(ctx, o->image, o->secrets, o->nsecrets, NULL,
                            funcd_mono_ms() + (int64_t)o->wait_ms, &digest, NULL);
    if (rc == 0) {
        progress_tty(pg, "pulled %.19s…, %s", digest,
                     o->no_wait ? "applying…" : "waiting for Ready…");
        progress_line(pg, "pulled %s %s", o->image, digest);
        rc = apply_and_wait(ctx, client, o, pg, NULL);
    }
    free(digest);
    return rc;
}

int cmd_deploy(ctl_ctx *ctx, int argc, char **argv)
{
    deploy_opts o = {0};
    o.env = calloc((size_t)argc + 1, sizeof(*o.env));
    o.secrets = calloc((size_t)argc + 1, sizeof(*o.secrets));
    o.labels = calloc((size_t)argc + 1, sizeof(*o.labels));
    int rc = o.env && o.secrets && o.labels ? parse(ctx, argc, argv, &o)
                                            : ctl_fail("out of memory");
    if (rc == 0) {
        progress pg = {.tty = isatty(STDERR_FILENO), .name = o.name};
        ctl_client *client = ctl_ctx_client(ctx);
        if (!client)
            rc = CTL_EXIT_ERROR;
        else
            rc = o.image ? deploy_image(ctx, client, &o, &pg) : deploy_dir(ctx, client, &o, &pg);
    }
    free(o.labels);
    free(o.secrets);
    free(o.env);
    return rc;
}
