/*
 * HTTP/1.x messages through lib/http/http1.c (libhttp-parser): heads read
 * in pieces, bodies by length, chunked or until the connection ends, and
 * what is refused (by the fast path's reading as by libhttp-parser's: the
 * fuzz corpus's replay compares the two on every head the fast path takes).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "http/http1.h"

#define MAXF 8

/* A message's bytes in a writable copy (bodies decode in place). */
static char *dup_of(const char *s, size_t *len)
{
    *len = strlen(s);
    char *d = malloc(*len + 1);
    memcpy(d, s, *len + 1);
    return d;
}

static const char *field(const funcd_http1 *m, const char *name, char *out, size_t cap)
{
    for (size_t i = 0; i < m->nfields; i++)
        if (funcd_http1_name_is(&m->fields[i], name, strlen(name))) {
            snprintf(out, cap, "%.*s", (int)m->fields[i].value_len, m->fields[i].value);
            return out;
        }
    return NULL;
}

TEST(response_head_fields_and_length)
{
    size_t len;
    char *buf = dup_of("HTTP/1.1 201 Created\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n"
                       "X-Empty:\r\n\r\nhello",
                       &len);
    funcd_http1_field f[MAXF];
    funcd_http1 m;
    funcd_http1_init_response(&m, 0, f, MAXF);
    /* Every prefix of the head is "more, please". */
    size_t head_len = strstr(buf, "\r\n\r\n") + 4 - buf;
    for (size_t cut = 0; cut < head_len; cut++)
        if (funcd_http1_head(&m, buf, cut) != 0) {
            free(buf);
            FAILF("a head cut at %zu is not incomplete", cut);
        }
    ssize_t n = funcd_http1_head(&m, buf, len);
    char v[64];
    int ok = n == (ssize_t)head_len && m.status == 201 && m.reason_len == 7 &&
             memcmp(m.reason, "Created", 7) == 0 && m.nfields == 3 && m.content_length == 5 &&
             m.has_body && !m.chunked && m.keep_alive && !m.until_close && !m.done &&
             field(&m, "content-type", v, sizeof(v)) && strcmp(v, "text/plain") == 0 &&
             field(&m, "x-empty", v, sizeof(v)) && v[0] == '\0';
    size_t out = 0;
    ssize_t took = ok ? funcd_http1_body(&m, buf + n, len - (size_t)n, &out) : -1;
    ok = ok && took == 5 && out == 5 && memcmp(buf + n, "hello", 5) == 0 && m.done;
    free(buf);
    CHECK(ok);
}

TEST(chunked_body_decodes_in_place_across_reads)
{
    size_t len;
    char *buf = dup_of("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                       "5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\nHTTP/1.1",
                       &len);
    funcd_http1_field f[MAXF];
    funcd_http1 m;
    funcd_http1_init_response(&m, 0, f, MAXF);
    ssize_t n = funcd_http1_head(&m, buf, len);
    if (n <= 0 || !m.chunked || m.content_length != FUNCD_HTTP1_NO_LENGTH || !m.keep_alive) {
        free(buf);
        FAILF("head: %zd", n);
    }
    m.fields = NULL; /* as callers do: the trailer is not a field */
    char body[64];
    size_t got = 0, at = (size_t)n, took_total = 0;
    /* Three bytes per read, the decoded bytes collected. */
    while (at < len && !m.done) {
        size_t step = len - at < 3 ? len - at : 3, out;
        ssize_t took = funcd_http1_body(&m, buf + at, step, &out);
        if (took < 0 || got + out > sizeof(body)) {
            free(buf);
            FAILF("body at %zu: %s", at, m.error ? m.error : "too long");
        }
        memcpy(body + got, buf + at, out);
        got += out;
        took_total += (size_t)took;
        at += step;
    }
    size_t rest = len - (size_t)n - took_total;
    free(buf);
    CHECK(m.done);
    CHECK_INT(got, 12);
    CHECK(memcmp(body, "hello, world", 12) == 0);
    CHECK_INT(rest, 8); /* "HTTP/1.1": the next message's, not taken */
}

