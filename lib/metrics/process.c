/*
 * The process_* series every Prometheus client library exports, read from
 * /proc/self at collection time (nothing is kept between scrapes).
 */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "metrics/internal.h"

/* /proc/self/stat fields 14, 15, 22, 23, 24 (utime, stime, starttime in
 * clock ticks, vsize in bytes, rss in pages); after the command, which may
 * hold spaces and parentheses, so the parse starts at its last ')'. */
static void read_stat(funcd_metrics_process *out)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "re");
    if (!f)
        return;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p)
        return;
    unsigned long utime, stime, vsize;
    unsigned long long start;
    long rss;
    /* state(3) ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
     * utime(14) stime cutime cstime priority nice threads itrealvalue
     * starttime(22) vsize rss */
    if (sscanf(p + 1,
               " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu %*d %*d %*d %*d %*d %*d "
               "%llu %lu %ld",
               &utime, &stime, &start, &vsize, &rss) != 5)
        return;
    long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    if (tick <= 0)
        return;
    out->cpu_seconds = (double)(utime + stime) / (double)tick;
    out->virtual_bytes = (double)vsize;
    out->resident_bytes = (double)rss * (double)(page > 0 ? page : 4096);
    f = fopen("/proc/stat", "re");
    if (!f)
        return;
    char line[256];
    while (fgets(line, sizeof(line), f)) {
        unsigned long long btime;
        if (sscanf(line, "btime %llu", &btime) == 1) {
            out->start_time_seconds = (double)btime + (double)start / (double)tick;
            break;
        }
    }
    fclose(f);
}

void funcd_metrics_process_read(funcd_metrics_process *out)
{
    *out = (funcd_metrics_process){-1, -1, -1, -1, -1, -1};
    read_stat(out);
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        double fds = 0;
        struct dirent *de;
        while ((de = readdir(d)))
            fds += de->d_name[0] != '.';
        closedir(d);
        out->open_fds = fds - 1; /* not the directory's own descriptor */
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        out->max_fds = (double)rl.rlim_cur;
}
