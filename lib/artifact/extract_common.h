/*
 * Pieces shared by the extractors of untrusted archives (bundles in
 * lib/artifact, image layers in lib/oci): quoting entry names for messages,
 * sizes for messages, a table of path components, and removing a tree
 * relative to a directory without following links.
 */
#ifndef FUNCD_ARTIFACT_EXTRACT_COMMON_H
#define FUNCD_ARTIFACT_EXTRACT_COMMON_H

#include <stddef.h>
#include <stdint.h>

/*
 * `s` in double quotes, with quotes, backslashes and control bytes escaped,
 * cut with "..." to fit `out_len` (at least 16). Returns `out`.
 */
const char *funcd__quote_name(const char *s, char *out, size_t out_len);

/* "4 MiB", "12 KiB" or "1000 bytes". Returns `out`. */
const char *funcd__human_size(uint64_t n, char *out, size_t out_len);

/*
 * A hash table of path components: a path is a chain of nodes up to the
 * table's root. Memory grows with the bytes of distinct names added, so it
 * stays proportional to the archive headers that brought them.
 */
typedef struct funcd__path_node {
    struct funcd__path_node *parent;
    uint64_t hash;
    size_t len;
    int type; /* the caller's */
    char *name;
} funcd__path_node;

typedef struct funcd__path_table {
    funcd__path_node **slots;
    size_t cap; /* a power of two, or 0 */
    size_t count;
    funcd__path_node root; /* zero it, then set its type if needed */
} funcd__path_table;

/* The child `name` of `parent`, or NULL. */
funcd__path_node *funcd__path_table_find(const funcd__path_table *t,
                                         const funcd__path_node *parent, const char *name);
/* Adds a child (the caller checked it is absent); NULL when out of memory. */
funcd__path_node *funcd__path_table_add(funcd__path_table *t, funcd__path_node *parent,
                                        const char *name, int type);
/* Frees every node; the table is empty and reusable afterwards. */
void funcd__path_table_free(funcd__path_table *t);

/* Removes `name` under `dirfd` (a file or a whole tree) without following
 * symbolic links. 0 when removed or absent, -1 with errno otherwise.
 * (Defined in cache.c.) */
int funcd__remove_tree_at(int dirfd, const char *name);

/* An entry's names (the locale's, else UTF-8), and why its type is refused. */
struct archive_entry;
const char *funcd__entry_path(struct archive_entry *e);
const char *funcd__entry_symlink(struct archive_entry *e);
const char *funcd__entry_hardlink(struct archive_entry *e);
const char *funcd__refused_type(unsigned type);

/* Writes all `n` bytes (EINTR retried); 0, or -1 with errno. */
int funcd__write_all(int fd, const void *p, size_t n);

#endif
