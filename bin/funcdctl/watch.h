/* The watch loop shared by `watch KIND` and `get KIND -w`. */
#ifndef FUNCDCTL_WATCH_H
#define FUNCDCTL_WATCH_H

#include "cli.h"
#include "output.h"

typedef struct ctl_watch_opts {
    const funcd_kind *kind;
    const char *since;         /* start after this resourceVersion; NULL: ADDED for each first */
    int all_namespaces;        /* -A */
    const char *selector;      /* -l, filtered here: the server's watch takes none */
    const char *const *names;  /* only these objects (get NAME... -w); nnames 0: all */
    size_t nnames;
    int event_column;          /* watch: the event type first; get -w: rows only */
    ctl_cols cols;
    int header_printed;        /* get -w printed the table already ... */
    const size_t *widths;      /* ... with these widths (NULL: typical ones) */
} ctl_watch_opts;

/* Streams until the server ends it, an error event, or Ctrl-C (exit 0). */
int ctl_watch(ctl_ctx *ctx, const ctl_watch_opts *o);

#endif
