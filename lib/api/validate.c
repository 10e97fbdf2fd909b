/*
 * Validation shared by every kind: field paths, errors, table-driven object
 * checks, the top level and metadata.
 *
 * JSON null counts as "absent" for the fields of a known object (what
 * Kubernetes does), but never inside a map of strings such as env or labels.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "api/internal.h"
#include "funcd/sys/error.h"

#define MAX_LABEL_KEY 253
#define MAX_LABEL_NAME 63
#define MAX_LABEL_VALUE 63
#define MAX_ANNOTATIONS_BYTES (256 * 1024)

/* ---- errors and paths ------------------------------------------------------ */

void funcd__api_error_clear(funcd_api_error *err)
{
    if (err) {
        err->field[0] = '\0';
        err->message[0] = '\0';
    }
}

void funcd__api_ctx_init(funcd__api_ctx *c, funcd_api_error *err)
{
    c->err = err;
    c->path[0] = '\0';
    c->len = 0;
}

static size_t push(funcd__api_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static size_t push(funcd__api_ctx *c, const char *fmt, ...)
{
    size_t old = c->len;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(c->path + c->len, sizeof(c->path) - c->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        c->len += (size_t)n < sizeof(c->path) - c->len ? (size_t)n : sizeof(c->path) - c->len - 1;
    return old;
}

size_t funcd__api_push_field(funcd__api_ctx *c, const char *name)
{
    return push(c, c->len ? ".%s" : "%s", name);
}

size_t funcd__api_push_index(funcd__api_ctx *c, size_t i)
{
    return push(c, "[%zu]", i);
}

size_t funcd__api_push_key(funcd__api_ctx *c, const char *key)
{
    return push(c, "[%s]", key);
}

void funcd__api_pop(funcd__api_ctx *c, size_t old_len)
{
    c->len = old_len;
    c->path[old_len] = '\0';
}

static void record(funcd_api_error *err, const char *field, const char *message)
{
    if (err) {
        snprintf(err->field, sizeof(err->field), "%s", field);
        snprintf(err->message, sizeof(err->message), "%s", message);
    }
    if (*field)
        funcd_error_set(FUNCD_EINVAL, "%s: %s", field, message);
    else
        funcd_error_set(FUNCD_EINVAL, "%s", message);
}

int funcd__api_fail(funcd__api_ctx *c, const char *fmt, ...)
{
    char message[sizeof(((funcd_api_error *)0)->message)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    record(c->err, c->path, message);
    return FUNCD_EINVAL;
}

int funcd__api_doc_error(funcd_api_error *err, const char *fmt, ...)
{
    char message[sizeof(((funcd_api_error *)0)->message)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    record(err, "", message);
    return FUNCD_EINVAL;
}

/* ---- table-driven checks ------------------------------------------------- */

const cJSON *funcd__api_member(const cJSON *obj, const char *name)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsNull(item) ? NULL : item;
}

static const funcd__api_field *find_field(const funcd__api_field *fields, size_t n,
                                          const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(fields[i].name, name) == 0)
            return &fields[i];
    return NULL;
}

int funcd__api_check_object(funcd__api_ctx *c, const cJSON *obj, const funcd__api_field *fields,
                            size_t n)
{
    if (!cJSON_IsObject(obj))
        return funcd__api_fail(c, "must be an object");
    for (const cJSON *m = obj->child; m; m = m->next) {
        if (!m->string || !find_field(fields, n, m->string)) {
            funcd__api_push_field(c, m->string ? m->string : "");
            return funcd__api_fail(c, "unknown field");
        }
    }
    for (size_t i = 0; i < n; i++) {
        const cJSON *item = funcd__api_member(obj, fields[i].name);
        size_t old = funcd__api_push_field(c, fields[i].name);
        int rc = 0;
        if (!item && fields[i].required)
            rc = funcd__api_fail(c, "required");
        else if (item && fields[i].check)
            rc = fields[i].check(c, item, fields[i].arg);
        if (rc < 0)
            return rc;
        funcd__api_pop(c, old);
    }
    return 0;
}

int funcd__api_check_is_object(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return cJSON_IsObject(item) ? 0 : funcd__api_fail(c, "must be an object");
}

int funcd__api_check_string(funcd__api_ctx *c, const cJSON *item, const void *len_range)
{
    const funcd__api_range *r = len_range;
    if (!cJSON_IsString(item))
        return funcd__api_fail(c, "must be a string");
    size_t len = strlen(item->valuestring);
    if (r && (int64_t)len < r->min)
        return r->min == 1 ? funcd__api_fail(c, "must not be empty")
                           : funcd__api_fail(c, "must be at least %lld characters", (long long)r->min);
    if (r && (int64_t)len > r->max)
        return funcd__api_fail(c, "must be at most %lld characters", (long long)r->max);
    return 0;
}

int funcd__api_check_int(funcd__api_ctx *c, const cJSON *item, const void *range)
{
    const funcd__api_range *r = range;
    double d = cJSON_IsNumber(item) ? item->valuedouble : 0.5;
    if (!funcd__api_is_integral(d) || d < (double)r->min || d > (double)r->max)
        return funcd__api_fail(c, "must be an integer between %lld and %lld", (long long)r->min,
                               (long long)r->max);
    return 0;
}

int funcd__api_check_enum(funcd__api_ctx *c, const cJSON *item, const void *null_terminated)
{
    const char *const *values = null_terminated;
    if (cJSON_IsString(item))
        for (size_t i = 0; values[i]; i++)
            if (strcmp(item->valuestring, values[i]) == 0)
                return 0;
    char list[256] = "";
    size_t len = 0;
    for (size_t i = 0; values[i] && len < sizeof(list); i++)
        len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s", i ? ", " : "", values[i]);
    return funcd__api_fail(c, "must be one of: %s", list);
}

static void format_ms(uint64_t ms, char *out, size_t size)
{
    static const struct {
        uint64_t ms;
        const char *unit;
    } units[] = {{3600000, "h"}, {60000, "m"}, {1000, "s"}, {1, "ms"}};
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < 4 && len < size; i++) {
        if (ms >= units[i].ms) {
            len += (size_t)snprintf(out + len, size - len, "%llu%s",
                                    (unsigned long long)(ms / units[i].ms), units[i].unit);
            ms %= units[i].ms;
        }
    }
    if (!out[0])
        snprintf(out, size, "0s");
}

const funcd__api_range funcd__api_max_idle_ms = {0, 8760LL * 3600 * 1000};

int funcd__api_check_duration(funcd__api_ctx *c, const cJSON *item, const void *ms_range)
{
    const funcd__api_range *r = ms_range;
    uint64_t ms;
    if (!cJSON_IsString(item) || funcd_parse_duration_ms(item->valuestring, &ms) < 0)
        return funcd__api_fail(c, "must be a duration such as \"500ms\", \"30s\", \"5m\" or "
                                  "\"1h30m\"");
    if (r && ms < (uint64_t)r->min)
        return r->min == 1 ? funcd__api_fail(c, "must be greater than 0")
                           : funcd__api_fail(c, "must be at least %lldms", (long long)r->min);
    if (r && ms > (uint64_t)r->max) {
        char max[64];
        format_ms((uint64_t)r->max, max, sizeof(max));
        return funcd__api_fail(c, "must be at most %s", max);
    }
    return 0;
}

static int is_alnum_lower(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
}

static int is_dns_label_n(const char *s, size_t len)
{
    if (len == 0 || len > FUNCD_API_MAX_NAME || !is_alnum_lower(s[0]) ||
        !is_alnum_lower(s[len - 1]))
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!is_alnum_lower(s[i]) && s[i] != '-')
            return 0;
    return 1;
}

