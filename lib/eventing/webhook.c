/*
 * Webhook EventSources: POST /events/{ns}/{name} on the data plane. With a
 * secret, the body must be signed: `X-Funcd-Signature: sha256=<hex>`, the
 * HMAC-SHA256 of the body under the Secret's key (what GitHub's
 * X-Hub-Signature-256 is). Wrong or missing: 401, and nothing is
 * delivered. Accepted: 202 once the event is queued (persisted).
 */
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/internal.h"
#include "eventing/sources_internal.h"
#include "funcd/sys/error.h"
#include "gateway/prefix.h"
#include "objects/objects.h"
#include "util/misc.h"

#define SIGNATURE_HEADER "x-funcd-signature"

/* Gateway thread: to the loop, where the source and its secret are. */
void funcd_evsources_webhook(struct funcd_gw_call *call, void *payload)
{
    funcd_evsources *s = payload;
    struct inbox_item *it = calloc(1, sizeof(*it));
    if (!it) {
        funcd_gw_call_answer_status(call, 503, "ServiceUnavailable", "out of memory");
        return;
    }
    it->kind = IN_WEBHOOK;
    it->call = call;
    funcd__evs_post(s, it);
}

/* The key of the source's Secret, decoded; 0, or an HTTP status to answer. */
static int secret_key(funcd_evsources *s, const src *x, unsigned char **key, size_t *len)
{
    cJSON *obj = NULL;
    uint64_t rev;
    int rc = funcd_objects_get(s->cfg.store, funcd_kind_by_kind("Secret"), x->ns, x->secret_name,
                               &obj, &rev);
    if (rc < 0)
        return 503;
    const char *b64 = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(obj, "data"), x->secret_key));
    size_t n = b64 ? strlen(b64) : 0, dlen = 0;
    if (!b64 || funcd__api_base64_decoded_len(b64, n, &dlen) < 0 || !(*key = malloc(dlen + 1))) {
        cJSON_Delete(obj);
        return 503;
    }
    funcd__api_base64_decode(b64, n, *key);
    *len = dlen;
    cJSON_Delete(obj);
    return 0;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Whether `header` is "sha256=" and the hex of the body's HMAC. */
static int signature_ok(const char *header, const unsigned char *key, size_t key_len,
                        const void *body, size_t len)
{
    unsigned char want[EVP_MAX_MD_SIZE], got[32];
    unsigned want_len = 0;
    if (!header || strncasecmp(header, "sha256=", 7) != 0 || strlen(header + 7) != 64)
        return 0;
    for (int i = 0; i < 32; i++) {
        int hi = hex_value(header[7 + 2 * i]), lo = hex_value(header[8 + 2 * i]);
        if (hi < 0 || lo < 0)
            return 0;
        got[i] = (unsigned char)(hi << 4 | lo);
    }
    if (!HMAC(EVP_sha256(), key, (int)key_len, body, len, want, &want_len) || want_len != 32)
        return 0;
    return CRYPTO_memcmp(want, got, 32) == 0;
}

/* "/events/{ns}/{name}" (a trailing '/' or a query allowed). */
static int parse_path(const char *path, char *ns, size_t nsl, char *name, size_t nl)
{
    const char *p = path + strlen("/events/");
    size_t a = strcspn(p, "/?");
    if (a == 0 || a >= nsl || p[a] != '/')
        return -1;
    const char *q = p + a + 1;
    size_t b = strcspn(q, "/?");
    if (b == 0 || b >= nl || (q[b] == '/' && q[b + 1] != '\0' && q[b + 1] != '?'))
        return -1;
    memcpy(ns, p, a);
    ns[a] = '\0';
    memcpy(name, q, b);
    name[b] = '\0';
    return 0;
}

