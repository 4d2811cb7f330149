/*
 * The quantization pipeline behind `qplace quantize` (docs/quantize.md), from file paths; the
 * in-memory form for library callers is qp_quantize_model (qplace/quantize.h), the same steps:
 *
 *   load -> refuse an already quantized model -> opset >= 19 -> [equalization: the same
 *   quantization of the unequalized model for the "before" drift, then rescaled float weights on
 *   both copies, adjust/equalize.h] -> placement (the trt policy with
 *   include/exclude lists and rules, or --placement_in) -> calibration of the placement's
 *   activation tensors (calib/collect.h), or ranges from --ranges_in / --calibration_cache_path
 *   -> with an accuracy budget, the placement minus the most sensitive nodes (pipeline/budget.h)
 *   -> [--bias_correction, or auto (the CLI's default) with the user's calibration data:
 *   biases corrected on it (adjust/bias_correct.h)] -> Q/DQ writer (quant/writer.h) -> drift of
 *   the quantized model against the float model (auto: of both models, the corrected one kept
 *   only when its mean cosine is higher) -> atomic save.
 *
 * Calibration data (calib/data.h, also for --eval_data_path): a .npz/.npy file (inputs by
 * name), a folder of shards or of images, or none (seeded synthetic data, as
 * ModelOpt's RandomDataProvider; the report says so). Calibration uses every batch the user gave,
 * as ModelOpt does. The drift is measured on --eval_data_path when given, else on the calibration
 * data itself (in-sample; the report says so), else (no data at all) on synthetic data drawn with
 * another seed.
 *
 * Ranges from files (docs/quantize.md, "Ranges from a file"): --ranges_in (a `qplace calibrate`
 * ranges JSON) and --calibration_cache_path (a TensorRT calibration cache, amax = scale * 127;
 * its entries replace those of --ranges_in when both are given). Either one means no calibration
 * runs: every activation tensor of the placement must have a range in the files (a missing one
 * is QP_ERR_BAD_INPUT naming the tensor and the file), ranges for tensors the placement does not
 * quantize are reported with one warning (qp_log) and not used. --calibration_data_path, when
 * given with them, is only the drift data.
 *
 * --override_shapes ("x:1x3x224x224,..."): the named graph inputs' dynamic dims are fixed to the
 * given values in both the written model and the model calibrated (a static dim must be given
 * as it is), and a dim_param so fixed is replaced by the value wherever it appears in the graph's
 * value types (outputs, value_info), as a symbolic dim of the same name is the same value.
 *
 *     struct qp_quantize_options o;
 *     qp_quantize_options_default(&o);
 *     o.onnx_path = "model.onnx"; o.calibration_data_path = "calib.npz";
 *     struct qp_quantize_report *r = NULL;
 *     if (qp_quantize(&o, &r, &err) != QP_OK) ...
 *     ... r->output_path, r->writer, r->outputs[i].cosine ...
 *     qp_quantize_report_free(r);
 */
#ifndef QP_PIPELINE_QUANTIZE_H
#define QP_PIPELINE_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

#include "adjust/adaround.h"
#include "adjust/bias_correct.h"
#include "adjust/equalize.h"
#include "calib/calibrator.h"
#include "calib/data.h"
#include "pipeline/budget.h"
#include "placement/placement.h"
#include "quant/policy_trt.h"
#include "placement/select.h"
#include "quant/writer.h"
#include "qplace/quantize.h"
#include "qplace/status.h"

