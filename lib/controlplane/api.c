#include "controlplane/api.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifact/bundle.h"
#include "funcd/sys/error.h"
#include "objects/objects.h"
#include "port/blob.h"
#include "port/store.h"
#include "s3/s3.h"
#include "serving/serving.h"

#define API_PREFIX "/apis/funcd.dev/v1/"

void funcd_cp_init(funcd_cp *cp, funcd_store *store, const funcd_auth *auth,
                   const char *version_json)
{
    memset(cp, 0, sizeof(*cp));
    cp->store = store;
    cp->auth = auth;
    snprintf(cp->version_json, sizeof(cp->version_json), "%s", version_json);
}

void funcd_cp_response_free(funcd_cp_response *resp)
{
    funcd_buf_free(&resp->body);
    if (resp->defer.free_arg) /* not taken by a server */
        resp->defer.free_arg(resp->defer.arg);
    resp->defer = (funcd_cp_deferred){0};
}

static void append_json_string(funcd_buf *b, const char *s)
{
    char *q = NULL;
    cJSON *str = cJSON_CreateString(s);
    if (str)
        q = cJSON_PrintUnformatted(str);
    funcd_buf_puts(b, q ? q : "\"\"");
    free(q);
    cJSON_Delete(str);
}

void funcd_cp_status(funcd_cp_response *resp, int code, const char *reason, const char *field,
                     const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    resp->status = code;
    resp->watch = 0;
    resp->content_type = NULL;
    funcd_buf_reset(&resp->body);
    funcd_buf_printf(&resp->body,
                     "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
                     "\"code\":%d,\"reason\":\"%s\",\"message\":",
                     code, reason);
    append_json_string(&resp->body, msg);
    if (field && *field) {
        funcd_buf_puts(&resp->body, ",\"field\":");
        append_json_string(&resp->body, field);
    }
    funcd_buf_puts(&resp->body, "}");
}

/* Maps a registry error to its HTTP status. */
static void status_from_error(funcd_cp_response *resp, int rc)
{
    const char *msg = funcd_error_last()->message;
    switch (rc) {
    case FUNCD_ENOTFOUND: funcd_cp_status(resp, 404, "NotFound", NULL, "%s", msg); break;
    case FUNCD_EEXISTS: funcd_cp_status(resp, 409, "AlreadyExists", "metadata.name", "%s", msg); break;
    case FUNCD_ECONFLICT:
        funcd_cp_status(resp, 409, "Conflict", "metadata.resourceVersion", "%s", msg);
        break;
    case FUNCD_EINVAL: funcd_cp_status(resp, 400, "BadRequest", NULL, "%s", msg); break;
    case FUNCD_EGONE: funcd_cp_status(resp, 410, "Expired", "resourceVersion", "%s", msg); break;
    case FUNCD_ENOSPC:
        funcd_cp_status(resp, 507, "InsufficientStorage", NULL, "%s", msg);
        break;
    case FUNCD_EUNAVAILABLE: /* the store's database is away: retry, nothing is wrong here */
        funcd_cp_status(resp, 503, "ServiceUnavailable", NULL, "%s", msg);
        break;
    default: funcd_cp_status(resp, 500, "InternalError", NULL, "%s", msg); break;
    }
}

static void send_object(funcd_cp_response *resp, int code, const cJSON *obj)
{
    char *text = cJSON_PrintUnformatted(obj);
    if (!text) {
        funcd_cp_status(resp, 500, "InternalError", NULL, "out of memory encoding the response");
        return;
    }
    resp->status = code;
    funcd_buf_reset(&resp->body);
    funcd_buf_puts(&resp->body, text);
    free(text);
}

static int is_dns_label(const char *s, size_t n)
{
    if (n == 0 || n > FUNCD_API_MAX_NAME || s[0] == '-' || s[n - 1] == '-')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '-'))
            return 0;
    return 1;
}

/* Splits path segments after API_PREFIX into `seg` (copied, NUL-terminated).
 * The path arrives percent-decoded: a segment holding a control byte
 * ("%00", "%0a") would read as a shorter name, so it is refused (-2, its
 * index in *bad). */
static int split_path(const char *p, size_t n, char seg[][72], int max, int *bad)
{
    int count = 0;
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && p[j] != '/')
            j++;
        if (j == i || count == max || j - i >= 72)
            return -1;
        for (size_t k = i; k < j; k++) {
            if ((unsigned char)p[k] < 0x20 || p[k] == 0x7f) {
                *bad = count;
                return -2;
            }
        }
        memcpy(seg[count], p + i, j - i);
        seg[count][j - i] = '\0';
        count++;
        i = j + 1;
        if (j + 1 == n) /* trailing slash */
            break;
    }
    return count;
}

