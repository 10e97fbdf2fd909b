/* watch KIND, and get -w: one row per event of the list's NDJSON watch stream. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "output.h"
#include "util/misc.h"
#include "watch.h"

typedef struct watch_state {
    const ctl_ctx *ctx;
    const ctl_watch_opts *o;
    funcd_label_selector sel;
    size_t widths[CTL_MAX_COLUMNS];
    int header_printed;
    int failed;
} watch_state;

static int print_row(watch_state *w, const char *type, const cJSON *obj)
{
    const char *first = w->o->event_column ? type : NULL;
    ctl_row row;
    if (!w->header_printed) {
        if (ctl_row_header(&row, w->o->kind, &w->o->cols, w->o->event_column ? "EVENT" : NULL) != 0)
            return -1;
        /* Rows arrive one by one: start wide enough that most stay aligned. */
        ctl_row_typical_widths(w->o->kind, &w->o->cols, w->o->event_column, w->widths);
        ctl_row_print(&row, w->widths, stdout);
        ctl_row_free(&row);
        w->header_printed = 1;
    }
    if (ctl_row_object(&row, w->o->kind, &w->o->cols, obj, funcd_now_ms(), first) != 0)
        return -1;
    ctl_row_print(&row, w->widths, stdout);
    ctl_row_free(&row);
    return 0;
}

/* A watch ends with {"type":"ERROR","object":<Status>} when it cannot go on. */
static void report_error_event(const cJSON *status)
{
    const char *message = ctl_get_string(status, "message");
    const char *reason = ctl_get_string(status, "reason");
    const cJSON *code = ctl_get_path(status, "code");
    int gone = cJSON_IsNumber(code) && code->valuedouble == 410;
    ctl_fail("the watch ended: %s (%.0f %s)%s", message ? message : "server error",
             cJSON_IsNumber(code) ? code->valuedouble : 0.0, reason ? reason : "Error",
             gone ? "; that revision is no longer kept: run watch again without "
                    "--resource-version"
                  : "");
}

/* Whether the event's object is one the user asked for: -l and names are
 * filtered here (the server's watch streams the whole collection). */
static int wanted(const watch_state *w, const cJSON *obj)
{
    if (!funcd_label_selector_matches(&w->sel, obj))
        return 0;
    if (w->o->nnames == 0)
        return 1;
    const char *name = ctl_get_string(obj, "metadata.name");
    for (size_t i = 0; name && i < w->o->nnames; i++)
        if (!strcmp(name, w->o->names[i]))
            return 1;
    return 0;
}

static int on_event(const char *line, size_t len, void *payload)
{
    watch_state *w = payload;
    cJSON *event = cJSON_ParseWithLength(line, len);
    const char *type = ctl_get_string(event, "type");
    const cJSON *obj = ctl_get_path(event, "object");
    ctl_output out = w->ctx->output;
    int rc = 0;
    if (!type || !cJSON_IsObject(obj)) {
        ctl_fail("the server sent a watch line that is not an event: %.120s", line);
        rc = w->failed = 1;
    } else if (!strcmp(type, "ERROR")) {
        report_error_event(obj);
        rc = w->failed = 1;
    } else if (!strcmp(type, "BOOKMARK") || !wanted(w, obj)) {
        rc = 0;
    } else if (out == CTL_OUT_JSON) {
        printf("%.*s\n", (int)len, line);
    } else if (out == CTL_OUT_NAME) {
        if (w->o->event_column)
            printf("%s ", type);
        ctl_print_name(w->o->kind, obj, stdout);
    } else if (out == CTL_OUT_YAML) {
        fputs("---\n", stdout);
        rc = ctl_print_yaml(w->o->event_column ? event : obj, stdout) == 0 ? 0 : (w->failed = 1);
    } else if (print_row(w, type, obj) != 0) {
        ctl_fail("out of memory");
        rc = w->failed = 1;
    }
    fflush(stdout);
    cJSON_Delete(event);
    return rc;
}

