/*
 * The record format of persistent logs: one JSON object a line, written by
 * hand for plain lines (the common case, and the hot path) and with cJSON
 * only for a structured line's body and attributes. "time" comes first and
 * "invocationId" second so a reader can filter without parsing the line.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api.h"
#include "funcd/sys/error.h"
#include "logstore/internal.h"

int funcd__logstore_time(char out[32], int64_t ms)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (!gmtime_r(&t, &tm))
        return -1;
    return snprintf(out, 32, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                    tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                    (int)(ms % 1000));
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
 * well-known arithmetic, restated). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static int digits(const char *s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

int funcd__logstore_parse_time(const char *s, size_t len, int64_t *out)
{
    int y, mo, d, h, mi, se, ms;
    if (len < 24 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' ||
        s[16] != ':' || s[19] != '.' || s[23] != 'Z' || digits(s, 4, &y) ||
        digits(s + 5, 2, &mo) || digits(s + 8, 2, &d) || digits(s + 11, 2, &h) ||
        digits(s + 14, 2, &mi) || digits(s + 17, 2, &se) || digits(s + 20, 3, &ms) || mo < 1 ||
        mo > 12 || d < 1 || d > 31)
        return -1;
    *out = ((days_from_civil(y, (unsigned)mo, (unsigned)d) * 24 + h) * 60 + mi) * 60000LL +
           se * 1000LL + ms;
    return 0;
}

int funcd__logstore_hour_label(char out[16], int64_t ms)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (!gmtime_r(&t, &tm))
        return -1;
    return snprintf(out, 16, "%04d%02d%02d%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                    tm.tm_hour);
}

int funcd__logstore_hour_start(const char *label, int64_t *out)
{
    int y, mo, d, h;
    if (strlen(label) < 10 || digits(label, 4, &y) || digits(label + 4, 2, &mo) ||
        digits(label + 6, 2, &d) || digits(label + 8, 2, &h) || mo < 1 || mo > 12 || d < 1)
        return -1;
    *out = (days_from_civil(y, (unsigned)mo, (unsigned)d) * 24 + h) * 3600000LL;
    return 0;
}

static int put_json_string(funcd_buf *b, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    if (funcd_buf_grow(b, len + 2) < 0)
        return -1;
    int rc = funcd_buf_append(b, "\"", 1);
    size_t run = 0; /* bytes copied as they are, in one append */
    for (size_t i = 0; i < len && rc == 0; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        rc = funcd_buf_append(b, s + run, i - run);
        run = i + 1;
        char esc[7] = {'\\', (char)c, 0};
        if (c == '\n')
            esc[1] = 'n';
        else if (c == '\t')
            esc[1] = 't';
        else if (c == '\r')
            esc[1] = 'r';
        else if (c < 0x20)
            snprintf(esc, sizeof(esc), "\\u00%c%c", hex[c >> 4], hex[c & 15]);
        if (rc == 0)
            rc = funcd_buf_puts(b, esc);
    }
    if (rc == 0)
        rc = funcd_buf_append(b, s + run, len - run);
    return rc == 0 ? funcd_buf_append(b, "\"", 1) : rc;
}

static int put_field(funcd_buf *b, const char *name, const char *value)
{
    if (funcd_buf_printf(b, ",\"%s\":", name) < 0)
        return -1;
    return put_json_string(b, value ? value : "", value ? strlen(value) : 0);
}

static const char *severity_of_number(double n)
{
    /* pino/bunyan numeric levels */
    return n >= 60 ? "FATAL" : n >= 50 ? "ERROR" : n >= 40 ? "WARN" : n >= 30 ? "INFO"
           : n >= 20 ? "DEBUG" : "TRACE";
}

static void severity_of_text(const char *s, char out[16])
{
    size_t i = 0;
    for (; s[i] && i < 15; i++)
        out[i] = (char)toupper((unsigned char)s[i]);
    out[i] = '\0';
    static const char *const alias[][2] = {
        {"WARNING", "WARN"}, {"ERR", "ERROR"},     {"CRITICAL", "FATAL"}, {"CRIT", "FATAL"},
        {"PANIC", "FATAL"},  {"EMERG", "FATAL"},   {"EMERGENCY", "FATAL"}, {"ALERT", "FATAL"},
        {"NOTICE", "INFO"},  {"INFORMATION", "INFO"},
    };
    for (size_t k = 0; k < sizeof(alias) / sizeof(alias[0]); k++)
        if (strcmp(out, alias[k][0]) == 0) {
            snprintf(out, 16, "%s", alias[k][1]);
            return;
        }
}

