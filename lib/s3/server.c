#include "s3/s3.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <mbedtls/base64.h>
#include <mbedtls/md.h>
#include <mbedtls/sha256.h>

#include "api/api.h"
#include "funcd/sys/error.h"
#include "objects/objects.h"
#include "port/blob.h"
#include "s3/proto.h"
#include "util/buf.h"
#include "util/misc.h"

#define MAX_CONNS 512
#define MAX_CONNS_PER_FUNCTION 64 /* through the listeners in its workers */
#define IO_TIMEOUT_S 120   /* a connection silent this long is closed */
#define CLOCK_SKEW_S 900   /* SigV4: X-Amz-Date within 15 minutes */
#define MIN_PART (5u << 20) /* every part but the last */
#define MAX_LIST 1000
#define BODY_BUF (256u << 10) /* per connection while a body streams in */
#define GET_CHUNK (1u << 20)  /* per connection while an object streams out */

typedef struct listener {
    int fd;
    char *ns, *name; /* NULL: the host listener (any Function's key) */
    struct listener *next;
} listener;

typedef struct conn {
    funcd_s3 *s3;
    int fd;
    char *ns, *name; /* the worker listener's Function, or NULL */
    struct conn *prev, *next;
} conn;

struct funcd_s3 {
    funcd_store *store;
    funcd_blob *blob;
    const funcd_logger *logger;
    uint64_t max_upload;
    uint8_t master[32];
    char addr[128];

    pthread_mutex_t mu;
    pthread_cond_t idle;
    listener *listeners;
    int *closing; /* fds of removed listeners, closed by the acceptor */
    size_t n_closing, cap_closing;
    conn *conns;
    unsigned n_conns;
    int stopping;
    int wake[2];
    pthread_t acceptor;
    int acceptor_started;
};

/* ---- the master secret and keys ------------------------------------------- */

static int load_master(funcd_s3 *s, const funcd_s3_config *cfg)
{
    char path[4096];
    const char *file = cfg->master_secret_file;
    if (!file && cfg->state_dir) {
        snprintf(path, sizeof(path), "%s/%s", cfg->state_dir, FUNCD_S3_SECRET_FILE);
        file = path;
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0) {
            uint8_t raw[32];
            char hex[65];
            if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
                close(fd);
                unlink(path);
                return funcd_error_set(FUNCD_EIO, "cannot draw a random S3 master secret");
            }
            funcd_hex(raw, 32, hex);
            hex[64] = '\n';
            int w = funcd_write_all(fd, hex, 65);
            if (w < 0 || fsync(fd) < 0) {
                int e = errno;
                close(fd);
                unlink(path);
                return funcd_error_set(FUNCD_EIO, "cannot write the S3 master secret %s: %s", path,
                                       strerror(e));
            }
            close(fd);
        } else if (errno != EEXIST) {
            return funcd_error_set(FUNCD_EIO, "cannot create the S3 master secret %s: %s", path,
                                   strerror(errno));
        }
    }
    if (!file) { /* in memory */
        if (getrandom(s->master, sizeof(s->master), 0) != (ssize_t)sizeof(s->master))
            return funcd_error_set(FUNCD_EIO, "cannot draw a random S3 master secret");
        return 0;
    }
    FILE *f = fopen(file, "re");
    if (!f)
        return funcd_error_set(FUNCD_EINVAL, "cannot read the S3 master secret file %s: %s", file,
                               strerror(errno));
    char buf[4096];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        n--;
    if (n < 16)
        return funcd_error_set(FUNCD_EINVAL,
                               "the S3 master secret file %s holds %zu bytes: at least 16 are needed",
                               file, n);
    /* Whatever the file holds is the secret: its SHA-256 is the key. */
    mbedtls_sha256_ret((const unsigned char *)buf, n, s->master, 0);
    return 0;
}

/* HMAC-SHA256 under the master secret of the NUL-separated fields. */
static void key_mac(const funcd_s3 *s, const char *const *fields, size_t n, uint8_t mac[32])
{
    mbedtls_md_context_t md;
    mbedtls_md_init(&md);
    mbedtls_md_setup(&md, mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), 1);
    mbedtls_md_hmac_starts(&md, s->master, sizeof(s->master));
    for (size_t i = 0; i < n; i++)
        mbedtls_md_hmac_update(&md, (const unsigned char *)fields[i], strlen(fields[i]) + 1);
    mbedtls_md_hmac_finish(&md, mac);
    mbedtls_md_free(&md);
}

int funcd_s3_credentials(const funcd_s3 *s, const cJSON *fn, char akid[160], char secret[48])
{
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(fn, "metadata");
    const char *ns = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, "namespace"));
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, "name"));
    const char *uid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, "uid"));
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(fn, "spec"), "bindings"),
        "blobKeyVersion");
    if (!ns || !name || !uid || strlen(ns) > 63 || strlen(name) > 63)
        return funcd_error_set(FUNCD_EINVAL, "a Function without metadata.namespace, name and "
                                             "uid, or with a namespace or name longer than 63 "
                                             "bytes");
    char version[32];
    snprintf(version, sizeof(version), "%.0f", cJSON_IsNumber(kv) ? kv->valuedouble : 0.0);
    uint8_t mac[32];
    /* the id's tag: 12 hex of its own MAC, so a stale id is told apart
     * before any signature is checked */
    const char *id_fields[] = {"funcd-s3-id-v2", ns, name, uid, version};
    key_mac(s, id_fields, 5, mac);
    char tag[25];
    funcd_hex(mac, 6, tag);
    snprintf(akid, 160, "%s.%s.%s", ns, name, tag);
    const char *fields[] = {"funcd-s3-v2", ns, name, uid, version};
    key_mac(s, fields, 5, mac);
    /* 30 bytes as 40 characters of URL-safe base64 */
    size_t olen = 0;
    unsigned char b64[48];
    mbedtls_base64_encode(b64, sizeof(b64), &olen, mac, 30);
    for (size_t i = 0; i < olen; i++)
        secret[i] = b64[i] == '+' ? '-' : b64[i] == '/' ? '_' : (char)b64[i];
    secret[olen] = '\0';
    memset(mac, 0, sizeof(mac));
    return 0;
}

const char *funcd_s3_addr(const funcd_s3 *s)
{
    return s->addr;
}

/* ---- one request ----------------------------------------------------------- */

typedef struct binding {
    char bucket[64];
    char prefix[1024];
    int write;
} binding;

typedef struct request {
    conn *c;
    funcd_s3_reader *rd;
    funcd_s3_req *r;
    funcd_s3_auth auth;
    uint8_t key[32];
    char ns[64], name[64];
    binding *bindings;
    size_t n_bindings;
    char bucket[64];
    const char *okey; /* the object key, or NULL */
    int head;         /* HEAD: no body in answers */
    int close;        /* the connection ends after the answer */
    int body_read;    /* the request body was consumed */
    char request_id[17];
} request;

static int send_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static const char *status_text(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 416: return "Range Not Satisfiable";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Error";
    }
}

