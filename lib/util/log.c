#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *funcd_log_escape(char *out, size_t cap, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
    if (!cap)
        return out;
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        char esc[5];
        size_t el = 0;
        if (*p == '\\' || *p == '\r' || *p == '\n' || *p == '\t') {
            esc[el++] = '\\';
            esc[el++] = *p == '\\' ? '\\' : *p == '\r' ? 'r' : *p == '\n' ? 'n' : 't';
        } else if (*p < 0x20 || *p == 0x7f) {
            esc[el++] = '\\';
            esc[el++] = 'x';
            esc[el++] = hex[*p >> 4];
            esc[el++] = hex[*p & 15];
        } else {
            esc[el++] = (char)*p;
        }
        if (n + el + 4 > cap) { /* room for "..." and the NUL */
            if (cap >= 4) {
                memcpy(out + (n < cap - 4 ? n : cap - 4), "...", 4);
                return out;
            }
            break;
        }
        memcpy(out + n, esc, el);
        n += el;
    }
    out[n < cap ? n : cap - 1] = '\0';
    return out;
}

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
