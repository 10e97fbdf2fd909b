/* EventSources: validation of the kind (each rule with its field path) and
 * cron schedules (parsing and the ticks they give). */
#include <stdlib.h>

#include "api_helpers.h"
#include "eventing/cron.h"

#define ES(spec) "apiVersion: funcd.dev/v1\nkind: EventSource\nmetadata: {name: s}\nspec: " spec "\n"

TEST(valid_sources)
{
    VALID("EventSource", ES("{type: cron, cron: {schedule: '*/5 * * * *', timezone: UTC}, "
                            "target: {function: f}, delivery: {attempts: 3, backoff: {initial: 1s, "
                            "max: 1m}, timeout: 30s}}"));
    VALID("EventSource", ES("{type: cron, cron: {schedule: '@every 10s'}, target: {function: f}}"));
    VALID("EventSource", ES("{type: blob, blob: {prefix: uploads/, pollInterval: 15s}, "
                            "target: {function: f}}"));
    VALID("EventSource", ES("{type: blob, target: {function: f}}"));
    VALID("EventSource", ES("{type: bus, bus: {subject: orders.created, queueGroup: workers}, "
                            "target: {function: f}}"));
    VALID("EventSource", ES("{type: bus, bus: {subject: 'orders.>'}, target: {function: f}}"));
    VALID("EventSource", ES("{type: webhook, webhook: {secretRef: {name: hook, key: token}}, "
                            "target: {function: f}}"));
    VALID("EventSource", ES("{type: webhook, target: {function: f}}"));
}

TEST(invalid_sources)
{
    INVALID("EventSource", ES("{type: ftp, target: {function: f}}"), "spec.type",
            "must be one of: cron, blob, bus, webhook");
    INVALID("EventSource", ES("{type: cron, target: {function: f}}"), "spec.cron",
            "required for type cron");
    INVALID("EventSource", ES("{type: bus, target: {function: f}}"), "spec.bus",
            "required for type bus");
    INVALID("EventSource", ES("{type: cron, cron: {schedule: '@every 1s'}, bus: {subject: a}, "
                              "target: {function: f}}"),
            "spec.bus", "only for type bus");
    INVALID("EventSource", ES("{type: cron, cron: {schedule: '* * * *'}, target: {function: f}}"),
            "spec.cron.schedule", "five fields");
    INVALID("EventSource", ES("{type: cron, cron: {schedule: '61 * * * *'}, target: {function: f}}"),
            "spec.cron.schedule", "minute field");
    INVALID("EventSource", ES("{type: cron, cron: {schedule: '0 0 30 2 *'}, target: {function: f}}"),
            "spec.cron.schedule", "never fires");
    INVALID("EventSource", ES("{type: cron, cron: {schedule: '@every 10ms'}, target: {function: f}}"),
            "spec.cron.schedule", "from 1s");
    INVALID("EventSource", ES("{type: cron, cron: {schedule: '@every 1m', timezone: Europe/Paris}, "
                              "target: {function: f}}"),
            "spec.cron.timezone", "must be UTC");
    INVALID("EventSource", ES("{type: blob, blob: {pollInterval: 10ms}, target: {function: f}}"),
            "spec.blob.pollInterval", "at least 100ms");
    INVALID("EventSource", ES("{type: bus, bus: {subject: 'a..b'}, target: {function: f}}"),
            "spec.bus.subject", "bus subject");
    INVALID("EventSource", ES("{type: bus, bus: {subject: a, queueGroup: 'a b'}, "
                              "target: {function: f}}"),
            "spec.bus.queueGroup", "queue group");
    INVALID("EventSource", ES("{type: webhook, webhook: {secretRef: {name: hook}}, "
                              "target: {function: f}}"),
            "spec.webhook.secretRef.key", "required");
    VALID("EventSource", ES("{type: webhook, target: {workflow: w}}"));
    VALID("EventSource", ES("{type: cron, cron: {schedule: '@every 10s'}, target: {workflow: w}}"));
    INVALID("EventSource", ES("{type: webhook, target: {workflow: W_1}}"), "spec.target.workflow",
            "");
    INVALID("EventSource", ES("{type: webhook, target: {function: f, workflow: w}}"), "spec.target",
            "must name one function or one workflow");
    INVALID("EventSource", ES("{type: webhook, target: {}}"), "spec.target",
            "must name one function or one workflow");
    INVALID("EventSource", ES("{type: webhook, target: {function: F}}"), "spec.target.function",
            "DNS-1123");
    INVALID("EventSource", ES("{type: webhook}"), "spec.target", "required");
    INVALID("EventSource", ES("{type: webhook, target: {function: f}, delivery: {attempts: 0}}"),
            "spec.delivery.attempts", "between 1 and 100");
    INVALID("EventSource", ES("{type: webhook, target: {function: f}, delivery: {backoff: "
                              "{initial: 1m, max: 1s}}}"),
            "spec.delivery.backoff.max", "at least spec.delivery.backoff.initial");
    INVALID("EventSource", ES("{type: webhook, target: {function: f}, delivery: {timeout: x}}"),
            "spec.delivery.timeout", "must be a duration");
    INVALID("EventSource", ES("{type: webhook, target: {function: f}, extra: 1}"), "spec.extra",
            "unknown field");
}

