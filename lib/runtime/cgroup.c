#include "runtime/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/mount.h>
#include <sys/syscall.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "funcd/common.h"
#include "funcd/sys/error.h"

#define CG_ROOT "/sys/fs/cgroup"
#define CG_ALL ((1u << FUNCD_CG_COUNT) - 1)
/* The leaf funcd moves itself into on cgroup v2 when its own cgroup must
 * hand controllers down (no processes in an inner cgroup). */
#define SELF_LEAF "funcd-self"

static const char *const ctl_name[FUNCD_CG_COUNT] = {"memory", "pids", "cpu"};

static atomic_ulong moves;

static pthread_mutex_t note_lock = PTHREAD_MUTEX_INITIALIZER;
static char note_text[600];
static int note_level = -1;

__attribute__((format(printf, 2, 3))) static void note(int level, const char *fmt, ...)
{
    pthread_mutex_lock(&note_lock);
    /* Notes of one init add up (the most severe level), until read. */
    size_t at = note_level >= 0 ? strlen(note_text) : 0;
    if (at && at + 2 < sizeof(note_text))
        at += (size_t)snprintf(note_text + at, sizeof(note_text) - at, "; ");
    va_list ap;
    va_start(ap, fmt);
    if (at < sizeof(note_text))
        vsnprintf(note_text + at, sizeof(note_text) - at, fmt, ap);
    va_end(ap);
    note_level = level > note_level ? level : note_level;
    pthread_mutex_unlock(&note_lock);
}

int funcd_cgroup_note(char *out, size_t len)
{
    pthread_mutex_lock(&note_lock);
    int level = note_level;
    snprintf(out, len, "%s", level >= 0 ? note_text : "");
    note_level = -1;
    pthread_mutex_unlock(&note_lock);
    return level;
}

unsigned long funcd_cgroup_moves(void)
{
    return atomic_load(&moves);
}

static int write_file(const char *dir, const char *file, const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t n = strlen(text);
    int rc = write(fd, text, n) == (ssize_t)n ? 0 : -1;
    int err = errno;
    close(fd);
    errno = err;
    return rc;
}

/* The mount directory of controller `name` for a /proc/self/cgroup line's
 * controller list, e.g. "cpu,cpuacct" -> /sys/fs/cgroup/cpu,cpuacct. */
static int own_path(const char *name, char *out, size_t len)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return -1;
    char line[1024];
    int found = -1;
    while (found < 0 && fgets(line, sizeof(line), f)) {
        char *ctls = strchr(line, ':'), *path = ctls ? strchr(ctls + 1, ':') : NULL;
        if (!path)
            continue;
        *path++ = '\0';
        path[strcspn(path, "\n")] = '\0';
        ctls++;
        for (char *save = NULL, *c = strtok_r(ctls, ",", &save); c; c = strtok_r(NULL, ",", &save))
            if (strcmp(c, name) == 0) {
                char mnt[256];
                snprintf(mnt, sizeof(mnt), CG_ROOT "/%s", name);
                snprintf(out, len, "%s%s", mnt, strcmp(path, "/") == 0 ? "" : path);
                found = 0;
                break;
            }
    }
    fclose(f);
    return found;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

void funcd_cgroup_kill_dir(const char *dir)
{
    for (int attempt = 0; attempt < 200; attempt++) {
        /* cgroup v2 (kernel 5.14+): one write kills every task of the
         * cgroup and below, those it forks meanwhile too; v1 has no such
         * file, and its tasks are killed one by one. */
        if (write_file(dir, "cgroup.kill", "1") != 0) {
            char path[512];
            snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
            FILE *f = fopen(path, "re");
            long pid;
            while (f && fscanf(f, "%ld", &pid) == 1)
                kill((pid_t)pid, SIGKILL);
            if (f)
                fclose(f);
        }
        if (rmdir(dir) == 0 || errno == ENOENT)
            return;
        sleep_ms(5); /* killed tasks take a moment to leave */
    }
}

