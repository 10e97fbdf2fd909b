/* Shared helpers of the test_api_*.c programs. */
#ifndef FUNCD_TESTS_API_HELPERS_H
#define FUNCD_TESTS_API_HELPERS_H

#include <stdio.h>
#include <string.h>

#include "api/api.h"
#include "funcd/common.h"
#include "harness.h"

/* Decodes `text` (one document) and validates it as `kind`. NULL when the
 * outcome matches: valid when `field` is NULL, else an error at exactly
 * `field` whose message contains `message`. Otherwise a description. */
__attribute__((unused)) static const char *api_expect(const char *kind, const char *text, const char *field,
                              const char *message)
{
    static char why[1024];
    funcd_api_error err;
    cJSON *obj = NULL;
    if (funcd_api_decode(text, strlen(text), &obj, &err) < 0) {
        snprintf(why, sizeof(why), "decode failed: %s", err.message);
        return why;
    }
    int rc = funcd_api_validate(funcd_kind_by_kind(kind), obj, &err);
    cJSON_Delete(obj);
    if (!field && rc == 0)
        return NULL;
    if (!field) {
        snprintf(why, sizeof(why), "expected valid, got %s: %s", err.field, err.message);
        return why;
    }
    if (rc != FUNCD_EINVAL) {
        snprintf(why, sizeof(why), "expected an error at %s, got rc %d", field, rc);
        return why;
    }
    if (strcmp(err.field, field) != 0 || !strstr(err.message, message)) {
        snprintf(why, sizeof(why), "expected %s: ...%s..., got %s: %s", field, message, err.field,
                 err.message);
        return why;
    }
    return NULL;
}

#define VALID(kind, text)                                                                          \
    do {                                                                                           \
        const char *why_ = api_expect((kind), (text), NULL, NULL);                                 \
        if (why_)                                                                                  \
            FAILF("%s", why_);                                                                     \
    } while (0)

#define INVALID(kind, text, field, message)                                                        \
    do {                                                                                           \
        const char *why_ = api_expect((kind), (text), (field), (message));                         \
        if (why_)                                                                                  \
            FAILF("%s", why_);                                                                     \
    } while (0)

/* Decodes a single document or returns NULL, printing why. */
__attribute__((unused)) static cJSON *api_decode_text(const char *text)
{
    funcd_api_error err;
    cJSON *obj = NULL;
    if (funcd_api_decode(text, strlen(text), &obj, &err) < 0) {
        fprintf(stderr, "  decode: %s: %s\n", err.field, err.message);
        return NULL;
    }
    return obj;
}

/* A Function whose spec ends with the lines `extra` ("  timeout: 30s\n"). */
#define FN(extra)                                                                                  \
    "apiVersion: funcd.dev/v1\n"                                                                   \
    "kind: Function\n"                                                                             \
    "metadata:\n"                                                                                  \
    "  name: hello\n"                                                                              \
    "spec:\n"                                                                                      \
    "  runtime: python3\n"                                                                         \
    "  handler: main.handler\n"                                                                    \
    "  source:\n"                                                                                  \
    "    path: /srv/hello\n" extra

/* The same without a source: `extra` supplies it. */
#define FN_NOSRC(extra)                                                                            \
    "apiVersion: funcd.dev/v1\n"                                                                   \
    "kind: Function\n"                                                                             \
    "metadata:\n"                                                                                  \
    "  name: hello\n"                                                                              \
    "spec:\n"                                                                                      \
    "  runtime: python3\n" extra

/* A Function whose metadata ends with `extra` ("  labels: {a: b}\n"). */
#define FN_META(extra)                                                                             \
    "apiVersion: funcd.dev/v1\n"                                                                   \
    "kind: Function\n"                                                                             \
    "metadata:\n"                                                                                  \
    "  name: hello\n" extra "spec:\n"                                                              \
    "  runtime: node\n"                                                                            \
    "  source: {bundle: "                                                                          \
    "'sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef'}\n"

#define FC(extra)                                                                                  \
    "apiVersion: funcd.dev/v1\n"                                                                   \
    "kind: FunctionConfig\n"                                                                       \
    "metadata:\n"                                                                                  \
    "  name: set-namespace\n"                                                                      \
    "spec:\n"                                                                                      \
    "  image: set-namespace\n" extra

#define SECRET(extra)                                                                              \
    "apiVersion: funcd.dev/v1\n"                                                                   \
    "kind: Secret\n"                                                                               \
    "metadata:\n"                                                                                  \
    "  name: creds\n" extra

#endif
