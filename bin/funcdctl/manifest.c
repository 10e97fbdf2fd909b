#include "manifest.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "output.h"
#include "util/buf.h"

/* Far above any sane manifest; stops `apply -f /dev/zero`. */
#define CTL_MAX_MANIFEST (64u * 1024 * 1024)

static int read_all(FILE *f, const char *path, funcd_buf *out)
{
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (out->len + n > CTL_MAX_MANIFEST)
            return ctl_fail("%s is larger than %u MiB; split it into several files", path,
                            CTL_MAX_MANIFEST >> 20);
        if (funcd_buf_append(out, chunk, n) != 0)
            return ctl_fail("out of memory reading %s", path);
    }
    if (ferror(f))
        return ctl_fail("cannot read %s: %s", path, strerror(errno));
    return 0;
}

int ctl_read_manifest(const char *path, cJSON **out)
{
    *out = NULL;
    int is_stdin = !strcmp(path, "-");
    const char *shown = is_stdin ? "standard input" : path;
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f)
        return ctl_fail("cannot open %s: %s (check the path given to -f)", path, strerror(errno));
    funcd_buf text = FUNCD_BUF_INIT;
    int rc = read_all(f, shown, &text);
    if (!is_stdin)
        fclose(f);
    if (rc == 0) {
        funcd_api_error err = {{0}, {0}};
        if (funcd_api_decode_all(text.data ? text.data : "", text.len, out, &err) != 0)
            rc = ctl_fail("%s: %s%s%s", shown, err.field[0] ? err.field : "",
                          err.field[0] ? ": " : "", err.message);
        else if (cJSON_GetArraySize(*out) == 0)
            rc = ctl_fail("%s holds no objects (expected YAML or JSON with kind and metadata)",
                          shown);
    }
    if (rc != 0) {
        cJSON_Delete(*out);
        *out = NULL;
    }
    funcd_buf_free(&text);
    return rc;
}

static void list_kinds(char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; funcd_kinds[i] && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "",
                                 funcd_kinds[i]->kind);
}

int ctl_manifest_target(const ctl_ctx *ctx, const char *path, int index, const cJSON *obj,
                        ctl_target *out)
{
    const char *shown = strcmp(path, "-") ? path : "standard input";
    const char *kind = ctl_get_string(obj, "kind");
    char kinds[256];
    memset(out, 0, sizeof(*out));
    list_kinds(kinds, sizeof(kinds));
    if (!kind)
        return ctl_fail("%s: object %d has no kind: add `kind:` (one of %s)", shown, index + 1,
                        kinds);
    out->kind = funcd_kind_by_kind(kind);
    if (!out->kind)
        return ctl_fail("%s: object %d: unknown kind \"%s\" (use one of %s)", shown, index + 1,
                        kind, kinds);
    out->name = ctl_get_string(obj, "metadata.name");
    if (!out->name || !*out->name)
        return ctl_fail("%s: object %d (%s) has no metadata.name: add one", shown, index + 1,
                        kind);
    snprintf(out->what, sizeof(out->what), "%s/%s", out->kind->singular, out->name);
    const char *ns = ctl_get_string(obj, "metadata.namespace");
    if (ns && *ns && ctx->ns_explicit && strcmp(ns, ctx->ns))
        return ctl_fail("%s: %s says metadata.namespace \"%s\" but -n says \"%s\": drop -n or "
                        "make them agree",
                        shown, out->what, ns, ctx->ns);
    out->ns = ns && *ns ? ns : ctx->ns;
    return 0;
}
