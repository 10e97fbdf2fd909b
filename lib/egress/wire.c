/* Parsing what workers send the egress gateway (wire.h). */
#include <ctype.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "egress/wire.h"

static int fail(char *why, size_t why_len, int status, const char *msg)
{
    snprintf(why, why_len, "%s", msg);
    return status;
}

/* host[:port] or [v6][:port] into req->host and req->port (default `dflt`). */
static int parse_authority(const char *s, size_t n, uint16_t dflt, funcd_egress_request *req)
{
    const char *host = s;
    size_t hl;
    const char *rest;
    if (n && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (!close)
            return -1;
        host = s + 1;
        hl = (size_t)(close - host);
        rest = close + 1;
    } else {
        const char *colon = memchr(s, ':', n);
        hl = colon ? (size_t)(colon - s) : n;
        rest = s + hl;
    }
    size_t rl = n - (size_t)(rest - s);
    if (hl == 0 || hl > FUNCD_EGRESS_MAX_HOST)
        return -1;
    for (size_t i = 0; i < hl; i++) {
        unsigned char ch = (unsigned char)host[i];
        if (!(isalnum(ch) || ch == '-' || ch == '.' || ch == '_' || ch == ':'))
            return -1;
        req->host[i] = (char)tolower(ch);
    }
    req->host[hl] = '\0';
    if (rl == 0) {
        req->port = dflt;
    } else {
        if (rest[0] != ':' || rl < 2 || rl > 6)
            return -1;
        unsigned long port = 0;
        for (size_t i = 1; i < rl; i++) {
            if (!isdigit((unsigned char)rest[i]))
                return -1;
            port = port * 10 + (unsigned long)(rest[i] - '0');
        }
        if (port == 0 || port > 65535)
            return -1;
        req->port = (uint16_t)port;
    }
    return req->port ? 0 : -1;
}

static int is_token(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("!#$%&'*+-.^_`|~", s[i]))
            return 0;
    return 1;
}

/* Headers the proxy consumes or replaces rather than forwards. */
static int hop_header(const char *name, size_t n)
{
    static const char *const hop[] = {"proxy-connection", "proxy-authorization", "connection",
                                      "keep-alive", NULL};
    for (size_t i = 0; hop[i]; i++)
        if (strlen(hop[i]) == n && strncasecmp(hop[i], name, n) == 0)
            return 1;
    return 0;
}