/* Removes the worker directories below `dir`, then `dir`. */
static void remove_runtime_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)))
            if (de->d_name[0] == 'w' && de->d_type == DT_DIR) {
                char sub[512];
                snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name);
                funcd_cgroup_kill_dir(sub);
            }
        closedir(d);
    }
    funcd_cgroup_kill_dir(dir);
}

/* Directories "funcd-<instance>-<n>" of this instance that a previous run
 * of it left (a crash): at init none of them is ours yet. Another funcd's
 * directories (another instance id, or the "funcd-<pid>-<n>" of older
 * versions) are never touched: its pid may be alive in a pid namespace we
 * cannot see. */
static void remove_stale(const char *own, const char *instance)
{
    DIR *d = opendir(own);
    if (!d)
        return;
    char prefix[64];
    int plen = snprintf(prefix, sizeof(prefix), "funcd-%s-", instance);
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *rest = de->d_name + plen;
        if (de->d_type != DT_DIR || strncmp(de->d_name, prefix, (size_t)plen) != 0 || !*rest ||
            strspn(rest, "0123456789") != strlen(rest))
            continue;
        char dir[512];
        if (snprintf(dir, sizeof(dir), "%s/%s", own, de->d_name) < (int)sizeof(dir))
            remove_runtime_dir(dir);
    }
    closedir(d);
}

int funcd_cgroup_instance_id_ok(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    /* A letter first: "funcd-<digits>-<n>" is an older version's pid name. */
    if (n == 0 || n > FUNCD_CGROUP_MAX_INSTANCE_ID || id[0] < 'a' || id[0] > 'z')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= '0' && id[i] <= '9')))
            return 0;
    return 1;
}

