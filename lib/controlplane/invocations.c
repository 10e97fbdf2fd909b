/*
 * Invocations and dead letters (docs/eventing.md, docs/api.md):
 *
 *   GET    /apis/funcd.dev/v1/namespaces/{ns}/invocations              the records kept
 *   GET    /apis/funcd.dev/v1/namespaces/{ns}/invocations/{id}         one, with its answer
 *   GET    /apis/funcd.dev/v1/namespaces/{ns}/deadletters              the namespace's DLQ
 *   GET    /apis/funcd.dev/v1/namespaces/{ns}/deadletters/{id}         one dead letter
 *   POST   /apis/funcd.dev/v1/namespaces/{ns}/deadletters/{id}/replay  -> 202, Pending again
 *   DELETE /apis/funcd.dev/v1/namespaces/{ns}/deadletters/{id}         purge one
 *   DELETE /apis/funcd.dev/v1/namespaces/{ns}/deadletters              purge all
 *
 * Reading needs read access to the namespace, replay and purge write
 * access, as for the namespace's objects. Records are read from the store
 * (the queue's, lib/eventing/queue.h) and shown as API objects: metadata,
 * spec (what was asked), status (what happened).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "controlplane/api.h"
#include "controlplane/auth.h"
#include "eventing/queue_internal.h"
#include "funcd/sys/error.h"
#include "port/blob.h"
#include "port/store.h"
#include "util/misc.h"

#define NS_PATH "/apis/funcd.dev/v1/namespaces/"
#define MAX_LIST 1000 /* items a list shows (the newest) */

typedef struct inv_path {
    char ns[72];
    int deadletters; /* else invocations */
    char id[FUNCD_QUEUE_ID_MAX];
    int replay; /* .../{id}/replay */
} inv_path;

/* 1 when the path is one of ours (filled in), 0 when not, -1 when it is but
 * malformed (a 404 is set). */
static int parse(const funcd_cp_request *req, inv_path *p, funcd_cp_response *resp)
{
    const size_t hl = strlen(NS_PATH);
    if (req->path_len <= hl || memcmp(req->path, NS_PATH, hl) != 0)
        return 0;
    char path[512];
    if (req->path_len - hl >= sizeof(path))
        return 0;
    memcpy(path, req->path + hl, req->path_len - hl);
    path[req->path_len - hl] = '\0';
    char *seg[5] = {0};
    int n = 0;
    for (char *s = path, *save = NULL; n < 5 && (s = strtok_r(s, "/", &save)); s = NULL)
        seg[n++] = s;
    if (n < 2 || (strcmp(seg[1], "invocations") != 0 && strcmp(seg[1], "deadletters") != 0))
        return 0;
    memset(p, 0, sizeof(*p));
    p->deadletters = seg[1][0] == 'd';
    int bad = strlen(seg[0]) >= sizeof(p->ns) || !funcd__api_is_dns_label(seg[0]) || n > 4 ||
              (n >= 3 && !funcd_queue_id_ok(seg[2])) ||
              (n == 4 && (!p->deadletters || strcmp(seg[3], "replay") != 0));
    if (bad) {
        funcd_cp_status(resp, 404, "NotFound", NULL, "no such path: %.*s",
                        (int)(req->path_len > 200 ? 200 : req->path_len), req->path);
        return -1;
    }
    snprintf(p->ns, sizeof(p->ns), "%s", seg[0]);
    if (n >= 3)
        snprintf(p->id, sizeof(p->id), "%s", seg[2]);
    p->replay = n == 4;
    return 1;
}

static int64_t num_at(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : 0;
}

static void add_time(cJSON *o, const char *name, int64_t ms)
{
    if (ms <= 0)
        return;
    char t[40];
    funcd_rfc3339(ms, t, sizeof(t));
    cJSON_AddStringToObject(o, name, t);
}

static void copy_item(cJSON *to, const cJSON *from, const char *name, const char *as)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(from, name);
    if (v)
        cJSON_AddItemToObject(to, as ? as : name, cJSON_Duplicate(v, 1));
}

/* A UTF-8 check good enough to decide between "body" and "bodyBase64". */
static int is_text(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || c == 0 || i + len > n)
            return 0;
        for (size_t k = 1; k < len; k++)
            if ((s[i + k] & 0xc0) != 0x80)
                return 0;
        i += len;
    }
    return 1;
}

