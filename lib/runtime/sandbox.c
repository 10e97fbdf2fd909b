#include "runtime/sandbox.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/mount.h>
#include <linux/sched.h> /* struct clone_args, CLONE_INTO_CGROUP: glibc has no clone3 */
#include <linux/seccomp.h>
#include <linux/securebits.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "funcd/sys/error.h"
#include "runtime/netns.h"
#include "runtime/seccomp.h"

#define DEFAULT_UID 65534
/* The uid and gid a worker (and its init) has inside its user namespace:
 * not root there either (ADR 0024). The only id mapped: to the host uid. */
#define INSIDE_ID 1000
#define DEFAULT_TMP_BYTES (64ull << 20)
#define MAX_BINDS 32
#define MAX_SYSTEM 16
#define PATH_BUF 512
/* Where the new root is put together: any directory of the host works,
 * since the mount over it lives only in the child's private namespace, and
 * nothing bound by path comes from below it. */
#define STAGING "/tmp"

#define SHARED_STACK (64 * 1024)

/* Blank inits kept ready per runtime (ADR 0013): namespaces made, ids
 * mapped, loopback up, waiting for a job. */
#define BLANK_POOL 2
/* Room for a job's strings in a blank's shared page set; a larger job
 * takes the ordinary path. */
#define BLANK_AREA (128 * 1024)
/* err_w, status_w, stdio, the rootfs and one per bind. */
#define JOB_FDS (5 + 1 + MAX_BINDS)
/* A blank's creation failing this often in a row disables the pool. */
#define BLANK_MAX_FAILURES 3

/* Under AddressSanitizer a fresh stack may lie where an earlier one left
 * poisoned shadow (munmap does not clear it): clear it around each use. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define UNPOISON_STACK(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define UNPOISON_STACK(p, n) ((void)(p), (void)(n))
#endif
/* Code run on such a stack: AddressSanitizer's bookkeeping before a call
 * that does not return assumes the thread's own stack. */
#define ON_SHARED_STACK __attribute__((no_sanitize("address")))

/* A host path every dynamically linked program or interpreter needs. */
typedef struct system_entry {
    char path[64];
    char link[PATH_BUF]; /* a symlink's target, or "" */
    int is_dir;
} system_entry;

typedef struct blank_shared blank_shared;

/* A pre-created sandbox init, owned by the runtime's loop thread. */
typedef struct blank {
    pid_t pid;
    int ctl;            /* our end of a socketpair: "ids mapped", "ready", the job */
    blank_shared *shm;  /* mapped before the clone: the same address on both sides */
    unsigned cg_id;     /* the cgroups it waits in (the job's then), 0: none */
} blank;

struct funcd_sandbox {
    funcd_seccomp_filter filter;
    /* The pool is filled by a thread of its own (making a blank takes about a
     * millisecond the loop should not spend) and taken from on the loop. */
    pthread_mutex_t lock; /* pool, n_blank, blank_failures, want, stop */
    pthread_cond_t wake;
    pthread_t filler;
    int filler_on, want, stop;
    blank pool[BLANK_POOL];
    size_t n_blank;
    int blank_failures;
    unsigned uid, gid;
    funcd_cgroups *cg; /* the runtime's, or NULL: workers get no cgroups */
    uint32_t default_pids;
    uint64_t tmp_bytes;
    char tmp_opts[64]; /* the options of the sandbox's /tmp */
    int idmap_ns; /* a user namespace mapping 0 to `uid`, for idmapped binds; -1: none */
    int cap_last;
    system_entry system[MAX_SYSTEM];
    size_t n_system;
};

/* One mount the child attaches: a detached tree the parent made. */
typedef struct plan_mount {
    int fd;       /* a detached tree, or (by_path) an O_PATH descriptor of `source` */
    int by_path;  /* without root there is no open_tree: the child binds the path */
    int is_file;
    int writable;
    char source[PATH_BUF];
    char target[PATH_BUF];
} plan_mount;

/* Everything the child needs, computed before clone (the child makes
 * system calls only: it is a copy of a multi-threaded process). */
typedef struct plan {
    const funcd_sandbox *sb;
    const funcd_sandbox_job *job;
    int root_fd; /* the image rootfs tree, or -1: a fresh tmpfs */
    int system;
    plan_mount m[MAX_BINDS];
    size_t n;
    int sync_r, err_w, status_w;
    int prepared; /* a blank dropped the bounding set and reset signals ahead of the job */
} plan;

/* What the child says when a step fails. */
typedef struct child_error {
    int err;
    char step[60];
} child_error;

/* ---- helpers usable in the child (system calls only) -------------------- */

/* Takes the namespace's one mapped id (INSIDE_ID, the host uid outside).
 * The capabilities the namespace's creator (or a process that joined it)
 * has there stay: the old ids were not the namespace's root (it has none),
 * so the change clears nothing; the worker loses them when it drops them
 * and execs as a non-root uid.
 * setresgid and setresuid as system calls: glibc's wrappers would signal
 * every other thread of funcd's to change them too, and in a clone made
 * from one thread of a threaded process those threads do not exist (a
 * half-created one even makes the wrapper wait forever). */
static int become_worker_user(void)
{
    if (syscall(SYS_setresgid, INSIDE_ID, INSIDE_ID, INSIDE_ID) != 0)
        return -1;
    return (int)syscall(SYS_setresuid, INSIDE_ID, INSIDE_ID, INSIDE_ID);
}

static void put_step(char *out, size_t len, const char *a, const char *b)
{
    size_t n = 0;
    for (; *a && n + 1 < len; a++)
        out[n++] = *a;
    for (; b && *b && n + 1 < len; b++)
        out[n++] = *b;
    out[n] = '\0';
}

ON_SHARED_STACK static _Noreturn void child_fail(int fd, const char *step, const char *detail, int err)
{
    child_error ce = {err, ""};
    put_step(ce.step, sizeof(ce.step), step, detail);
    ssize_t ignored = write(fd, &ce, sizeof(ce));
    (void)ignored;
    _exit(126);
}

static void join(char *out, const char *a, const char *b)
{
    put_step(out, PATH_BUF, a, b);
}

static int mkdir_p(char *path)
{
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int rc = mkdir(path, 0755);
        *p = '/';
        if (rc != 0 && errno != EEXIST)
            return -1;
    }
    return mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