int funcd_cgroup_random_instance_id(char *out, size_t len)
{
    unsigned char raw[8];
    if (len < 2 * sizeof(raw) + 2 || getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
        return funcd_error_set(FUNCD_EIO, "cannot make an instance id: %s", strerror(errno));
    /* A letter first: older funcd versions read "funcd-<digits>-" as a
     * pid and would clean such a directory up (and we theirs). */
    out[0] = 'i';
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(out + 1 + 2 * i, 3, "%02x", raw[i]);
    return 0;
}

/* ---- favordynmods ------------------------------------------------------------
 * Moving a task between cgroups takes the global cgroup_threadgroup_rwsem
 * for writing, which waits for an RCU grace period: 12-15 ms per worker on
 * these machines. With "favordynmods" on any cgroup hierarchy the kernel
 * keeps that lock in its slow-reader mode instead (forks and exits pay a
 * few ns more) and a move costs ~70 us (docs/adr/0013-sandbox.md). The
 * flag lives on the cgroup2 superblock, a host-wide setting: set only on
 * the operator's request (funcd_with_cgroup_favordynmods), and cleared
 * again at shutdown when it was funcd that set it. A reconfigure replaces
 * every flag, so those the mount has are set again. */

/* `name` as a word of the space-separated `list`. */
static int has_option_sep(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\n' || p[n] == '\0'))
            return 1;
    return 0;
}

static const char *const cgroup2_flags[] = {"nsdelegate", "favordynmods", "memory_recursiveprot",
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

int funcd_cgroup2_options(char *mnt, size_t mnt_len, char *opts, size_t opts_len)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char line[1024], m[512], o[512];
    int found = 0;
    while (f && !found && fgets(line, sizeof(line), f)) {
        char *dash = strstr(line, " - cgroup2 ");
        found = dash && sscanf(line, "%*s %*s %*s %*s %511s", m) == 1 &&
                sscanf(dash + 11, "%*s %511s", o) == 1;
    }
    if (f)
        fclose(f);
    if (!found)
        return 0;
    snprintf(mnt, mnt_len, "%s", m);
    snprintf(opts, opts_len, "%s", o);
    return 1;
}

/* Reconfigures the cgroup2 superblock at `mnt` with the known flags of
 * `opts`, favordynmods set or not. */
static int reconfigure(const char *mnt, const char *opts, int favor)
{
    int fd = (int)syscall(SYS_fspick, AT_FDCWD, mnt, FSPICK_CLOEXEC);
    if (fd < 0)
        return funcd_error_set(FUNCD_EIO, "cgroup: cannot reconfigure the cgroup2 mount %s: %s",
                               mnt, strerror(errno));
    int ok = 1;
    for (const char *const *k = cgroup2_flags; ok && *k; k++) {
        int on = strcmp(*k, "favordynmods") == 0 ? favor : has_option(opts, *k);
        if (on)
            ok = syscall(SYS_fsconfig, fd, FSCONFIG_SET_FLAG, *k, NULL, 0) == 0;
    }
    if (ok)
        ok = syscall(SYS_fsconfig, fd, FSCONFIG_CMD_RECONFIGURE, NULL, NULL, 0) == 0;
    int err = errno;
    close(fd);
    if (!ok)
        return funcd_error_set(FUNCD_EIO, "cgroup: cannot reconfigure the cgroup2 mount %s: %s",
                               mnt, strerror(err));
    return 0;
}

int funcd_cgroup2_favor_dynmods(funcd_cgroup2_saved *saved)
{
    memset(saved, 0, sizeof(*saved));
    char opts[512];
    if (!funcd_cgroup2_options(saved->mnt, sizeof(saved->mnt), opts, sizeof(opts)))
        return funcd_error_set(FUNCD_ENOTSUP, "cgroup: no cgroup2 mount to set favordynmods on");
    if (has_option(opts, "favordynmods"))
        return 0;
    int rc = reconfigure(saved->mnt, opts, 1);
    if (rc < 0)
        return rc;
    saved->changed = 1;
    return 1;
}

int funcd_cgroup2_restore(funcd_cgroup2_saved *saved)
{
    if (!saved->changed)
        return 0;
    saved->changed = 0;
    char mnt[512], opts[512];
    /* Only our flag goes: whatever else changed meanwhile stays. */
    if (!funcd_cgroup2_options(mnt, sizeof(mnt), opts, sizeof(opts)) ||
        strcmp(mnt, saved->mnt) != 0 || !has_option(opts, "favordynmods"))
        return 0;
    return reconfigure(mnt, opts, 0);
}

/* ---- which layout ------------------------------------------------------------ */

unsigned funcd_cgroup_mask(const char *list)
{
    unsigned mask = 0;
    for (int c = 0; c < FUNCD_CG_COUNT; c++)
        if (has_option_sep(list, ctl_name[c]))
            mask |= 1u << c;
    return mask;
}

int funcd_cgroup_choose_v2(unsigned v2_mask, unsigned v1_mask, int v2_usable, int forced)
{
    if (!v2_usable)
        return 0;
    return forced || (v2_mask & CG_ALL) == CG_ALL || (v1_mask & CG_ALL) == 0;
}

int funcd_cgroup2_own_dir(const char *proc_cgroup, const char *mountinfo,
                          const char *mnt_override, char *out, size_t len)
{
    const char *line = proc_cgroup;
    while (line && strncmp(line, "0::", 3) != 0)
        line = (line = strchr(line, '\n')) ? line + 1 : NULL;
    if (!line)
        return 0;
    char path[400];
    snprintf(path, sizeof(path), "%.*s", (int)strcspn(line + 3, "\n"), line + 3);
    char root[400] = "/", mnt[400] = "";
    for (const char *l = mountinfo; l && *l; l = (l = strchr(l, '\n')) ? l + 1 : NULL) {
        const char *dash = strstr(l, " - cgroup2 "), *eol = strchr(l, '\n');
        if (dash && (!eol || dash < eol) &&
            sscanf(l, "%*s %*s %*s %399s %399s", root, mnt) == 2)
            break;
        mnt[0] = '\0';
        snprintf(root, sizeof(root), "/");
    }
    if (mnt_override)
        snprintf(mnt, sizeof(mnt), "%s", mnt_override);
    if (!mnt[0] || path[0] != '/')
        return 0;
    /* A bind of a subtree (mount root not "/"): the path is below it. */
    const char *rel = path;
    size_t rl = strlen(root);
    if (strcmp(root, "/") != 0 && strncmp(path, root, rl) == 0 && (!path[rl] || path[rl] == '/'))
        rel = path + rl;
    if (strcmp(rel, "/") == 0)
        rel = "";
    if (snprintf(out, len, "%s%s", mnt, rel) >= (int)len)
        return 0;
    /* funcd moved itself there (init_v2): its own cgroup is the parent. */
    char *last = strrchr(out, '/');
    if (last && last > out && strcmp(last + 1, SELF_LEAF) == 0)
        *last = '\0';
    return 1;
}

/* `path` in a malloc'd string, or NULL. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return NULL;
    size_t cap = 8192, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        char *more = n + 1 == cap ? realloc(buf, cap *= 2) : buf;
        if (!more)
            free(buf);
        buf = more;
    }
    fclose(f);
    if (buf)
        buf[n] = '\0';
    return buf;
}

/* systemd (251+) marks a cgroup it delegated with this extended
 * attribute; in one it did not, it may undo what funcd made below. */
static int marked_delegated(const char *dir)
{
    return getxattr(dir, "trusted.delegate", NULL, 0) >= 0 ||
           getxattr(dir, "user.delegate", NULL, 0) >= 0;
}

static unsigned read_mask(const char *dir, const char *file)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    char *text = slurp(path);
    unsigned mask = text ? funcd_cgroup_mask(text) : 0;
    free(text);
    return mask;
}

