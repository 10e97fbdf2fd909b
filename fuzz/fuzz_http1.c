/*
 * Fuzz target for lib/http/http1.c, the HTTP/1.x parser of what workers
 * answer (the gateway, the readiness probe) and of request heads (the
 * control plane's look before h2o). The first byte picks a request, a
 * response, or a response to HEAD, and the size of the reads the body
 * arrives in; the rest is the message. What must hold: every prefix of a
 * complete head is incomplete; fields lie inside the input; a body read
 * never yields more bytes than it was given nor takes bytes after its end;
 * and a head the fast path read (http1.c) reads the same through
 * libhttp-parser alone: the same length, fields, framing, and body.
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

/* Decodes the body after a head of n bytes in reads of `step`: the body's
 * bytes (in place, to the front of buf + n) and whether it ended. */
static size_t read_body(funcd_http1 *m, char *buf, size_t size, size_t n, size_t step, int *ended)
{
    size_t at = n, got = 0;
    while (at < size && !m->done) {
        size_t len = size - at < step ? size - at : step, out;
        ssize_t took = funcd_http1_body(m, buf + at, len, &out);
        if (took < 0)
            break;
        check((size_t)took <= len && out <= (size_t)took, "a body read out of bounds");
        check((size_t)took == len || m->done, "bytes left over before the end");
        memmove(buf + n + got, buf + at, out);
        got += out;
        at += (size_t)took;
        if ((size_t)took < len)
            break;
    }
    *ended = funcd_http1_eof(m);
    return got;
}

static int same_span(const char *a, size_t al, const char *b, size_t bl, const char *base)
{
    return al == bl && (al == 0 || a - base == b - base);
}

/* The fast path's reading of buf[0..n) against libhttp-parser's alone. */
static void compare_slow(const funcd_http1 *m, unsigned mode, const char *buf, size_t size,
                         ssize_t n)
{
    funcd_http1 s;
    funcd_http1_field sf[16];
    start(&s, mode, sf, 16);
    check(funcd_http1_head_slow(&s, buf, size) == n, "the fast path's head length differs");
    check(s.status == m->status && s.content_length == m->content_length &&
              s.chunked == m->chunked && s.has_body == m->has_body &&
              s.until_close == m->until_close && s.keep_alive == m->keep_alive &&
              s.done == m->done && s.nfields == m->nfields,
          "the fast path reads the head otherwise");
    check(same_span(s.reason, s.reason_len, m->reason, m->reason_len, buf) &&
              same_span(s.target, s.target_len, m->target, m->target_len, buf) &&
              s.method_len == m->method_len && memcmp(s.method, m->method, s.method_len) == 0,
          "the fast path reads the first line otherwise");
    for (size_t i = 0; i < m->nfields; i++)
        check(same_span(s.fields[i].name, s.fields[i].name_len, m->fields[i].name,
                        m->fields[i].name_len, buf) &&
                  same_span(s.fields[i].value, s.fields[i].value_len, m->fields[i].value,
                            m->fields[i].value_len, buf),
              "the fast path reads a field otherwise");
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
        char *copy = NULL;
        funcd_http1 s;
        funcd_http1_field sf[16];
        if (m.fast) {
            compare_slow(&m, mode, buf, size, n);
            copy = malloc(size);
            if (copy) {
                memcpy(copy, buf, size);
                start(&s, mode, sf, 16);
                funcd_http1_head_slow(&s, copy, size);
            }
        }
        m.fields = NULL;
        m.nfields = m.max_fields = 0;
        int ended, slow_ended;
        size_t got = read_body(&m, buf, size, (size_t)n, step, &ended);
        if (copy) {
            s.fields = NULL;
            s.nfields = s.max_fields = 0;
            size_t slow_got = read_body(&s, copy, size, (size_t)n, step, &slow_ended);
            check(got == slow_got && ended == slow_ended &&
                      memcmp(buf + n, copy + n, got) == 0,
                  "the fast path reads the body otherwise");
            free(copy);
        }
    }
    free(buf);
    return 0;
}
