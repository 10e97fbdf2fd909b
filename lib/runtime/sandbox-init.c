/*
 * The sandbox init: pid 1 of every sandboxed worker (docs/security.md,
 * docs/adr/0060). A small static program of its own, which libfuncd
 * carries and execs the way posix_spawn starts one (funcd's memory is
 * borrowed until the exec, not copied), so that making a sandbox never
 * copies the page tables of a process as large as funcd, and no sandbox
 * holds a copy of funcd's memory.
 *
 *     funcd-sandbox CTL CGROUP NET
 *
 * CTL: a stream socket to funcd. CGROUP: a cgroup2 directory to clone the
 * init into, or -1. NET: 1 when the sandbox gets a network namespace of
 * its own.
 *
 * Stage 0 (this process) clones the init into new user, mount, pid, ipc,
 * uts (and network) namespaces as funcd's own child (CLONE_PARENT), tells
 * funcd its pid and exits. The init waits until funcd has mapped its ids
 * and sent the configuration (sandbox-child.h), takes the one mapped id,
 * brings loopback up, drops the bounding set and, unless a job came with
 * the configuration (`direct`), stages the root and says "r": a blank,
 * waiting for a job. With the job it finishes the root, forks the worker
 * (which drops every privilege, loads the seccomp filter and execs) and
 * stays as the namespace's reaper, passing termination signals on and
 * writing the worker's wait status to funcd as it ends.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/mount.h>
#include <linux/sched.h> /* struct clone_args, CLONE_INTO_CGROUP: glibc has no clone3 */
#include <linux/seccomp.h>
#include <linux/securebits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/netns.h"
#include "runtime/sandbox-child.h"
#include "util/closerange.h"

#define STAGING SANDBOX_STAGING
#define RO_ATTRS (MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)

/* The job, as the init holds it. */
typedef struct job {
    const sandbox_config *cfg;
    sandbox_job_msg msg;
    int err_w, status_w, stdio[3], root_fd;
    int fd[SANDBOX_MAX_BINDS]; /* each bind's tree, or its source opened O_PATH */
    char *prog, *cwd, **argv, **env;
} job;

/* ---- the root ------------------------------------------------------------- */

/* Path binds are opened before the staging tmpfs can hide their source
 * (which may lie below STAGING) and bound through /proc/self/fd. */
static void open_path_binds(job *j)
{
    for (uint32_t i = 0; i < j->msg.n_binds; i++)
        if (j->msg.binds[i].by_path &&
            (j->fd[i] = open(j->msg.binds[i].source, O_PATH | O_CLOEXEC)) < 0)
            funcd_sandbox_fail(j->err_w, "open ", j->msg.binds[i].source, errno);
}

static int attach_bind(const sandbox_bind *b, int fd, const char *dst)
{
    if (!b->by_path)
        return funcd_sandbox_move_tree(fd, dst);
    char src[40];
    snprintf(src, sizeof(src), "/proc/self/fd/%d", fd);
    if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) != 0)
        return -1;
    return funcd_sandbox_set_attr(AT_FDCWD, dst, AT_RECURSIVE,
                            MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                (b->writable ? 0 : MOUNT_ATTR_RDONLY),
                            0);
}

static void mount_system(const sandbox_config *cfg, int err_w)
{
    char dst[SANDBOX_PATH];
    for (uint32_t i = 0; i < cfg->n_system; i++) {
        const sandbox_system_entry *e = &cfg->system[i];
        funcd_sandbox_join(dst, STAGING, e->path);
        if (e->link[0]) {
            if (symlink(e->link, dst) != 0 && errno != EEXIST)
                funcd_sandbox_fail(err_w, "symlink ", e->path, errno);
            continue;
        }
        if ((e->is_dir ? funcd_sandbox_mkdir_p(dst) : funcd_sandbox_make_file(dst)) != 0)
            funcd_sandbox_fail(err_w, "mkdir ", dst, errno);
        if (mount(e->path, dst, NULL, MS_BIND | MS_REC, NULL) != 0)
            funcd_sandbox_fail(err_w, "bind ", e->path, errno);
        if (funcd_sandbox_set_attr(AT_FDCWD, dst, AT_RECURSIVE, RO_ATTRS, 0) != 0)
            funcd_sandbox_fail(err_w, "read-only ", e->path, errno);
    }
}

