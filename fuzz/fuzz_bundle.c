/*
 * Fuzzes bundle validation and extraction: the input goes to
 * funcd_bundle_check and, when it passes, to funcd_bundle_extract into a
 * fresh directory that is removed afterwards. Small limits keep the disk
 * and the time per input bounded. What must hold for every input:
 *   - check and extract agree: a bundle that passes the check extracts;
 *   - a failed extraction leaves nothing behind;
 *   - nothing is ever written outside the destination (the destination
 *     sits alone in a scratch directory, which must hold only it).
 */
#include <dirent.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "artifact/bundle.h"
#include "funcd/common.h"

static void check(int ok, const char *what, const char *detail)
{
    if (!ok) {
        fprintf(stderr, "fuzz_bundle: %s: %s\n", what, detail);
        abort();
    }
}

static int entries_in(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    closedir(d);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const funcd_bundle_limits lim = {
        .max_compressed = 1 << 20,
        .max_total = 4 << 20,
        .max_entries = 256,
    };
    char err[1024] = "";
    int checked = funcd_bundle_check(data, size, &lim, err, sizeof(err));
    check(checked == 0 || checked == FUNCD_EINVAL || checked == FUNCD_ENOMEM, "check code", err);
    check(checked == 0 || err[0], "check failed without a message", "");
    if (checked != 0)
        return 0;

    char scratch[] = "/tmp/funcd-fuzz-bundle-XXXXXX", dest[sizeof(scratch) + 8];
    if (!mkdtemp(scratch))
        return 0;
    snprintf(dest, sizeof(dest), "%s/out", scratch);
    int rc = funcd_bundle_extract(data, size, dest, &lim, err, sizeof(err));
    check(rc == 0 || rc == FUNCD_EIO || rc == FUNCD_ENOMEM, "check passed but extract refused",
          err);
    check(entries_in(scratch) == (rc == 0 ? 1 : 0), "extract wrote beside its destination", dest);
    funcd_bundle_remove_tree(scratch);
    return 0;
}
