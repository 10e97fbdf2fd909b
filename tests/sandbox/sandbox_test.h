/* What the sandbox tests share: reading a small /proc or /sys file, and
 * finding this process' sandbox inits. */
#ifndef FUNCD_TESTS_SANDBOX_TEST_H
#define FUNCD_TESTS_SANDBOX_TEST_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static inline int read_text(const char *path, char *out, size_t len)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    size_t n = fread(out, 1, len - 1, f);
    out[n] = '\0';
    fclose(f);
    return 0;
}

/* Our children that are sandbox inits (blank or not): their pids, at most `max`. */
static inline int sandbox_children(pid_t *out, int max)
{
    DIR *d = opendir("/proc");
    struct dirent *de;
    int n = 0;
    while (d && (de = readdir(d)) && n < max) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        char path[300], text[512] = "";
        snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
        if (read_text(path, text, sizeof(text)) < 0)
            continue;
        const char *paren = strrchr(text, ')');
        char state;
        long ppid;
        if (strstr(text, "(funcd-sandbox)") && paren &&
            sscanf(paren + 1, " %c %ld", &state, &ppid) == 2 && ppid == (long)getpid() &&
            state != 'Z')
            out[n++] = (pid_t)atol(de->d_name);
    }
    if (d)
        closedir(d);
    return n;
}

#endif
