/*
 * invoke NAME: one HTTP request to a Function through the data plane,
 * http://<data plane>/fn/{ns}/{NAME}/{path}, with the answer's body on
 * standard output. The data plane has no token: the control plane's is
 * not sent there. With --async it goes to /async/fn/... instead, and the
 * invocation id of the 202 is printed.
 */
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"
#include "funcd/funcd.h"
#include "output.h"
#include "util/misc.h"

#define MAX_DATA (64u * 1024 * 1024)
#define MAX_ERROR_BODY (16u * 1024 * 1024)
#define CONNECT_TIMEOUT_S 10L
#define INVOCATION_HEADER "x-funcd-invocation-id:"

typedef struct invoke_opts {
    const char *name, *data, *path, *method, *data_plane, *callback;
    const char **headers;
    size_t nheaders;
    int include, async;
} invoke_opts;

/* What comes back: a 2xx body goes straight to stdout, any other is kept
 * to tell a Status from a function's own error page. */
typedef struct answer {
    CURL *curl;
    int include, async;
    int decided, success;
    funcd_buf error_body;
    size_t written;
    char last_byte;
    char invocation[128];
} answer;

/* ---- the command line ----------------------------------------------------- */

static int is_token(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '-' || *s == '_'))
            return 0;
    return 1;
}

static int take_flag(ctl_ctx *ctx, int argc, char **argv, int *i, invoke_opts *o)
{
    const char *value;
    int r;
    if ((r = ctl_flag_value(ctx, argc, argv, i, "-d", "--data", &o->data)) != 0 ||
        (r = ctl_flag_value(ctx, argc, argv, i, NULL, "--path", &o->path)) != 0 ||
        (r = ctl_flag_value(ctx, argc, argv, i, "-X", "--request", &o->method)) != 0 ||
        (r = ctl_flag_value(ctx, argc, argv, i, NULL, "--data-plane", &o->data_plane)) != 0 ||
        (r = ctl_flag_value(ctx, argc, argv, i, NULL, "--callback-url", &o->callback)) != 0)
        return r;
    r = ctl_flag_value(ctx, argc, argv, i, "-H", "--header", &value);
    if (r > 0)
        o->headers[o->nheaders++] = value;
    return r;
}

static int check_opts(const ctl_ctx *ctx, const invoke_opts *o)
{
    if (!o->name)
        return ctl_usage(ctx, "invoke needs the NAME of a function, e.g. `funcdctl invoke hello`");
    if (o->callback && !o->async)
        return ctl_usage(ctx, "--callback-url goes with --async");
    if (o->method && !is_token(o->method))
        return ctl_usage(ctx, "-X takes an HTTP method such as GET, POST or DELETE, not \"%s\"",
                         o->method);
    for (size_t i = 0; i < o->nheaders; i++) {
        const char *colon = strchr(o->headers[i], ':');
        if (!colon || colon == o->headers[i])
            return ctl_usage(ctx, "-H takes 'Name: value', not \"%s\"", o->headers[i]);
    }
    return 0;
}

static int parse(ctl_ctx *ctx, int argc, char **argv, invoke_opts *o)
{
    int only = 0;
    for (int i = 0; i < argc; i++) {
        if (ctl_end_of_flags(argv[i], &only))
            continue;
        int r = only ? 0 : take_flag(ctx, argc, argv, &i, o);
        if (r < 0)
            return CTL_EXIT_USAGE;
        if (r > 0)
            continue;
        if (!only && (!strcmp(argv[i], "-i") || !strcmp(argv[i], "--include"))) {
            o->include = 1;
        } else if (!only && !strcmp(argv[i], "--async")) {
            o->async = 1;
        } else if (ctl_is_flag(argv[i], only)) {
            return ctl_usage(ctx, "unknown flag \"%s\"", argv[i]);
        } else if (o->name) {
            return ctl_usage(ctx, "invoke takes one function NAME, not also \"%s\" (put the "
                                  "rest in --path, the body in -d)",
                             argv[i]);
        } else {
            o->name = argv[i];
        }
    }
    return check_opts(ctx, o);
}

/* ---- the request body ----------------------------------------------------- */

