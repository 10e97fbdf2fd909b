/*
 * HTTP for the OCI client: libcurl multi driven by a libevent loop, with
 * registry auth (Basic, Bearer token challenge, one retry after a 401) and
 * per-registry TLS. Private to lib/oci/.
 */
#ifndef FUNCD_OCI_TRANSPORT_H
#define FUNCD_OCI_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "oci/oci.h"

struct event_base;

typedef struct oci_creds {
    char *user, *pass, *identitytoken;
} oci_creds;

void oci_creds_clear(oci_creds *c);
int oci_creds_copy(oci_creds *to, const oci_creds *from);

typedef struct oci_transport oci_transport;
typedef struct oci_req oci_req;

oci_transport *oci_transport_new(struct event_base *loop, const funcd_oci_client_options *o,
                                 funcd_oci_stats *stats);
/* Cancels every request still in flight (no callbacks). */
void oci_transport_free(oci_transport *t);
/* "http" for a named insecure (loopback) registry, else "https". */
const char *oci_transport_scheme(const oci_transport *t, const char *host);

/*
 * rc 0: a response arrived (see oci_req_status); rc < 0: it did not, or
 * the registry refused the credentials, and `message` says why. The request
 * is freed when the callback returns.
 */
typedef void (*oci_req_done_fn)(oci_req *r, int rc, const char *message, void *ctx);
typedef void (*oci_req_data_fn)(oci_req *r, size_t n, void *ctx);

typedef struct oci_req_spec {
    const char *url;
    const char *host;       /* registry host[:port] (TLS and auth are per host) */
    const char *repository; /* for the pull scope and messages */
    const char *accept;     /* or NULL */
    const oci_creds *creds; /* copied; NULL: anonymous */
    int fd;                 /* >= 0: a 2xx body goes here; else to memory */
    size_t max_body;        /* memory bodies above this fail */
    uint64_t expect_size;   /* a file body over this fails (0: any byte does) */
    oci_req_data_fn on_data;
    int head;               /* a HEAD request (no body) */
} oci_req_spec;

int oci_req_start(oci_transport *t, const oci_req_spec *s, oci_req_done_fn done, void *ctx,
                  oci_req **out);
/* Stops a request without calling its callback. */
void oci_req_cancel(oci_req *r);

long oci_req_status(const oci_req *r);
const char *oci_req_body(const oci_req *r, size_t *len);
const char *oci_req_content_type(const oci_req *r);
const char *oci_req_docker_digest(const oci_req *r);
/* "sha256:<hex>" of the 2xx body (memory or file) as it arrived. */
void oci_req_body_digest(oci_req *r, char out[72]);
uint64_t oci_req_received(const oci_req *r);

#endif
