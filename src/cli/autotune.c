/* qplace autotune: Q/DQ placement chosen by measured latency (docs/autotune.md, "The search"). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autotune/latency.h"
#include "autotune_flags.h"
#include "autotune_progress.h"
#include "cli.h"
#include "pipeline/autotune.h"

const struct cli_opt cli_autotune_opts[] = {
    {"onnx_path", CLI_VALUE, "MODEL", "the float model (required)"},
    {"output_dir", CLI_VALUE, "DIR", "where the results go (autotune_out)"},
    {"mode", CLI_VALUE, "quick|default|extensive", "8, 16 or 32 schemes per pattern (default)"},
    {"schemes_per_region", CLI_VALUE, "N", "schemes per pattern (overrides --mode)"},
    {"backend", CLI_VALUE, "builtin|trtexec|ort", "latency backend (builtin)"},
    {"use_trtexec", CLI_BOOL, NULL, "the same as --backend trtexec"},
    {"timing_cache", CLI_VALUE, "FILE", "trtexec: --timingCacheFile"},
    {"trtexec_benchmark_args", CLI_VALUE, "ARGS", "trtexec: extra arguments (shell words)"},
    {"plugin_libraries", CLI_LIST, "LIB", "trtexec: plugin libraries (--staticPlugins)"},
    {"warmup_runs", CLI_VALUE, "N", "builtin, ort: untimed runs per measurement (3)"},
    {"timing_runs", CLI_VALUE, "N", "timed runs of each model per race round (10)"},
    CLI_DATA_OPTS,
    {"qdq_baseline", CLI_VALUE, "MODEL",
     "a Q/DQ model of this graph whose placement seeds the search (default: the trt policy)"},
    {"state_file", CLI_VALUE, "FILE",
     "races measured so far, replayed on a rerun (<output_dir>/autotune_state.json)"},
    {"pattern_cache", CLI_VALUE, "FILE", "a pattern_cache.json whose schemes are tried first"},
    {"quant_type", CLI_VALUE, "int8|fp8", "what the quantizers hold (int8)"},
    {"high_precision_dtype", CLI_VALUE, "fp32|fp16", "precision of what is not quantized (fp32)"},
    CLI_THREADS_OPT,
    {"node_filter_list", CLI_VALUE, "FILE",
     "fnmatch patterns over node names, one a line: only regions with a matching node are "
     "searched"},
    {"default_dq_dtype", CLI_VALUE, "float32|float16",
     "ModelOpt's name for --high_precision_dtype (bfloat16 is refused)"},
    {"verbose", CLI_BOOL, NULL, "a line per race (pattern, points, medians, verdict); debug log"},
    {"v", CLI_ALIAS, "verbose", NULL},
    {"m", CLI_ALIAS, "onnx_path", NULL},
    {"o", CLI_ALIAS, "output_dir", NULL},
    {"s", CLI_ALIAS, "schemes_per_region", NULL},
    {"max_output_drift", CLI_VALUE, "D",
     "reject schemes whose output drift (kl_div, as sensitivity's) is > D (or the seed's)"},
    {"eval_data_path", CLI_VALUE, "FILE|DIR",
     "samples the drift is measured on (default: the calibration data, else synthetic)"},
    {"drift_samples", CLI_VALUE, "N", "the first N evaluation samples (32; 0: all)"},
    {"timing", CLI_VALUE, "auto|region|region_all|whole",
     "time each scheme on its pattern's sub-model (region: one instance per shape, "
     "region_all: every instance) or on the whole model (auto: whole)"},
    {0},
};

const char cli_autotune_details[] =
    "Seeds the placement with the trt policy's (or --qdq_baseline's), cuts the graph into\n"
    "regions whose repeated blocks share a pattern, and for each pattern (largest first) tries\n"
    "schemes: which of its insertion points hold Q/DQ, applied to every instance. Each\n"
    "candidate model is raced against the current best (alternating runs, Mann-Whitney U at\n"
    "95%, 1% minimum effect) and adopted only when faster. Scales come from one calibration of\n"
    "every insertion point's tensor (--calibration_data_path, else synthetic data). At the end\n"
    "the best model is kept only if at least 1.02x faster than the model without Q/DQ at the\n"
    "same high precision. --output_dir receives placement.json, optimized_final.onnx,\n"
    "log.jsonl (one line per race), pattern_cache.json and autotune_state.json: every race,\n"
    "so that the same command after Ctrl-C (exit 130) or a kill replays them instead of\n"
    "measuring again. Every placement's output drift from the float model (kl_div, summed over\n"
    "outputs, as sensitivity's --max_output_drift) is measured before its race; with\n"
    "--max_output_drift D a scheme over D (or over the seed's drift, when the seed is over D)\n"
    "is rejected unraced. pareto.json holds the latency/drift frontier of the placements\n"
    "measured. Progress goes to stderr, the summary to stdout.\n";

static int bad_usage(const char *fmt, const char *a) {
    fprintf(stderr, "qplace autotune: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\nTry 'qplace help autotune'.\n");
    return 1;
}

/* -v: the log hook lets the autotune module's debug and info lines through (messages starting
 * "autotune:"), the other modules' from warnings up, as without -v. */
