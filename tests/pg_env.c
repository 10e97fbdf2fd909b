/* A real PostgreSQL for tests (pg_env.h). */
#include "pg_env.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <grp.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int find_bindir(char *out, size_t n)
{
    const char *env = getenv("FUNCD_PG_BIN");
    char probe[400];
    if (env && *env) {
        snprintf(probe, sizeof(probe), "%s/postgres", env);
        if (access(probe, X_OK) != 0)
            return -1;
        snprintf(out, n, "%s", env);
        return 0;
    }
    glob_t g;
    if (glob("/usr/lib/postgresql/*/bin/postgres", 0, NULL, &g) != 0)
        return -1;
    /* The newest: glob sorts, and versions are 2 digits since 10. */
    const char *best = g.gl_pathv[g.gl_pathc - 1];
    snprintf(out, n, "%.*s", (int)(strlen(best) - strlen("/postgres")), best);
    globfree(&g);
    return 0;
}

int pg_env_present(void)
{
    char dir[256];
    return find_bindir(dir, sizeof(dir)) == 0;
}

/* Who the server runs as: ourselves, or (as root) postgres or nobody. */
static int server_user(uid_t *uid, gid_t *gid)
{
    if (geteuid() != 0) {
        *uid = geteuid();
        *gid = getegid();
        return 0;
    }
    struct passwd *pw = getpwnam("postgres");
    if (!pw)
        pw = getpwnam("nobody");
    if (!pw)
        return -1;
    *uid = pw->pw_uid;
    *gid = pw->pw_gid;
    return 0;
}

/* fork + exec `argv` as the server user, output to `log`; the pid or -1. */
static pid_t spawn(const char *const *argv, const char *log)
{
    uid_t uid;
    gid_t gid;
    if (server_user(&uid, &gid) < 0) {
        fprintf(stderr, "pg_env: no postgres or nobody user to run the server as\n");
        return -1;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0)
            dup2(null, 0);
        if (geteuid() == 0 &&
            (setgroups(0, NULL) != 0 || setgid(gid) != 0 || setuid(uid) != 0))
            _exit(126);
        /* After setuid, which clears it: a test that dies takes the server
         * with it (SIGQUIT: the postmaster's immediate shutdown). */
        prctl(PR_SET_PDEATHSIG, SIGQUIT);
        if (getppid() != parent)
            _exit(0);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static void dump_log(const char *log)
{
    FILE *fp = fopen(log, "r");
    char line[512];
    if (!fp)
        return;
    fprintf(stderr, "pg_env: --- %s ---\n", log);
    while (fgets(line, sizeof(line), fp))
        fprintf(stderr, "  %s", line);
    fclose(fp);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int run_initdb(pg_env *e)
{
    char initdb[320], log[320];
    snprintf(initdb, sizeof(initdb), "%s/initdb", e->bindir);
    snprintf(log, sizeof(log), "%s/initdb.log", e->root);
    const char *argv[] = {initdb, "-D", e->data, "-A", "trust", "-U", "postgres", "-E", "UTF8",
                          "--locale=C", "--no-sync", NULL};
    pid_t pid = spawn(argv, log);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
        fprintf(stderr, "pg_env: initdb failed (status %d)\n", status);
        dump_log(log);
        return -1;
    }
    return 0;
}

int pg_env_restart_server(pg_env *e)
{
    char postgres[320], log[320];
    snprintf(postgres, sizeof(postgres), "%s/postgres", e->bindir);
    snprintf(log, sizeof(log), "%s/server.log", e->root);
    const char *argv[] = {postgres, "-D", e->data, "-k", e->root,
                          "-c", "listen_addresses=", "-c", "fsync=off",
                          "-c", "full_page_writes=off", "-c", "shared_buffers=16MB",
                          "-c", "max_connections=200", "-c", "log_min_messages=warning",
                          NULL};
    e->pid = spawn(argv, log);
    if (e->pid < 0) {
        e->pid = 0;
        return -1;
    }
    int64_t deadline = now_ms() + 60000;
    while (now_ms() < deadline) {
        int status;
        if (waitpid(e->pid, &status, WNOHANG) == e->pid) {
            fprintf(stderr, "pg_env: the server exited at start (status %d)\n", status);
            dump_log(log);
            e->pid = 0;
            return -1;
        }
        if (PQping(e->conninfo) == PQPING_OK)
            return 0;
        usleep(20000);
    }
    fprintf(stderr, "pg_env: the server did not accept connections within 60 s\n");
    dump_log(log);
    pg_env_stop_server(e);
    return -1;
}

int pg_env_start(pg_env *e)
{
    memset(e, 0, sizeof(*e));
    if (find_bindir(e->bindir, sizeof(e->bindir)) < 0) {
        fprintf(stderr, "pg_env: no PostgreSQL server binaries (install postgresql or set "
                        "FUNCD_PG_BIN)\n");
        return -1;
    }
    /* /tmp, not $TMPDIR: the server user must reach it, and a socket path
     * has at most 107 bytes. */
    snprintf(e->root, sizeof(e->root), "/tmp/funcd-pg-XXXXXX");
    if (!mkdtemp(e->root)) {
        fprintf(stderr, "pg_env: mkdtemp: %s\n", strerror(errno));
        e->root[0] = '\0';
        return -1;
    }
    uid_t uid;
    gid_t gid;
    if (server_user(&uid, &gid) < 0 || (geteuid() == 0 && chown(e->root, uid, gid) != 0)) {
        fprintf(stderr, "pg_env: cannot hand %s to the server user: %s\n", e->root,
                strerror(errno));
        return -1;
    }
    snprintf(e->data, sizeof(e->data), "%s/data", e->root);
    pg_env_conninfo(e, NULL, e->conninfo, sizeof(e->conninfo));
    snprintf(e->url, sizeof(e->url), "postgresql:///postgres?host=%s&user=postgres", e->root);
    if (run_initdb(e) < 0)
        return -1;
    return pg_env_restart_server(e);
}

void pg_env_conninfo(const pg_env *e, const char *extra, char *out, size_t n)
{
    snprintf(out, n, "host=%s user=postgres dbname=postgres%s%s", e->root, extra ? " " : "",
             extra ? extra : "");
}

static void quiet(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

int pg_env_exec(const pg_env *e, const char *sql)
{
    PGconn *c = PQconnectdb(e->conninfo);
    int rc = -1;
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "pg_env: connect: %s", PQerrorMessage(c));
    } else {
        PQsetNoticeProcessor(c, quiet, NULL);
        PGresult *r = PQexec(c, sql);
        ExecStatusType st = PQresultStatus(r);
        if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
            rc = 0;
        else
            fprintf(stderr, "pg_env: %s: %s", sql, PQerrorMessage(c));
        PQclear(r);
    }
    PQfinish(c);
    return rc;
}

