#include "s3/proto.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <mbedtls/md.h>

#include "util/buf.h"
#include "util/misc.h"

/* ---- reading ------------------------------------------------------------- */

static int fill(funcd_s3_reader *rd)
{
    if (rd->pos < rd->len)
        return 1;
    if (rd->eof || rd->failed)
        return 0;
    long n = rd->read(rd->ctx, rd->buf, sizeof(rd->buf));
    if (n < 0) {
        rd->failed = 1;
        return 0;
    }
    if (n == 0) {
        rd->eof = 1;
        return 0;
    }
    rd->pos = 0;
    rd->len = (size_t)n;
    return 1;
}

long funcd_s3_read_upto(funcd_s3_reader *rd, void *out, size_t cap)
{
    if (!cap)
        return 0;
    if (rd->pos == rd->len && cap >= sizeof(rd->buf) && !rd->eof && !rd->failed) {
        /* nothing buffered and a large read: straight into `out` */
        long n = rd->read(rd->ctx, out, cap);
        if (n < 0)
            rd->failed = 1;
        else if (n == 0)
            rd->eof = 1;
        return n > 0 ? n : -1;
    }
    if (!fill(rd))
        return -1;
    size_t k = rd->len - rd->pos;
    if (k > cap)
        k = cap;
    memcpy(out, rd->buf + rd->pos, k);
    rd->pos += k;
    return (long)k;
}

int funcd_s3_read_exact(funcd_s3_reader *rd, void *out, size_t len)
{
    char *o = out;
    while (len) {
        if (!fill(rd))
            return -1;
        size_t k = rd->len - rd->pos;
        if (k > len)
            k = len;
        memcpy(o, rd->buf + rd->pos, k);
        rd->pos += k;
        o += k;
        len -= k;
    }
    return 0;
}

/* A line up to "\n" (the "\r" before it dropped) into `out`; -1 if longer
 * than `cap` - 1 or the input ends. */
static int read_line(funcd_s3_reader *rd, char *out, size_t cap)
{
    size_t n = 0;
    for (;;) {
        if (!fill(rd))
            return -1;
        char c = rd->buf[rd->pos++];
        if (c == '\n')
            break;
        if (n + 1 >= cap)
            return -1;
        out[n++] = c;
    }
    if (n && out[n - 1] == '\r')
        n--;
    out[n] = '\0';
    return 0;
}

