/*
 * deploy-site DIR --name NAME: packs a directory into a tar.gz (as deploy
 * does), uploads it as a bundle, applies a Site that serves it (create or
 * replace, keeping the fields these flags do not set), and waits until the
 * Site is Ready for the generation just written (docs/sites.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bundle.h"
#include "cli.h"
#include "manifest.h"
#include "output.h"
#include "util/misc.h"

#define BUNDLE_MAX (64u * 1024 * 1024) /* what the server accepts */
#define DEFAULT_WAIT_MS 60000
#define POLL_MS 100

typedef struct site_opts {
    const char *dir, *name, *index, *not_found, *cache, *wait_timeout;
    const char **hosts;
    size_t nhosts;
    int spa;    /* 1: --spa, 0: --no-spa, -1: as it is */
    int no_wait;
    uint64_t wait_ms;
} site_opts;

static void on_pack_warning(const char *message, void *payload)
{
    fprintf(stderr, "warning: %s\n", message);
}

static int parse(ctl_ctx *ctx, int argc, char **argv, site_opts *o)
{
    int only = 0;
    o->spa = -1;
    for (int i = 0; i < argc; i++) {
        if (ctl_end_of_flags(argv[i], &only))
            continue;
        static const struct {
            const char *flag;
            size_t offset;
        } flags[] = {
            {"--name", offsetof(site_opts, name)},
            {"--index", offsetof(site_opts, index)},
            {"--not-found", offsetof(site_opts, not_found)},
            {"--cache-control", offsetof(site_opts, cache)},
            {"--wait-timeout", offsetof(site_opts, wait_timeout)},
        };
        const char *value;
        int r = 0;
        for (size_t f = 0; !only && r == 0 && f < sizeof(flags) / sizeof(flags[0]); f++)
            if ((r = ctl_flag_value(ctx, argc, argv, &i, NULL, flags[f].flag, &value)) > 0)
                *(const char **)((char *)o + flags[f].offset) = value;
        if (!only && r == 0 && (r = ctl_flag_value(ctx, argc, argv, &i, NULL, "--host", &value)) > 0)
            o->hosts[o->nhosts++] = value;
        if (r < 0)
            return CTL_EXIT_USAGE;
        if (r > 0)
            continue;
        if (!only && !strcmp(argv[i], "--no-wait"))
            o->no_wait = 1;
        else if (!only && !strcmp(argv[i], "--spa"))
            o->spa = 1;
        else if (!only && !strcmp(argv[i], "--no-spa"))
            o->spa = 0;
        else if (ctl_is_flag(argv[i], only))
            return ctl_usage(ctx, "unknown flag \"%s\"", argv[i]);
        else if (o->dir)
            return ctl_usage(ctx, "deploy-site takes one DIR (got \"%s\" and \"%s\")", o->dir,
                             argv[i]);
        else
            o->dir = argv[i];
    }
    if (!o->dir)
        return ctl_usage(ctx, "deploy-site needs the DIR that holds the site's files");
    if (!o->name)
        return ctl_usage(ctx, "deploy-site needs --name NAME (the Site to create or replace)");
    for (size_t i = 0; i < o->nhosts; i++)
        if (!*o->hosts[i] || strchr(o->hosts[i], ':') || strchr(o->hosts[i], '/'))
            return ctl_usage(ctx, "--host takes a DNS name such as www.example.com, not \"%s\"",
                             o->hosts[i]);
    o->wait_ms = DEFAULT_WAIT_MS;
    if (o->wait_timeout && (funcd_parse_duration_ms(o->wait_timeout, &o->wait_ms) != 0 ||
                            o->wait_ms == 0))
        return ctl_usage(ctx, "--wait-timeout takes a duration such as 30s or 5m, not \"%s\"",
                         o->wait_timeout);
    return 0;
}

