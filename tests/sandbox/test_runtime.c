/*
 * The process runtime's sandbox through its port, without a platform: pid
 * files (a crashed run's workers are ended at creation), cleanup (no
 * cgroup or mount left after free), errors that name the failed step, and
 * the seccomp deny list.
 */
#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "funcd/sys/error.h"
#include "funcd/sys/runtime.h"
#include "harness.h"
#include "runtime/pidfile.h"
#include "runtime/seccomp.h"

typedef struct loop_ctx {
    struct event_base *base;
    int exited;
    int status;
} loop_ctx;

static void on_exit_cb(funcd_worker *w, int status, void *payload)
{
    loop_ctx *l = payload;
    l->exited = 1;
    l->status = status;
}

static void run_until_exit(loop_ctx *l)
{
    for (int i = 0; i < 5000 && !l->exited; i++)
        event_base_loop(l->base, EVLOOP_ONCE | EVLOOP_NONBLOCK), usleep(1000);
}

static char *make_tempdir(char *buf, size_t len)
{
    snprintf(buf, len, "/tmp/funcd-sandbox-test-XXXXXX");
    return mkdtemp(buf);
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        char path[600];
        if (de->d_name[0] == '.' && (!de->d_name[1] || (de->d_name[1] == '.' && !de->d_name[2])))
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        unlink(path);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

/* Directories this process's runtimes made under its own cgroup of `ctl`. */
static int own_cgroup_dirs(const char *ctl)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    char line[512], path[700] = "";
    while (f && fgets(line, sizeof(line), f)) {
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!b)
            continue;
        *b++ = '\0';
        b[strcspn(b, "\n")] = '\0';
        if (strcmp(a + 1, ctl) == 0)
            snprintf(path, sizeof(path), "/sys/fs/cgroup/%s%s", ctl, strcmp(b, "/") ? b : "");
    }
    if (f)
        fclose(f);
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "funcd-%ld-", (long)getpid());
    int n = 0;
    DIR *d = path[0] ? opendir(path) : NULL;
    struct dirent *de;
    while (d && (de = readdir(d)))
        n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    if (d)
        closedir(d);
    return n;
}

static int count_mounts(void)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    int n = 0, c;
    while (f && (c = fgetc(f)) != EOF)
        n += c == '\n';
    if (f)
        fclose(f);
    return n;
}

static int read_text(const char *path, char *out, size_t len)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    size_t n = fread(out, 1, len - 1, f);
    out[n] = '\0';
    fclose(f);
    return 0;
}

static const char *const sleep_argv[] = {"/bin/sleep", "1000", NULL};
static const char *const sleep_env[] = {"PATH=/usr/bin:/bin", NULL};

TEST(pid_file_follows_the_worker)
{
    char dir[64];
    CHECK(make_tempdir(dir, sizeof(dir)) != NULL);
    loop_ctx l = {event_base_new(), 0, 0};
    funcd_runtime *rt = NULL;
    int mounts = count_mounts();
    CHECK_INT(funcd_runtime_process_new_with(&rt, &(funcd_process_options){1, dir}), 0);
    CHECK_INT(rt->attach(rt, l.base), 0);
    funcd_worker_spec spec = {sleep_argv, sleep_env, NULL, NULL, {64 << 20, 32, 500}};
    funcd_worker_events ev = {NULL, on_exit_cb, &l};
    funcd_worker *w = NULL;
    int rc = rt->start(rt, &spec, &ev, &w);
    if (rc < 0)
        fprintf(stderr, "  start: %s\n", funcd_error_last()->message);
    char path[128], text[2048] = "";
    int pid = w ? rt->pid(rt, w) : 0;
    snprintf(path, sizeof(path), "%s/%d", dir, pid);
    int written = read_text(path, text, sizeof(text)) == 0;
    char want[64];
    snprintf(want, sizeof(want), "pid %d\nstart %llu\npgid %d\n", pid, funcd_pid_start_time(pid),
             pid);
    int cgroups = own_cgroup_dirs("pids") + own_cgroup_dirs("memory");
    if (w) {
        rt->stop(rt, w, 0);
        run_until_exit(&l);
    }
    int removed = access(path, F_OK) != 0;
    if (w)
        rt->release(rt, w);
    rt->free(rt);
    event_base_free(l.base);
    remove_dir(dir);
    CHECK_INT(rc, 0);
    CHECK(written);
    CHECK_CONTAINS(text, want);
    CHECK_CONTAINS(text, "cgroup /sys/fs/cgroup/pids/");
    CHECK_CONTAINS(text, "cgroup /sys/fs/cgroup/memory/");
    CHECK(l.exited);
    CHECK(removed);
    CHECK_INT(cgroups, 2); /* the runtime's, while it ran */
    CHECK_INT(own_cgroup_dirs("pids") + own_cgroup_dirs("memory"), 0);
    CHECK_INT(count_mounts(), mounts);
}