/* Takes back what mount_system put in a staged root, for a job whose
 * program needs none of it (a static one). */
static void unmount_system(const sandbox_config *cfg, int err_w)
{
    char dst[SANDBOX_PATH];
    for (uint32_t i = cfg->n_system; i-- > 0;) {
        const sandbox_system_entry *e = &cfg->system[i];
        funcd_sandbox_join(dst, STAGING, e->path);
        if (!e->link[0] && umount2(dst, MNT_DETACH) != 0)
            funcd_sandbox_fail(err_w, "unmount ", e->path, errno);
        if ((e->link[0] || !e->is_dir ? unlink(dst) : rmdir(dst)) != 0)
            funcd_sandbox_fail(err_w, "remove ", e->path, errno);
    }
    rmdir(STAGING "/etc"); /* made for the files above; gone when empty */
}

static void mount_binds(job *j)
{
    char dst[SANDBOX_PATH];
    for (uint32_t i = 0; i < j->msg.n_binds; i++) {
        const sandbox_bind *b = &j->msg.binds[i];
        funcd_sandbox_join(dst, STAGING, b->target);
        if ((b->is_file ? funcd_sandbox_make_file(dst) : funcd_sandbox_mkdir_p(dst)) != 0)
            funcd_sandbox_fail(j->err_w, "mkdir ", b->target, errno);
        if (attach_bind(b, j->fd[i], dst) != 0)
            funcd_sandbox_fail(j->err_w, "bind ", b->target, errno);
        close(j->fd[i]);
        j->fd[i] = -1;
    }
}

static void mount_dev(int err_w)
{
    static const char *const devices[] = {"null", "zero", "random", "urandom"};
    static const char *const links[][2] = {{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"},
                                           {"stdout", "/proc/self/fd/1"},
                                           {"stderr", "/proc/self/fd/2"}};
    char dst[SANDBOX_PATH], src[64];
    if (mkdir(STAGING "/dev", 0755) != 0 && errno != EEXIST)
        funcd_sandbox_fail(err_w, "mkdir /dev", NULL, errno);
    if (mount("tmpfs", STAGING "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=755") != 0)
        funcd_sandbox_fail(err_w, "mount /dev", NULL, errno);
    for (size_t i = 0; i < sizeof(devices) / sizeof(devices[0]); i++) {
        snprintf(src, sizeof(src), "/dev/%s", devices[i]);
        funcd_sandbox_join(dst, STAGING "/dev/", devices[i]);
        if (funcd_sandbox_make_file(dst) != 0 || mount(src, dst, NULL, MS_BIND, NULL) != 0)
            funcd_sandbox_fail(err_w, "bind ", src, errno);
    }
    for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++) {
        funcd_sandbox_join(dst, STAGING "/dev/", links[i][0]);
        if (symlink(links[i][1], dst) != 0)
            funcd_sandbox_fail(err_w, "symlink ", dst, errno);
    }
    if (funcd_sandbox_set_attr(AT_FDCWD, STAGING "/dev", 0, MOUNT_ATTR_RDONLY, 0) != 0)
        funcd_sandbox_fail(err_w, "read-only /dev", NULL, errno);
}

/* The part of a root no job changes: a fresh tmpfs (or the image's root),
 * /proc, /dev, /tmp and, when `system`, the host's system paths. A blank
 * stages it before its job comes (off the request's path). */
