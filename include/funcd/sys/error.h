/*
 * funcd backend SPI — raising errors from a driver.
 */
#ifndef FUNCD_SYS_ERROR_H
#define FUNCD_SYS_ERROR_H

#include "funcd/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Records `code` and a printf-style message as the calling thread's last
 * error and returns `code`, so a driver can write `return funcd_error_set(...)`.
 */
FUNCD_EXTERN int funcd_error_set(int code, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif
