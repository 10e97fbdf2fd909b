/*
 * funcdctl: the operator's command-line client for funcd's control plane.
 *
 * main() takes the global flags out of argv wherever they appear (as kubectl
 * does), picks the command from the dispatch table and hands it the rest.
 * Adding a command is one row below and one cmd_NAME.c.
 */
#include <curl/curl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "funcd/funcd.h"
#include "util/buf.h"

#define DEFAULT_SERVER "http://127.0.0.1:8080"
#define DEFAULT_NAMESPACE "default"

#define OUT(o) CTL_OUT_BIT(CTL_OUT_##o)

static const ctl_command commands[] = {
    {"apply", cmd_apply, "Create or update objects from a YAML or JSON file",
     "apply -f FILE|-",
     "  -f, --filename FILE   file to read; - reads standard input. YAML (multi-document,\n"
     "                        \"---\") or JSON (an object, an array, or a List).\n"
     "Each object is created if missing, replaced if it differs, and reported as\n"
     "KIND/NAME created|configured|unchanged. -o name|json|yaml prints the results.\n"
     "Example: funcdctl apply -f hello.yaml\n",
     CTL_OUTS_OBJECTS},
    {"get", cmd_get, "List objects of a kind, or show some",
     "get KIND [NAME...] | get KIND/NAME... | get images [REF] | get nodes [NAME] |\n"
     "                  get workflowruns [ID] | get invocations [ID]",
     "  -l, --selector SEL      only objects whose labels match: k=v, k!=v, k, !k (comma: and)\n"
     "  -A, --all-namespaces    list every namespace your token may read\n"
     "  -w, --watch             after the list, print a row per change until Ctrl-C\n"
     "  --show-labels           add a LABELS column\n"
     "  -o table (default), wide, json, yaml or name. wide adds a Function's URL.\n"
     "`get images` lists the server's image metadata cache (DIGEST, REF, SIZE, PULLED;\n"
     "wide adds PLATFORM, LAYERS, ENTRYPOINT); REF picks images by reference or digest.\n"
     "`get nodes` lists the funcd nodes sharing the server's store (NAME, ADDRESS, AGE,\n"
     "READY, WORKERS, LEADER).\n"
     "`get workflowruns` lists the runs of the namespace's Workflows (NAME, WORKFLOW,\n"
     "PHASE, DURATION, AGE).\n"
     "`get invocations` lists the namespace's async invocations (NAME, FUNCTION, STATE,\n"
     "ATTEMPTS, CODE, AGE); with an ID it also prints the function's answer.\n"
     "Examples: funcdctl get functions\n"
     "          funcdctl get fn hello -o yaml\n"
     "          funcdctl get fn -l app=hello --show-labels\n"
     "          funcdctl get $(funcdctl get fn -o name)\n"
     "          funcdctl get images\n"
     "          funcdctl get nodes\n",
     CTL_OUTS_ALL},
    {"delete", cmd_delete, "Delete objects by name, by label, or as a file names them",
     "delete KIND NAME... | delete KIND/NAME... | delete KIND -l SEL | delete -f FILE|-",
     "  -f, --filename FILE     delete every object the file names\n"
     "  -l, --selector SEL      delete the objects of KIND whose labels match\n"
     "  --ignore-not-found      an object that does not exist is not an error\n"
     "Example: funcdctl delete fn hello\n"
     "         funcdctl delete $(funcdctl get fn -l app=hello -o name)\n",
     OUT(TABLE) | OUT(NAME)},
    {"describe", cmd_describe, "Show objects in detail, with their conditions",
     "describe KIND NAME... | describe KIND/NAME... | describe workflowrun ID",
     "A Function shows its URL on the data plane; a workflow run, the tree of its steps\n"
     "with their state, attempts and duration.\n"
     "Example: funcdctl describe function hello\n",
     CTL_OUTS_OBJECTS},
    {"watch", cmd_watch, "Stream changes to the objects of a kind",
     "watch KIND [--resource-version N] [-l SEL] [-A]",
     "Prints one row per event (ADDED, MODIFIED, DELETED) until the server closes\n"
     "the stream or you press Ctrl-C. -o json prints the raw events (NDJSON).\n"
     "  --resource-version N   start after revision N\n"
     "  -l, --selector SEL     only objects whose labels match\n"
     "  -A, --all-namespaces   every namespace (admin, or a token for \"*\")\n"
     "Example: funcdctl watch functions\n",
     CTL_OUTS_ALL},
    {"deploy", cmd_deploy, "Upload a directory, or name an image, and run it as a Function",
     "deploy DIR --name NAME --runtime RUNTIME [flags] | "
     "deploy --image IMAGE --name NAME [flags]",
     "Packs DIR (regular files and directories; symlinks and .git left out) into a\n"
     "tar.gz, uploads it as a bundle, creates or updates Function NAME to run it, and\n"
     "waits until it is Ready. With --image instead of DIR, has the server pull IMAGE\n"
     "first (showing its progress) and runs the image. An existing Function keeps\n"
     "every field these flags do not set (env, labels and resources are merged).\n"
     "  --name NAME             the Function (required)\n"
     "  --runtime RUNTIME       native, python3 or node (required with DIR; --image: native)\n"
     "  --image IMAGE           an OCI image (registry/repo:tag and/or @sha256:digest)\n"
     "  --pull-secret NAME      a dockerconfigjson Secret for the registry (repeatable)\n"
     "  --handler H             python3 module.function, node file.js#export, native program\n"
     "                          (in an image: the program to run instead of its entrypoint)\n"
     "  --mode http|exec        exec: one process per request (default http)\n"
     "  -e, --env K=V           environment variable (repeatable)\n"
     "  --label K=V             a label of the Function (repeatable)\n"
     "  --min N, --max N        replicas kept warm / at most\n"
     "  --concurrency N         requests one replica serves at once\n"
     "  --queue N               requests that may wait for a replica\n"
     "  --idle-timeout DURATION an idle replica stops after it (0: never)\n"
     "  --timeout DURATION      per request, e.g. 30s\n"
     "  --memory Q, --cpu Q, --pids N   limits per replica (256Mi, 500m, 128)\n"
     "  --no-wait               return once the Function is written\n"
     "  --wait-timeout DURATION how long to wait for Ready (default 60s)\n"
     "Examples: funcdctl deploy ./hello --name hello --runtime python3 --handler main.handler\n"
     "          funcdctl deploy --image registry.example.com/team/hello:v1 --name hello\n",
     CTL_OUTS_OBJECTS},
    {"deploy-site", cmd_deploy_site, "Upload a directory and serve it as a static Site",
     "deploy-site DIR --name NAME [flags]",
     "Packs DIR (regular files and directories; symlinks and .git left out) into a\n"
     "tar.gz, uploads it as a bundle, creates or updates Site NAME to serve it, and\n"
     "waits until it is Ready. An existing Site keeps every field these flags do not\n"
     "set. The files are then at /site/NAMESPACE/NAME/ on the data plane.\n"
     "  --name NAME             the Site (required)\n"
     "  --index FILE            served for a directory (default: the server's, index.html)\n"
     "  --not-found FILE        served with 404 for a path that is no file\n"
     "  --spa, --no-spa         unknown paths without an extension get the index\n"
     "  --host NAME             serve the site at / on this Host (repeatable)\n"
     "  --cache-control VALUE   the Cache-Control header of every file\n"
     "  --no-wait               return once the Site is written\n"
     "  --wait-timeout DURATION how long to wait for Ready (default 60s)\n"
     "Example: funcdctl deploy-site ./public --name docs --spa --host docs.example.com\n",
     CTL_OUTS_OBJECTS},
    {"scale", cmd_scale, "Set a Function's minimum and maximum replicas",
     "scale [fn] NAME|fn/NAME [--replicas N] [--min N] [--max N]",
     "  --replicas N            exactly N: minReplicas and maxReplicas both N\n"
     "  --min N, --max N        spec.scaling.minReplicas / maxReplicas\n"
     "Example: funcdctl scale hello --min 1 --max 4\n",
     CTL_OUTS_OBJECTS},
    {"s3-credentials", cmd_s3_credentials, "Print a Function's S3 access key (admins)",
     "s3-credentials NAME",
     "The key the Function's workers get for the S3 gateway (docs/s3.md), as shell\n"
     "exports (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION and, with\n"
     "--s3-listen, AWS_ENDPOINT_URL); -o json|yaml prints the server's object.\n"
     "Example: eval \"$(funcdctl s3-credentials thumbnails)\"\n"
     "         aws --endpoint-url \"$AWS_ENDPOINT_URL\" s3 ls s3://photos/in/\n",
     OUT(TABLE) | OUT(JSON) | OUT(YAML)},
    {"create", cmd_create, "Create a Secret from literals and files",
     "create secret generic NAME [--from-literal=K=V]... [--from-file=[K=]PATH]... [--type T]",
     "  --from-literal K=V      a key and its value (repeatable)\n"
     "  --from-file [K=]PATH    a key (default: the file's name) and the file's bytes\n"
     "  --type T                the Secret's type (default Opaque)\n"
     "Fails if the Secret exists (use apply to change one).\n"
     "Example: funcdctl create secret generic db --from-literal=user=app --from-file=./pw\n",
     CTL_OUTS_OBJECTS},
    {"pull", cmd_pull, "Have the server pull an image into its cache",
     "pull IMAGE [--pull-secret NAME]...",
     "Starts the pull on the server and shows its progress on stderr: a bar on a\n"
     "terminal, a line per quarter otherwise. Prints \"pulled IMAGE DIGEST\" when done\n"
     "(-o name: the digest; -o json|yaml: the pull's final state).\n"
     "  --pull-secret NAME      a dockerconfigjson Secret for the registry (repeatable)\n"
     "Example: funcdctl pull registry.example.com/team/hello:v1\n",
     CTL_OUTS_OBJECTS},
    {"workflow", cmd_workflow, "Start a run of a Workflow",
     "workflow run NAME [-d JSON|@FILE|@-] [--wait [--timeout DURATION]]",
     "  -d, --data DATA         the run's input (JSON); @FILE reads a file, @- stdin\n"
     "  --wait                  wait until the run finishes and print its output; exit\n"
     "                          status 1 unless it Succeeded\n"
     "  --timeout DURATION      with --wait: give up waiting after this long\n"
     "Without --wait prints workflowrun/ID created (see `get workflowruns`, `describe\n"
     "workflowrun ID`).\n"
     "Example: funcdctl workflow run order -d '{\"id\": \"A-17\"}' --wait\n",
     OUT(TABLE) | OUT(JSON) | OUT(YAML)},
    {"invoke", cmd_invoke, "Send a request to a Function and print the answer",
     "invoke NAME [-d DATA|@FILE|@-] [--path P] [-X METHOD] [-H 'K: V']... [-i] "
     "[--async [--callback-url URL]]",
     "  -d, --data DATA         request body (POST unless -X); @FILE reads a file, @- stdin\n"
     "  --path P                path after the function's URL, with any ?query\n"
     "  -X, --request METHOD    HTTP method (default GET, or POST with -d)\n"
     "  -H, --header 'K: V'     request header (repeatable)\n"
     "  -i, --include           print the status line and headers on stderr\n"
     "  --async                 queue it (/async/fn/...): print the invocation id and\n"
     "                          return; `funcdctl get invocations ID` shows the result\n"
     "  --callback-url URL      with --async: the result is POSTed there when done\n"
     "  --data-plane URL        the data plane (env FUNCD_DATA_PLANE; default: what\n"
     "                          the control plane's /version reports)\n"
     "The answer's body goes to stdout, as it came (-o is refused).\n"
     "Exit status 1 unless the answer is 2xx.\n"
     "Example: funcdctl invoke hello -d '{\"name\":\"world\"}'\n",
     OUT(TABLE)},
    {"dlq", cmd_dlq, "List, replay or purge the dead-letter queue",
     "dlq list | dlq replay ID... | dlq purge ID...|--all",
     "Async invocations and events whose every attempt failed (docs/eventing.md).\n"
     "  list                    NAME, FUNCTION, ORIGIN, ATTEMPTS, CODE (the last\n"
     "                          status), ERROR, AGE; -o json|yaml|name\n"
     "  replay ID...            queue each again as a Pending invocation (attempts\n"
     "                          from zero); it leaves the dead-letter queue\n"
     "  purge ID... | --all     delete them\n"
     "Examples: funcdctl dlq list\n"
     "          funcdctl dlq replay 3f0c...\n",
     CTL_OUTS_OBJECTS},
    {"logs", cmd_logs, "Print a Function's logs",
     "logs NAME [-f] [--tail N] [--since DURATION] [--invocation ID] [--show-node]",
     "  -f, --follow            keep printing new records until Ctrl-C\n"
     "  --tail N                start with the last N records\n"
     "  --since DURATION        only records from the last DURATION (90s, 5m, 2h)\n"
     "  --invocation ID         only the records of one request (X-Funcd-Invocation-Id)\n"
     "  --show-node             print the node that read each line (TIME NODE REPLICA ...)\n"
     "Records are kept in the blob store (docs/logs.md), so they outlive restarts; in a\n"
     "cluster every node's are merged by time. Each prints as \"TIME REPLICA SEVERITY\n"
     "BODY\", followed by a multi-line attribute (a traceback, a stack) indented below\n"
     "it; -o json prints the raw records.\n"
     "Example: funcdctl logs hello -f --tail 20\n",
     OUT(TABLE) | OUT(JSON)},
    {"fn", cmd_fn, "Evaluate a KRM function on the function runner",
     "fn eval IMAGE [-f FILE|-] [--exec PATH] [--runner ADDR] [--timeout 30s]",
     "Sends the ResourceList in FILE (YAML or JSON; - or no -f: standard input) to\n"
     "the function runner's EvaluateFunction, as a Porch server would, and prints\n"
     "the ResourceList that comes back on stdout, the function's log and its\n"
     "results on stderr.\n"
     "  -f, --filename FILE     the ResourceList to send\n"
     "  --exec PATH             run this executable (under the runner's --functions-dir)\n"
     "                          instead of resolving IMAGE; IMAGE may then be left out\n"
     "  --runner ADDR           the runner (env FUNCD_FN_RUNNER; default: what the\n"
     "                          control plane's /version reports, else 127.0.0.1:9445\n"
     "                          when --server and FUNCD_SERVER are not set)\n"
     "  --timeout DURATION      sent as grpc-timeout (default 30s; 0: none)\n"
     "Exit status 1 when the call fails (\"funcdctl: error: MESSAGE (STATUS)\") or a\n"
     "result has severity error.\n"
     "Example: funcdctl fn eval set-namespace -f examples/krm/resources.yaml\n",
     OUT(TABLE)},
    {"completion", cmd_completion, "Print a shell completion script", "completion bash|zsh",
     "Examples: source <(funcdctl completion bash)\n"
     "          funcdctl completion zsh > \"${fpath[1]}/_funcdctl\"\n",
     OUT(TABLE)},
    {"version", cmd_version, "Print the client and server versions", "version",
     "-o json|yaml prints both. `funcdctl --version` prints the client's alone.\n",
     OUT(TABLE) | OUT(JSON) | OUT(YAML)},
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

const ctl_command *ctl_commands(size_t *n)
{
    *n = NCOMMANDS;
    return commands;
}

static const ctl_command *find_command(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (!strcmp(commands[i].name, name))
            return &commands[i];
    return NULL;
}

static void print_kinds(FILE *out)
{
    fputs("Kinds (singular, plural, short name or Kind; any case):", out);
    for (size_t i = 0; funcd_kinds[i]; i++) {
        fprintf(out, "%s %s", i ? "," : "", funcd_kinds[i]->singular);
        if (funcd_kinds[i]->short_name)
            fprintf(out, " (%s)", funcd_kinds[i]->short_name);
    }
    fputc('\n', out);
}

static void print_global_flags(FILE *out)
{
    fputs("Global flags (anywhere on the line):\n"
          "  --server URL           control plane (env FUNCD_SERVER; default " DEFAULT_SERVER ")\n"
          "  --token TOKEN          bearer token (env FUNCD_TOKEN)\n"
          "  --cacert FILE          the CA (or funcd's self-signed certificate) an https\n"
          "                         server must present a certificate of (env\n"
          "                         FUNCD_CACERT); a server without a scheme is then https\n"
          "  -n, --namespace NS     namespace (default \"" DEFAULT_NAMESPACE "\")\n"
          "  -o, --output FORMAT    table, wide, json, yaml or name (default table); each\n"
          "                         command says which it prints and refuses the others\n"
          "  -h, --help             this help; `funcdctl COMMAND --help` for a command\n"
          "  --version              print funcdctl's version\n"
          "  --                     ends the flags: what follows is an operand\n",
          out);
}

static void print_help(FILE *out)
{
    fputs("funcdctl " FUNCD_VERSION_STRING " - the command-line client of funcd\n\n"
          "Usage: funcdctl [global flags] COMMAND [args]\n\nCommands:\n",
          out);
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(out, "  %-11s %s\n", commands[i].name, commands[i].summary);
    fputc('\n', out);
    print_global_flags(out);
    fputc('\n', out);
    print_kinds(out);
    fputs("Exit status: 0 success, 1 error (from or reaching the server, or bad input),\n"
          "2 usage error. See docs/cli.md.\n",
          out);
}

static const char *const output_names[] = {"table", "wide", "json", "yaml", "name"};

/* "table, json or yaml": the -o formats `outputs` holds. */
static void outputs_text(unsigned outputs, char *buf, size_t len)
{
    size_t n = 0, at = 0, total = 0;
    for (size_t i = 0; i < 5; i++)
        total += (outputs & CTL_OUT_BIT(i)) != 0;
    buf[0] = '\0';
    for (size_t i = 0; i < 5 && at < len; i++) {
        if (!(outputs & CTL_OUT_BIT(i)))
            continue;
        n++;
        at += (size_t)snprintf(buf + at, len - at, "%s%s",
                               n == 1 ? "" : n == total ? " or " : ", ", output_names[i]);
    }
}

static void print_command_help(const ctl_command *cmd, FILE *out)
{
    char outs[64];
    outputs_text(cmd->outputs, outs, sizeof(outs));
    fprintf(out, "%s\n\nUsage: funcdctl %s\n", cmd->summary, cmd->usage);
    if (cmd->help)
        fprintf(out, "%s", cmd->help);
    fprintf(out, "Output (-o): %s.\n", outs);
    fputc('\n', out);
    print_global_flags(out);
    fputc('\n', out);
    print_kinds(out);
}

/* Whether ctl_status left a line without its newline on the terminal.
 * funcdctl is single-threaded; only the functions below touch it. */
static int status_shown;

void ctl_status(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("\r\033[K", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fflush(stderr);
    status_shown = 1;
}

void ctl_status_clear(void)
{
    if (status_shown)
        fputs("\r\033[K", stderr);
    status_shown = 0;
}

void ctl_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ctl_status_clear();
    fputs("funcdctl: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int ctl_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ctl_status_clear();
    fputs("funcdctl: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return CTL_EXIT_ERROR;
}

int ctl_usage(const ctl_ctx *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ctl_status_clear();
    fputs("funcdctl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (ctx && ctx->command)
        fprintf(stderr, "usage: funcdctl %s (see `funcdctl %s --help`)\n", ctx->command->usage,
                ctx->command->name);
    else
        fputs("usage: funcdctl [global flags] COMMAND [args] (see `funcdctl --help`)\n", stderr);
    return CTL_EXIT_USAGE;
}

const funcd_kind *ctl_kind_arg(const ctl_ctx *ctx, const char *name)
{
    const funcd_kind *kind = funcd_kind_lookup(name);
    if (kind)
        return kind;
    funcd_buf known = FUNCD_BUF_INIT;
    for (size_t i = 0; funcd_kinds[i]; i++) {
        funcd_buf_printf(&known, "%s%s", i ? ", " : "", funcd_kinds[i]->singular);
        if (funcd_kinds[i]->short_name)
            funcd_buf_printf(&known, " (%s)", funcd_kinds[i]->short_name);
    }
    ctl_usage(ctx, "unknown kind \"%s\": use one of %s", name, known.data ? known.data : "");
    funcd_buf_free(&known);
    return NULL;
}

int ctl_flag_value(const ctl_ctx *ctx, int argc, char **argv, int *i, const char *short_flag,
                   const char *long_flag, const char **value)
{
    const char *arg = argv[*i];
    size_t long_len = long_flag ? strlen(long_flag) : 0;
    if (long_flag && !strncmp(arg, long_flag, long_len) && arg[long_len] == '=') {
        *value = arg + long_len + 1;
        return 1;
    }
    if (short_flag && !strncmp(arg, short_flag, 2) && arg[2] != '\0' && arg[1] != '-') {
        *value = arg + 2 + (arg[2] == '=');
        return 1;
    }
    if (!(short_flag && !strcmp(arg, short_flag)) && !(long_flag && !strcmp(arg, long_flag)))
        return 0;
    if (*i + 1 >= argc) {
        ctl_usage(ctx, "flag %s needs a value", arg);
        return -1;
    }
    *value = argv[++*i];
    return 1;
}

/* The one flag signal handlers may touch; written only by on_stop_signal. */
static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

volatile sig_atomic_t *ctl_stop_on_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    return &stop_requested;
}

ctl_client *ctl_ctx_client(ctl_ctx *ctx)
{
    if (!ctx->client)
        ctl_client_new(&ctx->client, ctx->server, ctx->token, ctx->cacert);
    return ctx->client;
}

int ctl_end_of_flags(const char *arg, int *only)
{
    if (*only || strcmp(arg, "--") != 0)
        return 0;
    *only = 1;
    return 1;
}

int ctl_is_flag(const char *arg, int only)
{
    return !only && arg[0] == '-' && arg[1] != '\0';
}

static int add_ref(ctl_ref **refs, int *n, const funcd_kind *kind, const char *name)
{
    ctl_ref *grown = realloc(*refs, (size_t)(*n + 1) * sizeof(**refs));
    if (!grown)
        return ctl_fail("out of memory");
    *refs = grown;
    grown[(*n)++] = (ctl_ref){kind, name};
    return 0;
}

int ctl_parse_refs(const ctl_ctx *ctx, int nargs, char **args, const funcd_kind **kind,
                   ctl_ref **refs, int *nrefs)
{
    *kind = NULL;
    *refs = NULL;
    *nrefs = 0;
    int slashed = nargs > 0 && strchr(args[0], '/') != NULL;
    for (int i = 0; i < nargs; i++) {
        char *slash = strchr(args[i], '/');
        if (!slashed && i == 0) {
            if (!(*kind = ctl_kind_arg(ctx, args[0])))
                return CTL_EXIT_USAGE;
            continue;
        }
        if (!slashed && slash)
            return ctl_usage(ctx, "\"%s\": give KIND NAME... or KIND/NAME..., not both",
                             args[i]);
        if (slashed && !slash)
            return ctl_usage(ctx, "\"%s\" has no KIND/: give KIND/NAME for every object, "
                                  "or KIND NAME...",
                             args[i]);
        const funcd_kind *k = *kind;
        const char *name = args[i];
        if (slashed) {
            *slash = '\0'; /* argv is ours to cut */
            k = ctl_kind_arg(ctx, args[i]);
            *slash = '/';
            if (!k)
                return CTL_EXIT_USAGE;
            name = slash + 1;
        }
        if (!*name || strchr(name, '/'))
            return ctl_usage(ctx, "\"%s\" is not KIND/NAME", args[i]);
        if (add_ref(refs, nrefs, k, name) != 0)
            return CTL_EXIT_ERROR;
    }
    return 0;
}

static int parse_output(ctl_ctx *ctx, const char *value)
{
    const char *const *names = output_names;
    for (size_t i = 0; i < 5; i++)
        if (!strcasecmp(value, names[i])) {
            ctx->output = (ctl_output)i;
            return 0;
        }
    return ctl_usage(ctx, "unknown output format \"%s\": use -o table, wide, json, yaml or name",
                     value);
}

/* Global flags out of argv[1..] into ctx; everything else into rest[]. */
static int parse_globals(ctl_ctx *ctx, int argc, char **argv, char **rest, int *nrest,
                         int *help, int *version)
{
    const char *value;
    int r;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) {
            while (i < argc)
                rest[(*nrest)++] = argv[i++];
            break;
        }
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            *help = 1;
        } else if (!strcmp(argv[i], "--version")) {
            *version = 1;
        } else if ((r = ctl_flag_value(ctx, argc, argv, &i, NULL, "--server", &value)) != 0) {
            if (r < 0)
                return CTL_EXIT_USAGE;
            ctx->server = value;
            ctx->server_explicit = 1;
        } else if ((r = ctl_flag_value(ctx, argc, argv, &i, NULL, "--token", &value)) != 0) {
            if (r < 0)
                return CTL_EXIT_USAGE;
            ctx->token = value;
        } else if ((r = ctl_flag_value(ctx, argc, argv, &i, NULL, "--cacert", &value)) != 0) {
            if (r < 0)
                return CTL_EXIT_USAGE;
            ctx->cacert = value;
        } else if ((r = ctl_flag_value(ctx, argc, argv, &i, "-n", "--namespace", &value)) != 0) {
            if (r < 0)
                return CTL_EXIT_USAGE;
            if (!*value)
                return ctl_usage(ctx, "-n needs a namespace name");
            ctx->ns = value;
            ctx->ns_explicit = 1;
        } else if ((r = ctl_flag_value(ctx, argc, argv, &i, "-o", "--output", &value)) != 0) {
            if (r < 0 || parse_output(ctx, value) != 0)
                return CTL_EXIT_USAGE;
        } else {
            rest[(*nrest)++] = argv[i];
        }
    }
    return 0;
}

