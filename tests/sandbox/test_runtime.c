/*
 * The process runtime's sandbox through its port, without a platform: pid
 * files (a crashed run's workers are ended at creation), cleanup (no
 * cgroup or mount left after free), errors that name the failed step, and
 * the seccomp deny list.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <event2/event.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "funcd/funcd.h"
#include "funcd/sys/error.h"
#include "funcd/sys/runtime.h"
#include "harness.h"
#include "runtime/pidfile.h"
#include "runtime/seccomp.h"
#include "util/misc.h"
#include "sandbox_test.h"

/* Process options of this library's version with the leading fields given. */
#define PROCESS_OPTS(...) (&(funcd_process_options){FUNCD_PROCESS_OPTIONS_VERSION, __VA_ARGS__})

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

/* The instance id the runtimes of this test run under. */
static char instance[32];

/* This process's own cgroup directory of controller `ctl`, or "". */
static void own_cgroup(const char *ctl, char *path, size_t len)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    char line[512];
    path[0] = '\0';
    while (f && fgets(line, sizeof(line), f)) {
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!b)
            continue;
        *b++ = '\0';
        b[strcspn(b, "\n")] = '\0';
        if (strcmp(a + 1, ctl) == 0)
            snprintf(path, len, "/sys/fs/cgroup/%s%s", ctl, strcmp(b, "/") ? b : "");
    }
    if (f)
        fclose(f);
}

/* Directories the runtimes of instance `id` made under this process's own
 * cgroup of `ctl`. */
static int own_cgroup_dirs_of(const char *ctl, const char *id)
{
    char path[700];
    own_cgroup(ctl, path, sizeof(path));
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "funcd-%s-", id);
    int n = 0;
    DIR *d = path[0] ? opendir(path) : NULL;
    struct dirent *de;
    while (d && (de = readdir(d)))
        n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    if (d)
        closedir(d);
    return n;
}

