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
/* Lines `token role namespace[,namespace...]`; '#' comments; errors name the line. */
int funcd_auth_load_file(funcd_auth *a, const char *path);
void funcd_auth_clear(funcd_auth *a);

/* The token matching `bearer` (constant-time per entry), or NULL. */
const funcd_token *funcd_auth_find(const funcd_auth *a, const char *bearer, size_t len);
/* 1 if `t` may act in `ns` (NULL: across all namespaces) with `write` access. */
int funcd_token_allows(const funcd_token *t, const char *ns, int write);

#endif