static void http_date(int64_t epoch_s, char *out, size_t len)
{
    time_t t = (time_t)epoch_s;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, len, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

static void iso_date(int64_t epoch_ms, char *out, size_t len)
{
    time_t t = (time_t)(epoch_ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    char b[32];
    strftime(b, sizeof(b), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, len, "%s.%03dZ", b, (int)(epoch_ms % 1000));
}

/* Sends an answer's head: status, `extra` header lines ("Name: v\r\n"...)
 * and a Content-Length of `len` (the body follows, not for HEAD). */
static int send_head(request *q, int status, const char *extra, const char *type, uint64_t len)
{
    funcd_buf h = FUNCD_BUF_INIT;
    char date[64];
    http_date(time(NULL), date, sizeof(date));
    if (!q->body_read)
        q->close = 1; /* the body we did not read is still on the wire */
    int rc = funcd_buf_printf(&h,
                              "HTTP/1.1 %d %s\r\nDate: %s\r\nServer: funcd\r\n"
                              "x-amz-request-id: %s\r\nContent-Length: %llu\r\n%s%s%s%s%s",
                              status, status_text(status), date, q->request_id,
                              (unsigned long long)len, type ? "Content-Type: " : "",
                              type ? type : "", type ? "\r\n" : "", extra ? extra : "",
                              q->close ? "Connection: close\r\n\r\n" : "\r\n");
    if (rc == 0)
        rc = send_all(q->c->fd, h.data, h.len);
    funcd_buf_free(&h);
    if (rc < 0)
        q->close = 1;
    return rc;
}

/* Sends a whole answer: the head, then a body (not for HEAD, but its length
 * is announced). */
static int respond(request *q, int status, const char *extra, const char *type, const void *body,
                   size_t len)
{
    int rc = send_head(q, status, extra, type, len);
    if (rc == 0 && body && len && !q->head)
        rc = send_all(q->c->fd, body, len);
    if (rc < 0)
        q->close = 1;
    return rc;
}

static int status_of(const char *code)
{
    static const struct {
        const char *code;
        int status;
    } map[] = {
        {"AccessDenied", 403},          {"SignatureDoesNotMatch", 403},
        {"InvalidAccessKeyId", 403},    {"RequestTimeTooSkewed", 403},
        {"NoSuchKey", 404},             {"NoSuchBucket", 404},
        {"NoSuchUpload", 404},          {"EntityTooLarge", 400},
        {"EntityTooSmall", 400},        {"InvalidRange", 416},
        {"MalformedXML", 400},          {"InvalidPart", 400},
        {"InvalidPartOrder", 400},      {"InvalidArgument", 400},
        {"InvalidRequest", 400},        {"AuthorizationHeaderMalformed", 400},
        {"AuthorizationQueryParametersError", 400},
        {"XAmzContentSHA256Mismatch", 400}, {"IncompleteBody", 400},
        {"MissingContentLength", 411},  {"MethodNotAllowed", 405},
        {"NotImplemented", 501},        {"InternalError", 500},
        {"ServiceUnavailable", 503},    {"KeyTooLongError", 400},
        {"InvalidBucketName", 400},     {"BadRequest", 400},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (strcmp(map[i].code, code) == 0)
            return map[i].status;
    return 400;
}

static int s3_error(request *q, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int s3_error(request *q, const char *code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    funcd_buf b = FUNCD_BUF_INIT;
    int rc = funcd_buf_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code>"
                                  "<Message>",
                              code);
    rc |= funcd_s3_xml_escape(&b, msg);
    rc |= funcd_buf_puts(&b, "</Message>");
    if (q->bucket[0]) {
        rc |= funcd_buf_puts(&b, "<BucketName>");
        rc |= funcd_s3_xml_escape(&b, q->bucket);
        rc |= funcd_buf_puts(&b, "</BucketName>");
    }
    if (q->okey) {
        rc |= funcd_buf_puts(&b, "<Key>");
        rc |= funcd_s3_xml_escape(&b, q->okey);
        rc |= funcd_buf_puts(&b, "</Key>");
    }
    rc |= funcd_buf_printf(&b, "<RequestId>%s</RequestId></Error>", q->request_id);
    int status = status_of(code);
    if (status >= 500)
        funcd_log(q->c->s3->logger, FUNCD_LOG_WARN, "s3: %s %s: %s: %s", q->r->method,
                  q->r->path, code, msg);
    if (rc < 0)
        q->close = 1;
    respond(q, status, NULL, "application/xml", b.data, rc < 0 ? 0 : b.len);
    funcd_buf_free(&b);
    return -1;
}

static int blob_error(request *q, int rc)
{
    const funcd_error *e = funcd_error_last();
    if (rc == FUNCD_ENOTFOUND)
        return s3_error(q, "NoSuchKey", "The specified key does not exist.");
    if (rc == FUNCD_EINVAL)
        return s3_error(q, "KeyTooLongError", "the blob store cannot hold this key: %s",
                        e ? e->message : "");
    if (rc == FUNCD_EUNAVAILABLE || rc == FUNCD_ENOSPC)
        return s3_error(q, "ServiceUnavailable", "%s", e ? e->message : "the blob store failed");
    return s3_error(q, "InternalError", "%s", e ? e->message : "the blob store failed");
}

/* ---- identity -------------------------------------------------------------- */

static void free_bindings(request *q)
{
    free(q->bindings);
    q->bindings = NULL;
    q->n_bindings = 0;
}

/* Takes Function `fn`'s spec.bindings.blob. */
static void load_bindings(request *q, const cJSON *fn)
{
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(fn, "spec"), "bindings"),
        "blob");
    size_t n = (size_t)cJSON_GetArraySize(list);
    q->bindings = n ? calloc(n, sizeof(*q->bindings)) : NULL;
    const cJSON *b;
    cJSON_ArrayForEach(b, list) {
        const char *bucket = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "bucket"));
        const char *prefix = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "prefix"));
        const char *access = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "access"));
        if (!q->bindings || !bucket || strlen(bucket) >= sizeof(q->bindings[0].bucket) ||
            (prefix && strlen(prefix) >= sizeof(q->bindings[0].prefix)))
            continue;
        binding *x = &q->bindings[q->n_bindings++];
        snprintf(x->bucket, sizeof(x->bucket), "%s", bucket);
        snprintf(x->prefix, sizeof(x->prefix), "%s", prefix ? prefix : "");
        x->write = access && strcmp(access, "readwrite") == 0;
    }
}

/* Checks the signature; fills q->ns/name/bindings/key. 0, or -1 answered. */
/* A key that names no Function, or one revoked. On the shared endpoint
 * nobody has proven anything yet: every such key gets S3's one answer, so
 * that the endpoint tells no tenant which Functions of another exist or
 * were created again (the reason goes to funcd's debug log). A worker's
 * own listener is its Function's: it is told why. */
static int refuse_key(request *q, const char *why)
{
    if (q->c->ns)
        return s3_error(q, "InvalidAccessKeyId", "function %s/%s: %s", q->ns, q->name, why);
    funcd_log(q->c->s3->logger, FUNCD_LOG_DEBUG, "s3: key of function %s/%s refused: %s",
              q->ns, q->name, why);
    return s3_error(q, "InvalidAccessKeyId",
                    "The AWS Access Key Id you provided does not exist in our records.");
}

static int authenticate(request *q)
{
    const char *code;
    char err[512] = "";
    if (funcd_s3_auth_parse(q->r, &q->auth, &code, err, sizeof(err)) < 0)
        return s3_error(q, code, "%s", err);
    funcd_s3_auth *a = &q->auth;
    int64_t t = funcd_s3_parse_amz_date(a->amz_date), now = time(NULL);
    if (a->presigned) {
        if (now > t + a->expires)
            return s3_error(q, "AccessDenied", "Request has expired");
        if (t > now + CLOCK_SKEW_S)
            return s3_error(q, "AccessDenied", "Request is not valid yet");
    } else if (t < now - CLOCK_SKEW_S || t > now + CLOCK_SKEW_S) {
        return s3_error(q, "RequestTimeTooSkewed",
                        "The difference between the request time and the server's time is too "
                        "large.");
    }
    /* "{ns}.{name}.{tag}": namespaces have no dots, tags neither */
    const char *dot = strchr(a->akid, '.'), *last = strrchr(a->akid, '.');
    if (!dot || dot == a->akid || last == dot || (size_t)(dot - a->akid) >= sizeof(q->ns) ||
        (size_t)(last - dot - 1) >= sizeof(q->name) || last == dot + 1)
        return s3_error(q, "InvalidAccessKeyId",
                        "The AWS Access Key Id you provided does not exist in our records.");
    snprintf(q->ns, sizeof(q->ns), "%.*s", (int)(dot - a->akid), a->akid);
    snprintf(q->name, sizeof(q->name), "%.*s", (int)(last - dot - 1), dot + 1);
    if (q->c->ns && (strcmp(q->c->ns, q->ns) != 0 || strcmp(q->c->name, q->name) != 0))
        return s3_error(q, "InvalidAccessKeyId",
                        "this endpoint serves the keys of function %s/%s only", q->c->ns,
                        q->c->name);
    cJSON *fn = NULL;
    int rc = funcd_objects_get(q->c->s3->store, funcd_kind_by_kind("Function"), q->ns, q->name,
                               &fn, NULL);
    if (rc == FUNCD_ENOTFOUND)
        return refuse_key(q, "function does not exist");
    if (rc < 0)
        return s3_error(q, "ServiceUnavailable", "%s", funcd_error_last()->message);
    char akid[160], secret[48];
    rc = funcd_s3_credentials(q->c->s3, fn, akid, secret);
    if (rc == 0 && strcmp(akid, a->akid) != 0) {
        cJSON_Delete(fn);
        return refuse_key(q, "this access key was revoked: the Function was created again or "
                             "its spec.bindings.blobKeyVersion changed; read the current key "
                             "(funcdctl s3-credentials)");
    }
    if (rc < 0) {
        cJSON_Delete(fn);
        return s3_error(q, "InternalError", "%s", funcd_error_last()->message);
    }
    funcd_s3_signing_key(secret, a->date, a->region, a->service, q->key);
    memset(secret, 0, sizeof(secret));
    char sig[65];
    err[0] = '\0';
    if (funcd_s3_sign_request(q->r, a, q->key, sig, err, sizeof(err)) < 0) {
        cJSON_Delete(fn);
        return s3_error(q, err[0] == 'o' ? "InternalError" : "SignatureDoesNotMatch", "%s", err);
    }
    if (!funcd_s3_streq_ct(sig, a->signature)) {
        cJSON_Delete(fn);
        return s3_error(q, "SignatureDoesNotMatch",
                        "The request signature we calculated does not match the signature you "
                        "provided. Check your key and signing method.");
    }
    load_bindings(q, fn);
    cJSON_Delete(fn);
    return 0;
}

/* 1 if the Function may read (write: also write) key `k` of q->bucket. */
static int allowed(const request *q, const char *k, int write)
{
    for (size_t i = 0; i < q->n_bindings; i++) {
        const binding *b = &q->bindings[i];
        if (strcmp(b->bucket, q->bucket) == 0 && strncmp(k, b->prefix, strlen(b->prefix)) == 0 &&
            (!write || b->write))
            return 1;
    }
    return 0;
}

static int bucket_bound(const request *q)
{
    for (size_t i = 0; i < q->n_bindings; i++)
        if (strcmp(q->bindings[i].bucket, q->bucket) == 0)
            return 1;
    return 0;
}

static int deny(request *q, const char *k, int write)
{
    return s3_error(q, "AccessDenied",
                    "function %s/%s may not %s %s/%s: no spec.bindings.blob entry with access %s "
                    "covers it",
                    q->ns, q->name, write ? "write" : "read", q->bucket, k,
                    write ? "readwrite" : "read");
}

/* ---- bodies ------------------------------------------------------------------ */

