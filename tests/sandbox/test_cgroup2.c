/*
 * The cgroup v2 layout (docs/adr/0042-cgroup-v2.md): which layout a host
 * gets (from /proc/self/cgroup and mountinfo text), and on this host's
 * cgroup2 mount, which has no controllers, what needs none: a blank init
 * is cloned into its own cgroup (CLONE_INTO_CGROUP, no task moved), a
 * start takes it there, and cgroup.kill ends every process of a worker's
 * cgroup, which is then removed. The cgroup2 root is forced with
 * FUNCD_TEST_CGROUP2_ROOT (tests only: cgroup.h).
 */
#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "funcd/funcd.h"
#include "funcd/sys/error.h"
#include "funcd/sys/runtime.h"
#include "harness.h"
#include "runtime/cgroup.h"
#include "sandbox_test.h"

#define PROCESS_OPTS(...) (&(funcd_process_options){FUNCD_PROCESS_OPTIONS_VERSION, __VA_ARGS__})

/* ---- layout detection: text in -------------------------------------------- */

static const char hybrid_mountinfo[] =
    "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
static const char debian_mountinfo[] =
    "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n"
    "26 23 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n";
/* A container's view: the host's subtree bound at /sys/fs/cgroup. */
static const char container_mountinfo[] =
    "700 650 0:23 /docker/abc /sys/fs/cgroup ro,nosuid - cgroup2 cgroup rw\n";

TEST(the_own_cgroup2_directory_is_found)
{
    char dir[400];
    CHECK_INT(funcd_cgroup2_own_dir("4:memory:/x\n1:cpu:/\n0::/\n", hybrid_mountinfo, NULL, dir,
                                    sizeof(dir)),
              1);
    CHECK_STR(dir, "/sys/fs/cgroup/unified");
    CHECK_INT(funcd_cgroup2_own_dir("0::/system.slice/funcd.service\n", debian_mountinfo, NULL,
                                    dir, sizeof(dir)),
              1);
    CHECK_STR(dir, "/sys/fs/cgroup/system.slice/funcd.service");
    /* After funcd moved itself into its leaf, its own cgroup is still the service's. */
    CHECK_INT(funcd_cgroup2_own_dir("0::/system.slice/funcd.service/funcd-self\n",
                                    debian_mountinfo, NULL, dir, sizeof(dir)),
              1);
    CHECK_STR(dir, "/sys/fs/cgroup/system.slice/funcd.service");
    CHECK_INT(funcd_cgroup2_own_dir("0::/docker/abc/app\n", container_mountinfo, NULL, dir,
                                    sizeof(dir)),
              1);
    CHECK_STR(dir, "/sys/fs/cgroup/app");
    CHECK_INT(funcd_cgroup2_own_dir("0::/\n", hybrid_mountinfo, "/tmp/cg2", dir, sizeof(dir)), 1);
    CHECK_STR(dir, "/tmp/cg2");
    /* Pure v1 (no "0::" line), or no cgroup2 mount: none. */
    CHECK_INT(funcd_cgroup2_own_dir("4:memory:/\n1:cpu:/\n", hybrid_mountinfo, NULL, dir,
                                    sizeof(dir)),
              0);
    CHECK_INT(funcd_cgroup2_own_dir("0::/\n", "31 30 0:28 / /sys/fs/cgroup/cpu rw - cgroup "
                                    "cgroup rw,cpu\n", NULL, dir, sizeof(dir)),
              0);
}

TEST(the_layout_is_chosen_by_the_controllers)
{
    unsigned all = funcd_cgroup_mask("memory pids cpu");
    CHECK_INT(all, 7);
    CHECK_INT(funcd_cgroup_mask("cpuset cpu io memory hugetlb pids rdma misc\n"), 7);
    CHECK_INT(funcd_cgroup_mask("cpuset io hugetlb\n"), 0); /* "cpuset" is not "cpu" */
    CHECK_INT(funcd_cgroup_mask("pids"), 1 << FUNCD_CG_PIDS);
    CHECK_INT(funcd_cgroup_mask(""), 0);
    CHECK_INT(funcd_cgroup_choose_v2(all, 0, 1, 0), 1);   /* Debian 12 */
    CHECK_INT(funcd_cgroup_choose_v2(0, all, 1, 0), 0);   /* this host: v1 controllers */
    CHECK_INT(funcd_cgroup_choose_v2(all, all, 0, 0), 0); /* v2 not writable */
    CHECK_INT(funcd_cgroup_choose_v2(1 << FUNCD_CG_PIDS, all, 1, 0), 0);
    CHECK_INT(funcd_cgroup_choose_v2(1 << FUNCD_CG_PIDS, 0, 1, 0), 1);
    CHECK_INT(funcd_cgroup_choose_v2(0, 0, 1, 0), 1); /* placement and kill at least */
    CHECK_INT(funcd_cgroup_choose_v2(0, all, 1, 1), 1); /* a test's root */
}

