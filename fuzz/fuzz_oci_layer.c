/*
 * Fuzzes image layer extraction: the input is one layer (gzip, zstd or plain
 * tar, told apart by magic) unpacked by funcd_oci_unpack into a fresh
 * directory, then stacked on itself as two layers (whiteouts and
 * replacements then meet a lower layer). Small limits bound disk and time.
 * What must hold for every input:
 *   - only the documented codes come back, and a failure has a message;
 *   - a failure leaves nothing behind, a success exactly the rootfs;
 *   - nothing is ever written outside the destination (the scratch
 *     directory holds only the layer file and the output directory).
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "artifact/bundle.h"
#include "funcd/common.h"
#include "oci/unpack.h"

static void check(int ok, const char *what, const char *detail)
{
    if (!ok) {
        fprintf(stderr, "fuzz_oci_layer: %s: %s\n", what, detail);
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

static const char *media_type_of(const uint8_t *data, size_t size)
{
    if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b)
        return FUNCD_OCI_MT_LAYER_GZIP;
    if (size >= 4 && data[0] == 0x28 && data[1] == 0xb5 && data[2] == 0x2f && data[3] == 0xfd)
        return FUNCD_OCI_MT_LAYER_ZSTD;
    return FUNCD_OCI_MT_LAYER_TAR;
}

static int write_input(const char *path, const uint8_t *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    size_t done = 0;
    while (done < size) {
        ssize_t n = write(fd, data + done, size - done);
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    close(fd);
    return done == size ? 0 : -1;
}

static void unpack_and_check(const char *scratch, const char *layer, const char *mt, int times)
{
    const funcd_unpack_limits lim = {.max_bytes = 4 << 20, .max_entries = 512, .skip_sync = 1};
    const char *paths[2] = {layer, layer}, *types[2] = {mt, mt};
    char out[256], rootfs[300], err[1024] = "";
    snprintf(out, sizeof(out), "%s/out", scratch);
    snprintf(rootfs, sizeof(rootfs), "%s/rootfs", out);
    check(mkdir(out, 0755) == 0, "mkdir", out);
    int rc = funcd_oci_unpack(paths, types, (size_t)times, rootfs, &lim, err, sizeof(err));
    check(rc == 0 || rc == FUNCD_EINVAL || rc == FUNCD_EIO || rc == FUNCD_ENOMEM ||
              rc == FUNCD_ENOSPC,
          "unexpected code", err);
    check(rc == 0 || err[0], "failed without a message", "");
    check(entries_in(out) == (rc == 0 ? 1 : 0), "left something beside or instead of the rootfs",
          err);
    check(entries_in(scratch) == 2, "wrote outside its destination", scratch);
    check(funcd_bundle_remove_tree(out) == 0, "cannot remove", out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char scratch[] = "/tmp/funcd-fuzz-layer-XXXXXX", layer[64];
    if (!mkdtemp(scratch))
        return 0;
    snprintf(layer, sizeof(layer), "%s/layer", scratch);
    if (write_input(layer, data, size) == 0) {
        const char *mt = media_type_of(data, size);
        unpack_and_check(scratch, layer, mt, 1);
        unpack_and_check(scratch, layer, mt, 2);
    }
    funcd_bundle_remove_tree(scratch);
    return 0;
}
