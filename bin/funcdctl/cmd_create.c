/* create secret generic NAME --from-literal=K=V --from-file=[K=]PATH: a
 * Secret from the command line, as kubectl makes one. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "cli.h"
#include "output.h"
#include "util/misc.h"

#define MAX_SECRET_FILE (1024u * 1024) /* the API's limit on a whole object */

typedef struct create_opts {
    const char *name, *type;
    const char **literals, **files;
    size_t nliterals, nfiles;
} create_opts;

static int parse(ctl_ctx *ctx, int argc, char **argv, create_opts *o)
{
    const char *words[3];
    int nwords = 0, only = 0;
    for (int i = 0; i < argc; i++) {
        const char *v;
        int r;
        if (ctl_end_of_flags(argv[i], &only))
            continue;
        if (!only && (r = ctl_flag_value(ctx, argc, argv, &i, NULL, "--from-literal", &v)) != 0) {
            if (r < 0)
                return CTL_EXIT_USAGE;
            if (v[0] == '=' || !strchr(v, '='))
                return ctl_usage(ctx, "--from-literal takes KEY=VALUE, not \"%s\"", v);
            o->literals[o->nliterals++] = v;
        } else if (!only &&
                   (r = ctl_flag_value(ctx, argc, argv, &i, NULL, "--from-file", &v)) != 0) {
            if (r < 0)
                return CTL_EXIT_USAGE;
            if (!*v || v[0] == '=' || v[strlen(v) - 1] == '=')
                return ctl_usage(ctx, "--from-file takes PATH or KEY=PATH, not \"%s\"", v);
            o->files[o->nfiles++] = v;
        } else if (!only && (r = ctl_flag_value(ctx, argc, argv, &i, NULL, "--type", &v)) != 0) {
            if (r < 0)
                return CTL_EXIT_USAGE;
            o->type = v;
        } else if (ctl_is_flag(argv[i], only)) {
            return ctl_usage(ctx, "unknown flag \"%s\"", argv[i]);
        } else if (nwords == 3) {
            return ctl_usage(ctx, "create secret generic takes one NAME");
        } else {
            words[nwords++] = argv[i];
        }
    }
    if (nwords == 0 || strcmp(words[0], "secret") != 0)
        return ctl_usage(ctx, "create makes Secrets: `funcdctl create secret generic NAME "
                              "--from-literal=KEY=VALUE` (other objects: apply -f)");
    if (nwords < 2 || strcmp(words[1], "generic") != 0)
        return ctl_usage(ctx, "create secret takes the type generic: `funcdctl create secret "
                              "generic NAME ...`");
    if (nwords < 3)
        return ctl_usage(ctx, "create secret generic needs the Secret's NAME");
    o->name = words[2];
    return 0;
}