/* This process's cgroup2 directory; `forced` (a test's root) must be a
 * cgroup2 mount. */
static int own_v2(const char *forced, char *out, size_t len)
{
    struct statfs sf;
    if (forced && (statfs(forced, &sf) != 0 || sf.f_type != CGROUP2_SUPER_MAGIC))
        return 0;
    char *pc = slurp("/proc/self/cgroup"), *mi = slurp("/proc/self/mountinfo");
    int ok = pc && mi && funcd_cgroup2_own_dir(pc, mi, forced, out, len);
    free(pc);
    free(mi);
    return ok;
}

static void mask_text(unsigned mask, const char *sign, char *out, size_t len)
{
    out[0] = '\0';
    for (int c = 0; c < FUNCD_CG_COUNT; c++)
        if (mask & (1u << c))
            snprintf(out + strlen(out), len - strlen(out), "%s%s%s", out[0] ? " " : "", sign,
                     ctl_name[c]);
}

/* 1 when every process in `dir` is this one. */
static int alone_in(const char *dir)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
    FILE *f = fopen(path, "re");
    long pid;
    int alone = f != NULL;
    while (f && fscanf(f, "%ld", &pid) == 1)
        alone &= pid == (long)getpid();
    if (f)
        fclose(f);
    return alone;
}

/* Enables `want` in `own`'s subtree_control, so that the runtimes' cgroups
 * below get them. cgroup v2 allows that only in a cgroup without processes
 * (the root aside): when funcd is alone in its cgroup (systemd's
 * Delegate=yes gives it one), it moves into a leaf SELF_LEAF below it;
 * with other processes there it touches nothing and says so. 0 or -1. */
