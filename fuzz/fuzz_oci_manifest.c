/*
 * Fuzz target for lib/oci's JSON parsers: any bytes as a manifest, an index
 * (for several platforms) and an image config. What must hold for every
 * input: an accepted manifest's digests are safe file names (sha256: and 64
 * lowercase hex), and whatever was parsed frees cleanly.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oci/oci.h"

static void check_digest(const char *d)
{
    int ok = d && strncmp(d, "sha256:", 7) == 0 && strlen(d) == 71 &&
             strspn(d + 7, "0123456789abcdef") == 64;
    if (!ok) {
        fprintf(stderr, "fuzz_oci_manifest: accepted digest \"%s\"\n", d ? d : "(null)");
        abort();
    }
}

static void parse_manifest(const char *json, size_t len, const char *mt, const char *os,
                           const char *arch)
{
    funcd_oci_manifest m;
    if (funcd_oci_manifest_parse(&m, json, len, mt, os, arch) < 0)
        return;
    if (m.is_index) {
        check_digest(m.selected.digest);
    } else {
        check_digest(m.config.digest);
        for (size_t i = 0; i < m.n_layers; i++)
            check_digest(m.layers[i].digest);
    }
    funcd_oci_manifest_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *json = (const char *)data;
    parse_manifest(json, size, NULL, "linux", "amd64");
    parse_manifest(json, size, FUNCD_OCI_MT_OCI_INDEX, "linux", "arm64");
    parse_manifest(json, size, FUNCD_OCI_MT_DOCKER_LIST, "linux", "arm/v7");
    parse_manifest(json, size, FUNCD_OCI_MT_DOCKER_MANIFEST "; charset=utf-8", NULL, NULL);
    funcd_oci_config c;
    if (funcd_oci_config_parse(&c, json, size) == 0)
        funcd_oci_config_free(&c);
    return 0;
}
