/*
 * Fuzz target for what funcd reads back as credentials: the Secret envelope
 * (lib/objects/encryption.c; a store's bytes may be damaged or tampered
 * with) and the token file (lib/controlplane/auth.c). The first byte picks:
 * even: the rest is a stored value, opened with a fixed key; it either
 * opens (and then only if it is legacy plaintext, or was sealed by that
 * key), or fails with a message; a value that opens as an envelope seals and
 * opens again to the same bytes. Odd: the rest is a token file (mode 0600);
 * it loads or fails with a message. Never a crash or a leak.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "controlplane/auth.h"
#include "funcd/sys/error.h"
#include "objects/encryption.h"

static const uint8_t key[FUNCD_ENC_KEY_LEN] = {7, 7, 7, 7, 7, 7, 7, 7, 9};
#define AAD "/registry/secrets/fuzz/s"

static void envelope(const uint8_t *data, size_t size)
{
    void *out = NULL;
    size_t len = 0;
    int rc = funcd_enc_open(key, AAD, data, size, &out, &len);
    if (rc < 0) {
        if (out || !funcd_error_last()->message[0])
            abort();
        return;
    }
    if (rc == 1 && (len != size || (size && memcmp(out, data, size) != 0)))
        abort(); /* legacy plaintext comes back as it is */
    void *sealed = NULL, *again = NULL;
    size_t sl = 0, al = 0;
    if (funcd_enc_seal(key, AAD, out, len, &sealed, &sl) != 0 ||
        funcd_enc_open(key, AAD, sealed, sl, &again, &al) != 0 || al != len ||
        (len && memcmp(again, out, len) != 0))
        abort();
    free(again);
    free(sealed);
    free(out);
}

static void token_file(const uint8_t *data, size_t size)
{
    char path[] = "/tmp/funcd-fuzz-tokens-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return;
    ssize_t n = size ? write(fd, data, size) : 0;
    close(fd);
    if (n == (ssize_t)size) {
        funcd_auth a = {0};
        int rc = funcd_auth_load_file(&a, path);
        if (rc < 0 && !funcd_error_last()->message[0])
            abort();
        for (size_t i = 0; rc == 0 && i < a.count; i++)
            if (!a.tokens[i].token[0] || !a.tokens[i].namespaces)
                abort();
        funcd_auth_clear(&a);
    }
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] & 1)
        token_file(data + 1, size - 1);
    else
        envelope(data + 1, size - 1);
    return 0;
}