static pid_t sentinel(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        for (;;)
            pause();
    }
    if (pid > 0)
        setpgid(pid, pid);
    return pid;
}

static void write_record(const char *dir, long pid, unsigned long long start, long pgid)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%ld", dir, pid);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "pid %ld\nstart %llu\npgid %ld\n", pid, start, pgid);
        fclose(f);
    }
}

TEST(a_crashed_runs_workers_are_ended)
{
    char dir[64];
    CHECK(make_tempdir(dir, sizeof(dir)) != NULL);
    pid_t orphan = sentinel(), innocent = sentinel();
    CHECK(orphan > 0 && innocent > 0);
    usleep(20000); /* both have their start time and group */
    write_record(dir, orphan, funcd_pid_start_time(orphan), orphan);
    /* The same pid number, but another process (a different start time). */
    write_record(dir, innocent, funcd_pid_start_time(innocent) + 1, innocent);
    write_record(dir, 999999999, 1, 999999999); /* long gone */
    funcd_runtime *rt = NULL;
    CHECK_INT(funcd_runtime_process_new_with(&rt, &(funcd_process_options){-1, dir}), 0);
    rt->free(rt);
    int st = 0;
    pid_t reaped = waitpid(orphan, &st, 0);
    int innocent_alive = kill(innocent, 0) == 0;
    kill(innocent, SIGKILL);
    waitpid(innocent, NULL, 0);
    DIR *d = opendir(dir);
    int left = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        left += de->d_name[0] != '.';
    if (d)
        closedir(d);
    remove_dir(dir);
    CHECK_INT(reaped, orphan);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    CHECK(innocent_alive);
    CHECK_INT(left, 0);
}

TEST(a_failed_step_is_named)
{
    loop_ctx l = {event_base_new(), 0, 0};
    funcd_runtime *rt = NULL;
    CHECK_INT(funcd_runtime_process_new_with(&rt, NULL), 0);
    CHECK_INT(rt->attach(rt, l.base), 0);
    /* The working directory is not in the worker's view. */
    funcd_worker_spec spec = {sleep_argv, sleep_env, "/var/lib", NULL, {0, 0, 0}};
    funcd_worker_events ev = {NULL, on_exit_cb, &l};
    funcd_worker *w = NULL;
    int rc = rt->start(rt, &spec, &ev, &w);
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", funcd_error_last()->message);
    /* The host network needs the operator's permission. */
    funcd_worker_spec host = {sleep_argv, sleep_env, NULL, NULL, {0, 0, 0}, NULL, 0,
                              FUNCD_WORKER_NETWORK_HOST};
    int rc_host = rt->start(rt, &host, &ev, &w);
    char msg_host[512];
    snprintf(msg_host, sizeof(msg_host), "%s", funcd_error_last()->message);
    rt->free(rt);
    event_base_free(l.base);
    CHECK_INT(rc, FUNCD_EIO);
    CHECK_CONTAINS(msg, "sandbox: chdir /var/lib: No such file or directory");
    CHECK_INT(rc_host, FUNCD_EINVAL);
    CHECK_CONTAINS(msg_host, "allow_host_network");
}

TEST(the_deny_list_covers_the_issue)
{
    static const char *const required[] = {
        "mount", "umount2", "ptrace", "kexec_load", "bpf", "perf_event_open", "keyctl",
        "add_key", "request_key", "unshare", "setns", "open_by_handle_at", "init_module",
        "reboot", "swapon", NULL};
    for (const char *const *r = required; *r; r++) {
        int found = 0;
        for (const char *const *d = funcd_seccomp_denied; *d; d++)
            found |= strcmp(*d, *r) == 0;
        if (!found)
            FAILF("%s is not denied", *r);
    }
    funcd_seccomp_filter f, g;
    static const char *const allow[] = {"ptrace", NULL};
    CHECK_INT(funcd_seccomp_build(&f, NULL), 0);
    CHECK_INT(funcd_seccomp_build(&g, allow), 0);
    int shorter = g.len < f.len;
    funcd_seccomp_free(&f);
    funcd_seccomp_free(&g);
    CHECK(shorter); /* the operator's addition took a rule away */
}

int main(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "SKIP: the sandbox tests need root (namespaces, cgroups)\n");
        return 77;
    }
    RUN(pid_file_follows_the_worker);
    RUN(a_crashed_runs_workers_are_ended);
    RUN(a_failed_step_is_named);
    RUN(the_deny_list_covers_the_issue);
    return HARNESS_END();
}
