/*
 * TLS for funcd's three listeners (docs/adr/0041-tls.md): a certificate and
 * key the operator gives, or a self-signed pair made once with mbedtls and
 * kept in a directory; OpenSSL contexts for serving them (h2o and libevent
 * speak OpenSSL), one per listener because each offers its own ALPN list.
 *
 * Threads: everything here runs while the platform is built; the SSL_CTX
 * objects are then shared read-only by the listeners' threads.
 */
#ifndef FUNCD_TLS_TLS_H
#define FUNCD_TLS_TLS_H

#include <openssl/ssl.h>

/* "AB:CD:..." : 32 bytes, 3 characters each. */
#define FUNCD_TLS_FINGERPRINT_LEN (32 * 3)

typedef struct funcd_tls {
    char *cert_file;
    char *key_file;
    char fingerprint[FUNCD_TLS_FINGERPRINT_LEN + 1]; /* SHA-256 of the certificate's DER */
    int self_signed; /* made by funcd_tls_self_signed */
    int created;     /* ... on this start */
} funcd_tls;

/* The names of the self-signed pair in its directory. */
#define FUNCD_TLS_SELF_CERT "tls.crt"
#define FUNCD_TLS_SELF_KEY "tls.key"

/* Checks that `cert` (PEM, a chain may follow the leaf) and `key` (PEM)
 * can be read and belong together, and fills in the fingerprint. Errors
 * name the file and what is wrong with it. */
int funcd_tls_load(funcd_tls *t, const char *cert, const char *key);

/* DIR/tls.crt and DIR/tls.key: reused when both are there (the key must not
 * be readable by group or others) and the certificate has not expired;
 * otherwise a new ECDSA P-256 key and a self-signed certificate for
 * localhost, 127.0.0.1, ::1 and this host's name, valid for a year, both
 * written with mode 0600 (t->created set). DIR must exist. */
int funcd_tls_self_signed(funcd_tls *t, const char *dir);

void funcd_tls_clear(funcd_tls *t);

/* ALPN lists, in the wire format (length-prefixed names), the server's
 * preference first. */
#define FUNCD_TLS_ALPN_HTTP1 "\x08http/1.1"
#define FUNCD_TLS_ALPN_H2_HTTP1 "\x02h2\x08http/1.1"
#define FUNCD_TLS_ALPN_H2 "\x02h2"

/* A server context for `t` offering `alpn` (one of the lists above; a
 * client offering none of them gets no protocol selected). TLS 1.2 and
 * up. NULL with the error set. Free with SSL_CTX_free. */
SSL_CTX *funcd_tls_server_ctx(const funcd_tls *t, const char *alpn);

/* The ECDSA P-256 pair and certificate as PEM (malloc()ed), for
 * funcd_tls_self_signed and its tests. `hostname` goes into the subject
 * and the SANs (with localhost, 127.0.0.1 and ::1); `days` of validity
 * starting an hour ago. */
int funcd_tls_make_self_signed(const char *hostname, int days, char **cert_pem, char **key_pem);

#endif
