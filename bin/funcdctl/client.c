#include "client.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "funcd/funcd.h"
#include "util/misc.h"

/* An answer larger than this is not one the API sends; stop reading. */
#define CTL_MAX_BODY (64u * 1024 * 1024)
#define CTL_CONNECT_TIMEOUT_S 10L
#define CTL_REQUEST_TIMEOUT_S 60L
#define CTL_UPLOAD_TIMEOUT_S 600L

struct ctl_client {
    CURL *curl;
    struct curl_slist *headers; /* for JSON bodies */
    char *server;
    char *token;
    char errbuf[CURL_ERROR_SIZE];
};

/* What one request sends. */
typedef struct outgoing {
    const char *method;
    const char *path;
    const void *body; /* NULL: none */
    size_t len;
    const char *content_type; /* NULL: JSON */
    long timeout_s;
} outgoing;

/* What the write callback feeds: a whole body, or lines of a stream. */
typedef struct sink {
    ctl_client *client;
    ctl_response *resp;
    funcd_buf pending; /* stream: bytes after the last newline */
    ctl_line_fn on_line;
    void *payload;
    volatile sig_atomic_t *stop;
    int64_t deadline_ms;
    int stopped;
} sink;

char *ctl_normalize_url(const char *server)
{
    return ctl_normalize_url_as(server, "http://");
}

char *ctl_normalize_url_as(const char *server, const char *scheme)
{
    funcd_buf b = FUNCD_BUF_INIT;
    if (!strstr(server, "://"))
        funcd_buf_puts(&b, scheme);
    funcd_buf_puts(&b, server);
    while (b.len > 0 && b.data && b.data[b.len - 1] == '/')
        b.data[--b.len] = '\0';
    return funcd_buf_detach(&b, NULL);
}

static int add_header(struct curl_slist **list, const char *line)
{
    struct curl_slist *l = curl_slist_append(*list, line);
    if (!l)
        return -1;
    *list = l;
    return 0;
}

/* The headers of every request, with the body's type; NULL on OOM. */
static struct curl_slist *request_headers(const ctl_client *c, const char *content_type)
{
    funcd_buf h = FUNCD_BUF_INIT;
    struct curl_slist *list = NULL;
    int ok = funcd_buf_printf(&h, "Content-Type: %s", content_type) == 0 &&
             add_header(&list, h.data) == 0 && add_header(&list, "Accept: application/json") == 0 &&
             /* The API never answers 100 Continue: skip the wait. */
             add_header(&list, "Expect:") == 0;
    if (ok && c->token) {
        funcd_buf_reset(&h);
        ok = funcd_buf_printf(&h, "Authorization: Bearer %s", c->token) == 0 &&
             add_header(&list, h.data) == 0;
    }
    funcd_buf_free(&h);
    if (!ok) {
        curl_slist_free_all(list);
        return NULL;
    }
    return list;
}

void ctl_curl_tls(void *curl, const char *cacert)
{
    if (cacert && *cacert)
        curl_easy_setopt(curl, CURLOPT_CAINFO, cacert);
}

const char *ctl_tls_advice(int rc)
{
    switch (rc) {
    case CURLE_PEER_FAILED_VERIFICATION:
        return "its TLS certificate is not trusted; give the CA that signed it, or funcd's "
               "self-signed certificate (funcd prints its path at start), with --cacert FILE "
               "or FUNCD_CACERT";
    case CURLE_SSL_CACERT_BADFILE:
        return "the --cacert / FUNCD_CACERT file cannot be read as PEM certificates";
    case CURLE_SSL_CONNECT_ERROR:
        return "the TLS handshake failed; does this funcd serve TLS (funcd --tls ...)? "
               "without it, use http://";
    default: return NULL;
    }
}

int ctl_client_new(ctl_client **out, const char *server, const char *token, const char *cacert)
{
    *out = NULL;
    ctl_client *c = calloc(1, sizeof(*c));
    const char *scheme = cacert && *cacert ? "https://" : "http://";
    if (!c || !(c->server = ctl_normalize_url_as(server, scheme)) || !(c->curl = curl_easy_init()) ||
        (token && *token && !(c->token = funcd_strdup(token))) ||
        !(c->headers = request_headers(c, "application/json"))) {
        ctl_client_free(c);
        ctl_fail("cannot start the HTTP client (out of memory?)");
        return -1;
    }
    curl_easy_setopt(c->curl, CURLOPT_USERAGENT, "funcdctl/" FUNCD_VERSION_STRING);
    curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, c->errbuf);
    curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->curl, CURLOPT_CONNECTTIMEOUT, CTL_CONNECT_TIMEOUT_S);
    curl_easy_setopt(c->curl, CURLOPT_TCP_KEEPALIVE, 1L);
    ctl_curl_tls(c->curl, cacert);
    *out = c;
    return 0;
}

