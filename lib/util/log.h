/* The platform's own logging: one sink, shared by every component. */
#ifndef FUNCD_UTIL_LOG_H
#define FUNCD_UTIL_LOG_H

#include "funcd/funcd.h"

typedef struct funcd_logger {
    funcd_log_fn fn; /* NULL: stderr */
    funcd_log_level min;
    void *payload;
} funcd_logger;

void funcd_log(const funcd_logger *lg, funcd_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* `s` fit for one log line, in `out` (returned): a byte below 0x20, DEL and
 * '\' as \r \n \t \\ or \xNN, so bytes from a request or a spec can
 * neither start a forged line nor steer a terminal; cut with "..." to fit. */
const char *funcd_log_escape(char *out, size_t cap, const char *s);

#endif
