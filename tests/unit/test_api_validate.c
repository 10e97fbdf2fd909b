/* funcd_api_validate: every rule accepted once and rejected once, with the
 * exact field path. */
#include <stdlib.h>

#include "api_helpers.h"

#define SHA "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

/* ---- top level ---------------------------------------------------------------- */

TEST(top_level)
{
    VALID("Function", FN(""));
    VALID("Function", FN("") "status: {observedGeneration: 3, anything: [1, 2]}\n");
    INVALID("Function", FN("") "extra: 1\n", "extra", "unknown field");
    INVALID("Function", FN("") "status: 3\n", "status", "must be an object");
    INVALID("Function",
            "kind: Function\nmetadata: {name: a}\nspec: {runtime: node, source: {path: /a}}\n",
            "apiVersion", "required");
    INVALID("Function",
            "apiVersion: v1\nkind: Function\nmetadata: {name: a}\n"
            "spec: {runtime: node, source: {path: /a}}\n",
            "apiVersion", "must be funcd.dev/v1");
    INVALID("Function",
            "apiVersion: funcd.dev/v1\nkind: Secret\nmetadata: {name: a}\n"
            "spec: {runtime: node, source: {path: /a}}\n",
            "kind", "must be Function");
    INVALID("Function", "apiVersion: funcd.dev/v1\nkind: Function\nmetadata: {name: a}\n", "spec",
            "required");
    INVALID("Function", "apiVersion: funcd.dev/v1\nkind: Function\nspec: {}\n", "metadata",
            "required");
    INVALID("Function", "apiVersion: funcd.dev/v1\nkind: Function\nmetadata: []\nspec: {}\n",
            "metadata", "must be an object");

    funcd_api_error err;
    cJSON *arr = cJSON_CreateArray();
    CHECK_INT(funcd_api_validate(funcd_kind_by_kind("Function"), arr, &err), FUNCD_EINVAL);
    cJSON_Delete(arr);
    CHECK_STR(err.field, "");
    CHECK_CONTAINS(err.message, "must be an object");
    CHECK_INT(funcd_api_validate(NULL, NULL, &err), FUNCD_EINVAL);
    CHECK_INT(funcd_error_last()->code, FUNCD_EINVAL);

    /* The thread's last error names the field too. */
    cJSON *obj = api_decode_text(FN("  timeout: 0s\n"));
    CHECK(obj);
    int rc = funcd_api_validate(funcd_kind_by_kind("Function"), obj, NULL);
    cJSON_Delete(obj);
    CHECK_INT(rc, FUNCD_EINVAL);
    CHECK_STR(funcd_error_last()->message, "spec.timeout: must be greater than 0");
}

TEST(null_means_absent)
{
    VALID("Function", FN("  timeout:\n  env: null\n"));
    INVALID("Function", FN_NOSRC("  source: null\n"), "spec.source", "required");
}

/* ---- metadata ------------------------------------------------------------------- */

TEST(metadata_name)
{
    VALID("Function", FN_META(""));
    VALID("Function", FN_META("  namespace: team-a1\n"));
    INVALID("Function",
            "apiVersion: funcd.dev/v1\nkind: Function\nmetadata: {namespace: x}\n"
            "spec: {runtime: node, source: {path: /a}}\n",
            "metadata.name", "required");
    static const char *const bad[] = {"Hello", "-a", "a-", "a_b", "a.b", "\"\"", "3", "a--", "\"a b\"",
                                      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char doc[512];
        snprintf(doc, sizeof(doc),
                 "apiVersion: funcd.dev/v1\nkind: Function\nmetadata: {name: %s}\n"
                 "spec: {runtime: node, source: {path: /a}}\n",
                 bad[i]);
        INVALID("Function", doc, "metadata.name",
                "must be a DNS-1123 label: lowercase letters, digits and '-'");
    }
    /* 63 characters is the limit, digits may start. */
    char name[64], doc[512];
    memset(name, 'a', 63);
    name[0] = '1';
    name[63] = '\0';
    snprintf(doc, sizeof(doc), FN_META("  namespace: %s\n"), name);
    VALID("Function", doc);
    INVALID("Function", FN_META("  namespace: Default\n"), "metadata.namespace", "DNS-1123");
}

TEST(metadata_server_fields_and_unknown)
{
    VALID("Function", FN_META("  uid: 5f0c\n  resourceVersion: \"12\"\n  generation: 3\n"
                              "  creationTimestamp: \"2026-01-01T00:00:00Z\"\n"));
    /* Ignored by validation whatever their type. */
    VALID("Function", FN_META("  resourceVersion: [1]\n"));
    INVALID("Function", FN_META("  finalizers: [x]\n"), "metadata.finalizers", "unknown field");
}