static int make_file(char *path)
{
    char *slash = strrchr(path, '/');
    if (slash && slash != path) {
        *slash = '\0';
        int rc = mkdir_p(path);
        *slash = '/';
        if (rc != 0)
            return -1;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return errno == EEXIST ? 0 : -1;
    close(fd);
    return 0;
}

static int set_attr(int dfd, const char *path, unsigned flags, uint64_t set, int userns)
{
    struct mount_attr attr = {.attr_set = set, .userns_fd = (uint64_t)userns};
    return (int)syscall(SYS_mount_setattr, dfd, path, flags, &attr, sizeof(attr));
}

static int move_tree(int fd, const char *target)
{
    return (int)syscall(SYS_move_mount, fd, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH);
}

#define RO_ATTRS (MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)


/* Runs fn(arg) in a child that borrows our memory until it execs or exits,
 * on a stack of its own, while this thread waits (posix_spawn's way): no
 * copy of the page tables of a process as large as funcd. The child makes
 * system calls only and touches nothing but its stack. */
static pid_t shared_memory_child(int (*fn)(void *), void *arg)
{
    void *stack = (void *)syscall(SYS_mmap, NULL, SHARED_STACK, PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED)
        return -1;
    UNPOISON_STACK(stack, SHARED_STACK);
    pid_t pid = clone(fn, (char *)stack + SHARED_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, arg);
    int err = errno;
    UNPOISON_STACK(stack, SHARED_STACK);
    syscall(SYS_munmap, stack, SHARED_STACK);
    errno = err;
    return pid;
}

/* ---- the child: init, then the worker ------------------------------------ */

/* Path binds are opened before the staging tmpfs can hide their source
 * (which may lie below STAGING) and bound through /proc/self/fd. */
static void open_path_binds(plan *p)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->m[i].fd < 0 && (p->m[i].fd = open(p->m[i].source, O_PATH | O_CLOEXEC)) < 0)
            child_fail(p->err_w, "open ", p->m[i].source, errno);
}

/* Attaches one planned bind at `dst` (a path in the child's namespace). */
static int attach_bind(const plan_mount *m, const char *dst)
{
    if (!m->by_path)
        return move_tree(m->fd, dst);
    char src[40];
    snprintf(src, sizeof(src), "/proc/self/fd/%d", m->fd);
    if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) != 0)
        return -1;
    return set_attr(AT_FDCWD, dst, AT_RECURSIVE,
                    MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (m->writable ? 0 : MOUNT_ATTR_RDONLY),
                    0);
}

static void mount_system(const funcd_sandbox *sb, int err_w)
{
    char dst[PATH_BUF];
    for (size_t i = 0; i < sb->n_system; i++) {
        const system_entry *e = &sb->system[i];
        join(dst, STAGING, e->path);
        if (e->link[0]) {
            if (symlink(e->link, dst) != 0 && errno != EEXIST)
                child_fail(err_w, "symlink ", e->path, errno);
            continue;
        }
        if ((e->is_dir ? mkdir_p(dst) : make_file(dst)) != 0)
            child_fail(err_w, "mkdir ", dst, errno);
        if (mount(e->path, dst, NULL, MS_BIND | MS_REC, NULL) != 0)
            child_fail(err_w, "bind ", e->path, errno);
        if (set_attr(AT_FDCWD, dst, AT_RECURSIVE, RO_ATTRS, 0) != 0)
            child_fail(err_w, "read-only ", e->path, errno);
    }
}

/* Takes back what mount_system put in a staged root, for a job whose
 * program needs none of it (a static one). */
static void unmount_system(const funcd_sandbox *sb, int err_w)
{
    char dst[PATH_BUF];
    for (size_t i = sb->n_system; i-- > 0;) {
        const system_entry *e = &sb->system[i];
        join(dst, STAGING, e->path);
        if (!e->link[0] && umount2(dst, MNT_DETACH) != 0)
            child_fail(err_w, "unmount ", e->path, errno);
        if ((e->link[0] || !e->is_dir ? unlink(dst) : rmdir(dst)) != 0)
            child_fail(err_w, "remove ", e->path, errno);
    }
    rmdir(STAGING "/etc"); /* made for the files above; gone when empty */
}

static void mount_binds(const plan *p)
{
    char dst[PATH_BUF];
    for (size_t i = 0; i < p->n; i++) {
        join(dst, STAGING, p->m[i].target);
        if ((p->m[i].is_file ? make_file(dst) : mkdir_p(dst)) != 0)
            child_fail(p->err_w, "mkdir ", p->m[i].target, errno);
        if (attach_bind(&p->m[i], dst) != 0)
            child_fail(p->err_w, "bind ", p->m[i].target, errno);
        if (p->m[i].fd >= 0)
            close(p->m[i].fd);
    }
}

static void mount_dev(int err_w)
{
    static const char *const devices[] = {"null", "zero", "random", "urandom"};
    static const char *const links[][2] = {{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"},
                                           {"stdout", "/proc/self/fd/1"},
                                           {"stderr", "/proc/self/fd/2"}};
    char dst[PATH_BUF], src[64];
    if (mkdir(STAGING "/dev", 0755) != 0 && errno != EEXIST)
        child_fail(err_w, "mkdir /dev", NULL, errno);
    if (mount("tmpfs", STAGING "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=755") != 0)
        child_fail(err_w, "mount /dev", NULL, errno);
    for (size_t i = 0; i < sizeof(devices) / sizeof(devices[0]); i++) {
        join(src, "/dev/", devices[i]);
        join(dst, STAGING "/dev/", devices[i]);
        if (make_file(dst) != 0 || mount(src, dst, NULL, MS_BIND, NULL) != 0)
            child_fail(err_w, "bind ", src, errno);
    }
    for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++) {
        join(dst, STAGING "/dev/", links[i][0]);
        if (symlink(links[i][1], dst) != 0)
            child_fail(err_w, "symlink ", dst, errno);
    }
    if (set_attr(AT_FDCWD, STAGING "/dev", 0, MOUNT_ATTR_RDONLY, 0) != 0)
        child_fail(err_w, "read-only /dev", NULL, errno);
}

/* The part of a root no job changes: a fresh tmpfs (or the image's root),
 * /proc, /dev, /tmp and, when `system`, the host's system paths. A blank
 * init stages it before its job comes (off the request's path). */
