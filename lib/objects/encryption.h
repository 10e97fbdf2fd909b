/*
 * Secrets at rest (docs/adr/0025-secret-encryption.md): the values of keys
 * under a prefix (the Secrets', "/registry/secrets/") are sealed with
 * AES-256-GCM before they reach the store driver and opened when read back,
 * as Kubernetes' EncryptionConfiguration aesgcm provider does.
 *
 * Envelope: "k8s:enc:aesgcm:v1:" || nonce (12 random bytes) || ciphertext ||
 * tag (16 bytes); the store key is the additional authenticated data, so a
 * value moved to another key does not open. A value without the prefix is
 * legacy plaintext (written before encryption was on) and is read as it is.
 *
 * Threads: the wrapping store is as thread-safe as the store it wraps.
 */
#ifndef FUNCD_OBJECTS_ENCRYPTION_H
#define FUNCD_OBJECTS_ENCRYPTION_H

#include <stddef.h>
#include <stdint.h>

#include "funcd/sys/store.h"

#define FUNCD_ENC_PREFIX "k8s:enc:aesgcm:v1:"
#define FUNCD_ENC_KEY_LEN 32
#define FUNCD_ENC_NONCE_LEN 12
#define FUNCD_ENC_TAG_LEN 16
#define FUNCD_SECRETS_PREFIX "/registry/secrets/"

/* 1 when `value` starts with the envelope prefix. */
int funcd_enc_is_sealed(const void *value, size_t len);

/* Seals `in` for store key `aad` into a malloc()ed, NUL-terminated `*out`. */
int funcd_enc_seal(const uint8_t key[FUNCD_ENC_KEY_LEN], const char *aad, const void *in,
                   size_t len, void **out, size_t *out_len);

/* Opens an envelope sealed for `aad` into a malloc()ed, NUL-terminated
 * `*out`: 0; a value without the prefix is copied as it is (legacy
 * plaintext): 1; FUNCD_EIO when it is truncated, was changed, or was sealed
 * with another key or for another store key (the message says which key). */
int funcd_enc_open(const uint8_t key[FUNCD_ENC_KEY_LEN], const char *aad, const void *in,
                   size_t len, void **out, size_t *out_len);

/* 32 random bytes. 0 or FUNCD_EIO. */
int funcd_enc_random_key(uint8_t key[FUNCD_ENC_KEY_LEN]);

/*
 * Reads the key file at `path`: 32 bytes, or their base64 (44 characters,
 * a trailing newline allowed). A missing file is created (mode 0600, 32
 * random bytes, synced) when `create` is set; `*created` (may be NULL) says
 * whether it was. Refuses a file that is not regular, is a symlink, or is
 * accessible by group or others (FUNCD_EINVAL, naming the mode and the fix).
 */
int funcd_enc_key_file(const char *path, int create, uint8_t key[FUNCD_ENC_KEY_LEN],
                       int *created);

/* FUNCD_EINVAL naming `what` and `path` when `fd` is not a regular file or
 * grants any permission to group or others; 0 otherwise. */
int funcd_check_private_file(int fd, const char *path, const char *what);

/*
 * A store that seals the values of keys under `prefix` (copied) with `key`
 * on their way into `inner` and opens them on the way out (get, list, watch
 * events). It owns `inner` from the call on (also on failure) and frees it
 * with itself; name and revision are inner's.
 */
int funcd_store_encrypting_new(funcd_store **out, funcd_store *inner,
                               const uint8_t key[FUNCD_ENC_KEY_LEN], const char *prefix);

/* The store an encrypting store wraps, or `s` itself. */
funcd_store *funcd_store_encrypting_inner(funcd_store *s);

/*
 * Opens every value under the prefix once, sealing what is still legacy
 * plaintext (a put at its revision; a key changed meanwhile is left to its
 * writer). FUNCD_EIO naming the first key that does not open (the wrong key
 * file, or damaged data). `*sealed` (may be NULL): how many were sealed.
 */
int funcd_store_encrypting_check(funcd_store *s, size_t *sealed);

#endif
