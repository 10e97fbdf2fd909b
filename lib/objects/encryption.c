#include "objects/encryption.h"

#include <errno.h>
#include <fcntl.h>
#include <mbedtls/base64.h>
#include <mbedtls/gcm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "funcd/sys/error.h"
#include "port/store.h"
#include "util/misc.h"

#define PREFIX_LEN (sizeof(FUNCD_ENC_PREFIX) - 1)
#define OVERHEAD (PREFIX_LEN + FUNCD_ENC_NONCE_LEN + FUNCD_ENC_TAG_LEN)

int funcd_enc_is_sealed(const void *value, size_t len)
{
    return len >= PREFIX_LEN && memcmp(value, FUNCD_ENC_PREFIX, PREFIX_LEN) == 0;
}

static int random_bytes(uint8_t *out, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = getrandom(out + got, len - got, 0);
        if (n > 0)
            got += (size_t)n;
        else if (errno != EINTR)
            return funcd_error_set(FUNCD_EIO, "cannot read random bytes: %s", strerror(errno));
    }
    return 0;
}

int funcd_enc_random_key(uint8_t key[FUNCD_ENC_KEY_LEN])
{
    return random_bytes(key, FUNCD_ENC_KEY_LEN);
}

static int gcm(const uint8_t key[FUNCD_ENC_KEY_LEN], int encrypt, const uint8_t *nonce,
               const char *aad, const uint8_t *in, size_t len, uint8_t *out, uint8_t *tag)
{
    mbedtls_gcm_context ctx;
    mbedtls_gcm_init(&ctx);
    int rc = mbedtls_gcm_setkey(&ctx, MBEDTLS_CIPHER_ID_AES, key, FUNCD_ENC_KEY_LEN * 8);
    const unsigned char *ad = (const unsigned char *)aad;
    if (rc == 0 && encrypt)
        rc = mbedtls_gcm_crypt_and_tag(&ctx, MBEDTLS_GCM_ENCRYPT, len, nonce, FUNCD_ENC_NONCE_LEN,
                                       ad, strlen(aad), in, out, FUNCD_ENC_TAG_LEN, tag);
    else if (rc == 0)
        rc = mbedtls_gcm_auth_decrypt(&ctx, len, nonce, FUNCD_ENC_NONCE_LEN, ad, strlen(aad), tag,
                                      FUNCD_ENC_TAG_LEN, in, out);
    mbedtls_gcm_free(&ctx);
    return rc;
}

int funcd_enc_seal(const uint8_t key[FUNCD_ENC_KEY_LEN], const char *aad, const void *in,
                   size_t len, void **out, size_t *out_len)
{
    *out = NULL;
    if (len > SIZE_MAX - OVERHEAD - 1)
        return funcd_error_set(FUNCD_EINVAL, "a value of %zu bytes is too large to encrypt", len);
    uint8_t *buf = malloc(OVERHEAD + len + 1);
    if (!buf)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory encrypting the value of %s", aad);
    memcpy(buf, FUNCD_ENC_PREFIX, PREFIX_LEN);
    uint8_t *nonce = buf + PREFIX_LEN, *ct = nonce + FUNCD_ENC_NONCE_LEN, *tag = ct + len;
    int rc = random_bytes(nonce, FUNCD_ENC_NONCE_LEN);
    if (rc == 0 && gcm(key, 1, nonce, aad, in, len, ct, tag) != 0)
        rc = funcd_error_set(FUNCD_EIO, "AES-GCM encryption of the value of %s failed", aad);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    buf[OVERHEAD + len] = '\0';
    *out = buf;
    *out_len = OVERHEAD + len;
    return 0;
}

int funcd_enc_open(const uint8_t key[FUNCD_ENC_KEY_LEN], const char *aad, const void *in,
                   size_t len, void **out, size_t *out_len)
{
    *out = NULL;
    if (!funcd_enc_is_sealed(in, len)) {
        uint8_t *copy = malloc(len + 1);
        if (!copy)
            return funcd_error_set(FUNCD_ENOMEM, "out of memory reading %s", aad);
        memcpy(copy, in, len);
        copy[len] = '\0';
        *out = copy;
        *out_len = len;
        return 1;
    }
    if (len < OVERHEAD)
        return funcd_error_set(FUNCD_EIO,
                               "the encrypted value of %s is truncated (%zu bytes, at least %zu "
                               "expected): the store is damaged",
                               aad, len, (size_t)OVERHEAD);
    const uint8_t *nonce = (const uint8_t *)in + PREFIX_LEN;
    const uint8_t *ct = nonce + FUNCD_ENC_NONCE_LEN;
    size_t n = len - OVERHEAD;
    uint8_t *buf = malloc(n + 1);
    if (!buf)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory decrypting %s", aad);
    uint8_t tag[FUNCD_ENC_TAG_LEN];
    memcpy(tag, ct + n, sizeof(tag));
    if (gcm(key, 0, nonce, aad, ct, n, buf, tag) != 0) {
        memset(buf, 0, n);
        free(buf);
        return funcd_error_set(FUNCD_EIO,
                               "the value of %s does not decrypt: it was encrypted with another "
                               "key (is the encryption key file the one this store was written "
                               "with?) or has been changed",
                               aad);
    }
    buf[n] = '\0';
    *out = buf;
    *out_len = n;
    return 0;
}

