#include "util/misc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <mbedtls/sha256.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <ftw.h>
#include <unistd.h>

#include "funcd/sys/error.h"

int64_t funcd_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t funcd_use_tick(uint64_t *clock)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t t = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    *clock = t > *clock ? t : *clock + 1;
    return *clock;
}

int64_t funcd_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void funcd_rfc3339(int64_t epoch_ms, char *out, size_t out_len)
{
    time_t t = (time_t)(epoch_ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, out_len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void funcd_uuid4(char out[37])
{
    unsigned char r[16];
    size_t got = 0;
    while (got < sizeof(r)) {
        ssize_t n = getrandom(r + got, sizeof(r) - got, 0);
        if (n > 0)
            got += (size_t)n;
        else if (errno != EINTR)
            break; /* cannot happen on Linux >= 3.17 after boot */
    }
    r[6] = (unsigned char)((r[6] & 0x0f) | 0x40);
    r[8] = (unsigned char)((r[8] & 0x3f) | 0x80);
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", r[0],
             r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13], r[14],
             r[15]);
}

char *funcd_strdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

char *funcd_strndup(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (!p)
        return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

int funcd_has_prefix(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

int funcd_listen_tcp(const char *addr, int reuseport, char *bound, size_t bound_len)
{
    char host[256];
    const char *colon = addr ? strrchr(addr, ':') : NULL;
    if (!colon || (size_t)(colon - addr) >= sizeof(host) || colon[1] == '\0')
        return funcd_error_set(FUNCD_EINVAL, "listen address '%s' is not host:port (try 127.0.0.1:0)",
                               addr ? addr : "(null)");
    size_t hl = (size_t)(colon - addr);
    if (hl >= 2 && addr[0] == '[' && addr[hl - 1] == ']') { /* [::1]:80 */
        memcpy(host, addr + 1, hl - 2);
        host[hl - 2] = '\0';
    } else {
        memcpy(host, addr, hl);
        host[hl] = '\0';
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &res);
    if (gai != 0)
        return funcd_error_set(FUNCD_EINVAL, "cannot resolve listen address '%s': %s", addr,
                               gai_strerror(gai));
    int fd = -1, err = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (reuseport)
            setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 1024) == 0)
            break;
        err = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return funcd_error_set(FUNCD_EBIND, "cannot listen on %s: %s (pick a free port, or port 0)",
                               addr, strerror(err));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
        port = ntohs(in->sin_port);
        snprintf(bound, bound_len, "%s:%d", ip, port);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
        port = ntohs(in6->sin6_port);
        snprintf(bound, bound_len, "[%s]:%d", ip, port);
    }
    return fd;
}

int funcd_listen_sibling(int fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int v6only = 0;
    socklen_t vl = sizeof(v6only);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
        return funcd_error_set(FUNCD_EBIND, "cannot read a listener's address: %s",
                               strerror(errno));
    int s = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0)
        return funcd_error_set(FUNCD_EBIND, "cannot open a listening socket: %s", strerror(errno));
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ss.ss_family == AF_INET6 &&
        getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &vl) == 0)
        setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only));
    if (setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0 ||
        bind(s, (struct sockaddr *)&ss, sl) < 0 || listen(s, 1024) < 0) {
        int e = errno;
        close(s);
        return funcd_error_set(FUNCD_EBIND, "cannot open a sibling of a listening socket: %s",
                               strerror(e));
    }
    return s;
}

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    return type == FTW_DP ? rmdir(path) : unlink(path);
}

int funcd_remove_tree(const char *path)
{
    return nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int funcd_link_or_copy(const char *from, const char *to, mode_t mode)
{
    if (link(from, to) == 0)
        return 0;
    int in = open(from, O_RDONLY | O_CLOEXEC);
    int out = in < 0 ? -1 : open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    char buf[65536];
    ssize_t n = 0;
    while (out >= 0 && (n = read(in, buf, sizeof(buf))) > 0)
        if (write(out, buf, (size_t)n) != n) {
            n = -1;
            break;
        }
    int err = errno;
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    if (in >= 0 && out >= 0 && n == 0)
        return 0;
    if (out >= 0)
        unlink(to);
    return funcd_error_set(err == ENOSPC ? FUNCD_ENOSPC : FUNCD_EIO, "cannot copy %s to %s: %s",
                           from, to, strerror(err));
}

char **funcd_strv_dup(const char *const *v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    char **out = calloc(n + 1, sizeof(char *));
    for (size_t i = 0; out && i < n; i++)
        if (!(out[i] = strdup(v[i]))) {
            funcd_strv_free(out);
            return NULL;
        }
    return out;
}

void funcd_strv_free(char **v)
{
    for (char **p = v; p && *p; p++)
        free(*p);
    free(v);
}

int funcd_write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0) {
            errno = EIO;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

void funcd_hex(const void *in, size_t len, char *out)
{
    static const char digits[] = "0123456789abcdef";
    const uint8_t *b = in;
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * len] = '\0';
}

void funcd_sha256_hex(const void *data, size_t len, char out[65])
{
    uint8_t sum[32];
    mbedtls_sha256_ret(data, len, sum, 0);
    funcd_hex(sum, sizeof(sum), out);
}
