/* watch KIND: one row per event of the list's NDJSON watch stream. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "output.h"
#include "util/misc.h"

typedef struct watch_state {
    const ctl_ctx *ctx;
    const funcd_kind *kind;
    size_t widths[CTL_MAX_COLUMNS];
    int header_printed;
    int failed;
} watch_state;

static int print_row(watch_state *w, const char *type, const cJSON *obj)
{
    int wide = w->ctx->output == CTL_OUT_WIDE;
    ctl_row row;
    if (!w->header_printed) {
        if (ctl_row_header(&row, w->kind, wide, "EVENT") != 0)
            return -1;
        /* Rows arrive one by one: start wide enough that most stay aligned. */
        ctl_row_typical_widths(w->kind, 1, w->widths);
        ctl_row_print(&row, w->widths, stdout);
        ctl_row_free(&row);
        w->header_printed = 1;
    }
    if (ctl_row_object(&row, w->kind, wide, obj, funcd_now_ms(), type) != 0)
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

static int on_event(const char *line, size_t len, void *payload)
{
    watch_state *w = payload;
    if (w->ctx->output == CTL_OUT_JSON) {
        printf("%.*s\n", (int)len, line);
        fflush(stdout);
        return 0;
    }
    cJSON *event = cJSON_ParseWithLength(line, len);
    const char *type = ctl_get_string(event, "type");
    const cJSON *obj = ctl_get_path(event, "object");
    int rc = 0;
    if (!type || !cJSON_IsObject(obj)) {
        ctl_fail("the server sent a watch line that is not an event: %.120s", line);
        rc = w->failed = 1;
    } else if (!strcmp(type, "ERROR")) {
        report_error_event(obj);
        rc = w->failed = 1;
    } else if (!strcmp(type, "BOOKMARK")) {
        rc = 0;
    } else if (w->ctx->output == CTL_OUT_NAME) {
        printf("%s ", type);
        ctl_print_name(w->kind, obj, stdout);
    } else if (w->ctx->output == CTL_OUT_YAML) {
        fputs("---\n", stdout);
        rc = ctl_print_yaml(event, stdout) == 0 ? 0 : (w->failed = 1);
    } else if (print_row(w, type, obj) != 0) {
        ctl_fail("out of memory");
        rc = w->failed = 1;
    }
    fflush(stdout);
    cJSON_Delete(event);
    return rc;
}

static char *watch_path(ctl_client *client, const ctl_ctx *ctx, const funcd_kind *kind,
                        const char *since)
{
    char *base = ctl_resource_path(client, ctx->ns, kind, NULL);
    funcd_buf b = FUNCD_BUF_INIT;
    if (!base || funcd_buf_printf(&b, "%s?watch=true", base) != 0 ||
        (since && funcd_buf_printf(&b, "&resourceVersion=%s", since) != 0)) {
        free(base);
        funcd_buf_free(&b);
        return NULL;
    }
    free(base);
    return funcd_buf_detach(&b, NULL);
}

static int parse(ctl_ctx *ctx, int argc, char **argv, const char **kind, const char **since)
{
    for (int i = 0; i < argc; i++) {
        int r = ctl_flag_value(ctx, argc, argv, &i, NULL, "--resource-version", since);
        if (r < 0)
            return CTL_EXIT_USAGE;
        if (r > 0) {
            if (strspn(*since, "0123456789") != strlen(*since) || !**since)
                return ctl_usage(ctx, "--resource-version takes a number, e.g. 42");
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return ctl_usage(ctx, "unknown flag \"%s\"", argv[i]);
        } else if (*kind) {
            return ctl_usage(ctx, "watch takes one KIND (it watches every object of that kind)");
        } else {
            *kind = argv[i];
        }
    }
    if (!*kind)
        return ctl_usage(ctx, "watch needs a KIND, e.g. `funcdctl watch functions`");
    return 0;
}

int cmd_watch(ctl_ctx *ctx, int argc, char **argv)
{
    const char *kind_name = NULL, *since = NULL;
    int rc = parse(ctx, argc, argv, &kind_name, &since);
    if (rc != 0)
        return rc;
    const funcd_kind *kind = ctl_kind_arg(ctx, kind_name);
    if (!kind)
        return CTL_EXIT_USAGE;
    ctl_client *client = ctl_ctx_client(ctx);
    char *path = client ? watch_path(client, ctx, kind, since) : NULL;
    if (!path)
        return CTL_EXIT_ERROR;

    watch_state w = {.ctx = ctx, .kind = kind};
    ctl_response resp = CTL_RESPONSE_INIT;
    /* Ctrl-C ends the watch cleanly (exit 0) instead of mid-line. */
    volatile sig_atomic_t *stop = ctl_stop_on_signals();
    if (ctl_stream(client, path, on_event, &w, stop, 0, &resp) != 0)
        rc = CTL_EXIT_ERROR;
    else if (resp.code != 200 && !*stop)
        rc = ctl_report_status(client, &resp, NULL, ctx->ns);
    else
        rc = w.failed ? CTL_EXIT_ERROR : 0;
    ctl_response_free(&resp);
    free(path);
    return rc;
}
