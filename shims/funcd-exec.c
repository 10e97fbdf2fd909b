/* funcd-exec: a worker (docs/worker-contract.md) that runs a command once per
 * request, CGI-style: body on stdin, request in the environment, response on
 * stdout. Plain libc on purpose: it runs inside function sandboxes that have
 * nothing else.
 *
 *   FUNCD_LISTEN=/path/worker.sock funcd-exec -- COMMAND [ARGS...]
 *
 * One thread per connection. Children stay in our process group so the
 * platform's SIGKILL to the group reaches them too.
 *
 * KRM mode (the function runner's warm workers): a request with the header
 * "X-Funcd-Krm: 1" is always answered 200 with the command's stdout as the
 * raw body, and the outcome in headers: X-Funcd-Exit-Code (128+N when killed
 * by signal N, -1 when it did not run), X-Funcd-Stderr (base64 of the last
 * 64 KiB of its stderr), and X-Funcd-Error when the shim itself gave up. The
 * caller builds a KRM result from them, so a failing function is not
 * mistaken for a failing worker. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pipe2, accept4, POLLRDHUP, strcasestr */
#endif
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_HEAD (64 * 1024)
#define MAX_BODY ((size_t)64 << 20)
#define MAX_OUTPUT ((size_t)64 << 20)
#define MAX_HEADERS 128
#define MAX_STDERR_LINE 16384
#define MAX_KRM_STDERR (64 * 1024)

extern char **environ;

typedef struct buf { char *p; size_t len, cap; } buf;

typedef struct conn {
    int fd;
    bool idle; /* waiting for the next request: closed at once on SIGTERM */
    struct conn *next;
    buf in;    /* bytes received and not yet consumed */
} conn;

typedef struct request {
    char *head; /* a copy of the head, cut into the strings below */
    char *method, *target, *query, *path_info, *content_type, *invocation_id;
    char *names[MAX_HEADERS], *values[MAX_HEADERS];
    int nheaders, version_minor;
    size_t head_len, content_length;
    bool keep_alive;
    bool krm; /* X-Funcd-Krm: 1 */
} request;

/* Everything below is set before the first thread starts, or guarded by lock. */
static char **cmd;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t all_closed = PTHREAD_COND_INITIALIZER;
static conn *conns;
static bool draining;
static int wake_pipe[2] = {-1, -1};

static void buf_reserve(buf *b, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { fputs("funcd-exec: out of memory\n", stderr); abort(); }
        b->p = p, b->cap = cap;
    }
}

static void buf_add(buf *b, const void *data, size_t n) {
    buf_reserve(b, n);
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void buf_printf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_printf(buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0) { fputs("funcd-exec: out of memory\n", stderr); abort(); }
    buf_add(b, s, (size_t)n);
    free(s);
}

static void buf_json_str(buf *b, const char *s, size_t n) {
    buf_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') { buf_add(b, "\\", 1); buf_add(b, &s[i], 1); }
        else if (c < 0x20) buf_printf(b, "\\u%04x", c);
        else buf_add(b, &s[i], 1);
    }
    buf_add(b, "\"", 1);
}

/* write() serves sockets too: SIGPIPE is ignored, so a gone peer is just EPIPE. */
static bool write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w, n -= (size_t)w;
    }
    return true;
}

