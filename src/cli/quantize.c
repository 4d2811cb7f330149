/* qplace quantize --onnx_path MODEL ...: placement, calibration, Q/DQ writer, drift summary. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strings.h>

#include "calib/data.h"
#include "autotune_flags.h"
#include "cli.h"
#include "core/size.h"
#include "pipeline/quantize.h"

const struct cli_opt cli_quantize_opts[] = {
    {"onnx_path", CLI_VALUE, "MODEL", "the float ONNX model (required)"},
    CLI_DATA_OPTS,
    {"quantize_mode", CLI_VALUE, "int8|fp8", "quantized type (default int8)"},
    {"eval_data_path", CLI_VALUE, "FILE|DIR",
     "inputs for the drift summary (as --calibration_data_path; default: the calibration data)"},
    CLI_CALIBRATION_METHOD_OPT,
    {"percentile", CLI_VALUE, "P", "percentile for --calibration_method percentile (99.999)"},
    {"ranges_in", CLI_VALUE, "RANGES.json",
     "scales from these ranges (qplace calibrate), no calibration"},
    {"calibration_cache_path", CLI_VALUE, "CACHE",
     "scales from this TensorRT calibration cache (over --ranges_in), no calibration"},
    {"override_shapes", CLI_VALUE, "NAME:1x3x224x224,...",
     "fix the dynamic dims of these inputs (written model and calibration)"},
    {"op_types_to_quantize", CLI_LIST, "OP", "only these op types (repeatable, comma lists)"},
    {"op_types_to_exclude", CLI_LIST, "OP", "never these op types"},
    {"nodes_to_quantize", CLI_LIST, "REGEX", "only nodes whose name matches"},
    {"nodes_to_exclude", CLI_LIST, "REGEX", "never nodes whose name matches"},
    {"disable_mha_qdq", CLI_BOOL, NULL, "no Q/DQ on attention's batched MatMuls"},
    {"rules", CLI_VALUE, "FILE", "placement rules applied after the policy"},
    {"placement_in", CLI_VALUE, "FILE", "apply this placement instead of the policy"},
    {"placement_out", CLI_VALUE, "FILE", "write the placement used"},
    {"dq_only", CLI_BOOL, NULL, "store weights quantized (DQ only)"},
    CLI_WEIGHT_CLIPPING_OPT,
    {"weight_rounding", CLI_VALUE, "nearest|adaround",
     "int8 weight levels: nearest (default) or chosen by layer-output error on the calibration "
     "data (AdaRound-style)"},
    {"weight_rounding_seconds", CLI_VALUE, "S",
     "time bound of --weight_rounding adaround (300); layers past it keep nearest"},
    {"max_output_drift", CLI_VALUE, "D",
     "accuracy budget: exclude the most sensitive nodes until the drift (kl_div) is <= D"},
    {"min_top1_agreement", CLI_VALUE, "P",
     "accuracy budget: exclude the most sensitive nodes until every class-score output's "
     "argmax agrees with the float model's on a fraction >= P of its rows"},
    {"equalization", CLI_VALUE, "none|cle|smoothquant|all",
     "rescale float weights first: Conv pairs (cle), LayerNorm -> MatMul (smoothquant)"},
    {"smoothquant_alpha", CLI_VALUE, "A", "SmoothQuant's migration strength in [0, 1] (0.5)"},
    {"bias_correction", CLI_OPTIONAL, "auto|on|off",
     "correct Conv/Gemm/MatMul biases by the mean output shift on the calibration data: on "
     "(bare flag), off, or auto (default: with --calibration_data_path, kept only when it "
     "raises the drift's mean cosine)"},
    {"high_precision_dtype", CLI_VALUE, "fp32|fp16|bf16",
     "precision of the rest (default fp16, I/O kept fp32)"},
    {"output_path", CLI_VALUE, "OUT", "output model (default <model>.quant.onnx)"},
    {"threads", CLI_VALUE, "N", "engine threads (default: all cores)"},
    {"explain", CLI_BOOL, NULL, "also print every placed edge and weight with its reason"},
    /* The integrated autotune search (docs/autotune.md, "Integrated"). */
    CLI_QUANTIZE_AUTOTUNE_OPTS,
    /* The written model and logging (ModelOpt's flags; docs/quantize.md "Output"). */
    {"opset", CLI_VALUE, "N", "output opset, 19..21 (default: the model's, at least 19)"},
    {"use_external_data_format", CLI_BOOL, NULL, "weights in <output>_data beside the output"},
    {"op_types_to_exclude_fp16", CLI_LIST, "OP", "op types kept fp32 with fp16/bf16"},
    {"direct_io_types", CLI_BOOL, NULL, "graph I/O in the high precision type, no input Q"},
    {"log_level", CLI_VALUE, "DEBUG|INFO|WARNING|ERROR", "log threshold (default WARNING)"},
    {"log_file", CLI_VALUE, "PATH", "also append log lines to this file"},
    {"calibration_eps", CLI_LIST, "EP", "accepted; qplace calibrates on its own CPU engine"},
    {"simplify", CLI_BOOL, NULL, "accepted; qplace does not run onnxslim"},
    {"keep_intermediate_files", CLI_BOOL, NULL, "accepted; qplace writes no intermediate files"},
    {"calibrate_per_node", CLI_BOOL, NULL, "accepted; calibration is streamed already"},
    {"use_zero_point", CLI_VALUE, "BOOL", "accepted; int8/fp8 Q/DQ are symmetric (zero point 0)"},
    {"trust_calibration_data", CLI_BOOL, NULL, "accepted; pickled .npz/.npy are still refused"},
    {"passes", CLI_LIST, "concat_elimination", "accepted; Concat scales are always shared"},
    {"mha_accumulation_dtype", CLI_VALUE, "fp16|fp32", "accepted; no Casts around attention"},
    /* ModelOpt flags qplace refuses with the reason (docs/cli.md, "ModelOpt's flags"). */
    {"model_id", CLI_VALUE, "ID", "refused: give --calibration_shapes"},
    {"input_shapes_profile", CLI_VALUE, "JSON", "refused: give --calibration_shapes"},
    {"trust_remote_code", CLI_BOOL, NULL, "refused (goes with --model_id)"},
    {"trt_plugins", CLI_LIST, "SO", "refused: no TensorRT plugins in qplace's engine"},
    {"trt_plugins_precision", CLI_LIST, "OP:PREC", "refused (goes with --trt_plugins)"},
    {"target_dla", CLI_BOOL, NULL, "refused: qplace does not target DLA"},
    {0},
};

