/*
 * The accuracy budget of `qplace quantize` (docs/quantize.md, "Accuracy budget"):
 *
 *   calibrated ranges of the full placement -> every quantized node ranked by sensitivity
 *   (qp_sens_score: node targets, kl_div, quantize_one, on the first QP_BUDGET_RANK_SAMPLES
 *   samples of the calibration data: a ranking needs fewer samples than a decision) -> the
 *   highest-ranked nodes excluded one at a time (qp_sens_budget) until the whole quantized
 *   model, on the held-out data, meets the goal (drift <= max_output_drift and/or top-1
 *   agreement >= min_top1_agreement) -> the placement minus those nodes, which the pipeline
 *   then writes with the same ranges (a tensor's range does not depend on what else is
 *   quantized: calibration runs the float model).
 *
 * The runs use the engine's fake quantization with the weight scales the writer gives
 * (weight_clip_mse: each channel's least-error clipping, else its absmax), so the measured model
 * is the written one up to bias correction and the high precision type (the pipeline's own
 * drift, measured on the written model, says where it ended).
 *
 *     struct qp_quantize_budget b = {0};
 *     struct qp_placement *kept = NULL;
 *     struct qp_sens_budget_goal goal = {.max_drift = -1, .min_top1 = 0.99};
 *     if (qp_quantize_budget_run(mf, pl, cal, ev, ranges, QP_QUANT_INT8, 1, 0, &goal, &kept,
 *                                &b, &err) != QP_OK) ...
 *     ... b.n_excluded, b.excluded[i], b.after.top1 ...
 *     qp_quantize_budget_release(&b);
 */
#ifndef QP_PIPELINE_BUDGET_H
#define QP_PIPELINE_BUDGET_H

#include <stddef.h>

#include "calib/provider.h"
#include "calib/ranges.h"
#include "placement/placement.h"
#include "qplace/model.h"
#include "qplace/status.h"
#include "sensitivity/sensitivity.h"

#define QP_BUDGET_RANK_SAMPLES 32

struct qp_quantize_budget {
    struct qp_sens_budget_goal goal;          /* as asked */
    int met;                                  /* every bound held after the exclusions */
    size_t n_ranked;                          /* quantized nodes scored and ranked */
    size_t n_excluded;                        /* nodes excluded */
    char **excluded;                          /* their names, most sensitive first */
    struct qp_sens_budget_step before, after; /* everything quantized; after the exclusions */
    double seconds;                           /* ranking and budget runs */
};

/* Ranks the quantized nodes of `pl` on `rank_data` and excludes the most sensitive one at a
 * time until the model meets `goal` on `budget_data` (the same provider may be given twice).
 * `model` is the float model `pl` is validated against (toposorted, opset >= 19), `ranges` the
 * calibrated ranges of every activation tensor of `pl`. On success *placement_out owns the
 * placement minus the excluded nodes' entries (all of `pl` when it met the goal as it was) and
 * *out the outcome (release with qp_quantize_budget_release); a goal not met is not an error:
 * out->met is 0 and every ranked node is excluded (a placement with nothing to rank is measured
 * as it is). Returns QP_ERR_USAGE (no bound in `goal`, a top-1 bound outside (0, 1]),
 * QP_ERR_BAD_INPUT (a top-1 bound on a model without class-score outputs, a placed tensor the
 * engine cannot fake-quantize), QP_ERR_NOMEM and the engine's statuses. */
enum qp_status qp_quantize_budget_run(
    const struct qp_model *model, const struct qp_placement *pl, struct qp_provider *rank_data,
    struct qp_provider *budget_data, const struct qp_ranges *ranges, enum qp_quant_mode mode,
    int weight_clip_mse, int n_threads, const struct qp_sens_budget_goal *goal,
    struct qp_placement **placement_out, struct qp_quantize_budget *out, struct qp_error *err);

void qp_quantize_budget_release(struct qp_quantize_budget *b);

#endif
