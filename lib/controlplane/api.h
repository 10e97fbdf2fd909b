/*
 * The control-plane API as a pure function: a request in, a response out.
 * The h2o binding (server.c) adapts HTTP to it and streams watches; the fuzz
 * target drives it directly.
 *
 * Threads: funcd_cp_handle may run on any thread; the store is thread-safe
 * and the auth table is read-only while serving.
 */
#ifndef FUNCD_CONTROLPLANE_API_H
#define FUNCD_CONTROLPLANE_API_H

#include <stddef.h>
#include <stdint.h>

#include "api/api.h"
#include "controlplane/auth.h"
#include "funcd/sys/blob.h"
#include "funcd/sys/store.h"
#include "util/buf.h"

struct funcd_serving;
struct funcd_metrics;

#define FUNCD_KV_STORE_QUOTA_DEFAULT 100
#define FUNCD_OBJECT_QUOTA_DEFAULT 10000

typedef struct funcd_cp {
    funcd_store *store;
    funcd_blob *blob;                /* bundles; may be NULL */
    struct funcd_serving *serving;   /* function logs; may be NULL */
    struct funcd_sources *sources;   /* images; may be NULL */
    const funcd_auth *auth;
    const char *const *source_roots; /* resolved; NULL-terminated, or NULL (admission.c) */
    struct funcd_metrics *metrics;   /* GET /metrics (metrics.c); may be NULL */
    int metrics_open;                /* GET /metrics without a token */
    struct funcd_queue *queue;       /* invocations and dead letters (invocations.c); may be NULL */
    int64_t kv_store_quota;          /* KVStores per namespace; negative: no limit (admission.c) */
    int64_t object_quota;            /* objects per namespace, all kinds; negative: no limit */
    struct funcd_cp_counts *counts;  /* objects per namespace (quota.c); NULL: not counted */
    char version_json[512]; /* the body of GET /version */
    size_t workflow_payload_limit;   /* a run's input (workflows.c); 0: 1 MiB */
    struct funcd_s3 *s3;             /* .../functions/{name}/s3-credentials; may be NULL */
} funcd_cp;

typedef struct funcd_cp_request {
    const char *method;
    size_t method_len;
    const char *path; /* decoded, without the query */
    size_t path_len;
    const char *query; /* after '?', or NULL */
    size_t query_len;
    const char *authorization; /* the header's value, or NULL */
    size_t authorization_len;
    const char *body;
    size_t body_len;
} funcd_cp_request;

/* A stream the server must send after a 200: a watch, or a function's
 * logs followed (`logs`). */
typedef struct funcd_cp_watch {
    const funcd_kind *kind;
    char ns[64];    /* "" for every namespace */
    int from_rv;    /* 1: events after `rv`; 0: current objects as ADDED first */
    uint64_t rv;
    int logs;       /* follow the logs of function `name` */
    char name[64];
    size_t tail;    /* logs: records to send first (0: all kept) */
    int redact;     /* Secrets for a viewer: funcd_cp_redact each object */
} funcd_cp_watch;

struct funcd_cp_response;

/* Work too long for the server's thread (a bundle's check): `run` fills
 * the response on a thread of its own, then the server sends it;
 * `free_arg` once it ran (or instead of it). `arg` owns what it reads. */
typedef struct funcd_cp_deferred {
    void (*run)(void *arg, struct funcd_cp_response *resp);
    void (*free_arg)(void *arg);
    void *arg;
} funcd_cp_deferred;

typedef struct funcd_cp_response {
    int status;
    funcd_buf body;  /* JSON, unless content_type says otherwise */
    const char *content_type; /* NULL: application/json */
    int watch;       /* 1: stream `w` instead of sending `body` */
    funcd_cp_watch w;
    funcd_cp_deferred defer; /* run set: the answer comes from it */
} funcd_cp_response;

#define FUNCD_CP_RESPONSE_INIT {0, FUNCD_BUF_INIT, NULL, 0, {0}, {0}}

void funcd_cp_init(funcd_cp *cp, funcd_store *store, const funcd_auth *auth,
                   const char *version_json);
