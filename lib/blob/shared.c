/* What the blob drivers share (shared.h). */
#include "blob/shared.h"

#include <inttypes.h>
#include <stdlib.h>

#include "funcd/sys/error.h"

int funcd_blob_check_key(const char *key, const char *what)
{
    if (!key || !key[0])
        return funcd_error_set(FUNCD_EINVAL,
                               "blob: %s needs a non-empty key (like \"sha256:<hex>\")", what);
    return 0;
}

int funcd_blob_get_locked(pthread_mutex_t *lock, void *blob, funcd_blob_get_fn get,
                          const char *key, uint64_t offset, uint64_t length, void **out,
                          size_t *out_len)
{
    int rc = funcd_blob_check_key(key, "get");
    if (rc < 0)
        return rc;
    if (!out || !out_len)
        return funcd_error_set(FUNCD_EINVAL, "blob: get of \"%s\" needs out pointers", key);
    pthread_mutex_lock(lock);
    rc = get(blob, key, offset, length, out, out_len);
    pthread_mutex_unlock(lock);
    return rc;
}

int funcd_blob_stat_locked(pthread_mutex_t *lock, void *blob, funcd_blob_stat_fn stat,
                           const char *key, funcd_blob_stat *out)
{
    int rc = funcd_blob_check_key(key, "stat");
    if (rc < 0)
        return rc;
    funcd_blob_stat st = {0};
    pthread_mutex_lock(lock);
    rc = stat(blob, key, &st);
    pthread_mutex_unlock(lock);
    if (rc == 0)
        return funcd_error_set(FUNCD_ENOTFOUND, "blob: cannot stat \"%s\": no such object", key);
    if (rc > 0 && out)
        *out = st;
    return rc < 0 ? rc : 0;
}

int funcd_blob_span(const char *key, uint64_t size, uint64_t offset, uint64_t length, size_t *n,
                    unsigned char **copy)
{
    if (offset > size)
        return funcd_error_set(FUNCD_ERANGE,
                               "blob: offset %" PRIu64 " lies past the end of \"%s\" (%" PRIu64
                               " bytes); stat it for its size",
                               offset, key, size);
    uint64_t avail = size - offset;
    *n = (size_t)(length < avail ? length : avail);
    if (!(*copy = malloc(*n ? *n : 1)))
        return funcd_error_set(FUNCD_ENOMEM, "blob: out of memory reading %zu bytes of \"%s\"", *n,
                               key);
    return 0;
}
