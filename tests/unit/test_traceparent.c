/*
 * The traceparent parser against the W3C Trace Context rules: what is
 * valid, and each way a value is not (the edge then starts a new trace).
 */
#include "harness.h"
#include "trace/edge.h"
#include "trace/traceparent.h"
#include "util/buf.h"

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

/* The access log line of a record, byte for byte (docs/observability.md):
 * the time in UTC to the millisecond, the duration in milliseconds to the
 * microsecond (rounded), strings JSON-escaped. */
static char *line_of(const funcd_edge_rec *r)
{
    static char out[2048];
    funcd_buf b = {0};
    funcd_edge_access_line(r, &b);
    snprintf(out, sizeof(out), "%.*s", (int)b.len, b.data ? b.data : "");
    funcd_buf_free(&b);
    return out;
}

TEST(access_line)
{
    funcd_edge_rec r;
    memset(&r, 0, sizeof(r));
    for (int i = 0; i < 16; i++)
        r.trace_id[i] = (uint8_t)(0x4b + i * 17);
    r.status = 200;
    r.bytes = 117;
    r.start_ns = 1796160600123456789LL; /* 2026-12-01T21:30:00.123Z */
    r.end_ns = r.start_ns + 1284567;     /* 1.284567 ms */
    snprintf(r.method, sizeof(r.method), "GET");
    snprintf(r.path, sizeof(r.path), "/fn/default/hello/x?q=\"1\"\\\x01");
    snprintf(r.ns, sizeof(r.ns), "default");
    snprintf(r.fn, sizeof(r.fn), "hello");
    snprintf(r.invocation_id, sizeof(r.invocation_id), "0a4c");
    CHECK_STR(line_of(&r),
              "{\"time\":\"2026-12-01T21:30:00.123Z\",\"method\":\"GET\",\"path\":"
              "\"/fn/default/hello/x?q=\\\"1\\\"\\\\\\u0001\",\"status\":200,\"bytes\":117,"
              "\"durationMs\":1.285,\"namespace\":\"default\",\"function\":\"hello\","
              "\"invocationId\":\"0a4c\",\"traceId\":\"4b5c6d7e8fa0b1c2d3e4f5061728394a\"}\n");
    /* the first millisecond of a year, no duration, the largest values */
    r.start_ns = 1704067200000000000LL; /* 2024-01-01T00:00:00.000Z */
    r.end_ns = r.start_ns;
    r.status = 499;
    r.bytes = UINT64_MAX;
    r.method[0] = r.path[0] = r.ns[0] = r.fn[0] = r.invocation_id[0] = '\0';
    CHECK_STR(line_of(&r),
              "{\"time\":\"2024-01-01T00:00:00.000Z\",\"method\":\"\",\"path\":\"\",\"status\":499,"
              "\"bytes\":18446744073709551615,\"durationMs\":0.000,\"namespace\":\"\","
              "\"function\":\"\",\"invocationId\":\"\",\"traceId\":"
              "\"4b5c6d7e8fa0b1c2d3e4f5061728394a\"}\n");
    /* a leap day, a duration of minutes, rounded to the microsecond */
    r.start_ns = 1709251199999000000LL; /* 2024-02-29T23:59:59.999Z */
    r.end_ns = r.start_ns + 123456789600LL; /* 123456.7896 ms */
    r.status = 504;
    r.bytes = 0;
    CHECK(strstr(line_of(&r), "\"time\":\"2024-02-29T23:59:59.999Z\""));
    CHECK(strstr(line_of(&r), "\"status\":504,\"bytes\":0,\"durationMs\":123456.790,"));
}

int main(void)
{
    RUN(valid);
    RUN(invalid);
    RUN(access_line);
    return HARNESS_END();
}
