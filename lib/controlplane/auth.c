#include "controlplane/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <mbedtls/sha256.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "funcd/sys/error.h"
#include "objects/encryption.h"

int funcd_role_parse(const char *s, funcd_role *out)
{
    if (strcmp(s, "admin") == 0)
        *out = FUNCD_ROLE_ADMIN;
    else if (strcmp(s, "developer") == 0)
        *out = FUNCD_ROLE_DEVELOPER;
    else if (strcmp(s, "viewer") == 0)
        *out = FUNCD_ROLE_VIEWER;
    else
        return funcd_error_set(FUNCD_EINVAL, "unknown role '%s' (use admin, developer or viewer)", s);
    return 0;
}

const char *funcd_role_name(funcd_role role)
{
    switch (role) {
    case FUNCD_ROLE_ADMIN: return "admin";
    case FUNCD_ROLE_DEVELOPER: return "developer";
    default: return "viewer";
    }
}

static void token_free(funcd_token *t)
{
    if (t->token)
        memset(t->token, 0, strlen(t->token));
    free(t->token);
    for (char **ns = t->namespaces; ns && *ns; ns++)
        free(*ns);
    free(t->namespaces);
    free(t->name);
}

/* A name that says which token it was without giving it away. */
static char *default_name(const char *token)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char sum[32];
    char name[6 + 12 + 1] = "token-";
    if (mbedtls_sha256_ret((const unsigned char *)token, strlen(token), sum, 0) != 0)
        return NULL;
    for (int i = 0; i < 6; i++) {
        name[6 + 2 * i] = hex[sum[i] >> 4];
        name[6 + 2 * i + 1] = hex[sum[i] & 15];
    }
    name[18] = '\0';
    return strdup(name);
}

int funcd_auth_add(funcd_auth *a, const char *token, funcd_role role,
                   const char *const *namespaces)
{
    if (!token || !*token)
        return funcd_error_set(FUNCD_EINVAL, "a token must not be empty");
    size_t n = 0;
    while (namespaces && namespaces[n])
        n++;
    if (n == 0 && role != FUNCD_ROLE_ADMIN)
        return funcd_error_set(FUNCD_EINVAL,
                               "token for role %s needs at least one namespace (or \"*\")",
                               funcd_role_name(role));
    funcd_token t = {strdup(token), role, calloc(n + 1, sizeof(char *)), default_name(token)};
    int oom = !t.token || !t.namespaces || !t.name;
    for (size_t i = 0; i < n && !oom; i++)
        oom = !(t.namespaces[i] = strdup(namespaces[i]));
    if (oom) {
        token_free(&t);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory adding a token");
    }
    for (size_t i = 0; i < a->count; i++) {
        if (strcmp(a->tokens[i].token, token) == 0) {
            token_free(&a->tokens[i]);
            a->tokens[i] = t;
            return 0;
        }
    }
    funcd_token *grown = realloc(a->tokens, (a->count + 1) * sizeof(*grown));
    if (!grown) {
        token_free(&t);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory adding a token");
    }
    a->tokens = grown;
    a->tokens[a->count++] = t;
    return 0;
}

static int load_line(funcd_auth *a, char *line, const char *path, int lineno)
{
    char *save = NULL;
    /* A '#' at the start of a field begins a comment. */
    for (char *p = line; *p; p++)
        if (*p == '#' && (p == line || *(p - 1) == ' ' || *(p - 1) == '\t')) {
            *p = '\0';
            break;
        }
    char *tok = strtok_r(line, " \t\r\n", &save);
    if (!tok)
        return 0;
    char *role_s = strtok_r(NULL, " \t\r\n", &save);
    char *ns_s = strtok_r(NULL, " \t\r\n", &save);
    char *name = strtok_r(NULL, " \t\r\n", &save);
    char *extra = strtok_r(NULL, " \t\r\n", &save);
    funcd_role role = FUNCD_ROLE_VIEWER;
    if (!role_s || (!ns_s && strcmp(role_s, "admin") != 0) || extra)
        return funcd_error_set(FUNCD_EINVAL,
                               "%s:%d: expected `token role namespace[,namespace...] [name]`",
                               path, lineno);
    if (funcd_role_parse(role_s, &role) < 0)
        return funcd_error_set(FUNCD_EINVAL, "%s:%d: unknown role '%s' (use admin, developer or "
                               "viewer)", path, lineno, role_s);
    const char *nss[64];
    size_t n = 0;
    char *nsave = NULL;
    for (char *ns = ns_s ? strtok_r(ns_s, ",", &nsave) : NULL; ns; ns = strtok_r(NULL, ",", &nsave)) {
        if (n == 63)
            return funcd_error_set(FUNCD_EINVAL, "%s:%d: more than 63 namespaces", path, lineno);
        nss[n++] = ns;
    }
    nss[n] = NULL;
    if (n == 0)
        nss[n++] = "*", nss[n] = NULL;
    int rc = funcd_auth_add(a, tok, role, nss);
    if (rc < 0 || !name)
        return rc;
    const funcd_token *t = funcd_auth_find(a, tok, strlen(tok));
    char *copy = strdup(name);
    if (!copy)
        return funcd_error_set(FUNCD_ENOMEM, "out of memory adding a token");
    free(t->name);
    ((funcd_token *)t)->name = copy;
    return 0;
}