static void stage_root(const sandbox_config *cfg, int root_fd, int system, int err_w)
{
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        funcd_sandbox_fail(err_w, "make mounts private", NULL, errno);
    if (root_fd >= 0) {
        if (funcd_sandbox_move_tree(root_fd, STAGING) != 0)
            funcd_sandbox_fail(err_w, "mount the rootfs", NULL, errno);
        close(root_fd);
    } else if (mount("tmpfs", STAGING, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755") != 0) {
        funcd_sandbox_fail(err_w, "mount the root tmpfs", NULL, errno);
    }
    if ((mkdir(STAGING "/proc", 0555) != 0 && errno != EEXIST) ||
        mount("proc", STAGING "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
        funcd_sandbox_fail(err_w, "mount /proc", NULL, errno);
    mount_dev(err_w);
    /* /tmp before the binds: an artifact may live under the host's /tmp. */
    if ((mkdir(STAGING "/tmp", 01777) != 0 && errno != EEXIST) ||
        mount("tmpfs", STAGING "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, cfg->tmp_opts) != 0)
        funcd_sandbox_fail(err_w, "mount /tmp", NULL, errno);
    if (system)
        mount_system(cfg, err_w);
}

/* The job's part: its binds, then the staged root becomes `/`. */
static void enter_root(job *j)
{
    mount_binds(j);
    if (chdir(STAGING) != 0 || syscall(SYS_pivot_root, ".", ".") != 0)
        funcd_sandbox_fail(j->err_w, "pivot_root", NULL, errno);
    if (umount2(".", MNT_DETACH) != 0 || chdir("/") != 0)
        funcd_sandbox_fail(j->err_w, "detach the old root", NULL, errno);
    if (!j->msg.has_root && funcd_sandbox_set_attr(AT_FDCWD, "/", 0, MOUNT_ATTR_RDONLY, 0) != 0)
        funcd_sandbox_fail(j->err_w, "read-only /", NULL, errno);
}

static void build_root(job *j)
{
    open_path_binds(j);
    stage_root(j->cfg, j->root_fd, j->msg.system, j->err_w);
    j->root_fd = -1; /* attached and closed */
    enter_root(j);
}

/* A blank's root, staged with the system paths before its job: finished
 * for the job, or (an image's root, binds by path) taken down and built
 * afresh. */
static void finish_staged_root(job *j)
{
    int by_path = 0;
    for (uint32_t i = 0; i < j->msg.n_binds; i++)
        by_path |= j->msg.binds[i].by_path;
    if (j->msg.has_root || by_path) { /* path binds may lie below STAGING */
        if (umount2(STAGING, MNT_DETACH) != 0)
            funcd_sandbox_fail(j->err_w, "unmount the staged root", NULL, errno);
        build_root(j);
        return;
    }
    if (!j->msg.system)
        unmount_system(j->cfg, j->err_w);
    enter_root(j);
}

/* ---- privileges ----------------------------------------------------------- */

/* What the worker must not get back by exec: its bounding set. Needs the
 * namespace's capabilities, which the init keeps. */
static int drop_bounding_set(const sandbox_config *cfg)
{
    for (int cap = 0; cap <= cfg->cap_last; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
            return -1;
    return 0;
}

static void default_signals(void)
{
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    for (int sig = 1; sig < NSIG; sig++)
        sigaction(sig, &dfl, NULL);
}

static void drop_privileges(const job *j)
{
    if (prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                                     SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                                     SECBIT_NO_CAP_AMBIENT_RAISE |
                                     SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED) != 0)
        funcd_sandbox_fail(j->err_w, "securebits", NULL, errno);
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof(data));
    if (syscall(SYS_capset, &hdr, data) != 0)
        funcd_sandbox_fail(j->err_w, "capset", NULL, errno);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        funcd_sandbox_fail(j->err_w, "no_new_privs", NULL, errno);
    struct sock_fprog prog = {(unsigned short)j->cfg->filter_len,
                              (struct sock_filter *)j->cfg->filter};
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        funcd_sandbox_fail(j->err_w, "seccomp", NULL, errno);
}

static _Noreturn void worker_main(const job *j)
{
    setpgid(0, 0); /* init passes signals on; the worker's own group gets them */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (j->cwd && chdir(j->cwd) != 0)
        funcd_sandbox_fail(j->err_w, "chdir ", j->cwd, errno);
    drop_privileges(j);
    funcd_close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(j->prog, j->argv, j->env);
    funcd_sandbox_fail(j->err_w, "execve ", j->prog, errno);
}

/* ---- pid 1 ---------------------------------------------------------------- */

static void on_forwarded(int sig)
{
    (void)sig; /* only to make init's signals deliverable (see init_loop) */
}

/* Reaps everything, passes termination signals on, and ends with the
 * worker, telling funcd how it ended. */
static _Noreturn void init_loop(int status_w, pid_t worker)
{
    static const int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
    sigset_t wait_set;
    sigemptyset(&wait_set);
    sigaddset(&wait_set, SIGCHLD);
    /* A pid namespace's init gets a signal from outside only if it has a
     * handler for it; the handler never runs, the signals stay blocked. */
    struct sigaction sa = {.sa_handler = on_forwarded};
    for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++) {
        sigaction(forwarded[i], &sa, NULL);
        sigaddset(&wait_set, forwarded[i]);
    }
    sigaction(SIGCHLD, &sa, NULL);
    sigprocmask(SIG_BLOCK, &wait_set, NULL);
    for (int sig = SIGCHLD;; sig = 0) { /* a first look: the worker may have ended already */
        siginfo_t si;
        if (!sig)
            sig = sigwaitinfo(&wait_set, &si);
        if (sig < 0)
            continue;
        if (sig != SIGCHLD) {
            kill(-1, sig);
            continue;
        }
        int status;
        pid_t r;
        while ((r = waitpid(-1, &status, WNOHANG)) > 0)
            if (r == worker) {
                ssize_t ignored = write(status_w, &status, sizeof(status));
                (void)ignored;
                _exit(0); /* the kernel ends what is left in the namespace */
            }
    }
}

/* Keeps exactly the descriptors `keep` (and 0-2). */
static void close_all_but(int *keep, int n)
{
    for (int i = 1; i < n; i++) /* insertion sort: a handful of numbers */
        for (int k = i; k > 0 && keep[k - 1] > keep[k]; k--) {
            int t = keep[k];
            keep[k] = keep[k - 1];
            keep[k - 1] = t;
        }
    unsigned from = 3;
    for (int i = 0; i < n; i++) {
        if (keep[i] < 3)
            continue;
        if ((unsigned)keep[i] > from)
            funcd_close_range(from, (unsigned)keep[i] - 1, 0);
        from = (unsigned)keep[i] + 1;
    }
    funcd_close_range(from, ~0U, 0);
}

/* The worker's stdio in place; nothing open but the job's descriptors. */
static void keep_job_fds(job *j)
{
    int null = -1;
    for (int i = 0; i < 3; i++) {
        int fd = j->stdio[i];
        if (fd < 0) {
            if (null < 0)
                null = open("/dev/null", O_RDWR | O_CLOEXEC);
            fd = null;
        }
        if (fd >= 0 && fd != i)
            dup2(fd, i);
        else if (fd == i)
            fcntl(fd, F_SETFD, 0);
    }
    int keep[SANDBOX_JOB_FDS], n = 0;
    keep[n++] = j->err_w;
    keep[n++] = j->status_w;
    if (j->root_fd >= 0)
        keep[n++] = j->root_fd;
    for (uint32_t i = 0; i < j->msg.n_binds; i++)
        if (j->fd[i] >= 0)
            keep[n++] = j->fd[i];
    close_all_but(keep, n);
}

/* The job's strings, from the area: program, directory, argv, env. */
static int parse_area(job *j, char *area, uint32_t len)
{
    if (!len || area[len - 1] != '\0')
        return -1;
    char *p = area, *end = area + len;
    j->argv = calloc(j->msg.argc + 1, sizeof(char *));
    j->env = calloc(j->msg.envc + 1, sizeof(char *));
    if (!j->argv || !j->env)
        return -1;
    j->prog = p;
    p += strlen(p) + 1;
    if (j->msg.has_cwd) {
        if (p >= end)
            return -1;
        j->cwd = p;
        p += strlen(p) + 1;
    }
    for (uint32_t i = 0; i < j->msg.argc; i++, p += strlen(p) + 1) {
        if (p >= end)
            return -1;
        j->argv[i] = p;
    }
    for (uint32_t i = 0; i < j->msg.envc; i++, p += strlen(p) + 1) {
        if (p >= end)
            return -1;
        j->env[i] = p;
    }
    return 0;
}

typedef union fd_cmsg {
    char buf[CMSG_SPACE(sizeof(int) * SANDBOX_JOB_FDS)];
    struct cmsghdr align;
} fd_cmsg;

/* The job from funcd: its header with its descriptors, then its strings.
 * EOF before any of it: funcd gave up on this sandbox. */
static void receive_job(int ctl, job *j)
{
    fd_cmsg u;
    struct iovec iov = {&j->msg, sizeof(j->msg)};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                       .msg_controllen = sizeof(u.buf)};
    ssize_t n;
    do
        n = recvmsg(ctl, &m, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
        _exit(0);
    int fds[SANDBOX_JOB_FDS];
    size_t got = 0;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
        got = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        memcpy(fds, CMSG_DATA(cm), got * sizeof(int));
    }
    if (got < 2 || (m.msg_flags & MSG_CTRUNC)) {
        if (got >= 1) /* the error pipe came: say it there */
            funcd_sandbox_fail(fds[0], "receive the job's descriptors", NULL, EPROTO);
        _exit(126);
    }
    j->err_w = fds[0];
    j->status_w = fds[1];
    if (funcd_sandbox_read_full(ctl, (char *)&j->msg + n, sizeof(j->msg) - (size_t)n) != 0 ||
        j->msg.magic != SANDBOX_MAGIC || j->msg.n_binds > SANDBOX_MAX_BINDS ||
        j->msg.area_len > SANDBOX_JOB_AREA)
        funcd_sandbox_fail(j->err_w, "receive the job", NULL, EPROTO);
    size_t want = 2, k = 2;
    for (int i = 0; i < 3; i++)
        want += j->msg.stdio[i] != 0;
    want += j->msg.has_root != 0;
    for (uint32_t i = 0; i < j->msg.n_binds; i++)
        want += !j->msg.binds[i].by_path;
    if (got != want)
        funcd_sandbox_fail(j->err_w, "receive the job's descriptors", NULL, EPROTO);
    for (int i = 0; i < 3; i++)
        j->stdio[i] = j->msg.stdio[i] ? fds[k++] : -1;
    j->root_fd = j->msg.has_root ? fds[k++] : -1;
    for (uint32_t i = 0; i < j->msg.n_binds; i++)
        j->fd[i] = j->msg.binds[i].by_path ? -1 : fds[k++];
    char *area = malloc(j->msg.area_len ? j->msg.area_len : 1);
    if (!area || funcd_sandbox_read_full(ctl, area, j->msg.area_len) != 0 ||
        parse_area(j, area, j->msg.area_len) != 0)
        funcd_sandbox_fail(j->err_w, "receive the job's strings", NULL, area ? EPROTO : ENOMEM);
    close(ctl);
    keep_job_fds(j);
}

static _Noreturn void init_main(int ctl)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    prctl(PR_SET_NAME, "funcd-sandbox");
    setpgid(0, 0);
    /* Nothing of funcd's, not even its stdio (a waiting blank must not
     * hold a pipe someone waits to see closed): /dev/null until the job. */
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int i = 0; i < 3 && null >= 0; i++)
        dup2(null, i);
    int keep[1] = {ctl};
    close_all_but(keep, 1);
    static sandbox_hello hello;
    static sandbox_config cfg;
    static job j;
    if (funcd_sandbox_read_full(ctl, &hello, sizeof(hello)) != 0 || hello.magic != SANDBOX_MAGIC ||
        funcd_sandbox_read_full(ctl, &cfg, sizeof(cfg)) != 0 || cfg.n_system > SANDBOX_MAX_SYSTEM ||
        cfg.filter_len > SANDBOX_FILTER_MAX)
        _exit(0); /* the ids were not mapped: funcd gave up */
    j.cfg = &cfg;
    j.root_fd = -1;
    if (hello.direct)
        receive_job(ctl, &j);
    /* A failure before a job is told by the blank's end (funcd sees its
     * socket close instead of "r"), one after it on the job's error pipe. */
    const char *step = NULL, *lo_step;
    int err = 0;
    if (funcd_sandbox_become_worker_user() != 0)
        step = "become the mapped user", err = errno;
    /* A change of credentials clears the parent-death signal: arm it again,
     * so that funcd's death (kill -9 included) ends the sandbox (and with
     * its init, the kernel ends every process of its pid namespace). */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (!step && hello.network && funcd_netns_loopback_up(&lo_step) != 0)
        step = lo_step, err = errno;
    if (!step && drop_bounding_set(&cfg) != 0)
        step = "drop the bounding set", err = errno;
    if (step && hello.direct)
        funcd_sandbox_fail(j.err_w, step, NULL, err);
    if (step)
        _exit(126);
    default_signals();
    if (hello.direct) {
        build_root(&j);
    } else {
        stage_root(&cfg, -1, 1, -1);
        if (write(ctl, "r", 1) != 1)
            _exit(126);
        receive_job(ctl, &j);
        finish_staged_root(&j);
    }
    pid_t worker = fork();
    if (worker == 0)
        worker_main(&j);
    if (worker < 0)
        funcd_sandbox_fail(j.err_w, "fork the worker", NULL, errno);
    sandbox_child_error forked = {0, SANDBOX_FORKED};
    if (write(j.err_w, &forked, sizeof(forked)) != (ssize_t)sizeof(forked))
        _exit(126);
    close(j.err_w);
    init_loop(j.status_w, worker);
}