/* The record as an API object; `response`: with the stored answer. */
static cJSON *to_object(funcd_cp *cp, const cJSON *rec, int deadletter, int response)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kind", deadletter ? "DeadLetter" : "Invocation");
    cJSON_AddStringToObject(o, "apiVersion", "funcd.dev/v1");
    cJSON *md = cJSON_AddObjectToObject(o, "metadata");
    copy_item(md, rec, "id", "name");
    copy_item(md, rec, "namespace", NULL);
    add_time(md, "creationTimestamp", num_at(rec, "createdMs"));
    cJSON *spec = cJSON_AddObjectToObject(o, "spec");
    copy_item(spec, rec, "function", NULL);
    copy_item(spec, rec, "method", NULL);
    copy_item(spec, rec, "path", NULL);
    copy_item(spec, rec, "origin", NULL);
    copy_item(spec, rec, "callbackUrl", NULL);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(rec, "delivery");
    cJSON *delivery = cJSON_AddObjectToObject(spec, "delivery");
    cJSON_AddNumberToObject(delivery, "attempts", (double)num_at(d, "attempts"));
    cJSON_AddNumberToObject(delivery, "backoffInitialMs", (double)num_at(d, "backoffInitialMs"));
    cJSON_AddNumberToObject(delivery, "backoffMaxMs", (double)num_at(d, "backoffMaxMs"));
    cJSON_AddNumberToObject(delivery, "timeoutMs", (double)num_at(d, "timeoutMs"));
    cJSON_AddNumberToObject(spec, "bodyBytes", (double)num_at(rec, "bodyLen"));
    cJSON *st = cJSON_AddObjectToObject(o, "status");
    copy_item(st, rec, "state", NULL);
    cJSON_AddNumberToObject(st, "attempts", (double)num_at(rec, "attempts"));
    if (num_at(rec, "status"))
        cJSON_AddNumberToObject(st, "statusCode", (double)num_at(rec, "status"));
    copy_item(st, rec, "error", NULL);
    copy_item(st, rec, "callback", NULL); /* how X-Callback-Url went: state, statusCode, error */
    add_time(st, "updateTime", num_at(rec, "updatedMs"));
    const char *state = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rec, "state"));
    if (state && strcmp(state, "Pending") == 0 && num_at(rec, "attempts"))
        add_time(st, "nextAttemptTime", num_at(rec, "nextAttemptMs"));
    add_time(st, "completionTime", num_at(rec, "finishedMs"));
    if (num_at(rec, "finishedMs") && num_at(rec, "createdMs")) /* times are whole seconds */
        cJSON_AddNumberToObject(st, "latencyMs",
                                (double)(num_at(rec, "finishedMs") - num_at(rec, "createdMs")));
    add_time(st, "deadLetterTime", num_at(rec, "deadLetteredMs"));
    add_time(st, "replayTime", num_at(rec, "replayedMs"));
    if (!response || deadletter || !funcd_queue_state_final(state))
        return o;
    cJSON *r = cJSON_AddObjectToObject(st, "response");
    cJSON_AddNumberToObject(r, "statusCode", (double)num_at(rec, "status"));
    copy_item(r, rec, "contentType", NULL);
    copy_item(r, rec, "truncated", NULL);
    int64_t len = num_at(rec, "responseLen");
    if (len <= 0 || !cp->blob) {
        cJSON_AddStringToObject(r, "body", "");
        return o;
    }
    char key[600];
    const char *ns = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rec, "namespace"));
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rec, "id"));
    snprintf(key, sizeof(key), "invocations/%s/%s/response", ns ? ns : "", id ? id : "");
    void *data = NULL;
    size_t n = 0;
    if (funcd_port_blob_get(cp->blob, key, 0, FUNCD_BLOB_TO_END, &data, &n) < 0) {
        cJSON_AddStringToObject(r, "body", "");
        return o;
    }
    if (is_text(data, n)) {
        char *text = funcd_strndup(data, n);
        cJSON_AddStringToObject(r, "body", text ? text : "");
        free(text);
    } else {
        funcd_buf b = FUNCD_BUF_INIT;
        funcd__api_base64_encode(data, n, &b);
        cJSON_AddStringToObject(r, "bodyBase64", b.data ? b.data : "");
        funcd_buf_free(&b);
    }
    free(data);
    return o;
}

typedef struct lister {
    funcd_cp *cp;
    cJSON *items;
    int deadletters;
    size_t n;
} lister;

static int on_record(const funcd_store_kv *kv, void *arg)
{
    lister *l = arg;
    cJSON *rec = cJSON_ParseWithLength(kv->value, kv->len);
    if (!rec)
        return 0;
    cJSON *o = to_object(l->cp, rec, l->deadletters, 0);
    cJSON_Delete(rec);
    if (o) {
        cJSON_AddItemToArray(l->items, o);
        l->n++;
    }
    return 0;
}

