#include "daemon.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void dd_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

const char *dd_funcd_path(void)
{
    static __thread char path[1024];
    const char *root = getenv("FUNCD_BUILD_ROOT");
    if (!root) {
        fprintf(stderr, "FUNCD_BUILD_ROOT is not set (run through meson test)\n");
        return NULL;
    }
    snprintf(path, sizeof(path), "%s/bin/funcd/funcd", root);
    if (access(path, X_OK) != 0) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return NULL;
    }
    return path;
}

const char **dd_default_args(const char **out, size_t max, const char *mode, const char *dir,
                             const char *const *extra)
{
    static const char *const base[] = {"--listen", "127.0.0.1:0", "--data-plane-listen",
                                       "127.0.0.1:0", "--fn-runner-listen", "127.0.0.1:0",
                                       "--dev"};
    size_t n = 0;
    out[n++] = mode;
    if (dir)
        out[n++] = dir;
    for (size_t i = 0; i < sizeof(base) / sizeof(base[0]) && n + 1 < max; i++)
        out[n++] = base[i];
    /* The tests' function directories are temp dirs: the operator allows
     * them to the developer token (docs/security.md, "Host paths"). */
    const char *tmp = getenv("TMPDIR");
    if (n + 3 < max) {
        out[n++] = "--source-root";
        out[n++] = tmp && *tmp ? tmp : "/tmp";
    }
    for (size_t i = 0; extra && extra[i] && n + 1 < max; i++)
        out[n++] = extra[i];
    /* To tell a sandbox problem from the rest. */
    const char *ns = getenv("FUNCD_DURABLE_NO_SANDBOX");
    if (ns && *ns == '1' && n + 1 < max)
        out[n++] = "--no-sandbox";
    out[n] = NULL;
    return out;
}

/* The address printed after `what` in the log, as a URL; 1 when found. */
static int find_addr(const char *log, const char *what, char *out, size_t len)
{
    FILE *f = fopen(log, "re");
    if (!f)
        return 0;
    char line[1024];
    int found = 0;
    size_t wl = strlen(what);
    while (!found && fgets(line, sizeof(line), f)) {
        char *at = strstr(line, what);
        if (!at || !strchr(line, '\n'))
            continue;
        at += wl;
        at[strcspn(at, "\r\n")] = '\0';
        /* A funcd serving TLS prints its URLs with https:// */
        snprintf(out, len, "%s%s", strstr(at, "://") ? "" : "http://", at);
        found = 1;
    }
    fclose(f);
    return found;
}

void dd_dump_log(const dd_daemon *d)
{
    FILE *f = fopen(d->log, "re");
    if (!f)
        return;
    char line[1024];
    long lines = 0;
    while (fgets(line, sizeof(line), f))
        lines++;
    rewind(f);
    long i = 0;
    fprintf(stderr, "  --- %s (last lines) ---\n", d->log);
    while (fgets(line, sizeof(line), f))
        if (++i > lines - 30)
            fprintf(stderr, "  | %s", line);
    fclose(f);
}

int dd_wait_exit(dd_daemon *d, int timeout_ms)
{
    for (int waited = 0; d->pid > 0; waited += 5) {
        int st;
        pid_t r = waitpid(d->pid, &st, WNOHANG);
        if (r == d->pid || (r < 0 && errno == ECHILD)) {
            d->exit_status = r == d->pid ? st : -1;
            d->pid = 0;
            break;
        }
        if (waited >= timeout_ms)
            return 0;
        dd_sleep_ms(5);
    }
    return 1;
}

void dd_kill9(dd_daemon *d)
{
    if (d->pid <= 0)
        return;
    kill(d->pid, SIGKILL);
    dd_wait_exit(d, 30000);
}

static void exec_funcd(const char *bin, const char *log, const char *const *args)
{
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (fd < 0 || null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(fd, 2) < 0)
        _exit(126);
    size_t n = 0;
    while (args[n])
        n++;
    const char **argv = calloc(n + 2, sizeof(char *));
    if (!argv)
        _exit(126);
    argv[0] = bin;
    memcpy(argv + 1, args, n * sizeof(char *));
    /* The test's own sanitizer settings also suit the daemon. */
    execv(bin, (char *const *)argv);
    _exit(127);
}

