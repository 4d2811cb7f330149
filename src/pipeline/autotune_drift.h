/*
 * Accuracy in the autotune search (docs/autotune.md, "Accuracy: --max_output_drift and
 * pareto.json"): the whole-model output drift of each placement the search measures, and the
 * latency/drift frontier of those placements.
 *
 * The drift is the accuracy budget's (qplace sensitivity / quantize --max_output_drift): kl_div
 * between the softmaxed float and fake-quantized outputs, mean per sample, summed over the float
 * outputs, on the evaluation samples: --eval_data_path, else the calibration data (in-sample),
 * else synthetic data drawn with seed 2 (quantize's evaluation seed); the first
 * `drift_samples` of them. It runs on sensitivity's evaluator (qp_sens_eval): one session of the
 * float model with an overlay on every entry of the placement that holds all insertion points,
 * planned once, the float reference computed once; a placement is one quantized pass.
 *
 *     struct qp_autotune_drift *d = NULL;
 *     if (qp_autotune_drift_open(model, every, ranges, &opts, &d, &err) != QP_OK) ...
 *     double drift;
 *     if (qp_autotune_drift_measure(d, candidate, &drift, &err) != QP_OK) ...
 *     qp_autotune_drift_free(d);
 *
 *     cJSON *measured = cJSON_CreateArray();       // one entry per measured placement
 *     cJSON_AddItemToArray(measured, qp_autotune_pareto_entry("scheme", 1.2, 0.01, 3, sig, pts));
 *     qp_autotune_pareto_write(measured, "out/pareto.json", &meta, &rows, &n_rows, &err);
 */
#ifndef QP_PIPELINE_AUTOTUNE_DRIFT_H
#define QP_PIPELINE_AUTOTUNE_DRIFT_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "calib/ranges.h"
#include "placement/placement.h"
#include "qplace/calib.h"
#include "qplace/dtype.h"
#include "qplace/model.h"
#include "qplace/status.h"

/* Evaluation samples by default: as many as the accuracy budget's ranking takes. */
#define QP_AUTOTUNE_DRIFT_SAMPLES 32
/* Bytes of the reference run the evaluator keeps (one batch of data only; qp_sens_eval). */
#define QP_AUTOTUNE_DRIFT_CACHE ((size_t)256 << 20)

/* Where the evaluation samples come from and how the drift is measured. */
struct qp_autotune_drift_options {
    const char *eval_data_path;         /* held-out samples; NULL: the calibration data */
    const char *calibration_data_path;  /* NULL (and no eval data): synthetic, seed 2 */
    const char *calibration_shapes;     /* may be NULL */
    const struct qp_data_options *data; /* borrowed; NULL: defaults */
    uint64_t max_samples;               /* the first samples only; 0: every sample */
    enum qp_quant_mode quant_mode;
    int n_threads;
};

struct qp_autotune_drift;

/* Opens the evaluation data and the evaluator over `every` (copied and checked against `model`;
 * every placement measured later must hold a subset of its slots). `model` and `ranges` are
 * borrowed for the evaluator's lifetime. QP_ERR_BAD_INPUT (data the model cannot take, no float
 * output), QP_ERR_IO, QP_ERR_USAGE, QP_ERR_NOMEM, the engine's statuses. */
enum qp_status qp_autotune_drift_open(const struct qp_model *model,
                                      const struct qp_placement *every,
                                      const struct qp_ranges *ranges,
                                      const struct qp_autotune_drift_options *o,
                                      struct qp_autotune_drift **out, struct qp_error *err);

/* The next measurement runs the whole model and becomes the reference the later ones
 * recompute from (with a single batch of evaluation data: qp_sens_eval's incremental
 * measurements; nothing otherwise). Call it when the placements to come share a part with one
 * another that they do not share with the last reference (autotune: a new pattern). Drifts
 * do not depend on it. NULL-safe. */
void qp_autotune_drift_rebase(struct qp_autotune_drift *d);

/* The drift of the model quantized with placement `p` into *drift_out. QP_ERR_BAD_INPUT when `p`
 * holds a slot outside `every` or an entry the engine cannot fake-quantize (no range). */
enum qp_status qp_autotune_drift_measure(struct qp_autotune_drift *d, const struct qp_placement *p,
                                         double *drift_out, struct qp_error *err);

/* "eval data", "calibration data (in-sample)" or "synthetic data (seed 2)" (static). */
const char *qp_autotune_drift_source(const struct qp_autotune_drift *d);
/* The path of the data, or NULL for synthetic data (borrowed from the options). */
const char *qp_autotune_drift_path(const struct qp_autotune_drift *d);
uint64_t qp_autotune_drift_samples(const struct qp_autotune_drift *d);
/* Wall time spent opening and measuring so far. */
double qp_autotune_drift_seconds(const struct qp_autotune_drift *d);
void qp_autotune_drift_free(struct qp_autotune_drift *d);

/* ---- pareto.json ---------------------------------------------------------------------------- */

/* A measured placement: `label` "seed", "scheme", "final" or "without_qdq"; pattern < 0 and
 * signature NULL for none; `points` (log.jsonl's encoding: the scheme's point indices) is
 * transferred (may be NULL). NULL on out of memory. */
cJSON *qp_autotune_pareto_entry(const char *label, double median_ms, double drift, long pattern,
                                const char *signature, cJSON *points);

/* One frontier row, for the CLI's table. */
struct qp_autotune_front {
    char label[16];
    double median_ms, drift;
    long pattern;       /* -1: none */
    size_t n_points_on; /* points of the scheme; 0 for none */
    int final;          /* the placement optimized_final.onnx holds */
    int estimated;      /* median_ms estimated from a sub-model race (pareto.json "estimated") */
};

/* What pareto.json says about how drift was measured. */
struct qp_autotune_pareto_meta {
    const char *model;
    double max_output_drift; /* < 0: none */
    const char *source, *path;
    uint64_t samples;
};

/* Writes pareto.json to `path` atomically: the frontier of `measured` (entries with a median > 0
 * and a finite drift that no other entry beats on both, at least one strictly), fastest first,
 * then every entry of `measured`; returns the frontier's rows in *rows_out (malloc'd; rows_out
 * may be NULL). QP_ERR_IO, QP_ERR_NOMEM. */
enum qp_status qp_autotune_pareto_write(const cJSON *measured, const char *path,
                                        const struct qp_autotune_pareto_meta *meta,
                                        struct qp_autotune_front **rows_out, size_t *n_rows_out,
                                        struct qp_error *err);

#endif
