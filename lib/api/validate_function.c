/* Validation of Function specs. */
#include <string.h>

#include "api/internal.h"

#define MAX_HANDLER 256
#define MAX_ARGS 64
#define MAX_PULL_SECRETS 64
#define MAX_ENV 256
#define MAX_ENV_VALUE (32 * 1024)
#define MAX_ENV_FROM 16
#define MAX_IMAGE_NAME 255
#define MAX_GIT_REF 256
#define MAX_PATH_LEN 4096
#define MAX_MEMORY_BYTES INT64_MAX
#define MIN_CPU_MILLIS 10
#define MAX_CPU_MILLIS 1000000000 /* one million cores */

static int is_lower_alnum(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
}

static int is_alnum(char ch)
{
    return is_lower_alnum(ch) || (ch >= 'A' && ch <= 'Z');
}

static int is_hex_lower(char ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f');
}

static int is_sha256_digest(const char *s, size_t n)
{
    if (n != 7 + 64 || memcmp(s, "sha256:", 7) != 0)
        return 0;
    for (size_t i = 7; i < n; i++)
        if (!is_hex_lower(s[i]))
            return 0;
    return 1;
}

/* ---- OCI image references ---------------------------------------------------
 * [domain[:port]/]component(/component)*[:tag][@sha256:<hex>], Docker's grammar
 * restricted to sha256 digests. */

static int is_domain_component(const char *s, size_t n)
{
    if (n == 0 || !is_alnum(s[0]) || !is_alnum(s[n - 1]))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!is_alnum(s[i]) && s[i] != '-')
            return 0;
    return 1;
}

static int is_domain(const char *s, size_t n)
{
    const char *colon = memchr(s, ':', n);
    size_t host_len = colon ? (size_t)(colon - s) : n;
    if (colon) {
        size_t port_len = n - host_len - 1;
        unsigned port = 0;
        if (port_len == 0 || port_len > 5)
            return 0;
        for (size_t i = 0; i < port_len; i++) {
            if (colon[1 + i] < '0' || colon[1 + i] > '9')
                return 0;
            port = port * 10 + (unsigned)(colon[1 + i] - '0');
        }
        if (port == 0 || port > 65535)
            return 0;
    }
    for (size_t start = 0; start <= host_len;) {
        const char *dot = memchr(s + start, '.', host_len - start);
        size_t end = dot ? (size_t)(dot - s) : host_len;
        if (!is_domain_component(s + start, end - start))
            return 0;
        start = end + 1;
    }
    return 1;
}

/* Lowercase alphanumeric runs joined by ".", "_", "__" or a run of "-". */
static int is_path_component(const char *s, size_t n)
{
    if (n == 0 || !is_lower_alnum(s[0]) || !is_lower_alnum(s[n - 1]))
        return 0;
    for (size_t i = 0; i < n;) {
        if (is_lower_alnum(s[i])) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && !is_lower_alnum(s[j]))
            j++;
        size_t sep = j - i;
        int dashes = 1;
        for (size_t k = i; k < j; k++)
            dashes &= s[k] == '-';
        if (!(dashes || (sep == 1 && (s[i] == '.' || s[i] == '_')) ||
              (sep == 2 && s[i] == '_' && s[i + 1] == '_')))
            return 0;
        i = j;
    }
    return 1;
}

static int is_tag(const char *s, size_t n)
{
    if (n == 0 || n > 128 || !(is_alnum(s[0]) || s[0] == '_'))
        return 0;
    for (size_t i = 1; i < n; i++)
        if (!is_alnum(s[i]) && s[i] != '_' && s[i] != '.' && s[i] != '-')
            return 0;
    return 1;
}

static int looks_like_domain(const char *s, size_t n)
{
    return memchr(s, '.', n) || memchr(s, ':', n) || (n == 9 && memcmp(s, "localhost", 9) == 0);
}

