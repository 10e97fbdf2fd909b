/*
 * What the memory and PostgreSQL blob drivers share: the checks of a key
 * and of get()'s arguments, get() and stat() around their locks, and the
 * span of an object a get reads, so both answer the same errors with the
 * same words.
 */
#ifndef FUNCD_BLOB_SHARED_H
#define FUNCD_BLOB_SHARED_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "funcd/sys/blob.h"

int funcd_blob_check_key(const char *key, const char *what);

/* The driver's part of get(), under its lock: the object's bytes from
 * `offset`, at most `length`, in a buffer of its own (funcd_blob_span). */
typedef int (*funcd_blob_get_fn)(void *blob, const char *key, uint64_t offset, uint64_t length,
                                 void **out, size_t *out_len);

/* The blob's get(): checks the key and out pointers, then runs `get`
 * under `lock`. */
int funcd_blob_get_locked(pthread_mutex_t *lock, void *blob, funcd_blob_get_fn get,
                          const char *key, uint64_t offset, uint64_t length, void **out,
                          size_t *out_len);

/* The driver's part of stat(), under its lock: 1 and `*out` filled when
 * the object exists, 0 when it does not, or a negative error. */
typedef int (*funcd_blob_stat_fn)(void *blob, const char *key, funcd_blob_stat *out);

/* The blob's stat(): checks the key, runs `stat` under `lock`, and answers
 * FUNCD_ENOTFOUND for an absent object; `out` may be NULL. */
int funcd_blob_stat_locked(pthread_mutex_t *lock, void *blob, funcd_blob_stat_fn stat,
                           const char *key, funcd_blob_stat *out);

/* How much of an object of `size` bytes a get of (`offset`, `length`)
 * reads, in *n, and a buffer that holds it (at least one byte, for an
 * empty read) in *copy; FUNCD_ERANGE when `offset` lies past the end,
 * FUNCD_ENOMEM. */
int funcd_blob_span(const char *key, uint64_t size, uint64_t offset, uint64_t length, size_t *n,
                    unsigned char **copy);

#endif
