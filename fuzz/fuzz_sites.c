/*
 * Fuzz target for the parsers of what a request to a Site says
 * (lib/sites/serve.c): the input, split at its first five NUL bytes, is a
 * Range header, an If-None-Match list, an HTTP date (If-Modified-Since,
 * If-Range), an Accept-Encoding, a Host and a request path. What must hold:
 * no crash or overread; a satisfiable range lies inside the file; a Host
 * gives a lowercase name of at most 253 bytes with no port; a path gives a
 * relative name with no ".." component and no NUL.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sites/internal.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_sites: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly `size` bytes: ASan sees any read past the end. */
    char *s = malloc(size ? size : 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    h2o_iovec_t part[6] = {{NULL, 0}};
    const char *p = s, *end = s + size;
    for (int i = 0; i < 6; i++) {
        const char *nul = memchr(p, '\0', (size_t)(end - p));
        part[i] = h2o_iovec_init(p, (size_t)((nul ? nul : end) - p));
        if (!nul)
            break;
        p = nul + 1;
    }
    /* Each part on the heap on its own, so a read past its end is seen. */
    for (int i = 0; i < 6; i++) {
        char *own = malloc(part[i].len ? part[i].len : 1);
        if (!own)
            continue;
        memcpy(own, part[i].base ? part[i].base : "", part[i].len);
        part[i].base = own;
    }

    static const uint64_t sizes[] = {0, 1, 100, 1 << 20, UINT64_MAX};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        uint64_t off = 0, len = 0;
        int r = funcd__site_parse_range(part[0], sizes[i], &off, &len);
        check(r >= -1 && r <= 1, "range: an answer that is none of -1, 0, 1");
        if (r == 1)
            check(len >= 1 && off < sizes[i] && len <= sizes[i] - off,
                  "range: a satisfiable range outside the file");
    }
    funcd__site_etag_listed(part[1], "\"5f00-100000\"");
    funcd__site_parse_date(part[2]);
    funcd__site_accepts_gzip(part[3]);

    char name[254];
    size_t hl = funcd__site_host(part[4], name);
    check(hl <= 253, "host: longer than 253");
    if (hl) {
        check(strlen(name) <= hl, "host: not terminated");
        for (size_t i = 0; name[i]; i++)
            check(!(name[i] >= 'A' && name[i] <= 'Z') && name[i] != ':',
                  "host: uppercase or a port left");
    }

    static const char index[] = "index.html";
    char *rel = malloc(part[5].len + sizeof(index));
    if (rel) {
        int dir = funcd__site_rel(part[5].base, part[5].len, index, rel);
        check(dir >= -2 && dir <= 1, "path: an answer that is none of -2..1");
        if (dir >= 0) {
            check(rel[0] != '/', "path: absolute");
            for (const char *q = rel; *q;) {
                size_t n = strcspn(q, "/");
                check(!(n == 2 && q[0] == '.' && q[1] == '.'), "path: a \"..\" component");
                q += n;
                while (*q == '/')
                    q++;
            }
            if (dir == 1)
                check(strlen(rel) >= strlen(index) &&
                          strcmp(rel + strlen(rel) - strlen(index), index) == 0,
                      "path: a directory without its index");
        }
        free(rel);
    }
    for (int i = 0; i < 6; i++)
        free((void *)part[i].base);
    free(s);
    return 0;
}