static void stage_root(const funcd_sandbox *sb, int root_fd, int system, int err_w)
{
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        child_fail(err_w, "make mounts private", NULL, errno);
    if (root_fd >= 0) {
        if (move_tree(root_fd, STAGING) != 0)
            child_fail(err_w, "mount the rootfs", NULL, errno);
        close(root_fd);
    } else if (mount("tmpfs", STAGING, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755") != 0) {
        child_fail(err_w, "mount the root tmpfs", NULL, errno);
    }
    if ((mkdir(STAGING "/proc", 0555) != 0 && errno != EEXIST) ||
        mount("proc", STAGING "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
        child_fail(err_w, "mount /proc", NULL, errno);
    mount_dev(err_w);
    /* /tmp before the binds: an artifact may live under the host's /tmp. */
    if ((mkdir(STAGING "/tmp", 01777) != 0 && errno != EEXIST) ||
        mount("tmpfs", STAGING "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, sb->tmp_opts) != 0)
        child_fail(err_w, "mount /tmp", NULL, errno);
    if (system)
        mount_system(sb, err_w);
}

/* The job's part: its binds, then the staged root becomes `/`. */
static void enter_root(plan *p, int image_root)
{
    mount_binds(p);
    if (chdir(STAGING) != 0 || syscall(SYS_pivot_root, ".", ".") != 0)
        child_fail(p->err_w, "pivot_root", NULL, errno);
    if (umount2(".", MNT_DETACH) != 0 || chdir("/") != 0)
        child_fail(p->err_w, "detach the old root", NULL, errno);
    if (!image_root && set_attr(AT_FDCWD, "/", 0, MOUNT_ATTR_RDONLY, 0) != 0)
        child_fail(p->err_w, "read-only /", NULL, errno);
}

static void build_root(plan *p)
{
    open_path_binds(p);
    stage_root(p->sb, p->root_fd, p->system, p->err_w);
    enter_root(p, p->root_fd >= 0);
}

/* A blank's root, staged with the system paths before its job: finished
 * for the job, or (an image's root, binds by path) taken down and built
 * afresh. */
static void finish_staged_root(plan *p)
{
    int by_path = 0;
    for (size_t i = 0; i < p->n; i++)
        by_path |= p->m[i].by_path;
    if (p->root_fd >= 0 || by_path) { /* path binds may lie below STAGING */
        if (umount2(STAGING, MNT_DETACH) != 0)
            child_fail(p->err_w, "unmount the staged root", NULL, errno);
        build_root(p);
        return;
    }
    if (!p->system)
        unmount_system(p->sb, p->err_w);
    enter_root(p, 0);
}

/* What the worker must not get back by exec: its bounding set. Needs the
 * sandbox's capabilities, which it keeps until drop_privileges. */
ON_SHARED_STACK static int drop_bounding_set(const funcd_sandbox *sb)
{
    for (int cap = 0; cap <= sb->cap_last; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
            return -1;
    return 0;
}

ON_SHARED_STACK static void default_signals(void)
{
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    for (int sig = 1; sig < NSIG; sig++)
        sigaction(sig, &dfl, NULL);
}

ON_SHARED_STACK static void drop_privileges(const plan *p)
{
    if (prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                                     SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                                     SECBIT_NO_CAP_AMBIENT_RAISE |
                                     SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED) != 0)
        child_fail(p->err_w, "securebits", NULL, errno);
    if (!p->prepared && drop_bounding_set(p->sb) != 0)
        child_fail(p->err_w, "drop the bounding set", NULL, errno);
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof(data));
    if (syscall(SYS_capset, &hdr, data) != 0)
        child_fail(p->err_w, "capset", NULL, errno);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        child_fail(p->err_w, "no_new_privs", NULL, errno);
    struct sock_fprog prog = {p->sb->filter.len, p->sb->filter.insns};
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        child_fail(p->err_w, "seccomp", NULL, errno);
}

ON_SHARED_STACK static int worker_main(void *arg)
{
    const plan *p = arg;
    const funcd_sandbox_job *job = p->job;
    setpgid(0, 0); /* init passes signals on; the worker's own group gets them */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (!p->prepared)
        default_signals();
    if (job->cwd && chdir(job->cwd) != 0)
        child_fail(p->err_w, "chdir ", job->cwd, errno);
    drop_privileges(p);
    syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(job->prog, job->argv, job->env);
    child_fail(p->err_w, "execve ", job->prog, errno);
}

static void on_forwarded(int sig)
{
    (void)sig; /* only to make init's signals deliverable (see init_loop) */
}

/* pid 1 of the sandbox: reaps everything, passes termination signals on,
 * and ends with the worker, telling the runtime how it ended. */
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
    for (;;) {
        siginfo_t si;
        int sig = sigwaitinfo(&wait_set, &si);
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

/* Keeps exactly the descriptors init needs: 0-2 and the plan's. */
static void close_others(plan *p)
{
    const funcd_sandbox_job *job = p->job;
    int null = -1;
    for (int i = 0; i < 3; i++) {
        int fd = job->fds[i];
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
    int keep[MAX_BINDS + 8], n = 0;
    keep[n++] = p->sync_r;
    keep[n++] = p->err_w;
    keep[n++] = p->status_w;
    if (p->root_fd >= 0)
        keep[n++] = p->root_fd;
    for (size_t i = 0; i < p->n; i++)
        if (p->m[i].fd >= 0)
            keep[n++] = p->m[i].fd;
    for (int i = 1; i < n; i++) /* insertion sort: a handful of numbers */
        for (int j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
            int t = keep[j];
            keep[j] = keep[j - 1];
            keep[j - 1] = t;
        }
    unsigned from = 3;
    for (int i = 0; i < n; i++) {
        if ((unsigned)keep[i] > from)
            syscall(SYS_close_range, from, (unsigned)keep[i] - 1, 0);
        from = (unsigned)keep[i] + 1;
    }
    syscall(SYS_close_range, from, ~0U, 0);
}

static _Noreturn void init_main(plan *p)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    prctl(PR_SET_NAME, "funcd-sandbox"); /* for ps: not a second funcd */
    close_others(p);
    char go;
    if (read(p->sync_r, &go, 1) != 1)
        _exit(0); /* the runtime gave up on this start */
    close(p->sync_r);
    if (become_worker_user() != 0)
        child_fail(p->err_w, "become the mapped user", NULL, errno);
    /* A change of credentials clears the parent-death signal: arm it again,
     * so that funcd's death (kill -9 included) ends the sandbox (and with
     * its init, the kernel ends every process of its pid namespace). */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    build_root(p);
    const char *step;
    if (!p->job->host_network && funcd_netns_loopback_up(&step) != 0)
        child_fail(p->err_w, step, NULL, errno);
    pid_t worker = shared_memory_child(worker_main, p);
    if (worker < 0)
        child_fail(p->err_w, "fork the worker", NULL, errno);
    close(p->err_w);
    init_loop(p->status_w, worker);
}

/* ---- the parent ----------------------------------------------------------- */

static int write_proc(pid_t pid, const char *file, const char *text)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/%s", (long)pid, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t n = strlen(text);
    int rc = write(fd, text, n) == (ssize_t)n ? 0 : -1;
    int err = errno;
    close(fd);
    errno = err;
    return rc;
}

/* Maps `inside` in the namespace of `pid` to the host's `uid` / `gid`. */
static int map_ids(pid_t pid, unsigned inside, unsigned uid, unsigned gid)
{
    char umap[64], gmap[64];
    snprintf(umap, sizeof(umap), "%u %u 1\n", inside, uid);
    snprintf(gmap, sizeof(gmap), "%u %u 1\n", inside, gid);
    return write_proc(pid, "setgroups", "deny") == 0 && write_proc(pid, "uid_map", umap) == 0 &&
                   write_proc(pid, "gid_map", gmap) == 0
               ? 0
               : -1;
}

/* A user namespace mapping 0 to `uid`, kept as a descriptor: funcd's own
 * copies (binds marked `owned`, an image's root) are idmapped through it, so
 * that what host root owns there (a 0700 artifact directory, a worker's run
 * directory) is the worker's own inside. Nothing else is. */
static int make_idmap_ns(unsigned uid, unsigned gid)
{
    int sync[2];
    if (pipe2(sync, O_CLOEXEC) != 0)
        return -1;
    pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, NULL, NULL, 0);
    if (pid == 0) {
        char c;
        close(sync[1]);
        ssize_t ignored = read(sync[0], &c, 1);
        (void)ignored;
        _exit(0);
    }
    close(sync[0]);
    int fd = -1;
    if (pid > 0 && map_ids(pid, 0, uid, gid) == 0) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%ld/ns/user", (long)pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    close(sync[1]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    return fd;
}

static void plan_system(funcd_sandbox *sb)
{
    static const char *const paths[] = {"/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin",
                                        "/sbin", "/etc/ld.so.cache", "/etc/alternatives",
                                        "/etc/localtime"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]) && sb->n_system < MAX_SYSTEM; i++) {
        struct stat st;
        if (lstat(paths[i], &st) != 0)
            continue;
        system_entry *e = &sb->system[sb->n_system];
        memset(e, 0, sizeof(*e));
        snprintf(e->path, sizeof(e->path), "%s", paths[i]);
        if (S_ISLNK(st.st_mode)) {
            ssize_t n = readlink(paths[i], e->link, sizeof(e->link) - 1);
            if (n <= 0)
                continue;
            e->link[n] = '\0';
        } else if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
            continue;
        }
        e->is_dir = S_ISDIR(st.st_mode);
        sb->n_system++;
    }
}

