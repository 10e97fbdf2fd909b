/* Cron schedules (cron.h). */
#include "eventing/cron.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "funcd/common.h"

#define MINUTE_MS 60000LL
#define TEN_YEARS_MS (3653LL * 24 * 3600 * 1000)

static const char *const month_names[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                          "jul", "aug", "sep", "oct", "nov", "dec"};
static const char *const day_names[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

typedef struct field_def {
    const char *what;
    int min, max;
    const char *const *names; /* names[i] is min + i */
    int n_names;
} field_def;

static const field_def fields[5] = {
    {"minute", 0, 59, NULL, 0},
    {"hour", 0, 23, NULL, 0},
    {"day of month", 1, 31, NULL, 0},
    {"month", 1, 12, month_names, 12},
    {"day of week", 0, 7, day_names, 7}, /* 7 is Sunday too */
};

/* A number or a name of the field; the end of it in *end. */
static int parse_value(const field_def *f, const char *s, const char **end, int *out)
{
    if (*s >= '0' && *s <= '9') {
        long v = 0;
        while (*s >= '0' && *s <= '9' && v <= 1000)
            v = v * 10 + (*s++ - '0');
        *end = s;
        *out = (int)v;
        return v >= f->min && v <= f->max ? 0 : -1;
    }
    for (int i = 0; i < f->n_names; i++)
        if (strncasecmp(s, f->names[i], 3) == 0) {
            *end = s + 3;
            *out = f->min + i;
            return 0;
        }
    return -1;
}

/* One field: items separated by commas, each '*', a value or a range,
 * optionally "/step". Bits set in *bits. */
static int parse_field(const field_def *f, const char *s, size_t len, uint64_t *bits, int *any,
                       char *err, size_t err_len)
{
    char text[64];
    if (len == 0 || len >= sizeof(text)) {
        snprintf(err, err_len, "the %s field is empty or too long", f->what);
        return -1;
    }
    memcpy(text, s, len);
    text[len] = '\0';
    *bits = 0;
    *any = strcmp(text, "*") == 0 || strncmp(text, "*/", 2) == 0;
    for (char *item = text, *next; item; item = next) {
        next = strchr(item, ',');
        if (next)
            *next++ = '\0';
        int lo, hi, step = 1;
        const char *p = item;
        if (*p == '*') {
            lo = f->min;
            hi = f->max;
            p++;
        } else {
            if (parse_value(f, p, &p, &lo) < 0)
                goto bad;
            hi = lo;
            if (*p == '-') {
                if (parse_value(f, p + 1, &p, &hi) < 0 || hi < lo)
                    goto bad;
            } else if (*p == '/') {
                hi = f->max; /* "a/n": from a to the end */
            }
        }
        if (*p == '/') {
            char *e;
            long v = strtol(p + 1, &e, 10);
            if (e == p + 1 || v < 1 || v > f->max + 1)
                goto bad;
            step = (int)v;
            p = e;
        }
        if (*p)
            goto bad;
        for (int v = lo; v <= hi; v += step)
            *bits |= 1ULL << (f->max == 7 && v == 7 ? 0 : v);
        continue;
    bad:
        snprintf(err, err_len, "the %s field \"%s\" is not a value, range or step from %d to %d",
                 f->what, item, f->min, f->max);
        return -1;
    }
    return 0;
}

static const struct {
    const char *name, *fields;
} macros[] = {
    {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
    {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
    {"@hourly", "0 * * * *"},
};

int funcd_cron_parse(const char *text, funcd_cron *out, char *err, size_t err_len)
{
    memset(out, 0, sizeof(*out));
    if (!text)
        text = "";
    while (*text == ' ')
        text++;
    if (strncmp(text, "@every", 6) == 0 && (text[6] == ' ' || text[6] == '\0')) {
        const char *d = text + 6;
        while (*d == ' ')
            d++;
        uint64_t ms;
        if (funcd_parse_duration_ms(d, &ms) < 0 || ms < FUNCD_CRON_MIN_EVERY_MS ||
            ms > (uint64_t)FUNCD_CRON_MAX_EVERY_MS) {
            snprintf(err, err_len, "\"@every\" takes a duration from 1s to 366 days, such as "
                     "\"@every 10s\" or \"@every 1h30m\"");
            return -1;
        }
        out->every_ms = ms;
        return 0;
    }
    for (size_t i = 0; i < sizeof(macros) / sizeof(macros[0]); i++)
        if (strcmp(text, macros[i].name) == 0)
            text = macros[i].fields;
    if (*text == '@') {
        snprintf(err, err_len, "unknown schedule \"%.40s\": use five fields, \"@every "
                 "<duration>\", @hourly, @daily, @weekly, @monthly or @yearly", text);
        return -1;
    }
    uint64_t bits[5];
    int any[5];
    const char *p = text;
    for (int i = 0; i < 5; i++) {
        while (*p == ' ' || *p == '\t')
            p++;
        size_t n = strcspn(p, " \t");
        if (n == 0) {
            snprintf(err, err_len, "a schedule has five fields (minute hour day-of-month month "
                     "day-of-week), such as \"*/5 * * * *\"");
            return -1;
        }
        if (parse_field(&fields[i], p, n, &bits[i], &any[i], err, err_len) < 0)
            return -1;
        p += n;
    }
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p) {
        snprintf(err, err_len, "a schedule has five fields (minute hour day-of-month month "
                 "day-of-week); there is more after them");
        return -1;
    }
    out->minutes = bits[0];
    out->hours = (uint32_t)bits[1];
    out->days = (uint32_t)bits[2];
    out->months = (uint16_t)bits[3];
    out->weekdays = (uint8_t)bits[4];
    out->days_any = (uint8_t)any[2];
    out->weekdays_any = (uint8_t)any[4];
    if (funcd_cron_next(out, 0) < 0) {
        snprintf(err, err_len, "the schedule never fires (no such day)");
        return -1;
    }
    return 0;
}

/* cron(8): when both day fields are restricted, either may match. */
static int day_matches(const funcd_cron *c, const struct tm *tm)
{
    int dom = (c->days >> tm->tm_mday) & 1, dow = (c->weekdays >> tm->tm_wday) & 1;
    if (c->days_any || c->weekdays_any)
        return dom && dow;
    return dom || dow;
}

int64_t funcd_cron_next(const funcd_cron *c, int64_t after_ms)
{
    if (after_ms < 0)
        after_ms = 0;
    if (c->every_ms)
        return (after_ms / (int64_t)c->every_ms + 1) * (int64_t)c->every_ms;
    int64_t t = after_ms - after_ms % MINUTE_MS + MINUTE_MS;
    int64_t limit = after_ms + TEN_YEARS_MS;
    while (t <= limit) {
        time_t s = (time_t)(t / 1000);
        struct tm tm;
        if (!gmtime_r(&s, &tm))
            return -1;
        tm.tm_sec = 0;
        if (!((c->months >> (tm.tm_mon + 1)) & 1)) {
            tm.tm_mon++;
            tm.tm_mday = 1;
            tm.tm_hour = tm.tm_min = 0;
        } else if (!day_matches(c, &tm)) {
            tm.tm_mday++;
            tm.tm_hour = tm.tm_min = 0;
        } else if (!((c->hours >> tm.tm_hour) & 1)) {
            tm.tm_hour++;
            tm.tm_min = 0;
        } else if (!((c->minutes >> tm.tm_min) & 1)) {
            tm.tm_min++;
        } else {
            return t;
        }
        t = (int64_t)timegm(&tm) * 1000; /* normalizes the carried field */
    }
    return -1;
}
