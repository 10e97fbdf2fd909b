/*
 * Fuzz target for lib/oci's auth inputs: any bytes as a WWW-Authenticate
 * challenge and as a Docker config JSON looked up for a few hosts. What must
 * hold: a parsed challenge has a non-empty scheme; a lookup that succeeds
 * hands back a user with a password, or an identity token.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oci/oci.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_www_authenticate: %s\n", what);
        abort();
    }
}

static void lookup(const char *json, const char *host)
{
    char *user, *pass, *token;
    int rc = funcd_docker_config_lookup(json, host, &user, &pass, &token);
    if (rc == 0)
        check((user && pass) || token, "a lookup succeeded without credentials");
    else
        check(!user && !pass && !token, "a failed lookup left credentials behind");
    free(user);
    free(pass);
    free(token);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    funcd_www_authenticate w;
    if (funcd_www_authenticate_parse(&w, s) == 0) {
        check(w.scheme && w.scheme[0], "a challenge without a scheme");
        funcd_www_authenticate_free(&w);
    }
    lookup(s, "registry-1.docker.io");
    lookup(s, "127.0.0.1:5000");
    free(s);
    return 0;
}