static int is_image_name(const char *s, size_t n)
{
    if (n == 0 || n > MAX_IMAGE_NAME)
        return 0;
    const char *slash = memchr(s, '/', n);
    size_t start = 0;
    if (slash && looks_like_domain(s, (size_t)(slash - s))) {
        if (!is_domain(s, (size_t)(slash - s)))
            return 0;
        start = (size_t)(slash - s) + 1;
    }
    for (;;) {
        const char *next = memchr(s + start, '/', n - start);
        size_t end = next ? (size_t)(next - s) : n;
        if (!is_path_component(s + start, end - start))
            return 0;
        if (!next)
            return 1;
        start = end + 1;
    }
}

static int is_image_reference(const char *s)
{
    size_t n = strlen(s);
    const char *at = strchr(s, '@');
    if (at) {
        if (!is_sha256_digest(at + 1, strlen(at + 1)))
            return 0;
        n = (size_t)(at - s);
    }
    const char *last_slash = NULL, *last_colon = NULL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '/')
            last_slash = s + i;
        else if (s[i] == ':')
            last_colon = s + i;
    }
    if (last_colon && (!last_slash || last_colon > last_slash)) {
        if (!is_tag(last_colon + 1, (size_t)(s + n - last_colon - 1)))
            return 0;
        n = (size_t)(last_colon - s);
    }
    return is_image_name(s, n);
}

/* ---- git ------------------------------------------------------------------ */

static int has_space_or_control(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || *s == 0x7f)
            return 1;
    return 0;
}

static int has_nonempty_rest(const char *s, const char *prefix)
{
    size_t n = strlen(prefix);
    return strncmp(s, prefix, n) == 0 && s[n] != '\0';
}

/* git@host:path, the scp-like form. */
static int is_scp_like(const char *s)
{
    if (strncmp(s, "git@", 4) != 0)
        return 0;
    const char *host = s + 4, *colon = strchr(host, ':');
    if (!colon || colon == host || colon[1] == '\0')
        return 0;
    for (const char *p = host; p < colon; p++)
        if (*p == '/' || *p == '@')
            return 0;
    return 1;
}

static int is_git_url(const char *s)
{
    if (!*s || has_space_or_control(s))
        return 0;
    return has_nonempty_rest(s, "https://") || has_nonempty_rest(s, "http://") ||
           has_nonempty_rest(s, "ssh://") || has_nonempty_rest(s, "git://") ||
           has_nonempty_rest(s, "file://") || s[0] == '/' || is_scp_like(s);
}

static int check_git_url(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (!cJSON_IsString(item) || !is_git_url(item->valuestring))
        return funcd__api_fail(c, "must be a git URL: https://, http://, ssh://, git://, "
                                  "git@host:path, or (admin only) file:// or an absolute path");
    return 0;
}

/* The ref reaches git's command line: it must not read as an option. */
static int check_git_ref(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    const char *s = cJSON_IsString(item) ? item->valuestring : NULL;
    if (!s || !*s || strlen(s) > MAX_GIT_REF || s[0] == '-' || has_space_or_control(s) ||
        strstr(s, ".."))
        return funcd__api_fail(c, "must be a branch, tag or commit of at most 256 characters: no "
                                  "spaces, control characters or '..', not starting with '-'");
    return 0;
}

static const funcd__api_field git_fields[] = {
    {"url", 1, check_git_url, NULL},
    {"ref", 0, check_git_ref, NULL},
    {"path", 0, funcd__api_check_relpath, NULL},
};

static int check_git(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return FUNCD__API_CHECK_OBJECT(c, item, git_fields);
}

/* ---- source ----------------------------------------------------------------- */

static int check_abs_path(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (!cJSON_IsString(item) || strlen(item->valuestring) > MAX_PATH_LEN ||
        !funcd__api_is_clean_path(item->valuestring, 1))
        return funcd__api_fail(c, "must be an absolute path without '..' components");
    return 0;
}

