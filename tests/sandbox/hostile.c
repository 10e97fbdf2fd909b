/*
 * A hostile function for the sandbox tests: it serves the worker contract
 * on FUNCD_LISTEN and, per request, tries one way out of its sandbox,
 * answering {"attack": ..., "escaped": true|false, "detail": ...}.
 *
 * Every attempt is harmless where the sandbox is off, so the tests can show
 * that the boundary is what stops it: the destructive form of an attack
 * (kill -9 -1) runs only when this process is in a pid namespace of its
 * own, and the others are bounded (a fork loop of at most `n` children, an
 * allocation of `mb` MiB, a mount inside a private mount namespace).
 *
 *   GET /read?path=P       read a host file
 *   GET /connect?port=N    connect to 127.0.0.1:N
 *   GET /ptrace?pid=P      attach to process P, then detach
 *   GET /mount             mount a tmpfs
 *   GET /raw               open a raw socket
 *   GET /kill?pid=P        kill -9 -1 (in a pid namespace), else signal 0 to P
 *   GET /fork?n=N          fork up to N children that wait, then end them
 *   GET /hog?mb=M          allocate and touch M MiB
 *   GET /write?dir=D       create a file in D (the artifact)
 *   GET /setuid?path=P     run the setuid program P; its capabilities
 *   GET /whoami            uid, pid and capabilities of this process
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/time.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static char answer[4096];

static void say(const char *attack, int escaped, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void say(const char *attack, int escaped, const char *fmt, ...)
{
    char detail[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    for (char *p = detail; *p; p++)
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 32)
            *p = ' ';
    snprintf(answer, sizeof(answer), "{\"attack\":\"%s\",\"escaped\":%s,\"detail\":\"%s\"}",
             attack, escaped ? "true" : "false", detail);
}

static const char *arg(const char *query, const char *key, char *out, size_t len)
{
    size_t klen = strlen(key);
    for (const char *p = query; p && *p;) {
        if (strncmp(p, key, klen) == 0 && p[klen] == '=') {
            size_t n = strcspn(p + klen + 1, "&");
            snprintf(out, len, "%.*s", (int)n, p + klen + 1);
            return out;
        }
        p = strchr(p, '&');
        p = p ? p + 1 : NULL;
    }
    snprintf(out, len, "%s", "");
    return out;
}

static long num(const char *query, const char *key, long dflt)
{
    char buf[64];
    arg(query, key, buf, sizeof(buf));
    return buf[0] ? strtol(buf, NULL, 10) : dflt;
}

static void capabilities(char *out, size_t len)
{
    FILE *f = fopen("/proc/self/status", "re");
    char line[256];
    out[0] = '\0';
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "CapEff:", 7) == 0)
            snprintf(out, len, "%s", line + 8 + strspn(line + 7, " \t") - 1);
    if (f)
        fclose(f);
    out[strcspn(out, "\n")] = '\0';
}

static void do_read(const char *q)
{
    char path[512], buf[128] = "";
    int fd = open(arg(q, "path", path, sizeof(path)), O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    int err = errno;
    if (fd >= 0)
        close(fd);
    if (n >= 0) {
        buf[n] = '\0';
        say("read", 1, "read %s: %s", path, buf);
    } else {
        say("read", 0, "open %s: %s", path, strerror(err));
    }
}

static void do_connect(const char *q)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)num(q, "port", 0)),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = s >= 0 ? connect(s, (struct sockaddr *)&sin, sizeof(sin)) : -1;
    int err = errno;
    if (s >= 0)
        close(s);
    if (rc == 0)
        say("connect", 1, "connected to 127.0.0.1:%ld", num(q, "port", 0));
    else
        say("connect", 0, "connect: %s", strerror(err));
}

static void do_ptrace(const char *q)
{
    pid_t pid = (pid_t)num(q, "pid", 0);
    if (ptrace(PTRACE_ATTACH, pid, NULL, NULL) == 0) {
        /* A tracee must be stopped to be let go, or it stays ours. */
        waitpid(pid, NULL, __WALL);
        ptrace(PTRACE_DETACH, pid, NULL, NULL);
        say("ptrace", 1, "attached to %ld", (long)pid);
    } else {
        say("ptrace", 0, "ptrace %ld: %s", (long)pid, strerror(errno));
    }
}

