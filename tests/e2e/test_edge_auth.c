/*
 * The authentication stance, end to end (docs/edge.md): an `authenticated`
 * function answers 401 without a valid token and 403 for a token that may
 * not invoke in its namespace, before any worker starts; a good token gets
 * through, and the worker sees X-Funcd-Subject (the token's name), never
 * the Authorization header. A client's own X-Funcd-Subject never arrives.
 * The fixture worker echoes both headers.
 */
#include <mbedtls/sha256.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../harness.h"
#include "test_serving_common.h"


/* A data-plane request with extra header lines (NULL-terminated). */
static long call(env *e, const char *path, const char *token, const char *const *headers)
{
    return e2e_http_send(e->dp, "GET", path, token, headers, NULL, 0, &e->r);
}

/* The subject of a token without a name: "token-" and 12 hex digits of
 * its SHA-256. */
static void default_subject(const char *token, char out[19])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char sum[32];
    mbedtls_sha256_ret((const unsigned char *)token, strlen(token), sum, 0);
    memcpy(out, "token-", 6);
    for (int i = 0; i < 6; i++) {
        out[6 + 2 * i] = hex[sum[i] >> 4];
        out[7 + 2 * i] = hex[sum[i] & 15];
    }
    out[18] = '\0';
}

SV_TEST(authenticated_function)
{
    CHECK(sv_native(e, "guarded", "\"edge\":{\"auth\":\"authenticated\"}") == 0);
    /* GET gives spec.edge back as written. */
    CHECK_INT(env_req(e, "GET", FN_PATH("guarded"), DEV_TOKEN, NULL), 200);
    CHECK_STR(jstr(e->r.json, "spec.edge.auth"), "authenticated");

    CHECK_INT(call(e, DP_PATH("guarded") "/x", NULL, NULL), 401);
    CHECK_STATUS(401, "Unauthorized", NULL);
    CHECK(strstr(sv_header(&e->r, "www-authenticate"), "Bearer"));
    CHECK(sv_header(&e->r, "x-funcd-invocation-id")[0]);
    CHECK_INT(call(e, DP_PATH("guarded") "/x", "not-a-token", NULL), 401);
    CHECK_STATUS(401, "Unauthorized", NULL);
    static const char *const basic[] = {"Authorization: Basic YWxhZGRpbjpvcGVu", NULL};
    CHECK_INT(call(e, DP_PATH("guarded") "/x", NULL, basic), 401);
    /* A developer of another namespace, and a viewer of this one. */
    CHECK_INT(call(e, DP_PATH("guarded") "/x", TEAM_B_TOKEN, NULL), 403);
    CHECK_STATUS(403, "Forbidden", NULL);
    CHECK(strstr(jstr(e->r.json, "message"), "\"default\""));
    CHECK_INT(call(e, DP_PATH("guarded") "/x", VIEWER_TOKEN, NULL), 403);
    CHECK_STATUS(403, "Forbidden", NULL);
    env_sleep_ms(300);
    CHECK_INT(sv_worker_count(e, "guarded"), 0);
    int ready = 0, total = 0;
    if (sv_replicas(e, "guarded", &ready, &total) == 0)
        CHECK_INT(total, 0);

    /* A developer of the namespace, trying to pass a subject of its own. */
    static const char *const forged[] = {"X-Funcd-Subject: admin", NULL};
    CHECK_INT(call(e, DP_PATH("guarded") "/x", DEV_TOKEN, forged), 200);
    char want[19];
    default_subject(DEV_TOKEN, want);
    CHECK_STR(jstr(e->r.json, "authorization"), "");
    CHECK_STR(jstr(e->r.json, "subject"), want);
    CHECK_INT((int)jnum(e->r.json, "subjects"), 1);
    /* An admin token anywhere. */
    CHECK_INT(call(e, DP_PATH("guarded") "/x", ADMIN_TOKEN, NULL), 200);
    default_subject(ADMIN_TOKEN, want);
    CHECK_STR(jstr(e->r.json, "subject"), want);
    CHECK_STR(jstr(e->r.json, "authorization"), "");
}

