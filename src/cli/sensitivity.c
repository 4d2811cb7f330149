/* qplace sensitivity: rank the targets of a placement by the output drift their quantization
 * causes, pick exclusions, and optionally meet an accuracy budget (docs/sensitivity.md). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/data.h"
#include "cli.h"
#include "core/clock.h"
#include "pipeline/sensitivity.h"
#include "progress.h"

const struct cli_opt cli_sensitivity_opts[] = {
    {"onnx_path", CLI_VALUE, "MODEL", "the float model (required)"},
    CLI_DATA_OPTS,
    {"num_calib_samples", CLI_VALUE, "N", "synthetic samples without data (100)"},
    {"num_synthetic_samples", CLI_VALUE, "N", "the same as --num_calib_samples (older name)"},
    CLI_CALIBRATION_METHOD_OPT,
    {"percentile", CLI_VALUE, "P", "percentile for --calibration_method percentile (99.999)"},
    {"ranges_in", CLI_VALUE, "RANGES.json",
     "ranges from qplace calibrate instead of calibrating (every placement tensor needs one)"},
    {"placement_in", CLI_VALUE, "FILE", "the placement to analyse (default: the trt policy)"},
    {"granularity", CLI_VALUE, "op_type|node", "targets (default op_type)"},
    {"metric", CLI_VALUE, "kl_div|mse|cos", "distance to the float outputs (default kl_div)"},
    {"target_precision", CLI_VALUE, "int8|fp8", "quantized type (default int8)"},
    CLI_WEIGHT_CLIPPING_OPT,
    {"probe", CLI_VALUE, "quantize_one|exclude_one",
     "quantize only the target, or everything but it (default quantize_one)"},
    {"op_types_scope", CLI_LIST, "OP",
     "probe these op types, also where the placement does not quantize them (comma lists)"},
    {"cache_bytes", CLI_VALUE, "N", "reference activation cache (K/M/G suffixes; 1G)"},
    {"no_incremental", CLI_BOOL, NULL, "run every probe as a full pass (same scores, slower)"},
    {"output_json", CLI_VALUE, "FILE", "results (<model stem>.sensitivity.json)"},
    {"show_zero_scores", CLI_BOOL, NULL, "list targets whose score is 0 in the table"},
    {"calibration_eps", CLI_LIST, "EP", "accepted; qplace runs its own CPU engine"},
    {"coverage", CLI_VALUE, "F", "picker: exclude the top targets holding up to F of the mass"},
    {"threshold", CLI_VALUE, "T", "picker: exclude targets (groups) scoring above T"},
    {"max_nodes", CLI_VALUE, "N", "picker: exclude at most N targets (groups)"},
    {"min_score_floor", CLI_VALUE, "F", "picker: never exclude a score below F (0)"},
    {"near_tie_ratio", CLI_VALUE, "R", "picker: near-tie warning ratio (0.99; 0 disables)"},
    {"blocks", CLI_VALUE, "FILE", "picker: JSON {group: [regex, ...]} grouping targets"},
    {"block_agg", CLI_VALUE, "sum|max|mean", "picker: group score (default sum)"},
    {"max_output_drift", CLI_VALUE, "D",
     "exclude top targets (groups) one at a time until the model's drift is <= D"},
    {"min_top1_agreement", CLI_VALUE, "P",
     "exclude top targets (groups) one at a time until every class-score output's argmax "
     "agrees with the float model's on a fraction >= P of its rows (0 < P <= 1)"},
    {"exclusions_out", CLI_VALUE, "FILE",
     "write the exclusions for qplace quantize --nodes_to_exclude @FILE"},
    {"placement_out", CLI_VALUE, "FILE",
     "write the placement minus the exclusions (default with a budget: "
     "<model stem>.sensitivity.placement.json)"},
    CLI_THREADS_OPT,
    {"probe_workers", CLI_VALUE, "N",
     "probes side by side, each on its own session (0: one per thread, memory permitting)"},
    {"quiet", CLI_BOOL, NULL, "no progress bar and no table"},
    {0},
};

const char cli_sensitivity_details[] =
    "Targets are the op types (--granularity op_type) or nodes (node) that the placement (the\n"
    "trt policy, or --placement_in) quantizes. Each target's probe is the sub-placement of its\n"
    "edges and weights: quantized alone (--probe quantize_one) or everything but it\n"
    "(exclude_one). One calibration of the full placement gives the scales of every probe.\n"
    "Probes run in qplace's engine with edge overlays (fake quantization) and re-run only the\n"
    "nodes downstream of their edges from a cached float reference (--no_incremental: full\n"
    "runs; same scores). A score is the metric per sample (float64), averaged over samples and\n"
    "summed over graph outputs. Targets whose probe quantizes nothing are listed as unprobed,\n"
    "those whose evaluation fails as failed, never as a score of 0. --op_types_scope limits\n"
    "the targets to those op types; with quantize_one a scoped op type the placement does not\n"
    "quantize is probed on the inputs the trt policy quantizes for a quantizable op.\n"
    "The table goes to stderr, the JSON to --output_json. Any picker flag adds an exclusion\n"
    "list (ModelOpt's suggest_exclusion); --exclusions_out writes it as exact-name regexes for\n"
    "qplace quantize --nodes_to_exclude @FILE. --max_output_drift D excludes the highest-ranked\n"
    "targets (or --blocks groups) one at a time until the whole quantized model's drift (the\n"
    "same metric) is at most D, and writes that list and its placement. --min_top1_agreement P\n"
    "does the same until, on every output holding class scores (rank >= 2, last dim >= 2), the\n"
    "argmax of at least a fraction P of the rows (per sample for a classifier, per time step\n"
    "for a CTC head) agrees with the float model's; with both flags both must hold.\n";

static int bad_usage(const char *fmt, const char *a) {
    fprintf(stderr, "qplace sensitivity: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\nTry 'qplace help sensitivity'.\n");
    return 1;
}

static int parse_u64(const char *s, uint64_t max, uint64_t *out) {
    if (!s || !isdigit((unsigned char)s[0])) return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return 0;
    uint64_t mul = 1;
    if (*end) {
        if (end[1]) return 0;
        switch (toupper((unsigned char)*end)) {
        case 'K':
            mul = (uint64_t)1 << 10;
            break;
        case 'M':
            mul = (uint64_t)1 << 20;
            break;
        case 'G':
            mul = (uint64_t)1 << 30;
            break;
        default:
            return 0;
        }
    }
    if (v > max / mul) return 0;
    *out = (uint64_t)v * mul;
    return 1;
}

/* A count flag without K/M/G suffixes in [lo, max]; 1 when absent. */
static int parse_count(const struct cli_args *args, const char *flag, uint64_t lo, uint64_t max,
                       uint64_t *out) {
    const char *s = cli_value(args, flag, NULL);
    if (!s) return 1;
    uint64_t u = 0;
    if (!parse_u64(s, max, &u) || u < lo || strpbrk(s, "KMGkmg")) return 0;
    *out = u;
    return 1;
}