static int read_stream(FILE *f, const char *shown, funcd_buf *out)
{
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (out->len + n > MAX_DATA)
            return ctl_fail("%s is larger than %u MiB, more than invoke sends", shown,
                            MAX_DATA >> 20);
        if (funcd_buf_append(out, chunk, n) != 0)
            return ctl_fail("out of memory reading %s", shown);
    }
    if (ferror(f))
        return ctl_fail("cannot read %s: %s", shown, strerror(errno));
    return 0;
}

/* -d DATA as given, -d @FILE from the file, -d @- from standard input. */
static int read_data(const char *data, funcd_buf *out)
{
    if (data[0] != '@')
        return funcd_buf_puts(out, data) == 0 ? 0 : ctl_fail("out of memory");
    const char *file = data + 1;
    if (!strcmp(file, "-"))
        return read_stream(stdin, "standard input", out);
    FILE *f = fopen(file, "rb");
    if (!f)
        return ctl_fail("cannot open %s: %s (check the path after -d @)", file, strerror(errno));
    int rc = read_stream(f, file, out);
    fclose(f);
    return rc;
}

static int has_header(const invoke_opts *o, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < o->nheaders; i++)
        if (!strncasecmp(o->headers[i], name, n) && o->headers[i][n] == ':')
            return 1;
    return 0;
}

/* JSON is sent as such; anything else as bytes (curl would say form data). */
static const char *guess_type(const funcd_buf *body)
{
    cJSON *json = body->len ? cJSON_ParseWithLength(body->data, body->len) : NULL;
    int structured = cJSON_IsObject(json) || cJSON_IsArray(json);
    cJSON_Delete(json);
    return structured ? "Content-Type: application/json" : "Content-Type: application/octet-stream";
}

/* ---- where the data plane is ---------------------------------------------- */

/* 0.0.0.0 and [::] mean "every address": reach them through the control
 * plane's host instead. */
