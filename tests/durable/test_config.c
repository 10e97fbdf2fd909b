/*
 * `funcd --config FILE`: a YAML mapping of long flag names to values
 * (scalars, lists for repeatable flags, booleans for switches) starts funcd
 * exactly as the same flags would; command-line flags win over the file; a
 * bad file makes funcd exit 2 with a message that names the line or key.
 */
#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include "../e2e/client.h"
#include "../e2e/env.h"
#include "../harness.h"
#include "daemon.h"
#include "util/misc.h"

typedef struct cfg_test {
    char dir[256], file[300], log[300];
    dd_daemon d;
    e2e_resp r;
} cfg_test;

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "we");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

/* The announcement: the log's lines up to the function runner's address, with the
 * ports picked left out, joined. */
static void announce_of(const char *log, char *out, size_t len)
{
    FILE *f = fopen(log, "re");
    char line[1024];
    out[0] = '\0';
    size_t n = 0;
    while (f && fgets(line, sizeof(line), f)) {
        char *at = strstr(line, "listening on ");
        int last = strstr(line, "function runner listening on ") != NULL;
        if (at)
            strcpy(at, "listening\n");
        n += (size_t)snprintf(out + n, n < len ? len - n : 0, "%s", line);
        /* What follows comes from the loop as it runs (the cluster lease,
         * the delivery queue), in an order of its own: not the announcement. */
        if (last)
            break;
    }
    if (f)
        fclose(f);
}

/* Starts funcd with `args`, checks it answers as a --dev daemon, stops it
 * and returns its announcement in `announce`. */
static void start_and_probe(cfg_test *t, const char *const *args, long want_list, char *announce,
                            size_t len)
{
    if (dd_start(&t->d, t->log, args) < 0)
        FAILF("funcd did not start");
    e2e_http *h = e2e_http_new(t->d.cp);
    long st = h ? e2e_http_do(h, "GET", DD_NS "/functions", DD_TOKEN, NULL, &t->r) : 0;
    e2e_http_free(h);
    dd_kill9(&t->d);
    announce_of(t->log, announce, len);
    CHECK_INT(st, want_list);
}

static const char good_config[] =
    "# every kind of value a config file takes\n"
    "memory: true\n"
    "listen: \"256.0.0.1:99999\"   # overridden on the command line\n"
    "data-plane-listen: 127.0.0.1:0\n"
    "fn-runner-listen: '127.0.0.1:0'\n"
    "dev: yes\n"
    "no-sandbox: true\n"
    "registry-auth-file: /nonexistent/auth.json\n"
    "insecure-registry:\n"
    "  - 127.0.0.1:5000\n"
    "  - localhost:5001\n"
    "shutdown-grace: 2s\n"
    "tag-refresh: 10m\n"
    "fn-runner-max-message: 1048576\n"
    "log-level: info\n";