int funcd_auth_load_file(funcd_auth *a, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return funcd_error_set(FUNCD_EIO, "cannot read token file %s: %s", path, strerror(errno));
    /* Bearer tokens: a file others may read gives their roles away. */
    int rc = funcd_check_private_file(fd, path, "token file");
    FILE *f = rc == 0 ? fdopen(fd, "r") : NULL;
    if (!f) {
        close(fd);
        return rc < 0 ? rc : funcd_error_set(FUNCD_ENOMEM, "cannot read token file %s", path);
    }
    char line[4096];
    int lineno = 0;
    while (rc == 0 && fgets(line, sizeof(line), f)) {
        lineno++;
        rc = load_line(a, line, path, lineno);
    }
    fclose(f);
    return rc;
}

void funcd_auth_clear(funcd_auth *a)
{
    for (size_t i = 0; i < a->count; i++)
        token_free(&a->tokens[i]);
    free(a->tokens);
    a->tokens = NULL;
    a->count = 0;
}

static int ct_equal(const char *a, size_t alen, const char *b, size_t blen)
{
    unsigned char diff = (unsigned char)(alen != blen);
    size_t n = alen < blen ? alen : blen;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

const funcd_token *funcd_auth_find(const funcd_auth *a, const char *bearer, size_t len)
{
    const funcd_token *found = NULL;
    for (size_t i = 0; i < a->count; i++)
        if (ct_equal(a->tokens[i].token, strlen(a->tokens[i].token), bearer, len))
            found = &a->tokens[i];
    return found;
}

int funcd_token_allows(const funcd_token *t, const char *ns, int write)
{
    if (t->role == FUNCD_ROLE_ADMIN)
        return 1;
    if (write && t->role == FUNCD_ROLE_VIEWER)
        return 0;
    for (char **p = t->namespaces; *p; p++)
        if (strcmp(*p, "*") == 0 || (ns && strcmp(*p, ns) == 0))
            return 1;
    return 0;
}

const funcd_token *funcd_auth_bearer(const funcd_auth *a, const char *authorization, size_t len,
                                     int *missing)
{
    static const char bearer[] = "Bearer ";
    const size_t bl = sizeof(bearer) - 1;
    *missing = !authorization || len <= bl || strncasecmp(authorization, bearer, bl) != 0;
    return *missing ? NULL : funcd_auth_find(a, authorization + bl, len - bl);
}

int funcd_auth_authorize_invoke(void *payload, const char *ns, const char *authorization,
                                size_t authorization_len, char *subject, size_t subject_len,
                                char *message, size_t message_len)
{
    int missing;
    const funcd_token *t = funcd_auth_bearer(payload, authorization, authorization_len, &missing);
    if (!t) {
        snprintf(message, message_len, "%s",
                 missing ? "this function needs a bearer token: send `Authorization: Bearer "
                           "<token>` with a developer or admin token of its namespace"
                         : "invalid bearer token");
        return 401;
    }
    if (!funcd_token_allows(t, ns, 1)) {
        snprintf(message, message_len, "role %s may not invoke functions in namespace \"%s\"",
                 funcd_role_name(t->role), ns);
        return 403;
    }
    snprintf(subject, subject_len, "%s", t->name);
    message[0] = '\0';
    return 0;
}