static int delegate(const char *own, unsigned want)
{
    char add[64];
    mask_text(want & ~read_mask(own, "cgroup.subtree_control"), "+", add, sizeof(add));
    if (!add[0] || write_file(own, "cgroup.subtree_control", add) == 0)
        return 0;
    if (errno != EBUSY) {
        note(FUNCD_LOG_WARN, "cgroup: cannot write \"%s\" to %s/cgroup.subtree_control (%s): "
             "spec.resources limits are off; delegate the controllers to funcd (systemd: "
             "Delegate=yes)", add, own, strerror(errno));
        return -1;
    }
    if (!alone_in(own)) {
        note(FUNCD_LOG_WARN, "cgroup: funcd's cgroup %s has other processes, and cgroup v2 "
             "gives controllers only to the children of a cgroup without processes: "
             "spec.resources limits are off; run funcd alone in a cgroup delegated to it "
             "(systemd: Delegate=yes)", own);
        return -1;
    }
    char leaf[512], pid[24];
    snprintf(leaf, sizeof(leaf), "%s/" SELF_LEAF, own);
    snprintf(pid, sizeof(pid), "%ld", (long)getpid());
    if ((mkdir(leaf, 0755) != 0 && errno != EEXIST) || write_file(leaf, "cgroup.procs", pid) != 0 ||
        write_file(own, "cgroup.subtree_control", add) != 0) {
        note(FUNCD_LOG_WARN, "cgroup: cannot move funcd into %s to hand controllers to its "
             "workers (%s): spec.resources limits are off", leaf, strerror(errno));
        return -1;
    }
    note(FUNCD_LOG_INFO, "cgroup: funcd moved itself into %s, so that %s (delegated to it) can "
         "hand %s to workers' cgroups: cgroup v2 allows no processes in a cgroup that does",
         leaf, own, add);
    return 0;
}

/* The v2 layout under `own`: 0, or -1 when the v1 layout should be tried
 * instead (the controllers cannot be had here, and v1 has some). */
static int init_v2(funcd_cgroups *cg, const char *own, unsigned avail, unsigned v1, unsigned n)
{
    unsigned want = avail & CG_ALL;
    if (want && strstr(own, ".service") && !marked_delegated(own))
        note(FUNCD_LOG_WARN, "cgroup: %s is a systemd unit's cgroup not delegated to funcd: "
             "systemd may undo funcd's cgroups below it; set Delegate=yes on the unit", own);
    if (want && delegate(own, want) < 0) {
        if (v1)
            return -1;
        want = 0; /* placement and cgroup.kill still */
    }
    remove_stale(own, cg->instance);
    snprintf(cg->dir, sizeof(cg->dir), "%s/funcd-%s-%u", own, cg->instance, n);
    if (mkdir(cg->dir, 0755) != 0 && errno != EEXIST) {
        note(FUNCD_LOG_WARN, "cgroup: cannot create %s: %s; workers get no cgroups", cg->dir,
             strerror(errno));
        cg->dir[0] = '\0';
        return v1 ? -1 : 0;
    }
    char add[64];
    mask_text(want, "+", add, sizeof(add));
    if (add[0] && write_file(cg->dir, "cgroup.subtree_control", add) != 0) {
        note(FUNCD_LOG_WARN, "cgroup: cannot write \"%s\" to %s/cgroup.subtree_control: %s; "
             "spec.resources limits are off", add, cg->dir, strerror(errno));
        want = 0;
    }
    cg->v2 = 1;
    for (int c = 0; c < FUNCD_CG_COUNT; c++)
        if (want & (1u << c))
            snprintf(cg->base[c], sizeof(cg->base[c]), "%s", cg->dir);
    mask_text(want, "", add, sizeof(add));
    note(FUNCD_LOG_INFO, "cgroup: workers' cgroups on cgroup v2 under %s (controllers: %s)",
         cg->dir, add[0] ? add : "none: no spec.resources limits");
    return 0;
}

