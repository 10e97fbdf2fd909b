#include "runtime/sandbox-child.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <net/if.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime/netns.h"

static void put_step(char *out, size_t len, const char *a, const char *b)
{
    size_t n = 0;
    for (; *a && n + 1 < len; a++)
        out[n++] = *a;
    for (; b && *b && n + 1 < len; b++)
        out[n++] = *b;
    out[n] = '\0';
}

ON_SHARED_STACK _Noreturn void funcd_sandbox_fail(int fd, const char *step, const char *detail, int err)
{
    sandbox_child_error ce = {err, ""};
    put_step(ce.step, sizeof(ce.step), step, detail);
    ssize_t ignored = write(fd, &ce, sizeof(ce));
    (void)ignored;
    _exit(126);
}

void funcd_sandbox_join(char *out, const char *a, const char *b)
{
    put_step(out, SANDBOX_PATH, a, b);
}

int funcd_sandbox_mkdir_p(char *path)
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

int funcd_sandbox_make_file(char *path)
{
    char *slash = strrchr(path, '/');
    if (slash && slash != path) {
        *slash = '\0';
        int rc = funcd_sandbox_mkdir_p(path);
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

int funcd_sandbox_read_full(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

int funcd_sandbox_set_attr(int dfd, const char *path, unsigned flags, uint64_t set, int userns)
{
    struct mount_attr attr = {.attr_set = set, .userns_fd = (uint64_t)userns};
    return (int)syscall(SYS_mount_setattr, dfd, path, flags, &attr, sizeof(attr));
}

int funcd_sandbox_move_tree(int fd, const char *target)
{
    return (int)syscall(SYS_move_mount, fd, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH);
}

/* The old ids were not the namespace's root (it has none), so the change
 * clears no capability; the worker loses them when it drops them and
 * execs as a non-root uid. System calls, not glibc's wrappers, which would
 * signal funcd's other threads to change theirs too (the helper is one
 * thread of a threaded process). */
int funcd_sandbox_become_worker_user(void)
{
    if (syscall(SYS_setresgid, SANDBOX_INSIDE_ID, SANDBOX_INSIDE_ID, SANDBOX_INSIDE_ID) != 0)
        return -1;
    return (int)syscall(SYS_setresuid, SANDBOX_INSIDE_ID, SANDBOX_INSIDE_ID, SANDBOX_INSIDE_ID);
}

int funcd_netns_loopback_up(const char **step)
{
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    memcpy(ifr.ifr_name, "lo", 3);
    *step = "loopback";
    if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) != 0) {
        int err = errno;
        if (s >= 0)
            close(s);
        errno = err;
        return -1;
    }
    int rc = 0;
    if (!(ifr.ifr_flags & IFF_UP)) {
        ifr.ifr_flags |= IFF_UP;
        *step = "loopback up";
        rc = ioctl(s, SIOCSIFFLAGS, &ifr);
    }
    int err = errno;
    close(s);
    errno = err;
    return rc;
}
