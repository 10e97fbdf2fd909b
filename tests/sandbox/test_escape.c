/*
 * Escape tests (docs/security.md): a hostile function (hostile.c) tries
 * one way out of its sandbox per case. Each case runs twice, on a platform
 * of its own: with the sandbox (the default) the attempt must fail, and
 * with the sandbox off (funcd_with_sandbox(0)) its harmless probe must
 * succeed, which shows that the sandbox is what stopped it.
 *
 *   test_sandbox_escape [CASE]
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "harness.h"
#include "test_serving_common.h"
#include "util/misc.h"

#ifndef HOSTILE_BIN
#error "HOSTILE_BIN (the built hostile fixture) must be defined by the build"
#endif

#define FN_SPEC                                                                                    \
    "{\"runtime\":\"native\",\"handler\":\"hostile\",\"source\":{\"path\":\"%s\"},"              \
    "\"resources\":{\"pids\":64,\"memory\":\"64Mi\"},\"scaling\":{\"minReplicas\":1}}"

typedef struct attack_ctx {
    env *e;
    int sandboxed;
    char dir[256]; /* the function's artifact */
} attack_ctx;

static int copy(const char *from, const char *to, mode_t mode)
{
    FILE *in = fopen(from, "rbe"), *out = in ? fopen(to, "wbe") : NULL;
    char buf[65536];
    size_t n;
    int rc = in && out ? 0 : -1;
    while (rc == 0 && (n = fread(buf, 1, sizeof(buf), in)) > 0)
        if (fwrite(buf, 1, n, out) != n)
            rc = -1;
    if (in)
        fclose(in);
    if (out && fclose(out) != 0)
        rc = -1;
    return rc == 0 ? chmod(to, mode) : -1;
}

/* The artifact: the hostile worker, and a setuid-root copy of it. */
static int make_artifact(char *dir, size_t len)
{
    char path[512];
    if (sv_tempdir(dir, len) < 0)
        return -1;
    snprintf(path, sizeof(path), "%s/hostile", dir);
    if (copy(HOSTILE_BIN, path, 0755) < 0)
        return -1;
    snprintf(path, sizeof(path), "%s/suid", dir);
    return copy(HOSTILE_BIN, path, 04755);
}

/* GETs /fn/default/hostile<path>; 1 when it answered with "escaped": true,
 * 0 with false, -1 on another answer. */
static int attempt(env *e, const char *path_fmt, ...) __attribute__((format(printf, 2, 3)));

static int attempt(env *e, const char *path_fmt, ...)
{
    char path[600], rest[512];
    va_list ap;
    va_start(ap, path_fmt);
    vsnprintf(rest, sizeof(rest), path_fmt, ap);
    va_end(ap);
    snprintf(path, sizeof(path), DP_PATH("hostile") "%s", rest);
    long status = sv_invoke(e, "GET", path, NULL);
    const cJSON *esc = cJSON_GetObjectItemCaseSensitive(e->r.json, "escaped");
    fprintf(stderr, "    %s -> HTTP %ld %.300s\n", rest, status, e->r.body ? e->r.body : "");
    if (status != 200 || !cJSON_IsBool(esc))
        return -1;
    return cJSON_IsTrue(esc);
}

/* A process of the test's to aim at: it waits until killed. */
static pid_t sentinel(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        /* Not the platform's sockets and pipes: they would outlive it. */
        syscall(SYS_close_range, 3, ~0U, 0);
        for (;;)
            pause();
    }
    return pid;
}

static void end_sentinel(pid_t pid)
{
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
}

static int api_port(const env *e)
{
    const char *colon = strrchr(e->base, ':');
    return colon ? atoi(colon + 1) : 0;
}

/* ---- the attacks ----------------------------------------------------------- */

static void read_host_file_attack(attack_ctx *c)
{
    char secret_dir[256], secret[512];
    CHECK(sv_tempdir(secret_dir, sizeof(secret_dir)) == 0);
    snprintf(secret, sizeof(secret), "%s/secret", secret_dir);
    FILE *f = fopen(secret, "w");
    CHECK(f != NULL);
    fputs("the daemon's data", f);
    fclose(f);
    CHECK_INT(attempt(c->e, "/read?path=%s", secret), !c->sandboxed);
    if (c->sandboxed) /* nor anything else of the host's */
        CHECK_INT(attempt(c->e, "/read?path=/etc/shadow"), 0);
}

/* Issue 11: the function's own source directory (spec.source.path, named by
 * admin) holds a file only host root may read, as the daemon's token file
 * was in the report. The worker is not root inside its namespace, and a
 * host path is not idmapped: it reads only what an unprivileged user may. */