/* --num_calib_samples (or its older name), --percentile and --ranges_in; 0 or the exit code. */
static int parse_calibration(const struct cli_args *args, struct qp_sensitivity_run_options *o) {
    const char *flag =
        cli_has(args, "num_calib_samples") ? "num_calib_samples" : "num_synthetic_samples";
    if (cli_has(args, "num_calib_samples") && cli_has(args, "num_synthetic_samples"))
        return bad_usage("%s", "--num_calib_samples and --num_synthetic_samples are one flag; "
                               "give one");
    if (!parse_count(args, flag, 1, 1u << 20, &o->n_synthetic_samples))
        return bad_usage(flag[4] == 'c' ? "--num_calib_samples: '%s' is not a positive count"
                                        : "--num_synthetic_samples: '%s' is not a positive count",
                         cli_value(args, flag, ""));
    struct qp_error err = {0};
    if (cli_percentile(args, o->method, &o->percentile, &err) != QP_OK)
        return bad_usage("%s", err.msg);
    o->ranges_in = cli_value(args, "ranges_in", NULL);
    if (o->ranges_in && cli_has(args, "calibration_method"))
        return bad_usage("%s", "--ranges_in gives the ranges: drop --calibration_method and "
                               "--percentile (the file says how they were calibrated)");
    return 0;
}

