/*
 * Credentials at rest, against hostile input: the token-file parser and its
 * permission check (lib/controlplane/auth.c), the encryption key file and
 * the AES-GCM envelope of Secrets (lib/objects/encryption.c), and the
 * encrypting store over a real memory store.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#include "controlplane/auth.h"
#include "funcd/sys/error.h"
#include "funcd/sys/store.h"
#include "objects/encryption.h"

static char dir[] = "/tmp/funcd-unit-secrets-XXXXXX";

/* Writes `text` to dir/name with `mode`; the path into `path`. */
static int write_file(const char *name, const void *text, size_t len, mode_t mode, char *path,
                      size_t path_len)
{
    snprintf(path, path_len, "%s/%s", dir, name);
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, len);
    int rc = n == (ssize_t)len && fchmod(fd, mode) == 0 ? 0 : -1;
    close(fd);
    return rc;
}

static int load_tokens(const char *text, mode_t mode, funcd_auth *a)
{
    char path[256];
    if (write_file("tokens", text, strlen(text), mode, path, sizeof(path)) < 0)
        return -1000;
    return funcd_auth_load_file(a, path);
}

/* ---- token file ------------------------------------------------------------------------ */

TEST(token_file_readable_by_others_is_refused)
{
    static const mode_t bad[] = {0644, 0640, 0604, 0660, 0602, 0620, 0601, 0610, 0666};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        funcd_auth a = {0};
        int rc = load_tokens("t1 admin\n", bad[i], &a);
        size_t count = a.count;
        funcd_auth_clear(&a);
        if (rc != FUNCD_EINVAL)
            FAILF("mode %04o: rc %d, expected FUNCD_EINVAL", (unsigned)bad[i], rc);
        CHECK_INT(count, 0);
        CHECK_CONTAINS(funcd_error_last()->message, "chmod 600");
    }
    funcd_auth a = {0};
    CHECK_INT(load_tokens("t1 admin\n", 0600, &a), 0);
    CHECK_INT(a.count, 1);
    funcd_auth_clear(&a);
    CHECK_INT(load_tokens("t1 admin\n", 0400, &a), 0);
    funcd_auth_clear(&a);
}

TEST(token_file_not_regular_is_refused)
{
    funcd_auth a = {0};
    char path[256];
    snprintf(path, sizeof(path), "%s/tokdir", dir);
    mkdir(path, 0700);
    CHECK(funcd_auth_load_file(&a, path) < 0);
    CHECK_INT(a.count, 0);
    CHECK(funcd_auth_load_file(&a, "/dev/null") < 0);
    funcd_auth_clear(&a);
}

TEST(token_file_hostile_lines)
{
    static const char *const bad[] = {
        "tok\n",                          /* no role */
        "tok developer\n",                /* no namespace */
        "tok root ns\n",                  /* unknown role */
        "tok viewer a b c\n",             /* a field after the name */
        "good admin\ntok developer\n",    /* second line bad */
        "tok viewer ,,,,\n",              /* namespaces that are only commas: "*"? no: refused */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        funcd_auth a = {0};
        int rc = load_tokens(bad[i], 0600, &a);
        funcd_auth_clear(&a);
        if (i == 5) /* strtok skips empty fields: no namespace given, which means "*" today */
            continue;
        if (rc != FUNCD_EINVAL)
            FAILF("line %zu: rc %d, expected FUNCD_EINVAL", i, rc);
    }
    /* 64 namespaces: more than a line may name */
    char many[1024] = "tok viewer ";
    for (int i = 0; i < 64; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "%sn%d", i ? "," : "", i);
    strcat(many, "\n");
    funcd_auth a = {0};
    CHECK_INT(load_tokens(many, 0600, &a), FUNCD_EINVAL);
    funcd_auth_clear(&a);
    /* NUL bytes and a very long line do not crash; an empty file has no token */
    static const char nul[] = "tok\0en admin\n";
    char path[256];
    CHECK(write_file("nul", nul, sizeof(nul) - 1, 0600, path, sizeof(path)) == 0);
    funcd_auth_load_file(&a, path);
    funcd_auth_clear(&a);
    char *longline = malloc(20000);
    CHECK(longline != NULL);
    memset(longline, 'x', 19990);
    memcpy(longline + 19990, " admin\n", 8);
    int rc = load_tokens(longline, 0600, &a);
    free(longline);
    funcd_auth_clear(&a);
    (void)rc;
    CHECK_INT(load_tokens("", 0600, &a), 0);
    CHECK_INT(a.count, 0);
    CHECK_INT(load_tokens("# only a comment\n\n", 0600, &a), 0);
    CHECK_INT(a.count, 0);
    funcd_auth_clear(&a);
}

/* ---- the envelope ---------------------------------------------------------------------- */

