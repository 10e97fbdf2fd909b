/*
 * Fuzz target for EventSources: any bytes decoded and validated as an
 * EventSource, and, as a short string, parsed as a cron schedule. What must
 * hold for every input:
 *   - a schedule that parses has a next tick after any time, and the tick
 *     after that is later still (no tick twice, no going back);
 *   - a valid EventSource's cron schedule parses again (validation and the
 *     running source read it alike).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "eventing/cron.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_eventsource: %s\n", what);
        abort();
    }
}

static void schedule(const char *text)
{
    funcd_cron c;
    char err[256];
    if (funcd_cron_parse(text, &c, err, sizeof(err)) < 0) {
        check(err[0] != '\0', "a refused schedule says why");
        return;
    }
    static const int64_t times[] = {0, 1, 59999, 60000, 1798761599999LL, 1796083200000LL};
    for (size_t i = 0; i < sizeof(times) / sizeof(times[0]); i++) {
        int64_t t = funcd_cron_next(&c, times[i]);
        check(t > times[i], "the next tick comes after the time asked");
        int64_t u = funcd_cron_next(&c, t);
        check(u < 0 || u > t, "ticks only move forward");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char s[128];
    size_t n = size < sizeof(s) - 1 ? size : sizeof(s) - 1;
    memcpy(s, data, n);
    s[n] = '\0';
    schedule(s);

    cJSON *obj = NULL;
    funcd_api_error err;
    if (funcd_api_decode((const char *)data, size, &obj, &err) < 0)
        return 0;
    const funcd_kind *kind = funcd_kind_by_kind("EventSource");
    if (funcd_api_validate(kind, obj, &err) == 0) {
        const cJSON *cron = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(obj, "spec"), "cron");
        const char *text =
            cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cron, "schedule"));
        funcd_cron c;
        char e[256];
        check(!cron || (text && funcd_cron_parse(text, &c, e, sizeof(e)) == 0),
              "a valid source's schedule parses");
    } else {
        check(err.message[0] != '\0', "a refused EventSource says why");
    }
    cJSON_Delete(obj);
    return 0;
}
