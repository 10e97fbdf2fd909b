#include "client.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "util/buf.h"

/* No test request should take this long; a hung server fails the request
 * instead of the whole run. */
#define REQUEST_TIMEOUT_MS 15000L

void e2e_client_global_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

void e2e_client_global_cleanup(void)
{
    curl_global_cleanup();
}

int64_t e2e_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- responses ------------------------------------------------------------ */

void e2e_resp_free(e2e_resp *r)
{
    free(r->body);
    free(r->headers);
    cJSON_Delete(r->json);
    memset(r, 0, sizeof(*r));
}

const char *e2e_resp_header(const e2e_resp *r, const char *name, char *out, size_t out_len)
{
    size_t nl = strlen(name);
    for (const char *line = r->headers; line && *line;) {
        const char *eol = strstr(line, "\r\n");
        size_t ll = eol ? (size_t)(eol - line) : strlen(line);
        if (ll > nl && line[nl] == ':' && strncasecmp(line, name, nl) == 0) {
            const char *v = line + nl + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            size_t vl = ll - (size_t)(v - line);
            if (vl >= out_len)
                vl = out_len - 1;
            memcpy(out, v, vl);
            out[vl] = '\0';
            return out;
        }
        line = eol ? eol + 2 : line + ll;
    }
    return NULL;
}

/* ---- plain requests ------------------------------------------------------- */

struct e2e_http {
    CURL *curl;
    char *base;
    char errbuf[CURL_ERROR_SIZE];
};

typedef struct sink {
    funcd_buf body;
    funcd_buf headers;
} sink;

static size_t on_body(char *data, size_t size, size_t n, void *payload)
{
    sink *s = payload;
    return funcd_buf_append(&s->body, data, size * n) < 0 ? 0 : size * n;
}

static size_t on_header(char *data, size_t size, size_t n, void *payload)
{
    sink *s = payload;
    if (n * size >= 5 && memcmp(data, "HTTP/", 5) == 0)
        funcd_buf_reset(&s->headers); /* a new (final) response begins */
    return funcd_buf_append(&s->headers, data, size * n) < 0 ? 0 : size * n;
}

e2e_http *e2e_http_new(const char *base)
{
    e2e_http *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    h->curl = curl_easy_init();
    h->base = strdup(base);
    if (!h->curl || !h->base) {
        e2e_http_free(h);
        return NULL;
    }
    return h;
}

void e2e_http_free(e2e_http *h)
{
    if (!h)
        return;
    if (h->curl)
        curl_easy_cleanup(h->curl);
    free(h->base);
    free(h);
}

static struct curl_slist *request_headers(const char *auth_value, int has_body)
{
    struct curl_slist *hl = curl_slist_append(NULL, "Expect:");
    if (has_body)
        hl = curl_slist_append(hl, "Content-Type: application/json");
    if (auth_value) {
        funcd_buf line = FUNCD_BUF_INIT;
        funcd_buf_printf(&line, "Authorization: %s", auth_value);
        hl = curl_slist_append(hl, line.data ? line.data : "Authorization:");
        funcd_buf_free(&line);
    }
    return hl;
}

static char *join_url(const char *base, const char *path)
{
    funcd_buf url = FUNCD_BUF_INIT;
    if (strncmp(path, "http://", 7) != 0)
        funcd_buf_puts(&url, base);
    funcd_buf_puts(&url, path);
    return funcd_buf_detach(&url, NULL);
}

long e2e_http_do_auth(e2e_http *h, const char *method, const char *path, const char *raw_auth,
                      const char *body, e2e_resp *out)
{
    e2e_resp_free(out);
    sink s = {FUNCD_BUF_INIT, FUNCD_BUF_INIT};
    char *url = join_url(h->base, path);
    struct curl_slist *hl = request_headers(raw_auth, body != NULL);
    CURL *c = h->curl;
    curl_easy_reset(c); /* options only: the connection cache survives */
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, REQUEST_TIMEOUT_MS);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, h->errbuf);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &s);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    } else {
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    }
    if (strcmp(method, "GET") != 0 && !(body && strcmp(method, "POST") == 0))
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    h->errbuf[0] = '\0';
    CURLcode cc = curl_easy_perform(c);
    if (cc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
    else
        funcd_buf_printf(&s.body, "curl: %s", h->errbuf[0] ? h->errbuf : curl_easy_strerror(cc));
    curl_slist_free_all(hl);
    free(url);
    out->body = funcd_buf_detach(&s.body, &out->len);
    out->headers = funcd_buf_detach(&s.headers, NULL);
    out->json = cJSON_ParseWithLength(out->body, out->len);
    return out->status;
}