void ctl_client_free(ctl_client *c)
{
    if (!c)
        return;
    if (c->curl)
        curl_easy_cleanup(c->curl);
    curl_slist_free_all(c->headers);
    free(c->server);
    free(c->token);
    free(c);
}

const char *ctl_client_server(const ctl_client *c)
{
    return c->server;
}

static int append_segment(ctl_client *c, funcd_buf *b, const char *segment)
{
    char *esc = curl_easy_escape(c->curl, segment, 0);
    if (!esc)
        return -1;
    int rc = funcd_buf_printf(b, "/%s", esc);
    curl_free(esc);
    return rc;
}

char *ctl_api_path(ctl_client *c, const char *ns, const char *plural, const char *name,
                   const char *sub)
{
    funcd_buf b = FUNCD_BUF_INIT;
    int rc = funcd_buf_puts(&b, ns ? "/apis/" FUNCD_API_VERSION "/namespaces"
                                   : "/apis/" FUNCD_API_VERSION);
    if (rc == 0 && ns)
        rc = append_segment(c, &b, ns);
    if (rc == 0)
        rc = append_segment(c, &b, plural);
    if (rc == 0 && name)
        rc = append_segment(c, &b, name);
    if (rc == 0 && name && sub)
        rc = append_segment(c, &b, sub);
    if (rc != 0) {
        funcd_buf_free(&b);
        return NULL;
    }
    return funcd_buf_detach(&b, NULL);
}

char *ctl_resource_path(ctl_client *c, const char *ns, const funcd_kind *kind, const char *name)
{
    return ctl_api_path(c, ns, kind->plural, name, NULL);
}

char *ctl_escape(ctl_client *c, const char *s)
{
    char *esc = curl_easy_escape(c->curl, s, 0);
    char *copy = esc ? funcd_strdup(esc) : NULL;
    curl_free(esc);
    return copy;
}

static void deliver_lines(sink *s)
{
    char *start = s->pending.data;
    char *end = s->pending.data + s->pending.len;
    char *nl;
    while (!s->stopped && (nl = memchr(start, '\n', (size_t)(end - start))) != NULL) {
        size_t len = (size_t)(nl - start);
        if (len > 0 && start[len - 1] == '\r')
            len--;
        if (len > 0) {
            *nl = '\0'; /* on_line may treat the line as a C string */
            if (s->on_line(start, len, s->payload) != 0)
                s->stopped = 1;
        }
        start = nl + 1;
    }
    size_t rest = (size_t)(end - start);
    memmove(s->pending.data, start, rest);
    s->pending.len = rest;
    s->pending.data[rest] = '\0';
}

static size_t on_write(char *data, size_t size, size_t nmemb, void *userdata)
{
    sink *s = userdata;
    size_t n = size * nmemb;
    long code = 0;
    curl_easy_getinfo(s->client->curl, CURLINFO_RESPONSE_CODE, &code);
    if (s->on_line && code == 200) {
        if (s->pending.len + n > CTL_MAX_BODY || funcd_buf_append(&s->pending, data, n) != 0)
            return 0;
        deliver_lines(s);
        return s->stopped ? 0 : n;
    }
    if (s->resp->body.len + n > CTL_MAX_BODY || funcd_buf_append(&s->resp->body, data, n) != 0)
        return 0;
    return n;
}

/* libcurl calls this about once a second even when no data flows, which is
 * when a watch notices Ctrl-C or its deadline. */
static int on_progress(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    sink *s = userdata;
    if ((s->stop && *s->stop) || (s->deadline_ms > 0 && funcd_mono_ms() >= s->deadline_ms))
        s->stopped = 1;
    return s->stopped;
}

static void set_method(CURL *curl, const char *method, const void *body, size_t len)
{
    if (body) {
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, strcmp(method, "POST") ? method : NULL);
    } else {
        /* Forget the last request's body: it has been freed. */
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, NULL);
        curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
        curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, strcmp(method, "GET") ? method : NULL);
    }
}