struct qp_quantize_options {
    const char *onnx_path;   /* required */
    const char *output_path; /* NULL: <model>.quant.onnx */
    enum qp_quant_mode mode;
    const char *calibration_data_path;  /* .npz/.npy, shard or image folder; NULL: synthetic */
    const char *eval_data_path;         /* NULL: a split of the calibration data */
    enum qp_calib_method method;        /* default entropy (ModelOpt) */
    const char *calibration_shapes;     /* "name:1x3x224x224,..." or NULL */
    double percentile;                  /* percentile method, in (0, 100]; 0: 99.999 */
    const char *ranges_in;              /* ranges JSON instead of calibration; NULL: none */
    const char *calibration_cache_path; /* TensorRT cache: its scales over the ranges; NULL */
    const char *override_shapes;        /* "name:1x3x224x224,...": fixes dynamic input dims */
    const struct qp_select *select;     /* borrowed; NULL for none */
    int disable_mha_qdq;
    const char *rules_path;   /* NULL: none */
    const char *placement_in; /* NULL: the trt policy */
    /* A placement applied as placement_in's would be (borrowed; copied), used when placement_in
     * is NULL; placement_label names it in the report ("autotune"). NULL: none. */
    const struct qp_placement *placement;
    const char *placement_label;
    const char *placement_out; /* NULL: not written */
    int dq_only;
    enum qp_dtype high_precision; /* QP_DTYPE_FLOAT */
    int n_threads;                /* 0: all cores */
    /* Borrowed: caps and image flags for both data paths (calib/data.h); NULL: defaults. */
    const struct qp_data_options *data;
    /* The written model (docs/quantize.md "Output"). high_precision may also be
     * QP_DTYPE_BFLOAT16. opset: 0 for max(model, 19); 13..18 are raised to 19 and a value below
     * the model's opset keeps the model's (a logged warning each); above 21 is QP_ERR_USAGE. */
    int64_t opset;
    int use_external_data_format; /* 1: tensors >= 1 KiB in "<output file name>_data" */
    const char *const *op_types_to_exclude_fp16; /* borrowed; kept float32 in fp16/bf16 */
    size_t n_op_types_to_exclude_fp16;
    int direct_io_types; /* 1: graph I/O in the high precision type, graph-input Q removed */
    enum qp_weight_clipping weight_clipping; /* default QP_WEIGHT_CLIP_MSE */
    /* The accuracy budget (pipeline/budget.h): after calibration, the most sensitive quantized
     * nodes are excluded one at a time until the drift (kl_div, summed over outputs) is at most
     * max_output_drift (< 0, the default: no bound) and every class-score output's top-1
     * agreement is at least min_top1_agreement (0, the default: no bound), on the evaluation
     * data (else the calibration data). */
    double max_output_drift;
    double min_top1_agreement;
    /* enum qp_equalization bits (default none): rescaled float weights before placement and
     * calibration (adjust/equalize.h); not combinable with ranges_in / calibration_cache_path.
     * smoothquant_alpha in [0, 1] (qp_quantize_options_default: 0.5). */
    unsigned equalization;
    double smoothquant_alpha;
    /* enum qp_bias_correction (qplace/quantize.h): biases corrected by the mean output shift
     * on the calibration data (adjust/bias_correct.h) before the final write: off
     * (qp_quantize_options_default's), on, or auto (with the user's calibration data, kept
     * only when it raises the drift's mean cosine; the CLI's default). */
    int bias_correction;
    /* enum qp_weight_rounding (qplace/quantize.h): adaround chooses the weights' levels by
     * layer-output error (adjust/adaround.h) after calibration, before bias correction;
     * weight_rounding_seconds bounds it (0: the default). */
    enum qp_weight_rounding weight_rounding;
    double weight_rounding_seconds;
};

void qp_quantize_options_default(struct qp_quantize_options *o);

/* struct qp_quantize_drift: qplace/quantize.h. */