/* An open function: no token needed, the caller's Authorization passes
 * as it came, and a forged X-Funcd-Subject is dropped. */
SV_TEST(open_function)
{
    CHECK(sv_native(e, "public", NULL) == 0);
    static const char *const hdrs[] = {"X-Funcd-Subject: admin", "Authorization: Bearer own",
                                       NULL};
    CHECK_INT(call(e, DP_PATH("public") "/x", NULL, hdrs), 200);
    CHECK_STR(jstr(e->r.json, "authorization"), "Bearer own");
    CHECK_STR(jstr(e->r.json, "subject"), "");
    CHECK_INT((int)jnum(e->r.json, "subjects"), 0);
}

/* The daemon's default stance, and a spec that opens one function. */
SV_TEST_WITH(authenticated_by_default, funcd_with_edge_auth_default("authenticated"), NULL)
{
    CHECK(sv_native(e, "closed", NULL) == 0);
    CHECK(sv_native(e, "opened", "\"edge\":{\"auth\":\"open\"}") == 0);
    CHECK_INT(call(e, DP_PATH("closed") "/x", NULL, NULL), 401);
    CHECK_INT(call(e, DP_PATH("closed") "/x", DEV_TOKEN, NULL), 200);
    CHECK_INT(call(e, DP_PATH("opened") "/x", NULL, NULL), 200);
    /* The stance follows an update of the Function. The controller may
     * write status between the GET and the PUT (409): read again, as a
     * client does. */
    long put = 0;
    for (int i = 0; i < 20 && put != 200; i++) {
        CHECK_INT(env_req(e, "GET", FN_PATH("opened"), DEV_TOKEN, NULL), 200);
        cJSON *fn = cJSON_Duplicate(e->r.json, 1);
        cJSON *edge = cJSON_GetObjectItem(cJSON_GetObjectItem(fn, "spec"), "edge");
        cJSON_ReplaceItemInObject(edge, "auth", cJSON_CreateString("authenticated"));
        char *text = cJSON_PrintUnformatted(fn);
        cJSON_Delete(fn);
        put = env_req(e, "PUT", FN_PATH("opened"), ADMIN_TOKEN, text); /* a host path */
        free(text);
        if (put != 409)
            break;
    }
    CHECK_INT(put, 200);
    int closed = 0;
    for (int i = 0; i < 250 && !closed; i++) {
        closed = call(e, DP_PATH("opened") "/x", NULL, NULL) == 401;
        if (!closed)
            env_sleep_ms(20);
    }
    CHECK(closed);
}

/* A token file's fourth field names the token. */
static funcd_option *named_token_file(void)
{
    static char path[64];
    snprintf(path, sizeof(path), "/tmp/funcd-e2e-tokens-%d", (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f)
        return NULL;
    fprintf(f, "e2e-named developer default ci-deployer\n");
    fclose(f);
    chmod(path, 0600);
    return funcd_with_token_file(path);
}

SV_TEST_WITH(named_token, named_token_file(), NULL)
{
    char path[64];
    snprintf(path, sizeof(path), "/tmp/funcd-e2e-tokens-%d", (int)getpid());
    unlink(path);
    CHECK(sv_native(e, "guarded", "\"edge\":{\"auth\":\"authenticated\"}") == 0);
    CHECK_INT(call(e, DP_PATH("guarded") "/x", "e2e-named", NULL), 200);
    CHECK_STR(jstr(e->r.json, "subject"), "ci-deployer");
}

int main(int argc, char **argv)
{
    sv_init();
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    SV_RUN(only, ran, authenticated_function);
    SV_RUN(only, ran, open_function);
    SV_RUN(only, ran, authenticated_by_default);
    SV_RUN(only, ran, named_token);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no test case named %s\n", only);
        return 1;
    }
    return HARNESS_END();
}
