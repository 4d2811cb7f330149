/*
 * `qplace quantize --autotune` (docs/autotune.md, "Integrated: quantize --autotune"): the
 * autotune search (pipeline/autotune.h) chooses the placement, then quantize's pipeline
 * (pipeline/quantize.h) applies exactly that placement, as --placement_in would:
 *
 *   check the output paths -> qp_autotune into the autotune options' output_dir (NULL: a
 *   temporary folder, removed at the end) -> the placement: the search's best when the
 *   performance guard passed, else the empty placement (the model without Q/DQ was as fast) ->
 *   qp_quantize with that placement: calibration of exactly its tensors with quantize's method
 *   and data, the writer, the drift -> quantize's output_path (and placement_out).
 *
 * The quantize options must not choose a placement of their own (placement_in, placement,
 * select, rules_path, disable_mha_qdq: QP_ERR_USAGE). A stop request (the autotune options'
 * `stop`) during the search, or before the quantization starts, ends the call with QP_OK and
 * `interrupted` set: nothing written but the search's state (kept when output_dir was given).
 *
 *     struct qp_quantize_options q; qp_quantize_options_default(&q);
 *     struct qp_autotune_options a; qp_autotune_options_default(&a);
 *     q.onnx_path = a.onnx_path = "model.onnx"; q.output_path = "model.quant.onnx";
 *     a.backend = backend; a.mode = QP_AUTOTUNE_QUICK;
 *     struct qp_quantize_autotune_report *r = NULL;
 *     if (qp_quantize_autotune(&q, &a, &r, &err) != QP_OK) ...
 *     ... r->search->n_adopted, r->search->guard_passed, r->quantize->output_path ...
 *     qp_quantize_autotune_report_free(r);
 */
#ifndef QP_PIPELINE_QUANTIZE_AUTOTUNE_H
#define QP_PIPELINE_QUANTIZE_AUTOTUNE_H

#include "pipeline/autotune.h"
#include "pipeline/quantize.h"

struct qp_quantize_autotune_report {
    struct qp_autotune_report *search;   /* owned; NULL only when the search failed */
    struct qp_quantize_report *quantize; /* owned; NULL when interrupted */
    int interrupted;                     /* stopped: no model written */
    int temporary_dir;                   /* 1: the search's folder was temporary and is gone */
    int empty_placement;                 /* 1: the guard failed, the model has no Q/DQ */
};

void qp_quantize_autotune_report_free(struct qp_quantize_autotune_report *r);

/* The two steps on their own (the CLI stops catching Ctrl-C between them): the checks and the
 * search (*report_out always set on QP_OK; `interrupted` when stopped), then the quantization
 * of the chosen placement into r->quantize (QP_ERR_USAGE on an interrupted report). */
enum qp_status qp_quantize_autotune_search(const struct qp_quantize_options *q,
                                           const struct qp_autotune_options *a,
                                           struct qp_quantize_autotune_report **report_out,
                                           struct qp_error *err);
enum qp_status qp_quantize_autotune_apply(const struct qp_quantize_options *q,
                                          struct qp_quantize_autotune_report *r,
                                          struct qp_error *err);

/* Runs the search, then quantize with its placement. `q` and `a` are borrowed; a's onnx_path
 * must be q's (NULL takes q's). *report_out (may be NULL) receives a report to free. Returns
 * QP_ERR_USAGE (a placement choice in `q`, a different model path, no backend), the statuses of
 * qp_autotune and of qp_quantize, QP_ERR_IO when no temporary folder can be made. */
enum qp_status qp_quantize_autotune(const struct qp_quantize_options *q,
                                    const struct qp_autotune_options *a,
                                    struct qp_quantize_autotune_report **report_out,
                                    struct qp_error *err);

#endif
