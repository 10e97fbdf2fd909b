/*
 * The traceparent parser against the W3C Trace Context rules: what is
 * valid, and each way a value is not (the edge then starts a new trace).
 */
#include "harness.h"
#include "trace/traceparent.h"

#define TP(s) funcd_traceparent_parse((s), strlen(s), &tp)

TEST(valid)
{
    funcd_traceparent tp;
    CHECK_INT(TP("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), 0);
    CHECK_INT(tp.trace_id[0], 0x4b);
    CHECK_INT(tp.trace_id[15], 0x36);
    CHECK_INT(tp.parent_id[0], 0x00);
    CHECK_INT(tp.parent_id[7], 0xb7);
    CHECK_INT(tp.flags, 1);
    CHECK_INT(TP("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"), 0);
    CHECK_INT(tp.flags, 0);
    /* A later version may carry more fields after a '-'. */
    CHECK_INT(TP("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future"), 0);
    CHECK_INT(TP("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09"), 0);
    CHECK_INT(tp.flags, 9);
    char out[FUNCD_TRACEPARENT_LEN + 1];
    CHECK_INT(TP("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), 0);
    funcd_traceparent_format(tp.trace_id, tp.parent_id, tp.flags, out);
    CHECK_STR(out, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
}

TEST(invalid)
{
    static const char *const bad[] = {
        "",
        "00",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",     /* short */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",   /* 00 has no more fields */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-010",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    /* version ff */
        "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    /* uppercase */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",    /* zero trace id */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    /* zero parent id */
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01",
        "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
        " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01.x",  /* no '-' after */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",
        NULL};
    funcd_traceparent tp;
    for (const char *const *b = bad; *b; b++)
        if (TP(*b) == 0)
            FAILF("\"%s\" was taken as valid", *b);
    CHECK_INT(funcd_traceparent_parse(NULL, 0, &tp), -1);
    /* Only `n` bytes are read: the same value cut short is invalid. */
    const char *v = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    CHECK_INT(funcd_traceparent_parse(v, 54, &tp), -1);
}

int main(void)
{
    RUN(valid);
    RUN(invalid);
    return HARNESS_END();
}
