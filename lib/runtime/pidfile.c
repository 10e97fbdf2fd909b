#include "runtime/pidfile.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/cgroup.h"

#define MAX_CGROUPS 4

unsigned long long funcd_pid_start_time(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* Fields after "(comm)", which may hold spaces: state is field 3. */
    char *p = strrchr(buf, ')');
    unsigned long long start = 0;
    if (!p)
        return 0;
    p++;
    for (int field = 3; field <= 22 && p; field++) {
        p = strchr(p, ' ');
        if (!p)
            return 0;
        p++;
        if (field == 22)
            start = strtoull(p, NULL, 10);
    }
    return start;
}

int funcd_pidfile_write(const char *dir, pid_t pid, const char *const *cgroups, size_t n)
{
    char path[512], tmp[520];
    snprintf(path, sizeof(path), "%s/%ld", dir, (long)pid);
    snprintf(tmp, sizeof(tmp), "%s/.%ld.tmp", dir, (long)pid);
    FILE *f = fopen(tmp, "we");
    if (!f)
        return -1;
    fprintf(f, "pid %ld\nstart %llu\npgid %ld\n", (long)pid, funcd_pid_start_time(pid),
            (long)getpgid(pid));
    for (size_t i = 0; i < n; i++)
        if (cgroups[i] && cgroups[i][0])
            fprintf(f, "cgroup %s\n", cgroups[i]);
    int rc = fclose(f) == 0 ? rename(tmp, path) : -1;
    if (rc != 0)
        unlink(tmp);
    return rc;
}

void funcd_pidfile_remove(const char *dir, pid_t pid)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%ld", dir, (long)pid);
    unlink(path);
}

typedef struct record {
    long pid, pgid;
    unsigned long long start;
    char cgroup[MAX_CGROUPS][400];
    size_t n_cgroups;
} record;

static int read_record(const char *path, record *r)
{
    memset(r, 0, sizeof(*r));
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    char line[400];
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        if (strncmp(line, "cgroup /", 8) == 0 && r->n_cgroups < MAX_CGROUPS)
            snprintf(r->cgroup[r->n_cgroups++], sizeof(r->cgroup[0]), "%s", line + 7);
        else if (sscanf(line, "pid %ld", &r->pid) == 1 || sscanf(line, "pgid %ld", &r->pgid) == 1 ||
                 sscanf(line, "start %llu", &r->start) == 1)
            continue;
    }
    fclose(f);
    return r->pid > 0 ? 0 : -1;
}

/* Only cgroup directories funcd makes are touched. */
static int ours(const char *cgroup)
{
    return strncmp(cgroup, "/sys/fs/cgroup/", 15) == 0 && strstr(cgroup, "/funcd-") &&
           !strstr(cgroup, "..");
}

unsigned funcd_pidfile_end_stale(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    unsigned ended = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        if (de->d_name[0] == '.' || *end || pid <= 0) {
            if (strncmp(de->d_name, ".", 1) == 0 && strstr(de->d_name, ".tmp"))
                unlink(path);
            continue;
        }
        record r;
        if (read_record(path, &r) == 0 && r.start &&
            funcd_pid_start_time((pid_t)r.pid) == r.start) {
            kill(r.pgid > 1 ? (pid_t)-r.pgid : (pid_t)r.pid, SIGKILL);
            kill((pid_t)r.pid, SIGKILL);
            ended++;
        }
        for (size_t i = 0; i < r.n_cgroups; i++)
            if (ours(r.cgroup[i]))
                funcd_cgroup_kill_dir(r.cgroup[i]);
        unlink(path);
    }
    closedir(d);
    return ended;
}