static int send_continue(request *q)
{
    const char *e = funcd_s3_header(q->r, "expect");
    if (e && strcasecmp(e, "100-continue") == 0 && !q->r->http10)
        return send_all(q->c->fd, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    return 0;
}

static int parse_len(const char *v, uint64_t *out)
{
    if (!v || !*v)
        return -1;
    uint64_t n = 0;
    for (const char *p = v; *p; p++) {
        if (*p < '0' || *p > '9' || n > UINT64_MAX / 10 - 1)
            return -1;
        n = n * 10 + (uint64_t)(*p - '0');
    }
    *out = n;
    return 0;
}

/* What the head says of a request body, checked (body_check). */
typedef struct body_info {
    uint64_t len;      /* the object's bytes (decoded, for aws-chunked) */
    int streaming;     /* aws-chunked */
    int signed_chunks; /* STREAMING-AWS4-HMAC-SHA256-PAYLOAD */
    int trailers;      /* STREAMING-UNSIGNED-PAYLOAD-TRAILER */
    int hashed;        /* x-amz-content-sha256 is the body's SHA-256 */
} body_info;

/* Checks what the head and the signature say of the body (at most `cap`
 * bytes) and sends 100 Continue if asked. 0, or -1 answered. */
static int body_check(request *q, uint64_t cap, body_info *bi)
{
    funcd_s3_req *r = q->r;
    const char *ph = q->auth.payload_hash;
    memset(bi, 0, sizeof(*bi));
    bi->streaming = strncmp(ph, "STREAMING-", 10) == 0;
    bi->signed_chunks = strcmp(ph, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD") == 0;
    bi->trailers = strcmp(ph, "STREAMING-UNSIGNED-PAYLOAD-TRAILER") == 0;
    bi->hashed = strlen(ph) == 64;
    if (funcd_s3_header(r, "transfer-encoding"))
        return s3_error(q, "NotImplemented", "Transfer-Encoding is not accepted: send a "
                                             "Content-Length");
    if (bi->streaming && !bi->signed_chunks && !bi->trailers)
        return s3_error(q, "InvalidArgument", "x-amz-content-sha256 %s is not supported", ph);
    if (!bi->streaming && !bi->hashed && strcmp(ph, "UNSIGNED-PAYLOAD") != 0)
        return s3_error(q, "InvalidArgument", "x-amz-content-sha256 must be a SHA-256, "
                                              "UNSIGNED-PAYLOAD or STREAMING-...");
    uint64_t wire = 0;
    const char *cl = funcd_s3_header(r, "content-length");
    if (!cl)
        return s3_error(q, "MissingContentLength", "You must provide the Content-Length HTTP "
                                                   "header.");
    if (parse_len(cl, &wire) < 0)
        return s3_error(q, "InvalidArgument", "a malformed Content-Length");
    if (!bi->streaming)
        bi->len = wire;
    else if (parse_len(funcd_s3_header(r, "x-amz-decoded-content-length"), &bi->len) < 0)
        return s3_error(q, "MissingContentLength",
                        "an aws-chunked body needs x-amz-decoded-content-length");
    if (bi->len > cap)
        return s3_error(q, "EntityTooLarge",
                        "Your proposed upload exceeds the maximum allowed size: %llu bytes > "
                        "%llu (--s3-max-upload)",
                        (unsigned long long)bi->len, (unsigned long long)cap);
    if (send_continue(q) < 0) {
        q->close = 1;
        return -1;
    }
    return 0;
}

/* Where a body goes: 0, or a funcd error. */
typedef int (*body_sink)(void *ctx, const void *data, size_t len);

static int sink_writer(void *ctx, const void *data, size_t len)
{
    funcd_blob_writer *w = ctx;
    return w->write(w, data, len);
}

static int sink_buf(void *ctx, const void *data, size_t len)
{
    return funcd_buf_append(ctx, data, len) < 0 ? FUNCD_ENOMEM : 0;
}

/* Moves `n` bytes from the wire into the sink through `buf` (BODY_BUF),
 * hashing them into each non-NULL context. 0; -1 the peer went away; -2 the
 * sink failed (*sink_rc). */
static int pump(request *q, uint64_t n, char *buf, mbedtls_sha256_context *h1,
                mbedtls_sha256_context *h2, body_sink sink, void *ctx, int *sink_rc)
{
    while (n) {
        /* a full buffer per sink call: fewer, larger writes */
        size_t want = n < BODY_BUF ? (size_t)n : BODY_BUF, fill = 0;
        while (fill < want) {
            long got = funcd_s3_read_upto(q->rd, buf + fill, want - fill);
            if (got <= 0)
                return -1;
            fill += (size_t)got;
        }
        if (h1)
            mbedtls_sha256_update_ret(h1, (unsigned char *)buf, fill);
        if (h2)
            mbedtls_sha256_update_ret(h2, (unsigned char *)buf, fill);
        if ((*sink_rc = sink(ctx, buf, fill)) < 0)
            return -2;
        n -= fill;
    }
    return 0;
}

static int hash_matches(mbedtls_sha256_context *h, const char *want_hex)
{
    uint8_t sum[32];
    char hex[65];
    mbedtls_sha256_finish_ret(h, sum);
    funcd_hex(sum, 32, hex);
    return strcasecmp(hex, want_hex) == 0;
}

/* The body: plain, or aws-chunked (each chunk's signature checked when
 * signed), streamed into `sink` through one BODY_BUF buffer, never more;
 * a signed x-amz-content-sha256 is checked at the end. The sink has every
 * byte when this returns 0; else the answer was sent (-1) and what the sink
 * got must be discarded. Shared by PutObject, UploadPart and the XML bodies. */
static int body_stream(request *q, const body_info *bi, body_sink sink, void *ctx)
{
    char *buf = malloc(BODY_BUF);
    if (!buf)
        return s3_error(q, "ServiceUnavailable", "out of memory for a body buffer");
    mbedtls_sha256_context whole, chunk;
    mbedtls_sha256_init(&whole);
    mbedtls_sha256_init(&chunk);
    mbedtls_sha256_starts_ret(&whole, 0);
    int rc = 0, sink_rc = 0, pr = 0;
    if (!bi->streaming) {
        pr = pump(q, bi->len, buf, bi->hashed ? &whole : NULL, NULL, sink, ctx, &sink_rc);
        if (pr == 0) {
            q->body_read = 1;
            if (bi->hashed && !hash_matches(&whole, q->auth.payload_hash))
                rc = s3_error(q, "XAmzContentSHA256Mismatch",
                              "The provided 'x-amz-content-sha256' header does not match what "
                              "was computed.");
        }
        goto out;
    }
    char prev[65];
    snprintf(prev, sizeof(prev), "%s", q->auth.signature);
    uint64_t got = 0;
    for (;;) {
        uint64_t n;
        char sig[65];
        if (funcd_s3_chunk_header(q->rd, &n, sig) < 0 || (bi->signed_chunks && !sig[0]) ||
            n > bi->len - got) {
            q->close = 1;
            rc = s3_error(q, "IncompleteBody", "a malformed aws-chunked body");
            goto out;
        }
        if (bi->signed_chunks)
            mbedtls_sha256_starts_ret(&chunk, 0);
        if ((pr = pump(q, n, buf, bi->signed_chunks ? &chunk : NULL, NULL, sink, ctx,
                       &sink_rc)) != 0)
            goto out;
        if (bi->signed_chunks) {
            uint8_t sum[32];
            char hex[65], want[65];
            mbedtls_sha256_finish_ret(&chunk, sum);
            funcd_hex(sum, 32, hex);
            funcd_s3_sign_chunk(&q->auth, q->key, prev, hex, want);
            if (!funcd_s3_streq_ct(want, sig)) {
                q->close = 1;
                rc = s3_error(q, "SignatureDoesNotMatch",
                              "a chunk's signature does not match the payload");
                goto out;
            }
            snprintf(prev, sizeof(prev), "%s", sig);
        }
        got += n;
        if (n == 0)
            break;
        if (funcd_s3_chunk_end(q->rd) < 0) {
            q->close = 1;
            rc = s3_error(q, "IncompleteBody", "a malformed aws-chunked body");
            goto out;
        }
    }
    if ((bi->trailers ? funcd_s3_chunk_trailers(q->rd) : funcd_s3_chunk_end(q->rd)) < 0 ||
        got != bi->len) {
        q->close = 1;
        rc = s3_error(q, "IncompleteBody",
                      "the aws-chunked body holds %llu bytes, x-amz-decoded-content-length says "
                      "%llu",
                      (unsigned long long)got, (unsigned long long)bi->len);
        goto out;
    }
    q->body_read = 1;
out:
    if (pr == -1) {
        q->close = 1;
        rc = -1; /* the peer went away: no one to answer */
    } else if (pr == -2) {
        q->close = 1;
        rc = blob_error(q, sink_rc);
    }
    mbedtls_sha256_free(&whole);
    mbedtls_sha256_free(&chunk);
    free(buf);
    return rc;
}

/* Streams the body (at most `cap` bytes) into a new object under blob key
 * `k`, published only when the whole body arrived and checked. 0, or -1
 * answered. */
static int body_to_blob(request *q, uint64_t cap, const char *k)
{
    body_info bi;
    if (body_check(q, cap, &bi) < 0)
        return -1;
    funcd_blob_writer *w = NULL;
    int rc = funcd_port_blob_put_open(q->c->s3->blob, k, &w);
    if (rc < 0)
        return blob_error(q, rc);
    if (body_stream(q, &bi, sink_writer, w) < 0) {
        w->abort(w);
        return -1;
    }
    if ((rc = w->commit(w)) < 0)
        return blob_error(q, rc);
    return 0;
}

/* Reads a small body (XML documents), NUL-terminated. */
static int read_small_body(request *q, char **out, size_t *len)
{
    if (!funcd_s3_header(q->r, "content-length")) {
        q->body_read = 1;
        *out = strdup("");
        *len = 0;
        return *out ? 0 : s3_error(q, "ServiceUnavailable", "out of memory");
    }
    body_info bi;
    funcd_buf b = FUNCD_BUF_INIT;
    if (body_check(q, 4u << 20, &bi) < 0 || body_stream(q, &bi, sink_buf, &b) < 0) {
        funcd_buf_free(&b);
        return -1;
    }
    if (funcd_buf_append(&b, "", 1) < 0) {
        funcd_buf_free(&b);
        return s3_error(q, "ServiceUnavailable", "out of memory");
    }
    *out = funcd_buf_detach(&b, len);
    (*len)--;
    return 0;
}

/* ---- keys ---------------------------------------------------------------------- */

static char *obj_key(const request *q, const char *k)
{
    char *s = NULL;
    if (asprintf(&s, "s3/%s/%s/%s", q->ns, q->bucket, k) < 0)
        return NULL;
    return s;
}

/* "s3mp/{ns}/{bucket}/{uploadId}/" */
static char *upload_prefix(const request *q, const char *id)
{
    char *s = NULL;
    if (asprintf(&s, "s3mp/%s/%s/%s/", q->ns, q->bucket, id) < 0)
        return NULL;
    return s;
}

static void object_etag(const funcd_blob_stat *st, char out[35])
{
    uint8_t in[16], sum[32];
    memcpy(in, &st->size, 8);
    memcpy(in + 8, &st->mtime_ms, 8);
    mbedtls_sha256_ret(in, sizeof(in), sum, 0);
    out[0] = '"';
    funcd_hex(sum, 16, out + 1);
    out[33] = '"';
    out[34] = '\0';
}

static int valid_upload_id(const char *id)
{
    if (strlen(id) != 32)
        return 0;
    for (const char *p = id; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return 1;
}

/* ---- operations ------------------------------------------------------------------ */

/* Whether the object changed since `st` (its ETag would differ). */
static int changed_since(funcd_blob *b, const char *k, const funcd_blob_stat *st)
{
    funcd_blob_stat now;
    return b->stat(b, k, &now) < 0 || now.size != st->size || now.mtime_ms != st->mtime_ms;
}

/* The object's bytes [off, off+len) in GET_CHUNK reads: each is sent
 * (a blocking send: the socket took it) before the next is read, so one
 * chunk per connection is all it holds. The head goes out after the first
 * read, so a failure there is still answered. If the object is replaced
 * mid-way the connection is closed short, never mixing two versions. */
static int op_get(request *q)
{
    funcd_blob *b = q->c->s3->blob;
    char *k = obj_key(q, q->okey);
    if (!k)
        return s3_error(q, "ServiceUnavailable", "out of memory");
    funcd_blob_stat st;
    int rc = b->stat(b, k, &st);
    if (rc < 0) {
        free(k);
        return blob_error(q, rc);
    }
    uint64_t off = 0, len = st.size;
    int ranged = 0;
    const char *range = funcd_s3_header(q->r, "range");
    if (range) {
        ranged = funcd_s3_parse_range(range, st.size, &off, &len);
        if (ranged < 0) {
            free(k);
            return s3_error(q, "InvalidRange", "The requested range is not satisfiable (the "
                                               "object holds %llu bytes)",
                            (unsigned long long)st.size);
        }
        if (!ranged) {
            off = 0;
            len = st.size;
        }
    }
    void *data = NULL;
    size_t got = 0;
    if (!q->head && len) {
        rc = b->get(b, k, off, len < GET_CHUNK ? len : GET_CHUNK, &data, &got);
        /* replaced between the stat and this read: its bytes would go out
         * under the old ETag and length */
        if (rc == 0 && changed_since(b, k, &st))
            rc = FUNCD_ECONFLICT;
        if (rc < 0) {
            free(k);
            return rc == FUNCD_ECONFLICT ? s3_error(q, "ServiceUnavailable",
                                                    "the object was replaced while read; retry")
                                         : blob_error(q, rc);
        }
    }
    char etag[35], lm[64], extra[512];
    object_etag(&st, etag);
    http_date(st.mtime_ms / 1000, lm, sizeof(lm));
    int n = snprintf(extra, sizeof(extra), "ETag: %s\r\nLast-Modified: %s\r\nAccept-Ranges: bytes\r\n",
                     etag, lm);
    if (ranged > 0)
        snprintf(extra + n, sizeof(extra) - (size_t)n, "Content-Range: bytes %llu-%llu/%llu\r\n",
                 (unsigned long long)off, (unsigned long long)(off + len - 1),
                 (unsigned long long)st.size);
    /* HEAD announces the length a GET would send */
    rc = send_head(q, ranged > 0 ? 206 : 200, extra, "application/octet-stream", len);
    uint64_t sent = 0;
    while (rc == 0 && !q->head && sent < len) {
        if (got && (rc = send_all(q->c->fd, data, got)) < 0)
            break;
        sent += got;
        free(data);
        data = NULL;
        got = 0;
        if (sent == len)
            break;
        uint64_t want = len - sent < GET_CHUNK ? len - sent : GET_CHUNK;
        /* a read of a replaced object, or one cut short: the client sees a
         * short body (we close), not a mix of two versions */
        if (b->get(b, k, off + sent, want, &data, &got) < 0 || got != want ||
            changed_since(b, k, &st)) {
            funcd_log(q->c->s3->logger, FUNCD_LOG_WARN,
                      "s3: GET %s: the object changed or failed mid-way after %llu bytes; the "
                      "connection is closed",
                      q->r->path, (unsigned long long)sent);
            rc = -1;
        }
    }
    free(data);
    free(k);
    if (rc < 0)
        q->close = 1;
    return rc;
}

/* S3's object keys are UTF-8; XML could not carry another key. 0, or -1
 * answered. */
static int key_is_utf8(request *q)
{
    if (funcd_s3_utf8_valid(q->okey))
        return 0;
    return s3_error(q, "InvalidArgument", "object keys are UTF-8: this key holds a byte sequence "
                                          "that is not (percent-encode the key's UTF-8 bytes in "
                                          "the path)");
}

static int op_put(request *q)
{
    funcd_s3 *s = q->c->s3;
    if (funcd_s3_header(q->r, "x-amz-copy-source"))
        return s3_error(q, "NotImplemented", "CopyObject is not implemented");
    if (key_is_utf8(q) < 0)
        return -1;
    char *k = obj_key(q, q->okey);
    if (!k)
        return s3_error(q, "ServiceUnavailable", "out of memory");
    if (body_to_blob(q, s->max_upload, k) < 0) {
        free(k);
        return -1;
    }
    funcd_blob_stat st = {0};
    int rc = s->blob->stat(s->blob, k, &st);
    free(k);
    if (rc < 0)
        return blob_error(q, rc);
    char etag[35], extra[128];
    object_etag(&st, etag);
    snprintf(extra, sizeof(extra), "ETag: %s\r\n", etag);
    return respond(q, 200, extra, NULL, NULL, 0);
}

static int op_delete(request *q)
{
    funcd_blob *b = q->c->s3->blob;
    char *k = obj_key(q, q->okey);
    if (!k)
        return s3_error(q, "ServiceUnavailable", "out of memory");
    int rc = b->del(b, k);
    free(k);
    if (rc < 0 && rc != FUNCD_ENOTFOUND) /* S3 answers 204 for an absent key too */
        return blob_error(q, rc);
    return respond(q, 204, NULL, NULL, NULL, 0);
}

/* ---- multipart ---------------------------------------------------------------------- */

static int op_create_upload(request *q)
{
    funcd_blob *b = q->c->s3->blob;
    if (key_is_utf8(q) < 0)
        return -1;
    uint8_t raw[16];
    char id[33];
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
        return s3_error(q, "InternalError", "no randomness for an upload id");
    funcd_hex(raw, 16, id);
    char *pre = upload_prefix(q, id), *mk = NULL;
    if (!pre || asprintf(&mk, "%skey", pre) < 0) {
        free(pre);
        return s3_error(q, "ServiceUnavailable", "out of memory");
    }
    int rc = b->put(b, mk, q->okey, strlen(q->okey));
    free(pre);
    free(mk);
    if (rc < 0)
        return blob_error(q, rc);
    funcd_buf x = FUNCD_BUF_INIT;
    funcd_buf_puts(&x, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<InitiateMultipartUploadResult "
                       "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Bucket>");
    funcd_s3_xml_escape(&x, q->bucket);
    funcd_buf_puts(&x, "</Bucket><Key>");
    funcd_s3_xml_escape(&x, q->okey);
    funcd_buf_printf(&x, "</Key><UploadId>%s</UploadId></InitiateMultipartUploadResult>", id);
    rc = respond(q, 200, NULL, "application/xml", x.data, x.len);
    funcd_buf_free(&x);
    return rc;
}

/* The upload's key must be this request's; 0, or -1 answered. */
static int check_upload(request *q, const char *id, char **pre_out)
{
    funcd_blob *b = q->c->s3->blob;
    if (!valid_upload_id(id))
        return s3_error(q, "NoSuchUpload", "The specified upload does not exist.");
    char *pre = upload_prefix(q, id), *mk = NULL;
    if (!pre || asprintf(&mk, "%skey", pre) < 0) {
        free(pre);
        return s3_error(q, "ServiceUnavailable", "out of memory");
    }
    void *data = NULL;
    size_t len = 0;
    int rc = b->get(b, mk, 0, FUNCD_BLOB_TO_END, &data, &len);
    free(mk);
    int same = rc == 0 && len == strlen(q->okey) && memcmp(data, q->okey, len) == 0;
    free(data);
    if (rc < 0 && rc != FUNCD_ENOTFOUND) {
        free(pre);
        return blob_error(q, rc);
    }
    if (!same) {
        free(pre);
        return s3_error(q, "NoSuchUpload", "The specified upload does not exist.");
    }
    *pre_out = pre;
    return 0;
}

typedef struct part_info {
    unsigned number;
    char etag[40];
    char *key;
    uint64_t size;
    int64_t mtime_ms;
} part_info;

typedef struct part_list {
    part_info *v;
    size_t n, cap;
    size_t pre_len;
    int oom;
} part_list;

/* Parts are "{prefix}p/{number:05}.{etag}". */
static int collect_part(const char *key, const funcd_blob_stat *st, void *payload)
{
    part_list *l = payload;
    const char *p = key + l->pre_len;
    char *end;
    unsigned long num = strtoul(p, &end, 10);
    if (end - p != 5 || *end != '.' || strlen(end + 1) >= sizeof(l->v[0].etag))
        return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        part_info *v = realloc(l->v, cap * sizeof(*v));
        if (!v) {
            l->oom = 1;
            return 1;
        }
        l->v = v;
        l->cap = cap;
    }
    part_info *pi = &l->v[l->n];
    pi->number = (unsigned)num;
    snprintf(pi->etag, sizeof(pi->etag), "%s", end + 1);
    pi->key = strdup(key);
    pi->size = st->size;
    pi->mtime_ms = st->mtime_ms;
    if (!pi->key) {
        l->oom = 1;
        return 1;
    }
    l->n++;
    return 0;
}

static void free_parts(part_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].key);
    free(l->v);
}