int funcd_egress_parse_request(const char *data, size_t len, funcd_egress_request *req,
                               char *why, size_t why_len)
{
    req->connect = 0;
    req->host[0] = '\0';
    req->port = 0;
    funcd_buf_reset(&req->head);
    if (len > FUNCD_EGRESS_MAX_HEAD)
        return fail(why, why_len, 431, "request head too large");
    const char *eol = NULL;
    for (size_t i = 0; i + 1 < len; i++)
        if (data[i] == '\r' && data[i + 1] == '\n') {
            eol = data + i;
            break;
        }
    if (!eol)
        return fail(why, why_len, 400, "no request line");
    size_t ll = (size_t)(eol - data);
    const char *sp1 = memchr(data, ' ', ll);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', ll - (size_t)(sp1 + 1 - data)) : NULL;
    if (!sp1 || !sp2)
        return fail(why, why_len, 400, "malformed request line");
    size_t ml = (size_t)(sp1 - data);
    const char *target = sp1 + 1;
    size_t tl = (size_t)(sp2 - target);
    const char *version = sp2 + 1;
    size_t vl = ll - (size_t)(version - data);
    if (!is_token(data, ml) || tl == 0 || memchr(target, ' ', tl))
        return fail(why, why_len, 400, "malformed request line");
    if (!(vl == 8 && (memcmp(version, "HTTP/1.1", 8) == 0 || memcmp(version, "HTTP/1.0", 8) == 0)))
        return fail(why, why_len, 400, "only HTTP/1.0 and HTTP/1.1 requests");
    if (ml == 7 && memcmp(data, "CONNECT", 7) == 0) {
        req->connect = 1;
        if (parse_authority(target, tl, 0, req) < 0)
            return fail(why, why_len, 400, "CONNECT needs host:port");
        return 0;
    }
    static const char http[] = "http://";
    if (tl < sizeof(http) - 1 || strncasecmp(target, http, sizeof(http) - 1) != 0) {
        if (tl >= 8 && strncasecmp(target, "https://", 8) == 0)
            return fail(why, why_len, 501, "https:// goes through CONNECT");
        if (target[0] == '/')
            return fail(why, why_len, 400,
                        "this is funcd's egress proxy: send absolute-URI requests "
                        "(http://host/path) or CONNECT");
        return fail(why, why_len, 501, "only http:// URLs and CONNECT");
    }
    const char *auth = target + sizeof(http) - 1;
    size_t al = tl - (sizeof(http) - 1);
    const char *path = memchr(auth, '/', al);
    const char *q = memchr(auth, '?', al);
    if (q && (!path || q < path))
        path = q;
    size_t authl = path ? (size_t)(path - auth) : al;
    if (memchr(auth, '@', authl))
        return fail(why, why_len, 400, "credentials in the URL are not carried");
    if (parse_authority(auth, authl, 80, req) < 0)
        return fail(why, why_len, 400, "malformed host in the URL");
    /* The head for the origin: origin-form, our own Connection header. */
    funcd_buf *h = &req->head;
    funcd_buf_append(h, data, ml);
    funcd_buf_puts(h, " ");
    if (path && path[0] == '/')
        funcd_buf_append(h, path, al - authl);
    else if (path) {
        funcd_buf_puts(h, "/");
        funcd_buf_append(h, path, al - authl);
    } else
        funcd_buf_puts(h, "/");
    funcd_buf_puts(h, " ");
    funcd_buf_append(h, version, vl);
    funcd_buf_puts(h, "\r\n");
    const char *p = eol + 2, *end = data + len;
    for (;;) {
        const char *e = NULL;
        for (const char *x = p; x + 1 < end; x++)
            if (x[0] == '\r' && x[1] == '\n') {
                e = x;
                break;
            }
        if (!e) {
            funcd_buf_reset(h);
            return fail(why, why_len, 400, "unterminated request head");
        }
        if (e == p)
            break;
        const char *colon = memchr(p, ':', (size_t)(e - p));
        if (!colon || !is_token(p, (size_t)(colon - p))) {
            funcd_buf_reset(h);
            return fail(why, why_len, 400, "malformed header line");
        }
        size_t nl = (size_t)(colon - p);
        /* The origin hears the host the policy checked, whatever the
         * worker's own Host says (RFC 9112 3.2.2: the proxy replaces it). */
        int is_host = nl == 4 && strncasecmp(p, "host", 4) == 0;
        if (!is_host && !hop_header(p, nl)) {
            funcd_buf_append(h, p, (size_t)(e - p));
            funcd_buf_puts(h, "\r\n");
        }
        p = e + 2;
    }
    int v6 = strchr(req->host, ':') != NULL; /* an IPv6 literal goes in brackets */
    funcd_buf_printf(h, "Host: %s%s%s", v6 ? "[" : "", req->host, v6 ? "]" : "");
    if (req->port != 80)
        funcd_buf_printf(h, ":%u", req->port);
    funcd_buf_puts(h, "\r\n");
    if (funcd_buf_puts(h, "Connection: close\r\n\r\n") < 0) {
        funcd_buf_reset(h);
        return fail(why, why_len, 400, "out of memory");
    }
    return 0;
}

int funcd_egress_parse_question(const uint8_t *msg, size_t len, funcd_egress_question *q)
{
    memset(q, 0, sizeof(*q));
    if (len < 12)
        return -1;
    q->id = (uint16_t)(msg[0] << 8 | msg[1]);
    unsigned qr = msg[2] >> 7, opcode = (msg[2] >> 3) & 0xf;
    unsigned qd = (unsigned)(msg[4] << 8 | msg[5]);
    if (qr || opcode != 0 || qd != 1)
        return -1;
    size_t off = 12, nl = 0;
    for (;;) {
        if (off >= len)
            return -1;
        unsigned ll = msg[off++];
        if (ll == 0)
            break;
        if (ll > 63 || off + ll > len || nl + ll + 1 > FUNCD_EGRESS_MAX_HOST + 1)
            return -1; /* compression pointers (0xc0) have no place in a question */
        if (nl)
            q->name[nl++] = '.';
        for (unsigned i = 0; i < ll; i++) {
            unsigned char ch = msg[off + i];
            if (ch == '.' || ch == 0)
                return -1;
            q->name[nl++] = (char)tolower(ch);
        }
        off += ll;
    }
    q->name[nl] = '\0';
    if (off + 4 > len)
        return -1;
    q->qtype = (uint16_t)(msg[off] << 8 | msg[off + 1]);
    q->qclass = (uint16_t)(msg[off + 2] << 8 | msg[off + 3]);
    q->end = off + 4;
    return 0;
}