static int check_bundle(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (!cJSON_IsString(item) || !is_sha256_digest(item->valuestring, strlen(item->valuestring)))
        return funcd__api_fail(c, "must be \"sha256:\" followed by 64 lowercase hex digits");
    return 0;
}

static int check_image(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (!cJSON_IsString(item) || !is_image_reference(item->valuestring))
        return funcd__api_fail(c, "must be an OCI image reference: "
                                  "[registry[:port]/]repository[:tag][@sha256:<64 hex digits>], "
                                  "repository in lowercase");
    return 0;
}

static const funcd__api_field source_fields[] = {
    {"path", 0, check_abs_path, NULL},
    {"bundle", 0, check_bundle, NULL},
    {"image", 0, check_image, NULL},
    {"git", 0, check_git, NULL},
};

int funcd__api_check_source(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    int rc = FUNCD__API_CHECK_OBJECT(c, item, source_fields);
    if (rc < 0)
        return rc;
    int set = 0;
    for (size_t i = 0; i < sizeof(source_fields) / sizeof(source_fields[0]); i++)
        set += funcd__api_member(item, source_fields[i].name) != NULL;
    if (set != 1)
        return funcd__api_fail(c, "must set exactly one of path, bundle, image or git");
    return 0;
}

/* ---- env, pull secrets ------------------------------------------------------ */

int funcd_api_env_name_ok(const char *s)
{
    if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_'))
        return 0;
    for (; *s; s++)
        if (!is_alnum(*s) && *s != '_')
            return 0;
    return 1;
}

static int check_secret_key(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (!cJSON_IsString(item) || !funcd__api_is_secret_key(item->valuestring))
        return funcd__api_fail(c, "must be a key of a Secret: 1 to 253 letters, digits, '-', '_' "
                                  "or '.', other than \".\" and \"..\"");
    return 0;
}

static const funcd__api_field secret_key_ref_fields[] = {
    {"name", 1, funcd__api_check_dns_label, NULL},
    {"key", 1, check_secret_key, NULL},
};

static const funcd__api_field env_source_fields[] = {
    {"secretKeyRef", 1, funcd__api_check_is_object, NULL},
};

/* A value is a string, or {secretKeyRef: {name, key}}: the value of a key of
 * a Secret of the same namespace, read when workers start. */
static int check_env_value(funcd__api_ctx *c, const cJSON *m)
{
    if (cJSON_IsString(m)) {
        if (strlen(m->valuestring) > MAX_ENV_VALUE)
            return funcd__api_fail(c, "must be at most %d bytes", MAX_ENV_VALUE);
        return 0;
    }
    if (!cJSON_IsObject(m))
        return funcd__api_fail(c, "must be a string or {secretKeyRef: {name, key}}");
    int rc = FUNCD__API_CHECK_OBJECT(c, m, env_source_fields);
    if (rc < 0)
        return rc;
    size_t old = funcd__api_push_field(c, "secretKeyRef");
    rc = FUNCD__API_CHECK_OBJECT(c, funcd__api_member(m, "secretKeyRef"), secret_key_ref_fields);
    funcd__api_pop(c, old);
    return rc;
}

static int check_env(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (!cJSON_IsObject(item))
        return funcd__api_fail(c, "must be an object of strings or {secretKeyRef: {name, key}}");
    if (cJSON_GetArraySize(item) > MAX_ENV)
        return funcd__api_fail(c, "must have at most %d entries", MAX_ENV);
    for (const cJSON *m = item->child; m; m = m->next) {
        size_t old = funcd__api_push_key(c, m->string);
        if (!funcd_api_env_name_ok(m->string))
            return funcd__api_fail(c, "must be an environment variable name: letters, digits and "
                                      "'_', not starting with a digit");
        if (strncmp(m->string, "FUNCD_", 6) == 0)
            return funcd__api_fail(c, "names starting with FUNCD_ are reserved for the platform");
        int rc = check_env_value(c, m);
        if (rc < 0)
            return rc;
        funcd__api_pop(c, old);
    }
    return 0;
}