/* 2026-12-02T03:47:30Z and friends, as Unix ms. */
#define T_2026_12_02_0347_30 1796183250000LL
#define MIN 60000LL

static int64_t next_of(const char *sched, int64_t after)
{
    funcd_cron c;
    char err[256];
    if (funcd_cron_parse(sched, &c, err, sizeof(err)) < 0)
        return -2;
    return funcd_cron_next(&c, after);
}

TEST(cron_ticks)
{
    int64_t t = T_2026_12_02_0347_30;
    int64_t minute0 = t - 30000 - 47 * MIN; /* 03:00:00 */
    CHECK_INT(next_of("* * * * *", t), minute0 + 48 * MIN);
    CHECK_INT(next_of("*/5 * * * *", t), minute0 + 50 * MIN);
    CHECK_INT(next_of("0 * * * *", t), minute0 + 60 * MIN);
    CHECK_INT(next_of("@hourly", t), minute0 + 60 * MIN);
    CHECK_INT(next_of("0 9 * * *", t), minute0 + 6 * 60 * MIN);
    /* 2026-12-02 is a Wednesday: the next Monday 00:00 is 12-07. */
    CHECK_INT(next_of("0 0 * * mon", t), minute0 - 3 * 60 * MIN + 5 * 24 * 60 * MIN);
    CHECK_INT(next_of("0 0 * * 1", t), next_of("0 0 * * MON", t));
    CHECK_INT(next_of("0 0 * * 0", t), next_of("0 0 * * 7", t));
    /* Both day fields restricted: either matches (the 3rd comes first). */
    CHECK_INT(next_of("0 0 3 * mon", t), minute0 - 3 * 60 * MIN + 24 * 60 * MIN);
    /* Across a year: the first of January 2027. */
    CHECK_INT(next_of("0 0 1 jan *", t), 1798761600000LL);
    /* Feb 29: in 2028. */
    CHECK_INT(next_of("0 0 29 2 *", t), 1835395200000LL);
    /* Strictly after: a tick time gives the next one. */
    CHECK_INT(next_of("*/5 * * * *", minute0 + 50 * MIN), minute0 + 55 * MIN);
    CHECK_INT(next_of("@every 10s", 1000), 10000);
    CHECK_INT(next_of("@every 10s", 10000), 20000);
    CHECK_INT(next_of("@every 1m30s", 0), 90000);
    CHECK_INT(next_of("1-10/3 * * * *", minute0 + 1 * MIN), minute0 + 4 * MIN);
    CHECK_INT(next_of("5/20 * * * *", minute0 + 6 * MIN), minute0 + 25 * MIN);
    CHECK_INT(next_of("bogus", t), -2);
    CHECK_INT(next_of("@daily extra", t), -2);
}

int main(void)
{
    RUN(valid_sources);
    RUN(invalid_sources);
    RUN(cron_ticks);
    return HARNESS_END();
}
