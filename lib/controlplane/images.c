/*
 * The images API: the image metadata cache and pulls asked for by clients.
 *
 *   GET  /apis/funcd.dev/v1/images                              the cache (what
 *        the caller's namespaces pulled or run; an admin sees everything)
 *   POST /apis/funcd.dev/v1/namespaces/{ns}/imagepulls          start a pull
 *        {"image": REF, "imagePullSecrets": [NAME...]} -> 202 {"id": ...}
 *   GET  /apis/funcd.dev/v1/namespaces/{ns}/imagepulls          the namespace's pulls
 *   GET  /apis/funcd.dev/v1/namespaces/{ns}/imagepulls/{id}     its progress
 *
 * A pull belongs to the namespace it was started in: another namespace's
 * token neither reads nor lists it.
 *
 * A pull runs on the platform loop; clients poll its progress (funcdctl
 * draws a bar from it).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "controlplane/api.h"
#include "controlplane/auth.h"
#include "funcd/sys/error.h"
#include "source/resolver.h"

#define PREFIX "/apis/funcd.dev/v1/"
#define MAX_SECRETS 16

static int path_is(const funcd_cp_request *req, const char *path)
{
    return req->path_len == strlen(path) && memcmp(req->path, path, req->path_len) == 0;
}

/* Splits ".../namespaces/{ns}/imagepulls[/{id}]"; 0 if the path is another. */
static int pulls_path(const funcd_cp_request *req, char *ns, size_t ns_len, char *id,
                      size_t id_len)
{
    static const char head[] = PREFIX "namespaces/";
    const size_t hl = sizeof(head) - 1;
    if (req->path_len <= hl || memcmp(req->path, head, hl) != 0)
        return 0;
    const char *p = req->path + hl, *end = req->path + req->path_len;
    const char *slash = memchr(p, '/', (size_t)(end - p));
    static const char kind[] = "imagepulls";
    const size_t kl = sizeof(kind) - 1;
    if (!slash || slash == p || (size_t)(slash - p) >= ns_len || (size_t)(end - slash - 1) < kl ||
        memcmp(slash + 1, kind, kl) != 0)
        return 0;
    const char *rest = slash + 1 + kl;
    if (rest != end && *rest != '/')
        return 0;
    snprintf(ns, ns_len, "%.*s", (int)(slash - p), p);
    id[0] = 0;
    if (rest != end && (size_t)(end - rest - 1) < id_len)
        snprintf(id, id_len, "%.*s", (int)(end - rest - 1), rest + 1);
    else if (rest != end)
        return -1;
    return 1;
}

static int token_sees(const char *ns, void *payload)
{
    return funcd_token_allows(payload, ns, 0);
}

static void list_images(funcd_cp *cp, const funcd_token *t, funcd_cp_response *resp)
{
    int all = t->role == FUNCD_ROLE_ADMIN;
    if (funcd_sources_list_images(cp->sources, all ? NULL : token_sees, (void *)t,
                                  &resp->body) < 0) {
        funcd_buf_reset(&resp->body);
        funcd_cp_status(resp, 500, "InternalError", NULL, "listing images: %s",
                        funcd_error_last()->message);
        return;
    }
    resp->status = 200;
}

/* `s` with anything outside printable ASCII shown as '?', cut to fit. */
static const char *printable(const char *s, char *out, size_t n)
{
    size_t i = 0;
    for (; s[i] && i + 1 < n; i++)
        out[i] = s[i] >= 0x20 && s[i] < 0x7f && s[i] != '"' && s[i] != '\\' ? s[i] : '?';
    out[i] = 0;
    return out;
}

static void start_pull(funcd_cp *cp, const funcd_cp_request *req, const char *ns,
                       funcd_cp_response *resp)
{
    cJSON *body = cJSON_ParseWithLength(req->body ? req->body : "", req->body_len);
    const char *image = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(body, "image"));
    const cJSON *secrets = cJSON_GetObjectItemCaseSensitive(body, "imagePullSecrets");
    const char *names[MAX_SECRETS + 1] = {0};
    size_t n = 0;
    const cJSON *s;
    int bad_secrets = secrets && !cJSON_IsArray(secrets);
    const char *bad_name = NULL;
    cJSON_ArrayForEach(s, secrets)
    {
        if (!cJSON_IsString(s) || n == MAX_SECRETS)
            bad_secrets = 1;
        else if (!funcd__api_is_dns_label(s->valuestring))
            bad_name = bad_name ? bad_name : s->valuestring;
        else
            names[n++] = s->valuestring;
    }
    char id[40], why[400];
    if (!body || !cJSON_IsObject(body)) {
        funcd_cp_status(resp, 400, "BadRequest", NULL, "the body must be a JSON object "
                        "{\"image\": REF, \"imagePullSecrets\": [NAME...]}");
    } else if (!image || !*image) {
        funcd_cp_status(resp, 400, "BadRequest", "image", "image must name an OCI image "
                        "reference, e.g. registry.example.com/team/fn:v1");
    } else if (bad_secrets) {
        funcd_cp_status(resp, 400, "BadRequest", "imagePullSecrets", "imagePullSecrets must "
                        "be a list of at most %d Secret names", MAX_SECRETS);
    } else if (bad_name) {
        char shown[80];
        funcd_cp_status(resp, 400, "BadRequest", "imagePullSecrets", "imagePullSecrets: \"%s\" "
                        "is not a Secret name (a DNS label: at most 63 lowercase letters, digits "
                        "and '-', starting and ending with a letter or digit)",
                        printable(bad_name, shown, sizeof(shown)));
    } else if (!funcd_sources_registry_allowed(cp->sources, image, why, sizeof(why))) {
        funcd_cp_status(resp, 403, "Forbidden", "image", "%s", why);
    } else if (funcd_sources_pull_start(cp->sources, ns, image, names, id) < 0) {
        funcd_cp_status(resp, 400, "BadRequest", "image", "%s", funcd_error_last()->message);
    } else {
        cJSON *out = cJSON_CreateObject();
        cJSON_AddStringToObject(out, "id", id);
        cJSON_AddStringToObject(out, "image", image);
        char *text = cJSON_PrintUnformatted(out);
        funcd_buf_puts(&resp->body, text ? text : "{}");
        free(text);
        cJSON_Delete(out);
        resp->status = 202;
    }
    cJSON_Delete(body);
}