/* Finds `name` in a query string; copies its (undecoded) value. */
static int query_get(const funcd_cp_request *req, const char *name, char *out, size_t out_len)
{
    const char *q = req->query, *end = req->query ? req->query + req->query_len : NULL;
    size_t nl = strlen(name);
    while (q && q < end) {
        const char *amp = memchr(q, '&', (size_t)(end - q));
        const char *stop = amp ? amp : end;
        const char *eq = memchr(q, '=', (size_t)(stop - q));
        const char *kend = eq ? eq : stop;
        if ((size_t)(kend - q) == nl && memcmp(q, name, nl) == 0) {
            size_t vl = eq ? (size_t)(stop - eq - 1) : 0;
            if (vl >= out_len)
                vl = out_len - 1;
            memcpy(out, eq ? eq + 1 : "", vl);
            out[vl] = '\0';
            return 1;
        }
        q = amp ? amp + 1 : end;
    }
    return 0;
}

static int method_is(const funcd_cp_request *req, const char *m)
{
    return req->method_len == strlen(m) && memcmp(req->method, m, req->method_len) == 0;
}

typedef struct route {
    const funcd_kind *kind;
    const char *ns;   /* NULL: every namespace */
    const char *name; /* NULL: the collection */
    int bundles;      /* .../namespaces/{ns}/bundles */
    int logs;         /* .../functions/{name}/logs */
    int s3_credentials; /* .../functions/{name}/s3-credentials */
} route;

static void upload_bundle(funcd_cp *cp, const funcd_cp_request *req, const route *r,
                          funcd_cp_response *resp);
static void function_logs(funcd_cp *cp, const funcd_cp_request *req, const route *r,
                          funcd_cp_response *resp);
static void function_s3_credentials(funcd_cp *cp, const route *r, funcd_cp_response *resp);

/* The objects a list keeps: those matching `labelSelector`, and (a list
 * across namespaces by a token confined to some) the token's namespaces. */
typedef struct list_filter {
    funcd_label_selector sel;
    const funcd_token *only_ns_of; /* NULL: every namespace the route names */
    int redact;                    /* Secrets for a viewer: funcd_cp_redact each */
} list_filter;

static int parse_selector(const funcd_cp_request *req, list_filter *f, funcd_cp_response *resp);
static void list_objects(funcd_cp *cp, const route *r, const list_filter *f,
                         funcd_cp_response *resp);
static int redacts(const funcd_token *t, const route *r);
static void create_object(funcd_cp *cp, const funcd_cp_request *req, const route *r,
                          const funcd_token *t, funcd_cp_response *resp);
static void replace_object(funcd_cp *cp, const funcd_cp_request *req, const route *r,
                           const funcd_token *t, funcd_cp_response *resp);

static const funcd_token *authenticate(funcd_cp *cp, const funcd_cp_request *req,
                                       funcd_cp_response *resp)
{
    int missing;
    const funcd_token *t =
        funcd_auth_bearer(cp->auth, req->authorization, req->authorization_len, &missing);
    if (missing) {
        funcd_cp_status(resp, 401, "Unauthorized", NULL,
                        "missing bearer token: send `Authorization: Bearer <token>` "
                        "(funcdctl: --token or FUNCD_TOKEN)");
        return NULL;
    }
    if (!t)
        funcd_cp_status(resp, 401, "Unauthorized", NULL,
                        "invalid bearer token: check --token or FUNCD_TOKEN against the server's "
                        "token file");
    return t;
}

static int authorize(const funcd_token *t, const route *r, int write, funcd_cp_response *resp)
{
    if (funcd_token_allows(t, r->ns, write))
        return 1;
    const char *verb = write ? "write" : "read";
    if (r->ns)
        funcd_cp_status(resp, 403, "Forbidden", NULL,
                        "role %s may not %s %s in namespace \"%s\"; ask an admin for a token "
                        "that covers it",
                        funcd_role_name(t->role), verb, r->kind->plural, r->ns);
    else
        funcd_cp_status(resp, 403, "Forbidden", NULL,
                        "role %s may not %s %s across all namespaces; add -n NAMESPACE",
                        funcd_role_name(t->role), verb, r->kind->plural);
    return 0;
}

/* The query's resourceVersion into *rv (0 when absent): 1, or 0 after a
 * 400 when it is given but not a decimal revision (empty included). */
static int query_revision(const funcd_cp_request *req, uint64_t *rv, funcd_cp_response *resp)
{
    char text[64];
    *rv = 0;
    if (!query_get(req, "resourceVersion", text, sizeof(text)))
        return 1;
    if (strlen(text) < sizeof(text) - 1 && /* else cut short by query_get */
        funcd_api_parse_revision(text, strlen(text), rv) == 0)
        return 1;
    funcd_cp_status(resp, 400, "BadRequest", "resourceVersion",
                    "resourceVersion \"%.32s\" is not a decimal revision (0 to %lld); leave the "
                    "parameter out to start from the current state",
                    text, (long long)FUNCD_API_MAX_REVISION);
    return 0;
}

