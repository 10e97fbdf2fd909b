/* get KIND [NAME]: a table, or the objects as JSON, YAML or names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "output.h"
#include "util/misc.h"

static int print_table(const ctl_ctx *ctx, const funcd_kind *kind, const cJSON *items,
                       int single)
{
    int wide = ctx->output == CTL_OUT_WIDE;
    int64_t now = funcd_now_ms();
    ctl_table table = CTL_TABLE_INIT;
    ctl_row row;
    int rc = ctl_row_header(&row, kind, wide, NULL) == 0 ? ctl_table_add(&table, &row) : -1;
    const cJSON *obj;
    if (single) {
        if (rc == 0 && ctl_row_object(&row, kind, wide, items, now, NULL) == 0)
            rc = ctl_table_add(&table, &row);
    } else {
        cJSON_ArrayForEach(obj, items)
        {
            if (rc == 0 && (rc = ctl_row_object(&row, kind, wide, obj, now, NULL)) == 0)
                rc = ctl_table_add(&table, &row);
        }
    }
    if (rc == 0)
        ctl_table_print(&table, "", stdout);
    ctl_table_free(&table);
    return rc == 0 ? 0 : ctl_fail("out of memory");
}

/* What kubectl prints for several objects: a v1 List, whatever the kind. */
static cJSON *as_v1_list(cJSON *server_list)
{
    const char *rv = ctl_get_string(server_list, "metadata.resourceVersion");
    cJSON *list = cJSON_CreateObject();
    cJSON *items = cJSON_DetachItemFromObjectCaseSensitive(server_list, "items");
    if (!items)
        items = cJSON_CreateArray();
    if (!list || !items || !cJSON_AddStringToObject(list, "apiVersion", "v1")) {
        cJSON_Delete(list);
        cJSON_Delete(items);
        return NULL;
    }
    cJSON_AddItemToObject(list, "items", items);
    cJSON *meta = cJSON_AddStringToObject(list, "kind", "List")
                      ? cJSON_AddObjectToObject(list, "metadata")
                      : NULL;
    if (!meta || !cJSON_AddStringToObject(meta, "resourceVersion", rv ? rv : "")) {
        cJSON_Delete(list);
        return NULL;
    }
    return list;
}

static int print_list(const ctl_ctx *ctx, const funcd_kind *kind, cJSON *server_list)
{
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(server_list, "items");
    const cJSON *obj;
    if (ctx->output == CTL_OUT_NAME) {
        cJSON_ArrayForEach(obj, items) ctl_print_name(kind, obj, stdout);
        return 0;
    }
    if (ctx->output == CTL_OUT_TABLE || ctx->output == CTL_OUT_WIDE) {
        if (cJSON_GetArraySize(items) == 0) {
            fprintf(stderr, "No %s found in namespace \"%s\".\n", kind->plural, ctx->ns);
            return 0;
        }
        return print_table(ctx, kind, items, 0);
    }
    cJSON *list = as_v1_list(server_list);
    if (!list)
        return ctl_fail("out of memory");
    int rc = 0;
    if (ctx->output == CTL_OUT_JSON)
        ctl_print_json(list, stdout);
    else
        rc = ctl_print_yaml(list, stdout) == 0 ? 0 : CTL_EXIT_ERROR;
    cJSON_Delete(list);
    return rc;
}

static int print_one(const ctl_ctx *ctx, const funcd_kind *kind, const cJSON *obj)
{
    switch (ctx->output) {
    case CTL_OUT_NAME: ctl_print_name(kind, obj, stdout); return 0;
    case CTL_OUT_JSON: ctl_print_json(obj, stdout); return 0;
    case CTL_OUT_YAML: return ctl_print_yaml(obj, stdout) == 0 ? 0 : CTL_EXIT_ERROR;
    default: return print_table(ctx, kind, obj, 1);
    }
}

/* ---- get images: the server's image metadata cache ------------------------ */

#define SHORT_DIGEST 19 /* "sha256:" and 12 hex digits: enough for a person */

static int is_images(const char *word)
{
    return !strcmp(word, "images") || !strcmp(word, "image");
}

static int push_cell(ctl_row *r, const char *text)
{
    char *copy = funcd_strdup(text && *text ? text : "<none>");
    if (!copy || r->n >= CTL_MAX_COLUMNS) {
        free(copy);
        return -1;
    }
    r->cells[r->n++] = copy;
    return 0;
}