const char cli_quantize_details[] =
    "Places Q/DQ (the trt policy with the include/exclude lists and --rules, or --placement_in),\n"
    "calibrates the placed activation tensors on the engine, writes QuantizeLinear ->\n"
    "DequantizeLinear on every placed edge and per-channel weight Q/DQ (opset >= 19), saves the\n"
    "model atomically and prints a summary: what was quantized by op type, the calibration\n"
    "source and method, and the drift of the outputs from the float model. Calibration uses\n"
    "every calibration batch; the drift is measured on --eval_data_path, else in-sample on the\n"
    "calibration data. --ranges_in / --calibration_cache_path take the scales from a file\n"
    "instead (no calibration runs; every placed tensor needs a range there). --explain adds\n"
    "every placed edge and weight with the rule that placed it. --max_output_drift and\n"
    "--min_top1_agreement (an accuracy budget) rank the quantized nodes by sensitivity after\n"
    "calibration and leave the most sensitive in float, one at a time, until the held-out\n"
    "data (--eval_data_path, else the calibration data) meets the bounds; the summary lists\n"
    "what was excluded. --autotune[=quick|default|extensive] chooses the placement with\n"
    "qplace autotune's latency search first (--autotune_* flags: its flags) and quantizes\n"
    "exactly it (docs/autotune.md, \"Integrated\"). docs/quantize.md.\n";

static enum qp_status add_list(struct qp_select *s, const struct cli_args *a, const char *flag,
                               enum qp_select_list list, int *any, struct qp_error *err) {
    for (size_t i = 0; i < cli_count(a, flag); i++) {
        enum qp_status st = qp_select_add(s, list, cli_value_at(a, flag, i), err);
        if (st != QP_OK) return st;
        *any = 1;
    }
    return QP_OK;
}

/* --percentile, --ranges_in, --calibration_cache_path and --override_shapes. */
static int data_flags(const struct cli_args *a, const char *method, struct qp_quantize_options *o) {
    const char *ps = cli_value(a, "percentile", NULL);
    struct qp_error err = {0};
    if (cli_percentile(a, o->method, &o->percentile, &err) != QP_OK) {
        fprintf(stderr, "qplace quantize: %s\n", err.msg);
        return 1;
    }
    o->ranges_in = cli_value(a, "ranges_in", NULL);
    o->calibration_cache_path = cli_value(a, "calibration_cache_path", NULL);
    o->override_shapes = cli_value(a, "override_shapes", NULL);
    const char *file = o->ranges_in ? "--ranges_in" : "--calibration_cache_path";
    if ((o->ranges_in || o->calibration_cache_path) && (method || ps))
        qp_log(QP_LOG_WARN,
               "quantize: --%s is not used: the scales come from %s and no calibration runs",
               ps ? "percentile" : "calibration_method", file);
    return 0;
}

