/*
 * The sandbox's system-call filter: a deny list at least as strict as
 * Docker's default profile (docs/security.md), compiled once per runtime to
 * classic BPF so a child can load it between fork and exec without calling
 * libseccomp (which allocates).
 */
#ifndef FUNCD_RUNTIME_SECCOMP_H
#define FUNCD_RUNTIME_SECCOMP_H

#include <linux/filter.h>
#include <stddef.h>

typedef struct funcd_seccomp_filter {
    struct sock_filter *insns;
    unsigned short len;
} funcd_seccomp_filter;

/* Builds the filter; `allow` (NULL-terminated, may be NULL) names syscalls
 * the operator takes off the deny list. 0, or a FUNCD_E* code with the
 * error message set. */
int funcd_seccomp_build(funcd_seccomp_filter *out, const char *const *allow);
void funcd_seccomp_free(funcd_seccomp_filter *f);

/* The names denied (NULL-terminated), for docs and tests. */
extern const char *const funcd_seccomp_denied[];

#endif