int funcd_cp_admit_body(funcd_cp *cp, const funcd_cp_request *req, funcd_cp_response *resp)
{
    funcd_buf_reset(&resp->body);
    resp->watch = 0;
    const funcd_token *t = authenticate(cp, req, resp);
    if (!t)
        return 0;
    /* A namespace in the path: the body is for a write there. */
    static const char ns_prefix[] = API_PREFIX "namespaces/";
    const size_t pl = sizeof(ns_prefix) - 1;
    if (req->path_len <= pl || memcmp(req->path, ns_prefix, pl) != 0)
        return 1;
    const char *ns = req->path + pl;
    size_t nl = 0;
    while (pl + nl < req->path_len && ns[nl] != '/')
        nl++;
    char name[72];
    if (nl == 0 || nl >= sizeof(name))
        return 1; /* not a namespace: the handler answers 400 or 404 */
    memcpy(name, ns, nl);
    name[nl] = '\0';
    /* Not a valid namespace: the handler answers 400 naming it. */
    if (!is_dns_label(name, nl) || funcd_token_allows(t, name, 1))
        return 1;
    funcd_cp_status(resp, 403, "Forbidden", NULL,
                    "role %s may not write in namespace \"%s\"; ask an admin for a token that "
                    "covers it",
                    funcd_role_name(t->role), name);
    return 0;
}

int funcd_cp_authenticated(funcd_cp *cp, const funcd_cp_request *req)
{
    funcd_cp_response resp = FUNCD_CP_RESPONSE_INIT;
    int ok = authenticate(cp, req, &resp) != NULL;
    funcd_cp_response_free(&resp);
    return ok;
}

static void start_watch(const funcd_cp_request *req, const route *r, funcd_cp_response *resp)
{
    resp->watch = 1;
    resp->status = 200;
    resp->w.kind = r->kind;
    snprintf(resp->w.ns, sizeof(resp->w.ns), "%s", r->ns ? r->ns : "");
    if (!query_revision(req, &resp->w.rv, resp))
        return;
    resp->w.from_rv = resp->w.rv != 0;
}

static int parse_route(const funcd_cp_request *req, route *r, char seg[][72],
                       funcd_cp_response *resp)
{
    const size_t pl = strlen(API_PREFIX);
    int bad = -1;
    int n = split_path(req->path + pl, req->path_len - pl, seg, 5, &bad);
    int at = 0;
    if (n == -2) {
        /* .../namespaces/{ns}/{plural}/{name}: which one is it */
        funcd_cp_status(resp, 400, "BadRequest",
                        bad == 1 ? "metadata.namespace" : bad == 3 ? "metadata.name" : NULL,
                        "%s in the path holds a control character (%%00 to %%1f or %%7f); "
                        "names are DNS-1123 labels",
                        bad == 1 ? "the namespace" : bad == 3 ? "the name" : "a segment");
        return 0;
    }
    if (n >= 3 && strcmp(seg[0], "namespaces") == 0) {
        if (!is_dns_label(seg[1], strlen(seg[1]))) {
            funcd_cp_status(resp, 400, "BadRequest", "metadata.namespace",
                            "namespace \"%s\" must be a DNS-1123 label: lowercase letters, "
                            "digits and '-', at most 63 characters",
                            seg[1]);
            return 0;
        }
        r->ns = seg[1];
        at = 2;
    } else if (n < 1 || n > 1) {
        n = -1;
    }
    if (n >= 0 && r->ns && n - at == 1 && strcmp(seg[at], "bundles") == 0) {
        r->bundles = 1;
        return 1;
    }
    if (n >= 0 && r->ns && n - at == 3 && strcmp(seg[at], "functions") == 0 &&
        strcmp(seg[at + 2], "logs") == 0) {
        r->logs = 1;
        n--;
    } else if (n >= 0 && r->ns && n - at == 3 && strcmp(seg[at], "functions") == 0 &&
               strcmp(seg[at + 2], "s3-credentials") == 0) {
        r->s3_credentials = 1;
        n--;
    }
    if (n < 0 || n - at > 2) {
        funcd_cp_status(resp, 404, "NotFound", NULL, "no such path: %.*s", (int)req->path_len,
                        req->path);
        return 0;
    }
    r->kind = funcd_kind_by_plural(seg[at]);
    if (!r->kind) {
        funcd_cp_status(resp, 404, "NotFound", NULL,
                        "the server has no resource \"%s\" (known: functions, functionconfigs, "
                        "secrets, workflows, eventsources, kvstores, egresspolicies, sites)",
                        seg[at]);
        return 0;
    }
    r->name = n - at == 2 ? seg[at + 1] : NULL;
    return 1;
}