static const uint8_t key1[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};
static const uint8_t key2[32] = {32, 31, 30};

#define K "/registry/secrets/default/db"
static const char plain[] = "{\"data\":{\"password\":\"aHVudGVyMg==\"}}";

static int holds(const void *hay, size_t len, const char *needle)
{
    const char *h = hay;
    size_t n = strlen(needle);
    for (size_t i = 0; h && i + n <= len; i++)
        if (memcmp(h + i, needle, n) == 0)
            return 1;
    return 0;
}

TEST(envelope_round_trip_and_format)
{
    void *sealed = NULL, *opened = NULL;
    size_t sl = 0, ol = 0;
    CHECK_INT(funcd_enc_seal(key1, K, plain, strlen(plain), &sealed, &sl), 0);
    if (!sealed)
        FAILF("nothing sealed");
    CHECK(funcd_enc_is_sealed(sealed, sl));
    CHECK_INT(sl, strlen(FUNCD_ENC_PREFIX) + 12 + strlen(plain) + 16);
    CHECK(!holds(sealed, sl, "aHVudGVyMg"));
    CHECK(!holds(sealed, sl, "password"));
    CHECK_INT(funcd_enc_open(key1, K, sealed, sl, &opened, &ol), 0);
    CHECK_INT(ol, strlen(plain));
    CHECK_STR((char *)opened, plain);
    free(opened);
    /* a fresh nonce each time: the same value seals differently */
    void *again = NULL;
    size_t al = 0;
    CHECK_INT(funcd_enc_seal(key1, K, plain, strlen(plain), &again, &al), 0);
    CHECK(al == sl && memcmp(again, sealed, sl) != 0);
    free(again);
    /* empty value */
    CHECK_INT(funcd_enc_seal(key1, K, "", 0, &again, &al), 0);
    CHECK_INT(funcd_enc_open(key1, K, again, al, &opened, &ol), 0);
    CHECK_INT(ol, 0);
    free(opened);
    free(again);
    free(sealed);
}

TEST(envelope_refuses_tampering_wrong_key_and_truncation)
{
    void *sealed = NULL, *opened = (void *)1;
    size_t sl = 0, ol = 0;
    CHECK_INT(funcd_enc_seal(key1, K, plain, strlen(plain), &sealed, &sl), 0);
    uint8_t *b = sealed;
    /* every single bit flip after the prefix is detected */
    for (size_t i = strlen(FUNCD_ENC_PREFIX); i < sl; i++) {
        for (int bit = 0; bit < 8; bit += 3) {
            b[i] ^= (uint8_t)(1 << bit);
            int rc = funcd_enc_open(key1, K, b, sl, &opened, &ol);
            b[i] ^= (uint8_t)(1 << bit);
            if (rc != FUNCD_EIO || opened)
                FAILF("flip at %zu bit %d: rc %d", i, bit, rc);
        }
    }
    CHECK_INT(funcd_enc_open(key2, K, sealed, sl, &opened, &ol), FUNCD_EIO);
    CHECK(opened == NULL);
    CHECK_CONTAINS(funcd_error_last()->message, "another key");
    /* moved to another key of the store: the AAD does not match */
    CHECK_INT(funcd_enc_open(key1, "/registry/secrets/default/other", sealed, sl, &opened, &ol),
              FUNCD_EIO);
    /* every truncation */
    for (size_t n = strlen(FUNCD_ENC_PREFIX); n < sl; n++)
        if (funcd_enc_open(key1, K, sealed, n, &opened, &ol) != FUNCD_EIO || opened)
            FAILF("truncated to %zu bytes was accepted", n);
    CHECK_CONTAINS(funcd_error_last()->message, K);
    free(sealed);
}

/* A value sealed by another AES-GCM implementation (Python's cryptography,
 * key 07*8 09 00*23, nonce 00..0b, AAD /registry/secrets/fuzz/s) opens. */
TEST(envelope_known_answer)
{
    static const uint8_t k[32] = {7, 7, 7, 7, 7, 7, 7, 7, 9};
    static const char sealed[] =
        "\x6b\x38\x73\x3a\x65\x6e\x63\x3a\x61\x65\x73\x67\x63\x6d\x3a\x76"
        "\x31\x3a\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0d\x99"
        "\xf0\x1d\x3b\xa4\xde\x6d\x47\xeb\xa1\x7b\x13\x1f\xc4\xb7\x62\xb8"
        "\x13\xa3\x3b\x1c\x52\x7e\xef\x8c\xa5\xe5\xe8\xdc\xd1\x68\x6f\x20"
        "\x42\x43\x78\x53\x55\x30\xf4\xc7\xac\x4e\xdc\x3c\x36\xe6\x2b\xaf"
        "\xce\xe3\xba";
    void *out = NULL;
    size_t n = 0;
    CHECK_INT(funcd_enc_open(k, "/registry/secrets/fuzz/s", sealed, sizeof(sealed) - 1, &out, &n),
              0);
    CHECK_STR((char *)out, "{\"kind\":\"Secret\",\"data\":{\"k\":\"dg==\"}}");
    free(out);
}

