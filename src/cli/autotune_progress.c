/* What qplace autotune prints while it searches (autotune_progress.h). */
#include "autotune_progress.h"

#include <math.h>
#include <string.h>

#include "autotune/compare.h"
#include "autotune/scheme.h"
#include "progress.h"

#define BAR_WIDTH 20

void cli_autotune_bar_format(const struct qp_autotune_step *s, char *buf, size_t size) {
    if (!size) return;
    size_t total = s->races_planned, done = s->races_done > total ? total : s->races_done;
    char bar[BAR_WIDTH + 1];
    size_t fill = total ? done * BAR_WIDTH / total : 0;
    for (size_t i = 0; i < BAR_WIDTH; i++)
        bar[i] = i < fill ? '=' : ' ';
    if (fill > 0 && fill < BAR_WIDTH) bar[fill - 1] = '>';
    bar[BAR_WIDTH] = 0;
    char eta[32];
    cli_progress_eta(s->eta_s, eta, sizeof eta);
    snprintf(buf, size, "[%s] %zu/%zu races  pattern %zu/%zu  ETA %s", bar, s->races_done, total,
             s->pattern_k, s->n_patterns, eta);
}

/* What a race's medians time, as a prefix: nothing for whole models (the default timing). */
static const char *timed_what(const struct qp_autotune_step *s) {
    return s->timed == 1   ? "sub-model "
           : s->timed == 2 ? "borderline, as whole models: "
           : s->timed == 3 ? "confirmed on every instance: "
                           : "";
}

void cli_autotune_line_format(const struct qp_autotune_step *s, char *buf, size_t size) {
    if (!size) return;
    if (s->rejected_drift) {
        snprintf(buf, size,
                 "autotune: pattern %zu/%zu, scheme %zu/%zu: drift %.4g over the bound, rejected "
                 "unraced%s [%.1f s, ETA %.0f s]",
                 s->pattern_k, s->n_patterns, s->scheme_j, s->n_schemes, s->drift,
                 s->replayed ? " (from the state file)" : "", s->elapsed_s, s->eta_s);
        return;
    }
    char drift[48] = "";
    if (isfinite(s->drift)) snprintf(drift, sizeof drift, ", drift %.4g", s->drift);
    snprintf(buf, size,
             "autotune: pattern %zu/%zu, scheme %zu/%zu: %s%.4f ms vs best %.4f ms, %s%s%s%s "
             "[%.1f s, ETA %.0f s]",
             s->pattern_k, s->n_patterns, s->scheme_j, s->n_schemes, timed_what(s),
             s->cand_median_ms, s->best_median_ms, qp_latency_verdict_name(s->verdict),
             s->adopted ? ", adopted" : "", drift, s->replayed ? " (from the state file)" : "",
             s->elapsed_s, s->eta_s);
}

/* "{0,2,5}" of the scheme's points into buf, "..." when it does not fit. */
static void format_points(const struct qp_autotune_step *s, char *buf, size_t size) {
    size_t used = 0;
    int w = snprintf(buf, size, "{");
    used = w > 0 ? (size_t)w : 0;
    int first = 1;
    for (size_t k = 0; s->points && k < s->n_points && used < size; k++) {
        if (!qp_scheme_get(s->points, k)) continue;
        if (used + 24 >= size) {
            snprintf(buf + used, size - used, ",...");
            used = strlen(buf);
            break;
        }
        w = snprintf(buf + used, size - used, "%s%zu", first ? "" : ",", k);
        used += w > 0 ? (size_t)w : 0;
        first = 0;
    }
    if (used + 2 <= size) snprintf(buf + used, size - used, "}");
}

void cli_autotune_verbose_format(const struct qp_autotune_step *s, char *buf, size_t size) {
    if (!size) return;
    char pts[256];
    format_points(s, pts, sizeof pts);
    const char *sig = s->signature ? s->signature : "?",
               *src = s->from_cache ? " (pattern cache)" : "";
    const char *rep = s->replayed ? " (from the state file)" : "";
    if (s->rejected_drift) {
        snprintf(buf, size,
                 "autotune: pattern %zu/%zu '%s' scheme %zu/%zu%s points %s of %zu: drift %.4g "
                 "over the bound, rejected unraced%s",
                 s->pattern_k, s->n_patterns, sig, s->scheme_j, s->n_schemes, src, pts, s->n_points,
                 s->drift, rep);
        return;
    }
    char drift[48] = "";
    if (isfinite(s->drift)) snprintf(drift, sizeof drift, ", drift %.4g", s->drift);
    snprintf(buf, size,
             "autotune: pattern %zu/%zu '%s' scheme %zu/%zu%s points %s of %zu: %scandidate "
             "%.4f ms, best %.4f ms (medians), p %.3g: %s%s%s%s",
             s->pattern_k, s->n_patterns, sig, s->scheme_j, s->n_schemes, src, pts, s->n_points,
             timed_what(s), s->cand_median_ms, s->best_median_ms, s->p_value,
             qp_latency_verdict_name(s->verdict), s->adopted ? ", adopted" : ", not adopted", drift,
             rep);
}

void cli_autotune_progress_clear(struct cli_autotune_progress *p) {
    if (!p->drawn) return;
    fprintf(p->f, "\r\033[K");
    p->drawn = 0;
}

void cli_autotune_progress_end(struct cli_autotune_progress *p) {
    if (!p->drawn) return;
    fputc('\n', p->f);
    fflush(p->f);
    p->drawn = 0;
}

void cli_autotune_progress_step(const struct qp_autotune_step *s, void *user) {
    struct cli_autotune_progress *p = user;
    /* a signature can be long: the line is cut, not the program */
    char line[1024];
    cli_autotune_progress_clear(p);
    if (p->verbose) {
        cli_autotune_verbose_format(s, line, sizeof line);
        fprintf(p->f, "%s\n", line);
    }
    if (p->bar) {
        cli_autotune_bar_format(s, line, sizeof line);
        fprintf(p->f, "%s", line);
        p->drawn = 1;
    } else if (!p->verbose) {
        cli_autotune_line_format(s, line, sizeof line);
        fprintf(p->f, "%s\n", line);
    }
    fflush(p->f);
}