long e2e_http_do(e2e_http *h, const char *method, const char *path, const char *token,
                 const char *body, e2e_resp *out)
{
    funcd_buf auth = FUNCD_BUF_INIT;
    if (token)
        funcd_buf_printf(&auth, "Bearer %s", token);
    long status = e2e_http_do_auth(h, method, path, token ? auth.data : NULL, body, out);
    funcd_buf_free(&auth);
    return status;
}

/* ---- watch streams -------------------------------------------------------- */

typedef struct line {
    struct line *next;
    char *text;
} line;

struct e2e_watch {
    CURLM *multi;
    CURL *easy;
    struct curl_slist *headers;
    char *url;
    pthread_t thread;
    int has_thread;
    atomic_int stop;

    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t cond;
    long status;
    int ended;
    funcd_buf partial; /* bytes after the last newline */
    line *head, *tail;
};

static void push_line_locked(e2e_watch *w, const char *text, size_t len)
{
    line *l = calloc(1, sizeof(*l));
    if (!l)
        return;
    l->text = malloc(len + 1);
    if (!l->text) {
        free(l);
        return;
    }
    memcpy(l->text, text, len);
    l->text[len] = '\0';
    if (w->tail)
        w->tail->next = l;
    else
        w->head = l;
    w->tail = l;
}

/* Splits the stream into lines; a partial line waits for the next chunk. */
static size_t on_stream_data(char *data, size_t size, size_t n, void *payload)
{
    e2e_watch *w = payload;
    size_t len = size * n;
    pthread_mutex_lock(&w->lock);
    funcd_buf_append(&w->partial, data, len);
    char *buf = w->partial.data;
    size_t used = 0;
    char *nl;
    while (buf && (nl = memchr(buf + used, '\n', w->partial.len - used))) {
        push_line_locked(w, buf + used, (size_t)(nl - (buf + used)));
        used = (size_t)(nl + 1 - buf);
    }
    if (used) {
        memmove(buf, buf + used, w->partial.len - used);
        w->partial.len -= used;
        buf[w->partial.len] = '\0';
    }
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    return len;
}

static size_t on_stream_header(char *data, size_t size, size_t n, void *payload)
{
    e2e_watch *w = payload;
    if (size * n == 2 && memcmp(data, "\r\n", 2) == 0) {
        long code = 0;
        curl_easy_getinfo(w->easy, CURLINFO_RESPONSE_CODE, &code);
        if (code >= 200) {
            pthread_mutex_lock(&w->lock);
            w->status = code;
            pthread_cond_broadcast(&w->cond);
            pthread_mutex_unlock(&w->lock);
        }
    }
    return size * n;
}