TEST(metadata_labels)
{
    VALID("Function", FN_META("  labels: {app: web, app.kubernetes.io/name: a_b.c-d, "
                              "example.com/x: \"\"}\n"));
    INVALID("Function", FN_META("  labels: {bad key: x}\n"), "metadata.labels[bad key]",
            "must be a key");
    INVALID("Function", FN_META("  labels: {Example.com/x: y}\n"), "metadata.labels[Example.com/x]",
            "DNS subdomain");
    INVALID("Function", FN_META("  labels: {a/b/c: y}\n"), "metadata.labels[a/b/c]",
            "must be a key");
    INVALID("Function", FN_META("  labels: {example.com/: y}\n"), "metadata.labels[example.com/]",
            "must be a key");
    INVALID("Function", FN_META("  labels: {app: 3}\n"), "metadata.labels[app]",
            "must be a string");
    INVALID("Function", FN_META("  labels: {app: null}\n"), "metadata.labels[app]",
            "must be a string");
    INVALID("Function", FN_META("  labels: [a]\n"), "metadata.labels", "must be an object");
    INVALID("Function",
            FN_META("  labels: {app: "
                    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}\n"),
            "metadata.labels[app]", "at most 63 characters");
    /* Name part: 63 ok, 64 not. */
    VALID("Function",
          FN_META("  labels: {aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa: x}\n"));
    INVALID("Function",
            FN_META("  labels: {aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa: x}\n"),
            "metadata.labels[aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa]",
            "must be a key");
}

/* A Secret annotated with a: <a x's> and b: <b y's>. */
static char *annotated_secret(size_t a, size_t b)
{
    size_t cap = a + b + 256, n;
    char *doc = malloc(cap);
    n = (size_t)snprintf(doc, cap, SECRET("  annotations:\n    a: \""));
    memset(doc + n, 'x', a);
    n += a;
    n += (size_t)snprintf(doc + n, cap - n, "\"\n    b: \"");
    memset(doc + n, 'y', b);
    n += b;
    snprintf(doc + n, cap - n, "\"\n");
    return doc;
}

TEST(metadata_label_key_length)
{
    /* A 189-character DNS prefix, '/', a 63-character name: 253 in all. */
    char prefix[200], name[64], doc[1024];
    memset(prefix, 'a', 189);
    prefix[63] = prefix[127] = '.';
    prefix[189] = '\0';
    memset(name, 'n', 63);
    name[63] = '\0';
    snprintf(doc, sizeof(doc), FN_META("  labels: {%s/%s: x}\n"), prefix, name);
    VALID("Function", doc);
    prefix[189] = 'a';
    prefix[190] = '\0';
    snprintf(doc, sizeof(doc), FN_META("  labels: {%s/%s: x}\n"), prefix, name);
    char field[300];
    snprintf(field, sizeof(field), "metadata.labels[%s/%s]", prefix, name);
    field[sizeof(((funcd_api_error *)0)->field) - 1] = '\0'; /* paths are truncated to fit */
    INVALID("Function", doc, field, "at most 253 characters");
}

TEST(metadata_annotations)
{
    VALID("Function", FN_META("  annotations: {note: \"any length, any: chars\"}\n"));
    INVALID("Function", FN_META("  annotations: {note: 1}\n"), "metadata.annotations[note]",
            "must be a string");
    INVALID("Function", FN_META("  annotations: {\"x y\": z}\n"), "metadata.annotations[x y]",
            "must be a key");

    /* 256 KiB in total, keys and values: "a" + 200 KiB + "b" + the rest. */
    size_t a = 200 * 1024, b = 256 * 1024 - 2 - a;
    char *doc = annotated_secret(a, b);
    VALID("Secret", doc);
    free(doc);
    doc = annotated_secret(a, b + 1);
    INVALID("Secret", doc, "metadata.annotations", "total size of keys and values");
    free(doc);
}

/* ---- Function spec ------------------------------------------------------------------ */

TEST(function_runtime_handler_mode)
{
    VALID("Function", FN_NOSRC("  source: {path: /a}\n"));
    INVALID("Function", "apiVersion: funcd.dev/v1\nkind: Function\nmetadata: {name: a}\n"
                        "spec: {runtime: java, source: {path: /a}}\n",
            "spec.runtime", "must be one of: native, python3, node");
    INVALID("Function", "apiVersion: funcd.dev/v1\nkind: Function\nmetadata: {name: a}\n"
                        "spec: {source: {path: /a}}\n",
            "spec.runtime", "required");
    VALID("Function", FN("  mode: exec\n"));
    VALID("Function", FN("  mode: http\n"));
    INVALID("Function", FN("  mode: batch\n"), "spec.mode", "must be one of: http, exec");
}