static int read_file(const char *path, funcd_buf *out)
{
    FILE *f = fopen(path, "rb");
    char chunk[65536];
    size_t n;
    int rc = 0;
    if (!f)
        return ctl_fail("cannot open %s: %s (check the path after --from-file)", path,
                        strerror(errno));
    while (rc == 0 && (n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (out->len + n > MAX_SECRET_FILE)
            rc = ctl_fail("%s is larger than 1 MiB, more than a Secret holds", path);
        else if (funcd_buf_append(out, chunk, n) != 0)
            rc = ctl_fail("out of memory reading %s", path);
    }
    if (rc == 0 && ferror(f))
        rc = ctl_fail("cannot read %s: %s", path, strerror(errno));
    fclose(f);
    return rc;
}

/* data[key] = base64(bytes); a key given twice is an error, as in kubectl. */
static int put_key(cJSON *data, const char *key, size_t key_len, const void *bytes, size_t len)
{
    char *name = funcd_strndup(key, key_len);
    funcd_buf b64 = FUNCD_BUF_INIT;
    int rc = 0;
    if (!name || funcd__api_base64_encode(bytes, len, &b64) != 0)
        rc = ctl_fail("out of memory");
    else if (cJSON_GetObjectItemCaseSensitive(data, name))
        rc = ctl_fail("key \"%s\" is given twice", name);
    else if (!cJSON_AddStringToObject(data, name, b64.data ? b64.data : ""))
        rc = ctl_fail("out of memory");
    funcd_buf_free(&b64);
    free(name);
    return rc;
}

static int fill_data(const create_opts *o, cJSON *data)
{
    for (size_t i = 0; i < o->nliterals; i++) {
        const char *eq = strchr(o->literals[i], '=');
        if (put_key(data, o->literals[i], (size_t)(eq - o->literals[i]), eq + 1,
                    strlen(eq + 1)) != 0)
            return CTL_EXIT_ERROR;
    }
    for (size_t i = 0; i < o->nfiles; i++) {
        const char *spec = o->files[i], *eq = strchr(spec, '=');
        const char *path = eq ? eq + 1 : spec;
        const char *base = strrchr(path, '/');
        const char *key = eq ? spec : base ? base + 1 : path;
        size_t key_len = eq ? (size_t)(eq - spec) : strlen(key);
        funcd_buf bytes = FUNCD_BUF_INIT;
        int rc = read_file(path, &bytes);
        if (rc == 0)
            rc = put_key(data, key, key_len, bytes.data ? bytes.data : "", bytes.len);
        funcd_buf_free(&bytes);
        if (rc != 0)
            return CTL_EXIT_ERROR;
    }
    return 0;
}

static cJSON *build_secret(const ctl_ctx *ctx, const create_opts *o)
{
    cJSON *s = cJSON_CreateObject(), *meta = NULL, *data = NULL;
    if (!s || !cJSON_AddStringToObject(s, "apiVersion", FUNCD_API_VERSION) ||
        !cJSON_AddStringToObject(s, "kind", "Secret") ||
        !(meta = cJSON_AddObjectToObject(s, "metadata")) ||
        !cJSON_AddStringToObject(meta, "name", o->name) ||
        !cJSON_AddStringToObject(meta, "namespace", ctx->ns) ||
        !cJSON_AddStringToObject(s, "type", o->type ? o->type : "Opaque") ||
        !(data = cJSON_AddObjectToObject(s, "data"))) {
        cJSON_Delete(s);
        ctl_fail("out of memory");
        return NULL;
    }
    if (fill_data(o, data) != 0) {
        cJSON_Delete(s);
        return NULL;
    }
    return s;
}

static int print_result(const ctl_ctx *ctx, const cJSON *created, const char *name)
{
    switch (ctx->output) {
    case CTL_OUT_NAME: printf("secret/%s\n", name); return 0;
    case CTL_OUT_JSON: ctl_print_json(created, stdout); return 0;
    case CTL_OUT_YAML: return ctl_print_yaml(created, stdout) == 0 ? 0 : CTL_EXIT_ERROR;
    default: printf("secret/%s created\n", name); return 0;
    }
}

int cmd_create(ctl_ctx *ctx, int argc, char **argv)
{
    create_opts o = {0};
    o.literals = calloc((size_t)argc + 1, sizeof(*o.literals));
    o.files = calloc((size_t)argc + 1, sizeof(*o.files));
    int rc = o.literals && o.files ? parse(ctx, argc, argv, &o) : ctl_fail("out of memory");
    cJSON *secret = rc == 0 ? build_secret(ctx, &o) : NULL;
    ctl_client *client = secret ? ctl_ctx_client(ctx) : NULL;
    char *path = client ? ctl_api_path(client, ctx->ns, "secrets", NULL, NULL) : NULL;
    char *body = path ? cJSON_PrintUnformatted(secret) : NULL;
    ctl_response resp = CTL_RESPONSE_INIT;
    cJSON *created = NULL;
    char what[160];
    snprintf(what, sizeof(what), "secret/%s", o.name ? o.name : "");
    if (rc == 0 && !body)
        rc = CTL_EXIT_ERROR;
    else if (rc == 0 && ctl_request(client, "POST", path, body, &resp) != 0)
        rc = CTL_EXIT_ERROR;
    else if (rc == 0 && resp.code != 201)
        rc = ctl_report_status(client, &resp, what, ctx->ns);
    else if (rc == 0 && !(created = ctl_response_json(client, &resp)))
        rc = CTL_EXIT_ERROR;
    else if (rc == 0)
        rc = print_result(ctx, created, o.name);
    cJSON_Delete(created);
    ctl_response_free(&resp);
    free(body);
    free(path);
    cJSON_Delete(secret);
    free(o.files);
    free(o.literals);
    return rc;
}