static int image_header(ctl_row *r, int wide)
{
    static const char *const names[] = {"DIGEST", "REF",    "SIZE",      "PULLED",
                                        "PLATFORM", "LAYERS", "ENTRYPOINT"};
    r->n = 0;
    for (size_t i = 0; i < (wide ? 7u : 4u); i++)
        if (push_cell(r, names[i]) != 0)
            return -1;
    return 0;
}

static void size_text(const cJSON *v, char *out, size_t len)
{
    double bytes = cJSON_IsNumber(v) && v->valuedouble > 0 ? v->valuedouble : 0;
    if (bytes < 1024)
        snprintf(out, len, "%.0f B", bytes);
    else if (bytes < 1024.0 * 1024)
        snprintf(out, len, "%.1f KiB", bytes / 1024);
    else if (bytes < 1024.0 * 1024 * 1024)
        snprintf(out, len, "%.1f MiB", bytes / (1024.0 * 1024));
    else
        snprintf(out, len, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
}

/* The entrypoint and cmd, as the argv they start: the command a person
 * would type. */
static int argv_text(const cJSON *img, funcd_buf *out)
{
    static const char *const keys[] = {"entrypoint", "cmd"};
    for (size_t k = 0; k < 2; k++) {
        const cJSON *arg;
        cJSON_ArrayForEach(arg, cJSON_GetObjectItemCaseSensitive(img, keys[k]))
        {
            if (cJSON_IsString(arg) &&
                funcd_buf_printf(out, "%s%s", out->len ? " " : "", arg->valuestring) != 0)
                return -1;
        }
    }
    return 0;
}

static int image_wide_cells(ctl_row *r, const cJSON *img)
{
    const char *os = ctl_get_string(img, "os"), *arch = ctl_get_string(img, "architecture");
    char platform[128], layers[32];
    snprintf(platform, sizeof(platform), "%s/%s", os && *os ? os : "?",
             arch && *arch ? arch : "?");
    snprintf(layers, sizeof(layers), "%d",
             cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(img, "layers")));
    funcd_buf entry = FUNCD_BUF_INIT;
    int rc = argv_text(img, &entry) == 0 && push_cell(r, platform) == 0 &&
                     push_cell(r, layers) == 0 && push_cell(r, entry.data) == 0
                 ? 0
                 : -1;
    funcd_buf_free(&entry);
    return rc;
}

static int image_row(ctl_row *r, const cJSON *img, int wide, int64_t now)
{
    const char *digest = ctl_get_string(img, "digest");
    char short_digest[SHORT_DIGEST + 1], size[32], age[32];
    snprintf(short_digest, sizeof(short_digest), "%s", digest ? digest : "");
    size_text(cJSON_GetObjectItemCaseSensitive(img, "size"), size, sizeof(size));
    ctl_age(ctl_get_string(img, "pulledAt"), now, age, sizeof(age));
    r->n = 0;
    if (push_cell(r, short_digest) != 0 || push_cell(r, ctl_get_string(img, "ref")) != 0 ||
        push_cell(r, size) != 0 || push_cell(r, age) != 0 || (wide && image_wide_cells(r, img)))
        return -1;
    return 0;
}

static int print_image_table(const ctl_ctx *ctx, const cJSON *items)
{
    int wide = ctx->output == CTL_OUT_WIDE;
    int64_t now = funcd_now_ms();
    ctl_table table = CTL_TABLE_INIT;
    ctl_row row = {0};
    int rc = image_header(&row, wide) == 0 ? ctl_table_add(&table, &row) : -1;
    const cJSON *img;
    cJSON_ArrayForEach(img, items)
    {
        if (rc == 0 && (rc = image_row(&row, img, wide, now)) == 0)
            rc = ctl_table_add(&table, &row);
    }
    ctl_row_free(&row);
    if (rc == 0)
        ctl_table_print(&table, "", stdout);
    ctl_table_free(&table);
    return rc == 0 ? 0 : ctl_fail("out of memory");
}

/* Whether `img` is what the user named: its reference, or its digest or a
 * prefix of it (at least 4 hex digits, "sha256:" optional). */
static int image_matches(const cJSON *img, const char *want)
{
    const char *ref = ctl_get_string(img, "ref"), *digest = ctl_get_string(img, "digest");
    if (ref && !strcmp(ref, want))
        return 1;
    if (!digest)
        return 0;
    const char *hex = funcd_has_prefix(want, "sha256:") ? want + 7 : want;
    return strlen(hex) >= 4 && funcd_has_prefix(digest, "sha256:") &&
           funcd_has_prefix(digest + 7, hex);
}

