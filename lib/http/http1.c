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

static int on_headers_complete(http_parser *p)
{
    funcd_http1 *m = msg(p);
    int response = p->type == HTTP_RESPONSE;
    m->status = response ? (int)p->status_code : 0;
    if (!response) {
        m->method = http_method_str((enum http_method)p->method);
        m->method_len = strlen(m->method);
    }
    m->minor_version = p->http_minor;
    m->chunked = (p->flags & F_CHUNKED) != 0;
    m->content_length = m->chunked || !(p->flags & F_CONTENTLENGTH) ? FUNCD_HTTP1_NO_LENGTH
                                                                   : p->content_length;
    int no_body = response && (m->head_request || m->status / 100 == 1 || m->status == 204 ||
                               m->status == 304);
    m->until_close = response && !no_body && !m->chunked &&
                     m->content_length == FUNCD_HTTP1_NO_LENGTH;
    m->has_body = !no_body && (m->chunked || m->until_close ||
                               (m->content_length != FUNCD_HTTP1_NO_LENGTH &&
                                m->content_length > 0));
    int persistent = p->http_major == 1 && p->http_minor >= 1
                         ? !(p->flags & F_CONNECTION_CLOSE)
                         : (p->flags & F_CONNECTION_KEEP_ALIVE) != 0;
    m->keep_alive = persistent && !m->until_close && !p->upgrade;
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

ssize_t funcd_http1_head(funcd_http1 *m, const char *buf, size_t len)
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

ssize_t funcd_http1_body(funcd_http1 *m, char *buf, size_t len, size_t *out)
{
    *out = 0;
    if (m->done || len == 0)
        return 0;
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