int dd_start(dd_daemon *d, const char *log_path, const char *const *args)
{
    const char *bin = dd_funcd_path();
    memset(d, 0, sizeof(*d));
    snprintf(d->log, sizeof(d->log), "%s", log_path);
    if (!bin)
        return -1;
    /* Else the previous run's addresses could be read before the child
     * truncates the file. */
    unlink(log_path);
    fflush(NULL);
    d->pid = fork();
    if (d->pid < 0) {
        d->pid = 0;
        return -1;
    }
    if (d->pid == 0)
        exec_funcd(bin, log_path, args);
    for (int waited = 0; waited < 20000; waited += 5) {
        if (find_addr(log_path, "control plane listening on ", d->cp, sizeof(d->cp)) &&
            find_addr(log_path, "data plane listening on ", d->dp, sizeof(d->dp)))
            return 0;
        if (dd_wait_exit(d, 0))
            break;
        dd_sleep_ms(5);
    }
    fprintf(stderr, "  funcd did not start (exit status %d)\n", d->exit_status);
    dd_dump_log(d);
    dd_kill9(d);
    return -1;
}

int dd_tempdir(char *out, size_t len, const char *tag)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(out, len, "%s/funcd-%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", tag);
    return mkdtemp(out) ? 0 : -1;
}

unsigned long long dd_pid_start(pid_t pid)
{
    char path[64], buf[2048];
    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name may hold spaces and parentheses: fields count from
     * the last ')'. Field 3 is the state, 22 the start time. */
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    char state = 0;
    unsigned long long start = 0;
    int field = 2;
    char *save = NULL;
    for (char *tok = strtok_r(p + 1, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        field++;
        if (field == 3)
            state = tok[0];
        if (field == 22) {
            start = strtoull(tok, NULL, 10);
            break;
        }
    }
    return state == 'Z' || state == 'X' ? 0 : start;
}

int dd_pid_gone(pid_t pid, unsigned long long start)
{
    unsigned long long now = dd_pid_start(pid);
    return now == 0 || (start && now != start);
}

int dd_run(const char *log_path, const char *const *args, int timeout_ms)
{
    const char *bin = dd_funcd_path();
    if (!bin)
        return -1;
    dd_daemon d = {0};
    fflush(NULL);
    d.pid = fork();
    if (d.pid < 0)
        return -1;
    if (d.pid == 0)
        exec_funcd(bin, log_path, args);
    if (!dd_wait_exit(&d, timeout_ms)) {
        dd_kill9(&d);
        return -1;
    }
    return WIFEXITED(d.exit_status) ? WEXITSTATUS(d.exit_status) : -1;
}

int dd_log_has(const char *log_path, const char *text)
{
    FILE *f = fopen(log_path, "re");
    char line[2048];
    int found = 0;
    while (f && !found && fgets(line, sizeof(line), f))
        found = strstr(line, text) != NULL;
    if (f)
        fclose(f);
    return found;
}

/* Every process below `root` (children, grandchildren...) with its start
 * time: what must not outlive `root`'s kill -9. */
size_t dd_descendants(pid_t root, dd_proc *out, size_t max)
{
    enum { CAP = 4096 };
    static __thread struct { pid_t pid, ppid; } all[CAP];
    size_t nall = 0, n = 0;
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && nall < CAP && (de = readdir(d))) {
        char *end, path[300], buf[1024];
        long pid = strtol(de->d_name, &end, 10);
        if (*end || pid <= 0)
            continue;
        snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
        FILE *f = fopen(path, "re");
        size_t len = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
        if (f)
            fclose(f);
        buf[len] = '\0';
        char *p = strrchr(buf, ')');
        long ppid;
        if (p && sscanf(p + 1, " %*c %ld", &ppid) == 1)
            all[nall++] = (typeof(all[0])){(pid_t)pid, (pid_t)ppid};
    }
    if (d)
        closedir(d);
    /* Breadth first: out[] doubles as the queue. */
    pid_t parent = root;
    for (size_t q = 0;; parent = out[q++].pid) {
        for (size_t i = 0; i < nall && n < max; i++)
            if (all[i].ppid == parent)
                out[n++] = (dd_proc){all[i].pid, dd_pid_start(all[i].pid)};
        if (q >= n)
            break;
    }
    return n;
}

int dd_all_gone(const dd_proc *w, size_t n, int timeout_ms)
{
    for (int waited = 0;; waited += 20) {
        size_t alive = 0;
        for (size_t i = 0; i < n; i++)
            alive += !dd_pid_gone(w[i].pid, w[i].start);
        if (!alive)
            return 1;
        if (waited >= timeout_ms)
            return 0;
        dd_sleep_ms(20);
    }
}