/* --granularity .. --num_calib_samples into the driver's options; 0 or the exit code. */
static int parse_scoring(const struct cli_args *args, struct qp_sensitivity_run_options *o) {
    struct qp_sens_options *so = &o->sens;
    int v;
    const char *s;
    if ((s = cli_value(args, "granularity", NULL))) {
        if ((v = qp_sens_granularity_parse(s)) < 0)
            return bad_usage("--granularity must be op_type or node, not '%s'", s);
        so->granularity = v;
    }
    if ((s = cli_value(args, "metric", NULL))) {
        if ((v = qp_sens_metric_parse(s)) < 0)
            return bad_usage("--metric must be kl_div, mse or cos, not '%s'", s);
        so->metric = v;
    }
    if ((s = cli_value(args, "probe", NULL))) {
        if ((v = qp_sens_probe_parse(s)) < 0)
            return bad_usage("--probe must be quantize_one or exclude_one, not '%s'", s);
        so->probe = v;
    }
    const char *prec = cli_value(args, "target_precision", "int8");
    if (strcmp(prec, "int8") == 0)
        so->qtype = QP_DTYPE_INT8;
    else if (strcmp(prec, "fp8") == 0)
        so->qtype = QP_DTYPE_FLOAT8E4M3FN;
    else
        return bad_usage("--target_precision must be int8 or fp8, not '%s'", prec);
    struct qp_error werr = {0};
    if (cli_weight_clip_mse(args, &so->weight_clip_mse, &werr) != QP_OK)
        return bad_usage("%s", werr.msg);
    const char *mname = cli_value(args, "calibration_method", "entropy");
    struct qp_error merr = {0};
    if (qp_calib_method_parse(mname, &o->method, &merr) != QP_OK)
        return bad_usage("--calibration_method: %s", merr.msg);
    uint64_t u = 0;
    if ((s = cli_value(args, "cache_bytes", NULL))) {
        if (!parse_u64(s, SIZE_MAX, &u))
            return bad_usage("--cache_bytes: '%s' is not a byte count (K/M/G suffixes)", s);
        so->cache_bytes = (size_t)u;
    }
    so->incremental = !cli_has(args, "no_incremental");
    u = (uint64_t)so->n_threads;
    if (!parse_count(args, "threads", 0, 4096, &u))
        return bad_usage("--threads: '%s' is not a thread count", cli_value(args, "threads", ""));
    so->n_threads = (int)u;
    u = (uint64_t)so->probe_workers;
    if (!parse_count(args, "probe_workers", 0, 4096, &u))
        return bad_usage("--probe_workers: '%s' is not a worker count",
                         cli_value(args, "probe_workers", ""));
    so->probe_workers = (int)u;
    return parse_calibration(args, o);
}

