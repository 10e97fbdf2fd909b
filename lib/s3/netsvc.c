/*
 * The S3 gateway as a service workers find in their network namespace
 * (serving/netsvc.h): a Function with spec.bindings.blob gets, in each
 * sandboxed worker, a listener at 127.0.0.1:9000 that the gateway serves
 * for that Function's key only, and its credentials in the environment.
 * Without the sandbox the workers are told the host listener (--s3-listen).
 */
#include "s3/s3.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "funcd/sys/error.h"
#include "serving/netsvc.h"

#define WORKER_PORT 9000

typedef struct s3_netsvc {
    funcd_netsvc base;
    funcd_s3 *s3;
} s3_netsvc;

typedef struct version {
    char ns[64], name[64];
    char *env[7];
} version;

static void free_version(version *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < sizeof(v->env) / sizeof(v->env[0]); i++)
        free(v->env[i]);
    free(v);
}

static int plan(funcd_netsvc *svc, const char *ns, const char *name, const cJSON *fn,
                const cJSON *spec, int sandboxed, funcd_netsvc_plan *out, char reason[64])
{
    s3_netsvc *s = (s3_netsvc *)svc;
    const cJSON *blob = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(spec, "bindings"), "blob");
    if (cJSON_GetArraySize(blob) == 0)
        return 0;
    const char *host = funcd_s3_addr(s->s3);
    if (!sandboxed && !*host) {
        snprintf(reason, 64, "S3Unavailable");
        return funcd_error_set(FUNCD_ENOTSUP,
                               "spec.bindings.blob: without the sandbox, workers reach the S3 "
                               "gateway on its host listener; start funcd with --s3-listen");
    }
    version *v = calloc(1, sizeof(*v));
    char akid[160], secret[48];
    if (!v || funcd_s3_credentials(s->s3, fn, akid, secret) < 0) {
        free(v);
        snprintf(reason, 64, "InternalError");
        return v ? -1 : funcd_error_set(FUNCD_ENOMEM, "out of memory");
    }
    snprintf(v->ns, sizeof(v->ns), "%s", ns);
    snprintf(v->name, sizeof(v->name), "%s", name);
    char endpoint[160];
    if (sandboxed)
        snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", WORKER_PORT);
    else
        snprintf(endpoint, sizeof(endpoint), "http://%s", host);
    int oom = asprintf(&v->env[0], "AWS_ACCESS_KEY_ID=%s", akid) < 0 ||
              asprintf(&v->env[1], "AWS_SECRET_ACCESS_KEY=%s", secret) < 0 ||
              asprintf(&v->env[2], "AWS_ENDPOINT_URL=%s", endpoint) < 0 ||
              asprintf(&v->env[3], "AWS_ENDPOINT_URL_S3=%s", endpoint) < 0 ||
              asprintf(&v->env[4], "AWS_REGION=%s", FUNCD_S3_REGION) < 0 ||
              asprintf(&v->env[5], "AWS_DEFAULT_REGION=%s", FUNCD_S3_REGION) < 0;
    memset(secret, 0, sizeof(secret));
    if (oom) {
        free_version(v);
        snprintf(reason, 64, "InternalError");
        return funcd_error_set(FUNCD_ENOMEM, "out of memory");
    }
    out->env = v->env;
    out->state = v;
    if (sandboxed) {
        out->listen[0].type = SOCK_STREAM;
        out->listen[0].port = WORKER_PORT;
        out->n_listen = 1;
    }
    return 1;
}

static void *attach(funcd_netsvc *svc, void *state, const char *replica, const int *fds, size_t n)
{
    s3_netsvc *s = (s3_netsvc *)svc;
    version *v = state;
    (void)replica;
    if (n != 1)
        return NULL; /* no socket asked for (--no-sandbox): nothing to serve */
    return funcd_s3_listen_fd(s->s3, fds[0], v->ns, v->name);
}

static void detach(funcd_netsvc *svc, void *handle)
{
    funcd_s3_unlisten(((s3_netsvc *)svc)->s3, handle);
}

static void unplan(funcd_netsvc *svc, void *state)
{
    (void)svc;
    free_version(state);
}

funcd_netsvc *funcd_s3_netsvc_new(funcd_s3 *s3)
{
    s3_netsvc *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->base.name = "s3";
    s->base.plan = plan;
    s->base.attach = attach;
    s->base.detach = detach;
    s->base.unplan = unplan;
    s->s3 = s3;
    return &s->base;
}

void funcd_s3_netsvc_free(funcd_netsvc *svc)
{
    free(svc);
}
