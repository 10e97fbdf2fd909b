#include "env.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Warnings and errors only: they explain a failing test, INFO is noise. */
static void log_to_stderr(funcd_log_level level, const char *message, void *payload)
{
    fprintf(stderr, "    [funcd %s] %s\n", level >= FUNCD_LOG_ERROR ? "error" : "warn", message);
}

int env_up(env *e, funcd_store *store)
{
    return env_up_with(e, store, NULL, NULL, NULL);
}

int env_up_with(env *e, funcd_store *store, funcd_option *a, funcd_option *b, funcd_option *c)
{
    static const char *const default_ns[] = {"default", NULL};
    static const char *const team_b[] = {"team-b", NULL};
    memset(e, 0, sizeof(*e));
    int rc = funcd_platform_new(&e->p, funcd_in_memory(), store ? funcd_with_store(store) : NULL,
                                funcd_with_token(ADMIN_TOKEN, "admin", NULL),
                                funcd_with_token(VIEWER_TOKEN, "viewer", default_ns),
                                funcd_with_token(TEAM_B_TOKEN, "developer", team_b),
                                funcd_with_logger(log_to_stderr, FUNCD_LOG_WARN, NULL), a, b, c);
    if (rc < 0)
        return rc;
    if ((rc = funcd_platform_start(e->p)) < 0)
        return rc;
    snprintf(e->base, sizeof(e->base), "http://%s", funcd_platform_addr(e->p));
    snprintf(e->dp_base, sizeof(e->dp_base), "http://%s", funcd_platform_data_plane_addr(e->p));
    e->h = e2e_http_new(e->base);
    e->dp = e2e_http_new(e->dp_base);
    e->keep = cJSON_CreateArray();
    if (!e->h || !e->dp || !e->keep)
        return FUNCD_ENOMEM;
    return 0;
}

/* Clients hang up before the platform shuts down: a client that keeps its
 * connection across a shutdown is a scenario of its own (test_watch,
 * test_api), not something every test should exercise. */
void env_down(env *e)
{
    for (size_t i = 0; i < e->nwatches; i++)
        e2e_watch_close(e->watches[i]);
    e->nwatches = 0;
    e2e_http_free(e->h);
    e2e_http_free(e->dp);
    e->h = e->dp = NULL;
    funcd_platform_free(e->p);
    e->p = NULL;
    e2e_resp_free(&e->r);
    cJSON_Delete(e->keep);
    e->keep = NULL;
}

long env_req(env *e, const char *method, const char *path, const char *token, const char *body)
{
    return e2e_http_do(e->h, method, path, token, body, &e->r);
}

long env_dp(env *e, const char *method, const char *path)
{
    return e2e_http_do(e->dp, method, path, NULL, NULL, &e->r);
}

e2e_watch *env_watch(env *e, const char *path, const char *token)
{
    if (e->nwatches == sizeof(e->watches) / sizeof(e->watches[0]))
        return NULL;
    char url[512];
    snprintf(url, sizeof(url), "%s%s", e->base, path);
    e2e_watch *w = e2e_watch_open(url, token);
    if (w)
        e->watches[e->nwatches++] = w;
    return w;
}

cJSON *env_keep(env *e, cJSON *value)
{
    if (value)
        cJSON_AddItemToArray(e->keep, value);
    return value;
}

cJSON *env_event(env *e, e2e_watch *w, int timeout_ms)
{
    return env_keep(e, e2e_watch_next_json(w, timeout_ms));
}

void env_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

int env_poll(env *e, int timeout_ms, int (*pred)(env *e, void *arg), void *arg)
{
    int64_t deadline = e2e_now_ms() + timeout_ms;
    for (;;) {
        if (pred(e, arg))
            return 1;
        if (e2e_now_ms() >= deadline)
            return 0;
        env_sleep_ms(10);
    }
}

static int settled(env *e, void *arg)
{
    return env_req(e, "GET", arg, DEV_TOKEN, NULL) == 200 &&
           jnum(e->r.json, "status.observedGeneration") == jnum(e->r.json, "metadata.generation");
}

int env_settle(env *e, const char *path)
{
    return env_poll(e, 3000, settled, (void *)path);
}

const cJSON *jget(const cJSON *j, const char *dotted)
{
    char key[128];
    const char *p = dotted;
    while (j && *p) {
        size_t n = strcspn(p, ".");
        if (n >= sizeof(key))
            return NULL;
        memcpy(key, p, n);
        key[n] = '\0';
        j = cJSON_GetObjectItemCaseSensitive(j, key);
        p += n;
        if (*p == '.')
            p++;
    }
    return j;
}

const char *jstr(const cJSON *j, const char *dotted)
{
    return cJSON_GetStringValue(jget(j, dotted));
}

double jnum(const cJSON *j, const char *dotted)
{
    const cJSON *v = jget(j, dotted);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

uint64_t jrv(const cJSON *obj)
{
    const char *s = jstr(obj, "metadata.resourceVersion");
    if (!s || !*s)
        return 0;
    char *end;
    uint64_t v = strtoull(s, &end, 10);
    return *end ? 0 : v;
}

const char *status_problem(const e2e_resp *r, long code, const char *reason, const char *field)
{
    static _Thread_local char why[256];
    const cJSON *j = r->json;
    const char *msg = jstr(j, "message");
    if (r->status != code)
        snprintf(why, sizeof(why), "HTTP status %ld, expected %ld", r->status, code);
    else if (!cJSON_IsObject(j))
        snprintf(why, sizeof(why), "the body is not a JSON object");
    else if (!jstr(j, "kind") || strcmp(jstr(j, "kind"), "Status") != 0)
        snprintf(why, sizeof(why), "kind is not \"Status\"");
    else if (jnum(j, "code") != (double)code)
        snprintf(why, sizeof(why), "code is not %ld", code);
    else if (!jstr(j, "reason") || strcmp(jstr(j, "reason"), reason) != 0)
        snprintf(why, sizeof(why), "reason is not \"%s\"", reason);
    else if (!msg || !*msg)
        snprintf(why, sizeof(why), "message is missing or empty");
    else if (field && (!jstr(j, "field") || strcmp(jstr(j, "field"), field) != 0))
        snprintf(why, sizeof(why), "field is \"%s\", expected \"%s\"",
                 jstr(j, "field") ? jstr(j, "field") : "(none)", field);
    else
        return NULL;
    return why;
}

funcd_store *tiny_history_store(size_t history)
{
    funcd_store *s = NULL;
    if (funcd_store_memory_new(&s, history) < 0)
        return NULL;
    return s;
}