size_t funcd_egress_dns_error(const uint8_t *msg, size_t len, const funcd_egress_question *q,
                              int rcode, uint8_t *out, size_t cap)
{
    size_t n = q && q->end ? q->end : 12;
    if (len < 12 || n > len || n > cap)
        return 0;
    memcpy(out, msg, n);
    out[2] = (uint8_t)(0x80 | (msg[2] & 0x79)); /* QR, the opcode and RD kept */
    out[3] = (uint8_t)(0x80 | (rcode & 0xf));   /* RA */
    out[4] = 0;
    out[5] = q && q->end ? 1 : 0;
    memset(out + 6, 0, 6);
    return n;
}

size_t funcd_egress_dns_query(const char *name, uint16_t qtype, uint16_t id, uint8_t *out,
                              size_t cap)
{
    size_t nl = strlen(name);
    if (nl == 0 || nl > FUNCD_EGRESS_MAX_HOST || cap < 12 + nl + 2 + 4)
        return 0;
    memset(out, 0, 12);
    out[0] = (uint8_t)(id >> 8);
    out[1] = (uint8_t)id;
    out[2] = 0x01; /* RD */
    out[5] = 1;
    size_t off = 12;
    for (const char *p = name; *p;) {
        const char *dot = strchr(p, '.');
        size_t ll = dot ? (size_t)(dot - p) : strlen(p);
        if (ll == 0 || ll > 63)
            return 0;
        out[off++] = (uint8_t)ll;
        memcpy(out + off, p, ll);
        off += ll;
        p += ll;
        if (*p == '.')
            p++;
    }
    out[off++] = 0;
    out[off++] = (uint8_t)(qtype >> 8);
    out[off++] = (uint8_t)qtype;
    out[off++] = 0;
    out[off++] = 1; /* IN */
    return off;
}

