/* Thread-local last error (libgit2's model). */
#include <stdarg.h>
#include <stdio.h>

#include "funcd/sys/error.h"

static _Thread_local char last_message[1024];
static _Thread_local funcd_error last = {0, ""};

const funcd_error *funcd_error_last(void)
{
    if (!last.message)
        last.message = "";
    return &last;
}

void funcd_error_clear(void)
{
    last.code = 0;
    last_message[0] = '\0';
    last.message = last_message;
}

int funcd_error_set(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_message, sizeof(last_message), fmt, ap);
    va_end(ap);
    last.code = code;
    last.message = last_message;
    return code;
}

const char *funcd_error_name(int code)
{
    switch (code) {
    case FUNCD_OK: return "FUNCD_OK";
    case FUNCD_EINVAL: return "FUNCD_EINVAL";
    case FUNCD_ENOMEM: return "FUNCD_ENOMEM";
    case FUNCD_ENOTFOUND: return "FUNCD_ENOTFOUND";
    case FUNCD_EEXISTS: return "FUNCD_EEXISTS";
    case FUNCD_ECONFLICT: return "FUNCD_ECONFLICT";
    case FUNCD_EVERSION: return "FUNCD_EVERSION";
    case FUNCD_ENOTSUP: return "FUNCD_ENOTSUP";
    case FUNCD_EBIND: return "FUNCD_EBIND";
    case FUNCD_EMISSING: return "FUNCD_EMISSING";
    case FUNCD_EGONE: return "FUNCD_EGONE";
    case FUNCD_ERANGE: return "FUNCD_ERANGE";
    case FUNCD_EIO: return "FUNCD_EIO";
    case FUNCD_ESTATE: return "FUNCD_ESTATE";
    case FUNCD_ETIMEOUT: return "FUNCD_ETIMEOUT";
    case FUNCD_ENOSPC: return "FUNCD_ENOSPC";
    case FUNCD_EUNAVAILABLE: return "FUNCD_EUNAVAILABLE";
    default: return "FUNCD_E?";
    }
}