static int list_parts(request *q, const char *pre, part_list *l)
{
    funcd_blob *b = q->c->s3->blob;
    char *pp = NULL;
    if (asprintf(&pp, "%sp/", pre) < 0)
        return FUNCD_ENOMEM;
    l->pre_len = strlen(pp);
    int rc = b->list(b, pp, collect_part, l);
    free(pp);
    if (rc == 0 && l->oom)
        rc = FUNCD_ENOMEM;
    return rc;
}

static int op_upload_part(request *q, const char *id, const char *num)
{
    funcd_s3 *s = q->c->s3;
    char *end;
    long n = strtol(num, &end, 10);
    if (*end || end == num || n < 1 || n > 10000)
        return s3_error(q, "InvalidArgument", "Part number must be an integer between 1 and "
                                              "10000, inclusive");
    if (funcd_s3_header(q->r, "x-amz-copy-source"))
        return s3_error(q, "NotImplemented", "UploadPartCopy is not implemented");
    char *pre;
    if (check_upload(q, id, &pre) < 0)
        return -1;
    /* The part's ETag names its blob key, which the writer needs first: a
     * signed SHA-256 of the body when there is one, else random (clients
     * only echo part ETags back). */
    char etag[33];
    if (strlen(q->auth.payload_hash) == 64) {
        snprintf(etag, sizeof(etag), "%.32s", q->auth.payload_hash);
        for (char *c = etag; *c; c++)
            if (*c >= 'A' && *c <= 'F')
                *c = (char)(*c - 'A' + 'a');
    } else {
        uint8_t raw[16];
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
            free(pre);
            return s3_error(q, "InternalError", "no randomness for a part ETag");
        }
        funcd_hex(raw, 16, etag);
    }
    char *pk = NULL;
    if (asprintf(&pk, "%sp/%05ld.%s", pre, n, etag) < 0) {
        free(pre);
        return s3_error(q, "ServiceUnavailable", "out of memory");
    }
    if (body_to_blob(q, s->max_upload, pk) < 0) {
        free(pk);
        free(pre);
        return -1;
    }
    /* a part uploaded again replaces the earlier one */
    part_list l = {0};
    int rc = list_parts(q, pre, &l);
    for (size_t i = 0; rc == 0 && i < l.n; i++)
        if (l.v[i].number == (unsigned)n && strcmp(l.v[i].key, pk) != 0)
            s->blob->del(s->blob, l.v[i].key);
    free(pk);
    free(pre);
    free_parts(&l);
    if (rc < 0)
        return blob_error(q, rc);
    char extra[96];
    snprintf(extra, sizeof(extra), "ETag: \"%s\"\r\n", etag);
    return respond(q, 200, extra, NULL, NULL, 0);
}