TEST(envelope_without_prefix_is_legacy_plaintext)
{
    void *opened = NULL;
    size_t ol = 0;
    CHECK_INT(funcd_enc_open(key1, K, plain, strlen(plain), &opened, &ol), 1);
    CHECK_STR((char *)opened, plain);
    free(opened);
    /* a prefix cut short is plaintext too, not a crash */
    CHECK_INT(funcd_enc_open(key1, K, "k8s:enc:aes", 11, &opened, &ol), 1);
    free(opened);
    CHECK_INT(funcd_enc_open(key1, K, "", 0, &opened, &ol), 1);
    CHECK_INT(ol, 0);
    free(opened);
    CHECK_INT(funcd_enc_open(key1, K, FUNCD_ENC_PREFIX, strlen(FUNCD_ENC_PREFIX), &opened, &ol),
              FUNCD_EIO);
}

/* ---- the key file ---------------------------------------------------------------------- */

TEST(key_file_created_0600_and_read_back)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/new.key", dir);
    unlink(path);
    uint8_t k[32], again[32];
    int created = 0;
    CHECK_INT(funcd_enc_key_file(path, 0, k, &created), FUNCD_EIO); /* no create: missing */
    CHECK_INT(funcd_enc_key_file(path, 1, k, &created), 0);
    CHECK_INT(created, 1);
    struct stat st;
    CHECK(stat(path, &st) == 0);
    CHECK_INT(st.st_mode & 07777, 0600);
    CHECK_INT(st.st_size, 32);
    CHECK_INT(funcd_enc_key_file(path, 1, again, &created), 0);
    CHECK_INT(created, 0);
    CHECK(memcmp(k, again, 32) == 0);
    /* base64 of the same bytes, with a newline, reads as the same key */
    static const char b64[] = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=\n";
    CHECK(write_file("b64.key", b64, strlen(b64), 0600, path, sizeof(path)) == 0);
    CHECK_INT(funcd_enc_key_file(path, 0, again, NULL), 0);
    CHECK(memcmp(again, key1, 32) == 0);
}

TEST(key_file_hostile)
{
    char path[256];
    uint8_t k[32];
    /* group/other readable */
    CHECK(write_file("open.key", key1, 32, 0644, path, sizeof(path)) == 0);
    CHECK_INT(funcd_enc_key_file(path, 1, k, NULL), FUNCD_EINVAL);
    CHECK_CONTAINS(funcd_error_last()->message, "chmod 600");
    /* wrong lengths, bad base64 */
    static const struct { const char *text; size_t len; } bad[] = {
        {"", 0}, {"short", 5}, {"0123456789012345678901234567890", 31},
        {"012345678901234567890123456789012", 33},
        {"AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHw==\n", 45}, /* 31 bytes */
        {"!!!!BAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=\n", 45},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK(write_file("bad.key", bad[i].text, bad[i].len, 0600, path, sizeof(path)) == 0);
        if (funcd_enc_key_file(path, 1, k, NULL) != FUNCD_EINVAL)
            FAILF("bad key %zu accepted", i);
    }
    char big[4096];
    memset(big, 'A', sizeof(big));
    CHECK(write_file("big.key", big, sizeof(big), 0600, path, sizeof(path)) == 0);
    CHECK_INT(funcd_enc_key_file(path, 1, k, NULL), FUNCD_EINVAL);
    /* a symlink is not followed, a directory is not a key */
    char link[256];
    snprintf(link, sizeof(link), "%s/link.key", dir);
    unlink(link);
    CHECK(write_file("target.key", key1, 32, 0600, path, sizeof(path)) == 0);
    CHECK(symlink(path, link) == 0);
    CHECK(funcd_enc_key_file(link, 1, k, NULL) < 0);
    snprintf(path, sizeof(path), "%s/keydir", dir);
    mkdir(path, 0700);
    CHECK(funcd_enc_key_file(path, 1, k, NULL) < 0);
    CHECK(funcd_enc_key_file("/nonexistent-dir/funcd.key", 1, k, NULL) < 0);
}

/* ---- the encrypting store --------------------------------------------------------------- */

typedef struct seen {
    char value[512];
    int events;
} seen;

static int remember(const funcd_store_kv *kv, void *payload)
{
    seen *s = payload;
    snprintf(s->value, sizeof(s->value), "%.*s", (int)kv->len, (const char *)kv->value);
    s->events++;
    return 0;
}