static char *reachable(const char *addr, const char *server)
{
    const char *port = strrchr(addr, ':');
    size_t host_len = port ? (size_t)(port - addr) : strlen(addr);
    int unspecified = host_len == 0 || (host_len == 7 && !strncmp(addr, "0.0.0.0", 7)) ||
                      (host_len == 4 && !strncmp(addr, "[::]", 4));
    /* funcd serves TLS on every listener or on none: the control plane's
     * scheme is the data plane's. */
    const char *scheme = strncmp(server, "https://", 8) == 0 ? "https://" : "http://";
    if (!unspecified || !port)
        return ctl_normalize_url_as(addr, scheme);
    CURLU *u = curl_url();
    char *host = NULL, *url = NULL;
    if (u && curl_url_set(u, CURLUPART_URL, server, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
        funcd_buf b = FUNCD_BUF_INIT;
        if (funcd_buf_printf(&b, "%s%s%s", scheme, host, port) == 0)
            url = funcd_buf_detach(&b, NULL);
        funcd_buf_free(&b);
    }
    curl_free(host);
    curl_url_cleanup(u);
    return url ? url : ctl_normalize_url_as(addr, scheme);
}

char *ctl_data_plane_url(ctl_ctx *ctx, const char *flag, int quiet)
{
    const char *env = getenv("FUNCD_DATA_PLANE");
    const char *scheme = ctx->cacert && *ctx->cacert ? "https://" : "http://";
    if (flag && *flag)
        return ctl_normalize_url_as(flag, scheme);
    if (env && *env)
        return ctl_normalize_url_as(env, scheme);
    ctl_client *client = ctl_ctx_client(ctx);
    ctl_response resp = CTL_RESPONSE_INIT;
    cJSON *version = NULL;
    char *url = NULL;
    if (!client || ctl_request(client, "GET", "/version", NULL, &resp) != 0) {
        /* reported */
    } else if (resp.code != 200) {
        if (!quiet)
            ctl_report_status(client, &resp, "asking where the data plane is", ctx->ns);
    } else if ((version = quiet ? cJSON_ParseWithLength(resp.body.data, resp.body.len)
                                : ctl_response_json(client, &resp)) != NULL) {
        const char *addr = ctl_get_string(version, "dataPlane");
        if (addr && *addr)
            url = reachable(addr, ctl_client_server(client));
        else if (!quiet)
            ctl_fail("funcd at %s does not say where its data plane listens: pass --data-plane "
                     "URL or set FUNCD_DATA_PLANE",
                     ctl_client_server(client));
    }
    cJSON_Delete(version);
    ctl_response_free(&resp);
    return url;
}

static char *function_url(CURL *curl, const char *base, const char *ns, const invoke_opts *o)
{
    char *ns_esc = curl_easy_escape(curl, ns, 0);
    char *name_esc = curl_easy_escape(curl, o->name, 0);
    const char *rest = o->path ? o->path : "";
    while (*rest == '/')
        rest++;
    funcd_buf b = FUNCD_BUF_INIT;
    char *url = NULL;
    if (ns_esc && name_esc && funcd_buf_printf(&b, "%s/%sfn/%s/%s/%s", base,
                                               o->async ? "async/" : "", ns_esc, name_esc,
                                               rest) == 0)
        url = funcd_buf_detach(&b, NULL);
    funcd_buf_free(&b);
    curl_free(ns_esc);
    curl_free(name_esc);
    return url;
}

/* ---- the exchange --------------------------------------------------------- */

static size_t on_header(char *data, size_t size, size_t nmemb, void *userdata)
{
    answer *a = userdata;
    size_t n = size * nmemb, len = n;
    while (len > 0 && (data[len - 1] == '\n' || data[len - 1] == '\r'))
        len--;
    size_t name_len = strlen(INVOCATION_HEADER);
    if (len > name_len && !strncasecmp(data, INVOCATION_HEADER, name_len)) {
        const char *v = data + name_len;
        while (v < data + len && (*v == ' ' || *v == '\t'))
            v++;
        snprintf(a->invocation, sizeof(a->invocation), "%.*s", (int)(data + len - v), v);
    }
    if (a->include)
        fprintf(stderr, "%.*s\n", (int)len, data);
    return n;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *userdata)
{
    answer *a = userdata;
    size_t n = size * nmemb;
    if (!a->decided) {
        long code = 0;
        curl_easy_getinfo(a->curl, CURLINFO_RESPONSE_CODE, &code);
        a->success = code >= 200 && code < 300;
        a->decided = 1;
    }
    if (!a->success) {
        if (a->error_body.len + n > MAX_ERROR_BODY ||
            funcd_buf_append(&a->error_body, data, n) != 0)
            return 0;
        return n;
    }
    if (a->async) /* the 202's body: the id is what is printed */
        return n;
    if (n > 0 && fwrite(data, 1, n, stdout) != n)
        return 0;
    if (n > 0)
        a->last_byte = data[n - 1];
    a->written += n;
    return n;
}

static void set_method(CURL *curl, const char *method, const funcd_buf *body, int has_body)
{
    if (has_body || (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)) {
        /* Every method but GET and HEAD sends a body, if only an empty one. */
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body->data ? body->data : "");
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body->len);
        curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, strcmp(method, "POST") ? method : NULL);
    } else if (!strcmp(method, "HEAD")) {
        curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
    } else {
        curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
    }
}

static struct curl_slist *request_headers(const invoke_opts *o, const funcd_buf *body,
                                          int has_body)
{
    struct curl_slist *list = curl_slist_append(NULL, "Expect:"), *next = list;
    for (size_t i = 0; next && i < o->nheaders; i++)
        next = curl_slist_append(list, o->headers[i]);
    if (next && o->callback) {
        funcd_buf h = FUNCD_BUF_INIT;
        next = funcd_buf_printf(&h, "X-Callback-Url: %s", o->callback) == 0
                   ? curl_slist_append(list, h.data)
                   : NULL;
        funcd_buf_free(&h);
    }
    /* An empty body sent for DELETE or PUT without -d is not form data. */
    if (next && !has_header(o, "Content-Type"))
        next = curl_slist_append(list, has_body ? guess_type(body) : "Content-Type:");
    if (!next) {
        curl_slist_free_all(list);
        return NULL;
    }
    return list;
}

