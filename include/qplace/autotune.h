/*
 * qplace/autotune.h — choose Q/DQ placement by measured latency (docs/autotune.md).
 *
 * The search behind `qplace autotune` and `qplace quantize --autotune`: the graph is cut into
 * regions whose repeated blocks share a pattern; for each pattern, schemes (which of its
 * insertion points hold Q/DQ) are raced against the current best on a latency backend and
 * adopted only when faster at 95% confidence; at the end the best placement is kept only when
 * the whole model is at least 1.02x faster than the model without Q/DQ (the guard), else the
 * placement is the empty one. The placement it returns is data: give it to qp_quantize_model
 * (qplace/quantize.h, `placement`) and the model written holds exactly it, calibrated on your
 * data — what `qplace quantize --autotune` does.
 *
 *     struct qp_autotune_config c;
 *     qp_autotune_config_default(&c);       // default mode, builtin backend, temporary folder
 *     c.mode = "quick";
 *     struct qp_autotune_summary *s = NULL;
 *     if (qp_autotune_file("model.onnx", data, &c, &s, &err) != QP_OK) goto fail;
 *     qc.placement = s->placement;          // then qp_quantize_model(model, data, &qc, ...)
 *     ... s->n_adopted, s->guard_passed ...
 *     qp_autotune_summary_free(s);
 *
 * The search reads the model from a file (each candidate is written and timed as a file).
 */
#ifndef QPLACE_AUTOTUNE_H
#define QPLACE_AUTOTUNE_H

#include <stddef.h>

#include "qplace/calib.h"
#include "qplace/placement.h"
#include "qplace/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qp_autotune_config {
    const char *mode;          /* "quick", "default" (NULL) or "extensive": 8, 16, 32 schemes */
    size_t schemes_per_region; /* schemes per pattern; 0: the mode's */
    /* Where the search's files go (placement.json, log.jsonl, pattern_cache.json,
     * autotune_state.json, optimized_final.onnx; a rerun resumes from the state). NULL: a
     * temporary folder under $TMPDIR, removed before the call returns. */
    const char *output_dir;
    const char *pattern_cache;      /* a pattern_cache.json whose schemes are tried first; NULL */
    const char *qdq_baseline;       /* a Q/DQ model whose placement seeds the search; NULL: trt */
    const char *state_file;         /* NULL: output_dir's autotune_state.json */
    const char *backend;            /* "builtin" (NULL), "trtexec" or "ort" */
    const char *timing_cache;       /* trtexec: --timingCacheFile; NULL */
    const char *trtexec_args;       /* trtexec: extra arguments (shell words); NULL */
    int warmup_runs;                /* builtin, ort: untimed runs per measurement; -1: 3 */
    int timing_runs;                /* timed runs of each model per race round, >= 4; 0: 10 */
    int quantize_mode;              /* enum qp_quant_mode (QP_QUANT_INT8 default) */
    int high_precision_dtype;       /* QP_DTYPE_FLOAT (default) or QP_DTYPE_FLOAT16 */
    const char *calibration_shapes; /* shapes of dynamic inputs, "NAME:1x3x224x224,..." */
    int n_threads;                  /* engine threads; 0: all cores */
};

/* Default mode, builtin backend, temporary folder, int8, fp32. */
void qp_autotune_config_default(struct qp_autotune_config *c);

struct qp_autotune_summary {
    size_t n_regions, n_patterns, n_points;
    size_t n_measured, n_replayed, n_adopted, n_skipped; /* races; replayed: from the state */
    double seed_median_ms, best_median_ms, reference_median_ms; /* reference: without Q/DQ */
    int guard_passed; /* 0: the placement is empty (the model without Q/DQ was as fast) */
    double seconds;
    /* The placement chosen: the search's best when the guard passed, else empty. Owned. */
    struct qp_placement *placement;
};

void qp_autotune_summary_free(struct qp_autotune_summary *s);

/* Runs the search on the model file `onnx_path`, calibrating the insertion points on
 * `calibration_data` (borrowed, reset before use; NULL: seeded synthetic data, as
 * qp_quantize_model). *out receives a summary to free. Returns QP_ERR_USAGE (bad options),
 * QP_ERR_BAD_INPUT (an unreadable or already quantized model, a bad baseline, pattern cache or
 * state file), QP_ERR_IO, QP_ERR_NOMEM and the latency backend's statuses. */
enum qp_status qp_autotune_file(const char *onnx_path, struct qp_provider *calibration_data,
                                const struct qp_autotune_config *c,
                                struct qp_autotune_summary **out, struct qp_error *err);

#ifdef __cplusplus
}
#endif

#endif
