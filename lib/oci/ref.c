/* Image references: Docker's grammar and defaults, without regexes. */
#include "oci/oci.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "funcd/sys/error.h"
#include "util/buf.h"
#include "util/misc.h"

#define DOCKER_HUB "registry-1.docker.io"

static int is_lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* path-component: [a-z0-9]+ ( ( '.' | '_' | '__' | '-'+ ) [a-z0-9]+ )* */
static int valid_component(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t run = 0;
        while (i < n && is_lower_alnum(s[i]))
            i++, run++;
        if (run == 0)
            return 0;
        if (i == n)
            return 1;
        size_t sep = i;
        while (i < n && !is_lower_alnum(s[i]))
            i++;
        size_t sep_len = i - sep;
        int ok = (sep_len == 1 && (s[sep] == '.' || s[sep] == '_')) ||
                 (sep_len == 2 && s[sep] == '_' && s[sep + 1] == '_');
        if (!ok) {
            ok = 1;
            for (size_t k = sep; k < i; k++)
                ok &= s[k] == '-';
        }
        if (!ok || i == n)
            return 0;
    }
    return 0;
}

static int valid_repository(const char *s)
{
    size_t len = strlen(s);
    if (len == 0 || len > 255)
        return 0;
    const char *p = s;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        if (!valid_component(p, n))
            return 0;
        if (!slash)
            return 1;
        p = slash + 1;
    }
}

static int valid_tag(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 128 || !(isalnum((unsigned char)s[0]) || s[0] == '_'))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '.' && s[i] != '-')
            return 0;
    return 1;
}

static int valid_digest(const char *s)
{
    if (strncmp(s, "sha256:", 7) != 0 || strlen(s) != 7 + 64)
        return 0;
    for (const char *p = s + 7; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return 1;
}

static int valid_host(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!isalnum(c) && c != '.' && c != '-' && c != ':' && c != '[' && c != ']')
            return 0;
    }
    return 1;
}

/* Docker's rule: the first component is a registry when it looks like a host. */
static int looks_like_host(const char *s, size_t n)
{
    if (n == 9 && memcmp(s, "localhost", 9) == 0)
        return 1;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '.' || s[i] == ':' || (s[i] >= 'A' && s[i] <= 'Z'))
            return 1;
    return 0;
}

static int bad_ref(const char *ref, const char *what)
{
    return funcd_error_set(FUNCD_EINVAL, "image reference \"%s\": %s", ref, what);
}

static int split_name(funcd_oci_ref *r, const char *ref, const char *name, size_t name_len)
{
    const char *slash = memchr(name, '/', name_len);
    const char *repo = name;
    size_t repo_len = name_len;
    if (slash && looks_like_host(name, (size_t)(slash - name))) {
        size_t host_len = (size_t)(slash - name);
        if (!valid_host(name, host_len))
            return bad_ref(ref, "the registry host is not a valid host[:port]");
        r->registry = funcd_strndup(name, host_len);
        repo = slash + 1;
        repo_len = name_len - host_len - 1;
    }
    if (!r->registry || strcmp(r->registry, "docker.io") == 0 ||
        strcmp(r->registry, "index.docker.io") == 0) {
        free(r->registry);
        r->registry = funcd_strdup(DOCKER_HUB);
    }
    int hub = strcmp(r->registry, DOCKER_HUB) == 0;
    funcd_buf b = FUNCD_BUF_INIT;
    if (hub && !memchr(repo, '/', repo_len))
        funcd_buf_puts(&b, "library/");
    funcd_buf_append(&b, repo, repo_len);
    r->repository = funcd_buf_detach(&b, NULL);
    if (!valid_repository(r->repository))
        return bad_ref(ref, "the repository must be lowercase letters, digits and . _ - separated by /");
    return 0;
}

