/*
 * Secrets as environment variables (docs/secrets.md): a Function's
 * spec.env value {secretKeyRef: {name, key}} and spec.envFrom
 * [{secretRef: {name}}] are read from the Secrets of its namespace when the
 * controller hands the spec to serving. Serving only ever sees strings, so
 * a Secret whose value changes changes the workers' environment, hence
 * their fingerprint, and the workers roll. The stored Function keeps the
 * references, never the values.
 */
#ifndef FUNCD_CONTROLLER_SECRET_ENV_H
#define FUNCD_CONTROLLER_SECRET_ENV_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "funcd/sys/store.h"

/* Whether Function `fn`'s spec reads Secret `secret` (NULL: any Secret). */
int funcd_secret_env_uses(const cJSON *fn, const char *secret);

/*
 * A copy of Function `fn` whose spec.env holds only strings: each
 * secretKeyRef replaced by the key's value, and the keys of the envFrom
 * Secrets that can name a variable added where spec.env has no such name
 * (a later Secret of the list wins over an earlier one); envFrom removed.
 * NULL when a Secret or one of its keys is missing or unusable: `reason`
 * (CamelCase) and `message` (naming the field and the Secret) say why.
 */
cJSON *funcd_secret_env_resolve(funcd_store *store, const char *ns, const cJSON *fn,
                                char *reason, size_t reason_len, char *message,
                                size_t message_len);

#endif
