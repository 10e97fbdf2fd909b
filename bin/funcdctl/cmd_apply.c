/* apply -f FILE: create what is missing, replace what differs (kubectl-like). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "manifest.h"
#include "output.h"

typedef struct apply_state {
    ctl_ctx *ctx;
    ctl_client *client;
    int printed; /* objects printed so far, for YAML's "---" */
} apply_state;

static int is_empty(const cJSON *v)
{
    return !v || cJSON_IsNull(v) || ((cJSON_IsObject(v) || cJSON_IsArray(v)) && !v->child);
}

static int same(const cJSON *a, const cJSON *b)
{
    if (is_empty(a) || is_empty(b))
        return is_empty(a) && is_empty(b);
    return cJSON_Compare(a, b, 1);
}

/* The server stores Secrets without a type as Opaque. */
static int same_secret_type(const cJSON *local, const cJSON *remote)
{
    const char *l = ctl_get_string(local, "type");
    const char *r = ctl_get_string(remote, "type");
    return !strcmp(l ? l : "Opaque", r ? r : "Opaque");
}

/* Whether applying `local` would change `remote`: compares what a user
 * writes (spec, or a Secret's type and data; labels; annotations), after
 * normalizing the way the server does (stringData merged into data). */
static int unchanged(const funcd_kind *kind, const cJSON *local, const cJSON *remote)
{
    cJSON *norm = cJSON_Duplicate(local, 1);
    if (!norm || funcd_api_normalize(kind, norm) != 0) {
        cJSON_Delete(norm);
        return 0;
    }
    int eq = same(ctl_get_path(norm, "metadata.labels"), ctl_get_path(remote, "metadata.labels")) &&
             same(ctl_get_path(norm, "metadata.annotations"),
                  ctl_get_path(remote, "metadata.annotations"));
    if (eq && kind->has_spec)
        eq = same(ctl_get_path(norm, "spec"), ctl_get_path(remote, "spec"));
    else if (eq)
        eq = same_secret_type(norm, remote) &&
             same(ctl_get_path(norm, "data"), ctl_get_path(remote, "data"));
    cJSON_Delete(norm);
    return eq;
}

static void print_result(apply_state *st, const ctl_target *t, const char *verb,
                         const cJSON *result)
{
    switch (st->ctx->output) {
    case CTL_OUT_NAME: printf("%s\n", t->what); break;
    case CTL_OUT_JSON: ctl_print_json(result, stdout); break;
    case CTL_OUT_YAML:
        if (st->printed)
            fputs("---\n", stdout);
        ctl_print_yaml(result, stdout);
        break;
    default: printf("%s %s\n", t->what, verb); break;
    }
    st->printed++;
}

/* Sends `obj`; *result is what the server now holds (a 201 means it was
 * created, whatever was asked). -1 when funcd is unreachable. */
static int send_object(ctl_client *client, const ctl_target *t, const char *method,
                       const char *path, const cJSON *obj, cJSON **result, const char **verb)
{
    char *body = cJSON_PrintUnformatted(obj);
    ctl_response resp = CTL_RESPONSE_INIT;
    int rc = body ? ctl_request(client, method, path, body, &resp) : ctl_fail("out of memory");
    free(body);
    if (rc != 0) {
        ctl_response_free(&resp);
        return -1;
    }
    if (resp.code != 200 && resp.code != 201)
        rc = ctl_report_status(client, &resp, t->what, t->ns);
    else if (!(*result = ctl_response_json(client, &resp)))
        rc = CTL_EXIT_ERROR;
    else if (resp.code == 201)
        *verb = "created";
    ctl_response_free(&resp);
    return rc;
}

/* A PUT replaces: carry the revision we compared against, so a change made
 * in between is refused (409) rather than overwritten. */
static int set_revision(cJSON *obj, const cJSON *remote)
{
    cJSON *meta = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    const char *rv = ctl_get_string(remote, "metadata.resourceVersion");
    if (!rv || cJSON_GetObjectItemCaseSensitive(meta, "resourceVersion"))
        return 0;
    return cJSON_AddStringToObject(meta, "resourceVersion", rv) ? 0 : -1;
}

