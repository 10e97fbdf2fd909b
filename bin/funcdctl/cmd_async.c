/*
 * Async invocations and the dead-letter queue (docs/eventing.md):
 *
 *   get invocations [ID]        GET .../namespaces/{ns}/invocations[/{id}]
 *   dlq list                    GET .../namespaces/{ns}/deadletters
 *   dlq replay ID...            POST .../deadletters/{id}/replay
 *   dlq purge ID... | --all     DELETE .../deadletters/{id} (or all of them)
 *
 * (`invoke --async` is in cmd_invoke.c.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "output.h"
#include "util/misc.h"

int ctl_is_invocations(const char *word)
{
    return !strcmp(word, "invocations") || !strcmp(word, "invocation") || !strcmp(word, "inv");
}

static void number_cell(char *out, size_t len, const cJSON *obj, const char *path)
{
    const cJSON *v = ctl_get_path(obj, path);
    if (cJSON_IsNumber(v))
        snprintf(out, len, "%.0f", v->valuedouble);
    else
        snprintf(out, len, "-");
}

/* One error on one line, cut to fit a table. */
static void short_text(char *out, size_t len, const char *s)
{
    size_t i = 0;
    for (; s && s[i] && i + 1 < len; i++)
        out[i] = s[i] == '\n' || s[i] == '\t' ? ' ' : s[i];
    out[i] = '\0';
    if (s && strlen(s) >= len && len > 4)
        memcpy(out + len - 4, "...", 4);
}

static int row_of(ctl_row *r, const cJSON *o, int dlq, int64_t now)
{
    char age[32], attempts[16], code[16], err[64];
    ctl_age(ctl_get_string(o, "metadata.creationTimestamp"), now, age, sizeof(age));
    number_cell(attempts, sizeof(attempts), o, "status.attempts");
    number_cell(code, sizeof(code), o, "status.statusCode");
    const char *origin = ctl_get_string(o, "spec.origin");
    short_text(err, sizeof(err), ctl_get_string(o, "status.error"));
    r->n = 0;
    const char *state = dlq ? (origin ? origin : "async") : ctl_get_string(o, "status.state");
    if (ctl_row_push(r, ctl_get_string(o, "metadata.name")) != 0 ||
        ctl_row_push(r, ctl_get_string(o, "spec.function")) != 0 ||
        ctl_row_push(r, state ? state : "") != 0 || ctl_row_push(r, attempts) != 0 ||
        ctl_row_push(r, code) != 0 || (dlq && ctl_row_push(r, err[0] ? err : "-") != 0) ||
        ctl_row_push(r, age) != 0)
        return -1;
    return 0;
}

static int print_table(const cJSON *items, int dlq)
{
    static const char *const inv[] = {"NAME", "FUNCTION", "STATE", "ATTEMPTS", "CODE", "AGE",
                                      NULL};
    static const char *const dl[] = {"NAME", "FUNCTION", "ORIGIN", "ATTEMPTS", "CODE", "ERROR",
                                     "AGE", NULL};
    int64_t now = funcd_now_ms();
    ctl_table table = CTL_TABLE_INIT;
    ctl_row row = {0};
    int rc = 0;
    for (const char *const *h = dlq ? dl : inv; rc == 0 && *h; h++)
        rc = ctl_row_push(&row, *h);
    if (rc == 0)
        rc = ctl_table_add(&table, &row);
    const cJSON *o;
    cJSON_ArrayForEach(o, items)
    {
        if (rc == 0 && (rc = row_of(&row, o, dlq, now)) == 0)
            rc = ctl_table_add(&table, &row);
    }
    ctl_row_free(&row);
    if (rc == 0)
        ctl_table_print(&table, "", stdout);
    ctl_table_free(&table);
    return rc == 0 ? 0 : ctl_fail("out of memory");
}

static int print(const ctl_ctx *ctx, cJSON *json, int one, int dlq)
{
    cJSON *items = one ? NULL : cJSON_GetObjectItemCaseSensitive(json, "items");
    const char *kind = dlq ? "deadletter" : "invocation";
    const cJSON *o;
    if (ctx->output == CTL_OUT_NAME) {
        if (one)
            printf("%s/%s\n", kind, ctl_get_string(json, "metadata.name"));
        cJSON_ArrayForEach(o, items) printf("%s/%s\n", kind, ctl_get_string(o, "metadata.name"));
        return 0;
    }
    if (ctx->output == CTL_OUT_JSON) {
        ctl_print_json(json, stdout);
        return 0;
    }
    if (ctx->output == CTL_OUT_YAML)
        return ctl_print_yaml(json, stdout) == 0 ? 0 : CTL_EXIT_ERROR;
    if (one) {
        cJSON *single = cJSON_CreateArray();
        int rc = single && cJSON_AddItemReferenceToArray(single, json) ? print_table(single, dlq)
                                                                      : ctl_fail("out of memory");
        cJSON_Delete(single);
        /* The answer of a finished invocation, below its row. */
        const char *body = ctl_get_string(json, "status.response.body");
        if (rc == 0 && body && *body) {
            fputs("\n", stdout);
            fputs(body, stdout);
            if (body[strlen(body) - 1] != '\n')
                fputc('\n', stdout);
        }
        return rc;
    }
    if (cJSON_GetArraySize(items) == 0) {
        fprintf(stderr, "No %s found in namespace %s.\n", dlq ? "dead letters" : "invocations",
                ctx->ns);
        const cJSON *dropped = ctl_get_path(json, "metadata.dropped");
        if (dlq && cJSON_IsNumber(dropped) && dropped->valuedouble > 0)
            fprintf(stderr, "%.0f dropped over the namespace's cap.\n", dropped->valuedouble);
        return 0;
    }
    return print_table(items, dlq);
}

