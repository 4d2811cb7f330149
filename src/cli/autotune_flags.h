/*
 * The autotune flags `qplace autotune` and `qplace quantize --autotune` share: one parser under
 * two spellings (the standalone command's `--timing_runs`, quantize's `--autotune_timing_runs`,
 * as ModelOpt spells them), the latency backend they ask for, the progress line and Ctrl-C.
 *
 *     struct qp_autotune_options o; qp_autotune_options_default(&o);
 *     struct qp_latency_backend *b = NULL;
 *     int rc = cli_autotune_flags(args, &cli_autotune_integrated, &o, &b);
 *     if (rc) return rc;                       // the usage message is printed
 *     cli_autotune_watch(&o, 0);               // progress on stderr, o.stop set by Ctrl-C
 *     struct sigaction old; cli_autotune_sigint(&old);
 *     ... qp_autotune(&o, ...) ...
 *     cli_autotune_sigint_restore(&old);
 *     qp_latency_backend_free(b);
 */
#ifndef QP_CLI_AUTOTUNE_FLAGS_H
#define QP_CLI_AUTOTUNE_FLAGS_H

#include <signal.h>

#include "args.h"
#include "pipeline/autotune.h"

/* quantize's rows for the integrated search (ModelOpt's names; docs/cli.md). */
/* clang-format off */
#define CLI_QUANTIZE_AUTOTUNE_OPTS                                                                 \
    {"autotune", CLI_OPTIONAL, "quick|default|extensive",                                         \
     "choose the placement by measured latency (qplace autotune's search), then quantize it "     \
     "exactly; bare: default"},                                                                    \
    {"autotune_output_dir", CLI_VALUE, "DIR",                                                      \
     "keep the search's files here, resumable (default: a temporary folder, removed)"},           \
    {"autotune_schemes_per_region", CLI_VALUE, "N", "schemes per pattern (overrides the mode)"},   \
    {"autotune_pattern_cache", CLI_VALUE, "FILE", "a pattern_cache.json tried first"},            \
    {"autotune_qdq_baseline", CLI_VALUE, "MODEL", "a Q/DQ model whose placement seeds the search"},\
    {"autotune_state_file", CLI_VALUE, "FILE", "races so far, replayed on a rerun"},              \
    {"autotune_backend", CLI_VALUE, "builtin|trtexec|ort", "latency backend (builtin)"},          \
    {"autotune_use_trtexec", CLI_BOOL, NULL, "the same as --autotune_backend trtexec"},           \
    {"autotune_timing_cache", CLI_VALUE, "FILE", "trtexec: --timingCacheFile"},                   \
    {"autotune_trtexec_args", CLI_VALUE, "ARGS", "trtexec: extra arguments (shell words)"},       \
    {"autotune_warmup_runs", CLI_VALUE, "N", "builtin, ort: untimed runs per measurement (3)"},  \
    {"autotune_timing_runs", CLI_VALUE, "N", "timed runs of each model per race round (10)"}
/* clang-format on */

/* The flag names of one spelling (NULL: the command has no such flag). */
struct cli_autotune_names {
    const char *cmd; /* "autotune" or "quantize", for messages */
    const char *output_dir, *schemes_per_region, *pattern_cache, *qdq_baseline, *state_file;
    const char *backend, *use_trtexec, *timing_cache, *trtexec_args, *plugin_libraries;
    const char *warmup_runs, *timing_runs;
};
extern const struct cli_autotune_names cli_autotune_standalone; /* qplace autotune */
extern const struct cli_autotune_names cli_autotune_integrated; /* quantize --autotune_* */

/* Fills o's output_dir, schemes_per_pattern, pattern_cache_in, qdq_baseline, state_file,
 * race.runs_per_round and n_threads (--threads) from `a`, and creates the backend the flags ask
 * for (--calibration_shapes are its shapes) in *backend_out (free with
 * qp_latency_backend_free). Returns 0, or the exit code after printing the message. */
int cli_autotune_flags(const struct cli_args *a, const struct cli_autotune_names *n,
                       struct qp_autotune_options *o, struct qp_latency_backend **backend_out);

/* qplace autotune's --max_output_drift (a non-negative number, sensitivity's grammar),
 * --drift_samples and --eval_data_path into o. Returns 0, or the exit code after the message. */
int cli_autotune_drift_flags(const struct cli_args *a, struct qp_autotune_options *o);

/* Progress on stderr (autotune_progress.h: a bar on a terminal, else a line per race; with
 * `verbose` a detailed line per race), and o->stop set by Ctrl-C once cli_autotune_sigint has
 * installed the handler. Returns the progress state (for a log hook that clears the bar). */
struct cli_autotune_progress *cli_autotune_watch(struct qp_autotune_options *o, int verbose);
void cli_autotune_sigint(struct sigaction *old_out);
/* Restores the old handler and ends the progress bar's line. */
void cli_autotune_sigint_restore(const struct sigaction *old);

/* ---- quantize --autotune (quantize_autotune.c) ---- */
struct qp_quantize_options;
struct qp_quantize_report;
/* 1 when `a` holds --autotune or any --autotune_* flag. */
int cli_quantize_autotune_wanted(const struct cli_args *a);
/* Checks the combination (--autotune_* without --autotune, a flag that chooses or trims the
 * placement, bf16), runs the search and the quantization of its placement with `q`, prints the
 * search's summary, and hands the quantize report to *report_out. Returns the exit code: 0, 1
 * (usage), 130 (Ctrl-C during the search: nothing written), or cli_fail's. */
int cli_quantize_autotune(const struct cli_args *a, const struct qp_quantize_options *q,
                          struct qp_quantize_report **report_out);

#endif
