/* TLS: loading a certificate and key, and the OpenSSL server contexts. */
#include "tls/tls.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "funcd/sys/error.h"

/* OpenSSL's last error, in words, with its queue emptied. */
static const char *ssl_reason(char *buf, size_t len)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    snprintf(buf, len, "%s", r ? r : "not valid PEM");
    ERR_clear_error();
    return buf;
}

static FILE *open_pem(const char *path, const char *what)
{
    FILE *f = fopen(path, "re");
    if (!f)
        funcd_error_set(FUNCD_EINVAL, "cannot read the TLS %s %s: %s", what, path,
                        strerror(errno));
    return f;
}

static void fingerprint_of(X509 *crt, char out[FUNCD_TLS_FINGERPRINT_LEN + 1])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    out[0] = '\0';
    if (!X509_digest(crt, EVP_sha256(), md, &n))
        return;
    for (unsigned i = 0; i < n && i < 32; i++)
        snprintf(out + 3 * i, 4, "%02X%s", md[i], i + 1 < n ? ":" : "");
}

int funcd_tls_load(funcd_tls *t, const char *cert, const char *key)
{
    char why[256];
    funcd_tls_clear(t);
    FILE *f = open_pem(cert, "certificate");
    if (!f)
        return FUNCD_EINVAL;
    X509 *crt = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    if (!crt)
        return funcd_error_set(FUNCD_EINVAL, "the TLS certificate %s holds no PEM certificate "
                               "(%s)", cert, ssl_reason(why, sizeof(why)));
    if (!(f = open_pem(key, "key"))) {
        X509_free(crt);
        return FUNCD_EINVAL;
    }
    EVP_PKEY *pkey = PEM_read_PrivateKey(f, NULL, NULL, NULL);
    fclose(f);
    if (!pkey) {
        X509_free(crt);
        return funcd_error_set(FUNCD_EINVAL, "the TLS key %s holds no PEM private key (%s; an "
                               "encrypted key is not supported)", key, ssl_reason(why, sizeof(why)));
    }
    int match = X509_check_private_key(crt, pkey);
    ERR_clear_error();
    EVP_PKEY_free(pkey);
    if (!match) {
        X509_free(crt);
        return funcd_error_set(FUNCD_EINVAL, "the TLS key %s does not belong to the certificate "
                               "%s", key, cert);
    }
    fingerprint_of(crt, t->fingerprint);
    X509_free(crt);
    t->cert_file = strdup(cert);
    t->key_file = strdup(key);
    if (!t->cert_file || !t->key_file) {
        funcd_tls_clear(t);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory");
    }
    return 0;
}

void funcd_tls_clear(funcd_tls *t)
{
    free(t->cert_file);
    free(t->key_file);
    memset(t, 0, sizeof(*t));
}

/* Picks the first of the server's protocols the client offers; none in
 * common: no protocol (the client then speaks what it speaks, and the
 * listener answers that as it would without TLS). */
static int select_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned inlen, void *arg)
{
    const unsigned char *mine = arg;
    unsigned char *sel;
    if (SSL_select_next_proto(&sel, outlen, mine, (unsigned)strlen((const char *)mine), in,
                              inlen) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_NOACK;
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

SSL_CTX *funcd_tls_server_ctx(const funcd_tls *t, const char *alpn)
{
    char why[256];
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        funcd_error_set(FUNCD_ENOMEM, "cannot create a TLS context: %s",
                        ssl_reason(why, sizeof(why)));
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE |
                                 SSL_OP_NO_RENEGOTIATION);
    /* Buffers are released while a connection is idle: many keep-alive
     * connections cost little. */
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    if (SSL_CTX_use_certificate_chain_file(ctx, t->cert_file) != 1) {
        funcd_error_set(FUNCD_EINVAL, "cannot use the TLS certificate %s: %s", t->cert_file,
                        ssl_reason(why, sizeof(why)));
        SSL_CTX_free(ctx);
        return NULL;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, t->key_file, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
        funcd_error_set(FUNCD_EINVAL, "cannot use the TLS key %s: %s", t->key_file,
                        ssl_reason(why, sizeof(why)));
        SSL_CTX_free(ctx);
        return NULL;
    }
    SSL_CTX_set_alpn_select_cb(ctx, select_alpn, (void *)alpn);
    return ctx;
}
