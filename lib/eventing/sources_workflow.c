/*
 * EventSources whose target is a Workflow (docs/eventing.md): each event
 * starts a run with the event as its input, in the CloudEvents JSON format
 * (structured mode):
 *
 *   {"specversion": "1.0", "id": ..., "source": ..., "type": ..., "time": ...,
 *    "subject": ...,                      (when the event has one)
 *    "datacontenttype": ...,              (when the event has one)
 *    "data": ...}                         (JSON content: the value; other UTF-8
 *                                          text: a string; anything else:
 *                                          "data_base64" instead)
 *
 * The run's id is made of the workflow's name and a hash of the event id,
 * and the run record is created only when absent: an event seen again (a
 * cron tick after a crash, a sender's retry with the same ce-id) starts no
 * second run. Nothing goes through the delivery queue: the run record is the
 * event's durable record, and the workflow engine retries its steps. The
 * runs of an unsigned webhook (anyone may send its events) are anonymous:
 * they hold at most the anonymous share of the namespace's run caps, as
 * its events do of the queue's (ADR 0066).
 */
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/api.h"
#include "api/jsonschema.h"
#include "eventing/sources_internal.h"
#include "funcd/sys/error.h"
#include "metrics/metrics.h"
#include "objects/objects.h"
#include "workflow/workflow.h"

static int utf8_ok(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        size_t k = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : 9;
        if (k == 9 || c == 0 || i + k >= n)
            return 0;
        for (size_t j = 1; j <= k; j++)
            if ((p[i + j] & 0xC0) != 0x80)
                return 0;
        i += k + 1;
    }
    return 1;
}

static int json_type(const char *ct)
{
    if (!ct)
        return 0;
    size_t n = strcspn(ct, ";");
    while (n && ct[n - 1] == ' ')
        n--;
    return (n == 16 && strncasecmp(ct, "application/json", 16) == 0) ||
           (n > 5 && strncasecmp(ct + n - 5, "+json", 5) == 0);
}

/* The event as a CloudEvents JSON document. NULL: out of memory. */
static cJSON *event_doc(const char *const *headers, const void *body, size_t len)
{
    cJSON *ev = cJSON_CreateObject();
    const char *ct = NULL;
    for (size_t i = 0; headers[i] && headers[i + 1]; i += 2) {
        const char *name = headers[i], *value = headers[i + 1];
        if (strncmp(name, "ce-", 3) == 0)
            cJSON_AddStringToObject(ev, name + 3, value);
        else if (strcasecmp(name, "content-type") == 0)
            ct = value;
    }
    if (ct)
        cJSON_AddStringToObject(ev, "datacontenttype", ct);
    cJSON *data = NULL;
    if (json_type(ct) && len)
        data = cJSON_ParseWithLength(body, len);
    if (!data && utf8_ok(body, len)) {
        char *text = malloc(len + 1);
        if (text) {
            memcpy(text, body, len);
            text[len] = '\0';
            data = cJSON_CreateString(text);
            free(text);
        }
    }
    if (data) {
        cJSON_AddItemToObject(ev, "data", data);
    } else {
        char *b64 = malloc(4 * ((len + 2) / 3) + 1);
        if (b64) {
            EVP_EncodeBlock((unsigned char *)b64, body, (int)len);
            cJSON_AddStringToObject(ev, "data_base64", b64);
            free(b64);
        }
    }
    return ev;
}

/* "{workflow}-ev" and 24 hex digits of SHA-256 over the event id. */
static void run_id(const char *workflow, const char *event_id, char out[FUNCD_WORKFLOW_MAX_RUN_ID])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    EVP_Digest(event_id, strlen(event_id), md, &n, EVP_sha256(), NULL);
    static const char hex[] = "0123456789abcdef";
    char h[25];
    for (int i = 0; i < 12; i++) {
        h[2 * i] = hex[md[i] >> 4];
        h[2 * i + 1] = hex[md[i] & 15];
    }
    h[24] = '\0';
    snprintf(out, FUNCD_WORKFLOW_MAX_RUN_ID, "%.60s-ev%s", workflow, h);
}

int funcd__evs_start_run(src *x, const char *id, const char *const *headers, const void *body,
                         size_t len, int anonymous)
{
    funcd_evsources *s = x->owner;
    cJSON *wf = NULL;
    int rc = funcd_objects_get(s->cfg.store, funcd_kind_by_kind("Workflow"), x->ns, x->workflow,
                               &wf, NULL);
    if (rc == FUNCD_ENOTFOUND)
        return funcd_error_set(FUNCD_ENOTFOUND, "workflow %s/%s not found", x->ns, x->workflow);
    if (rc < 0)
        return rc;
    const cJSON *cond = cJSON_GetArrayItem(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(wf, "status"),
                                         "conditions"),
        0);
    const char *ready = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cond, "status"));
    if (ready && strcmp(ready, "False") == 0) {
        rc = funcd_error_set(FUNCD_ECONFLICT, "workflow %s/%s is not ready: %s", x->ns,
                             x->workflow,
                             cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cond, "message"))
                                 ?: "");
        cJSON_Delete(wf);
        return rc;
    }
    cJSON *input = event_doc(headers, body, len);
    char *text = input ? cJSON_PrintUnformatted(input) : NULL;
    size_t limit = s->cfg.workflow_payload_limit ? s->cfg.workflow_payload_limit
                                                  : FUNCD_WORKFLOW_DEFAULT_PAYLOAD_LIMIT;
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(wf, "spec"), "input"),
        "schema");
    char where[128] = "", why[256] = "", rid[FUNCD_WORKFLOW_MAX_RUN_ID];
    cJSON *run = NULL;
    if (!text) {
        rc = funcd_error_set(FUNCD_ENOMEM, "out of memory");
    } else if (strlen(text) > limit) {
        rc = funcd_error_set(FUNCD_EINVAL, "the event as the run's input is %zu bytes, over the "
                             "workflow payload limit of %zu", strlen(text), limit);
    } else if (cJSON_IsObject(schema) &&
               funcd_schema_validate(schema, input, where, sizeof(where), why, sizeof(why)) < 0) {
        rc = funcd_error_set(FUNCD_EINVAL, "the event (input%s%s) %s (spec.input.schema of "
                             "workflow %s)", where[0] ? "." : "", where, why, x->workflow);
    } else {
        run_id(x->workflow, id, rid);
        run = funcd_workflow_run_new_id(x->ns, wf, input, rid);
        if (!run) {
            rc = funcd_error_set(FUNCD_ENOMEM, "out of memory");
        } else {
            cJSON *labels = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(run, "metadata"), "labels");
            cJSON_AddStringToObject(labels, "funcd.dev/eventsource", x->name);
            uint64_t rev = 0;
            rc = anonymous ? funcd_workflow_run_store_anonymous(s->cfg.store, x->ns, run, &rev,
                                                                s->cfg.anonymous_share)
                           : funcd_workflow_run_store(s->cfg.store, x->ns, run, &rev);
            if (rc == 0) { /* the event's delivery: the run exists now */
                x->delivered++;
                funcd_metrics_event(s->cfg.metrics, x->ns, x->name, FUNCD_METRICS_EVENT_DELIVERED);
            } else if (rc == FUNCD_EEXISTS) {
                rc = 0; /* this event started it before */
            }
        }
    }
    cJSON_Delete(run);
    free(text);
    cJSON_Delete(input);
    cJSON_Delete(wf);
    return rc;
}
