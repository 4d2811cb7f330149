/* qplace sensitivity: rank the targets of a placement by the output drift their quantization
 * causes, pick exclusions, and optionally meet an accuracy budget (docs/sensitivity.md). */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/clock.h"
#include "calib/data.h"
#include "calib/npy.h"
#include "calib/provider.h"
#include "calib/provider_npz.h"
#include "core/file.h"
#include "cli.h"
#include "ir/ir.h"
#include "ir/opset_convert.h"
#include "progress.h"
#include "qplace/model.h"
#include "placement/placement.h"
#include "quant/policy_trt.h"
#include "quant/writer.h"
#include "sensitivity/sensitivity.h"

#define SENS_CLI_MAX_INPUTS 64

const struct cli_opt cli_sensitivity_opts[] = {
    {"onnx_path", CLI_VALUE, "MODEL", "the float model (required)"},
    CLI_DATA_OPTS,
    {"num_synthetic_samples", CLI_VALUE, "N", "synthetic samples without data (32)"},
    {"calibration_method", CLI_VALUE, "max|entropy|percentile", "calibrator (default entropy)"},
    {"placement_in", CLI_VALUE, "FILE", "the placement to analyse (default: the trt policy)"},
    {"granularity", CLI_VALUE, "op_type|node", "targets (default op_type)"},
    {"metric", CLI_VALUE, "kl_div|mse|cos", "distance to the float outputs (default kl_div)"},
    {"target_precision", CLI_VALUE, "int8|fp8", "quantized type (default int8)"},
    {"probe", CLI_VALUE, "quantize_one|exclude_one",
     "quantize only the target, or everything but it (default quantize_one)"},
    {"op_types_scope", CLI_LIST, "OP", "limit targets to these op types (comma lists allowed)"},
    {"cache_bytes", CLI_VALUE, "N", "reference activation cache (K/M/G suffixes; 1G)"},
    {"no_incremental", CLI_BOOL, NULL, "run every probe as a full pass (same scores, slower)"},
    {"output_json", CLI_VALUE, "FILE", "results (<model stem>.sensitivity.json)"},
    {"show_zero_scores", CLI_BOOL, NULL, "list targets whose score is 0 in the table"},
    {"coverage", CLI_VALUE, "F", "picker: exclude the top targets holding up to F of the mass"},
    {"threshold", CLI_VALUE, "T", "picker: exclude targets (groups) scoring above T"},
    {"max_nodes", CLI_VALUE, "N", "picker: exclude at most N targets (groups)"},
    {"min_score_floor", CLI_VALUE, "F", "picker: never exclude a score below F (0)"},
    {"near_tie_ratio", CLI_VALUE, "R", "picker: near-tie warning ratio (0.99; 0 disables)"},
    {"blocks", CLI_VALUE, "FILE", "picker: JSON {group: [regex, ...]} grouping targets"},
    {"block_agg", CLI_VALUE, "sum|max|mean", "picker: group score (default sum)"},
    {"max_output_drift", CLI_VALUE, "D",
     "exclude top targets (groups) one at a time until the model's drift is <= D"},
    {"exclusions_out", CLI_VALUE, "FILE",
     "write the exclusions for qplace quantize --nodes_to_exclude @FILE"},
    {"placement_out", CLI_VALUE, "FILE",
     "write the placement minus the exclusions (default with --max_output_drift: "
     "<model stem>.sensitivity.placement.json)"},
    {"threads", CLI_VALUE, "N", "engine threads (0: all cores)"},
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
    "those whose evaluation fails as failed, never as a score of 0.\n"
    "The table goes to stderr, the JSON to --output_json. Any picker flag adds an exclusion\n"
    "list (ModelOpt's suggest_exclusion); --exclusions_out writes it as exact-name regexes for\n"
    "qplace quantize --nodes_to_exclude @FILE. --max_output_drift D excludes the highest-ranked\n"
    "targets (or --blocks groups) one at a time until the whole quantized model's drift (the\n"
    "same metric) is at most D, and writes that list and its placement.\n";

static int bad_usage(const char *fmt, const char *a) {
    fprintf(stderr, "qplace sensitivity: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\nTry 'qplace help sensitivity'.\n");
    return 1;
}

static int parse_double(const char *s, double *out) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return 0;
    *out = v;
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

/* "<dir>/<stem><suffix>" for `model` (the ".onnx" suffix replaced). malloc'd or NULL. */
static char *stem_path(const char *model, const char *suffix) {
    size_t n = strlen(model);
    if (n >= 5 && strcmp(model + n - 5, ".onnx") == 0) n -= 5;
    char *p = malloc(n + strlen(suffix) + 1);
    if (!p) return NULL;
    memcpy(p, model, n);
    strcpy(p + n, suffix);
    return p;
}

static int same_file(const char *a, const char *b) {
    if (strcmp(a, b) == 0) return 1;
    struct stat sa, sb;
    if (stat(a, &sa) != 0 || stat(b, &sb) != 0) return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static enum qp_status write_text(const char *path, const char *text, struct qp_error *err) {
    return qp_file_write_atomic(path, text, strlen(text), err);
}

struct progress_ctx {
    struct cli_progress bar;
};
static void on_progress(uint64_t done, uint64_t total, void *user) {
    struct progress_ctx *pc = user;
    pc->bar.total = total; /* known once the targets are (probes x batches) */
    cli_progress_update(&pc->bar, done);
}

static const double *rank_scores;
static int cmp_rank(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    if (rank_scores[x] > rank_scores[y]) return -1;
    if (rank_scores[x] < rank_scores[y]) return 1;
    return x < y ? -1 : x > y;
}

/* The exclusions file: one exact-name regex per quantized node of the excluded targets. */
static char *exclusions_text(const struct qp_sens_result *r, const size_t *ti, size_t n,
                             const char *model, const char *how) {
    size_t cap = 256 + strlen(model) + strlen(how), len = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < r->targets[ti[i]].n_nodes; k++)
            cap += 2 * strlen(r->targets[ti[i]].nodes[k]) + 4;
    char *s = malloc(cap);
    if (!s) return NULL;
    len += (size_t)snprintf(s, cap, "# qplace sensitivity exclusions for %s (%s)\n", model, how);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < r->targets[ti[i]].n_nodes; k++) {
            len += qp_sens_name_regex(r->targets[ti[i]].nodes[k], s + len, cap - len);
            s[len++] = '\n';
            s[len] = '\0';
        }
    return s;
}