static void verbose_log(enum qp_log_level level, const char *msg, void *user) {
    if (level < QP_LOG_WARN && strncmp(msg, "autotune:", 9) != 0) return;
    static const char *const prefix[] = {"debug", "info", "warning", "error"};
    cli_autotune_progress_clear(user);
    fprintf(stderr, "qplace: %s: %s\n", prefix[level], msg);
}

/* --high_precision_dtype and ModelOpt's --default_dq_dtype into *out; 0 or the exit code. */
static int parse_precision(const struct cli_args *a, enum qp_dtype *out) {
    const char *hp = cli_value(a, "high_precision_dtype", NULL);
    const char *dq = cli_value(a, "default_dq_dtype", NULL);
    enum qp_dtype from_dq = QP_DTYPE_UNDEFINED;
    if (dq && strcmp(dq, "float32") == 0)
        from_dq = QP_DTYPE_FLOAT;
    else if (dq && strcmp(dq, "float16") == 0)
        from_dq = QP_DTYPE_FLOAT16;
    else if (dq && strcmp(dq, "bfloat16") == 0)
        return bad_usage("%s", "--default_dq_dtype bfloat16 is not supported: the builtin "
                               "engine has no bfloat16 kernels, so the model without Q/DQ that "
                               "the guard races cannot run; use float32 or float16");
    else if (dq)
        return bad_usage("--default_dq_dtype must be float32 or float16, not '%s'", dq);
    *out = from_dq != QP_DTYPE_UNDEFINED ? from_dq : QP_DTYPE_FLOAT;
    if (!hp) return 0;
    enum qp_dtype from_hp;
    if (strcmp(hp, "fp32") == 0)
        from_hp = QP_DTYPE_FLOAT;
    else if (strcmp(hp, "fp16") == 0)
        from_hp = QP_DTYPE_FLOAT16;
    else
        return bad_usage("--high_precision_dtype must be fp32 or fp16, not '%s'", hp);
    if (from_dq != QP_DTYPE_UNDEFINED && from_dq != from_hp) {
        fprintf(stderr,
                "qplace autotune: --default_dq_dtype %s and --high_precision_dtype %s disagree "
                "(they name the same thing: give one)\nTry 'qplace help autotune'.\n",
                dq, hp);
        return 1;
    }
    *out = from_hp;
    return 0;
}

