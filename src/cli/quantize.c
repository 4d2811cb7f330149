/* qplace quantize --onnx_path MODEL ...: placement, calibration, Q/DQ writer, drift summary. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/data.h"
#include "cli.h"
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
    {"high_precision_dtype", CLI_VALUE, "fp32|fp16",
     "precision of the rest (default fp16, I/O kept fp32)"},
    {"output_path", CLI_VALUE, "OUT", "output model (default <model>.quant.onnx)"},
    {"threads", CLI_VALUE, "N", "engine threads (default: all cores)"},
    {"explain", CLI_BOOL, NULL, "also print every placed edge and weight with its reason"},
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
    "every placed edge and weight with the rule that placed it. docs/quantize.md.\n";

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
    if (ps) {
        char *end;
        errno = 0;
        double p = strtod(ps, &end);
        if (end == ps || *end || errno || !(p > 0 && p <= 100)) {
            fprintf(stderr, "qplace quantize: --percentile '%s' is not a number in (0, 100]\n", ps);
            return 1;
        }
        if (o->method != QP_CALIB_PERCENTILE) {
            fprintf(stderr,
                    "qplace quantize: --percentile needs --calibration_method percentile\n");
            return 1;
        }
        o->percentile = p;
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

static void print_report(const struct qp_quantize_options *o, const struct qp_quantize_report *r) {
    const struct qp_writer_stats *w = &r->writer;
    printf("qplace quantize: %s -> %s\n", o->onnx_path, r->output_path);
    printf("  mode %s, opset %lld -> %lld, placement: %s%s\n",
           o->mode == QP_QUANT_FP8 ? "fp8 (e4m3fn)" : "int8", (long long)w->opset_from,
           (long long)(w->opset_from < 19 ? 19 : w->opset_from), r->placement_source,
           o->dq_only ? ", weights stored quantized (dq_only)" : "");
    printf("  quantized: %zu activation edges (%zu Q/DQ pairs), %zu weights (%zu tensors",
           w->n_edges, w->n_tensors, w->n_weights, w->n_weight_tensors);
    if (w->n_folded_constants) printf(", %zu Constant nodes folded", w->n_folded_constants);
    printf(")\n");
    if (w->n_ops) {
        printf("    %-24s %8s %8s\n", "consumer op", "edges", "weights");
        for (size_t i = 0; i < w->n_ops; i++)
            printf("    %-24s %8zu %8zu\n", w->by_op[i].op_type, w->by_op[i].n_edges,
                   w->by_op[i].n_weights);
    }
    if (w->high_precision == QP_DTYPE_FLOAT16) {
        const struct qp_f16_stats *f = &w->f16;
        printf("  high precision fp16: %zu nodes in fp16, %zu kept fp32, %zu initializers and %zu "
               "Constants converted, %zu Casts added\n",
               f->n_fp16_nodes, f->n_fp32_nodes, f->n_initializers, f->n_constants, f->n_casts);
        if (f->n_clamped || f->n_scale_underflow)
            printf("  warning: %zu values beyond the fp16 range clamped to +-65504, %zu scales "
                   "raised to 2^-24\n",
                   f->n_clamped, f->n_scale_underflow);
    } else {
        printf("  high precision fp32\n");
    }
    if (r->calibrated)
        printf("  calibration: %s data, method %s, %llu samples in %llu batches\n",
               r->calibration_source, r->method, (unsigned long long)r->n_calib_samples,
               (unsigned long long)r->n_calib_batches);
    else
        printf("  calibration: none; ranges from %s%s%s (%zu ranges, %zu not placed)\n",
               o->ranges_in ? o->ranges_in : "",
               o->ranges_in && o->calibration_cache_path ? ", then " : "",
               o->calibration_cache_path ? o->calibration_cache_path : "", r->n_file_ranges,
               r->n_unused_ranges);
    if (r->n_overridden)
        printf("  input shapes fixed by --override_shapes %s\n", o->override_shapes);
    const char *how = o->eval_data_path         ? "--eval_data_path"
                      : !r->eval_on_calibration ? "synthetic data, another seed"
                      : r->calibrated
                          ? "in-sample: the calibration data itself; give --eval_data_path "
                            "for held-out samples"
                          : "the --calibration_data_path data";
    printf("  drift vs the float model on %llu samples (%s):\n",
           (unsigned long long)r->n_eval_samples, how);
    printf("    %-28s %10s %12s %s\n", "output", "cosine", "max_abs_err", "top1_agreement");
    for (size_t i = 0; i < r->n_outputs; i++) {
        const struct qp_quantize_drift *d = &r->outputs[i];
        printf("    %-28s %10.6f %12.6g ", d->name, d->cosine, d->max_abs);
        if (d->has_top1)
            printf("%.2f%% of %llu rows\n", 100.0 * d->top1, (unsigned long long)d->n_rows);
        else
            printf("-\n");
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
    int rc = 0;
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
    else {
        fprintf(stderr, "qplace quantize: --high_precision_dtype '%s': expected fp32 or fp16\n",
                hp);
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
    if (qp_quantize(&o, &r, &err) != QP_OK) {
        rc = cli_fail(&err);
        goto done;
    }
    print_report(&o, r);
    if (cli_has(a, "explain")) print_explain(r->placement);
done:
    qp_quantize_report_free(r);
    qp_select_free(sel);
    return rc;
}
