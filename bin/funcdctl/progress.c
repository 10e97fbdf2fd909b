/* The progress of an image pull: a bar on a terminal, plain lines elsewhere. */
#include "progress.h"

#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define BAR_CELLS 20
#define KIB 1024.0
#define MIB (1024.0 * 1024.0)
#define GIB (1024.0 * 1024.0 * 1024.0)

static int terminal_columns(void)
{
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    return 0;
}

void ctl_progress_init(ctl_progress *p, const char *ref, int tty)
{
    memset(p, 0, sizeof(*p));
    p->ref = ref;
    p->tty = tty;
    p->out = stderr;
    if (tty)
        p->columns = terminal_columns();
}

void ctl_progress_sizes(uint64_t done, uint64_t total, const char *sep, char *out, size_t len)
{
    if (total < 1024) {
        snprintf(out, len, "%llu%s%llu B", (unsigned long long)done, sep,
                 (unsigned long long)total);
        return;
    }
    double unit = total < MIB ? KIB : total < GIB ? MIB : GIB;
    const char *name = total < MIB ? "KiB" : total < GIB ? "MiB" : "GiB";
    snprintf(out, len, "%.1f%s%.1f %s", (double)done / unit, sep, (double)total / unit, name);
}

/* Done bytes can pass the total for a moment (a retried layer): the bar
 * and the quarters stop at full. */
static uint64_t capped_done(const ctl_pull_counts *c)
{
    return c->bytes_done > c->bytes_total ? c->bytes_total : c->bytes_done;
}

static void counts_text(const ctl_pull_counts *c, char *out, size_t len)
{
    char bar[BAR_CELLS + 1], sizes[64];
    if (c->bytes_total == 0) {
        snprintf(out, len, "  resolving...");
        return;
    }
    size_t filled = (size_t)(capped_done(c) * BAR_CELLS / c->bytes_total);
    memset(bar, '#', filled);
    memset(bar + filled, '.', BAR_CELLS - filled);
    bar[BAR_CELLS] = '\0';
    ctl_progress_sizes(capped_done(c), c->bytes_total, "/", sizes, sizeof(sizes));
    int n = snprintf(out, len, "  [%s]  %s", bar, sizes);
    if (c->layers_total > 0 && n > 0 && (size_t)n < len)
        snprintf(out + n, len - (size_t)n, "  %u/%u layers", c->layers_done, c->layers_total);
}

void ctl_progress_bar_text(const ctl_progress *p, const ctl_pull_counts *c, char *out,
                           size_t len)
{
    static const char head[] = "pulling ", ellipsis[] = "...";
    char tail[128];
    counts_text(c, tail, sizeof(tail));
    size_t ref_len = strlen(p->ref);
    /* A line longer than the terminal wraps, and "\r" then rewrites only its
     * last row: keep the end of the reference, where the tag is. */
    size_t fixed = sizeof(head) - 1 + strlen(tail);
    if (p->columns > 0 && fixed + ref_len + 1 > (size_t)p->columns) {
        size_t room = (size_t)p->columns > fixed + 1 ? (size_t)p->columns - fixed - 1 : 0;
        if (room > sizeof(ellipsis) - 1) {
            size_t keep = room - (sizeof(ellipsis) - 1);
            snprintf(out, len, "%s%s%s%s", head, ellipsis, p->ref + ref_len - keep, tail);
            return;
        }
    }
    snprintf(out, len, "%s%s%s", head, p->ref, tail);
}

static void plain_line(ctl_progress *p, const ctl_pull_counts *c)
{
    if (!p->announced) {
        fprintf(p->out, "pulling %s\n", p->ref);
        p->announced = 1;
    }
    if (c->bytes_total == 0)
        return;
    int quarters = (int)(capped_done(c) * 4 / c->bytes_total);
    if (quarters <= p->quarters)
        return;
    char sizes[64];
    p->quarters = quarters;
    ctl_progress_sizes(capped_done(c), c->bytes_total, " of ", sizes, sizeof(sizes));
    if (c->layers_total > 0)
        fprintf(p->out, "pulling %s: %s, %u/%u layers\n", p->ref, sizes, c->layers_done,
                c->layers_total);
    else
        fprintf(p->out, "pulling %s: %s\n", p->ref, sizes);
}

void ctl_progress_update(ctl_progress *p, const ctl_pull_counts *c)
{
    if (!p->tty) {
        plain_line(p, c);
        return;
    }
    char line[512];
    ctl_progress_bar_text(p, c, line, sizeof(line));
    ctl_status("%s", line);
}

void ctl_progress_end(ctl_progress *p)
{
    if (p->tty)
        ctl_status_clear();
}
