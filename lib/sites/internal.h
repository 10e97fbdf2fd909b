/* Private parts of lib/sites: a published version of a Site and its files. */
#ifndef FUNCD_SITES_INTERNAL_H
#define FUNCD_SITES_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>

#include <h2o/memory.h>

#include "sites/sites.h"

#define SITES_FILE_BUCKETS 256
/* Files of an immutable source up to this size are kept in memory, within
 * the process-wide budget (sites_cache); larger ones are read from the file
 * per request. A version describes up to SITES_CACHE_FILES files (their
 * headers; the contents count against the budget). */
#define SITES_CACHE_FILE_MAX (8u << 20)
#define SITES_CACHE_FILES 20000
/* The default of funcd --site-cache-bytes. */
#define SITES_CACHE_DEFAULT_BYTES (256u << 20)
/* Plain HTTP/1 bodies from this size go out with sendfile (serve.c); an
 * immutable source's file this big keeps its descriptor open, up to
 * SITES_KEPT_FDS descriptors in the process (beyond: opened per request). */
#define SITES_SENDFILE_MIN (64u << 10)
#define SITES_KEPT_FDS 1024u
/* The default of funcd --site-send-timeout. */
#define SITES_SEND_TIMEOUT_DEFAULT_MS 60000u

/* A file's contents in memory: a request sending them holds a reference,
 * so the cache may let them go meanwhile. */
typedef struct site_blob {
    atomic_uint refs;
    size_t size;
    char bytes[];
} site_blob;

struct site_ver;

/* The contents kept in memory by every Site of the process, within one
 * budget: when a new file would pass it, the least recently used contents
 * go first (a clock: a file read since the hand last passed it gets a
 * second chance), but never contents a request is sending, so every blob
 * in memory is counted (bytes also counts contents being read in). A file
 * that does not fit is streamed in 64 KiB steps instead. Contents the hand
 * finds in use are parked off the ring until their last request lets go
 * (serve.c, let_go), so making room never walks them again. Lock order:
 * the cache's lock, then a version's. */
typedef struct sites_cache {
    pthread_mutex_t lock;
    uint64_t limit;              /* bytes; 0: nothing is kept */
    atomic_uint_fast64_t bytes;  /* kept now */
    atomic_uint_fast64_t files;
    struct site_file *hand;      /* the clock's ring of files with contents, or NULL */
    struct site_file *parked;    /* the ring of those found in use, or NULL */
} sites_cache;

typedef struct site_file {
    struct site_file *next;
    char *rel;             /* relative to the root, no leading '/' */
    uint64_t size;
    site_blob *blob;       /* the contents, or NULL (under the version's lock) */
    int filling;           /* a request is reading them in (under the cache's lock) */
    atomic_uchar used;     /* read since the clock's hand passed */
    atomic_uchar parked;   /* on the cache's parked ring, not the clock's (set under its lock) */
    struct site_file *ring_next, *ring_prev; /* on one of the cache's rings (its lock) */
    struct site_ver *ver;  /* whose file this is */
    int fd;                /* kept open for sendfile, or -1 */
    int64_t mtime;         /* seconds */
    const char *type;      /* Content-Type (static) */
    char etag[48];         /* "\"<mtime hex>-<size hex>\"" */
    char last_modified[40];
    struct site_file *gz;  /* the precompressed sibling "<rel>.gz", or NULL (owned) */
} site_file;

typedef struct site_ver {
    atomic_uint refs;
    char ns[64], name[64];
    char *root;
    int root_fd;        /* O_PATH directory of the root */
    char *index;        /* spec.index, or the default */
    char *not_found;    /* spec.notFound, or NULL */
    int spa;
    char *cache_control; /* NULL: none sent */
    char **hosts;        /* NULL-terminated, lowercase */
    int immutable;       /* contents may be kept */
    uint64_t send_timeout_ms; /* a client taking nothing of an answer this long: cut off */
    pthread_rwlock_t lock; /* the file table */
    site_file *files[SITES_FILE_BUCKETS];
    unsigned n_files;
    sites_cache *cache;
} site_ver;

void funcd__site_blob_unref(site_blob *b);
/* Lets go of every content `v` keeps (when `v` goes). */
void funcd__sites_cache_forget(sites_cache *c, site_ver *v);

void funcd__site_ver_ref(site_ver *v);
/* Frees a file's description and its .gz sibling's. */
void funcd__site_file_free(site_file *f);
void funcd__site_ver_unref(site_ver *v);

/* Opens `rel` (relative, no leading '/') below `root_fd`, never leaving it
 * (no "..", no symbolic link out, no magic link): fd (O_RDONLY) and its
 * stat; -1 with errno (ENOENT, EXDEV/ELOOP: it would leave the root).
 * `public_only` (a host path's Site, read by funcd as it runs, often root):
 * only what any user of the host may read, else EACCES. */
int funcd__site_open(int root_fd, const char *rel, int public_only, struct stat *st);



/* The parsers of what a request says (serve.c; fuzz/fuzz_sites.c). */
/* "bytes=a-b", "bytes=a-", "bytes=-n" of a file of `size` bytes: 1 with
 * [*off, *off + *len), 0 when not satisfiable, -1 when the header is not a
 * single byte range we take (the whole file is sent, as RFC 9110 allows). */
int funcd__site_parse_range(h2o_iovec_t v, uint64_t size, uint64_t *off, uint64_t *len);
/* Whether list `header` (If-None-Match) has `etag`, weakly compared. */
int funcd__site_etag_listed(h2o_iovec_t header, const char *etag);
/* An HTTP date (If-Modified-Since, If-Range) in seconds, or -1. */
int64_t funcd__site_parse_date(h2o_iovec_t v);
/* 1 when Accept-Encoding `v` takes gzip (a q of 0 refuses it). */
int funcd__site_accepts_gzip(h2o_iovec_t v);
/* The site name a Host header names (lowercase, no port, no trailing '.',
 * NUL-terminated in `name`): its length, or 0 when it names none. */
size_t funcd__site_host(h2o_iovec_t host, char name[254]);
/* A request's decoded path below a Site (any leading '/' dropped, `index`
 * added after a trailing '/' or to nothing) into `out` (len + strlen(index)
 * + 1 bytes): 1 for a directory, 0 for a file, -1 when it has a NUL byte,
 * -2 when a component is "..". */
int funcd__site_rel(const char *path, size_t len, const char *index, char *out);

/* Gateway threads: the published version of Site ns/name (a reference), or
 * NULL with *known 1 when the Site exists but cannot be served now. */
site_ver *funcd__sites_find(funcd_sites *s, const char *ns, size_t nsl, const char *name,
                            size_t nl, int *known);
/* The version serving host `host` (lowercase, no port; a reference), or NULL. */
site_ver *funcd__sites_find_host(funcd_sites *s, const char *host, size_t len);
#endif