TEST(function_handler_length)
{
    char doc[1024], handler[300];
    memset(handler, 'h', 256);
    handler[256] = '\0';
    snprintf(doc, sizeof(doc), FN_NOSRC("  source: {path: /a}\n  handler: %s\n"), handler);
    VALID("Function", doc);
    memset(handler, 'h', 257);
    handler[257] = '\0';
    snprintf(doc, sizeof(doc), FN_NOSRC("  source: {path: /a}\n  handler: %s\n"), handler);
    INVALID("Function", doc, "spec.handler", "at most 256 characters");
    INVALID("Function", FN_NOSRC("  source: {path: /a}\n  handler: [x]\n"), "spec.handler",
            "must be a string");
}

/* The handler names a file inside the code directory (issue 11). */
TEST(function_handler_stays_inside)
{
    VALID("Function", FN_NOSRC("  source: {path: /a}\n  handler: bin/hello\n"));
    VALID("Function", FN_NOSRC("  source: {path: /a}\n  handler: ./hello..sh\n"));
    VALID("Function", FN_NOSRC("  source: {path: /a}\n  handler: main.handler\n"));
    VALID("Function", FN_NOSRC("  source: {path: /a}\n  handler: \"index.js#handler\"\n"));
    INVALID("Function", FN_NOSRC("  source: {path: /a}\n  handler: ../../bin/cat\n"),
            "spec.handler", "relative path without '..' components");
    INVALID("Function", FN_NOSRC("  source: {path: /a}\n  handler: bin/../../x\n"),
            "spec.handler", "inside the code directory");
    INVALID("Function", FN_NOSRC("  source: {path: /a}\n  handler: /bin/cat\n"),
            "spec.handler", "inside the code directory");
    INVALID("Function", FN_NOSRC("  source: {bundle: \"" SHA "\"}\n  handler: //bin/sh\n"),
            "spec.handler", "inside the code directory");
    INVALID("Function",
            FN_NOSRC("  source: {git: {url: \"https://example.com/r.git\"}}\n  handler: ..\n"),
            "spec.handler", "inside the code directory");
    /* An image's handler is a path inside the image: its whole root. */
    VALID("Function", FN_NOSRC("  source: {image: \"nginx:1\"}\n  handler: /usr/bin/env\n"));
}

TEST(function_args)
{
    VALID("Function", FN("  args: [--port, \"8080\", \"\"]\n"));
    INVALID("Function", FN("  args: [a, b, 3]\n"), "spec.args[2]", "must be a string");
    INVALID("Function", FN("  args: a\n"), "spec.args", "must be an array of strings");
    char doc[2048];
    size_t n = (size_t)snprintf(doc, sizeof(doc), FN("  args: ["));
    for (int i = 0; i < 64; i++)
        n += (size_t)snprintf(doc + n, sizeof(doc) - n, "%sa", i ? "," : "");
    snprintf(doc + n, sizeof(doc) - n, "]\n");
    VALID("Function", doc);
    snprintf(doc + n, sizeof(doc) - n, ",a]\n");
    INVALID("Function", doc, "spec.args", "at most 64 items");
}

TEST(function_source_one_of)
{
    INVALID("Function", FN_NOSRC(""), "spec.source", "required");
    INVALID("Function", FN_NOSRC("  source: {}\n"), "spec.source",
            "must set exactly one of path, bundle, image or git");
    INVALID("Function", FN_NOSRC("  source: {path: /a, image: nginx}\n"), "spec.source",
            "exactly one of");
    INVALID("Function", FN_NOSRC("  source: {url: x}\n"), "spec.source.url", "unknown field");
    INVALID("Function", FN_NOSRC("  source: /a\n"), "spec.source", "must be an object");
}

TEST(function_source_path)
{
    VALID("Function", FN_NOSRC("  source: {path: /}\n"));
    VALID("Function", FN_NOSRC("  source: {path: /srv/fn/..x/a.b}\n"));
    INVALID("Function", FN_NOSRC("  source: {path: srv/fn}\n"), "spec.source.path",
            "must be an absolute path without '..' components");
    INVALID("Function", FN_NOSRC("  source: {path: /srv/../etc}\n"), "spec.source.path",
            "absolute path");
    INVALID("Function", FN_NOSRC("  source: {path: /srv/..}\n"), "spec.source.path",
            "absolute path");
    INVALID("Function", FN_NOSRC("  source: {path: \"\"}\n"), "spec.source.path", "absolute");
}

TEST(function_source_bundle)
{
    VALID("Function", FN_NOSRC("  source: {bundle: \"" SHA "\"}\n"));
    INVALID("Function",
            FN_NOSRC("  source: {bundle: "
                     "\"sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef\"}\n"),
            "spec.source.bundle", "must be \"sha256:\" followed by 64 lowercase hex digits");
    INVALID("Function", FN_NOSRC("  source: {bundle: \"sha256:0123\"}\n"), "spec.source.bundle",
            "64 lowercase hex");
    INVALID("Function", FN_NOSRC("  source: {bundle: \"" SHA "0\"}\n"), "spec.source.bundle",
            "64 lowercase hex");
    INVALID("Function",
            FN_NOSRC("  source: {bundle: "
                     "\"md5:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"}\n"),
            "spec.source.bundle", "sha256");
}