void funcd_cp_handle(funcd_cp *cp, const funcd_cp_request *req, funcd_cp_response *resp);
void funcd_cp_response_free(funcd_cp_response *resp);

/* Whether a request may send its body (method, path and authorization
 * set; no body yet): its token must be valid and, for a path in a
 * namespace, allow writing there. 1 yes; 0 with `resp` the 401/403. */
int funcd_cp_admit_body(funcd_cp *cp, const funcd_cp_request *req, funcd_cp_response *resp);
/* 1 when the request carries a valid token. */
int funcd_cp_authenticated(funcd_cp *cp, const funcd_cp_request *req);

/* GET /metrics (metrics.c): every series in the namespaces `t` may read
 * (all of them when `t` is NULL: the operator opened it). */
void funcd_cp_metrics(funcd_cp *cp, const funcd_cp_request *req, const struct funcd_token *t,
                      funcd_cp_response *resp);

/* The images API (images.c); 0 when the path is not one of its own. */
struct funcd_token;
int funcd_cp_images(funcd_cp *cp, const funcd_cp_request *req, const struct funcd_token *t,
                    funcd_cp_response *resp);

/* The nodes API (nodes.c), for any valid token; 0 when the path is not
 * one of its own. */
int funcd_cp_nodes(funcd_cp *cp, const funcd_cp_request *req, funcd_cp_response *resp);

/* Invocations and dead letters (invocations.c); 0 when the path is not
 * one of theirs. */
int funcd_cp_invocations(funcd_cp *cp, const funcd_cp_request *req, const struct funcd_token *t,
                         funcd_cp_response *resp);

/* Admission (admission.c): 1 when `t` may write `obj` (decoded and
 * validated, of `kind`) in namespace `ns`; 0 with `resp` set to a 403
 * naming the field. */
int funcd_cp_admit(const funcd_cp *cp, const funcd_kind *kind, const char *ns,
                   const funcd_token *t, const cJSON *obj, funcd_cp_response *resp);
/* 1 when the object may be created under the namespace's quotas (KVStores:
 * cp->kv_store_quota; objects of every kind: cp->object_quota, counted by
 * cp->counts); 0 with `resp` set to 403 naming the quota. An object that
 * exists already (a replace) is always allowed. `*held` is 1 when a place
 * was taken for the object: the caller gives it back with
 * funcd_cp_quota_done once its write returned, whatever came of it. */
int funcd_cp_admit_quota(const funcd_cp *cp, const funcd_kind *kind, const char *ns,
                         const cJSON *obj, funcd_cp_response *resp, int *held);
/* Gives back the place funcd_cp_admit_quota took (`held` 0: nothing);
 * `made` is the object the write stored, NULL when it stored none. */
void funcd_cp_quota_done(const funcd_cp *cp, const char *ns, int held, const cJSON *made);

/* Workflows (workflows.c): the runs API (0 when the path is not one of
 * its own), and admission of a Workflow against the store (1 when its
 * functions exist and its typed edges fit; 0 with `resp` a 400). */
int funcd_cp_workflows(funcd_cp *cp, const funcd_cp_request *req, const struct funcd_token *t,
                       funcd_cp_response *resp);
int funcd_cp_admit_workflow(const funcd_cp *cp, const char *ns, const cJSON *obj,
                            funcd_cp_response *resp);

/* Sets `resp` to a JSON Status error. `field` may be NULL. */
void funcd_cp_status(funcd_cp_response *resp, int code, const char *reason, const char *field,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* One NDJSON watch line ({"type":..,"object":..}\n) for a store event, or
 * for a listed object (`added`); appended to `out`; `redact`: the object
 * through funcd_cp_redact. */
int funcd_cp_watch_line(funcd_buf *out, const char *type, const void *value, size_t len,
                        uint64_t revision, int redact);

/* What a viewer sees of a Secret (docs/security.md): every value of `data`
 * becomes "" (the keys stay), stringData and the kubectl last-applied
 * annotation go, and the annotation funcd.dev/data-redacted is "true". */
void funcd_cp_redact(cJSON *secret);

#endif