static int report_transport(const char *base, CURLcode rc, const char *errbuf)
{
    const char *detail = errbuf[0] ? errbuf : curl_easy_strerror(rc);
    const char *tls = ctl_tls_advice(rc);
    if (tls)
        return ctl_fail("cannot connect to the data plane at %s securely: %s (%s)", base, detail,
                        tls);
    if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
        rc == CURLE_OPERATION_TIMEDOUT)
        return ctl_fail("cannot reach the data plane at %s: %s (is `funcd` running? set "
                        "--data-plane or FUNCD_DATA_PLANE)",
                        base, detail);
    return ctl_fail("the exchange with the data plane at %s failed: %s", base, detail);
}

/* What a non-2xx answer means, on stderr; the body of one that is not a
 * Status goes to stdout (it is the function's own). */
static int report_failure(const invoke_opts *o, long code, answer *a)
{
    ctl_response r = {code, a->error_body};
    funcd_buf msg = FUNCD_BUF_INIT;
    char invocation[160] = "";
    if (a->invocation[0])
        snprintf(invocation, sizeof(invocation), "; invocation %s", a->invocation);
    if (ctl_format_status(&r, &msg, NULL)) {
        ctl_fail("function/%s: %s%s", o->name, msg.data, invocation);
    } else {
        if (a->error_body.len > 0)
            fwrite(a->error_body.data, 1, a->error_body.len, stdout);
        ctl_fail("function/%s answered HTTP %ld%s", o->name, code, invocation);
    }
    funcd_buf_free(&msg);
    return CTL_EXIT_ERROR;
}

static int exchange(const invoke_opts *o, CURL *curl, const char *base, const char *url,
                    const funcd_buf *body)
{
    int has_body = o->data != NULL;
    const char *method = o->method ? o->method : has_body ? "POST" : "GET";
    struct curl_slist *headers = request_headers(o, body, has_body);
    answer a = {.curl = curl, .include = o->include, .async = o->async};
    char errbuf[CURL_ERROR_SIZE] = "";
    if (!headers)
        return ctl_fail("out of memory");
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "funcdctl/" FUNCD_VERSION_STRING);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT_S);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &a);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &a);
    set_method(curl, method, body, has_body);
    CURLcode rc = curl_easy_perform(curl);
    long code = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    int status;
    if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && !a.success))
        status = report_transport(base, rc, errbuf);
    else if (rc != CURLE_OK)
        status = ctl_fail("function/%s answered HTTP %ld with more than %u MiB", o->name, code,
                          MAX_ERROR_BODY >> 20);
    else if (code < 200 || code >= 300)
        status = report_failure(o, code, &a);
    else
        status = 0;
    if (status == 0 && o->async)
        printf("%s\n", a.invocation);
    /* A terminal prompt should not land after the last byte of the answer. */
    if (a.written > 0 && a.last_byte != '\n' && isatty(STDOUT_FILENO))
        fputc('\n', stdout);
    fflush(stdout);
    funcd_buf_free(&a.error_body);
    curl_slist_free_all(headers);
    return status;
}

int cmd_invoke(ctl_ctx *ctx, int argc, char **argv)
{
    invoke_opts o = {0};
    o.headers = calloc((size_t)argc + 1, sizeof(*o.headers));
    if (!o.headers)
        return ctl_fail("out of memory");
    int rc = parse(ctx, argc, argv, &o);
    funcd_buf body = FUNCD_BUF_INIT;
    char *base = NULL, *url = NULL;
    CURL *curl = NULL;
    if (rc == 0 && o.data && read_data(o.data, &body) != 0)
        rc = CTL_EXIT_ERROR;
    if (rc == 0 && !(base = ctl_data_plane_url(ctx, o.data_plane, 0)))
        rc = CTL_EXIT_ERROR;
    if (rc == 0 && (!(curl = curl_easy_init()) || !(url = function_url(curl, base, ctx->ns, &o))))
        rc = ctl_fail("out of memory");
    if (rc == 0) {
        ctl_curl_tls(curl, ctx->cacert);
        rc = exchange(&o, curl, base, url, &body);
    }
    if (curl)
        curl_easy_cleanup(curl);
    free(url);
    free(base);
    funcd_buf_free(&body);
    free(o.headers);
    return rc;
}
