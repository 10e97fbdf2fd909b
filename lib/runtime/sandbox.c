#include "runtime/sandbox.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "funcd/sys/error.h"
#include "runtime/netns.h"
#include "runtime/sandbox-child.h"
#include "runtime/seccomp.h"
#include "util/closerange.h"
#include "util/spawn.h"
#include "runtime/sandbox-init-bin.h" /* funcd_sandbox_init_bin: sandbox-init.c, built */

#define DEFAULT_UID 65534
#define INSIDE_ID SANDBOX_INSIDE_ID
#define MAX_BINDS SANDBOX_MAX_BINDS
#define PATH_BUF SANDBOX_PATH
#define DEFAULT_TMP_BYTES (64ull << 20)

#define SHARED_STACK (64 * 1024)

/* Blank inits kept ready per runtime (ADR 0013): namespaces made, ids
 * mapped, loopback up, root staged, waiting for a job. */
#define BLANK_POOL 2
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

/* A sandbox init funcd started (sandbox-init.c): a blank waiting in the
 * pool, or one a job is being handed to. */
typedef struct blank {
    pid_t pid;
    int ctl;        /* our end of its stream socket */
    unsigned cg_id; /* the cgroups it waits in (the job's then), 0: none */
} blank;

struct funcd_sandbox {
    funcd_seccomp_filter filter;
    /* The pool is filled by a thread of its own and taken from on the loop. */
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
    int idmap_ns; /* a user namespace mapping 0 to `uid`, for idmapped binds; -1: none */
    int init_fd;  /* the init program, sealed in memory, opened read-only */
    sandbox_config *cfg; /* what every init is sent */
};

/* One mount the init attaches: a detached tree made here, or a path. */
typedef struct plan_mount {
    int fd; /* a detached tree, or -1 (by_path) */
    sandbox_bind b;
} plan_mount;

/* What a job needs made on funcd's side before its init gets it. */
typedef struct plan {
    const funcd_sandbox *sb;
    const funcd_sandbox_job *job;
    int root_fd; /* the image rootfs tree, or -1: a fresh tmpfs */
    int system;
    plan_mount m[MAX_BINDS];
    size_t n;
    char *area; /* the program, directory, arguments and environment (sandbox-child.h) */
    size_t area_len;
    uint32_t argc, envc;
    int err_w; /* funcd_sandbox_expose's helper reports on it */
} plan;

#define RO_ATTRS (MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)

/* Runs fn(arg) in a child that borrows our memory until it execs or exits,
 * on a stack of its own, while this thread waits (posix_spawn's way): no
 * copy of the page tables of a process as large as funcd. The child makes
 * system calls only and touches nothing but its stack and `arg`. */
static pid_t shared_memory_child(int (*fn)(void *), void *arg)
{
    void *stack = (void *)syscall(SYS_mmap, NULL, SHARED_STACK, PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED)
        return -1;
    UNPOISON_STACK(stack, SHARED_STACK);
    /* No handler of funcd's runs in the child (it has no child of its own
     * to be told of with SIGCHLD). */
    sigset_t saved;
    funcd_block_signals(&saved);
    pid_t pid = clone(fn, (char *)stack + SHARED_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, arg);
    int err = errno;
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    UNPOISON_STACK(stack, SHARED_STACK);
    syscall(SYS_munmap, stack, SHARED_STACK);
    errno = err;
    return pid;
}