/* ---- files ---------------------------------------------------------------------------- */

int funcd_check_private_file(int fd, const char *path, const char *what)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return funcd_error_set(FUNCD_EIO, "cannot stat %s %s: %s", what, path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return funcd_error_set(FUNCD_EINVAL, "%s %s is not a regular file", what, path);
    if (st.st_mode & 077)
        return funcd_error_set(FUNCD_EINVAL,
                               "%s %s is accessible by group or others (mode %04o); it holds "
                               "credentials: chmod 600 %s",
                               what, path, (unsigned)(st.st_mode & 07777), path);
    return 0;
}

static int read_key(int fd, const char *path, uint8_t key[FUNCD_ENC_KEY_LEN])
{
    char buf[128];
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, sizeof(buf) - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return funcd_error_set(FUNCD_EIO, "cannot read encryption key file %s: %s", path,
                                   strerror(errno));
        if (r == 0 || (n += (size_t)r) == sizeof(buf))
            break;
    }
    int rc = 0;
    if (n == FUNCD_ENC_KEY_LEN) {
        memcpy(key, buf, FUNCD_ENC_KEY_LEN);
    } else {
        size_t len = n, olen = 0;
        while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
            len--;
        uint8_t dec[96];
        if (len == 0 || len >= sizeof(buf) ||
            mbedtls_base64_decode(dec, sizeof(dec), &olen, (const unsigned char *)buf, len) != 0 ||
            olen != FUNCD_ENC_KEY_LEN)
            rc = funcd_error_set(FUNCD_EINVAL,
                                 "encryption key file %s must hold 32 bytes, or their base64 "
                                 "(e.g. `head -c 32 /dev/urandom > FILE`); it has %zu bytes%s",
                                 path, n, n == sizeof(buf) ? " or more" : "");
        else
            memcpy(key, dec, FUNCD_ENC_KEY_LEN);
        memset(dec, 0, sizeof(dec));
    }
    memset(buf, 0, sizeof(buf));
    return rc;
}

static void sync_parent(const char *path)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) {
        dir[0] = '.', dir[1] = '\0';
    } else {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        if (n >= sizeof(dir))
            return;
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

static int create_key(const char *path, uint8_t key[FUNCD_ENC_KEY_LEN])
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno == EEXIST ? 1 /* another process made it: read that one */
                               : funcd_error_set(FUNCD_EIO,
                                                 "cannot create encryption key file %s: %s",
                                                 path, strerror(errno));
    int rc = funcd_enc_random_key(key);
    if (rc == 0 && (fchmod(fd, 0600) != 0 || funcd_write_all(fd, key, FUNCD_ENC_KEY_LEN) != 0 ||
                    fsync(fd) != 0))
        rc = funcd_error_set(FUNCD_EIO, "cannot write encryption key file %s: %s", path,
                             strerror(errno));
    close(fd);
    if (rc < 0) {
        unlink(path);
        return rc;
    }
    sync_parent(path);
    return 0;
}

int funcd_enc_key_file(const char *path, int create, uint8_t key[FUNCD_ENC_KEY_LEN], int *created)
{
    if (created)
        *created = 0;
    if (!path || !*path)
        return funcd_error_set(FUNCD_EINVAL, "the encryption key file needs a path");
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && create) {
        int rc = create_key(path, key);
        if (rc <= 0) {
            if (rc == 0 && created)
                *created = 1;
            return rc;
        }
        fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0)
        return funcd_error_set(errno == ELOOP ? FUNCD_EINVAL : FUNCD_EIO,
                               "cannot open encryption key file %s: %s%s", path, strerror(errno),
                               errno == ELOOP ? " (a symlink is not accepted)" : "");
    int rc = funcd_check_private_file(fd, path, "encryption key file");
    if (rc == 0)
        rc = read_key(fd, path, key);
    close(fd);
    return rc;
}

/* ---- the wrapping store --------------------------------------------------------------- */