static int report_transport(const ctl_client *c, CURLcode rc)
{
    const char *detail = c->errbuf[0] ? c->errbuf : curl_easy_strerror(rc);
    const char *tls = ctl_tls_advice(rc);
    if (tls)
        ctl_fail("cannot connect to funcd at %s securely: %s (%s)", c->server, detail, tls);
    else if (rc == CURLE_GOT_NOTHING && !strncmp(c->server, "http://", 7))
        ctl_fail("funcd at %s closed the connection without an answer: %s (if it serves TLS, "
                 "use https:// and --cacert FILE)", c->server, detail);
    else if (rc == CURLE_OPERATION_TIMEDOUT)
        ctl_fail("funcd at %s did not answer in time: %s (is it overloaded or stuck? check its "
                 "log)",
                 c->server, detail);
    else if (rc == CURLE_PARTIAL_FILE || rc == CURLE_RECV_ERROR || rc == CURLE_GOT_NOTHING)
        ctl_fail("the connection to funcd at %s broke: %s (did funcd stop? check its log, then "
                 "run the command again)",
                 c->server, detail);
    else
        ctl_fail("cannot reach funcd at %s: %s (is `funcd` running? set --server or "
                 "FUNCD_SERVER)",
                 c->server, detail);
    return -1;
}

static int perform(ctl_client *c, const outgoing *o, sink *s)
{
    funcd_buf url = FUNCD_BUF_INIT;
    struct curl_slist *headers = o->content_type ? request_headers(c, o->content_type) : NULL;
    if (funcd_buf_printf(&url, "%s%s", c->server, o->path) != 0 ||
        (o->content_type && !headers)) {
        funcd_buf_free(&url);
        ctl_fail("out of memory");
        return -1;
    }
    c->errbuf[0] = '\0';
    curl_easy_setopt(c->curl, CURLOPT_URL, url.data);
    curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, headers ? headers : c->headers);
    set_method(c->curl, o->method, o->body, o->len);
    curl_easy_setopt(c->curl, CURLOPT_TIMEOUT, o->timeout_s);
    curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(c->curl, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c->curl, CURLOPT_XFERINFODATA, s);
    curl_easy_setopt(c->curl, CURLOPT_NOPROGRESS, s->stop ? 0L : 1L);
    CURLcode rc = curl_easy_perform(c->curl);
    /* The handle is reused: it must not keep pointers to what is freed here. */
    curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, c->headers);
    curl_slist_free_all(headers);
    funcd_buf_free(&url);
    curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &s->resp->code);
    if (s->stopped)
        return 0; /* we hung up on purpose */
    if (rc == CURLE_WRITE_ERROR) {
        ctl_fail("the answer to %s %s is too large or memory ran out", o->method, o->path);
        return -1;
    }
    if (rc != CURLE_OK)
        return report_transport(c, rc);
    return 0;
}

int ctl_request(ctl_client *c, const char *method, const char *path, const char *body,
                ctl_response *resp)
{
    sink s = {.client = c, .resp = resp};
    outgoing o = {.method = method, .path = path, .body = body, .len = body ? strlen(body) : 0,
                  .timeout_s = CTL_REQUEST_TIMEOUT_S};
    funcd_buf_reset(&resp->body);
    return perform(c, &o, &s);
}

int ctl_request_body(ctl_client *c, const char *method, const char *path,
                     const char *content_type, const void *body, size_t len, ctl_response *resp)
{
    sink s = {.client = c, .resp = resp};
    outgoing o = {.method = method, .path = path, .body = body ? body : "", .len = len,
                  .content_type = content_type, .timeout_s = CTL_UPLOAD_TIMEOUT_S};
    funcd_buf_reset(&resp->body);
    return perform(c, &o, &s);
}

int ctl_stream(ctl_client *c, const char *path, ctl_line_fn on_line, void *payload,
               volatile sig_atomic_t *stop, int64_t deadline_ms, ctl_response *resp)
{
    static volatile sig_atomic_t never;
    sink s = {.client = c, .resp = resp, .on_line = on_line, .payload = payload,
              .stop = stop ? stop : &never, .deadline_ms = deadline_ms};
    outgoing o = {.method = "GET", .path = path, .timeout_s = 0L};
    funcd_buf_reset(&resp->body);
    int rc = perform(c, &o, &s);
    if (rc == 0 && !s.stopped && resp->code == 200 && s.pending.len > 0) {
        /* The last line had no newline: still a line. */
        funcd_buf_puts(&s.pending, "\n");
        deliver_lines(&s);
    }
    funcd_buf_free(&s.pending);
    return rc;
}

