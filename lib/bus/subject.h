/* Subject and queue-group rules every bus driver applies the same way. */
#ifndef FUNCD_BUS_SUBJECT_H
#define FUNCD_BUS_SUBJECT_H

/* 0, or FUNCD_EINVAL naming the subject and what is wrong with it. `what`
 * completes "cannot %s subject": "publish to", "subscribe to". */
int funcd_bus_check_subject(const char *subject, int wildcards, const char *what);

/* 0 for NULL (fan-out) or a valid name, else FUNCD_EINVAL. */
int funcd_bus_check_queue_group(const char *group, const char *subject);

/* Matches a valid pattern against a valid literal subject. */
int funcd_bus_subject_matches(const char *pattern, const char *subject);

#endif