int funcd_s3_read_head(funcd_s3_reader *rd, funcd_s3_req *r, char *err, size_t errlen)
{
    size_t n = 0;
    int started = 0;
    for (;;) {
        if (!fill(rd)) {
            if (rd->failed)
                return -1;
            if (!started)
                return 0;
            snprintf(err, errlen, "the request head ended early");
            return -2;
        }
        char c = rd->buf[rd->pos++];
        if (!started && (c == '\r' || c == '\n'))
            continue; /* blank lines between requests */
        started = 1;
        if (n >= FUNCD_S3_MAX_HEAD)
            return -3;
        r->head[n++] = c;
        if (n >= 4 && memcmp(r->head + n - 4, "\r\n\r\n", 4) == 0) {
            n -= 4;
            break;
        }
        if (n >= 2 && memcmp(r->head + n - 2, "\n\n", 2) == 0) {
            n -= 2;
            break;
        }
    }
    r->head[n] = '\0';
    return funcd_s3_parse_head(r, err, errlen) < 0 ? -2 : 1;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int funcd_s3_uri_decode(char *s)
{
    char *o = s;
    for (const char *p = s; *p; p++) {
        if (*p == '%') {
            int h = hexval((unsigned char)p[1]), l = h < 0 ? -1 : hexval((unsigned char)p[2]);
            if (h < 0 || l < 0 || (h == 0 && l == 0))
                return -1;
            *o++ = (char)(h * 16 + l);
            p += 2;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
    return 0;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
    return s;
}

int funcd_s3_parse_head(funcd_s3_req *r, char *err, size_t errlen)
{
    r->n_headers = 0;
    r->n_params = 0;
    r->raw_query[0] = '\0';
    char *line = r->head, *next = strchr(line, '\n');
    if (next)
        *next++ = '\0';
    size_t ll = strlen(line);
    if (ll && line[ll - 1] == '\r')
        line[--ll] = '\0';
    char *sp1 = strchr(line, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
    if (!sp1 || !sp2 || strchr(sp2 + 1, ' ')) {
        snprintf(err, errlen, "a malformed request line");
        return -1;
    }
    *sp1 = *sp2 = '\0';
    r->method = line;
    r->target = sp1 + 1;
    if (strcmp(sp2 + 1, "HTTP/1.1") == 0)
        r->http10 = 0;
    else if (strcmp(sp2 + 1, "HTTP/1.0") == 0)
        r->http10 = 1;
    else {
        snprintf(err, errlen, "not an HTTP/1.x request");
        return -1;
    }
    if (r->target[0] != '/') {
        snprintf(err, errlen, "the request target is not a path");
        return -1;
    }
    for (const char *m = r->method; *m; m++)
        if (*m < 'A' || *m > 'Z') {
            snprintf(err, errlen, "a malformed method");
            return -1;
        }
    size_t plen = strcspn(r->target, "?");
    if (plen >= sizeof(r->path)) {
        snprintf(err, errlen, "the path is longer than %zu bytes", sizeof(r->path) - 1);
        return -1;
    }
    memcpy(r->path, r->target, plen);
    r->path[plen] = '\0';
    if (funcd_s3_uri_decode(r->path) < 0) {
        snprintf(err, errlen, "a malformed escape in the path");
        return -1;
    }
    if (r->target[plen] == '?')
        snprintf(r->raw_query, sizeof(r->raw_query), "%s", r->target + plen + 1);

    /* headers */
    while (next && *next) {
        line = next;
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        ll = strlen(line);
        if (ll && line[ll - 1] == '\r')
            line[--ll] = '\0';
        if (line[0] == ' ' || line[0] == '\t') {
            snprintf(err, errlen, "folded header lines are not accepted");
            return -1;
        }
        char *colon = strchr(line, ':');
        if (!colon || colon == line) {
            snprintf(err, errlen, "a malformed header line");
            return -1;
        }
        *colon = '\0';
        for (char *c = line; *c; c++) {
            if (*c <= ' ' || *c >= 127) {
                snprintf(err, errlen, "a malformed header name");
                return -1;
            }
            *c = (char)tolower((unsigned char)*c);
        }
        if (r->n_headers >= FUNCD_S3_MAX_HEADERS) {
            snprintf(err, errlen, "more than %d headers", FUNCD_S3_MAX_HEADERS);
            return -1;
        }
        r->hname[r->n_headers] = line;
        r->hvalue[r->n_headers++] = trim(colon + 1);
    }

    /* query parameters, decoded into param_store */
    char *store = r->param_store;
    size_t left = sizeof(r->param_store);
    const char *q = r->raw_query;
    while (*q) {
        size_t n = strcspn(q, "&");
        if (n) {
            if (r->n_params >= FUNCD_S3_MAX_PARAMS || n + 2 > left) {
                snprintf(err, errlen, "too many query parameters");
                return -1;
            }
            memcpy(store, q, n);
            store[n] = '\0';
            char *eq = strchr(store, '=');
            funcd_s3_param *p = &r->params[r->n_params++];
            p->name = store;
            if (eq) {
                *eq = '\0';
                p->value = eq + 1;
                store += n + 1;
                left -= n + 1;
            } else {
                p->value = store + n + 1;
                *p->value = '\0';
                store += n + 2;
                left -= n + 2;
            }
            if (funcd_s3_uri_decode(p->name) < 0 || funcd_s3_uri_decode(p->value) < 0) {
                snprintf(err, errlen, "a malformed escape in the query");
                return -1;
            }
        }
        q += n;
        if (*q == '&')
            q++;
    }
    return 0;
}

const char *funcd_s3_header(const funcd_s3_req *r, const char *lname)
{
    for (size_t i = 0; i < r->n_headers; i++)
        if (strcmp(r->hname[i], lname) == 0)
            return r->hvalue[i];
    return NULL;
}

const char *funcd_s3_param_get(const funcd_s3_req *r, const char *name)
{
    for (size_t i = 0; i < r->n_params; i++)
        if (strcmp(r->params[i].name, name) == 0)
            return r->params[i].value;
    return NULL;
}

/* ---- encoding ------------------------------------------------------------ */

int funcd_s3_uri_encode(funcd_buf *out, const char *s, size_t len, int keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
            if (funcd_buf_append(out, &s[i], 1) < 0)
                return -1;
        } else {
            char e[3] = {'%', hex[c >> 4], hex[c & 15]};
            if (funcd_buf_append(out, e, 3) < 0)
                return -1;
        }
    }
    return 0;
}

/* The length of the UTF-8 sequence at `s` (shortest form, no surrogates,
 * at most U+10FFFF) and its code point, or 0 if there is none. */
static size_t utf8_seq(const unsigned char *s, uint32_t *cp)
{
    unsigned char c = s[0];
    size_t n;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xE0) == 0xC0) {
        n = 2, v = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        n = 3, v = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        n = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) /* also stops at the NUL */
            return 0;
        v = v << 6 | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return n;
}

