#include "util/buf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "funcd/sys/error.h"

int funcd_buf_grow(funcd_buf *b, size_t extra)
{
    if (extra >= SIZE_MAX - b->len)
        return funcd_error_set(FUNCD_ENOMEM, "a buffer of %zu bytes cannot grow by %zu", b->len,
                               extra);
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = realloc(b->data, cap);
    if (!p)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory growing a buffer to %zu bytes", cap);
    b->data = p;
    b->cap = cap;
    return 0;
}

int funcd_buf_append(funcd_buf *b, const void *data, size_t len)
{
    if (funcd_buf_grow(b, len) < 0)
        return FUNCD_ENOMEM;
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

int funcd_buf_puts(funcd_buf *b, const char *s)
{
    return funcd_buf_append(b, s, strlen(s));
}

int funcd_buf_vprintf(funcd_buf *b, const char *fmt, va_list ap)
{
    va_list copy;
    va_copy(copy, ap);
    int n = vsnprintf(NULL, 0, fmt, copy);
    va_end(copy);
    if (n < 0)
        return funcd_error_set(FUNCD_EINVAL, "bad format string");
    if (funcd_buf_grow(b, (size_t)n) < 0)
        return FUNCD_ENOMEM;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int funcd_buf_printf(funcd_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = funcd_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

char *funcd_buf_detach(funcd_buf *b, size_t *len)
{
    if (!b->data && funcd_buf_grow(b, 0) < 0)
        return NULL;
    char *d = b->data;
    d[b->len] = '\0'; /* also for a buffer never written to */
    if (len)
        *len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return d;
}

void funcd_buf_reset(funcd_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

void funcd_buf_free(funcd_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void funcd_buf_swap_in(funcd_buf *to, funcd_buf *from)
{
    funcd_buf tmp = *to;
    *to = *from;
    *from = tmp;
    funcd_buf_reset(from);
}