/* ---- on this host's cgroup2 mount ------------------------------------------ */

static char mnt[512], mnt_opts[512];
static char own_dir[1024]; /* this process's cgroup2 directory: the runtimes' go below */

typedef struct loop_ctx {
    struct event_base *base;
    int exited;
} loop_ctx;

static void on_exit_cb(funcd_worker *w, int status, void *payload)
{
    ((loop_ctx *)payload)->exited = 1;
}

/* `pid`'s cgroup2 path ("0::" line), "" if none. */
static void cgroup2_of(pid_t pid, char *out, size_t len)
{
    char path[64], text[2048];
    snprintf(path, sizeof(path), "/proc/%ld/cgroup", (long)pid);
    out[0] = '\0';
    if (read_text(path, text, sizeof(text)) < 0)
        return;
    char *l = strstr(text, "0::");
    if (l && (l == text || l[-1] == '\n'))
        snprintf(out, len, "%.*s", (int)strcspn(l + 3, "\n"), l + 3);
}

/* 1 when `pid` is listed in `dir`/cgroup.procs. */
static int listed_in(const char *dir, pid_t pid)
{
    char path[700], text[4096];
    snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
    if (read_text(path, text, sizeof(text)) < 0)
        return 0;
    for (char *save = NULL, *t = strtok_r(text, "\n", &save); t; t = strtok_r(NULL, "\n", &save))
        if (atol(t) == (long)pid)
            return 1;
    return 0;
}

/* Directories "funcd-<id>-*" below our own cgroup ("": any funcd's). */
static int runtime_dirs(const char *id)
{
    char prefix[64];
    int plen = snprintf(prefix, sizeof(prefix), *id ? "funcd-%s-" : "funcd-%s", id);
    DIR *d = opendir(own_dir);
    struct dirent *de;
    int n = 0;
    while (d && (de = readdir(d)))
        n += strncmp(de->d_name, prefix, (size_t)plen) == 0;
    if (d)
        closedir(d);
    return n;
}

/* 1 when `pid` no longer runs (gone, or a zombie not yet reaped). */
static int ended(pid_t pid)
{
    char path[64], text[512];
    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    if (read_text(path, text, sizeof(text)) < 0)
        return 1;
    const char *paren = strrchr(text, ')');
    return paren && paren[1] == ' ' && paren[2] == 'Z';
}

static char instance[32];

/*
 * A blank init is cloned into its own pre-made cgroup: it is listed there
 * before any start, and no task is ever moved (no write to cgroup.procs).
 * A start takes it where it is. Stopping the worker ends every process of
 * its cgroup, a child that ignores SIGTERM too, and the cgroups go.
 */