static int read_cap_last(void)
{
    FILE *f = fopen("/proc/sys/kernel/cap_last_cap", "re");
    int last = 63;
    if (f) {
        if (fscanf(f, "%d", &last) != 1)
            last = 63;
        fclose(f);
    }
    return last;
}

int funcd_sandbox_new(funcd_sandbox **out, const funcd_process_options *opts)
{
    *out = NULL;
    funcd_sandbox *sb = calloc(1, sizeof(*sb));
    if (!sb)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the sandbox");
    /* Without root only one's own uid can be mapped (and nothing idmapped). */
    sb->uid = geteuid() != 0 ? geteuid() : opts && opts->host_uid ? opts->host_uid : DEFAULT_UID;
    sb->gid = geteuid() != 0 ? getegid() : sb->uid;
    sb->tmp_bytes = opts && opts->tmp_bytes ? opts->tmp_bytes : DEFAULT_TMP_BYTES;
    snprintf(sb->tmp_opts, sizeof(sb->tmp_opts), "size=%llu,mode=1777",
             (unsigned long long)sb->tmp_bytes);
    sb->cap_last = read_cap_last();
    int rc = funcd_seccomp_build(&sb->filter, opts ? opts->seccomp_allow : NULL);
    if (rc < 0) {
        free(sb);
        return rc;
    }
    sb->idmap_ns = geteuid() == 0 ? make_idmap_ns(sb->uid, sb->gid) : -1;
    plan_system(sb);
    pthread_mutex_init(&sb->lock, NULL);
    pthread_cond_init(&sb->wake, NULL);
    *out = sb;
    return 0;
}

static void blank_discard(funcd_sandbox *sb, blank *b);

void funcd_sandbox_use_cgroups(funcd_sandbox *sb, funcd_cgroups *cg, uint32_t default_pids)
{
    pthread_mutex_lock(&sb->lock);
    sb->cg = cg;
    sb->default_pids = default_pids;
    pthread_mutex_unlock(&sb->lock);
}

void funcd_sandbox_free(funcd_sandbox *sb)
{
    if (!sb)
        return;
    pthread_mutex_lock(&sb->lock);
    sb->stop = 1;
    pthread_cond_signal(&sb->wake);
    pthread_mutex_unlock(&sb->lock);
    if (sb->filler_on) /* its blanks die with it (parent-death signal): discarded anyway */
        pthread_join(sb->filler, NULL);
    while (sb->n_blank)
        blank_discard(sb, &sb->pool[--sb->n_blank]);
    pthread_cond_destroy(&sb->wake);
    pthread_mutex_destroy(&sb->lock);
    if (sb->idmap_ns >= 0)
        close(sb->idmap_ns);
    funcd_seccomp_free(&sb->filter);
    free(sb);
}

/* A detached copy of `source`: read-only unless writable; funcd's own
 * copies (`owned`) idmapped where the filesystem allows it, everything else
 * shown with its host owners. -1 with the error set. */
static int make_tree(const funcd_sandbox *sb, const char *source, int writable, int owned)
{
    int fd = (int)syscall(SYS_open_tree, AT_FDCWD, source, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (fd < 0 && errno == EPERM)
        return -2; /* not root: the child binds the path itself, without idmapping */
    if (fd < 0)
        return funcd_error_set(FUNCD_EIO, "sandbox: cannot bind %s: %s", source, strerror(errno));
    uint64_t attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (writable ? 0 : MOUNT_ATTR_RDONLY);
    if (owned && sb->idmap_ns >= 0 &&
        set_attr(fd, "", AT_EMPTY_PATH, attrs | MOUNT_ATTR_IDMAP, sb->idmap_ns) == 0)
        return fd;
    if (set_attr(fd, "", AT_EMPTY_PATH, attrs, 0) == 0)
        return fd;
    int err = errno;
    close(fd);
    return funcd_error_set(FUNCD_EIO, "sandbox: cannot restrict the bind of %s: %s", source,
                           strerror(err));
}

static int by_target_length(const void *a, const void *b)
{
    size_t la = strlen(((const plan_mount *)a)->target);
    size_t lb = strlen(((const plan_mount *)b)->target);
    return la < lb ? -1 : la > lb;
}

static void plan_close(plan *p)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->m[i].fd >= 0)
            close(p->m[i].fd);
    if (p->root_fd >= 0)
        close(p->root_fd);
    p->n = 0;
    p->root_fd = -1;
}

