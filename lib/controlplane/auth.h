/*
 * Bearer tokens and roles. A token grants a role in a set of namespaces
 * ("*" means every namespace): admin may do everything, developer may read
 * and write, viewer may only read.
 *
 * Threads: built once before serving, then read-only.
 */
#ifndef FUNCD_CONTROLPLANE_AUTH_H
#define FUNCD_CONTROLPLANE_AUTH_H

#include <stddef.h>

typedef enum funcd_role {
    FUNCD_ROLE_VIEWER = 1,
    FUNCD_ROLE_DEVELOPER = 2,
    FUNCD_ROLE_ADMIN = 3,
} funcd_role;

typedef struct funcd_token {
    char *token;
    funcd_role role;
    char **namespaces; /* NULL-terminated */
    char *name;        /* who it is, for X-Funcd-Subject: the token file's fourth field, else
                          "token-" and 12 hex digits of the token's SHA-256 */
} funcd_token;

typedef struct funcd_auth {
    funcd_token *tokens;
    size_t count;
} funcd_auth;

int funcd_role_parse(const char *s, funcd_role *out);
const char *funcd_role_name(funcd_role role);

/* Adds (or replaces) a token. */
int funcd_auth_add(funcd_auth *a, const char *token, funcd_role role,
                   const char *const *namespaces);
/* Lines `token role namespace[,namespace...] [name]`; '#' comments; errors name the line. */
int funcd_auth_load_file(funcd_auth *a, const char *path);
void funcd_auth_clear(funcd_auth *a);

/* The token matching `bearer` (constant-time per entry), or NULL. */
const funcd_token *funcd_auth_find(const funcd_auth *a, const char *bearer, size_t len);
/* 1 if `t` may act in `ns` (NULL: across all namespaces) with `write` access. */
int funcd_token_allows(const funcd_token *t, const char *ns, int write);

/* The token of an `Authorization: Bearer <token>` value (scheme
 * case-insensitive), or NULL: *missing says whether there was no bearer
 * token at all (rather than an unknown one). */
const funcd_token *funcd_auth_bearer(const funcd_auth *a, const char *authorization, size_t len,
                                     int *missing);

/* The edge's check (funcd_edge_authorize_fn; payload: a funcd_auth) for
 * invoking a function in `ns`: a developer or admin token of the namespace.
 * A viewer may read, not run code. */
int funcd_auth_authorize_invoke(void *payload, const char *ns, const char *authorization,
                                size_t authorization_len, char *subject, size_t subject_len,
                                char *message, size_t message_len);

#endif