TEST(how_bodies_end)
{
    funcd_http1_field f[MAXF];
    funcd_http1 m;
    /* No length, not chunked: until the connection ends; not kept alive. */
    const char *h1 = "HTTP/1.1 200 OK\r\n\r\nsome";
    funcd_http1_init_response(&m, 0, f, MAXF);
    ssize_t n = funcd_http1_head(&m, h1, strlen(h1));
    CHECK_INT(n, 19);
    CHECK(m.until_close && m.has_body && !m.keep_alive && !m.done);
    char b[8] = "some";
    size_t out;
    CHECK_INT(funcd_http1_body(&m, b, 4, &out), 4);
    CHECK_INT(out, 4);
    CHECK(!m.done);
    CHECK(funcd_http1_eof(&m));
    /* Cut short: a length not reached is not complete at the end. */
    const char *h2 = "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n";
    funcd_http1_init_response(&m, 0, f, MAXF);
    CHECK(funcd_http1_head(&m, h2, strlen(h2)) > 0);
    CHECK(!funcd_http1_eof(&m));
    /* 204, 304 and an answer to HEAD have no body, whatever they say. */
    static const char *const none[] = {"HTTP/1.1 204 No Content\r\n\r\n",
                                       "HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\n"};
    for (int i = 0; i < 2; i++) {
        funcd_http1_init_response(&m, 0, f, MAXF);
        CHECK_INT(funcd_http1_head(&m, none[i], strlen(none[i])), strlen(none[i]));
        CHECK(m.done && !m.has_body && m.keep_alive);
    }
    const char *h3 = "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n";
    funcd_http1_init_response(&m, 1, f, MAXF);
    CHECK_INT(funcd_http1_head(&m, h3, strlen(h3)), strlen(h3));
    CHECK(m.done && !m.has_body && m.keep_alive && m.content_length == 7);
    /* HTTP/1.0 keeps the connection only when asked; Connection: close ends it. */
    const char *h4 = "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n";
    funcd_http1_init_response(&m, 0, f, MAXF);
    CHECK(funcd_http1_head(&m, h4, strlen(h4)) > 0);
    CHECK(!m.keep_alive && m.done);
    const char *h5 = "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
    funcd_http1_init_response(&m, 0, f, MAXF);
    CHECK(funcd_http1_head(&m, h5, strlen(h5)) > 0);
    CHECK(!m.keep_alive);
}

TEST(request_heads)
{
    funcd_http1_field f[MAXF];
    funcd_http1 m;
    const char *r = "PUT /api/v1/x?y=1 HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer t\r\n"
                    "Content-Length: 3\r\n\r\nabc";
    funcd_http1_init_request(&m, f, MAXF);
    ssize_t n = funcd_http1_head(&m, r, strlen(r));
    CHECK_INT(n, strlen(r) - 3);
    CHECK(m.method_len == 3 && memcmp(m.method, "PUT", 3) == 0);
    CHECK(m.target_len == 13 && memcmp(m.target, "/api/v1/x?y=1", 13) == 0);
    CHECK(m.has_body && m.content_length == 3 && m.nfields == 3);
    const char *g = "GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
    funcd_http1_init_request(&m, f, MAXF);
    CHECK(funcd_http1_head(&m, g, strlen(g)) > 0);
    CHECK(!m.has_body && m.done);
}

TEST(bad_heads_are_refused_with_a_reason)
{
    static const char *const bad[] = {
        "HTTP/1.1 2x0 OK\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX: a\r\n  b\r\n\r\n",
        "HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", /* more than 2 fields */
        "SMTP 220 hello\r\n\r\n",
        /* Plain-looking heads the fast path must leave to libhttp-parser. */
        "HTTP/1.1 200 OK\r\nTransfer-Encoding-: chunked\r\nContent-Length: 1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
    };
    funcd_http1_field f[MAXF];
    funcd_http1 m;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        funcd_http1_init_response(&m, 0, f, i == 5 ? 2 : MAXF);
        ssize_t n = funcd_http1_head(&m, bad[i], strlen(bad[i]));
        if (n != -1 || !m.error || !*m.error)
            FAILF("head %zu: %zd (%s)", i, n, m.error ? m.error : "no reason");
    }
    /* A malformed chunk size. */
    char b[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
    funcd_http1_init_response(&m, 0, f, MAXF);
    ssize_t n = funcd_http1_head(&m, b, strlen(b));
    CHECK(n > 0);
    size_t out;
    CHECK_INT(funcd_http1_body(&m, b + n, strlen(b) - (size_t)n, &out), -1);
    CHECK(m.error != NULL);
}

/* Past half of libhttp-parser's head limit the fast path steps aside:
 * libhttp-parser takes a 50 KB head and refuses a 90 KB one, as before. */
TEST(big_heads_are_libhttp_parsers)
{
    static const size_t sizes[] = {50000, 90000};
    for (int i = 0; i < 2; i++) {
        size_t n = sizes[i];
        char *b = malloc(n + 64);
        int at = snprintf(b, 64, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Big: ");
        memset(b + at, 'a', n);
        memcpy(b + at + n, "\r\n\r\n", 5);
        funcd_http1_field f[MAXF];
        funcd_http1 m;
        funcd_http1_init_response(&m, 0, f, MAXF);
        ssize_t got = funcd_http1_head(&m, b, strlen(b));
        size_t want = strlen(b);
        free(b);
        if (i == 0)
            CHECK_INT(got, want);
        else
            CHECK_INT(got, -1);
    }
}

int main(void)
{
    RUN(response_head_fields_and_length);
    RUN(chunked_body_decodes_in_place_across_reads);
    RUN(how_bodies_end);
    RUN(request_heads);
    RUN(bad_heads_are_refused_with_a_reason);
    RUN(big_heads_are_libhttp_parsers);
    return HARNESS_END();
}