static int plan_make(plan *p, funcd_sandbox *sb, const funcd_sandbox_job *job)
{
    memset(p, 0, sizeof(*p));
    p->sb = sb;
    p->job = job;
    p->root_fd = -1;
    p->system = !job->rootfs && funcd_sandbox_needs_system(job->prog);
    if (job->n_binds > MAX_BINDS)
        return funcd_error_set(FUNCD_EINVAL, "sandbox: at most %d binds", MAX_BINDS);
    if (job->rootfs && (p->root_fd = make_tree(sb, job->rootfs, 0, 1)) < 0)
        return p->root_fd == -2 ? funcd_error_set(FUNCD_ENOTSUP, "sandbox: an image root needs "
                                                  "funcd to run as root")
                                : -1;
    for (size_t i = 0; i < job->n_binds; i++) {
        const funcd_worker_bind *b = &job->binds[i];
        const char *target = b->target ? b->target : b->source;
        struct stat st;
        if (!b->source || b->source[0] != '/' || target[0] != '/' ||
            strlen(target) >= PATH_BUF - sizeof(STAGING))
            return funcd_error_set(FUNCD_EINVAL, "sandbox: a bind needs absolute paths shorter "
                                   "than %d bytes", PATH_BUF - (int)sizeof(STAGING));
        if (stat(b->source, &st) != 0)
            return funcd_error_set(FUNCD_ENOTFOUND, "sandbox: cannot bind %s: %s", b->source,
                                   strerror(errno));
        plan_mount *m = &p->m[p->n];
        snprintf(m->source, sizeof(m->source), "%s", b->source);
        snprintf(m->target, sizeof(m->target), "%s", target);
        m->is_file = !S_ISDIR(st.st_mode);
        m->writable = b->writable;
        if ((m->fd = make_tree(sb, b->source, b->writable, b->owned != 0)) == -1)
            return -1;
        if (m->fd == -2) {
            m->fd = -1;
            m->by_path = 1;
        }
        p->n++;
    }
    /* A bind inside another is attached after it, or it would be hidden. */
    qsort(p->m, p->n, sizeof(p->m[0]), by_target_length);
    return 0;
}

/* Waits for the worker's exec (the error pipe closes) or a failure. */
static int await_exec(int err_r)
{
    child_error ce;
    ssize_t n;
    do
        n = read(err_r, &ce, sizeof(ce));
    while (n < 0 && errno == EINTR);
    if (n == 0)
        return 0;
    if (n != (ssize_t)sizeof(ce))
        return funcd_error_set(FUNCD_EIO, "sandbox: the worker's setup ended without a word");
    ce.step[sizeof(ce.step) - 1] = '\0';
    return funcd_error_set(FUNCD_EIO, "sandbox: %s: %s", ce.step, strerror(ce.err));
}

static void close_pair(int p[2])
{
    for (int i = 0; i < 2; i++)
        if (p[i] >= 0)
            close(p[i]);
    p[0] = p[1] = -1;
}

/* A fork-like clone (the child returns 0 on the same stack) with `flags`;
 * on cgroup v2 straight into worker `cg_id`'s cgroup (clone3 with
 * CLONE_INTO_CGROUP, kernel 5.7+), so the task never moves: *placed is
 * then 1. Otherwise (v1, or an older kernel) an ordinary clone, and the
 * caller moves it. */
static pid_t clone_placed(const funcd_sandbox *sb, unsigned long flags, unsigned cg_id,
                          int *placed)
{
    *placed = 0;
    int fd = sb->cg && cg_id ? funcd_cgroup_open(sb->cg, cg_id) : -1;
    if (fd >= 0) {
        struct clone_args args = {.flags = flags | CLONE_INTO_CGROUP,
                                  .exit_signal = SIGCHLD,
                                  .cgroup = (uint64_t)fd};
        pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
        if (pid == 0)
            return 0;
        int err = errno;
        close(fd);
        if (pid > 0 || (err != ENOSYS && err != E2BIG)) {
            *placed = pid > 0;
            errno = err;
            return pid;
        }
    }
    return (pid_t)syscall(SYS_clone, flags | SIGCHLD, 0, NULL, NULL, 0);
}

/* Clone with every signal blocked, so no handler of funcd's runs in the
 * copy; the child never returns from here. */
static pid_t clone_init(plan *p, unsigned cg_id, int *placed)
{
    unsigned long flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC |
                          CLONE_NEWUTS | (p->job->host_network ? 0 : CLONE_NEWNET);
    sigset_t all, saved;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    pid_t pid = clone_placed(p->sb, flags, cg_id, placed);
    if (pid == 0) {
        setpgid(0, 0);
        init_main(p);
    }
    int err = errno;
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    if (pid > 0)
        setpgid(pid, pid);
    errno = err;
    return pid;
}

/* The ordinary path (no blank ready, or network: host): the worker's
 * cgroups are made now; on v2 its init is cloned into them, on the v1
 * controllers moved into them before it goes on (a move on the request's
 * path). */
static pid_t spawn_planned(plan *p, int *status_fd, unsigned *cg_id)
{
    funcd_cgroups *cg = p->sb->cg;
    static const funcd_worker_limits none;
    unsigned id = cg ? funcd_cgroup_next_id(cg) : 0;
    if (cg && funcd_cgroup_make(cg, id, p->job->limits ? p->job->limits : &none,
                                p->sb->default_pids) < 0)
        return -1;
    int sync[2] = {-1, -1}, errp[2] = {-1, -1}, status[2] = {-1, -1};
    if (pipe2(sync, O_CLOEXEC) != 0 || pipe2(errp, O_CLOEXEC) != 0 ||
        pipe2(status, O_CLOEXEC) != 0) {
        int err = errno;
        close_pair(sync);
        close_pair(errp);
        close_pair(status);
        if (cg)
            funcd_cgroup_remove(cg, id);
        return funcd_error_set(FUNCD_EIO, "sandbox: cannot create pipes: %s", strerror(err));
    }
    p->sync_r = sync[0];
    p->err_w = errp[1];
    p->status_w = status[1];
    int placed;
    pid_t pid = clone_init(p, id, &placed);
    int err = errno;
    close(sync[0]);
    close(errp[1]);
    close(status[1]);
    plan_close(p);
    int rc = 0;
    if (pid < 0)
        rc = funcd_error_set(FUNCD_EIO, "sandbox: clone: %s", strerror(err));
    else if (map_ids(pid, INSIDE_ID, p->sb->uid, p->sb->gid) != 0)
        rc = funcd_error_set(FUNCD_EIO, "sandbox: cannot map the worker's user: %s",
                             strerror(errno));
    else if (cg && !placed && funcd_cgroup_attach(cg, id, pid) < 0)
        rc = -1;
    else if (funcd_netns_listen(pid, p->job->listen, p->job->n_listen, p->job->listen_fds) < 0)
        rc = -1;
    else if (write(sync[1], "g", 1) != 1)
        rc = funcd_error_set(FUNCD_EIO, "sandbox: the worker's init is gone");
    close(sync[1]);
    if (rc == 0)
        rc = await_exec(errp[0]);
    close(errp[0]);
    if (rc < 0) {
        close(status[0]);
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
        if (cg)
            funcd_cgroup_remove(cg, id);
        return -1;
    }
    *status_fd = status[0];
    *cg_id = id;
    return pid;
}