/* The offset after the (possibly compressed) name at `off`, or 0. */
static size_t skip_name(const uint8_t *msg, size_t len, size_t off)
{
    for (unsigned labels = 0; labels < 128; labels++) {
        if (off >= len)
            return 0;
        unsigned ll = msg[off];
        if (ll == 0)
            return off + 1;
        if ((ll & 0xc0) == 0xc0)
            return off + 2 <= len ? off + 2 : 0; /* a pointer ends the name */
        if (ll & 0xc0)
            return 0;
        off += 1 + ll;
    }
    return 0;
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Walks the records after the question: for each, `fn` gets its section
 * (0 answer, 1 authority, 2 additional) and the offset of its type. 0, or
 * -1 when the message is malformed. */
typedef void (*rr_fn)(const uint8_t *msg, size_t rr, unsigned section, void *arg);

static int walk_records(const uint8_t *msg, size_t len, size_t off, rr_fn fn, void *arg)
{
    unsigned counts[3] = {(unsigned)(msg[6] << 8 | msg[7]), (unsigned)(msg[8] << 8 | msg[9]),
                          (unsigned)(msg[10] << 8 | msg[11])};
    for (unsigned s = 0; s < 3; s++)
        for (unsigned i = 0; i < counts[s]; i++) {
            off = skip_name(msg, len, off);
            if (!off || off + 10 > len)
                return -1;
            size_t rdlen = (size_t)(msg[off + 8] << 8 | msg[off + 9]);
            if (off + 10 + rdlen > len)
                return -1;
            fn(msg, off, s, arg);
            off += 10 + rdlen;
        }
    return 0;
}

typedef struct answer_walk {
    funcd_egress_answer *a;
    int have_ttl, have_soa;
    uint32_t soa_ttl;
} answer_walk;

static void answer_rr(const uint8_t *msg, size_t rr, unsigned section, void *arg)
{
    answer_walk *w = arg;
    funcd_egress_answer *a = w->a;
    unsigned type = (unsigned)(msg[rr] << 8 | msg[rr + 1]);
    unsigned klass = (unsigned)(msg[rr + 2] << 8 | msg[rr + 3]);
    uint32_t ttl = get32(msg + rr + 4);
    size_t rdlen = (size_t)(msg[rr + 8] << 8 | msg[rr + 9]);
    const uint8_t *rd = msg + rr + 10;
    if (section == 0) {
        if (!w->have_ttl || ttl < a->ttl)
            a->ttl = ttl;
        w->have_ttl = 1;
        int family = type == 1 && rdlen == 4 ? AF_INET : type == 28 && rdlen == 16 ? AF_INET6 : 0;
        /* An IPv4-mapped AAAA (::ffff:a.b.c.d) is the IPv4 address: a socket
         * connects to that, so it is judged as that. */
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (family == AF_INET6 && memcmp(rd, mapped, 12) == 0) {
            family = AF_INET;
            rd += 12;
            rdlen = 4;
        }
        if (family && klass == 1 && a->n_addrs < FUNCD_EGRESS_MAX_ADDRS) {
            a->addrs[a->n_addrs].family = family;
            memset(a->addrs[a->n_addrs].addr, 0, 16);
            memcpy(a->addrs[a->n_addrs].addr, rd, rdlen);
            a->n_addrs++;
        }
    } else if (section == 1 && type == 6 && rdlen >= 22 && !w->have_soa) {
        uint32_t minimum = get32(rd + rdlen - 4); /* the SOA's last field */
        w->soa_ttl = ttl < minimum ? ttl : minimum;
        w->have_soa = 1;
    }
}

int funcd_egress_parse_answer(const uint8_t *msg, size_t len, const funcd_egress_question *q,
                              funcd_egress_answer *a)
{
    memset(a, 0, sizeof(*a));
    if (len < 12 || !(msg[2] & 0x80) || (msg[0] << 8 | msg[1]) != q->id ||
        (msg[4] << 8 | msg[5]) != 1)
        return -1;
    /* the question echoed: the same name (any case), type and class */
    size_t off = 12, nl = 0;
    for (;;) {
        if (off >= len)
            return -1;
        unsigned ll = msg[off++];
        if (ll == 0)
            break;
        if (ll > 63 || off + ll > len)
            return -1;
        if (nl)
            if (q->name[nl++] != '.')
                return -1;
        for (unsigned i = 0; i < ll; i++)
            if (nl >= sizeof(q->name) - 1 || tolower(msg[off + i]) != q->name[nl++])
                return -1;
        off += ll;
    }
    if (q->name[nl] != '\0' || off + 4 > len ||
        (unsigned)(msg[off] << 8 | msg[off + 1]) != q->qtype ||
        (unsigned)(msg[off + 2] << 8 | msg[off + 3]) != q->qclass)
        return -1;
    off += 4;
    a->rcode = msg[3] & 0xf;
    answer_walk w = {a, 0, 0, 0};
    if (walk_records(msg, len, off, answer_rr, &w) < 0)
        return -1;
    int truncated = (msg[2] & 0x02) != 0;
    if (truncated)
        a->cacheable = 0;
    else if (a->rcode == 0 && w.have_ttl)
        a->cacheable = 1;
    else if ((a->rcode == 0 || a->rcode == 3) && w.have_soa) {
        a->cacheable = 1;
        a->ttl = w.soa_ttl;
    }
    if (!a->cacheable)
        a->ttl = 0;
    return 0;
}

static void cap_rr(const uint8_t *msg, size_t rr, unsigned section, void *arg)
{
    uint32_t cap = *(uint32_t *)arg;
    uint8_t *m = (uint8_t *)msg;
    if ((unsigned)(msg[rr] << 8 | msg[rr + 1]) == 41 || get32(msg + rr + 4) <= cap)
        return; /* OPT's "TTL" is flags */
    m[rr + 4] = (uint8_t)(cap >> 24);
    m[rr + 5] = (uint8_t)(cap >> 16);
    m[rr + 6] = (uint8_t)(cap >> 8);
    m[rr + 7] = (uint8_t)cap;
}

void funcd_egress_dns_cap_ttl(uint8_t *msg, size_t len, uint32_t ttl)
{
    if (len < 12)
        return;
    size_t off = skip_name(msg, len, 12);
    if (!off || off + 4 > len || (msg[4] << 8 | msg[5]) != 1)
        return;
    /* a malformed message was never cached; stop where it would fail */
    (void)walk_records(msg, len, off + 4, cap_rr, &ttl);
}