/* Writes `iov` whole; the descriptors go with its first byte. */
static int send_all(int fd, struct iovec *iov, int n, const int *fds, size_t n_fds)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * SANDBOX_JOB_FDS)];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof(u));
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    if (n_fds) {
        m.msg_control = u.buf;
        m.msg_controllen = CMSG_SPACE(n_fds * sizeof(int));
        struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(n_fds * sizeof(int));
        memcpy(CMSG_DATA(cm), fds, n_fds * sizeof(int));
    }
    while (m.msg_iovlen) {
        ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        m.msg_control = NULL; /* sent with the first byte */
        m.msg_controllen = 0;
        while (m.msg_iovlen && (size_t)w >= m.msg_iov->iov_len) {
            w -= (ssize_t)m.msg_iov->iov_len;
            m.msg_iov++;
            m.msg_iovlen--;
        }
        if (m.msg_iovlen) {
            m.msg_iov->iov_base = (char *)m.msg_iov->iov_base + w;
            m.msg_iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

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

static void plan_system(sandbox_config *cfg)
{
    static const char *const paths[] = {"/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin",
                                        "/sbin", "/etc/ld.so.cache", "/etc/alternatives",
                                        "/etc/localtime"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]) && cfg->n_system < SANDBOX_MAX_SYSTEM;
         i++) {
        struct stat st;
        if (lstat(paths[i], &st) != 0)
            continue;
        sandbox_system_entry *e = &cfg->system[cfg->n_system];
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
        cfg->n_system++;
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

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U /* Linux 6.3 */
#endif

/* The init program, in sealed memory, opened read-only (a file open for
 * writing cannot be executed). Asked for as executable (MFD_EXEC): where
 * vm.memfd_noexec is set, a memfd is otherwise made non-executable; a
 * kernel before 6.3 knows no such flag (EINVAL) and makes every memfd
 * executable. -1 with the error set. */
static int load_init_program(void)
{
    int fd = memfd_create("funcd-sandbox", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
    if (fd < 0 && errno == EINVAL)
        fd = memfd_create("funcd-sandbox", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 && errno == EACCES)
        return funcd_error_set(FUNCD_EIO, "sandbox: cannot load the sandbox init: the kernel "
                                          "makes no executable memfd (vm.memfd_noexec is 2)");
    size_t off = 0, len = sizeof(funcd_sandbox_init_bin);
    while (fd >= 0 && off < len) {
        ssize_t w = write(fd, funcd_sandbox_init_bin + off, len - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    int ro = -1;
    if (fd >= 0 && off == len &&
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) == 0) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        ro = open(path, O_RDONLY | O_CLOEXEC);
    }
    int err = errno;
    if (fd >= 0)
        close(fd);
    if (ro < 0)
        return funcd_error_set(FUNCD_EIO, "sandbox: cannot load the sandbox init: %s",
                               strerror(err));
    return ro;
}

int funcd_sandbox_new(funcd_sandbox **out, const funcd_process_options *opts)
{
    *out = NULL;
    funcd_sandbox *sb = calloc(1, sizeof(*sb));
    sandbox_config *cfg = calloc(1, sizeof(*cfg));
    if (!sb || !cfg) {
        free(sb);
        free(cfg);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the sandbox");
    }
    sb->cfg = cfg;
    /* Without root only one's own uid can be mapped (and nothing idmapped). */
    sb->uid = geteuid() != 0 ? geteuid() : opts && opts->host_uid ? opts->host_uid : DEFAULT_UID;
    sb->gid = geteuid() != 0 ? getegid() : sb->uid;
    uint64_t tmp_bytes = opts && opts->tmp_bytes ? opts->tmp_bytes : DEFAULT_TMP_BYTES;
    snprintf(cfg->tmp_opts, sizeof(cfg->tmp_opts), "size=%llu,mode=1777",
             (unsigned long long)tmp_bytes);
    cfg->cap_last = read_cap_last();
    int rc = funcd_seccomp_build(&sb->filter, opts ? opts->seccomp_allow : NULL);
    if (rc == 0 && sb->filter.len > SANDBOX_FILTER_MAX) {
        funcd_seccomp_free(&sb->filter);
        rc = funcd_error_set(FUNCD_EINVAL, "sandbox: the seccomp filter is too long");
    }
    if (rc == 0 && (sb->init_fd = load_init_program()) < 0) {
        funcd_seccomp_free(&sb->filter);
        rc = -1;
    }
    if (rc < 0) {
        free(cfg);
        free(sb);
        return rc;
    }
    cfg->filter_len = sb->filter.len;
    memcpy(cfg->filter, sb->filter.insns, sb->filter.len * sizeof(struct sock_filter));
    sb->idmap_ns = geteuid() == 0 ? make_idmap_ns(sb->uid, sb->gid) : -1;
    plan_system(cfg);
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
    close(sb->init_fd);
    funcd_seccomp_free(&sb->filter);
    free(sb->cfg);
    free(sb);
}

/* A detached copy of `source`: read-only unless writable; funcd's own
 * copies (`owned`) idmapped where the filesystem allows it, everything else
 * shown with its host owners. -1 with the error set. */
static int make_tree(const funcd_sandbox *sb, const char *source, int writable, int owned)
{
    int fd = (int)syscall(SYS_open_tree, AT_FDCWD, source, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (fd < 0 && errno == EPERM)
        return -2; /* not root: the init binds the path itself, without idmapping */
    if (fd < 0)
        return funcd_error_set(FUNCD_EIO, "sandbox: cannot bind %s: %s", source, strerror(errno));
    uint64_t attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (writable ? 0 : MOUNT_ATTR_RDONLY);
    if (owned && sb->idmap_ns >= 0 &&
        funcd_sandbox_set_attr(fd, "", AT_EMPTY_PATH, attrs | MOUNT_ATTR_IDMAP, sb->idmap_ns) == 0)
        return fd;
    if (funcd_sandbox_set_attr(fd, "", AT_EMPTY_PATH, attrs, 0) == 0)
        return fd;
    int err = errno;
    close(fd);
    return funcd_error_set(FUNCD_EIO, "sandbox: cannot restrict the bind of %s: %s", source,
                           strerror(err));
}

static int by_target_length(const void *a, const void *b)
{
    size_t la = strlen(((const plan_mount *)a)->b.target);
    size_t lb = strlen(((const plan_mount *)b)->b.target);
    return la < lb ? -1 : la > lb;
}

static void plan_close(plan *p)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->m[i].fd >= 0)
            close(p->m[i].fd);
    if (p->root_fd >= 0)
        close(p->root_fd);
    free(p->area);
    p->area = NULL;
    p->n = 0;
    p->root_fd = -1;
}

static void area_put(plan *p, const char *s)
{
    size_t n = strlen(s) + 1;
    memcpy(p->area + p->area_len, s, n);
    p->area_len += n;
}

/* The job's strings, in the order the init reads them. */
static int plan_area(plan *p, const funcd_sandbox_job *job)
{
    size_t len = strlen(job->prog) + 1 + (job->cwd ? strlen(job->cwd) + 1 : 0);
    for (p->argc = 0; job->argv[p->argc]; p->argc++)
        len += strlen(job->argv[p->argc]) + 1;
    for (p->envc = 0; job->env && job->env[p->envc]; p->envc++)
        len += strlen(job->env[p->envc]) + 1;
    if (len > SANDBOX_JOB_AREA)
        return funcd_error_set(FUNCD_EINVAL, "sandbox: the worker's program, arguments and "
                               "environment take %zu bytes, more than %u", len, SANDBOX_JOB_AREA);
    if (!(p->area = malloc(len)))
        return funcd_error_set(FUNCD_ENOMEM, "out of memory starting a sandboxed worker");
    area_put(p, job->prog);
    if (job->cwd)
        area_put(p, job->cwd);
    for (uint32_t i = 0; i < p->argc; i++)
        area_put(p, job->argv[i]);
    for (uint32_t i = 0; i < p->envc; i++)
        area_put(p, job->env[i]);
    return 0;
}

static int plan_make(plan *p, funcd_sandbox *sb, const funcd_sandbox_job *job)
{
    memset(p, 0, sizeof(*p));
    p->sb = sb;
    p->job = job;
    p->root_fd = -1;
    p->err_w = -1;
    p->system = !job->rootfs && funcd_sandbox_needs_system(job->prog);
    if (job->n_binds > MAX_BINDS)
        return funcd_error_set(FUNCD_EINVAL, "sandbox: at most %d binds", MAX_BINDS);
    if (job->argv && plan_area(p, job) < 0)
        return -1;
    if (job->rootfs && (p->root_fd = make_tree(sb, job->rootfs, 0, 1)) < 0)
        return p->root_fd == -2 ? funcd_error_set(FUNCD_ENOTSUP, "sandbox: an image root needs "
                                                  "funcd to run as root")
                                : -1;
    for (size_t i = 0; i < job->n_binds; i++) {
        const funcd_worker_bind *b = &job->binds[i];
        const char *target = b->target ? b->target : b->source;
        struct stat st;
        if (!b->source || b->source[0] != '/' || target[0] != '/' ||
            strlen(b->source) >= PATH_BUF ||
            strlen(target) >= PATH_BUF - sizeof(SANDBOX_STAGING))
            return funcd_error_set(FUNCD_EINVAL, "sandbox: a bind needs absolute paths shorter "
                                   "than %d bytes", PATH_BUF - (int)sizeof(SANDBOX_STAGING));
        if (stat(b->source, &st) != 0)
            return funcd_error_set(FUNCD_ENOTFOUND, "sandbox: cannot bind %s: %s", b->source,
                                   strerror(errno));
        plan_mount *m = &p->m[p->n];
        memset(&m->b, 0, sizeof(m->b));
        snprintf(m->b.source, sizeof(m->b.source), "%s", b->source);
        snprintf(m->b.target, sizeof(m->b.target), "%s", target);
        m->b.is_file = !S_ISDIR(st.st_mode);
        m->b.writable = b->writable;
        if ((m->fd = make_tree(sb, b->source, b->writable, b->owned != 0)) == -1)
            return -1;
        if (m->fd == -2) {
            m->fd = -1;
            m->b.by_path = 1;
        }
        p->n++;
    }
    /* A bind inside another is attached after it, or it would be hidden. */
    qsort(p->m, p->n, sizeof(p->m[0]), by_target_length);
    return 0;
}

/* Reads error records from `err_r` until its end: 0 when the end came
 * with no failure, -1 with the failed step's error set. A sandbox init
 * writes the forked record once the worker is forked, and the worker's
 * copy of the pipe closes at its exec: with `need_forked` an end before
 * that record is an init that died before the fork. */
static int await_records(int err_r, int need_forked)
{
    int forked = !need_forked;
    for (;;) {
        sandbox_child_error ce;
        ssize_t n;
        do
            n = read(err_r, &ce, sizeof(ce));
        while (n < 0 && errno == EINTR);
        if (n == 0 && forked)
            return 0;
        if (n == 0)
            return funcd_error_set(FUNCD_EIO, "sandbox: the sandbox init ended before it "
                                              "started the worker");
        if (n != (ssize_t)sizeof(ce))
            return funcd_error_set(FUNCD_EIO, "sandbox: the worker's setup ended without a word");
        ce.step[sizeof(ce.step) - 1] = '\0';
        if (need_forked && ce.err == 0 && strcmp(ce.step, SANDBOX_FORKED) == 0) {
            forked = 1;
            continue;
        }
        return funcd_error_set(FUNCD_EIO, "sandbox: %s: %s", ce.step, strerror(ce.err));
    }
}

/* ---- sandbox inits (sandbox-init.c) ----------------------------------------- */

/* What the child that borrows our memory execs. */
typedef struct init_exec {
    int program, ctl, cg;
    char *const *argv;
    int err; /* the exec's errno, when it failed */
} init_exec;

ON_SHARED_STACK static int init_exec_main(void *arg)
{
    init_exec *x = arg;
    static char *const no_env[] = {NULL};
    /* The child's own descriptor table: nothing goes through the exec but
     * the two it is given. funcd's own descriptors are close-on-exec, but
     * a host's need not be: a file the host had open for writing when the
     * filler cloned this child stayed open in stage 0 and the init until
     * the init closed it, and an exec of that file in another sandbox then
     * failed with ETXTBSY (sandbox/escape-memory-hog, 1 run in CI). */
    funcd_close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    syscall(SYS_fcntl, x->ctl, F_SETFD, 0);
    if (x->cg >= 0)
        syscall(SYS_fcntl, x->cg, F_SETFD, 0);
    syscall(SYS_execveat, x->program, "", x->argv, no_env, AT_EMPTY_PATH);
    x->err = errno;
    _exit(127);
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
    if (b->cg_id && sb->cg)
        funcd_cgroup_remove(sb->cg, b->cg_id);
    *b = (blank){-1, -1, 0};
}

/* Starts a sandbox init in cgroups `b->cg_id` (made by the caller, or 0):
 * stage 0 execs from memory, clones the init into its namespaces (on
 * cgroup v2 straight into its cgroup) and exits; then the init's ids are
 * mapped, it is moved into its v1 cgroups (a blank's one move, made on
 * the filler thread), and it gets the hello and the configuration. 0, or
 * -1 with the error set, the init ended and its cgroups removed. */
static int init_start(funcd_sandbox *sb, blank *b, int network, int direct)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        int err = errno;
        blank_discard(sb, b);
        return funcd_error_set(FUNCD_EIO, "sandbox: socketpair: %s", strerror(err));
    }
    int cg = sb->cg && b->cg_id ? funcd_cgroup_open(sb->cg, b->cg_id) : -1;
    char a_ctl[16], a_cg[16];
    snprintf(a_ctl, sizeof(a_ctl), "%d", sv[1]);
    snprintf(a_cg, sizeof(a_cg), "%d", cg);
    char *const argv[] = {"funcd-sandbox", a_ctl, a_cg, network ? "1" : "0", NULL};
    init_exec x = {sb->init_fd, sv[1], cg, argv, 0};
    pid_t stage0 = shared_memory_child(init_exec_main, &x);
    sandbox_report r = {-1, stage0 < 0 ? errno : 0, 0};
    close(sv[1]);
    if (cg >= 0)
        close(cg);
    b->ctl = sv[0];
    if (stage0 > 0) {
        /* Stage 0 writes its report and exits: its end first, for the
         * init holds the socket open (a stage 0 killed before its report
         * must not leave us reading for ever). */
        while (waitpid(stage0, NULL, 0) < 0 && errno == EINTR)
            ;
        if (recv(b->ctl, &r, sizeof(r), MSG_DONTWAIT) != (ssize_t)sizeof(r))
            r = (sandbox_report){-1, x.err ? x.err : EPROTO, 0};
    }
    if (r.pid <= 0) {
        blank_discard(sb, b);
        return funcd_error_set(FUNCD_EIO, "sandbox: cannot start the sandbox init: %s",
                               strerror(r.err));
    }
    b->pid = r.pid;
    setpgid(b->pid, b->pid); /* the init does too: kill(-pid) works at once */
    sandbox_hello hello = {SANDBOX_MAGIC, direct, network};
    struct iovec iov[2] = {{&hello, sizeof(hello)}, {sb->cfg, sizeof(*sb->cfg)}};
    int rc = 0;
    if (map_ids(b->pid, INSIDE_ID, sb->uid, sb->gid) != 0)
        rc = funcd_error_set(FUNCD_EIO, "sandbox: cannot map the worker's user: %s",
                             strerror(errno));
    else if (b->cg_id && !r.placed && funcd_cgroup_attach(sb->cg, b->cg_id, b->pid) < 0)
        rc = -1;
    else if (send_all(b->ctl, iov, 2, NULL, 0) != 0)
        rc = funcd_error_set(FUNCD_EIO, "sandbox: the sandbox init is gone: %s",
                             strerror(errno));
    if (rc < 0)
        blank_discard(sb, b);
    return rc;
}