TEST(function_source_image)
{
    static const char *const good[] = {
        "nginx",
        "nginx:1.25",
        "library/nginx:latest",
        "registry.example.com/team/app:v1.2_3-rc",
        "localhost:5000/app",
        "localhost/app",
        "127.0.0.1:5000/a/b/c:t",
        "ghcr.io/o/a__b.c-d---e:tag",
        "app@" SHA,
        "Registry.Example.com:443/app:v1@" SHA,
    };
    static const char *const bad[] = {
        "",
        "Nginx",
        "app:",
        "app:-tag",
        "app@sha256:abc",
        "app@md5:0123",
        "reg.io/app/",
        "/app",
        "a..b/c",
        "reg.io:99999/app",
        "reg.io:/app",
        "app:v1:v2",
        "a b",
        "app_",
        "a___b",
        "-reg.io/app",
        "app@" SHA "@" SHA,
    };
    char doc[512];
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        snprintf(doc, sizeof(doc), FN_NOSRC("  source: {image: \"%s\"}\n"), good[i]);
        VALID("Function", doc);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(doc, sizeof(doc), FN_NOSRC("  source: {image: \"%s\"}\n"), bad[i]);
        INVALID("Function", doc, "spec.source.image", "must be an OCI image reference");
    }
    char longname[300];
    memset(longname, 'a', 256);
    longname[256] = '\0';
    snprintf(doc, sizeof(doc), FN_NOSRC("  source: {image: \"%s\"}\n"), longname);
    INVALID("Function", doc, "spec.source.image", "OCI image reference");
}

TEST(function_source_git)
{
    static const char *const good[] = {
        "https://github.com/o/r.git", "http://git.local/r", "ssh://git@host/r.git",
        "git@github.com:o/r.git",     "file:///srv/repo",   "/srv/repo", "git://example.com/r.git",
    };
    static const char *const bad[] = {
        "github.com/o/r", "ftp://x/y", "https://", "git@:o/r", "git@host:", "-uhttps://x",
        "https://a b",    "",          "git@h/x:o",
    };
    char doc[512];
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        snprintf(doc, sizeof(doc), FN_NOSRC("  source: {git: {url: \"%s\"}}\n"), good[i]);
        VALID("Function", doc);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(doc, sizeof(doc), FN_NOSRC("  source: {git: {url: \"%s\"}}\n"), bad[i]);
        INVALID("Function", doc, "spec.source.git.url", "must be a git URL");
    }
    VALID("Function", FN_NOSRC("  source: {git: {url: /r, ref: release/v1.2, path: fns/hello}}\n"));
    INVALID("Function", FN_NOSRC("  source: {git: {ref: main}}\n"), "spec.source.git.url",
            "required");
    INVALID("Function", FN_NOSRC("  source: {git: {url: /r, ref: --upload-pack=x}}\n"),
            "spec.source.git.ref", "not starting with '-'");
    INVALID("Function", FN_NOSRC("  source: {git: {url: /r, ref: \"a b\"}}\n"),
            "spec.source.git.ref", "no spaces");
    INVALID("Function", FN_NOSRC("  source: {git: {url: /r, ref: a..b}}\n"), "spec.source.git.ref",
            "'..'");
    INVALID("Function", FN_NOSRC("  source: {git: {url: /r, ref: \"\"}}\n"), "spec.source.git.ref",
            "branch, tag or commit");
    INVALID("Function", FN_NOSRC("  source: {git: {url: /r, path: /abs}}\n"),
            "spec.source.git.path", "relative path without '..'");
    INVALID("Function", FN_NOSRC("  source: {git: {url: /r, path: a/../../b}}\n"),
            "spec.source.git.path", "relative path");
    INVALID("Function", FN_NOSRC("  source: {git: {url: /r, branch: main}}\n"),
            "spec.source.git.branch", "unknown field");
    INVALID("Function", FN_NOSRC("  source: {git: https://x/y}\n"), "spec.source.git",
            "must be an object");
}

TEST(function_pull_secrets)
{
    VALID("Function", FN("  imagePullSecrets: [regcred, other-1]\n"));
    INVALID("Function", FN("  imagePullSecrets: [regcred, Bad_Name]\n"),
            "spec.imagePullSecrets[1]", "DNS-1123");
    INVALID("Function", FN("  imagePullSecrets: [{name: regcred}]\n"), "spec.imagePullSecrets[0]",
            "must be a string");
    INVALID("Function", FN("  imagePullSecrets: regcred\n"), "spec.imagePullSecrets",
            "array of strings");
}