/* Sends `sig` to the postmaster and its children (found by their parent
 * in /proc). */
static void signal_server(const pg_env *e, int sig)
{
    kill(e->pid, sig);
    glob_t g;
    if (glob("/proc/[0-9]*/stat", 0, NULL, &g) != 0)
        return;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        FILE *f = fopen(g.gl_pathv[i], "r");
        char buf[512];
        size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = '\0';
        /* The command may hold spaces: fields count from the last ')'. */
        const char *p = strrchr(buf, ')');
        long pid = strtol(g.gl_pathv[i] + strlen("/proc/"), NULL, 10), ppid = 0;
        if (p && sscanf(p + 1, " %*c %ld", &ppid) == 1 && ppid == e->pid)
            kill((pid_t)pid, sig);
    }
    globfree(&g);
}

void pg_env_freeze(pg_env *e)
{
    if (e->pid <= 0)
        return;
    signal_server(e, SIGSTOP);
    e->frozen = 1;
}

void pg_env_thaw(pg_env *e)
{
    if (e->pid <= 0 || !e->frozen)
        return;
    signal_server(e, SIGCONT);
    e->frozen = 0;
}

void pg_env_stop_server(pg_env *e)
{
    if (e->pid <= 0)
        return;
    pg_env_thaw(e); /* a stopped server would not hear its shutdown */
    kill(e->pid, SIGINT); /* fast shutdown: ends sessions, checkpoints */
    int64_t deadline = now_ms() + 30000;
    int status;
    while (waitpid(e->pid, &status, WNOHANG) == 0) {
        if (now_ms() > deadline) {
            kill(e->pid, SIGKILL);
            waitpid(e->pid, &status, 0);
            break;
        }
        usleep(10000);
    }
    e->pid = 0;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path); /* best effort: what stays is reported by nobody */
    return 0;
}

void pg_env_free(pg_env *e)
{
    pg_env_stop_server(e);
    if (e->root[0])
        nftw(e->root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    e->root[0] = '\0';
}