/* Writes whole lines under a lock so concurrent invocations never interleave. */
static void write_line(int fd, const char *s, size_t n) {
    pthread_mutex_lock(&log_lock);
    write_all(fd, s, n);
    pthread_mutex_unlock(&log_lock);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static const struct { int status; const char *phrase, *reason; } statuses[] = {
    {200, "OK", NULL}, {302, "Found", NULL}, {400, "Bad Request", "BadRequest"},
    {411, "Length Required", "LengthRequired"}, {413, "Content Too Large", "RequestEntityTooLarge"},
    {431, "Request Header Fields Too Large", "RequestHeaderFieldsTooLarge"}, {502, "Bad Gateway", NULL},
};

/* The reason phrase (or, with want_reason, the JSON Status reason) of a status. */
static const char *status_text(int status, bool want_reason) {
    for (size_t i = 0; i < sizeof statuses / sizeof *statuses; i++)
        if (statuses[i].status == status) return want_reason ? statuses[i].reason : statuses[i].phrase;
    return want_reason ? "BadRequest" : "Status";
}

/* headers: zero or more complete "Name: value\r\n" lines. */
static bool send_response(conn *c, int status, const char *reason, const char *headers,
                          const char *body, size_t body_len, bool head_only, bool close) {
    buf out = {0};
    buf_printf(&out, "HTTP/1.1 %d %s\r\n", status, reason ? reason : status_text(status, false));
    buf_add(&out, headers, strlen(headers));
    buf_printf(&out, "Content-Length: %zu\r\n%s\r\n", body_len, close ? "Connection: close\r\n" : "");
    if (!head_only) buf_add(&out, body, body_len);
    bool ok = write_all(c->fd, out.p, out.len);
    free(out.p);
    return ok;
}

static void send_status(conn *c, int status, const char *reason, const char *message, bool close) {
    buf body = {0};
    buf_printf(&body, "{\"kind\":\"Status\",\"code\":%d,\"reason\":\"%s\",\"message\":", status, reason);
    buf_json_str(&body, message, strlen(message));
    buf_add(&body, "}", 1);
    send_response(c, status, NULL, "Content-Type: application/json\r\n", body.p, body.len, false, close);
    free(body.p);
}

static bool is_token(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && (!s[i] || !strchr("!#$%&'*+-.^_`|~", s[i]))) return false;
    return n > 0;
}

/* "METHOD /target HTTP/1.x", cut into r's strings. */
static int parse_request_line(request *r, char *line) {
    char *sp1 = strchr(line, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
    if (!sp1 || !sp2 || strchr(sp2 + 1, ' ') || !is_token(line, (size_t)(sp1 - line))) return 400;
    *sp1 = *sp2 = '\0';
    r->method = line, r->target = sp1 + 1;
    if (r->target[0] != '/' || strncmp(sp2 + 1, "HTTP/1.", 7) || !strchr("01", sp2[8]) || sp2[9]) return 400;
    r->version_minor = sp2[8] - '0';
    r->keep_alive = r->version_minor == 1;
    return 0;
}

/* One "Name: value" line: records it, and what the server itself must know. */
static int parse_header(request *r, char *line, char *eol, bool *have_length) {
    char *colon = strchr(line, ':');
    if (!colon || !is_token(line, (size_t)(colon - line))) return 400; /* obs-fold too */
    if (r->nheaders == MAX_HEADERS) return 431;
    *colon = '\0';
    char *v = colon + 1, *ve = eol;
    while (*v == ' ' || *v == '\t') v++;
    while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) *--ve = '\0';
    for (char *p = v; *p; p++)
        if ((unsigned char)*p < 0x20 && *p != '\t') return 400;
    r->names[r->nheaders] = line, r->values[r->nheaders++] = v;
    if (!strcasecmp(line, "Transfer-Encoding")) return 411;
    if (!strcasecmp(line, "Content-Length")) {
        char *e;
        errno = 0;
        unsigned long long n = strtoull(v, &e, 10);
        if (*v < '0' || *v > '9' || *e || errno || (*have_length && n != r->content_length)) return 400;
        if (n > MAX_BODY) return 413;
        r->content_length = (size_t)n, *have_length = true;
    } else if (!strcasecmp(line, "Connection")) {
        if (strcasestr(v, "close")) r->keep_alive = false;
        else if (strcasestr(v, "keep-alive")) r->keep_alive = true;
    } else if (!strcasecmp(line, "Content-Type")) {
        r->content_type = v;
    } else if (!strcasecmp(line, "X-Funcd-Invocation-Id")) {
        r->invocation_id = v;
    } else if (!strcasecmp(line, "X-Funcd-Krm")) {
        r->krm = !strcmp(v, "1");
    }
    return 0;
}

