/*
 * The sensitivity pipeline behind `qplace sensitivity` (docs/sensitivity.md):
 *
 *   load -> refuse an already quantized model -> opset >= 19 -> placement (the trt policy, or
 *   placement_in; plus probe-only entries for scoped op types it does not quantize) ->
 *   calibration data (calib/data.h; synthetic without a path) -> one calibration of the full
 *   placement (qp_sens_calibrate), or the ranges_in file -> scores (qp_sens_score) -> ranking ->
 * picker (coverage / threshold / blocks) or the accuracy budget -> the JSON report, the exclusions
 *   file and the placement minus the exclusions, written only when everything succeeded.
 *
 *     struct qp_sensitivity_run_options o;
 *     qp_sensitivity_run_options_default(&o);
 *     o.onnx_path = "model.onnx"; o.calibration_data_path = "calib.npz";
 *     o.sens.granularity = QP_SENS_NODE;
 *     struct qp_sensitivity_report *r = NULL;
 *     if (qp_sensitivity_run(&o, &r, &err) != QP_OK) ...
 *     for (size_t k = 0; k < r->ranking.n_scored; k++) ... r->result->targets[r->ranking.order[k]]
 *     qp_sensitivity_report_free(r);
 *
 * The driver never prints: the caller sees the stages through o->on_event (the CLI prints its
 * table there) and the probes through o->sens.progress.
 */
#ifndef QP_PIPELINE_SENSITIVITY_H
#define QP_PIPELINE_SENSITIVITY_H

#include <stddef.h>
#include <stdint.h>

#include "calib/calibrator.h"
#include "calib/data.h"
#include "placement/placement.h"
#include "qplace/status.h"
#include "sensitivity/sensitivity.h"

/* ---- ranking and exclusions (shared by the driver and qplace/sensitivity.h) ---------------- */

/* The scored targets of a result, ranked. */
struct qp_sens_ranking {
    size_t n_scored, n_unprobed, n_failed;
    size_t *order;     /* n_scored target indices: highest score first, ties in target order */
    double total_mass; /* the sum of the scores */
};

/* Ranks `r` into *out (released with qp_sens_ranking_release). QP_ERR_NOMEM. */
enum qp_status qp_sens_rank(const struct qp_sens_result *r, struct qp_sens_ranking *out,
                            struct qp_error *err);
void qp_sens_ranking_release(struct qp_sens_ranking *k);

/* What the picker, or the accuracy budget, excluded. */
struct qp_sens_exclusions {
    struct qp_pick_result *pick; /* groups over the ranked targets (member k: order[k]) */
    size_t n_excluded;
    size_t *excluded; /* target indices, in the order they were chosen */
    double excluded_mass;
    int budget;                        /* an accuracy budget decided */
    struct qp_sens_budget_goal goal;   /* budget: what it asked */
    size_t n_budget_groups;            /* budget: groups excluded */
    size_t n_budget_candidates;        /* budget: groups the search could exclude */
    struct qp_sens_budget_step *steps; /* budget: the model after 0 .. n_budget_candidates
                                          groups (those the search measured) */
    int budget_met;
    struct qp_placement *placement; /* budget: the placement minus the exclusions */
};

/* The picker over the ranked targets with `po` (its blocks borrowed) or, with a budget (goal
 * non-NULL with a bound set), the accuracy budget: the picked groups (at most po->max_nodes)
 * excluded one at a time until the model meets the goal (qp_sens_budget). Everything is borrowed
 * for the call; *out is released with qp_sens_exclusions_release. A near-tie warning of the picker
 * is logged. Returns QP_ERR_USAGE (bad picker options), QP_ERR_NOMEM and the statuses of
 * qp_sens_budget. */
enum qp_status qp_sens_exclude(const struct qp_model *m, const struct qp_placement *pl,
                               struct qp_provider *prov, const struct qp_ranges *ranges,
                               const struct qp_sens_options *so, const struct qp_sens_result *r,
                               const struct qp_sens_ranking *k, const struct qp_pick_options *po,
                               const struct qp_sens_budget_goal *goal,
                               struct qp_sens_exclusions *out, struct qp_error *err);
/* 1 when `g` (may be NULL) sets a bound. */
int qp_sens_goal_set(const struct qp_sens_budget_goal *g);
void qp_sens_exclusions_release(struct qp_sens_exclusions *x);

/* The placement `pl` minus every entry of the excluded targets (the budget's own placement
 * when it made one) into *out (a new placement). QP_ERR_NOMEM. */
enum qp_status qp_sens_exclusions_placement(const struct qp_placement *pl,
                                            const struct qp_sens_result *r,
                                            const struct qp_sens_exclusions *x,
                                            struct qp_placement **out, struct qp_error *err);

/* ---- the driver ---------------------------------------------------------------------------- */