static int cmp_part(const void *a, const void *b)
{
    const part_info *x = a, *y = b;
    return x->number < y->number ? -1 : x->number > y->number;
}

static int op_list_parts(request *q, const char *id)
{
    char *pre;
    if (check_upload(q, id, &pre) < 0)
        return -1;
    part_list l = {0};
    int rc = list_parts(q, pre, &l);
    free(pre);
    if (rc < 0) {
        free_parts(&l);
        return blob_error(q, rc);
    }
    qsort(l.v, l.n, sizeof(*l.v), cmp_part);
    const char *marker = funcd_s3_param_get(q->r, "part-number-marker");
    const char *maxp = funcd_s3_param_get(q->r, "max-parts");
    unsigned long after = marker ? strtoul(marker, NULL, 10) : 0;
    unsigned long max = maxp ? strtoul(maxp, NULL, 10) : 1000;
    if (max == 0 || max > 1000)
        max = 1000;
    funcd_buf x = FUNCD_BUF_INIT;
    funcd_buf_puts(&x, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListPartsResult "
                       "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Bucket>");
    funcd_s3_xml_escape(&x, q->bucket);
    funcd_buf_puts(&x, "</Bucket><Key>");
    funcd_s3_xml_escape(&x, q->okey);
    funcd_buf_printf(&x, "</Key><UploadId>%s</UploadId><PartNumberMarker>%lu</PartNumberMarker>",
                     id, after);
    size_t shown = 0;
    unsigned last = 0;
    int truncated = 0;
    for (size_t i = 0; i < l.n; i++) {
        if (l.v[i].number <= after)
            continue;
        if (shown == max) {
            truncated = 1;
            break;
        }
        char lm[40];
        iso_date(l.v[i].mtime_ms, lm, sizeof(lm));
        funcd_buf_printf(&x,
                         "<Part><PartNumber>%u</PartNumber><LastModified>%s</LastModified>"
                         "<ETag>&quot;%s&quot;</ETag><Size>%llu</Size></Part>",
                         l.v[i].number, lm, l.v[i].etag, (unsigned long long)l.v[i].size);
        last = l.v[i].number;
        shown++;
    }
    funcd_buf_printf(&x,
                     "<NextPartNumberMarker>%u</NextPartNumberMarker><MaxParts>%lu</MaxParts>"
                     "<IsTruncated>%s</IsTruncated><StorageClass>STANDARD</StorageClass>"
                     "</ListPartsResult>",
                     last, max, truncated ? "true" : "false");
    free_parts(&l);
    rc = respond(q, 200, NULL, "application/xml", x.data, x.len);
    funcd_buf_free(&x);
    return rc;
}

static void remove_upload(request *q, const char *pre, part_list *l)
{
    funcd_blob *b = q->c->s3->blob;
    for (size_t i = 0; i < l->n; i++)
        b->del(b, l->v[i].key);
    char *mk = NULL;
    if (asprintf(&mk, "%skey", pre) >= 0) {
        b->del(b, mk);
        free(mk);
    }
}

static int op_abort(request *q, const char *id)
{
    char *pre;
    if (check_upload(q, id, &pre) < 0)
        return -1;
    part_list l = {0};
    int rc = list_parts(q, pre, &l);
    if (rc == 0)
        remove_upload(q, pre, &l);
    free(pre);
    free_parts(&l);
    if (rc < 0)
        return blob_error(q, rc);
    return respond(q, 204, NULL, NULL, NULL, 0);
}

/* Writes the parts, in order, into a new object `k` by ranged reads of
 * GET_CHUNK each: one chunk in memory, whatever the object's size. */
static int compose(funcd_blob *b, const char *k, part_info *const *use, size_t n)
{
    funcd_blob_writer *w = NULL;
    int rc = funcd_port_blob_put_open(b, k, &w);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        for (uint64_t at = 0; rc == 0 && at < use[i]->size;) {
            uint64_t want = use[i]->size - at < GET_CHUNK ? use[i]->size - at : GET_CHUNK;
            void *d = NULL;
            size_t dl = 0;
            rc = b->get(b, use[i]->key, at, want, &d, &dl);
            if (rc == 0 && dl != want)
                rc = funcd_error_set(FUNCD_ECONFLICT, "part %u changed while completing",
                                     use[i]->number);
            if (rc == 0)
                rc = w->write(w, d, dl);
            free(d);
            at += dl;
        }
    }
    if (rc == 0)
        return w->commit(w);
    if (w)
        w->abort(w);
    return rc;
}

