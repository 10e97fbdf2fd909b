/* describe KIND NAME: metadata, spec as YAML, status, conditions table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "output.h"
#include "util/misc.h"

#define LABEL_WIDTH 19 /* "Resource Version:" and a little air */

static void field(const char *label, const char *value)
{
    printf("%-*s%s\n", LABEL_WIDTH, label, value && *value ? value : "<none>");
}

static void number_field(const char *label, const cJSON *v)
{
    char buf[64];
    if (cJSON_IsNumber(v))
        snprintf(buf, sizeof(buf), "%.0f", v->valuedouble);
    else
        snprintf(buf, sizeof(buf), "%s", cJSON_IsString(v) ? v->valuestring : "");
    field(label, buf);
}

/* labels and annotations: "key=value", one per line, under one label. */
static void map_field(const char *label, const cJSON *map)
{
    const cJSON *e;
    int first = 1;
    cJSON_ArrayForEach(e, map)
    {
        printf("%-*s%s=%s\n", LABEL_WIDTH, first ? label : "", e->string,
               cJSON_IsString(e) ? e->valuestring : "");
        first = 0;
    }
    if (first)
        field(label, NULL);
}

static void created_field(const cJSON *obj, int64_t now)
{
    const char *ts = ctl_get_string(obj, "metadata.creationTimestamp");
    char age[32], buf[128];
    ctl_age(ts, now, age, sizeof(age));
    snprintf(buf, sizeof(buf), "%s (%s ago)", ts ? ts : "<unknown>", age);
    field("Created:", ts ? buf : NULL);
}

static void print_metadata(const cJSON *obj, int64_t now, const char *url_base)
{
    field("Name:", ctl_get_string(obj, "metadata.name"));
    field("Namespace:", ctl_get_string(obj, "metadata.namespace"));
    field("Kind:", ctl_get_string(obj, "kind"));
    field("API Version:", ctl_get_string(obj, "apiVersion"));
    field("UID:", ctl_get_string(obj, "metadata.uid"));
    number_field("Resource Version:", ctl_get_path(obj, "metadata.resourceVersion"));
    number_field("Generation:", ctl_get_path(obj, "metadata.generation"));
    created_field(obj, now);
    map_field("Labels:", ctl_get_path(obj, "metadata.labels"));
    map_field("Annotations:", ctl_get_path(obj, "metadata.annotations"));
    const char *kind = ctl_get_string(obj, "kind");
    if (kind && !strcmp(kind, "Function")) {
        char *url = ctl_function_url(url_base, obj);
        field("URL:", url ? url : "<unknown: the server does not say where its data plane is>");
        free(url);
    }
}

static void print_yaml_section(const char *label, const cJSON *v)
{
    funcd_buf b = FUNCD_BUF_INIT;
    if (!v || (cJSON_IsObject(v) && !v->child) || funcd_api_to_yaml(v, &b) != 0 || !b.data) {
        field(label, NULL);
    } else {
        printf("%s\n", label);
        ctl_print_indented(b.data, "  ", stdout);
    }
    funcd_buf_free(&b);
}

/* base64 length to bytes, without decoding. */
static size_t decoded_size(const char *b64)
{
    size_t len = strlen(b64);
    size_t n = len / 4 * 3 + (len % 4 == 2 ? 1 : len % 4 == 3 ? 2 : 0);
    for (size_t i = 1; i <= 2 && len % 4 == 0 && len >= i && b64[len - i] == '='; i++)
        n--;
    return n;
}

/* Secret values are never shown, only their sizes. */
static void print_secret(const cJSON *obj)
{
    const char *type = ctl_get_string(obj, "type");
    const cJSON *e;
    field("Type:", type ? type : "Opaque");
    const cJSON *data = ctl_get_path(obj, "data");
    if (!data || !data->child) {
        field("Data:", NULL);
        return;
    }
    printf("Data:\n");
    cJSON_ArrayForEach(e, data)
    {
        printf("  %s: %zu bytes\n", e->string,
               cJSON_IsString(e) ? decoded_size(e->valuestring) : (size_t)0);
    }
}

static int print_conditions(const cJSON *obj)
{
    const cJSON *conds = ctl_get_path(obj, "status.conditions");
    if (cJSON_GetArraySize(conds) == 0) {
        field("Conditions:", NULL);
        return 0;
    }
    static const char *const keys[] = {"type", "status", "reason", "message",
                                       "lastTransitionTime"};
    static const char *const headers[] = {"TYPE", "STATUS", "REASON", "MESSAGE",
                                          "LAST-TRANSITION"};
    ctl_table table = CTL_TABLE_INIT;
    ctl_row row = {0};
    int rc = 0;
    for (int r = -1; rc == 0 && r < cJSON_GetArraySize(conds); r++) {
        const cJSON *cond = r < 0 ? NULL : cJSON_GetArrayItem(conds, r);
        row.n = 0;
        for (size_t i = 0; rc == 0 && i < 5; i++) {
            const char *v = cond ? ctl_get_string(cond, keys[i]) : headers[i];
            char *copy = funcd_strdup(v && *v ? v : "<none>");
            if (!copy)
                rc = -1;
            else
                row.cells[row.n++] = copy;
        }
        if (rc == 0)
            rc = ctl_table_add(&table, &row);
    }
    ctl_row_free(&row);
    printf("Conditions:\n");
    if (rc == 0)
        ctl_table_print(&table, "  ", stdout);
    ctl_table_free(&table);
    return rc == 0 ? 0 : ctl_fail("out of memory");
}