struct qp_sensitivity_report;

/* Stages the driver reports through on_event, each before any output is written. */
enum qp_sensitivity_event {
    QP_SENSITIVITY_EVENT_SCORING, /* calibrated; the probes start (o->sens.progress follows) */
    QP_SENSITIVITY_EVENT_SCORED,  /* scored and ranked (result, ranking set) */
    QP_SENSITIVITY_EVENT_PICKED   /* exclusions chosen (only when picking) */
};

struct qp_sensitivity_run_options {
    const char *onnx_path;              /* required */
    const char *calibration_data_path;  /* .npz/.npy, shard or image folder; NULL: synthetic */
    const char *calibration_shapes;     /* "name:1x3x224x224,..." or NULL */
    const struct qp_data_options *data; /* borrowed; NULL: defaults */
    uint64_t n_synthetic_samples;       /* without data (default 100, ModelOpt's) */
    enum qp_calib_method method;        /* default entropy */
    double percentile;                  /* percentile method: in (0, 100]; 0: 99.999 */
    /* A ranges JSON (qplace calibrate) used instead of calibrating; NULL: calibrate. Every
     * activation tensor of the placement needs a range in it. */
    const char *ranges_in;
    const char *placement_in; /* NULL: the trt policy for sens.qtype */
    /* Scoring; progress hooks included. sens.scope names are checked against the model (a
     * usage error otherwise); with quantize_one, scoped op types the placement does not quantize
     * are probed on their own entries (qp_sens_scope_placement), calibrated with the rest. */
    struct qp_sens_options sens;
    int picking;                 /* 1: pick exclusions (pick, blocks, max_output_drift) */
    struct qp_pick_options pick; /* blocks: set by the driver from blocks_path */
    const char *blocks_path;     /* NULL: each target its own group */
    double max_output_drift;     /* < 0 (default): no drift bound */
    double min_top1_agreement;   /* in (0, 1]: the top-1 bound; <= 0 (default): none */
    const char *output_json;     /* NULL: <model stem>.sensitivity.json */
    const char *exclusions_out;  /* NULL: not written (needs picking) */
    const char *placement_out;   /* NULL: <stem>.sensitivity.placement.json with a budget,
                                    else not written (needs picking) */
    void (*on_event)(enum qp_sensitivity_event ev, const struct qp_sensitivity_report *r,
                     void *user); /* may be NULL */
    void *user;
    /* May be NULL: set to 1 when the failure is a bad flag value (calibration_shapes, picker
     * options) that the CLI reports with its usage hint, else 0. */
    int *usage_error_out;
};

void qp_sensitivity_run_options_default(struct qp_sensitivity_run_options *o);

struct qp_sensitivity_report {
    struct qp_sens_result *result;
    struct qp_sens_ranking ranking;
    int picking;
    struct qp_sens_exclusions ex; /* picking only */
    char *calibration_data;       /* the provider's source ("npz", "images", "synthetic", ...) */
    int synthetic;                /* no calibration_data_path */
    uint64_t n_calib_samples;     /* calibrated here, or the ranges_in file's count */
    char *ranges_method;          /* ranges_in: the file's method, or NULL when it says none */
    double t_start, c_start;      /* qp_clock_seconds / qp_clock_cpu_seconds at the start */
    double calibration_seconds;
    char *json_path;       /* written */
    char *exclusions_path; /* written, or NULL */
    char *placement_path;  /* written, or NULL */
};

void qp_sensitivity_report_free(struct qp_sensitivity_report *r);

/* Runs the pipeline. The input model is never modified; the outputs are written atomically and
 * only on success. *report_out (may be NULL) receives a report to free. Returns QP_ERR_USAGE
 * (missing onnx_path, a bad calibration_shapes or picker option, an unknown scope op type, two
 * outputs on one path), QP_ERR_BAD_INPUT (an output on the input model, an already quantized
 * model, a placement naming missing nodes or tensors, bad calibration data, blocks or ranges file,
 * a placement activation tensor the ranges file lacks), QP_ERR_IO, QP_ERR_UNSUPPORTED,
 * QP_ERR_NOMEM, and the statuses of the engine. */
enum qp_status qp_sensitivity_run(const struct qp_sensitivity_run_options *o,
                                  struct qp_sensitivity_report **report_out, struct qp_error *err);

/* The JSON report (docs/sensitivity.md; what `qplace sensitivity` writes) of `r` for `o`, ending
 * in a newline; "timings" holds total_s / total_cpu_s measured now. *text_out is malloc'd.
 * QP_ERR_NOMEM. */
enum qp_status qp_sensitivity_report_json(const struct qp_sensitivity_run_options *o,
                                          const struct qp_sensitivity_report *r, char **text_out,
                                          struct qp_error *err);

#endif