/* In a child: a private mount namespace first, where the sandbox is off,
 * so that nothing reaches the host's mounts. */
static void do_mount(const char *q)
{
    int pipefd[2];
    if (pipe(pipefd) != 0) {
        say("mount", 0, "pipe: %s", strerror(errno));
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        int errs[2] = {0, 0};
        if (unshare(CLONE_NEWNS) != 0)
            errs[0] = errno;
        else
            mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
        if (errs[0] && getpid() > 16) { /* no namespace and not sandboxed: stop here */
            errs[1] = EAGAIN;
        } else if (mount("tmpfs", "/tmp", "tmpfs", 0, "size=1m") != 0) {
            errs[1] = errno;
        }
        ssize_t ignored = write(pipefd[1], errs, sizeof(errs));
        (void)ignored;
        _exit(0);
    }
    close(pipefd[1]);
    int errs[2] = {-1, -1};
    ssize_t n = pid > 0 ? read(pipefd[0], errs, sizeof(errs)) : -1;
    close(pipefd[0]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    if (n != (ssize_t)sizeof(errs))
        say("mount", 0, "the child said nothing");
    else if (errs[1] == 0)
        say("mount", 1, "mounted a tmpfs on /tmp (unshare: %s)",
            errs[0] ? strerror(errs[0]) : "ok");
    else
        say("mount", 0, "unshare: %s; mount: %s", errs[0] ? strerror(errs[0]) : "ok",
            strerror(errs[1]));
}

static void do_raw(const char *q)
{
    int s = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP);
    if (s >= 0) {
        close(s);
        say("raw", 1, "opened a raw ICMP socket");
    } else {
        say("raw", 0, "socket(SOCK_RAW): %s", strerror(errno));
    }
}

/* kill -9 -1 for real only where it can reach nothing but this sandbox
 * (a pid namespace of our own: our pid is tiny); elsewhere the harmless
 * probe: may we signal the test's sentinel process at all? */
static void do_kill(const char *q)
{
    pid_t sentinel = (pid_t)num(q, "pid", 0);
    if (getpid() <= 16) {
        int rc = kill(-1, SIGKILL);
        int err = errno;
        int reach = kill(sentinel, 0) == 0;
        say("kill", reach, "kill(-1, SIGKILL): %s; sentinel %ld %s", rc == 0 ? "ok" : strerror(err),
            (long)sentinel, reach ? "reachable" : "not visible");
        return;
    }
    if (kill(sentinel, 0) == 0)
        say("kill", 1, "may signal the sentinel %ld (kill -1 would reach the host)",
            (long)sentinel);
    else
        say("kill", 0, "sentinel %ld: %s", (long)sentinel, strerror(errno));
}

static void do_fork(const char *q)
{
    long want = num(q, "n", 100);
    static pid_t kids[4096];
    if (want > 4096)
        want = 4096;
    long made = 0;
    int err = 0;
    for (; made < want; made++) {
        pid_t pid = fork();
        if (pid == 0) {
            pause();
            _exit(0);
        }
        if (pid < 0) {
            err = errno;
            break;
        }
        kids[made] = pid;
    }
    for (long i = 0; i < made; i++)
        kill(kids[i], SIGKILL);
    for (long i = 0; i < made; i++)
        waitpid(kids[i], NULL, 0);
    say("fork", made == want, "forked %ld of %ld%s%s", made, want, err ? ": " : "",
        err ? strerror(err) : "");
}

static void do_hog(const char *q)
{
    long mb = num(q, "mb", 16);
    size_t len = (size_t)mb << 20;
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        say("hog", 0, "mmap %ld MiB: %s", mb, strerror(errno));
        return;
    }
    for (size_t i = 0; i < len; i += 4096)
        p[i] = 1;
    munmap(p, len);
    say("hog", 1, "allocated and touched %ld MiB", mb);
}

