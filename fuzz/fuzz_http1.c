/*
 * Fuzz target for lib/http/http1.c, the HTTP/1.x parser of what workers
 * answer (the gateway, the readiness probe) and of request heads (the
 * control plane's look before h2o). The first byte picks a request, a
 * response, or a response to HEAD, and the size of the reads the body
 * arrives in; the rest is the message. What must hold: every prefix of a
 * complete head is incomplete; fields lie inside the input; a body read
 * never yields more bytes than it was given nor takes bytes after its end.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/http1.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_http1: %s\n", what);
        abort();
    }
}

static void start(funcd_http1 *m, unsigned mode, funcd_http1_field *f, size_t max)
{
    if (mode % 3 == 0)
        funcd_http1_init_request(m, f, max);
    else
        funcd_http1_init_response(m, mode % 3 == 2, f, max);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned mode = data[0];
    size_t step = 1 + (mode >> 2) % 64;
    char *buf = malloc(size); /* writable: bodies decode in place */
    if (!buf)
        return 0;
    size -= 1;
    memcpy(buf, data + 1, size);
    funcd_http1_field f[16];
    funcd_http1 m;
    start(&m, mode, f, 16);
    ssize_t n = funcd_http1_head(&m, buf, size);
    check(n >= -1 && n <= (ssize_t)size, "a head longer than its input");
    if (n > 0) {
        for (size_t i = 0; i < m.nfields; i++)
            check(m.fields[i].name >= buf && m.fields[i].name + m.fields[i].name_len <= buf + n &&
                      m.fields[i].value >= buf &&
                      m.fields[i].value + m.fields[i].value_len <= buf + n,
                  "a field outside the head");
        funcd_http1 p;
        funcd_http1_field pf[16];
        start(&p, mode, pf, 16);
        check(funcd_http1_head(&p, buf, (size_t)n - 1) == 0, "a cut head is complete");
        m.fields = NULL;
        m.nfields = m.max_fields = 0;
        size_t at = (size_t)n;
        while (at < size && !m.done) {
            size_t len = size - at < step ? size - at : step, out;
            ssize_t took = funcd_http1_body(&m, buf + at, len, &out);
            if (took < 0)
                break;
            check((size_t)took <= len && out <= (size_t)took, "a body read out of bounds");
            check((size_t)took == len || m.done, "bytes left over before the end");
            at += (size_t)took;
            if ((size_t)took < len)
                break;
        }
        (void)funcd_http1_eof(&m);
    }
    free(buf);
    return 0;
}