/* creationTimestamp is RFC 3339 UTC: ordered as text. */
static int by_creation(const void *a, const void *b)
{
    const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
    const char *tx = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(x, "metadata"), "creationTimestamp"));
    const char *ty = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(y, "metadata"), "creationTimestamp"));
    return strcmp(tx ? tx : "", ty ? ty : "");
}

static void list(funcd_cp *cp, const inv_path *p, funcd_cp_response *resp)
{
    char prefix[300];
    snprintf(prefix, sizeof(prefix), "%s%s/",
             p->deadletters ? FUNCD_QUEUE_DEADLETTERS : FUNCD_QUEUE_RECORDS, p->ns);
    cJSON *all = cJSON_CreateArray();
    lister l = {cp, all, p->deadletters, 0};
    uint64_t rev = 0;
    int rc = funcd_port_store_list(cp->store, prefix, on_record, &l, &rev);
    if (rc < 0) {
        cJSON_Delete(all);
        funcd_cp_status(resp, 503, "ServiceUnavailable", NULL, "cannot list: %s",
                        funcd_error_last()->message);
        return;
    }
    /* Oldest first; at most MAX_LIST, the newest. */
    size_t n = l.n;
    cJSON **v = calloc(n ? n : 1, sizeof(*v));
    size_t k = 0;
    while (v && cJSON_GetArraySize(all) > 0)
        v[k++] = cJSON_DetachItemFromArray(all, 0);
    if (v)
        qsort(v, k, sizeof(*v), by_creation);
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "kind", p->deadletters ? "DeadLetterList" : "InvocationList");
    cJSON_AddStringToObject(out, "apiVersion", "funcd.dev/v1");
    cJSON *md = cJSON_AddObjectToObject(out, "metadata");
    char rv[24];
    snprintf(rv, sizeof(rv), "%llu", (unsigned long long)rev);
    cJSON_AddStringToObject(md, "resourceVersion", rv);
    if (p->deadletters) { /* how many the caps dropped */
        char key[300];
        funcd_store_value sv = {0};
        snprintf(key, sizeof(key), "%s%s", FUNCD_QUEUE_DLQ_DROPS, p->ns);
        int64_t dropped = 0;
        if (funcd_port_store_get(cp->store, key, &sv) == 0) {
            cJSON *d = cJSON_ParseWithLength(sv.value, sv.len);
            dropped = num_at(d, "dropped");
            cJSON_Delete(d);
            free(sv.value);
        }
        cJSON_AddNumberToObject(md, "dropped", (double)dropped);
    }
    cJSON *items = cJSON_AddArrayToObject(out, "items");
    for (size_t i = 0; i < k; i++) {
        if (k - i <= MAX_LIST)
            cJSON_AddItemToArray(items, v[i]);
        else
            cJSON_Delete(v[i]);
    }
    free(v);
    cJSON_Delete(all);
    char *text = cJSON_PrintUnformatted(out);
    cJSON_Delete(out);
    resp->status = 200;
    funcd_buf_puts(&resp->body, text ? text : "{}");
    free(text);
}

static void get_one(funcd_cp *cp, const inv_path *p, funcd_cp_response *resp)
{
    char key[600];
    funcd_queue_key(key, sizeof(key),
                    p->deadletters ? FUNCD_QUEUE_DEADLETTERS : FUNCD_QUEUE_RECORDS, p->ns, p->id);
    funcd_store_value v = {0};
    int rc = funcd_port_store_get(cp->store, key, &v);
    if (rc == FUNCD_ENOTFOUND) {
        funcd_cp_status(resp, 404, "NotFound", NULL, "%s \"%s\" not found in namespace \"%s\"%s",
                        p->deadletters ? "dead letter" : "invocation", p->id, p->ns,
                        p->deadletters ? "" : " (final ones are kept for the invocation "
                                              "retention)");
        return;
    }
    if (rc < 0) {
        funcd_cp_status(resp, 503, "ServiceUnavailable", NULL, "cannot read it: %s",
                        funcd_error_last()->message);
        return;
    }
    cJSON *rec = cJSON_ParseWithLength(v.value, v.len);
    free(v.value);
    cJSON *o = rec ? to_object(cp, rec, p->deadletters, 1) : NULL;
    cJSON_Delete(rec);
    char *text = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!text) {
        funcd_cp_status(resp, 500, "InternalError", NULL, "the record of %s is damaged", p->id);
        return;
    }
    resp->status = 200;
    funcd_buf_puts(&resp->body, text);
    free(text);
}