int funcd_s3_utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    uint32_t cp;
    for (size_t n; *p; p += n)
        if (!(n = utf8_seq(p, &cp)))
            return 0;
    return 1;
}

int funcd_s3_xml_escape(funcd_buf *out, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        uint32_t cp = 0;
        size_t n = utf8_seq(p, &cp);
        int rc;
        if (!n) { /* not UTF-8: the replacement character, byte by byte */
            rc = funcd_buf_puts(out, "&#xFFFD;");
            n = 1;
        } else if (cp == '&') {
            rc = funcd_buf_puts(out, "&amp;");
        } else if (cp == '<') {
            rc = funcd_buf_puts(out, "&lt;");
        } else if (cp == '>') {
            rc = funcd_buf_puts(out, "&gt;");
        } else if (cp == '"') {
            rc = funcd_buf_puts(out, "&quot;");
        } else if (cp == '\'') {
            rc = funcd_buf_puts(out, "&apos;");
        } else if (cp < 0x20 || cp == 0xFFFE || cp == 0xFFFF) {
            /* as S3 writes them; TAB, LF and CR too, or XML's end-of-line
             * handling would change them */
            rc = funcd_buf_printf(out, "&#x%X;", (unsigned)cp);
        } else {
            rc = funcd_buf_append(out, p, n);
        }
        if (rc < 0)
            return -1;
        p += n;
    }
    return 0;
}

static void hmac(const uint8_t *key, size_t klen, const void *msg, size_t mlen, uint8_t out[32])
{
    mbedtls_md_hmac(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), key, klen, msg, mlen, out);
}