/* PATH_INFO is percent-decoded, as CGI (RFC 3875) has it; REQUEST_URI stays raw. */
static int decode_path(request *r) {
    size_t len = strcspn(r->target, "?"), n = 0;
    r->query = r->target[len] ? r->target + len + 1 : "";
    r->path_info = malloc(len + 1);
    for (size_t i = 0; i < len; i++) {
        const char *t = r->target + i;
        if (t[0] == '%' && i + 2 < len && isxdigit((unsigned char)t[1]) && isxdigit((unsigned char)t[2])) {
            char hex[3] = {t[1], t[2], '\0'};
            if (!(r->path_info[n++] = (char)strtol(hex, NULL, 16))) return 400; /* %00 */
            i += 2;
        } else {
            r->path_info[n++] = t[0];
        }
    }
    r->path_info[n] = '\0';
    return 0;
}

/* Parses the head at the start of c->in into r (which owns a copy: c->in may
 * move while the body arrives). Returns 0 or the HTTP status to refuse with. */
static int parse_head(conn *c, request *r) {
    memset(r, 0, sizeof *r);
    r->head_len = (size_t)(strstr(c->in.p, "\r\n\r\n") - c->in.p) + 4;
    if (r->head_len > MAX_HEAD) return 431;
    r->head = malloc(r->head_len + 1);
    memcpy(r->head, c->in.p, r->head_len);
    r->head[r->head_len - 2] = '\0'; /* the empty line's CRLF ends the header loop */
    char *eol = strstr(r->head, "\r\n");
    *eol = '\0';
    int rc = parse_request_line(r, r->head);
    bool have_length = false;
    for (char *line = eol + 2; !rc && *line; line = eol + 2) {
        eol = strstr(line, "\r\n");
        *eol = '\0';
        rc = parse_header(r, line, eol, &have_length);
    }
    return rc ? rc : decode_path(r);
}

/* Inherited variables a request must not leak into (CONTENT_TYPE from spec.env
 * on a request without a body, say), besides those the request sets itself. */
static bool env_is_cgi(const char *kv) {
    static const char *const names[] = {"GATEWAY_INTERFACE=", "SERVER_PROTOCOL=", "SERVER_SOFTWARE=",
        "REQUEST_METHOD=", "PATH_INFO=", "QUERY_STRING=", "REQUEST_URI=", "SCRIPT_NAME=",
        "CONTENT_TYPE=", "CONTENT_LENGTH=", "FUNCD_INVOCATION_ID="};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strncmp(kv, names[i], strlen(names[i]))) return true;
    return false;
}

static void env_add(buf *strs, const char *name, const char *value) {
    buf_printf(strs, "%s=", name);
    buf_add(strs, value, strlen(value) + 1); /* keep the NUL: strs holds them back to back */
}

/* Returns a NULL-terminated envp whose strings live in *strs. */
static char **build_env(const request *r, buf *strs) {
    size_t count = 0, nenv = 0;
    env_add(strs, "GATEWAY_INTERFACE", "CGI/1.1");
    env_add(strs, "SERVER_PROTOCOL", r->version_minor ? "HTTP/1.1" : "HTTP/1.0");
    env_add(strs, "SERVER_SOFTWARE", "funcd-exec");
    env_add(strs, "REQUEST_METHOD", r->method);
    env_add(strs, "PATH_INFO", r->path_info);
    env_add(strs, "QUERY_STRING", r->query);
    env_add(strs, "REQUEST_URI", r->target);
    env_add(strs, "SCRIPT_NAME", "");
    char len[32];
    snprintf(len, sizeof len, "%zu", r->content_length);
    env_add(strs, "CONTENT_LENGTH", len);
    if (r->content_type) env_add(strs, "CONTENT_TYPE", r->content_type);
    env_add(strs, "FUNCD_INVOCATION_ID", r->invocation_id ? r->invocation_id : "");
    for (int i = 0; i < r->nheaders; i++) {
        const char *h = r->names[i];
        /* "Proxy" would become HTTP_PROXY, which many tools obey (httpoxy). */
        if (!strcasecmp(h, "Content-Length") || !strcasecmp(h, "Content-Type") || !strcasecmp(h, "Proxy"))
            continue;
        char name[300] = "HTTP_";
        size_t n = 5;
        for (; *h && n < sizeof name - 1; h++)
            name[n++] = isalnum((unsigned char)*h) ? (char)toupper((unsigned char)*h) : '_';
        name[n] = '\0';
        env_add(strs, name, r->values[i]);
    }
    size_t ours = strs->len;
    for (char **e = environ; *e; e++, nenv++) {
        size_t name_len = strcspn(*e, "=");
        bool taken = env_is_cgi(*e);
        for (size_t off = 0; off < ours && !taken; off += strlen(strs->p + off) + 1)
            taken = !strncmp(strs->p + off, *e, name_len + 1);
        if (!taken) buf_add(strs, *e, strlen(*e) + 1);
    }
    char **envp = calloc(nenv + (size_t)r->nheaders + 16, sizeof *envp);
    for (size_t off = 0; off < strs->len; off += strlen(strs->p + off) + 1) envp[count++] = strs->p + off;
    envp[count] = NULL;
    return envp;
}