void funcd__evs_webhook_run(funcd_evsources *s, struct funcd_gw_call *call)
{
    char ns[64], name[64];
    if (parse_path(funcd_gw_call_path(call), ns, sizeof(ns), name, sizeof(name)) < 0) {
        funcd_gw_call_answer_status(call, 404, "NotFound",
                                    "webhooks are served at /events/{namespace}/{name}");
        return;
    }
    src *x = funcd__evs_find(s, ns, name);
    if (!x || x->type != SRC_WEBHOOK) {
        funcd_gw_call_answer_status(call, 404, "NotFound",
                                    "no webhook EventSource \"%s\" in namespace \"%s\"", name, ns);
        return;
    }
    if (strcmp(funcd_gw_call_method(call), "POST") != 0) {
        static const char *const allow[] = {"allow", "POST", NULL};
        static const char body405[] =
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
            "\"code\":405,\"reason\":\"MethodNotAllowed\",\"message\":\"a webhook takes POST\"}";
        funcd_gw_call_answer(call, 405, "application/json", allow, body405, sizeof(body405) - 1);
        return;
    }
    size_t len;
    const void *body = funcd_gw_call_body(call, &len);
    if (len > FUNCD_EVSOURCES_MAX_WEBHOOK_BODY) {
        funcd_gw_call_answer_status(call, 413, "RequestEntityTooLarge",
                                    "a webhook event takes at most %d bytes",
                                    FUNCD_EVSOURCES_MAX_WEBHOOK_BODY);
        return;
    }
    if (x->secret_name[0]) {
        unsigned char *key = NULL;
        size_t key_len = 0;
        if (secret_key(s, x, &key, &key_len) != 0) {
            funcd__evs_error(x, "the webhook's Secret %s (key %s) cannot be read", x->secret_name,
                             x->secret_key);
            funcd_gw_call_answer_status(call, 503, "ServiceUnavailable",
                                        "the webhook's secret is not available; see the "
                                        "EventSource's status");
            return;
        }
        int ok = signature_ok(funcd_gw_call_header(call, SIGNATURE_HEADER), key, key_len, body,
                              len);
        OPENSSL_cleanse(key, key_len);
        free(key);
        if (!ok) {
            funcd_gw_call_answer_status(call, 401, "Unauthorized",
                                        "the body's signature is missing or wrong: send "
                                        "X-Funcd-Signature: sha256=<hex of HMAC-SHA256 of the "
                                        "body under the secret>");
            return;
        }
    }
    /* A sender's CloudEvent (binary mode) keeps its id (so its retries are
     * delivered once), type and subject. */
    const char *sender_id = funcd_gw_call_header(call, "ce-id");
    const char *type = funcd_gw_call_header(call, "ce-type");
    const char *subject = funcd_gw_call_header(call, "ce-subject");
    char id[64], out_id[64];
    if (sender_id)
        funcd__evs_id(x, "webhook", sender_id, id);
    int rc = funcd__evs_emit(x, sender_id ? id : NULL, type ? type : "dev.funcd.webhook",
                             subject, funcd_now_ms(), funcd_gw_call_header(call, "content-type"),
                             body, len, out_id);
    if (rc == FUNCD_EINVAL) { /* it does not fit the target workflow: sending it again won't */
        funcd_gw_call_answer_status(call, 400, "BadRequest", "%s", funcd_error_last()->message);
        return;
    }
    if (rc == FUNCD_ENOSPC) { /* a quota of the target's namespace */
        funcd_gw_call_answer_status(call, 429, "TooManyRequests",
                                    "the event could not be queued: %s; send it again later",
                                    funcd_error_last()->message);
        return;
    }
    if (rc < 0) {
        funcd_gw_call_answer_status(call, 503, "ServiceUnavailable",
                                    "the event could not be queued: %s; send it again later",
                                    funcd_error_last()->message);
        return;
    }
    char answer[200];
    int n = snprintf(answer, sizeof(answer), "{\"id\":\"%s\",\"eventSource\":\"%s/%s\"}", out_id,
                     ns, name);
    const char *const headers[] = {"x-funcd-event-id", out_id, NULL};
    funcd_gw_call_answer(call, 202, "application/json", headers, answer, (size_t)n);
}