/* GET of the Site: 0 with *out (NULL when there is none), or CTL_EXIT_ERROR. */
static int read_site(ctl_ctx *ctx, ctl_client *client, const char *name, cJSON **out)
{
    char *path = ctl_api_path(client, ctx->ns, "sites", name, NULL);
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

static int replace(cJSON *obj, const char *key, cJSON *v)
{
    if (!v)
        return -1;
    cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    return cJSON_AddItemToObject(obj, key, v) ? 0 : -1;
}

/* The Site to apply, from `current` (the server's, or NULL). */
static cJSON *build_site(const ctl_ctx *ctx, const site_opts *o, const cJSON *current,
                         const char *digest)
{
    cJSON *site = cJSON_CreateObject(), *meta = NULL, *source = NULL;
    const cJSON *cur_spec = ctl_get_path(current, "spec");
    const cJSON *labels = ctl_get_path(current, "metadata.labels");
    const char *rv = ctl_get_string(current, "metadata.resourceVersion");
    cJSON *spec = cur_spec ? cJSON_Duplicate(cur_spec, 1) : cJSON_CreateObject();
    int ok = site && spec && cJSON_AddStringToObject(site, "apiVersion", FUNCD_API_VERSION) &&
             cJSON_AddStringToObject(site, "kind", "Site") &&
             (meta = cJSON_AddObjectToObject(site, "metadata")) &&
             cJSON_AddStringToObject(meta, "name", o->name) &&
             cJSON_AddStringToObject(meta, "namespace", ctx->ns) &&
             (!rv || cJSON_AddStringToObject(meta, "resourceVersion", rv)) &&
             (!labels || replace(meta, "labels", cJSON_Duplicate(labels, 1)) == 0) &&
             (source = cJSON_CreateObject()) && cJSON_AddStringToObject(source, "bundle", digest);
    if (ok)
        ok = replace(spec, "source", source) == 0;
    else
        cJSON_Delete(source);
    if (ok && o->index)
        ok = replace(spec, "index", cJSON_CreateString(o->index)) == 0;
    if (ok && o->not_found)
        ok = replace(spec, "notFound", cJSON_CreateString(o->not_found)) == 0;
    if (ok && o->cache)
        ok = replace(spec, "cache", cJSON_CreateString(o->cache)) == 0;
    if (ok && o->spa >= 0)
        ok = replace(spec, "spa", cJSON_CreateBool(o->spa)) == 0;
    if (ok && o->nhosts) {
        cJSON *hosts = cJSON_CreateArray();
        for (size_t i = 0; hosts && i < o->nhosts; i++)
            cJSON_AddItemToArray(hosts, cJSON_CreateString(o->hosts[i]));
        ok = replace(spec, "hosts", hosts) == 0;
    }
    if (!ok || !cJSON_AddItemToObject(site, "spec", spec)) {
        cJSON_Delete(spec);
        cJSON_Delete(site);
        return NULL;
    }
    return site;
}

static const cJSON *ready_of(const cJSON *site)
{
    const cJSON *cond;
    cJSON_ArrayForEach(cond, ctl_get_path(site, "status.conditions"))
    {
        const char *type = ctl_get_string(cond, "type");
        if (type && !strcmp(type, "Ready"))
            return cond;
    }
    return NULL;
}

/* Ready (1), not (-1) for the generation written, or not yet said (0). */
static int settled(const cJSON *site)
{
    const cJSON *gen = ctl_get_path(site, "metadata.generation");
    const cJSON *seen = ctl_get_path(site, "status.observedGeneration");
    const char *status = ctl_get_string(ready_of(site), "status");
    if (!cJSON_IsNumber(gen) || !cJSON_IsNumber(seen) || seen->valuedouble < gen->valuedouble ||
        !status)
        return 0;
    return !strcmp(status, "True") ? 1 : -1;
}

static int print_outcome(const ctl_ctx *ctx, const site_opts *o, const cJSON *site,
                         const char *verb)
{
    switch (ctx->output) {
    case CTL_OUT_NAME: printf("site/%s\n", o->name); return 0;
    case CTL_OUT_JSON: ctl_print_json(site, stdout); return 0;
    case CTL_OUT_YAML: return ctl_print_yaml(site, stdout) == 0 ? 0 : CTL_EXIT_ERROR;
    default: printf("site/%s %s\n", o->name, verb); return 0;
    }
}

static int deploy(ctl_ctx *ctx, ctl_client *client, const site_opts *o)
{
    funcd_buf tgz = FUNCD_BUF_INIT, err = FUNCD_BUF_INIT;
    ctl_bundle_stats stats;
    char *digest = NULL;
    cJSON *current = NULL, *site = NULL, *last = NULL;
    const char *verb = NULL;
    int rc = 0;
    if (ctl_bundle_pack(o->dir, BUNDLE_MAX, &tgz, &stats, on_pack_warning, NULL, &err) != 0)
        rc = ctl_fail("%s", err.data ? err.data : "cannot pack the directory");
    else if (stats.files == 0)
        rc = ctl_fail("%s holds no files to deploy (symlinks and .git are left out)", o->dir);
    if (rc == 0)
        rc = ctl_bundle_upload(ctx, client, &tgz, &digest);
    if (rc == 0)
        rc = read_site(ctx, client, o->name, &current);
    if (rc == 0 && !(site = build_site(ctx, o, current, digest)))
        rc = ctl_fail("out of memory");
    ctl_target t = {.kind = funcd_kind_by_kind("Site"), .name = o->name, .ns = ctx->ns};
    snprintf(t.what, sizeof(t.what), "site/%s", o->name);
    if (rc == 0 && ctl_apply_object(client, &t, site, CTL_APPLY_KEEP_METADATA, &last, &verb) != 0)
        rc = CTL_EXIT_ERROR;
    int64_t deadline = funcd_mono_ms() + (int64_t)o->wait_ms;
    int state = 0;
    while (rc == 0 && !o->no_wait && (state = settled(last)) == 0 && funcd_mono_ms() < deadline) {
        struct timespec pause = {0, POLL_MS * 1000000L};
        nanosleep(&pause, NULL);
        cJSON *now = NULL;
        rc = read_site(ctx, client, o->name, &now);
        if (rc == 0 && !now)
            rc = ctl_fail("site/%s was deleted while deploy-site waited for it", o->name);
        if (now) {
            cJSON_Delete(last);
            last = now;
        }
    }
    const cJSON *ready = ready_of(last);
    const char *reason = ctl_get_string(ready, "reason");
    const char *message = ctl_get_string(ready, "message");
    if (rc == 0 && !o->no_wait && state < 0)
        rc = ctl_fail("site/%s is not ready: %s: %s (see `funcdctl describe site %s`)", o->name,
                      reason ? reason : "NoReason", message ? message : "no message", o->name);
    else if (rc == 0 && !o->no_wait && state == 0)
        rc = ctl_fail("site/%s did not become Ready within %s; see `funcdctl describe site %s`, "
                      "or wait longer with --wait-timeout",
                      o->name, o->wait_timeout ? o->wait_timeout : "60s", o->name);
    else if (rc == 0)
        rc = print_outcome(ctx, o, last, o->no_wait ? verb : "ready");
    cJSON_Delete(last);
    cJSON_Delete(site);
    cJSON_Delete(current);
    free(digest);
    funcd_buf_free(&tgz);
    funcd_buf_free(&err);
    return rc;
}

int cmd_deploy_site(ctl_ctx *ctx, int argc, char **argv)
{
    site_opts o = {0};
    o.hosts = calloc((size_t)argc + 1, sizeof(*o.hosts));
    int rc = o.hosts ? parse(ctx, argc, argv, &o) : ctl_fail("out of memory");
    if (rc == 0) {
        ctl_client *client = ctl_ctx_client(ctx);
        rc = client ? deploy(ctx, client, &o) : CTL_EXIT_ERROR;
    }
    free(o.hosts);
    return rc;
}