int funcd_s3_streq_ct(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = (unsigned char)(la != lb);
    for (size_t i = 0; i < la && i < lb; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

int64_t funcd_s3_parse_amz_date(const char *s)
{
    struct tm tm = {0};
    if (!s || strlen(s) != 16 || s[8] != 'T' || s[15] != 'Z')
        return -1;
    for (int i = 0; i < 15; i++)
        if (i != 8 && !isdigit((unsigned char)s[i]))
            return -1;
    tm.tm_year = (s[0] - '0') * 1000 + (s[1] - '0') * 100 + (s[2] - '0') * 10 + (s[3] - '0') - 1900;
    tm.tm_mon = (s[4] - '0') * 10 + (s[5] - '0') - 1;
    tm.tm_mday = (s[6] - '0') * 10 + (s[7] - '0');
    tm.tm_hour = (s[9] - '0') * 10 + (s[10] - '0');
    tm.tm_min = (s[11] - '0') * 10 + (s[12] - '0');
    tm.tm_sec = (s[13] - '0') * 10 + (s[14] - '0');
    if (tm.tm_mon < 0 || tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 ||
        tm.tm_min > 59 || tm.tm_sec > 60)
        return -1;
    return (int64_t)timegm(&tm);
}

/* ---- SigV4 --------------------------------------------------------------- */

static int copy_field(char *dst, size_t cap, const char *s, size_t n)
{
    if (n == 0 || n >= cap)
        return -1;
    memcpy(dst, s, n);
    dst[n] = '\0';
    return 0;
}

/* "AKID/yyyymmdd/region/service/aws4_request" */
static int parse_credential(funcd_s3_auth *a, const char *cred)
{
    const char *f[5];
    size_t fl[5];
    const char *p = cred;
    for (int i = 0; i < 5; i++) {
        f[i] = p;
        fl[i] = strcspn(p, "/");
        p += fl[i];
        if (i < 4) {
            if (*p != '/')
                return -1;
            p++;
        }
    }
    if (*p || fl[4] != 12 || memcmp(f[4], "aws4_request", 12) != 0 || fl[1] != 8)
        return -1;
    if (copy_field(a->akid, sizeof(a->akid), f[0], fl[0]) < 0 ||
        copy_field(a->date, sizeof(a->date), f[1], fl[1]) < 0 ||
        copy_field(a->region, sizeof(a->region), f[2], fl[2]) < 0 ||
        copy_field(a->service, sizeof(a->service), f[3], fl[3]) < 0)
        return -1;
    return 0;
}

static int valid_signed_headers(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '-' || *s == ';' ||
              *s == '_' || *s == '.'))
            return 0;
    return 1;
}

static int valid_sig(const char *s)
{
    if (strlen(s) != 64)
        return 0;
    for (; *s; s++)
        if (!isxdigit((unsigned char)*s))
            return 0;
    return 1;
}