static void *stream_main(void *arg)
{
    e2e_watch *w = arg;
    int running = 1;
    while (!atomic_load(&w->stop) && running) {
        curl_multi_perform(w->multi, &running);
        if (running)
            curl_multi_poll(w->multi, NULL, 0, 1000, NULL);
    }
    pthread_mutex_lock(&w->lock);
    if (w->partial.len) /* an error body has no trailing newline */
        push_line_locked(w, w->partial.data, w->partial.len);
    funcd_buf_reset(&w->partial);
    w->ended = 1;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

e2e_watch *e2e_watch_open(const char *url, const char *token)
{
    e2e_watch *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    funcd_buf auth = FUNCD_BUF_INIT;
    if (token)
        funcd_buf_printf(&auth, "Bearer %s", token);
    w->headers = request_headers(token ? auth.data : NULL, 0);
    funcd_buf_free(&auth);
    w->url = strdup(url);
    w->multi = curl_multi_init();
    w->easy = curl_easy_init();
    if (!w->url || !w->multi || !w->easy) {
        if (w->multi)
            curl_multi_cleanup(w->multi);
        if (w->easy)
            curl_easy_cleanup(w->easy);
        curl_slist_free_all(w->headers);
        free(w->url);
        pthread_cond_destroy(&w->cond);
        pthread_mutex_destroy(&w->lock);
        free(w);
        return NULL;
    }
    curl_easy_setopt(w->easy, CURLOPT_URL, w->url);
    curl_easy_setopt(w->easy, CURLOPT_HTTPHEADER, w->headers);
    curl_easy_setopt(w->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(w->easy, CURLOPT_WRITEFUNCTION, on_stream_data);
    curl_easy_setopt(w->easy, CURLOPT_WRITEDATA, w);
    curl_easy_setopt(w->easy, CURLOPT_HEADERFUNCTION, on_stream_header);
    curl_easy_setopt(w->easy, CURLOPT_HEADERDATA, w);
    curl_multi_add_handle(w->multi, w->easy);
    if (pthread_create(&w->thread, NULL, stream_main, w) == 0)
        w->has_thread = 1;
    else
        w->ended = 1;
    return w;
}

/* Waits on the condition until `done(w)` or the deadline; returns done(w). */
static int wait_until(e2e_watch *w, int timeout_ms, int (*done)(const e2e_watch *))
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    int ok;
    while (!(ok = done(w)))
        if (pthread_cond_timedwait(&w->cond, &w->lock, &deadline) != 0) {
            ok = done(w);
            break;
        }
    return ok;
}

static int has_status(const e2e_watch *w) { return w->status != 0 || w->ended; }
static int has_line(const e2e_watch *w) { return w->head != NULL || w->ended; }
static int has_ended(const e2e_watch *w) { return w->ended; }

long e2e_watch_status(e2e_watch *w, int timeout_ms)
{
    pthread_mutex_lock(&w->lock);
    wait_until(w, timeout_ms, has_status);
    long status = w->status;
    pthread_mutex_unlock(&w->lock);
    return status;
}

char *e2e_watch_next(e2e_watch *w, int timeout_ms)
{
    char *text = NULL;
    pthread_mutex_lock(&w->lock);
    wait_until(w, timeout_ms, has_line);
    line *l = w->head;
    if (l) {
        w->head = l->next;
        if (!w->head)
            w->tail = NULL;
        text = l->text;
        free(l);
    }
    pthread_mutex_unlock(&w->lock);
    return text;
}

cJSON *e2e_watch_next_json(e2e_watch *w, int timeout_ms)
{
    for (;;) {
        char *text = e2e_watch_next(w, timeout_ms);
        cJSON *json = text ? cJSON_Parse(text) : NULL;
        free(text);
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(json, "type"));
        if (!type || strcmp(type, "BOOKMARK") != 0)
            return json;
        /* A BOOKMARK says where the stream starts; tests look at changes. */
        cJSON_Delete(json);
    }
}

int e2e_watch_wait_end(e2e_watch *w, int timeout_ms)
{
    pthread_mutex_lock(&w->lock);
    int ended = wait_until(w, timeout_ms, has_ended);
    pthread_mutex_unlock(&w->lock);
    return ended;
}

void e2e_watch_close(e2e_watch *w)
{
    if (!w)
        return;
    atomic_store(&w->stop, 1);
    curl_multi_wakeup(w->multi);
    if (w->has_thread)
        pthread_join(w->thread, NULL);
    curl_multi_remove_handle(w->multi, w->easy);
    curl_easy_cleanup(w->easy);
    curl_multi_cleanup(w->multi);
    curl_slist_free_all(w->headers);
    free(w->url);
    for (line *l = w->head, *next; l; l = next) {
        next = l->next;
        free(l->text);
        free(l);
    }
    funcd_buf_free(&w->partial);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

/* ---- requests with any body and headers ------------------------------------ */

long e2e_http_send(e2e_http *h, const char *method, const char *path, const char *token,
                   const char *const *headers, const void *body, size_t len, e2e_resp *out)
{
    e2e_resp_free(out);
    sink s = {FUNCD_BUF_INIT, FUNCD_BUF_INIT};
    char *url = join_url(h->base, path);
    funcd_buf auth = FUNCD_BUF_INIT;
    if (token)
        funcd_buf_printf(&auth, "Bearer %s", token);
    struct curl_slist *hl = request_headers(token ? auth.data : NULL, 0);
    funcd_buf_free(&auth);
    for (const char *const *hp = headers; hp && *hp; hp++)
        hl = curl_slist_append(hl, *hp);
    CURL *c = h->curl;
    curl_easy_reset(c); /* options only: the connection cache survives */
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, REQUEST_TIMEOUT_MS);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, h->errbuf);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &s);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    } else {
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    }
    if (strcmp(method, "GET") != 0 && !(body && strcmp(method, "POST") == 0))
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    h->errbuf[0] = '\0';
    CURLcode cc = curl_easy_perform(c);
    if (cc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
    else
        funcd_buf_printf(&s.body, "curl: %s", h->errbuf[0] ? h->errbuf : curl_easy_strerror(cc));
    curl_slist_free_all(hl);
    free(url);
    out->body = funcd_buf_detach(&s.body, &out->len);
    out->headers = funcd_buf_detach(&s.headers, NULL);
    out->json = cJSON_ParseWithLength(out->body, out->len);
    return out->status;
}