/* GET of a list or of one; `what` names it in errors. */
static int get(ctl_ctx *ctx, const char *plural, const char *id, int dlq)
{
    ctl_client *client = ctl_ctx_client(ctx);
    if (!client)
        return CTL_EXIT_ERROR;
    char *path = ctl_api_path(client, ctx->ns, plural, id, NULL);
    if (!path)
        return ctl_fail("out of memory");
    ctl_response resp = CTL_RESPONSE_INIT;
    cJSON *json = NULL;
    char what[300];
    snprintf(what, sizeof(what), "%s/%s", dlq ? "deadletter" : "invocation", id ? id : "");
    int rc;
    if (ctl_request(client, "GET", path, NULL, &resp) != 0)
        rc = CTL_EXIT_ERROR;
    else if (resp.code != 200)
        rc = ctl_report_status(client, &resp, id ? what : plural, ctx->ns);
    else if (!(json = ctl_response_json(client, &resp)))
        rc = CTL_EXIT_ERROR;
    else
        rc = print(ctx, json, id != NULL, dlq);
    cJSON_Delete(json);
    ctl_response_free(&resp);
    free(path);
    return rc;
}

int ctl_get_invocations(ctl_ctx *ctx, const char *id)
{
    return get(ctx, "invocations", id, 0);
}

/* POST .../{id}/replay or DELETE .../{id} (or the collection). */
static int act(ctl_ctx *ctx, const char *method, const char *id, const char *sub,
               const char *done)
{
    ctl_client *client = ctl_ctx_client(ctx);
    if (!client)
        return CTL_EXIT_ERROR;
    char *path = ctl_api_path(client, ctx->ns, "deadletters", id, sub);
    if (!path)
        return ctl_fail("out of memory");
    ctl_response resp = CTL_RESPONSE_INIT;
    char what[300];
    snprintf(what, sizeof(what), "deadletter/%s", id ? id : "");
    int rc;
    if (ctl_request(client, method, path, sub ? "" : NULL, &resp) != 0) {
        rc = CTL_EXIT_ERROR;
    } else if (resp.code != 200 && resp.code != 202) {
        rc = ctl_report_status(client, &resp, id ? what : "purging the dead-letter queue",
                               ctx->ns);
    } else {
        if (id)
            printf("deadletter/%s %s\n", id, done);
        else {
            cJSON *json = ctl_response_json(client, &resp);
            printf("%s\n", json ? ctl_get_string(json, "message") : done);
            cJSON_Delete(json);
        }
        rc = 0;
    }
    ctl_response_free(&resp);
    free(path);
    return rc;
}

int cmd_dlq(ctl_ctx *ctx, int argc, char **argv)
{
    int only = 0, all = 0, nids = 0;
    const char *verb = NULL;
    char **ids = calloc((size_t)argc + 1, sizeof(*ids));
    if (!ids)
        return ctl_fail("out of memory");
    for (int i = 0; i < argc; i++) {
        if (ctl_end_of_flags(argv[i], &only))
            continue;
        if (!only && !strcmp(argv[i], "--all"))
            all = 1;
        else if (ctl_is_flag(argv[i], only)) {
            free(ids);
            return ctl_usage(ctx, "unknown flag \"%s\"", argv[i]);
        } else if (!verb)
            verb = argv[i];
        else
            ids[nids++] = argv[i];
    }
    int rc = 0;
    if (!verb || (strcmp(verb, "list") && strcmp(verb, "replay") && strcmp(verb, "purge")))
        rc = ctl_usage(ctx, "dlq takes list, replay ID... or purge ID...|--all");
    else if (!strcmp(verb, "list") && (nids || all))
        rc = ctl_usage(ctx, "dlq list takes no ID and no --all (funcdctl dlq list)");
    else if (!strcmp(verb, "replay") && (!nids || all))
        rc = ctl_usage(ctx, "dlq replay takes the IDs of dead letters (from `funcdctl dlq list`)");
    else if (!strcmp(verb, "purge") && !nids == !all)
        rc = ctl_usage(ctx, "dlq purge takes the IDs of dead letters, or --all");
    else if (strcmp(verb, "list") && ctx->output != CTL_OUT_TABLE)
        rc = ctl_usage(ctx, "-o applies to dlq list only");
    if (rc) {
        free(ids);
        return rc;
    }
    if (!strcmp(verb, "list"))
        rc = get(ctx, "deadletters", NULL, 1);
    else if (all)
        rc = act(ctx, "DELETE", NULL, NULL, "purged");
    for (int i = 0; i < nids; i++) {
        int one = !strcmp(verb, "replay") ? act(ctx, "POST", ids[i], "replay", "replayed")
                                          : act(ctx, "DELETE", ids[i], NULL, "purged");
        rc = rc ? rc : one;
    }
    free(ids);
    return rc;
}
