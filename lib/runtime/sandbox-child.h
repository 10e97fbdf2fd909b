/*
 * What a sandbox's own processes share: the sandbox init program
 * (sandbox-init.c, a small static executable of its own that libfuncd
 * carries and execs) and funcd's short-lived helper that attaches more
 * binds to a running sandbox (sandbox.c). Everything here makes system
 * calls only: the helper borrows funcd's memory until it exits.
 *
 * Also the wire between funcd and the init program: the configuration
 * every init gets once its ids are mapped, and the job (docs/adr/0060).
 */
#ifndef FUNCD_RUNTIME_SANDBOX_CHILD_H
#define FUNCD_RUNTIME_SANDBOX_CHILD_H

#include <linux/filter.h>
#include <stddef.h>
#include <stdint.h>

/* The uid and gid a worker (and its init) has inside its user namespace:
 * not root there either (ADR 0024). The only id mapped: to the host uid. */
#define SANDBOX_INSIDE_ID 1000
#define SANDBOX_MAX_BINDS 32
#define SANDBOX_MAX_SYSTEM 16
#define SANDBOX_PATH 512
/* Where the new root is put together: any directory of the host works,
 * since the mount over it lives only in the child's private namespace, and
 * nothing bound by path comes from below it. */
#define SANDBOX_STAGING "/tmp"
/* The most a job's program, directory, arguments and environment may take
 * together (execve's own limit is about 2 MiB). */
#define SANDBOX_JOB_AREA (4u << 20)
/* classic BPF's own limit */
#define SANDBOX_FILTER_MAX 4096
/* err_w, status_w, stdio, the rootfs and one per bind. */
#define SANDBOX_JOB_FDS (5 + 1 + SANDBOX_MAX_BINDS)
#define SANDBOX_MAGIC 0x66736230u /* "fsb0" */

/* Code run on a borrowed stack: AddressSanitizer's bookkeeping before a
 * call that does not return assumes the thread's own stack. */
#define ON_SHARED_STACK __attribute__((no_sanitize("address")))

/* A host path every dynamically linked program or interpreter needs. */
typedef struct sandbox_system_entry {
    char path[64];
    char link[SANDBOX_PATH]; /* a symlink's target, or "" */
    int is_dir;
} sandbox_system_entry;

/* Stage 0 -> funcd: the init's pid (-1: err), and whether it was cloned
 * straight into its cgroup (else funcd moves it there). */
typedef struct sandbox_report {
    int32_t pid, err, placed;
} sandbox_report;

/* funcd -> init, once its ids are mapped: a hello, then the configuration
 * every sandbox of the runtime shares. */
typedef struct sandbox_hello {
    uint32_t magic;
    int direct;  /* the job follows at once: stage nothing ahead of it */
    int network; /* it has a network namespace of its own: bring loopback up */
} sandbox_hello;

typedef struct sandbox_config {
    int cap_last;
    char tmp_opts[64]; /* the options of the sandbox's /tmp */
    uint32_t n_system;
    sandbox_system_entry system[SANDBOX_MAX_SYSTEM];
    uint32_t filter_len;
    struct sock_filter filter[SANDBOX_FILTER_MAX];
} sandbox_config;

/* One mount the init attaches: a detached tree funcd made, or (by_path:
 * without root there is no open_tree) a path the init binds itself. */
typedef struct sandbox_bind {
    int by_path, is_file, writable;
    char source[SANDBOX_PATH];
    char target[SANDBOX_PATH];
} sandbox_bind;

/* funcd -> init: the job. Descriptors travel with its first byte, in this
 * order: err_w, status_w, the stdio ones present, the root, the binds'
 * trees (those not by_path). Then `area_len` bytes: the program, the
 * directory (when has_cwd), argc arguments and envc variables, each
 * NUL-terminated. */
typedef struct sandbox_job_msg {
    uint32_t magic;
    int system;   /* the host's system paths are bound */
    int has_root; /* an image's root travels */
    int has_cwd;
    int stdio[3]; /* which of the worker's stdin, stdout, stderr travel (else /dev/null) */
    uint32_t n_binds;
    sandbox_bind binds[SANDBOX_MAX_BINDS];
    uint32_t argc, envc, area_len;
} sandbox_job_msg;

/* What the init or the helper says when a step fails. */
typedef struct sandbox_child_error {
    int err;
    char step[60];
} sandbox_child_error;

/* The record (err 0) the init writes once it has forked the worker. */
#define SANDBOX_FORKED "forked"

/* Writes the failed step on `fd` and exits 126. */
ON_SHARED_STACK _Noreturn void funcd_sandbox_fail(int fd, const char *step, const char *detail, int err);
/* a + b into out (SANDBOX_PATH bytes), truncated */
void funcd_sandbox_join(char *out, const char *a, const char *b);
int funcd_sandbox_mkdir_p(char *path);
/* Creates `path` (an empty file) and its directories. */
int funcd_sandbox_make_file(char *path);
int funcd_sandbox_set_attr(int dfd, const char *path, unsigned flags, uint64_t set, int userns);
/* Attaches detached tree `fd` at `target`. */
int funcd_sandbox_move_tree(int fd, const char *target);
/* Reads exactly n bytes: 0, or -1 (EOF or an error). */
int funcd_sandbox_read_full(int fd, void *buf, size_t n);
/* Takes the namespace's one mapped id (SANDBOX_INSIDE_ID). */
int funcd_sandbox_become_worker_user(void);

#endif