/* ---- blank inits: the namespaces made ahead of the job -------------------- */

/* What a blank init is handed: the plan and the job's strings, in pages
 * mapped shared before its clone, so that they lie at the same address on
 * both sides and it can use them in place (no malloc after a clone). */
struct blank_shared {
    plan p;
    funcd_sandbox_job job;
    size_t used;
    char area[BLANK_AREA];
};

static void *area_take(blank_shared *s, size_t n, size_t align)
{
    size_t at = (s->used + align - 1) & ~(align - 1);
    if (at > sizeof(s->area) || n > sizeof(s->area) - at)
        return NULL;
    s->used = at + n;
    return s->area + at;
}

static char *area_str(blank_shared *s, const char *str)
{
    size_t n = strlen(str) + 1;
    char *d = area_take(s, n, 1);
    if (d)
        memcpy(d, str, n);
    return d;
}

static char **area_vec(blank_shared *s, char *const *v)
{
    size_t n = 0;
    while (v[n])
        n++;
    char **d = area_take(s, (n + 1) * sizeof(char *), _Alignof(char *));
    for (size_t i = 0; d && i < n; i++)
        if (!(d[i] = area_str(s, v[i])))
            return NULL;
    if (d)
        d[n] = NULL;
    return d;
}

/* Copies the planned job into `s`; -1 when it does not fit. */
static int blank_load(blank_shared *s, const plan *p)
{
    const funcd_sandbox_job *job = p->job;
    s->used = 0;
    s->p = *p;
    s->p.job = &s->job;
    memset(&s->job, 0, sizeof(s->job));
    memcpy(s->job.fds, job->fds, sizeof(job->fds));
    s->job.prog = area_str(s, job->prog);
    s->job.cwd = job->cwd ? area_str(s, job->cwd) : NULL;
    char **argv = s->job.prog ? area_vec(s, job->argv) : NULL;
    char **env = argv ? area_vec(s, job->env) : NULL;
    if (!env || (job->cwd && !s->job.cwd))
        return -1;
    s->job.argv = argv;
    s->job.env = env;
    return 0;
}

/* The plan's descriptor slots, in the order they travel: both sides walk
 * the same plan, the parent to send its numbers, the init to put in the
 * numbers it received. */
static size_t job_fd_slots(plan *p, funcd_sandbox_job *job, int **slots)
{
    size_t n = 0;
    slots[n++] = &p->err_w;
    slots[n++] = &p->status_w;
    for (int i = 0; i < 3; i++)
        if (job->fds[i] >= 0)
            slots[n++] = &job->fds[i];
    if (p->root_fd >= 0)
        slots[n++] = &p->root_fd;
    for (size_t i = 0; i < p->n; i++)
        if (p->m[i].fd >= 0)
            slots[n++] = &p->m[i].fd;
    return n;
}

typedef union fd_cmsg {
    char buf[CMSG_SPACE(sizeof(int) * JOB_FDS)];
    struct cmsghdr align;
} fd_cmsg;

/* In the blank init: the job's descriptors, into the shared plan. */
static int blank_receive(int ctl, blank_shared *s)
{
    char c;
    fd_cmsg u;
    struct iovec iov = {&c, 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                         .msg_controllen = sizeof(u.buf)};
    ssize_t n;
    do
        n = recvmsg(ctl, &msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n != 1)
        return -1;
    int fds[JOB_FDS];
    size_t got = 0;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
        got = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        memcpy(fds, CMSG_DATA(cm), got * sizeof(int));
    }
    int *slots[JOB_FDS];
    size_t want = job_fd_slots(&s->p, &s->job, slots);
    if (got != want || (msg.msg_flags & MSG_CTRUNC)) {
        if (got >= 1)
            child_fail(fds[0], "receive the job", NULL, EPROTO);
        _exit(126);
    }
    for (size_t i = 0; i < got; i++)
        *slots[i] = fds[i];
    return 0;
}

/* The blank init: made ready, then one job, as init_main does it. */
static _Noreturn void blank_main(const funcd_sandbox *sb, blank_shared *s, int ctl)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    prctl(PR_SET_NAME, "funcd-sandbox");
    /* Nothing of funcd's, not even its stdio (a waiting blank must not
     * hold a pipe someone waits to see closed): /dev/null until the job. */
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int i = 0; i < 3 && null >= 0; i++)
        if (i != ctl)
            dup2(null, i);
    if (ctl > 3)
        syscall(SYS_close_range, 3, (unsigned)ctl - 1, 0);
    syscall(SYS_close_range, ctl < 3 ? 3U : (unsigned)ctl + 1, ~0U, 0);
    char c;
    if (read(ctl, &c, 1) != 1)
        _exit(0); /* the ids were not mapped: the runtime gave up */
    if (become_worker_user() != 0)
        _exit(126);
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* cleared by the change of credentials */
    const char *step;
    if (funcd_netns_loopback_up(&step) != 0)
        _exit(126);
    /* What every job needs, done now rather than on a request's path. */
    default_signals();
    if (drop_bounding_set(sb) != 0)
        _exit(126);
    stage_root(sb, -1, 1, -1);
    if (write(ctl, "r", 1) != 1)
        _exit(126);
    if (blank_receive(ctl, s) != 0)
        _exit(0); /* the runtime is going away */
    plan *p = &s->p;
    p->sync_r = ctl;
    p->prepared = 1;
    close_others(p);
    close(ctl);
    finish_staged_root(p);
    pid_t worker = shared_memory_child(worker_main, p);
    if (worker < 0)
        child_fail(p->err_w, "fork the worker", NULL, errno);
    close(p->err_w);
    int status_w = p->status_w;
    munmap(s, sizeof(*s)); /* nothing of funcd's stays writable from here */
    init_loop(status_w, worker);
}

