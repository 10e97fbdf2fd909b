#include "runtime/seccomp.h"

#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "funcd/sys/error.h"

/* Everything Docker's default profile leaves out for a container without
 * extra capabilities, and the mount API that postdates it. Names this
 * architecture lacks are skipped. */
const char *const funcd_seccomp_denied[] = {
    "acct", "add_key", "afs_syscall", "bpf", "chroot", "clock_adjtime", "clock_settime",
    "create_module", "delete_module", "fanotify_init", "finit_module", "fsconfig", "fsmount",
    "fsopen", "fspick", "get_kernel_syms", "get_mempolicy", "getpmsg", "init_module",
    "io_uring_enter", "io_uring_register", "io_uring_setup", "ioperm", "iopl", "kcmp",
    "kexec_file_load", "kexec_load", "keyctl", "lookup_dcookie", "mbind", "mount",
    "mount_setattr", "move_mount", "move_pages", "name_to_handle_at", "nfsservctl",
    "open_by_handle_at", "open_tree", "perf_event_open", "pidfd_getfd", "pivot_root",
    "process_madvise", "process_vm_readv", "process_vm_writev", "ptrace", "putpmsg",
    "query_module", "quotactl", "quotactl_fd", "reboot", "request_key", "security",
    "set_mempolicy", "setdomainname", "sethostname", "setns", "settimeofday", "stime", "swapoff",
    "swapon", "_sysctl", "sysfs", "syslog", "tuxcall", "umount", "umount2", "unshare", "uselib",
    "userfaultfd", "ustat", "vhangup", "vm86", "vm86old", "vserver",
    NULL};

/* clone(2) may not make namespaces; clone3 answers ENOSYS so that libc
 * falls back to clone, whose flags a filter can see. */
static const unsigned long ns_flags[] = {CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
                                         CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, 0x80 /* TIME */};

static int allowed(const char *name, const char *const *allow)
{
    for (const char *const *a = allow; a && *a; a++)
        if (strcmp(*a, name) == 0)
            return 1;
    return 0;
}

static int add_rules(scmp_filter_ctx ctx, const char *const *allow)
{
    for (const char *const *n = funcd_seccomp_denied; *n; n++) {
        int nr = seccomp_syscall_resolve_name(*n);
        if (nr == __NR_SCMP_ERROR || nr < 0 || allowed(*n, allow))
            continue;
        if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0) < 0)
            return funcd_error_set(FUNCD_EIO, "seccomp: cannot deny %s", *n);
    }
    if (!allowed("clone", allow))
        for (size_t i = 0; i < sizeof(ns_flags) / sizeof(ns_flags[0]); i++)
            if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                 SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i])) < 0)
                return funcd_error_set(FUNCD_EIO, "seccomp: cannot restrict clone");
    if (!allowed("clone3", allow) &&
        seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0) < 0)
        return funcd_error_set(FUNCD_EIO, "seccomp: cannot deny clone3");
    return 0;
}

/* libseccomp 2.5 exports BPF only to a descriptor: go through a memfd. */
static int export_bpf(scmp_filter_ctx ctx, funcd_seccomp_filter *out)
{
    int fd = memfd_create("funcd-seccomp", MFD_CLOEXEC);
    if (fd < 0)
        return funcd_error_set(FUNCD_EIO, "seccomp: memfd_create: %s", strerror(errno));
    int rc = seccomp_export_bpf(ctx, fd);
    off_t size = rc == 0 ? lseek(fd, 0, SEEK_END) : -1;
    if (size <= 0 || size % (off_t)sizeof(struct sock_filter) != 0 ||
        size / (off_t)sizeof(struct sock_filter) > 0xffff) {
        close(fd);
        return funcd_error_set(FUNCD_EIO, "seccomp: cannot export the filter");
    }
    out->insns = malloc((size_t)size);
    ssize_t n = out->insns ? pread(fd, out->insns, (size_t)size, 0) : -1;
    close(fd);
    if (n != size) {
        free(out->insns);
        out->insns = NULL;
        return funcd_error_set(FUNCD_EIO, "seccomp: cannot read the exported filter");
    }
    out->len = (unsigned short)(size / (off_t)sizeof(struct sock_filter));
    return 0;
}

int funcd_seccomp_build(funcd_seccomp_filter *out, const char *const *allow)
{
    memset(out, 0, sizeof(*out));
    for (const char *const *a = allow; a && *a; a++) /* a typo must not pass unnoticed */
        if (seccomp_syscall_resolve_name(*a) == __NR_SCMP_ERROR)
            return funcd_error_set(FUNCD_EINVAL, "seccomp allow list: \"%s\" is not a system "
                                   "call of this machine", *a);
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return funcd_error_set(FUNCD_ENOMEM, "seccomp: cannot create a filter");
    /* The worker sets no_new_privs itself, just before loading. */
    seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
    int rc = add_rules(ctx, allow);
    if (rc == 0)
        rc = export_bpf(ctx, out);
    seccomp_release(ctx);
    return rc;
}

void funcd_seccomp_free(funcd_seccomp_filter *f)
{
    if (!f)
        return;
    free(f->insns);
    f->insns = NULL;
    f->len = 0;
}
