/*
 * funcdctl's HTTP client for the control-plane API: one libcurl easy handle
 * reused for every request (keep-alive), bearer token, JSON bodies, and the
 * API's `Status` errors turned into messages that say what to do.
 *
 * Not thread-safe; funcdctl is single-threaded.
 */
#ifndef FUNCDCTL_CLIENT_H
#define FUNCDCTL_CLIENT_H

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdint.h>

#include "api/api.h"
#include "util/buf.h"

typedef struct ctl_client ctl_client;

typedef struct ctl_response {
    long code;      /* HTTP status of the answer */
    funcd_buf body; /* the answer's body, NUL-terminated */
} ctl_response;

#define CTL_RESPONSE_INIT {0, FUNCD_BUF_INIT}

/* `server` is a base URL ("http://127.0.0.1:8080", "https://..."); `token`
 * may be NULL; `cacert` (may be NULL: the system's CAs) is the PEM file an
 * https server's certificate must chain to, and makes a server given
 * without a scheme https. Returns 0, or -1 with a message printed. */
int ctl_client_new(ctl_client **out, const char *server, const char *token, const char *cacert);

/* Sets what ctl_client_new sets for TLS on another libcurl handle. */
void ctl_curl_tls(void *curl, const char *cacert);

/* When `rc` (a CURLcode) is a certificate problem: what went wrong and what
 * to do, for a message; else NULL. */
const char *ctl_tls_advice(int rc);
void ctl_client_free(ctl_client *c);

/* `url` with "http://" added when it has no scheme and trailing slashes
 * removed; malloc()ed (never NULL unless out of memory). */
char *ctl_normalize_url(const char *url);
/* The same with `scheme` ("https://") added instead. */
char *ctl_normalize_url_as(const char *url, const char *scheme);

/* The base URL as used (scheme added, trailing slash removed). */
const char *ctl_client_server(const ctl_client *c);

/* "/apis/funcd.dev/v1/namespaces/NS/PLURAL[/NAME]" with NS and NAME
 * percent-encoded ("/apis/funcd.dev/v1/PLURAL" when NS is NULL: every
 * namespace); malloc()ed, NULL on OOM. */
char *ctl_resource_path(ctl_client *c, const char *ns, const funcd_kind *kind, const char *name);

/* The same for any collection ("bundles"), with an optional subresource:
 * ".../namespaces/NS/PLURAL[/NAME[/SUB]]". */
char *ctl_api_path(ctl_client *c, const char *ns, const char *plural, const char *name,
                   const char *sub);

/* `s` percent-encoded for a URL path segment; malloc()ed, NULL on OOM. */
char *ctl_escape(ctl_client *c, const char *s);

/*
 * Sends METHOD PATH with an optional JSON `body` and reads the whole answer
 * into `resp` (any HTTP status). Returns 0 when the server answered, -1 when
 * it could not be reached (the message, with what to do, is printed).
 */
int ctl_request(ctl_client *c, const char *method, const char *path, const char *body,
                ctl_response *resp);

/* The same with a body of any type (`len` bytes, sent as `content_type`),
 * and a longer time limit: for uploads. */
int ctl_request_body(ctl_client *c, const char *method, const char *path,
                     const char *content_type, const void *body, size_t len, ctl_response *resp);

/* Called for each line of a streamed answer (without the newline); a
 * non-zero return stops the stream. */
typedef int (*ctl_line_fn)(const char *line, size_t len, void *payload);

/*
 * GETs PATH and hands every line of a 200 answer to `on_line` as it arrives,
 * until the server closes, `on_line` stops it, `*stop` becomes non-zero
 * (`stop` may be NULL; set it from a signal handler) or funcd_mono_ms()
 * passes `deadline_ms` (0: none); both are checked about once a second. A
 * non-200 answer is read whole into `resp`. Returns as ctl_request; a stream
 * cut short by `stop` or the deadline counts as answered.
 */
int ctl_stream(ctl_client *c, const char *path, ctl_line_fn on_line, void *payload,
               volatile sig_atomic_t *stop, int64_t deadline_ms, ctl_response *resp);

void ctl_response_free(ctl_response *r);

/* The answer's body as JSON, or NULL with "funcdctl: error: ..." printed. */
cJSON *ctl_response_json(const ctl_client *c, const ctl_response *r);

/*
 * When the answer is a JSON `Status`, appends "MESSAGE (CODE REASON[, field
 * F])" to `out` and returns 1; otherwise 0. `code` (may be NULL) receives
 * the Status's code.
 */
int ctl_format_status(const ctl_response *r, funcd_buf *out, long *code);

/*
 * Prints the server's refusal on stderr: "funcdctl: error: [WHAT: ]MESSAGE
 * (CODE REASON[, field F])" and, for 401/403/409, what to do about it. `ns`
 * names the namespace for 403. Returns CTL_EXIT_ERROR (1).
 */
int ctl_report_status(const ctl_client *c, const ctl_response *r, const char *what,
                      const char *ns);

#endif