static void on_event(const funcd_store_event *ev, void *payload)
{
    seen *s = payload;
    snprintf(s->value, sizeof(s->value), "%.*s", (int)ev->len, (const char *)ev->value);
    s->events++;
}

TEST(encrypting_store_seals_only_its_prefix)
{
    funcd_store *inner = NULL, *s = NULL;
    CHECK_INT(funcd_store_memory_new(&inner, 0), 0);
    /* legacy plaintext, written before encryption was on */
    CHECK_INT(inner->put(inner, K, plain, strlen(plain), FUNCD_STORE_ANY, NULL), 0);
    CHECK_INT(funcd_store_encrypting_new(&s, inner, key1, FUNCD_SECRETS_PREFIX), 0);
    CHECK(funcd_store_encrypting_inner(s) == inner);
    CHECK_STR(s->name, "memory");
    seen w = {{0}, 0};
    funcd_store_watch *wh = NULL;
    CHECK_INT(s->watch(s, "/registry/", 0, on_event, &w, &wh), 0);
    CHECK_INT(w.events, 1); /* the replayed plaintext put */
    CHECK_STR(w.value, plain);
    size_t sealed = 0;
    CHECK_INT(funcd_store_encrypting_check(s, &sealed), 0);
    CHECK_INT(sealed, 1);
    CHECK_INT(w.events, 2);
    CHECK_STR(w.value, plain); /* watchers see plaintext */
    funcd_store_value v = {0};
    CHECK_INT(inner->get(inner, K, &v), 0);
    int at_rest_sealed = funcd_enc_is_sealed(v.value, v.len);
    free(v.value);
    CHECK(at_rest_sealed);
    CHECK_INT(s->get(s, K, &v), 0);
    CHECK_STR((char *)v.value, plain);
    free(v.value);
    seen l = {{0}, 0};
    CHECK_INT(s->list(s, "/registry/", remember, &l, NULL), 0);
    CHECK_STR(l.value, plain);
    /* another kind stays as it is */
    CHECK_INT(s->put(s, "/registry/functions/default/f", "{}", 2, FUNCD_STORE_ANY, NULL), 0);
    CHECK_INT(inner->get(inner, "/registry/functions/default/f", &v), 0);
    CHECK_STR((char *)v.value, "{}");
    free(v.value);
    CHECK_INT(s->del(s, K, FUNCD_STORE_ANY, NULL), 0);
    CHECK_INT(w.events, 4);
    CHECK_STR(w.value, plain); /* the delete's previous value, opened */
    s->unwatch(s, wh);
    s->free(s);
}

TEST(encrypting_store_with_the_wrong_key_refuses_to_read)
{
    funcd_store *inner = NULL, *s = NULL, *other = NULL;
    CHECK_INT(funcd_store_memory_new(&inner, 0), 0);
    void *sealed;
    size_t sl;
    CHECK_INT(funcd_enc_seal(key1, K, plain, strlen(plain), &sealed, &sl), 0);
    CHECK_INT(inner->put(inner, K, sealed, sl, FUNCD_STORE_ANY, NULL), 0);
    free(sealed);
    CHECK_INT(funcd_store_encrypting_new(&other, inner, key2, FUNCD_SECRETS_PREFIX), 0);
    s = other;
    CHECK_INT(funcd_store_encrypting_check(s, NULL), FUNCD_EIO);
    CHECK_CONTAINS(funcd_error_last()->message, K);
    funcd_store_value v = {0};
    CHECK_INT(s->get(s, K, &v), FUNCD_EIO);
    CHECK(v.value == NULL);
    seen l = {{0}, 0};
    CHECK_INT(s->list(s, "/registry/", remember, &l, NULL), FUNCD_EIO);
    CHECK_INT(l.events, 0);
    seen w = {{0}, 0};
    funcd_store_watch *wh = NULL;
    CHECK_INT(s->watch(s, "/registry/", 0, on_event, &w, &wh), 0);
    CHECK_INT(w.events, 1);
    CHECK_STR(w.value, ""); /* no plaintext leaks out, and no ciphertext either */
    s->unwatch(s, wh);
    s->free(s);
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(token_file_readable_by_others_is_refused);
    RUN(token_file_not_regular_is_refused);
    RUN(token_file_hostile_lines);
    RUN(envelope_round_trip_and_format);
    RUN(envelope_refuses_tampering_wrong_key_and_truncation);
    RUN(envelope_known_answer);
    RUN(envelope_without_prefix_is_legacy_plaintext);
    RUN(key_file_created_0600_and_read_back);
    RUN(key_file_hostile);
    RUN(encrypting_store_seals_only_its_prefix);
    RUN(encrypting_store_with_the_wrong_key_refuses_to_read);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
    return HARNESS_END();
}