/* Labels and annotations of `remote` that `obj` does not set itself. */
static int keep_metadata(cJSON *obj, const cJSON *remote)
{
    static const char *const maps[] = {"labels", "annotations"};
    cJSON *meta = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    for (size_t i = 0; i < 2; i++) {
        const cJSON *have = ctl_get_path(ctl_get_path(remote, "metadata"), maps[i]);
        if (!have || cJSON_GetObjectItemCaseSensitive(meta, maps[i]))
            continue;
        cJSON *copy = cJSON_Duplicate(have, 1);
        if (!copy || !cJSON_AddItemToObject(meta, maps[i], copy)) {
            cJSON_Delete(copy);
            return -1;
        }
    }
    return 0;
}

static int replace(ctl_client *client, const ctl_target *t, const char *path, cJSON *obj,
                   int flags, const ctl_response *got, cJSON **result, const char **verb)
{
    cJSON *remote = ctl_response_json(client, got);
    if (!remote)
        return CTL_EXIT_ERROR;
    int rc = 0;
    if ((flags & CTL_APPLY_KEEP_METADATA) && keep_metadata(obj, remote) != 0) {
        rc = ctl_fail("out of memory");
    } else if (unchanged(t->kind, obj, remote)) {
        *verb = "unchanged";
        *result = remote;
        return 0;
    } else if (set_revision(obj, remote) != 0) {
        rc = ctl_fail("out of memory");
    } else {
        *verb = "configured";
        rc = send_object(client, t, "PUT", path, obj, result, verb);
    }
    cJSON_Delete(remote);
    return rc;
}

int ctl_apply_object(ctl_client *client, const ctl_target *t, cJSON *obj, int flags,
                     cJSON **result, const char **verb)
{
    char *path = ctl_resource_path(client, t->ns, t->kind, t->name);
    char *collection = ctl_resource_path(client, t->ns, t->kind, NULL);
    ctl_response got = CTL_RESPONSE_INIT;
    int rc;
    *result = NULL;
    *verb = "created";
    if (!path || !collection)
        rc = ctl_fail("out of memory");
    else if (ctl_request(client, "GET", path, NULL, &got) != 0)
        rc = -1;
    else if (got.code == 404)
        rc = send_object(client, t, "POST", collection, obj, result, verb);
    else if (got.code == 200)
        rc = replace(client, t, path, obj, flags, &got, result, verb);
    else
        rc = ctl_report_status(client, &got, t->what, t->ns);
    ctl_response_free(&got);
    free(path);
    free(collection);
    return rc;
}

/* 0, CTL_EXIT_ERROR (reported), or -1 when there is no point going on. */
static int apply_one(apply_state *st, const ctl_target *t, cJSON *obj)
{
    cJSON *result = NULL;
    const char *verb = NULL;
    int rc = ctl_apply_object(st->client, t, obj, 0, &result, &verb);
    if (rc == 0)
        print_result(st, t, verb, result);
    cJSON_Delete(result);
    return rc;
}

int cmd_apply(ctl_ctx *ctx, int argc, char **argv)
{
    const char *file = NULL;
    int only = 0;
    for (int i = 0; i < argc; i++) {
        const char *value;
        if (ctl_end_of_flags(argv[i], &only))
            continue;
        int r = only ? 0 : ctl_flag_value(ctx, argc, argv, &i, "-f", "--filename", &value);
        if (r < 0)
            return CTL_EXIT_USAGE;
        if (r == 0)
            return ctl_usage(ctx, "unexpected %s \"%s\" (apply reads -f FILE)",
                             ctl_is_flag(argv[i], only) ? "flag" : "argument", argv[i]);
        if (file)
            return ctl_usage(ctx, "give -f once (put several objects in one file, "
                                  "separated by ---)");
        file = value;
    }
    if (!file)
        return ctl_usage(ctx, "apply needs -f FILE (or -f - to read standard input)");

    cJSON *objects;
    if (ctl_read_manifest(file, &objects) != 0)
        return CTL_EXIT_ERROR;
    apply_state st = {.ctx = ctx, .client = ctl_ctx_client(ctx)};
    int rc = st.client ? 0 : CTL_EXIT_ERROR;
    int index = 0;
    cJSON *obj;
    cJSON_ArrayForEach(obj, objects)
    {
        ctl_target t;
        if (!st.client)
            break;
        /* Like kubectl, one bad object does not stop the others. */
        int r = ctl_manifest_target(ctx, file, index++, obj, &t);
        if (r == 0)
            r = apply_one(&st, &t, obj);
        if (r != 0)
            rc = CTL_EXIT_ERROR;
        if (r < 0)
            break;
    }
    cJSON_Delete(objects);
    return rc;
}
