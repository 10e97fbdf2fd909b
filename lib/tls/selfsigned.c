/*
 * The self-signed certificate: made with mbedtls (funcd already links it
 * for its other cryptography; OpenSSL is only what h2o and libevent serve
 * TLS with), kept in a directory and reused, so clients that pinned it or
 * took it as their CA keep working across restarts.
 */
#include "tls/tls.h"

#include <errno.h>
#include <fcntl.h>
#include <mbedtls/asn1write.h>
#include <mbedtls/bignum.h>
#include <mbedtls/ecp.h>
#include <mbedtls/oid.h>
#include <mbedtls/pk.h>
#include <mbedtls/x509_crt.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "funcd/sys/error.h"
#include "util/misc.h"

#define VALID_DAYS 365
#define PEM_MAX 4096

static int rng(void *unused, unsigned char *out, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = getrandom(out + got, len - got, 0);
        if (n < 0 && errno != EINTR)
            return -1;
        if (n > 0)
            got += (size_t)n;
    }
    return 0;
}

/* An mbedtls validity time, "YYYYMMDDhhmmss" (UTC). */
static void x509_time(time_t t, char out[16])
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 16, "%Y%m%d%H%M%S", &tm);
}

/*
 * subjectAltName: a SEQUENCE of GeneralNames, dNSName [2] and iPAddress
 * [7] (RFC 5280, 4.2.1.6). mbedtls 2.28 has no writer for it; asn1write
 * writes backwards from the end of `buf`. Returns the DER's start, or NULL.
 */
static unsigned char *san_der(const char *hostname, unsigned char *buf, size_t size, size_t *len)
{
    static const unsigned char v4[4] = {127, 0, 0, 1};
    static const unsigned char v6[16] = {[15] = 1};
    unsigned char *p = buf + size;
    int n = 0, r;
#define W(call)            \
    do {                   \
        if ((r = (call)) < 0) \
            return NULL;   \
        n += r;            \
    } while (0)
    W(mbedtls_asn1_write_raw_buffer(&p, buf, v6, sizeof(v6)));
    W(mbedtls_asn1_write_len(&p, buf, sizeof(v6)));
    W(mbedtls_asn1_write_tag(&p, buf, MBEDTLS_ASN1_CONTEXT_SPECIFIC | 7));
    W(mbedtls_asn1_write_raw_buffer(&p, buf, v4, sizeof(v4)));
    W(mbedtls_asn1_write_len(&p, buf, sizeof(v4)));
    W(mbedtls_asn1_write_tag(&p, buf, MBEDTLS_ASN1_CONTEXT_SPECIFIC | 7));
    const char *names[2] = {"localhost", hostname};
    for (int i = 1; i >= 0; i--) {
        if (!names[i] || !*names[i] || (i == 1 && strcmp(names[i], "localhost") == 0))
            continue;
        size_t l = strlen(names[i]);
        W(mbedtls_asn1_write_raw_buffer(&p, buf, (const unsigned char *)names[i], l));
        W(mbedtls_asn1_write_len(&p, buf, l));
        W(mbedtls_asn1_write_tag(&p, buf, MBEDTLS_ASN1_CONTEXT_SPECIFIC | 2));
    }
    W(mbedtls_asn1_write_len(&p, buf, (size_t)n));
    W(mbedtls_asn1_write_tag(&p, buf, MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE));
#undef W
    *len = (size_t)n;
    return p;
}

/* extKeyUsage: serverAuth only. */
static const unsigned char EKU_SERVER_AUTH[] = {
    0x30, 0x0a, 0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01};

/* A host name fit for a certificate: letters, digits, '-' and '.'. */
static int dns_name_ok(const char *s)
{
    if (!*s || strlen(s) > 253)
        return 0;
    for (; *s; s++)
        if (!(*s == '-' || *s == '.' || (*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'z') ||
              (*s >= 'A' && *s <= 'Z')))
            return 0;
    return 1;
}

