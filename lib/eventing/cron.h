/*
 * Schedules of cron EventSources: the five fields of cron(8) (minute, hour,
 * day of month, month, day of week; lists, ranges, steps, month and day
 * names), the @hourly family, and "@every <duration>". Times are UTC.
 *
 * Ticks are instants every node computes alike: whole minutes that match
 * the fields, or for @every the multiples of its interval since the Unix
 * epoch. A tick's time names it, so a cron event's id is the source and
 * the tick (sources.c).
 */
#ifndef FUNCD_EVENTING_CRON_H
#define FUNCD_EVENTING_CRON_H

#include <stddef.h>
#include <stdint.h>

#define FUNCD_CRON_MIN_EVERY_MS 1000
#define FUNCD_CRON_MAX_EVERY_MS (366LL * 24 * 3600 * 1000)

typedef struct funcd_cron {
    uint64_t every_ms; /* @every; 0: the fields */
    uint64_t minutes;  /* bit i: minute i (0-59) */
    uint32_t hours;    /* bit i: hour i (0-23) */
    uint32_t days;     /* bit i: day of month i (1-31) */
    uint16_t months;   /* bit i: month i (1-12) */
    uint8_t weekdays;  /* bit i: day i of the week (0-6, Sunday 0) */
    uint8_t days_any, weekdays_any; /* the field was '*' (cron's day-matching rule) */
} funcd_cron;

/* 0, or -1 with a sentence in `err` saying what is wrong. A schedule that
 * never fires ("0 0 30 2 *") is refused too. */
int funcd_cron_parse(const char *text, funcd_cron *out, char *err, size_t err_len);

/* The first tick strictly after `after_ms` (Unix epoch ms, UTC); -1 when
 * none comes within ten years. */
int64_t funcd_cron_next(const funcd_cron *c, int64_t after_ms);

#endif
