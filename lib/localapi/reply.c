#include "localapi/reply.h"

#include "util/status.h"

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
    va_list ap;
    va_start(ap, fmt);
    char *body = funcd_status_json_v(code, reason, fmt, ap);
    va_end(ap);
    funcd_localapi_send(req, code, "application/json", body, body ? strlen(body) : 0);
    free(body);
}
