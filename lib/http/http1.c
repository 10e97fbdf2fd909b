/*
 * HTTP/1.x heads and bodies through libhttp-parser (http1.h). The library
 * streams: it calls back with spans of the bytes it is given. A head is
 * parsed in one call over all of its bytes, so each field's name and value
 * arrive as one span each and can point into the caller's buffer; the
 * parser pauses at the head's end, so the caller learns the head's length
 * and decides what to do before any body byte is taken.
 */
#include "http/http1.h"

#include <string.h>
#include <strings.h>

enum { CB_NONE, CB_FIELD, CB_VALUE };

static funcd_http1 *msg(http_parser *p)
{
    return p->data;
}

static int fail(funcd_http1 *m, const char *why)
{
    m->error = why;
    return 1; /* the parser stops with an HPE_CB_* error */
}

static int on_status(http_parser *p, const char *at, size_t len)
{
    funcd_http1 *m = msg(p);
    m->reason = at;
    m->reason_len = len;
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
    funcd_http1 *m = msg(p);
    m->target = at;
    m->target_len = len;
    return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len)
{
    funcd_http1 *m = msg(p);
    if (m->in_body)
        return 0; /* a chunked body's trailer: not part of the head */
    if (m->last_cb == CB_FIELD)
        return fail(m, "a header field name is cut"); /* cannot happen in one pass */
    if (m->nfields == m->max_fields)
        return fail(m, "the head has too many header fields");
    m->fields[m->nfields++] = (funcd_http1_field){at, len, "", 0};
    m->last_cb = CB_FIELD;
    return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
    funcd_http1 *m = msg(p);
    if (m->in_body)
        return 0;
    if (m->last_cb != CB_FIELD) /* obsolete line folding (RFC 9112, 5.2) */
        return fail(m, "a header field's value is folded over lines");
    m->fields[m->nfields - 1].value = at;
    m->fields[m->nfields - 1].value_len = len;
    m->last_cb = CB_VALUE;
    return 0;
}

/* What a complete head says about the body and the connection, however
 * it was read. */
static int decide(funcd_http1 *m, int response, int minor, int chunked, uint64_t length,
                  int conn_close, int conn_keep_alive, int upgrade)
{
    m->minor_version = minor;
    m->chunked = chunked;
    m->content_length = chunked ? FUNCD_HTTP1_NO_LENGTH : length;
    int no_body = response && (m->head_request || m->status / 100 == 1 || m->status == 204 ||
                               m->status == 304);
    m->until_close = response && !no_body && !m->chunked &&
                     m->content_length == FUNCD_HTTP1_NO_LENGTH;
    m->has_body = !no_body && (m->chunked || m->until_close ||
                               (m->content_length != FUNCD_HTTP1_NO_LENGTH &&
                                m->content_length > 0));
    int persistent = minor >= 1 ? !conn_close : conn_keep_alive;
    m->keep_alive = persistent && !m->until_close && !upgrade;
    return no_body;
}

static int on_headers_complete(http_parser *p)
{
    funcd_http1 *m = msg(p);
    int response = p->type == HTTP_RESPONSE;
    m->status = response ? (int)p->status_code : 0;
    if (!response) {
        m->method = http_method_str((enum http_method)p->method);
        m->method_len = strlen(m->method);
    }
    int minor = p->http_major == 1 ? p->http_minor : 0; /* (HTTP/0.9 and 2+: not persistent) */
    int no_body = decide(m, response, minor, (p->flags & F_CHUNKED) != 0,
                         (p->flags & F_CONTENTLENGTH) ? p->content_length : FUNCD_HTTP1_NO_LENGTH,
                         (p->flags & F_CONNECTION_CLOSE) != 0,
                         (p->flags & F_CONNECTION_KEEP_ALIVE) != 0, p->upgrade);
    m->minor_version = p->http_minor;
    http_parser_pause(p, 1); /* the caller looks at the head first */
    return no_body; /* 1: the parser expects no body */
}

/* Body bytes move to the front of the caller's buffer (chunk framing out). */
static int on_body(http_parser *p, const char *at, size_t len)
{
    funcd_http1 *m = msg(p);
    if (m->out) {
        if (at != m->out + m->out_len)
            memmove(m->out + m->out_len, at, len);
        m->out_len += len;
    }
    return 0;
}

static int on_message_complete(http_parser *p)
{
    funcd_http1 *m = msg(p);
    m->done = 1;
    http_parser_pause(p, 1); /* bytes after it are not this message's */
    return 0;
}

