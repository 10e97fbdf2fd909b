/*
 * Fuzz target for the daemon's config file (bin/funcd/config_file.c): any
 * bytes either become arguments that all look like long flags, or an error
 * with a message; never a crash or a leak.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char **args = NULL, err[256];
    int rc = funcd_config_file_parse((const char *)data, size, &args, err, sizeof(err));
    if (rc == 0) {
        for (char **a = args; *a; a++)
            if (strncmp(*a, "--", 2) != 0 || (*a)[2] == '-' || (*a)[2] == '\0') {
                fprintf(stderr, "fuzz_config_file: not a long flag: %s\n", *a);
                abort();
            }
    } else if (!err[0]) {
        fprintf(stderr, "fuzz_config_file: an error without a message\n");
        abort();
    }
    funcd_config_file_free(args);
    return 0;
}