TEST(a_worker_is_cloned_into_its_cgroup_and_all_of_it_is_killed)
{
    char id[32];
    snprintf(id, sizeof(id), "%sa", instance);
    unsigned long moves0 = funcd_cgroup_moves();
    loop_ctx l = {event_base_new(), 0};
    funcd_runtime *rt = NULL;
    CHECK_INT(funcd_runtime_process_new_with(&rt, PROCESS_OPTS(1, NULL, .instance_id = id)), 0);
    CHECK_INT(rt->attach(rt, l.base), 0);
    char want[64];
    snprintf(want, sizeof(want), "/funcd-%s-", id);
    /* The loop refills the blanks (two): each in its own cgroup the moment we see it. */
    pid_t blanks[8];
    int n = 0, placed = 0, listed = 0;
    char before[8][512];
    for (int i = 0; i < 10000 && !(n == 2 && placed == n && listed == n); i++) {
        event_base_loop(l.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        usleep(1000);
        n = sandbox_children(blanks, 8);
        placed = listed = 0;
        for (int k = 0; k < n; k++) {
            cgroup2_of(blanks[k], before[k], sizeof(before[k]));
            char dir[1024];
            snprintf(dir, sizeof(dir), "%s%s", mnt, before[k]);
            placed += strstr(before[k], want) && strstr(before[k], "/w");
            listed += listed_in(dir, blanks[k]);
        }
    }
    unsigned long moves_blanks = funcd_cgroup_moves() - moves0;
    /* Limits need controllers this mount does not have: refused, by name. */
    static const char *const sh_argv[] = {
        "/bin/sh", "-c", "(trap '' TERM; exec /bin/sleep 1000) & exec /bin/sleep 1001", NULL};
    static const char *const env[] = {"PATH=/usr/bin:/bin", NULL};
    funcd_worker_spec limited = {sh_argv, env, NULL, NULL, {64 << 20, 0, 0}};
    funcd_worker_events ev = {NULL, on_exit_cb, &l};
    funcd_worker *w = NULL;
    int limited_rc = rt->start(rt, &limited, &ev, &w);
    char limited_msg[300];
    snprintf(limited_msg, sizeof(limited_msg), "%s", funcd_error_last()->message);
    funcd_worker_spec spec = {sh_argv, env, NULL, NULL, {0, 0, 0}};
    w = NULL;
    int rc = rt->start(rt, &spec, &ev, &w);
    if (rc < 0)
        fprintf(stderr, "  start: %s\n", funcd_error_last()->message);
    pid_t pid = w ? rt->pid(rt, w) : 0;
    int was_blank = -1;
    for (int k = 0; k < n; k++)
        if (blanks[k] == pid)
            was_blank = k;
    char now[512] = "", dir[1024] = "";
    pid_t tasks[16];
    int n_tasks = 0;
    if (pid > 0) {
        cgroup2_of(pid, now, sizeof(now));
        snprintf(dir, sizeof(dir), "%s%s", mnt, now);
        /* The init, the shell's two sleeps: wait until the TERM-ignoring one is there. */
        for (int i = 0; i < 5000 && n_tasks < 3; i++) {
            char path[1100], text[1024];
            snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
            n_tasks = 0;
            if (read_text(path, text, sizeof(text)) == 0)
                for (char *s = NULL, *t = strtok_r(text, "\n", &s); t && n_tasks < 16;
                     t = strtok_r(NULL, "\n", &s))
                    tasks[n_tasks++] = (pid_t)atol(t);
            if (n_tasks < 3)
                usleep(1000);
        }
    }
    /* The next start takes the other blank, the one after that finds
     * none (the loop has not run to refill): cloned into its new cgroup. */
    loop_ctx l2 = {l.base, 0}, l3 = {l.base, 0};
    funcd_worker_events ev2 = {NULL, on_exit_cb, &l2}, ev3 = {NULL, on_exit_cb, &l3};
    funcd_worker *w2 = NULL, *w3 = NULL;
    int rc2 = rt->start(rt, &spec, &ev2, &w2), rc3 = rt->start(rt, &spec, &ev3, &w3);
    pid_t pid3 = w3 ? rt->pid(rt, w3) : 0;
    int w3_blank = 0;
    for (int k = 0; k < n; k++)
        w3_blank |= blanks[k] == pid3;
    char planned[512] = "";
    if (pid3 > 0)
        cgroup2_of(pid3, planned, sizeof(planned));
    unsigned long moves_start = funcd_cgroup_moves() - moves0;
    if (w2) {
        rt->stop(rt, w2, 0);
        for (int i = 0; i < 10000 && !l2.exited; i++)
            event_base_loop(l.base, EVLOOP_ONCE | EVLOOP_NONBLOCK), usleep(1000);
        rt->release(rt, w2);
    }
    if (w3) {
        rt->stop(rt, w3, 0);
        for (int i = 0; i < 10000 && !l3.exited; i++)
            event_base_loop(l.base, EVLOOP_ONCE | EVLOOP_NONBLOCK), usleep(1000);
        rt->release(rt, w3);
    }
    if (w) {
        rt->stop(rt, w, 200);
        for (int i = 0; i < 10000 && !l.exited; i++)
            event_base_loop(l.base, EVLOOP_ONCE | EVLOOP_NONBLOCK), usleep(1000);
    }
    int all_ended = 1;
    for (int i = 0; i < 5000; i++) {
        all_ended = 1;
        for (int k = 0; k < n_tasks; k++)
            all_ended &= ended(tasks[k]);
        if (all_ended)
            break;
        usleep(1000);
    }
    /* The worker's cgroup goes on the runtime's reaper thread, just after
     * its end is told (not on the loop: process.c). */
    for (int i = 0; i < 5000 && dir[0] && access(dir, F_OK) == 0; i++)
        usleep(1000);
    int dir_left = dir[0] && access(dir, F_OK) == 0;
    if (w)
        rt->release(rt, w);
    rt->free(rt);
    event_base_free(l.base);
    pid_t left[8];
    int n_left = sandbox_children(left, 8);
    CHECK_INT(n, 2);
    CHECK_INT(placed, n); /* in a worker's cgroup of our runtime before any start */
    CHECK_INT(listed, n);
    CHECK_INT(moves_blanks, 0); /* cloned there: nothing moved */
    CHECK(limited_rc < 0);
    CHECK_CONTAINS(limited_msg, "spec.resources.memory needs the cgroup v2 memory controller");
    CHECK_INT(rc, 0);
    CHECK(was_blank >= 0);
    CHECK_STR(now, before[was_blank]); /* taken where it waited */
    CHECK_INT(rc2, 0);
    CHECK_INT(rc3, 0);
    CHECK(pid3 > 0 && !w3_blank);
    CHECK(strstr(planned, want) && strstr(planned, "/w"));
    CHECK_INT(moves_start, 0);
    CHECK(n_tasks >= 3);
    CHECK(all_ended);
    CHECK_INT(dir_left, 0);
    CHECK_INT(n_left, 0);
    CHECK_INT(runtime_dirs(id), 0);
}

/*
 * cgroup.kill on its own: a process placed in a worker's cgroup that left
 * the worker's session and process group, and its child, both ignoring
 * SIGTERM, with no pid namespace around them, are ended by removing the
 * cgroup.
 */
TEST(removing_a_cgroup_kills_what_escaped_the_process_group)
{
    char id[32];
    snprintf(id, sizeof(id), "%sb", instance);
    funcd_cgroups cg;
    funcd_cgroups_init(&cg, id);
    int v2 = cg.v2;
    char note[600], want_note[1200];
    int level = funcd_cgroup_note(note, sizeof(note));
    snprintf(want_note, sizeof(want_note), "cgroup: workers' cgroups on cgroup v2 under %s/funcd-%s-",
             own_dir, id);
    unsigned wid = funcd_cgroup_next_id(&cg);
    int made = funcd_cgroup_make_blank(&cg, wid, 0);
    int sync[2], go[2];
    if (pipe(sync) != 0 || pipe(go) != 0)
        FAILF("pipe: %s", strerror(errno));
    prctl(PR_SET_CHILD_SUBREAPER, 1); /* the grandchild comes back to us */
    pid_t child = fork();
    if (child == 0) {
        close(sync[0]);
        close(go[1]);
        setsid();
        signal(SIGTERM, SIG_IGN);
        char c;
        if (read(go[0], &c, 1) != 1) /* placed first */
            _exit(1);
        pid_t gc = fork();
        if (gc == 0) {
            setsid();
            for (;;)
                pause();
        }
        if (write(sync[1], &gc, sizeof(gc)) != (ssize_t)sizeof(gc))
            _exit(1);
        for (;;)
            pause();
    }
    close(sync[1]);
    close(go[0]);
    /* Placed before it forks: the grandchild is born in the cgroup. */
    int attached = child > 0 && funcd_cgroup_attach(&cg, wid, child) == 0;
    if (write(go[1], "g", 1) != 1)
        attached = 0;
    close(go[1]);
    pid_t gc = 0;
    if (read(sync[0], &gc, sizeof(gc)) != (ssize_t)sizeof(gc))
        gc = 0;
    close(sync[0]);
    char dirs[FUNCD_CG_COUNT][512];
    size_t n_dirs = funcd_cgroup_dirs(&cg, wid, dirs);
    int both_in = n_dirs == 1 && listed_in(dirs[0], child) && gc > 0 && listed_in(dirs[0], gc);
    kill(child, SIGTERM); /* ignored */
    usleep(20000);
    int survived_term = !ended(child);
    funcd_cgroup_remove(&cg, wid);
    int child_status = 0, gc_status = 0;
    int reaped = child > 0 && waitpid(child, &child_status, 0) == child;
    int gc_reaped = gc > 0 && waitpid(gc, &gc_status, 0) == gc;
    int dir_left = n_dirs && access(dirs[0], F_OK) == 0;
    funcd_cgroups_fini(&cg);
    prctl(PR_SET_CHILD_SUBREAPER, 0);
    CHECK_INT(v2, 1);
    CHECK_INT(level, FUNCD_LOG_INFO); /* what the platform logs */
    CHECK_CONTAINS(note, want_note);
    CHECK_CONTAINS(note, "(controllers: none: no spec.resources limits)");
    CHECK_INT(made, 0);
    CHECK(attached);
    CHECK(both_in);
    CHECK(survived_term);
    CHECK(reaped && WIFSIGNALED(child_status) && WTERMSIG(child_status) == SIGKILL);
    CHECK(gc_reaped && WIFSIGNALED(gc_status) && WTERMSIG(gc_status) == SIGKILL);
    CHECK_INT(dir_left, 0);
    CHECK_INT(runtime_dirs(id), 0);
}

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_text[8192];

static void capture(funcd_log_level level, const char *message, void *payload)
{
    pthread_mutex_lock(&log_lock);
    size_t n = strlen(log_text);
    snprintf(log_text + n, sizeof(log_text) - n, "%d %s\n", (int)level, message);
    pthread_mutex_unlock(&log_lock);
}

/* A platform tells the operator which layout its workers' cgroups use,
 * and leaves none behind. */
TEST(the_platform_logs_the_layout)
{
    funcd_platform *p = NULL;
    log_text[0] = '\0';
    int dirs_before = runtime_dirs("");
    int rc = funcd_platform_new(&p, funcd_in_memory(), funcd_with_sandbox(1),
                                funcd_with_logger(capture, FUNCD_LOG_INFO, NULL));
    if (rc == 0)
        rc = funcd_platform_start(p);
    if (rc < 0)
        fprintf(stderr, "  platform: %s\n", funcd_error_last()->message);
    funcd_platform_free(p);
    int dirs_after = runtime_dirs("");
    char want[1200];
    snprintf(want, sizeof(want), "%d cgroup: workers' cgroups on cgroup v2 under %s/funcd-",
             (int)FUNCD_LOG_INFO, own_dir);
    CHECK_INT(rc, 0);
    CHECK_CONTAINS(log_text, want);
    CHECK(!strstr(log_text, "cgroup v1"));
    CHECK_INT(dirs_after, dirs_before); /* any "funcd-*" it made is gone */
}

int main(void)
{
    RUN(the_own_cgroup2_directory_is_found);
    RUN(the_layout_is_chosen_by_the_controllers);
    if (geteuid() != 0 || !funcd_cgroup2_options(mnt, sizeof(mnt), mnt_opts, sizeof(mnt_opts))) {
        fprintf(stderr, "SKIP: placement and cgroup.kill need root and a cgroup2 mount\n");
        return HARNESS_END();
    }
    char own[512];
    cgroup2_of(getpid(), own, sizeof(own));
    snprintf(own_dir, sizeof(own_dir), "%s%s", mnt, strcmp(own, "/") ? own : "");
    setenv(FUNCD_CGROUP2_TEST_ROOT_ENV, mnt, 1);
    snprintf(instance, sizeof(instance), "v%ld", (long)getpid());
    RUN(a_worker_is_cloned_into_its_cgroup_and_all_of_it_is_killed);
    RUN(removing_a_cgroup_kills_what_escaped_the_process_group);
    RUN(the_platform_logs_the_layout);
    unsetenv(FUNCD_CGROUP2_TEST_ROOT_ENV);
    /* Nothing host-wide changed: the mount's options are what they were. */
    char m2[512], o2[512];
    funcd_cgroup2_options(m2, sizeof(m2), o2, sizeof(o2));
    if (strcmp(o2, mnt_opts) != 0) {
        fprintf(stderr, "  the cgroup2 mount's options changed: %s -> %s\n", mnt_opts, o2);
        harness_failed++;
    }
    return HARNESS_END();
}
