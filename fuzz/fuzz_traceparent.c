/*
 * Fuzz target for the traceparent parser (lib/trace/traceparent.c): any
 * bytes as a header value. What must hold: nothing is read past the value;
 * a value taken as valid has non-zero ids and, written back as version 00,
 * parses again to the same ids and flags.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/traceparent.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_traceparent: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy, so a read past the value is an ASan error. */
    char *s = malloc(size ? size : 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    funcd_traceparent tp;
    if (funcd_traceparent_parse(s, size, &tp) == 0) {
        static const uint8_t zero[16];
        check(memcmp(tp.trace_id, zero, 16) != 0, "a zero trace id was accepted");
        check(memcmp(tp.parent_id, zero, 8) != 0, "a zero parent id was accepted");
        check(size >= FUNCD_TRACEPARENT_LEN, "a short value was accepted");
        char out[FUNCD_TRACEPARENT_LEN + 1];
        funcd_traceparent_format(tp.trace_id, tp.parent_id, tp.flags, out);
        funcd_traceparent again;
        check(funcd_traceparent_parse(out, FUNCD_TRACEPARENT_LEN, &again) == 0,
              "its version-00 form does not parse");
        check(memcmp(&again, &tp, sizeof(tp)) == 0, "its version-00 form parses differently");
        if (s[0] == '0' && s[1] == '0')
            check(memcmp(out, s, FUNCD_TRACEPARENT_LEN) == 0, "a version-00 value changed");
    }
    free(s);
    return 0;
}