typedef struct outcome {
    buf out, err_line;  /* stdout; the last non-empty stderr line */
    buf err_partial;
    buf err_all;        /* KRM mode: stderr, trimmed to its tail now and then */
    bool keep_stderr;
    int wait_status;
    bool spawned, too_large, client_gone;
} outcome;

static void forward_stderr(outcome *o, bool eof) {
    char *start = o->err_partial.p, *nl;
    size_t left = o->err_partial.len;
    while (left && ((nl = memchr(start, '\n', left)) || eof || left > MAX_STDERR_LINE)) {
        size_t n = nl ? (size_t)(nl - start) : (left > MAX_STDERR_LINE ? MAX_STDERR_LINE : left);
        size_t text = n;
        if (text > 0 && start[text - 1] == '\r')
            text--;
        if (text > 0 && text <= MAX_STDERR_LINE) {
            buf line = {0};
            buf_add(&line, start, text);
            buf_add(&line, "\n", 1);
            write_line(2, line.p, line.len);
            o->err_line.len = 0;
            buf_add(&o->err_line, start, text < 1024 ? text : 1024);
            free(line.p);
        }
        size_t used = nl ? n + 1 : n;
        start += used, left -= used;
    }
    if (left && start != o->err_partial.p) memmove(o->err_partial.p, start, left);
    o->err_partial.len = left;
}

/* Keeps at most the last MAX_KRM_STDERR bytes (the end says why it failed),
 * trimming only once twice that piled up so the copying stays linear. */
static void keep_stderr_tail(outcome *o, const char *data, size_t n) {
    buf_add(&o->err_all, data, n);
    if (o->err_all.len > 2 * MAX_KRM_STDERR) {
        memmove(o->err_all.p, o->err_all.p + o->err_all.len - MAX_KRM_STDERR, MAX_KRM_STDERR);
        o->err_all.len = MAX_KRM_STDERR;
    }
}

/* The command as answers name it: its file name, not where it lives on the
 * host (the data plane answers anyone; issue 11). */
static const char *cmd_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash && slash[1] ? slash + 1 : path;
}

/* Starts the command on the child ends of the pipes; -1 with o->err_line set on failure. */
static pid_t spawn_command(const request *r, int in, int out, int err, outcome *o) {
    buf strs = {0};
    char **envp = build_env(r, &strs);
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none, defaults; /* what we block or ignore must not reach the command */
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE), sigaddset(&defaults, SIGTERM), sigaddset(&defaults, SIGINT);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in, 0);
    posix_spawn_file_actions_adddup2(&fa, out, 1);
    posix_spawn_file_actions_adddup2(&fa, err, 2);
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    pid_t pid;
    int rc = posix_spawnp(&pid, cmd[0], &fa, &attr, cmd, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    free(envp);
    free(strs.p);
    if (rc) buf_printf(&o->err_line, "cannot run %s: %s", cmd_name(cmd[0]), strerror(rc));
    return rc ? -1 : pid;
}

