/* Progress bar / progress lines (progress.h). */
#include "progress.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"

#define BAR_WIDTH 20

void cli_progress_eta(double s, char *buf, size_t size) {
    if (s < 0 || s > 1e7) {
        snprintf(buf, size, "?");
    } else if (s < 60) {
        snprintf(buf, size, "%.0fs", s);
    } else if (s < 3600) {
        snprintf(buf, size, "%dm%02ds", (int)(s / 60), (int)s % 60);
    } else {
        snprintf(buf, size, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    }
}

void cli_progress_format(const struct cli_progress *p, uint64_t done, double elapsed, int bar,
                         char *buf, size_t size) {
    if (!size) return;
    double rate = elapsed > 0 ? (double)done / elapsed : 0;
    char eta[32] = "?";
    if (p->total && rate > 0 && done <= p->total)
        cli_progress_eta((double)(p->total - done) / rate, eta, sizeof eta);
    if (bar && p->total) {
        char bars[BAR_WIDTH + 1];
        uint64_t d = done > p->total ? p->total : done;
        int fill = (int)((d * BAR_WIDTH) / p->total);
        for (int i = 0; i < BAR_WIDTH; i++)
            bars[i] = i < fill ? '#' : '.';
        bars[BAR_WIDTH] = '\0';
        snprintf(buf, size, "%s [%s] %llu/%llu %s  %.1f %s/s  ETA %s", p->label, bars,
                 (unsigned long long)done, (unsigned long long)p->total, p->unit, rate, p->unit,
                 eta);
    } else if (p->total) {
        snprintf(buf, size, "%s: %llu/%llu %s (%d%%), %.1f %s/s, ETA %s", p->label,
                 (unsigned long long)done, (unsigned long long)p->total, p->unit,
                 (int)(done >= p->total ? 100 : done * 100 / p->total), rate, p->unit, eta);
    } else {
        snprintf(buf, size, "%s: %llu %s, %.1f %s/s", p->label, (unsigned long long)done, p->unit,
                 rate, p->unit);
    }
}

void cli_progress_start(struct cli_progress *p, FILE *f, const char *label, const char *unit,
                        uint64_t total, enum cli_progress_mode mode) {
    memset(p, 0, sizeof *p);
    p->f = f;
    p->label = label;
    p->unit = unit;
    p->total = total;
    if (mode == CLI_PROGRESS_AUTO) mode = isatty(fileno(f)) ? CLI_PROGRESS_BAR : CLI_PROGRESS_LINES;
    p->mode = mode;
    p->t0 = p->last_draw = qp_clock_seconds();
}

void cli_progress_update(struct cli_progress *p, uint64_t done) {
    if (p->mode == CLI_PROGRESS_QUIET) return;
    double t = qp_clock_seconds();
    char line[256];
    if (p->mode == CLI_PROGRESS_BAR) {
        if (p->drawn && t - p->last_draw < 0.1) return;
        cli_progress_format(p, done, t - p->t0, 1, line, sizeof line);
        /* \033[K clears what a longer earlier draw left behind. */
        fprintf(p->f, "\r%s\033[K", line);
        fflush(p->f);
        p->drawn = 1;
        p->last_draw = t;
        return;
    }
    int tenth = p->total ? (int)((done >= p->total ? p->total : done) * 10 / p->total) : 0;
    if (tenth <= p->last_tenth && t - p->last_draw < 10) return;
    p->last_tenth = tenth > p->last_tenth ? tenth : p->last_tenth;
    cli_progress_format(p, done, t - p->t0, 0, line, sizeof line);
    fprintf(p->f, "%s\n", line);
    fflush(p->f);
    p->last_draw = t;
}

void cli_progress_finish(struct cli_progress *p, uint64_t done) {
    if (p->mode == CLI_PROGRESS_QUIET) return;
    double el = qp_clock_seconds() - p->t0;
    if (p->mode == CLI_PROGRESS_BAR && p->drawn) fprintf(p->f, "\r\033[K");
    fprintf(p->f, "%s: %llu %s in %.1f s (%.1f %s/s)\n", p->label, (unsigned long long)done,
            p->unit, el, el > 0 ? (double)done / el : 0.0, p->unit);
    fflush(p->f);
}