static int describe(const funcd_kind *kind, const cJSON *obj, const char *url_base)
{
    print_metadata(obj, funcd_now_ms(), url_base);
    if (kind->has_spec)
        print_yaml_section("Spec:", ctl_get_path(obj, "spec"));
    else
        print_secret(obj);
    cJSON *status = cJSON_Duplicate(ctl_get_path(obj, "status"), 1);
    cJSON_DeleteItemFromObjectCaseSensitive(status, "conditions");
    if (status && status->child)
        print_yaml_section("Status:", status);
    cJSON_Delete(status);
    return print_conditions(obj);
}

/* One object: 0, CTL_EXIT_ERROR (reported), -1 when funcd is unreachable. */
static int describe_one(ctl_ctx *ctx, ctl_client *client, const ctl_ref *ref,
                        const char *url_base, int index)
{
    char *path = ctl_resource_path(client, ctx->ns, ref->kind, ref->name);
    ctl_response resp = CTL_RESPONSE_INIT;
    cJSON *obj = NULL;
    char what[160];
    int rc;
    snprintf(what, sizeof(what), "%s/%s", ref->kind->singular, ref->name);
    if (!path || ctl_request(client, "GET", path, NULL, &resp) != 0)
        rc = -1;
    else if (resp.code != 200)
        rc = ctl_report_status(client, &resp, what, ctx->ns);
    else if (!(obj = ctl_response_json(client, &resp)))
        rc = CTL_EXIT_ERROR;
    else if (ctx->output == CTL_OUT_NAME)
        rc = (ctl_print_name(ref->kind, obj, stdout), 0);
    else if (ctx->output == CTL_OUT_JSON)
        rc = (ctl_print_json(obj, stdout), 0);
    else if (ctx->output == CTL_OUT_YAML)
        rc = (index ? fputs("---\n", stdout) : 0, ctl_print_yaml(obj, stdout) == 0)
                 ? 0
                 : CTL_EXIT_ERROR;
    else {
        if (index)
            fputc('\n', stdout);
        rc = describe(ref->kind, obj, url_base);
    }
    cJSON_Delete(obj);
    ctl_response_free(&resp);
    free(path);
    return rc;
}

int cmd_describe(ctl_ctx *ctx, int argc, char **argv)
{
    char **args = calloc((size_t)argc + 1, sizeof(*args));
    int nargs = 0, only = 0;
    if (!args)
        return ctl_fail("out of memory");
    for (int i = 0; i < argc; i++) {
        if (ctl_end_of_flags(argv[i], &only))
            continue;
        if (ctl_is_flag(argv[i], only)) {
            free(args);
            return ctl_usage(ctx, "unknown flag \"%s\"", argv[i]);
        }
        args[nargs++] = argv[i];
    }
    if (nargs >= 1 && ctl_is_workflowruns(args[0])) {
        int rc = nargs == 2 ? ctl_describe_workflowrun(ctx, args[1])
                            : ctl_usage(ctx, "describe workflowrun takes one ID");
        free(args);
        return rc;
    }
    const funcd_kind *kind;
    ctl_ref *refs = NULL;
    int nrefs = 0;
    int rc = ctl_parse_refs(ctx, nargs, args, &kind, &refs, &nrefs);
    if (rc == 0 && nrefs == 0)
        rc = ctl_usage(ctx, "describe needs KIND NAME, e.g. `funcdctl describe fn hello`");
    ctl_client *client = rc == 0 ? ctl_ctx_client(ctx) : NULL;
    if (rc == 0 && !client)
        rc = CTL_EXIT_ERROR;
    char *url = NULL;
    for (int i = 0; rc == 0 && i < nrefs; i++)
        if (ctx->output == CTL_OUT_TABLE && !strcmp(refs[i].kind->kind, "Function")) {
            url = ctl_data_plane_url(ctx, NULL, 1);
            break;
        }
    int failed = 0;
    for (int i = 0; rc == 0 && i < nrefs; i++) {
        int r = describe_one(ctx, client, &refs[i], url, i);
        if (r < 0)
            rc = CTL_EXIT_ERROR;
        failed |= r != 0;
    }
    free(url);
    free(refs);
    free(args);
    return rc ? rc : failed ? CTL_EXIT_ERROR : 0;
}