/* Runs the command with the body on stdin until its stdout and stderr close. */
static void run_command(conn *c, const request *r, const char *body, outcome *o) {
    int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
    pid_t pid = -1;
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC))
        buf_printf(&o->err_line, "cannot create pipes: %s", strerror(errno));
    else
        pid = spawn_command(r, in[0], out[1], err[1], o);
    close(in[0]), close(out[1]), close(err[1]);
    if (pid < 0) {
        close(in[1]), close(out[0]), close(err[0]);
        return;
    }
    o->spawned = true;
    fcntl(in[1], F_SETFL, O_NONBLOCK);
    size_t sent = 0;
    struct pollfd p[4] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}, {in[1], POLLOUT, 0}, {c->fd, POLLRDHUP, 0}};
    if (r->content_length == 0) close(in[1]), p[2].fd = -1;
    while (p[0].fd >= 0 || p[1].fd >= 0) {
        if (poll(p, 4, -1) < 0) continue; /* EINTR */
        char chunk[65536];
        for (int i = 0; i < 2; i++) {
            ssize_t n = p[i].revents ? read(p[i].fd, chunk, sizeof chunk) : -1;
            if (n == 0 || (n < 0 && p[i].revents && errno != EINTR)) {
                close(p[i].fd), p[i].fd = -1;
            } else if (n > 0 && i == 1) {
                buf_add(&o->err_partial, chunk, (size_t)n);
                forward_stderr(o, false);
                if (o->keep_stderr) keep_stderr_tail(o, chunk, (size_t)n);
            } else if (n > 0 && !o->too_large && o->out.len + (size_t)n > MAX_OUTPUT) {
                o->too_large = true;
                kill(pid, SIGKILL);
            } else if (n > 0 && !o->too_large) {
                buf_add(&o->out, chunk, (size_t)n);
            }
        }
        if (p[2].fd >= 0 && p[2].revents) {
            ssize_t n = write(p[2].fd, body + sent, r->content_length - sent);
            if (n > 0) sent += (size_t)n;
            if ((n < 0 && errno != EAGAIN && errno != EINTR) || sent == r->content_length) {
                close(p[2].fd); /* EPIPE: the command does not read its stdin, which is fine */
                p[2].fd = -1;
            }
        }
        if (p[3].revents) { /* the gateway gave up (timeout): nobody wants the answer */
            o->client_gone = true;
            kill(pid, SIGKILL);
        }
        if (o->client_gone || o->too_large) { /* don't wait for grandchildren holding the pipes */
            for (int i = 0; i < 2; i++)
                if (p[i].fd >= 0) close(p[i].fd), p[i].fd = -1;
        }
    }
    if (p[2].fd >= 0) close(p[2].fd);
    forward_stderr(o, true);
    while (waitpid(pid, &o->wait_status, 0) < 0 && errno == EINTR) {}
}