static void handle_collection(funcd_cp *cp, const funcd_cp_request *req, const route *r,
                              const funcd_token *t, funcd_cp_response *resp)
{
    char watch[16];
    if (method_is(req, "GET")) {
        int is_watch = query_get(req, "watch", watch, sizeof(watch)) &&
                       (strcmp(watch, "true") == 0 || strcmp(watch, "1") == 0);
        list_filter f = {.redact = redacts(t, r)};
        /* A list across namespaces by a token confined to some lists those. */
        if (!r->ns && !is_watch && funcd_token_allows(t, NULL, 0) == 0)
            f.only_ns_of = t;
        else if (!authorize(t, r, 0, resp))
            return;
        uint64_t rv;
        if (parse_selector(req, &f, resp) < 0)
            return;
        if (is_watch && f.sel.n > 0)
            funcd_cp_status(resp, 400, "BadRequest", "labelSelector",
                            "labelSelector applies to lists, not to watches: filter the events");
        else if (is_watch)
            start_watch(req, r, resp);
        else if (query_revision(req, &rv, resp)) /* checked; a list is always current */
            list_objects(cp, r, &f, resp);
        if (resp->watch)
            resp->w.redact = redacts(t, r);
    } else if (method_is(req, "POST") && r->ns) {
        if (authorize(t, r, 1, resp))
            create_object(cp, req, r, t, resp);
    } else {
        funcd_cp_status(resp, 405, "MethodNotAllowed", NULL,
                        "%.*s is not allowed on %s; use GET%s", (int)req->method_len, req->method,
                        r->kind->plural, r->ns ? " or POST" : "");
    }
}

static void handle_object(funcd_cp *cp, const funcd_cp_request *req, const route *r,
                          const funcd_token *t, funcd_cp_response *resp)
{
    cJSON *obj = NULL;
    int rc;
    if (method_is(req, "GET")) {
        if (!authorize(t, r, 0, resp))
            return;
        rc = funcd_objects_get(cp->store, r->kind, r->ns, r->name, &obj, NULL);
        if (rc == 0 && redacts(t, r))
            funcd_cp_redact(obj);
        if (rc < 0)
            status_from_error(resp, rc);
        else
            send_object(resp, 200, obj);
    } else if (method_is(req, "PUT")) {
        if (authorize(t, r, 1, resp))
            replace_object(cp, req, r, t, resp);
    } else if (method_is(req, "DELETE")) {
        if (!authorize(t, r, 1, resp))
            return;
        rc = funcd_objects_delete(cp->store, r->kind, r->ns, r->name, &obj);
        if (rc < 0)
            status_from_error(resp, rc);
        else
            send_object(resp, 200, obj);
    } else {
        funcd_cp_status(resp, 405, "MethodNotAllowed", NULL,
                        "%.*s is not allowed on a %s; use GET, PUT or DELETE",
                        (int)req->method_len, req->method, r->kind->singular);
    }
    cJSON_Delete(obj);
}

void funcd_cp_handle(funcd_cp *cp, const funcd_cp_request *req, funcd_cp_response *resp)
{
    funcd_buf_reset(&resp->body);
    resp->watch = 0;
    if (req->path_len == 8 && memcmp(req->path, "/healthz", 8) == 0) {
        resp->status = 200;
        funcd_buf_puts(&resp->body, "{\"status\":\"ok\"}");
        return;
    }
    int is_metrics = req->path_len == 8 && memcmp(req->path, "/metrics", 8) == 0;
    if (is_metrics && cp->metrics_open) {
        funcd_cp_metrics(cp, req, NULL, resp);
        return;
    }
    const funcd_token *t = authenticate(cp, req, resp);
    if (!t)
        return;
    if (is_metrics) {
        funcd_cp_metrics(cp, req, t, resp);
        return;
    }
    if (req->path_len == 8 && memcmp(req->path, "/version", 8) == 0) {
        resp->status = 200;
        funcd_buf_puts(&resp->body, cp->version_json);
        return;
    }
    if (funcd_cp_images(cp, req, t, resp) || funcd_cp_nodes(cp, req, resp) ||
        funcd_cp_invocations(cp, req, t, resp) || funcd_cp_workflows(cp, req, t, resp))
        return;
    const size_t pl = strlen(API_PREFIX);
    if (req->path_len <= pl || memcmp(req->path, API_PREFIX, pl) != 0) {
        funcd_cp_status(resp, 404, "NotFound", NULL,
                        "no such path: %.*s (the API lives under /apis/funcd.dev/v1/)",
                        (int)(req->path_len > 200 ? 200 : req->path_len), req->path);
        return;
    }
    char seg[5][72];
    route r = {0};
    if (!parse_route(req, &r, seg, resp))
        return;
    if (r.bundles) {
        static const funcd_kind bundles = {"Bundle", "BundleList", "bundles", "bundle", NULL, 0};
        r.kind = &bundles;
        if (!method_is(req, "POST"))
            funcd_cp_status(resp, 405, "MethodNotAllowed", NULL,
                            "%.*s is not allowed on bundles; upload one with POST",
                            (int)req->method_len, req->method);
        else if (authorize(t, &r, 1, resp))
            upload_bundle(cp, req, &r, resp);
        return;
    }
    if (r.logs) {
        if (!method_is(req, "GET"))
            funcd_cp_status(resp, 405, "MethodNotAllowed", NULL, "logs are read with GET");
        else if (authorize(t, &r, 0, resp))
            function_logs(cp, req, &r, resp);
        return;
    }
    if (r.s3_credentials) {
        if (!method_is(req, "GET"))
            funcd_cp_status(resp, 405, "MethodNotAllowed", NULL, "S3 credentials are read with GET");
        else if (t->role != FUNCD_ROLE_ADMIN || !funcd_token_allows(t, r.ns, 1))
            funcd_cp_status(resp, 403, "Forbidden", NULL,
                            "only an admin of namespace \"%s\" may read a function's S3 "
                            "credentials",
                            r.ns);
        else
            function_s3_credentials(cp, &r, resp);
        return;
    }
    if (r.name)
        handle_object(cp, req, &r, t, resp);
    else
        handle_collection(cp, req, &r, t, resp);
}

