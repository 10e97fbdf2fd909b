#include "util/status.h"

#include <cjson/cJSON.h>
#include <stdio.h>

char *funcd_status_json_v(int code, const char *reason, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    cJSON *st = cJSON_CreateObject();
    cJSON_AddStringToObject(st, "kind", "Status");
    cJSON_AddStringToObject(st, "apiVersion", "v1");
    cJSON_AddStringToObject(st, "status", "Failure");
    cJSON_AddNumberToObject(st, "code", code);
    cJSON_AddStringToObject(st, "reason", reason);
    cJSON_AddStringToObject(st, "message", msg);
    char *body = cJSON_PrintUnformatted(st);
    cJSON_Delete(st);
    return body;
}