/* Stage 0: the namespaces, and the init in them as funcd's child. */
int main(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    int ctl = atoi(argv[1]), cg = atoi(argv[2]), net = atoi(argv[3]);
    /* Every signal blocked, in stage 0 and the init it clones, until the
     * init waits for them (init_loop): a worker that ends before then
     * leaves its SIGCHLD pending instead of dropped (the worker unblocks
     * all before its exec). funcd's starting thread left SIGCHLD open. */
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    if (ctl < 3) { /* the init's stdio goes over 0-2 */
        int high = fcntl(ctl, F_DUPFD_CLOEXEC, 3);
        if (high < 0)
            return 2;
        ctl = high;
    }
    /* None of funcd's supplementary groups goes with the sandbox: outside
     * its user namespace they would still count (as nogroup inside). */
    sandbox_report r = {-1, 0, 0};
    if (geteuid() == 0 && setgroups(0, NULL) != 0) {
        r.err = errno;
        ssize_t ignored = write(ctl, &r, sizeof(r));
        (void)ignored;
        return 2;
    }
    unsigned long flags = CLONE_PARENT | CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID |
                          CLONE_NEWIPC | CLONE_NEWUTS | (net ? CLONE_NEWNET : 0);
    long pid = -1;
    if (cg >= 0) { /* cgroup v2: straight into its cgroup (kernel 5.7+): no move */
        struct clone_args args = {.flags = flags | CLONE_INTO_CGROUP, .cgroup = (uint64_t)cg};
        pid = syscall(SYS_clone3, &args, sizeof(args));
        if (pid == 0)
            init_main(ctl);
        r.placed = pid > 0;
        r.err = pid < 0 ? errno : 0;
    }
    if (pid < 0 && (cg < 0 || r.err == ENOSYS || r.err == E2BIG)) {
        pid = syscall(SYS_clone, flags, 0, NULL, NULL, 0);
        if (pid == 0)
            init_main(ctl);
        r.err = pid < 0 ? errno : 0;
    }
    r.pid = (int32_t)pid;
    ssize_t ignored = write(ctl, &r, sizeof(r));
    (void)ignored;
    return 0;
}
