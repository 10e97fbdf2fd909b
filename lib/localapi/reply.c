#include "localapi/reply.h"

#include <cjson/cJSON.h>
#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void funcd_localapi_send(struct evhttp_request *req, int code, const char *type,
                         const void *body, size_t len)
{
    struct evbuffer *buf = evbuffer_new();
    if (buf && len)
        evbuffer_add(buf, body, len);
    if (type)
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", type);
    evhttp_send_reply(req, code, NULL, buf);
    if (buf)
        evbuffer_free(buf);
}

void funcd_localapi_status(struct evhttp_request *req, int code, const char *reason,
                           const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    cJSON *st = cJSON_CreateObject();
    cJSON_AddStringToObject(st, "kind", "Status");
    cJSON_AddStringToObject(st, "apiVersion", "v1");
    cJSON_AddStringToObject(st, "status", "Failure");
    cJSON_AddNumberToObject(st, "code", code);
    cJSON_AddStringToObject(st, "reason", reason);
    cJSON_AddStringToObject(st, "message", msg);
    char *text = cJSON_PrintUnformatted(st);
    cJSON_Delete(st);
    funcd_localapi_send(req, code, "application/json", text, text ? strlen(text) : 0);
    free(text);
}
