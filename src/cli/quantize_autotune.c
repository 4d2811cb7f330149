/* qplace quantize --autotune[=MODE]: the search's flags, the search, and its summary; the
 * quantization that follows prints as any other (quantize.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune_flags.h"
#include "cli.h"
#include "pipeline/quantize_autotune.h"

/* Flags that choose a placement, or drop edges of the one applied: each would make the written
 * model differ from the search's placement.json. */
static const char *const conflicts[] = {
    "placement_in",        "rules",
    "disable_mha_qdq",     "op_types_to_quantize",
    "op_types_to_exclude", "nodes_to_quantize",
    "nodes_to_exclude",    "max_output_drift",
    "min_top1_agreement",
};

int cli_quantize_autotune_wanted(const struct cli_args *a) {
    if (cli_has(a, "autotune")) return 1;
    for (size_t i = 0; i < a->n_flags; i++)
        if (strncmp(a->opts[a->flags[i].opt].name, "autotune_", 9) == 0) return 1;
    return 0;
}

static int usage(const char *msg, const char *arg) {
    fprintf(stderr, "qplace quantize: ");
    fprintf(stderr, msg, arg);
    fprintf(stderr, "\nTry 'qplace help quantize'.\n");
    return 1;
}

/* The flags quantize's own parsing does not cover; 0 or the exit code. */
static int check_flags(const struct cli_args *a, const struct qp_quantize_options *q,
                       struct qp_autotune_options *o) {
    if (!cli_has(a, "autotune")) {
        for (size_t i = 0; i < a->n_flags; i++) {
            const char *n = a->opts[a->flags[i].opt].name;
            if (strncmp(n, "autotune_", 9) == 0)
                return usage("--%s needs --autotune[=quick|default|extensive]", n);
        }
    }
    for (size_t i = 0; i < sizeof conflicts / sizeof conflicts[0]; i++)
        if (cli_has(a, conflicts[i]))
            return usage("--%s cannot be combined with --autotune: the search chooses the "
                         "placement and the model is written with exactly it (seed the search "
                         "with a Q/DQ model through --autotune_qdq_baseline, or run `qplace "
                         "autotune`, then quantize --placement_in DIR/placement.json with "
                         "your flags)",
                         conflicts[i]);
    const char *mode = cli_value(a, "autotune", "default");
    int m = qp_autotune_mode_parse(mode);
    if (m < 0) return usage("--autotune=%s: the mode is quick, default or extensive", mode);
    o->mode = (enum qp_autotune_mode)m;
    if (q->high_precision != QP_DTYPE_FLOAT && q->high_precision != QP_DTYPE_FLOAT16)
        return usage("--high_precision_dtype %s with --autotune: the search times fp32 or fp16 "
                     "models",
                     "bf16");
    o->high_precision = q->high_precision;
    o->quant_mode = q->mode;
    return 0;
}

static void print_search(const struct qp_quantize_autotune_report *r,
                         const struct qp_latency_backend *b) {
    const struct qp_autotune_report *s = r->search;
    printf("qplace quantize --autotune: %zu regions, %zu patterns, %zu insertion points (%s "
           "calibration for the search)\n",
           s->n_regions, s->n_patterns, s->n_points, s->calibration_source);
    printf("  backend         %s (%s)\n", b->name, b->detail);
    printf("  races           %zu measured (%zu from the state file), %zu adopted, %zu skipped\n",
           s->n_measured, s->n_replayed, s->n_adopted, s->n_skipped);
    if (s->n_adopted)
        printf("  seed -> best    %.4f -> %.4f ms median (%.3fx)\n", s->seed_median_ms,
               s->best_median_ms,
               s->best_median_ms > 0 ? s->seed_median_ms / s->best_median_ms : 0.0);
    else
        printf("  seed -> best    %.4f ms median; best is the seed (no scheme was faster)\n",
               s->seed_median_ms);
    printf("  guard           %s: best is %.3fx the model without Q/DQ (%.4f ms); %s\n",
           s->guard_passed ? "passed" : "FAILED",
           s->guard.median_a_ms > 0 ? s->guard.median_b_ms / s->guard.median_a_ms : 0.0,
           s->reference_median_ms,
           s->guard_passed ? "quantizing the search's best placement"
                           : "not 1.02x faster, so the placement is the empty one: the model "
                             "is written without Q/DQ");
    if (r->temporary_dir)
        printf("  search folder   temporary, removed (--autotune_output_dir keeps it)\n");
    else
        printf("  search folder   %s/{placement.json, log.jsonl, pattern_cache.json, "
               "autotune_state.json, optimized_final.onnx}\n",
               s->output_dir);
    printf("  search time     %.1f s\n", s->seconds);
}

int cli_quantize_autotune(const struct cli_args *a, const struct qp_quantize_options *q,
                          struct qp_quantize_report **report_out) {
    struct qp_autotune_options o;
    qp_autotune_options_default(&o);
    int rc = check_flags(a, q, &o);
    if (rc) return rc;
    o.onnx_path = q->onnx_path;
    o.data = q->data;
    o.calibration_data_path = q->calibration_data_path;
    o.calibration_shapes = q->calibration_shapes;
    struct qp_latency_backend *b = NULL;
    if ((rc = cli_autotune_flags(a, &cli_autotune_integrated, &o, &b)) != 0) return rc;
    o.backend = b;
    cli_autotune_watch(&o, 0);
    struct sigaction old;
    cli_autotune_sigint(&old);
    struct qp_error err = {0};
    struct qp_quantize_autotune_report *r = NULL;
    enum qp_status st = qp_quantize_autotune_search(q, &o, &r, &err);
    cli_autotune_sigint_restore(&old); /* Ctrl-C during the quantization ends the process */
    if (st == QP_OK && !r->interrupted) {
        print_search(r, b);
        fflush(stdout);
        st = qp_quantize_autotune_apply(q, r, &err);
    }
    if (st != QP_OK) {
        rc = cli_fail(&err);
    } else if (r->interrupted) {
        fprintf(stderr,
                "qplace quantize: interrupted during the autotune search; nothing "
                "written%s\n",
                r->temporary_dir ? " (the search's folder was temporary: a rerun starts over)"
                                 : "; the same command resumes from the state file");
        rc = 130;
    } else {
        *report_out = r->quantize;
        r->quantize = NULL;
    }
    qp_quantize_autotune_report_free(r);
    qp_latency_backend_free(b);
    return rc;
}