void funcd_cgroups_init(funcd_cgroups *cg, const char *instance_id)
{
    static atomic_uint next_runtime;
    unsigned n = atomic_fetch_add(&next_runtime, 1);
    memset(cg, 0, sizeof(*cg));
    char stale[8];
    funcd_cgroup_note(stale, sizeof(stale)); /* this init's notes only */
    if (funcd_cgroup_instance_id_ok(instance_id))
        snprintf(cg->instance, sizeof(cg->instance), "%s", instance_id);
    else if (funcd_cgroup_random_instance_id(cg->instance, sizeof(cg->instance)) < 0)
        return; /* no cgroups, and limits are refused */
    char own[FUNCD_CG_COUNT][300], own2[400];
    unsigned v1 = 0;
    for (int c = 0; c < FUNCD_CG_COUNT; c++)
        if (own_path(ctl_name[c], own[c], sizeof(own[c])) == 0 && access(own[c], W_OK) == 0)
            v1 |= 1u << c;
    const char *forced = getenv(FUNCD_CGROUP2_TEST_ROOT_ENV);
    if (forced && !forced[0])
        forced = NULL;
    int usable = own_v2(forced, own2, sizeof(own2)) && access(own2, W_OK) == 0;
    unsigned avail = usable ? read_mask(own2, "cgroup.controllers") : 0;
    if (funcd_cgroup_choose_v2(avail, v1, usable, forced != NULL) &&
        init_v2(cg, own2, avail, forced ? 0 : v1, n) == 0)
        return;
    for (int c = 0; c < FUNCD_CG_COUNT; c++) {
        if (!(v1 & (1u << c)))
            continue;
        remove_stale(own[c], cg->instance);
        snprintf(cg->base[c], sizeof(cg->base[c]), "%s/funcd-%s-%u", own[c], cg->instance, n);
        if (mkdir(cg->base[c], 0755) != 0 && errno != EEXIST)
            cg->base[c][0] = '\0';
    }
}

void funcd_cgroups_fini(funcd_cgroups *cg)
{
    if (cg->v2 && cg->dir[0])
        remove_runtime_dir(cg->dir);
    for (int c = 0; c < FUNCD_CG_COUNT && !cg->v2; c++)
        if (cg->base[c][0])
            remove_runtime_dir(cg->base[c]);
    memset(cg, 0, sizeof(*cg));
}

void funcd_cgroup_path(const funcd_cgroups *cg, int ctl, unsigned id, char *out, size_t len)
{
    if (cg->base[ctl][0])
        snprintf(out, len, "%s/w%u", cg->base[ctl], id);
    else if (len)
        out[0] = '\0';
}

size_t funcd_cgroup_dirs(const funcd_cgroups *cg, unsigned id, char out[][512])
{
    size_t n = 0;
    if (cg->v2) {
        if (cg->dir[0])
            snprintf(out[n++], 512, "%s/w%u", cg->dir, id);
        return n;
    }
    for (int c = 0; c < FUNCD_CG_COUNT; c++)
        if (cg->base[c][0])
            snprintf(out[n++], 512, "%s/w%u", cg->base[c], id);
    return n;
}

