/* The JSON Status every funcd HTTP surface answers an error with
 * ({"kind":"Status","apiVersion":"v1","status":"Failure","code":..,
 * "reason":..,"message":..}). */
#ifndef FUNCD_UTIL_STATUS_H
#define FUNCD_UTIL_STATUS_H

#include <stdarg.h>

/* The body for `code` and `reason` with the message `fmt` formats (at most
 * 1 KiB), malloc()ed; NULL when out of memory. */
char *funcd_status_json_v(int code, const char *reason, const char *fmt, va_list ap);

#endif
