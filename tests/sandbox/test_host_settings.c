/*
 * funcd changes no host-wide setting unless the operator asks: a platform
 * run (sandbox on, a worker's cgroups made) leaves the host's cgroup2 mount
 * options as they were; with funcd_with_cgroup_favordynmods the flag is
 * set while it runs, logged, and cleared again at shutdown.
 *
 * The flag is host-wide, so this test sets the stage itself: it clears
 * favordynmods first (when set) and puts the original state back at the
 * end, whatever happens. Not run in parallel with other tests (meson).
 */
#include <fcntl.h>
#include <linux/mount.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "funcd/funcd.h"
#include "funcd/sys/error.h"
#include "harness.h"

static char mnt[512];
static int original_favor = -1; /* as found: restored at exit */

static const char *const known[] = {"nsdelegate", "favordynmods", "memory_recursiveprot",
                                    "memory_localevents", "memory_hugetlb_accounting",
                                    "pids_localevents", NULL};

static int has_option(const char *opts, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = opts; (p = strstr(p, name)); p += n)
        if ((p == opts || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
            return 1;
    return 0;
}

/* The super options of the cgroup2 mount ("rw,nsdelegate,..."), or "". */
static void cgroup2_options(char *opts, size_t len)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char line[1024], m[512], o[512];
    opts[0] = '\0';
    while (f && fgets(line, sizeof(line), f)) {
        char *dash = strstr(line, " - cgroup2 ");
        if (dash && sscanf(line, "%*s %*s %*s %*s %511s", m) == 1 &&
            sscanf(dash + 11, "%*s %511s", o) == 1) {
            snprintf(mnt, sizeof(mnt), "%s", m);
            snprintf(opts, len, "%s", o);
            break;
        }
    }
    if (f)
        fclose(f);
}

static int favor_now(void)
{
    char opts[512];
    cgroup2_options(opts, sizeof(opts));
    return has_option(opts, "favordynmods");
}

/* The test's own way to set the stage: the flag on or off, the others kept. */
static int set_favor(int on)
{
    char opts[512];
    cgroup2_options(opts, sizeof(opts));
    int fd = (int)syscall(SYS_fspick, AT_FDCWD, mnt, FSPICK_CLOEXEC);
    if (fd < 0)
        return -1;
    int ok = 1;
    for (const char *const *k = known; ok && *k; k++)
        if (strcmp(*k, "favordynmods") == 0 ? on : has_option(opts, *k))
            ok = syscall(SYS_fsconfig, fd, FSCONFIG_SET_FLAG, *k, NULL, 0) == 0;
    ok = ok && syscall(SYS_fsconfig, fd, FSCONFIG_CMD_RECONFIGURE, NULL, NULL, 0) == 0;
    close(fd);
    return ok && favor_now() == on ? 0 : -1;
}

static void put_back(void)
{
    if (original_favor >= 0 && favor_now() != original_favor && set_favor(original_favor) < 0)
        fprintf(stderr, "  could not put favordynmods back to %s on %s\n",
                original_favor ? "on" : "off", mnt);
}

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_text[8192];

static void capture(funcd_log_level level, const char *message, void *payload)
{
    pthread_mutex_lock(&log_lock);
    size_t n = strlen(log_text);
    snprintf(log_text + n, sizeof(log_text) - n, "%s\n", message);
    pthread_mutex_unlock(&log_lock);
    fprintf(stderr, "  log: %s\n", message);
}

/* A sandboxed platform with a runtime's cgroups made; its cgroup2 options
 * while it runs go to `during`. */
static int run_platform(int favor, char *during, size_t len)
{
    funcd_platform *p = NULL;
    log_text[0] = '\0';
    int rc = funcd_platform_new(&p, funcd_in_memory(), funcd_with_sandbox(1),
                                funcd_with_logger(capture, FUNCD_LOG_INFO, NULL),
                                favor ? funcd_with_cgroup_favordynmods(1) : NULL);
    if (rc == 0)
        rc = funcd_platform_start(p);
    if (rc < 0)
        fprintf(stderr, "  platform: %s\n", funcd_error_last()->message);
    cgroup2_options(during, len);
    funcd_platform_free(p);
    return rc;
}

TEST(no_flag_no_remount)
{
    CHECK_INT(set_favor(0), 0);
    char before[512], during[512], after[512];
    cgroup2_options(before, sizeof(before));
    CHECK_INT(run_platform(0, during, sizeof(during)), 0);
    cgroup2_options(after, sizeof(after));
    CHECK_STR(during, before);
    CHECK_STR(after, before);
    CHECK(!strstr(log_text, "favordynmods"));
}

TEST(flag_sets_logs_and_restores)
{
    CHECK_INT(set_favor(0), 0);
    char before[512], during[512], after[512];
    cgroup2_options(before, sizeof(before));
    CHECK_INT(run_platform(1, during, sizeof(during)), 0);
    cgroup2_options(after, sizeof(after));
    CHECK(has_option(during, "favordynmods"));
    CHECK_STR(after, before);
    CHECK_CONTAINS(log_text, "set favordynmods on the host's cgroup2 mount");
    CHECK_CONTAINS(log_text, "cleared favordynmods");
}

TEST(flag_leaves_a_set_flag_alone)
{
    CHECK_INT(set_favor(1), 0);
    char before[512], during[512], after[512];
    cgroup2_options(before, sizeof(before));
    CHECK_INT(run_platform(1, during, sizeof(during)), 0);
    cgroup2_options(after, sizeof(after));
    CHECK_STR(during, before);
    CHECK_STR(after, before);
    CHECK_CONTAINS(log_text, "already set");
}

int main(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "SKIP: reconfiguring the cgroup2 mount needs root\n");
        return 77;
    }
    char features[512] = "", opts[512];
    FILE *f = fopen("/sys/kernel/cgroup/features", "re");
    size_t n = f ? fread(features, 1, sizeof(features) - 1, f) : 0;
    features[n] = '\0';
    if (f)
        fclose(f);
    cgroup2_options(opts, sizeof(opts));
    if (!opts[0]) {
        fprintf(stderr, "SKIP: no cgroup2 mount in /proc/self/mountinfo\n");
        return 77;
    }
    if (!strstr(features, "favordynmods")) {
        fprintf(stderr, "SKIP: this kernel has no favordynmods (/sys/kernel/cgroup/features)\n");
        return 77;
    }
    original_favor = has_option(opts, "favordynmods");
    atexit(put_back);
    RUN(no_flag_no_remount);
    RUN(flag_sets_logs_and_restores);
    RUN(flag_leaves_a_set_flag_alone);
    put_back();
    return HARNESS_END();
}