int funcd__api_is_dns_label(const char *s)
{
    return s && is_dns_label_n(s, strlen(s));
}

int funcd__api_is_dns_subdomain(const char *s, size_t len)
{
    if (len == 0 || len > 253)
        return 0;
    for (size_t start = 0; start <= len;) {
        const char *dot = memchr(s + start, '.', len - start);
        size_t end = dot ? (size_t)(dot - s) : len;
        if (!is_dns_label_n(s + start, end - start))
            return 0;
        start = end + 1;
    }
    return 1;
}

int funcd__api_check_dns_label(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (!cJSON_IsString(item) || !funcd__api_is_dns_label(item->valuestring))
        return funcd__api_fail(c, "must be a DNS-1123 label: lowercase letters, digits and '-', "
                                  "starting and ending with a letter or digit, at most 63 "
                                  "characters");
    return 0;
}

int funcd__api_is_clean_path(const char *s, int absolute)
{
    if (!*s || (*s == '/') != absolute)
        return 0;
    for (const char *p = s; *p;) {
        while (*p == '/')
            p++;
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return 0;
        p += n;
    }
    return 1;
}

int funcd__api_check_relpath(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (!cJSON_IsString(item) || !funcd__api_is_clean_path(item->valuestring, 0))
        return funcd__api_fail(c, "must be a non-empty relative path without '..' components");
    return 0;
}

