/*
 * funcdctl: what every command shares. A command is one file with one entry
 * point, `int cmd_x(ctl_ctx *ctx, int argc, char **argv)`, listed in the
 * dispatch table of main.c. argv holds the command's own arguments (global
 * flags already removed); the return value is the process exit status.
 */
#ifndef FUNCDCTL_CLI_H
#define FUNCDCTL_CLI_H

#include "api/api.h"
#include "client.h"

/* Exit statuses (documented in docs/cli.md). */
#define CTL_EXIT_OK 0
#define CTL_EXIT_ERROR 1 /* the server refused, could not be reached, or input was bad */
#define CTL_EXIT_USAGE 2 /* the command line itself is wrong */

typedef enum ctl_output {
    CTL_OUT_TABLE = 0,
    CTL_OUT_WIDE,
    CTL_OUT_JSON,
    CTL_OUT_YAML,
    CTL_OUT_NAME,
} ctl_output;

typedef struct ctl_command ctl_command;

typedef struct ctl_ctx {
    const char *server;
    const char *token;
    const char *ns;
    int ns_explicit; /* -n was given: a manifest's own namespace must then agree */
    ctl_output output;
    const ctl_command *command;
    ctl_client *client; /* created lazily by ctl_ctx_client() */
} ctl_ctx;

struct ctl_command {
    const char *name;
    int (*fn)(ctl_ctx *ctx, int argc, char **argv);
    const char *summary; /* one line for `funcdctl --help` */
    const char *usage;   /* "apply -f FILE|-": what follows `funcdctl ` */
    const char *help;    /* flags and examples for `funcdctl CMD --help`, or NULL */
};

/* The HTTP client for ctx->server, created on first use; NULL (message
 * printed) if it cannot be created. */
ctl_client *ctl_ctx_client(ctl_ctx *ctx);

/* Prints "funcdctl: MESSAGE" and the command's usage line on stderr; returns
 * CTL_EXIT_USAGE so a command can `return ctl_usage(ctx, "...")`. */
int ctl_usage(const ctl_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "funcdctl: error: MESSAGE" on stderr; returns CTL_EXIT_ERROR. */
int ctl_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints "funcdctl: warning: MESSAGE" on stderr. */
void ctl_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * A status line on stderr, rewritten in place with "\r" (for a terminal:
 * the caller checks isatty). ctl_fail, ctl_warn and ctl_usage clear it
 * first, so a message never lands in the middle of it; ctl_status_clear
 * removes it before the command prints its result.
 */
void ctl_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ctl_status_clear(void);

/* The kind a user typed (see funcd_kind_lookup); on an unknown name prints a
 * usage error listing the known kinds and returns NULL. */
const funcd_kind *ctl_kind_arg(const ctl_ctx *ctx, const char *name);

/* Takes the value of flag `argv[*i]` ("-f X", "-fX", "--file X", "--file=X")
 * when it is one of `short_flag` / `long_flag`: 1 and *value set, advancing
 * *i past a separate value; 0 if argv[*i] is another flag; -1 (usage error
 * printed) when the value is missing. */
int ctl_flag_value(const ctl_ctx *ctx, int argc, char **argv, int *i, const char *short_flag,
                   const char *long_flag, const char **value);

/*
 * From now on SIGINT and SIGTERM set the returned flag instead of killing
 * the process, so a streaming command (watch, logs -f) ends cleanly: pass
 * the flag to ctl_stream.
 */
volatile sig_atomic_t *ctl_stop_on_signals(void);

/* Command entry points. */
int cmd_apply(ctl_ctx *ctx, int argc, char **argv);
int cmd_get(ctl_ctx *ctx, int argc, char **argv);
int cmd_delete(ctl_ctx *ctx, int argc, char **argv);
int cmd_describe(ctl_ctx *ctx, int argc, char **argv);
int cmd_watch(ctl_ctx *ctx, int argc, char **argv);
int cmd_version(ctl_ctx *ctx, int argc, char **argv);
int cmd_deploy(ctl_ctx *ctx, int argc, char **argv);
int cmd_invoke(ctl_ctx *ctx, int argc, char **argv);
int cmd_logs(ctl_ctx *ctx, int argc, char **argv);
int cmd_fn(ctl_ctx *ctx, int argc, char **argv);
int cmd_pull(ctl_ctx *ctx, int argc, char **argv);

#endif