/* Sends the command's stdout as the response: CGI header block or raw body. */
static bool send_output(conn *c, outcome *o, bool head_only, bool close, int *status) {
    char *p = o->out.p ? o->out.p : "", *end = p + o->out.len;
    buf hdrs = {0};
    const char *reason = NULL;
    char reason_buf[128] = "";
    bool cgi = false, have_type = false, have_location = false, have_status = false;
    *status = 200;
    for (char *line = p; line < end;) {
        char *nl = memchr(line, '\n', (size_t)(end - line));
        if (!nl) break;
        size_t n = (size_t)(nl - line);
        if (n && line[n - 1] == '\r') n--;
        if (n == 0) { cgi = line != p; p = nl + 1; break; }
        char *colon = memchr(line, ':', n);
        if (!colon || !is_token(line, (size_t)(colon - line)) || memchr(line, '\r', n) || memchr(line, '\0', n)) break;
        size_t nlen = (size_t)(colon - line);
        char *v = colon + 1;
        while (v < line + n && (*v == ' ' || *v == '\t')) v++;
        int vlen = (int)(line + n - v);
        if (nlen == 6 && !strncasecmp(line, "Status", 6)) {
            if (vlen < 3 || (vlen > 3 && v[3] != ' ') || sscanf(v, "%3d", status) != 1 || *status < 100 ||
                *status > 599)
                break;
            have_status = true;
            snprintf(reason_buf, sizeof reason_buf, "%.*s", vlen > 4 ? vlen - 4 : 0, v + 4);
            reason = reason_buf[0] ? reason_buf : NULL;
        } else if ((nlen == 14 && !strncasecmp(line, "Content-Length", 14)) ||
                   (nlen == 17 && !strncasecmp(line, "Transfer-Encoding", 17)) ||
                   (nlen == 10 && !strncasecmp(line, "Connection", 10))) {
            /* framing is ours to decide */
        } else {
            have_type |= nlen == 12 && !strncasecmp(line, "Content-Type", 12);
            have_location |= nlen == 8 && !strncasecmp(line, "Location", 8);
            buf_printf(&hdrs, "%.*s: %.*s\r\n", (int)nlen, line, vlen, v);
        }
        line = nl + 1;
    }
    if (!cgi) {
        p = o->out.p ? o->out.p : "", *status = 200, reason = NULL, hdrs.len = 0, have_type = false;
    } else if (have_location && !have_status) {
        *status = 302; /* CGI's "local redirect" rule */
    }
    if (!have_type) buf_printf(&hdrs, "Content-Type: application/octet-stream\r\n");
    bool ok = send_response(c, *status, reason, hdrs.p, p, (size_t)(end - p), head_only, close);
    free(hdrs.p);
    return ok;
}

static void buf_base64(buf *b, const unsigned char *s, size_t n) {
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    buf_reserve(b, (n + 2) / 3 * 4);
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)s[i] << 16 | (i + 1 < n ? (unsigned)s[i + 1] << 8 : 0) | (i + 2 < n ? s[i + 2] : 0);
        char q[4] = {abc[v >> 18 & 63], abc[v >> 12 & 63], i + 1 < n ? abc[v >> 6 & 63] : '=', i + 2 < n ? abc[v & 63] : '='};
        buf_add(b, q, 4);
    }
}

/* KRM mode: 200 with stdout as the body whatever happened; the outcome goes in headers. */
static bool send_krm(conn *c, const outcome *o, int exit_code, const char *error, bool close) {
    buf hdrs = {0};
    buf_printf(&hdrs, "Content-Type: application/octet-stream\r\nX-Funcd-Exit-Code: %d\r\n", exit_code);
    size_t err_len = o->err_all.len > MAX_KRM_STDERR ? MAX_KRM_STDERR : o->err_all.len;
    buf_add(&hdrs, "X-Funcd-Stderr: ", 16);
    buf_base64(&hdrs, (const unsigned char *)o->err_all.p + o->err_all.len - err_len, err_len);
    buf_add(&hdrs, "\r\n", 2);
    if (error) {
        buf_add(&hdrs, "X-Funcd-Error: ", 15);
        for (const char *p = error; *p; p++) /* a header value holds no control characters */
            buf_add(&hdrs, (unsigned char)*p < 0x20 ? " " : p, 1);
        buf_add(&hdrs, "\r\n", 2);
    }
    size_t body_len = o->too_large ? 0 : o->out.len;
    bool ok = send_response(c, 200, NULL, hdrs.p, body_len ? o->out.p : "", body_len, false, close);
    free(hdrs.p);
    return ok;
}

static void log_invocation(const request *r, int status, int exit_code, double ms, const char *error) {
    buf l = {0};
    /* KRM mode answers 200 even when the command failed: the error decides. */
    bool failed = status >= 500 || (error && status < 400);
    buf_printf(&l, "{\"severity\":\"%s\",\"msg\":", failed ? "ERROR" : status == 499 ? "WARNING" : "INFO");
    const char *msg = error ? error : "invocation finished";
    buf_json_str(&l, msg, strlen(msg));
    buf_add(&l, ",\"invocationId\":", 16);
    const char *id = r->invocation_id ? r->invocation_id : "";
    buf_json_str(&l, id, strlen(id));
    buf_printf(&l, ",\"method\":");
    buf_json_str(&l, r->method, strlen(r->method));
    buf_printf(&l, ",\"status\":%d,\"exitCode\":%d,\"durationMs\":%.3f}\n", status, exit_code, ms);
    write_line(1, l.p, l.len);
    free(l.p);
}

