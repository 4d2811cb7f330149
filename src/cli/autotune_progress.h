/*
 * What `qplace autotune` prints on stderr while it searches (src/cli/autotune.c): on a terminal
 * one line redrawn in place,
 *
 *     [=======>            ] 12/38 races  pattern 3/6  ETA 1m20s
 *
 * elsewhere (pipes, CI logs) a line per race, as before:
 *
 *     autotune: pattern 3/6, scheme 2/8: 1.2340 ms vs best 1.3000 ms, faster, adopted [4.1 s, ETA
 * 80 s]
 *
 * and with -v (either way) a line per race with the pattern's signature, the scheme's points,
 * both medians, the p-value and the verdict, printed above the bar on a terminal.
 *
 *     struct cli_autotune_progress p = {.f = stderr, .bar = isatty(2), .verbose = v};
 *     o.progress = cli_autotune_progress_step; o.progress_user = &p;
 *     ... qp_autotune(&o, ...) ...
 *     cli_autotune_progress_end(&p);             // ends the bar's line
 */
#ifndef QP_CLI_AUTOTUNE_PROGRESS_H
#define QP_CLI_AUTOTUNE_PROGRESS_H

#include <stddef.h>
#include <stdio.h>

#include "pipeline/autotune.h"

struct cli_autotune_progress {
    FILE *f;
    int bar;     /* redraw one line (a terminal) */
    int verbose; /* a detailed line per race */
    int drawn;   /* a bar is on the current line */
};

/* The bar's text for step `s`: a 20-character bar, races done/planned, the pattern, the ETA.
 * Always NUL-terminates `buf` (size > 0). */
void cli_autotune_bar_format(const struct qp_autotune_step *s, char *buf, size_t size);
/* The line-per-race text (no newline). */
void cli_autotune_line_format(const struct qp_autotune_step *s, char *buf, size_t size);
/* The -v text: pattern, signature, points, medians, p-value, verdict (no newline). */
void cli_autotune_verbose_format(const struct qp_autotune_step *s, char *buf, size_t size);

/* A qp_autotune_progress_fn; `user` is a struct cli_autotune_progress. */
void cli_autotune_progress_step(const struct qp_autotune_step *s, void *user);
/* Clears a drawn bar (before other output on the same stream). */
void cli_autotune_progress_clear(struct cli_autotune_progress *p);
/* Ends a drawn bar's line with a newline, so that the last state stays visible. */
void cli_autotune_progress_end(struct cli_autotune_progress *p);

#endif