static int op_complete(request *q, const char *id)
{
    funcd_s3 *s = q->c->s3;
    char *pre;
    if (check_upload(q, id, &pre) < 0)
        return -1;
    char *xml;
    size_t xlen;
    if (read_small_body(q, &xml, &xlen) < 0) {
        free(pre);
        return -1;
    }
    funcd_s3_part_ref *refs = NULL;
    size_t nrefs = 0;
    int prc = funcd_s3_parse_complete(xml, xlen, &refs, &nrefs);
    free(xml);
    if (prc < 0) {
        free(pre);
        return s3_error(q, "MalformedXML", "The XML you provided was not well-formed or did not "
                                           "validate against our published schema");
    }
    part_list l = {0};
    int rc = list_parts(q, pre, &l);
    if (rc < 0) {
        free(pre);
        free(refs);
        free_parts(&l);
        return blob_error(q, rc);
    }
    /* check the list, add up the size */
    part_info **use = calloc(nrefs, sizeof(*use));
    uint64_t total = 0;
    const char *bad = NULL;
    char why[256] = "";
    for (size_t i = 0; use && i < nrefs && !bad; i++) {
        if (i && refs[i].number <= refs[i - 1].number) {
            bad = "InvalidPartOrder";
            snprintf(why, sizeof(why), "The list of parts was not in ascending order.");
            break;
        }
        for (size_t j = 0; j < l.n; j++)
            if (l.v[j].number == refs[i].number && strcmp(l.v[j].etag, refs[i].etag) == 0)
                use[i] = &l.v[j];
        if (!use[i]) {
            bad = "InvalidPart";
            snprintf(why, sizeof(why), "part %u with ETag %s was not uploaded", refs[i].number,
                     refs[i].etag);
        } else if (i + 1 < nrefs && use[i]->size < MIN_PART) {
            bad = "EntityTooSmall";
            snprintf(why, sizeof(why), "part %u is smaller than 5 MiB and not the last",
                     refs[i].number);
        } else {
            total += use[i]->size;
        }
    }
    if (!bad && total > s->max_upload) {
        bad = "EntityTooLarge";
        snprintf(why, sizeof(why), "the object would hold %llu bytes: more than %llu "
                                   "(--s3-max-upload)",
                 (unsigned long long)total, (unsigned long long)s->max_upload);
    }
    char *k = NULL;
    funcd_blob_stat st = {0};
    if (!bad && rc == 0 && !use)
        rc = FUNCD_ENOMEM;
    if (!bad && rc == 0 && !(k = obj_key(q, q->okey)))
        rc = FUNCD_ENOMEM;
    if (!bad && rc == 0)
        rc = compose(s->blob, k, use, nrefs);
    if (!bad && rc == 0)
        rc = s->blob->stat(s->blob, k, &st);
    if (!bad && rc == 0)
        remove_upload(q, pre, &l);
    free(k);
    free(use);
    free(refs);
    free(pre);
    free_parts(&l);
    if (bad)
        return s3_error(q, bad, "%s", why);
    if (rc == FUNCD_ENOMEM)
        return s3_error(q, "ServiceUnavailable", "out of memory assembling the object");
    if (rc < 0)
        return blob_error(q, rc);
    char etag[35];
    object_etag(&st, etag);
    funcd_buf x = FUNCD_BUF_INIT;
    funcd_buf_puts(&x, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CompleteMultipartUploadResult "
                       "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Location>/");
    funcd_s3_xml_escape(&x, q->bucket);
    funcd_buf_puts(&x, "/");
    funcd_s3_xml_escape(&x, q->okey);
    funcd_buf_puts(&x, "</Location><Bucket>");
    funcd_s3_xml_escape(&x, q->bucket);
    funcd_buf_puts(&x, "</Bucket><Key>");
    funcd_s3_xml_escape(&x, q->okey);
    funcd_buf_puts(&x, "</Key><ETag>");
    funcd_s3_xml_escape(&x, etag);
    funcd_buf_puts(&x, "</ETag></CompleteMultipartUploadResult>");
    rc = respond(q, 200, NULL, "application/xml", x.data, x.len);
    funcd_buf_free(&x);
    return rc;
}

/* ---- listing -------------------------------------------------------------------------- */

typedef struct entry {
    char *key; /* relative to the bucket; a common prefix when size == UINT64_MAX */
    uint64_t size;
    int64_t mtime_ms;
} entry;

typedef struct lister {
    size_t base_len;     /* "s3/{ns}/{bucket}/" */
    const char *prefix;
    const char *delim;   /* NULL or "" : none */
    const char *after;   /* skip keys <= this */
    int after_is_prefix; /* skip keys starting with `after` too */
    size_t max;
    entry *v;
    size_t n;
    int truncated;
    int oom;
} lister;

static int list_one(const char *key, const funcd_blob_stat *st, void *payload)
{
    lister *l = payload;
    const char *k = key + l->base_len;
    if (l->after && (strcmp(k, l->after) <= 0 ||
                     (l->after_is_prefix && strncmp(k, l->after, strlen(l->after)) == 0)))
        return 0;
    size_t plen = strlen(l->prefix);
    size_t klen = strlen(k);
    uint64_t size = st->size;
    if (l->delim && *l->delim) {
        const char *d = strstr(k + plen, l->delim);
        if (d) {
            klen = (size_t)(d - k) + strlen(l->delim);
            size = UINT64_MAX;
            if (l->n && l->v[l->n - 1].size == UINT64_MAX &&
                strlen(l->v[l->n - 1].key) == klen && memcmp(l->v[l->n - 1].key, k, klen) == 0)
                return 0; /* the same common prefix again */
        }
    }
    if (l->n == l->max) {
        l->truncated = 1;
        return 1;
    }
    char *copy = funcd_strndup(k, klen);
    if (!copy) {
        l->oom = 1;
        return 1;
    }
    l->v[l->n].key = copy;
    l->v[l->n].size = size;
    l->v[l->n].mtime_ms = st->mtime_ms;
    l->n++;
    return 0;
}

static void put_text(funcd_buf *x, const char *s, int url)
{
    if (url)
        funcd_s3_uri_encode(x, s, strlen(s), 1);
    else
        funcd_s3_xml_escape(x, s);
}

static int op_list(request *q, int v2)
{
    funcd_blob *b = q->c->s3->blob;
    const char *prefix = funcd_s3_param_get(q->r, "prefix");
    const char *delim = funcd_s3_param_get(q->r, "delimiter");
    const char *maxk = funcd_s3_param_get(q->r, "max-keys");
    const char *token = v2 ? funcd_s3_param_get(q->r, "continuation-token") : NULL;
    const char *start = funcd_s3_param_get(q->r, v2 ? "start-after" : "marker");
    const char *enc = funcd_s3_param_get(q->r, "encoding-type");
    int url = enc && strcmp(enc, "url") == 0;
    if (!prefix)
        prefix = "";
    if (!allowed(q, prefix, 0))
        return s3_error(q, "AccessDenied",
                        "function %s/%s may not list %s/%s*: list a prefix its spec.bindings.blob "
                        "covers",
                        q->ns, q->name, q->bucket, prefix);
    size_t max = MAX_LIST;
    if (maxk) {
        char *end;
        long m = strtol(maxk, &end, 10);
        if (*end || end == maxk || m < 0)
            return s3_error(q, "InvalidArgument", "max-keys must be a non-negative integer");
        if (m < (long)max)
            max = (size_t)m;
    }
    char tok[1100] = "";
    lister l = {.prefix = prefix, .delim = delim, .max = max};
    if (token) {
        /* our tokens: "K" or "P" and the last key or common prefix, base64 */
        unsigned char raw[1100];
        size_t rl = 0;
        if (mbedtls_base64_decode(raw, sizeof(raw) - 1, &rl, (const unsigned char *)token,
                                  strlen(token)) != 0 ||
            rl < 1 || (raw[0] != 'K' && raw[0] != 'P') || memchr(raw, 0, rl))
            return s3_error(q, "InvalidArgument", "The continuation token provided is incorrect");
        memcpy(tok, raw + 1, rl - 1);
        tok[rl - 1] = '\0';
        l.after = tok;
        l.after_is_prefix = raw[0] == 'P';
    } else if (start && *start) {
        l.after = start;
    }
    char *base = NULL;
    if (asprintf(&base, "s3/%s/%s/", q->ns, q->bucket) < 0)
        return s3_error(q, "ServiceUnavailable", "out of memory");
    l.base_len = strlen(base);
    char *full = NULL;
    if (asprintf(&full, "%s%s", base, prefix) < 0) {
        free(base);
        return s3_error(q, "ServiceUnavailable", "out of memory");
    }
    free(base);
    l.v = calloc(max + 1, sizeof(*l.v));
    int rc = l.v ? 0 : FUNCD_ENOMEM;
    if (rc == 0 && max > 0)
        rc = b->list(b, full, list_one, &l);
    free(full);
    if (rc == 0 && l.oom)
        rc = FUNCD_ENOMEM;
    if (rc < 0) {
        for (size_t i = 0; i < l.n; i++)
            free(l.v[i].key);
        free(l.v);
        return rc == FUNCD_ENOMEM ? s3_error(q, "ServiceUnavailable", "out of memory")
                                  : blob_error(q, rc);
    }
    funcd_buf x = FUNCD_BUF_INIT;
    funcd_buf_puts(&x, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult "
                       "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>");
    funcd_s3_xml_escape(&x, q->bucket);
    funcd_buf_puts(&x, "</Name><Prefix>");
    put_text(&x, prefix, url);
    funcd_buf_puts(&x, "</Prefix>");
    if (delim) {
        funcd_buf_puts(&x, "<Delimiter>");
        put_text(&x, delim, url);
        funcd_buf_puts(&x, "</Delimiter>");
    }
    if (url)
        funcd_buf_puts(&x, "<EncodingType>url</EncodingType>");
    funcd_buf_printf(&x, "<MaxKeys>%zu</MaxKeys><IsTruncated>%s</IsTruncated>", max,
                     l.truncated ? "true" : "false");
    if (v2) {
        funcd_buf_printf(&x, "<KeyCount>%zu</KeyCount>", l.n);
        if (token) {
            funcd_buf_puts(&x, "<ContinuationToken>");
            funcd_s3_xml_escape(&x, token);
            funcd_buf_puts(&x, "</ContinuationToken>");
        }
        if (start) {
            funcd_buf_puts(&x, "<StartAfter>");
            put_text(&x, start, url);
            funcd_buf_puts(&x, "</StartAfter>");
        }
        if (l.truncated && l.n) {
            const entry *e = &l.v[l.n - 1];
            size_t kl = strlen(e->key);
            unsigned char *raw = malloc(kl + 1);
            size_t olen = 0;
            unsigned char *b64 = malloc(((kl + 1) / 3 + 2) * 4 + 1);
            if (raw && b64) {
                raw[0] = e->size == UINT64_MAX ? 'P' : 'K';
                memcpy(raw + 1, e->key, kl);
                mbedtls_base64_encode(b64, ((kl + 1) / 3 + 2) * 4 + 1, &olen, raw, kl + 1);
                funcd_buf_printf(&x, "<NextContinuationToken>%.*s</NextContinuationToken>",
                                 (int)olen, b64);
            }
            free(raw);
            free(b64);
        }
    } else {
        funcd_buf_puts(&x, "<Marker>");
        put_text(&x, start ? start : "", url);
        funcd_buf_puts(&x, "</Marker>");
        if (l.truncated && l.n) {
            funcd_buf_puts(&x, "<NextMarker>");
            put_text(&x, l.v[l.n - 1].key, url);
            funcd_buf_puts(&x, "</NextMarker>");
        }
    }
    for (size_t i = 0; i < l.n; i++) {
        const entry *e = &l.v[i];
        if (e->size == UINT64_MAX)
            continue;
        char lm[40], etag[35];
        funcd_blob_stat st = {e->size, e->mtime_ms};
        iso_date(e->mtime_ms, lm, sizeof(lm));
        object_etag(&st, etag);
        funcd_buf_puts(&x, "<Contents><Key>");
        put_text(&x, e->key, url);
        funcd_buf_printf(&x,
                         "</Key><LastModified>%s</LastModified><ETag>&quot;%.32s&quot;</ETag>"
                         "<Size>%llu</Size><StorageClass>STANDARD</StorageClass></Contents>",
                         lm, etag + 1, (unsigned long long)e->size);
    }
    for (size_t i = 0; i < l.n; i++) {
        const entry *e = &l.v[i];
        if (e->size != UINT64_MAX)
            continue;
        funcd_buf_puts(&x, "<CommonPrefixes><Prefix>");
        put_text(&x, e->key, url);
        funcd_buf_puts(&x, "</Prefix></CommonPrefixes>");
    }
    funcd_buf_puts(&x, "</ListBucketResult>");
    for (size_t i = 0; i < l.n; i++)
        free(l.v[i].key);
    free(l.v);
    rc = respond(q, 200, NULL, "application/xml", x.data, x.len);
    funcd_buf_free(&x);
    return rc;
}