/* Serves one request whose head is complete in c->in. false: close the connection. */
static bool serve_request(conn *c, request *r) {
    if (c->in.len < r->head_len + r->content_length)
        buf_reserve(&c->in, r->head_len + r->content_length - c->in.len);
    while (c->in.len < r->head_len + r->content_length) {
        char chunk[65536];
        ssize_t n = recv(c->fd, chunk, sizeof chunk, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        buf_add(&c->in, chunk, (size_t)n);
    }
    bool head_only = !strcmp(r->method, "HEAD");
    pthread_mutex_lock(&lock);
    bool close = !r->keep_alive || draining;
    pthread_mutex_unlock(&lock);
    const char *path_end = r->target + strcspn(r->target, "?");
    if ((head_only || !strcmp(r->method, "GET")) && path_end - r->target == 8 && !strncmp(r->target, "/_/ready", 8))
        return send_response(c, 200, NULL, "Content-Type: text/plain\r\n", "ok\n", 3, head_only, close) && !close;
    double start = now_ms();
    outcome o = {.keep_stderr = r->krm};
    run_command(c, r, c->in.p + r->head_len, &o);
    int status = 502, exit_code = -1;
    bool ok = !o.client_gone;
    buf msg = {0};
    if (o.spawned && WIFEXITED(o.wait_status)) exit_code = WEXITSTATUS(o.wait_status);
    if (o.client_gone) {
        buf_printf(&msg, "client closed the connection; %s killed", cmd_name(cmd[0]));
        status = 499;
    } else if (o.too_large) {
        buf_printf(&msg, "%s wrote more than %zu bytes to stdout", cmd_name(cmd[0]), MAX_OUTPUT);
    } else if (!o.spawned) {
        buf_printf(&msg, "%s", o.err_line.p);
    } else if (exit_code != 0) {
        if (exit_code > 0) buf_printf(&msg, "%s exited with status %d", cmd_name(cmd[0]), exit_code);
        else buf_printf(&msg, "%s was killed by signal %d", cmd_name(cmd[0]), WTERMSIG(o.wait_status));
        if (o.err_line.len) buf_printf(&msg, ": %s", o.err_line.p);
    }
    if (ok && r->krm) {
        /* A failing function is an answer here, not a failed worker. */
        bool shim_error = o.too_large || !o.spawned;
        int code = shim_error ? -1 : WIFSIGNALED(o.wait_status) ? 128 + WTERMSIG(o.wait_status) : exit_code;
        ok = send_krm(c, &o, code, shim_error ? msg.p : NULL, close);
        status = 200;
    } else if (ok && msg.len) {
        send_status(c, 502, "FunctionFailed", msg.p, close);
    } else if (ok) {
        ok = send_output(c, &o, head_only, close, &status);
    }
    log_invocation(r, status, exit_code, now_ms() - start, msg.len ? msg.p : NULL);
    free(msg.p), free(o.out.p), free(o.err_line.p), free(o.err_partial.p), free(o.err_all.p);
    return ok && !close;
}

/* Waits for a complete head. 1: got one; 0: connection over; otherwise a status to refuse with. */
static int read_head(conn *c) {
    while (!c->in.p || !strstr(c->in.p, "\r\n\r\n")) {
        if (c->in.len > MAX_HEAD) return 431;
        if (c->in.len && memchr(c->in.p, '\0', c->in.len)) return 400;
        pthread_mutex_lock(&lock);
        c->idle = c->in.len == 0;
        bool stop = c->idle && draining;
        pthread_mutex_unlock(&lock);
        if (stop) return 0;
        char chunk[16384];
        ssize_t n = recv(c->fd, chunk, sizeof chunk, 0);
        if (n < 0 && errno == EINTR) continue;
        pthread_mutex_lock(&lock);
        c->idle = false;
        pthread_mutex_unlock(&lock);
        if (n <= 0) return 0;
        buf_add(&c->in, chunk, (size_t)n);
    }
    return 1;
}

static void *conn_main(void *arg) {
    conn *c = arg;
    for (;;) {
        request r = {0};
        int rc = read_head(c);
        if (rc == 0) break;
        if (rc == 1) rc = parse_head(c, &r);
        if (rc == 0) {
            bool keep = serve_request(c, &r);
            size_t used = r.head_len + r.content_length;
            free(r.path_info), free(r.head);
            if (!keep) break;
            memmove(c->in.p, c->in.p + used, c->in.len - used + 1);
            c->in.len -= used;
            continue;
        }
        free(r.path_info), free(r.head);
        const char *why = rc == 411 ? "request bodies must carry Content-Length (chunked is not supported)"
                        : rc == 413 ? "request body too large"
                        : rc == 431 ? "request head too large (limit 64 KiB)" : "malformed HTTP request";
        send_status(c, rc, status_text(rc, true), why, true);
        break;
    }
    pthread_mutex_lock(&lock);
    for (conn **pp = &conns; *pp; pp = &(*pp)->next)
        if (*pp == c) { *pp = c->next; break; }
    close(c->fd);
    free(c->in.p);
    free(c);
    if (!conns) pthread_cond_signal(&all_closed);
    pthread_mutex_unlock(&lock);
    return NULL;
}

static void on_signal(int sig) {
    int saved = errno;
    char b = (char)sig;
    if (write(wake_pipe[1], &b, 1) < 0) {} /* pipe full: a wake-up is pending anyway */
    errno = saved;
}

static int listen_on(const char *path) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        fprintf(stderr, "funcd-exec: FUNCD_LISTEN is too long for a Unix socket path: %s\n", path);
        return -1;
    }
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    unlink(path); /* a socket left behind by a previous worker */
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 128)) {
        fprintf(stderr, "funcd-exec: cannot listen on %s: %s\n", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    return fd;
}

int main(int argc, char **argv) {
    if (argc < 3 || strcmp(argv[1], "--")) {
        fputs("usage: FUNCD_LISTEN=/path/worker.sock funcd-exec -- COMMAND [ARGS...]\n", stderr);
        return 2;
    }
    cmd = argv + 2;
    const char *path = getenv("FUNCD_LISTEN");
    if (!path || !*path) {
        fputs("funcd-exec: FUNCD_LISTEN is not set (the platform sets it to the worker's socket path)\n", stderr);
        return 2;
    }
    int null_fd; /* keep fds 0-2 taken so no socket or pipe lands there */
    while ((null_fd = open("/dev/null", O_RDWR)) >= 0 && null_fd <= 2) {}
    if (null_fd > 2) close(null_fd);
    if (pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK)) return 1;
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    int lfd = listen_on(path);
    if (lfd < 0) return 1;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    struct pollfd p[2] = {{lfd, POLLIN, 0}, {wake_pipe[0], POLLIN, 0}};
    while (!p[1].revents) {
        if (poll(p, 2, -1) < 0 || !p[0].revents) continue;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE) poll(NULL, 0, 50); /* let connections close */
            continue;
        }
        conn *c = calloc(1, sizeof *c);
        pthread_t t;
        c->fd = fd;
        pthread_mutex_lock(&lock);
        c->next = conns, conns = c;
        if (pthread_create(&t, &attr, conn_main, c)) {
            conns = c->next;
            close(fd);
            free(c);
        }
        pthread_mutex_unlock(&lock);
    }
    /* SIGTERM: stop accepting, close idle connections, let running invocations finish. */
    close(lfd);
    pthread_mutex_lock(&lock);
    draining = true;
    for (conn *c = conns; c; c = c->next)
        if (c->idle) shutdown(c->fd, SHUT_RDWR);
    while (conns) pthread_cond_wait(&all_closed, &lock);
    pthread_mutex_unlock(&lock);
    pthread_attr_destroy(&attr);
    return 0;
}
