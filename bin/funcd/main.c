/*
 * funcd — the daemon: parses flags, builds a platform, runs it until
 * SIGTERM or SIGINT.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "funcd/funcd.h"

static funcd_platform *running;

static void on_signal(int sig)
{
    (void)sig;
    funcd_platform_stop(running); /* async-signal-safe */
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: funcd --memory [options]\n"
            "\n"
            "  --memory                   keep everything in memory (lost on exit)\n"
            "  --data-dir DIR             durable substrate (not in this build yet)\n"
            "  --listen ADDR              control-plane API (default 127.0.0.1:8080)\n"
            "  --data-plane-listen ADDR   function traffic (default 127.0.0.1:8081)\n"
            "  --fn-runner-listen ADDR    function runner gRPC (default 127.0.0.1:9445)\n"
            "  --functions-dir DIR        where binaryExecutor paths and worker images resolve\n"
            "  --fn-runner-max-message N  largest gRPC message in bytes (default 6291456)\n"
            "  --token-file FILE          lines `token role namespace[,namespace...]`\n"
            "  --dev                      accept funcd-dev-token as developer of \"default\"\n"
            "  --shims DIR                where the runtime shims are (default: next to\n"
            "                             this binary in a build tree, else the installed ones)\n"
            "  --state-dir DIR            worker sockets and extracted bundles (default: a\n"
            "                             private directory under $TMPDIR, removed on exit)\n"
            "  --log-level LEVEL          debug, info, warn or error (default info)\n"
            "  --version                  print the version\n"
            "\n"
            "Port 0 picks a free port; the bound addresses are printed on start.\n");
}

typedef struct flags {
    int memory;
    const char *data_dir;
    const char *listen;
    const char *data_plane;
    const char *token_file;
    const char *shims;
    const char *state_dir;
    const char *fn_runner;
    const char *functions_dir;
    size_t fn_max;
    int dev;
    funcd_log_level level;
} flags;

static int parse_level(const char *s, funcd_log_level *out)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (funcd_log_level)i;
            return 0;
        }
    return -1;
}

static int parse_flags(int argc, char **argv, flags *f)
{
    enum { O_MEMORY = 256, O_DATA_DIR, O_LISTEN, O_DP, O_TOKENS, O_DEV, O_LEVEL, O_VERSION, O_LATER,
           O_SHIMS, O_STATE, O_FNRUN, O_FNDIR, O_FNMAX };
    static const struct option opts[] = {
        {"memory", no_argument, 0, O_MEMORY},
        {"data-dir", required_argument, 0, O_DATA_DIR},
        {"listen", required_argument, 0, O_LISTEN},
        {"data-plane-listen", required_argument, 0, O_DP},
        {"token-file", required_argument, 0, O_TOKENS},
        {"dev", no_argument, 0, O_DEV},
        {"shims", required_argument, 0, O_SHIMS},
        {"state-dir", required_argument, 0, O_STATE},
        {"log-level", required_argument, 0, O_LEVEL},
        {"version", no_argument, 0, O_VERSION},
        {"fn-runner-listen", required_argument, 0, O_FNRUN},
        {"functions-dir", required_argument, 0, O_FNDIR},
        {"fn-runner-max-message", required_argument, 0, O_FNMAX},
        {"registry-auth-file", required_argument, 0, O_LATER},
        {"registry-certs-dir", required_argument, 0, O_LATER},
        {"insecure-registry", required_argument, 0, O_LATER},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int c, idx = 0;
    while ((c = getopt_long(argc, argv, "h", opts, &idx)) != -1) {
        switch (c) {
        case O_MEMORY: f->memory = 1; break;
        case O_DATA_DIR: f->data_dir = optarg; break;
        case O_LISTEN: f->listen = optarg; break;
        case O_DP: f->data_plane = optarg; break;
        case O_TOKENS: f->token_file = optarg; break;
        case O_DEV: f->dev = 1; break;
        case O_SHIMS: f->shims = optarg; break;
        case O_FNRUN: f->fn_runner = optarg; break;
        case O_FNDIR: f->functions_dir = optarg; break;
        case O_FNMAX: {
            char *end;
            unsigned long long n = strtoull(optarg, &end, 10);
            if (*end || n < 1024 || n > (1ULL << 31)) {
                fprintf(stderr, "funcd: --fn-runner-max-message takes a byte count from 1024 "
                                "to 2147483648\n");
                return 2;
            }
            f->fn_max = (size_t)n;
            break;
        }
        case O_STATE: f->state_dir = optarg; break;
        case O_LEVEL:
            if (parse_level(optarg, &f->level) < 0) {
                fprintf(stderr, "funcd: --log-level must be debug, info, warn or error\n");
                return 2;
            }
            break;
        case O_VERSION: printf("funcd %s\n", funcd_version()); return 0;
        case O_LATER:
            fprintf(stderr, "funcd: --%s is not supported by this build yet\n", opts[idx].name);
            return 2;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "funcd: unexpected argument '%s' (see funcd --help)\n", argv[optind]);
        return 2;
    }
    if (f->data_dir) {
        fprintf(stderr, "funcd: --data-dir is not supported by this build yet; use --memory\n");
        return 2;
    }
    if (!f->memory) {
        fprintf(stderr, "funcd: choose a substrate: --memory (nothing survives a restart)\n");
        usage(stderr);
        return 2;
    }
    return -1;
}

/* In a build tree the shims sit in <build>/shims, two levels above this
 * binary (<build>/bin/funcd/funcd); use them when they are there. */
static const char *build_tree_shims(char *buf, size_t len)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return NULL;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return NULL;
    *slash = '\0';
    snprintf(buf, len, "%.4000s/../../shims", exe);
    char probe[4300];
    snprintf(probe, sizeof(probe), "%.4096s/funcd-exec", buf);
    return access(probe, X_OK) == 0 ? buf : NULL;
}