TEST(function_env)
{
    VALID("Function", FN("  env: {A: x, _b9: \"\", funcd_lower: ok, LOG_LEVEL: debug}\n"));
    INVALID("Function", FN("  env: {bad-key: x}\n"), "spec.env[bad-key]",
            "must be an environment variable name");
    INVALID("Function", FN("  env: {9A: x}\n"), "spec.env[9A]", "not starting with a digit");
    INVALID("Function", FN("  env: {\"\": x}\n"), "spec.env[]", "environment variable name");
    INVALID("Function", FN("  env: {FUNCD_LISTEN: x}\n"), "spec.env[FUNCD_LISTEN]", "reserved");
    INVALID("Function", FN("  env: {PORT: 8080}\n"), "spec.env[PORT]", "must be a string");
    INVALID("Function", FN("  env: {PORT: null}\n"), "spec.env[PORT]", "must be a string");
    INVALID("Function", FN("  env: [A=b]\n"), "spec.env", "must be an object");

    static char doc[40 * 1024];
    size_t n = (size_t)snprintf(doc, sizeof(doc), FN("  env: {A: \""));
    memset(doc + n, 'v', 32 * 1024);
    snprintf(doc + n + 32 * 1024, sizeof(doc) - n - 32 * 1024, "\"}\n");
    VALID("Function", doc);
    memset(doc + n, 'v', 32 * 1024 + 1);
    snprintf(doc + n + 32 * 1024 + 1, sizeof(doc) - n - 32 * 1024 - 1, "\"}\n");
    INVALID("Function", doc, "spec.env[A]", "at most 32768 bytes");

    n = (size_t)snprintf(doc, sizeof(doc), FN("  env:\n"));
    for (int i = 0; i < 256; i++)
        n += (size_t)snprintf(doc + n, sizeof(doc) - n, "    V%d: x\n", i);
    VALID("Function", doc);
    snprintf(doc + n, sizeof(doc) - n, "    V256: x\n");
    INVALID("Function", doc, "spec.env", "at most 256 entries");
}

TEST(function_scaling)
{
    VALID("Function", FN("  scaling: {minReplicas: 0, maxReplicas: 10, concurrency: 10, "
                         "queueLength: 100, idleTimeout: 5m}\n"));
    VALID("Function", FN("  scaling: {minReplicas: 1000, maxReplicas: 1000, concurrency: 10000, "
                         "queueLength: 0, idleTimeout: \"0\"}\n"));
    VALID("Function", FN("  scaling: {minReplicas: 2.0}\n"));
    INVALID("Function", FN("  scaling: {minReplicas: -1}\n"), "spec.scaling.minReplicas",
            "must be an integer between 0 and 1000");
    INVALID("Function", FN("  scaling: {minReplicas: 1.5}\n"), "spec.scaling.minReplicas",
            "integer");
    INVALID("Function", FN("  scaling: {minReplicas: \"1\"}\n"), "spec.scaling.minReplicas",
            "integer");
    INVALID("Function", FN("  scaling: {minReplicas: true}\n"), "spec.scaling.minReplicas",
            "integer");
    INVALID("Function", FN("  scaling: {maxReplicas: 0}\n"), "spec.scaling.maxReplicas",
            "between 1 and 1000");
    INVALID("Function", FN("  scaling: {maxReplicas: 1001}\n"), "spec.scaling.maxReplicas",
            "between 1 and 1000");
    INVALID("Function", FN("  scaling: {maxReplicas: 1e300}\n"), "spec.scaling.maxReplicas",
            "between 1 and 1000");
    INVALID("Function", FN("  scaling: {minReplicas: 5, maxReplicas: 4}\n"),
            "spec.scaling.maxReplicas", "greater than or equal to minReplicas");
    INVALID("Function", FN("  scaling: {concurrency: 0}\n"), "spec.scaling.concurrency",
            "between 1 and 10000");
    INVALID("Function", FN("  scaling: {concurrency: 10001}\n"), "spec.scaling.concurrency",
            "between 1 and 10000");
    INVALID("Function", FN("  scaling: {queueLength: 100001}\n"), "spec.scaling.queueLength",
            "between 0 and 100000");
    INVALID("Function", FN("  scaling: {idleTimeout: 5}\n"), "spec.scaling.idleTimeout",
            "must be a duration");
    INVALID("Function", FN("  scaling: {idleTimeout: 5 m}\n"), "spec.scaling.idleTimeout",
            "duration");
    INVALID("Function", FN("  scaling: {min: 1}\n"), "spec.scaling.min", "unknown field");
    VALID("Function", FN("  scaling: {idleTimeout: 8760h}\n"));
    INVALID("Function", FN("  scaling: {idleTimeout: 8760h1ms}\n"), "spec.scaling.idleTimeout",
            "must be at most 8760h");
    INVALID("Function", FN("  scaling: {idleTimeout: 99999999999h}\n"),
            "spec.scaling.idleTimeout", "must be at most 8760h");
    INVALID("Function", FN("  scaling: {idleTimeout: 5124095576030432h}\n"),
            "spec.scaling.idleTimeout", "duration");
}