/* A JSON object with "severity" or "level", else NULL. */
static cJSON *structured(const char *line, size_t len, char severity[16])
{
    size_t i = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t'))
        i++;
    if (i == len || line[i] != '{')
        return NULL;
    cJSON *o = cJSON_ParseWithLength(line, len);
    const cJSON *sev = cJSON_GetObjectItemCaseSensitive(o, "severity");
    if (!sev)
        sev = cJSON_GetObjectItemCaseSensitive(o, "level");
    if (cJSON_IsString(sev) && sev->valuestring[0])
        severity_of_text(sev->valuestring, severity);
    else if (cJSON_IsNumber(sev))
        snprintf(severity, 16, "%s", severity_of_number(sev->valuedouble));
    else {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Body and attributes of a structured line; consumes `o`. */
static int put_structured(funcd_buf *b, cJSON *o)
{
    cJSON_DeleteItemFromObjectCaseSensitive(o, "severity");
    cJSON_DeleteItemFromObjectCaseSensitive(o, "level");
    cJSON *body = cJSON_DetachItemFromObjectCaseSensitive(o, "message");
    cJSON *alt = cJSON_DetachItemFromObjectCaseSensitive(o, "msg");
    if (!body) {
        body = alt;
        alt = NULL;
    }
    if (alt) /* both given: keep the second as an attribute */
        cJSON_AddItemToObject(o, "msg", alt);
    char *body_text = body ? cJSON_PrintUnformatted(body) : NULL;
    char *attrs = cJSON_PrintUnformatted(o);
    int rc = (body && !body_text) || !attrs ? -1 : 0;
    if (rc == 0)
        rc = funcd_buf_printf(b, ",\"body\":%s,\"attributes\":%s", body_text ? body_text : "\"\"",
                              attrs);
    free(body_text);
    free(attrs);
    cJSON_Delete(body);
    cJSON_Delete(o);
    return rc;
}

int funcd_logstore_format(funcd_buf *b, const funcd_logstore_record *r)
{
    char ts[32], severity[16];
    funcd__logstore_time(ts, r->time_ms);
    snprintf(severity, sizeof(severity), "%s", r->stream == 2 ? "ERROR" : "INFO");
    cJSON *o = structured(r->line, r->len, severity);
    int rc = funcd_buf_printf(b, "{\"time\":\"%s\"", ts);
    if (rc == 0 && r->invocation && r->invocation[0])
        rc = put_field(b, "invocationId", r->invocation);
    if (rc == 0)
        rc = put_field(b, "severity", severity);
    if (rc == 0 && o) {
        rc = put_structured(b, o);
    } else if (rc == 0) {
        cJSON_Delete(o);
        rc = funcd_buf_puts(b, ",\"body\":");
        if (rc == 0)
            rc = put_json_string(b, r->line, r->len);
        if (rc == 0)
            rc = funcd_buf_puts(b, ",\"attributes\":{}");
    }
    if (rc == 0)
        rc = put_field(b, "namespace", r->ns);
    if (rc == 0)
        rc = put_field(b, "function", r->fn);
    if (rc == 0)
        rc = put_field(b, "replica", r->replica);
    if (rc == 0 && r->node)
        rc = put_field(b, "node", r->node);
    if (rc == 0)
        rc = put_field(b, "stream", r->stream == 2 ? "stderr" : "stdout");
    /* "line": the text as written, for clients of the first log format. */
    if (rc == 0)
        rc = funcd_buf_puts(b, ",\"line\":");
    if (rc == 0)
        rc = put_json_string(b, r->line, r->len);
    if (rc == 0)
        rc = funcd_buf_append(b, "}", 1);
    return rc < 0 ? FUNCD_ENOMEM : 0;
}

/* Reads the time and invocation at the head of a record this file wrote;
 * -1 when the line is shaped otherwise (then the caller parses it). */
int funcd__logstore_peek(const char *line, size_t len, int64_t *time_ms, const char **inv,
                         size_t *inv_len)
{
    static const char head[] = "{\"time\":\"", inv_key[] = ",\"invocationId\":\"";
    const size_t hl = sizeof(head) - 1, il = sizeof(inv_key) - 1;
    if (len < hl + 25 || memcmp(line, head, hl) != 0 ||
        funcd__logstore_parse_time(line + hl, 24, time_ms) < 0 || line[hl + 24] != '"')
        return -1;
    size_t at = hl + 25;
    *inv = NULL;
    *inv_len = 0;
    if (len - at < il || memcmp(line + at, inv_key, il) != 0)
        return 0;
    at += il;
    for (size_t i = at; i < len; i++) {
        if (line[i] == '\\')
            return -1;
        if (line[i] == '"') {
            *inv = line + at;
            *inv_len = i - at;
            return 0;
        }
    }
    return -1;
}

int funcd_logstore_parse_since(const char *s, int64_t now_ms, int64_t *out)
{
    uint64_t ms = 0;
    size_t n = s ? strlen(s) : 0;
    if (n >= 2 && s[n - 1] == 'd' && strspn(s, "0123456789") == n - 1 && n <= 7) {
        ms = strtoull(s, NULL, 10) * 86400000ULL;
    } else if (!s || !*s || funcd_parse_duration_ms(s, &ms) < 0) {
        return funcd_error_set(FUNCD_EINVAL,
                               "since \"%s\" is not a duration; write it like 90s, 5m, 2h or 3d",
                               s ? s : "");
    }
    if (ms > (uint64_t)now_ms)
        ms = (uint64_t)now_ms;
    *out = now_ms - (int64_t)ms;
    return 0;
}
