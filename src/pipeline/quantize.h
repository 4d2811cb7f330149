/*
 * The quantization pipeline behind `qplace quantize` (docs/quantize.md), from file paths; the
 * in-memory form for library callers is qp_quantize_model (qplace/quantize.h), the same steps:
 *
 *   load -> refuse an already quantized model -> opset >= 19 -> placement (the trt policy with
 *   include/exclude lists and rules, or --placement_in) -> calibration of the placement's
 *   activation tensors (calib/collect.h) -> Q/DQ writer (quant/writer.h) -> atomic save ->
 *   drift of the quantized model against the float model on held-out samples.
 *
 * Calibration data (calib/data.h, also for --eval_data_path): a .npz/.npy file (inputs by
 * name), a folder of shards or of images, or none (seeded synthetic data, as
 * ModelOpt's RandomDataProvider; the report says so). Held-out samples: --eval_data_path, or the
 * last fifth of the calibration batches (at least one) when there are two or more batches; with
 * a single batch, the drift is measured on the calibration batch itself (the report says so).
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

#include "calib/calibrator.h"
#include "calib/data.h"
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
    const char *calibration_data_path; /* .npz/.npy, shard or image folder; NULL: synthetic */
    const char *eval_data_path;        /* NULL: a split of the calibration data */
    enum qp_calib_method method;       /* default entropy (ModelOpt) */
    const char *calibration_shapes;    /* "name:1x3x224x224,..." or NULL */
    const struct qp_select *select;    /* borrowed; NULL for none */
    int disable_mha_qdq;
    const char *rules_path;    /* NULL: none */
    const char *placement_in;  /* NULL: the trt policy */
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
    uint64_t n_eval_samples;
    int eval_on_calibration; /* 1: no held-out samples, drift measured on calibration data */
    int eval_source_split;   /* 1: held-out batches split from the calibration data */
    size_t n_outputs;
    struct qp_quantize_drift *outputs;
    /* The placement the writer applied (validated against the float model after opset
     * conversion; every entry with its reason, for --explain). Owned by the report. */
    struct qp_placement *placement;
    /* 1: the drift was measured before the bf16 / direct_io_types step (the engine runs neither
     * bfloat16 nor quantized graph inputs), on the model with float32 high precision. */
    int drift_before_precision;
};

void qp_quantize_report_free(struct qp_quantize_report *r);

/* Runs the pipeline. The input model is never modified; the output is written atomically and
 * only on success. *report_out (may be NULL) receives a report to free. Returns QP_ERR_USAGE
 * (missing onnx_path), QP_ERR_BAD_INPUT (output path equal to the input, an already quantized
 * model, a placement naming missing nodes or tensors, bad calibration data), QP_ERR_IO,
 * QP_ERR_UNSUPPORTED, QP_ERR_NOMEM, and the statuses of the engine. */
enum qp_status qp_quantize(const struct qp_quantize_options *o,
                           struct qp_quantize_report **report_out, struct qp_error *err);

#endif
