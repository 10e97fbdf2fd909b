/*
 * funcd — common definitions shared by the facade and the backend SPI.
 *
 * Error model (after libgit2): every fallible call returns 0 or a negative
 * FUNCD_E* code; the details of the last failure on the calling thread are
 * in funcd_error_last(), which never returns NULL.
 */
#ifndef FUNCD_COMMON_H
#define FUNCD_COMMON_H

#include <stddef.h>
#include <stdint.h>

#if defined(FUNCD_BUILDING_LIBRARY) && defined(__GNUC__)
#define FUNCD_EXTERN __attribute__((visibility("default")))
#else
#define FUNCD_EXTERN
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum funcd_log_level {
    FUNCD_LOG_DEBUG = 0,
    FUNCD_LOG_INFO = 1,
    FUNCD_LOG_WARN = 2,
    FUNCD_LOG_ERROR = 3,
} funcd_log_level;

/** Log lines of the platform and of drivers that log (the NATS bus); the
 *  platform's default: stderr at INFO and above. */
typedef void (*funcd_log_fn)(funcd_log_level level, const char *message, void *payload);

/** Error codes. Callers branch on the few specific ones. */
enum funcd_error_code {
    FUNCD_OK = 0,
    FUNCD_EINVAL = -1,    /**< bad argument or bad input (message names it) */
    FUNCD_ENOMEM = -2,    /**< out of memory */
    FUNCD_ENOTFOUND = -3, /**< the object or key does not exist */
    FUNCD_EEXISTS = -4,   /**< the object or key already exists */
    FUNCD_ECONFLICT = -5, /**< compare-and-swap failed: the revision moved on */
    FUNCD_EVERSION = -6,  /**< a backend's or an options struct's version is not supported */
    FUNCD_ENOTSUP = -7,   /**< the backend does not implement this method */
    FUNCD_EBIND = -8,     /**< a listener could not bind its address */
    FUNCD_EMISSING = -9,  /**< a required dependency (backend) was not given */
    FUNCD_EGONE = -10,    /**< a watch revision is older than the retained history */
    FUNCD_ERANGE = -11,   /**< a byte range lies outside the object */
    FUNCD_EIO = -12,      /**< an operating-system call failed */
    FUNCD_ESTATE = -13,   /**< the object is not in a state that allows the call */
    FUNCD_ETIMEOUT = -14, /**< a deadline passed */
    FUNCD_ENOSPC = -15,   /**< the disk (or a quota) is full; nothing was half-written */
    FUNCD_EUNAVAILABLE = -16, /**< a backend (a database server) cannot be reached now; retry */
};

/** Details of the last error on this thread. */
typedef struct funcd_error {
    int code;            /**< one of FUNCD_E*, or 0 */
    const char *message; /**< what failed, on which object, and what to do */
} funcd_error;

/** The last error raised on the calling thread; never NULL (code 0: none). */
FUNCD_EXTERN const funcd_error *funcd_error_last(void);

/** Clears the calling thread's last error. */
FUNCD_EXTERN void funcd_error_clear(void);

/** A short constant name for an error code ("FUNCD_ENOTFOUND"). */
FUNCD_EXTERN const char *funcd_error_name(int code);

/**
 * Parses a duration as the resource kinds write it ("500ms", "30s", "5m",
 * "1h", "1h30m", "1.5s", or "0") into milliseconds in *out. Returns 0, or
 * FUNCD_EINVAL (with funcd_error_last() naming the text) when it is not a
 * duration or does not fit in 64 bits; *out is unchanged then.
 */
FUNCD_EXTERN int funcd_parse_duration_ms(const char *s, uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif
