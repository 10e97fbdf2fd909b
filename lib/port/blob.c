/* The buffering writer behind funcd_port_blob_put_open for a driver without
 * put_open (blob.h): what a version 1 driver gets, as before version 2. */
#include <stdlib.h>
#include <string.h>

#include "funcd/sys/error.h"
#include "port/blob.h"

typedef struct buffered_writer {
    funcd_blob_writer base;
    funcd_blob *b;
    char *key;
    unsigned char *data;
    size_t len, cap;
} buffered_writer;

static void bw_free(buffered_writer *w)
{
    free(w->key);
    free(w->data);
    free(w);
}

static int bw_write(funcd_blob_writer *base, const void *data, size_t len)
{
    buffered_writer *w = (buffered_writer *)base;
    if (!len)
        return 0;
    if (!data)
        return funcd_error_set(FUNCD_EINVAL, "blob: write to \"%s\" has no data but %zu bytes",
                               w->key, len);
    if (len > SIZE_MAX - w->len)
        return funcd_error_set(FUNCD_ENOMEM, "blob: \"%s\" is too large to buffer", w->key);
    if (w->len + len > w->cap) {
        size_t cap = w->cap ? w->cap : 64u << 10;
        while (cap < w->len + len)
            cap = cap > SIZE_MAX / 2 ? w->len + len : cap * 2;
        unsigned char *p = realloc(w->data, cap);
        if (!p)
            return funcd_error_set(FUNCD_ENOMEM,
                                   "blob: out of memory buffering %zu bytes of \"%s\" (the "
                                   "driver has no streaming put_open)",
                                   w->len + len, w->key);
        w->data = p;
        w->cap = cap;
    }
    memcpy(w->data + w->len, data, len);
    w->len += len;
    return 0;
}

static int bw_commit(funcd_blob_writer *base)
{
    buffered_writer *w = (buffered_writer *)base;
    static const unsigned char none[1];
    int rc = funcd_port_blob_put(w->b, w->key, w->data ? (const void *)w->data : none, w->len);
    bw_free(w);
    return rc;
}

static void bw_abort(funcd_blob_writer *base)
{
    bw_free((buffered_writer *)base);
}

int funcd_port_blob_buffered_writer(funcd_blob *b, const char *key, funcd_blob_writer **out)
{
    if (!out)
        return funcd_error_set(FUNCD_EINVAL, "blob: put_open needs an out pointer");
    *out = NULL;
    if (!key || !key[0])
        return funcd_error_set(FUNCD_EINVAL,
                               "blob: put_open needs a non-empty key (like \"sha256:<hex>\")");
    buffered_writer *w = calloc(1, sizeof(*w));
    if (!w || !(w->key = strdup(key))) {
        free(w);
        return funcd_error_set(FUNCD_ENOMEM, "blob: out of memory opening a writer for \"%s\"",
                               key);
    }
    w->base.write = bw_write;
    w->base.commit = bw_commit;
    w->base.abort = bw_abort;
    w->b = b;
    *out = &w->base;
    return 0;
}