void ctl_response_free(ctl_response *r)
{
    funcd_buf_free(&r->body);
}

cJSON *ctl_response_json(const ctl_client *c, const ctl_response *r)
{
    cJSON *json = r->body.data ? cJSON_ParseWithLength(r->body.data, r->body.len) : NULL;
    if (!json)
        ctl_fail("%s answered HTTP %ld with something that is not JSON (is --server pointing at "
                 "funcd's control plane?)",
                 c->server, r->code);
    return json;
}

static const char *reason_phrase(long code)
{
    switch (code) {
    case 400: return "BadRequest";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "NotFound";
    case 405: return "MethodNotAllowed";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 413: return "RequestEntityTooLarge";
    case 422: return "Invalid";
    case 429: return "TooManyRequests";
    case 500: return "InternalError";
    case 503: return "ServiceUnavailable";
    default: return "Error";
    }
}

static const char *json_string(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) && v->valuestring[0] ? v->valuestring : NULL;
}

/* What to do about a refusal, unless the server's message already says it. */
static void append_advice(funcd_buf *b, long code, const char *reason, const char *field,
                          const char *ns, const char *message)
{
    char quoted_ns[80];
    snprintf(quoted_ns, sizeof(quoted_ns), "\"%s\"", ns ? ns : "");
    if (!message)
        message = "";
    if (code == 401 && !strstr(message, "FUNCD_TOKEN"))
        funcd_buf_puts(b, "; set --token or FUNCD_TOKEN to a token funcd accepts "
                          "(`funcd --dev` accepts funcd-dev-token)");
    else if (code == 403 && !strstr(message, quoted_ns))
        funcd_buf_printf(b, "; your token's role may not do this in namespace \"%s\": use a "
                            "token granted that namespace (developer or admin role), or pick "
                            "another with -n",
                         ns ? ns : "?");
    else if (code == 409 && field && strstr(field, "resourceVersion"))
        funcd_buf_puts(b, "; the object changed since it was read: run the command again");
    else if (code == 409 && reason && !strcmp(reason, "AlreadyExists"))
        funcd_buf_puts(b, "; use `funcdctl apply` to update it");
}

/* Appends "MESSAGE (CODE REASON[, field F])" and what to do; 0 if `st`
 * is not a Status. */
static int describe_status(const cJSON *st, long http_code, const char *ns, funcd_buf *b,
                           long *code_out)
{
    const char *kind = json_string(st, "kind");
    if (!kind || strcmp(kind, "Status") != 0)
        return 0;
    const cJSON *code_item = cJSON_GetObjectItemCaseSensitive(st, "code");
    long code = cJSON_IsNumber(code_item) ? (long)code_item->valuedouble : http_code;
    const char *reason = json_string(st, "reason");
    const char *message = json_string(st, "message");
    const char *field = json_string(st, "field");
    funcd_buf_printf(b, "%s (%ld %s", message ? message : "request refused", code,
                     reason ? reason : reason_phrase(code));
    if (field && !(message && strstr(message, field)))
        funcd_buf_printf(b, ", field %s", field);
    funcd_buf_puts(b, ")");
    if (ns)
        append_advice(b, code, reason, field, ns, message);
    if (code_out)
        *code_out = code;
    return 1;
}

int ctl_format_status(const ctl_response *r, funcd_buf *out, long *code)
{
    cJSON *st = r->body.data ? cJSON_ParseWithLength(r->body.data, r->body.len) : NULL;
    int is_status = describe_status(st, r->code, NULL, out, code);
    cJSON_Delete(st);
    return is_status;
}

int ctl_report_status(const ctl_client *c, const ctl_response *r, const char *what,
                      const char *ns)
{
    cJSON *st = r->body.data ? cJSON_ParseWithLength(r->body.data, r->body.len) : NULL;
    funcd_buf b = FUNCD_BUF_INIT;
    if (what)
        funcd_buf_printf(&b, "%s: ", what);
    if (!describe_status(st, r->code, ns ? ns : "", &b, NULL)) {
        funcd_buf_printf(&b, "%s answered HTTP %ld %s without a Status", c->server, r->code,
                         reason_phrase(r->code));
        if (r->body.len > 0)
            funcd_buf_printf(&b, ": %.200s", r->body.data);
        append_advice(&b, r->code, NULL, NULL, ns, NULL);
    }
    ctl_fail("%s", b.data ? b.data : "request refused");
    funcd_buf_free(&b);
    cJSON_Delete(st);
    return CTL_EXIT_ERROR;
}