/* ---- list ------------------------------------------------------------- */

/* %XX decoded in place; -1 on a malformed escape. */
static int percent_decode(char *s)
{
    char *out = s;
    for (const char *in = s; *in; in++) {
        if (*in != '%') {
            *out++ = *in;
            continue;
        }
        unsigned v;
        if (!isxdigit((unsigned char)in[1]) || !isxdigit((unsigned char)in[2]) ||
            sscanf(in + 1, "%2x", &v) != 1 || v == 0)
            return -1;
        *out++ = (char)v;
        in += 2;
    }
    *out = '\0';
    return 0;
}

static int parse_selector(const funcd_cp_request *req, list_filter *f, funcd_cp_response *resp)
{
    char text[2048];
    funcd_api_error err = {{0}, {0}};
    if (!query_get(req, "labelSelector", text, sizeof(text)))
        return 0;
    if (strlen(text) >= sizeof(text) - 1)
        snprintf(err.message, sizeof(err.message), "labelSelector is longer than %zu bytes",
                 sizeof(text) - 2);
    else if (percent_decode(text) < 0)
        snprintf(err.message, sizeof(err.message), "labelSelector has a malformed %%-escape");
    else if (funcd_label_selector_parse(&f->sel, text, &err) == 0)
        return 0;
    funcd_cp_status(resp, 400, "BadRequest", "labelSelector", "%s", err.message);
    return -1;
}

typedef struct list_ctx {
    funcd_buf *out;
    int count;
    int failed;
    const list_filter *filter;
} list_ctx;

static int list_one(const funcd_store_kv *kv, void *payload)
{
    list_ctx *lc = payload;
    cJSON *obj = funcd_objects_decode(kv->value, kv->len, kv->revision);
    const char *ns = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "metadata"),
                                         "namespace"));
    if (obj && (!funcd_label_selector_matches(&lc->filter->sel, obj) ||
                (lc->filter->only_ns_of && !funcd_token_allows(lc->filter->only_ns_of, ns, 0)))) {
        cJSON_Delete(obj);
        return 0;
    }
    if (obj && lc->filter->redact)
        funcd_cp_redact(obj);
    char *text = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    if (!text) {
        lc->failed = 1;
        return 1;
    }
    if (lc->count++)
        funcd_buf_puts(lc->out, ",");
    funcd_buf_puts(lc->out, text);
    free(text);
    return 0;
}

static void list_objects(funcd_cp *cp, const route *r, const list_filter *f,
                         funcd_cp_response *resp)
{
    funcd_buf prefix = FUNCD_BUF_INIT, items = FUNCD_BUF_INIT;
    list_ctx lc = {&items, 0, 0, f};
    uint64_t rev = 0;
    int rc = funcd_objects_prefix(&prefix, r->kind, r->ns);
    if (rc == 0)
        rc = funcd_port_store_list(cp->store, prefix.data, list_one, &lc, &rev);
    if (rc == 0 && lc.failed)
        rc = funcd_error_set(FUNCD_EIO, "a stored %s is not valid JSON", r->kind->singular);
    if (rc < 0) {
        status_from_error(resp, rc);
    } else {
        resp->status = 200;
        funcd_buf_printf(&resp->body,
                         "{\"apiVersion\":\"" FUNCD_API_VERSION "\",\"kind\":\"%s\",\"metadata\":"
                         "{\"resourceVersion\":\"%" PRIu64 "\"},\"items\":[",
                         r->kind->list_kind, rev);
        funcd_buf_append(&resp->body, items.data ? items.data : "", items.len);
        funcd_buf_puts(&resp->body, "]}");
    }
    funcd_buf_free(&prefix);
    funcd_buf_free(&items);
}

