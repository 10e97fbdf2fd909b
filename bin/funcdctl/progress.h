/*
 * Image pulls as funcdctl shows them (`pull`, `deploy --image`): the server
 * pulls, funcdctl polls the pull's progress and draws it on stderr, as a bar
 * rewritten in place on a terminal or as plain lines otherwise (a log, CI).
 *
 * Not thread-safe; funcdctl is single-threaded.
 */
#ifndef FUNCDCTL_PROGRESS_H
#define FUNCDCTL_PROGRESS_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cli.h"

/* What the server last reported about one pull. */
typedef struct ctl_pull_counts {
    uint64_t bytes_done, bytes_total;
    unsigned layers_done, layers_total; /* 0/0: not reported */
} ctl_pull_counts;

typedef struct ctl_progress {
    const char *ref; /* the image as the user wrote it; not owned */
    int tty;         /* draw the bar with ctl_status (else plain lines) */
    FILE *out;       /* where plain lines go: stderr */
    int columns;     /* the terminal's width, 0 when unknown */
    int quarters;    /* plain lines: how many quarters of the bytes were reported */
    int announced;   /* plain lines: "pulling REF" was printed */
} ctl_progress;

/* `tty`: stderr is a terminal (the caller asks isatty, so tests can force
 * either mode). */
void ctl_progress_init(ctl_progress *p, const char *ref, int tty);

/* Shows the latest counts: the bar on a terminal; otherwise a line when the
 * pull starts and each time it passes another quarter of its bytes. */
void ctl_progress_update(ctl_progress *p, const ctl_pull_counts *c);

/* Removes the bar (a terminal); plain lines stay. */
void ctl_progress_end(ctl_progress *p);

/*
 * The bar's text, "pulling REF  [#####.....]  12.3/32.0 MiB  3/8 layers",
 * fitted into `columns` - 1 characters by shortening REF when `columns` > 0.
 * Exposed for tests.
 */
void ctl_progress_bar_text(const ctl_progress *p, const ctl_pull_counts *c, char *out,
                           size_t len);

/* "12.3/32.0 MiB" (separator "/") or "12.3 of 32.0 MiB" (" of "): both in
 * the unit that suits `total`. */
void ctl_progress_sizes(uint64_t done, uint64_t total, const char *sep, char *out, size_t len);

/*
 * Asks the server to pull `image` into namespace ctx->ns's reach, with the
 * pull secrets `secrets[0..nsecrets)`, and follows the pull (polling every
 * 100 ms, progress on stderr) until it ends, `*stop` becomes non-zero (`stop`
 * may be NULL) or funcd_mono_ms() passes `deadline_ms` (0: none).
 * Returns 0 with *digest (malloc()ed) the image's digest and, when `final`
 * is not NULL, *final the pull's last state as the server reported it
 * (the caller frees it); or CTL_EXIT_ERROR with the message printed.
 */
int ctl_image_pull(ctl_ctx *ctx, const char *image, const char *const *secrets, size_t nsecrets,
                   volatile sig_atomic_t *stop, int64_t deadline_ms, char **digest,
                   cJSON **final);

#endif