TEST(function_timeout)
{
    VALID("Function", FN("  timeout: 30s\n"));
    VALID("Function", FN("  timeout: 1h\n"));
    VALID("Function", FN("  timeout: 59m60s\n"));
    VALID("Function", FN("  timeout: 1ms\n"));
    INVALID("Function", FN("  timeout: 0s\n"), "spec.timeout", "must be greater than 0");
    INVALID("Function", FN("  timeout: 1h1ms\n"), "spec.timeout", "must be at most 1h");
    INVALID("Function", FN("  timeout: 30\n"), "spec.timeout", "must be a duration");
    INVALID("Function", FN("  timeout: -1s\n"), "spec.timeout", "must be a duration");
    INVALID("Function", FN("  timeout: 99999999999h\n"), "spec.timeout", "must be at most 1h");
}

TEST(function_resources)
{
    VALID("Function", FN("  resources: {memory: 256Mi, pids: 128, cpu: \"1\"}\n"));
    VALID("Function", FN("  resources: {memory: 1G, pids: 1000000, cpu: 500m}\n"));
    VALID("Function", FN("  resources: {memory: 1073741824, cpu: 0.5}\n"));
    VALID("Function", FN("  resources: {cpu: 2}\n"));
    INVALID("Function", FN("  resources: {memory: 256MB}\n"), "spec.resources.memory",
            "quantity of bytes");
    INVALID("Function", FN("  resources: {memory: \"0\"}\n"), "spec.resources.memory", "positive");
    INVALID("Function", FN("  resources: {memory: -1Gi}\n"), "spec.resources.memory", "positive");
    INVALID("Function", FN("  resources: {memory: 99999999Ei}\n"), "spec.resources.memory",
            "quantity");
    INVALID("Function", FN("  resources: {memory: 1.5}\n"), "spec.resources.memory", "quantity");
    INVALID("Function", FN("  resources: {pids: 0}\n"), "spec.resources.pids",
            "between 1 and 1000000");
    INVALID("Function", FN("  resources: {pids: 1000001}\n"), "spec.resources.pids",
            "between 1 and 1000000");
    INVALID("Function", FN("  resources: {pids: 1.5}\n"), "spec.resources.pids", "integer");
    INVALID("Function", FN("  resources: {cpu: 0}\n"), "spec.resources.cpu", "positive CPU");
    INVALID("Function", FN("  resources: {cpu: -1}\n"), "spec.resources.cpu", "positive CPU");
    INVALID("Function", FN("  resources: {cpu: one}\n"), "spec.resources.cpu", "CPU quantity");
    INVALID("Function", FN("  resources: {cpu: \"\"}\n"), "spec.resources.cpu", "CPU quantity");
    INVALID("Function", FN("  resources: {disk: 1Gi}\n"), "spec.resources.disk", "unknown field");
    /* Nothing that overflows what the runtime keeps (32-bit millicores,
     * the kernel's signed 64-bit bytes), nothing below the smallest CFS
     * quota. */
    VALID("Function", FN("  resources: {cpu: \"10m\", memory: 7Ei}\n"));
    VALID("Function", FN("  resources: {cpu: 1000000}\n"));
    VALID("Function", FN("  resources: {cpu: \"1000000\", memory: 9000000000000000000}\n"));
    INVALID("Function", FN("  resources: {cpu: 4294967297m}\n"), "spec.resources.cpu",
            "at most 1000000");
    INVALID("Function", FN("  resources: {cpu: 1000001}\n"), "spec.resources.cpu",
            "at most 1000000");
    INVALID("Function", FN("  resources: {cpu: \"1000000001m\"}\n"), "spec.resources.cpu",
            "at most 1000000");
    INVALID("Function", FN("  resources: {cpu: 9m}\n"), "spec.resources.cpu", "at least 10m");
    INVALID("Function", FN("  resources: {cpu: 0.009}\n"), "spec.resources.cpu", "at least 10m");
    INVALID("Function", FN("  resources: {memory: 8Ei}\n"), "spec.resources.memory",
            "at most 9223372036854775807");
    INVALID("Function", FN("  resources: {memory: 99999999999999999999Gi}\n"),
            "spec.resources.memory", "quantity");
    INVALID("Function", FN("  resources: {pids: 4294967297}\n"), "spec.resources.pids",
            "between 1 and 1000000");
}

/* ---- FunctionConfig -------------------------------------------------------------------- */

