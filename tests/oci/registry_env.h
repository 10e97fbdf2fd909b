/*
 * A real registry for tests: Debian's docker-registry on 127.0.0.1, plain,
 * with htpasswd auth, or behind TLS with a CA the test generates; images
 * pushed with skopeo from OCI layouts that tests/oci/fixtures.sh builds.
 */
#ifndef FUNCD_TESTS_OCI_REGISTRY_ENV_H
#define FUNCD_TESTS_OCI_REGISTRY_ENV_H

#include <stddef.h>
#include <sys/types.h>

typedef enum registry_kind {
    REGISTRY_PLAIN,
    REGISTRY_HTPASSWD, /* user "funcd", password "s3cret" */
    REGISTRY_TLS,      /* certs_dir holds <addr>/ca.crt */
} registry_kind;

#define REGISTRY_USER "funcd"
#define REGISTRY_PASS "s3cret"

typedef struct registry_env {
    pid_t pid;
    registry_kind kind;
    char root[256];      /* a mkdtemp dir: config, storage, certs */
    char addr[64];       /* "127.0.0.1:PORT" */
    char storage[320];   /* the registry's filesystem root */
    char certs_dir[320]; /* TLS: Docker's certs.d layout for clients */
} registry_env;

/* 1 when docker-registry, skopeo, htpasswd, openssl and cc are installed. */
int registry_env_tools_present(void);

/* Builds the named fixtures (fixtures.sh) into dir; 0 or -1. */
int registry_env_build_fixtures(const char *dir, const char *names);

/* Starts a registry and waits until /v2/ answers; 0 or -1 (with a message on stderr). */
int registry_env_start(registry_env *e, registry_kind kind);

/* skopeo copy [--all] oci:LAYOUT:1 docker://ADDR/REPO_TAG; 0 or -1. */
int registry_env_push(const registry_env *e, const char *layout, const char *repo_tag, int all);

/* The registry's data file for a blob digest ("sha256:<hex>"). */
void registry_env_blob_path(const registry_env *e, const char *digest, char *out, size_t n);

/* Kills the registry by pid, waits for it, removes its directory. */
void registry_env_stop(registry_env *e);

/* A loopback port nothing listens on now (bound, then closed); -1 on error. */
int registry_env_free_port(void);

#endif