int funcd_cgroup_open(const funcd_cgroups *cg, unsigned id)
{
    if (!cg->v2 || !cg->dir[0] || !id)
        return -1;
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/w%u", cg->dir, id);
    return open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

static int set_text(const funcd_cgroups *cg, int ctl, unsigned id, const char *file,
                    const char *text)
{
    char dir[512];
    funcd_cgroup_path(cg, ctl, id, dir, sizeof(dir));
    if (write_file(dir, file, text) == 0)
        return 0;
    return funcd_error_set(FUNCD_EIO, "cgroup: cannot write %s to %s/%s: %s", text, dir, file,
                           strerror(errno));
}

static int set_limit(const funcd_cgroups *cg, int ctl, unsigned id, const char *file,
                     unsigned long long value)
{
    char text[32];
    snprintf(text, sizeof(text), "%llu", value);
    return set_text(cg, ctl, id, file, text);
}

/* Moving a task into a v1 memory cgroup costs ~1.5 ms here (the other
 * controllers ~15 us), so a worker started on the request's path joins one
 * only when it has a limit; a blank init (`all`), moved ahead of time,
 * joins every controller, so that any limit can be written when it is
 * claimed. */
static int make_dirs(const funcd_cgroups *cg, unsigned id, const funcd_worker_limits *lim, int all)
{
    if (cg->v2) { /* one directory, whatever the limits */
        char dir[512];
        snprintf(dir, sizeof(dir), "%s/w%u", cg->dir, id);
        if (cg->dir[0] && mkdir(dir, 0755) != 0 && errno != EEXIST)
            return funcd_error_set(FUNCD_EIO, "cgroup: cannot create %s: %s", dir,
                                   strerror(errno));
        return 0;
    }
    for (int c = 0; c < FUNCD_CG_COUNT; c++) {
        char dir[512];
        if (c == FUNCD_CG_MEMORY && !lim->memory_bytes && !all)
            continue;
        funcd_cgroup_path(cg, c, id, dir, sizeof(dir));
        if (dir[0] && mkdir(dir, 0755) != 0 && errno != EEXIST)
            return funcd_error_set(FUNCD_EIO, "cgroup: cannot create %s: %s", dir,
                                   strerror(errno));
    }
    return 0;
}

static int apply_limits(const funcd_cgroups *cg, unsigned id, const funcd_worker_limits *lim,
                        uint32_t default_pids);

static int need(const funcd_cgroups *cg, int ctl, const char *what)
{
    if (cg->base[ctl][0])
        return 0;
    if (cg->v2)
        return funcd_error_set(FUNCD_ENOTSUP, "spec.resources.%s needs the cgroup v2 %s "
                               "controller delegated to funcd, which it is not on this host "
                               "(docs/security.md)", what, ctl_name[ctl]);
    return funcd_error_set(FUNCD_ENOTSUP, "spec.resources.%s needs the cgroup v1 %s controller, "
                           "which is not writable for funcd on this host", what, ctl_name[ctl]);
}

int funcd_cgroup_check(const funcd_cgroups *cg, const funcd_worker_limits *lim)
{
    int rc;
    if ((lim->memory_bytes && (rc = need(cg, FUNCD_CG_MEMORY, "memory")) < 0) ||
        (lim->pids && (rc = need(cg, FUNCD_CG_PIDS, "pids")) < 0) ||
        (lim->cpu_millis && (rc = need(cg, FUNCD_CG_CPU, "cpu")) < 0))
        return rc;
    return 0;
}

int funcd_cgroup_make(const funcd_cgroups *cg, unsigned id, const funcd_worker_limits *lim,
                      uint32_t default_pids)
{
    int rc;
    if ((rc = funcd_cgroup_check(cg, lim)) < 0)
        return rc;
    if ((rc = make_dirs(cg, id, lim, 0)) < 0 || (rc = apply_limits(cg, id, lim, default_pids)) < 0)
        funcd_cgroup_remove(cg, id);
    return rc;
}

int funcd_cgroup_make_blank(const funcd_cgroups *cg, unsigned id, uint32_t default_pids)
{
    static const funcd_worker_limits none;
    int rc;
    if ((rc = make_dirs(cg, id, &none, 1)) < 0 || (rc = apply_limits(cg, id, &none, default_pids)) < 0)
        funcd_cgroup_remove(cg, id);
    return rc;
}

unsigned funcd_cgroup_next_id(funcd_cgroups *cg)
{
    return atomic_fetch_add(&cg->next_id, 1) + 1;
}

int funcd_cgroup_set_limits(const funcd_cgroups *cg, unsigned id, const funcd_worker_limits *lim)
{
    int rc;
    if ((rc = funcd_cgroup_check(cg, lim)) < 0)
        return rc;
    return apply_limits(cg, id, lim, 0);
}

/* cgroup v2's files: memory.max (and no swap), pids.max, cpu.max. */
static int apply_limits_v2(const funcd_cgroups *cg, unsigned id, const funcd_worker_limits *lim,
                           uint32_t default_pids)
{
    int rc;
    if (lim->memory_bytes) {
        if ((rc = set_limit(cg, FUNCD_CG_MEMORY, id, "memory.max", lim->memory_bytes)) < 0)
            return rc;
        char dir[512], path[560];
        funcd_cgroup_path(cg, FUNCD_CG_MEMORY, id, dir, sizeof(dir));
        snprintf(path, sizeof(path), "%s/memory.swap.max", dir);
        if (access(path, F_OK) == 0 && (rc = set_text(cg, FUNCD_CG_MEMORY, id, "memory.swap.max",
                                                      "0")) < 0)
            return rc;
    }
    uint32_t pids = lim->pids ? lim->pids : default_pids;
    if (pids && cg->base[FUNCD_CG_PIDS][0] &&
        (rc = set_limit(cg, FUNCD_CG_PIDS, id, "pids.max", pids)) < 0)
        return rc;
    if (lim->cpu_millis) {
        char text[48];
        snprintf(text, sizeof(text), "%llu 100000", (unsigned long long)lim->cpu_millis * 100);
        if ((rc = set_text(cg, FUNCD_CG_CPU, id, "cpu.max", text)) < 0)
            return rc;
    }
    return 0;
}

static int apply_limits(const funcd_cgroups *cg, unsigned id, const funcd_worker_limits *lim,
                        uint32_t default_pids)
{
    int rc;
    if (cg->v2)
        return apply_limits_v2(cg, id, lim, default_pids);
    if (lim->memory_bytes) {
        if ((rc = set_limit(cg, FUNCD_CG_MEMORY, id, "memory.limit_in_bytes",
                            lim->memory_bytes)) < 0)
            return rc;
        /* Swap counts too, or a worker could page its way past the limit;
         * a kernel without swap accounting has no such file. */
        char dir[512], path[560];
        funcd_cgroup_path(cg, FUNCD_CG_MEMORY, id, dir, sizeof(dir));
        snprintf(path, sizeof(path), "%s/memory.memsw.limit_in_bytes", dir);
        if (access(path, F_OK) == 0 &&
            (rc = set_limit(cg, FUNCD_CG_MEMORY, id, "memory.memsw.limit_in_bytes",
                            lim->memory_bytes)) < 0)
            return rc;
    }
    uint32_t pids = lim->pids ? lim->pids : default_pids;
    if (pids && cg->base[FUNCD_CG_PIDS][0] &&
        (rc = set_limit(cg, FUNCD_CG_PIDS, id, "pids.max", pids)) < 0)
        return rc;
    if (lim->cpu_millis &&
        ((rc = set_limit(cg, FUNCD_CG_CPU, id, "cpu.cfs_period_us", 100000)) < 0 ||
         (rc = set_limit(cg, FUNCD_CG_CPU, id, "cpu.cfs_quota_us",
                         (unsigned long long)lim->cpu_millis * 100)) < 0))
        return rc;
    return 0;
}

int funcd_cgroup_attach(const funcd_cgroups *cg, unsigned id, pid_t pid)
{
    char text[24], dirs[FUNCD_CG_COUNT][512];
    snprintf(text, sizeof(text), "%ld", (long)pid);
    size_t n = funcd_cgroup_dirs(cg, id, dirs);
    for (size_t i = 0; i < n; i++) {
        if (access(dirs[i], F_OK) != 0) /* v1 memory: only with a limit */
            continue;
        atomic_fetch_add(&moves, 1);
        if (write_file(dirs[i], "cgroup.procs", text) != 0)
            return funcd_error_set(FUNCD_EIO, "cgroup: cannot move process %ld into %s: %s",
                                   (long)pid, dirs[i], strerror(errno));
    }
    return 0;
}

int funcd_cgroup_oom_killed(const funcd_cgroups *cg, unsigned id)
{
    char dir[512], path[560], line[128];
    funcd_cgroup_path(cg, FUNCD_CG_MEMORY, id, dir, sizeof(dir));
    if (!dir[0])
        return 0;
    /* v1 counts in memory.oom_control, v2 in memory.events. */
    snprintf(path, sizeof(path), "%s/%s", dir, cg->v2 ? "memory.events" : "memory.oom_control");
    FILE *f = fopen(path, "re");
    unsigned long long kills = 0;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "oom_kill %llu", &kills) == 1)
            break;
    if (f)
        fclose(f);
    return kills > 0;
}

void funcd_cgroup_remove(const funcd_cgroups *cg, unsigned id)
{
    char dirs[FUNCD_CG_COUNT][512];
    size_t n = funcd_cgroup_dirs(cg, id, dirs);
    for (size_t i = 0; i < n; i++)
        funcd_cgroup_kill_dir(dirs[i]);
}