/* ---- create / replace ------------------------------------------------- */

/* Decodes and validates a body for `r`; NULL after setting an error. */
static cJSON *decode_body(const funcd_cp_request *req, const route *r, funcd_cp_response *resp)
{
    funcd_api_error err = {{0}, {0}};
    cJSON *obj = NULL;
    if (req->body_len == 0) {
        funcd_cp_status(resp, 400, "BadRequest", NULL,
                        "the request body is empty; send the %s as JSON or YAML", r->kind->kind);
        return NULL;
    }
    if (funcd_api_decode(req->body, req->body_len, &obj, &err) < 0) {
        funcd_cp_status(resp, 400, "BadRequest", err.field, "%s", err.message);
        return NULL;
    }
    if (funcd_api_validate(r->kind, obj, &err) < 0) {
        funcd_cp_status(resp, 400, "BadRequest", err.field, "%s: %s",
                        err.field[0] ? err.field : "object", err.message);
        cJSON_Delete(obj);
        return NULL;
    }
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    const char *ns = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(md, "namespace"));
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(md, "name"));
    if (ns && *ns && strcmp(ns, r->ns) != 0) {
        funcd_cp_status(resp, 400, "BadRequest", "metadata.namespace",
                        "metadata.namespace \"%s\" does not match the namespace in the URL "
                        "(\"%s\")",
                        ns, r->ns);
    } else if (r->name && name && strcmp(name, r->name) != 0) {
        funcd_cp_status(resp, 400, "BadRequest", "metadata.name",
                        "metadata.name \"%s\" does not match the name in the URL (\"%s\")", name,
                        r->name);
    } else if (funcd_api_normalize(r->kind, obj) < 0) {
        funcd_cp_status(resp, 500, "InternalError", NULL, "out of memory");
    } else {
        return obj;
    }
    cJSON_Delete(obj);
    return NULL;
}

static void create_object(funcd_cp *cp, const funcd_cp_request *req, const route *r,
                          const funcd_token *t, funcd_cp_response *resp)
{
    cJSON *obj = decode_body(req, r, resp), *out = NULL;
    if (!obj)
        return;
    int held = 0;
    if (!funcd_cp_admit(cp, r->kind, r->ns, t, obj, resp) ||
        !funcd_cp_admit_quota(cp, r->kind, r->ns, obj, resp, &held) ||
        (strcmp(r->kind->kind, "Workflow") == 0 &&
         !funcd_cp_admit_workflow(cp, r->ns, obj, resp))) {
        funcd_cp_quota_done(cp, r->ns, held, NULL);
        cJSON_Delete(obj);
        return;
    }
    int rc = funcd_objects_create(cp->store, r->kind, r->ns, obj, &out);
    funcd_cp_quota_done(cp, r->ns, held, rc < 0 ? NULL : out);
    if (rc < 0)
        status_from_error(resp, rc);
    else
        send_object(resp, 201, out);
    cJSON_Delete(obj);
    cJSON_Delete(out);
}

static void replace_object(funcd_cp *cp, const funcd_cp_request *req, const route *r,
                           const funcd_token *t, funcd_cp_response *resp)
{
    cJSON *obj = decode_body(req, r, resp), *out = NULL;
    if (!obj)
        return;
    int held = 0;
    if (!funcd_cp_admit(cp, r->kind, r->ns, t, obj, resp) ||
        !funcd_cp_admit_quota(cp, r->kind, r->ns, obj, resp, &held) ||
        (strcmp(r->kind->kind, "Workflow") == 0 &&
         !funcd_cp_admit_workflow(cp, r->ns, obj, resp))) {
        funcd_cp_quota_done(cp, r->ns, held, NULL);
        cJSON_Delete(obj);
        return;
    }
    int created = 0;
    int rc = funcd_objects_replace(cp->store, r->kind, r->ns, r->name, obj, &created, &out);
    funcd_cp_quota_done(cp, r->ns, held, rc == 0 && created ? out : NULL);
    if (rc == FUNCD_EINVAL) /* the only caller-side error of a replace */
        funcd_cp_status(resp, 400, "BadRequest", "metadata.resourceVersion", "%s",
                        funcd_error_last()->message);
    else if (rc < 0)
        status_from_error(resp, rc);
    else
        send_object(resp, created ? 201 : 200, out);
    cJSON_Delete(obj);
    cJSON_Delete(out);
}

#define REDACTED_ANNOTATION "funcd.dev/data-redacted"

