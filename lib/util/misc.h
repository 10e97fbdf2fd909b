/* Small helpers: time, identifiers, strings, listening sockets. */
#ifndef FUNCD_UTIL_MISC_H
#define FUNCD_UTIL_MISC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Wall clock, Unix epoch milliseconds. */
int64_t funcd_now_ms(void);
/* A strictly increasing use time in ns, close to the wall clock: `*clock`
 * is the last one given (the caller serialises calls). LRU caches order by it. */
uint64_t funcd_use_tick(uint64_t *clock);
/* Monotonic clock, milliseconds. */
int64_t funcd_mono_ms(void);
/* "2026-11-29T19:23:37Z" into out (at least 21 bytes). */
void funcd_rfc3339(int64_t epoch_ms, char *out, size_t out_len);
/* A random RFC 4122 version-4 UUID, 36 characters + NUL. */
void funcd_uuid4(char out[37]);

/* `len` bytes as lowercase hex into `out` (2 * len + 1 bytes). */
void funcd_hex(const void *in, size_t len, char *out);
/* The SHA-256 of `len` bytes as 64 hex digits. */
void funcd_sha256_hex(const void *data, size_t len, char out[65]);

char *funcd_strdup(const char *s);           /* NULL-safe; NULL on OOM */
char *funcd_strndup(const char *s, size_t n);
int funcd_has_prefix(const char *s, const char *prefix);

/*
 * Opens a listening TCP socket on "host:port" (port 0: ephemeral), with
 * SO_REUSEADDR, SO_REUSEPORT when `reuseport`, non-blocking and close-on-exec.
 * Writes the bound "host:port" into `bound`. Returns the fd or FUNCD_EBIND /
 * FUNCD_EINVAL with funcd_error_last() naming the address.
 */
int funcd_listen_tcp(const char *addr, int reuseport, char *bound, size_t bound_len);

/*
 * Opens another listening socket on the exact address of listening socket
 * `fd` (family, scope, IPV6_V6ONLY), in its SO_REUSEPORT group: `fd` must
 * have SO_REUSEPORT set. Returns the fd or FUNCD_EBIND.
 */
int funcd_listen_sibling(int fd);

/* Removes a directory tree without following symlinks (rm -rf). */
int funcd_remove_tree(const char *path);

/* A copy of a NULL-terminated string list (an empty one for NULL); NULL on
 * OOM. Free with funcd_strv_free (NULL-safe). */
char **funcd_strv_dup(const char *const *v);
void funcd_strv_free(char **v);

/* Makes `to` a hard link of `from`, or a copy with `mode` where the file
 * systems differ; `to` must not exist. 0, or FUNCD_EIO / FUNCD_ENOSPC. */
int funcd_link_or_copy(const char *from, const char *to, mode_t mode);

/* Writes all `len` bytes (again after EINTR and short writes): 0, or -1
 * with errno set (EIO when the file took nothing). */
int funcd_write_all(int fd, const void *data, size_t len);

#endif