struct qp_quantize_report {
    char *output_path;
    char *placement_source; /* "trt policy", "trt policy + rules", "placement file <path>" */
    struct qp_writer_stats writer;
    const char *calibration_source; /* "npz", "npy", "images", "synthetic" (static) */
    const char *method;             /* static */
    uint64_t n_calib_samples, n_calib_batches;
    size_t auto_methods[QP_CALIB_AUTO]; /* --calibration_method auto: tensors per method */
    size_t n_auto_fallback;             /* of them, entropy for want of a consumer to evaluate */
    /* With equalization: ranges taken from the run without it (tensors it does not change),
     * and tensors calibrated again */
    size_t n_ranges_reused, n_ranges_recalibrated;
    uint64_t n_eval_samples;
    int eval_on_calibration; /* 1: drift measured on the calibration data (in-sample) */
    int calibrated;          /* 0: the ranges came from --ranges_in / --calibration_cache_path */
    size_t n_file_ranges;    /* ranges read from those files */
    size_t n_unused_ranges;  /* of them, for tensors the placement does not quantize */
    size_t n_overridden;     /* graph inputs fixed by --override_shapes */
    size_t n_outputs;
    struct qp_quantize_drift *outputs;
    /* The placement the writer applied (validated against the float model after opset
     * conversion; every entry with its reason, for --explain). Owned by the report. */
    struct qp_placement *placement;
    /* 1: the drift was measured before the bf16 / direct_io_types step (the engine runs neither
     * bfloat16 nor quantized graph inputs), on the model with float32 high precision. */
    int drift_before_precision;
    int has_budget;                   /* an accuracy budget ran */
    struct qp_quantize_budget budget; /* its outcome */
    /* Equalization: the bits and alpha applied, what the plan did (NULL when off; owned), and
     * the drift of the same quantization of the model without equalization (n_outputs entries
     * in the order of `outputs`; NULL when off; owned). */
    unsigned equalization;
    double smoothquant_alpha;
    struct qp_equalize_report *equalize;
    struct qp_quantize_drift *outputs_before;
    size_t n_outputs_before;
    /* --bias_correction: 1 when it ran, what it did, and the drift of the model written without
     * it on the same samples (n_outputs entries, owned; NULL when it did not run). */
    int bias_correction;
    struct qp_bias_correct_stats bias;
    struct qp_quantize_drift *outputs_uncorrected;
    /* auto: bias_auto 1 when it ran; bias_kept 0 when the model was written without the
     * correction (outputs then that model's drift, outputs_uncorrected NULL and
     * outputs_corrected the corrected model's, n_outputs entries, owned) */
    int bias_auto, bias_kept;
    struct qp_quantize_drift *outputs_corrected;
    /* --weight_clipping mse: the drift of the same model written with absmax weight scales, on
     * the same samples (n_outputs entries, owned; NULL otherwise). */
    struct qp_quantize_drift *outputs_unclipped;
    /* --weight_rounding adaround: 1 when it ran, what it did, and the drift of the model written
     * with nearest levels (as mq stood before the rounding; n_outputs entries, owned; NULL when
     * it did not run). */
    int weight_rounding;
    struct qp_adaround_stats rounding;
    struct qp_quantize_drift *outputs_unrounded;
};

void qp_quantize_report_free(struct qp_quantize_report *r);

/* Runs the pipeline. The input model is never modified; the output is written atomically and
 * only on success. *report_out (may be NULL) receives a report to free. Returns QP_ERR_USAGE
 * (missing onnx_path, a percentile outside (0, 100], a malformed --override_shapes),
 * QP_ERR_BAD_INPUT (output path equal to the input, an already quantized model, a placement
 * naming missing nodes or tensors, bad calibration data, a batch shape over the data cap, a
 * placed tensor without a range in --ranges_in / --calibration_cache_path, an --override_shapes
 * entry the model's inputs do not take), QP_ERR_IO,
 * QP_ERR_USAGE also for equalization with ranges from files or an alpha outside [0, 1],
 * QP_ERR_UNSUPPORTED, QP_ERR_NOMEM, and the statuses of the engine. */
enum qp_status qp_quantize(const struct qp_quantize_options *o,
                           struct qp_quantize_report **report_out, struct qp_error *err);

#endif