static const http_parser_settings settings = {
    .on_status = on_status,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

static void init(funcd_http1 *m, enum http_parser_type type, int head_request,
                 funcd_http1_field *fields, size_t max_fields)
{
    memset(m, 0, sizeof(*m));
    m->fields = fields;
    m->max_fields = max_fields;
    m->head_request = head_request;
    m->content_length = FUNCD_HTTP1_NO_LENGTH;
    m->reason = m->method = m->target = "";
    m->parser.type = type; /* funcd_http1_head() starts the parser */
}

void funcd_http1_init_response(funcd_http1 *m, int head_request, funcd_http1_field *fields,
                               size_t max_fields)
{
    init(m, HTTP_RESPONSE, head_request, fields, max_fields);
}

void funcd_http1_init_request(funcd_http1 *m, funcd_http1_field *fields, size_t max_fields)
{
    init(m, HTTP_REQUEST, 0, fields, max_fields);
}

static ssize_t parser_error(funcd_http1 *m)
{
    enum http_errno e = HTTP_PARSER_ERRNO(&m->parser);
    if (e < HPE_CB_message_begin || e > HPE_CB_chunk_complete || !m->error)
        m->error = http_errno_description(e);
    return -1;
}

ssize_t funcd_http1_head_slow(funcd_http1 *m, const char *buf, size_t len)
{
    enum http_parser_type type = (enum http_parser_type)m->parser.type;
    init(m, type, m->head_request, m->fields, m->max_fields);
    http_parser_init(&m->parser, type);
    m->parser.data = m;
    size_t n = http_parser_execute(&m->parser, &settings, buf, len);
    enum http_errno e = HTTP_PARSER_ERRNO(&m->parser);
    if (e == HPE_OK)
        return 0; /* all taken, the head is not complete */
    if (e != HPE_PAUSED)
        return parser_error(m);
    /* Paused at the head's end, before its last byte (the LF): take it,
     * which completes a message without a body. */
    http_parser_pause(&m->parser, 0);
    if (n >= len) {
        m->error = "the parser stopped outside a head"; /* not with libhttp-parser 2.9 */
        return -1;
    }
    size_t k = http_parser_execute(&m->parser, &settings, buf + n, 1);
    e = HTTP_PARSER_ERRNO(&m->parser);
    if (e != HPE_OK && e != HPE_PAUSED)
        return parser_error(m);
    return (ssize_t)(n + k);
}

/* ---- the fast path ----------------------------------------------------------
 * libhttp-parser reads a byte at a time, about 20 instructions a byte: on
 * the gateway's warm path its two heads per request (the client's, looked
 * at before h2o, and the worker's answer) were a quarter of the
 * instructions a request cost. Nearly every head is plain: a request or
 * status line, a few "Name: value" lines ended by CRLF, a Content-Length
 * or no body. Those are read here a line at a time with memchr. Anything
 * else goes to libhttp-parser, which decides as it always did: a head not
 * complete yet, a bare LF, Transfer-Encoding, Upgrade, a Connection field
 * other than one "close" or "keep-alive", a second Content-Length, a byte
 * outside the plain sets below, more fields than the caller has room for,
 * an answer whose body runs until the connection ends. The fuzz target
 * (fuzz/fuzz_http1.c) checks that both read every head the fast path takes
 * alike. */

/* A field name's bytes: letters, digits and '-' (the other token bytes
 * are left to libhttp-parser). */
static const unsigned char name_byte[256] = {
    ['0' ... '9'] = 1, ['A' ... 'Z'] = 1, ['a' ... 'z'] = 1, ['-'] = 1,
};

/* An origin-form target's bytes: RFC 3986's unreserved and sub-delims,
 * ':', '@', '/', '?' and '%'. */
static const unsigned char target_byte[256] = {
    ['0' ... '9'] = 1, ['A' ... 'Z'] = 1, ['a' ... 'z'] = 1, ['-'] = 1, ['.'] = 1, ['_'] = 1,
    ['~'] = 1, ['!'] = 1, ['$'] = 1, ['&'] = 1, ['\''] = 1, ['('] = 1, [')'] = 1, ['*'] = 1,
    ['+'] = 1, [','] = 1, [';'] = 1, ['='] = 1, [':'] = 1, ['@'] = 1, ['/'] = 1, ['?'] = 1,
    ['%'] = 1,
};

/* The first byte at or after p that is not a value's or reason's byte
 * (visible ASCII, space, or above 0x7f): a control byte, CR included, or
 * end. Eight bytes at a time: a word with no byte below 0x20 and none
 * equal to 0x7f is skipped whole. */
static const char *text_end(const char *p, const char *end)
{
    const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
    while (end - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        uint64_t del = w ^ (ones * 0x7f);
        if (((w - ones * 0x20) & ~w & highs) | ((del - ones) & ~del & highs))
            break;
        p += 8;
    }
    while (p < end && (unsigned char)*p >= 0x20 && *p != 0x7f)
        p++;
    return p;
}

static int name_is(const char *name, size_t len, const char *lower, size_t lower_len)
{
    return len == lower_len && strncasecmp(name, lower, len) == 0;
}

#define NAME_IS(n, l, lit) name_is(n, l, lit, sizeof(lit) - 1)

/* What the fast path makes of a field's name. */
enum { PLAIN, CONTENT_LENGTH, CONNECTION, SPECIAL };

static int prefix_is(const char *name, size_t len, const char *lower, size_t lower_len)
{
    return len >= lower_len && strncasecmp(name, lower, lower_len) == 0;
}

#define PREFIX_IS(n, l, lit) prefix_is(n, l, lit, sizeof(lit) - 1)

/* SPECIAL: a field libhttp-parser gives a meaning the fast path leaves to
 * it (Transfer-Encoding, Upgrade, Proxy-Connection), or one whose name only
 * begins like such a field's or like Content-Length or Connection
 * (libhttp-parser's matching of names has been seen to take
 * "Transfer-Encoding-" for Transfer-Encoding). */
static int name_kind(const char *name, size_t len)
{
    switch (name[0] | 0x20) {
    case 'c':
        if (PREFIX_IS(name, len, "content-length"))
            return len == 14 ? CONTENT_LENGTH : SPECIAL;
        if (PREFIX_IS(name, len, "connection"))
            return len == 10 ? CONNECTION : SPECIAL;
        return PLAIN;
    case 't':
        return PREFIX_IS(name, len, "transfer-encoding") ? SPECIAL : PLAIN;
    case 'u':
        return PREFIX_IS(name, len, "upgrade") ? SPECIAL : PLAIN;
    case 'p':
        return PREFIX_IS(name, len, "proxy-connection") ? SPECIAL : PLAIN;
    default:
        return PLAIN;
    }
}

static const char *const methods[] = {"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"};

/* The request line "METHOD /target HTTP/1.x" of line[0..len): 1 when plain. */
static int fast_request_line(funcd_http1 *m, const char *line, size_t len, int *minor)
{
    const char *sp = memchr(line, ' ', len);
    if (!sp)
        return 0;
    size_t ml = (size_t)(sp - line);
    for (size_t i = 0;; i++) {
        if (i == sizeof(methods) / sizeof(methods[0]))
            return 0;
        if (strlen(methods[i]) == ml && memcmp(methods[i], line, ml) == 0) {
            m->method = methods[i];
            m->method_len = ml;
            break;
        }
    }
    const char *t = sp + 1, *end = line + len;
    if (end - t < 10 || *t != '/' || memcmp(end - 9, " HTTP/1.", 8) != 0 ||
        (end[-1] != '0' && end[-1] != '1'))
        return 0;
    for (const char *c = t; c < end - 9; c++)
        if (!target_byte[(unsigned char)*c])
            return 0;
    m->target = t;
    m->target_len = (size_t)(end - 9 - t);
    *minor = end[-1] - '0';
    return 1;
}

/* The status line "HTTP/1.x NNN reason" of line[0..len): 1 when plain. */
static int fast_status_line(funcd_http1 *m, const char *line, size_t len, int *minor)
{
    if (len < 13 || memcmp(line, "HTTP/1.", 7) != 0 || (line[7] != '0' && line[7] != '1') ||
        line[8] != ' ' || line[9] < '1' || line[9] > '9' || line[10] < '0' || line[10] > '9' ||
        line[11] < '0' || line[11] > '9' || line[12] != ' ')
        return 0;
    if (text_end(line + 13, line + len) != line + len)
        return 0;
    *minor = line[7] - '0';
    m->status = (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
    m->reason = line + 13;
    m->reason_len = len - 13;
    return 1;
}

/* The head at buf[0..len) when plain and complete: its length; 0: not for
 * the fast path (libhttp-parser reads it). */
static size_t fast_head(funcd_http1 *m, const char *buf, size_t len)
{
    int response = m->parser.type == HTTP_RESPONSE;
    if (len > HTTP_MAX_HEADER_SIZE / 2)
        len = HTTP_MAX_HEADER_SIZE / 2; /* a bigger head, or near libhttp-parser's limit: its call */
    const char *p = buf, *end = buf + len;
    const char *cr = memchr(p, '\r', len);
    if (!cr || cr + 1 >= end || cr[1] != '\n' || memchr(p, '\n', (size_t)(cr - p)))
        return 0;
    int minor;
    if (!(response ? fast_status_line(m, p, (size_t)(cr - p), &minor)
                   : fast_request_line(m, p, (size_t)(cr - p), &minor)))
        return 0;
    uint64_t length = FUNCD_HTTP1_NO_LENGTH;
    int conn_close = 0, conn_keep_alive = 0, conns = 0;
    for (p = cr + 2;;) {
        if (end - p >= 2 && p[0] == '\r' && p[1] == '\n')
            break; /* the empty line: the head's end */
        const char *name = p, *c = p;
        while (c < end && name_byte[(unsigned char)*c])
            c++;
        if (c == name || c == end || *c != ':')
            return 0;
        size_t nl = (size_t)(c - name);
        for (c++; c < end && *c == ' '; c++)
            ;
        const char *value = c;
        cr = text_end(c, end);
        if (end - cr < 2 || cr[0] != '\r' || cr[1] != '\n')
            return 0; /* not complete (or too long), a bare LF or a control byte */
        size_t vl = (size_t)(cr - value);
        if (vl && value[vl - 1] == ' ')
            return 0; /* trailing whitespace: libhttp-parser's call */
        int kind = name_kind(name, nl);
        if (m->nfields == m->max_fields || kind == SPECIAL)
            return 0;
        if (kind == CONTENT_LENGTH) {
            if (length != FUNCD_HTTP1_NO_LENGTH || vl == 0 || vl > 18)
                return 0;
            length = 0;
            for (size_t i = 0; i < vl; i++) {
                if (value[i] < '0' || value[i] > '9')
                    return 0;
                length = length * 10 + (uint64_t)(value[i] - '0');
            }
        } else if (kind == CONNECTION) {
            if (conns++)
                return 0;
            conn_close = NAME_IS(value, vl, "close");
            conn_keep_alive = NAME_IS(value, vl, "keep-alive");
            if (!conn_close && !conn_keep_alive)
                return 0;
        }
        m->fields[m->nfields++] = (funcd_http1_field){name, nl, value, vl};
        p = cr + 2;
    }
    int no_body = decide(m, response, minor, 0, length, conn_close, conn_keep_alive, 0);
    if (m->until_close)
        return 0; /* read until the connection ends: libhttp-parser's */
    m->fast = 1;
    m->left = no_body || length == FUNCD_HTTP1_NO_LENGTH ? 0 : length;
    m->done = m->left == 0;
    return (size_t)(p + 2 - buf);
}

ssize_t funcd_http1_head(funcd_http1 *m, const char *buf, size_t len)
{
    enum http_parser_type type = (enum http_parser_type)m->parser.type;
    init(m, type, m->head_request, m->fields, m->max_fields);
    size_t n = fast_head(m, buf, len);
    if (n)
        return (ssize_t)n;
    init(m, type, m->head_request, m->fields, m->max_fields);
    return funcd_http1_head_slow(m, buf, len);
}

ssize_t funcd_http1_body(funcd_http1 *m, char *buf, size_t len, size_t *out)
{
    *out = 0;
    if (m->done || len == 0)
        return 0;
    if (m->fast) { /* a length, and the body's bytes are already at the front */
        size_t take = len < m->left ? len : (size_t)m->left;
        m->left -= take;
        m->done = m->left == 0;
        *out = take;
        return (ssize_t)take;
    }
    m->in_body = 1; /* from here on, header fields are a chunked body's trailer */
    m->out = buf;
    m->out_len = 0;
    size_t n = http_parser_execute(&m->parser, &settings, buf, len);
    enum http_errno e = HTTP_PARSER_ERRNO(&m->parser);
    if (e != HPE_OK && !(e == HPE_PAUSED && m->done))
        return parser_error(m);
    *out = m->out_len;
    m->out = NULL;
    return (ssize_t)n;
}

int funcd_http1_eof(funcd_http1 *m)
{
    if (!m->done && m->until_close)
        m->done = 1;
    return m->done;
}

int funcd_http1_name_is(const funcd_http1_field *f, const char *lower, size_t lower_len)
{
    return f->name_len == lower_len && strncasecmp(f->name, lower, lower_len) == 0;
}