/* Drift lines and the latency/drift frontier of pareto.json. */
static void print_accuracy(const struct qp_autotune_report *r) {
    printf("  drift           kl_div on %llu samples of the %s: seed %.4g, final %.4g\n",
           (unsigned long long)r->drift_samples, r->drift_source, r->seed_drift, r->final_drift);
    if (r->max_output_drift >= 0 && r->seed_over_bound)
        printf("  drift bound     WARNING: the seed's drift %.4g already exceeds "
               "--max_output_drift %g; schemes were held to the seed's drift instead (%zu "
               "rejected)\n",
               r->seed_drift, r->max_output_drift, r->n_rejected_drift);
    else if (r->max_output_drift >= 0)
        printf("  drift bound     %g: %zu schemes rejected unraced\n", r->max_output_drift,
               r->n_rejected_drift);
    printf("  frontier        latency/drift (pareto.json), fastest first:\n");
    printf("      median ms        drift  placement%s\n",
           r->timing_region ? "  (~: whole-model estimate from a sub-model race)" : "");
    for (size_t i = 0; i < r->n_frontier; i++) {
        const struct qp_autotune_front *f = &r->frontier[i];
        printf("   %c%11.4f  %11.4g  %s", f->estimated ? '~' : ' ', f->median_ms, f->drift,
               f->label);
        if (f->pattern >= 0) printf(" (pattern %ld, %zu points)", f->pattern, f->n_points_on);
        printf("%s\n", f->final ? "  <- optimized_final.onnx" : "");
    }
}

static void print_summary(const struct qp_autotune_report *r, const struct qp_latency_backend *b) {
    printf("autotune: %zu regions, %zu patterns, %zu insertion points (%s calibration)\n",
           r->n_regions, r->n_patterns, r->n_points, r->calibration_source);
    printf("  backend         %s (%s)\n", b->name, b->detail);
    printf("  schemes         %zu measured (%zu from the state file), %zu adopted, %zu skipped\n",
           r->n_measured, r->n_replayed, r->n_adopted, r->n_skipped);
    if (r->n_regions_filtered)
        printf("  node filter     %zu of %zu regions searched, the rest keep the seed's choices\n",
               r->n_regions - r->n_regions_filtered, r->n_regions);
    if (r->n_cache_stops)
        printf("  pattern cache   %zu patterns stopped early: the cache's best scheme held\n",
               r->n_cache_stops);
    /* The two medians come from different races (the first and the last), so on a machine
     * whose speed drifts their ratio says little when nothing was adopted: say so instead. */
    printf("  timing          %s\n", r->timing_region
                                         ? "region (each pattern's sub-model; medians below are "
                                           "whole-model: the seed timed once, best in the guard)"
                                         : "whole model");
    if (r->n_confirmed)
        printf("  confirmed       %zu races of one instance per shape raced again on every "
               "instance: %zu adopted\n",
               r->n_confirmed, r->n_confirmed_adopted);
    if (r->n_escalated)
        printf(
            "  borderline      %zu sub-model races within the minimum effect raced again as whole "
            "models: %zu adopted\n",
            r->n_escalated, r->n_escalated_adopted);
    if (r->n_not_replicated)
        printf("  replicated      %zu FASTER verdict%s did not hold on fresh sessions: not "
               "adopted\n",
               r->n_not_replicated, r->n_not_replicated == 1 ? "" : "s");
    if (r->region_checked)
        printf("  region check    best %.4f ms, seed %.4f ms as whole models: %s%s\n",
               r->region_best_ms, r->region_seed_ms,
               qp_latency_verdict_name(r->region_check.verdict),
               r->region_reverted ? "; the sub-models' gains did not add up, the seed's placement "
                                    "is kept"
                                  : "");
    printf("  seed            %.4f ms median (%s)\n", r->seed_median_ms,
           r->timing_region ? "whole seed" : "first race");
    const char *last = r->timing_region ? "guard race" : "last race";
    if (r->region_reverted)
        printf("  best            the seed: the region check kept its placement (%.4f ms median "
               "in the %s)\n",
               r->best_median_ms, last);
    else if (r->n_adopted && r->region_checked) /* a ratio from one race: the region check's */
        printf("  best            %.4f ms median (%s); %.3fx the seed raced against it (region "
               "check)\n",
               r->best_median_ms, last,
               r->region_best_ms > 0 ? r->region_seed_ms / r->region_best_ms : 0.0);
    else if (r->n_adopted)
        printf("  best            %.4f ms median (%s; %.3fx the seed's first median, races "
               "apart)\n",
               r->best_median_ms, last,
               r->best_median_ms > 0 ? r->seed_median_ms / r->best_median_ms : 0.0);
    else
        printf("  best            the seed: no scheme was faster at the race's confidence "
               "(%.4f ms median in the %s)\n",
               r->best_median_ms, last);
    printf("  without Q/DQ    %.4f ms median\n", r->reference_median_ms);
    printf("  guard           %s: best is %.3fx the model without Q/DQ (%s, p %.3g); %s\n",
           r->guard_passed ? "passed" : "failed",
           r->guard.median_a_ms > 0 ? r->guard.median_b_ms / r->guard.median_a_ms : 0.0,
           qp_latency_verdict_name(r->guard.verdict), r->guard.p_value,
           r->guard_passed ? "optimized_final.onnx holds the Q/DQ model"
                           : "not 1.02x faster: optimized_final.onnx is the model without Q/DQ");
    print_accuracy(r);
    printf("  output          %s/{placement.json, optimized_final.onnx, log.jsonl, "
           "pattern_cache.json, pareto.json, autotune_state.json}\n",
           r->output_dir);
    printf("  time            %.1f s (the search: %.1f s; measuring drift: %.1f s)\n", r->seconds,
           r->search_seconds, r->drift_seconds);
}