int funcd_s3_auth_parse(const funcd_s3_req *r, funcd_s3_auth *a, const char **code, char *err,
                        size_t errlen)
{
    memset(a, 0, sizeof(*a));
    const char *h = funcd_s3_header(r, "authorization");
    const char *alg = funcd_s3_param_get(r, "X-Amz-Algorithm");
    if (h && alg) {
        *code = "InvalidArgument";
        snprintf(err, errlen, "only one auth mechanism allowed");
        return -1;
    }
    if (h) {
        static const char pre[] = "AWS4-HMAC-SHA256 ";
        if (strncmp(h, pre, sizeof(pre) - 1) != 0) {
            *code = "AuthorizationHeaderMalformed";
            snprintf(err, errlen, "the authorization header is not AWS4-HMAC-SHA256");
            return -1;
        }
        char copy[2048];
        if (strlen(h) >= sizeof(copy)) {
            *code = "AuthorizationHeaderMalformed";
            snprintf(err, errlen, "the authorization header is too long");
            return -1;
        }
        snprintf(copy, sizeof(copy), "%s", h + sizeof(pre) - 1);
        int have = 0;
        for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok;
             tok = strtok_r(NULL, ",", &save)) {
            tok = trim(tok);
            if (strncmp(tok, "Credential=", 11) == 0) {
                if (parse_credential(a, tok + 11) < 0)
                    goto malformed;
                have |= 1;
            } else if (strncmp(tok, "SignedHeaders=", 14) == 0) {
                if (copy_field(a->signed_headers, sizeof(a->signed_headers), tok + 14,
                               strlen(tok + 14)) < 0)
                    goto malformed;
                have |= 2;
            } else if (strncmp(tok, "Signature=", 10) == 0) {
                if (copy_field(a->signature, sizeof(a->signature), tok + 10, strlen(tok + 10)) < 0)
                    goto malformed;
                have |= 4;
            } else {
                goto malformed;
            }
        }
        if (have != 7 || !valid_signed_headers(a->signed_headers) || !valid_sig(a->signature))
            goto malformed;
        const char *d = funcd_s3_header(r, "x-amz-date");
        if (!d || copy_field(a->amz_date, sizeof(a->amz_date), d, strlen(d)) < 0 ||
            funcd_s3_parse_amz_date(a->amz_date) < 0) {
            *code = "AccessDenied";
            snprintf(err, errlen, "AWS authentication requires a valid X-Amz-Date header");
            return -1;
        }
        const char *ph = funcd_s3_header(r, "x-amz-content-sha256");
        if (!ph || copy_field(a->payload_hash, sizeof(a->payload_hash), ph, strlen(ph)) < 0) {
            *code = "InvalidRequest";
            snprintf(err, errlen, "missing required header for this request: x-amz-content-sha256");
            return -1;
        }
    } else if (alg) {
        a->presigned = 1;
        const char *cred = funcd_s3_param_get(r, "X-Amz-Credential");
        const char *date = funcd_s3_param_get(r, "X-Amz-Date");
        const char *exp = funcd_s3_param_get(r, "X-Amz-Expires");
        const char *sh = funcd_s3_param_get(r, "X-Amz-SignedHeaders");
        const char *sig = funcd_s3_param_get(r, "X-Amz-Signature");
        if (strcmp(alg, "AWS4-HMAC-SHA256") != 0 || !cred || !date || !exp || !sh || !sig) {
            *code = "AuthorizationQueryParametersError";
            snprintf(err, errlen, "X-Amz-Algorithm, X-Amz-Credential, X-Amz-Date, X-Amz-Expires, "
                                  "X-Amz-SignedHeaders and X-Amz-Signature are all required");
            return -1;
        }
        char *end;
        a->expires = strtol(exp, &end, 10);
        if (parse_credential(a, cred) < 0 || *end || end == exp || a->expires < 1 ||
            a->expires > 604800 ||
            copy_field(a->amz_date, sizeof(a->amz_date), date, strlen(date)) < 0 ||
            funcd_s3_parse_amz_date(a->amz_date) < 0 ||
            copy_field(a->signed_headers, sizeof(a->signed_headers), sh, strlen(sh)) < 0 ||
            copy_field(a->signature, sizeof(a->signature), sig, strlen(sig)) < 0 ||
            !valid_signed_headers(a->signed_headers) || !valid_sig(a->signature)) {
            *code = "AuthorizationQueryParametersError";
            snprintf(err, errlen, "malformed X-Amz-* query parameters (X-Amz-Expires is 1 to "
                                  "604800 seconds)");
            return -1;
        }
        snprintf(a->payload_hash, sizeof(a->payload_hash), "UNSIGNED-PAYLOAD");
    } else {
        *code = "AccessDenied";
        snprintf(err, errlen, "anonymous requests are not accepted: sign with AWS SigV4");
        return -1;
    }
    if (strncmp(a->amz_date, a->date, 8) != 0 || strcmp(a->service, "s3") != 0) {
        *code = "AuthorizationHeaderMalformed";
        snprintf(err, errlen, "the credential scope's date must be X-Amz-Date's and its service s3");
        return -1;
    }
    return 0;
malformed:
    *code = "AuthorizationHeaderMalformed";
    snprintf(err, errlen, "the authorization header is malformed: it needs Credential=, "
                          "SignedHeaders= and Signature=");
    return -1;
}

void funcd_s3_signing_key(const char *secret, const char *date, const char *region,
                          const char *service, uint8_t key[32])
{
    char k0[256];
    int n = snprintf(k0, sizeof(k0), "AWS4%s", secret);
    if (n < 0 || (size_t)n >= sizeof(k0))
        n = (int)sizeof(k0) - 1;
    uint8_t a[32], b[32];
    hmac((const uint8_t *)k0, (size_t)n, date, strlen(date), a);
    hmac(a, 32, region, strlen(region), b);
    hmac(b, 32, service, strlen(service), a);
    hmac(a, 32, "aws4_request", 12, key);
}

