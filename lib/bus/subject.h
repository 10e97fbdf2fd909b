/* Subject and queue-group rules every bus driver applies the same way. */
#ifndef FUNCD_BUS_SUBJECT_H
#define FUNCD_BUS_SUBJECT_H

/* 0, or FUNCD_EINVAL naming the subject and what is wrong with it. `what`
 * completes "cannot %s subject": "publish to", "subscribe to". */
int funcd_bus_check_subject(const char *subject, int wildcards, const char *what);

/* 0 for NULL (fan-out) or a valid name, else FUNCD_EINVAL. */
int funcd_bus_check_queue_group(const char *group, const char *subject);

/* The arguments of subscribe(), checked the same way by every driver:
 * the subject (wildcards allowed), a callback and an out handle (`given`:
 * both are), the queue group. 0, or FUNCD_EINVAL naming what is wrong. */
int funcd_bus_check_subscribe(const char *subject, const char *queue_group, int given);

/* Matches a valid pattern against a valid literal subject. */
int funcd_bus_subject_matches(const char *pattern, const char *subject);

/* 0 for a stream or consumer name of 1 to 64 [A-Za-z0-9_-] (what NATS
 * JetStream and file names accept alike), else FUNCD_EINVAL. */
int funcd_bus_check_name(const char *what, const char *name);

/* Whether some literal subject matches both valid patterns. */
int funcd_bus_patterns_overlap(const char *a, const char *b);

#endif
