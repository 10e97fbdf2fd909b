/* Validation of a Function's spec.edge (docs/edge.md). */
#include <string.h>
#include <strings.h>

#include "api/internal.h"

#define MAX_LIST 64          /* origins, methods, headers, removed headers */
#define MAX_SET_HEADERS 64
#define MAX_HEADER_NAME 128
#define MAX_HEADER_VALUE 4096
#define MAX_ORIGIN 512
/* The embedded gateway buffers request bodies up to 64 MiB: a larger cap
 * could never be reached (lib/gateway/edge.h). */
#define MAX_BODY_BYTES (64ull * 1024 * 1024)

static const char *const auths[] = {"open", "authenticated", NULL};

/* ---- limits --------------------------------------------------------------- */

static const funcd__api_range rps_range = {0, 1000000}, burst_range = {0, 10000000},
                              in_flight_range = {0, 1000000};

static int check_body_bytes(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    uint64_t bytes = 0;
    int ok = 0;
    if (cJSON_IsString(item))
        ok = funcd_parse_quantity(item->valuestring, &bytes) == 0;
    else if (cJSON_IsNumber(item) && item->valuedouble >= 0 &&
             funcd__api_is_integral(item->valuedouble)) {
        ok = 1;
        bytes = item->valuedouble > 1.0e18 ? UINT64_MAX : (uint64_t)item->valuedouble;
    }
    if (!ok)
        return funcd__api_fail(c, "must be a quantity of bytes such as \"1Mi\", \"512k\" or "
                                  "1048576 (0: no limit of the function's own)");
    if (bytes > MAX_BODY_BYTES)
        return funcd__api_fail(c, "must be at most 64Mi: the gateway buffers request bodies up "
                                  "to that size");
    return 0;
}

static const funcd__api_field limits_fields[] = {
    {"rps", 0, funcd__api_check_int, &rps_range},
    {"burst", 0, funcd__api_check_int, &burst_range},
    {"maxBodyBytes", 0, check_body_bytes, NULL},
    {"maxInFlight", 0, funcd__api_check_int, &in_flight_range},
};

static int check_limits(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return FUNCD__API_CHECK_OBJECT(c, item, limits_fields);
}

/* ---- header names and values ------------------------------------------- */

/* An RFC 9110 token (header names, methods). */
static int is_token(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return 0;
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              strchr("!#$%&'*+-.^_`|~", ch)))
            return 0;
    }
    return 1;
}

/* Visible ASCII, space and tab: nothing that could end the header early. */
static int is_header_value(const char *s)
{
    if (strlen(s) > MAX_HEADER_VALUE)
        return 0;
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
            return 0;
    }
    return 1;
}

/* Headers that frame the message or the connection, and Content-Encoding
 * (the gateway's gzip decides it): the gateway owns them. */
static int is_framing_header(const char *name)
{
    static const char *const own[] = {"content-length", "transfer-encoding", "connection",
                                      "keep-alive", "upgrade", "te", "trailer",
                                      "proxy-connection", "x-funcd-invocation-id",
                                      "content-encoding", NULL};
    for (const char *const *o = own; *o; o++)
        if (strcasecmp(name, *o) == 0)
            return 1;
    return 0;
}

static int check_header_name(funcd__api_ctx *c, const char *name)
{
    if (!is_token(name, MAX_HEADER_NAME))
        return funcd__api_fail(c, "must be a header name: letters, digits and !#$%%&'*+-.^_`|~, "
                                  "at most %d characters", MAX_HEADER_NAME);
    if (is_framing_header(name))
        return funcd__api_fail(c, "is set by the gateway itself (it frames or encodes the "
                                  "message, or the connection) and cannot be changed here");
    return 0;
}

typedef int (*string_check)(funcd__api_ctx *c, const char *s);

/* An array of at most MAX_LIST strings, each passing `each`. */
static int check_list(funcd__api_ctx *c, const cJSON *item, string_check each)
{
    static const size_t max = MAX_LIST;
    int rc = funcd__api_check_string_array(c, item, &max);
    if (rc < 0)
        return rc;
    size_t i = 0;
    for (const cJSON *e = item->child; e; e = e->next, i++) {
        size_t old = funcd__api_push_index(c, i);
        if ((rc = each(c, e->valuestring)) < 0)
            return rc;
        funcd__api_pop(c, old);
    }
    return 0;
}

