/* logs NAME [-f] [--tail N] [--since DURATION] [--invocation ID] [--show-node]:
 * what a Function's replicas wrote, one record a line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "output.h"

#define MAX_TAIL 1000000L

typedef struct logs_opts {
    const char *name;
    const char *tail;
    const char *since;
    const char *invocation;
    int follow;
    int show_node; /* a cluster: which node read each line */
} logs_opts;

typedef struct logs_state {
    const ctl_ctx *ctx;
    int show_node;
    int failed;
} logs_state;

/* A stream that cannot go on may end with a Status instead of a record. */
static int report_status_line(const cJSON *rec)
{
    const char *message = ctl_get_string(rec, "message");
    const char *reason = ctl_get_string(rec, "reason");
    const cJSON *code = ctl_get_path(rec, "code");
    return ctl_fail("the log stream ended: %s (%.0f %s)", message ? message : "server error",
                    cJSON_IsNumber(code) ? code->valuedouble : 0.0, reason ? reason : "Error");
}

/* What a record's body alone would hide: its multi-line attributes (a
 * python3 `traceback`, a node `stack`), each line indented under the record. */
static void print_details(const cJSON *rec)
{
    const cJSON *attr;
    cJSON_ArrayForEach(attr, ctl_get_path(rec, "attributes"))
    {
        if (!cJSON_IsString(attr) || !strchr(attr->valuestring, '\n'))
            continue;
        const char *p = attr->valuestring;
        while (*p) {
            const char *nl = strchr(p, '\n');
            size_t n = nl ? (size_t)(nl - p) : strlen(p);
            printf("    %.*s\n", (int)n, p);
            p += n + (nl != NULL);
        }
    }
}

static int on_record(const char *line, size_t len, void *payload)
{
    logs_state *st = payload;
    if (st->ctx->output == CTL_OUT_JSON) {
        printf("%.*s\n", (int)len, line);
        fflush(stdout);
        return 0;
    }
    cJSON *rec = cJSON_ParseWithLength(line, len);
    const char *kind = ctl_get_string(rec, "kind");
    const cJSON *body = ctl_get_path(rec, "body");
    const char *time = ctl_get_string(rec, "time");
    const char *replica = ctl_get_string(rec, "replica");
    const char *node = ctl_get_string(rec, "node");
    const char *severity = ctl_get_string(rec, "severity");
    /* A structured line's body may be any JSON value: print it as JSON. */
    char *body_json = body && !cJSON_IsString(body) ? cJSON_PrintUnformatted(body) : NULL;
    const char *text = cJSON_IsString(body) ? body->valuestring : body_json;
    int stop = 0;
    if (kind && !strcmp(kind, "Status")) {
        report_status_line(rec);
        st->failed = stop = 1;
    } else if (!text) {
        printf("%.*s\n", (int)len, line); /* not a record: show it as it came */
    } else {
        if (st->show_node)
            printf("%s %s %s %s %s\n", time ? time : "-", node && node[0] ? node : "-",
                   replica ? replica : "-", severity ? severity : "-", text);
        else
            printf("%s %s %s %s\n", time ? time : "-", replica ? replica : "-",
                   severity ? severity : "-", text);
        print_details(rec);
    }
    free(body_json);
    fflush(stdout);
    cJSON_Delete(rec);
    return stop;
}

