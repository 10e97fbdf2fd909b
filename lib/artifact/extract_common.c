#include "artifact/extract_common.h"

#include "artifact/archive_lazy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *funcd__quote_name(const char *s, char *out, size_t out_len)
{
    size_t o = 0, limit = out_len - 8; /* room for an escape, "...", quote, NUL */
    out[o++] = '"';
    for (; *s && o < limit; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            o += (size_t)snprintf(out + o, out_len - o, "\\x%02x", c);
        } else {
            out[o++] = (char)c;
        }
    }
    if (*s) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o++] = '"';
    out[o] = '\0';
    return out;
}

const char *funcd__human_size(uint64_t n, char *out, size_t out_len)
{
    if (n && n % (1u << 20) == 0)
        snprintf(out, out_len, "%llu MiB", (unsigned long long)(n >> 20));
    else if (n && n % 1024 == 0)
        snprintf(out, out_len, "%llu KiB", (unsigned long long)(n >> 10));
    else
        snprintf(out, out_len, "%llu bytes", (unsigned long long)n);
    return out;
}

/* ---- the path table ---------------------------------------------------------------------- */

static uint64_t node_hash(const funcd__path_node *parent, const char *name, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull ^ ((uint64_t)(uintptr_t)parent * 0x9e3779b97f4a7c15ull);
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)name[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

funcd__path_node *funcd__path_table_find(const funcd__path_table *t,
                                         const funcd__path_node *parent, const char *name)
{
    if (!t->cap)
        return NULL;
    size_t len = strlen(name);
    uint64_t h = node_hash(parent, name, len);
    for (size_t i = h & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        funcd__path_node *n = t->slots[i];
        if (!n)
            return NULL;
        if (n->hash == h && n->parent == parent && n->len == len && memcmp(n->name, name, len) == 0)
            return n;
    }
}

static void insert_slot(funcd__path_node **slots, size_t cap, funcd__path_node *n)
{
    size_t i = n->hash & (cap - 1);
    while (slots[i])
        i = (i + 1) & (cap - 1);
    slots[i] = n;
}

static int grow(funcd__path_table *t)
{
    size_t cap = t->cap ? t->cap * 2 : 256;
    funcd__path_node **slots = calloc(cap, sizeof(*slots));
    if (!slots)
        return -1;
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i])
            insert_slot(slots, cap, t->slots[i]);
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return 0;
}

funcd__path_node *funcd__path_table_add(funcd__path_table *t, funcd__path_node *parent,
                                        const char *name, int type)
{
    if ((t->count + 1) * 2 > t->cap && grow(t) < 0)
        return NULL;
    size_t len = strlen(name);
    funcd__path_node *n = malloc(sizeof(*n) + len + 1);
    if (!n)
        return NULL;
    n->parent = parent;
    n->len = len;
    n->type = type;
    n->name = (char *)(n + 1);
    memcpy(n->name, name, len + 1);
    n->hash = node_hash(parent, name, len);
    insert_slot(t->slots, t->cap, n);
    t->count++;
    return n;
}

void funcd__path_table_free(funcd__path_table *t)
{
    for (size_t i = 0; i < t->cap; i++)
        free(t->slots[i]);
    free(t->slots);
    t->slots = NULL;
    t->cap = t->count = 0;
}

int funcd__write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

const char *funcd__entry_path(struct archive_entry *e)
{
    const char *p = archive_entry_pathname(e);
    return p ? p : archive_entry_pathname_utf8(e);
}

const char *funcd__entry_symlink(struct archive_entry *e)
{
    const char *p = archive_entry_symlink(e);
    return p ? p : archive_entry_symlink_utf8(e);
}

const char *funcd__entry_hardlink(struct archive_entry *e)
{
    const char *p = archive_entry_hardlink(e);
    return p ? p : archive_entry_hardlink_utf8(e);
}

const char *funcd__refused_type(unsigned type)
{
    switch (type) {
    case AE_IFCHR: return "character devices are not allowed";
    case AE_IFBLK: return "block devices are not allowed";
    case AE_IFIFO: return "FIFOs are not allowed";
    case AE_IFSOCK: return "sockets are not allowed";
    default: return "entries of this type are not allowed";
    }
}