int cli_autotune_run(const struct cli_args *args) {
    struct qp_autotune_options o;
    qp_autotune_options_default(&o);
    o.onnx_path = cli_value(args, "onnx_path", NULL);
    if (!o.onnx_path) return bad_usage("%s", "--onnx_path is required");
    o.output_dir = cli_value(args, "output_dir", NULL);
    const char *s;
    if ((s = cli_value(args, "mode", NULL))) {
        int m = qp_autotune_mode_parse(s);
        if (m < 0) return bad_usage("--mode must be quick, default or extensive, not '%s'", s);
        o.mode = (enum qp_autotune_mode)m;
    }
    if ((s = cli_value(args, "timing", NULL))) {
        int tm = qp_autotune_timing_parse(s);
        if (tm < 0)
            return bad_usage("--timing must be auto, region, region_all or whole, not '%s'", s);
        o.timing = (enum qp_autotune_timing)tm;
    }
    int rc;
    if ((rc = parse_precision(args, &o.high_precision)) != 0) return rc;
    const char *qt = cli_value(args, "quant_type", "int8");
    if (strcmp(qt, "int8") == 0)
        o.quant_mode = QP_QUANT_INT8;
    else if (strcmp(qt, "fp8") == 0)
        o.quant_mode = QP_QUANT_FP8;
    else
        return bad_usage("--quant_type must be int8 or fp8, not '%s'", qt);
    struct qp_data_options dopt;
    if ((rc = cli_data_options(args, "autotune", &dopt)) != 0) return rc;
    o.data = &dopt;
    o.calibration_data_path = cli_value(args, "calibration_data_path", NULL);
    o.calibration_shapes = cli_value(args, "calibration_shapes", NULL);
    struct qp_latency_backend *b = NULL;
    if ((rc = cli_autotune_flags(args, &cli_autotune_standalone, &o, &b)) != 0) return rc;
    o.backend = b;
    if ((rc = cli_autotune_drift_flags(args, &o)) != 0) {
        qp_latency_backend_free(b);
        return rc;
    }
    o.node_filter_list = cli_value(args, "node_filter_list", NULL);
    struct cli_autotune_progress *progress = cli_autotune_watch(&o, cli_has(args, "verbose"));
    if (progress->verbose) qp_log_set_hook(verbose_log, progress);
    struct sigaction old;
    cli_autotune_sigint(&old);
    struct qp_error err = {0};
    struct qp_autotune_report *r = NULL;
    enum qp_status st = qp_autotune(&o, &r, &err);
    cli_autotune_sigint_restore(&old);
    if (st != QP_OK) {
        rc = cli_fail(&err);
    } else if (r->interrupted) {
        fprintf(stderr,
                "qplace autotune: interrupted after %zu races; the same command resumes from "
                "%s\n",
                r->n_measured, o.state_file ? o.state_file : "the output folder's state file");
        rc = 130;
    } else {
        print_summary(r, b);
        rc = 0;
    }
    qp_autotune_report_free(r);
    qp_latency_backend_free(b);
    return rc;
}