static void read_root_file_in_source_attack(attack_ctx *c)
{
    char secret[512];
    snprintf(secret, sizeof(secret), "%s/tokens", c->dir);
    FILE *f = fopen(secret, "w");
    CHECK(f != NULL);
    fputs("admin-token admin", f);
    fclose(f);
    CHECK_INT(chown(secret, 0, 0), 0);
    CHECK_INT(chmod(secret, 0600), 0);
    CHECK_INT(attempt(c->e, "/read?path=%s", secret), !c->sandboxed);
    if (!c->sandboxed)
        return;
    CHECK_CONTAINS(c->e->r.body, "Permission denied");
    /* Nor as the worker's own uid 0 inside: it has none. */
    CHECK_INT(attempt(c->e, "/whoami"), 0);
    CHECK_CONTAINS(c->e->r.body, "uid=1000 ");
}

static void connect_control_plane_attack(attack_ctx *c)
{
    CHECK_INT(attempt(c->e, "/connect?port=%d", api_port(c->e)), !c->sandboxed);
}

static void ptrace_other_attack(attack_ctx *c)
{
    pid_t victim = sentinel();
    CHECK(victim > 0);
    int r = attempt(c->e, "/ptrace?pid=%ld", (long)victim);
    end_sentinel(victim);
    CHECK_INT(r, !c->sandboxed);
}

static void mount_fs_attack(attack_ctx *c)
{
    CHECK_INT(attempt(c->e, "/mount"), !c->sandboxed);
}

static void raw_socket_attack(attack_ctx *c)
{
    CHECK_INT(attempt(c->e, "/raw"), !c->sandboxed);
}

static void kill_everything_attack(attack_ctx *c)
{
    pid_t victim = sentinel();
    CHECK(victim > 0);
    int r = attempt(c->e, "/kill?pid=%ld", (long)victim);
    int alive = kill(victim, 0) == 0;
    end_sentinel(victim);
    CHECK_INT(r, !c->sandboxed);
    CHECK(alive);
    /* The worker survived its own kill -9 -1 and still serves. */
    CHECK_INT(attempt(c->e, "/whoami"), 0);
}

static void fork_bomb_attack(attack_ctx *c)
{
    /* spec.resources.pids is 64: the sandbox stops the loop there. */
    CHECK_INT(attempt(c->e, "/fork?n=%d", c->sandboxed ? 2000 : 200), !c->sandboxed);
    if (c->sandboxed)
        CHECK_CONTAINS(c->e->r.body, "Resource temporarily unavailable");
    CHECK_INT(attempt(c->e, "/whoami"), 0);
}

static int oom_in_status(env *e, void *arg)
{
    env_req(e, "GET", FN_PATH("hostile"), DEV_TOKEN, NULL);
    const cJSON *cond = sv_ready_condition(e->r.json);
    const char *msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cond, "message"));
    return msg && strstr(msg, "OOMKilled") != NULL;
}

static void memory_hog_attack(attack_ctx *c)
{
    if (!c->sandboxed) { /* a bounded allocation the limit would have stopped */
        CHECK_INT(attempt(c->e, "/hog?mb=96"), 1);
        return;
    }
    long status = sv_invoke(c->e, "GET", DP_PATH("hostile") "/hog?mb=512", NULL);
    fprintf(stderr, "    /hog?mb=512 -> HTTP %ld %.300s\n", status, c->e->r.body);
    CHECK_INT(status, 502);
    /* The caller is told why: a Status with reason OOMKilled, naming the
     * replica and the limit, not a host path. */
    CHECK_STR(jstr(c->e->r.json, "reason"), "OOMKilled");
    CHECK_CONTAINS(jstr(c->e->r.json, "message"), "was OOMKilled");
    CHECK(!strstr(jstr(c->e->r.json, "message"), c->dir));
    if (!env_poll(c->e, 5000, oom_in_status, NULL))
        FAILF("the Function's status does not say OOMKilled: %.800s", c->e->r.body);
    /* Replaced: the next request is served by a new worker. */
    CHECK_INT(attempt(c->e, "/whoami"), 0);
}

static void write_artifact_attack(attack_ctx *c)
{
    CHECK_INT(attempt(c->e, "/write?dir=%s", c->dir), !c->sandboxed);
    if (c->sandboxed)
        CHECK_CONTAINS(c->e->r.body, "Read-only file system");
}

static void setuid_binary_attack(attack_ctx *c)
{
    CHECK_INT(attempt(c->e, "/setuid?path=%s/suid", c->dir), !c->sandboxed);
}

/* ---- cases ------------------------------------------------------------------- */

/* The platform's instance id, set through its state directory. */
static char instance[32];

/* funcd-<instance>-* directories under this process's own cgroups. */
static int own_cgroup_dirs(void)
{
    static const char *const ctls[] = {"memory", "pids", "cpu"};
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "funcd-%s-", instance);
    int n = 0;
    for (size_t i = 0; i < 3; i++) {
        FILE *f = fopen("/proc/self/cgroup", "re");
        char line[512], path[700] = "";
        while (f && fgets(line, sizeof(line), f)) {
            char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
            if (!b)
                continue;
            *b++ = '\0';
            b[strcspn(b, "\n")] = '\0';
            if (strcmp(a + 1, ctls[i]) == 0)
                snprintf(path, sizeof(path), "/sys/fs/cgroup/%s%s", ctls[i],
                         strcmp(b, "/") ? b : "");
        }
        if (f)
            fclose(f);
        DIR *d = path[0] ? opendir(path) : NULL;
        struct dirent *de;
        while (d && (de = readdir(d)))
            n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
        if (d)
            closedir(d);
    }
    return n;
}