TEST(functionconfig)
{
    VALID("FunctionConfig", FC("  prefixes: [\"\", example.com/fns]\n"
                               "  binaryExecutor: {tags: [v1, v1.2], path: set-namespace}\n"
                               "  podExecutor: {tags: [v1], timeToLive: 30m, "
                               "maxParallelExecutions: 4, preferredMaxQueueLength: 2, "
                               "templateOverrides: {spec: {anything: [goes, {here: 1}]}}}\n"));
    VALID("FunctionConfig", FC("  binaryExecutor: {path: bin/fn}\n"));
    VALID("FunctionConfig", FC("  podExecutor: {}\n"));
    INVALID("FunctionConfig", FC(""), "spec", "must set binaryExecutor, podExecutor or both");
    INVALID("FunctionConfig",
            "apiVersion: funcd.dev/v1\nkind: FunctionConfig\nmetadata: {name: a}\n"
            "spec: {podExecutor: {}}\n",
            "spec.image", "required");
    INVALID("FunctionConfig",
            "apiVersion: funcd.dev/v1\nkind: FunctionConfig\nmetadata: {name: a}\n"
            "spec: {image: \"\", podExecutor: {}}\n",
            "spec.image", "must not be empty");
    INVALID("FunctionConfig", FC("  podExecutor: {}\n  prefixes: [a, 1]\n"), "spec.prefixes[1]",
            "must be a string");
    INVALID("FunctionConfig", FC("  binaryExecutor: {tags: [v1]}\n"), "spec.binaryExecutor.path",
            "required");
    INVALID("FunctionConfig", FC("  binaryExecutor: {path: \"\"}\n"), "spec.binaryExecutor.path",
            "non-empty relative path");
    INVALID("FunctionConfig", FC("  binaryExecutor: {path: /usr/bin/x}\n"),
            "spec.binaryExecutor.path", "relative path");
    INVALID("FunctionConfig", FC("  binaryExecutor: {path: ../x}\n"), "spec.binaryExecutor.path",
            "'..'");
    INVALID("FunctionConfig", FC("  binaryExecutor: {path: x, tags: v1}\n"),
            "spec.binaryExecutor.tags", "array of strings");
    INVALID("FunctionConfig", FC("  binaryExecutor: {path: x, image: y}\n"),
            "spec.binaryExecutor.image", "unknown field");
    INVALID("FunctionConfig", FC("  podExecutor: {timeToLive: forever}\n"),
            "spec.podExecutor.timeToLive", "duration");
    INVALID("FunctionConfig", FC("  podExecutor: {maxParallelExecutions: 0}\n"),
            "spec.podExecutor.maxParallelExecutions", "between 1 and");
    INVALID("FunctionConfig", FC("  podExecutor: {preferredMaxQueueLength: -1}\n"),
            "spec.podExecutor.preferredMaxQueueLength", "between 0 and");
    VALID("FunctionConfig", FC("  podExecutor: {timeToLive: 8760h}\n"));
    INVALID("FunctionConfig", FC("  podExecutor: {timeToLive: 99999999999h}\n"),
            "spec.podExecutor.timeToLive", "must be at most 8760h");
    INVALID("FunctionConfig", FC("  podExecutor: {maxParallelExecutions: 4294967297}\n"),
            "spec.podExecutor.maxParallelExecutions", "between 1 and");
    INVALID("FunctionConfig", FC("  podExecutor: {templateOverrides: []}\n"),
            "spec.podExecutor.templateOverrides", "must be an object");
    INVALID("FunctionConfig", FC("  podExecutor: {tags: [1]}\n"), "spec.podExecutor.tags[0]",
            "must be a string");
    /* The function container's limits are honoured by the runner: quantities only. */
    VALID("FunctionConfig", FC("  podExecutor: {templateOverrides: {spec: {containers: ["
                               "{name: sidecar, resources: {limits: {memory: lots}}}, "
                               "{name: function, resources: {limits: {memory: 64Mi, cpu: 500m, "
                               "nvidia.com/gpu: 1}}}]}}}\n"));
    INVALID("FunctionConfig",
            FC("  podExecutor: {templateOverrides: {spec: {containers: [{name: sidecar}, "
               "{name: function, resources: {limits: {memory: lots}}}]}}}\n"),
            "spec.podExecutor.templateOverrides.spec.containers[1].resources.limits.memory",
            "quantity of bytes");
    INVALID("FunctionConfig",
            FC("  podExecutor: {templateOverrides: {spec: {containers: [{name: function, "
               "resources: {limits: {cpu: \"-1\"}}}]}}}\n"),
            "spec.podExecutor.templateOverrides.spec.containers[0].resources.limits.cpu",
            "CPU quantity");
    INVALID("FunctionConfig", FC("  podExecutor: {}\n  runtime: node\n"), "spec.runtime",
            "unknown field");
}

/* ---- Secret ----------------------------------------------------------------------------- */

/* {"auths":{"r.io":{"auth":"dTpw"}}} */
#define DOCKER_B64 "eyJhdXRocyI6eyJyLmlvIjp7ImF1dGgiOiJkVHB3In19fQ=="

