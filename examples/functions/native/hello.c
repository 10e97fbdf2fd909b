/* hello: a native funcd function in plain C. It serves the worker contract
 * (docs/worker-contract.md) itself: HTTP/1.1 with keep-alive on the Unix
 * socket named by FUNCD_LISTEN, GET /_/ready, a drain on SIGTERM.
 *
 *   cc -O2 -pthread -o hello hello.c
 *
 * Every other request gets {"message":"hello, NAME, from C","path":...}, NAME
 * from ?name= (default "world"); GREETING from the environment replaces "hello". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static atomic_int busy;          /* requests being answered: SIGTERM waits for them */
static volatile sig_atomic_t stopping;

static void on_term(int sig) { (void)sig; stopping = 1; }

/* Value of header `name` in the head (NUL-terminated), copied into out. */
static void header(const char *head, const char *name, char *out, size_t size) {
    size_t n = strlen(name);
    out[0] = '\0';
    for (const char *p = strstr(head, "\r\n"); p && p[2] != '\r'; p = strstr(p + 2, "\r\n")) {
        if (strncasecmp(p + 2, name, n) || p[2 + n] != ':') continue;
        const char *v = p + 3 + n;
        while (*v == ' ') v++;
        snprintf(out, size, "%.*s", (int)strcspn(v, "\r"), v);
        return;
    }
}

/* Copies s into out as JSON string content (quotes, backslashes, controls escaped). */
static void json_escape(const char *s, char *out, size_t size) {
    size_t o = 0;
    for (; *s && o + 7 < size; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') o += (size_t)snprintf(out + o, size - o, "\\%c", c);
        else if (c < 0x20) o += (size_t)snprintf(out + o, size - o, "\\u%04x", c);
        else out[o++] = (char)c;
    }
    out[o] = '\0';
}

static int send_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) return -1;
        p += w, n -= (size_t)w;
    }
    return 0;
}

/* Answers one request; returns -1 when the connection should close. */
static int answer(int fd, char *head, size_t body_len) {
    char method[16] = "", target[2048] = "", id[256], conn[64], name[256] = "world";
    char body[4096 + 2048], resp[8192 + 256];
    if (sscanf(head, "%15s %2047s", method, target) != 2) return -1;
    header(head, "X-Funcd-Invocation-Id", id, sizeof id);
    header(head, "Connection", conn, sizeof conn);
    char *q = strchr(target, '?');
    if (q) {
        *q++ = '\0';
        char *v = strstr(q, "name=");
        if (v && (v == q || v[-1] == '&')) snprintf(name, sizeof name, "%.*s", (int)strcspn(v + 5, "&"), v + 5);
    }
    int ready = !strcmp(target, "/_/ready");
    if (ready) {
        snprintf(body, sizeof body, "ok\n");
    } else {
        char esc_path[1024 * 2], esc_name[256], esc_id[256], esc_greeting[128];
        const char *greeting = getenv("GREETING");
        json_escape(greeting && *greeting ? greeting : "hello", esc_greeting, sizeof esc_greeting);
        json_escape(target, esc_path, sizeof esc_path);
        json_escape(name, esc_name, sizeof esc_name);
        json_escape(id, esc_id, sizeof esc_id);
        snprintf(body, sizeof body,
                 "{\"message\":\"%s, %s, from C\",\"method\":\"%s\",\"path\":\"%s\",\"bodyBytes\":%zu,\"invocationId\":\"%s\"}\n",
                 esc_greeting, esc_name, method, esc_path, body_len, esc_id);
        printf("{\"severity\":\"INFO\",\"msg\":\"said hello to %s\",\"invocationId\":\"%s\"}\n", esc_name, esc_id);
        fflush(stdout);
    }
    int close_after = strcasestr(conn, "close") != NULL || stopping;
    int n = snprintf(resp, sizeof resp, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s\r\n%s",
                     ready ? "text/plain" : "application/json", strlen(body),
                     close_after ? "Connection: close\r\n" : "", strcmp(method, "HEAD") ? body : "");
    if (send_all(fd, resp, (size_t)n) < 0) return -1;
    return close_after ? -1 : 0;
}

static void *serve(void *arg) {
    int fd = (int)(intptr_t)arg;
    char *buf = malloc(65536);
    size_t len = 0, size = 65536;
    if (!buf) goto out;
    for (;;) {
        char *end;
        while (!(end = memmem(buf, len, "\r\n\r\n", 4))) {
            if (len == size - 1) goto out; /* head too large */
            ssize_t n = recv(fd, buf + len, size - 1 - len, 0);
            if (n <= 0) goto out;
            len += (size_t)n;
        }
        atomic_fetch_add(&busy, 1);
        size_t head_len = (size_t)(end - buf) + 4;
        char saved = buf[head_len];
        buf[head_len] = '\0';
        char cl[32];
        header(buf, "Content-Length", cl, sizeof cl);
        size_t body_len = strtoul(cl, NULL, 10), have = len - head_len;
        while (have < body_len) { /* this function ignores the body: read and drop it */
            char drop[16384];
            ssize_t n = recv(fd, drop, sizeof drop < body_len - have ? sizeof drop : body_len - have, 0);
            if (n <= 0) { atomic_fetch_sub(&busy, 1); goto out; }
            have += (size_t)n;
        }
        int rc = answer(fd, buf, body_len);
        atomic_fetch_sub(&busy, 1);
        if (rc < 0) break;
        buf[head_len] = saved;
        size_t used = head_len + body_len < len ? head_len + body_len : len;
        memmove(buf, buf + used, len - used);
        len -= used;
    }
out:
    free(buf);
    close(fd);
    return NULL;
}

int main(void) {
    const char *path = getenv("FUNCD_LISTEN");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (!path || strlen(path) >= sizeof sa.sun_path) {
        fprintf(stderr, "hello: FUNCD_LISTEN must name a Unix socket path\n");
        return 2;
    }
    strcpy(sa.sun_path, path);
    unlink(path);
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) || listen(lfd, 128)) {
        perror("hello: listen");
        return 1;
    }
    /* SIGTERM is blocked except inside ppoll(), so it can never slip in between a check and a wait. */
    sigset_t term, none;
    sigemptyset(&term), sigemptyset(&none);
    sigaddset(&term, SIGTERM);
    sigaction(SIGTERM, &(struct sigaction){.sa_handler = on_term}, NULL);
    pthread_sigmask(SIG_BLOCK, &term, NULL);
    while (!stopping) {
        struct pollfd p = {lfd, POLLIN, 0};
        if (ppoll(&p, 1, NULL, &none) <= 0) continue;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        pthread_t t;
        if (fd >= 0 && pthread_create(&t, NULL, serve, (void *)(intptr_t)fd) == 0) pthread_detach(t);
        else if (fd >= 0) close(fd);
    }
    close(lfd);
    while (atomic_load(&busy) > 0) usleep(1000);
    return 0;
}