static const funcd__api_field secret_ref_fields[] = {
    {"name", 1, funcd__api_check_dns_label, NULL},
};

static const funcd__api_field env_from_fields[] = {
    {"secretRef", 1, funcd__api_check_is_object, NULL},
};

/* [{secretRef: {name}}]: every key of those Secrets that can name a
 * variable, spec.env winning over them, a later Secret over an earlier one. */
static int check_env_from(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (!cJSON_IsArray(item))
        return funcd__api_fail(c, "must be a list of {secretRef: {name}}");
    if (cJSON_GetArraySize(item) > MAX_ENV_FROM)
        return funcd__api_fail(c, "must have at most %d entries", MAX_ENV_FROM);
    size_t i = 0;
    for (const cJSON *e = item->child; e; e = e->next, i++) {
        size_t old = funcd__api_push_index(c, i);
        int rc = FUNCD__API_CHECK_OBJECT(c, e, env_from_fields);
        if (rc < 0)
            return rc;
        size_t ref = funcd__api_push_field(c, "secretRef");
        if ((rc = FUNCD__API_CHECK_OBJECT(c, funcd__api_member(e, "secretRef"),
                                          secret_ref_fields)) < 0)
            return rc;
        funcd__api_pop(c, ref);
        funcd__api_pop(c, old);
    }
    return 0;
}

static int check_pull_secrets(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    static const size_t max = MAX_PULL_SECRETS;
    int rc = funcd__api_check_string_array(c, item, &max);
    if (rc < 0)
        return rc;
    size_t i = 0;
    for (const cJSON *e = item->child; e; e = e->next, i++) {
        size_t old = funcd__api_push_index(c, i);
        if ((rc = funcd__api_check_dns_label(c, e, NULL)) < 0)
            return rc;
        funcd__api_pop(c, old);
    }
    return 0;
}

/* ---- bindings: what the worker may reach through its local API ---------- */

#define MAX_BINDINGS 64

/* Names of Functions of the same namespace (DNS labels), no repeats. */
static int check_function_names(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    static const size_t max = MAX_BINDINGS;
    int rc = funcd__api_check_string_array(c, item, &max);
    if (rc < 0)
        return rc;
    size_t i = 0;
    for (const cJSON *e = item->child; e; e = e->next, i++) {
        size_t old = funcd__api_push_index(c, i);
        if ((rc = funcd__api_check_dns_label(c, e, NULL)) < 0)
            return rc;
        for (const cJSON *d = item->child; d != e; d = d->next)
            if (strcmp(d->valuestring, e->valuestring) == 0)
                return funcd__api_fail(c, "must not repeat \"%s\"", e->valuestring);
        funcd__api_pop(c, old);
    }
    return 0;
}

/* An S3 bucket name of the gateway (docs/s3.md): 3 to 63 of [a-z0-9.-],
 * starting and ending with a letter or digit. */