static void blank_discard(funcd_sandbox *sb, blank *b)
{
    if (b->ctl >= 0)
        close(b->ctl);
    if (b->pid > 0) {
        kill(b->pid, SIGKILL);
        while (waitpid(b->pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    if (b->shm)
        munmap(b->shm, sizeof(*b->shm));
    if (b->cg_id && sb->cg)
        funcd_cgroup_remove(sb->cg, b->cg_id);
    b->pid = -1;
    b->ctl = -1;
    b->shm = NULL;
    b->cg_id = 0;
}

/* Clones a blank init into cgroups of its own (on v2 straight into them;
 * on v1 moved there, the one move of its life, made here on the filler
 * thread: never on a request's path) and waits until it is ready. 0, or
 * -1. */
static int blank_make(funcd_sandbox *sb, blank *b)
{
    *b = (blank){-1, -1, NULL, 0};
    if (sb->cg) {
        unsigned id = funcd_cgroup_next_id(sb->cg);
        if (funcd_cgroup_make_blank(sb->cg, id, sb->default_pids) < 0)
            return -1;
        b->cg_id = id;
    }
    void *shm = mmap(NULL, sizeof(blank_shared), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shm == MAP_FAILED) {
        blank_discard(sb, b);
        return -1;
    }
    UNPOISON_STACK(shm, sizeof(blank_shared));
    b->shm = shm;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        blank_discard(sb, b);
        return -1;
    }
    unsigned long flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC |
                          CLONE_NEWUTS | CLONE_NEWNET;
    sigset_t all, saved;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    int placed;
    pid_t pid = clone_placed(sb, flags, b->cg_id, &placed);
    if (pid == 0) {
        setpgid(0, 0);
        close(sv[0]);
        blank_main(sb, b->shm, sv[1]);
    }
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    /* Only this blank shares the region: not the inits and blanks cloned
     * after it, which live on beside their workers. */
    madvise(b->shm, sizeof(blank_shared), MADV_DONTFORK);
    close(sv[1]);
    b->ctl = sv[0];
    b->pid = pid;
    if (pid > 0)
        setpgid(pid, pid);
    char c;
    if (pid < 0 || map_ids(pid, INSIDE_ID, sb->uid, sb->gid) != 0 ||
        (b->cg_id && !placed && funcd_cgroup_attach(sb->cg, b->cg_id, pid) != 0) ||
        send(b->ctl, "m", 1, MSG_NOSIGNAL) != 1 || read(b->ctl, &c, 1) != 1) {
        blank_discard(sb, b);
        return -1;
    }
    return 0;
}

/* Makes blanks until the pool is full (or making them keeps failing). */
static void fill(funcd_sandbox *sb)
{
    for (;;) {
        pthread_mutex_lock(&sb->lock);
        int full = sb->stop || sb->n_blank >= BLANK_POOL ||
                   sb->blank_failures >= BLANK_MAX_FAILURES;
        pthread_mutex_unlock(&sb->lock);
        if (full)
            return;
        blank b;
        int ok = blank_make(sb, &b) == 0;
        pthread_mutex_lock(&sb->lock);
        if (ok && sb->n_blank < BLANK_POOL)
            sb->pool[sb->n_blank++] = b;
        else if (ok)
            blank_discard(sb, &b);
        sb->blank_failures = ok ? 0 : sb->blank_failures + 1;
        pthread_mutex_unlock(&sb->lock);
        if (!ok)
            return;
    }
}

static void *filler_main(void *arg)
{
    funcd_sandbox *sb = arg;
    pthread_mutex_lock(&sb->lock);
    while (!sb->stop) {
        if (!sb->want) {
            pthread_cond_wait(&sb->wake, &sb->lock);
            continue;
        }
        sb->want = 0;
        pthread_mutex_unlock(&sb->lock);
        fill(sb);
        pthread_mutex_lock(&sb->lock);
    }
    pthread_mutex_unlock(&sb->lock);
    return NULL;
}

void funcd_sandbox_refill(funcd_sandbox *sb)
{
    pthread_mutex_lock(&sb->lock);
    if (!sb->filler_on && !sb->stop) {
        /* Every signal blocked: funcd's handlers run on its own threads. */
        sigset_t all, saved;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &saved);
        sb->filler_on = pthread_create(&sb->filler, NULL, filler_main, sb) == 0;
        pthread_sigmask(SIG_SETMASK, &saved, NULL);
    }
    sb->want = 1;
    pthread_cond_signal(&sb->wake);
    pthread_mutex_unlock(&sb->lock);
}

static int blank_send(blank *b)
{
    int *slots[JOB_FDS];
    size_t n = job_fd_slots(&b->shm->p, &b->shm->job, slots);
    fd_cmsg u;
    memset(&u, 0, sizeof(u));
    char j = 'j';
    struct iovec iov = {&j, 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                         .msg_controllen = CMSG_SPACE(n * sizeof(int))};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(n * sizeof(int));
    int *data = (int *)CMSG_DATA(cm);
    for (size_t i = 0; i < n; i++)
        data[i] = *slots[i];
    return sendmsg(b->ctl, &msg, MSG_NOSIGNAL) == 1 ? 0 : -1;
}

/* Takes a ready blank and writes the job's limits into the cgroups it
 * waits in: no task moves. 1: taken, 0: none left, -1: error set. */
static int blank_take(funcd_sandbox *sb, const funcd_sandbox_job *job, blank *b)
{
    pthread_mutex_lock(&sb->lock);
    int have = sb->n_blank > 0;
    if (have)
        *b = sb->pool[--sb->n_blank];
    pthread_mutex_unlock(&sb->lock);
    if (!have)
        return 0;
    if (!b->cg_id || !job->limits || funcd_cgroup_set_limits(sb->cg, b->cg_id, job->limits) == 0)
        return 1;
    blank_discard(sb, b);
    return -1;
}

static void close_listen(const funcd_sandbox_job *job)
{
    for (size_t i = 0; i < job->n_listen; i++)
        if (job->listen_fds[i] >= 0) {
            close(job->listen_fds[i]);
            job->listen_fds[i] = -1;
        }
}

/* Hands the planned job to a blank init. -2: none can serve it (the
 * ordinary path does then). */
static pid_t spawn_blank(funcd_sandbox *sb, plan *p, int *status_fd, unsigned *cg_id)
{
    pthread_mutex_lock(&sb->lock);
    int usable = !p->job->host_network && sb->n_blank > 0 &&
                 blank_load(sb->pool[sb->n_blank - 1].shm, p) == 0;
    pthread_mutex_unlock(&sb->lock);
    if (!usable)
        return -2;
    int errp[2] = {-1, -1}, status[2] = {-1, -1};
    if (pipe2(errp, O_CLOEXEC) != 0 || pipe2(status, O_CLOEXEC) != 0) {
        close_pair(errp);
        close_pair(status);
        return -2;
    }
    p->err_w = errp[1];
    p->status_w = status[1];
    blank b;
    int rc;
    while ((rc = blank_take(sb, p->job, &b)) == 1) {
        if (blank_load(b.shm, p) == 0) {
            /* Its sockets before its program: the job goes out only then. */
            if (funcd_netns_listen(b.pid, p->job->listen, p->job->n_listen,
                                   p->job->listen_fds) < 0) {
                blank_discard(sb, &b);
                rc = -1;
                break;
            }
            if (blank_send(&b) == 0)
                break;
            close_listen(p->job);
        }
        blank_discard(sb, &b); /* it died meanwhile: the next one */
    }
    close(errp[1]);
    close(status[1]);
    if (rc != 1) {
        close(errp[0]);
        close(status[0]);
        return rc < 0 ? -1 : -2;
    }
    close(b.ctl);
    b.ctl = -1;
    munmap(b.shm, sizeof(*b.shm));
    b.shm = NULL;
    rc = await_exec(errp[0]);
    close(errp[0]);
    if (rc < 0) {
        close(status[0]);
        blank_discard(sb, &b);
        return -1;
    }
    *status_fd = status[0];
    *cg_id = b.cg_id;
    return b.pid;
}

pid_t funcd_sandbox_spawn(funcd_sandbox *sb, const funcd_sandbox_job *job, int *status_fd,
                          unsigned *cg_id)
{
    *status_fd = -1;
    *cg_id = 0;
    for (size_t i = 0; i < job->n_listen; i++)
        job->listen_fds[i] = -1;
    if (job->n_listen && job->host_network)
        return funcd_error_set(FUNCD_EINVAL, "a worker on the host network has no namespace of "
                               "its own to hold its sockets");
    plan *p = malloc(sizeof(*p));
    if (!p)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory starting a sandboxed worker");
    pid_t pid = -1;
    if (plan_make(p, sb, job) == 0 && (pid = spawn_blank(sb, p, status_fd, cg_id)) == -2)
        pid = spawn_planned(p, status_fd, cg_id);
    plan_close(p);
    free(p);
    if (pid < 0)
        close_listen(job);
    return pid;
}

/* ---- more binds for a running sandbox ------------------------------------- */

static int set_root_writable(int writable)
{
    struct mount_attr attr = {.attr_set = writable ? 0 : MOUNT_ATTR_RDONLY,
                              .attr_clr = writable ? MOUNT_ATTR_RDONLY : 0};
    return (int)syscall(SYS_mount_setattr, AT_FDCWD, "/", 0, &attr, sizeof(attr));
}

/* The helper joins the sandbox's user namespace (so what it creates is
 * owned by the worker's uid there) and then its mount namespace. */
typedef struct expose_args {
    const plan *p;
    int user_fd, mnt_fd;
} expose_args;

ON_SHARED_STACK static int expose_main(void *arg)
{
    const expose_args *a = arg;
    const plan *p = a->p;
    int user_fd = a->user_fd, mnt_fd = a->mnt_fd;
    if (setns(user_fd, CLONE_NEWUSER) != 0)
        child_fail(p->err_w, "join the user namespace", NULL, errno);
    if (become_worker_user() != 0)
        child_fail(p->err_w, "become the mapped user", NULL, errno);
    if (setns(mnt_fd, CLONE_NEWNS) != 0)
        child_fail(p->err_w, "join the mount namespace", NULL, errno);
    if (set_root_writable(1) != 0)
        child_fail(p->err_w, "make / writable", NULL, errno);
    char dst[PATH_BUF];
    for (size_t i = 0; i < p->n; i++) {
        join(dst, p->m[i].target, NULL);
        if (p->m[i].by_path)
            child_fail(p->err_w, "bind ", dst, EPERM);
        if ((p->m[i].is_file ? make_file(dst) : mkdir_p(dst)) != 0)
            child_fail(p->err_w, "mkdir ", dst, errno);
        if (move_tree(p->m[i].fd, dst) != 0)
            child_fail(p->err_w, "bind ", dst, errno);
    }
    if (set_root_writable(0) != 0)
        child_fail(p->err_w, "read-only /", NULL, errno);
    _exit(0);
}

static int open_ns(pid_t pid, const char *which)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/ns/%s", (long)pid, which);
    return open(path, O_RDONLY | O_CLOEXEC);
}

