/* The image-pull progress of `funcdctl pull` and `deploy --image`: the bar's
 * text, sizes, fitting a narrow terminal, and the plain lines' quarters. The
 * status line is faked here to record what the bar would draw. */
#include <stdarg.h>
#include <stdlib.h>

#include "harness.h"
#include "progress.h"

static char status_line[512];
static int status_calls, clear_calls;

void ctl_status(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(status_line, sizeof(status_line), fmt, ap);
    va_end(ap);
    status_calls++;
}

void ctl_status_clear(void)
{
    clear_calls++;
}

#define MIB (1024ull * 1024)

/* Runs `updates` through plain-lines mode; returns what was printed. */
static char *plain_run(const ctl_pull_counts *updates, size_t n)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    ctl_progress p;
    ctl_progress_init(&p, "r.example/fn:1", 0);
    p.out = mem;
    for (size_t i = 0; i < n; i++)
        ctl_progress_update(&p, &updates[i]);
    ctl_progress_end(&p);
    fclose(mem);
    return text;
}

static int count_lines(const char *text)
{
    int n = 0;
    for (; text && *text; text++)
        n += *text == '\n';
    return n;
}

TEST(sizes_use_the_unit_of_the_total)
{
    char out[64];
    ctl_progress_sizes(512, 1000, "/", out, sizeof(out));
    CHECK_STR(out, "512/1000 B");
    ctl_progress_sizes(1536, 10 * 1024, " of ", out, sizeof(out));
    CHECK_STR(out, "1.5 of 10.0 KiB");
    ctl_progress_sizes(12897485, 32 * MIB, "/", out, sizeof(out));
    CHECK_STR(out, "12.3/32.0 MiB");
    ctl_progress_sizes(MIB, 3 * 1024 * MIB, "/", out, sizeof(out));
    CHECK_STR(out, "0.0/3.0 GiB");
}

TEST(bar_shows_bytes_and_layers)
{
    ctl_progress p;
    char out[256];
    ctl_progress_init(&p, "r.example/fn:1", 0);
    ctl_pull_counts c = {.bytes_done = 16 * MIB, .bytes_total = 32 * MIB, .layers_done = 3,
                         .layers_total = 8};
    ctl_progress_bar_text(&p, &c, out, sizeof(out));
    CHECK_STR(out, "pulling r.example/fn:1  [##########..........]  16.0/32.0 MiB  3/8 layers");
    c.layers_total = 0; /* not reported: no layer count */
    c.bytes_done = 40 * MIB; /* a retried layer: the bar stops at full */
    ctl_progress_bar_text(&p, &c, out, sizeof(out));
    CHECK_STR(out, "pulling r.example/fn:1  [####################]  32.0/32.0 MiB");
    c = (ctl_pull_counts){0};
    ctl_progress_bar_text(&p, &c, out, sizeof(out));
    CHECK_STR(out, "pulling r.example/fn:1  resolving...");
}

TEST(bar_fits_a_narrow_terminal_keeping_the_tag)
{
    ctl_progress p;
    char out[256];
    ctl_progress_init(&p, "registry.example.com/some/long/repository/name:v1.2.3", 0);
    p.columns = 60;
    ctl_pull_counts c = {.bytes_done = MIB, .bytes_total = 4 * MIB};
    ctl_progress_bar_text(&p, &c, out, sizeof(out));
    CHECK_INT(strlen(out), 59);
    CHECK(!strncmp(out, "pulling ...", 11));
    CHECK_CONTAINS(out, "name:v1.2.3  [#####...............]  1.0/4.0 MiB");
    p.columns = 20; /* no room for any of the reference: the bar wins over a tidy cut */
    ctl_progress_bar_text(&p, &c, out, sizeof(out));
    CHECK_CONTAINS(out, "1.0/4.0 MiB");
}

TEST(terminal_mode_draws_with_the_status_line)
{
    ctl_progress p;
    ctl_progress_init(&p, "r.example/fn:1", 1);
    p.columns = 0;
    status_calls = clear_calls = 0;
    ctl_pull_counts c = {.bytes_done = 1, .bytes_total = 4};
    ctl_progress_update(&p, &c);
    ctl_progress_update(&p, &c);
    CHECK_INT(status_calls, 2);
    CHECK_STR(status_line, "pulling r.example/fn:1  [#####...............]  1/4 B");
    ctl_progress_end(&p);
    CHECK_INT(clear_calls, 1);
}

TEST(plain_lines_one_per_quarter)
{
    ctl_pull_counts steps[] = {
        {0, 0, 0, 0},           {0, 32 * MIB, 0, 0},      {1 * MIB, 32 * MIB, 0, 0},
        {9 * MIB, 32 * MIB, 0, 0}, {10 * MIB, 32 * MIB, 0, 0}, {31 * MIB, 32 * MIB, 0, 0},
        {32 * MIB, 32 * MIB, 0, 0}, {32 * MIB, 32 * MIB, 0, 0},
    };
    status_calls = 0;
    char *text = plain_run(steps, sizeof(steps) / sizeof(steps[0]));
    CHECK(text);
    CHECK_STR(text, "pulling r.example/fn:1\n"
                    "pulling r.example/fn:1: 9.0 of 32.0 MiB\n"
                    "pulling r.example/fn:1: 31.0 of 32.0 MiB\n"
                    "pulling r.example/fn:1: 32.0 of 32.0 MiB\n");
    CHECK_INT(status_calls, 0);
    free(text);
}

TEST(plain_lines_for_a_pull_already_done)
{
    ctl_pull_counts done = {4 * MIB, 4 * MIB, 2, 2};
    char *text = plain_run(&done, 1);
    CHECK(text);
    CHECK_INT(count_lines(text), 2);
    CHECK_CONTAINS(text, "pulling r.example/fn:1: 4.0 of 4.0 MiB, 2/2 layers\n");
    free(text);
    ctl_pull_counts unknown = {0};
    text = plain_run(&unknown, 1);
    CHECK_STR(text, "pulling r.example/fn:1\n");
    free(text);
}

int main(void)
{
    RUN(sizes_use_the_unit_of_the_total);
    RUN(bar_shows_bytes_and_layers);
    RUN(bar_fits_a_narrow_terminal_keeping_the_tag);
    RUN(terminal_mode_draws_with_the_status_line);
    RUN(plain_lines_one_per_quarter);
    RUN(plain_lines_for_a_pull_already_done);
    return HARNESS_END();
}
