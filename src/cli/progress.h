/*
 * A progress report for long CLI commands (calibration, sensitivity, autotune): on a terminal a
 * bar redrawn in place, elsewhere (CI logs, pipes) plain lines at every tenth of the work, and
 * nothing when quiet. Always on a stream the caller picks (stderr: stdout stays for results).
 *
 *     struct cli_progress p;
 *     cli_progress_start(&p, stderr, "calibrate", "samples", total, quiet ? CLI_PROGRESS_QUIET
 *                                                                          : CLI_PROGRESS_AUTO);
 *     for (...) cli_progress_update(&p, done);
 *     cli_progress_finish(&p, done);
 *
 * The bar:   calibrate [##########..........]  100/200 samples  41.7 samples/s  ETA 2s
 * A line:    calibrate: 100/200 samples (50%), 41.7 samples/s, ETA 2s
 * Finish:    calibrate: 200 samples in 4.8 s (41.7 samples/s)
 * With total 0 (unknown) there is no bar, percentage or ETA. Bar redraws are limited to ten a
 * second; a plain line is also printed when 10 s passed since the last one.
 */
#ifndef QP_CLI_PROGRESS_H
#define QP_CLI_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

enum cli_progress_mode {
    CLI_PROGRESS_AUTO,  /* a bar when the stream is a terminal, else lines */
    CLI_PROGRESS_BAR,   /* a bar redrawn with '\r' */
    CLI_PROGRESS_LINES, /* plain lines */
    CLI_PROGRESS_QUIET  /* nothing */
};

struct cli_progress {
    FILE *f;
    const char *label, *unit; /* borrowed for the progress's lifetime */
    uint64_t total;
    enum cli_progress_mode mode; /* resolved: never AUTO after start */
    double t0, last_draw;
    int last_tenth;
    int drawn; /* a bar is on the current line */
};

void cli_progress_start(struct cli_progress *p, FILE *f, const char *label, const char *unit,
                        uint64_t total, enum cli_progress_mode mode);
void cli_progress_update(struct cli_progress *p, uint64_t done);
/* Ends the bar's line and prints the summary (not when quiet). */
void cli_progress_finish(struct cli_progress *p, uint64_t done);

/* Formats the status text for `done` after `elapsed` seconds: the bar form (bar != 0) or the
 * line form; exposed for tests. Always NUL-terminates `buf` (size > 0). */
void cli_progress_format(const struct cli_progress *p, uint64_t done, double elapsed, int bar,
                         char *buf, size_t size);

/* A time left as "42s", "1m20s" or "2h05m"; "?" when negative or beyond ~4 months. */
void cli_progress_eta(double seconds, char *buf, size_t size);

#endif
