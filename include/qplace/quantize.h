/*
 * qplace/quantize.h — quantize a model in memory: placement, calibration, Q/DQ, drift.
 *
 * The pipeline of `qplace quantize` (docs/quantize.md) for a model already loaded: the float
 * model is never changed; the result is a new model holding QuantizeLinear/DequantizeLinear
 * pairs where the placement says (the trt policy by default, or a placement you give), with
 * scales calibrated on your data, and a summary of what was written and how far the quantized
 * model's outputs drift from the float model's.
 *
 *     struct qp_error err = {0};
 *     struct qp_quantize_config c;
 *     qp_quantize_config_default(&c);                 // int8, entropy, fp16 high precision
 *     c.trt.op_types_to_exclude = (const char *[]){"Resize"};
 *     c.trt.n_op_types_to_exclude = 1;
 *     struct qp_model *q = NULL;
 *     struct qp_quantize_summary *s = NULL;
 *     if (qp_quantize_model(model, data, &c, &q, &s, &err) != QP_OK) goto fail;
 *     printf("%zu Q/DQ pairs, cosine %.4f\n", s->n_tensors, s->outputs[0].cosine);
 *     qp_model_save_file(q, "model.quant.onnx", NULL, &err);
 *     qp_quantize_summary_free(s);
 *     qp_model_free(q);
 *
 * Calibration runs on every batch of the calibration data, as ModelOpt's does. The drift is
 * measured on `eval_data` when given, else on the calibration data itself (in-sample:
 * eval_on_calibration is 1). With no calibration data at all, seeded synthetic data stands in
 * (as ModelOpt's RandomDataProvider; the summary says "synthetic"), and the drift is measured
 * on synthetic data drawn with another seed unless `eval_data` is given.
 * The same model, data and configuration give the same bytes as `qplace quantize`.
 */
#ifndef QPLACE_QUANTIZE_H
#define QPLACE_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

#include "qplace/calib.h"
#include "qplace/dtype.h"
#include "qplace/model.h"
#include "qplace/placement.h"
#include "qplace/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How each weight channel's scale is chosen: from its absmax (ModelOpt's), or the clipped amax
 * whose quantization error over the channel's weights is least (ratios 1.0 .. 0.5 of absmax;
 * 1.0 when nothing is better; qplace's default since 2026-12-07, docs/quantize.md). A zeroed
 * config reads absmax (0); qp_quantize_config_default sets QP_WEIGHT_CLIP_MSE. */
enum qp_weight_clipping { QP_WEIGHT_CLIP_ABSMAX = 0, QP_WEIGHT_CLIP_MSE };

/* How each int8 weight takes its level: the nearest (ModelOpt's, the default), or the level
 * just below or above it that makes its layer's output on the calibration data closest to the
 * float layer's (AdaRound-style; docs/quantize.md "Weight rounding"). */
enum qp_weight_rounding { QP_WEIGHT_ROUND_NEAREST = 0, QP_WEIGHT_ROUND_ADAROUND };

/* Equalization folded into the float weights before calibration (docs/quantize.md,
 * "Equalization"), bits: cross-layer equalization of Conv -> [BN] -> Relu -> Conv pairs, and
 * SmoothQuant's migration of LayerNorm -> MatMul activation ranges into the weights. */
enum qp_equalization {
    QP_EQUALIZE_NONE = 0,
    QP_EQUALIZE_CLE = 1,
    QP_EQUALIZE_SMOOTHQUANT = 2,
    QP_EQUALIZE_ALL = 3
};

