#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>

void funcd_log(const funcd_logger *lg, funcd_log_level level, const char *fmt, ...)
{
    if (lg && level < lg->min)
        return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (lg && lg->fn) {
        lg->fn(level, line, lg->payload);
        return;
    }
    static const char *const names[] = {"debug", "info", "warn", "error"};
    fprintf(stderr, "funcd: %s%s%s\n", level >= FUNCD_LOG_WARN ? names[level] : "",
            level >= FUNCD_LOG_WARN ? ": " : "", line);
}
