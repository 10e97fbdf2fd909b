/* A growable byte buffer, always NUL-terminated. */
#ifndef FUNCD_UTIL_BUF_H
#define FUNCD_UTIL_BUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct funcd_buf {
    char *data; /* NULL until the first append */
    size_t len;
    size_t cap;
} funcd_buf;

#define FUNCD_BUF_INIT {NULL, 0, 0}

int funcd_buf_grow(funcd_buf *b, size_t extra);
int funcd_buf_append(funcd_buf *b, const void *data, size_t len);
int funcd_buf_puts(funcd_buf *b, const char *s);
int funcd_buf_printf(funcd_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int funcd_buf_vprintf(funcd_buf *b, const char *fmt, va_list ap);
/* Hands the data to the caller (malloc()ed, never NULL) and resets `b`. */
char *funcd_buf_detach(funcd_buf *b, size_t *len);
void funcd_buf_reset(funcd_buf *b);
/* Moves `from`'s data into `to` (whose own data is kept for reuse by `from`). */
void funcd_buf_swap_in(funcd_buf *to, funcd_buf *from);
void funcd_buf_free(funcd_buf *b);

#endif
