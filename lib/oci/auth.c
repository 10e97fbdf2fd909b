/* Registry auth inputs: WWW-Authenticate challenges and Docker config JSON. */
#include "oci/oci.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <mbedtls/base64.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "funcd/sys/error.h"
#include "util/buf.h"
#include "util/misc.h"

static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

static int is_token_char(char c)
{
    return c > 32 && c < 127 && !strchr("\"(),/:;<=>?@[\\]{}", c);
}

/* One value: a token (token68 allows '/' and '=') or a quoted-string with \-escapes. */
static const char *parse_value(const char *p, funcd_buf *v)
{
    if (*p == '"') {
        for (p++; *p && *p != '"'; p++) {
            if (*p == '\\' && p[1])
                p++;
            funcd_buf_append(v, p, 1);
        }
        if (*p != '"')
            return NULL;
        return p + 1;
    }
    const char *start = p;
    while (is_token_char(*p) || *p == '/' || *p == ':')
        p++;
    funcd_buf_append(v, start, (size_t)(p - start));
    return p;
}

static void set_param(funcd_www_authenticate *w, const char *name, size_t n, funcd_buf *v)
{
    char **slot = NULL;
    if (n == 5 && strncasecmp(name, "realm", 5) == 0)
        slot = &w->realm;
    else if (n == 7 && strncasecmp(name, "service", 7) == 0)
        slot = &w->service;
    else if (n == 5 && strncasecmp(name, "scope", 5) == 0)
        slot = &w->scope;
    else if (n == 5 && strncasecmp(name, "error", 5) == 0)
        slot = &w->error;
    if (!slot || *slot) {
        funcd_buf_free(v);
        return;
    }
    *slot = funcd_buf_detach(v, NULL);
}

int funcd_www_authenticate_parse(funcd_www_authenticate *out, const char *header)
{
    memset(out, 0, sizeof(*out));
    const char *p = skip_ws(header ? header : "");
    const char *start = p;
    while (is_token_char(*p))
        p++;
    if (p == start)
        return funcd_error_set(FUNCD_EINVAL, "WWW-Authenticate: no auth scheme");
    out->scheme = funcd_strndup(start, (size_t)(p - start));
    for (;;) {
        p = skip_ws(p);
        while (*p == ',')
            p = skip_ws(p + 1);
        if (!*p)
            break;
        const char *name = p;
        while (is_token_char(*p))
            p++;
        size_t name_len = (size_t)(p - name);
        p = skip_ws(p);
        if (name_len == 0 || *p != '=') {
            funcd_www_authenticate_free(out);
            return funcd_error_set(FUNCD_EINVAL, "WWW-Authenticate: expected name=value");
        }
        p = skip_ws(p + 1);
        funcd_buf v = FUNCD_BUF_INIT;
        funcd_buf_puts(&v, "");
        p = parse_value(p, &v);
        if (!p) {
            funcd_buf_free(&v);
            funcd_www_authenticate_free(out);
            return funcd_error_set(FUNCD_EINVAL, "WWW-Authenticate: unterminated quoted value");
        }
        set_param(out, name, name_len, &v);
        p = skip_ws(p);
        if (*p && *p != ',') {
            funcd_www_authenticate_free(out);
            return funcd_error_set(FUNCD_EINVAL, "WWW-Authenticate: expected ',' between params");
        }
    }
    return 0;
}

void funcd_www_authenticate_free(funcd_www_authenticate *w)
{
    if (!w)
        return;
    free(w->scheme);
    free(w->realm);
    free(w->service);
    free(w->scope);
    free(w->error);
    memset(w, 0, sizeof(*w));
}

/* "https://index.docker.io/v1/" → "index.docker.io"; "host:5000" stays. */
static void normalize_host(const char *key, char *out, size_t out_len)
{
    if (strncmp(key, "https://", 8) == 0)
        key += 8;
    else if (strncmp(key, "http://", 7) == 0)
        key += 7;
    size_t n = strcspn(key, "/");
    if (n >= out_len)
        n = out_len - 1;
    for (size_t i = 0; i < n; i++)
        out[i] = (char)tolower((unsigned char)key[i]);
    out[n] = 0;
}