/* The picker flags; 0 or the exit code. */
static int parse_picker(const struct cli_args *args, struct qp_sensitivity_run_options *o) {
    struct qp_pick_options *po = &o->pick;
    const char *s;
    int v;
    if ((s = cli_value(args, "coverage", NULL))) {
        if (!cli_parse_finite(s, &po->coverage) || po->coverage < 0 || po->coverage > 1)
            return bad_usage("--coverage: '%s' is not a number in [0, 1]", s);
        o->picking = 1;
    }
    if ((s = cli_value(args, "threshold", NULL))) {
        if (cli_has(args, "coverage"))
            return bad_usage("%s", "--coverage and --threshold exclude each other");
        if (!cli_parse_finite(s, &po->threshold))
            return bad_usage("--threshold: '%s' is not a number", s);
        po->threshold_mode = 1;
        o->picking = 1;
    }
    uint64_t u = 0;
    if (!parse_count(args, "max_nodes", 1, 1u << 30, &u))
        return bad_usage("--max_nodes: '%s' is not a positive count",
                         cli_value(args, "max_nodes", ""));
    if (cli_has(args, "max_nodes")) {
        po->max_nodes = (size_t)u;
        o->picking = 1;
    }
    if ((s = cli_value(args, "min_score_floor", NULL))) {
        if (!cli_parse_finite(s, &po->min_score_floor))
            return bad_usage("--min_score_floor: '%s' is not a number", s);
        o->picking = 1;
    }
    if ((s = cli_value(args, "near_tie_ratio", NULL)) && !cli_parse_finite(s, &po->near_tie_ratio))
        return bad_usage("--near_tie_ratio: '%s' is not a number", s);
    if ((s = cli_value(args, "block_agg", NULL))) {
        if ((v = qp_block_agg_parse(s)) < 0)
            return bad_usage("--block_agg must be sum, max or mean, not '%s'", s);
        po->agg = v;
    }
    if ((s = cli_value(args, "max_output_drift", NULL))) {
        if (!cli_parse_finite(s, &o->max_output_drift) || !(o->max_output_drift >= 0))
            return bad_usage("--max_output_drift: '%s' is not a non-negative number", s);
        o->picking = 1;
    }
    if ((s = cli_value(args, "min_top1_agreement", NULL))) {
        double p = 0;
        if (!cli_parse_finite(s, &p) || !(p > 0 && p <= 1))
            return bad_usage("--min_top1_agreement: '%s' is not a fraction in (0, 1]", s);
        o->min_top1_agreement = p;
        o->picking = 1;
    }
    if ((o->max_output_drift >= 0 || o->min_top1_agreement > 0) &&
        (po->threshold_mode || cli_has(args, "coverage")))
        return bad_usage("%s", "an accuracy budget (--max_output_drift, --min_top1_agreement) "
                               "excludes --coverage and --threshold");
    if (cli_has(args, "blocks") || cli_has(args, "exclusions_out")) o->picking = 1;
    if (cli_has(args, "placement_out") && !o->picking)
        return bad_usage("%s", "--placement_out needs a picker flag (e.g. --coverage)");
    return 0;
}

/* --op_types_scope values (comma lists split) into scope[] over one buffer *buf_out (freed by the
 * caller); 0 or the exit code. */
static int parse_scope(const struct cli_args *args, const char **scope, size_t cap, size_t *n_out,
                       char **buf_out) {
    size_t total = 0, n = 0, count = cli_count(args, "op_types_scope");
    for (size_t i = 0; i < count; i++)
        total += strlen(cli_value_at(args, "op_types_scope", i)) + 1;
    if (!total) return 0;
    char *buf = malloc(total);
    if (!buf) return 3;
    char *w = buf;
    for (size_t i = 0; i < count; i++) {
        const char *a = cli_value_at(args, "op_types_scope", i);
        strcpy(w, a);
        for (char *tok = strtok(w, ","); tok; tok = strtok(NULL, ",")) {
            if (n == cap) {
                free(buf);
                return bad_usage("%s", "--op_types_scope: more than 256 op types");
            }
            scope[n++] = tok;
        }
        w += strlen(a) + 1;
    }
    *n_out = n;
    *buf_out = buf;
    return 0;
}

/* What the printing callbacks need. */
struct sens_cli {
    const struct qp_sensitivity_run_options *o;
    const char *prec;
    int quiet, show_zero;
    struct cli_progress bar;
    int bar_open;
};

static void on_progress(uint64_t done, uint64_t total, void *user) {
    struct sens_cli *c = user;
    c->bar.total = total; /* probes: known once the targets are */
    cli_progress_update(&c->bar, done);
}

static void print_unlisted(const struct qp_sens_result *r, enum qp_sens_state state,
                           const char *what, size_t n) {
    if (!n) return;
    fprintf(stderr, "  %s (%zu):\n", what, n);
    for (size_t i = 0; i < r->n_targets; i++)
        if (r->targets[i].state == state)
            fprintf(stderr, "    %s: %s\n", r->targets[i].name, r->targets[i].error);
}

