/*
 * A small HTTP client for the end-to-end tests, on libcurl.
 *
 * e2e_http: plain requests over one reusable connection (a curl easy handle
 * keeps its connection cache across requests to the same host).
 * e2e_watch: a streamed NDJSON response read on a background thread into a
 * queue of lines that the test waits on with a timeout.
 *
 * Threads: one e2e_http per thread; an e2e_watch is used from the thread that
 * opened it (its reader thread is internal).
 */
#ifndef FUNCD_TESTS_E2E_CLIENT_H
#define FUNCD_TESTS_E2E_CLIENT_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

/* Call once before any other function (not thread-safe), and the cleanup
 * once at the end so LeakSanitizer sees libcurl's globals released. */
void e2e_client_global_init(void);
void e2e_client_global_cleanup(void);

int64_t e2e_now_ms(void);

typedef struct e2e_resp {
    long status;     /* 0: no response at all (see body for curl's error) */
    char *body;      /* NUL-terminated; never NULL after e2e_http_do */
    size_t len;
    char *headers;   /* the raw header block of the final response */
    cJSON *json;     /* the body parsed as JSON, or NULL */
} e2e_resp;

#define E2E_RESP_INIT {0, NULL, 0, NULL, NULL}

void e2e_resp_free(e2e_resp *r);

/* Copies the value of response header `name` (case-insensitive) into `out`;
 * NULL if the response has no such header. */
const char *e2e_resp_header(const e2e_resp *r, const char *name, char *out, size_t out_len);

typedef struct e2e_http e2e_http;

/* `base` is "http://host:port"; request paths are appended to it. */
e2e_http *e2e_http_new(const char *base);
void e2e_http_free(e2e_http *h);

/*
 * One request. `token` NULL sends no Authorization header; `body` NULL sends
 * none, "" an empty one. `*out` is freed first, so one e2e_resp can be
 * reused for a sequence of requests. Returns the status (0 on a transport
 * failure).
 */
long e2e_http_do(e2e_http *h, const char *method, const char *path, const char *token,
                 const char *body, e2e_resp *out);

/* Sends `raw_auth` verbatim as the Authorization header value. */
long e2e_http_do_auth(e2e_http *h, const char *method, const char *path, const char *raw_auth,
                      const char *body, e2e_resp *out);

typedef struct e2e_watch e2e_watch;

/* Starts streaming `url` with a GET; NULL on allocation failure. */
e2e_watch *e2e_watch_open(const char *url, const char *token);

/* The response status once headers arrived, 0 if none within the timeout. */
long e2e_watch_status(e2e_watch *w, int timeout_ms);

/* The next complete line (malloc()ed, without its newline), or NULL on
 * timeout or when the stream ended with no line left. */
char *e2e_watch_next(e2e_watch *w, int timeout_ms);

/* The next line parsed as JSON, skipping BOOKMARK events (the
 * tests look at changes), or NULL (timeout, end, not JSON). */
cJSON *e2e_watch_next_json(e2e_watch *w, int timeout_ms);

/* 1 once the server ended the response (or the connection failed). */
int e2e_watch_wait_end(e2e_watch *w, int timeout_ms);

/* Aborts the transfer if still running, joins the reader, frees. NULL ok. */
void e2e_watch_close(e2e_watch *w);

/*
 * A request with a body of `len` bytes (any bytes; `body` NULL sends none)
 * and extra header lines ("Name: value", NULL-terminated list, may be NULL).
 * Otherwise like e2e_http_do.
 */
long e2e_http_send(e2e_http *h, const char *method, const char *path, const char *token,
                   const char *const *headers, const void *body, size_t len, e2e_resp *out);

#endif