void funcd_cp_redact(cJSON *secret)
{
    cJSON *data = cJSON_GetObjectItemCaseSensitive(secret, "data");
    cJSON *item;
    if (cJSON_IsObject(data)) {
        cJSON_ArrayForEach(item, data) {
            if (cJSON_IsString(item) && cJSON_SetValuestring(item, "")) {
                continue;
            }
            /* not a string (validation keeps them out), or no memory: no values at all */
            cJSON_DeleteItemFromObjectCaseSensitive(secret, "data");
            break;
        }
    } else if (data) {
        cJSON_DeleteItemFromObjectCaseSensitive(secret, "data");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(secret, "stringData");
    cJSON *md = cJSON_GetObjectItemCaseSensitive(secret, "metadata");
    if (!cJSON_IsObject(md))
        return;
    cJSON *ann = cJSON_GetObjectItemCaseSensitive(md, "annotations");
    if (!cJSON_IsObject(ann)) {
        cJSON_DeleteItemFromObjectCaseSensitive(md, "annotations");
        ann = cJSON_AddObjectToObject(md, "annotations");
    }
    if (!ann)
        return;
    cJSON_DeleteItemFromObjectCaseSensitive(ann,
                                            "kubectl.kubernetes.io/last-applied-configuration");
    cJSON_DeleteItemFromObjectCaseSensitive(ann, REDACTED_ANNOTATION);
    cJSON_AddStringToObject(ann, REDACTED_ANNOTATION, "true");
}

/* A viewer reads a Secret's metadata, type and keys, not its values
 * (Kubernetes' `view` role does not read Secrets at all). */
static int redacts(const funcd_token *t, const route *r)
{
    return t->role == FUNCD_ROLE_VIEWER && strcmp(r->kind->kind, "Secret") == 0;
}

int funcd_cp_watch_line(funcd_buf *out, const char *type, const void *value, size_t len,
                        uint64_t revision, int redact)
{
    cJSON *obj = funcd_objects_decode(value, len, revision);
    if (obj && redact)
        funcd_cp_redact(obj);
    char *text = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    if (!text)
        return funcd_error_set(FUNCD_EIO, "a stored object is not valid JSON");
    int rc = funcd_buf_printf(out, "{\"type\":\"%s\",\"object\":%s}\n", type, text);
    free(text);
    return rc;
}

/* ---- bundles ---------------------------------------------------------- */

/* An upload's check decompresses up to FUNCD_BUNDLE_MAX_TOTAL bytes (about
 * half a second for a 250 MiB one): it runs on a thread of its own, with a
 * copy of the body, so the control plane answers others meanwhile. */
typedef struct upload {
    funcd_cp *cp;
    char ns[64];
    void *body;
    size_t len;
} upload;

static void upload_free(void *arg)
{
    upload *u = arg;
    free(u->body);
    free(u);
}

static void upload_run(void *arg, funcd_cp_response *resp)
{
    upload *u = arg;
    char err[512], digest[FUNCD_BUNDLE_DIGEST_LEN];
    if (funcd_bundle_check(u->body, u->len, NULL, err, sizeof(err)) < 0) {
        funcd_cp_status(resp, 400, "BadRequest", "body", "%s", err);
        return;
    }
    funcd_bundle_digest(u->body, u->len, digest);
    /* Only the namespace's own uploads count: whether another namespace
     * has these bytes shows neither in the answer nor in its timing (the
     * bytes are written again, under the same digest). */
    int exists = funcd_bundle_visible(u->cp->blob, u->ns, digest);
    if (!exists && (funcd_port_blob_put(u->cp->blob, digest, u->body, u->len) < 0 ||
                    funcd_bundle_grant(u->cp->blob, u->ns, digest) < 0)) {
        funcd_cp_status(resp, 500, "InternalError", NULL, "storing the bundle: %s",
                        funcd_error_last()->message);
        return;
    }
    resp->status = exists ? 200 : 201;
    funcd_buf_printf(&resp->body,
                     "{\"apiVersion\":\"" FUNCD_API_VERSION "\",\"kind\":\"Bundle\",\"digest\":\"%s\","
                     "\"size\":%zu}",
                     digest, u->len);
}

static void upload_bundle(funcd_cp *cp, const funcd_cp_request *req, const route *r,
                          funcd_cp_response *resp)
{
    if (!cp->blob) {
        funcd_cp_status(resp, 501, "NotImplemented", NULL, "this platform has no blob store");
        return;
    }
    if (req->body_len == 0) {
        funcd_cp_status(resp, 400, "BadRequest", "body",
                        "the request body is empty; send the bundle as a .tar.gz");
        return;
    }
    if (req->body_len > FUNCD_BUNDLE_MAX_COMPRESSED) {
        funcd_cp_status(resp, 413, "RequestEntityTooLarge", "body",
                        "the bundle has %zu bytes; the limit is %llu", req->body_len,
                        (unsigned long long)FUNCD_BUNDLE_MAX_COMPRESSED);
        return;
    }
    upload *u = calloc(1, sizeof(*u));
    if (!u || !(u->body = malloc(req->body_len))) {
        free(u);
        funcd_cp_status(resp, 503, "ServiceUnavailable", NULL, "out of memory for the bundle");
        return;
    }
    u->cp = cp;
    snprintf(u->ns, sizeof(u->ns), "%s", r->ns);
    memcpy(u->body, req->body, req->body_len);
    u->len = req->body_len;
    resp->defer = (funcd_cp_deferred){upload_run, upload_free, u};
}

/* ---- logs ------------------------------------------------------------- */

static int append_log_record(const char *rec, size_t len, void *payload)
{
    funcd_buf *body = payload;
    if (funcd_buf_append(body, rec, len) < 0 || funcd_buf_append(body, "\n", 1) < 0)
        return 1;
    return 0;
}

/* Without follow the answer comes from the logstore (lines from before a
 * restart included); with follow, server.c replays it and goes on live. */
/* GET .../functions/{name}/s3-credentials (admins): the access key the
 * Function's workers get, for clients on the host (docs/s3.md). */
static void function_s3_credentials(funcd_cp *cp, const route *r, funcd_cp_response *resp)
{
    if (!cp->s3) {
        funcd_cp_status(resp, 404, "NotFound", NULL,
                        "the S3 gateway is off: start funcd with --s3-listen (funcd_with_s3)");
        return;
    }
    cJSON *obj = NULL;
    int rc = funcd_objects_get(cp->store, r->kind, r->ns, r->name, &obj, NULL);
    if (rc < 0) {
        status_from_error(resp, rc);
        return;
    }
    char akid[160], secret[48];
    rc = funcd_s3_credentials(cp->s3, obj, akid, secret);
    cJSON_Delete(obj);
    if (rc < 0) {
        status_from_error(resp, FUNCD_EINVAL);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    char endpoint[160] = "";
    if (*funcd_s3_addr(cp->s3))
        snprintf(endpoint, sizeof(endpoint), "http://%s", funcd_s3_addr(cp->s3));
    if (!o || !cJSON_AddStringToObject(o, "kind", "S3Credentials") ||
        !cJSON_AddStringToObject(o, "namespace", r->ns) ||
        !cJSON_AddStringToObject(o, "function", r->name) ||
        !cJSON_AddStringToObject(o, "accessKeyId", akid) ||
        !cJSON_AddStringToObject(o, "secretAccessKey", secret) ||
        !cJSON_AddStringToObject(o, "region", FUNCD_S3_REGION) ||
        !cJSON_AddStringToObject(o, "endpoint", endpoint)) {
        cJSON_Delete(o);
        funcd_cp_status(resp, 503, "ServiceUnavailable", NULL, "out of memory");
        return;
    }
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    memset(secret, 0, sizeof(secret));
    if (!text) {
        funcd_cp_status(resp, 503, "ServiceUnavailable", NULL, "out of memory");
        return;
    }
    resp->status = 200;
    funcd_buf_puts(&resp->body, text);
    free(text);
}

static void function_logs(funcd_cp *cp, const funcd_cp_request *req, const route *r,
                          funcd_cp_response *resp)
{
    cJSON *obj = NULL;
    int rc = funcd_objects_get(cp->store, r->kind, r->ns, r->name, &obj, NULL);
    cJSON_Delete(obj);
    if (rc < 0) {
        status_from_error(resp, rc);
        return;
    }
    funcd_log_query q;
    const char *field = NULL;
    if (funcd_log_query_parse(&q, req->query, req->query ? req->query_len : 0, 0,
                              &field) < 0) {
        funcd_cp_status(resp, 400, "BadRequest", field, "%s", funcd_error_last()->message);
        return;
    }
    if (q.follow) {
        resp->status = 200;
        resp->watch = 1;
        resp->w.kind = r->kind;
        resp->w.logs = 1;
        resp->w.tail = q.tail; /* server.c parses the query again for the rest */
        snprintf(resp->w.ns, sizeof(resp->w.ns), "%s", r->ns);
        snprintf(resp->w.name, sizeof(resp->w.name), "%s", r->name);
        return;
    }
    funcd_log_ring *ring = cp->serving ? funcd_serving_logs(cp->serving, r->ns, r->name) : NULL;
    rc = ring ? funcd_log_ring_query(ring, &q, append_log_record, &resp->body) : 0;
    funcd_log_ring_unref(ring);
    if (rc < 0) {
        funcd_cp_status(resp, 500, "InternalError", NULL, "reading the logs of %s/%s: %s", r->ns,
                        r->name, funcd_error_last()->message);
        return;
    }
    resp->status = 200;
    resp->content_type = "application/x-ndjson";
    if (!resp->body.data)
        funcd_buf_puts(&resp->body, "");
}
