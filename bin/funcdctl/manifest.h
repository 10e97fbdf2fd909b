/* Reading objects from the files that `apply -f` and `delete -f` name, and
 * applying one object (shared by apply and deploy). */
#ifndef FUNCDCTL_MANIFEST_H
#define FUNCDCTL_MANIFEST_H

#include <cjson/cJSON.h>

#include "cli.h"

/* Reads `path` ("-": standard input) and decodes every object in it
 * (funcd_api_decode_all). 0 with *out a cJSON array the caller frees, or
 * CTL_EXIT_ERROR with the message printed. */
int ctl_read_manifest(const char *path, cJSON **out);

/* Where one object of a manifest goes. Strings point into the object/ctx. */
typedef struct ctl_target {
    const funcd_kind *kind;
    const char *name;
    const char *ns;
    char what[160]; /* "function/hello", to prefix messages and report results */
} ctl_target;

/*
 * Resolves object number `index` (0-based) of `path`: its kind, name, and
 * namespace (metadata.namespace, else -n; both given and different is an
 * error). 0, or CTL_EXIT_ERROR with a message saying which document to fix.
 */
int ctl_manifest_target(const ctl_ctx *ctx, const char *path, int index, const cJSON *obj,
                        ctl_target *out);

/* ctl_apply_object flags. */
#define CTL_APPLY_KEEP_METADATA 1 /* keep the server's labels/annotations that obj lacks */

/*
 * Creates `obj` at `t` if missing, replaces it if it differs (PUT with the
 * revision just read), or leaves it. On success *result is the object as the
 * server now holds it (the caller frees it) and *verb "created",
 * "configured" or "unchanged". Returns 0, CTL_EXIT_ERROR (reported), or -1
 * when funcd is unreachable.
 */
int ctl_apply_object(ctl_client *client, const ctl_target *t, cJSON *obj, int flags,
                     cJSON **result, const char **verb);

#endif