/* Keeps the items of the server's list that match `want`; returns how many
 * are left. */
static int filter_images(cJSON *list, const char *want)
{
    cJSON *items = cJSON_GetObjectItemCaseSensitive(list, "items");
    for (cJSON *img = items ? items->child : NULL, *next; img; img = next) {
        next = img->next;
        if (!image_matches(img, want))
            cJSON_Delete(cJSON_DetachItemViaPointer(items, img));
    }
    return cJSON_GetArraySize(items);
}

static int print_images(const ctl_ctx *ctx, cJSON *server_list)
{
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(server_list, "items");
    const cJSON *img;
    if (ctx->output == CTL_OUT_NAME) {
        cJSON_ArrayForEach(img, items) printf("image/%s\n", ctl_get_string(img, "digest"));
        return 0;
    }
    if (ctx->output == CTL_OUT_TABLE || ctx->output == CTL_OUT_WIDE) {
        if (cJSON_GetArraySize(items) == 0) {
            fputs("No images in the cache (pull one with `funcdctl pull IMAGE`).\n", stderr);
            return 0;
        }
        return print_image_table(ctx, items);
    }
    cJSON *list = as_v1_list(server_list);
    if (!list)
        return ctl_fail("out of memory");
    int rc = 0;
    if (ctx->output == CTL_OUT_JSON)
        ctl_print_json(list, stdout);
    else
        rc = ctl_print_yaml(list, stdout) == 0 ? 0 : CTL_EXIT_ERROR;
    cJSON_Delete(list);
    return rc;
}

static int get_images(ctl_ctx *ctx, const char *want)
{
    ctl_client *client = ctl_ctx_client(ctx);
    ctl_response resp = CTL_RESPONSE_INIT;
    cJSON *json = NULL;
    int rc;
    if (!client || ctl_request(client, "GET", "/apis/funcd.dev/v1/images", NULL, &resp) != 0)
        rc = CTL_EXIT_ERROR;
    else if (resp.code != 200)
        rc = ctl_report_status(client, &resp, "listing images", ctx->ns);
    else if (!(json = ctl_response_json(client, &resp)))
        rc = CTL_EXIT_ERROR;
    else if (want && filter_images(json, want) == 0)
        rc = ctl_fail("no image \"%s\" in the cache (see `funcdctl get images`)", want);
    else
        rc = print_images(ctx, json);
    cJSON_Delete(json);
    ctl_response_free(&resp);
    return rc;
}

/* ---- the command ---------------------------------------------------------- */

int cmd_get(ctl_ctx *ctx, int argc, char **argv)
{
    const char *args[2];
    int nargs = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--"))
            continue;
        if (argv[i][0] == '-' && argv[i][1] != '\0')
            return ctl_usage(ctx, "unknown flag \"%s\"", argv[i]);
        if (nargs == 2)
            return ctl_usage(ctx, "too many arguments: get takes a KIND and at most one NAME");
        args[nargs++] = argv[i];
    }
    if (nargs == 0)
        return ctl_usage(ctx, "get needs a KIND, e.g. `funcdctl get functions`");
    if (is_images(args[0]))
        return get_images(ctx, nargs > 1 ? args[1] : NULL);
    const funcd_kind *kind = ctl_kind_arg(ctx, args[0]);
    if (!kind)
        return CTL_EXIT_USAGE;
    const char *name = nargs > 1 ? args[1] : NULL;

    ctl_client *client = ctl_ctx_client(ctx);
    char *path = client ? ctl_resource_path(client, ctx->ns, kind, name) : NULL;
    ctl_response resp = CTL_RESPONSE_INIT;
    cJSON *json = NULL;
    int rc;
    if (!path || ctl_request(client, "GET", path, NULL, &resp) != 0)
        rc = CTL_EXIT_ERROR;
    else if (resp.code != 200)
        rc = ctl_report_status(client, &resp, NULL, ctx->ns);
    else if (!(json = ctl_response_json(client, &resp)))
        rc = CTL_EXIT_ERROR;
    else
        rc = name ? print_one(ctx, kind, json) : print_list(ctx, kind, json);
    cJSON_Delete(json);
    ctl_response_free(&resp);
    free(path);
    return rc;
}