/* The table of ranked targets, on stderr. */
static void print_table(const struct sens_cli *c, const struct qp_sensitivity_report *rep) {
    const struct qp_sens_result *r = rep->result;
    const struct qp_sens_ranking *k = &rep->ranking;
    const struct qp_sens_options *so = &c->o->sens;
    fprintf(stderr, "Sensitivity scan (%s / %s / %s, %s, %llu samples%s):\n", c->prec,
            qp_sens_metric_name(so->metric), qp_sens_granularity_name(so->granularity),
            qp_sens_probe_name(so->probe), (unsigned long long)r->n_samples,
            rep->synthetic ? ", synthetic" : "");
    size_t shown = 0, last_shown = 0, zeros = 0;
    for (size_t i = 0; i < k->n_scored; i++) {
        if (r->targets[k->order[i]].score == 0 && !c->show_zero)
            zeros++;
        else
            last_shown = i;
    }
    fprintf(stderr, "  %4s  %-40s %-20s %12s %7s\n", "rank", "target", "op type", "score", "cum %");
    double cum = 0;
    for (size_t i = 0; i < k->n_scored; i++) {
        const struct qp_sens_target *t = &r->targets[k->order[i]];
        cum += t->score;
        if (t->score == 0 && !c->show_zero) continue;
        const char *mark = shown == 0                     ? "  <-- highest impact"
                           : i == last_shown && shown > 0 ? "  <-- lowest impact"
                                                          : "";
        fprintf(stderr, "  %4zu  %-40s %-20s %12.6g %6.1f%%%s\n", i + 1, t->name, t->op_type,
                t->score, k->total_mass > 0 ? 100.0 * cum / k->total_mass : 0.0, mark);
        shown++;
    }
    if (zeros)
        fprintf(stderr,
                "  (%zu target%s with a zero score hidden; --show_zero_scores lists "
                "them)\n",
                zeros, zeros == 1 ? "" : "s");
    print_unlisted(r, QP_SENS_UNPROBED, "unprobed", k->n_unprobed);
    print_unlisted(r, QP_SENS_FAILED, "failed", k->n_failed);
}

/* "drift D" and/or "top-1 T%" of one budget step (what the goal bounds; the top-1 too when
 * the model has class scores). */
static void budget_step_text(const struct qp_sens_budget_goal *g,
                             const struct qp_sens_budget_step *s, char *buf, size_t cap) {
    int n = 0;
    if (g->max_drift >= 0 || g->min_top1 <= 0) n = snprintf(buf, cap, "drift %.6g", s->drift);
    if (s->top1 >= 0 && n >= 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, "%stop-1 agreement %.2f%%", n ? ", " : "",
                 100.0 * s->top1);
}

void cli_print_budget(FILE *f, const struct qp_sens_budget_goal *g,
                      const struct qp_sens_budget_step *first,
                      const struct qp_sens_budget_step *last, size_t n_groups, int met) {
    char a[96], b[96], want[96] = "";
    budget_step_text(g, first, a, sizeof a);
    budget_step_text(g, last, b, sizeof b);
    int n = 0;
    if (g->max_drift >= 0) n = snprintf(want, sizeof want, "drift <= %.6g", g->max_drift);
    if (g->min_top1 > 0 && n >= 0 && (size_t)n < sizeof want)
        snprintf(want + n, sizeof want - (size_t)n, "%stop-1 >= %.2f%%", n ? ", " : "",
                 100.0 * g->min_top1);
    fprintf(f, "%s: %s with everything quantized; %s after excluding %zu group%s (%s; budget %s)\n",
            met ? "accuracy budget" : "qplace: warning: accuracy budget", a,
            met ? "met" : "NOT met", n_groups, n_groups == 1 ? "" : "s", b, want);
}

/* The accuracy budget's outcome and the exclusions summary (reference §9.4), on stderr. */
static void print_picked(const struct sens_cli *c, const struct qp_sensitivity_report *rep) {
    const struct qp_sens_exclusions *x = &rep->ex;
    const struct qp_sens_result *r = rep->result;
    double total = rep->ranking.total_mass;
    if (x->budget && (!c->quiet || !x->budget_met))
        cli_print_budget(stderr, &x->goal, &x->steps[0], &x->steps[x->n_budget_groups],
                         x->n_budget_groups, x->budget_met);
    if (c->quiet) return;
    fprintf(stderr,
            "exclusions: %zu of %zu scored targets, %.1f%% of the score mass "
            "(%.6g of %.6g)\n",
            x->n_excluded, rep->ranking.n_scored,
            total > 0 ? 100.0 * x->excluded_mass / total : 0.0, x->excluded_mass, total);
    for (size_t i = 0; i < x->n_excluded; i++)
        fprintf(stderr, "  - %s (%s, %.6g)\n", r->targets[x->excluded[i]].name,
                r->targets[x->excluded[i]].op_type, r->targets[x->excluded[i]].score);
}