static cJSON *pull_json(const char *id, const char *ref, const funcd_pull_state *st)
{
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "id", id);
    if (ref)
        cJSON_AddStringToObject(out, "image", ref);
    cJSON_AddStringToObject(out, "phase", !st->done ? "Pulling" : st->failed ? "Failed" : "Done");
    cJSON_AddNumberToObject(out, "bytesDone", (double)st->bytes_done);
    cJSON_AddNumberToObject(out, "bytesTotal", (double)st->bytes_total);
    cJSON_AddNumberToObject(out, "layersDone", st->layers_done);
    cJSON_AddNumberToObject(out, "layersTotal", st->layers_total);
    if (st->digest[0])
        cJSON_AddStringToObject(out, "digest", st->digest);
    if (st->message[0])
        cJSON_AddStringToObject(out, "message", st->message);
    return out;
}

static void add_pull(const char *id, const char *ref, const funcd_pull_state *st, void *payload)
{
    cJSON_AddItemToArray(payload, pull_json(id, ref, st));
}

static void list_pulls(funcd_cp *cp, const char *ns, funcd_cp_response *resp)
{
    cJSON *out = cJSON_CreateObject();
    cJSON *items = cJSON_AddArrayToObject(out, "items");
    if (items)
        funcd_sources_pull_list(cp->sources, ns, add_pull, items);
    char *text = cJSON_PrintUnformatted(out);
    funcd_buf_puts(&resp->body, text ? text : "{\"items\":[]}");
    free(text);
    cJSON_Delete(out);
    resp->status = 200;
}

static void get_pull(funcd_cp *cp, const char *ns, const char *id, funcd_cp_response *resp)
{
    funcd_pull_state st;
    if (funcd_sources_pull_get(cp->sources, ns, id, &st) < 0) {
        funcd_cp_status(resp, 404, "NotFound", NULL, "%s", funcd_error_last()->message);
        return;
    }
    cJSON *out = pull_json(id, NULL, &st);
    char *text = cJSON_PrintUnformatted(out);
    funcd_buf_puts(&resp->body, text ? text : "{}");
    free(text);
    cJSON_Delete(out);
    resp->status = 200;
}

static int method_is(const funcd_cp_request *req, const char *m)
{
    return req->method_len == strlen(m) && memcmp(req->method, m, req->method_len) == 0;
}

int funcd_cp_images(funcd_cp *cp, const funcd_cp_request *req, const funcd_token *t,
                    funcd_cp_response *resp)
{
    char ns[72], id[48];
    int pulls = 0;
    if (!path_is(req, PREFIX "images") &&
        (pulls = pulls_path(req, ns, sizeof(ns), id, sizeof(id))) == 0)
        return 0;
    if (!cp->sources) {
        funcd_cp_status(resp, 404, "NotFound", NULL, "this platform pulls no images");
        return 1;
    }
    if (pulls < 0) {
        funcd_cp_status(resp, 404, "NotFound", NULL, "no such path: %.*s",
                        (int)(req->path_len > 200 ? 200 : req->path_len), req->path);
        return 1;
    }
    if (!pulls) { /* the cache: any authenticated caller may read it */
        if (!method_is(req, "GET"))
            funcd_cp_status(resp, 405, "MethodNotAllowed", NULL, "images are read with GET; "
                            "pull one with POST .../namespaces/{ns}/imagepulls");
        else
            list_images(cp, t, resp);
        return 1;
    }
    if (!funcd__api_is_dns_label(ns)) {
        funcd_cp_status(resp, 404, "NotFound", NULL, "no such namespace (a namespace is a DNS "
                        "label)");
        return 1;
    }
    int write = !id[0] && method_is(req, "POST");
    if (!funcd_token_allows(t, ns, write)) {
        funcd_cp_status(resp, 403, "Forbidden", NULL, "role %s may not %s image pulls in "
                        "namespace \"%s\"", funcd_role_name(t->role), write ? "start" : "read",
                        ns);
        return 1;
    }
    if (!id[0] && method_is(req, "POST"))
        start_pull(cp, req, ns, resp);
    else if (id[0] && method_is(req, "GET"))
        get_pull(cp, ns, id, resp);
    else if (!id[0] && method_is(req, "GET"))
        list_pulls(cp, ns, resp);
    else
        funcd_cp_status(resp, 405, "MethodNotAllowed", NULL, "start a pull with POST "
                        ".../imagepulls, list them with GET .../imagepulls and read one with "
                        "GET .../imagepulls/{id}");
    return 1;
}