typedef struct enc_store {
    funcd_store base;
    funcd_store *inner;
    uint8_t key[FUNCD_ENC_KEY_LEN];
    char *prefix;
} enc_store;

typedef struct enc_watch {
    funcd_store_watch *inner;
    enc_store *es;
    funcd_store_watch_cb cb;
    void *payload;
} enc_watch;

static enc_store *es_of(funcd_store *s)
{
    return (enc_store *)s;
}

static int covered(const enc_store *es, const char *key)
{
    return key && strncmp(key, es->prefix, strlen(es->prefix)) == 0;
}

static int es_get(funcd_store *s, const char *key, funcd_store_value *out)
{
    enc_store *es = es_of(s);
    int rc = funcd_port_store_get(es->inner, key, out);
    if (rc < 0 || !covered(es, key))
        return rc;
    void *plain;
    size_t n;
    rc = funcd_enc_open(es->key, key, out->value, out->len, &plain, &n);
    free(out->value);
    out->value = NULL;
    if (rc < 0)
        return rc;
    out->value = plain;
    out->len = n;
    return 0;
}

static int es_put(funcd_store *s, const char *key, const void *value, size_t len,
                  uint64_t expected, uint64_t *revision)
{
    enc_store *es = es_of(s);
    if (!covered(es, key))
        return funcd_port_store_put(es->inner, key, value, len, expected, revision);
    void *sealed;
    size_t n;
    int rc = funcd_enc_seal(es->key, key, value, len, &sealed, &n);
    if (rc < 0)
        return rc;
    rc = funcd_port_store_put(es->inner, key, sealed, n, expected, revision);
    free(sealed);
    return rc;
}

static int es_del(funcd_store *s, const char *key, uint64_t expected, uint64_t *revision)
{
    enc_store *es = es_of(s);
    return funcd_port_store_del(es->inner, key, expected, revision);
}

typedef struct list_ctx {
    enc_store *es;
    funcd_store_list_cb cb;
    void *payload;
    int err; /* the error that stopped the listing */
} list_ctx;

static int list_one(const funcd_store_kv *kv, void *payload)
{
    list_ctx *lc = payload;
    if (!covered(lc->es, kv->key))
        return lc->cb(kv, lc->payload);
    void *plain;
    size_t n;
    int rc = funcd_enc_open(lc->es->key, kv->key, kv->value, kv->len, &plain, &n);
    if (rc < 0) {
        lc->err = rc;
        return 1;
    }
    funcd_store_kv copy = *kv;
    copy.value = plain;
    copy.len = n;
    int stop = lc->cb(&copy, lc->payload);
    memset(plain, 0, n);
    free(plain);
    return stop;
}

static int es_list(funcd_store *s, const char *prefix, funcd_store_list_cb cb, void *payload,
                   uint64_t *revision)
{
    enc_store *es = es_of(s);
    if (!cb)
        return funcd_port_store_list(es->inner, prefix, cb, payload, revision);
    list_ctx lc = {es, cb, payload, 0};
    char msg[1024];
    int rc = funcd_port_store_list(es->inner, prefix, list_one, &lc, revision);
    if (rc == 0 && lc.err < 0) {
        /* the callback's message, set again after the listing's cleanup */
        snprintf(msg, sizeof(msg), "%s", funcd_error_last()->message);
        rc = funcd_error_set(lc.err, "%s", msg);
    }
    return rc;
}

static void on_event(const funcd_store_event *ev, void *payload)
{
    enc_watch *w = payload;
    if (!covered(w->es, ev->key)) {
        w->cb(ev, w->payload);
        return;
    }
    void *plain = NULL;
    size_t n = 0;
    funcd_store_event copy = *ev;
    if (funcd_enc_open(w->es->key, ev->key, ev->value, ev->len, &plain, &n) < 0) {
        copy.value = ""; /* no plaintext to give: consumers see an undecodable value */
        copy.len = 0;
    } else {
        copy.value = plain;
        copy.len = n;
    }
    w->cb(&copy, w->payload);
    if (plain) {
        memset(plain, 0, n);
        free(plain);
    }
}

static int es_watch(funcd_store *s, const char *prefix, uint64_t after, funcd_store_watch_cb cb,
                    void *payload, funcd_store_watch **out)
{
    enc_store *es = es_of(s);
    if (!cb || !out)
        return funcd_port_store_watch(es->inner, prefix, after, cb, payload, out);
    enc_watch *w = calloc(1, sizeof(*w));
    if (!w)
        return funcd_error_set(FUNCD_ENOMEM, "store: out of memory starting a watch");
    *w = (enc_watch){NULL, es, cb, payload};
    int rc = funcd_port_store_watch(es->inner, prefix, after, on_event, w, &w->inner);
    if (rc < 0) {
        free(w);
        return rc;
    }
    *out = (funcd_store_watch *)(void *)w;
    return 0;
}