/* --log_level / --log_file: the threshold of the log hook, and a copy of its lines in a file. */
struct log_sink {
    enum qp_log_level level;
    FILE *f;
};
static struct log_sink log_sink;

static void log_hook(enum qp_log_level level, const char *msg, void *user) {
    const struct log_sink *s = user;
    if (level < s->level) return;
    static const char *const prefix[] = {"debug", "info", "warning", "error"};
    fprintf(stderr, "qplace: %s: %s\n", prefix[level], msg);
    if (s->f) {
        fprintf(s->f, "qplace: %s: %s\n", prefix[level], msg);
        fflush(s->f);
    }
}

/* Installs log_hook when either flag is given (else main's hook stays); 1 on a bad value. */
static int setup_log(const struct cli_args *a) {
    const char *level = cli_value(a, "log_level", NULL), *file = cli_value(a, "log_file", NULL);
    if (!level && !file) return 0;
    static const char *const names[] = {"DEBUG", "INFO", "WARNING", "ERROR"};
    const char *env = getenv("QPLACE_VERBOSE");
    log_sink.level = env && env[0] && strcmp(env, "0") != 0 ? QP_LOG_DEBUG : QP_LOG_WARN;
    if (level) {
        size_t i = 0;
        while (i < 4 && strcasecmp(level, names[i]) != 0)
            i++;
        if (i == 4) {
            fprintf(stderr,
                    "qplace quantize: --log_level '%s': expected DEBUG, INFO, WARNING or "
                    "ERROR\n",
                    level);
            return 1;
        }
        log_sink.level = (enum qp_log_level)i;
    }
    if (file && !(log_sink.f = fopen(file, "a"))) {
        fprintf(stderr, "qplace quantize: --log_file '%s': cannot open for appending\n", file);
        return 1;
    }
    qp_log_set_hook(log_hook, &log_sink);
    return 0;
}

/* ModelOpt flags qplace has no use for: accepted, one warning each saying what qplace does. */
static void warn_accepted(const struct cli_args *a) {
    if (cli_has(a, "calibration_eps"))
        qp_log(QP_LOG_WARN, "quantize: --calibration_eps: qplace calibrates on its own CPU engine, "
                            "not on ONNX Runtime execution providers; the value is ignored");
    if (cli_has(a, "simplify"))
        qp_log(QP_LOG_WARN, "quantize: --simplify: qplace does not run onnxslim/onnx-simplifier; "
                            "the model is quantized as given");
    if (cli_has(a, "keep_intermediate_files"))
        qp_log(QP_LOG_WARN, "quantize: --keep_intermediate_files: qplace writes no intermediate "
                            "files, only the output model");
    if (cli_has(a, "calibrate_per_node"))
        qp_log(QP_LOG_WARN,
               "quantize: --calibrate_per_node: qplace's calibration is already "
               "streamed batch by batch with bounded memory; the flag changes nothing");
    if (cli_has(a, "use_zero_point"))
        qp_log(QP_LOG_WARN, "quantize: --use_zero_point: only ModelOpt's int4 uses it; qplace's "
                            "int8/fp8 Q/DQ are symmetric with zero point 0, as ModelOpt's");
    if (cli_has(a, "passes"))
        qp_log(QP_LOG_WARN, "quantize: --passes concat_elimination: qplace always shares one "
                            "scale across a Concat's inputs and output; nothing else to enable");
    if (cli_has(a, "mha_accumulation_dtype"))
        qp_log(QP_LOG_WARN, "quantize: --mha_accumulation_dtype: qplace writes no Casts around "
                            "attention's batched MatMuls; their precision is the high precision "
                            "type");
    if (cli_has(a, "trust_calibration_data"))
        qp_log(QP_LOG_WARN, "quantize: --trust_calibration_data: accepted, but qplace never "
                            "unpickles: a pickled .npz/.npy can run code when loaded, so it is "
                            "still refused (save arrays with np.savez(path, **arrays))");
}

/* ModelOpt flags qplace cannot honour: a usage error saying why and what to do instead (1), else
 * 0. Checked before anything runs. */
