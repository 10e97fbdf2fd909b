/*
 * A short-lived child process on the platform loop: input on its stdin,
 * stdout and stderr collected, a deadline after which its process group is
 * SIGKILLed. Supervised through a pidfd, so it never reaps other children.
 *
 * The host must ignore SIGPIPE (the platform does): a child that exits
 * without reading its input makes our write fail with EPIPE.
 *
 * Threads: the loop's thread only.
 */
#ifndef FUNCD_FNRUNNER_CHILD_H
#define FUNCD_FNRUNNER_CHILD_H

#include <event2/event.h>
#include <stdint.h>

#include "util/buf.h"

typedef struct funcd_child funcd_child;

typedef struct funcd_child_spec {
    const char *path;        /* the program to execve */
    const char *const *argv; /* NULL: {path, NULL} */
    const char *const *env;  /* NULL: none (never funcd's own) */
    const void *input;       /* written to stdin, then stdin is closed */
    size_t input_len;
    size_t max_stdout; /* more kills the child: FUNCD_CHILD_TOO_BIG */
    size_t max_stderr; /* more is dropped */
    int64_t deadline_ms; /* monotonic; reaching it kills the child: FUNCD_CHILD_TIMEOUT */
} funcd_child_spec;

typedef enum funcd_child_end {
    FUNCD_CHILD_EXITED = 0, /* by itself: see `wait_status` */
    FUNCD_CHILD_TIMEOUT,
    FUNCD_CHILD_TOO_BIG,
} funcd_child_end;

/* Runs once, last: the callback may free the child. `out`/`err` belong to
 * the child; take their data with funcd_buf_swap_in. */
typedef void (*funcd_child_done_fn)(funcd_child *c, funcd_child_end end, int wait_status,
                                    funcd_buf *out, funcd_buf *err, void *payload);

int funcd_child_run(funcd_child **out, struct event_base *loop, const funcd_child_spec *spec,
                    funcd_child_done_fn done, void *payload);
/* Kills (and reaps) the child if it still runs; `done` does not run. NULL-safe. */
void funcd_child_free(funcd_child *c);

#endif