static int is_docker_hub(const char *host)
{
    return strcmp(host, "docker.io") == 0 || strcmp(host, "index.docker.io") == 0 ||
           strcmp(host, "registry-1.docker.io") == 0 || strcmp(host, "registry.docker.io") == 0;
}

static int host_matches(const char *key, const char *registry_host)
{
    char a[512], b[512];
    normalize_host(key, a, sizeof(a));
    normalize_host(registry_host, b, sizeof(b));
    return strcmp(a, b) == 0 || (is_docker_hub(a) && is_docker_hub(b));
}

/* "auth": base64("user:password"). */
static int decode_auth(const char *b64, char **user, char **pass)
{
    size_t n = strlen(b64), out_len = 0;
    unsigned char *raw = malloc(n + 1);
    if (!raw)
        return funcd_error_set(FUNCD_ENOMEM, "registry auth: out of memory");
    if (mbedtls_base64_decode(raw, n, &out_len, (const unsigned char *)b64, n) != 0) {
        free(raw);
        return funcd_error_set(FUNCD_EINVAL, "registry auth: an \"auth\" entry is not base64");
    }
    raw[out_len] = 0;
    char *colon = memchr(raw, ':', out_len);
    if (!colon || memchr(raw, 0, out_len)) {
        free(raw);
        return funcd_error_set(FUNCD_EINVAL, "registry auth: an \"auth\" entry is not user:password");
    }
    *user = funcd_strndup((char *)raw, (size_t)(colon - (char *)raw));
    *pass = funcd_strdup(colon + 1);
    memset(raw, 0, out_len);
    free(raw);
    return 0;
}

static int fill_entry(const cJSON *e, char **user, char **pass, char **identitytoken)
{
    const cJSON *auth = cJSON_GetObjectItemCaseSensitive(e, "auth");
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(e, "username");
    const cJSON *pw = cJSON_GetObjectItemCaseSensitive(e, "password");
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(e, "identitytoken");
    if (cJSON_IsString(auth) && auth->valuestring[0]) {
        int rc = decode_auth(auth->valuestring, user, pass);
        if (rc < 0)
            return rc;
    } else if (cJSON_IsString(u) && cJSON_IsString(pw)) {
        *user = funcd_strdup(u->valuestring);
        *pass = funcd_strdup(pw->valuestring);
    }
    if (identitytoken && cJSON_IsString(it) && it->valuestring[0])
        *identitytoken = funcd_strdup(it->valuestring);
    return 0;
}

int funcd_docker_config_lookup(const char *json, const char *registry_host, char **user,
                               char **pass, char **identitytoken)
{
    *user = *pass = NULL;
    if (identitytoken)
        *identitytoken = NULL;
    cJSON *root = cJSON_Parse(json ? json : "");
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return funcd_error_set(FUNCD_EINVAL, "registry auth: the Docker config is not a JSON object");
    }
    const cJSON *auths = cJSON_GetObjectItemCaseSensitive(root, "auths");
    int rc = funcd_error_set(FUNCD_ENOTFOUND, "registry auth: no credentials for %s", registry_host);
    const cJSON *e;
    const cJSON *entries = cJSON_IsObject(auths) ? auths : NULL;
    cJSON_ArrayForEach(e, entries)
    {
        if (!e->string || !cJSON_IsObject(e) || !host_matches(e->string, registry_host))
            continue;
        rc = fill_entry(e, user, pass, identitytoken);
        if (rc == 0 && !*user && !(identitytoken && *identitytoken))
            rc = funcd_error_set(FUNCD_EINVAL,
                                 "registry auth: the entry for %s has no auth, username/password "
                                 "or identitytoken",
                                 registry_host);
        break;
    }
    cJSON_Delete(root);
    if (rc < 0) {
        free(*user);
        free(*pass);
        *user = *pass = NULL;
        if (identitytoken) {
            free(*identitytoken);
            *identitytoken = NULL;
        }
    }
    return rc;
}