static int refuse_unsupported(const struct cli_args *a) {
    static const struct {
        const char *flag, *why;
    } refused[] = {
        {"model_id", "qplace builds no Hugging Face input profiles; give the batch shapes with "
                     "--calibration_shapes NAME:1x128,..."},
        {"input_shapes_profile", "qplace calibrates on its own engine, not on ONNX Runtime "
                                 "providers with shape profiles; give --calibration_shapes"},
        {"trust_remote_code", "it only serves --model_id, which qplace does not take"},
        {"trt_plugins", "qplace's engine cannot load TensorRT plugins, so a model with custom "
                        "ops cannot be calibrated here"},
        {"trt_plugins_precision", "it only serves --trt_plugins, which qplace does not take"},
        {"target_dla", "qplace's trt policy targets TensorRT GPUs; DLA placement is not "
                       "implemented (quantize every op type with --op_types_to_quantize)"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (cli_has(a, refused[i].flag)) {
            fprintf(stderr, "qplace quantize: --%s is not supported: %s\n", refused[i].flag,
                    refused[i].why);
            return 1;
        }
    for (size_t i = 0; i < cli_count(a, "passes"); i++)
        if (strcmp(cli_value_at(a, "passes", i), "concat_elimination") != 0) {
            fprintf(stderr, "qplace quantize: --passes '%s': the only pass is concat_elimination\n",
                    cli_value_at(a, "passes", i));
            return 1;
        }
    const char *mha = cli_value(a, "mha_accumulation_dtype", NULL);
    if (mha && strcmp(mha, "fp16") != 0 && strcmp(mha, "fp32") != 0) {
        fprintf(stderr, "qplace quantize: --mha_accumulation_dtype '%s': expected fp16 or fp32\n",
                mha);
        return 1;
    }
    return 0;
}

/* --op_types_to_exclude_fp16 values, comma lists split: *names_out points into *buf_out (both
 * malloc'd, freed by the caller). 1 when out of memory. */
static int split_ops(const struct cli_args *a, char **buf_out, const char ***names_out,
                     size_t *n_out) {
    size_t len = 0, n = 0, cnt = cli_count(a, "op_types_to_exclude_fp16");
    *buf_out = NULL;
    *names_out = NULL;
    *n_out = 0;
    for (size_t i = 0; i < cnt; i++) {
        const char *v = cli_value_at(a, "op_types_to_exclude_fp16", i);
        len += strlen(v) + 1;
        for (n++; *v; v++)
            n += *v == ',';
    }
    if (!cnt) return 0;
    char *buf = malloc(len);
    const char **names = qp_malloc_n(n, sizeof *names);
    if (!buf || !names) {
        free(buf);
        free(names);
        return 1;
    }
    char *p = buf;
    for (size_t i = 0; i < cnt; i++) {
        const char *v = cli_value_at(a, "op_types_to_exclude_fp16", i);
        strcpy(p, v);
        for (char *tok = strtok(p, ","); tok; tok = strtok(NULL, ","))
            names[(*n_out)++] = tok;
        p += strlen(v) + 1;
    }
    *buf_out = buf;
    *names_out = names;
    return 0;
}

/* --opset N: a number (the range is checked by the pipeline); 1 on a bad value. */
static int parse_opset(const struct cli_args *a, int64_t *out) {
    const char *s = cli_value(a, "opset", NULL);
    if (!s) return 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || v <= 0 || v > 1000) {
        fprintf(stderr, "qplace quantize: --opset '%s': expected an opset number (19..21)\n", s);
        return 1;
    }
    *out = v;
    return 0;
}

/* The accuracy methods' flags (weight clipping, the budget, equalization) into `o`; 1 on an
 * error (printed). */
static int accuracy_options(const struct cli_args *a, struct qp_quantize_options *o) {
    const char *bc = cli_value(a, "bias_correction", cli_has(a, "bias_correction") ? "on" : "auto");
    o->bias_correction = strcmp(bc, "on") == 0     ? QP_BIAS_CORRECTION_ON
                         : strcmp(bc, "off") == 0  ? QP_BIAS_CORRECTION_OFF
                         : strcmp(bc, "auto") == 0 ? QP_BIAS_CORRECTION_AUTO
                                                   : -1;
    if (o->bias_correction < 0) {
        fprintf(stderr, "qplace quantize: --bias_correction=%s: expected on, off or auto\n", bc);
        return 1;
    }
    struct qp_error werr = {0};
    int clip = 1;
    if (cli_weight_clip_mse(a, &clip, &werr) != QP_OK) {
        fprintf(stderr, "qplace quantize: %s\n", werr.msg);
        return 1;
    }
    o->weight_clipping = clip ? QP_WEIGHT_CLIP_MSE : QP_WEIGHT_CLIP_ABSMAX;
    const char *wr = cli_value(a, "weight_rounding", "nearest");
    if (strcmp(wr, "adaround") == 0) {
        o->weight_rounding = QP_WEIGHT_ROUND_ADAROUND;
    } else if (strcmp(wr, "nearest") != 0) {
        fprintf(stderr,
                "qplace quantize: --weight_rounding must be nearest or adaround, not '%s'\n", wr);
        return 1;
    }
    const char *v = cli_value(a, "weight_rounding_seconds", NULL);
    if (v &&
        !(cli_parse_finite(v, &o->weight_rounding_seconds) && o->weight_rounding_seconds > 0)) {
        fprintf(stderr,
                "qplace quantize: --weight_rounding_seconds: '%s' is not a positive number "
                "of seconds\n",
                v);
        return 1;
    }
    v = cli_value(a, "max_output_drift", NULL);
    if (v && !(cli_parse_finite(v, &o->max_output_drift) && o->max_output_drift >= 0)) {
        fprintf(stderr, "qplace quantize: --max_output_drift: '%s' is not a non-negative number\n",
                v);
        return 1;
    }
    v = cli_value(a, "min_top1_agreement", NULL);
    if (v && !(cli_parse_finite(v, &o->min_top1_agreement) && o->min_top1_agreement > 0 &&
               o->min_top1_agreement <= 1)) {
        fprintf(stderr, "qplace quantize: --min_top1_agreement: '%s' is not a fraction in (0, 1]\n",
                v);
        return 1;
    }
    const char *eq = cli_value(a, "equalization", "none");
    static const char *const eq_names[] = {"none", "cle", "smoothquant", "all"};
    o->equalization = 4;
    for (unsigned i = 0; i < 4; i++)
        if (strcmp(eq, eq_names[i]) == 0) o->equalization = i;
    if (o->equalization == 4) {
        fprintf(stderr,
                "qplace quantize: --equalization must be none, cle, smoothquant or all, not "
                "'%s'\n",
                eq);
        return 1;
    }
    if ((v = cli_value(a, "smoothquant_alpha", NULL))) {
        if (!(cli_parse_finite(v, &o->smoothquant_alpha) && o->smoothquant_alpha >= 0 &&
              o->smoothquant_alpha <= 1)) {
            fprintf(stderr,
                    "qplace quantize: --smoothquant_alpha must be a number in [0, 1], not '%s'\n",
                    v);
            return 1;
        }
        if (!(o->equalization & QP_EQUALIZE_SMOOTHQUANT))
            qp_log(QP_LOG_WARN, "quantize: --smoothquant_alpha is not used without "
                                "--equalization smoothquant or all");
    }
    return 0;
}

/* The written model's flags into `o`; *buf and *ops own the op type list. 1 on an error. */
static int output_options(const struct cli_args *a, struct qp_quantize_options *o, char **buf,
                          const char ***ops) {
    if (parse_opset(a, &o->opset)) return 1;
    o->use_external_data_format = cli_has(a, "use_external_data_format");
    o->direct_io_types = cli_has(a, "direct_io_types");
    if (accuracy_options(a, o)) return 1;
    if (split_ops(a, buf, ops, &o->n_op_types_to_exclude_fp16)) {
        fprintf(stderr, "qplace quantize: out of memory\n");
        return 1;
    }
    o->op_types_to_exclude_fp16 = *ops;
    return 0;
}

/* The accuracy budget's outcome and what it left in float. */
static void print_budget(const struct qp_quantize_budget *b) {
    printf("  ");
    cli_print_budget(stdout, &b->goal, &b->before, &b->after, b->n_excluded, b->met);
    printf(
        "    %zu of %zu quantized nodes left in float (%.1f%%, ranked by sensitivity in %.1f s)%s",
        b->n_excluded, b->n_ranked,
        b->n_ranked ? 100.0 * (double)b->n_excluded / (double)b->n_ranked : 0.0, b->seconds,
        b->n_excluded ? ":" : "\n");
    for (size_t i = 0; i < b->n_excluded; i++)
        printf(" %s%s", b->excluded[i], i + 1 < b->n_excluded ? "," : "\n");
}

static void print_drift_rows(const struct qp_quantize_drift *d, size_t n) {
    for (size_t i = 0; i < n; i++) {
        printf("    %-28s %10.6f %12.6g ", d[i].name, d[i].cosine, d[i].max_abs);
        if (d[i].has_top1)
            printf("%.2f%% of %llu rows\n", 100.0 * d[i].top1, (unsigned long long)d[i].n_rows);
        else
            printf("-\n");
    }
}

/* --equalization: the pairs per method and the first few skips with their reasons. */
static void print_equalization(const struct qp_quantize_report *r) {
    const struct qp_equalize_report *e = r->equalize;
    printf("  equalization:");
    if (r->equalization & QP_EQUALIZE_CLE)
        printf(" cle %zu pairs rescaled, %zu skipped (%d passes, last largest |log s| %.1e)",
               e->n_cle_pairs, e->n_cle_skipped, e->cle_passes, e->cle_last_change);
    if (r->equalization == QP_EQUALIZE_ALL) printf(";");
    if (r->equalization & QP_EQUALIZE_SMOOTHQUANT)
        printf(" smoothquant (alpha %.2f) %zu LayerNorms rescaled, %zu skipped",
               r->smoothquant_alpha, e->n_smoothquant_pairs, e->n_smoothquant_skipped);
    printf("\n");
    enum { SHOWN = 5 };
    for (size_t i = 0; i < e->n_skips && i < SHOWN; i++)
        printf("    skipped (%s) '%s': %s\n", e->skips[i].method, e->skips[i].node,
               e->skips[i].reason);
    if (e->n_skips > SHOWN) printf("    ... and %zu more skipped\n", e->n_skips - SHOWN);
}

/* --weight_rounding adaround's line. */
static void print_rounding(const struct qp_adaround_stats *s) {
    printf("  weight rounding (adaround): %zu layers, %llu of %llu weights at the level that is "
           "not the nearest, output error / energy %.4g -> %.4g (up to %llu input rows a layer), "
           "%.2f s",
           s->n_layers, (unsigned long long)s->n_flipped, (unsigned long long)s->n_weights,
           s->error_before, s->error_after, (unsigned long long)s->n_rows, s->seconds);
    if (s->n_skipped) printf("; %zu layers left at nearest", s->n_skipped);
    if (s->n_timed_out) printf("; %zu layers past the time bound kept nearest", s->n_timed_out);
    printf("\n");
}

static void print_report(const struct qp_quantize_options *o, const struct qp_quantize_report *r) {
    const struct qp_writer_stats *w = &r->writer;
    printf("qplace quantize: %s -> %s\n", o->onnx_path, r->output_path);
    printf("  mode %s, opset %lld -> %lld, placement: %s%s\n",
           o->mode == QP_QUANT_FP8 ? "fp8 (e4m3fn)" : "int8", (long long)w->opset_from,
           (long long)w->opset_to, r->placement_source,
           o->dq_only ? ", weights stored quantized (dq_only)" : "");
    printf("  quantized: %zu activation edges (%zu Q/DQ pairs), %zu weights (%zu tensors",
           w->n_edges, w->n_tensors, w->n_weights, w->n_weight_tensors);
    if (w->n_folded_constants) printf(", %zu Constant nodes folded", w->n_folded_constants);
    printf(")\n");
    if (o->weight_clipping == QP_WEIGHT_CLIP_MSE)
        printf("  weight clipping: least error per channel, %zu of %zu channels clipped below "
               "absmax, mean amax / absmax %.4f\n",
               w->n_weight_channels_clipped, w->n_weight_channels, w->weight_clip_mean_ratio);
    if (r->equalize) print_equalization(r);
    if (w->n_ops) {
        printf("    %-24s %8s %8s\n", "consumer op", "edges", "weights");
        for (size_t i = 0; i < w->n_ops; i++)
            printf("    %-24s %8zu %8zu\n", w->by_op[i].op_type, w->by_op[i].n_edges,
                   w->by_op[i].n_weights);
    }
    if (w->high_precision == QP_DTYPE_FLOAT16 || w->high_precision == QP_DTYPE_BFLOAT16) {
        const struct qp_f16_stats *f = &w->f16;
        const char *lo = w->high_precision == QP_DTYPE_FLOAT16 ? "fp16" : "bf16";
        printf("  high precision %s: %zu nodes in %s, %zu kept fp32, %zu initializers and %zu "
               "Constants converted, %zu Casts added\n",
               lo, f->n_fp16_nodes, lo, f->n_fp32_nodes, f->n_initializers, f->n_constants,
               f->n_casts);
        if (f->n_clamped || f->n_scale_underflow)
            printf("  warning: %zu values beyond the fp16 range clamped to +-65504, %zu scales "
                   "raised to 2^-24\n",
                   f->n_clamped, f->n_scale_underflow);
    } else {
        printf("  high precision fp32\n");
    }
    if (o->direct_io_types)
        printf("  direct I/O types: graph inputs and outputs in the high precision type, %zu graph "
               "input QuantizeLinear nodes removed\n",
               w->n_input_q_removed);
    if (o->use_external_data_format)
        printf("  weights in external data: %s_data\n", r->output_path);
    if (r->calibrated)
        printf("  calibration: %s data, method %s, %llu samples in %llu batches\n",
               r->calibration_source, r->method, (unsigned long long)r->n_calib_samples,
               (unsigned long long)r->n_calib_batches);
    if (r->calibrated && r->n_ranges_reused)
        printf("  equalization left %zu of the calibrated tensors unchanged (up to float "
               "rounding): their ranges are the run without equalization's; %zu were calibrated "
               "again\n",
               r->n_ranges_reused, r->n_ranges_recalibrated);
    if (r->calibrated && o->method == QP_CALIB_AUTO)
        cli_print_auto(r->auto_methods, r->n_auto_fallback);
    else if (!r->calibrated)
        printf("  calibration: none; ranges from %s%s%s (%zu ranges, %zu not placed)\n",
               o->ranges_in ? o->ranges_in : "",
               o->ranges_in && o->calibration_cache_path ? ", then " : "",
               o->calibration_cache_path ? o->calibration_cache_path : "", r->n_file_ranges,
               r->n_unused_ranges);
    if (r->bias_correction) {
        const struct qp_bias_correct_stats *b = &r->bias;
        printf("  bias correction%s: %zu layers (%zu channels), %zu biases added, %d rounds, "
               "%.2f s%s\n",
               r->bias_auto ? " (auto)" : "", b->n_layers, b->n_channels, b->n_biases_added,
               b->n_rounds, b->seconds,
               !r->bias_auto  ? ""
               : r->bias_kept ? "; kept: the drift's mean cosine is higher with it"
                              : "; NOT kept: the drift's mean cosine is not higher with it, the "
                                "model is written without");
        if (b->n_passes > 1)
            printf("    mean |channel shift| / channel std on the calibration data: %.4g before, "
                   "%.4g after round %d\n",
                   b->shift_before, b->shift_after, b->n_passes - 1);
    }
    if (r->weight_rounding) print_rounding(&r->rounding);
    if (r->n_overridden)
        printf("  input shapes fixed by --override_shapes %s\n", o->override_shapes);
    if (r->has_budget) print_budget(&r->budget);
    const char *how = o->eval_data_path         ? "--eval_data_path"
                      : !r->eval_on_calibration ? "synthetic data, another seed"
                      : r->calibrated
                          ? "in-sample: the calibration data itself; give --eval_data_path "
                            "for held-out samples"
                          : "the --calibration_data_path data";
    printf("  drift vs the float model on %llu samples (%s):\n",
           (unsigned long long)r->n_eval_samples, how);
    if (r->drift_before_precision)
        printf("    (measured before the %s step, with fp32 high precision: the engine runs "
               "neither bfloat16 nor quantized graph inputs)\n",
               o->direct_io_types ? "direct I/O" : "bf16");
    printf("    %-28s %10s %12s %s\n", "output", "cosine", "max_abs_err", "top1_agreement");
    print_drift_rows(r->outputs, r->n_outputs);
    if (r->outputs_before) {
        printf("  the same quantization without equalization (its own placement and "
               "calibration):\n");
        print_drift_rows(r->outputs_before, r->n_outputs_before);
    }
    if (r->outputs_uncorrected) {
        printf("  the same model without bias correction (same samples):\n");
        print_drift_rows(r->outputs_uncorrected, r->n_outputs);
    }
    if (r->outputs_corrected) {
        printf("  the same model with bias correction, not written (same samples):\n");
        print_drift_rows(r->outputs_corrected, r->n_outputs);
    }
    if (r->outputs_unclipped) {
        printf("  the same model without weight clipping (absmax scales; same samples):\n");
        print_drift_rows(r->outputs_unclipped, r->n_outputs);
    }
    if (r->outputs_unrounded) {
        printf("  the model with nearest weight levels, before bias correction (same samples):\n");
        print_drift_rows(r->outputs_unrounded, r->n_outputs);
    }
}

/* --explain: every entry of the applied placement, in graph order, with the rule behind it
 * (reason identifiers are listed in docs/placement.md). */
static void print_explain(const struct qp_placement *p) {
    if (!p) return;
    printf("placement: %zu activation edges, %zu weights (tensor -> consumer[input]: reason)\n",
           p->n_edges, p->n_weights);
    for (size_t i = 0; i < p->n_edges; i++) {
        const struct qp_qedge *e = &p->edges[i];
        printf("  edge   %s -> %s[%d]: %s\n", e->tensor, e->node, e->input, e->reason);
    }
    for (size_t i = 0; i < p->n_weights; i++) {
        const struct qp_qweight *w = &p->weights[i];
        if (w->axis >= 0)
            printf("  weight %s -> %s[%d], axis %d: %s\n", w->tensor, w->node, w->input, w->axis,
                   w->reason);
        else
            printf("  weight %s -> %s[%d], per tensor: %s\n", w->tensor, w->node, w->input,
                   w->reason);
    }
}

int cli_quantize_run(const struct cli_args *a) {
    struct qp_error err = {0};
    struct qp_quantize_options o;
    qp_quantize_options_default(&o);
    struct qp_select *sel = NULL;
    struct qp_quantize_report *r = NULL;
    char *ops_buf = NULL;
    const char **ops = NULL;
    int rc = 0;
    if (refuse_unsupported(a) || setup_log(a)) return 1;
    warn_accepted(a);
    o.onnx_path = cli_value(a, "onnx_path", NULL);
    if (!o.onnx_path && a->n_pos == 0) {
        fprintf(stderr, "qplace quantize: --onnx_path is required\n");
        return 1;
    }
    if (!o.onnx_path) o.onnx_path = a->pos[0];
    const char *mode = cli_value(a, "quantize_mode", "int8");
    if (strcmp(mode, "int8") == 0)
        o.mode = QP_QUANT_INT8;
    else if (strcmp(mode, "fp8") == 0)
        o.mode = QP_QUANT_FP8;
    else {
        fprintf(stderr, "qplace quantize: --quantize_mode '%s': expected int8 or fp8\n", mode);
        return 1;
    }
    const char *hp = cli_value(a, "high_precision_dtype", "fp16");
    if (strcmp(hp, "fp32") == 0)
        o.high_precision = QP_DTYPE_FLOAT;
    else if (strcmp(hp, "fp16") == 0)
        o.high_precision = QP_DTYPE_FLOAT16;
    else if (strcmp(hp, "bf16") == 0)
        o.high_precision = QP_DTYPE_BFLOAT16;
    else {
        fprintf(stderr,
                "qplace quantize: --high_precision_dtype '%s': expected fp32, fp16 or bf16\n", hp);
        return 1;
    }
    const char *method = cli_value(a, "calibration_method", NULL);
    if (method && qp_calib_method_parse(method, &o.method, &err) != QP_OK) return cli_fail(&err);
    if (data_flags(a, method, &o)) return 1;
    const char *threads = cli_value(a, "threads", NULL);
    if (threads) {
        char *end = NULL;
        long t = strtol(threads, &end, 10);
        if (!*threads || *end || t < 0 || t > 4096) {
            fprintf(stderr, "qplace quantize: --threads '%s': expected a count\n", threads);
            return 1;
        }
        o.n_threads = (int)t;
    }
    struct qp_data_options data;
    if (cli_data_options(a, "quantize", &data)) return 1;
    o.data = &data;
    o.calibration_data_path = cli_value(a, "calibration_data_path", NULL);
    o.eval_data_path = cli_value(a, "eval_data_path", NULL);
    o.calibration_shapes = cli_value(a, "calibration_shapes", NULL);
    o.disable_mha_qdq = cli_has(a, "disable_mha_qdq");
    o.rules_path = cli_value(a, "rules", NULL);
    o.placement_in = cli_value(a, "placement_in", NULL);
    o.placement_out = cli_value(a, "placement_out", NULL);
    o.dq_only = cli_has(a, "dq_only");
    o.output_path = cli_value(a, "output_path", NULL);
    if (output_options(a, &o, &ops_buf, &ops)) {
        rc = 1;
        goto done;
    }

    sel = qp_select_create();
    if (!sel) {
        qp_error_set(&err, QP_ERR_NOMEM, "quantize: out of memory");
        return cli_fail(&err);
    }
    int any = 0;
    if (add_list(sel, a, "op_types_to_quantize", QP_SELECT_OP_TYPES_TO_QUANTIZE, &any, &err) ||
        add_list(sel, a, "op_types_to_exclude", QP_SELECT_OP_TYPES_TO_EXCLUDE, &any, &err) ||
        add_list(sel, a, "nodes_to_quantize", QP_SELECT_NODES_TO_QUANTIZE, &any, &err) ||
        add_list(sel, a, "nodes_to_exclude", QP_SELECT_NODES_TO_EXCLUDE, &any, &err)) {
        rc = cli_fail(&err);
        goto done;
    }
    if (o.placement_in && (any || o.rules_path || o.disable_mha_qdq)) {
        fprintf(stderr, "qplace quantize: --placement_in replaces the policy; it cannot be "
                        "combined with include/exclude lists, --rules or --disable_mha_qdq\n");
        rc = 1;
        goto done;
    }
    o.select = any ? sel : NULL;
    if (cli_quantize_autotune_wanted(a)) {
        if ((rc = cli_quantize_autotune(a, &o, &r)) != 0) goto done;
    } else if (qp_quantize(&o, &r, &err) != QP_OK) {
        rc = cli_fail(&err);
        goto done;
    }
    print_report(&o, r);
    if (cli_has(a, "explain")) print_explain(r->placement);
done:
    qp_quantize_report_free(r);
    qp_select_free(sel);
    free(ops);
    free(ops_buf);
    if (log_sink.f) fclose(log_sink.f);
    log_sink.f = NULL; /* the hook stays, on stderr only */
    return rc;
}