static int expose_planned(plan *p, pid_t init_pid)
{
    int user_fd = open_ns(init_pid, "user"), mnt_fd = open_ns(init_pid, "mnt");
    int errp[2] = {-1, -1};
    int rc = 0;
    if (user_fd < 0 || mnt_fd < 0 || pipe2(errp, O_CLOEXEC) != 0) {
        rc = funcd_error_set(FUNCD_EIO, "sandbox: cannot reach worker %ld: %s", (long)init_pid,
                             strerror(errno));
    } else {
        p->err_w = errp[1];
        sigset_t all, saved;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &saved);
        expose_args args = {p, user_fd, mnt_fd};
        pid_t pid = shared_memory_child(expose_main, &args);
        int err = errno;
        pthread_sigmask(SIG_SETMASK, &saved, NULL);
        close(errp[1]);
        if (pid < 0) {
            rc = funcd_error_set(FUNCD_EIO, "sandbox: clone: %s", strerror(err));
        } else {
            rc = await_exec(errp[0]);
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
        }
        close(errp[0]);
    }
    if (user_fd >= 0)
        close(user_fd);
    if (mnt_fd >= 0)
        close(mnt_fd);
    return rc;
}

int funcd_sandbox_expose(funcd_sandbox *sb, pid_t init_pid, const funcd_worker_bind *binds,
                         size_t n_binds)
{
    plan *p = malloc(sizeof(*p));
    if (!p)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory");
    funcd_sandbox_job job = {.prog = "/", .binds = binds, .n_binds = n_binds};
    int rc = plan_make(p, sb, &job);
    if (rc == 0)
        rc = expose_planned(p, init_pid);
    plan_close(p);
    free(p);
    return rc < 0 ? -1 : 0;
}

/* ---- what a program needs ------------------------------------------------ */

int funcd_sandbox_needs_system(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 1;
    Elf64_Ehdr eh;
    ssize_t n = pread(fd, &eh, sizeof(eh), 0);
    int needs = 1;
    if (n >= 2 && memcmp(&eh, "#!", 2) == 0) {
        needs = 1;
    } else if (n == (ssize_t)sizeof(eh) && memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 &&
               eh.e_ident[EI_CLASS] == ELFCLASS64 && eh.e_phentsize == sizeof(Elf64_Phdr)) {
        needs = 0;
        for (unsigned i = 0; i < eh.e_phnum && !needs; i++) {
            Elf64_Phdr ph;
            if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + i * sizeof(ph))) !=
                (ssize_t)sizeof(ph))
                needs = 1;
            else if (ph.p_type == PT_INTERP)
                needs = 1;
        }
    }
    close(fd);
    return needs;
}