static void es_unwatch(funcd_store *s, funcd_store_watch *handle)
{
    enc_store *es = es_of(s);
    enc_watch *w = (enc_watch *)(void *)handle;
    if (!w)
        return;
    funcd_port_store_unwatch(es->inner, w->inner);
    free(w);
}

static uint64_t es_revision(funcd_store *s)
{
    enc_store *es = es_of(s);
    return funcd_port_store_revision(es->inner);
}

static void es_free(funcd_store *s)
{
    enc_store *es = es_of(s);
    if (!es)
        return;
    if (es->inner)
        funcd_port_store_free(es->inner);
    memset(es->key, 0, sizeof(es->key));
    free(es->prefix);
    free(es);
}

int funcd_store_encrypting_new(funcd_store **out, funcd_store *inner,
                               const uint8_t key[FUNCD_ENC_KEY_LEN], const char *prefix)
{
    *out = NULL;
    enc_store *es = calloc(1, sizeof(*es));
    if (!es || !(es->prefix = strdup(prefix ? prefix : ""))) {
        free(es);
        if (inner)
            funcd_port_store_free(inner);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory wrapping the store");
    }
    es->inner = inner;
    memcpy(es->key, key, FUNCD_ENC_KEY_LEN);
    es->base.version = FUNCD_STORE_VERSION;
    es->base.name = inner->name;
    es->base.get = es_get;
    es->base.put = es_put;
    es->base.del = es_del;
    es->base.list = es_list;
    es->base.watch = es_watch;
    es->base.unwatch = es_unwatch;
    es->base.revision = es_revision;
    es->base.free = es_free;
    *out = &es->base;
    return 0;
}

funcd_store *funcd_store_encrypting_inner(funcd_store *s)
{
    return s && s->get == es_get ? es_of(s)->inner : s;
}

/* ---- the start-up check ---------------------------------------------------------------- */

typedef struct legacy {
    char *key;
    void *value;
    size_t len;
    uint64_t revision;
} legacy;

typedef struct check_ctx {
    enc_store *es;
    legacy *items;
    size_t n, cap;
    int err;
} check_ctx;

static int check_one(const funcd_store_kv *kv, void *payload)
{
    check_ctx *cc = payload;
    void *plain;
    size_t n;
    int rc = funcd_enc_open(cc->es->key, kv->key, kv->value, kv->len, &plain, &n);
    if (rc < 0) {
        cc->err = rc;
        return 1;
    }
    if (rc == 0) {
        memset(plain, 0, n);
        free(plain);
        return 0;
    }
    if (cc->n == cc->cap) {
        size_t cap = cc->cap ? cc->cap * 2 : 8;
        legacy *grown = realloc(cc->items, cap * sizeof(*grown));
        if (!grown) {
            free(plain);
            cc->err = funcd_error_set(FUNCD_ENOMEM, "out of memory checking secrets");
            return 1;
        }
        cc->items = grown;
        cc->cap = cap;
    }
    legacy *l = &cc->items[cc->n];
    if (!(l->key = strdup(kv->key))) {
        free(plain);
        cc->err = funcd_error_set(FUNCD_ENOMEM, "out of memory checking secrets");
        return 1;
    }
    l->value = plain;
    l->len = n;
    l->revision = kv->revision;
    cc->n++;
    return 0;
}

int funcd_store_encrypting_check(funcd_store *s, size_t *sealed)
{
    if (sealed)
        *sealed = 0;
    if (!s || s->get != es_get)
        return 0;
    enc_store *es = es_of(s);
    check_ctx cc = {es, NULL, 0, 0, 0};
    char msg[1024];
    int rc = funcd_port_store_list(es->inner, es->prefix, check_one, &cc, NULL);
    if (rc == 0 && cc.err < 0) {
        snprintf(msg, sizeof(msg), "%s", funcd_error_last()->message);
        rc = funcd_error_set(cc.err, "%s", msg);
    }
    for (size_t i = 0; i < cc.n; i++) {
        /* a key written meanwhile (ECONFLICT) is sealed by that write */
        if (rc == 0 && es_put(s, cc.items[i].key, cc.items[i].value, cc.items[i].len,
                              cc.items[i].revision, NULL) == 0 && sealed)
            (*sealed)++;
        memset(cc.items[i].value, 0, cc.items[i].len);
        free(cc.items[i].value);
        free(cc.items[i].key);
    }
    free(cc.items);
    return rc;
}