TEST(config_file_equals_flags)
{
    cfg_test t = {.r = E2E_RESP_INIT};
    if (dd_tempdir(t.dir, sizeof(t.dir), "config") < 0)
        FAILF("mkdtemp: %s", strerror(errno));
    snprintf(t.file, sizeof(t.file), "%s/funcd.yaml", t.dir);
    snprintf(t.log, sizeof(t.log), "%s/funcd.log", t.dir);
    static char from_file[8192], from_flags[8192];
    const char *file_args[] = {"--config", t.file, "--listen", "127.0.0.1:0", NULL};
    const char *flag_args[] = {"--memory", "--listen", "127.0.0.1:0", "--data-plane-listen",
                               "127.0.0.1:0", "--fn-runner-listen", "127.0.0.1:0", "--dev",
                               "--no-sandbox", "--registry-auth-file", "/nonexistent/auth.json",
                               "--insecure-registry", "127.0.0.1:5000", "--insecure-registry",
                               "localhost:5001", "--shutdown-grace", "2s", "--tag-refresh", "10m",
                               "--fn-runner-max-message", "1048576", "--log-level", "info", NULL};
    if (write_file(t.file, good_config) == 0) {
        start_and_probe(&t, file_args, 200, from_file, sizeof(from_file));
        if (!harness_failed_now)
            start_and_probe(&t, flag_args, 200, from_flags, sizeof(from_flags));
        if (!harness_failed_now && strcmp(from_file, from_flags) != 0)
            FAILF("started differently:\n--- config file:\n%s--- flags:\n%s", from_file,
                  from_flags);
        if (!harness_failed_now)
            CHECK_CONTAINS(from_file, "--no-sandbox");
    } else {
        harness_failed_now = 1;
    }
    /* `false` leaves a switch off: no dev token, so 401. */
    if (!harness_failed_now &&
        write_file(t.file, "memory: on\ndev: false\nlisten: 127.0.0.1:0\n"
                           "data-plane-listen: 127.0.0.1:0\nfn-runner-listen: 127.0.0.1:0\n") == 0) {
        const char *args[] = {"--config", t.file, NULL};
        start_and_probe(&t, args, 401, from_file, sizeof(from_file));
    }
    dd_kill9(&t.d);
    e2e_resp_free(&t.r);
    funcd_remove_tree(t.dir);
}

typedef struct bad_case {
    const char *what, *yaml, *expect;
} bad_case;

TEST(bad_config_files_exit_2_naming_the_problem)
{
    static const bad_case cases[] = {
        {"not a mapping", "- memory\n- dev\n", "mapping"},
        {"unknown flag", "memory: true\nbogus-flag: 1\n", "bogus-flag"},
        {"bad duration", "memory: true\nshutdown-grace: forever\n", "shutdown-grace"},
        {"bad byte count", "memory: true\nimage-cache-size: lots\n", "image-cache-size"},
        {"negative blob cap", "memory: true\nimage-blob-cache-bytes: -1\n",
         "image-blob-cache-bytes"},
        {"not YAML", "memory: true\nlisten: [127.0.0.1:0\n", "line"},
        {"bad key", "memory: true\nData_Dir: /tmp/x\n", "line 2"},
        {"nested value", "memory: true\nlisten: {host: x}\n", "listen"},
        {"empty value", "memory: true\nlisten: \"\"\n", "listen"},
        {"names another config", "memory: true\nconfig: /etc/funcd.yaml\n", "another"},
    };
    char dir[256], file[300], log[300];
    if (dd_tempdir(dir, sizeof(dir), "badconfig") < 0)
        FAILF("mkdtemp: %s", strerror(errno));
    snprintf(file, sizeof(file), "%s/bad.yaml", dir);
    snprintf(log, sizeof(log), "%s/funcd.log", dir);
    const char *args[] = {"--config", file, "--listen", "127.0.0.1:0", "--data-plane-listen",
                          "127.0.0.1:0", "--fn-runner-listen", "127.0.0.1:0", NULL};
    int bad = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const bad_case *c = &cases[i];
        int rc = write_file(file, c->yaml) == 0 ? dd_run(log, args, 10000) : -2;
        if (rc != 2 || !dd_log_has(log, c->expect)) {
            fprintf(stderr, "  %s: exit %d, want 2 and a message with \"%s\"\n", c->what, rc,
                    c->expect);
            dd_daemon d = {0};
            snprintf(d.log, sizeof(d.log), "%s", log);
            dd_dump_log(&d);
            bad = 1;
        }
    }
    const char *missing[] = {"--config", "/nonexistent/funcd.yaml", NULL};
    int rc = dd_run(log, missing, 10000);
    if (rc != 2 || !dd_log_has(log, "/nonexistent/funcd.yaml")) {
        fprintf(stderr, "  missing file: exit %d\n", rc);
        bad = 1;
    }
    funcd_remove_tree(dir);
    CHECK(!bad);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    e2e_client_global_init();
    RUN(config_file_equals_flags);
    RUN(bad_config_files_exit_2_naming_the_problem);
    e2e_client_global_cleanup();
    return HARNESS_END();
}
