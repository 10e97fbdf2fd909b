/* get KIND [NAME]: a table, or the objects as JSON, YAML or names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "output.h"
#include "util/misc.h"
#include "watch.h"

typedef struct get_opts {
    const char *selector;
    int all_namespaces, watch, show_labels;
    const funcd_kind *kind; /* KIND NAME... or KIND; NULL for KIND/NAME... */
    ctl_ref *refs;
    int nrefs;
    ctl_cols cols;
} get_opts;

/* Rows of `items` (an array, or one object when `single`) under one header;
 * the widths used are left in `widths` for get -w. */
static int print_table(const get_opts *o, const funcd_kind *kind, const cJSON *items, int single,
                       size_t *widths)
{
    int64_t now = funcd_now_ms();
    ctl_table table = CTL_TABLE_INIT;
    ctl_row row;
    int rc = ctl_row_header(&row, kind, &o->cols, NULL) == 0 ? ctl_table_add(&table, &row) : -1;
    const cJSON *obj;
    if (single) {
        if (rc == 0 && ctl_row_object(&row, kind, &o->cols, items, now, NULL) == 0)
            rc = ctl_table_add(&table, &row);
    } else {
        cJSON_ArrayForEach(obj, items)
        {
            if (rc == 0 && (rc = ctl_row_object(&row, kind, &o->cols, obj, now, NULL)) == 0)
                rc = ctl_table_add(&table, &row);
        }
    }
    if (rc == 0 && widths)
        ctl_table_widths(&table, widths);
    if (rc == 0)
        ctl_table_print(&table, "", stdout);
    ctl_table_free(&table);
    return rc == 0 ? 0 : ctl_fail("out of memory");
}

/* What kubectl prints for several objects: a v1 List, whatever the kind.
 * Takes `items`. */