static int check_bucket(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    (void)unused;
    if (!cJSON_IsString(item))
        return funcd__api_fail(c, "must be a string");
    const char *s = item->valuestring;
    size_t n = strlen(s);
    int ok = n >= 3 && n <= 63 && s[0] != '.' && s[0] != '-' && s[n - 1] != '.' &&
             s[n - 1] != '-';
    for (const char *p = s; ok && *p; p++)
        ok = (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.';
    if (!ok)
        return funcd__api_fail(c, "must be an S3 bucket name: 3 to 63 of [a-z0-9.-], starting "
                                  "and ending with a letter or digit, not \"%s\"", s);
    return 0;
}

/* A key prefix: "" (the whole bucket) or up to 512 bytes without control
 * characters. */
static int check_key_prefix(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    (void)unused;
    if (!cJSON_IsString(item))
        return funcd__api_fail(c, "must be a string");
    if (strlen(item->valuestring) > 512)
        return funcd__api_fail(c, "must be at most 512 bytes");
    for (const char *p = item->valuestring; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return funcd__api_fail(c, "must not hold control characters");
    return 0;
}

static const char *const blob_access[] = {"read", "readwrite", NULL};

static const funcd__api_field blob_binding_fields[] = {
    {"bucket", 1, check_bucket, NULL},
    {"prefix", 0, check_key_prefix, NULL},
    {"access", 1, funcd__api_check_enum, blob_access},
};

/* [{bucket, prefix, access}]: what the Function may reach through the S3
 * gateway. */
static int check_blob_bindings(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    (void)unused;
    if (!cJSON_IsArray(item))
        return funcd__api_fail(c, "must be a list of {bucket, prefix, access}");
    size_t i = 0;
    for (const cJSON *e = item->child; e; e = e->next, i++) {
        size_t old = funcd__api_push_index(c, i);
        if (i >= MAX_BINDINGS)
            return funcd__api_fail(c, "at most %d entries", MAX_BINDINGS);
        int rc = FUNCD__API_CHECK_OBJECT(c, e, blob_binding_fields);
        if (rc < 0)
            return rc;
        funcd__api_pop(c, old);
    }
    return 0;
}

/* Raised to revoke the Function's S3 key and issue another (docs/s3.md). */
static const funcd__api_range blob_key_version = {0, 1000000000};

static const funcd__api_field bindings_fields[] = {
    {"invoke", 0, check_function_names, NULL},
    {"kv", 0, check_function_names, NULL}, /* KVStore names, same rules */
    {"blob", 0, check_blob_bindings, NULL},
    {"blobKeyVersion", 0, funcd__api_check_int, &blob_key_version},
};

static int check_bindings(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return FUNCD__API_CHECK_OBJECT(c, item, bindings_fields);
}

/* ---- scaling, resources ---------------------------------------------------- */

static const funcd__api_range replicas_min = {0, 1000}, replicas_max = {1, 1000},
                              concurrency = {1, 10000}, queue_length = {0, 100000},
                              pids = {1, 1000000};

static const funcd__api_field scaling_fields[] = {
    {"minReplicas", 0, funcd__api_check_int, &replicas_min},
    {"maxReplicas", 0, funcd__api_check_int, &replicas_max},
    {"concurrency", 0, funcd__api_check_int, &concurrency},
    {"queueLength", 0, funcd__api_check_int, &queue_length},
    {"idleTimeout", 0, funcd__api_check_duration, &funcd__api_max_idle_ms},
};

static int check_scaling(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    int rc = FUNCD__API_CHECK_OBJECT(c, item, scaling_fields);
    if (rc < 0)
        return rc;
    const cJSON *min = funcd__api_member(item, "minReplicas");
    const cJSON *max = funcd__api_member(item, "maxReplicas");
    if (min && max && max->valuedouble < min->valuedouble) {
        funcd__api_push_field(c, "maxReplicas");
        return funcd__api_fail(c, "must be greater than or equal to minReplicas (%.0f)",
                               min->valuedouble);
    }
    return 0;
}

static int check_memory(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    uint64_t bytes = 0;
    int ok = 0;
    if (cJSON_IsString(item))
        ok = funcd_parse_quantity(item->valuestring, &bytes) == 0 && bytes > 0;
    else if (cJSON_IsNumber(item))
        ok = item->valuedouble >= 1 && item->valuedouble <= 9.0e18 &&
             funcd__api_is_integral(item->valuedouble);
    if (!ok)
        return funcd__api_fail(c, "must be a positive quantity of bytes such as \"256Mi\", "
                                  "\"1Gi\" or \"512M\"");
    if (bytes > MAX_MEMORY_BYTES) /* the kernel counts bytes in a signed 64-bit number */
        return funcd__api_fail(c, "must be at most %lld bytes", (long long)MAX_MEMORY_BYTES);
    return 0;
}

static int check_cpu(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    uint64_t millis = 0;
    int ok = 0;
    if (cJSON_IsString(item))
        ok = funcd_parse_cpu_millis(item->valuestring, &millis) == 0 && millis > 0;
    else if (cJSON_IsNumber(item) && item->valuedouble > 0) {
        ok = 1; /* rounded as the runtime rounds it */
        millis = item->valuedouble > 1.0e12 ? UINT64_MAX
                                            : (uint64_t)(item->valuedouble * 1000 + 0.5);
    }
    if (!ok)
        return funcd__api_fail(c, "must be a positive CPU quantity such as \"1\", \"0.5\" or "
                                  "\"500m\"");
    /* The runtime keeps 32-bit millicores; the kernel's CFS quota is at
     * least 1 ms per 100 ms period. */
    if (millis < MIN_CPU_MILLIS || millis > MAX_CPU_MILLIS)
        return funcd__api_fail(c, "must be at least 10m and at most 1000000 (cores)");
    return 0;
}

static const funcd__api_field resources_fields[] = {
    {"memory", 0, check_memory, NULL},
    {"pids", 0, funcd__api_check_int, &pids},
    {"cpu", 0, check_cpu, NULL},
};

static int check_resources(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return FUNCD__API_CHECK_OBJECT(c, item, resources_fields);
}

/* ---- spec ------------------------------------------------------------------------ */

static const char *const runtimes[] = {"native", "python3", "node", NULL};
static const char *const modes[] = {"http", "exec", NULL};
static const char *const networks[] = {"none", "host", "egress", NULL};
static const funcd__api_range handler_len = {0, MAX_HANDLER};
static const size_t max_args = MAX_ARGS;
static const funcd__api_range timeout_ms = {1, 60 * 60 * 1000};

static const funcd__api_field spec_fields[] = {
    {"runtime", 1, funcd__api_check_enum, runtimes},
    {"handler", 0, funcd__api_check_string, &handler_len},
    {"args", 0, funcd__api_check_string_array, &max_args},
    {"mode", 0, funcd__api_check_enum, modes},
    {"source", 1, funcd__api_check_source, NULL},
    {"imagePullSecrets", 0, check_pull_secrets, NULL},
    {"env", 0, check_env, NULL},
    {"envFrom", 0, check_env_from, NULL},
    {"scaling", 0, check_scaling, NULL},
    {"timeout", 0, funcd__api_check_duration, &timeout_ms},
    {"resources", 0, check_resources, NULL},
    {"network", 0, funcd__api_check_enum, networks},
    {"edge", 0, funcd__api_check_edge, NULL},
    {"contract", 0, funcd__api_check_contract, NULL},
    {"bindings", 0, check_bindings, NULL},
};

/* The handler names a file of the artifact (native, exec mode; python3's
 * module, node's file): relative, no ".." component, so that it resolves
 * inside the code directory. An image's handler is a path inside the image,
 * which is the worker's whole root. */
static int check_handler_inside(funcd__api_ctx *c, const cJSON *spec)
{
    const cJSON *source = funcd__api_member(spec, "source");
    const cJSON *handler = funcd__api_member(spec, "handler");
    if (!cJSON_IsString(handler) || !*handler->valuestring || funcd__api_member(source, "image"))
        return 0;
    const char *h = handler->valuestring;
    if (h[0] == '/' || !funcd__api_is_clean_path(h, 0)) {
        funcd__api_push_field(c, "handler");
        return funcd__api_fail(c, "must name a file inside the code directory: a relative path "
                                  "without '..' components");
    }
    return 0;
}

int funcd__api_validate_function_spec(funcd__api_ctx *c, const cJSON *spec, const void *unused)
{
    int rc = FUNCD__API_CHECK_OBJECT(c, spec, spec_fields);
    return rc < 0 ? rc : check_handler_inside(c, spec);
}