static int parse(ctl_ctx *ctx, int argc, char **argv, logs_opts *o)
{
    int only = 0;
    for (int i = 0; i < argc; i++) {
        if (ctl_end_of_flags(argv[i], &only))
            continue;
        if (only) {
            if (o->name)
                return ctl_usage(ctx, "logs takes one function NAME");
            o->name = argv[i];
            continue;
        }
        int r = ctl_flag_value(ctx, argc, argv, &i, NULL, "--tail", &o->tail);
        int since = r ? 0 : ctl_flag_value(ctx, argc, argv, &i, NULL, "--since", &o->since);
        int inv = r || since ? 0
                             : ctl_flag_value(ctx, argc, argv, &i, NULL, "--invocation",
                                              &o->invocation);
        if (r < 0 || since < 0 || inv < 0)
            return CTL_EXIT_USAGE;
        if (since > 0 || inv > 0) {
            continue; /* the server judges them: it knows the units */
        } else if (r > 0) {
            char *end;
            long n = strtol(o->tail, &end, 10);
            if (!*o->tail || *end || n < 0 || n > MAX_TAIL)
                return ctl_usage(ctx, "--tail takes a number of lines from 0 to %ld, not \"%s\"",
                                 MAX_TAIL, o->tail);
        } else if (!strcmp(argv[i], "-f") || !strcmp(argv[i], "--follow")) {
            o->follow = 1;
        } else if (!strcmp(argv[i], "--show-node")) {
            o->show_node = 1;
        } else if (ctl_is_flag(argv[i], only)) {
            return ctl_usage(ctx, "unknown flag \"%s\"", argv[i]);
        } else if (o->name) {
            return ctl_usage(ctx, "logs takes one function NAME");
        } else {
            o->name = argv[i];
        }
    }
    if (!o->name)
        return ctl_usage(ctx, "logs needs the NAME of a function, e.g. `funcdctl logs hello`");
    return 0;
}

static char *logs_path(ctl_client *client, const ctl_ctx *ctx, const logs_opts *o)
{
    char *base = ctl_api_path(client, ctx->ns, "functions", o->name, "logs");
    funcd_buf b = FUNCD_BUF_INIT;
    char sep = '?';
    int rc = base ? funcd_buf_puts(&b, base) : -1;
    if (rc == 0 && o->follow) {
        rc = funcd_buf_printf(&b, "%cfollow=true", sep);
        sep = '&';
    }
    if (rc == 0 && o->tail) {
        rc = funcd_buf_printf(&b, "%ctailLines=%s", sep, o->tail);
        sep = '&';
    }
    char *since = rc == 0 && o->since ? ctl_escape(client, o->since) : NULL;
    char *inv = rc == 0 && o->invocation ? ctl_escape(client, o->invocation) : NULL;
    if (rc == 0 && since) {
        rc = funcd_buf_printf(&b, "%csince=%s", sep, since);
        sep = '&';
    }
    if (rc == 0 && inv)
        rc = funcd_buf_printf(&b, "%cinvocation=%s", sep, inv);
    if ((o->since && !since) || (o->invocation && !inv))
        rc = -1;
    free(since);
    free(inv);
    free(base);
    if (rc != 0) {
        funcd_buf_free(&b);
        return NULL;
    }
    return funcd_buf_detach(&b, NULL);
}

int cmd_logs(ctl_ctx *ctx, int argc, char **argv)
{
    logs_opts o = {0};
    int rc = parse(ctx, argc, argv, &o);
    if (rc != 0)
        return rc;
    ctl_client *client = ctl_ctx_client(ctx);
    char *path = client ? logs_path(client, ctx, &o) : NULL;
    if (!path)
        return CTL_EXIT_ERROR;
    logs_state st = {.ctx = ctx, .show_node = o.show_node};
    ctl_response resp = CTL_RESPONSE_INIT;
    /* Following ends on Ctrl-C, cleanly (exit 0). */
    volatile sig_atomic_t *stop = o.follow ? ctl_stop_on_signals() : NULL;
    char what[160];
    snprintf(what, sizeof(what), "function/%s", o.name);
    if (ctl_stream(client, path, on_record, &st, stop, 0, &resp) != 0)
        rc = CTL_EXIT_ERROR;
    else if (resp.code != 200 && !(stop && *stop))
        rc = ctl_report_status(client, &resp, what, ctx->ns);
    else
        rc = st.failed ? CTL_EXIT_ERROR : 0;
    ctl_response_free(&resp);
    free(path);
    return rc;
}