int cli_sensitivity_run(const struct cli_args *args) {
    struct qp_error err = {0};
    const char *onnx = cli_value(args, "onnx_path", NULL);
    if (!onnx) return bad_usage("%s", "--onnx_path is required");
    struct qp_sens_options so;
    qp_sens_options_default(&so);
    int v;
    const char *s;
    if ((s = cli_value(args, "granularity", NULL))) {
        if ((v = qp_sens_granularity_parse(s)) < 0)
            return bad_usage("--granularity must be op_type or node, not '%s'", s);
        so.granularity = v;
    }
    if ((s = cli_value(args, "metric", NULL))) {
        if ((v = qp_sens_metric_parse(s)) < 0)
            return bad_usage("--metric must be kl_div, mse or cos, not '%s'", s);
        so.metric = v;
    }
    if ((s = cli_value(args, "probe", NULL))) {
        if ((v = qp_sens_probe_parse(s)) < 0)
            return bad_usage("--probe must be quantize_one or exclude_one, not '%s'", s);
        so.probe = v;
    }
    const char *prec = cli_value(args, "target_precision", "int8");
    if (strcmp(prec, "int8") == 0)
        so.qtype = QP_DTYPE_INT8;
    else if (strcmp(prec, "fp8") == 0)
        so.qtype = QP_DTYPE_FLOAT8E4M3FN;
    else
        return bad_usage("--target_precision must be int8 or fp8, not '%s'", prec);
    enum qp_calib_method method = QP_CALIB_ENTROPY;
    const char *mname = cli_value(args, "calibration_method", "entropy");
    if (strcmp(mname, "max") == 0)
        method = QP_CALIB_MAX;
    else if (strcmp(mname, "percentile") == 0)
        method = QP_CALIB_PERCENTILE;
    else if (strcmp(mname, "entropy") != 0)
        return bad_usage("--calibration_method must be max, entropy or percentile, not '%s'",
                         mname);
    uint64_t u = 0;
    if ((s = cli_value(args, "cache_bytes", NULL))) {
        if (!parse_u64(s, SIZE_MAX, &u))
            return bad_usage("--cache_bytes: '%s' is not a byte count (K/M/G suffixes)", s);
        so.cache_bytes = (size_t)u;
    }
    so.incremental = !cli_has(args, "no_incremental");
    if ((s = cli_value(args, "threads", NULL))) {
        if (!parse_u64(s, 4096, &u) || strpbrk(s, "KMGkmg"))
            return bad_usage("--threads: '%s' is not a thread count", s);
        so.n_threads = (int)u;
    }
    if ((s = cli_value(args, "probe_workers", NULL))) {
        if (!parse_u64(s, 4096, &u) || strpbrk(s, "KMGkmg"))
            return bad_usage("--probe_workers: '%s' is not a worker count", s);
        so.probe_workers = (int)u;
    }
    uint64_t n_syn = 32;
    if ((s = cli_value(args, "num_synthetic_samples", NULL)) &&
        (!parse_u64(s, 1u << 20, &n_syn) || n_syn == 0 || strpbrk(s, "KMGkmg")))
        return bad_usage("--num_synthetic_samples: '%s' is not a positive count", s);
    /* Picker flags. */
    struct qp_pick_options po;
    qp_pick_options_default(&po);
    int picking = 0;
    double drift_budget = -1;
    if ((s = cli_value(args, "coverage", NULL))) {
        if (!parse_double(s, &po.coverage) || po.coverage < 0 || po.coverage > 1)
            return bad_usage("--coverage: '%s' is not a number in [0, 1]", s);
        picking = 1;
    }
    if ((s = cli_value(args, "threshold", NULL))) {
        if (cli_has(args, "coverage"))
            return bad_usage("%s", "--coverage and --threshold exclude each other");
        if (!parse_double(s, &po.threshold))
            return bad_usage("--threshold: '%s' is not a number", s);
        po.threshold_mode = 1;
        picking = 1;
    }
    if ((s = cli_value(args, "max_nodes", NULL))) {
        if (!parse_u64(s, 1u << 30, &u) || u == 0 || strpbrk(s, "KMGkmg"))
            return bad_usage("--max_nodes: '%s' is not a positive count", s);
        po.max_nodes = (size_t)u;
        picking = 1;
    }
    if ((s = cli_value(args, "min_score_floor", NULL))) {
        if (!parse_double(s, &po.min_score_floor))
            return bad_usage("--min_score_floor: '%s' is not a number", s);
        picking = 1;
    }
    if ((s = cli_value(args, "near_tie_ratio", NULL)) && !parse_double(s, &po.near_tie_ratio))
        return bad_usage("--near_tie_ratio: '%s' is not a number", s);
    if ((s = cli_value(args, "block_agg", NULL))) {
        if ((v = qp_block_agg_parse(s)) < 0)
            return bad_usage("--block_agg must be sum, max or mean, not '%s'", s);
        po.agg = v;
    }
    if ((s = cli_value(args, "max_output_drift", NULL))) {
        if (!parse_double(s, &drift_budget) || drift_budget < 0)
            return bad_usage("--max_output_drift: '%s' is not a non-negative number", s);
        if (po.threshold_mode || cli_has(args, "coverage"))
            return bad_usage("%s", "--max_output_drift excludes --coverage and --threshold");
        picking = 1;
    }
    if (cli_has(args, "blocks") || cli_has(args, "exclusions_out")) picking = 1;
    if (cli_has(args, "placement_out") && !picking)
        return bad_usage("%s", "--placement_out needs a picker flag (e.g. --coverage)");
    int quiet = cli_has(args, "quiet");
    const char *scope[256];
    size_t n_scope = 0;
    char *scope_buf = NULL;
    {
        size_t total = 0;
        for (size_t i = 0; i < cli_count(args, "op_types_scope"); i++)
            total += strlen(cli_value_at(args, "op_types_scope", i)) + 1;
        if (total) {
            if (!(scope_buf = malloc(total))) return 3;
            char *w = scope_buf;
            for (size_t i = 0; i < cli_count(args, "op_types_scope"); i++) {
                const char *a = cli_value_at(args, "op_types_scope", i);
                strcpy(w, a);
                for (char *tok = strtok(w, ","); tok; tok = strtok(NULL, ",")) {
                    if (n_scope == 256) {
                        free(scope_buf);
                        return bad_usage("%s", "--op_types_scope: more than 256 op types");
                    }
                    scope[n_scope++] = tok;
                }
                w += strlen(a) + 1;
            }
        }
    }
    so.scope = scope;
    so.n_scope = n_scope;

    double t_start = qp_clock_seconds(), c_start = qp_clock_cpu_seconds();
    int rc = 0;
    enum qp_status st = QP_OK;
    struct qp_model *m = NULL;
    struct qp_placement *pl = NULL, *budget_pl = NULL;
    struct qp_calib_shapes shapes = {0};
    struct qp_provider *prov = NULL;
    struct qp_ranges *ranges = NULL;
    struct qp_sens_result *r = NULL;
    struct qp_sens_blocks *blocks = NULL;
    struct qp_pick_result *pick = NULL;
    char *json_path = NULL, *json_text = NULL, *excl_text = NULL, *pl_path = NULL;
    size_t *order = NULL, *scored = NULL, *excl = NULL, *gsizes = NULL;
    const size_t **gmembers = NULL;
    size_t **gtargets = NULL;
    double *scores = NULL, *drifts = NULL;
    const char **names = NULL;
    cJSON *root = NULL;
    size_t n_excl = 0, n_groups_budget = 0, ng_alloc = 0;
    int budget_met = 0;

    json_path = cli_has(args, "output_json") ? strdup(cli_value(args, "output_json", ""))
                                             : stem_path(onnx, ".sensitivity.json");
    if (!json_path) goto oom;
    if (same_file(onnx, json_path)) {
        st = qp_error_set(&err, QP_ERR_BAD_INPUT,
                          "sensitivity: --output_json '%s' is the input model", json_path);
        goto fail;
    }
    if (cli_has(args, "blocks") &&
        (st = qp_sens_blocks_load(cli_value(args, "blocks", ""), &blocks, &err)) != QP_OK)
        goto fail;
    po.blocks = blocks;
    if ((s = cli_value(args, "calibration_shapes", NULL)) &&
        (st = qp_calib_shapes_parse(s, &shapes, &err)) != QP_OK) {
        rc = bad_usage("%s", err.msg);
        goto done;
    }
    if ((st = qp_model_load_file(onnx, NULL, &m, &err)) != QP_OK) goto fail;
    if (qp_model_has_qdq(m)) {
        st = qp_error_set(&err, QP_ERR_BAD_INPUT,
                          "sensitivity: '%s' already holds QuantizeLinear/DequantizeLinear nodes; "
                          "give the float model",
                          onnx);
        goto fail;
    }
    if (qp_model_opset(m, "") < 19 && (st = qp_model_convert_opset(m, 19, &err)) != QP_OK) {
        qp_error_prefix(&err, "sensitivity: '%s'", onnx);
        goto fail;
    }
    if ((st = qp_graph_toposort(m->graph, &err)) != QP_OK) goto fail;
    const char *pin = cli_value(args, "placement_in", NULL);
    if (pin) {
        if ((st = qp_placement_load_file(pin, &pl, &err)) != QP_OK) goto fail;
    } else {
        if (!(pl = qp_placement_create())) goto oom;
        struct qp_policy_options pol = {.mode = so.qtype == QP_DTYPE_INT8 ? QP_QUANT_INT8
                                                                          : QP_QUANT_FP8};
        if ((st = qp_policy_trt(m->graph, &pol, pl, NULL, &err)) != QP_OK) goto fail;
    }
    if ((st = qp_placement_validate(pl, m->graph, &err)) != QP_OK) {
        qp_error_prefix(&err, "sensitivity: placement%s%s", pin ? " " : "", pin ? pin : "");
        goto fail;
    }
    struct qp_npz_provider_input inputs[SENS_CLI_MAX_INPUTS];
    size_t n_inputs = 0;
    if ((st = qp_provider_graph_inputs(m->graph, shapes.n ? &shapes : NULL, "sensitivity", inputs,
                                       SENS_CLI_MAX_INPUTS, &n_inputs, &err)) != QP_OK)
        goto fail;
    const char *data = cli_value(args, "calibration_data_path", NULL);
    /* Calibration and scoring data: the one data module (calib/data.h). */
    struct qp_data_options dopt;
    if ((rc = cli_data_options(args, "sensitivity", &dopt)) != 0) goto done;
    /* Synthetic: samples, not batches (a batch of --calibration_shapes rows holds several). */
    uint64_t rows = n_inputs && inputs[0].rank > 0 && inputs[0].batch_dims[0] > 0
                        ? (uint64_t)inputs[0].batch_dims[0]
                        : 1;
    dopt.synthetic_batches = n_syn / rows ? n_syn / rows : 1;
    if ((st = qp_provider_open(data, &dopt, inputs, n_inputs, &prov, &err)) != QP_OK) goto fail;
    if (!data)
        qp_log(QP_LOG_WARN,
               "sensitivity: no --calibration_data_path: calibrating and scoring on synthetic "
               "data (uniform [0, 1)); the scores are directional only (calibration_source: "
               "synthetic)");
    double t0 = qp_clock_seconds();
    uint64_t n_cal = 0;
    if ((st = qp_sens_calibrate(m, pl, prov, method, so.n_threads, &ranges, &n_cal, &err)) != QP_OK)
        goto fail;
    double t_cal = qp_clock_seconds() - t0;
    struct progress_ctx pc;
    cli_progress_start(&pc.bar, stderr, "sensitivity", "probes", 0,
                       quiet ? CLI_PROGRESS_QUIET : CLI_PROGRESS_AUTO);
    so.progress = on_progress;
    so.progress_user = &pc;
    st = qp_sens_score(m, pl, prov, ranges, &so, &r, &err);
    if (st != QP_OK) {
        cli_progress_finish(&pc.bar, 0);
        goto fail;
    }
    cli_progress_finish(&pc.bar, pc.bar.total);

    /* Ranking of the scored targets. */
    size_t nt = r->n_targets, ns = 0, n_unprobed = 0, n_failed = 0;
    order = calloc(nt + 1, sizeof *order);
    scores = calloc(nt + 1, sizeof *scores);
    names = calloc(nt + 1, sizeof *names);
    scored = calloc(nt + 1, sizeof *scored);
    if (!order || !scores || !names || !scored) goto oom;
    double all_scores_sum = 0;
    for (size_t i = 0; i < nt; i++) {
        scores[i] = r->targets[i].state == QP_SENS_SCORED ? r->targets[i].score : -INFINITY;
        n_unprobed += r->targets[i].state == QP_SENS_UNPROBED;
        n_failed += r->targets[i].state == QP_SENS_FAILED;
        if (r->targets[i].state == QP_SENS_SCORED) {
            all_scores_sum += r->targets[i].score;
            order[ns++] = i;
        }
    }
    rank_scores = scores;
    qsort(order, ns, sizeof *order, cmp_rank);
    for (size_t k = 0; k < ns; k++) {
        names[k] = r->targets[order[k]].name;
        scored[k] = order[k];
    }
    double *rscores = calloc(ns + 1, sizeof *rscores);
    if (!rscores) goto oom;
    for (size_t k = 0; k < ns; k++)
        rscores[k] = r->targets[order[k]].score;

    /* The table. */
    if (!quiet) {
        fprintf(stderr, "Sensitivity scan (%s / %s / %s, %s, %llu samples%s):\n", prec,
                qp_sens_metric_name(so.metric), qp_sens_granularity_name(so.granularity),
                qp_sens_probe_name(so.probe), (unsigned long long)r->n_samples,
                data ? "" : ", synthetic");
        size_t shown = 0, last_shown = 0, zeros = 0;
        for (size_t k = 0; k < ns; k++) {
            if (rscores[k] == 0 && !cli_has(args, "show_zero_scores"))
                zeros++;
            else
                last_shown = k;
        }
        fprintf(stderr, "  %4s  %-40s %-20s %12s %7s\n", "rank", "target", "op type", "score",
                "cum %");
        double cum = 0;
        for (size_t k = 0; k < ns; k++) {
            const struct qp_sens_target *t = &r->targets[order[k]];
            cum += t->score;
            if (t->score == 0 && !cli_has(args, "show_zero_scores")) continue;
            const char *mark = shown == 0                     ? "  <-- highest impact"
                               : k == last_shown && shown > 0 ? "  <-- lowest impact"
                                                              : "";
            fprintf(stderr, "  %4zu  %-40s %-20s %12.6g %6.1f%%%s\n", k + 1, t->name, t->op_type,
                    t->score, all_scores_sum > 0 ? 100.0 * cum / all_scores_sum : 0.0, mark);
            shown++;
        }
        if (zeros)
            fprintf(stderr,
                    "  (%zu target%s with a zero score hidden; --show_zero_scores lists "
                    "them)\n",
                    zeros, zeros == 1 ? "" : "s");
        if (n_unprobed) {
            fprintf(stderr, "  unprobed (%zu):\n", n_unprobed);
            for (size_t i = 0; i < nt; i++)
                if (r->targets[i].state == QP_SENS_UNPROBED)
                    fprintf(stderr, "    %s: %s\n", r->targets[i].name, r->targets[i].error);
        }
        if (n_failed) {
            fprintf(stderr, "  failed (%zu):\n", n_failed);
            for (size_t i = 0; i < nt; i++)
                if (r->targets[i].state == QP_SENS_FAILED)
                    fprintf(stderr, "    %s: %s\n", r->targets[i].name, r->targets[i].error);
        }
    }

    /* The picker, then the budget. */
    if (picking) {
        struct qp_pick_options pko = po;
        if (drift_budget >= 0) { /* rank every group; the budget decides how many go */
            pko.threshold_mode = 0;
            pko.coverage = 1;
            pko.min_score_floor = -INFINITY;
        }
        if ((st = qp_sens_pick(names, rscores, ns, &pko, &pick, &err)) != QP_OK) {
            rc = bad_usage("%s", err.msg);
            free(rscores);
            goto done;
        }
        excl = calloc(ns + 1, sizeof *excl);
        if (!excl) {
            free(rscores);
            goto oom;
        }
        if (drift_budget >= 0) {
            size_t ng = pick->n_groups;
            if (po.max_nodes && ng > po.max_nodes) ng = po.max_nodes;
            gtargets = calloc(ng + 1, sizeof *gtargets);
            ng_alloc = ng;
            gsizes = calloc(ng + 1, sizeof *gsizes);
            gmembers = calloc(ng + 1, sizeof *gmembers);
            drifts = calloc(ng + 2, sizeof *drifts);
            if (!gtargets || !gsizes || !gmembers || !drifts) {
                free(rscores);
                goto oom;
            }
            for (size_t g = 0; g < ng; g++) {
                const struct qp_pick_group *gr = &pick->groups[g];
                if (!(gtargets[g] = calloc(gr->n_members + 1, sizeof **gtargets))) {
                    free(rscores);
                    goto oom;
                }
                for (size_t k = 0; k < gr->n_members; k++)
                    gtargets[g][k] = scored[gr->members[k]];
                gsizes[g] = gr->n_members;
                gmembers[g] = gtargets[g];
            }
            struct qp_sens_options bo = so;
            bo.progress = NULL;
            if ((st = qp_sens_budget(m, pl, prov, ranges, &bo, r, ng, gmembers, gsizes,
                                     drift_budget, &n_groups_budget, drifts, &budget_met,
                                     &budget_pl, &err)) != QP_OK) {
                free(rscores);
                goto fail;
            }
            for (size_t g = 0; g < n_groups_budget; g++)
                for (size_t k = 0; k < gsizes[g]; k++)
                    excl[n_excl++] = gtargets[g][k];
            if (!quiet || !budget_met)
                fprintf(stderr,
                        "%s: drift %.6g with everything quantized; %s after excluding %zu "
                        "group%s (drift %.6g, budget %.6g)\n",
                        budget_met ? "accuracy budget" : "qplace: warning: accuracy budget",
                        drifts[0], budget_met ? "met" : "NOT met", n_groups_budget,
                        n_groups_budget == 1 ? "" : "s", drifts[n_groups_budget], drift_budget);
        } else {
            for (size_t k = 0; k < pick->n_excluded; k++)
                excl[n_excl++] = scored[pick->excluded[k]];
            if (pick->near_tie) qp_log(QP_LOG_WARN, "sensitivity: %s", pick->warning);
        }
    }
    free(rscores);
    rscores = NULL;

    /* Summary (reference §9.4) and a breakdown by op type. */
    double excl_mass = 0;
    for (size_t k = 0; k < n_excl; k++)
        excl_mass += r->targets[excl[k]].score;
    if (picking && !quiet) {
        fprintf(stderr,
                "exclusions: %zu of %zu scored targets, %.1f%% of the score mass "
                "(%.6g of %.6g)\n",
                n_excl, ns, all_scores_sum > 0 ? 100.0 * excl_mass / all_scores_sum : 0.0,
                excl_mass, all_scores_sum);
        for (size_t k = 0; k < n_excl; k++)
            fprintf(stderr, "  - %s (%s, %.6g)\n", r->targets[excl[k]].name,
                    r->targets[excl[k]].op_type, r->targets[excl[k]].score);
    }

    /* JSON. */
    if (!(root = cJSON_CreateObject())) goto oom;
    char absbuf[PATH_MAX];
    cJSON_AddStringToObject(root, "onnx_path", realpath(onnx, absbuf) ? absbuf : onnx);
    cJSON_AddStringToObject(root, "calibration_source", data ? "real" : "synthetic");
    cJSON_AddStringToObject(root, "calibration_data", qp_provider_source(prov));
    cJSON_AddStringToObject(root, "calibration_method", mname);
    cJSON_AddNumberToObject(root, "num_calibration_samples", (double)n_cal);
    cJSON_AddNumberToObject(root, "num_evaluation_samples", (double)r->n_samples);
    cJSON_AddStringToObject(root, "metric", qp_sens_metric_name(so.metric));
    cJSON_AddStringToObject(root, "granularity", qp_sens_granularity_name(so.granularity));
    cJSON_AddStringToObject(root, "target_precision", prec);
    cJSON_AddStringToObject(root, "probe", qp_sens_probe_name(so.probe));
    cJSON_AddStringToObject(root, "placement", pin ? pin : "trt policy");
    cJSON_AddBoolToObject(root, "incremental", so.incremental);
    cJSON *jscores = cJSON_AddObjectToObject(root, "scores");
    cJSON *jt = cJSON_AddArrayToObject(root, "targets");
    cJSON *jun = cJSON_AddArrayToObject(root, "unprobed");
    cJSON *jfail = cJSON_AddArrayToObject(root, "failed");
    if (!jscores || !jt || !jun || !jfail) goto oom;
    for (size_t k = 0; k < ns; k++) {
        const struct qp_sens_target *t = &r->targets[order[k]];
        cJSON_AddNumberToObject(jscores, t->name, t->score);
        cJSON *o = cJSON_CreateObject();
        if (!o) goto oom;
        cJSON_AddItemToArray(jt, o);
        cJSON_AddNumberToObject(o, "rank", (double)(k + 1));
        cJSON_AddStringToObject(o, "name", t->name);
        cJSON_AddStringToObject(o, "op_type", t->op_type);
        cJSON_AddNumberToObject(o, "score", t->score);
        cJSON_AddNumberToObject(o, "edges", (double)t->n_edges);
        cJSON_AddNumberToObject(o, "weights", (double)t->n_weights);
        if (so.granularity == QP_SENS_OP_TYPE)
            cJSON_AddItemToObject(
                o, "nodes",
                cJSON_CreateStringArray((const char *const *)t->nodes, (int)t->n_nodes));
    }
    for (size_t i = 0; i < nt; i++) {
        const struct qp_sens_target *t = &r->targets[i];
        if (t->state == QP_SENS_SCORED) continue;
        cJSON *o = cJSON_CreateObject();
        if (!o) goto oom;
        cJSON_AddItemToArray(t->state == QP_SENS_UNPROBED ? jun : jfail, o);
        cJSON_AddStringToObject(o, "name", t->name);
        cJSON_AddStringToObject(o, "op_type", t->op_type);
        cJSON_AddStringToObject(o, t->state == QP_SENS_UNPROBED ? "reason" : "error", t->error);
    }
    cJSON *tim = cJSON_AddObjectToObject(root, "timings");
    if (!tim) goto oom;
    cJSON_AddNumberToObject(tim, "calibration_s", t_cal);
    cJSON_AddNumberToObject(tim, "reference_s", r->reference_seconds);
    cJSON_AddNumberToObject(tim, "probes_s", r->probe_seconds);
    cJSON_AddNumberToObject(tim, "total_s", qp_clock_seconds() - t_start);
    cJSON_AddNumberToObject(tim, "reference_cpu_s", r->reference_cpu_seconds);
    cJSON_AddNumberToObject(tim, "probes_cpu_s", r->probe_cpu_seconds);
    cJSON_AddNumberToObject(tim, "total_cpu_s", qp_clock_cpu_seconds() - c_start);
    cJSON_AddNumberToObject(tim, "nodes_executed", (double)r->nodes_executed);
    cJSON_AddNumberToObject(tim, "nodes_full_pass", (double)r->nodes_full_pass);
    cJSON_AddNumberToObject(tim, "probe_workers", (double)r->n_probe_workers);
    if (picking) {
        cJSON *ex = cJSON_AddObjectToObject(root, "exclusions");
        if (!ex) goto oom;
        const char *mode = drift_budget >= 0   ? "max_output_drift"
                           : po.threshold_mode ? "threshold"
                                               : "coverage";
        cJSON_AddStringToObject(ex, "mode", mode);
        if (drift_budget >= 0)
            cJSON_AddNumberToObject(ex, "max_output_drift", drift_budget);
        else if (po.threshold_mode)
            cJSON_AddNumberToObject(ex, "threshold", po.threshold);
        else
            cJSON_AddNumberToObject(ex, "coverage", po.coverage);
        if (po.max_nodes) cJSON_AddNumberToObject(ex, "max_nodes", (double)po.max_nodes);
        cJSON_AddNumberToObject(ex, "min_score_floor", po.min_score_floor);
        if (blocks) {
            cJSON_AddStringToObject(ex, "blocks", cli_value(args, "blocks", ""));
            cJSON_AddStringToObject(ex, "block_agg", cli_value(args, "block_agg", "sum"));
            cJSON *grs = cJSON_AddArrayToObject(ex, "groups");
            size_t ngc = drift_budget >= 0 ? n_groups_budget : pick->n_chosen_groups;
            for (size_t g = 0; grs && g < ngc; g++) {
                cJSON *go = cJSON_CreateObject();
                if (!go) goto oom;
                cJSON_AddItemToArray(grs, go);
                cJSON_AddStringToObject(go, "name", pick->groups[g].name);
                cJSON_AddNumberToObject(go, "score", pick->groups[g].score);
            }
        }
        cJSON *je = cJSON_AddArrayToObject(ex, "excluded");
        if (!je) goto oom;
        for (size_t k = 0; k < n_excl; k++)
            cJSON_AddItemToArray(je, cJSON_CreateString(r->targets[excl[k]].name));
        cJSON *sum = cJSON_AddObjectToObject(ex, "summary");
        if (!sum) goto oom;
        cJSON_AddNumberToObject(sum, "coverage_pct",
                                all_scores_sum > 0 ? 100.0 * excl_mass / all_scores_sum : 0.0);
        cJSON_AddNumberToObject(sum, "num_excluded", (double)n_excl);
        cJSON_AddNumberToObject(sum, "num_previously_quantized", (double)ns);
        cJSON_AddNumberToObject(sum, "num_remaining_quantized", (double)(ns - n_excl));
        cJSON_AddNumberToObject(sum, "excluded_mass", excl_mass);
        cJSON_AddNumberToObject(sum, "total_mass", all_scores_sum);
        cJSON *bop = cJSON_AddObjectToObject(ex, "by_op_type");
        if (!bop) goto oom;
        for (size_t k = 0; k < ns; k++) {
            const struct qp_sens_target *t = &r->targets[order[k]];
            cJSON *o = cJSON_GetObjectItemCaseSensitive(bop, t->op_type);
            if (!o) {
                if (!(o = cJSON_AddObjectToObject(bop, t->op_type))) goto oom;
                cJSON_AddNumberToObject(o, "targets", 0);
                cJSON_AddNumberToObject(o, "excluded", 0);
                cJSON_AddNumberToObject(o, "mass", 0);
                cJSON_AddNumberToObject(o, "excluded_mass", 0);
            }
            int is_ex = 0;
            for (size_t q = 0; q < n_excl && !is_ex; q++)
                is_ex = excl[q] == order[k];
            cJSON *f;
            f = cJSON_GetObjectItemCaseSensitive(o, "targets");
            cJSON_SetNumberValue(f, f->valuedouble + 1);
            f = cJSON_GetObjectItemCaseSensitive(o, "mass");
            cJSON_SetNumberValue(f, f->valuedouble + t->score);
            if (is_ex) {
                f = cJSON_GetObjectItemCaseSensitive(o, "excluded");
                cJSON_SetNumberValue(f, f->valuedouble + 1);
                f = cJSON_GetObjectItemCaseSensitive(o, "excluded_mass");
                cJSON_SetNumberValue(f, f->valuedouble + t->score);
            }
        }
        if (pick && pick->near_tie && drift_budget < 0)
            cJSON_AddStringToObject(ex, "near_tie_warning", pick->warning);
        if (drift_budget >= 0) {
            cJSON_AddBoolToObject(ex, "budget_met", budget_met);
            cJSON *jd = cJSON_AddArrayToObject(ex, "drift");
            for (size_t g = 0; jd && g <= n_groups_budget; g++)
                cJSON_AddItemToArray(jd, cJSON_CreateNumber(drifts[g]));
        }
    }
    if (!(json_text = cJSON_Print(root))) goto oom;
    size_t jl = strlen(json_text);
    char *jt2 = realloc(json_text, jl + 2);
    if (!jt2) goto oom;
    json_text = jt2;
    strcpy(json_text + jl, "\n");

    /* Outputs: exclusions and placement prepared before anything is written. */
    const char *excl_path = cli_value(args, "exclusions_out", NULL);
    if (excl_path) {
        char how[128];
        snprintf(how, sizeof how, "%s, %s, %s", qp_sens_metric_name(so.metric),
                 qp_sens_granularity_name(so.granularity),
                 drift_budget >= 0   ? "max_output_drift"
                 : po.threshold_mode ? "threshold"
                                     : "coverage");
        if (!(excl_text = exclusions_text(r, excl, n_excl, onnx, how))) goto oom;
    }
    if (picking && (cli_has(args, "placement_out") || drift_budget >= 0)) {
        pl_path = cli_has(args, "placement_out") ? strdup(cli_value(args, "placement_out", ""))
                                                 : stem_path(onnx, ".sensitivity.placement.json");
        if (!pl_path) goto oom;
        if (!budget_pl) {
            if ((st = qp_placement_copy(pl, &budget_pl, &err)) != QP_OK) goto fail;
            for (size_t k = 0; k < n_excl; k++) {
                const struct qp_sens_target *t = &r->targets[excl[k]];
                for (size_t q = 0; q < t->n_edges + t->n_weights; q++) {
                    size_t e = t->entries[q];
                    if (e < pl->n_edges)
                        qp_placement_remove(budget_pl, pl->edges[e].node, pl->edges[e].input);
                    else
                        qp_placement_remove(budget_pl, pl->weights[e - pl->n_edges].node,
                                            pl->weights[e - pl->n_edges].input);
                }
            }
        }
    }
    const char *outs[3] = {json_path, excl_path, pl_path};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            if (i != j && outs[i] && outs[j] && strcmp(outs[i], outs[j]) == 0) {
                st = qp_error_set(&err, QP_ERR_USAGE, "sensitivity: '%s' is given as two outputs",
                                  outs[i]);
                goto fail;
            }
    for (int i = 0; i < 3; i++)
        if (outs[i] && same_file(onnx, outs[i])) {
            st = qp_error_set(&err, QP_ERR_BAD_INPUT, "sensitivity: output '%s' is the input model",
                              outs[i]);
            goto fail;
        }
    if ((st = write_text(json_path, json_text, &err)) != QP_OK) goto fail;
    if (excl_text && (st = write_text(excl_path, excl_text, &err)) != QP_OK) goto fail;
    if (pl_path && (st = qp_placement_save_file(budget_pl, pl_path, &err)) != QP_OK) goto fail;
    if (!quiet) {
        fprintf(stderr,
                "sensitivity: %zu targets (%zu scored, %zu unprobed, %zu failed) in %.2f s "
                "(calibration %.2f s, reference %.2f s, probes %.2f s); wrote %s",
                nt, ns, n_unprobed, n_failed, qp_clock_seconds() - t_start, t_cal,
                r->reference_seconds, r->probe_seconds, json_path);
        if (excl_text) fprintf(stderr, ", %s", excl_path);
        if (pl_path) fprintf(stderr, ", %s", pl_path);
        fprintf(stderr, "\n");
    }
    rc = 0;
    goto done;
oom:
    st = qp_error_set(&err, QP_ERR_NOMEM, "sensitivity: out of memory");
fail:
    rc = cli_fail(&err);
done:
    if (gtargets)
        for (size_t g = 0; g < ng_alloc; g++)
            free(gtargets[g]);
    free(gtargets);
    free(gsizes);
    free(gmembers);
    free(drifts);
    cJSON_Delete(root);
    free(json_text);
    free(excl_text);
    free(pl_path);
    free(json_path);
    free(order);
    free(scores);
    free(names);
    free(scored);
    free(excl);
    free(scope_buf);
    qp_pick_result_free(pick);
    qp_sens_blocks_free(blocks);
    qp_sens_result_free(r);
    qp_ranges_free(ranges);
    qp_provider_free(prov);
    qp_calib_shapes_release(&shapes);
    qp_placement_free(budget_pl);
    qp_placement_free(pl);
    qp_model_free(m);
    return rc;
}