/* Hands the planned job to init `b`, with the write ends of the pipes it
 * reports on. -1 (errno set) when the init is gone. */
static int send_job(const blank *b, const plan *p, int err_w, int status_w)
{
    const funcd_sandbox_job *job = p->job;
    sandbox_job_msg *msg = calloc(1, sizeof(*msg));
    if (!msg) {
        errno = ENOMEM;
        return -1;
    }
    int fds[SANDBOX_JOB_FDS];
    size_t n = 0;
    fds[n++] = err_w;
    fds[n++] = status_w;
    msg->magic = SANDBOX_MAGIC;
    msg->system = p->system;
    msg->has_root = p->root_fd >= 0;
    msg->has_cwd = job->cwd != NULL;
    for (int i = 0; i < 3; i++)
        if ((msg->stdio[i] = job->fds[i] >= 0))
            fds[n++] = job->fds[i];
    if (p->root_fd >= 0)
        fds[n++] = p->root_fd;
    msg->n_binds = (uint32_t)p->n;
    for (size_t i = 0; i < p->n; i++) {
        msg->binds[i] = p->m[i].b;
        if (p->m[i].fd >= 0)
            fds[n++] = p->m[i].fd;
    }
    msg->argc = p->argc;
    msg->envc = p->envc;
    msg->area_len = (uint32_t)p->area_len;
    struct iovec iov[2] = {{msg, sizeof(*msg)}, {p->area, p->area_len}};
    int rc = send_all(b->ctl, iov, 2, fds, n);
    int err = errno;
    free(msg);
    errno = err;
    return rc;
}

