/* The buffering writer behind funcd_port_blob_put_open for a driver without
 * put_open (blob.h): what a version 1 driver gets, as before version 2. */
#include <stdlib.h>
#include <string.h>

#include "funcd/sys/error.h"
#include "port/blob.h"

typedef struct gathering_writer {
    funcd_blob_writer base;
    funcd_blob *b;
    char *key;
    funcd_port_blob_publish publish;
    unsigned char *data;
    size_t len, cap;
} gathering_writer;

static void gw_free(gathering_writer *w)
{
    free(w->key);
    free(w->data);
    free(w);
}

static int gw_write(funcd_blob_writer *base, const void *data, size_t len)
{
    gathering_writer *w = (gathering_writer *)base;
    if (!len)
        return 0;
    if (!data)
        return funcd_error_set(FUNCD_EINVAL, "blob: write to \"%s\" has no data but %zu bytes",
                               w->key, len);
    if (len > SIZE_MAX - w->len)
        return funcd_error_set(FUNCD_ENOMEM, "blob: \"%s\" is too large to gather in memory",
                               w->key);
    if (w->len + len > w->cap) {
        size_t cap = w->cap ? w->cap : 64u << 10;
        while (cap < w->len + len)
            cap = cap > SIZE_MAX / 2 ? w->len + len : cap * 2;
        unsigned char *p = realloc(w->data, cap);
        if (!p)
            return funcd_error_set(FUNCD_ENOMEM, "blob: out of memory gathering %zu bytes of "
                                                 "\"%s\"",
                                   w->len + len, w->key);
        w->data = p;
        w->cap = cap;
    }
    memcpy(w->data + w->len, data, len);
    w->len += len;
    return 0;
}

static int gw_commit(funcd_blob_writer *base)
{
    gathering_writer *w = (gathering_writer *)base;
    unsigned char *data = w->data;
    w->data = NULL;
    if (!w->len) {
        free(data);
        data = NULL;
    } else if (w->cap > w->len) { /* give back the growth slack */
        unsigned char *p = realloc(data, w->len);
        if (p)
            data = p;
    }
    int rc = w->publish(w->b, w->key, data, w->len);
    gw_free(w);
    return rc;
}

static void gw_abort(funcd_blob_writer *base)
{
    gw_free((gathering_writer *)base);
}

int funcd_port_blob_gathering_writer(funcd_blob *b, const char *key,
                                     funcd_port_blob_publish publish, funcd_blob_writer **out)
{
    if (!out)
        return funcd_error_set(FUNCD_EINVAL, "blob: put_open needs an out pointer");
    *out = NULL;
    if (!key || !key[0])
        return funcd_error_set(FUNCD_EINVAL,
                               "blob: put_open needs a non-empty key (like \"sha256:<hex>\")");
    gathering_writer *w = calloc(1, sizeof(*w));
    if (!w || !(w->key = strdup(key))) {
        free(w);
        return funcd_error_set(FUNCD_ENOMEM, "blob: out of memory opening a writer for \"%s\"",
                               key);
    }
    w->base.write = gw_write;
    w->base.commit = gw_commit;
    w->base.abort = gw_abort;
    w->b = b;
    w->publish = publish;
    *out = &w->base;
    return 0;
}

/* A version 1 driver's commit: one put of the gathered bytes. */
static int put_gathered(funcd_blob *b, const char *key, unsigned char *data, size_t len)
{
    static const unsigned char none[1];
    int rc = funcd_port_blob_put(b, key, data ? (const void *)data : none, len);
    free(data);
    return rc;
}

int funcd_port_blob_buffered_writer(funcd_blob *b, const char *key, funcd_blob_writer **out)
{
    return funcd_port_blob_gathering_writer(b, key, put_gathered, out);
}
