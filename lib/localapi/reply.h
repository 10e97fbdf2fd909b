/* Answers on the local API (lib/localapi): bodies and JSON Status errors. */
#ifndef FUNCD_LOCALAPI_REPLY_H
#define FUNCD_LOCALAPI_REPLY_H

#include <event2/http.h>
#include <stddef.h>

/* A JSON Status, as every funcd API answers an error. */
void funcd_localapi_status(struct evhttp_request *req, int code, const char *reason,
                           const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* `len` bytes of `type` (NULL: no Content-Type). */
void funcd_localapi_send(struct evhttp_request *req, int code, const char *type,
                         const void *body, size_t len);

#endif