/* ---- blank inits: the namespaces made ahead of the job -------------------- */

/* Starts a blank init in cgroups of its own and waits until it has staged
 * its root. 0, or -1 with the error set. */
static int blank_make(funcd_sandbox *sb, blank *b)
{
    *b = (blank){-1, -1, 0};
    if (sb->cg) {
        unsigned id = funcd_cgroup_next_id(sb->cg);
        if (funcd_cgroup_make_blank(sb->cg, id, sb->default_pids) < 0)
            return -1;
        b->cg_id = id;
    }
    if (init_start(sb, b, 1, 0) < 0)
        return -1;
    char c;
    if (funcd_sandbox_read_full(b->ctl, &c, 1) != 0 || c != 'r') {
        blank_discard(sb, b);
        return funcd_error_set(FUNCD_EIO, "sandbox: a blank init ended before it was ready");
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
        /* The host's handlers run on its own threads. */
        sigset_t saved;
        funcd_block_signals(&saved);
        sb->filler_on = pthread_create(&sb->filler, NULL, filler_main, sb) == 0;
        pthread_sigmask(SIG_SETMASK, &saved, NULL);
    }
    sb->want = 1;
    pthread_cond_signal(&sb->wake);
    pthread_mutex_unlock(&sb->lock);
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

/* Gives the job to a blank from the pool or, when there is none (or the
 * job wants the host's network), to an init started for it now in
 * cgroups made for it (on v1 moved there: a move on the request's path).
 * Its sockets are made in its namespace first. 0 with *b its init, or -1
 * with the error set and nothing left. */
static int hand_job(funcd_sandbox *sb, const plan *p, int err_w, int status_w, blank *b)
{
    const funcd_sandbox_job *job = p->job;
    int rc;
    while (!job->host_network && (rc = blank_take(sb, job, b)) != 0) {
        if (rc < 0)
            return -1;
        if (funcd_netns_listen(b->pid, job->listen, job->n_listen, job->listen_fds) < 0) {
            blank_discard(sb, b);
            return -1;
        }
        if (send_job(b, p, err_w, status_w) == 0)
            return 0;
        close_listen(job);
        blank_discard(sb, b); /* it died meanwhile: the next one */
    }
    static const funcd_worker_limits none;
    *b = (blank){-1, -1, 0};
    if (sb->cg) {
        unsigned id = funcd_cgroup_next_id(sb->cg);
        if (funcd_cgroup_make(sb->cg, id, job->limits ? job->limits : &none,
                              sb->default_pids) < 0)
            return -1;
        b->cg_id = id;
    }
    if (init_start(sb, b, !job->host_network, 1) < 0)
        return -1;
    if (funcd_netns_listen(b->pid, job->listen, job->n_listen, job->listen_fds) < 0) {
        blank_discard(sb, b);
        return -1;
    }
    if (send_job(b, p, err_w, status_w) != 0) {
        int err = errno;
        blank_discard(sb, b);
        return funcd_error_set(FUNCD_EIO, "sandbox: the worker's init is gone: %s",
                               strerror(err));
    }
    return 0;
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
    int errp[2] = {-1, -1}, status[2] = {-1, -1};
    blank b = {-1, -1, 0};
    int rc = plan_make(p, sb, job);
    if (rc == 0 && (pipe2(errp, O_CLOEXEC) != 0 || pipe2(status, O_CLOEXEC) != 0))
        rc = funcd_error_set(FUNCD_EIO, "sandbox: cannot create pipes: %s", strerror(errno));
    if (rc == 0)
        rc = hand_job(sb, p, errp[1], status[1], &b);
    plan_close(p);
    free(p);
    if (errp[1] >= 0)
        close(errp[1]);
    if (status[1] >= 0)
        close(status[1]);
    if (rc == 0)
        rc = await_records(errp[0], 1);
    if (errp[0] >= 0)
        close(errp[0]);
    if (rc < 0) {
        if (status[0] >= 0)
            close(status[0]);
        blank_discard(sb, &b);
        close_listen(job);
        return -1;
    }
    close(b.ctl); /* the init closed its end with the job */
    *status_fd = status[0];
    *cg_id = b.cg_id;
    return b.pid;
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
        funcd_sandbox_fail(p->err_w, "join the user namespace", NULL, errno);
    if (funcd_sandbox_become_worker_user() != 0)
        funcd_sandbox_fail(p->err_w, "become the mapped user", NULL, errno);
    if (setns(mnt_fd, CLONE_NEWNS) != 0)
        funcd_sandbox_fail(p->err_w, "join the mount namespace", NULL, errno);
    if (set_root_writable(1) != 0)
        funcd_sandbox_fail(p->err_w, "make / writable", NULL, errno);
    char dst[PATH_BUF];
    for (size_t i = 0; i < p->n; i++) {
        funcd_sandbox_join(dst, p->m[i].b.target, NULL);
        if (p->m[i].b.by_path)
            funcd_sandbox_fail(p->err_w, "bind ", dst, EPERM);
        if ((p->m[i].b.is_file ? funcd_sandbox_make_file(dst) : funcd_sandbox_mkdir_p(dst)) != 0)
            funcd_sandbox_fail(p->err_w, "mkdir ", dst, errno);
        if (funcd_sandbox_move_tree(p->m[i].fd, dst) != 0)
            funcd_sandbox_fail(p->err_w, "bind ", dst, errno);
    }
    if (set_root_writable(0) != 0)
        funcd_sandbox_fail(p->err_w, "read-only /", NULL, errno);
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
        expose_args args = {p, user_fd, mnt_fd};
        /* The helper's change of credentials resets the dumpable flag of
         * the memory it shares with funcd: funcd's, put back after. */
        int dumpable = prctl(PR_GET_DUMPABLE);
        pid_t pid = shared_memory_child(expose_main, &args);
        int err = errno;
        close(errp[1]);
        if (pid < 0) {
            rc = funcd_error_set(FUNCD_EIO, "sandbox: clone: %s", strerror(err));
        } else {
            rc = await_records(errp[0], 0); /* the helper exits 0 when done */
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
        }
        if (dumpable >= 0 && prctl(PR_GET_DUMPABLE) != dumpable)
            prctl(PR_SET_DUMPABLE, dumpable);
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