int main(int argc, char **argv)
{
    flags f = {.level = FUNCD_LOG_INFO};
    int rc = parse_flags(argc, argv, &f);
    if (rc >= 0)
        return rc;

    char shims_buf[4200];
    const char *shims = f.shims ? f.shims : getenv("FUNCD_SHIM_DIR");
    if (!shims)
        shims = build_tree_shims(shims_buf, sizeof(shims_buf));
    rc = funcd_platform_new(&running, funcd_in_memory(), funcd_without_auth_tokens(),
                            shims ? funcd_with_shim_dir(shims) : NULL,
                            f.state_dir ? funcd_with_state_dir(f.state_dir) : NULL,
                            funcd_with_fn_runner_addr(f.fn_runner ? f.fn_runner : "127.0.0.1:9445"),
                            f.functions_dir ? funcd_with_functions_dir(f.functions_dir) : NULL,
                            f.fn_max ? funcd_with_fn_runner_max_message(f.fn_max) : NULL,
                            funcd_with_listen_addr(f.listen ? f.listen : "127.0.0.1:8080"),
                            funcd_with_data_plane_addr(f.data_plane ? f.data_plane
                                                                    : "127.0.0.1:8081"),
                            f.dev ? funcd_with_dev_auth("funcd-dev-token", "default") : NULL,
                            f.token_file ? funcd_with_token_file(f.token_file) : NULL,
                            funcd_with_logger(NULL, f.level, NULL));
    if (rc < 0) {
        fprintf(stderr, "funcd: %s\n", funcd_error_last()->message);
        return 1;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    fprintf(stderr, "funcd: %s, memory substrate (nothing survives a restart)\n", funcd_version());
    if (f.dev)
        fprintf(stderr, "funcd: --dev: token funcd-dev-token is a developer of namespace "
                        "\"default\"; never use --dev in production\n");
    else if (!f.token_file)
        fprintf(stderr, "funcd: no credentials configured: every API call will get 401; "
                        "pass --token-file FILE or --dev\n");
    fprintf(stderr, "funcd: control plane listening on %s\n", funcd_platform_addr(running));
    fprintf(stderr, "funcd: data plane listening on %s\n", funcd_platform_data_plane_addr(running));
    fprintf(stderr, "funcd: function runner listening on %s\n", funcd_platform_fn_runner_addr(running));
    rc = funcd_platform_run(running);
    if (rc < 0)
        fprintf(stderr, "funcd: %s\n", funcd_error_last()->message);
    funcd_platform_free(running);
    fprintf(stderr, "funcd: stopped\n");
    return rc < 0 ? 1 : 0;
}
