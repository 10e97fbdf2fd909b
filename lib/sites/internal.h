/* Private parts of lib/sites: a published version of a Site and its files. */
#ifndef FUNCD_SITES_INTERNAL_H
#define FUNCD_SITES_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>

#include "sites/sites.h"

#define SITES_FILE_BUCKETS 256
/* Files of an immutable source up to this size are kept in memory, up to
 * SITES_CACHE_BYTES per site and SITES_CACHE_FILES entries; larger ones
 * (and a full cache) are read from the file per request. */
#define SITES_CACHE_FILE_MAX (8u << 20)
#define SITES_CACHE_BYTES (256u << 20)
#define SITES_CACHE_FILES 20000
/* Plain HTTP/1 bodies from this size go out with sendfile (serve.c); an
 * immutable source's file this big keeps its descriptor open, up to
 * SITES_KEPT_FDS descriptors in the process (beyond: opened per request). */
#define SITES_SENDFILE_MIN (64u << 10)
#define SITES_KEPT_FDS 1024u

typedef struct site_file {
    struct site_file *next;
    char *rel;             /* relative to the root, no leading '/' */
    uint64_t size;
    char *data;            /* the contents, or NULL: read per request */
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
    pthread_rwlock_t lock; /* the file table */
    site_file *files[SITES_FILE_BUCKETS];
    atomic_uint_fast64_t cached_bytes;
    unsigned n_files;
} site_ver;

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



/* Gateway threads: the published version of Site ns/name (a reference), or
 * NULL with *known 1 when the Site exists but cannot be served now. */
site_ver *funcd__sites_find(funcd_sites *s, const char *ns, size_t nsl, const char *name,
                            size_t nl, int *known);
/* The version serving host `host` (lowercase, no port; a reference), or NULL. */
site_ver *funcd__sites_find_host(funcd_sites *s, const char *host, size_t len);
#endif