static int run(int argc, char **argv, ctl_ctx *ctx)
{
    char **rest = calloc((size_t)argc + 1, sizeof(*rest));
    int nrest = 0, help = 0, version = 0, rc;
    if (!rest)
        return ctl_fail("out of memory");
    rc = parse_globals(ctx, argc, argv, rest, &nrest, &help, &version);
    if (rc != 0)
        goto out;
    if (version && !help) {
        printf("funcdctl %s\n", FUNCD_VERSION_STRING);
        goto out;
    }
    if (nrest > 0 && !strcmp(rest[0], "help")) {
        help = 1;
        memmove(rest, rest + 1, (size_t)nrest-- * sizeof(*rest));
    }
    const ctl_command *cmd = nrest > 0 ? find_command(rest[0]) : NULL;
    if (help && (cmd || nrest == 0)) {
        if (cmd)
            print_command_help(cmd, stdout);
        else
            print_help(stdout);
        goto out;
    }
    if (nrest == 0) {
        rc = ctl_usage(ctx, "no command given");
        goto out;
    }
    if (!cmd) {
        rc = ctl_usage(ctx, "unknown %s \"%s\"", rest[0][0] == '-' ? "flag" : "command", rest[0]);
        goto out;
    }
    ctx->command = cmd;
    if (!(cmd->outputs & CTL_OUT_BIT(ctx->output))) {
        char outs[64];
        outputs_text(cmd->outputs, outs, sizeof(outs));
        rc = ctl_usage(ctx, "%s prints %s, not -o %s", cmd->name, outs,
                       output_names[ctx->output]);
        goto out;
    }
    rc = cmd->fn(ctx, nrest - 1, rest + 1);
out:
    free(rest);
    return rc;
}

int main(int argc, char **argv)
{
    const char *server = getenv("FUNCD_SERVER");
    ctl_ctx ctx = {
        .server = server && *server ? server : DEFAULT_SERVER,
        .server_explicit = server && *server,
        .token = getenv("FUNCD_TOKEN"),
        .cacert = getenv("FUNCD_CACERT"),
        .ns = DEFAULT_NAMESPACE,
    };
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return ctl_fail("cannot initialize libcurl");
    int rc = run(argc, argv, &ctx);
    ctl_client_free(ctx.client);
    curl_global_cleanup();
    fflush(stdout);
    return rc;
}