static int count_mounts(void)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    int n = 0, ch;
    while (f && (ch = fgetc(f)) != EOF)
        n += ch == '\n';
    if (f)
        fclose(f);
    return n;
}

/* Runs `fn` against a fresh platform with the sandbox on or off; after
 * it, no cgroup or mount of the platform's may be left. */
static int run_mode(void (*fn)(attack_ctx *), int sandboxed)
{
    env e;
    attack_ctx c = {&e, sandboxed, ""};
    int mounts = count_mounts();
    /* A state directory holding the instance id its cgroups are named by. */
    char state[64] = "/tmp/funcd-escape-state-XXXXXX", id_file[128];
    snprintf(instance, sizeof(instance), "e%ld", (long)getpid());
    snprintf(id_file, sizeof(id_file), "%s/instance-id", mkdtemp(state) ? state : "/nonexistent");
    FILE *f = fopen(id_file, "w");
    if (f) {
        fprintf(f, "%s\n", instance);
        fclose(f);
    }
    /* The artifact is written before the platform starts: a file open for
     * writing while the platform starts processes may be held by one of
     * them for a moment, and an exec of it then fails with ETXTBSY. */
    int made = make_artifact(c.dir, sizeof(c.dir));
    int rc = env_up_with(&e, NULL, sandboxed ? NULL : funcd_with_sandbox(0),
                         funcd_with_state_dir(state), NULL);
    if (rc < 0) {
        fprintf(stderr, "  cannot start a platform: %s\n", funcd_error_last()->message);
    } else if (made < 0 || sv_create(&e, "hostile", FN_SPEC, c.dir) != 201 ||
               !sv_wait_ready(&e, "hostile", 10000)) {
        fprintf(stderr, "  the hostile function is not Ready: %.500s\n", e.r.body);
        rc = -1;
    } else {
        fprintf(stderr, "  sandbox %s:\n", sandboxed ? "on" : "off");
        harness_failed_now = 0;
        fn(&c);
        rc = harness_failed_now ? -1 : 0;
    }
    env_down(&e);
    sv_cleanup();
    funcd_remove_tree(state);
    if (own_cgroup_dirs() != 0) {
        fprintf(stderr, "  cgroups left behind after the platform was freed\n");
        rc = -1;
    }
    if (count_mounts() != mounts) {
        fprintf(stderr, "  mounts changed: %d before, %d after\n", mounts, count_mounts());
        rc = -1;
    }
    return rc;
}

#define ESCAPE_TEST(name)                                                                          \
    TEST(name)                                                                                     \
    {                                                                                              \
        int on = run_mode(name##_attack, 1);                                                       \
        int off = run_mode(name##_attack, 0);                                                      \
        char left_[512];                                                                           \
        harness_failed_now = 0;                                                                    \
        if (on < 0 || off < 0)                                                                     \
            FAILF("contained with the sandbox: %s; let through without it: %s",                    \
                  on < 0 ? "no" : "yes", off < 0 ? "no" : "yes");                                  \
        if (sv_children(left_, sizeof(left_)))                                                     \
            FAILF("processes left behind: %s", left_);                                             \
    }

ESCAPE_TEST(read_host_file)
ESCAPE_TEST(read_root_file_in_source)
ESCAPE_TEST(connect_control_plane)
ESCAPE_TEST(ptrace_other)
ESCAPE_TEST(mount_fs)
ESCAPE_TEST(raw_socket)
ESCAPE_TEST(kill_everything)
ESCAPE_TEST(fork_bomb)
ESCAPE_TEST(memory_hog)
ESCAPE_TEST(write_artifact)
ESCAPE_TEST(setuid_binary)

int main(int argc, char **argv)
{
    sv_init();
    if (geteuid() != 0) {
        fprintf(stderr, "SKIP: the sandbox tests need root (namespaces, cgroups)\n");
        return 77;
    }
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    SV_RUN(only, ran, read_host_file);
    SV_RUN(only, ran, read_root_file_in_source);
    SV_RUN(only, ran, connect_control_plane);
    SV_RUN(only, ran, ptrace_other);
    SV_RUN(only, ran, mount_fs);
    SV_RUN(only, ran, raw_socket);
    SV_RUN(only, ran, kill_everything);
    SV_RUN(only, ran, fork_bomb);
    SV_RUN(only, ran, memory_hog);
    SV_RUN(only, ran, write_artifact);
    SV_RUN(only, ran, setuid_binary);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no case named %s\n", only);
        return 2;
    }
    return HARNESS_END();
}
