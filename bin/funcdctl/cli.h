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

/* The -o formats a command prints, as a mask of (1 << ctl_output). */
#define CTL_OUT_BIT(o) (1u << (o))
#define CTL_OUTS_ALL 0x1fu
#define CTL_OUTS_OBJECTS                                                                        \
    (CTL_OUT_BIT(CTL_OUT_TABLE) | CTL_OUT_BIT(CTL_OUT_JSON) | CTL_OUT_BIT(CTL_OUT_YAML) |        \
     CTL_OUT_BIT(CTL_OUT_NAME))

typedef struct ctl_ctx {
    const char *server;
    int server_explicit; /* --server or FUNCD_SERVER was given */
    const char *token;
    const char *cacert; /* --cacert or FUNCD_CACERT: the CA file of an https server */
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
    unsigned outputs;    /* the -o formats it prints (CTL_OUT_BIT); others are refused */
};

/* Whether argv[i] ends the flags ("--"): sets *only and returns 1. Every
 * command's parser calls it first and, once *only is set, takes every
 * argument as an operand. */
int ctl_end_of_flags(const char *arg, int *only);

/* Whether `arg` is to be read as a flag: not after "--", starts with '-'
 * and is more than "-". */
int ctl_is_flag(const char *arg, int only);

/* An operand naming objects: "KIND/NAME", or NAME with `kind` known. */
typedef struct ctl_ref {
    const funcd_kind *kind;
    const char *name;
} ctl_ref;

/*
 * Reads the operands of get/delete/describe: `KIND NAME...`, `KIND`, or
 * `KIND/NAME...` (kinds may differ; what `-o name` prints). *refs gets one
 * entry per name (malloc()ed, caller frees), *kind the KIND of the first
 * form (NULL for KIND/NAME). Usage error printed on a bad operand.
 */
int ctl_parse_refs(const ctl_ctx *ctx, int nargs, char **args, const funcd_kind **kind,
                   ctl_ref **refs, int *nrefs);

/* The data plane's base URL: `flag` (--data-plane), FUNCD_DATA_PLANE, or
 * what /version reports. malloc()ed; NULL with the message printed, unless
 * `quiet` (then NULL silently). */
char *ctl_data_plane_url(ctl_ctx *ctx, const char *flag, int quiet);

/* The dispatch table (for completion). */
const ctl_command *ctl_commands(size_t *n);

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
/* get nodes [NAME] (cmd_get_nodes.c). */
int ctl_is_nodes(const char *word);
int ctl_get_nodes(ctl_ctx *ctx, const char *name);
/* workflow run, get workflowruns [ID], describe workflowrun ID (cmd_workflow.c). */
int cmd_workflow(ctl_ctx *ctx, int argc, char **argv);
int ctl_is_workflowruns(const char *word);
int ctl_get_workflowruns(ctl_ctx *ctx, const char *id);
int ctl_describe_workflowrun(ctl_ctx *ctx, const char *id);
/* get invocations [ID] and dlq list|replay|purge (cmd_async.c). */
int ctl_is_invocations(const char *word);
int ctl_get_invocations(ctl_ctx *ctx, const char *id);
int cmd_dlq(ctl_ctx *ctx, int argc, char **argv);
int cmd_delete(ctl_ctx *ctx, int argc, char **argv);
int cmd_describe(ctl_ctx *ctx, int argc, char **argv);
int cmd_watch(ctl_ctx *ctx, int argc, char **argv);
int cmd_version(ctl_ctx *ctx, int argc, char **argv);
int cmd_deploy(ctl_ctx *ctx, int argc, char **argv);
int cmd_deploy_site(ctl_ctx *ctx, int argc, char **argv);
int cmd_invoke(ctl_ctx *ctx, int argc, char **argv);
int cmd_logs(ctl_ctx *ctx, int argc, char **argv);
int cmd_fn(ctl_ctx *ctx, int argc, char **argv);
int cmd_pull(ctl_ctx *ctx, int argc, char **argv);
int cmd_scale(ctl_ctx *ctx, int argc, char **argv);
int cmd_s3_credentials(ctl_ctx *ctx, int argc, char **argv);
int cmd_create(ctl_ctx *ctx, int argc, char **argv);
int cmd_completion(ctl_ctx *ctx, int argc, char **argv);

#endif
