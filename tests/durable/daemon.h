/*
 * The durable-substrate tests drive the real daemon (the build's
 * bin/funcd/funcd) as a child process: start it on ephemeral loopback ports,
 * read the addresses it prints, kill it (-9 or a signal), restart it on the
 * same data directory.
 *
 * Every daemon a test starts is the test's to end: dd_stop() kills and reaps
 * it, and is safe to call on a daemon that already exited or never started.
 * Not thread-safe: one thread owns a dd_daemon.
 */
#ifndef FUNCD_TESTS_DURABLE_DAEMON_H
#define FUNCD_TESTS_DURABLE_DAEMON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define DD_TOKEN "funcd-dev-token"
#define DD_NS "/apis/funcd.dev/v1/namespaces/default"

typedef struct dd_daemon {
    pid_t pid;         /* 0: not running (or reaped) */
    int exit_status;   /* wait status once reaped */
    char cp[96];       /* "http://127.0.0.1:PORT", control plane */
    char dp[96];       /* data plane */
    char log[512];     /* its stderr goes here */
} dd_daemon;

/* The funcd binary of this build ($FUNCD_BUILD_ROOT/bin/funcd/funcd), or
 * NULL (with a message) when it is not there. */
const char *dd_funcd_path(void);

/*
 * Starts funcd with `args` (NULL-terminated, without argv[0]), stderr to
 * `log_path` (truncated), and waits (up to 20 s) until it printed its
 * control-plane and data-plane addresses. `args` must make it listen on
 * ports it prints (dd_default_args gives the usual ones). 0 on success;
 * on failure the daemon is stopped and its log printed.
 */
int dd_start(dd_daemon *d, const char *log_path, const char *const *args);

/* Up to `max` args: `mode` ("--data-dir"/"--memory") and `dir` (or NULL),
 * the loopback ports 0 and --dev, followed by `extra` (NULL-terminated or
 * NULL), and --no-sandbox when FUNCD_DURABLE_NO_SANDBOX=1. Returns the
 * NULL-terminated `out`. */
const char **dd_default_args(const char **out, size_t max, const char *mode, const char *dir,
                             const char *const *extra);

/* Runs funcd with `args` to its end (stderr to `log_path`); its exit code,
 * or -1 if it did not exit by itself within `timeout_ms` (then it is
 * killed) or died of a signal. */
int dd_run(const char *log_path, const char *const *args, int timeout_ms);

/* 1 when the log holds `text`. */
int dd_log_has(const char *log_path, const char *text);

/* SIGKILL and reap. No-op when not running. */
void dd_kill9(dd_daemon *d);
#define dd_stop dd_kill9

/* Waits up to `timeout_ms` for the daemon to exit; 1 when it did (status in
 * d->exit_status, pid cleared), 0 if it still runs. */
int dd_wait_exit(dd_daemon *d, int timeout_ms);

/* Prints the last lines of the daemon's log to stderr (for a failure). */
void dd_dump_log(const dd_daemon *d);

/* A new private temporary directory under $TMPDIR (or /tmp) in `out`. */
int dd_tempdir(char *out, size_t len, const char *tag);

/* 1 when process `pid` is gone, or is another process than the one that
 * started at `start` (field 22 of /proc/PID/stat; 0: don't compare). */
int dd_pid_gone(pid_t pid, unsigned long long start);
unsigned long long dd_pid_start(pid_t pid);

void dd_sleep_ms(int ms);

typedef struct dd_proc {
    pid_t pid;
    unsigned long long start;
} dd_proc;

/* Every process below `root` (children, grandchildren...) with its start
 * time: what must not outlive `root`. Returns how many (at most `max`). */
size_t dd_descendants(pid_t root, dd_proc *out, size_t max);

/* Waits until every process of `p` is gone; 1 when they are. */
int dd_all_gone(const dd_proc *p, size_t n, int timeout_ms);

#endif