/* Directories this test's runtimes made under its own cgroup of `ctl`. */
static int own_cgroup_dirs(const char *ctl)
{
    return own_cgroup_dirs_of(ctl, instance);
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

static const char *const sleep_argv[] = {"/bin/sleep", "1000", NULL};
static const char *const sleep_env[] = {"PATH=/usr/bin:/bin", NULL};

/* Starts `argv` (32 pids, no memory limit) with its exit told to `l`; NULL
 * when it could not be started (said on stderr). */
static funcd_worker *start_worker(funcd_runtime *rt, loop_ctx *l, const char *const *argv)
{
    funcd_worker_spec spec = {argv, sleep_env, NULL, NULL, {0, 32, 0}};
    funcd_worker_events ev = {NULL, on_exit_cb, l};
    funcd_worker *w = NULL;
    l->exited = 0;
    if (rt->start(rt, &spec, &ev, &w) < 0) {
        fprintf(stderr, "  start: %s\n", funcd_error_last()->message);
        return NULL;
    }
    return w;
}

/* Stops `w`, waits for its end and lets it go. */
static void stop_worker(funcd_runtime *rt, loop_ctx *l, funcd_worker *w)
{
    rt->stop(rt, w, 0);
    run_until_exit(l);
    rt->release(rt, w);
}

TEST(pid_file_follows_the_worker)
{
    char dir[64];
    CHECK(make_tempdir(dir, sizeof(dir)) != NULL);
    loop_ctx l = {event_base_new(), 0, 0};
    funcd_runtime *rt = NULL;
    int mounts = count_mounts();
    CHECK_INT(funcd_runtime_process_new_with(
                  &rt, PROCESS_OPTS(1, dir, .instance_id = instance)),
              0);
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
    /* The reaper removes it after the worker's cgroups, off the loop. */
    int removed = 0;
    for (int i = 0; i < 3000 && !(removed = access(path, F_OK) != 0); i++)
        usleep(1000);
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

/* The cgroup of `pid` in controller `ctl`'s hierarchy, as /proc shows it. */
static void cgroup_of(pid_t pid, const char *ctl, char *out, size_t len)
{
    char path[64], line[512];
    snprintf(path, sizeof(path), "/proc/%ld/cgroup", (long)pid);
    FILE *f = fopen(path, "re");
    out[0] = '\0';
    while (f && fgets(line, sizeof(line), f)) {
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!b)
            continue;
        *b++ = '\0';
        b[strcspn(b, "\n")] = '\0';
        if (strcmp(a + 1, ctl) == 0)
            snprintf(out, len, "%s", b);
    }
    if (f)
        fclose(f);
}

static const char *const limit_ctls[] = {"memory", "pids", "cpu"};

/* 1 when `pid` sits in a worker's cgroups of runtime instance `id`
 * ("funcd-<id>-<n>/w<k>") in every controller funcd may write here. */
static int in_worker_cgroups(pid_t pid, const char *id)
{
    char want[64];
    snprintf(want, sizeof(want), "/funcd-%s-", id);
    for (size_t c = 0; c < sizeof(limit_ctls) / sizeof(limit_ctls[0]); c++) {
        char own[700], cg[512];
        own_cgroup(limit_ctls[c], own, sizeof(own));
        if (!own[0] || access(own, W_OK) != 0)
            continue;
        cgroup_of(pid, limit_ctls[c], cg, sizeof(cg));
        const char *at = strstr(cg, want);
        if (!at || !strstr(at, "/w"))
            return 0;
    }
    return 1;
}

static void read_cgroup_file(const char *ctl, const char *cg, const char *file, char *out,
                             size_t len)
{
    char path[700];
    snprintf(path, sizeof(path), "/sys/fs/cgroup/%s%s/%s", ctl, cg, file);
    if (read_text(path, out, len) < 0)
        snprintf(out, len, "(cannot read %s)", path);
    out[strcspn(out, "\n")] = '\0';
}

/*
 * The cold path moves no task between cgroups (docs/adr/0030): a blank
 * init waits in cgroups of its own, moved there as it was made; a start
 * that takes it only writes the function's limits there. So the worker's
 * init is the blank, in the very cgroups it waited in, with the limits.
 */
TEST(a_blank_init_waits_in_its_own_cgroups)
{
    char id[32];
    snprintf(id, sizeof(id), "%sc", instance);
    loop_ctx l = {event_base_new(), 0, 0};
    funcd_runtime *rt = NULL;
    CHECK_INT(funcd_runtime_process_new_with(&rt, PROCESS_OPTS(1, NULL, .instance_id = id)), 0);
    CHECK_INT(rt->attach(rt, l.base), 0);
    /* The loop refills the blanks (two); wait until both are made and placed. */
    pid_t blanks[8];
    int n = 0, placed = 0;
    for (int i = 0; i < 10000 && !(n == 2 && placed == n); i++) {
        event_base_loop(l.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        usleep(1000);
        n = sandbox_children(blanks, 8);
        placed = 0;
        for (int k = 0; k < n; k++)
            placed += in_worker_cgroups(blanks[k], id);
    }
    char before[8][512];
    for (int k = 0; k < n; k++)
        cgroup_of(blanks[k], "memory", before[k], sizeof(before[k]));
    funcd_worker_spec spec = {sleep_argv, sleep_env, NULL, NULL, {64 << 20, 32, 500}};
    funcd_worker_events ev = {NULL, on_exit_cb, &l};
    funcd_worker *w = NULL;
    int rc = rt->start(rt, &spec, &ev, &w);
    if (rc < 0)
        fprintf(stderr, "  start: %s\n", funcd_error_last()->message);
    pid_t pid = w ? rt->pid(rt, w) : 0;
    int was_blank = -1;
    for (int k = 0; k < n; k++)
        if (blanks[k] == pid)
            was_blank = k;
    char mem_cg[512] = "", pids_cg[512] = "", cpu_cg[512] = "";
    char mem[64] = "", pids[64] = "", quota[64] = "";
    if (pid > 0) {
        cgroup_of(pid, "memory", mem_cg, sizeof(mem_cg));
        cgroup_of(pid, "pids", pids_cg, sizeof(pids_cg));
        cgroup_of(pid, "cpu", cpu_cg, sizeof(cpu_cg));
        read_cgroup_file("memory", mem_cg, "memory.limit_in_bytes", mem, sizeof(mem));
        read_cgroup_file("pids", pids_cg, "pids.max", pids, sizeof(pids));
        read_cgroup_file("cpu", cpu_cg, "cpu.cfs_quota_us", quota, sizeof(quota));
    }
    if (w) {
        stop_worker(rt, &l, w);
    }
    rt->free(rt);
    event_base_free(l.base);
    pid_t left[8];
    int n_left = sandbox_children(left, 8);
    CHECK_INT(n, 2);
    CHECK_INT(placed, n); /* waiting in their own cgroups before any start */
    CHECK_INT(rc, 0);
    CHECK(was_blank >= 0);
    CHECK_STR(mem_cg, before[was_blank]); /* not moved */
    CHECK_STR(mem, "67108864");
    CHECK_STR(pids, "32");
    CHECK_STR(quota, "50000");
    CHECK_INT(n_left, 0);
    CHECK_INT(own_cgroup_dirs_of("pids", id) + own_cgroup_dirs_of("memory", id) +
                  own_cgroup_dirs_of("cpu", id),
              0);
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
    CHECK_INT(funcd_runtime_process_new_with(&rt, PROCESS_OPTS(-1, dir)), 0);
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

/* A task in a pids cgroup `name` (made) below this process's own: a
 * stand-in for a worker of some funcd. */
static pid_t sentinel_in_cgroup(const char *name, char *dir, size_t len)
{
    char own[400], procs[600], text[32];
    own_cgroup("pids", own, sizeof(own));
    snprintf(dir, len, "%s/%s", own, name);
    if (!own[0] || mkdir(dir, 0755) != 0)
        return -1;
    pid_t pid = sentinel();
    snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
    int fd = open(procs, O_WRONLY | O_CLOEXEC);
    int n = snprintf(text, sizeof(text), "%ld", (long)pid);
    int ok = fd >= 0 && write(fd, text, (size_t)n) == n;
    if (fd >= 0)
        close(fd);
    if (!ok) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    return pid;
}

/* Alive and not a zombie (a killed child stays one until reaped). */
static int running(pid_t pid)
{
    char path[64], text[512] = "";
    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    if (read_text(path, text, sizeof(text)) < 0)
        return 0;
    const char *paren = strrchr(text, ')');
    return paren && paren[1] == ' ' && paren[2] != 'Z' && paren[2] != 'X';
}

static void end_sentinel(pid_t pid, const char *dir)
{
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    for (int i = 0; i < 200 && dir[0] && rmdir(dir) != 0 && errno == EBUSY; i++)
        usleep(5000);
}

/*
 * Another funcd sharing the cgroup tree (in another container: its pid is
 * not alive in our pid namespace) keeps its workers while runtimes here
 * start, stop and start again; a crashed run of our own instance has its
 * leftovers removed.
 */
TEST(only_our_instances_cgroups_are_cleaned_up)
{
    char other_dir[600] = "", old_dir[600] = "", stale_dir[600] = "", name[96];
    char a_id[32], b_id[32];
    snprintf(a_id, sizeof(a_id), "%sa", instance);
    snprintf(b_id, sizeof(b_id), "%sb", instance);
    /* Another funcd's worker: a newer one (another instance id) and one of
     * the "funcd-<pid>-<n>" naming, its pid unknown here. */
    snprintf(name, sizeof(name), "funcd-o%ldx-0", (long)getpid());
    pid_t other = sentinel_in_cgroup(name, other_dir, sizeof(other_dir));
    snprintf(name, sizeof(name), "funcd-%ld-0", 900000000L + (long)getpid()); /* > pid_max */
    pid_t old = sentinel_in_cgroup(name, old_dir, sizeof(old_dir));
    /* What a crashed run of instance a left. */
    snprintf(name, sizeof(name), "funcd-%s-7", a_id);
    pid_t stale = sentinel_in_cgroup(name, stale_dir, sizeof(stale_dir));
    CHECK(other > 0 && old > 0 && stale > 0);

    /* Instance b runs a worker. */
    loop_ctx l = {event_base_new(), 0, 0};
    funcd_runtime *b = NULL, *a = NULL;
    CHECK_INT(funcd_runtime_process_new_with(
                  &b, PROCESS_OPTS(1, NULL, .instance_id = b_id)),
              0);
    CHECK_INT(b->attach(b, l.base), 0);
    funcd_worker_spec spec = {sleep_argv, sleep_env, NULL, NULL, {0, 32, 0}};
    funcd_worker_events ev = {NULL, on_exit_cb, &l};
    funcd_worker *w = NULL;
    int rc = b->start(b, &spec, &ev, &w);
    if (rc < 0)
        fprintf(stderr, "  start: %s\n", funcd_error_last()->message);
    pid_t wpid = w ? b->pid(b, w) : 0;
    /* Instance a starts, stops and starts again. */
    int a_ok = funcd_runtime_process_new_with(
                   &a, PROCESS_OPTS(1, NULL, .instance_id = a_id)) == 0;
    int stale_ended = !running(stale);
    if (a_ok)
        a->free(a);
    a_ok = a_ok && funcd_runtime_process_new_with(
                       &a, PROCESS_OPTS(1, NULL, .instance_id = a_id)) == 0;
    if (a_ok)
        a->free(a);
    /* And a runtime with no instance id (random): touches nothing. */
    funcd_runtime *anon = NULL;
    if (funcd_runtime_process_new_with(&anon, NULL) == 0)
        anon->free(anon);
    int other_alive = running(other), old_alive = running(old);
    int worker_alive = wpid > 0 && running(wpid);
    if (w) {
        b->stop(b, w, 0);
        run_until_exit(&l);
        b->release(b, w);
    }
    b->free(b);
    event_base_free(l.base);
    end_sentinel(other, other_dir);
    end_sentinel(old, old_dir);
    end_sentinel(stale, stale_dir);
    CHECK_INT(rc, 0);
    CHECK(a_ok);
    CHECK(stale_ended);
    CHECK(access(stale_dir, F_OK) != 0);
    CHECK(other_alive);
    CHECK(old_alive);
    CHECK(worker_alive);
}

/* An id that could read as an older version's pid, or that is no name. */
TEST(a_bad_instance_id_is_refused)
{
    static const char *const bad[] = {"", "123", "9abc", "Abc", "a-b", "a/b",
                                      "a123456789012345678901234567890123"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        funcd_runtime *rt = NULL;
        int rc = funcd_runtime_process_new_with(
            &rt, PROCESS_OPTS(-1, NULL, .instance_id = bad[i]));
        if (rt)
            rt->free(rt);
        if (rc != FUNCD_EINVAL)
            FAILF("instance id \"%s\": rc %d, expected FUNCD_EINVAL", bad[i], rc);
    }
    CHECK_CONTAINS(funcd_error_last()->message, "instance_id");
    /* The platform reads it from the state directory: a bad file stops it. */
    char dir[64], path[128];
    CHECK(make_tempdir(dir, sizeof(dir)) != NULL);
    snprintf(path, sizeof(path), "%s/instance-id", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs("12345\n", f);
    fclose(f);
    funcd_platform *p = NULL;
    int rc = funcd_platform_new(&p, funcd_in_memory(), funcd_with_state_dir(dir));
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", funcd_error_last()->message);
    funcd_platform_free(p);
    funcd_remove_tree(dir);
    CHECK_INT(rc, FUNCD_EINVAL);
    CHECK_CONTAINS(msg, "instance-id");
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

static int copy_file(const char *from, const char *to, mode_t mode)
{
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    char buf[65536];
    size_t n;
    int rc = in && out ? 0 : -1;
    while (rc == 0 && (n = fread(buf, 1, sizeof(buf), in)) > 0)
        if (fwrite(buf, 1, n, out) != n)
            rc = -1;
    if (in)
        fclose(in);
    if (out && fclose(out) != 0)
        rc = -1;
    return rc == 0 ? chmod(to, mode) : -1;
}

/* An image-like root filesystem: the hostile fixture, the C library, and
 * the empty directories an image function's root has. */
static int make_rootfs(const char *root)
{
    static const char *const dirs[] = {"proc", "dev", "tmp", "run", "run/funcd", "lib64",
                                       "lib", "lib/x86_64-linux-gnu", NULL};
    char path[512];
    for (const char *const *d = dirs; *d; d++) {
        snprintf(path, sizeof(path), "%s/%s", root, *d);
        if (mkdir(path, 0755) != 0)
            return -1;
    }
    snprintf(path, sizeof(path), "%s/hostile", root);
    if (copy_file(HOSTILE_BIN, path, 0755) < 0)
        return -1;
    snprintf(path, sizeof(path), "%s/lib64/ld-linux-x86-64.so.2", root);
    if (copy_file("/lib64/ld-linux-x86-64.so.2", path, 0755) < 0)
        return -1;
    snprintf(path, sizeof(path), "%s/lib/x86_64-linux-gnu/libc.so.6", root);
    return copy_file("/lib/x86_64-linux-gnu/libc.so.6", path, 0755);
}

static int ask(const char *sock, const char *path, char *out, size_t len)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", sock);
    for (int i = 0; i < 2000; i++) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0) {
            char req[256];
            int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path);
            size_t got = 0;
            ssize_t r = write(fd, req, (size_t)n) == n ? 1 : -1;
            while (r > 0 && got < len - 1)
                if ((r = read(fd, out + got, len - 1 - got)) > 0)
                    got += (size_t)r;
            out[got] = '\0';
            close(fd);
            return 0;
        }
        close(fd);
        usleep(2000);
    }
    return -1;
}

TEST(an_image_root_is_the_root)
{
    char root[64], run[64];
    CHECK(make_tempdir(root, sizeof(root)) != NULL);
    CHECK(make_tempdir(run, sizeof(run)) != NULL);
    int made = make_rootfs(root) == 0;
    loop_ctx l = {event_base_new(), 0, 0};
    funcd_runtime *rt = NULL;
    CHECK_INT(funcd_runtime_process_new_with(&rt, NULL), 0);
    CHECK_INT(rt->attach(rt, l.base), 0);
    static const char *const argv[] = {"/hostile", NULL};
    static const char *const env[] = {"FUNCD_LISTEN=/run/funcd/worker.sock", NULL};
    funcd_worker_bind binds[] = {{run, "/run/funcd", 1, 1}};
    funcd_worker_spec spec = {argv, env, "/", root, {0, 0, 0}, binds, 1,
                              FUNCD_WORKER_NETWORK_NONE};
    funcd_worker_events ev = {NULL, on_exit_cb, &l};
    funcd_worker *w = NULL;
    int rc = made ? rt->start(rt, &spec, &ev, &w) : -1;
    if (made && rc < 0)
        fprintf(stderr, "  start: %s\n", funcd_error_last()->message);
    char sock[128], who[2048] = "", host[2048] = "";
    snprintf(sock, sizeof(sock), "%s/worker.sock", run);
    int asked = rc == 0 && ask(sock, "/whoami", who, sizeof(who)) == 0 &&
                ask(sock, "/read?path=/etc/hostname", host, sizeof(host)) == 0;
    if (w) {
        stop_worker(rt, &l, w);
    }
    rt->free(rt);
    event_base_free(l.base);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s %s", root, run);
    CHECK_INT(system(cmd), 0);
    CHECK(made);
    CHECK_INT(rc, 0);
    CHECK(asked);
    CHECK_CONTAINS(who, "pid=2 cap=0000000000000000");
    CHECK_CONTAINS(host, "\"escaped\":false"); /* the host's /etc is not there */
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


/* The runtime port's `listen` (version 3): the worker's first act is to
 * connect to 127.0.0.1:9000 and send a datagram to 127.0.0.1:53 inside
 * its own network namespace; both reach the sockets the caller holds, so
 * they existed before its program ran. Several starts, so that both the
 * blank-init path and the cloned one are taken. */
TEST(sockets_are_in_the_namespace_before_the_program)
{
    loop_ctx l = {event_base_new(), 0, 0};
    funcd_runtime *rt = NULL;
    CHECK_INT(funcd_runtime_process_new_with(&rt, PROCESS_OPTS(1, NULL, .instance_id = instance)),
              0);
    CHECK_INT(rt->attach(rt, l.base), 0);
    static const char *const argv[] = {
        "/bin/bash", "-c",
        "exec 3<>/dev/tcp/127.0.0.1/9000 && echo hello-tcp >&3 && "
        "echo hello-udp >/dev/udp/127.0.0.1/53 && read -t 5 line <&3 && [ \"$line\" = ok ]",
        NULL};
    const funcd_worker_listen want[] = {{SOCK_STREAM, 9000}, {SOCK_DGRAM, 53}};
    for (int round = 0; round < 4; round++) {
        l.exited = 0;
        int fds[2] = {-1, -1};
        funcd_worker_spec spec = {argv, sleep_env, NULL, NULL, {0, 0, 0}, NULL, 0,
                                  FUNCD_WORKER_NETWORK_NONE, want, 2, fds};
        funcd_worker_events ev = {NULL, on_exit_cb, &l};
        funcd_worker *w = NULL;
        CHECK_INT(rt->start(rt, &spec, &ev, &w), 0);
        CHECK(fds[0] >= 0 && fds[1] >= 0);
        int c = -1;
        for (int i = 0; i < 5000 && c < 0; i++) {
            c = accept4(fds[0], NULL, NULL, SOCK_CLOEXEC);
            if (c < 0)
                usleep(1000);
        }
        CHECK(c >= 0);
        char got[64] = "";
        ssize_t n = -1;
        for (int i = 0; i < 5000 && n <= 0; i++) {
            n = read(c, got, sizeof(got) - 1);
            if (n <= 0)
                usleep(1000);
        }
        got[n > 0 ? n : 0] = '\0';
        CHECK_STR(got, "hello-tcp\n");
        char dgram[64] = "";
        n = -1;
        for (int i = 0; i < 5000 && n <= 0; i++) {
            n = recv(fds[1], dgram, sizeof(dgram) - 1, 0);
            if (n <= 0)
                usleep(1000);
        }
        dgram[n > 0 ? n : 0] = '\0';
        CHECK_STR(dgram, "hello-udp\n");
        CHECK_INT((int)write(c, "ok\n", 3), 3); /* answered from the host side */
        run_until_exit(&l);
        CHECK(l.exited && WIFEXITED(l.status) && WEXITSTATUS(l.status) == 0);
        rt->release(rt, w);
        close(c);
        close(fds[0]);
        close(fds[1]);
        for (int i = 0; i < 100; i++) /* let the blank inits refill */
            event_base_loop(l.base, EVLOOP_ONCE | EVLOOP_NONBLOCK), usleep(2000);
    }
    /* A worker on the host network has no namespace to hold them. */
    int fds[1];
    funcd_worker_spec host = {sleep_argv, sleep_env, NULL, NULL, {0, 0, 0}, NULL, 0,
                              FUNCD_WORKER_NETWORK_HOST, want, 1, fds};
    funcd_worker_events ev = {NULL, on_exit_cb, &l};
    funcd_worker *w = NULL;
    int rc_host = rt->start(rt, &host, &ev, &w);
    rt->free(rt);
    /* Without the sandbox there is no namespace either. */
    CHECK_INT(funcd_runtime_process_new_with(&rt, PROCESS_OPTS(-1)), 0);
    CHECK_INT(rt->attach(rt, l.base), 0);
    funcd_worker_spec plain = {sleep_argv, sleep_env, NULL, NULL, {0, 0, 0}, NULL, 0,
                               FUNCD_WORKER_NETWORK_NONE, want, 1, fds};
    int rc_plain = rt->start(rt, &plain, &ev, &w);
    char msg_plain[512];
    snprintf(msg_plain, sizeof(msg_plain), "%s", funcd_error_last()->message);
    rt->free(rt);
    event_base_free(l.base);
    CHECK(rc_host != 0);
    CHECK_INT(rc_plain, FUNCD_ENOTSUP);
    CHECK_CONTAINS(msg_plain, "--no-sandbox");
}

/* Blank inits stage a root with the host's system paths before their job
 * comes; a statically linked program still gets a root without them, a
 * dynamically linked one with them, and both /proc, /dev and /tmp. */
TEST(a_static_program_sees_no_system_paths)
{
    loop_ctx l = {event_base_new(), 0, 0};
    funcd_runtime *rt = NULL;
    CHECK_INT(funcd_runtime_process_new_with(&rt, PROCESS_OPTS(1, NULL)), 0);
    CHECK_INT(rt->attach(rt, l.base), 0);
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", STATIC_BIN);
    *strrchr(dir, '/') = '\0';
    static const char *const static_argv[] = {STATIC_BIN, NULL};
    funcd_worker_bind bind = {dir, NULL, 0, 0};
    const funcd_worker_spec specs[2] = {
        {static_argv, sleep_env, NULL, NULL, {0, 32, 0}, &bind, 1},
        {sleep_argv, sleep_env, NULL, NULL, {0, 32, 0}},
    };
    int from_blank[2] = {0, 0}, has_usr[2] = {-1, -1}, has_etc[2] = {-1, -1}, base[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        pid_t blanks[8];
        int n = 0;
        for (int i = 0; i < 10000 && n < 2; i++) { /* both blank inits made */
            event_base_loop(l.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
            usleep(1000);
            n = sandbox_children(blanks, 8);
        }
        funcd_worker_events ev = {NULL, on_exit_cb, &l};
        funcd_worker *w = NULL;
        l.exited = 0;
        if (rt->start(rt, &specs[k], &ev, &w) < 0) {
            fprintf(stderr, "  start: %s\n", funcd_error_last()->message);
            continue;
        }
        pid_t pid = rt->pid(rt, w);
        for (int i = 0; i < n; i++)
            from_blank[k] |= blanks[i] == pid;
        char path[128];
        struct stat st;
        snprintf(path, sizeof(path), "/proc/%d/root/usr", (int)pid);
        has_usr[k] = stat(path, &st) == 0;
        snprintf(path, sizeof(path), "/proc/%d/root/etc", (int)pid);
        has_etc[k] = stat(path, &st) == 0;
        static const char *const always[] = {"proc/1", "dev/null", "tmp"};
        for (size_t i = 0; i < 3; i++) {
            snprintf(path, sizeof(path), "/proc/%d/root/%s", (int)pid, always[i]);
            base[k] += stat(path, &st) == 0;
        }
        stop_worker(rt, &l, w);
    }
    rt->free(rt);
    event_base_free(l.base);
    CHECK(from_blank[0]);
    CHECK(from_blank[1]);
    CHECK_INT(has_usr[0], 0);
    CHECK_INT(has_etc[0], 0);
    CHECK_INT(has_usr[1], 1);
    CHECK_INT(has_etc[1], 1);
    CHECK_INT(base[0], 3);
    CHECK_INT(base[1], 3);
}

/* The resident memory of `pid` in KiB (VmRSS), or -1. */
static long rss_kib(pid_t pid)
{
    char path[64], text[4096] = "";
    snprintf(path, sizeof(path), "/proc/%ld/status", (long)pid);
    if (read_text(path, text, sizeof(text)) < 0)
        return -1;
    const char *at = strstr(text, "VmRSS:");
    return at ? atol(at + 6) : -1;
}

/*
 * A worker's init is the sandbox's own small program, not a copy of funcd:
 * making a copy of a process as large as funcd copied its page tables with
 * its memory map locked, which stalled every thread of funcd for seconds
 * on a loaded machine (docs/adr/0060), and left funcd's memory (its tokens
 * and keys) in every sandbox. Both ways an init is made: started for the
 * job (no blank ready yet) and a blank from the pool.
 */
TEST(the_init_is_a_program_of_its_own)
{
    loop_ctx l = {event_base_new(), 0, 0};
    funcd_runtime *rt = NULL;
    CHECK_INT(funcd_runtime_process_new_with(&rt, PROCESS_OPTS(1, NULL)), 0);
    CHECK_INT(rt->attach(rt, l.base), 0);
    char exe[2][PATH_MAX] = {"", ""};
    long rss[2] = {-1, -1};
    int from_blank[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        pid_t blanks[8];
        int n = 0;
        /* The first start comes before the loop ran: no blank is made yet. */
        for (int i = 0; k == 1 && i < 10000 && n < 2; i++) {
            event_base_loop(l.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
            usleep(1000);
            n = sandbox_children(blanks, 8);
        }
        funcd_worker *w = start_worker(rt, &l, sleep_argv);
        if (!w)
            continue;
        pid_t pid = rt->pid(rt, w);
        for (int i = 0; i < n; i++)
            from_blank[k] |= blanks[i] == pid;
        char path[64];
        snprintf(path, sizeof(path), "/proc/%ld/exe", (long)pid);
        ssize_t len = readlink(path, exe[k], sizeof(exe[k]) - 1);
        exe[k][len > 0 ? len : 0] = '\0';
        rss[k] = rss_kib(pid);
        fprintf(stderr, "  init %s: %s, %ld KiB resident (this test: %ld KiB)\n",
                k ? "from a blank" : "started for the job", exe[k], rss[k], rss_kib(getpid()));
        stop_worker(rt, &l, w);
    }
    rt->free(rt);
    event_base_free(l.base);
    CHECK(!from_blank[0]);
    CHECK(from_blank[1]);
    for (int k = 0; k < 2; k++) {
        CHECK_CONTAINS(exe[k], "funcd-sandbox");
        CHECK(rss[k] > 0 && rss[k] < 4096);
    }
}

/*
 * A host thread that waits in a socket call with a timeout (SO_RCVTIMEO:
 * never restarted after a signal) is not woken by the ends of children it
 * did not make. A child's end is told to the thread that made it; when
 * that thread blocks SIGCHLD the signal is kept instead of dropped and
 * goes to any thread that does not, as EINTR. Workers are started and
 * ended with and without the sandbox (its blank inits are made by a
 * thread of funcd's own) while the host waits.
 */
/* The sandbox takes none of funcd's supplementary groups: they would
 * count outside its user namespace (on a bound host file), seen as
 * nogroup inside. */
TEST(the_sandbox_has_none_of_our_groups)
{
    gid_t mine[64];
    int n_mine = getgroups(64, mine);
    CHECK(n_mine >= 0);
    gid_t extra[] = {4242};
    CHECK_INT(setgroups(1, extra), 0);
    loop_ctx l = {event_base_new(), 0, 0};
    funcd_runtime *rt = NULL;
    CHECK_INT(funcd_runtime_process_new_with(&rt, PROCESS_OPTS(1, NULL)), 0);
    CHECK_INT(rt->attach(rt, l.base), 0);
    funcd_worker *w = start_worker(rt, &l, sleep_argv);
    char groups[256] = "?";
    if (w) {
        char path[64], line[256];
        snprintf(path, sizeof(path), "/proc/%ld/status", (long)rt->pid(rt, w));
        FILE *f = fopen(path, "r");
        while (f && fgets(line, sizeof(line), f))
            if (strncmp(line, "Groups:", 7) == 0)
                snprintf(groups, sizeof(groups), "%s", line);
        if (f)
            fclose(f);
        stop_worker(rt, &l, w);
    }
    rt->free(rt);
    event_base_free(l.base);
    setgroups((size_t)n_mine, mine);
    fprintf(stderr, "  the worker's %s", groups);
    CHECK(strncmp(groups, "Groups:", 7) == 0);
    CHECK(strstr(groups, "4242") == NULL);
    CHECK(strstr(groups, "65534") == NULL);
}

/* Runs `fn` in a child of the test: its exit status, or -1 when it did
 * not exit (a signal). */
static int in_a_child(void (*fn)(void))
{
    pid_t pid = fork();
    if (pid == 0)
        fn();
    if (pid < 0)
        return -1;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* In a child of the test: a new pid namespace (its own /proc) whose memfds
 * are not executable unless asked for (vm.memfd_noexec 1: the sysctl is
 * per pid namespace, so the host's is untouched); a sandboxed worker is
 * started there. Exits 0 when it started, 1 when not, 77 when the kernel
 * has no such setting. */
static _Noreturn void start_where_memfds_are_noexec(void)
{
    if (unshare(CLONE_NEWNS | CLONE_NEWPID) != 0)
        _exit(2);
    pid_t child = fork();
    if (child > 0) {
        int status = 0;
        while (waitpid(child, &status, 0) < 0 && errno == EINTR)
            ;
        _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 2);
    }
    if (child < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
        _exit(2);
    int fd = open("/proc/sys/vm/memfd_noexec", O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        _exit(77);
    if (write(fd, "1", 1) != 1)
        _exit(2);
    close(fd);
    loop_ctx l = {event_base_new(), 0, 0};
    funcd_runtime *rt = NULL;
    if (funcd_runtime_process_new_with(&rt, PROCESS_OPTS(1, NULL)) < 0 ||
        rt->attach(rt, l.base) < 0) {
        fprintf(stderr, "  runtime: %s\n", funcd_error_last()->message);
        _exit(1);
    }
    funcd_worker *w = start_worker(rt, &l, sleep_argv);
    int started = w != NULL;
    if (w)
        stop_worker(rt, &l, w);
    rt->free(rt);
    event_base_free(l.base);
    _exit(started ? 0 : 1);
}

/* The init runs from a memfd: where the kernel makes memfds
 * non-executable by default (vm.memfd_noexec 1), funcd asks for an
 * executable one. */
TEST(the_init_runs_where_memfds_are_noexec)
{
    int status = in_a_child(start_where_memfds_are_noexec);
    CHECK(status >= 0);
    if (status == 77) {
        fprintf(stderr, "  (this kernel has no vm.memfd_noexec: nothing to try)\n");
        return;
    }
    CHECK_INT(status, 0);
}

/* A worker that ends at once is told with its own status, every time: the
 * init must not lose its SIGCHLD (it comes while the init is still between
 * the fork and its wait). */
TEST(a_worker_that_ends_at_once_is_told)
{
    static const char *const argv[] = {"/bin/sh", "-c", "exit 7", NULL};
    loop_ctx l = {event_base_new(), 0, 0};
    funcd_runtime *rt = NULL;
    CHECK_INT(funcd_runtime_process_new_with(&rt, PROCESS_OPTS(1, NULL)), 0);
    CHECK_INT(rt->attach(rt, l.base), 0);
    int told = 0, right = 0;
    for (int i = 0; i < 40; i++) {
        funcd_worker *w = start_worker(rt, &l, argv);
        if (!w)
            continue;
        run_until_exit(&l); /* 5 s at most: then it is stopped (SIGKILL) */
        if (!l.exited) {
            rt->stop(rt, w, 0);
            run_until_exit(&l);
        } else {
            told++;
        }
        right += l.exited && WIFEXITED(l.status) && WEXITSTATUS(l.status) == 7;
        rt->release(rt, w);
    }
    rt->free(rt);
    event_base_free(l.base);
    fprintf(stderr, "  %d of 40 ends told, %d with status 7\n", told, right);
    CHECK_INT(told, 40);
    CHECK_INT(right, 40);
}

/* In a child of the test: a descriptor left inheritable at LEAKED_FD, and
 * close_range(2) refused (ENOSYS, as on a kernel before 5.9 or under a
 * container manager's seccomp profile); a worker with and without the
 * sandbox exits 3 if that descriptor reached it. Exits 0 when neither saw
 * it. */
#define LEAKED_FD 100
static _Noreturn void start_where_close_range_is_refused(void)
{
    int fd = open("/dev/null", O_RDONLY); /* inheritable, like a host's */
    if (fd < 0 || dup2(fd, LEAKED_FD) != LEAKED_FD)
        _exit(2);
    close(fd);
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_close_range, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof(filter) / sizeof(filter[0]), filter};
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        _exit(2);
    static const char *const argv[] = {"/bin/sh", "-c", "[ -e /proc/self/fd/100 ] && exit 3; exit 0",
                                       NULL};
    int bad = 0;
    for (int sandbox = 0; sandbox < 2; sandbox++) {
        loop_ctx l = {event_base_new(), 0, 0};
        funcd_runtime *rt = NULL;
        if (funcd_runtime_process_new_with(&rt, PROCESS_OPTS(sandbox, NULL)) < 0 ||
            rt->attach(rt, l.base) < 0) {
            fprintf(stderr, "  runtime: %s\n", funcd_error_last()->message);
            _exit(1);
        }
        funcd_worker *w = start_worker(rt, &l, argv);
        if (w) {
            run_until_exit(&l);
            if (!l.exited) {
                rt->stop(rt, w, 0);
                run_until_exit(&l);
            }
            fprintf(stderr, "  sandbox %d: the worker %s\n", sandbox,
                    l.exited && WIFEXITED(l.status) && WEXITSTATUS(l.status) == 0
                        ? "had no descriptor of ours"
                        : "saw our descriptor (or did not end)");
            bad |= !(l.exited && WIFEXITED(l.status) && WEXITSTATUS(l.status) == 0);
            rt->release(rt, w);
        } else {
            bad = 1;
        }
        rt->free(rt);
        event_base_free(l.base);
    }
    _exit(bad);
}

/* A worker gets no descriptor of the host's even where close_range(2) is
 * refused: funcd then closes them one by one. */
TEST(no_descriptor_passes_where_close_range_is_refused)
{
    CHECK_INT(in_a_child(start_where_close_range_is_refused), 0);
}

typedef struct waiter {
    int fd;
    volatile int stop;
    int interrupted;
    int calls;
} waiter;

/* Starts and ends workers with and without the sandbox; sets `stop`. */
static void *start_and_end(void *arg)
{
    waiter *wt = arg;
    for (int sandbox = 0; sandbox < 2; sandbox++) {
        loop_ctx l = {event_base_new(), 0, 0};
        funcd_runtime *rt = NULL;
        if (funcd_runtime_process_new_with(&rt, PROCESS_OPTS(sandbox, NULL)) < 0 ||
            rt->attach(rt, l.base) < 0) {
            fprintf(stderr, "  runtime: %s\n", funcd_error_last()->message);
            if (rt)
                rt->free(rt);
            event_base_free(l.base);
            continue;
        }
        for (int k = 0; k < 4; k++) {
            for (int i = 0; i < 100; i++) /* let the blanks be made */
                event_base_loop(l.base, EVLOOP_ONCE | EVLOOP_NONBLOCK), usleep(1000);
            funcd_worker *w = start_worker(rt, &l, sleep_argv);
            if (w)
                stop_worker(rt, &l, w);
        }
        rt->free(rt);
        event_base_free(l.base);
    }
    wt->stop = 1;
    return NULL;
}

TEST(the_host_is_not_woken_by_our_children)
{
    int sv[2];
    CHECK_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    struct timeval tv = {0, 200 * 1000};
    setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    waiter wt = {sv[0], 0, 0, 0};
    pthread_t th;
    CHECK_INT(pthread_create(&th, NULL, start_and_end, &wt), 0);
    while (!wt.stop) {
        char byte;
        ssize_t n = recv(wt.fd, &byte, 1, 0);
        wt.calls++;
        if (n < 0 && errno == EINTR)
            wt.interrupted++;
    }
    pthread_join(th, NULL);
    close(sv[0]);
    close(sv[1]);
    fprintf(stderr, "  %d of the host's %d waits were interrupted\n", wt.interrupted, wt.calls);
    CHECK_INT(wt.interrupted, 0);
}

int main(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "SKIP: the sandbox tests need root (namespaces, cgroups)\n");
        return 77;
    }
    snprintf(instance, sizeof(instance), "t%ld", (long)getpid());
    RUN(pid_file_follows_the_worker);
    RUN(only_our_instances_cgroups_are_cleaned_up);
    RUN(a_bad_instance_id_is_refused);
    RUN(a_crashed_runs_workers_are_ended);
    RUN(a_blank_init_waits_in_its_own_cgroups);
    RUN(a_failed_step_is_named);
    RUN(an_image_root_is_the_root);
    RUN(the_deny_list_covers_the_issue);
    RUN(sockets_are_in_the_namespace_before_the_program);
    RUN(a_static_program_sees_no_system_paths);
    RUN(the_init_is_a_program_of_its_own);
    RUN(the_host_is_not_woken_by_our_children);
    RUN(the_sandbox_has_none_of_our_groups);
    RUN(the_init_runs_where_memfds_are_noexec);
    RUN(a_worker_that_ends_at_once_is_told);
    RUN(no_descriptor_passes_where_close_range_is_refused);
    return HARNESS_END();
}