static int cmp_str(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

/* The header's value as SigV4 canonicalizes it: every occurrence joined by
 * ',', each trimmed, runs of spaces made one. */
static int canonical_header_value(funcd_buf *b, const funcd_s3_req *r, const char *name)
{
    int found = 0;
    for (size_t i = 0; i < r->n_headers; i++) {
        if (strcmp(r->hname[i], name) != 0)
            continue;
        if (found++ && funcd_buf_puts(b, ",") < 0)
            return -1;
        int space = 0;
        for (const char *v = r->hvalue[i]; *v; v++) {
            if (*v == ' ' || *v == '\t') {
                space = 1;
                continue;
            }
            if (space && funcd_buf_puts(b, " ") < 0)
                return -1;
            space = 0;
            if (funcd_buf_append(b, v, 1) < 0)
                return -1;
        }
    }
    return found ? 0 : 1;
}

int funcd_s3_sign_request(const funcd_s3_req *r, const funcd_s3_auth *a, const uint8_t key[32],
                          char out[65], char *err, size_t errlen)
{
    funcd_buf cr = FUNCD_BUF_INIT;
    char *pairs[FUNCD_S3_MAX_PARAMS];
    size_t np = 0;
    int rc = -1;
    if (funcd_buf_printf(&cr, "%s\n", r->method) < 0 ||
        funcd_s3_uri_encode(&cr, r->path, strlen(r->path), 1) < 0 || funcd_buf_puts(&cr, "\n") < 0)
        goto done;
    for (size_t i = 0; i < r->n_params; i++) {
        if (a->presigned && strcmp(r->params[i].name, "X-Amz-Signature") == 0)
            continue;
        funcd_buf p = FUNCD_BUF_INIT;
        if (funcd_s3_uri_encode(&p, r->params[i].name, strlen(r->params[i].name), 0) < 0 ||
            funcd_buf_puts(&p, "=") < 0 ||
            funcd_s3_uri_encode(&p, r->params[i].value, strlen(r->params[i].value), 0) < 0) {
            funcd_buf_free(&p);
            goto done;
        }
        pairs[np++] = funcd_buf_detach(&p, NULL);
    }
    qsort(pairs, np, sizeof(pairs[0]), cmp_str);
    for (size_t i = 0; i < np; i++)
        if ((i && funcd_buf_puts(&cr, "&") < 0) || funcd_buf_puts(&cr, pairs[i]) < 0)
            goto done;
    if (funcd_buf_puts(&cr, "\n") < 0)
        goto done;
    const char *h = a->signed_headers;
    while (*h) {
        size_t n = strcspn(h, ";");
        char name[128];
        if (n == 0 || n >= sizeof(name)) {
            snprintf(err, errlen, "a malformed SignedHeaders list");
            goto done;
        }
        memcpy(name, h, n);
        name[n] = '\0';
        if (funcd_buf_printf(&cr, "%s:", name) < 0)
            goto done;
        int m = canonical_header_value(&cr, r, name);
        if (m < 0)
            goto done;
        if (m > 0) {
            snprintf(err, errlen, "the signed header %s is not in the request", name);
            goto done;
        }
        if (funcd_buf_puts(&cr, "\n") < 0)
            goto done;
        h += n;
        if (*h == ';')
            h++;
    }
    if (funcd_buf_printf(&cr, "\n%s\n%s", a->signed_headers, a->payload_hash) < 0)
        goto done;
    char crh[65];
    funcd_sha256_hex(cr.data, cr.len, crh);
    char sts[512];
    int n = snprintf(sts, sizeof(sts), "AWS4-HMAC-SHA256\n%s\n%s/%s/%s/aws4_request\n%s",
                     a->amz_date, a->date, a->region, a->service, crh);
    uint8_t sig[32];
    hmac(key, 32, sts, (size_t)n, sig);
    funcd_hex(sig, 32, out);
    rc = 0;
done:
    if (rc < 0 && !err[0])
        snprintf(err, errlen, "out of memory");
    for (size_t i = 0; i < np; i++)
        free(pairs[i]);
    funcd_buf_free(&cr);
    return rc;
}

void funcd_s3_sign_chunk(const funcd_s3_auth *a, const uint8_t key[32], const char *prev,
                         const char *chunk_sha256_hex, char out[65])
{
    char sts[512];
    int n = snprintf(sts, sizeof(sts),
                     "AWS4-HMAC-SHA256-PAYLOAD\n%s\n%s/%s/%s/aws4_request\n%s\n"
                     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n%s",
                     a->amz_date, a->date, a->region, a->service, prev, chunk_sha256_hex);
    uint8_t sig[32];
    hmac(key, 32, sts, (size_t)n, sig);
    funcd_hex(sig, 32, out);
}

/* ---- aws-chunked ----------------------------------------------------------- */

int funcd_s3_chunk_header(funcd_s3_reader *rd, uint64_t *size, char sig[65])
{
    char line[256];
    if (read_line(rd, line, sizeof(line)) < 0)
        return -1;
    uint64_t v = 0;
    const char *p = line;
    if (!isxdigit((unsigned char)*p))
        return -1;
    for (; isxdigit((unsigned char)*p); p++) {
        if (v >> 56)
            return -1;
        v = v * 16 + (uint64_t)hexval((unsigned char)*p);
    }
    sig[0] = '\0';
    while (*p == ' ')
        p++;
    if (*p == ';') {
        p++;
        if (strncmp(p, "chunk-signature=", 16) != 0 || !valid_sig(p + 16))
            return -1;
        memcpy(sig, p + 16, 65);
    } else if (*p) {
        return -1;
    }
    *size = v;
    return 0;
}

int funcd_s3_chunk_end(funcd_s3_reader *rd)
{
    char line[4];
    return read_line(rd, line, sizeof(line)) == 0 && line[0] == '\0' ? 0 : -1;
}

int funcd_s3_chunk_trailers(funcd_s3_reader *rd)
{
    char line[1024];
    for (int i = 0; i < 16; i++) {
        if (read_line(rd, line, sizeof(line)) < 0)
            return -1;
        if (!line[0])
            return 0;
        if (!strchr(line, ':'))
            return -1;
    }
    return -1;
}

/* ---- Range ----------------------------------------------------------------- */

static int parse_u64(const char **p, uint64_t *out)
{
    uint64_t v = 0;
    if (!isdigit((unsigned char)**p))
        return -1;
    for (; isdigit((unsigned char)**p); (*p)++) {
        if (v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (uint64_t)(**p - '0');
    }
    *out = v;
    return 0;
}

int funcd_s3_parse_range(const char *v, uint64_t size, uint64_t *off, uint64_t *len)
{
    if (strncmp(v, "bytes=", 6) != 0)
        return 0;
    const char *p = v + 6;
    uint64_t a, b;
    if (*p == '-') {
        p++;
        if (parse_u64(&p, &b) < 0 || *p)
            return 0;
        if (b == 0)
            return -1;
        if (size == 0)
            return -1;
        if (b > size)
            b = size;
        *off = size - b;
        *len = b;
        return 1;
    }
    if (parse_u64(&p, &a) < 0 || *p != '-')
        return 0;
    p++;
    if (!*p) {
        b = UINT64_MAX;
    } else if (parse_u64(&p, &b) < 0 || *p || b < a) {
        return 0;
    }
    if (a >= size)
        return -1;
    if (b >= size)
        b = size - 1;
    *off = a;
    *len = b - a + 1;
    return 1;
}

/* ---- XML ------------------------------------------------------------------- */

/* The text of the next <tag>…</tag> in [p, end), entities decoded, into
 * out; returns the position after the end tag, or NULL. */
static const char *element(const char *p, const char *end, const char *tag, char *out, size_t cap)
{
    char open[64], close[64];
    snprintf(open, sizeof(open), "<%s>", tag);
    snprintf(close, sizeof(close), "</%s>", tag);
    size_t ol = strlen(open), cl = strlen(close);
    const char *s = NULL;
    for (const char *q = p; q + ol <= end; q++)
        if (memcmp(q, open, ol) == 0) {
            s = q + ol;
            break;
        }
    if (!s)
        return NULL;
    const char *e = NULL;
    for (const char *q = s; q + cl <= end; q++)
        if (memcmp(q, close, cl) == 0) {
            e = q;
            break;
        }
    if (!e)
        return NULL;
    size_t n = 0;
    for (const char *q = s; q < e; q++) {
        char c = *q;
        if (c == '&') {
            static const struct {
                const char *ent;
                char c;
            } ents[] = {{"&quot;", '"'}, {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&apos;", '\''},
                        {"&#34;", '"'}};
            int ok = 0;
            for (size_t i = 0; i < sizeof(ents) / sizeof(ents[0]); i++) {
                size_t el = strlen(ents[i].ent);
                if ((size_t)(e - q) >= el && memcmp(q, ents[i].ent, el) == 0) {
                    c = ents[i].c;
                    q += el - 1;
                    ok = 1;
                    break;
                }
            }
            if (!ok)
                return NULL;
        } else if (c == '\0') {
            return NULL;
        }
        if (n + 1 >= cap)
            return NULL;
        out[n++] = c;
    }
    out[n] = '\0';
    return e + cl;
}

static const char *find(const char *p, const char *end, const char *s)
{
    size_t n = strlen(s);
    for (; p + n <= end; p++)
        if (memcmp(p, s, n) == 0)
            return p;
    return NULL;
}

int funcd_s3_parse_complete(const char *xml, size_t len, funcd_s3_part_ref **out, size_t *n)
{
    const char *p = xml, *end = xml + len;
    size_t cap = 0, count = 0;
    funcd_s3_part_ref *parts = NULL;
    if (!find(p, end, "<CompleteMultipartUpload"))
        return -1;
    for (;;) {
        const char *s = find(p, end, "<Part>");
        if (!s)
            break;
        const char *e = find(s, end, "</Part>");
        if (!e)
            goto bad;
        char num[16], etag[128];
        if (!element(s, e, "PartNumber", num, sizeof(num)) ||
            !element(s, e, "ETag", etag, sizeof(etag)))
            goto bad;
        char *q;
        long v = strtol(num, &q, 10);
        if (*q || q == num || v < 1 || v > 10000)
            goto bad;
        char *t = etag;
        size_t tl = strlen(t);
        if (tl >= 2 && t[0] == '"' && t[tl - 1] == '"') {
            t[tl - 1] = '\0';
            t++;
        }
        if (strlen(t) >= sizeof(parts[0].etag))
            goto bad;
        if (count == cap) {
            cap = cap ? cap * 2 : 16;
            if (cap > 10000)
                goto bad;
            funcd_s3_part_ref *np = realloc(parts, cap * sizeof(*parts));
            if (!np)
                goto bad;
            parts = np;
        }
        parts[count].number = (unsigned)v;
        snprintf(parts[count].etag, sizeof(parts[count].etag), "%s", t);
        count++;
        p = e + 7;
    }
    if (!count)
        goto bad;
    *out = parts;
    *n = count;
    return 0;
bad:
    free(parts);
    return -1;
}

int funcd_s3_parse_delete(const char *xml, size_t len, char ***keys, int *quiet)
{
    const char *p = xml, *end = xml + len;
    size_t count = 0;
    char **list = calloc(1001, sizeof(*list));
    if (!list || !find(p, end, "<Delete"))
        goto bad;
    char q[16];
    *quiet = element(p, end, "Quiet", q, sizeof(q)) && strcmp(q, "true") == 0;
    for (;;) {
        const char *s = find(p, end, "<Object>");
        if (!s)
            break;
        const char *e = find(s, end, "</Object>");
        if (!e || count >= 1000)
            goto bad;
        char key[1100];
        if (!element(s, e, "Key", key, sizeof(key)) || !key[0])
            goto bad;
        if (!(list[count++] = strdup(key)))
            goto bad;
        p = e + 9;
    }
    if (!count)
        goto bad;
    *keys = list;
    return 0;
bad:
    for (size_t i = 0; list && i < count; i++)
        free(list[i]);
    free(list);
    return -1;
}