static void success(funcd_cp_response *resp, int code, const char *fmt, const char *a,
                    const char *b)
{
    char msg[400];
    snprintf(msg, sizeof(msg), fmt, a, b);
    cJSON *st = cJSON_CreateObject();
    cJSON_AddStringToObject(st, "kind", "Status");
    cJSON_AddStringToObject(st, "apiVersion", "v1");
    cJSON_AddStringToObject(st, "status", "Success");
    cJSON_AddNumberToObject(st, "code", code);
    cJSON_AddStringToObject(st, "message", msg);
    char *text = cJSON_PrintUnformatted(st);
    cJSON_Delete(st);
    resp->status = code;
    funcd_buf_puts(&resp->body, text ? text : "{}");
    free(text);
}

typedef struct keys {
    char **v;
    size_t n, cap;
} keys;

static int on_key(const funcd_store_kv *kv, void *arg)
{
    keys *k = arg;
    if (k->n == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 64;
        char **v = realloc(k->v, cap * sizeof(*v));
        if (!v)
            return 1;
        k->v = v;
        k->cap = cap;
    }
    const char *slash = strrchr(kv->key, '/');
    if (slash && (k->v[k->n] = strdup(slash + 1)))
        k->n++;
    return 0;
}

static void purge_all(funcd_cp *cp, const inv_path *p, funcd_cp_response *resp)
{
    char prefix[300];
    snprintf(prefix, sizeof(prefix), "%s%s/", FUNCD_QUEUE_DEADLETTERS, p->ns);
    keys k = {0};
    funcd_port_store_list(cp->store, prefix, on_key, &k, NULL);
    size_t purged = 0;
    for (size_t i = 0; i < k.n; i++) {
        purged += funcd_queue_purge(cp->queue, p->ns, k.v[i]) == 0;
        free(k.v[i]);
    }
    free(k.v);
    char n[24];
    snprintf(n, sizeof(n), "%zu", purged);
    success(resp, 200, "purged %s dead letters of namespace %s", n, p->ns);
}

int funcd_cp_invocations(funcd_cp *cp, const funcd_cp_request *req, const funcd_token *t,
                         funcd_cp_response *resp)
{
    inv_path p;
    int rc = parse(req, &p, resp);
    if (rc <= 0)
        return rc < 0;
    int get = req->method_len == 3 && memcmp(req->method, "GET", 3) == 0;
    int post = req->method_len == 4 && memcmp(req->method, "POST", 4) == 0;
    int del = req->method_len == 6 && memcmp(req->method, "DELETE", 6) == 0;
    int ok = (get && !p.replay) || (post && p.replay) ||
             (del && p.deadletters && !p.replay);
    if (!ok) {
        funcd_cp_status(resp, 405, "MethodNotAllowed", NULL, "%.*s is not allowed here",
                        (int)(req->method_len > 16 ? 16 : req->method_len), req->method);
        return 1;
    }
    if (!funcd_token_allows(t, p.ns, !get)) {
        funcd_cp_status(resp, 403, "Forbidden", NULL,
                        "role %s may not %s %s in namespace \"%s\"; ask an admin for a token "
                        "that covers it",
                        funcd_role_name(t->role), get ? "read" : "write",
                        p.deadletters ? "deadletters" : "invocations", p.ns);
        return 1;
    }
    if ((post || del) && !cp->queue) {
        funcd_cp_status(resp, 503, "ServiceUnavailable", NULL, "this platform has no delivery "
                        "queue");
        return 1;
    }
    if (get && !p.id[0]) {
        list(cp, &p, resp);
    } else if (get) {
        get_one(cp, &p, resp);
    } else if (del && !p.id[0]) {
        purge_all(cp, &p, resp);
    } else {
        rc = post ? funcd_queue_replay(cp->queue, p.ns, p.id)
                  : funcd_queue_purge(cp->queue, p.ns, p.id);
        if (rc == FUNCD_ENOTFOUND)
            funcd_cp_status(resp, 404, "NotFound", NULL, "dead letter \"%s\" not found in "
                            "namespace \"%s\"", p.id, p.ns);
        else if (rc == FUNCD_ENOSPC) /* a replay takes a place in the queue: none is free */
            funcd_cp_status(resp, 429, "TooManyRequests", NULL, "%s; replay it once some "
                            "finish", funcd_error_last()->message);
        else if (rc < 0)
            funcd_cp_status(resp, 503, "ServiceUnavailable", NULL, "%s",
                            funcd_error_last()->message);
        else if (post)
            success(resp, 202, "dead letter %s of namespace %s is queued again as a Pending "
                    "invocation", p.id, p.ns);
        else
            success(resp, 200, "dead letter %s of namespace %s deleted", p.id, p.ns);
    }
    return 1;
}