static cJSON *v1_list(cJSON *items, const char *rv)
{
    cJSON *list = cJSON_CreateObject();
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

static cJSON *as_v1_list(cJSON *server_list)
{
    const char *rv = ctl_get_string(server_list, "metadata.resourceVersion");
    return v1_list(cJSON_DetachItemFromObjectCaseSensitive(server_list, "items"), rv);
}

static int print_structured(const ctl_ctx *ctx, cJSON *list)
{
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

static int print_list(const ctl_ctx *ctx, const get_opts *o, cJSON *server_list, size_t *widths)
{
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(server_list, "items");
    const cJSON *obj;
    if (ctx->output == CTL_OUT_NAME) {
        cJSON_ArrayForEach(obj, items) ctl_print_name(o->kind, obj, stdout);
        return 0;
    }
    if (ctx->output == CTL_OUT_TABLE || ctx->output == CTL_OUT_WIDE) {
        if (cJSON_GetArraySize(items) == 0) {
            if (o->all_namespaces)
                fprintf(stderr, "No %s found.\n", o->kind->plural);
            else
                fprintf(stderr, "No %s found in namespace \"%s\".\n", o->kind->plural, ctx->ns);
            return 0;
        }
        return print_table(o, o->kind, items, 0, widths);
    }
    if (o->watch) /* a stream of objects follows: print them as such */
        return 0;
    return print_structured(ctx, as_v1_list(server_list));
}

/* ---- get images: the server's image metadata cache ------------------------ */

#define SHORT_DIGEST 19 /* "sha256:" and 12 hex digits: enough for a person */

static int is_images(const char *word)
{
    return !strcmp(word, "images") || !strcmp(word, "image");
}

static int image_header(ctl_row *r, int wide)
{
    static const char *const names[] = {"DIGEST", "REF",    "SIZE",      "PULLED",
                                        "PLATFORM", "LAYERS", "ENTRYPOINT"};
    r->n = 0;
    for (size_t i = 0; i < (wide ? 7u : 4u); i++)
        if (ctl_row_push(r, names[i]) != 0)
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
    int rc = argv_text(img, &entry) == 0 && ctl_row_push(r, platform) == 0 &&
                     ctl_row_push(r, layers) == 0 && ctl_row_push(r, entry.data) == 0
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
    if (ctl_row_push(r, short_digest) != 0 || ctl_row_push(r, ctl_get_string(img, "ref")) != 0 ||
        ctl_row_push(r, size) != 0 || ctl_row_push(r, age) != 0 || (wide && image_wide_cells(r, img)))
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

static int list_path(ctl_client *client, const ctl_ctx *ctx, const get_opts *o, char **out)
{
    char *base = ctl_resource_path(client, o->all_namespaces ? NULL : ctx->ns, o->kind, NULL);
    char *sel = base && o->selector ? ctl_escape(client, o->selector) : NULL;
    funcd_buf b = FUNCD_BUF_INIT;
    int rc = base && (!o->selector || sel) && funcd_buf_puts(&b, base) == 0 &&
                     (!sel || funcd_buf_printf(&b, "?labelSelector=%s", sel) == 0)
                 ? 0
                 : -1;
    free(base);
    free(sel);
    *out = rc == 0 ? funcd_buf_detach(&b, NULL) : NULL;
    funcd_buf_free(&b);
    return rc == 0 ? 0 : ctl_fail("out of memory");
}

static int watch_after(ctl_ctx *ctx, const get_opts *o, const char *rv, const size_t *widths,
                       int printed)
{
    const char **names = o->nrefs ? calloc((size_t)o->nrefs, sizeof(*names)) : NULL;
    if (o->nrefs && !names)
        return ctl_fail("out of memory");
    for (int i = 0; i < o->nrefs; i++)
        names[i] = o->refs[i].name;
    ctl_watch_opts w = {
        .kind = o->kind ? o->kind : o->refs[0].kind,
        .since = rv,
        .all_namespaces = o->all_namespaces,
        .selector = o->selector,
        .names = names,
        .nnames = (size_t)o->nrefs,
        .cols = o->cols,
        .header_printed = printed,
        .widths = widths,
    };
    int rc = ctl_watch(ctx, &w);
    free(names);
    return rc;
}

static int get_list(ctl_ctx *ctx, const get_opts *o)
{
    ctl_client *client = ctl_ctx_client(ctx);
    char *path = NULL;
    ctl_response resp = CTL_RESPONSE_INIT;
    cJSON *json = NULL;
    size_t widths[CTL_MAX_COLUMNS] = {0};
    int rc;
    if (!client || list_path(client, ctx, o, &path) != 0 ||
        ctl_request(client, "GET", path, NULL, &resp) != 0)
        rc = CTL_EXIT_ERROR;
    else if (resp.code != 200)
        rc = ctl_report_status(client, &resp, NULL, o->all_namespaces ? NULL : ctx->ns);
    else if (!(json = ctl_response_json(client, &resp)))
        rc = CTL_EXIT_ERROR;
    else
        rc = print_list(ctx, o, json, widths);
    if (rc == 0 && o->watch) {
        const cJSON *items = ctl_get_path(json, "items");
        fflush(stdout);
        rc = watch_after(ctx, o, ctl_get_string(json, "metadata.resourceVersion"), widths,
                         cJSON_GetArraySize(items) > 0);
    }
    cJSON_Delete(json);
    ctl_response_free(&resp);
    free(path);
    return rc;
}

/* GETs one object: 0 and *out, CTL_EXIT_ERROR (reported), -1 unreachable. */
static int get_one(ctl_ctx *ctx, ctl_client *client, const ctl_ref *ref, cJSON **out)
{
    char *path = ctl_resource_path(client, ctx->ns, ref->kind, ref->name);
    ctl_response resp = CTL_RESPONSE_INIT;
    char what[160];
    int rc = 0;
    *out = NULL;
    snprintf(what, sizeof(what), "%s/%s", ref->kind->singular, ref->name);
    if (!path || ctl_request(client, "GET", path, NULL, &resp) != 0)
        rc = -1;
    else if (resp.code != 200)
        rc = ctl_report_status(client, &resp, what, ctx->ns);
    else if (!(*out = ctl_response_json(client, &resp)))
        rc = CTL_EXIT_ERROR;
    ctl_response_free(&resp);
    free(path);
    return rc;
}

/* get KIND NAME... / KIND/NAME...: what exists is printed, what does not is
 * reported (exit 1), as kubectl does. Tables: one per run of a kind. */
/* The collection's revision, read before the objects: -w resumes from it,
 * so a change made while they are read is shown, not lost. NULL (reported)
 * on failure; malloc()ed. */
static char *list_revision(ctl_ctx *ctx, ctl_client *client, const funcd_kind *kind)
{
    char *path = ctl_resource_path(client, ctx->ns, kind, NULL);
    ctl_response resp = CTL_RESPONSE_INIT;
    cJSON *list = NULL;
    char *rv = NULL;
    int reached = path && ctl_request(client, "GET", path, NULL, &resp) == 0; /* else reported */
    if (reached && resp.code != 200)
        ctl_report_status(client, &resp, NULL, ctx->ns);
    else if (reached && (list = ctl_response_json(client, &resp)) != NULL) {
        const char *v = ctl_get_string(list, "metadata.resourceVersion");
        rv = v ? funcd_strdup(v) : NULL;
        if (!rv)
            ctl_fail("the list of %s has no metadata.resourceVersion to watch from",
                     kind->plural);
    }
    cJSON_Delete(list);
    ctl_response_free(&resp);
    free(path);
    return rv;
}

static int get_named(ctl_ctx *ctx, const get_opts *o)
{
    ctl_client *client = ctl_ctx_client(ctx);
    char *since = client && o->watch ? list_revision(ctx, client, o->refs[0].kind) : NULL;
    if (o->watch && !since)
        return CTL_EXIT_ERROR;
    cJSON *found = cJSON_CreateArray();
    const funcd_kind **kinds = calloc((size_t)o->nrefs, sizeof(*kinds));
    int rc = client && found && kinds ? 0 : CTL_EXIT_ERROR;
    for (int i = 0; rc >= 0 && client && found && kinds && i < o->nrefs; i++) {
        cJSON *obj;
        int r = get_one(ctx, client, &o->refs[i], &obj);
        if (r < 0) {
            rc = -1;
        } else if (r > 0) {
            rc = CTL_EXIT_ERROR;
        } else {
            kinds[cJSON_GetArraySize(found)] = o->refs[i].kind;
            cJSON_AddItemToArray(found, obj);
        }
    }
    if (rc < 0)
        rc = CTL_EXIT_ERROR;
    int n = found ? cJSON_GetArraySize(found) : 0;
    size_t widths[CTL_MAX_COLUMNS] = {0};
    if (ctx->output == CTL_OUT_NAME) {
        for (int i = 0; i < n; i++)
            ctl_print_name(kinds[i], cJSON_GetArrayItem(found, i), stdout);
    } else if (ctx->output == CTL_OUT_JSON || ctx->output == CTL_OUT_YAML) {
        if (n == 1 && !o->watch) {
            cJSON *one = cJSON_DetachItemFromArray(found, 0);
            int r = print_structured(ctx, one);
            rc = rc ? rc : r;
        } else if (n > 1 && !o->watch) {
            int r = print_structured(ctx, v1_list(found, NULL));
            found = NULL;
            rc = rc ? rc : r;
        }
    } else {
        for (int i = 0; i < n;) {
            int j = i;
            cJSON *run = cJSON_CreateArray();
            while (run && j < n && kinds[j] == kinds[i])
                cJSON_AddItemReferenceToArray(run, cJSON_GetArrayItem(found, j++));
            if (i > 0)
                fputc('\n', stdout);
            int r = run ? print_table(o, kinds[i], run, 0, widths) : ctl_fail("out of memory");
            cJSON_Delete(run);
            rc = rc ? rc : r;
            if (!run)
                break;
            i = j;
        }
    }
    if (rc == 0 && o->watch) {
        fflush(stdout);
        rc = watch_after(ctx, o, since, widths, n > 0);
    }
    free(since);
    cJSON_Delete(found);
    free(kinds);
    return rc;
}

static int parse(ctl_ctx *ctx, int argc, char **argv, get_opts *o, char **args, int *nargs)
{
    int only = 0;
    for (int i = 0; i < argc; i++) {
        if (ctl_end_of_flags(argv[i], &only))
            continue;
        int r = only ? 0 : ctl_flag_value(ctx, argc, argv, &i, "-l", "--selector", &o->selector);
        if (r < 0)
            return CTL_EXIT_USAGE;
        if (r > 0)
            continue;
        if (!only && (!strcmp(argv[i], "-A") || !strcmp(argv[i], "--all-namespaces")))
            o->all_namespaces = 1;
        else if (!only && (!strcmp(argv[i], "-w") || !strcmp(argv[i], "--watch")))
            o->watch = 1;
        else if (!only && !strcmp(argv[i], "--show-labels"))
            o->show_labels = 1;
        else if (ctl_is_flag(argv[i], only))
            return ctl_usage(ctx, "unknown flag \"%s\"", argv[i]);
        else
            args[(*nargs)++] = argv[i];
    }
    if (*nargs == 0)
        return ctl_usage(ctx, "get needs a KIND, e.g. `funcdctl get functions`");
    return 0;
}

static int check(ctl_ctx *ctx, const get_opts *o)
{
    if (o->nrefs > 0 && o->selector)
        return ctl_usage(ctx, "-l selects among all objects of a KIND: give no NAME with it");
    if (o->nrefs > 0 && o->all_namespaces)
        return ctl_usage(ctx, "-A lists every namespace: give no NAME with it (-n picks the "
                              "namespace of a NAME)");
    for (int i = 1; o->watch && i < o->nrefs; i++)
        if (o->refs[i].kind != o->refs[0].kind)
            return ctl_usage(ctx, "-w watches one KIND: give objects of one kind");
    return 0;
}

int cmd_get(ctl_ctx *ctx, int argc, char **argv)
{
    char **args = calloc((size_t)argc + 1, sizeof(*args));
    get_opts o = {0};
    int nargs = 0, rc;
    if (!args)
        return ctl_fail("out of memory");
    rc = parse(ctx, argc, argv, &o, args, &nargs);
    if (rc == 0 && is_images(args[0])) {
        if (nargs > 2 || o.selector || o.all_namespaces || o.watch || o.show_labels)
            rc = ctl_usage(ctx, "get images takes at most one REF and none of -l, -A, -w, "
                                "--show-labels");
        else
            rc = get_images(ctx, nargs > 1 ? args[1] : NULL);
        free(args);
        return rc;
    }
    if (rc == 0 && ctl_is_workflowruns(args[0])) {
        if (nargs > 2 || o.selector || o.all_namespaces || o.watch || o.show_labels)
            rc = ctl_usage(ctx, "get workflowruns takes at most one ID and none of -l, -A, -w, "
                                "--show-labels");
        else
            rc = ctl_get_workflowruns(ctx, nargs > 1 ? args[1] : NULL);
        free(args);
        return rc;
    }
    if (rc == 0 && ctl_is_invocations(args[0])) {
        if (nargs > 2 || o.selector || o.all_namespaces || o.watch || o.show_labels)
            rc = ctl_usage(ctx, "get invocations takes at most one ID and none of -l, -A, -w, "
                                "--show-labels");
        else
            rc = ctl_get_invocations(ctx, nargs > 1 ? args[1] : NULL);
        free(args);
        return rc;
    }
    if (rc == 0 && ctl_is_nodes(args[0])) {
        if (nargs > 2 || o.selector || o.all_namespaces || o.watch || o.show_labels)
            rc = ctl_usage(ctx, "get nodes takes at most one NAME and none of -l, -A, -w, "
                                "--show-labels");
        else
            rc = ctl_get_nodes(ctx, nargs > 1 ? args[1] : NULL);
        free(args);
        return rc;
    }
    if (rc == 0)
        rc = ctl_parse_refs(ctx, nargs, args, &o.kind, &o.refs, &o.nrefs);
    if (rc == 0)
        rc = check(ctx, &o);
    char *url = NULL;
    if (rc == 0) {
        o.cols.wide = ctx->output == CTL_OUT_WIDE;
        o.cols.namespace_column = o.all_namespaces;
        o.cols.labels_column = o.show_labels;
        /* A Function's URL: where the data plane listens, asked once. */
        const funcd_kind *k = o.kind ? o.kind : o.refs[0].kind;
        if (o.cols.wide && (!strcmp(k->kind, "Function") || !o.kind))
            o.cols.url_base = url = ctl_data_plane_url(ctx, NULL, 1);
        rc = o.nrefs > 0 ? get_named(ctx, &o) : get_list(ctx, &o);
    }
    free(url);
    free(o.refs);
    free(args);
    return rc;
}