int funcd_tls_make_self_signed(const char *hostname, int days, char **cert_pem, char **key_pem)
{
    *cert_pem = *key_pem = NULL;
    if (hostname && !dns_name_ok(hostname))
        hostname = NULL;
    mbedtls_pk_context key;
    mbedtls_x509write_cert crt;
    mbedtls_mpi serial;
    mbedtls_pk_init(&key);
    mbedtls_x509write_crt_init(&crt);
    mbedtls_mpi_init(&serial);
    unsigned char *cbuf = calloc(1, PEM_MAX), *kbuf = calloc(1, PEM_MAX);
    unsigned char serial_bytes[16], san[1024];
    char subject[400], from[16], until[16];
    size_t san_len = 0;
    unsigned char *san_start = san_der(hostname, san, sizeof(san), &san_len);
    time_t now = time(NULL);
    x509_time(now - 3600, from);
    x509_time(now + (time_t)days * 86400, until);
    snprintf(subject, sizeof(subject), "CN=%s,O=funcd self-signed",
             hostname ? hostname : "localhost");
    int rc = -1;
    if (cbuf && kbuf && san_start && rng(NULL, serial_bytes, sizeof(serial_bytes)) == 0) {
        serial_bytes[0] &= 0x7f; /* a positive serial */
        serial_bytes[0] |= 0x40; /* of full length */
        rc = mbedtls_pk_setup(&key, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY));
        if (rc == 0)
            rc = mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(key), rng, NULL);
        if (rc == 0)
            rc = mbedtls_mpi_read_binary(&serial, serial_bytes, sizeof(serial_bytes));
        mbedtls_x509write_crt_set_version(&crt, MBEDTLS_X509_CRT_VERSION_3);
        mbedtls_x509write_crt_set_md_alg(&crt, MBEDTLS_MD_SHA256);
        mbedtls_x509write_crt_set_subject_key(&crt, &key);
        mbedtls_x509write_crt_set_issuer_key(&crt, &key);
        if (rc == 0)
            rc = mbedtls_x509write_crt_set_serial(&crt, &serial);
        if (rc == 0)
            rc = mbedtls_x509write_crt_set_validity(&crt, from, until);
        if (rc == 0)
            rc = mbedtls_x509write_crt_set_subject_name(&crt, subject);
        if (rc == 0)
            rc = mbedtls_x509write_crt_set_issuer_name(&crt, subject);
        /* A leaf that is its own issuer: clients trust it by taking it as
         * their CA file (curl --cacert, funcdctl --cacert). */
        if (rc == 0)
            rc = mbedtls_x509write_crt_set_basic_constraints(&crt, 0, -1);
        if (rc == 0)
            rc = mbedtls_x509write_crt_set_subject_key_identifier(&crt);
        if (rc == 0)
            rc = mbedtls_x509write_crt_set_key_usage(&crt, MBEDTLS_X509_KU_DIGITAL_SIGNATURE);
        if (rc == 0)
            rc = mbedtls_x509write_crt_set_extension(
                &crt, MBEDTLS_OID_EXTENDED_KEY_USAGE, MBEDTLS_OID_SIZE(MBEDTLS_OID_EXTENDED_KEY_USAGE),
                0, EKU_SERVER_AUTH, sizeof(EKU_SERVER_AUTH));
        if (rc == 0)
            rc = mbedtls_x509write_crt_set_extension(
                &crt, MBEDTLS_OID_SUBJECT_ALT_NAME, MBEDTLS_OID_SIZE(MBEDTLS_OID_SUBJECT_ALT_NAME),
                0, san_start, san_len);
        if (rc == 0)
            rc = mbedtls_x509write_crt_pem(&crt, cbuf, PEM_MAX, rng, NULL);
        if (rc == 0)
            rc = mbedtls_pk_write_key_pem(&key, kbuf, PEM_MAX);
    }
    mbedtls_mpi_free(&serial);
    mbedtls_x509write_crt_free(&crt);
    mbedtls_pk_free(&key);
    if (rc != 0) {
        free(cbuf);
        if (kbuf)
            explicit_bzero(kbuf, PEM_MAX);
        free(kbuf);
        return funcd_error_set(FUNCD_EIO, "cannot make a self-signed TLS certificate (mbedtls "
                               "error -0x%04x)", (unsigned)-rc);
    }
    *cert_pem = (char *)cbuf;
    *key_pem = (char *)kbuf;
    return 0;
}

/* Writes `data` to `path` (mode 0600) through a temporary file, so a crash
 * never leaves half a key there. */
static int write_private(const char *path, const char *data)
{
    char tmp[4300];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return funcd_error_set(FUNCD_EIO, "cannot write %s: %s", tmp, strerror(errno));
    int ok = fchmod(fd, 0600) == 0 && funcd_write_all(fd, data, strlen(data)) == 0 &&
             fsync(fd) == 0;
    int err = errno;
    close(fd);
    if (!ok || rename(tmp, path) != 0) {
        if (ok)
            err = errno;
        unlink(tmp);
        return funcd_error_set(FUNCD_EIO, "cannot write %s: %s", path, strerror(err));
    }
    return 0;
}

/* 1: the certificate in `path` has expired (or cannot be read as one). */
static int expired(const char *path)
{
    FILE *f = fopen(path, "re");
    X509 *crt = f ? PEM_read_X509(f, NULL, NULL, NULL) : NULL;
    if (f)
        fclose(f);
    int gone = !crt || X509_cmp_current_time(X509_get0_notAfter(crt)) <= 0;
    X509_free(crt);
    return gone;
}

int funcd_tls_self_signed(funcd_tls *t, const char *dir)
{
    char cert[4200], key[4200];
    snprintf(cert, sizeof(cert), "%s/" FUNCD_TLS_SELF_CERT, dir);
    snprintf(key, sizeof(key), "%s/" FUNCD_TLS_SELF_KEY, dir);
    funcd_tls_clear(t);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return funcd_error_set(FUNCD_EIO, "cannot create %s for the TLS certificate: %s", dir,
                               strerror(errno));
    struct stat st;
    int have_key = lstat(key, &st) == 0, have_cert = access(cert, F_OK) == 0;
    if (have_key && (st.st_mode & 077))
        return funcd_error_set(FUNCD_EINVAL, "the TLS key %s can be read by group or others "
                               "(mode %04o): chmod 600 it, or remove it (and %s) to have a new "
                               "pair made", key, (unsigned)(st.st_mode & 07777), cert);
    int created = 0;
    if (!have_key || !have_cert || expired(cert)) {
        char host[256] = "";
        if (gethostname(host, sizeof(host) - 1) != 0)
            host[0] = '\0';
        char *cpem, *kpem;
        int rc = funcd_tls_make_self_signed(host, VALID_DAYS, &cpem, &kpem);
        if (rc < 0)
            return rc;
        /* The key first: a certificate without its key is never left. */
        rc = write_private(key, kpem);
        if (rc == 0)
            rc = write_private(cert, cpem);
        explicit_bzero(kpem, strlen(kpem));
        free(kpem);
        free(cpem);
        if (rc < 0)
            return rc;
        created = 1;
    }
    int rc = funcd_tls_load(t, cert, key);
    if (rc < 0) {
        char msg[1100];
        snprintf(msg, sizeof(msg), "%s", funcd_error_last()->message);
        return funcd_error_set(rc, "%s (the self-signed pair in %s: remove both files to have "
                               "a new one made)", msg, dir);
    }
    t->self_signed = 1;
    t->created = created;
    return 0;
}
