#include "util/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/closerange.h"

static void say(const char *msg, size_t len)
{
    ssize_t ignored = write(2, msg, len);
    (void)ignored;
}

/* Runs in the vforked child: system calls only. */
static void become(const funcd_spawn_spec *spec, pid_t parent, const sigset_t *none)
{
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigaction(SIGPIPE, &dfl, NULL); /* funcd ignores it; children should not */
    for (int i = 0; i < 3; i++) {
        int fd = spec->fds[i] >= 0 ? spec->fds[i] : open("/dev/null", i ? O_WRONLY : O_RDONLY);
        if (fd >= 0 && fd != i)
            dup2(fd, i);
        else if (fd == i)
            fcntl(fd, F_SETFD, 0); /* keep it across exec */
    }
    funcd_close_range(3, ~0U, 0);
    if (spec->cwd && chdir(spec->cwd) != 0) {
        static const char msg[] = "funcd: cannot enter the function's directory\n";
        say(msg, sizeof(msg) - 1);
        _exit(126);
    }
    sigprocmask(SIG_SETMASK, none, NULL);
    execve(spec->path, spec->argv, spec->env);
    static const char msg[] = "funcd: cannot execute the program\n";
    say(msg, sizeof(msg) - 1);
    _exit(127);
}

void funcd_block_signals(sigset_t *saved)
{
    sigset_t all;
    sigfillset(&all);
    sigdelset(&all, SIGCHLD);
    pthread_sigmask(SIG_SETMASK, &all, saved);
}

pid_t funcd_spawn(const funcd_spawn_spec *spec)
{
    sigset_t saved, none;
    sigemptyset(&none);
    pid_t parent = getpid();
    funcd_block_signals(&saved);
    pid_t pid = vfork();
    if (pid == 0)
        become(spec, parent, &none);
    int err = errno;
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    if (pid > 0)
        setpgid(pid, pid); /* also here, so kill(-pid) works at once */
    errno = err;
    return pid;
}