/* Options with ModelOpt's names (modelopt.onnx.quantization.quantize). */
struct qp_quantize_config {
    /* The trt policy's options (qplace/placement.h): trt.quantize_mode is the quantize mode
     * (int8 or fp8) also when `placement` is given; op-type and node lists, disable_mha_qdq and
     * rules_path shape the policy's placement. */
    struct qp_trt_options trt;
    /* A placement to apply as it is (borrowed; checked against the model after conversion to
     * opset 19); NULL: the trt policy. */
    const struct qp_placement *placement;
    enum qp_calib_method calibration_method; /* default entropy */
    /* Dynamic dims of synthetic data when no calibration data is given ("x:1x3x224x224"). */
    const char *calibration_shapes;
    struct qp_provider *eval_data; /* borrowed; NULL: see above */
    int dq_only;                   /* weights stored quantized, DequantizeLinear only */
    /* QP_DTYPE_FLOAT16 (default), QP_DTYPE_BFLOAT16 or QP_DTYPE_FLOAT (no conversion). */
    enum qp_dtype high_precision_dtype;
    int n_threads; /* engine threads; 0 (default): all cores */
    /* With calibration_method percentile: the percentile in (0, 100]; 0 (default): 99.999. */
    double percentile;
    /* Scales from these ranges (borrowed; qp_ranges_load_json / _load_trt_cache) instead of
     * calibration: every activation tensor of the placement needs one (QP_ERR_BAD_INPUT naming
     * the first that has none). NULL (default): calibrate. */
    const struct qp_ranges *ranges;
    int64_t opset; /* output opset, 19..21; 0 (default): the model's, at least 19 */
    /* With fp16/bf16 high precision, nodes of these op types stay float32 (borrowed). */
    const char *const *op_types_to_exclude_fp16;
    size_t n_op_types_to_exclude_fp16;
    /* 1: graph I/O in the high precision type, graph-input QuantizeLinear removed. */
    int direct_io_types;
    /* "name:1x3x224x224,...": the dynamic dims of these graph inputs fixed in the written
     * model and for calibration (static dims must match), as --override_shapes. NULL: none. */
    const char *override_shapes;
    enum qp_weight_clipping weight_clipping; /* qplace's; qp_quantize_config_default: MSE */
    /* The accuracy budget (qplace's; docs/quantize.md "Accuracy budget"): after calibration,
     * every quantized node is ranked by sensitivity (as qplace/sensitivity.h by node, kl_div,
     * quantize_one, on the calibration data) and the most sensitive are excluded one at a time
     * until, on eval_data (else the calibration data), the drift (kl_div summed over outputs)
     * is at most max_output_drift and every output holding class scores (rank >= 2, last dim
     * >= 2) has its argmax agree with the float model's on at least a fraction
     * min_top1_agreement of its rows (per sample, or per time step for a CTC head).
     * max_output_drift < 0 (default -1) and min_top1_agreement 0 (default) set no bound;
     * neither set: no budget. */
    double max_output_drift;
    double min_top1_agreement;
    /* qplace's: enum qp_equalization bits (default QP_EQUALIZE_NONE). Not combinable with
     * `ranges` (they were measured on the model before equalization). */
    unsigned equalization;
    double smoothquant_alpha; /* in [0, 1]; qp_quantize_config_default sets 0.5 */
    /* qplace's, enum qp_bias_correction: after calibration, each Conv/ConvTranspose/Gemm/MatMul
     * the placement quantizes gets its bias lowered by the mean per-channel output shift
     * (quantized minus float) measured on the calibration data, a bias or Add created where it
     * has none (docs/quantize.md "Bias correction"). Written biases stay float.
     * qp_quantize_config_default sets QP_BIAS_CORRECTION_AUTO. */
    int bias_correction;
    /* qplace's: QP_WEIGHT_ROUND_ADAROUND chooses each Conv/Gemm/MatMul weight's level (below or
     * above) by its layer's output error on the calibration data (needs calibration data and
     * int8), after calibration and before bias correction; the weights are written on their
     * levels. weight_rounding_seconds bounds its time (0: 300 s); layers it does not reach keep
     * the nearest levels. Default QP_WEIGHT_ROUND_NEAREST. */
    enum qp_weight_rounding weight_rounding;
    double weight_rounding_seconds;
};