int funcd__api_check_string_array(funcd__api_ctx *c, const cJSON *item, const void *max_items)
{
    size_t max = *(const size_t *)max_items;
    if (!cJSON_IsArray(item))
        return funcd__api_fail(c, "must be an array of strings");
    if ((size_t)cJSON_GetArraySize(item) > max)
        return funcd__api_fail(c, "must have at most %zu items", max);
    size_t i = 0;
    for (const cJSON *e = item->child; e; e = e->next, i++) {
        if (!cJSON_IsString(e)) {
            funcd__api_push_index(c, i);
            return funcd__api_fail(c, "must be a string");
        }
    }
    return 0;
}

/* ---- metadata ------------------------------------------------------------ */

static int is_label_name(const char *s, size_t len)
{
    if (len == 0 || len > MAX_LABEL_NAME)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_' || ch == '.'))
            return 0;
    }
    return 1;
}

static int is_label_key(const char *key)
{
    size_t len = strlen(key);
    if (len == 0 || len > MAX_LABEL_KEY)
        return 0;
    const char *slash = strchr(key, '/');
    if (!slash)
        return is_label_name(key, len);
    return funcd__api_is_dns_subdomain(key, (size_t)(slash - key)) &&
           is_label_name(slash + 1, strlen(slash + 1));
}

/* A map of label-style keys to strings; returns the total bytes in *size. */
static int check_key_value_map(funcd__api_ctx *c, const cJSON *item, size_t max_value,
                               size_t *size)
{
    if (!cJSON_IsObject(item))
        return funcd__api_fail(c, "must be an object of strings");
    *size = 0;
    for (const cJSON *m = item->child; m; m = m->next) {
        size_t old = funcd__api_push_key(c, m->string);
        if (!is_label_key(m->string))
            return funcd__api_fail(c, "must be a key of at most 253 characters: an optional DNS "
                                      "subdomain prefix and '/', then a name of 1 to 63 letters, "
                                      "digits, '-', '_' or '.'");
        if (!cJSON_IsString(m))
            return funcd__api_fail(c, "must be a string");
        size_t vlen = strlen(m->valuestring);
        if (vlen > max_value)
            return funcd__api_fail(c, "must be at most %zu characters", max_value);
        *size += strlen(m->string) + vlen;
        funcd__api_pop(c, old);
    }
    return 0;
}

static int check_labels(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    size_t size;
    return check_key_value_map(c, item, MAX_LABEL_VALUE, &size);
}