static char *watch_path(ctl_client *client, const ctl_ctx *ctx, const ctl_watch_opts *o)
{
    char *base = o->all_namespaces ? ctl_api_path(client, NULL, o->kind->plural, NULL, NULL)
                                   : ctl_resource_path(client, ctx->ns, o->kind, NULL);
    funcd_buf b = FUNCD_BUF_INIT;
    if (!base || funcd_buf_printf(&b, "%s?watch=true", base) != 0 ||
        (o->since && funcd_buf_printf(&b, "&resourceVersion=%s", o->since) != 0)) {
        free(base);
        funcd_buf_free(&b);
        return NULL;
    }
    free(base);
    return funcd_buf_detach(&b, NULL);
}

int ctl_watch(ctl_ctx *ctx, const ctl_watch_opts *o)
{
    watch_state w = {.ctx = ctx, .o = o, .header_printed = o->header_printed};
    funcd_api_error err;
    if (o->widths)
        memcpy(w.widths, o->widths, sizeof(w.widths));
    if (funcd_label_selector_parse(&w.sel, o->selector ? o->selector : "", &err) != 0)
        return ctl_usage(ctx, "%s", err.message);
    ctl_client *client = ctl_ctx_client(ctx);
    char *path = client ? watch_path(client, ctx, o) : NULL;
    if (!path)
        return CTL_EXIT_ERROR;
    ctl_response resp = CTL_RESPONSE_INIT;
    /* Ctrl-C ends the watch cleanly (exit 0) instead of mid-line. */
    volatile sig_atomic_t *stop = ctl_stop_on_signals();
    int rc;
    if (ctl_stream(client, path, on_event, &w, stop, 0, &resp) != 0)
        rc = CTL_EXIT_ERROR;
    else if (resp.code != 200 && !*stop)
        rc = ctl_report_status(client, &resp, NULL, o->all_namespaces ? NULL : ctx->ns);
    else
        rc = w.failed ? CTL_EXIT_ERROR : 0;
    ctl_response_free(&resp);
    free(path);
    return rc;
}

int cmd_watch(ctl_ctx *ctx, int argc, char **argv)
{
    const char *kind_name = NULL;
    ctl_watch_opts o = {.event_column = 1};
    int only = 0;
    for (int i = 0; i < argc; i++) {
        if (ctl_end_of_flags(argv[i], &only))
            continue;
        int r = only ? 0 : ctl_flag_value(ctx, argc, argv, &i, NULL, "--resource-version", &o.since);
        int l = r || only ? 0 : ctl_flag_value(ctx, argc, argv, &i, "-l", "--selector", &o.selector);
        if (r < 0 || l < 0)
            return CTL_EXIT_USAGE;
        if (r > 0) {
            if (strspn(o.since, "0123456789") != strlen(o.since) || !*o.since)
                return ctl_usage(ctx, "--resource-version takes a number, e.g. 42");
        } else if (l > 0) {
            continue;
        } else if (!only && (!strcmp(argv[i], "-A") || !strcmp(argv[i], "--all-namespaces"))) {
            o.all_namespaces = 1;
        } else if (ctl_is_flag(argv[i], only)) {
            return ctl_usage(ctx, "unknown flag \"%s\"", argv[i]);
        } else if (kind_name) {
            return ctl_usage(ctx, "watch takes one KIND (it watches every object of that kind)");
        } else {
            kind_name = argv[i];
        }
    }
    if (!kind_name)
        return ctl_usage(ctx, "watch needs a KIND, e.g. `funcdctl watch functions`");
    if (!(o.kind = ctl_kind_arg(ctx, kind_name)))
        return CTL_EXIT_USAGE;
    o.cols.wide = ctx->output == CTL_OUT_WIDE;
    o.cols.namespace_column = o.all_namespaces;
    char *url = o.cols.wide ? ctl_data_plane_url(ctx, NULL, 1) : NULL;
    o.cols.url_base = url;
    int rc = ctl_watch(ctx, &o);
    free(url);
    return rc;
}