enum qp_bias_correction {
    QP_BIAS_CORRECTION_OFF = 0,
    QP_BIAS_CORRECTION_ON = 1, /* always; needs calibration data */
    /* with calibration data of the user's (not synthetic data), correct, measure the drift of
     * the model with and without the correction on the evaluation samples, and write the one
     * whose mean cosine over the outputs is higher (summary: bias_auto, bias_kept) */
    QP_BIAS_CORRECTION_AUTO = 2,
};

void qp_quantize_config_default(struct qp_quantize_config *c);

/* Drift of one graph output over the evaluation samples. */
struct qp_quantize_drift {
    char *name;
    double cosine;   /* over all elements of all evaluation samples */
    double max_abs;  /* largest |quantized - float| */
    int has_top1;    /* the output looks like class scores (rank >= 2, last dim >= 2) */
    double top1;     /* fraction of rows (all positions before the last axis) whose argmax agree */
    uint64_t n_rows; /* rows compared for top1 */
};

struct qp_quantize_summary {
    size_t n_edges, n_tensors;          /* activation slots placed, Q/DQ pairs written */
    size_t n_weights, n_weight_tensors; /* weight slots placed, weights quantized */
    int64_t opset_from, opset_to;
    enum qp_dtype high_precision;   /* as applied */
    const char *placement_source;   /* "trt policy", "trt policy + rules", "placement" */
    const char *calibration_source; /* "npz", "npy", "images", "memory", "synthetic" */
    const char *method;             /* "max", "entropy", "percentile", "mse", "auto" */
    uint64_t n_calib_samples, n_calib_batches, n_eval_samples;
    int eval_on_calibration; /* 1: drift measured on the calibration data (in-sample) */
    size_t n_outputs;
    struct qp_quantize_drift *outputs;
    /* The placement the writer applied, each entry with its reason; owned by the summary. */
    struct qp_placement *placement;
    /* 1: the drift was measured before the bf16 / direct_io_types step (the engine runs neither
     * bfloat16 nor quantized graph inputs), on the model with float32 high precision. */
    int drift_before_precision;
    size_t n_overridden;                     /* graph inputs fixed by override_shapes */
    enum qp_weight_clipping weight_clipping; /* as applied */
    /* With QP_WEIGHT_CLIP_MSE: weight channels quantized, those clipped below their absmax,
     * and the mean ratio of the chosen amax to absmax. */
    size_t n_weight_channels, n_weight_channels_clipped;
    double weight_clip_mean_ratio;
    /* With an accuracy budget: budget 1; the quantized nodes ranked, those excluded (names,
     * most sensitive first; owned by the summary), and the whole model's drift (kl_div summed
     * over outputs) and least top-1 agreement over class-score outputs (-1: no such output)
     * with everything quantized and after the exclusions, as the budget measured them (fake
     * quantization, weight scales from absmax). budget_met 0: every ranked node was excluded
     * and the bounds still did not hold (the model is written all the same). */
    int budget, budget_met;
    size_t n_budget_ranked, n_budget_excluded;
    char **budget_excluded;
    double budget_drift_before, budget_drift_after;
    double budget_top1_before, budget_top1_after;
    /* Equalization as applied (enum qp_equalization bits, alpha), the pairs rescaled and skipped
     * per method, and the drift of the same quantization without equalization (outputs_before,
     * n_outputs entries, in the order of `outputs`; NULL when equalization is off). */
    unsigned equalization;
    double smoothquant_alpha;
    size_t n_cle_pairs, n_cle_skipped, n_smoothquant_pairs, n_smoothquant_skipped;
    struct qp_quantize_drift *outputs_before;
    /* bias_correction: 1 when it ran; layers corrected, biases (Conv/Gemm inputs, Add nodes)
     * created, correction rounds (2); the mean over the layers' output channels of |mean shift|
     * / std of the channel, the shift being the layer's output minus that of the same layer in
     * float on the same input, over the calibration data: before any correction, and as the last
     * measuring pass found it (after round bias_rounds - 1: the last round's own correction is
     * not measured again, which would cost one more pass); its wall time; and the drift of the
     * model written without it, on the same samples as `outputs` (n_outputs entries, owned by
     * the summary; NULL when it did not run). */
    int bias_correction;
    size_t n_bias_layers, n_biases_added;
    int bias_rounds;
    double bias_shift_before, bias_shift_after, bias_seconds;
    struct qp_quantize_drift *outputs_uncorrected;
    /* weight_clipping QP_WEIGHT_CLIP_MSE: the drift of the same model written with each weight
     * channel's absmax scale instead, on the same samples as `outputs` (n_outputs entries, owned
     * by the summary; NULL otherwise, and when bias correction auto did not keep its correction:
     * it was measured on the corrected model). */
    struct qp_quantize_drift *outputs_unclipped;
    /* calibration_method auto: the tensors that took each method (indexed by enum
     * qp_calib_method), and how many of them took entropy because none of their consumers
     * could be evaluated (docs/calibration.md); zeros for other methods. */
    size_t auto_methods[QP_CALIB_AUTO];
    size_t n_auto_fallback;
    /* bias_correction QP_BIAS_CORRECTION_AUTO that ran: bias_auto 1, and bias_kept 1 when the
     * corrected model was written (outputs its drift, outputs_uncorrected the other's) or 0
     * when its mean cosine was not higher and the model was written without the correction
     * (outputs that model's drift, outputs_uncorrected NULL, outputs_corrected the corrected
     * model's: n_outputs entries, owned by the summary; NULL otherwise). */
    int bias_auto, bias_kept;
    struct qp_quantize_drift *outputs_corrected;
    /* With equalization and calibration: the placed tensors whose values the equalization leaves
     * unchanged (up to float rounding: they lie past the layers that multiply its scales back)
     * keep the ranges the run without equalization calibrated; only the others are calibrated
     * again on the equalized model. How many were kept so. */
    size_t n_ranges_reused;
    /* weight_rounding as applied; with QP_WEIGHT_ROUND_ADAROUND: layers whose levels were
     * chosen, layers left at nearest (a shared weight, an input never seen) and layers the time
     * bound did not reach; their weights, and of them those at the level that is not the
     * nearest; over the chosen layers the mean output error relative to the output's energy at
     * nearest and after; its wall time; and the drift of the model written with nearest levels
     * (before bias correction, which runs after the rounding), on the same samples as
     * `outputs` (n_outputs entries, owned by the summary; NULL otherwise). */
    enum qp_weight_rounding weight_rounding;
    size_t n_rounded_layers, n_rounding_skipped, n_rounding_timed_out;
    uint64_t n_rounded_weights, n_rounded_flipped;
    double rounding_error_before, rounding_error_after, rounding_seconds;
    struct qp_quantize_drift *outputs_unrounded;
};

/* NULL-safe. */
void qp_quantize_summary_free(struct qp_quantize_summary *s);

/* Quantizes `model` (borrowed, never changed) on `calibration_data` (borrowed; NULL: synthetic
 * data) with `c` (NULL: defaults). On success *out owns the new model and *summary_out (may be
 * NULL) a summary to free. Returns QP_ERR_USAGE (bad options, a bad calibration_shapes string),
 * QP_ERR_BAD_INPUT (an already quantized model, a placement naming what the model lacks, data the
 * model cannot take, a placed tensor without a calibrated range), QP_ERR_UNSUPPORTED (an opset
 * or op qplace cannot handle), QP_ERR_NOMEM, the providers' and the engine's statuses. */
enum qp_status qp_quantize_model(const struct qp_model *model, struct qp_provider *calibration_data,
                                 const struct qp_quantize_config *c, struct qp_model **out,
                                 struct qp_quantize_summary **summary_out, struct qp_error *err);

#ifdef __cplusplus
}
#endif
#endif