static int check_annotations(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    size_t size;
    int rc = check_key_value_map(c, item, MAX_ANNOTATIONS_BYTES, &size);
    if (rc == 0 && size > MAX_ANNOTATIONS_BYTES)
        return funcd__api_fail(c, "total size of keys and values must be at most %d bytes",
                               MAX_ANNOTATIONS_BYTES);
    return rc;
}

static const funcd__api_field metadata_fields[] = {
    {"name", 1, funcd__api_check_dns_label, NULL},
    {"namespace", 0, funcd__api_check_dns_label, NULL},
    {"labels", 0, check_labels, NULL},
    {"annotations", 0, check_annotations, NULL},
    /* Set by the server; whatever a client sends back is ignored. */
    {"uid", 0, NULL, NULL},
    {"resourceVersion", 0, NULL, NULL},
    {"generation", 0, NULL, NULL},
    {"creationTimestamp", 0, NULL, NULL},
};

static int check_metadata(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return FUNCD__API_CHECK_OBJECT(c, item, metadata_fields);
}

/* ---- the top level ------------------------------------------------------- */

static int check_api_version(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (!cJSON_IsString(item) || strcmp(item->valuestring, FUNCD_API_VERSION) != 0)
        return funcd__api_fail(c, "must be " FUNCD_API_VERSION);
    return 0;
}

static int check_kind(funcd__api_ctx *c, const cJSON *item, const void *kind)
{
    if (!cJSON_IsString(item) || strcmp(item->valuestring, kind) != 0)
        return funcd__api_fail(c, "must be %s", (const char *)kind);
    return 0;
}

static funcd__api_check_fn spec_checker(const funcd_kind *kind)
{
    if (strcmp(kind->kind, "Function") == 0)
        return funcd__api_validate_function_spec;
    if (strcmp(kind->kind, "FunctionConfig") == 0)
        return funcd__api_validate_functionconfig_spec;
    if (strcmp(kind->kind, "Workflow") == 0)
        return funcd__api_validate_workflow_spec;
    if (strcmp(kind->kind, "EventSource") == 0)
        return funcd__api_validate_eventsource_spec;
    if (strcmp(kind->kind, "KVStore") == 0)
        return funcd__api_validate_kvstore_spec;
    if (strcmp(kind->kind, "EgressPolicy") == 0)
        return funcd__api_validate_egresspolicy_spec;
    if (strcmp(kind->kind, "Site") == 0)
        return funcd__api_validate_site_spec;
    return NULL;
}

int funcd_api_validate(const funcd_kind *kind, const cJSON *obj, funcd_api_error *err)
{
    funcd__api_ctx c;
    funcd__api_error_clear(err);
    funcd__api_ctx_init(&c, err);
    if (!kind)
        return funcd__api_doc_error(err, "unknown kind");
    if (kind->has_spec) {
        funcd__api_check_fn spec = spec_checker(kind);
        if (!spec)
            return funcd__api_doc_error(err, "kind %s cannot be validated", kind->kind);
        const funcd__api_field fields[] = {
            {"apiVersion", 1, check_api_version, NULL}, {"kind", 1, check_kind, kind->kind},
            {"metadata", 1, check_metadata, NULL},      {"spec", 1, spec, NULL},
            {"status", 0, funcd__api_check_is_object, NULL},
        };
        return FUNCD__API_CHECK_OBJECT(&c, obj, fields);
    }
    const funcd__api_field fields[] = {
        {"apiVersion", 1, check_api_version, NULL},
        {"kind", 1, check_kind, kind->kind},
        {"metadata", 1, check_metadata, NULL},
        {"type", 0, NULL, NULL}, /* these three: funcd__api_validate_secret */
        {"data", 0, NULL, NULL},
        {"stringData", 0, NULL, NULL},
        {"status", 0, funcd__api_check_is_object, NULL},
    };
    int rc = FUNCD__API_CHECK_OBJECT(&c, obj, fields);
    return rc < 0 ? rc : funcd__api_validate_secret(&c, obj);
}