int funcd_oci_ref_parse(funcd_oci_ref *out, const char *ref)
{
    if (!ref || !*ref)
        return funcd_error_set(FUNCD_EINVAL, "image reference is empty");
    if (strlen(ref) > 4096)
        return funcd_error_set(FUNCD_EINVAL, "image reference is too long");
    funcd_oci_ref r = {0};
    int rc = 0;
    const char *at = strrchr(ref, '@');
    size_t name_len = at ? (size_t)(at - ref) : strlen(ref);
    if (at) {
        if (!valid_digest(at + 1)) {
            rc = bad_ref(ref, "the digest must be sha256: and 64 lowercase hex digits");
            goto out;
        }
        r.digest = funcd_strdup(at + 1);
    }
    const char *last_slash = memrchr(ref, '/', name_len);
    const char *colon = memrchr(ref, ':', name_len);
    if (colon && (!last_slash || colon > last_slash)) {
        r.tag = funcd_strndup(colon + 1, name_len - (size_t)(colon + 1 - ref));
        if (!valid_tag(r.tag)) {
            rc = bad_ref(ref, "the tag must be up to 128 of [A-Za-z0-9_.-], not starting with . or -");
            goto out;
        }
        name_len = (size_t)(colon - ref);
    }
    if ((rc = split_name(&r, ref, ref, name_len)) < 0)
        goto out;
    if (!r.tag && !r.digest)
        r.tag = funcd_strdup("latest");
out:
    if (rc < 0)
        funcd_oci_ref_free(&r);
    else
        *out = r;
    return rc;
}

void funcd_oci_ref_free(funcd_oci_ref *r)
{
    if (!r)
        return;
    free(r->registry);
    free(r->repository);
    free(r->tag);
    free(r->digest);
    memset(r, 0, sizeof(*r));
}

char *funcd_oci_ref_format(const funcd_oci_ref *r)
{
    funcd_buf b = FUNCD_BUF_INIT;
    funcd_buf_printf(&b, "%s/%s", r->registry ? r->registry : DOCKER_HUB,
                     r->repository ? r->repository : "");
    if (r->tag)
        funcd_buf_printf(&b, ":%s", r->tag);
    if (r->digest)
        funcd_buf_printf(&b, "@%s", r->digest);
    return funcd_buf_detach(&b, NULL);
}