static void do_write(const char *q)
{
    char dir[512], path[600];
    snprintf(path, sizeof(path), "%s/planted", arg(q, "dir", dir, sizeof(dir)));
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        close(fd);
        unlink(path);
        say("write", 1, "created %s", path);
    } else {
        say("write", 0, "create %s: %s", path, strerror(errno));
    }
}

/* Runs a setuid program that prints its effective uid and capabilities. */
static void do_setuid(const char *q)
{
    char path[512], out[512] = "";
    arg(q, "path", path, sizeof(path));
    int pipefd[2];
    if (pipe(pipefd) != 0) {
        say("setuid", 0, "pipe: %s", strerror(errno));
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 1);
        char *const argv[] = {path, "probe", NULL};
        execv(path, argv);
        printf("exec %s: %s", path, strerror(errno));
        fflush(stdout);
        _exit(127);
    }
    close(pipefd[1]);
    ssize_t n = read(pipefd[0], out, sizeof(out) - 1);
    close(pipefd[0]);
    waitpid(pid, NULL, 0);
    out[n > 0 ? n : 0] = '\0';
    out[strcspn(out, "\n")] = '\0';
    /* "euid=E cap=HEX": any capability is a way out. */
    const char *cap = strstr(out, "cap=");
    int escaped = cap && strtoull(cap + 4, NULL, 16) != 0;
    say("setuid", escaped, "%s", out);
}

static void do_whoami(const char *q)
{
    char caps[64];
    capabilities(caps, sizeof(caps));
    say("whoami", 0, "uid=%d pid=%d cap=%s", (int)getuid(), (int)getpid(), caps);
}

static void dispatch(const char *path, const char *q)
{
    static const struct {
        const char *path;
        void (*fn)(const char *q);
    } routes[] = {{"/read", do_read},   {"/connect", do_connect}, {"/ptrace", do_ptrace},
                  {"/mount", do_mount}, {"/raw", do_raw},         {"/kill", do_kill},
                  {"/fork", do_fork},   {"/hog", do_hog},         {"/write", do_write},
                  {"/setuid", do_setuid}, {"/whoami", do_whoami}};
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
        if (strcmp(path, routes[i].path) == 0) {
            routes[i].fn(q);
            return;
        }
    snprintf(answer, sizeof(answer), "{\"ready\":true}");
}

static void serve(int c)
{
    char req[8192];
    size_t len = 0;
    while (len < sizeof(req) - 1 && !memmem(req, len, "\r\n\r\n", 4)) {
        ssize_t n = read(c, req + len, sizeof(req) - 1 - len);
        if (n <= 0)
            return;
        len += (size_t)n;
    }
    req[len] = '\0';
    char target[2048] = "/";
    sscanf(req, "%*s %2047s", target);
    char *q = strchr(target, '?');
    if (q)
        *q++ = '\0';
    dispatch(target, q ? q : "");
    char head[256];
    int hl = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n", strlen(answer));
    if (write(c, head, (size_t)hl) == hl && write(c, answer, strlen(answer)) < 0)
        return;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "probe") == 0) { /* run as the setuid program */
        char caps[64];
        capabilities(caps, sizeof(caps));
        printf("euid=%d cap=%s\n", (int)geteuid(), caps);
        return 0;
    }
    const char *listen_path = getenv("FUNCD_LISTEN");
    if (!listen_path)
        return 2;
    signal(SIGPIPE, SIG_IGN);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", listen_path);
    unlink(listen_path);
    if (s < 0 || bind(s, (struct sockaddr *)&sun, sizeof(sun)) != 0 || listen(s, 64) != 0) {
        perror("hostile: listen");
        return 1;
    }
    for (;;) {
        int c = accept4(s, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        answer[0] = '\0';
        /* One connection at a time: a silent one must not wedge the rest. */
        struct timeval tv = {2, 0};
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        serve(c);
        close(c);
    }
}