static int check_set(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (!cJSON_IsObject(item))
        return funcd__api_fail(c, "must be an object of header names to values");
    if (cJSON_GetArraySize(item) > MAX_SET_HEADERS)
        return funcd__api_fail(c, "must have at most %d entries", MAX_SET_HEADERS);
    for (const cJSON *m = item->child; m; m = m->next) {
        size_t old = funcd__api_push_key(c, m->string);
        int rc = check_header_name(c, m->string);
        if (rc < 0)
            return rc;
        if (!cJSON_IsString(m) || !is_header_value(m->valuestring))
            return funcd__api_fail(c, "must be a string of at most %d bytes without control "
                                      "characters", MAX_HEADER_VALUE);
        funcd__api_pop(c, old);
    }
    return 0;
}

static int check_remove(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return check_list(c, item, check_header_name);
}

static const funcd__api_field headers_fields[] = {
    {"set", 0, check_set, NULL},
    {"remove", 0, check_remove, NULL},
};

static int check_headers(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return FUNCD__API_CHECK_OBJECT(c, item, headers_fields);
}

/* ---- cors ---------------------------------------------------------------- */

/* "*", or scheme://host[:port] with nothing after it (what browsers send
 * in Origin). */
static int check_origin(funcd__api_ctx *c, const char *s)
{
    if (strcmp(s, "*") == 0)
        return 0;
    const char *host = strncmp(s, "https://", 8) == 0  ? s + 8
                       : strncmp(s, "http://", 7) == 0 ? s + 7
                                                       : NULL;
    int ok = host && *host && strlen(s) <= MAX_ORIGIN;
    for (const char *p = host; ok && *p; p++)
        ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
             *p == '.' || *p == '-' || *p == ':' || *p == '[' || *p == ']';
    if (!ok)
        return funcd__api_fail(c, "must be \"*\" or an origin such as \"https://app.example\" "
                                  "or \"http://localhost:3000\" (scheme, host, optional port; "
                                  "no path)");
    return 0;
}

static int check_method(funcd__api_ctx *c, const char *s)
{
    if (strcmp(s, "*") != 0 && !is_token(s, 32))
        return funcd__api_fail(c, "must be an HTTP method such as GET or POST, or \"*\"");
    return 0;
}

static int check_allowed_header(funcd__api_ctx *c, const char *s)
{
    if (strcmp(s, "*") != 0 && !is_token(s, MAX_HEADER_NAME))
        return funcd__api_fail(c, "must be a header name such as content-type, or \"*\"");
    return 0;
}

static int check_origins(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return check_list(c, item, check_origin);
}

static int check_methods(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return check_list(c, item, check_method);
}

static int check_allowed_headers(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return check_list(c, item, check_allowed_header);
}

static const funcd__api_range max_age_range = {0, 86400};

static const funcd__api_field cors_fields[] = {
    {"allowOrigins", 0, check_origins, NULL},
    {"allowMethods", 0, check_methods, NULL},
    {"allowHeaders", 0, check_allowed_headers, NULL},
    {"maxAge", 0, funcd__api_check_int, &max_age_range},
};

static int check_cors(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return FUNCD__API_CHECK_OBJECT(c, item, cors_fields);
}

/* ---- edge ---------------------------------------------------------------- */

static int check_bool(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (!cJSON_IsBool(item))
        return funcd__api_fail(c, "must be true or false");
    return 0;
}

static const funcd__api_field edge_fields[] = {
    {"auth", 0, funcd__api_check_enum, auths},
    {"limits", 0, check_limits, NULL},
    {"cors", 0, check_cors, NULL},
    {"headers", 0, check_headers, NULL},
    {"compress", 0, check_bool, NULL},
};

int funcd__api_check_edge(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    return FUNCD__API_CHECK_OBJECT(c, item, edge_fields);
}
