/*
 * W3C Trace Context (https://www.w3.org/TR/trace-context/): the
 * `traceparent` header, parsed strictly and written as version 00.
 */
#ifndef FUNCD_TRACE_TRACEPARENT_H
#define FUNCD_TRACE_TRACEPARENT_H

#include <stddef.h>
#include <stdint.h>

#define FUNCD_TRACEPARENT_LEN 55 /* "00-" 32 hex "-" 16 hex "-" 2 hex */

typedef struct funcd_traceparent {
    uint8_t trace_id[16];
    uint8_t parent_id[8];
    uint8_t flags; /* bit 0: sampled */
} funcd_traceparent;

/*
 * Parses one traceparent value (`s`, `n` bytes, no NUL needed). 0 when it
 * is valid: a version of two lowercase hex digits other than "ff"; for 00
 * exactly 55 characters, for a later version at least 55 with a '-' after
 * them (its extra fields are ignored, as the spec asks); lowercase hex
 * throughout; neither id all zeros. -1 otherwise (`out` is then undefined).
 */
int funcd_traceparent_parse(const char *s, size_t n, funcd_traceparent *out);

/* Writes "00-<trace>-<parent>-<flags>" (55 characters and a NUL). */
void funcd_traceparent_format(const uint8_t trace_id[16], const uint8_t parent_id[8],
                              uint8_t flags, char out[FUNCD_TRACEPARENT_LEN + 1]);

/* Lowercase hex of `n` bytes into `out` (2n characters and a NUL). */
void funcd_trace_hex(const uint8_t *bytes, size_t n, char *out);

#endif