int funcd_oci_host_is_loopback(const char *host_port)
{
    if (!host_port)
        return 0;
    char host[256];
    const char *end;
    if (host_port[0] == '[') {
        end = strchr(host_port, ']');
        if (!end)
            return 0;
        size_t n = (size_t)(end - host_port - 1);
        if (n >= sizeof(host))
            return 0;
        memcpy(host, host_port + 1, n);
        host[n] = 0;
        return strcmp(host, "::1") == 0;
    }
    end = strchr(host_port, ':');
    size_t n = end ? (size_t)(end - host_port) : strlen(host_port);
    if (n >= sizeof(host))
        return 0;
    memcpy(host, host_port, n);
    host[n] = 0;
    if (strcmp(host, "localhost") == 0)
        return 1;
    unsigned a, b, c, d;
    char tail;
    if (sscanf(host, "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) != 4)
        return 0;
    return a == 127 && b < 256 && c < 256 && d < 256;
}

/* host and port of "host[:port]" / "[v6]:port" (port 0: none given). */
static int split_host_port(const char *host_port, char *host, size_t n, unsigned *port)
{
    const char *h = host_port, *end, *colon;
    *port = 0;
    if (*h == '[') {
        if (!(end = strchr(h, ']')))
            return -1;
        h++;
        colon = end[1] == ':' ? end + 1 : NULL;
        if (end[1] && !colon)
            return -1;
    } else {
        colon = strrchr(h, ':');
        end = colon ? colon : h + strlen(h);
    }
    if ((size_t)(end - h) >= n || end == h)
        return -1;
    memcpy(host, h, (size_t)(end - h));
    host[end - h] = 0;
    if (colon) {
        char *stop;
        unsigned long v = strtoul(colon + 1, &stop, 10);
        if (*stop || !colon[1] || v == 0 || v > 65535)
            return -1;
        *port = (unsigned)v;
    }
    return 0;
}

int funcd_oci_registry_matches(const char *entry, const char *host_port)
{
    char a[256], b[256];
    unsigned pa, pb;
    if (!entry || !host_port || split_host_port(entry, a, sizeof(a), &pa) < 0 ||
        split_host_port(host_port, b, sizeof(b), &pb) < 0)
        return 0;
    return strcasecmp(a, b) == 0 && (pa ? pa : 443) == (pb ? pb : 443);
}

int funcd_oci_addr_is_internal(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        uint32_t a = ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr);
        return (a >> 24) == 127 || (a >> 24) == 0 || (a >> 16) == 0xa9fe || /* 169.254/16 */
               (a >> 28) == 0xe || a == 0xffffffffu ||                    /* multicast, bcast */
               a == 0x646464c8u || a == 0xa83f8110u; /* metadata: 100.100.100.200, 168.63.129.16 */
    }
    if (sa->sa_family == AF_INET6) {
        const unsigned char *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        static const unsigned char zero[16], mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff},
                                   nat64[12] = {0, 0x64, 0xff, 0x9b},
                                   nat64_local[6] = {0, 0x64, 0xff, 0x9b, 0, 1},
                                   aws[16] = {0xfd, 0, 0x0e, 0xc2, [14] = 0x02, [15] = 0x54};
        if (memcmp(b, zero, 15) == 0 && (b[15] == 0 || b[15] == 1)) /* :: and ::1 */
            return 1;
        /* ::ffff:a.b.c.d, 64:ff9b::a.b.c.d (NAT64) and ::a.b.c.d reach a.b.c.d;
         * 2002:AABB:CCDD:: (6to4) reaches it through a relay */
        struct sockaddr_in v4 = {.sin_family = AF_INET};
        if (memcmp(b, mapped, 12) == 0 || memcmp(b, nat64, 12) == 0 || memcmp(b, zero, 12) == 0) {
            memcpy(&v4.sin_addr, b + 12, 4);
            return funcd_oci_addr_is_internal((const struct sockaddr *)&v4);
        }
        /* Local-use NAT64 (64:ff9b:1::/48) puts the IPv4 address where its
         * operator's prefix length says (RFC 6052: /48, /56, /64 or /96, byte 8
         * skipped): internal if any reading is. A reading in 0.0.0.0/8 is the
         * zeros of another length's address, not a destination. */
        if (memcmp(b, nat64_local, 6) == 0) {
            static const unsigned char at[4][4] = {{6, 7, 9, 10}, {7, 9, 10, 11}, {9, 10, 11, 12},
                                                   {12, 13, 14, 15}};
            for (int i = 0; i < 4; i++) {
                unsigned char a4[4] = {b[at[i][0]], b[at[i][1]], b[at[i][2]], b[at[i][3]]};
                memcpy(&v4.sin_addr, a4, 4);
                if (a4[0] != 0 && funcd_oci_addr_is_internal((const struct sockaddr *)&v4))
                    return 1;
            }
            return 0;
        }
        if (b[0] == 0x20 && b[1] == 0x02) {
            memcpy(&v4.sin_addr, b + 2, 4);
            return funcd_oci_addr_is_internal((const struct sockaddr *)&v4);
        }
        return (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) || b[0] == 0xff || /* fe80::/10, ff00::/8 */
               memcmp(b, aws, 16) == 0;                                   /* fd00:ec2::254 */
    }
    return 1; /* not an internet address */
}

int funcd_oci_registry_allowed(const char *host_port, const char *const *allowed,
                               const char *const *insecure, char *why, size_t why_len)
{
    for (const char *const *a = insecure; a && *a; a++)
        if (funcd_oci_registry_matches(*a, host_port))
            return 1;
    int have_list = allowed && *allowed;
    for (const char *const *a = allowed; a && *a; a++)
        if (funcd_oci_registry_matches(*a, host_port))
            return 1;
    if (have_list) {
        snprintf(why, why_len, "registry %s is not one this node may pull from (the operator "
                 "allows them with funcd --allowed-registry)", host_port);
        return 0;
    }
    char host[256];
    unsigned port;
    struct in6_addr a6;
    struct in_addr a4;
    int internal = split_host_port(host_port, host, sizeof(host), &port) < 0 ||
                   strcasecmp(host, "localhost") == 0 ||
                   (strlen(host) > 10 && strcasecmp(host + strlen(host) - 10, ".localhost") == 0);
    if (!internal && inet_pton(AF_INET, host, &a4) == 1) {
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr = a4};
        internal = funcd_oci_addr_is_internal((const struct sockaddr *)&sa);
    } else if (!internal && inet_pton(AF_INET6, host, &a6) == 1) {
        struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_addr = a6};
        internal = funcd_oci_addr_is_internal((const struct sockaddr *)&sa);
    }
    if (internal) {
        snprintf(why, why_len, "registry %s is a loopback or link-local address: pulls from it "
                 "are refused unless the operator names it (funcd --insecure-registry or "
                 "--allowed-registry)", host_port);
        return 0;
    }
    return 1;
}