static void on_event(enum qp_sensitivity_event ev, const struct qp_sensitivity_report *rep,
                     void *user) {
    struct sens_cli *c = user;
    switch (ev) {
    case QP_SENSITIVITY_EVENT_SCORING:
        cli_progress_start(&c->bar, stderr, "sensitivity", "probes", 0,
                           c->quiet ? CLI_PROGRESS_QUIET : CLI_PROGRESS_AUTO);
        c->bar_open = 1;
        break;
    case QP_SENSITIVITY_EVENT_SCORED:
        cli_progress_finish(&c->bar, c->bar.total);
        c->bar_open = 0;
        if (!c->quiet) print_table(c, rep);
        break;
    case QP_SENSITIVITY_EVENT_PICKED:
        print_picked(c, rep);
        break;
    }
}

/* The last line: counts, times and what was written. */
static void print_done(const struct qp_sensitivity_report *rep) {
    const struct qp_sens_ranking *k = &rep->ranking;
    const struct qp_sens_result *r = rep->result;
    fprintf(stderr,
            "sensitivity: %zu targets (%zu scored, %zu unprobed, %zu failed) in %.2f s "
            "(calibration %.2f s, reference %.2f s, probes %.2f s); wrote %s",
            r->n_targets, k->n_scored, k->n_unprobed, k->n_failed,
            qp_clock_seconds() - rep->t_start, rep->calibration_seconds, r->reference_seconds,
            r->probe_seconds, rep->json_path);
    if (rep->exclusions_path) fprintf(stderr, ", %s", rep->exclusions_path);
    if (rep->placement_path) fprintf(stderr, ", %s", rep->placement_path);
    fprintf(stderr, "\n");
}

int cli_sensitivity_run(const struct cli_args *args) {
    struct qp_error err = {0};
    struct qp_sensitivity_run_options o;
    qp_sensitivity_run_options_default(&o);
    o.onnx_path = cli_value(args, "onnx_path", NULL);
    if (!o.onnx_path) return bad_usage("%s", "--onnx_path is required");
    int rc;
    if (cli_has(args, "calibration_eps"))
        qp_log(QP_LOG_WARN, "sensitivity: --calibration_eps: qplace calibrates and scores on its "
                            "own CPU engine, not on ONNX Runtime execution providers; the value is "
                            "ignored");
    if ((rc = parse_scoring(args, &o)) != 0 || (rc = parse_picker(args, &o)) != 0) return rc;
    const char *scope[256];
    char *scope_buf = NULL;
    if ((rc = parse_scope(args, scope, 256, &o.sens.n_scope, &scope_buf)) != 0) return rc;
    o.sens.scope = scope;
    struct qp_data_options dopt;
    if ((rc = cli_data_options(args, "sensitivity", &dopt)) != 0) {
        free(scope_buf);
        return rc;
    }
    o.data = &dopt;
    o.calibration_data_path = cli_value(args, "calibration_data_path", NULL);
    o.calibration_shapes = cli_value(args, "calibration_shapes", NULL);
    o.placement_in = cli_value(args, "placement_in", NULL);
    o.blocks_path = cli_value(args, "blocks", NULL);
    o.output_json = cli_value(args, "output_json", NULL);
    o.exclusions_out = cli_value(args, "exclusions_out", NULL);
    o.placement_out = cli_value(args, "placement_out", NULL);
    struct sens_cli c = {.o = &o,
                         .prec = cli_value(args, "target_precision", "int8"),
                         .quiet = cli_has(args, "quiet"),
                         .show_zero = cli_has(args, "show_zero_scores")};
    int usage = 0;
    o.sens.progress = on_progress;
    o.sens.progress_user = &c;
    o.on_event = on_event;
    o.user = &c;
    o.usage_error_out = &usage;
    struct qp_sensitivity_report *rep = NULL;
    if (qp_sensitivity_run(&o, &rep, &err) != QP_OK) {
        if (c.bar_open) cli_progress_finish(&c.bar, 0);
        rc = usage ? bad_usage("%s", err.msg) : cli_fail(&err);
    } else {
        if (!c.quiet) print_done(rep);
        rc = 0;
    }
    qp_sensitivity_report_free(rep);
    free(scope_buf);
    return rc;
}