TEST(secret_opaque)
{
    VALID("Secret", SECRET(""));
    VALID("Secret", SECRET("type: Opaque\ndata: {user: YWRtaW4=, empty: \"\", x.y_z-1: QQ==}\n"
                           "stringData: {password: \"s3cret: yes\"}\n"));
    INVALID("Secret", SECRET("type: Other\n"), "type",
            "must be one of: Opaque, kubernetes.io/dockerconfigjson");
    INVALID("Secret", SECRET("data: {user: \"not base64!\"}\n"), "data[user]",
            "must be base64-encoded");
    INVALID("Secret", SECRET("data: {user: YWRtaW4}\n"), "data[user]", "base64");
    INVALID("Secret", SECRET("data: {user: \"YW=taW4=\"}\n"), "data[user]", "base64");
    INVALID("Secret", SECRET("data: {user: 3}\n"), "data[user]", "must be a string");
    INVALID("Secret", SECRET("data: {\"a/b\": QQ==}\n"), "data[a/b]", "must be a key");
    INVALID("Secret", SECRET("data: {\"..\": QQ==}\n"), "data[..]", "other than");
    INVALID("Secret", SECRET("data: [QQ==]\n"), "data", "must be an object");
    INVALID("Secret", SECRET("stringData: {\"a b\": x}\n"), "stringData[a b]", "must be a key");
    INVALID("Secret", SECRET("stringData: {a: [x]}\n"), "stringData[a]", "must be a string");
    INVALID("Secret", SECRET("spec: {}\n"), "spec", "unknown field");
    INVALID("Secret", SECRET("immutable: true\n"), "immutable", "unknown field");
}

TEST(secret_dockerconfigjson)
{
    VALID("Secret", SECRET("type: kubernetes.io/dockerconfigjson\n"
                           "data: {.dockerconfigjson: " DOCKER_B64 "}\n"));
    VALID("Secret", SECRET("type: kubernetes.io/dockerconfigjson\n"
                           "stringData: {.dockerconfigjson: '{\"auths\": {}}'}\n"));
    INVALID("Secret", SECRET("type: kubernetes.io/dockerconfigjson\n"), "data",
            "must contain \".dockerconfigjson\"");
    INVALID("Secret", SECRET("type: kubernetes.io/dockerconfigjson\ndata: {x: QQ==}\n"), "data",
            ".dockerconfigjson");
    INVALID("Secret",
            SECRET("type: kubernetes.io/dockerconfigjson\ndata: {.dockerconfigjson: e30=}\n"),
            "data[.dockerconfigjson]", "must be Docker config JSON");
    INVALID("Secret",
            SECRET("type: kubernetes.io/dockerconfigjson\ndata: {.dockerconfigjson: QQ==}\n"),
            "data[.dockerconfigjson]", "Docker config JSON");
    INVALID("Secret",
            SECRET("type: kubernetes.io/dockerconfigjson\n"
                   "stringData: {.dockerconfigjson: '{\"auths\": 1}'}\n"),
            "stringData[.dockerconfigjson]", "Docker config JSON");
}

TEST(secret_total_size)
{
    /* Two values of 600 KiB each in stringData: each fine, together too big. */
    static char doc[1300 * 1024];
    size_t n = (size_t)snprintf(doc, sizeof(doc), SECRET("stringData:\n  a: \""));
    memset(doc + n, 'a', 600 * 1024);
    n += 600 * 1024;
    n += (size_t)snprintf(doc + n, sizeof(doc) - n, "\"\n");
    VALID("Secret", doc);

    cJSON *obj = api_decode_text(doc);
    CHECK(obj);
    cJSON *sd = cJSON_GetObjectItem(obj, "stringData");
    cJSON_AddItemToObject(sd, "b", cJSON_CreateString(cJSON_GetObjectItem(sd, "a")->valuestring));
    funcd_api_error err;
    int rc = funcd_api_validate(funcd_kind_by_kind("Secret"), obj, &err);
    cJSON_Delete(obj);
    CHECK_INT(rc, FUNCD_EINVAL);
    CHECK_STR(err.field, "data");
    CHECK_CONTAINS(err.message, "at most 1048576 bytes");
}

int main(void)
{
    RUN(top_level);
    RUN(null_means_absent);
    RUN(metadata_name);
    RUN(metadata_server_fields_and_unknown);
    RUN(metadata_labels);
    RUN(metadata_label_key_length);
    RUN(metadata_annotations);
    RUN(function_runtime_handler_mode);
    RUN(function_handler_length);
    RUN(function_args);
    RUN(function_source_one_of);
    RUN(function_source_path);
    RUN(function_handler_stays_inside);
    RUN(function_source_bundle);
    RUN(function_source_image);
    RUN(function_source_git);
    RUN(function_pull_secrets);
    RUN(function_env);
    RUN(function_scaling);
    RUN(function_timeout);
    RUN(function_resources);
    RUN(functionconfig);
    RUN(secret_opaque);
    RUN(secret_dockerconfigjson);
    RUN(secret_total_size);
    return HARNESS_END();
}
