/* Validation of Sites (docs/sites.md): static files served by the gateway
 * from a source materialized like a Function's. */
#include <string.h>

#include "api/internal.h"

#define SITE_MAX_HOSTS 16
#define SITE_MAX_CACHE_STRING 256
#define SITE_MAX_AGE 31536000 /* a year, as far as caches are told to keep */

static const funcd__api_range max_age = {0, SITE_MAX_AGE};

static int check_bool(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (!cJSON_IsBool(item))
        return funcd__api_fail(c, "must be true or false");
    return 0;
}

static int check_hosts(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    static const size_t max = SITE_MAX_HOSTS;
    int rc = funcd__api_check_string_array(c, item, &max);
    if (rc < 0)
        return rc;
    size_t i = 0;
    for (const cJSON *e = item->child; e; e = e->next, i++) {
        const char *h = e->valuestring;
        int lower = 1;
        for (const char *p = h; *p; p++)
            lower &= !(*p >= 'A' && *p <= 'Z');
        if (!funcd__api_is_dns_subdomain(h, strlen(h)) || !lower) {
            funcd__api_push_index(c, i);
            return funcd__api_fail(c, "must be a lowercase DNS name (\"www.example.com\"), "
                                      "without a port");
        }
        /* A name of the machine itself (an address, localhost, a single
         * label) is how every tenant reaches the platform: no Site takes it. */
        const char *last = strrchr(h, '.');
        int numeric = last && last[1] >= '0' && last[1] <= '9';
        if (!last || numeric || strcmp(h, "localhost") == 0 ||
            (strlen(h) > 10 && strcmp(h + strlen(h) - 10, ".localhost") == 0)) {
            funcd__api_push_index(c, i);
            return funcd__api_fail(c, "must be a DNS name with a domain (\"www.example.com\"): "
                                      "%s names the machine itself (an address, localhost or a "
                                      "single label), which serves every namespace", h);
        }
        for (const cJSON *d = item->child; d != e; d = d->next)
            if (strcmp(d->valuestring, h) == 0) {
                funcd__api_push_index(c, i);
                return funcd__api_fail(c, "names host %s twice", h);
            }
    }
    return 0;
}

static const funcd__api_field cache_fields[] = {
    {"maxAge", 0, funcd__api_check_int, &max_age},
    {"immutable", 0, check_bool, NULL},
    {"noCache", 0, check_bool, NULL},
    {"private", 0, check_bool, NULL},
};

/* Either a Cache-Control value sent as it is, or the object form. */
static int check_cache(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (cJSON_IsString(item)) {
        const char *s = item->valuestring;
        size_t n = strlen(s);
        if (n == 0 || n > SITE_MAX_CACHE_STRING)
            return funcd__api_fail(c, "must be a Cache-Control value of 1 to %d characters",
                                   SITE_MAX_CACHE_STRING);
        for (const char *p = s; *p; p++)
            if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
                return funcd__api_fail(c, "must be printable ASCII (a Cache-Control value)");
        return 0;
    }
    if (!cJSON_IsObject(item))
        return funcd__api_fail(c, "must be a Cache-Control string or an object {maxAge, "
                                  "immutable, noCache, private}");
    return FUNCD__API_CHECK_OBJECT(c, item, cache_fields);
}

/* A file of the site: a relative path without "..", and no control byte
 * (it is named in the Ready condition and in log lines). */
static int check_file(funcd__api_ctx *c, const cJSON *item, const void *unused)
{
    if (funcd__api_check_relpath(c, item, NULL) < 0)
        return -1;
    for (const char *p = item->valuestring; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return funcd__api_fail(c, "must have no control characters");
    return 0;
}

static const funcd__api_field site_fields[] = {
    {"source", 1, funcd__api_check_source, NULL},
    {"index", 0, check_file, NULL},
    {"notFound", 0, check_file, NULL},
    {"spa", 0, check_bool, NULL},
    {"hosts", 0, check_hosts, NULL},
    {"cache", 0, check_cache, NULL},
};

int funcd__api_validate_site_spec(funcd__api_ctx *c, const cJSON *spec, const void *unused)
{
    return FUNCD__API_CHECK_OBJECT(c, spec, site_fields);
}