static int op_list_buckets(request *q)
{
    funcd_buf x = FUNCD_BUF_INIT;
    funcd_buf_puts(&x, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListAllMyBucketsResult "
                       "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Owner><ID>");
    funcd_s3_xml_escape(&x, q->ns);
    funcd_buf_puts(&x, "</ID></Owner><Buckets>");
    for (size_t i = 0; i < q->n_bindings; i++) {
        int dup = 0;
        for (size_t j = 0; j < i; j++)
            dup |= strcmp(q->bindings[i].bucket, q->bindings[j].bucket) == 0;
        if (dup)
            continue;
        funcd_buf_puts(&x, "<Bucket><Name>");
        funcd_s3_xml_escape(&x, q->bindings[i].bucket);
        funcd_buf_puts(&x, "</Name><CreationDate>1970-01-01T00:00:00.000Z</CreationDate></Bucket>");
    }
    funcd_buf_puts(&x, "</Buckets></ListAllMyBucketsResult>");
    int rc = respond(q, 200, NULL, "application/xml", x.data, x.len);
    funcd_buf_free(&x);
    return rc;
}

static int op_delete_objects(request *q)
{
    funcd_blob *b = q->c->s3->blob;
    char *xml;
    size_t xlen;
    if (read_small_body(q, &xml, &xlen) < 0)
        return -1;
    char **keys = NULL;
    int quiet = 0;
    int prc = funcd_s3_parse_delete(xml, xlen, &keys, &quiet);
    free(xml);
    if (prc < 0)
        return s3_error(q, "MalformedXML", "The XML you provided was not well-formed or did not "
                                           "validate against our published schema");
    funcd_buf x = FUNCD_BUF_INIT;
    funcd_buf_puts(&x, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DeleteResult "
                       "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
    for (char **k = keys; *k; k++) {
        const char *code = NULL, *msg = NULL;
        if (!allowed(q, *k, 1)) {
            code = "AccessDenied";
            msg = "no spec.bindings.blob entry with access readwrite covers this key";
        } else {
            char *bk = obj_key(q, *k);
            int rc = bk ? b->del(b, bk) : FUNCD_ENOMEM;
            free(bk);
            if (rc < 0 && rc != FUNCD_ENOTFOUND) {
                code = "InternalError";
                msg = funcd_error_last()->message;
            }
        }
        if (code) {
            funcd_buf_puts(&x, "<Error><Key>");
            funcd_s3_xml_escape(&x, *k);
            funcd_buf_printf(&x, "</Key><Code>%s</Code><Message>", code);
            funcd_s3_xml_escape(&x, msg);
            funcd_buf_puts(&x, "</Message></Error>");
        } else if (!quiet) {
            funcd_buf_puts(&x, "<Deleted><Key>");
            funcd_s3_xml_escape(&x, *k);
            funcd_buf_puts(&x, "</Key></Deleted>");
        }
    }
    funcd_buf_puts(&x, "</DeleteResult>");
    for (char **k = keys; *k; k++)
        free(*k);
    free(keys);
    int rc = respond(q, 200, NULL, "application/xml", x.data, x.len);
    funcd_buf_free(&x);
    return rc;
}

static int valid_bucket_name(const char *b)
{
    size_t n = strlen(b);
    if (n < 3 || n > 63)
        return 0;
    for (const char *p = b; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.'))
            return 0;
    return 1;
}

static void dispatch(request *q)
{
    funcd_s3_req *r = q->r;
    const char *m = r->method;
    q->head = strcmp(m, "HEAD") == 0;
    /* path-style: /{bucket}/{key} */
    const char *p = r->path + 1;
    size_t bl = strcspn(p, "/");
    if (bl >= sizeof(q->bucket)) {
        s3_error(q, "InvalidBucketName", "The specified bucket is not valid.");
        return;
    }
    memcpy(q->bucket, p, bl);
    q->bucket[bl] = '\0';
    const char *k = p[bl] == '/' ? p + bl + 1 : "";
    if (*k)
        q->okey = k;
    if (authenticate(q) < 0)
        return;
    if (!bl) {
        if (strcmp(m, "GET") == 0)
            op_list_buckets(q);
        else
            s3_error(q, "MethodNotAllowed", "The specified method is not allowed against this "
                                            "resource.");
        return;
    }
    if (!valid_bucket_name(q->bucket)) {
        s3_error(q, "InvalidBucketName", "The specified bucket is not valid.");
        return;
    }
    if (!bucket_bound(q)) {
        s3_error(q, "AccessDenied", "function %s/%s has no spec.bindings.blob entry for bucket %s",
                 q->ns, q->name, q->bucket);
        return;
    }
    if (strlen(k) > 1024) {
        s3_error(q, "KeyTooLongError", "Your key is too long");
        return;
    }
    const char *upload = funcd_s3_param_get(r, "uploadId");
    if (!q->okey) {
        if (strcmp(m, "GET") == 0 && funcd_s3_param_get(r, "location")) {
            static const char loc[] = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                                      "<LocationConstraint xmlns=\"http://s3.amazonaws.com/doc/"
                                      "2006-03-01/\">" FUNCD_S3_REGION "</LocationConstraint>";
            respond(q, 200, NULL, "application/xml", loc, sizeof(loc) - 1);
        } else if (strcmp(m, "GET") == 0 && funcd_s3_param_get(r, "uploads")) {
            s3_error(q, "NotImplemented", "ListMultipartUploads is not implemented");
        } else if (strcmp(m, "GET") == 0) {
            const char *lt = funcd_s3_param_get(r, "list-type");
            op_list(q, lt && strcmp(lt, "2") == 0);
        } else if (q->head) {
            respond(q, 200, NULL, NULL, NULL, 0);
        } else if (strcmp(m, "POST") == 0 && funcd_s3_param_get(r, "delete")) {
            op_delete_objects(q);
        } else {
            s3_error(q, "MethodNotAllowed", "buckets are made by spec.bindings.blob, not by "
                                            "this method");
        }
        return;
    }
    int write = !(strcmp(m, "GET") == 0 || q->head);
    if (!allowed(q, q->okey, write)) {
        deny(q, q->okey, write);
        return;
    }
    if (strcmp(m, "GET") == 0 && upload)
        op_list_parts(q, upload);
    else if (strcmp(m, "GET") == 0 || q->head)
        op_get(q);
    else if (strcmp(m, "PUT") == 0 && upload)
        op_upload_part(q, upload, funcd_s3_param_get(r, "partNumber") ? funcd_s3_param_get(r, "partNumber") : "");
    else if (strcmp(m, "PUT") == 0)
        op_put(q);
    else if (strcmp(m, "DELETE") == 0 && upload)
        op_abort(q, upload);
    else if (strcmp(m, "DELETE") == 0)
        op_delete(q);
    else if (strcmp(m, "POST") == 0 && funcd_s3_param_get(r, "uploads"))
        op_create_upload(q);
    else if (strcmp(m, "POST") == 0 && upload)
        op_complete(q, upload);
    else
        s3_error(q, "MethodNotAllowed", "The specified method is not allowed against this "
                                        "resource.");
}

/* ---- connections ---------------------------------------------------------------------- */

static long sock_read(void *ctx, void *buf, size_t cap)
{
    int fd = *(int *)ctx;
    for (;;) {
        ssize_t n = recv(fd, buf, cap, 0);
        if (n < 0 && errno == EINTR)
            continue;
        return n;
    }
}

static void *conn_main(void *arg)
{
    conn *c = arg;
    funcd_s3 *s = c->s3;
    funcd_s3_reader *rd = malloc(sizeof(*rd));
    funcd_s3_req *r = malloc(sizeof(*r));
    if (rd && r) {
        rd->read = sock_read;
        rd->ctx = &c->fd;
        rd->pos = rd->len = 0;
        rd->eof = rd->failed = 0;
        for (;;) {
            char err[256] = "";
            request q = {.c = c, .rd = rd, .r = r};
            uint8_t rid[8];
            if (getrandom(rid, sizeof(rid), GRND_NONBLOCK) != (ssize_t)sizeof(rid))
                memset(rid, 0, sizeof(rid));
            funcd_hex(rid, 8, q.request_id);
            int h = funcd_s3_read_head(rd, r, err, sizeof(err));
            if (h <= 0 && h > -2)
                break;
            if (h < 0) {
                r->method = "-"; /* s3_error logs them */
                r->path[0] = '\0';
                q.close = 1;
                if (h == -3)
                    s3_error(&q, "BadRequest", "the request head is larger than %u bytes",
                             FUNCD_S3_MAX_HEAD);
                else
                    s3_error(&q, "BadRequest", "%s", err);
                break;
            }
            const char *cl = funcd_s3_header(r, "content-length");
            q.body_read = !cl || strcmp(cl, "0") == 0;
            const char *conn_h = funcd_s3_header(r, "connection");
            if (r->http10 || (conn_h && strcasecmp(conn_h, "close") == 0))
                q.close = 1;
            dispatch(&q);
            free_bindings(&q);
            if (q.close)
                break;
        }
    }
    free(rd);
    free(r);
    pthread_mutex_lock(&s->mu);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    close(c->fd);
    c->fd = -1;
    s->n_conns--;
    if (!s->n_conns)
        pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->mu);
    free(c->ns);
    free(c->name);
    free(c);
    return NULL;
}

static void start_conn(funcd_s3 *s, int fd, const listener *l)
{
    struct timeval tv = {IO_TIMEOUT_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    conn *c = calloc(1, sizeof(*c));
    if (!c || (l->ns && (!(c->ns = strdup(l->ns)) || !(c->name = strdup(l->name))))) {
        if (c) {
            free(c->ns);
            free(c);
        }
        close(fd);
        return;
    }
    c->s3 = s;
    c->fd = fd;
    pthread_mutex_lock(&s->mu);
    /* A worker's own listener may hold only its share of the connections,
     * so one function cannot take them all from the others. */
    unsigned mine = 0;
    for (const conn *o = s->conns; o && c->ns; o = o->next)
        mine += o->ns && strcmp(o->ns, c->ns) == 0 && strcmp(o->name, c->name) == 0;
    if (s->stopping || s->n_conns >= MAX_CONNS || mine >= MAX_CONNS_PER_FUNCTION) {
        pthread_mutex_unlock(&s->mu);
        close(fd);
        free(c->ns);
        free(c->name);
        free(c);
        return;
    }
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    int rc = pthread_create(&t, &at, conn_main, c);
    pthread_attr_destroy(&at);
    if (rc != 0) {
        s->conns = c->next;
        if (c->next)
            c->next->prev = NULL;
        s->n_conns--;
        pthread_mutex_unlock(&s->mu);
        close(fd);
        free(c->ns);
        free(c->name);
        free(c);
        return;
    }
    pthread_mutex_unlock(&s->mu);
}

static void *acceptor_main(void *arg)
{
    funcd_s3 *s = arg;
    struct pollfd *pf = NULL;
    listener **who = NULL;
    size_t cap = 0;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        for (size_t i = 0; i < s->n_closing; i++)
            close(s->closing[i]);
        s->n_closing = 0;
        if (s->stopping) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        size_t n = 1;
        for (listener *l = s->listeners; l; l = l->next)
            n++;
        if (n > cap) {
            struct pollfd *np = realloc(pf, n * sizeof(*pf));
            listener **nw = np ? realloc(who, n * sizeof(*who)) : NULL;
            if (np)
                pf = np;
            if (nw)
                who = nw;
            if (!np || !nw) {
                pthread_mutex_unlock(&s->mu);
                usleep(100000);
                continue;
            }
            cap = n;
        }
        pf[0] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
        n = 1;
        for (listener *l = s->listeners; l; l = l->next) {
            pf[n] = (struct pollfd){.fd = l->fd, .events = POLLIN};
            who[n++] = l;
        }
        pthread_mutex_unlock(&s->mu);
        int rc = poll(pf, n, -1);
        if (rc < 0 && errno != EINTR)
            break;
        if (rc <= 0)
            continue;
        if (pf[0].revents) {
            char b[64];
            while (read(s->wake[0], b, sizeof(b)) > 0)
                ;
            continue; /* the set changed: `who` may point at freed listeners */
        }
        for (size_t i = 1; i < n; i++) {
            if (!(pf[i].revents & POLLIN))
                continue;
            int fd = accept4(pf[i].fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd < 0)
                continue;
            pthread_mutex_lock(&s->mu);
            listener copy = {0};
            int live = 0;
            /* the same object on the same fd: a removed listener's fd stays
             * open until the top of this loop, so no new one reuses it */
            for (listener *l = s->listeners; l; l = l->next)
                if (l == who[i] && l->fd == pf[i].fd) {
                    copy = *l;
                    live = 1;
                }
            char *ns = live && copy.ns ? strdup(copy.ns) : NULL;
            char *name = live && copy.name ? strdup(copy.name) : NULL;
            pthread_mutex_unlock(&s->mu);
            if (!live || (copy.ns && (!ns || !name))) {
                close(fd);
            } else {
                copy.ns = ns;
                copy.name = name;
                start_conn(s, fd, &copy);
            }
            free(ns);
            free(name);
        }
    }
    free(pf);
    free(who);
    return NULL;
}

static void wake(funcd_s3 *s)
{
    ssize_t w = write(s->wake[1], "x", 1);
    (void)w;
}

void *funcd_s3_listen_fd(funcd_s3 *s, int fd, const char *ns, const char *name)
{
    listener *l = calloc(1, sizeof(*l));
    if (!l || (ns && (!(l->ns = strdup(ns)) || !(l->name = strdup(name))))) {
        if (l) {
            free(l->ns);
            free(l);
        }
        close(fd);
        return NULL;
    }
    l->fd = fd;
    pthread_mutex_lock(&s->mu);
    l->next = s->listeners;
    s->listeners = l;
    pthread_mutex_unlock(&s->mu);
    wake(s);
    return l;
}

void funcd_s3_unlisten(funcd_s3 *s, void *handle)
{
    listener *l = handle;
    if (!l)
        return;
    pthread_mutex_lock(&s->mu);
    for (listener **pp = &s->listeners; *pp; pp = &(*pp)->next)
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    int queued = 0;
    if (s->acceptor_started && !s->stopping) {
        if (s->n_closing == s->cap_closing) {
            size_t cap = s->cap_closing ? s->cap_closing * 2 : 8;
            int *v = realloc(s->closing, cap * sizeof(*v));
            if (v) {
                s->closing = v;
                s->cap_closing = cap;
            }
        }
        if (s->n_closing < s->cap_closing) {
            s->closing[s->n_closing++] = l->fd;
            queued = 1;
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (queued)
        wake(s);
    else
        close(l->fd); /* the acceptor is not polling (or will not again) */
    free(l->ns);
    free(l->name);
    free(l);
}

int funcd_s3_new(funcd_s3 **out, const funcd_s3_config *cfg, char *bound, size_t bound_len)
{
    funcd_s3 *s = calloc(1, sizeof(*s));
    if (!s)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory creating the S3 gateway");
    s->store = cfg->store;
    s->blob = cfg->blob;
    s->logger = cfg->logger;
    s->max_upload = cfg->max_upload ? cfg->max_upload : FUNCD_S3_MAX_UPLOAD_DEFAULT;
    s->wake[0] = s->wake[1] = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->idle, NULL);
    int rc = load_master(s, cfg);
    if (rc < 0)
        goto fail;
    if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
        rc = funcd_error_set(FUNCD_EIO, "cannot make the S3 gateway's wake pipe: %s",
                             strerror(errno));
        goto fail;
    }
    if (cfg->listen_addr) {
        int fd = funcd_listen_tcp(cfg->listen_addr, 0, s->addr, sizeof(s->addr));
        if (fd < 0) {
            rc = fd;
            goto fail;
        }
        if (!funcd_s3_listen_fd(s, fd, NULL, NULL)) {
            rc = funcd_error_set(FUNCD_ENOMEM, "out of memory");
            goto fail;
        }
    }
    if (pthread_create(&s->acceptor, NULL, acceptor_main, s) != 0) {
        rc = funcd_error_set(FUNCD_EIO, "cannot start the S3 gateway's thread");
        goto fail;
    }
    s->acceptor_started = 1;
    if (bound && bound_len)
        snprintf(bound, bound_len, "%s", s->addr);
    *out = s;
    return 0;
fail:
    funcd_s3_free(s);
    return rc;
}

void funcd_s3_free(funcd_s3 *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_mutex_unlock(&s->mu);
    if (s->acceptor_started) {
        wake(s);
        pthread_join(s->acceptor, NULL);
        s->acceptor_started = 0;
    }
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->n_closing; i++)
        close(s->closing[i]);
    s->n_closing = 0;
    for (conn *c = s->conns; c; c = c->next)
        shutdown(c->fd, SHUT_RDWR);
    while (s->n_conns)
        pthread_cond_wait(&s->idle, &s->mu);
    pthread_mutex_unlock(&s->mu);
    while (s->listeners) {
        listener *l = s->listeners;
        s->listeners = l->next;
        close(l->fd);
        free(l->ns);
        free(l->name);
        free(l);
    }
    free(s->closing);
    if (s->wake[0] >= 0)
        close(s->wake[0]);
    if (s->wake[1] >= 0)
        close(s->wake[1]);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->idle);
    memset(s->master, 0, sizeof(s->master));
    free(s);
}
